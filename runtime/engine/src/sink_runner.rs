//! Runs one sink task: log (read_committed) -> converters -> transforms -> `SinkTask::put` ->
//! sink offsets stored in `connect-offsets`.
//!
//! Invariants (see `headwater_api::sink` for the contract with the task):
//! - records reach `put` in offset order per topic partition, only records of committed log
//!   transactions, each at most once per task instance;
//! - the offsets stored for a partition only move forward, and only after the `put` that covers
//!   them returned; they are stored the way Kafka Connect reports sink offsets
//!   (`{"kafka_topic","kafka_partition"}` -> `{"kafka_offset"}`), so the REST offsets API shows
//!   them;
//! - a (re)started task resumes from the destination's own offsets when the task keeps them
//!   (exactly-once), else from the stored ones, else from the start of the partition;
//! - memory is bounded: one batch of at most [`MAX_BATCH_RECORDS`] records / about
//!   [`MAX_BATCH_BYTES`] bytes of log data is in flight at a time;
//! - transforms see each record as a `SourceRecord` (topic, partition, key, value, timestamp,
//!   headers); the partition and offset it was read at travel beside it.
//!
//! Partitions are assigned to a connector's tasks by position in the sorted list of all
//! subscribed topic partitions (`index % tasks == task_id`); a subscription whose topics do not
//! exist yet (or a `topics.regex` matching new ones) is re-resolved every
//! [`ASSIGNMENT_REFRESH`].

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use headwater_api::{
    ConnectError, FieldsRead, Headers, OffsetMap, OffsetValue, Properties, SinkBatch, SinkRecord,
    SinkTask, SinkTaskContext, SourceRecord, TopicPartition, Transform, Value,
};
use headwater_log::{Isolation, Log, LogError};

use crate::convert::Converters;
use crate::model::State;
use crate::runner::{Control, TaskShared};
use crate::stores::{offsets_batch, InternalTopics, OffsetsByConnector, OFFSETS_TOPIC};

/// Records per `put`, at most.
pub const MAX_BATCH_RECORDS: usize = 8192;
/// Log bytes read for one `put`, about (a batch read may exceed it by one log batch).
pub const MAX_BATCH_BYTES: usize = 8 * 1024 * 1024;
/// Bytes read from one partition per read call.
const READ_BYTES: usize = 1024 * 1024;
/// How long to wait for new data when every partition is caught up.
const IDLE_WAIT: Duration = Duration::from_millis(200);
/// After this long without records, the task gets an empty `put`.
const IDLE_PUT: Duration = Duration::from_secs(1);
/// How often the subscription is resolved against the log's topics again.
pub const ASSIGNMENT_REFRESH: Duration = Duration::from_secs(5);

/// Which topics a sink consumes (`topics` or `topics.regex`).
#[derive(Clone, Debug)]
pub enum Subscription {
    Topics(Vec<String>),
    Pattern(regex::Regex),
}

impl Subscription {
    /// From a validated sink configuration.
    pub fn from_props(props: &Properties) -> Result<Subscription, ConnectError> {
        if let Some(list) = props.get("topics").filter(|v| !v.trim().is_empty()) {
            return Ok(Subscription::Topics(
                list.split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(str::to_owned)
                    .collect(),
            ));
        }
        let pattern = props
            .get("topics.regex")
            .filter(|v| !v.trim().is_empty())
            .ok_or_else(|| ConnectError::config("a sink needs topics or topics.regex"))?;
        regex::Regex::new(&format!("^(?:{pattern})$"))
            .map(Subscription::Pattern)
            .map_err(|e| ConnectError::config(format!("topics.regex: {e}")))
    }

    fn matches(&self, topic: &str) -> bool {
        match self {
            Subscription::Topics(t) => t.iter().any(|x| x == topic),
            Subscription::Pattern(r) => {
                // Internal topics are never matched by a pattern (Kafka excludes them too).
                !topic.starts_with("connect-") && !topic.starts_with("__") && r.is_match(topic)
            }
        }
    }

