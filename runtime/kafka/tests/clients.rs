//! Real Kafka clients against an in-process listener: kcat (librdkafka from Debian) and
//! confluent-kafka (librdkafka bundled in the PyPI wheel). Covers read_committed never showing
//! an open transaction, an idempotent producer writing to a user topic and a consumer reading
//! it back, and a producer refused on a connector's topic.

mod support;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use headwater_kafka::TopicOwner;
use headwater_log::{BatchBuilder, Compression, ProducerFields, TopicConfig};
use support::{kcat, run_python, run_with_timeout, TestServer};

fn kcat_consume(addr: std::net::SocketAddr, topic: &str, isolation: &str) -> Vec<String> {
    let out = run_with_timeout(
        Command::new(kcat())
            .arg("-C")
            .arg("-b")
            .arg(addr.to_string())
            .args(["-t", topic, "-e", "-o", "beginning", "-q", "-f", "%s\n"])
            .arg("-X")
            .arg(format!("isolation.level={isolation}")),
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "kcat failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn kcat_read_committed_never_shows_an_open_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), None);
    let log = server.log.clone();
    log.create_topic("orders", 1, TopicConfig::default())
        .unwrap();
    let txn_batch = |txn: &headwater_log::Transaction, values: &[&str]| {
        let mut b = BatchBuilder::new(Compression::None, txn.producer_fields());
        for v in values {
            b.append(1_700_000_000_000, None, Some(v.as_bytes()), &[]);
        }
        b
    };
    let mut committed = log.begin_transaction().unwrap();
    let b = txn_batch(&committed, &["c1", "c2"]);
    committed.append_builder("orders", 0, b).unwrap();
    committed.commit().unwrap();
    let mut aborted = log.begin_transaction().unwrap();
    let b = txn_batch(&aborted, &["a1"]);
    aborted.append_builder("orders", 0, b).unwrap();
    aborted.abort().unwrap();
    let mut open = log.begin_transaction().unwrap();
    let b = txn_batch(&open, &["o1", "o2"]);
    open.append_builder("orders", 0, b).unwrap();
    log.commit().wait().unwrap();

    assert_eq!(
        kcat_consume(server.addr, "orders", "read_committed"),
        ["c1", "c2"]
    );
    // read_uncommitted shows everything written, aborted data included (as in Kafka).
    assert_eq!(
        kcat_consume(server.addr, "orders", "read_uncommitted"),
        ["c1", "c2", "a1", "o1", "o2"]
    );
    open.commit().unwrap();
    assert_eq!(
        kcat_consume(server.addr, "orders", "read_committed"),
        ["c1", "c2", "o1", "o2"]
    );
    server.stop();
}

const PRODUCE_AND_CONSUME: &str = r#"
import sys, json
from confluent_kafka import Producer, Consumer, KafkaError

bootstrap, topic, refused_topic = sys.argv[1], sys.argv[2], sys.argv[3]
results = {"delivered": 0, "errors": []}

def report(err, msg):
    if err is not None:
        results["errors"].append((msg.topic(), err.name(), err.str()))
    else:
        results["delivered"] += 1

p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
              "linger.ms": 5, "compression.type": "lz4"})
for i in range(500):
    p.produce(topic, key=str(i % 7).encode(), value=("v%d" % i).encode(), on_delivery=report)
p.flush(30)
refused = {"errors": []}
def report_refused(err, msg):
    refused["errors"].append(None if err is None else err.name())
p2 = Producer({"bootstrap.servers": bootstrap, "acks": "1", "message.send.max.retries": 0})
p2.produce(refused_topic, value=b"nope", on_delivery=report_refused)
p2.flush(30)

c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
              "auto.offset.reset": "earliest", "enable.auto.commit": False,
              "isolation.level": "read_committed"})
c.subscribe([topic])
seen = []
idle = 0
while len(seen) < 500 and idle < 60:
    msgs = c.consume(num_messages=100, timeout=0.5)
    if not msgs:
        idle += 1
    for m in msgs:
        if m.error():
            if m.error().code() != KafkaError._PARTITION_EOF:
                raise SystemExit("consumer error: %s" % m.error())
            continue
        seen.append(m.value().decode())
    if msgs:
        c.commit(asynchronous=False)
c.close()
print(json.dumps({"delivered": results["delivered"], "errors": results["errors"],
                  "refused": refused["errors"], "seen": seen}))
"#;

#[test]
fn confluent_kafka_producer_writes_a_user_topic_and_a_consumer_reads_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let owner: TopicOwner = Arc::new(|topic: String| {
        Box::pin(async move { (topic == "pg.inventory").then(|| "pg-source".to_owned()) })
    });
    let server = TestServer::start(dir.path(), Some(owner));
    server
        .log
        .create_topic("user.events", 3, TopicConfig::default())
        .unwrap();
    server
        .log
        .create_topic("pg.inventory", 1, TopicConfig::default())
        .unwrap();
    let scripts = tempfile::tempdir().unwrap();
    let out = run_python(
        scripts.path(),
        "produce_consume.py",
        PRODUCE_AND_CONSUME,
        &[&server.addr.to_string(), "user.events", "pg.inventory"],
        Duration::from_secs(120),
    );
    let result: serde_json::Value = serde_json::from_str(out.trim()).expect(&out);
    assert_eq!(result["delivered"], 500, "{result}");
    assert_eq!(result["errors"], serde_json::json!([]), "{result}");
    assert_eq!(
        result["refused"],
        serde_json::json!(["TOPIC_AUTHORIZATION_FAILED"]),
        "{result}"
    );
    let mut seen: Vec<String> = result["seen"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    seen.sort();
    let mut expected: Vec<String> = (0..500).map(|i| format!("v{i}")).collect();
    expected.sort();
    assert_eq!(seen, expected);
    // Keys landed where Kafka's partitioner puts them: every record of a key in one partition.
    let total: i64 = (0..3)
        .map(|p| server.log.latest_offset("user.events", p).unwrap())
        .sum();
    assert!(total >= 500);
    assert_eq!(server.log.latest_offset("pg.inventory", 0).unwrap(), 0);
    server.stop();
}

#[test]
fn kcat_lists_metadata_and_consumes_lz4_batches_of_every_partition() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), None);
    let log = server.log.clone();
    log.create_topic("events", 2, TopicConfig::default())
        .unwrap();
    for p in 0..2 {
        let mut b = BatchBuilder::new(Compression::Lz4, ProducerFields::default());
        for i in 0..10 {
            b.append(1, None, Some(format!("p{p}-{i}").as_bytes()), &[]);
        }
        log.append_builder("events", p, b).unwrap();
    }
    log.commit().wait().unwrap();
    let out = run_with_timeout(
        Command::new(kcat())
            .arg("-L")
            .arg("-b")
            .arg(server.addr.to_string())
            .args(["-t", "events"]),
        Duration::from_secs(30),
    );
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{listing}");
    assert!(
        listing.contains("topic \"events\" with 2 partitions"),
        "{listing}"
    );
    let mut all = kcat_consume(server.addr, "events", "read_uncommitted");
    all.sort();
    assert_eq!(all.len(), 20);
    assert!(all.contains(&"p1-9".to_owned()));
    server.stop();
}
