//! Kafka Connect's field transforms: InsertField, ReplaceField, MaskField, ValueToKey,
//! ExtractField, HoistField and SetSchemaMetadata (`$Key` / `$Value` variants where Kafka has
//! them).
//!
//! Semantics follow `org.apache.kafka.connect.transforms.*`: Struct values with a schema (output
//! schema built once per input schema and cached, bounded at 16 like Kafka's LRU cache), Map
//! values without one, null values passed through where Kafka passes them. Deliberate
//! difference: MaskField and ValueToKey pass a record with a null operating value (a tombstone)
//! through unchanged, where Kafka fails it with "Only Map objects supported ... found: null".

use headwater_api::config::{ConfigKey, ConfigType, Importance, ParsedConfig, Validator};
use headwater_api::logical::{date, decimal, time, timestamp};
use headwater_api::{
    ConfigDef, ConfigValidation, ConnectError, ConnectRecord, Properties, Schema, SchemaBuilder,
    SchemaRef, SchemaType, Struct, Transform, Value,
};

use crate::util::{
    add_field, configure, copy_schema_basics, field_value, finish, get_bool, get_list, get_string,
    java_class, java_class_display, map_get, map_put, require_map, require_schema, require_struct,
    struct_from_values, ByPtr, SchemaCache, Target,
};

pub(crate) const REPLACE_NULL_DOC: &str = "Whether to replace fields that have a default value and that are null to the default value. When set to true, the default value is used, otherwise null is used.";

pub(crate) fn replace_null_key() -> ConfigKey {
    ConfigKey::new("replace.null.with.default", ConfigType::Boolean)
        .default_str("true")
        .importance(Importance::Medium)
        .doc(REPLACE_NULL_DOC)
}

/// Kafka's `NonEmptyListValidator` message ("Empty list").
pub(crate) fn non_empty_list() -> Validator {
    Validator::custom(|v| match v {
        headwater_api::ConfigValue::List(items) if items.is_empty() => Err("Empty list".to_owned()),
        _ => Ok(()),
    })
}

fn cache<V: Clone>() -> SchemaCache<ByPtr, V> {
    SchemaCache::new(16)
}

// ---------------------------------------------------------------------------------------------
// InsertField

#[derive(Clone, Debug)]
struct InsertionSpec {
    name: String,
    optional: bool,
}

impl InsertionSpec {
    fn parse(spec: Option<String>) -> Option<InsertionSpec> {
        let spec = spec?;
        Some(if let Some(n) = spec.strip_suffix('?') {
            InsertionSpec {
                name: n.to_owned(),
                optional: true,
            }
        } else if let Some(n) = spec.strip_suffix('!') {
            InsertionSpec {
                name: n.to_owned(),
                optional: false,
            }
        } else {
            InsertionSpec {
                name: spec,
                optional: true,
            }
        })
    }
}

/// `org.apache.kafka.connect.transforms.InsertField$Key` / `$Value`.
#[derive(Debug)]
pub struct InsertField {
    target: Target,
    topic: Option<InsertionSpec>,
    partition: Option<InsertionSpec>,
    offset: Option<InsertionSpec>,
    timestamp: Option<InsertionSpec>,
    static_field: Option<InsertionSpec>,
    static_value: Option<String>,
    replace_null_with_default: bool,
    cache: SchemaCache<ByPtr, SchemaRef>,
}

impl InsertField {
    pub fn config_def() -> ConfigDef {
        let opt = "Suffix with <code>!</code> to make this a required field, or <code>?</code> to keep it optional (the default).";
        let key = |name: &str, doc: String| {
            ConfigKey::new(name, ConfigType::String)
                .default_null()
                .importance(Importance::Medium)
                .doc(doc)
        };
        ConfigDef::new()
            .define(key(
                "topic.field",
                format!("Field name for Kafka topic. {opt}"),
            ))
            .define(key(
                "partition.field",
                format!("Field name for Kafka partition. {opt}"),
            ))
            .define(key(
                "offset.field",
                format!(
                    "Field name for Kafka offset - only applicable to sink connectors.<br/>{opt}"
                ),
            ))
            .define(key(
                "timestamp.field",
                format!("Field name for record timestamp. {opt}"),
            ))
            .define(key(
                "static.field",
                format!("Field name for static data field. {opt}"),
            ))
            .define(key(
                "static.value",
                "Static field value, if field name configured.".to_owned(),
            ))
            .define(replace_null_key())
    }