    /// Subscribed topics named explicitly that do not exist (yet).
    fn missing(&self, log: &Log) -> Vec<String> {
        match self {
            Subscription::Topics(t) => t
                .iter()
                .filter(|x| log.partition_count(x).is_none())
                .cloned()
                .collect(),
            Subscription::Pattern(_) => Vec::new(),
        }
    }
}

/// Everything a sink task run needs.
pub struct SinkSetup {
    pub connector: String,
    pub task_id: u32,
    pub task_count: u32,
    pub props: Properties,
    pub make_task: Arc<dyn Fn() -> Box<dyn SinkTask> + Send + Sync>,
    pub chain: Arc<dyn Transform<SourceRecord>>,
    pub converters: Arc<Converters>,
    pub subscription: Subscription,
    pub topics: InternalTopics,
    pub offsets: Arc<Mutex<OffsetsByConnector>>,
    pub shared: Arc<TaskShared>,
    pub errors_tolerance_all: bool,
    pub errors_log: bool,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
}

/// Runs the sink task until it is stopped or fails fatally, restarting it with exponential
/// backoff after retriable errors (the same policy as source tasks).
pub async fn supervise_sink(setup: SinkSetup) {
    let restart = crate::runner::Restart {
        progress: |s| s.records_polled.load(std::sync::atomic::Ordering::Relaxed),
        connector: &setup.connector,
        task_id: setup.task_id,
        shared: &setup.shared,
        topics: &setup.topics,
        backoff_initial: setup.backoff_initial,
        backoff_max: setup.backoff_max,
        max_retries: None,
    };
    restart.run(|| run_once(&setup, (setup.make_task)())).await;
}

/// The offsets-topic partition map of a sink's topic partition (Kafka Connect's form).
pub fn sink_partition_map(tp: &TopicPartition) -> OffsetMap {
    let mut m = OffsetMap::new();
    m.insert("kafka_topic".into(), OffsetValue::String(tp.topic.clone()));
    m.insert(
        "kafka_partition".into(),
        OffsetValue::Int(i64::from(tp.partition)),
    );
    m
}

fn sink_offset_map(offset: i64) -> OffsetMap {
    let mut m = OffsetMap::new();
    m.insert("kafka_offset".into(), OffsetValue::Int(offset));
    m
}

/// The stored sink offsets of a connector, by topic partition.
fn stored_positions(setup: &SinkSetup) -> BTreeMap<TopicPartition, i64> {
    let all = setup.offsets.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = BTreeMap::new();
    for (partition, offset) in all.get(&setup.connector).into_iter().flatten() {
        let topic = match partition.get("kafka_topic") {
            Some(OffsetValue::String(t)) => t.clone(),
            _ => continue,
        };
        let p = match partition.get("kafka_partition") {
            Some(OffsetValue::Int(p)) => *p as u32,
            _ => continue,
        };
        if let Some(OffsetValue::Int(o)) = offset.get("kafka_offset") {
            out.insert(TopicPartition::new(topic, p), *o);
        }
    }
    out
}

/// This task's share of the subscribed topic partitions.
fn assignment(setup: &SinkSetup, log: &Log) -> Vec<TopicPartition> {
    let mut all: Vec<TopicPartition> = log
        .topics()
        .into_iter()
        .filter(|t| setup.subscription.matches(t))
        .flat_map(|t| {
            let n = log.partition_count(&t).unwrap_or(0);
            (0..n).map(move |p| TopicPartition::new(t.clone(), p))
        })
        .collect();
    all.sort();
    all.into_iter()
        .enumerate()
        .filter(|(i, _)| (*i as u32) % setup.task_count.max(1) == setup.task_id)
        .map(|(_, tp)| tp)
        .collect()
}

/// What the reader thread needs to turn log records into sink records.
struct ReadContext {
    connector: String,
    converters: Arc<Converters>,
    chain: Arc<dyn Transform<SourceRecord>>,
    shared: Arc<TaskShared>,
    errors_tolerance_all: bool,
    errors_log: bool,
    /// The top-level value fields the task reads ([`SinkTask::value_fields_read`]), when the
    /// connector has no transforms (a transform may read any field); `None`: all.
    value_fields: Option<FieldsRead>,
}

