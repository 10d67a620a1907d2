//! Unit tests of the Kafka Connect transforms and predicates: schema and schemaless records,
//! tombstones, `$Key` variants, schema caching and Kafka's error messages.

use std::sync::Arc;

use headwater_api::logical::{date, decimal, timestamp};
use headwater_api::{
    OffsetMap, Predicate, Schema, SchemaBuilder, SchemaRef, SourceRecord, Struct, Transform, Value,
};

use super::*;
use crate::util::Target;

pub(crate) use headwater_api::properties as props;

pub(crate) fn record(topic: &str, schema: Option<SchemaRef>, value: Value) -> SourceRecord {
    SourceRecord::new(
        OffsetMap::new(),
        OffsetMap::new(),
        topic,
        None,
        Value::Null,
        schema,
        value,
    )
}

fn row_schema() -> SchemaRef {
    SchemaBuilder::struct_()
        .name("cdc.public.orders.Value")
        .field("id", Schema::int32())
        .field("email", Schema::optional_string())
        .field(
            "status",
            SchemaBuilder::string()
                .optional()
                .default_value("new".into())
                .build_ref(),
        )
        .field("amount", decimal::builder(2).optional().build_ref())
        .build_ref()
}

fn row(id: i32, email: Option<&str>) -> Value {
    let mut s = Struct::new(row_schema()).unwrap();
    s.put("id", id).unwrap();
    s.put("email", email.map(str::to_owned)).unwrap();
    s.put("amount", decimal::unscaled_from_i128(1999)).unwrap();
    Value::Struct(s)
}

fn map(pairs: &[(&str, Value)]) -> Value {
    Value::Map(
        pairs
            .iter()
            .map(|(k, v)| (Value::from(*k), v.clone()))
            .collect(),
    )
}

fn apply<T: Transform<SourceRecord>>(t: &T, r: SourceRecord) -> SourceRecord {
    t.apply(r).unwrap().expect("record kept")
}

fn field<'a>(v: &'a Value, name: &str) -> &'a Value {
    match v {
        Value::Struct(s) => s.get(name).unwrap_or_else(|| panic!("no field {name}")),
        Value::Map(m) => crate::util::map_get(m, name).unwrap_or_else(|| panic!("no key {name}")),
        other => panic!("not a struct/map: {other:?}"),
    }
}

#[test]
fn regex_router_seed_config_and_non_matching_topics() {
    let t = RegexRouter::configure(&props(&[
        ("regex", r"cdc\.public\.(.*)"),
        ("replacement", "warehouse.$1"),
    ]))
    .unwrap();
    assert_eq!(
        apply(&t, record("cdc.public.orders", None, Value::Null)).topic,
        "warehouse.orders"
    );
    assert_eq!(
        apply(&t, record("cdc.transaction", None, Value::Null)).topic,
        "cdc.transaction"
    );
    let bad =
        RegexRouter::configure(&props(&[("regex", "(oops"), ("replacement", "x")])).unwrap_err();
    let msg = &bad.errors_by_field()["regex"][0];
    assert!(
        msg.starts_with("Invalid value (oops for configuration regex: Invalid regex:"),
        "{msg}"
    );
    // A bad replacement fails matching records at apply time, as in Java.
    let t = RegexRouter::configure(&props(&[("regex", "(a)"), ("replacement", "$2")])).unwrap();
    assert_eq!(
        t.apply(record("a", None, Value::Null))
            .unwrap_err()
            .message(),
        "No group 2"
    );
    assert_eq!(apply(&t, record("b", None, Value::Null)).topic, "b");
}

