//! [`PostgresServer`]: a private, throwaway PostgreSQL cluster configured for logical
//! replication, for tests.
//!
//! Invariants:
//!
//! * every server is a fresh `initdb` (UTF8, C locale, superuser `postgres`, trust
//!   authentication) in its own temporary directory, which also holds its Unix socket and its
//!   log; nothing outside that directory is written;
//! * the server listens on 127.0.0.1 only, with `wal_level=logical`, 20 replication slots and
//!   20 WAL senders, and trusts every local and 127.0.0.1 connection, replication included
//!   (a server started with [`PostgresServer::start_with_tls`] has `ssl=on` and trusts TCP
//!   connections of roles other than `postgres` only over TLS);
//! * a handle exists only once the server answered a real protocol handshake on its port and
//!   its `postmaster.pid` says it is ready (so a collision with someone else's listener on the
//!   same port can never be mistaken for success);
//! * when the test process runs as root, `initdb` and `postgres` run as the `postgres`
//!   account (or `nobody`), which owns the temporary directory;
//! * dropping the handle stops the server (immediate shutdown, then SIGKILL of its process
//!   group) and only then removes the directory.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::support::{self, ExitCleanup, LogFile, PortReservation, RunAs, POLL_INTERVAL};
use super::{check_database_name, HarnessError};

const SERVER: &str = "PostgreSQL";
const INSTALL_HINT: &str = "apt-get install -y postgresql";
/// The superuser `initdb` creates.
const SUPERUSER: &str = "postgres";
/// How long the server may take to accept connections.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an immediate shutdown may take before the process group is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How many ports are tried when the chosen one is taken before the server binds it.
const PORT_ATTEMPTS: u32 = 5;
/// Environment variable naming a directory holding `initdb` and `postgres`; it overrides the
/// lookup.
const BIN_DIR_ENV: &str = "HEADWATER_PG_BINDIR";

/// A running PostgreSQL server owned by a test. Dropping it stops the server and deletes its
/// data.
///
/// ```no_run
/// # async fn demo() -> Result<(), headwater_tests::HarnessError> {
/// let pg = headwater_tests::PostgresServer::start()?;
/// pg.create_database("app").await?;
/// let client = pg.connect("app").await?;
/// client.batch_execute("CREATE TABLE t (id int PRIMARY KEY)").await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct PostgresServer {
    child: Child,
    port: PortReservation,
    bin_dir: PathBuf,
    data_dir: PathBuf,
    socket_dir: PathBuf,
    log: LogFile,
    /// Unregistered (after the child is reaped) before `dir` is removed.
    _exit_cleanup: ExitCleanup,
    /// Set by [`Self::keep`]: dropping the handle leaves the server running.
    kept: bool,
    /// Declared last: removed after everything above is dropped.
    dir: TempDir,
}

impl PostgresServer {
    /// Initialises and starts a new server, blocking until it accepts connections (at most
    /// ~30 s, usually 2–3 s).
    ///
    /// Blocking: from async code call it once at the start of a test (it does not need a
    /// runtime), or through `tokio::task::spawn_blocking`.
    pub fn start() -> Result<PostgresServer, HarnessError> {
        Self::start_with_ports(support::reserve_port, false, None)
    }

    /// As [`Self::start`], with TLS on (`ssl=on`) using the PEM certificate (chain) and key
    /// given. Over TCP, only the superuser `postgres` may connect without TLS (the harness's
    /// own connections); every other role must use TLS (`hostssl` lines), so a test that
    /// connects as another role proves its connection is encrypted.
    pub fn start_with_tls(cert_pem: &str, key_pem: &str) -> Result<PostgresServer, HarnessError> {
        Self::start_with_ports(
            support::reserve_port,
            false,
            Some(ServerTls {
                cert_pem: cert_pem.to_owned(),
                key_pem: key_pem.to_owned(),
            }),
        )
    }

