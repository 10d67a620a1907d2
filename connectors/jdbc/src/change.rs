//! From a sink record to a row change of a destination table: Debezium envelopes (`op`
//! c/r/u -> upsert of `after`, d -> delete by key, t -> truncate), flattened records (a value ->
//! upsert, a tombstone -> delete), the primary key by `primary.key.mode`, the table name by
//! `collection.name.format`, and the fields kept by `field.include.list`/`field.exclude.list`.
//!
//! Invariants:
//! - a row's columns follow the value schema's field order, key columns first when they are
//!   not part of the value; a column whose value is the source's unchanged-TOAST placeholder is
//!   marked `unchanged` so the writers leave the destination's value alone;
//! - a record that cannot become a change (no key where one is needed, a missing source block
//!   for `${source.table}`) is an error that names the record, never a silent skip; records that
//!   carry nothing to write (Debezium's `m` messages, tombstones when deletes are off,
//!   heartbeats without a value) are skipped.

use std::collections::HashMap;
use std::sync::Arc;

use headwater_api::{ConnectError, Schema, SchemaRef, SchemaType, SinkRecord, Struct, Value};

use crate::config::{JdbcSinkConfig, PrimaryKeyMode};

/// A destination column: its name and the Connect schema of its values.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    pub name: String,
    pub schema: SchemaRef,
}

/// The columns of a change and which of them form the primary key.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    pub columns: Vec<Column>,
    /// Indexes into `columns`.
    pub key: Vec<usize>,
}

/// What a change does to its table.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Insert or update the row (`values` aligned with the shape's columns).
    Upsert {
        values: Vec<Value>,
        /// Per column: the source did not send it (unchanged TOAST) and it must not be written.
        unchanged: Vec<bool>,
        /// For the create half of a primary-key change with unchanged columns: the old key's
        /// values as text (from Debezium's `__debezium.oldkey` header), so the writer can take
        /// the unchanged columns from the old row before it is deleted.
        carry_key: Option<Vec<String>>,
    },
    /// Delete the row with these key values (aligned with the shape's key).
    Delete {
        key: Vec<Value>,
    },
    Truncate,
}

/// One row change of one table.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub table: String,
    pub shape: Arc<Shape>,
    pub action: Action,
}

fn field_selected(cfg: &JdbcSinkConfig, topic: &str, field: &str) -> bool {
    let matches = |entry: &String| match entry.split_once(':') {
        Some((t, f)) => t == topic && f == field,
        None => entry == field,
    };
    if !cfg.field_include.is_empty() && !cfg.field_include.iter().any(matches) {
        return false;
    }
    !cfg.field_exclude.iter().any(matches)
}

/// The fields that make a struct value a Debezium envelope here.
pub const ENVELOPE_FIELDS: [&str; 3] = ["op", "after", "source"];

fn is_envelope(schema: &Schema) -> bool {
    schema.schema_type() == SchemaType::Struct
        && ENVELOPE_FIELDS.iter().all(|f| schema.field(f).is_some())
}

/// The destination table of a record.
pub fn table_name(
    cfg: &JdbcSinkConfig,
    record: &SinkRecord,
    source: Option<&Struct>,
) -> Result<String, ConnectError> {
    let mut name = cfg
        .collection_name_format
        .replace("${topic}", &record.topic.replace('.', "_"));
    for (placeholder, field) in [
        ("${source.db}", "db"),
        ("${source.schema}", "schema"),
        ("${source.table}", "table"),
    ] {
        if name.contains(placeholder) {
            let value = source
                .and_then(|s| s.get(field))
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    ConnectError::data(format!(
                        "collection.name.format uses {placeholder}, but the record at {}-{} offset {} has no source.{field}",
                        record.original_topic, record.partition, record.offset
                    ))
                })?;
            name = name.replace(placeholder, value);
        }
    }
    Ok(name)
}

/// Where a column's value comes from.
#[derive(Clone, Copy, Debug)]
enum ValueSource {
    Key(usize),
    Row(usize),
}

/// The shapes of recently seen (row schema, key schema) pairs and how to fill them: records
/// of one table share their schemas (the converter hands out the same schema objects), so a
/// batch builds each shape once and its rows share it.
#[derive(Default)]
pub struct ShapeCache {
    /// Keyed by the schemas' addresses; the entries hold the schemas, so an address is never
    /// reused while cached.
    entries: HashMap<(usize, usize), CachedShape, foldhash::fast::RandomState>,
    /// The last (topic, source db, schema, table) and its destination table.
    last_table: Option<(String, String, String, String, String)>,
}

