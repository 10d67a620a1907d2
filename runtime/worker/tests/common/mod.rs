//! Test support shared by the worker's integration tests: spawning the `headwater` binary on a
//! free port (keeping its log lines), a minimal HTTP/1.1 client for its REST API, running
//! the binary's client subcommands, and a harness PostgreSQL with the seed tables.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use headwater_tests::PostgresServer;
use serde_json::Value;

pub struct Worker {
    /// The REST listener.
    pub addr: SocketAddr,
    /// The Kafka protocol listener.
    pub kafka: SocketAddr,
    /// Whether the REST listener serves HTTPS.
    pub https: bool,
    child: Child,
    logs: Arc<Mutex<Vec<String>>>,
}

impl Worker {
    pub fn start(data_dir: &Path, files: &[&Path]) -> Worker {
        Self::start_with(data_dir, files, &[], &[])
    }

    /// Starts a worker with extra flags and environment variables.
    pub fn start_with(
        data_dir: &Path,
        files: &[&Path],
        args: &[&str],
        envs: &[(&str, &str)],
    ) -> Worker {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_headwater"));
        cmd.arg("worker")
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--rest-listen")
            .arg("127.0.0.1:0")
            .arg("--kafka-listen")
            .arg("127.0.0.1:0")
            .args(args)
            .args(files)
            .env_remove("RUST_LOG")
            .env_remove("HEADWATER_CONFIG")
            .env_remove("HEADWATER_REST_AUTH_TOKEN")
            .env_remove("HEADWATER_REST_AUTH_USERS")
            .env_remove("HEADWATER_REST_TLS_CERT")
            .env_remove("HEADWATER_REST_TLS_KEY")
            .env("HEADWATER_LOG_LEVEL", "info")
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn headwater");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel::<String>();
        let logs = Arc::new(Mutex::new(Vec::new()));
        let kept = logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                kept.lock().unwrap().push(line.clone());
                // After start-up nobody listens; keep draining so the worker never blocks.
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = Vec::new();
        loop {
            let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
            else {
                let _ = child.kill();
                let _ = child.wait();
                panic!("worker did not start: {seen:#?}");
            };
            if let Some((https, rest)) = line.split_whitespace().find_map(|w| {
                w.strip_prefix("rest=http://")
                    .map(|a| (false, a))
                    .or_else(|| w.strip_prefix("rest=https://").map(|a| (true, a)))
            }) {
                let addr = rest.parse().expect("address");
                let kafka = line
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("kafka="))
                    .unwrap_or_else(|| panic!("no kafka= in {line}"))
                    .parse()
                    .expect("Kafka address");
                return Worker {
                    child,
                    addr,
                    kafka,
                    https,
                    logs,
                };
            }
            seen.push(line);
        }
    }

    pub fn sigterm(mut self) {
        // SAFETY: signalling a child we spawned and have not reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let status = self.child.wait().expect("wait");
        assert_eq!(status.code(), Some(0), "clean shutdown");
    }

    /// Every line the worker wrote to stderr so far.
    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }

    /// The base URL for client subcommands.
    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    pub fn sigkill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("wait");
    }

    /// The records of `topic`'s partition 0 (at most 10,000) as the REST API renders them
    /// (`offset`, `key`, `value`, ...), or `None` while the topic does not exist. Offsets are
    /// not counts: each source transaction ends with a marker that takes an offset.
    pub fn partition0_records(&self, topic: &str) -> Option<Vec<Value>> {
        let (status, _, mut body) = self.call(
            "GET",
            &format!("/topics/{topic}/partitions/0/records?offset=0&max=10000"),
            None,
        );
        if status != 200 {
            return None;
        }
        match body["records"].take() {
            Value::Array(records) => Some(records),
            _ => None,
        }
    }

    pub fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> (u16, Vec<(String, String)>, Value) {
        http(self.addr, method, path, body)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A minimal HTTP/1.1 client: one request per connection.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, Vec<(String, String)>, Value) {
    let (status, headers, body) = http_raw(addr, method, path, body, &[]);
    let value = if body.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("{method} {path}: bad JSON body {body:?}: {e}"))
    };
    (status, headers, value)
}

/// One request with extra headers; the body as text.
pub fn http_raw(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    extra_headers: &[(&str, &str)],
) -> (u16, Vec<(String, String)>, String) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let body = body.unwrap_or("");
    let extra: String = extra_headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("write");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("read");
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").expect("headers end");
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_owned()
    };
    (status, headers, body)
}

/// The outcome of running the binary: exit code, stdout, stderr.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Stdout lines parsed as JSON.
    pub fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
            .collect()
    }
}

/// Runs `headwater ARGS` (a client subcommand) with `envs`, stdout piped (not a terminal).
pub fn headwater(args: &[&str], envs: &[(&str, &str)]) -> Run {
    let output = client_command(args, envs).output().expect("run headwater");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// The command `headwater ARGS` without inherited client settings.
pub fn client_command(args: &[&str], envs: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_headwater"));
    cmd.args(args)
        .env_remove("HEADWATER_URL")
        .env_remove("HEADWATER_TOKEN")
        .env_remove("HEADWATER_USER")
        .env_remove("HEADWATER_CACERT")
        .envs(envs.iter().copied())
        .stdin(Stdio::null());
    cmd
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&after[..n]);
        rest = &after[n + 2..];
    }
    out
}

pub fn wait_until(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for {what}");
}

/// Runs SQL (one or more statements) in database `production` of a harness PostgreSQL.
pub fn sql(runtime: &tokio::runtime::Runtime, server: &PostgresServer, text: &str) {
    runtime.block_on(async {
        let client = server.connect("production").await.expect("connect");
        client
            .batch_execute(text)
            .await
            .unwrap_or_else(|e| panic!("{text}: {e}"));
    });
}

/// A harness PostgreSQL with the seed tables and rows, its runtime for SQL, and the seed connector
/// config pointing at it.
pub fn seeded_server(rows: &str) -> (tokio::runtime::Runtime, PostgresServer, Value) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = PostgresServer::start().expect("PostgreSQL");
    runtime
        .block_on(server.create_database("production"))
        .unwrap();
    let schema = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/golden/debezium/postgres/pg_seed_schema.sql"
    ))
    .unwrap();
    sql(&runtime, &server, &schema);
    sql(&runtime, &server, rows);
    let seed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../config/connectors/postgres-cdc-source.json"
    ))
    .unwrap();
    let mut config: Value = serde_json::from_str(&seed).unwrap();
    config["config"]["database.port"] = Value::String(server.port().to_string());
    (runtime, server, config)
}
