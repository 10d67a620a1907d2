//! The engine end to end with the datagen source: records land in the log exactly once and in
//! order, offsets are committed with them, lifecycle operations work, and a restarted engine
//! resumes each connector in its stored state from its committed offsets.

mod common;

use common::{futures_lite_block, wait_for};

use std::time::Duration;

use headwater_api::Properties;
use headwater_engine::{Engine, EngineConfig, Plugins, State, TargetState};
use headwater_log::{Isolation, Log, LogOptions};

fn plugins() -> Plugins {
    Plugins::new().register_source(headwater_connector_datagen::CLASS, &["datagen"], || {
        Box::new(headwater_connector_datagen::DatagenConnector)
    })
}

fn config(topic: &str, iterations: u32, rate: u32) -> Properties {
    [
        ("connector.class", "datagen".to_string()),
        ("kafka.topic", topic.to_string()),
        ("iterations", iterations.to_string()),
        ("records.per.second", rate.to_string()),
        ("batch.size", "50".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// `seq` values of every committed record in the topic, in offset order.
fn seqs(log: &Log, topic: &str) -> Vec<i64> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let r = log
            .read_with(topic, 0, offset, 1 << 20, Isolation::ReadCommitted)
            .unwrap();
        let Some(next) = r.next_offset().unwrap() else {
            break;
        };
        for rec in r.records(offset).unwrap() {
            let v: serde_json::Value = serde_json::from_slice(&rec.value.unwrap()).unwrap();
            out.push(v["payload"]["seq"].as_i64().unwrap());
        }
        offset = next;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datagen_records_arrive_exactly_once_and_survive_restart() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    let engine = Engine::start(log.clone(), plugins(), EngineConfig::default())
        .await
        .unwrap();
    let info = engine
        .create_connector("gen", config("gen.events", 1000, 0), TargetState::Started)
        .await
        .unwrap();
    assert_eq!(info.connector_type, "source");
    assert_eq!(info.config.get("name").map(String::as_str), Some("gen"));
    wait_for(|| {
        log.partition_count("gen.events").is_some() && seqs(&log, "gen.events").len() == 1000
    })
    .await;
    assert_eq!(seqs(&log, "gen.events"), (0..1000).collect::<Vec<_>>());
    let status = engine.status("gen").await.unwrap();
    assert_eq!(status.connector.state, State::Running);
    assert_eq!(status.tasks[0].state, State::Running);
    let offsets = engine.offsets("gen").await.unwrap();
    assert_eq!(
        offsets[0].1.get("seq"),
        Some(&headwater_api::OffsetValue::Int(999))
    );
    assert_eq!(engine.active_topics("gen").await.unwrap(), ["gen.events"]);

    // A second, slow connector, paused before the restart.
    engine
        .create_connector(
            "slow",
            config("slow.events", 1_000_000, 200),
            TargetState::Started,
        )
        .await
        .unwrap();
    wait_for(|| {
        log.partition_count("slow.events").is_some() && !seqs(&log, "slow.events").is_empty()
    })
    .await;
    engine
        .set_target("slow", TargetState::Paused)
        .await
        .unwrap();
    wait_for(|| {
        futures_lite_block(engine.status("slow"))
            .is_ok_and(|s| s.tasks.first().is_some_and(|t| t.state == State::Paused))
    })
    .await;
    let paused_at = seqs(&log, "slow.events");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        seqs(&log, "slow.events"),
        paused_at,
        "a paused connector writes nothing"
    );

    engine.shutdown().await;
    drop(engine);
    log.close().unwrap();
    drop(log);

    // Restart: "gen" continues after seq 999 (nothing more to do), "slow" comes back paused.
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    let engine = Engine::start(log.clone(), plugins(), EngineConfig::default())
        .await
        .unwrap();
    assert_eq!(engine.connector_names().await, ["gen", "slow"]);
    assert_eq!(
        engine.status("slow").await.unwrap().connector.state,
        State::Paused
    );
    engine
        .set_target("slow", TargetState::Started)
        .await
        .unwrap();
    let before = seqs(&log, "slow.events").len();
    wait_for(|| seqs(&log, "slow.events").len() > before + 5).await;
    let slow = seqs(&log, "slow.events");
    assert_eq!(
        slow,
        (0..slow.len() as i64).collect::<Vec<_>>(),
        "no gap, no duplicate after restart"
    );
    assert_eq!(seqs(&log, "gen.events").len(), 1000);

    // Stop, alter offsets, resume: generation restarts from the altered position.
    engine
        .set_target("gen", TargetState::Stopped)
        .await
        .unwrap();
    assert_eq!(
        engine.status("gen").await.unwrap().connector.state,
        State::Stopped
    );
    engine.reset_offsets("gen").await.unwrap();
    assert!(engine.offsets("gen").await.unwrap().is_empty());
    engine.delete_connector("gen").await.unwrap();
    assert!(engine.status("gen").await.is_err());
    engine.shutdown().await;
}

/// Config updates and restarts that overlap each other end with one set of tasks: after the
/// connector is deleted, nothing writes to its topic any more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_updates_and_restarts_leave_no_task_running_unseen() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    let engine = Engine::start(log.clone(), plugins(), EngineConfig::default())
        .await
        .unwrap();
    engine
        .create_connector(
            "gen",
            config("gen.race", 1_000_000, 500),
            TargetState::Started,
        )
        .await
        .unwrap();
    wait_for(|| log.latest_offset("gen.race", 0).is_ok_and(|o| o > 0)).await;
    for round in 0..3 {
        let mut calls = Vec::new();
        for i in 0..6 {
            let engine = engine.clone();
            calls.push(tokio::spawn(async move {
                if i % 2 == 0 {
                    let rate = 400 + round * 10 + i;
                    engine
                        .put_connector_config("gen", config("gen.race", 1_000_000, rate))
                        .await
                        .map(|_| ())
                } else {
                    engine.restart("gen", true, false).await.map(|_| ())
                }
            }));
        }
        for call in calls {
            call.await.unwrap().unwrap();
        }
    }
    let status = engine.status("gen").await.unwrap();
    assert_eq!(status.tasks.len(), 1);
    engine.delete_connector("gen").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after_delete = log.latest_offset("gen.race", 0).unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        log.latest_offset("gen.race", 0).unwrap(),
        after_delete,
        "a task of the deleted connector is still writing"
    );
}