struct CachedShape {
    _held: (SchemaRef, Option<SchemaRef>),
    shape: Arc<Shape>,
    sources: Vec<ValueSource>,
}

impl ShapeCache {
    /// [`table_name`], remembering the last answer per topic and source table.
    fn table_name(
        &mut self,
        cfg: &JdbcSinkConfig,
        record: &SinkRecord,
        source: Option<&Struct>,
    ) -> Result<String, ConnectError> {
        let field = |f: &str| source.and_then(|s| s.get(f)).and_then(Value::as_str);
        let id = (
            record.topic.as_str(),
            field("db").unwrap_or(""),
            field("schema").unwrap_or(""),
            field("table").unwrap_or(""),
        );
        if let Some((t, db, sc, tb, name)) = &self.last_table {
            if (t.as_str(), db.as_str(), sc.as_str(), tb.as_str()) == id {
                return Ok(name.clone());
            }
        }
        let name = table_name(cfg, record, source)?;
        self.last_table = Some((
            id.0.to_owned(),
            id.1.to_owned(),
            id.2.to_owned(),
            id.3.to_owned(),
            name.clone(),
        ));
        Ok(name)
    }
}

/// At most this many shapes are cached (then the cache starts over).
const SHAPE_CACHE_ENTRIES: usize = 1024;

/// Builds the change a record asks for; `None` when it asks for nothing.
pub fn change_of(
    cfg: &JdbcSinkConfig,
    shapes: &mut ShapeCache,
    record: SinkRecord,
) -> Result<Option<Change>, ConnectError> {
    let where_ =
        |r: &SinkRecord| format!("{}-{} offset {}", r.original_topic, r.partition, r.offset);
    let mut record = record;
    let value = std::mem::take(&mut record.value);
    let tombstone = value.is_null();
    let (row, op, source) = match (value, &record.value_schema) {
        (Value::Null, _) => (None, 'd', None),
        (Value::Struct(v), Some(schema)) if is_envelope(schema) => {
            let field = |name: &str| schema.field(name).map(|f| f.index());
            let (op_i, after_i, source_i) = (field("op"), field("after"), field("source"));
            let mut values = v.into_values();
            let mut take = |i: Option<usize>| i.map(|i| std::mem::take(&mut values[i]));
            let op = match take(op_i) {
                Some(Value::String(s)) => s.chars().next().unwrap_or('?'),
                _ => '?',
            };
            let after = match take(after_i) {
                Some(Value::Struct(a)) => Some(a),
                _ => None,
            };
            let source = match take(source_i) {
                Some(Value::Struct(s)) => Some(s),
                _ => None,
            };
            (after, op, source)
        }
        (Value::Struct(v), _) => (Some(v), 'u', None),
        (other, _) => {
            return Err(ConnectError::data(format!(
                "record at {}: the JDBC sink writes struct values (with schemas), got {}",
                where_(&record),
                kind(&other)
            )))
        }
    };
    match op {
        'c' | 'r' | 'u' | 'd' => {}
        't' => {
            if !cfg.truncate_enabled {
                return Ok(None);
            }
            let table = table_name(cfg, &record, source.as_ref())?;
            return Ok(Some(Change {
                table,
                shape: Arc::new(Shape {
                    columns: Vec::new(),
                    key: Vec::new(),
                }),
                action: Action::Truncate,
            }));
        }
        _ => return Ok(None),
    }
    if op == 'd' {
        if !cfg.delete_enabled {
            return Ok(None);
        }
        if tombstone && source.is_none() && cfg.collection_name_format.contains("${source.") {
            // A tombstone names no source table; the Debezium delete event before it did the
            // delete already.
            return Ok(None);
        }
    }
    let table = shapes.table_name(cfg, &record, source.as_ref())?;
    if op == 'd' {
        let (columns, key) = key_columns(cfg, &record)?;
        let shape = Shape {
            key: (0..columns.len()).collect(),
            columns,
        };
        return Ok(Some(Change {
            table,
            shape: Arc::new(shape),
            action: Action::Delete { key },
        }));
    }
    let Some(row) = row else {
        return Err(ConnectError::data(format!(
            "record at {}: op {op:?} without an after image",
            where_(&record)
        )));
    };
    let key_vals = match cfg.primary_key_mode {
        PrimaryKeyMode::RecordKey | PrimaryKeyMode::Kafka => key_values(cfg, &record)?,
        _ => Vec::new(),
    };
    let row_schema = row.schema().clone();
    let cache_key = (
        Arc::as_ptr(&row_schema) as usize,
        record
            .key_schema
            .as_ref()
            .map_or(0, |k| Arc::as_ptr(k) as usize),
    );
    if !shapes.entries.contains_key(&cache_key) {
        let built = build_shape(cfg, &record, &row_schema)?;
        if shapes.entries.len() >= SHAPE_CACHE_ENTRIES {
            shapes.entries.clear();
        }
        shapes.entries.insert(cache_key, built);
    }
    let cached = &shapes.entries[&cache_key];
    let shape = cached.shape.clone();
    let mut row_values = row.into_values();
    let values: Vec<Value> = cached
        .sources
        .iter()
        .map(|s| match *s {
            ValueSource::Key(i) => key_vals.get(i).cloned().unwrap_or(Value::Null),
            ValueSource::Row(i) => std::mem::take(&mut row_values[i]),
        })
        .collect();
    let unchanged: Vec<bool> = values
        .iter()
        .map(|v| is_placeholder(&cfg.unavailable_placeholder, v))
        .collect();
    let carry_key = if unchanged.iter().any(|u| *u) {
        old_key_text(&record, &shape.columns, &shape.key)
    } else {
        None
    };
    Ok(Some(Change {
        table,
        shape,
        action: Action::Upsert {
            values,
            unchanged,
            carry_key,
        },
    }))
}

