//! Idle-slot test through the `headwater` binary: while no captured table changes, but other
//! tables of the same database and another database keep writing WAL, the slot's
//! `confirmed_flush_lsn` keeps advancing past that activity (so the server can recycle WAL),
//! and nothing is emitted; a later captured change still arrives and is confirmed.

mod common;

use std::time::Duration;

use common::{http, wait_until, Worker};
use headwater_tests::PostgresServer;
use serde_json::Value;

fn parse_lsn(s: &str) -> u64 {
    let (hi, lo) = s.split_once('/').expect("an LSN");
    (u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap()
}

fn topic_len(w: &Worker, topic: &str) -> usize {
    w.partition0_records(topic).map_or(0, |r| r.len())
}

#[test]
fn confirmed_flush_advances_without_captured_changes() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = PostgresServer::start().expect("PostgreSQL");
    rt.block_on(server.create_database("idle")).unwrap();
    rt.block_on(server.create_database("elsewhere")).unwrap();
    let db = rt.block_on(server.connect("idle")).unwrap();
    let other_db = rt.block_on(server.connect("elsewhere")).unwrap();
    // The harness server runs with synchronous_commit=off, where a commit returns before its WAL
    // is written, so `pg_current_wal_lsn()` right after it may not include it yet (which let a
    // round's target fall behind the previous round's confirmed position under load). These
    // sessions' commits wait for the flush.
    for c in [&db, &other_db] {
        rt.block_on(c.batch_execute("SET synchronous_commit = on"))
            .unwrap();
    }
    rt.block_on(db.batch_execute(
        "CREATE TABLE captured (id int PRIMARY KEY, note text);
         CREATE TABLE noise (id serial PRIMARY KEY, note text);",
    ))
    .unwrap();
    rt.block_on(other_db.batch_execute("CREATE TABLE noise (id serial PRIMARY KEY, note text);"))
        .unwrap();

    let tmp = tempfile::tempdir().unwrap();
    let config = serde_json::json!({"name": "idle", "config": {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.hostname": "127.0.0.1", "database.port": server.port().to_string(),
        "database.user": "postgres", "database.dbname": "idle", "topic.prefix": "idle",
        "table.include.list": "public.captured", "slot.name": "idle_slot",
        "publication.name": "idle_pub", "status.update.interval.ms": "500"}});
    let file = tmp.path().join("idle.json");
    std::fs::write(&file, config.to_string()).unwrap();
    let w = Worker::start(&tmp.path().join("data"), &[&file]);
    let confirmed = || -> u64 {
        rt.block_on(db.query_one(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'idle_slot'",
            &[],
        ))
        .map(|r| r.get::<_, Option<String>>(0).map_or(0, |s| parse_lsn(&s)))
        .unwrap_or(0)
    };
    // The WAL position after a session's last write (it is flushed: commits wait for that).
    let current = |elsewhere: bool| -> u64 {
        let c = if elsewhere { &other_db } else { &db };
        parse_lsn(
            &rt.block_on(c.query_one("SELECT pg_current_wal_lsn()::text", &[]))
                .unwrap()
                .get::<_, String>(0),
        )
    };
    wait_until("the slot", Duration::from_secs(30), || confirmed() > 0);
    // The task creates the slot while it starts; it reports RUNNING once started.
    wait_until("the task running", Duration::from_secs(30), || {
        let (_, _, status) = http(w.addr, "GET", "/connectors/idle/status", None);
        status["tasks"][0]["state"] == "RUNNING"
    });

    let start = confirmed();
    let mut last = start;
    for round in 0..3 {
        // Filtered-out changes in the captured database, then WAL of another database only.
        rt.block_on(db.batch_execute(
            "INSERT INTO noise (note) SELECT 'noise' FROM generate_series(1, 200);",
        ))
        .unwrap();
        let target = current(false);
        wait_until(
            &format!("round {round}: the slot past filtered-out changes"),
            Duration::from_secs(30),
            || confirmed() >= target,
        );
        rt.block_on(other_db.batch_execute(
            "INSERT INTO noise (note) SELECT 'elsewhere' FROM generate_series(1, 200);",
        ))
        .unwrap();
        let target = current(true);
        wait_until(
            &format!("round {round}: the slot past another database's WAL"),
            Duration::from_secs(30),
            || confirmed() >= target,
        );
        let now = confirmed();
        assert!(now > last, "round {round}: confirmed_flush_lsn advanced");
        last = now;
    }
    assert_eq!(topic_len(&w, "idle.public.noise"), 0, "nothing emitted");

    // A captured change still arrives, and the slot is confirmed past it.
    rt.block_on(db.batch_execute("INSERT INTO captured VALUES (1, 'kept')"))
        .unwrap();
    let target = current(false);
    wait_until("the captured insert", Duration::from_secs(30), || {
        topic_len(&w, "idle.public.captured") == 1
    });
    wait_until(
        "the slot past the captured change",
        Duration::from_secs(30),
        || confirmed() >= target,
    );
    let (_, _, body) = http(
        w.addr,
        "GET",
        "/topics/idle.public.captured/partitions/0/records?offset=0&max=1",
        None,
    );
    let value: &Value = &body["records"][0]["value"]["payload"];
    assert_eq!(value["op"], "c");
    assert_eq!(value["after"]["note"], "kept");
    w.sigterm();
}

