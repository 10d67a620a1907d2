//! `io.debezium.transforms.ToLogicalTopicRouter` and its deprecated predecessor
//! `io.debezium.transforms.ByLogicalTableRouter`: route several physical tables' topics to one
//! logical topic (`topic.regex` full match, then `replaceFirst` with `topic.replacement`, Java
//! semantics), rename the key schema to `<topic>.Key` and the envelope/row schemas to
//! `<topic>.Envelope` / `<topic>.Value`, and (with `key.enforce.uniqueness`) add a key field that
//! identifies the physical source (`key.field.name`, default `__dbz__sourceIdentifier`, or
//! `__dbz__physicalTableIdentifier` for ByLogicalTableRouter; derived from the original topic
//! with `key.field.regex` / `key.field.replacement`).
//!
//! Tombstones and non-envelope values keep their value; an empty routed topic leaves the record
//! unchanged. Schemas are cached per input schema (bounded by `logical.destination.cache.size`,
//! or the legacy `logical.table.cache.size` for ByLogicalTableRouter).

use headwater_api::config::{ConfigKey, ConfigType, Importance, Validator};
use headwater_api::{
    ConfigDef, ConfigValidation, ConnectError, ConnectRecord, Properties, Schema, SchemaBuilder,
    SchemaRef, Struct, Transform, Value,
};

use super::is_envelope;
use crate::java_regex::{JavaRegex, JavaReplacement};
use crate::kafka::routers::regex_validator;
use crate::util::{
    add_field, configure, finish, get_bool, get_string, require_struct_ref, struct_from_values,
    ByPtr, SchemaCache,
};

/// Debezium's `SchemaNameAdjuster` in `avro` mode: characters not valid in an Avro full name
/// become `_`.
pub fn avro_adjust(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for (i, c) in name.chars().enumerate() {
        let ok = c.is_ascii_alphabetic() || c == '_' || (i > 0 && (c.is_ascii_digit() || c == '.'));
        out.push(if ok { c } else { '_' });
    }
    out
}

/// ToLogicalTopicRouter / ByLogicalTableRouter.
#[derive(Debug)]
pub struct LogicalTopicRouter {
    topic_regex: JavaRegex,
    topic_replacement: JavaReplacement,
    key_enforce_uniqueness: bool,
    key_field_name: String,
    key_field: Option<(JavaRegex, JavaReplacement)>,
    avro_names: bool,
    key_cache: SchemaCache<ByPtr, SchemaRef>,
    envelope_cache: SchemaCache<ByPtr, SchemaRef>,
}

impl LogicalTopicRouter {
    pub fn config_def(legacy: bool) -> ConfigDef {
        let key_field_default = if legacy {
            "__dbz__physicalTableIdentifier"
        } else {
            "__dbz__sourceIdentifier"
        };
        let mut def = ConfigDef::new()
            .define(
                ConfigKey::new("topic.regex", ConfigType::String)
                    .validator(regex_validator())
                    .importance(Importance::Low)
                    .doc("The regex used for extracting the name of the logical destination from the original topic name."),
            )
            .define(
                ConfigKey::new("topic.replacement", ConfigType::String)
                    .importance(Importance::Low)
                    .doc("The replacement string used in conjunction with topic.regex. This will be used to create the new topic name."),
            )
            .define(
                ConfigKey::new("key.enforce.uniqueness", ConfigType::Boolean)
                    .default_str("true")
                    .importance(Importance::Low)
                    .doc("Augment each record's key with a field denoting the source topic."),
            )
            .define(
                ConfigKey::new("key.field.regex", ConfigType::String)
                    .default_null()
                    .validator(regex_validator())
                    .importance(Importance::Low)
                    .doc("The regex used for extracting the source identifier from the original topic name."),
            )
            .define(
                ConfigKey::new("key.field.name", ConfigType::String)
                    .default_str(key_field_default)
                    .importance(Importance::Low)
                    .doc("Each record's key schema will be augmented with this field name."),
            )
            .define(
                ConfigKey::new("key.field.replacement", ConfigType::String)
                    .default_null()
                    .importance(Importance::Low)
                    .doc("The replacement string used in conjunction with key.field.regex. This will be used to create the source identifier in the record's key."),
            )
            .define(
                ConfigKey::new("schema.name.adjustment.mode", ConfigType::String)
                    .default_str("none")
                    .validator(Validator::one_of_case_insensitive(&["none", "avro"]))
                    .importance(Importance::Low)
                    .doc("How key schema names derived from the topic name are adjusted: 'avro' replaces characters Avro can't use with '_', 'none' leaves them."),
            )
            .define(
                ConfigKey::new("logical.destination.cache.size", ConfigType::Int)
                    .default_str("16")
                    .validator(Validator::at_least(1.0))
                    .importance(Importance::Low)
                    .doc("The size of the schema caches."),
            );
        if legacy {
            def = def.define(
                ConfigKey::new("logical.table.cache.size", ConfigType::Int)
                    .default_null()
                    .validator(Validator::at_least(1.0))
                    .importance(Importance::Low)
                    .doc("Deprecated name of logical.destination.cache.size."),
            );
        }
        def
    }

