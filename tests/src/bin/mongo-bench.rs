//! `mongo-bench`: the MongoDB connector end to end, through the real `headwater` binary
//! against a harness SecantusDB server (MongoDB wire protocol), on the shapes of issue 9.
//!
//! 1. snapshot: `--rows` documents (default 200,000) of ~1 KB in `bench.orders`, from worker
//!    start to the last snapshot record durable in the log (the committed offset says
//!    `snapshot_completed`);
//! 2. stream: `--stream-events` inserts (default 100,000) as `insert_many` batches of 1,000,
//!    from the first batch to the last event durable (the committed offset's cluster time
//!    passes the last batch's operation time);
//! 3. latency: single inserts at `--rate`/s (200) for `--seconds` (20), each from its write
//!    returning to the committed offset covering it (polled every millisecond over REST).
//!
//! CPU time is the worker's user+system time over each phase; the test server itself is slow
//! (a plain pymongo change-stream reader gets ~6,000 events/s while inserts run), so CPU per
//! document/event is the figure to compare. Prints a summary and a final JSON line:
//! `{"snapshot_rows_s" (documents/s), "stream_events_s", "latency_p50_ms", "latency_p99_ms",
//! "peak_rss_mb", "snapshot_cpu_us_per_row", "stream_cpu_us_per_event", ...}`.
//!
//! Usage: `cargo build --release -p headwater && cargo run --release -p headwater-tests --bin
//! mongo-bench -- [--bin PATH] [--rows N] [--stream-events N] [--rate N] [--seconds N]
//! [--threads N] [--set KEY=VALUE]... [--dir DIR]`.

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use headwater_tests::bench::{
    bytes_per_record, paced_commits, peak_rss_mb, snapshot_phase, stream_phase, wait_until_past,
    BenchArgs, Figures, OffsetPoller, Worker,
};
use headwater_tests::{MongoOptions, MongoServer};
use mongodb::bson::{doc, oid::ObjectId, Document};
use serde_json::{json, Value};

/// A document of about 1 KB.
fn order(i: u64) -> Document {
    doc! {
        "_id": ObjectId::new(),
        "n": i as i64,
        "customer": {"id": (i % 10_000) as i32, "name": format!("customer {}", i % 10_000), "tier": "gold"},
        "amount": (i % 100_000) as f64 / 100.0,
        "status": "new",
        "created": mongodb::bson::DateTime::from_millis(1_704_067_200_000 + i as i64 * 1000),
        "items": (0..5).map(|k| doc! {"sku": format!("SKU-{:06}", (i + k) % 1_000_000), "q": (k + 1) as i32, "price": 9.99}).collect::<Vec<_>>(),
        "note": "x".repeat(600),
    }
}

/// The committed offset's cluster time as one ordered number.
fn offset_position(o: &Value) -> Option<u64> {
    let sec = o["sec"].as_i64().filter(|s| *s > 0)?;
    let ord = o["ord"].as_i64().unwrap_or(0).max(0);
    Some(((sec as u64) << 32) | ord as u64)
}

fn main() {
    let args = BenchArgs::parse_with("mongo-bench", true, 200_000, 100_000);
    let work = args.work_dir("mongo-bench-");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let wait = |f| rt.block_on(f);
    let server = MongoServer::start_with(MongoOptions {
        oplog_max_entries: Some(5_000_000),
    })
    .expect("SecantusDB (scripts/install-deps)");
    let client = wait(mongodb::Client::with_uri_str(server.uri())).unwrap();
    let orders = client.database("bench").collection::<Document>("orders");
    let load = Instant::now();
    let mut i = 0;
    while i < args.rows {
        let n = 1000.min(args.rows - i);
        let docs: Vec<Document> = (i..i + n).map(order).collect();
        rt.block_on(orders.insert_many(docs).into_future()).unwrap();
        i += n;
    }
    eprintln!("loaded {} documents in {:?}", args.rows, load.elapsed());
    // A write's position: the operation time its session saw.
    let write_position = |docs: Vec<Document>| -> u64 {
        rt.block_on(async {
            let mut s = client.start_session().await.unwrap();
            orders.insert_many(docs).session(&mut s).await.unwrap();
            let t = s.operation_time().expect("an operation time");
            (u64::from(t.time) << 32) | u64::from(t.increment)
        })
    };

    let mut config = json!({"name": "bench", "config": {
        "connector.class": "io.debezium.connector.mongodb.MongoDbConnector",
        "mongodb.connection.string": server.uri(), "topic.prefix": "bench",
        "collection.include.list": "bench.orders",
        "snapshot.max.threads": args.threads.to_string()}});
    args.configure(&mut config["config"]);
    let file = work.path().join("bench.json");
    std::fs::write(&file, config.to_string()).unwrap();

    // 1. Snapshot.
    let started = Instant::now();
    let w = Worker::start(&args.bin, &work.path().join("data"), &file);
    let pid = w.pid();
    let (snapshot_rows_s, snapshot_cpu_us_per_row) =
        snapshot_phase(&w, "bench", started, args.rows, |o| {
            o["snapshot_completed"] == true
                || (o.get("snapshot").is_none() && o.get("sec").is_some())
        });
    let warm = write_position(vec![order(u64::MAX / 2)]) - 1;
    wait_until_past(
        w.addr,
        "bench",
        &offset_position,
        warm,
        Duration::from_secs(300),
    )
    .expect("streaming started");

    // 2. Streaming throughput.
    let txns = args.stream_events.div_ceil(1000);
    let (stream_events_s, stream_cpu_us_per_event) =
        stream_phase(&w, "bench", &offset_position, txns, |t| {
            let docs: Vec<Document> = (0..1000).map(|k| order(args.rows + t * 1000 + k)).collect();
            write_position(docs) - 1
        });

    // 3. Latency: single inserts, each covered once the offset reaches its operation time.
    let poller = OffsetPoller::start(w.addr, "bench", offset_position);
    let commits = paced_commits(args.rate, args.seconds, |i| {
        let pos = write_position(vec![order(10_000_000 + i)]);
        (Instant::now(), pos - 1)
    });
    poller.wait_past(commits.last().map_or(0, |c| c.1), Duration::from_secs(120));
    let (latencies, polls) = poller.finish(&commits);
    let figures = Figures {
        rows: args.rows,
        stream_events: txns * 1000,
        snapshot_rows_s,
        stream_events_s,
        snapshot_cpu_us_per_row,
        stream_cpu_us_per_event,
        latencies,
        rate: args.rate,
        polls,
        peak_rss_mb: peak_rss_mb(pid),
        format: args.format,
        settings: args.settings.clone(),
        bytes_per_record: bytes_per_record(w.addr, "bench"),
    };
    drop(w);
    figures.print(json!({"snapshot_threads": args.threads, "documents": args.rows}));
}
