//! `io.debezium.connector.mongodb.transforms.ExtractNewDocumentState` ("unwrap" for MongoDB):
//! turns a Debezium MongoDB change event, whose `after`/`before` are extended-JSON strings,
//! into a typed record: the document as a struct, the key as `{id: <typed _id>}`. Follows
//! Debezium 3.6's transform and its `MongoDataConverter` (see
//! `docs/connectors/mongodb.md#extractnewdocumentstate` for the mapping and the deliberate
//! differences).
//!
//! Invariants:
//! - Only records whose key schema is a Debezium key (`*.Key`) are touched; other records pass
//!   unchanged, and so do records with such a key whose value is not an envelope.
//! - Schemas come from the document itself, field order as stored: every field optional;
//!   nested documents are structs named `<parent struct>.<field>` (the key's parent has no
//!   name, hence `null.id`); an empty document is an unnamed struct; int32/int64/double/
//!   boolean keep their type; string, ObjectId (hex), Decimal128 (text), JavaScript and null
//!   are strings; dates and BSON timestamps are `org.apache.kafka.connect.data.Timestamp`
//!   (a timestamp's increment is lost); binary is bytes; regexes are
//!   `io.debezium.mongodb.regex {regex, options}`.
//! - `array.encoding=array` (default): an array's elements must agree on one type; documents
//!   in an array are merged into one struct (the union of their fields). `document`: arrays
//!   become structs with fields `_0`, `_1`, ... each typed by its own element.
//! - Values that have no Connect form (MinKey, MaxKey, JavaScript with scope, undefined,
//!   symbol, DBPointer) and arrays mixing types under `array` encoding fail the record with a
//!   data error naming the field, as Debezium fails; the record is never emitted half-built.
//! - Deletes follow `delete.tombstone.handling.mode` as in `ExtractNewRecordState`, except
//!   that the rewrite marker `__deleted` is a boolean (it is a document field here).
//! - Equal document shapes give the same `Arc` schema (cached), so the converter's schema
//!   caches work.

use std::collections::HashMap;
use std::sync::Mutex;

use headwater_api::config::{ConfigKey, ConfigType, Importance, Validator, Width};
use headwater_api::logical::timestamp;
use headwater_api::{
    ConfigDef, ConfigValidation, ConnectError, ConnectRecord, Properties, SchemaBuilder, SchemaRef,
    SchemaType, Struct, Transform, Value,
};

use super::bson_json::{self, Bson, Document};
use super::extract_new_record_state::{
    define_shared_keys, envelope_headers, parse_shared_keys, DeleteTombstoneHandling,
    FieldReference,
};
use super::is_envelope;
use crate::kafka::Flatten;
use crate::util::{configure, get_bool, get_string, ByPtr, SchemaCache, Target};

/// The regex struct's schema name (Debezium's `MongoDataConverter.SCHEMA_NAME_REGEX`).
pub const REGEX_SCHEMA_NAME: &str = "io.debezium.mongodb.regex";

/// `array.encoding`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArrayEncoding {
    Array,
    Document,
}

/// The Connect type of a leaf value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Scalar {
    String,
    Int32,
    Int64,
    Double,
    Boolean,
    Bytes,
    Timestamp,
    Regex,
}

impl Scalar {
    fn name(self) -> &'static str {
        match self {
            Scalar::String => "string",
            Scalar::Int32 => "int32",
            Scalar::Int64 => "int64",
            Scalar::Double => "double",
            Scalar::Boolean => "boolean",
            Scalar::Bytes => "bytes",
            Scalar::Timestamp => "timestamp",
            Scalar::Regex => "regex",
        }
    }
}

/// The shape of a value, from which its schema is built.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Shape {
    /// A null (or an array with no non-null element): an optional string when nothing else
    /// is known.
    Null,
    Scalar(Scalar),
    /// A document, or an array under `document` encoding (`from_array`, named even when
    /// empty).
    Doc {
        fields: Vec<(String, Shape)>,
        from_array: bool,
    },
    /// An array with the merged shape of its elements.
    Array(Box<Shape>),
}

