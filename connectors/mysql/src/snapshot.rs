//! The chunked, parallel, resumable initial snapshot of MySQL / MariaDB tables.
//!
//! A snapshot is a list of chunks in emission order: tables one after another, and a table with
//! a single-column integer primary key split into ranges of that key of about
//! `snapshot.chunk.rows` rows (read `ORDER BY` the key); other tables are one chunk. Up to
//! `snapshot.max.threads` reader connections, all inside consistent-snapshot transactions that
//! see the same data (see [`crate::task`] for how that is ensured), take chunks in order, decode
//! rows and push them into a small bounded channel per chunk; the task drains the channels
//! strictly in chunk order.
//!
//! Invariants:
//! - records leave the snapshot in chunk order, and within an integer-keyed table in key order,
//!   so a committed offset (`snapshot_done` tables, `snapshot_table`, `snapshot_after` key)
//!   says exactly which rows are in the log; rows of a table without such a key are committed
//!   only together with the table's last row, so a crash never leaves half of one;
//! - memory is bounded: at most `threads` chunks are read ahead, each by at most
//!   [`CHANNEL_BATCHES`] batches of [`BATCH_ROWS`] rows;
//! - the lowest unfinished chunk always has a running reader (chunks are taken in order), so
//!   draining in order cannot deadlock;
//! - a resumed snapshot reads the remaining rows in a newer consistent snapshot (at binlog
//!   position `P`), while the stream still starts where the first snapshot began. For the
//!   re-read region ([`SkipRegion`]) a change of a transaction that began before `P` is already
//!   in the newer snapshot and is skipped; later changes are emitted. Regions are kept in the
//!   offsets until streaming passes their `P`.

use std::cmp::Ordering as CmpOrdering;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use headwater_api::{ConnectError, Struct, Value};
use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::event::TableSchema;
use crate::types::{MappingConfig, MyType, Origin};

/// Rows per batch a reader sends.
pub const BATCH_ROWS: usize = 1024;
/// Batches buffered per chunk.
pub const CHANNEL_BATCHES: usize = 4;

/// Orders binlog positions: file names share a base and grow by their numeric extension
/// (`mysql-bin.000009` < `mysql-bin.000010` < `mysql-bin.1000000`), then by offset.
pub fn position_cmp(a_file: &str, a_pos: u64, b_file: &str, b_pos: u64) -> CmpOrdering {
    let split = |f: &str| -> (String, u64) {
        match f.rsplit_once('.') {
            Some((base, ext)) if !ext.is_empty() && ext.bytes().all(|b| b.is_ascii_digit()) => {
                (base.to_owned(), ext.parse().unwrap_or(u64::MAX))
            }
            _ => (f.to_owned(), 0),
        }
    };
    split(a_file)
        .cmp(&split(b_file))
        .then_with(|| a_pos.cmp(&b_pos))
}

/// Part of a table that a resumed snapshot re-read in a newer snapshot taken at binlog
/// position `file`:`pos`: the whole table, or the keys above `after`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkipRegion {
    /// `db.table`.
    pub table: String,
    pub after: Option<i64>,
    pub file: String,
    pub pos: u64,
}

impl SkipRegion {
    /// Whether a change of `table` with integer key `key` in a transaction that began at
    /// `file`:`pos` is already in the snapshot.
    pub fn covers(&self, table: &str, key: Option<i64>, file: &str, pos: u64) -> bool {
        self.table == table
            && position_cmp(file, pos, &self.file, self.pos) == CmpOrdering::Less
            && match (self.after, key) {
                (None, _) => true,
                (Some(a), Some(k)) => k > a,
                (Some(_), None) => true,
            }
    }

    /// Whether streaming at `file`:`pos` is past this region (it can be forgotten).
    pub fn passed(&self, file: &str, pos: u64) -> bool {
        position_cmp(file, pos, &self.file, self.pos) != CmpOrdering::Less
    }
}

/// `[["db.table", after|null, "file", pos], ...]`.
pub fn encode_skips(skips: &[SkipRegion]) -> String {
    json!(skips
        .iter()
        .map(|s| json!([s.table, s.after, s.file, s.pos]))
        .collect::<Vec<_>>())
    .to_string()
}

