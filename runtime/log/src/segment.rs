//! One segment of a partition: a file of consecutive RecordBatch v2 batches named by its base
//! offset (`00000000000000000042.log`), with its sparse offset and time indexes.
//!
//! Invariants:
//! - batches in the file are contiguous, in increasing offset order, and each one verifies;
//!   `size` is the end of the last complete batch and nothing past it is ever read;
//! - a segment is appended to only while it is the partition's active (last) segment;
//! - readers share the file through an `Arc<File>` and use positional reads, so appends,
//!   rolls and deletions never invalidate a read in progress.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch::{self, BatchError, BatchHeader, HEADER_SIZE};
use crate::index::SegmentIndex;

/// Append an offset index entry every this many bytes of batches.
pub const INDEX_INTERVAL_BYTES: u64 = 4096;
const SCAN_CHUNK: usize = 8 * 1024 * 1024;

/// File name stem of a segment with this base offset.
pub fn file_stem(base_offset: i64) -> String {
    format!("{base_offset:020}")
}

/// What opening a segment found at its tail.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TailRecovery {
    /// Bytes removed from the end of the file (a torn or unfinished write).
    pub truncated_bytes: u64,
    /// Why the first removed byte could not be read as a batch.
    pub reason: Option<String>,
}

/// A batch found by scanning: its header and file position.
#[derive(Clone, Copy, Debug)]
pub struct BatchLocation {
    pub position: u64,
    pub header: BatchHeader,
}

#[derive(Debug)]
pub struct Segment {
    base_offset: i64,
    log_path: PathBuf,
    file: Arc<File>,
    size: u64,
    next_offset: i64,
    max_timestamp: i64,
    index: SegmentIndex,
    bytes_since_index: u64,
    /// Wall-clock milliseconds when the first batch was appended (for `segment.ms`).
    first_append_ms: Option<i64>,
}