    /// As [`Self::start`], but the server is not tied to this process: it gets no
    /// parent-death signal, so [`Self::keep`] can leave it running after this process exits
    /// (`headwater quickstart --keep`). Until `keep` is called, dropping the handle still
    /// stops it and removes its directory.
    pub fn start_detachable() -> Result<PostgresServer, HarnessError> {
        Self::start_with_ports(support::reserve_port, true, None)
    }

    /// Leaves a server started with [`Self::start_detachable`] running: its directory is kept
    /// and nothing stops it at exit. Returns the directory (data, socket and log) and the
    /// postmaster's pid; stop it with `kill -INT <pid>` and remove the directory.
    pub fn keep(mut self) -> (PathBuf, u32) {
        self.kept = true;
        self.dir.disable_cleanup(true);
        (self.dir.path().to_path_buf(), self.child.id())
    }

    /// [`Self::start`] taking its candidate ports from `next_port`.
    fn start_with_ports(
        mut next_port: impl FnMut() -> Result<PortReservation, HarnessError>,
        detachable: bool,
        tls: Option<ServerTls>,
    ) -> Result<PostgresServer, HarnessError> {
        let bin_dir = find_bin_dir()?;
        let run_as = support::unprivileged_account(SERVER, &["postgres", "nobody"])?;
        let dir = support::make_temp_dir("headwater-pg-", run_as.as_ref())?;
        let data_dir = dir.path().join("data");
        let socket_dir = dir.path().to_path_buf();

        initdb(&bin_dir, dir.path(), &data_dir, run_as.as_ref())?;
        write_hba(&data_dir, run_as.as_ref(), tls.is_some())?;
        if let Some(tls) = &tls {
            write_tls_files(&data_dir, run_as.as_ref(), tls)?;
        }

        let (log, _) = LogFile::open(dir.path().join("postgres.log"))?;
        if let Some(owner) = &run_as {
            support::chown(&log.path, owner)?;
        }

        let mut last_collision_tail = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = next_port()?;
            let log_offset = log.len();
            let mut child = spawn_postgres(
                &bin_dir,
                dir.path(),
                &data_dir,
                port.port(),
                &log,
                run_as.as_ref(),
                SpawnOptions {
                    detachable,
                    tls: tls.is_some(),
                },
            )?;
            match wait_until_ready(&mut child, port.port(), &data_dir, &log, log_offset) {
                Ok(()) => {
                    let exit_cleanup = ExitCleanup::register(
                        Some((child.id(), libc::SIGQUIT)),
                        dir.path().to_path_buf(),
                    );
                    return Ok(PostgresServer {
                        child,
                        port,
                        bin_dir,
                        data_dir,
                        socket_dir,
                        log,
                        _exit_cleanup: exit_cleanup,
                        kept: false,
                        dir,
                    });
                }
                Err(Startup::PortTaken) => {
                    support::stop_child(&mut child, libc::SIGQUIT, STOP_GRACE);
                    last_collision_tail = log.tail();
                }
                Err(Startup::Failed(e)) => {
                    support::stop_child(&mut child, libc::SIGQUIT, STOP_GRACE);
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

    /// The superuser every connection helper uses: `postgres` (no password).
    pub fn user(&self) -> &'static str {
        SUPERUSER
    }

    /// A `tokio_postgres` / libpq key-value connection string for database `db`:
    /// `host=127.0.0.1 port=P user=postgres dbname=db`.
    pub fn connection_string(&self, db: &str) -> String {
        format!(
            "host={} port={} user={} dbname={}",
            self.host(),
            self.port(),
            SUPERUSER,
            db
        )
    }

    /// The same as a URL: `postgresql://postgres@127.0.0.1:P/db`.
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgresql://{}@{}:{}/{}",
            SUPERUSER,
            self.host(),
            self.port(),
            db
        )
    }

    /// The server's private temporary directory (data, socket, logs); removed on drop.
    pub fn root_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The cluster's data directory (`PGDATA`).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The directory holding the server's Unix socket (`.s.PGSQL.<port>`).
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// The directory the server's binaries were taken from.
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// The server's log file (stdout and stderr of `postgres`).
    pub fn log_path(&self) -> &Path {
        &self.log.path
    }

