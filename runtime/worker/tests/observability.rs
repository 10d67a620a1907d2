//! Over real HTTP against the `headwater` binary: `GET /health`, `GET /metrics` (Prometheus
//! text), REST authentication (Bearer token and Basic users, `/health` open, the CLI's
//! credentials), HTTPS on the REST listener (and the CLI's trust settings), config providers (`${env:..}`, `${file:..}`
//! resolved at task start, raw in `GET .../config` and `.../tasks`, unresolvable ones
//! reported), passwords kept out of the logs, and `errors.log.include.messages`.

mod common;

use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use common::{headwater, http_raw, wait_until, Worker};
use serde_json::{json, Value};

fn datagen(name: &str, topic: &str, iterations: i64) -> String {
    json!({"name": name, "config": {
        "connector.class": "datagen", "kafka.topic": topic,
        "iterations": iterations.to_string(), "records.per.second": "0", "batch.size": "50"}})
    .to_string()
}

/// The value of the sample `name{labels}` in a Prometheus text body.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

/// Records in partition 0 of `topic` (-1 while it does not exist). Offsets are not counts:
/// each source transaction ends with a marker that takes an offset.
fn topic_len(w: &Worker, topic: &str) -> i64 {
    w.partition0_records(topic).map_or(-1, |r| r.len() as i64)
}

#[test]
fn health_and_metrics() {
    let tmp = tempfile::tempdir().unwrap();
    let w = Worker::start(&tmp.path().join("data"), &[]);
    let (status, _, body) = w.call("GET", "/health", None);
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"status": "healthy", "message": "Worker has completed startup and is ready to handle requests."})
    );

    let (status, _, info) = w.call("POST", "/connectors", Some(&datagen("m", "m.events", 200)));
    assert_eq!(status, 201, "{info}");
    wait_until("200 records", Duration::from_secs(30), || {
        topic_len(&w, "m.events") >= 200
    });
    let labels = r#"{connector="m",task="0"}"#;
    let mut text = String::new();
    wait_until("counters at 200", Duration::from_secs(10), || {
        text = http_raw(w.addr, "GET", "/metrics", None, &[]).2;
        sample(
            &text,
            &format!("headwater_task_records_written_total{labels}"),
        ) == Some(200.0)
    });
    let (status, headers, _) = http_raw(w.addr, "GET", "/metrics", None, &[]);
    assert_eq!(status, 200);
    assert!(headers
        .iter()
        .any(|(k, v)| k == "content-type" && v.starts_with("text/plain; version=0.0.4")));
    assert!(
        text.contains("# TYPE headwater_task_records_written_total counter"),
        "{text}"
    );
    assert!(text.contains("headwater_build_info{version=\""), "{text}");
    assert_eq!(sample(&text, "headwater_connectors"), Some(1.0));
    assert_eq!(
        sample(
            &text,
            &format!("headwater_task_records_polled_total{labels}")
        ),
        Some(200.0)
    );
    let commits = sample(&text, &format!("headwater_task_commits_total{labels}")).unwrap();
    assert!(commits >= 1.0, "{text}");
    assert!(
        sample(
            &text,
            &format!("headwater_task_bytes_written_total{labels}")
        )
        .unwrap()
            > 0.0
    );
    assert_eq!(
        sample(
            &text,
            &format!("headwater_task_commit_latency_seconds_count{labels}")
        ),
        Some(commits)
    );
    assert_eq!(
        sample(
            &text,
            r#"headwater_task_commit_latency_seconds_bucket{connector="m",task="0",le="+Inf"}"#
        ),
        Some(commits)
    );
    assert_eq!(
        sample(&text, &format!("headwater_task_commit_bytes_count{labels}")),
        Some(commits)
    );
    assert_eq!(
        sample(
            &text,
            r#"headwater_connector_state{connector="m",state="RUNNING"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"headwater_task_state{connector="m",task="0",state="RUNNING"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"headwater_log_end_offset{topic="m.events",partition="0"}"#
        ),
        {
            let (_, _, described) = w.call("GET", "/topics/m.events", None);
            described["partitions"][0]["latest_offset"].as_f64()
        }
    );
    assert_eq!(
        sample(
            &text,
            r#"headwater_log_start_offset{topic="m.events",partition="0"}"#
        ),
        Some(0.0)
    );
    assert!(sample(&text, "headwater_log_disk_bytes").unwrap() > 0.0);
    // datagen events carry no Debezium source.ts_ms: no lag sample.
    assert!(
        !text.contains("headwater_task_source_lag_milliseconds{"),
        "{text}"
    );
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let value = line.rsplit(' ').next().unwrap();
        assert!(value.parse::<f64>().is_ok(), "not a sample: {line}");
    }

    let (status, _, _) = w.call("PUT", "/connectors/m/pause", None);
    assert_eq!(status, 202);
    wait_until("PAUSED in metrics", Duration::from_secs(10), || {
        let text = http_raw(w.addr, "GET", "/metrics", None, &[]).2;
        sample(
            &text,
            r#"headwater_connector_state{connector="m",state="PAUSED"}"#,
        ) == Some(1.0)
            && sample(
                &text,
                r#"headwater_task_state{connector="m",task="0",state="PAUSED"}"#,
            ) == Some(1.0)
    });
    w.sigterm();
}