/// From the runner to its reader thread.
enum ReaderCommand {
    /// Start reading these partitions from these offsets.
    Assign(Vec<Position>),
}

/// From the reader thread to the runner.
enum ReaderOutput {
    Batch(SinkBatch),
    Failed(ConnectError),
}

/// One assigned partition and where consumption continues.
#[derive(Clone)]
struct Position {
    tp: TopicPartition,
    next: i64,
}

/// Whether the connector configures transforms (`transforms` lists at least one alias).
fn has_transforms(props: &Properties) -> bool {
    props
        .get("transforms")
        .is_some_and(|t| t.split(',').any(|a| !a.trim().is_empty()))
}

fn log_error(e: LogError) -> ConnectError {
    ConnectError::retriable(format!("reading the log: {e}"))
}

async fn run_once(setup: &SinkSetup, mut task: Box<dyn SinkTask>) -> Result<(), ConnectError> {
    let log = setup.topics.log().clone();
    let context = SinkTaskContext {
        connector_name: setup.connector.clone(),
        task_id: setup.task_id,
    };
    setup.shared.waiting.clear();
    task.start(context, setup.props.clone()).await?;
    setup.shared.set_status(State::Running, None);
    let mut control = setup.shared.control.subscribe();
    let result = consume(setup, &log, task.as_mut(), &mut control).await;
    task.stop().await;
    result
}

/// Assigns partitions (again) and positions new ones.
async fn refresh_assignment(
    setup: &SinkSetup,
    log: &Log,
    task: &mut dyn SinkTask,
    positions: &mut Vec<Position>,
) -> Result<(), ConnectError> {
    let assigned = assignment(setup, log);
    let missing = setup.subscription.missing(log);
    if missing.is_empty() {
        setup.shared.waiting.clear();
    } else {
        setup.shared.waiting.set(format!(
            "topic(s) {} do not exist yet; consuming starts when they are created",
            missing.join(", ")
        ));
    }
    let new: Vec<TopicPartition> = assigned
        .into_iter()
        .filter(|tp| !positions.iter().any(|p| &p.tp == tp))
        .collect();
    if new.is_empty() {
        return Ok(());
    }
    let stored = stored_positions(setup);
    let from_destination: BTreeMap<TopicPartition, i64> =
        task.stored_offsets(&new).await?.into_iter().collect();
    for tp in new {
        let earliest = log
            .earliest_offset(&tp.topic, tp.partition)
            .map_err(log_error)?;
        let (next, from) = match (from_destination.get(&tp), stored.get(&tp)) {
            (Some(o), _) => (*o, "the destination"),
            (None, Some(o)) => (*o, "the stored sink offsets"),
            (None, None) => (earliest, "the start of the partition"),
        };
        let next = if next < earliest {
            tracing::warn!(connector = %setup.connector, partition = %tp, offset = next, earliest, "records before the log's start offset were removed by retention; continuing at the start offset");
            earliest
        } else {
            next
        };
        tracing::info!(connector = %setup.connector, task = setup.task_id, partition = %tp, offset = next, from, "sink consumes partition");
        positions.push(Position { tp, next });
    }
    Ok(())
}

