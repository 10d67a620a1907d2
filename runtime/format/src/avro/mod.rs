//! Confluent's `io.confluent.connect.avro.AvroConverter`: Connect data as Avro binary in the
//! Confluent wire format (magic byte 0, the schema's registry id as a big-endian `i32`, the
//! Avro datum), with schemas mapped as Confluent's `AvroData` maps them ([`schema`]) and
//! registered in a schema registry ([`registry`]).
//!
//! Invariants:
//! - a schema is mapped and registered once per converter: writers are cached by the schema
//!   object (`Arc` identity, the cache holding a clone so an address is never reused) and by
//!   (subject, Avro text), readers by registry id; per record only the datum is encoded;
//! - a null value is a Kafka null (as Confluent's serialiser writes it); a value without a
//!   schema is refused (Avro needs one);
//! - a schema the registry refuses (incompatible, invalid) fails the record with a message
//!   naming the subject, the rule, the new schema and the latest registered one; the cache is
//!   not poisoned, so a later compatible schema still registers;
//! - `schema.registry.url` naming a registry served by this process goes straight to it; left
//!   out, the worker's embedded registry is used (Confluent requires the setting; Headwater
//!   has a registry of its own to default to).

pub mod binary;
pub mod registry;
pub mod schema;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use headwater_api::config::{ConfigDef, ConfigKey, ConfigType, Importance, Validator};
use headwater_api::{ConfigValidation, DataError, Properties, SchemaRef, Value};

use crate::converters::Converter;
use crate::json::SchemaAndValue;
use registry::{HttpRegistry, RegistryError, SchemaRegistry};
use schema::{ConnectSchema, MappingOptions, Node};

/// Confluent wire format's first byte.
pub const MAGIC_BYTE: u8 = 0;

/// How a record's subject is named (`key.subject.name.strategy` / `value.subject.name.strategy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubjectNameStrategy {
    /// `<topic>-key` / `<topic>-value` (Confluent's default).
    TopicName,
    /// The record's fully-qualified name.
    RecordName,
    /// `<topic>-<record name>`.
    TopicRecordName,
}

impl SubjectNameStrategy {
    pub fn parse(class: &str) -> Option<Self> {
        let short = class.trim().rsplit('.').next().unwrap_or("");
        match short {
            "TopicNameStrategy" => Some(Self::TopicName),
            "RecordNameStrategy" => Some(Self::RecordName),
            "TopicRecordNameStrategy" => Some(Self::TopicRecordName),
            _ => None,
        }
    }
}

/// The converter's settings (without the `key.converter.`/`value.converter.` prefix).
#[derive(Clone, Debug)]
pub struct AvroConverterConfig {
    pub urls: Vec<String>,
    pub is_key: bool,
    pub auto_register: bool,
    pub use_latest_version: bool,
    pub normalize: bool,
    pub subject_strategy: SubjectNameStrategy,
    pub authorization: Option<String>,
    pub mapping: MappingOptions,
}

const STRATEGIES: &[&str] = &[
    "io.confluent.kafka.serializers.subject.TopicNameStrategy",
    "io.confluent.kafka.serializers.subject.RecordNameStrategy",
    "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy",
];

