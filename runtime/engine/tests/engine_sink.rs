//! Sink tasks in the engine, with the datagen source writing the topic and a sink plugin of
//! this test that keeps what it is given (the destination here is the test itself):
//! every committed record is put once, in offset order; sink offsets are stored in Kafka
//! Connect's form and a restarted engine resumes after them; a sink that keeps its own offsets
//! (exactly-once) is resumed from those; `topics` / `topics.regex` are validated.

mod common;

use common::{futures_lite_block, wait_for};

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use headwater_api::plugin::BoxFuture;
use headwater_api::{
    ConfigDef, ConnectError, OffsetValue, Properties, SinkBatch, SinkConnector, SinkTask,
    SinkTaskContext, TopicPartition,
};
use headwater_engine::{Engine, EngineConfig, Plugins, State, TargetState};
use headwater_log::{Log, LogOptions};

/// What the test sink was given: (topic, partition, offset, seq), and its own offsets.
#[derive(Default)]
struct Destination {
    rows: Vec<(String, u32, i64, i64)>,
    offsets: BTreeMap<TopicPartition, i64>,
    /// Whether it reports its offsets to the engine (exactly-once mode).
    keeps_offsets: bool,
}

struct CollectingSink(Arc<Mutex<Destination>>);
struct CollectingTask(Arc<Mutex<Destination>>);

impl SinkConnector for CollectingSink {
    fn version(&self) -> String {
        "test".into()
    }
    fn config_def(&self) -> ConfigDef {
        ConfigDef::new()
    }
    fn task_configs(&self, _: &Properties, _: usize) -> Result<Vec<Properties>, ConnectError> {
        Ok(vec![Properties::new()])
    }
    fn create_task(&self) -> Box<dyn SinkTask> {
        Box::new(CollectingTask(self.0.clone()))
    }
}

