//! Plumbing shared by the server harnesses: binary lookup, temporary directories, the
//! unprivileged account used when running as root, port reservation, supervised child
//! processes and clean-up at process exit.
//!
//! Invariants:
//!
//! * every server directory is created under `/tmp` (short paths, so Unix socket paths stay
//!   far below the 107-byte limit; every ancestor is traversable by any user), with mode 0700
//!   and owned by the account the server runs as;
//! * a port handed out by [`reserve_port`] is not handed out again while its
//!   [`PortReservation`] lives, nor for [`PORT_QUARANTINE`] after it is released, so a test
//!   that checks "the port is closed after drop" cannot see another server of this process
//!   reuse it;
//! * every supervised child is forked by one long-lived thread and has a parent-death signal
//!   set, so it dies when the test process dies, whatever the cause; it also leads its own
//!   process group, so stopping it can kill everything it started;
//! * whatever is registered with [`ExitCleanup`] and still registered when the process exits
//!   normally is stopped and its directory removed by an `atexit` handler.

use std::collections::{BTreeMap, HashSet};
use std::ffi::CString;
use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard, Once, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::HarnessError;

/// How long a released port is kept out of circulation.
pub(crate) const PORT_QUARANTINE: Duration = Duration::from_secs(120);

/// How often startup loops poll the child, its files and its port.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// How many lines of a server log go into error messages.
const LOG_TAIL_LINES: usize = 40;

/// Locks a mutex, ignoring poisoning (the data guarded here stays consistent on panic).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------------------------
// Accounts
// ---------------------------------------------------------------------------------------------

/// An account a child process is run as (used only when the test process runs as root).
#[derive(Debug, Clone)]
pub(crate) struct RunAs {
    pub(crate) name: String,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

impl RunAs {
    /// Makes `cmd` run as this account.
    pub(crate) fn apply(&self, cmd: &mut Command) {
        cmd.uid(self.uid).gid(self.gid);
        cmd.env("USER", &self.name).env("LOGNAME", &self.name);
    }
}

/// True when this process runs with effective uid 0.
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Looks a user up in the password database.
fn lookup_user(name: &str) -> Option<RunAs> {
    let cname = CString::new(name).ok()?;
    let mut buf: Vec<libc::c_char> = vec![0; 16 * 1024];
    // SAFETY: an all-zero `passwd` is a valid value (null pointers, zero ids).
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the duration of the call; `buf` outlives the use of
    // the strings `pwd` points into (we only read the ids).
    let rc = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() {
        return None;
    }
    Some(RunAs {
        name: name.to_owned(),
        uid: pwd.pw_uid,
        gid: pwd.pw_gid,
    })
}

/// When running as root, the first existing account of `candidates` (servers that refuse to
/// run as root run as it); `None` when not running as root.
pub(crate) fn unprivileged_account(
    server: &'static str,
    candidates: &[&str],
) -> Result<Option<RunAs>, HarnessError> {
    if !is_root() {
        return Ok(None);
    }
    candidates
        .iter()
        .find_map(|name| lookup_user(name))
        .map(Some)
        .ok_or_else(|| HarnessError::NoUnprivilegedUser {
            server,
            tried: candidates.join(", "),
        })
}

// ---------------------------------------------------------------------------------------------
// Binaries
// ---------------------------------------------------------------------------------------------

/// The directories of `PATH`, in order.
pub(crate) fn path_dirs() -> Vec<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default()
}