    pub fn configure(target: Target, props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(), props, |c, errors| {
            let t = InsertField {
                target,
                topic: InsertionSpec::parse(get_string(c, "topic.field")),
                partition: InsertionSpec::parse(get_string(c, "partition.field")),
                offset: InsertionSpec::parse(get_string(c, "offset.field")),
                timestamp: InsertionSpec::parse(get_string(c, "timestamp.field")),
                static_field: InsertionSpec::parse(get_string(c, "static.field")),
                static_value: get_string(c, "static.value"),
                replace_null_with_default: get_bool(c, "replace.null.with.default", true),
                cache: cache(),
            };
            if t.topic.is_none()
                && t.partition.is_none()
                && t.offset.is_none()
                && t.timestamp.is_none()
                && t.static_field.is_none()
            {
                errors.add_error("type", "No field insertion configured");
            }
            if let (Some(f), None) = (&t.static_field, &t.static_value) {
                errors.add_error(
                    "static.value",
                    format!(
                        "Invalid value null for configuration static.value: No value specified for static field: {}",
                        f.name
                    ),
                );
            }
            Some(t)
        })
    }

    fn offset_unsupported<R: ConnectRecord>(&self, _record: &R) -> Result<(), ConnectError> {
        if self.offset.is_some() {
            return Err(ConnectError::data(
                "Only SinkRecord supported for [field insertion], found: org.apache.kafka.connect.source.SourceRecord",
            ));
        }
        Ok(())
    }

    fn updated_schema(&self, schema: &Schema) -> Result<SchemaRef, ConnectError> {
        let mut b = copy_schema_basics(schema, SchemaBuilder::struct_());
        for f in schema.fields() {
            b = add_field(b, f.name(), f.schema().clone())?;
        }
        let pick = |spec: &InsertionSpec, b: SchemaBuilder| {
            if spec.optional {
                b.optional()
            } else {
                b
            }
        };
        if let Some(s) = &self.topic {
            b = add_field(b, &s.name, pick(s, SchemaBuilder::string()).build_ref())?;
        }
        if let Some(s) = &self.partition {
            b = add_field(b, &s.name, pick(s, SchemaBuilder::int32()).build_ref())?;
        }
        if let Some(s) = &self.offset {
            b = add_field(b, &s.name, pick(s, SchemaBuilder::int64()).build_ref())?;
        }
        if let Some(s) = &self.timestamp {
            b = add_field(b, &s.name, pick(s, timestamp::builder()).build_ref())?;
        }
        if let Some(s) = &self.static_field {
            b = add_field(b, &s.name, pick(s, SchemaBuilder::string()).build_ref())?;
        }
        finish(b)
    }
}

impl<R: ConnectRecord> Transform<R> for InsertField {
    fn apply(&self, mut record: R) -> Result<Option<R>, ConnectError> {
        if self.target.value(&record).is_null() {
            return Ok(Some(record));
        }
        self.offset_unsupported(&record)?;
        const PURPOSE: &str = "field insertion";
        let topic = record.topic().to_owned();
        let partition = record.kafka_partition();
        let ts = record.timestamp();
        let (schema, value) = self.target.take(&mut record);
        if schema.is_none() {
            let mut map = require_map(value, PURPOSE)?;
            if let Some(s) = &self.topic {
                map_put(&mut map, &s.name, Value::String(topic));
            }
            if let (Some(s), Some(p)) = (&self.partition, partition) {
                map_put(&mut map, &s.name, Value::Int32(p));
            }
            if let (Some(s), Some(t)) = (&self.timestamp, ts) {
                map_put(&mut map, &s.name, Value::Int64(t));
            }
            if let (Some(s), Some(v)) = (&self.static_field, &self.static_value) {
                map_put(&mut map, &s.name, Value::String(v.clone()));
            }
            self.target.set(&mut record, None, Value::Map(map));
            return Ok(Some(record));
        }
        let value = require_struct(value, PURPOSE)?;
        let in_schema = value.schema().clone();
        let out = self
            .cache
            .get_or_try_insert(ByPtr(in_schema.clone()), || self.updated_schema(&in_schema))?;
        let n = in_schema.fields().len();
        let mut values: Vec<Value> = (0..n)
            .map(|i| field_value(&value, i, self.replace_null_with_default))
            .collect();
        values.resize(out.fields().len(), Value::Null);
        let mut s = struct_from_values(out.clone(), values)?;
        if let Some(f) = &self.topic {
            s.put(&f.name, topic)?;
        }
        if let (Some(f), Some(p)) = (&self.partition, partition) {
            s.put(&f.name, p)?;
        }
        if let (Some(f), Some(t)) = (&self.timestamp, ts) {
            s.put(&f.name, t)?;
        }
        if let (Some(f), Some(v)) = (&self.static_field, &self.static_value) {
            s.put(&f.name, v.clone())?;
        }
        self.target.set(&mut record, Some(out), Value::Struct(s));
        Ok(Some(record))
    }
}