impl AvroConverterConfig {
    pub fn config_def() -> ConfigDef {
        let strategy = |name: &str| {
            ConfigKey::new(name, ConfigType::String)
                .default_str(STRATEGIES[0])
                .importance(Importance::Medium)
                .doc("How the subject of a key or value schema is named: TopicNameStrategy (<topic>-key, <topic>-value), RecordNameStrategy (the record's full name) or TopicRecordNameStrategy (<topic>-<record name>), as class names of io.confluent.kafka.serializers.subject or short names.")
        };
        ConfigDef::new()
            .define(
                ConfigKey::new("schema.registry.url", ConfigType::List)
                    .default_null()
                    .importance(Importance::High)
                    .doc("Comma-separated URLs of the schema registry. Left out, the worker's embedded registry is used."),
            )
            .define(
                ConfigKey::new("auto.register.schemas", ConfigType::Boolean)
                    .default_str("true")
                    .importance(Importance::Medium)
                    .doc("Register new schemas in the registry; when false a schema must be registered already."),
            )
            .define(
                ConfigKey::new("use.latest.version", ConfigType::Boolean)
                    .default_str("false")
                    .importance(Importance::Low)
                    .doc("Write records with the subject's latest registered version (Headwater requires that version to be the record's own schema)."),
            )
            .define(
                ConfigKey::new("latest.compatibility.strict", ConfigType::Boolean)
                    .default_str("true")
                    .importance(Importance::Low)
                    .doc("Accepted for compatibility; see use.latest.version."),
            )
            .define(
                ConfigKey::new("normalize.schemas", ConfigType::Boolean)
                    .default_str("false")
                    .importance(Importance::Low)
                    .doc("Ask the registry to normalise schemas before registering or looking them up."),
            )
            .define(strategy("key.subject.name.strategy"))
            .define(strategy("value.subject.name.strategy"))
            .define(
                ConfigKey::new("basic.auth.credentials.source", ConfigType::String)
                    .default_str("URL")
                    .importance(Importance::Medium)
                    .validator(Validator::one_of(&["URL", "USER_INFO"]))
                    .doc("Where HTTP Basic credentials for the registry come from: URL (user:password@ in schema.registry.url) or USER_INFO (basic.auth.user.info)."),
            )
            .define(
                ConfigKey::new("basic.auth.user.info", ConfigType::Password)
                    .default_null()
                    .importance(Importance::Medium)
                    .doc("user:password for the registry when basic.auth.credentials.source=USER_INFO."),
            )
            .define(
                ConfigKey::new("bearer.auth.token", ConfigType::Password)
                    .default_null()
                    .importance(Importance::Medium)
                    .doc("A static bearer token for the registry."),
            )
            .define(
                ConfigKey::new("scrub.invalid.names", ConfigType::Boolean)
                    .default_str("false")
                    .importance(Importance::Low)
                    .doc("Replace characters that Avro names do not allow with '_' instead of failing the record."),
            )
            .define(
                ConfigKey::new("connect.meta.data", ConfigType::Boolean)
                    .default_str("true")
                    .importance(Importance::Low)
                    .doc("Keep Connect's schema metadata (connect.name, connect.version, connect.parameters, ...) in the Avro schemas. Headwater always keeps it."),
            )
            .define(
                ConfigKey::new("enhanced.avro.schema.support", ConfigType::Boolean)
                    .default_str("false")
                    .importance(Importance::Low)
                    .doc("Confluent's enhanced mapping (Avro enums from Connect parameters); not supported by Headwater."),
            )
            .define(
                ConfigKey::new("converter.type", ConfigType::String)
                    .default_str("value")
                    .importance(Importance::Low)
                    .validator(Validator::one_of(&["key", "value", "header"]))
                    .doc("Set by the worker: whether this converter handles keys or values."),
            )
    }

