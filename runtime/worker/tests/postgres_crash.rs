//! Crash test of the PostgreSQL connector through the `headwater` binary: the worker is
//! SIGKILLed twice during the snapshot of a large table and several more times at random
//! moments while streaming, while a writer keeps committing inserts, updates and deletes (now
//! and then a transaction large enough for the server to stream it while it runs).
//!
//! What it proves:
//! - every committed row change is in the topic exactly once and in commit order per key: per
//!   key the events are an optional `r` of some committed state followed by exactly the
//!   writer's later changes (a resumed snapshot neither repeats nor loses a row or a change);
//! - the final state per key equals the table;
//! - `pg_replication_slots.confirmed_flush_lsn` never got ahead of the log: after each kill
//!   (the slot is then frozen) it is compared with the connector's last committed offset read
//!   straight from the log files, and while running it is sampled and compared with the offset
//!   the worker reports. A confirmed position past the committed offset is only accepted when
//!   no captured transaction can lie in between (writer transactions are bracketed by
//!   `pg_current_wal_insert_lsn()` before and after their commit), or
//!   when every change of those in between is in a region a resumed snapshot re-read (the
//!   offset's `snapshot_skip`: such transactions produce no events, their rows are in the `r`
//!   events, so passing them loses nothing).

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use std::time::{Duration, Instant};

use common::{http, wait_until};
use headwater_log::{Isolation, Log, LogOptions};
use headwater_tests::rng::Rng;
use headwater_tests::PostgresServer;
use serde_json::Value;

const ROWS: i64 = 200_000;
const TOPIC: &str = "crash.public.items";
const CONNECTOR: &str = "crash";

/// A `headwater worker` process whose log lines are appended to a file (kept for diagnosis).
struct Worker {
    addr: std::net::SocketAddr,
    child: std::process::Child,
}

