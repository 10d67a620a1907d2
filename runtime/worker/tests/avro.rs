//! Avro end to end with Confluent's own client: records written by Headwater's AvroConverter are
//! read back by confluent-kafka's `AvroDeserializer` (PyPI, fastavro underneath) through the
//! worker's Kafka listener and the embedded schema registry on its REST listener.
//!
//! - Every golden PostgreSQL record captured from Debezium (JSON) is turned into Connect data and
//!   written with the AvroConverter registering over HTTP at the worker; Python produces the
//!   bytes, consumes them, and decodes them into the same field values as the JSON events.
//! - A live PostgreSQL source with Avro keys and values (no registry URL: the embedded one): a
//!   column added registers version 2 of `warehouse.orders-value`, which the client decodes; an
//!   incompatible type change fails that connector with a message naming the subject while a
//!   second connector keeps streaming.
//!
//! Both sides reduce values to one comparable JSON form: Decimals as `{"$decimal": "12.34"}`,
//! bytes as `{"$bytes": base64}`, Connect Date/Time/Timestamp as days/milliseconds, floats as
//! their IEEE bits in hex (`{"$float": "3ff8000000000000"}`; `"NaN"`, `"Infinity"`: exact, no
//! decimal rounding on either side), maps with non-string keys as key/value arrays (AvroData's).

#[path = "../../kafka/tests/support/clients.rs"]
mod clients;
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use common::{http, seeded_server, sql, wait_until, Worker};
use headwater_api::{Properties, SchemaRef, SchemaType, Value};
use headwater_format::avro::{AvroConverter, AvroConverterConfig};
use headwater_format::{Converter, JsonConverter, JsonConverterConfig};
use serde_json::{json, Value as Json};

/// Produces the cases file's records (when given), then consumes `counts` records of each topic
/// from offset 0 of partition 0 and prints them decoded by Confluent's AvroDeserializer, one
/// JSON line each.
const DECODE_SCRIPT: &str = r#"
import base64, datetime, decimal, json, math, struct, sys, time
from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_BEGINNING
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import SerializationContext, MessageField

bootstrap, registry_url, counts_path, cases_path = sys.argv[1:5]
counts = json.load(open(counts_path))

if cases_path != '-':
    producer = Producer({'bootstrap.servers': bootstrap})
    for case in json.load(open(cases_path)):
        key = bytes.fromhex(case['key']) if case['key'] is not None else None
        value = bytes.fromhex(case['value']) if case['value'] is not None else None
        producer.produce(case['topic'], key=key, value=value, partition=0)
    assert producer.flush(30) == 0, 'records left unsent'

EPOCH_DATE = datetime.date(1970, 1, 1)
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)

