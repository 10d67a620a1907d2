//! Transactions in the log: atomic visibility across partitions and topics for read_committed
//! readers, aborts, interleaving with non-transactional data, and crash recovery of
//! transactions that were open or half-marked when the process died.

use headwater_log::batch::{control_batch, BatchBuilder, Compression, ControlType, ProducerFields};
use headwater_log::{Isolation, Log, LogOptions, TopicConfig, Transaction};

fn txn_batch(txn: &Transaction, keys: &[&str]) -> BatchBuilder {
    let mut b = BatchBuilder::new(Compression::None, txn.producer_fields());
    for k in keys {
        b.append(1, Some(k.as_bytes()), Some(b"v"), &[]);
    }
    b
}

fn plain_batch(keys: &[&str]) -> BatchBuilder {
    let mut b = BatchBuilder::new(Compression::None, ProducerFields::default());
    for k in keys {
        b.append(1, Some(k.as_bytes()), Some(b"v"), &[]);
    }
    b
}

/// Keys visible from offset 0 with `isolation`.
fn keys(log: &Log, topic: &str, partition: u32, isolation: Isolation) -> Vec<String> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let r = log
            .read_with(topic, partition, offset, 1 << 20, isolation)
            .unwrap();
        let Some(next) = r.next_offset().unwrap() else {
            break;
        };
        for rec in r.records(offset).unwrap() {
            out.push(String::from_utf8(rec.key.unwrap()).unwrap());
        }
        offset = next;
    }
    out
}

fn open(dir: &std::path::Path) -> Log {
    Log::open(dir, LogOptions::default()).unwrap()
}

#[test]
fn commit_makes_all_partitions_visible_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    log.create_topic("orders", 2, TopicConfig::default())
        .unwrap();
    log.create_topic("offsets", 1, TopicConfig::compacted())
        .unwrap();
    let mut txn = log.begin_transaction().unwrap();
    txn.append_builder("orders", 0, txn_batch(&txn, &["o1", "o2"]))
        .unwrap();
    txn.append_builder("orders", 1, txn_batch(&txn, &["o3"]))
        .unwrap();
    txn.append_builder("offsets", 0, txn_batch(&txn, &["lsn-42"]))
        .unwrap();
    log.commit().wait().unwrap(); // data durable, transaction still open
    assert_eq!(
        keys(&log, "orders", 0, Isolation::ReadUncommitted),
        ["o1", "o2"]
    );
    assert!(keys(&log, "orders", 0, Isolation::ReadCommitted).is_empty());
    assert!(keys(&log, "offsets", 0, Isolation::ReadCommitted).is_empty());
    assert_eq!(log.last_stable_offset("orders", 0).unwrap(), 0);
    txn.commit().unwrap();
    assert_eq!(
        keys(&log, "orders", 0, Isolation::ReadCommitted),
        ["o1", "o2"]
    );
    assert_eq!(keys(&log, "orders", 1, Isolation::ReadCommitted), ["o3"]);
    assert_eq!(
        keys(&log, "offsets", 0, Isolation::ReadCommitted),
        ["lsn-42"]
    );
    // Two data records + one commit marker.
    assert_eq!(log.latest_offset("orders", 0).unwrap(), 3);
    assert_eq!(log.last_stable_offset("orders", 0).unwrap(), 3);
}

#[test]
fn aborted_data_is_never_visible_to_read_committed() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    log.create_topic("t", 1, TopicConfig::default()).unwrap();
    let mut txn = log.begin_transaction().unwrap();
    txn.append_builder("t", 0, txn_batch(&txn, &["gone1", "gone2"]))
        .unwrap();
    // Non-transactional data after an open transaction waits behind the LSO.
    log.append_builder("t", 0, plain_batch(&["plain"])).unwrap();
    log.commit().wait().unwrap();
    assert!(keys(&log, "t", 0, Isolation::ReadCommitted).is_empty());
    txn.abort().unwrap();
    assert_eq!(keys(&log, "t", 0, Isolation::ReadCommitted), ["plain"]);
    assert_eq!(
        keys(&log, "t", 0, Isolation::ReadUncommitted),
        ["gone1", "gone2", "plain"]
    );
    let r = log
        .read_with("t", 0, 0, 1 << 20, Isolation::ReadCommitted)
        .unwrap();
    assert_eq!(r.aborted.len(), 1);
    assert_eq!(
        (r.aborted[0].first_offset, r.aborted[0].last_offset),
        (0, 3)
    );
    log.close().unwrap();
    drop(log);
    // The aborted range survives a restart.
    let log = open(dir.path());
    assert_eq!(keys(&log, "t", 0, Isolation::ReadCommitted), ["plain"]);
}

