//! Kafka Connect's `JsonConverter`, reproduced byte for byte.
//!
//! Serialisation ([`JsonConverter::from_connect_data`]) writes exactly the bytes Kafka Connect's
//! converter writes: the `{"schema":...,"payload":...}` envelope when `schemas.enable=true`,
//! schema keys in Jackson's order (`type`, `items` | `keys`,`values` | `fields`, `optional`,
//! `name`, `version`, `doc`, `parameters`, `default`, and `field` last for struct members),
//! Java's number text, base64 bytes, and Decimals as base64 (or numbers with
//! `decimal.format=NUMERIC`). Only a null value *without* a schema becomes a Kafka null
//! (tombstone).
//!
//! The serialised schema text is cached per schema object (`Arc` identity, bounded by
//! `schemas.cache.size`), so a stream of records sharing a schema serialises it once. The cache
//! holds a clone of each `Arc`, so a cached address can never be reused by another schema.
//! Likewise the payload text of a struct whose values many records share (a snapshot's `source`
//! block) is kept for the last [`SHARED_STRUCTS`] such structs, keyed by the address of the
//! shared values: while the cache holds a clone, those values cannot change (see
//! [`Struct::shared_values`]).
//!
//! Deserialisation ([`JsonConverter::to_connect_data`]) parses the envelope, rebuilds the schema
//! (cached by its JSON text) and the value, and is the inverse of serialisation for every value
//! the converter can write.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use headwater_api::config::{ConfigDef, ConfigKey, ConfigType, Importance, Validator};
use headwater_api::logical::decimal;
use headwater_api::{
    DataError, FieldsRead, Properties, Schema, SchemaBuilder, SchemaRef, SchemaType, Struct, Value,
};
use serde_json::value::RawValue;
use serde_json::Value as Json;

use crate::java_text::{
    write_java_big_decimal, write_java_double, write_java_float, write_json_string,
};

/// How Decimal values are written (`decimal.format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecimalFormat {
    /// Base64 of the unscaled two's-complement bytes (Kafka's default).
    Base64,
    /// A JSON number.
    Numeric,
}

/// `JsonConverter` settings, with Kafka's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonConverterConfig {
    pub schemas_enable: bool,
    pub schemas_cache_size: usize,
    pub decimal_format: DecimalFormat,
    pub replace_null_with_default: bool,
}

impl Default for JsonConverterConfig {
    fn default() -> Self {
        JsonConverterConfig {
            schemas_enable: true,
            schemas_cache_size: 1000,
            decimal_format: DecimalFormat::Base64,
            replace_null_with_default: true,
        }
    }
}

impl JsonConverterConfig {
    /// The converter's keys (without the `key.converter.` / `value.converter.` prefix).
    pub fn config_def() -> ConfigDef {
        ConfigDef::new()
            .define(
                ConfigKey::new("schemas.enable", ConfigType::Boolean)
                    .default_str("true")
                    .importance(Importance::High)
                    .doc("Include schemas within each of the serialized values and keys."),
            )
            .define(
                ConfigKey::new("schemas.cache.size", ConfigType::Int)
                    .default_str("1000")
                    .importance(Importance::High)
                    .validator(Validator::at_least(0.0))
                    .doc("The maximum number of schemas that can be cached in this converter instance."),
            )
            .define(
                ConfigKey::new("decimal.format", ConfigType::String)
                    .default_str("BASE64")
                    .importance(Importance::Low)
                    .validator(Validator::one_of_case_insensitive(&["BASE64", "NUMERIC"]))
                    .doc("Controls which format this converter will serialize decimals in: BASE64 or NUMERIC."),
            )
            .define(
                ConfigKey::new("replace.null.with.default", ConfigType::Boolean)
                    .default_str("true")
                    .importance(Importance::Low)
                    .doc("Whether to replace fields that have a default value and that are null to the default value."),
            )
    }

    /// Reads the settings from converter properties (prefix already stripped).
    pub fn from_props(props: &Properties) -> Result<Self, headwater_api::ConfigValidation> {
        let parsed = Self::config_def().parse(props)?;
        let decimal_format = match parsed.get_string("decimal.format") {
            Some(f) if f.eq_ignore_ascii_case("NUMERIC") => DecimalFormat::Numeric,
            _ => DecimalFormat::Base64,
        };
        Ok(JsonConverterConfig {
            schemas_enable: parsed.get_bool("schemas.enable").unwrap_or(true),
            schemas_cache_size: usize::try_from(
                parsed.get_long("schemas.cache.size").unwrap_or(1000),
            )
            .unwrap_or(0),
            decimal_format,
            replace_null_with_default: parsed.get_bool("replace.null.with.default").unwrap_or(true),
        })
    }
}

/// A schema and a value, as produced by deserialisation.
#[derive(Clone, Debug, PartialEq)]
pub struct SchemaAndValue {
    pub schema: Option<SchemaRef>,
    pub value: Value,
}

/// How many shared structs' serialised payloads are kept.
const SHARED_STRUCTS: usize = 8;

/// Shared bytes shorter than this are copied into the output even when the caller takes spans
/// (a span is worth its bookkeeping only for longer ones).
pub const MIN_SPAN: usize = 64;

/// Shared bytes left out of a serialised value: `(index into the written bytes, bytes)`; the
/// value is the written bytes with each span inserted before its index.
pub type SharedSpan = (usize, Arc<[u8]>);

/// A serialised value being written: its bytes, and, when the caller takes them, the shared
/// spans left out of the bytes (`(index into the bytes, span)`: the value is the bytes with
/// each span inserted before its index; see [`JsonConverter::write_connect_data_spans`]).
struct JsonOut<'a> {
    bytes: &'a mut Vec<u8>,
    spans: Option<&'a mut Vec<SharedSpan>>,
}

impl<'a> JsonOut<'a> {
    fn plain(bytes: &'a mut Vec<u8>) -> Self {
        JsonOut { bytes, spans: None }
    }

    /// Appends shared bytes: as a span when spans are taken and it is long enough, else
    /// copied.
    fn shared(&mut self, shared: &Arc<[u8]>) {
        match &mut self.spans {
            Some(spans) if shared.len() >= MIN_SPAN => {
                spans.push((self.bytes.len(), shared.clone()));
            }
            _ => self.bytes.extend_from_slice(shared),
        }
    }
}

impl std::ops::Deref for JsonOut<'_> {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        self.bytes
    }
}

impl std::ops::DerefMut for JsonOut<'_> {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        self.bytes
    }
}

/// A shared struct's values and schema address, and its payload JSON.
type SharedStructJson = (Arc<[Value]>, usize, Arc<[u8]>);

/// The payload JSON of shared values with some fields left out, for structs made by
/// [`Struct::replacing`]: the text before the first replaced field's value, between each two,
/// and after the last.
struct ReplacedStructJson {
    base: Arc<[Value]>,
    schema_addr: usize,
    /// The replaced field indexes.
    fields: Vec<usize>,
    segments: Vec<Arc<[u8]>>,
}

#[derive(Default)]
struct Caches {
    /// Recently serialised shared structs, the newest last.
    shared_structs: Vec<SharedStructJson>,
    /// Recently serialised bases of structs with replaced fields, the newest last.
    replaced_structs: Vec<Arc<ReplacedStructJson>>,
    /// Schema `Arc` address -> (the schema, its serialised JSON).
    /// By schema address (a fast hasher: looked up for every record's key and value).
    serialised: HashMap<usize, (SchemaRef, Arc<[u8]>), foldhash::fast::RandomState>,
    /// Schema `Arc` address -> (the schema, `{"schema":<its JSON>,"payload":`), the leading
    /// bytes of every value of that schema (see [`JsonConverter::write_connect_data_split`]).
    envelope_prefixes: HashMap<usize, (SchemaRef, Arc<[u8]>), foldhash::fast::RandomState>,
    /// Schema JSON text -> parsed schema.
    parsed: HashMap<Box<str>, SchemaRef>,
    /// The envelope prefix of the last record read (`{"schema":<schema>,"payload":`) and its
    /// parsed schema: records of one table repeat it byte for byte, so a prefix comparison
    /// replaces scanning and hashing the schema text.
    last_envelope: Option<(Box<[u8]>, SchemaRef)>,
    /// The last field mask computed for a reader of some fields: the reader's fields, the
    /// schema (held, so its address cannot be reused meanwhile) and the mask.
    last_mask: Option<(FieldsRead, SchemaRef, Option<u64>)>,
}

/// Kafka Connect's JSON converter.
pub struct JsonConverter {
    config: JsonConverterConfig,
    caches: Mutex<Caches>,
}

impl JsonConverter {
    pub fn new(config: JsonConverterConfig) -> Self {
        JsonConverter {
            config,
            caches: Mutex::new(Caches::default()),
        }
    }

    pub fn config(&self) -> &JsonConverterConfig {
        &self.config
    }

