//! Sparse per-segment indexes: the offset index (relative offset -> file position of a batch)
//! and the time index (max timestamp so far -> relative offset).
//!
//! Both live in memory for lookups and are written to files beside the segment so a reopen
//! does not need to scan. Entries reach the files when the segment is sealed
//! ([`SegmentIndex::sync`]) or rewritten, not per append: every open rebuilds the active
//! segment's indexes from the segment anyway, and two small writes per appended batch were
//! most of the log's syscalls on a stream of small commits.
//!
//! The files are a cache, never the source of truth: an index file that is missing, of odd
//! size, not monotonic, or pointing past the segment is discarded and rebuilt from the
//! segment; one that lacks its last entries only makes lookups past its end scan further.
//!
//! Entries are big-endian: offset index 8 bytes (u32 relative offset, u32 position), time index
//! 12 bytes (i64 timestamp, u32 relative offset), as in Kafka. The segment adds one of each
//! every 4 KiB of batches (see `Segment::note_appended`).
//!
//! Invariants: offset entries are strictly increasing in both offset and position; time entries
//! are strictly increasing in timestamp and non-decreasing in offset.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// One offset index entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffsetEntry {
    /// Last offset of the batch minus the segment's base offset.
    pub relative_offset: u32,
    /// Byte position of the batch in the segment file.
    pub position: u32,
}

/// One time index entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeEntry {
    /// The largest timestamp in the segment up to and including this batch.
    pub timestamp: i64,
    /// Last offset of that batch minus the segment's base offset.
    pub relative_offset: u32,
}

/// The pair of indexes of one segment.
#[derive(Debug)]
pub struct SegmentIndex {
    offset_path: PathBuf,
    time_path: PathBuf,
    offsets: Vec<OffsetEntry>,
    times: Vec<TimeEntry>,
    offset_file: Option<File>,
    time_file: Option<File>,
    /// How many of `offsets` and of `times` the files hold; the rest are written by
    /// [`SegmentIndex::sync`].
    offsets_in_file: usize,
    times_in_file: usize,
}

impl SegmentIndex {
    /// An empty index whose files (truncated) are at the given paths.
    pub fn create(offset_path: &Path, time_path: &Path) -> io::Result<Self> {
        let open = |p: &Path| {
            OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .open(p)
        };
        Ok(SegmentIndex {
            offset_file: Some(open(offset_path)?),
            time_file: Some(open(time_path)?),
            offset_path: offset_path.to_owned(),
            time_path: time_path.to_owned(),
            offsets: Vec::new(),
            times: Vec::new(),
            offsets_in_file: 0,
            times_in_file: 0,
        })
    }

    /// An empty index held in memory only (no files yet); [`SegmentIndex::rewrite`] writes it.
    /// Used when rebuilding from a segment so that a crash mid-rebuild never leaves a
    /// plausible-looking prefix of an index behind.
    pub fn in_memory(offset_path: &Path, time_path: &Path) -> Self {
        SegmentIndex {
            offset_file: None,
            time_file: None,
            offset_path: offset_path.to_owned(),
            time_path: time_path.to_owned(),
            offsets: Vec::new(),
            times: Vec::new(),
            offsets_in_file: 0,
            times_in_file: 0,
        }
    }

