//! The replication client and the durability behaviour against a real PostgreSQL:
//! - password authentication (cleartext, md5, SCRAM-SHA-256) and clear errors for a wrong
//!   password and for TLS modes;
//! - pgoutput bytes captured from the server (protocol 1 with binary tuples and messages, and
//!   protocol 2 with a streamed in-progress transaction) decode without error; the captures are
//!   stored in `tests/data/` and decoded again from there (set `HEADWATER_CAPTURE_PGOUTPUT=1` to
//!   rewrite them);
//! - an idle slot (WAL activity, but no captured change) keeps advancing its confirmed position;
//! - transactions the server streams while they run (protocol 2) come out in commit order, once,
//!   without rolled-back savepoints or aborted transactions, and leave no spill file behind;
//! - slot creation blocked by an open transaction says which session it waits for, and a stop
//!   meanwhile cancels it;
//! - an execute-snapshot signal copies the tables it names (through its condition) and streams
//!   on after the signal, every row once, across restarts before and during the copy; a signal
//!   whose condition the server refuses is logged and streaming goes on;
//! - an incremental execute-snapshot signal copies tables in chunks between watermarks while
//!   writers change them, across a restart, and the events replayed in order give the table's
//!   final content; tables without a key are skipped, stop-snapshot ends it;
//! - `snapshot.mode=configuration_based` follows its keys (snapshot at every start without
//!   streaming; a lost slot fails the task or, told so, streams on from now);
//!   `snapshot.delay.ms` and `streaming.delay.ms` hold the task back without losing a change;
//! - `INSERT_DELETE` watermarks copy every row once and leave the signal table empty.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use headwater_api::plugin::{SourceTask, SourceTaskContext};
use headwater_api::Properties;
use headwater_connector_postgres::lsn::Lsn;
use headwater_connector_postgres::pgoutput::{Decoder, PgOutputMessage};
use headwater_connector_postgres::replication::{
    ConnectOptions, PgError, ReplicationClient, ReplicationMessage, SnapshotAction, SslMode,
};
use headwater_connector_postgres::tls::TlsSettings;
use headwater_connector_postgres::PostgresSourceTask;
use headwater_tests::pki::TestPki;
use headwater_tests::records::notifications;
use headwater_tests::PostgresServer;