    /// Serialises a value; `Ok(None)` is a Kafka null (only for a null value without schema).
    pub fn from_connect_data(
        &self,
        _topic: &str,
        schema: Option<&SchemaRef>,
        value: &Value,
    ) -> Result<Option<Vec<u8>>, DataError> {
        let mut out = Vec::with_capacity(256);
        if self.write_connect_data(schema, value, &mut out)? {
            Ok(Some(out))
        } else {
            Ok(None)
        }
    }

    /// Appends the serialised form to `out`; returns `false` (and writes nothing) for a Kafka null.
    pub fn write_connect_data(
        &self,
        schema: Option<&SchemaRef>,
        value: &Value,
        out: &mut Vec<u8>,
    ) -> Result<bool, DataError> {
        self.write_connect_data_to(schema, value, &mut JsonOut::plain(out))
    }

    /// [`JsonConverter::write_connect_data`] that leaves bytes many values share out of `out`
    /// and lists them in `spans` instead, as `(index into out, bytes)`: the value is `out` with
    /// each span's bytes inserted before its index (indexes in increasing order). The spans
    /// are the same `Arc` whenever they are the same bytes, so a writer can store repeats of
    /// them by reference (the log's LZ4 batches do): the `{"schema":<schema>,"payload":`
    /// envelope prefix of each schema, the cached text of a struct many values share (a
    /// snapshot's `source` block) and of the shared part of a struct with replaced fields (a
    /// stream's). Spans shorter than [`MIN_SPAN`] are copied into `out`.
    pub fn write_connect_data_spans(
        &self,
        schema: Option<&SchemaRef>,
        value: &Value,
        out: &mut Vec<u8>,
        spans: &mut Vec<SharedSpan>,
    ) -> Result<bool, DataError> {
        let mut out = JsonOut {
            bytes: out,
            spans: Some(spans),
        };
        self.write_connect_data_to(schema, value, &mut out)
    }

    fn write_connect_data_to(
        &self,
        schema: Option<&SchemaRef>,
        value: &Value,
        out: &mut JsonOut<'_>,
    ) -> Result<bool, DataError> {
        if schema.is_none() && value.is_null() {
            return Ok(false);
        }
        if self.config.schemas_enable {
            match schema {
                Some(s) => out.shared(&self.envelope_prefix(s)),
                None => out.extend_from_slice(b"{\"schema\":null,\"payload\":"),
            }
            self.write_value(schema.map(|s| s.as_ref()), value, out)?;
            out.push(b'}');
        } else {
            self.write_value(schema.map(|s| s.as_ref()), value, out)?;
        }
        Ok(true)
    }

    /// `{"schema":<schema JSON>,"payload":`, from the cache when this schema object was seen
    /// before.
    fn envelope_prefix(&self, schema: &SchemaRef) -> Arc<[u8]> {
        let key = Arc::as_ptr(schema) as usize;
        if let Some((_, prefix)) = self.lock().envelope_prefixes.get(&key) {
            return prefix.clone();
        }
        let json = self.schema_json(schema);
        let mut buf = Vec::with_capacity(json.len() + 24);
        buf.extend_from_slice(b"{\"schema\":");
        buf.extend_from_slice(&json);
        buf.extend_from_slice(b",\"payload\":");
        let prefix: Arc<[u8]> = buf.into();
        let limit = self.config.schemas_cache_size;
        remember(&mut self.lock().envelope_prefixes, limit, schema, &prefix);
        prefix
    }

    /// The serialised JSON of a schema, from the cache when this schema object was seen before.
    pub fn schema_json(&self, schema: &SchemaRef) -> Arc<[u8]> {
        let key = Arc::as_ptr(schema) as usize;
        if let Some((_, json)) = self.lock().serialised.get(&key) {
            return json.clone();
        }
        let mut buf = Vec::with_capacity(512);
        self.write_schema(schema, None, &mut buf);
        let json: Arc<[u8]> = buf.into();
        let limit = self.config.schemas_cache_size;
        remember(&mut self.lock().serialised, limit, schema, &json);
        json
    }

    /// Writes the cached payload of shared struct `s` (of the schema at `schema_addr`); false
    /// when it is not cached.
    fn write_cached_struct(&self, s: &Struct, schema_addr: usize, out: &mut JsonOut<'_>) -> bool {
        let Some(shared) = s.shared_values() else {
            return false;
        };
        let json = self
            .lock()
            .shared_structs
            .iter()
            .rev()
            .find(|(values, addr, _)| *addr == schema_addr && Arc::ptr_eq(values, shared))
            .map(|(_, _, json)| json.clone());
        match json {
            Some(json) => {
                out.shared(&json);
                true
            }
            None => false,
        }
    }

    fn cache_struct(&self, s: &Struct, schema_addr: usize, json: &Arc<[u8]>) {
        let Some(shared) = s.shared_values() else {
            return;
        };
        let mut caches = self.lock();
        if caches.shared_structs.len() >= SHARED_STRUCTS {
            caches.shared_structs.remove(0);
        }
        caches
            .shared_structs
            .push((shared.clone(), schema_addr, json.clone()));
    }

    /// Writes a struct made by [`Struct::replacing`]: the cached text of its shared values
    /// around the replaced fields' values (serialising and caching that text first when it is
    /// not cached).
    fn write_replaced_struct(
        &self,
        schema: &Schema,
        base: &Arc<[Value]>,
        replaced: &[(usize, Value)],
        out: &mut JsonOut<'_>,
    ) -> Result<(), DataError> {
        let schema_addr = schema as *const Schema as usize;
        let same = |e: &ReplacedStructJson| {
            e.schema_addr == schema_addr
                && Arc::ptr_eq(&e.base, base)
                && e.fields.len() == replaced.len()
                && e.fields.iter().zip(replaced).all(|(f, (i, _))| f == i)
        };
        let cached = self
            .lock()
            .replaced_structs
            .iter()
            .rev()
            .find(|e| same(e))
            .cloned();
        let json = match cached {
            Some(json) => json,
            None => {
                let json = Arc::new(self.replaced_struct_json(schema, base, replaced)?);
                let mut caches = self.lock();
                if caches.replaced_structs.len() >= SHARED_STRUCTS {
                    caches.replaced_structs.remove(0);
                }
                caches.replaced_structs.push(json.clone());
                json
            }
        };
        let fields = schema.fields();
        for (segment, (i, v)) in json.segments.iter().zip(replaced) {
            out.shared(segment);
            self.write_value(Some(fields[*i].schema()), v, out)?;
        }
        if let Some(last) = json.segments.last() {
            out.shared(last);
        }
        Ok(())
    }

