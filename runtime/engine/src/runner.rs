//! Runs one source task: poll -> transforms -> converters -> partitioner -> log transaction
//! (records and the offsets that cover them together) -> commit -> `SourceTask::commit`.
//!
//! Invariants (the durability contract):
//! - a source transaction's records and the source offset after them go into one log
//!   transaction; it is committed only at a `Boundary::Commit`, so a reader never sees half a
//!   source transaction and a restart resumes exactly after the last committed one;
//! - `SourceTask::commit` is called only after that log transaction is durable;
//! - memory is bounded by bytes: per-partition batches are flushed into the (still open) log
//!   transaction at ~256 KiB, and a long source transaction spills to the log, not to RAM;
//! - records dropped by transforms still advance the offset (as Kafka Connect does);
//! - per source partition, the offset stored is the last non-empty one of the batch (a record
//!   with an empty offset is covered by a later one of the same batch);
//! - staging a record allocates nothing in the steady state: converters write into reused
//!   buffers and finished batches' buffers are recycled ([`Scratch`]);
//! - sealing batches (compression, CRC), appending them and waiting for commits happen on the
//!   task's [`Sealer`] thread, so the runner stages the next records meanwhile. At most
//!   [`MAX_IN_FLIGHT`] commits are outstanding; their outcomes are taken in commit order, and
//!   only then are the stored offsets updated and `SourceTask::commit` called. Before polling
//!   after a caught-up batch, and before pausing or stopping, the runner waits for every
//!   outstanding commit, so an idle source is acknowledged at once.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use headwater_api::{
    Boundary, ConnectError, OffsetMap, Properties, SourceRecord, SourceTask, SourceTaskContext,
    Transform,
};

use headwater_log::batch::{BatchBuilder, Compression, HeaderPart, ProducerFields};
use headwater_log::{Log, LogError, Partitioner, TopicCompression, TopicConfig};
use tokio::sync::{oneshot, watch};

use crate::convert::Converters;
use crate::metrics::{self, Histogram};
use crate::model::State;
use crate::sealer::{Command, Sealer, SealerGone};
use crate::stores::{offset_key, offsets_batch, InternalTopics, OffsetsByConnector, OFFSETS_TOPIC};

/// Maps looked up per record, with a fast (non-SipHash) hasher.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Flush a partition's batch into the log transaction at this size.
const BATCH_BYTES: usize = 512 * 1024;
/// Commit at a boundary once this much is pending...
const COMMIT_BYTES: usize = 16 * 1024 * 1024;
/// ...or once the oldest pending record waited this long (or at once when the source is caught
/// up, see [`headwater_api::SourceBatch::caught_up`]).
const LINGER: Duration = Duration::from_millis(20);
/// Commits handed to the sealer and not yet durable, at most.
const MAX_IN_FLIGHT: usize = 2;

/// What a task is told to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    Run,
    Pause,
    Stop,
}

/// A task's status and counters, shared with the REST API.
#[derive(Debug)]
pub struct TaskShared {
    pub status: Mutex<(State, Option<String>)>,
    pub control: watch::Sender<Control>,
    pub records_polled: AtomicU64,
    /// Source tasks: polled batches holding a record that carries a source offset (a change
    /// or a heartbeat, not a notification): the progress that ends a row of restarts.
    pub positioned_batches: AtomicU64,
    pub records_written: AtomicU64,
    pub bytes_written: AtomicU64,
    pub commits: AtomicU64,
    /// Restarts after retriable errors (the task instance is made again after a backoff).
    pub restarts: AtomicU64,
    /// Duration of each log commit (from staging the last batches to durable).
    pub commit_latency: Histogram,
    /// Record batch bytes of each log commit.
    pub commit_bytes: Histogram,
    /// Milliseconds behind the source at the last polled change event
    /// ([`metrics::NO_LAG`] until one carries `source.ts_ms`).
    pub source_lag_ms: AtomicI64,
    /// The task's snapshot progress, as its task instances report it.
    pub snapshot: headwater_api::SnapshotProgress,
    /// What the task's instance says it waits for, if anything.
    pub waiting: headwater_api::TaskWaiting,
    /// Sink tasks: records in the log not consumed yet (-1 for source tasks).
    pub sink_lag_records: AtomicI64,
}

