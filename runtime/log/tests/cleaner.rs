//! Retention and compaction through the public API, driven by a fake clock and
//! `Log::run_cleaner_once` (the background cleaner is off): retention by time and by size,
//! the log start offset and OffsetOutOfRange, the active segment and open transactions left
//! alone; compaction keeping the newest record per key at its original offset, tombstones
//! removed after `delete.retention.ms`, aborted data removed, transactional flags kept,
//! `min.compaction.lag.ms`, and a crash at every step of the segment swap.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use headwater_log::batch::{BatchBuilder, BatchHeader, Compression, ProducerFields};
use headwater_log::cleaner::SwapStep;
use headwater_log::{
    Clock, FakeClock, Isolation, Log, LogError, LogOptions, TopicConfig, Transaction,
};

const T0: i64 = 1_700_000_000_000;

type Rec = (i64, Option<String>, Option<String>);

fn options(clock: &Arc<FakeClock>) -> LogOptions {
    LogOptions {
        clock: clock.clone(),
        background_cleaner: false,
        min_cleanable_dirty_ratio: 0.0,
        ..LogOptions::default()
    }
}

fn config(pairs: &[(&str, &str)]) -> TopicConfig {
    let m: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    TopicConfig::from_kafka_configs(&m).unwrap()
}

fn builder(
    producer: ProducerFields,
    records: &[(Option<&str>, Option<&str>)],
    ts: i64,
) -> BatchBuilder {
    let mut b = BatchBuilder::new(Compression::None, producer);
    for (k, v) in records {
        b.append(ts, k.map(str::as_bytes), v.map(str::as_bytes), &[]);
    }
    b
}

/// Appends one batch and commits it; returns its base offset.
fn put(log: &Log, topic: &str, records: &[(Option<&str>, Option<&str>)], ts: i64) -> i64 {
    let r = log
        .append_builder(topic, 0, builder(ProducerFields::default(), records, ts))
        .unwrap();
    log.commit().wait().unwrap();
    r.base_offset
}

fn txn_put(txn: &mut Transaction, topic: &str, records: &[(Option<&str>, Option<&str>)], ts: i64) {
    let b = builder(txn.producer_fields(), records, ts);
    txn.append_builder(topic, 0, b).unwrap();
}

/// Every record readable from the log start with `isolation`.
fn view(log: &Log, topic: &str, isolation: Isolation) -> Vec<Rec> {
    let mut out = Vec::new();
    let mut offset = log.earliest_offset(topic, 0).unwrap();
    loop {
        let r = log.read_with(topic, 0, offset, 1 << 20, isolation).unwrap();
        let Some(next) = r.next_offset().unwrap() else {
            break;
        };
        for rec in r.records(offset).unwrap() {
            let s = |b: Option<Vec<u8>>| b.map(|b| String::from_utf8(b).unwrap());
            out.push((rec.offset, s(rec.key), s(rec.value)));
        }
        offset = next;
    }
    out
}

/// Headers of every batch readable (read_uncommitted) from the log start.
fn batch_headers(log: &Log, topic: &str) -> Vec<BatchHeader> {
    let mut out = Vec::new();
    let mut offset = log.earliest_offset(topic, 0).unwrap();
    loop {
        let r = log
            .read_with(topic, 0, offset, 1 << 20, Isolation::ReadUncommitted)
            .unwrap();
        let Some(next) = r.next_offset().unwrap() else {
            break;
        };
        let mut pos = 0;
        while pos < r.bytes.len() {
            let h = BatchHeader::parse(&r.bytes[pos..]).unwrap();
            pos += h.total_size();
            out.push(h);
        }
        offset = next;
    }
    out
}

/// Segment base offsets of partition 0, from the directory.
fn segment_bases(dir: &Path, topic: &str) -> Vec<i64> {
    let mut bases: Vec<i64> = std::fs::read_dir(dir.join(format!("{topic}-0")))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_suffix(".log").and_then(|s| s.parse().ok())
        })
        .collect();
    bases.sort_unstable();
    bases
}