    /// The payload text of `base` (values of `schema`) cut around the values of the `replaced`
    /// fields.
    fn replaced_struct_json(
        &self,
        schema: &Schema,
        base: &Arc<[Value]>,
        replaced: &[(usize, Value)],
    ) -> Result<ReplacedStructJson, DataError> {
        let mut text = Vec::with_capacity(512);
        let mut cuts = Vec::with_capacity(replaced.len());
        let mut next = replaced.iter().map(|(i, _)| *i).peekable();
        text.push(b'{');
        for (i, (field, v)) in schema.fields().iter().zip(base.iter()).enumerate() {
            if i > 0 {
                text.push(b',');
            }
            write_field_key(&mut text, field);
            if next.next_if_eq(&i).is_some() {
                // The replaced value goes here; the base's is never written.
                cuts.push(text.len());
                continue;
            }
            self.write_value(Some(field.schema()), v, &mut JsonOut::plain(&mut text))?;
        }
        text.push(b'}');
        let mut segments = Vec::with_capacity(replaced.len() + 1);
        let mut from = 0;
        for &cut in &cuts {
            segments.push(text[from..cut].into());
            from = cut;
        }
        segments.push(text[from..].into());
        Ok(ReplacedStructJson {
            base: base.clone(),
            schema_addr: schema as *const Schema as usize,
            fields: replaced.iter().map(|(i, _)| *i).collect(),
            segments,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Caches> {
        // A panic while holding the lock leaves only caches behind: safe to keep using.
        self.caches.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn write_schema(&self, schema: &Schema, field_name: Option<&str>, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"type\":\"");
        out.extend_from_slice(schema.schema_type().json_name().as_bytes());
        out.push(b'"');
        match schema.schema_type() {
            SchemaType::Array => {
                out.extend_from_slice(b",\"items\":");
                match schema.value_schema() {
                    Some(items) => self.write_schema(items, None, out),
                    None => out.extend_from_slice(b"null"),
                }
            }
            SchemaType::Map => {
                out.extend_from_slice(b",\"keys\":");
                match schema.key_schema() {
                    Some(k) => self.write_schema(k, None, out),
                    None => out.extend_from_slice(b"null"),
                }
                out.extend_from_slice(b",\"values\":");
                match schema.value_schema() {
                    Some(v) => self.write_schema(v, None, out),
                    None => out.extend_from_slice(b"null"),
                }
            }
            SchemaType::Struct => {
                out.extend_from_slice(b",\"fields\":[");
                for (i, field) in schema.fields().iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    self.write_schema(field.schema(), Some(field.name()), out);
                }
                out.push(b']');
            }
            _ => {}
        }
        out.extend_from_slice(if schema.is_optional() {
            b",\"optional\":true"
        } else {
            b",\"optional\":false"
        });
        if let Some(name) = schema.name() {
            out.extend_from_slice(b",\"name\":");
            write_json_string(out, name);
        }
        if let Some(version) = schema.version() {
            out.extend_from_slice(b",\"version\":");
            out.extend_from_slice(version.to_string().as_bytes());
        }
        if let Some(doc) = schema.doc() {
            out.extend_from_slice(b",\"doc\":");
            write_json_string(out, doc);
        }
        if let Some(params) = schema.parameters() {
            out.extend_from_slice(b",\"parameters\":{");
            for (i, (k, v)) in params.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_json_string(out, k);
                out.push(b':');
                write_json_string(out, v);
            }
            out.push(b'}');
        }
        if let Some(default) = schema.default_value() {
            out.extend_from_slice(b",\"default\":");
            // A default was validated against its schema when the schema was built.
            if self
                .write_value(Some(schema), default, &mut JsonOut::plain(out))
                .is_err()
            {
                out.extend_from_slice(b"null");
            }
        }
        if let Some(name) = field_name {
            out.extend_from_slice(b",\"field\":");
            write_json_string(out, name);
        }
        out.push(b'}');
    }

    fn write_value(
        &self,
        schema: Option<&Schema>,
        value: &Value,
        out: &mut JsonOut<'_>,
    ) -> Result<(), DataError> {
        let Some(schema) = schema else {
            return self.write_schemaless(value, out);
        };
        if value.is_null() {
            if let (Some(default), true) = (
                schema.default_value(),
                self.config.replace_null_with_default,
            ) {
                return self.write_value(Some(schema), default, out);
            }
            if schema.is_optional() {
                out.extend_from_slice(b"null");
                return Ok(());
            }
            return Err(DataError::new(
                "Conversion error: null value for field that is required and has no default value",
            ));
        }
        let mismatch = || {
            DataError::new(format!(
                "Invalid type for {}: {:?}",
                schema.schema_type(),
                value.schema_type()
            ))
        };
        match (schema.schema_type(), value) {
            (SchemaType::Bytes, Value::Bytes(bytes))
                if schema.name() == Some(decimal::LOGICAL_NAME) =>
            {
                match self.config.decimal_format {
                    DecimalFormat::Base64 => write_base64(out, bytes),
                    DecimalFormat::Numeric => {
                        let scale = decimal::scale(schema)?;
                        let plain = decimal::unscaled_to_string(bytes, 0);
                        let (negative, digits) = match plain.strip_prefix('-') {
                            Some(d) => (true, d),
                            None => (false, plain.as_str()),
                        };
                        write_java_big_decimal(out, digits, negative, scale);
                    }
                }
            }
            (SchemaType::Int8, Value::Int8(v)) => write_int(out, *v),
            (SchemaType::Int16, Value::Int16(v)) => write_int(out, *v),
            (SchemaType::Int32, Value::Int32(v)) => write_int(out, *v),
            (SchemaType::Int64, Value::Int64(v)) => write_int(out, *v),
            (SchemaType::Float32, Value::Float32(v)) => write_java_float(out, *v),
            (SchemaType::Float64, Value::Float64(v)) => write_java_double(out, *v),
            (SchemaType::Boolean, Value::Boolean(v)) => {
                out.extend_from_slice(if *v { b"true" } else { b"false" })
            }
            (SchemaType::String, Value::String(s)) => write_json_string(out, s),
            (SchemaType::Bytes, Value::Bytes(b)) => write_base64(out, b),
            (SchemaType::Array, Value::Array(items)) => {
                let item_schema = schema.value_schema().map(|s| s.as_ref());
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    self.write_value(item_schema, item, out)?;
                }
                out.push(b']');
            }
            (SchemaType::Map, Value::Map(entries)) => {
                let key_schema = schema.key_schema().map(|s| s.as_ref());
                let value_schema = schema.value_schema().map(|s| s.as_ref());
                let object_mode = key_schema.is_some_and(|k| k.schema_type() == SchemaType::String);
                self.write_map(entries, key_schema, value_schema, object_mode, out)?;
            }
            (SchemaType::Struct, Value::Struct(s)) => {
                if !std::ptr::eq(s.schema().as_ref(), schema) && s.schema().as_ref() != schema {
                    return Err(DataError::new("Mismatching schema."));
                }
                if let Some((base, replaced)) = s.replaced_parts() {
                    return self.write_replaced_struct(schema, base, replaced, out);
                }
                // Only a struct whose values others hold too can come again.
                let shared = s.shared_values().is_some_and(|v| Arc::strong_count(v) > 1);
                let schema_addr = schema as *const Schema as usize;
                if shared && self.write_cached_struct(s, schema_addr, out) {
                    return Ok(());
                }
                if shared {
                    // Serialised whole (no spans) for the cache, then written from it.
                    let mut text = Vec::with_capacity(512);
                    self.write_struct_fields(schema, s, &mut JsonOut::plain(&mut text))?;
                    let text: Arc<[u8]> = text.into();
                    self.cache_struct(s, schema_addr, &text);
                    out.shared(&text);
                } else {
                    self.write_struct_fields(schema, s, out)?;
                }
            }
            _ => return Err(mismatch()),
        }
        Ok(())
    }

