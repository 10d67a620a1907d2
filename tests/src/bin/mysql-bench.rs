//! `mysql-bench`: the MySQL/MariaDB connector end to end, through the real `headwater` binary
//! against a harness MariaDB, on the shapes of `pg-bench` (issue 8):
//!
//! 1. snapshot: `orders(id bigint pk, customer_id int, amount decimal(12,2), status text,
//!    created_at timestamp(6), note text ~50 bytes)` with `--rows` rows (default 1,000,000);
//!    JSON with schemas; from worker start until the committed offset says the snapshot is
//!    complete (the last snapshot record is durable in the log);
//! 2. stream: `--stream-events` inserts (default 500,000) in transactions of 1,000, from the
//!    first commit until the committed binlog position passes the last transaction;
//! 3. latency: single-row autocommit inserts at `--rate`/s (200) for `--seconds` (20), each
//!    from its commit returning until the committed offset covers its binlog position (polled
//!    over REST every millisecond).
//!
//! Positions are compared as (binlog file number, position): the committed offset's
//! `file`/`pos` against `SHOW MASTER STATUS` after each commit. The connector class is
//! Debezium's MariaDB connector (`io.debezium.connector.mariadb.MariaDbConnector`).
//! Prints a summary and a final JSON line: `{"snapshot_rows_s","stream_events_s",
//! "latency_p50_ms","latency_p99_ms","peak_rss_mb","snapshot_cpu_us_per_row",
//! "stream_cpu_us_per_event",...}`.
//!
//! Usage: `cargo build --release -p headwater && cargo run --release -p headwater-tests --bin
//! mysql-bench -- [--bin PATH] [--rows N] [--stream-events N] [--rate N] [--seconds N]
//! [--dir DIR]`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use headwater_tests::bench::{
    committed_offset, cpu_us, default_bin, peak_rss_mb, percentile, OffsetPoller, Worker,
};
use headwater_tests::MariaDbServer;
use mysql_async::prelude::Queryable;
use serde_json::{json, Value};

struct Args {
    bin: PathBuf,
    rows: u64,
    stream_events: u64,
    rate: u64,
    seconds: u64,
    dir: Option<PathBuf>,
}

fn usage() -> ! {
    eprintln!("usage: mysql-bench [--bin PATH] [--rows N] [--stream-events N] [--rate N] [--seconds N] [--dir DIR]");
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args {
        bin: default_bin(),
        rows: 1_000_000,
        stream_events: 500_000,
        rate: 200,
        seconds: 20,
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
            "--bin" => a.bin = PathBuf::from(it.next().unwrap_or_else(|| usage())),
            "--dir" => a.dir = Some(PathBuf::from(it.next().unwrap_or_else(|| usage()))),
            _ => usage(),
        }
    }
    a
}

/// A binlog position as one ordered number: file sequence number (the `.000123` suffix) in
/// the high half, byte position in the low half.
fn position(file: &str, pos: u64) -> u64 {
    let seq = file
        .rsplit_once('.')
        .and_then(|(_, n)| n.parse::<u64>().ok())
        .unwrap_or(0);
    (seq << 32) | (pos & 0xFFFF_FFFF)
}

/// The position a committed offset covers (`None` during the snapshot).
fn offset_position(o: &Value) -> Option<u64> {
    if o.get("snapshot").is_some() {
        return None;
    }
    Some(position(o["file"].as_str()?, o["pos"].as_u64()?))
}

