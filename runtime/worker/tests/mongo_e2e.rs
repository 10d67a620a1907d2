//! The MongoDB source run by the `headwater` binary against a SecantusDB server from the test
//! harness (MongoDB wire protocol, a one-member replica set):
//!
//! - crash test: a writer keeps updating (`$inc v`), inserting and committing two-document
//!   transactions from before the snapshot to the end, while the worker is SIGKILLed twice
//!   during the ranged, two-reader snapshot of 20,000 documents (the first time once progress
//!   is committed, so the next run resumes it) and three more times while streaming; every
//!   change ends up in the log, none twice: per document one `r` (or a `c` with `v = 1`), then
//!   updates whose `v` rises by exactly one, ending at the collection's value;
//! - a server restart while streaming: the task reopens its change stream after the last change
//!   it handed out (as the driver's own change stream would); nothing is lost or repeated;
//! - history lost: a stored resume token the server pruned from its oplog gives a FAILED task
//!   whose message says so, `snapshot.mode=when_needed` snapshots again instead, and
//!   `configuration_based` with `snapshot.on.data.error` streams on from the current position;
//! - an interrupted snapshot whose starting point left the oplog meanwhile: the restarted task
//!   fails at once saying so (nothing copied in vain), or with `snapshot.mode=when_needed`
//!   snapshots again from a new starting point and streams;
//! - an offset with a cluster time and no resume token (as set through the offsets API)
//!   resumes just after that time: nothing skipped, nothing repeated;
//! - invalidate: with `capture.scope=database`, dropping the database invalidates the stream;
//!   the task reopens it after the invalidate event, and a restart whose stored offset is that
//!   event's token resumes there and captures the recreated database, nothing lost or repeated;
//! - back-to-back transactions (each with an uncaptured write inside): the committed offset
//!   moves while they run, each has one BEGIN and one END counting its captured events, and
//!   every change is in the log once, in order;
//! - Debezium's filter keys together: `filters.match.mode=literal` (a dot in a listed name is
//!   a dot), `snapshot.collection.filter.overrides` (the snapshot copies only matching
//!   documents), `cursor.pipeline` (a user `$match` drops changes on the server) and
//!   `cursor.oversize.handling.mode=skip` (a change of a document above the threshold is
//!   left out);
//! - `capture.mode.full.update.type=post_image` asks for post-images (`after` on updates
//!   where the collection keeps them, null where it does not, unlike a lookup), and
//!   `snapshot.mode=always` snapshots again at the next start, streaming on from there (with
//!   `cursor.oversize.handling.mode=split`, whose stage SecantusDB accepts without splitting;
//!   the reassembly itself is unit-tested in `split.rs`);
//! - an `execute-snapshot` signal inserted into `signal.data.collection` while streaming (after
//!   one whose query the server refuses and one inside a transaction, both passed over): the
//!   named collection is copied (the signal's filter applied), the worker is SIGKILLed during
//!   that copy and resumes it, then streams on after the signal: every matching document read,
//!   changes before and after the signal streamed once each;
//! - an incremental `execute-snapshot` copies a collection in `_id` chunks between watermark
//!   documents while a writer changes it, across a SIGKILL mid-copy: the topic applied in
//!   order equals the collection.
//! - `notification.enabled.channels=log,sink`: the initial and an incremental snapshot's
//!   notifications reach the log and, as Debezium's records, the sink topic (JSON with schemas).
//!   SecantusDB's post-image is the document's current state (a lookup limited to collections
//!   with `changeStreamPreAndPostImages`), so the test cannot tell mongod's state-right-after-
//!   each-update apart from a lookup on a collection that keeps images.
//!
//! What these tests do not prove (one SecantusDB node, not mongod): replica-set failover and
//! elections, sharded clusters, mongod's resume-token layout (tokens are kept opaque), and
//! mongod's `truncatedArrays` reporting.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{http, wait_until, Worker};
use headwater_log::{Isolation, Log, LogOptions};
use headwater_tests::rng::Rng;
use headwater_tests::{MongoOptions, MongoServer};
use mongodb::bson::{doc, oid::ObjectId, Document};
use serde_json::{json, Value};

const DOCS: usize = 20_000;
const TOPIC: &str = "crash.crash.items";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Runs a driver action (or any future) to completion.
fn wait<F: std::future::IntoFuture>(rt: &tokio::runtime::Runtime, f: F) -> F::Output {
    rt.block_on(f.into_future())
}

fn client(rt: &tokio::runtime::Runtime, server: &MongoServer) -> mongodb::Client {
    wait(rt, mongodb::Client::with_uri_str(server.uri())).unwrap()
}

/// Every committed record of a topic, from a stopped worker's log: (key id, value JSON).
fn log_records(data: &Path, topic: &str) -> Vec<(String, Option<Value>)> {
    let log = Log::open(data.join("log"), LogOptions::default()).expect("open the log");
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
                let key: Value = serde_json::from_slice(&rec.key.unwrap()).unwrap();
                let value = rec
                    .value
                    .map(|v| serde_json::from_slice::<Value>(&v).unwrap());
                out.push((key["payload"]["id"].as_str().unwrap().to_owned(), value));
            }
            offset = next;
        }
    }
    log.close().expect("close the log");
    out
}

fn config(name: &str, server: &MongoServer, db: &str, extra: &[(&str, &str)]) -> Value {
    let mut c = json!({
        "connector.class": "io.debezium.connector.mongodb.MongoDbConnector",
        "mongodb.connection.string": server.uri(),
        "topic.prefix": db,
        "collection.include.list": format!("{db}.items,{db}.marker"),
        "poll.interval.ms": "100",
        "capture.mode": "change_streams",
    });
    for (k, v) in extra {
        c[*k] = json!(v);
    }
    json!({"name": name, "config": c})
}

/// Writes a connector's config (`{"name": …, "config": …}`) to `<dir>/<name>.json`: the data
/// directory to give the worker and the file.
fn config_file(dir: &Path, cfg: Value) -> (std::path::PathBuf, std::path::PathBuf) {
    let file = dir.join(format!("{}.json", cfg["name"].as_str().unwrap()));
    std::fs::write(&file, cfg.to_string()).unwrap();
    (dir.join("data"), file)
}