    pub fn from_props(props: &Properties) -> Result<Self, ConfigValidation> {
        let def = Self::config_def();
        let parsed = def.parse(props)?;
        let mut errors = Vec::new();
        let is_key = parsed.get_string("converter.type") == Some("key");
        let strategy_key = if is_key {
            "key.subject.name.strategy"
        } else {
            "value.subject.name.strategy"
        };
        let strategy_text = parsed.get_string(strategy_key).unwrap_or(STRATEGIES[0]);
        let subject_strategy = match SubjectNameStrategy::parse(strategy_text) {
            Some(s) => s,
            None => {
                errors.push((
                    strategy_key,
                    format!("Invalid value {strategy_text} for configuration {strategy_key}: expected one of {}", STRATEGIES.join(", ")),
                ));
                SubjectNameStrategy::TopicName
            }
        };
        if parsed.get_bool("connect.meta.data") == Some(false) {
            errors.push(("connect.meta.data", "Invalid value false for configuration connect.meta.data: Headwater's AvroConverter always writes Connect's metadata into the Avro schemas".to_owned()));
        }
        if parsed.get_bool("enhanced.avro.schema.support") == Some(true) {
            errors.push(("enhanced.avro.schema.support", "Invalid value true for configuration enhanced.avro.schema.support: Headwater's AvroConverter does not support the enhanced mapping".to_owned()));
        }
        // Confluent's client TLS keys (a private CA, client certificates): not read, so a user
        // who relies on them hears so instead of meeting a certificate error later.
        let ssl_keys: Vec<&String> = props
            .keys()
            .filter(|k| k.starts_with("schema.registry.ssl."))
            .collect();
        for key in &ssl_keys {
            errors.push((key.as_str(), format!("Invalid configuration {key}: Headwater's AvroConverter verifies https:// registries against the Mozilla root certificates only; custom trust and key stores are not supported")));
        }
        let mut urls: Vec<String> = parsed
            .get_list("schema.registry.url")
            .map(|l| {
                l.iter()
                    .map(|u| u.trim().to_owned())
                    .filter(|u| !u.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let mut url_credentials = None;
        for url in &mut urls {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                errors.push(("schema.registry.url", format!("Invalid value {url} for configuration schema.registry.url: not an http:// or https:// URL")));
                continue;
            }
            // user:password@host in the URL (basic.auth.credentials.source=URL).
            let (scheme, rest) = url.split_once("://").expect("checked above");
            let host_end = rest.find('/').unwrap_or(rest.len());
            if let Some(at) = rest[..host_end].rfind('@') {
                url_credentials = Some(rest[..at].to_owned());
                *url = format!("{scheme}://{}", &rest[at + 1..]);
            }
        }
        let authorization = if let Some(token) = parsed.get_string("bearer.auth.token") {
            Some(format!("Bearer {token}"))
        } else if parsed.get_string("basic.auth.credentials.source") == Some("USER_INFO") {
            match parsed.get_string("basic.auth.user.info") {
                Some(info) => Some(HttpRegistry::basic_auth(info)),
                None => {
                    errors.push(("basic.auth.user.info", "Missing required configuration \"basic.auth.user.info\" (basic.auth.credentials.source=USER_INFO)".to_owned()));
                    None
                }
            }
        } else {
            url_credentials.map(|c| HttpRegistry::basic_auth(&c))
        };
        if !errors.is_empty() {
            let mut v = def.validate(props);
            for (key, message) in errors {
                v.add_error(key, message);
            }
            return Err(v);
        }
        Ok(AvroConverterConfig {
            urls,
            is_key,
            auto_register: parsed.get_bool("auto.register.schemas").unwrap_or(true),
            use_latest_version: parsed.get_bool("use.latest.version").unwrap_or(false),
            normalize: parsed.get_bool("normalize.schemas").unwrap_or(false),
            subject_strategy,
            authorization,
            mapping: MappingOptions {
                scrub_invalid_names: parsed.get_bool("scrub.invalid.names").unwrap_or(false),
            },
        })
    }
}

/// A schema ready to write: its id and wire header, and the node to encode with.
#[derive(Debug)]
struct Writer {
    header: [u8; 5],
    node: Node,
}

/// Writers of one schema object, per topic.
type ObjectWriters = Vec<(String, SchemaRef, Arc<Writer>)>;

/// Where the converter's registry comes from.
enum RegistrySource {
    Fixed(Arc<dyn SchemaRegistry>),
    /// The process's embedded registry, looked up at first use (a converter may be configured
    /// for validation before the worker's registry is up).
    EmbeddedDefault,
}

/// Above this many entries a cache is emptied (schemas are few; a runaway producer of new
/// schema objects must not grow memory without bound).
const CACHE_LIMIT: usize = 1000;

/// `io.confluent.connect.avro.AvroConverter`.
pub struct AvroConverter {
    config: AvroConverterConfig,
    registry: RegistrySource,
    /// Schema object address -> (topic, the object, its writer); the clone keeps the address.
    by_object: Mutex<HashMap<usize, ObjectWriters>>,
    /// (subject, Avro text) -> writer, for equal schemas in different objects.
    by_text: Mutex<HashMap<(String, String), Arc<Writer>>>,
    readers: Mutex<HashMap<i32, Arc<ConnectSchema>>>,
}

impl AvroConverter {
    /// A converter whose registry is resolved from its configuration.
    pub fn new(config: AvroConverterConfig) -> Self {
        let registry = if config.urls.is_empty() {
            RegistrySource::EmbeddedDefault
        } else if let Some(local) = config.urls.iter().find_map(|u| registry::local_registry(u)) {
            RegistrySource::Fixed(local)
        } else {
            RegistrySource::Fixed(Arc::new(HttpRegistry::new(
                config.urls.clone(),
                config.authorization.clone(),
            )))
        };
        Self::build(config, registry)
    }

    /// A converter using `registry` (tests, embedding).
    pub fn with_registry(config: AvroConverterConfig, registry: Arc<dyn SchemaRegistry>) -> Self {
        Self::build(config, RegistrySource::Fixed(registry))
    }

    fn build(config: AvroConverterConfig, registry: RegistrySource) -> Self {
        AvroConverter {
            config,
            registry,
            by_object: Mutex::new(HashMap::new()),
            by_text: Mutex::new(HashMap::new()),
            readers: Mutex::new(HashMap::new()),
        }
    }

    fn registry(&self) -> Result<Arc<dyn SchemaRegistry>, DataError> {
        match &self.registry {
            RegistrySource::Fixed(r) => Ok(r.clone()),
            RegistrySource::EmbeddedDefault => registry::default_local_registry().ok_or_else(|| {
                DataError::new("AvroConverter: no schema.registry.url is set and this process has no embedded schema registry")
            }),
        }
    }

    fn subject(&self, topic: &str, avro: &schema::AvroSchema) -> String {
        let suffix = if self.config.is_key { "key" } else { "value" };
        match self.config.subject_strategy {
            SubjectNameStrategy::TopicName => format!("{topic}-{suffix}"),
            SubjectNameStrategy::RecordName => record_full_name(&avro.json),
            SubjectNameStrategy::TopicRecordName => {
                format!("{topic}-{}", record_full_name(&avro.json))
            }
        }
    }

    /// The writer for `schema` on `topic`, registering the schema when it is new.
    fn writer(&self, topic: &str, schema: &SchemaRef) -> Result<Arc<Writer>, DataError> {
        let key = Arc::as_ptr(schema) as usize;
        // Topic-name subjects depend on the topic, so the object cache tells topics apart
        // (the record-name strategy shares one entry between topics).
        let topic_key = match self.config.subject_strategy {
            SubjectNameStrategy::RecordName => "",
            _ => topic,
        };
        if let Some(entries) = self
            .by_object
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            if let Some((_, _, w)) = entries.iter().find(|(t, _, _)| t == topic_key) {
                return Ok(w.clone());
            }
        }
        let avro = schema::to_avro(schema, self.config.mapping)?;
        let subject = self.subject(topic, &avro);
        let text_key = (subject.clone(), avro.json.clone());
        let cached = self
            .by_text
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&text_key)
            .cloned();
        let writer = match cached {
            Some(w) => w,
            None => {
                let id = self.register(&subject, &avro.json)?;
                let mut header = [MAGIC_BYTE, 0, 0, 0, 0];
                header[1..].copy_from_slice(&id.to_be_bytes());
                let w = Arc::new(Writer {
                    header,
                    node: avro.node,
                });
                let mut by_text = self.by_text.lock().unwrap_or_else(|e| e.into_inner());
                if by_text.len() >= CACHE_LIMIT {
                    by_text.clear();
                }
                by_text.insert(text_key, w.clone());
                w
            }
        };
        let mut by_object = self.by_object.lock().unwrap_or_else(|e| e.into_inner());
        if by_object.len() >= CACHE_LIMIT {
            by_object.clear();
        }
        by_object.entry(key).or_default().push((
            topic_key.to_owned(),
            schema.clone(),
            writer.clone(),
        ));
        Ok(writer)
    }

