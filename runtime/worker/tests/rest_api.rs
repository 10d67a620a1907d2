//! The Kafka Connect-compatible REST API over real HTTP against the `headwater` binary, with
//! the datagen source: every connector endpoint (happy path and errors), log browsing, a worker
//! restart that brings connectors back as they were, and a SIGKILL in the middle of a run after
//! which the topic still holds every record exactly once, in order.

mod common;

use std::time::Duration;

use common::{wait_until, Worker};
use serde_json::json;

fn datagen(name: &str, topic: &str, iterations: i64, rate: u32) -> String {
    json!({"name": name, "config": {
        "connector.class": "io.headwater.connect.datagen.DatagenConnector",
        "kafka.topic": topic, "iterations": iterations.to_string(),
        "records.per.second": rate.to_string(), "batch.size": "50"}})
    .to_string()
}

/// Every `seq` in a topic's partition 0 through the records endpoint.
fn seqs(w: &Worker, topic: &str) -> Vec<i64> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let (status, _, body) = w.call(
            "GET",
            &format!("/topics/{topic}/partitions/0/records?offset={offset}&max=1000"),
            None,
        );
        if status == 404 {
            return out;
        }
        assert_eq!(status, 200, "{body}");
        let records = body["records"].as_array().unwrap();
        for r in records {
            out.push(r["value"]["payload"]["seq"].as_i64().unwrap());
        }
        let next = body["next_offset"].as_i64().unwrap();
        if records.is_empty() || next == offset {
            return out;
        }
        offset = next;
    }
}