impl Shape {
    fn describe(&self) -> &'static str {
        match self {
            Shape::Null => "null",
            Shape::Scalar(s) => s.name(),
            Shape::Doc { .. } => "document",
            Shape::Array(_) => "array",
        }
    }
}

/// A conversion failure with the path of the field it happened at (built while unwinding).
struct PathError {
    path: Vec<String>,
    message: String,
}

impl PathError {
    fn new(message: String) -> Self {
        PathError {
            path: Vec::new(),
            message,
        }
    }
    fn at(mut self, key: &str) -> Self {
        self.path.push(key.to_owned());
        self
    }
    fn into_connect(self, what: &str, topic: &str) -> ConnectError {
        let path: Vec<&str> = self.path.iter().rev().map(String::as_str).collect();
        ConnectError::data(format!(
            "ExtractNewDocumentState cannot convert the {what} of a record for topic '{topic}': field '{}': {}",
            path.join("."),
            self.message
        ))
    }
}

/// Top-level schemas built so far, keyed by (struct name, field shapes, optional); cleared
/// when it grows past `SCHEMA_CACHE_LIMIT` (many differently shaped documents).
type SchemaCacheMap = HashMap<(Option<String>, Vec<(String, Shape)>, bool), SchemaRef>;
const SCHEMA_CACHE_LIMIT: usize = 4096;

/// `io.debezium.connector.mongodb.transforms.ExtractNewDocumentState`.
#[derive(Debug)]
pub struct ExtractNewDocumentState {
    array_encoding: ArrayEncoding,
    mode: DeleteTombstoneHandling,
    rewrite_with_id: bool,
    add_fields: Vec<FieldReference>,
    add_headers: Vec<FieldReference>,
    flatten: Option<(Flatten, String)>,
    schemas: Mutex<SchemaCacheMap>,
    /// Value schemas with the `add.fields` appended, per (document schema, envelope schema).
    added_schemas: SchemaCache<(ByPtr, ByPtr), SchemaRef>,
}

impl ExtractNewDocumentState {
    pub fn config_def() -> ConfigDef {
        define_shared_keys(ConfigDef::new())
            .define(
                ConfigKey::new("array.encoding", ConfigType::String)
                    .default_str("array")
                    .validator(Validator::one_of_case_insensitive(&["array", "document"]))
                    .importance(Importance::Medium)
                    .width(Width::Short)
                    .doc("The arrays can be encoded using 'array' schema type (the default) or as a 'document' (similar to how BSON encodes arrays). 'array' is easier to consume but requires all elements in the array to be of the same type. Use 'document' if the arrays in data source mix different types together."),
            )
            .define(
                ConfigKey::new("flatten.struct", ConfigType::Boolean)
                    .default_str("false")
                    .importance(Importance::Low)
                    .width(Width::Short)
                    .doc("Flattening structs by concatenating the fields into plain properties, using a (configurable) delimiter."),
            )
            .define(
                ConfigKey::new("flatten.struct.delimiter", ConfigType::String)
                    .default_str("_")
                    .importance(Importance::Low)
                    .doc("Delimiter to concat between field names from the input record when generating field names for the output record."),
            )
            .define(
                ConfigKey::new("delete.tombstone.handling.mode.rewrite-with-id", ConfigType::Boolean)
                    .default_str("false")
                    .importance(Importance::Low)
                    .doc("When set to true and \"delete.tombstone.handling.mode\" is rewrite, extracts the \"id\" from the deleted record's key and includes it as \"_id\" in the event payload."),
            )
            .define(
                ConfigKey::new("field.name.adjustment.mode", ConfigType::String)
                    .default_str("none")
                    .validator(Validator::one_of_case_insensitive(&["none"]))
                    .importance(Importance::Low)
                    .doc("How field names are adjusted: only 'none' (names kept as stored) is supported by Headwater's ExtractNewDocumentState."),
            )
    }

