//! Crash test of the MySQL/MariaDB connector through the `headwater` binary against a harness
//! MariaDB, while a writer keeps committing multi-statement transactions of inserts and updates
//! from before the snapshot to the end: the worker is SIGKILLed twice during the chunked,
//! two-reader snapshot of a 100,000-row table (the first time once some chunk progress is
//! committed, so the second run resumes the snapshot in a newer consistent snapshot) and three
//! more times at random moments while streaming.
//!
//! What it proves:
//! - a resumed snapshot neither repeats nor loses rows: rows committed before the kill are not
//!   read again, the rest are read at the newer snapshot, and the stream skips exactly the
//!   changes that newer snapshot already holds;
//! - every committed change is in the topic exactly once and in commit order per key: per key
//!   the events are an `r` (the row's committed state at the snapshot point) or a `c` with
//!   `v = 1`, then `u` events whose `v` rises by exactly one each, ending at the table's value.
//!
//! The writer's updates set `v = v + 1`, so a lost change shows as a gap and a repeated one as
//! a step back; the kill moments come from a seeded PRNG printed at the start for replay.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{http, wait_until, Worker};
use headwater_log::{Isolation, Log, LogOptions};
use headwater_tests::rng::Rng;
use headwater_tests::MariaDbServer;
use mysql_async::prelude::Queryable;
use serde_json::Value;

const ROWS: u64 = 100_000;
const TOPIC: &str = "crash.crash.items";

/// Commits transactions of 1-4 statements (updates of random keys, inserts of new keys) until
/// told to stop; `model` holds each key's committed `v`.
fn writer(server: &MariaDbServer, stop: &AtomicBool, model: &Mutex<HashMap<u64, u64>>, seed: u64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut conn = rt.block_on(server.connect("crash")).unwrap();
    let mut rng = Rng::new(seed);
    let mut next_id = ROWS + 1;
    while !stop.load(Ordering::SeqCst) {
        let mut changed: Vec<(u64, Option<u64>)> = Vec::new();
        let mut sql = String::from("BEGIN;");
        for _ in 0..=rng.below(4) {
            if rng.below(10) < 7 {
                let k = 1 + rng.below(next_id - 1);
                if changed.iter().any(|(c, _)| *c == k) {
                    continue;
                }
                sql.push_str(&format!("UPDATE items SET v = v + 1 WHERE id = {k};"));
                changed.push((k, None));
            } else {
                sql.push_str(&format!(
                    "INSERT INTO items VALUES ({next_id}, 1, 'inserted');"
                ));
                changed.push((next_id, Some(1)));
                next_id += 1;
            }
        }
        sql.push_str("COMMIT;");
        rt.block_on(conn.query_drop(&sql))
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let mut m = model.lock().unwrap();
        for (k, set) in changed {
            match set {
                Some(v) => {
                    m.insert(k, v);
                }
                None => *m.entry(k).or_insert(0) += 1,
            }
        }
        drop(m);
        std::thread::sleep(Duration::from_millis(1 + rng.below(3)));
    }
    rt.block_on(conn.disconnect()).unwrap();
}

/// The binlog position as one ordered number (file sequence number high, position low).
fn position(file: &str, pos: u64) -> u64 {
    let seq = file
        .rsplit_once('.')
        .and_then(|(_, n)| n.parse::<u64>().ok())
        .unwrap_or(0);
    (seq << 32) | pos
}

/// The position the connector's committed offset covers (`None` while snapshotting).
fn committed_position(w: &Worker) -> Option<u64> {
    let (status, _, body) = http(w.addr, "GET", "/connectors/crash/offsets", None);
    if status != 200 {
        return None;
    }
    let o = &body["offsets"][0]["offset"];
    if o.get("snapshot").is_some() {
        return None;
    }
    Some(position(o["file"].as_str()?, o["pos"].as_u64()?))
}

/// The key up to which an unfinished snapshot's rows are committed (`None` before any
/// progress or once the snapshot finished).
fn snapshot_progress(w: &Worker) -> Option<i64> {
    let (status, _, body) = http(w.addr, "GET", "/connectors/crash/offsets", None);
    if status != 200 {
        return None;
    }
    let o = &body["offsets"][0]["offset"];
    if o.get("snapshot_completed").is_some() {
        return None;
    }
    o.get("snapshot_after")?.as_i64()
}

/// `(key, op, v)` of every committed record of the topic, read from a stopped worker's log.
fn events(data: &Path) -> Vec<(u64, String, u64)> {
    let log = Log::open(data.join("log"), LogOptions::default()).expect("open the log");
    let mut out = Vec::new();
    for p in 0..log.partition_count(TOPIC).unwrap_or(0) {
        let mut offset = log.earliest_offset(TOPIC, p).unwrap();
        loop {
            let r = log
                .read_with(TOPIC, p, offset, 4 << 20, Isolation::ReadCommitted)
                .unwrap();
            let Some(next) = r.next_offset().unwrap() else {
                break;
            };
            for rec in r.records(offset).unwrap() {
                let key: Value = serde_json::from_slice(&rec.key.unwrap()).unwrap();
                let value: Value = serde_json::from_slice(&rec.value.expect("no deletes")).unwrap();
                let payload = &value["payload"];
                out.push((
                    key["payload"]["id"].as_u64().unwrap(),
                    payload["op"].as_str().unwrap().to_owned(),
                    payload["after"]["v"].as_u64().unwrap(),
                ));
            }
            offset = next;
        }
    }
    log.close().expect("close the log");
    out
}

