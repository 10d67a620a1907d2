//! The client subcommands (`headwater connectors ...`, `topics`, `consume`) run as the real
//! binary against a real worker over HTTP: JSON output when stdout is not a terminal, one JSON
//! record per line from `consume` (also with `--follow`), one `error:` line with exit code 1
//! for server errors and 2 for usage errors.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use common::{client_command, headwater, wait_until, Run, Worker};
use serde_json::{json, Value};

fn datagen(name: &str, topic: &str, iterations: i64, rate: u32) -> Value {
    json!({"name": name, "config": {
        "connector.class": "datagen", "kafka.topic": topic,
        "iterations": iterations.to_string(), "records.per.second": rate.to_string(),
        "batch.size": "10"}})
}

fn assert_error(run: &Run, code: i32, contains: &str) {
    assert_eq!(
        run.code,
        Some(code),
        "stdout {:?} stderr {:?}",
        run.stdout,
        run.stderr
    );
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one error line: {:?}", run.stderr);
    assert!(lines[0].starts_with("error: "), "{:?}", lines[0]);
    assert!(
        lines[0].contains(contains),
        "{:?} lacks {contains:?}",
        lines[0]
    );
}

fn ok(run: Run) -> Run {
    assert_eq!(
        run.code,
        Some(0),
        "stdout {:?} stderr {:?}",
        run.stdout,
        run.stderr
    );
    run
}

fn seqs(lines: &[Value]) -> Vec<i64> {
    lines
        .iter()
        .map(|l| l["value"]["payload"]["seq"].as_i64().expect("seq"))
        .collect()
}

