//! What the benchmark programs (`pg-bench`, `mysql-bench`, `mongo-bench`, `sink-bench`) share: running the real `headwater`
//! binary with one connector file, reading the connector's committed offset over REST, a
//! process's CPU time and peak RSS from `/proc`, and the commit-to-durable latency probe.
//!
//! Invariants: the worker is observed only from outside (REST, `/proc`), as a user would; an
//! offset seen over REST is durable (the engine publishes offsets only after the log
//! transaction holding their records is committed), so "offset covers position P" means
//! "every change up to P is durable in the log".

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

/// `$CARGO_TARGET_DIR/release/headwater`, else the workspace's `target/release/headwater`.
pub fn default_bin() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
        .join("release/headwater")
}

/// One HTTP/1.1 GET, returning the JSON body (Null on any failure).
pub fn get(addr: SocketAddr, path: &str) -> Value {
    get_text(addr, path)
        .and_then(|body| serde_json::from_str(&body).ok())
        .unwrap_or(Value::Null)
}

thread_local! {
    /// Each thread's open connection to the worker's REST API (kept alive between requests).
    static REST_CONNECTION: std::cell::RefCell<Option<(SocketAddr, BufReader<TcpStream>)>> =
        const { std::cell::RefCell::new(None) };
}

/// One HTTP/1.1 GET, returning the body as text (`None` on any failure).
///
/// The request goes over a kept-alive connection (one per thread), as a monitoring client's
/// would: a new connection per request cost the worker ~45 µs of CPU against ~10 µs, enough to
/// show in a benchmark that polls the committed offset every few milliseconds. A connection
/// the server closed meanwhile is replaced once.
pub fn get_text(addr: SocketAddr, path: &str) -> Option<String> {
    REST_CONNECTION.with(|cell| {
        let mut cached = cell.borrow_mut();
        for _ in 0..2 {
            let reuse = cached.as_ref().is_some_and(|(a, _)| *a == addr);
            if !reuse {
                let stream = TcpStream::connect(addr).ok()?;
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                let _ = stream.set_nodelay(true);
                *cached = Some((addr, BufReader::new(stream)));
            }
            let (_, conn) = cached.as_mut()?;
            match http_get(conn, addr, path) {
                Ok((body, keep)) => {
                    if !keep {
                        *cached = None;
                    }
                    return Some(body);
                }
                Err(_) => *cached = None,
            }
        }
        None
    })
}

/// A GET on an open connection: the body, and whether the connection may be used again.
fn http_get(
    conn: &mut BufReader<TcpStream>,
    addr: SocketAddr,
    path: &str,
) -> std::io::Result<(String, bool)> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    conn.get_mut()
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())?;
    let mut line = String::new();
    let mut length = None;
    let mut chunked = false;
    let mut keep = true;
    let mut first = true;
    loop {
        line.clear();
        if conn.read_line(&mut line)? == 0 {
            return Err(bad("the connection closed before a response"));
        }
        let header = line.trim_end().to_ascii_lowercase();
        if first {
            first = false;
            continue;
        }
        if header.is_empty() {
            break;
        }
        if let Some(v) = header.strip_prefix("content-length:") {
            length = v.trim().parse::<usize>().ok();
        } else if header.starts_with("transfer-encoding:") && header.contains("chunked") {
            chunked = true;
        } else if header.starts_with("connection:") && header.contains("close") {
            keep = false;
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            conn.read_line(&mut line)?;
            let n = usize::from_str_radix(line.trim(), 16).map_err(|_| bad("a chunk size"))?;
            let mut chunk = vec![0; n + 2];
            conn.read_exact(&mut chunk)?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(n) = length {
        body.resize(n, 0);
        conn.read_exact(&mut body)?;
    } else {
        conn.read_to_end(&mut body)?;
        keep = false;
    }
    Ok((String::from_utf8_lossy(&body).into_owned(), keep))
}

/// The sum of a Prometheus counter over the samples whose labels contain `label` (e.g.
/// `connector="bench"`), from the worker's `/metrics`; `None` when it is not there.
pub fn metric_sum(addr: SocketAddr, name: &str, label: &str) -> Option<u64> {
    let text = get_text(addr, "/metrics")?;
    let mut found = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        // `name{labels} value` or `name value`; anything else is another metric.
        let sample = match rest.strip_prefix('{') {
            Some(r) => r.split_once("} "),
            None => rest.strip_prefix(' ').map(|v| ("", v)),
        };
        let Some((labels, value)) = sample else {
            continue;
        };
        if let (true, Ok(v)) = (labels.contains(label), value.trim().parse::<u64>()) {
            *found.get_or_insert(0) += v;
        }
    }
    found
}

