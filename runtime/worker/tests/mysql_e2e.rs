//! The MySQL/MariaDB source run by the `headwater` binary against a real MariaDB from the test
//! harness, with the seed config's shape (topic prefix `cdc`, RegexRouter `cdc\.public\.(.*)`
//! -> `warehouse.$1`, database `public`): existing rows arrive as `r` events, later changes as
//! `c`/`u`/`d` plus tombstones in Debezium's envelope, DDL in the middle of the stream changes
//! the row schema, and a worker killed with SIGKILL resumes (by binlog file/pos for the MySQL
//! class, by MariaDB GTID for the MariaDB class) without repeating or losing a change.

mod common;

use std::time::Duration;

use common::{http, wait_until, Worker};
use headwater_tests::MariaDbServer;
use mysql_async::prelude::Queryable;
use serde_json::{json, Value};

/// Every record of a topic's partition 0 as `(key, value)` JSON.
fn records(w: &Worker, topic: &str) -> Vec<(Value, Value)> {
    w.partition0_records(topic)
        .unwrap_or_default()
        .into_iter()
        .map(|mut r| (r["key"].take(), r["value"].take()))
        .collect()
}

fn ops(w: &Worker, topic: &str) -> Vec<String> {
    records(w, topic)
        .into_iter()
        .map(|(_, v)| {
            v["payload"]["op"]
                .as_str()
                .map_or("tombstone".to_owned(), str::to_owned)
        })
        .collect()
}

fn sql(runtime: &tokio::runtime::Runtime, server: &MariaDbServer, text: &str) {
    runtime.block_on(async {
        let mut conn = server.connect("").await.expect("connect");
        conn.query_drop(text)
            .await
            .unwrap_or_else(|e| panic!("{text}: {e}"));
        conn.disconnect().await.unwrap();
    });
}