    pub fn configure(props: &Properties) -> Result<Self, ConfigValidation> {
        let raw = |k: &str| props.get(k).cloned();
        configure(&Self::config_def(), props, |c, errors| {
            let (mode, add_fields, add_headers) = parse_shared_keys(props, c, errors)?;
            let array_encoding = match c
                .get_string("array.encoding")?
                .trim()
                .to_ascii_lowercase()
                .as_str()
            {
                "document" => ArrayEncoding::Document,
                _ => ArrayEncoding::Array,
            };
            let flatten = if get_bool(c, "flatten.struct", false) {
                let delimiter = raw("flatten.struct.delimiter")
                    .or_else(|| get_string(c, "flatten.struct.delimiter"))
                    .unwrap_or_else(|| "_".into());
                let props: Properties = [("delimiter".to_owned(), delimiter.clone())]
                    .into_iter()
                    .collect();
                let f = Flatten::configure(Target::Value, &props)
                    .map_err(|_| errors.add_error("flatten.struct.delimiter", "invalid delimiter"))
                    .ok()?;
                Some((f, delimiter))
            } else {
                None
            };
            Some(ExtractNewDocumentState {
                array_encoding,
                mode,
                rewrite_with_id: get_bool(
                    c,
                    "delete.tombstone.handling.mode.rewrite-with-id",
                    false,
                ),
                add_fields,
                add_headers,
                flatten,
                schemas: Mutex::new(HashMap::new()),
                added_schemas: SchemaCache::new(64),
            })
        })
    }

    /// The shape of one value.
    fn shape_of(&self, v: &Bson) -> Result<Shape, PathError> {
        Ok(match v {
            Bson::Null => Shape::Null,
            Bson::String(_) | Bson::ObjectId(_) | Bson::Decimal128(_) | Bson::JavaScript(_) => {
                Shape::Scalar(Scalar::String)
            }
            Bson::Int32(_) => Shape::Scalar(Scalar::Int32),
            Bson::Int64(_) => Shape::Scalar(Scalar::Int64),
            Bson::Double(_) => Shape::Scalar(Scalar::Double),
            Bson::Boolean(_) => Shape::Scalar(Scalar::Boolean),
            Bson::Binary { .. } => Shape::Scalar(Scalar::Bytes),
            Bson::DateTime(_) | Bson::Timestamp { .. } => Shape::Scalar(Scalar::Timestamp),
            Bson::Regex { .. } => Shape::Scalar(Scalar::Regex),
            Bson::Document(members) => Shape::Doc {
                fields: self.shapes_of(members)?,
                from_array: false,
            },
            Bson::Array(items) => match self.array_encoding {
                ArrayEncoding::Document => Shape::Doc {
                    fields: items
                        .iter()
                        .enumerate()
                        .map(|(i, item)| {
                            let key = element_name(i);
                            self.shape_of(item)
                                .map(|s| (key.clone(), s))
                                .map_err(|e| e.at(&key))
                        })
                        .collect::<Result<_, _>>()?,
                    from_array: true,
                },
                ArrayEncoding::Array => {
                    let mut merged = Shape::Null;
                    for item in items {
                        let s = self.shape_of(item)?;
                        merged = merge(merged, s)?;
                    }
                    Shape::Array(Box::new(merged))
                }
            },
            Bson::MinKey
            | Bson::MaxKey
            | Bson::Undefined
            | Bson::Symbol(_)
            | Bson::DbPointer { .. }
            | Bson::JavaScriptWithScope { .. } => {
                return Err(PathError::new(format!(
                    "BSON {} values have no Kafka Connect representation",
                    v.type_name()
                )))
            }
        })
    }

