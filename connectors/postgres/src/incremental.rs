//! Incremental snapshots: an `execute-snapshot` signal of type `incremental` (Debezium's
//! default) copies the tables it names in chunks while streaming goes on, with the watermark
//! algorithm Debezium takes from Netflix's DBLog.
//!
//! For each chunk the task, between two source transactions, inserts a `snapshot-window-open`
//! row into the signal table, reads up to `incremental.snapshot.chunk.size` rows after the last
//! key handed out (in key order, up to the table's largest key when its copy started), and
//! inserts a `snapshot-window-close` row; each insert commits on its own. The rows wait in a
//! [`Window`] until the stream reaches the close watermark. A change of the same table that the
//! stream decodes between the two watermarks committed while the chunk was read, so it is as new
//! as the chunk's row or newer: that row is dropped from the window. At the close watermark the
//! rows left are handed out as `r` events (`source.snapshot = "incremental"`) in the
//! watermark's transaction, whose offset says how far the copy got.
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

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use futures_util::StreamExt;
use headwater_api::{ConnectError, Struct, Value};
use serde_json::json;
use tokio_postgres::Client;

use crate::catalog::{quote_ident, quote_literal};
use crate::event::{RawColumn, TableSchema};
use crate::snapshot::CopyParser;
use crate::types::MappingConfig;

/// One table of an incremental snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableRequest {
    /// `schema.table`.
    pub schema: String,
    pub table: String,
    /// The signal's `additional-conditions` filter for it.
    pub condition: Option<String>,
}

impl TableRequest {
    pub fn name(&self) -> String {
        format!("{}.{}", self.schema, self.table)
    }
}

/// How far an incremental snapshot got: what offsets keep (`incremental_snapshot`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Tables still to copy, in order; the first is being copied.
    pub tables: VecDeque<TableRequest>,
    /// The key (each column as text) of the last row of the first table handed out.
    pub after: Option<Vec<String>>,
    /// The largest key of the first table when its copy started (`None`: not read yet).
    pub max: Option<Vec<String>>,
    /// `pause-snapshot` was read, and no `resume-snapshot` since.
    pub paused: bool,
}

impl Progress {
    /// Adds a table unless it is queued already.
    pub fn add(&mut self, table: TableRequest) -> bool {
        if self
            .tables
            .iter()
            .any(|t| t.schema == table.schema && t.table == table.table)
        {
            return false;
        }
        self.tables.push_back(table);
        true
    }

    /// The first table is done (or dropped): the next one starts from its beginning.
    pub fn next_table(&mut self) -> Option<TableRequest> {
        self.after = None;
        self.max = None;
        self.tables.pop_front()
    }

    /// Drops the tables `drop` says; true when the first one went (its window is void).
    pub fn remove(&mut self, mut drop: impl FnMut(&str) -> bool) -> bool {
        let first_went = self.tables.front().is_some_and(|t| drop(&t.name()));
        self.tables.retain(|t| !drop(&t.name()));
        if first_went {
            self.after = None;
            self.max = None;
        }
        first_went
    }

    pub fn to_json(&self) -> String {
        json!({
            "tables": self.tables.iter().map(|t| json!({
                "schema": t.schema, "table": t.table, "condition": t.condition,
            })).collect::<Vec<_>>(),
            "after": self.after,
            "max": self.max,
            "paused": self.paused,
        })
        .to_string()
    }

    pub fn from_json(text: &str) -> Result<Progress, String> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let strings = |v: Option<&serde_json::Value>| -> Result<Option<Vec<String>>, String> {
            match v {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(serde_json::Value::Array(items)) => items
                    .iter()
                    .map(|i| {
                        i.as_str()
                            .map(str::to_owned)
                            .ok_or_else(|| "a key part is not text".to_owned())
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some),
                Some(other) => Err(format!("a key is not an array: {other}")),
            }
        };
        let mut tables = VecDeque::new();
        for t in v
            .get("tables")
            .and_then(|t| t.as_array())
            .ok_or("no tables")?
        {
            let part = |k: &str| t.get(k).and_then(|v| v.as_str()).map(str::to_owned);
            tables.push_back(TableRequest {
                schema: part("schema").ok_or("a table without schema")?,
                table: part("table").ok_or("a table without name")?,
                condition: part("condition"),
            });
        }
        Ok(Progress {
            tables,
            after: strings(v.get("after"))?,
            max: strings(v.get("max"))?,
            paused: v.get("paused").and_then(|p| p.as_bool()).unwrap_or(false),
        })
    }
}

/// A chunk read between watermarks, waiting for the stream to reach its close watermark.
pub struct Window {
    /// The chunk id the watermark rows carry (`<id>-open`, `<id>-close`).
    pub id: String,
    /// Whether the stream passed the open watermark.
    pub open: bool,
    pub table: Arc<TableSchema>,
    /// The chunk's rows in key order; `None` where a streamed change replaced one.
    rows: Vec<Option<Struct>>,
    by_key: HashMap<String, usize>,
    /// The key (as text) of the chunk's last row: where the next chunk starts.
    pub last_key: Vec<String>,
}

