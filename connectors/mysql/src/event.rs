//! Debezium's change events for MySQL/MariaDB: per-table key/row/envelope schemas, the
//! `source` block (`io.debezium.connector.mysql.Source` or `…mariadb.Source`) and the records
//! for each operation (`r`, `c`, `u`, `d`, `t`, tombstones, primary-key changes).
//!
//! Invariants:
//! - a [`TableSchema`] is built once per table version and its `SchemaRef`s are shared by all
//!   records of that version (converters cache serialised schemas by `Arc` identity);
//! - every value put into a struct was converted for exactly that field's schema, and required
//!   fields never stay null (Debezium's fallback values fill them).

use headwater_api::logical::debezium;
use headwater_api::{OffsetMap, Schema, SchemaBuilder, SchemaRef, SourceRecord, Struct, Value};

use crate::config::Flavor;
use crate::types::{self, ColumnSpec, MappingConfig, MyType, Origin, TypeError};
use headwater_connector_common::column_mappers::{
    ColumnFacts, ColumnKind, ColumnMappers, MappedColumn,
};
use headwater_connector_common::context_headers::ContextHeaders;
use headwater_connector_common::name_adjust::NameAdjustments;

/// `db.table`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableId {
    pub db: String,
    pub table: String,
}

impl std::fmt::Display for TableId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.db, self.table)
    }
}

/// Schemas of one table version. `columns[i]` is the table's i-th column; `fields[i]` is its
/// index in the row struct, or `None` when the column is filtered out.
#[derive(Clone, Debug)]
pub struct TableSchema {
    pub id: TableId,
    pub topic: String,
    pub columns: Vec<ColumnSpec>,
    pub fields: Vec<Option<usize>>,
    pub field_schemas: Vec<SchemaRef>,
    /// Indexes into the row struct of the key fields, in key order.
    pub key_fields: Vec<usize>,
    pub key_schema: Option<SchemaRef>,
    pub row_schema: SchemaRef,
    pub envelope_schema: SchemaRef,
    /// Per row field, the column mapper (`column.truncate.*`, `column.mask.*`) of its values
    /// in change events' row images; empty when no column has one.
    pub mapped: Vec<Option<MappedColumn>>,
}

/// Replaces characters Kafka does not allow in topic names with `_` (as Debezium does).
pub fn sanitize_topic(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The source block schema (version 1).
pub fn source_schema(flavor: Flavor) -> SchemaRef {
    let opt_i64 = Schema::optional_int64;
    SchemaBuilder::struct_()
        .name(flavor.source_schema_name())
        .version(1)
        .field("version", Schema::string())
        .field("connector", Schema::string())
        .field("name", Schema::string())
        .field("ts_ms", Schema::int64())
        .field(
            "snapshot",
            debezium::enum_builder(&[
                "true",
                "first",
                "first_in_data_collection",
                "last_in_data_collection",
                "last",
                "false",
                "incremental",
            ])
            .optional()
            .default_value(Value::String("false".into()))
            .build_ref(),
        )
        .field("db", Schema::string())
        .field("sequence", Schema::optional_string())
        .field("ts_us", opt_i64())
        .field("ts_ns", opt_i64())
        .field("table", Schema::optional_string())
        .field("server_id", Schema::int64())
        .field("gtid", Schema::optional_string())
        .field("file", Schema::string())
        .field("pos", Schema::int64())
        .field("row", Schema::int32())
        .field("thread", opt_i64())
        .field("query", Schema::optional_string())
        .build_ref()
}

/// Debezium's `event.block` transaction schema.
pub fn transaction_schema() -> SchemaRef {
    headwater_connector_common::txmeta::block_schema()
}

/// A failure building a schema or an event.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error("table {table}, column {column}: {source}")]
    Value {
        table: String,
        column: String,
        #[source]
        source: TypeError,
    },
    #[error("table {table}: {detail}")]
    Schema { table: String, detail: String },
}

