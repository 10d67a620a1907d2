//! Kafka Connect's schema model: the type of every key, value, field and header Headwater moves.
//!
//! A [`Schema`] is immutable once built and shared through [`SchemaRef`] (an `Arc`), so the
//! thousands of records produced from one table share one schema object and converters can
//! cache work per schema. Invariants kept by [`SchemaBuilder::build`]:
//! - only `Struct` schemas have fields, field names are unique and `Field::index` is the
//!   position in [`Schema::fields`];
//! - only `Array` schemas have a value (item) schema, only `Map` schemas have key and value schemas;
//! - a default value, when present, is valid for the schema it belongs to.
//!
//! `parameters` keeps insertion order (Kafka uses a `LinkedHashMap`), and `None` is distinct from
//! an empty map because Kafka Connect's JSON converter writes `"parameters":{}` for the latter.

use std::fmt;
use std::sync::Arc;

use crate::error::DataError;
use crate::value::Value;

/// Shared, immutable schema.
pub type SchemaRef = Arc<Schema>;

/// The twelve schema types of Kafka Connect (`Schema.Type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SchemaType {
    Int8,
    Int16,
    Int32,
    Int64,
    Float32,
    Float64,
    Boolean,
    String,
    Bytes,
    Array,
    Map,
    Struct,
}

impl SchemaType {
    /// The type name used by Kafka Connect's JSON converter (`float` and `double` for the floats).
    pub fn json_name(self) -> &'static str {
        match self {
            SchemaType::Int8 => "int8",
            SchemaType::Int16 => "int16",
            SchemaType::Int32 => "int32",
            SchemaType::Int64 => "int64",
            SchemaType::Float32 => "float",
            SchemaType::Float64 => "double",
            SchemaType::Boolean => "boolean",
            SchemaType::String => "string",
            SchemaType::Bytes => "bytes",
            SchemaType::Array => "array",
            SchemaType::Map => "map",
            SchemaType::Struct => "struct",
        }
    }

    /// Parses a JSON converter type name (the inverse of [`SchemaType::json_name`]).
    pub fn from_json_name(name: &str) -> Option<SchemaType> {
        Some(match name {
            "int8" => SchemaType::Int8,
            "int16" => SchemaType::Int16,
            "int32" => SchemaType::Int32,
            "int64" => SchemaType::Int64,
            "float" => SchemaType::Float32,
            "double" => SchemaType::Float64,
            "boolean" => SchemaType::Boolean,
            "string" => SchemaType::String,
            "bytes" => SchemaType::Bytes,
            "array" => SchemaType::Array,
            "map" => SchemaType::Map,
            "struct" => SchemaType::Struct,
            _ => return None,
        })
    }

    /// The upper-case Java enum name (`INT32`, `FLOAT64`, ...), used in error messages.
    pub fn java_name(self) -> &'static str {
        match self {
            SchemaType::Int8 => "INT8",
            SchemaType::Int16 => "INT16",
            SchemaType::Int32 => "INT32",
            SchemaType::Int64 => "INT64",
            SchemaType::Float32 => "FLOAT32",
            SchemaType::Float64 => "FLOAT64",
            SchemaType::Boolean => "BOOLEAN",
            SchemaType::String => "STRING",
            SchemaType::Bytes => "BYTES",
            SchemaType::Array => "ARRAY",
            SchemaType::Map => "MAP",
            SchemaType::Struct => "STRUCT",
        }
    }

    /// True for every type except array, map and struct.
    pub fn is_primitive(self) -> bool {
        !matches!(
            self,
            SchemaType::Array | SchemaType::Map | SchemaType::Struct
        )
    }
}

impl fmt::Display for SchemaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.java_name())
    }
}

/// One member of a struct schema.
#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    name: String,
    index: usize,
    schema: SchemaRef,
    /// `"name":` when the name needs no escaping in JSON (no `"`, `\\` or control character).
    plain_json_key: Option<Box<[u8]>>,
}

impl Field {
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The field's JSON object key with its colon (`"name":`), when the name needs no JSON
    /// escaping; serialisers write it as it is instead of escaping the name per record.
    pub fn plain_json_key(&self) -> Option<&[u8]> {
        self.plain_json_key.as_deref()
    }
    /// Position of the field in its struct schema.
    pub fn index(&self) -> usize {
        self.index
    }
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }
}

