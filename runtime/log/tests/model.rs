//! Model test of the log: random sequences of appends, transactions (commit, abort, left open),
//! flushes, crashes (the active segment cut at a random byte past the durable point, no clean
//! close), reopens and cleaner runs, checked against an in-memory model after every reopen and
//! at the end.
//!
//! Topic `t` (3 partitions, never cleaned): every committed record is there, at its offset, in
//! order, and nothing uncommitted is visible to a read_committed reader.
//!
//! Topic `c` (1 partition, compacted, tiny segments, 5 keys, tombstones, transactions too; the
//! `Clean` op moves a fake clock and runs the cleaner): every record a read_committed reader
//! sees is a committed one at its original offset; per key, what is seen is a suffix of that
//! key's committed records (compaction only ever removes older ones, and an expired tombstone);
//! the newest committed value of every key is always there; the active segment is never
//! touched.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use headwater_log::batch::{BatchBuilder, Compression, ProducerFields};
use headwater_log::{Clock, FakeClock, Isolation, Log, LogOptions, TopicConfig, Transaction};
use proptest::prelude::*;

/// Partitions of `t`; partition index `PARTITIONS` in ops stands for `c`'s partition 0.
const PARTITIONS: u32 = 3;
const TARGETS: usize = PARTITIONS as usize + 1;
const C: u32 = PARTITIONS;
const KEYS: u64 = 5;

#[derive(Clone, Debug)]
enum Op {
    /// Non-transactional batch of `n` records, committed at once.
    Append {
        partition: u32,
        n: u8,
    },
    /// One committed record in `c`: a value or a tombstone for key `key`.
    Put {
        key: u8,
        tombstone: bool,
    },
    Begin,
    /// Append to the open transaction (if any); not flushed.
    TxnAppend {
        partition: u32,
        n: u8,
    },
    /// Flush without ending anything (makes open-transaction data durable).
    Flush,
    Commit,
    Abort,
    /// Moves the clock by `advance_ms` and runs retention and compaction.
    Clean {
        advance_ms: u16,
    },
    /// Process death: open transactions are abandoned and each partition's active segment is
    /// cut at a random point between its durable end and its current end.
    Crash {
        cut: [u16; TARGETS],
    },
    /// Clean close and reopen.
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..=PARTITIONS, 1u8..6).prop_map(|(partition, n)| Op::Append { partition, n }),
        2 => (0..KEYS as u8, prop::bool::weighted(0.2))
            .prop_map(|(key, tombstone)| Op::Put { key, tombstone }),
        2 => Just(Op::Begin),
        4 => (0..=PARTITIONS, 1u8..6).prop_map(|(partition, n)| Op::TxnAppend { partition, n }),
        1 => Just(Op::Flush),
        2 => Just(Op::Commit),
        1 => Just(Op::Abort),
        2 => (0u16..2000).prop_map(|advance_ms| Op::Clean { advance_ms }),
        1 => any::<[u16; TARGETS]>().prop_map(|cut| Op::Crash { cut }),
        1 => Just(Op::Reopen),
    ]
}

fn target(partition: u32) -> (&'static str, u32) {
    if partition == C {
        ("c", 0)
    } else {
        ("t", partition)
    }
}

/// A committed record of `c`: key and value (None = tombstone).
type CRecord = (String, Option<String>);

struct Harness {
    dir: tempfile::TempDir,
    clock: Arc<FakeClock>,
    log: Option<Log>,
    txn: Option<Transaction>,
    /// Records of the open transaction: (partition index, offset, key, value).
    txn_records: Vec<(u32, i64, String, Option<String>)>,
    /// What read_committed must show in `t`: partition -> offset -> key.
    committed: BTreeMap<u32, BTreeMap<i64, String>>,
    /// Every committed record of `c`: offset -> record.
    c_committed: BTreeMap<i64, CRecord>,
    next_key: u64,
}

