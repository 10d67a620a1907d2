//! The plugin contracts: what a source connector, a source task, a transform and a predicate
//! promise to the engine, and what the engine promises back.
//!
//! Plugins are plain Rust types registered in the worker's explicit plugin list under their Kafka
//! Connect / Debezium class names. Futures are boxed so the engine can hold plugins as trait
//! objects (`Box<dyn SourceTask>`); the async runtime is tokio.
//!
//! The durability contract the engine keeps for every source: a source offset passed to
//! [`SourceTask::commit`] covers only records that are durably stored in the log, so a task may
//! acknowledge its database (confirm a slot LSN, purge nothing it still needs) up to that offset
//! and no further.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::config::{ConfigDef, ConfigValidation};
use crate::error::ConnectError;
use crate::record::{ConnectRecord, OffsetMap, SourceRecord};

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A connector's or task's configuration: a flat string map, as Kafka Connect stores it.
pub type Properties = BTreeMap<String, String>;

/// Properties from `(key, value)` pairs (tests, tools and code embedding connectors).
pub fn properties(pairs: &[(&str, &str)]) -> Properties {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A source connector: validates its configuration and splits the work into task configs.
///
/// Contract: `validate` never fails for bad input, it reports every problem per key;
/// `task_configs` is called only with a configuration that validated without errors and returns
/// at most `max_tasks` configurations.
pub trait SourceConnector: Send + Sync {
    /// The plugin version shown by `GET /connector-plugins`.
    fn version(&self) -> String;
    /// The connector's own configuration keys.
    fn config_def(&self) -> ConfigDef;
    /// Validates a full connector configuration. The default checks it against
    /// [`SourceConnector::config_def`]; connectors add cross-field checks.
    fn validate(&self, props: &Properties) -> ConfigValidation {
        self.config_def().validate(props)
    }
    /// Splits the work into at most `max_tasks` task configurations.
    fn task_configs(
        &self,
        props: &Properties,
        max_tasks: usize,
    ) -> Result<Vec<Properties>, ConnectError>;
    /// A new, unstarted task.
    fn create_task(&self) -> Box<dyn SourceTask>;
}

/// What the engine tells a task when it starts.
#[derive(Clone, Debug, Default)]
pub struct SourceTaskContext {
    pub connector_name: String,
    pub task_id: u32,
    /// The last durably committed offset for each source partition this connector has written,
    /// as `(source partition, source offset)` pairs.
    pub committed_offsets: Vec<(OffsetMap, OffsetMap)>,
    /// Where the task reports its snapshot's progress; the engine shows it in the task's
    /// status and metrics. A task that never snapshots leaves it alone.
    pub snapshot_progress: SnapshotProgress,
    /// Where the task says what it is waiting for while it cannot make progress (a replication
    /// slot waiting for open transactions, ...); the engine shows it in the task's status.
    pub waiting: TaskWaiting,
    /// Set by the engine when the task is asked to stop while its `start` still runs.
    pub stop: StopRequest,
}

/// Set by the engine when a task is asked to stop while its `start` runs: a start that waits
/// on purpose (`snapshot.delay.ms`) checks it and gives up the wait. The engine never drops a
/// starting task, so whatever a start takes (a slot, a lock) is the task's to release.
#[derive(Clone, Debug, Default)]
pub struct StopRequest(Arc<AtomicBool>);

impl StopRequest {
    /// Asks the task to stop.
    pub fn request(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    /// Whether the task was asked to stop.
    pub fn is_requested(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// What a task is waiting for, if anything: set by the task, read by the engine's status and
/// metrics. Setting it again with the same reason keeps the original start time.
#[derive(Clone, Debug, Default)]
pub struct TaskWaiting(Arc<std::sync::Mutex<Option<WaitingStatus>>>);

/// One reading of a [`TaskWaiting`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitingStatus {
    /// What the task waits for and why, in words an operator can act on.
    pub reason: String,
    /// When the wait began, in milliseconds since the Unix epoch.
    pub since_ms: i64,
}

impl TaskWaiting {
    /// The task waits for `reason` (from now, or from when it began waiting for the same
    /// reason).
    pub fn set(&self, reason: impl Into<String>) {
        let reason = reason.into();
        let mut w = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if w.as_ref().is_some_and(|s| s.reason == reason) {
            return;
        }
        let since = w.as_ref().map(|s| s.since_ms).unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0)
        });
        *w = Some(WaitingStatus {
            reason,
            since_ms: since,
        });
    }
    /// The wait is over.
    pub fn clear(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
    pub fn status(&self) -> Option<WaitingStatus> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// A task's snapshot progress, shared between the task (writer) and the engine (reader):
/// relaxed atomic counters, cheap enough to bump per row. Rows count what the snapshot read
/// and handed to the engine, not what is durable yet (the committed offset says that).
#[derive(Clone, Debug, Default)]
pub struct SnapshotProgress(Arc<SnapshotCounters>);

#[derive(Debug, Default)]
struct SnapshotCounters {
    started: AtomicBool,
    running: AtomicBool,
    rows: AtomicU64,
    rows_estimated: AtomicU64,
    tables: AtomicU64,
    tables_done: AtomicU64,
}

/// One reading of a [`SnapshotProgress`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotStatus {
    /// A snapshot was started by this task instance.
    pub started: bool,
    /// It is still running.
    pub running: bool,
    pub rows: u64,
    /// The source's estimate of all rows to copy (table statistics; may be off either way).
    pub rows_estimated: u64,
    /// Tables (collections) to copy, and those fully copied.
    pub tables: u64,
    pub tables_done: u64,
}

impl SnapshotProgress {
    /// A snapshot of `tables` tables holding about `rows_estimated` rows starts; `rows_done`
    /// rows were already copied by an earlier, resumed run.
    pub fn start(&self, tables: u64, rows_estimated: u64, tables_done: u64, rows_done: u64) {
        let c = &self.0;
        c.tables.store(tables, Ordering::Relaxed);
        c.rows_estimated.store(rows_estimated, Ordering::Relaxed);
        c.tables_done.store(tables_done, Ordering::Relaxed);
        c.rows.store(rows_done, Ordering::Relaxed);
        c.started.store(true, Ordering::Relaxed);
        c.running.store(true, Ordering::Relaxed);
    }
    pub fn add_rows(&self, n: u64) {
        self.0.rows.fetch_add(n, Ordering::Relaxed);
    }
    pub fn table_done(&self) {
        self.0.tables_done.fetch_add(1, Ordering::Relaxed);
    }
    pub fn finish(&self) {
        self.0.running.store(false, Ordering::Relaxed);
    }
    pub fn status(&self) -> SnapshotStatus {
        let c = &self.0;
        SnapshotStatus {
            started: c.started.load(Ordering::Relaxed),
            running: c.running.load(Ordering::Relaxed),
            rows: c.rows.load(Ordering::Relaxed),
            rows_estimated: c.rows_estimated.load(Ordering::Relaxed),
            tables: c.tables.load(Ordering::Relaxed),
            tables_done: c.tables_done.load(Ordering::Relaxed),
        }
    }
}

impl SourceTaskContext {
    /// The committed offset of one source partition (Kafka's `OffsetStorageReader.offset`).
    pub fn offset(&self, partition: &OffsetMap) -> Option<&OffsetMap> {
        self.committed_offsets
            .iter()
            .find(|(p, _)| p == partition)
            .map(|(_, o)| o)
    }
}

/// Whether the records returned so far end on a source transaction boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Boundary {
    /// Every record returned up to now belongs to complete source transactions (or the source
    /// has no transactions): the engine may commit them, with their offsets, atomically.
    Commit,
    /// The last record is inside a source transaction that continues in a later poll: the
    /// engine keeps its log transaction open (records stay invisible to read_committed readers).
    Open,
}

