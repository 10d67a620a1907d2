//! Debezium's change events: per-table key/row/envelope schemas, the `source` block and the
//! records for each operation (`r`, `c`, `u`, `d`, `t`, tombstones, primary-key changes).
//!
//! Invariants:
//! - a [`TableSchema`] is built once per table version and its `SchemaRef`s are shared by all
//!   records of that version (converters cache serialised schemas by `Arc` identity);
//!   [`TableSchema::same_shape`] lets callers keep the old objects when a Relation message
//!   repeats an unchanged table;
//! - every value put into a struct was decoded for exactly that field's schema, and required
//!   fields never stay null (missing old-image values get Debezium's fallback values).

use std::sync::Arc;

use headwater_api::logical::debezium;
use headwater_api::{
    OffsetMap, Schema, SchemaBuilder, SchemaRef, SchemaType, SourceRecord, Struct, Value,
};

use crate::types::{self, decode_binary, ColumnType, MappingConfig, PgType, TypeError};
use headwater_connector_common::column_mappers::{
    ColumnFacts, ColumnKind, ColumnMappers, MappedColumn,
};
use headwater_connector_common::context_headers::ContextHeaders;
use headwater_connector_common::name_adjust::NameAdjustments;

/// What a column mapper needs to know of a column's kind: character data (text, varchar,
/// bpchar, name, `"char"`, enums: JDBC's character types, which masks and hashes change),
/// byte strings (bytea), or other (citext among them: an extension type, JDBC's OTHER). Its
/// length is the JDBC column size ([`crate::source_type`]), as Debezium's mappers see it.
fn mapper_kind(ct: &ColumnType) -> ColumnKind {
    let (info, _) = ct.resolved();
    match info.kind {
        PgType::Text if info.name == "citext" => ColumnKind::Other,
        PgType::Text | PgType::Char | PgType::Enum(_) => ColumnKind::Characters,
        PgType::Bytea => ColumnKind::Bytes,
        _ => ColumnKind::Other,
    }
}

/// `schema.table`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableId {
    pub schema: String,
    pub table: String,
}

impl std::fmt::Display for TableId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.schema, self.table)
    }
}

/// A column definition from which the schemas are built.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnDef {
    pub name: String,
    pub ct: ColumnType,
    pub optional: bool,
    pub default_raw: Option<Vec<u8>>,
    /// The default calls `nextval(` (the JDBC driver's `serial` types).
    pub serial: bool,
}

/// A captured column in a built table schema.
#[derive(Clone, Debug)]
pub struct EventColumn {
    pub def: ColumnDef,
    /// The column's field schema (in keys; in the row struct too unless a mapper adds a
    /// parameter there).
    pub schema: SchemaRef,
    /// The column mapper (`column.truncate.*`, `column.mask.*`) of its values in change
    /// events' row images.
    pub mapped: Option<MappedColumn>,
}

