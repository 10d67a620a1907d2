//! The SQL of MySQL/MariaDB incremental snapshots (`execute-snapshot` of type `incremental`):
//! the watermark rows, the largest key, and the chunk reads. The algorithm (windows, progress)
//! is [`headwater_connector_common::incremental`]'s; the task drives it as the PostgreSQL
//! connector does (docs/connectors/mysql.md).
//!
//! Key values travel as the text protocol returns them, hex-encoded in offsets (binary keys
//! survive), and come back into statements as literals of their column's type: numbers bare,
//! temporal values quoted, character keys as `_utf8mb4 X'…'` (a coercible literal, so the
//! column's collation orders and compares), binary keys as `X'…'`. Tables keyed by other types
//! (ENUM, SET, BIT, JSON, spatial) are not read in chunks. Bounds are spelled out as `OR`
//! chains rather than row comparisons, which MariaDB does not turn into index ranges.
//!
//! A chunk is read right after its open watermark commits. Every transaction before the
//! watermark in the binlog is visible to that read: the server commits transactions in the
//! storage engine in binlog order (MariaDB always; MySQL with `binlog_order_commits=ON`, its
//! default), and a semi-synchronous wait comes before the engine commit for the watermark as
//! for any other. (PostgreSQL has no such order; its connector checks what its read saw.)

use headwater_api::Struct;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Value as MyValue};

pub use headwater_connector_common::incremental::{
    self as common, chunk_id, Progress, TableRequest,
};

use crate::event::TableSchema;
use crate::snapshot::quote_ident;
use crate::types::{MappingConfig, MyType, Origin};

/// A chunk held until its close watermark (its table's schema rides along).
pub type Window = common::Window<TableSchema>;

/// A row's key values as one string, to find the chunk's row a change replaces.
pub fn key_text(ts: &TableSchema, row: &Struct) -> String {
    common::key_text(row, &ts.key_fields)
}

/// The key columns of a table (their indexes in `columns`), in key order; an error naming
/// the first whose type cannot key chunks.
pub fn key_columns(ts: &TableSchema) -> Result<Vec<usize>, String> {
    let mut cols = Vec::with_capacity(ts.key_fields.len());
    for &field in &ts.key_fields {
        let Some(c) = ts.fields.iter().position(|f| *f == Some(field)) else {
            return Err(format!("key field {field} has no column"));
        };
        let col = &ts.columns[c];
        if !keyable(&col.ty) {
            return Err(format!(
                "key column {} has type {:?}, which incremental snapshots cannot read in key order",
                col.name, col.ty
            ));
        }
        cols.push(c);
    }
    if cols.is_empty() {
        return Err("the table has no primary key".into());
    }
    Ok(cols)
}

