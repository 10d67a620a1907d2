//! Streamed in-progress transactions (pgoutput protocol 2+, `streaming 'on'`), buffered on
//! local disk until the server says how they end.
//!
//! With streaming on, the walsender stops spilling a large transaction into the primary's
//! `pg_replslot/` once it exceeds `logical_decoding_work_mem`, and sends it to us in chunks
//! (StreamStart .. StreamStop, interleaved with other transactions) before it commits. Nothing
//! of it may reach the log before StreamCommit (it may still abort, wholly or by subtransaction),
//! so each chunk's messages are appended to an anonymous temporary file per top-level
//! transaction; at StreamCommit the file is replayed, in order, as an ordinary transaction.
//!
//! Invariants:
//! - memory per open transaction is one write buffer ([`WRITE_BUFFER`]), whatever its size;
//!   replay reads one frame at a time;
//! - frames are stored as the message would look outside a stream (the leading xid removed), so
//!   replay decodes them with an ordinary decoder; the xid is kept beside each frame so that a
//!   subtransaction's messages are skipped once it aborts;
//! - the files are unlinked at creation (`tempfile::tempfile_in`): a crash leaves nothing behind,
//!   and after a restart the server streams every uncommitted transaction again from its start;
//! - a chunk that continues a transaction this buffer never saw start is an error (its earlier
//!   changes would be missing), never silently accepted.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

use bytes::Bytes;

use crate::lsn::Lsn;

/// Write buffer per open streamed transaction.
const WRITE_BUFFER: usize = 64 * 1024;
/// Read buffer of a replay.
const READ_BUFFER: usize = 256 * 1024;
/// Frame header: xid (4), wal_start (8), length (4).
const FRAME_HEADER: usize = 16;

/// Why a stream could not be buffered.
#[derive(Debug, thiserror::Error)]
pub enum StreamedError {
    #[error("streamed transaction {xid}: a continuation chunk arrived for a transaction whose first chunk was not seen")]
    MissingStart { xid: u32 },
    #[error("streamed transaction {xid} committed, but none of its chunks was seen")]
    UnknownCommit { xid: u32 },
    #[error("a streamed change arrived outside StreamStart/StreamStop")]
    OutsideStream,
    #[error("a pgoutput {tag:?} message inside a stream is too short to carry its xid")]
    Truncated { tag: char },
    #[error("spilling a streamed transaction to {dir}: {source}")]
    Io {
        dir: String,
        #[source]
        source: io::Error,
    },
}

/// One streamed transaction not committed or aborted yet.
struct OpenTxn {
    file: BufWriter<File>,
    aborted_subxids: HashSet<u32>,
    messages: u64,
}

/// What one spill buffer holds, for logs and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamedStats {
    /// Streamed transactions seen start (first chunk).
    pub transactions: u64,
    /// Of them, committed and aborted.
    pub committed: u64,
    pub aborted: u64,
    /// Bytes written to spill files so far.
    pub spilled_bytes: u64,
}

/// The open streamed transactions of one replication stream.
pub struct StreamedTransactions {
    dir: PathBuf,
    open: HashMap<u32, OpenTxn>,
    /// The top-level xid of the chunk being received (between StreamStart and StreamStop).
    current: Option<u32>,
    stats: StreamedStats,
}

impl StreamedTransactions {
    /// Spill files go into `dir` (created when missing).
    pub fn new(dir: PathBuf) -> Self {
        StreamedTransactions {
            dir,
            open: HashMap::new(),
            current: None,
            stats: StreamedStats::default(),
        }
    }

    pub fn stats(&self) -> StreamedStats {
        self.stats
    }

    /// Open streamed transactions (started, neither committed nor aborted).
    pub fn open_count(&self) -> usize {
        self.open.len()
    }

    /// True between StreamStart and StreamStop.
    pub fn in_chunk(&self) -> bool {
        self.current.is_some()
    }

    fn io(&self, source: io::Error) -> StreamedError {
        StreamedError::Io {
            dir: self.dir.display().to_string(),
            source,
        }
    }

    /// StreamStart: a chunk of top-level transaction `xid` follows.
    pub fn start(&mut self, xid: u32, first_segment: bool) -> Result<(), StreamedError> {
        let known = self.open.contains_key(&xid);
        if !known && !first_segment {
            return Err(StreamedError::MissingStart { xid });
        }
        if first_segment {
            // A first segment of a transaction already open means the server restarted its
            // stream: the new file replaces what was kept, so nothing is applied twice.
            std::fs::create_dir_all(&self.dir).map_err(|e| self.io(e))?;
            let file = tempfile::tempfile_in(&self.dir).map_err(|e| self.io(e))?;
            self.open.insert(
                xid,
                OpenTxn {
                    file: BufWriter::with_capacity(WRITE_BUFFER, file),
                    aborted_subxids: HashSet::new(),
                    messages: 0,
                },
            );
            if !known {
                self.stats.transactions += 1;
            }
        }
        self.current = Some(xid);
        Ok(())
    }

