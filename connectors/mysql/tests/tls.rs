//! TLS against a real MariaDB: a server with a certificate from a test CA and a user that may
//! only connect over TLS (`REQUIRE SSL`), so a task that starts and streams proves its SQL and
//! binlog connections are encrypted; and the refusals, each saying why.

use std::time::{Duration, Instant};

use headwater_api::plugin::{Boundary, SourceTask, SourceTaskContext};
use headwater_api::{Properties, SourceRecord};
use headwater_connector_mysql::MySqlSourceTask;
use headwater_tests::pki::TestPki;
use headwater_tests::MariaDbServer;
use mysql_async::prelude::Queryable;

fn props(server: &MariaDbServer, extra: &[(&str, &str)]) -> Properties {
    let port = server.port().to_string();
    let mut p: Properties = [
        ("connector.class", "mysql"),
        ("database.hostname", "127.0.0.1"),
        ("database.port", port.as_str()),
        ("database.user", "tls_user"),
        ("database.server.id", "7101"),
        ("topic.prefix", "cdc"),
        ("database.include.list", "app"),
        ("include.schema.changes", "false"),
        ("poll.interval.ms", "100"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    for (k, v) in extra {
        p.insert((*k).to_owned(), (*v).to_owned());
    }
    p
}

async fn start(p: Properties) -> Result<MySqlSourceTask, String> {
    let mut task = MySqlSourceTask::new();
    match task.start(SourceTaskContext::default(), p).await {
        Ok(()) => Ok(task),
        Err(e) => Err(e.to_string()),
    }
}

/// Polls until `n` data records arrived, committing at transaction boundaries.
async fn collect(task: &mut MySqlSourceTask, n: usize) -> Vec<SourceRecord> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < n {
        let batch = task.poll().await.expect("poll");
        got.extend(batch.records.into_iter().filter(|r| r.topic == "cdc.app.t"));
        if batch.boundary == Boundary::Commit {
            if let Some(last) = got.last() {
                let c = (last.source_partition.clone(), last.source_offset.clone());
                task.commit(std::slice::from_ref(&c)).await.unwrap();
            }
        }
        assert!(Instant::now() < deadline, "{} of {n} records", got.len());
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_modes_against_a_server_that_requires_tls() {
    let pki = TestPki::new();
    let file = |name: &str| pki.path(name);
    let server = MariaDbServer::start_with_options(&[
        &format!("--ssl-ca={}", file("ca.pem")),
        &format!("--ssl-cert={}", file("server.pem")),
        &format!("--ssl-key={}", file("server-key.pem")),
    ])
    .unwrap();
    let mut admin = server.connect("mysql").await.unwrap();
    admin
        .query_drop(
            "CREATE USER 'tls_user'@'%' REQUIRE SSL;
             GRANT ALL PRIVILEGES ON *.* TO 'tls_user'@'%';
             CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY, note TEXT);
             INSERT INTO app.t VALUES (1, 'before');",
        )
        .await
        .unwrap();

    // Verified: the chain to the test CA and the name localhost; snapshot and binlog stream.
    let ca = file("ca.pem");
    let mut task = start(props(
        &server,
        &[
            ("database.hostname", "localhost"),
            ("database.ssl.mode", "verify_identity"),
            ("database.ssl.truststore", ca.as_str()),
        ],
    ))
    .await
    .expect("verify_identity with the right CA and name");
    assert_eq!(collect(&mut task, 1).await.len(), 1);
    admin
        .query_drop("INSERT INTO app.t VALUES (2, 'streamed')")
        .await
        .unwrap();
    let streamed = collect(&mut task, 1).await;
    let after = streamed[0].value.as_struct().unwrap().get("after").unwrap();
    assert_eq!(
        after
            .as_struct()
            .unwrap()
            .get("note")
            .and_then(|v| v.as_str()),
        Some("streamed")
    );
    task.stop().await;

    // Encrypted without checks: required (MariaDB's name: trust) and preferred.
    for mode in ["required", "trust", "preferred"] {
        let mut task = start(props(&server, &[("database.ssl.mode", mode)]))
            .await
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
        task.stop().await;
    }

    // Refusals.
    let plain = start(props(&server, &[("database.ssl.mode", "disabled")]))
        .await
        .err()
        .unwrap();
    assert!(plain.to_lowercase().contains("access denied"), "{plain}");
    let wrong_name = start(props(
        &server,
        &[
            ("database.ssl.mode", "verify_identity"),
            ("database.ssl.truststore", ca.as_str()),
        ],
    ))
    .await
    .err()
    .unwrap();
    assert!(
        wrong_name.contains("invalid peer certificate"),
        "{wrong_name}"
    );
    let other_ca = file("other-ca.pem");
    let wrong_ca = start(props(
        &server,
        &[
            ("database.hostname", "localhost"),
            ("database.ssl.mode", "verify-full"),
            ("database.ssl.truststore", other_ca.as_str()),
        ],
    ))
    .await
    .err()
    .unwrap();
    assert!(wrong_ca.contains("UnknownIssuer"), "{wrong_ca}");
    let jks = pki.file("truststore.jks");
    std::fs::write(&jks, [0xfe, 0xed, 0xfe, 0xed, 0, 0, 0, 2]).unwrap();
    let jks = jks.to_string_lossy().into_owned();
    let not_pem = start(props(
        &server,
        &[
            ("database.ssl.mode", "verify_identity"),
            ("database.ssl.truststore", jks.as_str()),
        ],
    ))
    .await
    .err()
    .unwrap();
    assert!(
        not_pem.contains("database.ssl.truststore") && not_pem.contains("keytool"),
        "{not_pem}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preferred_falls_back_to_plain_tcp_and_required_refuses_a_server_without_tls() {
    let server = MariaDbServer::start().unwrap();
    let mut admin = server.connect("mysql").await.unwrap();
    admin
        .query_drop(
            "CREATE USER 'tls_user'@'%'; GRANT ALL PRIVILEGES ON *.* TO 'tls_user'@'%';
             CREATE DATABASE app;",
        )
        .await
        .unwrap();
    let mut task = start(props(&server, &[("database.ssl.mode", "preferred")]))
        .await
        .expect("preferred connects in plain TCP");
    task.stop().await;
    let refused = start(props(&server, &[("database.ssl.mode", "required")]))
        .await
        .err()
        .unwrap();
    assert!(refused.contains("does not accept TLS"), "{refused}");
}