    /// `{"field":value,...}` of struct `s` of `schema`.
    fn write_struct_fields(
        &self,
        schema: &Schema,
        s: &Struct,
        out: &mut JsonOut<'_>,
    ) -> Result<(), DataError> {
        out.push(b'{');
        for (i, (field, v)) in schema.fields().iter().zip(s.values()).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_field_key(out, field);
            self.write_value(Some(field.schema()), v, out)?;
        }
        out.push(b'}');
        Ok(())
    }

    fn write_map(
        &self,
        entries: &[(Value, Value)],
        key_schema: Option<&Schema>,
        value_schema: Option<&Schema>,
        object_mode: bool,
        out: &mut JsonOut<'_>,
    ) -> Result<(), DataError> {
        out.push(if object_mode { b'{' } else { b'[' });
        for (i, (k, v)) in entries.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            if object_mode {
                let Value::String(key) = k else {
                    return Err(DataError::new("Map key in object mode must be a string"));
                };
                write_json_string(out, key);
                out.push(b':');
                self.write_value(value_schema, v, out)?;
            } else {
                out.push(b'[');
                self.write_value(key_schema, k, out)?;
                out.push(b',');
                self.write_value(value_schema, v, out)?;
                out.push(b']');
            }
        }
        out.push(if object_mode { b'}' } else { b']' });
        Ok(())
    }

    fn write_schemaless(&self, value: &Value, out: &mut JsonOut<'_>) -> Result<(), DataError> {
        match value {
            Value::Null => out.extend_from_slice(b"null"),
            Value::Boolean(v) => out.extend_from_slice(if *v { b"true" } else { b"false" }),
            Value::Int8(v) => write_int(out, *v),
            Value::Int16(v) => write_int(out, *v),
            Value::Int32(v) => write_int(out, *v),
            Value::Int64(v) => write_int(out, *v),
            Value::Float32(v) => write_java_float(out, *v),
            Value::Float64(v) => write_java_double(out, *v),
            Value::String(s) => write_json_string(out, s),
            Value::Bytes(b) => write_base64(out, b),
            Value::Array(items) => {
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    self.write_schemaless(item, out)?;
                }
                out.push(b']');
            }
            Value::Map(entries) => {
                let object_mode = entries.iter().all(|(k, _)| matches!(k, Value::String(_)));
                self.write_map(entries, None, None, object_mode, out)?;
            }
            Value::Struct(s) => {
                let schema = s.schema().clone();
                self.write_value(Some(&schema), value, out)?;
            }
        }
        Ok(())
    }

    /// Deserialises bytes written by this converter (or by Kafka Connect's); `None` is a Kafka
    /// null and gives a null schema and value.
    pub fn to_connect_data(
        &self,
        topic: &str,
        bytes: Option<&[u8]>,
    ) -> Result<SchemaAndValue, DataError> {
        self.to_connect_data_reading(topic, bytes, None)
    }

    /// [`JsonConverter::to_connect_data`] for a reader of only some top-level struct fields
    /// ([`FieldsRead`]; `None`: all): on the fast path (a schema seen in the previous record)
    /// the other top-level fields of a value it applies to are skipped over, not decoded, and
    /// stay null; the general path decodes everything.
    pub fn to_connect_data_reading(
        &self,
        _topic: &str,
        bytes: Option<&[u8]>,
        fields_read: Option<&FieldsRead>,
    ) -> Result<SchemaAndValue, DataError> {
        let Some(bytes) = bytes else {
            return Ok(SchemaAndValue {
                schema: None,
                value: Value::Null,
            });
        };
        let fail = |e: serde_json::Error| {
            DataError::new(format!(
                "Converting byte[] to Kafka Connect data failed due to serialization error: {e}"
            ))
        };
        if !self.config.schemas_enable {
            let json: Json = serde_json::from_slice(bytes).map_err(fail)?;
            return Ok(SchemaAndValue {
                schema: None,
                value: self.to_connect_value(None, &json)?,
            });
        }
        // Fast path: the same schema as the last record, written the way this converter (and
        // Kafka Connect's) writes envelopes.
        let hit = {
            let mut caches = self.lock();
            let hit = caches.last_envelope.as_ref().and_then(|(prefix, schema)| {
                (bytes.len() > prefix.len()
                    && bytes.starts_with(prefix)
                    && bytes.last() == Some(&b'}'))
                .then(|| (schema.clone(), prefix.len()))
            });
            hit.map(|(schema, prefix_len)| {
                let mask = fields_read.and_then(|f| match &caches.last_mask {
                    Some((cf, cs, m)) if Arc::ptr_eq(cs, &schema) && cf == f => *m,
                    _ => {
                        let m = f.mask(&schema);
                        caches.last_mask = Some((f.clone(), schema.clone(), m));
                        m
                    }
                });
                (schema, prefix_len, mask)
            })
        };
        if let Some((schema, prefix_len, read_mask)) = hit {
            // The payload is checked as UTF-8 once, so the reader need not check every key
            // and string again (a slice reader does, at a cost per string).
            if let Ok(payload) = std::str::from_utf8(&bytes[prefix_len..bytes.len() - 1]) {
                let mut de = serde_json::Deserializer::from_str(payload);
                let seed = ValueSeed {
                    converter: self,
                    schema: &schema,
                    read_mask,
                };
                if let Ok(value) = serde::de::DeserializeSeed::deserialize(seed, &mut de) {
                    if de.end().is_ok() {
                        return Ok(SchemaAndValue {
                            schema: Some(schema),
                            value,
                        });
                    }
                }
            }
        }
        let envelope: HashMap<String, &RawValue> =
            serde_json::from_slice(bytes).map_err(|_| envelope_error())?;
        let (Some(schema_raw), Some(payload_raw), 2) = (
            envelope.get("schema"),
            envelope.get("payload"),
            envelope.len(),
        ) else {
            return Err(envelope_error());
        };
        let schema = self.parse_schema_cached(schema_raw.get())?;
        if let Some(schema) = &schema {
            let prefix = format!("{{\"schema\":{},\"payload\":", schema_raw.get());
            if bytes.starts_with(prefix.as_bytes()) {
                self.lock().last_envelope =
                    Some((prefix.into_bytes().into_boxed_slice(), schema.clone()));
            }
        }
        let payload: Json = serde_json::from_str(payload_raw.get()).map_err(fail)?;
        let value = self.to_connect_value(schema.as_ref(), &payload)?;
        Ok(SchemaAndValue { schema, value })
    }

    fn parse_schema_cached(&self, text: &str) -> Result<Option<SchemaRef>, DataError> {
        if text == "null" {
            return Ok(None);
        }
        if let Some(schema) = self.lock().parsed.get(text) {
            return Ok(Some(schema.clone()));
        }
        let json: Json = serde_json::from_str(text)
            .map_err(|e| DataError::new(format!("Invalid schema JSON: {e}")))?;
        let schema = Arc::new(self.as_connect_schema(&json)?);
        let mut caches = self.lock();
        if caches.parsed.len() >= self.config.schemas_cache_size {
            caches.parsed.clear();
        }
        if self.config.schemas_cache_size > 0 {
            caches.parsed.insert(text.into(), schema.clone());
        }
        Ok(Some(schema))
    }

    /// Builds a Connect schema from its JSON form (Kafka's `asConnectSchema`).
    pub fn as_connect_schema(&self, json: &Json) -> Result<Schema, DataError> {
        let obj = json
            .as_object()
            .ok_or_else(|| DataError::new("Schema must be a JSON object"))?;
        let type_name = obj
            .get("type")
            .and_then(Json::as_str)
            .ok_or_else(|| DataError::new("Schema must contain 'type' field"))?;
        let schema_type = SchemaType::from_json_name(type_name)
            .ok_or_else(|| DataError::new(format!("Unknown schema type: {type_name}")))?;
        let sub = |key: &str| -> Result<SchemaRef, DataError> {
            let node = obj.get(key).filter(|n| !n.is_null()).ok_or_else(|| {
                DataError::new(format!("{type_name} schema did not specify the {key} type"))
            })?;
            Ok(Arc::new(self.as_connect_schema(node)?))
        };
        let mut builder = match schema_type {
            SchemaType::Array => SchemaBuilder::array(sub("items")?),
            SchemaType::Map => SchemaBuilder::map(sub("keys")?, sub("values")?),
            SchemaType::Struct => {
                let fields = obj.get("fields").and_then(Json::as_array).ok_or_else(|| {
                    DataError::new("Struct schema's \"fields\" argument is not an array.")
                })?;
                let mut b = SchemaBuilder::struct_();
                for field in fields {
                    let name = field.get("field").and_then(Json::as_str).ok_or_else(|| {
                        DataError::new("Struct schema's field name not specified properly")
                    })?;
                    b = b.try_field(name, Arc::new(self.as_connect_schema(field)?))?;
                }
                b
            }
            other => SchemaBuilder::new(other),
        };
        match obj.get("optional") {
            Some(Json::Bool(true)) => builder = builder.optional(),
            Some(Json::Bool(false)) | None | Some(Json::Null) => {}
            Some(_) => {
                return Err(DataError::new(
                    "Invalid value for \"optional\": must be a boolean",
                ))
            }
        }
        if let Some(name) = obj.get("name").and_then(Json::as_str) {
            builder = builder.name(name);
        }
        if let Some(version) = obj.get("version").filter(|v| !v.is_null()) {
            let v = version
                .as_i64()
                .and_then(|v| i32::try_from(v).ok())
                .ok_or_else(|| DataError::new("Schema version must be an integer"))?;
            builder = builder.version(v);
        }
        if let Some(doc) = obj.get("doc").and_then(Json::as_str) {
            builder = builder.doc(doc);
        }
        if let Some(params) = obj.get("parameters").filter(|p| !p.is_null()) {
            let params = params
                .as_object()
                .ok_or_else(|| DataError::new("Schema parameters must be a JSON object"))?;
            builder = builder.parameters_present();
            for (k, v) in params {
                let v = v
                    .as_str()
                    .ok_or_else(|| DataError::new("Schema parameters must have string values."))?;
                builder = builder.parameter(k.clone(), v);
            }
        }
        if let Some(default) = obj.get("default").filter(|d| !d.is_null()) {
            let partial = Arc::new(builder.clone().try_build()?);
            let value = self.to_connect_value(Some(&partial), default)?;
            builder = builder.default_value(value);
        }
        builder.try_build()
    }

    fn to_connect_value(
        &self,
        schema: Option<&SchemaRef>,
        json: &Json,
    ) -> Result<Value, DataError> {
        let Some(schema) = schema else {
            return Ok(schemaless_value(json));
        };
        if json.is_null() {
            if let (Some(default), true) = (
                schema.default_value(),
                self.config.replace_null_with_default,
            ) {
                return Ok(default.clone());
            }
            if schema.is_optional() {
                return Ok(Value::Null);
            }
            return Err(DataError::new(format!(
                "Invalid null value for required {} field",
                schema.schema_type()
            )));
        }
        let bad = || {
            DataError::new(format!(
                "Invalid JSON for {} field: {}",
                schema.schema_type(),
                truncate(&json.to_string())
            ))
        };
        let int = || json.as_i64().ok_or_else(bad);
        Ok(match schema.schema_type() {
            SchemaType::Bytes if schema.name() == Some(decimal::LOGICAL_NAME) => {
                let scale = decimal::scale(schema)?;
                match json {
                    Json::String(s) => Value::Bytes(BASE64.decode(s).map_err(|_| bad())?),
                    Json::Number(n) => {
                        Value::Bytes(decimal::unscaled_from_str(&number_plain_text(n), scale)?)
                    }
                    _ => return Err(bad()),
                }
            }
            SchemaType::Int8 => Value::Int8(i8::try_from(int()?).map_err(|_| bad())?),
            SchemaType::Int16 => Value::Int16(i16::try_from(int()?).map_err(|_| bad())?),
            SchemaType::Int32 => Value::Int32(i32::try_from(int()?).map_err(|_| bad())?),
            SchemaType::Int64 => Value::Int64(int()?),
            SchemaType::Float32 => Value::Float32(json_float(json).ok_or_else(bad)? as f32),
            SchemaType::Float64 => Value::Float64(json_float(json).ok_or_else(bad)?),
            SchemaType::Boolean => Value::Boolean(json.as_bool().ok_or_else(bad)?),
            SchemaType::String => Value::String(json.as_str().ok_or_else(bad)?.to_owned()),
            SchemaType::Bytes => {
                let text = json.as_str().ok_or_else(bad)?;
                Value::Bytes(BASE64.decode(text).map_err(|_| bad())?)
            }
            SchemaType::Array => {
                let items = json.as_array().ok_or_else(bad)?;
                let item_schema = schema.value_schema();
                Value::Array(
                    items
                        .iter()
                        .map(|i| self.to_connect_value(item_schema, i))
                        .collect::<Result<_, _>>()?,
                )
            }
            SchemaType::Map => {
                let key_schema = schema.key_schema();
                let value_schema = schema.value_schema();
                let mut entries = Vec::new();
                if key_schema.is_some_and(|k| k.schema_type() == SchemaType::String) {
                    let obj = json.as_object().ok_or_else(bad)?;
                    for (k, v) in obj {
                        entries.push((
                            Value::String(k.clone()),
                            self.to_connect_value(value_schema, v)?,
                        ));
                    }
                } else {
                    let pairs = json.as_array().ok_or_else(bad)?;
                    for pair in pairs {
                        let pair = pair.as_array().filter(|p| p.len() == 2).ok_or_else(|| {
                            DataError::new("Found invalid map entry instead of array tuple")
                        })?;
                        entries.push((
                            self.to_connect_value(key_schema, &pair[0])?,
                            self.to_connect_value(value_schema, &pair[1])?,
                        ));
                    }
                }
                Value::Map(entries)
            }
            SchemaType::Struct => {
                let obj = json.as_object().ok_or_else(bad)?;
                let mut result = Struct::new(schema.clone())?;
                for field in schema.fields() {
                    let v = self.to_connect_value(
                        Some(field.schema()),
                        obj.get(field.name()).unwrap_or(&Json::Null),
                    )?;
                    if !v.is_null() {
                        result.put_at(field.index(), v)?;
                    }
                }
                Value::Struct(result)
            }
        })
    }
}

