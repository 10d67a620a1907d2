//! Helpers shared by the transforms: the key/value target of `$Key`/`$Value` variants, Kafka's
//! `Requirements` checks with their messages, schemaless map access, schema copying and the
//! bounded per-schema cache.
//!
//! Invariants:
//! - error messages name Java classes the way Kafka Connect prints them (`java.lang.String`,
//!   `org.apache.kafka.connect.data.Struct`), so users recognise them;
//! - [`SchemaCache`] compares keys by `Arc` identity (never by deep equality), holds a clone of
//!   every key so an address can't be reused by another schema while cached, and never grows past
//!   its bound (oldest entry evicted first).

use std::sync::{Arc, Mutex};

use headwater_api::config::ParsedConfig;
use headwater_api::{
    ConfigDef, ConfigValidation, ConnectError, ConnectRecord, Properties, Schema, SchemaBuilder,
    SchemaRef, Struct, Value,
};

/// Which part of a record a `$Key` / `$Value` transform works on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Key,
    Value,
}

impl Target {
    pub fn schema<R: ConnectRecord>(self, record: &R) -> Option<&SchemaRef> {
        match self {
            Target::Key => record.key_schema(),
            Target::Value => record.value_schema(),
        }
    }
    pub fn value<R: ConnectRecord>(self, record: &R) -> &Value {
        match self {
            Target::Key => record.key(),
            Target::Value => record.value(),
        }
    }
    /// Moves the operating schema and value out of the record.
    pub fn take<R: ConnectRecord>(self, record: &mut R) -> (Option<SchemaRef>, Value) {
        match self {
            Target::Key => record.take_key(),
            Target::Value => record.take_value(),
        }
    }
    pub fn set<R: ConnectRecord>(self, record: &mut R, schema: Option<SchemaRef>, value: Value) {
        match self {
            Target::Key => record.set_key(schema, value),
            Target::Value => record.set_value(schema, value),
        }
    }
}

/// The Java class Kafka Connect would see for a value (`Object.getClass().getName()`).
pub fn java_class(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Boolean(_) => "java.lang.Boolean",
        Value::Int8(_) => "java.lang.Byte",
        Value::Int16(_) => "java.lang.Short",
        Value::Int32(_) => "java.lang.Integer",
        Value::Int64(_) => "java.lang.Long",
        Value::Float32(_) => "java.lang.Float",
        Value::Float64(_) => "java.lang.Double",
        Value::String(_) => "java.lang.String",
        Value::Bytes(_) => "[B",
        Value::Array(_) => "java.util.ArrayList",
        Value::Map(_) => "java.util.HashMap",
        Value::Struct(_) => "org.apache.kafka.connect.data.Struct",
    }
}

/// `class X` as Java's `Class.toString()` prints it.
pub fn java_class_display(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        v => format!("class {}", java_class(v)),
    }
}

/// Kafka's `Requirements.requireSchema`.
pub fn require_schema<'a>(
    schema: Option<&'a SchemaRef>,
    purpose: &str,
) -> Result<&'a SchemaRef, ConnectError> {
    schema.ok_or_else(|| ConnectError::data(format!("Schema required for [{purpose}]")))
}

/// Kafka's `Requirements.requireMap`: schemaless values must be maps.
pub fn require_map(value: Value, purpose: &str) -> Result<Vec<(Value, Value)>, ConnectError> {
    match value {
        Value::Map(entries) => Ok(entries),
        other => Err(ConnectError::data(format!(
            "Only Map objects supported in absence of schema for [{purpose}], found: {}",
            java_class(&other)
        ))),
    }
}

/// Kafka's `Requirements.requireStruct`.
pub fn require_struct(value: Value, purpose: &str) -> Result<Struct, ConnectError> {
    match value {
        Value::Struct(s) => Ok(s),
        other => Err(ConnectError::data(format!(
            "Only Struct objects supported for [{purpose}], found: {}",
            java_class(&other)
        ))),
    }
}

/// Borrowing variant of [`require_struct`].
pub fn require_struct_ref<'a>(value: &'a Value, purpose: &str) -> Result<&'a Struct, ConnectError> {
    match value {
        Value::Struct(s) => Ok(s),
        other => Err(ConnectError::data(format!(
            "Only Struct objects supported for [{purpose}], found: {}",
            java_class(other)
        ))),
    }
}

