//! `org.apache.kafka.connect.transforms.Cast$Key` / `$Value`: casts top-level fields (or the
//! whole key/value) to int8/16/32/64, float32/64, boolean or string, with Java's conversion
//! rules (narrowing wraps like Java's `byteValue()`, `Boolean.parseBoolean`, bytes to string as
//! base64, Connect dates to string with Kafka's ISO formats).
//!
//! As in Kafka, a whole-value cast keeps the input schema's name/version/doc/parameters and the
//! output schema is cached per input schema (bounded, 16).

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use headwater_api::config::{ConfigKey, ConfigType, Importance, Validator};
use headwater_api::logical::{date, decimal, time, timestamp};
use headwater_api::{
    ConfigDef, ConfigValidation, ConfigValue, ConnectError, ConnectRecord, Properties, Schema,
    SchemaBuilder, SchemaRef, SchemaType, Transform, Value,
};

use super::fields::replace_null_key;
use crate::java_time::SimpleDateFormat;
use crate::util::{
    add_field, configure, copy_schema_basics, field_value, finish, get_bool, get_list, java_class,
    java_class_display, map_get, map_put, require_map, require_struct, struct_from_values, ByPtr,
    SchemaCache, Target,
};

const OUTPUT_TYPES: &str = "[INT8, INT16, INT32, INT64, FLOAT32, FLOAT64, BOOLEAN, STRING]";
const INPUT_TYPES: &str = "[INT8, INT16, INT32, INT64, FLOAT32, FLOAT64, BOOLEAN, STRING, BYTES]";

fn type_from_name(name: &str) -> Option<SchemaType> {
    Some(match name.to_ascii_uppercase().as_str() {
        "INT8" => SchemaType::Int8,
        "INT16" => SchemaType::Int16,
        "INT32" => SchemaType::Int32,
        "INT64" => SchemaType::Int64,
        "FLOAT32" => SchemaType::Float32,
        "FLOAT64" => SchemaType::Float64,
        "BOOLEAN" => SchemaType::Boolean,
        "STRING" => SchemaType::String,
        "BYTES" => SchemaType::Bytes,
        "ARRAY" => SchemaType::Array,
        "MAP" => SchemaType::Map,
        "STRUCT" => SchemaType::Struct,
        _ => return None,
    })
}

fn output_type(name: &str) -> Result<SchemaType, String> {
    let t = type_from_name(name.trim())
        .ok_or_else(|| format!("Invalid type found in casting spec: {}", name.trim()))?;
    if matches!(
        t,
        SchemaType::Bytes | SchemaType::Array | SchemaType::Map | SchemaType::Struct
    ) {
        return Err(format!(
            "Cast transformation does not support casting to {t}; supported types are {OUTPUT_TYPES}"
        ));
    }
    Ok(t)
}

/// Parses `spec`: `(None, type)` for a whole-value cast, else `(Some(field), type)` pairs.
fn parse_spec(items: &[String]) -> Result<Vec<(Option<String>, SchemaType)>, String> {
    if items.is_empty() {
        return Err("Must specify at least one field to cast.".to_owned());
    }
    let mut out = Vec::new();
    let mut whole = false;
    for m in items {
        let parts: Vec<&str> = m.split(':').collect();
        match parts.as_slice() {
            [t] => {
                out.push((None, output_type(t)?));
                whole = true;
            }
            [f, t] => out.push((Some(f.trim().to_owned()), output_type(t)?)),
            _ => return Err(format!("Invalid rename mapping: {m}")),
        }
    }
    if whole && items.len() > 1 {
        return Err("Cast transformations that specify a type to cast the entire value to may only specify a single cast in their spec".to_owned());
    }
    Ok(out)
}

/// `org.apache.kafka.connect.transforms.Cast$Key` / `$Value`.
#[derive(Debug)]
pub struct Cast {
    target: Target,
    casts: Vec<(String, SchemaType)>,
    whole: Option<SchemaType>,
    replace_null_with_default: bool,
    cache: SchemaCache<ByPtr, SchemaRef>,
}

impl Cast {
    pub fn config_def() -> ConfigDef {
        ConfigDef::new()
            .define(
                ConfigKey::new("spec", ConfigType::List)
                    .validator(Validator::custom(|v| match v {
                        ConfigValue::List(items) => parse_spec(items).map(|_| ()),
                        _ => Ok(()),
                    }))
                    .importance(Importance::High)
                    .doc("List of fields and the type to cast them to of the form field1:type,field2:type to cast fields of Maps or Structs. A single type to cast the entire value. Valid types are int8, int16, int32, int64, float32, float64, boolean, and string. Note that binary fields can only be cast to string."),
            )
            .define(replace_null_key())
    }