/// Reads a payload straight into a Connect value guided by its schema, without building a
/// JSON tree first (structs, arrays, numbers, strings, booleans); other types (bytes and
/// decimals, maps) go through [`JsonConverter::to_connect_value`] on their JSON subtree, so
/// the result always equals that function's. An error makes the caller take the general
/// path, which reports it.
struct ValueSeed<'a> {
    converter: &'a JsonConverter,
    schema: &'a SchemaRef,
    /// For a struct: the bit set of the field indexes to decode (`None`: all); the others
    /// are skipped and stay null. Only ever set for the top-level value.
    read_mask: Option<u64>,
}

impl<'de> serde::de::DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        use serde::de::Error;
        match self.schema.schema_type() {
            SchemaType::Struct
            | SchemaType::Array
            | SchemaType::Int8
            | SchemaType::Int16
            | SchemaType::Int32
            | SchemaType::Int64
            | SchemaType::Float64
            | SchemaType::Boolean
            | SchemaType::String
            | SchemaType::Bytes => d.deserialize_any(self),
            _ => {
                let json = <Json as serde::Deserialize>::deserialize(d)?;
                self.converter
                    .to_connect_value(Some(self.schema), &json)
                    .map_err(|e| D::Error::custom(e.to_string()))
            }
        }
    }
}

impl ValueSeed<'_> {
    fn null<E: serde::de::Error>(&self) -> Result<Value, E> {
        self.converter
            .to_connect_value(Some(self.schema), &Json::Null)
            .map_err(|e| E::custom(e.to_string()))
    }
    fn mismatch<E: serde::de::Error>(&self) -> E {
        E::custom(format!(
            "Invalid JSON for {} field",
            self.schema.schema_type()
        ))
    }
    /// The scale of a decimal schema, `None` for other schemas (a decimal schema without a
    /// valid scale is a mismatch, which sends the caller to the general path that reports it).
    fn decimal_scale<E: serde::de::Error>(&self) -> Result<Option<i32>, E> {
        if self.schema.schema_type() == SchemaType::Bytes
            && self.schema.name() == Some(decimal::LOGICAL_NAME)
        {
            return decimal::scale(self.schema)
                .map(Some)
                .map_err(|_| self.mismatch::<E>());
        }
        Ok(None)
    }
    /// A decimal written as a JSON number (`decimal.format=NUMERIC`), from its plain text.
    fn numeric_decimal<E: serde::de::Error>(&self, text: &str, scale: i32) -> Result<Value, E> {
        decimal::unscaled_from_str(text, scale)
            .map(Value::Bytes)
            .map_err(|_| self.mismatch::<E>())
    }
    fn int<E: serde::de::Error>(&self, v: i64) -> Result<Value, E> {
        if let Some(scale) = self.decimal_scale::<E>()? {
            return self.numeric_decimal(itoa::Buffer::new().format(v), scale);
        }
        Ok(match self.schema.schema_type() {
            SchemaType::Int8 => Value::Int8(i8::try_from(v).map_err(|_| self.mismatch::<E>())?),
            SchemaType::Int16 => Value::Int16(i16::try_from(v).map_err(|_| self.mismatch::<E>())?),
            SchemaType::Int32 => Value::Int32(i32::try_from(v).map_err(|_| self.mismatch::<E>())?),
            SchemaType::Int64 => Value::Int64(v),
            SchemaType::Float64 => Value::Float64(v as f64),
            _ => return Err(self.mismatch()),
        })
    }
}

impl<'de> serde::de::Visitor<'de> for ValueSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "a JSON value for a {} field", self.schema.schema_type())
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.null()
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        self.null()
    }
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        match self.schema.schema_type() {
            SchemaType::Boolean => Ok(Value::Boolean(v)),
            _ => Err(self.mismatch()),
        }
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        self.int(v)
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        if let Some(scale) = self.decimal_scale::<E>()? {
            return self.numeric_decimal(itoa::Buffer::new().format(v), scale);
        }
        self.int(i64::try_from(v).map_err(|_| self.mismatch::<E>())?)
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        if let Some(scale) = self.decimal_scale::<E>()? {
            // As `number_plain_text` renders a non-integer number.
            return self.numeric_decimal(&format!("{v}"), scale);
        }
        match self.schema.schema_type() {
            SchemaType::Float64 => Ok(Value::Float64(v)),
            _ => Err(self.mismatch()),
        }
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        match self.schema.schema_type() {
            SchemaType::String => Ok(Value::String(v.to_owned())),
            // Bytes and decimals (`decimal.format=BASE64`, the default) as base64 text.
            SchemaType::Bytes => {
                self.decimal_scale::<E>()?;
                BASE64
                    .decode(v)
                    .map(Value::Bytes)
                    .map_err(|_| self.mismatch::<E>())
            }
            // Jackson's quoted non-finite doubles.
            SchemaType::Float64 => self
                .converter
                .to_connect_value(Some(self.schema), &Json::String(v.to_owned()))
                .map_err(|e| E::custom(e.to_string())),
            _ => Err(self.mismatch()),
        }
    }
    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        match self.schema.schema_type() {
            SchemaType::String => Ok(Value::String(v)),
            _ => self.visit_str(&v),
        }
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let Some(item) = self
            .schema
            .value_schema()
            .filter(|_| self.schema.schema_type() == SchemaType::Array)
        else {
            return Err(self.mismatch());
        };
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(v) = seq.next_element_seed(ValueSeed {
            converter: self.converter,
            schema: item,
            read_mask: None,
        })? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        use serde::de::Error;
        if self.schema.schema_type() != SchemaType::Struct {
            return Err(self.mismatch());
        }
        let fields = self.schema.fields();
        // One vector for the struct's values; which fields arrived is kept in a bit set (a
        // word for the usual struct, a vector beyond 64 fields).
        let mut values: Vec<Value> = Vec::with_capacity(fields.len());
        values.resize_with(fields.len(), || Value::Null);
        let mut seen_word = 0u64;
        let mut seen_more: Vec<bool> = if fields.len() > 64 {
            vec![false; fields.len()]
        } else {
            Vec::new()
        };
        let mut next_guess = 0usize;
        while let Some(idx) = map.next_key_seed(FieldIndexSeed {
            fields,
            guess: next_guess,
        })? {
            match idx {
                Some(i) if self.read_mask.is_some_and(|m| i >= 64 || m & (1 << i) == 0) => {
                    // Not read by the caller: skipped over, left null (and counted as seen,
                    // so no default is built for it either).
                    map.next_value::<serde::de::IgnoredAny>()?;
                    if i < 64 {
                        seen_word |= 1 << i;
                    } else {
                        seen_more[i] = true;
                    }
                    next_guess = i + 1;
                }
                Some(i) => {
                    values[i] = map.next_value_seed(ValueSeed {
                        converter: self.converter,
                        schema: fields[i].schema(),
                        read_mask: None,
                    })?;
                    if i < 64 {
                        seen_word |= 1 << i;
                    } else {
                        seen_more[i] = true;
                    }
                    next_guess = i + 1;
                }
                None => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        for (i, f) in fields.iter().enumerate() {
            let seen = if i < 64 {
                seen_word & (1 << i) != 0
            } else {
                seen_more[i]
            };
            if !seen {
                values[i] = self
                    .converter
                    .to_connect_value(Some(f.schema()), &Json::Null)
                    .map_err(|e| A::Error::custom(e.to_string()))?;
            }
        }
        // Every value was built for its field's schema (above, or by to_connect_value).
        Ok(Value::Struct(Struct::from_trusted_values(
            self.schema.clone(),
            values,
        )))
    }
}

