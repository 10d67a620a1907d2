//! The converter contract and the converters besides JSON: Kafka Connect's `StringConverter`
//! and `ByteArrayConverter`, plus a small registry resolving `key.converter` /
//! `value.converter` class names (and short aliases) to configured converters.
//!
//! Invariants:
//! - a null value serialises to a Kafka null (`Ok(None)`) in every converter here, and a Kafka
//!   null deserialises to a null value with the converter's optional schema;
//! - an unknown class name is an error that lists the known ones;
//! - converter properties are given without the `key.converter.` / `value.converter.` prefix,
//!   as Kafka Connect passes them.

use headwater_api::config::{ConfigKey, ConfigType, Importance, Width};
use headwater_api::{
    ConfigDef, ConfigValidation, ConnectError, DataError, FieldsRead, Properties, Schema,
    SchemaRef, SchemaType, Value,
};

use crate::java_text::{write_java_double, write_java_float};
use crate::json::{JsonConverter, JsonConverterConfig, SchemaAndValue};

/// What the engine needs of a converter (Kafka's `org.apache.kafka.connect.storage.Converter`).
pub trait Converter: Send + Sync {
    /// Serialises a value; `Ok(None)` is a Kafka null. (Named as in Kafka Connect.)
    #[allow(clippy::wrong_self_convention)]
    fn from_connect_data(
        &self,
        topic: &str,
        schema: Option<&SchemaRef>,
        value: &Value,
    ) -> Result<Option<Vec<u8>>, DataError>;
    /// [`Converter::from_connect_data`] appending to a caller's buffer, which the engine reuses
    /// from record to record: returns `false` (and appends nothing) for a Kafka null.
    fn write_connect_data(
        &self,
        topic: &str,
        schema: Option<&SchemaRef>,
        value: &Value,
        out: &mut Vec<u8>,
    ) -> Result<bool, DataError> {
        match self.from_connect_data(topic, schema, value)? {
            Some(bytes) => {
                out.extend_from_slice(&bytes);
                Ok(true)
            }
            None => Ok(false),
        }
    }
    /// [`Converter::write_connect_data`] that may leave bytes many values share out of `out`
    /// and list them in `spans` instead, as `(index into out, bytes)`: the value is `out` with
    /// each span's bytes inserted before its index (indexes in increasing order). A converter
    /// gives the same `Arc` whenever it means the same bytes (the JSON converter with schemas:
    /// the `{"schema":…,"payload":` of one schema, the cached text of shared structs), so a
    /// writer can store repeats of them by reference, as the log's LZ4 batches do. The default
    /// writes everything into `out`.
    fn write_connect_data_spans(
        &self,
        topic: &str,
        schema: Option<&SchemaRef>,
        value: &Value,
        out: &mut Vec<u8>,
        spans: &mut Vec<crate::json::SharedSpan>,
    ) -> Result<bool, DataError> {
        let _ = spans;
        self.write_connect_data(topic, schema, value, out)
    }
    /// Deserialises bytes (`None` = Kafka null).
    fn to_connect_data(
        &self,
        topic: &str,
        bytes: Option<&[u8]>,
    ) -> Result<SchemaAndValue, DataError>;
    /// [`Converter::to_connect_data`] for a reader of only some top-level struct fields
    /// ([`FieldsRead`]): a converter may leave the others null (required ones too) instead of
    /// decoding them. The default decodes everything.
    fn to_connect_data_reading(
        &self,
        topic: &str,
        bytes: Option<&[u8]>,
        fields_read: &FieldsRead,
    ) -> Result<SchemaAndValue, DataError> {
        let _ = fields_read;
        self.to_connect_data(topic, bytes)
    }
}