// ---------------------------------------------------------------------------------------------
// ReplaceField

/// `org.apache.kafka.connect.transforms.ReplaceField$Key` / `$Value`.
///
/// Also accepts Kafka 3.x's deprecated `blacklist` / `whitelist` (removed in Kafka 4.0) as
/// fallbacks for `exclude` / `include`, so configurations written for Kafka 3.x keep working.
#[derive(Debug)]
pub struct ReplaceField {
    target: Target,
    exclude: Vec<String>,
    include: Vec<String>,
    renames: Vec<(String, String)>,
    replace_null_with_default: bool,
    cache: SchemaCache<ByPtr, SchemaRef>,
}

fn parse_renames(items: &[String]) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for m in items {
        let parts: Vec<&str> = m.split(':').collect();
        if parts.len() != 2 {
            return Err(format!(
                "Invalid value [{}] for configuration renames: Invalid rename mapping: {m}",
                items.join(", ")
            ));
        }
        out.push((parts[0].to_owned(), parts[1].to_owned()));
    }
    Ok(out)
}

impl ReplaceField {
    pub fn config_def() -> ConfigDef {
        let list = |name: &str, doc: &str| {
            ConfigKey::new(name, ConfigType::List)
                .default_str("")
                .importance(Importance::Medium)
                .doc(doc)
        };
        ConfigDef::new()
            .define(list(
                "exclude",
                "Fields to exclude. This takes precedence over the fields to include.",
            ))
            .define(list(
                "include",
                "Fields to include. If specified, only these fields will be used.",
            ))
            .define(
                list("renames", "Field rename mappings.").validator(Validator::custom(|v| {
                    if let headwater_api::ConfigValue::List(items) = v {
                        parse_renames(items).map(|_| ()).map_err(|e| {
                            e.split_once(": ").map_or(e.clone(), |(_, r)| r.to_owned())
                        })
                    } else {
                        Ok(())
                    }
                })),
            )
            .define(
                ConfigKey::new("blacklist", ConfigType::List)
                    .default_null()
                    .importance(Importance::Low)
                    .doc("Deprecated (removed in Kafka 4.0). Use exclude instead."),
            )
            .define(
                ConfigKey::new("whitelist", ConfigType::List)
                    .default_null()
                    .importance(Importance::Low)
                    .doc("Deprecated (removed in Kafka 4.0). Use include instead."),
            )
            .define(replace_null_key())
    }

