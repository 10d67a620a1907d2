//! The log: topics of partitions in one data directory, with group commit and readers.
//!
//! Durability contract:
//! - [`Log::append`] writes a batch to its partition's active segment and returns its offsets
//!   at once; the data is *not yet durable* and is invisible to readers;
//! - [`Log::commit`] returns a [`CommitTicket`] that resolves once everything appended before
//!   the call is fsynced. One flusher thread serves all commits: concurrent commits share one
//!   fsync round (group commit) covering every dirty partition of every topic;
//! - readers see a partition only up to its high watermark, the end of the last durable flush,
//!   so nothing a reader was ever given can be lost by a crash, and offsets handed out never
//!   change meaning;
//! - an fsync failure poisons the log: every later append or commit fails (retrying an fsync
//!   after failure can report success for data the kernel dropped).
//!
//! A lock file (`flock`) keeps a second process off the same directory.
//!
//! Retention and compaction (see `cleaner.rs`) run in a background thread owned by the log
//! (started by [`Log::open`], stopped by [`Log::close`] or when the last handle is dropped),
//! or on demand through [`Log::run_cleaner_once`].
//!
//! I/O errors are classified: a full disk or quota is [`LogError::DiskFull`], a permission
//! problem or read-only file system is [`LogError::PermissionDenied`], each naming the path.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::batch::{control_batch, BatchBuilder, BatchError, ControlType, ProducerFields};
use crate::cleaner::{CleanError, CleanerStats, CompactionInput, SwapStep};
use crate::config::{FlushPolicy, LogOptions, TopicConfig};
use crate::partition::{sync_dir, Partition};
use crate::segment::{read_full_at, SegmentError};
use crate::txn::AbortedTxn;

/// Errors of the log.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("I/O error on {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    /// The file system is full (or a quota is exhausted). Nothing committed before is lost;
    /// the failed operation did not happen. Free space and retry.
    #[error("disk full: cannot write {path} ({source}); data committed before is intact, free space and retry")]
    DiskFull { path: PathBuf, source: io::Error },
    /// The process may not write (or read) a file or directory of the log, or the file
    /// system is read-only.
    #[error(
        "permission denied on {path} ({source}); check the owner and mode of the log directory"
    )]
    PermissionDenied { path: PathBuf, source: io::Error },
    #[error("the data directory {0} is in use by another process (lock file held)")]
    Locked(PathBuf),
    #[error("topic {0} already exists")]
    TopicExists(String),
    #[error("topic {topic} exists with {existing} partitions, not {requested}")]
    PartitionCountMismatch {
        topic: String,
        existing: u32,
        requested: u32,
    },
    #[error("unknown topic {0}")]
    UnknownTopic(String),
    #[error("topic {topic} has no partition {partition}")]
    UnknownPartition { topic: String, partition: u32 },
    #[error("invalid topic name {name:?}: {reason}")]
    InvalidTopicName { name: String, reason: String },
    #[error("invalid topic config: {}", .0.iter().map(|(k, m)| format!("{k}: {m}")).collect::<Vec<_>>().join("; "))]
    InvalidConfig(Vec<(String, String)>),
    #[error("a topic needs at least one partition")]
    NoPartitions,
    #[error("offset {offset} is out of range for {topic}-{partition} (log start {log_start}, end {log_end})")]
    OffsetOutOfRange {
        topic: String,
        partition: u32,
        offset: i64,
        log_start: i64,
        log_end: i64,
    },
    #[error("invalid batch: {0}")]
    InvalidBatch(#[from] BatchError),
    #[error("corrupt data in {topic}-{partition}: {source}")]
    Corrupt {
        topic: String,
        partition: u32,
        source: SegmentError,
    },
    #[error("the log failed earlier and accepts no more writes: {0}")]
    Poisoned(String),
    #[error("the log is closed")]
    Closed,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> LogError + '_ {
    move |source| LogError::from_io(path, source)
}

/// Whether an I/O error says the file system (or the user's quota) is full.
pub(crate) fn is_out_of_space(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
        || matches!(
            e.kind(),
            io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
        )
}

impl LogError {
    /// Classifies an I/O error on `path`: disk full, permission denied, or other.
    pub fn from_io(path: &Path, source: io::Error) -> LogError {
        let path = path.to_owned();
        let disk_full = is_out_of_space(&source);
        let denied = matches!(
            source.raw_os_error(),
            Some(libc::EACCES | libc::EPERM | libc::EROFS)
        ) || matches!(
            source.kind(),
            io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
        );
        if disk_full {
            LogError::DiskFull { path, source }
        } else if denied {
            LogError::PermissionDenied { path, source }
        } else {
            LogError::Io { path, source }
        }
    }

    fn from_segment(topic: &str, partition: u32, dir: &Path, source: SegmentError) -> LogError {
        match source {
            SegmentError::Io(e) => LogError::from_io(dir, e),
            source => LogError::Corrupt {
                topic: topic.to_owned(),
                partition,
                source,
            },
        }
    }
}

/// Offsets assigned to an appended batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendResult {
    pub base_offset: i64,
    pub last_offset: i64,
}

/// Which records a reader may see (Kafka's `isolation.level`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Everything durable, including data of open or aborted transactions.
    ReadUncommitted,
    /// Only up to the last stable offset; aborted transactions are listed for filtering.
    #[default]
    ReadCommitted,
}

/// Bytes read from a partition: whole batches, exactly as stored.
#[derive(Clone, Debug, Default)]
pub struct ReadResult {
    pub bytes: Vec<u8>,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// For read_committed reads: aborted transactions overlapping the returned range (as in a
    /// Kafka Fetch response); their batches must be skipped, as must control batches.
    pub aborted: Vec<AbortedTxn>,
}

