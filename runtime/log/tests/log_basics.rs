//! Behaviour of the log through its public API: appends, group commit, reads bounded by the
//! high watermark, segment rolls, reopen after clean and unclean shutdown, torn-tail
//! truncation, corruption reporting, topic rules and the data-directory lock.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::time::Duration;

use headwater_log::batch::{BatchBuilder, Compression, DecodedBatch, ProducerFields};
use headwater_log::{Log, LogError, LogOptions, TopicConfig};

fn batch(keys: std::ops::Range<u32>, ts: i64) -> BatchBuilder {
    let mut b = BatchBuilder::new(Compression::None, ProducerFields::default());
    for k in keys {
        let key = format!("key-{k}");
        let value = format!("value-{k}-{}", "x".repeat(50));
        b.append(
            ts + i64::from(k),
            Some(key.as_bytes()),
            Some(value.as_bytes()),
            &[],
        );
    }
    b
}

/// Every (offset, key) readable from `offset` on.
fn read_all(log: &Log, topic: &str, partition: u32, from: i64) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    let mut offset = from;
    loop {
        let r = log.read(topic, partition, offset, 64 * 1024).unwrap();
        if r.bytes.is_empty() {
            break;
        }
        let mut pos = 0;
        while pos < r.bytes.len() {
            let d = DecodedBatch::decode(&r.bytes[pos..]).unwrap();
            for rec in d.records().unwrap() {
                if rec.offset >= offset {
                    out.push((
                        rec.offset,
                        String::from_utf8(rec.key.unwrap().to_vec()).unwrap(),
                    ));
                }
            }
            pos += d.header.total_size();
            offset = d.header.next_offset();
        }
    }
    out
}

#[test]
fn appends_are_invisible_until_committed_then_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    log.create_topic("orders", 3, TopicConfig::default())
        .unwrap();
    let a = log.append_builder("orders", 1, batch(0..10, 1000)).unwrap();
    assert_eq!((a.base_offset, a.last_offset), (0, 9));
    assert_eq!(
        log.latest_offset("orders", 1).unwrap(),
        0,
        "not durable yet"
    );
    assert!(log.read("orders", 1, 0, 1 << 20).unwrap().bytes.is_empty());
    log.commit().wait().unwrap();
    assert_eq!(log.latest_offset("orders", 1).unwrap(), 10);
    let b = log
        .append_builder("orders", 1, batch(10..15, 2000))
        .unwrap();
    assert_eq!(b.base_offset, 10);
    log.commit().wait().unwrap();
    let all = read_all(&log, "orders", 1, 0);
    assert_eq!(all.len(), 15);
    assert!(all
        .iter()
        .enumerate()
        .all(|(i, (o, k))| *o == i as i64 && *k == format!("key-{i}")));
    assert_eq!(
        read_all(&log, "orders", 1, 12).len(),
        3,
        "a read may start inside a batch"
    );
    assert!(matches!(
        log.read("orders", 1, 16, 100),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert!(matches!(
        log.read("orders", 7, 0, 100),
        Err(LogError::UnknownPartition { .. })
    ));
    assert_eq!(
        log.offset_for_timestamp("orders", 1, 2003).unwrap(),
        Some((10, 2010))
    );
    assert_eq!(
        log.offset_for_timestamp("orders", 1, 2012).unwrap(),
        Some((12, 2012))
    );
    assert_eq!(
        log.offset_for_timestamp("orders", 1, 0).unwrap(),
        Some((0, 1000))
    );
    assert_eq!(log.offset_for_timestamp("orders", 1, 99_999).unwrap(), None);
    log.close().unwrap();

    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    assert_eq!(log.partition_count("orders"), Some(3));
    assert_eq!(log.latest_offset("orders", 1).unwrap(), 15);
    assert_eq!(read_all(&log, "orders", 1, 0).len(), 15);
    assert_eq!(log.latest_offset("orders", 0).unwrap(), 0);
}

#[test]
fn segments_roll_and_reads_cross_them() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    create_topic_with_segment_bytes(&log, "t", 4096);
    for i in 0..40 {
        log.append_builder("t", 0, batch(i * 5..i * 5 + 5, 10_000 + i64::from(i) * 10))
            .unwrap();
    }
    log.commit().wait().unwrap();
    let segments = segment_count(&dir.path().join("t-0"));
    assert!(segments >= 4, "expected several segments, got {segments}");
    let all = read_all(&log, "t", 0, 0);
    assert_eq!(all.len(), 200);
    assert_eq!(read_all(&log, "t", 0, 137).first().unwrap().0, 137);
    drop(log);
    // Unclean reopen (no close): everything was committed, nothing is lost.
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    assert_eq!(read_all(&log, "t", 0, 0).len(), 200);
    let (offset, _) = log.offset_for_timestamp("t", 0, 10_205).unwrap().unwrap();
    assert_eq!(
        offset, 70,
        "record 70 is the first with a timestamp >= 10205"
    );
}

