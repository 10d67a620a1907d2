//! The parallel, chunked, resumable initial snapshot.
//!
//! A snapshot is a list of chunks in emission order: tables one after another, and each table
//! split into chunks of about `snapshot.chunk.rows` rows, by ranges of a single-column integer
//! primary key (read `ORDER BY` the key), else by ctid page ranges, else whole. Up to
//! `snapshot.max.threads` reader tasks, each on its own connection whose transaction imported
//! the same exported snapshot, take chunks in order, decode rows and push them into a small
//! bounded channel per chunk; the task drains the channels strictly in chunk order.
//!
//! Invariants:
//! - records leave the snapshot in chunk order, and within an integer-keyed table in key order,
//!   so a committed offset (`snapshot_done` tables, `snapshot_table`, `snapshot_after` key) says
//!   exactly which rows are in the log;
//! - memory is bounded: at most `threads` chunks are read ahead, each by at most
//!   [`CHANNEL_BATCHES`] batches of [`BATCH_ROWS`] rows;
//! - the lowest unfinished chunk always has a running reader (chunks are taken in order), so
//!   draining in order cannot deadlock;
//! - a resumed snapshot reads the remaining rows in a newer snapshot (taken at LSN `L`). The
//!   stream still starts at the slot's original position, so for the re-read region
//!   ([`SkipRegion`]) a change of a transaction that committed before `L` is already in the
//!   snapshot and is skipped; later changes are emitted. Regions are kept in the offsets until
//!   streaming passed their `L`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Buf, BytesMut};
use futures_util::StreamExt;
use headwater_api::{ConnectError, Struct, Value};
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_postgres::Client;

use crate::catalog::{quote_ident, quote_literal};
use crate::event::{RawColumn, TableSchema};
use crate::lsn::Lsn;
use crate::types::{MappingConfig, PgType};

/// Rows per batch a reader sends.
pub const BATCH_ROWS: usize = 1024;
/// Batches buffered per chunk.
pub const CHANNEL_BATCHES: usize = 4;

/// Part of a table that a resumed snapshot re-read in a newer snapshot taken at `lsn`: the
/// whole table, or the keys above `after`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkipRegion {
    /// `schema.table`.
    pub table: String,
    pub after: Option<i64>,
    pub lsn: Lsn,
}

impl SkipRegion {
    /// Whether a change of `table` with integer key `key` in a transaction whose commit
    /// record is at `commit_lsn` is already in the snapshot.
    pub fn covers(&self, table: &str, key: Option<i64>, commit_lsn: Lsn) -> bool {
        commit_lsn < self.lsn
            && self.table == table
            && match (self.after, key) {
                (None, _) => true,
                (Some(a), Some(k)) => k > a,
                (Some(_), None) => true,
            }
    }
}

/// `[["schema.table", after|null, lsn], ...]`.
pub fn encode_skips(skips: &[SkipRegion]) -> String {
    json!(skips
        .iter()
        .map(|s| json!([s.table, s.after, s.lsn.as_i64()]))
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
                lsn: Lsn::from_i64(i.get(2)?.as_i64()?),
            })
        })
        .collect()
}

/// `["schema.table", ...]`.
pub fn encode_tables(tables: &[String]) -> String {
    json!(tables).to_string()
}

pub fn decode_tables(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_default()
}

/// The single integer key column of a table (its index in `columns`), if it has one.
pub fn int_key(ts: &TableSchema) -> Option<usize> {
    match ts.key_fields.as_slice() {
        [i] if matches!(
            ts.columns[*i].def.ct.info.kind,
            PgType::Int2 | PgType::Int4 | PgType::Int8
        ) =>
        {
            Some(*i)
        }
        _ => None,
    }
}

/// The integer value of a row's key column.
pub fn key_value(row: &Struct, key_col: usize) -> Option<i64> {
    match row.values().get(key_col)? {
        Value::Int16(v) => Some(i64::from(*v)),
        Value::Int32(v) => Some(i64::from(*v)),
        Value::Int64(v) => Some(*v),
        _ => None,
    }
}