fn file_names(dir: &Path, topic: &str) -> BTreeSet<String> {
    std::fs::read_dir(dir.join(format!("{topic}-0")))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

fn segment_len(dir: &Path, topic: &str, base: i64) -> u64 {
    std::fs::metadata(dir.join(format!("{topic}-0/{base:020}.log")))
        .unwrap()
        .len()
}

fn value(i: u32, tag: &str) -> String {
    format!("{tag}-{i}-{}", "x".repeat(60))
}

#[test]
fn retention_by_time_deletes_old_closed_segments_only() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FakeClock::new(T0));
    let log = Log::open(dir.path(), options(&clock)).unwrap();
    let cfg = [("segment.bytes", "1024"), ("retention.ms", "60000")];
    log.create_topic("events", 1, config(&cfg)).unwrap();
    let mut keep_forever = cfg.to_vec();
    keep_forever.push(("cleanup.policy", "compact"));
    log.create_topic("state", 1, config(&keep_forever)).unwrap();
    let mut both = cfg.to_vec();
    both.push(("cleanup.policy", "compact,delete"));
    log.create_topic("both", 1, config(&both)).unwrap();
    let old = T0 - 120_000;
    for i in 0..12 {
        let v = value(i, "old");
        let recs = [(Some("a"), Some(v.as_str())), (Some("b"), Some(v.as_str()))];
        put(&log, "events", &recs, old);
        put(&log, "state", &recs, old);
        put(&log, "both", &recs, old);
    }
    put(&log, "both", &[(Some("n"), Some("new"))], T0);
    let first_new = put(&log, "events", &[(Some("n"), Some(&value(0, "new")))], T0);
    // An aborted transaction among the new data: its entry goes with its segment.
    let mut txn = log.begin_transaction().unwrap();
    txn_put(
        &mut txn,
        "events",
        &[(Some("t"), Some(&value(0, "aborted")))],
        T0,
    );
    txn.abort().unwrap();
    for i in 1..9 {
        put(
            &log,
            "events",
            &[(Some("n"), Some(value(i, "new").as_str())); 3],
            T0,
        );
    }
    let bases = segment_bases(dir.path(), "events");
    assert!(bases.len() >= 5, "several segments: {bases:?}");
    let end = log.latest_offset("events", 0).unwrap();
    let before = view(&log, "events", Isolation::ReadCommitted);
    let aborted_file = dir.path().join("events-0/aborted-transactions");
    assert_eq!(std::fs::metadata(&aborted_file).unwrap().len(), 24);

    let stats = log.run_cleaner_once().unwrap();
    // Segments holding only old records are gone; the one holding the first new record stays.
    let first_kept = *bases.iter().filter(|b| **b <= first_new).max().unwrap();
    let deleted = bases.iter().filter(|b| **b < first_kept).count() as u64;
    assert!(deleted >= 2);
    assert!(
        stats.segments_deleted > deleted,
        "events and both: {stats:?}"
    );
    assert_eq!(log.earliest_offset("events", 0).unwrap(), first_kept);
    assert_eq!(segment_bases(dir.path(), "events")[0], first_kept);
    assert!(matches!(
        log.read("events", 0, 0, 1024),
        Err(LogError::OffsetOutOfRange { log_start, .. }) if log_start == first_kept
    ));
    let after = view(&log, "events", Isolation::ReadCommitted);
    let expected: Vec<Rec> = before
        .iter()
        .filter(|r| r.0 >= first_kept)
        .cloned()
        .collect();
    assert_eq!(after, expected, "what is left is unchanged");
    assert_eq!(log.latest_offset("events", 0).unwrap(), end);
    // A compacted topic is not subject to retention; compact,delete is.
    assert_eq!(log.earliest_offset("state", 0).unwrap(), 0);
    let both_bases = segment_bases(dir.path(), "both");
    assert_eq!(
        both_bases.len(),
        1,
        "old segments of compact,delete went: {both_bases:?}"
    );
    assert!(log.earliest_offset("both", 0).unwrap() > 0);

    // Later, everything is old: every closed segment goes, never the active one.
    clock.advance(61_000);
    log.run_cleaner_once().unwrap();
    let left = segment_bases(dir.path(), "events");
    assert_eq!(left.len(), 1, "only the active segment is left: {left:?}");
    assert_eq!(log.earliest_offset("events", 0).unwrap(), left[0]);
    assert_eq!(log.latest_offset("events", 0).unwrap(), end);
    assert_eq!(
        std::fs::metadata(&aborted_file).unwrap().len(),
        0,
        "the aborted entry went with its data"
    );
    // Appends continue at the same offsets, and a reopen sees the same log start.
    assert_eq!(put(&log, "events", &[(Some("z"), Some("z"))], T0), end);
    log.close().unwrap();
    let log = Log::open(dir.path(), options(&clock)).unwrap();
    assert_eq!(log.earliest_offset("events", 0).unwrap(), left[0]);
    assert_eq!(log.latest_offset("events", 0).unwrap(), end + 1);
}

