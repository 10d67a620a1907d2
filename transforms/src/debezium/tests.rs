//! Unit tests of the Debezium transforms. ExtractNewRecordState runs on events captured from
//! Debezium 3.6 (`tests/data/golden/debezium/postgres/*.raw.jsonl`), parsed with the
//! JsonConverter into schema + value.

use headwater_api::{
    ConnectRecord, OffsetMap, Schema, SchemaBuilder, SchemaRef, SourceRecord, Struct, Transform,
    Value,
};
use headwater_format::{JsonConverter, JsonConverterConfig};

use super::*;
use crate::debezium::extract_new_record_state::FieldReference;
use crate::kafka::tests::{props, record};

/// The records of one golden file, as the connector handed them to the transforms (before the
/// seed's RegexRouter: topics are put back to `cdc.public.<table>`).
fn golden(name: &str) -> Vec<SourceRecord> {
    let path = format!(
        "{}/../tests/data/golden/debezium/postgres/{name}.raw.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let conv = JsonConverter::new(JsonConverterConfig::default());
    text.lines()
        .map(|line| {
            let j: serde_json::Value = serde_json::from_str(line).unwrap();
            let topic = j["topic"]
                .as_str()
                .unwrap()
                .replace("warehouse.", "cdc.public.");
            let bytes = |k: &str| j[k].as_str().map(|s| s.as_bytes().to_vec());
            let key = conv
                .to_connect_data(&topic, bytes("key").as_deref())
                .unwrap();
            let value = conv
                .to_connect_data(&topic, bytes("value").as_deref())
                .unwrap();
            let mut r = SourceRecord::new(
                OffsetMap::new(),
                OffsetMap::new(),
                topic,
                key.schema,
                key.value,
                value.schema,
                value.value,
            );
            r.timestamp = Some(1);
            r
        })
        .collect()
}

fn unwrap(pairs: &[(&str, &str)]) -> ExtractNewRecordState {
    ExtractNewRecordState::configure(&props(pairs)).unwrap()
}

fn run(t: &impl Transform<SourceRecord>, r: SourceRecord) -> Option<SourceRecord> {
    t.apply(r).unwrap()
}

fn get<'a>(v: &'a Value, name: &str) -> &'a Value {
    v.as_struct()
        .unwrap()
        .get(name)
        .unwrap_or_else(|| panic!("no field {name}"))
}

#[test]
fn unwrap_insert_update_snapshot() {
    let t = unwrap(&[]);
    let insert = golden("12_seed_orders_insert").remove(0);
    let after_schema = insert
        .value_schema
        .as_ref()
        .unwrap()
        .field("after")
        .unwrap()
        .schema()
        .clone();
    let out = run(&t, insert).unwrap();
    assert_eq!(
        out.value_schema.as_ref().unwrap().name(),
        Some("cdc.public.orders.Value")
    );
    assert_eq!(**out.value_schema.as_ref().unwrap(), *after_schema);
    assert_eq!(get(&out.value, "id"), &Value::Int64(2));
    assert_eq!(get(&out.value, "status"), &Value::from("new"));
    assert_eq!(
        out.key_schema.as_ref().unwrap().name(),
        Some("cdc.public.orders.Key")
    );
    let update = run(&t, golden("13_seed_orders_update").remove(0)).unwrap();
    assert_eq!(get(&update.value, "status"), &Value::from("paid"));
    for r in golden("00_snapshot_seed_tables") {
        let out = run(&t, r).unwrap();
        assert!(matches!(out.value, Value::Struct(_)));
    }
}