impl Converter for JsonConverter {
    fn from_connect_data(
        &self,
        topic: &str,
        schema: Option<&SchemaRef>,
        value: &Value,
    ) -> Result<Option<Vec<u8>>, DataError> {
        JsonConverter::from_connect_data(self, topic, schema, value)
    }
    fn write_connect_data(
        &self,
        _topic: &str,
        schema: Option<&SchemaRef>,
        value: &Value,
        out: &mut Vec<u8>,
    ) -> Result<bool, DataError> {
        JsonConverter::write_connect_data(self, schema, value, out)
    }
    fn write_connect_data_spans(
        &self,
        _topic: &str,
        schema: Option<&SchemaRef>,
        value: &Value,
        out: &mut Vec<u8>,
        spans: &mut Vec<crate::json::SharedSpan>,
    ) -> Result<bool, DataError> {
        JsonConverter::write_connect_data_spans(self, schema, value, out, spans)
    }
    fn to_connect_data(
        &self,
        topic: &str,
        bytes: Option<&[u8]>,
    ) -> Result<SchemaAndValue, DataError> {
        JsonConverter::to_connect_data(self, topic, bytes)
    }
    fn to_connect_data_reading(
        &self,
        topic: &str,
        bytes: Option<&[u8]>,
        fields_read: &FieldsRead,
    ) -> Result<SchemaAndValue, DataError> {
        JsonConverter::to_connect_data_reading(self, topic, bytes, Some(fields_read))
    }
}

/// Character sets `converter.encoding` accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Utf8,
    Latin1,
    Ascii,
}

impl Encoding {
    /// Java charset names and aliases for the supported sets.
    pub fn parse(name: &str) -> Option<Encoding> {
        match name.trim().to_ascii_uppercase().replace('_', "-").as_str() {
            "UTF-8" | "UTF8" => Some(Encoding::Utf8),
            "ISO-8859-1" | "ISO8859-1" | "LATIN1" => Some(Encoding::Latin1),
            "US-ASCII" | "ASCII" => Some(Encoding::Ascii),
            _ => None,
        }
    }

    fn encode(self, s: &str) -> Vec<u8> {
        match self {
            Encoding::Utf8 => s.as_bytes().to_vec(),
            // Java replaces unmappable characters with '?'.
            Encoding::Latin1 => s
                .chars()
                .map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?'))
                .collect(),
            Encoding::Ascii => s
                .chars()
                .map(|c| if c.is_ascii() { c as u8 } else { b'?' })
                .collect(),
        }
    }

    fn decode(self, b: &[u8]) -> String {
        match self {
            Encoding::Utf8 => String::from_utf8_lossy(b).into_owned(),
            Encoding::Latin1 => b.iter().map(|&x| char::from(x)).collect(),
            Encoding::Ascii => b
                .iter()
                .map(|&x| {
                    if x.is_ascii() {
                        char::from(x)
                    } else {
                        '\u{FFFD}'
                    }
                })
                .collect(),
        }
    }
}

/// `org.apache.kafka.connect.storage.StringConverter`: values become their `toString()` text.
#[derive(Debug, Clone)]
pub struct StringConverter {
    encoding: Encoding,
}

impl StringConverter {
    pub fn config_def() -> ConfigDef {
        ConfigDef::new().define(
            ConfigKey::new("converter.encoding", ConfigType::String)
                .default_str("UTF-8")
                .importance(Importance::High)
                .width(Width::Medium)
                .doc("The name of the Java character set to use for encoding strings as byte arrays."),
        )
    }

    pub fn configure(props: &Properties) -> Result<Self, ConfigValidation> {
        let def = Self::config_def();
        let parsed = def.parse(props)?;
        let name = parsed.get_string("converter.encoding").unwrap_or("UTF-8");
        match Encoding::parse(name) {
            Some(encoding) => Ok(StringConverter { encoding }),
            None => {
                let mut v = def.validate(props);
                v.add_error(
                    "converter.encoding",
                    format!("Invalid value {name} for configuration converter.encoding: character set not supported by Headwater (supported: UTF-8, ISO-8859-1, US-ASCII)"),
                );
                Err(v)
            }
        }
    }