fn options(clock: &Arc<FakeClock>) -> LogOptions {
    LogOptions {
        clock: clock.clone(),
        background_cleaner: false,
        min_cleanable_dirty_ratio: 0.0,
        ..LogOptions::default()
    }
}

impl Harness {
    fn new() -> Self {
        // The crashes here are simulated (files cut at chosen points), so fsync cost buys
        // nothing: use a memory file system when there is one, to keep the test fast on busy
        // machines.
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::tempdir_in(shm).or_else(|_| tempfile::tempdir())
        } else {
            tempfile::tempdir()
        }
        .unwrap();
        let clock = Arc::new(FakeClock::new(1_700_000_000_000));
        let log = Log::open(dir.path(), options(&clock)).unwrap();
        log.create_topic("t", PARTITIONS, TopicConfig::default())
            .unwrap();
        let mut c = BTreeMap::new();
        c.insert("cleanup.policy".to_owned(), "compact".to_owned());
        c.insert("segment.bytes".to_owned(), "200".to_owned());
        c.insert("delete.retention.ms".to_owned(), "1000".to_owned());
        log.create_topic("c", 1, TopicConfig::from_kafka_configs(&c).unwrap())
            .unwrap();
        Harness {
            dir,
            clock,
            log: Some(log),
            txn: None,
            txn_records: Vec::new(),
            committed: BTreeMap::new(),
            c_committed: BTreeMap::new(),
            next_key: 0,
        }
    }

    fn log(&self) -> &Log {
        self.log.as_ref().unwrap()
    }

    fn open(&self) -> Log {
        Log::open(self.dir.path(), options(&self.clock)).unwrap()
    }

    /// A batch of `n` records for a partition index: unique keys in `t`, a few keys in `c`.
    fn batch(
        &mut self,
        producer: ProducerFields,
        partition: u32,
        n: u8,
    ) -> (BatchBuilder, Vec<(String, Option<String>)>) {
        let mut b = BatchBuilder::new(Compression::None, producer);
        let mut recs = Vec::new();
        let now = self.clock.now_ms();
        for _ in 0..n {
            let id = self.next_key;
            self.next_key += 1;
            let (key, value) = if partition == C {
                (format!("c{}", id % KEYS), format!("v{id}"))
            } else {
                (format!("k{id}"), "value".to_owned())
            };
            b.append(now, Some(key.as_bytes()), Some(value.as_bytes()), &[]);
            recs.push((key, Some(value)));
        }
        (b, recs)
    }

    fn record_committed(
        &mut self,
        partition: u32,
        offset: i64,
        key: String,
        value: Option<String>,
    ) {
        if partition == C {
            self.c_committed.insert(offset, (key, value));
        } else {
            self.committed
                .entry(partition)
                .or_default()
                .insert(offset, key);
        }
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Append { partition, n } => {
                let (b, recs) = self.batch(ProducerFields::default(), *partition, *n);
                let (topic, p) = target(*partition);
                let r = self.log().append_builder(topic, p, b).unwrap();
                self.log().commit().wait().unwrap();
                for (i, (k, v)) in recs.into_iter().enumerate() {
                    self.record_committed(*partition, r.base_offset + i as i64, k, v);
                }
            }
            Op::Put { key, tombstone } => {
                let id = self.next_key;
                self.next_key += 1;
                let key = format!("c{key}");
                let value = (!tombstone).then(|| format!("v{id}"));
                let mut b = BatchBuilder::new(Compression::None, ProducerFields::default());
                b.append(
                    self.clock.now_ms(),
                    Some(key.as_bytes()),
                    value.as_deref().map(str::as_bytes),
                    &[],
                );
                let r = self.log().append_builder("c", 0, b).unwrap();
                self.log().commit().wait().unwrap();
                self.record_committed(C, r.base_offset, key, value);
            }
            Op::Begin => {
                if self.txn.is_none() {
                    self.txn = Some(self.log().begin_transaction().unwrap());
                }
            }
            Op::TxnAppend { partition, n } => {
                let Some(fields) = self.txn.as_ref().map(Transaction::producer_fields) else {
                    return;
                };
                let (b, recs) = self.batch(fields, *partition, *n);
                let (topic, p) = target(*partition);
                let r = self
                    .txn
                    .as_mut()
                    .unwrap()
                    .append_builder(topic, p, b)
                    .unwrap();
                for (i, (k, v)) in recs.into_iter().enumerate() {
                    self.txn_records
                        .push((*partition, r.base_offset + i as i64, k, v));
                }
            }
            Op::Flush => self.log().commit().wait().unwrap(),
            Op::Commit => {
                if let Some(txn) = self.txn.take() {
                    txn.commit().unwrap();
                    for (p, o, k, v) in std::mem::take(&mut self.txn_records) {
                        self.record_committed(p, o, k, v);
                    }
                }
            }
            Op::Abort => {
                if let Some(txn) = self.txn.take() {
                    txn.abort().unwrap();
                    self.txn_records.clear();
                }
            }
            Op::Clean { advance_ms } => {
                self.clock.advance(i64::from(*advance_ms));
                self.log().run_cleaner_once().unwrap();
                self.check();
            }
            Op::Crash { cut } => {
                if let Some(txn) = self.txn.take() {
                    txn.abandon();
                }
                self.txn_records.clear();
                let log = self.log.take().unwrap();
                let durable: Vec<(PathBuf, u64)> =
                    (0..=PARTITIONS).map(|p| durable_tail(&log, p)).collect();
                drop(log);
                for (i, (path, durable)) in durable.iter().enumerate() {
                    cut_segment(path, *durable, cut[i]);
                }
                self.log = Some(self.open());
                self.check();
            }
            Op::Reopen => {
                if let Some(txn) = self.txn.take() {
                    txn.abandon();
                }
                self.txn_records.clear();
                let log = self.log.take().unwrap();
                log.close().unwrap();
                drop(log);
                self.log = Some(self.open());
                self.check();
            }
        }
    }

    fn read_committed(&self, topic: &str, partition: u32) -> BTreeMap<i64, CRecord> {
        let log = self.log();
        let mut seen = BTreeMap::new();
        let mut offset = log.earliest_offset(topic, partition).unwrap();
        loop {
            let r = log
                .read_with(topic, partition, offset, 1 << 20, Isolation::ReadCommitted)
                .unwrap();
            let Some(next) = r.next_offset().unwrap() else {
                break;
            };
            for rec in r.records(offset).unwrap() {
                let s = |b: Vec<u8>| String::from_utf8(b).unwrap();
                assert!(
                    seen.insert(rec.offset, (s(rec.key.unwrap()), rec.value.map(s)))
                        .is_none(),
                    "{topic}-{partition}: offset {} served twice",
                    rec.offset
                );
            }
            offset = next;
        }
        seen
    }

    /// The LSO checks shared by both topics; returns the LSO.
    fn check_lso(&self, partition: u32) -> i64 {
        let (topic, p) = target(partition);
        let log = self.log();
        // An open transaction holds the last stable offset back (Kafka semantics): committed
        // data after its first offset waits until it ends.
        let lso = log.last_stable_offset(topic, p).unwrap();
        let hw = log.latest_offset(topic, p).unwrap();
        assert!(lso <= hw, "LSO never passes the high watermark");
        let open_here = self.txn.is_some()
            && self
                .txn_records
                .iter()
                .any(|(tp, _, _, _)| *tp == partition);
        if !open_here {
            assert_eq!(
                lso, hw,
                "{topic}-{p}: no open transaction, yet the LSO lags"
            );
        }
        lso
    }

    fn check(&self) {
        for p in 0..PARTITIONS {
            let lso = self.check_lso(p);
            let seen: BTreeMap<i64, String> = self
                .read_committed("t", p)
                .into_iter()
                .map(|(o, (k, _))| (o, k))
                .collect();
            let expected: BTreeMap<i64, String> = self
                .committed
                .get(&p)
                .map(|m| m.range(..lso).map(|(o, k)| (*o, k.clone())).collect())
                .unwrap_or_default();
            assert_eq!(
                seen, expected,
                "partition {p}: read_committed view differs from the model"
            );
        }
        self.check_compacted();
    }

    fn check_compacted(&self) {
        let lso = self.check_lso(C);
        let seen = self.read_committed("c", 0);
        for (o, rec) in &seen {
            assert_eq!(
                self.c_committed.get(o),
                Some(rec),
                "c: offset {o} is not the committed record there"
            );
        }
        let active_base = active_segment(self.dir.path(), C).0;
        for (o, rec) in self.c_committed.range(active_base..lso.max(active_base)) {
            assert_eq!(
                seen.get(o),
                Some(rec),
                "c: the active segment lost offset {o}"
            );
        }
        for k in 0..KEYS {
            let key = format!("c{k}");
            let committed: Vec<i64> = self
                .c_committed
                .range(..lso)
                .filter(|(_, (kk, _))| *kk == key)
                .map(|(o, _)| *o)
                .collect();
            let shown: Vec<i64> = seen
                .iter()
                .filter(|(_, (kk, _))| *kk == key)
                .map(|(o, _)| *o)
                .collect();
            assert!(
                committed.ends_with(&shown),
                "c: key {key} shows {shown:?}, not a suffix of {committed:?}"
            );
            if let Some(last) = committed.last() {
                if self.c_committed[last].1.is_some() {
                    assert_eq!(
                        shown.last(),
                        Some(last),
                        "c: key {key} lost its newest value"
                    );
                }
            }
        }
    }
}

