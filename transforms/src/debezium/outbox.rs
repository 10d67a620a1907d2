//! `io.debezium.transforms.outbox.EventRouter`: the outbox pattern. Inserts (and snapshot reads)
//! into an outbox table become events: key = `table.field.event.key`, value = the
//! `table.field.event.payload` column (or a struct `{payload, <envelope fields>}` when
//! `table.fields.additional.placement` puts a column in the `envelope`), header `id` = the event
//! id, timestamp = `table.field.event.timestamp` (Timestamp/MicroTimestamp/NanoTimestamp) or the
//! envelope's `ts_ms`, topic = `route.topic.replacement` applied by a RegexRouter (full match of
//! `route.topic.regex`) to the `route.by.field` column.
//!
//! Tombstones and deletes are dropped; updates follow `table.op.invalid.behavior` (`warn` and
//! `error` drop them, `fatal` fails); non-envelope records pass. `table.expand.json.payload`
//! turns a JSON string payload that starts with `{` or `[` into a struct with an inferred schema
//! (Debezium's `JsonSchemaData` rules: int32/int64/float64 numbers, nulls and empty arrays
//! skipped unless `table.json.payload.null.behavior=optional_bytes` /
//! `table.json.payload.empty.array.behavior=optional_string`); a payload that can't be expanded
//! is left as it is. Deliberate difference: the envelope value schema is cached per (payload
//! schema, routed topic) rather than per payload schema only, so its name always carries the
//! event's own routed topic. Tracing (`tracing.*`) is not supported.

use headwater_api::config::{ConfigKey, ConfigType, Importance, Validator};
use headwater_api::logical::{debezium as dbz, timestamp};
use headwater_api::{
    ConfigDef, ConfigValidation, ConfigValue, ConnectError, ConnectRecord, Properties, Schema,
    SchemaBuilder, SchemaRef, SchemaType, Struct, Transform, Value,
};
use serde_json::Value as Json;

