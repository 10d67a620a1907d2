//! The seed connector config (Debezium's PostgreSQL connector with RegexRouter
//! `cdc\.public\.(.*)` -> `warehouse.$1`, `config/connectors/postgres-cdc-source.json`) run by the
//! `headwater` binary against a real PostgreSQL from the test harness: existing rows arrive as
//! `r` events on `warehouse.*`, later changes as `c`/`u`/`d` plus tombstones, in Debezium's
//! envelope with Debezium's context headers (a new run id per worker run); a restarted worker
//! resumes streaming without repeating or losing a change. A stop during `snapshot.delay.ms`
//! ends the wait at once.

mod common;

use std::time::Duration;

use common::{http, http_raw, seeded_server, sql, wait_until, Worker};
use serde_json::Value;

/// Every record of a topic's partition 0 as `(key, value)` JSON.
fn records(w: &Worker, topic: &str) -> Vec<(Value, Value)> {
    w.partition0_records(topic)
        .unwrap_or_default()
        .into_iter()
        .map(|mut r| (r["key"].take(), r["value"].take()))
        .collect()
}

/// The headers of each record of a topic's partition 0 as `(key, text value)` pairs.
fn headers(w: &Worker, topic: &str) -> Vec<Vec<(String, String)>> {
    w.partition0_records(topic)
        .unwrap_or_default()
        .iter()
        .map(|r| {
            r["headers"]
                .as_array()
                .expect("headers")
                .iter()
                .map(|h| {
                    let text = h["value"].as_str().unwrap_or_default();
                    (h["key"].as_str().unwrap().to_owned(), text.to_owned())
                })
                .collect()
        })
        .collect()
}

