//! Round trips of every Connect type through the Avro converter, with the schemas and data
//! checked by an independent Avro implementation (the `apache-avro` crate).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use headwater_api::logical::{date, debezium, decimal, time, timestamp};
use headwater_api::{Schema, SchemaBuilder, SchemaRef, Struct, Value};

use super::registry::{RegisteredSchema, RegistryError, SchemaRegistry};
use super::*;
use crate::converters::Converter;

/// A registry kept in memory: ids shared across subjects, versions per subject, no
/// compatibility rules (those are the embedded registry's, tested in its crate).
/// (schema texts by id - 1, subject -> ids of its versions).
type MemoryState = (Vec<String>, HashMap<String, Vec<i32>>);

#[derive(Default)]
struct MemoryRegistry {
    state: Mutex<MemoryState>,
}

impl SchemaRegistry for MemoryRegistry {
    fn register(
        &self,
        subject: &str,
        schema: &str,
        _normalize: bool,
    ) -> Result<i32, RegistryError> {
        let mut st = self.state.lock().unwrap();
        let id = match st.0.iter().position(|s| s == schema) {
            Some(i) => i as i32 + 1,
            None => {
                st.0.push(schema.to_owned());
                st.0.len() as i32
            }
        };
        let versions = st.1.entry(subject.to_owned()).or_default();
        if !versions.contains(&id) {
            versions.push(id);
        }
        Ok(id)
    }
    fn lookup(
        &self,
        subject: &str,
        schema: &str,
        _n: bool,
    ) -> Result<RegisteredSchema, RegistryError> {
        let st = self.state.lock().unwrap();
        let versions =
            st.1.get(subject)
                .ok_or_else(|| RegistryError::new(404, 40401, "Subject not found."))?;
        for (v, id) in versions.iter().enumerate() {
            if st.0[*id as usize - 1] == schema {
                return Ok(RegisteredSchema {
                    subject: subject.into(),
                    version: v as i32 + 1,
                    id: *id,
                    schema: schema.into(),
                });
            }
        }
        Err(RegistryError::new(404, 40403, "Schema not found"))
    }
    fn latest(&self, subject: &str) -> Result<RegisteredSchema, RegistryError> {
        let st = self.state.lock().unwrap();
        let versions =
            st.1.get(subject)
                .ok_or_else(|| RegistryError::new(404, 40401, "Subject not found."))?;
        let id = *versions.last().unwrap();
        Ok(RegisteredSchema {
            subject: subject.into(),
            version: versions.len() as i32,
            id,
            schema: st.0[id as usize - 1].clone(),
        })
    }
    fn schema_by_id(&self, id: i32) -> Result<String, RegistryError> {
        let st = self.state.lock().unwrap();
        st.0.get(id as usize - 1)
            .cloned()
            .ok_or_else(|| RegistryError::new(404, 40403, "Schema not found"))
    }
}

fn config(is_key: bool) -> AvroConverterConfig {
    let mut props = Properties::new();
    props.insert(
        "converter.type".into(),
        if is_key { "key" } else { "value" }.into(),
    );
    props.insert(
        "schema.registry.url".into(),
        "http://unused.invalid:1".into(),
    );
    AvroConverterConfig::from_props(&props).unwrap()
}

fn converter() -> (AvroConverter, Arc<MemoryRegistry>) {
    let reg = Arc::new(MemoryRegistry::default());
    (
        AvroConverter::with_registry(config(false), reg.clone()),
        reg,
    )
}