impl Window {
    pub fn new(
        id: String,
        table: Arc<TableSchema>,
        rows: Vec<Struct>,
        last_key: Vec<String>,
    ) -> Window {
        let by_key = rows
            .iter()
            .enumerate()
            .map(|(i, r)| (key_text(&table, r), i))
            .collect();
        Window {
            id,
            open: false,
            table,
            rows: rows.into_iter().map(Some).collect(),
            by_key,
            last_key,
        }
    }

    /// Whether a change of table `ts` is to be checked against this window.
    pub fn covers(&self, ts: &TableSchema) -> bool {
        self.open && self.table.id == ts.id
    }

    /// A streamed change of `row` (of table `ts`) inside the window: the chunk's row with the
    /// same key is dropped.
    pub fn replaced(&mut self, ts: &TableSchema, row: &Struct) {
        if let Some(i) = self.by_key.remove(&key_text(ts, row)) {
            self.rows[i] = None;
        }
    }

    /// The table was truncated inside the window: none of the chunk's rows is left.
    pub fn truncated(&mut self) {
        self.rows.iter_mut().for_each(|r| *r = None);
        self.by_key.clear();
    }

    /// The rows left, in key order.
    pub fn into_rows(self) -> impl Iterator<Item = Struct> {
        self.rows.into_iter().flatten()
    }

    /// Rows left (not replaced by streamed changes).
    pub fn rows_left(&self) -> usize {
        self.by_key.len()
    }
}

/// A row's key values as one string, to find the chunk's row a change replaces.
fn key_text(ts: &TableSchema, row: &Struct) -> String {
    use std::fmt::Write as _;
    let mut text = String::new();
    for &k in &ts.key_fields {
        let _ = write!(
            text,
            "{:?}\u{1f}",
            row.values().get(k).unwrap_or(&Value::Null)
        );
    }
    text
}

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
        "SELECT {} FROM ONLY {}.{}{filter} ORDER BY {} LIMIT 1",
        key_texts(&cols),
        quote_ident(&ts.id.schema),
        quote_ident(&ts.id.table),
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
        "COPY (SELECT {} FROM ONLY {}.{} WHERE {} ORDER BY {} LIMIT {limit}) TO STDOUT (FORMAT binary)",
        select.join(", "),
        quote_ident(&ts.id.schema),
        quote_ident(&ts.id.table),
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

/// Reads a chunk ([`chunk_statement`]).
pub async fn read_chunk(
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
    let now = chrono_like_now();
    let (suffix, kind, field) = if open {
        ("open", "snapshot-window-open", "openWindowTimestamp")
    } else {
        ("close", "snapshot-window-close", "closeWindowTimestamp")
    };
    format!(
        "INSERT INTO {}.{} VALUES ({}, {}, {})",
        quote_ident(signal_table.0),
        quote_ident(signal_table.1),
        quote_literal(&format!("{id}-{suffix}")),
        quote_literal(kind),
        quote_literal(&json!({ field: now }).to_string()),
    )
}

/// The time now as an ISO-8601 UTC instant with milliseconds (Java's `Instant` text).
fn chrono_like_now() -> String {
    let (us, _) = crate::event::now_micros_nanos();
    let ms = us.div_euclid(1000);
    let (days, ms_of_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (y, m, d) = crate::temporal::civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        ms_of_day / 3_600_000,
        ms_of_day / 60_000 % 60,
        ms_of_day / 1000 % 60,
        ms_of_day % 1000
    )
}

/// A new chunk id: unique per task and run.
pub fn chunk_id(counter: u64) -> String {
    let (us, _) = crate::event::now_micros_nanos();
    format!("hw-{:x}-{:x}-{counter}", std::process::id(), us)
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
    fn progress_round_trips() {
        let mut p = Progress::default();
        assert!(p.add(TableRequest {
            schema: "public".into(),
            table: "orders".into(),
            condition: Some("status = 'open'".into()),
        }));
        assert!(p.add(TableRequest {
            schema: "s".into(),
            table: "t".into(),
            condition: None,
        }));
        assert!(!p.add(TableRequest {
            schema: "s".into(),
            table: "t".into(),
            condition: Some("x".into()),
        }));
        p.after = Some(vec!["5".into(), "a'b".into()]);
        p.max = Some(vec!["9".into(), "z".into()]);
        p.paused = true;
        let again = Progress::from_json(&p.to_json()).unwrap();
        assert_eq!(again, p);
        assert!(p.remove(|name| name == "public.orders"));
        assert_eq!(p.after, None);
        assert_eq!(p.tables.len(), 1);
        assert!(!p.remove(|name| name == "nothing.here"));
        assert!(Progress::from_json("{}").is_err());
        assert!(Progress::from_json(r#"{"tables": [], "after": [1]}"#).is_err());
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
        assert!(chunk_id(7).ends_with("-7") && chunk_id(7).len() < 36);
    }
}