    pub fn configure(target: Target, props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(), props, |c, _| {
            let spec = parse_spec(&get_list(c, "spec")).ok()?;
            let whole = spec.iter().find(|(f, _)| f.is_none()).map(|(_, t)| *t);
            Some(Cast {
                target,
                casts: spec
                    .into_iter()
                    .filter_map(|(f, t)| Some((f?, t)))
                    .collect(),
                whole,
                replace_null_with_default: get_bool(c, "replace.null.with.default", true),
                cache: SchemaCache::new(16),
            })
        })
    }

    fn cast_for(&self, field: &str) -> Option<SchemaType> {
        self.casts.iter().find(|(f, _)| f == field).map(|(_, t)| *t)
    }

    fn updated_schema(&self, schema: &Schema) -> Result<SchemaRef, ConnectError> {
        let mut b = if let Some(t) = self.whole {
            copy_schema_basics(schema, SchemaBuilder::new(t))
        } else {
            let mut b = copy_schema_basics(schema, SchemaBuilder::struct_());
            for f in schema.fields() {
                let fs = match self.cast_for(f.name()) {
                    Some(t) => {
                        let mut fb = SchemaBuilder::new(t);
                        if f.schema().is_optional() {
                            fb = fb.optional();
                        }
                        if let Some(d) = f.schema().default_value() {
                            fb = fb.default_value(cast_value(Some(f.schema()), d.clone(), t)?);
                        }
                        finish(fb)?
                    }
                    None => f.schema().clone(),
                };
                b = add_field(b, f.name(), fs)?;
            }
            b
        };
        if schema.is_optional() {
            b = b.optional();
        }
        if let Some(d) = schema.default_value() {
            let t = self.whole.unwrap_or(SchemaType::Struct);
            if t != SchemaType::Struct {
                b = b.default_value(cast_value(Some(schema), d.clone(), t)?);
            }
        }
        finish(b)
    }
}

impl<R: ConnectRecord> Transform<R> for Cast {
    fn apply(&self, mut record: R) -> Result<Option<R>, ConnectError> {
        const PURPOSE: &str = "cast types";
        if self.target.value(&record).is_null() {
            return Ok(Some(record));
        }
        let (schema, value) = self.target.take(&mut record);
        match schema {
            None => {
                if let Some(t) = self.whole {
                    let v = cast_value(None, value, t)?;
                    self.target.set(&mut record, None, v);
                    return Ok(Some(record));
                }
                let mut map = require_map(value, PURPOSE)?;
                for (f, t) in &self.casts {
                    let v = map_get(&map, f).cloned().unwrap_or_default();
                    let cast = cast_value(None, v, *t)?;
                    map_put(&mut map, f, cast);
                }
                self.target.set(&mut record, None, Value::Map(map));
            }
            Some(schema) => {
                let out = self
                    .cache
                    .get_or_try_insert(ByPtr(schema.clone()), || self.updated_schema(&schema))?;
                if let Some(t) = self.whole {
                    let v = cast_value(Some(&schema), value, t)?;
                    self.target.set(&mut record, Some(out), v);
                    return Ok(Some(record));
                }
                let s = require_struct(value, PURPOSE)?;
                let values = s
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| {
                        let v = field_value(&s, f.index(), self.replace_null_with_default);
                        match self.cast_for(f.name()) {
                            Some(t) => cast_value(Some(f.schema()), v, t),
                            None => Ok(v),
                        }
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let s = struct_from_values(out.clone(), values)?;
                self.target.set(&mut record, Some(out), Value::Struct(s));
            }
        }
        Ok(Some(record))
    }
}

/// A number as Java sees it for `Number.xxxValue()` conversions.
enum Num {
    Int(i64),
    Float(f64),
}

fn out_of_range(value: &Value) -> ConnectError {
    let shown = match value {
        Value::String(s) => s.clone(),
        other => format!("{other:?}"),
    };
    ConnectError::data(format!(
        "Value ({shown}) was out of range for requested data type"
    ))
}

/// Java's `Double.toString` / `Float.toString` shape: plain for 1e-3 <= |x| < 1e7, else
/// `d.dddE±n`; integral values keep a `.0`.
pub(crate) fn java_float_string(v: f64, shortest: String) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    let a = v.abs();
    if a == 0.0 || (1e-3..1e7).contains(&a) {
        if shortest.contains('.') || shortest.contains('e') {
            shortest
        } else {
            format!("{shortest}.0")
        }
    } else {
        let e = format!("{:e}", shortest.parse::<f64>().unwrap_or(v));
        let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
        let mantissa = if mantissa.contains('.') {
            mantissa.to_owned()
        } else {
            format!("{mantissa}.0")
        };
        format!("{mantissa}E{exp}")
    }
}

fn date_string(schema: &Schema, value: &Value) -> Option<String> {
    let (pattern, ms) = match (schema.name()?, value) {
        (date::LOGICAL_NAME, Value::Int32(d)) => ("yyyy-MM-dd", i64::from(*d) * 86_400_000),
        (time::LOGICAL_NAME, Value::Int32(t)) => ("HH:mm:ss.SSS", i64::from(*t)),
        (timestamp::LOGICAL_NAME, Value::Int64(t)) => ("yyyy-MM-dd'T'HH:mm:ss.SSS'Z'", *t),
        _ => return None,
    };
    Some(SimpleDateFormat::new(pattern).ok()?.format(ms))
}