#[test]
fn retention_by_size_keeps_the_partition_at_or_above_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FakeClock::new(T0));
    let log = Log::open(dir.path(), options(&clock)).unwrap();
    let cfg = config(&[
        ("segment.bytes", "1024"),
        ("retention.bytes", "2500"),
        ("retention.ms", "-1"),
    ]);
    log.create_topic("events", 1, cfg).unwrap();
    for i in 0..20 {
        put(
            &log,
            "events",
            &[(Some("k"), Some(value(i, "v").as_str())); 3],
            T0,
        );
    }
    let size = |bases: &[i64]| -> u64 {
        bases
            .iter()
            .map(|b| segment_len(dir.path(), "events", *b))
            .sum()
    };
    let bases = segment_bases(dir.path(), "events");
    assert!(size(&bases) > 5000);
    log.run_cleaner_once().unwrap();
    let left = segment_bases(dir.path(), "events");
    assert!(left.len() < bases.len());
    let total = size(&left);
    assert!(total >= 2500, "never below the limit: {total}");
    assert!(
        total - segment_len(dir.path(), "events", left[0]) < 2500,
        "deleting one more segment would go below the limit"
    );
    assert_eq!(log.earliest_offset("events", 0).unwrap(), left[0]);
    // Both disabled: nothing happens.
    let dir2 = tempfile::tempdir().unwrap();
    let log2 = Log::open(dir2.path(), options(&clock)).unwrap();
    let cfg = config(&[("segment.bytes", "1024"), ("retention.ms", "-1")]);
    log2.create_topic("events", 1, cfg).unwrap();
    for i in 0..10 {
        put(
            &log2,
            "events",
            &[(Some("k"), Some(value(i, "v").as_str())); 3],
            0,
        );
    }
    let n = segment_bases(dir2.path(), "events").len();
    clock.advance(1_000_000_000);
    assert_eq!(log2.run_cleaner_once().unwrap().segments_deleted, 0);
    assert_eq!(segment_bases(dir2.path(), "events").len(), n);
}

#[test]
fn retention_never_deletes_data_of_an_undecided_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FakeClock::new(T0));
    let log = Log::open(dir.path(), options(&clock)).unwrap();
    let cfg = config(&[("segment.bytes", "1024"), ("retention.ms", "1000")]);
    log.create_topic("events", 1, cfg).unwrap();
    for i in 0..8 {
        put(
            &log,
            "events",
            &[(Some("k"), Some(value(i, "v").as_str())); 2],
            0,
        );
    }
    let mut txn = log.begin_transaction().unwrap();
    txn_put(
        &mut txn,
        "events",
        &[(Some("t"), Some("in a transaction"))],
        0,
    );
    log.commit().wait().unwrap();
    let txn_offset = log.latest_offset("events", 0).unwrap() - 1;
    for i in 0..8 {
        put(
            &log,
            "events",
            &[(Some("k"), Some(value(i, "w").as_str())); 2],
            0,
        );
    }
    log.run_cleaner_once().unwrap();
    let start = log.earliest_offset("events", 0).unwrap();
    assert!(start > 0, "segments before the transaction go");
    assert!(
        start <= txn_offset,
        "the transaction's data stays while it is open"
    );
    txn.commit().unwrap();
    clock.advance(10_000);
    log.run_cleaner_once().unwrap();
    assert!(log.earliest_offset("events", 0).unwrap() > txn_offset);
}

/// The compaction scenario's committed records: offset -> (key, value).
struct Written {
    committed: BTreeMap<i64, (Option<String>, Option<String>)>,
    aborted: BTreeSet<i64>,
    txn_pid: i64,
}

