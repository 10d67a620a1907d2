//! The worker's data directory: exclusive ownership and the Kafka cluster id.
//!
//! Layout of `<data-dir>`:
//! * `LOCK` — locked with `flock(LOCK_EX | LOCK_NB)` for as long as the worker
//!   runs; holds the owner's pid (informational only). The file is never
//!   deleted: the lock, not the file's existence, is what counts, and the kernel
//!   drops it when the process exits, however it exits.
//! * `meta.properties` — Java-properties style, like Kafka's:
//!   `version=1` and `cluster.id=<22-char id>`.
//!
//! Invariants:
//! * At most one worker uses a data dir at a time; a second one gets a usage
//!   [`Failure`] (exit 2) before it touches anything else.
//! * The cluster id is generated once, written atomically (temp file, fsync,
//!   rename, fsync dir) while holding the lock, and reused unchanged on every
//!   restart. An existing but unreadable or malformed `meta.properties` is an
//!   error, never silently replaced, because that would change the cluster's
//!   identity.
//! * Cluster ids look like Kafka's `Uuid.randomUuid().toString()`: URL-safe
//!   base64 without padding of a random version-4 UUID, never starting with `-`
//!   and never one of Kafka's reserved ids.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

use crate::failure::Failure;

/// Name of the lock file inside the data dir.
pub const LOCK_FILE: &str = "LOCK";
/// Name of the metadata file inside the data dir.
pub const META_FILE: &str = "meta.properties";
/// Version written to and accepted from `meta.properties`.
const META_VERSION: &str = "1";

/// An opened, exclusively locked data dir. Dropping it releases the lock.
#[derive(Debug)]
pub struct DataDir {
    path: PathBuf,
    cluster_id: String,
    created_cluster_id: bool,
    _lock: File,
}

impl DataDir {
    /// Creates `path` if needed, locks it, and loads or creates the cluster id.
    pub fn open(path: &Path) -> Result<Self, Failure> {
        fs::create_dir_all(path).map_err(|err| {
            Failure::runtime(format!("cannot create data dir {}: {err}", path.display()))
        })?;
        let path = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let lock = lock(&path)?;
        let meta = path.join(META_FILE);
        let (cluster_id, created_cluster_id) = match read_cluster_id(&meta)? {
            Some(id) => (id, false),
            None => {
                let id = new_cluster_id().map_err(|err| {
                    Failure::runtime(format!("cannot generate a cluster id: {err}"))
                })?;
                write_meta(&path, &id).map_err(|err| {
                    Failure::runtime(format!("cannot write {}: {err}", meta.display()))
                })?;
                (id, true)
            }
        };
        Ok(Self {
            path,
            cluster_id,
            created_cluster_id,
            _lock: lock,
        })
    }

    /// The data dir's path (canonicalized when possible).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stable Kafka cluster id stored in `meta.properties`.
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// Whether this open generated the cluster id (first start on this dir).
    pub fn created_cluster_id(&self) -> bool {
        self.created_cluster_id
    }
}

fn lock(dir: &Path) -> Result<File, Failure> {
    let path = dir.join(LOCK_FILE);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|err| Failure::runtime(format!("cannot open {}: {err}", path.display())))?;
    // SAFETY: `flock` only reads the descriptor, which `file` keeps open.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::WouldBlock {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = match holder.trim().parse::<u32>() {
                Ok(pid) => format!(" (pid {pid})"),
                Err(_) => String::new(),
            };
            return Err(Failure::usage(format!(
                "data dir {} is in use by another Headwater worker{holder}; \
                 each worker needs its own --data-dir",
                dir.display()
            )));
        }
        return Err(Failure::runtime(format!(
            "cannot lock {}: {err}",
            path.display()
        )));
    }
    // Informational only; failing to record the pid does not matter.
    let _ = file
        .set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| writeln!(file, "{}", std::process::id()));
    Ok(file)
}

fn read_cluster_id(meta: &Path) -> Result<Option<String>, Failure> {
    let text = match fs::read_to_string(meta) {
        Ok(text) => text,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => {
            return Err(Failure::runtime(format!(
                "cannot read {}: {err}",
                meta.display()
            )))
        }
    };
    parse_meta(&text)
        .map(Some)
        .map_err(|err| Failure::runtime(format!("invalid {}: {err}", meta.display())))
}

/// Extracts and validates `cluster.id` from `meta.properties` text.
fn parse_meta(text: &str) -> Result<String, String> {
    let mut cluster_id = None;
    let mut version = None;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let Some((key, value)) = line.split_once(['=', ':']) else {
            return Err(format!("malformed line '{line}'"));
        };
        match key.trim() {
            "cluster.id" => cluster_id = Some(value.trim().to_owned()),
            "version" => version = Some(value.trim().to_owned()),
            _ => {}
        }
    }
    if let Some(version) = version {
        if version != META_VERSION {
            return Err(format!(
                "unsupported version {version} (expected {META_VERSION})"
            ));
        }
    }
    let id = cluster_id.ok_or_else(|| "missing cluster.id".to_owned())?;
    if !is_valid_cluster_id(&id) {
        return Err(format!(
            "cluster.id '{id}' is not a 22-character Kafka UUID"
        ));
    }
    Ok(id)
}

/// Whether `id` is a Kafka UUID string: 22 URL-safe base64 characters
/// encoding 16 bytes.
pub fn is_valid_cluster_id(id: &str) -> bool {
    id.len() == 22
        && URL_SAFE_NO_PAD
            .decode(id)
            .is_ok_and(|bytes| bytes.len() == 16)
}

