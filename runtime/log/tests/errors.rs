//! Disk full and permission denied: the log reports them as [`LogError::DiskFull`] and
//! [`LogError::PermissionDenied`] with the path, the failed operation does not happen, and
//! nothing committed before is lost (readable at once and after a reopen).
//!
//! The errors come from the kernel, not from mocks: permission denied from read-only
//! directories (when the tests run as root, which ignores file modes, the operations run in a
//! thread whose file-system uid is `nobody` via the per-thread `setfsuid`, which also drops
//! root's override); disk full from a segment that is `/dev/full` (every write fails with
//! ENOSPC) and, where the test may mount one, from a tiny tmpfs filled up for real.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use headwater_log::batch::{BatchBuilder, Compression, ProducerFields};
use headwater_log::{Isolation, Log, LogError, LogOptions, TopicConfig};

fn options() -> LogOptions {
    LogOptions {
        background_cleaner: false,
        ..LogOptions::default()
    }
}

fn config(pairs: &[(&str, &str)]) -> TopicConfig {
    let m: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    TopicConfig::from_kafka_configs(&m).unwrap()
}

fn batch(tag: &str, n: usize, value_len: usize) -> BatchBuilder {
    let mut b = BatchBuilder::new(Compression::None, ProducerFields::default());
    let value = vec![b'v'; value_len];
    for i in 0..n {
        b.append(1, Some(format!("{tag}-{i}").as_bytes()), Some(&value), &[]);
    }
    b
}

/// Keys readable in a partition (read_committed, from the log start).
fn keys(log: &Log, topic: &str, partition: u32) -> Vec<String> {
    let mut out = Vec::new();
    let mut offset = log.earliest_offset(topic, partition).unwrap();
    loop {
        let r = log
            .read_with(topic, partition, offset, 1 << 20, Isolation::ReadCommitted)
            .unwrap();
        let Some(next) = r.next_offset().unwrap() else {
            break;
        };
        for rec in r.records(offset).unwrap() {
            out.push(String::from_utf8(rec.key.unwrap()).unwrap());
        }
        offset = next;
    }
    out
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Runs `f` where the directories' modes apply: as root, in a thread whose file-system uid
/// is `nobody` (`setfsuid` is per thread and clears CAP_DAC_OVERRIDE for it).
fn without_privileges<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: plain syscalls without memory arguments.
            unsafe {
                if libc::geteuid() == 0 {
                    libc::setfsuid(65534);
                    assert_eq!(libc::setfsuid(u32::MAX), 65534, "setfsuid took effect");
                }
            }
            f()
        })
        .join()
        .unwrap()
    })
}

#[test]
fn permission_denied_is_reported_and_nothing_committed_is_lost() {
    let root = tempfile::tempdir().unwrap();
    set_mode(root.path(), 0o755);
    let dir = root.path().join("log");
    let log = Log::open(&dir, options()).unwrap();
    log.create_topic("t", 1, config(&[("segment.bytes", "1024")]))
        .unwrap();
    log.append_builder("t", 0, batch("committed", 3, 100))
        .unwrap();
    log.commit().wait().unwrap();
    let committed = keys(&log, "t", 0);
    assert_eq!(committed.len(), 3);

    set_mode(&dir, 0o555);
    set_mode(&dir.join("t-0"), 0o555);
    let (create, append, txn, appended) = without_privileges(|| {
        let create = log.create_topic("u", 2, TopicConfig::default());
        // Appends go to the open segment until one needs a new segment file.
        let mut appended = 0;
        let append = loop {
            match log.append_builder("t", 0, batch("more", 3, 100)) {
                Ok(_) => appended += 3,
                Err(e) => break e,
            }
            assert!(appended < 100, "a roll was due long ago");
        };
        let txn = log.begin_transaction().err();
        (create, append, txn, appended)
    });
    set_mode(&dir, 0o755);
    set_mode(&dir.join("t-0"), 0o755);

    let is_denied = |e: &LogError| {
        matches!(e, LogError::PermissionDenied { .. })
            && e.to_string().contains("permission denied")
    };
    let create = create.unwrap_err();
    assert!(is_denied(&create), "{create}");
    assert!(is_denied(&append), "{append}");
    assert!(
        append.to_string().contains("t-0"),
        "names the path: {append}"
    );
    assert!(txn.as_ref().is_some_and(is_denied), "{txn:?}");
    assert_eq!(log.topics(), ["t"], "the failed creation left no topic");
    assert!(!dir.join("u-0").exists() && !dir.join("u-1").exists());

    // Nothing was lost; the appends that did succeed commit; writing works again.
    log.commit().wait().unwrap();
    assert_eq!(keys(&log, "t", 0).len(), 3 + appended);
    assert_eq!(&keys(&log, "t", 0)[..3], &committed[..]);
    log.append_builder("t", 0, batch("after", 3, 100)).unwrap();
    log.commit().wait().unwrap();
    log.create_topic("u", 2, TopicConfig::default()).unwrap();
    log.close().unwrap();
    let log = Log::open(&dir, options()).unwrap();
    let all = keys(&log, "t", 0);
    assert_eq!(all.len(), 3 + appended + 3);
    assert_eq!(&all[..3], &committed[..]);
    assert_eq!(log.partition_count("u"), Some(2));
}

