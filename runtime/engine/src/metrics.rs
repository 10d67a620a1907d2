//! Worker metrics in the Prometheus text exposition format (version 0.0.4), written by hand.
//!
//! What is measured and where:
//! - per task, in [`crate::runner::TaskShared`]: records polled and written, bytes written,
//!   commits (counters), the latency and size of each log commit ([`Histogram`]), and the
//!   source lag (`now - source.ts_ms` of the last record polled that carries a Debezium
//!   `source.ts_ms`, Debezium's `MilliSecondsBehindSource`);
//! - per connector and task: the state shown by `/status`, one-hot over every state;
//! - per log partition: start and end offsets, from the log's public API; and the log
//!   directory's size on disk.
//!
//! Invariants: recording is lock-free (relaxed atomics) and costs a few atomic adds per commit
//! or record; rendering never blocks a task. Counters only grow for the life of a task run
//! (a restarted task starts again at zero, which Prometheus' `rate()` handles as a reset).

use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use headwater_api::{SourceRecord, Value};

use crate::model::State;

/// Bucket bounds of the commit latency histogram, in seconds.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];
/// Bucket bounds of the commit size histogram, in bytes.
pub const SIZE_BUCKETS: &[f64] = &[
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
];

/// A fixed-bucket histogram of non-negative values recorded in integer units (microseconds or
/// bytes) and shown in `scale` units (seconds: 1e-6, bytes: 1).
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    scale: f64,
    buckets: Vec<AtomicU64>,
    sum: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    /// A latency histogram (record with [`Histogram::observe_duration`]).
    pub fn latency() -> Self {
        Self::new(LATENCY_BUCKETS, 1e-6)
    }

    /// A size histogram in bytes (record with [`Histogram::observe`]).
    pub fn bytes() -> Self {
        Self::new(SIZE_BUCKETS, 1.0)
    }

    fn new(bounds: &'static [f64], scale: f64) -> Self {
        Histogram {
            bounds,
            scale,
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// Records a value in integer units.
    pub fn observe(&self, units: u64) {
        let shown = units as f64 * self.scale;
        if let Some(i) = self.bounds.iter().position(|b| shown <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.sum.fetch_add(units, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a duration (for latency histograms).
    pub fn observe_duration(&self, d: Duration) {
        self.observe(d.as_micros().min(u64::MAX as u128) as u64);
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn write(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (bound, bucket) in self.bounds.iter().zip(&self.buckets) {
            cumulative += bucket.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {cumulative}");
        }
        let count = self.count();
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {count}");
        let units = self.sum.load(Ordering::Relaxed);
        // Exact decimal text: microseconds as seconds with six decimals, bytes as integers.
        let sum = if self.scale == 1.0 {
            units.to_string()
        } else {
            format!("{}.{:06}", units / 1_000_000, units % 1_000_000)
        };
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {count}");
    }
}

/// `source.ts_ms` of a Debezium change event (the value's `source` struct), if it has one.
pub fn source_ts_ms(record: &SourceRecord) -> Option<i64> {
    let value = record.value.as_struct()?;
    let source = value.get("source")?.as_struct()?;
    source.get("ts_ms").and_then(Value::as_i64)
}

/// Stores the source lag at `now_ms` of the newest of `records` that carries `source.ts_ms`
/// (among the last few before the notifications a batch may end with; a tombstone carries
/// none) in `lag_ms`. The runner observes each polled batch.
pub fn observe_source_lag(lag_ms: &AtomicI64, records: &[SourceRecord], now_ms: i64) {
    let notification = |r: &&SourceRecord| {
        r.value_schema.as_ref().and_then(|s| s.name())
            == Some("io.debezium.connector.common.Notification")
    };
    let mut newest = records.iter().rev().skip_while(notification).take(8);
    if let Some(ts) = newest.find_map(source_ts_ms) {
        lag_ms.store((now_ms - ts).max(0), Ordering::Relaxed);
    }
}

/// Marker for "no source lag known yet".
pub const NO_LAG: i64 = i64::MIN;

/// Everything rendered for one task.
pub struct TaskSample<'a> {
    pub connector: &'a str,
    pub task: u32,
    pub state: State,
    pub shared: &'a crate::runner::TaskShared,
}

/// Everything rendered for one connector.
pub struct ConnectorSample<'a> {
    pub name: &'a str,
    pub state: State,
    pub tasks: Vec<TaskSample<'a>>,
}

/// One log partition's offsets.
pub struct PartitionSample {
    pub topic: String,
    pub partition: u32,
    pub start_offset: i64,
    pub end_offset: i64,
}

const STATES: [State; 6] = [
    State::Unassigned,
    State::Running,
    State::Paused,
    State::Stopped,
    State::Failed,
    State::Restarting,
];

fn state_name(s: State) -> &'static str {
    match s {
        State::Unassigned => "UNASSIGNED",
        State::Running => "RUNNING",
        State::Paused => "PAUSED",
        State::Stopped => "STOPPED",
        State::Failed => "FAILED",
        State::Restarting => "RESTARTING",
    }
}

/// A label value escaped as the text format wants (`\\`, `\"`, `\n`).
pub fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Renders the connector, task and log metrics.
pub fn render(
    connectors: &[ConnectorSample<'_>],
    partitions: &[PartitionSample],
    log_disk_bytes: Option<u64>,
) -> String {
    let mut out = String::new();
    header(
        &mut out,
        "headwater_connectors",
        "gauge",
        "Connectors on this worker.",
    );
    let _ = writeln!(out, "headwater_connectors {}", connectors.len());

    header(
        &mut out,
        "headwater_connector_state",
        "gauge",
        "1 for the connector's current state (as in /status), 0 for the others.",
    );
    for c in connectors {
        let name = escape_label(c.name);
        for s in STATES {
            let _ = writeln!(
                out,
                "headwater_connector_state{{connector=\"{name}\",state=\"{}\"}} {}",
                state_name(s),
                u8::from(s == c.state)
            );
        }
    }

    let tasks: Vec<(String, &TaskSample<'_>)> = connectors
        .iter()
        .flat_map(|c| c.tasks.iter())
        .map(|t| {
            (
                format!(
                    "connector=\"{}\",task=\"{}\"",
                    escape_label(t.connector),
                    t.task
                ),
                t,
            )
        })
        .collect();

    header(
        &mut out,
        "headwater_task_state",
        "gauge",
        "1 for the task's current state (as in /status), 0 for the others.",
    );
    for (labels, t) in &tasks {
        for s in STATES.iter().filter(|s| **s != State::Stopped) {
            let _ = writeln!(
                out,
                "headwater_task_state{{{labels},state=\"{}\"}} {}",
                state_name(*s),
                u8::from(*s == t.state)
            );
        }
    }

    type Counter = fn(&crate::runner::TaskShared) -> u64;
    let counters: [(&str, &str, Counter); 5] = [
        (
            "headwater_task_records_polled_total",
            "Records the task's source returned from poll.",
            |s| s.records_polled.load(Ordering::Relaxed),
        ),
        (
            "headwater_task_records_written_total",
            "Records committed to the log (after transforms; filtered records are not counted).",
            |s| s.records_written.load(Ordering::Relaxed),
        ),
        (
            "headwater_task_bytes_written_total",
            "Record batch bytes committed to the log.",
            |s| s.bytes_written.load(Ordering::Relaxed),
        ),
        (
            "headwater_task_commits_total",
            "Log transactions committed (records and their source offsets, one fsync).",
            |s| s.commits.load(Ordering::Relaxed),
        ),
        (
            "headwater_task_restarts_total",
            "Restarts of the task after retriable errors (a lost connection, say).",
            |s| s.restarts.load(Ordering::Relaxed),
        ),
    ];
    for (name, help, get) in counters {
        header(&mut out, name, "counter", help);
        for (labels, t) in &tasks {
            let _ = writeln!(out, "{name}{{{labels}}} {}", get(t.shared));
        }
    }

    header(
        &mut out,
        "headwater_task_commit_latency_seconds",
        "histogram",
        "Time to append a log transaction's remaining batches and offsets and commit it durably.",
    );
    for (labels, t) in &tasks {
        t.shared
            .commit_latency
            .write(&mut out, "headwater_task_commit_latency_seconds", labels);
    }
    header(
        &mut out,
        "headwater_task_commit_bytes",
        "histogram",
        "Record batch bytes per log commit.",
    );
    for (labels, t) in &tasks {
        t.shared
            .commit_bytes
            .write(&mut out, "headwater_task_commit_bytes", labels);
    }

    header(
        &mut out,
        "headwater_task_source_lag_milliseconds",
        "gauge",
        "Milliseconds between the source's timestamp (source.ts_ms) of the last polled change event and when it was polled (Debezium's MilliSecondsBehindSource); absent until a record carries source.ts_ms.",
    );
    for (labels, t) in &tasks {
        let lag = t.shared.source_lag_ms.load(Ordering::Relaxed);
        if lag != NO_LAG {
            let _ = writeln!(
                out,
                "headwater_task_source_lag_milliseconds{{{labels}}} {lag}"
            );
        }
    }

    header(
        &mut out,
        "headwater_task_snapshot_running",
        "gauge",
        "1 while the task's snapshot runs, 0 otherwise; absent for tasks that never snapshotted.",
    );
    for (labels, t) in &tasks {
        let s = t.shared.snapshot.status();
        if s.started {
            let _ = writeln!(
                out,
                "headwater_task_snapshot_running{{{labels}}} {}",
                u8::from(s.running)
            );
        }
    }
    for (name, help, pick) in [
        (
            "headwater_task_snapshot_rows",
            "Rows (documents) the task's snapshot has read so far.",
            (|s: &headwater_api::SnapshotStatus| s.rows)
                as fn(&headwater_api::SnapshotStatus) -> u64,
        ),
        (
            "headwater_task_snapshot_rows_estimated",
            "The source's estimate of the rows the snapshot copies (table statistics).",
            |s| s.rows_estimated,
        ),
        (
            "headwater_task_snapshot_tables",
            "Tables (collections) the snapshot copies.",
            |s| s.tables,
        ),
        (
            "headwater_task_snapshot_tables_done",
            "Tables (collections) the snapshot has copied completely.",
            |s| s.tables_done,
        ),
    ] {
        header(&mut out, name, "gauge", help);
        for (labels, t) in &tasks {
            let s = t.shared.snapshot.status();
            if s.started {
                let _ = writeln!(out, "{name}{{{labels}}} {}", pick(&s));
            }
        }
    }

    header(
        &mut out,
        "headwater_task_sink_lag_records",
        "gauge",
        "Sink tasks: committed records in the log that the task has not consumed yet.",
    );
    for (labels, t) in &tasks {
        let lag = t.shared.sink_lag_records.load(Ordering::Relaxed);
        if lag >= 0 {
            let _ = writeln!(out, "headwater_task_sink_lag_records{{{labels}}} {lag}");
        }
    }

    header(
        &mut out,
        "headwater_task_waiting_seconds",
        "gauge",
        "How long the task has been waiting for something outside it (see `waiting` in its status); absent while it is not waiting.",
    );
    let now_ms = headwater_log::log::now_ms();
    for (labels, t) in &tasks {
        if let Some(w) = t.shared.waiting.status() {
            let _ = writeln!(
                out,
                "headwater_task_waiting_seconds{{{labels}}} {:.3}",
                (now_ms - w.since_ms).max(0) as f64 / 1000.0
            );
        }
    }

    header(
        &mut out,
        "headwater_log_start_offset",
        "gauge",
        "First offset still held by a log partition.",
    );
    for p in partitions {
        let _ = writeln!(
            out,
            "headwater_log_start_offset{{topic=\"{}\",partition=\"{}\"}} {}",
            escape_label(&p.topic),
            p.partition,
            p.start_offset
        );
    }
    header(
        &mut out,
        "headwater_log_end_offset",
        "gauge",
        "Next offset to be written to a log partition (its high watermark).",
    );
    for p in partitions {
        let _ = writeln!(
            out,
            "headwater_log_end_offset{{topic=\"{}\",partition=\"{}\"}} {}",
            escape_label(&p.topic),
            p.partition,
            p.end_offset
        );
    }
    if let Some(bytes) = log_disk_bytes {
        header(
            &mut out,
            "headwater_log_disk_bytes",
            "gauge",
            "Size of the log directory's files on disk.",
        );
        let _ = writeln!(out, "headwater_log_disk_bytes {bytes}");
    }
    out
}

/// Total size of the regular files under `dir` (not following symlinks).
pub fn dir_size(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let Ok(entry) = entry else { continue };
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                total += meta.len();
            }
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::{Control, TaskShared};
    use headwater_api::{OffsetMap, Schema, SchemaBuilder, Struct};
    use std::sync::Arc;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::latency();
        h.observe_duration(Duration::from_micros(300));
        h.observe_duration(Duration::from_millis(3));
        h.observe_duration(Duration::from_secs(60));
        let mut out = String::new();
        h.write(&mut out, "x", "a=\"b\"");
        assert!(out.contains("x_bucket{a=\"b\",le=\"0.0005\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"0.005\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"10\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"+Inf\"} 3\n"), "{out}");
        assert!(out.contains("x_count{a=\"b\"} 3\n"), "{out}");
        assert!(out.contains("x_sum{a=\"b\"} 60.003300\n"), "{out}");
    }

    #[test]
    fn snapshot_progress_is_rendered_once_a_snapshot_started() {
        let shared: Arc<TaskShared> = TaskShared::new(Control::Run);
        shared.snapshot.start(3, 1000, 1, 0);
        shared.snapshot.add_rows(250);
        shared.snapshot.table_done();
        let sample = || ConnectorSample {
            name: "c",
            state: State::Running,
            tasks: vec![TaskSample {
                connector: "c",
                task: 0,
                state: State::Running,
                shared: &shared,
            }],
        };
        let text = render(&[sample()], &[], None);
        for line in [
            "headwater_task_snapshot_running{connector=\"c\",task=\"0\"} 1\n",
            "headwater_task_snapshot_rows{connector=\"c\",task=\"0\"} 250\n",
            "headwater_task_snapshot_rows_estimated{connector=\"c\",task=\"0\"} 1000\n",
            "headwater_task_snapshot_tables{connector=\"c\",task=\"0\"} 3\n",
            "headwater_task_snapshot_tables_done{connector=\"c\",task=\"0\"} 2\n",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        shared.snapshot.finish();
        let text = render(&[sample()], &[], None);
        assert!(text.contains("headwater_task_snapshot_running{connector=\"c\",task=\"0\"} 0\n"));
    }

    #[test]
    fn a_waiting_task_shows_how_long_it_waits() {
        let shared: Arc<TaskShared> = TaskShared::new(Control::Run);
        let sample = || ConnectorSample {
            name: "c",
            state: State::Running,
            tasks: vec![TaskSample {
                connector: "c",
                task: 0,
                state: State::Running,
                shared: &shared,
            }],
        };
        assert!(!render(&[sample()], &[], None).contains("headwater_task_waiting_seconds{"));
        shared.waiting.set("slot creation waits for pid 7");
        let since = shared.waiting.status().unwrap().since_ms;
        shared.waiting.set("slot creation waits for pid 7");
        assert_eq!(
            shared.waiting.status().unwrap().since_ms,
            since,
            "same wait, same start"
        );
        let text = render(&[sample()], &[], None);
        assert!(
            text.contains("headwater_task_waiting_seconds{connector=\"c\",task=\"0\"} "),
            "{text}"
        );
        shared.waiting.clear();
        assert!(!render(&[sample()], &[], None).contains("headwater_task_waiting_seconds{"));
    }

    #[test]
    fn render_has_one_hot_states_counters_and_escaped_labels() {
        let shared: Arc<TaskShared> = TaskShared::new(Control::Run);
        shared.records_polled.store(7, Ordering::Relaxed);
        shared.restarts.store(2, Ordering::Relaxed);
        shared.commit_bytes.observe(2000);
        let c = ConnectorSample {
            name: "a\"b",
            state: State::Running,
            tasks: vec![TaskSample {
                connector: "a\"b",
                task: 0,
                state: State::Failed,
                shared: &shared,
            }],
        };
        let text = render(
            &[c],
            &[PartitionSample {
                topic: "t".into(),
                partition: 0,
                start_offset: 0,
                end_offset: 5,
            }],
            Some(42),
        );
        assert!(
            text.contains("headwater_connector_state{connector=\"a\\\"b\",state=\"RUNNING\"} 1\n")
        );
        assert!(
            text.contains("headwater_connector_state{connector=\"a\\\"b\",state=\"PAUSED\"} 0\n")
        );
        assert!(text.contains(
            "headwater_task_state{connector=\"a\\\"b\",task=\"0\",state=\"FAILED\"} 1\n"
        ));
        assert!(text
            .contains("headwater_task_records_polled_total{connector=\"a\\\"b\",task=\"0\"} 7\n"));
        assert!(text.contains("headwater_task_restarts_total{connector=\"a\\\"b\",task=\"0\"} 2\n"));
        assert!(text.contains(
            "headwater_task_commit_bytes_bucket{connector=\"a\\\"b\",task=\"0\",le=\"4096\"} 1\n"
        ));
        assert!(!text.contains("headwater_task_source_lag_milliseconds{"));
        // No snapshot started: no snapshot series.
        assert!(!text.contains("headwater_task_snapshot_rows{"));
        assert!(text.contains("headwater_log_end_offset{topic=\"t\",partition=\"0\"} 5\n"));
        assert!(text.contains("headwater_log_disk_bytes 42\n"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }

    #[test]
    fn source_lag_comes_from_debezium_source_ts_ms() {
        let source = SchemaBuilder::struct_()
            .field("ts_ms", Schema::int64())
            .build_ref();
        let envelope = SchemaBuilder::struct_()
            .field("source", source.clone())
            .build_ref();
        let now = headwater_log::log::now_ms();
        let value = Struct::new(envelope.clone()).unwrap().with(
            "source",
            Struct::new(source).unwrap().with("ts_ms", now - 1500),
        );
        let record = SourceRecord::new(
            OffsetMap::new(),
            OffsetMap::new(),
            "t",
            None,
            Value::Null,
            Some(envelope),
            Value::Struct(value),
        );
        assert_eq!(source_ts_ms(&record), Some(now - 1500));
        let lag = AtomicI64::new(NO_LAG);
        observe_source_lag(
            &lag,
            std::slice::from_ref(&record),
            headwater_log::log::now_ms(),
        );
        let seen = lag.load(Ordering::Relaxed);
        assert!((1500..60_000).contains(&seen), "{seen}");
        let plain = SourceRecord::new(
            OffsetMap::new(),
            OffsetMap::new(),
            "t",
            None,
            Value::Null,
            None,
            Value::String("x".into()),
        );
        assert_eq!(source_ts_ms(&plain), None);
    }
}