    pub fn configure(target: Target, props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(), props, |c, _| {
            let exclude = if props.contains_key("exclude") || !props.contains_key("blacklist") {
                get_list(c, "exclude")
            } else {
                get_list(c, "blacklist")
            };
            let include = if props.contains_key("include") || !props.contains_key("whitelist") {
                get_list(c, "include")
            } else {
                get_list(c, "whitelist")
            };
            Some(ReplaceField {
                target,
                exclude,
                include,
                renames: parse_renames(&get_list(c, "renames")).ok()?,
                replace_null_with_default: get_bool(c, "replace.null.with.default", true),
                cache: cache(),
            })
        })
    }

    /// A ReplaceField that only excludes (Debezium uses it to drop fields).
    pub fn excluding(target: Target, exclude: Vec<String>) -> Self {
        ReplaceField {
            target,
            exclude,
            include: Vec::new(),
            renames: Vec::new(),
            replace_null_with_default: true,
            cache: cache(),
        }
    }

    fn keep(&self, name: &str) -> bool {
        !self.exclude.iter().any(|e| e == name)
            && (self.include.is_empty() || self.include.iter().any(|i| i == name))
    }

    fn renamed<'a>(&'a self, name: &'a str) -> &'a str {
        self.renames
            .iter()
            .find(|(from, _)| from == name)
            .map_or(name, |(_, to)| to.as_str())
    }

    fn updated_schema(&self, schema: &Schema) -> Result<SchemaRef, ConnectError> {
        let mut b = copy_schema_basics(schema, SchemaBuilder::struct_());
        for f in schema.fields() {
            if self.keep(f.name()) {
                b = add_field(b, self.renamed(f.name()), f.schema().clone())?;
            }
        }
        finish(b)
    }

    /// Applies to one operating value (used by Debezium's drop-fields support too).
    pub fn apply_to(
        &self,
        schema: Option<SchemaRef>,
        value: Value,
    ) -> Result<(Option<SchemaRef>, Value), ConnectError> {
        const PURPOSE: &str = "field replacement";
        if value.is_null() {
            return Ok((schema, value));
        }
        if schema.is_none() {
            let map = require_map(value, PURPOSE)?;
            let out = map
                .into_iter()
                .filter_map(|(k, v)| {
                    let name = k.as_str()?.to_owned();
                    self.keep(&name)
                        .then(|| (Value::String(self.renamed(&name).to_owned()), v))
                })
                .collect();
            return Ok((None, Value::Map(out)));
        }
        let value = require_struct(value, PURPOSE)?;
        let in_schema = value.schema().clone();
        let out = self
            .cache
            .get_or_try_insert(ByPtr(in_schema.clone()), || self.updated_schema(&in_schema))?;
        let values = in_schema
            .fields()
            .iter()
            .filter(|f| self.keep(f.name()))
            .map(|f| field_value(&value, f.index(), self.replace_null_with_default));
        let s = struct_from_values(out.clone(), values)?;
        Ok((Some(out), Value::Struct(s)))
    }
}

impl<R: ConnectRecord> Transform<R> for ReplaceField {
    fn apply(&self, mut record: R) -> Result<Option<R>, ConnectError> {
        if self.target.value(&record).is_null() {
            return Ok(Some(record));
        }
        let (schema, value) = self.target.take(&mut record);
        let (schema, value) = self.apply_to(schema, value)?;
        self.target.set(&mut record, schema, value);
        Ok(Some(record))
    }
}

// ---------------------------------------------------------------------------------------------
// MaskField

/// `org.apache.kafka.connect.transforms.MaskField$Key` / `$Value`.
#[derive(Debug)]
pub struct MaskField {
    target: Target,
    fields: Vec<String>,
    replacement: Option<String>,
    replace_null_with_default: bool,
}

impl MaskField {
    pub fn config_def() -> ConfigDef {
        ConfigDef::new()
            .define(
                ConfigKey::new("fields", ConfigType::List)
                    .validator(non_empty_list())
                    .importance(Importance::High)
                    .doc("Names of fields to mask."),
            )
            .define(
                ConfigKey::new("replacement", ConfigType::String)
                    .default_null()
                    .validator(Validator::NonEmptyString)
                    .importance(Importance::Low)
                    .doc("Custom value replacement, that will be applied to all 'fields' values (numeric or non-empty string values only)."),
            )
            .define(replace_null_key())
    }