    /// StreamStop: the chunk ended.
    pub fn stop(&mut self) {
        self.current = None;
    }

    /// A message inside the current chunk (`data` as received, with the xid after the tag).
    pub fn append(&mut self, wal_start: Lsn, data: &[u8]) -> Result<(), StreamedError> {
        let top = self.current.ok_or(StreamedError::OutsideStream)?;
        let tag = data.first().copied().unwrap_or(0);
        if data.len() < 5 {
            return Err(StreamedError::Truncated {
                tag: char::from(tag),
            });
        }
        let xid = u32::from_be_bytes([data[1], data[2], data[3], data[4]]);
        let body = &data[5..];
        let len = (1 + body.len()) as u32;
        let dir = self.dir.display().to_string();
        let t = self
            .open
            .get_mut(&top)
            .ok_or(StreamedError::MissingStart { xid: top })?;
        let mut header = [0u8; FRAME_HEADER + 1];
        header[0..4].copy_from_slice(&xid.to_be_bytes());
        header[4..12].copy_from_slice(&wal_start.0.to_be_bytes());
        header[12..16].copy_from_slice(&len.to_be_bytes());
        header[16] = tag;
        let write = |f: &mut BufWriter<File>| -> io::Result<()> {
            f.write_all(&header)?;
            f.write_all(body)
        };
        write(&mut t.file).map_err(|source| StreamedError::Io { dir, source })?;
        t.messages += 1;
        self.stats.spilled_bytes += (FRAME_HEADER + len as usize) as u64;
        Ok(())
    }

    /// StreamAbort: the whole transaction (`subxid == xid`) or one subtransaction rolled back.
    pub fn abort(&mut self, xid: u32, subxid: u32) {
        if xid == subxid {
            if self.open.remove(&xid).is_some() {
                self.stats.aborted += 1;
            }
            if self.current == Some(xid) {
                self.current = None;
            }
        } else if let Some(t) = self.open.get_mut(&xid) {
            t.aborted_subxids.insert(subxid);
        }
    }

    /// StreamCommit: the transaction's messages, to replay in order.
    pub fn commit(&mut self, xid: u32) -> Result<Replay, StreamedError> {
        let t = self
            .open
            .remove(&xid)
            .ok_or(StreamedError::UnknownCommit { xid })?;
        if self.current == Some(xid) {
            self.current = None;
        }
        self.stats.committed += 1;
        let dir = self.dir.display().to_string();
        let io = |source| StreamedError::Io {
            dir: dir.clone(),
            source,
        };
        let mut file = t.file.into_inner().map_err(|e| io(e.into_error()))?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        Ok(Replay {
            reader: BufReader::with_capacity(READ_BUFFER, file),
            aborted_subxids: t.aborted_subxids,
            remaining: t.messages,
            dir,
        })
    }
}

/// The messages of a committed streamed transaction, read back one at a time.
pub struct Replay {
    reader: BufReader<File>,
    aborted_subxids: HashSet<u32>,
    remaining: u64,
    dir: String,
}