use super::is_envelope;
use crate::java_regex::JavaRegex;
use crate::kafka::routers::regex_validator;
use crate::kafka::RegexRouter;
use crate::util::{
    add_field, configure, field_value, finish, get_bool, get_string, struct_from_values, ByPtr,
    SchemaCache,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placement {
    Header,
    Envelope,
    Partition,
}

#[derive(Clone, Debug)]
struct Additional {
    placement: Placement,
    field: String,
    alias: String,
}

fn parse_additional(s: &str) -> Result<Vec<Additional>, String> {
    let mut out = Vec::new();
    if s.trim().is_empty() {
        return Ok(out);
    }
    for item in s.split(',') {
        let parts: Vec<&str> = item.split(':').collect();
        if parts.len() != 2 && parts.len() != 3 {
            return Err(format!(
                "A comma-separated list of valid String pairs or trios is expected but got: [{s}]"
            ));
        }
        let placement = match parts[1].trim().to_ascii_lowercase().as_str() {
            "header" => Placement::Header,
            "envelope" => Placement::Envelope,
            "partition" => Placement::Partition,
            other => {
                return Err(format!(
                "Invalid placement '{other}' in '{item}': expected header, envelope or partition"
            ))
            }
        };
        let field = parts[0].trim().to_owned();
        let alias = parts.get(2).map_or(field.clone(), |a| a.trim().to_owned());
        out.push(Additional {
            placement,
            field,
            alias,
        });
    }
    Ok(out)
}

/// `io.debezium.transforms.outbox.EventRouter`.
#[derive(Debug)]
pub struct EventRouter {
    field_event_id: String,
    field_event_key: String,
    field_payload: String,
    field_timestamp: Option<String>,
    field_schema_version: Option<String>,
    route_by_field: String,
    router: RegexRouter,
    tombstone_on_empty_payload: bool,
    expand_json: bool,
    null_as_optional_bytes: bool,
    empty_array_as_optional_string: bool,
    invalid_op_fatal: bool,
    additional: Vec<Additional>,
    missing_ignore: bool,
    only_headers: bool,
    cache: SchemaCache<(ByPtr, String, Option<i32>), SchemaRef>,
}

impl EventRouter {
    pub fn config_def() -> ConfigDef {
        let s = |name: &str, default: Option<&str>, doc: &str| {
            let k = ConfigKey::new(name, ConfigType::String)
                .importance(Importance::Low)
                .doc(doc);
            match default {
                Some(d) => k.default_str(d),
                None => k.default_null(),
            }
        };
        let b = |name: &str, doc: &str| {
            ConfigKey::new(name, ConfigType::Boolean)
                .default_str("false")
                .importance(Importance::Medium)
                .doc(doc)
        };
        let e = |name: &str, default: &str, allowed: &[&str], doc: &str| {
            ConfigKey::new(name, ConfigType::String)
                .default_str(default)
                .validator(Validator::one_of_case_insensitive(allowed))
                .importance(Importance::Medium)
                .doc(doc)
        };
        ConfigDef::new()
            .define(s("table.field.event.id", Some("id"), "The column which contains the event ID within the outbox table"))
            .define(s("table.field.event.key", Some("aggregateid"), "The column which contains the event key within the outbox table"))
            .define(s("table.field.event.type", Some("type"), "The column which contains the event type within the outbox table"))
            .define(s("table.field.event.payload", Some("payload"), "The column which contains the event payload within the outbox table"))
            .define(s("table.field.event.timestamp", None, "Optionally you can override the Kafka message timestamp with a value from a chosen column, otherwise it'll be the Debezium event processed timestamp."))
            .define(
                ConfigKey::new("table.fields.additional.placement", ConfigType::String)
                    .default_null()
                    .validator(Validator::custom(|v| match v {
                        ConfigValue::String(s) => parse_additional(s).map(|_| ()),
                        _ => Ok(()),
                    }))
                    .importance(Importance::High)
                    .doc("Extra fields can be added as part of the event envelope or a message header, format is a list of colon-delimited pairs or trios when you desire to have aliases, e.g. id:header,field_name:envelope:alias,field_name:partition"),
            )
            .define(e("table.field.additional.missing", "error", &["error", "ignore"], "Behavior when one of the configured additional fields is missing in the change data: 'error' (default) or 'ignore'."))
            .define(s("table.field.event.schema.version", None, "The column which contains the payload schema version within the outbox table"))
            .define(e("table.op.invalid.behavior", "warn", &["warn", "error", "fatal"], "While Debezium is monitoring the table, it's expecting only to see 'create' row events, in case something else is processed this transform can log it as warning, error or stop the process."))
            .define(b("table.expand.json.payload", "Whether or not to try unescaping a JSON string and make it real JSON. It will infer schema information from payload and update the record schema accordingly."))
            .define(e("table.json.payload.null.behavior", "ignore", &["ignore", "optional_bytes"], "Behavior when json payload including null value, the default will ignore null, optional_bytes will keep the null value, and treat null as optional bytes of connect."))
            .define(e("table.json.payload.empty.array.behavior", "ignore", &["ignore", "optional_string"], "Behavior when json payload including empty array value, the default will ignore empty array, optional_string will keep the field as an optional array with an optional string element type."))
            .define(s("route.by.field", Some("aggregatetype"), "The column which determines how the events will be routed, the value will become part of the topic name"))
            .define(
                ConfigKey::new("route.topic.regex", ConfigType::String)
                    .default_str("(?<routedByValue>.*)")
                    .validator(regex_validator())
                    .importance(Importance::Low)
                    .doc("The default regex to use within the RegexRouter, the default capture will allow to replace the routed field into a new topic name defined in 'route.topic.replacement'"),
            )
            .define(s("route.topic.replacement", Some("outbox.event.${routedByValue}"), "The name of the topic in which the events will be routed, a replacement '${routedByValue}' is available which is the value of The column configured via 'route.by.field'"))
            .define(b("route.tombstone.on.empty.payload", "Whether or not an empty payload should cause a tombstone event."))
    }

    pub fn configure(props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(), props, |c, errors| {
            let regex = JavaRegex::compile(c.get_string("route.topic.regex")?).ok()?;
            let replacement = props
                .get("route.topic.replacement")
                .cloned()
                .unwrap_or_else(|| "outbox.event.${routedByValue}".into());
            let additional = match get_string(c, "table.fields.additional.placement") {
                Some(s) => match parse_additional(&s) {
                    Ok(a) => a,
                    Err(e) => {
                        errors.add_error("table.fields.additional.placement", e);
                        return None;
                    }
                },
                None => Vec::new(),
            };
            let eq = |k: &str, v: &str| c.get_string(k).is_some_and(|x| x.eq_ignore_ascii_case(v));
            Some(EventRouter {
                field_event_id: get_string(c, "table.field.event.id")?,
                field_event_key: get_string(c, "table.field.event.key")?,
                field_payload: get_string(c, "table.field.event.payload")?,
                field_timestamp: get_string(c, "table.field.event.timestamp"),
                field_schema_version: get_string(c, "table.field.event.schema.version"),
                route_by_field: get_string(c, "route.by.field")?,
                router: RegexRouter::new(regex, &replacement),
                tombstone_on_empty_payload: get_bool(c, "route.tombstone.on.empty.payload", false),
                expand_json: get_bool(c, "table.expand.json.payload", false),
                null_as_optional_bytes: eq("table.json.payload.null.behavior", "optional_bytes"),
                empty_array_as_optional_string: eq(
                    "table.json.payload.empty.array.behavior",
                    "optional_string",
                ),
                invalid_op_fatal: eq("table.op.invalid.behavior", "fatal"),
                only_headers: !additional
                    .iter()
                    .any(|a| a.placement == Placement::Envelope),
                additional,
                missing_ignore: eq("table.field.additional.missing", "ignore"),
                cache: SchemaCache::new(10_000),
            })
        })
    }

    fn timestamp_ms(&self, envelope: &Struct, event: &Struct) -> Result<Option<i64>, ConnectError> {
        let envelope_ts = || envelope.get("ts_ms").and_then(Value::as_i64);
        let Some(field) = &self.field_timestamp else {
            return Ok(envelope_ts());
        };
        let f = event.schema().field(field).ok_or_else(|| {
            ConnectError::data(format!("Unable to find timestamp field {field} in event"))
        })?;
        let Some(ts) = event.get(field).and_then(Value::as_i64) else {
            return Ok(envelope_ts());
        };
        match f.schema().name() {
            None => Err(ConnectError::data(format!(
                "Unsupported field type {} (without logical schema name) for event timestamp",
                f.schema().schema_type()
            ))),
            Some(timestamp::LOGICAL_NAME | dbz::TIMESTAMP) => Ok(Some(ts)),
            Some(dbz::MICRO_TIMESTAMP) => Ok(Some(ts / 1000)),
            Some(dbz::NANO_TIMESTAMP) => Ok(Some(ts / 1_000_000)),
            Some(other) => Err(ConnectError::data(format!(
                "Unsupported field type {other} for event timestamp"
            ))),
        }
    }

    fn schema_name(event_schema: &Schema, routed: &str) -> String {
        match event_schema.name() {
            Some(n) => match n.rfind('.') {
                Some(i) => format!("{}{routed}.{}", &n[..=i], &n[i + 1..]),
                None => format!("{routed}.{n}"),
            },
            None => routed.to_owned(),
        }
    }

    fn value_schema(
        &self,
        payload_schema: &SchemaRef,
        event_schema: &Schema,
        routed: &str,
        version: Option<i32>,
    ) -> Result<SchemaRef, ConnectError> {
        let key = (ByPtr(payload_schema.clone()), routed.to_owned(), version);
        self.cache.get_or_try_insert(key, || {
            let mut b = SchemaBuilder::struct_().name(Self::schema_name(event_schema, routed));
            if let Some(v) = version {
                b = b.version(v);
            }
            b = add_field(b, "payload", payload_schema.clone())?;
            for a in self
                .additional
                .iter()
                .filter(|a| a.placement == Placement::Envelope)
            {
                match event_schema.field(&a.field) {
                    Some(f) => b = add_field(b, &a.alias, f.schema().clone())?,
                    None if self.missing_ignore => {}
                    None => {
                        return Err(ConnectError::data(format!(
                            "Unable to find field {} in event",
                            a.field
                        )))
                    }
                }
            }
            finish(b)
        })
    }

    fn expand(&self, name: &str, text: &str) -> Option<(SchemaRef, Value)> {
        if !(text.starts_with('{') || text.starts_with('[')) {
            return None;
        }
        let json: Json = serde_json::from_str(text).ok()?;
        let schema = self.json_schema(Some(name), &json).ok()??;
        let value = json_value(&json, &schema).ok()?;
        match value {
            Value::Struct(_) => Some((schema, value)),
            _ => None,
        }
    }

    /// Debezium's `JsonSchemaData.toConnectSchema`.
    fn json_schema(
        &self,
        key: Option<&str>,
        node: &Json,
    ) -> Result<Option<SchemaRef>, ConnectError> {
        Ok(match node {
            Json::String(_) => Some(Schema::optional_string()),
            Json::Bool(_) => Some(SchemaBuilder::boolean().optional().build_ref()),
            Json::Number(n) => Some(number_schema(n)),
            Json::Array(items) => {
                if items.is_empty() {
                    if self.empty_array_as_optional_string {
                        Some(
                            SchemaBuilder::array(Schema::optional_string())
                                .optional()
                                .build_ref(),
                        )
                    } else {
                        None
                    }
                } else {
                    Some(
                        SchemaBuilder::array(self.array_item_schema(key, items)?)
                            .optional()
                            .build_ref(),
                    )
                }
            }
            Json::Object(map) => {
                let mut b = SchemaBuilder::struct_().optional();
                if let Some(k) = key {
                    b = b.name(k);
                }
                let mut names: Vec<&str> = Vec::new();
                for (field, v) in map {
                    let field_key = match key {
                        Some(k) if !k.trim().is_empty() => format!("{k}.{field}"),
                        _ => field.clone(),
                    };
                    if let Some(s) = self.json_schema(Some(&field_key), v)? {
                        if !names.contains(&field.as_str()) {
                            names.push(field);
                            b = add_field(b, field, s)?;
                        }
                    }
                }
                Some(finish(b)?)
            }
            Json::Null => self
                .null_as_optional_bytes
                .then(|| SchemaBuilder::bytes().optional().build_ref()),
        })
    }

    fn array_item_schema(
        &self,
        key: Option<&str>,
        items: &[Json],
    ) -> Result<SchemaRef, ConnectError> {
        let non_null: Vec<&Json> = items.iter().filter(|i| !i.is_null()).collect();
        let Some(first) = non_null.first() else {
            return Err(ConnectError::data("Array has unrecognized member schema."));
        };
        let kind = |j: &Json| std::mem::discriminant(j);
        for item in &non_null {
            if kind(item) != kind(first) {
                return Err(ConnectError::data("Field is not a homogenous array."));
            }
            if let (Json::Number(a), Json::Number(b)) = (first, item) {
                if number_schema(a).schema_type() != number_schema(b).schema_type() {
                    return Err(ConnectError::data(
                        "Field is not a homogenous array, different number types",
                    ));
                }
            }
        }
        if first.is_object() {
            // Merge the element schemas (fields in order of first appearance).
            let mut merged: Vec<(String, SchemaRef)> = Vec::new();
            for item in &non_null {
                let Some(s) = self.json_schema(key, item)? else {
                    continue;
                };
                for f in s.fields() {
                    match merged.iter_mut().find(|(n, _)| n == f.name()) {
                        None => merged.push((f.name().to_owned(), f.schema().clone())),
                        Some(slot) => {
                            if slot.1.schema_type() == SchemaType::Bytes
                                && f.schema().schema_type() != SchemaType::Bytes
                            {
                                slot.1 = f.schema().clone();
                            }
                        }
                    }
                }
            }
            let mut b = SchemaBuilder::struct_().optional();
            if let Some(k) = key {
                b = b.name(k);
            }
            for (n, s) in merged {
                b = add_field(b, &n, s)?;
            }
            return finish(b);
        }
        self.json_schema(None, first)?
            .ok_or_else(|| ConnectError::data("Array has unrecognized member schema."))
    }
}