/// With `heartbeat.interval.ms`, heartbeat records on `__debezium-heartbeat.<prefix>` carry the
/// position forward while only uncaptured tables change, so the connector's stored offset (not
/// only the slot) follows the WAL.
#[test]
fn heartbeats_move_the_stored_offset_past_uncaptured_wal() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = PostgresServer::start().expect("PostgreSQL");
    rt.block_on(server.create_database("beat")).unwrap();
    let db = rt.block_on(server.connect("beat")).unwrap();
    rt.block_on(db.batch_execute(
        "SET synchronous_commit = on;
         CREATE TABLE captured (id int PRIMARY KEY, note text);
         CREATE TABLE noise (id serial PRIMARY KEY, note text);
         INSERT INTO captured VALUES (1, 'snapshot row');",
    ))
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let config = serde_json::json!({"name": "beat", "config": {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.hostname": "127.0.0.1", "database.port": server.port().to_string(),
        "database.user": "postgres", "database.dbname": "beat", "topic.prefix": "beat",
        "table.include.list": "public.captured", "slot.name": "beat_slot",
        "publication.name": "beat_pub", "status.update.interval.ms": "200",
        "heartbeat.interval.ms": "200"}});
    let file = tmp.path().join("beat.json");
    std::fs::write(&file, config.to_string()).unwrap();
    let w = Worker::start(&tmp.path().join("data"), &[&file]);
    wait_until("the snapshot", Duration::from_secs(30), || {
        topic_len(&w, "beat.public.captured") == 1
    });
    let stored_lsn = || -> u64 {
        let (status, _, body) = http(w.addr, "GET", "/connectors/beat/offsets", None);
        if status != 200 {
            return 0;
        }
        body["offsets"][0]["offset"]["lsn_proc"]
            .as_u64()
            .unwrap_or(0)
    };
    for _ in 0..3 {
        rt.block_on(db.batch_execute(
            "INSERT INTO noise (note) SELECT 'noise' FROM generate_series(1, 200);",
        ))
        .unwrap();
    }
    let target = parse_lsn(
        &rt.block_on(db.query_one("SELECT pg_current_wal_lsn()::text", &[]))
            .unwrap()
            .get::<_, String>(0),
    );
    wait_until(
        "the stored offset past the uncaptured writes",
        Duration::from_secs(30),
        || stored_lsn() >= target,
    );
    let (_, _, body) = http(
        w.addr,
        "GET",
        "/topics/__debezium-heartbeat.beat/partitions/0/records?offset=0&max=1",
        None,
    );
    let beat = &body["records"][0];
    assert_eq!(beat["key"]["payload"]["serverName"], "beat", "{body}");
    assert!(beat["value"]["payload"]["ts_ms"]
        .as_i64()
        .is_some_and(|t| t > 0));
    assert_eq!(
        topic_len(&w, "beat.public.noise"),
        0,
        "nothing emitted for noise"
    );
    w.sigterm();
}