impl Worker {
    fn start(data: &Path, file: &Path, log: &Path) -> Worker {
        use std::io::{BufRead, Write};
        // HEADWATER_BIN runs another build of the binary (e.g. a copy taken right after a build
        // in a shared target directory).
        let bin = std::env::var_os("HEADWATER_BIN")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_headwater").into());
        let mut child = std::process::Command::new(bin)
            .arg("worker")
            .arg("--data-dir")
            .arg(data)
            .args([
                "--rest-listen",
                "127.0.0.1:0",
                "--kafka-listen",
                "127.0.0.1:0",
            ])
            .arg(file)
            .env_remove("RUST_LOG")
            .env_remove("HEADWATER_CONFIG")
            .env("HEADWATER_LOG_LEVEL", "info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn headwater");
        let stderr = child.stderr.take().unwrap();
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                let _ = writeln!(out, "{line}");
                if let Some(a) = line
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("rest=http://"))
                {
                    let _ = tx.send(a.to_owned());
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("worker did not start; see {}", log.display()))
            .parse()
            .unwrap();
        Worker { addr, child }
    }

    fn sigkill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    fn sigterm(mut self) {
        // SAFETY: signalling a child we spawned and have not reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(self.child.wait().unwrap().code(), Some(0), "clean shutdown");
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn parse_lsn(s: &str) -> u64 {
    let (hi, lo) = s.split_once('/').expect("an LSN");
    (u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap()
}

/// What the writer committed.
#[derive(Default)]
struct Model {
    /// Per key, its changes in commit order: (`c`|`u`|`d`, the `v` after the change).
    history: HashMap<i64, Vec<(char, Option<i64>)>>,
    /// Per transaction, an LSN before its commit record, one after it, and the keys it
    /// changed.
    txns: Vec<(u64, u64, Vec<i64>)>,
}

/// Commits small transactions of inserts, updates and deletes until `stop`.
fn writer(server: &PostgresServer, stop: &AtomicBool, model: &Mutex<Model>, seed: u64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut client = server.connect("crash").await.expect("writer connects");
        let mut rng = Rng::new(seed);
        let mut live: Vec<i64> = (1..=ROWS).collect();
        let mut value: HashMap<i64, i64> = HashMap::new();
        let mut next_id = 10_000_000i64;
        while !stop.load(Ordering::SeqCst) {
            let tx = client.transaction().await.unwrap();
            let mut changes = Vec::new();
            if rng.below(40) == 0 {
                // Now and then a transaction larger than logical_decoding_work_mem (64 kB here):
                // the server streams it while it runs (see crate streamed buffering).
                let (first, last) = (next_id, next_id + 599);
                next_id += 600;
                tx.execute(
                    "INSERT INTO items SELECT g, 0, repeat('s', 100) FROM generate_series($1::bigint, $2::bigint) g",
                    &[&first, &last],
                )
                .await
                .unwrap();
                for k in first..=last {
                    live.push(k);
                    value.insert(k, 0);
                    changes.push((k, 'c', Some(0)));
                }
            }
            for _ in 0..1 + rng.below(4) {
                match rng.below(10) {
                    0..=4 => {
                        let k = live[rng.below(live.len() as u64) as usize];
                        let v = value.get(&k).copied().unwrap_or(0) + 1;
                        tx.execute("UPDATE items SET v = $2 WHERE id = $1", &[&k, &v])
                            .await
                            .unwrap();
                        value.insert(k, v);
                        changes.push((k, 'u', Some(v)));
                    }
                    5..=7 => {
                        let k = next_id;
                        next_id += 1;
                        tx.execute(
                            "INSERT INTO items VALUES ($1, 0, 'inserted by the writer')",
                            &[&k],
                        )
                        .await
                        .unwrap();
                        live.push(k);
                        value.insert(k, 0);
                        changes.push((k, 'c', Some(0)));
                    }
                    _ => {
                        let i = rng.below(live.len() as u64) as usize;
                        let k = live.swap_remove(i);
                        tx.execute("DELETE FROM items WHERE id = $1", &[&k])
                            .await
                            .unwrap();
                        value.remove(&k);
                        changes.push((k, 'd', None));
                    }
                }
            }
            let lo: String = tx
                .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
                .await
                .unwrap()
                .get(0);
            tx.commit().await.unwrap();
            // The insert position, not pg_current_wal_lsn(): with synchronous_commit=off the
            // write position can still be short of the commit record (even of `lo`).
            let hi: String = client
                .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
                .await
                .unwrap()
                .get(0);
            {
                let mut m = model.lock().unwrap();
                let keys = changes.iter().map(|(k, _, _)| *k).collect();
                for (k, op, v) in changes {
                    m.history.entry(k).or_default().push((op, v));
                }
                m.txns.push((parse_lsn(&lo), parse_lsn(&hi), keys));
            }
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    });
}

/// Sets the flag when dropped (also while unwinding).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Records in the topic as the REST API counts them (the sum of high watermarks).
fn topic_count(w: &Worker) -> i64 {
    let (status, _, body) = http(
        w.addr,
        "GET",
        &format!("/topics/{TOPIC}/partitions/0/records?offset=0&max=1"),
        None,
    );
    if status != 200 {
        return 0;
    }
    body["high_watermark"].as_i64().unwrap_or(0)
}

/// The connector's committed offset as the worker reports it.
fn rest_offset(w: &Worker) -> Option<Value> {
    let (status, _, body) = http(
        w.addr,
        "GET",
        &format!("/connectors/{CONNECTOR}/offsets"),
        None,
    );
    if status != 200 {
        return None;
    }
    body["offsets"]
        .as_array()?
        .first()
        .map(|o| o["offset"].clone())
}

/// The position an offset covers: `lsn_proc` while streaming, the slot's start in a snapshot.
fn covered(offset: &Value) -> (bool, u64) {
    let snapshot = offset.get("snapshot").is_some()
        && offset["snapshot_completed"] != Value::Bool(true)
        && offset["last_snapshot_record"] != Value::Bool(true);
    let lsn = offset
        .get("lsn_proc")
        .filter(|_| !snapshot)
        .or_else(|| offset.get("lsn"))
        .and_then(Value::as_i64)
        .expect("an LSN in the offset");
    (snapshot, lsn as u64)
}

struct Checker {
    model: Arc<Mutex<Model>>,
    samples: usize,
}

impl Checker {
    /// Fails when `confirmed` is past the committed offset and some captured transaction
    /// certainly committed in between (so it would be lost by a restart).
    fn check(&mut self, confirmed: u64, offset: &Value, when: &str) {
        self.samples += 1;
        let (snapshot, lsn) = covered(offset);
        if snapshot {
            assert!(
                confirmed <= lsn,
                "{when}: confirmed_flush_lsn {confirmed:X} is past the snapshot start {lsn:X} while the snapshot is unfinished"
            );
            return;
        }
        if confirmed <= lsn {
            return;
        }
        // A resumed snapshot re-read some keys at a later LSN: a transaction committed before
        // that LSN whose every change is in such a region produces no events (its changes are
        // in the `r` events), so the slot may pass it (see the connector's snapshot_skip).
        let skips: Vec<(Option<i64>, u64)> = offset["snapshot_skip"]
            .as_str()
            .and_then(|t| serde_json::from_str::<Vec<Value>>(t).ok())
            .unwrap_or_default()
            .iter()
            .filter(|r| r[0] == "public.items")
            .filter_map(|r| Some((r[1].as_i64(), r[2].as_i64()? as u64)))
            .collect();
        let skipped = |lo: u64, keys: &[i64]| {
            !keys.is_empty()
                && keys.iter().all(|k| {
                    skips
                        .iter()
                        .any(|(after, at)| lo < *at && after.is_none_or(|a| *k > a))
                })
        };
        let m = self.model.lock().unwrap();
        if let Some((lo, hi, _)) = m
            .txns
            .iter()
            .find(|(lo, hi, keys)| *lo >= lsn && *hi <= confirmed && !skipped(*lo, keys))
        {
            panic!(
                "{when}: confirmed_flush_lsn {confirmed:X} is past the log's committed offset {lsn:X}, and a writer transaction committed in between ({lo:X}..{hi:X}) {offset}"
            );
        }
    }
}

/// A record's key and value bytes.
type KeyValue = (Option<Vec<u8>>, Option<Vec<u8>>);

/// Every committed record of a topic, read from the log files of a stopped worker.
fn read_topic(log: &Log, topic: &str) -> Vec<KeyValue> {
    let mut out = Vec::new();
    for p in 0..log.partition_count(topic).unwrap_or(0) {
        let mut offset = log.earliest_offset(topic, p).unwrap();
        loop {
            let r = log
                .read_with(topic, p, offset, 4 << 20, Isolation::ReadCommitted)
                .unwrap();
            let Some(next) = r.next_offset().unwrap() else {
                break;
            };
            for rec in r.records(offset).unwrap() {
                out.push((rec.key, rec.value));
            }
            offset = next;
        }
    }
    out
}

/// The connector's last committed offset, read from the log files of a killed worker.
fn offset_in_log(data: &Path) -> Option<Value> {
    let log = Log::open(data.join("log"), LogOptions::default()).expect("open the log");
    let wanted = serde_json::json!([CONNECTOR, {"server": "crash"}]);
    let mut last = None;
    for (k, v) in read_topic(&log, "connect-offsets") {
        let key: Value = serde_json::from_slice(&k.unwrap_or_default()).unwrap_or(Value::Null);
        if key == wanted {
            last = v.map(|v| serde_json::from_slice::<Value>(&v).unwrap());
        }
    }
    log.close().expect("close the log");
    last
}

#[test]
fn sigkill_during_snapshot_and_streaming_loses_and_repeats_nothing() {
    let started = Instant::now();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = PostgresServer::start().expect("PostgreSQL");
    rt.block_on(server.create_database("crash")).unwrap();
    let pg = rt.block_on(server.connect("crash")).unwrap();
    // Large writer transactions are streamed to the connector while they run.
    for sql in [
        "ALTER SYSTEM SET logical_decoding_work_mem = '64kB'",
        "SELECT pg_reload_conf()",
    ] {
        rt.block_on(pg.batch_execute(sql)).unwrap();
    }
    rt.block_on(pg.batch_execute(&format!(
        "CREATE TABLE items (id bigint PRIMARY KEY, v bigint NOT NULL, pad text);
         INSERT INTO items SELECT g, 0, 'initial row ' || g FROM generate_series(1, {ROWS}) g;
         ANALYZE items;"
    )))
    .unwrap();

    let tmp = tempfile::tempdir().unwrap();
    let config = serde_json::json!({"name": CONNECTOR, "config": {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.hostname": "127.0.0.1", "database.port": server.port().to_string(),
        "database.user": "postgres", "database.dbname": "crash", "topic.prefix": "crash",
        "table.include.list": "public.items", "slot.name": "crash_slot",
        "publication.name": "crash_pub", "plugin.name": "pgoutput",
        "snapshot.max.threads": "2", "snapshot.chunk.rows": "20000",
        "key.converter.schemas.enable": "false", "value.converter.schemas.enable": "false"}});
    let file = tmp.path().join("crash.json");
    std::fs::write(&file, config.to_string()).unwrap();
    let data = tmp.path().join("data");
    // The workers' logs, for a failure's diagnosis (HEADWATER_CRASH_LOG keeps them elsewhere).
    let worker_log = std::env::var_os("HEADWATER_CRASH_LOG")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| tmp.path().join("worker.log"));

    let seed = std::env::var("CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("crash test seed {seed} (CRASH_SEED={seed} replays the writer and kill times)");
    let mut rng = Rng::new(seed ^ 0x9E37_79B9_7F4A_7C15);
    let model = Arc::new(Mutex::new(Model::default()));
    let stop = AtomicBool::new(false);
    let samples = std::thread::scope(|scope| {
        let writer_thread = scope.spawn(|| writer(&server, &stop, &model, seed));
        // A failing assertion must stop the writer too, or the scope never ends.
        let _stop_writer = StopOnDrop(&stop);
        let confirmed_flush = || -> Option<u64> {
            rt.block_on(pg.query_opt(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'crash_slot'",
            &[],
        ))
        .unwrap()
        .and_then(|r| r.get::<_, Option<String>>(0))
        .map(|s| parse_lsn(&s))
        };
        let mut checker = Checker {
            model: model.clone(),
            samples: 0,
        };
        let sample = |w: &Worker, checker: &mut Checker| {
            let Some(c) = confirmed_flush() else {
                return;
            };
            if let Some(o) = rest_offset(w) {
                checker.check(c, &o, "while running");
            }
        };
        let kill = |w: Worker, checker: &mut Checker, what: &str| {
            w.sigkill();
            // Wait for the walsender to notice, so the slot is frozen.
            wait_until("the slot to be released", Duration::from_secs(20), || {
                rt.block_on(pg.query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'crash_slot' AND active",
                &[],
            ))
            .unwrap()
            .get::<_, i64>(0)
                == 0
            });
            let c = confirmed_flush();
            match (c, offset_in_log(&data)) {
                (Some(c), Some(o)) => checker.check(c, &o, what),
                (Some(c), None) => {
                    panic!("{what}: slot confirmed {c:X} but no offset is committed")
                }
                (None, _) => {}
            }
        };

        // Two kills during the snapshot; the second one interrupts the resumed snapshot.
        for (i, share) in [(1, 0.25), (2, 0.6)] {
            let w = Worker::start(&data, &file, &worker_log);
            let target = (ROWS as f64 * share) as i64;
            let deadline = Instant::now() + Duration::from_secs(120);
            while topic_count(&w) < target {
                assert!(Instant::now() < deadline, "snapshot too slow");
                sample(&w, &mut checker);
                std::thread::sleep(Duration::from_millis(20));
            }
            kill(w, &mut checker, &format!("kill {i} (snapshot)"));
        }
        // Several kills at random moments while streaming (the first run finishes the
        // snapshot first).
        for i in 3..=6 {
            let w = Worker::start(&data, &file, &worker_log);
            if i == 3 {
                wait_until("the end of the snapshot", Duration::from_secs(120), || {
                    sample(&w, &mut checker);
                    rest_offset(&w).is_some_and(|o| !covered(&o).0)
                });
            }
            let wait = Duration::from_millis(300 + rng.below(2200));
            let until = Instant::now() + wait;
            while Instant::now() < until {
                sample(&w, &mut checker);
                std::thread::sleep(Duration::from_millis(50));
            }
            kill(w, &mut checker, &format!("kill {i} (after {wait:?})"));
        }
        stop.store(true, Ordering::SeqCst);
        writer_thread.join().unwrap();
        let last_lo = model.lock().unwrap().txns.last().unwrap().0;
        let w = Worker::start(&data, &file, &worker_log);
        wait_until(
            "every writer transaction in the log",
            Duration::from_secs(120),
            || {
                sample(&w, &mut checker);
                rest_offset(&w).is_some_and(|o| {
                    let (snapshot, lsn) = covered(&o);
                    !snapshot && lsn > last_lo
                })
            },
        );
        w.sigterm();
        checker.samples
    });

    // Per key: the events, in log order.
    let log = Log::open(data.join("log"), LogOptions::default()).unwrap();
    let records = read_topic(&log, TOPIC);
    log.close().unwrap();
    let mut events: HashMap<i64, Vec<(char, Option<i64>)>> = HashMap::new();
    let mut snapshot_reads = 0usize;
    for (k, v) in &records {
        let key: Value = serde_json::from_slice(k.as_deref().expect("a key")).unwrap();
        let id = key["id"].as_i64().expect("id");
        let Some(v) = v else {
            let last = events.get(&id).and_then(|e| e.last());
            assert_eq!(
                last.map(|e| e.0),
                Some('d'),
                "a tombstone of {id} follows its delete"
            );
            continue;
        };
        let value: Value = serde_json::from_slice(v).unwrap();
        let op = value["op"].as_str().expect("op").chars().next().unwrap();
        snapshot_reads += usize::from(op == 'r');
        let after = value["after"]["v"].as_i64();
        events.entry(id).or_default().push((op, after));
    }
    let model = model.lock().unwrap();
    let empty = Vec::new();
    let mut keys: Vec<i64> = events.keys().copied().collect();
    keys.extend(model.history.keys().copied());
    keys.extend(1..=ROWS);
    keys.sort_unstable();
    keys.dedup();
    let mut changes_checked = 0usize;
    let mut finals: HashMap<i64, i64> = HashMap::new();
    for id in keys {
        let got = events.get(&id).unwrap_or(&empty);
        let history = model.history.get(&id).unwrap_or(&empty);
        let initial = (1..=ROWS).contains(&id);
        // States the key went through: index i = after i changes.
        let mut states: Vec<Option<i64>> = vec![if initial { Some(0) } else { None }];
        states.extend(history.iter().map(|(_, v)| *v));
        let expected_after = |start: usize| history[start..].to_vec();
        let rest = match got.first() {
            Some(('r', Some(v))) => {
                let at = states
                    .iter()
                    .position(|s| *s == Some(*v))
                    .unwrap_or_else(|| panic!("key {id}: snapshot read of a state (v={v}) that never existed: {got:?} vs {history:?}"));
                assert_eq!(
                    &got[1..],
                    &expected_after(at)[..],
                    "key {id}: after its snapshot read (v={v}) the changes must follow exactly once, in order (history {history:?})"
                );
                got.len() - 1
            }
            Some(('r', None)) => panic!("key {id}: a snapshot read without a row"),
            _ => {
                if got.is_empty() {
                    assert_eq!(
                        states.last().unwrap(),
                        &None,
                        "key {id}: no event at all, yet the row exists (history {history:?})"
                    );
                } else {
                    assert_eq!(
                        got, history,
                        "key {id}: every change exactly once, in commit order"
                    );
                }
                got.len()
            }
        };
        changes_checked += rest;
        if let Some(Some(v)) = got.last().map(|e| e.1) {
            finals.insert(id, v);
        }
    }
    let table: HashMap<i64, i64> = rt
        .block_on(pg.query("SELECT id, v FROM items", &[]))
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(finals.len(), table.len(), "as many live keys as rows");
    assert!(finals == table, "the final state per key equals the table");
    assert!(
        snapshot_reads >= ROWS as usize * 9 / 10,
        "the snapshot was read ({snapshot_reads} r events)"
    );
    assert!(
        changes_checked > 1000,
        "the writer's changes were streamed ({changes_checked})"
    );
    assert!(samples > 10, "the slot was sampled");
    let streamed: i64 = rt
        .block_on(pg.query_one(
            "SELECT coalesce(sum(stream_txns), 0)::bigint FROM pg_stat_replication_slots WHERE slot_name = 'crash_slot'",
            &[],
        ))
        .unwrap()
        .get(0);
    assert!(streamed > 0, "the server streamed large transactions");
    eprintln!(
        "crash test: {} records, {snapshot_reads} snapshot reads, {changes_checked} changes, {} writer transactions ({streamed} streamed), {} slot samples, {:?}",
        records.len(),
        model.txns.len(),
        samples,
        started.elapsed()
    );
}
