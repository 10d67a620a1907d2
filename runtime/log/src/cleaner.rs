//! Retention and compaction of one partition (the log's cleaner thread and
//! [`crate::Log::run_cleaner_once`] call these for every partition).
//!
//! Both work on *closed* segments only (never the active one), read segment files through
//! their shared `Arc<File>` without holding the partition lock, and take the lock only for a
//! short snapshot and for the final in-memory swap, so appends are never blocked by the work.
//! Files are unlinked, never modified in place, so a reader holding an old file keeps reading
//! consistent bytes until it drops it.
//!
//! Retention (`cleanup.policy` containing `delete`) removes whole segments from the front of
//! the partition: a segment goes when it is entirely below the high watermark and the last
//! stable offset, and either its newest record is older than `now - retention.ms` or the
//! partition stays at least `retention.bytes` large without it (Kafka's rules; -1 disables
//! each). The log start offset moves to the next segment.
//!
//! Compaction (`cleanup.policy` containing `compact`) rewrites the cleanable prefix of the
//! closed segments, as Kafka's cleaner does:
//! - cleanable: closed segments entirely below the last stable offset (and high watermark)
//!   whose newest record is at least `min.compaction.lag.ms` old, from the log start;
//! - a map key -> offset of its newest record is built over that range, from committed data
//!   only (records of aborted transactions and control batches never enter it);
//! - a record survives when it has no key (Kafka refuses those in compacted topics; we keep
//!   them), or it is its key's newest record and is not an expired tombstone;
//! - tombstones (null value) and transaction markers use Kafka's delete horizon (KIP-534): the
//!   first pass that keeps one stamps its batch with `now + delete.retention.ms`; a pass at or
//!   after that horizon removes it. A marker is removable only once no record of its
//!   transaction is left before it (so recovery never sees data of a transaction without
//!   its outcome);
//! - data of aborted transactions is removed;
//! - surviving records keep their offsets; a rewritten batch starts at its first survivor and
//!   keeps its original last offset; a group whose last batch vanished ends with an empty
//!   batch covering it, so every cleaned segment ends exactly where the originals ended.
//!
//! Consecutive cleanable segments are grouped (up to `segment.bytes`) and each group is
//! replaced with the crash-safe swap protocol: write `<base>.log.cleaned` and fsync it; rename
//! it to `<base>.log.swap` and fsync the directory (commit point); delete the originals and
//! fsync the directory; rename the swap to `<base>.log` and fsync the directory; rebuild its
//! indexes (atomically). `Partition::open` completes the protocol from any point.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
#[cfg(test)]
use std::sync::Arc;
use std::sync::Mutex;

use crate::batch::{self, BatchHeader, DecodedBatch};
use crate::config::TopicConfig;
use crate::partition::{remove_segment_files, sync_dir, ClosedSegment, Partition};
use crate::segment::{file_stem, for_each_batch, Segment, SegmentError};
use crate::txn::AbortedTxn;

/// What a cleaner run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CleanerStats {
    /// Segments removed by retention.
    pub segments_deleted: u64,
    /// Bytes removed by retention.
    pub bytes_deleted: u64,
    /// Partitions compacted (a pass that rewrote at least one group).
    pub partitions_compacted: u64,
    /// Groups of segments replaced by a cleaned segment.
    pub segments_rewritten: u64,
    /// Records removed by compaction.
    pub records_removed: u64,
    /// Bytes saved by compaction.
    pub bytes_saved: u64,
}

impl CleanerStats {
    pub fn add(&mut self, other: &CleanerStats) {
        self.segments_deleted += other.segments_deleted;
        self.bytes_deleted += other.bytes_deleted;
        self.partitions_compacted += other.partitions_compacted;
        self.segments_rewritten += other.segments_rewritten;
        self.records_removed += other.records_removed;
        self.bytes_saved += other.bytes_saved;
    }
}

/// A point of the swap protocol where a test can make compaction stop, leaving the files as a
/// crash there would (the in-memory partition is left alone and the partition is not cleaned
/// again until the log is reopened).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwapStep {
    /// `<base>.log.cleaned` written and synced, not renamed.
    Cleaned,
    /// Renamed to `<base>.log.swap`; every original still present.
    Swapped,
    /// The first original segment's files deleted, the others still present.
    FirstOriginalDeleted,
    /// Every original deleted; the swap not yet renamed.
    OriginalsDeleted,
    /// The swap renamed to `<base>.log`; its indexes not yet written.
    Renamed,
}