/// A struct schema with a field of every Connect type and logical type.
fn every_type_schema() -> SchemaRef {
    let nested = SchemaBuilder::struct_()
        .name("test.Nested")
        .field("a", Schema::int32())
        .field("b", Schema::optional_string())
        .build_ref();
    let unnamed = SchemaBuilder::struct_()
        .field("x", Schema::int64())
        .build_ref();
    SchemaBuilder::struct_()
        .name("test.server.public.every.Value")
        .version(3)
        .doc("every type")
        .field("i8", Schema::int8())
        .field("i16", Schema::int16())
        .field("i32", Schema::int32())
        .field("i64", Schema::int64())
        .field("f32", Schema::float32())
        .field("f64", Schema::float64())
        .field("flag", Schema::boolean())
        .field("text", Schema::string())
        .field("blob", Schema::bytes())
        .field("opt_text", Schema::optional_string())
        .field("opt_i64", Schema::optional_int64())
        .field(
            "dec",
            decimal::builder(2)
                .parameter(decimal::PRECISION_PARAMETER, "10")
                .build_ref(),
        )
        .field("dec_noprec", decimal::builder(0).optional().build_ref())
        .field("day", date::builder().build_ref())
        .field("tod", time::builder().optional().build_ref())
        .field("ts", timestamp::builder().build_ref())
        .field(
            "micros",
            debezium::builder(debezium::MICRO_TIMESTAMP, headwater_api::SchemaType::Int64)
                .build_ref(),
        )
        .field(
            "json",
            debezium::builder(debezium::JSON, headwater_api::SchemaType::String)
                .optional()
                .build_ref(),
        )
        .field(
            "state",
            debezium::enum_builder(&["true", "last", "false"])
                .optional()
                .default_value(Value::from("false"))
                .build_ref(),
        )
        .field(
            "with_default",
            SchemaBuilder::int32()
                .default_value(Value::Int32(7))
                .build_ref(),
        )
        .field(
            "ints",
            SchemaBuilder::array(Schema::optional_int32()).build_ref(),
        )
        .field(
            "tags",
            SchemaBuilder::map(Schema::string(), Schema::int64())
                .optional()
                .build_ref(),
        )
        .field(
            "by_id",
            SchemaBuilder::map(Schema::int32(), Schema::string()).build_ref(),
        )
        .field("nested", nested.clone())
        .field(
            "nested_again",
            Arc::new(nested.to_builder().optional().build()),
        )
        .field("anon", unnamed)
        .build_ref()
}

fn every_type_value(schema: &SchemaRef) -> Value {
    let f = |n: &str| schema.field(n).unwrap().schema().clone();
    let nested = Struct::new(f("nested"))
        .unwrap()
        .with("a", 5)
        .with("b", "bee");
    let anon = Struct::new(f("anon")).unwrap().with("x", Value::Int64(-9));
    Value::Struct(
        Struct::new(schema.clone())
            .unwrap()
            .with("i8", Value::Int8(-8))
            .with("i16", Value::Int16(-1600))
            .with("i32", Value::Int32(i32::MIN))
            .with("i64", Value::Int64(i64::MAX))
            .with("f32", Value::Float32(1.5))
            .with("f64", Value::Float64(-2.25e300))
            .with("flag", Value::Boolean(true))
            .with("text", "héllo ✓")
            .with("blob", Value::Bytes(vec![0, 1, 255]))
            .with("opt_text", Value::Null)
            .with("opt_i64", Value::Int64(42))
            .with("dec", Value::Bytes(decimal::unscaled_from_i128(-12345)))
            .with(
                "dec_noprec",
                Value::Bytes(decimal::unscaled_from_i128(10_i128.pow(30))),
            )
            .with("day", Value::Int32(19_000))
            .with("tod", Value::Int32(3_600_000))
            .with("ts", Value::Int64(1_700_000_000_123))
            .with("micros", Value::Int64(1_700_000_000_123_456))
            .with("json", "{\"k\":1}")
            .with("state", "last")
            .with("with_default", Value::Int32(8))
            .with(
                "ints",
                Value::Array(vec![Value::Int32(1), Value::Null, Value::Int32(-3)]),
            )
            .with(
                "tags",
                Value::Map(vec![
                    (Value::from("a"), Value::Int64(1)),
                    (Value::from("b"), Value::Int64(2)),
                ]),
            )
            .with(
                "by_id",
                Value::Map(vec![(Value::Int32(1), Value::from("one"))]),
            )
            .with("nested", Value::Struct(nested.clone()))
            .with("nested_again", Value::Null)
            .with("anon", Value::Struct(anon)),
    )
}