#[test]
fn sigkill_during_snapshot_and_streaming_loses_and_repeats_nothing() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("seed {seed}");
    let mut rng = Rng::new(seed);
    let server = Arc::new(MariaDbServer::start().expect("MariaDB"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(server.create_database("crash")).unwrap();
    let mut db = rt.block_on(server.connect("crash")).unwrap();
    rt.block_on(db.query_drop(format!(
        "CREATE TABLE items (id bigint PRIMARY KEY, v bigint NOT NULL, note varchar(64));
         INSERT INTO items SELECT seq, 0, 'loaded' FROM seq_1_to_{ROWS};"
    )))
    .unwrap();
    let model: Arc<Mutex<HashMap<u64, u64>>> =
        Arc::new(Mutex::new((1..=ROWS).map(|k| (k, 0)).collect()));

    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let file = tmp.path().join("crash.json");
    std::fs::write(
        &file,
        serde_json::json!({"name": "crash", "config": {
            "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
            "database.hostname": "127.0.0.1", "database.port": server.port().to_string(),
            "database.user": "root", "database.server.id": "5401", "topic.prefix": "crash",
            "database.include.list": "crash", "table.include.list": "crash.items",
            "poll.interval.ms": "100", "snapshot.chunk.rows": "20000",
            "snapshot.max.threads": "2"}})
        .to_string(),
    )
    .unwrap();

    // The writer runs from before the snapshot to the end.
    let stop = Arc::new(AtomicBool::new(false));
    let writer_thread = {
        let (server, stop, model) = (server.clone(), stop.clone(), model.clone());
        let seed = rng.next_u64();
        std::thread::spawn(move || writer(&server, &stop, &model, seed))
    };

    // Two kills while the snapshot runs: the first once some of it is committed, so the
    // second run resumes it.
    let mut resumed = false;
    for round in 0..2 {
        let w = Worker::start(&data, &[&file]);
        wait_until("the snapshot to start", Duration::from_secs(30), || {
            w.logs()
                .iter()
                .any(|l| l.contains("snapshot started") || l.contains("resuming snapshot"))
        });
        resumed |= w.logs().iter().any(|l| l.contains("resuming snapshot"));
        if round == 0 {
            wait_until("snapshot progress", Duration::from_secs(60), || {
                snapshot_progress(&w).is_some()
            });
            std::thread::sleep(Duration::from_millis(rng.below(100)));
        } else {
            std::thread::sleep(Duration::from_millis(50 + rng.below(250)));
        }
        let completed = w.logs().iter().any(|l| l.contains("snapshot finished"));
        eprintln!("snapshot kill {round}: snapshot finished before the kill: {completed}");
        w.sigkill();
    }
    assert!(resumed, "the second run resumed the snapshot");

    // Streaming under the writer, killed three times at random moments.
    for round in 0..3 {
        let w = Worker::start(&data, &[&file]);
        let started = Instant::now();
        wait_until("the connector to commit", Duration::from_secs(60), || {
            committed_position(&w).is_some() || started.elapsed() > Duration::from_secs(5)
        });
        std::thread::sleep(Duration::from_millis(300 + rng.below(1200)));
        eprintln!("stream kill {round}");
        w.sigkill();
    }
    stop.store(true, Ordering::SeqCst);
    writer_thread.join().unwrap();

    // The last run catches up with everything committed, then stops cleanly.
    let status: mysql_async::Row = rt
        .block_on(db.query_first("SHOW MASTER STATUS"))
        .unwrap()
        .unwrap();
    let end = position(&status.get::<String, _>(0).unwrap(), status.get(1).unwrap());
    let w = Worker::start(&data, &[&file]);
    wait_until("the stream to catch up", Duration::from_secs(120), || {
        committed_position(&w).is_some_and(|p| p >= end)
    });
    w.sigterm();

    let mut per_key: HashMap<u64, Vec<(String, u64)>> = HashMap::new();
    for (k, op, v) in events(&data) {
        per_key.entry(k).or_default().push((op, v));
    }
    let model = model.lock().unwrap();
    assert_eq!(per_key.len(), model.len(), "every key has events");
    for (k, want) in model.iter() {
        let evs = &per_key[k];
        let (first_op, first_v) = &evs[0];
        match first_op.as_str() {
            "r" => {}
            "c" => assert_eq!(*first_v, 1, "key {k}: a create carries v = 1: {evs:?}"),
            other => panic!("key {k}: first event {other}: {evs:?}"),
        }
        for pair in evs.windows(2) {
            assert_eq!(pair[1].0, "u", "key {k}: one r/c, then updates: {evs:?}");
            assert_eq!(
                pair[1].1,
                pair[0].1 + 1,
                "key {k}: updates exactly once, in order: {evs:?}"
            );
        }
        assert_eq!(
            evs.last().unwrap().1,
            *want,
            "key {k}: final state: {evs:?}"
        );
    }
}