/// Why a compaction stopped.
#[derive(Debug)]
pub(crate) enum CleanError {
    /// Failed before the swap's commit point: nothing changed on disk (the `.cleaned` file is
    /// removed) and the pass may be retried.
    BeforeSwap(io::Error),
    /// Failed (or was stopped by a test) after the commit point: the directory holds a
    /// protocol state that the next open completes; the partition is left alone until then.
    AfterSwap(io::Error),
}

/// Inputs of one compaction of one partition.
pub(crate) struct CompactionInput<'a> {
    pub config: &'a TopicConfig,
    pub now: i64,
    pub high_watermark: i64,
    pub min_dirty_ratio: f64,
    /// Set when the log closes: the pass gives up before its next commit point.
    pub stop: &'a AtomicBool,
    pub stop_at: Option<SwapStep>,
}

fn lock(m: &Mutex<Partition>) -> std::sync::MutexGuard<'_, Partition> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The time retention and the compaction lag judge a segment by: its newest record's
/// timestamp, or the file's modification time when no record has one (as Kafka).
fn segment_time(s: &ClosedSegment) -> i64 {
    if s.max_timestamp >= 0 {
        return s.max_timestamp;
    }
    s.file
        .metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(-1, |d| d.as_millis() as i64)
}

/// Applies `retention.ms` and `retention.bytes` to a partition. Returns (segments, bytes)
/// removed.
pub(crate) fn retain(
    state: &Mutex<Partition>,
    high_watermark: i64,
    config: &TopicConfig,
    now: i64,
) -> io::Result<(u64, u64)> {
    if !config.cleanup_policy.deletes() || (config.retention_ms < 0 && config.retention_bytes < 0) {
        return Ok((0, 0));
    }
    let (removed, dir) = {
        let mut p = lock(state);
        let limit = p.last_stable_offset(high_watermark);
        let mut total = p.size_bytes();
        let mut count = 0;
        for s in p.closed_segments() {
            if s.next_offset > limit {
                break;
            }
            let by_time = config.retention_ms >= 0 && now - segment_time(&s) > config.retention_ms;
            let by_size = config.retention_bytes >= 0
                && total.saturating_sub(s.size) >= config.retention_bytes as u64;
            if !(by_time || by_size) {
                break;
            }
            total -= s.size;
            count += 1;
        }
        (p.detach_oldest(count)?, p.dir().to_owned())
    };
    let mut bytes = 0;
    let segments = removed.len() as u64;
    for mut segment in removed {
        bytes += segment.size();
        tracing::info!(
            dir = %dir.display(),
            base_offset = segment.base_offset(),
            next_offset = segment.next_offset(),
            "retention deleted a segment"
        );
        segment.delete_files()?;
    }
    Ok((segments, bytes))
}

/// What to do with one batch of a cleanable segment.
enum Verdict {
    Keep,
    Rewrite(Vec<u8>),
    Drop,
}

/// The per-pass state of a compaction, carried across groups in offset order.
struct Pass<'a> {
    now: i64,
    delete_retention_ms: i64,
    latest: HashMap<Vec<u8>, i64>,
    aborted: &'a AbortedIndex,
    /// Per producer: whether a record of its current transaction survives so far.
    txn_data_kept: HashMap<i64, bool>,
    next_horizon: Option<i64>,
    records_removed: u64,
}

/// Aborted ranges by producer id.
type AbortedIndex = HashMap<i64, Vec<(i64, i64)>>;

fn index_aborted(aborted: &[AbortedTxn]) -> AbortedIndex {
    let mut index: AbortedIndex = HashMap::new();
    for a in aborted {
        index
            .entry(a.producer_id)
            .or_default()
            .push((a.first_offset, a.last_offset));
    }
    index
}

/// Whether a data batch belongs to an aborted transaction (the reader's rule: its base offset
/// lies in an aborted range of its producer).
fn is_aborted(aborted: &AbortedIndex, h: &BatchHeader) -> bool {
    h.is_transactional()
        && !h.is_control()
        && aborted.get(&h.producer_id).is_some_and(|ranges| {
            ranges
                .iter()
                .any(|(first, last)| *first <= h.base_offset && h.base_offset <= *last)
        })
}

