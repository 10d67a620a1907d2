//! `kafka-bench`: how fast Kafka clients consume from Headwater's Kafka listener, against the
//! log's own read rate measured in the same run.
//!
//! Writes N records (16-byte key, 200-byte value, ~1 MB uncompressed batches, 8 partitions:
//! the data of `log-bench`), then measures:
//! 1. the log's read rate (every batch CRC-checked and every record walked, as `log-bench`);
//! 2. a raw Fetch client (one connection, Fetch v11, 50 MB responses): the listener's own
//!    ceiling, no client-side record decoding;
//! 3. `kcat -C -e -o beginning` (librdkafka) printing every value to a pipe this program
//!    drains and counts: what a real consumer gets;
//! 4. with `--tls`, the same kcat run against a second listener serving TLS (a fresh
//!    self-signed certificate for `localhost`, checked by kcat): what encryption costs.
//!
//! MB/s are stored batch bytes per second; the final line is JSON with every rate and the
//! ratio of kcat's rate to the log's.
//!
//! Usage: `cargo run --release -p headwater-kafka --example kafka-bench -- [--records N]
//! [--dir DIR] [--fetch-max-bytes N] [--tls]` (defaults: 5,000,000 records, a temporary directory
//! under the current directory, librdkafka's default per-partition fetch size of 1 MiB).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use headwater_kafka::codec::{decode_response, encode_request};
use headwater_kafka::{KafkaServer, ServerConfig};
use headwater_log::batch::{BatchBuilder, Compression, DecodedBatch, ProducerFields};
use headwater_log::{Log, LogOptions, TopicConfig};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

const PARTITIONS: u32 = 8;
const KEY_BYTES: usize = 16;
const VALUE_BYTES: usize = 200;
const BATCH_BYTES: usize = 1024 * 1024;

fn usage() -> ! {
    eprintln!("usage: kafka-bench [--records N] [--dir DIR] [--fetch-max-bytes N] [--tls]");
    std::process::exit(2)
}

