//! Incremental snapshots: an `execute-snapshot` signal of type `incremental` (Debezium's
//! default) copies the tables it names in chunks while streaming goes on, with the watermark
//! algorithm Debezium takes from Netflix's DBLog.
//!
//! For each chunk the task, between two source transactions, inserts a `snapshot-window-open`
//! row into the signal table, reads up to `incremental.snapshot.chunk.size` rows after the last
//! key handed out (in key order, up to the table's largest key when its copy started), and
//! inserts a `snapshot-window-close` row (or, with
//! `incremental.snapshot.watermarking.strategy=INSERT_DELETE`, deletes its open row: the
//! deletion is the close watermark); each statement commits on its own. The rows wait in a
//! [`Window`] until the stream reaches the close watermark. A change of the same table that the
//! stream decodes between the two watermarks committed while the chunk was read, so it is as new
//! as the chunk's row or newer: that row is dropped from the window. At the close watermark the
//! rows left are handed out as `r` events (`source.snapshot = "incremental"`) in the
//! watermark's transaction, whose offset says how far the copy got.
//!
//! PostgreSQL makes a commit visible only after writing its commit record, so a transaction
//! can precede the open watermark in the WAL and still be invisible to the chunk's read (for
//! microseconds, or as long as it waits for a synchronous standby). Its change goes out before
//! the window opens and the chunk holds the row as it was before: handed out at the close
//! watermark, that older copy would undo the change downstream. So a chunk is read in a
//! repeatable-read transaction whose snapshot names the transactions it does not see
//! ([`ChunkTable::unseen`]); a change by one of them replaces the chunk's row wherever the
//! stream meets it before the close watermark, and a chunk whose read missed a transaction the
//! stream handed out already ([`RecentXids`]) is dropped and read again a second later.
//! (Debezium reads the chunk right after the open watermark and has this race.)
//!
//! Invariants:
//! - [`Progress::after`] moves only when a chunk's rows are handed out, in the same batch as
//!   the offset that carries it; after a restart the next chunk is read after it again, under
//!   new watermarks (those of a window this task did not open are ignored);
//! - a window holds at most one chunk; no new chunk is read while one is held or a source
//!   transaction is open;
//! - tables are read in the order of their key columns, compared as a row (`(k1, k2) > (…)`),
//!   so a key must be unique and not null: a primary key, or `message.key.columns` naming such
//!   columns. Tables without a key are not copied (logged).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use futures_util::StreamExt;
use headwater_api::{ConnectError, Struct};
pub use headwater_connector_common::incremental::{
    self as common, chunk_id, Progress, TableRequest,
};
use tokio_postgres::Client;

use crate::catalog::{quote_ident, quote_literal};
use crate::event::{RawColumn, TableId, TableSchema};
use crate::snapshot::CopyParser;
use crate::types::MappingConfig;

fn key_columns(ts: &TableSchema) -> Vec<String> {
    ts.key_fields
        .iter()
        .map(|&k| quote_ident(&ts.columns[k].def.name))
        .collect()
}