impl Pass<'_> {
    fn note_horizon(&mut self, horizon: i64) {
        self.next_horizon = Some(self.next_horizon.map_or(horizon, |h| h.min(horizon)));
    }

    fn judge(&mut self, bytes: &[u8]) -> Result<Verdict, batch::BatchError> {
        let decoded = DecodedBatch::decode(bytes)?;
        let h = decoded.header;
        if h.is_control() {
            let data_kept = self.txn_data_kept.remove(&h.producer_id).unwrap_or(false);
            if data_kept {
                return Ok(Verdict::Keep);
            }
            return Ok(match h.delete_horizon() {
                Some(horizon) if horizon <= self.now => {
                    self.records_removed += h.record_count as u64;
                    Verdict::Drop
                }
                Some(horizon) => {
                    self.note_horizon(horizon);
                    Verdict::Keep
                }
                None => {
                    let horizon = self.now.saturating_add(self.delete_retention_ms);
                    self.note_horizon(horizon);
                    let keep = vec![true; h.record_count.max(0) as usize];
                    match decoded.rebuild(&keep, Some(horizon))? {
                        Some(b) => Verdict::Rewrite(b),
                        None => Verdict::Keep,
                    }
                }
            });
        }
        if is_aborted(self.aborted, &h) {
            self.records_removed += h.record_count as u64;
            return Ok(Verdict::Drop);
        }
        let records = decoded.records()?;
        let mut keep = Vec::with_capacity(records.len());
        let mut kept_tombstone = false;
        for r in &records {
            let Some(key) = r.key else {
                keep.push(true);
                continue;
            };
            if self.latest.get(key) != Some(&r.offset) {
                keep.push(false);
                continue;
            }
            if r.value.is_some() {
                keep.push(true);
                continue;
            }
            let expired = h.delete_horizon().is_some_and(|t| t <= self.now);
            keep.push(!expired);
            kept_tombstone |= !expired;
        }
        let kept = keep.iter().filter(|k| **k).count();
        self.records_removed += (records.len() - kept) as u64;
        if h.is_transactional() {
            *self.txn_data_kept.entry(h.producer_id).or_insert(false) |= kept > 0;
        }
        if kept == 0 {
            return Ok(Verdict::Drop);
        }
        let horizon = if kept_tombstone {
            let horizon = h
                .delete_horizon()
                .unwrap_or_else(|| self.now.saturating_add(self.delete_retention_ms));
            self.note_horizon(horizon);
            Some(horizon)
        } else {
            None
        };
        if kept == records.len() && (horizon.is_none() || horizon == h.delete_horizon()) {
            return Ok(Verdict::Keep);
        }
        Ok(match decoded.rebuild(&keep, horizon)? {
            Some(b) => Verdict::Rewrite(b),
            None => Verdict::Drop,
        })
    }
}