impl TaskShared {
    pub fn new(control: Control) -> Arc<Self> {
        let (tx, _) = watch::channel(control);
        Arc::new(TaskShared {
            status: Mutex::new((State::Unassigned, None)),
            control: tx,
            records_polled: AtomicU64::new(0),
            positioned_batches: AtomicU64::new(0),
            records_written: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            restarts: AtomicU64::new(0),
            commit_latency: Histogram::latency(),
            commit_bytes: Histogram::bytes(),
            source_lag_ms: AtomicI64::new(metrics::NO_LAG),
            snapshot: headwater_api::SnapshotProgress::default(),
            waiting: headwater_api::TaskWaiting::default(),
            sink_lag_records: AtomicI64::new(-1),
        })
    }
    pub fn set_status(&self, state: State, trace: Option<String>) {
        *self.status.lock().unwrap_or_else(|e| e.into_inner()) = (state, trace);
    }
    pub fn status(&self) -> (State, Option<String>) {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// How new destination topics are created (`topic.creation.default.*`).
#[derive(Clone, Debug)]
pub struct TopicDefaults {
    pub partitions: u32,
    pub config: TopicConfig,
}

/// Everything a task run needs.
pub struct TaskSetup {
    pub connector: String,
    pub task_id: u32,
    pub props: Properties,
    pub make_task: Arc<dyn Fn() -> Box<dyn SourceTask> + Send + Sync>,
    pub chain: Arc<dyn Transform<SourceRecord>>,
    pub converters: Arc<Converters>,
    pub topics: InternalTopics,
    pub offsets: Arc<Mutex<OffsetsByConnector>>,
    pub shared: Arc<TaskShared>,
    pub topic_defaults: TopicDefaults,
    pub default_compression: Compression,
    pub errors_tolerance_all: bool,
    pub errors_log: bool,
    /// `errors.log.include.messages`: tolerated-error log lines describe the record.
    pub errors_log_include_messages: bool,
    pub active_topics: Arc<Mutex<BTreeSet<String>>>,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
}

/// Runs the task until it is stopped or fails fatally, restarting it with exponential backoff
/// after retriable errors.
pub async fn supervise(setup: TaskSetup) {
    let restart = Restart {
        progress: |s| s.positioned_batches.load(Ordering::Relaxed),
        connector: &setup.connector,
        task_id: setup.task_id,
        shared: &setup.shared,
        topics: &setup.topics,
        backoff_initial: setup.backoff_initial,
        backoff_max: setup.backoff_max,
        max_retries: max_retries(&setup.props),
    };
    restart.run(|| run_once(&setup, (setup.make_task)())).await;
}

/// Debezium's `errors.max.retries` of a source task: `None` (unlimited) for -1 or unset.
/// The connectors validate the key; a value they let through that is not a count is
/// unlimited too.
fn max_retries(props: &Properties) -> Option<u32> {
    props
        .get("errors.max.retries")
        .and_then(|v| v.trim().parse::<i64>().ok())
        .and_then(|n| u32::try_from(n).ok())
}

/// The restart policy shared by source and sink tasks: run until stopped; after a retriable
/// error wait (exponentially longer, up to a maximum, cut short by a stop) and run again; after
/// any other error mark the task FAILED (in its status and the status topic) and stop.
/// With `max_retries` (Debezium's `errors.max.retries`), the retriable error after that many
/// restarts in a row fails the task too; a run that made progress ends the row (as Debezium
/// resets its count when a poll returns change events), and the backoff starts over.
pub(crate) struct Restart<'a> {
    /// The task's progress counter: it moves when a run made progress (a source's batches
    /// with a position, a sink's consumed records).
    pub progress: fn(&TaskShared) -> u64,
    pub connector: &'a str,
    pub task_id: u32,
    pub shared: &'a Arc<TaskShared>,
    pub topics: &'a InternalTopics,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    pub max_retries: Option<u32>,
}

impl Restart<'_> {
    pub(crate) async fn run<F, Fut>(&self, mut run_once: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<(), ConnectError>>,
    {
        let mut backoff = self.backoff_initial;
        let mut control = self.shared.control.subscribe();
        let mut retries = 0u32;
        let progress = || (self.progress)(self.shared);
        let mut polled_before = progress();
        loop {
            if *control.borrow() == Control::Stop {
                break;
            }
            let result = run_once().await;
            if *control.borrow() == Control::Stop {
                // Whatever ended the run (an error a stop caused, say), the task was stopped.
                if let Err(e) = &result {
                    tracing::info!(connector = %self.connector, task = self.task_id, error = %e, "task stopped");
                }
                break;
            }
            let polled = progress();
            if polled != polled_before {
                // The run made progress (a sink consumed records, a source handed out records
                // carrying a position): it had recovered from earlier failures.
                polled_before = polled;
                retries = 0;
                backoff = self.backoff_initial;
            }
            match result {
                Ok(()) => break,
                Err(e) if e.is_retriable() && self.max_retries.is_some_and(|m| retries >= m) => {
                    let max = self.max_retries.unwrap_or_default();
                    let e = ConnectError::fatal(format!(
                        "{}; giving up after {max} restarts in a row without progress (errors.max.retries={max}; -1 retries without limit)",
                        e.message()
                    ));
                    self.fail(&e).await;
                    return;
                }
                Err(e) if e.is_retriable() => {
                    retries += 1;
                    self.shared.restarts.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(connector = %self.connector, task = self.task_id, error = %e, backoff_ms = backoff.as_millis() as u64, "task failed with a retriable error; restarting after backoff");
                    self.shared.set_status(State::Running, Some(e.trace()));
                    let sleep = tokio::time::sleep(backoff);
                    tokio::pin!(sleep);
                    loop {
                        tokio::select! {
                            _ = &mut sleep => break,
                            changed = control.changed() => {
                                if changed.is_err() || *control.borrow() == Control::Stop {
                                    return;
                                }
                            }
                        }
                    }
                    backoff = (backoff * 2).min(self.backoff_max);
                }
                Err(e) => {
                    self.fail(&e).await;
                    return;
                }
            }
        }
    }

    /// Marks the task FAILED with `e` (its status and the status topic).
    async fn fail(&self, e: &ConnectError) {
        tracing::error!(connector = %self.connector, task = self.task_id, error = %e, "task failed");
        self.shared.set_status(State::Failed, Some(e.trace()));
        let _ = self
            .topics
            .put_status(
                &format!("status-task-{}-{}", self.connector, self.task_id),
                "FAILED",
                Some(&e.trace()),
                "headwater",
            )
            .await;
    }
}

/// Record buffers kept for reuse by later batch builders (each about [`BATCH_BYTES`]): enough
/// for every batch the sealer may hold at once, so the pipeline runs without allocating.
const FREE_RECORD_BUFFERS: usize = crate::sealer::QUEUE_DEPTH + 4;

/// The open log transaction of a task and what it holds.
struct Pending {
    /// The producer fields of the open transaction (which the sealer holds).
    txn: Option<ProducerFields>,
    /// A transaction begun by the last record, not yet handed to the sealer.
    begin: Option<headwater_log::Transaction>,
    /// Batch builders by topic, then partition.
    /// (A fast hasher: looked up for every record.)
    builders: FastMap<String, FastMap<u32, BatchBuilder>>,
    /// Full batches staged for the sealer, sent after the record that filled them.
    full: Vec<(String, u32, BatchBuilder)>,
    /// Source partition (as JSON) -> (partition, latest offset).
    offsets: BTreeMap<String, (OffsetMap, OffsetMap)>,
    /// Record bytes staged since the last commit or spill (what [`COMMIT_BYTES`] bounds).
    bytes: usize,
    /// Record bytes of the open transaction already spilled to the sealer (counted in the
    /// task's `bytes_written` at its commit, with `bytes`).
    spilled_bytes: usize,
    records: usize,
    since: Option<Instant>,
    scratch: Scratch,
}

/// A commit handed to the sealer, and the offsets to acknowledge to the task once it is
/// durable.
struct InFlight {
    done: oneshot::Receiver<Result<(), LogError>>,
    offsets: Vec<(OffsetMap, OffsetMap)>,
}

/// Buffers and look-ups reused from record to record, so that staging a record allocates
/// nothing in the steady state.
#[derive(Default)]
struct Scratch {
    key: Vec<u8>,
    value: Vec<u8>,
    /// Shared spans left out of `key` and `value` (see `Converter::write_connect_data_spans`).
    key_spans: Vec<(usize, std::sync::Arc<[u8]>)>,
    value_spans: Vec<(usize, std::sync::Arc<[u8]>)>,
    /// The whole key when it has spans and is hashed to choose a partition.
    whole_key: Vec<u8>,
    /// The record's header values that are not strings or bytes, as text
    /// (see `Converters::encode_headers`), and where each header's bytes are.
    header_text: Vec<u8>,
    header_bytes: Vec<crate::convert::HeaderBytes>,
    /// Shared header runs (the context headers), encoded once.
    header_runs: crate::convert::EncodedRuns,
    /// Emptied record buffers of appended builders.
    free_records: Vec<Vec<u8>>,
    /// The last source partition seen and its JSON form (the `offsets` key).
    last_source_partition: Option<(OffsetMap, String)>,
    /// The last destination topic: its name, partition count and compression. Forgotten at
    /// every commit, so topic changes are picked up.
    last_topic: Option<(String, u32, Compression)>,
}

impl Scratch {
    /// A record buffer: a kept one, else one the sealer gave back, else a new one.
    fn records_buffer(&mut self, sealer: &Sealer) -> Vec<u8> {
        self.free_records
            .pop()
            .or_else(|| sealer.recycled_buffer())
            .unwrap_or_else(|| Vec::with_capacity(BATCH_BYTES + BATCH_BYTES / 4))
    }
    fn recycle(&mut self, buffer: Vec<u8>) {
        if self.free_records.len() < FREE_RECORD_BUFFERS {
            self.free_records.push(buffer);
        }
    }
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.offsets.is_empty() && self.records == 0 && self.txn.is_none()
    }
}