    /// Loads both files if they are consistent with a segment of `segment_size` bytes;
    /// `Ok(None)` means they must be rebuilt.
    pub fn load(
        offset_path: &Path,
        time_path: &Path,
        segment_size: u64,
    ) -> io::Result<Option<Self>> {
        let (Some(offset_bytes), Some(time_bytes)) =
            (read_if_exists(offset_path)?, read_if_exists(time_path)?)
        else {
            return Ok(None);
        };
        if offset_bytes.len() % 8 != 0 || time_bytes.len() % 12 != 0 {
            return Ok(None);
        }
        let offsets: Vec<OffsetEntry> = offset_bytes
            .chunks_exact(8)
            .map(|c| OffsetEntry {
                relative_offset: u32::from_be_bytes([c[0], c[1], c[2], c[3]]),
                position: u32::from_be_bytes([c[4], c[5], c[6], c[7]]),
            })
            .collect();
        let times: Vec<TimeEntry> = time_bytes
            .chunks_exact(12)
            .map(|c| TimeEntry {
                timestamp: i64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]),
                relative_offset: u32::from_be_bytes([c[8], c[9], c[10], c[11]]),
            })
            .collect();
        let offsets_ok = offsets
            .windows(2)
            .all(|w| w[0].relative_offset < w[1].relative_offset && w[0].position < w[1].position)
            && offsets
                .last()
                .is_none_or(|e| u64::from(e.position) < segment_size);
        let times_ok = times.windows(2).all(|w| {
            w[0].timestamp < w[1].timestamp && w[0].relative_offset <= w[1].relative_offset
        });
        if !offsets_ok || !times_ok {
            return Ok(None);
        }
        let append = |p: &Path| OpenOptions::new().append(true).open(p);
        Ok(Some(SegmentIndex {
            offset_file: Some(append(offset_path)?),
            time_file: Some(append(time_path)?),
            offset_path: offset_path.to_owned(),
            time_path: time_path.to_owned(),
            offsets_in_file: offsets.len(),
            times_in_file: times.len(),
            offsets,
            times,
        }))
    }

    /// Records a batch whose last offset is `relative_offset` at `position`.
    pub fn add_offset(&mut self, relative_offset: u32, position: u32) -> io::Result<()> {
        if self
            .offsets
            .last()
            .is_some_and(|e| e.relative_offset >= relative_offset || e.position >= position)
        {
            return Ok(());
        }
        self.offsets.push(OffsetEntry {
            relative_offset,
            position,
        });
        Ok(())
    }

    /// Records that timestamps up to `timestamp` are reached by `relative_offset`.
    pub fn add_time(&mut self, timestamp: i64, relative_offset: u32) -> io::Result<()> {
        if self.times.last().is_some_and(|e| e.timestamp >= timestamp) {
            return Ok(());
        }
        self.times.push(TimeEntry {
            timestamp,
            relative_offset,
        });
        Ok(())
    }

    /// The position to start scanning from to find `relative_offset` (largest entry whose
    /// offset is below it; 0 when none).
    pub fn lookup_position(&self, relative_offset: u32) -> u32 {
        let idx = self
            .offsets
            .partition_point(|e| e.relative_offset < relative_offset);
        if idx == 0 {
            0
        } else {
            self.offsets[idx - 1].position
        }
    }

    /// The relative offset to start scanning from to find the first record with a timestamp
    /// at or after `timestamp` (the last entry strictly below it; `None` = segment start).
    pub fn lookup_time(&self, timestamp: i64) -> Option<u32> {
        let idx = self.times.partition_point(|e| e.timestamp < timestamp);
        (idx > 0).then(|| self.times[idx - 1].relative_offset)
    }

    /// The largest timestamp indexed so far.
    pub fn max_timestamp(&self) -> Option<i64> {
        self.times.last().map(|e| e.timestamp)
    }

    /// Drops entries at or beyond `position` (after a truncation of the segment).
    pub fn truncate_to_position(
        &mut self,
        position: u32,
        last_relative_offset: Option<u32>,
    ) -> io::Result<()> {
        self.offsets.retain(|e| e.position < position);
        match last_relative_offset {
            Some(last) => self.times.retain(|e| e.relative_offset <= last),
            None => self.times.clear(),
        }
        self.rewrite()
    }

    /// Rewrites both files from memory, each atomically (temporary file, fsync, rename): a
    /// crash leaves the old file or the complete new one. The files stay open for appending.
    pub fn rewrite(&mut self) -> io::Result<()> {
        self.rewrite_with(true)
    }

    /// [`SegmentIndex::rewrite`]; without `durable` the temporary files are not fsynced (for
    /// an active segment, whose indexes every open rebuilds and [`SegmentIndex::sync`] makes
    /// durable when the segment is sealed).
    pub fn rewrite_with(&mut self, durable: bool) -> io::Result<()> {
        write_replacing(&self.offset_path, &offset_bytes(&self.offsets), durable)?;
        write_replacing(&self.time_path, &time_bytes(&self.times), durable)?;
        let append = |p: &Path| OpenOptions::new().append(true).open(p);
        self.offset_file = Some(append(&self.offset_path)?);
        self.time_file = Some(append(&self.time_path)?);
        self.offsets_in_file = self.offsets.len();
        self.times_in_file = self.times.len();
        Ok(())
    }

    /// Writes the entries the files do not hold yet and flushes both files to disk (done when
    /// a segment is sealed, so that a cold reopen of it is fast). A sealed segment's entries
    /// are final, so the vectors give back their spare capacity (up to as much again).
    pub fn sync(&mut self) -> io::Result<()> {
        self.offsets.shrink_to_fit();
        self.times.shrink_to_fit();
        if let Some(f) = self.offset_file.as_mut() {
            if self.offsets_in_file < self.offsets.len() {
                f.write_all(&offset_bytes(&self.offsets[self.offsets_in_file..]))?;
                self.offsets_in_file = self.offsets.len();
            }
            f.sync_data()?;
        }
        if let Some(f) = self.time_file.as_mut() {
            if self.times_in_file < self.times.len() {
                f.write_all(&time_bytes(&self.times[self.times_in_file..]))?;
                self.times_in_file = self.times.len();
            }
            f.sync_data()?;
        }
        Ok(())
    }

    pub fn offset_entries(&self) -> &[OffsetEntry] {
        &self.offsets
    }

    /// Deletes both files.
    pub fn delete_files(&mut self) -> io::Result<()> {
        self.offset_file = None;
        self.time_file = None;
        for p in [&self.offset_path, &self.time_path] {
            match std::fs::remove_file(p) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }
}