/// Reads a struct's key as the index of the field it names (`None` for an unknown key),
/// straight from the input: no `String` per key (a `Cow<str>` key would be an owned copy
/// whatever the input, as serde deserialises `Cow`).
struct FieldIndexSeed<'a> {
    fields: &'a [headwater_api::schema::Field],
    /// The field expected next: fields usually come in schema order.
    guess: usize,
}

impl<'de> serde::de::DeserializeSeed<'de> for FieldIndexSeed<'_> {
    type Value = Option<usize>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> serde::de::Visitor<'de> for FieldIndexSeed<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a field name")
    }
    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<Option<usize>, E> {
        if self.fields.get(self.guess).is_some_and(|f| f.name() == key) {
            return Ok(Some(self.guess));
        }
        Ok(self.fields.iter().position(|f| f.name() == key))
    }
}

fn envelope_error() -> DataError {
    DataError::new(
        "JsonConverter with schemas.enable requires \"schema\" and \"payload\" fields and may not contain additional fields. If you are trying to deserialize plain JSON data, set schemas.enable=false in your converter configuration.",
    )
}

/// Appends an integer's decimal text (as Java prints it) without allocating.
/// `"name":` of a struct field (its precomputed text when the name needs no escaping).
fn write_field_key(out: &mut Vec<u8>, field: &headwater_api::Field) {
    match field.plain_json_key() {
        Some(key) => out.extend_from_slice(key),
        None => {
            write_json_string(out, field.name());
            out.push(b':');
        }
    }
}

