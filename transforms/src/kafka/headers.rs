//! Header transforms and Filter: `HeaderFrom$Key`/`$Value`, `InsertHeader`, `DropHeaders`
//! and `Filter` (`org.apache.kafka.connect.transforms.*`).
//!
//! HeaderFrom copies or moves fields into headers (the header schema is the field's schema);
//! InsertHeader adds a header whose value is `value.literal` parsed like Kafka's
//! `Values.parseString` (booleans and numbers become typed values, in the smallest integer type
//! that holds them); DropHeaders removes every header with one of the names; Filter drops every
//! record (meant to be used with a predicate).
//!
//! Deliberate difference: `Values.parseString` also parses JSON-like arrays/maps and ISO
//! dates; Headwater keeps such literals as strings.

use headwater_api::config::{ConfigKey, ConfigType, Importance, Validator};
use headwater_api::{
    ConfigDef, ConfigValidation, ConnectError, ConnectRecord, Properties, Schema, SchemaBuilder,
    SchemaRef, Transform, Value,
};

use super::fields::{non_empty_list, replace_null_key};
use crate::util::{
    add_field, configure, copy_schema_basics, field_value, finish, get_bool, get_list, get_string,
    map_get, map_remove, require_map, require_struct, struct_from_values, ByPtr, SchemaCache,
    Target,
};

/// `move` or `copy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Move,
    Copy,
}

impl Operation {
    pub fn parse(s: &str) -> Option<Operation> {
        match s {
            "move" => Some(Operation::Move),
            "copy" => Some(Operation::Copy),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Operation::Move => "move",
            Operation::Copy => "copy",
        }
    }
}

/// `org.apache.kafka.connect.transforms.HeaderFrom$Key` / `$Value`.
#[derive(Debug)]
pub struct HeaderFrom {
    target: Target,
    fields: Vec<String>,
    headers: Vec<String>,
    operation: Operation,
    replace_null_with_default: bool,
    cache: SchemaCache<ByPtr, SchemaRef>,
}

impl HeaderFrom {
    pub fn config_def() -> ConfigDef {
        ConfigDef::new()
            .define(
                ConfigKey::new("fields", ConfigType::List)
                    .validator(non_empty_list())
                    .importance(Importance::High)
                    .doc("Field names in the record whose values are to be copied or moved to headers."),
            )
            .define(
                ConfigKey::new("headers", ConfigType::List)
                    .validator(non_empty_list())
                    .importance(Importance::High)
                    .doc("Header names, in the same order as the field names listed in the fields configuration property."),
            )
            .define(
                ConfigKey::new("operation", ConfigType::String)
                    .validator(Validator::one_of(&["move", "copy"]))
                    .importance(Importance::High)
                    .doc("Either <code>move</code> if the fields are to be moved to the headers (removed from the key/value), or <code>copy</code> if the fields are to be copied to the headers (retained in the key/value)."),
            )
            .define(replace_null_key())
    }

    pub fn configure(target: Target, props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(), props, |c, errors| {
            let fields = get_list(c, "fields");
            let headers = get_list(c, "headers");
            if fields.len() != headers.len() {
                errors.add_error(
                    "headers",
                    "'fields' config must have the same number of elements as 'headers' config.",
                );
            }
            Some(HeaderFrom {
                target,
                fields,
                headers,
                operation: Operation::parse(c.get_string("operation")?)?,
                replace_null_with_default: get_bool(c, "replace.null.with.default", true),
                cache: SchemaCache::new(16),
            })
        })
    }

    fn moved_schema(&self, schema: &Schema) -> Result<SchemaRef, ConnectError> {
        let mut b = copy_schema_basics(schema, SchemaBuilder::struct_());
        for f in schema.fields() {
            if !self.fields.iter().any(|x| x == f.name()) {
                b = add_field(b, f.name(), f.schema().clone())?;
            }
        }
        finish(b)
    }
}

impl<R: ConnectRecord> Transform<R> for HeaderFrom {
    fn apply(&self, mut record: R) -> Result<Option<R>, ConnectError> {
        let purpose = format!("header {}", self.operation.name());
        let (schema, value) = self.target.take(&mut record);
        match schema {
            None => {
                let mut map = require_map(value, &purpose)?;
                for (field, header) in self.fields.iter().zip(&self.headers) {
                    let v = if self.operation == Operation::Move {
                        map_remove(&mut map, field)
                    } else {
                        map_get(&map, field).cloned()
                    };
                    record
                        .headers_mut()
                        .add(header.clone(), None, v.unwrap_or_default());
                }
                self.target.set(&mut record, None, Value::Map(map));
            }
            Some(schema) => {
                let s = require_struct(value, &purpose)?;
                for (field, header) in self.fields.iter().zip(&self.headers) {
                    let f = schema.field(field).ok_or_else(|| {
                        ConnectError::data(format!("{field} is not a valid field name"))
                    })?;
                    let v = field_value(&s, f.index(), self.replace_null_with_default);
                    record
                        .headers_mut()
                        .add(header.clone(), Some(f.schema().clone()), v);
                }
                if self.operation == Operation::Move {
                    let out = self
                        .cache
                        .get_or_try_insert(ByPtr(schema.clone()), || self.moved_schema(&schema))?;
                    let values = s
                        .schema()
                        .fields()
                        .iter()
                        .filter(|f| !self.fields.iter().any(|x| x == f.name()))
                        .map(|f| field_value(&s, f.index(), self.replace_null_with_default))
                        .collect::<Vec<_>>();
                    let moved = struct_from_values(out.clone(), values)?;
                    self.target
                        .set(&mut record, Some(out), Value::Struct(moved));
                } else {
                    self.target.set(&mut record, Some(schema), Value::Struct(s));
                }
            }
        }
        Ok(Some(record))
    }
}

