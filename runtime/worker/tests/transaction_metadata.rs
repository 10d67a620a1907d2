//! `provide.transaction.metadata` through the `headwater` binary, for the PostgreSQL source
//! against a harness PostgreSQL and the MariaDB source against a harness MariaDB: a transaction
//! touching two tables gets a BEGIN and an END record on `<prefix>.transaction` (the END with
//! the event count per table) and every change event carries its `transaction` block with the
//! total and per-table order, as Debezium writes them.

mod common;

use std::time::Duration;

use common::{http, wait_until, Worker};
use headwater_tests::{MariaDbServer, PostgresServer};
use mysql_async::prelude::Queryable;
use serde_json::{json, Value};

fn values(w: &Worker, topic: &str) -> Vec<Value> {
    w.partition0_records(topic)
        .unwrap_or_default()
        .into_iter()
        .map(|mut r| r["value"]["payload"].take())
        .collect()
}

/// Checks the metadata of two transactions: the first wrote a1, b1, a2 (in that order), the
/// second updated a1.
fn check(w: &Worker, prefix: &str, ns: &str) {
    let tx_topic = format!("{prefix}.transaction");
    wait_until(
        "both transactions' metadata",
        Duration::from_secs(30),
        || values(w, &tx_topic).len() == 4,
    );
    let tx = values(w, &tx_topic);
    let statuses: Vec<&str> = tx.iter().map(|v| v["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["BEGIN", "END", "BEGIN", "END"], "{tx:?}");
    let first = tx[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(tx[1]["id"], first.as_str());
    assert_ne!(tx[2]["id"], first.as_str());
    assert_eq!(tx[0]["event_count"], Value::Null);
    assert_eq!(tx[1]["event_count"], 3);
    assert_eq!(
        tx[1]["data_collections"],
        json!([
            {"data_collection": format!("{ns}.a"), "event_count": 2},
            {"data_collection": format!("{ns}.b"), "event_count": 1}
        ])
    );
    assert_eq!(tx[3]["event_count"], 1);
    let a = values(w, &format!("{prefix}.{ns}.a"));
    let b = values(w, &format!("{prefix}.{ns}.b"));
    assert_eq!(a.len(), 3, "{a:?}");
    let block = |v: &Value| {
        (
            v["transaction"]["id"].as_str().unwrap().to_owned(),
            v["transaction"]["total_order"].as_i64().unwrap(),
            v["transaction"]["data_collection_order"].as_i64().unwrap(),
        )
    };
    assert_eq!(block(&a[0]), (first.clone(), 1, 1));
    assert_eq!(block(&b[0]), (first.clone(), 2, 1));
    assert_eq!(block(&a[1]), (first, 3, 2));
    assert_eq!(a[2]["op"], "u");
    assert_eq!(block(&a[2]).0, tx[2]["id"].as_str().unwrap());
    assert_eq!((block(&a[2]).1, block(&a[2]).2), (1, 1));
}

#[test]
fn postgres_transactions_get_begin_end_records_and_blocks() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = PostgresServer::start().expect("PostgreSQL");
    rt.block_on(server.create_database("txm")).unwrap();
    let db = rt.block_on(server.connect("txm")).unwrap();
    rt.block_on(db.batch_execute(
        "CREATE TABLE a (id int PRIMARY KEY, v int); CREATE TABLE b (id int PRIMARY KEY, v int);",
    ))
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("txm.json");
    std::fs::write(
        &file,
        json!({"name": "txm", "config": {
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "database.hostname": "127.0.0.1", "database.port": server.port().to_string(),
            "database.user": "postgres", "database.dbname": "txm", "topic.prefix": "pg",
            "table.include.list": "public.a,public.b", "slot.name": "txm_slot",
            "publication.name": "txm_pub", "provide.transaction.metadata": "true"}})
        .to_string(),
    )
    .unwrap();
    let w = Worker::start(&tmp.path().join("data"), &[&file]);
    wait_until("the task running", Duration::from_secs(30), || {
        let (_, _, status) = http(w.addr, "GET", "/connectors/txm/status", None);
        status["tasks"][0]["state"] == "RUNNING"
    });
    // Wait for streaming: the snapshot of the empty tables completes at once.
    wait_until("the snapshot to finish", Duration::from_secs(30), || {
        w.logs().iter().any(|l| l.contains("snapshot finished"))
    });
    rt.block_on(db.batch_execute(
        "BEGIN; INSERT INTO a VALUES (1, 1); INSERT INTO b VALUES (1, 1); INSERT INTO a VALUES (2, 1); COMMIT;
         UPDATE a SET v = 2 WHERE id = 1;",
    ))
    .unwrap();
    check(&w, "pg", "public");
    let tx = values(&w, "pg.transaction");
    let id = tx[0]["id"].as_str().unwrap();
    let (xid, lsn) = id.split_once(':').expect("txId:LSN");
    assert!(
        xid.parse::<u64>().is_ok() && lsn.parse::<u64>().is_ok(),
        "{id}"
    );
    w.sigterm();
}

#[test]
fn mariadb_transactions_get_begin_end_records_and_blocks() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = MariaDbServer::start().expect("MariaDB");
    rt.block_on(server.create_database("shop")).unwrap();
    let mut conn = rt.block_on(server.connect("shop")).unwrap();
    rt.block_on(conn.query_drop(
        "CREATE TABLE a (id int PRIMARY KEY, v int); CREATE TABLE b (id int PRIMARY KEY, v int);",
    ))
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("txm.json");
    std::fs::write(
        &file,
        json!({"name": "txm", "config": {
            "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
            "database.hostname": "127.0.0.1", "database.port": server.port().to_string(),
            "database.user": "root", "database.server.id": "5402", "topic.prefix": "my",
            "database.include.list": "shop", "poll.interval.ms": "100",
            "provide.transaction.metadata": "true"}})
        .to_string(),
    )
    .unwrap();
    let w = Worker::start(&tmp.path().join("data"), &[&file]);
    wait_until("the snapshot to finish", Duration::from_secs(30), || {
        w.logs().iter().any(|l| l.contains("snapshot finished"))
    });
    rt.block_on(conn.query_drop(
        "BEGIN; INSERT INTO a VALUES (1, 1); INSERT INTO b VALUES (1, 1); INSERT INTO a VALUES (2, 1); COMMIT;
         UPDATE a SET v = 2 WHERE id = 1;",
    ))
    .unwrap();
    check(&w, "my", "shop");
    let tx = values(&w, "my.transaction");
    let id = tx[0]["id"].as_str().unwrap();
    assert_eq!(id.split('-').count(), 3, "a MariaDB GTID: {id}");
    w.sigterm();
}
