//! Key, value and header conversion of a connector's records, configured from its properties
//! (`key.converter`, `value.converter`, `key.converter.<setting>`, ...) over the worker's
//! defaults (Kafka Connect's: `JsonConverter` with schemas for both). Converter classes come
//! from `headwater_format::converters` (JsonConverter, StringConverter, ByteArrayConverter).

use headwater_api::config::ConfigValidation;
use headwater_api::{Headers, Properties, Value};
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
            if let Err(errors) = (plugin.configure)(&sub_props(props, &format!("{which}."))) {
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
            create_converter(class, &sub_props(props, &format!("{which}.")))
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
