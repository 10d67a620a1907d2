//! Connect types to SQL column types, and Connect values to the text (or bytes) a destination
//! parses for its column type: PostgreSQL's input syntax (as COPY's text format carries it) and
//! MySQL/MariaDB's (as statement parameters carry it).
//!
//! Invariants: decimals are written exactly (from their unscaled bytes, never through a float);
//! timestamps are written in UTC; a value that does not match its schema is an error naming
//! the column, never a guess.

use headwater_api::logical::{debezium, decimal};
use headwater_api::{ConnectError, Schema, SchemaType, Value};
use jiff::civil::{Date, Time};
use jiff::Timestamp;

use crate::config::DatabaseKind;

/// The largest `varchar`/`char` length each destination takes before the type becomes
/// `text`/`longtext` (PostgreSQL's limit; MySQL's for four-byte characters in a row).
const PG_MAX_CHARS: u64 = 10_485_760;
const MYSQL_MAX_CHARS: u64 = 16_383;
/// MySQL key columns are capped at this many characters (an index key's limit).
const MYSQL_MAX_KEY_CHARS: u64 = 255;

/// A string column's type from the source's `__debezium.source.column.type` and `.length`
/// (what `column.propagate.source.type` adds), as Debezium's JDBC sink sizes them:
/// `char(n)` for `CHAR`/`CHARACTER`/`BPCHAR`/`NCHAR` (n at least 1), `varchar(n)` for
/// `VARCHAR`/`VARCHAR2`/`CHARACTER VARYING`/`NVARCHAR`/`NVARCHAR2` with a length; MySQL keys
/// at most 255 characters. `None` (the usual types) without the parameters, for other source
/// types, and for lengths the destination cannot declare.
fn propagated_string_type(pg: bool, schema: &Schema, key: bool) -> Option<String> {
    let source_type = schema
        .parameter("__debezium.source.column.type")?
        .to_ascii_uppercase();
    let length = schema
        .parameter("__debezium.source.column.length")
        .and_then(|l| l.parse::<u64>().ok())
        .unwrap_or(0);
    let fixed = match source_type.as_str() {
        "CHAR" | "CHARACTER" | "BPCHAR" | "NCHAR" => true,
        "VARCHAR" | "VARCHAR2" | "CHARACTER VARYING" | "NVARCHAR" | "NVARCHAR2" => false,
        _ => return None,
    };
    let mut length = if fixed { length.max(1) } else { length };
    if length == 0 {
        return None;
    }
    if !pg && key {
        length = length.min(MYSQL_MAX_KEY_CHARS);
    }
    if length > if pg { PG_MAX_CHARS } else { MYSQL_MAX_CHARS } {
        return None;
    }
    Some(format!(
        "{}({length})",
        if fixed { "char" } else { "varchar" }
    ))
}