/// The key columns as text, named apart from the columns themselves (an output column named
/// like a key column would make `ORDER BY` sort by the text, or be ambiguous).
fn key_texts(keys: &[String]) -> String {
    keys.iter()
        .enumerate()
        .map(|(i, k)| format!("{k}::text AS hw_key_{i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn key_literals(key: &[String]) -> String {
    key.iter()
        .map(|k| quote_literal(k))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The statement reading the largest key of a table (each key column as text).
pub fn max_key_statement(ts: &TableSchema, condition: Option<&str>) -> String {
    let cols = key_columns(ts);
    let filter = condition.map_or(String::new(), |c| format!(" WHERE ({c}\n)"));
    format!(
        "SELECT {} FROM {}{filter} ORDER BY {} LIMIT 1",
        key_texts(&cols),
        ts.relation(),
        cols.iter()
            .map(|c| format!("{c} DESC"))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// The `COPY` of one chunk: the captured columns, then each key column as text; the rows after
/// `after` up to `max` in key order. Key literals are untyped, so they take the key columns'
/// types in the row comparison.
pub fn chunk_statement(
    ts: &TableSchema,
    after: Option<&[String]>,
    max: &[String],
    condition: Option<&str>,
    limit: usize,
) -> String {
    let keys = key_columns(ts);
    let row = format!("({})", keys.join(", "));
    let mut select: Vec<String> = ts
        .columns
        .iter()
        .map(|c| quote_ident(&c.def.name))
        .collect();
    select.push(key_texts(&keys));
    let mut conds = Vec::new();
    if let Some(a) = after {
        conds.push(format!("{row} > ({})", key_literals(a)));
    }
    conds.push(format!("{row} <= ({})", key_literals(max)));
    if let Some(c) = condition {
        // On its own line: a trailing `--` comment must not swallow what follows.
        conds.push(format!("({c}\n)"));
    }
    format!(
        "COPY (SELECT {} FROM {} WHERE {} ORDER BY {} LIMIT {limit}) TO STDOUT (FORMAT binary)",
        select.join(", "),
        ts.relation(),
        conds.join(" AND "),
        keys.join(", "),
    )
}

/// Why a chunk could not be read.
#[derive(Debug)]
pub enum ChunkError {
    Sql(tokio_postgres::Error),
    /// The rows are not what the table's schema says (a value that does not decode).
    Data(String),
}

impl From<tokio_postgres::Error> for ChunkError {
    fn from(e: tokio_postgres::Error) -> Self {
        ChunkError::Sql(e)
    }
}

/// A chunk's rows in key order, and the last row's key as text (`None`: no row).
pub type ChunkRows = (Vec<Struct>, Option<Vec<String>>);

/// What a held chunk knows of its table and of the read that copied it.
pub struct ChunkTable {
    pub schema: Arc<TableSchema>,
    /// The transactions (top-level xids, as pgoutput names them) in progress when the chunk's
    /// read took its snapshot. PostgreSQL makes a commit visible only after writing its commit
    /// record, so one of them may commit before the open watermark in the WAL and still be
    /// invisible to the read: its changes of the table are newer than the chunk's rows even
    /// though the stream decodes them before the window opens.
    pub unseen: HashSet<u32>,
}

/// A chunk held until its close watermark (its table's schema rides along).
pub type Window = common::Window<ChunkTable>;

/// Whether a change of `table` by transaction `xid` replaces the window's rows: once the
/// stream passed the open watermark, any; before, only one the chunk's read did not see.
pub fn covers(window: &Window, table: &TableId, xid: Option<u32>) -> bool {
    window.table.schema.id == *table
        && (window.open || xid.is_some_and(|x| window.table.unseen.contains(&x)))
}

/// What the stream handed out last: the last [`RecentXids::CAPACITY`] transactions, and while
/// an incremental snapshot runs, which tables their changes were of. A chunk whose read did
/// not see one of those transactions ([`ChunkTable::unseen`]) may hold rows it changed, and
/// its events went out already: the chunk is read again later, once the transaction is
/// visible. (A transaction stays invisible after its commit record only while it waits, e.g.
/// for a synchronous standby the task's own session does not wait for.) A transaction whose
/// tables are known counts only for a chunk of one of them; one that began before the
/// snapshot ran counts for every chunk.
#[derive(Default)]
pub struct RecentXids {
    /// Transactions in the order they began.
    order: VecDeque<u32>,
    /// Each transaction's tables (keys of their ids) when tracked, `None` when not.
    tables: HashMap<u32, Option<Vec<u64>>>,
    /// The last change recorded, to skip a transaction's run of changes of one table.
    last: Option<(u32, u64)>,
}

fn table_key(table: &TableId) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    table.hash(&mut h);
    h.finish()
}

impl RecentXids {
    pub const CAPACITY: usize = 16_384;

    /// A transaction the stream hands out (its begin); `tracked`: an incremental snapshot
    /// runs, so its changes' tables are recorded ([`RecentXids::changed`]).
    pub fn began(&mut self, xid: u32, tracked: bool) {
        let tables = tracked.then(Vec::new);
        if self.tables.insert(xid, tables).is_some() {
            return;
        }
        self.order.push_back(xid);
        if self.order.len() > Self::CAPACITY {
            if let Some(old) = self.order.pop_front() {
                self.tables.remove(&old);
            }
        }
    }

    /// A change of `table` by transaction `xid`, handed out while an incremental snapshot
    /// runs (recorded when the transaction is tracked).
    pub fn changed(&mut self, xid: u32, table: &TableId) {
        let key = table_key(table);
        if self.last == Some((xid, key)) {
            return;
        }
        self.last = Some((xid, key));
        if let Some(Some(tables)) = self.tables.get_mut(&xid) {
            if !tables.contains(&key) {
                tables.push(key);
            }
        }
    }

    /// One of `unseen` handed out already that may have changed `table`, if any.
    pub fn handed_out(&self, unseen: &HashSet<u32>, table: &TableId) -> Option<u32> {
        let key = table_key(table);
        unseen.iter().copied().find(|x| match self.tables.get(x) {
            None => false,
            Some(None) => true,
            Some(Some(tables)) => tables.contains(&key),
        })
    }
}

/// The in-progress transactions of a `pg_current_snapshot()` text (`xmin:xmax:xip,...`),
/// each as its 32-bit xid (the epoch dropped, as pgoutput sends them).
pub fn in_progress_xids(snapshot: &str) -> Result<HashSet<u32>, String> {
    let mut parts = snapshot.trim().splitn(3, ':');
    let (Some(_xmin), Some(_xmax), Some(xip)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!("not a snapshot: {snapshot:?}"));
    };
    xip.split(',')
        .filter(|x| !x.is_empty())
        .map(|x| {
            x.parse::<u64>()
                .map(|full| full as u32)
                .map_err(|_| format!("not a transaction id in the snapshot {snapshot:?}: {x:?}"))
        })
        .collect()
}

/// A row's key values as one string, to find the chunk's row a change replaces.
pub fn key_text(ts: &TableSchema, row: &Struct) -> String {
    common::key_text(row, &ts.key_fields)
}

/// Reads a chunk ([`chunk_statement`]) in a repeatable-read transaction of its own, with the
/// transactions its snapshot did not see ([`ChunkTable::unseen`]). The transaction is ended
/// whatever happens, so the connection stays usable after a refused read.
pub async fn read_chunk(
    sql: &Client,
    ts: &TableSchema,
    statement: &str,
    mapping: &MappingConfig,
    placeholder: &str,
) -> Result<(ChunkRows, HashSet<u32>), ChunkError> {
    let read = async {
        // One round trip for both (the snapshot is taken by the SELECT, the transaction's
        // first statement, and kept for the copy).
        let replies = sql
            .simple_query(
                "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; SELECT pg_current_snapshot()::text",
            )
            .await?;
        let snapshot = replies
            .iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0),
                _ => None,
            })
            .ok_or_else(|| ChunkError::Data("pg_current_snapshot() returned no row".into()))?;
        let unseen = in_progress_xids(snapshot).map_err(ChunkError::Data)?;
        let rows = copy_chunk(sql, ts, statement, mapping, placeholder).await?;
        sql.batch_execute("COMMIT").await?;
        Ok((rows, unseen))
    }
    .await;
    if read.is_err() {
        // Best effort: a connection that cannot even roll back fails the next statement.
        let _ = sql.batch_execute("ROLLBACK").await;
    }
    read
}

