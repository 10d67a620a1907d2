//! The runner's batch contract with a scripted source (no database): records with empty offsets
//! are covered by the last record's offset, and a batch that says `caught_up` is committed
//! before the next poll (no linger); a transaction spilled to the log before its commit is
//! counted whole in the task's metrics. `errors.max.retries` fails a task after that many
//! restarts in a row after retriable errors; a run that hands out records ends the row.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use headwater_api::config::ConfigDef;
use headwater_api::plugin::BoxFuture;
use headwater_api::{
    ConnectError, OffsetMap, OffsetValue, Properties, Schema, SourceBatch, SourceConnector,
    SourceRecord, SourceTask, SourceTaskContext, Value,
};
use headwater_engine::{Engine, EngineConfig, Plugins, State, TargetState};
use headwater_log::{Log, LogOptions};

const TOPIC: &str = "scripted.events";

/// What the scripted task saw: offsets handed to `commit`, and for each poll whether a commit
/// had already happened.
#[derive(Default)]
struct Seen {
    commits: Vec<Vec<(OffsetMap, OffsetMap)>>,
    commits_before_poll: Vec<usize>,
}

fn partition() -> OffsetMap {
    [("script".to_owned(), OffsetValue::String("one".into()))]
        .into_iter()
        .collect()
}

fn record(value: &str, offset: Option<i64>) -> SourceRecord {
    let offset = offset
        .map(|n| {
            [("n".to_owned(), OffsetValue::Int(n))]
                .into_iter()
                .collect()
        })
        .unwrap_or_default();
    SourceRecord::new(
        partition(),
        offset,
        TOPIC,
        None,
        Value::Null,
        Some(Schema::string()),
        Value::String(value.into()),
    )
}

struct ScriptedTask {
    seen: Arc<Mutex<Seen>>,
    polls: usize,
}