/// Statements of a `INSERT ... SELECT` over MariaDB's sequence engine for ids `from..=to`.
fn insert_range(from: u64, to: u64, note_prefix: &str) -> String {
    format!(
        "INSERT INTO orders SELECT seq, seq % 10000, (seq % 100000) / 100.0, 'new',
           TIMESTAMP '2024-01-01 00:00:00' + INTERVAL (seq % 100000000) SECOND,
           CONCAT('{note_prefix} ', LPAD(seq, 10, '0'), ' with some padding text')
           FROM seq_{from}_to_{to}"
    )
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
        .prefix("mysql-bench-")
        .tempdir_in(&base)
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = MariaDbServer::start().expect("MariaDB");
    rt.block_on(server.create_database("bench")).unwrap();
    let mut db = rt.block_on(server.connect("bench")).unwrap();
    let sql = |db: &mut mysql_async::Conn, text: &str| {
        rt.block_on(db.query_drop(text))
            .unwrap_or_else(|e| panic!("{text}: {e}"))
    };
    let load = Instant::now();
    sql(
        &mut db,
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, amount decimal(12,2),
           status text, created_at timestamp(6) NULL, note text)",
    );
    // Loaded in transactions of 100,000 rows (one huge transaction strains the harness's small
    // InnoDB log).
    let mut from = 1;
    while from <= args.rows {
        let to = (from + 99_999).min(args.rows);
        sql(&mut db, &insert_range(from, to, "note for order"));
        from = to + 1;
    }
    eprintln!("loaded {} rows in {:?}", args.rows, load.elapsed());
    let master_position = |db: &mut mysql_async::Conn| -> u64 {
        let status: Option<mysql_async::Row> =
            rt.block_on(db.query_first("SHOW MASTER STATUS")).unwrap();
        let status = status.expect("binary logging is on");
        let file: String = status.get(0).expect("File");
        let pos: u64 = status.get(1).expect("Position");
        position(&file, pos)
    };

    let config = json!({"name": "bench", "config": {
        "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
        "database.hostname": "127.0.0.1", "database.port": server.port().to_string(),
        "database.user": "root", "database.server.id": "5400", "topic.prefix": "bench",
        "database.include.list": "bench", "table.include.list": "bench.orders"}});
    let file = work.path().join("bench.json");
    std::fs::write(&file, config.to_string()).unwrap();

    // 1. Snapshot.
    let started = Instant::now();
    let w = Worker::start(&args.bin, &work.path().join("data"), &file);
    let pid = w.pid();
    loop {
        if committed_offset(w.addr, "bench")
            .is_some_and(|o| o.get("snapshot").is_none() || o["snapshot_completed"] == true)
        {
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
    let durable_past = |lo: u64, limit: Duration| -> Option<Instant> {
        let t = Instant::now();
        while t.elapsed() < limit {
            if committed_offset(w.addr, "bench")
                .and_then(|o| offset_position(&o))
                .is_some_and(|p| p >= lo)
            {
                return Some(Instant::now());
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        None
    };
    rt.block_on(db.query_drop("INSERT INTO orders VALUES (0, 1, 1.00, 'warmup', now(), 'warmup')"))
        .unwrap();
    let warm = master_position(&mut db);
    durable_past(warm, Duration::from_secs(120)).expect("streaming started");

    // 2. Streaming throughput.
    let base_id = args.rows + 10;
    let txns = args.stream_events.div_ceil(1000);
    let cpu0 = cpu_us(pid);
    let mut first_commit: Option<Instant> = None;
    for t in 0..txns {
        let from = base_id + t * 1000;
        rt.block_on(db.query_drop(insert_range(from, from + 999, "streamed order")))
            .unwrap();
        first_commit.get_or_insert_with(Instant::now);
    }
    let last = master_position(&mut db);
    let first = first_commit.unwrap_or_else(Instant::now);
    let written = Instant::now();
    let done = durable_past(last, Duration::from_secs(1800)).expect("stream durable");
    let stream_secs = done.duration_since(first).as_secs_f64();
    let events = txns * 1000;
    let stream_events_s = events as f64 / stream_secs;
    let stream_cpu_us_per_event = (cpu_us(pid) - cpu0) as f64 / events.max(1) as f64;
    eprintln!(
        "stream: {events} events in {stream_secs:.2} s = {stream_events_s:.0} events/s (writer took {:.2} s), {stream_cpu_us_per_event:.2} us CPU/event",
        written.duration_since(first).as_secs_f64()
    );

    // 3. Latency: single-row autocommit inserts; each is covered once the committed offset
    // reaches the binlog position after it.
    let poller = OffsetPoller::start(w.addr, "bench", offset_position);
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
        rt.block_on(db.query_drop(format!(
            "INSERT INTO orders VALUES ({}, 7, 12.34, 'new', now(), 'latency probe row')",
            lat_base + i
        )))
        .unwrap();
        let at = Instant::now();
        // Covered when the offset reaches the position after the commit: `> position - 1`.
        commits.push((at, master_position(&mut db) - 1));
    }
    poller.wait_past(commits.last().map_or(0, |c| c.1), Duration::from_secs(60));
    let (lat, polls) = poller.finish(&commits);
    let (p50, p99) = (percentile(&lat, 0.5), percentile(&lat, 0.99));
    eprintln!(
        "latency: {} commits at {}/s, p50 {p50:.2} ms, p99 {p99:.2} ms, max {:.2} ms ({polls} offset polls)",
        lat.len(),
        args.rate,
        lat.last().copied().unwrap_or(0.0),
    );
    let rss = peak_rss_mb(pid);
    eprintln!("peak RSS {rss:.1} MB");
    drop(w);
    println!(
        "{}",
        json!({
            "rows": args.rows, "stream_events": events, "latency_commits": lat.len(),
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