/// Keys k0..k4 over many batches and segments; a committed transaction (k1, k2), an aborted
/// one (k0, k4), a tombstone for k3, a record without key, then more values for k0, k1, k4.
fn write_compaction_scenario(log: &Log, topic: &str) -> Written {
    let mut w = Written {
        committed: BTreeMap::new(),
        aborted: BTreeSet::new(),
        txn_pid: -1,
    };
    let record = |w: &mut Written, base: i64, recs: &[(Option<&str>, Option<&str>)]| {
        for (i, (k, v)) in recs.iter().enumerate() {
            w.committed.insert(
                base + i as i64,
                (k.map(str::to_owned), v.map(str::to_owned)),
            );
        }
    };
    for round in 0..4 {
        let vals: Vec<String> = (0..5).map(|k| value(k, &format!("r{round}"))).collect();
        let recs: Vec<(Option<&str>, Option<&str>)> = ["k0", "k1", "k2", "k3", "k4"]
            .iter()
            .zip(&vals)
            .map(|(k, v)| (Some(*k), Some(v.as_str())))
            .collect();
        let base = put(log, topic, &recs, T0);
        record(&mut w, base, &recs);
    }
    let mut txn = log.begin_transaction().unwrap();
    w.txn_pid = txn.producer_id();
    let recs = [(Some("k1"), Some("t1")), (Some("k2"), Some("t2"))];
    let b = builder(txn.producer_fields(), &recs, T0);
    let base = txn.append_builder(topic, 0, b).unwrap().base_offset;
    txn.commit().unwrap();
    record(&mut w, base, &recs);
    let mut txn = log.begin_transaction().unwrap();
    let b = builder(
        txn.producer_fields(),
        &[(Some("k0"), Some("aborted")), (Some("k4"), Some("aborted"))],
        T0,
    );
    let r = txn.append_builder(topic, 0, b).unwrap();
    w.aborted.extend(r.base_offset..=r.last_offset);
    txn.abort().unwrap();
    let recs = [(Some("k3"), None), (None, Some("no key"))];
    let base = put(log, topic, &recs, T0);
    record(&mut w, base, &recs);
    for round in 7..14 {
        let vals: Vec<String> = [0, 1, 4]
            .iter()
            .map(|k| value(*k, &format!("r{round}")))
            .collect();
        let recs: Vec<(Option<&str>, Option<&str>)> = ["k0", "k1", "k4"]
            .iter()
            .zip(&vals)
            .map(|(k, v)| (Some(*k), Some(v.as_str())))
            .collect();
        let base = put(log, topic, &recs, T0);
        record(&mut w, base, &recs);
    }
    w
}

/// Newest value per key in a view (the table a consumer builds).
fn table(records: &[Rec]) -> BTreeMap<Option<String>, Option<String>> {
    let mut t = BTreeMap::new();
    for (_, k, v) in records {
        if k.is_some() {
            t.insert(k.clone(), v.clone());
        }
    }
    t
}

