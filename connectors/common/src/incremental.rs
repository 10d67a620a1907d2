//! What every connector's incremental snapshot shares (Debezium's `execute-snapshot` of type
//! `incremental`, the watermark algorithm of Netflix's DBLog): the progress its offsets keep,
//! the window that holds a chunk until the stream reaches its close watermark, and the
//! watermark rows. The SQL that reads chunks is each connector's own.
//!
//! Invariants: [`Progress`] round-trips through its JSON (the offsets' `incremental_snapshot`);
//! a [`Window`] hands out each chunk row at most once, in key order, minus the rows whose key
//! a streamed change inside the window touched.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use headwater_api::{Struct, Value};
use serde_json::json;

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
/// `T` identifies the chunk's table (its schema); `R` is a row as the connector holds it.
pub struct Window<T, R = Struct> {
    /// The chunk id the watermark rows carry (`<id>-open`, `<id>-close`).
    pub id: String,
    /// Whether the stream passed the open watermark.
    pub open: bool,
    pub table: Arc<T>,
    /// The chunk's rows in key order; `None` where a streamed change replaced one.
    rows: Vec<Option<R>>,
    by_key: HashMap<String, usize>,
    /// The key (as text) of the chunk's last row: where the next chunk starts.
    pub last_key: Vec<String>,
}

impl<T, R> Window<T, R> {
    /// A window over `rows` (in key order, each with its key as [`key_text`] or the
    /// connector's own key text) of `table`.
    pub fn new(
        id: String,
        table: Arc<T>,
        rows: Vec<(String, R)>,
        last_key: Vec<String>,
    ) -> Window<T, R> {
        let mut by_key = HashMap::with_capacity(rows.len());
        let mut held = Vec::with_capacity(rows.len());
        for (i, (key, row)) in rows.into_iter().enumerate() {
            by_key.insert(key, i);
            held.push(Some(row));
        }
        Window {
            id,
            open: false,
            table,
            rows: held,
            by_key,
            last_key,
        }
    }

    /// Whether a change of a table is to be checked against this window: it is open and
    /// `same_table` says the table is the chunk's.
    pub fn covers(&self, same_table: impl FnOnce(&T) -> bool) -> bool {
        self.open && same_table(&self.table)
    }

    /// A streamed change of a row with key `key` ([`key_text`]) inside the window: the
    /// chunk's row with the same key is dropped.
    pub fn replaced(&mut self, key: &str) {
        if let Some(i) = self.by_key.remove(key) {
            self.rows[i] = None;
        }
    }

    /// The table was truncated inside the window: none of the chunk's rows is left.
    pub fn truncated(&mut self) {
        self.rows.iter_mut().for_each(|r| *r = None);
        self.by_key.clear();
    }

    /// The rows left, in key order.
    pub fn into_rows(self) -> impl Iterator<Item = R> {
        self.rows.into_iter().flatten()
    }

    /// Rows left (not replaced by streamed changes).
    pub fn rows_left(&self) -> usize {
        self.by_key.len()
    }
}

/// A row's key values (the fields `key_fields`) as one string, to find the chunk's row a
/// change replaces.
pub fn key_text(row: &Struct, key_fields: &[usize]) -> String {
    use std::fmt::Write as _;
    let mut text = String::new();
    for &k in key_fields {
        let _ = write!(
            text,
            "{:?}\u{1f}",
            row.values().get(k).unwrap_or(&Value::Null)
        );
    }
    text
}

/// A new chunk id: unique per task and run (short enough for Debezium's `varchar(42)` id with
/// its `-close` suffix).
pub fn chunk_id(counter: u64) -> String {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    format!("hw-{:x}-{:x}-{counter}", std::process::id(), micros)
}

/// A watermark row of chunk `id` as Debezium writes it: (id, type, data), the data a JSON
/// document with the time (`now_iso`) the window opened or closed.
pub fn watermark_row(id: &str, open: bool, now_iso: &str) -> (String, &'static str, String) {
    let (suffix, kind, field) = if open {
        ("open", "snapshot-window-open", "openWindowTimestamp")
    } else {
        ("close", "snapshot-window-close", "closeWindowTimestamp")
    };
    (
        format!("{id}-{suffix}"),
        kind,
        json!({ field: now_iso }).to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use headwater_api::{Schema, SchemaBuilder};

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
    fn windows_drop_replaced_rows_and_keep_key_order() {
        let schema = SchemaBuilder::struct_()
            .field("id", Schema::int32())
            .field("v", Schema::string())
            .build();
        let schema = std::sync::Arc::new(schema);
        let row = |id: i32, v: &str| {
            Struct::from_trusted_values(
                schema.clone(),
                vec![Value::Int32(id), Value::String(v.into())],
            )
        };
        let rows = [row(1, "a"), row(2, "b"), row(3, "c")];
        let mut w = Window::new(
            "c".into(),
            Arc::new(()),
            rows.into_iter().map(|r| (key_text(&r, &[0]), r)).collect(),
            vec!["3".into()],
        );
        assert!(!w.covers(|_| true), "not before the open watermark");
        w.open = true;
        assert!(w.covers(|_| true) && !w.covers(|_| false));
        w.replaced(&key_text(&row(2, "changed"), &[0]));
        w.replaced(&key_text(&row(9, "other"), &[0]));
        assert_eq!(w.rows_left(), 2);
        let left: Vec<_> = w.into_rows().map(|r| r.values()[0].clone()).collect();
        assert_eq!(left, vec![Value::Int32(1), Value::Int32(3)]);
        let (id, kind, data) = watermark_row("c", false, "2026-01-01T00:00:00.000Z");
        assert_eq!((id.as_str(), kind), ("c-close", "snapshot-window-close"));
        assert_eq!(
            data,
            r#"{"closeWindowTimestamp":"2026-01-01T00:00:00.000Z"}"#
        );
        assert!(chunk_id(7).ends_with("-7") && chunk_id(7).len() < 36);
    }
}