    fn shapes_of(&self, members: &Document) -> Result<Vec<(String, Shape)>, PathError> {
        let mut fields: Vec<(String, Shape)> = Vec::with_capacity(members.len());
        for (k, v) in members {
            let s = self.shape_of(v).map_err(|e| e.at(k))?;
            // A repeated name (possible in BSON) keeps its first position, last value.
            match fields.iter_mut().find(|(n, _)| n == k) {
                Some(slot) => slot.1 = s,
                None => fields.push((k.clone(), s)),
            }
        }
        Ok(fields)
    }

    /// The (cached) schema of a struct named `name` with these fields.
    fn struct_schema(
        &self,
        name: Option<&str>,
        fields: Vec<(String, Shape)>,
        optional: bool,
    ) -> SchemaRef {
        let key = (name.map(str::to_owned), fields, optional);
        let mut cache = match self.schemas.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if let Some(s) = cache.get(&key) {
            return s.clone();
        }
        let mut b = SchemaBuilder::struct_();
        if let Some(n) = name {
            b = b.name(n);
        }
        if optional {
            b = b.optional();
        }
        for (k, shape) in &key.1 {
            b = b.field(k.clone(), field_schema(shape, name, k));
        }
        let schema = b.build_ref();
        if cache.len() >= SCHEMA_CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(key, schema.clone());
        schema
    }

    /// A document as a struct of `schema` (built from the document's shape); its strings and
    /// bytes move into the struct.
    fn struct_of(members: Document, schema: &SchemaRef) -> Result<Struct, PathError> {
        let mut values = vec![Value::Null; schema.fields().len()];
        for (k, v) in members {
            if let Some(f) = schema.field(&k) {
                values[f.index()] = value_of(v, f.schema()).map_err(|e| e.at(&k))?;
            }
        }
        Struct::from_values(schema.clone(), values).map_err(|e| PathError::new(e.to_string()))
    }

    /// The key struct `{id}` and the value struct (none for an empty document).
    fn typed(
        &self,
        value_name: Option<&str>,
        key_doc: Document,
        value_doc: Option<Document>,
        topic: &str,
    ) -> Result<(SchemaRef, Struct, Option<Struct>), ConnectError> {
        let key_fields = self
            .shapes_of(&key_doc)
            .map_err(|e| e.into_connect("key", topic))?;
        let key_schema = self.struct_schema(None, key_fields, false);
        let key =
            Self::struct_of(key_doc, &key_schema).map_err(|e| e.into_connect("key", topic))?;
        let value = match value_doc {
            Some(doc) if !doc.is_empty() => {
                let fields = self
                    .shapes_of(&doc)
                    .map_err(|e| e.into_connect("document", topic))?;
                let schema = self.struct_schema(value_name, fields, false);
                Some(Self::struct_of(doc, &schema).map_err(|e| e.into_connect("document", topic))?)
            }
            _ => None,
        };
        Ok((key_schema, key, value))
    }

    /// Appends the `add.fields` taken from the envelope.
    fn with_added_fields(&self, value: Struct, envelope: &Struct) -> Result<Struct, ConnectError> {
        if self.add_fields.is_empty() {
            return Ok(value);
        }
        let env_schema = envelope.schema();
        let row_schema = value.schema().clone();
        let out = self.added_schemas.get_or_try_insert(
            (ByPtr(row_schema.clone()), ByPtr(env_schema.clone())),
            || {
                let mut b = SchemaBuilder::struct_();
                if let Some(n) = row_schema.name() {
                    b = b.name(n);
                }
                for f in row_schema.fields() {
                    b = b.field(f.name(), f.schema().clone());
                }
                for r in &self.add_fields {
                    if let Some(s) = r.schema(env_schema) {
                        b = b
                            .try_field(r.new_field.clone(), s)
                            .map_err(ConnectError::from)?;
                    }
                }
                Ok(b.build_ref())
            },
        )?;
        let mut values = value.into_values();
        for r in &self.add_fields {
            if r.schema(env_schema).is_some() {
                values.push(r.value(envelope));
            }
        }
        Ok(Struct::from_values(out, values)?)
    }