/// Writes, until told to stop: `$inc v` of random documents, inserts of new ones (`v = 1`),
/// and now and then a transaction updating two documents. `model` holds each document's `v`.
fn writer(
    server: &MongoServer,
    ids: Vec<ObjectId>,
    stop: &AtomicBool,
    model: &Mutex<HashMap<String, u64>>,
    seed: u64,
) {
    let rt = runtime();
    let c = client(&rt, server);
    let items = c.database("crash").collection::<Document>("items");
    let mut rng = Rng::new(seed);
    let mut ids = ids;
    let key = |id: &ObjectId| format!("{{\"$oid\": \"{}\"}}", id.to_hex());
    while !stop.load(Ordering::SeqCst) {
        let roll = rng.below(10);
        if roll < 6 {
            let id = ids[rng.below(ids.len() as u64) as usize];
            wait(
                &rt,
                items.update_one(doc! {"_id": id}, doc! {"$inc": {"v": 1}}),
            )
            .unwrap();
            *model.lock().unwrap().entry(key(&id)).or_insert(0) += 1;
        } else if roll < 9 {
            let id = ObjectId::new();
            wait(&rt, items.insert_one(doc! {"_id": id, "v": 1})).unwrap();
            model.lock().unwrap().insert(key(&id), 1);
            ids.push(id);
        } else {
            let (a, b) = (
                ids[rng.below(ids.len() as u64) as usize],
                ids[rng.below(ids.len() as u64) as usize],
            );
            if a == b {
                continue;
            }
            wait(&rt, async {
                let mut s = c.start_session().await.unwrap();
                s.start_transaction().await.unwrap();
                for id in [a, b] {
                    items
                        .update_one(doc! {"_id": id}, doc! {"$inc": {"v": 1}})
                        .session(&mut s)
                        .await
                        .unwrap();
                }
                s.commit_transaction().await.unwrap();
            });
            let mut m = model.lock().unwrap();
            for id in [a, b] {
                *m.entry(key(&id)).or_insert(0) += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(1 + rng.below(3)));
    }
}

/// Writes 200 documents to `db.other` and has the server prune its oplog (of a server started
/// with a small `oplog_max_entries`): resume points from before are gone.
fn push_out_of_the_oplog(rt: &tokio::runtime::Runtime, c: &mongodb::Client, db: &str) {
    let other = c.database(db).collection::<Document>("other");
    for i in 0..200 {
        // Server-made _ids: the collection may have been filled before.
        wait(rt, other.insert_one(doc! {"n": i})).unwrap();
    }
    wait(
        rt,
        c.database("admin")
            .run_command(doc! {"secantusAdmin.pruneOplog": 1}),
    )
    .unwrap();
}

/// The key up to which an unfinished snapshot's documents are committed.
fn snapshot_progress(w: &Worker, name: &str) -> bool {
    let (status, _, body) = http(w.addr, "GET", &format!("/connectors/{name}/offsets"), None);
    status == 200 && body["offsets"][0]["offset"].get("snapshot_after").is_some()
}

#[test]
fn sigkill_during_snapshot_and_streaming_loses_and_repeats_nothing() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("seed {seed}");
    let mut rng = Rng::new(seed);
    let server = Arc::new(MongoServer::start().expect("SecantusDB"));
    let rt = runtime();
    let c = client(&rt, &server);
    let items = c.database("crash").collection::<Document>("items");
    let ids: Vec<ObjectId> = (0..DOCS).map(|_| ObjectId::new()).collect();
    for chunk in ids.chunks(1000) {
        let docs: Vec<Document> = chunk.iter().map(|id| doc! {"_id": id, "v": 0}).collect();
        wait(&rt, items.insert_many(docs)).unwrap();
    }
    let model: Arc<Mutex<HashMap<String, u64>>> = Arc::new(Mutex::new(
        ids.iter()
            .map(|id| (format!("{{\"$oid\": \"{}\"}}", id.to_hex()), 0))
            .collect(),
    ));
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let file = tmp.path().join("crash.json");
    std::fs::write(
        &file,
        config(
            "crash",
            &server,
            "crash",
            &[
                ("snapshot.chunk.documents", "2000"),
                ("snapshot.max.threads", "2"),
                // Small batches keep the snapshot long enough to be killed mid-way even when
                // the test's own polling is slowed by other tests on the machine (with 64 the
                // whole snapshot took 0.8 s on a fast machine, and the kill often came after
                // its end).
                ("snapshot.fetch.size", "16"),
            ],
        )
        .to_string(),
    )
    .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let writer_thread = {
        let (server, stop, model, ids) = (server.clone(), stop.clone(), model.clone(), ids.clone());
        let seed = rng.next_u64();
        std::thread::spawn(move || writer(&server, ids, &stop, &model, seed))
    };

    let mut resumed = false;
    for round in 0..2 {
        let w = Worker::start(&data, &[&file]);
        wait_until("the snapshot to start", Duration::from_secs(60), || {
            w.logs().iter().any(|l| l.contains("snapshot started"))
        });
        resumed |= w.logs().iter().any(|l| l.contains("resumed=true"));
        if round == 0 {
            wait_until("snapshot progress", Duration::from_secs(60), || {
                snapshot_progress(&w, "crash")
            });
            std::thread::sleep(Duration::from_millis(rng.below(200)));
        } else {
            std::thread::sleep(Duration::from_millis(100 + rng.below(500)));
        }
        eprintln!(
            "snapshot kill {round}: finished before the kill: {}",
            w.logs().iter().any(|l| l.contains("snapshot finished"))
        );
        w.sigkill();
    }
    assert!(resumed, "the second run resumed the snapshot");
    // Streaming kills: each run first finishes whatever snapshot is left and streams.
    for round in 0..3 {
        let w = Worker::start(&data, &[&file]);
        wait_until("streaming", Duration::from_secs(120), || {
            w.logs().iter().any(|l| l.contains("streaming changes"))
        });
        std::thread::sleep(Duration::from_millis(300 + rng.below(1500)));
        eprintln!("stream kill {round}");
        w.sigkill();
    }
    stop.store(true, Ordering::SeqCst);
    writer_thread.join().unwrap();

    // The last run catches up: a marker written last arrives after everything else.
    let w = Worker::start(&data, &[&file]);
    // The driver retries a write whose answer it lost; a retry of an insert that did land is
    // refused as a duplicate key (11000), which means the marker is there.
    if let Err(e) = wait(
        &rt,
        c.database("crash")
            .collection::<Document>("marker")
            .insert_one(doc! {"_id": "end"}),
    ) {
        assert!(e.to_string().contains("E11000"), "writing the marker: {e}");
    }
    wait_until("the marker", Duration::from_secs(120), || {
        let (status, _, body) = http(
            w.addr,
            "GET",
            "/topics/crash.crash.marker/partitions/0/records?offset=0&max=1",
            None,
        );
        status == 200 && body["records"].as_array().is_some_and(|r| !r.is_empty())
    });
    w.sigterm();

    let mut per_key: HashMap<String, Vec<(String, u64)>> = HashMap::new();
    for (k, v) in log_records(&data, TOPIC) {
        let Some(v) = v else { continue };
        let p = &v["payload"];
        let op = p["op"].as_str().unwrap().to_owned();
        let value = match op.as_str() {
            "r" | "c" => serde_json::from_str::<Value>(p["after"].as_str().unwrap()).unwrap()["v"]
                .as_u64()
                .unwrap(),
            "u" => serde_json::from_str::<Value>(
                p["updateDescription"]["updatedFields"].as_str().unwrap(),
            )
            .unwrap()["v"]
                .as_u64()
                .unwrap(),
            other => panic!("unexpected op {other}"),
        };
        per_key.entry(k).or_default().push((op, value));
    }
    let model = model.lock().unwrap();
    assert_eq!(per_key.len(), model.len(), "every document has events");
    for (k, want) in model.iter() {
        let evs = &per_key[k];
        match evs[0].0.as_str() {
            "r" => {}
            "c" => assert_eq!(evs[0].1, 1, "{k}: a create carries v = 1: {evs:?}"),
            other => panic!("{k}: first event {other}: {evs:?}"),
        }
        // Updates in strictly consecutive order (a change the snapshot already held may be
        // replayed once from the pre-snapshot resume point, as Debezium does, but never twice).
        let updates: Vec<u64> = evs
            .iter()
            .skip(1)
            .filter(|(op, _)| op == "u")
            .map(|(_, v)| *v)
            .collect();
        for pair in updates.windows(2) {
            assert_eq!(
                pair[1],
                pair[0] + 1,
                "{k}: updates exactly once, in order: {evs:?}"
            );
        }
        let last = updates.last().copied().unwrap_or(evs[0].1);
        assert_eq!(last.max(evs[0].1), *want, "{k}: final state: {evs:?}");
        let creates = evs.iter().filter(|(op, _)| op == "c").count();
        assert!(creates <= 1, "{k}: at most one create: {evs:?}");
    }
}