#[test]
fn compaction_keeps_the_newest_record_per_key_at_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FakeClock::new(T0));
    let log = Log::open(dir.path(), options(&clock)).unwrap();
    let cfg = config(&[
        ("cleanup.policy", "compact"),
        ("segment.bytes", "1024"),
        ("delete.retention.ms", "10000"),
    ]);
    log.create_topic("state", 1, cfg).unwrap();
    let w = write_compaction_scenario(&log, "state");
    let bases = segment_bases(dir.path(), "state");
    let active = *bases.last().unwrap();
    assert!(bases.len() >= 4, "several segments: {bases:?}");
    let active_bytes = std::fs::read(dir.path().join(format!("state-0/{active:020}.log"))).unwrap();
    let end = log.latest_offset("state", 0).unwrap();
    let before = view(&log, "state", Isolation::ReadCommitted);
    let uncommitted_before = view(&log, "state", Isolation::ReadUncommitted);
    assert!(uncommitted_before.iter().any(|r| w.aborted.contains(&r.0)));

    let stats = log.run_cleaner_once().unwrap();
    assert!(
        stats.segments_rewritten >= 1 && stats.records_removed > 0,
        "{stats:?}"
    );
    let after = view(&log, "state", Isolation::ReadCommitted);
    // Every record left is a committed one, at its original offset, in order.
    for (o, k, v) in &after {
        assert_eq!(
            w.committed.get(o),
            Some(&(k.clone(), v.clone())),
            "offset {o}"
        );
    }
    assert!(after.windows(2).all(|p| p[0].0 < p[1].0));
    // Below the active segment every key appears once, with its newest record there.
    let cleaned: Vec<&Rec> = after.iter().filter(|r| r.0 < active).collect();
    let mut seen = BTreeSet::new();
    for (o, k, _) in &cleaned {
        if k.is_none() {
            continue;
        }
        assert!(
            seen.insert(k.clone()),
            "key {k:?} twice below the active segment"
        );
        let newest = w
            .committed
            .range(..active)
            .filter(|(_, (kk, _))| kk == k)
            .map(|(o, _)| *o)
            .max();
        assert_eq!(newest, Some(*o), "key {k:?} keeps its newest record");
    }
    // The active segment is untouched, record for record and byte for byte.
    let tail = |v: &[Rec]| -> Vec<Rec> { v.iter().filter(|r| r.0 >= active).cloned().collect() };
    assert_eq!(tail(&after), tail(&before));
    assert_eq!(
        std::fs::read(dir.path().join(format!("state-0/{active:020}.log"))).unwrap(),
        active_bytes
    );
    // The table a consumer builds is the same; the tombstone and the keyless record stay.
    assert_eq!(table(&after), table(&before));
    assert!(after
        .iter()
        .any(|r| r.1.as_deref() == Some("k3") && r.2.is_none()));
    assert!(after
        .iter()
        .any(|r| r.1.is_none() && r.2.as_deref() == Some("no key")));
    // Aborted data is gone even for read_uncommitted readers.
    let uncommitted = view(&log, "state", Isolation::ReadUncommitted);
    assert!(uncommitted.iter().all(|r| !w.aborted.contains(&r.0)));
    // The committed transaction's surviving record keeps its producer id and flag.
    let txn_batches: Vec<BatchHeader> = batch_headers(&log, "state")
        .into_iter()
        .filter(|h| h.producer_id == w.txn_pid)
        .collect();
    assert!(txn_batches
        .iter()
        .any(|h| !h.is_control() && h.record_count == 1));
    assert!(txn_batches.iter().all(BatchHeader::is_transactional));
    assert_eq!(log.latest_offset("state", 0).unwrap(), end);
    // Segments still end where they did (compaction keeps each one's last offset): where a
    // segment's last batch lost every record, an empty batch holds its offsets.
    let bases_after = segment_bases(dir.path(), "state");
    assert!(bases_after.iter().all(|b| bases.contains(b)));
    assert!(batch_headers(&log, "state")
        .iter()
        .any(|h| h.record_count == 0 && !h.is_control()));

    // Nothing new and no horizon due: a second pass rewrites nothing.
    assert_eq!(log.run_cleaner_once().unwrap().segments_rewritten, 0);

    // After delete.retention.ms the tombstone (and with it every trace of k3) goes.
    clock.advance(10_000);
    log.run_cleaner_once().unwrap();
    let later = view(&log, "state", Isolation::ReadCommitted);
    assert!(
        later.iter().all(|r| r.1.as_deref() != Some("k3")),
        "{later:?}"
    );
    let mut expected = table(&before);
    expected.remove(&Some("k3".to_owned()));
    assert_eq!(table(&later), expected);
    assert!(
        later.iter().any(|r| r.1.is_none()),
        "a keyless record is kept"
    );

    // A reopen sees the same; appends continue at the same offsets; reads cross the gaps.
    log.close().unwrap();
    let log = Log::open(dir.path(), options(&clock)).unwrap();
    assert_eq!(view(&log, "state", Isolation::ReadCommitted), later);
    assert_eq!(put(&log, "state", &[(Some("k9"), Some("new"))], T0), end);
    for (o, _, _) in &later {
        let r = log.read("state", 0, *o, 1).unwrap();
        assert_eq!(r.records(*o).unwrap()[0].offset, *o);
    }
}