    pub fn configure(target: Target, props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(), props, |c, _| {
            Some(MaskField {
                target,
                fields: get_list(c, "fields"),
                replacement: get_string(c, "replacement"),
                replace_null_with_default: get_bool(c, "replace.null.with.default", true),
            })
        })
    }

    fn masked(&self, schema: Option<&Schema>, value: Value) -> Result<Value, ConnectError> {
        if value.is_null() {
            return Ok(value);
        }
        let logical = schema.and_then(Schema::name);
        let is_date = matches!(
            logical,
            Some(date::LOGICAL_NAME | time::LOGICAL_NAME | timestamp::LOGICAL_NAME)
        );
        let is_decimal = logical == Some(decimal::LOGICAL_NAME);
        let class = if is_date {
            "java.util.Date"
        } else if is_decimal {
            "java.math.BigDecimal"
        } else {
            java_class(&value)
        };
        match &self.replacement {
            None => Ok(match value {
                _ if is_date => match value {
                    Value::Int64(_) => Value::Int64(0),
                    _ => Value::Int32(0),
                },
                _ if is_decimal => Value::Bytes(vec![0]),
                Value::Boolean(_) => Value::Boolean(false),
                Value::Int8(_) => Value::Int8(0),
                Value::Int16(_) => Value::Int16(0),
                Value::Int32(_) => Value::Int32(0),
                Value::Int64(_) => Value::Int64(0),
                Value::Float32(_) => Value::Float32(0.0),
                Value::Float64(_) => Value::Float64(0.0),
                Value::String(_) => Value::String(String::new()),
                Value::Array(_) => Value::Array(Vec::new()),
                Value::Map(_) => Value::Map(Vec::new()),
                other => {
                    return Err(ConnectError::data(format!(
                        "Cannot mask value of type: {}",
                        java_class_display(&other)
                    )))
                }
            }),
            Some(rep) => {
                let bad_number = || {
                    ConnectError::data(format!(
                        "Unable to convert {rep} (class java.lang.String) to number"
                    ))
                };
                let int = || -> Result<i64, ConnectError> {
                    rep.trim()
                        .parse::<i64>()
                        .or_else(|_| rep.trim().parse::<f64>().map(|f| f as i64))
                        .map_err(|_| bad_number())
                };
                let float = || rep.trim().parse::<f64>().map_err(|_| bad_number());
                Ok(match value {
                    _ if is_decimal => {
                        let scale = decimal::scale(schema.expect("decimal has a schema"))?;
                        Value::Bytes(
                            decimal::unscaled_from_str(rep.trim(), scale)
                                .map_err(|_| bad_number())?,
                        )
                    }
                    _ if is_date => {
                        return Err(ConnectError::data(format!(
                            "Cannot mask value of type class {class} with custom replacement."
                        )))
                    }
                    Value::Int8(_) => Value::Int8(int()? as i8),
                    Value::Int16(_) => Value::Int16(int()? as i16),
                    Value::Int32(_) => Value::Int32(int()? as i32),
                    Value::Int64(_) => Value::Int64(int()?),
                    Value::Float32(_) => Value::Float32(float()? as f32),
                    Value::Float64(_) => Value::Float64(float()?),
                    Value::String(_) => Value::String(rep.clone()),
                    other => {
                        return Err(ConnectError::data(format!(
                            "Cannot mask value of type {} with custom replacement.",
                            java_class_display(&other)
                        )))
                    }
                })
            }
        }
    }
}

impl<R: ConnectRecord> Transform<R> for MaskField {
    fn apply(&self, mut record: R) -> Result<Option<R>, ConnectError> {
        const PURPOSE: &str = "mask fields";
        if self.target.value(&record).is_null() {
            return Ok(Some(record));
        }
        let (schema, value) = self.target.take(&mut record);
        match schema {
            None => {
                let mut map = require_map(value, PURPOSE)?;
                for f in &self.fields {
                    let current = map_get(&map, f).cloned().unwrap_or(Value::Null);
                    let masked = self.masked(None, current)?;
                    map_put(&mut map, f, masked);
                }
                self.target.set(&mut record, None, Value::Map(map));
            }
            Some(schema) => {
                let value = require_struct(value, PURPOSE)?;
                let s_schema = value.schema().clone();
                let values: Vec<Value> = s_schema
                    .fields()
                    .iter()
                    .map(|f| {
                        let v = field_value(&value, f.index(), self.replace_null_with_default);
                        if self.fields.iter().any(|m| m == f.name()) {
                            self.masked(Some(f.schema()), v)
                        } else {
                            Ok(v)
                        }
                    })
                    .collect::<Result<_, _>>()?;
                let s = struct_from_values(s_schema, values)?;
                self.target.set(&mut record, Some(schema), Value::Struct(s));
            }
        }
        Ok(Some(record))
    }
}

// ---------------------------------------------------------------------------------------------
// ValueToKey

/// `org.apache.kafka.connect.transforms.ValueToKey`.
#[derive(Debug)]
pub struct ValueToKey {
    fields: Vec<String>,
    replace_null_with_default: bool,
    cache: SchemaCache<ByPtr, SchemaRef>,
}

impl ValueToKey {
    pub fn config_def() -> ConfigDef {
        ConfigDef::new()
            .define(
                ConfigKey::new("fields", ConfigType::List)
                    .validator(non_empty_list())
                    .importance(Importance::High)
                    .doc("Field names on the record value to extract as the record key."),
            )
            .define(replace_null_key())
    }

    pub fn configure(props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(), props, |c, _| {
            Some(ValueToKey {
                fields: get_list(c, "fields"),
                replace_null_with_default: get_bool(c, "replace.null.with.default", true),
                cache: cache(),
            })
        })
    }
}