    fn register(&self, subject: &str, avro_json: &str) -> Result<i32, DataError> {
        let registry = self.registry()?;
        let normalize = self.config.normalize;
        let result = if self.config.use_latest_version {
            registry.latest(subject).and_then(|latest| {
                if same_schema(&latest.schema, avro_json) {
                    Ok(latest.id)
                } else {
                    Err(RegistryError::new(
                        0,
                        40403,
                        format!(
                            "use.latest.version: the latest version ({}) of subject \"{subject}\" is not the record's schema; Headwater writes with the latest version only when it is the record's own schema. Latest: {}",
                            latest.version, latest.schema
                        ),
                    ))
                }
            })
        } else if self.config.auto_register {
            registry.register(subject, avro_json, normalize)
        } else {
            registry.lookup(subject, avro_json, normalize).map(|r| r.id)
        };
        result.map_err(|e| {
            let mut message = format!(
                "AvroConverter: the schema registry refused the schema for subject \"{subject}\": {e}. New schema: {avro_json}"
            );
            if e.status == 409 {
                if let Ok(latest) = registry.latest(subject) {
                    message.push_str(&format!(
                        ". Latest registered version {} (id {}): {}",
                        latest.version, latest.id, latest.schema
                    ));
                }
            }
            DataError::new(message)
        })
    }

