//! Per-partition transaction state: which producers have a transaction open in the partition
//! (and from which offset), which transactions were aborted, and the last stable offset (LSO).
//!
//! A transaction's batches carry the transactional flag and its producer id; it ends with a
//! control batch (commit or abort marker), exactly as in Kafka. Invariants:
//! - an open transaction stays open until its marker is *durable* (below the high watermark),
//!   so the LSO never passes data whose outcome a crash could still change;
//! - every abort marker is recorded in `aborted-transactions` (24-byte entries: producer id,
//!   first offset, marker offset), which read_committed readers use to skip aborted data; the
//!   file is rebuilt from the markers when recovery finds it behind.

use std::collections::{BTreeMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch::{BatchHeader, ControlType};

/// An aborted transaction's range in one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// Offset of the abort marker.
    pub last_offset: i64,
}

/// Whether [`TxnState::on_batch`] sees a batch as it is appended or in a recovery scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replaying {
    Append,
    RecoveryScan,
}

/// A transaction with data in this partition and no durable marker yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenTxn {
    pub first_offset: i64,
    /// The marker, once appended (not yet known durable).
    pub marker: Option<(ControlType, i64)>,
}

const ABORTED_FILE: &str = "aborted-transactions";
const ENTRY: usize = 24;

#[derive(Debug)]
pub struct TxnState {
    open: BTreeMap<i64, OpenTxn>,
    aborted: Vec<AbortedTxn>,
    aborted_path: PathBuf,
    aborted_file: Arc<File>,
    aborted_dirty: bool,
    /// Producers seen committing during a recovery scan.
    committed_in_scan: HashSet<i64>,
    /// The largest producer id seen in this partition (so ids are never reused).
    max_producer_id: i64,
}

impl TxnState {
    /// Loads the aborted-transactions file of a partition directory (creating it when missing;
    /// a torn final entry is dropped).
    pub fn open(dir: &Path) -> io::Result<TxnState> {
        let aborted_path = dir.join(ABORTED_FILE);
        let mut bytes = Vec::new();
        match File::open(&aborted_path) {
            Ok(mut f) => {
                f.read_to_end(&mut bytes)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let whole = bytes.len() / ENTRY * ENTRY;
        let aborted = bytes[..whole]
            .chunks_exact(ENTRY)
            .map(|c| AbortedTxn {
                producer_id: i64::from_be_bytes(c[0..8].try_into().unwrap_or_default()),
                first_offset: i64::from_be_bytes(c[8..16].try_into().unwrap_or_default()),
                last_offset: i64::from_be_bytes(c[16..24].try_into().unwrap_or_default()),
            })
            .collect();
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&aborted_path)?;
        if whole != bytes.len() {
            file.set_len(whole as u64)?;
        }
        Ok(TxnState {
            open: BTreeMap::new(),
            aborted,
            aborted_path,
            aborted_file: Arc::new(file),
            aborted_dirty: false,
            committed_in_scan: HashSet::new(),
            max_producer_id: -1,
        })
    }

    /// Notes an appended (or, during recovery, scanned) batch. `control` is the marker type of
    /// a control batch.
    pub fn on_batch(
        &mut self,
        header: &BatchHeader,
        control: Option<ControlType>,
        replaying: Replaying,
    ) -> io::Result<()> {
        if !header.is_transactional() {
            return Ok(());
        }
        let pid = header.producer_id;
        self.max_producer_id = self.max_producer_id.max(pid);
        if header.is_control() {
            let Some(kind) = control else {
                return Ok(());
            };
            let marker_offset = header.base_offset;
            let first_offset = match self.open.get_mut(&pid) {
                Some(txn) => {
                    txn.marker = Some((kind, marker_offset));
                    txn.first_offset
                }
                // A marker without data here (e.g. an empty transaction): nothing to track.
                None => marker_offset,
            };
            match kind {
                // Only a recovery scan's commits are needed (to finish transactions a crash
                // interrupted); recording live ones too grew the set by a producer id per
                // commit for the life of the process.
                ControlType::Commit if replaying == Replaying::RecoveryScan => {
                    self.committed_in_scan.insert(pid);
                }
                ControlType::Commit => {}
                ControlType::Abort => {
                    let entry = AbortedTxn {
                        producer_id: pid,
                        first_offset,
                        last_offset: marker_offset,
                    };
                    if !self.aborted.contains(&entry) {
                        self.aborted.push(entry);
                        let mut buf = [0u8; ENTRY];
                        buf[0..8].copy_from_slice(&pid.to_be_bytes());
                        buf[8..16].copy_from_slice(&first_offset.to_be_bytes());
                        buf[16..24].copy_from_slice(&marker_offset.to_be_bytes());
                        (&*self.aborted_file).write_all(&buf)?;
                        self.aborted_dirty = true;
                    }
                }
            }
            return Ok(());
        }
        self.open.entry(pid).or_insert(OpenTxn {
            first_offset: header.base_offset,
            marker: None,
        });
        Ok(())
    }

    /// Closes transactions whose markers are now below the high watermark.
    pub fn complete_markers(&mut self, high_watermark: i64) {
        self.open
            .retain(|_, t| !matches!(t.marker, Some((_, offset)) if offset < high_watermark));
    }

    /// The first offset of the earliest open transaction, if any.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.open.values().map(|t| t.first_offset).min()
    }