#[test]
fn timestamp_router_formats_in_utc() {
    let t = TimestampRouter::configure(&props(&[])).unwrap();
    let mut r = record("orders", None, Value::Null);
    r.timestamp = Some(1_709_211_909_007);
    assert_eq!(apply(&t, r).topic, "orders-20240229");
    let t = TimestampRouter::configure(&props(&[
        ("topic.format", "${timestamp}_${topic}"),
        ("timestamp.format", "yyyy-MM"),
    ]))
    .unwrap();
    let mut r = record("orders", None, Value::Null);
    r.timestamp = Some(0);
    assert_eq!(apply(&t, r).topic, "1970-01_orders");
    let err = t.apply(record("orders", None, Value::Null)).unwrap_err();
    assert!(
        err.message().starts_with("Timestamp missing on record"),
        "{err}"
    );
    assert!(TimestampRouter::configure(&props(&[("timestamp.format", "yyyy-qq")])).is_err());
}

#[test]
fn insert_field_with_schema_schemaless_and_tombstone() {
    let t = InsertField::configure(
        Target::Value,
        &props(&[
            ("topic.field", "__topic!"),
            ("timestamp.field", "ts"),
            ("static.field", "origin"),
            ("static.value", "pg"),
        ]),
    )
    .unwrap();
    let mut r = record("t", Some(row_schema()), row(1, None));
    r.timestamp = Some(42);
    let out = apply(&t, r);
    let s = out.value_schema.clone().unwrap();
    assert_eq!(s.name(), Some("cdc.public.orders.Value"));
    assert!(!s.field("__topic").unwrap().schema().is_optional());
    assert_eq!(
        s.field("ts").unwrap().schema().name(),
        Some(timestamp::LOGICAL_NAME)
    );
    assert_eq!(field(&out.value, "__topic"), &Value::from("t"));
    assert_eq!(field(&out.value, "ts"), &Value::Int64(42));
    assert_eq!(field(&out.value, "origin"), &Value::from("pg"));
    // replace.null.with.default=true copies the default for a null status.
    assert_eq!(field(&out.value, "status"), &Value::from("new"));
    assert!(
        apply(&t, record("t", Some(row_schema()), Value::Null))
            .value
            .is_null(),
        "null values pass through"
    );
    // Same input schema object -> same output schema object (cached).
    let schema = row_schema();
    let a = apply(&t, record("t", Some(schema.clone()), value_with(&schema)));
    let b = apply(&t, record("t", Some(schema.clone()), value_with(&schema)));
    assert!(Arc::ptr_eq(
        a.value_schema.as_ref().unwrap(),
        b.value_schema.as_ref().unwrap()
    ));
    // Schemaless.
    let out = apply(&t, record("t", None, map(&[("id", Value::Int32(1))])));
    assert_eq!(field(&out.value, "__topic"), &Value::from("t"));
    assert_eq!(field(&out.value, "origin"), &Value::from("pg"));
    let err = t.apply(record("t", None, Value::from("x"))).unwrap_err();
    assert_eq!(err.message(), "Only Map objects supported in absence of schema for [field insertion], found: java.lang.String");
    // Key variant.
    let k = InsertField::configure(
        Target::Key,
        &props(&[("static.field", "k"), ("static.value", "v")]),
    )
    .unwrap();
    let mut r = record("t", None, Value::Null);
    r.key = map(&[]);
    assert_eq!(field(&apply(&k, r).key, "k"), &Value::from("v"));
    // Configuration errors.
    let e = InsertField::configure(Target::Value, &props(&[])).unwrap_err();
    assert_eq!(
        e.errors_by_field()["type"],
        ["No field insertion configured"]
    );
    let e = InsertField::configure(Target::Value, &props(&[("static.field", "x")])).unwrap_err();
    assert!(
        e.errors_by_field()["static.value"][0].contains("No value specified for static field: x")
    );
}

fn value_with(schema: &SchemaRef) -> Value {
    let mut s = Struct::new(schema.clone()).unwrap();
    s.put("id", 7).unwrap();
    Value::Struct(s)
}