fn write_int(out: &mut Vec<u8>, v: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

fn write_base64(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    let start = out.len();
    out.resize(
        start + base64::encoded_len(bytes.len(), true).unwrap_or(0),
        0,
    );
    let written = BASE64.encode_slice(bytes, &mut out[start..]).unwrap_or(0);
    out.truncate(start + written);
    out.push(b'"');
}

/// A JSON number or one of Jackson's quoted non-finite names as `f64`.
fn json_float(json: &Json) -> Option<f64> {
    match json {
        Json::Number(n) => n.as_f64(),
        Json::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

/// Plain decimal text of a JSON number (exact for integers; floats go through `f64`).
fn number_plain_text(n: &serde_json::Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    let f = n.as_f64().unwrap_or(0.0);
    let text = format!("{f}");
    text
}

fn truncate(text: &str) -> String {
    text.chars().take(100).collect()
}

/// Kafka's schemaless inference: integers as int64, other numbers as float64, objects as maps.
fn schemaless_value(json: &Json) -> Value {
    match json {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Boolean(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Int64(i),
            None => Value::Float64(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::String(s.clone()),
        Json::Array(items) => Value::Array(items.iter().map(schemaless_value).collect()),
        Json::Object(obj) => Value::Map(
            obj.iter()
                .map(|(k, v)| (Value::String(k.clone()), schemaless_value(v)))
                .collect(),
        ),
    }
}

/// Caches `bytes` for `schema` (by `Arc` address) in a cache of at most `limit` schemas,
/// emptied when full (`schemas.cache.size`; 0 caches nothing).
fn remember(
    cache: &mut HashMap<usize, (SchemaRef, Arc<[u8]>), foldhash::fast::RandomState>,
    limit: usize,
    schema: &SchemaRef,
    bytes: &Arc<[u8]>,
) {
    if cache.len() >= limit {
        cache.clear();
    }
    if limit > 0 {
        cache.insert(
            Arc::as_ptr(schema) as usize,
            (schema.clone(), bytes.clone()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(bytes: Option<Vec<u8>>) -> Option<String> {
        bytes.map(|b| String::from_utf8(b).unwrap())
    }

    #[test]
    fn a_split_value_is_the_shared_envelope_prefix_and_the_rest() {
        let schema = SchemaBuilder::struct_()
            .field("id", Schema::int64())
            .field("note", Schema::optional_string())
            .build_ref();
        let value = |id: i64| {
            Value::Struct(
                Struct::new(schema.clone())
                    .unwrap()
                    .with("id", id)
                    .with("note", "n\"1"),
            )
        };
        let conv = JsonConverter::new(JsonConverterConfig::default());
        let mut prefixes = Vec::new();
        for id in [1, 2] {
            let mut rest = Vec::new();
            let mut spans = Vec::new();
            assert!(conv
                .write_connect_data_spans(Some(&schema), &value(id), &mut rest, &mut spans)
                .unwrap());
            let whole = conv
                .from_connect_data("t", Some(&schema), &value(id))
                .unwrap()
                .unwrap();
            assert_eq!(with_spans(&rest, &spans), whole);
            let [(0, prefix)] = &spans[..] else {
                panic!("one span, the envelope prefix: {spans:?}")
            };
            assert!(prefix.starts_with(b"{\"schema\":") && prefix.ends_with(b",\"payload\":"));
            prefixes.push(prefix.clone());
        }
        assert!(
            Arc::ptr_eq(&prefixes[0], &prefixes[1]),
            "one prefix per schema"
        );
        // A Kafka null, and no schema: no spans.
        let (mut out, mut spans) = (Vec::new(), Vec::new());
        assert!(!conv
            .write_connect_data_spans(None, &Value::Null, &mut out, &mut spans)
            .unwrap());
        assert!(conv
            .write_connect_data_spans(None, &Value::Int32(3), &mut out, &mut spans)
            .unwrap());
        assert_eq!(out, br#"{"schema":null,"payload":3}"#);
        assert!(spans.is_empty());
        // Schemas disabled: the payload alone, no spans.
        let plain = JsonConverter::new(JsonConverterConfig {
            schemas_enable: false,
            ..JsonConverterConfig::default()
        });
        let mut out = Vec::new();
        assert!(plain
            .write_connect_data_spans(Some(&schema), &value(3), &mut out, &mut spans)
            .unwrap());
        assert_eq!(out, br#"{"id":3,"note":"n\"1"}"#);
        assert!(spans.is_empty());
    }

    /// The value `write_connect_data_spans` describes.
    fn with_spans(bytes: &[u8], spans: &[(usize, Arc<[u8]>)]) -> Vec<u8> {
        let mut whole = Vec::new();
        let mut from = 0;
        for (at, span) in spans {
            whole.extend_from_slice(&bytes[from..*at]);
            whole.extend_from_slice(span);
            from = *at;
        }
        whole.extend_from_slice(&bytes[from..]);
        whole
    }

    #[test]
    fn shared_and_replaced_structs_come_back_as_spans() {
        let long = "x".repeat(80);
        let source = SchemaBuilder::struct_()
            .field("version", Schema::string())
            .field("seq", Schema::optional_string())
            .field("table", Schema::string())
            .field("lsn", Schema::optional_int64())
            .field("xmin", Schema::optional_int64())
            .build_ref();
        let envelope = SchemaBuilder::struct_()
            .field("after", Schema::optional_int32())
            .field("source", source.clone())
            .build_ref();
        let block = Struct::new(source.clone())
            .unwrap()
            .with("version", long.as_str())
            .with("seq", "[1]")
            .with("table", long.as_str())
            .with("lsn", 5i64)
            .into_shared();
        let event = |source: Struct, after: i32| {
            Value::Struct(
                Struct::new(envelope.clone())
                    .unwrap()
                    .with("after", after)
                    .with("source", source),
            )
        };
        let conv = JsonConverter::new(JsonConverterConfig::default());
        let events = [
            event(block.clone(), 1),
            event(block.clone(), 2),
            event(
                block
                    .replacing([(1, Value::from("[2]")), (3, Value::Int64(6))])
                    .unwrap(),
                3,
            ),
            event(
                block
                    .replacing([(1, Value::from("[3]")), (3, Value::Int64(7))])
                    .unwrap(),
                4,
            ),
        ];
        let mut seen = Vec::new();
        for (i, v) in events.iter().enumerate() {
            let (mut out, mut spans) = (Vec::new(), Vec::new());
            conv.write_connect_data_spans(Some(&envelope), v, &mut out, &mut spans)
                .unwrap();
            let whole = conv
                .from_connect_data("t", Some(&envelope), v)
                .unwrap()
                .unwrap();
            assert_eq!(with_spans(&out, &spans), whole, "event {i}");
            assert!(spans.windows(2).all(|w| w[0].0 <= w[1].0));
            assert!(spans.iter().all(|(_, s)| s.len() >= MIN_SPAN));
            seen.push(spans);
        }
        // A shared struct holding a shared struct: its cached text is whole, whichever way
        // it was first written.
        let outer_schema = SchemaBuilder::struct_()
            .field("block", source.clone())
            .field("n", Schema::int32())
            .build_ref();
        let outer = |n: i32| {
            Struct::new(outer_schema.clone())
                .unwrap()
                .with("block", block.clone())
                .with("n", n)
                .into_shared()
        };
        let (o1, o2) = (outer(1), outer(2));
        let held = (o1.clone(), o2.clone());
        for o in [&o1, &o2, &o2, &o1] {
            let v = Value::Struct(o.clone());
            let (mut out, mut spans) = (Vec::new(), Vec::new());
            conv.write_connect_data_spans(Some(&outer_schema), &v, &mut out, &mut spans)
                .unwrap();
            let plain = conv
                .from_connect_data("t", Some(&outer_schema), &v)
                .unwrap()
                .unwrap();
            assert_eq!(with_spans(&out, &spans), plain);
            let text = String::from_utf8(plain).unwrap();
            assert!(text.contains(&long) && text.ends_with("}}"), "{text}");
        }
        drop(held);
        // The shared block: the envelope prefix and, once cached, the block's text.
        assert_eq!(seen[1].len(), 2, "{:?}", seen[1]);
        assert!(Arc::ptr_eq(&seen[1][0].1, &seen[0][0].1));
        // Replaced fields: the long segments around them (`,"xmin":null}` is copied).
        assert_eq!(seen[2].len(), 3, "{:?}", seen[2]);
        assert_eq!(seen[3].len(), 3);
        assert!(Arc::ptr_eq(&seen[2][1].1, &seen[3][1].1));
        assert!(Arc::ptr_eq(&seen[2][2].1, &seen[3][2].1));
    }

    #[test]
    fn records_repeating_the_last_schema_read_the_same_as_fresh_ones() {
        let schema = SchemaBuilder::struct_()
            .field("id", Schema::int64())
            .field("note", Schema::optional_string())
            .build_ref();
        let writer = JsonConverter::new(JsonConverterConfig::default());
        let bytes = |id: i64, note: &str| {
            let v = Value::Struct(
                Struct::new(schema.clone())
                    .unwrap()
                    .with("id", id)
                    .with("note", note),
            );
            writer
                .from_connect_data("t", Some(&schema), &v)
                .unwrap()
                .unwrap()
        };
        let reader = JsonConverter::new(JsonConverterConfig::default());
        for (id, note) in [(1, "a"), (2, "b\"}"), (3, "c")] {
            let b = bytes(id, note);
            let got = reader.to_connect_data("t", Some(&b)).unwrap();
            let fresh = JsonConverter::new(JsonConverterConfig::default())
                .to_connect_data("t", Some(&b))
                .unwrap();
            assert_eq!(got.value, fresh.value);
            assert_eq!(got.schema, fresh.schema);
        }
        // Same prefix, but not an envelope: the fast path must not accept it.
        let mut bad = bytes(4, "d");
        bad.truncate(bad.len() - 1);
        bad.extend_from_slice(br#","extra":1}"#);
        assert!(reader.to_connect_data("t", Some(&bad)).is_err());
        // Another schema after the cached one.
        let other = br#"{"schema":{"type":"int32","optional":false},"payload":7}"#;
        assert_eq!(
            reader.to_connect_data("t", Some(other)).unwrap().value,
            Value::Int32(7)
        );
    }

    #[test]
    fn a_reader_of_some_fields_gets_those_and_nulls_for_the_rest() {
        let golden = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/data/golden/debezium/postgres/00_snapshot_seed_tables.raw.jsonl"
        );
        let event = std::fs::read_to_string(golden)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Json>(l).unwrap())
            .find(|e| e["topic"] == "warehouse.orders")
            .unwrap();
        // The first read takes the general path, the repeats the fast one.
        let values = vec![event["value"].as_str().unwrap().as_bytes().to_vec(); 3];
        let read = FieldsRead {
            when_schema_has: vec!["op".into(), "after".into(), "source".into()],
            read: vec!["op".into(), "after".into()],
        };
        let full = JsonConverter::new(JsonConverterConfig::default());
        let partial = JsonConverter::new(JsonConverterConfig::default());
        for (i, bytes) in values.iter().enumerate() {
            let whole = full.to_connect_data("t", Some(bytes)).unwrap();
            let got = partial
                .to_connect_data_reading("t", Some(bytes), Some(&read))
                .unwrap();
            assert_eq!(got.schema, whole.schema);
            let (Value::Struct(whole), Value::Struct(got)) = (whole.value, got.value) else {
                panic!("envelopes are structs")
            };
            for field in got.schema().fields() {
                let (w, g) = (whole.get(field.name()), got.get(field.name()));
                if i == 0 || read.read.iter().any(|r| r == field.name()) {
                    // The first record takes the general path, which decodes everything.
                    assert_eq!(g, w, "record {i}, field {}", field.name());
                } else {
                    assert_eq!(g, Some(&Value::Null), "record {i}, field {}", field.name());
                }
            }
            assert!(!whole.get("source").unwrap().is_null());
        }
        // A value without the condition's fields is decoded whole.
        let schema = SchemaBuilder::struct_()
            .field("op", Schema::string())
            .field("note", Schema::string())
            .build_ref();
        let row = Value::Struct(
            Struct::new(schema.clone())
                .unwrap()
                .with("op", "c")
                .with("note", "kept"),
        );
        let bytes = full
            .from_connect_data("t", Some(&schema), &row)
            .unwrap()
            .unwrap();
        for _ in 0..2 {
            let got = partial
                .to_connect_data_reading("t", Some(&bytes), Some(&read))
                .unwrap();
            assert_eq!(got.value, row);
        }
    }

    #[test]
    fn schema_guided_reading_equals_the_json_tree_path() {
        use serde::de::DeserializeSeed;
        let dec = headwater_api::logical::decimal::builder(2)
            .optional()
            .build_ref();
        let mut wide = SchemaBuilder::struct_();
        for i in 0..70 {
            wide = wide.field(format!("f{i}"), Schema::optional_int32());
        }
        let wide = wide.build_ref();
        let row = SchemaBuilder::struct_()
            .field("id", Schema::int64())
            .field("amount", dec.clone())
            .field("raw", SchemaBuilder::bytes().optional().build_ref())
            .field("note", Schema::optional_string())
            .build_ref();
        let c = JsonConverter::new(JsonConverterConfig::default());
        let cases: Vec<(&SchemaRef, &str)> = vec![
            (&row, r#"{"id":1,"amount":"AJY=","raw":"AQID","note":"x"}"#),
            (&row, r#"{"id":2,"amount":1.5,"raw":null}"#),
            (&row, r#"{"amount":-7,"id":3,"note":null,"raw":""}"#),
            (&row, r#"{"id":4,"amount":18446744073709551615}"#),
            (&dec, r#""AJY=""#),
            (&dec, "12.34"),
            (&wide, r#"{"f0":1,"f63":63,"f64":64,"f69":69}"#),
        ];
        for (schema, text) in cases {
            let json: Json = serde_json::from_str(text).unwrap();
            let general = c.to_connect_value(Some(schema), &json).unwrap();
            let seed = ValueSeed {
                converter: &c,
                schema,
                read_mask: None,
            };
            let guided = seed
                .deserialize(&mut serde_json::Deserializer::from_str(text))
                .unwrap();
            assert_eq!(guided, general, "{text}");
        }
        // Bad base64 is an error on both paths (the guided one hands over to the general one).
        let seed = ValueSeed {
            converter: &c,
            schema: &row,
            read_mask: None,
        };
        let bad = r#"{"id":1,"amount":"not base64!"}"#;
        assert!(seed
            .deserialize(&mut serde_json::Deserializer::from_str(bad))
            .is_err());
        assert!(c
            .to_connect_value(Some(&row), &serde_json::from_str(bad).unwrap())
            .is_err());
    }

    #[test]
    fn shared_structs_are_cached_and_never_stale() {
        let inner = SchemaBuilder::struct_()
            .field("a b", Schema::int32())
            .field("q\"", Schema::optional_string())
            .build_ref();
        let outer = SchemaBuilder::struct_()
            .field("inner", inner.clone())
            .field("n", Schema::int32())
            .build_ref();
        let converter = JsonConverter::new(JsonConverterConfig {
            schemas_enable: false,
            ..Default::default()
        });
        let block = Struct::new(inner)
            .unwrap()
            .with("a b", 1i32)
            .with("q\"", "x");
        let held = block.clone(); // shared: its payload text gets cached
        let event = |inner: Struct, n: i32| {
            Value::Struct(
                Struct::new(outer.clone())
                    .unwrap()
                    .with("inner", inner)
                    .with("n", n),
            )
        };
        let write = |v: &Value| text(converter.from_connect_data("t", Some(&outer), v).unwrap());
        let expected = r#"{"inner":{"a b":1,"q\"":"x"},"n":1}"#;
        assert_eq!(write(&event(block.clone(), 1)).as_deref(), Some(expected));
        assert_eq!(write(&event(block.clone(), 1)).as_deref(), Some(expected));
        // Changing a shared struct copies its values: the cached text is never reused for it.
        let mut changed = held.clone();
        changed.put("a b", 2i32).unwrap();
        assert_eq!(
            write(&event(changed, 2)).as_deref(),
            Some(r#"{"inner":{"a b":2,"q\"":"x"},"n":2}"#)
        );
        assert_eq!(write(&event(held, 1)).as_deref(), Some(expected));
    }

    #[test]
    fn structs_with_replaced_fields_write_as_their_full_copies() {
        let schema = SchemaBuilder::struct_()
            .field("first", Schema::optional_string())
            .field("a b", Schema::int64())
            .field("mid", Schema::string())
            .field("seq", Schema::optional_string())
            .field(
                "last",
                SchemaBuilder::int32()
                    .optional()
                    .default_value(Value::Int32(7))
                    .build_ref(),
            )
            .build_ref();
        let base = Struct::new(schema.clone())
            .unwrap()
            .with("first", "f\"")
            .with("a b", 1i64)
            .with("mid", "m")
            .with("seq", "[\"1\",null]")
            .into_shared();
        for replace_null_with_default in [false, true] {
            let converter = JsonConverter::new(JsonConverterConfig {
                schemas_enable: false,
                replace_null_with_default,
                ..Default::default()
            });
            let write = |s: &Struct| {
                text(
                    converter
                        .from_connect_data("t", Some(&schema), &Value::Struct(s.clone()))
                        .unwrap(),
                )
                .unwrap()
            };
            let cases = [
                base.replacing([(1, Value::Int64(2)), (3, Value::from("x\ny"))])
                    .unwrap(),
                base.replacing([(0, Value::Null)]).unwrap(),
                base.replacing([(4, Value::Null)]).unwrap(),
                base.replacing([(4, Value::Int32(3))]).unwrap(),
                base.replacing([(0, Value::from("z")), (4, Value::Int32(1))])
                    .unwrap(),
            ];
            // Each twice: serialised, then from the cache.
            for case in cases.iter().chain(&cases) {
                assert!(case.replaced_parts().is_some());
                let full = Struct::from_values(schema.clone(), case.values().to_vec()).unwrap();
                assert_eq!(write(case), write(&full));
            }
        }
    }

    #[test]
    fn schemas_disabled_writes_bare_payload() {
        let conv = JsonConverter::new(JsonConverterConfig {
            schemas_enable: false,
            ..Default::default()
        });
        let schema = SchemaBuilder::struct_()
            .field("id", Schema::int32())
            .field("price", decimal::builder(2).optional().build_ref())
            .build_ref();
        let v = Struct::new(schema.clone())
            .unwrap()
            .with("id", 7i32)
            .with("price", decimal::unscaled_from_i128(-1));
        let out = conv
            .from_connect_data("t", Some(&schema), &Value::Struct(v))
            .unwrap();
        assert_eq!(text(out).unwrap(), r#"{"id":7,"price":"/w=="}"#);
        // A null value with a schema is the JSON literal null, not a tombstone.
        let opt = SchemaBuilder::string().optional().build_ref();
        assert_eq!(
            text(
                conv.from_connect_data("t", Some(&opt), &Value::Null)
                    .unwrap()
            )
            .unwrap(),
            "null"
        );
        assert_eq!(
            conv.from_connect_data("t", None, &Value::Null).unwrap(),
            None
        );
        let back = conv
            .to_connect_data("t", Some(br#"{"a":[1,2.5,"x",null]}"#))
            .unwrap();
        assert_eq!(
            back.value,
            Value::Map(vec![(
                "a".into(),
                Value::Array(vec![
                    Value::Int64(1),
                    Value::Float64(2.5),
                    "x".into(),
                    Value::Null
                ])
            )])
        );
    }

    #[test]
    fn numeric_decimals_and_map_layouts() {
        let conv = JsonConverter::new(JsonConverterConfig {
            decimal_format: DecimalFormat::Numeric,
            ..Default::default()
        });
        let schema = SchemaBuilder::struct_()
            .field("amount", decimal::builder(2).build_ref())
            .field(
                "by_name",
                SchemaBuilder::map(Schema::string(), Schema::int32()).build_ref(),
            )
            .field(
                "by_id",
                SchemaBuilder::map(Schema::int32(), Schema::string()).build_ref(),
            )
            .build_ref();
        let v = Struct::new(schema.clone())
            .unwrap()
            .with("amount", decimal::unscaled_from_str("-12.30", 2).unwrap())
            .with("by_name", Value::Map(vec![("a".into(), Value::Int32(1))]))
            .with("by_id", Value::Map(vec![(Value::Int32(1), "a".into())]));
        let out = text(
            conv.from_connect_data("t", Some(&schema), &Value::Struct(v.clone()))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            out,
            concat!(
                r#"{"schema":{"type":"struct","fields":["#,
                r#"{"type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2"},"field":"amount"},"#,
                r#"{"type":"map","keys":{"type":"string","optional":false},"values":{"type":"int32","optional":false},"optional":false,"field":"by_name"},"#,
                r#"{"type":"map","keys":{"type":"int32","optional":false},"values":{"type":"string","optional":false},"optional":false,"field":"by_id"}"#,
                r#"],"optional":false},"payload":{"amount":-12.30,"by_name":{"a":1},"by_id":[[1,"a"]]}}"#
            )
        );
        let back = conv.to_connect_data("t", Some(out.as_bytes())).unwrap();
        assert_eq!(back.value, Value::Struct(v));
    }

    #[test]
    fn null_handling_follows_kafka() {
        let conv = JsonConverter::new(JsonConverterConfig::default());
        let schema = SchemaBuilder::struct_()
            .field(
                "s",
                SchemaBuilder::string()
                    .optional()
                    .default_value("d".into())
                    .build_ref(),
            )
            .field("r", Schema::int32())
            .build_ref();
        let mut v = Struct::new(schema.clone()).unwrap();
        v.put("r", 1i32).unwrap();
        let out = text(
            conv.from_connect_data("t", Some(&schema), &Value::Struct(v.clone()))
                .unwrap(),
        )
        .unwrap();
        assert!(out.ends_with(r#""payload":{"s":"d","r":1}}"#), "{out}");
        let keep_null = JsonConverter::new(JsonConverterConfig {
            replace_null_with_default: false,
            ..Default::default()
        });
        let out = text(
            keep_null
                .from_connect_data("t", Some(&schema), &Value::Struct(v))
                .unwrap(),
        )
        .unwrap();
        assert!(out.ends_with(r#""payload":{"s":null,"r":1}}"#), "{out}");
        let missing_required = Struct::new(schema.clone()).unwrap();
        assert!(conv
            .from_connect_data("t", Some(&schema), &Value::Struct(missing_required))
            .is_err());
    }

    #[test]
    fn envelope_must_have_exactly_schema_and_payload() {
        let conv = JsonConverter::new(JsonConverterConfig::default());
        for bad in [
            &br#"{"payload":1}"#[..],
            br#"{"schema":null,"payload":1,"x":2}"#,
            b"[1]",
            b"not json",
        ] {
            let err = conv.to_connect_data("t", Some(bad)).unwrap_err();
            assert!(err.message().contains("schemas.enable"), "{err}");
        }
        let ok = conv
            .to_connect_data("t", Some(br#"{"schema":null,"payload":{"k":"v"}}"#))
            .unwrap();
        assert_eq!(ok.schema, None);
        assert!(conv
            .to_connect_data(
                "t",
                Some(br#"{"schema":{"type":"int32","optional":false},"payload":"x"}"#)
            )
            .is_err());
    }

    #[test]
    fn config_from_props() {
        let mut props = Properties::new();
        props.insert("schemas.enable".into(), "false".into());
        props.insert("decimal.format".into(), "numeric".into());
        let cfg = JsonConverterConfig::from_props(&props).unwrap();
        assert!(!cfg.schemas_enable);
        assert_eq!(cfg.decimal_format, DecimalFormat::Numeric);
        props.insert("decimal.format".into(), "hex".into());
        let err = JsonConverterConfig::from_props(&props).unwrap_err();
        assert_eq!(err.error_count(), 1);
    }
}