fn opts(pg: &PostgresServer, db: &str, user: &str, password: Option<&str>) -> ConnectOptions {
    ConnectOptions {
        host: "127.0.0.1".into(),
        port: pg.port(),
        user: user.into(),
        password: password.map(str::to_owned),
        dbname: db.into(),
        application_name: "headwater-test".into(),
        tls: TlsSettings {
            mode: SslMode::Prefer,
            ..TlsSettings::disabled()
        },
        connect_timeout: Duration::from_secs(10),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_authentication_methods() {
    let pg = PostgresServer::start().unwrap();
    let admin = pg.connect("postgres").await.unwrap();
    admin
        .batch_execute(
            "SET password_encryption = 'md5'; CREATE ROLE u_md5 LOGIN REPLICATION PASSWORD 'pw-md5';
             CREATE ROLE u_clear LOGIN REPLICATION PASSWORD 'pw-clear';
             SET password_encryption = 'scram-sha-256'; CREATE ROLE u_scram LOGIN REPLICATION PASSWORD 'pw-scram';",
        )
        .await
        .unwrap();
    let hba = pg.data_dir().join("pg_hba.conf");
    let old = std::fs::read_to_string(&hba).unwrap();
    std::fs::write(
        &hba,
        format!(
            "host all u_md5 127.0.0.1/32 md5\nhost all u_clear 127.0.0.1/32 password\nhost all u_scram 127.0.0.1/32 scram-sha-256\n{old}"
        ),
    )
    .unwrap();
    admin
        .batch_execute("SELECT pg_reload_conf()")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (user, pw) in [
        ("u_md5", "pw-md5"),
        ("u_clear", "pw-clear"),
        ("u_scram", "pw-scram"),
    ] {
        let mut c = ReplicationClient::connect(&opts(&pg, "postgres", user, Some(pw)))
            .await
            .unwrap_or_else(|e| panic!("{user}: {e}"));
        let sys = c.identify_system().await.unwrap();
        assert_eq!(sys.dbname.as_deref(), Some("postgres"));
        assert!(sys.xlogpos.is_valid());
        c.close().await;
        let wrong = ReplicationClient::connect(&opts(&pg, "postgres", user, Some("nope"))).await;
        assert!(
            matches!(wrong, Err(PgError::Auth(_))),
            "{user}: {:?}",
            wrong.err()
        );
        let missing = ReplicationClient::connect(&opts(&pg, "postgres", user, None)).await;
        let msg = missing.err().unwrap().to_string();
        assert!(msg.contains("database.password"), "{msg}");
    }
    // This server has no TLS: prefer falls back to plain TCP, require refuses.
    let c = ReplicationClient::connect(&opts(&pg, "postgres", "postgres", None))
        .await
        .unwrap();
    assert!(!c.is_tls());
    c.close().await;
    let mut tls = opts(&pg, "postgres", "postgres", None);
    tls.tls.mode = SslMode::Require;
    let err = ReplicationClient::connect(&tls).await.err().unwrap();
    assert!(
        matches!(&err, PgError::Tls(m) if m.contains("does not accept TLS")),
        "{err}"
    );
}

/// Against a server that requires TLS of every role but the harness's own: each
/// `database.sslmode` connects, or is refused, as libpq's would; the connections that succeed
/// are encrypted (`pg_stat_ssl`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_modes_against_a_server_that_requires_tls() {
    let pki = TestPki::new();
    let pg = PostgresServer::start_with_tls(pki.server_cert_pem(), pki.server_key_pem()).unwrap();
    let admin = pg.connect("postgres").await.unwrap();
    admin
        .batch_execute("CREATE ROLE tls_user LOGIN REPLICATION")
        .await
        .unwrap();
    let with = |host: &str, mode: SslMode, root: Option<&str>| {
        let mut o = opts(&pg, "postgres", "tls_user", None);
        o.host = host.into();
        o.tls = TlsSettings {
            mode,
            root_cert: root.map(|r| pki.file(r)),
            ..TlsSettings::disabled()
        };
        o
    };
    let encrypted = |pid: i32| {
        let admin = &admin;
        async move {
            admin
                .query_one("SELECT ssl FROM pg_stat_ssl WHERE pid = $1", &[&pid])
                .await
                .unwrap()
                .get::<_, bool>(0)
        }
    };
    for (host, mode, root) in [
        // allow: refused in plain TCP (hostssl only), then retried with TLS, as libpq does.
        ("127.0.0.1", SslMode::Allow, None),
        ("127.0.0.1", SslMode::Prefer, None),
        ("127.0.0.1", SslMode::Require, None),
        ("127.0.0.1", SslMode::Require, Some("ca.pem")),
        ("127.0.0.1", SslMode::VerifyCa, Some("ca.pem")),
        ("localhost", SslMode::VerifyFull, Some("ca.pem")),
    ] {
        let mut c = ReplicationClient::connect(&with(host, mode, root))
            .await
            .unwrap_or_else(|e| panic!("{host} {mode:?} {root:?}: {e}"));
        assert!(c.is_tls(), "{mode:?}");
        let sys = c.identify_system().await.unwrap();
        assert!(sys.xlogpos.is_valid());
        assert!(encrypted(c.backend_pid().unwrap()).await, "{mode:?}");
        c.close().await;
    }
    // Refusals, each saying why.
    let refused = |o: ConnectOptions| async move {
        match ReplicationClient::connect(&o).await {
            Ok(_) => panic!("connected with {:?}", o.tls),
            Err(e) => e.to_string(),
        }
    };
    let plain = refused(with("127.0.0.1", SslMode::Disable, None)).await;
    assert!(plain.contains("pg_hba.conf"), "{plain}");
    let wrong_name = refused(with("127.0.0.1", SslMode::VerifyFull, Some("ca.pem"))).await;
    assert!(wrong_name.contains("TLS handshake"), "{wrong_name}");
    assert!(wrong_name.to_lowercase().contains("name"), "{wrong_name}");
    let wrong_ca = refused(with("localhost", SslMode::VerifyCa, Some("other-ca.pem"))).await;
    assert!(wrong_ca.contains("TLS handshake"), "{wrong_ca}");
    assert!(wrong_ca.contains("UnknownIssuer"), "{wrong_ca}");
    let require_with_wrong_root =
        refused(with("127.0.0.1", SslMode::Require, Some("other-ca.pem"))).await;
    assert!(
        require_with_wrong_root.contains("UnknownIssuer"),
        "require with a root certificate checks the chain: {require_with_wrong_root}"
    );
    let missing = refused(with("localhost", SslMode::VerifyFull, Some("missing.crt"))).await;
    assert!(missing.contains("database.sslrootcert"), "{missing}");
    assert!(missing.contains("missing.crt"), "{missing}");

    // A server whose TLS no client here can speak (TLS 1.1 at most): prefer connects without
    // TLS, as libpq does, for the roles the server lets in that way; require refuses.
    for setting in [
        "ALTER SYSTEM SET ssl_min_protocol_version = 'TLSv1'",
        "ALTER SYSTEM SET ssl_max_protocol_version = 'TLSv1.1'",
        "SELECT pg_reload_conf()",
    ] {
        admin.batch_execute(setting).await.unwrap();
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let mut o = opts(&pg, "postgres", "postgres", None);
    o.tls.mode = SslMode::Prefer;
    let c = ReplicationClient::connect(&o)
        .await
        .expect("prefer falls back to plain TCP");
    assert!(!c.is_tls());
    c.close().await;
    let mut sql = tokio_postgres::Config::new();
    sql.host("127.0.0.1")
        .port(pg.port())
        .user("postgres")
        .dbname("postgres");
    let (client, _conn) = headwater_connector_postgres::tls::connect_sql(&sql, &o.tls)
        .await
        .expect("prefer falls back to plain TCP for SQL too");
    client.simple_query("SELECT 1").await.unwrap();
    o.tls.mode = SslMode::Require;
    let handshake = refused(o).await;
    assert!(handshake.contains("TLS handshake"), "{handshake}");
}

/// The whole task (SQL connections for the snapshot, the replication stream) over
/// `verify-full` as a role that may not connect without TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_snapshots_and_streams_over_verified_tls() {
    let pki = TestPki::new();
    let pg = PostgresServer::start_with_tls(pki.server_cert_pem(), pki.server_key_pem()).unwrap();
    pg.create_database("shop").await.unwrap();
    let db = pg.connect("shop").await.unwrap();
    db.batch_execute(
        "CREATE ROLE tls_user LOGIN REPLICATION SUPERUSER;
         CREATE TABLE captured (id int PRIMARY KEY, note text);
         INSERT INTO captured VALUES (1, 'before'), (2, 'before');",
    )
    .await
    .unwrap();
    let root = pki.path("ca.pem");
    let mut task = started_task(
        &pg,
        "shop",
        &[
            ("database.hostname", "localhost"),
            ("database.user", "tls_user"),
            ("database.sslmode", "verify-full"),
            ("database.sslrootcert", root.as_str()),
        ],
    )
    .await;
    let snapshot = drain(&mut task, 2).await;
    assert_eq!(snapshot.len(), 2);
    db.execute("INSERT INTO captured VALUES (3, 'streamed')", &[])
        .await
        .unwrap();
    let streamed = drain(&mut task, 1).await;
    let after = streamed[0].value.as_struct().unwrap().get("after").unwrap();
    assert_eq!(
        after
            .as_struct()
            .unwrap()
            .get("note")
            .and_then(|v| v.as_str()),
        Some("streamed")
    );
    let plain: i64 = db
        .query_one(
            "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
             WHERE a.usename = 'tls_user' AND NOT s.ssl",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let encrypted: i64 = db
        .query_one(
            "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
             WHERE a.usename = 'tls_user' AND s.ssl",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(plain, 0);
    assert!(
        encrypted >= 2,
        "the SQL and the replication connection: {encrypted}"
    );
    task.stop().await;
}

fn data_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// Stored capture format: one record per message, `u32` big-endian length then the payload.
fn store(name: &str, msgs: &[Bytes]) {
    let mut out = Vec::new();
    for m in msgs {
        out.extend_from_slice(&(m.len() as u32).to_be_bytes());
        out.extend_from_slice(m);
    }
    std::fs::write(data_file(name), out).unwrap();
}

fn load(name: &str) -> Vec<Bytes> {
    let raw = std::fs::read(data_file(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut out = Vec::new();
    let mut pos = 0;
    while pos + 4 <= raw.len() {
        let len = u32::from_be_bytes(raw[pos..pos + 4].try_into().unwrap()) as usize;
        out.push(Bytes::copy_from_slice(&raw[pos + 4..pos + 4 + len]));
        pos += 4 + len;
    }
    assert_eq!(pos, raw.len(), "{name}: trailing bytes");
    out
}

/// Reads XLogData payloads until `done` says the capture is complete.
async fn capture(
    pg: &PostgresServer,
    slot: &str,
    start: Lsn,
    options: &[(&str, String)],
    mut done: impl FnMut(&PgOutputMessage) -> bool,
) -> Vec<Bytes> {
    let c = ReplicationClient::connect(&opts(pg, "cap", "postgres", None))
        .await
        .unwrap();
    let (mut reader, status) = c.start_replication(slot, start, options).await.unwrap();
    let mut dec = Decoder::new();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let msg = tokio::time::timeout(Duration::from_secs(5), reader.next()).await;
        match msg {
            Ok(Ok(Some(ReplicationMessage::XLogData { data, .. }))) => {
                let m = dec.decode(data.clone()).unwrap();
                out.push(data);
                if done(&m) {
                    status.close().await;
                    return out;
                }
            }
            Ok(Ok(Some(ReplicationMessage::Keepalive {
                wal_end,
                reply_requested,
                ..
            }))) => {
                if reply_requested {
                    status
                        .send_status(wal_end, Lsn::INVALID, Lsn::INVALID)
                        .await
                        .unwrap();
                }
            }
            other => panic!("stream ended: {other:?}"),
        }
    }
    panic!("capture timed out after {} messages", out.len());
}

fn kinds(msgs: &[Bytes]) -> Vec<char> {
    msgs.iter().map(|m| char::from(m[0])).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn captured_pgoutput_bytes_decode() {
    let pg = PostgresServer::start().unwrap();
    pg.create_database("cap").await.unwrap();
    let db = pg.connect("cap").await.unwrap();
    db.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, v text, n numeric(10,2));
         CREATE PUBLICATION cap_pub FOR ALL TABLES;",
    )
    .await
    .unwrap();
    db.batch_execute("ALTER SYSTEM SET logical_decoding_work_mem = '64kB'")
        .await
        .unwrap();
    db.batch_execute("SELECT pg_reload_conf()").await.unwrap();
    let mut repl = ReplicationClient::connect(&opts(&pg, "cap", "postgres", None))
        .await
        .unwrap();
    let slot = repl
        .create_slot("cap_slot", false, SnapshotAction::NoExport)
        .await
        .unwrap();
    repl.close().await;
    db.batch_execute(
        "INSERT INTO t VALUES (1, 'a', 1.50), (2, NULL, -2);
         UPDATE t SET v = 'b' WHERE id = 1;
         UPDATE t SET id = 3 WHERE id = 2;
         ALTER TABLE t REPLICA IDENTITY FULL;
         UPDATE t SET n = 9 WHERE id = 1;
         DELETE FROM t WHERE id = 3;
         SELECT pg_logical_emit_message(false, 'pfx', 'non-transactional');
         BEGIN; SELECT pg_logical_emit_message(true, 'pfx', 'in-txn'); INSERT INTO t VALUES (4, 'x', 0); COMMIT;
         TRUNCATE t;",
    )
    .await
    .unwrap();
    let v1_opts = [
        ("proto_version", "1".to_owned()),
        ("publication_names", "\"cap_pub\"".to_owned()),
        ("messages", "true".to_owned()),
        ("binary", "true".to_owned()),
    ];
    let mut commits = 0;
    let v1 = capture(&pg, "cap_slot", slot.consistent_point, &v1_opts, |m| {
        if matches!(m, PgOutputMessage::Truncate { .. }) {
            commits = 100;
        }
        matches!(m, PgOutputMessage::Commit { .. }) && commits == 100
    })
    .await;
    let k = kinds(&v1);
    for want in ['B', 'R', 'I', 'U', 'D', 'T', 'M', 'C'] {
        assert!(k.contains(&want), "v1 capture lacks {want}: {k:?}");
    }
    // A streamed in-progress transaction (protocol 2, streaming on, 64 kB decoding memory).
    let mut repl = ReplicationClient::connect(&opts(&pg, "cap", "postgres", None))
        .await
        .unwrap();
    let slot2 = repl
        .create_slot("cap_stream", false, SnapshotAction::NoExport)
        .await
        .unwrap();
    repl.close().await;
    db.batch_execute(
        "INSERT INTO t SELECT g, repeat('x', 100), g FROM generate_series(10, 3000) g",
    )
    .await
    .unwrap();
    let v2_opts = [
        ("proto_version", "2".to_owned()),
        ("publication_names", "\"cap_pub\"".to_owned()),
        ("streaming", "on".to_owned()),
        ("binary", "true".to_owned()),
    ];
    let v2_all = capture(&pg, "cap_stream", slot2.consistent_point, &v2_opts, |m| {
        matches!(m, PgOutputMessage::StreamCommit { .. })
    })
    .await;
    // Keep the file small: the first stream segment and the control messages.
    let mut v2 = Vec::new();
    let mut inserts = 0;
    for m in v2_all {
        if m[0] == b'I' {
            inserts += 1;
            if inserts > 3 {
                continue;
            }
        }
        v2.push(m);
    }
    let k2 = kinds(&v2);
    for want in ['S', 'R', 'I', 'E', 'c'] {
        assert!(k2.contains(&want), "v2 capture lacks {want}: {k2:?}");
    }
    if std::env::var_os("HEADWATER_CAPTURE_PGOUTPUT").is_some() {
        store("pgoutput_v1_binary.bin", &v1);
        store("pgoutput_v2_stream.bin", &v2);
    }
}

/// The stored captures decode completely, with the expected content.
#[test]
fn stored_captures_decode() {
    let v1 = load("pgoutput_v1_binary.bin");
    let mut dec = Decoder::new();
    let msgs: Vec<PgOutputMessage> = v1.iter().map(|m| dec.decode(m.clone()).unwrap()).collect();
    let rel = msgs
        .iter()
        .find_map(|m| match m {
            PgOutputMessage::Relation(r) => Some(r.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!((rel.namespace.as_str(), rel.name.as_str()), ("public", "t"));
    assert_eq!(
        rel.columns
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        ["id", "v", "n"]
    );
    assert!(rel.columns[0].is_key);
    assert_eq!(rel.columns[2].type_modifier, ((10 << 16) | 2) + 4);
    assert!(
        msgs.iter()
            .any(|m| matches!(m, PgOutputMessage::Update { key: Some(_), .. })),
        "PK change sends K"
    );
    assert!(
        msgs.iter()
            .any(|m| matches!(m, PgOutputMessage::Update { old: Some(_), .. })),
        "FULL sends O"
    );
    assert!(msgs.iter().any(|m| matches!(m, PgOutputMessage::Message { transactional: false, prefix, .. } if prefix == "pfx")));
    assert!(msgs.iter().any(|m| matches!(
        m,
        PgOutputMessage::Message {
            transactional: true,
            ..
        }
    )));
    assert!(msgs
        .iter()
        .any(|m| matches!(m, PgOutputMessage::Truncate { .. })));
    match msgs
        .iter()
        .find(|m| matches!(m, PgOutputMessage::Insert { .. }))
        .unwrap()
    {
        PgOutputMessage::Insert { new, .. } => {
            assert_eq!(
                new.0[0],
                headwater_connector_postgres::pgoutput::TupleValue::Binary(Bytes::from_static(&[
                    0, 0, 0, 1
                ]))
            );
        }
        _ => unreachable!(),
    }
    let v2 = load("pgoutput_v2_stream.bin");
    let mut dec = Decoder::new();
    let msgs: Vec<PgOutputMessage> = v2.iter().map(|m| dec.decode(m.clone()).unwrap()).collect();
    let xid = match msgs
        .iter()
        .find(|m| matches!(m, PgOutputMessage::StreamStart { .. }))
        .unwrap()
    {
        PgOutputMessage::StreamStart { xid, .. } => *xid,
        _ => unreachable!(),
    };
    assert!(
        msgs.iter()
            .any(|m| matches!(m, PgOutputMessage::Insert { xid: Some(x), .. } if *x == xid)),
        "inserts in a stream carry the xid"
    );
    assert!(msgs
        .iter()
        .any(|m| matches!(m, PgOutputMessage::StreamCommit { xid: x, .. } if *x == xid)));
    // Every truncation of every stored message is an error or a message, never a panic.
    for m in v1.iter().chain(&v2) {
        for cut in 0..m.len() {
            let _ = Decoder::new().decode(m.slice(..cut));
        }
    }
}

fn task_props(pg: &PostgresServer, db: &str, extra: &[(&str, &str)]) -> Properties {
    let port = pg.port().to_string();
    let mut p: Properties = [
        ("database.hostname", "127.0.0.1"),
        ("database.port", port.as_str()),
        ("database.user", "postgres"),
        ("database.dbname", db),
        ("topic.prefix", "idle"),
        ("table.include.list", "public.captured"),
        ("slot.name", "idle_slot"),
        ("status.update.interval.ms", "200"),
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

/// A server with database `db` whose `captured` table holds rows 1..=`n`, and a client of it.
async fn server_with_captured_rows(db: &str, n: i32) -> (PostgresServer, tokio_postgres::Client) {
    let pg = PostgresServer::start().unwrap();
    pg.create_database(db).await.unwrap();
    let client = pg.connect(db).await.unwrap();
    client
        .batch_execute(&format!(
            "CREATE TABLE captured (id int PRIMARY KEY); INSERT INTO captured SELECT generate_series(1, {n});"
        ))
        .await
        .unwrap();
    (pg, client)
}

/// A task started with `task_props(pg, db, extra)` and the default context.
async fn started_task(pg: &PostgresServer, db: &str, extra: &[(&str, &str)]) -> PostgresSourceTask {
    let mut task = PostgresSourceTask::new();
    task.start(SourceTaskContext::default(), task_props(pg, db, extra))
        .await
        .unwrap();
    task
}

async fn confirmed(db: &tokio_postgres::Client, slot: &str) -> Lsn {
    let s: String = db
        .query_one(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap()
        .get(0);
    s.parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_slot_keeps_advancing() {
    let pg = PostgresServer::start().unwrap();
    pg.create_database("idle").await.unwrap();
    let db = pg.connect("idle").await.unwrap();
    db.batch_execute("CREATE TABLE captured (id int PRIMARY KEY); CREATE TABLE other (id int PRIMARY KEY, pad text);")
        .await
        .unwrap();
    let mut task = PostgresSourceTask::new();
    task.start(
        SourceTaskContext::default(),
        task_props(&pg, "idle", &[("snapshot.mode", "no_data")]),
    )
    .await
    .unwrap();
    let start = confirmed(&db, "idle_slot").await;
    // Changes to a table that is not captured: WAL grows, nothing is emitted.
    for i in 0..20 {
        db.execute("INSERT INTO other VALUES ($1, repeat('x', 1000))", &[&i])
            .await
            .unwrap();
    }
    let target: String = db
        .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .await
        .unwrap()
        .get(0);
    let target: Lsn = target.parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let batch = task.poll().await.unwrap();
        assert!(batch.records.is_empty(), "nothing captured changed");
        if confirmed(&db, "idle_slot").await >= target {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "slot stuck at {} (start {start}, target {target})",
            confirmed(&db, "idle_slot").await
        );
    }
    // A captured change is not confirmed before the engine commits it.
    db.execute("INSERT INTO captured VALUES (1)", &[])
        .await
        .unwrap();
    let mut recs = Vec::new();
    while recs.is_empty() {
        recs.extend(task.poll().await.unwrap().records);
    }
    let before_commit = confirmed(&db, "idle_slot").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let _ = task.poll().await.unwrap();
    assert_eq!(
        confirmed(&db, "idle_slot").await,
        before_commit,
        "uncommitted change must hold the slot"
    );
    let proc = recs
        .last()
        .unwrap()
        .source_offset
        .get("lsn_proc")
        .cloned()
        .unwrap();
    let lsn_proc = match proc {
        headwater_api::OffsetValue::Int(v) => Lsn::from_i64(v),
        other => panic!("{other:?}"),
    };
    assert!(lsn_proc > before_commit);
    let c = (
        recs.last().unwrap().source_partition.clone(),
        recs.last().unwrap().source_offset.clone(),
    );
    task.commit(std::slice::from_ref(&c)).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while confirmed(&db, "idle_slot").await < lsn_proc {
        let _ = task.poll().await.unwrap();
        assert!(Instant::now() < deadline, "commit did not advance the slot");
    }
    task.stop().await;
}

/// Polls until `n` records arrived, committing at transaction boundaries like the engine.
async fn drain(task: &mut PostgresSourceTask, n: usize) -> Vec<headwater_api::SourceRecord> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < n {
        let b = task.poll().await.unwrap();
        let closes = b.boundary == headwater_api::plugin::Boundary::Commit;
        let ends_snapshot = b.records.last().is_some_and(|r| {
            r.source_offset.get("snapshot_completed")
                == Some(&headwater_api::OffsetValue::Bool(true))
        });
        // The engine commits such a batch at once instead of lingering into the stream's
        // first poll (which waits up to poll.interval.ms for changes).
        assert!(
            !ends_snapshot || b.caught_up,
            "the snapshot's last batch is marked caught up"
        );
        got.extend(b.records);
        if closes {
            // The engine commits the newest offset a record carries (notifications carry none).
            if let Some(l) = got.iter().rev().find(|r| !r.source_offset.is_empty()) {
                let c = (l.source_partition.clone(), l.source_offset.clone());
                task.commit(std::slice::from_ref(&c)).await.unwrap();
            }
        }
        assert!(Instant::now() < deadline, "{} of {n} records", got.len());
    }
    got
}

fn ids(recs: &[headwater_api::SourceRecord], op: &str) -> Vec<i32> {
    recs.iter()
        .filter_map(|r| {
            let v = r.value.as_struct()?;
            if v.get("op")?.as_str()? != op {
                return None;
            }
            let after = v.get("after")?.as_struct()?;
            match after.get("id")? {
                headwater_api::Value::Int32(i) => Some(*i),
                _ => None,
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_with_an_existing_slot_then_streams_each_row_once() {
    let (pg, db) = server_with_captured_rows("resnap", 50).await;
    let props = |mode: &str| {
        task_props(
            &pg,
            "resnap",
            &[("snapshot.mode", mode), ("slot.name", "resnap_slot")],
        )
    };
    let mut t1 = PostgresSourceTask::new();
    t1.start(SourceTaskContext::default(), props("initial"))
        .await
        .unwrap();
    let snap1 = drain(&mut t1, 50).await;
    assert_eq!(ids(&snap1, "r").len(), 50);
    db.execute("INSERT INTO captured VALUES (51)", &[])
        .await
        .unwrap();
    let s1 = drain(&mut t1, 1).await;
    assert_eq!(ids(&s1, "c"), vec![51]);
    let last = s1.last().unwrap();
    let committed = vec![(last.source_partition.clone(), last.source_offset.clone())];
    t1.stop().await;
    // Changes while the connector is down, then a restart that snapshots again (slot exists:
    // a temporary slot provides the snapshot and the streaming start point).
    db.execute("INSERT INTO captured VALUES (52)", &[])
        .await
        .unwrap();
    let mut t2 = PostgresSourceTask::new();
    let ctx = SourceTaskContext {
        committed_offsets: committed,
        ..Default::default()
    };
    t2.start(ctx, props("always")).await.unwrap();
    let writer = {
        let conn = pg.connect("resnap").await.unwrap();
        tokio::spawn(async move {
            for i in 53..=80 {
                conn.execute("INSERT INTO captured VALUES ($1)", &[&i])
                    .await
                    .unwrap();
            }
        })
    };
    let snap2 = drain(&mut t2, 52).await;
    writer.await.unwrap();
    let mut seen = ids(&snap2, "r");
    seen.extend(ids(&snap2, "c"));
    // Every row from 1 to 80 exactly once across the snapshot and the stream that follows it.
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.len() < 80 {
        let b = t2.poll().await.unwrap();
        seen.extend(ids(&b.records, "c"));
        assert!(Instant::now() < deadline, "have {} of 80", seen.len());
    }
    seen.sort_unstable();
    assert_eq!(seen, (1..=80).collect::<Vec<_>>());
    let slots: i64 = db
        .query_one("SELECT count(*) FROM pg_replication_slots", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(slots, 1, "the temporary snapshot slot is gone");
    t2.stop().await;
}

/// `snapshot.mode=configuration_based`: `snapshot.data` alone snapshots at every start and
/// never streams; `start.stream` with `snapshot.on.data.error` streams on from the server's
/// current position when the slot is gone (without it the task fails saying so).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configuration_based_snapshot_mode_follows_its_keys() {
    let (pg, db) = server_with_captured_rows("cb", 5).await;
    let props = |keys: &[(&str, &str)]| {
        let mut extra = vec![
            ("snapshot.mode", "configuration_based"),
            ("slot.name", "cb_slot"),
        ];
        extra.extend_from_slice(keys);
        task_props(&pg, "cb", &extra)
    };
    let data_only = [("snapshot.mode.configuration.based.snapshot.data", "true")];
    let start =
        |committed: Vec<(headwater_api::OffsetMap, headwater_api::OffsetMap)>| SourceTaskContext {
            committed_offsets: committed,
            ..Default::default()
        };
    // snapshot.data alone: the rows, then nothing however long it runs.
    let mut t1 = PostgresSourceTask::new();
    t1.start(SourceTaskContext::default(), props(&data_only))
        .await
        .unwrap();
    let snap1 = drain(&mut t1, 5).await;
    assert_eq!(ids(&snap1, "r"), vec![1, 2, 3, 4, 5]);
    db.execute("INSERT INTO captured VALUES (6)", &[])
        .await
        .unwrap();
    for _ in 0..5 {
        let b = t1.poll().await.unwrap();
        assert!(
            b.records.is_empty(),
            "a task that does not stream emitted {:?}",
            b.records.len()
        );
    }
    let last = snap1.last().unwrap();
    let committed = vec![(last.source_partition.clone(), last.source_offset.clone())];
    t1.stop().await;
    // ... and a new snapshot at the next start, its completed offset notwithstanding.
    let mut t2 = PostgresSourceTask::new();
    t2.start(start(committed.clone()), props(&data_only))
        .await
        .unwrap();
    let snap2 = drain(&mut t2, 6).await;
    assert_eq!(ids(&snap2, "r"), vec![1, 2, 3, 4, 5, 6]);
    t2.stop().await;
    // The slot is gone (dropped here; invalidated would do the same).
    db.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = 'cb_slot'",
        &[],
    )
    .await
    .unwrap();
    // start.stream without snapshot.on.data.error: the task refuses to skip the gap.
    let stream_only = [("snapshot.mode.configuration.based.start.stream", "true")];
    let mut t3 = PostgresSourceTask::new();
    let err = t3
        .start(start(committed.clone()), props(&stream_only))
        .await
        .expect_err("a lost slot fails the task");
    assert!(err.message().contains("does not exist"), "{err}");
    // With snapshot.on.data.error: streaming from now on, nothing of the gap.
    let mut t4 = PostgresSourceTask::new();
    t4.start(
        start(committed),
        props(&[
            ("snapshot.mode.configuration.based.start.stream", "true"),
            (
                "snapshot.mode.configuration.based.snapshot.on.data.error",
                "true",
            ),
        ]),
    )
    .await
    .unwrap();
    db.execute("INSERT INTO captured VALUES (7)", &[])
        .await
        .unwrap();
    let streamed = poll_until(&mut t4, |r| op_of(r).as_deref() == Some("c")).await;
    assert_eq!(ids(&streamed, "c"), vec![7]);
    assert!(ids(&streamed, "r").is_empty());
    t4.stop().await;
}

/// `snapshot.delay.ms` holds the snapshot taken at start back; `streaming.delay.ms` holds
/// streaming back after it (polls return nothing meanwhile, so the engine stays responsive),
/// and no change made during either wait is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_and_streaming_delays_hold_the_task_back() {
    let (pg, db) = server_with_captured_rows("delays", 3).await;
    let delay = Duration::from_millis(1500);
    let begun = Instant::now();
    let mut task = started_task(
        &pg,
        "delays",
        &[
            ("slot.name", "delay_slot"),
            ("snapshot.delay.ms", "1500"),
            ("streaming.delay.ms", "1500"),
        ],
    )
    .await;
    assert!(
        begun.elapsed() >= delay,
        "the snapshot waited {:?}",
        begun.elapsed()
    );
    let snap = drain(&mut task, 3).await;
    let snapshot_done = Instant::now();
    assert_eq!(ids(&snap, "r"), vec![1, 2, 3]);
    db.execute("INSERT INTO captured VALUES (4)", &[])
        .await
        .unwrap();
    let streamed = poll_until(&mut task, |r| op_of(r).as_deref() == Some("c")).await;
    assert!(
        snapshot_done.elapsed() >= delay,
        "streaming began {:?} after the snapshot",
        snapshot_done.elapsed()
    );
    assert_eq!(ids(&streamed, "c"), vec![4]);
    task.stop().await;
}

/// Rows of records with `op` as (id, txId).
fn ids_and_txids(recs: &[headwater_api::SourceRecord], op: &str) -> Vec<(i32, i64)> {
    recs.iter()
        .filter_map(|r| {
            let v = r.value.as_struct()?;
            if v.get("op")?.as_str()? != op {
                return None;
            }
            let id = match v.get("after")?.as_struct()?.get("id")? {
                headwater_api::Value::Int32(i) => *i,
                _ => return None,
            };
            let tx = match v.get("source")?.as_struct()?.get("txId")? {
                headwater_api::Value::Int64(t) => *t,
                _ => return None,
            };
            Some((id, tx))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_in_progress_transactions_are_buffered_until_they_end() {
    let pg = PostgresServer::start().unwrap();
    pg.create_database("streamed").await.unwrap();
    let db = pg.connect("streamed").await.unwrap();
    // The smallest setting: any transaction over 64 kB is streamed while it runs.
    for sql in [
        "ALTER SYSTEM SET logical_decoding_work_mem = '64kB'",
        "SELECT pg_reload_conf()",
        "CREATE TABLE captured (id int PRIMARY KEY, pad text)",
    ] {
        db.batch_execute(sql).await.unwrap();
    }
    let spill = tempfile::tempdir().unwrap();
    let spill_dir = spill.path().to_str().unwrap().to_owned();
    let mut task = started_task(
        &pg,
        "streamed",
        &[
            ("snapshot.mode", "no_data"),
            ("slot.name", "streamed_slot"),
            ("max.batch.size", "256"),
            ("transaction.spill.dir", spill_dir.as_str()),
        ],
    )
    .await;
    let big = pg.connect("streamed").await.unwrap();
    let other = pg.connect("streamed").await.unwrap();
    // A large transaction (~600 kB of changes) with a rolled-back savepoint; a small one commits
    // while it is open; a large one aborts.
    big.batch_execute(
        "BEGIN; INSERT INTO captured SELECT i, repeat('x', 200) FROM generate_series(1, 1500) i;",
    )
    .await
    .unwrap();
    other
        .execute("INSERT INTO captured VALUES (100001, 'small')", &[])
        .await
        .unwrap();
    big.batch_execute(
        "SAVEPOINT s1;
         INSERT INTO captured SELECT i, repeat('y', 200) FROM generate_series(3001, 3600) i;
         ROLLBACK TO SAVEPOINT s1;
         INSERT INTO captured SELECT i, repeat('z', 200) FROM generate_series(1501, 2000) i;
         COMMIT;",
    )
    .await
    .unwrap();
    big.batch_execute(
        "BEGIN; INSERT INTO captured SELECT i, repeat('a', 200) FROM generate_series(10001, 12000) i; ROLLBACK;",
    )
    .await
    .unwrap();
    other
        .execute("INSERT INTO captured VALUES (100002, 'marker')", &[])
        .await
        .unwrap();
    let recs = drain(&mut task, 2002).await;
    let got = ids_and_txids(&recs, "c");
    let order: Vec<i32> = got.iter().map(|(id, _)| *id).collect();
    let mut expected = vec![100001];
    expected.extend(1..=2000);
    expected.push(100002);
    assert_eq!(
        order, expected,
        "commit order, each row once, nothing rolled back"
    );
    let big_tx = got[1].1;
    assert!(
        got[1..=2000].iter().all(|(_, tx)| *tx == big_tx),
        "one source transaction"
    );
    let big_tx_records = recs
        .iter()
        .filter(|r| {
            r.value
                .as_struct()
                .and_then(|v| v.get("source")?.as_struct()?.get("txId").cloned())
                == Some(headwater_api::Value::Int64(big_tx))
        })
        .collect::<Vec<_>>();
    assert!(
        big_tx_records[..big_tx_records.len() - 1]
            .iter()
            .all(|r| r.source_offset.is_empty()),
        "only the last record of a transaction carries its offset"
    );
    assert!(big_tx_records
        .last()
        .unwrap()
        .source_offset
        .contains_key("lsn_proc"));
    // The server really streamed them: its statistics count the streamed transactions.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let streamed: i64 = db
            .query_one(
                "SELECT coalesce(stream_txns, 0) FROM pg_stat_replication_slots WHERE slot_name = 'streamed_slot'",
                &[],
            )
            .await
            .map(|r| r.get(0))
            .unwrap_or(0);
        if streamed >= 2 {
            break;
        }
        let _ = task.poll().await.unwrap();
        assert!(
            Instant::now() < deadline,
            "the server streamed {streamed} transaction(s), expected both large ones"
        );
    }
    // The slot advances past everything once committed, and the spill files are gone.
    let end: Lsn = db
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get::<_, String>(0)
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while confirmed(&db, "streamed_slot").await < end {
        let _ = task.poll().await.unwrap();
        assert!(Instant::now() < deadline, "slot did not advance to {end}");
    }
    assert_eq!(std::fs::read_dir(spill.path()).unwrap().count(), 0);
    task.stop().await;
}

/// A stop while slot creation waits for an open transaction ends the start within seconds
/// and leaves no slot behind (the replication session is ended, which cancels the creation).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_cancels_a_slot_creation_that_waits() {
    let (pg, db) = server_with_captured_rows("slotstop", 1).await;
    let forgotten = pg.connect("slotstop").await.unwrap();
    forgotten
        .batch_execute("BEGIN; INSERT INTO captured VALUES (2);")
        .await
        .unwrap();
    let ctx = SourceTaskContext::default();
    let (waiting, stop) = (ctx.waiting.clone(), ctx.stop.clone());
    let props = task_props(
        &pg,
        "slotstop",
        &[("snapshot.mode", "no_data"), ("slot.name", "stop_slot")],
    );
    let starting = tokio::spawn(async move {
        let mut task = PostgresSourceTask::new();
        let started = task.start(ctx, props).await;
        task.stop().await;
        started
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !waiting
        .status()
        .is_some_and(|w| w.reason.contains("\"stop_slot\" waits for"))
    {
        assert!(!starting.is_finished(), "slot creation did not wait");
        assert!(Instant::now() < deadline, "no waiting reason reported");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.request();
    tokio::time::timeout(Duration::from_secs(10), starting)
        .await
        .expect("the start ended soon after the stop")
        .unwrap()
        .expect_err("a start whose slot creation was cancelled fails");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let slots: i64 = db
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'stop_slot'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if slots == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the slot was created after all");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    forgotten.batch_execute("COMMIT").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slot_creation_reports_the_transactions_it_waits_for() {
    let pg = PostgresServer::start().unwrap();
    pg.create_database("slotwait").await.unwrap();
    let db = pg.connect("slotwait").await.unwrap();
    db.batch_execute("CREATE TABLE captured (id int PRIMARY KEY)")
        .await
        .unwrap();
    // A session that forgot to commit: it holds an xid, so slot creation must wait for it.
    let forgotten = pg.connect("slotwait").await.unwrap();
    forgotten
        .batch_execute(
            "SET application_name = 'forgotten-session'; BEGIN; INSERT INTO captured VALUES (1);",
        )
        .await
        .unwrap();
    let blocker_pid: i32 = forgotten
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let ctx = SourceTaskContext::default();
    let waiting = ctx.waiting.clone();
    let props = task_props(
        &pg,
        "slotwait",
        &[("snapshot.mode", "no_data"), ("slot.name", "wait_slot")],
    );
    let starting = tokio::spawn(async move {
        let mut task = PostgresSourceTask::new();
        task.start(ctx, props).await.map(|_| task)
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let reason = loop {
        if let Some(w) = waiting.status() {
            if w.reason.contains(&format!("pid {blocker_pid} ")) {
                break w.reason;
            }
        }
        assert!(!starting.is_finished(), "slot creation did not wait");
        assert!(Instant::now() < deadline, "no waiting reason reported");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        reason.contains("\"wait_slot\" waits for 1 open transaction(s)")
            && reason.contains("forgotten-session")
            && reason.contains("idle in transaction"),
        "{reason}"
    );
    forgotten.batch_execute("COMMIT").await.unwrap();
    let mut task = tokio::time::timeout(Duration::from_secs(20), starting)
        .await
        .expect("slot created once the transaction ended")
        .unwrap()
        .unwrap();
    assert_eq!(waiting.status(), None, "the wait is over");
    task.stop().await;
}

/// Polls (without committing) until a batch holds a record `pick` accepts; returns that batch.
async fn poll_until(
    task: &mut PostgresSourceTask,
    pick: impl Fn(&headwater_api::SourceRecord) -> bool,
) -> Vec<headwater_api::SourceRecord> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let b = task.poll().await.unwrap();
        if b.records.iter().any(&pick) {
            return b.records;
        }
        assert!(Instant::now() < deadline, "no such record arrived");
    }
}

fn op_of(r: &headwater_api::SourceRecord) -> Option<String> {
    Some(r.value.as_struct()?.get("op")?.as_str()?.to_owned())
}

fn offset_text(r: &headwater_api::SourceRecord, key: &str) -> Option<String> {
    match r.source_offset.get(key)? {
        headwater_api::OffsetValue::String(s) => Some(s.clone()),
        other => Some(format!("{other:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_snapshot_signal_copies_named_tables_once_across_restarts() {
    let pg = PostgresServer::start().unwrap();
    pg.create_database("sig").await.unwrap();
    let db = pg.connect("sig").await.unwrap();
    db.batch_execute(
        "CREATE TABLE captured (id int PRIMARY KEY, status text NOT NULL);
         INSERT INTO captured SELECT i, CASE WHEN i % 2 = 0 THEN 'open' ELSE 'closed' END FROM generate_series(1, 20) i;
         CREATE TABLE other (id int PRIMARY KEY); INSERT INTO other SELECT generate_series(1, 5);
         CREATE TABLE debezium_signal (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048));
         INSERT INTO debezium_signal VALUES ('before', 'log', '{\"message\": \"not snapshotted\"}');",
    )
    .await
    .unwrap();
    let props = task_props(
        &pg,
        "sig",
        &[
            ("slot.name", "sig_slot"),
            ("table.include.list", "public.captured,public.other"),
            ("publication.autocreate.mode", "filtered"),
            ("signal.data.collection", "public.debezium_signal"),
            ("snapshot.fetch.size", "4"),
            ("max.batch.size", "4"),
            ("max.queue.size", "64"),
        ],
    );
    let start = |offsets: Vec<(headwater_api::OffsetMap, headwater_api::OffsetMap)>| {
        let props = props.clone();
        async move {
            let mut t = PostgresSourceTask::new();
            let ctx = SourceTaskContext {
                committed_offsets: offsets,
                ..Default::default()
            };
            t.start(ctx, props).await.unwrap();
            t
        }
    };
    let mut t1 = start(Vec::new()).await;
    let initial = drain(&mut t1, 25).await;
    assert_eq!(ids(&initial, "r").len(), 25);
    assert!(
        initial
            .iter()
            .all(|r| !r.topic.ends_with("debezium_signal")),
        "the signal table is not snapshotted"
    );

    // A condition the server refuses: logged, not acted on; streaming goes on. (One statement
    // per call: a simple query's statements share one transaction.)
    for statement in [
        r#"INSERT INTO debezium_signal VALUES ('bad', 'execute-snapshot', '{"data-collections": ["public\\.captured"], "type": "blocking", "additional-conditions": [{"data-collection": "public.captured", "filter": "no_such_column = 1"}]}')"#,
        r#"INSERT INTO debezium_signal VALUES ('sneaky', 'execute-snapshot', '{"data-collections": ["public\\.captured"], "additional-conditions": [{"data-collection": "public.captured", "filter": "true); DELETE FROM captured; SELECT (1"}]}')"#,
        "INSERT INTO captured VALUES (100, 'closed')",
    ] {
        db.batch_execute(statement).await.unwrap();
    }
    let mut after_bad = Vec::new();
    while !ids(&after_bad, "c").contains(&100) {
        after_bad.extend(drain(&mut t1, 1).await);
    }
    assert!(ids(&after_bad, "r").is_empty(), "{after_bad:?}");
    assert!(
        after_bad
            .iter()
            .any(|r| r.topic == "idle.public.debezium_signal" && op_of(r).as_deref() == Some("c")),
        "the signal row itself is streamed, as in Debezium"
    );
    assert!(
        after_bad
            .iter()
            .filter_map(|r| offset_text(r, "snapshot_signal"))
            .any(|s| s.contains("no_such_column")),
        "the bad signal was read as a request (and then refused): {:?}",
        after_bad
            .iter()
            .map(|r| (r.topic.clone(), r.source_offset.clone()))
            .collect::<Vec<_>>()
    );
    let rows: i64 = db
        .query_one("SELECT count(*) FROM captured", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        rows, 21,
        "a condition holding a second statement is refused, not run"
    );

    // The signal: all of `captured`. Its transaction's record carries the request, and that
    // is all that is committed before the task stops.
    db.batch_execute(
        r#"INSERT INTO debezium_signal VALUES ('resnap', 'execute-snapshot', '{"data-collections": ["public\\.capt.*"], "type": "blocking"}');"#,
    )
    .await
    .unwrap();
    let batch = poll_until(&mut t1, |r| r.topic == "idle.public.debezium_signal").await;
    let last = batch.last().unwrap();
    assert!(offset_text(last, "snapshot_signal").is_some_and(|s| s.contains("capt")));
    let committed = vec![(last.source_partition.clone(), last.source_offset.clone())];
    t1.stop().await;

    // Changes before the copy starts: in the copy, never streamed as well.
    for i in 21..=25 {
        db.execute("INSERT INTO captured VALUES ($1, 'open')", &[&i])
            .await
            .unwrap();
    }
    let mut t2 = start(committed).await;
    let first = poll_until(&mut t2, |r| op_of(r).as_deref() == Some("r")).await;
    let mut copied = ids(&first, "r");
    assert_eq!(copied, vec![1, 2, 3, 4], "key order");
    let last = first.last().unwrap();
    assert_eq!(offset_text(last, "snapshot").as_deref(), Some("BLOCKING"));
    assert!(offset_text(last, "snapshot_signal").is_some());
    let committed = vec![(last.source_partition.clone(), last.source_offset.clone())];
    t2.stop().await;

    // A crash in the copy: it resumes after its last committed row, then streams on after the
    // signal; rows written meanwhile come out once.
    for i in 26..=28 {
        db.execute("INSERT INTO captured VALUES ($1, 'open')", &[&i])
            .await
            .unwrap();
    }
    let mut t3 = start(committed).await;
    let writer = {
        let conn = pg.connect("sig").await.unwrap();
        tokio::spawn(async move {
            for i in 29..=35 {
                conn.execute("INSERT INTO captured VALUES ($1, 'open')", &[&i])
                    .await
                    .unwrap();
            }
        })
    };
    let mut rest = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        rest.extend(drain(&mut t3, 1).await);
        let mut seen = ids(&rest, "r");
        seen.extend(ids(&rest, "c"));
        if writer.is_finished() && seen.contains(&35) {
            break;
        }
        assert!(Instant::now() < deadline, "have {seen:?}");
    }
    writer.await.unwrap();
    copied.extend(ids(&rest, "r"));
    let mut seen = copied.clone();
    seen.extend(ids(&rest, "c"));
    seen.sort_unstable();
    let expected: Vec<i32> = (1..=35).chain([100]).collect();
    assert_eq!(seen, expected, "every row once, as copied or streamed");
    assert!(
        rest.iter()
            .chain(&first)
            .all(|r| !r.topic.ends_with(".other")),
        "tables the signal does not name are not copied"
    );
    assert!(
        ids(&rest, "r").iter().all(|i| *i > 4),
        "the resumed copy starts after its last committed row"
    );

    // A signal while the task runs, through a condition: the copy holds only the matching
    // rows, and the stream goes on in the same task after it.
    db.batch_execute(
        r#"INSERT INTO debezium_signal VALUES ('other', 'execute-snapshot', '{"data-collections": ["public\\.other"], "type": "blocking", "additional-conditions": [{"data-collection": "public.other", "filter": "id > 3"}]}')"#,
    )
    .await
    .unwrap();
    db.batch_execute("INSERT INTO captured VALUES (200, 'open')")
        .await
        .unwrap();
    let mut later = Vec::new();
    while !ids(&later, "c").contains(&200) {
        later.extend(drain(&mut t3, 1).await);
    }
    let other_rows: Vec<i32> = later
        .iter()
        .filter(|r| r.topic == "idle.public.other")
        .filter_map(|r| ids(std::slice::from_ref(r), "r").first().copied())
        .collect();
    assert_eq!(
        other_rows,
        vec![4, 5],
        "only the rows the condition selects"
    );
    let at = |pred: &dyn Fn(&headwater_api::SourceRecord) -> bool| later.iter().position(pred);
    assert!(
        at(&|r| r.topic == "idle.public.other")
            < at(&|r| ids(std::slice::from_ref(r), "c") == [200]),
        "the copy comes before the changes after the signal"
    );
    // A condition the trial accepts that fails on a later row: the copy is given up, the task
    // streams on.
    db.batch_execute(
        r#"INSERT INTO debezium_signal VALUES ('divides', 'execute-snapshot', '{"data-collections": ["public\\.captured"], "type": "blocking", "additional-conditions": [{"data-collection": "public.captured", "filter": "id < 3 OR 1 / (id - 30) > 0"}]}')"#,
    )
    .await
    .unwrap();
    db.batch_execute("INSERT INTO captured VALUES (300, 'open')")
        .await
        .unwrap();
    let mut after_fail = Vec::new();
    while !ids(&after_fail, "c").contains(&300) {
        after_fail.extend(drain(&mut t3, 1).await);
    }
    assert!(
        ids(&after_fail, "r").iter().all(|i| *i < 3),
        "only rows before the failing one were copied: {:?}",
        ids(&after_fail, "r")
    );
    let slots: i64 = db
        .query_one("SELECT count(*) FROM pg_replication_slots", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(slots, 1, "the temporary snapshot slots are gone");
    t3.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_table_the_publication_lacks_is_refused_at_start() {
    let pg = PostgresServer::start().unwrap();
    pg.create_database("nosig").await.unwrap();
    let db = pg.connect("nosig").await.unwrap();
    db.batch_execute(
        "CREATE TABLE captured (id int PRIMARY KEY);
         CREATE TABLE debezium_signal (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048));
         CREATE PUBLICATION only_captured FOR TABLE captured;",
    )
    .await
    .unwrap();
    for (table, says) in [
        (
            "public.debezium_signal",
            "does not publish the signal table",
        ),
        ("public.missing_signal", "does not exist"),
    ] {
        let mut t = PostgresSourceTask::new();
        let err = t
            .start(
                SourceTaskContext::default(),
                task_props(
                    &pg,
                    "nosig",
                    &[
                        ("slot.name", "nosig_slot"),
                        ("publication.name", "only_captured"),
                        ("publication.autocreate.mode", "disabled"),
                        ("signal.data.collection", table),
                    ],
                ),
            )
            .await
            .expect_err("refused");
        assert!(err.to_string().contains(says), "{table}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn column_mappers_mask_hash_and_truncate_row_images_but_not_keys() {
    let pg = PostgresServer::start().unwrap();
    pg.create_database("masks").await.unwrap();
    let db = pg.connect("masks").await.unwrap();
    db.batch_execute(
        "CREATE TABLE users (email varchar(64) PRIMARY KEY, ssn text, token varchar(10), bio text, photo bytea, age int);
         ALTER TABLE users REPLICA IDENTITY FULL;
         INSERT INTO users VALUES ('a@example.com', '123-45-6789', 'secret', 'a long biography', '\\x0102030405', 41);
         CREATE TABLE notes (id int PRIMARY KEY); INSERT INTO notes VALUES (1);",
    )
    .await
    .unwrap();
    let mut task = started_task(
        &pg,
        "masks",
        &[
            ("slot.name", "masks_slot"),
            ("table.include.list", "public.users,public.notes"),
            ("snapshot.include.collection.list", "public.users"),
            ("skip.messages.without.change", "true"),
            ("column.mask.with.4.chars", "public.users.(ssn|email|age)"),
            (
                "column.mask.hash.v2.SHA-256.with.salt.pepper",
                "public.users.token",
            ),
            (
                "column.truncate.to.6.chars",
                "public.users.bio,public.users.photo",
            ),
        ],
    )
    .await;
    let snap = drain(&mut task, 1).await;
    assert_eq!(
        snap.len(),
        1,
        "snapshot.include.collection.list leaves notes out"
    );
    db.batch_execute(
        "UPDATE users SET age = age WHERE email = 'a@example.com';
         INSERT INTO users VALUES ('b@example.com', NULL, NULL, NULL, NULL, NULL);
         UPDATE users SET bio = 'short' WHERE email = 'a@example.com';
         INSERT INTO notes VALUES (2);",
    )
    .await
    .unwrap();
    let stream = drain(&mut task, 3).await;
    task.stop().await;
    assert_eq!(
        stream.iter().map(|r| r.topic.as_str()).collect::<Vec<_>>(),
        ["idle.public.users", "idle.public.users", "idle.public.notes"],
        "the update that changed nothing is skipped (skip.messages.without.change); notes is streamed"
    );

    let field = |r: &headwater_api::SourceRecord, image: &str, col: &str| {
        r.value
            .as_struct()
            .unwrap()
            .get(image)
            .unwrap()
            .as_struct()
            .unwrap()
            .get(col)
            .cloned()
    };
    use headwater_api::Value as V;
    let token_hash = {
        use std::fmt::Write;
        let digest = <sha2::Sha256 as sha2::Digest>::digest(b"peppersecret");
        let mut hex = String::new();
        for b in digest.iter() {
            write!(hex, "{b:02x}").unwrap();
        }
        hex[..10].to_owned()
    };
    let r = &snap[0];
    assert_eq!(field(r, "after", "ssn"), Some(V::String("****".into())));
    assert_eq!(field(r, "after", "email"), Some(V::String("****".into())));
    assert_eq!(
        field(r, "after", "age"),
        Some(V::Int32(41)),
        "masks apply to character columns only"
    );
    assert_eq!(
        field(r, "after", "token"),
        Some(V::String(token_hash)),
        "cut to varchar(10)"
    );
    assert_eq!(field(r, "after", "bio"), Some(V::String("a long".into())));
    assert_eq!(
        field(r, "after", "photo"),
        Some(V::Bytes(vec![1, 2, 3, 4, 5]))
    );
    let key = r.key.as_struct().unwrap();
    assert_eq!(
        key.get("email"),
        Some(&V::String("a@example.com".into())),
        "keys are not masked"
    );
    let after_schema = r
        .value
        .as_struct()
        .unwrap()
        .get("after")
        .unwrap()
        .as_struct()
        .unwrap()
        .schema()
        .clone();
    let bio = after_schema.field("bio").unwrap().schema();
    for masked in ["age", "token", "ssn"] {
        assert_eq!(
            after_schema
                .field(masked)
                .unwrap()
                .schema()
                .parameter("masked"),
            Some("true"),
            "{masked}"
        );
    }
    assert_eq!(
        key.schema()
            .field("email")
            .unwrap()
            .schema()
            .parameter("masked"),
        None
    );
    assert_eq!(bio.parameter("truncateLength"), Some("6"));
    assert_eq!(
        key.schema()
            .field("email")
            .unwrap()
            .schema()
            .parameter("truncateLength"),
        None
    );

    let inserted = &stream[0];
    assert_eq!(
        field(inserted, "after", "ssn"),
        Some(V::String("****".into())),
        "a null is masked too, as in Debezium"
    );
    assert_eq!(
        field(inserted, "after", "token"),
        Some(V::Null),
        "a hashed null stays null"
    );
    let updated = &stream[1];
    assert_eq!(
        field(updated, "before", "bio"),
        Some(V::String("a long".into()))
    );
    assert_eq!(
        field(updated, "after", "bio"),
        Some(V::String("short".into()))
    );
    assert_eq!(
        field(updated, "before", "ssn"),
        Some(V::String("****".into()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn propagated_source_types_are_field_parameters_in_snapshot_and_stream() {
    let pg = PostgresServer::start().unwrap();
    pg.create_database("types").await.unwrap();
    let db = pg.connect("types").await.unwrap();
    db.batch_execute(
        "CREATE DOMAIN price AS numeric(8,2);
         CREATE TYPE mood AS ENUM ('ok', 'sad');
         CREATE TABLE items (id serial PRIMARY KEY, name varchar(40) NOT NULL,
           amount numeric(12,3), bare numeric, cost price, tags int4[],
           made timestamptz(3), feeling mood, note text, plain int8);
         INSERT INTO items (name, amount, bare, cost, tags, made, feeling, note, plain)
           VALUES ('a', 1.5, 2.25, 3.5, '{1,2}', '2024-01-02 03:04:05.678+00', 'ok', 'n', 7);",
    )
    .await
    .unwrap();
    let mut task = started_task(
        &pg,
        "types",
        &[
            ("slot.name", "types_slot"),
            ("table.include.list", "public.items"),
            (
                "column.propagate.source.type",
                "public.items.(id|name|amount|bare|note)",
            ),
            (
                "datatype.propagate.source.type",
                ".+\\.(_int4|PRICE|mood|timestamptz)",
            ),
            // int8's JDBC size is 19: nothing to truncate, so no mapper (Debezium's rule).
            ("column.truncate.to.20.chars", "public.items.plain"),
        ],
    )
    .await;
    let snap = drain(&mut task, 1).await;
    db.batch_execute("INSERT INTO items (name) VALUES ('b')")
        .await
        .unwrap();
    let stream = drain(&mut task, 1).await;
    task.stop().await;

    let max = i32::MAX.to_string();
    let expected: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("id", vec![("SERIAL", "10"), ("", "0")]),
        ("name", vec![("VARCHAR", "40"), ("", "0")]),
        ("amount", vec![("NUMERIC", "12"), ("", "3")]),
        ("bare", vec![("NUMERIC", "0")]),
        ("cost", vec![("PRICE", "8"), ("", "2")]),
        ("tags", vec![("_INT4", "10"), ("", "0")]),
        ("made", vec![("TIMESTAMPTZ", "32"), ("", "3")]),
        ("feeling", vec![("MOOD", &max), ("", "0")]),
        ("note", vec![("TEXT", &max), ("", "0")]),
    ];
    for (phase, record) in [("snapshot", &snap[0]), ("stream", &stream[0])] {
        let after = record
            .value_schema
            .as_ref()
            .unwrap()
            .field("after")
            .unwrap()
            .schema()
            .clone();
        for (column, facts) in &expected {
            let params = after.field(column).unwrap().schema().parameters().unwrap();
            let propagated: Vec<(&str, &str)> = params
                .iter()
                .filter(|(k, _)| k.starts_with("__debezium.source.column."))
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let (type_name, length) = facts[0];
            let mut want = vec![
                ("__debezium.source.column.type", type_name),
                ("__debezium.source.column.length", length),
            ];
            if let Some((_, scale)) = facts.get(1) {
                want.push(("__debezium.source.column.scale", scale));
            }
            want.push(("__debezium.source.column.name", column));
            assert_eq!(propagated, want, "{phase}: {column}");
            // Debezium's mapper parameters follow the converter's own.
            assert!(
                params
                    .iter()
                    .skip_while(|(k, _)| !k.starts_with("__debezium"))
                    .all(|(k, _)| k.starts_with("__debezium")),
                "{phase}: {column}: {params:?}"
            );
        }
        let amount = after.field("amount").unwrap().schema();
        assert_eq!(amount.parameter("scale"), Some("3"), "{phase}");
        assert_eq!(
            after.field("plain").unwrap().schema().parameters(),
            None,
            "{phase}: an unmatched column has none"
        );
        let key = record.key_schema.as_ref().unwrap();
        assert_eq!(
            key.field("id").unwrap().schema().parameters(),
            None,
            "{phase}: keys have none, as in Debezium"
        );
    }
}

#[test]
fn column_mapper_keys_are_validated() {
    let props: Properties = [
        (
            "connector.class",
            "io.debezium.connector.postgresql.PostgresConnector",
        ),
        ("database.hostname", "localhost"),
        ("database.user", "u"),
        ("database.dbname", "db"),
        ("topic.prefix", "cdc"),
        ("column.mask.hash.SHA3-512.with.salt.x", "public.t.c"),
        ("column.propagate.source.type", "public.t.c"),
        ("datatype.propagate.source.type", "public.t.(int4"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    let v = headwater_connector_postgres::config::validate(&props);
    let errs = v.errors_by_field();
    assert!(errs["column.mask.hash.SHA3-512.with.salt.x"][0].contains("not supported"));
    assert!(!errs.contains_key("column.propagate.source.type"));
    assert!(errs["datatype.propagate.source.type"][0].contains("public.t.(int4"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_select_statement_overrides_filter_the_initial_snapshot() {
    let pg = PostgresServer::start().unwrap();
    pg.create_database("over").await.unwrap();
    let db = pg.connect("over").await.unwrap();
    db.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t SELECT i, 'v' || i FROM generate_series(1, 10) i;
         CREATE TABLE u (id int PRIMARY KEY); INSERT INTO u SELECT generate_series(1, 3);
         CREATE TABLE w (name text PRIMARY KEY, pad text); ALTER TABLE w ALTER COLUMN pad SET STORAGE PLAIN; INSERT INTO w SELECT chr(96 + i), repeat('x', 3000) FROM generate_series(1, 6) i;",
    )
    .await
    .unwrap();
    let mut task = started_task(
        &pg,
        "over",
        &[
            ("slot.name", "over_slot"),
            ("table.include.list", "public.t,public.u,public.w"),
            ("snapshot.chunk.rows", "2"),
            (
                "snapshot.select.statement.overrides",
                "public.t,\"public\".\"w\"",
            ),
            (
                "snapshot.select.statement.overrides.public.w",
                "SELECT * FROM public.w WHERE name <> 'b' -- not b",
            ),
            (
                "snapshot.select.statement.overrides.public.t",
                "SELECT * FROM public.t WHERE id % 2 = 0",
            ),
        ],
    )
    .await;
    let snap = drain(&mut task, 13).await;
    let of = |topic: &str| -> Vec<i32> {
        snap.iter()
            .filter(|r| r.topic == topic)
            .flat_map(|r| ids(std::slice::from_ref(r), "r"))
            .collect()
    };
    assert_eq!(
        of("idle.public.t"),
        vec![2, 4, 6, 8, 10],
        "the override's rows, in key order"
    );
    assert_eq!(
        of("idle.public.u"),
        vec![1, 2, 3],
        "other tables are read whole"
    );
    let w: Vec<String> = snap
        .iter()
        .filter(|r| r.topic == "idle.public.w")
        .filter_map(|r| {
            let after = r.value.as_struct()?.get("after")?.as_struct()?;
            after.get("name")?.as_str().map(str::to_owned)
        })
        .collect();
    assert_eq!(
        w,
        ["a", "c", "d", "e", "f"],
        "a table without an integer key is read through its override in one chunk"
    );
    db.execute("INSERT INTO t VALUES (11, 'v11')", &[])
        .await
        .unwrap();
    let streamed = drain(&mut task, 1).await;
    assert_eq!(
        ids(&streamed, "c"),
        vec![11],
        "changes of every row are streamed"
    );
    task.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_name_adjustment_renames_schemas_and_fields() {
    let pg = PostgresServer::start().unwrap();
    pg.create_database("names").await.unwrap();
    let db = pg.connect("names").await.unwrap();
    db.batch_execute(
        r#"CREATE TABLE "order-lines" (id int PRIMARY KEY, "first name" text, "9lives" int);
           INSERT INTO "order-lines" VALUES (1, 'Ada', 9);"#,
    )
    .await
    .unwrap();
    let mut task = started_task(
        &pg,
        "names",
        &[
            ("slot.name", "names_slot"),
            ("topic.prefix", "my-server"),
            ("table.include.list", "public.order-lines"),
            ("schema.name.adjustment.mode", "avro"),
            ("field.name.adjustment.mode", "avro"),
        ],
    )
    .await;
    let snap = drain(&mut task, 1).await;
    task.stop().await;
    let r = &snap[0];
    assert_eq!(
        r.topic, "my-server.public.order-lines",
        "topics keep their names"
    );
    let value = r.value.as_struct().unwrap();
    assert_eq!(
        value.schema().name(),
        Some("my_server.public.order_lines.Envelope")
    );
    let after = value.get("after").unwrap().as_struct().unwrap();
    assert_eq!(
        after.schema().name(),
        Some("my_server.public.order_lines.Value")
    );
    assert_eq!(
        after.get("first_name"),
        Some(&headwater_api::Value::String("Ada".into()))
    );
    assert_eq!(after.get("_9lives"), Some(&headwater_api::Value::Int32(9)));
    let key = r.key.as_struct().unwrap();
    assert_eq!(
        key.schema().name(),
        Some("my_server.public.order_lines.Key")
    );
}

/// A record's topic, op and (for signal rows) type, for assertion messages.
fn summary(r: &headwater_api::SourceRecord) -> String {
    let kind = r.value.as_struct().and_then(|v| {
        v.get("after")?
            .as_struct()?
            .get("type")?
            .as_str()
            .map(str::to_owned)
    });
    format!("{} {:?} {:?}", r.topic, op_of(r), kind)
}

/// Inserts a marker row into `inc` and polls (committing as the engine does) until its event
/// arrived: every change before it is then in `seen`.
async fn catch_up(
    task: &mut PostgresSourceTask,
    db: &tokio_postgres::Client,
    marker: &str,
    seen: &mut Vec<headwater_api::SourceRecord>,
) {
    db.execute("INSERT INTO inc VALUES (9, $1, 0)", &[&marker])
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let b = task.poll().await.unwrap();
        if b.boundary == headwater_api::plugin::Boundary::Commit {
            if let Some(l) = b.records.last() {
                let c = (l.source_partition.clone(), l.source_offset.clone());
                task.commit(std::slice::from_ref(&c)).await.unwrap();
            }
        }
        let arrived = b.records.iter().any(|r| {
            r.value
                .as_struct()
                .and_then(|v| {
                    v.get("after")?
                        .as_struct()?
                        .get("name")?
                        .as_str()
                        .map(str::to_owned)
                })
                .as_deref()
                == Some(marker)
        });
        seen.extend(b.records);
        if arrived {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the marker {marker} did not arrive"
        );
    }
}

/// Applies change events in order to a map from key to row image (`r`/`c`/`u` set, `d`
/// removes), the way a consumer materialises a topic.
fn materialise(
    recs: &[headwater_api::SourceRecord],
    topic: &str,
) -> std::collections::BTreeMap<(i32, String), i32> {
    let mut state = std::collections::BTreeMap::new();
    for r in recs.iter().filter(|r| r.topic == topic) {
        let Some(v) = r.value.as_struct() else {
            continue;
        };
        let image = |field: &str| {
            let row = v.get(field)?.as_struct()?;
            let grp = match row.get("grp")? {
                headwater_api::Value::Int32(i) => *i,
                _ => return None,
            };
            let name = row.get("name")?.as_str()?.to_owned();
            let val = match row.get("val")? {
                headwater_api::Value::Int32(i) => *i,
                _ => return None,
            };
            Some(((grp, name), val))
        };
        match op_of(r).as_deref() {
            Some("d") => {
                let (k, _) = image("before").expect("delete with a before image");
                state.remove(&k);
            }
            Some(_) => {
                let (k, val) = image("after").expect("an after image");
                state.insert(k, val);
            }
            None => {}
        }
    }
    state
}

/// Polls once; commits a batch that ends a transaction (as the engine does); returns its
/// records and keeps the committed offset in `committed`.
async fn step(
    task: &mut PostgresSourceTask,
    committed: &mut Vec<(headwater_api::OffsetMap, headwater_api::OffsetMap)>,
) -> Vec<headwater_api::SourceRecord> {
    step_to(task, committed).await.0
}

/// Polls (committing like the engine) into `seen` until at least `reads` `r` events arrived
/// and a batch ended at a stream offset without incremental progress: the incremental
/// snapshot has ended.
async fn until_incremental_ends(
    task: &mut PostgresSourceTask,
    committed: &mut Vec<(headwater_api::OffsetMap, headwater_api::OffsetMap)>,
    seen: &mut Vec<headwater_api::SourceRecord>,
    reads: usize,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = step(task, committed).await;
        let ended = ids(seen, "r").len() >= reads
            && got
                .iter()
                .rev()
                .find(|r| !r.source_offset.is_empty())
                .is_some_and(|r| {
                    r.source_offset.contains_key("lsn_proc")
                        && !r.source_offset.contains_key("incremental_snapshot")
                });
        seen.extend(got);
        if ended {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the incremental snapshot did not end: {:?}",
            seen.iter().map(summary).collect::<Vec<_>>()
        );
    }
}

/// One poll: its records and whether the batch ended at a commit boundary (a batch may end
/// inside a transaction, its last record without an offset).
async fn step_to(
    task: &mut PostgresSourceTask,
    committed: &mut Vec<(headwater_api::OffsetMap, headwater_api::OffsetMap)>,
) -> (Vec<headwater_api::SourceRecord>, bool) {
    let b = task.poll().await.unwrap();
    let at_commit = b.boundary == headwater_api::plugin::Boundary::Commit;
    if at_commit {
        if let Some(l) = b.records.iter().rev().find(|r| !r.source_offset.is_empty()) {
            *committed = vec![(l.source_partition.clone(), l.source_offset.clone())];
            task.commit(committed).await.unwrap();
        }
    }
    (b.records, at_commit)
}

/// Polls until `writes` ended and a committed offset no longer carries an incremental
/// snapshot's progress, inserting a `tick` row now and then so that offsets keep coming.
async fn until_ended(
    task: &mut PostgresSourceTask,
    committed: &mut Vec<(headwater_api::OffsetMap, headwater_api::OffsetMap)>,
    seen: &mut Vec<headwater_api::SourceRecord>,
    db: &tokio_postgres::Client,
    writes: &tokio::task::JoinHandle<()>,
    what: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last_tick = Instant::now();
    let mut tick = 0;
    loop {
        let got = step(task, committed).await;
        let ended = writes.is_finished()
            && got
                .iter()
                .rev()
                .find(|r| !r.source_offset.is_empty())
                .is_some_and(|r| {
                    r.source_offset.contains_key("lsn_proc")
                        && !r.source_offset.contains_key("incremental_snapshot")
                });
        seen.extend(got);
        if ended {
            return;
        }
        if writes.is_finished() && last_tick.elapsed() > Duration::from_millis(200) {
            tick += 1;
            db.execute(
                "INSERT INTO inc VALUES (9, $1, 0)",
                &[&format!("{what}-tick{tick}")],
            )
            .await
            .unwrap();
            last_tick = Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the incremental snapshot did not end"
        );
    }
}

/// The content of `inc`, keyed like [`materialise`]'s.
async fn inc_table(db: &tokio_postgres::Client) -> std::collections::BTreeMap<(i32, String), i32> {
    db.query("SELECT grp, name, val FROM inc", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| ((r.get(0), r.get(1)), r.get(2)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incremental_snapshot_copies_in_chunks_while_writers_change_the_table() {
    let pg = PostgresServer::start().unwrap();
    pg.create_database("inc").await.unwrap();
    let db = pg.connect("inc").await.unwrap();
    db.batch_execute(
        "CREATE TABLE inc (grp int, name text, val int NOT NULL, PRIMARY KEY (grp, name));
         INSERT INTO inc SELECT i % 3, 'n' || i, i FROM generate_series(1, 60) i;
         CREATE TABLE nokey (id int); INSERT INTO nokey VALUES (1);
         CREATE TABLE debezium_signal (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048));",
    )
    .await
    .unwrap();
    let props = task_props(
        &pg,
        "inc",
        &[
            ("slot.name", "inc_slot"),
            ("table.include.list", "public.inc,public.nokey"),
            ("publication.autocreate.mode", "filtered"),
            ("signal.data.collection", "public.debezium_signal"),
            ("snapshot.mode", "no_data"),
            ("incremental.snapshot.chunk.size", "7"),
            ("max.batch.size", "16"),
        ],
    );
    // The task's snapshot progress (its /status and metrics), shared by incremental snapshots.
    let status = headwater_api::SnapshotProgress::default();
    let start = |offsets: Vec<(headwater_api::OffsetMap, headwater_api::OffsetMap)>| {
        let (props, status) = (props.clone(), status.clone());
        async move {
            let mut t = PostgresSourceTask::new();
            let ctx = SourceTaskContext {
                committed_offsets: offsets,
                snapshot_progress: status,
                ..Default::default()
            };
            t.start(ctx, props).await.unwrap();
            t
        }
    };

    let mut committed = Vec::new();
    let mut t1 = start(Vec::new()).await;
    let _ = step(&mut t1, &mut committed).await;
    db.batch_execute(
        r#"INSERT INTO debezium_signal VALUES ('inc-1', 'execute-snapshot', '{"data-collections": ["public\\.inc", "public\\.nokey"]}')"#,
    )
    .await
    .unwrap();
    // The first chunk comes out; the task stops before reading the rest.
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    // Until the chunk is out and a batch ended at a commit boundary after it (the chunk goes
    // out at its close watermark; the transaction's end may come in the next batch).
    let mut at_commit = false;
    while !(at_commit && seen.iter().any(|r| op_of(r).as_deref() == Some("r"))) {
        let (got, commit) = step_to(&mut t1, &mut committed).await;
        seen.extend(got);
        at_commit = commit;
        assert!(
            Instant::now() < deadline,
            "no chunk arrived: {:?}",
            seen.iter().map(summary).collect::<Vec<_>>()
        );
    }
    let first_chunk: Vec<_> = seen
        .iter()
        .filter(|r| op_of(r).as_deref() == Some("r"))
        .collect();
    assert_eq!(
        first_chunk.len(),
        7,
        "one chunk of incremental.snapshot.chunk.size rows"
    );
    for r in &first_chunk {
        let source = r
            .value
            .as_struct()
            .unwrap()
            .get("source")
            .unwrap()
            .as_struct()
            .unwrap();
        assert_eq!(
            source.get("snapshot").and_then(|v| v.as_str()),
            Some("incremental")
        );
    }
    let progress = offset_text(seen.last().unwrap(), "incremental_snapshot").unwrap();
    assert!(progress.contains("\"after\":[\"0\",\"n3\"]"), "{progress}");
    assert!(
        seen.iter().any(|r| r.topic == "idle.public.debezium_signal"
            && r.value
                .as_struct()
                .and_then(|v| v
                    .get("after")?
                    .as_struct()?
                    .get("type")?
                    .as_str()
                    .map(str::to_owned))
                .as_deref()
                == Some("snapshot-window-close")),
        "the watermarks are streamed like any signal row"
    );
    t1.stop().await;

    // Writers change the table while the copy goes on in a restarted task.
    let mut t2 = start(committed.clone()).await;
    let writer = {
        let conn = pg.connect("inc").await.unwrap();
        tokio::spawn(async move {
            for i in 1..=60 {
                let name = format!("n{i}");
                let statement = match i % 4 {
                    0 => "DELETE FROM inc WHERE name = $1",
                    1 => "UPDATE inc SET val = val + 1000 WHERE name = $1",
                    2 => "UPDATE inc SET grp = grp + 10 WHERE name = $1",
                    _ => "INSERT INTO inc VALUES (5, $1, 7)",
                };
                conn.execute(statement, &[&name]).await.unwrap();
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        })
    };
    until_ended(&mut t2, &mut committed, &mut seen, &db, &writer, "first").await;
    writer.await.unwrap();
    catch_up(&mut t2, &db, "caught-up-1", &mut seen).await;
    let expected = inc_table(&db).await;
    assert_eq!(
        materialise(&seen, "idle.public.inc"),
        expected,
        "the events in order give the table's content"
    );
    let copied = seen
        .iter()
        .filter(|r| op_of(r).as_deref() == Some("r"))
        .count();
    assert!((7..=60).contains(&copied), "{copied} rows copied");
    let progress = status.status();
    assert!(
        progress.started && !progress.running && progress.rows > 0 && progress.tables_done == 2,
        "the task's snapshot progress shows the incremental snapshot: {progress:?}"
    );
    assert!(
        seen.iter().all(|r| r.topic != "idle.public.nokey"),
        "a table without a key is not copied"
    );

    // A second request, stopped at once: no row of it is copied after the stop.
    db.batch_execute(
        r#"INSERT INTO debezium_signal VALUES ('inc-2', 'execute-snapshot', '{"data-collections": ["public\\.inc"], "type": "incremental"}')"#,
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut again = Vec::new();
    while !again.iter().any(|r| op_of(r).as_deref() == Some("r")) {
        again.extend(step(&mut t2, &mut committed).await);
        assert!(
            Instant::now() < deadline,
            "the second request copied nothing"
        );
    }
    db.batch_execute(
        r#"INSERT INTO debezium_signal VALUES ('stop-1', 'stop-snapshot', '{"data-collections": ["public\\.inc"], "type": "incremental"}')"#,
    )
    .await
    .unwrap();
    db.batch_execute("INSERT INTO inc VALUES (9, 'after-stop', 0)")
        .await
        .unwrap();
    let mut after_stop = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        after_stop.extend(step(&mut t2, &mut committed).await);
        let marker = after_stop.iter().position(|r| {
            op_of(r).as_deref() == Some("c")
                && r.value
                    .as_struct()
                    .and_then(|v| {
                        v.get("after")?
                            .as_struct()?
                            .get("name")?
                            .as_str()
                            .map(str::to_owned)
                    })
                    .as_deref()
                    == Some("after-stop")
        });
        if let Some(at) = marker {
            let stop = after_stop
                .iter()
                .position(|r| r.topic == "idle.public.debezium_signal")
                .unwrap_or(at);
            assert!(
                after_stop[stop..]
                    .iter()
                    .all(|r| op_of(r).as_deref() != Some("r")),
                "no chunk after the stop"
            );
            assert!(!after_stop[at]
                .source_offset
                .contains_key("incremental_snapshot"));
            break;
        }
        assert!(Instant::now() < deadline, "the marker did not arrive");
    }
    seen.extend(again);
    seen.extend(after_stop);

    // A change that commits while a chunk is being read, after the read's snapshot: the chunk
    // holds the row as it was, the stream the change inside the window, and the chunk's stale
    // row must not follow the change. The condition's sleep runs after the snapshot is taken;
    // the writer commits while the chunk's COPY sleeps.
    let (first_grp, first_name): (i32, String) = {
        let row = db
            .query_one(
                "SELECT grp, name FROM inc WHERE grp = 0 ORDER BY grp, name LIMIT 1",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    db.batch_execute(
        r#"INSERT INTO debezium_signal VALUES ('inc-3', 'execute-snapshot', '{"data-collections": ["public\\.inc"], "additional-conditions": [{"data-collection": "public.inc", "filter": "grp = 0 AND (SELECT pg_sleep(0.4)) IS NOT NULL"}]}')"#,
    )
    .await
    .unwrap();
    let racer = {
        let conn = pg.connect("inc").await.unwrap();
        let name = first_name.clone();
        tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let sleeping: i64 = conn
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'COPY (SELECT%' AND wait_event = 'PgSleep'",
                        &[],
                    )
                    .await
                    .unwrap()
                    .get(0);
                if sleeping > 0 {
                    break;
                }
                assert!(Instant::now() < deadline, "no chunk read started");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            conn.execute(
                "UPDATE inc SET val = 424242 WHERE grp = $1 AND name = $2",
                &[&first_grp, &name],
            )
            .await
            .unwrap();
        })
    };
    until_ended(&mut t2, &mut committed, &mut seen, &db, &racer, "third").await;
    racer.await.unwrap();
    catch_up(&mut t2, &db, "caught-up-2", &mut seen).await;
    let expected = inc_table(&db).await;
    let state = materialise(&seen, "idle.public.inc");
    assert_eq!(
        state.get(&(first_grp, first_name.clone())),
        Some(&424242),
        "the change made while its chunk was read is the row's last event"
    );
    assert_eq!(
        state, expected,
        "the events in order give the table's content"
    );
    t2.stop().await;
}

/// A transaction whose commit record precedes a chunk's watermarks in the WAL but which is not
/// visible yet when the chunk is read, streamed after the read: the chunk's copy of the row
/// it changed is dropped (see [`unseen_transaction`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_the_chunk_read_did_not_see_replaces_its_row_before_the_window_opens() {
    unseen_transaction(false).await;
}

/// As above, the transaction streamed before the read: the chunk is read again once it is
/// visible.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_read_that_misses_a_transaction_handed_out_already_is_read_again() {
    unseen_transaction(true).await;
}

/// PostgreSQL writes a commit record, then waits for a synchronous standby, and only then
/// makes the transaction visible; the logical stream decodes it before that. Here the
/// writer's session waits for a standby that never comes (`synchronous_commit=on`; the
/// server's default, and so the task's sessions, is `off`), so its update is in the WAL
/// before the chunk's watermarks and invisible to the chunk's read. `streamed_first`: the
/// update is handed out before the incremental snapshot starts (else the signal is in the WAL
/// before it and the chunk is read before the stream reaches it). Either way the chunk must
/// not hand out the row as it was after the update.
async fn unseen_transaction(streamed_first: bool) {
    let pg = PostgresServer::start().unwrap();
    pg.create_database("inc").await.unwrap();
    let db = pg.connect("inc").await.unwrap();
    db.batch_execute(
        "CREATE TABLE inc (grp int, name text, val int NOT NULL, PRIMARY KEY (grp, name));
         INSERT INTO inc SELECT 0, 'n' || i, i FROM generate_series(1, 5) i;
         CREATE TABLE debezium_signal (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048));",
    )
    .await
    .unwrap();
    let mut task = started_task(
        &pg,
        "inc",
        &[
            ("slot.name", "unseen_slot"),
            ("table.include.list", "public.inc"),
            ("publication.autocreate.mode", "filtered"),
            ("signal.data.collection", "public.debezium_signal"),
            ("snapshot.mode", "no_data"),
            ("incremental.snapshot.chunk.size", "10"),
        ],
    )
    .await;
    let mut committed = Vec::new();
    let mut seen = step(&mut task, &mut committed).await;
    const TOPIC: &str = "idle.public.inc";
    let n1 = (0, "n1".to_owned());
    let signal = r#"INSERT INTO debezium_signal VALUES ('inc-1', 'execute-snapshot', '{"data-collections": ["public\\.inc"]}')"#;
    if !streamed_first {
        db.batch_execute(signal).await.unwrap();
    }

    // The writer's commit waits for a synchronous standby named "nobody".
    db.batch_execute("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
        .await
        .unwrap();
    db.batch_execute("SELECT pg_reload_conf()").await.unwrap();
    let writer_conn = pg.connect("inc").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let names: String = writer_conn
            .query_one("SHOW synchronous_standby_names", &[])
            .await
            .unwrap()
            .get(0);
        if names == "nobody" {
            break;
        }
        assert!(Instant::now() < deadline, "the setting did not take");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    writer_conn
        .batch_execute("SET synchronous_commit = on")
        .await
        .unwrap();
    let writer = tokio::spawn(async move {
        writer_conn
            .batch_execute("UPDATE inc SET val = 424242 WHERE name = 'n1'")
            .await
            .unwrap();
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let waiting: i64 = db
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if waiting == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "the update does not wait");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let invisible: i32 = db
        .query_one("SELECT val FROM inc WHERE name = 'n1'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(invisible, 1, "the update is not visible yet");

    let deadline = Instant::now() + Duration::from_secs(30);
    if streamed_first {
        // The update is decoded and handed out while its session still waits.
        while materialise(&seen, TOPIC).get(&n1) != Some(&424242) {
            seen.extend(step(&mut task, &mut committed).await);
            assert!(
                Instant::now() < deadline,
                "the waiting update was not streamed: {:?}",
                seen.iter().map(summary).collect::<Vec<_>>()
            );
        }
        db.batch_execute(signal).await.unwrap();
        // Chunks are read (and dropped) while the update stays invisible.
        let until = Instant::now() + Duration::from_millis(2500);
        while Instant::now() < until {
            seen.extend(step(&mut task, &mut committed).await);
        }
        assert!(
            seen.iter()
                .all(|r| op_of(r).as_deref() != Some("r") || r.topic != TOPIC),
            "no chunk goes out while a transaction it missed was handed out: {:?}",
            seen.iter().map(summary).collect::<Vec<_>>()
        );
    } else {
        // The chunk goes out, without the row the update replaced, while the update waits.
        let names = |seen: &[headwater_api::SourceRecord]| {
            seen.iter()
                .filter(|r| r.topic == TOPIC && op_of(r).as_deref() == Some("r"))
                .count()
        };
        while names(&seen) < 4 {
            seen.extend(step(&mut task, &mut committed).await);
            assert!(
                Instant::now() < deadline,
                "the chunk did not go out: {:?}",
                seen.iter().map(summary).collect::<Vec<_>>()
            );
        }
        assert_eq!(
            materialise(&seen, TOPIC).get(&n1),
            Some(&424242),
            "the update is the row's last event: {:?}",
            seen.iter().map(summary).collect::<Vec<_>>()
        );
    }
    db.batch_execute("ALTER SYSTEM RESET synchronous_standby_names")
        .await
        .unwrap();
    db.batch_execute("SELECT pg_reload_conf()").await.unwrap();
    until_ended(&mut task, &mut committed, &mut seen, &db, &writer, "unseen").await;
    writer.await.unwrap();
    // A tick inserted last may still be on its way.
    catch_up(&mut task, &db, "unseen-caught-up", &mut seen).await;
    assert_eq!(
        materialise(&seen, TOPIC),
        inc_table(&db).await,
        "the events in order give the table"
    );
    assert_eq!(materialise(&seen, TOPIC).get(&n1), Some(&424242));
    task.stop().await;
}

/// `signal.enabled.channels=file`: signals written as JSON lines to `signal.file` run
/// incremental and blocking snapshots (the incremental one still writes its watermarks into
/// the signal table); rows inserted into the signal table are not signals then; each line is
/// acted on once and the file is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_channel_signals_run_snapshots_and_are_read_once() {
    let pg = PostgresServer::start().unwrap();
    pg.create_database("files").await.unwrap();
    let db = pg.connect("files").await.unwrap();
    db.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, v text);
         INSERT INTO t SELECT i, 'v' || i FROM generate_series(1, 10) i;
         CREATE TABLE debezium_signal (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048));",
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("signals.txt");
    let file_text = file.display().to_string();
    let mut task = started_task(
        &pg,
        "files",
        &[
            ("slot.name", "files_slot"),
            ("table.include.list", "public.t"),
            ("publication.autocreate.mode", "filtered"),
            ("signal.data.collection", "public.debezium_signal"),
            ("signal.enabled.channels", "file"),
            ("signal.file", &file_text),
            ("signal.poll.interval.ms", "100"),
            ("snapshot.mode", "no_data"),
            ("incremental.snapshot.chunk.size", "4"),
        ],
    )
    .await;
    let mut committed = Vec::new();
    let mut seen = step(&mut task, &mut committed).await;

    // A row in the signal table is no signal with the source channel off.
    db.batch_execute(
        r#"INSERT INTO debezium_signal VALUES ('row-1', 'execute-snapshot', '{"data-collections": ["public\\.t"], "type": "blocking"}');
           INSERT INTO t VALUES (11, 'v11');"#,
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ids(&seen, "c").contains(&11) {
        seen.extend(step(&mut task, &mut committed).await);
        assert!(Instant::now() < deadline, "the insert did not arrive");
    }
    let until = Instant::now() + Duration::from_millis(800);
    while Instant::now() < until {
        seen.extend(step(&mut task, &mut committed).await);
    }
    assert!(ids(&seen, "r").is_empty(), "the signal row ran nothing");

    std::fs::write(
        &file,
        "not a signal\n{\"id\": \"f-1\", \"type\": \"execute-snapshot\", \"data\": {\"data-collections\": [\"public\\\\.t\"], \"type\": \"incremental\"}}\n",
    )
    .unwrap();
    until_incremental_ends(&mut task, &mut committed, &mut seen, 11).await;
    let mut read: Vec<i32> = ids(&seen, "r");
    read.sort_unstable();
    assert_eq!(read, (1..=11).collect::<Vec<_>>(), "every row once");
    assert!(!file.exists(), "the file was taken");

    // A blocking request from the file copies the table again; the line is read once.
    std::fs::write(
        &file,
        "{\"id\": \"f-2\", \"type\": \"execute-snapshot\", \"data\": \"{\\\"data-collections\\\": [\\\"public.t\\\"], \\\"type\\\": \\\"blocking\\\"}\"}\n",
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while ids(&seen, "r").len() < 22 {
        seen.extend(step(&mut task, &mut committed).await);
        assert!(
            Instant::now() < deadline,
            "the blocking snapshot did not run"
        );
    }
    let until = Instant::now() + Duration::from_millis(800);
    while Instant::now() < until {
        seen.extend(step(&mut task, &mut committed).await);
    }
    assert_eq!(ids(&seen, "r").len(), 22, "the line ran once");
    task.stop().await;
}

/// `incremental.snapshot.watermarking.strategy=INSERT_DELETE`: each chunk's window closes by
/// deleting its open watermark row, so the incremental snapshot copies every row once and
/// leaves no watermark behind in the signal table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_delete_watermarks_leave_the_signal_table_empty() {
    let pg = PostgresServer::start().unwrap();
    pg.create_database("wmdel").await.unwrap();
    let db = pg.connect("wmdel").await.unwrap();
    db.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, v text);
         INSERT INTO t SELECT i, 'v' || i FROM generate_series(1, 10) i;
         CREATE TABLE debezium_signal (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048));",
    )
    .await
    .unwrap();
    let mut task = started_task(
        &pg,
        "wmdel",
        &[
            ("slot.name", "wmdel_slot"),
            ("table.include.list", "public.t"),
            ("publication.autocreate.mode", "filtered"),
            ("signal.data.collection", "public.debezium_signal"),
            ("snapshot.mode", "no_data"),
            ("incremental.snapshot.chunk.size", "4"),
            (
                "incremental.snapshot.watermarking.strategy",
                "insert_delete",
            ),
        ],
    )
    .await;
    let mut committed = Vec::new();
    let mut seen = step(&mut task, &mut committed).await;
    db.batch_execute(
        r#"INSERT INTO debezium_signal VALUES ('sig-1', 'execute-snapshot', '{"data-collections": ["public\\.t"], "type": "incremental"}');"#,
    )
    .await
    .unwrap();
    until_incremental_ends(&mut task, &mut committed, &mut seen, 10).await;
    let mut read = ids(&seen, "r");
    read.sort_unstable();
    assert_eq!(read, (1..=10).collect::<Vec<_>>(), "every row once");
    let left: Vec<String> = db
        .query("SELECT id FROM debezium_signal ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, ["sig-1"], "no watermark is left behind");
    task.stop().await;
}

/// `publish.via.partition.root=true`: a partitioned table is captured as its root: the root
/// is snapshotted (its partitions' rows, none of them twice), the publication is created with
/// `publish_via_partition_root`, and changes of every partition go out under the root's
/// topic; the partitions get no topics of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_tables_are_captured_as_their_root() {
    let pg = PostgresServer::start().unwrap();
    pg.create_database("parts").await.unwrap();
    let db = pg.connect("parts").await.unwrap();
    db.batch_execute(
        "CREATE TABLE events (id int, region text, v int, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
         CREATE TABLE events_eu PARTITION OF events FOR VALUES IN ('eu');
         CREATE TABLE events_us PARTITION OF events FOR VALUES IN ('us');
         CREATE TABLE plain (id int PRIMARY KEY);
         INSERT INTO events SELECT i, CASE WHEN i % 2 = 0 THEN 'eu' ELSE 'us' END, i FROM generate_series(1, 10) i;
         INSERT INTO plain VALUES (1);",
    )
    .await
    .unwrap();
    let mut task = started_task(
        &pg,
        "parts",
        &[
            ("slot.name", "parts_slot"),
            ("table.include.list", "public.events.*,public.plain"),
            ("publication.autocreate.mode", "filtered"),
            ("publish.via.partition.root", "true"),
        ],
    )
    .await;
    let snap = drain(&mut task, 11).await;
    let topics: std::collections::BTreeSet<&str> = snap.iter().map(|r| r.topic.as_str()).collect();
    assert_eq!(
        topics,
        ["idle.public.events", "idle.public.plain"]
            .into_iter()
            .collect(),
        "the root is snapshotted, not its partitions"
    );
    let mut read = ids(&snap, "r");
    read.sort_unstable();
    assert_eq!(read, [1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "each row once");
    let via_root: bool = db
        .query_one(
            "SELECT pubviaroot FROM pg_publication WHERE pubname = 'dbz_publication'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(via_root, "the publication publishes via the root");

    db.batch_execute(
        "INSERT INTO events VALUES (11, 'eu', 11), (12, 'us', 12);
         UPDATE events SET v = 100 WHERE id = 2;
         DELETE FROM events WHERE id = 3;",
    )
    .await
    .unwrap();
    let stream = drain(&mut task, 4).await;
    task.stop().await;
    assert!(
        stream.iter().all(|r| r.topic == "idle.public.events"),
        "partitions' changes go out under the root: {:?}",
        stream.iter().map(|r| r.topic.as_str()).collect::<Vec<_>>()
    );
    assert_eq!(ids(&stream, "c"), [11, 12]);
    assert_eq!(ids(&stream, "u"), [2]);
    // A publication that names partitions otherwise than the setting is refused when the
    // connector may not manage it.
    let mut again = PostgresSourceTask::new();
    let refused = again
        .start(
            SourceTaskContext::default(),
            task_props(
                &pg,
                "parts",
                &[
                    ("slot.name", "parts_slot"),
                    ("table.include.list", "public.events.*"),
                    ("publication.autocreate.mode", "disabled"),
                ],
            ),
        )
        .await
        .expect_err("a mismatched publication is refused");
    assert!(
        refused
            .message()
            .contains("publish_via_partition_root = true"),
        "{}",
        refused.message()
    );
    assert_eq!(
        stream
            .iter()
            .filter(|r| op_of(r).as_deref() == Some("d"))
            .count(),
        1
    );
}

/// `notification.enabled.channels=sink`: the initial snapshot and an incremental one tell
/// their progress as Debezium's notification records on `notification.sink.topic.name`
/// (started, each table in progress and done with its row count, completed; the incremental
/// one's chunks too), beside the data records and without offsets of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_send_notifications_to_the_sink_topic() {
    let pg = PostgresServer::start().unwrap();
    pg.create_database("notes").await.unwrap();
    let db = pg.connect("notes").await.unwrap();
    db.batch_execute(
        "CREATE TABLE a (id int PRIMARY KEY);
         CREATE TABLE b (id int PRIMARY KEY);
         INSERT INTO a SELECT generate_series(1, 5);
         INSERT INTO b SELECT generate_series(1, 3);
         CREATE TABLE debezium_signal (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048));",
    )
    .await
    .unwrap();
    let mut task = started_task(
        &pg,
        "notes",
        &[
            ("slot.name", "notes_slot"),
            ("table.include.list", "public.a,public.b"),
            ("publication.autocreate.mode", "filtered"),
            ("signal.data.collection", "public.debezium_signal"),
            ("incremental.snapshot.chunk.size", "2"),
            ("notification.enabled.channels", "sink,log"),
            ("notification.sink.topic.name", "notes"),
        ],
    )
    .await;
    let snapshot = drain(&mut task, 8 + 6).await;
    let initial = notifications(&snapshot, "notes");
    let kinds: Vec<(&str, &str)> = initial
        .iter()
        .map(|n| (n.aggregate_type.as_str(), n.kind.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("Initial Snapshot", "STARTED"),
            ("Initial Snapshot", "IN_PROGRESS"),
            ("Initial Snapshot", "TABLE_SCAN_COMPLETED"),
            ("Initial Snapshot", "IN_PROGRESS"),
            ("Initial Snapshot", "TABLE_SCAN_COMPLETED"),
            ("Initial Snapshot", "COMPLETED"),
        ]
    );
    let done_a = &initial[2].data;
    assert_eq!(done_a["scanned_collection"], "public.a");
    assert_eq!(done_a["total_rows_scanned"], "5");
    assert_eq!(done_a["status"], "SUCCEEDED");
    assert_eq!(done_a["data_collections"], "public.a,public.b");
    assert_eq!(done_a["connector_name"], "idle");
    assert_eq!(
        initial[3].data["current_collection_in_progress"],
        "public.b"
    );
    assert_eq!(initial[4].data["total_rows_scanned"], "3");

    let mut committed = Vec::new();
    let mut seen = step(&mut task, &mut committed).await;
    db.batch_execute(
        r#"INSERT INTO debezium_signal VALUES ('sig-1', 'execute-snapshot', '{"data-collections": ["public\\.a"], "type": "incremental"}');"#,
    )
    .await
    .unwrap();
    until_incremental_ends(&mut task, &mut committed, &mut seen, 5).await;
    // The completion is raised when the next table is asked for: one more poll.
    seen.extend(step(&mut task, &mut committed).await);
    let incremental = notifications(&seen, "notes");
    let kinds: Vec<&str> = incremental.iter().map(|n| n.kind.as_str()).collect();
    assert!(
        incremental
            .iter()
            .all(|n| n.aggregate_type == "Incremental Snapshot" && n.id == "sig-1"),
        "an incremental snapshot's notifications carry its signal's id: {incremental:?}"
    );
    assert_eq!(
        kinds,
        [
            "STARTED",
            "IN_PROGRESS",
            "IN_PROGRESS",
            "IN_PROGRESS",
            "TABLE_SCAN_COMPLETED",
            "COMPLETED"
        ],
        "{incremental:?}"
    );
    assert_eq!(incremental[0].data["data_collections"], "public.a");
    assert_eq!(incremental[1].data["maximum_key"], "5");
    assert_eq!(incremental[1].data["last_processed_key"], "2");
    assert_eq!(incremental[4].data["total_rows_scanned"], "5");
    assert_eq!(incremental[4].data["status"], "SUCCEEDED");
    task.stop().await;
}

/// `snapshot.tables.order.by.row.count`: the snapshot copies the tables by their row count,
/// largest first (`descending`) or smallest first (`ascending`), instead of the captured order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_snapshot_orders_tables_by_row_count_when_asked() {
    let pg = PostgresServer::start().unwrap();
    pg.create_database("byrows").await.unwrap();
    let db = pg.connect("byrows").await.unwrap();
    db.batch_execute(
        "CREATE TABLE a (id int PRIMARY KEY);
         CREATE TABLE b (id int PRIMARY KEY);
         CREATE TABLE c (id int PRIMARY KEY);
         INSERT INTO a SELECT generate_series(1, 5);
         INSERT INTO b SELECT generate_series(1, 50);
         INSERT INTO c VALUES (1);",
    )
    .await
    .unwrap();
    for (order, expected) in [
        ("disabled", ["a", "b", "c"]),
        ("descending", ["b", "a", "c"]),
        ("ascending", ["c", "a", "b"]),
    ] {
        let slot = format!("byrows_{order}");
        let mut task = started_task(
            &pg,
            "byrows",
            &[
                ("slot.name", slot.as_str()),
                ("table.include.list", "public.a,public.b,public.c"),
                ("snapshot.mode", "initial_only"),
                ("snapshot.tables.order.by.row.count", order),
            ],
        )
        .await;
        let records = drain(&mut task, 56).await;
        let mut tables: Vec<&str> = records
            .iter()
            .map(|r| r.topic.trim_start_matches("idle.public."))
            .collect();
        tables.dedup();
        assert_eq!(tables, expected, "{order}");
        task.stop().await;
    }
}

/// `snapshot.locking.mode=shared`: the start locks the tables to copy (before reading their
/// definitions) until the snapshot ends: a schema change meanwhile waits (here: times out),
/// and runs once the snapshot has ended. (An exclusive holder cannot make the start's own lock
/// time out in a test: its transaction holds an xid, which the slot creation before the lock
/// waits for.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_snapshot_locks_keep_schema_changes_out_until_the_snapshot_ends() {
    let (pg, db) = server_with_captured_rows("locks", 5).await;
    let props = task_props(
        &pg,
        "locks",
        &[
            ("slot.name", "locks_slot"),
            ("table.include.list", "public.captured"),
            ("snapshot.mode", "initial_only"),
            ("snapshot.locking.mode", "shared"),
        ],
    );
    let mut task = PostgresSourceTask::new();
    task.start(SourceTaskContext::default(), props)
        .await
        .unwrap();
    let alter = "SET lock_timeout = 300; ALTER TABLE captured ADD COLUMN extra int";
    let blocked = db
        .batch_execute(alter)
        .await
        .expect_err("the snapshot holds its lock");
    assert_eq!(blocked.code().map(|c| c.code()), Some("55P03"), "{blocked}");
    let rows = drain(&mut task, 5).await;
    assert_eq!(ids(&rows, "r").len(), 5);
    // The snapshot's end released the lock.
    db.batch_execute(alter).await.unwrap();
    task.stop().await;
}