/// One record visible to a reader, with owned bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedRecord {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl ReadResult {
    /// The offset after the last batch returned (`None` when nothing was returned).
    pub fn next_offset(&self) -> Result<Option<i64>, LogError> {
        let mut pos = 0;
        let mut next = None;
        while pos < self.bytes.len() {
            let header = crate::batch::BatchHeader::parse(&self.bytes[pos..])?;
            next = Some(header.next_offset());
            pos += header.total_size();
        }
        Ok(next)
    }

    /// Calls `each` for the data records at or after `from_offset` (as in
    /// [`ReadResult::records`]) without copying them; stops at the first error `each` returns.
    pub fn for_each_record<E: From<LogError>>(
        &self,
        from_offset: i64,
        mut each: impl FnMut(crate::batch::RecordView<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut pos = 0;
        while pos < self.bytes.len() {
            let decoded =
                crate::batch::DecodedBatch::decode(&self.bytes[pos..]).map_err(LogError::from)?;
            let h = decoded.header;
            pos += h.total_size();
            if h.is_control() || h.next_offset() <= from_offset {
                continue;
            }
            if h.is_transactional()
                && self.aborted.iter().any(|a| {
                    a.producer_id == h.producer_id
                        && a.first_offset <= h.base_offset
                        && h.base_offset < a.last_offset
                })
            {
                continue;
            }
            for r in decoded.records().map_err(LogError::from)? {
                if r.offset >= from_offset {
                    each(r)?;
                }
            }
        }
        Ok(())
    }

    /// The data records at or after `from_offset`, skipping control batches and (for
    /// read_committed reads) aborted transactions.
    pub fn records(&self, from_offset: i64) -> Result<Vec<OwnedRecord>, LogError> {
        let mut out = Vec::new();
        self.for_each_record(from_offset, |r| -> Result<(), LogError> {
            out.push(OwnedRecord {
                offset: r.offset,
                timestamp: r.timestamp,
                key: r.key.map(<[u8]>::to_vec),
                value: r.value.map(<[u8]>::to_vec),
                headers: r
                    .headers
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), v.map(<[u8]>::to_vec)))
                    .collect(),
            });
            Ok(())
        })?;
        Ok(out)
    }
}

/// A transaction over any partitions of any topics. Dropping it unfinished aborts it.
pub struct Transaction {
    log: Log,
    producer_id: i64,
    touched: Vec<(String, u32)>,
    finished: bool,
}

impl Transaction {
    pub fn producer_id(&self) -> i64 {
        self.producer_id
    }

    /// The producer fields every batch of this transaction must carry.
    pub fn producer_fields(&self) -> ProducerFields {
        ProducerFields {
            producer_id: self.producer_id,
            producer_epoch: 0,
            base_sequence: -1,
            transactional: true,
        }
    }

    /// Appends a batch built with [`Transaction::producer_fields`].
    pub fn append(
        &mut self,
        topic: &str,
        partition: u32,
        mut batch: Vec<u8>,
    ) -> Result<AppendResult, LogError> {
        self.append_slice(topic, partition, &mut batch)
    }

    /// [`Transaction::append`] of a batch in a caller's buffer (its base offset is set in place).
    pub fn append_slice(
        &mut self,
        topic: &str,
        partition: u32,
        batch: &mut [u8],
    ) -> Result<AppendResult, LogError> {
        let header = crate::batch::BatchHeader::parse(batch)?;
        if !header.is_transactional()
            || header.is_control()
            || header.producer_id != self.producer_id
        {
            return Err(LogError::InvalidBatch(BatchError::Corrupt(format!(
                "a batch of transaction {} must be transactional with that producer id",
                self.producer_id
            ))));
        }
        let result = self.log.append_slice(topic, partition, batch)?;
        if !self
            .touched
            .iter()
            .any(|(t, p)| t == topic && *p == partition)
        {
            self.touched.push((topic.to_owned(), partition));
        }
        Ok(result)
    }

    /// Builds and appends a batch; `builder` must use [`Transaction::producer_fields`].
    pub fn append_builder(
        &mut self,
        topic: &str,
        partition: u32,
        builder: BatchBuilder,
    ) -> Result<AppendResult, LogError> {
        self.append(topic, partition, builder.build()?)
    }

    /// Builds `builder` into `scratch` and appends it, handing back the builder's emptied
    /// records buffer: with both buffers reused, staging a batch allocates nothing.
    pub fn append_builder_reusing(
        &mut self,
        topic: &str,
        partition: u32,
        builder: BatchBuilder,
        scratch: &mut Vec<u8>,
    ) -> Result<(AppendResult, Vec<u8>), LogError> {
        let records = builder.build_into(scratch)?;
        let result = self.append_slice(topic, partition, scratch)?;
        Ok((result, records))
    }

    /// The partitions written so far.
    pub fn partitions(&self) -> &[(String, u32)] {
        &self.touched
    }

    /// Commits: makes the data durable, then writes and syncs a commit marker in every
    /// partition touched. Returns once the transaction is durable and visible to
    /// read_committed readers. A crash at any point either keeps all of it (some marker was
    /// durable, so recovery completes the others) or none of it.
    pub fn commit(mut self) -> Result<(), LogError> {
        self.finished = true;
        if self.touched.is_empty() {
            return Ok(());
        }
        self.log.commit().wait()?;
        self.write_markers(ControlType::Commit)?;
        self.log.commit().wait()
    }

    /// [`Transaction::commit`] for async callers.
    pub async fn commit_async(mut self) -> Result<(), LogError> {
        self.finished = true;
        if self.touched.is_empty() {
            return Ok(());
        }
        self.log.commit().durable().await?;
        self.write_markers(ControlType::Commit)?;
        self.log.commit().durable().await
    }

    /// Aborts: writes abort markers; the data stays on disk but no read_committed reader
    /// will ever see it. Returns once the markers are durable.
    pub fn abort(mut self) -> Result<(), LogError> {
        self.finished = true;
        if self.touched.is_empty() {
            return Ok(());
        }
        self.write_markers(ControlType::Abort)?;
        self.log.commit().wait()
    }

    /// Lets go of the transaction without writing any marker, as a process that dies mid-way
    /// would: it stays open (blocking the last stable offset) until the next open of the log
    /// recovers it. Crash tests use it; the engine never should.
    pub fn abandon(mut self) {
        self.finished = true;
    }

    fn write_markers(&self, kind: ControlType) -> Result<(), LogError> {
        let now = self.log.inner.options.clock.now_ms();
        for (topic, partition) in &self.touched {
            self.log.append(
                topic,
                *partition,
                control_batch(self.producer_id, 0, kind, now),
            )?;
        }
        Ok(())
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        if !self.finished && !self.touched.is_empty() {
            // Best effort; recovery aborts it otherwise.
            let _ = self.write_markers(ControlType::Abort);
            let _ = self.log.commit();
        }
    }
}

/// Allocates producer ids, unique for the life of the log: blocks of ids are reserved in the
/// `producer-ids` file before use.
struct ProducerIds {
    next: i64,
    reserved_until: i64,
}

const PRODUCER_ID_BLOCK: i64 = 1000;