#[test]
fn resumes_after_a_server_restart() {
    let mut server = MongoServer::start().expect("SecantusDB");
    let rt = runtime();
    let tmp = tempfile::tempdir().unwrap();
    let (data, file) = config_file(tmp.path(), config("restart", &server, "rs", &[]));
    let w = Worker::start(&data, &[&file]);
    wait_until("the task running", Duration::from_secs(30), || {
        let (_, _, s) = http(w.addr, "GET", "/connectors/restart/status", None);
        s["tasks"][0]["state"] == "RUNNING"
    });
    wait_until("streaming", Duration::from_secs(30), || {
        w.logs().iter().any(|l| l.contains("streaming changes"))
    });
    let insert = |server: &MongoServer, range: std::ops::Range<i32>| {
        let c = client(&rt, server);
        let items = c.database("rs").collection::<Document>("items");
        for i in range {
            wait(&rt, items.insert_one(doc! {"_id": i, "v": 1})).unwrap();
        }
    };
    let count = |w: &Worker| w.partition0_records("rs.rs.items").map_or(0, |r| r.len());
    insert(&server, 0..50);
    wait_until("the first inserts", Duration::from_secs(30), || {
        count(&w) == 50
    });
    server.restart().expect("restart the server");
    insert(&server, 50..100);
    wait_until(
        "the inserts after the restart",
        Duration::from_secs(90),
        || count(&w) >= 100,
    );
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        w.logs()
            .iter()
            .any(|l| l.contains("reopening it after the last change handed out")),
        "the task reopened its stream itself"
    );
    assert_eq!(count(&w), 100, "nothing repeated");
    let started = Instant::now();
    let (_, _, s) = http(w.addr, "GET", "/connectors/restart/status", None);
    assert_eq!(
        s["tasks"][0]["state"],
        "RUNNING",
        "{s} after {:?}",
        started.elapsed()
    );
    w.sigterm();
    let ids: Vec<String> = log_records(&data, "rs.rs.items")
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    let unique: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!((ids.len(), unique.len()), (100, 100), "each insert once");
}

