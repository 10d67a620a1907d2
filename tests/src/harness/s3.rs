//! [`S3Server`]: a private, throwaway S3-compatible object store for tests.
//!
//! The server is `s3s-fs` (crates.io, the filesystem backend of the `s3s` S3 server
//! framework; `scripts/install-deps` installs it with `cargo install`): it speaks the S3 REST
//! protocol with SigV4-signed requests and keeps each object as a file at `<root>/<bucket>/<key>`,
//! so a test can check what was stored with plain file reads. It is a single process over a
//! local directory: it proves the S3 protocol side (signing, PUT, multipart upload, GET, LIST,
//! DELETE), not AWS's own behaviour (eventual listing, throttling, regional endpoints).
//!
//! Invariants:
//!
//! * every server stores its data in its own temporary directory and listens on 127.0.0.1 on
//!   a port no other live server of this process uses;
//! * a handle exists only once the server accepts connections;
//! * dropping the handle stops the server and only then removes the directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

use super::support::{self, ExitCleanup, LogFile, PortReservation};
use super::HarnessError;

const SERVER: &str = "s3s-fs";
const INSTALL_HINT: &str =
    "scripts/install-deps (cargo install s3s-fs --version 0.14.1 --features binary --locked)";
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The access key id and secret every test server accepts.
pub const S3_ACCESS_KEY: &str = "headwater-test";
pub const S3_SECRET_KEY: &str = "headwater-test-secret";

/// A running S3-compatible server owned by a test.
#[derive(Debug)]
pub struct S3Server {
    child: Child,
    port: PortReservation,
    root: PathBuf,
    log: LogFile,
    _exit_cleanup: ExitCleanup,
    dir: TempDir,
}

/// Finds `s3s-fs` in `$CARGO_HOME/bin` (default `~/.cargo/bin`), else on `PATH`.
fn find_binary() -> Result<PathBuf, HarnessError> {
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    support::find_server_binary(
        cargo_home.map(|c| c.join("bin")),
        "s3s-fs",
        "the S3-compatible test server",
        INSTALL_HINT,
    )
}

impl S3Server {
    /// Starts a new server, blocking until it accepts connections.
    pub fn start() -> Result<S3Server, HarnessError> {
        let binary = find_binary()?;
        let dir = support::make_temp_dir("headwater-s3-", None)?;
        let root = dir.path().join("data");
        std::fs::create_dir(&root)
            .map_err(|e| HarnessError::io(format!("creating {}", root.display()), e))?;
        let (log, _) = LogFile::open(dir.path().join("server.log"))?;
        let port = support::reserve_port()?;
        let (out, err) = support::log_outputs(&log)?;
        let mut cmd = Command::new(&binary);
        cmd.arg("--host")
            .arg("127.0.0.1")
            .arg("--port")
            .arg(port.port().to_string())
            .arg("--access-key")
            .arg(S3_ACCESS_KEY)
            .arg("--secret-key")
            .arg(S3_SECRET_KEY)
            .arg(&root)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let description = support::describe(&cmd);
        let child = support::spawn_supervised(cmd, libc::SIGTERM)
            .map_err(|e| HarnessError::io(format!("starting `{description}`"), e))?;
        let exit_cleanup =
            ExitCleanup::register(Some((child.id(), libc::SIGTERM)), dir.path().to_path_buf());
        let mut server = S3Server {
            child,
            port,
            root,
            log,
            _exit_cleanup: exit_cleanup,
            dir,
        };
        server.wait_until_ready()?;
        Ok(server)
    }

    fn wait_until_ready(&mut self) -> Result<(), HarnessError> {
        let port = self.port();
        support::wait_until_serving(
            &mut self.child,
            SERVER,
            port,
            &self.log,
            STARTUP_TIMEOUT,
            || support::accepts_connections(port),
        )
    }

    /// Creates bucket `name` (a directory of the server's root, as `s3s-fs` keeps buckets).
    pub fn create_bucket(&self, name: &str) -> Result<(), HarnessError> {
        let dir = self.root.join(name);
        std::fs::create_dir_all(&dir)
            .map_err(|e| HarnessError::io(format!("creating {}", dir.display()), e))
    }

    /// The TCP port the server listens on (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port.port()
    }

    /// The endpoint URL: `http://127.0.0.1:P`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port())
    }

    /// The directory holding the objects of `bucket` (object `key` is the file `<this>/<key>`).
    pub fn object_dir(&self, bucket: &str) -> PathBuf {
        self.root.join(bucket)
    }

    /// The server's data root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The last lines of the server log.
    pub fn log_tail(&self) -> String {
        self.log.tail()
    }

    /// The server's private temporary directory; removed on drop.
    pub fn root_dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        support::stop_child(&mut self.child, libc::SIGTERM, STOP_GRACE);
    }
}
