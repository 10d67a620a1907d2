//! Runs one source task: poll -> transforms -> converters -> partitioner -> log transaction
//! (records and the offsets that cover them together) -> commit -> `SourceTask::commit`.
//!
//! Invariants (the durability contract):
//! - a source transaction's records and the source offset after them go into one log
//!   transaction; it is committed only at a `Boundary::Commit`, so a reader never sees half a
//!   source transaction and a restart resumes exactly after the last committed one;
//! - `SourceTask::commit` is called only after that log transaction is durable;
//! - memory is bounded by bytes: per-partition batches are flushed into the (still open) log
//!   transaction at ~1 MiB, and a long source transaction spills to the log, not to RAM;
//! - records dropped by transforms still advance the offset (as Kafka Connect does);
//! - per source partition, the offset stored is the last non-empty one of the batch (a record
//!   with an empty offset is covered by a later one of the same batch);
//! - staging a record allocates nothing in the steady state: converters write into reused
//!   buffers and finished batches' buffers are recycled ([`Scratch`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use headwater_api::{
    Boundary, ConnectError, OffsetMap, Properties, SourceRecord, SourceTask, SourceTaskContext,
    Transform,
};

use headwater_log::batch::{BatchBuilder, Compression, RecordHeader};
use headwater_log::{Log, Partitioner, TopicCompression, TopicConfig, Transaction};
use tokio::sync::watch;

use crate::convert::Converters;
use crate::metrics::{self, Histogram};
use crate::model::State;
use crate::stores::{offset_key, offsets_batch, InternalTopics, OffsetsByConnector, OFFSETS_TOPIC};

/// Flush a partition's batch into the log transaction at this size.
const BATCH_BYTES: usize = 1024 * 1024;
/// Commit at a boundary once this much is pending...
const COMMIT_BYTES: usize = 8 * 1024 * 1024;
/// ...or once the oldest pending record waited this long (or at once when the source is caught
/// up, see [`headwater_api::SourceBatch::caught_up`]).
const LINGER: Duration = Duration::from_millis(5);

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
    pub records_written: AtomicU64,
    pub bytes_written: AtomicU64,
    pub commits: AtomicU64,
    /// Duration of each log commit (from staging the last batches to durable).
    pub commit_latency: Histogram,
    /// Record batch bytes of each log commit.
    pub commit_bytes: Histogram,
    /// Milliseconds behind the source at the last polled change event
    /// ([`metrics::NO_LAG`] until one carries `source.ts_ms`).
    pub source_lag_ms: AtomicI64,
}