/// Which rows of a table a chunk reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChunkKind {
    /// `key >= lo AND key < hi` (open ends when `None`), in key order.
    KeyRange {
        lo: Option<i64>,
        hi: Option<i64>,
    },
    /// `ctid >= (lo,0) AND ctid < (hi,0)`.
    Pages {
        lo: Option<i64>,
        hi: Option<i64>,
    },
    Whole,
}

#[derive(Clone, Debug)]
pub struct Chunk {
    pub table: usize,
    /// Index of this chunk within its table and the table's chunk count.
    pub index: usize,
    pub of: usize,
    pub kind: ChunkKind,
    /// Only keys above this one (a resumed table).
    pub after: Option<i64>,
    /// A signal's `additional-conditions` filter for the table: SQL ANDed to the chunk's own
    /// conditions (trusted as Debezium trusts it: whoever may write the signal table may
    /// read every captured table; the readers' transactions are read-only).
    pub condition: Option<std::sync::Arc<str>>,
    /// `snapshot.select.statement.overrides.<table>`: the SELECT read instead of the table.
    pub source: Option<std::sync::Arc<str>>,
}

impl Chunk {
    /// The `COPY` statement of this chunk.
    pub fn copy_statement(&self, ts: &TableSchema) -> String {
        let cols: Vec<String> = ts
            .columns
            .iter()
            .map(|c| quote_ident(&c.def.name))
            .collect();
        let mut conds = Vec::new();
        let mut order = String::new();
        let key = int_key(ts).map(|i| quote_ident(&ts.columns[i].def.name));
        if let (Some(a), Some(k)) = (self.after, &key) {
            conds.push(format!("{k} > {a}"));
        }
        if let Some(c) = &self.condition {
            conds.push(format!("({c})"));
        }
        match &self.kind {
            ChunkKind::KeyRange { lo, hi } => {
                let k = key.clone().unwrap_or_default();
                if let Some(lo) = lo {
                    conds.push(format!("{k} >= {lo}"));
                }
                if let Some(hi) = hi {
                    conds.push(format!("{k} < {hi}"));
                }
                order = format!(" ORDER BY {k}");
            }
            ChunkKind::Pages { lo, hi } => {
                if let Some(lo) = lo {
                    conds.push(format!(
                        "ctid >= {}::tid",
                        quote_literal(&format!("({lo},0)"))
                    ));
                }
                if let Some(hi) = hi {
                    conds.push(format!(
                        "ctid < {}::tid",
                        quote_literal(&format!("({hi},0)"))
                    ));
                }
            }
            ChunkKind::Whole => {}
        }
        let filter = if conds.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", conds.join(" AND "))
        };
        let from = match &self.source {
            // On its own line: a trailing `--` comment must not swallow the parenthesis.
            Some(select) => format!("({select}\n) AS hw_override"),
            None => ts.relation(),
        };
        format!(
            "COPY (SELECT {} FROM {from}{filter}{order}) TO STDOUT (FORMAT binary)",
            cols.join(", "),
        )
    }
}

fn sql_error(context: String, e: tokio_postgres::Error) -> ConnectError {
    let msg = match e.as_db_error() {
        Some(db) => format!(
            "{context}: {} (SQLSTATE {})",
            db.message(),
            db.code().code()
        ),
        None => format!("{context}: {e}"),
    };
    if e.is_closed() || e.as_db_error().is_none() {
        ConnectError::retriable(msg)
    } else {
        ConnectError::fatal(msg)
    }
}