/// The SQL type of a column for `CREATE TABLE` / `ALTER TABLE ... ADD` (schema evolution).
/// `key` asks for a type MySQL can index (bounded strings and bytes). String columns sized at
/// the source (`column.propagate.source.type`) keep their `char(n)`/`varchar(n)`.
pub fn sql_type(db: DatabaseKind, schema: &Schema, key: bool) -> String {
    let pg = db == DatabaseKind::Postgres;
    let name = schema.name().unwrap_or("");
    match (schema.schema_type(), name) {
        (SchemaType::Bytes, decimal::LOGICAL_NAME) => {
            let scale = schema.parameter(decimal::SCALE_PARAMETER).unwrap_or("0");
            match schema.parameter(decimal::PRECISION_PARAMETER) {
                Some(p) => format!("numeric({p},{scale})"),
                None if pg => "numeric".into(),
                None => format!("decimal(65,{})", scale.parse::<u32>().unwrap_or(0).min(30)),
            }
        }
        (SchemaType::Struct, debezium::VARIABLE_SCALE_DECIMAL) => {
            if pg {
                "numeric".into()
            } else {
                "decimal(65,30)".into()
            }
        }
        (SchemaType::Int32, "org.apache.kafka.connect.data.Date" | debezium::DATE) => "date".into(),
        (SchemaType::Int32, "org.apache.kafka.connect.data.Time" | debezium::TIME) => {
            "time(3)".into()
        }
        (SchemaType::Int64, debezium::MICRO_TIME | debezium::NANO_TIME) => "time(6)".into(),
        (
            SchemaType::Int64,
            "org.apache.kafka.connect.data.Timestamp"
            | debezium::TIMESTAMP
            | debezium::MICRO_TIMESTAMP
            | debezium::NANO_TIMESTAMP,
        ) => {
            if pg {
                "timestamp(6)".into()
            } else {
                "datetime(6)".into()
            }
        }
        (SchemaType::String, debezium::ZONED_TIMESTAMP) => {
            if pg {
                "timestamptz".into()
            } else {
                "datetime(6)".into()
            }
        }
        (SchemaType::String, debezium::ZONED_TIME) => {
            if pg {
                "timetz".into()
            } else {
                "time(6)".into()
            }
        }
        (SchemaType::Int64, debezium::MICRO_DURATION) => {
            if pg {
                "interval".into()
            } else {
                "bigint".into()
            }
        }
        (SchemaType::String, debezium::JSON) => {
            if pg {
                "jsonb".into()
            } else {
                "json".into()
            }
        }
        (SchemaType::String, debezium::UUID) => {
            if pg {
                "uuid".into()
            } else {
                "char(36)".into()
            }
        }
        (SchemaType::String, debezium::XML) if pg => "xml".into(),
        (SchemaType::Int8, _) => {
            if pg {
                "smallint".into()
            } else {
                "tinyint".into()
            }
        }
        (SchemaType::Int16, _) => "smallint".into(),
        (SchemaType::Int32, _) => {
            if pg {
                "integer".into()
            } else {
                "int".into()
            }
        }
        (SchemaType::Int64, _) => "bigint".into(),
        (SchemaType::Float32, _) => {
            if pg {
                "real".into()
            } else {
                "float".into()
            }
        }
        (SchemaType::Float64, _) => {
            if pg {
                "double precision".into()
            } else {
                "double".into()
            }
        }
        (SchemaType::Boolean, _) => "boolean".into(),
        (SchemaType::String, _) => match (propagated_string_type(pg, schema, key), pg, key) {
            (Some(sized), _, _) => sized,
            (None, true, _) => "text".into(),
            (None, false, true) => "varchar(255)".into(),
            (None, false, false) => "longtext".into(),
        },
        (SchemaType::Bytes, _) => match (pg, key) {
            (true, _) => "bytea".into(),
            (false, true) => "varbinary(255)".into(),
            (false, false) => "longblob".into(),
        },
        (SchemaType::Array, _) if pg => match schema.value_schema() {
            Some(item)
                if item.schema_type() != SchemaType::Array
                    && item.schema_type() != SchemaType::Struct
                    && item.schema_type() != SchemaType::Map =>
            {
                format!("{}[]", sql_type(db, item, false))
            }
            _ => "jsonb".into(),
        },
        (SchemaType::Array | SchemaType::Map | SchemaType::Struct, _) => {
            if pg {
                "jsonb".into()
            } else {
                "json".into()
            }
        }
    }
}

fn bad(column: &str, schema: &Schema, value: &Value) -> ConnectError {
    ConnectError::data(format!(
        "column {column}: value {value:?} does not match its schema {:?} {}",
        schema.schema_type(),
        schema.name().unwrap_or("")
    ))
}

const EPOCH: Date = Date::constant(1970, 1, 1);

fn date_text(days: i64) -> Option<String> {
    EPOCH
        .checked_add(jiff::Span::new().days(days))
        .ok()
        .map(|d| d.to_string())
}

fn timestamp_text(micros: i64) -> Option<String> {
    let ts = Timestamp::from_microsecond(micros).ok()?;
    Some(
        ts.to_zoned(jiff::tz::TimeZone::UTC)
            .strftime("%Y-%m-%d %H:%M:%S%.6f")
            .to_string(),
    )
}