def canon(x):
    if x is None or isinstance(x, (bool, int, str)):
        return x
    if isinstance(x, float):
        if math.isnan(x):
            return {'$float': 'NaN'}
        if math.isinf(x):
            return {'$float': 'Infinity' if x > 0 else '-Infinity'}
        return {'$float': struct.pack('>d', x).hex()}
    if isinstance(x, decimal.Decimal):
        return {'$decimal': format(x, 'f')}
    if isinstance(x, (bytes, bytearray)):
        return {'$bytes': base64.b64encode(x).decode()}
    if isinstance(x, datetime.datetime):
        if x.tzinfo is None:
            x = x.replace(tzinfo=datetime.timezone.utc)
        d = x - EPOCH
        return {'$timestamp_ms': d.days * 86400000 + d.seconds * 1000 + d.microseconds // 1000}
    if isinstance(x, datetime.date):
        return {'$date': (x - EPOCH_DATE).days}
    if isinstance(x, datetime.time):
        return {'$time_ms': ((x.hour * 60 + x.minute) * 60 + x.second) * 1000 + x.microsecond // 1000}
    if isinstance(x, dict):
        return {k: canon(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [canon(v) for v in x]
    raise TypeError('unexpected decoded type %r' % type(x))

registry = SchemaRegistryClient({'url': registry_url})
deserializer = AvroDeserializer(registry)
consumer = Consumer({'bootstrap.servers': bootstrap, 'group.id': 'avro-check',
                     'enable.auto.commit': False, 'auto.offset.reset': 'earliest'})
consumer.assign([TopicPartition(t, 0, OFFSET_BEGINNING) for t in counts])
seen = {t: 0 for t in counts}
deadline = time.time() + 90
while any(seen[t] < counts[t] for t in counts):
    assert time.time() < deadline, 'timed out: read %r of %r' % (seen, counts)
    msg = consumer.poll(1.0)
    if msg is None:
        continue
    assert msg.error() is None, msg.error()
    topic = msg.topic()
    if seen[topic] >= counts[topic]:
        continue
    seen[topic] += 1
    key = deserializer(msg.key(), SerializationContext(topic, MessageField.KEY))
    value = deserializer(msg.value(), SerializationContext(topic, MessageField.VALUE))
    print(json.dumps({'topic': topic, 'offset': msg.offset(), 'key': canon(key), 'value': canon(value)}))
consumer.close()
"#;

/// The comparable form of Connect data (see the module doc); `schema` is the value's schema.
fn canonical(schema: Option<&SchemaRef>, value: &Value) -> Json {
    let name = schema.and_then(|s| s.name());
    let float = |v: f64| {
        if v.is_nan() {
            json!({"$float": "NaN"})
        } else if v.is_infinite() {
            json!({"$float": if v > 0.0 { "Infinity" } else { "-Infinity" }})
        } else {
            json!({"$float": format!("{:016x}", v.to_bits())})
        }
    };
    match value {
        Value::Null => Json::Null,
        Value::Boolean(b) => json!(b),
        Value::Int8(v) => json!(v),
        Value::Int16(v) => json!(v),
        Value::Int32(v) => match name {
            Some("org.apache.kafka.connect.data.Date") => json!({ "$date": v }),
            Some("org.apache.kafka.connect.data.Time") => json!({ "$time_ms": v }),
            _ => json!(v),
        },
        Value::Int64(v) => match name {
            Some("org.apache.kafka.connect.data.Timestamp") => json!({ "$timestamp_ms": v }),
            _ => json!(v),
        },
        // Avro's float is the f32 itself; Python widens it exactly.
        Value::Float32(v) => float(f64::from(*v)),
        Value::Float64(v) => float(*v),
        Value::String(s) => json!(s),
        Value::Bytes(b) => match name {
            Some("org.apache.kafka.connect.data.Decimal") => {
                let scale: u32 = schema
                    .and_then(|s| s.parameter("scale"))
                    .expect("Decimal scale")
                    .parse()
                    .expect("numeric scale");
                json!({ "$decimal": decimal_text(b, scale) })
            }
            _ => json!({ "$bytes": base64::engine::general_purpose::STANDARD.encode(b) }),
        },
        Value::Array(items) => {
            let element = schema.and_then(|s| s.value_schema());
            Json::Array(items.iter().map(|v| canonical(element, v)).collect())
        }
        Value::Map(entries) => {
            let key_schema = schema.and_then(|s| s.key_schema());
            let value_schema = schema.and_then(|s| s.value_schema());
            if key_schema.map(|k| k.schema_type()) == Some(SchemaType::String) {
                Json::Object(
                    entries
                        .iter()
                        .map(|(k, v)| {
                            (
                                k.as_str().expect("string key").to_owned(),
                                canonical(value_schema, v),
                            )
                        })
                        .collect(),
                )
            } else {
                Json::Array(
                    entries
                        .iter()
                        .map(|(k, v)| {
                            json!({"key": canonical(key_schema, k), "value": canonical(value_schema, v)})
                        })
                        .collect(),
                )
            }
        }
        Value::Struct(s) => Json::Object(
            s.schema()
                .fields()
                .iter()
                .zip(s.values())
                .map(|(f, v)| (f.name().to_owned(), canonical(Some(f.schema()), v)))
                .collect(),
        ),
    }
}

/// A Decimal's unscaled big-endian two's-complement bytes as fixed-point text with `scale`
/// digits after the point (Python's `format(d, 'f')`).
fn decimal_text(unscaled: &[u8], scale: u32) -> String {
    assert!(unscaled.len() <= 16, "test decimals fit in i128");
    let negative = unscaled.first().is_some_and(|b| b & 0x80 != 0);
    let mut n: i128 = if negative { -1 } else { 0 };
    for b in unscaled {
        n = (n << 8) | i128::from(*b);
    }
    let digits = n.unsigned_abs().to_string();
    let scale = scale as usize;
    let digits = if digits.len() <= scale {
        format!("{}{digits}", "0".repeat(scale + 1 - digits.len()))
    } else {
        digits
    };
    let (whole, fraction) = digits.split_at(digits.len() - scale);
    let sign = if negative { "-" } else { "" };
    if scale == 0 {
        format!("{sign}{whole}")
    } else {
        format!("{sign}{whole}.{fraction}")
    }
}

fn avro_converter(is_key: bool, registry_url: &str) -> AvroConverter {
    let mut props = Properties::new();
    props.insert(
        "converter.type".into(),
        if is_key { "key" } else { "value" }.into(),
    );
    props.insert("schema.registry.url".into(), registry_url.into());
    AvroConverter::new(AvroConverterConfig::from_props(&props).expect("Avro config"))
}

/// Runs the decode script; its output lines by topic, in offset order.
fn decode(
    dir: &Path,
    w: &Worker,
    counts: &BTreeMap<String, usize>,
    cases: Option<&Json>,
) -> BTreeMap<String, Vec<Json>> {
    let counts_path = dir.join("counts.json");
    std::fs::write(&counts_path, serde_json::to_string(counts).unwrap()).unwrap();
    let cases_arg = match cases {
        Some(cases) => {
            let path = dir.join("cases.json");
            std::fs::write(&path, cases.to_string()).unwrap();
            path.display().to_string()
        }
        None => "-".to_owned(),
    };
    let out = clients::run_python(
        dir,
        "decode_avro.py",
        DECODE_SCRIPT,
        &[
            &w.kafka.to_string(),
            &w.url(),
            &counts_path.display().to_string(),
            &cases_arg,
        ],
        Duration::from_secs(120),
    );
    let mut by_topic: BTreeMap<String, Vec<Json>> = BTreeMap::new();
    for line in out.lines() {
        let record: Json = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        by_topic
            .entry(record["topic"].as_str().unwrap().to_owned())
            .or_default()
            .push(record);
    }
    for records in by_topic.values_mut() {
        records.sort_by_key(|r| r["offset"].as_i64());
    }
    by_topic
}

/// Every golden PostgreSQL record (Debezium's JSON) -> Connect data -> our AvroConverter (over
/// HTTP to the worker's registry) -> the worker's log via a Kafka producer -> Confluent's
/// AvroDeserializer: the same field values as the JSON event.
#[test]
fn golden_postgres_records_decode_with_confluents_deserializer() {
    let tmp = tempfile::tempdir().unwrap();
    let w = Worker::start(&tmp.path().join("data"), &[]);
    let json = JsonConverter::new(JsonConverterConfig::default());
    let key_avro = avro_converter(true, &w.url());
    let value_avro = avro_converter(false, &w.url());

    let golden =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/golden/debezium/postgres");
    let mut files: Vec<_> = std::fs::read_dir(&golden)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".raw.jsonl"))
        .collect();
    files.sort();
    let mut cases = Vec::new();
    let mut expected: BTreeMap<String, Vec<(Json, Json)>> = BTreeMap::new();
    for file in &files {
        for line in std::fs::read_to_string(file).unwrap().lines() {
            let record: Json = serde_json::from_str(line).unwrap();
            let topic = record["topic"].as_str().unwrap();
            let mut encoded = Vec::new();
            let mut comparable = Vec::new();
            for (part, converter) in [("key", &key_avro), ("value", &value_avro)] {
                let text = record[part].as_str();
                let data = json
                    .to_connect_data(topic, text.map(str::as_bytes))
                    .unwrap_or_else(|e| panic!("{}: {part}: {e}", file.display()));
                comparable.push(canonical(data.schema.as_ref(), &data.value));
                let bytes = converter
                    .from_connect_data(topic, data.schema.as_ref(), &data.value)
                    .unwrap_or_else(|e| panic!("{}: Avro {part}: {e}", file.display()));
                assert_eq!(bytes.is_none(), text.is_none(), "null stays a Kafka null");
                if let Some(bytes) = &bytes {
                    assert_eq!(bytes[0], 0, "Confluent's magic byte");
                }
                encoded.push(bytes.map(hex));
            }
            cases.push(json!({"topic": topic, "key": encoded[0], "value": encoded[1]}));
            let value = comparable.pop().unwrap();
            let key = comparable.pop().unwrap();
            expected
                .entry(topic.to_owned())
                .or_default()
                .push((key, value));
        }
    }
    assert!(cases.len() >= 25, "every golden case: {}", cases.len());
    let counts: BTreeMap<String, usize> =
        expected.iter().map(|(t, r)| (t.clone(), r.len())).collect();
    let decoded = decode(tmp.path(), &w, &counts, Some(&Json::Array(cases)));
    for (topic, records) in &expected {
        let got = &decoded[topic];
        assert_eq!(got.len(), records.len(), "{topic}");
        for (i, ((key, value), got)) in records.iter().zip(got).enumerate() {
            assert_eq!(&got["key"], key, "{topic} record {i}: key");
            assert_eq!(&got["value"], value, "{topic} record {i}: value");
        }
    }
    // The registry holds one key and one value subject per topic.
    let (status, _, subjects) = http(w.addr, "GET", "/subjects", None);
    assert_eq!(status, 200);
    for topic in expected.keys() {
        for suffix in ["key", "value"] {
            let subject = format!("{topic}-{suffix}");
            assert!(
                subjects.as_array().unwrap().contains(&json!(subject)),
                "{subject} in {subjects}"
            );
        }
    }
    w.sigterm();
}

fn hex(bytes: Vec<u8>) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn record_count(w: &Worker, topic: &str) -> usize {
    w.partition0_records(topic).map_or(0, |r| r.len())
}

fn task_status(w: &Worker, connector: &str) -> Json {
    let (_, _, status) = http(
        w.addr,
        "GET",
        &format!("/connectors/{connector}/status"),
        None,
    );
    status["tasks"][0].clone()
}

/// The seed connector (orders) and a second one (customers) with Avro keys and values and no
/// registry URL: the embedded registry. A column added to orders registers a second value
/// version that Confluent's client decodes, a widened type (int -> bigint) a third; an
/// incompatible type change fails only the orders connector, naming the subject, the rule and
/// both schemas; customers keeps streaming.
#[test]
fn postgres_source_writes_avro_and_evolves_schemas_in_the_embedded_registry() {
    let (runtime, server, seed) = seeded_server(
        "INSERT INTO public.customers VALUES (1,'Ada','ada@example.com','2024-01-02 03:04:05.123456+00');
         INSERT INTO public.orders VALUES (1,1,19.98,'new','2024-01-02 03:04:05.123456+00','first order');",
    );
    let tmp = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (name, table, slot) in [
        ("orders-avro", "public.orders", "orders_slot"),
        ("customers-avro", "public.customers", "customers_slot"),
    ] {
        let mut config = seed.clone();
        config["name"] = json!(name);
        let c = &mut config["config"];
        c["table.include.list"] = json!(table);
        c["slot.name"] = json!(slot);
        c["publication.name"] = json!(format!("{slot}_pub"));
        c["publication.autocreate.mode"] = json!("filtered");
        c["key.converter"] = json!("io.confluent.connect.avro.AvroConverter");
        c["value.converter"] = json!("io.confluent.connect.avro.AvroConverter");
        let file = tmp.path().join(format!("{name}.json"));
        std::fs::write(&file, config.to_string()).unwrap();
        files.push(file);
    }
    let file_refs: Vec<&Path> = files.iter().map(|f| f.as_path()).collect();
    let w = Worker::start(&tmp.path().join("data"), &file_refs);
    wait_until("both snapshots", Duration::from_secs(60), || {
        record_count(&w, "warehouse.orders") == 1 && record_count(&w, "warehouse.customers") == 1
    });

    // A column added: a second, compatible value schema.
    sql(
        &runtime,
        &server,
        "ALTER TABLE public.orders ADD COLUMN channel text;
         INSERT INTO public.orders VALUES (2,1,5.50,'new','2024-03-01 10:00:00+00','second','web');",
    );
    wait_until(
        "the insert after ALTER TABLE",
        Duration::from_secs(30),
        || record_count(&w, "warehouse.orders") == 2,
    );
    let (status, _, versions) = http(
        w.addr,
        "GET",
        "/subjects/warehouse.orders-value/versions",
        None,
    );
    assert_eq!(status, 200, "{versions}");
    assert_eq!(versions, json!([1, 2]));
    let (_, _, key_versions) = http(
        w.addr,
        "GET",
        "/subjects/warehouse.orders-key/versions",
        None,
    );
    assert_eq!(key_versions, json!([1]), "the key did not change");

    let counts = BTreeMap::from([
        ("warehouse.orders".to_owned(), 2),
        ("warehouse.customers".to_owned(), 1),
    ]);
    let decoded = decode(tmp.path(), &w, &counts, None);
    let orders = &decoded["warehouse.orders"];
    assert_eq!(orders[0]["key"], json!({"id": 1}));
    assert_eq!(orders[0]["value"]["op"], "r");
    assert_eq!(
        orders[0]["value"]["after"]["amount"],
        json!({"$decimal": "19.98"})
    );
    assert!(
        orders[0]["value"]["after"].get("channel").is_none(),
        "version 1 has no channel: {}",
        orders[0]["value"]
    );
    assert_eq!(orders[1]["value"]["op"], "c");
    assert_eq!(orders[1]["value"]["after"]["channel"], "web");
    assert_eq!(
        orders[1]["value"]["after"]["amount"],
        json!({"$decimal": "5.50"})
    );
    assert_eq!(orders[1]["value"]["source"]["table"], "orders");
    assert_eq!(
        decoded["warehouse.customers"][0]["value"]["after"]["name"],
        "Ada"
    );

    // A type widened (int -> bigint; Avro promotes int to long): a third, compatible version.
    sql(
        &runtime,
        &server,
        "ALTER TABLE public.orders ALTER COLUMN customer_id TYPE bigint;
         INSERT INTO public.orders VALUES (3,5000000000,2.00,'new','2024-03-02 09:00:00+00','third','web');",
    );
    wait_until(
        "the insert after the widening",
        Duration::from_secs(30),
        || record_count(&w, "warehouse.orders") == 3,
    );
    let (_, _, versions) = http(
        w.addr,
        "GET",
        "/subjects/warehouse.orders-value/versions",
        None,
    );
    assert_eq!(
        versions,
        json!([1, 2, 3]),
        "the widening registers version 3"
    );
    let counts = BTreeMap::from([("warehouse.orders".to_owned(), 3)]);
    let decoded = decode(tmp.path(), &w, &counts, None);
    let third = decoded["warehouse.orders"]
        .iter()
        .find(|r| r["key"] == json!({"id": 3}))
        .expect("order 3 decoded");
    assert_eq!(
        third["value"]["after"]["customer_id"],
        json!(5_000_000_000_i64)
    );

    // An incompatible change (text -> integer) under BACKWARD: the orders connector fails and
    // says which subject refused what; customers goes on.
    sql(
        &runtime,
        &server,
        "ALTER TABLE public.orders ALTER COLUMN status TYPE integer USING 0;
         INSERT INTO public.orders VALUES (4,1,1.00,7,'2024-03-02 10:00:00+00','fourth','web');",
    );
    wait_until("the orders task to fail", Duration::from_secs(30), || {
        task_status(&w, "orders-avro")["state"] == "FAILED"
    });
    let failed = task_status(&w, "orders-avro");
    let trace = failed["trace"].as_str().unwrap_or_default();
    assert!(
        trace.contains("warehouse.orders-value") && trace.contains("incompatible"),
        "the failure names the subject and the rule: {failed}"
    );
    assert!(trace.contains("BACKWARD"), "names the level: {trace}");
    assert!(
        trace.contains("New schema:") && trace.contains("oldSchema:"),
        "names the new and the old schema: {trace}"
    );
    assert_eq!(record_count(&w, "warehouse.orders"), 3, "nothing written");
    sql(
        &runtime,
        &server,
        "INSERT INTO public.customers VALUES (2,'Bob',NULL,'2024-03-02 00:00:00+00');",
    );
    wait_until("customers still streaming", Duration::from_secs(30), || {
        record_count(&w, "warehouse.customers") == 2
    });
    assert_eq!(task_status(&w, "customers-avro")["state"], "RUNNING");

    // The operator's way out (docs/avro.md): relax the subject's level and restart the task;
    // the refused change is written, nothing lost.
    let (status, _, body) = http(
        w.addr,
        "PUT",
        "/config/warehouse.orders-value",
        Some(r#"{"compatibility": "NONE"}"#),
    );
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = http(
        w.addr,
        "POST",
        "/connectors/orders-avro/tasks/0/restart",
        None,
    );
    assert!(status < 300, "restart: {status} {body}");
    wait_until(
        "the refused insert after the restart",
        Duration::from_secs(30),
        || record_count(&w, "warehouse.orders") == 4,
    );
    assert_eq!(task_status(&w, "orders-avro")["state"], "RUNNING");
    let (_, _, versions) = http(
        w.addr,
        "GET",
        "/subjects/warehouse.orders-value/versions",
        None,
    );
    assert_eq!(versions, json!([1, 2, 3, 4]));
    w.sigterm();
}