#[test]
fn a_pruned_resume_point_fails_resnapshots_or_is_skipped_as_snapshot_mode_says() {
    let server = MongoServer::start_with(MongoOptions {
        oplog_max_entries: Some(20),
    })
    .expect("SecantusDB");
    let rt = runtime();
    let c = client(&rt, &server);
    let items = c.database("hl").collection::<Document>("items");
    wait(&rt, items.insert_one(doc! {"_id": 1, "v": 1})).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (data, file) = config_file(tmp.path(), config("hl", &server, "hl", &[]));
    let w = Worker::start(&data, &[&file]);
    wait_until("streaming", Duration::from_secs(30), || {
        w.logs().iter().any(|l| l.contains("streaming changes"))
    });
    wait(&rt, items.insert_one(doc! {"_id": 2, "v": 1})).unwrap();
    wait_until("the insert's offset", Duration::from_secs(30), || {
        let (_, _, body) = http(w.addr, "GET", "/connectors/hl/offsets", None);
        body["offsets"][0]["offset"]["sec"]
            .as_i64()
            .is_some_and(|s| s > 0)
    });
    w.sigterm();
    // While the connector is down, other writes push its resume point out of the oplog.
    push_out_of_the_oplog(&rt, &c, "hl");
    let w = Worker::start(&data, &[&file]);
    wait_until("the task to fail", Duration::from_secs(30), || {
        let (_, _, s) = http(w.addr, "GET", "/connectors/hl/status", None);
        s["tasks"][0]["state"] == "FAILED"
    });
    let (_, _, s) = http(w.addr, "GET", "/connectors/hl/status", None);
    let trace = s["tasks"][0]["trace"].as_str().unwrap_or_default();
    assert!(trace.contains("ChangeStreamHistoryLost"), "{trace}");
    assert!(
        trace.contains("when_needed"),
        "the message says what to do: {trace}"
    );
    w.sigterm();

    // With snapshot.mode=when_needed the connector snapshots again instead.
    std::fs::write(
        &file,
        config("hl", &server, "hl", &[("snapshot.mode", "when_needed")]).to_string(),
    )
    .unwrap();
    let w = Worker::start(&data, &[&file]);
    wait_until("a new snapshot", Duration::from_secs(60), || {
        w.logs().iter().any(|l| l.contains("snapshot finished"))
    });
    let (_, _, s) = http(w.addr, "GET", "/connectors/hl/status", None);
    assert_eq!(s["tasks"][0]["state"], "RUNNING", "{s}");
    w.sigterm();
    let ops: Vec<String> = log_records(&data, "hl.hl.items")
        .into_iter()
        .filter_map(|(_, v)| v.map(|v| v["payload"]["op"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(
        ops,
        ["r", "c", "r", "r"],
        "snapshot, insert, then the new snapshot"
    );

    // Pruned again: snapshot.mode=configuration_based with start.stream and
    // snapshot.on.data.error streams on from the server's current position instead.
    push_out_of_the_oplog(&rt, &c, "hl");
    std::fs::write(
        &file,
        config(
            "hl",
            &server,
            "hl",
            &[
                ("snapshot.mode", "configuration_based"),
                ("snapshot.mode.configuration.based.start.stream", "true"),
                (
                    "snapshot.mode.configuration.based.snapshot.on.data.error",
                    "true",
                ),
            ],
        )
        .to_string(),
    )
    .unwrap();
    let w = Worker::start(&data, &[&file]);
    wait_until("streaming from now", Duration::from_secs(30), || {
        w.logs()
            .iter()
            .any(|l| l.contains("streaming on from the server's current position"))
    });
    wait_until("streaming", Duration::from_secs(30), || {
        w.logs().iter().any(|l| l.contains("streaming changes"))
    });
    wait(&rt, items.insert_one(doc! {"_id": 3, "v": 1})).unwrap();
    wait_until("the insert", Duration::from_secs(30), || {
        w.partition0_records("hl.hl.items")
            .is_some_and(|r| r.len() == 5)
    });
    let (_, _, s) = http(w.addr, "GET", "/connectors/hl/status", None);
    assert_eq!(s["tasks"][0]["state"], "RUNNING", "{s}");
    w.sigterm();
    let ops: Vec<String> = log_records(&data, "hl.hl.items")
        .into_iter()
        .filter_map(|(_, v)| v.map(|v| v["payload"]["op"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(
        ops,
        ["r", "c", "r", "r", "c"],
        "no snapshot, the new insert"
    );
}

#[test]
fn a_dropped_database_invalidates_the_stream_which_reopens_and_survives_a_restart() {
    let server = MongoServer::start().expect("SecantusDB");
    let rt = runtime();
    let c = client(&rt, &server);
    let items = c.database("inv").collection::<Document>("items");
    let tmp = tempfile::tempdir().unwrap();
    let (data, file) = config_file(
        tmp.path(),
        config(
            "inv",
            &server,
            "inv",
            &[("capture.scope", "database"), ("capture.target", "inv")],
        ),
    );
    let count = |w: &Worker| w.partition0_records("inv.inv.items").map_or(0, |r| r.len());
    let insert = |range: std::ops::Range<i32>| {
        for i in range {
            wait(&rt, items.insert_one(doc! {"_id": i, "v": 1})).unwrap();
        }
    };
    let streaming = |w: &Worker| {
        wait_until("streaming", Duration::from_secs(30), || {
            w.logs().iter().any(|l| l.contains("streaming changes"))
        })
    };
    let w = Worker::start(&data, &[&file]);
    streaming(&w);
    insert(0..10);
    wait_until("the first inserts", Duration::from_secs(30), || {
        count(&w) == 10
    });
    w.sigterm();

    // While the worker is down: inserts, then the database is dropped. The restarted stream
    // reads them in one reply, so the records before the invalidate event carry its resume
    // token as their offset, and nothing is captured after it.
    insert(10..15);
    wait(&rt, c.database("inv").drop()).unwrap();
    let w = Worker::start(&data, &[&file]);
    streaming(&w);
    wait_until("the invalidate", Duration::from_secs(30), || {
        w.logs().iter().any(|l| l.contains("invalidated"))
    });
    wait_until(
        "the inserts before the drop",
        Duration::from_secs(30),
        || count(&w) == 15,
    );
    std::thread::sleep(Duration::from_millis(300));
    w.sigterm();

    // Restarted at the invalidate event's token, the stream opens (with `startAfter`;
    // `resumeAfter` refuses such a token) and captures the recreated database.
    let w = Worker::start(&data, &[&file]);
    streaming(&w);
    insert(15..20);
    wait_until(
        "inserts into the recreated database",
        Duration::from_secs(30),
        || count(&w) >= 20,
    );
    let (_, _, s) = http(w.addr, "GET", "/connectors/inv/status", None);
    assert_eq!(s["tasks"][0]["state"], "RUNNING", "{s}");
    std::thread::sleep(Duration::from_millis(500));
    w.sigterm();
    let ids: Vec<String> = log_records(&data, "inv.inv.items")
        .into_iter()
        .filter(|(_, v)| v.is_some())
        .map(|(k, _)| k)
        .collect();
    let expected: Vec<String> = (0..20).map(|i| i.to_string()).collect();
    assert_eq!(ids, expected, "each insert once, in order");
}

#[test]
fn back_to_back_transactions_commit_as_they_go_and_stay_whole() {
    let server = MongoServer::start().expect("SecantusDB");
    let rt = runtime();
    let c = client(&rt, &server);
    let db = c.database("tx");
    let (items, audit) = (
        db.collection::<Document>("items"),
        db.collection::<Document>("audit"),
    );
    let tmp = tempfile::tempdir().unwrap();
    let (data, file) = config_file(
        tmp.path(),
        config(
            "tx",
            &server,
            "tx",
            &[("provide.transaction.metadata", "true")],
        ),
    );
    let w = Worker::start(&data, &[&file]);
    wait_until("streaming", Duration::from_secs(30), || {
        w.logs().iter().any(|l| l.contains("streaming changes"))
    });
    let offset = |w: &Worker| {
        let (_, _, body) = http(w.addr, "GET", "/connectors/tx/offsets", None);
        body["offsets"][0]["offset"].clone()
    };
    // Transactions back to back, each writing `items` twice with an uncaptured `audit` write
    // between: no change-stream reply is ever empty while they run.
    let txns = 150;
    let mut offsets_seen = std::collections::HashSet::new();
    for t in 0..txns {
        wait(&rt, async {
            let mut s = c.start_session().await.unwrap();
            s.start_transaction().await.unwrap();
            items
                .insert_one(doc! {"_id": t, "v": 1})
                .session(&mut s)
                .await
                .unwrap();
            audit
                .insert_one(doc! {"_id": t})
                .session(&mut s)
                .await
                .unwrap();
            items
                .update_one(doc! {"_id": t}, doc! {"$inc": {"v": 1}})
                .session(&mut s)
                .await
                .unwrap();
            s.commit_transaction().await.unwrap();
        });
        if t % 10 == 0 {
            offsets_seen.insert(offset(&w).to_string());
        }
    }
    assert!(
        offsets_seen.len() >= 4,
        "the committed offset moves while transactions keep coming: {offsets_seen:?}"
    );
    wait_until("every transaction", Duration::from_secs(30), || {
        w.partition0_records("tx.transaction")
            .is_some_and(|r| r.len() == 2 * txns as usize)
    });
    std::thread::sleep(Duration::from_millis(300));
    w.sigterm();

    let mut markers: HashMap<String, Vec<(String, i64)>> = HashMap::new();
    for (_, value) in log_records(&data, "tx.transaction") {
        let p = &value.expect("a value")["payload"];
        markers
            .entry(p["id"].as_str().unwrap().to_owned())
            .or_default()
            .push((
                p["status"].as_str().unwrap().to_owned(),
                p["event_count"].as_i64().unwrap_or(-1),
            ));
    }
    assert_eq!(markers.len(), txns as usize, "one id per transaction");
    for (id, m) in &markers {
        assert_eq!(
            m,
            &[("BEGIN".to_owned(), -1), ("END".to_owned(), 2)],
            "transaction {id}: one BEGIN, one END counting its two captured events"
        );
    }
    let ops: Vec<(String, String)> = log_records(&data, "tx.tx.items")
        .into_iter()
        .filter_map(|(k, v)| Some((k, v?["payload"]["op"].as_str()?.to_owned())))
        .collect();
    let expected: Vec<(String, String)> = (0..txns)
        .flat_map(|t| {
            [
                (t.to_string(), "c".to_owned()),
                (t.to_string(), "u".to_owned()),
            ]
        })
        .collect();
    assert_eq!(ops, expected, "every change once, in order");
}

#[test]
fn an_interrupted_snapshot_whose_start_left_the_oplog_fails_at_once_or_starts_over() {
    let server = MongoServer::start_with(MongoOptions {
        oplog_max_entries: Some(20),
    })
    .expect("SecantusDB");
    let rt = runtime();
    let c = client(&rt, &server);
    let items = c.database("hs").collection::<Document>("items");
    let ids: Vec<ObjectId> = (0..DOCS).map(|_| ObjectId::new()).collect();
    for chunk in ids.chunks(1000) {
        let docs: Vec<Document> = chunk.iter().map(|id| doc! {"_id": id, "v": 0}).collect();
        wait(&rt, items.insert_many(docs)).unwrap();
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let file = tmp.path().join("hs.json");
    let write_config = |mode: &str| {
        let cfg = config(
            "hs",
            &server,
            "hs",
            &[
                ("snapshot.mode", mode),
                ("snapshot.chunk.documents", "1000"),
                ("snapshot.fetch.size", "100"),
            ],
        );
        std::fs::write(&file, cfg.to_string()).unwrap();
    };
    let status = |w: &Worker| {
        let (_, _, s) = http(w.addr, "GET", "/connectors/hs/status", None);
        s["tasks"][0].clone()
    };
    write_config("initial");
    let w = Worker::start(&data, &[&file]);
    wait_until("snapshot progress", Duration::from_secs(60), || {
        snapshot_progress(&w, "hs")
    });
    w.sigkill();
    // While the connector is down, other writes push the snapshot's starting point out.
    push_out_of_the_oplog(&rt, &c, "hs");

    // snapshot.mode=initial: FAILED before copying the rest, saying why.
    let w = Worker::start(&data, &[&file]);
    wait_until("the task to fail", Duration::from_secs(30), || {
        status(&w)["state"] == "FAILED"
    });
    let trace = status(&w)["trace"].as_str().unwrap_or_default().to_owned();
    assert!(trace.contains("ChangeStreamHistoryLost"), "{trace}");
    assert!(trace.contains("interrupted snapshot"), "{trace}");
    assert!(
        !w.logs().iter().any(|l| l.contains("snapshot started")),
        "nothing copied in vain"
    );
    w.sigterm();

    // snapshot.mode=when_needed: a new snapshot from a new starting point, then streaming.
    write_config("when_needed");
    let w = Worker::start(&data, &[&file]);
    wait_until(
        "the new snapshot and streaming",
        Duration::from_secs(60),
        || w.logs().iter().any(|l| l.contains("streaming changes")),
    );
    assert_eq!(status(&w)["state"], "RUNNING", "{}", status(&w));
    w.sigterm();
    let seen: std::collections::HashSet<String> = log_records(&data, "hs.hs.items")
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(seen.len(), DOCS, "every document read");
}

#[test]
fn an_offset_with_a_cluster_time_and_no_token_resumes_after_that_time() {
    let server = MongoServer::start().expect("SecantusDB");
    let rt = runtime();
    let c = client(&rt, &server);
    let items = c.database("ot").collection::<Document>("items");
    let tmp = tempfile::tempdir().unwrap();
    let (data, file) = config_file(
        tmp.path(),
        config("ot", &server, "ot", &[("snapshot.mode", "no_data")]),
    );
    let w = Worker::start(&data, &[&file]);
    wait_until("streaming", Duration::from_secs(30), || {
        w.logs().iter().any(|l| l.contains("streaming changes"))
    });
    let count = |w: &Worker| w.partition0_records("ot.ot.items").map_or(0, |r| r.len());
    wait(&rt, items.insert_one(doc! {"_id": 1})).unwrap();
    wait_until("the first insert", Duration::from_secs(30), || {
        count(&w) == 1
    });
    let stored = |w: &Worker| {
        let (_, _, body) = http(w.addr, "GET", "/connectors/ot/offsets", None);
        body["offsets"][0].clone()
    };
    wait_until("its offset", Duration::from_secs(30), || {
        stored(&w)["offset"]["sec"].as_i64().is_some_and(|s| s > 0)
    });
    let first = stored(&w);
    let (status, _, _) = http(w.addr, "PUT", "/connectors/ot/stop", None);
    assert_eq!(status, 204);
    wait_until("stopped", Duration::from_secs(30), || {
        let (_, _, s) = http(w.addr, "GET", "/connectors/ot/status", None);
        s["connector"]["state"] == "STOPPED"
    });
    wait(&rt, items.insert_one(doc! {"_id": 2})).unwrap();
    wait(&rt, items.insert_one(doc! {"_id": 3})).unwrap();
    // The offset as a user might set it: the cluster time only, no resume token.
    let body = json!({"offsets": [{"partition": first["partition"], "offset": {
        "sec": first["offset"]["sec"], "ord": first["offset"]["ord"]}}]});
    let (status, _, reply) = http(
        w.addr,
        "PATCH",
        "/connectors/ot/offsets",
        Some(&body.to_string()),
    );
    assert_eq!(status, 200, "{reply}");
    let (status, _, _) = http(w.addr, "PUT", "/connectors/ot/resume", None);
    assert_eq!(status, 202);
    wait_until(
        "the inserts made while stopped",
        Duration::from_secs(30),
        || count(&w) >= 3,
    );
    std::thread::sleep(Duration::from_millis(500));
    w.sigterm();
    let ids: Vec<String> = log_records(&data, "ot.ot.items")
        .into_iter()
        .filter(|(_, v)| v.is_some())
        .map(|(k, _)| k)
        .collect();
    assert_eq!(ids, ["1", "2", "3"], "nothing skipped, nothing repeated");
}

#[test]
fn literal_filters_snapshot_overrides_a_user_pipeline_and_oversize_skips_shape_the_capture() {
    let server = MongoServer::start().expect("SecantusDB");
    let rt = runtime();
    let c = client(&rt, &server);
    let db = c.database("fp");
    let items = db.collection::<Document>("items");
    let line_items = db.collection::<Document>("line.items");
    let look_alike = db.collection::<Document>("lineXitems");
    for (id, status) in [(1, "open"), (2, "closed"), (3, "open")] {
        wait(&rt, items.insert_one(doc! {"_id": id, "status": status})).unwrap();
    }
    wait(&rt, line_items.insert_one(doc! {"_id": 1})).unwrap();
    wait(&rt, look_alike.insert_one(doc! {"_id": 1})).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (data, file) = config_file(
        tmp.path(),
        config(
            "fp",
            &server,
            "fp",
            &[
                ("filters.match.mode", "literal"),
                ("collection.include.list", "fp.items, fp.line.items"),
                ("snapshot.collection.filter.overrides", "fp.items"),
                (
                    "snapshot.collection.filter.overrides.fp.items",
                    r#"{"status": "open"}"#,
                ),
                (
                    "cursor.pipeline",
                    r#"[{"$match": {"fullDocument.hidden": {"$ne": true}}}]"#,
                ),
                ("cursor.oversize.handling.mode", "skip"),
                ("cursor.oversize.skip.threshold", "512"),
            ],
        ),
    );
    let w = Worker::start(&data, &[&file]);
    wait_until("streaming", Duration::from_secs(30), || {
        w.logs()
            .iter()
            .any(|l| l.contains("streaming changes") && l.contains("$bsonSize"))
    });
    wait(&rt, items.insert_one(doc! {"_id": 10, "status": "open"})).unwrap();
    wait(&rt, items.insert_one(doc! {"_id": 11, "hidden": true})).unwrap();
    wait(
        &rt,
        items.insert_one(doc! {"_id": 12, "big": "x".repeat(1000)}),
    )
    .unwrap();
    wait(&rt, look_alike.insert_one(doc! {"_id": 2})).unwrap();
    wait(&rt, line_items.insert_one(doc! {"_id": 2})).unwrap();
    wait(&rt, items.delete_one(doc! {"_id": 1})).unwrap();
    let count = |w: &Worker, t: &str| w.partition0_records(t).map_or(0, |r| r.len());
    wait_until("the streamed changes", Duration::from_secs(30), || {
        count(&w, "fp.fp.items") >= 5 && count(&w, "fp.fp.line.items") >= 2
    });
    std::thread::sleep(Duration::from_millis(500));
    w.sigterm();
    let ops = |topic: &str| -> Vec<(String, String)> {
        log_records(&data, topic)
            .into_iter()
            .map(|(id, v)| {
                let op = v.map_or("tombstone".to_owned(), |v| {
                    v["payload"]["op"].as_str().unwrap().to_owned()
                });
                (id, op)
            })
            .collect()
    };
    let pairs = |l: &[(&str, &str)]| -> Vec<(String, String)> {
        l.iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    };
    assert_eq!(
        ops("fp.fp.items"),
        pairs(&[
            ("1", "r"),
            ("3", "r"),
            ("10", "c"),
            ("1", "d"),
            ("1", "tombstone")
        ]),
        "the closed document is not snapshotted; the hidden and the oversized inserts are not streamed"
    );
    assert_eq!(ops("fp.fp.line.items"), pairs(&[("1", "r"), ("2", "c")]));
    assert!(
        ops("fp.fp.lineXitems").is_empty(),
        "a literal name's dot matches only a dot"
    );
}

#[test]
fn post_images_feed_updates_and_snapshot_mode_always_snapshots_at_every_start() {
    let server = MongoServer::start().expect("SecantusDB");
    let rt = runtime();
    let c = client(&rt, &server);
    let db = c.database("pim");
    wait(
        &rt,
        db.run_command(doc! {"create": "items", "changeStreamPreAndPostImages": {"enabled": true}}),
    )
    .unwrap();
    let items = db.collection::<Document>("items");
    let plain = db.collection::<Document>("plain");
    wait(&rt, items.insert_one(doc! {"_id": 1, "v": 0})).unwrap();
    wait(&rt, plain.insert_one(doc! {"_id": 1, "v": 0})).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (data, file) = config_file(
        tmp.path(),
        config(
            "pim",
            &server,
            "pim",
            &[
                ("collection.include.list", "pim.items,pim.plain"),
                ("capture.mode", "change_streams_update_full"),
                ("capture.mode.full.update.type", "post_image"),
                ("snapshot.mode", "always"),
                // The server takes the stage and never splits: whole events pass through.
                ("cursor.oversize.handling.mode", "split"),
            ],
        ),
    );
    let streaming = |w: &Worker| {
        wait_until("streaming", Duration::from_secs(30), || {
            w.logs().iter().any(|l| l.contains("streaming changes"))
        })
    };
    let count = |w: &Worker, t: &str| w.partition0_records(t).map_or(0, |r| r.len());
    let w = Worker::start(&data, &[&file]);
    streaming(&w);
    for coll in [&items, &plain] {
        wait(
            &rt,
            coll.update_one(doc! {"_id": 1}, doc! {"$inc": {"v": 1}}),
        )
        .unwrap();
    }
    wait_until("both updates", Duration::from_secs(30), || {
        count(&w, "pim.pim.items") >= 2 && count(&w, "pim.pim.plain") >= 2
    });
    std::thread::sleep(Duration::from_millis(300));
    w.sigterm();
    // Written while the worker is down: with `always` the next start's snapshot has it.
    wait(&rt, items.insert_one(doc! {"_id": 2, "v": 0})).unwrap();
    let w = Worker::start(&data, &[&file]);
    streaming(&w);
    assert!(w.logs().iter().any(|l| l.contains("snapshot.mode=always")));
    wait(&rt, items.insert_one(doc! {"_id": 3, "v": 0})).unwrap();
    wait_until(
        "the insert after the second snapshot",
        Duration::from_secs(30),
        || count(&w, "pim.pim.items") >= 5,
    );
    std::thread::sleep(Duration::from_millis(300));
    w.sigterm();
    let summary = |topic: &str| -> Vec<(String, String, Option<i64>)> {
        log_records(&data, topic)
            .into_iter()
            .map(|(id, v)| {
                let v = v.expect("no deletes here");
                let after = v["payload"]["after"].as_str().map(|a| {
                    serde_json::from_str::<Value>(a).unwrap()["v"]
                        .as_i64()
                        .unwrap()
                });
                (id, v["payload"]["op"].as_str().unwrap().to_owned(), after)
            })
            .collect()
    };
    let row = |id: &str, op: &str, v: Option<i64>| (id.to_owned(), op.to_owned(), v);
    assert_eq!(
        summary("pim.pim.items"),
        [
            row("1", "r", Some(0)),
            row("1", "u", Some(1)),
            row("1", "r", Some(1)),
            row("2", "r", Some(0)),
            row("3", "c", Some(0)),
        ],
        "the post-image feeds the update; the second start snapshots again (2 is read, not streamed)"
    );
    assert_eq!(
        summary("pim.pim.plain")[..2],
        [row("1", "r", Some(0)), row("1", "u", None)],
        "no post-images kept: no after (a lookup would have found the document)"
    );
}

#[test]
fn an_execute_snapshot_signal_copies_a_collection_and_survives_a_sigkill_mid_copy() {
    const N: usize = 20_000;
    let server = MongoServer::start().expect("SecantusDB");
    let rt = runtime();
    let c = client(&rt, &server);
    let db = c.database("sg");
    let items = db.collection::<Document>("items");
    let signals = db.collection::<Document>("signals");
    let ids: Vec<ObjectId> = (0..N).map(|_| ObjectId::new()).collect();
    for (n, chunk) in ids.chunks(1000).enumerate() {
        let docs: Vec<Document> = chunk
            .iter()
            .enumerate()
            .map(|(i, id)| doc! {"_id": id, "v": (n * 1000 + i) as i64})
            .collect();
        wait(&rt, items.insert_many(docs)).unwrap();
    }
    let tmp = tempfile::tempdir().unwrap();
    let (data, file) = config_file(
        tmp.path(),
        config(
            "sg",
            &server,
            "sg",
            &[
                ("collection.include.list", "sg.items"),
                ("snapshot.mode", "no_data"),
                ("signal.data.collection", "sg.signals"),
                ("snapshot.chunk.documents", "2000"),
                ("snapshot.fetch.size", "64"),
                ("max.batch.size", "256"),
                ("max.queue.size", "1024"),
            ],
        ),
    );
    let w = Worker::start(&data, &[&file]);
    wait_until("streaming", Duration::from_secs(30), || {
        w.logs().iter().any(|l| l.contains("streaming changes"))
    });
    let before = ObjectId::new();
    wait(&rt, items.insert_one(doc! {"_id": before, "v": -1i64})).unwrap();
    wait(
        &rt,
        signals.insert_one(
            doc! {"_id": "log-1", "type": "log", "data": {"message": "hello from the test"}},
        ),
    )
    .unwrap();
    // A request the server refuses (an unknown operator) is reported and passed over, and so
    // is one inside a transaction.
    wait(
        &rt,
        signals.insert_one(doc! {"_id": "bad-1", "type": "execute-snapshot", "data": {
            "data-collections": ["sg\\.items"], "type": "blocking",
            "additional-conditions": [{"data-collection": "sg.items", "filter": "{\"v\": {\"$foo\": 1}}"}],
        }}),
    )
    .unwrap();
    wait(&rt, async {
        let mut session = c.start_session().await.unwrap();
        session.start_transaction().await.unwrap();
        signals
            .insert_one(doc! {"_id": "txn-1", "type": "execute-snapshot", "data": {"data-collections": ["sg\\.items"]}})
            .session(&mut session)
            .await
            .unwrap();
        session.commit_transaction().await.unwrap();
    });
    wait_until("the refused signals", Duration::from_secs(30), || {
        let logs = w.logs();
        logs.iter()
            .any(|l| l.contains("not acted on") && l.contains("unknown operator"))
            && logs
                .iter()
                .any(|l| l.contains("inside a multi-document transaction"))
    });
    // Only documents with v >= 0 are copied: the one streamed just before is not.
    wait(
        &rt,
        signals.insert_one(doc! {"_id": "snap-1", "type": "execute-snapshot", "data": {
            "data-collections": ["sg\\.items"], "type": "blocking",
            "additional-conditions": [{"data-collection": "sg.items", "filter": "{\"v\": {\"$gte\": 0}}"}],
        }}),
    )
    .unwrap();
    wait_until(
        "the signalled snapshot's progress",
        Duration::from_secs(60),
        || {
            let (status, _, body) = http(w.addr, "GET", "/connectors/sg/offsets", None);
            let o = &body["offsets"][0]["offset"];
            status == 200 && o.get("snapshot_signal").is_some() && o.get("snapshot_after").is_some()
        },
    );
    assert!(w.logs().iter().any(|l| l.contains("hello from the test")));
    w.sigkill();
    let w = Worker::start(&data, &[&file]);
    wait_until(
        "the resumed snapshot to end",
        Duration::from_secs(120),
        || w.logs().iter().any(|l| l.contains("snapshot finished")),
    );
    assert!(
        w.logs().iter().any(|l| l.contains("snapshot started")
            && l.contains("resumed=true")
            && l.contains("signalled=true")),
        "the restart went on with the signalled snapshot"
    );
    let after = ObjectId::new();
    wait(&rt, items.insert_one(doc! {"_id": after, "v": -2i64})).unwrap();
    let key = |id: &ObjectId| format!("{{\"$oid\": \"{}\"}}", id.to_hex());
    wait_until(
        "the insert after the snapshot",
        Duration::from_secs(60),
        || {
            // Past the ~20,000 records of the snapshot (the records endpoint pages by 10,000).
            let (status, _, body) = http(
                w.addr,
                "GET",
                &format!(
                    "/topics/sg.sg.items/partitions/0/records?offset={}&max=10000",
                    N - 100
                ),
                None,
            );
            status == 200 && body["records"].to_string().contains(&after.to_hex())
        },
    );
    std::thread::sleep(Duration::from_millis(300));
    w.sigterm();
    let records = log_records(&data, "sg.sg.items");
    let ops: Vec<(String, String)> = records
        .iter()
        .map(|(id, v)| {
            let op = v.as_ref().unwrap()["payload"]["op"].as_str().unwrap();
            (id.clone(), op.to_owned())
        })
        .collect();
    assert_eq!(ops.first(), Some(&(key(&before), "c".to_owned())));
    assert_eq!(ops.last(), Some(&(key(&after), "c".to_owned())));
    assert_eq!(
        ops.iter().filter(|(_, op)| op == "c").count(),
        2,
        "each streamed insert once: the restart resumed after the signal"
    );
    let read: std::collections::HashSet<&String> = ops
        .iter()
        .filter(|(_, op)| op == "r")
        .map(|(id, _)| id)
        .collect();
    assert_eq!(read.len(), N, "every document matching the filter was read");
    assert!(ids.iter().all(|id| read.contains(&key(id))));
    assert!(!read.contains(&key(&before)), "the filter left out v < 0");
}

/// An incremental execute-snapshot copies a collection in `_id` chunks between watermark
/// documents while a writer changes it and the stream goes on, across a SIGKILL mid-copy: the
/// topic's events applied in order give the collection's content.
#[test]
fn an_incremental_snapshot_copies_chunks_while_a_writer_runs_and_survives_a_sigkill() {
    const N: i32 = 600;
    let server = MongoServer::start().expect("SecantusDB");
    let rt = runtime();
    let c = client(&rt, &server);
    let db = c.database("ic");
    let items = db.collection::<Document>("items");
    let signals = db.collection::<Document>("signals");
    let docs: Vec<Document> = (0..N).map(|i| doc! {"_id": i, "v": i}).collect();
    wait(&rt, items.insert_many(docs)).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (data, file) = config_file(
        tmp.path(),
        config(
            "ic",
            &server,
            "ic",
            &[
                ("collection.include.list", "ic.items"),
                ("capture.mode", "change_streams_update_full"),
                ("snapshot.mode", "no_data"),
                ("signal.data.collection", "ic.signals"),
                ("incremental.snapshot.chunk.size", "40"),
            ],
        ),
    );
    let w = Worker::start(&data, &[&file]);
    wait_until("streaming", Duration::from_secs(30), || {
        w.logs().iter().any(|l| l.contains("streaming changes"))
    });
    // A writer: set, replace, delete and insert documents while the copy runs.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (uri, stop) = (server.uri().to_owned(), stop.clone());
        std::thread::spawn(move || {
            let rt = runtime();
            let c = wait(&rt, mongodb::Client::with_uri_str(uri)).unwrap();
            let items = c.database("ic").collection::<Document>("items");
            let mut rng = Rng::new(7);
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                let id = (rng.below(N as u64 + 50)) as i32;
                let _ = match n % 4 {
                    0 => wait(
                        &rt,
                        items.update_one(doc! {"_id": id}, doc! {"$set": {"v": -n}}),
                    )
                    .map(|_| ()),
                    1 => wait(
                        &rt,
                        items.replace_one(doc! {"_id": id}, doc! {"v": 10_000 + n}),
                    )
                    .map(|_| ()),
                    2 => wait(&rt, items.delete_one(doc! {"_id": id})).map(|_| ()),
                    _ => wait(&rt, items.insert_one(doc! {"_id": N + n, "v": n})).map(|_| ()),
                };
                n += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    wait(
        &rt,
        signals.insert_one(doc! {"_id": "inc-1", "type": "execute-snapshot", "data": {
            "data-collections": ["ic\\.items"],
        }}),
    )
    .unwrap();
    wait_until(
        "the incremental snapshot's progress in the offsets",
        Duration::from_secs(60),
        || {
            let (status, _, body) = http(w.addr, "GET", "/connectors/ic/offsets", None);
            let o = &body["offsets"][0]["offset"];
            status == 200
                && o["incremental_snapshot"]
                    .as_str()
                    .is_some_and(|p| p.contains("\"after\":[\""))
        },
    );
    w.sigkill();
    let w = Worker::start(&data, &[&file]);
    wait_until(
        "the incremental snapshot to end",
        Duration::from_secs(120),
        || {
            w.logs()
                .iter()
                .any(|l| l.contains("incremental snapshot finished"))
        },
    );
    stop.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    // A marker after the writer stopped: once it is in the log, so is everything before it.
    wait(&rt, items.insert_one(doc! {"_id": -1, "v": 777_777})).unwrap();
    wait_until("the marker", Duration::from_secs(60), || {
        let mut offset = 0u64;
        loop {
            let (status, _, body) = http(
                w.addr,
                "GET",
                &format!("/topics/ic.ic.items/partitions/0/records?offset={offset}&max=10000"),
                None,
            );
            if status != 200 {
                return false;
            }
            if body["records"].to_string().contains("777777") {
                return true;
            }
            match body["next_offset"].as_u64() {
                Some(next) if next > offset => offset = next,
                _ => return false,
            }
        }
    });
    w.sigterm();
    let records = log_records(&data, "ic.ic.items");
    let mut state: std::collections::BTreeMap<i64, i64> = Default::default();
    let mut copied = 0;
    for (key, value) in &records {
        let Some(value) = value else { continue };
        let id: i64 = key.parse().expect("an integer _id");
        let payload = &value["payload"];
        match payload["op"].as_str().unwrap() {
            "d" => {
                state.remove(&id);
            }
            op => {
                if op == "r" {
                    copied += 1;
                    assert_eq!(payload["source"]["snapshot"], "incremental");
                }
                let after: Value =
                    serde_json::from_str(payload["after"].as_str().expect("an after image"))
                        .unwrap();
                let v = after["v"]
                    .as_i64()
                    .or_else(|| after["v"]["$numberLong"].as_str()?.parse().ok())
                    .expect("v");
                state.insert(id, v);
            }
        }
    }
    assert!(copied >= 40, "{copied} documents copied");
    let expected: std::collections::BTreeMap<i64, i64> = wait(&rt, async {
        let mut cursor = items.find(doc! {}).await.unwrap();
        let mut out = std::collections::BTreeMap::new();
        while cursor.advance().await.unwrap() {
            let d = cursor.deserialize_current().unwrap();
            out.insert(
                i64::from(d.get_i32("_id").unwrap()),
                i64::from(d.get_i32("v").unwrap()),
            );
        }
        out
    });
    assert_eq!(
        state, expected,
        "the events in order give the collection's content"
    );
}

/// `signal.enabled.channels=file`: JSON lines in `signal.file` run a blocking and an
/// incremental snapshot (the incremental one's watermarks still go into the signal
/// collection, and with `INSERT_DELETE` none is left there); an insert into the signal
/// collection is no signal then; the file is taken.
#[test]
fn file_channel_signals_run_blocking_and_incremental_snapshots() {
    const N: usize = 50;
    let server = MongoServer::start().expect("SecantusDB");
    let rt = runtime();
    let c = client(&rt, &server);
    let db = c.database("fs");
    let items = db.collection::<Document>("items");
    let signals = db.collection::<Document>("signals");
    let ids: Vec<ObjectId> = (0..N).map(|_| ObjectId::new()).collect();
    let docs: Vec<Document> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| doc! {"_id": id, "v": i as i64})
        .collect();
    wait(&rt, items.insert_many(docs)).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let signal_file = tmp.path().join("signals.txt");
    let signal_path = signal_file.display().to_string();
    let (data, file) = config_file(
        tmp.path(),
        config(
            "fs",
            &server,
            "fs",
            &[
                ("collection.include.list", "fs.items"),
                ("snapshot.mode", "no_data"),
                ("signal.data.collection", "fs.signals"),
                ("signal.enabled.channels", "file"),
                ("signal.file", &signal_path),
                ("signal.poll.interval.ms", "100"),
                ("incremental.snapshot.chunk.size", "16"),
                (
                    "incremental.snapshot.watermarking.strategy",
                    "insert_delete",
                ),
            ],
        ),
    );
    let w = Worker::start(&data, &[&file]);
    wait_until("streaming", Duration::from_secs(30), || {
        w.logs().iter().any(|l| l.contains("streaming changes"))
    });
    // No signal from the collection with the source channel off.
    wait(
        &rt,
        signals.insert_one(
            doc! {"_id": "row-1", "type": "log", "data": {"message": "from the collection"}},
        ),
    )
    .unwrap();
    let first = ObjectId::new();
    wait(&rt, items.insert_one(doc! {"_id": first, "v": -1i64})).unwrap();
    std::fs::write(
        &signal_file,
        "{\"id\": \"f-1\", \"type\": \"log\", \"data\": {\"message\": \"from the file\"}}\n\
         {\"id\": \"f-2\", \"type\": \"execute-snapshot\", \"data\": {\"data-collections\": [\"fs\\\\.items\"], \"type\": \"blocking\"}}\n",
    )
    .unwrap();
    let ops = |data: &Path| -> Vec<(String, String)> {
        log_records(data, "fs.fs.items")
            .iter()
            .filter_map(|(id, v)| {
                let op = v.as_ref()?["payload"]["op"].as_str()?.to_owned();
                Some((id.clone(), op))
            })
            .collect()
    };
    let reads = |w: &Worker| {
        let (status, _, body) = http(
            w.addr,
            "GET",
            "/topics/fs.fs.items/partitions/0/records?offset=0&max=10000",
            None,
        );
        if status != 200 {
            return 0;
        }
        body["records"].as_array().map_or(0, |records| {
            records
                .iter()
                .filter(|r| r["value"]["payload"]["op"] == "r")
                .count()
        })
    };
    wait_until("the blocking snapshot", Duration::from_secs(60), || {
        reads(&w) > N
    });
    assert!(w.logs().iter().any(|l| l.contains("from the file")));
    assert!(!w.logs().iter().any(|l| l.contains("from the collection")));
    assert!(!signal_file.exists(), "taken");
    std::fs::write(
        &signal_file,
        "{\"id\": \"f-3\", \"type\": \"execute-snapshot\", \"data\": {\"data-collections\": [\"fs\\\\.items\"]}}\n",
    )
    .unwrap();
    wait_until("the incremental snapshot", Duration::from_secs(60), || {
        reads(&w) >= 2 * (N + 1)
    });
    let last = ObjectId::new();
    wait(&rt, items.insert_one(doc! {"_id": last, "v": -2i64})).unwrap();
    wait_until("the insert after it", Duration::from_secs(60), || {
        let (status, _, body) = http(
            w.addr,
            "GET",
            "/topics/fs.fs.items/partitions/0/records?offset=0&max=10000",
            None,
        );
        status == 200 && body["records"].to_string().contains(&last.to_hex())
    });
    // INSERT_DELETE: each window closed by deleting its open document; none is left.
    wait_until("no watermark left", Duration::from_secs(30), || {
        let all = wait(&rt, signals.count_documents(doc! {})).unwrap();
        let row = wait(&rt, signals.count_documents(doc! {"_id": "row-1"})).unwrap();
        (all, row) == (1, 1)
    });
    w.sigterm();
    let ops = ops(&data);
    let count = |op: &str| ops.iter().filter(|(_, o)| o == op).count();
    assert_eq!(count("c"), 2, "each streamed insert once");
    assert_eq!(
        count("r"),
        2 * (N + 1),
        "both snapshots read every document once"
    );
}

/// The JSON values of topic `topic`'s partition 0 so far, through the worker's REST API.
fn topic_values(w: &Worker, topic: &str) -> Vec<Value> {
    let (status, _, body) = http(
        w.addr,
        "GET",
        &format!("/topics/{topic}/partitions/0/records?offset=0&max=10000"),
        None,
    );
    if status != 200 {
        return Vec::new();
    }
    body["records"]
        .as_array()
        .map(|rs| rs.iter().map(|r| r["value"].clone()).collect())
        .unwrap_or_default()
}

/// `notification.enabled.channels=log,sink`: the initial snapshot and an incremental one send
/// Debezium's notifications to the worker's log and, as records with Debezium's schemas, to
/// `notification.sink.topic.name`.
#[test]
fn snapshots_send_notifications_to_the_log_and_the_sink_topic() {
    let server = MongoServer::start().expect("SecantusDB");
    let rt = runtime();
    let c = client(&rt, &server);
    let db = c.database("nt");
    let items = db.collection::<Document>("items");
    let signals = db.collection::<Document>("signals");
    let docs: Vec<Document> = (0..10).map(|i| doc! {"_id": i, "v": i}).collect();
    wait(&rt, items.insert_many(docs)).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (data, file) = config_file(
        tmp.path(),
        config(
            "nt",
            &server,
            "nt",
            &[
                ("collection.include.list", "nt.items"),
                ("signal.data.collection", "nt.signals"),
                ("incremental.snapshot.chunk.size", "4"),
                ("notification.enabled.channels", "log,sink"),
                ("notification.sink.topic.name", "notes"),
            ],
        ),
    );
    let w = Worker::start(&data, &[&file]);
    let kinds = |w: &Worker| -> Vec<(String, String)> {
        topic_values(w, "notes")
            .iter()
            .map(|v| {
                let p = &v["payload"];
                (
                    p["aggregate_type"].as_str().unwrap_or_default().to_owned(),
                    p["type"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    let has = |w: &Worker, aggregate: &str, kind: &str| {
        kinds(w).iter().any(|(a, k)| a == aggregate && k == kind)
    };
    wait_until(
        "the initial snapshot's completion",
        Duration::from_secs(60),
        || has(&w, "Initial Snapshot", "COMPLETED"),
    );
    let values = topic_values(&w, "notes");
    let done = values
        .iter()
        .find(|v| v["payload"]["type"] == "TABLE_SCAN_COMPLETED")
        .expect("the collection's scan completed");
    assert_eq!(
        done["schema"]["name"], "io.debezium.connector.common.Notification",
        "{done}"
    );
    let data_of = |v: &Value| v["payload"]["additional_data"].clone();
    assert_eq!(data_of(done)["scanned_collection"], "nt.items");
    assert_eq!(data_of(done)["status"], "SUCCEEDED");
    assert_eq!(data_of(done)["connector_name"], "nt");
    assert_eq!(
        kinds(&w),
        [
            ("Initial Snapshot".into(), "STARTED".into()),
            ("Initial Snapshot".into(), "IN_PROGRESS".into()),
            ("Initial Snapshot".into(), "TABLE_SCAN_COMPLETED".into()),
            ("Initial Snapshot".into(), "COMPLETED".into()),
        ]
    );
    wait_until("streaming", Duration::from_secs(30), || {
        w.logs().iter().any(|l| l.contains("streaming changes"))
    });
    wait(
        &rt,
        signals.insert_one(doc! {"_id": "inc-1", "type": "execute-snapshot", "data": {
            "data-collections": ["nt\\.items"],
        }}),
    )
    .unwrap();
    wait_until(
        "the incremental snapshot's completion",
        Duration::from_secs(60),
        || has(&w, "Incremental Snapshot", "COMPLETED"),
    );
    let incremental: Vec<String> = kinds(&w)
        .into_iter()
        .filter(|(a, _)| a == "Incremental Snapshot")
        .map(|(_, k)| k)
        .collect();
    // 10 documents in chunks of 4: three chunks, then the table is done.
    assert_eq!(
        incremental,
        [
            "STARTED",
            "IN_PROGRESS",
            "IN_PROGRESS",
            "IN_PROGRESS",
            "TABLE_SCAN_COMPLETED",
            "COMPLETED"
        ]
    );
    let values = topic_values(&w, "notes");
    let scan = values
        .iter()
        .rfind(|v| v["payload"]["type"] == "TABLE_SCAN_COMPLETED")
        .unwrap();
    assert_eq!(data_of(scan)["total_rows_scanned"], "10", "{scan}");
    assert_eq!(
        scan["payload"]["id"],
        "inc-1",
        "an incremental snapshot's notifications carry its signal's id: {:?}",
        values
            .iter()
            .map(|v| (v["payload"]["type"].clone(), v["payload"]["id"].clone()))
            .collect::<Vec<_>>()
    );
    assert!(
        w.logs().iter().any(|l| l.contains("[Notification Service]")
            && l.contains("aggregateType='Incremental Snapshot', type='COMPLETED'")),
        "the log channel has them too"
    );
    w.sigterm();
}