impl TableSchema {
    /// Builds the schemas of a table version. `key_columns` names the key fields (primary key
    /// or `message.key.columns`); `included(column)` applies the column filters.
    #[allow(clippy::too_many_arguments)]
    pub fn build(
        id: TableId,
        topic_prefix: &str,
        columns: Vec<ColumnSpec>,
        key_columns: &[String],
        mapping: &MappingConfig,
        source: &SchemaRef,
        mappers: &ColumnMappers,
        adjust: NameAdjustments,
        included: impl Fn(&str) -> bool,
    ) -> Result<TableSchema, EventError> {
        let topic = sanitize_topic(&format!("{topic_prefix}.{}.{}", id.db, id.table));
        let schema_err = |detail: String| EventError::Schema {
            table: id.to_string(),
            detail,
        };
        let mut row = SchemaBuilder::struct_()
            .name(adjust.schema.schema_name(&format!("{topic}.Value")))
            .optional();
        let mut fields = Vec::with_capacity(columns.len());
        let mut field_schemas = Vec::new();
        let mut column_names = Vec::new();
        let mut mapped = Vec::new();
        let table_name = id.to_string();
        for c in &columns {
            if !included(&c.name) {
                fields.push(None);
                continue;
            }
            let mut b = types::column_schema(c, mapping);
            if c.optional {
                b = b.optional();
            }
            if let Some(d) = &c.default {
                b = b.default_value(d.clone());
            }
            let mapper = if mappers.is_empty() {
                None
            } else {
                let kind = match c.ty {
                    MyType::Text(_) | MyType::Enum(_) | MyType::Set(_) => ColumnKind::Characters,
                    MyType::Binary { .. } => ColumnKind::Bytes,
                    _ => ColumnKind::Other,
                };
                // Debezium's DDL reader gives ENUM a length of 1 and SET one of 2n-1.
                let length = match &c.ty {
                    MyType::Enum(_) => Some(1),
                    MyType::Set(options) => Some((2 * options.len()).saturating_sub(1)),
                    _ => c.length,
                };
                let fallback;
                let source_type = match &c.source_type {
                    Some(t) => t.as_ref(),
                    None => {
                        fallback = crate::source_type::from_spec(c);
                        &fallback
                    }
                };
                mappers.for_column(&ColumnFacts {
                    table: &table_name,
                    column: &c.name,
                    kind,
                    length,
                    type_name: &source_type.name,
                    type_length: source_type.length,
                    type_scale: source_type.scale,
                })
            };
            let schema = b.clone().build_ref();
            // Keys keep the plain field schema; the row's gets the mapper's parameter.
            let row_field = match mapper.as_ref().map(MappedColumn::schema_parameters) {
                Some(parameters) if !parameters.is_empty() => parameters
                    .iter()
                    .fold(b, |b, (k, v)| b.parameter(*k, v.as_str()))
                    .build_ref(),
                _ => schema.clone(),
            };
            mapped.push(mapper);
            row = row
                .try_field(adjust.field.field_name(&c.name), row_field)
                .map_err(|e| schema_err(e.message().to_owned()))?;
            fields.push(Some(field_schemas.len()));
            field_schemas.push(schema);
            column_names.push(c.name.clone());
        }
        let row_schema = row.build_ref();
        let mut key_fields = Vec::new();
        for k in key_columns {
            match column_names.iter().position(|n| n == k) {
                Some(i) => key_fields.push(i),
                None => {
                    return Err(schema_err(format!(
                        "key column {k} is not a captured column"
                    )))
                }
            }
        }
        let key_schema = if key_fields.is_empty() {
            None
        } else {
            let mut kb =
                SchemaBuilder::struct_().name(adjust.schema.schema_name(&format!("{topic}.Key")));
            for &i in &key_fields {
                kb = kb
                    .try_field(
                        adjust.field.field_name(&column_names[i]),
                        field_schemas[i].clone(),
                    )
                    .map_err(|e| schema_err(e.message().to_owned()))?;
            }
            Some(kb.build_ref())
        };
        let envelope_schema = SchemaBuilder::struct_()
            .name(adjust.schema.schema_name(&format!("{topic}.Envelope")))
            .version(2)
            .field("before", row_schema.clone())
            .field("after", row_schema.clone())
            .field("source", source.clone())
            .field("transaction", transaction_schema())
            .field("op", Schema::string())
            .field("ts_ms", Schema::optional_int64())
            .field("ts_us", Schema::optional_int64())
            .field("ts_ns", Schema::optional_int64())
            .build_ref();
        Ok(TableSchema {
            id,
            topic,
            columns,
            fields,
            field_schemas,
            key_fields,
            key_schema,
            row_schema,
            envelope_schema,
            mapped: if mapped.iter().any(Option::is_some) {
                mapped
            } else {
                Vec::new()
            },
        })
    }

    /// A row image as change events carry it: each field with a mapper mapped (keys are
    /// built from the unmapped row, as in Debezium).
    pub fn map_row(&self, row: Struct) -> Struct {
        if self.mapped.is_empty() {
            return row;
        }
        let mut values = row.into_values();
        for (m, v) in self.mapped.iter().zip(values.iter_mut()) {
            let Some(m) = m else {
                continue;
            };
            *v = match std::mem::replace(v, Value::Null) {
                Value::String(s) => Value::String(m.map_text(Some(&s)).unwrap_or_default()),
                Value::Bytes(mut b) => {
                    let kept = m.map_bytes(&b).len();
                    b.truncate(kept);
                    Value::Bytes(b)
                }
                Value::Null => m.map_text(None).map_or(Value::Null, Value::String),
                other => other,
            };
        }
        Struct::from_trusted_values(self.row_schema.clone(), values)
    }