/// The value under a string key of a schemaless map.
pub fn map_get<'a>(entries: &'a [(Value, Value)], key: &str) -> Option<&'a Value> {
    entries
        .iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

/// Puts a value under a string key, replacing an existing entry in place (`Map.put`).
pub fn map_put(entries: &mut Vec<(Value, Value)>, key: &str, value: Value) {
    match entries.iter_mut().find(|(k, _)| k.as_str() == Some(key)) {
        Some(slot) => slot.1 = value,
        None => entries.push((Value::String(key.to_owned()), value)),
    }
}

/// Removes a string key from a schemaless map, returning its value.
pub fn map_remove(entries: &mut Vec<(Value, Value)>, key: &str) -> Option<Value> {
    let index = entries.iter().position(|(k, _)| k.as_str() == Some(key))?;
    Some(entries.remove(index).1)
}

/// Kafka's `SchemaUtil.copySchemaBasics`: name, version, doc and parameters onto `builder`
/// (not optionality, not the default).
pub fn copy_schema_basics(source: &Schema, mut builder: SchemaBuilder) -> SchemaBuilder {
    if let Some(name) = source.name() {
        builder = builder.name(name);
    }
    if let Some(version) = source.version() {
        builder = builder.version(version);
    }
    if let Some(doc) = source.doc() {
        builder = builder.doc(doc);
    }
    if let Some(params) = source.parameters() {
        builder = builder.parameters_present();
        for (k, v) in params {
            builder = builder.parameter(k.clone(), v.clone());
        }
    }
    builder
}

/// A builder of the same type as `source` (array/map keep their element schemas) with the
/// basics copied: Kafka's one-argument `copySchemaBasics`.
pub fn copy_schema_basics_same_type(source: &Schema) -> SchemaBuilder {
    let builder = match source.schema_type() {
        headwater_api::SchemaType::Array => SchemaBuilder::array(
            source
                .value_schema()
                .cloned()
                .unwrap_or_else(Schema::string),
        ),
        headwater_api::SchemaType::Map => SchemaBuilder::map(
            source.key_schema().cloned().unwrap_or_else(Schema::string),
            source
                .value_schema()
                .cloned()
                .unwrap_or_else(Schema::string),
        ),
        headwater_api::SchemaType::Struct => {
            let mut b = SchemaBuilder::struct_();
            for f in source.fields() {
                b = b.field(f.name(), f.schema().clone());
            }
            b
        }
        t => SchemaBuilder::new(t),
    };
    copy_schema_basics(source, builder)
}

/// A field's value for copying into a rebuilt struct: the schema default replaces a null when
/// `replace_null_with_default` (Kafka's `Struct.get` versus `getWithoutDefault`).
pub fn field_value(s: &Struct, index: usize, replace_null_with_default: bool) -> Value {
    let v = &s.values()[index];
    if v.is_null() && replace_null_with_default {
        if let Some(d) = s.schema().fields()[index].schema().default_value() {
            return d.clone();
        }
    }
    v.clone()
}

/// Builds a struct from values in field order, checking each against its field schema.
pub fn struct_from_values(
    schema: SchemaRef,
    values: impl IntoIterator<Item = Value>,
) -> Result<Struct, ConnectError> {
    let mut s = Struct::new(schema)?;
    for (i, v) in values.into_iter().enumerate() {
        s.put_at(i, v)?;
    }
    Ok(s)
}

/// Adds a field to a struct builder, turning a duplicate name into a data error.
pub fn add_field(
    builder: SchemaBuilder,
    name: &str,
    schema: SchemaRef,
) -> Result<SchemaBuilder, ConnectError> {
    builder.try_field(name, schema).map_err(ConnectError::from)
}

/// Finishes a schema, turning an invalid default into a data error.
pub fn finish(builder: SchemaBuilder) -> Result<SchemaRef, ConnectError> {
    builder
        .try_build()
        .map(Arc::new)
        .map_err(ConnectError::from)
}

/// A schema key compared by `Arc` identity.
#[derive(Clone, Debug)]
pub struct ByPtr(pub SchemaRef);

impl PartialEq for ByPtr {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// A small bounded cache (Kafka's `SynchronizedCache(LRUCache(16))`): linear lookup, oldest
/// entry evicted when full.
#[derive(Debug)]
pub struct SchemaCache<K, V> {
    capacity: usize,
    entries: Mutex<Vec<(K, V)>>,
}

impl<K: PartialEq, V: Clone> SchemaCache<K, V> {
    pub fn new(capacity: usize) -> Self {
        SchemaCache {
            capacity: capacity.max(1),
            entries: Mutex::new(Vec::new()),
        }
    }

