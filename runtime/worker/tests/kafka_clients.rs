//! Real Kafka clients against the `headwater` binary: kcat prints every record the datagen
//! connector wrote, and a group of two confluent-kafka consumers (the configuration from
//! issue 7: read_committed, manual commits) processes every record of a 4-partition topic
//! exactly once across a rebalance (one consumer leaves mid-way) and a worker restart (the
//! consumer after the restart continues from the committed offsets). Over TLS with client
//! certificates, kcat reads through the advertised name the certificate carries, and clients
//! without a certificate or without TLS get nothing; with SASL (PLAIN, SCRAM-SHA-256 and
//! SCRAM-SHA-512) over TLS, only the right user and password read.

#[path = "../../kafka/tests/support/clients.rs"]
mod clients;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clients::{kcat, run_python, run_with_timeout, wait_until};

/// A running worker and the addresses it announced.
struct Worker {
    rest: SocketAddr,
    kafka: SocketAddr,
    child: Child,
}

impl Worker {
    fn start(data_dir: &Path) -> Worker {
        Self::start_with(data_dir, &["--kafka-listen", "127.0.0.1:0"])
    }

    /// Starts a worker with extra flags (which include `--kafka-listen`).
    fn start_with(data_dir: &Path, args: &[&str]) -> Worker {
        let mut child = Command::new(env!("CARGO_BIN_EXE_headwater"))
            .arg("worker")
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--rest-listen", "127.0.0.1:0"])
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("HEADWATER_CONFIG")
            .env("HEADWATER_LOG_LEVEL", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn headwater");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("WARN") || line.contains("ERROR") {
                    eprintln!("worker: {line}");
                }
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = Vec::new();
        loop {
            let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
            else {
                let _ = child.kill();
                let _ = child.wait();
                panic!("worker did not start: {seen:#?}");
            };
            if line.contains("Headwater worker started") {
                let field = |prefix: &str| -> SocketAddr {
                    line.split_whitespace()
                        .find_map(|w| w.strip_prefix(prefix))
                        .unwrap_or_else(|| panic!("{prefix} in {line}"))
                        .parse()
                        .expect("address")
                };
                return Worker {
                    rest: field("rest=http://"),
                    kafka: field("kafka="),
                    child,
                };
            }
            seen.push(line);
        }
    }