fn sealer_gone(_: SealerGone) -> ConnectError {
    ConnectError::retriable("the task's log writer thread ended unexpectedly")
}

async fn run_once(setup: &TaskSetup, mut task: Box<dyn SourceTask>) -> Result<(), ConnectError> {
    let log = setup.topics.log().clone();
    let committed = setup
        .offsets
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&setup.connector)
        .cloned()
        .unwrap_or_default();
    // A new task instance (a restart makes one) runs no snapshot until it says so; the last
    // snapshot's figures stay readable.
    setup.shared.snapshot.finish();
    setup.shared.waiting.clear();
    let context = SourceTaskContext {
        connector_name: setup.connector.clone(),
        task_id: setup.task_id,
        committed_offsets: committed,
        snapshot_progress: setup.shared.snapshot.clone(),
        waiting: setup.shared.waiting.clone(),
        stop: headwater_api::StopRequest::default(),
    };
    // A stop while the task starts is passed on (a start waiting `snapshot.delay.ms` gives
    // up the wait); the start is not dropped, so what it took (a slot, a lock) is released by
    // the task itself.
    let stop = context.stop.clone();
    let mut start_control = setup.shared.control.subscribe();
    if *start_control.borrow_and_update() == Control::Stop {
        stop.request();
    }
    let started = {
        let start = task.start(context, setup.props.clone());
        tokio::pin!(start);
        loop {
            tokio::select! {
                started = &mut start => break started,
                changed = start_control.changed(), if !stop.is_requested() => {
                    if changed.is_err() || *start_control.borrow() == Control::Stop {
                        tracing::info!(connector = %setup.connector, task = setup.task_id, "stop requested while the task starts");
                        stop.request();
                    }
                }
            }
        }
    };
    started?;
    if stop.is_requested() {
        // The start gave up (a delay cut short): nothing runs.
        task.stop().await;
        return Ok(());
    }
    setup.shared.set_status(State::Running, None);
    let _ = setup
        .topics
        .put_status(
            &format!("status-task-{}-{}", setup.connector, setup.task_id),
            "RUNNING",
            None,
            "headwater",
        )
        .await;
    let sealer = match Sealer::start(format!("headwater-sealer-{}", setup.task_id)) {
        Ok(s) => s,
        Err(e) => {
            task.stop().await;
            return Err(ConnectError::retriable(format!(
                "cannot start the task's log writer thread: {e}"
            )));
        }
    };
    let mut control = setup.shared.control.subscribe();
    let partitioner = Partitioner::new();
    let mut pending = Pending {
        txn: None,
        begin: None,
        builders: FastMap::default(),
        full: Vec::new(),
        offsets: BTreeMap::new(),
        bytes: 0,
        spilled_bytes: 0,
        records: 0,
        since: None,
        scratch: Scratch::default(),
    };
    let mut in_flight: VecDeque<InFlight> = VecDeque::new();
    let mut at_boundary = true;
    let mut caught_up = false;
    let mut last_polled = 1;
    let result: Result<(), ConnectError> = async {
        loop {
            // Acknowledge what is durable: everything when the source is idle (or about to
            // pause or stop), else whatever finished by now.
            let ctl = *control.borrow();
            let wait_all = caught_up || last_polled == 0 || ctl != Control::Run;
            settle(&mut in_flight, task.as_mut(), wait_all).await?;
            match ctl {
                Control::Stop => {
                    if at_boundary && !pending.is_empty() {
                        commit(setup, &log, &sealer, &mut pending, &mut in_flight).await?;
                        settle(&mut in_flight, task.as_mut(), true).await?;
                    }
                    return Ok(());
                }
                Control::Pause => {
                    if at_boundary {
                        if !pending.is_empty() {
                            commit(setup, &log, &sealer, &mut pending, &mut in_flight).await?;
                            settle(&mut in_flight, task.as_mut(), true).await?;
                        }
                        setup.shared.set_status(State::Paused, None);
                        // Wait for resume or stop.
                        while *control.borrow() == Control::Pause {
                            if control.changed().await.is_err() {
                                return Ok(());
                            }
                        }
                        setup.shared.set_status(State::Running, None);
                        continue;
                    }
                }
                Control::Run => {}
            }
            let batch = task.poll().await?;
            at_boundary = batch.boundary == Boundary::Commit;
            caught_up = batch.caught_up;
            let polled = batch.records.len();
            last_polled = polled;
            // Source tasks count their progress in batches with a position (records_polled
            // stays the metric): a run handing out only notifications has not recovered.
            if batch
                .records
                .iter()
                .rev()
                .any(|r| !r.source_offset.is_empty())
            {
                setup
                    .shared
                    .positioned_batches
                    .fetch_add(1, Ordering::Relaxed);
            }
            setup
                .shared
                .records_polled
                .fetch_add(polled as u64, Ordering::Relaxed);
            // Records without a timestamp get the time they were polled (one clock read per
            // batch), as a producer stamps CreateTime at send.
            let polled_at_ms = headwater_log::log::now_ms();
            metrics::observe_source_lag(&setup.shared.source_lag_ms, &batch.records, polled_at_ms);
            for record in batch.records {
                process(
                    setup,
                    &log,
                    &partitioner,
                    &mut pending,
                    &sealer,
                    record,
                    polled_at_ms,
                )?;
                if !pending.full.is_empty() || pending.begin.is_some() {
                    send_full(&sealer, &mut pending).await?;
                }
            }
            let due = pending.bytes >= COMMIT_BYTES
                || polled == 0
                || caught_up
                || pending.since.is_some_and(|t| t.elapsed() >= LINGER);
            if at_boundary && !pending.is_empty() && due {
                commit(setup, &log, &sealer, &mut pending, &mut in_flight).await?;
                if in_flight.len() >= MAX_IN_FLIGHT {
                    settle_oldest(&mut in_flight, task.as_mut()).await?;
                }
            } else if !at_boundary && pending.bytes >= COMMIT_BYTES {
                spill(&sealer, &mut pending).await?;
            }
            recycle_buffers(&sealer, &mut pending);
        }
    }
    .await;
    // An open transaction (and any batch not yet committed) is aborted by the sealer.
    sealer.close().await;
    task.stop().await;
    result
}