impl ProducerIds {
    fn open(dir: &Path, max_seen: i64) -> Result<Self, LogError> {
        let path = dir.join("producer-ids");
        let stored = fs::read_to_string(&path)
            .ok()
            .and_then(|t| t.trim().parse::<i64>().ok())
            .unwrap_or(0);
        let next = stored.max(max_seen + 1).max(0);
        Ok(ProducerIds {
            next,
            reserved_until: next,
        })
    }

    fn allocate(&mut self, dir: &Path) -> Result<i64, LogError> {
        if self.next >= self.reserved_until {
            let until = self.next + PRODUCER_ID_BLOCK;
            write_atomically(&dir.join("producer-ids"), until.to_string().as_bytes())?;
            self.reserved_until = until;
        }
        let id = self.next;
        self.next += 1;
        Ok(id)
    }
}

/// Ends transactions that a crash left without markers: committed where any partition holds
/// its commit marker (the marker is written only after all its data was durable), aborted
/// everywhere else.
fn finish_interrupted_transactions(
    opened: &mut [(TopicMeta, Vec<Partition>)],
    now: i64,
) -> Result<(), LogError> {
    let mut committed = std::collections::HashSet::new();
    for (_, partitions) in opened.iter_mut() {
        for p in partitions.iter_mut() {
            committed.extend(p.txn_mut().take_committed_in_scan());
        }
    }
    for (meta, partitions) in opened.iter_mut() {
        for (id, p) in partitions.iter_mut().enumerate() {
            let unmarked = p.txn().unmarked();
            if unmarked.is_empty() {
                continue;
            }
            let dir = p.dir().to_owned();
            for (pid, first_offset) in unmarked {
                let kind = if committed.contains(&pid) {
                    ControlType::Commit
                } else {
                    ControlType::Abort
                };
                let mut marker = control_batch(pid, 0, kind, now);
                p.append(&mut marker, &meta.config, now)
                    .map_err(io_err(&dir))?;
                tracing::info!(
                    topic = %meta.name,
                    partition = id,
                    producer_id = pid,
                    first_offset,
                    outcome = ?kind,
                    "finished a transaction interrupted by a crash"
                );
            }
            for f in p.files_to_sync() {
                f.sync_data().map_err(io_err(&dir))?;
            }
            let end = p.next_offset();
            p.txn_mut().complete_markers(end);
        }
    }
    Ok(())
}

/// Milliseconds since the epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[derive(Serialize, Deserialize)]
struct TopicMeta {
    name: String,
    partitions: u32,
    config: TopicConfig,
}

/// One partition's shared state.
struct PartitionSlot {
    topic: String,
    id: u32,
    state: Mutex<Partition>,
    /// Offsets below this are durable and readable.
    high_watermark: AtomicI64,
    /// (high watermark, last stable offset), published after every flush round.
    hw_watch: watch::Sender<(i64, i64)>,
    dirty: AtomicBool,
    /// Set when a compaction failed past its commit point: the directory holds a swap that
    /// only the next open completes, so the cleaner leaves this partition alone until then.
    cleaner_disabled: AtomicBool,
}

struct Topic {
    config: TopicConfig,
    partitions: Vec<Arc<PartitionSlot>>,
}

struct FlushState {
    /// Rounds requested (each commit asks for a round after its appends).
    requested: u64,
    /// Rounds completed.
    completed: u64,
    failure: Option<String>,
    closing: bool,
}

struct Inner {
    dir: PathBuf,
    options: LogOptions,
    /// The held `flock`; released by [`Log::close`] or when the last handle goes away.
    lock_file: Mutex<Option<File>>,
    topics: RwLock<BTreeMap<String, Arc<Topic>>>,
    flush: Mutex<FlushState>,
    flush_requested: Condvar,
    flush_done: Condvar,
    flush_done_async: tokio::sync::Notify,
    poisoned: AtomicBool,
    pids: Mutex<ProducerIds>,
    /// One cleaner pass at a time (background thread or [`Log::run_cleaner_once`]).
    cleaner_pass: Mutex<()>,
    /// Set to stop the cleaner thread (and make a running pass give up early).
    cleaner_stop: AtomicBool,
    cleaner_wake: Condvar,
    cleaner_sleep: Mutex<()>,
    cleaner_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Test hook: where compaction stops as if the process died.
    cleaner_stop_at: Mutex<Option<SwapStep>>,
}

/// The embedded log. Cheap to clone; all clones share one log.
#[derive(Clone)]
pub struct Log {
    inner: Arc<Inner>,
    flusher: Arc<Mutex<Option<std::thread::JoinHandle<()>>>>,
}

const CHECKPOINT_FILE: &str = "recovery-point-offset-checkpoint";