#[test]
fn disk_full_on_append_is_reported_and_nothing_committed_is_lost() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("log");
    let end = {
        let log = Log::open(&dir, options()).unwrap();
        log.create_topic("t", 2, TopicConfig::default()).unwrap();
        for p in 0..2 {
            log.append_builder("t", p, batch("committed", 5, 50))
                .unwrap();
        }
        log.commit().wait().unwrap();
        let end = log.latest_offset("t", 1).unwrap();
        log.close().unwrap();
        end
    };
    // Partition 1 gets a new, empty active segment (as after a roll) whose writes fail with
    // ENOSPC, like a full disk.
    let active = dir.join(format!("t-1/{end:020}.log"));
    std::os::unix::fs::symlink("/dev/full", &active).unwrap();
    let log = Log::open(&dir, options()).unwrap();
    let err = log
        .append_builder("t", 1, batch("lost", 5, 50))
        .unwrap_err();
    assert!(matches!(err, LogError::DiskFull { .. }), "{err:?}");
    assert!(err.to_string().contains("disk full"), "{err}");
    assert!(err.to_string().contains("t-1"), "names the path: {err}");
    // The log keeps working: other partitions append and commit; the full one still reads.
    log.append_builder("t", 0, batch("more", 5, 50)).unwrap();
    log.commit().wait().unwrap();
    assert_eq!(keys(&log, "t", 1).len(), 5);
    assert_eq!(keys(&log, "t", 0).len(), 10);
    assert_eq!(
        log.latest_offset("t", 1).unwrap(),
        end,
        "the failed batch got no offsets"
    );
    log.close().unwrap();
    drop(log);
    // Space is back: everything committed is there and appends continue at the same offset.
    std::fs::remove_file(&active).unwrap();
    std::fs::write(&active, b"").unwrap();
    let log = Log::open(&dir, options()).unwrap();
    assert_eq!(keys(&log, "t", 1).len(), 5);
    assert_eq!(keys(&log, "t", 0).len(), 10);
    let r = log.append_builder("t", 1, batch("again", 5, 50)).unwrap();
    assert_eq!(r.base_offset, end);
    log.commit().wait().unwrap();
    assert_eq!(keys(&log, "t", 1).len(), 10);
}

/// Unmounts (lazily) when dropped.
struct Mount(CString);

impl Drop for Mount {
    fn drop(&mut self) {
        // SAFETY: a valid NUL-terminated path.
        unsafe {
            libc::umount2(self.0.as_ptr(), libc::MNT_DETACH);
        }
    }
}

/// Mounts a tmpfs of `size` at `at`, if this process may.
fn mount_tmpfs(at: &Path, size: &str) -> Option<Mount> {
    let target = CString::new(at.as_os_str().as_encoded_bytes()).ok()?;
    let fstype = CString::new("tmpfs").ok()?;
    let data = CString::new(format!("size={size}")).ok()?;
    // SAFETY: valid NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            data.as_ptr().cast(),
        )
    };
    (rc == 0).then_some(Mount(target))
}

#[test]
fn disk_full_on_a_real_tiny_filesystem() {
    let root = tempfile::tempdir().unwrap();
    let Some(_mount) = mount_tmpfs(root.path(), "512k") else {
        // Not allowed to mount here (e.g. an unprivileged container): the /dev/full test
        // covers ENOSPC from the kernel, and the classification is checked directly.
        let e = LogError::from_io(Path::new("/x"), io::Error::from_raw_os_error(libc::ENOSPC));
        assert!(matches!(e, LogError::DiskFull { .. }));
        return;
    };
    let dir = root.path().join("log");
    let log = Log::open(&dir, options()).unwrap();
    log.create_topic("t", 1, TopicConfig::default()).unwrap();
    let mut committed = 0;
    let err = loop {
        match log.append_builder("t", 0, batch(&format!("b{committed}"), 8, 2000)) {
            Ok(_) => {
                log.commit().wait().unwrap();
                committed += 8;
            }
            Err(e) => break e,
        }
        assert!(committed < 10_000, "the file system never filled up");
    };
    assert!(matches!(err, LogError::DiskFull { .. }), "{err:?}");
    assert!(committed > 0);
    assert_eq!(keys(&log, "t", 0).len(), committed);
    // A clean close may itself lack the space for its checkpoint; either way nothing is lost.
    match log.close() {
        Ok(()) | Err(LogError::DiskFull { .. }) => {}
        Err(other) => panic!("unexpected error on close: {other:?}"),
    }
    drop(log);
    let log = Log::open(&dir, options()).unwrap();
    assert_eq!(keys(&log, "t", 0).len(), committed);
    assert_eq!(log.latest_offset("t", 0).unwrap(), committed as i64);
}

#[test]
fn io_errors_are_classified() {
    let p = Path::new("/data/t-0");
    let os = io::Error::from_raw_os_error;
    for code in [libc::ENOSPC, libc::EDQUOT] {
        assert!(matches!(
            LogError::from_io(p, os(code)),
            LogError::DiskFull { .. }
        ));
    }
    assert!(matches!(
        LogError::from_io(p, io::Error::from(io::ErrorKind::StorageFull)),
        LogError::DiskFull { .. }
    ));
    for code in [libc::EACCES, libc::EPERM, libc::EROFS] {
        let e = LogError::from_io(p, os(code));
        assert!(matches!(e, LogError::PermissionDenied { .. }), "{e:?}");
        assert!(e.to_string().contains("/data/t-0"));
    }
    assert!(matches!(
        LogError::from_io(p, os(libc::EIO)),
        LogError::Io { .. }
    ));
}
