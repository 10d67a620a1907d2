//! `pg-bench`: the PostgreSQL connector end to end, through the real `headwater` binary
//! against a harness PostgreSQL, on the shapes of issue 5.
//!
//! 1. snapshot: `orders(id bigint pk, customer_id int, amount numeric(12,2), status text,
//!    created_at timestamptz, note text ~50 bytes)` with `--rows` rows (default 1,000,000);
//!    JSON with schemas; from worker start to the last snapshot record durable in the log
//!    (the connector's committed offset says `snapshot_completed`);
//! 2. stream: `--stream-events` inserts (default 500,000) in transactions of 1,000, from the
//!    first commit to the last event durable (the committed offset's `lsn_proc` passes the
//!    last transaction);
//! 3. latency: single-row commits at `--rate`/s (200) for `--seconds` (20), each from its
//!    commit returning to its offset being durable (the committed offset is polled every
//!    millisecond over REST, so figures carry ~1 ms of resolution).
//!
//! The bench session commits with `synchronous_commit = on` (the harness server's default is
//! off, which delays the walsender by up to `wal_writer_delay`).
//! CPU time is the worker process's user+system time from `/proc/<pid>/stat` over each phase;
//! `peak_rss_mb` is its `VmHWM`. Durability is observed through `GET /connectors/{c}/offsets`,
//! which the engine only updates after the log transaction holding the records is durable.
//! Prints a summary and a final JSON line: `{"snapshot_rows_s","stream_events_s",
//! "latency_p50_ms","latency_p99_ms","peak_rss_mb","snapshot_cpu_us_per_row",
//! "stream_cpu_us_per_event",...}`.
//!
//! Usage: `cargo build --release -p headwater && cargo run --release -p headwater-tests --bin
//! pg-bench -- [--bin PATH] [--rows N] [--stream-events N] [--rate N] [--seconds N]
//! [--threads N] [--dir DIR]`; the binary defaults to `$CARGO_TARGET_DIR/release/headwater`
//! (or `target/release/headwater` in the workspace).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use headwater_tests::bench::{
    committed_offset, cpu_us, default_bin, peak_rss_mb, percentile, OffsetPoller, Worker,
};
use headwater_tests::PostgresServer;
use serde_json::{json, Value};

struct Args {
    bin: PathBuf,
    rows: u64,
    stream_events: u64,
    rate: u64,
    seconds: u64,
    threads: u64,
    dir: Option<PathBuf>,
}

fn usage() -> ! {
    eprintln!("usage: pg-bench [--bin PATH] [--rows N] [--stream-events N] [--rate N] [--seconds N] [--threads N] [--dir DIR]");
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args {
        bin: default_bin(),
        rows: 1_000_000,
        stream_events: 500_000,
        rate: 200,
        seconds: 20,
        threads: 2,
        dir: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut num = || -> u64 {
            it.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| usage())
        };
        match arg.as_str() {
            "--rows" => a.rows = num(),
            "--stream-events" => a.stream_events = num(),
            "--rate" => a.rate = num().max(1),
            "--seconds" => a.seconds = num(),
            "--threads" => a.threads = num().max(1),
            "--bin" => a.bin = PathBuf::from(it.next().unwrap_or_else(|| usage())),
            "--dir" => a.dir = Some(PathBuf::from(it.next().unwrap_or_else(|| usage()))),
            _ => usage(),
        }
    }
    a
}