fn state_of(w: &Worker, name: &str) -> (String, Vec<String>) {
    let (_, _, s) = w.call("GET", &format!("/connectors/{name}/status"), None);
    let tasks = s["tasks"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|t| t["state"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default();
    (
        s["connector"]["state"].as_str().unwrap_or("").to_owned(),
        tasks,
    )
}

#[test]
fn every_connector_endpoint_behaves_like_kafka_connect() {
    let tmp = tempfile::tempdir().unwrap();
    let w = Worker::start(&tmp.path().join("data"), &[]);

    // Create.
    let (status, headers, info) = w.call(
        "POST",
        "/connectors",
        Some(&datagen("gen", "gen.events", 200, 0)),
    );
    assert_eq!(status, 201, "{info}");
    assert!(headers
        .iter()
        .any(|(k, v)| k == "location" && v == "/connectors/gen"));
    assert_eq!(info["name"], "gen");
    assert_eq!(info["type"], "source");
    assert_eq!(info["config"]["name"], "gen");
    let (status, _, err) = w.call("POST", "/connectors", Some(&datagen("gen", "x", 1, 0)));
    assert_eq!((status, err["error_code"].as_u64()), (409, Some(409)));
    assert_eq!(err["message"], "Connector gen already exists");

    // Bad requests answer 400 with a message that says what to fix.
    let (status, _, err) = w.call("POST", "/connectors", Some("{not json"));
    assert_eq!(status, 400, "{err}");
    assert!(err["message"].as_str().unwrap().contains("not valid JSON"));
    let (status, _, err) = w.call(
        "POST",
        "/connectors",
        Some(r#"{"name":"x","config":{"connector.class":"Nope"}}"#),
    );
    assert_eq!(status, 400);
    assert!(err["message"]
        .as_str()
        .unwrap()
        .contains("available connectors are: "));
    assert!(err["message"]
        .as_str()
        .unwrap()
        .contains("io.headwater.connect.datagen.DatagenConnector"));
    let (status, _, err) = w.call(
        "POST",
        "/connectors",
        Some(r#"{"name":"x","config":{"connector.class":"datagen","batch.size":"0"}}"#),
    );
    assert_eq!(status, 400);
    let message = err["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "Connector configuration is invalid and contains the following 2 error(s):"
        ),
        "{message}"
    );
    assert!(message.contains("kafka.topic"), "{message}");

    // Read.
    wait_until("200 records", Duration::from_secs(30), || {
        seqs(&w, "gen.events").len() == 200
    });
    assert_eq!(seqs(&w, "gen.events"), (0..200).collect::<Vec<_>>());
    assert_eq!(w.call("GET", "/connectors", None).2, json!(["gen"]));
    let (_, _, expanded) = w.call("GET", "/connectors?expand=status&expand=info", None);
    assert_eq!(expanded["gen"]["status"]["connector"]["state"], "RUNNING");
    assert_eq!(expanded["gen"]["info"]["name"], "gen");
    assert_eq!(
        w.call("GET", "/connectors/gen", None).2["tasks"],
        json!([{"connector": "gen", "task": 0}])
    );
    assert_eq!(
        w.call("GET", "/connectors/gen/config", None).2["kafka.topic"],
        "gen.events"
    );
    let (_, _, status_body) = w.call("GET", "/connectors/gen/status", None);
    assert_eq!(status_body["connector"]["worker_id"], w.addr.to_string());
    assert_eq!(status_body["tasks"][0]["id"], 0);
    assert_eq!(
        w.call("GET", "/connectors/gen/tasks", None).2[0]["id"],
        json!({"connector": "gen", "task": 0})
    );
    assert_eq!(
        w.call("GET", "/connectors/gen/tasks/0/status", None).2["state"],
        "RUNNING"
    );
    let (status, _, err) = w.call("GET", "/connectors/gen/tasks/7/status", None);
    assert_eq!(
        (status, err["message"].as_str()),
        (404, Some("No status found for task gen-7"))
    );
    assert_eq!(
        w.call("GET", "/connectors/gen/topics", None).2,
        json!({"gen": {"topics": ["gen.events"]}})
    );
    let (_, _, offsets) = w.call("GET", "/connectors/gen/offsets", None);
    assert_eq!(
        offsets,
        json!({"offsets": [{"partition": {"datagen": "gen.events"}, "offset": {"seq": 199}}]})
    );

    // Lifecycle.
    assert_eq!(w.call("PUT", "/connectors/gen/pause", None).0, 202);
    wait_until("paused", Duration::from_secs(30), || {
        state_of(&w, "gen") == ("PAUSED".into(), vec!["PAUSED".into()])
    });
    assert_eq!(w.call("PUT", "/connectors/gen/resume", None).0, 202);
    wait_until("running", Duration::from_secs(30), || {
        state_of(&w, "gen") == ("RUNNING".into(), vec!["RUNNING".into()])
    });
    assert_eq!(w.call("POST", "/connectors/gen/restart", None).0, 204);
    let (status, _, restarting) = w.call("POST", "/connectors/gen/restart?includeTasks=true", None);
    assert_eq!(status, 202);
    assert_eq!(restarting["tasks"][0]["state"], "RESTARTING");
    assert_eq!(
        w.call("POST", "/connectors/gen/tasks/0/restart", None).0,
        204
    );
    assert_eq!(w.call("PUT", "/connectors/gen/topics/reset", None).0, 202);
    assert_eq!(
        w.call("GET", "/connectors/gen/topics", None).2,
        json!({"gen": {"topics": []}})
    );

    // Offsets can only change while stopped.
    let alter = r#"{"offsets":[{"partition":{"datagen":"gen.events"},"offset":{"seq":99}}]}"#;
    let (status, _, err) = w.call("PATCH", "/connectors/gen/offsets", Some(alter));
    assert_eq!(status, 400);
    assert!(err["message"]
        .as_str()
        .unwrap()
        .starts_with("Connectors must be in the STOPPED state"));
    assert_eq!(w.call("PUT", "/connectors/gen/stop", None).0, 204);
    assert_eq!(state_of(&w, "gen"), ("STOPPED".into(), vec![]));
    let (status, _, msg) = w.call("PATCH", "/connectors/gen/offsets", Some(alter));
    assert_eq!(status, 200, "{msg}");
    assert!(msg["message"]
        .as_str()
        .unwrap()
        .contains("altered successfully"));
    assert_eq!(
        w.call("GET", "/connectors/gen/offsets", None).2["offsets"][0]["offset"],
        json!({"seq": 99})
    );
    assert_eq!(
        w.call(
            "PATCH",
            "/connectors/gen/offsets",
            Some(r#"{"offsets":[]}"#)
        )
        .0,
        400
    );
    let (status, _, msg) = w.call("DELETE", "/connectors/gen/offsets", None);
    assert_eq!(status, 200);
    assert!(msg["message"]
        .as_str()
        .unwrap()
        .contains("reset successfully"));
    assert_eq!(
        w.call("GET", "/connectors/gen/offsets", None).2,
        json!({"offsets": []})
    );

    // Config updates.
    let flat = r#"{"connector.class":"datagen","kafka.topic":"gen.events","iterations":"200","records.per.second":"0"}"#;
    let (status, _, info) = w.call("PUT", "/connectors/gen/config", Some(flat));
    assert_eq!(status, 200, "{info}");
    let (status, headers, _) = w.call("PUT", "/connectors/other/config", Some(r#"{"connector.class":"datagen","kafka.topic":"other.events","iterations":"3","records.per.second":"0"}"#));
    assert_eq!(status, 201);
    assert!(headers
        .iter()
        .any(|(k, v)| k == "location" && v == "/connectors/other"));
    let (status, _, err) = w.call(
        "PUT",
        "/connectors/other/config",
        Some(r#"{"name":"mismatch","connector.class":"datagen","kafka.topic":"t"}"#),
    );
    assert_eq!(status, 400);
    assert_eq!(
        err["message"],
        "Connector name configuration (mismatch) doesn't match connector name in the URL (other)"
    );
    let (status, _, info) = w.call(
        "PATCH",
        "/connectors/other/config",
        Some(r#"{"batch.size":"7","keys":null}"#),
    );
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["config"]["batch.size"], "7");

    // Plugins and validation.
    let (_, _, plugins) = w.call("GET", "/connector-plugins", None);
    assert!(plugins.as_array().unwrap().iter().any(|p| p["class"]
        == "io.headwater.connect.datagen.DatagenConnector"
        && p["type"] == "source"));
    assert!(
        plugins
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["type"] == "source" || p["type"] == "sink"),
        "connectorsOnly defaults to true"
    );
    assert!(plugins.as_array().unwrap().iter().any(|p| p["class"]
        == "io.debezium.connector.jdbc.JdbcSinkConnector"
        && p["type"] == "sink"));
    let (_, _, all) = w.call("GET", "/connector-plugins?connectorsOnly=false", None);
    for kind in ["transformation", "predicate", "converter"] {
        assert!(
            all.as_array().unwrap().iter().any(|p| p["type"] == kind),
            "{kind} listed"
        );
    }
    let (_, _, keys) = w.call("GET", "/connector-plugins/DatagenConnector/config", None);
    assert!(keys
        .as_array()
        .unwrap()
        .iter()
        .any(|k| k["name"] == "kafka.topic" && k["required"] == true));
    assert_eq!(w.call("GET", "/connector-plugins/Nope/config", None).0, 404);
    let (status, _, infos) = w.call("PUT", "/connector-plugins/Datagen/config/validate", Some(r#"{"connector.class":"io.headwater.connect.datagen.DatagenConnector","tasks.max":"0"}"#));
    assert_eq!(status, 200, "validate answers 200 even when invalid");
    assert_eq!(
        infos["error_count"], 3,
        "name, tasks.max and kafka.topic: {infos}"
    );
    assert_eq!(
        infos["name"],
        "io.headwater.connect.datagen.DatagenConnector"
    );
    let (status, _, _) = w.call(
        "PUT",
        "/connector-plugins/Postgres/config/validate",
        Some(r#"{"connector.class":"datagen"}"#),
    );
    assert_eq!(status, 400);

    // Log browsing.
    let (_, _, topics) = w.call("GET", "/topics", None);
    assert!(topics
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "gen.events" && t["partitions"] == 1));
    let (_, _, topic) = w.call("GET", "/topics/gen.events", None);
    assert_eq!(topic["partitions"][0]["earliest_offset"], 0);
    assert_eq!(w.call("GET", "/topics/nope", None).0, 404);
    let (_, _, recs) = w.call(
        "GET",
        "/topics/gen.events/partitions/0/records?offset=5&max=2",
        None,
    );
    assert_eq!(recs["records"].as_array().unwrap().len(), 2);
    assert_eq!(recs["records"][0]["offset"], 5);
    assert_eq!(recs["records"][0]["key"]["payload"]["id"], 5);
    assert_eq!(recs["next_offset"], 7);

    // Delete.
    assert_eq!(w.call("DELETE", "/connectors/other", None).0, 204);
    let (status, _, err) = w.call("GET", "/connectors/other", None);
    assert_eq!(
        (status, err["message"].as_str()),
        (404, Some("Connector other not found"))
    );
    assert_eq!(w.call("DELETE", "/connectors/other", None).0, 404);
    assert_eq!(
        w.call("PUT", "/connectors/other/pause", None).2["message"],
        "Unknown connector other"
    );
    assert_eq!(
        w.call("GET", "/connectors/other/status", None).2["message"],
        "No status found for connector other"
    );
    w.sigterm();
}

#[test]
fn a_restarted_worker_brings_connectors_back_as_they_were() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let file = tmp.path().join("from-file.json");
    std::fs::write(&file, datagen("from-file", "file.events", 50, 0)).unwrap();
    let w = Worker::start(&data, &[&file]);
    wait_until("file connector done", Duration::from_secs(30), || {
        seqs(&w, "file.events").len() == 50
    });
    assert_eq!(
        w.call(
            "POST",
            "/connectors",
            Some(&datagen("running", "running.events", 1_000_000, 100))
        )
        .0,
        201
    );
    assert_eq!(
        w.call(
            "POST",
            "/connectors",
            Some(&datagen("paused", "paused.events", 1_000_000, 100))
        )
        .0,
        201
    );
    wait_until("paused connector wrote", Duration::from_secs(30), || {
        !seqs(&w, "paused.events").is_empty()
    });
    assert_eq!(w.call("PUT", "/connectors/paused/pause", None).0, 202);
    assert_eq!(w.call("POST", "/connectors", Some(&json!({"name": "stopped", "config": {"connector.class": "datagen", "kafka.topic": "s"}, "initial_state": "STOPPED"}).to_string())).0, 201);
    wait_until("paused", Duration::from_secs(30), || {
        state_of(&w, "paused").1 == ["PAUSED"]
    });
    w.sigterm();

    let w = Worker::start(&data, &[&file]);
    assert_eq!(
        w.call("GET", "/connectors", None).2,
        json!(["from-file", "paused", "running", "stopped"])
    );
    wait_until("states restored", Duration::from_secs(30), || {
        state_of(&w, "running") == ("RUNNING".into(), vec!["RUNNING".into()])
            && state_of(&w, "paused") == ("PAUSED".into(), vec!["PAUSED".into()])
            && state_of(&w, "stopped") == ("STOPPED".into(), vec![])
    });
    let before = seqs(&w, "running.events").len();
    wait_until(
        "running connector continues",
        Duration::from_secs(30),
        || seqs(&w, "running.events").len() > before + 3,
    );
    let running = seqs(&w, "running.events");
    assert_eq!(running, (0..running.len() as i64).collect::<Vec<_>>());
    assert_eq!(
        seqs(&w, "file.events"),
        (0..50).collect::<Vec<_>>(),
        "the file connector did not start over"
    );
    w.sigterm();
}

#[test]
fn sigkill_mid_run_loses_and_repeats_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let total = 3000;
    let w = Worker::start(&data, &[]);
    assert_eq!(
        w.call(
            "POST",
            "/connectors",
            Some(&datagen("gen", "crash.events", total, 1500))
        )
        .0,
        201
    );
    wait_until("some records", Duration::from_secs(30), || {
        seqs(&w, "crash.events").len() > 300
    });
    w.sigkill();
    let w = Worker::start(&data, &[]);
    wait_until("some more records", Duration::from_secs(30), || {
        seqs(&w, "crash.events").len() > 1200
    });
    w.sigkill();
    let w = Worker::start(&data, &[]);
    wait_until("all records", Duration::from_secs(30), || {
        seqs(&w, "crash.events").len() >= total as usize
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        seqs(&w, "crash.events"),
        (0..total).collect::<Vec<_>>(),
        "exactly once, in order"
    );
    w.sigterm();
}