#[test]
fn unwrap_delete_modes() {
    let events = golden("14_seed_orders_delete");
    let (delete, tombstone) = (events[0].clone(), events[1].clone());
    assert!(tombstone.is_tombstone());
    // tombstone (default): null value with the row schema; the connector's tombstone dropped.
    let t = unwrap(&[]);
    let out = run(&t, delete.clone()).unwrap();
    assert!(out.value.is_null());
    assert_eq!(
        out.value_schema.as_ref().unwrap().name(),
        Some("cdc.public.orders.Value")
    );
    assert!(!out.is_tombstone());
    assert!(run(&t, tombstone.clone()).is_none());
    // drop
    let t = unwrap(&[("delete.tombstone.handling.mode", "drop")]);
    assert!(run(&t, delete.clone()).is_none());
    assert!(run(&t, tombstone.clone()).is_none());
    // delete-to-tombstone: a true tombstone that keeps the key.
    let t = unwrap(&[("delete.tombstone.handling.mode", "delete-to-tombstone")]);
    let out = run(&t, delete.clone()).unwrap();
    assert!(out.is_tombstone());
    assert_eq!(get(&out.key, "id"), &Value::Int64(2));
    assert!(run(&t, tombstone.clone()).is_none());
    // rewrite: before + __deleted=true; inserts get __deleted=false.
    let t = unwrap(&[("delete.tombstone.handling.mode", "rewrite")]);
    let out = run(&t, delete.clone()).unwrap();
    assert_eq!(get(&out.value, "__deleted"), &Value::from("true"));
    assert_eq!(get(&out.value, "id"), &Value::Int64(2));
    let ins = run(&t, golden("12_seed_orders_insert").remove(0)).unwrap();
    assert_eq!(get(&ins.value, "__deleted"), &Value::from("false"));
    assert!(ins
        .value_schema
        .as_ref()
        .unwrap()
        .field("__deleted")
        .unwrap()
        .schema()
        .is_optional());
    assert!(run(&t, tombstone.clone()).is_none());
    // rewrite-with-tombstone keeps the tombstone.
    let t = unwrap(&[("delete.tombstone.handling.mode", "Rewrite-With-Tombstone")]);
    assert!(run(&t, tombstone).unwrap().is_tombstone());
    let e = ExtractNewRecordState::configure(&props(&[("delete.tombstone.handling.mode", "none")]))
        .unwrap_err();
    assert!(e.errors_by_field()["delete.tombstone.handling.mode"][0]
        .contains("String must be one of (case insensitive)"));
}

#[test]
fn unwrap_truncate_and_non_envelopes() {
    let t = unwrap(&[]);
    let events = golden("18_truncate_emitted");
    assert!(run(&t, events[1].clone()).is_none(), "truncate dropped");
    let heartbeat_schema = SchemaBuilder::struct_()
        .name("io.debezium.connector.common.Heartbeat")
        .field("ts_ms", Schema::int64())
        .build_ref();
    let hb = Struct::new(heartbeat_schema.clone())
        .unwrap()
        .with("ts_ms", 5i64);
    let out = run(
        &t,
        record(
            "__debezium-heartbeat.cdc",
            Some(heartbeat_schema),
            Value::Struct(hb.clone()),
        ),
    )
    .unwrap();
    assert_eq!(out.value, Value::Struct(hb));
}

