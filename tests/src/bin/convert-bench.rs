//! `convert-bench`: the CPU cost of reading Debezium JSON records back out of log batches, the
//! work a sink's reader thread does per record (LZ4 batch decode, CRC check, record walk, and
//! the JSON converter's bytes -> Connect data for key and value).
//!
//! The record is a real Debezium 3.6 event (the first `warehouse.orders` snapshot event of the
//! golden files, JSON with schemas, ~3.4 KB), repeated into 256 KiB LZ4 batches as the
//! PostgreSQL source writes them. Everything runs on one thread with no I/O, so the figure is
//! repeatable; under `valgrind --tool=callgrind --collect-atstart=no
//! --toggle-collect=convert_bench_measure` it is an exact instruction count per record (see
//! docs/benchmarks.md). Final JSON line: `{"records","records_s","cpu_ns_per_record"}`.
//!
//! Usage: `cargo run --release -p headwater-tests --bin convert-bench -- [--records N]
//! [--rounds N]` (defaults: 100,000 records read 5 times).

use std::time::Instant;

use headwater_format::{JsonConverter, JsonConverterConfig};
use headwater_log::batch::{BatchBuilder, Compression, DecodedBatch, ProducerFields};
use headwater_tests::bench::cpu_us;

const GOLDEN: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/golden/debezium/postgres/00_snapshot_seed_tables.raw.jsonl"
);
const BATCH_BYTES: usize = 256 * 1024;

/// The worker's allocator, so allocation costs what it costs there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn usage() -> ! {
    eprintln!("usage: convert-bench [--records N] [--rounds N]");
    std::process::exit(2)
}

fn main() {
    let mut records: usize = 100_000;
    let mut rounds: usize = 5;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = || {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| usage())
        };
        match arg.as_str() {
            "--records" => records = number(),
            "--rounds" => rounds = number(),
            _ => usage(),
        }
    }
    let (key, value) = golden_event();
    let batches = build_batches(&key, &value, records);
    let key_converter = JsonConverter::new(JsonConverterConfig::default());
    let value_converter = JsonConverter::new(JsonConverterConfig::default());
    // One untimed round warms the converters' schema caches, as a running sink has them.
    convert_bench_measure(&batches, &key_converter, &value_converter);
    let cpu_start = cpu_us(std::process::id());
    let wall_start = Instant::now();
    let mut converted = 0usize;
    for _ in 0..rounds {
        converted += convert_bench_measure(&batches, &key_converter, &value_converter);
    }
    let wall = wall_start.elapsed().as_secs_f64();
    let cpu_ns = (cpu_us(std::process::id()) - cpu_start) as f64 * 1000.0;
    assert_eq!(converted, records * rounds, "every record was converted");
    let records_s = converted as f64 / wall;
    let ns_per_record = cpu_ns / converted as f64;
    println!(
        "{converted} records ({} bytes of JSON each) in {wall:.2} s = {records_s:.0} records/s, {ns_per_record:.0} ns CPU/record",
        key.len() + value.len()
    );
    println!(
        "{}",
        serde_json::json!({
            "records": converted,
            "records_s": records_s.round(),
            "cpu_ns_per_record": ns_per_record.round(),
        })
    );
}

/// The key and value bytes of the first `warehouse.orders` event of the golden snapshot.
fn golden_event() -> (Vec<u8>, Vec<u8>) {
    let text = std::fs::read_to_string(GOLDEN).unwrap_or_else(|e| panic!("reading {GOLDEN}: {e}"));
    for line in text.lines() {
        let event: serde_json::Value = serde_json::from_str(line).expect("a golden JSON line");
        if event["topic"] == "warehouse.orders" {
            let field = |name: &str| {
                event[name]
                    .as_str()
                    .unwrap_or_else(|| panic!("golden event without {name}"))
                    .as_bytes()
                    .to_vec()
            };
            return (field("key"), field("value"));
        }
    }
    panic!("{GOLDEN} has no warehouse.orders event")
}

/// LZ4 batches of about [`BATCH_BYTES`] holding `records` copies of the event.
fn build_batches(key: &[u8], value: &[u8], records: usize) -> Vec<Vec<u8>> {
    let mut batches = Vec::new();
    let mut builder = BatchBuilder::new(Compression::Lz4, ProducerFields::default());
    let now = headwater_log::log::now_ms();
    for _ in 0..records {
        builder.append(now, Some(key), Some(value), &[]);
        if builder.size_bytes() >= BATCH_BYTES {
            let full = std::mem::replace(
                &mut builder,
                BatchBuilder::new(Compression::Lz4, ProducerFields::default()),
            );
            batches.push(full.build().expect("a batch"));
        }
    }
    if !builder.is_empty() {
        batches.push(builder.build().expect("a batch"));
    }
    batches
}

/// Decodes every batch and converts every record's key and value; the number converted.
/// Not inlined, so callgrind can count exactly this function.
#[inline(never)]
#[no_mangle]
fn convert_bench_measure(
    batches: &[Vec<u8>],
    key_converter: &JsonConverter,
    value_converter: &JsonConverter,
) -> usize {
    let mut converted = 0;
    for batch in batches {
        let decoded = DecodedBatch::decode(batch).expect("a valid batch");
        for record in decoded.records().expect("records") {
            let key = key_converter
                .to_connect_data("warehouse.orders", record.key)
                .expect("key converts");
            let value = value_converter
                .to_connect_data("warehouse.orders", record.value)
                .expect("value converts");
            std::hint::black_box((key, value));
            converted += 1;
        }
    }
    converted
}
