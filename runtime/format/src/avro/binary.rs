//! Avro binary encoding of Connect values, walking the [`Node`] tree of the Avro schema beside
//! the Connect schema (no intermediate Avro value is built, nothing is allocated per field).
//!
//! Invariants:
//! - ints and longs are zig-zag varints, floats and doubles little-endian IEEE 754, bytes and
//!   strings a length then the bytes, arrays and maps one block of `count` items then a zero
//!   (empty ones just the zero), a union its branch index then the branch;
//! - a null field with a default value is written as the default (Kafka Connect's `Struct.get`
//!   semantics, which AvroData serialises);
//! - decoding never reads past its input and reports truncated or malformed data as a
//!   [`DataError`], never panics; negative block counts (with a byte size, allowed by the Avro
//!   spec) are read; lengths are checked against the remaining input before allocating.

use std::sync::Arc;

use headwater_api::{DataError, Schema, SchemaRef, SchemaType, Struct, Value};

use super::schema::{Node, UNION_NAME};

fn write_long(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn write_bytes(out: &mut Vec<u8>, b: &[u8]) {
    write_long(out, b.len() as i64);
    out.extend_from_slice(b);
}

fn mismatch(node: &Node, value: &Value) -> DataError {
    DataError::new(format!(
        "cannot write a {} value as Avro {node:?}",
        value.schema_type().map_or("null", |t| t.json_name())
    ))
}

/// Appends the Avro binary form of `value` (of Connect schema `schema`) to `out`.
pub fn encode(
    node: &Node,
    schema: &Schema,
    value: &Value,
    out: &mut Vec<u8>,
) -> Result<(), DataError> {
    let value = match (value, schema.default_value()) {
        (Value::Null, Some(default)) => default,
        _ => value,
    };
    match node {
        Node::Union(branches) => encode_union(branches, schema, value, out),
        Node::Null => match value {
            Value::Null => Ok(()),
            other => Err(mismatch(node, other)),
        },
        Node::Boolean => match value {
            Value::Boolean(b) => {
                out.push(u8::from(*b));
                Ok(())
            }
            other => Err(mismatch(node, other)),
        },
        Node::Int => {
            let v = match value {
                Value::Int8(v) => i64::from(*v),
                Value::Int16(v) => i64::from(*v),
                Value::Int32(v) => i64::from(*v),
                other => return Err(mismatch(node, other)),
            };
            write_long(out, v);
            Ok(())
        }
        Node::Long => match value {
            Value::Int64(v) => {
                write_long(out, *v);
                Ok(())
            }
            other => Err(mismatch(node, other)),
        },
        Node::Float => match value {
            Value::Float32(v) => {
                out.extend_from_slice(&v.to_le_bytes());
                Ok(())
            }
            other => Err(mismatch(node, other)),
        },
        Node::Double => match value {
            Value::Float64(v) => {
                out.extend_from_slice(&v.to_le_bytes());
                Ok(())
            }
            other => Err(mismatch(node, other)),
        },
        Node::Bytes => match value {
            Value::Bytes(b) => {
                write_bytes(out, b);
                Ok(())
            }
            other => Err(mismatch(node, other)),
        },
        Node::String => match value {
            Value::String(s) => {
                write_bytes(out, s.as_bytes());
                Ok(())
            }
            other => Err(mismatch(node, other)),
        },
        Node::Fixed(size) => match value {
            Value::Bytes(b) if b.len() == *size => {
                out.extend_from_slice(b);
                Ok(())
            }
            Value::Bytes(b) => Err(DataError::new(format!(
                "{} bytes for an Avro fixed of size {size}",
                b.len()
            ))),
            other => Err(mismatch(node, other)),
        },
        Node::Enum(symbols) => match value {
            Value::String(s) => {
                let i = symbols.iter().position(|x| x == s).ok_or_else(|| {
                    DataError::new(format!(
                        "{s:?} is not a symbol of the Avro enum {symbols:?}"
                    ))
                })?;
                write_long(out, i as i64);
                Ok(())
            }
            other => Err(mismatch(node, other)),
        },
        Node::Array(items) => match value {
            Value::Array(values) => {
                let item_schema = schema
                    .value_schema()
                    .ok_or_else(|| DataError::new("array schema without an item schema"))?;
                if !values.is_empty() {
                    write_long(out, values.len() as i64);
                    for v in values {
                        encode(items, item_schema, v, out)?;
                    }
                }
                out.push(0);
                Ok(())
            }
            other => Err(mismatch(node, other)),
        },
        Node::Map(values_node) => match value {
            Value::Map(entries) => {
                let value_schema = schema
                    .value_schema()
                    .ok_or_else(|| DataError::new("map schema without a value schema"))?;
                if !entries.is_empty() {
                    write_long(out, entries.len() as i64);
                    for (k, v) in entries {
                        let Value::String(k) = k else {
                            return Err(DataError::new("an Avro map needs string keys"));
                        };
                        write_bytes(out, k.as_bytes());
                        encode(values_node, value_schema, v, out)?;
                    }
                }
                out.push(0);
                Ok(())
            }
            other => Err(mismatch(node, other)),
        },
        Node::MapEntries(kv) => match value {
            Value::Map(entries) => {
                let (Some(ks), Some(vs)) = (schema.key_schema(), schema.value_schema()) else {
                    return Err(DataError::new("map schema without key and value schemas"));
                };
                if !entries.is_empty() {
                    write_long(out, entries.len() as i64);
                    for (k, v) in entries {
                        encode(&kv.0, ks, k, out)?;
                        encode(&kv.1, vs, v, out)?;
                    }
                }
                out.push(0);
                Ok(())
            }
            other => Err(mismatch(node, other)),
        },
        Node::Record(fields) => match value {
            Value::Struct(s) => {
                let schema_fields = schema.fields();
                if schema_fields.len() != fields.len() {
                    return Err(DataError::new(format!(
                        "struct of {} fields for an Avro record of {}",
                        schema_fields.len(),
                        fields.len()
                    )));
                }
                for ((f, n), v) in schema_fields.iter().zip(fields.iter()).zip(s.values()) {
                    encode(n, f.schema(), v, out).map_err(|e| {
                        DataError::new(format!("field {}: {}", f.name(), e.message()))
                    })?;
                }
                Ok(())
            }
            other => Err(mismatch(node, other)),
        },
    }
}

fn encode_union(
    branches: &[Node],
    schema: &Schema,
    value: &Value,
    out: &mut Vec<u8>,
) -> Result<(), DataError> {
    if value.is_null() {
        let i = Node::null_branch(branches).ok_or_else(|| {
            DataError::new("null value for a required field (the Avro union has no null branch)")
        })?;
        write_long(out, i as i64);
        return Ok(());
    }
    if schema.schema_type() == SchemaType::Struct && schema.name() == Some(UNION_NAME) {
        // A general union read from a foreign schema: the one set field picks the branch.
        let Value::Struct(s) = value else {
            return Err(DataError::new("a Union schema needs a struct value"));
        };
        let (field_index, v) = s
            .values()
            .iter()
            .enumerate()
            .find(|(_, v)| !v.is_null())
            .ok_or_else(|| DataError::new("a Union struct with no field set"))?;
        let branch = branches
            .iter()
            .enumerate()
            .filter(|(_, b)| !matches!(b, Node::Null))
            .nth(field_index)
            .map(|(i, _)| i)
            .ok_or_else(|| DataError::new("a Union struct with more fields than branches"))?;
        write_long(out, branch as i64);
        return encode(
            &branches[branch],
            schema.fields()[field_index].schema(),
            v,
            out,
        );
    }
    let branch = branches
        .iter()
        .position(|b| !matches!(b, Node::Null))
        .ok_or_else(|| DataError::new("an Avro union of only null"))?;
    write_long(out, branch as i64);
    encode(&branches[branch], schema, value, out)
}

/// Reads Avro binary data.
pub struct Reader<'a> {
    input: &'a [u8],
}