/// True when `path` is a regular file (after following links) with an execute bit.
pub(crate) fn is_executable(path: &Path) -> bool {
    fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The first `dir/name` that is executable, trying every name in a directory before the next
/// directory.
pub(crate) fn find_executable(dirs: &[PathBuf], names: &[&str]) -> Option<PathBuf> {
    dirs.iter()
        .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .find(|p| is_executable(p))
}

/// Formats directories for an error message.
pub(crate) fn display_dirs(dirs: &[PathBuf]) -> String {
    let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    shown.join(", ")
}

/// Removes duplicate directories, keeping the first occurrence.
pub(crate) fn dedup_dirs(dirs: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut seen = HashSet::new();
    dirs.into_iter()
        .filter(|d| seen.insert(d.clone()))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Directories and files
// ---------------------------------------------------------------------------------------------

/// The parent of every server directory.
fn temp_base() -> PathBuf {
    let tmp = Path::new("/tmp");
    if tmp.is_dir() {
        tmp.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Creates a fresh mode-0700 directory under `/tmp`, owned by `owner` when given.
pub(crate) fn make_temp_dir(prefix: &str, owner: Option<&RunAs>) -> Result<TempDir, HarnessError> {
    let base = temp_base();
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(&base)
        .map_err(|e| {
            HarnessError::io(
                format!("creating a temporary directory in {}", base.display()),
                e,
            )
        })?;
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700))
        .map_err(|e| HarnessError::io(format!("chmod 0700 {}", dir.path().display()), e))?;
    if let Some(owner) = owner {
        chown(dir.path(), owner)?;
    }
    Ok(dir)
}

/// Gives `path` (not recursively) to `owner`.
pub(crate) fn chown(path: &Path, owner: &RunAs) -> Result<(), HarnessError> {
    std::os::unix::fs::chown(path, Some(owner.uid), Some(owner.gid)).map_err(|e| {
        HarnessError::io(
            format!("chown {}:{} {}", owner.uid, owner.gid, path.display()),
            e,
        )
    })
}

/// Copies the directory tree `from` to `to` (which must not exist); regular files and
/// directories only, modes kept.
pub(crate) fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    fs::create_dir(to)?;
    fs::set_permissions(to, fs::metadata(from)?.permissions())?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() {
            fs::copy(entry.path(), &target)?;
        } else {
            return Err(io::Error::other(format!(
                "unexpected non-regular file {}",
                entry.path().display()
            )));
        }
    }
    Ok(())
}

/// A log file some child appends to, read from a remembered offset.
#[derive(Debug)]
pub(crate) struct LogFile {
    pub(crate) path: PathBuf,
}

impl LogFile {
    /// Creates (or opens for appending) the log and returns it with a handle a child may
    /// write its stdout/stderr to.
    pub(crate) fn open(path: PathBuf) -> Result<(LogFile, fs::File), HarnessError> {
        let file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| HarnessError::io(format!("opening {}", path.display()), e))?;
        Ok((LogFile { path }, file))
    }

    /// The current length of the log (the offset of what comes next).
    pub(crate) fn len(&self) -> u64 {
        fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0)
    }

    /// What was written from `offset` on (lossily decoded).
    pub(crate) fn read_from(&self, offset: u64) -> String {
        let mut bytes = Vec::new();
        if let Ok(mut f) = fs::File::open(&self.path) {
            if f.seek(SeekFrom::Start(offset)).is_ok() {
                let _ = f.read_to_end(&mut bytes);
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The last lines of the log, for error messages.
    pub(crate) fn tail(&self) -> String {
        tail_lines(&self.read_from(0), LOG_TAIL_LINES)
    }
}

/// The last `n` lines of `text`.
pub(crate) fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(n);
    let tail = lines[start..].join("\n");
    if tail.is_empty() {
        "(empty)".to_owned()
    } else {
        tail
    }
}

// ---------------------------------------------------------------------------------------------
// Ports
// ---------------------------------------------------------------------------------------------

#[derive(Default)]
struct PortBook {
    in_use: HashSet<u16>,
    released: BTreeMap<u16, Instant>,
}

fn port_book() -> &'static Mutex<PortBook> {
    static BOOK: OnceLock<Mutex<PortBook>> = OnceLock::new();
    BOOK.get_or_init(Mutex::default)
}

/// A TCP port on 127.0.0.1 that was free when chosen and that no other live server of this
/// process uses. Released (into quarantine) on drop.
#[derive(Debug)]
pub(crate) struct PortReservation(u16);

impl PortReservation {
    pub(crate) fn port(&self) -> u16 {
        self.0
    }

    /// A reservation of a given port, bypassing the book keeping (tests of the retry logic).
    #[cfg(test)]
    pub(crate) fn given(port: u16) -> PortReservation {
        lock(port_book()).in_use.insert(port);
        PortReservation(port)
    }
}

impl Drop for PortReservation {
    fn drop(&mut self) {
        let mut book = lock(port_book());
        book.in_use.remove(&self.0);
        book.released.insert(self.0, Instant::now());
    }
}

/// Picks a free port (bind 127.0.0.1:0, read it, release it) that this process is not using
/// and did not release recently. The caller must still cope with losing a race for it.
pub(crate) fn reserve_port() -> Result<PortReservation, HarnessError> {
    for _ in 0..100 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| HarnessError::io("binding 127.0.0.1:0 to find a free port", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| HarnessError::io("reading the port of 127.0.0.1:0", e))?
            .port();
        drop(listener);
        let mut book = lock(port_book());
        let now = Instant::now();
        book.released
            .retain(|_, at| now.duration_since(*at) < PORT_QUARANTINE);
        if !book.in_use.contains(&port) && !book.released.contains_key(&port) {
            book.in_use.insert(port);
            return Ok(PortReservation(port));
        }
    }
    Err(HarnessError::io(
        "finding a free port",
        io::Error::new(
            io::ErrorKind::AddrInUse,
            "the kernel kept offering ports this process already uses",
        ),
    ))
}