impl<R: ConnectRecord> Transform<R> for ValueToKey {
    fn apply(&self, mut record: R) -> Result<Option<R>, ConnectError> {
        const PURPOSE: &str = "copying fields from value to key";
        if record.value().is_null() {
            return Ok(Some(record));
        }
        if record.value_schema().is_none() {
            let map = match record.value() {
                Value::Map(m) => m,
                other => {
                    return Err(ConnectError::data(format!(
                    "Only Map objects supported in absence of schema for [{PURPOSE}], found: {}",
                    java_class(other)
                )))
                }
            };
            let key = self
                .fields
                .iter()
                .map(|f| {
                    (
                        Value::String(f.clone()),
                        map_get(map, f).cloned().unwrap_or_default(),
                    )
                })
                .collect();
            record.set_key(None, Value::Map(key));
            return Ok(Some(record));
        }
        let value = crate::util::require_struct_ref(record.value(), PURPOSE)?;
        let vs = value.schema().clone();
        let key_schema = self.cache.get_or_try_insert(ByPtr(vs.clone()), || {
            let mut b = SchemaBuilder::struct_();
            for f in &self.fields {
                let field = vs
                    .field(f)
                    .ok_or_else(|| ConnectError::data(format!("Field does not exist: {f}")))?;
                b = add_field(b, f, field.schema().clone())?;
            }
            finish(b)
        })?;
        let values: Vec<Value> = self
            .fields
            .iter()
            .map(|f| {
                field_value(
                    value,
                    vs.field(f).map_or(0, |x| x.index()),
                    self.replace_null_with_default,
                )
            })
            .collect();
        let key = struct_from_values(key_schema.clone(), values)?;
        record.set_key(Some(key_schema), Value::Struct(key));
        Ok(Some(record))
    }
}

// ---------------------------------------------------------------------------------------------
// ExtractField

/// A field path (`field.syntax.version` V1: one name; V2: dotted path with back-tick quoting).
#[derive(Clone, Debug, PartialEq)]
pub struct FieldPath {
    steps: Vec<String>,
}

impl FieldPath {
    pub fn v1(name: &str) -> FieldPath {
        FieldPath {
            steps: vec![name.to_owned()],
        }
    }

    /// Parses a V2 path as Kafka's `SingleFieldPath` (back-ticks quote names with dots).
    pub fn v2(path: &str) -> Result<FieldPath, String> {
        let b: Vec<char> = path.chars().collect();
        let incomplete = |at: usize| {
            format!(
                "Incomplete backtick pair in path: [{path}], consider adding a backslash before backtick at position {at} to escape it"
            )
        };
        let mut steps = Vec::new();
        let mut i = 0usize;
        while i < b.len() {
            if b[i] != '`' {
                let start = i;
                match b[i..].iter().position(|&c| c == '.') {
                    Some(p) => {
                        steps.push(b[start..start + p].iter().collect());
                        i = start + p + 1;
                    }
                    None => {
                        steps.push(b[start..].iter().collect());
                        i = b.len();
                    }
                }
            } else {
                let backtick_at = i;
                i += 1;
                let mut field = String::new();
                let mut start = i;
                loop {
                    let Some(p) = b[i..].iter().position(|&c| c == '`') else {
                        return Err(incomplete(backtick_at));
                    };
                    i += p;
                    let escaped = i > 0 && b[i - 1] == '\\';
                    if i + 1 >= b.len() {
                        if escaped {
                            return Err(incomplete(backtick_at));
                        }
                        field.extend(&b[start..i]);
                        steps.push(std::mem::take(&mut field));
                        i += 1;
                        break;
                    }
                    if b[i + 1] != '.' {
                        i += 1;
                        continue;
                    }
                    if escaped {
                        field.extend(&b[start..i - 1]);
                        field.push('`');
                        i += 1;
                        start = i;
                        continue;
                    }
                    field.extend(&b[start..i]);
                    steps.push(std::mem::take(&mut field));
                    i += 2;
                    break;
                }
            }
        }
        if path.ends_with('.') {
            steps.push(String::new());
        }
        Ok(FieldPath { steps })
    }

    /// The schema of the addressed field, if every step exists.
    pub fn field_schema(&self, schema: &Schema) -> Option<SchemaRef> {
        let mut current: Option<SchemaRef> = None;
        let mut s: &Schema = schema;
        for step in &self.steps {
            if s.schema_type() != SchemaType::Struct {
                return None;
            }
            let f = s.field(step)?;
            current = Some(f.schema().clone());
            s = f.schema();
        }
        current
    }