#[test]
fn replace_field_include_exclude_renames_and_legacy_names() {
    let t = ReplaceField::configure(
        Target::Value,
        &props(&[("exclude", "amount"), ("renames", "id:order_id,email:mail")]),
    )
    .unwrap();
    let out = apply(&t, record("t", Some(row_schema()), row(3, Some("a@b"))));
    let names: Vec<&str> = out
        .value_schema
        .as_ref()
        .unwrap()
        .fields()
        .iter()
        .map(|f| f.name())
        .collect();
    assert_eq!(names, ["order_id", "mail", "status"]);
    assert_eq!(field(&out.value, "order_id"), &Value::Int32(3));
    assert_eq!(field(&out.value, "mail"), &Value::from("a@b"));
    let t = ReplaceField::configure(
        Target::Value,
        &props(&[("include", "id,amount"), ("exclude", "amount")]),
    )
    .unwrap();
    let out = apply(
        &t,
        record(
            "t",
            None,
            map(&[
                ("id", Value::Int32(1)),
                ("amount", Value::Int32(2)),
                ("x", Value::Null),
            ]),
        ),
    );
    assert_eq!(out.value, map(&[("id", Value::Int32(1))]));
    // Kafka 3.x names still work.
    let t = ReplaceField::configure(Target::Value, &props(&[("blacklist", "x")])).unwrap();
    let out = apply(
        &t,
        record(
            "t",
            None,
            map(&[("id", Value::Int32(1)), ("x", Value::Null)]),
        ),
    );
    assert_eq!(out.value, map(&[("id", Value::Int32(1))]));
    let e = ReplaceField::configure(Target::Value, &props(&[("renames", "a:b:c")])).unwrap_err();
    assert_eq!(
        e.errors_by_field()["renames"],
        ["Invalid value a:b:c for configuration renames: Invalid rename mapping: a:b:c"]
    );
    // Tombstones pass.
    assert!(apply(&t, record("t", None, Value::Null)).value.is_null());
}

#[test]
fn mask_field_types_replacement_and_errors() {
    let t = MaskField::configure(Target::Value, &props(&[("fields", "id,email,amount")])).unwrap();
    let out = apply(&t, record("t", Some(row_schema()), row(5, Some("a@b"))));
    assert_eq!(field(&out.value, "id"), &Value::Int32(0));
    assert_eq!(field(&out.value, "email"), &Value::from(""));
    assert_eq!(field(&out.value, "amount"), &Value::Bytes(vec![0]));
    let t = MaskField::configure(
        Target::Value,
        &props(&[("fields", "id,email"), ("replacement", "9")]),
    )
    .unwrap();
    let out = apply(&t, record("t", Some(row_schema()), row(5, Some("a@b"))));
    assert_eq!(field(&out.value, "id"), &Value::Int32(9));
    assert_eq!(field(&out.value, "email"), &Value::from("9"));
    let out = apply(
        &t,
        record(
            "t",
            None,
            map(&[("id", Value::Int64(4)), ("email", Value::Null)]),
        ),
    );
    assert_eq!(field(&out.value, "id"), &Value::Int64(9));
    assert_eq!(field(&out.value, "email"), &Value::Null);
    let t = MaskField::configure(Target::Value, &props(&[("fields", "b")])).unwrap();
    let err = t
        .apply(record("t", None, map(&[("b", Value::Bytes(vec![1]))])))
        .unwrap_err();
    assert_eq!(err.message(), "Cannot mask value of type: class [B");
    let e = MaskField::configure(Target::Value, &props(&[("fields", "")])).unwrap_err();
    assert_eq!(
        e.errors_by_field()["fields"],
        ["Invalid value  for configuration fields: Empty list"]
    );
    // Tombstone (deliberate difference: passes instead of failing).
    assert!(apply(&t, record("t", None, Value::Null)).value.is_null());
}

