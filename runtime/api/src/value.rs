//! Values of Kafka Connect's data model and their validation against a [`Schema`].
//!
//! Logical and semantic types are carried in their base representation, exactly as they appear on
//! the wire: a `Decimal` is the big-endian two's-complement unscaled value in [`Value::Bytes`]
//! (the scale lives in the schema), a Connect `Date` is days since the epoch in [`Value::Int32`],
//! an `io.debezium.time.ZonedTimestamp` is its ISO string, and so on. [`crate::logical`] has the
//! helpers that build and read them. This keeps converters and transforms free of per-event
//! conversions.
//!
//! A [`Struct`] always holds exactly one value per field of its schema, and every value it holds
//! was checked against that field's schema when it was put (nulls in required fields are allowed
//! while building and rejected by [`Struct::validate`]).
//!
//! A struct owns its values, unless it was made shared ([`Struct::into_shared`]): then its
//! values live behind an `Arc` and are copied on write, so cloning it is a reference-count
//! increment. A block that many events carry (Debezium's `source` block of one table's
//! snapshot) is built once, shared, and carried by all of them. Shared values never change while
//! another holder exists, which lets converters cache the serialised form of a shared struct by
//! the address of its values ([`Struct::shared_values`]).
//!
//! A struct can also be a shared struct with a few fields replaced ([`Struct::replacing`]): a
//! per-event `source` block that differs from its transaction's only in `lsn` and `sequence`.
//! It holds the shared values and the replacements (no copy of the rest); its full value list
//! is built on the first call of [`Struct::values`], and converters that know the form write
//! it from the cached serialisation of the shared values ([`Struct::replaced_parts`]).

use std::fmt;
use std::sync::{Arc, OnceLock};

use crate::error::DataError;
use crate::schema::{Schema, SchemaRef, SchemaType};

/// A Kafka Connect value.
#[derive(Clone, Debug, PartialEq, Default)]
pub enum Value {
    #[default]
    Null,
    Boolean(bool),
    Int8(i8),
    Int16(i16),
    Int32(i32),
    Int64(i64),
    Float32(f32),
    Float64(f64),
    String(String),
    Bytes(Vec<u8>),
    Array(Vec<Value>),
    /// Map entries in order. Keys are unique by construction of the producer.
    Map(Vec<(Value, Value)>),
    Struct(Struct),
}