/// A literal typed as Kafka's `Values.parseString` would type it (booleans, integers in the
/// smallest fitting type, decimals as float32/float64; anything else stays a string).
pub fn parse_literal(text: &str) -> (SchemaRef, Value) {
    if text.is_empty() {
        return (Schema::string(), Value::String(String::new()));
    }
    let t = text.trim();
    if t.eq_ignore_ascii_case("true") || t.eq_ignore_ascii_case("false") {
        return (
            Schema::boolean(),
            Value::Boolean(t.eq_ignore_ascii_case("true")),
        );
    }
    let numeric = !t.is_empty()
        && t.chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E'))
        && t.chars().any(|c| c.is_ascii_digit());
    if numeric {
        if let Ok(i) = t.parse::<i64>() {
            return if let Ok(v) = i8::try_from(i) {
                (Schema::int8(), Value::Int8(v))
            } else if let Ok(v) = i16::try_from(i) {
                (Schema::int16(), Value::Int16(v))
            } else if let Ok(v) = i32::try_from(i) {
                (Schema::int32(), Value::Int32(v))
            } else {
                (Schema::int64(), Value::Int64(i))
            };
        }
        if let Ok(f) = t.parse::<f64>() {
            // Integral values with a fraction part of zero are integers in Java too ("1.0" -> 1).
            if f.fract() == 0.0 && f.abs() < 9.0e18 && !t.contains(['e', 'E']) {
                return parse_literal(&(f as i64).to_string());
            }
            let f32v = f as f32;
            return if f32v.is_finite() {
                (Schema::float32(), Value::Float32(f32v))
            } else {
                (Schema::float64(), Value::Float64(f))
            };
        }
    }
    (Schema::string(), Value::String(text.to_owned()))
}

/// `org.apache.kafka.connect.transforms.InsertHeader`.
#[derive(Debug)]
pub struct InsertHeader {
    header: String,
    schema: SchemaRef,
    value: Value,
}

impl InsertHeader {
    pub fn config_def() -> ConfigDef {
        ConfigDef::new()
            .define(
                ConfigKey::new("header", ConfigType::String)
                    .importance(Importance::High)
                    .doc("The name of the header."),
            )
            .define(
                ConfigKey::new("value.literal", ConfigType::String)
                    .importance(Importance::High)
                    .doc("The literal value that is to be set as the header value on all records."),
            )
    }

    pub fn configure(props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(), props, |c, _| {
            let (schema, value) = parse_literal(c.get_string("value.literal")?);
            Some(InsertHeader {
                header: get_string(c, "header")?,
                schema,
                value,
            })
        })
    }
}

impl<R: ConnectRecord> Transform<R> for InsertHeader {
    fn apply(&self, mut record: R) -> Result<Option<R>, ConnectError> {
        record.headers_mut().add(
            self.header.clone(),
            Some(self.schema.clone()),
            self.value.clone(),
        );
        Ok(Some(record))
    }
}

/// `org.apache.kafka.connect.transforms.DropHeaders`.
#[derive(Debug)]
pub struct DropHeaders {
    headers: Vec<String>,
}

impl DropHeaders {
    pub fn config_def() -> ConfigDef {
        ConfigDef::new().define(
            ConfigKey::new("headers", ConfigType::List)
                .validator(non_empty_list())
                .importance(Importance::High)
                .doc("The name of the headers to be removed."),
        )
    }

    pub fn configure(props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(), props, |c, _| {
            Some(DropHeaders {
                headers: get_list(c, "headers"),
            })
        })
    }
}

impl<R: ConnectRecord> Transform<R> for DropHeaders {
    fn apply(&self, mut record: R) -> Result<Option<R>, ConnectError> {
        for h in &self.headers {
            record.headers_mut().remove(h);
        }
        Ok(Some(record))
    }
}

/// `org.apache.kafka.connect.transforms.Filter`: drops every record it is applied to.
#[derive(Debug, Default)]
pub struct Filter;

impl Filter {
    pub fn config_def() -> ConfigDef {
        ConfigDef::new()
    }
    pub fn configure(props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(), props, |_, _| Some(Filter))
    }
}

impl<R: ConnectRecord> Transform<R> for Filter {
    fn apply(&self, _record: R) -> Result<Option<R>, ConnectError> {
        Ok(None)
    }
}