impl Log {
    /// Opens (or creates) the log in `dir`, recovering every partition.
    pub fn open(dir: impl AsRef<Path>, options: LogOptions) -> Result<Log, LogError> {
        let dir = dir.as_ref().to_owned();
        fs::create_dir_all(dir.join("topics")).map_err(io_err(&dir))?;
        let lock_path = dir.join(".lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_err(&lock_path))?;
        // SAFETY: flock on a file descriptor we own; no memory is involved.
        let rc = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            return Err(LogError::Locked(dir));
        }
        let checkpoints = read_checkpoint(&dir.join(CHECKPOINT_FILE));
        let topics_dir = dir.join("topics");
        let mut opened: Vec<(TopicMeta, Vec<Partition>)> = Vec::new();
        for entry in fs::read_dir(&topics_dir).map_err(io_err(&topics_dir))? {
            let path = entry.map_err(io_err(&topics_dir))?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let text = fs::read_to_string(&path).map_err(io_err(&path))?;
            let meta: TopicMeta = serde_json::from_str(&text).map_err(|e| LogError::Io {
                path: path.clone(),
                source: io::Error::new(io::ErrorKind::InvalidData, e),
            })?;
            let mut partitions = Vec::with_capacity(meta.partitions as usize);
            for id in 0..meta.partitions {
                let pdir = dir.join(format!("{}-{id}", meta.name));
                let (recovery_point, first_unstable) = checkpoints
                    .get(&(meta.name.clone(), id))
                    .copied()
                    .unwrap_or((0, 0));
                let (partition, recovery) = Partition::open(&pdir, recovery_point, first_unstable)
                    .map_err(|source| LogError::from_segment(&meta.name, id, &pdir, source))?;
                if recovery.truncated_bytes > 0 {
                    tracing::warn!(
                        topic = %meta.name,
                        partition = id,
                        truncated_bytes = recovery.truncated_bytes,
                        reason = recovery.reason.as_deref().unwrap_or(""),
                        "recovery removed an unfinished write from the end of the partition"
                    );
                }
                partitions.push(partition);
            }
            opened.push((meta, partitions));
        }
        finish_interrupted_transactions(&mut opened, options.clock.now_ms())?;
        let mut max_pid = -1i64;
        let mut topics = BTreeMap::new();
        for (meta, partitions) in opened {
            let slots = partitions
                .into_iter()
                .enumerate()
                .map(|(id, p)| {
                    max_pid = max_pid.max(p.txn().max_producer_id());
                    Arc::new(PartitionSlot::new(&meta.name, id as u32, p))
                })
                .collect();
            topics.insert(
                meta.name.clone(),
                Arc::new(Topic {
                    config: meta.config,
                    partitions: slots,
                }),
            );
        }
        let pids = ProducerIds::open(&dir, max_pid)?;
        let inner = Arc::new(Inner {
            dir,
            options,
            lock_file: Mutex::new(Some(lock)),
            topics: RwLock::new(topics),
            flush: Mutex::new(FlushState {
                requested: 0,
                completed: 0,
                failure: None,
                closing: false,
            }),
            flush_requested: Condvar::new(),
            flush_done: Condvar::new(),
            flush_done_async: tokio::sync::Notify::new(),
            poisoned: AtomicBool::new(false),
            pids: Mutex::new(pids),
            cleaner_pass: Mutex::new(()),
            cleaner_stop: AtomicBool::new(false),
            cleaner_wake: Condvar::new(),
            cleaner_sleep: Mutex::new(()),
            cleaner_thread: Mutex::new(None),
            cleaner_stop_at: Mutex::new(None),
        });
        let flusher_inner = inner.clone();
        let handle = std::thread::Builder::new()
            .name("headwater-log-flusher".into())
            .spawn(move || flusher_loop(flusher_inner))
            .map_err(io_err(Path::new("flusher thread")))?;
        let log = Log {
            inner,
            flusher: Arc::new(Mutex::new(Some(handle))),
        };
        if log.inner.options.background_cleaner {
            let cleaner_inner = log.inner.clone();
            let handle = std::thread::Builder::new()
                .name("headwater-log-cleaner".into())
                .spawn(move || cleaner_loop(cleaner_inner))
                .map_err(io_err(Path::new("cleaner thread")))?;
            *self::lock(&log.inner.cleaner_thread) = Some(handle);
        }
        Ok(log)
    }

    /// Runs retention and compaction once over every partition, now (by the log's clock),
    /// and returns what they did. The background cleaner runs the same pass periodically;
    /// passes never overlap. Stops at nothing: every partition is tried, and the first error
    /// is returned after all of them.
    pub fn run_cleaner_once(&self) -> Result<CleanerStats, LogError> {
        cleaner_pass(&self.inner)
    }

