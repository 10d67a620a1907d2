//! `io.debezium.transforms.ExtractNewRecordState` ("unwrap"): turns a Debezium change event
//! envelope into the plain row state (`after`, or `before` for rewritten deletes), following
//! Debezium 3.x's `ExtractNewRecordState` and `DefaultDeleteHandlingStrategy`.
//!
//! `delete.tombstone.handling.mode`:
//! - `tombstone` (default): a delete becomes a record whose value is null *with* the `after`
//!   field's schema; the connector's own tombstone is dropped;
//! - `drop`: deletes and tombstones are dropped;
//! - `rewrite`: deletes become the `before` row plus `__deleted: "true"`, other rows get
//!   `__deleted: "false"`; tombstones are dropped;
//! - `rewrite-with-tombstone`: as `rewrite`, tombstones kept;
//! - `delete-to-tombstone`: a delete becomes a true tombstone (key kept, value and schema null),
//!   the connector's tombstone is dropped.
//!
//! Records that are not envelopes (heartbeats, schema changes, transaction metadata) pass
//! unchanged; truncate events are dropped. `add.fields` / `add.headers` copy envelope, source or
//! transaction fields (`op` -> `__op`, `source.ts_ms` -> `__source_ts_ms`, `name:alias`
//! renames); `route.by.field` sets the topic from a row column; `drop.fields.header.name` drops
//! the fields a header lists. The schema with added fields is cached per (row schema, op).

use std::collections::BTreeMap;

use headwater_api::config::{ConfigKey, ConfigType, Importance, ParsedConfig, Validator, Width};
use headwater_api::{
    ConfigDef, ConfigValidation, ConnectError, ConnectRecord, Headers, Properties, Schema,
    SchemaBuilder, SchemaRef, Struct, Transform, Value,
};

use crate::kafka::{ExtractField, InsertField, ReplaceField};
use crate::util::{
    add_field, configure, copy_schema_basics, copy_schema_basics_same_type, finish, get_bool,
    get_list, get_string, struct_from_values, ByPtr, SchemaCache, Target,
};

use super::is_envelope;

/// `delete.tombstone.handling.mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteTombstoneHandling {
    Drop,
    Tombstone,
    Rewrite,
    RewriteWithTombstone,
    DeleteToTombstone,
}

impl DeleteTombstoneHandling {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s.trim().to_ascii_lowercase().as_str() {
            "drop" => Self::Drop,
            "tombstone" => Self::Tombstone,
            "rewrite" => Self::Rewrite,
            "rewrite-with-tombstone" => Self::RewriteWithTombstone,
            "delete-to-tombstone" => Self::DeleteToTombstone,
            _ => return None,
        })
    }
    pub(crate) fn is_rewrite(self) -> bool {
        matches!(self, Self::Rewrite | Self::RewriteWithTombstone)
    }
}

/// One `add.fields` / `add.headers` entry (Debezium's `FieldReference`).
#[derive(Clone, Debug, PartialEq)]
pub struct FieldReference {
    /// The envelope member holding the field (`source`, `transaction`, ...), or none for
    /// envelope-level fields (`op`, `ts_ms`, ...).
    pub parent: Option<String>,
    pub field: String,
    pub new_field: String,
}

impl FieldReference {
    pub fn parse(prefix: &str, spec: &str) -> Result<FieldReference, String> {
        let parts: Vec<&str> = java_split(spec, ':');
        let splits: Vec<&str> = java_split(parts.first().copied().unwrap_or(""), '.');
        let field = if splits.len() == 1 {
            splits[0]
        } else {
            splits.get(1).copied().unwrap_or("")
        };
        let parent = if splits.len() == 1 {
            match field {
                "id" | "total_order" | "data_collection_order" => Some("transaction".to_owned()),
                "op" | "ts_ms" | "ts_us" | "ts_ns" => None,
                "updateDescription" => Some("updateDescription".to_owned()),
                _ => Some("source".to_owned()),
            }
        } else {
            Some(splits[0].to_owned())
        };
        let new_field = match parts.len() {
            1 if splits.len() == 1 => format!("{prefix}{field}"),
            1 => format!("{prefix}{}_{field}", parent.as_deref().unwrap_or("")),
            2 => format!("{prefix}{}", parts[1]),
            _ => return Err(format!("Unexpected field name: {spec}")),
        };
        Ok(FieldReference {
            parent,
            field: field.to_owned(),
            new_field,
        })
    }

