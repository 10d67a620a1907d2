//! Key, value and header conversion of a connector's records, configured from its properties
//! (`key.converter`, `value.converter`, `key.converter.<setting>`, ...) over the worker's
//! defaults (Kafka Connect's: `JsonConverter` with schemas for both). Converter classes come
//! from `headwater_format::converters` (JsonConverter, AvroConverter, StringConverter,
//! ByteArrayConverter).
//! Also the text form of a record for `errors.log.include.messages` ([`describe_record`]).

use headwater_api::config::ConfigValidation;
use headwater_api::{Header, Headers, Properties, SourceRecord, Value};
use headwater_format::converters::{create_converter, find_converter, Converter};
use headwater_format::{JsonConverter, JsonConverterConfig};

const DEFAULT_CONVERTER: &str = "org.apache.kafka.connect.json.JsonConverter";

/// The converters of one connector.
pub struct Converters {
    pub key: Box<dyn Converter>,
    pub value: Box<dyn Converter>,
    header_json: JsonConverter,
}

/// Settings under `prefix` (e.g. `key.converter.`), with the prefix stripped.
fn sub_props(props: &Properties, prefix: &str) -> Properties {
    props
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix(prefix)
                .map(|rest| (rest.to_owned(), v.clone()))
        })
        .collect()
}

/// A converter's own settings: those under `<which>.` plus `converter.type` (`key`/`value`),
/// which Kafka Connect's worker sets so one converter class can tell keys from values.
fn converter_props(props: &Properties, which: &str) -> Properties {
    let mut own = sub_props(props, &format!("{which}."));
    let kind = which.strip_suffix(".converter").unwrap_or(which);
    own.entry("converter.type".to_owned())
        .or_insert_with(|| kind.to_owned());
    own
}

impl Converters {
    /// Validates the converter settings, reporting each bad key.
    pub fn validate(props: &Properties) -> ConfigValidation {
        let mut v = ConfigValidation::default();
        for which in ["key.converter", "value.converter"] {
            let class = props.get(which).map_or(DEFAULT_CONVERTER, String::as_str);
            let Some(plugin) = find_converter(class) else {
                v.add_error(
                    which,
                    format!("Invalid value {class} for configuration {which}: Class {class} could not be found."),
                );
                continue;
            };
            if let Err(errors) = (plugin.configure)(&converter_props(props, which)) {
                for e in errors.entries() {
                    for message in &e.errors {
                        v.add_error(&format!("{which}.{}", e.name), message.clone());
                    }
                }
            }
        }
        v
    }

    /// Builds the converters; only called with validated properties.
    pub fn from_props(props: &Properties) -> Result<Self, headwater_api::ConnectError> {
        let make = |which: &str| {
            let class = props.get(which).map_or(DEFAULT_CONVERTER, String::as_str);
            create_converter(class, &converter_props(props, which))
        };
        Ok(Converters {
            key: make("key.converter")?,
            value: make("value.converter")?,
            header_json: JsonConverter::new(JsonConverterConfig {
                schemas_enable: false,
                ..JsonConverterConfig::default()
            }),
        })
    }

    /// Header values as bytes, the way Kafka Connect's `SimpleHeaderConverter` writes them:
    /// strings as UTF-8, other primitives as their text, structures as JSON, null as null.
    /// Strings and bytes are used as they are; the text of other values is written to
    /// `encoded` (cleared first). `out` gets one entry per header, in order; read a value back
    /// with [`header_value`]. Nothing is allocated once the two buffers have grown.
    pub fn encode_headers(
        &self,
        headers: &Headers,
        encoded: &mut Vec<u8>,
        out: &mut Vec<HeaderBytes>,
    ) {
        encoded.clear();
        out.clear();
        for h in headers.iter() {
            let start = encoded.len();
            let text = |encoded: &mut Vec<u8>, v: &dyn std::fmt::Display| {
                use std::io::Write as _;
                let _ = write!(encoded, "{v}");
                HeaderBytes::Encoded(start..encoded.len())
            };
            out.push(match &h.value {
                Value::Null => HeaderBytes::Null,
                Value::String(_) | Value::Bytes(_) => HeaderBytes::AsIs,
                Value::Boolean(b) => text(encoded, b),
                Value::Int8(v) => text(encoded, v),
                Value::Int16(v) => text(encoded, v),
                Value::Int32(v) => text(encoded, v),
                Value::Int64(v) => text(encoded, v),
                other => match self
                    .header_json
                    .from_connect_data("", h.schema.as_ref(), other)
                {
                    Ok(Some(bytes)) => {
                        encoded.extend_from_slice(&bytes);
                        HeaderBytes::Encoded(start..encoded.len())
                    }
                    _ => HeaderBytes::Null,
                },
            });
        }
    }
}