/// The `__debezium.context.runId` of each record (panics on a record without one), after
/// checking the other context headers are the seed connector's.
fn run_ids(w: &Worker, topic: &str) -> Vec<String> {
    headers(w, topic)
        .into_iter()
        .map(|hs| {
            let keys: Vec<&str> = hs.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(
                keys,
                [
                    "__debezium.context.connectorLogicalName",
                    "__debezium.context.taskId",
                    "__debezium.context.connectorName",
                    "__debezium.context.runId"
                ],
                "{hs:?}"
            );
            assert_eq!(
                (hs[0].1.as_str(), hs[1].1.as_str(), hs[2].1.as_str()),
                ("cdc", "0", "postgresql")
            );
            assert_eq!(hs[3].1.len(), 36, "a UUID: {hs:?}");
            hs[3].1.clone()
        })
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

#[test]
fn seed_connector_config_streams_debezium_events() {
    let (runtime, server, config) = seeded_server(
        "INSERT INTO public.customers VALUES (1,'Ada','ada@example.com','2024-01-02 03:04:05.123456+00');
         INSERT INTO public.products VALUES (1,'SKU-1','Widget',9.99);
         INSERT INTO public.orders VALUES (1,1,19.98,'new','2024-01-02 03:04:05.123456+00','first order');",
    );
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("postgres-cdc-source.json");
    std::fs::write(&file, config.to_string()).unwrap();
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
    assert_eq!(key["payload"], serde_json::json!({"id": 1}));
    assert_eq!(value["schema"]["name"], "cdc.public.orders.Envelope");
    assert_eq!(
        value["payload"]["after"]["amount"], "B84=",
        "19.98 as Debezium's base64 decimal"
    );
    assert_eq!(value["payload"]["source"]["connector"], "postgresql");
    assert_eq!(value["payload"]["source"]["name"], "cdc");
    let (_, _, status) = http(
        w.addr,
        "GET",
        "/connectors/postgres-cdc-source/status",
        None,
    );
    assert_eq!(status["tasks"][0]["state"], "RUNNING", "{status}");
    // The snapshot's progress, in the status (Headwater's `snapshot` member) and the metrics.
    let snapshot = &status["tasks"][0]["snapshot"];
    assert_eq!(snapshot["running"], false, "{status}");
    assert_eq!(snapshot["rows"], 3, "{status}");
    assert_eq!(snapshot["tables"], 3, "{status}");
    assert_eq!(snapshot["tables_done"], 3, "{status}");
    let (_, _, metrics) = http_raw(w.addr, "GET", "/metrics", None, &[]);
    for line in [
        "headwater_task_snapshot_running{connector=\"postgres-cdc-source\",task=\"0\"} 0",
        "headwater_task_snapshot_rows{connector=\"postgres-cdc-source\",task=\"0\"} 3",
        "headwater_task_snapshot_tables_done{connector=\"postgres-cdc-source\",task=\"0\"} 3",
    ] {
        assert!(metrics.contains(line), "metrics lack {line}:\n{metrics}");
    }

    sql(&runtime, &server, "INSERT INTO public.orders VALUES (2, 1, 5.50, 'new', '2024-03-01 10:00:00+00', 'second order');");
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
    assert_eq!(recs[4].1, Value::Null, "a real tombstone");
    // Debezium's context headers (extended.headers.enabled, on by default) on every event and
    // the tombstone, as Kafka clients read them: one run id for the worker's run.
    let first_run = run_ids(&w, "warehouse.orders");
    assert!(
        first_run.iter().all(|r| *r == first_run[0]),
        "{first_run:?}"
    );
    w.sigterm();

    // Changes made while the worker is down arrive after the restart, once.
    sql(
        &runtime,
        &server,
        "INSERT INTO public.customers VALUES (2, 'Bob', NULL, '2024-03-02 00:00:00+00');",
    );
    let w = Worker::start(&data, &[&file]);
    wait_until(
        "the change made while down",
        Duration::from_secs(30),
        || ops(&w, "warehouse.customers") == ["r", "c"],
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        ops(&w, "warehouse.orders"),
        ["r", "c", "u", "d", "tombstone"],
        "nothing repeated"
    );
    assert_eq!(ops(&w, "warehouse.customers"), ["r", "c"]);
    let runs = run_ids(&w, "warehouse.customers");
    assert_eq!(runs[0], first_run[0]);
    assert_ne!(runs[1], first_run[0], "a new run id after the restart");
    w.sigterm();
}

/// Issue 6's end-to-end chain: the seed config plus `route,unwrap,mask`, where `mask` only
/// applies to the customers topic through a `TopicNameMatches` predicate.
#[test]
fn transform_chain_routes_unwraps_and_masks() {
    let (runtime, server, mut config) = seeded_server(
        "INSERT INTO public.customers VALUES (1,'Ada','ada@example.com','2024-01-02 03:04:05.123456+00');
         INSERT INTO public.orders VALUES (1,1,19.98,'new','2024-01-02 03:04:05.123456+00','first order');",
    );
    let tmp = tempfile::tempdir().unwrap();
    let c = config["config"].as_object_mut().unwrap();
    c.insert("slot.name".into(), "chain_slot".into());
    c.insert("transforms".into(), "route,unwrap,mask".into());
    c.insert(
        "transforms.unwrap.type".into(),
        "io.debezium.transforms.ExtractNewRecordState".into(),
    );
    c.insert("transforms.unwrap.add.fields".into(), "op,table".into());
    c.insert(
        "transforms.mask.type".into(),
        "org.apache.kafka.connect.transforms.MaskField$Value".into(),
    );
    c.insert("transforms.mask.fields".into(), "email".into());
    c.insert("extended.headers.enabled".into(), "false".into());
    c.insert("transforms.mask.predicate".into(), "isCustomers".into());
    c.insert("predicates".into(), "isCustomers".into());
    c.insert(
        "predicates.isCustomers.type".into(),
        "org.apache.kafka.connect.transforms.predicates.TopicNameMatches".into(),
    );
    c.insert(
        "predicates.isCustomers.pattern".into(),
        "warehouse\\.customers".into(),
    );
    let file = tmp.path().join("chain.json");
    std::fs::write(&file, config.to_string()).unwrap();

    let w = Worker::start(&tmp.path().join("data"), &[&file]);
    wait_until("both snapshot records", Duration::from_secs(60), || {
        records(&w, "warehouse.customers").len() == 1 && records(&w, "warehouse.orders").len() == 1
    });
    let (_, customer) = records(&w, "warehouse.customers").remove(0);
    let payload = &customer["payload"];
    assert_eq!(payload["name"], "Ada", "flattened row: {customer}");
    assert_eq!(
        payload["email"], "",
        "masked by the predicate-gated MaskField"
    );
    assert_eq!(payload["__op"], "r");
    assert_eq!(payload["__table"], "customers");
    assert!(payload.get("before").is_none() && payload.get("source").is_none());
    let (_, order) = records(&w, "warehouse.orders").remove(0);
    assert_eq!(order["payload"]["note"], "first order", "{order}");
    assert_eq!(order["payload"]["status"], "new");

    sql(
        &runtime,
        &server,
        "UPDATE public.customers SET email = 'ada@new.example' WHERE id = 1;",
    );
    wait_until("the update", Duration::from_secs(30), || {
        records(&w, "warehouse.customers").len() == 2
    });
    let (_, updated) = records(&w, "warehouse.customers").remove(1);
    assert_eq!(updated["payload"]["__op"], "u");
    assert_eq!(updated["payload"]["email"], "");
    assert_eq!(
        headers(&w, "warehouse.customers"),
        [vec![], vec![]],
        "extended.headers.enabled=false: no context headers"
    );
    w.sigterm();
}

/// Tables created and dropped while the stream runs (here 1,000 per batch, outside
/// `table.include.list` but in the `FOR ALL TABLES` publication) leave nothing behind: once the
/// catalog has lost them and the stream is past the drop, their relations are forgotten, and
/// the captured table's events keep flowing.
#[test]
fn relations_dropped_from_the_catalog_are_forgotten() {
    let (runtime, server, config) = seeded_server("");
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("postgres-cdc-source.json");
    std::fs::write(&file, config.to_string()).unwrap();
    let w = Worker::start(&tmp.path().join("data"), &[&file]);
    let (_, _, _) = http(
        w.addr,
        "GET",
        "/connectors/postgres-cdc-source/status",
        None,
    );
    wait_until("the stream runs", Duration::from_secs(60), || {
        let (_, _, status) = http(
            w.addr,
            "GET",
            "/connectors/postgres-cdc-source/status",
            None,
        );
        status["tasks"][0]["state"] == "RUNNING"
            && status["tasks"][0]["snapshot"]["running"] == false
    });
    let churn = |batch: &str, verb: &str| {
        format!(
            "DO $$ BEGIN FOR i IN 1..1000 LOOP EXECUTE format('{verb}', '{batch}' || i); END LOOP; END $$;"
        )
    };
    let order = |id: i32| {
        format!("INSERT INTO public.orders VALUES ({id}, 1, 1.00, 'new', '2024-03-01 10:00:00+00', 'o');")
    };
    // A thousand tables, each with a row in one transaction, and an order after them.
    let create_and_fill = |batch: &str, id: i32| {
        sql(
            &runtime,
            &server,
            &churn(batch, "CREATE TABLE %I (id int PRIMARY KEY)"),
        );
        sql(
            &runtime,
            &server,
            &churn(batch, "INSERT INTO %I VALUES (1)"),
        );
        sql(&runtime, &server, &order(id));
    };
    create_and_fill("churn_a_", 1);
    wait_until("the first order", Duration::from_secs(60), || {
        ops(&w, "warehouse.orders") == ["c"]
    });
    sql(&runtime, &server, &churn("churn_a_", "DROP TABLE %I"));
    // A thousand new relations make the stream look for dropped ones; the next commit after
    // that look forgets them.
    create_and_fill("churn_b_", 2);
    wait_until("the second order", Duration::from_secs(60), || {
        ops(&w, "warehouse.orders") == ["c", "c"]
    });
    wait_until(
        "the dropped relations forgotten",
        Duration::from_secs(30),
        || {
            w.logs().iter().any(|l| {
                l.contains("forgot relations dropped from the catalog")
                    && l.contains("relations=1000")
            })
        },
    );
    sql(&runtime, &server, &order(3));
    wait_until("the third order", Duration::from_secs(60), || {
        ops(&w, "warehouse.orders") == ["c", "c", "c"]
    });
    let (_, _, status) = http(
        w.addr,
        "GET",
        "/connectors/postgres-cdc-source/status",
        None,
    );
    assert_eq!(status["tasks"][0]["state"], "RUNNING", "{status}");
    w.sigterm();
}

/// `snapshot.delay.ms` holds the snapshot back, and a stop meanwhile ends the wait at once
/// (the engine passes the stop to the starting task) instead of after the delay.
#[test]
fn a_stop_during_the_snapshot_delay_ends_it_at_once() {
    let (_runtime, _server, mut config) = seeded_server("");
    config["config"]["snapshot.delay.ms"] = Value::String("600000".into());
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("postgres-cdc-source.json");
    std::fs::write(&file, config.to_string()).unwrap();
    let w = Worker::start(&tmp.path().join("data"), &[&file]);
    wait_until("the snapshot delay", Duration::from_secs(60), || {
        w.logs()
            .iter()
            .any(|l| l.contains("waiting snapshot.delay.ms"))
    });
    let (_, _, status) = http(
        w.addr,
        "GET",
        "/connectors/postgres-cdc-source/status",
        None,
    );
    let reason = status["tasks"][0]["waiting"]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.contains("snapshot.delay.ms"),
        "the status says what the task waits for: {status}"
    );
    let (status, _, body) = http(w.addr, "PUT", "/connectors/postgres-cdc-source/stop", None);
    assert!(status < 300, "{status} {body}");
    wait_until("the task to stop", Duration::from_secs(10), || {
        w.logs()
            .iter()
            .any(|l| l.contains("stopped while waiting snapshot.delay.ms"))
    });
    let (_, _, status) = http(
        w.addr,
        "GET",
        "/connectors/postgres-cdc-source/status",
        None,
    );
    assert_eq!(status["connector"]["state"], "STOPPED", "{status}");
    w.sigterm();
}