    fn post(&self, path: &str, body: &str) -> String {
        let mut stream = TcpStream::connect(self.rest).expect("connect REST");
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.rest,
            body.len()
        );
        stream.write_all(request.as_bytes()).expect("write");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("read");
        assert!(
            response.starts_with("HTTP/1.1 201") || response.starts_with("HTTP/1.1 200"),
            "{response}"
        );
        response
    }

    fn stop(mut self) {
        // SAFETY: signalling the child we spawned and have not reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let status = self.child.wait().expect("wait");
        assert_eq!(status.code(), Some(0), "clean shutdown");
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn kcat_values(kafka: SocketAddr, topic: &str) -> Vec<String> {
    let out = run_with_timeout(
        Command::new(kcat())
            .arg("-C")
            .arg("-b")
            .arg(kafka.to_string())
            .args(["-t", topic, "-e", "-o", "beginning", "-q"]),
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    // A connector's topic appears with its first committed batch: until then, nothing yet.
    if !out.status.success() && stderr.contains("Unknown topic or partition") {
        return Vec::new();
    }
    assert!(out.status.success(), "kcat: {stderr}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The datagen record's `seq` (its value is JsonConverter output with schemas).
fn seq_of(value: &str) -> i64 {
    let v: serde_json::Value = serde_json::from_str(value).expect(value);
    v["payload"]["seq"].as_i64().expect(value)
}

fn datagen(worker: &Worker, name: &str, topic: &str, n: usize, partitions: u32) {
    worker.post(
        "/connectors",
        &serde_json::json!({
            "name": name,
            "config": {
                "connector.class": "datagen",
                "kafka.topic": topic,
                "iterations": n.to_string(),
                "records.per.second": "0",
                "topic.creation.default.partitions": partitions.to_string(),
            }
        })
        .to_string(),
    );
}

/// A worker whose Kafka listener serves TLS with the test certificate (which names
/// localhost, so clients are told to come back to `localhost:PORT`), with `extra` flags: the
/// worker, the port and the advertised address.
fn tls_worker(
    dir: &Path,
    pki: &headwater_tests::pki::TestPki,
    extra: &[&str],
) -> (Worker, u16, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let advertised = format!("localhost:{port}");
    let (cert, key) = (pki.path("server.pem"), pki.path("server-key.pem"));
    let mut args = vec![
        "--kafka-listen",
        &listen,
        "--kafka-tls-cert",
        &cert,
        "--kafka-tls-key",
        &key,
        "--kafka-advertised-address",
        &advertised,
    ];
    args.extend_from_slice(extra);
    let worker = Worker::start_with(dir, &args);
    (worker, port, advertised)
}

#[test]
fn kcat_reads_over_tls_with_a_client_certificate_and_others_get_nothing() {
    let pki = headwater_tests::pki::TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let ca = pki.path("ca.pem");
    let (worker, port, advertised) = tls_worker(dir.path(), &pki, &["--kafka-tls-client-ca", &ca]);
    datagen(&worker, "tls-gen", "secure.orders", 300, 1);
    let (client_cert, client_key) = (pki.path("client.pem"), pki.path("client-key.pem"));
    let kcat_tls = |extra: &[&str], args: &[&str], limit: u64| {
        run_with_timeout(
            Command::new(kcat())
                .args(["-b", &advertised, "-X", "security.protocol=ssl"])
                .args(["-X", &format!("ssl.ca.location={ca}")])
                .args(extra)
                .args(args),
            Duration::from_secs(limit),
        )
    };
    let with_certificate = [
        "-X",
        &format!("ssl.certificate.location={client_cert}"),
        "-X",
        &format!("ssl.key.location={client_key}"),
    ];
    let mut values = Vec::new();
    wait_until("300 records over TLS", Duration::from_secs(60), || {
        let out = kcat_tls(
            &with_certificate,
            &["-C", "-t", "secure.orders", "-e", "-o", "beginning", "-q"],
            60,
        );
        assert!(
            out.status.success(),
            "kcat over TLS: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        values = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        values.len() >= 300
    });
    let seqs: Vec<i64> = values.iter().map(|v| seq_of(v)).collect();
    assert_eq!(seqs, (0..300).collect::<Vec<i64>>());

    // Without a client certificate, and in plain text: no metadata, no records.
    let metadata = ["-L", "-m", "5"];
    let out = kcat_tls(&[], &metadata, 60);
    assert!(
        !out.status.success(),
        "no client certificate: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = run_with_timeout(
        Command::new(kcat())
            .args(["-b", &advertised])
            .args(metadata),
        Duration::from_secs(60),
    );
    assert!(
        !out.status.success(),
        "plain text: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = kcat_tls(&with_certificate, &metadata, 60);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        listing.contains(&format!("localhost:{port}")),
        "the advertised address: {listing}"
    );
    worker.stop();
}

#[test]
fn kcat_reads_with_sasl_plain_and_scram_over_tls_and_wrong_passwords_get_nothing() {
    let pki = headwater_tests::pki::TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let ca = pki.path("ca.pem");
    let (worker, _, advertised) = tls_worker(
        dir.path(),
        &pki,
        &[
            "--kafka-sasl-user",
            "alice:wonder:land",
            "--kafka-sasl-user",
            "bob:builder",
        ],
    );
    datagen(&worker, "sasl-gen", "sasl.orders", 200, 1);
    let kcat_as = |protocol: &str, mechanism: &str, user: &str, password: &str, args: &[&str]| {
        run_with_timeout(
            Command::new(kcat())
                .args(["-b", &advertised])
                .args(["-X", &format!("security.protocol={protocol}")])
                .args(["-X", &format!("ssl.ca.location={ca}")])
                .args(["-X", &format!("sasl.mechanisms={mechanism}")])
                .args(["-X", &format!("sasl.username={user}")])
                .args(["-X", &format!("sasl.password={password}")])
                .args(args),
            Duration::from_secs(60),
        )
    };
    let consume = ["-C", "-t", "sasl.orders", "-e", "-o", "beginning", "-q"];
    let mut values = Vec::new();
    wait_until("200 records over SASL_SSL", Duration::from_secs(60), || {
        let out = kcat_as("sasl_ssl", "PLAIN", "alice", "wonder:land", &consume);
        assert!(
            out.status.success(),
            "kcat over SASL_SSL: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        values = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        values.len() >= 200
    });
    let seqs: Vec<i64> = values.iter().map(|v| seq_of(v)).collect();
    assert_eq!(seqs, (0..200).collect::<Vec<i64>>());
    // SCRAM, both hashes: the same records.
    for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
        let out = kcat_as("sasl_ssl", mechanism, "alice", "wonder:land", &consume);
        assert!(
            out.status.success(),
            "{mechanism}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).lines().count(),
            200,
            "{mechanism}"
        );
    }

    let metadata = ["-L", "-m", "5"];
    let out = kcat_as("sasl_ssl", "SCRAM-SHA-512", "bob", "builder", &metadata);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (protocol, mechanism, user, password) in [
        ("sasl_ssl", "PLAIN", "bob", "wonder:land"),
        ("sasl_ssl", "SCRAM-SHA-256", "bob", "wonder:land"),
        ("sasl_ssl", "SCRAM-SHA-512", "carol", "builder"),
        ("sasl_ssl", "PLAIN", "carol", "builder"),
        ("ssl", "PLAIN", "alice", "wonder:land"),
    ] {
        let out = kcat_as(protocol, mechanism, user, password, &metadata);
        assert!(
            !out.status.success(),
            "{protocol} {mechanism} as {user}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    worker.stop();
}

#[test]
fn kcat_prints_every_record_the_datagen_connector_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let worker = Worker::start(dir.path());
    datagen(&worker, "orders-gen", "warehouse.orders", 1500, 1);
    let mut values = Vec::new();
    wait_until(
        "datagen wrote 1500 records",
        Duration::from_secs(60),
        || {
            values = kcat_values(worker.kafka, "warehouse.orders");
            values.len() >= 1500
        },
    );
    let seqs: Vec<i64> = values.iter().map(|v| seq_of(v)).collect();
    assert_eq!(
        seqs,
        (0..1500).collect::<Vec<i64>>(),
        "every record, in order"
    );

    // Producing to the connector's topic is refused; kcat reports the broker's error.
    let message = dir.path().join("message.txt");
    std::fs::write(&message, "not allowed").unwrap();
    let out = run_with_timeout(
        Command::new(kcat())
            .arg("-P")
            .arg("-b")
            .arg(worker.kafka.to_string())
            .args(["-t", "warehouse.orders"])
            .arg(&message),
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Topic authorization failed"),
        "kcat -P: {stderr}"
    );
    assert_eq!(kcat_values(worker.kafka, "warehouse.orders").len(), 1500);
    worker.stop();
}

/// Two consumers in one group; `a` leaves after 150 records, `b` goes on until it has taken
/// over `a`'s partitions and 60% of the topic is processed. Each consumer "writes" a batch,
/// then commits its offsets synchronously before polling again (the consumer of issue 7).
const GROUP_PHASE_1: &str = r#"
import sys, json, threading, time
from confluent_kafka import Consumer, TopicPartition

bootstrap, topic, group, total = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
lock = threading.Lock()
processed = []
events = []
a_left = threading.Event()
failures = []

def config():
    return {'bootstrap.servers': bootstrap, 'group.id': group,
            'auto.offset.reset': 'earliest', 'enable.auto.commit': False,
            'max.poll.interval.ms': 300000, 'session.timeout.ms': 45000,
            'isolation.level': 'read_committed'}

def run(name, done):
    try:
        c = Consumer(config())
        def on_assign(consumer, parts):
            with lock:
                events.append([name, 'assign', sorted(p.partition for p in parts)])
        def on_revoke(consumer, parts):
            with lock:
                events.append([name, 'revoke', sorted(p.partition for p in parts)])
        c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        mine = 0
        started = time.time()
        while not done(mine):
            if time.time() - started > 120:
                raise RuntimeError('%s: timed out' % name)
            msgs = c.consume(num_messages=50, timeout=0.5)
            batch = []
            for m in msgs:
                if m.error():
                    raise RuntimeError('%s: %s' % (name, m.error()))
                batch.append(m)
            if not batch:
                continue
            with lock:
                processed.extend([name, m.partition(), m.offset(), m.value().decode()] for m in batch)
            last = {}
            for m in batch:
                last[m.partition()] = m.offset() + 1
            c.commit(offsets=[TopicPartition(topic, p, o) for p, o in last.items()],
                     asynchronous=False)
            mine += len(batch)
            time.sleep(0.02)
        c.close()
    except Exception as e:
        failures.append(repr(e))
    finally:
        if name == 'a':
            a_left.set()

def b_done(mine):
    with lock:
        count = len(processed)
        b_parts = {p for (n, p, o, v) in processed if n == 'b'}
    return a_left.is_set() and count >= int(total * 0.6) and len(b_parts) == 4

ta = threading.Thread(target=run, args=('a', lambda mine: mine >= 150))
tb = threading.Thread(target=run, args=('b', b_done))
ta.start(); tb.start(); ta.join(); tb.join()
print(json.dumps({'processed': processed, 'events': events, 'failures': failures}))
"#;

/// After the restart: one consumer of the same group reads the rest.
const GROUP_PHASE_2: &str = r#"
import sys, json, time
from confluent_kafka import Consumer, TopicPartition

bootstrap, topic, group, remaining = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
c = Consumer({'bootstrap.servers': bootstrap, 'group.id': group,
              'auto.offset.reset': 'earliest', 'enable.auto.commit': False,
              'max.poll.interval.ms': 300000, 'session.timeout.ms': 45000,
              'isolation.level': 'read_committed'})
c.subscribe([topic])
processed = []
deadline = time.time() + 90
# Read a little past `remaining` so a repeated record would show up.
quiet_since = None
while time.time() < deadline:
    msgs = c.consume(num_messages=200, timeout=0.5)
    batch = [m for m in msgs if not m.error()]
    for m in msgs:
        if m.error():
            raise SystemExit('consumer error: %s' % m.error())
    if batch:
        processed.extend(['c', m.partition(), m.offset(), m.value().decode()] for m in batch)
        last = {}
        for m in batch:
            last[m.partition()] = m.offset() + 1
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in last.items()], asynchronous=False)
        quiet_since = None
    elif len(processed) >= remaining:
        quiet_since = quiet_since or time.time()
        if time.time() - quiet_since > 2:
            break
c.close()
print(json.dumps({'processed': processed}))
"#;

type Processed = Vec<(String, i64, i64, String)>;

fn parse_processed(out: &str) -> (Processed, serde_json::Value) {
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect(out);
    let processed = v["processed"]
        .as_array()
        .expect("processed")
        .iter()
        .map(|e| {
            (
                e[0].as_str().unwrap().to_owned(),
                e[1].as_i64().unwrap(),
                e[2].as_i64().unwrap(),
                e[3].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    (processed, v)
}

#[test]
fn consumer_group_processes_every_record_once_across_a_rebalance_and_a_restart() {
    const TOTAL: usize = 3000;
    let dir = tempfile::tempdir().unwrap();
    let scripts = tempfile::tempdir().unwrap();
    let worker = Worker::start(dir.path());
    datagen(&worker, "orders-gen", "warehouse.orders", TOTAL, 4);
    wait_until(
        "datagen wrote every record",
        Duration::from_secs(60),
        || kcat_values(worker.kafka, "warehouse.orders").len() >= TOTAL,
    );

    let out = run_python(
        scripts.path(),
        "group_phase_1.py",
        GROUP_PHASE_1,
        &[
            &worker.kafka.to_string(),
            "warehouse.orders",
            "warehouse-loader",
            &TOTAL.to_string(),
        ],
        Duration::from_secs(180),
    );
    let (phase1, raw) = parse_processed(&out);
    assert_eq!(raw["failures"], serde_json::json!([]), "{}", raw["events"]);
    let by_a = phase1.iter().filter(|e| e.0 == "a").count();
    let b_partitions: BTreeSet<i64> = phase1.iter().filter(|e| e.0 == "b").map(|e| e.1).collect();
    assert!(by_a >= 150, "a processed {by_a} before leaving");
    assert_eq!(
        b_partitions.len(),
        4,
        "b took over a's partitions after it left: {}",
        raw["events"]
    );
    assert!(phase1.len() < TOTAL, "records left for after the restart");

    worker.stop();
    let worker = Worker::start(dir.path());
    let remaining = TOTAL - phase1.len();
    let out = run_python(
        scripts.path(),
        "group_phase_2.py",
        GROUP_PHASE_2,
        &[
            &worker.kafka.to_string(),
            "warehouse.orders",
            "warehouse-loader",
            &remaining.to_string(),
        ],
        Duration::from_secs(180),
    );
    let (phase2, _) = parse_processed(&out);
    assert!(!phase2.is_empty());

    // Every record exactly once, by position and by content.
    let mut positions: BTreeMap<(i64, i64), usize> = BTreeMap::new();
    let mut seqs: BTreeMap<i64, usize> = BTreeMap::new();
    for (_, partition, offset, value) in phase1.iter().chain(&phase2) {
        *positions.entry((*partition, *offset)).or_default() += 1;
        *seqs.entry(seq_of(value)).or_default() += 1;
    }
    let repeated: Vec<_> = positions.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        repeated.is_empty(),
        "processed more than once: {repeated:?}"
    );
    assert_eq!(seqs.len(), TOTAL, "every record processed");
    assert_eq!(
        seqs.keys().copied().collect::<Vec<_>>(),
        (0..TOTAL as i64).collect::<Vec<_>>()
    );
    // The consumer after the restart started where the group had committed: its first offset
    // in each partition follows the last one processed before the restart.
    for partition in 0..4 {
        let before = phase1
            .iter()
            .filter(|e| e.1 == partition)
            .map(|e| e.2)
            .max();
        let after = phase2
            .iter()
            .filter(|e| e.1 == partition)
            .map(|e| e.2)
            .min();
        if let (Some(before), Some(after)) = (before, after) {
            assert!(
                after > before,
                "partition {partition}: {after} after {before}"
            );
        }
    }
    worker.stop();
}