fn parse_lsn(s: &str) -> u64 {
    let (hi, lo) = s.split_once('/').expect("an LSN");
    (u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap()
}

/// The connector's committed offset.
fn offset(addr: SocketAddr) -> Option<Value> {
    committed_offset(addr, "bench")
}

fn main() {
    let args = parse_args();
    assert!(
        args.bin.exists(),
        "{} does not exist: build it with `cargo build --release -p headwater` or pass --bin",
        args.bin.display()
    );
    let base = args
        .dir
        .clone()
        .unwrap_or_else(|| std::env::current_dir().unwrap());
    std::fs::create_dir_all(&base).unwrap();
    let work = tempfile::Builder::new()
        .prefix("pg-bench-")
        .tempdir_in(&base)
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = PostgresServer::start().expect("PostgreSQL");
    rt.block_on(server.create_database("bench")).unwrap();
    let db = rt.block_on(server.connect("bench")).unwrap();
    // The harness runs PostgreSQL with synchronous_commit=off, where committed WAL only
    // reaches the walsender at the WAL writer's next flush (wal_writer_delay, 200 ms): that
    // would measure the server's setting, not the connector. Commits here flush their WAL.
    rt.block_on(db.batch_execute("SET synchronous_commit = on"))
        .unwrap();
    let load = Instant::now();
    rt.block_on(db.batch_execute(&format!(
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, amount numeric(12,2),
           status text, created_at timestamptz, note text);
         INSERT INTO orders SELECT g, g % 10000, (g % 100000) / 100.0, 'new',
           timestamptz '2024-01-01' + g * interval '1 second',
           'note for order ' || lpad(g::text, 10, '0') || ' with some padding text'
           FROM generate_series(1, {}) g;
         ANALYZE orders;",
        args.rows
    )))
    .unwrap();
    eprintln!("loaded {} rows in {:?}", args.rows, load.elapsed());

    let config = json!({"name": "bench", "config": {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.hostname": "127.0.0.1", "database.port": server.port().to_string(),
        "database.user": "postgres", "database.dbname": "bench", "topic.prefix": "bench",
        "table.include.list": "public.orders", "slot.name": "bench_slot",
        "publication.name": "bench_pub", "snapshot.max.threads": args.threads.to_string()}});
    let file = work.path().join("bench.json");
    std::fs::write(&file, config.to_string()).unwrap();

    // 1. Snapshot.
    let started = Instant::now();
    let w = Worker::start(&args.bin, &work.path().join("data"), &file);
    let pid = w.pid();
    loop {
        if offset(w.addr).is_some_and(|o| o["snapshot_completed"] == Value::Bool(true)) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(1800),
            "snapshot did not finish"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let snap_secs = started.elapsed().as_secs_f64();
    let snap_cpu = cpu_us(pid);
    let snapshot_rows_s = args.rows as f64 / snap_secs;
    let snapshot_cpu_us_per_row = snap_cpu as f64 / args.rows.max(1) as f64;
    eprintln!(
        "snapshot: {} rows in {snap_secs:.2} s = {snapshot_rows_s:.0} rows/s, {snapshot_cpu_us_per_row:.2} us CPU/row",
        args.rows
    );

    // Wait until streaming runs (the offset moves to a streaming position on the first
    // transaction; a marker insert makes that happen).
    let durable_past = |lo: u64, limit: Duration| -> Option<Instant> {
        let t = Instant::now();
        while t.elapsed() < limit {
            if let Some(o) = offset(w.addr) {
                if o.get("snapshot").is_none() && o["lsn_proc"].as_u64().is_some_and(|l| l > lo) {
                    return Some(Instant::now());
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        None
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
    durable_past(lo, Duration::from_secs(120)).expect("streaming started");

    // 2. Streaming throughput.
    let base_id = args.rows + 10;
    let txns = args.stream_events.div_ceil(1000);
    let cpu0 = cpu_us(pid);
    let mut first_commit: Option<Instant> = None;
    let mut last_lo = 0;
    for t in 0..txns {
        let from = base_id + t * 1000;
        last_lo = insert_lsn(&format!(
            "INSERT INTO orders SELECT g, g % 10000, (g % 100000) / 100.0, 'new', now(),
               'note for order ' || lpad(g::text, 10, '0') || ' with some padding text'
               FROM generate_series({from}, {}) g",
            from + 999
        ));
        first_commit.get_or_insert_with(Instant::now);
    }
    let first = first_commit.unwrap_or_else(Instant::now);
    let written = Instant::now();
    let done = durable_past(last_lo, Duration::from_secs(1800)).expect("stream durable");
    let stream_secs = done.duration_since(first).as_secs_f64();
    let events = txns * 1000;
    let stream_events_s = events as f64 / stream_secs;
    let stream_cpu_us_per_event = (cpu_us(pid) - cpu0) as f64 / events.max(1) as f64;
    eprintln!(
        "stream: {events} events in {stream_secs:.2} s = {stream_events_s:.0} events/s (writer took {:.2} s), {stream_cpu_us_per_event:.2} us CPU/event",
        written.duration_since(first).as_secs_f64()
    );

    // 3. Latency: a poller records when each committed offset position became visible.
    let poller = OffsetPoller::start(w.addr, "bench", |o| o["lsn_proc"].as_u64());
    let n = args.rate * args.seconds;
    let period = Duration::from_secs_f64(1.0 / args.rate as f64);
    let mut commits: Vec<(Instant, u64)> = Vec::with_capacity(n as usize);
    let begin = Instant::now();
    let lat_base = base_id + txns * 1000 + 10;
    for i in 0..n {
        let due = begin + period * i as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let lo = insert_lsn(&format!(
            "INSERT INTO orders VALUES ({}, 7, 12.34, 'new', now(), 'latency probe row')",
            lat_base + i
        ));
        commits.push((Instant::now(), lo));
    }
    poller.wait_past(commits.last().map_or(0, |c| c.1), Duration::from_secs(60));
    let (lat, polls) = poller.finish(&commits);
    let (p50, p99) = (percentile(&lat, 0.5), percentile(&lat, 0.99));
    eprintln!(
        "latency: {} commits at {}/s, p50 {p50:.2} ms, p99 {p99:.2} ms, max {:.2} ms ({} offset polls)",
        lat.len(),
        args.rate,
        lat.last().copied().unwrap_or(0.0),
        polls
    );
    let rss = peak_rss_mb(pid);
    eprintln!("peak RSS {rss:.1} MB");
    drop(w);
    println!(
        "{}",
        json!({
            "rows": args.rows, "stream_events": events, "latency_commits": lat.len(),
            "snapshot_threads": args.threads,
            "snapshot_rows_s": snapshot_rows_s.round(),
            "stream_events_s": stream_events_s.round(),
            "latency_p50_ms": (p50 * 100.0).round() / 100.0,
            "latency_p99_ms": (p99 * 100.0).round() / 100.0,
            "peak_rss_mb": (rss * 10.0).round() / 10.0,
            "snapshot_cpu_us_per_row": (snapshot_cpu_us_per_row * 100.0).round() / 100.0,
            "stream_cpu_us_per_event": (stream_cpu_us_per_event * 100.0).round() / 100.0,
        })
    );
}
