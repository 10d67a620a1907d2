//! Mapping between Kafka Connect schemas and Avro schemas, as Confluent's `AvroData` does it
//! with its default settings (`connect.meta.data=true`), so Confluent's deserialisers and
//! Debezium-aware consumers see the schemas they know.
//!
//! Connect -> Avro ([`to_avro`]):
//! - primitives map to their Avro types; `INT8`/`INT16` are Avro `int` with
//!   `"connect.type": "int8"|"int16"`;
//! - a struct is a record named after the schema (the Connect name split at its last dot into
//!   namespace and name); an unnamed struct is `io.confluent.connect.avro.ConnectDefault`, then
//!   `ConnectDefault2`, `ConnectDefault3`, ... in order of appearance;
//! - a map with string keys is an Avro map; any other key type is an array of
//!   `io.confluent.connect.avro.MapEntry` records with `key` and `value` fields;
//! - an optional schema is a union with null: null first, unless the schema has a non-null
//!   default, then null second (Avro requires a union's default to match its first branch);
//!   an optional field gets `"default": null` (or its default);
//! - schema metadata become properties, in this order: `connect.doc`, `connect.version`,
//!   `connect.parameters`, `connect.default`, `connect.name` (then `connect.type`, then
//!   `logicalType`); an optional struct keeps null first in its union whatever its default;
//! - the logical types get Avro's logical types too: Decimal is `bytes` with `logicalType
//!   decimal`, `scale` and `precision` (from `connect.decimal.precision`, else 64), Date is
//!   `date`, Time `time-millis`, Timestamp `timestamp-millis`;
//! - a named type seen a second time is written as a reference to its full name (Debezium's
//!   `after` refers to the `Value` record defined by `before`); two different schemas with the
//!   same full name are an error, as Avro cannot express them;
//! - names and field names must be valid Avro names (`[A-Za-z_][A-Za-z0-9_]*`); an invalid one
//!   is an error that says how to fix it, or with `scrub.invalid.names=true` its invalid
//!   characters become `_` (and a leading digit gets a `_` prefix).
//!
//! Avro -> Connect ([`from_avro`]) is the inverse for every schema [`to_avro`] writes, and
//! reads foreign schemas too: unions of null and one type become optional schemas, other unions
//! become `io.confluent.connect.avro.Union` structs with one optional field per branch, enums
//! become strings, fixed become bytes; Avro's logical types `decimal`, `date`, `time-millis`
//! and `timestamp-millis` become Connect's logical types even without `connect.name`.
//!
//! Both directions also yield the [`Node`] tree the binary codec walks: it mirrors the Avro
//! schema with references resolved, so encoding and decoding never look at JSON.

use std::collections::HashMap;
use std::sync::Arc;

use headwater_api::logical::{date, decimal, time, timestamp};
use headwater_api::{DataError, Schema, SchemaBuilder, SchemaRef, SchemaType, Struct, Value};
use serde_json::{json, Map, Value as Json};

/// Namespace of the records AvroData names itself.
pub const CONNECT_NAMESPACE: &str = "io.confluent.connect.avro";
/// Name of an unnamed struct's record (in [`CONNECT_NAMESPACE`]).
pub const DEFAULT_RECORD_NAME: &str = "ConnectDefault";
/// Record of a non-string-keyed map's entries (in [`CONNECT_NAMESPACE`]).
pub const MAP_ENTRY_NAME: &str = "MapEntry";
/// Connect name of the struct a general Avro union becomes.
pub const UNION_NAME: &str = "io.confluent.connect.avro.Union";
/// Connect parameter naming the Avro enum a string came from.
pub const ENUM_PARAMETER: &str = "io.confluent.connect.avro.Enum";
/// Connect parameter carrying a fixed's size.
pub const FIXED_SIZE_PARAMETER: &str = "connect.fixed.size";
/// Precision AvroData gives a Decimal that does not state one.
pub const DEFAULT_DECIMAL_PRECISION: u32 = 64;

/// The Avro type tree the binary codec walks (references resolved).
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Fixed(usize),
    Enum(Arc<[String]>),
    Array(Arc<Node>),
    /// Avro map (string keys).
    Map(Arc<Node>),
    /// A Connect map with non-string keys: an array of key/value records.
    MapEntries(Arc<(Node, Node)>),
    /// Record fields in order.
    Record(Arc<[Node]>),
    Union(Arc<[Node]>),
}

impl Node {
    /// Index of the null branch of a union.
    pub fn null_branch(branches: &[Node]) -> Option<usize> {
        branches.iter().position(|b| matches!(b, Node::Null))
    }
}

