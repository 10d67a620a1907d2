//! PostgreSQL source -> embedded log -> Parquet sink, through the `headwater` binary, with
//! small files (so many are rolled) partitioned by day, and two worker SIGKILLs; into a local
//! directory and into an S3 bucket (an `s3s-fs` server started by the harness).
//!
//! What it proves: the files the manifests list, read back with the arrow/parquet crates,
//! hold every change exactly once (no log offset twice), the snapshot rows all arrived, and the
//! newest row per key (deletes removing it) equals the source table; files no manifest lists
//! (left by the kills) are gone after the restart. For the bucket, the objects are read where
//! the server stores them (`<root>/<bucket>/<key>`), and a file larger than one PUT goes up as
//! a multipart upload and comes back byte for byte.
#![cfg(feature = "parquet")]

mod common;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use common::{wait_until, Worker};
use headwater_tests::{PostgresServer, S3Server, S3_ACCESS_KEY, S3_SECRET_KEY};

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
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("lake");
    run(
        &tmp,
        serde_json::json!({"parquet.path": out.to_str().unwrap()}),
        &out,
    );
}

#[test]
fn parquet_files_in_an_s3_bucket_hold_every_change_once() {
    let s3 = S3Server::start().expect("S3 test server");
    s3.create_bucket("lake-bucket").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let staging = tmp.path().join("staging");
    let out = s3.object_dir("lake-bucket").join("cdc/files");
    run(
        &tmp,
        serde_json::json!({"parquet.path": "s3://lake-bucket/cdc/files",
            "parquet.s3.endpoint": s3.endpoint(), "parquet.s3.region": "us-east-1",
            "parquet.s3.access.key.id": S3_ACCESS_KEY,
            "parquet.s3.secret.access.key": S3_SECRET_KEY,
            "parquet.staging.dir": staging.to_str().unwrap()}),
        &out,
    );
    // Everything staged was uploaded and removed locally.
    let mut left = Vec::new();
    let mut stack = vec![staging.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else {
                left.push(e.path());
            }
        }
    }
    assert!(left.is_empty(), "staged files left: {left:?}");
}

#[test]
fn bucket_uploads_large_files_in_parts_and_reads_back() {
    use headwater_connector_parquet::bucket::{Bucket, BucketSettings, SINGLE_PUT_MAX};
    let s3 = S3Server::start().expect("S3 test server");
    s3.create_bucket("parts").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let bucket = Bucket::open(&BucketSettings {
        bucket: "parts".into(),
        prefix: "p/q".into(),
        endpoint: Some(s3.endpoint()),
        region: Some("us-east-1".into()),
        access_key_id: Some(S3_ACCESS_KEY.into()),
        secret_access_key: Some(S3_SECRET_KEY.into()),
        virtual_hosted_style: false,
    })
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let big = tmp.path().join("big.bin");
    let mut rng = headwater_tests::rng::Rng::new(7);
    let data: Vec<u8> = (0..SINGLE_PUT_MAX as usize + 5_000_123)
        .map(|_| rng.next_u64() as u8)
        .collect();
    std::fs::write(&big, &data).unwrap();
    rt.block_on(async {
        bucket.upload(&big, "dir/big.bin").await.unwrap();
        bucket.put("small.json", b"{}".to_vec()).await.unwrap();
        let back = bucket.get("dir/big.bin").await.unwrap().unwrap();
        assert!(
            back == data,
            "the multipart object differs ({} bytes back)",
            back.len()
        );
        let mut listed = bucket.list("").await.unwrap();
        listed.sort();
        assert_eq!(listed, ["dir/big.bin", "small.json"]);
        assert_eq!(bucket.get("missing").await.unwrap(), None);
        bucket.delete("dir/big.bin").await.unwrap();
        assert_eq!(bucket.list("dir").await.unwrap(), Vec::<String>::new());
    });
    assert_eq!(
        std::fs::read(s3.object_dir("parts").join("p/q/small.json")).unwrap(),
        b"{}"
    );
    // Wrong credentials are refused, as a failure that says which object.
    let wrong = Bucket::open(&BucketSettings {
        bucket: "parts".into(),
        endpoint: Some(s3.endpoint()),
        region: Some("us-east-1".into()),
        access_key_id: Some(S3_ACCESS_KEY.into()),
        secret_access_key: Some("not-the-secret".into()),
        ..Default::default()
    })
    .unwrap();
    let e = rt
        .block_on(wrong.put("x.json", b"{}".to_vec()))
        .unwrap_err();
    assert!(e.to_string().contains("s3://parts/x.json"), "{e}");
}

/// The end-to-end run with the sink settings `dest` (its `parquet.path` and friends); the
/// complete files end up under `out` on local disk.
fn run(tmp: &tempfile::TempDir, dest: serde_json::Value, out: &std::path::Path) {
    let out = out.to_path_buf();
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
    let mut sink_config = serde_json::json!({
        "connector.class": "parquet", "topics": TOPIC, "partition.by": "time:day",
        "flush.size": "300", "rotate.interval.ms": "300"});
    if let (Some(c), serde_json::Value::Object(d)) = (sink_config.as_object_mut(), dest) {
        c.extend(d);
    }
    std::fs::write(
        &sink,
        serde_json::json!({"name": "lake-files", "config": sink_config}).to_string(),
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
