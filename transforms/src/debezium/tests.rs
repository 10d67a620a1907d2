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

/// The records of one captured file of `tests/data/golden/debezium/<db>/`, parsed back into
/// schema + value with the JsonConverter, topics passed through `topic`.
fn captured(db: &str, name: &str, topic: impl Fn(&str) -> String) -> Vec<SourceRecord> {
    let path = format!(
        "{}/../tests/data/golden/debezium/{db}/{name}.raw.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let conv = JsonConverter::new(JsonConverterConfig::default());
    text.lines()
        .map(|line| {
            let j: serde_json::Value = serde_json::from_str(line).unwrap();
            let topic = topic(j["topic"].as_str().unwrap());
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

/// The records of one PostgreSQL golden file, as the connector handed them to the transforms
/// (before the seed's RegexRouter: topics are put back to `cdc.public.<table>`).
fn golden(name: &str) -> Vec<SourceRecord> {
    captured("postgres", name, |t| t.replace("warehouse.", "cdc.public."))
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

// ---- ExtractNewDocumentState, on events captured from Debezium's MongoDB connector ----

/// The records of one MongoDB golden file.
fn mongo_golden(name: &str) -> Vec<SourceRecord> {
    captured("mongodb", name, str::to_owned)
}

fn unwrap_doc(pairs: &[(&str, &str)]) -> ExtractNewDocumentState {
    ExtractNewDocumentState::configure(&props(pairs)).unwrap()
}

/// The record as the JSON converter writes it (schema and payload).
fn as_json(r: &SourceRecord) -> (serde_json::Value, serde_json::Value) {
    let conv = JsonConverter::new(JsonConverterConfig::default());
    let ser = |s: Option<&SchemaRef>, v: &Value| {
        conv.from_connect_data(&r.topic, s, v)
            .unwrap()
            .map(|b| serde_json::from_slice(&b).unwrap())
            .unwrap_or(serde_json::Value::Null)
    };
    (
        ser(r.key_schema.as_ref(), &r.key),
        ser(r.value_schema.as_ref(), &r.value),
    )
}

/// Replaces `after` of a captured event with `after`.
fn with_after(mut r: SourceRecord, after: &str) -> SourceRecord {
    let Value::Struct(env) = &mut r.value else {
        panic!("envelope")
    };
    env.put("after", after).unwrap();
    r
}

#[test]
fn extract_new_document_state_deletes_per_mode() {
    let events = mongo_golden("15_delete_one");
    assert_eq!(events.len(), 2);
    let apply = |t: &ExtractNewDocumentState| -> Vec<SourceRecord> {
        events.iter().filter_map(|r| run(t, r.clone())).collect()
    };
    // tombstone (default): the delete becomes a tombstone with the typed key; the
    // connector's tombstone is dropped.
    let out = apply(&unwrap_doc(&[]));
    assert_eq!(out.len(), 1);
    let (key, value) = as_json(&out[0]);
    assert_eq!(key["payload"]["id"], "65f0a1b2c3d4e5f601234568");
    assert!(key["schema"]["name"].is_null());
    assert!(value.is_null() && out[0].value_schema.is_none());
    // drop: nothing.
    assert!(apply(&unwrap_doc(&[("delete.tombstone.handling.mode", "drop")])).is_empty());
    // rewrite: the delete (no pre-image here) is {__deleted: true}, tombstone dropped.
    let out = apply(&unwrap_doc(&[(
        "delete.tombstone.handling.mode",
        "rewrite",
    )]));
    assert_eq!(out.len(), 1);
    assert_eq!(
        as_json(&out[0]).1["payload"],
        serde_json::json!({"__deleted": true})
    );
    // ... with the id taken from the key when asked.
    let out = apply(&unwrap_doc(&[
        ("delete.tombstone.handling.mode", "rewrite"),
        ("delete.tombstone.handling.mode.rewrite-with-id", "true"),
    ]));
    assert_eq!(
        as_json(&out[0]).1["payload"],
        serde_json::json!({"__deleted": true, "_id": "65f0a1b2c3d4e5f601234568"})
    );
    // rewrite-with-tombstone keeps the tombstone, with the typed key.
    let out = apply(&unwrap_doc(&[(
        "delete.tombstone.handling.mode",
        "rewrite-with-tombstone",
    )]));
    assert_eq!(out.len(), 2);
    assert!(out[1].value.is_null());
    assert_eq!(
        as_json(&out[1]).0["payload"]["id"],
        "65f0a1b2c3d4e5f601234568"
    );
    // delete-to-tombstone: one tombstone.
    let out = apply(&unwrap_doc(&[(
        "delete.tombstone.handling.mode",
        "delete-to-tombstone",
    )]));
    assert_eq!(out.len(), 1);
    assert!(out[0].value.is_null());
}

#[test]
fn extract_new_document_state_rewrites_a_delete_from_its_pre_image() {
    let events = mongo_golden("53_preimage_delete");
    let t = unwrap_doc(&[("delete.tombstone.handling.mode", "rewrite")]);
    let out = run(&t, events[0].clone()).unwrap();
    assert_eq!(
        as_json(&out).1["payload"],
        serde_json::json!({"_id": "65f0a1b2c3d4e5f60123456c", "status": "replaced", "__deleted": true})
    );
    // Other records get __deleted: false, as a boolean field.
    let replace = run(&t, mongo_golden("14_replace_one").remove(0)).unwrap();
    let (_, v) = as_json(&replace);
    assert_eq!(v["payload"]["__deleted"], false);
    assert_eq!(
        v["schema"]["fields"].as_array().unwrap().last().unwrap()["type"],
        "boolean"
    );
}

#[test]
fn extract_new_document_state_builds_partial_updates_under_change_streams() {
    let t = unwrap_doc(&[]);
    let set = run(&t, mongo_golden("31_cs_update_set").remove(0)).unwrap();
    let (_, v) = as_json(&set);
    assert_eq!(
        v["payload"],
        serde_json::json!({"status": "paid", "nested.a": 10, "new": {"k": "v"}, "_id": "65f0a1b2c3d4e5f60123456b"})
    );
    assert_eq!(v["schema"]["name"], "cdc.shop.orders");
    assert_eq!(v["schema"]["fields"][2]["name"], "cdc.shop.orders.new");
    // Only removals: the document is just the id.
    let unset = run(&t, mongo_golden("32_cs_update_unset").remove(0)).unwrap();
    assert_eq!(
        as_json(&unset).1["payload"],
        serde_json::json!({"_id": "65f0a1b2c3d4e5f60123456b"})
    );
    // flatten.struct: dotted update paths use the delimiter too.
    let flat = unwrap_doc(&[("flatten.struct", "true")]);
    let set = run(&flat, mongo_golden("31_cs_update_set").remove(0)).unwrap();
    assert_eq!(
        as_json(&set).1["payload"],
        serde_json::json!({"status": "paid", "nested_a": 10, "new_k": "v", "_id": "65f0a1b2c3d4e5f60123456b"})
    );
}

#[test]
fn extract_new_document_state_adds_fields_and_headers_from_the_envelope() {
    let t = unwrap_doc(&[
        ("add.fields", "op,collection,source.ord"),
        ("add.headers", "op,db"),
    ]);
    // One parsed event (one envelope schema, as the connector shares it), transformed twice.
    let event = mongo_golden("14_replace_one").remove(0);
    let out = run(&t, event.clone()).unwrap();
    let again = run(&t, event).unwrap();
    assert!(std::sync::Arc::ptr_eq(
        out.value_schema.as_ref().unwrap(),
        again.value_schema.as_ref().unwrap()
    ));
    let (_, v) = as_json(&out);
    assert_eq!(v["payload"]["__op"], "u");
    assert_eq!(v["payload"]["__collection"], "orders");
    assert!(v["payload"]["__source_ord"].is_i64());
    assert_eq!(v["payload"]["v"], 2);
    assert_eq!(v["schema"]["fields"][2]["type"], "int64");
    assert_eq!(
        v["schema"]["fields"][3]["name"],
        "org.apache.kafka.connect.data.Timestamp"
    );
    let headers: Vec<(&str, &Value)> = out
        .headers
        .iter()
        .map(|h| (h.key.as_str(), &h.value))
        .collect();
    assert_eq!(
        headers,
        vec![("__op", &Value::from("u")), ("__db", &Value::from("shop"))]
    );
}

#[test]
fn extract_new_document_state_merges_array_documents_and_allows_null_elements() {
    let base = mongo_golden("14_replace_one").remove(0);
    let t = unwrap_doc(&[]);
    let r = with_after(
        base.clone(),
        r#"{"_id": 1,"items": [{"a": 1},{"b": "x","a": 2},null],"ns": [null,{"$numberLong": "5"}],"none": [null]}"#,
    );
    let (_, v) = as_json(&run(&t, r).unwrap());
    assert_eq!(
        v["payload"],
        serde_json::json!({"_id": 1, "items": [{"a": 1, "b": null}, {"a": 2, "b": "x"}, null], "ns": [null, 5], "none": [null]})
    );
    let items = &v["schema"]["fields"][1]["items"];
    assert_eq!(items["name"], "cdc.shop.orders.items");
    assert_eq!(v["schema"]["fields"][2]["items"]["type"], "int64");
    assert_eq!(v["schema"]["fields"][3]["items"]["type"], "string");
    // Conflicting types inside merged documents are refused, naming the path.
    let bad = with_after(base.clone(), r#"{"_id": 1,"items": [{"a": 1},{"a": "x"}]}"#);
    let e = t.apply(bad).unwrap_err().to_string();
    assert!(
        e.contains("'items.a'") && e.contains("int32 and string"),
        "{e}"
    );
    // document encoding takes them element by element.
    let doc = unwrap_doc(&[("array.encoding", "document")]);
    let mixed = with_after(base.clone(), r#"{"_id": 1,"m": [1,"two",{"x": 1},[5]]}"#);
    let (_, v) = as_json(&run(&doc, mixed).unwrap());
    assert_eq!(
        v["payload"]["m"],
        serde_json::json!({"_0": 1, "_1": "two", "_2": {"x": 1}, "_3": {"_0": 5}})
    );
    assert_eq!(
        v["schema"]["fields"][1]["fields"][2]["name"],
        "cdc.shop.orders.m._2"
    );
    // Malformed extended JSON is a data error that says where.
    let broken = with_after(base, r#"{"_id": 1,"x": }"#);
    let e = t.apply(broken).unwrap_err().to_string();
    assert!(
        e.contains("'after'") && e.contains("cdc.shop.orders"),
        "{e}"
    );
}

#[test]
fn extract_new_document_state_reuses_schemas_and_passes_other_records() {
    let t = unwrap_doc(&[]);
    let a = run(&t, mongo_golden("14_replace_one").remove(0)).unwrap();
    let b = run(&t, mongo_golden("14_replace_one").remove(0)).unwrap();
    assert!(std::sync::Arc::ptr_eq(
        a.value_schema.as_ref().unwrap(),
        b.value_schema.as_ref().unwrap()
    ));
    assert!(std::sync::Arc::ptr_eq(
        a.key_schema.as_ref().unwrap(),
        b.key_schema.as_ref().unwrap()
    ));
    // A heartbeat-like record (key not a Debezium `.Key`) is left alone.
    let key_schema = SchemaBuilder::struct_()
        .name("io.debezium.connector.common.ServerNameKey")
        .field("serverName", Schema::string())
        .build_ref();
    let key = Struct::new(key_schema.clone())
        .unwrap()
        .with("serverName", "cdc");
    let hb = SourceRecord::new(
        OffsetMap::new(),
        OffsetMap::new(),
        "__debezium-heartbeat.cdc",
        Some(key_schema),
        Value::Struct(key),
        None,
        Value::Null,
    );
    let out = run(&t, hb.clone()).unwrap();
    assert_eq!(out.key, hb.key);
    // Options are checked.
    let err =
        ExtractNewDocumentState::configure(&props(&[("array.encoding", "list")])).unwrap_err();
    assert!(format!("{err:?}").contains("array.encoding"), "{err:?}");
}
