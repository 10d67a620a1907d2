//! The sink's writers over TLS, set by the drivers' URL parameters, against servers that let
//! the sink's user in only over TLS (PostgreSQL `hostssl`, MariaDB `REQUIRE SSL`): connecting
//! (which also creates the offsets table) proves the connection is encrypted; a wrong CA is
//! refused.

use std::sync::Arc;

use headwater_connector_jdbc::config::JdbcSinkConfig;
use headwater_connector_jdbc::mysql::MySqlWriter;
use headwater_connector_jdbc::postgres::PgWriter;
use headwater_tests::pki::TestPki;
use headwater_tests::{MariaDbServer, PostgresServer};
use mysql_async::prelude::Queryable;

fn config(url: &str, user: &str) -> Arc<JdbcSinkConfig> {
    let props =
        headwater_api::properties(&[("connection.url", url), ("connection.username", user)]);
    Arc::new(JdbcSinkConfig::parse(&props).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_destination_over_verified_tls() {
    let pki = TestPki::new();
    let pg = PostgresServer::start_with_tls(pki.server_cert_pem(), pki.server_key_pem()).unwrap();
    pg.create_database("dest").await.unwrap();
    let admin = pg.connect("dest").await.unwrap();
    admin
        .batch_execute("CREATE ROLE sink LOGIN SUPERUSER")
        .await
        .unwrap();
    let url = |root: &str| {
        format!(
            "jdbc:postgresql://localhost:{}/dest?sslmode=verify-full&sslrootcert={}",
            pg.port(),
            pki.path(root)
        )
    };
    let writer = PgWriter::connect(config(&url("ca.pem"), "sink"), "tls")
        .await
        .expect("verify-full with the test CA");
    let (encrypted, plain): (i64, i64) = {
        let row = admin
            .query_one(
                "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl)
                 FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.usename = 'sink'",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!((encrypted, plain), (1, 0));
    drop(writer);
    let tables: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE tablename = 'headwater_sink_offsets'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 1, "the offsets table was created over TLS");
    let refused = match PgWriter::connect(config(&url("other-ca.pem"), "sink"), "tls").await {
        Ok(_) => panic!("connected with an unrelated CA"),
        Err(e) => e.to_string(),
    };
    assert!(refused.contains("UnknownIssuer"), "{refused}");
    // The driver's default (prefer) encrypts too: the sink's user gets in.
    let prefer = format!("jdbc:postgresql://127.0.0.1:{}/dest", pg.port());
    assert!(PgWriter::connect(config(&prefer, "sink"), "tls")
        .await
        .is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_destination_over_verified_tls() {
    let pki = TestPki::new();
    let server = MariaDbServer::start_with_options(&[
        &format!("--ssl-ca={}", pki.path("ca.pem")),
        &format!("--ssl-cert={}", pki.path("server.pem")),
        &format!("--ssl-key={}", pki.path("server-key.pem")),
    ])
    .unwrap();
    let mut admin = server.connect("mysql").await.unwrap();
    admin
        .query_drop(
            "CREATE USER 'sink'@'%' REQUIRE SSL; GRANT ALL PRIVILEGES ON *.* TO 'sink'@'%';
             CREATE DATABASE dest;",
        )
        .await
        .unwrap();
    let url = |params: &str| format!("jdbc:mariadb://localhost:{}/dest?{params}", server.port());
    let verified = url(&format!(
        "sslMode=verify-full&serverSslCert={}",
        pki.path("ca.pem")
    ));
    MySqlWriter::connect(config(&verified, "sink"), "tls")
        .await
        .expect("verify-full with the test CA");
    let mysql_style = format!(
        "jdbc:mysql://localhost:{}/dest?sslMode=VERIFY_IDENTITY&trustCertificateKeyStoreUrl=file:{}",
        server.port(),
        pki.path("ca.pem")
    );
    MySqlWriter::connect(config(&mysql_style, "sink"), "tls")
        .await
        .expect("Connector/J's parameters");
    // MariaDB Connector/J's default is no TLS, which this user may not use.
    let plain = match MySqlWriter::connect(config(&url(""), "sink"), "tls").await {
        Ok(_) => panic!("connected without TLS"),
        Err(e) => e.to_string(),
    };
    assert!(plain.to_lowercase().contains("access denied"), "{plain}");
    let wrong_ca = url(&format!(
        "sslMode=verify-full&serverSslCert={}",
        pki.path("other-ca.pem")
    ));
    let refused = match MySqlWriter::connect(config(&wrong_ca, "sink"), "tls").await {
        Ok(_) => panic!("connected with an unrelated CA"),
        Err(e) => e.to_string(),
    };
    assert!(refused.contains("UnknownIssuer"), "{refused}");
}