// ---------------------------------------------------------------------------------------------
// Supervised processes
// ---------------------------------------------------------------------------------------------

type SpawnJob = (Command, mpsc::Sender<io::Result<Child>>);

/// The long-lived thread every supervised child is forked from. The parent-death signal of a
/// child fires when the *thread* that forked it exits, so this thread must never exit before
/// the process does (it blocks on its channel, whose sender lives in a static).
fn spawner() -> &'static Mutex<mpsc::Sender<SpawnJob>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnJob>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnJob>();
        thread::Builder::new()
            .name("headwater-harness-spawner".to_owned())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("spawning the harness spawner thread");
        Mutex::new(tx)
    })
}

/// Spawns `cmd` as the leader of a new process group that outlives this process (no
/// parent-death signal); Ctrl-C in this process's terminal does not reach it either.
pub(crate) fn spawn_detached(mut cmd: Command) -> io::Result<Child> {
    cmd.process_group(0);
    cmd.spawn()
}

/// Spawns `cmd` as the leader of a new process group, with `death_signal` delivered to it if
/// this process dies first.
pub(crate) fn spawn_supervised(mut cmd: Command, death_signal: libc::c_int) -> io::Result<Child> {
    let parent = std::process::id();
    cmd.process_group(0);
    // SAFETY: the closure only makes async-signal-safe system calls (prctl, getppid, raise).
    // std runs it after switching uid/gid, so the signal setting survives into exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                death_signal as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl.
            if libc::getppid() as u32 != parent {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        });
    }
    let (reply_tx, reply_rx) = mpsc::channel();
    lock(spawner())
        .send((cmd, reply_tx))
        .map_err(|_| io::Error::other("the harness spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| io::Error::other("the harness spawner thread is gone"))?
}

/// Runs a helper command to completion (supervised), capturing its output; a non-zero exit
/// is an error carrying the output.
pub(crate) fn run_helper(mut cmd: Command, description: &str) -> Result<Output, HarnessError> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = spawn_supervised(cmd, libc::SIGKILL)
        .map_err(|e| HarnessError::io(format!("starting `{description}`"), e))?;
    let output = child
        .wait_with_output()
        .map_err(|e| HarnessError::io(format!("waiting for `{description}`"), e))?;
    if output.status.success() {
        Ok(output)
    } else {
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Err(HarnessError::CommandFailed {
            command: description.to_owned(),
            status: output.status,
            output: tail_lines(&text, 60),
        })
    }
}

/// Formats a command line for messages.
pub(crate) fn describe(cmd: &Command) -> String {
    let mut parts = vec![cmd.get_program().to_string_lossy().into_owned()];
    parts.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    parts.join(" ")
}

/// Sends `signal` to the process `pid` (errors such as "no such process" are ignored).
fn send_signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}

/// Kills the whole process group led by `pid`.
fn kill_group(pid: u32) {
    // SAFETY: killpg has no memory-safety preconditions; the group still exists because its
    // leader has not been reaped yet when this is called.
    unsafe {
        libc::killpg(pid as libc::pid_t, libc::SIGKILL);
    }
}

/// Stops a supervised child: `signal` first, then, if it is still running after `grace`,
/// SIGKILL to its whole process group. Always reaps it.
pub(crate) fn stop_child(child: &mut Child, signal: libc::c_int, grace: Duration) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    send_signal(child.id(), signal);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return,
            Ok(None) => thread::sleep(Duration::from_millis(10)),
        }
    }
    kill_group(child.id());
    let _ = child.wait();
}

/// Waits for a child's exit status if it has exited.
pub(crate) fn exited(child: &mut Child) -> Option<ExitStatus> {
    child.try_wait().ok().flatten()
}

// ---------------------------------------------------------------------------------------------
// Clean-up at process exit
// ---------------------------------------------------------------------------------------------

struct Registered {
    /// A process to stop (with `signal`, then SIGKILL), if any.
    process: Option<(u32, libc::c_int)>,
    /// A directory to remove (after the process is gone).
    dir: PathBuf,
}