    /// The addressed value of a struct (null when an intermediate struct is null).
    pub fn struct_value(&self, value: &Struct, replace_null_with_default: bool) -> Value {
        let mut current = value;
        for (i, step) in self.steps.iter().enumerate() {
            let Some(f) = current.schema().field(step) else {
                return Value::Null;
            };
            let v = field_value(current, f.index(), replace_null_with_default);
            if i + 1 == self.steps.len() {
                return v;
            }
            match current.values()[f.index()] {
                Value::Struct(ref next) => current = next,
                _ => return Value::Null,
            }
        }
        Value::Null
    }

    /// The addressed value of a schemaless map (null when missing).
    pub fn map_value(&self, map: &[(Value, Value)]) -> Value {
        let mut current = map;
        for (i, step) in self.steps.iter().enumerate() {
            let Some(v) = map_get(current, step) else {
                return Value::Null;
            };
            if i + 1 == self.steps.len() {
                return v.clone();
            }
            match v {
                Value::Map(m) => current = m,
                _ => return Value::Null,
            }
        }
        Value::Null
    }
}

/// `org.apache.kafka.connect.transforms.ExtractField$Key` / `$Value`.
#[derive(Debug)]
pub struct ExtractField {
    target: Target,
    original: String,
    path: FieldPath,
    replace_null_with_default: bool,
}

pub(crate) fn field_syntax_key() -> ConfigKey {
    ConfigKey::new("field.syntax.version", ConfigType::String)
        .default_str("V1")
        .validator(Validator::one_of_case_insensitive(&["V1", "V2"]))
        .importance(Importance::High)
        .doc("Defines the version of the syntax to access fields. If set to `V1`, then the field paths are limited to access the elements at the root level of the struct or map. If set to `V2`, the syntax will support accessing nested elements.")
}

impl ExtractField {
    pub fn config_def() -> ConfigDef {
        ConfigDef::new()
            .define(
                ConfigKey::new("field", ConfigType::String)
                    .importance(Importance::Medium)
                    .doc("Field name to extract."),
            )
            .define(replace_null_key())
            .define(field_syntax_key())
    }

    pub fn configure(target: Target, props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(), props, |c, errors| {
            let original = get_string(c, "field").unwrap_or_default();
            let v2 = c
                .get_string("field.syntax.version")
                .is_some_and(|v| v.eq_ignore_ascii_case("V2"));
            let path = if v2 {
                match FieldPath::v2(&original) {
                    Ok(p) => p,
                    Err(e) => {
                        errors.add_error("field", e);
                        return None;
                    }
                }
            } else {
                FieldPath::v1(&original)
            };
            Some(ExtractField {
                target,
                original,
                path,
                replace_null_with_default: get_bool(c, "replace.null.with.default", true),
            })
        })
    }

    /// A `$Value` extractor of one top-level field, as Debezium's delegates configure it.
    pub fn value_field(name: &str) -> Self {
        ExtractField {
            target: Target::Value,
            original: name.to_owned(),
            path: FieldPath::v1(name),
            replace_null_with_default: true,
        }
    }

    /// Extracts from one operating schema/value.
    pub fn extract(
        &self,
        schema: Option<&SchemaRef>,
        value: &Value,
    ) -> Result<(Option<SchemaRef>, Value), ConnectError> {
        const PURPOSE: &str = "field extraction";
        match schema {
            None => match value {
                Value::Null => Ok((None, Value::Null)),
                Value::Map(m) => Ok((None, self.path.map_value(m))),
                other => Err(ConnectError::data(format!(
                    "Only Map objects supported in absence of schema for [{PURPOSE}], found: {}",
                    java_class(other)
                ))),
            },
            Some(schema) => {
                let s = match value {
                    Value::Null => None,
                    Value::Struct(s) => Some(s),
                    other => {
                        return Err(ConnectError::data(format!(
                            "Only Struct objects supported for [{PURPOSE}], found: {}",
                            java_class(other)
                        )))
                    }
                };
                let fs = self.path.field_schema(schema).ok_or_else(|| {
                    ConnectError::data(format!("Unknown field: {}", self.original))
                })?;
                let v = s.map_or(Value::Null, |s| {
                    self.path.struct_value(s, self.replace_null_with_default)
                });
                Ok((Some(fs), v))
            }
        }
    }
}