    /// Open transactions that have no marker yet, as `(producer id, first offset)`.
    pub fn unmarked(&self) -> Vec<(i64, i64)> {
        self.open
            .iter()
            .filter(|(_, t)| t.marker.is_none())
            .map(|(pid, t)| (*pid, t.first_offset))
            .collect()
    }

    /// Producers whose commit markers a recovery scan saw; cleared by the call.
    pub fn take_committed_in_scan(&mut self) -> HashSet<i64> {
        std::mem::take(&mut self.committed_in_scan)
    }

    /// The largest producer id seen (in appends, the recovery scan or aborted entries).
    pub fn max_producer_id(&self) -> i64 {
        self.aborted
            .iter()
            .map(|a| a.producer_id)
            .max()
            .unwrap_or(-1)
            .max(self.max_producer_id)
    }

    pub fn is_open(&self, producer_id: i64) -> bool {
        self.open.contains_key(&producer_id)
    }

    /// Aborted transactions overlapping `[start, end)`, by first offset (what a read_committed
    /// reader of that range must filter, as Kafka's Fetch response lists them).
    pub fn aborted_overlapping(&self, start: i64, end: i64) -> Vec<AbortedTxn> {
        let mut out: Vec<AbortedTxn> = self
            .aborted
            .iter()
            .filter(|a| a.last_offset >= start && a.first_offset < end)
            .copied()
            .collect();
        out.sort_by_key(|a| a.first_offset);
        out
    }

    /// The aborted-transactions file, when it has entries not yet synced.
    pub fn take_file_to_sync(&mut self) -> Option<Arc<File>> {
        if std::mem::take(&mut self.aborted_dirty) {
            Some(self.aborted_file.clone())
        } else {
            None
        }
    }

    /// Forgets aborted entries that ended before `log_start_offset` (their data is gone).
    pub fn prune_before(&mut self, log_start_offset: i64) -> io::Result<()> {
        let before = self.aborted.len();
        self.aborted.retain(|a| a.last_offset >= log_start_offset);
        if self.aborted.len() == before {
            return Ok(());
        }
        let mut bytes = Vec::with_capacity(self.aborted.len() * ENTRY);
        for a in &self.aborted {
            bytes.extend_from_slice(&a.producer_id.to_be_bytes());
            bytes.extend_from_slice(&a.first_offset.to_be_bytes());
            bytes.extend_from_slice(&a.last_offset.to_be_bytes());
        }
        let tmp = self.aborted_path.with_extension("tmp");
        std::fs::write(&tmp, &bytes)?;
        File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, &self.aborted_path)?;
        self.aborted_file = Arc::new(OpenOptions::new().append(true).open(&self.aborted_path)?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{control_batch, BatchBuilder, Compression, DecodedBatch, ProducerFields};

    fn header_of(bytes: &[u8]) -> BatchHeader {
        DecodedBatch::decode(bytes).unwrap().header
    }

    #[test]
    fn only_a_recovery_scan_remembers_committing_producers() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = TxnState::open(dir.path()).unwrap();
        let mut offset = 0;
        for replaying in [Replaying::Append, Replaying::RecoveryScan] {
            for pid in 0..100 {
                let fields = ProducerFields {
                    producer_id: pid,
                    producer_epoch: 0,
                    base_sequence: 0,
                    transactional: true,
                };
                let mut data = BatchBuilder::new(Compression::None, fields);
                data.append(1, Some(b"k"), Some(b"v"), &[]);
                let mut data = data.build().unwrap();
                crate::batch::set_base_offset(&mut data, offset);
                state.on_batch(&header_of(&data), None, replaying).unwrap();
                let mut marker = control_batch(pid, 0, ControlType::Commit, 1);
                crate::batch::set_base_offset(&mut marker, offset + 1);
                let marker_header = header_of(&marker);
                state
                    .on_batch(&marker_header, Some(ControlType::Commit), replaying)
                    .unwrap();
                offset += 2;
                state.complete_markers(offset);
            }
            let remembered = state.take_committed_in_scan().len();
            match replaying {
                Replaying::Append => assert_eq!(remembered, 0),
                Replaying::RecoveryScan => assert_eq!(remembered, 100),
            }
            assert_eq!(state.first_unstable_offset(), None);
        }
    }
}