/// What one [`SourceTask::poll`] returns.
///
/// Offsets: the engine stores, per source partition, the newest non-empty offset it has seen
/// when it commits, and it commits only between batches that end on [`Boundary::Commit`]. A
/// record may therefore carry an empty `source_offset` when a later record of the same
/// partition, in the same batch or in a later one before the next commit boundary, carries the
/// offset that covers it; sources use this to avoid building an offset per record. Such a
/// record may leave its `source_partition` empty as well: only the covering record's partition
/// is read. A record that moves no position at all (a notification) carries neither and
/// needs no covering record.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceBatch {
    pub records: Vec<SourceRecord>,
    pub boundary: Boundary,
    /// The source handed out everything it had ready: at a commit boundary the engine commits
    /// at once instead of lingering to batch more (low latency when the source is idle or
    /// slower than the engine; while a commit is in flight changes queue up in the source, so
    /// batching comes back by itself under load).
    pub caught_up: bool,
}

impl SourceBatch {
    /// Records that end on a transaction boundary.
    pub fn committed(records: Vec<SourceRecord>) -> Self {
        SourceBatch {
            records,
            boundary: Boundary::Commit,
            caught_up: false,
        }
    }
    /// Records that end on a transaction boundary, with nothing more ready after them: the
    /// engine commits them at once (a snapshot's last batch, for one, is not left waiting for
    /// the stream's first poll).
    pub fn caught_up(records: Vec<SourceRecord>) -> Self {
        SourceBatch {
            records,
            boundary: Boundary::Commit,
            caught_up: true,
        }
    }
    /// Nothing new (keeps the current boundary state: committed).
    pub fn empty() -> Self {
        Self::committed(Vec::new())
    }
}

