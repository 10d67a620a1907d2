//! [`MariaDbServer`]: a private, throwaway MariaDB server with a row-based binary log, for
//! tests.
//!
//! Invariants:
//!
//! * every server runs on its own copy of a data directory made once per test process by
//!   `mariadb-install-db` (system tables only, no `test` database, `root` without password
//!   from 127.0.0.1); the template itself is never served, so servers never share files;
//! * everything a server writes (data, binary logs, socket, pid file, temporary files, error
//!   log) lives in its own temporary directory;
//! * the server listens on 127.0.0.1 only, logs every change to its binary log in `ROW`
//!   format with `FULL` row images and `FULL` row metadata, and has a `server_id` equal to its
//!   port, hence unique among the live servers of the machine;
//! * a handle exists only once our own process logged "ready for connections" and a client
//!   handshake on the port succeeded;
//! * when the test process runs as root, the server runs as root too (`--user=root`);
//! * dropping the handle stops the server (SIGTERM, then SIGKILL of its process group) and
//!   only then removes the directory.

use std::io::{self, Read};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use tempfile::TempDir;

use super::support::{self, ExitCleanup, LogFile, PortReservation, POLL_INTERVAL};
use super::{check_database_name, HarnessError};

const SERVER: &str = "MariaDB";
const INSTALL_HINT: &str = "apt-get install -y mariadb-server";
/// How long the server may take to accept connections.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a SIGTERM shutdown may take before the process group is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How many ports are tried when the chosen one is taken before the server binds it.
const PORT_ATTEMPTS: u32 = 5;
/// InnoDB settings shared by the template bootstrap and the servers (keeping the redo log
/// size identical avoids a resize at every start).
const INNODB_SETTINGS: [&str; 4] = [
    "--innodb-buffer-pool-size=32M",
    "--innodb-log-file-size=16M",
    "--innodb-flush-log-at-trx-commit=2",
    "--innodb-doublewrite=0",
];
/// Environment variable naming a directory holding `mariadbd` (or `mysqld`); it overrides the
/// lookup.
const BIN_DIR_ENV: &str = "HEADWATER_MARIADB_BINDIR";

/// A running MariaDB server owned by a test. Dropping it stops the server and deletes its
/// data.
///
/// ```no_run
/// # async fn demo() -> Result<(), headwater_tests::HarnessError> {
/// use mysql_async::prelude::Queryable;
/// let db = headwater_tests::MariaDbServer::start()?;
/// db.create_database("app").await?;
/// let mut conn = db.connect("app").await?;
/// conn.query_drop("CREATE TABLE t (id INT PRIMARY KEY)").await?;
/// conn.disconnect().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct MariaDbServer {
    child: Child,
    port: PortReservation,
    server_id: u32,
    data_dir: PathBuf,
    binlog_dir: PathBuf,
    socket_path: PathBuf,
    log: LogFile,
    /// Unregistered (after the child is reaped) before `dir` is removed.
    _exit_cleanup: ExitCleanup,
    /// Declared last: removed after everything above is dropped.
    dir: TempDir,
}

impl MariaDbServer {
    /// Starts a new server, blocking until it accepts connections (at most ~60 s; the first
    /// server of a test process also builds the data-directory template, ~5 s).
    ///
    /// Blocking: from async code call it once at the start of a test (it does not need a
    /// runtime), or through `tokio::task::spawn_blocking`.
    pub fn start() -> Result<MariaDbServer, HarnessError> {
        Self::start_with_ports(support::reserve_port, &[])
    }

    /// As [`Self::start`], with more `mariadbd` options after the harness's own (a later
    /// option wins), e.g. `--version=5.7.19-MariaDB-10.11.19` for clients that insist on a
    /// MySQL 5.7-style version string.
    pub fn start_with_options(options: &[&str]) -> Result<MariaDbServer, HarnessError> {
        Self::start_with_ports(support::reserve_port, options)
    }