async fn consume(
    setup: &SinkSetup,
    log: &Log,
    task: &mut dyn SinkTask,
    control: &mut tokio::sync::watch::Receiver<Control>,
) -> Result<(), ConnectError> {
    // The committed positions (after the last put); the reader thread reads ahead of them,
    // converting the next batch while the task writes the current one.
    let mut positions: Vec<Position> = Vec::new();
    let (command_tx, command_rx) = std::sync::mpsc::channel::<ReaderCommand>();
    let (batch_tx, mut batch_rx) = tokio::sync::mpsc::channel::<ReaderOutput>(1);
    let ctx = ReadContext {
        connector: setup.connector.clone(),
        converters: setup.converters.clone(),
        chain: setup.chain.clone(),
        shared: setup.shared.clone(),
        errors_tolerance_all: setup.errors_tolerance_all,
        errors_log: setup.errors_log,
        value_fields: if has_transforms(&setup.props) {
            None
        } else {
            task.value_fields_read()
        },
    };
    let reader_log = log.clone();
    let handle = tokio::runtime::Handle::current();
    let reader = std::thread::Builder::new()
        .name(format!("sink-read-{}", setup.connector))
        .spawn(move || read_ahead(ctx, reader_log, handle, command_rx, batch_tx))
        .map_err(|e| ConnectError::fatal(format!("starting the sink's reader thread: {e}")))?;
    let result = async {
        let before = positions.len();
        refresh_assignment(setup, log, task, &mut positions).await?;
        let _ = command_tx.send(ReaderCommand::Assign(positions[before..].to_vec()));
        let mut refreshed = Instant::now();
        loop {
            if *control.borrow() == Control::Stop {
                return Ok(());
            }
            if *control.borrow() == Control::Pause {
                setup.shared.set_status(State::Paused, None);
                while *control.borrow() == Control::Pause {
                    if control.changed().await.is_err() {
                        return Ok(());
                    }
                }
                setup.shared.set_status(State::Running, None);
                continue;
            }
            if refreshed.elapsed() >= ASSIGNMENT_REFRESH {
                let before = positions.len();
                refresh_assignment(setup, log, task, &mut positions).await?;
                if positions.len() > before {
                    let _ = command_tx.send(ReaderCommand::Assign(positions[before..].to_vec()));
                }
                refreshed = Instant::now();
            }
            update_lag(setup, log, &positions);
            let output = tokio::select! {
                o = batch_rx.recv() => o,
                _ = tokio::time::sleep(IDLE_PUT) => {
                    // Nothing new for a while: an empty put lets buffering sinks flush by time
                    // (Kafka Connect calls put with no records the same way).
                    task.put(SinkBatch::default()).await?;
                    continue;
                }
                _ = control.changed() => continue,
            };
            let batch = match output {
                Some(ReaderOutput::Batch(b)) => b,
                Some(ReaderOutput::Failed(e)) => return Err(e),
                None => return Err(ConnectError::retriable("the sink's reader thread ended")),
            };
            let records = batch.records.len();
            let next_offsets = batch.next_offsets.clone();
            task.put(batch).await?;
            store(setup, &next_offsets).await?;
            setup
                .shared
                .records_written
                .fetch_add(records as u64, Ordering::Relaxed);
            setup.shared.commits.fetch_add(1, Ordering::Relaxed);
            for (tp, next) in next_offsets {
                if let Some(p) = positions.iter_mut().find(|p| p.tp == tp) {
                    p.next = next;
                }
            }
        }
    }
    .await;
    // Dropping the channels ends the reader thread.
    drop(command_tx);
    drop(batch_rx);
    let _ = tokio::task::spawn_blocking(move || reader.join()).await;
    result
}

/// The reader thread: reads and converts batches ahead of the runner, one waiting at most.
fn read_ahead(
    ctx: ReadContext,
    log: Log,
    handle: tokio::runtime::Handle,
    commands: std::sync::mpsc::Receiver<ReaderCommand>,
    out: tokio::sync::mpsc::Sender<ReaderOutput>,
) {
    let mut positions: Vec<Position> = Vec::new();
    let mut cursor = 0usize;
    loop {
        loop {
            match commands.try_recv() {
                Ok(ReaderCommand::Assign(new)) => positions.extend(new),
                Err(std::sync::mpsc::TryRecvError::Empty) => break,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => return,
            }
        }
        if out.is_closed() {
            return;
        }
        match read_batch(&ctx, &log, &mut positions, &mut cursor) {
            Ok(Some(batch)) => {
                for (tp, next) in &batch.next_offsets {
                    if let Some(p) = positions.iter_mut().find(|p| &p.tp == tp) {
                        p.next = *next;
                    }
                }
                if out.blocking_send(ReaderOutput::Batch(batch)).is_err() {
                    return;
                }
            }
            Ok(None) => handle.block_on(wait_for_any(&log, &positions)),
            Err(e) => {
                let _ = out.blocking_send(ReaderOutput::Failed(e));
                return;
            }
        }
    }
}