#[test]
fn min_compaction_lag_holds_recent_segments_back() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FakeClock::new(T0));
    let log = Log::open(dir.path(), options(&clock)).unwrap();
    let cfg = config(&[
        ("cleanup.policy", "compact,delete"),
        ("segment.bytes", "1024"),
        ("min.compaction.lag.ms", "60000"),
        ("retention.ms", "-1"),
    ]);
    log.create_topic("state", 1, cfg).unwrap();
    for i in 0..12 {
        put(
            &log,
            "state",
            &[(Some("k"), Some(value(i, "v").as_str())); 3],
            T0,
        );
    }
    let before = view(&log, "state", Isolation::ReadCommitted);
    assert_eq!(log.run_cleaner_once().unwrap().segments_rewritten, 0);
    assert_eq!(view(&log, "state", Isolation::ReadCommitted), before);
    clock.advance(60_000);
    assert!(log.run_cleaner_once().unwrap().segments_rewritten > 0);
    let after = view(&log, "state", Isolation::ReadCommitted);
    assert!(after.len() < before.len());
    assert_eq!(after.last(), before.last());
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else if e.file_name() != ".lock" {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// A compacted topic whose closed segments are small (rolled by `segment.ms` on the fake
/// clock), so that one cleaned segment replaces several.
fn build_swap_fixture(dir: &Path, clock: &Arc<FakeClock>) {
    let log = Log::open(dir, options(clock)).unwrap();
    let cfg = config(&[
        ("cleanup.policy", "compact"),
        ("segment.ms", "1000"),
        ("delete.retention.ms", "86400000"),
    ]);
    log.create_topic("state", 1, cfg).unwrap();
    for round in 0..8 {
        let vals: Vec<String> = (0..3).map(|k| value(k, &format!("r{round}"))).collect();
        let mut recs: Vec<(Option<&str>, Option<&str>)> = ["a", "b", "c"]
            .iter()
            .zip(&vals)
            .map(|(k, v)| (Some(*k), Some(v.as_str())))
            .collect();
        if round == 6 {
            recs.push((Some("b"), None));
        }
        put(&log, "state", &recs, clock.now_ms());
        clock.advance(1_000);
    }
    log.close().unwrap();
}

#[test]
fn a_crash_at_any_step_of_the_swap_loses_and_duplicates_nothing() {
    let root = tempfile::tempdir().unwrap();
    let clock = Arc::new(FakeClock::new(T0));
    let fixture = root.path().join("fixture");
    build_swap_fixture(&fixture, &clock);
    let before_bases = segment_bases(&fixture, "state");
    assert!(before_bases.len() >= 8, "{before_bases:?}");

    // Reference: an uninterrupted compaction of a copy.
    let reference: PathBuf = root.path().join("reference");
    copy_dir(&fixture, &reference);
    let (before, after) = {
        let log = Log::open(&reference, options(&clock)).unwrap();
        let before = view(&log, "state", Isolation::ReadUncommitted);
        let stats = log.run_cleaner_once().unwrap();
        assert_eq!(
            stats.segments_rewritten, 1,
            "one cleaned segment replaces them all"
        );
        (before, view(&log, "state", Isolation::ReadUncommitted))
    };
    assert!(after.len() < before.len());
    let end = before.last().unwrap().0 + 1;

    let steps = [
        (SwapStep::Cleaned, ".log.cleaned"),
        (SwapStep::Swapped, ".log.swap"),
        (SwapStep::FirstOriginalDeleted, ".log.swap"),
        (SwapStep::OriginalsDeleted, ".log.swap"),
        (SwapStep::Renamed, ""),
    ];
    for (step, leftover) in steps {
        let dir = root.path().join(format!("{step:?}"));
        copy_dir(&fixture, &dir);
        {
            let log = Log::open(&dir, options(&clock)).unwrap();
            log.set_compaction_stop_point(Some(step));
            assert!(log.run_cleaner_once().is_err(), "{step:?}: the pass stops");
            // The process "dies" here: no close.
        }
        let names = file_names(&dir, "state");
        if !leftover.is_empty() {
            assert!(
                names.iter().any(|n| n.ends_with(leftover)),
                "{step:?}: {names:?}"
            );
        }
        match step {
            SwapStep::FirstOriginalDeleted => {
                assert!(!names.contains(&format!("{:020}.log", before_bases[0])));
                assert!(names.contains(&format!("{:020}.log", before_bases[1])));
            }
            SwapStep::OriginalsDeleted => {
                assert!(!names.contains(&format!("{:020}.log", before_bases[1])));
            }
            SwapStep::Renamed => {
                assert!(names.contains(&format!("{:020}.log", before_bases[0])));
                assert!(!names.contains(&format!("{:020}.index", before_bases[0])));
            }
            _ => {}
        }
        let log = Log::open(&dir, options(&clock)).unwrap();
        let recovered = view(&log, "state", Isolation::ReadUncommitted);
        let expected = if step == SwapStep::Cleaned {
            &before
        } else {
            &after
        };
        assert_eq!(&recovered, expected, "{step:?}: recovered view");
        let names = file_names(&dir, "state");
        assert!(
            names
                .iter()
                .all(|n| !n.ends_with(".cleaned") && !n.ends_with(".swap")),
            "{step:?}: leftovers {names:?}"
        );
        // Cleaning again converges on the same result; appends continue where they were.
        log.run_cleaner_once().unwrap();
        assert_eq!(
            view(&log, "state", Isolation::ReadUncommitted),
            after,
            "{step:?}"
        );
        assert_eq!(
            put(&log, "state", &[(Some("z"), Some("z"))], T0),
            end,
            "{step:?}"
        );
        log.close().unwrap();
    }

    // The final rename durable but not the deletions before it (a file system that reordered
    // them): a leftover original overlaps the cleaned segment and is removed at open.
    let dir = root.path().join("reordered");
    copy_dir(&fixture, &dir);
    {
        let log = Log::open(&dir, options(&clock)).unwrap();
        log.set_compaction_stop_point(Some(SwapStep::FirstOriginalDeleted));
        assert!(log.run_cleaner_once().is_err());
    }
    let pdir = dir.join("state-0");
    let first = format!("{:020}", before_bases[0]);
    std::fs::rename(
        pdir.join(format!("{first}.log.swap")),
        pdir.join(format!("{first}.log")),
    )
    .unwrap();
    let log = Log::open(&dir, options(&clock)).unwrap();
    assert_eq!(view(&log, "state", Isolation::ReadUncommitted), after);
    assert_eq!(
        segment_bases(&dir, "state").len(),
        2,
        "the cleaned segment and the active one"
    );
}

#[test]
fn a_torn_cleaned_file_is_discarded() {
    let root = tempfile::tempdir().unwrap();
    let clock = Arc::new(FakeClock::new(T0));
    let dir = root.path().join("log");
    build_swap_fixture(&dir, &clock);
    let (before, base) = {
        let log = Log::open(&dir, options(&clock)).unwrap();
        let before = view(&log, "state", Isolation::ReadUncommitted);
        log.set_compaction_stop_point(Some(SwapStep::Cleaned));
        assert!(log.run_cleaner_once().is_err());
        (before, segment_bases(&dir, "state")[0])
    };
    let cleaned = dir.join(format!("state-0/{base:020}.log.cleaned"));
    let len = std::fs::metadata(&cleaned).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&cleaned)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let log = Log::open(&dir, options(&clock)).unwrap();
    assert_eq!(view(&log, "state", Isolation::ReadUncommitted), before);
    assert!(!cleaned.exists());
}