    /// The last lines of the server log (handy in assertion messages).
    pub fn log_tail(&self) -> String {
        self.log.tail()
    }

    /// The process id of the postmaster.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Connects to database `db` as `postgres`; the connection task is spawned on the current
    /// tokio runtime (so this must be awaited inside one).
    pub async fn connect(&self, db: &str) -> Result<tokio_postgres::Client, HarnessError> {
        let (client, connection) =
            tokio_postgres::connect(&self.connection_string(db), tokio_postgres::NoTls).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }

    /// Creates database `name` (1–63 ASCII letters, digits or `_`; case is kept).
    pub async fn create_database(&self, name: &str) -> Result<(), HarnessError> {
        check_database_name(name)?;
        let client = self.connect("postgres").await?;
        client
            .batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .await?;
        Ok(())
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        // SIGQUIT = immediate shutdown: the postmaster stops its backends and removes its
        // shared memory; nothing needs to be durable.
        support::stop_child(&mut self.child, libc::SIGQUIT, STOP_GRACE);
    }
}

/// Why one startup attempt did not produce a server.
enum Startup {
    /// Someone else bound the port first; try another.
    PortTaken,
    /// Anything else; give up.
    Failed(HarnessError),
}

/// Finds a directory holding both `initdb` and `postgres`: `$HEADWATER_PG_BINDIR`, then
/// `PATH`, then `/usr/lib/postgresql/<version>/bin`, highest version first.
fn find_bin_dir() -> Result<PathBuf, HarnessError> {
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::var_os(BIN_DIR_ENV) {
        candidates.push(PathBuf::from(dir));
    }
    candidates.extend(support::path_dirs());
    candidates.extend(debian_bin_dirs());
    let candidates = support::dedup_dirs(candidates);
    candidates
        .iter()
        .find(|d| {
            support::is_executable(&d.join("initdb")) && support::is_executable(&d.join("postgres"))
        })
        .cloned()
        .ok_or_else(|| HarnessError::BinaryNotFound {
            what: "PostgreSQL server binaries",
            names: "initdb and postgres (in the same directory)".to_owned(),
            searched: support::display_dirs(&candidates),
            install_hint: INSTALL_HINT,
        })
}

/// `/usr/lib/postgresql/*/bin`, highest version first.
fn debian_bin_dirs() -> Vec<PathBuf> {
    let mut versions: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let version: Option<Vec<u32>> = name.split('.').map(|p| p.parse().ok()).collect();
            Some((version?, entry.path().join("bin")))
        })
        .collect();
    versions.sort_by(|a, b| b.0.cmp(&a.0));
    versions.into_iter().map(|(_, dir)| dir).collect()
}

/// A command for one of the server binaries, run as `run_as` (if any) from `cwd`, with a
/// clean PostgreSQL environment.
fn pg_command(bin_dir: &Path, program: &str, cwd: &Path, run_as: Option<&RunAs>) -> Command {
    let mut cmd = Command::new(bin_dir.join(program));
    cmd.current_dir(cwd);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PG") {
            cmd.env_remove(key);
        }
    }
    cmd.env("LC_ALL", "C");
    if let Some(account) = run_as {
        account.apply(&mut cmd);
    }
    cmd
}

fn initdb(
    bin_dir: &Path,
    cwd: &Path,
    data_dir: &Path,
    run_as: Option<&RunAs>,
) -> Result<(), HarnessError> {
    let mut cmd = pg_command(bin_dir, "initdb", cwd, run_as);
    cmd.arg("-D")
        .arg(data_dir)
        .args([
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--no-locale",
        ])
        .arg("--no-sync");
    let description = support::describe(&cmd);
    support::run_helper(cmd, &description).map(|_| ())
}

/// The server's TLS certificate and key (PEM).
struct ServerTls {
    cert_pem: String,
    key_pem: String,
}

