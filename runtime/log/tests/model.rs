//! Model test of the log: random sequences of appends, transactions (commit, abort, left open),
//! flushes, crashes (the active segment cut at a random byte past the durable point, no clean
//! close) and reopens, checked against an in-memory model after every reopen and at the end:
//! every committed record is there, at its offset, in order, and nothing uncommitted is visible
//! to a read_committed reader.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::path::Path;

use headwater_log::batch::{BatchBuilder, Compression, ProducerFields};
use headwater_log::{Isolation, Log, LogOptions, TopicConfig, Transaction};
use proptest::prelude::*;

const PARTITIONS: u32 = 3;

#[derive(Clone, Debug)]
enum Op {
    /// Non-transactional batch of `n` records, committed at once.
    Append {
        partition: u32,
        n: u8,
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
    /// Process death: open transactions are abandoned and each partition's file is cut at a
    /// random point between its durable end and its current end.
    Crash {
        cut: [u16; PARTITIONS as usize],
    },
    /// Clean close and reopen.
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..PARTITIONS, 1u8..6).prop_map(|(partition, n)| Op::Append { partition, n }),
        2 => Just(Op::Begin),
        4 => (0..PARTITIONS, 1u8..6).prop_map(|(partition, n)| Op::TxnAppend { partition, n }),
        1 => Just(Op::Flush),
        2 => Just(Op::Commit),
        1 => Just(Op::Abort),
        1 => any::<[u16; PARTITIONS as usize]>().prop_map(|cut| Op::Crash { cut }),
        1 => Just(Op::Reopen),
    ]
}

struct Harness {
    dir: tempfile::TempDir,
    log: Option<Log>,
    txn: Option<Transaction>,
    /// Records of the open transaction: (partition, offset, key).
    txn_records: Vec<(u32, i64, String)>,
    /// What read_committed must show: partition -> offset -> key.
    committed: BTreeMap<u32, BTreeMap<i64, String>>,
    next_key: u64,
}

impl Harness {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        log.create_topic("t", PARTITIONS, TopicConfig::default())
            .unwrap();
        Harness {
            dir,
            log: Some(log),
            txn: None,
            txn_records: Vec::new(),
            committed: BTreeMap::new(),
            next_key: 0,
        }
    }

    fn log(&self) -> &Log {
        self.log.as_ref().unwrap()
    }

    fn batch(&mut self, producer: ProducerFields, n: u8) -> (BatchBuilder, Vec<String>) {
        let mut b = BatchBuilder::new(Compression::None, producer);
        let mut keys = Vec::new();
        for _ in 0..n {
            let key = format!("k{}", self.next_key);
            self.next_key += 1;
            b.append(1, Some(key.as_bytes()), Some(b"value"), &[]);
            keys.push(key);
        }
        (b, keys)
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Append { partition, n } => {
                let (b, keys) = self.batch(ProducerFields::default(), *n);
                let r = self.log().append_builder("t", *partition, b).unwrap();
                self.log().commit().wait().unwrap();
                let m = self.committed.entry(*partition).or_default();
                for (i, k) in keys.into_iter().enumerate() {
                    m.insert(r.base_offset + i as i64, k);
                }
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
                let (b, keys) = self.batch(fields, *n);
                let r = self
                    .txn
                    .as_mut()
                    .unwrap()
                    .append_builder("t", *partition, b)
                    .unwrap();
                for (i, k) in keys.into_iter().enumerate() {
                    self.txn_records
                        .push((*partition, r.base_offset + i as i64, k));
                }
            }
            Op::Flush => self.log().commit().wait().unwrap(),
            Op::Commit => {
                if let Some(txn) = self.txn.take() {
                    txn.commit().unwrap();
                    for (p, o, k) in self.txn_records.drain(..) {
                        self.committed.entry(p).or_default().insert(o, k);
                    }
                }
            }
            Op::Abort => {
                if let Some(txn) = self.txn.take() {
                    txn.abort().unwrap();
                    self.txn_records.clear();
                }
            }
            Op::Crash { cut } => {
                if let Some(txn) = self.txn.take() {
                    txn.abandon();
                }
                self.txn_records.clear();
                let log = self.log.take().unwrap();
                let durable: Vec<u64> = (0..PARTITIONS).map(|p| durable_bytes(&log, p)).collect();
                drop(log);
                for p in 0..PARTITIONS {
                    cut_segment(self.dir.path(), p, durable[p as usize], cut[p as usize]);
                }
                self.log = Some(Log::open(self.dir.path(), LogOptions::default()).unwrap());
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
                self.log = Some(Log::open(self.dir.path(), LogOptions::default()).unwrap());
                self.check();
            }
        }
    }

    fn check(&self) {
        let log = self.log();
        for p in 0..PARTITIONS {
            let mut seen = BTreeMap::new();
            let mut offset = 0;
            loop {
                let r = log
                    .read_with("t", p, offset, 1 << 20, Isolation::ReadCommitted)
                    .unwrap();
                let Some(next) = r.next_offset().unwrap() else {
                    break;
                };
                for rec in r.records(offset).unwrap() {
                    seen.insert(rec.offset, String::from_utf8(rec.key.unwrap()).unwrap());
                }
                offset = next;
            }
            // An open transaction holds the last stable offset back (Kafka semantics): committed
            // data after its first offset waits until it ends.
            let lso = log.last_stable_offset("t", p).unwrap();
            let hw = log.latest_offset("t", p).unwrap();
            assert!(lso <= hw, "LSO never passes the high watermark");
            let open_here =
                self.txn.is_some() && self.txn_records.iter().any(|(tp, _, _)| *tp == p);
            if !open_here {
                assert_eq!(
                    lso, hw,
                    "partition {p}: no open transaction, yet the LSO lags"
                );
            }
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
    }
}

/// Bytes of the partition's single segment that are durable (everything below the high
/// watermark).
fn durable_bytes(log: &Log, partition: u32) -> u64 {
    let hw = log.latest_offset("t", partition).unwrap();
    let mut total = 0u64;
    let mut offset = 0;
    while offset < hw {
        let r = log
            .read_with("t", partition, offset, 1 << 20, Isolation::ReadUncommitted)
            .unwrap();
        let Some(next) = r.next_offset().unwrap() else {
            break;
        };
        total += r.bytes.len() as u64;
        offset = next;
    }
    total
}

/// Cuts the partition's segment at a point between `durable` and its end chosen by `choice`.
fn cut_segment(dir: &Path, partition: u32, durable: u64, choice: u16) {
    let path = dir.join(format!("t-{partition}/00000000000000000000.log"));
    let len = std::fs::metadata(&path).unwrap().len();
    if len <= durable {
        return;
    }
    let keep = durable + u64::from(choice) % (len - durable + 1);
    OpenOptions::new()
        .write(true)
        .open(&path)
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
        // A final crash and a final clean reopen keep the committed view too.
        h.apply(&Op::Crash { cut: [u16::MAX; PARTITIONS as usize] });
        h.apply(&Op::Reopen);
    }
}