    /// Builds a row struct from one raw value per table column (in table order).
    pub fn row(
        &self,
        mapping: &MappingConfig,
        origin: Origin,
        values: impl IntoIterator<Item = mysql_async::Value>,
    ) -> Result<Struct, EventError> {
        let schema_err = |detail: String| EventError::Schema {
            table: self.id.to_string(),
            detail,
        };
        // Values are converted for their field's schema (`types::convert` with the column's
        // spec), so the struct is built without re-checking them.
        let mut row = vec![Value::Null; self.field_schemas.len()];
        let mut n = 0;
        for (i, raw) in values.into_iter().enumerate() {
            n += 1;
            let Some(col) = self.columns.get(i) else {
                return Err(schema_err(format!(
                    "the row image has more columns than the table ({})",
                    self.columns.len()
                )));
            };
            let Some(fi) = self.fields[i] else { continue };
            let v =
                types::convert(col, raw, origin, mapping).map_err(|source| EventError::Value {
                    table: self.id.to_string(),
                    column: col.name.clone(),
                    source,
                })?;
            let v = if v.is_null() && !self.field_schemas[fi].is_optional() {
                types::fallback_value(&self.field_schemas[fi])
            } else {
                v
            };
            row[fi] = v;
        }
        if n != self.columns.len() {
            return Err(schema_err(format!(
                "the row image has {n} columns, the table {}",
                self.columns.len()
            )));
        }
        Ok(Struct::from_trusted_values(self.row_schema.clone(), row))
    }

    /// The key struct of a row (`None` without key fields).
    pub fn key_of(&self, row: &Struct) -> Option<Value> {
        let schema = self.key_schema.as_ref()?;
        // The key's fields are the row's own key fields, with their schemas.
        let values = self
            .key_fields
            .iter()
            .map(|&ci| row.values()[ci].clone())
            .collect();
        Some(Value::Struct(Struct::from_trusted_values(
            schema.clone(),
            values,
        )))
    }
}

/// What the `source` block says about one event.
#[derive(Clone, Debug, Default)]
pub struct SourceInfo {
    /// Commit (or snapshot) time, seconds since 1970 (the binlog has second precision).
    pub ts_sec: i64,
    /// `snapshot` marker (`None` while streaming: the schema default "false" applies).
    pub snapshot: Option<&'static str>,
    pub server_id: i64,
    pub gtid: Option<String>,
    pub file: String,
    pub pos: i64,
    pub row: i32,
}

/// Builds records for one connector.
#[derive(Clone, Debug)]
pub struct EventBuilder {
    pub flavor: Flavor,
    pub source_schema: SchemaRef,
    pub server_name: String,
    pub partition: OffsetMap,
    /// Debezium's context headers, on every record [`EventBuilder::record`] makes and on
    /// schema-change records.
    pub context: ContextHeaders,
}

/// Current time in µs and ns since 1970.
pub fn now_micros_nanos() -> (i64, i64) {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_micros() as i64, d.as_nanos() as i64)
}

impl EventBuilder {
    pub fn new(flavor: Flavor, server_name: &str) -> Self {
        let mut partition = OffsetMap::new();
        partition.insert("server".into(), server_name.into());
        EventBuilder {
            flavor,
            source_schema: source_schema(flavor),
            server_name: server_name.to_owned(),
            partition,
            context: ContextHeaders::disabled(),
        }
    }

    /// The source block of an event on `table` (`None` for database-level DDL).
    /// Index of `row` in the source block.
    pub const SOURCE_ROW: usize = 14;

    /// A copy of `block` (the source block of another row of the same rows event) for row
    /// `row` of the event.
    pub fn source_for_row(block: &Struct, row: i32) -> Struct {
        let mut s = block.clone();
        // An int32 matches the `row` field by construction.
        let _ = s.put_at(Self::SOURCE_ROW, Value::Int32(row));
        s
    }