/// A fresh cluster id, generated like Kafka's `Uuid.randomUuid()`.
pub fn new_cluster_id() -> io::Result<String> {
    let mut urandom = File::open("/dev/urandom")?;
    loop {
        let mut bytes = [0u8; 16];
        urandom.read_exact(&mut bytes)?;
        if let Some(id) = cluster_id_from_bytes(bytes) {
            return Ok(id);
        }
    }
}

/// Encodes 16 random bytes as a version-4 UUID in Kafka's string form, or
/// `None` if Kafka would reject it (reserved id, or a leading `-`).
fn cluster_id_from_bytes(mut bytes: [u8; 16]) -> Option<String> {
    bytes[6] = (bytes[6] & 0x0f) | 0x40; // version 4
    bytes[8] = (bytes[8] & 0x3f) | 0x80; // IETF variant
    let value = u128::from_be_bytes(bytes);
    // Kafka's reserved ids: ZERO_UUID and METADATA_TOPIC_ID (both impossible
    // with the version bits set, but checked to keep the rule explicit).
    if value == 0 || value == 1 {
        return None;
    }
    let id = URL_SAFE_NO_PAD.encode(bytes);
    (!id.starts_with('-')).then_some(id)
}

fn write_meta(dir: &Path, cluster_id: &str) -> io::Result<()> {
    let tmp = dir.join(format!("{META_FILE}.tmp"));
    {
        let mut file = File::create(&tmp)?;
        write!(
            file,
            "#Headwater worker metadata. Do not edit: the cluster id identifies this data dir.\n\
             version={META_VERSION}\n\
             cluster.id={cluster_id}\n"
        )?;
        file.sync_all()?;
    }
    fs::rename(&tmp, dir.join(META_FILE))?;
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_look_like_kafka_uuids() {
        for _ in 0..200 {
            let id = new_cluster_id().expect("urandom");
            assert_eq!(id.len(), 22, "{id}");
            assert!(is_valid_cluster_id(&id), "{id}");
            assert!(!id.starts_with('-'), "{id}");
            let bytes = URL_SAFE_NO_PAD.decode(&id).expect("base64");
            assert_eq!(bytes[6] >> 4, 4, "version nibble of {id}");
            assert_eq!(bytes[8] >> 6, 0b10, "variant bits of {id}");
        }
    }

    #[test]
    fn leading_dash_is_rejected() {
        // 0xf8 encodes to '-' as the first base64url character.
        assert_eq!(cluster_id_from_bytes([0xf8; 16]), None);
        assert!(cluster_id_from_bytes([0x00; 16]).is_some());
    }

    #[test]
    fn validates_cluster_ids() {
        assert!(is_valid_cluster_id("q1Sh-9_ISia_zwGINzRvyQ"));
        for bad in [
            "",
            "short",
            "q1Sh-9_ISia_zwGINzRvy=",
            "q1Sh-9_ISia_zwGINzRvyQQ",
            "q1Sh+9/ISia_zwGINzRvyQ",
        ] {
            assert!(!is_valid_cluster_id(bad), "{bad}");
        }
    }

    #[test]
    fn parses_meta_properties() {
        assert_eq!(
            parse_meta("#c\nversion=1\ncluster.id = q1Sh-9_ISia_zwGINzRvyQ\nnode.id=3\n"),
            Ok("q1Sh-9_ISia_zwGINzRvyQ".to_owned())
        );
        assert!(parse_meta("version=1\n").is_err());
        assert!(parse_meta("version=2\ncluster.id=q1Sh-9_ISia_zwGINzRvyQ\n").is_err());
        assert!(parse_meta("cluster.id=nope\n").is_err());
        assert!(parse_meta("garbage\n").is_err());
    }

    #[test]
    fn cluster_id_is_stable_and_dir_is_exclusive() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("nested/data");

        let first = DataDir::open(&dir).expect("first open creates the dir");
        assert!(first.created_cluster_id());
        assert!(is_valid_cluster_id(first.cluster_id()));
        assert!(dir.join(LOCK_FILE).exists());
        let lock_pid = fs::read_to_string(dir.join(LOCK_FILE)).expect("lock file");
        assert_eq!(lock_pid.trim(), std::process::id().to_string());

        // flock locks belong to the open file description, so a second open in
        // the same process conflicts just like a second worker would.
        let busy = DataDir::open(&dir).expect_err("locked");
        assert_eq!(busy.code(), 2);
        assert!(
            busy.message()
                .contains("in use by another Headwater worker"),
            "{busy}"
        );
        assert!(
            busy.message()
                .contains(&format!("pid {}", std::process::id())),
            "{busy}"
        );

        let id = first.cluster_id().to_owned();
        drop(first);
        let second = DataDir::open(&dir).expect("lock released on drop");
        assert!(!second.created_cluster_id());
        assert_eq!(second.cluster_id(), id);
        assert!(!dir.join(format!("{META_FILE}.tmp")).exists());
    }

    #[test]
    fn corrupt_meta_is_an_error_not_a_new_id() {
        let tmp = tempfile::tempdir().expect("tempdir");
        fs::write(tmp.path().join(META_FILE), "cluster.id=broken\n").expect("write");
        let err = DataDir::open(tmp.path()).expect_err("corrupt");
        assert_eq!(err.code(), 1);
        assert!(
            err.message().contains("not a 22-character Kafka UUID"),
            "{err}"
        );
        let text = fs::read_to_string(tmp.path().join(META_FILE)).expect("read");
        assert_eq!(text, "cluster.id=broken\n");
    }
}