fn golden_sql(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/../../tests/data/golden/debezium/mysql/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// A MariaDB with the seed tables and rows, its runtime for SQL, and a connector config file.
fn seeded(
    class: &str,
    name: &str,
) -> (
    tokio::runtime::Runtime,
    MariaDbServer,
    tempfile::TempDir,
    std::path::PathBuf,
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = MariaDbServer::start().expect("MariaDB");
    sql(&runtime, &server, &golden_sql("my_seed_schema.sql"));
    sql(
        &runtime,
        &server,
        "SET time_zone = '+00:00';
         INSERT INTO public.customers VALUES (1,'Ada','ada@example.com','2024-01-02 03:04:05.123456');
         INSERT INTO public.products VALUES (1,'SKU-1','Widget',9.99);
         INSERT INTO public.orders VALUES (1,1,19.98,'new','2024-01-02 03:04:05.123456','first order');",
    );
    let config = json!({
        "name": name,
        "config": {
            "connector.class": class,
            "database.hostname": "127.0.0.1",
            "database.port": server.port().to_string(),
            "database.user": "root",
            "database.server.id": "5400",
            "topic.prefix": "cdc",
            "table.include.list": "public.orders,public.customers,public.products",
            "snapshot.mode": "initial",
            "poll.interval.ms": "100",
            "transforms": "route",
            "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
            "transforms.route.regex": "cdc\\.public\\.(.*)",
            "transforms.route.replacement": "warehouse.$1"
        }
    });
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join(format!("{name}.json"));
    std::fs::write(&file, config.to_string()).unwrap();
    (runtime, server, tmp, file)
}

fn run(class: &str, name: &str, connector: &str) {
    let (runtime, server, tmp, file) = seeded(class, name);
    let data = tmp.path().join("data");
    let w = Worker::start(&data, &[&file]);
    wait_until(
        "snapshot of the three tables",
        Duration::from_secs(60),
        || {
            ops(&w, "warehouse.orders") == ["r"]
                && ops(&w, "warehouse.customers") == ["r"]
                && ops(&w, "warehouse.products") == ["r"]
        },
    );
    let (key, value) = records(&w, "warehouse.orders").remove(0);
    assert_eq!(key["schema"]["name"], "cdc.public.orders.Key");
    assert_eq!(key["payload"], json!({"id": 1}));
    assert_eq!(value["schema"]["name"], "cdc.public.orders.Envelope");
    assert_eq!(
        value["payload"]["after"]["amount"], "B84=",
        "19.98 as Debezium's base64 decimal"
    );
    assert_eq!(value["payload"]["source"]["connector"], connector);
    assert_eq!(value["payload"]["source"]["snapshot"], "first");
    let (_, _, status) = http(w.addr, "GET", &format!("/connectors/{name}/status"), None);
    assert_eq!(status["tasks"][0]["state"], "RUNNING", "{status}");

    sql(&runtime, &server, "INSERT INTO public.orders VALUES (2, 1, 5.50, 'new', '2024-03-01 10:00:00', 'second order');");
    sql(
        &runtime,
        &server,
        "UPDATE public.orders SET status = 'paid', amount = 6.00 WHERE id = 2;",
    );
    sql(&runtime, &server, "DELETE FROM public.orders WHERE id = 2;");
    wait_until("c, u, d and a tombstone", Duration::from_secs(30), || {
        ops(&w, "warehouse.orders") == ["r", "c", "u", "d", "tombstone"]
    });
    let recs = records(&w, "warehouse.orders");
    assert_eq!(recs[2].1["payload"]["after"]["status"], "paid");
    assert_eq!(recs[2].1["payload"]["before"]["status"], "new");
    assert_eq!(recs[4].1, Value::Null, "a real tombstone");
    let gtid = &recs[1].1["payload"]["source"]["gtid"];
    if connector == "mariadb" {
        assert!(
            gtid.as_str().is_some_and(|g| g.split('-').count() == 3),
            "MariaDB GTID in source: {gtid}"
        );
    } else {
        assert_eq!(
            gtid,
            &Value::Null,
            "the MySQL class leaves MariaDB GTIDs out, as Debezium's does"
        );
    }

    // DDL in the middle of the stream: the next row carries the new column.
    sql(
        &runtime,
        &server,
        "ALTER TABLE public.products ADD COLUMN color VARCHAR(10) DEFAULT 'red';",
    );
    sql(
        &runtime,
        &server,
        "INSERT INTO public.products VALUES (3, 'SKU-3', 'Thing', 2.50, 'blue');",
    );
    wait_until("insert after DDL", Duration::from_secs(30), || {
        ops(&w, "warehouse.products") == ["r", "c"]
    });
    let (_, v) = records(&w, "warehouse.products").remove(1);
    assert_eq!(v["payload"]["after"]["color"], "blue");
    let cdc = records(&w, "cdc");
    assert!(
        cdc.iter().any(|(_, v)| v["payload"]["ddl"]
            .as_str()
            .is_some_and(|d| d.contains("ADD COLUMN color"))),
        "schema change on the topic.prefix topic: {cdc:?}"
    );
    // Killed without a chance to clean up.
    w.sigkill();

    // Changes made while the worker is down arrive after the restart, once.
    sql(
        &runtime,
        &server,
        "INSERT INTO public.customers VALUES (2, 'Bob', NULL, '2024-03-02 00:00:00');",
    );
    sql(&runtime, &server, "BEGIN; INSERT INTO public.orders VALUES (10, 1, 1.00, 'new', '2024-03-02 00:00:00', 'a'), (11, 1, 2.00, 'new', '2024-03-02 00:00:00', 'b'); COMMIT;");
    let w = Worker::start(&data, &[&file]);
    wait_until(
        "the changes made while down",
        Duration::from_secs(30),
        || ops(&w, "warehouse.customers") == ["r", "c"] && ops(&w, "warehouse.orders").len() == 7,
    );
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(
        ops(&w, "warehouse.orders"),
        ["r", "c", "u", "d", "tombstone", "c", "c"],
        "nothing repeated"
    );
    assert_eq!(ops(&w, "warehouse.customers"), ["r", "c"]);
    assert_eq!(ops(&w, "warehouse.products"), ["r", "c"]);
    w.sigterm();
}

#[test]
fn mysql_class_snapshots_streams_and_resumes_by_file_and_position() {
    run(
        "io.debezium.connector.mysql.MySqlConnector",
        "mysql-source",
        "mysql",
    );
}

#[test]
fn mariadb_alias_resumes_by_gtid() {
    run("mariadb", "mariadb-source", "mariadb");
}

/// With `heartbeat.interval.ms`, heartbeat records carry the binlog position forward while
/// only tables outside `table.include.list` change, so the committed offset follows the binlog
/// instead of staying at the last captured change.
#[test]
fn heartbeats_carry_the_offset_past_uncaptured_changes() {
    let (runtime, server, tmp, file) = seeded("mariadb", "heartbeat-source");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    config["config"]["heartbeat.interval.ms"] = json!("200");
    std::fs::write(&file, config.to_string()).unwrap();
    sql(
        &runtime,
        &server,
        "CREATE TABLE public.audit (id int PRIMARY KEY, note text);",
    );
    let data = tmp.path().join("data");
    let w = Worker::start(&data, &[&file]);
    wait_until("the snapshot", Duration::from_secs(60), || {
        ops(&w, "warehouse.orders") == ["r"]
    });
    for i in 0..20 {
        sql(
            &runtime,
            &server,
            &format!("INSERT INTO public.audit VALUES ({i}, 'not captured');"),
        );
    }
    let (file_now, pos_now): (String, u64) = runtime.block_on(async {
        let mut conn = server.connect("").await.unwrap();
        let row: mysql_async::Row = conn
            .query_first("SHOW MASTER STATUS")
            .await
            .unwrap()
            .unwrap();
        let out = (row.get(0).unwrap(), row.get(1).unwrap());
        conn.disconnect().await.unwrap();
        out
    });
    wait_until(
        "the committed offset to pass the uncaptured writes",
        Duration::from_secs(30),
        || {
            let (status, _, body) =
                http(w.addr, "GET", "/connectors/heartbeat-source/offsets", None);
            let o = &body["offsets"][0]["offset"];
            status == 200
                && o["file"].as_str() == Some(file_now.as_str())
                && o["pos"].as_u64().is_some_and(|p| p >= pos_now)
        },
    );
    let beats = records(&w, "__debezium-heartbeat.cdc");
    assert!(!beats.is_empty(), "heartbeat records");
    let (key, value) = &beats[0];
    assert_eq!(
        key["schema"]["name"],
        "io.debezium.connector.common.ServerNameKey"
    );
    assert_eq!(key["payload"], json!({"serverName": "cdc"}));
    assert_eq!(
        value["schema"]["name"],
        "io.debezium.connector.common.Heartbeat"
    );
    assert!(value["payload"]["ts_ms"].as_i64().is_some_and(|t| t > 0));
    assert_eq!(
        ops(&w, "warehouse.orders"),
        ["r"],
        "no data records for the audit table"
    );
    w.sigterm();
}