/// Creates a one-partition topic whose segments roll at `segment_bytes`.
fn create_topic_with_segment_bytes(log: &Log, topic: &str, segment_bytes: u64) {
    let mut configs = BTreeMap::new();
    configs.insert("segment.bytes".to_string(), segment_bytes.to_string());
    let config = TopicConfig::from_kafka_configs(&configs).unwrap();
    log.create_topic(topic, 1, config).unwrap();
}

/// How many segment (`.log`) files the partition directory `dir` holds.
fn segment_count(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "log")
        })
        .count()
}

/// Total size of the files in `dir` whose names end with `suffix`.
fn bytes_of_files(dir: &std::path::Path, suffix: &str) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum()
}

#[test]
fn many_small_batches_keep_sparse_indexes_and_exact_time_lookups() {
    let dir = tempfile::tempdir().unwrap();
    let base_ts = 1_000_000;
    let check = |log: &Log| {
        for t in [0, 1, 2, 777, 1500, 2047, 2999] {
            assert_eq!(
                log.offset_for_timestamp("t", 0, base_ts + t).unwrap(),
                Some((t, base_ts + t)),
                "timestamp {t}"
            );
        }
        assert_eq!(
            log.offset_for_timestamp("t", 0, base_ts + 3000).unwrap(),
            None
        );
    };
    {
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        create_topic_with_segment_bytes(&log, "t", 131_072);
        // One record per batch, each a millisecond later: a stream of single-row commits.
        for i in 0..3000 {
            log.append_builder("t", 0, batch(i..i + 1, base_ts))
                .unwrap();
        }
        log.commit().wait().unwrap();
        check(&log);
        log.close().unwrap();
    }
    let partition = dir.path().join("t-0");
    let log_bytes = bytes_of_files(&partition, ".log");
    let segments = segment_count(&partition) as u64;
    assert!(segments >= 3, "{segments} segments");
    // An entry per 4 KiB of batches (and one per segment start), not one per batch.
    let most_entries = log_bytes / 4096 + segments;
    assert!(bytes_of_files(&partition, ".timeindex") <= most_entries * 12);
    assert!(bytes_of_files(&partition, ".index") <= most_entries * 8);
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    check(&log);
}

#[test]
fn torn_tail_is_truncated_and_appends_continue() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        log.create_topic("t", 1, TopicConfig::default()).unwrap();
        log.append_builder("t", 0, batch(0..10, 1)).unwrap();
        log.commit().wait().unwrap();
        log.close().unwrap();
    }
    // Simulate a write cut short by a crash: half a batch at the end.
    let segment = dir.path().join("t-0/00000000000000000000.log");
    let extra = batch(10..20, 1).build().unwrap();
    let mut f = OpenOptions::new().append(true).open(&segment).unwrap();
    f.write_all(&extra[..extra.len() / 2]).unwrap();
    drop(f);
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    assert_eq!(log.latest_offset("t", 0).unwrap(), 10);
    let next = log.append_builder("t", 0, batch(10..12, 1)).unwrap();
    assert_eq!(next.base_offset, 10);
    log.commit().wait().unwrap();
    assert_eq!(read_all(&log, "t", 0, 0).len(), 12);
}

#[test]
fn corruption_of_durable_data_is_reported_not_skipped() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        log.create_topic("t", 1, TopicConfig::default()).unwrap();
        log.append_builder("t", 0, batch(0..10, 1)).unwrap();
        log.append_builder("t", 0, batch(10..20, 1)).unwrap();
        log.commit().wait().unwrap();
        log.close().unwrap(); // checkpoint: offsets below 20 are known durable
    }
    let segment = dir.path().join("t-0/00000000000000000000.log");
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[100] ^= 0xff; // inside the first batch
    std::fs::write(&segment, &bytes).unwrap();
    match Log::open(dir.path(), LogOptions::default()) {
        Err(LogError::Corrupt {
            topic,
            partition,
            source,
        }) => {
            assert_eq!((topic.as_str(), partition), ("t", 0));
            assert!(source.to_string().contains("offset 0"), "{source}");
        }
        Err(other) => panic!("expected a corruption error, got {other}"),
        Ok(_) => panic!("expected a corruption error, the log opened"),
    }
}

