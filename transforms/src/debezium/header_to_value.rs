//! `io.debezium.transforms.HeaderToValue`: copies or moves headers into value fields
//! (`headers[i]` -> `fields[i]`, dotted field names nest into structs, created as optional
//! structs when missing). Null values (tombstones) and records without any of the headers pass
//! unchanged. As in Debezium the output schema is cached per input value schema (64 entries).

use headwater_api::config::{ConfigKey, ConfigType, Importance, Validator};
use headwater_api::{
    ConfigDef, ConfigValidation, ConfigValue, ConnectError, ConnectRecord, Properties, Schema,
    SchemaBuilder, SchemaRef, SchemaType, Struct, Transform, Value,
};

use crate::kafka::headers::Operation;
use crate::util::{
    add_field, configure, copy_schema_basics, finish, get_list, require_struct, ByPtr, SchemaCache,
};

fn list_validator() -> Validator {
    Validator::custom(|v| match v {
        ConfigValue::List(items) if items.iter().any(|i| i.contains(' ')) => {
            Err("Comma-separated list should not contain spaces".to_owned())
        }
        ConfigValue::List(items) if items.iter().any(String::is_empty) => {
            Err("Comma-separated list should not contain empty elements".to_owned())
        }
        _ => Ok(()),
    })
}

/// `io.debezium.transforms.HeaderToValue`.
#[derive(Debug)]
pub struct HeaderToValue {
    headers: Vec<String>,
    fields: Vec<String>,
    operation: Operation,
    cache: SchemaCache<ByPtr, SchemaRef>,
}

struct Entry {
    path: Vec<String>,
    schema: SchemaRef,
    value: Value,
}

impl HeaderToValue {
    pub fn config_def() -> ConfigDef {
        ConfigDef::new()
            .define(
                ConfigKey::new("headers", ConfigType::List)
                    .validator(list_validator())
                    .importance(Importance::High)
                    .doc("Header names in the record whose values are to be copied or moved to record value."),
            )
            .define(
                ConfigKey::new("fields", ConfigType::List)
                    .validator(list_validator())
                    .importance(Importance::High)
                    .doc("Field names, in the same order as the header names listed in the headers configuration property. Supports Struct nesting using dot notation."),
            )
            .define(
                ConfigKey::new("operation", ConfigType::String)
                    .validator(Validator::one_of_case_insensitive(&["move", "copy"]))
                    .importance(Importance::High)
                    .doc("Either move if the fields are to be moved to the value (removed from the headers), or copy if the fields are to be copied to the value (retained in the headers)."),
            )
    }

    pub fn configure(props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(), props, |c, errors| {
            let headers = get_list(c, "headers");
            let fields = get_list(c, "fields");
            if headers.len() != fields.len() {
                errors.add_error(
                    "fields",
                    "'fields' config must have the same number of elements as 'headers' config.",
                );
            }
            Some(HeaderToValue {
                headers,
                fields,
                operation: Operation::parse(&c.get_string("operation")?.to_ascii_lowercase())?,
                cache: SchemaCache::new(64),
            })
        })
    }
}

/// The schema of `old` with the entries added under `level` of their paths.
fn build_schema(old: &Schema, entries: &[&Entry], level: usize) -> Result<SchemaRef, ConnectError> {
    let mut b = copy_schema_basics(old, SchemaBuilder::struct_());
    if old.is_optional() {
        b = b.optional();
    }
    for f in old.fields() {
        let nested: Vec<&Entry> = entries
            .iter()
            .copied()
            .filter(|e| e.path.len() > level + 1 && e.path[level] == f.name())
            .collect();
        if !nested.is_empty() {
            if f.schema().schema_type().is_primitive() {
                return Err(ConnectError::data(format!(
                    "Field '{}' is a primitive type, not a struct. Cannot add nested field '{}'.",
                    f.name(),
                    nested[0].path.join(".")
                )));
            }
            b = add_field(b, f.name(), build_schema(f.schema(), &nested, level + 1)?)?;
        } else {
            b = add_field(b, f.name(), f.schema().clone())?;
        }
    }
    let mut new_parents: Vec<&str> = Vec::new();
    for e in entries {
        let name = e.path[level].as_str();
        if e.path.len() == level + 1 {
            if old.field(name).is_none() {
                b = add_field(b, name, e.schema.clone())?;
            }
        } else if old.field(name).is_none() && !new_parents.contains(&name) {
            new_parents.push(name);
        }
    }
    for parent in new_parents {
        let nested: Vec<&Entry> = entries
            .iter()
            .copied()
            .filter(|e| e.path.len() > level + 1 && e.path[level] == parent)
            .collect();
        let empty = SchemaBuilder::struct_().optional().build();
        b = add_field(b, parent, build_schema(&empty, &nested, level + 1)?)?;
    }
    finish(b)
}

/// The value for `schema` built from `old` (or nothing) plus the entries at `level`.
fn build_value(
    schema: &SchemaRef,
    old: Option<&Struct>,
    entries: &[&Entry],
    level: usize,
) -> Result<Struct, ConnectError> {
    let mut s = Struct::new(schema.clone())?;
    for f in schema.fields() {
        let nested: Vec<&Entry> = entries
            .iter()
            .copied()
            .filter(|e| e.path.len() > level + 1 && e.path[level] == f.name())
            .collect();
        let old_value = old.and_then(|o| o.get(f.name()));
        let direct = entries
            .iter()
            .find(|e| e.path.len() == level + 1 && e.path[level] == f.name());
        let v = if !nested.is_empty() && f.schema().schema_type() == SchemaType::Struct {
            let old_struct = match old_value {
                Some(Value::Struct(s)) => Some(s),
                _ => None,
            };
            if old_struct.is_none() && old_value.is_some_and(|v| v.is_null()) {
                Value::Null
            } else {
                Value::Struct(build_value(f.schema(), old_struct, &nested, level + 1)?)
            }
        } else if let Some(e) = direct {
            e.value.clone()
        } else {
            old_value.cloned().unwrap_or_default()
        };
        s.put_at(f.index(), v)?;
    }
    Ok(s)
}

impl<R: ConnectRecord> Transform<R> for HeaderToValue {
    fn apply(&self, mut record: R) -> Result<Option<R>, ConnectError> {
        if record.value().is_null() {
            return Ok(Some(record));
        }
        let mut entries = Vec::new();
        for h in record.headers().iter() {
            if let Some(i) = self.headers.iter().position(|x| *x == h.key) {
                let schema = h.schema.clone().ok_or_else(|| {
                    ConnectError::data(format!(
                        "Header {} has no schema; it can't become a value field",
                        h.key
                    ))
                })?;
                entries.push(Entry {
                    path: self.fields[i].split('.').map(str::to_owned).collect(),
                    schema,
                    value: h.value.clone(),
                });
            }
        }
        if entries.is_empty() {
            return Ok(Some(record));
        }
        let (_, value) = record.take_value();
        let value = require_struct(value, "Header field insertion")?;
        let refs: Vec<&Entry> = entries.iter().collect();
        let out = self
            .cache
            .get_or_try_insert(ByPtr(value.schema().clone()), || {
                build_schema(value.schema(), &refs, 0)
            })?;
        let updated = build_value(&out, Some(&value), &refs, 0)?;
        if self.operation == Operation::Move {
            for h in &self.headers {
                record.headers_mut().remove(h);
            }
        }
        record.set_value(Some(out), Value::Struct(updated));
        Ok(Some(record))
    }
}