impl Segment {
    /// Creates a new, empty segment file (failing if one exists).
    pub fn create(dir: &Path, base_offset: i64) -> io::Result<Segment> {
        let stem = file_stem(base_offset);
        let log_path = dir.join(format!("{stem}.log"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&log_path)?;
        let index = match SegmentIndex::create(
            &dir.join(format!("{stem}.index")),
            &dir.join(format!("{stem}.timeindex")),
        ) {
            Ok(index) => index,
            Err(e) => {
                // Leave nothing behind, so that a retry can create the segment again.
                drop(file);
                let _ = std::fs::remove_file(&log_path);
                for ext in ["index", "timeindex"] {
                    let _ = std::fs::remove_file(dir.join(format!("{stem}.{ext}")));
                }
                return Err(e);
            }
        };
        Ok(Segment {
            base_offset,
            log_path,
            file: Arc::new(file),
            size: 0,
            next_offset: base_offset,
            max_timestamp: -1,
            index,
            bytes_since_index: 0,
            first_append_ms: None,
        })
    }

    /// Opens an existing segment.
    ///
    /// With `recover_from = Some(recovery_point)` every batch is verified (CRC included) and the
    /// file is cut at the first batch that does not verify, provided that batch starts at or
    /// after `recovery_point` (the offset up to which data was known durable). A bad batch below
    /// the recovery point is damage to durable data and is reported as
    /// [`SegmentError::Corrupt`], never skipped. With `None`, indexes are loaded when consistent,
    /// else rebuilt by scanning batch headers.
    pub fn open(
        dir: &Path,
        base_offset: i64,
        recover_from: Option<i64>,
    ) -> Result<(Segment, TailRecovery), SegmentError> {
        Self::open_with(dir, base_offset, recover_from, true)
    }

    /// [`Segment::open`]; `durable_index` says whether rebuilt index files must be fsynced
    /// (not needed for the active segment: every open rebuilds its indexes, and rolling it
    /// syncs them).
    pub fn open_with(
        dir: &Path,
        base_offset: i64,
        recover_from: Option<i64>,
        durable_index: bool,
    ) -> Result<(Segment, TailRecovery), SegmentError> {
        let recover_tail = recover_from.is_some();
        let stem = file_stem(base_offset);
        let log_path = dir.join(format!("{stem}.log"));
        let offset_path = dir.join(format!("{stem}.index"));
        let time_path = dir.join(format!("{stem}.timeindex"));
        let file = OpenOptions::new().read(true).write(true).open(&log_path)?;
        let file_size = file.metadata()?.len();
        let mut segment = Segment {
            base_offset,
            log_path,
            file: Arc::new(file),
            size: 0,
            next_offset: base_offset,
            max_timestamp: -1,
            index: SegmentIndex::in_memory(&offset_path, &time_path),
            bytes_since_index: 0,
            first_append_ms: None,
        };
        let mut recovery = TailRecovery::default();
        if !recover_tail {
            if let Some(index) = SegmentIndex::load(&offset_path, &time_path, file_size)? {
                // Trust the complete file; find the end offset from the last indexed batch on.
                let start = index
                    .offset_entries()
                    .last()
                    .map_or(0, |e| u64::from(e.position));
                segment.index = index;
                let mut last = None;
                let mut max_timestamp = segment.index.max_timestamp().unwrap_or(-1);
                let scanned = scan(&segment.file, start, file_size, false, |loc| {
                    max_timestamp = max_timestamp.max(loc.header.max_timestamp);
                    last = Some(loc);
                    Ok(())
                });
                if scanned.is_ok() {
                    segment.size = file_size;
                    if let Some(loc) = last {
                        segment.next_offset = loc.header.next_offset();
                    }
                    segment.max_timestamp = max_timestamp;
                    return Ok((segment, recovery));
                }
                // The index does not fit the segment (its last entry is not at a batch):
                // rebuild it from the segment below.
                segment.index = SegmentIndex::in_memory(&offset_path, &time_path);
            }
        }
        // Rebuild the indexes (and verify, when recovering) from the whole file.
        let mut locations = Vec::new();
        let outcome = scan(&segment.file, 0, file_size, recover_tail, |loc| {
            locations.push(loc);
            Ok(())
        });
        let good_end = locations
            .last()
            .map_or(0, |l| l.position + l.header.total_size() as u64);
        if let Err(problem) = outcome {
            if !recover_tail {
                return Err(problem);
            }
            let offset = locations
                .last()
                .map_or(base_offset, |l| l.header.next_offset());
            if offset < recover_from.unwrap_or(i64::MAX) {
                return Err(SegmentError::Corrupt {
                    offset,
                    position: good_end,
                    detail: problem.to_string(),
                });
            }
            recovery.reason = Some(problem.to_string());
        }
        if good_end < file_size {
            recovery.truncated_bytes = file_size - good_end;
            if recovery.reason.is_none() {
                recovery.reason = Some("incomplete batch at the end of the segment".into());
            }
            segment.file.set_len(good_end)?;
            segment.file.sync_all()?;
        }
        segment.size = 0;
        for loc in locations {
            segment.note_appended(loc.position, &loc.header)?;
        }
        segment.size = good_end;
        // Written whole and atomically: a crash never leaves a partial index to be trusted.
        if let Err(e) = segment.index.rewrite_with(durable_index) {
            if !crate::log::is_out_of_space(&e) {
                return Err(e.into());
            }
            // The index files are a cache: a full disk must not keep the log from opening.
            // The index stays in memory; its stale files go, so that no later open trusts
            // them (the next open with room writes them again).
            tracing::warn!(
                segment = %segment.log_path.display(),
                error = %e,
                "no room to write the segment's rebuilt index files; keeping the index in memory"
            );
            segment.index.delete_files()?;
        }
        Ok((segment, recovery))
    }

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    /// The offset after the last batch (the base offset when empty).
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }
    pub fn size(&self) -> u64 {
        self.size
    }
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }
    pub fn first_append_ms(&self) -> Option<i64> {
        self.first_append_ms
    }
    pub fn file(&self) -> &Arc<File> {
        &self.file
    }
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Appends a complete, verified batch whose base offset is already assigned.
    pub fn append(&mut self, bytes: &[u8], header: &BatchHeader, now_ms: i64) -> io::Result<()> {
        let position = self.size;
        if let Err(e) = self.file.write_all_at(bytes, position) {
            // Best effort: drop a partial write (e.g. the disk filled up mid-batch) so the file
            // ends with the last complete batch again. Recovery would cut it anyway.
            let _ = self.file.set_len(position);
            return Err(e);
        }
        if self.first_append_ms.is_none() {
            self.first_append_ms = Some(now_ms);
        }
        self.note_appended(position, header)?;
        self.size = position + bytes.len() as u64;
        Ok(())
    }

    fn note_appended(&mut self, position: u64, header: &BatchHeader) -> io::Result<()> {
        let relative_last =
            u32::try_from(header.last_offset() - self.base_offset).unwrap_or(u32::MAX);
        self.max_timestamp = self.max_timestamp.max(header.max_timestamp);
        // Both indexes get an entry every INDEX_INTERVAL_BYTES of batches, as Kafka's do: the
        // time index's entry is the largest timestamp so far. (An entry per batch whose
        // timestamp grew made the in-memory time index grow with the batch count: a stream of
        // single-row commits, each a batch and a marker, gave it ~100 MB per GiB of log.)
        if self.bytes_since_index >= INDEX_INTERVAL_BYTES || position == 0 {
            self.index
                .add_offset(relative_last, u32::try_from(position).unwrap_or(u32::MAX))?;
            self.index.add_time(self.max_timestamp, relative_last)?;
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += header.total_size() as u64;
        self.next_offset = header.next_offset();
        Ok(())
    }

    /// Makes the file's data durable.
    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// Flushes the indexes too (when the segment stops being active).
    pub fn seal(&mut self) -> io::Result<()> {
        self.file.sync_data()?;
        self.index.sync()
    }

    /// The first batch whose last offset is at or after `offset`, if any (scans from the
    /// nearest index entry).
    pub fn find_batch(
        &self,
        offset: i64,
        end_position: u64,
    ) -> Result<Option<BatchLocation>, SegmentError> {
        let relative = u32::try_from((offset - self.base_offset).max(0)).unwrap_or(u32::MAX);
        let start = u64::from(self.index.lookup_position(relative));
        let mut found = None;
        let result = scan(
            &self.file,
            start,
            end_position.min(self.size),
            false,
            |loc| {
                if loc.header.last_offset() >= offset {
                    found = Some(loc);
                    return Err(SegmentError::Stop);
                }
                Ok(())
            },
        );
        match result {
            Ok(()) | Err(SegmentError::Stop) => Ok(found),
            Err(e) => Err(e),
        }
    }

    /// The first batch whose max timestamp is at or after `timestamp`.
    pub fn find_batch_by_time(
        &self,
        timestamp: i64,
    ) -> Result<Option<BatchLocation>, SegmentError> {
        if self.max_timestamp < timestamp {
            return Ok(None);
        }
        let start_offset = match self.index.lookup_time(timestamp) {
            Some(rel) => self.base_offset + i64::from(rel) + 1,
            None => self.base_offset,
        };
        let relative = u32::try_from((start_offset - self.base_offset).max(0)).unwrap_or(u32::MAX);
        let start = u64::from(self.index.lookup_position(relative));
        let mut found = None;
        let result = scan(&self.file, start, self.size, false, |loc| {
            if loc.header.max_timestamp >= timestamp {
                found = Some(loc);
                return Err(SegmentError::Stop);
            }
            Ok(())
        });
        match result {
            Ok(()) | Err(SegmentError::Stop) => Ok(found),
            Err(e) => Err(e),
        }
    }

    /// Every batch location from `start` to `end` (headers only).
    pub fn batches(&self, start: u64, end: u64) -> Result<Vec<BatchLocation>, SegmentError> {
        let mut out = Vec::new();
        scan(&self.file, start, end.min(self.size), false, |loc| {
            out.push(loc);
            Ok(())
        })?;
        Ok(out)
    }

    /// Cuts the segment so that it ends before `offset` (used when a partition must drop its
    /// unfinished tail). Returns the bytes removed.
    pub fn truncate_before(&mut self, offset: i64) -> Result<u64, SegmentError> {
        let Some(loc) = self.find_batch(offset, self.size)? else {
            return Ok(0);
        };
        let cut = if loc.header.base_offset >= offset {
            loc.position
        } else {
            loc.position + loc.header.total_size() as u64
        };
        let removed = self.size - cut;
        self.file.set_len(cut)?;
        self.size = cut;
        // Recompute the tail state from the remaining batches.
        let remaining = self.batches(0, cut)?;
        self.next_offset = remaining
            .last()
            .map_or(self.base_offset, |l| l.header.next_offset());
        self.max_timestamp = remaining
            .iter()
            .map(|l| l.header.max_timestamp)
            .max()
            .unwrap_or(-1);
        let last_rel = remaining
            .last()
            .map(|l| u32::try_from(l.header.last_offset() - self.base_offset).unwrap_or(u32::MAX));
        self.index
            .truncate_to_position(u32::try_from(cut).unwrap_or(u32::MAX), last_rel)?;
        Ok(removed)
    }

    /// Deletes the segment's files.
    pub fn delete_files(&mut self) -> io::Result<()> {
        self.index.delete_files()?;
        std::fs::remove_file(&self.log_path)
    }
}