impl Replay {
    /// The next message not rolled back with its subtransaction, as `(wal_start, message)`
    /// in the form an ordinary (non-stream) decoder reads; `None` at the end.
    pub fn next_message(&mut self) -> Result<Option<(Lsn, Bytes)>, StreamedError> {
        while self.remaining > 0 {
            self.remaining -= 1;
            let mut header = [0u8; FRAME_HEADER];
            let io = |dir: &str, source| StreamedError::Io {
                dir: dir.to_owned(),
                source,
            };
            self.reader
                .read_exact(&mut header)
                .map_err(|e| io(&self.dir, e))?;
            let xid = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
            let mut lsn = [0u8; 8];
            lsn.copy_from_slice(&header[4..12]);
            let wal_start = Lsn(u64::from_be_bytes(lsn));
            let len = u32::from_be_bytes([header[12], header[13], header[14], header[15]]) as usize;
            if self.aborted_subxids.contains(&xid) {
                io::copy(&mut (&mut self.reader).take(len as u64), &mut io::sink())
                    .map_err(|e| io(&self.dir, e))?;
                continue;
            }
            let mut data = vec![0u8; len];
            self.reader
                .read_exact(&mut data)
                .map_err(|e| io(&self.dir, e))?;
            return Ok(Some((wal_start, Bytes::from(data))));
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pgoutput::{Decoder, PgOutputMessage};

    fn insert_in_stream(xid: u32, relation: u32, value: &[u8]) -> Vec<u8> {
        let mut m = vec![b'I'];
        m.extend_from_slice(&xid.to_be_bytes());
        m.extend_from_slice(&relation.to_be_bytes());
        m.push(b'N');
        m.extend_from_slice(&1u16.to_be_bytes());
        m.push(b't');
        m.extend_from_slice(&(value.len() as u32).to_be_bytes());
        m.extend_from_slice(value);
        m
    }

    fn replayed(mut r: Replay) -> Vec<String> {
        let mut out = Vec::new();
        while let Some((_, data)) = r.next_message().unwrap() {
            match Decoder::new().decode(data).unwrap() {
                PgOutputMessage::Insert { xid, new, .. } => {
                    assert_eq!(xid, None, "replayed messages look like non-stream ones");
                    match &new.0[0] {
                        crate::pgoutput::TupleValue::Text(b) => {
                            out.push(String::from_utf8(b.to_vec()).unwrap())
                        }
                        other => panic!("{other:?}"),
                    }
                }
                other => panic!("{other:?}"),
            }
        }
        out
    }

    #[test]
    fn interleaved_chunks_replay_per_transaction_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StreamedTransactions::new(dir.path().join("spill"));
        s.start(10, true).unwrap();
        s.append(Lsn(1), &insert_in_stream(10, 1, b"a1")).unwrap();
        s.stop();
        s.start(20, true).unwrap();
        s.append(Lsn(2), &insert_in_stream(20, 1, b"b1")).unwrap();
        s.stop();
        s.start(10, false).unwrap();
        s.append(Lsn(3), &insert_in_stream(10, 1, b"a2")).unwrap();
        s.stop();
        assert_eq!(s.open_count(), 2);
        assert_eq!(replayed(s.commit(20).unwrap()), ["b1"]);
        assert_eq!(replayed(s.commit(10).unwrap()), ["a1", "a2"]);
        assert_eq!(s.open_count(), 0);
        assert_eq!(s.stats().committed, 2);
    }

    #[test]
    fn aborted_subtransactions_and_transactions_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StreamedTransactions::new(dir.path().to_path_buf());
        s.start(10, true).unwrap();
        s.append(Lsn(1), &insert_in_stream(10, 1, b"top")).unwrap();
        s.append(Lsn(2), &insert_in_stream(11, 1, b"sub-rolled-back"))
            .unwrap();
        s.append(Lsn(3), &insert_in_stream(12, 1, b"sub-kept"))
            .unwrap();
        s.stop();
        s.abort(10, 11);
        s.start(30, true).unwrap();
        s.append(Lsn(4), &insert_in_stream(30, 1, b"gone")).unwrap();
        s.stop();
        s.abort(30, 30);
        assert!(matches!(
            s.commit(30),
            Err(StreamedError::UnknownCommit { xid: 30 })
        ));
        assert_eq!(replayed(s.commit(10).unwrap()), ["top", "sub-kept"]);
        assert_eq!(s.stats().aborted, 1);
    }

    #[test]
    fn a_continuation_without_its_start_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StreamedTransactions::new(dir.path().to_path_buf());
        assert!(matches!(
            s.start(7, false),
            Err(StreamedError::MissingStart { xid: 7 })
        ));
        assert!(matches!(
            s.append(Lsn(1), &insert_in_stream(7, 1, b"x")),
            Err(StreamedError::OutsideStream)
        ));
        s.start(7, true).unwrap();
        assert!(matches!(
            s.append(Lsn(1), b"I\0"),
            Err(StreamedError::Truncated { tag: 'I' })
        ));
    }

    #[test]
    fn a_restarted_first_segment_discards_the_earlier_copy() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StreamedTransactions::new(dir.path().to_path_buf());
        s.start(5, true).unwrap();
        s.append(Lsn(1), &insert_in_stream(5, 1, b"old")).unwrap();
        s.stop();
        s.start(5, true).unwrap();
        s.append(Lsn(1), &insert_in_stream(5, 1, b"new")).unwrap();
        s.stop();
        assert_eq!(replayed(s.commit(5).unwrap()), ["new"]);
    }

    #[test]
    fn spill_files_leave_nothing_in_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StreamedTransactions::new(dir.path().to_path_buf());
        s.start(1, true).unwrap();
        s.append(Lsn(1), &insert_in_stream(1, 1, &[b'x'; 100_000]))
            .unwrap();
        s.stop();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert!(s.stats().spilled_bytes > 100_000);
        assert_eq!(replayed(s.commit(1).unwrap())[0].len(), 100_000);
    }
}