pub fn decode_skips(text: &str) -> Vec<SkipRegion> {
    let Ok(serde_json::Value::Array(items)) = serde_json::from_str(text) else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|i| {
            Some(SkipRegion {
                table: i.get(0)?.as_str()?.to_owned(),
                after: i.get(1)?.as_i64(),
                file: i.get(2)?.as_str()?.to_owned(),
                pos: i.get(3)?.as_u64()?,
            })
        })
        .collect()
}

/// `["db.table", ...]`.
pub fn encode_tables(tables: &[String]) -> String {
    json!(tables).to_string()
}

pub fn decode_tables(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_default()
}

/// The row-struct index of a table's key when the key is the table's whole primary key and a
/// single signed-or-small integer column (the only keys chunks and resumption use).
pub fn int_key(ts: &TableSchema, primary_key: &[String]) -> Option<usize> {
    let [field] = ts.key_fields.as_slice() else {
        return None;
    };
    let column = ts
        .fields
        .iter()
        .position(|f| *f == Some(*field))
        .map(|ci| &ts.columns[ci])?;
    let is_pk = primary_key.len() == 1 && primary_key[0] == column.name;
    let int = match column.ty {
        MyType::TinyInt | MyType::SmallInt | MyType::MediumInt | MyType::Int => true,
        // An unsigned BIGINT may exceed i64.
        MyType::BigInt => !column.unsigned,
        _ => false,
    };
    (is_pk && int).then_some(*field)
}

/// The integer value of a row's key field.
pub fn key_value(row: &Struct, field: usize) -> Option<i64> {
    match row.values().get(field)? {
        Value::Int16(v) => Some(i64::from(*v)),
        Value::Int32(v) => Some(i64::from(*v)),
        Value::Int64(v) => Some(*v),
        _ => None,
    }
}

/// One table of a snapshot: its schema and, for an integer-keyed table, the key column.
#[derive(Clone)]
pub struct SnapshotTable {
    pub schema: Arc<TableSchema>,
    /// (row-struct field, column name) of the integer primary key, if the table has one.
    pub int_key: Option<(usize, String)>,
}

/// Which rows of a table a chunk reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub table: usize,
    /// Index of this chunk within its table and the table's chunk count.
    pub index: usize,
    pub of: usize,
    /// `key >= lo AND key < hi` (open ends when `None`); both `None` for a whole table.
    pub lo: Option<i64>,
    pub hi: Option<i64>,
    /// Only keys above this one (a resumed table).
    pub after: Option<i64>,
    /// A signal's `additional-conditions` filter for the table: SQL ANDed to the chunk's own
    /// conditions (trusted as Debezium trusts it: whoever may write the signal table may
    /// read every captured table).
    pub condition: Option<Arc<str>>,
    /// `snapshot.select.statement.overrides.<table>`: the SELECT read instead of the table.
    pub source: Option<Arc<str>>,
}

pub fn quote_ident(s: &str) -> String {
    format!("`{}`", s.replace('`', "``"))
}

impl Chunk {
    /// The `SELECT` of this chunk.
    pub fn select_statement(&self, t: &SnapshotTable) -> String {
        let id = &t.schema.id;
        let table = match &self.source {
            // On its own line: a trailing `--` comment must not swallow the parenthesis.
            Some(select) => format!("({select}\n) AS hw_override"),
            None => format!("{}.{}", quote_ident(&id.db), quote_ident(&id.table)),
        };
        // An override's columns are taken by name, in table order (rows are decoded by
        // position).
        let star = match &self.source {
            Some(_) => t
                .schema
                .columns
                .iter()
                .map(|c| quote_ident(&c.name))
                .collect::<Vec<_>>()
                .join(", "),
            None => "*".to_owned(),
        };
        let condition = self.condition.as_ref().map(|c| format!("({c})"));
        let Some((_, key)) = &t.int_key else {
            return match condition {
                Some(c) => format!("SELECT {star} FROM {table} WHERE {c}"),
                None => format!("SELECT {star} FROM {table}"),
            };
        };
        let k = quote_ident(key);
        let mut conds: Vec<String> = condition.into_iter().collect();
        if let Some(a) = self.after {
            conds.push(format!("{k} > {a}"));
        }
        if let Some(lo) = self.lo {
            conds.push(format!("{k} >= {lo}"));
        }
        if let Some(hi) = self.hi {
            conds.push(format!("{k} < {hi}"));
        }
        let filter = if conds.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", conds.join(" AND "))
        };
        format!("SELECT {star} FROM {table}{filter} ORDER BY {k}")
    }
}