#[test]
fn dropping_a_transaction_aborts_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    log.create_topic("t", 1, TopicConfig::default()).unwrap();
    {
        let mut txn = log.begin_transaction().unwrap();
        txn.append_builder("t", 0, txn_batch(&txn, &["x"])).unwrap();
    }
    log.commit().wait().unwrap();
    assert!(keys(&log, "t", 0, Isolation::ReadCommitted).is_empty());
    assert_eq!(log.last_stable_offset("t", 0).unwrap(), 2);
    let txn = log.begin_transaction().unwrap();
    let mut bad = BatchBuilder::new(Compression::None, ProducerFields::default());
    bad.append(1, None, Some(b"v"), &[]);
    let mut txn = txn;
    assert!(
        txn.append_builder("t", 0, bad).is_err(),
        "non-transactional batch refused"
    );
    txn.commit().unwrap();
}

#[test]
fn crash_with_an_open_transaction_aborts_it_on_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let first_pid;
    {
        let log = open(dir.path());
        log.create_topic("t", 2, TopicConfig::default()).unwrap();
        log.append_builder("t", 0, plain_batch(&["before"]))
            .unwrap();
        let mut txn = log.begin_transaction().unwrap();
        first_pid = txn.producer_id();
        txn.append_builder("t", 0, txn_batch(&txn, &["open1"]))
            .unwrap();
        txn.append_builder("t", 1, txn_batch(&txn, &["open2"]))
            .unwrap();
        log.commit().wait().unwrap();
        log.close().unwrap(); // the checkpoint records the open transaction's first offset
        txn.abandon(); // the process dies: no abort marker
    }
    let log = open(dir.path());
    assert_eq!(keys(&log, "t", 0, Isolation::ReadCommitted), ["before"]);
    assert!(keys(&log, "t", 1, Isolation::ReadCommitted).is_empty());
    assert_eq!(
        log.last_stable_offset("t", 0).unwrap(),
        log.latest_offset("t", 0).unwrap()
    );
    let mut txn = log.begin_transaction().unwrap();
    assert!(
        txn.producer_id() > first_pid,
        "producer ids are never reused"
    );
    txn.append_builder("t", 1, txn_batch(&txn, &["after"]))
        .unwrap();
    txn.commit().unwrap();
    assert_eq!(keys(&log, "t", 1, Isolation::ReadCommitted), ["after"]);
}

#[test]
fn a_durable_commit_marker_in_one_partition_commits_the_others_on_recovery() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = open(dir.path());
        log.create_topic("a", 1, TopicConfig::default()).unwrap();
        log.create_topic("b", 1, TopicConfig::default()).unwrap();
        let mut txn = log.begin_transaction().unwrap();
        txn.append_builder("a", 0, txn_batch(&txn, &["a1"]))
            .unwrap();
        txn.append_builder("b", 0, txn_batch(&txn, &["b1"]))
            .unwrap();
        log.commit().wait().unwrap();
        // The process dies after the first marker reached the disk, before the second.
        log.append(
            "a",
            0,
            control_batch(txn.producer_id(), 0, ControlType::Commit, 1),
        )
        .unwrap();
        log.commit().wait().unwrap();
        txn.abandon();
    }
    let log = open(dir.path());
    assert_eq!(keys(&log, "a", 0, Isolation::ReadCommitted), ["a1"]);
    assert_eq!(keys(&log, "b", 0, Isolation::ReadCommitted), ["b1"]);
}