#[test]
fn rest_authentication_with_token_and_basic_users() {
    let tmp = tempfile::tempdir().unwrap();
    let w = Worker::start_with(
        &tmp.path().join("data"),
        &[],
        &["--rest-auth-user", "alice:wonder-land-9"],
        &[("HEADWATER_REST_AUTH_TOKEN", "tok-4f9e2a")],
    );
    let basic = format!("Basic {}", BASE64.encode("alice:wonder-land-9"));
    let wrong = format!("Basic {}", BASE64.encode("alice:nope"));

    let (status, headers, body) = http_raw(w.addr, "GET", "/connectors", None, &[]);
    assert_eq!(status, 401, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error_code"], 401);
    assert!(headers
        .iter()
        .any(|(k, v)| k == "www-authenticate" && v.contains("Basic")));
    for (header, expected) in [
        ("Bearer tok-4f9e2a", 200),
        (basic.as_str(), 200),
        ("Bearer tok-4f9e2b", 401),
        (wrong.as_str(), 401),
    ] {
        let (status, _, body) = http_raw(
            w.addr,
            "GET",
            "/connectors",
            None,
            &[("Authorization", header)],
        );
        assert_eq!(status, expected, "{header}: {body}");
    }
    // Unknown paths and /metrics are protected too; /health is open.
    assert_eq!(http_raw(w.addr, "GET", "/nope", None, &[]).0, 401);
    assert_eq!(http_raw(w.addr, "GET", "/metrics", None, &[]).0, 401);
    let (status, _, body) = http_raw(w.addr, "GET", "/health", None, &[]);
    assert_eq!((status, body.contains("healthy")), (200, true), "{body}");

    // The CLI's credentials.
    let url = w.url();
    let denied = headwater(&["connectors", "list", "--url", &url], &[]);
    assert_eq!(denied.code, Some(1));
    assert!(
        denied.stderr.contains("Authentication required"),
        "{}",
        denied.stderr
    );
    let listed = headwater(
        &["connectors", "list", "--url", &url],
        &[("HEADWATER_TOKEN", "tok-4f9e2a")],
    );
    assert_eq!(
        (listed.code, listed.stdout.trim()),
        (Some(0), "[]"),
        "{}",
        listed.stderr
    );
    let listed = headwater(
        &[
            "connectors",
            "list",
            "--url",
            &url,
            "--user",
            "alice:wonder-land-9",
        ],
        &[],
    );
    assert_eq!(
        (listed.code, listed.stdout.trim()),
        (Some(0), "[]"),
        "{}",
        listed.stderr
    );
    let with_userinfo = format!("http://alice:wonder-land-9@{}", w.addr);
    let listed = headwater(&["topics", "--url", &with_userinfo], &[]);
    assert_eq!(listed.code, Some(0), "{}", listed.stderr);

    let logs = w.logs().join("\n");
    assert!(
        !logs.contains("tok-4f9e2a") && !logs.contains("wonder-land-9"),
        "{logs}"
    );
    w.sigterm();
}

#[test]
fn rest_over_https_with_the_clis_trust_settings() {
    let pki = headwater_tests::pki::TestPki::new();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let file = |name: &str| pki.file(name).display().to_string();
    let (cert, key, ca, other_ca) = (
        file("server.pem"),
        file("server-key.pem"),
        file("ca.pem"),
        file("other-ca.pem"),
    );
    let start_failure = |args: &[&str]| {
        let mut all = vec![
            "worker",
            "--data-dir",
            data.to_str().unwrap(),
            "--rest-listen",
            "127.0.0.1:0",
            "--kafka-listen",
            "127.0.0.1:0",
        ];
        all.extend_from_slice(args);
        let output = common::client_command(&all, &[])
            .env_remove("HEADWATER_CONFIG")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        stderr
    };
    // Half a pair, a key that is not the certificate's, a file that is no certificate.
    let stderr = start_failure(&["--rest-tls-cert", &cert]);
    assert!(stderr.contains("go together"), "{stderr}");
    let stderr = start_failure(&["--rest-tls-cert", &ca, "--rest-tls-key", &key]);
    assert!(
        stderr.contains("rest_tls_cert") && stderr.contains("ca.pem"),
        "{stderr}"
    );
    let stderr = start_failure(&["--rest-tls-cert", &key, "--rest-tls-key", &key]);
    assert!(stderr.contains("no PEM certificate"), "{stderr}");

    let w = Worker::start_with(
        &data,
        &[],
        &["--rest-tls-cert", &cert, "--rest-tls-key", &key],
        &[],
    );
    assert!(w.https && w.url().starts_with("https://"), "{}", w.url());
    // The certificate names localhost.
    let url = format!("https://localhost:{}", w.addr.port());
    let run = headwater(&["connectors", "list", "--url", &url, "--cacert", &ca], &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.json_lines(), [json!([])]);
    // curl (another TLS stack) gets the metrics, with the served certificate's expiry
    // (rcgen's certificates end on 4096-01-01).
    let curl = std::process::Command::new("curl")
        .args(["-sS", "--fail", "--cacert", &ca])
        .arg(format!("{url}/metrics"))
        .output()
        .expect("curl (scripts/install-deps installs it)");
    let metrics = String::from_utf8_lossy(&curl.stdout);
    assert!(
        curl.status.success(),
        "{}",
        String::from_utf8_lossy(&curl.stderr)
    );
    assert!(
        metrics.contains(
            "headwater_tls_certificate_expiry_timestamp_seconds{listener=\"rest\"} 67090118400"
        ),
        "{metrics}"
    );
    let connector = tmp.path().join("c.json");
    std::fs::write(&connector, datagen("tls", "tls.events", 5)).unwrap();
    let run = headwater(
        &[
            "connectors",
            "create",
            connector.to_str().unwrap(),
            "--url",
            &url,
        ],
        &[("HEADWATER_CACERT", ca.as_str())],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let run = headwater(&["connectors", "list", "--url", &url, "--cacert", &ca], &[]);
    assert_eq!(run.json_lines(), [json!(["tls"])]);

    // A CA that did not sign the certificate, and a name the certificate does not carry.
    let run = headwater(
        &["connectors", "list", "--url", &url, "--cacert", &other_ca],
        &[],
    );
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("--cacert"), "{}", run.stderr);
    let by_ip = format!("https://{}", w.addr);
    let run = headwater(
        &["connectors", "list", "--url", &by_ip, "--cacert", &ca],
        &[],
    );
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("certificate"), "{}", run.stderr);

    // Plain HTTP on the HTTPS port gets no HTTP answer, and the listener keeps serving.
    let mut plain = std::net::TcpStream::connect(w.addr).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    use std::io::{Read as _, Write as _};
    plain
        .write_all(b"GET /connectors HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(!answer.starts_with(b"HTTP/"), "{answer:?}");
    let run = headwater(&["connectors", "list", "--url", &url, "--cacert", &ca], &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    w.sigterm();
}

#[test]
fn config_providers_resolve_at_task_start_and_secrets_stay_out_of_logs() {
    let tmp = tempfile::tempdir().unwrap();
    let secrets = tmp.path().join("secrets.properties");
    std::fs::write(
        &secrets,
        "iterations=25\ndatabase.password=file-secret-5678\n",
    )
    .unwrap();
    let data = tmp.path().join("data");
    let w = Worker::start_with(
        &data,
        &[],
        &["--log-level", "debug"],
        &[("HW_TEST_TOPIC", "prov.events")],
    );
    let file = secrets.display().to_string();
    let config = json!({
        "name": "prov",
        "connector.class": "datagen",
        "kafka.topic": "${env:HW_TEST_TOPIC}",
        "iterations": format!("${{file:{file}:iterations}}"),
        "records.per.second": "0",
        "database.password": format!("${{file:{file}:database.password}}"),
        "connection.password": "plain-secret-1234",
    });
    let (status, _, info) = w.call(
        "POST",
        "/connectors",
        Some(&json!({"name": "prov", "config": config}).to_string()),
    );
    assert_eq!(status, 201, "{info}");
    assert_eq!(info["config"]["kafka.topic"], "${env:HW_TEST_TOPIC}");
    wait_until(
        "25 records in the resolved topic",
        Duration::from_secs(30),
        || topic_len(&w, "prov.events") == 25,
    );
    // Stored and shown raw.
    let (_, _, raw) = w.call("GET", "/connectors/prov/config", None);
    assert_eq!(raw["kafka.topic"], "${env:HW_TEST_TOPIC}");
    assert_eq!(
        raw["database.password"],
        format!("${{file:{file}:database.password}}")
    );
    let (_, _, tasks) = w.call("GET", "/connectors/prov/tasks", None);
    assert_eq!(tasks[0]["config"]["kafka.topic"], "${env:HW_TEST_TOPIC}");
    assert_eq!(
        tasks[0]["config"]["iterations"],
        format!("${{file:{file}:iterations}}")
    );

    // Unresolvable placeholders: validation errors on their keys, 400 on create.
    let bad = json!({"name": "bad", "connector.class": "datagen", "kafka.topic": "${env:HW_NOT_SET_ANYWHERE}"});
    let (status, _, v) = w.call(
        "PUT",
        "/connector-plugins/datagen/config/validate",
        Some(&bad.to_string()),
    );
    assert_eq!(status, 200);
    assert_eq!(v["error_count"], 1, "{v}");
    let errors: Vec<&Value> = v["configs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["value"]["name"] == "kafka.topic")
        .collect();
    assert!(errors[0]["value"]["errors"][0]
        .as_str()
        .unwrap()
        .contains("environment variable HW_NOT_SET_ANYWHERE is not set"));
    let (status, _, err) = w.call(
        "POST",
        "/connectors",
        Some(&json!({"name": "bad", "config": bad}).to_string()),
    );
    assert_eq!(status, 400, "{err}");
    // validate shows the placeholder, not the resolved value.
    let (_, _, v) = w.call(
        "PUT",
        "/connector-plugins/datagen/config/validate",
        Some(&config.to_string()),
    );
    assert_eq!(v["error_count"], 0, "{v}");
    assert!(!v.to_string().contains("prov.events"), "{v}");

    let logs = w.logs().join("\n");
    assert!(logs.contains("starting connector"), "{logs}");
    assert!(logs.contains("[hidden]"), "{logs}");
    for secret in ["file-secret-5678", "plain-secret-1234"] {
        assert!(
            !logs.contains(secret),
            "{secret} leaked into the log: {logs}"
        );
    }
    w.sigterm();

    // Without the variable the restarted worker cannot resolve the placeholder: FAILED with
    // a trace that says why (and nothing is written elsewhere).
    let w = Worker::start(&data, &[]);
    let (_, _, status) = w.call("GET", "/connectors/prov/status", None);
    assert_eq!(status["connector"]["state"], "FAILED", "{status}");
    assert!(status["connector"]["trace"]
        .as_str()
        .unwrap()
        .contains("environment variable HW_TEST_TOPIC is not set"));
    w.sigterm();
}

#[test]
fn tolerated_errors_are_logged_with_the_record_when_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let w = Worker::start(&tmp.path().join("data"), &[]);
    let config = json!({"name": "tol", "config": {
        "connector.class": "datagen", "kafka.topic": "tol.events", "iterations": "3",
        "records.per.second": "0",
        "transforms": "key",
        "transforms.key.type": "org.apache.kafka.connect.transforms.ValueToKey",
        "transforms.key.fields": "no_such_field",
        "errors.tolerance": "all", "errors.log.enable": "true",
        "errors.log.include.messages": "true"}});
    let (status, _, info) = w.call("POST", "/connectors", Some(&config.to_string()));
    assert_eq!(status, 201, "{info}");
    wait_until("three tolerated errors", Duration::from_secs(30), || {
        w.logs()
            .iter()
            .filter(|l| l.contains("skipping a record that failed"))
            .count()
            == 3
    });
    let logs = w.logs();
    let skipped: Vec<&String> = logs
        .iter()
        .filter(|l| l.contains("skipping a record that failed"))
        .collect();
    assert!(skipped[0].contains("TRANSFORMATION"), "{}", skipped[0]);
    assert!(
        skipped[0].contains("Field does not exist: no_such_field"),
        "{}",
        skipped[0]
    );
    assert!(skipped[0].contains("topic=tol.events"), "{}", skipped[0]);
    assert!(
        skipped[2].contains(r#"sourceOffset={\"seq\":2}"#)
            && skipped[2].contains("value=Struct{seq=2,id=2,"),
        "{}",
        skipped[2]
    );
    let (_, _, status) = w.call("GET", "/connectors/tol/status", None);
    assert_eq!(status["tasks"][0]["state"], "RUNNING", "{status}");
    let text = http_raw(w.addr, "GET", "/metrics", None, &[]).2;
    assert_eq!(
        sample(
            &text,
            r#"headwater_task_records_polled_total{connector="tol",task="0"}"#
        ),
        Some(3.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"headwater_task_records_written_total{connector="tol",task="0"}"#
        ),
        Some(0.0)
    );

    // Without include.messages the record is not described.
    let quiet = json!({"connector.class": "datagen", "kafka.topic": "tol2.events",
        "iterations": "1", "records.per.second": "0", "transforms": "key",
        "transforms.key.type": "org.apache.kafka.connect.transforms.ValueToKey",
        "transforms.key.fields": "no_such_field",
        "errors.tolerance": "all", "errors.log.enable": "true"});
    let (status, _, _) = w.call("PUT", "/connectors/tol2/config", Some(&quiet.to_string()));
    assert_eq!(status, 201);
    wait_until("one more tolerated error", Duration::from_secs(30), || {
        w.logs()
            .iter()
            .filter(|l| l.contains("skipping a record that failed"))
            .count()
            == 4
    });
    let logs = w.logs();
    let last = logs
        .iter()
        .rfind(|l| l.contains("skipping a record that failed"))
        .unwrap();
    assert!(last.contains("connector=tol2"), "{last}");
    assert!(!last.contains("SourceRecord{"), "{last}");
    w.sigterm();
}