    /// The document of an update without `after` (`capture.mode=change_streams`): the
    /// updated fields, less the removed ones, plus `_id` from the key.
    fn partial_update(&self, update: &Struct, key_id: &Bson) -> Result<Document, String> {
        let mut doc: Document = Vec::new();
        if let Some(Value::String(updated)) = update.get("updatedFields") {
            for (k, v) in bson_json::parse_document(updated)? {
                put(&mut doc, k, v);
            }
        }
        if let Some(Value::Array(removed)) = update.get("removedFields") {
            for r in removed {
                if let Value::String(name) = r {
                    doc.retain(|(k, _)| k != name);
                }
            }
        }
        if !doc.iter().any(|(k, _)| k == "_id") {
            doc.push(("_id".to_owned(), key_id.clone()));
        }
        if let Some((_, delimiter)) = &self.flatten {
            for (k, _) in doc.iter_mut() {
                if k.contains('.') {
                    *k = k.replace('.', delimiter);
                }
            }
        }
        Ok(doc)
    }

    fn output<R: ConnectRecord>(
        &self,
        mut record: R,
        key_doc: Document,
        value_doc: Option<Document>,
        value_name: Option<&str>,
        envelope: Option<&Struct>,
    ) -> Result<Option<R>, ConnectError> {
        let topic = record.topic().to_owned();
        let (key_schema, key, value) = self.typed(value_name, key_doc, value_doc, &topic)?;
        record.set_key(Some(key_schema), Value::Struct(key));
        match value {
            Some(v) => {
                let v = match envelope {
                    Some(env) => self.with_added_fields(v, env)?,
                    None => v,
                };
                record.set_value(Some(v.schema().clone()), Value::Struct(v));
            }
            None => record.set_value(None, Value::Null),
        }
        match &self.flatten {
            Some((f, _)) => Transform::<R>::apply(f, record),
            None => Ok(Some(record)),
        }
    }
}

/// Debezium's `arrayElementStructName`.
fn element_name(i: usize) -> String {
    format!("_{i}")
}

/// `BsonDocument.append`/`put`: replaces in place or appends.
fn put(doc: &mut Document, key: String, value: Bson) {
    match doc.iter_mut().find(|(k, _)| *k == key) {
        Some(slot) => slot.1 = value,
        None => doc.push((key, value)),
    }
}

/// The merged shape of two array elements (under `array` encoding).
fn merge(a: Shape, b: Shape) -> Result<Shape, PathError> {
    Ok(match (a, b) {
        (Shape::Null, x) | (x, Shape::Null) => x,
        (Shape::Scalar(x), Shape::Scalar(y)) if x == y => Shape::Scalar(x),
        (
            Shape::Doc {
                fields: mut left, ..
            },
            Shape::Doc { fields: right, .. },
        ) => {
            for (k, s) in right {
                match left.iter().position(|(n, _)| *n == k) {
                    Some(i) => {
                        let old = std::mem::replace(&mut left[i].1, Shape::Null);
                        left[i].1 = merge(old, s).map_err(|e| e.at(&k))?;
                    }
                    None => left.push((k, s)),
                }
            }
            Shape::Doc {
                fields: left,
                from_array: false,
            }
        }
        (Shape::Array(x), Shape::Array(y)) => Shape::Array(Box::new(merge(*x, *y)?)),
        (x, y) => {
            return Err(PathError::new(format!(
                "array elements with different BSON types are not supported ({} and {}); set array.encoding=document for arrays that mix types",
                x.describe(),
                y.describe()
            )))
        }
    })
}

