//! One partition of a topic: an ordered list of segments, the last one active.
//!
//! Invariants:
//! - segments are sorted by base offset, contiguous in offsets (a segment's base offset is at
//!   or after the previous segment's next offset; compaction may leave gaps), and only the last
//!   one is appended to;
//! - `next_offset()` (the log end offset) only grows, except when recovery truncates data that
//!   was never durable;
//! - every batch appended gets consecutive offsets starting at the log end offset.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::batch::{self, BatchHeader, ControlType, DecodedBatch};
use crate::config::TopicConfig;
use crate::segment::{BatchLocation, Segment, SegmentError, TailRecovery};
use crate::txn::{AbortedTxn, TxnState};

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
        let mut bases: Vec<i64> = Vec::new();
        for entry in fs::read_dir(dir)? {
            let name = entry?.file_name();
            let name = name.to_string_lossy();
            if let Some(stem) = name.strip_suffix(".log") {
                if let Ok(base) = stem.parse::<i64>() {
                    bases.push(base);
                }
            } else if name.ends_with(".cleaned") || name.ends_with(".swap") {
                // Leftovers of an interrupted compaction: the originals are intact.
                fs::remove_file(dir.join(name.as_ref()))?;
            }
        }
        bases.sort_unstable();
        if bases.is_empty() {
            let p = Partition::create(dir)?;
            return Ok((p, TailRecovery::default()));
        }
        let mut segments = Vec::with_capacity(bases.len());
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
            let (segment, tail) =
                Segment::open(dir, base, needs_recovery.then_some(recovery_point))?;
            if tail.truncated_bytes > 0 {
                recovery.truncated_bytes += tail.truncated_bytes;
                recovery.reason = tail.reason;
                truncated_here = next_base.is_some();
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
            self.txn.on_batch(&header, control)?;
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
                self.txn.on_batch(&loc.header, control)?;
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
        let segment = Segment::create(&self.dir, next)?;
        sync_dir(&self.dir)?;
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

    /// Deletes the oldest segments for which `delete` says yes, never the active one; stops at
    /// the first segment kept. Returns the number deleted.
    pub fn delete_old_segments(
        &mut self,
        mut delete: impl FnMut(&Segment, u64) -> bool,
    ) -> io::Result<usize> {
        let mut deleted = 0;
        let mut remaining: u64 = self.size_bytes();
        while self.segments.len() > 1 {
            if !delete(&self.segments[0], remaining) {
                break;
            }
            let mut seg = self.segments.remove(0);
            remaining -= seg.size();
            seg.delete_files()?;
            deleted += 1;
        }
        if deleted > 0 {
            self.log_start_offset = self.segments[0].base_offset().max(self.log_start_offset);
        }
        Ok(deleted)
    }

    /// Deletes every file of the partition.
    pub fn delete_all(mut self) -> io::Result<()> {
        for seg in &mut self.segments {
            seg.delete_files()?;
        }
        fs::remove_dir_all(&self.dir)
    }
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