/// Estimated rows and pages of a table: `pg_class.reltuples` when analyzed (a partitioned
/// root: its leaf partitions', and no pages, so it is never split by page ranges), else an
/// exact count.
pub async fn estimate_rows(sql: &Client, ts: &TableSchema) -> Result<(u64, i64), ConnectError> {
    let name = format!(
        "{}.{}",
        quote_ident(&ts.id.schema),
        quote_ident(&ts.id.table)
    );
    let statement = if ts.partitioned {
        "SELECT CASE WHEN bool_or(c.reltuples >= 0) THEN sum(greatest(c.reltuples, 0))::bigint ELSE -1 END, 0::bigint \
         FROM pg_partition_tree($1::text::regclass) t JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf"
    } else {
        "SELECT reltuples::bigint, (pg_relation_size(oid) / current_setting('block_size')::bigint)::bigint FROM pg_class WHERE oid = $1::text::regclass"
    };
    let row = sql
        .query_one(statement, &[&name])
        .await
        .map_err(|e| sql_error(format!("estimating the size of {}", ts.id), e))?;
    let (tuples, pages): (Option<i64>, i64) = (row.get(0), row.get(1));
    let tuples = tuples.unwrap_or(-1);
    if tuples >= 0 {
        return Ok((tuples as u64, pages));
    }
    let n: i64 = sql
        .query_one(&format!("SELECT count(*) FROM {}", ts.relation()), &[])
        .await
        .map_err(|e| sql_error(format!("counting the rows of {}", ts.id), e))?
        .get(0);
    Ok((n as u64, pages))
}

/// Splits one table into chunks of about `chunk_rows` rows.
pub async fn plan_table(
    sql: &Client,
    table: usize,
    ts: &TableSchema,
    after: Option<i64>,
    estimated: u64,
    pages: i64,
    chunk_rows: u64,
) -> Result<Vec<Chunk>, ConnectError> {
    let n = estimated.div_ceil(chunk_rows.max(1)).max(1) as usize;
    let single = |kind| {
        vec![Chunk {
            table,
            index: 0,
            of: 1,
            kind,
            after,
            condition: None,
            source: None,
        }]
    };
    if let Some(ki) = int_key(ts) {
        if n <= 1 {
            return Ok(single(ChunkKind::KeyRange { lo: None, hi: None }));
        }
        let k = quote_ident(&ts.columns[ki].def.name);
        let cond = after.map_or(String::new(), |a| format!(" WHERE {k} > {a}"));
        let row = sql
            .query_one(
                &format!(
                    "SELECT min({k})::bigint, max({k})::bigint FROM {}{cond}",
                    ts.relation()
                ),
                &[],
            )
            .await
            .map_err(|e| sql_error(format!("reading the key range of {}", ts.id), e))?;
        let (Some(lo), Some(hi)) = (row.get::<_, Option<i64>>(0), row.get::<_, Option<i64>>(1))
        else {
            return Ok(single(ChunkKind::KeyRange { lo: None, hi: None }));
        };
        let span = i128::from(hi) - i128::from(lo) + 1;
        let n = (n as i128).min(span).max(1) as usize;
        let bound = |i: usize| (i128::from(lo) + span * i as i128 / n as i128) as i64;
        return Ok((0..n)
            .map(|i| Chunk {
                table,
                index: i,
                of: n,
                kind: ChunkKind::KeyRange {
                    lo: (i > 0).then(|| bound(i)),
                    hi: (i + 1 < n).then(|| bound(i + 1)),
                },
                after,
                condition: None,
                source: None,
            })
            .collect());
    }
    if n <= 1 || pages <= 1 {
        return Ok(single(ChunkKind::Whole));
    }
    let n = n.min(pages as usize);
    let bound = |i: usize| pages * i as i64 / n as i64;
    Ok((0..n)
        .map(|i| Chunk {
            table,
            index: i,
            of: n,
            kind: ChunkKind::Pages {
                lo: (i > 0).then(|| bound(i)),
                hi: (i + 1 < n).then(|| bound(i + 1)),
            },
            after: None,
            condition: None,
            source: None,
        })
        .collect())
}

/// Parses `COPY ... (FORMAT binary)` output incrementally, without copying field bytes: a row
/// is a list of spans into the parser's buffer, valid until the next [`CopyParser::next_row`].
#[derive(Default)]
pub struct CopyParser {
    buf: BytesMut,
    /// Bytes of the row last returned, dropped from `buf` at the next call.
    consumed: usize,
    header_done: bool,
    pub finished: bool,
}