/// Errors reading a segment.
#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error("batch at position {position}: {source}")]
    Batch { position: u64, source: BatchError },
    #[error("corrupt data at offset {offset} (file position {position}): {detail}")]
    Corrupt {
        offset: i64,
        position: u64,
        detail: String,
    },
    /// Internal: stops a scan early.
    #[error("scan stopped")]
    Stop,
}

/// Walks the batches of `file` in `[start, end)`, calling `visit` for each complete batch.
/// With `verify_crc` each batch is fully read and checksummed; otherwise only headers are read.
/// Stops with an error at the first batch that is incomplete or invalid.
pub fn scan(
    file: &File,
    start: u64,
    end: u64,
    verify_crc: bool,
    mut visit: impl FnMut(BatchLocation) -> Result<(), SegmentError>,
) -> Result<(), SegmentError> {
    let mut position = start;
    let mut buf: Vec<u8> = Vec::new();
    let mut buf_start = start;
    while position < end {
        // Ensure the header is buffered.
        let rel = (position - buf_start) as usize;
        if rel + HEADER_SIZE > buf.len() {
            let want = if verify_crc { SCAN_CHUNK } else { HEADER_SIZE };
            let len = want
                .min((end - position) as usize)
                .max(HEADER_SIZE.min((end - position) as usize));
            buf.resize(len, 0);
            let n = read_full_at(file, &mut buf, position)?;
            buf.truncate(n);
            buf_start = position;
        }
        let rel = (position - buf_start) as usize;
        let header = BatchHeader::parse(&buf[rel..])
            .map_err(|source| SegmentError::Batch { position, source })?;
        let total = header.total_size() as u64;
        if position + total > end {
            return Err(SegmentError::Batch {
                position,
                source: BatchError::Incomplete {
                    needed: total as usize,
                    available: (end - position) as usize,
                },
            });
        }
        if verify_crc {
            if rel + total as usize > buf.len() {
                let len = (total as usize)
                    .max(SCAN_CHUNK)
                    .min((end - position) as usize);
                buf.resize(len, 0);
                let n = read_full_at(file, &mut buf, position)?;
                buf.truncate(n);
                buf_start = position;
            }
            let rel = (position - buf_start) as usize;
            batch::verify(&buf[rel..rel + total as usize])
                .map_err(|source| SegmentError::Batch { position, source })?;
        }
        visit(BatchLocation { position, header })?;
        position += total;
    }
    Ok(())
}

