//! Connect schemas to Arrow schemas, and rows of Connect values to Arrow record batches.
//!
//! A sink row is the change's row image (`after`, or `before` for deletes) plus Headwater's
//! metadata columns (`__op`, `__deleted`, `__source_ts_ms`, `__kafka_partition`,
//! `__kafka_offset`). Invariants: decimals keep their exact unscaled value (Decimal128, the
//! schema's precision or 38); temporal types keep their unit; types Parquet has no direct
//! counterpart for (maps, nested structs, arrays, JSON) are written as their JSON text, never
//! dropped.

use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, Float32Builder,
    Float64Builder, Int16Builder, Int32Builder, Int64Builder, Int8Builder, StringBuilder,
    Time32MillisecondBuilder, Time64MicrosecondBuilder, TimestampMicrosecondBuilder,
    TimestampMillisecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema as ArrowSchema, TimeUnit};
use headwater_api::logical::{debezium, decimal};
use headwater_api::{ConnectError, Schema, SchemaRef, SchemaType, Value};

/// The metadata columns after the row's own.
pub const META_COLUMNS: [&str; 5] = [
    "__op",
    "__deleted",
    "__source_ts_ms",
    "__kafka_partition",
    "__kafka_offset",
];

/// How one Connect column becomes an Arrow column.
#[derive(Clone, Debug)]
pub struct ColumnPlan {
    pub name: String,
    pub schema: SchemaRef,
    pub data_type: DataType,
}

/// The Arrow type for a Connect schema.
pub fn arrow_type(schema: &Schema) -> DataType {
    let name = schema.name().unwrap_or("");
    match (schema.schema_type(), name) {
        (SchemaType::Bytes, decimal::LOGICAL_NAME) => {
            let scale: i8 = schema
                .parameter(decimal::SCALE_PARAMETER)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            let precision: u8 = schema
                .parameter(decimal::PRECISION_PARAMETER)
                .and_then(|s| s.parse().ok())
                .unwrap_or(38)
                .clamp(1, 38);
            DataType::Decimal128(precision, scale)
        }
        (SchemaType::Int32, "org.apache.kafka.connect.data.Date" | debezium::DATE) => {
            DataType::Date32
        }
        (SchemaType::Int32, "org.apache.kafka.connect.data.Time" | debezium::TIME) => {
            DataType::Time32(TimeUnit::Millisecond)
        }
        (SchemaType::Int64, debezium::MICRO_TIME) => DataType::Time64(TimeUnit::Microsecond),
        (SchemaType::Int64, "org.apache.kafka.connect.data.Timestamp" | debezium::TIMESTAMP) => {
            DataType::Timestamp(TimeUnit::Millisecond, None)
        }
        (SchemaType::Int64, debezium::MICRO_TIMESTAMP) => {
            DataType::Timestamp(TimeUnit::Microsecond, None)
        }
        (SchemaType::String, debezium::ZONED_TIMESTAMP) => {
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
        }
        (SchemaType::Int8, _) => DataType::Int8,
        (SchemaType::Int16, _) => DataType::Int16,
        (SchemaType::Int32, _) => DataType::Int32,
        (SchemaType::Int64, _) => DataType::Int64,
        (SchemaType::Float32, _) => DataType::Float32,
        (SchemaType::Float64, _) => DataType::Float64,
        (SchemaType::Boolean, _) => DataType::Boolean,
        (SchemaType::Bytes, _) => DataType::Binary,
        _ => DataType::Utf8,
    }
}

/// The columns of rows of `row` (a struct schema), metadata columns last.
pub fn plan(row: &Schema) -> Vec<ColumnPlan> {
    let mut out: Vec<ColumnPlan> = row
        .fields()
        .iter()
        .map(|f| ColumnPlan {
            name: f.name().to_owned(),
            schema: f.schema().clone(),
            data_type: arrow_type(f.schema()),
        })
        .collect();
    let meta: [(&str, SchemaRef); 5] = [
        ("__op", Schema::string()),
        ("__deleted", Schema::boolean()),
        ("__source_ts_ms", Schema::optional_int64()),
        ("__kafka_partition", Schema::int32()),
        ("__kafka_offset", Schema::int64()),
    ];
    for (name, schema) in meta {
        out.push(ColumnPlan {
            name: name.to_owned(),
            data_type: arrow_type(&schema),
            schema,
        });
    }
    out
}

pub fn arrow_schema(columns: &[ColumnPlan]) -> Arc<ArrowSchema> {
    Arc::new(ArrowSchema::new(
        columns
            .iter()
            .map(|c| Field::new(&c.name, c.data_type.clone(), true))
            .collect::<Vec<_>>(),
    ))
}

fn json_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => headwater_api::value::plain_json(other).to_string(),
    }
}

fn bad(column: &str, value: &Value) -> ConnectError {
    ConnectError::data(format!(
        "column {column}: value {value:?} does not fit its Parquet type"
    ))
}

