//! `pg-bench`: the PostgreSQL connector end to end, through the real `headwater` binary
//! against a harness PostgreSQL, on the shapes of issue 5.
//!
//! 1. snapshot: `orders(id bigint pk, customer_id int, amount numeric(12,2), status text,
//!    created_at timestamptz, note text ~50 bytes)` with `--rows` rows (default 1,000,000);
//!    JSON with schemas, or Avro on the embedded registry with `--format avro`; from worker start to the last snapshot record durable in the log
//!    (the connector's committed offset says `snapshot_completed`);
//! 2. stream: `--stream-events` inserts (default 500,000) in transactions of 1,000, from the
//!    first commit to the last event durable (the committed offset's `lsn_proc` passes the
//!    last transaction);
//! 3. latency: single-row commits at `--rate`/s (200) for `--seconds` (20), each from its
//!    commit returning to its offset being durable (the committed offset is polled every
//!    millisecond over REST, so figures carry ~1 ms of resolution);
//! 4. with `--incremental`: an incremental `execute-snapshot` signal for the whole table (every
//!    row so far, in chunks of 1,024 between watermarks) while a row a millisecond or so is
//!    committed, from the signal's insert until a committed offset no longer carries the
//!    incremental snapshot's progress.
//!
//! The bench session commits with `synchronous_commit = on` (the harness server's default is
//! off, which delays the walsender by up to `wal_writer_delay`).
//! CPU time is the worker process's user+system time from `/proc/<pid>/stat` over each phase;
//! `peak_rss_mb` is its `VmHWM`; `record_bytes_per_event` is the tasks' committed record bytes
//! (key, value, framing; before compression) per record and `log_disk_bytes_per_event` the log's
//! size on disk per record, both from `/metrics`. Durability is observed through `GET /connectors/{c}/offsets`,
//! which the engine only updates after the log transaction holding the records is durable.
//! With `--tls` the server requires TLS and the connector connects with `verify-full` (the
//! cost of encryption on every connection, the replication stream included).
//! Prints a summary and a final JSON line: `{"snapshot_rows_s","stream_events_s",
//! "latency_p50_ms","latency_p99_ms","peak_rss_mb","snapshot_cpu_us_per_row",
//! "stream_cpu_us_per_event","format","record_bytes_per_event","log_disk_bytes_per_event",...}`.
//!
//! Usage: `cargo build --release -p headwater && cargo run --release -p headwater-tests --bin
//! pg-bench -- [--bin PATH] [--rows N] [--stream-events N] [--rate N] [--seconds N]
//! [--threads N] [--format json|avro] [--tls] [--incremental] [--set KEY=VALUE]... [--dir DIR]`; the binary defaults to `$CARGO_TARGET_DIR/release/headwater`
//! (or `target/release/headwater` in the workspace).

use std::time::{Duration, Instant};

use headwater_tests::bench::{
    bytes_per_record, incremental_phase, paced_commits, parse_lsn, peak_rss_mb,
    pg_bench_session_with, pg_orders_insert, pg_orders_sql, snapshot_phase, stream_phase,
    wait_until_past, BenchArgs, Figures, OffsetPoller, Worker,
};
use serde_json::{json, Value};