/// Walks the complete batches of `file` in `[start, end)`, handing each one's position and
/// bytes (verified: length and CRC) to `visit`. Reads in large chunks.
pub fn for_each_batch(
    file: &File,
    start: u64,
    end: u64,
    mut visit: impl FnMut(u64, &[u8]) -> Result<(), SegmentError>,
) -> Result<(), SegmentError> {
    const CHUNK: usize = 1024 * 1024;
    let mut buf: Vec<u8> = Vec::new();
    let mut buf_start = start;
    let mut position = start;
    // Makes `buf` start at `position` and hold at least `min` bytes (fewer only at EOF).
    let refill = |buf: &mut Vec<u8>, buf_start: &mut u64, position: u64, min: usize| {
        let want = min.max(CHUNK).min((end - position) as usize);
        buf.resize(want, 0);
        let n = read_full_at(file, buf, position)?;
        buf.truncate(n);
        *buf_start = position;
        if n < min {
            return Err(SegmentError::Batch {
                position,
                source: BatchError::Incomplete {
                    needed: min,
                    available: n,
                },
            });
        }
        Ok(())
    };
    while position < end {
        if (position - buf_start) as usize + HEADER_SIZE > buf.len() {
            refill(&mut buf, &mut buf_start, position, HEADER_SIZE)?;
        }
        let rel = (position - buf_start) as usize;
        let header = BatchHeader::parse(&buf[rel..])
            .map_err(|source| SegmentError::Batch { position, source })?;
        let total = header.total_size();
        if position + total as u64 > end {
            return Err(SegmentError::Batch {
                position,
                source: BatchError::Incomplete {
                    needed: total,
                    available: (end - position) as usize,
                },
            });
        }
        if rel + total > buf.len() {
            refill(&mut buf, &mut buf_start, position, total)?;
        }
        let rel = (position - buf_start) as usize;
        let bytes = &buf[rel..rel + total];
        batch::verify(bytes).map_err(|source| SegmentError::Batch { position, source })?;
        visit(position, bytes)?;
        position += total as u64;
    }
    Ok(())
}

/// Reads as many bytes as available into `buf` at `position`; returns the count.
pub fn read_full_at(file: &File, buf: &mut [u8], position: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], position + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}