    pub fn configure(legacy: bool, props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(legacy), props, |c, errors| {
            let topic_regex = JavaRegex::compile(c.get_string("topic.regex")?).ok()?;
            let topic_replacement = topic_regex.replacement(props.get("topic.replacement")?);
            let key_field_regex = get_string(c, "key.field.regex").filter(|s| !s.trim().is_empty());
            let key_field_replacement =
                get_string(c, "key.field.replacement").filter(|s| !s.trim().is_empty());
            let key_field = match (key_field_regex, key_field_replacement) {
                (Some(_), None) => {
                    errors.add_error(
                        "key.field.replacement",
                        "key.field.replacement must be non-empty if key.field.regex is set.",
                    );
                    return None;
                }
                (Some(r), Some(rep)) => {
                    let re = JavaRegex::compile(&r).ok()?;
                    let rep = re.replacement(&rep);
                    Some((re, rep))
                }
                _ => None,
            };
            let size = if legacy && !props.contains_key("logical.destination.cache.size") {
                c.get_long("logical.table.cache.size")
                    .or_else(|| c.get_long("logical.destination.cache.size"))
            } else {
                c.get_long("logical.destination.cache.size")
            }
            .unwrap_or(16) as usize;
            Some(LogicalTopicRouter {
                topic_regex,
                topic_replacement,
                key_enforce_uniqueness: get_bool(c, "key.enforce.uniqueness", true),
                key_field_name: get_string(c, "key.field.name")?,
                key_field,
                avro_names: c
                    .get_string("schema.name.adjustment.mode")
                    .is_some_and(|m| m.eq_ignore_ascii_case("avro")),
                key_cache: SchemaCache::new(size),
                envelope_cache: SchemaCache::new(size),
            })
        })
    }

    fn adjust(&self, name: String) -> String {
        if self.avro_names {
            avro_adjust(&name)
        } else {
            name
        }
    }

    /// A struct builder with `source`'s version, doc, parameters, optionality (and fields when
    /// `with_fields`), but not its name (Debezium's `copySchemaExcludingName`).
    fn copy_excluding_name(
        source: &Schema,
        with_fields: bool,
    ) -> Result<SchemaBuilder, ConnectError> {
        let mut b = SchemaBuilder::struct_();
        if let Some(v) = source.version() {
            b = b.version(v);
        }
        if let Some(d) = source.doc() {
            b = b.doc(d);
        }
        if let Some(params) = source.parameters() {
            b = b.parameters_present();
            for (k, v) in params {
                b = b.parameter(k.clone(), v.clone());
            }
        }
        if source.is_optional() {
            b = b.optional();
        }
        if with_fields {
            for f in source.fields() {
                b = add_field(b, f.name(), f.schema().clone())?;
            }
        }
        Ok(b)
    }

    fn key_schema(&self, old: &SchemaRef, topic: &str) -> Result<SchemaRef, ConnectError> {
        self.key_cache.get_or_try_insert(ByPtr(old.clone()), || {
            let mut b =
                Self::copy_excluding_name(old, true)?.name(self.adjust(format!("{topic}.Key")));
            if self.key_enforce_uniqueness {
                b = add_field(b, &self.key_field_name, Schema::string())?;
            }
            finish(b)
        })
    }

    fn envelope_schema(&self, old: &SchemaRef, topic: &str) -> Result<SchemaRef, ConnectError> {
        self.envelope_cache
            .get_or_try_insert(ByPtr(old.clone()), || {
                let row = old.field("before").or_else(|| old.field("after"));
                let new_row = match row {
                    Some(f) => Some(finish(
                        Self::copy_excluding_name(f.schema(), true)?
                            .name(self.adjust(format!("{topic}.Value"))),
                    )?),
                    None => None,
                };
                let mut b = Self::copy_excluding_name(old, false)?;
                for f in old.fields() {
                    let fs = match (&new_row, f.name()) {
                        (Some(r), "before" | "after") => r.clone(),
                        _ => f.schema().clone(),
                    };
                    b = add_field(b, f.name(), fs)?;
                }
                finish(b.name(self.adjust(format!("{topic}.Envelope"))))
            })
    }

    fn source_id(&self, old_topic: &str) -> Result<String, ConnectError> {
        if let Some((re, rep)) = &self.key_field {
            if let Some(id) = re.route(old_topic, rep).map_err(ConnectError::data)? {
                return Ok(id);
            }
        }
        Ok(old_topic.to_owned())
    }
}