/// The Avro form of a Connect schema.
#[derive(Debug, Clone)]
pub struct AvroSchema {
    /// The schema's JSON text as sent to the registry.
    pub json: String,
    pub node: Node,
}

/// Options of the mapping (the converter's `scrub.invalid.names`).
#[derive(Debug, Clone, Copy, Default)]
pub struct MappingOptions {
    pub scrub_invalid_names: bool,
}

/// Maps a Connect schema to Avro.
pub fn to_avro(schema: &Schema, options: MappingOptions) -> Result<AvroSchema, DataError> {
    let mut ctx = ToAvro {
        options,
        defined: HashMap::new(),
        unnamed: 0,
        map_entries: 0,
    };
    let (json, node) = ctx.schema(schema, None)?;
    Ok(AvroSchema {
        json: json.to_string(),
        node,
    })
}

struct ToAvro<'a> {
    options: MappingOptions,
    /// Full name -> (the Connect schema it was defined from, its node).
    defined: HashMap<String, (&'a Schema, Node)>,
    unnamed: usize,
    map_entries: usize,
}

/// Whether `s` is a valid Avro name.
fn valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `s` with every invalid character replaced by `_` (and `_` before a leading digit), as
/// AvroData's name scrubbing does.
fn scrub(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

impl<'a> ToAvro<'a> {
    fn name_part(&self, part: &str, what: &str, whole: &str) -> Result<String, DataError> {
        if valid_name(part) {
            Ok(part.to_owned())
        } else if self.options.scrub_invalid_names {
            Ok(scrub(part))
        } else {
            Err(DataError::new(format!(
                "{what} '{whole}' is not a valid Avro name (each dot-separated part must match [A-Za-z_][A-Za-z0-9_]*): set schema.name.adjustment.mode=avro and field.name.adjustment.mode=avro on the PostgreSQL or MySQL source connector, or scrub.invalid.names=true on the AvroConverter"
            )))
        }
    }

    /// (namespace, name) of a record from a Connect name.
    fn split_name(&self, full: &str) -> Result<(String, String), DataError> {
        let (ns, name) = match full.rfind('.') {
            Some(i) => (&full[..i], &full[i + 1..]),
            None => ("", full),
        };
        let name = self.name_part(name, "Schema name", full)?;
        let ns = if ns.is_empty() {
            String::new()
        } else {
            ns.split('.')
                .map(|p| self.name_part(p, "Schema name", full))
                .collect::<Result<Vec<_>, _>>()?
                .join(".")
        };
        Ok((ns, name))
    }

    /// The Avro JSON and node of `schema`, optional schemas as unions with null.
    fn schema(
        &mut self,
        schema: &'a Schema,
        _field: Option<&str>,
    ) -> Result<(Json, Node), DataError> {
        let (base, node) = self.required(schema)?;
        if !schema.is_optional() {
            return Ok((base, node));
        }
        // An optional struct keeps null first whatever its default (as AvroData does).
        let null_second = schema.schema_type() != SchemaType::Struct
            && schema.default_value().is_some_and(|d| !d.is_null());
        if null_second {
            Ok((
                Json::Array(vec![base, json!("null")]),
                Node::Union(Arc::from(vec![node, Node::Null])),
            ))
        } else {
            Ok((
                Json::Array(vec![json!("null"), base]),
                Node::Union(Arc::from(vec![Node::Null, node])),
            ))
        }
    }

    /// The `connect.*` properties of a schema, in AvroData's order.
    fn connect_props(&self, schema: &Schema, obj: &mut Map<String, Json>) -> Result<(), DataError> {
        if let Some(doc) = schema.doc() {
            obj.insert("connect.doc".into(), json!(doc));
        }
        if let Some(v) = schema.version() {
            obj.insert("connect.version".into(), json!(v));
        }
        if let Some(params) = schema.parameters() {
            let map: Map<String, Json> = params
                .iter()
                .map(|(k, v)| (k.clone(), Json::String(v.clone())))
                .collect();
            obj.insert("connect.parameters".into(), Json::Object(map));
        }
        if let Some(default) = schema.default_value() {
            if !default.is_null() {
                obj.insert("connect.default".into(), default_json(schema, default)?);
            }
        }
        if let Some(name) = schema.name() {
            obj.insert("connect.name".into(), json!(name));
        }
        Ok(())
    }

    /// A primitive type with the schema's properties (a bare type name when it has none).
    fn primitive(
        &self,
        schema: &Schema,
        avro_type: &str,
        pre: &[(&str, Json)],
        post: &[(&str, Json)],
    ) -> Result<Json, DataError> {
        let mut obj = Map::new();
        obj.insert("type".into(), json!(avro_type));
        for (k, v) in pre {
            obj.insert((*k).to_owned(), v.clone());
        }
        self.connect_props(schema, &mut obj)?;
        for (k, v) in post {
            obj.insert((*k).to_owned(), v.clone());
        }
        if obj.len() == 1 {
            return Ok(json!(avro_type));
        }
        Ok(Json::Object(obj))
    }

    fn required(&mut self, schema: &'a Schema) -> Result<(Json, Node), DataError> {
        let name = schema.name();
        Ok(match schema.schema_type() {
            SchemaType::Int8 => (
                self.primitive(schema, "int", &[], &[("connect.type", json!("int8"))])?,
                Node::Int,
            ),
            SchemaType::Int16 => (
                self.primitive(schema, "int", &[], &[("connect.type", json!("int16"))])?,
                Node::Int,
            ),
            SchemaType::Int32 => {
                let logical = match name {
                    Some(date::LOGICAL_NAME) => Some("date"),
                    Some(time::LOGICAL_NAME) => Some("time-millis"),
                    _ => None,
                };
                let mut json = self.primitive(schema, "int", &[], &[])?;
                if let (Some(l), Json::Object(obj)) = (logical, &mut json) {
                    obj.insert("logicalType".into(), json!(l));
                }
                (json, Node::Int)
            }
            SchemaType::Int64 => {
                let mut json = self.primitive(schema, "long", &[], &[])?;
                if let (Some(timestamp::LOGICAL_NAME), Json::Object(obj)) = (name, &mut json) {
                    obj.insert("logicalType".into(), json!("timestamp-millis"));
                }
                (json, Node::Long)
            }
            SchemaType::Float32 => (self.primitive(schema, "float", &[], &[])?, Node::Float),
            SchemaType::Float64 => (self.primitive(schema, "double", &[], &[])?, Node::Double),
            SchemaType::Boolean => (self.primitive(schema, "boolean", &[], &[])?, Node::Boolean),
            SchemaType::String => (self.primitive(schema, "string", &[], &[])?, Node::String),
            SchemaType::Bytes => {
                if name == Some(decimal::LOGICAL_NAME) {
                    let scale = decimal::scale(schema)?;
                    let precision = match schema.parameter(decimal::PRECISION_PARAMETER) {
                        Some(p) => p.parse::<u32>().map_err(|_| {
                            DataError::new(format!("Invalid Decimal precision parameter: {p}"))
                        })?,
                        None => DEFAULT_DECIMAL_PRECISION,
                    };
                    let mut json = self.primitive(
                        schema,
                        "bytes",
                        &[("scale", json!(scale)), ("precision", json!(precision))],
                        &[],
                    )?;
                    if let Json::Object(obj) = &mut json {
                        obj.insert("logicalType".into(), json!("decimal"));
                    }
                    (json, Node::Bytes)
                } else {
                    (self.primitive(schema, "bytes", &[], &[])?, Node::Bytes)
                }
            }
            SchemaType::Array => {
                let items = schema
                    .value_schema()
                    .ok_or_else(|| DataError::new("array schema without an item schema"))?;
                let (items_json, items_node) = self.schema(items, None)?;
                let mut obj = Map::new();
                obj.insert("type".into(), json!("array"));
                obj.insert("items".into(), items_json);
                self.connect_props(schema, &mut obj)?;
                (Json::Object(obj), Node::Array(Arc::new(items_node)))
            }
            SchemaType::Map => {
                let key = schema
                    .key_schema()
                    .ok_or_else(|| DataError::new("map schema without a key schema"))?;
                let value = schema
                    .value_schema()
                    .ok_or_else(|| DataError::new("map schema without a value schema"))?;
                let (value_json, value_node) = self.schema(value, None)?;
                let mut obj = Map::new();
                if key.schema_type() == SchemaType::String && !key.is_optional() {
                    obj.insert("type".into(), json!("map"));
                    obj.insert("values".into(), value_json);
                    self.connect_props(schema, &mut obj)?;
                    (Json::Object(obj), Node::Map(Arc::new(value_node)))
                } else {
                    let (key_json, key_node) = self.schema(key, None)?;
                    self.map_entries += 1;
                    let entry_name = if self.map_entries == 1 {
                        MAP_ENTRY_NAME.to_owned()
                    } else {
                        format!("{MAP_ENTRY_NAME}{}", self.map_entries)
                    };
                    let entry = json!({
                        "type": "record",
                        "name": entry_name,
                        "namespace": CONNECT_NAMESPACE,
                        "fields": [
                            {"name": "key", "type": key_json},
                            {"name": "value", "type": value_json},
                        ],
                    });
                    obj.insert("type".into(), json!("array"));
                    obj.insert("items".into(), entry);
                    self.connect_props(schema, &mut obj)?;
                    (
                        Json::Object(obj),
                        Node::MapEntries(Arc::new((key_node, value_node))),
                    )
                }
            }
            SchemaType::Struct => return self.record(schema),
        })
    }

    fn record(&mut self, schema: &'a Schema) -> Result<(Json, Node), DataError> {
        let (namespace, record_name) = match schema.name() {
            Some(full) => self.split_name(full)?,
            None => {
                self.unnamed += 1;
                let name = if self.unnamed == 1 {
                    DEFAULT_RECORD_NAME.to_owned()
                } else {
                    format!("{DEFAULT_RECORD_NAME}{}", self.unnamed)
                };
                (CONNECT_NAMESPACE.to_owned(), name)
            }
        };
        let full = if namespace.is_empty() {
            record_name.clone()
        } else {
            format!("{namespace}.{record_name}")
        };
        if let Some((earlier, node)) = self.defined.get(full.as_str()) {
            if schema_eq_ignoring_optional(earlier, schema) {
                return Ok((Json::String(full), node.clone()));
            }
            return Err(DataError::new(format!(
                "two different struct schemas are named {full} in one record; Avro cannot express that (give them different names)"
            )));
        }
        let mut fields = Vec::with_capacity(schema.fields().len());
        let mut nodes = Vec::with_capacity(schema.fields().len());
        for field in schema.fields() {
            let field_name = self.name_part(field.name(), "Field name", field.name())?;
            let (field_json, field_node) = self.schema(field.schema(), Some(field.name()))?;
            let mut f = Map::new();
            f.insert("name".into(), json!(field_name));
            f.insert("type".into(), field_json);
            let fs = field.schema();
            match fs.default_value() {
                Some(d) if !d.is_null() => {
                    f.insert("default".into(), default_json(fs, d)?);
                }
                _ if fs.is_optional() => {
                    f.insert("default".into(), Json::Null);
                }
                _ => {}
            }
            fields.push(Json::Object(f));
            nodes.push(field_node);
        }
        let node = Node::Record(Arc::from(nodes));
        let mut obj = Map::new();
        obj.insert("type".into(), json!("record"));
        obj.insert("name".into(), json!(record_name));
        obj.insert("namespace".into(), json!(namespace));
        obj.insert("fields".into(), Json::Array(fields));
        self.connect_props(schema, &mut obj)?;
        self.defined.insert(full, (schema, node.clone()));
        Ok((Json::Object(obj), node))
    }
}

/// Equality of two struct schemas that share a name, ignoring whether each is optional (the
/// union with null is outside the named type).
fn schema_eq_ignoring_optional(a: &Schema, b: &Schema) -> bool {
    a.fields() == b.fields()
        && a.name() == b.name()
        && a.version() == b.version()
        && a.doc() == b.doc()
        && a.parameters() == b.parameters()
}

/// The Avro JSON of a default value (as Avro writes defaults: bytes as ISO-8859-1 strings).
fn default_json(schema: &Schema, value: &Value) -> Result<Json, DataError> {
    Ok(match value {
        Value::Null => Json::Null,
        Value::Boolean(b) => json!(b),
        Value::Int8(v) => json!(v),
        Value::Int16(v) => json!(v),
        Value::Int32(v) => json!(v),
        Value::Int64(v) => json!(v),
        Value::Float32(v) => json!(v),
        Value::Float64(v) => json!(v),
        Value::String(s) => json!(s),
        Value::Bytes(b) => Json::String(b.iter().map(|&c| char::from(c)).collect()),
        Value::Array(items) => {
            let item_schema = schema
                .value_schema()
                .ok_or_else(|| DataError::new("array default without an item schema"))?;
            Json::Array(
                items
                    .iter()
                    .map(|v| default_json(item_schema, v))
                    .collect::<Result<_, _>>()?,
            )
        }
        Value::Map(entries) => {
            let (Some(ks), Some(vs)) = (schema.key_schema(), schema.value_schema()) else {
                return Err(DataError::new("map default without key and value schemas"));
            };
            if ks.schema_type() == SchemaType::String && !ks.is_optional() {
                let mut m = Map::new();
                for (k, v) in entries {
                    let key = k
                        .as_str()
                        .ok_or_else(|| DataError::new("map default with a non-string key"))?;
                    m.insert(key.to_owned(), default_json(vs, v)?);
                }
                Json::Object(m)
            } else {
                Json::Array(
                    entries
                        .iter()
                        .map(|(k, v)| {
                            Ok(json!({"key": default_json(ks, k)?, "value": default_json(vs, v)?}))
                        })
                        .collect::<Result<_, DataError>>()?,
                )
            }
        }
        Value::Struct(s) => {
            let mut m = Map::new();
            for (f, v) in s.schema().fields().iter().zip(s.values()) {
                m.insert(f.name().to_owned(), default_json(f.schema(), v)?);
            }
            Json::Object(m)
        }
    })
}

/// A Connect schema read back from Avro, with the node to decode its data.
#[derive(Debug, Clone)]
pub struct ConnectSchema {
    pub schema: SchemaRef,
    pub node: Node,
}

/// Maps an Avro schema (JSON text) to a Connect schema.
pub fn from_avro(avro_json: &str) -> Result<ConnectSchema, DataError> {
    let json: Json = serde_json::from_str(avro_json)
        .map_err(|e| DataError::new(format!("the Avro schema is not JSON: {e}")))?;
    let mut ctx = FromAvro {
        named: HashMap::new(),
    };
    let (schema, node) = ctx.schema(&json, "")?;
    Ok(ConnectSchema { schema, node })
}

struct FromAvro {
    /// Full name -> (required Connect schema, node) of each named type defined so far.
    named: HashMap<String, (SchemaRef, Node)>,
}

fn full_name(name: &str, namespace: Option<&str>, enclosing: &str) -> String {
    if name.contains('.') {
        return name.to_owned();
    }
    let ns = namespace.unwrap_or(enclosing);
    if ns.is_empty() {
        name.to_owned()
    } else {
        format!("{ns}.{name}")
    }
}

fn optional_of(schema: &SchemaRef) -> SchemaRef {
    if schema.is_optional() {
        return schema.clone();
    }
    Arc::new(schema.to_builder().optional().build())
}

/// The Connect name of a branch of a general union (its field name in the Union struct).
fn branch_field_name(json: &Json) -> String {
    match json {
        Json::String(s) => s.rsplit('.').next().unwrap_or(s).to_owned(),
        Json::Object(o) => {
            let t = o.get("type").and_then(Json::as_str).unwrap_or("unknown");
            match t {
                "record" | "enum" | "fixed" => o
                    .get("name")
                    .and_then(Json::as_str)
                    .map(|n| n.rsplit('.').next().unwrap_or(n).to_owned())
                    .unwrap_or_else(|| t.to_owned()),
                other => other.to_owned(),
            }
        }
        _ => "unknown".to_owned(),
    }
}

impl FromAvro {
    fn schema(&mut self, json: &Json, enclosing_ns: &str) -> Result<(SchemaRef, Node), DataError> {
        match json {
            Json::String(t) => self.named_or_primitive(t, None, enclosing_ns),
            Json::Array(branches) => self.union(branches, enclosing_ns),
            Json::Object(obj) => self.object(obj, enclosing_ns),
            other => Err(DataError::new(format!("invalid Avro schema: {other}"))),
        }
    }

    fn named_or_primitive(
        &mut self,
        t: &str,
        obj: Option<&Map<String, Json>>,
        enclosing_ns: &str,
    ) -> Result<(SchemaRef, Node), DataError> {
        let (builder, node) = match t {
            "null" => {
                return Err(DataError::new(
                    "an Avro null outside a union has no Connect type",
                ))
            }
            "boolean" => (SchemaBuilder::boolean(), Node::Boolean),
            "int" => {
                let connect_type = obj
                    .and_then(|o| o.get("connect.type"))
                    .and_then(Json::as_str);
                match connect_type {
                    Some("int8") => (SchemaBuilder::int8(), Node::Int),
                    Some("int16") => (SchemaBuilder::int16(), Node::Int),
                    _ => (SchemaBuilder::int32(), Node::Int),
                }
            }
            "long" => (SchemaBuilder::int64(), Node::Long),
            "float" => (SchemaBuilder::float32(), Node::Float),
            "double" => (SchemaBuilder::float64(), Node::Double),
            "bytes" => (SchemaBuilder::bytes(), Node::Bytes),
            "string" => (SchemaBuilder::string(), Node::String),
            name => {
                let full = full_name(name, None, enclosing_ns);
                return self
                    .named
                    .get(&full)
                    .or_else(|| self.named.get(name))
                    .cloned()
                    .ok_or_else(|| DataError::new(format!("unknown Avro type {name}")));
            }
        };
        let builder = match obj {
            Some(o) => apply_connect_props(builder, o, t)?,
            None => builder,
        };
        Ok((Arc::new(builder.build()), node))
    }

    fn union(
        &mut self,
        branches: &[Json],
        enclosing_ns: &str,
    ) -> Result<(SchemaRef, Node), DataError> {
        let mut nodes = Vec::with_capacity(branches.len());
        let mut non_null = Vec::new();
        for b in branches {
            if b.as_str() == Some("null") {
                nodes.push(Node::Null);
            } else {
                let (s, n) = self.schema(b, enclosing_ns)?;
                nodes.push(n);
                non_null.push((b, s));
            }
        }
        let has_null = nodes.iter().any(|n| matches!(n, Node::Null));
        let schema = match non_null.len() {
            0 => {
                return Err(DataError::new(
                    "an Avro union of only null has no Connect type",
                ))
            }
            1 if has_null => optional_of(&non_null[0].1),
            1 => non_null[0].1.clone(),
            _ => {
                let mut b = SchemaBuilder::struct_().name(UNION_NAME);
                for (json, s) in &non_null {
                    b = b.field(branch_field_name(json), optional_of(s));
                }
                if has_null {
                    b = b.optional();
                }
                b.build_ref()
            }
        };
        Ok((schema, Node::Union(Arc::from(nodes))))
    }

    fn object(
        &mut self,
        obj: &Map<String, Json>,
        enclosing_ns: &str,
    ) -> Result<(SchemaRef, Node), DataError> {
        let t = match obj.get("type") {
            Some(Json::String(t)) => t.as_str(),
            Some(nested) => return self.schema(nested, enclosing_ns),
            None => return Err(DataError::new("an Avro schema object without \"type\"")),
        };
        match t {
            "record" | "error" => self.record(obj, enclosing_ns),
            "enum" => {
                let name = obj.get("name").and_then(Json::as_str).unwrap_or("enum");
                let full = full_name(
                    name,
                    obj.get("namespace").and_then(Json::as_str),
                    enclosing_ns,
                );
                let symbols: Vec<String> = obj
                    .get("symbols")
                    .and_then(Json::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|s| s.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                let mut b = SchemaBuilder::string().parameter(ENUM_PARAMETER, full.clone());
                for s in &symbols {
                    b = b.parameter(format!("{ENUM_PARAMETER}.{s}"), s.clone());
                }
                let out = (b.build_ref(), Node::Enum(Arc::from(symbols)));
                self.named.insert(full, out.clone());
                Ok(out)
            }
            "fixed" => {
                let name = obj.get("name").and_then(Json::as_str).unwrap_or("fixed");
                let full = full_name(
                    name,
                    obj.get("namespace").and_then(Json::as_str),
                    enclosing_ns,
                );
                let size =
                    obj.get("size").and_then(Json::as_u64).ok_or_else(|| {
                        DataError::new(format!("Avro fixed {full} without a size"))
                    })? as usize;
                let mut b =
                    SchemaBuilder::bytes().parameter(FIXED_SIZE_PARAMETER, size.to_string());
                if obj.get("logicalType").and_then(Json::as_str) == Some("decimal") {
                    b = decimal_builder(obj)?;
                }
                let out = (b.build_ref(), Node::Fixed(size));
                self.named.insert(full, out.clone());
                Ok(out)
            }
            "array" => {
                let items = obj
                    .get("items")
                    .ok_or_else(|| DataError::new("an Avro array without \"items\""))?;
                if let Some(entry) = map_entry_record(items) {
                    let fields = entry
                        .get("fields")
                        .and_then(Json::as_array)
                        .cloned()
                        .unwrap_or_default();
                    let key = fields
                        .iter()
                        .find(|f| f.get("name").and_then(Json::as_str) == Some("key"));
                    let value = fields
                        .iter()
                        .find(|f| f.get("name").and_then(Json::as_str) == Some("value"));
                    if let (Some(k), Some(v)) = (
                        key.and_then(|f| f.get("type")),
                        value.and_then(|f| f.get("type")),
                    ) {
                        let (ks, kn) = self.schema(k, CONNECT_NAMESPACE)?;
                        let (vs, vn) = self.schema(v, CONNECT_NAMESPACE)?;
                        let b = apply_connect_props(SchemaBuilder::map(ks, vs), obj, "array")?;
                        return Ok((b.build_ref(), Node::MapEntries(Arc::new((kn, vn)))));
                    }
                }
                let (is, inode) = self.schema(items, enclosing_ns)?;
                let b = apply_connect_props(SchemaBuilder::array(is), obj, "array")?;
                Ok((b.build_ref(), Node::Array(Arc::new(inode))))
            }
            "map" => {
                let values = obj
                    .get("values")
                    .ok_or_else(|| DataError::new("an Avro map without \"values\""))?;
                let (vs, vnode) = self.schema(values, enclosing_ns)?;
                let b = apply_connect_props(SchemaBuilder::map(Schema::string(), vs), obj, "map")?;
                Ok((b.build_ref(), Node::Map(Arc::new(vnode))))
            }
            "bytes" if obj.get("logicalType").and_then(Json::as_str) == Some("decimal") => {
                let b = decimal_builder(obj)?;
                let b = apply_connect_props(b, obj, "bytes")?;
                Ok((b.build_ref(), Node::Bytes))
            }
            "int" | "long" => {
                let logical = obj.get("logicalType").and_then(Json::as_str);
                let connect_name = obj.get("connect.name").and_then(Json::as_str);
                let b = match (t, logical, connect_name) {
                    ("int", Some("date"), None) => Some(date::builder()),
                    ("int", Some("time-millis"), None) => Some(time::builder()),
                    ("long", Some("timestamp-millis"), None) => Some(timestamp::builder()),
                    _ => None,
                };
                match b {
                    Some(b) => {
                        let node = if t == "int" { Node::Int } else { Node::Long };
                        Ok((apply_connect_props(b, obj, t)?.build_ref(), node))
                    }
                    None => self.named_or_primitive(t, Some(obj), enclosing_ns),
                }
            }
            other => self.named_or_primitive(other, Some(obj), enclosing_ns),
        }
    }

    fn record(
        &mut self,
        obj: &Map<String, Json>,
        enclosing_ns: &str,
    ) -> Result<(SchemaRef, Node), DataError> {
        let name = obj
            .get("name")
            .and_then(Json::as_str)
            .ok_or_else(|| DataError::new("an Avro record without a name"))?;
        let full = full_name(
            name,
            obj.get("namespace").and_then(Json::as_str),
            enclosing_ns,
        );
        let ns = full.rfind('.').map_or("", |i| &full[..i]).to_owned();
        let mut b = SchemaBuilder::struct_();
        let connect_default = full == format!("{CONNECT_NAMESPACE}.{DEFAULT_RECORD_NAME}")
            || full
                .strip_prefix(&format!("{CONNECT_NAMESPACE}.{DEFAULT_RECORD_NAME}"))
                .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()));
        match obj.get("connect.name").and_then(Json::as_str) {
            Some(n) => b = b.name(n),
            None if !connect_default => b = b.name(full.clone()),
            None => {}
        }
        if let Some(doc) = obj
            .get("connect.doc")
            .or_else(|| obj.get("doc"))
            .and_then(Json::as_str)
        {
            b = b.doc(doc);
        }
        if let Some(v) = obj.get("connect.version").and_then(Json::as_i64) {
            b = b.version(v as i32);
        }
        if let Some(Json::Object(params)) = obj.get("connect.parameters") {
            for (k, v) in params {
                b = b.parameter(
                    k.clone(),
                    v.as_str().map_or_else(|| v.to_string(), str::to_owned),
                );
            }
        }
        let fields = obj
            .get("fields")
            .and_then(Json::as_array)
            .ok_or_else(|| DataError::new(format!("Avro record {full} without fields")))?;
        let mut nodes = Vec::with_capacity(fields.len());
        for f in fields {
            let fname = f.get("name").and_then(Json::as_str).ok_or_else(|| {
                DataError::new(format!("a field of Avro record {full} without a name"))
            })?;
            let ftype = f.get("type").ok_or_else(|| {
                DataError::new(format!(
                    "field {fname} of Avro record {full} without a type"
                ))
            })?;
            let (mut fs, fnode) = self.schema(ftype, &ns)?;
            if let Some(default) = f.get("default") {
                if !default.is_null() && fs.default_value().is_none() {
                    if let Ok(v) = json_default_to_value(&fs, default) {
                        let with_default = fs.to_builder().default_value(v);
                        if let Ok(s) = with_default.try_build() {
                            fs = Arc::new(s);
                        }
                    }
                }
            }
            b = b.field(fname, fs);
            nodes.push(fnode);
        }
        let out = (b.build_ref(), Node::Record(Arc::from(nodes)));
        self.named.insert(full, out.clone());
        Ok(out)
    }
}