    /// [`Self::start`] taking its candidate ports from `next_port`.
    fn start_with_ports(
        mut next_port: impl FnMut() -> Result<PortReservation, HarnessError>,
        options: &[&str],
    ) -> Result<MariaDbServer, HarnessError> {
        let bins = Binaries::find()?;
        let dir = support::make_temp_dir("headwater-mariadb-", None)?;
        let data_dir = dir.path().join("data");
        let binlog_dir = dir.path().join("binlog");
        let tmp_dir = dir.path().join("tmp");
        let socket_path = dir.path().join("mysqld.sock");

        let template = template_data_dir(&bins)?;
        support::copy_tree(&template, &data_dir).map_err(|e| {
            HarnessError::io(
                format!(
                    "copying the data directory template {} to {}",
                    template.display(),
                    data_dir.display()
                ),
                e,
            )
        })?;
        for d in [&binlog_dir, &tmp_dir] {
            std::fs::create_dir(d)
                .map_err(|e| HarnessError::io(format!("creating {}", d.display()), e))?;
        }
        let (log, _) = LogFile::open(dir.path().join("error.log"))?;

        let mut last_collision_tail = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = next_port()?;
            let server_id = u32::from(port.port());
            let log_offset = log.len();
            let layout = Layout {
                root: dir.path(),
                data_dir: &data_dir,
                binlog_dir: &binlog_dir,
                tmp_dir: &tmp_dir,
                socket_path: &socket_path,
                log: &log,
            };
            let mut child = spawn_mariadbd(&bins.server, &layout, port.port(), server_id, options)?;
            match wait_until_ready(&mut child, port.port(), &log, log_offset) {
                Ok(()) => {
                    let exit_cleanup = ExitCleanup::register(
                        Some((child.id(), libc::SIGTERM)),
                        dir.path().to_path_buf(),
                    );
                    return Ok(MariaDbServer {
                        child,
                        port,
                        server_id,
                        data_dir,
                        binlog_dir,
                        socket_path,
                        log,
                        _exit_cleanup: exit_cleanup,
                        dir,
                    });
                }
                Err(Startup::PortTaken) => {
                    support::stop_child(&mut child, libc::SIGTERM, STOP_GRACE);
                    last_collision_tail = log.tail();
                }
                Err(Startup::Failed(e)) => {
                    support::stop_child(&mut child, libc::SIGTERM, STOP_GRACE);
                    return Err(e);
                }
            }
        }
        Err(HarnessError::NoFreePort {
            server: SERVER,
            attempts: PORT_ATTEMPTS,
            log: log.path.clone(),
            log_tail: last_collision_tail,
        })
    }

    /// The TCP port the server listens on (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port.port()
    }

    /// The host the server listens on: always `127.0.0.1`.
    pub fn host(&self) -> &'static str {
        "127.0.0.1"
    }

    /// The user every connection helper uses: `root` (no password).
    pub fn user(&self) -> &'static str {
        "root"
    }

    /// A `mysql_async` URL for database `db` as `root`: `mysql://root@127.0.0.1:P/db`
    /// (no database part when `db` is empty).
    pub fn url(&self, db: &str) -> String {
        let base = format!("mysql://root@{}:{}", self.host(), self.port());
        if db.is_empty() {
            base
        } else {
            format!("{base}/{db}")
        }
    }

    /// The server's `server_id` (distinct from every other live server's; equal to its port).
    /// Binlog clients must use a different id for themselves.
    pub fn server_id(&self) -> u32 {
        self.server_id
    }

    /// The server's private temporary directory (data, socket, logs); removed on drop.
    pub fn root_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The directory of the binary logs (`mysql-bin.NNNNNN` and `mysql-bin.index`).
    pub fn binlog_dir(&self) -> &Path {
        &self.binlog_dir
    }

    /// The server's Unix socket.
    pub fn socket_path(&self) -> &Path {
        &self.socket_path
    }

    /// The server's error log.
    pub fn log_path(&self) -> &Path {
        &self.log.path
    }

    /// The last lines of the error log (handy in assertion messages).
    pub fn log_tail(&self) -> String {
        self.log.tail()
    }

    /// The process id of the server.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Connects to database `db` (empty: none) as `root`. Call `disconnect().await` on the
    /// connection when done to close it cleanly.
    pub async fn connect(&self, db: &str) -> Result<mysql_async::Conn, HarnessError> {
        Ok(mysql_async::Conn::from_url(self.url(db)).await?)
    }

    /// Creates database `name` (1–63 ASCII letters, digits or `_`), in `utf8mb4`.
    pub async fn create_database(&self, name: &str) -> Result<(), HarnessError> {
        check_database_name(name)?;
        let mut conn = self.connect("").await?;
        let created = conn
            .query_drop(format!("CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
            .await;
        let closed = conn.disconnect().await;
        created?;
        closed?;
        Ok(())
    }
}

impl Drop for MariaDbServer {
    fn drop(&mut self) {
        support::stop_child(&mut self.child, libc::SIGTERM, STOP_GRACE);
    }
}

/// Why one startup attempt did not produce a server.
enum Startup {
    /// Someone else bound the port first; try another.
    PortTaken,
    /// Anything else; give up.
    Failed(HarnessError),
}

/// The MariaDB executables used.
struct Binaries {
    server: PathBuf,
    install_db: PathBuf,
}

impl Binaries {
    /// Finds `mariadbd`/`mysqld` and `mariadb-install-db`/`mysql_install_db`:
    /// `$HEADWATER_MARIADB_BINDIR`, then `PATH`, then the usual system directories.
    fn find() -> Result<Binaries, HarnessError> {
        let mut dirs = Vec::new();
        if let Some(dir) = std::env::var_os(BIN_DIR_ENV) {
            dirs.push(PathBuf::from(dir));
        }
        dirs.extend(support::path_dirs());
        dirs.extend(
            [
                "/usr/sbin",
                "/usr/bin",
                "/usr/libexec",
                "/usr/local/mysql/bin",
                "/usr/local/mysql/scripts",
            ]
            .map(PathBuf::from),
        );
        let dirs = support::dedup_dirs(dirs);
        let not_found = |names: &str| HarnessError::BinaryNotFound {
            what: "MariaDB server binaries",
            names: names.to_owned(),
            searched: support::display_dirs(&dirs),
            install_hint: INSTALL_HINT,
        };
        let server = support::find_executable(&dirs, &["mariadbd", "mysqld"])
            .ok_or_else(|| not_found("mariadbd or mysqld"))?;
        let install_db =
            support::find_executable(&dirs, &["mariadb-install-db", "mysql_install_db"])
                .ok_or_else(|| not_found("mariadb-install-db or mysql_install_db"))?;
        Ok(Binaries { server, install_db })
    }
}

/// The per-process data-directory template: `(server binary it was made with, data dir)`.
/// Its directory is removed at process exit.
static TEMPLATE: Mutex<Option<(PathBuf, PathBuf)>> = Mutex::new(None);

/// Returns the template data directory, creating it on first use (concurrent callers wait
/// for the first one; a failure is not cached, the next caller tries again).
fn template_data_dir(bins: &Binaries) -> Result<PathBuf, HarnessError> {
    let mut template = TEMPLATE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((server, data)) = template.as_ref() {
        // Reused unless made with another binary or removed behind our back.
        if *server == bins.server && data.join("mysql").is_dir() {
            return Ok(data.clone());
        }
    }
    let dir = support::make_temp_dir("headwater-mariadb-template-", None)?;
    let data = dir.path().join("data");
    // The bootstrap's own temporary tables go to a directory of its own: in the shared /tmp,
    // concurrent bootstraps of other test processes were seen to lose them ("Could not remove
    // temporary table", then "Installation of system tables failed").
    let tmp = dir.path().join("tmp");
    std::fs::create_dir_all(&tmp)
        .map_err(|e| HarnessError::io(format!("creating {}", tmp.display()), e))?;
    let mut cmd = Command::new(&bins.install_db);
    cmd.current_dir(dir.path())
        .arg("--no-defaults")
        .arg(format!("--datadir={}", data.display()))
        .arg(format!("--tmpdir={}", tmp.display()))
        .args([
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            "--skip-name-resolve",
            // Skip the DNS sanity check of the host name (irrelevant: we only use IPs).
            "--force",
        ]);
    if support::is_root() {
        cmd.arg("--user=root");
    }
    cmd.args(INNODB_SETTINGS);
    let description = support::describe(&cmd);
    support::run_helper(cmd, &description)?;
    if !data.join("mysql").is_dir() {
        return Err(HarnessError::io(
            format!("`{description}` succeeded"),
            io::Error::other(format!("but {} has no `mysql` schema", data.display())),
        ));
    }
    // Kept until process exit (servers copy it); the exit hook removes it.
    let root = dir.keep();
    std::mem::forget(ExitCleanup::register(None, root));
    *template = Some((bins.server.clone(), data.clone()));
    Ok(data)
}

/// Where one server keeps its files.
struct Layout<'a> {
    root: &'a Path,
    data_dir: &'a Path,
    binlog_dir: &'a Path,
    tmp_dir: &'a Path,
    socket_path: &'a Path,
    log: &'a LogFile,
}