/// Builds a record batch from rows (each aligned with `columns`).
pub fn record_batch(
    columns: &[ColumnPlan],
    schema: &Arc<ArrowSchema>,
    rows: &[Vec<Value>],
) -> Result<RecordBatch, ConnectError> {
    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(columns.len());
    for (ci, col) in columns.iter().enumerate() {
        let values = rows.iter().map(|r| &r[ci]);
        let name = col.name.as_str();
        macro_rules! ints {
            ($builder:ty, $variant:ident, $t:ty) => {{
                let mut b = <$builder>::with_capacity(rows.len());
                for v in values {
                    match v {
                        Value::Null => b.append_null(),
                        Value::$variant(x) => b.append_value(*x as $t),
                        other => return Err(bad(name, other)),
                    }
                }
                Arc::new(b.finish()) as ArrayRef
            }};
        }
        let array: ArrayRef = match &col.data_type {
            DataType::Int8 => ints!(Int8Builder, Int8, i8),
            DataType::Int16 => ints!(Int16Builder, Int16, i16),
            DataType::Int32 => ints!(Int32Builder, Int32, i32),
            DataType::Int64 => ints!(Int64Builder, Int64, i64),
            DataType::Float32 => ints!(Float32Builder, Float32, f32),
            DataType::Float64 => ints!(Float64Builder, Float64, f64),
            DataType::Date32 => ints!(Date32Builder, Int32, i32),
            DataType::Time32(TimeUnit::Millisecond) => {
                ints!(Time32MillisecondBuilder, Int32, i32)
            }
            DataType::Time64(TimeUnit::Microsecond) => {
                ints!(Time64MicrosecondBuilder, Int64, i64)
            }
            DataType::Timestamp(TimeUnit::Millisecond, None) => {
                ints!(TimestampMillisecondBuilder, Int64, i64)
            }
            DataType::Timestamp(TimeUnit::Microsecond, None) => {
                ints!(TimestampMicrosecondBuilder, Int64, i64)
            }
            DataType::Timestamp(TimeUnit::Microsecond, Some(tz)) => {
                let mut b = TimestampMicrosecondBuilder::with_capacity(rows.len());
                for v in values {
                    match v {
                        Value::Null => b.append_null(),
                        Value::String(s) => {
                            let ts: jiff::Timestamp = s.parse().map_err(|_| bad(name, v))?;
                            b.append_value(ts.as_microsecond());
                        }
                        other => return Err(bad(name, other)),
                    }
                }
                Arc::new(b.finish().with_timezone(tz.clone()))
            }
            DataType::Boolean => {
                let mut b = BooleanBuilder::with_capacity(rows.len());
                for v in values {
                    match v {
                        Value::Null => b.append_null(),
                        Value::Boolean(x) => b.append_value(*x),
                        other => return Err(bad(name, other)),
                    }
                }
                Arc::new(b.finish())
            }
            DataType::Binary => {
                let mut b = BinaryBuilder::new();
                for v in values {
                    match v {
                        Value::Null => b.append_null(),
                        Value::Bytes(x) => b.append_value(x),
                        other => return Err(bad(name, other)),
                    }
                }
                Arc::new(b.finish())
            }
            DataType::Decimal128(p, s) => {
                let mut b = Decimal128Builder::with_capacity(rows.len());
                for v in values {
                    match v {
                        Value::Null => b.append_null(),
                        Value::Bytes(x) => b.append_value(
                            decimal::unscaled_to_i128(x).ok_or_else(|| bad(name, v))?,
                        ),
                        other => return Err(bad(name, other)),
                    }
                }
                Arc::new(
                    b.finish()
                        .with_precision_and_scale(*p, *s)
                        .map_err(|e| ConnectError::data(format!("column {name}: {e}")))?,
                )
            }
            _ => {
                let mut b = StringBuilder::new();
                for v in values {
                    match v {
                        Value::Null => b.append_null(),
                        other => b.append_value(json_text(other)),
                    }
                }
                Arc::new(b.finish())
            }
        };
        arrays.push(array);
    }
    RecordBatch::try_new(schema.clone(), arrays)
        .map_err(|e| ConnectError::data(format!("building a Parquet row group: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use headwater_api::SchemaBuilder;

    #[test]
    fn types_and_values_map_exactly() {
        let row = SchemaBuilder::struct_()
            .field("id", Schema::int64())
            .field(
                "amount",
                decimal::builder(2)
                    .parameter(decimal::PRECISION_PARAMETER, "12")
                    .optional()
                    .build_ref(),
            )
            .field(
                "at",
                SchemaBuilder::string()
                    .name(debezium::ZONED_TIMESTAMP)
                    .optional()
                    .build_ref(),
            )
            .field(
                "tags",
                SchemaBuilder::array(Schema::string())
                    .optional()
                    .build_ref(),
            )
            .build();
        let cols = plan(&row);
        assert_eq!(cols[1].data_type, DataType::Decimal128(12, 2));
        assert_eq!(cols.len(), 4 + META_COLUMNS.len());
        let schema = arrow_schema(&cols);
        let rows = vec![vec![
            Value::Int64(7),
            Value::Bytes(decimal::unscaled_from_i128(-1234)),
            Value::String("2026-01-01T00:00:00.5Z".into()),
            Value::Array(vec![Value::String("a".into())]),
            Value::String("c".into()),
            Value::Boolean(false),
            Value::Int64(1),
            Value::Int32(0),
            Value::Int64(42),
        ]];
        let batch = record_batch(&cols, &schema, &rows).unwrap();
        assert_eq!(batch.num_rows(), 1);
        let amount = batch
            .column(1)
            .as_any()
            .downcast_ref::<arrow_array::Decimal128Array>()
            .unwrap();
        assert_eq!(amount.value(0), -1234);
        let tags = batch
            .column(3)
            .as_any()
            .downcast_ref::<arrow_array::StringArray>()
            .unwrap();
        assert_eq!(tags.value(0), "[\"a\"]");
        assert!(record_batch(&cols, &schema, &[vec![Value::String("x".into()); 9]]).is_err());
    }
}