fn truncated() -> DataError {
    DataError::new("truncated Avro data")
}

impl<'a> Reader<'a> {
    pub fn new(input: &'a [u8]) -> Self {
        Reader { input }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.input.len()
    }

    fn long(&mut self) -> Result<i64, DataError> {
        let mut z: u64 = 0;
        let mut shift = 0;
        loop {
            let (&b, rest) = self.input.split_first().ok_or_else(truncated)?;
            self.input = rest;
            if shift >= 64 {
                return Err(DataError::new("an Avro varint longer than 10 bytes"));
            }
            z |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
        }
        Ok(((z >> 1) as i64) ^ -((z & 1) as i64))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DataError> {
        if n > self.input.len() {
            return Err(truncated());
        }
        let (head, rest) = self.input.split_at(n);
        self.input = rest;
        Ok(head)
    }

    fn len(&mut self) -> Result<usize, DataError> {
        let n = self.long()?;
        if n < 0 || n as u64 > self.input.len() as u64 {
            return Err(DataError::new(format!("invalid Avro length {n}")));
        }
        Ok(n as usize)
    }

    fn bytes(&mut self) -> Result<&'a [u8], DataError> {
        let n = self.len()?;
        self.take(n)
    }

    /// The item count of the next array/map block (0 ends the array/map).
    fn block_count(&mut self) -> Result<usize, DataError> {
        let n = self.long()?;
        if n < 0 {
            // Negative: the count is -n and a byte size follows.
            let _size = self.long()?;
            return Ok(n.unsigned_abs() as usize);
        }
        Ok(n as usize)
    }

    /// The items of an array or map: blocks of `count` items until a zero count.
    fn blocks<T>(
        &mut self,
        mut item: impl FnMut(&mut Self) -> Result<T, DataError>,
    ) -> Result<Vec<T>, DataError> {
        let mut out = Vec::new();
        loop {
            let n = self.block_count()?;
            if n == 0 {
                return Ok(out);
            }
            // Every item takes at least one byte of input, except empty records; don't let
            // a forged count reserve more than the input could hold.
            out.reserve(n.min(self.remaining()));
            for _ in 0..n {
                out.push(item(self)?);
            }
        }
    }