/// Kafka's `Cast.castValueToType`.
pub(crate) fn cast_value(
    schema: Option<&Schema>,
    value: Value,
    target: SchemaType,
) -> Result<Value, ConnectError> {
    if value.is_null() {
        return Ok(value);
    }
    let inferred = match schema {
        Some(s) => s.schema_type(),
        None => value.schema_type().unwrap_or(SchemaType::String),
    };
    if matches!(
        inferred,
        SchemaType::Array | SchemaType::Map | SchemaType::Struct
    ) {
        return Err(ConnectError::data(format!(
            "Cast transformation does not support casting from {inferred}; supported types are {INPUT_TYPES}"
        )));
    }
    let is_decimal = schema.and_then(Schema::name) == Some(decimal::LOGICAL_NAME);
    if target == SchemaType::String {
        if let Some(s) = schema.and_then(|s| date_string(s, &value)) {
            return Ok(Value::String(s));
        }
        if is_decimal {
            if let Value::Bytes(b) = &value {
                let scale = decimal::scale(schema.expect("decimal has a schema"))?;
                return Ok(Value::String(decimal::unscaled_to_string(b, scale)));
            }
        }
        return Ok(Value::String(match value {
            Value::Bytes(b) => BASE64.encode(b),
            Value::String(s) => s,
            Value::Boolean(b) => b.to_string(),
            Value::Int8(v) => v.to_string(),
            Value::Int16(v) => v.to_string(),
            Value::Int32(v) => v.to_string(),
            Value::Int64(v) => v.to_string(),
            Value::Float32(v) => java_float_string(f64::from(v), v.to_string()),
            Value::Float64(v) => java_float_string(v, v.to_string()),
            other => {
                return Err(ConnectError::data(format!(
                    "Unexpected type in Cast transformation: {}",
                    java_class_display(&other)
                )))
            }
        }));
    }
    let num = match &value {
        Value::Int8(v) => Num::Int((*v).into()),
        Value::Int16(v) => Num::Int((*v).into()),
        Value::Int32(v) => Num::Int((*v).into()),
        Value::Int64(v) => Num::Int(*v),
        Value::Float32(v) => Num::Float((*v).into()),
        Value::Float64(v) => Num::Float(*v),
        Value::Boolean(b) => Num::Int(i64::from(*b)),
        Value::Bytes(b) if is_decimal => {
            let scale = decimal::scale(schema.expect("decimal has a schema"))?;
            let text = decimal::unscaled_to_string(b, scale);
            Num::Float(text.parse().map_err(|_| out_of_range(&value))?)
        }
        Value::String(s) => {
            let t = s.trim();
            return Ok(match target {
                SchemaType::Boolean => Value::Boolean(t.eq_ignore_ascii_case("true")),
                SchemaType::Int8 => Value::Int8(t.parse().map_err(|_| out_of_range(&value))?),
                SchemaType::Int16 => Value::Int16(t.parse().map_err(|_| out_of_range(&value))?),
                SchemaType::Int32 => Value::Int32(t.parse().map_err(|_| out_of_range(&value))?),
                SchemaType::Int64 => Value::Int64(t.parse().map_err(|_| out_of_range(&value))?),
                SchemaType::Float32 => Value::Float32(t.parse().map_err(|_| out_of_range(&value))?),
                _ => Value::Float64(t.parse().map_err(|_| out_of_range(&value))?),
            });
        }
        other => {
            return Err(ConnectError::data(format!(
                "Unexpected type in Cast transformation: class {}",
                java_class(other)
            )))
        }
    };
    // Java narrowing: floats go through int/long first, integers wrap.
    Ok(match (target, num) {
        (SchemaType::Boolean, Num::Int(i)) => Value::Boolean(i != 0),
        (SchemaType::Boolean, Num::Float(f)) => Value::Boolean(f as i64 != 0),
        (SchemaType::Int8, Num::Int(i)) => Value::Int8(i as i8),
        (SchemaType::Int8, Num::Float(f)) => Value::Int8(f as i32 as i8),
        (SchemaType::Int16, Num::Int(i)) => Value::Int16(i as i16),
        (SchemaType::Int16, Num::Float(f)) => Value::Int16(f as i32 as i16),
        (SchemaType::Int32, Num::Int(i)) => Value::Int32(i as i32),
        (SchemaType::Int32, Num::Float(f)) => Value::Int32(f as i32),
        (SchemaType::Int64, Num::Int(i)) => Value::Int64(i),
        (SchemaType::Int64, Num::Float(f)) => Value::Int64(f as i64),
        (SchemaType::Float32, Num::Int(i)) => Value::Float32(i as f32),
        (SchemaType::Float32, Num::Float(f)) => Value::Float32(f as f32),
        (_, Num::Int(i)) => Value::Float64(i as f64),
        (_, Num::Float(f)) => Value::Float64(f),
    })
}