    pub fn new() -> Self {
        StringConverter {
            encoding: Encoding::Utf8,
        }
    }
}

impl Default for StringConverter {
    fn default() -> Self {
        Self::new()
    }
}

/// Java's `toString()` of a Connect value (`Struct{a=1,b=x}`, `[1, 2]`, `{k=v}`).
pub fn java_to_string(value: &Value) -> Result<String, DataError> {
    Ok(match value {
        Value::Null => "null".to_owned(),
        Value::Boolean(b) => b.to_string(),
        Value::Int8(v) => v.to_string(),
        Value::Int16(v) => v.to_string(),
        Value::Int32(v) => v.to_string(),
        Value::Int64(v) => v.to_string(),
        Value::Float32(v) => {
            let mut out = Vec::new();
            write_java_float(&mut out, *v);
            String::from_utf8_lossy(&out).trim_matches('"').to_owned()
        }
        Value::Float64(v) => {
            let mut out = Vec::new();
            write_java_double(&mut out, *v);
            String::from_utf8_lossy(&out).trim_matches('"').to_owned()
        }
        Value::String(s) => s.clone(),
        Value::Bytes(_) => {
            return Err(DataError::new(
                "StringConverter does not serialize bytes values in Headwater (Java would write the array's identity, [B@...); use ByteArrayConverter",
            ))
        }
        Value::Array(items) => {
            let parts = items.iter().map(java_to_string).collect::<Result<Vec<_>, _>>()?;
            format!("[{}]", parts.join(", "))
        }
        Value::Map(entries) => {
            let parts = entries
                .iter()
                .map(|(k, v)| Ok(format!("{}={}", java_to_string(k)?, java_to_string(v)?)))
                .collect::<Result<Vec<_>, DataError>>()?;
            format!("{{{}}}", parts.join(", "))
        }
        Value::Struct(s) => {
            let mut parts = Vec::new();
            for (f, v) in s.schema().fields().iter().zip(s.values()) {
                if !v.is_null() {
                    parts.push(format!("{}={}", f.name(), java_to_string(v)?));
                }
            }
            format!("Struct{{{}}}", parts.join(","))
        }
    })
}

impl Converter for StringConverter {
    fn from_connect_data(
        &self,
        _topic: &str,
        _schema: Option<&SchemaRef>,
        value: &Value,
    ) -> Result<Option<Vec<u8>>, DataError> {
        if value.is_null() {
            return Ok(None);
        }
        Ok(Some(self.encoding.encode(&java_to_string(value)?)))
    }
    fn to_connect_data(
        &self,
        _topic: &str,
        bytes: Option<&[u8]>,
    ) -> Result<SchemaAndValue, DataError> {
        Ok(SchemaAndValue {
            schema: Some(Schema::optional_string()),
            value: bytes.map_or(Value::Null, |b| Value::String(self.encoding.decode(b))),
        })
    }
}

/// `org.apache.kafka.connect.converters.ByteArrayConverter`: bytes pass through untouched.
#[derive(Debug, Clone, Default)]
pub struct ByteArrayConverter;

impl Converter for ByteArrayConverter {
    fn from_connect_data(
        &self,
        _topic: &str,
        schema: Option<&SchemaRef>,
        value: &Value,
    ) -> Result<Option<Vec<u8>>, DataError> {
        if let Some(s) = schema {
            if s.schema_type() != SchemaType::Bytes {
                return Err(DataError::new(format!(
                    "Invalid schema type for ByteArrayConverter: {}",
                    s.schema_type()
                )));
            }
        }
        match value {
            Value::Null => Ok(None),
            Value::Bytes(b) => Ok(Some(b.clone())),
            other => Err(DataError::new(format!(
                "ByteArrayConverter is not compatible with objects of type class {}",
                java_class(other)
            ))),
        }
    }
    fn to_connect_data(
        &self,
        _topic: &str,
        bytes: Option<&[u8]>,
    ) -> Result<SchemaAndValue, DataError> {
        Ok(SchemaAndValue {
            schema: Some(headwater_api::SchemaBuilder::bytes().optional().build_ref()),
            value: bytes.map_or(Value::Null, |b| Value::Bytes(b.to_vec())),
        })
    }
}