#[test]
fn unwrap_add_fields_headers_and_route() {
    let t = unwrap(&[
        ("add.fields", "op,table,source.ts_ms:src_ts,lsn"),
        ("add.headers", "op,db"),
        ("route.by.field", "status"),
    ]);
    let insert = golden("12_seed_orders_insert").remove(0);
    let out = run(&t, insert.clone()).unwrap();
    assert_eq!(get(&out.value, "__op"), &Value::from("c"));
    assert_eq!(get(&out.value, "__table"), &Value::from("orders"));
    assert!(matches!(get(&out.value, "__src_ts"), Value::Int64(_)));
    assert!(matches!(get(&out.value, "__lsn"), Value::Int64(_)));
    assert!(out
        .value_schema
        .as_ref()
        .unwrap()
        .field("__op")
        .unwrap()
        .schema()
        .is_optional());
    assert_eq!(
        out.headers.last_with_name("__op").unwrap().value,
        Value::from("c")
    );
    assert!(matches!(
        out.headers.last_with_name("__db").unwrap().value,
        Value::String(_)
    ));
    assert_eq!(out.topic, "new", "routed by the status column");
    // Cached schema: the next insert of the same table shares the output schema.
    let again = run(&t, insert).unwrap();
    assert!(std::sync::Arc::ptr_eq(
        out.value_schema.as_ref().unwrap(),
        again.value_schema.as_ref().unwrap()
    ));
    // Tombstones get only the op header ("d").
    let t = unwrap(&[
        ("add.headers", "op,db"),
        ("delete.tombstone.handling.mode", "rewrite-with-tombstone"),
    ]);
    let tomb = run(&t, golden("14_seed_orders_delete").remove(1)).unwrap();
    assert_eq!(tomb.headers.len(), 1);
    assert_eq!(
        tomb.headers.last_with_name("__op").unwrap().value,
        Value::from("d")
    );
    assert_eq!(
        FieldReference::parse("__", "source.ts_ms")
            .unwrap()
            .new_field,
        "__source_ts_ms"
    );
    assert_eq!(
        FieldReference::parse("__", "id").unwrap().parent.as_deref(),
        Some("transaction")
    );
    assert!(ExtractNewRecordState::configure(&props(&[("add.fields", "a:b:c")])).is_err());
}

#[test]
fn unwrap_drop_fields_from_header() {
    let t = unwrap(&[
        ("drop.fields.header.name", "drop"),
        ("drop.fields.from.key", "true"),
    ]);
    let mut r = golden("12_seed_orders_insert").remove(0);
    let list = SchemaBuilder::array(Schema::string()).build_ref();
    r.headers.add(
        "drop",
        Some(list),
        Value::Array(vec!["note".into(), "status".into(), "id".into()]),
    );
    let out = run(&t, r.clone()).unwrap();
    let names: Vec<&str> = out
        .value_schema
        .as_ref()
        .unwrap()
        .fields()
        .iter()
        .map(|f| f.name())
        .collect();
    // keep.schema.compatible=true: only the optional `note` goes.
    assert_eq!(
        names,
        ["id", "customer_id", "amount", "status", "created_at"]
    );
    let t = unwrap(&[
        ("drop.fields.header.name", "drop"),
        ("drop.fields.keep.schema.compatible", "false"),
    ]);
    let out = run(&t, r).unwrap();
    let names: Vec<&str> = out
        .value_schema
        .as_ref()
        .unwrap()
        .fields()
        .iter()
        .map(|f| f.name())
        .collect();
    assert_eq!(names, ["customer_id", "amount", "created_at"]);
}

#[test]
fn logical_router_renames_schemas_and_adds_key_field() {
    let t = LogicalTopicRouter::configure(
        true,
        &props(&[
            ("topic.regex", r"cdc\.public\.(orders|customers)"),
            ("topic.replacement", "cdc.all"),
        ]),
    )
    .unwrap();
    let out = run(&t, golden("12_seed_orders_insert").remove(0)).unwrap();
    assert_eq!(out.topic, "cdc.all");
    assert_eq!(out.key_schema.as_ref().unwrap().name(), Some("cdc.all.Key"));
    assert_eq!(
        get(&out.key, "__dbz__physicalTableIdentifier"),
        &Value::from("cdc.public.orders")
    );
    let vs = out.value_schema.as_ref().unwrap();
    assert_eq!(vs.name(), Some("cdc.all.Envelope"));
    assert_eq!(
        vs.field("after").unwrap().schema().name(),
        Some("cdc.all.Value")
    );
    assert_eq!(get(get(&out.value, "after"), "id"), &Value::Int64(2));
    // Tombstone: key rewritten, value untouched.
    let tomb = run(&t, golden("14_seed_orders_delete").remove(1)).unwrap();
    assert!(tomb.is_tombstone());
    assert_eq!(tomb.topic, "cdc.all");
    // Not matching: unchanged.
    let p = run(&t, golden("18_truncate_emitted").remove(0)).unwrap();
    assert_eq!(p.topic, "cdc.public.products");
    let t = LogicalTopicRouter::configure(
        false,
        &props(&[
            ("topic.regex", "cdc\\.public\\.(.*)"),
            ("topic.replacement", "x"),
            ("key.field.regex", "cdc\\.public\\.(.*)"),
            ("key.field.replacement", "$1"),
        ]),
    )
    .unwrap();
    let out = run(&t, golden("12_seed_orders_insert").remove(0)).unwrap();
    assert_eq!(
        get(&out.key, "__dbz__sourceIdentifier"),
        &Value::from("orders")
    );
    let e = LogicalTopicRouter::configure(
        false,
        &props(&[
            ("topic.regex", "a"),
            ("topic.replacement", "b"),
            ("key.field.regex", "c"),
        ]),
    )
    .unwrap_err();
    assert_eq!(
        e.errors_by_field()["key.field.replacement"],
        ["key.field.replacement must be non-empty if key.field.regex is set."]
    );
    assert_eq!(logical_router::avro_adjust("9a-b.c"), "_a_b.c");
}