/// Sink lag: records in the log past the positions, summed over the assignment.
fn update_lag(setup: &SinkSetup, log: &Log, positions: &[Position]) {
    let lag: i64 = positions
        .iter()
        .map(|p| {
            log.last_stable_offset(&p.tp.topic, p.tp.partition)
                .map(|end| (end - p.next).max(0))
                .unwrap_or(0)
        })
        .sum();
    setup.shared.sink_lag_records.store(lag, Ordering::Relaxed);
}

async fn wait_for_any(log: &Log, positions: &[Position]) {
    if positions.is_empty() {
        tokio::time::sleep(IDLE_WAIT).await;
        return;
    }
    let waits = positions.iter().map(|p| {
        Box::pin(log.wait_for(
            &p.tp.topic,
            p.tp.partition,
            p.next,
            IDLE_WAIT,
            Isolation::ReadCommitted,
        ))
    });
    let _ = futures_util::future::select_all(waits).await;
}

/// Reads the next batch: partitions in turn from `cursor`, until the batch is full or every
/// partition is caught up. `None` when nothing new was read.
fn read_batch(
    setup: &ReadContext,
    log: &Log,
    positions: &mut [Position],
    cursor: &mut usize,
) -> Result<Option<SinkBatch>, ConnectError> {
    if positions.is_empty() {
        return Ok(None);
    }
    let mut batch = SinkBatch::default();
    let mut bytes = 0usize;
    let mut idle_rounds = 0usize;
    // Local copies of the positions so a partly filled batch only moves what it covers.
    let mut next: Vec<i64> = positions.iter().map(|p| p.next).collect();
    while batch.records.len() < MAX_BATCH_RECORDS && bytes < MAX_BATCH_BYTES {
        if idle_rounds >= positions.len() {
            break;
        }
        let i = *cursor % positions.len();
        *cursor = (*cursor + 1) % positions.len();
        let tp = &positions[i].tp;
        let from = next[i];
        let end = log
            .last_stable_offset(&tp.topic, tp.partition)
            .map_err(log_error)?;
        if from >= end {
            idle_rounds += 1;
            continue;
        }
        let read = match log.read_with(
            &tp.topic,
            tp.partition,
            from,
            READ_BYTES,
            Isolation::ReadCommitted,
        ) {
            Ok(r) => r,
            Err(LogError::OffsetOutOfRange { log_start, .. }) if from < log_start => {
                tracing::warn!(connector = %setup.connector, partition = %tp, offset = from, log_start, "records removed by retention before the sink read them; continuing at the start offset");
                next[i] = log_start;
                continue;
            }
            Err(e) => return Err(log_error(e)),
        };
        let Some(after) = read.next_offset().map_err(log_error)? else {
            idle_rounds += 1;
            continue;
        };
        idle_rounds = 0;
        bytes += read.bytes.len();
        let mut polled = 0u64;
        read.for_each_record(from, |r| -> Result<(), ReadError> {
            polled += 1;
            if let Some(rec) = convert(setup, tp, r).map_err(ReadError::Convert)? {
                batch.records.push(rec);
            }
            Ok(())
        })
        .map_err(|e| match e {
            ReadError::Log(e) => log_error(e),
            ReadError::Convert(e) => e,
        })?;
        setup
            .shared
            .records_polled
            .fetch_add(polled, Ordering::Relaxed);
        // Whole batches below the last stable offset were read: continue after the last one.
        next[i] = after;
    }
    for (i, p) in positions.iter().enumerate() {
        if next[i] != p.next {
            batch.next_offsets.push((p.tp.clone(), next[i]));
        }
    }
    if batch.next_offsets.is_empty() {
        return Ok(None);
    }
    Ok(Some(batch))
}

/// A failure while walking a read's records.
enum ReadError {
    Log(LogError),
    Convert(ConnectError),
}

impl From<LogError> for ReadError {
    fn from(e: LogError) -> Self {
        ReadError::Log(e)
    }
}