/// Record bytes per record the connector's tasks committed (key, value, headers and the
/// record framing, before log compression) and on-disk log bytes per record (compressed, the
/// whole data dir's log including internal topics), from `/metrics`.
pub fn bytes_per_record(addr: SocketAddr, connector: &str) -> (f64, f64) {
    let label = format!("connector=\"{connector}\"");
    let records = metric_sum(addr, "headwater_task_records_written_total", &label).unwrap_or(0);
    let bytes = metric_sum(addr, "headwater_task_bytes_written_total", &label).unwrap_or(0);
    let disk = metric_sum(addr, "headwater_log_disk_bytes", "").unwrap_or(0);
    let per = |n: u64| {
        if records == 0 {
            0.0
        } else {
            n as f64 / records as f64
        }
    };
    (per(bytes), per(disk))
}

/// One HTTP/1.1 request with a JSON body; returns the status code (0 on failure).
pub fn send_json(addr: SocketAddr, method: &str, path: &str, body: &Value) -> u16 {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return 0;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let body = body.to_string();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if s.write_all(req.as_bytes()).is_err() {
        return 0;
    }
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// The committed offset of `connector`'s first source partition.
pub fn committed_offset(addr: SocketAddr, connector: &str) -> Option<Value> {
    get(addr, &format!("/connectors/{connector}/offsets"))["offsets"]
        .as_array()?
        .first()
        .map(|o| o["offset"].clone())
}

/// User + system CPU time of a process, in microseconds.
pub fn cpu_us(pid: u32) -> u64 {
    let (user, system) = cpu_split_us(pid);
    user + system
}

/// User and system CPU time of a process, in microseconds, apart.
pub fn cpu_split_us(pid: u32) -> (u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| -> u64 { f.get(i).and_then(|v| v.parse().ok()).unwrap_or(0) };
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    (ticks(11) * 1_000_000 / hz, ticks(12) * 1_000_000 / hz)
}

/// User and system CPU time (µs) of each of a process's live threads, summed per thread name
/// (`/proc/PID/task/*/stat`). Threads that exited are missing, so compare two readings only for
/// long-lived threads.
pub fn thread_cpu_split_us(pid: u32) -> BTreeMap<String, (u64, u64)> {
    let mut by_name: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return by_name;
    };
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    for task in tasks.flatten() {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        let Some((head, after)) = stat.rsplit_once(')') else {
            continue;
        };
        let name = head.split_once('(').map_or("?", |(_, n)| n).to_string();
        let f: Vec<&str> = after.split_whitespace().collect();
        let ticks = |i: usize| -> u64 { f.get(i).and_then(|v| v.parse().ok()).unwrap_or(0) };
        let entry = by_name.entry(name).or_default();
        entry.0 += ticks(11) * 1_000_000 / hz;
        entry.1 += ticks(12) * 1_000_000 / hz;
    }
    by_name
}

/// One line per thread name: its user and system CPU between two [`thread_cpu_split_us`]
/// readings, in µs per `units`.
pub fn thread_cpu_report(
    before: &BTreeMap<String, (u64, u64)>,
    after: &BTreeMap<String, (u64, u64)>,
    units: u64,
) -> String {
    let per = |us: u64| us as f64 / units.max(1) as f64;
    let mut parts = Vec::new();
    for (name, (user, system)) in after {
        let (user0, system0) = before.get(name).copied().unwrap_or((0, 0));
        let (u, s) = (user.saturating_sub(user0), system.saturating_sub(system0));
        if u + s > 0 {
            parts.push(format!(
                "{name} {:.2} (user {:.2}, system {:.2})",
                per(u + s),
                per(u),
                per(s)
            ));
        }
    }
    parts.join("; ")
}