impl TaskShared {
    pub fn new(control: Control) -> Arc<Self> {
        let (tx, _) = watch::channel(control);
        Arc::new(TaskShared {
            status: Mutex::new((State::Unassigned, None)),
            control: tx,
            records_polled: AtomicU64::new(0),
            records_written: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            commit_latency: Histogram::latency(),
            commit_bytes: Histogram::bytes(),
            source_lag_ms: AtomicI64::new(metrics::NO_LAG),
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
    let mut backoff = setup.backoff_initial;
    let mut control = setup.shared.control.subscribe();
    loop {
        if *control.borrow() == Control::Stop {
            break;
        }
        let task = (setup.make_task)();
        match run_once(&setup, task).await {
            Ok(()) => break,
            Err(e) if e.is_retriable() => {
                tracing::warn!(connector = %setup.connector, task = setup.task_id, error = %e, backoff_ms = backoff.as_millis() as u64, "task failed with a retriable error; restarting after backoff");
                setup.shared.set_status(State::Running, Some(e.trace()));
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
                backoff = (backoff * 2).min(setup.backoff_max);
            }
            Err(e) => {
                tracing::error!(connector = %setup.connector, task = setup.task_id, error = %e, "task failed");
                setup.shared.set_status(State::Failed, Some(e.trace()));
                let _ = setup
                    .topics
                    .put_status(
                        &format!("status-task-{}-{}", setup.connector, setup.task_id),
                        "FAILED",
                        Some(&e.trace()),
                        "headwater",
                    )
                    .await;
                return;
            }
        }
    }
}

/// Record buffers kept for reuse by later batch builders (each about [`BATCH_BYTES`]).
const FREE_RECORD_BUFFERS: usize = 4;

/// The open log transaction of a task and what it holds.
struct Pending {
    txn: Option<Transaction>,
    /// Batch builders by topic, then partition.
    builders: HashMap<String, HashMap<u32, BatchBuilder>>,
    /// Source partition (as JSON) -> (partition, latest offset).
    offsets: BTreeMap<String, (OffsetMap, OffsetMap)>,
    bytes: usize,
    records: usize,
    since: Option<Instant>,
    scratch: Scratch,
}

/// Buffers and look-ups reused from record to record, so that staging a record allocates
/// nothing in the steady state.
#[derive(Default)]
struct Scratch {
    key: Vec<u8>,
    value: Vec<u8>,
    /// A finished batch on its way into the log.
    batch: Vec<u8>,
    /// Emptied record buffers of appended builders.
    free_records: Vec<Vec<u8>>,
    /// The last source partition seen and its JSON form (the `offsets` key).
    last_source_partition: Option<(OffsetMap, String)>,
    /// The last destination topic: its name, partition count and compression. Forgotten at
    /// every commit, so topic changes are picked up.
    last_topic: Option<(String, u32, Compression)>,
}

impl Scratch {
    fn records_buffer(&mut self) -> Vec<u8> {
        self.free_records
            .pop()
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

async fn run_once(setup: &TaskSetup, mut task: Box<dyn SourceTask>) -> Result<(), ConnectError> {
    let log = setup.topics.log().clone();
    let committed = setup
        .offsets
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&setup.connector)
        .cloned()
        .unwrap_or_default();
    let context = SourceTaskContext {
        connector_name: setup.connector.clone(),
        task_id: setup.task_id,
        committed_offsets: committed,
    };
    task.start(context, setup.props.clone()).await?;
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
    let mut control = setup.shared.control.subscribe();
    let partitioner = Partitioner::new();
    let mut pending = Pending {
        txn: None,
        builders: HashMap::new(),
        offsets: BTreeMap::new(),
        bytes: 0,
        records: 0,
        since: None,
        scratch: Scratch::default(),
    };
    let mut at_boundary = true;
    let result: Result<(), ConnectError> = async {
        loop {
            let ctl = *control.borrow();
            match ctl {
                Control::Stop => {
                    if at_boundary && !pending.is_empty() {
                        commit(setup, &log, &mut pending, task.as_mut()).await?;
                    }
                    return Ok(());
                }
                Control::Pause => {
                    if at_boundary {
                        if !pending.is_empty() {
                            commit(setup, &log, &mut pending, task.as_mut()).await?;
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
            let batch_caught_up = batch.caught_up;
            let polled = batch.records.len();
            setup
                .shared
                .records_polled
                .fetch_add(polled as u64, Ordering::Relaxed);
            // Records without a timestamp get the time they were polled (one clock read per
            // batch), as a producer stamps CreateTime at send.
            let polled_at_ms = headwater_log::log::now_ms();
            for record in batch.records {
                process(
                    setup,
                    &log,
                    &partitioner,
                    &mut pending,
                    record,
                    polled_at_ms,
                )?;
            }
            let due = pending.bytes >= COMMIT_BYTES
                || polled == 0
                || batch_caught_up
                || pending.since.is_some_and(|t| t.elapsed() >= LINGER);
            if at_boundary && !pending.is_empty() && due {
                commit(setup, &log, &mut pending, task.as_mut()).await?;
            } else if !at_boundary && pending.bytes >= COMMIT_BYTES {
                spill(&log, &mut pending)?;
            }
        }
    }
    .await;
    if let Some(txn) = pending.txn.take() {
        let _ = txn.abort();
    }
    task.stop().await;
    result
}

/// Transforms, converts and stages one record.
fn process(
    setup: &TaskSetup,
    log: &Log,
    partitioner: &Partitioner,
    pending: &mut Pending,
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
    metrics::observe_source_lag(&setup.shared.source_lag_ms, &record);
    let skip_or_fail =
        |stage: &str, e: ConnectError| tolerate(setup, stage, e, described.as_deref());
    let transformed = match setup.chain.apply(record) {
        Ok(Some(r)) => r,
        Ok(None) => return Ok(()),
        Err(e) => return skip_or_fail("TRANSFORMATION", e),
    };
    let scratch = &mut pending.scratch;
    scratch.key.clear();
    let has_key = match setup.converters.key.write_connect_data(
        &transformed.topic,
        transformed.key_schema.as_ref(),
        &transformed.key,
        &mut scratch.key,
    ) {
        Ok(k) => k,
        Err(e) => return skip_or_fail("KEY_CONVERTER", e.into()),
    };
    scratch.value.clear();
    let has_value = match setup.converters.value.write_connect_data(
        &transformed.topic,
        transformed.value_schema.as_ref(),
        &transformed.value,
        &mut scratch.value,
    ) {
        Ok(v) => v,
        Err(e) => return skip_or_fail("VALUE_CONVERTER", e.into()),
    };
    let headers = setup.converters.header_bytes(&transformed.headers);
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
    let key = has_key.then_some(&scratch.key[..]);
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
    let producer = match pending.txn.as_ref() {
        Some(t) => t.producer_fields(),
        None => {
            let txn = log.begin_transaction().map_err(log_error)?;
            let f = txn.producer_fields();
            pending.txn = Some(txn);
            f
        }
    };
    let by_partition = match pending.builders.get_mut(&topic) {
        Some(b) => b,
        None => pending.builders.entry(topic.clone()).or_default(),
    };
    let builder = by_partition.entry(partition).or_insert_with(|| {
        BatchBuilder::with_buffer(compression, producer, pending.scratch.records_buffer())
    });
    let header_refs: Vec<RecordHeader<'_>> = headers
        .iter()
        .map(|(k, v)| RecordHeader {
            key: k.as_str(),
            value: v.as_deref(),
        })
        .collect();
    let before = builder.size_bytes();
    let timestamp = transformed.timestamp.unwrap_or(polled_at_ms);
    let scratch = &pending.scratch;
    builder.append(
        timestamp,
        has_key.then_some(&scratch.key[..]),
        has_value.then_some(&scratch.value[..]),
        &header_refs,
    );
    let size = builder.size_bytes();
    pending.bytes += size - before;
    pending.records += 1;
    if size >= BATCH_BYTES {
        if let Some(b) = by_partition.remove(&partition) {
            append_to_txn(pending, &topic, partition, b)?;
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

fn append_to_txn(
    pending: &mut Pending,
    topic: &str,
    partition: u32,
    builder: BatchBuilder,
) -> Result<(), ConnectError> {
    let txn = pending
        .txn
        .as_mut()
        .ok_or_else(|| ConnectError::fatal("internal: batch without a transaction"))?;
    let (_, records) = txn
        .append_builder_reusing(topic, partition, builder, &mut pending.scratch.batch)
        .map_err(log_error)?;
    pending.scratch.recycle(records);
    Ok(())
}

/// Moves staged batches into the open log transaction (it stays open).
fn spill(_log: &Log, pending: &mut Pending) -> Result<(), ConnectError> {
    let builders: Vec<(String, HashMap<u32, BatchBuilder>)> = pending.builders.drain().collect();
    for (topic, by_partition) in builders {
        for (partition, b) in by_partition {
            append_to_txn(pending, &topic, partition, b)?;
        }
    }
    pending.bytes = 0;
    Ok(())
}

/// Commits the records staged so far with their offsets, then tells the task.
async fn commit(
    setup: &TaskSetup,
    log: &Log,
    pending: &mut Pending,
    task: &mut dyn SourceTask,
) -> Result<(), ConnectError> {
    let started = Instant::now();
    if pending.txn.is_none() {
        pending.txn = Some(log.begin_transaction().map_err(log_error)?);
    }
    let total_bytes = pending.bytes;
    spill(log, pending)?;
    pending.bytes = total_bytes;
    let offsets: Vec<(OffsetMap, OffsetMap)> =
        std::mem::take(&mut pending.offsets).into_values().collect();
    let txn = pending
        .txn
        .as_mut()
        .ok_or_else(|| ConnectError::fatal("internal: no transaction"))?;
    for (partition, offset) in &offsets {
        let (p, b) = offsets_batch(
            &setup.connector,
            partition,
            Some(offset),
            txn.producer_fields(),
        );
        txn.append_builder(OFFSETS_TOPIC, p, b).map_err(log_error)?;
    }
    let records = pending.records;
    let staged_bytes = pending.bytes;
    let txn = pending
        .txn
        .take()
        .ok_or_else(|| ConnectError::fatal("internal: no transaction"))?;
    txn.commit_async().await.map_err(log_error)?;
    setup
        .shared
        .commit_latency
        .observe_duration(started.elapsed());
    setup.shared.commit_bytes.observe(staged_bytes as u64);
    pending.records = 0;
    pending.bytes = 0;
    pending.since = None;
    pending.scratch.last_topic = None;
    setup
        .shared
        .records_written
        .fetch_add(records as u64, Ordering::Relaxed);
    setup
        .shared
        .bytes_written
        .fetch_add(staged_bytes as u64, Ordering::Relaxed);
    setup.shared.commits.fetch_add(1, Ordering::Relaxed);
    {
        let mut all = setup.offsets.lock().unwrap_or_else(|e| e.into_inner());
        let mine = all.entry(setup.connector.clone()).or_default();
        for (partition, offset) in &offsets {
            let key = offset_key(&setup.connector, partition);
            match mine
                .iter_mut()
                .find(|(p, _)| offset_key(&setup.connector, p) == key)
            {
                Some(slot) => slot.1 = offset.clone(),
                None => mine.push((partition.clone(), offset.clone())),
            }
        }
    }
    task.commit(&offsets).await
}

fn log_error(e: headwater_log::LogError) -> ConnectError {
    match e {
        headwater_log::LogError::Poisoned(_) | headwater_log::LogError::Closed => {
            ConnectError::fatal(e.to_string())
        }
        other => ConnectError::retriable(format!("log write failed: {other}")),
    }
}