fn spawn_mariadbd(
    server: &Path,
    layout: &Layout<'_>,
    port: u16,
    server_id: u32,
    options: &[&str],
) -> Result<Child, HarnessError> {
    let (_, out) = LogFile::open(layout.log.path.clone())?;
    let err = out
        .try_clone()
        .map_err(|e| HarnessError::io("duplicating the log file handle", e))?;
    let mut cmd = Command::new(server);
    cmd.current_dir(layout.root)
        .arg("--no-defaults")
        .arg(format!("--datadir={}", layout.data_dir.display()))
        .arg(format!("--port={port}"))
        .arg("--bind-address=127.0.0.1")
        .arg(format!("--socket={}", layout.socket_path.display()))
        .arg(format!(
            "--pid-file={}",
            layout.root.join("mariadbd.pid").display()
        ))
        .arg(format!("--tmpdir={}", layout.tmp_dir.display()))
        .arg(format!("--log-error={}", layout.log.path.display()))
        .arg(format!(
            "--log-bin={}",
            layout.binlog_dir.join("mysql-bin").display()
        ))
        .arg(format!("--server-id={server_id}"))
        .args([
            "--binlog-format=ROW",
            "--binlog-row-image=FULL",
            "--binlog-row-metadata=FULL",
            "--skip-name-resolve",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_general_ci",
            "--default-time-zone=+00:00",
            "--max-connections=100",
        ])
        .args(INNODB_SETTINGS)
        .args(options);
    if support::is_root() {
        cmd.arg("--user=root");
    }
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    let description = support::describe(&cmd);
    support::spawn_supervised(cmd, libc::SIGKILL)
        .map_err(|e| HarnessError::io(format!("starting `{description}`"), e))
}