/// The MapEntry record of an array that encodes a Connect map, if `items` is one.
fn map_entry_record(items: &Json) -> Option<&Map<String, Json>> {
    let o = items.as_object()?;
    if o.get("type").and_then(Json::as_str) != Some("record") {
        return None;
    }
    let name = o.get("name").and_then(Json::as_str)?;
    let full = full_name(name, o.get("namespace").and_then(Json::as_str), "");
    let base = format!("{CONNECT_NAMESPACE}.{MAP_ENTRY_NAME}");
    (full
        .strip_prefix(&base)?
        .chars()
        .all(|c| c.is_ascii_digit()))
    .then_some(o)
}

fn decimal_builder(obj: &Map<String, Json>) -> Result<SchemaBuilder, DataError> {
    let scale = obj.get("scale").and_then(Json::as_i64).unwrap_or(0) as i32;
    let mut b = decimal::builder(scale);
    if let Some(p) = obj.get("precision").and_then(Json::as_u64) {
        let params = obj.get("connect.parameters").and_then(Json::as_object);
        let declared = params.is_some_and(|p| p.contains_key(decimal::PRECISION_PARAMETER));
        // A precision AvroData made up (no parameter) is not a column's precision.
        if declared || params.is_none() {
            b = b.parameter(decimal::PRECISION_PARAMETER, p.to_string());
        }
    }
    Ok(b)
}