/// Writes `server.crt` and `server.key` into the data directory, owned by the server's
/// account with the key readable by it alone (the server refuses a key others can read).
fn write_tls_files(
    data_dir: &Path,
    run_as: Option<&RunAs>,
    tls: &ServerTls,
) -> Result<(), HarnessError> {
    use std::os::unix::fs::PermissionsExt;
    for (name, text) in [("server.crt", &tls.cert_pem), ("server.key", &tls.key_pem)] {
        let path = data_dir.join(name);
        std::fs::write(&path, text)
            .map_err(|e| HarnessError::io(format!("writing {}", path.display()), e))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| HarnessError::io(format!("chmod {}", path.display()), e))?;
        if let Some(owner) = run_as {
            support::chown(&path, owner)?;
        }
    }
    Ok(())
}

/// Replaces `pg_hba.conf`: trust everything on the socket and on 127.0.0.1, replication
/// included. With `tls_only`, TCP connections of roles other than `postgres` must use TLS.
fn write_hba(data_dir: &Path, run_as: Option<&RunAs>, tls_only: bool) -> Result<(), HarnessError> {
    let path = data_dir.join("pg_hba.conf");
    let contents = if tls_only {
        "\
# Written by headwater-tests: a throwaway test cluster; over TCP only postgres may skip TLS.
# TYPE     DATABASE        USER            ADDRESS                 METHOD
local      all             all                                     trust
local      replication     all                                     trust
hostnossl  all             postgres        127.0.0.1/32            trust
hostnossl  replication     postgres        127.0.0.1/32            trust
hostssl    all             all             127.0.0.1/32            trust
hostssl    replication     all             127.0.0.1/32            trust
"
    } else {
        "\
# Written by headwater-tests: a throwaway test cluster that trusts every local client.
# TYPE  DATABASE        USER            ADDRESS                 METHOD
local   all             all                                     trust
local   replication     all                                     trust
host    all             all             127.0.0.1/32            trust
host    replication     all             127.0.0.1/32            trust
"
    };
    std::fs::write(&path, contents)
        .map_err(|e| HarnessError::io(format!("writing {}", path.display()), e))?;
    if let Some(owner) = run_as {
        support::chown(&path, owner)?;
    }
    Ok(())
}

/// How [`spawn_postgres`] starts the server.
#[derive(Clone, Copy)]
struct SpawnOptions {
    /// Without a parent-death signal (see [`PostgresServer::start_detachable`]).
    detachable: bool,
    /// With `ssl=on` and the data directory's `server.crt`/`server.key`.
    tls: bool,
}

fn spawn_postgres(
    bin_dir: &Path,
    cwd: &Path,
    data_dir: &Path,
    port: u16,
    log: &LogFile,
    run_as: Option<&RunAs>,
    how: SpawnOptions,
) -> Result<Child, HarnessError> {
    let (_, out) = LogFile::open(log.path.clone())?;
    let err = out
        .try_clone()
        .map_err(|e| HarnessError::io("duplicating the log file handle", e))?;
    let mut cmd = pg_command(bin_dir, "postgres", cwd, run_as);
    cmd.arg("-D").arg(data_dir);
    let settings = [
        "wal_level=logical".to_owned(),
        "max_replication_slots=20".to_owned(),
        "max_wal_senders=20".to_owned(),
        "listen_addresses=127.0.0.1".to_owned(),
        format!("port={port}"),
        format!("unix_socket_directories={}", cwd.display()),
        "fsync=off".to_owned(),
        "synchronous_commit=off".to_owned(),
        "full_page_writes=off".to_owned(),
        "shared_buffers=32MB".to_owned(),
        "max_connections=100".to_owned(),
        "timezone=UTC".to_owned(),
        "log_timezone=UTC".to_owned(),
        "logging_collector=off".to_owned(),
    ];
    let tls_settings = [
        "ssl=on".to_owned(),
        "ssl_cert_file=server.crt".to_owned(),
        "ssl_key_file=server.key".to_owned(),
    ];
    let tls_settings: &[String] = if how.tls { &tls_settings } else { &[] };
    for setting in settings.iter().chain(tls_settings) {
        cmd.arg("-c").arg(setting);
    }
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    let description = support::describe(&cmd);
    let spawned = if how.detachable {
        support::spawn_detached(cmd)
    } else {
        // SIGQUIT on parent death: immediate shutdown, which also releases shared memory.
        support::spawn_supervised(cmd, libc::SIGQUIT)
    };
    spawned.map_err(|e| HarnessError::io(format!("starting `{description}`"), e))
}