/// A Kafka Connect schema. Build one with [`SchemaBuilder`].
#[derive(Clone, Debug, PartialEq)]
pub struct Schema {
    schema_type: SchemaType,
    optional: bool,
    default: Option<Value>,
    name: Option<String>,
    version: Option<i32>,
    doc: Option<String>,
    parameters: Option<Vec<(String, String)>>,
    fields: Vec<Field>,
    key_schema: Option<SchemaRef>,
    value_schema: Option<SchemaRef>,
}

impl Schema {
    pub fn schema_type(&self) -> SchemaType {
        self.schema_type
    }
    pub fn is_optional(&self) -> bool {
        self.optional
    }
    pub fn default_value(&self) -> Option<&Value> {
        self.default.as_ref()
    }
    /// The schema name; for logical and semantic types this is the type's name
    /// (e.g. `org.apache.kafka.connect.data.Decimal`, `io.debezium.time.MicroTimestamp`).
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
    pub fn version(&self) -> Option<i32> {
        self.version
    }
    pub fn doc(&self) -> Option<&str> {
        self.doc.as_deref()
    }
    /// Parameters in insertion order; `None` when never set.
    pub fn parameters(&self) -> Option<&[(String, String)]> {
        self.parameters.as_deref()
    }
    /// Looks a parameter up by name.
    pub fn parameter(&self, key: &str) -> Option<&str> {
        self.parameters
            .as_ref()?
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
    /// Struct members in order; empty for other types.
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }
    /// A struct member by name.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }
    /// The key schema of a map.
    pub fn key_schema(&self) -> Option<&SchemaRef> {
        self.key_schema.as_ref()
    }
    /// The item schema of an array or the value schema of a map.
    pub fn value_schema(&self) -> Option<&SchemaRef> {
        self.value_schema.as_ref()
    }

    // Shared primitive schemas, as Kafka's `Schema.INT32_SCHEMA` and friends.
    pub fn int8() -> SchemaRef {
        SchemaBuilder::new(SchemaType::Int8).build_ref()
    }
    pub fn int16() -> SchemaRef {
        SchemaBuilder::new(SchemaType::Int16).build_ref()
    }
    pub fn int32() -> SchemaRef {
        SchemaBuilder::new(SchemaType::Int32).build_ref()
    }
    pub fn int64() -> SchemaRef {
        SchemaBuilder::new(SchemaType::Int64).build_ref()
    }
    pub fn float32() -> SchemaRef {
        SchemaBuilder::new(SchemaType::Float32).build_ref()
    }
    pub fn float64() -> SchemaRef {
        SchemaBuilder::new(SchemaType::Float64).build_ref()
    }
    pub fn boolean() -> SchemaRef {
        SchemaBuilder::new(SchemaType::Boolean).build_ref()
    }
    pub fn string() -> SchemaRef {
        SchemaBuilder::new(SchemaType::String).build_ref()
    }
    pub fn bytes() -> SchemaRef {
        SchemaBuilder::new(SchemaType::Bytes).build_ref()
    }
    pub fn optional_string() -> SchemaRef {
        SchemaBuilder::new(SchemaType::String)
            .optional()
            .build_ref()
    }
    pub fn optional_int64() -> SchemaRef {
        SchemaBuilder::new(SchemaType::Int64).optional().build_ref()
    }
    pub fn optional_int32() -> SchemaRef {
        SchemaBuilder::new(SchemaType::Int32).optional().build_ref()
    }

    /// A builder pre-filled with this schema's settings, to derive a variant
    /// (e.g. the optional version of a required schema).
    pub fn to_builder(&self) -> SchemaBuilder {
        SchemaBuilder {
            schema: self.clone(),
        }
    }
}

/// Fluent builder for [`Schema`], mirroring Kafka Connect's `SchemaBuilder`.
#[derive(Clone, Debug)]
pub struct SchemaBuilder {
    schema: Schema,
}