impl SourceTask for ScriptedTask {
    fn start(
        &mut self,
        _context: SourceTaskContext,
        _props: Properties,
    ) -> BoxFuture<'_, Result<(), ConnectError>> {
        Box::pin(async { Ok(()) })
    }

    fn poll(&mut self) -> BoxFuture<'_, Result<SourceBatch, ConnectError>> {
        Box::pin(async move {
            let commits = self.seen.lock().unwrap().commits.len();
            self.seen.lock().unwrap().commits_before_poll.push(commits);
            self.polls += 1;
            match self.polls {
                // Three records; only the last carries the offset that covers them.
                1 => {
                    let mut batch = SourceBatch::committed(vec![
                        record("a", None),
                        record("b", None),
                        record("c", Some(3)),
                    ]);
                    batch.caught_up = true;
                    Ok(batch)
                }
                // A non-empty batch, so the runner cannot commit for an empty poll: only
                // `caught_up` can have made it commit the first batch before this poll.
                2 => {
                    let mut batch = SourceBatch::committed(vec![record("d", Some(4))]);
                    batch.caught_up = true;
                    Ok(batch)
                }
                _ => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Ok(SourceBatch::empty())
                }
            }
        })
    }

    fn commit<'a>(
        &'a mut self,
        committed: &'a [(OffsetMap, OffsetMap)],
    ) -> BoxFuture<'a, Result<(), ConnectError>> {
        Box::pin(async move {
            self.seen.lock().unwrap().commits.push(committed.to_vec());
            Ok(())
        })
    }

    fn stop(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// A connector with one task, made by `new_task`.
struct OneTaskConnector<F>(F);

impl<F: Fn() -> Box<dyn SourceTask> + Send + Sync> SourceConnector for OneTaskConnector<F> {
    fn version(&self) -> String {
        "test".into()
    }
    fn config_def(&self) -> ConfigDef {
        ConfigDef::new()
    }
    fn task_configs(
        &self,
        props: &Properties,
        _max_tasks: usize,
    ) -> Result<Vec<Properties>, ConnectError> {
        Ok(vec![props.clone()])
    }
    fn create_task(&self) -> Box<dyn SourceTask> {
        (self.0)()
    }
}

/// An engine over a fresh log in `dir` running connector `name` (StringConverter values) whose
/// single task `new_task` makes.
async fn start_connector(
    dir: &std::path::Path,
    name: &'static str,
    new_task: impl Fn() -> Box<dyn SourceTask> + Clone + Send + Sync + 'static,
) -> (Log, Engine) {
    let log = Log::open(dir, LogOptions::default()).unwrap();
    let plugins = Plugins::new().register_source("test.Source", &[name], move || {
        Box::new(OneTaskConnector(new_task.clone()))
    });
    let engine = Engine::start(log.clone(), plugins, EngineConfig::default())
        .await
        .unwrap();
    let props: Properties = [
        ("connector.class".to_owned(), name.to_owned()),
        (
            "value.converter".to_owned(),
            "org.apache.kafka.connect.storage.StringConverter".to_owned(),
        ),
    ]
    .into_iter()
    .collect();
    engine
        .create_connector(name, props, TargetState::Started)
        .await
        .unwrap();
    (log, engine)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_offsets_are_covered_and_caught_up_batches_commit_before_the_next_poll() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (log, engine) = {
        let seen = seen.clone();
        start_connector(dir.path(), "scripted", move || {
            Box::new(ScriptedTask {
                seen: seen.clone(),
                polls: 0,
            })
        })
        .await
    };
    for _ in 0..400 {
        if seen.lock().unwrap().commits.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let (commits, commits_before_poll) = {
        let seen = seen.lock().unwrap();
        (seen.commits.clone(), seen.commits_before_poll.clone())
    };
    assert!(commits.len() >= 2, "both batches committed");
    let want = |n: i64| -> Vec<(OffsetMap, OffsetMap)> {
        vec![(
            partition(),
            [("n".to_owned(), OffsetValue::Int(n))]
                .into_iter()
                .collect(),
        )]
    };
    assert_eq!(
        commits[0],
        want(3),
        "the last record's offset covers the batch"
    );
    assert_eq!(commits[1], want(4));
    assert_eq!(
        commits_before_poll[1], 1,
        "a caught-up batch is committed before the next poll"
    );
    let stored = engine.offsets("scripted").await.unwrap();
    assert_eq!(stored, want(4));
    let mut values = Vec::new();
    let r = log
        .read_with(
            TOPIC,
            0,
            0,
            1 << 20,
            headwater_log::Isolation::ReadCommitted,
        )
        .unwrap();
    for rec in r.records(0).unwrap() {
        values.push(String::from_utf8(rec.value.unwrap()).unwrap());
    }
    assert_eq!(values, ["a", "b", "c", "d"]);
    engine.shutdown().await;
}

/// One source transaction larger than the runner's in-memory commit bound, over two polls:
/// the runner spills the first part to the log mid-transaction, and the task's
/// `records_written` and `bytes_written` metrics count the whole transaction at its commit.
struct BigTransactionTask {
    polls: usize,
}

/// Records and value size of the big transaction (12 MiB, above the 8 MiB spill bound).
const BIG_RECORDS: usize = 48;
const BIG_VALUE: usize = 256 * 1024;

impl SourceTask for BigTransactionTask {
    fn start(
        &mut self,
        _context: SourceTaskContext,
        _props: Properties,
    ) -> BoxFuture<'_, Result<(), ConnectError>> {
        Box::pin(async { Ok(()) })
    }

    fn poll(&mut self) -> BoxFuture<'_, Result<SourceBatch, ConnectError>> {
        Box::pin(async move {
            self.polls += 1;
            let value = "x".repeat(BIG_VALUE);
            match self.polls {
                1 => {
                    let mut batch = SourceBatch::committed(
                        (0..BIG_RECORDS - 1).map(|_| record(&value, None)).collect(),
                    );
                    batch.boundary = headwater_api::Boundary::Open;
                    Ok(batch)
                }
                2 => Ok(SourceBatch::committed(vec![record(&value, Some(1))])),
                _ => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Ok(SourceBatch::empty())
                }
            }
        })
    }

    fn commit<'a>(
        &'a mut self,
        _committed: &'a [(OffsetMap, OffsetMap)],
    ) -> BoxFuture<'a, Result<(), ConnectError>> {
        Box::pin(async { Ok(()) })
    }

    fn stop(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// The Prometheus sample `name{connector="big",task="0"}`.
fn task_metric(text: &str, name: &str) -> Option<u64> {
    let prefix = format!("{name}{{connector=\"big\",task=\"0\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spilled_transaction_counts_all_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (_log, engine) = start_connector(dir.path(), "big", || {
        Box::new(BigTransactionTask { polls: 0 })
    })
    .await;
    let mut written = None;
    for _ in 0..400 {
        let text = engine.prometheus().await;
        if task_metric(&text, "headwater_task_records_written_total") == Some(BIG_RECORDS as u64) {
            written = task_metric(&text, "headwater_task_bytes_written_total");
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let written = written.expect("the transaction committed");
    let values = (BIG_RECORDS * BIG_VALUE) as u64;
    assert!(
        written >= values && written < values + values / 100,
        "bytes_written {written} counts every record of the transaction ({values} value bytes)"
    );
    engine.shutdown().await;
}

/// How each run of a [`FlakyTask`] fails.
#[derive(Clone, Copy)]
enum Flaky {
    /// At start.
    AtStart,
    /// At its second poll, after handing out one record carrying an offset.
    AfterARecord,
    /// At its second poll, after handing out one record without an offset (as a notification).
    AfterANotification,
}

/// A task whose every run fails with a retriable error, as `flaky` says.
struct FlakyTask {
    starts: Arc<std::sync::atomic::AtomicUsize>,
    flaky: Flaky,
    polls: usize,
}

impl SourceTask for FlakyTask {
    fn start(
        &mut self,
        _context: SourceTaskContext,
        _props: Properties,
    ) -> BoxFuture<'_, Result<(), ConnectError>> {
        Box::pin(async move {
            let n = self
                .starts
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            match self.flaky {
                Flaky::AtStart => Err(ConnectError::retriable(format!(
                    "connection refused (start {n})"
                ))),
                _ => Ok(()),
            }
        })
    }

    fn poll(&mut self) -> BoxFuture<'_, Result<SourceBatch, ConnectError>> {
        Box::pin(async move {
            self.polls += 1;
            if self.polls == 1 {
                let n = self.starts.load(std::sync::atomic::Ordering::SeqCst) as i64;
                let offset = matches!(self.flaky, Flaky::AfterARecord).then_some(n);
                let mut batch = SourceBatch::committed(vec![record("x", offset)]);
                batch.caught_up = true;
                Ok(batch)
            } else {
                Err(ConnectError::retriable(format!(
                    "connection refused (poll {n})",
                    n = self.polls
                )))
            }
        })
    }

    fn commit<'a>(
        &'a mut self,
        _committed: &'a [(OffsetMap, OffsetMap)],
    ) -> BoxFuture<'a, Result<(), ConnectError>> {
        Box::pin(async { Ok(()) })
    }

    fn stop(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// An engine (restart backoff 10 ms) running connector `name` with `errors.max.retries`
/// whose task is a [`FlakyTask`]; returns the counter of its starts.
async fn flaky_connector(
    dir: &std::path::Path,
    name: &'static str,
    max_retries: &str,
    flaky: Flaky,
) -> (Log, Engine, Arc<std::sync::atomic::AtomicUsize>) {
    let starts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let log = Log::open(dir, LogOptions::default()).unwrap();
    let counter = starts.clone();
    let plugins = Plugins::new().register_source("test.Flaky", &[name], move || {
        let counter = counter.clone();
        Box::new(OneTaskConnector(move || -> Box<dyn SourceTask> {
            Box::new(FlakyTask {
                starts: counter.clone(),
                flaky,
                polls: 0,
            })
        }))
    });
    let config = EngineConfig {
        task_backoff_initial: Duration::from_millis(10),
        task_backoff_max: Duration::from_millis(10),
        ..EngineConfig::default()
    };
    let engine = Engine::start(log.clone(), plugins, config).await.unwrap();
    let props: Properties = [
        ("connector.class", name),
        (
            "value.converter",
            "org.apache.kafka.connect.storage.StringConverter",
        ),
        ("errors.max.retries", max_retries),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    engine
        .create_connector(name, props, TargetState::Started)
        .await
        .unwrap();
    (log, engine, starts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_max_retries_fails_a_task_that_never_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let (_log, engine, starts) = flaky_connector(dir.path(), "flaky", "2", Flaky::AtStart).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let task = loop {
        let status = engine.status("flaky").await.unwrap();
        if status.tasks[0].state == State::Failed {
            break status.tasks[0].clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still {:?}",
            status.tasks[0].state
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        starts.load(std::sync::atomic::Ordering::SeqCst),
        3,
        "the first run and two retries"
    );
    let trace = task.trace.unwrap_or_default();
    assert!(
        trace.contains("connection refused") && trace.contains("errors.max.retries=2"),
        "{trace}"
    );
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_max_retries_counts_only_restarts_without_progress() {
    let dir = tempfile::tempdir().unwrap();
    let (_log, engine, starts) =
        flaky_connector(dir.path(), "recovering", "1", Flaky::AfterARecord).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while starts.load(std::sync::atomic::Ordering::SeqCst) < 6 {
        assert!(std::time::Instant::now() < deadline, "too few restarts");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = engine.status("recovering").await.unwrap();
    assert_eq!(
        status.tasks[0].state,
        State::Running,
        "each run handed out a record: {:?}",
        status.tasks[0].trace
    );
    engine.shutdown().await;
}

/// A run that hands out only records without a position (notifications) has not recovered:
/// its restarts count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_max_retries_does_not_count_notifications_as_progress() {
    let dir = tempfile::tempdir().unwrap();
    let (_log, engine, starts) =
        flaky_connector(dir.path(), "notifying", "2", Flaky::AfterANotification).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let status = engine.status("notifying").await.unwrap();
        if status.tasks[0].state == State::Failed {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never failed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(starts.load(std::sync::atomic::Ordering::SeqCst), 3);
    engine.shutdown().await;
}