    /// Reads one value of `node` as Connect schema `schema`.
    pub fn value(&mut self, node: &Node, schema: &SchemaRef) -> Result<Value, DataError> {
        Ok(match node {
            Node::Null => Value::Null,
            Node::Boolean => {
                let b = self.take(1)?[0];
                Value::Boolean(b != 0)
            }
            Node::Int => {
                let v = self.long()?;
                let v32 = i32::try_from(v).map_err(|_| DataError::new("Avro int out of range"))?;
                match schema.schema_type() {
                    SchemaType::Int8 => Value::Int8(
                        i8::try_from(v32).map_err(|_| DataError::new("int8 out of range"))?,
                    ),
                    SchemaType::Int16 => Value::Int16(
                        i16::try_from(v32).map_err(|_| DataError::new("int16 out of range"))?,
                    ),
                    _ => Value::Int32(v32),
                }
            }
            Node::Long => Value::Int64(self.long()?),
            Node::Float => {
                let b = self.take(4)?;
                Value::Float32(f32::from_le_bytes(b.try_into().expect("4 bytes")))
            }
            Node::Double => {
                let b = self.take(8)?;
                Value::Float64(f64::from_le_bytes(b.try_into().expect("8 bytes")))
            }
            Node::Bytes => Value::Bytes(self.bytes()?.to_vec()),
            Node::String => {
                let b = self.bytes()?;
                Value::String(
                    std::str::from_utf8(b)
                        .map_err(|_| DataError::new("an Avro string that is not UTF-8"))?
                        .to_owned(),
                )
            }
            Node::Fixed(size) => Value::Bytes(self.take(*size)?.to_vec()),
            Node::Enum(symbols) => {
                let i = self.long()?;
                let s = usize::try_from(i)
                    .ok()
                    .and_then(|i| symbols.get(i))
                    .ok_or_else(|| DataError::new(format!("Avro enum index {i} out of range")))?;
                Value::String(s.clone())
            }
            Node::Array(items) => {
                let item_schema = schema
                    .value_schema()
                    .ok_or_else(|| DataError::new("array schema without an item schema"))?;
                Value::Array(self.blocks(|r| r.value(items, item_schema))?)
            }
            Node::Map(values) => {
                let value_schema = schema
                    .value_schema()
                    .ok_or_else(|| DataError::new("map schema without a value schema"))?;
                Value::Map(self.blocks(|r| {
                    let k = std::str::from_utf8(r.bytes()?)
                        .map_err(|_| DataError::new("an Avro map key that is not UTF-8"))?;
                    Ok((Value::String(k.to_owned()), r.value(values, value_schema)?))
                })?)
            }
            Node::MapEntries(kv) => {
                let (Some(ks), Some(vs)) = (schema.key_schema(), schema.value_schema()) else {
                    return Err(DataError::new("map schema without key and value schemas"));
                };
                Value::Map(self.blocks(|r| Ok((r.value(&kv.0, ks)?, r.value(&kv.1, vs)?)))?)
            }
            Node::Record(fields) => {
                let schema_fields = schema.fields();
                if schema_fields.len() != fields.len() {
                    return Err(DataError::new("record and struct schema differ in fields"));
                }
                let mut values = Vec::with_capacity(fields.len());
                for (f, n) in schema_fields.iter().zip(fields.iter()) {
                    values.push(self.value(n, f.schema())?);
                }
                // Each value was read for its own field's schema just above.
                Value::Struct(Struct::from_trusted_values(schema.clone(), values))
            }
            Node::Union(branches) => {
                let i = self.long()?;
                let branch = usize::try_from(i)
                    .ok()
                    .and_then(|i| branches.get(i))
                    .ok_or_else(|| DataError::new(format!("Avro union index {i} out of range")))?;
                if matches!(branch, Node::Null) {
                    return Ok(Value::Null);
                }
                if schema.schema_type() == SchemaType::Struct && schema.name() == Some(UNION_NAME) {
                    let non_null_index = branches[..i as usize]
                        .iter()
                        .filter(|b| !matches!(b, Node::Null))
                        .count();
                    let fields = schema.fields();
                    let field = fields
                        .get(non_null_index)
                        .ok_or_else(|| DataError::new("Union struct without that branch"))?;
                    let v = self.value(branch, field.schema())?;
                    let mut values = vec![Value::Null; fields.len()];
                    values[non_null_index] = v;
                    return Ok(Value::Struct(Struct::from_trusted_values(
                        Arc::clone(schema),
                        values,
                    )));
                }
                self.value(branch, schema)?
            }
        })
    }
}

/// Decodes one whole Avro datum; trailing bytes are an error.
pub fn decode(node: &Node, schema: &SchemaRef, input: &[u8]) -> Result<Value, DataError> {
    let mut r = Reader::new(input);
    let v = r.value(node, schema)?;
    if r.remaining() != 0 {
        return Err(DataError::new(format!(
            "{} bytes left after the Avro datum",
            r.remaining()
        )));
    }
    Ok(v)
}