/// The columns of a row of `row_schema` (and the record's key), and where each value comes
/// from.
fn build_shape(
    cfg: &JdbcSinkConfig,
    record: &SinkRecord,
    row_schema: &SchemaRef,
) -> Result<CachedShape, ConnectError> {
    let where_ = || {
        format!(
            "{}-{} offset {}",
            record.original_topic, record.partition, record.offset
        )
    };
    let mut columns = Vec::new();
    let mut sources = Vec::new();
    let mut key_idx = Vec::new();
    let key_cols = match cfg.primary_key_mode {
        PrimaryKeyMode::RecordKey | PrimaryKeyMode::Kafka => key_columns(cfg, record)?.0,
        _ => Vec::new(),
    };
    // Key columns the value does not carry come first.
    for (i, c) in key_cols.iter().enumerate() {
        if row_schema.field(&c.name).is_none() {
            key_idx.push(columns.len());
            columns.push(c.clone());
            sources.push(ValueSource::Key(i));
        }
    }
    for f in row_schema.fields() {
        let is_key = key_cols.iter().any(|c| c.name == f.name())
            || (cfg.primary_key_mode == PrimaryKeyMode::RecordValue
                && cfg.primary_key_fields.iter().any(|k| k == f.name()));
        if !is_key && !field_selected(cfg, &record.topic, f.name()) {
            continue;
        }
        if is_key {
            key_idx.push(columns.len());
        }
        columns.push(Column {
            name: f.name().to_owned(),
            schema: f.schema().clone(),
        });
        sources.push(ValueSource::Row(f.index()));
    }
    if cfg.primary_key_mode == PrimaryKeyMode::RecordValue {
        for k in &cfg.primary_key_fields {
            if !columns.iter().any(|c| &c.name == k) {
                return Err(ConnectError::data(format!(
                    "record at {}: primary.key.fields names {k:?}, which the value does not have",
                    where_()
                )));
            }
        }
        // Key order as configured.
        key_idx = cfg
            .primary_key_fields
            .iter()
            .filter_map(|k| columns.iter().position(|c| &c.name == k))
            .collect();
    }
    Ok(CachedShape {
        _held: (row_schema.clone(), record.key_schema.clone()),
        shape: Arc::new(Shape {
            columns,
            key: key_idx,
        }),
        sources,
    })
}

/// The header Debezium puts on the create half of a primary-key change.
pub const OLDKEY_HEADER: &str = "__debezium.oldkey";

/// The old key of a primary-key change as text per key column, from the `__debezium.oldkey`
/// header (a struct, or its JSON text as the header converter wrote it).
fn old_key_text(record: &SinkRecord, columns: &[Column], key_idx: &[usize]) -> Option<Vec<String>> {
    let header = record.headers.last_with_name(OLDKEY_HEADER)?;
    let json: serde_json::Value = match &header.value {
        Value::String(s) => serde_json::from_str(s).ok()?,
        Value::Struct(st) => serde_json::Value::Object(
            st.schema()
                .fields()
                .iter()
                .map(|f| {
                    let v = match &st.values()[f.index()] {
                        Value::Int8(x) => serde_json::Value::from(*x),
                        Value::Int16(x) => serde_json::Value::from(*x),
                        Value::Int32(x) => serde_json::Value::from(*x),
                        Value::Int64(x) => serde_json::Value::from(*x),
                        Value::String(x) => serde_json::Value::from(x.clone()),
                        Value::Boolean(x) => serde_json::Value::from(*x),
                        _ => serde_json::Value::Null,
                    };
                    (f.name().to_owned(), v)
                })
                .collect(),
        ),
        _ => return None,
    };
    key_idx
        .iter()
        .map(|&i| match json.get(&columns[i].name)? {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Null => None,
            other => Some(other.to_string()),
        })
        .collect()
}