impl SinkTask for CollectingTask {
    fn start(
        &mut self,
        _: SinkTaskContext,
        _: Properties,
    ) -> BoxFuture<'_, Result<(), ConnectError>> {
        Box::pin(async { Ok(()) })
    }
    fn stored_offsets<'a>(
        &'a mut self,
        partitions: &'a [TopicPartition],
    ) -> BoxFuture<'a, Result<Vec<(TopicPartition, i64)>, ConnectError>> {
        Box::pin(async move {
            let d = self.0.lock().unwrap();
            if !d.keeps_offsets {
                return Ok(Vec::new());
            }
            Ok(partitions
                .iter()
                .filter_map(|tp| d.offsets.get(tp).map(|o| (tp.clone(), *o)))
                .collect())
        })
    }
    fn put(&mut self, batch: SinkBatch) -> BoxFuture<'_, Result<(), ConnectError>> {
        Box::pin(async move {
            let mut d = self.0.lock().unwrap();
            for r in &batch.records {
                let seq = match r.value.as_struct().and_then(|s| s.get("seq")) {
                    Some(headwater_api::Value::Int64(v)) => *v,
                    other => panic!("seq: {other:?}"),
                };
                d.rows.push((r.topic.clone(), r.partition, r.offset, seq));
            }
            for (tp, o) in batch.next_offsets {
                d.offsets.insert(tp, o);
            }
            Ok(())
        })
    }
    fn stop(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

fn plugins(dest: Arc<Mutex<Destination>>) -> Plugins {
    Plugins::new()
        .register_source(headwater_connector_datagen::CLASS, &["datagen"], || {
            Box::new(headwater_connector_datagen::DatagenConnector)
        })
        .register_sink("test.CollectingSinkConnector", &["collect"], move || {
            Box::new(CollectingSink(dest.clone()))
        })
}

use headwater_api::properties as props;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_gets_every_record_once_in_order_and_resumes_after_its_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let dest = Arc::new(Mutex::new(Destination::default()));
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    let engine = Engine::start(log.clone(), plugins(dest.clone()), EngineConfig::default())
        .await
        .unwrap();
    engine
        .create_connector(
            "gen",
            props(&[
                ("connector.class", "datagen"),
                ("kafka.topic", "gen.events"),
                ("iterations", "1000"),
                ("records.per.second", "0"),
                ("batch.size", "37"),
            ]),
            TargetState::Started,
        )
        .await
        .unwrap();
    // Created before its topic exists: it waits, then consumes.
    let info = engine
        .create_connector(
            "sink",
            props(&[("connector.class", "collect"), ("topics", "gen.events")]),
            TargetState::Started,
        )
        .await
        .unwrap();
    assert_eq!(info.connector_type, "sink");
    wait_for(|| dest.lock().unwrap().rows.len() >= 1000).await;
    {
        let d = dest.lock().unwrap();
        let seqs: Vec<i64> = d.rows.iter().map(|r| r.3).collect();
        assert_eq!(seqs, (0..1000).collect::<Vec<_>>(), "once each, in order");
        assert!(d.rows.windows(2).all(|w| w[0].2 < w[1].2), "offset order");
    }
    let status = engine.status("sink").await.unwrap();
    assert_eq!(status.connector_type, "sink");
    assert_eq!(status.tasks[0].state, State::Running);
    // Offsets as Kafka Connect reports a sink's: past every record (and the commit markers).
    let end = log.latest_offset("gen.events", 0).unwrap();
    wait_for(|| {
        let offsets = futures_lite_block(engine.offsets("sink")).unwrap();
        offsets.iter().any(|(p, o)| {
            p.get("kafka_topic") == Some(&OffsetValue::String("gen.events".into()))
                && p.get("kafka_partition") == Some(&OffsetValue::Int(0))
                && o.get("kafka_offset") == Some(&OffsetValue::Int(end))
        })
    })
    .await;
    engine.shutdown().await;
    drop(engine);
    log.close().unwrap();
    drop(log);

    // Restart: nothing is delivered again.
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    let engine = Engine::start(log.clone(), plugins(dest.clone()), EngineConfig::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        dest.lock().unwrap().rows.len(),
        1000,
        "no redelivery after a restart"
    );
    assert_eq!(
        engine.status("sink").await.unwrap().tasks[0].state,
        State::Running
    );

    // Pause: nothing is put while paused; resume: the rest arrives.
    engine
        .set_target("sink", TargetState::Paused)
        .await
        .unwrap();
    wait_for(|| {
        futures_lite_block(engine.status("sink"))
            .is_ok_and(|s| s.tasks.first().is_some_and(|t| t.state == State::Paused))
    })
    .await;
    engine
        .create_connector(
            "gen2",
            props(&[
                ("connector.class", "datagen"),
                ("kafka.topic", "gen.events"),
                ("iterations", "100"),
                ("records.per.second", "0"),
            ]),
            TargetState::Started,
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        dest.lock().unwrap().rows.len(),
        1000,
        "a paused sink puts nothing"
    );
    engine
        .set_target("sink", TargetState::Started)
        .await
        .unwrap();
    wait_for(|| dest.lock().unwrap().rows.len() == 1100).await;

    // A sink that keeps its own offsets is resumed from them (here: it says 700).
    {
        let mut d = dest.lock().unwrap();
        d.rows.clear();
        d.keeps_offsets = true;
        d.offsets.insert(TopicPartition::new("gen.events", 0), 700);
    }
    engine
        .create_connector(
            "sink2",
            props(&[("connector.class", "collect"), ("topics.regex", "gen\\..*")]),
            TargetState::Started,
        )
        .await
        .unwrap();
    wait_for(|| !dest.lock().unwrap().rows.is_empty()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    {
        let d = dest.lock().unwrap();
        assert!(
            d.rows.iter().all(|r| r.2 >= 700),
            "resumed at the destination's offset"
        );
        assert_eq!(d.rows.first().map(|r| r.2), Some(700));
    }
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sink_subscriptions_are_validated() {
    let dir = tempfile::tempdir().unwrap();
    let dest = Arc::new(Mutex::new(Destination::default()));
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    let engine = Engine::start(log, plugins(dest), EngineConfig::default())
        .await
        .unwrap();
    for (config, key, message) in [
        (
            props(&[("connector.class", "collect")]),
            "topics",
            "Must configure one of topics or topics.regex",
        ),
        (
            props(&[
                ("connector.class", "collect"),
                ("topics", "a"),
                ("topics.regex", "b"),
            ]),
            "topics.regex",
            "mutually exclusive",
        ),
        (
            props(&[("connector.class", "collect"), ("topics.regex", "(")]),
            "topics.regex",
            "Invalid regex",
        ),
    ] {
        let report = engine.validate(&config).unwrap();
        let by_field = report.validation.errors_by_field();
        let errors = by_field.get(key).copied().unwrap_or_default();
        assert!(
            errors.iter().any(|e| e.contains(message)),
            "{key}: {errors:?}"
        );
    }
}
