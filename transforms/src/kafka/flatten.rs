//! `org.apache.kafka.connect.transforms.Flatten$Key` / `$Value`: nested structs (with a
//! schema) or maps (without) become one level, names joined with `delimiter` (default `.`).
//! Arrays are copied as they are; a map inside a record with a schema is an error, as in Kafka.
//! Flattened fields are optional when any enclosing struct is, and inherit defaults from their
//! own schema or from the enclosing struct's default. The output schema is cached per input
//! schema (bounded, 16).

use headwater_api::config::{ConfigKey, ConfigType, Importance};
use headwater_api::{
    ConfigDef, ConfigValidation, ConnectError, ConnectRecord, Properties, Schema, SchemaBuilder,
    SchemaRef, SchemaType, Struct, Transform, Value,
};

use crate::util::{
    add_field, configure, copy_schema_basics, copy_schema_basics_same_type, finish, get_string,
    java_class_display, require_map, struct_from_values, ByPtr, SchemaCache, Target,
};

const PURPOSE: &str = "flattening";

/// `org.apache.kafka.connect.transforms.Flatten$Key` / `$Value`.
#[derive(Debug)]
pub struct Flatten {
    target: Target,
    delimiter: String,
    cache: SchemaCache<ByPtr, SchemaRef>,
}

impl Flatten {
    pub fn config_def() -> ConfigDef {
        ConfigDef::new().define(
            ConfigKey::new("delimiter", ConfigType::String)
                .default_str(".")
                .importance(Importance::Medium)
                .doc("Delimiter to insert between field names from the input record when generating field names for the output record"),
        )
    }

    pub fn configure(target: Target, props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(), props, |c, _| {
            Some(Flatten {
                target,
                // ConfigDef trims strings; a delimiter is used exactly as given.
                delimiter: props
                    .get("delimiter")
                    .cloned()
                    .or_else(|| get_string(c, "delimiter"))
                    .unwrap_or_else(|| ".".into()),
                cache: SchemaCache::new(16),
            })
        })
    }

    fn name(&self, prefix: &str, field: &str) -> String {
        if prefix.is_empty() {
            field.to_owned()
        } else {
            format!("{prefix}{}{field}", self.delimiter)
        }
    }

    fn flatten_map(
        &self,
        map: Vec<(Value, Value)>,
        prefix: &str,
        out: &mut Vec<(Value, Value)>,
    ) -> Result<(), ConnectError> {
        for (k, v) in map {
            let key = match &k {
                Value::String(s) => s.clone(),
                other => format!("{other:?}"),
            };
            let name = self.name(prefix, &key);
            match v {
                Value::Map(inner) => self.flatten_map(inner, &name, out)?,
                Value::Struct(_) => {
                    return Err(ConnectError::data(format!(
                        "Flatten transformation does not support {} for record without schemas (for field {name}).",
                        java_class_display(&v)
                    )))
                }
                other => out.push((Value::String(name), other)),
            }
        }
        Ok(())
    }

    fn build_schema(
        &self,
        schema: &Schema,
        prefix: &str,
        builder: &mut SchemaBuilder,
        optional: bool,
        parent_default: Option<&Struct>,
    ) -> Result<(), ConnectError> {
        for f in schema.fields() {
            let name = self.name(prefix, f.name());
            let fs = f.schema();
            let field_optional = optional || fs.is_optional();
            let default = fs
                .default_value()
                .cloned()
                .or_else(|| parent_default.and_then(|d| d.get(f.name()).cloned()))
                .filter(|d| !d.is_null());
            match fs.schema_type() {
                SchemaType::Struct => {
                    let d = match &default {
                        Some(Value::Struct(s)) => Some(s),
                        _ => None,
                    };
                    self.build_schema(fs, &name, builder, field_optional, d)?;
                }
                SchemaType::Map => {
                    return Err(ConnectError::data(format!(
                        "Flatten transformation does not support MAP for record with schemas (for field {name})."
                    )))
                }
                _ => {
                    let mut b = copy_schema_basics_same_type(fs);
                    if field_optional {
                        b = b.optional();
                    }
                    if let Some(d) = default {
                        b = b.default_value(d);
                    }
                    let taken = std::mem::replace(builder, SchemaBuilder::struct_());
                    *builder = add_field(taken, &name, finish(b)?)?;
                }
            }
        }
        Ok(())
    }

    fn collect_values(&self, s: &Struct, out: &mut Vec<Value>) {
        for f in s.schema().fields() {
            let v = s.get_or_default(f.name()).cloned().unwrap_or_default();
            match f.schema().schema_type() {
                SchemaType::Struct => match v {
                    Value::Struct(inner) => self.collect_values(&inner, out),
                    _ => push_nulls(f.schema(), out),
                },
                _ => out.push(v),
            }
        }
    }
}

fn push_nulls(schema: &Schema, out: &mut Vec<Value>) {
    for f in schema.fields() {
        if f.schema().schema_type() == SchemaType::Struct {
            push_nulls(f.schema(), out);
        } else {
            out.push(Value::Null);
        }
    }
}

impl<R: ConnectRecord> Transform<R> for Flatten {
    fn apply(&self, mut record: R) -> Result<Option<R>, ConnectError> {
        if self.target.value(&record).is_null() {
            return Ok(Some(record));
        }
        let (schema, value) = self.target.take(&mut record);
        match schema {
            None => {
                let map = require_map(value, PURPOSE)?;
                let mut out = Vec::with_capacity(map.len());
                self.flatten_map(map, "", &mut out)?;
                self.target.set(&mut record, None, Value::Map(out));
            }
            Some(schema) => {
                let s = crate::util::require_struct(value, PURPOSE)?;
                let out = self.cache.get_or_try_insert(ByPtr(schema.clone()), || {
                    let mut b = copy_schema_basics(&schema, SchemaBuilder::struct_());
                    let d = match schema.default_value() {
                        Some(Value::Struct(d)) => Some(d),
                        _ => None,
                    };
                    self.build_schema(&schema, "", &mut b, schema.is_optional(), d)?;
                    finish(b)
                })?;
                let mut values = Vec::with_capacity(out.fields().len());
                self.collect_values(&s, &mut values);
                let flat = struct_from_values(out.clone(), values)?;
                self.target.set(&mut record, Some(out), Value::Struct(flat));
            }
        }
        Ok(Some(record))
    }
}