/// Schemas of one table version.
#[derive(Clone, Debug)]
pub struct TableSchema {
    pub id: TableId,
    pub topic: String,
    pub columns: Vec<EventColumn>,
    /// Indexes into `columns` of the key fields, in key order.
    pub key_fields: Vec<usize>,
    pub key_schema: Option<SchemaRef>,
    pub row_schema: SchemaRef,
    pub envelope_schema: SchemaRef,
    /// Whether any column has a mapper (see [`TableSchema::map_row`]).
    pub has_mappers: bool,
    /// A partitioned root (captured with `publish.via.partition.root`): reads take its
    /// partitions' rows.
    pub partitioned: bool,
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

/// The `io.debezium.connector.postgresql.Source` schema (version 1).
pub fn source_schema() -> SchemaRef {
    let opt_i64 = Schema::optional_int64;
    SchemaBuilder::struct_()
        .name("io.debezium.connector.postgresql.Source")
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
        .field("schema", Schema::string())
        .field("table", Schema::string())
        .field("txId", opt_i64())
        .field("lsn", opt_i64())
        .field("xmin", opt_i64())
        .field("origin", Schema::optional_string())
        .field("origin_lsn", opt_i64())
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
    /// Builds the schemas of a table. `key_columns` names the key fields (primary key or
    /// `message.key.columns`); columns whose type is not mapped are left out (with a warning).
    #[allow(clippy::too_many_arguments)]
    pub fn build(
        id: TableId,
        topic_prefix: &str,
        defs: Vec<ColumnDef>,
        key_columns: &[String],
        mapping: &MappingConfig,
        source: &SchemaRef,
        mappers: &ColumnMappers,
        names: NameAdjustments,
    ) -> Result<TableSchema, EventError> {
        let topic = sanitize_topic(&format!("{topic_prefix}.{}.{}", id.schema, id.table));
        let schema_err = |detail: String| EventError::Schema {
            table: id.to_string(),
            detail,
        };
        let mut columns = Vec::with_capacity(defs.len());
        let table_name = id.to_string();
        let mut row = SchemaBuilder::struct_()
            .name(names.schema.schema_name(&format!("{topic}.Value")))
            .optional();
        for def in defs {
            let Some(builder) = types::column_schema(&def.ct, mapping) else {
                tracing::warn!(table = %id, column = %def.name, r#type = %def.ct.info.name,
                    "column type is not supported and is left out (include.unknown.datatypes=false)");
                continue;
            };
            let mut builder = if def.optional {
                builder.optional()
            } else {
                builder
            };
            let plain = builder.clone().build_ref();
            if let Some(raw) = &def.default_raw {
                match decode_binary(&def.ct, raw, mapping, &plain) {
                    Ok(v) if !v.is_null() => builder = builder.default_value(v),
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!(column = %def.name, error = %e, "default not representable")
                    }
                }
            }
            let mapped = if mappers.is_empty() {
                None
            } else {
                let source_type = crate::source_type::describe(&def.ct, def.serial);
                mappers.for_column(&ColumnFacts {
                    table: &table_name,
                    column: &def.name,
                    kind: mapper_kind(&def.ct),
                    length: source_type.length.and_then(|l| usize::try_from(l).ok()),
                    type_name: &source_type.name,
                    type_length: source_type.length,
                    type_scale: source_type.scale,
                })
            };
            let schema = match builder.clone().try_build() {
                Ok(s) => Arc::new(s),
                Err(_) => plain,
            };
            let row_field = match mapped.as_ref().map(MappedColumn::schema_parameters) {
                Some(parameters) if !parameters.is_empty() => parameters
                    .iter()
                    .fold(builder, |b, (k, v)| b.parameter(*k, v.as_str()))
                    .try_build()
                    .map(Arc::new)
                    .unwrap_or_else(|_| schema.clone()),
                _ => schema.clone(),
            };
            row = row
                .try_field(names.field.field_name(&def.name), row_field)
                .map_err(|e| schema_err(e.message().to_owned()))?;
            columns.push(EventColumn {
                def,
                schema,
                mapped,
            });
        }
        let has_mappers = columns.iter().any(|c| c.mapped.is_some());
        let row_schema = row.build_ref();
        let mut key_fields = Vec::new();
        for k in key_columns {
            match columns.iter().position(|c| &c.def.name == k) {
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
                SchemaBuilder::struct_().name(names.schema.schema_name(&format!("{topic}.Key")));
            for &i in &key_fields {
                kb = kb
                    .try_field(
                        names.field.field_name(&columns[i].def.name),
                        columns[i].schema.clone(),
                    )
                    .map_err(|e| schema_err(e.message().to_owned()))?;
            }
            Some(kb.build_ref())
        };
        let envelope_schema = SchemaBuilder::struct_()
            .name(names.schema.schema_name(&format!("{topic}.Envelope")))
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
            key_fields,
            key_schema,
            row_schema,
            envelope_schema,
            has_mappers,
            partitioned: false,
        })
    }

    /// The table as a `FROM` item for reads: `ONLY "schema"."table"` (an inheritance
    /// parent's children are tables of their own), a partitioned root with its partitions.
    pub fn relation(&self) -> String {
        let name = format!(
            "{}.{}",
            crate::catalog::quote_ident(&self.id.schema),
            crate::catalog::quote_ident(&self.id.table)
        );
        if self.partitioned {
            name
        } else {
            format!("ONLY {name}")
        }
    }

    /// A row image as change events carry it: each column with a mapper mapped (keys are
    /// built from the unmapped row, as in Debezium).
    pub fn map_row(&self, row: Struct) -> Struct {
        if !self.has_mappers {
            return row;
        }
        let mut values = row.into_values();
        for (col, v) in self.columns.iter().zip(values.iter_mut()) {
            let Some(m) = &col.mapped else {
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

    /// Whether `other` describes the same columns and key (so this version's schema objects
    /// can be kept).
    pub fn same_shape(&self, other: &TableSchema) -> bool {
        self.topic == other.topic
            && self.partitioned == other.partitioned
            && self.key_fields == other.key_fields
            && self.columns.len() == other.columns.len()
            && self
                .columns
                .iter()
                .zip(&other.columns)
                .all(|(a, b)| a.def == b.def && a.schema == b.schema && a.mapped == b.mapped)
    }

    /// Builds a row struct; `value(i)` gives the raw image of column `i` of `columns`.
    pub fn row<'a>(
        &self,
        mapping: &MappingConfig,
        placeholder: &str,
        mut value: impl FnMut(usize) -> RawColumn<'a>,
    ) -> Result<Struct, EventError> {
        let mut values = Vec::with_capacity(self.columns.len());
        for (i, col) in self.columns.iter().enumerate() {
            let v = match value(i) {
                RawColumn::Binary(raw) => decode_binary(&col.def.ct, raw, mapping, &col.schema)
                    .map_err(|source| EventError::Value {
                        table: self.id.to_string(),
                        column: col.def.name.clone(),
                        source,
                    })?,
                RawColumn::Text(raw) => text_value(&col.schema, raw).ok_or_else(|| EventError::Value {
                    table: self.id.to_string(),
                    column: col.def.name.clone(),
                    source: TypeError {
                        type_name: col.def.ct.info.name.clone(),
                        detail: "the server sent this value in text format, which is only supported for text-like types (the type has no binary send function)".into(),
                    },
                })?,
                RawColumn::Null => Value::Null,
                RawColumn::Unchanged => types::placeholder_value(&col.schema, placeholder)
                    .unwrap_or(Value::Null),
                // A value taken from elsewhere (an earlier image) is checked; decoded ones are
                // built for this column's schema.
                RawColumn::Given(v) => {
                    // (An earlier image's struct value carries the row field's schema.)
                    let v = relabelled(v, &col.schema);
                    if !v.is_null() {
                        headwater_api::value::validate_value(&col.schema, &v).map_err(|e| {
                            EventError::Schema {
                                table: self.id.to_string(),
                                detail: format!("column {}: {}", col.def.name, e.message()),
                            }
                        })?;
                    }
                    v
                }
            };
            let v = if v.is_null() && !col.schema.is_optional() {
                types::fallback_value(&col.schema)
            } else {
                v
            };
            let v = if self.has_mappers {
                relabelled(v, self.row_schema.fields()[i].schema())
            } else {
                v
            };
            values.push(v);
        }
        Ok(Struct::from_trusted_values(self.row_schema.clone(), values))
    }

    /// The key struct of a row (`None` without key fields).
    pub fn key_of(&self, row: &Struct) -> Option<Value> {
        let schema = self.key_schema.as_ref()?;
        // The key's fields are the row's own key columns, with their schemas.
        let values = self
            .key_fields
            .iter()
            .map(|&ci| relabelled(row.values()[ci].clone(), &self.columns[ci].schema))
            .collect();
        Some(Value::Struct(Struct::from_trusted_values(
            schema.clone(),
            values,
        )))
    }
}

/// `value` with `schema` if it is a struct (the one kind of value that carries its schema):
/// a column mapper's parameters make a row field's schema differ from the column's plain one,
/// which keys keep.
fn relabelled(value: Value, schema: &SchemaRef) -> Value {
    match value {
        Value::Struct(s) if !Arc::ptr_eq(s.schema(), schema) => {
            Value::Struct(Struct::from_trusted_values(schema.clone(), s.into_values()))
        }
        other => other,
    }
}

/// A text-format value, accepted only where the text is the value (string schemas).
fn text_value(schema: &Schema, raw: &[u8]) -> Option<Value> {
    if schema.schema_type() == SchemaType::String {
        std::str::from_utf8(raw)
            .ok()
            .map(|s| Value::String(s.to_owned()))
    } else {
        None
    }
}

/// One column of a row image as it arrived.
#[derive(Clone, Debug)]
pub enum RawColumn<'a> {
    Null,
    Unchanged,
    Binary(&'a [u8]),
    Text(&'a [u8]),
    /// An already decoded value (e.g. taken from the old image).
    Given(Value),
}

/// What the `source` block says about one event.
#[derive(Clone, Debug, Default)]
pub struct SourceInfo {
    /// Commit (or snapshot) time, µs since 1970.
    pub ts_us: i64,
    /// `snapshot` marker (`None` while streaming: the schema default "false" applies).
    pub snapshot: Option<&'static str>,
    pub last_commit_lsn: Option<i64>,
    pub lsn: Option<i64>,
    pub tx_id: Option<i64>,
}

/// Builds records for one connector.
#[derive(Clone, Debug)]
pub struct EventBuilder {
    pub source_schema: SchemaRef,
    pub server_name: String,
    pub db: String,
    pub partition: OffsetMap,
    /// Debezium's context headers, on every record [`EventBuilder::record`] makes.
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
    pub fn new(server_name: &str, db: &str) -> Self {
        let mut partition = OffsetMap::new();
        partition.insert("server".into(), server_name.into());
        EventBuilder {
            source_schema: source_schema(),
            server_name: server_name.to_owned(),
            db: db.to_owned(),
            partition,
            context: ContextHeaders::disabled(),
        }
    }

    /// Index of `sequence` in the source block.
    pub const SOURCE_SEQUENCE: usize = 6;
    /// Index of `lsn` in the source block.
    pub const SOURCE_LSN: usize = 12;

    /// The `sequence` text: `["<last commit lsn>","<lsn>"]` with `null` for a missing one.
    pub fn sequence(last_commit_lsn: Option<i64>, lsn: Option<i64>) -> String {
        fn lsn_text(seq: &mut String, lsn: Option<i64>) {
            match lsn {
                Some(l) => {
                    seq.push('"');
                    seq.push_str(itoa::Buffer::new().format(l));
                    seq.push('"');
                }
                None => seq.push_str("null"),
            }
        }
        let mut seq = String::with_capacity(48);
        seq.push('[');
        lsn_text(&mut seq, last_commit_lsn);
        seq.push(',');
        lsn_text(&mut seq, lsn);
        seq.push(']');
        seq
    }

    /// `block` (a source block of the same table and transaction) for the event at `lsn`: only
    /// `sequence` and `lsn` differ between events of one transaction, so a shared `block` is
    /// shared by the result too, which holds just those two values ([`Struct::replacing`]).
    pub fn source_for_lsn(block: &Struct, last_commit_lsn: Option<i64>, lsn: i64) -> Struct {
        let replaced = block.replacing([
            (
                Self::SOURCE_SEQUENCE,
                Value::String(Self::sequence(last_commit_lsn, Some(lsn))),
            ),
            (Self::SOURCE_LSN, Value::Int64(lsn)),
        ]);
        // Both values match their fields by construction.
        replaced.unwrap_or_else(|_| block.clone())
    }

    pub fn source(&self, table: &TableId, info: &SourceInfo) -> Struct {
        let mut s = Struct::new(self.source_schema.clone()).expect("source schema is a struct");
        let seq = Self::sequence(info.last_commit_lsn, info.lsn);
        let vals: [Value; 16] = [
            Value::String(crate::CONNECTOR_VERSION.into()),
            Value::String("postgresql".into()),
            Value::String(self.server_name.clone()),
            Value::Int64(info.ts_us.div_euclid(1000)),
            info.snapshot
                .map_or(Value::Null, |s| Value::String(s.into())),
            Value::String(self.db.clone()),
            Value::String(seq),
            Value::Int64(info.ts_us),
            Value::Int64(info.ts_us.saturating_mul(1000)),
            Value::String(table.schema.clone()),
            Value::String(table.table.clone()),
            info.tx_id.map_or(Value::Null, Value::Int64),
            info.lsn.map_or(Value::Null, Value::Int64),
            Value::Null,
            Value::Null,
            Value::Null,
        ];
        for (i, v) in vals.into_iter().enumerate() {
            // Every value matches its field by construction.
            let _ = s.put_at(i, v);
        }
        s
    }

    /// An envelope value stamped with the current time.
    pub fn envelope(
        &self,
        ts: &TableSchema,
        before: Option<Struct>,
        after: Option<Struct>,
        source: Struct,
        op: &str,
    ) -> Value {
        self.envelope_at(ts, before, after, source, op, now_micros_nanos())
    }

    /// An envelope value stamped `ts_ms`/`ts_us`/`ts_ns` from `now` (µs and ns since 1970):
    /// callers building many events at once read the clock once for all of them.
    pub fn envelope_at(
        &self,
        ts: &TableSchema,
        before: Option<Struct>,
        after: Option<Struct>,
        source: Struct,
        op: &str,
        now: (i64, i64),
    ) -> Value {
        let (us, ns) = now;
        let before = before.map(|r| ts.map_row(r));
        let after = after.map(|r| ts.map_row(r));
        // In the envelope schema's field order (see `TableSchema::new`): the row images are of
        // the table's row schema and `source` of this connector's source schema.
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

    /// A record with this connector's source partition (left empty when `offset` is: a later
    /// record's offset covers this one, see [`headwater_api::SourceBatch`]).
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
        let partition = if offset.is_empty() {
            OffsetMap::new()
        } else {
            self.partition.clone()
        };
        let mut record = SourceRecord::new(
            partition,
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
    use crate::types::{PgType, TypeInfo};

    fn def(name: &str, kind: PgType, tname: &str, optional: bool) -> ColumnDef {
        ColumnDef {
            name: name.into(),
            ct: ColumnType {
                info: TypeInfo::new(0, tname, kind),
                typmod: -1,
            },
            optional,
            default_raw: None,
            serial: false,
        }
    }

    #[test]
    fn schemas_and_rows() {
        let source = source_schema();
        let mut text_def = def("c_nn_default", PgType::Text, "text", false);
        text_def.default_raw = Some(b"dflt".to_vec());
        let ts = TableSchema::build(
            TableId {
                schema: "public".into(),
                table: "t".into(),
            },
            "cdc",
            vec![
                def("id", PgType::Int4, "int4", false),
                text_def,
                def("x", PgType::Unknown, "box", true),
            ],
            &["id".to_owned()],
            &MappingConfig::default(),
            &source,
            &ColumnMappers::default(),
            NameAdjustments::default(),
        )
        .unwrap();
        assert_eq!(ts.topic, "cdc.public.t");
        assert_eq!(ts.columns.len(), 2, "unknown type left out");
        assert_eq!(ts.row_schema.name(), Some("cdc.public.t.Value"));
        assert_eq!(ts.envelope_schema.name(), Some("cdc.public.t.Envelope"));
        assert_eq!(ts.envelope_schema.version(), Some(2));
        assert_eq!(
            ts.columns[1].schema.default_value(),
            Some(&Value::String("dflt".into()))
        );
        let one = 1i32.to_be_bytes();
        let row = ts
            .row(&MappingConfig::default(), "__u", |i| match i {
                0 => RawColumn::Binary(&one),
                _ => RawColumn::Null,
            })
            .unwrap();
        assert_eq!(row.values()[0], Value::Int32(1));
        assert_eq!(
            row.values()[1],
            Value::String("dflt".into()),
            "required null gets the default"
        );
        let key = ts.key_of(&row).unwrap();
        assert_eq!(key.as_struct().unwrap().get("id"), Some(&Value::Int32(1)));
        let b = EventBuilder::new("cdc", "db");
        let src = b.source(
            &ts.id,
            &SourceInfo {
                ts_us: 1_500,
                lsn: Some(7),
                ..Default::default()
            },
        );
        assert_eq!(
            src.get("sequence"),
            Some(&Value::String("[null,\"7\"]".into()))
        );
        assert_eq!(src.get("ts_ms"), Some(&Value::Int64(1)));
        let env = b.envelope(&ts, None, Some(row), src, "c");
        env.as_struct().unwrap().validate().unwrap();
        assert_eq!(sanitize_topic("cdc.pub lic.t$"), "cdc.pub_lic.t_");
    }
}