fn my_err(context: String, e: mysql_async::Error) -> ConnectError {
    let retriable = matches!(e, mysql_async::Error::Io(_) | mysql_async::Error::Driver(_));
    let msg = match &e {
        // The SQLSTATE spelled out, so the task can tell a refused statement (see
        // [`refused_by_server`]) from a lost connection.
        mysql_async::Error::Server(s) => format!("{context}: {e} (SQLSTATE {})", s.state),
        _ => format!("{context}: {e}"),
    };
    if retriable {
        ConnectError::retriable(msg)
    } else {
        ConnectError::fatal(msg)
    }
}

/// Whether a snapshot reader's error is the server refusing its statement for what it reads
/// (SQLSTATE class 21, 22 or 42: a subquery returning several rows, a bad value, an unknown
/// column, a missing privilege): reading again would fail the same way.
pub fn refused_by_server(e: &ConnectError) -> bool {
    e.kind() == headwater_api::ErrorKind::Fatal
        && ["(SQLSTATE 21", "(SQLSTATE 22", "(SQLSTATE 42"]
            .iter()
            .any(|class| e.message().contains(class))
}

/// Splits one table into chunks of about `chunk_rows` rows (`estimated` rows in all), reading
/// its key range on `conn` (a snapshot connection).
pub async fn plan_table(
    conn: &mut Conn,
    table: usize,
    t: &SnapshotTable,
    after: Option<i64>,
    estimated: u64,
    chunk_rows: u64,
) -> Result<Vec<Chunk>, ConnectError> {
    let single = vec![Chunk {
        table,
        index: 0,
        of: 1,
        lo: None,
        hi: None,
        after,
        condition: None,
        source: None,
    }];
    let n = estimated.div_ceil(chunk_rows.max(1)).max(1);
    let Some((_, key)) = &t.int_key else {
        return Ok(single);
    };
    if n <= 1 {
        return Ok(single);
    }
    let id = &t.schema.id;
    let k = quote_ident(key);
    let cond = after.map_or(String::new(), |a| format!(" WHERE {k} > {a}"));
    let sql = format!(
        "SELECT MIN({k}), MAX({k}) FROM {}.{}{cond}",
        quote_ident(&id.db),
        quote_ident(&id.table)
    );
    let range: Option<(Option<i64>, Option<i64>)> = conn
        .query_first(sql.as_str())
        .await
        .map_err(|e| my_err(format!("reading the key range of {id}"), e))?;
    let Some((Some(lo), Some(hi))) = range else {
        return Ok(single);
    };
    let span = i128::from(hi) - i128::from(lo) + 1;
    let n = i128::from(n).min(span).max(1) as usize;
    let bound = |i: usize| (i128::from(lo) + span * i as i128 / n as i128) as i64;
    Ok((0..n)
        .map(|i| Chunk {
            table,
            index: i,
            of: n,
            lo: (i > 0).then(|| bound(i)),
            hi: (i + 1 < n).then(|| bound(i + 1)),
            after,
            condition: None,
            source: None,
        })
        .collect())
}

/// What a reader sends for a chunk: decoded rows, then `Done` or the error that ended it (a
/// channel that closes without either means the reader died).
pub enum ChunkMsg {
    Rows(Vec<Struct>),
    Done,
    Failed(ConnectError),
}

/// The reader side of a running snapshot.
pub struct Readers {
    /// Per chunk, in emission order, the receiving end (taken by the consumer in order).
    pub receivers: VecDeque<(usize, mpsc::Receiver<ChunkMsg>)>,
    handles: Vec<JoinHandle<()>>,
}