/// Copies a chunk's rows out (inside [`read_chunk`]'s transaction).
async fn copy_chunk(
    sql: &Client,
    ts: &TableSchema,
    statement: &str,
    mapping: &MappingConfig,
    placeholder: &str,
) -> Result<ChunkRows, ChunkError> {
    let stream = sql.copy_out(statement).await?;
    let mut stream = Box::pin(stream);
    let mut parser = CopyParser::default();
    let width = ts.columns.len() + ts.key_fields.len();
    let mut fields = Vec::with_capacity(width);
    let mut rows = Vec::new();
    let mut last_key = None;
    let mut bad = None;
    loop {
        match parser.next_row(&mut fields) {
            // After a bad row the rest is read only to leave the connection usable.
            Ok(true) if bad.is_some() => {}
            Ok(true) if fields.len() != width => {
                bad = Some(format!(
                    "returned {} columns, expected {width}",
                    fields.len()
                ));
            }
            Ok(true) => {
                let bytes = parser.row_bytes();
                match ts.row(mapping, placeholder, |i| match fields[i] {
                    Some((start, end)) => RawColumn::Binary(&bytes[start..end]),
                    None => RawColumn::Null,
                }) {
                    Ok(row) => rows.push(row),
                    Err(e) => bad = Some(e.to_string()),
                }
                last_key = Some(
                    fields[ts.columns.len()..]
                        .iter()
                        .map(|f| match f {
                            Some((start, end)) => {
                                String::from_utf8_lossy(&bytes[*start..*end]).into_owned()
                            }
                            None => String::new(),
                        })
                        .collect(),
                );
            }
            Ok(false) if parser.finished => {
                while let Some(r) = stream.next().await {
                    r?;
                }
                break;
            }
            Ok(false) => match stream.next().await {
                Some(Ok(bytes)) => parser.push(&bytes),
                Some(Err(e)) => return Err(e.into()),
                None => break,
            },
            Err(e) => {
                bad = Some(e);
                while let Some(r) = stream.next().await {
                    r?;
                }
                break;
            }
        }
    }
    match bad {
        Some(why) => Err(ChunkError::Data(why)),
        None => Ok((rows, last_key)),
    }
}