fn main() {
    let args = BenchArgs::parse("pg-bench", true);
    let work = args.work_dir("pg-bench-");
    let pki = args.tls.then(headwater_tests::pki::TestPki::new);
    let (server, rt, db) = pg_bench_session_with(pki.as_ref());
    let load = Instant::now();
    rt.block_on(db.batch_execute(&pg_orders_sql(args.rows)))
        .unwrap();
    eprintln!("loaded {} rows in {:?}", args.rows, load.elapsed());

    let mut config = json!({"name": "bench", "config": {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.hostname": "127.0.0.1", "database.port": server.port().to_string(),
        "database.user": "postgres", "database.dbname": "bench", "topic.prefix": "bench",
        "table.include.list": "public.orders", "slot.name": "bench_slot",
        "publication.name": "bench_pub", "snapshot.max.threads": args.threads.to_string()}});
    if args.incremental {
        rt.block_on(db.batch_execute(
            "CREATE TABLE debezium_signal (id varchar(64) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048))",
        ))
        .unwrap();
        config["config"]["signal.data.collection"] = json!("public.debezium_signal");
    }
    args.configure(&mut config["config"]);
    if let Some(pki) = &pki {
        // Every connection of the connector over TLS, the certificate checked in full.
        config["config"]["database.hostname"] = json!("localhost");
        config["config"]["database.sslmode"] = json!("verify-full");
        config["config"]["database.sslrootcert"] = json!(pki.path("ca.pem"));
    }
    let file = work.path().join("bench.json");
    std::fs::write(&file, config.to_string()).unwrap();

    // 1. Snapshot.
    let started = Instant::now();
    let w = Worker::start(&args.bin, &work.path().join("data"), &file);
    let pid = w.pid();
    let (snapshot_rows_s, snapshot_cpu_us_per_row) =
        snapshot_phase(&w, "bench", started, args.rows, |o| {
            o["snapshot_completed"] == Value::Bool(true)
        });
    // Streaming positions: `lsn_proc` once the offset left the snapshot.
    let position = |o: &Value| -> Option<u64> {
        if o.get("snapshot").is_some() {
            return None;
        }
        o["lsn_proc"].as_u64()
    };
    let insert_lsn = |tx_sql: &str| -> u64 {
        rt.block_on(async {
            db.batch_execute("BEGIN").await.unwrap();
            db.batch_execute(tx_sql).await.unwrap();
            let lo: String = db
                .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
                .await
                .unwrap()
                .get(0);
            db.batch_execute("COMMIT").await.unwrap();
            parse_lsn(&lo)
        })
    };
    let lo = insert_lsn(&format!(
        "INSERT INTO orders VALUES ({}, 1, 1.00, 'warmup', now(), 'warmup')",
        args.rows + 1
    ));
    // Wait until streaming runs (the offset moves to a streaming position on the first
    // transaction; the warm-up insert makes that happen).
    wait_until_past(w.addr, "bench", &position, lo, Duration::from_secs(120))
        .expect("streaming started");

    // 2. Streaming throughput.
    let base_id = args.rows + 10;
    let txns = args.stream_events.div_ceil(1000);
    let (stream_events_s, stream_cpu_us_per_event) =
        stream_phase(&w, "bench", &position, txns, |t| {
            let from = base_id + t * 1000;
            insert_lsn(&pg_orders_insert(from, from + 999))
        });
    let events = txns * 1000;

    // 3. Latency: a poller records when each committed offset position became visible.
    let poller = OffsetPoller::start(w.addr, "bench", position);
    let lat_base = base_id + txns * 1000 + 10;
    let commits = paced_commits(args.rate, args.seconds, |i| {
        let lo = insert_lsn(&format!(
            "INSERT INTO orders VALUES ({}, 7, 12.34, 'new', now(), 'latency probe row')",
            lat_base + i
        ));
        (Instant::now(), lo)
    });
    poller.wait_past(commits.last().map_or(0, |c| c.1), Duration::from_secs(60));
    let (latencies, polls) = poller.finish(&commits);

    // 4. An incremental snapshot of every row so far, while changes trickle in.
    let mut incremental = json!(null);
    if args.incremental {
        let table_rows: i64 = rt
            .block_on(db.query_one("SELECT count(*) FROM orders", &[]))
            .unwrap()
            .get(0);
        let first_id = lat_base + commits.len() as u64 + 10;
        incremental = incremental_phase(
            w.addr,
            "bench",
            pid,
            table_rows as u64,
            || {
                rt.block_on(db.batch_execute(
                    r#"INSERT INTO debezium_signal VALUES ('bench-incremental', 'execute-snapshot', '{"data-collections": ["public\\.orders"]}')"#,
                ))
                .unwrap()
            },
            |n| {
                rt.block_on(db.batch_execute(&format!(
                    "INSERT INTO orders VALUES ({}, 3, 1.00, 'trickle', now(), 'during the incremental snapshot')",
                    first_id + n
                )))
                .unwrap()
            },
        );
    }

    let figures = Figures {
        rows: args.rows,
        stream_events: events,
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
    figures.print(
        json!({"snapshot_threads": args.threads, "tls": args.tls, "incremental": incremental}),
    );
}