/// Bytes to Connect data, then the transform chain; `None` when a transform dropped it or the
/// record failed under `errors.tolerance=all`.
fn convert(
    setup: &ReadContext,
    tp: &TopicPartition,
    r: headwater_log::batch::RecordView<'_>,
) -> Result<Option<SinkRecord>, ConnectError> {
    let converted = (|| -> Result<Option<SinkRecord>, ConnectError> {
        let key = setup
            .converters
            .key
            .to_connect_data(&tp.topic, r.key)
            .map_err(|e| ConnectError::data(format!("key converter: {e}")))?;
        let value = match &setup.value_fields {
            Some(fields) => setup
                .converters
                .value
                .to_connect_data_reading(&tp.topic, r.value, fields),
            None => setup.converters.value.to_connect_data(&tp.topic, r.value),
        }
        .map_err(|e| ConnectError::data(format!("value converter: {e}")))?;
        let mut headers = Headers::default();
        for (k, v) in &r.headers {
            let v = match v {
                None => Value::Null,
                Some(b) => match std::str::from_utf8(b) {
                    Ok(s) => Value::String(s.to_owned()),
                    Err(_) => Value::Bytes(b.to_vec()),
                },
            };
            headers.add(*k, Some(headwater_api::Schema::optional_string()), v);
        }
        let mut source = SourceRecord::new(
            OffsetMap::new(),
            OffsetMap::new(),
            tp.topic.clone(),
            key.schema,
            key.value,
            value.schema,
            value.value,
        );
        source.kafka_partition = Some(tp.partition as i32);
        source.timestamp = Some(r.timestamp);
        source.headers = headers;
        let Some(out) = setup.chain.apply(source)? else {
            return Ok(None);
        };
        Ok(Some(SinkRecord {
            topic: out.topic,
            original_topic: tp.topic.clone(),
            partition: tp.partition,
            offset: r.offset,
            timestamp: out.timestamp.unwrap_or(r.timestamp),
            key_schema: out.key_schema,
            key: out.key,
            value_schema: out.value_schema,
            value: out.value,
            headers: out.headers,
        }))
    })();
    match converted {
        Ok(r) => Ok(r),
        Err(e) if setup.errors_tolerance_all && !e.is_retriable() => {
            if setup.errors_log {
                tracing::warn!(connector = %setup.connector, partition = %tp, offset = r.offset, error = %e, "skipping a record that failed (errors.tolerance=all)");
            }
            Ok(None)
        }
        Err(e) => Err(ConnectError::fatal(format!(
            "record at {tp} offset {}: {e}",
            r.offset
        ))),
    }
}

/// Stores the offsets after a put (one log transaction) and in memory.
async fn store(
    setup: &SinkSetup,
    next_offsets: &[(TopicPartition, i64)],
) -> Result<(), ConnectError> {
    if next_offsets.is_empty() {
        return Ok(());
    }
    let log = setup.topics.log();
    let mut txn = log.begin_transaction().map_err(log_error)?;
    let entries: Vec<(OffsetMap, OffsetMap)> = next_offsets
        .iter()
        .map(|(tp, o)| (sink_partition_map(tp), sink_offset_map(*o)))
        .collect();
    for (partition, offset) in &entries {
        let (p, b) = offsets_batch(
            &setup.connector,
            partition,
            Some(offset),
            txn.producer_fields(),
        );
        txn.append_builder(OFFSETS_TOPIC, p, b).map_err(log_error)?;
    }
    txn.commit_async().await.map_err(log_error)?;
    crate::runner::store_offsets(&setup.offsets, &setup.connector, &entries);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_listed_alias_counts_as_transforms() {
        let props = |v: Option<&str>| {
            let mut p = Properties::new();
            if let Some(v) = v {
                p.insert("transforms".into(), v.into());
            }
            p
        };
        assert!(!has_transforms(&props(None)));
        assert!(!has_transforms(&props(Some(""))));
        assert!(!has_transforms(&props(Some(" , "))));
        assert!(has_transforms(&props(Some("unwrap"))));
        assert!(has_transforms(&props(Some(" ,route"))));
    }
}