/// The schema of a field `key` of a struct named `parent`.
fn field_schema(shape: &Shape, parent: Option<&str>, key: &str) -> SchemaRef {
    match shape {
        Shape::Null => SchemaBuilder::string().optional().build_ref(),
        Shape::Scalar(s) => scalar_schema(*s),
        Shape::Doc { fields, from_array } => {
            if fields.is_empty() && !from_array {
                return SchemaBuilder::struct_().optional().build_ref();
            }
            let name = format!("{}.{key}", parent.unwrap_or("null"));
            let mut b = SchemaBuilder::struct_().name(name.clone()).optional();
            for (k, s) in fields {
                b = b.field(k.clone(), field_schema(s, Some(&name), k));
            }
            b.build_ref()
        }
        Shape::Array(items) => SchemaBuilder::array(field_schema(items, parent, key))
            .optional()
            .build_ref(),
    }
}

fn scalar_schema(s: Scalar) -> SchemaRef {
    match s {
        Scalar::String => SchemaBuilder::string().optional().build_ref(),
        Scalar::Int32 => SchemaBuilder::int32().optional().build_ref(),
        Scalar::Int64 => SchemaBuilder::int64().optional().build_ref(),
        Scalar::Double => SchemaBuilder::float64().optional().build_ref(),
        Scalar::Boolean => SchemaBuilder::boolean().optional().build_ref(),
        Scalar::Bytes => SchemaBuilder::bytes().optional().build_ref(),
        Scalar::Timestamp => timestamp::builder().optional().build_ref(),
        Scalar::Regex => SchemaBuilder::struct_()
            .name(REGEX_SCHEMA_NAME)
            .optional()
            .field("regex", SchemaBuilder::string().optional().build_ref())
            .field("options", SchemaBuilder::string().optional().build_ref())
            .build_ref(),
    }
}

/// A BSON value as a Connect value of `schema` (built from its shape), moved.
fn value_of(v: Bson, schema: &SchemaRef) -> Result<Value, PathError> {
    Ok(match v {
        Bson::Null => Value::Null,
        Bson::String(s) | Bson::ObjectId(s) | Bson::Decimal128(s) | Bson::JavaScript(s) => {
            Value::String(s)
        }
        Bson::Int32(n) => Value::Int32(n),
        Bson::Int64(n) => Value::Int64(n),
        Bson::Double(d) => Value::Float64(d),
        Bson::Boolean(b) => Value::Boolean(b),
        Bson::Binary { bytes, .. } => Value::Bytes(bytes),
        Bson::DateTime(ms) => Value::Int64(ms),
        Bson::Timestamp { time, .. } => Value::Int64(i64::from(time) * 1000),
        Bson::Regex { pattern, options } => Value::Struct(
            Struct::from_values(
                schema.clone(),
                vec![Value::String(pattern), Value::String(options)],
            )
            .map_err(|e| PathError::new(e.to_string()))?,
        ),
        Bson::Document(members) => {
            Value::Struct(ExtractNewDocumentState::struct_of(members, schema)?)
        }
        Bson::Array(items) => match schema.schema_type() {
            SchemaType::Array => {
                let item_schema = schema
                    .value_schema()
                    .ok_or_else(|| PathError::new("array schema without items".into()))?;
                Value::Array(
                    items
                        .into_iter()
                        .map(|i| value_of(i, item_schema))
                        .collect::<Result<_, _>>()?,
                )
            }
            _ => {
                let members: Document = items
                    .into_iter()
                    .enumerate()
                    .map(|(i, item)| (element_name(i), item))
                    .collect();
                Value::Struct(ExtractNewDocumentState::struct_of(members, schema)?)
            }
        },
        other => {
            return Err(PathError::new(format!(
                "BSON {} values have no Kafka Connect representation",
                other.type_name()
            )))
        }
    })
}

fn json_field<'a>(envelope: &'a Struct, name: &str) -> Option<&'a str> {
    match envelope.get(name) {
        Some(Value::String(s)) => Some(s),
        _ => None,
    }
}