/// Offset index entries as the file stores them.
fn offset_bytes(entries: &[OffsetEntry]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(entries.len() * 8);
    for e in entries {
        bytes.extend_from_slice(&e.relative_offset.to_be_bytes());
        bytes.extend_from_slice(&e.position.to_be_bytes());
    }
    bytes
}

/// Time index entries as the file stores them.
fn time_bytes(entries: &[TimeEntry]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(entries.len() * 12);
    for e in entries {
        bytes.extend_from_slice(&e.timestamp.to_be_bytes());
        bytes.extend_from_slice(&e.relative_offset.to_be_bytes());
    }
    bytes
}

/// `path` with `.tmp` appended to its file name (`00000000000000000000.index.tmp`).
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    PathBuf::from(name)
}

/// Replaces `path` with `bytes` atomically: a temporary file (fsynced when `durable`),
/// renamed over it.
fn write_replacing(path: &Path, bytes: &[u8], durable: bool) -> io::Result<()> {
    let tmp = tmp_path(path);
    let written = File::create(&tmp).and_then(|mut f| {
        f.write_all(bytes)?;
        if durable {
            f.sync_data()?;
        }
        Ok(())
    });
    if let Err(e) = written {
        // Leave no partial temporary file behind (on a full disk it holds space).
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, path)
}

fn read_if_exists(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match File::open(path) {
        Ok(mut f) => {
            let mut buf = Vec::new();
            f.read_to_end(&mut buf)?;
            Ok(Some(buf))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_and_reload() {
        let dir = tempfile::tempdir().unwrap();
        let (o, t) = (dir.path().join("0.index"), dir.path().join("0.timeindex"));
        let mut idx = SegmentIndex::create(&o, &t).unwrap();
        idx.add_offset(9, 0).unwrap(); // batch 0..=9 at 0
        idx.add_offset(19, 4096).unwrap(); // batch 10..=19 at 4096
        idx.add_offset(29, 8192).unwrap();
        idx.add_offset(25, 9000).unwrap(); // ignored: not increasing
        idx.add_time(100, 9).unwrap();
        idx.add_time(200, 19).unwrap();
        idx.add_time(150, 29).unwrap(); // ignored: timestamps only grow
        assert_eq!(idx.lookup_position(0), 0);
        assert_eq!(idx.lookup_position(9), 0);
        assert_eq!(
            idx.lookup_position(10),
            0,
            "offset 10 is after the batch ending at 9"
        );
        assert_eq!(idx.lookup_position(20), 4096);
        assert_eq!(idx.lookup_position(1000), 8192);
        assert_eq!(idx.lookup_time(50), None);
        assert_eq!(idx.lookup_time(150), Some(9));
        assert_eq!(idx.max_timestamp(), Some(200));
        // Entries reach the files when the index is synced (the segment sealed), not before.
        assert_eq!(std::fs::metadata(&o).unwrap().len(), 0);
        idx.sync().unwrap();
        idx.add_offset(39, 9500).unwrap();
        idx.sync().unwrap();
        assert_eq!(std::fs::metadata(&o).unwrap().len(), 4 * 8);
        assert_eq!(std::fs::metadata(&t).unwrap().len(), 2 * 12);
        drop(idx);
        let reloaded = SegmentIndex::load(&o, &t, 10_000).unwrap().unwrap();
        assert_eq!(reloaded.offset_entries().len(), 4);
        assert_eq!(reloaded.lookup_position(35), 8192);
        assert_eq!(reloaded.lookup_time(250), Some(19));
        assert!(
            SegmentIndex::load(&o, &t, 9000).unwrap().is_none(),
            "points past the segment"
        );
        std::fs::write(&o, [0u8; 5]).unwrap();
        assert!(
            SegmentIndex::load(&o, &t, 10_000).unwrap().is_none(),
            "odd size"
        );
    }
}