#[test]
fn value_to_key_and_extract_and_hoist() {
    let t = ValueToKey::configure(&props(&[("fields", "id")])).unwrap();
    let out = apply(&t, record("t", Some(row_schema()), row(8, None)));
    assert_eq!(field(&out.key, "id"), &Value::Int32(8));
    let err = ValueToKey::configure(&props(&[("fields", "nope")]))
        .unwrap()
        .apply(record("t", Some(row_schema()), row(8, None)))
        .unwrap_err();
    assert_eq!(err.message(), "Field does not exist: nope");
    let out = apply(&t, record("t", None, map(&[("id", Value::Int32(2))])));
    assert_eq!(out.key, map(&[("id", Value::Int32(2))]));

    let x = ExtractField::configure(Target::Key, &props(&[("field", "id")])).unwrap();
    let mut r = out;
    assert_eq!(apply(&x, r.clone()).key, Value::Int32(2));
    r.key = Value::Null;
    assert!(apply(&x, r).key.is_null());
    let x = ExtractField::configure(Target::Value, &props(&[("field", "email")])).unwrap();
    let out = apply(&x, record("t", Some(row_schema()), row(1, Some("e"))));
    assert_eq!(out.value, Value::from("e"));
    assert!(out.value_schema.unwrap().is_optional());
    let err = ExtractField::configure(Target::Value, &props(&[("field", "x")]))
        .unwrap()
        .apply(record("t", Some(row_schema()), row(1, None)))
        .unwrap_err();
    assert_eq!(err.message(), "Unknown field: x");
    // V2 nested paths.
    let v2 = ExtractField::configure(
        Target::Value,
        &props(&[("field", "a.`b.c`"), ("field.syntax.version", "v2")]),
    )
    .unwrap();
    let nested = map(&[("a", map(&[("b.c", Value::Int32(3))]))]);
    assert_eq!(apply(&v2, record("t", None, nested)).value, Value::Int32(3));
    assert_eq!(
        FieldPath::v2("a.b").unwrap(),
        FieldPath::v2("a.`b`").unwrap()
    );

    let h = HoistField::configure(Target::Value, &props(&[("field", "line")])).unwrap();
    let out = apply(&h, record("t", Some(Schema::string()), Value::from("x")));
    assert_eq!(field(&out.value, "line"), &Value::from("x"));
    let out = apply(&h, record("t", None, Value::Int32(1)));
    assert_eq!(out.value, map(&[("line", Value::Int32(1))]));
}

#[test]
fn cast_fields_whole_values_and_errors() {
    let t = Cast::configure(
        Target::Value,
        &props(&[("spec", "id:string,amount:float64,email:boolean")]),
    )
    .unwrap();
    let out = apply(&t, record("t", Some(row_schema()), row(12, Some("TRUE"))));
    assert_eq!(field(&out.value, "id"), &Value::from("12"));
    assert_eq!(field(&out.value, "amount"), &Value::Float64(19.99));
    assert_eq!(field(&out.value, "email"), &Value::Boolean(true));
    assert!(out
        .value_schema
        .unwrap()
        .field("email")
        .unwrap()
        .schema()
        .is_optional());
    let t = Cast::configure(Target::Value, &props(&[("spec", "int8")])).unwrap();
    assert_eq!(
        apply(&t, record("t", Some(Schema::int32()), Value::Int32(300))).value,
        Value::Int8(44)
    );
    assert_eq!(
        apply(&t, record("t", None, Value::Float64(300.7))).value,
        Value::Int8(44)
    );
    let t = Cast::configure(Target::Value, &props(&[("spec", "string")])).unwrap();
    assert_eq!(
        apply(&t, record("t", None, Value::Bytes(b"hi".to_vec()))).value,
        Value::from("aGk=")
    );
    assert_eq!(
        apply(&t, record("t", None, Value::Float64(1.0))).value,
        Value::from("1.0")
    );
    assert_eq!(
        apply(&t, record("t", None, Value::Float64(1e10))).value,
        Value::from("1.0E10")
    );
    let d = date::builder().build_ref();
    assert_eq!(
        apply(&t, record("t", Some(d), Value::Int32(19_782))).value,
        Value::from("2024-02-29")
    );
    let err = Cast::configure(Target::Value, &props(&[("spec", "int32")]))
        .unwrap()
        .apply(record("t", None, Value::from("abc")))
        .unwrap_err();
    assert_eq!(
        err.message(),
        "Value (abc) was out of range for requested data type"
    );
    let e = Cast::configure(Target::Value, &props(&[("spec", "a:bytes")])).unwrap_err();
    assert!(e.errors_by_field()["spec"][0]
        .contains("Cast transformation does not support casting to BYTES"));
    let e = Cast::configure(Target::Value, &props(&[("spec", "int8,a:int16")])).unwrap_err();
    assert!(e.errors_by_field()["spec"][0].contains("may only specify a single cast"));
    let e = Cast::configure(Target::Value, &props(&[("spec", "a:float")])).unwrap_err();
    assert!(e.errors_by_field()["spec"][0].contains("Invalid type found in casting spec: float"));
    let err = Cast::configure(Target::Value, &props(&[("spec", "m:int8")]))
        .unwrap()
        .apply(record("t", None, map(&[("m", map(&[]))])))
        .unwrap_err();
    assert!(
        err.message().contains("does not support casting from MAP"),
        "{err}"
    );
}