fn rebuild(schema: &SchemaRef, old: &Struct, extra: Option<Value>) -> Result<Struct, ConnectError> {
    let mut values = old.values().to_vec();
    if let Some(v) = extra {
        values.push(v);
    }
    struct_from_values(schema.clone(), values)
}

impl<R: ConnectRecord> Transform<R> for LogicalTopicRouter {
    fn apply(&self, mut record: R) -> Result<Option<R>, ConnectError> {
        let old_topic = record.topic().to_owned();
        let Some(new_topic) = self
            .topic_regex
            .route(&old_topic, &self.topic_replacement)
            .map_err(ConnectError::data)?
        else {
            return Ok(Some(record));
        };
        if new_topic.is_empty() {
            return Ok(Some(record));
        }
        if !record.key().is_null() {
            let old_key = require_struct_ref(record.key(), "Updating schema")?;
            let ks = self.key_schema(old_key.schema(), &new_topic)?;
            let extra = self
                .key_enforce_uniqueness
                .then(|| self.source_id(&old_topic))
                .transpose()?
                .map(Value::String);
            let key = rebuild(&ks, old_key, extra)?;
            record.set_key(Some(ks), Value::Struct(key));
        } else {
            record.set_key(None, Value::Null);
        }
        let envelope_ok =
            !record.value().is_null() && record.value_schema().is_some_and(|s| is_envelope(s));
        if envelope_ok {
            let (_, value) = record.take_value();
            let Value::Struct(env) = value else {
                return Err(ConnectError::data(
                    "Only Struct objects supported for [Updating schema]",
                ));
            };
            let es = self.envelope_schema(env.schema(), &new_topic)?;
            let row_schema = es
                .field("before")
                .or_else(|| es.field("after"))
                .map(|f| f.schema().clone());
            let mut values = Vec::with_capacity(es.fields().len());
            for (f, v) in env.schema().fields().iter().zip(env.values()) {
                let v = match (f.name(), v, &row_schema) {
                    ("before" | "after", Value::Struct(row), Some(rs)) => {
                        Value::Struct(rebuild(rs, row, None)?)
                    }
                    _ => v.clone(),
                };
                values.push(v);
            }
            let new_env = struct_from_values(es.clone(), values)?;
            record.set_value(Some(es), Value::Struct(new_env));
        }
        record.set_topic(new_topic);
        Ok(Some(record))
    }
}