impl Readers {
    /// Starts one reader per connection (each inside its consistent-snapshot transaction);
    /// each reads chunks in order from a shared cursor, then commits and disconnects.
    pub fn start(
        conns: Vec<Conn>,
        tables: Arc<Vec<SnapshotTable>>,
        chunks: Arc<Vec<Chunk>>,
        mapping: MappingConfig,
    ) -> Readers {
        let mut senders = Vec::with_capacity(chunks.len());
        let mut receivers = VecDeque::with_capacity(chunks.len());
        for i in 0..chunks.len() {
            let (tx, rx) = mpsc::channel(CHANNEL_BATCHES);
            senders.push(Some(tx));
            receivers.push_back((i, rx));
        }
        let senders = Arc::new(Mutex::new(senders));
        let cursor = Arc::new(AtomicUsize::new(0));
        let handles = conns
            .into_iter()
            .map(|mut conn| {
                let (tables, chunks, senders, cursor) = (
                    tables.clone(),
                    chunks.clone(),
                    senders.clone(),
                    cursor.clone(),
                );
                tokio::spawn(async move {
                    loop {
                        let i = cursor.fetch_add(1, Ordering::SeqCst);
                        let Some(chunk) = chunks.get(i) else {
                            break;
                        };
                        let Some(tx) = senders.lock().unwrap_or_else(|e| e.into_inner())[i].take()
                        else {
                            break;
                        };
                        let t = &tables[chunk.table];
                        match read_chunk(&mut conn, t, chunk, &mapping, &tx).await {
                            Ok(()) => {
                                let _ = tx.send(ChunkMsg::Done).await;
                            }
                            Err(e) => {
                                let _ = tx.send(ChunkMsg::Failed(e)).await;
                                break;
                            }
                        }
                    }
                    let _ = conn.query_drop("COMMIT").await;
                    let _ = conn.disconnect().await;
                })
            })
            .collect();
        Readers { receivers, handles }
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        for h in &self.handles {
            h.abort();
        }
    }
}

async fn read_chunk(
    conn: &mut Conn,
    t: &SnapshotTable,
    chunk: &Chunk,
    mapping: &MappingConfig,
    tx: &mpsc::Sender<ChunkMsg>,
) -> Result<(), ConnectError> {
    let sql = chunk.select_statement(t);
    let ts = &t.schema;
    let mut result = conn
        .query_iter(sql.as_str())
        .await
        .map_err(|e| my_err(format!("snapshot query {sql}"), e))?;
    let mut batch = Vec::with_capacity(BATCH_ROWS);
    if let Some(mut stream) = result
        .stream::<mysql_async::Row>()
        .await
        .map_err(|e| my_err(format!("snapshot query {sql}"), e))?
    {
        while let Some(row) = stream.next().await {
            let row = row.map_err(|e| my_err(format!("reading {sql}"), e))?;
            // Rows are decoded here, on the reader's task, in parallel with the task turning
            // earlier rows into records.
            let row = ts
                .row(mapping, Origin::Text, row.unwrap())
                .map_err(|e| ConnectError::data(e.to_string()))?;
            batch.push(row);
            if batch.len() >= BATCH_ROWS {
                let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH_ROWS));
                if tx.send(ChunkMsg::Rows(full)).await.is_err() {
                    return Ok(());
                }
            }
        }
    }
    if !batch.is_empty() {
        let _ = tx.send(ChunkMsg::Rows(batch)).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binlog_positions_order_by_file_number_then_offset() {
        use CmpOrdering::*;
        assert_eq!(position_cmp("b.000009", 900, "b.000010", 4), Less);
        assert_eq!(position_cmp("b.999999", 900, "b.1000000", 4), Less);
        assert_eq!(position_cmp("b.000010", 4, "b.000010", 4), Equal);
        assert_eq!(position_cmp("b.000010", 5, "b.000010", 4), Greater);
    }

    #[test]
    fn skip_regions_round_trip_and_cover() {
        let skips = vec![
            SkipRegion {
                table: "shop.a".into(),
                after: Some(10),
                file: "mysql-bin.000002".into(),
                pos: 500,
            },
            SkipRegion {
                table: "shop.b".into(),
                after: None,
                file: "mysql-bin.000002".into(),
                pos: 700,
            },
        ];
        assert_eq!(decode_skips(&encode_skips(&skips)), skips);
        let f = "mysql-bin.000002";
        assert!(skips[0].covers("shop.a", Some(11), f, 499));
        assert!(skips[0].covers("shop.a", Some(11), "mysql-bin.000001", 9000));
        assert!(
            !skips[0].covers("shop.a", Some(10), f, 499),
            "key read before"
        );
        assert!(!skips[0].covers("shop.a", Some(11), f, 500), "began after");
        assert!(!skips[0].covers("shop.b", Some(11), f, 1), "other table");
        assert!(skips[1].covers("shop.b", None, f, 1));
        assert!(skips[0].passed(f, 500));
        assert!(!skips[0].passed(f, 499));
        assert_eq!(decode_skips("not json"), Vec::new());
        let tables = vec!["shop.a".to_owned(), "x.`y,z`".to_owned()];
        assert_eq!(decode_tables(&encode_tables(&tables)), tables);
    }
}