fn number_schema(n: &serde_json::Number) -> SchemaRef {
    match n.as_i64() {
        Some(i) if i32::try_from(i).is_ok() => Schema::optional_int32(),
        Some(_) => Schema::optional_int64(),
        None => SchemaBuilder::float64().optional().build_ref(),
    }
}

/// Debezium's `JsonSchemaData.toConnectData` (fails when a value doesn't fit the schema).
fn json_value(node: &Json, schema: &Schema) -> Result<Value, ConnectError> {
    Ok(match (node, schema.schema_type()) {
        (Json::Null, _) => Value::Null,
        (Json::String(s), SchemaType::String) => Value::String(s.clone()),
        (Json::Bool(b), SchemaType::Boolean) => Value::Boolean(*b),
        (Json::Number(n), SchemaType::Int32) => Value::Int32(
            n.as_i64()
                .and_then(|i| i32::try_from(i).ok())
                .ok_or_else(|| ConnectError::data("number does not fit int32"))?,
        ),
        (Json::Number(n), SchemaType::Int64) => Value::Int64(
            n.as_i64()
                .ok_or_else(|| ConnectError::data("number does not fit int64"))?,
        ),
        (Json::Number(n), SchemaType::Float64) => Value::Float64(
            n.as_f64()
                .ok_or_else(|| ConnectError::data("not a number"))?,
        ),
        (Json::Array(items), SchemaType::Array) => {
            let item_schema = schema
                .value_schema()
                .ok_or_else(|| ConnectError::data("array schema without item schema"))?;
            Value::Array(
                items
                    .iter()
                    .map(|i| json_value(i, item_schema))
                    .collect::<Result<_, _>>()?,
            )
        }
        (Json::Object(map), SchemaType::Struct) => {
            let mut s = Struct::new(std::sync::Arc::new(schema.clone()))?;
            for f in schema.fields() {
                if let Some(v) = map.get(f.name()) {
                    s.put_at(f.index(), json_value(v, f.schema())?)?;
                }
            }
            Value::Struct(s)
        }
        _ => {
            return Err(ConnectError::data(
                "JSON value does not match the inferred schema",
            ))
        }
    })
}