impl SchemaBuilder {
    pub fn new(schema_type: SchemaType) -> Self {
        SchemaBuilder {
            schema: Schema {
                schema_type,
                optional: false,
                default: None,
                name: None,
                version: None,
                doc: None,
                parameters: None,
                fields: Vec::new(),
                key_schema: None,
                value_schema: None,
            },
        }
    }
    pub fn int8() -> Self {
        Self::new(SchemaType::Int8)
    }
    pub fn int16() -> Self {
        Self::new(SchemaType::Int16)
    }
    pub fn int32() -> Self {
        Self::new(SchemaType::Int32)
    }
    pub fn int64() -> Self {
        Self::new(SchemaType::Int64)
    }
    pub fn float32() -> Self {
        Self::new(SchemaType::Float32)
    }
    pub fn float64() -> Self {
        Self::new(SchemaType::Float64)
    }
    pub fn boolean() -> Self {
        Self::new(SchemaType::Boolean)
    }
    pub fn string() -> Self {
        Self::new(SchemaType::String)
    }
    pub fn bytes() -> Self {
        Self::new(SchemaType::Bytes)
    }
    pub fn struct_() -> Self {
        Self::new(SchemaType::Struct)
    }
    /// An array of `items`.
    pub fn array(items: SchemaRef) -> Self {
        let mut b = Self::new(SchemaType::Array);
        b.schema.value_schema = Some(items);
        b
    }
    /// A map from `key` to `value`.
    pub fn map(key: SchemaRef, value: SchemaRef) -> Self {
        let mut b = Self::new(SchemaType::Map);
        b.schema.key_schema = Some(key);
        b.schema.value_schema = Some(value);
        b
    }

    pub fn optional(mut self) -> Self {
        self.schema.optional = true;
        self
    }
    pub fn required(mut self) -> Self {
        self.schema.optional = false;
        self
    }
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.schema.name = Some(name.into());
        self
    }
    pub fn version(mut self, version: i32) -> Self {
        self.schema.version = Some(version);
        self
    }
    pub fn doc(mut self, doc: impl Into<String>) -> Self {
        self.schema.doc = Some(doc.into());
        self
    }
    /// Sets a parameter, replacing an earlier value for the same key in place.
    pub fn parameter(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        let key = key.into();
        let value = value.into();
        let params = self.schema.parameters.get_or_insert_with(Vec::new);
        match params.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => params.push((key, value)),
        }
        self
    }
    /// Marks the parameter map as present (even if empty).
    pub fn parameters_present(mut self) -> Self {
        self.schema.parameters.get_or_insert_with(Vec::new);
        self
    }
    /// Sets the default value; checked against the schema in [`SchemaBuilder::build`].
    pub fn default_value(mut self, value: Value) -> Self {
        self.schema.default = Some(value);
        self
    }
    /// Appends a struct member. Panics on a non-struct builder, like Kafka's `SchemaBuilder`
    /// throws; use [`SchemaBuilder::try_field`] for untrusted input.
    pub fn field(self, name: impl Into<String>, schema: SchemaRef) -> Self {
        match self.try_field(name, schema) {
            Ok(b) => b,
            Err(e) => panic!("{e}"),
        }
    }
    /// Appends a struct member, failing on a non-struct schema or a duplicate name.
    pub fn try_field(
        mut self,
        name: impl Into<String>,
        schema: SchemaRef,
    ) -> Result<Self, DataError> {
        let name = name.into();
        if self.schema.schema_type != SchemaType::Struct {
            return Err(DataError::new(format!(
                "Cannot create fields on type {}",
                self.schema.schema_type
            )));
        }
        if self.schema.fields.iter().any(|f| f.name == name) {
            return Err(DataError::new(format!(
                "Cannot create field because of field name duplication {name}"
            )));
        }
        let index = self.schema.fields.len();
        let plain_json_key = (!name.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\'))
            .then(|| format!("\"{name}\":").into_bytes().into_boxed_slice());
        self.schema.fields.push(Field {
            name,
            index,
            schema,
            plain_json_key,
        });
        Ok(self)
    }

    /// Finishes the schema, validating its default value.
    pub fn try_build(self) -> Result<Schema, DataError> {
        if let Some(default) = &self.schema.default {
            crate::value::validate_value(&self.schema, default)
                .map_err(|e| DataError::new(format!("Invalid default value: {}", e.message())))?;
        }
        Ok(self.schema)
    }
    /// Finishes the schema. Panics on an invalid default value (a programming error).
    pub fn build(self) -> Schema {
        match self.try_build() {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        }
    }
    /// Finishes the schema into a shared [`SchemaRef`].
    pub fn build_ref(self) -> SchemaRef {
        Arc::new(self.build())
    }
}