#[test]
fn timestamp_converter_between_types() {
    let ts_schema = SchemaBuilder::struct_()
        .field("at", timestamp::builder().build_ref())
        .field("n", Schema::int32())
        .build_ref();
    let mut s = Struct::new(ts_schema.clone()).unwrap();
    s.put("at", 1_709_211_909_007i64).unwrap();
    s.put("n", 1).unwrap();
    let t = TimestampConverter::configure(
        Target::Value,
        &props(&[
            ("field", "at"),
            ("target.type", "string"),
            ("format", "yyyy-MM-dd HH:mm"),
        ]),
    )
    .unwrap();
    let out = apply(
        &t,
        record("t", Some(ts_schema.clone()), Value::Struct(s.clone())),
    );
    assert_eq!(field(&out.value, "at"), &Value::from("2024-02-29 13:05"));
    let t = TimestampConverter::configure(
        Target::Value,
        &props(&[("field", "at"), ("target.type", "Date")]),
    )
    .unwrap();
    let out = apply(
        &t,
        record("t", Some(ts_schema.clone()), Value::Struct(s.clone())),
    );
    assert_eq!(field(&out.value, "at"), &Value::Int32(19_782));
    assert_eq!(
        out.value_schema
            .unwrap()
            .field("at")
            .unwrap()
            .schema()
            .name(),
        Some(date::LOGICAL_NAME)
    );
    // unix.precision applies to unix input as well as unix output.
    let t = TimestampConverter::configure(
        Target::Value,
        &props(&[
            ("target.type", "string"),
            ("format", "yyyy-MM-dd"),
            ("unix.precision", "seconds"),
        ]),
    )
    .unwrap();
    let out = apply(&t, record("t", None, Value::Int64(1_709_211_909)));
    assert_eq!(out.value, Value::from("2024-02-29"));
    let t = TimestampConverter::configure(
        Target::Value,
        &props(&[
            ("field", "s"),
            ("target.type", "unix"),
            ("format", "yyyy-MM-dd"),
        ]),
    )
    .unwrap();
    let out = apply(
        &t,
        record("t", None, map(&[("s", Value::from("1970-01-02"))])),
    );
    assert_eq!(field(&out.value, "s"), &Value::Int64(86_400_000));
    let err = t
        .apply(record("t", None, map(&[("s", Value::from("nope"))])))
        .unwrap_err();
    assert_eq!(
        err.message(),
        "Could not parse timestamp: value (nope) does not match pattern (yyyy-MM-dd)"
    );
    let e = TimestampConverter::configure(Target::Value, &props(&[("target.type", "string")]))
        .unwrap_err();
    assert!(e.errors_by_field()["format"][0].contains("requires format option"));
    let e = TimestampConverter::configure(Target::Value, &props(&[("target.type", "date")]))
        .unwrap_err();
    assert!(e.errors_by_field()["target.type"][0]
        .contains("String must be one of: string, unix, Date, Time, Timestamp"));
    let t = TimestampConverter::configure(Target::Value, &props(&[("target.type", "Timestamp")]))
        .unwrap();
    assert!(t
        .apply(record("t", None, Value::Int64(1)))
        .unwrap_err()
        .message()
        .contains("without a schema"));
}