fn to_hex(bytes: impl AsRef<[u8]>) -> String {
    use std::fmt::Write as _;
    let bytes = bytes.as_ref();
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Whether values of `ty` can be written back as literals ([`literal`]) to bound a chunk.
fn keyable(ty: &MyType) -> bool {
    !matches!(
        ty,
        MyType::Bit(_) | MyType::Enum(_) | MyType::Set(_) | MyType::Json | MyType::Geometry
    )
}

/// A key part as the progress keeps it (hex of the server's text) as that text, for people
/// (notifications); what does not decode stays as it is.
pub fn key_part_text(hex: &str) -> String {
    from_hex(hex).map_or_else(
        || hex.to_owned(),
        |b| String::from_utf8_lossy(&b).into_owned(),
    )
}

/// A key value (hex of its text-protocol bytes) as a literal of type `ty`.
fn literal(ty: &MyType, hex: &str) -> Option<String> {
    let bytes = from_hex(hex)?;
    let text = || String::from_utf8(bytes.clone()).ok();
    let only = |t: &str, allowed: fn(char) -> bool| t.chars().all(allowed).then(|| t.to_owned());
    match ty {
        MyType::TinyInt
        | MyType::SmallInt
        | MyType::MediumInt
        | MyType::Int
        | MyType::BigInt
        | MyType::Decimal { .. }
        | MyType::Float
        | MyType::Double
        | MyType::Year => only(&text()?, |c| {
            c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E')
        })
        .filter(|t| !t.is_empty()),
        MyType::Date | MyType::Time(_) | MyType::DateTime(_) | MyType::Timestamp(_) => {
            only(&text()?, |c| {
                c.is_ascii_digit() || matches!(c, '-' | ':' | '.' | ' ')
            })
            .map(|t| format!("'{t}'"))
        }
        MyType::Text(_) => Some(format!("_utf8mb4 X'{hex}'")),
        MyType::Binary { .. } => Some(format!("X'{hex}'")),
        MyType::Bit(_) | MyType::Enum(_) | MyType::Set(_) | MyType::Json | MyType::Geometry => None,
    }
}

/// `(k1, k2, …) > (v1, v2, …)` (`greater`) or `<=`, spelled out as an `OR` chain.
fn bound(ts: &TableSchema, cols: &[usize], key: &[String], greater: bool) -> Option<String> {
    if key.len() != cols.len() {
        return None;
    }
    let parts: Vec<(String, String)> = cols
        .iter()
        .zip(key)
        .map(|(&c, hex)| {
            let col = &ts.columns[c];
            Some((quote_ident(&col.name), literal(&col.ty, hex)?))
        })
        .collect::<Option<_>>()?;
    let mut alternatives = Vec::new();
    for i in 0..parts.len() {
        let mut terms: Vec<String> = parts[..i]
            .iter()
            .map(|(c, v)| format!("{c} = {v}"))
            .collect();
        let (c, v) = &parts[i];
        terms.push(format!("{c} {} {v}", if greater { ">" } else { "<" }));
        alternatives.push(format!("({})", terms.join(" AND ")));
    }
    if !greater {
        let all: Vec<String> = parts.iter().map(|(c, v)| format!("{c} = {v}")).collect();
        alternatives.push(format!("({})", all.join(" AND ")));
    }
    Some(format!("({})", alternatives.join(" OR ")))
}

fn table_name(ts: &TableSchema) -> String {
    format!("{}.{}", quote_ident(&ts.id.db), quote_ident(&ts.id.table))
}

fn order(ts: &TableSchema, cols: &[usize], descending: bool) -> String {
    cols.iter()
        .map(|&c| {
            let name = quote_ident(&ts.columns[c].name);
            if descending {
                format!("{name} DESC")
            } else {
                name
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The statement reading the largest key of a table.
pub fn max_key_statement(ts: &TableSchema, cols: &[usize], condition: Option<&str>) -> String {
    let select: Vec<String> = cols
        .iter()
        .map(|&c| quote_ident(&ts.columns[c].name))
        .collect();
    let filter = condition.map_or(String::new(), |c| format!(" WHERE ({c}\n)"));
    format!(
        "SELECT {} FROM {}{filter} ORDER BY {} LIMIT 1",
        select.join(", "),
        table_name(ts),
        order(ts, cols, true)
    )
}

/// The `SELECT` of one chunk: every column by name (rows are decoded by position), the rows
/// after `after` up to `max` in key order.
pub fn chunk_statement(
    ts: &TableSchema,
    cols: &[usize],
    after: Option<&[String]>,
    max: &[String],
    condition: Option<&str>,
    limit: usize,
) -> Option<String> {
    let select: Vec<String> = ts.columns.iter().map(|c| quote_ident(&c.name)).collect();
    let mut conds = Vec::new();
    if let Some(a) = after {
        conds.push(bound(ts, cols, a, true)?);
    }
    conds.push(bound(ts, cols, max, false)?);
    if let Some(c) = condition {
        // On its own line: a trailing `--` comment must not swallow what follows.
        conds.push(format!("({c}\n)"));
    }
    Some(format!(
        "SELECT {} FROM {} WHERE {} ORDER BY {} LIMIT {limit}",
        select.join(", "),
        table_name(ts),
        conds.join(" AND "),
        order(ts, cols, false)
    ))
}

/// A key read from the server (the values of the key columns), hex-encoded.
fn key_hex(values: &[MyValue], cols: &[usize]) -> Vec<String> {
    cols.iter()
        .map(|&c| match values.get(c) {
            Some(MyValue::Bytes(b)) => to_hex(b),
            Some(other) => to_hex(other.as_sql(true).trim_matches('\'')),
            None => String::new(),
        })
        .collect()
}

/// Reads the largest key (`None`: no row).
pub async fn max_key(
    sql: &mut Conn,
    statement: &str,
) -> Result<Option<Vec<String>>, mysql_async::Error> {
    let row: Option<mysql_async::Row> = sql.query_first(statement).await?;
    Ok(row.map(|r| {
        let values = r.unwrap();
        let all: Vec<usize> = (0..values.len()).collect();
        key_hex(&values, &all)
    }))
}

/// Why a chunk could not be read.
#[derive(Debug)]
pub enum ChunkError {
    Sql(mysql_async::Error),
    /// A value that does not convert for the table's schema.
    Data(String),
}

/// A chunk's rows in key order, and the last row's key (hex); `None`: no row.
pub type ChunkRows = (Vec<Struct>, Option<Vec<String>>);

/// Reads a chunk ([`chunk_statement`]) over the text protocol, as the snapshot reads.
pub async fn read_chunk(
    sql: &mut Conn,
    ts: &TableSchema,
    cols: &[usize],
    statement: &str,
    mapping: &MappingConfig,
) -> Result<ChunkRows, ChunkError> {
    let raw: Vec<mysql_async::Row> = sql.query(statement).await.map_err(ChunkError::Sql)?;
    let mut rows = Vec::with_capacity(raw.len());
    let mut last_key = None;
    for r in raw {
        let values = r.unwrap();
        last_key = Some(key_hex(&values, cols));
        rows.push(
            ts.row(mapping, Origin::Text, values)
                .map_err(|e| ChunkError::Data(e.to_string()))?,
        );
    }
    Ok((rows, last_key))
}

/// The statement inserting a watermark row into the signal table (by position: id, type,
/// data, as Debezium writes them).
pub fn watermark_statement(signal_table: (&str, &str), id: &str, open: bool) -> String {
    let (row_id, kind, data) = common::watermark_row(id, open, &common::now_iso());
    let text = |s: &str| format!("_utf8mb4 X'{}'", to_hex(s));
    format!(
        "INSERT INTO {}.{} VALUES ({}, {}, {})",
        quote_ident(signal_table.0),
        quote_ident(signal_table.1),
        text(&row_id),
        text(kind),
        text(&data),
    )
}

/// The statement deleting a chunk's open watermark from the signal table, which closes its
/// window under `incremental.snapshot.watermarking.strategy=INSERT_DELETE` (Debezium's: by
/// the column named `id`).
pub fn watermark_delete_statement(signal_table: (&str, &str), id: &str) -> String {
    format!(
        "DELETE FROM {}.{} WHERE id = _utf8mb4 X'{}'",
        quote_ident(signal_table.0),
        quote_ident(signal_table.1),
        to_hex(format!("{id}-open")),
    )
}

/// Whether the server refused a statement (SQL it rejects, a missing privilege: SQLSTATE
/// class 42 or 22): retrying will not help.
pub fn refused(e: &mysql_async::Error) -> bool {
    matches!(e, mysql_async::Error::Server(s) if s.state.starts_with("42") || s.state.starts_with("22"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Charset;

    #[test]
    fn key_literals_follow_the_column_type() {
        let h = |s: &str| to_hex(s);
        assert_eq!(literal(&MyType::Int, &h("-42")).as_deref(), Some("-42"));
        assert_eq!(literal(&MyType::Int, &h("1; DROP")), None);
        assert_eq!(
            literal(&MyType::DateTime(3), &h("2024-02-29 10:00:00.123")).as_deref(),
            Some("'2024-02-29 10:00:00.123'")
        );
        assert_eq!(
            literal(&MyType::Text(Charset::Utf8), &h("a'b")).as_deref(),
            Some("_utf8mb4 X'612762'")
        );
        assert_eq!(
            literal(&MyType::Binary { fixed: Some(2) }, "00ff").as_deref(),
            Some("X'00ff'")
        );
        assert_eq!(literal(&MyType::Json, &h("{}")), None);
        assert!(keyable(&MyType::Int) && keyable(&MyType::Text(Charset::Latin1)));
        assert!(!keyable(&MyType::Enum(vec!["a".into()])));
        let stmt = watermark_statement(("db", "sig"), "c", true);
        assert!(stmt.starts_with("INSERT INTO `db`.`sig` VALUES (_utf8mb4 X'632d6f70656e', "));
    }
}
