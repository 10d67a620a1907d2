//! `sink-bench`: the JDBC sink end to end, through the real `headwater` binary: rows/s written
//! into PostgreSQL from the snapshot of a `--rows`-row table (default 1,000,000; the `orders`
//! shape of `pg-bench`).
//!
//! 1. load: the PostgreSQL source snapshots `bench.orders` into the log (not measured; its
//!    figures are printed for reference);
//! 2. sink: the JDBC sink (`insert.mode=upsert`, `primary.key.mode=record_key`,
//!    `schema.evolution=basic`, exactly once through its offsets table) is created over REST
//!    and writes the topic into database `warehouse` of the same server; measured from its
//!    creation until its sink offset reaches the topic's end, then the destination's row
//!    count is checked.
//!
//! CPU time is the worker's user+system time over the sink phase (the PostgreSQL server's
//! work is not in it; both share the machine's cores). Prints a summary and a final JSON line:
//! `{"rows","sink_rows_s","sink_cpu_us_per_row","peak_rss_mb","snapshot_rows_s","format"}`.
//! `--format avro` makes the source write and the sink read Avro (embedded registry).
//!
//! Usage: `cargo build --release -p headwater && cargo run --release -p headwater-tests --bin
//! sink-bench -- [--bin PATH] [--rows N] [--format json|avro] [--dir DIR]`.

use std::time::{Duration, Instant};

use headwater_tests::bench::{
    cpu_us, get, peak_rss_mb, pg_bench_session, pg_orders_sql, send_json, snapshot_phase,
    BenchArgs, Worker,
};
use serde_json::json;

fn main() {
    let args = BenchArgs::parse_with("sink-bench", false, 1_000_000, 0);
    let work = args.work_dir("sink-bench-");
    let (server, rt, db) = pg_bench_session();
    rt.block_on(server.create_database("warehouse")).unwrap();
    let load = Instant::now();
    rt.block_on(db.batch_execute(&pg_orders_sql(args.rows)))
        .unwrap();
    eprintln!("loaded {} rows in {:?}", args.rows, load.elapsed());

    let mut source = json!({"name": "bench", "config": {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.hostname": "127.0.0.1", "database.port": server.port().to_string(),
        "database.user": "postgres", "database.dbname": "bench", "topic.prefix": "bench",
        "table.include.list": "public.orders", "slot.name": "bench_slot",
        "publication.name": "bench_pub"}});
    args.format.apply(&mut source["config"]);
    let file = work.path().join("bench.json");
    std::fs::write(&file, source.to_string()).unwrap();

    // 1. The topic, from the source's snapshot.
    let started = Instant::now();
    let w = Worker::start(&args.bin, &work.path().join("data"), &file);
    let (snapshot_rows_s, _) = snapshot_phase(&w, "bench", started, args.rows, |o| {
        o.get("snapshot_completed").and_then(|v| v.as_bool()) == Some(true)
            || o.get("snapshot").is_none()
    });
    let end = get(w.addr, "/topics/bench.public.orders")["partitions"][0]["last_stable_offset"]
        .as_i64()
        .expect("the topic's end offset");

    // 2. The sink.
    let mut sink = json!({
        "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector",
        "topics": "bench.public.orders",
        "connection.url": format!("jdbc:postgresql://127.0.0.1:{}/warehouse", server.port()),
        "connection.username": "postgres",
        "insert.mode": "upsert", "primary.key.mode": "record_key", "delete.enabled": "true",
        "schema.evolution": "basic", "collection.name.format": "${source.table}"});
    args.format.apply(&mut sink);
    let cpu_before = cpu_us(w.pid());
    let sink_started = Instant::now();
    let code = send_json(w.addr, "PUT", "/connectors/sink/config", &sink);
    assert!(code == 200 || code == 201, "creating the sink: HTTP {code}");
    loop {
        let offsets = get(w.addr, "/connectors/sink/offsets");
        let at = offsets["offsets"][0]["offset"]["kafka_offset"]
            .as_i64()
            .unwrap_or(0);
        if at >= end {
            break;
        }
        let status = get(w.addr, "/connectors/sink/status");
        assert!(
            status["tasks"][0]["state"] != "FAILED",
            "the sink failed: {status}"
        );
        assert!(
            sink_started.elapsed() < Duration::from_secs(1800),
            "the sink did not finish"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let secs = sink_started.elapsed().as_secs_f64();
    let cpu = (cpu_us(w.pid()) - cpu_before) as f64 / args.rows.max(1) as f64;
    let rss = peak_rss_mb(w.pid());
    let dst = rt.block_on(server.connect("warehouse")).unwrap();
    let count: i64 = rt
        .block_on(dst.query_one("SELECT count(*) FROM orders", &[]))
        .unwrap()
        .get(0);
    assert_eq!(count as u64, args.rows, "every row in the destination");
    let rows_s = args.rows as f64 / secs;
    eprintln!(
        "sink: {} rows into PostgreSQL in {secs:.2} s = {rows_s:.0} rows/s, {cpu:.2} us worker CPU/row, peak RSS {rss:.1} MB",
        args.rows
    );
    println!(
        "{}",
        json!({"rows": args.rows, "sink_rows_s": rows_s.round(),
               "sink_cpu_us_per_row": (cpu * 100.0).round() / 100.0,
               "peak_rss_mb": (rss * 10.0).round() / 10.0,
               "snapshot_rows_s": snapshot_rows_s.round(), "format": args.format.name()})
    );
    drop(w);
}