/// Applies `connect.name`, `connect.version`, `connect.doc`, `connect.parameters` and
/// `connect.default` of an Avro type object to a builder.
fn apply_connect_props(
    mut b: SchemaBuilder,
    obj: &Map<String, Json>,
    _avro_type: &str,
) -> Result<SchemaBuilder, DataError> {
    if let Some(n) = obj.get("connect.name").and_then(Json::as_str) {
        b = b.name(n);
    }
    if let Some(v) = obj.get("connect.version").and_then(Json::as_i64) {
        b = b.version(v as i32);
    }
    if let Some(d) = obj.get("connect.doc").and_then(Json::as_str) {
        b = b.doc(d);
    }
    if let Some(Json::Object(params)) = obj.get("connect.parameters") {
        // Decimal's scale (and precision) come first from decimal_builder; keep those values.
        for (k, v) in params {
            let v = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
            b = b.parameter(k.clone(), v);
        }
    }
    if let Some(d) = obj.get("connect.default") {
        let probe = b.clone().build();
        if let Ok(v) = json_default_to_value(&probe, d) {
            b = b.default_value(v);
        }
    }
    Ok(b)
}

/// A Connect value from an Avro JSON default.
fn json_default_to_value(schema: &Schema, json: &Json) -> Result<Value, DataError> {
    let bad = || {
        DataError::new(format!(
            "default {json} does not fit a {} schema",
            schema.schema_type()
        ))
    };
    Ok(match schema.schema_type() {
        _ if json.is_null() => Value::Null,
        SchemaType::Boolean => Value::Boolean(json.as_bool().ok_or_else(bad)?),
        SchemaType::Int8 => Value::Int8(
            json.as_i64()
                .and_then(|v| i8::try_from(v).ok())
                .ok_or_else(bad)?,
        ),
        SchemaType::Int16 => Value::Int16(
            json.as_i64()
                .and_then(|v| i16::try_from(v).ok())
                .ok_or_else(bad)?,
        ),
        SchemaType::Int32 => Value::Int32(
            json.as_i64()
                .and_then(|v| i32::try_from(v).ok())
                .ok_or_else(bad)?,
        ),
        SchemaType::Int64 => Value::Int64(json.as_i64().ok_or_else(bad)?),
        SchemaType::Float32 => Value::Float32(json.as_f64().ok_or_else(bad)? as f32),
        SchemaType::Float64 => Value::Float64(json.as_f64().ok_or_else(bad)?),
        SchemaType::String => Value::String(json.as_str().ok_or_else(bad)?.to_owned()),
        SchemaType::Bytes => Value::Bytes(
            json.as_str()
                .ok_or_else(bad)?
                .chars()
                .map(|c| u8::try_from(u32::from(c)).map_err(|_| bad()))
                .collect::<Result<_, _>>()?,
        ),
        SchemaType::Array => {
            let items = schema.value_schema().ok_or_else(bad)?;
            Value::Array(
                json.as_array()
                    .ok_or_else(bad)?
                    .iter()
                    .map(|j| json_default_to_value(items, j))
                    .collect::<Result<_, _>>()?,
            )
        }
        SchemaType::Map => {
            let (Some(ks), Some(vs)) = (schema.key_schema(), schema.value_schema()) else {
                return Err(bad());
            };
            match json {
                Json::Object(o) => Value::Map(
                    o.iter()
                        .map(|(k, v)| Ok((Value::String(k.clone()), json_default_to_value(vs, v)?)))
                        .collect::<Result<_, DataError>>()?,
                ),
                Json::Array(a) => Value::Map(
                    a.iter()
                        .map(|e| {
                            Ok((
                                json_default_to_value(ks, e.get("key").ok_or_else(bad)?)?,
                                json_default_to_value(vs, e.get("value").ok_or_else(bad)?)?,
                            ))
                        })
                        .collect::<Result<_, DataError>>()?,
                ),
                _ => return Err(bad()),
            }
        }
        SchemaType::Struct => {
            let o = json.as_object().ok_or_else(bad)?;
            let values = schema
                .fields()
                .iter()
                .map(|f| match o.get(f.name()) {
                    Some(j) => json_default_to_value(f.schema(), j),
                    None => Ok(Value::Null),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Value::Struct(Struct::from_values(Arc::new(schema.clone()), values)?)
        }
    })
}