fn outbox_schema() -> (SchemaRef, SchemaRef) {
    let row = SchemaBuilder::struct_()
        .name("cdc.public.outbox.Value")
        .optional()
        .field("id", Schema::string())
        .field("aggregatetype", Schema::string())
        .field("aggregateid", Schema::string())
        .field("type", Schema::string())
        .field("payload", Schema::optional_string())
        .field("part", Schema::optional_int32())
        .build_ref();
    let env = SchemaBuilder::struct_()
        .name("cdc.public.outbox.Envelope")
        .field("before", row.clone())
        .field("after", row.clone())
        .field("op", Schema::string())
        .field("ts_ms", Schema::optional_int64())
        .build_ref();
    (row, env)
}

fn outbox_event(op: &str, payload: Option<&str>) -> SourceRecord {
    let (row, env) = outbox_schema();
    let mut r = Struct::new(row).unwrap();
    r.put("id", "e-1").unwrap();
    r.put("aggregatetype", "Order").unwrap();
    r.put("aggregateid", "42").unwrap();
    r.put("type", "OrderCreated").unwrap();
    r.put("payload", payload.map(str::to_owned)).unwrap();
    r.put("part", 3).unwrap();
    let mut e = Struct::new(env.clone()).unwrap();
    e.put(if op == "d" { "before" } else { "after" }, r)
        .unwrap();
    e.put("op", op).unwrap();
    e.put("ts_ms", 1234i64).unwrap();
    record("cdc.public.outbox", Some(env), Value::Struct(e))
}