/// A process's peak resident set (`VmHWM`) in MB.
pub fn peak_rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The value at quantile `p` (0..=1) of sorted figures (0 when there are none).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// A `headwater worker` process with one connector file, on free ports, in `data`.
pub struct Worker {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Worker {
    /// Starts the worker and waits for its REST address; its warnings, errors and snapshot
    /// progress lines are echoed to stderr with a `worker:` prefix.
    pub fn start(bin: &Path, data: &Path, connector: &Path) -> Worker {
        let mut child = Command::new(bin)
            .arg("worker")
            .arg("--data-dir")
            .arg(data)
            .args([
                "--rest-listen",
                "127.0.0.1:0",
                "--kafka-listen",
                "127.0.0.1:0",
            ])
            .arg(connector)
            .env_remove("RUST_LOG")
            .env_remove("HEADWATER_CONFIG")
            .env("HEADWATER_LOG_LEVEL", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("WARN") || line.contains("ERROR") || line.contains("snapshot") {
                    eprintln!("worker: {line}");
                }
                if let Some(a) = line
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("rest=http://"))
                {
                    let _ = tx.send(a.to_owned());
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the worker did not start")
            .parse()
            .expect("a REST address");
        Worker { child, addr }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // SAFETY: signalling a child we spawned and have not reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// Polls a connector's committed offset every millisecond and records when the position it
/// covers (as `position` reads it from the offset) changed.
pub struct OffsetPoller {
    seen: Arc<Mutex<Vec<(Instant, u64)>>>,
    stop: Arc<AtomicBool>,
    polls: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl OffsetPoller {
    pub fn start(
        addr: SocketAddr,
        connector: &str,
        position: impl Fn(&Value) -> Option<u64> + Send + 'static,
    ) -> OffsetPoller {
        let seen: Arc<Mutex<Vec<(Instant, u64)>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let polls = Arc::new(AtomicU64::new(0));
        let thread = {
            let (seen, stop, polls) = (seen.clone(), stop.clone(), polls.clone());
            let connector = connector.to_owned();
            std::thread::spawn(move || {
                let mut last = 0;
                while !stop.load(Ordering::SeqCst) {
                    if let Some(p) = committed_offset(addr, &connector).and_then(|o| position(&o)) {
                        if p != last {
                            last = p;
                            seen.lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .push((Instant::now(), p));
                        }
                    }
                    polls.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        };
        OffsetPoller {
            seen,
            stop,
            polls,
            thread: Some(thread),
        }
    }

    /// Waits (up to `limit`) until a position above `position` was seen.
    pub fn wait_past(&self, position: u64, limit: Duration) {
        let t = Instant::now();
        while t.elapsed() < limit {
            let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            if seen.last().is_some_and(|s| s.1 > position) {
                return;
            }
            drop(seen);
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Stops polling; returns, sorted, each commit's latency in ms (from its instant to the
    /// first poll that saw a position above its own) and the number of polls made.
    pub fn finish(mut self, commits: &[(Instant, u64)]) -> (Vec<f64>, u64) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let mut lat: Vec<f64> = commits
            .iter()
            .filter_map(|(at, pos)| {
                let i = seen.partition_point(|s| s.1 <= *pos);
                seen.get(i)
                    .map(|(t, _)| t.saturating_duration_since(*at).as_secs_f64() * 1000.0)
            })
            .collect();
        lat.sort_by(f64::total_cmp);
        (lat, self.polls.load(Ordering::Relaxed))
    }
}

/// The command line of the benchmark programs.
pub struct BenchArgs {
    pub bin: PathBuf,
    pub rows: u64,
    pub stream_events: u64,
    pub rate: u64,
    pub seconds: u64,
    /// `--threads` (only where the program takes it).
    pub threads: u64,
    pub dir: Option<PathBuf>,
    /// `--format json|avro`: the connector's key and value converter (JSON with schemas, or
    /// Confluent's AvroConverter on the worker's embedded registry).
    pub format: RecordFormat,
    /// `--tls` (pg-bench only): the server requires TLS of the connector, which checks its
    /// certificate (`verify-full`).
    pub tls: bool,
    /// `--incremental` (pg-bench and mysql-bench): a fourth phase, an incremental snapshot of
    /// the table while a trickle of changes streams ([`incremental_phase`]).
    pub incremental: bool,
    /// `--set key=value` (repeatable): connector settings over the program's own, to measure
    /// one option's cost (`--set extended.headers.enabled=false`).
    pub settings: BTreeMap<String, String>,
}

/// The record format a benchmark's source connector writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordFormat {
    Json,
    Avro,
}

impl RecordFormat {
    pub fn name(self) -> &'static str {
        match self {
            RecordFormat::Json => "json",
            RecordFormat::Avro => "avro",
        }
    }

    /// Adds this format's converter keys to a connector's `config` object (JSON is the
    /// worker's default and adds nothing).
    pub fn apply(self, config: &mut Value) {
        if self == RecordFormat::Avro {
            for key in ["key.converter", "value.converter"] {
                config[key] = Value::from("io.confluent.connect.avro.AvroConverter");
            }
        }
    }
}

impl BenchArgs {
    /// Parses the process's arguments for `program`; `--threads` is accepted when `threads`.
    /// A bad argument prints the usage line and exits with code 2.
    pub fn parse(program: &str, threads: bool) -> BenchArgs {
        Self::parse_with(program, threads, 1_000_000, 500_000)
    }

    /// [`BenchArgs::parse`] with other defaults for `--rows` and `--stream-events`.
    pub fn parse_with(program: &str, threads: bool, rows: u64, stream_events: u64) -> BenchArgs {
        let usage = || -> ! {
            let t = if threads { " [--threads N]" } else { "" };
            let tls = match program {
                "pg-bench" => " [--tls] [--incremental]",
                "mysql-bench" => " [--incremental]",
                _ => "",
            };
            eprintln!("usage: {program} [--bin PATH] [--rows N] [--stream-events N] [--rate N] [--seconds N]{t} [--format json|avro]{tls} [--set KEY=VALUE]... [--dir DIR]");
            std::process::exit(2)
        };
        let mut a = BenchArgs {
            bin: default_bin(),
            rows,
            stream_events,
            rate: 200,
            seconds: 20,
            threads: 2,
            dir: None,
            format: RecordFormat::Json,
            tls: false,
            incremental: false,
            settings: BTreeMap::new(),
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
                "--threads" if threads => a.threads = num().max(1),
                "--bin" => a.bin = PathBuf::from(it.next().unwrap_or_else(|| usage())),
                "--dir" => a.dir = Some(PathBuf::from(it.next().unwrap_or_else(|| usage()))),
                "--tls" if program == "pg-bench" => a.tls = true,
                "--incremental" if matches!(program, "pg-bench" | "mysql-bench") => {
                    a.incremental = true
                }
                "--set" => {
                    let setting = it.next().unwrap_or_else(|| usage());
                    let (key, value) = setting.split_once('=').unwrap_or_else(|| usage());
                    a.settings.insert(key.to_owned(), value.to_owned());
                }
                "--format" => {
                    a.format = match it.next().as_deref() {
                        Some("json") => RecordFormat::Json,
                        Some("avro") => RecordFormat::Avro,
                        _ => usage(),
                    }
                }
                _ => usage(),
            }
        }
        assert!(
            a.bin.exists(),
            "{} does not exist: build it with `cargo build --release -p headwater` or pass --bin",
            a.bin.display()
        );
        a
    }

    /// Adds the `--format` converters and the `--set` settings to a source connector's
    /// `config` object.
    pub fn configure(&self, config: &mut Value) {
        self.format.apply(config);
        for (key, value) in &self.settings {
            config[key.as_str()] = Value::from(value.as_str());
        }
    }

    /// A fresh work directory (removed when dropped) under `--dir`, else the current one.
    pub fn work_dir(&self, prefix: &str) -> tempfile::TempDir {
        let base = self
            .dir
            .clone()
            .unwrap_or_else(|| std::env::current_dir().expect("a current directory"));
        std::fs::create_dir_all(&base).expect("the work directory's parent");
        tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(&base)
            .expect("a work directory")
    }
}

/// Runs `commit(i)` for `i in 0..rate*seconds`, paced at `rate` per second; each returns the
/// instant its commit returned and the position that covers it (see [`OffsetPoller::finish`]).
pub fn paced_commits(
    rate: u64,
    seconds: u64,
    mut commit: impl FnMut(u64) -> (Instant, u64),
) -> Vec<(Instant, u64)> {
    let n = rate * seconds;
    let period = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    let mut commits = Vec::with_capacity(n as usize);
    let begin = Instant::now();
    for i in 0..n {
        let due = begin + period * i as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        commits.push(commit(i));
    }
    commits
}

/// A benchmark's figures, printed as the summary's last lines and the final JSON line.
pub struct Figures {
    pub rows: u64,
    pub stream_events: u64,
    pub snapshot_rows_s: f64,
    pub stream_events_s: f64,
    pub snapshot_cpu_us_per_row: f64,
    pub stream_cpu_us_per_event: f64,
    /// Sorted latencies in ms.
    pub latencies: Vec<f64>,
    pub rate: u64,
    pub polls: u64,
    pub peak_rss_mb: f64,
    /// The connector's record format.
    pub format: RecordFormat,
    /// [`bytes_per_record`]: (record bytes, log bytes on disk) per record.
    pub bytes_per_record: (f64, f64),
    /// The `--set` connector settings, printed with the figures.
    pub settings: BTreeMap<String, String>,
}

impl Figures {
    /// Prints the latency and RSS summary lines and the final JSON line (with `extra` fields).
    pub fn print(&self, extra: serde_json::Value) {
        let lat = &self.latencies;
        let (p50, p99) = (percentile(lat, 0.5), percentile(lat, 0.99));
        eprintln!(
            "latency: {} commits at {}/s, p50 {p50:.2} ms, p99 {p99:.2} ms, max {:.2} ms ({} offset polls)",
            lat.len(),
            self.rate,
            lat.last().copied().unwrap_or(0.0),
            self.polls
        );
        eprintln!("peak RSS {:.1} MB", self.peak_rss_mb);
        let (record_bytes, disk_bytes) = self.bytes_per_record;
        eprintln!(
            "{}: {record_bytes:.1} record bytes per record, {disk_bytes:.1} log bytes on disk per record",
            self.format.name()
        );
        let round = |v: f64, digits: i32| (v * 10f64.powi(digits)).round() / 10f64.powi(digits);
        let mut out = serde_json::json!({
            "rows": self.rows, "stream_events": self.stream_events, "latency_commits": lat.len(),
            "snapshot_rows_s": self.snapshot_rows_s.round(),
            "stream_events_s": self.stream_events_s.round(),
            "latency_p50_ms": round(p50, 2),
            "latency_p99_ms": round(p99, 2),
            "peak_rss_mb": round(self.peak_rss_mb, 1),
            "snapshot_cpu_us_per_row": round(self.snapshot_cpu_us_per_row, 2),
            "stream_cpu_us_per_event": round(self.stream_cpu_us_per_event, 2),
            "format": self.format.name(),
            "record_bytes_per_event": round(record_bytes, 1),
            "log_disk_bytes_per_event": round(disk_bytes, 1),
        });
        if !self.settings.is_empty() {
            out["settings"] = serde_json::json!(self.settings);
        }
        if let (Some(o), Value::Object(e)) = (out.as_object_mut(), extra) {
            o.extend(e);
        }
        println!("{out}");
    }
}

/// Waits (up to `limit`) until the committed offset of `connector`, read by `position`, is
/// above `past`; returns when it was seen.
pub fn wait_until_past(
    addr: SocketAddr,
    connector: &str,
    position: &impl Fn(&Value) -> Option<u64>,
    past: u64,
    limit: Duration,
) -> Option<Instant> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if committed_offset(addr, connector)
            .and_then(|o| position(&o))
            .is_some_and(|p| p > past)
        {
            return Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

/// Phase 1: waits until `done` says the committed offset ends the snapshot of `rows` rows
/// (the worker was spawned at `started`); prints and returns rows/s and CPU µs per row (the
/// worker's CPU since its start).
pub fn snapshot_phase(
    w: &Worker,
    connector: &str,
    started: Instant,
    rows: u64,
    done: impl Fn(&Value) -> bool,
) -> (f64, f64) {
    while !committed_offset(w.addr, connector).is_some_and(|o| done(&o)) {
        assert!(
            started.elapsed() < Duration::from_secs(1800),
            "snapshot did not finish"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let secs = started.elapsed().as_secs_f64();
    let rows_s = rows as f64 / secs;
    let (user, system) = cpu_split_us(w.pid());
    let per_row = |us: u64| us as f64 / rows.max(1) as f64;
    let cpu_per_row = per_row(user + system);
    eprintln!(
        "snapshot: {rows} rows in {secs:.2} s = {rows_s:.0} rows/s, {cpu_per_row:.2} us CPU/row \
         (user {:.2}, system {:.2})",
        per_row(user),
        per_row(system)
    );
    eprintln!(
        "snapshot: CPU µs/row by live thread: {}",
        thread_cpu_report(&BTreeMap::new(), &thread_cpu_split_us(w.pid()), rows)
    );
    (rows_s, cpu_per_row)
}

/// Phase 2: `write(t)` commits transaction `t` of `txns` (1,000 rows each) and returns a
/// position its commit is covered past; measures from the first commit until the committed
/// offset covers the last. Prints and returns events/s and the worker's CPU µs per event.
pub fn stream_phase(
    w: &Worker,
    connector: &str,
    position: &impl Fn(&Value) -> Option<u64>,
    txns: u64,
    mut write: impl FnMut(u64) -> u64,
) -> (f64, f64) {
    let (user0, system0) = cpu_split_us(w.pid());
    let threads0 = thread_cpu_split_us(w.pid());
    let label = format!("connector=\"{connector}\"");
    let commits = || metric_sum(w.addr, "headwater_task_commits_total", &label).unwrap_or(0);
    let commits0 = commits();
    let mut first: Option<Instant> = None;
    let mut last = 0;
    for t in 0..txns {
        last = write(t);
        first.get_or_insert_with(Instant::now);
    }
    let first = first.unwrap_or_else(Instant::now);
    let written = Instant::now();
    let done = wait_until_past(w.addr, connector, position, last, Duration::from_secs(1800))
        .expect("stream durable");
    let secs = done.duration_since(first).as_secs_f64();
    let events = txns * 1000;
    let events_s = events as f64 / secs;
    let (user, system) = cpu_split_us(w.pid());
    let per_event = |us: u64| us as f64 / events.max(1) as f64;
    let cpu_per_event = per_event(user - user0 + system - system0);
    let commits = commits().saturating_sub(commits0);
    eprintln!(
        "stream: {events} events in {secs:.2} s = {events_s:.0} events/s (writer took {:.2} s), \
         {cpu_per_event:.2} us CPU/event (user {:.2}, system {:.2}), {commits} commits",
        written.duration_since(first).as_secs_f64(),
        per_event(user - user0),
        per_event(system - system0)
    );
    eprintln!(
        "stream: CPU µs/event by thread: {}",
        thread_cpu_report(&threads0, &thread_cpu_split_us(w.pid()), events)
    );
    (events_s, cpu_per_event)
}

/// The incremental-snapshot phase of pg-bench and mysql-bench: from `signal()` (inserting the
/// incremental `execute-snapshot` signal for a table of `table_rows` rows) until a committed
/// offset of `connector` no longer carries the incremental snapshot's progress, committing a
/// change with `trickle(n)` every ~2 ms meanwhile (an offset after the end needs a
/// transaction to carry it). Prints a summary line; returns the figures for the JSON line
/// (`incremental_rows_s`, `incremental_cpu_us_per_row`).
pub fn incremental_phase(
    addr: SocketAddr,
    connector: &str,
    pid: u32,
    table_rows: u64,
    signal: impl FnOnce(),
    mut trickle: impl FnMut(u64),
) -> Value {
    let (user0, system0) = cpu_split_us(pid);
    let started = Instant::now();
    signal();
    let mut seen_progress = false;
    let mut changes = 0;
    loop {
        let o = committed_offset(addr, connector);
        let carries = o
            .as_ref()
            .is_some_and(|o| o.get("incremental_snapshot").is_some());
        if seen_progress && !carries && o.is_some() {
            break;
        }
        seen_progress |= carries;
        assert!(
            started.elapsed() < Duration::from_secs(1800),
            "the incremental snapshot did not finish"
        );
        trickle(changes);
        changes += 1;
        std::thread::sleep(Duration::from_millis(2));
    }
    let secs = started.elapsed().as_secs_f64();
    let (user1, system1) = cpu_split_us(pid);
    let rows = table_rows.max(1) as f64;
    let per_row = (user1 - user0 + system1 - system0) as f64 / rows;
    eprintln!(
        "incremental: {table_rows} rows in {secs:.2} s = {:.0} rows/s, {per_row:.2} us CPU/row (chunks of 1024, {changes} changes streamed meanwhile)",
        rows / secs
    );
    serde_json::json!({"incremental_rows_s": (rows / secs).round(), "incremental_cpu_us_per_row": (per_row * 100.0).round() / 100.0})
}

/// An LSN (`16/B374D848`) as a number.
pub fn parse_lsn(s: &str) -> u64 {
    let (hi, lo) = s.split_once('/').expect("an LSN");
    (u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap()
}

/// The PostgreSQL benchmarks' `orders` table (`id bigint pk, customer_id int, amount
/// numeric(12,2), status text, created_at timestamptz, note text` ~50 bytes), with `rows` rows.
pub fn pg_orders_sql(rows: u64) -> String {
    format!(
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, amount numeric(12,2),
           status text, created_at timestamptz, note text);
         INSERT INTO orders SELECT g, g % 10000, (g % 100000) / 100.0, 'new',
           timestamptz '2024-01-01' + g * interval '1 second',
           'note for order ' || lpad(g::text, 10, '0') || ' with some padding text'
           FROM generate_series(1, {rows}) g;
         ANALYZE orders;"
    )
}

/// Orders `from..=to` inserted by one statement (PostgreSQL).
pub fn pg_orders_insert(from: u64, to: u64) -> String {
    format!(
        "INSERT INTO orders SELECT g, g % 10000, (g % 100000) / 100.0, 'new', now(),
           'note for order ' || lpad(g::text, 10, '0') || ' with some padding text'
           FROM generate_series({from}, {to}) g"
    )
}

/// A binlog position as one ordered number: file sequence number (the `.000123` suffix) in
/// the high half, byte position in the low half.
pub fn binlog_position(file: &str, pos: u64) -> u64 {
    let seq = file
        .rsplit_once('.')
        .and_then(|(_, n)| n.parse::<u64>().ok())
        .unwrap_or(0);
    (seq << 32) | (pos & 0xFFFF_FFFF)
}

/// Orders `from..=to` inserted by one statement over MariaDB's sequence engine (the MySQL
/// benchmarks' `orders` shape).
pub fn mariadb_orders_insert(from: u64, to: u64, note_prefix: &str) -> String {
    format!(
        "INSERT INTO orders SELECT seq, seq % 10000, (seq % 100000) / 100.0, 'new',
           TIMESTAMP '2024-01-01 00:00:00' + INTERVAL (seq % 100000000) SECOND,
           CONCAT('{note_prefix} ', LPAD(seq, 10, '0'), ' with some padding text')
           FROM seq_{from}_to_{to}"
    )
}

/// A harness PostgreSQL with database `bench`, a current-thread runtime and a session on it
/// whose commits flush their WAL: the harness runs PostgreSQL with `synchronous_commit=off`,
/// where committed WAL only reaches the walsender at the WAL writer's next flush
/// (`wal_writer_delay`, 200 ms), which would measure the server's setting, not the connector.
pub fn pg_bench_session() -> (
    crate::PostgresServer,
    tokio::runtime::Runtime,
    tokio_postgres::Client,
) {
    pg_bench_session_with(None)
}

/// [`pg_bench_session`], with a server that requires TLS of every role but the harness's own
/// when `tls` gives its certificates.
pub fn pg_bench_session_with(
    tls: Option<&crate::pki::TestPki>,
) -> (
    crate::PostgresServer,
    tokio::runtime::Runtime,
    tokio_postgres::Client,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = match tls {
        Some(pki) => {
            crate::PostgresServer::start_with_tls(pki.server_cert_pem(), pki.server_key_pem())
        }
        None => crate::PostgresServer::start(),
    }
    .expect("PostgreSQL");
    rt.block_on(server.create_database("bench")).unwrap();
    let db = rt.block_on(server.connect("bench")).unwrap();
    rt.block_on(db.batch_execute("SET synchronous_commit = on"))
        .unwrap();
    (server, rt, db)
}