fn main() {
    let mut records: u64 = 5_000_000;
    let mut dir: Option<PathBuf> = None;
    let mut fetch_max_bytes: u64 = 1024 * 1024;
    let mut tls = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage());
        match arg.as_str() {
            "--records" => records = value().parse().unwrap_or_else(|_| usage()),
            "--dir" => dir = Some(PathBuf::from(value())),
            "--fetch-max-bytes" => fetch_max_bytes = value().parse().unwrap_or_else(|_| usage()),
            "--tls" => tls = true,
            _ => usage(),
        }
    }
    let base = dir.unwrap_or_else(|| std::env::current_dir().expect("current dir"));
    std::fs::create_dir_all(&base).expect("bench dir");
    let work = tempfile::Builder::new()
        .prefix("kafka-bench-")
        .tempdir_in(&base)
        .expect("temp dir");

    // --- write the data ---
    let log = Log::open(work.path().join("log"), LogOptions::default()).expect("open log");
    log.create_topic("bench", PARTITIONS, TopicConfig::default())
        .expect("create topic");
    let value = vec![b'v'; VALUE_BYTES];
    let mut key = [0u8; KEY_BYTES];
    let now = headwater_log::log::now_ms();
    let mut written: u64 = 0;
    let mut bytes_total: u64 = 0;
    while written < records {
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
            let batch = builder.build().expect("build");
            bytes_total += batch.len() as u64;
            log.append("bench", partition, batch).expect("append");
        }
        log.commit().wait().expect("commit");
    }
    let mib = bytes_total as f64 / (1024.0 * 1024.0);

    // --- 1. the log's own read rate ---
    let start = Instant::now();
    let mut read_records = 0u64;
    for partition in 0..PARTITIONS {
        let mut offset = 0i64;
        loop {
            let r = log
                .read("bench", partition, offset, BATCH_BYTES * 4)
                .expect("read");
            if r.bytes.is_empty() {
                break;
            }
            let mut pos = 0;
            while pos < r.bytes.len() {
                let decoded = DecodedBatch::decode(&r.bytes[pos..]).expect("batch");
                read_records += decoded.records().expect("records").len() as u64;
                pos += decoded.header.total_size();
                offset = decoded.header.next_offset();
            }
        }
    }
    let log_secs = start.elapsed().as_secs_f64();
    assert_eq!(read_records, records);

    // --- the listener ---
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let server =
        KafkaServer::new(log.clone(), ServerConfig::default(), None).expect("kafka server");
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let stop_tx = spawn_listener(&runtime, server, listener);

    // --- 2. a raw Fetch client ---
    let start = Instant::now();
    let mut stream = TcpStream::connect(addr).expect("connect");
    let mut offsets = vec![0i64; PARTITIONS as usize];
    let ends: Vec<i64> = (0..PARTITIONS)
        .map(|p| log.latest_offset("bench", p).expect("hw"))
        .collect();
    let mut raw_bytes = 0u64;
    let mut correlation = 0;
    // One receive buffer for every response (fresh 50 MB buffers would measure page faults).
    let mut buf = bytes::BytesMut::new();
    while offsets.iter().zip(&ends).any(|(o, e)| o < e) {
        let mut topic = FetchTopic::default();
        topic.topic = TopicName(StrBytes::from_static_str("bench"));
        topic.partitions = (0..PARTITIONS as i32)
            .filter(|p| offsets[*p as usize] < ends[*p as usize])
            .map(|p| {
                let mut fp = FetchPartition::default();
                fp.partition = p;
                fp.fetch_offset = offsets[p as usize];
                fp.partition_max_bytes = 8 << 20;
                fp
            })
            .collect();
        let mut req = FetchRequest::default();
        req.max_wait_ms = 500;
        req.min_bytes = 1;
        req.max_bytes = 50 << 20;
        req.topics = vec![topic];
        correlation += 1;
        let frame = encode_request(ApiKey::Fetch, 11, correlation, "bench", &req).expect("enc");
        stream.write_all(&frame).expect("send");
        let mut size = [0u8; 4];
        stream.read_exact(&mut size).expect("size");
        let len = i32::from_be_bytes(size) as usize;
        buf.reserve(len);
        buf.resize(len, 0);
        stream.read_exact(&mut buf).expect("body");
        let body: Bytes = buf.split().freeze();
        let (_, resp): (i32, FetchResponse) =
            decode_response(ApiKey::Fetch, 11, body).expect("decode");
        for p in &resp.responses[0].partitions {
            let records = p.records.clone().unwrap_or_default();
            raw_bytes += records.len() as u64;
            // Advance past the last whole batch.
            let mut pos = 0;
            while pos + 61 <= records.len() {
                let header = headwater_log::batch::BatchHeader::parse(&records[pos..]).expect("h");
                if pos + header.total_size() > records.len() {
                    break;
                }
                offsets[p.partition_index as usize] = header.next_offset();
                pos += header.total_size();
            }
        }
    }
    let raw_secs = start.elapsed().as_secs_f64();

    // --- 3. kcat (librdkafka) ---
    let fetch_setting = format!("fetch.message.max.bytes={fetch_max_bytes}");
    let (kcat_secs, kcat_cpu) = run_kcat(&addr.to_string(), &["-X", &fetch_setting], records);

    // --- 4. kcat over TLS ---
    let tls_run = tls.then(|| {
        let (bootstrap, ca, _tls_stop) = tls_listener(&runtime, &log);
        let ca_setting = format!("ssl.ca.location={}", ca.path().display());
        let args = [
            "-X",
            &fetch_setting,
            "-X",
            "security.protocol=ssl",
            "-X",
            &ca_setting,
        ];
        let (secs, cpu) = run_kcat(&bootstrap, &args, records);
        (secs, cpu - kcat_cpu)
    });

    let _ = stop_tx.send(());
    runtime.shutdown_timeout(Duration::from_secs(5));
    log.close().expect("close");

    let log_mb_s = mib / log_secs;
    let raw_mb_s = raw_bytes as f64 / (1024.0 * 1024.0) / raw_secs;
    let kcat_mb_s = mib / kcat_secs;
    println!("records              {records} ({mib:.1} MiB in {PARTITIONS} partitions)");
    println!("log read             {log_secs:.2} s  {log_mb_s:.1} MiB/s");
    println!(
        "raw Fetch client     {raw_secs:.2} s  {raw_mb_s:.1} MiB/s  ({:.0}% of the log)",
        100.0 * raw_mb_s / log_mb_s
    );
    println!(
        "kcat (librdkafka)    {kcat_secs:.2} s  {kcat_mb_s:.1} MiB/s  {:.0} records/s  ({:.0}% of the log; kcat used {kcat_cpu:.2} s CPU)",
        records as f64 / kcat_secs,
        100.0 * kcat_mb_s / log_mb_s
    );
    let mut tls_json = String::new();
    if let Some((secs, cpu)) = tls_run {
        let mb_s = mib / secs;
        println!(
            "kcat over TLS        {secs:.2} s  {mb_s:.1} MiB/s  {:.0} records/s  ({:.0}% of plain kcat; kcat used {cpu:.2} s CPU)",
            records as f64 / secs,
            100.0 * mb_s / kcat_mb_s
        );
        tls_json = format!(",\"kcat_tls_mb_s\":{mb_s:.1},\"kcat_tls_cpu_s\":{cpu:.2},\"kcat_tls_wall_s\":{secs:.2}");
    }
    println!(
        "{{\"records\":{records},\"bytes\":{bytes_total},\"log_read_mb_s\":{log_mb_s:.1},\"raw_fetch_mb_s\":{raw_mb_s:.1},\"kcat_mb_s\":{kcat_mb_s:.1},\"kcat_records_s\":{:.0},\"kcat_to_log\":{:.3},\"raw_fetch_to_log\":{:.3},\"kcat_cpu_s\":{kcat_cpu:.2},\"kcat_wall_s\":{kcat_secs:.2}{tls_json}}}",
        records as f64 / kcat_secs,
        kcat_mb_s / log_mb_s,
        raw_mb_s / log_mb_s
    );
}