    pub fn source(&self, db: &str, table: Option<&str>, info: &SourceInfo) -> Struct {
        let mut s = Struct::new(self.source_schema.clone()).expect("source schema is a struct");
        let ms = info.ts_sec.saturating_mul(1000);
        let vals: [Value; 17] = [
            Value::String(crate::CONNECTOR_VERSION.into()),
            Value::String(self.flavor.connector_name().into()),
            Value::String(self.server_name.clone()),
            Value::Int64(ms),
            info.snapshot
                .map_or(Value::Null, |s| Value::String(s.into())),
            Value::String(db.to_owned()),
            Value::Null,
            Value::Int64(ms.saturating_mul(1000)),
            Value::Int64(ms.saturating_mul(1_000_000)),
            table.map_or(Value::Null, |t| Value::String(t.to_owned())),
            Value::Int64(info.server_id),
            info.gtid.clone().map_or(Value::Null, Value::String),
            Value::String(info.file.clone()),
            Value::Int64(info.pos),
            Value::Int32(info.row),
            Value::Null,
            Value::Null,
        ];
        for (i, v) in vals.into_iter().enumerate() {
            // Every value matches its field by construction.
            let _ = s.put_at(i, v);
        }
        s
    }

    /// An envelope value.
    pub fn envelope(
        &self,
        ts: &TableSchema,
        before: Option<Struct>,
        after: Option<Struct>,
        source: Struct,
        op: &str,
        now: (i64, i64),
    ) -> Value {
        // `now` is the processing time (µs, ns since 1970), read once per poll rather than per
        // event.
        let (us, ns) = now;
        let before = before.map(|r| ts.map_row(r));
        let after = after.map(|r| ts.map_row(r));
        // In the envelope schema's field order (see `TableSchema::build`): the row images are
        // of the table's row schema and `source` of this connector's source schema.
        let values = vec![
            before.map_or(Value::Null, Value::Struct),
            after.map_or(Value::Null, Value::Struct),
            Value::Struct(source),
            Value::Null,
            Value::String(op.into()),
            Value::Int64(us / 1000),
            Value::Int64(us),
            Value::Int64(ns),
        ];
        Value::Struct(Struct::from_trusted_values(
            ts.envelope_schema.clone(),
            values,
        ))
    }

    /// A record with this connector's source partition.
    pub fn record(
        &self,
        ts: &TableSchema,
        offset: OffsetMap,
        key: Option<Value>,
        value: Option<Value>,
    ) -> SourceRecord {
        let (key_schema, key) = match key {
            Some(k) => (ts.key_schema.clone(), k),
            None => (None, Value::Null),
        };
        let (value_schema, value) = match value {
            Some(v) => (Some(ts.envelope_schema.clone()), v),
            None => (None, Value::Null),
        };
        let mut record = SourceRecord::new(
            self.partition.clone(),
            offset,
            ts.topic.clone(),
            key_schema,
            key,
            value_schema,
            value,
        );
        self.context.add_to(&mut record.headers);
        record
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::MyType;

    #[test]
    fn schemas_rows_and_source() {
        let b = EventBuilder::new(Flavor::MySql, "cdc");
        let col = |name: &str, ty: MyType, optional: bool| ColumnSpec {
            name: name.into(),
            ty,
            unsigned: false,
            optional,
            default: None,
            length: None,
            source_type: None,
        };
        let ts = TableSchema::build(
            TableId {
                db: "public".into(),
                table: "t".into(),
            },
            "cdc",
            vec![
                col("id", MyType::Int, false),
                col("skip", MyType::Int, true),
                col("s", MyType::Year, false),
            ],
            &["id".to_owned()],
            &MappingConfig::default(),
            &b.source_schema,
            &ColumnMappers::default(),
            NameAdjustments::default(),
            |c| c != "skip",
        )
        .unwrap();
        assert_eq!(ts.topic, "cdc.public.t");
        assert_eq!(ts.row_schema.fields().len(), 2);
        let row = ts
            .row(
                &MappingConfig::default(),
                Origin::Binlog,
                [
                    mysql_async::Value::Int(7),
                    mysql_async::Value::Int(1),
                    mysql_async::Value::NULL,
                ],
            )
            .unwrap();
        assert_eq!(
            row.values(),
            &[Value::Int32(7), Value::Int32(0)],
            "required null gets the fallback"
        );
        assert!(ts
            .row(
                &MappingConfig::default(),
                Origin::Binlog,
                [mysql_async::Value::Int(7)]
            )
            .is_err());
        let key = ts.key_of(&row).unwrap();
        assert_eq!(key.as_struct().unwrap().get("id"), Some(&Value::Int32(7)));
        let src = b.source(
            "public",
            Some("t"),
            &SourceInfo {
                ts_sec: 2,
                file: "f".into(),
                pos: 4,
                ..Default::default()
            },
        );
        assert_eq!(src.get("ts_ms"), Some(&Value::Int64(2000)));
        assert_eq!(src.get("connector"), Some(&Value::String("mysql".into())));
        let env = b.envelope(&ts, None, Some(row), src, "c", now_micros_nanos());
        env.as_struct().unwrap().validate().unwrap();
    }
}