    pub fn list(prefix: &str, specs: &[String]) -> Result<Vec<FieldReference>, String> {
        specs
            .iter()
            .filter(|s| !s.trim().is_empty())
            .map(|s| FieldReference::parse(prefix, s.trim()))
            .collect()
    }

    fn source_field<'a>(&self, envelope: &'a Schema) -> Option<&'a SchemaRef> {
        let parent = match &self.parent {
            Some(p) => envelope.field(p)?.schema(),
            None => envelope,
        };
        match parent.field(&self.field) {
            Some(f) => Some(f.schema()),
            None => envelope.field(&self.field).map(|f| f.schema()),
        }
    }

    /// The schema of the added field: the source field's, made optional.
    pub fn schema(&self, envelope: &Schema) -> Option<SchemaRef> {
        let s = self.source_field(envelope)?;
        Some(copy_schema_basics_same_type(s).optional().build_ref())
    }

    /// The raw value (defaults not applied).
    pub fn value(&self, envelope: &Struct) -> Value {
        let parent = match &self.parent {
            Some(p) => match envelope.get(p) {
                Some(Value::Struct(s)) => s,
                _ => return Value::Null,
            },
            None => envelope,
        };
        match parent.get(&self.field) {
            Some(v) => v.clone(),
            None => envelope.get(&self.field).cloned().unwrap_or_default(),
        }
    }
}

/// The `add.headers` of one record, taken from its envelope (`None` for a tombstone, which
/// only gets `op` = `d`).
pub(crate) fn envelope_headers(refs: &[FieldReference], envelope: Option<&Struct>) -> Headers {
    let mut headers = Headers::new();
    for r in refs {
        match envelope {
            None => {
                if r.field == "op" {
                    headers.add(
                        r.new_field.clone(),
                        Some(Schema::string()),
                        Value::from("d"),
                    );
                }
            }
            Some(env) => {
                if let Some(schema) = r.schema(env.schema()) {
                    headers.add(r.new_field.clone(), Some(schema), r.value(env));
                }
            }
        }
    }
    headers
}

/// Java's `String.split` for one character: trailing empty strings removed.
fn java_split(s: &str, sep: char) -> Vec<&str> {
    let mut parts: Vec<&str> = s.split(sep).collect();
    while parts.len() > 1 && parts.last() == Some(&"") {
        parts.pop();
    }
    parts
}

/// `io.debezium.transforms.ExtractNewRecordState`.
#[derive(Debug)]
pub struct ExtractNewRecordState {
    mode: DeleteTombstoneHandling,
    route_by_field: Option<String>,
    add_fields: Vec<FieldReference>,
    add_headers: Vec<FieldReference>,
    drop_fields_header: Option<String>,
    drop_fields_from_key: bool,
    drop_fields_keep_schema_compatible: bool,
    after: ExtractField,
    before: ExtractField,
    mark_deleted: InsertField,
    mark_kept: InsertField,
    cache: SchemaCache<(ByPtr, String), SchemaRef>,
}