#[test]
fn connectors_subcommands_manage_a_worker() {
    let tmp = tempfile::tempdir().unwrap();
    let w = Worker::start(&tmp.path().join("data"), &[]);
    let url = w.url();
    let env = [("HEADWATER_URL", url.as_str())];
    let file = tmp.path().join("gen.json");
    std::fs::write(&file, datagen("gen", "cli.events", 30, 0).to_string()).unwrap();
    let file = file.to_str().unwrap();

    let created = ok(headwater(&["connectors", "create", file], &env));
    let info: Value = serde_json::from_str(created.stdout.trim()).unwrap();
    assert_eq!(info["name"], "gen");
    assert_eq!(info["config"]["kafka.topic"], "cli.events");

    // --url beats HEADWATER_URL, and works before or after the subcommand.
    let listed = ok(headwater(
        &["connectors", "--url", &url, "list"],
        &[("HEADWATER_URL", "http://127.0.0.1:1")],
    ));
    assert_eq!(listed.stdout.trim(), r#"["gen"]"#);
    let listed = ok(headwater(&["connectors", "list", "--url", &url], &[]));
    assert_eq!(listed.stdout.trim(), r#"["gen"]"#);

    let got = ok(headwater(&["connectors", "get", "gen"], &env));
    let got: Value = serde_json::from_str(got.stdout.trim()).unwrap();
    assert_eq!(got["type"], "source");
    assert_eq!(got["tasks"], json!([{"connector": "gen", "task": 0}]));

    wait_until("30 records", Duration::from_secs(30), || {
        let run = headwater(&["consume", "cli.events"], &env);
        run.code == Some(0) && run.stdout.lines().count() == 30
    });
    let all = ok(headwater(&["consume", "cli.events"], &env)).json_lines();
    assert_eq!(seqs(&all), (0..30).collect::<Vec<_>>());
    let first = &all[0];
    assert_eq!(first["topic"], "cli.events");
    assert_eq!(first["partition"], 0);
    assert_eq!(first["offset"], 0);
    for key in ["timestamp", "key", "value", "headers"] {
        assert!(first.get(key).is_some(), "{key} in {first}");
    }
    let some = ok(headwater(
        &["consume", "cli.events", "--max", "3", "--partition", "0"],
        &env,
    ))
    .json_lines();
    assert_eq!(seqs(&some), [0, 1, 2]);

    let status = ok(headwater(&["connectors", "status", "gen"], &env));
    let status: Value = serde_json::from_str(status.stdout.trim()).unwrap();
    assert_eq!(status["connector"]["state"], "RUNNING");

    let paused = ok(headwater(&["connectors", "pause", "gen"], &env));
    assert!(paused.stdout.contains("gen"), "{}", paused.stdout);
    wait_until("PAUSED", Duration::from_secs(10), || {
        let s = headwater(&["connectors", "status", "gen", "--json"], &env);
        s.stdout.contains(r#""state":"PAUSED""#)
    });
    ok(headwater(&["connectors", "resume", "gen"], &env));
    wait_until("RUNNING", Duration::from_secs(10), || {
        let s = headwater(&["connectors", "status", "gen"], &env);
        let v: Value = serde_json::from_str(s.stdout.trim()).unwrap_or(Value::Null);
        v["tasks"][0]["state"] == "RUNNING"
    });
    let restarted = ok(headwater(
        &["connectors", "restart", "gen", "--include-tasks"],
        &env,
    ));
    let restarted: Value = serde_json::from_str(restarted.stdout.trim()).unwrap();
    assert_eq!(restarted["tasks"][0]["state"], "RESTARTING");
    let plain = ok(headwater(&["connectors", "restart", "gen"], &env));
    assert!(
        plain.stdout.contains("Restarted connector gen"),
        "{}",
        plain.stdout
    );

    // update: a flat .properties file replaces the config.
    let props = tmp.path().join("gen.properties");
    std::fs::write(
        &props,
        "connector.class=datagen\nkafka.topic=cli.events\niterations=40\nrecords.per.second=0\n",
    )
    .unwrap();
    let updated = ok(headwater(
        &["connectors", "update", "gen", props.to_str().unwrap()],
        &env,
    ));
    let updated: Value = serde_json::from_str(updated.stdout.trim()).unwrap();
    assert_eq!(updated["config"]["iterations"], "40");
    wait_until("40 records", Duration::from_secs(30), || {
        headwater(&["consume", "cli.events"], &env)
            .stdout
            .lines()
            .count()
            == 40
    });

    let topics = ok(headwater(&["topics"], &env));
    let topics: Value = serde_json::from_str(topics.stdout.trim()).unwrap();
    assert!(topics
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "cli.events" && t["partitions"] == 1));

    // Server errors: exit 1 with the REST message.
    std::fs::write(
        tmp.path().join("bad.json"),
        r#"{"name":"bad","config":{"connector.class":"datagen","batch.size":"0"}}"#,
    )
    .unwrap();
    let bad = headwater(
        &[
            "connectors",
            "create",
            tmp.path().join("bad.json").to_str().unwrap(),
        ],
        &env,
    );
    assert_error(&bad, 1, "Connector configuration is invalid");
    assert_error(
        &headwater(&["connectors", "create", file], &env),
        1,
        "Connector gen already exists (HTTP 409)",
    );

    let deleted = ok(headwater(&["connectors", "delete", "gen"], &env));
    assert!(deleted.stdout.contains("Deleted connector gen"));
    assert_error(
        &headwater(&["connectors", "get", "gen"], &env),
        1,
        "Connector gen not found (HTTP 404)",
    );
    assert_error(
        &headwater(&["connectors", "pause", "gen"], &env),
        1,
        "Unknown connector gen",
    );
    assert_error(
        &headwater(&["consume", "no.such.topic"], &env),
        1,
        "Topic no.such.topic not found",
    );
    assert_error(
        &headwater(&["consume", "cli.events", "--partition", "7"], &env),
        1,
        "has no partition 7",
    );
    w.sigterm();
}

#[test]
fn consume_follow_prints_records_as_they_arrive() {
    let tmp = tempfile::tempdir().unwrap();
    let w = Worker::start(&tmp.path().join("data"), &[]);
    let url = w.url();
    let (status, _, body) = w.call(
        "POST",
        "/connectors",
        Some(&datagen("slow", "slow.events", 100_000, 40).to_string()),
    );
    assert_eq!(status, 201, "{body}");
    wait_until("the topic", Duration::from_secs(30), || {
        w.call("GET", "/topics/slow.events", None).0 == 200
    });

    // From the beginning: the first 60 records take ~1.5 s to exist, so --follow must wait
    // for most of them; it stops at --max.
    let run = client_command(
        &[
            "consume",
            "slow.events",
            "--follow",
            "--from-beginning",
            "--max",
            "60",
            "--url",
            &url,
        ],
        &[],
    )
    .output()
    .unwrap();
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&run.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(seqs(&lines), (0..60).collect::<Vec<_>>());

    // From the end: only records written after the start are printed, each as soon as it
    // arrives (read line by line while the process runs).
    let (_, _, described) = w.call("GET", "/topics/slow.events", None);
    let end_before = described["partitions"][0]["latest_offset"]
        .as_i64()
        .unwrap();
    let mut child = client_command(&["consume", "slow.events", "--follow", "--url", &url], &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut offsets = Vec::new();
    for _ in 0..5 {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        offsets.push(v["offset"].as_i64().unwrap());
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(offsets[0] >= end_before, "{offsets:?} vs {end_before}");
    // Increasing, with gaps where the log holds transaction markers.
    assert!(offsets.windows(2).all(|w| w[1] > w[0]), "{offsets:?}");
    w.sigterm();
}

#[test]
fn usage_and_connection_errors() {
    let tmp = tempfile::tempdir().unwrap();
    // Nothing listens on this port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    assert_error(
        &headwater(&["connectors", "list", "--url", &url], &[]),
        1,
        "cannot reach the worker",
    );
    assert_error(
        &headwater(
            &[
                "connectors",
                "list",
                "--url",
                "https://127.0.0.1:1",
                "--cacert",
                "/nonexistent/ca.pem",
            ],
            &[],
        ),
        2,
        "--cacert /nonexistent/ca.pem",
    );
    assert_error(
        &headwater(
            &["connectors", "list"],
            &[("HEADWATER_URL", "localhost:8083")],
        ),
        2,
        "must start with http://",
    );
    let missing = tmp.path().join("missing.json");
    assert_error(
        &headwater(
            &[
                "connectors",
                "create",
                missing.to_str().unwrap(),
                "--url",
                &url,
            ],
            &[],
        ),
        2,
        "cannot read connector file",
    );
    assert_error(
        &headwater(&["connectors", "frobnicate"], &[]),
        2,
        "unrecognized subcommand",
    );
    assert_error(&headwater(&["consume"], &[]), 2, "TOPIC");
    let help = ok(headwater(&["connectors", "--help"], &[]));
    for sub in [
        "list", "get", "create", "update", "status", "pause", "resume", "restart", "delete",
    ] {
        assert!(help.stdout.contains(sub), "{sub} in {}", help.stdout);
    }
    assert!(help.stdout.contains("HEADWATER_URL"), "{}", help.stdout);
}