fn java_class(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "java.lang.String",
        Value::Struct(_) => "org.apache.kafka.connect.data.Struct",
        Value::Int32(_) => "java.lang.Integer",
        Value::Int64(_) => "java.lang.Long",
        Value::Map(_) => "java.util.HashMap",
        Value::Array(_) => "java.util.ArrayList",
        _ => "java.lang.Object",
    }
}

/// One converter class in the registry.
pub struct ConverterPlugin {
    pub class: &'static str,
    pub aliases: &'static [&'static str],
    pub config_def: fn() -> ConfigDef,
    pub configure: fn(&Properties) -> Result<Box<dyn Converter>, ConfigValidation>,
}

/// Every converter Headwater has.
pub fn converters() -> Vec<ConverterPlugin> {
    vec![
        ConverterPlugin {
            class: "io.confluent.connect.avro.AvroConverter",
            aliases: &["AvroConverter", "Avro"],
            config_def: crate::avro::AvroConverterConfig::config_def,
            configure: |p| {
                crate::avro::AvroConverterConfig::from_props(p)
                    .map(|c| Box::new(crate::avro::AvroConverter::new(c)) as Box<dyn Converter>)
            },
        },
        ConverterPlugin {
            class: "org.apache.kafka.connect.json.JsonConverter",
            aliases: &["JsonConverter", "Json"],
            config_def: JsonConverterConfig::config_def,
            configure: |p| {
                JsonConverterConfig::from_props(p)
                    .map(|c| Box::new(JsonConverter::new(c)) as Box<dyn Converter>)
            },
        },
        ConverterPlugin {
            class: "org.apache.kafka.connect.storage.StringConverter",
            aliases: &["StringConverter", "String"],
            config_def: StringConverter::config_def,
            configure: |p| StringConverter::configure(p).map(|c| Box::new(c) as Box<dyn Converter>),
        },
        ConverterPlugin {
            class: "org.apache.kafka.connect.converters.ByteArrayConverter",
            aliases: &["ByteArrayConverter", "ByteArray"],
            config_def: ConfigDef::new,
            configure: |_| Ok(Box::new(ByteArrayConverter) as Box<dyn Converter>),
        },
    ]
}

/// The plugin for a class name or alias.
pub fn find_converter(name: &str) -> Option<ConverterPlugin> {
    let name = name.trim();
    converters()
        .into_iter()
        .find(|c| c.class == name || c.aliases.contains(&name))
}

