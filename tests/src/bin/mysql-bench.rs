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
//!    over REST every millisecond);
//! 4. with `--incremental`: an incremental `execute-snapshot` signal for the whole table (every
//!    row so far, in chunks of 1,024 between watermarks) while a row is committed every ~2 ms,
//!    from the signal's insert until a committed offset no longer carries the incremental
//!    snapshot's progress (JSON `"incremental": {"incremental_rows_s",
//!    "incremental_cpu_us_per_row"}`).
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
//! [--incremental] [--set KEY=VALUE]... [--dir DIR]`.

use std::time::{Duration, Instant};

use headwater_tests::bench::{
    binlog_position, bytes_per_record, incremental_phase, mariadb_orders_insert, paced_commits,
    peak_rss_mb, snapshot_phase, stream_phase, wait_until_past, BenchArgs, Figures, OffsetPoller,
    Worker,
};
use headwater_tests::MariaDbServer;
use mysql_async::prelude::Queryable;
use serde_json::{json, Value};

/// The position a committed offset covers (`None` during the snapshot).
fn offset_position(o: &Value) -> Option<u64> {
    if o.get("snapshot").is_some() {
        return None;
    }
    Some(binlog_position(o["file"].as_str()?, o["pos"].as_u64()?))
}

fn main() {
    let args = BenchArgs::parse("mysql-bench", true);
    let work = args.work_dir("mysql-bench-");
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
        sql(&mut db, &mariadb_orders_insert(from, to, "note for order"));
        from = to + 1;
    }
    eprintln!("loaded {} rows in {:?}", args.rows, load.elapsed());
    let master_position = |db: &mut mysql_async::Conn| -> u64 {
        let status: Option<mysql_async::Row> =
            rt.block_on(db.query_first("SHOW MASTER STATUS")).unwrap();
        let status = status.expect("binary logging is on");
        let file: String = status.get(0).expect("File");
        let pos: u64 = status.get(1).expect("Position");
        binlog_position(&file, pos)
    };

    let mut config = json!({"name": "bench", "config": {
        "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
        "database.hostname": "127.0.0.1", "database.port": server.port().to_string(),
        "database.user": "root", "database.server.id": "5400", "topic.prefix": "bench",
        "database.include.list": "bench", "table.include.list": "bench.orders",
        "snapshot.max.threads": args.threads.to_string()}});
    if args.incremental {
        sql(
            &mut db,
            "CREATE TABLE debezium_signal (id varchar(64) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048))",
        );
        config["config"]["signal.data.collection"] = json!("bench.debezium_signal");
    }
    args.configure(&mut config["config"]);
    let file = work.path().join("bench.json");
    std::fs::write(&file, config.to_string()).unwrap();

    // 1. Snapshot.
    let started = Instant::now();
    let w = Worker::start(&args.bin, &work.path().join("data"), &file);
    let pid = w.pid();
    let (snapshot_rows_s, snapshot_cpu_us_per_row) =
        snapshot_phase(&w, "bench", started, args.rows, |o| {
            o.get("snapshot").is_none() || o["snapshot_completed"] == true
        });
    rt.block_on(db.query_drop("INSERT INTO orders VALUES (0, 1, 1.00, 'warmup', now(), 'warmup')"))
        .unwrap();
    // Covered when the offset reaches the position after the commit: `> position - 1`.
    let warm = master_position(&mut db) - 1;
    wait_until_past(
        w.addr,
        "bench",
        &offset_position,
        warm,
        Duration::from_secs(120),
    )
    .expect("streaming started");

    // 2. Streaming throughput.
    let base_id = args.rows + 10;
    let txns = args.stream_events.div_ceil(1000);
    let (stream_events_s, stream_cpu_us_per_event) =
        stream_phase(&w, "bench", &offset_position, txns, |t| {
            let from = base_id + t * 1000;
            rt.block_on(db.query_drop(mariadb_orders_insert(from, from + 999, "streamed order")))
                .unwrap();
            master_position(&mut db) - 1
        });
    let events = txns * 1000;

    // 3. Latency: single-row autocommit inserts; each is covered once the committed offset
    // reaches the binlog position after it.
    let poller = OffsetPoller::start(w.addr, "bench", offset_position);
    let lat_base = base_id + txns * 1000 + 10;
    let commits = paced_commits(args.rate, args.seconds, |i| {
        rt.block_on(db.query_drop(format!(
            "INSERT INTO orders VALUES ({}, 7, 12.34, 'new', now(), 'latency probe row')",
            lat_base + i
        )))
        .unwrap();
        let at = Instant::now();
        // Covered when the offset reaches the position after the commit: `> position - 1`.
        (at, master_position(&mut db) - 1)
    });
    poller.wait_past(commits.last().map_or(0, |c| c.1), Duration::from_secs(60));
    let (latencies, polls) = poller.finish(&commits);

    // 4. An incremental snapshot of every row so far, while changes trickle in.
    let mut incremental = json!(null);
    if args.incremental {
        let count: Option<u64> = rt
            .block_on(db.query_first("SELECT count(*) FROM orders"))
            .unwrap();
        let first_id = lat_base + commits.len() as u64 + 10;
        let db = std::cell::RefCell::new(&mut db);
        incremental = incremental_phase(
            w.addr,
            "bench",
            pid,
            count.unwrap_or(0),
            || {
                sql(
                    &mut db.borrow_mut(),
                    r#"INSERT INTO debezium_signal VALUES ('bench-incremental', 'execute-snapshot', '{"data-collections": ["bench\\\\.orders"]}')"#,
                )
            },
            |n| {
                sql(
                    &mut db.borrow_mut(),
                    &format!(
                        "INSERT INTO orders VALUES ({}, 3, 1.00, 'trickle', now(), 'during the incremental snapshot')",
                        first_id + n
                    ),
                )
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
    figures.print(json!({"snapshot_threads": args.threads, "incremental": incremental}));
}