/// One field of a parsed row: `start..end` of the parser's [`CopyParser::row_bytes`], or `None`
/// for SQL NULL.
pub type FieldSpan = Option<(usize, usize)>;

impl CopyParser {
    const SIGNATURE: &'static [u8] = b"PGCOPY\n\xff\r\n\0";

    pub fn push(&mut self, chunk: &[u8]) {
        self.release();
        self.buf.extend_from_slice(chunk);
    }

    fn release(&mut self) {
        if self.consumed > 0 {
            self.buf.advance(self.consumed);
            self.consumed = 0;
        }
    }

    /// The bytes the spans of the row last returned point into.
    pub fn row_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Parses the next complete row into `spans` (one per field); false when more input is
    /// needed or the trailer was read.
    pub fn next_row(&mut self, spans: &mut Vec<FieldSpan>) -> Result<bool, String> {
        self.release();
        if self.finished {
            return Ok(false);
        }
        if !self.header_done {
            if self.buf.len() < 19 {
                return Ok(false);
            }
            if &self.buf[..11] != Self::SIGNATURE {
                return Err("not a binary COPY stream".into());
            }
            let ext = u32::from_be_bytes([self.buf[15], self.buf[16], self.buf[17], self.buf[18]])
                as usize;
            if self.buf.len() < 19 + ext {
                return Ok(false);
            }
            self.buf.advance(19 + ext);
            self.header_done = true;
        }
        let buf = &self.buf[..];
        if buf.len() < 2 {
            return Ok(false);
        }
        let n = i16::from_be_bytes([buf[0], buf[1]]);
        if n == -1 {
            self.finished = true;
            return Ok(false);
        }
        if n < 0 {
            return Err(format!("bad field count {n}"));
        }
        // Find the tuple's end before taking it.
        let mut pos = 2usize;
        spans.clear();
        for _ in 0..n {
            if buf.len() < pos + 4 {
                return Ok(false);
            }
            let len = i32::from_be_bytes([buf[pos], buf[pos + 1], buf[pos + 2], buf[pos + 3]]);
            pos += 4;
            if len < 0 {
                spans.push(None);
            } else {
                let len = len as usize;
                if buf.len() < pos + len {
                    return Ok(false);
                }
                spans.push(Some((pos, pos + len)));
                pos += len;
            }
        }
        self.consumed = pos;
        Ok(true)
    }
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
    /// Starts one reader per client; each reads chunks in order from a shared cursor.
    pub fn start(
        clients: Vec<Client>,
        tables: Arc<Vec<Arc<TableSchema>>>,
        chunks: Arc<Vec<Chunk>>,
        mapping: MappingConfig,
        placeholder: String,
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
        let handles = clients
            .into_iter()
            .map(|client| {
                let (tables, chunks, senders, cursor) = (
                    tables.clone(),
                    chunks.clone(),
                    senders.clone(),
                    cursor.clone(),
                );
                let (mapping, placeholder) = (mapping.clone(), placeholder.clone());
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
                        let ts = &tables[chunk.table];
                        let r = read_chunk(&client, ts, chunk, &mapping, &placeholder, &tx).await;
                        match r {
                            Ok(()) => {
                                let _ = tx.send(ChunkMsg::Done).await;
                            }
                            Err(e) => {
                                let _ = tx.send(ChunkMsg::Failed(e)).await;
                                break;
                            }
                        }
                    }
                    let _ = client.batch_execute("COMMIT").await;
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
    client: &Client,
    ts: &TableSchema,
    chunk: &Chunk,
    mapping: &MappingConfig,
    placeholder: &str,
    tx: &mpsc::Sender<ChunkMsg>,
) -> Result<(), ConnectError> {
    let q = chunk.copy_statement(ts);
    let stream = client
        .copy_out(q.as_str())
        .await
        .map_err(|e| sql_error(format!("COPY of {}", ts.id), e))?;
    let mut stream = Box::pin(stream);
    let mut parser = CopyParser::default();
    let mut fields = Vec::with_capacity(ts.columns.len());
    let mut batch = Vec::with_capacity(BATCH_ROWS);
    loop {
        match parser.next_row(&mut fields) {
            Ok(true) => {
                if fields.len() != ts.columns.len() {
                    return Err(ConnectError::fatal(format!(
                        "COPY of {} returned {} columns, expected {}",
                        ts.id,
                        fields.len(),
                        ts.columns.len()
                    )));
                }
                let bytes = parser.row_bytes();
                let row = ts
                    .row(mapping, placeholder, |i| match fields[i] {
                        Some((start, end)) => RawColumn::Binary(&bytes[start..end]),
                        None => RawColumn::Null,
                    })
                    .map_err(|e| ConnectError::data(e.to_string()))?;
                batch.push(row);
                if batch.len() >= BATCH_ROWS {
                    let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH_ROWS));
                    if tx.send(ChunkMsg::Rows(full)).await.is_err() {
                        return Ok(());
                    }
                }
            }
            Ok(false) if parser.finished => {
                // Drain to the end of the COPY.
                while let Some(r) = stream.next().await {
                    r.map_err(|e| sql_error(format!("finishing COPY of {}", ts.id), e))?;
                }
                break;
            }
            Ok(false) => match stream.next().await {
                Some(Ok(bytes)) => parser.push(&bytes),
                Some(Err(e)) => return Err(sql_error(format!("reading COPY of {}", ts.id), e)),
                None => {
                    return Err(ConnectError::retriable(format!(
                        "COPY of {} ended early",
                        ts.id
                    )))
                }
            },
            Err(e) => return Err(ConnectError::fatal(format!("COPY of {}: {e}", ts.id))),
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
    fn skip_regions_round_trip_and_cover() {
        let skips = vec![
            SkipRegion {
                table: "public.a".into(),
                after: Some(10),
                lsn: Lsn(500),
            },
            SkipRegion {
                table: "public.b".into(),
                after: None,
                lsn: Lsn(700),
            },
        ];
        assert_eq!(decode_skips(&encode_skips(&skips)), skips);
        assert!(skips[0].covers("public.a", Some(11), Lsn(499)));
        assert!(
            !skips[0].covers("public.a", Some(10), Lsn(499)),
            "key read before"
        );
        assert!(
            !skips[0].covers("public.a", Some(11), Lsn(500)),
            "committed after"
        );
        assert!(!skips[0].covers("public.b", Some(11), Lsn(1)));
        assert!(skips[1].covers("public.b", None, Lsn(1)));
        assert_eq!(decode_skips("not json"), Vec::new());
        let tables = vec!["public.a".to_owned(), "x.\"y,z\"".to_owned()];
        assert_eq!(decode_tables(&encode_tables(&tables)), tables);
    }

    #[test]
    fn copy_parser_reads_rows_split_anywhere() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(CopyParser::SIGNATURE);
        bytes.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
        for v in [1i32, 2] {
            bytes.extend_from_slice(&2i16.to_be_bytes());
            bytes.extend_from_slice(&4i32.to_be_bytes());
            bytes.extend_from_slice(&v.to_be_bytes());
            bytes.extend_from_slice(&(-1i32).to_be_bytes());
        }
        bytes.extend_from_slice(&(-1i16).to_be_bytes());
        let mut p = CopyParser::default();
        let mut rows = Vec::new();
        let mut spans = Vec::new();
        for b in &bytes {
            p.push(&[*b]);
            while p.next_row(&mut spans).unwrap() {
                let row: Vec<Option<Vec<u8>>> = spans
                    .iter()
                    .map(|s| s.map(|(a, b)| p.row_bytes()[a..b].to_vec()))
                    .collect();
                rows.push(row);
            }
        }
        assert!(p.finished);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1][0].as_deref(), Some(&2i32.to_be_bytes()[..]));
        assert_eq!(rows[1][1], None);
    }
}