impl Value {
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
    /// The schema type this value's variant belongs to (`None` for null).
    pub fn schema_type(&self) -> Option<SchemaType> {
        Some(match self {
            Value::Null => return None,
            Value::Boolean(_) => SchemaType::Boolean,
            Value::Int8(_) => SchemaType::Int8,
            Value::Int16(_) => SchemaType::Int16,
            Value::Int32(_) => SchemaType::Int32,
            Value::Int64(_) => SchemaType::Int64,
            Value::Float32(_) => SchemaType::Float32,
            Value::Float64(_) => SchemaType::Float64,
            Value::String(_) => SchemaType::String,
            Value::Bytes(_) => SchemaType::Bytes,
            Value::Array(_) => SchemaType::Array,
            Value::Map(_) => SchemaType::Map,
            Value::Struct(_) => SchemaType::Struct,
        })
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_struct(&self) -> Option<&Struct> {
        match self {
            Value::Struct(s) => Some(s),
            _ => None,
        }
    }
    /// Any integer variant widened to `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::Int8(v) => Some(v.into()),
            Value::Int16(v) => Some(v.into()),
            Value::Int32(v) => Some(v.into()),
            Value::Int64(v) => Some(v),
            _ => None,
        }
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::String(v.to_owned())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::String(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Boolean(v)
    }
}
impl From<i8> for Value {
    fn from(v: i8) -> Self {
        Value::Int8(v)
    }
}
impl From<i16> for Value {
    fn from(v: i16) -> Self {
        Value::Int16(v)
    }
}
impl From<i32> for Value {
    fn from(v: i32) -> Self {
        Value::Int32(v)
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int64(v)
    }
}
impl From<f32> for Value {
    fn from(v: f32) -> Self {
        Value::Float32(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float64(v)
    }
}
impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Value::Bytes(v)
    }
}
impl From<Struct> for Value {
    fn from(v: Struct) -> Self {
        Value::Struct(v)
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

/// A structured value: one value per field of a struct schema.
#[derive(Clone, Debug)]
pub struct Struct {
    schema: SchemaRef,
    values: Values,
}

/// A struct's values: owned, shared and copied on write, or shared with some replaced.
#[derive(Clone, Debug)]
enum Values {
    Owned(Vec<Value>),
    Shared(Arc<[Value]>),
    Replaced(Box<Replaced>),
}

/// A struct made by [`Struct::replacing`] seen as its shared values and its replacements
/// (`(field index, value)`, in increasing index order).
pub type ReplacedParts<'a> = (&'a Arc<[Value]>, &'a [(usize, Value)]);

/// The most fields [`Struct::replacing`] replaces.
pub const MAX_REPLACED_FIELDS: usize = 6;

/// Shared values with up to [`MAX_REPLACED_FIELDS`] of them replaced.
#[derive(Clone, Debug)]
struct Replaced {
    base: Arc<[Value]>,
    /// `(field index, value)` in increasing index order; the first `count` are used.
    replacements: [(usize, Value); MAX_REPLACED_FIELDS],
    count: usize,
    /// The full value list, built when first asked for.
    full: OnceLock<Vec<Value>>,
}

impl Replaced {
    fn replacements(&self) -> &[(usize, Value)] {
        &self.replacements[..self.count]
    }

    fn to_vec(&self) -> Vec<Value> {
        let mut values = self.base.to_vec();
        for (i, v) in self.replacements() {
            values[*i] = v.clone();
        }
        values
    }
}

impl Values {
    fn as_slice(&self) -> &[Value] {
        match self {
            Values::Owned(v) => v,
            Values::Shared(v) => v,
            Values::Replaced(r) => r.full.get_or_init(|| r.to_vec()),
        }
    }
}

impl PartialEq for Struct {
    fn eq(&self, other: &Self) -> bool {
        (Arc::ptr_eq(&self.schema, &other.schema) || self.schema == other.schema)
            && self.values() == other.values()
    }
}

impl Struct {
    /// An all-null struct of `schema`; fails when `schema` is not a struct schema.
    pub fn new(schema: SchemaRef) -> Result<Struct, DataError> {
        if schema.schema_type() != SchemaType::Struct {
            return Err(DataError::new(format!(
                "Not a struct schema: {}",
                schema.schema_type()
            )));
        }
        let values = Values::Owned(vec![Value::Null; schema.fields().len()]);
        Ok(Struct { schema, values })
    }

    /// A struct of `schema` with `values` in field order, each checked against its field as
    /// [`Struct::put_at`] does.
    pub fn from_values(schema: SchemaRef, values: Vec<Value>) -> Result<Struct, DataError> {
        if schema.schema_type() != SchemaType::Struct {
            return Err(DataError::new(format!(
                "Not a struct schema: {}",
                schema.schema_type()
            )));
        }
        if values.len() != schema.fields().len() {
            return Err(DataError::new(format!(
                "{} values for a struct of {} fields",
                values.len(),
                schema.fields().len()
            )));
        }
        for (field, value) in schema.fields().iter().zip(&values) {
            if !value.is_null() {
                validate_value_named(field.name(), field.schema(), value)?;
            }
        }
        Ok(Struct {
            schema,
            values: Values::Owned(values),
        })
    }

    /// A struct of `schema` with `values` in field order, for producers whose values are built
    /// for the very field schemas they fill (a decoder producing each column's value from that
    /// column's schema): the checks of [`Struct::from_values`] run in debug builds only, so the
    /// per-event paths pay nothing for them. A value that does not match its field is a
    /// programming error of the caller (the test suite runs these paths with the checks on).
    pub fn from_trusted_values(schema: SchemaRef, values: Vec<Value>) -> Struct {
        debug_assert!(
            Struct::from_values(schema.clone(), values.clone()).is_ok(),
            "trusted values do not match their schema: {:?}",
            Struct::from_values(schema.clone(), values.clone()).err()
        );
        Struct {
            schema,
            values: Values::Owned(values),
        }
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Values in field order.
    pub fn values(&self) -> &[Value] {
        self.values.as_slice()
    }

    /// The values in field order, consuming the struct (to move them into a rebuilt struct;
    /// they are moved when this struct was their only holder, cloned otherwise).
    pub fn into_values(self) -> Vec<Value> {
        match self.values {
            Values::Owned(v) => v,
            Values::Shared(mut v) => match Arc::get_mut(&mut v) {
                Some(values) => values.iter_mut().map(std::mem::take).collect(),
                None => v.to_vec(),
            },
            Values::Replaced(mut r) => r.full.take().unwrap_or_else(|| r.to_vec()),
        }
    }

    /// This struct with its values made shared: its clones share them (a reference-count
    /// increment per clone) until one is changed, which copies them first.
    pub fn into_shared(self) -> Struct {
        match self.values {
            Values::Owned(v) => Struct {
                schema: self.schema,
                values: Values::Shared(v.into()),
            },
            Values::Shared(_) => self,
            Values::Replaced(_) => {
                let schema = self.schema.clone();
                Struct {
                    values: Values::Shared(self.into_values().into()),
                    schema,
                }
            }
        }
    }

    /// This shared struct with the fields at the given indexes replaced (at most
    /// [`MAX_REPLACED_FIELDS`], in increasing index order, each value checked against its field
    /// as [`Struct::put_at`] does). The result shares this struct's values and holds only the
    /// replacements; a struct that is not shared is copied and changed instead.
    pub fn replacing<const N: usize>(
        &self,
        replacements: [(usize, Value); N],
    ) -> Result<Struct, DataError> {
        let fields = self.schema.fields();
        let mut last = None;
        for (i, v) in &replacements {
            let field = fields
                .get(*i)
                .ok_or_else(|| DataError::new(format!("field index {i} is out of range")))?;
            if last.is_some_and(|l| l >= *i) {
                return Err(DataError::new(
                    "replaced fields must be given in increasing index order",
                ));
            }
            last = Some(*i);
            if !v.is_null() {
                validate_value_named(field.name(), field.schema(), v)?;
            }
        }
        let base = match &self.values {
            Values::Shared(base) if N <= MAX_REPLACED_FIELDS => base.clone(),
            _ => {
                let mut copy = self.clone();
                for (i, v) in replacements {
                    copy.values_mut()[i] = v;
                }
                return Ok(copy);
            }
        };
        let mut slots: [(usize, Value); MAX_REPLACED_FIELDS] = Default::default();
        for (slot, r) in slots.iter_mut().zip(replacements) {
            *slot = r;
        }
        Ok(Struct {
            schema: self.schema.clone(),
            values: Values::Replaced(Box::new(Replaced {
                base,
                replacements: slots,
                count: N,
                full: OnceLock::new(),
            })),
        })
    }

    /// For a struct made by [`Struct::replacing`]: the shared values it is based on and the
    /// replacements (`(field index, value)`, in increasing index order).
    pub fn replaced_parts(&self) -> Option<ReplacedParts<'_>> {
        match &self.values {
            Values::Replaced(r) => Some((&r.base, r.replacements())),
            _ => None,
        }
    }

    /// The shared values (`None` for a struct that owns its values), for converters that cache
    /// the serialised form of a struct many records share: while a cache holds a clone of this
    /// `Arc`, the values cannot change.
    pub fn shared_values(&self) -> Option<&Arc<[Value]>> {
        match &self.values {
            Values::Owned(_) | Values::Replaced(_) => None,
            Values::Shared(v) => Some(v),
        }
    }

    /// The values, owned first (copied when shared).
    fn values_mut(&mut self) -> &mut Vec<Value> {
        match &mut self.values {
            Values::Owned(_) => {}
            Values::Shared(v) => self.values = Values::Owned(v.to_vec()),
            Values::Replaced(r) => {
                let full = r.full.take().unwrap_or_else(|| r.to_vec());
                self.values = Values::Owned(full);
            }
        }
        match &mut self.values {
            Values::Owned(v) => v,
            _ => unreachable!("values were just made owned"),
        }
    }

    /// Sets a field by name after checking the value against the field's schema.
    pub fn put(&mut self, field: &str, value: impl Into<Value>) -> Result<&mut Self, DataError> {
        let index = self
            .schema
            .field(field)
            .ok_or_else(|| DataError::new(format!("{field} is not a valid field name")))?
            .index();
        self.put_at(index, value)
    }

    /// Sets a field by position after checking the value against the field's schema.
    pub fn put_at(
        &mut self,
        index: usize,
        value: impl Into<Value>,
    ) -> Result<&mut Self, DataError> {
        let value = value.into();
        let field = self
            .schema
            .fields()
            .get(index)
            .ok_or_else(|| DataError::new(format!("field index {index} is out of range")))?;
        if !value.is_null() {
            validate_value_named(field.name(), field.schema(), &value)?;
        }
        self.values_mut()[index] = value;
        Ok(self)
    }

    /// Builder-style [`Struct::put`] that panics on a bad value; for values the caller built
    /// from the same schema (a programming error otherwise).
    pub fn with(mut self, field: &str, value: impl Into<Value>) -> Self {
        if let Err(e) = self.put(field, value) {
            panic!("{e}");
        }
        self
    }

    /// The value at field position `index` (panics when out of range, as slice indexing does);
    /// unlike [`Struct::values`] it never builds the full value list of a struct with
    /// replaced fields.
    pub fn value_at(&self, index: usize) -> &Value {
        match &self.values {
            Values::Replaced(r) => match r.replacements().iter().find(|(i, _)| *i == index) {
                Some((_, v)) => v,
                None => &r.base[index],
            },
            values => &values.as_slice()[index],
        }
    }

    /// The raw value of a field (null when unset), or `None` for an unknown field name.
    pub fn get(&self, field: &str) -> Option<&Value> {
        let index = self.schema.field(field)?.index();
        Some(self.value_at(index))
    }

    /// The value of a field, or the field schema's default when the value is null.
    pub fn get_or_default(&self, field: &str) -> Option<&Value> {
        let f = self.schema.field(field)?;
        let v = self.value_at(f.index());
        if v.is_null() {
            if let Some(d) = f.schema().default_value() {
                return Some(d);
            }
        }
        Some(v)
    }

    /// Checks that every required field has a value (or a default) and all values are valid.
    pub fn validate(&self) -> Result<(), DataError> {
        for (field, value) in self.schema.fields().iter().zip(self.values()) {
            if value.is_null() && field.schema().default_value().is_some() {
                continue;
            }
            validate_value_named(field.name(), field.schema(), value)?;
        }
        Ok(())
    }
}

impl fmt::Display for Struct {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Struct{")?;
        let mut first = true;
        for (field, value) in self.schema.fields().iter().zip(self.values()) {
            if value.is_null() {
                continue;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            write!(f, "{}={:?}", field.name(), value)?;
        }
        f.write_str("}")
    }
}

/// Checks `value` against `schema` as Kafka Connect's `ConnectSchema.validateValue` does:
/// null only for optional schemas, the variant must match the type, struct values must carry an
/// equal schema, array items and map entries are checked recursively, and the logical types
/// `Decimal` requires its `scale` parameter.
/// A plain JSON rendering of a value (no schema): struct fields and string-keyed maps as
/// objects, other maps as objects with their keys' JSON text, bytes as lowercase hex,
/// non-finite floats as null. For destinations that store nested values as JSON text.
pub fn plain_json(value: &Value) -> serde_json::Value {
    use serde_json::Value as J;
    match value {
        Value::Null => J::Null,
        Value::Boolean(b) => J::Bool(*b),
        Value::Int8(v) => J::from(*v),
        Value::Int16(v) => J::from(*v),
        Value::Int32(v) => J::from(*v),
        Value::Int64(v) => J::from(*v),
        Value::Float32(v) => serde_json::Number::from_f64(f64::from(*v)).map_or(J::Null, J::Number),
        Value::Float64(v) => serde_json::Number::from_f64(*v).map_or(J::Null, J::Number),
        Value::String(s) => J::String(s.clone()),
        Value::Bytes(b) => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            let mut text = String::with_capacity(b.len() * 2);
            for x in b {
                text.push(char::from(HEX[usize::from(x >> 4)]));
                text.push(char::from(HEX[usize::from(x & 15)]));
            }
            J::String(text)
        }
        Value::Array(items) => J::Array(items.iter().map(plain_json).collect()),
        Value::Map(entries) => J::Object(
            entries
                .iter()
                .map(|(k, v)| {
                    let key = match k {
                        Value::String(s) => s.clone(),
                        other => plain_json(other).to_string(),
                    };
                    (key, plain_json(v))
                })
                .collect(),
        ),
        Value::Struct(s) => J::Object(
            s.schema()
                .fields()
                .iter()
                .map(|f| (f.name().to_owned(), plain_json(&s.values()[f.index()])))
                .collect(),
        ),
    }
}

pub fn validate_value(schema: &Schema, value: &Value) -> Result<(), DataError> {
    validate_value_inner(None, schema, value)
}

fn validate_value_named(field: &str, schema: &Schema, value: &Value) -> Result<(), DataError> {
    validate_value_inner(Some(field), schema, value)
}

fn validate_value_inner(
    field: Option<&str>,
    schema: &Schema,
    value: &Value,
) -> Result<(), DataError> {
    let field_desc = || match field {
        Some(f) => format!("field: \"{f}\""),
        None => "value".to_owned(),
    };
    let Some(actual) = value.schema_type() else {
        if schema.is_optional() {
            return Ok(());
        }
        return Err(DataError::new(format!(
            "Invalid value: null used for required {}, schema type: {}",
            field_desc(),
            schema.schema_type()
        )));
    };
    if actual != schema.schema_type() {
        return Err(DataError::new(format!(
            "Invalid Java object for schema with type {}: {} for {}",
            schema.schema_type(),
            actual,
            field_desc()
        )));
    }
    match value {
        Value::Bytes(_) if schema.name() == Some(crate::logical::decimal::LOGICAL_NAME) => {
            crate::logical::decimal::scale(schema).map(|_| ())
        }
        Value::Struct(s) => {
            if !std::ptr::eq(s.schema().as_ref(), schema) && s.schema().as_ref() != schema {
                return Err(DataError::new(format!(
                    "Struct schemas do not match for {}",
                    field_desc()
                )));
            }
            Ok(())
        }
        Value::Array(items) => {
            let item_schema = schema
                .value_schema()
                .ok_or_else(|| DataError::new("array schema without an item schema"))?;
            items
                .iter()
                .try_for_each(|item| validate_value_inner(field, item_schema, item))
        }
        Value::Map(entries) => {
            let (Some(ks), Some(vs)) = (schema.key_schema(), schema.value_schema()) else {
                return Err(DataError::new("map schema without key/value schemas"));
            };
            entries.iter().try_for_each(|(k, v)| {
                validate_value_inner(field, ks, k)?;
                validate_value_inner(field, vs, v)
            })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logical::decimal;
    use crate::schema::SchemaBuilder;

    fn row_schema() -> SchemaRef {
        SchemaBuilder::struct_()
            .name("cdc.public.orders.Value")
            .field("id", Schema::int64())
            .field("amount", decimal::builder(2).build_ref())
            .field("note", Schema::optional_string())
            .field(
                "tags",
                SchemaBuilder::array(Schema::string())
                    .optional()
                    .build_ref(),
            )
            .field(
                "status",
                SchemaBuilder::string()
                    .default_value("new".into())
                    .build_ref(),
            )
            .build_ref()
    }

    #[test]
    fn struct_puts_are_checked_against_field_schemas() {
        let mut s = Struct::new(row_schema()).unwrap();
        assert!(s.put("id", 1i64).is_ok());
        let err = s.put("id", "one").unwrap_err();
        assert!(err.message().contains("INT64"), "{err}");
        assert!(s
            .put("nope", 1i64)
            .unwrap_err()
            .message()
            .contains("not a valid field name"));
        assert!(s.put("tags", Value::Array(vec![Value::Int32(1)])).is_err());
        assert!(s.put("tags", Value::Array(vec!["a".into()])).is_ok());
        // Required amount is still null: validate reports it; status has a default.
        let err = s.validate().unwrap_err();
        assert!(err.message().contains("\"amount\""), "{err}");
        s.put("amount", decimal::unscaled_from_i128(1998)).unwrap();
        s.validate().unwrap();
        assert_eq!(s.get_or_default("status"), Some(&Value::from("new")));
        assert_eq!(s.get("status"), Some(&Value::Null));
    }

    #[test]
    fn nested_struct_schema_must_match() {
        let inner = SchemaBuilder::struct_()
            .field("a", Schema::int32())
            .optional()
            .build_ref();
        let other = SchemaBuilder::struct_()
            .field("b", Schema::int32())
            .optional()
            .build_ref();
        let outer = SchemaBuilder::struct_()
            .field("inner", inner.clone())
            .build_ref();
        let mut s = Struct::new(outer).unwrap();
        let good = Struct::new(inner).unwrap().with("a", 1i32);
        let bad = Struct::new(other).unwrap().with("b", 1i32);
        assert!(s.put("inner", bad).is_err());
        assert!(s.put("inner", good).is_ok());
    }

    #[test]
    fn defaults_and_schema_shapes_are_validated() {
        assert!(SchemaBuilder::int32()
            .default_value(Value::from("x"))
            .try_build()
            .is_err());
        assert!(SchemaBuilder::int32()
            .try_field("f", Schema::int32())
            .is_err());
        assert!(SchemaBuilder::struct_()
            .field("f", Schema::int32())
            .try_field("f", Schema::int64())
            .is_err());
        let decimal_without_scale = SchemaBuilder::bytes().name(decimal::LOGICAL_NAME).build();
        assert!(validate_value(&decimal_without_scale, &Value::Bytes(vec![1])).is_err());
        let map = SchemaBuilder::map(Schema::string(), Schema::int32()).build();
        assert!(validate_value(&map, &Value::Map(vec![("k".into(), Value::Int32(1))])).is_ok());
        assert!(
            validate_value(&map, &Value::Map(vec![(Value::Int32(1), Value::Int32(1))])).is_err()
        );
        assert!(validate_value(&map, &Value::Null).is_err());
        assert!(Struct::new(Schema::int32()).is_err());
    }

    #[test]
    fn replacing_shares_the_base_and_reads_like_a_changed_copy() {
        let base = Struct::new(row_schema())
            .unwrap()
            .with("id", 1i64)
            .with("note", "hello")
            .with("status", "open")
            .into_shared();
        let changed = base
            .replacing([(0, Value::Int64(2)), (2, Value::Null)])
            .unwrap();
        let (shared, replaced) = changed.replaced_parts().unwrap();
        assert!(Arc::ptr_eq(shared, base.shared_values().unwrap()));
        assert_eq!(replaced, &[(0, Value::Int64(2)), (2, Value::Null)][..]);
        let mut expected = base.clone();
        expected
            .put_at(0, 2i64)
            .unwrap()
            .put_at(2, Value::Null)
            .unwrap();
        assert_eq!(changed.values(), expected.values());
        assert_eq!(changed, expected);
        assert_eq!(changed.get("status"), Some(&Value::from("open")));
        assert_eq!(changed.get("id"), Some(&Value::Int64(2)));
        assert_eq!(changed.value_at(2), &Value::Null);
        assert_eq!(changed.clone().into_values(), expected.values().to_vec());
        // The base is unchanged, and changing the result copies it.
        assert_eq!(base.get("id"), Some(&Value::Int64(1)));
        let mut owned = changed.clone();
        owned.put("status", "closed").unwrap();
        assert!(owned.replaced_parts().is_none());
        assert_eq!(owned.get("id"), Some(&Value::Int64(2)));
        assert_eq!(changed.get("status"), Some(&Value::from("open")));
        let reshared = changed.into_shared();
        assert_eq!(reshared.values(), expected.values());
        assert!(reshared.shared_values().is_some());
    }

    #[test]
    fn replacing_checks_values_and_order_and_copies_unshared_structs() {
        let base = Struct::new(row_schema()).unwrap().with("id", 1i64);
        let copy = base.replacing([(0, Value::Int64(5))]).unwrap();
        assert!(copy.replaced_parts().is_none());
        assert_eq!(copy.get("id"), Some(&Value::Int64(5)));
        let shared = base.into_shared();
        assert!(shared.replacing([(0, Value::from("x"))]).is_err());
        assert!(shared.replacing([(9, Value::Null)]).is_err());
        assert!(shared
            .replacing([(2, Value::Null), (0, Value::Int64(1))])
            .is_err());
    }
}