    /// The cached value for `key`, or the one `make` builds (then cached).
    pub fn get_or_try_insert(
        &self,
        key: K,
        make: impl FnOnce() -> Result<V, ConnectError>,
    ) -> Result<V, ConnectError> {
        {
            let entries = self.lock();
            if let Some((_, v)) = entries.iter().find(|(k, _)| *k == key) {
                return Ok(v.clone());
            }
        }
        let value = make()?;
        let mut entries = self.lock();
        if entries.len() >= self.capacity {
            entries.remove(0);
        }
        entries.push((key, value.clone()));
        Ok(value)
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(K, V)>> {
        match self.entries.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

/// Validates `props` against `def`, then runs `build` for cross-field checks; `build` reports
/// problems with `errors.add_error(key, message)` (key without the `transforms.<alias>.`
/// prefix) and returns `None` when it can't build. This is every transform's `configure`.
pub fn configure<T>(
    def: &ConfigDef,
    props: &Properties,
    build: impl FnOnce(&ParsedConfig, &mut ConfigValidation) -> Option<T>,
) -> Result<T, ConfigValidation> {
    let mut validation = def.validate(props);
    if validation.error_count() > 0 {
        return Err(validation);
    }
    let parsed = def.parse(props)?;
    let built = build(&parsed, &mut validation);
    match built {
        Some(t) if validation.error_count() == 0 => Ok(t),
        _ => {
            if validation.error_count() == 0 {
                validation.add_error("type", "Invalid configuration");
            }
            Err(validation)
        }
    }
}

/// Kafka's message for a value rejected by a validator: `Invalid value V for configuration K: why`.
pub fn invalid_value(key: &str, value: &str, reason: &str) -> String {
    format!("Invalid value {value} for configuration {key}: {reason}")
}

/// Shorthands for reading a parsed config whose keys were defined with defaults.
pub fn get_string(c: &ParsedConfig, key: &str) -> Option<String> {
    c.get_string(key).map(str::to_owned)
}

pub fn get_list(c: &ParsedConfig, key: &str) -> Vec<String> {
    c.get_list(key).map(<[String]>::to_vec).unwrap_or_default()
}

pub fn get_bool(c: &ParsedConfig, key: &str, default: bool) -> bool {
    c.get_bool(key).unwrap_or(default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_is_by_identity_and_bounded() {
        let cache: SchemaCache<ByPtr, i32> = SchemaCache::new(2);
        let a = Schema::int32();
        let a_equal = Schema::int32();
        assert_eq!(
            cache.get_or_try_insert(ByPtr(a.clone()), || Ok(1)).unwrap(),
            1
        );
        assert_eq!(
            cache.get_or_try_insert(ByPtr(a.clone()), || Ok(9)).unwrap(),
            1
        );
        // Equal but not identical: a new entry.
        assert_eq!(
            cache.get_or_try_insert(ByPtr(a_equal), || Ok(2)).unwrap(),
            2
        );
        assert_eq!(
            cache
                .get_or_try_insert(ByPtr(Schema::int64()), || Ok(3))
                .unwrap(),
            3
        );
        assert_eq!(cache.len(), 2);
        // `a` was evicted first.
        assert_eq!(cache.get_or_try_insert(ByPtr(a), || Ok(4)).unwrap(), 4);
    }

    #[test]
    fn requirement_messages_name_java_classes() {
        let e = require_map(Value::from("x"), "field insertion").unwrap_err();
        assert_eq!(
            e.message(),
            "Only Map objects supported in absence of schema for [field insertion], found: java.lang.String"
        );
        let e = require_struct(Value::Int32(1), "cast types").unwrap_err();
        assert_eq!(
            e.message(),
            "Only Struct objects supported for [cast types], found: java.lang.Integer"
        );
        assert_eq!(
            require_schema(None, "updating schema metadata")
                .unwrap_err()
                .message(),
            "Schema required for [updating schema metadata]"
        );
        let mut m = vec![];
        map_put(&mut m, "a", Value::Int32(1));
        map_put(&mut m, "a", Value::Int32(2));
        assert_eq!(map_get(&m, "a"), Some(&Value::Int32(2)));
        assert_eq!(map_remove(&mut m, "a"), Some(Value::Int32(2)));
        assert!(m.is_empty());
    }
}