impl<R: ConnectRecord> Transform<R> for EventRouter {
    fn apply(&self, mut record: R) -> Result<Option<R>, ConnectError> {
        if record.value().is_null() {
            return Ok(None);
        }
        if !record.value_schema().is_some_and(|s| is_envelope(s)) {
            return Ok(Some(record));
        }
        let (_, value) = record.take_value();
        let envelope = crate::util::require_struct(value, "Detect Debezium Operation")?;
        let op = envelope
            .get("op")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if op == "d" {
            return Ok(None);
        }
        if op == "u" {
            if self.invalid_op_fatal {
                return Err(ConnectError::fatal(format!(
                    "Unexpected update message received {:?}, fail.",
                    record.key()
                )));
            }
            return Ok(None);
        }
        let event = match envelope.get("after") {
            Some(Value::Struct(s)) => s.clone(),
            other => {
                return Err(ConnectError::data(format!(
                    "Only Struct objects supported for [Read Outbox Event], found: {}",
                    crate::util::java_class(other.unwrap_or(&Value::Null))
                )))
            }
        };
        let event_schema = event.schema().clone();
        let payload_field = event_schema.field(&self.field_payload).ok_or_else(|| {
            ConnectError::data(format!(
                "Unable to find payload field {} in event",
                self.field_payload
            ))
        })?;
        let mut payload_schema = payload_field.schema().clone();
        let timestamp = self.timestamp_ms(&envelope, &event)?;
        let id_field = event_schema.field(&self.field_event_id).ok_or_else(|| {
            ConnectError::data(format!(
                "Unable to find event-id field {} in event",
                self.field_event_id
            ))
        })?;
        let event_id = field_value(&event, id_field.index(), true);
        let mut payload = field_value(&event, payload_field.index(), true);
        record
            .headers_mut()
            .add("id", Some(id_field.schema().clone()), event_id);
        if self.expand_json {
            if let Value::String(text) = &payload {
                if let Some((s, v)) = self.expand(&self.field_payload, text) {
                    payload_schema = s;
                    payload = v;
                }
            }
        }
        let get = |name: &str| -> Result<Value, ConnectError> {
            let f = event_schema
                .field(name)
                .ok_or_else(|| ConnectError::data(format!("{name} is not a valid field name")))?;
            Ok(field_value(&event, f.index(), true))
        };
        let routed = match get(&self.route_by_field)? {
            Value::String(s) => s,
            Value::Null => String::new(),
            other => {
                return Err(ConnectError::data(format!(
                    "Field \"{}\" is not of type STRING: {other:?}",
                    self.route_by_field
                )))
            }
        };
        let mut partition = None;
        let mut envelope_values = Vec::new();
        for a in &self.additional {
            if self.missing_ignore && event_schema.field(&a.field).is_none() {
                continue;
            }
            match a.placement {
                Placement::Envelope => envelope_values.push(get(&a.field)?),
                Placement::Header => {
                    let v = get(&a.field)?;
                    let s = event_schema.field(&a.field).map(|f| f.schema().clone());
                    record.headers_mut().add(a.alias.clone(), s, v);
                }
                Placement::Partition => match get(&a.field)? {
                    Value::Int32(p) => partition = Some(p),
                    Value::Null => partition = None,
                    other => {
                        return Err(ConnectError::data(format!(
                            "Field \"{}\" is not of type INT32: {other:?}",
                            a.field
                        )))
                    }
                },
            }
        }
        let empty_payload = match &payload {
            Value::Null => true,
            Value::String(s) => s.trim().is_empty(),
            _ => false,
        };
        if empty_payload && self.tombstone_on_empty_payload {
            record.set_value(None, Value::Null);
        } else if self.only_headers {
            record.set_value(Some(payload_schema), payload);
        } else {
            let version = match &self.field_schema_version {
                Some(f) => match get(f)? {
                    Value::Int32(v) => Some(v),
                    _ => None,
                },
                None => None,
            };
            let vs = self.value_schema(&payload_schema, &event_schema, &routed, version)?;
            let mut values = vec![payload];
            values.extend(envelope_values);
            values.resize(vs.fields().len(), Value::Null);
            let s = struct_from_values(vs.clone(), values)?;
            record.set_value(Some(vs), Value::Struct(s));
        }
        let (key_schema, key) = match event_schema.field(&self.field_event_key) {
            Some(f) => (
                Some(f.schema().clone()),
                field_value(&event, f.index(), true),
            ),
            None => {
                return Err(ConnectError::data(format!(
                    "{} is not a valid field name",
                    self.field_event_key
                )))
            }
        };
        record.set_key(key_schema, key);
        record.set_kafka_partition(partition);
        record.set_timestamp(timestamp);
        record.set_topic(routed);
        if let Some(topic) = self.router.route(record.topic())? {
            record.set_topic(topic);
        }
        Ok(Some(record))
    }
}
