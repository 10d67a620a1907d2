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

use futures_util::StreamExt;
use headwater_api::{ConnectError, Struct};
pub use headwater_connector_common::incremental::{
    self as common, chunk_id, Progress, TableRequest,
};
use tokio_postgres::Client;

use crate::catalog::{quote_ident, quote_literal};
use crate::event::{RawColumn, TableSchema};
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

/// A chunk held until its close watermark (its table's schema rides along).
pub type Window = common::Window<TableSchema>;

/// A row's key values as one string, to find the chunk's row a change replaces.
pub fn key_text(ts: &TableSchema, row: &Struct) -> String {
    common::key_text(row, &ts.key_fields)
}

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
