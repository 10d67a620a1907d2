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
//! - records dropped by transforms still advance the offset (as Kafka Connect does).

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
/// ...or once the oldest pending record waited this long.
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

/// The open log transaction of a task and what it holds.
struct Pending {
    txn: Option<Transaction>,
    builders: HashMap<(String, u32), BatchBuilder>,
    offsets: BTreeMap<String, (OffsetMap, OffsetMap)>,
    bytes: usize,
    records: usize,
    since: Option<Instant>,
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
            let polled = batch.records.len();
            setup
                .shared
                .records_polled
                .fetch_add(polled as u64, Ordering::Relaxed);
            for record in batch.records {
                process(setup, &log, &partitioner, &mut pending, record)?;
            }
            let due = pending.bytes >= COMMIT_BYTES
                || polled == 0
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
    record: SourceRecord,
) -> Result<(), ConnectError> {
    let pkey = serde_json::to_string(&record.source_partition).unwrap_or_default();
    pending.offsets.insert(
        pkey,
        (
            record.source_partition.clone(),
            record.source_offset.clone(),
        ),
    );
    pending.since.get_or_insert_with(Instant::now);
    metrics::observe_source_lag(&setup.shared.source_lag_ms, &record);
    let described = (setup.errors_log && setup.errors_log_include_messages)
        .then(|| crate::convert::describe_record(&record));
    let skip_or_fail =
        |stage: &str, e: ConnectError| tolerate(setup, stage, e, described.as_deref());
    let transformed = match setup.chain.apply(record) {
        Ok(Some(r)) => r,
        Ok(None) => return Ok(()),
        Err(e) => return skip_or_fail("TRANSFORMATION", e),
    };
    let key = match setup.converters.key.from_connect_data(
        &transformed.topic,
        transformed.key_schema.as_ref(),
        &transformed.key,
    ) {
        Ok(k) => k,
        Err(e) => return skip_or_fail("KEY_CONVERTER", e.into()),
    };
    let value = match setup.converters.value.from_connect_data(
        &transformed.topic,
        transformed.value_schema.as_ref(),
        &transformed.value,
    ) {
        Ok(v) => v,
        Err(e) => return skip_or_fail("VALUE_CONVERTER", e.into()),
    };
    let headers = setup.converters.header_bytes(&transformed.headers);
    let topic = transformed.topic;
    let partitions = ensure_topic(setup, log, &topic)?;
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
        None => partitioner.partition(key.as_deref(), partitions),
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
    let compression = match log.topic_config(&topic).map(|c| c.compression) {
        Some(TopicCompression::Codec(c)) => c,
        _ => setup.default_compression,
    };
    let builder = pending
        .builders
        .entry((topic.clone(), partition))
        .or_insert_with(|| BatchBuilder::new(compression, producer));
    let header_refs: Vec<RecordHeader<'_>> = headers
        .iter()
        .map(|(k, v)| RecordHeader {
            key: k.as_str(),
            value: v.as_deref(),
        })
        .collect();
    let before = builder.size_bytes();
    let timestamp = transformed
        .timestamp
        .unwrap_or_else(headwater_log::log::now_ms);
    builder.append(timestamp, key.as_deref(), value.as_deref(), &header_refs);
    let size = builder.size_bytes();
    pending.bytes += size - before;
    pending.records += 1;
    if size >= BATCH_BYTES {
        if let Some(b) = pending.builders.remove(&(topic.clone(), partition)) {
            append_to_txn(pending, &topic, partition, b)?;
        }
    }
    Ok(())
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
    txn.append_builder(topic, partition, builder)
        .map_err(log_error)?;
    Ok(())
}

/// Moves staged batches into the open log transaction (it stays open).
fn spill(_log: &Log, pending: &mut Pending) -> Result<(), ConnectError> {
    let builders: Vec<((String, u32), BatchBuilder)> = pending.builders.drain().collect();
    for ((topic, partition), b) in builders {
        append_to_txn(pending, &topic, partition, b)?;
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