/// A partition's active segment: its path and base offset.
fn active_segment(dir: &Path, partition: u32) -> (i64, PathBuf) {
    let (topic, p) = target(partition);
    let pdir = dir.join(format!("{topic}-{p}"));
    std::fs::read_dir(&pdir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_suffix(".log")
                .and_then(|s| s.parse::<i64>().ok())
        })
        .max()
        .map(|base| (base, pdir.join(format!("{base:020}.log"))))
        .unwrap()
}

/// The active segment of a partition and how many of its bytes are durable (below the high
/// watermark).
fn durable_tail(log: &Log, partition: u32) -> (PathBuf, u64) {
    let (topic, p) = target(partition);
    let (base, path) = active_segment(log.dir(), partition);
    let hw = log.latest_offset(topic, p).unwrap();
    let mut total = 0u64;
    let mut offset = base;
    while offset < hw {
        let r = log
            .read_with(topic, p, offset, 1 << 20, Isolation::ReadUncommitted)
            .unwrap();
        let Some(next) = r.next_offset().unwrap() else {
            break;
        };
        total += r.bytes.len() as u64;
        offset = next;
    }
    (path, total)
}

/// Cuts a segment at a point between `durable` and its end chosen by `choice`.
fn cut_segment(path: &Path, durable: u64, choice: u16) {
    let len = std::fs::metadata(path).unwrap().len();
    if len <= durable {
        return;
    }
    let keep = durable + u64::from(choice) % (len - durable + 1);
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(keep)
        .unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, max_shrink_iters: 200, .. ProptestConfig::default() })]

    #[test]
    fn log_matches_model(ops in proptest::collection::vec(op(), 1..40)) {
        let mut h = Harness::new();
        for op in &ops {
            h.apply(op);
        }
        h.check();
        // A final clean, crash and clean reopen keep the committed view too.
        h.apply(&Op::Clean { advance_ms: 1500 });
        h.apply(&Op::Crash { cut: [u16::MAX; TARGETS] });
        h.apply(&Op::Reopen);
    }
}
