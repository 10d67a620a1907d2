//! Test support shared by the worker's integration tests: spawning the `headwater` binary on a
//! free port and a minimal HTTP/1.1 client for its REST API.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

pub struct Worker {
    pub addr: SocketAddr,
    child: Child,
}

impl Worker {
    pub fn start(data_dir: &Path, files: &[&Path]) -> Worker {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_headwater"));
        cmd.arg("worker")
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--rest-listen")
            .arg("127.0.0.1:0")
            .arg("--kafka-listen")
            .arg("127.0.0.1:0")
            .args(files)
            .env_remove("RUST_LOG")
            .env_remove("HEADWATER_CONFIG")
            .env("HEADWATER_LOG_LEVEL", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn headwater");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    // Keep draining so the worker never blocks on a full pipe.
                    continue;
                }
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
            if let Some(rest) = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("rest=http://"))
            {
                let addr = rest.parse().expect("address");
                return Worker { child, addr };
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

    pub fn sigkill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("wait");
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
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let body = body.unwrap_or("");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
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
    let value = if body.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("{method} {path}: bad JSON body {body:?}: {e}"))
    };
    (status, headers, value)
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