impl<R: ConnectRecord> Transform<R> for ExtractNewDocumentState {
    fn apply(&self, mut record: R) -> Result<Option<R>, ConnectError> {
        let debezium_key = record
            .key_schema()
            .and_then(|s| s.name())
            .is_some_and(|n| n.ends_with(".Key"));
        if !debezium_key {
            return Ok(Some(record));
        }
        if !self.add_headers.is_empty() {
            let headers = envelope_headers(&self.add_headers, record.value().as_struct());
            for h in headers.iter() {
                record
                    .headers_mut()
                    .add(h.key.clone(), h.schema.clone(), h.value.clone());
            }
        }
        let topic = record.topic().to_owned();
        let id_text = match record.key() {
            Value::Struct(k) => match k.get("id") {
                Some(Value::String(s)) => s.clone(),
                _ => {
                    return Err(ConnectError::data(format!(
                        "ExtractNewDocumentState expects a MongoDB event key with a string field 'id' (topic '{topic}')"
                    )))
                }
            },
            _ => {
                return Err(ConnectError::data(format!(
                    "ExtractNewDocumentState expects a struct key (topic '{topic}')"
                )))
            }
        };
        let key_id = bson_json::parse_value(&id_text).map_err(|e| {
            ConnectError::data(format!(
                "ExtractNewDocumentState cannot read the key id {id_text:?} of topic '{topic}': {e}"
            ))
        })?;
        let key_doc: Document = vec![("id".to_owned(), key_id)];

        if record.value().is_null() {
            return match self.mode {
                DeleteTombstoneHandling::RewriteWithTombstone => {
                    self.output(record, key_doc, None, None, None)
                }
                _ => Ok(None),
            };
        }
        if !record.value_schema().is_some_and(|s| is_envelope(s)) {
            return Ok(Some(record));
        }
        let (env_schema, env_value) = record.take_value();
        let Value::Struct(envelope) = env_value else {
            record.set_value(env_schema, env_value);
            return Ok(Some(record));
        };
        let value_name = env_schema
            .as_ref()
            .and_then(|s| s.name())
            .map(|n| n.strip_suffix(".Envelope").unwrap_or(n).to_owned());
        let parse = |what: &str, text: &str| {
            bson_json::parse_document(text).map_err(|e| {
                ConnectError::data(format!(
                    "ExtractNewDocumentState cannot read '{what}' of a record for topic '{topic}': {e}"
                ))
            })
        };
        let update = match envelope.get("updateDescription") {
            Some(Value::Struct(u)) => Some(u),
            _ => None,
        };
        let after = json_field(&envelope, "after");
        let deletion = after.is_none() && update.is_none();
        let mut doc: Option<Document> = if deletion {
            match self.mode {
                DeleteTombstoneHandling::Drop => return Ok(None),
                DeleteTombstoneHandling::Tombstone | DeleteTombstoneHandling::DeleteToTombstone => {
                    None
                }
                DeleteTombstoneHandling::Rewrite
                | DeleteTombstoneHandling::RewriteWithTombstone => {
                    Some(match json_field(&envelope, "before") {
                        Some(b) => parse("before", b)?,
                        None => Vec::new(),
                    })
                }
            }
        } else if let Some(a) = after {
            Some(parse("after", a)?)
        } else {
            let u = update.expect("an update description when after is null");
            Some(self.partial_update(u, &key_doc[0].1).map_err(|e| {
                ConnectError::data(format!(
                    "ExtractNewDocumentState cannot read 'updateDescription' of a record for topic '{topic}': {e}"
                ))
            })?)
        };
        if self.mode.is_rewrite() {
            let d = doc.get_or_insert_with(Vec::new);
            put(d, "__deleted".to_owned(), Bson::Boolean(deletion));
            if self.rewrite_with_id && !d.iter().any(|(k, _)| k == "_id") {
                d.push(("_id".to_owned(), key_doc[0].1.clone()));
            }
        }
        self.output(record, key_doc, doc, value_name.as_deref(), Some(&envelope))
    }
}
