//! One partition of a topic: an ordered list of segments, the last one active.
//!
//! Invariants:
//! - segments are sorted by base offset and never overlap: a segment's base offset is the
//!   previous segment's next offset (compaction keeps each cleaned segment's last offset, so
//!   gaps only appear inside segments), and only the last one is appended to;
//! - `next_offset()` (the log end offset) only grows, except when recovery truncates data that
//!   was never durable;
//! - every batch appended gets consecutive offsets starting at the log end offset;
//! - the log start offset is the first segment's base offset; retention moves it forward by
//!   removing whole segments from the front.
//!
//! Compaction replaces segments with the swap protocol (see `cleaner.rs`): `<base>.log.cleaned`
//! (being written, originals intact) -> `<base>.log.swap` (complete and durable: it replaces
//! every segment whose base offset lies in its range) -> originals deleted -> renamed to
//! `<base>.log`. [`Partition::open`] finishes what a crash interrupted: it deletes `.cleaned`
//! files and completes every `.swap`.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch::{self, BatchHeader, ControlType, DecodedBatch};
use crate::config::TopicConfig;
use crate::segment::{file_stem, BatchLocation, Segment, SegmentError, TailRecovery};
use crate::txn::{AbortedTxn, Replaying, TxnState};

/// Where a read must fetch its bytes from: whole batches in one file range.
#[derive(Clone, Debug)]
pub struct ReadPlan {
    pub file: std::sync::Arc<fs::File>,
    pub start: u64,
    pub end: u64,
}

#[derive(Debug)]
pub struct Partition {
    dir: PathBuf,
    segments: Vec<Segment>,
    log_start_offset: i64,
    /// Segments rolled since the last flush; they need a final fsync before the flush completes.
    unsynced_rolled: Vec<std::sync::Arc<fs::File>>,
    txn: TxnState,
    /// Compaction bookkeeping (in memory; after a reopen everything counts as dirty once).
    pub(crate) cleaner: CleanerMark,
}

/// Where the last compaction of the partition ended and when it must run again.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CleanerMark {
    /// End of the range the last pass cleaned (segments from here on are dirty).
    pub cleaned_until: i64,
    /// The earliest delete horizon a kept tombstone or marker waits for.
    pub next_horizon: Option<i64>,
}

/// A segment that is no longer appended to, as the cleaner sees it.
#[derive(Clone, Debug)]
pub struct ClosedSegment {
    pub base_offset: i64,
    pub next_offset: i64,
    pub size: u64,
    pub max_timestamp: i64,
    pub file: Arc<fs::File>,
}

impl Partition {
    /// Creates the directory and the first segment.
    pub fn create(dir: &Path) -> io::Result<Partition> {
        fs::create_dir_all(dir)?;
        let segment = Segment::create(dir, 0)?;
        sync_dir(dir)?;
        Ok(Partition {
            dir: dir.to_owned(),
            segments: vec![segment],
            log_start_offset: 0,
            unsynced_rolled: Vec::new(),
            txn: TxnState::open(dir)?,
            cleaner: CleanerMark::default(),
        })
    }