/// Takes back every record buffer of sealed batches, keeping up to [`FREE_RECORD_BUFFERS`].
fn recycle_buffers(sealer: &Sealer, pending: &mut Pending) {
    while let Some(buffer) = sealer.recycled_buffer() {
        pending.scratch.recycle(buffer);
    }
}

/// Sends the batches filled by the last record to the sealer.
async fn send_full(sealer: &Sealer, pending: &mut Pending) -> Result<(), ConnectError> {
    if let Some(txn) = pending.begin.take() {
        sealer
            .send(Command::Begin(txn))
            .await
            .map_err(sealer_gone)?;
    }
    for (topic, partition, builder) in pending.full.drain(..) {
        sealer
            .send(Command::Append {
                topic,
                partition,
                builder,
            })
            .await
            .map_err(sealer_gone)?;
    }
    Ok(())
}

/// Takes the outcomes of commits in flight, in order: all of them (waiting) when `wait_all`,
/// else those already durable.
async fn settle(
    in_flight: &mut VecDeque<InFlight>,
    task: &mut dyn SourceTask,
    wait_all: bool,
) -> Result<(), ConnectError> {
    while let Some(front) = in_flight.front_mut() {
        if !wait_all {
            match front.done.try_recv() {
                Ok(outcome) => {
                    let done = in_flight.pop_front().expect("front exists");
                    finish_commit(done, outcome, task).await?;
                    continue;
                }
                Err(oneshot::error::TryRecvError::Empty) => return Ok(()),
                Err(oneshot::error::TryRecvError::Closed) => {
                    return Err(sealer_gone(SealerGone));
                }
            }
        }
        settle_oldest(in_flight, task).await?;
    }
    Ok(())
}

