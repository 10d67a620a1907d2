//! Key, value and header conversion of a connector's records, configured from its properties
//! (`key.converter`, `value.converter`, `key.converter.<setting>`, ...) over the worker's
//! defaults (Kafka Connect's: `JsonConverter` with schemas for both).

use headwater_api::config::ConfigValidation;
use headwater_api::{Headers, Properties, Value};
use headwater_format::{JsonConverter, JsonConverterConfig};

const JSON_CONVERTER_NAMES: &[&str] = &[
    "org.apache.kafka.connect.json.JsonConverter",
    "JsonConverter",
    "Json",
];

/// The converters of one connector.
pub struct Converters {
    pub key: JsonConverter,
    pub value: JsonConverter,
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

impl Converters {
    /// Validates the converter settings, reporting each bad key.
    pub fn validate(props: &Properties) -> ConfigValidation {
        let mut v = ConfigValidation::default();
        for which in ["key.converter", "value.converter"] {
            if let Some(class) = props.get(which) {
                if !JSON_CONVERTER_NAMES.contains(&class.trim()) {
                    v.add_error(
                        which,
                        format!(
                            "Invalid value {class} for configuration {which}: converter not available in this build (available: org.apache.kafka.connect.json.JsonConverter)"
                        ),
                    );
                    continue;
                }
            }
            if let Err(errors) =
                JsonConverterConfig::from_props(&sub_props(props, &format!("{which}.")))
            {
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
    pub fn from_props(props: &Properties) -> Self {
        let config = |which: &str| {
            JsonConverterConfig::from_props(&sub_props(props, &format!("{which}.")))
                .unwrap_or_default()
        };
        Converters {
            key: JsonConverter::new(config("key.converter")),
            value: JsonConverter::new(config("value.converter")),
            header_json: JsonConverter::new(JsonConverterConfig {
                schemas_enable: false,
                ..JsonConverterConfig::default()
            }),
        }
    }

    /// Header values as bytes, the way Kafka Connect's `SimpleHeaderConverter` writes them:
    /// strings as UTF-8, other primitives as their text, structures as JSON, null as null.
    pub fn header_bytes(&self, headers: &Headers) -> Vec<(String, Option<Vec<u8>>)> {
        headers
            .iter()
            .map(|h| {
                let bytes = match &h.value {
                    Value::Null => None,
                    Value::String(s) => Some(s.as_bytes().to_vec()),
                    Value::Bytes(b) => Some(b.clone()),
                    Value::Boolean(b) => Some(b.to_string().into_bytes()),
                    Value::Int8(v) => Some(v.to_string().into_bytes()),
                    Value::Int16(v) => Some(v.to_string().into_bytes()),
                    Value::Int32(v) => Some(v.to_string().into_bytes()),
                    Value::Int64(v) => Some(v.to_string().into_bytes()),
                    other => self
                        .header_json
                        .from_connect_data("", h.schema.as_ref(), other)
                        .ok()
                        .flatten(),
                };
                (h.key.clone(), bytes)
            })
            .collect()
    }
}