fn time_text(micros: i64) -> Option<String> {
    let micros = micros.rem_euclid(86_400_000_000);
    let t = Time::MIN
        .checked_add(jiff::Span::new().microseconds(micros))
        .ok()?;
    Some(t.strftime("%H:%M:%S%.6f").to_string())
}

/// Appends `value` in the destination's input syntax for its column type; `Ok(false)` for
/// NULL (nothing appended).
pub fn render(
    db: DatabaseKind,
    column: &str,
    schema: &Schema,
    value: &Value,
    out: &mut Vec<u8>,
) -> Result<bool, ConnectError> {
    let pg = db == DatabaseKind::Postgres;
    let name = schema.name().unwrap_or("");
    let push = |out: &mut Vec<u8>, s: &str| out.extend_from_slice(s.as_bytes());
    if !fits(schema, value) {
        return Err(bad(column, schema, value));
    }
    match (value, name) {
        (Value::Null, _) => return Ok(false),
        (Value::Bytes(b), decimal::LOGICAL_NAME) => {
            let scale = decimal::scale(schema).map_err(|_| bad(column, schema, value))?;
            push(out, &decimal::unscaled_to_string(b, scale));
        }
        (Value::Struct(s), debezium::VARIABLE_SCALE_DECIMAL) => {
            let scale = match s.get("scale") {
                Some(Value::Int32(v)) => *v,
                _ => return Err(bad(column, schema, value)),
            };
            let Some(Value::Bytes(b)) = s.get("value") else {
                return Err(bad(column, schema, value));
            };
            push(out, &decimal::unscaled_to_string(b, scale));
        }
        (Value::Int32(d), "org.apache.kafka.connect.data.Date" | debezium::DATE) => {
            push(
                out,
                &date_text(i64::from(*d)).ok_or_else(|| bad(column, schema, value))?,
            );
        }
        (Value::Int32(ms), "org.apache.kafka.connect.data.Time" | debezium::TIME) => {
            push(
                out,
                &time_text(i64::from(*ms) * 1000).ok_or_else(|| bad(column, schema, value))?,
            );
        }
        (Value::Int64(us), debezium::MICRO_TIME) => {
            push(
                out,
                &time_text(*us).ok_or_else(|| bad(column, schema, value))?,
            );
        }
        (Value::Int64(ns), debezium::NANO_TIME) => {
            push(
                out,
                &time_text(ns.div_euclid(1000)).ok_or_else(|| bad(column, schema, value))?,
            );
        }
        (Value::Int64(ms), "org.apache.kafka.connect.data.Timestamp" | debezium::TIMESTAMP) => {
            push(
                out,
                &timestamp_text(ms.saturating_mul(1000))
                    .ok_or_else(|| bad(column, schema, value))?,
            );
        }
        (Value::Int64(us), debezium::MICRO_TIMESTAMP) => {
            push(
                out,
                &timestamp_text(*us).ok_or_else(|| bad(column, schema, value))?,
            );
        }
        (Value::Int64(ns), debezium::NANO_TIMESTAMP) => {
            push(
                out,
                &timestamp_text(ns.div_euclid(1000)).ok_or_else(|| bad(column, schema, value))?,
            );
        }
        (Value::String(s), debezium::ZONED_TIMESTAMP) if !pg => {
            let ts: Timestamp = s.parse().map_err(|_| bad(column, schema, value))?;
            push(
                out,
                &timestamp_text(ts.as_microsecond()).ok_or_else(|| bad(column, schema, value))?,
            );
        }
        (Value::String(s), debezium::ZONED_TIME) if !pg => {
            // MySQL has no zoned time: keep the UTC clock time ("10:15:30.123Z" -> 10:15:30.123).
            push(out, s.trim_end_matches('Z'));
        }
        (Value::Int64(us), debezium::MICRO_DURATION) if pg => {
            push(out, &format!("{us} microseconds"));
        }
        (Value::Boolean(b), _) => push(
            out,
            if *b {
                if pg {
                    "t"
                } else {
                    "1"
                }
            } else if pg {
                "f"
            } else {
                "0"
            },
        ),
        (Value::Int8(v), _) => push(out, itoa::Buffer::new().format(*v)),
        (Value::Int16(v), _) => push(out, itoa::Buffer::new().format(*v)),
        (Value::Int32(v), _) => push(out, itoa::Buffer::new().format(*v)),
        (Value::Int64(v), _) => push(out, itoa::Buffer::new().format(*v)),
        (Value::Float32(v), _) => push(
            out,
            &float_text(f64::from(*v), pg).ok_or_else(|| bad(column, schema, value))?,
        ),
        (Value::Float64(v), _) => push(
            out,
            &float_text(*v, pg).ok_or_else(|| bad(column, schema, value))?,
        ),
        (Value::String(s), _) => push(out, s),
        (Value::Bytes(b), _) => {
            if pg {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\x");
                for x in b {
                    out.push(HEX[usize::from(x >> 4)]);
                    out.push(HEX[usize::from(x & 15)]);
                }
            } else {
                out.extend_from_slice(b);
            }
        }
        (Value::Array(items), _)
            if pg
                && schema.value_schema().is_some_and(|i| {
                    !matches!(
                        i.schema_type(),
                        SchemaType::Array | SchemaType::Struct | SchemaType::Map
                    )
                }) =>
        {
            let item_schema = schema
                .value_schema()
                .cloned()
                .unwrap_or_else(Schema::string);
            out.push(b'{');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                let mut text = Vec::new();
                if render(db, column, &item_schema, item, &mut text)? {
                    out.push(b'"');
                    for &c in &text {
                        if c == b'"' || c == b'\\' {
                            out.push(b'\\');
                        }
                        out.push(c);
                    }
                    out.push(b'"');
                } else {
                    out.extend_from_slice(b"NULL");
                }
            }
            out.push(b'}');
        }
        (Value::Array(_) | Value::Map(_) | Value::Struct(_), _) => {
            push(out, &headwater_api::value::plain_json(value).to_string());
        }
    }
    Ok(true)
}

