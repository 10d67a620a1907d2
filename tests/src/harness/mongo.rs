//! [`MongoServer`]: a private, throwaway MongoDB-wire-compatible server for tests.
//!
//! There is no MongoDB server in Debian; the tests use SecantusDB (`secantusd-py`, PyPI
//! `secantusdb==0.7.0b3`, installed by `scripts/install-deps` into the test virtualenv), which
//! reports a one-member replica set named `secantus` and supports change streams, resume
//! tokens, `startAtOperationTime`, pre-images and an oplog.
//!
//! Invariants:
//!
//! * every server stores its data in its own temporary directory and listens on 127.0.0.1 on
//!   a port no other live server of this process uses;
//! * a handle exists only once the server answered a `hello` on its port;
//! * [`MongoServer::restart`] stops the process and starts it again on the same port with the
//!   same storage (a server restart as clients see one);
//! * dropping the handle stops the server (SIGTERM, then SIGKILL of its process group) and
//!   only then removes the directory.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::support::{self, ExitCleanup, LogFile, PortReservation, POLL_INTERVAL};
use super::HarnessError;

const SERVER: &str = "SecantusDB";
const INSTALL_HINT: &str =
    "scripts/install-deps (pip install secantusdb==0.7.0b3 into the test virtualenv)";
/// How long the server may take to accept connections.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a SIGTERM shutdown may take before the process group is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// The test virtualenv (also holding the Kafka client tests' confluent-kafka).
const VENV_ENV: &str = "HEADWATER_TEST_VENV";
const DEFAULT_VENV: &str = "/var/tmp/headwater-test-venv";

/// Options of a test server.
#[derive(Clone, Debug, Default)]
pub struct MongoOptions {
    /// `--oplog-max-entries` (the server's default is 100,000): small values let a test make
    /// a stored resume token fall off the oplog.
    pub oplog_max_entries: Option<u64>,
}

/// A running SecantusDB server owned by a test.
#[derive(Debug)]
pub struct MongoServer {
    child: Child,
    port: PortReservation,
    storage: PathBuf,
    binary: PathBuf,
    options: MongoOptions,
    log: LogFile,
    _exit_cleanup: ExitCleanup,
    dir: TempDir,
}

/// Finds `secantusd-py` in the test virtualenv, else on `PATH`.
fn find_binary() -> Result<PathBuf, HarnessError> {
    let venv = std::env::var_os(VENV_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_VENV));
    support::find_server_binary(
        Some(venv.join("bin")),
        "secantusd-py",
        "the SecantusDB server",
        INSTALL_HINT,
    )
}

impl MongoServer {
    /// Starts a new server with default options, blocking until it answers (a few seconds).
    pub fn start() -> Result<MongoServer, HarnessError> {
        Self::start_with(MongoOptions::default())
    }

    /// Starts a new server with `options`.
    pub fn start_with(options: MongoOptions) -> Result<MongoServer, HarnessError> {
        let binary = find_binary()?;
        let dir = support::make_temp_dir("headwater-mongo-", None)?;
        let storage = dir.path().join("data");
        std::fs::create_dir(&storage)
            .map_err(|e| HarnessError::io(format!("creating {}", storage.display()), e))?;
        let (log, _) = LogFile::open(dir.path().join("server.log"))?;
        let port = support::reserve_port()?;
        let child = spawn(&binary, port.port(), &storage, &options, &log)?;
        let exit_cleanup =
            ExitCleanup::register(Some((child.id(), libc::SIGTERM)), dir.path().to_path_buf());
        let mut server = MongoServer {
            child,
            port,
            storage,
            binary,
            options,
            log,
            _exit_cleanup: exit_cleanup,
            dir,
        };
        server.wait_until_ready(0)?;
        Ok(server)
    }

    /// Waits until the server logged that it listens (after log offset `from`) and accepts a
    /// connection.
    fn wait_until_ready(&mut self, from: u64) -> Result<(), HarnessError> {
        let port = self.port();
        let log = &self.log;
        support::wait_until_serving(&mut self.child, SERVER, port, log, STARTUP_TIMEOUT, || {
            log.read_from(from).contains("listening on") && support::accepts_connections(port)
        })
    }

    /// Stops the server and starts it again on the same port with the same data.
    pub fn restart(&mut self) -> Result<(), HarnessError> {
        support::stop_child(&mut self.child, libc::SIGTERM, STOP_GRACE);
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        // The port is ours (reserved); wait until the old process released it.
        while TcpStream::connect_timeout(
            &SocketAddr::from((Ipv4Addr::LOCALHOST, self.port())),
            Duration::from_millis(100),
        )
        .is_ok()
            && Instant::now() < deadline
        {
            thread::sleep(POLL_INTERVAL);
        }
        let from = self.log.len();
        self.child = spawn(
            &self.binary,
            self.port(),
            &self.storage,
            &self.options,
            &self.log,
        )?;
        self.wait_until_ready(from)
    }

    /// The TCP port the server listens on (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port.port()
    }

    /// The connection string: `mongodb://127.0.0.1:P/?replicaSet=secantus`.
    pub fn uri(&self) -> String {
        format!("mongodb://127.0.0.1:{}/?replicaSet=secantus", self.port())
    }

    /// The last lines of the server log.
    pub fn log_tail(&self) -> String {
        self.log.tail()
    }

    /// The server's private temporary directory; removed on drop.
    pub fn root_dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

fn spawn(
    binary: &PathBuf,
    port: u16,
    storage: &PathBuf,
    options: &MongoOptions,
    log: &LogFile,
) -> Result<Child, HarnessError> {
    let (out, err) = support::log_outputs(log)?;
    let mut cmd = Command::new(binary);
    cmd.arg("--host")
        .arg("127.0.0.1")
        .arg("--port")
        .arg(port.to_string())
        .arg("--storage-path")
        .arg(storage);
    if let Some(n) = options.oplog_max_entries {
        cmd.arg("--oplog-max-entries").arg(n.to_string());
    }
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    let description = support::describe(&cmd);
    support::spawn_supervised(cmd, libc::SIGTERM)
        .map_err(|e| HarnessError::io(format!("starting `{description}`"), e))
}

impl Drop for MongoServer {
    fn drop(&mut self) {
        support::stop_child(&mut self.child, libc::SIGTERM, STOP_GRACE);
    }
}