    fn reader(&self, id: i32) -> Result<Arc<ConnectSchema>, DataError> {
        if let Some(r) = self
            .readers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
        {
            return Ok(r.clone());
        }
        let text = self.registry()?.schema_by_id(id).map_err(|e| {
            DataError::new(format!(
                "AvroConverter: cannot fetch the schema with id {id}: {e}"
            ))
        })?;
        let parsed = Arc::new(schema::from_avro(&text)?);
        let mut readers = self.readers.lock().unwrap_or_else(|e| e.into_inner());
        if readers.len() >= CACHE_LIMIT {
            readers.clear();
        }
        readers.insert(id, parsed.clone());
        Ok(parsed)
    }
}

impl Converter for AvroConverter {
    fn from_connect_data(
        &self,
        topic: &str,
        schema: Option<&SchemaRef>,
        value: &Value,
    ) -> Result<Option<Vec<u8>>, DataError> {
        let mut out = Vec::with_capacity(128);
        Ok(self
            .write_connect_data(topic, schema, value, &mut out)?
            .then_some(out))
    }

    /// Appends the wire form of `value` to `out`; `false` (nothing appended) for a Kafka null.
    fn write_connect_data(
        &self,
        topic: &str,
        schema: Option<&SchemaRef>,
        value: &Value,
        out: &mut Vec<u8>,
    ) -> Result<bool, DataError> {
        if value.is_null() {
            return Ok(false);
        }
        let schema = schema.ok_or_else(|| {
            DataError::new("AvroConverter needs a schema: this record has a value without one")
        })?;
        let writer = self.writer(topic, schema)?;
        let start = out.len();
        out.extend_from_slice(&writer.header);
        if let Err(e) = binary::encode(&writer.node, schema, value, out) {
            out.truncate(start);
            return Err(DataError::new(format!(
                "AvroConverter: cannot write the record as Avro: {}",
                e.message()
            )));
        }
        Ok(true)
    }

    fn to_connect_data(
        &self,
        _topic: &str,
        bytes: Option<&[u8]>,
    ) -> Result<SchemaAndValue, DataError> {
        let Some(bytes) = bytes else {
            return Ok(SchemaAndValue {
                schema: None,
                value: Value::Null,
            });
        };
        if bytes.len() < 5 || bytes[0] != MAGIC_BYTE {
            return Err(DataError::new(
                "AvroConverter: unknown magic byte (the data is not in the Confluent wire format)",
            ));
        }
        let id = i32::from_be_bytes(bytes[1..5].try_into().expect("4 bytes"));
        let reader = self.reader(id)?;
        let value = binary::decode(&reader.node, &reader.schema, &bytes[5..]).map_err(|e| {
            DataError::new(format!(
                "AvroConverter: cannot read Avro data of schema id {id}: {}",
                e.message()
            ))
        })?;
        Ok(SchemaAndValue {
            schema: Some(reader.schema.clone()),
            value,
        })
    }
}

/// Whether two Avro schema texts are the same schema (same JSON once parsed).
fn same_schema(a: &str, b: &str) -> bool {
    match (
        serde_json::from_str::<serde_json::Value>(a),
        serde_json::from_str::<serde_json::Value>(b),
    ) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// The full name of the top-level record of an Avro schema (a primitive's type name).
fn record_full_name(avro_json: &str) -> String {
    let json: serde_json::Value = serde_json::from_str(avro_json).unwrap_or_default();
    let top = match &json {
        serde_json::Value::Array(branches) => branches
            .iter()
            .find(|b| b.as_str() != Some("null"))
            .cloned()
            .unwrap_or_default(),
        other => other.clone(),
    };
    match &top {
        serde_json::Value::String(t) => t.clone(),
        serde_json::Value::Object(o) => {
            let name = o.get("name").and_then(|n| n.as_str());
            let ns = o.get("namespace").and_then(|n| n.as_str()).unwrap_or("");
            match name {
                Some(n) if !ns.is_empty() && !n.contains('.') => format!("{ns}.{n}"),
                Some(n) => n.to_owned(),
                None => o
                    .get("type")
                    .and_then(|t| t.as_str())
                    .unwrap_or("unknown")
                    .to_owned(),
            }
        }
        _ => "unknown".to_owned(),
    }
}

#[cfg(test)]
#[allow(deprecated)] // apache-avro's datum helpers, as a reference decoder
mod tests;