/// The statement inserting a watermark row into the signal table (as Debezium writes them: by
/// position, id, type and data).
pub fn watermark_statement(signal_table: (&str, &str), id: &str, open: bool) -> String {
    let (row_id, kind, data) = common::watermark_row(id, open, &common::now_iso());
    format!(
        "INSERT INTO {}.{} VALUES ({}, {}, {})",
        quote_ident(signal_table.0),
        quote_ident(signal_table.1),
        quote_literal(&row_id),
        quote_literal(kind),
        quote_literal(&data),
    )
}

/// The statement deleting a chunk's open watermark from the signal table, which closes its
/// window under `incremental.snapshot.watermarking.strategy=INSERT_DELETE` (Debezium's: by
/// the column named `id`).
pub fn watermark_delete_statement(signal_table: (&str, &str), id: &str) -> String {
    format!(
        "DELETE FROM {}.{} WHERE id = {}",
        quote_ident(signal_table.0),
        quote_ident(signal_table.1),
        quote_literal(&format!("{id}-open")),
    )
}

/// Whether an error is the server refusing the statement (SQL it rejects, a missing
/// privilege): retrying will not help.
pub fn refused(e: &tokio_postgres::Error) -> bool {
    e.code()
        .is_some_and(|c| c.code().starts_with("42") || c.code().starts_with("22"))
}

/// A refusal as the task's error.
pub fn refusal(context: &str, e: &tokio_postgres::Error) -> ConnectError {
    let detail = match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => e.to_string(),
    };
    ConnectError::config(format!("{context}: {detail}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_give_their_in_progress_transactions() {
        assert_eq!(in_progress_xids("10:20:").unwrap(), HashSet::new());
        assert_eq!(
            in_progress_xids("10:20:12,15").unwrap(),
            HashSet::from([12, 15])
        );
        // xid8 values carry the epoch in the high half; pgoutput sends the low half.
        assert_eq!(
            in_progress_xids("4294967300:4294967310:4294967305").unwrap(),
            HashSet::from([9])
        );
        assert!(in_progress_xids("10:20").is_err());
        assert!(in_progress_xids("10:20:x").is_err());
    }

    #[test]
    fn recent_xids_are_bounded_and_per_table_once_tracked() {
        let table = |name: &str| TableId {
            schema: "public".into(),
            table: name.into(),
        };
        let (t, other) = (table("t"), table("other"));
        let mut recent = RecentXids::default();
        for x in 0..(RecentXids::CAPACITY as u32 + 10) {
            recent.began(x, false);
        }
        recent.began(20, false);
        assert_eq!(recent.order.len(), RecentXids::CAPACITY);
        assert_eq!(recent.handed_out(&HashSet::from([3, 5]), &t), None, "gone");
        assert_eq!(
            recent.handed_out(&HashSet::from([3, 20]), &t),
            Some(20),
            "untracked: counts for every table"
        );
        recent.began(7_000_000, true);
        recent.changed(7_000_000, &other);
        recent.changed(7_000_000, &other);
        assert_eq!(
            recent.handed_out(&HashSet::from([7_000_000]), &t),
            None,
            "it changed another table"
        );
        assert_eq!(
            recent.handed_out(&HashSet::from([7_000_000]), &other),
            Some(7_000_000)
        );
    }

    #[test]
    fn watermarks_carry_the_chunk_id() {
        let open = watermark_statement(("public", "debezium_signal"), "hw-1-2-3", true);
        assert!(
            open.starts_with(
                "INSERT INTO \"public\".\"debezium_signal\" VALUES ('hw-1-2-3-open', 'snapshot-window-open', '{\"openWindowTimestamp\":\""
            ),
            "{open}"
        );
        let close = watermark_statement(("S", "sig"), "c", false);
        assert!(
            close.contains("'c-close', 'snapshot-window-close'"),
            "{close}"
        );
        assert!(close.contains("\"S\".\"sig\""), "{close}");
    }
}