    /// Test hook: makes compactions stop at `step` of the swap protocol, leaving the files as
    /// a crash there would. The partition is then left alone until the log is reopened.
    #[doc(hidden)]
    pub fn set_compaction_stop_point(&self, step: Option<SwapStep>) {
        *lock(&self.inner.cleaner_stop_at) = step;
    }

    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Creates a topic with `partitions` partitions. Fails if it exists.
    pub fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        config: TopicConfig,
    ) -> Result<(), LogError> {
        validate_topic_name(name)?;
        if partitions == 0 {
            return Err(LogError::NoPartitions);
        }
        let mut topics = self.inner.topics.write().unwrap_or_else(|e| e.into_inner());
        if topics.contains_key(name) {
            return Err(LogError::TopicExists(name.to_owned()));
        }
        let pdirs: Vec<PathBuf> = (0..partitions)
            .map(|id| self.inner.dir.join(format!("{name}-{id}")))
            .collect();
        let created = (|| -> Result<Vec<Arc<PartitionSlot>>, LogError> {
            let mut slots = Vec::with_capacity(partitions as usize);
            for (id, pdir) in pdirs.iter().enumerate() {
                if pdir.exists() {
                    // Leftover of a topic whose metadata was never written: start clean.
                    fs::remove_dir_all(pdir).map_err(io_err(pdir))?;
                }
                let p = Partition::create(pdir).map_err(io_err(pdir))?;
                slots.push(Arc::new(PartitionSlot::new(name, id as u32, p)));
            }
            // The metadata file is the commit point of a topic creation.
            let meta = TopicMeta {
                name: name.to_owned(),
                partitions,
                config: config.clone(),
            };
            let path = self.inner.dir.join("topics").join(format!("{name}.json"));
            write_atomically(&path, &serde_json::to_vec_pretty(&meta).unwrap_or_default())?;
            sync_dir(&self.inner.dir).map_err(io_err(&self.inner.dir))?;
            Ok(slots)
        })();
        let slots = match created {
            Ok(slots) => slots,
            Err(e) => {
                // The topic does not exist: remove what was made of it (best effort; a later
                // creation removes leftovers too).
                for pdir in &pdirs {
                    let _ = fs::remove_dir_all(pdir);
                }
                return Err(e);
            }
        };
        topics.insert(
            name.to_owned(),
            Arc::new(Topic {
                config,
                partitions: slots,
            }),
        );
        Ok(())
    }

    /// Creates the topic if missing; an existing topic must have the same partition count.
    pub fn ensure_topic(
        &self,
        name: &str,
        partitions: u32,
        config: TopicConfig,
    ) -> Result<(), LogError> {
        if let Some(existing) = self.partition_count(name) {
            if existing != partitions {
                return Err(LogError::PartitionCountMismatch {
                    topic: name.to_owned(),
                    existing,
                    requested: partitions,
                });
            }
            return Ok(());
        }
        match self.create_topic(name, partitions, config) {
            Err(LogError::TopicExists(_)) => {
                self.ensure_topic(name, partitions, TopicConfig::default())
            }
            other => other,
        }
    }

    /// Deletes a topic and its data. Waits for a running cleaner pass (which may be working
    /// in the topic's directories) to finish first.
    pub fn delete_topic(&self, name: &str) -> Result<(), LogError> {
        let _no_cleaner = lock(&self.inner.cleaner_pass);
        let topic = {
            let mut topics = self.inner.topics.write().unwrap_or_else(|e| e.into_inner());
            topics
                .remove(name)
                .ok_or_else(|| LogError::UnknownTopic(name.to_owned()))?
        };
        let path = self.inner.dir.join("topics").join(format!("{name}.json"));
        fs::remove_file(&path).map_err(io_err(&path))?;
        sync_dir(&self.inner.dir).map_err(io_err(&self.inner.dir))?;
        for slot in &topic.partitions {
            let state = lock(&slot.state);
            let pdir = state.dir().to_owned();
            drop(state);
            fs::remove_dir_all(&pdir).map_err(io_err(&pdir))?;
        }
        Ok(())
    }

    /// Names of all topics, sorted.
    pub fn topics(&self) -> Vec<String> {
        self.inner
            .topics
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    pub fn partition_count(&self, topic: &str) -> Option<u32> {
        self.topic(topic).ok().map(|t| t.partitions.len() as u32)
    }

    pub fn topic_config(&self, topic: &str) -> Option<TopicConfig> {
        self.topic(topic).ok().map(|t| t.config.clone())
    }

    fn topic(&self, name: &str) -> Result<Arc<Topic>, LogError> {
        self.inner
            .topics
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
            .ok_or_else(|| LogError::UnknownTopic(name.to_owned()))
    }

    fn slot(&self, topic: &str, partition: u32) -> Result<Arc<PartitionSlot>, LogError> {
        let t = self.topic(topic)?;
        t.partitions
            .get(partition as usize)
            .cloned()
            .ok_or_else(|| LogError::UnknownPartition {
                topic: topic.to_owned(),
                partition,
            })
    }

    fn check_writable(&self) -> Result<(), LogError> {
        if self.inner.poisoned.load(Ordering::Acquire) {
            let failure = lock(&self.inner.flush).failure.clone().unwrap_or_default();
            return Err(LogError::Poisoned(failure));
        }
        Ok(())
    }

    /// Appends a built batch (base offset is assigned here). Not durable until a commit.
    pub fn append(
        &self,
        topic: &str,
        partition: u32,
        mut batch: Vec<u8>,
    ) -> Result<AppendResult, LogError> {
        self.append_slice(topic, partition, &mut batch)
    }

    /// [`Log::append`] of a batch in a caller's buffer (its base offset is set in place).
    pub fn append_slice(
        &self,
        topic: &str,
        partition: u32,
        batch: &mut [u8],
    ) -> Result<AppendResult, LogError> {
        self.check_writable()?;
        crate::batch::verify(batch)?;
        let t = self.topic(topic)?;
        let slot =
            t.partitions
                .get(partition as usize)
                .ok_or_else(|| LogError::UnknownPartition {
                    topic: topic.to_owned(),
                    partition,
                })?;
        let now = self.inner.options.clock.now_ms();
        let mut state = lock(&slot.state);
        let header = state
            .append(batch, &t.config, now)
            .map_err(|source| LogError::from_io(state.dir(), source))?;
        drop(state);
        slot.dirty.store(true, Ordering::Release);
        Ok(AppendResult {
            base_offset: header.base_offset,
            last_offset: header.last_offset(),
        })
    }

    /// Builds and appends a batch from a [`BatchBuilder`].
    pub fn append_builder(
        &self,
        topic: &str,
        partition: u32,
        builder: BatchBuilder,
    ) -> Result<AppendResult, LogError> {
        self.append(topic, partition, builder.build()?)
    }

    /// Asks for everything appended so far to be made durable; the ticket resolves when it is.
    pub fn commit(&self) -> CommitTicket {
        let mut flush = lock(&self.inner.flush);
        let round = flush.completed.max(flush.requested) + 1;
        if let FlushPolicy::EveryCommit = self.inner.options.flush_policy {
            flush.requested = round;
            self.inner.flush_requested.notify_one();
        }
        CommitTicket {
            inner: self.inner.clone(),
            round,
        }
    }

    /// Reads whole batches from `offset` up to `max_bytes` (at least one batch), read_committed.
    pub fn read(
        &self,
        topic: &str,
        partition: u32,
        offset: i64,
        max_bytes: usize,
    ) -> Result<ReadResult, LogError> {
        self.read_with(
            topic,
            partition,
            offset,
            max_bytes,
            Isolation::ReadCommitted,
        )
    }

    /// Reads whole batches from `offset` up to `max_bytes` (at least one batch), never past
    /// the high watermark, and with read_committed never past the last stable offset.
    pub fn read_with(
        &self,
        topic: &str,
        partition: u32,
        offset: i64,
        max_bytes: usize,
        isolation: Isolation,
    ) -> Result<ReadResult, LogError> {
        let slot = self.slot(topic, partition)?;
        let high_watermark = slot.high_watermark.load(Ordering::Acquire);
        let (plan, log_start, lso, aborted) = {
            let state = lock(&slot.state);
            let log_start = state.log_start_offset();
            if offset < log_start || offset > high_watermark {
                return Err(LogError::OffsetOutOfRange {
                    topic: topic.to_owned(),
                    partition,
                    offset,
                    log_start,
                    log_end: high_watermark,
                });
            }
            let lso = state.last_stable_offset(high_watermark);
            let upper = match isolation {
                Isolation::ReadUncommitted => high_watermark,
                Isolation::ReadCommitted => lso,
            };
            let plan = state
                .plan_read(offset, max_bytes, upper)
                .map_err(|source| LogError::from_segment(topic, partition, state.dir(), source))?;
            let aborted = match (&plan, isolation) {
                (Some(_), Isolation::ReadCommitted) => state.aborted_overlapping(offset, upper),
                _ => Vec::new(),
            };
            (plan, log_start, lso, aborted)
        };
        let mut bytes = Vec::new();
        if let Some(plan) = plan {
            bytes.resize((plan.end - plan.start) as usize, 0);
            let n = read_full_at(&plan.file, &mut bytes, plan.start)
                .map_err(io_err(&self.inner.dir))?;
            bytes.truncate(n);
        }
        Ok(ReadResult {
            bytes,
            high_watermark,
            last_stable_offset: lso,
            log_start_offset: log_start,
            aborted,
        })
    }

    /// The last stable offset: below it every transaction is decided (Kafka's LSO).
    pub fn last_stable_offset(&self, topic: &str, partition: u32) -> Result<i64, LogError> {
        let slot = self.slot(topic, partition)?;
        let hw = slot.high_watermark.load(Ordering::Acquire);
        let state = lock(&slot.state);
        Ok(state.last_stable_offset(hw))
    }

    /// Starts a transaction: its batches (built with [`Transaction::producer_fields`]) stay
    /// invisible to read_committed readers until [`Transaction::commit`] makes all of them
    /// visible at once, in every partition it touched.
    pub fn begin_transaction(&self) -> Result<Transaction, LogError> {
        self.check_writable()?;
        let producer_id = lock(&self.inner.pids).allocate(&self.inner.dir)?;
        Ok(Transaction {
            log: self.clone(),
            producer_id,
            touched: Vec::new(),
            finished: false,
        })
    }

    /// The earliest offset still stored.
    pub fn earliest_offset(&self, topic: &str, partition: u32) -> Result<i64, LogError> {
        let slot = self.slot(topic, partition)?;
        let state = lock(&slot.state);
        Ok(state.log_start_offset())
    }

    /// The high watermark: the offset after the last durable record (Kafka's "latest").
    pub fn latest_offset(&self, topic: &str, partition: u32) -> Result<i64, LogError> {
        Ok(self
            .slot(topic, partition)?
            .high_watermark
            .load(Ordering::Acquire))
    }

    /// The earliest durable offset whose record timestamp is at or after `timestamp`
    /// (`None` when every record is older).
    pub fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: u32,
        timestamp: i64,
    ) -> Result<Option<(i64, i64)>, LogError> {
        let slot = self.slot(topic, partition)?;
        let hw = slot.high_watermark.load(Ordering::Acquire);
        let location = {
            let state = lock(&slot.state);
            state
                .find_by_time(timestamp)
                .map_err(|source| LogError::Corrupt {
                    topic: topic.to_owned(),
                    partition,
                    source,
                })?
        };
        let Some(loc) = location else {
            return Ok(None);
        };
        if loc.header.base_offset >= hw {
            return Ok(None);
        }
        let read = self.read(topic, partition, loc.header.base_offset, 1)?;
        let decoded = crate::batch::DecodedBatch::decode(&read.bytes)?;
        Ok(decoded
            .records()?
            .into_iter()
            .find(|r| r.timestamp >= timestamp)
            .map(|r| (r.offset, r.timestamp)))
    }

    /// Waits until the high watermark passes `offset` or `timeout` elapses; returns the high
    /// watermark then.
    pub async fn wait_for_data(
        &self,
        topic: &str,
        partition: u32,
        offset: i64,
        timeout: Duration,
    ) -> Result<i64, LogError> {
        self.wait_for(
            topic,
            partition,
            offset,
            timeout,
            Isolation::ReadUncommitted,
        )
        .await
    }

    /// Waits until data past `offset` is readable with `isolation` (the high watermark, or
    /// the last stable offset, passes it) or `timeout` elapses; returns that bound then.
    pub async fn wait_for(
        &self,
        topic: &str,
        partition: u32,
        offset: i64,
        timeout: Duration,
        isolation: Isolation,
    ) -> Result<i64, LogError> {
        let slot = self.slot(topic, partition)?;
        let mut rx = slot.hw_watch.subscribe();
        let pick = move |bounds: &(i64, i64)| match isolation {
            Isolation::ReadUncommitted => bounds.0,
            Isolation::ReadCommitted => bounds.1,
        };
        let _ = tokio::time::timeout(timeout, rx.wait_for(|b| pick(b) > offset)).await;
        let bounds = *rx.borrow();
        Ok(pick(&bounds))
    }

    /// Stops the cleaner, flushes everything, writes the recovery checkpoint and stops the
    /// flusher.
    pub fn close(&self) -> Result<(), LogError> {
        stop_cleaner(&self.inner);
        let ticket = self.commit();
        {
            let mut flush = lock(&self.inner.flush);
            if flush.requested < ticket.round {
                flush.requested = ticket.round;
            }
            self.inner.flush_requested.notify_one();
        }
        let result = ticket.wait();
        {
            let mut flush = lock(&self.inner.flush);
            flush.closing = true;
            self.inner.flush_requested.notify_all();
        }
        if let Some(handle) = lock(&self.flusher).take() {
            let _ = handle.join();
        }
        result?;
        let checkpoint = write_checkpoint(&self.inner);
        // Release the directory for another process.
        lock(&self.inner.lock_file).take();
        checkpoint
    }
}