/// Where a header's bytes are, after [`Converters::encode_headers`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderBytes {
    /// A null value.
    Null,
    /// The value's own bytes (a string's UTF-8, a byte array).
    AsIs,
    /// This range of the encoded buffer.
    Encoded(std::ops::Range<usize>),
}

/// The bytes of `header` as [`Converters::encode_headers`] placed them.
pub fn header_value<'a>(
    header: &'a Header,
    at: &HeaderBytes,
    encoded: &'a [u8],
) -> Option<&'a [u8]> {
    match (at, &header.value) {
        (HeaderBytes::AsIs, Value::String(s)) => Some(s.as_bytes()),
        (HeaderBytes::AsIs, Value::Bytes(b)) => Some(b),
        (HeaderBytes::Encoded(range), _) => encoded.get(range.clone()),
        _ => None,
    }
}

/// The record as `errors.log.include.messages=true` logs it, in the shape of Kafka Connect's
/// `SourceRecord.toString()`: topic, partition, source partition and offset, key and value
/// (structs as `Struct{field=value,...}`).
pub fn describe_record(record: &SourceRecord) -> String {
    format!(
        "SourceRecord{{topic={}, kafkaPartition={}, sourcePartition={}, sourceOffset={}, key={}, value={}}}",
        record.topic,
        record
            .kafka_partition
            .map_or_else(|| "null".to_owned(), |p| p.to_string()),
        serde_json::to_string(&record.source_partition).unwrap_or_default(),
        serde_json::to_string(&record.source_offset).unwrap_or_default(),
        show_value(&record.key),
        show_value(&record.value)
    )
}

/// A value as Kafka Connect's `toString()` shows it.
fn show_value(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Boolean(v) => v.to_string(),
        Value::Int8(v) => v.to_string(),
        Value::Int16(v) => v.to_string(),
        Value::Int32(v) => v.to_string(),
        Value::Int64(v) => v.to_string(),
        Value::Float32(v) => v.to_string(),
        Value::Float64(v) => v.to_string(),
        Value::String(s) => s.clone(),
        Value::Bytes(b) => format!("[{} bytes]", b.len()),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(show_value).collect::<Vec<_>>().join(", ")
        ),
        Value::Map(entries) => format!(
            "{{{}}}",
            entries
                .iter()
                .map(|(k, v)| format!("{}={}", show_value(k), show_value(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Struct(s) => {
            let fields: Vec<String> = s
                .schema()
                .fields()
                .iter()
                .zip(s.values())
                .filter(|(_, v)| !v.is_null())
                .map(|(f, v)| format!("{}={}", f.name(), show_value(v)))
                .collect();
            format!("Struct{{{}}}", fields.join(","))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headwater_api::{OffsetMap, OffsetValue, Schema, SchemaBuilder, Struct};

    #[test]
    fn records_are_described_like_kafka_connect() {
        let schema = SchemaBuilder::struct_()
            .field("id", Schema::int64())
            .field("name", SchemaBuilder::string().optional().build_ref())
            .field("tags", SchemaBuilder::array(Schema::string()).build_ref())
            .build_ref();
        let value = Struct::new(schema.clone())
            .unwrap()
            .with("id", 7i64)
            .with("tags", Value::Array(vec!["a".into(), "b".into()]));
        let mut offset = OffsetMap::new();
        offset.insert("seq".into(), OffsetValue::Int(7));
        let record = SourceRecord::new(
            OffsetMap::new(),
            offset,
            "t",
            None,
            Value::Int32(7),
            Some(schema),
            Value::Struct(value),
        );
        assert_eq!(
            describe_record(&record),
            "SourceRecord{topic=t, kafkaPartition=null, sourcePartition={}, sourceOffset={\"seq\":7}, key=7, value=Struct{id=7,tags=[a, b]}}"
        );
    }
}