#[test]
fn the_background_cleaner_runs_by_itself_and_stops_with_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FakeClock::new(T0));
    let opts = LogOptions {
        background_cleaner: true,
        cleaner_interval_ms: 20,
        ..options(&clock)
    };
    let log = Log::open(dir.path(), opts.clone()).unwrap();
    let cfg = config(&[("segment.bytes", "1024"), ("retention.ms", "1000")]);
    log.create_topic("events", 1, cfg).unwrap();
    for i in 0..12 {
        put(
            &log,
            "events",
            &[(Some("k"), Some(value(i, "v").as_str())); 2],
            0,
        );
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while log.earliest_offset("events", 0).unwrap() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the cleaner never ran"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // Appends go on while it runs; close stops it (and releases the directory).
    put(&log, "events", &[(Some("k"), Some("last"))], T0);
    log.close().unwrap();
    let log = Log::open(dir.path(), opts.clone()).unwrap();
    assert!(log.earliest_offset("events", 0).unwrap() > 0);
    // Dropping the last handle stops it too.
    drop(log);
    let log = Log::open(dir.path(), opts).unwrap();
    assert_eq!(
        view(&log, "events", Isolation::ReadCommitted)
            .last()
            .unwrap()
            .2
            .as_deref(),
        Some("last")
    );
}