impl<R: ConnectRecord> Transform<R> for ExtractField {
    fn apply(&self, mut record: R) -> Result<Option<R>, ConnectError> {
        let (schema, value) =
            self.extract(self.target.schema(&record), self.target.value(&record))?;
        self.target.set(&mut record, schema, value);
        Ok(Some(record))
    }
}

// ---------------------------------------------------------------------------------------------
// HoistField

/// `org.apache.kafka.connect.transforms.HoistField$Key` / `$Value`.
#[derive(Debug)]
pub struct HoistField {
    target: Target,
    field: String,
    cache: SchemaCache<ByPtr, SchemaRef>,
}

impl HoistField {
    pub fn config_def() -> ConfigDef {
        ConfigDef::new().define(
            ConfigKey::new("field", ConfigType::String)
                .importance(Importance::Medium)
                .doc("Field name for the single field that will be created in the resulting Struct or Map."),
        )
    }

    pub fn configure(target: Target, props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(), props, |c, _| {
            Some(HoistField {
                target,
                field: get_string(c, "field").unwrap_or_default(),
                cache: cache(),
            })
        })
    }
}

impl<R: ConnectRecord> Transform<R> for HoistField {
    fn apply(&self, mut record: R) -> Result<Option<R>, ConnectError> {
        let (schema, value) = self.target.take(&mut record);
        match schema {
            None => {
                let map = vec![(Value::String(self.field.clone()), value)];
                self.target.set(&mut record, None, Value::Map(map));
            }
            Some(schema) => {
                let out = self.cache.get_or_try_insert(ByPtr(schema.clone()), || {
                    finish(add_field(
                        SchemaBuilder::struct_(),
                        &self.field,
                        schema.clone(),
                    )?)
                })?;
                let s = struct_from_values(out.clone(), [value])?;
                self.target.set(&mut record, Some(out), Value::Struct(s));
            }
        }
        Ok(Some(record))
    }
}

// ---------------------------------------------------------------------------------------------
// SetSchemaMetadata

/// `org.apache.kafka.connect.transforms.SetSchemaMetadata$Key` / `$Value`.
#[derive(Debug)]
pub struct SetSchemaMetadata {
    target: Target,
    name: Option<String>,
    version: Option<i32>,
    replace_null_with_default: bool,
    cache: SchemaCache<ByPtr, SchemaRef>,
}

impl SetSchemaMetadata {
    pub fn config_def() -> ConfigDef {
        ConfigDef::new()
            .define(
                ConfigKey::new("schema.name", ConfigType::String)
                    .default_null()
                    .importance(Importance::High)
                    .doc("Schema name to set."),
            )
            .define(
                ConfigKey::new("schema.version", ConfigType::Int)
                    .default_null()
                    .importance(Importance::High)
                    .doc("Schema version to set."),
            )
            .define(replace_null_key())
    }

    pub fn configure(target: Target, props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(), props, |c: &ParsedConfig, errors| {
            let name = get_string(c, "schema.name");
            let version = c.get_long("schema.version").map(|v| v as i32);
            if name.is_none() && version.is_none() {
                errors.add_error("type", "Neither schema name nor version configured");
            }
            Some(SetSchemaMetadata {
                target,
                name,
                version,
                replace_null_with_default: get_bool(c, "replace.null.with.default", true),
                cache: cache(),
            })
        })
    }
}

impl<R: ConnectRecord> Transform<R> for SetSchemaMetadata {
    fn apply(&self, mut record: R) -> Result<Option<R>, ConnectError> {
        if self.target.value(&record).is_null() && self.target.schema(&record).is_none() {
            return Ok(Some(record));
        }
        let (schema, value) = self.target.take(&mut record);
        let schema = require_schema(schema.as_ref(), "updating schema metadata")?.clone();
        let out = self.cache.get_or_try_insert(ByPtr(schema.clone()), || {
            let mut b = schema.to_builder();
            if let Some(n) = &self.name {
                b = b.name(n.clone());
            }
            if let Some(v) = self.version {
                b = b.version(v);
            }
            finish(b)
        })?;
        let value = match value {
            Value::Struct(s) => {
                let values: Vec<Value> = (0..s.values().len())
                    .map(|i| field_value(&s, i, self.replace_null_with_default))
                    .collect();
                Value::Struct(struct_from_values(out.clone(), values)?)
            }
            other => other,
        };
        self.target.set(&mut record, Some(out), value);
        Ok(Some(record))
    }
}