fn corrupt(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

fn seg_io(e: SegmentError) -> io::Error {
    match e {
        SegmentError::Io(e) => e,
        other => corrupt(other),
    }
}

/// Compacts a partition if it has something to clean. Returns the stats of the pass.
pub(crate) fn compact(
    state: &Mutex<Partition>,
    input: &CompactionInput<'_>,
) -> Result<CleanerStats, CleanError> {
    let mut stats = CleanerStats::default();
    let config = input.config;
    if !config.cleanup_policy.compacts() {
        return Ok(stats);
    }
    let (closed, lso, aborted, mark, dir) = {
        let p = lock(state);
        (
            p.closed_segments(),
            p.last_stable_offset(input.high_watermark),
            index_aborted(&p.txn().aborted_overlapping(i64::MIN, i64::MAX)),
            p.cleaner,
            p.dir().to_owned(),
        )
    };
    let lag_limit = input.now.saturating_sub(config.min_compaction_lag_ms);
    let cleanable: Vec<ClosedSegment> = closed
        .into_iter()
        .take_while(|s| {
            // As Kafka: without a lag, timestamps (possibly in the future) do not matter.
            s.next_offset <= lso
                && (config.min_compaction_lag_ms <= 0 || segment_time(s) <= lag_limit)
        })
        .collect();
    let Some(last) = cleanable.last() else {
        return Ok(stats);
    };
    let end = last.next_offset;
    let total: u64 = cleanable.iter().map(|s| s.size).sum();
    let dirty: u64 = cleanable
        .iter()
        .filter(|s| s.next_offset > mark.cleaned_until)
        .map(|s| s.size)
        .sum();
    let ratio_due = dirty > 0 && dirty as f64 >= input.min_dirty_ratio * total as f64;
    let horizon_due = mark.next_horizon.is_some_and(|h| h <= input.now);
    if !ratio_due && !horizon_due {
        return Ok(stats);
    }

    // The newest offset of every key in the cleanable range (committed data only).
    let mut latest: HashMap<Vec<u8>, i64> = HashMap::new();
    for s in &cleanable {
        for_each_batch(&s.file, 0, s.size, |_, bytes| {
            let h = BatchHeader::parse(bytes).map_err(|e| SegmentError::Batch {
                position: 0,
                source: e,
            })?;
            if h.is_control() || is_aborted(&aborted, &h) {
                return Ok(());
            }
            let decoded = DecodedBatch::decode(bytes).map_err(|e| SegmentError::Batch {
                position: 0,
                source: e,
            })?;
            for r in decoded.records().map_err(|e| SegmentError::Batch {
                position: 0,
                source: e,
            })? {
                if let Some(k) = r.key {
                    match latest.get_mut(k) {
                        Some(o) => *o = r.offset,
                        None => {
                            latest.insert(k.to_vec(), r.offset);
                        }
                    }
                }
            }
            Ok(())
        })
        .map_err(|e| CleanError::BeforeSwap(seg_io(e)))?;
    }

    let mut pass = Pass {
        now: input.now,
        delete_retention_ms: config.delete_retention_ms,
        latest,
        aborted: &aborted,
        txn_data_kept: HashMap::new(),
        next_horizon: None,
        records_removed: 0,
    };
    for group in groups(&cleanable, config.segment_bytes) {
        if input.stop.load(Ordering::Acquire) {
            return Ok(stats);
        }
        let before = pass.records_removed;
        let rewritten = clean_group(state, &dir, group, &mut pass, input)?;
        if let Some(saved) = rewritten {
            stats.segments_rewritten += 1;
            stats.bytes_saved += saved;
            stats.records_removed += pass.records_removed - before;
        }
    }
    if stats.segments_rewritten > 0 {
        stats.partitions_compacted = 1;
    }
    let mut p = lock(state);
    p.cleaner.cleaned_until = end;
    p.cleaner.next_horizon = pass.next_horizon;
    Ok(stats)
}

/// Consecutive segments whose total size stays within `segment.bytes` (at least one each) and
/// whose offsets fit a segment's 32-bit relative offsets.
fn groups(cleanable: &[ClosedSegment], segment_bytes: u64) -> Vec<&[ClosedSegment]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut size = 0u64;
    for (i, s) in cleanable.iter().enumerate() {
        let span = s.next_offset - cleanable[start].base_offset;
        if i > start && (size + s.size > segment_bytes || span >= i64::from(i32::MAX)) {
            out.push(&cleanable[start..i]);
            start = i;
            size = 0;
        }
        size += s.size;
    }
    if start < cleanable.len() {
        out.push(&cleanable[start..]);
    }
    out
}