impl Drop for Log {
    /// The last handle stops the flusher (without a final flush: call [`Log::close`] for a clean
    /// shutdown) so the directory lock is released.
    fn drop(&mut self) {
        if Arc::strong_count(&self.flusher) != 1 {
            return;
        }
        stop_cleaner(&self.inner);
        {
            let mut flush = lock(&self.inner.flush);
            flush.closing = true;
            self.inner.flush_requested.notify_all();
        }
        if let Some(handle) = lock(&self.flusher).take() {
            let _ = handle.join();
        }
        self.inner.flush_done.notify_all();
        self.inner.flush_done_async.notify_waiters();
    }
}

impl PartitionSlot {
    fn new(topic: &str, id: u32, partition: Partition) -> Self {
        let end = partition.next_offset();
        let lso = partition.last_stable_offset(end);
        let (hw_watch, _) = watch::channel((end, lso));
        PartitionSlot {
            topic: topic.to_owned(),
            id,
            state: Mutex::new(partition),
            high_watermark: AtomicI64::new(end),
            hw_watch,
            dirty: AtomicBool::new(false),
            cleaner_disabled: AtomicBool::new(false),
        }
    }
}

/// Resolves when the data appended before [`Log::commit`] is durable.
pub struct CommitTicket {
    inner: Arc<Inner>,
    round: u64,
}