fn insert_deleted(value: &str, replace_null_with_default: bool) -> Option<InsertField> {
    let props: BTreeMap<String, String> = [
        ("static.field", "__deleted"),
        ("static.value", value),
        (
            "replace.null.with.default",
            if replace_null_with_default {
                "true"
            } else {
                "false"
            },
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    InsertField::configure(Target::Value, &props).ok()
}

/// The keys `ExtractNewRecordState` and MongoDB's `ExtractNewDocumentState` share: delete
/// handling and the fields and headers copied from the envelope.
pub(crate) fn define_shared_keys(def: ConfigDef) -> ConfigDef {
    let s = |name: &str, default: &str, doc: &str| {
        ConfigKey::new(name, ConfigType::String)
            .default_str(default)
            .importance(Importance::Low)
            .doc(doc)
    };
    let l = |name: &str, doc: &str| {
        ConfigKey::new(name, ConfigType::List)
            .default_str("")
            .importance(Importance::Low)
            .width(Width::Long)
            .doc(doc)
    };
    def.define(
        ConfigKey::new("delete.tombstone.handling.mode", ConfigType::String)
            .default_str("tombstone")
            .validator(Validator::one_of_case_insensitive(&[
                "drop",
                "tombstone",
                "rewrite",
                "rewrite-with-tombstone",
                "delete-to-tombstone",
            ]))
            .importance(Importance::Medium)
            .width(Width::Medium)
            .doc("How to handle delete records: drop, tombstone (default), rewrite, rewrite-with-tombstone or delete-to-tombstone."),
    )
    .define(s("add.fields.prefix", "__", "Adds this prefix to each field listed."))
    .define(l("add.fields", "Adds each field listed, prefixed with __ (or __<struct>_ if the struct is specified). Optionally field:newName."))
    .define(s("add.headers.prefix", "__", "Adds this prefix listed to each header."))
    .define(l("add.headers", "Adds each field listed to the header, prefixed with __ (or __<struct>_ if the struct is specified). Optionally field:newName."))
}

/// The shared keys, parsed: delete handling, `add.fields`, `add.headers`. Prefixes are read
/// untrimmed from `props`, as Debezium reads them (they may be meant to contain spaces).
pub(crate) fn parse_shared_keys(
    props: &Properties,
    c: &ParsedConfig,
    errors: &mut ConfigValidation,
) -> Option<(
    DeleteTombstoneHandling,
    Vec<FieldReference>,
    Vec<FieldReference>,
)> {
    let raw = |k: &str| props.get(k).cloned();
    let mode = DeleteTombstoneHandling::parse(c.get_string("delete.tombstone.handling.mode")?)?;
    let fields_prefix = raw("add.fields.prefix").unwrap_or_else(|| "__".into());
    let headers_prefix = raw("add.headers.prefix").unwrap_or_else(|| "__".into());
    let add_fields = FieldReference::list(&fields_prefix, &get_list(c, "add.fields"))
        .map_err(|e| errors.add_error("add.fields", e))
        .ok()?;
    let add_headers = FieldReference::list(&headers_prefix, &get_list(c, "add.headers"))
        .map_err(|e| errors.add_error("add.headers", e))
        .ok()?;
    Some((mode, add_fields, add_headers))
}

impl ExtractNewRecordState {
    pub fn config_def() -> ConfigDef {
        define_shared_keys(ConfigDef::new())
            .define(
                ConfigKey::new("route.by.field", ConfigType::String)
                    .default_str("")
                    .importance(Importance::Low)
                    .doc("The column which determines how the events will be routed, the value will replace the topic name."),
            )
            .define(
                ConfigKey::new("replace.null.with.default", ConfigType::Boolean)
                    .default_str("true")
                    .importance(Importance::Low)
                    .doc("When this option is enabled, null field values are replaced by source-defined defaults when rewriting the record."),
            )
            .define(
                ConfigKey::new("drop.fields.header.name", ConfigType::String)
                    .default_null()
                    .importance(Importance::Low)
                    .doc("Specifies the name of a header that contains a list of fields to be removed from the event value."),
            )
            .define(
                ConfigKey::new("drop.fields.from.key", ConfigType::Boolean)
                    .default_str("false")
                    .importance(Importance::Low)
                    .doc("Specifies whether to apply the drop fields behavior to the event key as well as the value."),
            )
            .define(
                ConfigKey::new("drop.fields.keep.schema.compatible", ConfigType::Boolean)
                    .default_str("true")
                    .importance(Importance::Low)
                    .doc("true: only optional fields are dropped; false: listed fields are dropped regardless of optionality."),
            )
    }

    pub fn configure(props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(), props, |c, errors| {
            let (mode, add_fields, add_headers) = parse_shared_keys(props, c, errors)?;
            let replace = get_bool(c, "replace.null.with.default", true);
            Some(ExtractNewRecordState {
                mode,
                route_by_field: get_string(c, "route.by.field").filter(|s| !s.is_empty()),
                add_fields,
                add_headers,
                drop_fields_header: get_string(c, "drop.fields.header.name")
                    .filter(|s| !s.trim().is_empty()),
                drop_fields_from_key: get_bool(c, "drop.fields.from.key", false),
                drop_fields_keep_schema_compatible: get_bool(
                    c,
                    "drop.fields.keep.schema.compatible",
                    true,
                ),
                after: ExtractField::value_field("after"),
                before: ExtractField::value_field("before"),
                mark_deleted: insert_deleted("true", replace)?,
                mark_kept: insert_deleted("false", replace)?,
                cache: SchemaCache::new(64),
            })
        })
    }

    fn add_fields<R: ConnectRecord>(
        &self,
        envelope: &Struct,
        mut record: R,
    ) -> Result<R, ConnectError> {
        if self.add_fields.is_empty() {
            return Ok(record);
        }
        let (_, value) = record.take_value();
        let value = crate::util::require_struct(value, "source field insertion")?;
        let op = match envelope.get("op") {
            Some(Value::String(s)) => s.clone(),
            _ => String::new(),
        };
        let row_schema = value.schema().clone();
        let env_schema = envelope.schema();
        let out = self
            .cache
            .get_or_try_insert((ByPtr(row_schema.clone()), op), || {
                let mut b = copy_schema_basics(&row_schema, SchemaBuilder::struct_());
                for f in row_schema.fields() {
                    b = add_field(b, f.name(), f.schema().clone())?;
                }
                for r in &self.add_fields {
                    if let Some(s) = r.schema(env_schema) {
                        b = add_field(b, &r.new_field, s)?;
                    }
                }
                finish(b)
            })?;
        let mut values = value.into_values();
        for r in &self.add_fields {
            if r.schema(env_schema).is_some() {
                values.push(r.value(envelope));
            }
        }
        let s = struct_from_values(out.clone(), values)?;
        record.set_value(Some(out), Value::Struct(s));
        Ok(record)
    }

    fn fields_to_drop(&self, schema: &Schema, names: &[String]) -> Vec<String> {
        if !self.drop_fields_keep_schema_compatible {
            return names.to_vec();
        }
        schema
            .fields()
            .iter()
            .filter(|f| f.schema().is_optional() && names.iter().any(|n| n == f.name()))
            .map(|f| f.name().to_owned())
            .collect()
    }

    fn drop_fields<R: ConnectRecord>(&self, mut record: R) -> Result<R, ConnectError> {
        let Some(header) = &self.drop_fields_header else {
            return Ok(record);
        };
        let names: Option<Vec<String>> = match record.headers().iter().find(|h| &h.key == header) {
            Some(h) => match &h.value {
                Value::Array(items) => Some(
                    items
                        .iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect(),
                ),
                _ => None,
            },
            None => None,
        };
        let Some(names) = names else {
            return Ok(record);
        };
        if names.is_empty() {
            return Ok(record);
        }
        if self.drop_fields_from_key && !record.key().is_null() {
            if let Some(ks) = record.key_schema().cloned() {
                let drop = self.fields_to_drop(&ks, &names);
                if !drop.is_empty() {
                    let (s, v) = record.take_key();
                    let (s, v) = ReplaceField::excluding(Target::Key, drop).apply_to(s, v)?;
                    record.set_key(s, v);
                }
            }
        }
        if let Some(vs) = record.value_schema().cloned() {
            let drop = self.fields_to_drop(&vs, &names);
            if !drop.is_empty() {
                let (s, v) = record.take_value();
                let (s, v) = ReplaceField::excluding(Target::Value, drop).apply_to(s, v)?;
                record.set_value(s, v);
            }
        }
        Ok(record)
    }

    fn route<R: ConnectRecord>(
        &self,
        row: Option<&Struct>,
        mut record: R,
    ) -> Result<R, ConnectError> {
        let Some(field) = &self.route_by_field else {
            return Ok(record);
        };
        let Some(row) = row else {
            return Ok(record);
        };
        let topic = row
            .get(field)
            .ok_or_else(|| ConnectError::data(format!("{field} is not a valid field name")))?;
        if let Value::String(t) = topic {
            if !t.trim().is_empty() {
                record.set_topic(t.clone());
            }
        }
        Ok(record)
    }
}

impl<R: ConnectRecord> Transform<R> for ExtractNewRecordState {
    fn apply(&self, mut record: R) -> Result<Option<R>, ConnectError> {
        let tombstone = record.value().is_null();
        let envelope_ok = record.value_schema().is_some_and(|s| is_envelope(s));
        if (envelope_ok || tombstone) && !self.add_headers.is_empty() {
            let env = match record.value() {
                Value::Struct(s) => Some(s),
                _ => None,
            };
            let headers = envelope_headers(&self.add_headers, env);
            for h in headers.iter() {
                record
                    .headers_mut()
                    .add(h.key.clone(), h.schema.clone(), h.value.clone());
            }
        }
        if tombstone {
            return Ok(match self.mode {
                DeleteTombstoneHandling::RewriteWithTombstone => Some(record),
                _ => None,
            });
        }
        if !envelope_ok {
            return Ok(Some(record));
        }
        // From here on `record` carries no value, so copies of it are cheap.
        let (env_schema, env_value) = record.take_value();
        let Value::Struct(envelope) = &env_value else {
            record.set_value(env_schema, env_value);
            return Ok(Some(record));
        };
        let with_value = |(schema, value): (Option<SchemaRef>, Value)| {
            let mut r = record.clone();
            r.set_value(schema, value);
            r
        };
        let after = with_value(self.after.extract(env_schema.as_ref(), &env_value)?);
        if after.value().is_null() {
            let before = with_value(self.before.extract(env_schema.as_ref(), &env_value)?);
            if before.value().is_null() {
                // Truncate (no row state at all): dropped.
                return Ok(None);
            }
            // A delete.
            let mut out = match self.mode {
                DeleteTombstoneHandling::Drop => return Ok(None),
                DeleteTombstoneHandling::Tombstone => after,
                DeleteTombstoneHandling::DeleteToTombstone => {
                    let mut r = after;
                    r.set_value(None, Value::Null);
                    r
                }
                DeleteTombstoneHandling::Rewrite
                | DeleteTombstoneHandling::RewriteWithTombstone => {
                    if matches!(before.value(), Value::Struct(_)) {
                        match Transform::<R>::apply(&self.mark_deleted, before)? {
                            Some(r) => r,
                            None => return Ok(None),
                        }
                    } else {
                        before
                    }
                }
            };
            let before_row = match envelope.get("before") {
                Some(Value::Struct(s)) => Some(s),
                _ => None,
            };
            out = self.route(before_row, out)?;
            out = self.drop_fields(out)?;
            if !out.value().is_null() {
                out = self.add_fields(envelope, out)?;
            }
            return Ok(Some(out));
        }
        let mut out = after;
        if self.mode.is_rewrite() && matches!(out.value(), Value::Struct(_)) {
            out = match Transform::<R>::apply(&self.mark_kept, out)? {
                Some(r) => r,
                None => return Ok(None),
            };
        }
        let row = match out.value() {
            Value::Struct(s) => Some(s.clone()),
            _ => None,
        };
        out = self.route(row.as_ref(), out)?;
        out = self.add_fields(envelope, out)?;
        out = self.drop_fields(out)?;
        Ok(Some(out))
    }
}