/// Waits for the oldest commit in flight and takes its outcome.
async fn settle_oldest(
    in_flight: &mut VecDeque<InFlight>,
    task: &mut dyn SourceTask,
) -> Result<(), ConnectError> {
    let Some(mut oldest) = in_flight.pop_front() else {
        return Ok(());
    };
    let outcome = (&mut oldest.done)
        .await
        .map_err(|_| sealer_gone(SealerGone))?;
    finish_commit(oldest, outcome, task).await
}

/// Transforms, converts and stages one record.
fn process(
    setup: &TaskSetup,
    log: &Log,
    partitioner: &Partitioner,
    pending: &mut Pending,
    sealer: &Sealer,
    mut record: SourceRecord,
    polled_at_ms: i64,
) -> Result<(), ConnectError> {
    let described = (setup.errors_log && setup.errors_log_include_messages)
        .then(|| crate::convert::describe_record(&record));
    // Transforms never change a record's source partition or offset (as in Kafka Connect),
    // so they are taken out here: a record dropped by a transform still advances the offset.
    let source_partition = std::mem::take(&mut record.source_partition);
    let source_offset = std::mem::take(&mut record.source_offset);
    note_offset(pending, source_partition, source_offset);
    pending.since.get_or_insert_with(Instant::now);
    let skip_or_fail =
        |stage: &str, e: ConnectError| tolerate(setup, stage, e, described.as_deref());
    let transformed = match setup.chain.apply(record) {
        Ok(Some(r)) => r,
        Ok(None) => return Ok(()),
        Err(e) => return skip_or_fail("TRANSFORMATION", e),
    };
    let scratch = &mut pending.scratch;
    scratch.key.clear();
    scratch.key_spans.clear();
    let has_key = match setup.converters.key.write_connect_data_spans(
        &transformed.topic,
        transformed.key_schema.as_ref(),
        &transformed.key,
        &mut scratch.key,
        &mut scratch.key_spans,
    ) {
        Ok(k) => k,
        Err(e) => return skip_or_fail("KEY_CONVERTER", e.into()),
    };
    scratch.value.clear();
    scratch.value_spans.clear();
    // The value may come back with shared spans left out (the JSON schema envelope, cached
    // `source` blocks), so the batch stores repeats of them by reference.
    let has_value = match setup.converters.value.write_connect_data_spans(
        &transformed.topic,
        transformed.value_schema.as_ref(),
        &transformed.value,
        &mut scratch.value,
        &mut scratch.value_spans,
    ) {
        Ok(v) => v,
        Err(e) => return skip_or_fail("VALUE_CONVERTER", e.into()),
    };
    setup.converters.encode_headers(
        &transformed.headers,
        &mut scratch.header_text,
        &mut scratch.header_runs,
        &mut scratch.header_bytes,
    );
    let topic = transformed.topic;
    let (partitions, compression) = match &scratch.last_topic {
        Some((name, partitions, compression)) if *name == topic => (*partitions, *compression),
        _ => {
            let partitions = ensure_topic(setup, log, &topic)?;
            let compression = match log.topic_config(&topic).map(|c| c.compression) {
                Some(TopicCompression::Codec(c)) => c,
                _ => setup.default_compression,
            };
            scratch.last_topic = Some((topic.clone(), partitions, compression));
            (partitions, compression)
        }
    };
    // The partitioner hashes the whole key: with spans left out of it, it is put together
    // first (only for topics of several partitions; one partition needs no hash).
    let key = match has_key {
        false => None,
        true if scratch.key_spans.is_empty() || partitions <= 1 => Some(&scratch.key[..]),
        true => {
            let scratch = &mut pending.scratch;
            scratch.whole_key.clear();
            let mut from = 0;
            for (at, span) in &scratch.key_spans {
                scratch.whole_key.extend_from_slice(&scratch.key[from..*at]);
                scratch.whole_key.extend_from_slice(span);
                from = *at;
            }
            scratch.whole_key.extend_from_slice(&scratch.key[from..]);
            Some(&scratch.whole_key[..])
        }
    };
    let partition = match transformed.kafka_partition {
        Some(p) if p >= 0 && (p as u32) < partitions => p as u32,
        Some(p) => {
            return skip_or_fail(
                "KAFKA_PRODUCE",
                ConnectError::data(format!(
                    "partition {p} does not exist in topic {topic} ({partitions} partitions)"
                )),
            )
        }
        None => partitioner.partition(key, partitions),
    };
    let producer = match pending.txn {
        Some(fields) => fields,
        None => {
            let txn = log.begin_transaction().map_err(log_error)?;
            let fields = txn.producer_fields();
            pending.txn = Some(fields);
            pending.begin = Some(txn);
            fields
        }
    };
    let by_partition = match pending.builders.get_mut(&topic) {
        Some(b) => b,
        None => pending.builders.entry(topic.clone()).or_default(),
    };
    let builder = by_partition.entry(partition).or_insert_with(|| {
        BatchBuilder::with_buffer(
            compression,
            producer,
            pending.scratch.records_buffer(sealer),
        )
    });
    let scratch = &pending.scratch;
    let header_parts: smallvec::SmallVec<[HeaderPart<'_>; 8]> = crate::convert::header_parts(
        &transformed.headers,
        &scratch.header_bytes,
        &scratch.header_text,
        &scratch.header_runs,
    )
    .collect();
    let before = builder.size_bytes();
    let timestamp = transformed.timestamp.unwrap_or(polled_at_ms);
    builder.append_with_header_parts(
        timestamp,
        has_key.then_some(&scratch.key[..]),
        &scratch.key_spans,
        has_value.then_some(&scratch.value[..]),
        &scratch.value_spans,
        &header_parts,
    );
    let size = builder.size_bytes();
    pending.bytes += size - before;
    pending.records += 1;
    if size >= BATCH_BYTES {
        if let Some(b) = by_partition.remove(&partition) {
            pending.full.push((topic, partition, b));
        }
    }
    Ok(())
}