/// Polls until the server is ready: our child is alive, its `postmaster.pid` says "ready" for
/// our port, and a startup handshake on the port succeeds.
fn wait_until_ready(
    child: &mut Child,
    port: u16,
    data_dir: &Path,
    log: &LogFile,
    log_offset: u64,
) -> Result<(), Startup> {
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    loop {
        if let Some(status) = support::exited(child) {
            let this_attempt = log.read_from(log_offset);
            if this_attempt.contains("Address already in use")
                || this_attempt.contains("could not create any TCP/IP sockets")
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
        if pid_file_ready(data_dir, port) && handshake(port).unwrap_or(false) {
            // The handshake could in theory have reached another listener if ours died in
            // between; make sure ours is still there.
            if support::exited(child).is_none() {
                return Ok(());
            }
            continue;
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

/// True when `postmaster.pid` names `port` and reports the "ready" status (the check
/// `pg_ctl` uses; lines: pid, data dir, start time, port, socket dir, listen address, shared
/// memory key, status).
fn pid_file_ready(data_dir: &Path, port: u16) -> bool {
    let Ok(text) = std::fs::read_to_string(data_dir.join("postmaster.pid")) else {
        return false;
    };
    let lines: Vec<&str> = text.lines().collect();
    lines.len() >= 8 && lines[3].trim() == port.to_string() && lines[7].trim() == "ready"
}

/// Performs a protocol-3.0 startup as `postgres` on database `postgres` and reports whether
/// the server reached ReadyForQuery (false: it answered with an error, e.g. "starting up").
fn handshake(port: u16) -> io::Result<bool> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;

    let mut body = Vec::new();
    body.extend_from_slice(&196_608i32.to_be_bytes()); // protocol 3.0
    for (key, value) in [("user", SUPERUSER), ("database", "postgres")] {
        body.extend_from_slice(key.as_bytes());
        body.push(0);
        body.extend_from_slice(value.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut message = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    message.extend_from_slice(&body);
    stream.write_all(&message)?;

    loop {
        let mut header = [0u8; 5];
        stream.read_exact(&mut header)?;
        let len = i32::from_be_bytes([header[1], header[2], header[3], header[4]]);
        let len = usize::try_from(len - 4)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad message length"))?;
        let mut payload = vec![0u8; len];
        stream.read_exact(&mut payload)?;
        match header[0] {
            b'R' if payload.get(..4) == Some(&[0, 0, 0, 0]) => {} // AuthenticationOk
            b'R' => {
                return Err(io::Error::other(
                    "the server asked for a password (pg_hba.conf not in effect?)",
                ))
            }
            b'S' | b'K' | b'N' => {} // ParameterStatus, BackendKeyData, Notice
            b'Z' => {
                let _ = stream.write_all(&[b'X', 0, 0, 0, 4]); // Terminate
                return Ok(true);
            }
            b'E' => return Ok(false),
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("unexpected message type {other:#x}"),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A port taken by someone else between choosing and binding it is detected from the log
    /// and another port is tried; the squatter is never mistaken for our server.
    #[test]
    fn retries_when_the_port_is_taken() {
        let squatter = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let taken = squatter.local_addr().unwrap().port();
        let mut offered = Vec::new();
        let server = PostgresServer::start_with_ports(
            || {
                let port = if offered.is_empty() {
                    PortReservation::given(taken)
                } else {
                    support::reserve_port()?
                };
                offered.push(port.port());
                Ok(port)
            },
            false,
            None,
        )
        .expect("start after a collision");
        assert_eq!(offered.len(), 2, "ports offered: {offered:?}");
        assert_eq!(offered[0], taken);
        assert_eq!(server.port(), offered[1]);
        assert!(handshake(server.port()).unwrap());
        let log = std::fs::read_to_string(server.log_path()).unwrap();
        assert!(log.contains("Address already in use"), "{log}");
    }
}
