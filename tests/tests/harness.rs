//! Integration tests of the server harness itself: each server starts with the configuration
//! CDC needs (logical WAL / row-based binlog), answers real clients, stops when dropped, and
//! several can run at once without interfering.
//!
//! Invariant: every test asserts on what a real client sees; none is ignored.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::thread;
use std::time::Duration;

use headwater_tests::{MariaDbServer, PostgresServer};
use mysql_async::prelude::Queryable;

/// True when something accepts TCP connections on 127.0.0.1:`port`.
fn accepts_connections(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
}

#[tokio::test]
async fn postgres_starts_with_logical_wal_and_stops_on_drop() {
    let pg = PostgresServer::start().expect("start PostgreSQL");
    let port = pg.port();
    assert_eq!(pg.host(), "127.0.0.1");
    assert_eq!(
        pg.connection_string("app"),
        format!("host=127.0.0.1 port={port} user=postgres dbname=app")
    );
    assert!(pg.data_dir().join("PG_VERSION").is_file());

    pg.create_database("app").await.expect("create database");
    let client = pg.connect("app").await.expect("connect");

    let wal_level: String = client
        .query_one("SHOW wal_level", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(wal_level, "logical");
    let encoding: String = client
        .query_one("SHOW server_encoding", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(encoding, "UTF8");
    let slots: String = client
        .query_one("SHOW max_replication_slots", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(slots, "20");

    client
        .batch_execute(
            "CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL);
             INSERT INTO items VALUES (1, 'one'), (2, 'two');",
        )
        .await
        .expect("create and fill a table");
    let rows = client
        .query("SELECT id, name FROM items ORDER BY id", &[])
        .await
        .unwrap();
    let got: Vec<(i32, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(got, vec![(1, "one".to_owned()), (2, "two".to_owned())]);

    let created: String = client
        .query_one(
            "SELECT slot_name::text FROM pg_create_logical_replication_slot('s', 'pgoutput')",
            &[],
        )
        .await
        .expect("create a logical replication slot")
        .get(0);
    assert_eq!(created, "s");
    let slot = client
        .query_one(
            "SELECT plugin::text, slot_type FROM pg_replication_slots WHERE slot_name = 's'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(slot.get::<_, String>(0), "pgoutput");
    assert_eq!(slot.get::<_, String>(1), "logical");
    client
        .batch_execute("SELECT pg_drop_replication_slot('s')")
        .await
        .unwrap();

    assert!(accepts_connections(port));
    let dir = pg.root_dir().to_path_buf();
    drop(client);
    drop(pg);
    assert!(
        !accepts_connections(port),
        "port {port} still accepts connections after drop"
    );
    assert!(!dir.exists(), "{} survived the drop", dir.display());
}

#[tokio::test]
async fn postgres_rejects_bad_database_names() {
    let pg = PostgresServer::start().expect("start PostgreSQL");
    let err = pg.create_database("no spaces").await.unwrap_err();
    assert!(err.to_string().contains("invalid database name"), "{err}");
    // The server is still fine and the name check did not touch it.
    let client = pg.connect("postgres").await.expect("connect");
    let n: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_database WHERE datname = 'no spaces'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
}

#[tokio::test]
async fn mariadb_starts_with_row_binlog_and_stops_on_drop() {
    let db = MariaDbServer::start().expect("start MariaDB");
    let port = db.port();
    assert_eq!(db.url("app"), format!("mysql://root@127.0.0.1:{port}/app"));
    assert_eq!(db.server_id(), u32::from(port));

    db.create_database("app").await.expect("create database");
    let mut conn = db.connect("app").await.expect("connect");

    let settings: (i64, String, String, String) = conn
        .query_first("SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        settings,
        (1, "ROW".to_owned(), "FULL".to_owned(), "FULL".to_owned())
    );
    let server_id: u32 = conn
        .query_first("SELECT @@server_id")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(server_id, db.server_id());

    conn.query_drop("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL)")
        .await
        .unwrap();
    conn.query_drop("INSERT INTO items VALUES (1, 'one'), (2, 'two')")
        .await
        .unwrap();
    let got: Vec<(i32, String)> = conn
        .query("SELECT id, name FROM items ORDER BY id")
        .await
        .unwrap();
    assert_eq!(got, vec![(1, "one".to_owned()), (2, "two".to_owned())]);

    let status: Vec<mysql_async::Row> = conn.query("SHOW MASTER STATUS").await.unwrap();
    assert_eq!(status.len(), 1, "SHOW MASTER STATUS returned no row");
    let file: String = status[0].get(0).unwrap();
    let position: u64 = status[0].get(1).unwrap();
    assert!(file.starts_with("mysql-bin."), "binlog file {file}");
    assert!(position > 4, "binlog position {position}");
    assert!(db.binlog_dir().join(&file).is_file());

    conn.disconnect().await.unwrap();
    assert!(accepts_connections(port));
    let dir = db.root_dir().to_path_buf();
    drop(db);
    assert!(
        !accepts_connections(port),
        "port {port} still accepts connections after drop"
    );
    assert!(!dir.exists(), "{} survived the drop", dir.display());
}

#[test]
fn many_servers_at_once() {
    let pg_threads: Vec<_> = (0..3)
        .map(|_| thread::spawn(|| PostgresServer::start().expect("start PostgreSQL")))
        .collect();
    let maria_threads: Vec<_> = (0..2)
        .map(|_| thread::spawn(|| MariaDbServer::start().expect("start MariaDB")))
        .collect();
    let pgs: Vec<PostgresServer> = pg_threads.into_iter().map(|t| t.join().unwrap()).collect();
    let marias: Vec<MariaDbServer> = maria_threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();

    let mut ports: Vec<u16> = pgs
        .iter()
        .map(|s| s.port())
        .chain(marias.iter().map(|s| s.port()))
        .collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 5, "servers share ports");
    assert_ne!(marias[0].server_id(), marias[1].server_id());
    assert_ne!(marias[0].data_dir(), marias[1].data_dir());

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        for (i, pg) in pgs.iter().enumerate() {
            let client = pg.connect("postgres").await.expect("connect to PostgreSQL");
            let port: String = client.query_one("SHOW port", &[]).await.unwrap().get(0);
            assert_eq!(port, pg.port().to_string(), "PostgreSQL #{i}");
        }
        for (i, db) in marias.iter().enumerate() {
            let mut conn = db.connect("").await.expect("connect to MariaDB");
            let (port, server_id): (u16, u32) = conn
                .query_first("SELECT @@port, @@server_id")
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                (port, server_id),
                (db.port(), db.server_id()),
                "MariaDB #{i}"
            );
            conn.disconnect().await.unwrap();
        }
    });
    drop(runtime);

    drop(pgs);
    drop(marias);
    for port in ports {
        assert!(
            !accepts_connections(port),
            "port {port} still open after drop"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secantus_answers_as_a_replica_set_and_keeps_data_across_a_restart() {
    use mongodb::bson::doc;
    let mut server = tokio::task::spawn_blocking(headwater_tests::MongoServer::start)
        .await
        .unwrap()
        .expect("SecantusDB");
    let port = server.port();
    assert!(accepts_connections(port));
    let client = mongodb::Client::with_uri_str(server.uri()).await.unwrap();
    let hello = client
        .database("admin")
        .run_command(doc! {"hello": 1})
        .await
        .unwrap();
    assert_eq!(hello.get_str("setName").unwrap(), "secantus");
    client
        .database("shop")
        .collection::<mongodb::bson::Document>("orders")
        .insert_one(doc! {"_id": 1, "v": "kept"})
        .await
        .unwrap();
    drop(client);
    let server = tokio::task::spawn_blocking(move || {
        server.restart().expect("restart");
        server
    })
    .await
    .unwrap();
    let client = mongodb::Client::with_uri_str(server.uri()).await.unwrap();
    let got = client
        .database("shop")
        .collection::<mongodb::bson::Document>("orders")
        .find_one(doc! {"_id": 1})
        .await
        .unwrap()
        .expect("the document survives the restart");
    assert_eq!(got.get_str("v").unwrap(), "kept");
    drop(client);
    drop(server);
    assert!(!accepts_connections(port), "stopped on drop");
}