/// Polls until the server is ready: our child is alive, it logged "ready for connections",
/// and a client handshake on the port succeeds.
fn wait_until_ready(
    child: &mut Child,
    port: u16,
    log: &LogFile,
    log_offset: u64,
) -> Result<(), Startup> {
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    loop {
        let this_attempt = log.read_from(log_offset);
        if let Some(status) = support::exited(child) {
            if this_attempt.contains("Address already in use")
                || this_attempt.contains("Do you already have another server running on port")
            {
                return Err(Startup::PortTaken);
            }
            return Err(Startup::Failed(HarnessError::ServerExited {
                server: SERVER,
                status,
                log: log.path.clone(),
                log_tail: log.tail(),
            }));
        }
        if this_attempt.contains("ready for connections") && handshake(port).unwrap_or(false) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Startup::Failed(HarnessError::StartupTimeout {
                server: SERVER,
                port,
                timeout: STARTUP_TIMEOUT,
                log: log.path.clone(),
                log_tail: log.tail(),
            }));
        }
        thread::sleep(POLL_INTERVAL);
    }
}

/// Reads the server's initial packet and reports whether it is a protocol-10 handshake
/// (false: an error packet, e.g. too many connections).
fn handshake(port: u16) -> io::Result<bool> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut header = [0u8; 4];
    stream.read_exact(&mut header)?;
    let len = usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload)?;
    Ok(payload.first() == Some(&10))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A port taken by someone else between choosing and binding it is detected from the log
    /// and another port (hence another server id) is tried.
    #[test]
    fn retries_when_the_port_is_taken() {
        let squatter = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let taken = squatter.local_addr().unwrap().port();
        let mut offered = Vec::new();
        let server = MariaDbServer::start_with_ports(
            || {
                let port = if offered.is_empty() {
                    PortReservation::given(taken)
                } else {
                    support::reserve_port()?
                };
                offered.push(port.port());
                Ok(port)
            },
            &[],
        )
        .expect("start after a collision");
        assert_eq!(offered.len(), 2, "ports offered: {offered:?}");
        assert_eq!(offered[0], taken);
        assert_eq!(server.port(), offered[1]);
        assert_eq!(server.server_id(), u32::from(offered[1]));
        assert!(handshake(server.port()).unwrap());
        let log = std::fs::read_to_string(server.log_path()).unwrap();
        assert!(log.contains("Address already in use"), "{log}");
    }
}