/// Remembers `offset` as the newest of `partition` in the open transaction. An empty offset
/// is covered by a later record's (see [`headwater_api::SourceBatch`]) and changes nothing.
fn note_offset(pending: &mut Pending, partition: OffsetMap, offset: OffsetMap) {
    if offset.is_empty() {
        return;
    }
    let scratch = &mut pending.scratch;
    let key = match &scratch.last_source_partition {
        Some((last, key)) if *last == partition => key,
        _ => {
            let key = serde_json::to_string(&partition).unwrap_or_default();
            &scratch
                .last_source_partition
                .insert((partition.clone(), key))
                .1
        }
    };
    match pending.offsets.get_mut(key) {
        Some(slot) => slot.1 = offset,
        None => {
            pending.offsets.insert(key.clone(), (partition, offset));
        }
    }
}

fn tolerate(
    setup: &TaskSetup,
    stage: &str,
    error: ConnectError,
    record: Option<&str>,
) -> Result<(), ConnectError> {
    if setup.errors_tolerance_all {
        if setup.errors_log {
            match record {
                Some(record) => {
                    tracing::warn!(connector = %setup.connector, task = setup.task_id, stage, error = %error, record, "skipping a record that failed (errors.tolerance=all)")
                }
                None => {
                    tracing::warn!(connector = %setup.connector, task = setup.task_id, stage, error = %error, "skipping a record that failed (errors.tolerance=all)")
                }
            }
        }
        return Ok(());
    }
    Err(ConnectError::fatal(format!(
        "Tolerance exceeded in error handler: {stage} failed: {}",
        error.message()
    ))
    .with_cause(error))
}

