//! `log-bench`: measures the embedded log against the disk it runs on.
//!
//! Appends N records (16-byte key, 200-byte value) to 8 partitions in ~1 MB batches with one
//! group-commit fsync per round of batches, reads everything back (verifying every CRC and
//! walking every record), then writes the same number of bytes to a plain file with the same
//! fsync cadence. Prints a human summary and a final JSON line:
//! `{"append_mb_s","append_records_s","read_mb_s","raw_write_mb_s","ratio_append_to_raw",...}`.
//!
//! Usage: `cargo run --release -p headwater-tests --bin log-bench -- [--records N] [--dir DIR]`
//! (defaults: 5,000,000 records, a temporary directory under the current directory).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use headwater_log::batch::{BatchBuilder, Compression, DecodedBatch, ProducerFields};
use headwater_log::{Log, LogOptions, TopicConfig};

const PARTITIONS: u32 = 8;
const KEY_BYTES: usize = 16;
const VALUE_BYTES: usize = 200;
const BATCH_BYTES: usize = 1024 * 1024;

fn main() {
    let mut records: u64 = 5_000_000;
    let mut dir: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--records" => {
                records = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| usage())
            }
            "--dir" => dir = Some(PathBuf::from(args.next().unwrap_or_else(|| usage()))),
            _ => usage(),
        }
    }
    let base = dir.unwrap_or_else(|| std::env::current_dir().expect("current dir"));
    std::fs::create_dir_all(&base).expect("create bench dir");
    let work = tempfile::Builder::new()
        .prefix("log-bench-")
        .tempdir_in(&base)
        .expect("temp dir");

    // --- append ---
    let log = Log::open(work.path().join("log"), LogOptions::default()).expect("open log");
    log.create_topic("bench", PARTITIONS, TopicConfig::default())
        .expect("create topic");
    let value = vec![b'v'; VALUE_BYTES];
    let mut key = [0u8; KEY_BYTES];
    let now = headwater_log::log::now_ms();
    let start = Instant::now();
    let mut written: u64 = 0;
    let mut appended_bytes: u64 = 0;
    let mut commits = 0u64;
    while written < records {
        // One round: a ~1 MB batch per partition, then one group commit.
        for partition in 0..PARTITIONS {
            let mut builder = BatchBuilder::new(Compression::None, ProducerFields::default());
            while builder.size_bytes() < BATCH_BYTES && written < records {
                key[..8].copy_from_slice(&written.to_be_bytes());
                builder.append(now, Some(&key), Some(&value), &[]);
                written += 1;
            }
            if builder.is_empty() {
                break;
            }
            let batch = builder.build().expect("build batch");
            appended_bytes += batch.len() as u64;
            log.append("bench", partition, batch).expect("append");
        }
        log.commit().wait().expect("commit");
        commits += 1;
    }
    let append_secs = start.elapsed().as_secs_f64();

    // --- read back ---
    let start = Instant::now();
    let mut read_bytes: u64 = 0;
    let mut read_records: u64 = 0;
    for partition in 0..PARTITIONS {
        let mut offset = 0i64;
        loop {
            let r = log
                .read("bench", partition, offset, BATCH_BYTES * 4)
                .expect("read");
            if r.bytes.is_empty() {
                break;
            }
            read_bytes += r.bytes.len() as u64;
            let mut pos = 0;
            while pos < r.bytes.len() {
                let decoded = DecodedBatch::decode(&r.bytes[pos..]).expect("valid batch");
                read_records += decoded.records().expect("records").len() as u64;
                pos += decoded.header.total_size();
                offset = decoded.header.next_offset();
            }
        }
    }
    let read_secs = start.elapsed().as_secs_f64();
    assert_eq!(read_records, records, "every appended record is read back");
    log.close().expect("close");

    // --- raw file, same bytes, same fsync cadence ---
    let raw_path = work.path().join("raw.bin");
    let mut raw = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&raw_path)
        .expect("raw file");
    let chunk = vec![0x5au8; (appended_bytes / commits.max(1)) as usize];
    let start = Instant::now();
    let mut raw_written = 0u64;
    while raw_written < appended_bytes {
        let n = chunk.len().min((appended_bytes - raw_written) as usize);
        raw.write_all(&chunk[..n]).expect("raw write");
        raw.sync_data().expect("raw fsync");
        raw_written += n as u64;
    }
    let raw_secs = start.elapsed().as_secs_f64();

    let mb = appended_bytes as f64 / (1024.0 * 1024.0);
    let append_mb_s = mb / append_secs;
    let raw_write_mb_s = mb / raw_secs;
    let read_mb_s = read_bytes as f64 / (1024.0 * 1024.0) / read_secs;
    println!("records           {records}");
    println!("bytes             {appended_bytes} ({mb:.1} MiB, {commits} commits)");
    println!(
        "append            {append_secs:.2} s  {append_mb_s:.1} MiB/s  {:.0} records/s",
        records as f64 / append_secs
    );
    println!("read (page cache) {read_secs:.2} s  {read_mb_s:.1} MiB/s");
    println!("raw file write    {raw_secs:.2} s  {raw_write_mb_s:.1} MiB/s");
    println!(
        "{{\"records\":{records},\"bytes\":{appended_bytes},\"commits\":{commits},\"append_mb_s\":{append_mb_s:.1},\"append_records_s\":{:.0},\"read_mb_s\":{read_mb_s:.1},\"raw_write_mb_s\":{raw_write_mb_s:.1},\"ratio_append_to_raw\":{:.3}}}",
        records as f64 / append_secs,
        append_mb_s / raw_write_mb_s
    );
}

fn usage() -> ! {
    eprintln!("usage: log-bench [--records N] [--dir DIR]");
    std::process::exit(2);
}