#[test]
fn topic_rules_and_directory_lock() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    log.create_topic("a.b_c-1", 2, TopicConfig::default())
        .unwrap();
    assert!(matches!(
        log.create_topic("a.b_c-1", 2, TopicConfig::default()),
        Err(LogError::TopicExists(_))
    ));
    assert!(log
        .ensure_topic("a.b_c-1", 2, TopicConfig::default())
        .is_ok());
    assert!(matches!(
        log.ensure_topic("a.b_c-1", 3, TopicConfig::default()),
        Err(LogError::PartitionCountMismatch {
            existing: 2,
            requested: 3,
            ..
        })
    ));
    for bad in ["", "..", "has space", "slash/x", &"x".repeat(250)] {
        assert!(
            matches!(
                log.create_topic(bad, 1, TopicConfig::default()),
                Err(LogError::InvalidTopicName { .. })
            ),
            "{bad}"
        );
    }
    assert!(matches!(
        log.create_topic("zero", 0, TopicConfig::default()),
        Err(LogError::NoPartitions)
    ));
    assert!(matches!(
        Log::open(dir.path(), LogOptions::default()),
        Err(LogError::Locked(_))
    ));
    log.delete_topic("a.b_c-1").unwrap();
    assert!(log.topics().is_empty());
    assert!(!dir.path().join("a.b_c-1-0").exists());
    log.close().unwrap();
    drop(log);
    assert!(
        Log::open(dir.path(), LogOptions::default()).is_ok(),
        "lock released on drop"
    );
}

#[test]
fn concurrent_commits_share_fsync_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    log.create_topic("t", 4, TopicConfig::default()).unwrap();
    std::thread::scope(|s| {
        for p in 0..4u32 {
            let log = log.clone();
            s.spawn(move || {
                for i in 0..25u32 {
                    log.append_builder("t", p, batch(i * 2..i * 2 + 2, 1))
                        .unwrap();
                    log.commit().wait().unwrap();
                }
            });
        }
    });
    for p in 0..4 {
        assert_eq!(log.latest_offset("t", p).unwrap(), 50);
    }
}

#[tokio::test]
async fn readers_wait_for_new_data() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    log.create_topic("t", 1, TopicConfig::default()).unwrap();
    let waiter = {
        let log = log.clone();
        tokio::spawn(async move {
            log.wait_for_data("t", 0, 0, Duration::from_secs(10))
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    log.append_builder("t", 0, batch(0..3, 1)).unwrap();
    log.commit().durable().await.unwrap();
    assert_eq!(waiter.await.unwrap(), 3);
    let hw = log
        .wait_for_data("t", 0, 5, Duration::from_millis(20))
        .await
        .unwrap();
    assert_eq!(hw, 3, "times out with the current high watermark");
}

#[test]
fn reads_respect_max_bytes_but_always_make_progress() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    log.create_topic("t", 1, TopicConfig::default()).unwrap();
    for i in 0..20 {
        log.append_builder("t", 0, batch(i * 10..i * 10 + 10, 1))
            .unwrap();
    }
    log.commit().wait().unwrap();
    let one_batch = log.read("t", 0, 0, 1).unwrap().bytes.len();
    assert!(one_batch > 500, "a read returns at least one whole batch");
    let limit = one_batch * 2 + one_batch / 2;
    let two = log.read("t", 0, 0, limit).unwrap();
    assert!(two.bytes.len() <= limit);
    let first = DecodedBatch::decode(&two.bytes)
        .unwrap()
        .header
        .total_size();
    let second = DecodedBatch::decode(&two.bytes[first..])
        .unwrap()
        .header
        .total_size();
    assert_eq!(
        two.bytes.len(),
        first + second,
        "whole batches only, within the limit"
    );
    let mut offset = 0;
    let mut reads = 0;
    while offset < 200 {
        let r = log.read("t", 0, offset, one_batch * 3 - 1).unwrap();
        let mut pos = 0;
        while pos < r.bytes.len() {
            let d = DecodedBatch::decode(&r.bytes[pos..]).unwrap();
            pos += d.header.total_size();
            offset = d.header.next_offset();
        }
        reads += 1;
    }
    assert_eq!(reads, 10, "two batches per read");
}

#[test]
fn indexes_survive_a_reopen_and_a_bad_one_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        create_topic_with_segment_bytes(&log, "t", 8192);
        for i in 0..60 {
            log.append_builder("t", 0, batch(i * 3..i * 3 + 3, 10_000))
                .unwrap();
        }
        log.commit().wait().unwrap();
        log.close().unwrap();
    }
    let index = dir.path().join("t-0/00000000000000000000.index");
    let before = std::fs::read(&index).unwrap();
    assert!(before.len() >= 16, "a closed segment has index entries");
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    assert_eq!(
        std::fs::read(&index).unwrap(),
        before,
        "kept, not rebuilt or truncated"
    );
    assert_eq!(read_all(&log, "t", 0, 100).first().unwrap().0, 100);
    log.close().unwrap();
    drop(log);
    // An index whose last entry points into the middle of a batch: rebuilt on open.
    let mut bad = before.clone();
    let n = bad.len();
    let pos = u32::from_be_bytes(bad[n - 4..].try_into().unwrap()) + 7;
    bad[n - 4..].copy_from_slice(&pos.to_be_bytes());
    std::fs::write(&index, &bad).unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    assert_eq!(read_all(&log, "t", 0, 0).len(), 180);
    assert_eq!(read_all(&log, "t", 0, 100).first().unwrap().0, 100);
    assert_eq!(
        std::fs::read(&index).unwrap(),
        before,
        "rebuilt to the same entries"
    );
}