    /// Opens a partition directory, recovering segments at and after `recovery_point`, and
    /// rebuilds the transaction state by scanning batch headers from
    /// `min(recovery_point, first_unstable_offset)` (every transaction open at the last
    /// checkpoint, or begun after it, starts there). Returns the partition and what the
    /// recovery removed.
    pub fn open(
        dir: &Path,
        recovery_point: i64,
        first_unstable_offset: i64,
    ) -> Result<(Partition, TailRecovery), SegmentError> {
        let bases = finish_interrupted_compaction(dir)?;
        if bases.is_empty() {
            let p = Partition::create(dir)?;
            return Ok((p, TailRecovery::default()));
        }
        let mut segments: Vec<Segment> = Vec::with_capacity(bases.len());
        let mut recovery = TailRecovery::default();
        let mut truncated_here = false;
        for (i, &base) in bases.iter().enumerate() {
            if truncated_here {
                // Everything after a truncation point is gone: it was never durable.
                let stem = crate::segment::file_stem(base);
                let log_path = dir.join(format!("{stem}.log"));
                recovery.truncated_bytes += fs::metadata(&log_path).map_or(0, |m| m.len());
                for ext in ["log", "index", "timeindex"] {
                    match fs::remove_file(dir.join(format!("{stem}.{ext}"))) {
                        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e.into()),
                        _ => {}
                    }
                }
                continue;
            }
            let next_base = bases.get(i + 1).copied();
            // Verify segments that may hold data past the recovery point.
            let needs_recovery = next_base.is_none_or(|n| n > recovery_point);
            let (segment, tail) = Segment::open_with(
                dir,
                base,
                needs_recovery.then_some(recovery_point),
                next_base.is_some(),
            )?;
            if tail.truncated_bytes > 0 {
                recovery.truncated_bytes += tail.truncated_bytes;
                recovery.reason = tail.reason;
                truncated_here = next_base.is_some();
            }
            if let Some(prev) = segments.last() {
                if segment.base_offset() < prev.next_offset() {
                    // Only a compaction whose final renames were not all durable can leave a
                    // segment whose offsets the (cleaned) one before it already covers.
                    if segment.next_offset() <= prev.next_offset() && next_base.is_some() {
                        tracing::warn!(
                            dir = %dir.display(),
                            base_offset = base,
                            "removing a segment already replaced by a compacted one"
                        );
                        let mut leftover = segment;
                        leftover.delete_files()?;
                        sync_dir(dir)?;
                        continue;
                    }
                    return Err(SegmentError::Corrupt {
                        offset: base,
                        position: 0,
                        detail: format!(
                            "segment {base} overlaps the previous one (ending at {})",
                            prev.next_offset()
                        ),
                    });
                }
            }
            segments.push(segment);
        }
        let log_start_offset = segments.first().map_or(0, Segment::base_offset);
        let mut partition = Partition {
            dir: dir.to_owned(),
            segments,
            log_start_offset,
            unsynced_rolled: Vec::new(),
            txn: TxnState::open(dir)?,
            cleaner: CleanerMark {
                cleaned_until: log_start_offset,
                next_horizon: None,
            },
        };
        partition.rebuild_txn_state(
            recovery_point
                .min(first_unstable_offset)
                .max(log_start_offset),
        )?;
        Ok((partition, recovery))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// The log end offset: the offset the next record gets.
    pub fn next_offset(&self) -> i64 {
        self.active().next_offset()
    }
    /// The earliest offset still in the log.
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }
    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(Segment::size).sum()
    }
    fn active(&self) -> &Segment {
        // A partition always has at least one segment.
        &self.segments[self.segments.len() - 1]
    }

    /// Appends one built batch: assigns its base offset, rolls the segment when due, writes it.
    /// Returns the batch header with its assigned offsets.
    pub fn append(
        &mut self,
        batch_bytes: &mut [u8],
        config: &TopicConfig,
        now_ms: i64,
    ) -> io::Result<BatchHeader> {
        let base_offset = self.next_offset();
        batch::set_base_offset(batch_bytes, base_offset);
        let header = BatchHeader::parse(batch_bytes)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        if header.total_size() != batch_bytes.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "batch length does not match its header",
            ));
        }
        if self.roll_due(batch_bytes.len() as u64, config, now_ms) {
            self.roll()?;
        }
        let last = self.segments.len() - 1;
        self.segments[last].append(batch_bytes, &header, now_ms)?;
        if header.is_transactional() {
            let control = if header.is_control() {
                control_type_of(batch_bytes)
            } else {
                None
            };
            self.txn.on_batch(&header, control, Replaying::Append)?;
        }
        Ok(header)
    }

    /// Replays transactional batch headers from `from_offset` to the end into the
    /// transaction state (recovery).
    fn rebuild_txn_state(&mut self, from_offset: i64) -> Result<(), SegmentError> {
        let idx = match self
            .segments
            .partition_point(|s| s.base_offset() <= from_offset)
        {
            0 => 0,
            n => n - 1,
        };
        for segment in &self.segments[idx..] {
            let start = match segment.find_batch(from_offset, segment.size())? {
                Some(loc) => loc.position,
                None => continue,
            };
            for loc in segment.batches(start, segment.size())? {
                if !loc.header.is_transactional() {
                    continue;
                }
                let control = if loc.header.is_control() {
                    let mut bytes = vec![0u8; loc.header.total_size()];
                    crate::segment::read_full_at(segment.file(), &mut bytes, loc.position)?;
                    control_type_of(&bytes)
                } else {
                    None
                };
                self.txn
                    .on_batch(&loc.header, control, Replaying::RecoveryScan)?;
            }
        }
        // Everything on disk at open is durable now: markers found complete their transactions.
        self.txn.complete_markers(self.next_offset());
        Ok(())
    }

    /// Transaction state (open transactions, aborted ranges).
    pub fn txn(&self) -> &TxnState {
        &self.txn
    }
    pub fn txn_mut(&mut self) -> &mut TxnState {
        &mut self.txn
    }

    /// The offset below which no transaction is undecided, capped by `high_watermark`.
    pub fn last_stable_offset(&self, high_watermark: i64) -> i64 {
        self.txn
            .first_unstable_offset()
            .map_or(high_watermark, |f| f.min(high_watermark))
    }

    /// Aborted transactions a read_committed reader of `[start, end)` must skip.
    pub fn aborted_overlapping(&self, start: i64, end: i64) -> Vec<AbortedTxn> {
        self.txn.aborted_overlapping(start, end)
    }

    fn roll_due(&self, incoming: u64, config: &TopicConfig, now_ms: i64) -> bool {
        let active = self.active();
        if active.is_empty() {
            return false;
        }
        active.size() + incoming > config.segment_bytes
            || active
                .first_append_ms()
                .is_some_and(|t| now_ms - t >= config.segment_ms)
            || active.next_offset() - active.base_offset() >= i64::from(u32::MAX) - 1
    }

    /// Starts a new active segment at the log end offset.
    pub fn roll(&mut self) -> io::Result<()> {
        let next = self.next_offset();
        let last = self.segments.len() - 1;
        self.segments[last].seal()?;
        self.unsynced_rolled
            .push(self.segments[last].file().clone());
        let mut segment = Segment::create(&self.dir, next)?;
        if let Err(e) = sync_dir(&self.dir) {
            // Leave nothing half-made behind so that the next append can try again.
            let _ = segment.delete_files();
            return Err(e);
        }
        self.segments.push(segment);
        Ok(())
    }

    /// Files whose data a flush must sync: rolled segments not yet synced and the active one.
    pub fn files_to_sync(&mut self) -> Vec<std::sync::Arc<fs::File>> {
        let mut files = std::mem::take(&mut self.unsynced_rolled);
        files.push(self.active().file().clone());
        files.extend(self.txn.take_file_to_sync());
        files
    }

    /// Plans a read of whole batches starting with the one that holds `offset`, stopping before
    /// any batch that reaches `upper_exclusive`, with at most `max_bytes` (but always at least
    /// one batch, so a reader can make progress past a large batch).
    pub fn plan_read(
        &self,
        offset: i64,
        max_bytes: usize,
        upper_exclusive: i64,
    ) -> Result<Option<ReadPlan>, SegmentError> {
        if offset >= upper_exclusive {
            return Ok(None);
        }
        let idx = match self.segments.partition_point(|s| s.base_offset() <= offset) {
            0 => 0,
            n => n - 1,
        };
        for segment in &self.segments[idx..] {
            if segment.next_offset() <= offset || segment.is_empty() {
                continue;
            }
            let Some(first) = segment.find_batch(offset, segment.size())? else {
                continue;
            };
            if first.header.base_offset >= upper_exclusive
                || first.header.last_offset() >= upper_exclusive
            {
                return Ok(None);
            }
            let mut end = first.position + first.header.total_size() as u64;
            let limit = first.position + max_bytes as u64;
            if end < limit {
                let result =
                    crate::segment::scan(segment.file(), end, segment.size(), false, |loc| {
                        let loc_end = loc.position + loc.header.total_size() as u64;
                        if loc.header.last_offset() >= upper_exclusive || loc_end > limit {
                            return Err(SegmentError::Stop);
                        }
                        end = loc_end;
                        Ok(())
                    });
                match result {
                    Ok(()) | Err(SegmentError::Stop) => {}
                    Err(e) => return Err(e),
                }
            }
            return Ok(Some(ReadPlan {
                file: segment.file().clone(),
                start: first.position,
                end,
            }));
        }
        Ok(None)
    }

    /// The first batch with a record at or after `timestamp`, below `upper_exclusive`.
    pub fn find_by_time(&self, timestamp: i64) -> Result<Option<BatchLocation>, SegmentError> {
        for segment in &self.segments {
            if let Some(loc) = segment.find_batch_by_time(timestamp)? {
                return Ok(Some(loc));
            }
        }
        Ok(None)
    }

    /// The segments no longer appended to (all but the active one), oldest first.
    pub fn closed_segments(&self) -> Vec<ClosedSegment> {
        self.segments[..self.segments.len() - 1]
            .iter()
            .map(|s| ClosedSegment {
                base_offset: s.base_offset(),
                next_offset: s.next_offset(),
                size: s.size(),
                max_timestamp: s.max_timestamp(),
                file: s.file().clone(),
            })
            .collect()
    }

    /// Takes the `count` oldest segments out of the partition (never the active one): the log
    /// start offset moves to the next segment's base offset and aborted-transaction entries
    /// that ended before it are forgotten. The caller deletes the returned segments' files
    /// (outside the partition lock; readers holding their files keep reading them).
    pub fn detach_oldest(&mut self, count: usize) -> io::Result<Vec<Segment>> {
        let count = count.min(self.segments.len() - 1);
        if count == 0 {
            return Ok(Vec::new());
        }
        let removed: Vec<Segment> = self.segments.drain(..count).collect();
        self.log_start_offset = self.segments[0].base_offset().max(self.log_start_offset);
        self.cleaner.cleaned_until = self.cleaner.cleaned_until.max(self.log_start_offset);
        self.txn.prune_before(self.log_start_offset)?;
        Ok(removed)
    }

    /// Puts `replacement` (a compacted segment, already renamed into place) where the closed
    /// segments with base offsets `bases` were. Returns the replaced segments (their files are
    /// already gone from the directory).
    pub fn replace_segments(
        &mut self,
        bases: &[i64],
        replacement: Segment,
    ) -> io::Result<Vec<Segment>> {
        let start = self
            .segments
            .iter()
            .position(|s| Some(&s.base_offset()) == bases.first());
        let matches = start.is_some_and(|i| {
            i + bases.len() < self.segments.len()
                && self.segments[i..i + bases.len()]
                    .iter()
                    .zip(bases)
                    .all(|(s, b)| s.base_offset() == *b)
        });
        let (Some(start), true) = (start, matches) else {
            return Err(io::Error::other(format!(
                "segments {bases:?} changed while they were being compacted"
            )));
        };
        let replaced: Vec<Segment> = self
            .segments
            .splice(start..start + bases.len(), [replacement])
            .collect();
        Ok(replaced)
    }

    /// Deletes every file of the partition.
    pub fn delete_all(mut self) -> io::Result<()> {
        for seg in &mut self.segments {
            seg.delete_files()?;
        }
        fs::remove_dir_all(&self.dir)
    }
}