/// Whether a value is (or, for arrays, consists of) the unchanged-TOAST placeholder.
pub fn is_placeholder(placeholder: &str, value: &Value) -> bool {
    match value {
        Value::String(s) => s == placeholder,
        Value::Bytes(b) => b == placeholder.as_bytes(),
        Value::Array(items) => {
            !items.is_empty() && items.iter().all(|i| is_placeholder(placeholder, i))
        }
        _ => false,
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Boolean(_) => "a boolean",
        Value::Int8(_) | Value::Int16(_) | Value::Int32(_) | Value::Int64(_) => "an integer",
        Value::Float32(_) | Value::Float64(_) => "a float",
        Value::String(_) => "a string",
        Value::Bytes(_) => "bytes",
        Value::Array(_) => "an array",
        Value::Map(_) => "a map",
        Value::Struct(_) => "a struct",
    }
}

/// The key values of a record (`record_key` or `kafka` mode), as [`key_columns`] gives them.
fn key_values(cfg: &JdbcSinkConfig, record: &SinkRecord) -> Result<Vec<Value>, ConnectError> {
    match (&cfg.primary_key_mode, &record.key) {
        (PrimaryKeyMode::RecordKey, Value::Struct(k)) if cfg.primary_key_fields.is_empty() => {
            Ok(k.values().to_vec())
        }
        _ => Ok(key_columns(cfg, record)?.1),
    }
}

/// The key columns and values of a record (`record_key` or `kafka` mode).
fn key_columns(
    cfg: &JdbcSinkConfig,
    record: &SinkRecord,
) -> Result<(Vec<Column>, Vec<Value>), ConnectError> {
    let where_ = || {
        format!(
            "{}-{} offset {}",
            record.original_topic, record.partition, record.offset
        )
    };
    match cfg.primary_key_mode {
        PrimaryKeyMode::Kafka => Ok((
            vec![
                Column {
                    name: "__connect_topic".into(),
                    schema: Schema::string(),
                },
                Column {
                    name: "__connect_partition".into(),
                    schema: Schema::int32(),
                },
                Column {
                    name: "__connect_offset".into(),
                    schema: Schema::int64(),
                },
            ],
            vec![
                Value::String(record.topic.clone()),
                Value::Int32(record.partition as i32),
                Value::Int64(record.offset),
            ],
        )),
        PrimaryKeyMode::RecordKey => match (&record.key, &record.key_schema) {
            (Value::Struct(k), _) => {
                let mut cols = Vec::new();
                let mut vals = Vec::new();
                for f in k.schema().fields() {
                    if !cfg.primary_key_fields.is_empty()
                        && !cfg.primary_key_fields.iter().any(|x| x == f.name())
                    {
                        continue;
                    }
                    cols.push(Column {
                        name: f.name().to_owned(),
                        schema: f.schema().clone(),
                    });
                    vals.push(k.values()[f.index()].clone());
                }
                if cols.is_empty() {
                    return Err(ConnectError::data(format!(
                        "record at {}: primary.key.mode=record_key, but the key has no (selected) fields",
                        where_()
                    )));
                }
                Ok((cols, vals))
            }
            (Value::Null, _) => Err(ConnectError::data(format!(
                "record at {}: primary.key.mode=record_key, but the record has no key (a table without primary key at the source?)",
                where_()
            ))),
            (primitive, schema) => {
                let name = cfg.primary_key_fields.first().ok_or_else(|| {
                    ConnectError::data(format!(
                        "record at {}: a primitive key needs its column name in primary.key.fields",
                        where_()
                    ))
                })?;
                let schema = schema.clone().unwrap_or_else(Schema::string);
                Ok((
                    vec![Column {
                        name: name.clone(),
                        schema,
                    }],
                    vec![primitive.clone()],
                ))
            }
        },
        PrimaryKeyMode::RecordValue | PrimaryKeyMode::None => Err(ConnectError::data(format!(
            "record at {}: deletes need primary.key.mode=record_key",
            where_()
        ))),
    }
}