#[test]
fn flatten_struct_and_map() {
    let inner = SchemaBuilder::struct_()
        .optional()
        .field("x", Schema::int32())
        .field("tags", SchemaBuilder::array(Schema::string()).build_ref())
        .build_ref();
    let outer = SchemaBuilder::struct_()
        .name("N")
        .field("id", Schema::int32())
        .field("in", inner.clone())
        .build_ref();
    let mut i = Struct::new(inner).unwrap();
    i.put("x", 2).unwrap();
    i.put("tags", Value::Array(vec!["a".into()])).unwrap();
    let mut o = Struct::new(outer.clone()).unwrap();
    o.put("id", 1).unwrap();
    o.put("in", i).unwrap();
    let t = Flatten::configure(Target::Value, &props(&[("delimiter", "_")])).unwrap();
    let out = apply(&t, record("t", Some(outer.clone()), Value::Struct(o)));
    let s = out.value_schema.unwrap();
    assert_eq!(s.name(), Some("N"));
    let names: Vec<&str> = s.fields().iter().map(|f| f.name()).collect();
    assert_eq!(names, ["id", "in_x", "in_tags"]);
    assert!(
        s.field("in_x").unwrap().schema().is_optional(),
        "optional because the parent is"
    );
    assert_eq!(field(&out.value, "in_x"), &Value::Int32(2));
    let out = apply(
        &t,
        record(
            "t",
            None,
            map(&[("a", map(&[("b", Value::Int32(1))])), ("c", Value::Null)]),
        ),
    );
    assert_eq!(
        out.value,
        map(&[("a_b", Value::Int32(1)), ("c", Value::Null)])
    );
    let with_map = SchemaBuilder::struct_()
        .field(
            "m",
            SchemaBuilder::map(Schema::string(), Schema::string()).build_ref(),
        )
        .build_ref();
    let v = Struct::new(with_map.clone())
        .unwrap()
        .with("m", Value::Map(vec![]));
    let err = t
        .apply(record("t", Some(with_map), Value::Struct(v)))
        .unwrap_err();
    assert_eq!(
        err.message(),
        "Flatten transformation does not support MAP for record with schemas (for field m)."
    );
}