#[test]
fn every_connect_type_round_trips_and_apache_avro_reads_it() {
    let (c, reg) = converter();
    let schema = every_type_schema();
    let value = every_type_value(&schema);
    let mut out = Vec::new();
    assert!(c
        .write_connect_data("db.every", Some(&schema), &value, &mut out)
        .unwrap());
    assert_eq!(out[0], MAGIC_BYTE);
    let id = i32::from_be_bytes(out[1..5].try_into().unwrap());
    assert_eq!(reg.latest("db.every-value").unwrap().id, id);

    // Back through the converter: the same values and the same (named) schema.
    let back = c.to_connect_data("t", Some(&out)).unwrap();
    let back_schema = back.schema.unwrap();
    assert_eq!(back.value, value);
    for (a, b) in schema.fields().iter().zip(back_schema.fields()) {
        if a.name() == "anon" {
            // An unnamed struct comes back unnamed, its record name being AvroData's own.
            assert_eq!(b.schema().name(), None);
            continue;
        }
        assert_eq!(a, b, "field {}", a.name());
    }
    assert_eq!(back_schema.name(), schema.name());
    assert_eq!(back_schema.version(), Some(3));
    assert_eq!(back_schema.doc(), Some("every type"));

    // The schema is valid Avro and an independent decoder reads the datum.
    let text = reg.schema_by_id(id).unwrap();
    let parsed = apache_avro::Schema::parse_str(&text).unwrap();
    let datum = apache_avro::from_avro_datum(&parsed, &mut &out[5..], None).unwrap();
    let apache_avro::types::Value::Record(fields) = datum else {
        panic!("{datum:?}")
    };
    let get = |n: &str| {
        fields
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    use apache_avro::types::Value as A;
    assert_eq!(get("i8"), A::Int(-8));
    assert_eq!(get("i64"), A::Long(i64::MAX));
    assert_eq!(get("text"), A::String("héllo ✓".into()));
    assert_eq!(get("opt_text"), A::Union(0, Box::new(A::Null)));
    assert_eq!(get("day"), A::Date(19_000));
    assert_eq!(get("ts"), A::TimestampMillis(1_700_000_000_123));
    assert_eq!(
        get("state"),
        A::Union(0, Box::new(A::String("last".into())))
    );
    match get("dec") {
        A::Decimal(d) => assert_eq!(
            <Vec<u8>>::try_from(d).unwrap(),
            decimal::unscaled_from_i128(-12345)
        ),
        other => panic!("{other:?}"),
    }
    match get("by_id") {
        A::Array(entries) => assert_eq!(entries.len(), 1),
        other => panic!("{other:?}"),
    }
}

#[test]
fn schema_json_matches_avro_data_conventions() {
    let schema = every_type_schema();
    let avro = schema::to_avro(&schema, MappingOptions::default()).unwrap();
    let json: serde_json::Value = serde_json::from_str(&avro.json).unwrap();
    assert_eq!(json["type"], "record");
    assert_eq!(json["name"], "Value");
    assert_eq!(json["namespace"], "test.server.public.every");
    assert_eq!(json["connect.version"], 3);
    assert_eq!(json["connect.name"], "test.server.public.every.Value");
    let field = |n: &str| {
        json["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == n)
            .unwrap()
            .clone()
    };
    assert_eq!(
        field("i8")["type"],
        serde_json::json!({"type": "int", "connect.type": "int8"})
    );
    assert_eq!(
        field("opt_text")["type"],
        serde_json::json!(["null", "string"])
    );
    assert_eq!(field("opt_text")["default"], serde_json::Value::Null);
    assert_eq!(
        field("dec")["type"],
        serde_json::json!({"type": "bytes", "scale": 2, "precision": 10, "connect.version": 1,
            "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
            "connect.name": "org.apache.kafka.connect.data.Decimal", "logicalType": "decimal"})
    );
    assert_eq!(field("dec_noprec")["type"][1]["precision"], 64);
    assert_eq!(
        field("day")["type"],
        serde_json::json!({"type": "int", "connect.version": 1, "connect.name": "org.apache.kafka.connect.data.Date", "logicalType": "date"})
    );
    // A non-null default: null goes second in the union, and connect.default is kept.
    assert_eq!(field("state")["type"][1], "null");
    assert_eq!(field("state")["type"][0]["connect.default"], "false");
    assert_eq!(field("state")["default"], "false");
    assert_eq!(field("with_default")["default"], 7);
    // The second use of a named record is a reference.
    assert_eq!(
        field("nested_again")["type"],
        serde_json::json!(["null", "test.Nested"])
    );
    assert_eq!(field("anon")["type"]["name"], "ConnectDefault");
    assert_eq!(
        field("anon")["type"]["namespace"],
        "io.confluent.connect.avro"
    );
    assert_eq!(field("by_id")["type"]["items"]["name"], "MapEntry");
    assert_eq!(field("tags")["type"][1]["type"], "map");
}

#[test]
fn defaults_fill_nulls_and_keys_use_key_subjects() {
    let reg = Arc::new(MemoryRegistry::default());
    let key_conv = AvroConverter::with_registry(config(true), reg.clone());
    let key_schema = SchemaBuilder::struct_()
        .name("srv.public.t.Key")
        .field("id", Schema::int32())
        .build_ref();
    let key = Value::Struct(Struct::new(key_schema.clone()).unwrap().with("id", 1));
    let bytes = key_conv
        .from_connect_data("srv.public.t", Some(&key_schema), &key)
        .unwrap()
        .unwrap();
    assert!(reg.latest("srv.public.t-key").is_ok());
    assert_eq!(
        key_conv.to_connect_data("t", Some(&bytes)).unwrap().value,
        key
    );
    // Null is a Kafka null; a missing schema is refused.
    assert_eq!(
        key_conv
            .from_connect_data("t", Some(&key_schema), &Value::Null)
            .unwrap(),
        None
    );
    let err = key_conv
        .from_connect_data("t", None, &Value::Int32(1))
        .unwrap_err();
    assert!(err.message().contains("needs a schema"), "{err}");

    let (c, _) = converter();
    let schema = SchemaBuilder::struct_()
        .name("d.Value")
        .field(
            "n",
            SchemaBuilder::int32()
                .default_value(Value::Int32(7))
                .build_ref(),
        )
        .build_ref();
    let v = Value::Struct(Struct::from_trusted_values(
        schema.clone(),
        vec![Value::Null],
    ));
    let bytes = c
        .from_connect_data("d", Some(&schema), &v)
        .unwrap()
        .unwrap();
    let back = c.to_connect_data("d", Some(&bytes)).unwrap();
    assert_eq!(back.value.as_struct().unwrap().values()[0], Value::Int32(7));
}

#[test]
fn schemas_register_once_and_topics_keep_their_subjects() {
    let (c, reg) = converter();
    let schema = SchemaBuilder::struct_()
        .name("x.Value")
        .field("id", Schema::int32())
        .build_ref();
    let v = Value::Struct(Struct::new(schema.clone()).unwrap().with("id", 1));
    for _ in 0..3 {
        c.from_connect_data("a", Some(&schema), &v).unwrap();
        c.from_connect_data("b", Some(&schema), &v).unwrap();
    }
    // An equal schema in another object finds the cached writer too.
    let copy = Arc::new((*schema).clone());
    c.from_connect_data("a", Some(&copy), &v).unwrap();
    let st = reg.state.lock().unwrap();
    assert_eq!(st.0.len(), 1, "one schema, one id");
    assert_eq!(st.1.len(), 2, "subjects a-value and b-value");
}

#[test]
fn record_name_strategies_name_subjects_after_the_record() {
    let reg = Arc::new(MemoryRegistry::default());
    let mut props = Properties::new();
    props.insert(
        "value.subject.name.strategy".into(),
        "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy".into(),
    );
    props.insert(
        "schema.registry.url".into(),
        "http://unused.invalid:1".into(),
    );
    let c = AvroConverter::with_registry(
        AvroConverterConfig::from_props(&props).unwrap(),
        reg.clone(),
    );
    let schema = SchemaBuilder::struct_()
        .name("ns.Rec")
        .field("id", Schema::int32())
        .build_ref();
    let v = Value::Struct(Struct::new(schema.clone()).unwrap().with("id", 1));
    c.from_connect_data("topic1", Some(&schema), &v).unwrap();
    assert!(reg.latest("topic1-ns.Rec").is_ok());
    props.insert(
        "value.subject.name.strategy".into(),
        "RecordNameStrategy".into(),
    );
    let c = AvroConverter::with_registry(
        AvroConverterConfig::from_props(&props).unwrap(),
        reg.clone(),
    );
    c.from_connect_data("topic1", Some(&schema), &v).unwrap();
    assert!(reg.latest("ns.Rec").is_ok());
}

#[test]
fn invalid_names_fail_clearly_or_are_scrubbed() {
    let schema = SchemaBuilder::struct_()
        .name("my-server.public.t.Value")
        .field("a-b", Schema::int32())
        .build_ref();
    let err = schema::to_avro(&schema, MappingOptions::default()).unwrap_err();
    assert!(err.message().contains("not a valid Avro name"), "{err}");
    assert!(err.message().contains("scrub.invalid.names=true"), "{err}");
    let avro = schema::to_avro(
        &schema,
        MappingOptions {
            scrub_invalid_names: true,
        },
    )
    .unwrap();
    assert!(
        avro.json.contains("\"namespace\":\"my_server.public.t\""),
        "{}",
        avro.json
    );
    assert!(avro.json.contains("\"name\":\"a_b\""), "{}", avro.json);
    apache_avro::Schema::parse_str(&avro.json).unwrap();
}

#[test]
fn bad_config_values_are_rejected_per_key() {
    let mut props = Properties::new();
    props.insert("value.subject.name.strategy".into(), "Nope".into());
    props.insert("connect.meta.data".into(), "false".into());
    props.insert("schema.registry.url".into(), "ftp://x".into());
    props.insert(
        "schema.registry.ssl.truststore.location".into(),
        "/etc/ca.jks".into(),
    );
    let v = AvroConverterConfig::from_props(&props).unwrap_err();
    let names: Vec<&str> = v
        .entries()
        .iter()
        .filter(|e| !e.errors.is_empty())
        .map(|e| e.name.as_str())
        .collect();
    for key in [
        "value.subject.name.strategy",
        "connect.meta.data",
        "schema.registry.url",
        "schema.registry.ssl.truststore.location",
    ] {
        assert!(names.contains(&key), "{key} in {names:?}");
    }
    let mut props = Properties::new();
    props.insert("schema.registry.url".into(), "http://u:p@h:8081".into());
    let c = AvroConverterConfig::from_props(&props).unwrap();
    assert_eq!(c.urls, vec!["http://h:8081".to_owned()]);
    assert_eq!(c.authorization.as_deref(), Some("Basic dTpw"));
}

#[test]
fn malformed_data_is_an_error_not_a_panic() {
    let (c, _) = converter();
    let schema = every_type_schema();
    let value = every_type_value(&schema);
    let bytes = c
        .from_connect_data("t", Some(&schema), &value)
        .unwrap()
        .unwrap();
    for cut in [0, 1, 4, 5, 6, bytes.len() / 2, bytes.len() - 1] {
        assert!(
            c.to_connect_data("t", Some(&bytes[..cut])).is_err(),
            "cut at {cut}"
        );
    }
    let mut bad = bytes.clone();
    bad[0] = 1;
    assert!(c
        .to_connect_data("t", Some(&bad))
        .unwrap_err()
        .message()
        .contains("magic byte"));
    let mut unknown = bytes.clone();
    unknown[1..5].copy_from_slice(&999i32.to_be_bytes());
    assert!(c.to_connect_data("t", Some(&unknown)).is_err());
    let mut trailing = bytes;
    trailing.push(0);
    assert!(c.to_connect_data("t", Some(&trailing)).is_err());
}

#[test]
fn foreign_unions_enums_and_fixed_are_read() {
    let text = r#"{"type":"record","name":"F","namespace":"ext","fields":[
        {"name":"u","type":["null","int","string"]},
        {"name":"e","type":{"type":"enum","name":"Color","symbols":["RED","GREEN"]}},
        {"name":"f","type":{"type":"fixed","name":"Four","size":4}},
        {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}}]}"#;
    let parsed = schema::from_avro(text).unwrap();
    let apache = apache_avro::Schema::parse_str(text).unwrap();
    let mut rec = apache_avro::types::Record::new(&apache).unwrap();
    rec.put(
        "u",
        apache_avro::types::Value::Union(
            2,
            Box::new(apache_avro::types::Value::String("s".into())),
        ),
    );
    rec.put("e", apache_avro::types::Value::Enum(1, "GREEN".into()));
    rec.put("f", apache_avro::types::Value::Fixed(4, vec![1, 2, 3, 4]));
    rec.put("ts", apache_avro::types::Value::TimestampMillis(5));
    let datum = apache_avro::to_avro_datum(&apache, rec).unwrap();
    let v = binary::decode(&parsed.node, &parsed.schema, &datum).unwrap();
    let s = v.as_struct().unwrap();
    let u = s.values()[0].as_struct().unwrap();
    assert_eq!(u.schema().name(), Some(schema::UNION_NAME));
    assert_eq!(u.values(), &[Value::Null, Value::from("s")]);
    assert_eq!(s.values()[1], Value::from("GREEN"));
    assert_eq!(s.values()[2], Value::Bytes(vec![1, 2, 3, 4]));
    assert_eq!(
        parsed.schema.fields()[3].schema().name(),
        Some(timestamp::LOGICAL_NAME)
    );
    // And our encoder writes the same bytes back.
    let mut out = Vec::new();
    binary::encode(&parsed.node, &parsed.schema, &v, &mut out).unwrap();
    assert_eq!(out, datum);
}