#[test]
fn outbox_event_router() {
    let t = EventRouter::configure(&props(&[])).unwrap();
    let out = run(&t, outbox_event("c", Some("{\"a\":1}"))).unwrap();
    assert_eq!(out.topic, "outbox.event.Order");
    assert_eq!(out.key, Value::from("42"));
    assert_eq!(out.value, Value::from("{\"a\":1}"));
    assert_eq!(out.timestamp, Some(1234));
    assert_eq!(
        out.headers.last_with_name("id").unwrap().value,
        Value::from("e-1")
    );
    assert!(run(&t, outbox_event("d", None)).is_none());
    assert!(run(&t, outbox_event("u", Some("x"))).is_none());
    assert!(run(&t, record("cdc.public.outbox", None, Value::Null)).is_none());
    let fatal = EventRouter::configure(&props(&[("table.op.invalid.behavior", "fatal")])).unwrap();
    assert!(fatal.apply(outbox_event("u", Some("x"))).is_err());
    // Envelope placement, partition, header alias, topic replacement, JSON expansion.
    let t = EventRouter::configure(&props(&[
        (
            "table.fields.additional.placement",
            "type:envelope:eventType,part:partition,type:header:t",
        ),
        ("route.topic.replacement", "events.${routedByValue}"),
        ("table.expand.json.payload", "true"),
    ]))
    .unwrap();
    let out = run(
        &t,
        outbox_event(
            "r",
            Some("{\"a\":1,\"b\":{\"c\":\"x\"},\"n\":null,\"big\":5000000000}"),
        ),
    )
    .unwrap();
    assert_eq!(out.topic, "events.Order");
    assert_eq!(out.kafka_partition, Some(3));
    assert_eq!(
        out.headers.last_with_name("t").unwrap().value,
        Value::from("OrderCreated")
    );
    let vs = out.value_schema.as_ref().unwrap();
    assert_eq!(vs.name(), Some("cdc.public.outbox.Order.Value"));
    assert_eq!(get(&out.value, "eventType"), &Value::from("OrderCreated"));
    let payload = get(&out.value, "payload");
    assert_eq!(get(payload, "a"), &Value::Int32(1));
    assert_eq!(get(get(payload, "b"), "c"), &Value::from("x"));
    assert_eq!(get(payload, "big"), &Value::Int64(5_000_000_000));
    let ps = vs.field("payload").unwrap().schema();
    assert!(
        ps.field("n").is_none(),
        "null fields are skipped by default"
    );
    assert_eq!(ps.field("b").unwrap().schema().name(), Some("payload.b"));
    // Not JSON: left as is.
    let out = run(&t, outbox_event("c", Some("plain"))).unwrap();
    assert_eq!(get(&out.value, "payload"), &Value::from("plain"));
    // Empty payload as tombstone.
    let t =
        EventRouter::configure(&props(&[("route.tombstone.on.empty.payload", "true")])).unwrap();
    assert!(run(&t, outbox_event("c", None)).unwrap().is_tombstone());
    let e =
        EventRouter::configure(&props(&[("table.fields.additional.placement", "a")])).unwrap_err();
    assert!(e.errors_by_field()["table.fields.additional.placement"][0]
        .contains("String pairs or trios"));
}

#[test]
fn header_to_value_copy_and_move() {
    let t = HeaderToValue::configure(&props(&[
        ("headers", "h1,h2"),
        ("fields", "f1,nested.f2"),
        ("operation", "move"),
    ]))
    .unwrap();
    let schema = SchemaBuilder::struct_()
        .name("V")
        .field("id", Schema::int32())
        .build_ref();
    let mut r = record(
        "t",
        Some(schema.clone()),
        Value::Struct(Struct::new(schema.clone()).unwrap().with("id", 1)),
    );
    r.headers.add("h1", Some(Schema::string()), "a".into());
    r.headers.add("h2", Some(Schema::int64()), Value::Int64(2));
    r.headers.add("other", None, Value::Null);
    let out = run(&t, r).unwrap();
    assert_eq!(get(&out.value, "f1"), &Value::from("a"));
    assert_eq!(get(get(&out.value, "nested"), "f2"), &Value::Int64(2));
    assert_eq!(out.headers.len(), 1, "moved headers removed, others kept");
    assert!(run(&t, record("t", None, Value::Null))
        .unwrap()
        .value
        .is_null());
    let e = HeaderToValue::configure(&props(&[
        ("headers", "a"),
        ("fields", "b,c"),
        ("operation", "copy"),
    ]))
    .unwrap_err();
    assert!(e.errors_by_field()["fields"][0].contains("same number of elements"));
}