fn ensure_topic(setup: &TaskSetup, log: &Log, topic: &str) -> Result<u32, ConnectError> {
    if let Some(n) = log.partition_count(topic) {
        return Ok(n);
    }
    log.ensure_topic(
        topic,
        setup.topic_defaults.partitions,
        setup.topic_defaults.config.clone(),
    )
    .map_err(log_error)?;
    setup
        .active_topics
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(topic.to_owned());
    tracing::info!(connector = %setup.connector, topic, partitions = setup.topic_defaults.partitions, "created topic");
    Ok(setup.topic_defaults.partitions)
}

/// Hands every staged batch to the sealer (the transaction stays open).
async fn spill(sealer: &Sealer, pending: &mut Pending) -> Result<(), ConnectError> {
    for (topic, by_partition) in pending.builders.drain() {
        for (partition, builder) in by_partition {
            pending.full.push((topic.clone(), partition, builder));
        }
    }
    send_full(sealer, pending).await?;
    pending.spilled_bytes += pending.bytes;
    pending.bytes = 0;
    Ok(())
}

/// Hands the records staged so far, with their offsets, to the sealer to commit; the outcome
/// is taken later ([`settle`]).
async fn commit(
    setup: &TaskSetup,
    log: &Log,
    sealer: &Sealer,
    pending: &mut Pending,
    in_flight: &mut VecDeque<InFlight>,
) -> Result<(), ConnectError> {
    let started = Instant::now();
    let producer = match pending.txn {
        Some(fields) => fields,
        None => {
            let txn = log.begin_transaction().map_err(log_error)?;
            let fields = txn.producer_fields();
            pending.begin = Some(txn);
            fields
        }
    };
    let staged_bytes = pending.bytes + pending.spilled_bytes;
    let records = pending.records;
    let offsets: Vec<(OffsetMap, OffsetMap)> =
        std::mem::take(&mut pending.offsets).into_values().collect();
    for (partition, offset) in &offsets {
        let (p, b) = offsets_batch(&setup.connector, partition, Some(offset), producer);
        pending.full.push((OFFSETS_TOPIC.to_owned(), p, b));
    }
    spill(sealer, pending).await?;
    let (done, outcome) = oneshot::channel();
    let on_durable = {
        let (shared, stored, connector, offsets) = (
            setup.shared.clone(),
            setup.offsets.clone(),
            setup.connector.clone(),
            offsets.clone(),
        );
        Box::new(move || {
            record_commit(&shared, started, records, staged_bytes);
            store_offsets(&stored, &connector, &offsets);
        })
    };
    sealer
        .send(Command::Commit { on_durable, done })
        .await
        .map_err(sealer_gone)?;
    pending.txn = None;
    pending.records = 0;
    pending.bytes = 0;
    pending.spilled_bytes = 0;
    pending.since = None;
    pending.scratch.last_topic = None;
    in_flight.push_back(InFlight {
        done: outcome,
        offsets,
    });
    Ok(())
}

