//! The real Kafka clients the integration tests run: kcat (Debian package) and confluent-kafka
//! (PyPI, in a cached virtualenv), plus a command runner with a time limit. Std and libc only,
//! so the worker's tests include this file too.
//!
//! The clients are installed by `scripts/install-deps`; when the virtualenv is missing a test
//! creates it (under a file lock, so parallel tests install once). A missing `kcat` fails the
//! test with the command to run, never skips it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

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

/// The cached virtualenv with confluent-kafka and its Avro/Schema Registry extras
/// (`HEADWATER_TEST_VENV`, default
/// `/var/tmp/headwater-test-venv`); created on first use.
pub fn python() -> PathBuf {
    let venv = std::env::var_os("HEADWATER_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/headwater-test-venv"));
    let python = venv.join("bin/python");
    let ready = |python: &Path| {
        Command::new(python)
            .args(["-c", "import confluent_kafka.schema_registry.avro"])
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
            .args(["install", "--quiet", "confluent-kafka[avro,schemaregistry]"])
            .status()
            .expect("pip install confluent-kafka[avro,schemaregistry]");
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
