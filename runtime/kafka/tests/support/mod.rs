//! Shared support for the Kafka listener's tests: an in-process server over a temporary log,
//! a blocking raw-protocol client, and the real clients (kcat from Debian, confluent-kafka
//! from PyPI in a cached virtualenv) that the integration tests run.
//!
//! The real clients are installed by `scripts/install-deps`; when the virtualenv is missing a
//! test creates it (under a lock, so parallel tests install once). A missing `kcat` fails the
//! test with the command to run, never skips it.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use headwater_kafka::codec::{decode_response, encode_request};
use headwater_kafka::{KafkaServer, ServerConfig, TopicOwner};
use headwater_log::{Log, LogOptions};
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Decodable, Encodable};

/// A server on 127.0.0.1:0 over a log in `dir`, run by its own tokio runtime.
pub struct TestServer {
    pub addr: SocketAddr,
    pub log: Log,
    runtime: Option<tokio::runtime::Runtime>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl TestServer {
    pub fn start(dir: &Path, owner: Option<TopicOwner>) -> TestServer {
        let log = Log::open(dir, LogOptions::default()).expect("open log");
        Self::start_on(log, owner)
    }

    pub fn start_on(log: Log, owner: Option<TopicOwner>) -> TestServer {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let server = KafkaServer::new(
            log.clone(),
            ServerConfig {
                cluster_id: "test-cluster".into(),
                initial_rebalance_delay: Duration::from_millis(300),
                ..ServerConfig::default()
            },
            owner,
        )
        .expect("server");
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        runtime.spawn(async move {
            server
                .serve(listener, async move {
                    let _ = rx.await;
                })
                .await
        });
        TestServer {
            addr,
            log,
            runtime: Some(runtime),
            stop: Some(tx),
        }
    }

    /// Stops the server and closes the log (as a worker shutdown does).
    pub fn stop(mut self) {
        self.shutdown();
        self.log.close().expect("close log");
    }

    fn shutdown(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(5));
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A blocking client speaking the protocol frame by frame.
pub struct RawClient {
    pub stream: TcpStream,
    correlation: i32,
}

impl RawClient {
    pub fn connect(addr: SocketAddr) -> RawClient {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        RawClient {
            stream,
            correlation: 0,
        }
    }

    /// Sends a request and returns the decoded response.
    pub fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Resp {
        self.correlation += 1;
        let frame = encode_request(key, version, self.correlation, "raw-test", request)
            .expect("encode request");
        self.stream.write_all(&frame).expect("send");
        let body = self.read_frame().expect("response frame");
        let (correlation, resp) =
            decode_response::<Resp>(key, version, body).expect("decode response");
        assert_eq!(correlation, self.correlation, "correlation id");
        resp
    }

    /// Sends raw bytes.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// Reads one response frame (without its size); `None` when the server closed.
    pub fn read_frame(&mut self) -> Option<Bytes> {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).ok()?;
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        self.stream.read_exact(&mut body).ok()?;
        Some(Bytes::from(body))
    }

    /// Whether the server closed the connection (reads EOF within the timeout).
    pub fn closed_by_server(&mut self) -> bool {
        let mut byte = [0u8; 1];
        matches!(self.stream.read(&mut byte), Ok(0))
    }
}

/// The `kcat` binary (Debian package `kcat`).
pub fn kcat() -> PathBuf {
    let found = Command::new("kcat")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        found,
        "kcat is not installed: run scripts/install-deps (apt-get install -y kcat)"
    );
    PathBuf::from("kcat")
}

/// Runs a command with a time limit; panics (after killing it) when it runs over.
pub fn run_with_timeout(cmd: &mut Command, limit: Duration) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("wait"),
        Err(_) => {
            // SAFETY: signalling the child we spawned (not yet reaped: the waiter thread is
            // still blocked in wait).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("{cmd:?} did not finish within {limit:?}");
        }
    }
}

/// The cached virtualenv with confluent-kafka (`HEADWATER_TEST_VENV`, default
/// `/var/tmp/headwater-test-venv`); created on first use.
pub fn python() -> PathBuf {
    let venv = std::env::var_os("HEADWATER_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/headwater-test-venv"));
    let python = venv.join("bin/python");
    let ready = |python: &Path| {
        Command::new(python)
            .args(["-c", "import confluent_kafka"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    if ready(&python) {
        return python;
    }
    // One installer at a time across test processes.
    std::fs::create_dir_all(venv.parent().unwrap_or(Path::new("/"))).expect("venv parent");
    let lock_path = venv.with_extension("lock");
    let lock = std::fs::File::create(&lock_path).expect("venv lock");
    // SAFETY: flock on a descriptor we own.
    unsafe { libc::flock(std::os::unix::io::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
    if !ready(&python) {
        let status = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("python3 -m venv (install python3-venv: scripts/install-deps)");
        assert!(status.success(), "python3 -m venv failed");
        let status = Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "confluent-kafka"])
            .status()
            .expect("pip install confluent-kafka");
        assert!(status.success(), "pip install confluent-kafka failed");
    }
    drop(lock);
    assert!(
        ready(&python),
        "confluent-kafka is not importable in {venv:?}"
    );
    python
}

/// Runs a Python script (in the venv) with arguments; returns stdout, panics with stderr on
/// failure.
pub fn run_python(dir: &Path, name: &str, script: &str, args: &[&str], limit: Duration) -> String {
    let path = dir.join(name);
    std::fs::write(&path, script).expect("write script");
    let started = Instant::now();
    let out = run_with_timeout(Command::new(python()).arg(&path).args(args), limit);
    assert!(
        out.status.success(),
        "{name} failed after {:?}: {}\n{}",
        started.elapsed(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Polls `check` until it holds or `limit` passes.
pub fn wait_until(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out waiting for {what}");
}
