//! `org.apache.kafka.connect.transforms.TimestampConverter$Key` / `$Value`: converts a field
//! (or the whole key/value) between `string` (SimpleDateFormat, UTC), `unix` (epoch in
//! `unix.precision`), and Connect's `Date`, `Time` and `Timestamp` logical types.
//!
//! Every conversion goes through epoch milliseconds, as Kafka's goes through `java.util.Date`
//! (so sub-millisecond precision is lost, as documented by Kafka). Deliberate difference:
//! without a schema Headwater has no date value type, so a schemaless conversion to
//! `Date`/`Time`/`Timestamp` is an error naming the alternatives (Kafka produces a
//! `java.util.Date` that schemaless JSON cannot serialise anyway).

use headwater_api::config::{ConfigKey, ConfigType, Importance, Validator};
use headwater_api::logical::{date, time, timestamp};
use headwater_api::{
    ConfigDef, ConfigValidation, ConnectError, ConnectRecord, Properties, Schema, SchemaBuilder,
    SchemaRef, SchemaType, Struct, Transform, Value,
};

use super::fields::replace_null_key;
use crate::java_time::SimpleDateFormat;
use crate::util::{
    add_field, configure, copy_schema_basics, field_value, finish, get_bool, get_string,
    java_class_display, map_get, map_put, require_map, struct_from_values, ByPtr, SchemaCache,
    Target,
};

const MS_PER_DAY: i64 = 86_400_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    String,
    Unix,
    Date,
    Time,
    Timestamp,
}

impl Kind {
    fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "string" => Kind::String,
            "unix" => Kind::Unix,
            "Date" => Kind::Date,
            "Time" => Kind::Time,
            "Timestamp" => Kind::Timestamp,
            _ => return None,
        })
    }

    fn schema(self, optional: bool) -> SchemaRef {
        let b = match self {
            Kind::String => SchemaBuilder::string(),
            Kind::Unix => SchemaBuilder::int64(),
            Kind::Date => date::builder(),
            Kind::Time => time::builder(),
            Kind::Timestamp => timestamp::builder(),
        };
        if optional { b.optional() } else { b }.build_ref()
    }

    fn of_schema(schema: &Schema) -> Result<Kind, ConnectError> {
        Ok(match schema.name() {
            Some(timestamp::LOGICAL_NAME) => Kind::Timestamp,
            Some(date::LOGICAL_NAME) => Kind::Date,
            Some(time::LOGICAL_NAME) => Kind::Time,
            _ if schema.schema_type() == SchemaType::String => Kind::String,
            _ if schema.schema_type() == SchemaType::Int64 => Kind::Unix,
            _ => {
                return Err(ConnectError::data(format!(
                    "Schema Schema{{{}:{}}} does not correspond to a known timestamp type format",
                    schema.name().unwrap_or(""),
                    schema.schema_type()
                )))
            }
        })
    }
}

/// `org.apache.kafka.connect.transforms.TimestampConverter$Key` / `$Value`.
#[derive(Debug)]
pub struct TimestampConverter {
    target: Target,
    field: String,
    kind: Kind,
    format: Option<SimpleDateFormat>,
    precision: String,
    replace_null_with_default: bool,
    cache: SchemaCache<ByPtr, SchemaRef>,
}

impl TimestampConverter {
    pub fn config_def() -> ConfigDef {
        ConfigDef::new()
            .define(
                ConfigKey::new("field", ConfigType::String)
                    .default_str("")
                    .importance(Importance::High)
                    .doc("The field containing the timestamp, or empty if the entire value is a timestamp"),
            )
            .define(
                ConfigKey::new("target.type", ConfigType::String)
                    .validator(Validator::one_of(&["string", "unix", "Date", "Time", "Timestamp"]))
                    .importance(Importance::High)
                    .doc("The desired timestamp representation: string, unix, Date, Time, or Timestamp"),
            )
            .define(
                ConfigKey::new("format", ConfigType::String)
                    .default_str("")
                    .importance(Importance::Medium)
                    .doc("A SimpleDateFormat-compatible format for the timestamp. Used to generate the output when type=string or used to parse the input if the input is a string."),
            )
            .define(
                ConfigKey::new("unix.precision", ConfigType::String)
                    .default_str("milliseconds")
                    .validator(Validator::one_of(&["nanoseconds", "microseconds", "milliseconds", "seconds"]))
                    .importance(Importance::Low)
                    .doc("The desired Unix precision for the timestamp: seconds, milliseconds, microseconds, or nanoseconds. Used to generate the output when type=unix or used to parse the input if the input is a Long.Note: This SMT will cause precision loss during conversions from, and to, values with sub-millisecond components."),
            )
            .define(replace_null_key())
    }