/// Counts a durable commit in the task's metrics.
fn record_commit(shared: &TaskShared, started: Instant, records: usize, bytes: usize) {
    shared.commit_latency.observe_duration(started.elapsed());
    shared.commit_bytes.observe(bytes as u64);
    shared
        .records_written
        .fetch_add(records as u64, Ordering::Relaxed);
    shared
        .bytes_written
        .fetch_add(bytes as u64, Ordering::Relaxed);
    shared.commits.fetch_add(1, Ordering::Relaxed);
}

/// Makes durable offsets the connector's current ones (what the REST API reports and a
/// restarted task resumes from).
pub(crate) fn store_offsets(
    stored: &Mutex<OffsetsByConnector>,
    connector: &str,
    offsets: &[(OffsetMap, OffsetMap)],
) {
    let mut all = stored.lock().unwrap_or_else(|e| e.into_inner());
    let mine = all.entry(connector.to_owned()).or_default();
    for (partition, offset) in offsets {
        let key = offset_key(connector, partition);
        match mine
            .iter_mut()
            .find(|(p, _)| offset_key(connector, p) == key)
        {
            Some(slot) => slot.1 = offset.clone(),
            None => mine.push((partition.clone(), offset.clone())),
        }
    }
}

/// Completes a commit the sealer carried out (its metrics and stored offsets were updated
/// when it became durable): tells the task, or fails with the commit's error.
async fn finish_commit(
    done: InFlight,
    outcome: Result<(), LogError>,
    task: &mut dyn SourceTask,
) -> Result<(), ConnectError> {
    outcome.map_err(log_error)?;
    task.commit(&done.offsets).await
}

fn log_error(e: headwater_log::LogError) -> ConnectError {
    match e {
        headwater_log::LogError::Poisoned(_) | headwater_log::LogError::Closed => {
            ConnectError::fatal(e.to_string())
        }
        other => ConnectError::retriable(format!("log write failed: {other}")),
    }
}