impl CommitTicket {
    /// Blocks until durable.
    pub fn wait(self) -> Result<(), LogError> {
        let mut flush = lock(&self.inner.flush);
        loop {
            if let Some(f) = &flush.failure {
                return Err(LogError::Poisoned(f.clone()));
            }
            if flush.completed >= self.round {
                return Ok(());
            }
            if flush.closing && flush.requested < self.round {
                return Err(LogError::Closed);
            }
            flush = self
                .inner
                .flush_done
                .wait(flush)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Waits asynchronously until durable.
    pub async fn durable(self) -> Result<(), LogError> {
        loop {
            let notified = self.inner.flush_done_async.notified();
            {
                let flush = lock(&self.inner.flush);
                if let Some(f) = &flush.failure {
                    return Err(LogError::Poisoned(f.clone()));
                }
                if flush.completed >= self.round {
                    return Ok(());
                }
                if flush.closing && flush.requested < self.round {
                    return Err(LogError::Closed);
                }
            }
            notified.await;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The flusher: waits for requested rounds (or the flush interval), fsyncs every dirty
/// partition, then advances high watermarks and wakes waiters.
fn flusher_loop(inner: Arc<Inner>) {
    let interval = match inner.options.flush_policy {
        FlushPolicy::EveryCommit => None,
        FlushPolicy::IntervalMs(ms) => Some(Duration::from_millis(ms.max(1))),
    };
    let checkpoint_every = Duration::from_millis(inner.options.checkpoint_interval_ms.max(100));
    let mut last_checkpoint = Instant::now();
    let mut syncers = ParallelSync::default();
    loop {
        let round = {
            let mut flush = lock(&inner.flush);
            loop {
                if flush.requested > flush.completed {
                    break;
                }
                if flush.closing {
                    return;
                }
                let wait = interval.unwrap_or(checkpoint_every);
                let (guard, timeout) = inner
                    .flush_requested
                    .wait_timeout(flush, wait)
                    .unwrap_or_else(|e| e.into_inner());
                flush = guard;
                if timeout.timed_out() {
                    if interval.is_some() {
                        flush.requested = flush.completed + 1;
                        break;
                    }
                    if last_checkpoint.elapsed() >= checkpoint_every {
                        drop(flush);
                        if let Err(e) = write_checkpoint(&inner) {
                            tracing::warn!(error = %e, "writing the recovery checkpoint failed");
                        }
                        last_checkpoint = Instant::now();
                        flush = lock(&inner.flush);
                    }
                }
            }
            flush.requested
        };
        let result = flush_dirty_partitions(&inner, &mut syncers);
        let mut flush = lock(&inner.flush);
        match result {
            Ok(()) => flush.completed = flush.completed.max(round),
            Err(e) => {
                tracing::error!(error = %e, "fsync failed: the log stops accepting writes");
                inner.poisoned.store(true, Ordering::Release);
                flush.failure = Some(e.to_string());
            }
        }
        drop(flush);
        inner.flush_done.notify_all();
        inner.flush_done_async.notify_waiters();
        if last_checkpoint.elapsed() >= checkpoint_every {
            if let Err(e) = write_checkpoint(&inner) {
                tracing::warn!(error = %e, "writing the recovery checkpoint failed");
            }
            last_checkpoint = Instant::now();
        }
    }
}

fn flush_dirty_partitions(inner: &Inner, syncers: &mut ParallelSync) -> Result<(), LogError> {
    let topics: Vec<Arc<Topic>> = inner
        .topics
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .cloned()
        .collect();
    let mut work: Vec<(Arc<PartitionSlot>, i64, Vec<Arc<File>>)> = Vec::new();
    for topic in &topics {
        for slot in &topic.partitions {
            if !slot.dirty.swap(false, Ordering::AcqRel) {
                continue;
            }
            let mut state = lock(&slot.state);
            let end = state.next_offset();
            let files = state.files_to_sync();
            work.push((slot.clone(), end, files));
        }
    }
    if work.is_empty() {
        return Ok(());
    }
    let files: Vec<&Arc<File>> = work.iter().flat_map(|(_, _, f)| f.iter()).collect();
    let errors = syncers.sync_data(&files);
    if let Some(e) = errors.into_iter().next() {
        return Err(LogError::from_io(&inner.dir, e));
    }
    for (slot, end, _) in work {
        slot.high_watermark.fetch_max(end, Ordering::AcqRel);
        let hw = slot.high_watermark.load(Ordering::Acquire);
        let lso = {
            let mut state = lock(&slot.state);
            state.txn_mut().complete_markers(hw);
            state.last_stable_offset(hw)
        };
        slot.hw_watch.send_replace((hw, lso));
    }
    Ok(())
}

/// The flusher's helper threads: one flush round syncs all its files in parallel (a commit
/// touching a topic partition and the offsets partition syncs two), the first on the flusher
/// thread and each other one on a helper. Helpers are started when a round first needs them
/// and kept (spawning a thread per file per round cost a `clone` and its stack's page faults
/// every commit); a round with more files than [`ParallelSync::MAX_HELPERS`] + 1 gives some
/// helpers several, synced in turn. They stop when this is dropped (the flusher ends).
#[derive(Default)]
struct ParallelSync {
    helpers: Vec<SyncHelper>,
}

struct SyncHelper {
    /// Files to sync, in order; closed to stop the helper.
    jobs: Option<std::sync::mpsc::Sender<Arc<File>>>,
    /// One result per file sent, in the same order.
    results: std::sync::mpsc::Receiver<io::Result<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ParallelSync {
    const MAX_HELPERS: usize = 8;

    /// `sync_data` of every file, in parallel; the errors of those that failed.
    fn sync_data(&mut self, files: &[&Arc<File>]) -> Vec<io::Error> {
        let Some((first, rest)) = files.split_first() else {
            return Vec::new();
        };
        let mut sent = vec![0usize; self.helpers.len()];
        let mut errors = Vec::new();
        for (i, file) in rest.iter().enumerate() {
            let slot = i % Self::MAX_HELPERS;
            if slot == self.helpers.len() {
                if let Ok(helper) = SyncHelper::start(slot) {
                    self.helpers.push(helper);
                    sent.push(0);
                }
            }
            if slot >= self.helpers.len() {
                // No thread to be had: this file is synced here instead.
                errors.extend(file.sync_data().err());
                continue;
            }
            let helper = &self.helpers[slot];
            let handed = helper
                .jobs
                .as_ref()
                .is_some_and(|jobs| jobs.send(Arc::clone(file)).is_ok());
            if handed {
                sent[slot] += 1;
            } else {
                errors.extend(file.sync_data().err());
            }
        }
        errors.extend(first.sync_data().err());
        for (helper, count) in self.helpers.iter().zip(sent) {
            for _ in 0..count {
                match helper.results.recv() {
                    Ok(result) => errors.extend(result.err()),
                    Err(_) => errors.push(io::Error::other("an fsync helper thread ended")),
                }
            }
        }
        errors
    }
}

impl SyncHelper {
    fn start(index: usize) -> io::Result<SyncHelper> {
        let (jobs, job_rx) = std::sync::mpsc::channel::<Arc<File>>();
        let (result_tx, results) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("log-fsync-{index}"))
            .stack_size(64 * 1024)
            .spawn(move || {
                for file in job_rx {
                    if result_tx.send(file.sync_data()).is_err() {
                        return;
                    }
                }
            })?;
        Ok(SyncHelper {
            jobs: Some(jobs),
            results,
            thread: Some(thread),
        })
    }
}

impl Drop for SyncHelper {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Stops the cleaner thread (a running pass gives up before its next commit point) and waits
/// for it.
fn stop_cleaner(inner: &Inner) {
    inner.cleaner_stop.store(true, Ordering::Release);
    {
        let _sleep = lock(&inner.cleaner_sleep);
        inner.cleaner_wake.notify_all();
    }
    let handle = lock(&inner.cleaner_thread).take();
    if let Some(handle) = handle {
        let _ = handle.join();
    }
}

/// The cleaner thread: a pass every `cleaner_interval_ms` until stopped.
fn cleaner_loop(inner: Arc<Inner>) {
    let interval = Duration::from_millis(inner.options.cleaner_interval_ms.max(10));
    loop {
        {
            let sleep = lock(&inner.cleaner_sleep);
            if inner.cleaner_stop.load(Ordering::Acquire) {
                return;
            }
            let _ = inner
                .cleaner_wake
                .wait_timeout(sleep, interval)
                .unwrap_or_else(|e| e.into_inner());
        }
        if inner.cleaner_stop.load(Ordering::Acquire) {
            return;
        }
        if let Err(e) = cleaner_pass(&inner) {
            tracing::warn!(error = %e, "log cleaner pass failed");
        }
    }
}

/// Retention then compaction over every partition.
fn cleaner_pass(inner: &Inner) -> Result<CleanerStats, LogError> {
    let _pass = lock(&inner.cleaner_pass);
    let topics: Vec<Arc<Topic>> = inner
        .topics
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .cloned()
        .collect();
    let stop_at = *lock(&inner.cleaner_stop_at);
    let mut stats = CleanerStats::default();
    let mut first_error = None;
    for topic in &topics {
        for slot in &topic.partitions {
            if inner.cleaner_stop.load(Ordering::Acquire) {
                return first_error.map_or(Ok(stats), Err);
            }
            if slot.cleaner_disabled.load(Ordering::Acquire) {
                continue;
            }
            let dir = lock(&slot.state).dir().to_owned();
            let now = inner.options.clock.now_ms();
            let hw = slot.high_watermark.load(Ordering::Acquire);
            match crate::cleaner::retain(&slot.state, hw, &topic.config, now) {
                Ok((segments, bytes)) => {
                    stats.segments_deleted += segments;
                    stats.bytes_deleted += bytes;
                }
                Err(e) => {
                    tracing::warn!(topic = %slot.topic, partition = slot.id, error = %e, "retention failed");
                    first_error.get_or_insert(LogError::from_io(&dir, e));
                    continue;
                }
            }
            let input = CompactionInput {
                config: &topic.config,
                now,
                high_watermark: hw,
                min_dirty_ratio: inner.options.min_cleanable_dirty_ratio,
                stop: &inner.cleaner_stop,
                stop_at,
            };
            match crate::cleaner::compact(&slot.state, &input) {
                Ok(s) => stats.add(&s),
                Err(CleanError::BeforeSwap(e)) => {
                    if !inner.cleaner_stop.load(Ordering::Acquire) {
                        tracing::warn!(topic = %slot.topic, partition = slot.id, error = %e, "compaction failed; it will be retried");
                        first_error.get_or_insert(LogError::from_io(&dir, e));
                    }
                }
                Err(CleanError::AfterSwap(e)) => {
                    slot.cleaner_disabled.store(true, Ordering::Release);
                    tracing::error!(topic = %slot.topic, partition = slot.id, error = %e, "compaction failed after its commit point; the partition is not cleaned again until the log is reopened, which completes it");
                    first_error.get_or_insert(LogError::from_io(&dir, e));
                }
            }
        }
    }
    first_error.map_or(Ok(stats), Err)
}

/// Per partition: (recovery point, first unstable offset) from the last checkpoint.
fn read_checkpoint(path: &Path) -> HashMap<(String, u32), (i64, i64)> {
    let Ok(text) = fs::read_to_string(path) else {
        return HashMap::new();
    };
    let parsed: Vec<(String, u32, i64, i64)> = serde_json::from_str(&text).unwrap_or_default();
    parsed
        .into_iter()
        .map(|(t, p, rp, fu)| ((t, p), (rp, fu)))
        .collect()
}

/// Records, per partition, the offset up to which data is known durable (the high watermark)
/// and the first offset of any transaction still open. Recovery trusts data below the first,
/// re-verifies what follows, and replays transaction markers from the smaller of the two.
fn write_checkpoint(inner: &Inner) -> Result<(), LogError> {
    let topics: Vec<Arc<Topic>> = inner
        .topics
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .cloned()
        .collect();
    let mut entries: Vec<(String, u32, i64, i64)> = Vec::new();
    for topic in &topics {
        for slot in &topic.partitions {
            let hw = slot.high_watermark.load(Ordering::Acquire);
            let first_unstable = lock(&slot.state)
                .txn()
                .first_unstable_offset()
                .unwrap_or(hw);
            entries.push((slot.topic.clone(), slot.id, hw, first_unstable.min(hw)));
        }
    }
    let path = inner.dir.join(CHECKPOINT_FILE);
    write_atomically(&path, &serde_json::to_vec(&entries).unwrap_or_default())
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), LogError> {
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp).map_err(io_err(&tmp))?;
    f.write_all(bytes).map_err(io_err(&tmp))?;
    f.sync_all().map_err(io_err(&tmp))?;
    fs::rename(&tmp, path).map_err(io_err(path))?;
    if let Some(parent) = path.parent() {
        sync_dir(parent).map_err(io_err(parent))?;
    }
    Ok(())
}

/// Kafka's topic name rules: 1-249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), LogError> {
    let bad = |reason: &str| {
        Err(LogError::InvalidTopicName {
            name: name.to_owned(),
            reason: reason.to_owned(),
        })
    };
    if name.is_empty() {
        return bad("the name is empty");
    }
    if name == "." || name == ".." {
        return bad("'.' and '..' are not allowed");
    }
    if name.len() > 249 {
        return bad("longer than 249 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return bad("only ASCII letters, digits, '.', '_' and '-' are allowed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_sync_syncs_every_file_and_keeps_its_helpers() {
        let dir = tempfile::tempdir().unwrap();
        let files: Vec<Arc<File>> = (0..20)
            .map(|i| {
                let mut f = File::create(dir.path().join(format!("f{i}"))).unwrap();
                f.write_all(b"data").unwrap();
                Arc::new(f)
            })
            .collect();
        let mut syncers = ParallelSync::default();
        for n in [0, 1, 2, 5, 20, 2] {
            let round: Vec<&Arc<File>> = files.iter().take(n).collect();
            assert!(syncers.sync_data(&round).is_empty(), "{n} files");
            // One file per helper up to the cap, the first synced by the caller.
            assert!(syncers.helpers.len() <= ParallelSync::MAX_HELPERS);
        }
        assert_eq!(syncers.helpers.len(), ParallelSync::MAX_HELPERS);
        // Dropping them stops and joins the helper threads.
        drop(syncers);
    }
}