/// Runs `kcat -C` from the beginning of topic `bench` against `bootstrap` with `extra` settings,
/// draining and counting what it prints: its wall time and the CPU time of every child so far.
fn run_kcat(bootstrap: &str, extra: &[&str], records: u64) -> (f64, f64) {
    let start = Instant::now();
    let mut child = Command::new("kcat")
        .args(["-C", "-b", bootstrap])
        .args(["-t", "bench", "-o", "beginning", "-e", "-q", "-f", "%s\n"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("kcat (apt-get install -y kcat)");
    let mut out = child.stdout.take().expect("stdout");
    let mut buf = vec![0u8; 1 << 20];
    let (mut lines, mut out_bytes) = (0u64, 0u64);
    loop {
        let n = out.read(&mut buf).expect("read kcat");
        if n == 0 {
            break;
        }
        out_bytes += n as u64;
        lines += buf[..n].iter().filter(|b| **b == b'\n').count() as u64;
    }
    let status = child.wait().expect("kcat");
    let secs = start.elapsed().as_secs_f64();
    // CPU time of the children (user + system): how busy the client was.
    // SAFETY: getrusage fills the zeroed struct we pass.
    let cpu = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        secs(usage.ru_utime) + secs(usage.ru_stime)
    };
    assert!(status.success(), "kcat failed");
    assert_eq!(lines, records, "kcat printed every record");
    assert_eq!(out_bytes, records * (VALUE_BYTES as u64 + 1));
    (secs, cpu)
}

/// A second listener over the same log serving TLS with a fresh self-signed certificate for
/// `localhost`, advertised as `localhost:PORT`: the bootstrap address, the certificate's file
/// (kcat's `ssl.ca.location`) and the sender that stops the listener.
fn tls_listener(
    runtime: &tokio::runtime::Runtime,
    log: &Log,
) -> (
    String,
    tempfile::NamedTempFile,
    tokio::sync::oneshot::Sender<()>,
) {
    let key = rcgen::KeyPair::generate().expect("a key");
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .expect("params")
        .self_signed(&key)
        .expect("a certificate");
    let mut ca = tempfile::NamedTempFile::new().expect("a certificate file");
    ca.write_all(cert.pem().as_bytes())
        .expect("write the certificate");
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )
    .expect("the certificate and key");
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = KafkaServer::new(
        log.clone(),
        ServerConfig {
            advertised: Some(("localhost".to_owned(), port)),
            ..ServerConfig::default()
        },
        None,
    )
    .expect("kafka server")
    .with_tls(tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config)));
    let stop_tx = spawn_listener(runtime, server, listener);
    (format!("localhost:{port}"), ca, stop_tx)
}

/// Serves `listener` with `server` on `runtime` until the returned sender is used or dropped.
fn spawn_listener(
    runtime: &tokio::runtime::Runtime,
    server: KafkaServer,
    listener: tokio::net::TcpListener,
) -> tokio::sync::oneshot::Sender<()> {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    runtime.spawn(async move {
        server
            .serve(listener, async move {
                let _ = stop_rx.await;
            })
            .await
    });
    stop_tx
}