#[test]
fn schema_change_event_filter() {
    let change = SchemaBuilder::struct_()
        .field("type", Schema::string())
        .build_ref();
    let schema = SchemaBuilder::struct_()
        .name("io.debezium.connector.mysql.SchemaChangeValue")
        .field(
            "tableChanges",
            SchemaBuilder::array(change.clone()).build_ref(),
        )
        .build_ref();
    let event = |kinds: &[&str]| {
        let items = kinds
            .iter()
            .map(|k| Value::Struct(Struct::new(change.clone()).unwrap().with("type", *k)))
            .collect();
        record(
            "cdc",
            Some(schema.clone()),
            Value::Struct(
                Struct::new(schema.clone())
                    .unwrap()
                    .with("tableChanges", Value::Array(items)),
            ),
        )
    };
    let t = SchemaChangeEventFilter::configure(&props(&[(
        "schema.change.event.exclude.list",
        "DROP, DATABASE",
    )]))
    .unwrap();
    assert!(run(&t, event(&["DROP"])).is_none());
    assert!(
        run(&t, event(&[])).is_none(),
        "empty tableChanges = DATABASE"
    );
    assert!(run(&t, event(&["CREATE"])).is_some());
    assert!(run(&t, golden("12_seed_orders_insert").remove(0)).is_some());
    let e = SchemaChangeEventFilter::configure(&props(&[(
        "schema.change.event.exclude.list",
        "DROPS",
    )]))
    .unwrap_err();
    assert!(e.errors_by_field()["schema.change.event.exclude.list"][0].contains("No enum constant"));
}

#[test]
fn timezone_converter_zoned_and_wall_clock_values() {
    let t =
        TimezoneConverter::configure(&props(&[("converted.timezone", "Europe/Berlin")])).unwrap();
    let out = run(&t, golden("12_seed_orders_insert").remove(0)).unwrap();
    // 2024-03-01T10:00:00Z is 11:00 in Berlin (CET, +01:00).
    assert_eq!(
        get(get(&out.value, "after"), "created_at"),
        &Value::from("2024-03-01T11:00:00+01:00")
    );
    let t = TimezoneConverter::configure(&props(&[
        ("converted.timezone", "+05:30"),
        ("include.list", "source:orders:after.created_at"),
    ]))
    .unwrap();
    let out = run(&t, golden("00_snapshot_seed_tables").remove(0)).unwrap();
    assert_eq!(
        get(get(&out.value, "after"), "created_at"),
        &Value::from("2024-01-02T08:34:05.123456+05:30")
    );
    // Other tables are not included.
    let other = run(&t, golden("00_snapshot_seed_tables").remove(1)).unwrap();
    assert_eq!(
        get(get(&other.value, "after"), "created_at"),
        &Value::from("2024-01-02T03:04:05.123456Z")
    );
    // Wall-clock timestamps: the UTC reading is re-read as local time.
    let ts = SchemaBuilder::struct_()
        .name("r.Value")
        .optional()
        .field(
            "t",
            SchemaBuilder::int64()
                .name("io.debezium.time.MicroTimestamp")
                .build_ref(),
        )
        .build_ref();
    let env = SchemaBuilder::struct_()
        .name("r.Envelope")
        .field("after", ts.clone())
        .build_ref();
    let row = Struct::new(ts).unwrap().with("t", 3_600_000_000i64);
    let e = Struct::new(env.clone()).unwrap().with("after", row);
    let t = TimezoneConverter::configure(&props(&[("converted.timezone", "+01:00")])).unwrap();
    let out = run(&t, record("r", Some(env), Value::Struct(e))).unwrap();
    assert_eq!(get(get(&out.value, "after"), "t"), &Value::Int64(0));
    let e = TimezoneConverter::configure(&props(&[("converted.timezone", "Mars/Olympus")]))
        .unwrap_err();
    assert!(e.errors_by_field()["converted.timezone"][0].starts_with("Invalid timezone format"));
    let e = TimezoneConverter::configure(&props(&[
        ("converted.timezone", "UTC"),
        ("include.list", "source:a"),
        ("exclude.list", "source:b"),
    ]))
    .unwrap_err();
    assert!(e.errors_by_field()["exclude.list"]
        .iter()
        .any(|m| m.contains("Both include and exclude")));
    let e = TimezoneConverter::configure(&props(&[
        ("converted.timezone", "UTC"),
        ("include.list", "no-colon"),
    ]))
    .unwrap_err();
    assert!(e.errors_by_field()["include.list"][0].starts_with("Invalid include list format"));
}