    pub fn configure(target: Target, props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(), props, |c, errors| {
            let kind = Kind::parse(c.get_string("target.type")?)?;
            let pattern = get_string(c, "format").unwrap_or_default();
            if kind == Kind::String && pattern.trim().is_empty() {
                errors.add_error(
                    "format",
                    "TimestampConverter requires format option to be specified when using string timestamps",
                );
            }
            let format = if pattern.trim().is_empty() {
                None
            } else {
                match SimpleDateFormat::new(&pattern) {
                    Ok(f) => Some(f),
                    Err(e) => {
                        errors.add_error(
                            "format",
                            format!("TimestampConverter requires a SimpleDateFormat-compatible pattern for string timestamps: {pattern} ({e})"),
                        );
                        None
                    }
                }
            };
            Some(TimestampConverter {
                target,
                field: get_string(c, "field").unwrap_or_default(),
                kind,
                format,
                precision: get_string(c, "unix.precision").unwrap_or_else(|| "milliseconds".into()),
                replace_null_with_default: get_bool(c, "replace.null.with.default", true),
                cache: SchemaCache::new(16),
            })
        })
    }

    fn format(&self) -> Result<&SimpleDateFormat, ConnectError> {
        self.format.as_ref().ok_or_else(|| {
            ConnectError::data("TimestampConverter requires format option to be specified when using string timestamps")
        })
    }

    fn to_raw(&self, value: &Value, from: Kind) -> Result<i64, ConnectError> {
        let wrong = |what: &str| {
            ConnectError::data(format!("{what}, but found {}", java_class_display(value)))
        };
        match from {
            Kind::String => {
                let Value::String(s) = value else {
                    return Err(wrong("Expected string timestamp to be a String"));
                };
                let f = self.format()?;
                f.parse(s).map_err(|_| {
                    ConnectError::data(format!(
                        "Could not parse timestamp: value ({s}) does not match pattern ({})",
                        f.pattern()
                    ))
                })
            }
            Kind::Unix => {
                let Value::Int64(v) = value else {
                    return Err(wrong("Expected Unix timestamp to be a Long"));
                };
                Ok(match self.precision.as_str() {
                    "seconds" => v.saturating_mul(1000),
                    "microseconds" => v / 1000,
                    "nanoseconds" => v / 1_000_000,
                    _ => *v,
                })
            }
            Kind::Date => match value {
                Value::Int32(d) => Ok(i64::from(*d) * MS_PER_DAY),
                _ => Err(wrong("Expected Date to be a java.util.Date")),
            },
            Kind::Time => match value {
                Value::Int32(t) => Ok(i64::from(*t)),
                _ => Err(wrong("Expected Time to be a java.util.Date")),
            },
            Kind::Timestamp => match value {
                Value::Int64(t) => Ok(*t),
                _ => Err(wrong("Expected Timestamp to be a java.util.Date")),
            },
        }
    }

    fn to_type(&self, ms: i64) -> Result<Value, ConnectError> {
        Ok(match self.kind {
            Kind::String => Value::String(self.format()?.format(ms)),
            Kind::Unix => Value::Int64(match self.precision.as_str() {
                "seconds" => ms / 1000,
                "microseconds" => ms.saturating_mul(1000),
                "nanoseconds" => ms.saturating_mul(1_000_000),
                _ => ms,
            }),
            Kind::Date => Value::Int32(ms.div_euclid(MS_PER_DAY) as i32),
            Kind::Time => Value::Int32(ms.rem_euclid(MS_PER_DAY) as i32),
            Kind::Timestamp => Value::Int64(ms),
        })
    }

    fn convert(&self, value: Value, from: Option<Kind>) -> Result<Value, ConnectError> {
        if value.is_null() {
            return Ok(value);
        }
        let from = match from {
            Some(k) => k,
            None => match value {
                Value::Int64(_) => Kind::Unix,
                Value::String(_) => Kind::String,
                ref other => {
                    return Err(ConnectError::data(format!(
                        "TimestampConverter does not support {} objects as timestamps",
                        java_class_display(other)
                    )))
                }
            },
        };
        let ms = self.to_raw(&value, from)?;
        self.to_type(ms)
    }

    fn convert_schemaless(&self, value: Value) -> Result<Value, ConnectError> {
        if matches!(self.kind, Kind::Date | Kind::Time | Kind::Timestamp) && !value.is_null() {
            return Err(ConnectError::not_supported(
                "TimestampConverter cannot produce a Date, Time or Timestamp without a schema: schemaless values have no date type in Headwater; use target.type=unix or string",
            ));
        }
        self.convert(value, None)
    }

    fn convert_struct(&self, s: &Struct, out: &SchemaRef) -> Result<Struct, ConnectError> {
        let values = s
            .schema()
            .fields()
            .iter()
            .map(|f| {
                let v = field_value(s, f.index(), self.replace_null_with_default);
                if f.name() == self.field {
                    self.convert(v, Some(Kind::of_schema(f.schema())?))
                } else {
                    Ok(v)
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        struct_from_values(out.clone(), values)
    }

    fn updated_schema(&self, schema: &Schema) -> Result<SchemaRef, ConnectError> {
        let mut b = copy_schema_basics(schema, SchemaBuilder::struct_());
        for f in schema.fields() {
            let fs = if f.name() == self.field {
                self.kind.schema(f.schema().is_optional())
            } else {
                f.schema().clone()
            };
            b = add_field(b, f.name(), fs)?;
        }
        if schema.is_optional() {
            b = b.optional();
        }
        if let Some(Value::Struct(d)) = schema.default_value() {
            let without_default = finish(b.clone())?;
            let converted = self.convert_struct(d, &without_default)?;
            b = b.default_value(Value::Struct(converted));
        }
        finish(b)
    }
}

impl<R: ConnectRecord> Transform<R> for TimestampConverter {
    fn apply(&self, mut record: R) -> Result<Option<R>, ConnectError> {
        const PURPOSE: &str = "converting timestamp formats";
        let (schema, value) = self.target.take(&mut record);
        match schema {
            None => {
                let v = if value.is_null() || self.field.is_empty() {
                    self.convert_schemaless(value)?
                } else {
                    let mut map = require_map(value, PURPOSE)?;
                    let current = map_get(&map, &self.field).cloned().unwrap_or_default();
                    let converted = self.convert_schemaless(current)?;
                    map_put(&mut map, &self.field, converted);
                    Value::Map(map)
                };
                self.target.set(&mut record, None, v);
            }
            Some(schema) if self.field.is_empty() => {
                let out = self.kind.schema(schema.is_optional());
                let v = self.convert(value, Some(Kind::of_schema(&schema)?))?;
                self.target.set(&mut record, Some(out), v);
            }
            Some(schema) => {
                let out = self
                    .cache
                    .get_or_try_insert(ByPtr(schema.clone()), || self.updated_schema(&schema))?;
                let v = match value {
                    Value::Null => Value::Null,
                    Value::Struct(s) => Value::Struct(self.convert_struct(&s, &out)?),
                    other => Value::Struct(crate::util::require_struct(other, PURPOSE)?),
                };
                self.target.set(&mut record, Some(out), v);
            }
        }
        Ok(Some(record))
    }
}