/// A source task: reads changes and returns them as records.
///
/// Contract:
/// - `start` resumes from `context.committed_offsets` (or starts fresh when there are none);
/// - `poll` returns the next batch in source order, waiting a bounded time when there is nothing
///   (an empty batch is fine), and says whether it ends on a source transaction boundary, so
///   that one source transaction is committed to the log atomically however many polls it
///   spans; it must keep answering the source's keepalives while the engine applies
///   backpressure by not calling it;
/// - `commit` is called with offsets whose records are all durable; only then may the task
///   acknowledge the source;
/// - `stop` releases connections; after it, no method is called again.
pub trait SourceTask: Send {
    fn start(
        &mut self,
        context: SourceTaskContext,
        props: Properties,
    ) -> BoxFuture<'_, Result<(), ConnectError>>;
    fn poll(&mut self) -> BoxFuture<'_, Result<SourceBatch, ConnectError>>;
    fn commit<'a>(
        &'a mut self,
        committed: &'a [(OffsetMap, OffsetMap)],
    ) -> BoxFuture<'a, Result<(), ConnectError>>;
    fn stop(&mut self) -> BoxFuture<'_, ()>;
}

/// A single message transform (Kafka Connect's `Transformation`), a pure function of a record.
///
/// Contract: no I/O and no hidden state that changes results between calls; `Ok(None)` drops the
/// record (its offset still counts as processed); an error fails the record under the
/// connector's `errors.tolerance`.
pub trait Transform<R: ConnectRecord>: Send + Sync {
    fn apply(&self, record: R) -> Result<Option<R>, ConnectError>;
}

/// A condition on records that gates a transform (`transforms.<a>.predicate`, optionally negated).
///
/// Contract: pure and cheap; it never changes the record.
pub trait Predicate<R: ConnectRecord>: Send + Sync {
    fn test(&self, record: &R) -> bool;
}

/// A configurable plugin kind (transform or predicate): its configuration keys and a way to
/// build a configured instance. `create` is only called with properties that validated cleanly.
pub trait PluginFactory<T: ?Sized>: Send + Sync {
    fn config_def(&self) -> ConfigDef;
    fn create(&self, props: &Properties) -> Result<Box<T>, ConnectError>;
}
