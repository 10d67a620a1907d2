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

use headwater_api::{SnapshotProgress, Struct, Value};
use serde_json::json;

use crate::notification::{Notifier, TableScanStatus};
use crate::signal::IncrementalSignal;

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
    /// The id of the signal that started it: its notifications' id.
    pub correlation_id: Option<String>,
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

    /// The qualified names of the tables still to copy, in order (notifications' list).
    pub fn table_names(&self) -> Vec<String> {
        self.tables.iter().map(TableRequest::name).collect()
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
            "correlation_id": self.correlation_id,
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
            correlation_id: v
                .get("correlation_id")
                .and_then(|c| c.as_str())
                .map(str::to_owned),
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

/// Queues the tables (schema or database, table) a request names, each with the request's
/// condition for it, starting an incremental snapshot if none runs; logs what was added and
/// reports the tables in `status` (the task's snapshot progress, which the incremental
/// snapshot shares with the initial one); a new incremental snapshot is notified as started.
pub fn queue(
    progress: &mut Option<Progress>,
    request: &crate::signal::SnapshotRequest,
    tables: impl IntoIterator<Item = (String, String)>,
    chunk_size: usize,
    status: &SnapshotProgress,
    notes: &Notifier,
) {
    let fresh = progress.is_none();
    let p = progress.get_or_insert_with(Progress::default);
    let mut added = Vec::new();
    for (schema, table) in tables {
        let name = format!("{schema}.{table}");
        let condition = request
            .condition_index(&name)
            .map(|i| request.conditions[i].1.clone());
        if p.add(TableRequest {
            schema,
            table,
            condition,
        }) {
            added.push(name);
        }
    }
    let queued = p.tables.len();
    if queued == 0 {
        *progress = None;
    } else {
        report(status, fresh, queued);
        if fresh {
            p.correlation_id = request.id.clone();
            notes.incremental_started(p.correlation_id.as_deref(), &p.table_names());
        }
    }
    tracing::info!(tables = ?added, queued, chunk_size, "incremental snapshot: copying in chunks while streaming goes on");
}

/// Reports an incremental snapshot with `left` tables to copy in `status`: a new one, one
/// resumed from the offsets (`fresh`), or one whose table list changed.
pub fn report(status: &SnapshotProgress, fresh: bool, left: usize) {
    let now = status.status();
    if fresh || !now.running {
        status.start(left as u64, 0, 0, 0);
    } else {
        status.start(now.tables_done + left as u64, 0, now.tables_done, now.rows);
    }
}

/// The table whose next chunk is to be read: none while paused or when none runs; when every
/// table is done the incremental snapshot ends here (and in `status`).
pub fn table_to_read(
    progress: &mut Option<Progress>,
    status: &SnapshotProgress,
    notes: &Notifier,
) -> Option<TableRequest> {
    let p = progress.as_ref()?;
    if p.paused {
        return None;
    }
    match p.tables.front() {
        Some(t) => Some(t.clone()),
        None => {
            tracing::info!("incremental snapshot finished");
            status.finish();
            notes.incremental_completed(p.correlation_id.as_deref());
            *progress = None;
            None
        }
    }
}

/// Acts on a signal of the incremental snapshot: the held chunk's open watermark opens its
/// window; its close watermark ends it: the window is returned (its rows to hand out now) and
/// the progress moves past the chunk; `stop-snapshot`, `pause-snapshot`, `resume-snapshot`
/// steer the progress ([`steer`]), dropping a window they void. Watermarks of a window this
/// task does not hold are ignored.
pub fn on_signal<T, R>(
    signal: IncrementalSignal,
    window: &mut Option<Window<T, R>>,
    progress: &mut Option<Progress>,
    status: &SnapshotProgress,
    notes: &Notifier,
) -> Option<Window<T, R>> {
    match signal {
        IncrementalSignal::WindowOpen(id) => {
            if let Some(w) = window.as_mut().filter(|w| w.id == id) {
                w.open = true;
            }
            None
        }
        IncrementalSignal::WindowClose(id) => {
            if window.as_ref().is_none_or(|w| w.id != id) {
                return None;
            }
            let closed = window.take()?;
            if let Some(p) = progress.as_mut() {
                p.after = Some(closed.last_key.clone());
            }
            status.add_rows(closed.rows_left() as u64);
            notes.incremental_rows(closed.rows_left() as u64);
            tracing::debug!(chunk = %closed.id, rows = closed.rows_left(), "incremental snapshot chunk handed out");
            Some(closed)
        }
        steering => {
            if steer(progress, &steering, status, notes) {
                *window = None;
            }
            None
        }
    }
}

/// Acts on `stop-snapshot`, `pause-snapshot` and `resume-snapshot` (watermarks are the
/// connector's): drops tables from the incremental snapshot (ending it when none is left) or
/// pauses and resumes it. True when the table whose chunk a window may hold was dropped: that
/// window is void.
pub fn steer(
    progress: &mut Option<Progress>,
    signal: &IncrementalSignal,
    status: &SnapshotProgress,
    notes: &Notifier,
) -> bool {
    let Some(p) = progress.as_mut() else {
        if !matches!(
            signal,
            IncrementalSignal::WindowOpen(_) | IncrementalSignal::WindowClose(_)
        ) {
            tracing::info!("{signal:?}: no incremental snapshot is running");
        }
        return false;
    };
    match signal {
        IncrementalSignal::Stop(request) => {
            let first_went = match request {
                None => {
                    p.tables.clear();
                    true
                }
                Some(r) => p.remove(|name| r.names(name)),
            };
            tracing::info!(tables = ?request.as_ref().map(|r| &r.collections), left = p.tables.len(), "stop-snapshot signal: dropped from the incremental snapshot");
            notes.incremental_aborted(
                p.correlation_id.as_deref(),
                request.as_ref().map(|r| r.collections.as_slice()),
            );
            if first_went {
                // The next table's count starts from zero.
                notes.reset_incremental_rows();
            }
            if p.tables.is_empty() {
                *progress = None;
                status.finish();
            } else {
                report(status, false, p.tables.len());
            }
            first_went
        }
        IncrementalSignal::Pause | IncrementalSignal::Resume => {
            let paused = matches!(signal, IncrementalSignal::Pause);
            if p.paused != paused {
                notes.incremental_paused(p.correlation_id.as_deref(), paused, &p.table_names());
            }
            p.paused = paused;
            tracing::info!(
                paused = p.paused,
                "incremental snapshot {}",
                if p.paused { "paused" } else { "resumed" }
            );
            false
        }
        IncrementalSignal::WindowOpen(_) | IncrementalSignal::WindowClose(_) => false,
    }
}

/// The incremental snapshot is done with its first table (`scan` says why: copied, empty,
/// gone, ...): counted in `status`, notified, and the next table starts from its beginning.
pub fn table_done(
    progress: &mut Option<Progress>,
    status: &SnapshotProgress,
    notes: &Notifier,
    scan: TableScanStatus,
) {
    let Some(p) = progress.as_mut() else {
        return;
    };
    if let Some(table) = p.tables.front() {
        tracing::info!(table = %table.name(), status = ?scan, "incremental snapshot of table done");
        notes.incremental_table_done(
            p.correlation_id.as_deref(),
            &p.table_names(),
            &table.name(),
            scan,
        );
    }
    status.table_done();
    p.next_table();
}

/// The incremental snapshot cannot go on (see the log): it ends, notified as aborted.
pub fn abandon(progress: &mut Option<Progress>, status: &SnapshotProgress, notes: &Notifier) {
    if let Some(p) = progress.take() {
        notes.incremental_aborted(p.correlation_id.as_deref(), None);
    }
    status.finish();
}

/// A chunk of the first table, ending at key `last`, was read and waits in its window:
/// notified with the table's largest key; `readable` turns a key part as the progress keeps
/// it into text for people (a connector that keeps keys encoded decodes them).
pub fn chunk_read(
    progress: &Option<Progress>,
    notes: &Notifier,
    last: &[String],
    readable: impl Fn(&str) -> String,
) {
    if !notes.is_on() {
        return;
    }
    if let Some(p) = progress {
        if let Some(table) = p.tables.front() {
            let text = |key: &[String]| key.iter().map(|k| readable(k)).collect::<Vec<_>>();
            let max = text(p.max.as_deref().unwrap_or_default());
            let id = p.correlation_id.as_deref();
            notes.incremental_chunk(id, &p.table_names(), &table.name(), &max, &text(last));
        }
    }
}

/// The time now as an ISO-8601 UTC instant with milliseconds (Java's `Instant` text), for the
/// watermarks' data.
pub fn now_iso() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let (days, ms_of_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (y, m, d) = headwater_api::civil::civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        ms_of_day / 3_600_000,
        ms_of_day / 60_000 % 60,
        ms_of_day / 1000 % 60,
        ms_of_day % 1000
    )
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
        p.correlation_id = Some("sig-7".into());
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
        let now = now_iso();
        assert_eq!(
            (now.len(), &now[4..5], &now[10..11], &now[23..]),
            (24, "-", "T", "Z")
        );
    }

    #[test]
    fn stop_pause_and_resume_steer_the_progress() {
        let mut progress = Some(Progress::default());
        for t in ["a", "b"] {
            progress.as_mut().unwrap().add(TableRequest {
                schema: "s".into(),
                table: t.into(),
                condition: None,
            });
        }
        let status = SnapshotProgress::default();
        let notes = Notifier::from_props(
            &headwater_api::properties(&[
                ("notification.enabled.channels", "sink"),
                ("notification.sink.topic.name", "notes"),
            ]),
            "cdc",
        );
        report(&status, true, 2);
        assert!(!steer(
            &mut progress,
            &IncrementalSignal::Pause,
            &status,
            &notes
        ));
        assert!(progress.as_ref().unwrap().paused);
        // A second pause changes nothing and is not notified.
        assert!(!steer(
            &mut progress,
            &IncrementalSignal::Pause,
            &status,
            &notes
        ));
        assert!(!steer(
            &mut progress,
            &IncrementalSignal::Resume,
            &status,
            &notes
        ));
        assert!(!progress.as_ref().unwrap().paused);
        let only_b =
            crate::signal::SnapshotRequest::from_data(&json!({"data-collections": ["s\\.b"]}))
                .unwrap();
        let stop_b = IncrementalSignal::Stop(Some(only_b));
        assert!(!steer(&mut progress, &stop_b, &status, &notes));
        assert_eq!(progress.as_ref().unwrap().tables.len(), 1);
        assert_eq!((status.status().tables, status.status().running), (1, true));
        assert!(steer(
            &mut progress,
            &IncrementalSignal::Stop(None),
            &status,
            &notes
        ));
        assert!(progress.is_none(), "nothing left: the snapshot ends");
        assert!(!status.status().running);
        assert!(!steer(
            &mut progress,
            &IncrementalSignal::Pause,
            &status,
            &notes
        ));
        let mut records = Vec::new();
        notes.drain_into(&mut records);
        let kinds: Vec<String> = records
            .iter()
            .map(|r| match r.value.as_struct().and_then(|v| v.get("type")) {
                Some(Value::String(s)) => s.clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(kinds, ["PAUSED", "RESUMED", "ABORTED", "ABORTED"]);
    }

    #[test]
    fn a_table_done_is_notified_with_its_rows_and_the_end_completes() {
        let notes = Notifier::from_props(
            &headwater_api::properties(&[
                ("notification.enabled.channels", "sink"),
                ("notification.sink.topic.name", "notes"),
            ]),
            "cdc",
        );
        let status = SnapshotProgress::default();
        let mut progress = None;
        let mut request =
            crate::signal::SnapshotRequest::from_data(&json!({"data-collections": ["s\\.a"]}))
                .unwrap();
        request.id = Some("sig-1".into());
        queue(
            &mut progress,
            &request,
            [("s".to_owned(), "a".to_owned())],
            10,
            &status,
            &notes,
        );
        progress.as_mut().unwrap().max = Some(vec!["9".into()]);
        chunk_read(&progress, &notes, &["4".to_owned()], str::to_owned);
        notes.incremental_rows(4);
        table_done(&mut progress, &status, &notes, TableScanStatus::Succeeded);
        assert!(table_to_read(&mut progress, &status, &notes).is_none());
        assert!(progress.is_none());
        let mut records = Vec::new();
        notes.drain_into(&mut records);
        let field = |i: usize, f: &str| match records[i].value.as_struct().and_then(|v| v.get(f)) {
            Some(Value::String(s)) => s.clone(),
            other => panic!("{other:?}"),
        };
        let kinds: Vec<String> = (0..records.len()).map(|i| field(i, "type")).collect();
        assert_eq!(
            kinds,
            [
                "STARTED",
                "IN_PROGRESS",
                "TABLE_SCAN_COMPLETED",
                "COMPLETED"
            ]
        );
        let data = |i: usize| match records[i]
            .value
            .as_struct()
            .and_then(|v| v.get("additional_data"))
        {
            Some(Value::Map(m)) => m.clone(),
            other => panic!("{other:?}"),
        };
        let has = |i: usize, k: &str, v: &str| data(i).contains(&(Value::from(k), Value::from(v)));
        assert!(has(0, "data_collections", "s.a"));
        for r in &records {
            let id = r.value.as_struct().and_then(|v| v.get("id"));
            assert_eq!(id, Some(&Value::from("sig-1")), "the signal's id is theirs");
        }
        assert!(has(1, "maximum_key", "9") && has(1, "last_processed_key", "4"));
        assert!(has(2, "total_rows_scanned", "4") && has(2, "status", "SUCCEEDED"));
    }
}
