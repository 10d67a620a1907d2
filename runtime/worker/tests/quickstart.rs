//! `headwater quickstart` and `headwater completions`, run as a user would run them (the real
//! binary, a real PostgreSQL from the harness binaries): the quickstart shows the snapshot's
//! progress, the events of its demo changes (insert, update, delete + tombstone) and how to
//! go on, then removes everything it started; with `--keep` the worker and PostgreSQL stay up
//! and the printed stop command stops them.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn quickstart(extra: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_headwater"))
        .args(["quickstart", "--rows", "3000", "--exit-after", "1"])
        .args(["--rest-port", &free_port().to_string()])
        .args(["--kafka-port", &free_port().to_string()])
        .args(extra)
        .env("NO_COLOR", "1")
        .output()
        .expect("run headwater quickstart");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "quickstart failed\n{stdout}\n{stderr}"
    );
    (stdout, stderr)
}

/// The worker's data directory the quickstart printed.
fn data_dir(stdout: &str) -> PathBuf {
    let line = stdout
        .lines()
        .find(|l| l.contains("worker up:"))
        .expect("worker line");
    PathBuf::from(line.rsplit("data in ").next().unwrap().trim())
}

#[test]
fn quickstart_shows_snapshot_and_change_events_then_cleans_up() {
    let (stdout, _) = quickstart(&[]);
    assert!(stdout.contains("snapshot: "), "{stdout}");
    assert!(stdout.contains("snapshot complete: 3,120 rows"), "{stdout}");
    for op in [
        " c warehouse.customers",
        " c warehouse.orders",
        " u warehouse.orders",
        " u warehouse.products",
        " d warehouse.orders",
    ] {
        assert!(stdout.contains(op), "missing {op:?} in\n{stdout}");
    }
    assert!(stdout.contains("(tombstone)"), "{stdout}");
    assert!(stdout.contains("\"status\":\"paid\""), "{stdout}");
    assert!(stdout.contains("\"amount\":\"15.00\""), "{stdout}");
    for hint in [
        "psql -h 127.0.0.1",
        "curl -s http://127.0.0.1:",
        "headwater consume",
        "kcat -b",
    ] {
        assert!(stdout.contains(hint), "missing {hint:?}");
    }
    let data = data_dir(&stdout);
    assert!(
        !data.parent().unwrap().exists(),
        "{} should be removed",
        data.display()
    );
}

#[test]
fn quickstart_keep_leaves_the_worker_and_postgres_running() {
    let (stdout, _) = quickstart(&["--keep"]);
    let stop = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("stop with:"))
        .expect("stop command")
        .trim()
        .to_owned();
    let data = data_dir(&stdout);
    assert!(data.exists());
    let pids: Vec<i32> = stop
        .strip_prefix("kill ")
        .unwrap()
        .split(" && ")
        .next()
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2, "{stop}");
    for &pid in &pids {
        // SAFETY: signal 0 only checks that the process exists.
        assert_eq!(
            unsafe { libc::kill(pid, 0) },
            0,
            "pid {pid} should be running"
        );
    }
    let status = Command::new("sh").arg("-c").arg(&stop).status().unwrap();
    assert!(status.success(), "{stop}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while pids.iter().any(|&p| unsafe { libc::kill(p, 0) } == 0) {
        assert!(std::time::Instant::now() < deadline, "stopped within 20 s");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(!data.exists());
}

#[test]
fn completions_cover_every_subcommand() {
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(env!("CARGO_BIN_EXE_headwater"))
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success());
        let script = String::from_utf8(out.stdout).unwrap();
        for sub in [
            "worker",
            "connectors",
            "consume",
            "quickstart",
            "completions",
        ] {
            assert!(script.contains(sub), "{shell} completions lack {sub}");
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_headwater"))
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