/// A configured converter for `class` (props without the `key.converter.` prefix).
pub fn create_converter(
    class: &str,
    props: &Properties,
) -> Result<Box<dyn Converter>, ConnectError> {
    let plugin = find_converter(class).ok_or_else(|| {
        let known: Vec<&str> = converters().iter().map(|c| c.class).collect();
        ConnectError::config(format!(
            "Class {class} could not be found. Known converters: {}",
            known.join(", ")
        ))
    })?;
    (plugin.configure)(props).map_err(|v| {
        let errors: Vec<String> = v.entries().iter().flat_map(|e| e.errors.clone()).collect();
        ConnectError::config(errors.join("\n"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use headwater_api::{SchemaBuilder, Struct};

    use headwater_api::properties as props;

    #[test]
    fn string_converter_round_trip_and_to_string() {
        let c = create_converter(
            "org.apache.kafka.connect.storage.StringConverter",
            &props(&[]),
        )
        .unwrap();
        assert_eq!(
            c.from_connect_data("t", None, &Value::from("héllo"))
                .unwrap(),
            Some("héllo".as_bytes().to_vec())
        );
        assert_eq!(
            c.from_connect_data("t", None, &Value::Int64(42)).unwrap(),
            Some(b"42".to_vec())
        );
        assert_eq!(
            c.from_connect_data("t", None, &Value::Float64(1.0))
                .unwrap(),
            Some(b"1.0".to_vec())
        );
        assert_eq!(c.from_connect_data("t", None, &Value::Null).unwrap(), None);
        let schema = SchemaBuilder::struct_()
            .field("id", Schema::int32())
            .field("n", Schema::optional_string())
            .build_ref();
        let s = Struct::new(schema.clone()).unwrap().with("id", 1);
        assert_eq!(
            c.from_connect_data("t", Some(&schema), &Value::Struct(s))
                .unwrap(),
            Some(b"Struct{id=1}".to_vec())
        );
        let back = c.to_connect_data("t", Some(b"abc")).unwrap();
        assert_eq!(back.value, Value::from("abc"));
        assert!(back.schema.unwrap().is_optional());
        assert_eq!(c.to_connect_data("t", None).unwrap().value, Value::Null);
        let latin = create_converter(
            "StringConverter",
            &props(&[("converter.encoding", "ISO-8859-1")]),
        )
        .unwrap();
        assert_eq!(
            latin
                .from_connect_data("t", None, &Value::from("é"))
                .unwrap(),
            Some(vec![0xe9])
        );
        assert_eq!(
            latin.to_connect_data("t", Some(&[0xe9])).unwrap().value,
            Value::from("é")
        );
        let err = create_converter(
            "StringConverter",
            &props(&[("converter.encoding", "EBCDIC")]),
        )
        .err()
        .unwrap();
        assert!(
            err.message().contains("not supported by Headwater"),
            "{err}"
        );
    }

    #[test]
    fn byte_array_converter_passes_bytes() {
        let c = create_converter("ByteArrayConverter", &props(&[])).unwrap();
        assert_eq!(
            c.from_connect_data("t", None, &Value::Bytes(vec![1, 2]))
                .unwrap(),
            Some(vec![1, 2])
        );
        assert_eq!(c.from_connect_data("t", None, &Value::Null).unwrap(), None);
        let err = c
            .from_connect_data("t", Some(&Schema::string()), &Value::from("x"))
            .unwrap_err();
        assert_eq!(
            err.message(),
            "Invalid schema type for ByteArrayConverter: STRING"
        );
        let err = c
            .from_connect_data("t", None, &Value::from("x"))
            .unwrap_err();
        assert_eq!(
            err.message(),
            "ByteArrayConverter is not compatible with objects of type class java.lang.String"
        );
        assert_eq!(
            c.to_connect_data("t", Some(&[7])).unwrap().value,
            Value::Bytes(vec![7])
        );
    }

    #[test]
    fn registry_resolves_json_with_its_keys_and_rejects_unknown() {
        let c = create_converter(
            "org.apache.kafka.connect.json.JsonConverter",
            &props(&[("schemas.enable", "false")]),
        )
        .unwrap();
        assert_eq!(
            c.from_connect_data("t", Some(&Schema::int32()), &Value::Int32(5))
                .unwrap(),
            Some(b"5".to_vec())
        );
        let bad = create_converter("JsonConverter", &props(&[("decimal.format", "HEX")]))
            .err()
            .unwrap();
        assert!(bad.message().contains("decimal.format"), "{bad}");
        let err = create_converter(
            "io.confluent.connect.protobuf.ProtobufConverter",
            &props(&[]),
        )
        .err()
        .unwrap();
        assert!(
            err.message()
                .contains("Known converters: io.confluent.connect.avro.AvroConverter, org.apache.kafka.connect.json.JsonConverter"),
            "{err}"
        );
        assert!(find_converter("String").is_some());
    }
}