/// Completes or rolls back what an interrupted compaction left in a partition directory and
/// removes other leftovers; returns the base offsets of the segments (`.log` files), sorted.
///
/// - `*.cleaned`: a cleaned segment still being written when the process died; every original
///   is intact (they are only deleted once the `.swap` exists), so it is deleted.
/// - `<base>.log.swap`: a complete cleaned segment (fsynced before the rename that created it)
///   covering `[base, end)`, where `end` follows its last batch (compaction keeps each
///   segment's last offset). Every segment file with a base offset in that range is an original
///   it replaces, whether or not the crash already deleted it: those are deleted, then the swap
///   is renamed to `<base>.log` (its indexes are rebuilt when the segment is opened).
/// - `*.tmp` (an unfinished atomic write) and index files without a segment are deleted.
fn finish_interrupted_compaction(dir: &Path) -> Result<Vec<i64>, SegmentError> {
    let mut bases = BTreeSet::new();
    let mut index_stems = BTreeSet::new();
    let mut swaps = Vec::new();
    for entry in fs::read_dir(dir)? {
        let name = entry?.file_name();
        let name = name.to_string_lossy().into_owned();
        let number = |suffix: &str| {
            name.strip_suffix(suffix)
                .and_then(|s| s.parse::<i64>().ok())
        };
        if let Some(base) = number(".log") {
            bases.insert(base);
        } else if let Some(base) = number(".log.swap") {
            swaps.push(base);
        } else if let Some(base) = number(".index").or_else(|| number(".timeindex")) {
            index_stems.insert(base);
        } else if name.ends_with(".cleaned") || name.ends_with(".tmp") {
            tracing::info!(dir = %dir.display(), file = %name, "removing an unfinished file");
            fs::remove_file(dir.join(&name))?;
        }
    }
    swaps.sort_unstable();
    for base in swaps {
        let stem = file_stem(base);
        let swap_path = dir.join(format!("{stem}.log.swap"));
        let file = fs::File::open(&swap_path)?;
        let size = file.metadata()?.len();
        let mut end = base;
        crate::segment::for_each_batch(&file, 0, size, |_, bytes| {
            end = BatchHeader::parse(bytes)
                .map(|h| h.next_offset())
                .unwrap_or(end);
            Ok(())
        })
        .map_err(|e| SegmentError::Corrupt {
            offset: base,
            position: 0,
            detail: format!("the compacted segment {stem}.log.swap does not verify: {e}"),
        })?;
        drop(file);
        if end <= base {
            // Never written by the cleaner (its output always holds a batch); the originals
            // cannot have been touched.
            fs::remove_file(&swap_path)?;
            continue;
        }
        let replaced: Vec<i64> = bases
            .iter()
            .chain(index_stems.iter())
            .copied()
            .filter(|b| (base..end).contains(b))
            .collect::<BTreeSet<i64>>()
            .into_iter()
            .collect();
        for b in &replaced {
            remove_segment_files(dir, *b)?;
            bases.remove(b);
            index_stems.remove(b);
        }
        sync_dir(dir)?;
        fs::rename(&swap_path, dir.join(format!("{stem}.log")))?;
        sync_dir(dir)?;
        bases.insert(base);
        tracing::info!(
            dir = %dir.display(),
            base_offset = base,
            end_offset = end,
            replaced = replaced.len(),
            "completed a compaction interrupted by a crash"
        );
    }
    for stem in index_stems.difference(&bases) {
        remove_segment_files(dir, *stem)?;
    }
    Ok(bases.into_iter().collect())
}

/// Deletes a segment's `.log`, `.index` and `.timeindex` files (the log first: without it the
/// others are orphans that the next open removes). Missing files are fine.
pub fn remove_segment_files(dir: &Path, base_offset: i64) -> io::Result<()> {
    let stem = file_stem(base_offset);
    for ext in ["log", "index", "timeindex"] {
        match fs::remove_file(dir.join(format!("{stem}.{ext}"))) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// The marker type of a control batch's first record.
fn control_type_of(batch_bytes: &[u8]) -> Option<ControlType> {
    let decoded = DecodedBatch::decode(batch_bytes).ok()?;
    let records = decoded.records().ok()?;
    batch::control_type(records.first()?.key?)
}

/// fsyncs a directory so that file creations and renames in it are durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}