/// Cleans one group; replaces it when anything changed. Returns the bytes saved when it was
/// replaced.
fn clean_group(
    state: &Mutex<Partition>,
    dir: &Path,
    group: &[ClosedSegment],
    pass: &mut Pass<'_>,
    input: &CompactionInput<'_>,
) -> Result<Option<u64>, CleanError> {
    let base = group[0].base_offset;
    let group_end = group[group.len() - 1].next_offset;
    let stem = file_stem(base);
    let cleaned_path = dir.join(format!("{stem}.log.cleaned"));
    let swap_path = dir.join(format!("{stem}.log.swap"));
    let before = |e: io::Error| {
        let _ = fs::remove_file(&cleaned_path);
        CleanError::BeforeSwap(e)
    };
    let file = File::create(&cleaned_path).map_err(before)?;
    let mut out = BufWriter::with_capacity(1024 * 1024, file);
    let mut changed = false;
    let mut written_end = base;
    let mut written_bytes = 0u64;
    // An empty batch dropped last: written back as is when it still ends the group.
    let mut deferred_empty: Option<Vec<u8>> = None;
    let mut last_dropped: Option<BatchHeader> = None;
    let mut write_err: Option<io::Error> = None;
    for s in group {
        for_each_batch(&s.file, 0, s.size, |_, bytes| {
            if input.stop.load(Ordering::Acquire) {
                return Err(SegmentError::Stop);
            }
            let h = BatchHeader::parse(bytes).map_err(|e| SegmentError::Batch {
                position: 0,
                source: e,
            })?;
            let empty_placeholder = h.record_count == 0 && !h.is_control();
            let verdict = if empty_placeholder {
                Verdict::Drop
            } else {
                pass.judge(bytes).map_err(|e| SegmentError::Batch {
                    position: 0,
                    source: e,
                })?
            };
            let output: Option<&[u8]>;
            let rewritten;
            match verdict {
                Verdict::Keep => output = Some(bytes),
                Verdict::Rewrite(b) => {
                    changed = true;
                    rewritten = b;
                    output = Some(&rewritten);
                }
                Verdict::Drop => {
                    if deferred_empty.take().is_some() {
                        changed = true;
                    }
                    if empty_placeholder {
                        deferred_empty = Some(bytes.to_vec());
                    } else {
                        changed = true;
                    }
                    last_dropped = Some(h);
                    return Ok(());
                }
            }
            if deferred_empty.take().is_some() {
                changed = true;
            }
            if let Some(b) = output {
                if let Err(e) = out.write_all(b) {
                    write_err = Some(e);
                    return Err(SegmentError::Stop);
                }
                written_bytes += b.len() as u64;
                written_end = BatchHeader::parse(b).map_or(written_end, |h| h.next_offset());
            }
            Ok(())
        })
        .map_err(|e| match (e, write_err.take()) {
            (_, Some(w)) => before(w),
            (SegmentError::Stop, None) => before(io::Error::new(
                io::ErrorKind::Interrupted,
                "the log is closing",
            )),
            (e, None) => before(seg_io(e)),
        })?;
    }
    if written_end < group_end {
        // The group's last batches are gone: keep its end offset with an empty batch.
        let placeholder = match (deferred_empty.take(), last_dropped) {
            (Some(b), _) if BatchHeader::parse(&b).is_ok_and(|h| h.next_offset() == group_end) => b,
            (_, Some(h)) => {
                changed = true;
                batch::empty_batch(h.base_offset, group_end - 1, h.max_timestamp)
            }
            (_, None) => {
                changed = true;
                batch::empty_batch(written_end, group_end - 1, -1)
            }
        };
        out.write_all(&placeholder).map_err(before)?;
        written_bytes += placeholder.len() as u64;
    } else if deferred_empty.is_some() {
        changed = true;
    }
    if !changed {
        drop(out);
        let _ = fs::remove_file(&cleaned_path);
        return Ok(None);
    }
    let file = out.into_inner().map_err(|e| before(e.into_error()))?;
    file.sync_all().map_err(before)?;
    drop(file);
    let stop_at = |step: SwapStep| -> Result<(), CleanError> {
        if input.stop_at == Some(step) {
            return Err(CleanError::AfterSwap(io::Error::other(format!(
                "compaction stopped at {step:?} (test)"
            ))));
        }
        Ok(())
    };
    if input.stop_at == Some(SwapStep::Cleaned) {
        // Leave the `.cleaned` file, as a crash would.
        return Err(CleanError::AfterSwap(io::Error::other(
            "compaction stopped at Cleaned (test)",
        )));
    }
    fs::rename(&cleaned_path, &swap_path).map_err(before)?;
    // Commit point once durable: from here on, recovery completes the swap.
    sync_dir(dir).map_err(CleanError::AfterSwap)?;
    stop_at(SwapStep::Swapped)?;
    let bases: Vec<i64> = group.iter().map(|s| s.base_offset).collect();
    for (i, b) in bases.iter().enumerate() {
        remove_segment_files(dir, *b).map_err(CleanError::AfterSwap)?;
        if i == 0 && bases.len() > 1 {
            stop_at(SwapStep::FirstOriginalDeleted)?;
        }
    }
    sync_dir(dir).map_err(CleanError::AfterSwap)?;
    stop_at(SwapStep::OriginalsDeleted)?;
    fs::rename(&swap_path, dir.join(format!("{stem}.log"))).map_err(CleanError::AfterSwap)?;
    sync_dir(dir).map_err(CleanError::AfterSwap)?;
    stop_at(SwapStep::Renamed)?;
    let (segment, _) =
        Segment::open(dir, base, None).map_err(|e| CleanError::AfterSwap(seg_io(e)))?;
    if segment.next_offset() != group_end {
        return Err(CleanError::AfterSwap(corrupt(format!(
            "the compacted segment {stem} ends at {}, not {group_end}",
            segment.next_offset()
        ))));
    }
    let replaced = lock(state)
        .replace_segments(&bases, segment)
        .map_err(CleanError::AfterSwap)?;
    let old_bytes: u64 = replaced.iter().map(Segment::size).sum();
    tracing::info!(
        dir = %dir.display(),
        base_offset = base,
        end_offset = group_end,
        segments = bases.len(),
        bytes_before = old_bytes,
        bytes_after = written_bytes,
        "compacted segments"
    );
    Ok(Some(old_bytes.saturating_sub(written_bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{BatchBuilder, Compression, ProducerFields};
    use crate::segment::read_full_at;

    #[test]
    fn readers_of_replaced_segments_keep_reading_the_old_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let config = TopicConfig {
            segment_bytes: 600,
            ..TopicConfig::compacted()
        };
        let mut p = Partition::create(dir.path()).unwrap();
        for round in 0..8 {
            let mut b = BatchBuilder::new(Compression::None, ProducerFields::default());
            let v = format!("round-{round}-{}", "x".repeat(80));
            b.append(round, Some(b"a"), Some(v.as_bytes()), &[]);
            b.append(round, Some(b"b"), Some(v.as_bytes()), &[]);
            let mut bytes = b.build().unwrap();
            p.append(&mut bytes, &config, 0).unwrap();
        }
        assert!(p.segments().len() > 2);
        let hw = p.next_offset();
        let old_plan = p.plan_read(0, 1 << 20, hw).unwrap().unwrap();
        let state = Mutex::new(p);
        let stop = AtomicBool::new(false);
        let input = CompactionInput {
            config: &config,
            now: 0,
            high_watermark: hw,
            min_dirty_ratio: 0.0,
            stop: &stop,
            stop_at: None,
        };
        let stats = compact(&state, &input).unwrap();
        assert!(stats.segments_rewritten > 0 && stats.records_removed > 0);
        // The reader's file is unlinked but still holds the original records.
        let mut bytes = vec![0u8; (old_plan.end - old_plan.start) as usize];
        read_full_at(&old_plan.file, &mut bytes, old_plan.start).unwrap();
        let first = DecodedBatch::decode(&bytes).unwrap();
        let records = first.records().unwrap();
        assert_eq!(records[0].offset, 0);
        assert!(records[0].value.unwrap().starts_with(b"round-0-"));
        // New readers get the compacted segment: offset 0 is gone, later offsets are kept.
        let p = lock(&state);
        let new_plan = p.plan_read(0, 1 << 20, hw).unwrap().unwrap();
        let mut bytes = vec![0u8; (new_plan.end - new_plan.start) as usize];
        read_full_at(&new_plan.file, &mut bytes, new_plan.start).unwrap();
        let mut pos = 0;
        let mut offsets = Vec::new();
        while pos < bytes.len() {
            let d = DecodedBatch::decode(&bytes[pos..]).unwrap();
            offsets.extend(d.records().unwrap().iter().map(|r| r.offset));
            pos += d.header.total_size();
        }
        assert!(
            !offsets.contains(&0),
            "offset 0 was compacted away: {offsets:?}"
        );
        assert!(!Arc::ptr_eq(&old_plan.file, &new_plan.file));
    }

    fn seg(base: i64, next: i64, size: u64) -> ClosedSegment {
        ClosedSegment {
            base_offset: base,
            next_offset: next,
            size,
            max_timestamp: 0,
            file: std::sync::Arc::new(tempfile::tempfile().unwrap()),
        }
    }

    #[test]
    fn groups_fill_up_to_segment_bytes() {
        let segs = vec![
            seg(0, 10, 400),
            seg(10, 20, 500),
            seg(20, 30, 200),
            seg(30, 40, 900),
            seg(40, 50, 50),
        ];
        let g = groups(&segs, 1000);
        let bases: Vec<Vec<i64>> = g
            .iter()
            .map(|g| g.iter().map(|s| s.base_offset).collect())
            .collect();
        assert_eq!(bases, vec![vec![0, 10], vec![20], vec![30, 40]]);
        let g = groups(&segs[..1], 10);
        assert_eq!(g.len(), 1, "an oversized segment is a group of its own");
    }
}