/// Whether a (non-null) value has the shape its schema type promises.
fn fits(schema: &Schema, value: &Value) -> bool {
    matches!(
        (schema.schema_type(), value),
        (_, Value::Null)
            | (SchemaType::Boolean, Value::Boolean(_))
            | (SchemaType::Int8, Value::Int8(_))
            | (SchemaType::Int16, Value::Int16(_))
            | (SchemaType::Int32, Value::Int32(_))
            | (SchemaType::Int64, Value::Int64(_))
            | (SchemaType::Float32, Value::Float32(_))
            | (SchemaType::Float64, Value::Float64(_))
            | (SchemaType::String, Value::String(_))
            | (SchemaType::Bytes, Value::Bytes(_))
            | (SchemaType::Array, Value::Array(_))
            | (SchemaType::Map, Value::Map(_))
            | (SchemaType::Struct, Value::Struct(_))
    )
}

fn float_text(v: f64, pg: bool) -> Option<String> {
    if v.is_finite() {
        Some(format!("{v}"))
    } else if !pg {
        None
    } else if v.is_nan() {
        Some("NaN".into())
    } else if v > 0.0 {
        Some("Infinity".into())
    } else {
        Some("-Infinity".into())
    }
}

/// Appends `text` to a COPY text-format row, escaping what the format needs.
pub fn copy_escape(text: &[u8], out: &mut Vec<u8>) {
    for &c in text {
        match c {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headwater_api::SchemaBuilder;

    fn text(db: DatabaseKind, schema: &Schema, v: Value) -> String {
        let mut out = Vec::new();
        assert!(render(db, "c", schema, &v, &mut out).unwrap());
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn temporal_and_decimal_values_render_exactly() {
        let pg = DatabaseKind::Postgres;
        let my = DatabaseKind::MySql;
        let dec = decimal::builder(2).build();
        assert_eq!(
            text(pg, &dec, Value::Bytes(decimal::unscaled_from_i128(-12345))),
            "-123.45"
        );
        let date = SchemaBuilder::int32().name(debezium::DATE).build();
        assert_eq!(text(pg, &date, Value::Int32(19723)), "2024-01-01");
        assert_eq!(text(my, &date, Value::Int32(-1)), "1969-12-31");
        let ts = SchemaBuilder::int64()
            .name(debezium::MICRO_TIMESTAMP)
            .build();
        assert_eq!(
            text(pg, &ts, Value::Int64(1_704_067_200_123_456)),
            "2024-01-01 00:00:00.123456"
        );
        let zoned = SchemaBuilder::string()
            .name(debezium::ZONED_TIMESTAMP)
            .build();
        assert_eq!(
            text(my, &zoned, Value::String("2024-01-01T10:00:00.5Z".into())),
            "2024-01-01 10:00:00.500000"
        );
        assert_eq!(
            text(pg, &zoned, Value::String("2024-01-01T10:00:00.5Z".into())),
            "2024-01-01T10:00:00.5Z"
        );
        let t = SchemaBuilder::int64().name(debezium::MICRO_TIME).build();
        assert_eq!(text(pg, &t, Value::Int64(3_723_000_001)), "01:02:03.000001");
        assert_eq!(
            text(pg, &Schema::bytes(), Value::Bytes(vec![0, 255])),
            "\\x00ff"
        );
        assert_eq!(text(my, &Schema::boolean(), Value::Boolean(true)), "1");
        let arr = SchemaBuilder::array(Schema::string()).build();
        assert_eq!(
            text(
                pg,
                &arr,
                Value::Array(vec![Value::String("a\"b".into()), Value::Null])
            ),
            "{\"a\\\"b\",NULL}"
        );
        assert!(render(
            pg,
            "c",
            &Schema::int32(),
            &Value::String("x".into()),
            &mut Vec::new()
        )
        .is_err());
    }

    #[test]
    fn column_types_follow_the_connect_schema() {
        let pg = DatabaseKind::Postgres;
        let my = DatabaseKind::MySql;
        let dec = decimal::builder(2)
            .parameter(decimal::PRECISION_PARAMETER, "12")
            .build();
        assert_eq!(sql_type(pg, &dec, false), "numeric(12,2)");
        assert_eq!(sql_type(my, &Schema::string(), true), "varchar(255)");
        assert_eq!(sql_type(my, &Schema::string(), false), "longtext");
        let zoned = SchemaBuilder::string()
            .name(debezium::ZONED_TIMESTAMP)
            .build();
        assert_eq!(sql_type(pg, &zoned, false), "timestamptz");
        let sized = |source_type: &str, length: &str| {
            SchemaBuilder::string()
                .parameter("__debezium.source.column.type", source_type)
                .parameter("__debezium.source.column.length", length)
                .parameter("__debezium.source.column.scale", "0")
                .build()
        };
        assert_eq!(sql_type(pg, &sized("VARCHAR", "40"), false), "varchar(40)");
        assert_eq!(sql_type(my, &sized("VARCHAR", "40"), true), "varchar(40)");
        assert_eq!(
            sql_type(my, &sized("VARCHAR", "1000"), true),
            "varchar(255)"
        );
        assert_eq!(
            sql_type(my, &sized("VARCHAR", "1000"), false),
            "varchar(1000)"
        );
        assert_eq!(sql_type(pg, &sized("BPCHAR", "3"), false), "char(3)");
        assert_eq!(sql_type(pg, &sized("BPCHAR", "0"), false), "char(1)");
        assert_eq!(
            sql_type(pg, &sized("VARCHAR", "2147483647"), false),
            "text",
            "a varchar without a length"
        );
        assert_eq!(sql_type(pg, &sized("TEXT", "2147483647"), false), "text");
        assert_eq!(sql_type(my, &sized("INT4", "10"), false), "longtext");
        assert_eq!(
            sql_type(pg, &SchemaBuilder::array(Schema::int32()).build(), false),
            "integer[]"
        );
    }

    #[test]
    fn copy_text_is_escaped() {
        let mut out = Vec::new();
        copy_escape(b"a\tb\\c\nd", &mut out);
        assert_eq!(out, b"a\\tb\\\\c\\nd");
    }
}
