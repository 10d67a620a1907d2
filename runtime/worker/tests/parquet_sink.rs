//! PostgreSQL source -> embedded log -> Parquet sink, through the `headwater` binary, with
//! small files (so many are rolled) partitioned by day, and two worker SIGKILLs.
//!
//! What it proves: the files the manifests list, read back with the arrow/parquet crates,
//! hold every change exactly once (no log offset twice), the snapshot rows all arrived, and the
//! newest row per key (deletes removing it) equals the source table; files no manifest lists
//! (left by the kills) are gone after the restart.
#![cfg(feature = "parquet")]

mod common;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use common::{wait_until, Worker};
use headwater_tests::PostgresServer;

const TOPIC: &str = "lake.public.orders";

fn table_rows(
    rt: &tokio::runtime::Runtime,
    db: &tokio_postgres::Client,
) -> BTreeMap<String, (String, String)> {
    rt.block_on(db.query("SELECT id::text, amount::text, status FROM orders", &[]))
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect()
}

#[test]
fn parquet_files_hold_every_change_once_and_end_equal_to_the_table() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pg = PostgresServer::start().expect("PostgreSQL");
    rt.block_on(pg.create_database("lake")).unwrap();
    let db = rt.block_on(pg.connect("lake")).unwrap();
    rt.block_on(db.batch_execute(
        "CREATE TABLE orders (id bigint PRIMARY KEY, amount numeric(12,2) NOT NULL, status text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now());
         INSERT INTO orders SELECT g, g * 0.5, 'new', now() FROM generate_series(1, 2000) g;",
    ))
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("lake");
    let source = tmp.path().join("source.json");
    std::fs::write(
        &source,
        serde_json::json!({"name": "lake-source", "config": {
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "database.hostname": "127.0.0.1", "database.port": pg.port().to_string(),
            "database.user": "postgres", "database.dbname": "lake", "topic.prefix": "lake",
            "table.include.list": "public.orders", "slot.name": "lake_slot"}})
        .to_string(),
    )
    .unwrap();
    let sink = tmp.path().join("sink.json");
    std::fs::write(
        &sink,
        serde_json::json!({"name": "lake-files", "config": {
            "connector.class": "parquet", "topics": TOPIC,
            "parquet.path": out.to_str().unwrap(), "partition.by": "time:day",
            "flush.size": "300", "rotate.interval.ms": "300"}})
        .to_string(),
    )
    .unwrap();
    let data = tmp.path().join("data");
    let files = [source.as_path(), sink.as_path()];
    let rows_in_files =
        || headwater_connector_parquet::read_rows(&out, "lake-files", TOPIC).unwrap_or_default();

    let w = Worker::start(&data, &files);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while rows_in_files().len() < 2000 {
        if std::time::Instant::now() > deadline {
            let r = headwater_connector_parquet::read_rows(&out, "lake-files", TOPIC);
            panic!(
                "snapshot not in files: {:?}; status {}; logs {:#?}",
                r.map(|v| v.len()),
                w.call("GET", "/connectors/lake-files/status", None).2,
                w.logs()
                    .iter()
                    .filter(|l| l.contains("WARN") || l.contains("ERROR"))
                    .collect::<Vec<_>>()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut w = Some(w);
    for (i, sql) in [
        "UPDATE orders SET status = 'paid', amount = amount + 1 WHERE id % 3 = 0",
        "DELETE FROM orders WHERE id % 7 = 0",
        "INSERT INTO orders SELECT g, 1.25, 'new', now() FROM generate_series(3001, 3400) g",
        "UPDATE orders SET status = 'shipped' WHERE id % 5 = 0",
    ]
    .iter()
    .enumerate()
    {
        rt.block_on(db.batch_execute(sql)).unwrap();
        if i == 1 || i == 3 {
            std::thread::sleep(Duration::from_millis(400));
            w.take().unwrap().sigkill();
            w = Some(Worker::start(&data, &files));
        }
    }
    let want = table_rows(&rt, &db);
    let mut last_seen = 0;
    wait_until(
        "the files to reach the table's state",
        Duration::from_secs(90),
        || {
            let rows = rows_in_files();
            last_seen = rows.len();
            let mut newest: BTreeMap<String, (i64, BTreeMap<String, String>)> = BTreeMap::new();
            for (offset, cols) in rows {
                let id = cols["id"].clone();
                if newest.get(&id).is_none_or(|(o, _)| *o < offset) {
                    newest.insert(id, (offset, cols));
                }
            }
            let got: BTreeMap<String, (String, String)> = newest
                .into_iter()
                .filter(|(_, (_, c))| c["__deleted"] == "false")
                .map(|(id, (_, c))| (id, (c["amount"].clone(), c["status"].clone())))
                .collect();
            got == want
        },
    );
    w.take().unwrap().sigterm();

    // Every change exactly once: no log offset twice.
    let rows = rows_in_files();
    let mut offsets = HashSet::new();
    for (o, _) in &rows {
        assert!(offsets.insert(*o), "offset {o} is in two files");
    }
    assert!(
        rows.len() >= 2000 + 666 + 285 + 400,
        "rows in files: {} (last poll {last_seen})",
        rows.len()
    );
    // Day partitions, several files, and nothing outside the manifests.
    let manifests = headwater_connector_parquet::read_manifests(&out, "lake-files").unwrap();
    let listed: HashSet<String> = manifests
        .iter()
        .flat_map(|m| m.files.iter().map(|f| f.path.clone()))
        .collect();
    assert!(listed.len() > 5, "files: {}", listed.len());
    assert!(
        listed
            .iter()
            .all(|p| p.starts_with(&format!("{TOPIC}/dt="))),
        "{listed:?}"
    );
    let mut on_disk = Vec::new();
    let mut stack = vec![out.join(TOPIC)];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else {
                on_disk.push(
                    e.path()
                        .strip_prefix(&out)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    for f in on_disk {
        assert!(listed.contains(&f), "{f} is on disk but in no manifest");
    }
}