#[test]
fn headers_transforms_and_filter() {
    let t = HeaderFrom::configure(
        Target::Value,
        &props(&[
            ("fields", "id"),
            ("headers", "row_id"),
            ("operation", "move"),
        ]),
    )
    .unwrap();
    let out = apply(&t, record("t", Some(row_schema()), row(4, None)));
    assert_eq!(
        out.headers.last_with_name("row_id").unwrap().value,
        Value::Int32(4)
    );
    assert!(out.value_schema.unwrap().field("id").is_none());
    let t = HeaderFrom::configure(
        Target::Value,
        &props(&[("fields", "id"), ("headers", "h"), ("operation", "copy")]),
    )
    .unwrap();
    let out = apply(&t, record("t", None, map(&[("id", Value::Int32(1))])));
    assert_eq!(out.value, map(&[("id", Value::Int32(1))]));
    assert_eq!(out.headers.len(), 1);
    let e = HeaderFrom::configure(
        Target::Value,
        &props(&[("fields", "a,b"), ("headers", "h"), ("operation", "copy")]),
    )
    .unwrap_err();
    assert_eq!(
        e.errors_by_field()["headers"],
        ["'fields' config must have the same number of elements as 'headers' config."]
    );

    let ins = InsertHeader::configure(&props(&[("header", "n"), ("value.literal", "42")])).unwrap();
    let out = apply(&ins, record("t", None, Value::Null));
    let h = out.headers.last_with_name("n").unwrap();
    assert_eq!(
        (h.value.clone(), h.schema.as_ref().unwrap().schema_type()),
        (Value::Int8(42), headwater_api::SchemaType::Int8)
    );
    assert_eq!(headers::parse_literal("true").1, Value::Boolean(true));
    assert_eq!(headers::parse_literal("70000").1, Value::Int32(70000));
    assert_eq!(headers::parse_literal("1.5").1, Value::Float32(1.5));
    assert_eq!(
        headers::parse_literal("hello world").1,
        Value::from("hello world")
    );

    let drop = DropHeaders::configure(&props(&[("headers", "n,x")])).unwrap();
    assert!(apply(&drop, out).headers.is_empty());
    assert!(Filter::configure(&props(&[]))
        .unwrap()
        .apply(record("t", None, Value::Null))
        .unwrap()
        .is_none());
}

#[test]
fn set_schema_metadata_renames_and_versions() {
    let t = SetSchemaMetadata::configure(
        Target::Value,
        &props(&[("schema.name", "x.Y"), ("schema.version", "3")]),
    )
    .unwrap();
    let out = apply(&t, record("t", Some(row_schema()), row(1, None)));
    let s = out.value_schema.clone().unwrap();
    assert_eq!((s.name(), s.version()), (Some("x.Y"), Some(3)));
    assert!(Arc::ptr_eq(out.value.as_struct().unwrap().schema(), &s));
    let err = t.apply(record("t", None, Value::Int32(1))).unwrap_err();
    assert_eq!(
        err.message(),
        "Schema required for [updating schema metadata]"
    );
    assert!(apply(&t, record("t", None, Value::Null)).value.is_null());
    let e = SetSchemaMetadata::configure(Target::Key, &props(&[])).unwrap_err();
    assert_eq!(
        e.errors_by_field()["type"],
        ["Neither schema name nor version configured"]
    );
}

#[test]
fn predicates() {
    let p = TopicNameMatches::configure(&props(&[("pattern", "cdc\\..*")])).unwrap();
    assert!(Predicate::<SourceRecord>::test(
        &p,
        &record("cdc.x", None, Value::Null)
    ));
    assert!(!Predicate::<SourceRecord>::test(
        &p,
        &record("xcdc.x", None, Value::Null)
    ));
    assert!(!Predicate::<SourceRecord>::test(
        &p,
        &record("CDC.x", None, Value::Null)
    ));
    let e = TopicNameMatches::configure(&props(&[("pattern", "")])).unwrap_err();
    assert!(e.errors_by_field()["pattern"][0].contains("String must be non-empty"));
    let h = HasHeaderKey::configure(&props(&[("name", "h")])).unwrap();
    let mut r = record("t", None, Value::Null);
    assert!(!Predicate::<SourceRecord>::test(&h, &r));
    r.headers.add("h", None, Value::Null);
    assert!(Predicate::<SourceRecord>::test(&h, &r));
    let tomb = RecordIsTombstone;
    assert!(Predicate::<SourceRecord>::test(&tomb, &r));
    // A null value with a schema is still a "tombstone" for this predicate (value == null).
    r.value_schema = Some(Schema::optional_string());
    assert!(Predicate::<SourceRecord>::test(&tomb, &r));
    r.value = Value::from("x");
    assert!(!Predicate::<SourceRecord>::test(&tomb, &r));
}