fn exit_registry() -> &'static Mutex<BTreeMap<u64, Registered>> {
    static REGISTRY: OnceLock<Mutex<BTreeMap<u64, Registered>>> = OnceLock::new();
    REGISTRY.get_or_init(Mutex::default)
}

/// A registration for clean-up at normal process exit; dropping it cancels the registration
/// (do that once the process is stopped and reaped, and before the directory is removed).
#[derive(Debug)]
pub(crate) struct ExitCleanup(u64);

impl ExitCleanup {
    /// Registers `dir` (and, if given, a process to stop first with `signal`).
    pub(crate) fn register(process: Option<(u32, libc::c_int)>, dir: PathBuf) -> ExitCleanup {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        static HOOK: Once = Once::new();
        HOOK.call_once(|| {
            // SAFETY: registering a plain `extern "C" fn` is always sound.
            unsafe {
                libc::atexit(clean_up_at_exit);
            }
        });
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        lock(exit_registry()).insert(id, Registered { process, dir });
        ExitCleanup(id)
    }
}

impl Drop for ExitCleanup {
    fn drop(&mut self) {
        lock(exit_registry()).remove(&self.0);
    }
}

extern "C" fn clean_up_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let mut registry = match exit_registry().try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            // Held by a thread that will never release it now; leave things as they are
            // (the parent-death signal still stops the processes).
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        let entries = std::mem::take(&mut *registry);
        drop(registry);
        for entry in entries.values() {
            if let Some((pid, signal)) = entry.process {
                stop_pid(pid, signal, Duration::from_secs(5));
            }
        }
        for entry in entries.values() {
            let _ = fs::remove_dir_all(&entry.dir);
        }
    });
}

/// Like [`stop_child`] for a bare pid (used at exit, when the `Child` is unreachable).
fn stop_pid(pid: u32, signal: libc::c_int, grace: Duration) {
    let reap = |flags| {
        let mut status = 0;
        // SAFETY: waitpid only writes to `status`.
        unsafe { libc::waitpid(pid as libc::pid_t, &mut status, flags) }
    };
    send_signal(pid, signal);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        let r = reap(libc::WNOHANG);
        if r != 0 {
            return; // reaped, or not our child any more
        }
        thread::sleep(Duration::from_millis(10));
    }
    kill_group(pid);
    reap(0);
}

/// Whether something accepts TCP connections on 127.0.0.1:`port`.
pub(crate) fn accepts_connections(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        Duration::from_millis(200),
    )
    .is_ok()
}

/// Polls until `ready()` holds (the server `server`, started as `child` to listen on `port`
/// and log to `log`); fails when the process exits first or after `timeout`, with the log's
/// tail in the error.
pub(crate) fn wait_until_serving(
    child: &mut Child,
    server: &'static str,
    port: u16,
    log: &LogFile,
    timeout: Duration,
    mut ready: impl FnMut() -> bool,
) -> Result<(), HarnessError> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(status) = exited(child) {
            return Err(HarnessError::ServerExited {
                server,
                status,
                log: log.path.clone(),
                log_tail: log.tail(),
            });
        }
        if ready() {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err(HarnessError::StartupTimeout {
                server,
                port,
                timeout,
                log: log.path.clone(),
                log_tail: log.tail(),
            });
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// Finds the server executable `name` in `preferred` (searched first), else on `PATH`.
pub(crate) fn find_server_binary(
    preferred: Option<PathBuf>,
    name: &'static str,
    what: &'static str,
    install_hint: &'static str,
) -> Result<PathBuf, HarnessError> {
    let mut dirs: Vec<PathBuf> = preferred.into_iter().collect();
    dirs.extend(path_dirs());
    let dirs = dedup_dirs(dirs);
    find_executable(&dirs, &[name]).ok_or_else(|| HarnessError::BinaryNotFound {
        what,
        names: name.into(),
        searched: display_dirs(&dirs),
        install_hint,
    })
}

/// Standard output and error handles that append to `log`.
pub(crate) fn log_outputs(log: &LogFile) -> Result<(Stdio, Stdio), HarnessError> {
    let out = fs::OpenOptions::new()
        .append(true)
        .open(&log.path)
        .map_err(|e| HarnessError::io(format!("opening {}", log.path.display()), e))?;
    let err = out
        .try_clone()
        .map_err(|e| HarnessError::io("duplicating the log handle".to_owned(), e))?;
    Ok((Stdio::from(out), Stdio::from(err)))
}
