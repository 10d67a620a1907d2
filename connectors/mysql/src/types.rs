//! Debezium's MySQL/MariaDB type mapping: a column model ([`ColumnSpec`]) that both schema
//! sources produce (information_schema for the snapshot, TABLE_MAP full metadata while
//! streaming), the Connect schema of each column, and value conversion from both wire forms
//! (text protocol rows and binlog row images).
//!
//! Invariants:
//! - the same column gives an equal [`ColumnSpec`] from both sources (defaults aside), so the
//!   snapshot and the stream share one schema per table version;
//! - a value is converted for exactly its column's schema; a value that cannot be represented
//!   is an error naming the column and type, never a silent null;
//! - temporal values are UTC-agnostic numbers as Debezium writes them (DATETIME has no zone,
//!   TIMESTAMP is an ISO string in UTC; connections use `time_zone='+00:00'`).

use base64::Engine as _;
pub use headwater_api::civil::{civil_from_days, days_from_civil};
use headwater_api::logical::{date, debezium, decimal, time, timestamp};
use headwater_api::{Schema, SchemaBuilder, SchemaRef, SchemaType, Struct, Value};
use mysql_async::Value as MyValue;

/// `decimal.handling.mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DecimalMode {
    #[default]
    Precise,
    Double,
    String,
}

/// `time.precision.mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TimePrecisionMode {
    #[default]
    AdaptiveTimeMicroseconds,
    Connect,
}

/// `bigint.unsigned.handling.mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BigintMode {
    #[default]
    Long,
    Precise,
}

/// `binary.handling.mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BinaryMode {
    #[default]
    Bytes,
    Base64,
    Base64UrlSafe,
    Hex,
}

/// The mapping options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MappingConfig {
    pub decimal: DecimalMode,
    pub time_precision: TimePrecisionMode,
    pub bigint: BigintMode,
    pub binary: BinaryMode,
}

/// How character data is encoded on the wire (binlog images carry the column's charset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Charset {
    Utf8,
    Latin1,
}

/// A column type as far as the mapping cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MyType {
    TinyInt,
    SmallInt,
    MediumInt,
    Int,
    BigInt,
    Decimal {
        precision: u32,
        scale: u32,
    },
    Float,
    Double,
    Bit(u32),
    /// Character data (CHAR, VARCHAR, TEXT, MariaDB JSON).
    Text(Charset),
    /// Binary data; `fixed` is BINARY(n)'s length (the binlog strips trailing zero bytes).
    Binary {
        fixed: Option<usize>,
    },
    Date,
    Time(u32),
    DateTime(u32),
    Timestamp(u32),
    Year,
    Enum(Vec<String>),
    Set(Vec<String>),
    /// MySQL's native JSON.
    Json,
    Geometry,
}

/// One column of a table version.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnSpec {
    pub name: String,
    pub ty: MyType,
    pub unsigned: bool,
    pub optional: bool,
    /// The column's default (converted), when the server declares one that maps.
    pub default: Option<Value>,
    /// The declared length of a character or binary column (`varchar(n)`), from the catalog
    /// (TABLE_MAP events carry bytes, not characters); for column mappers.
    pub length: Option<usize>,
    /// The type as `information_schema` renders it, for the propagating column mappers
    /// (from the catalog, as `length`).
    pub source_type: Option<std::sync::Arc<crate::source_type::SourceColumnType>>,
}

impl ColumnSpec {
    /// Equality ignoring defaults (TABLE_MAP events carry no defaults).
    pub fn same_column(&self, other: &ColumnSpec) -> bool {
        self.name == other.name
            && self.ty == other.ty
            && self.unsigned == other.unsigned
            && self.optional == other.optional
    }
}

/// Where a raw value came from: the two forms differ for SET, ENUM and temporal types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Text,
    Binlog,
}

/// A value that does not fit its column.
#[derive(Debug, thiserror::Error)]
#[error("{detail}")]
pub struct TypeError {
    pub detail: String,
}

fn err(detail: impl Into<String>) -> TypeError {
    TypeError {
        detail: detail.into(),
    }
}

fn binary_builder(mode: BinaryMode) -> SchemaBuilder {
    match mode {
        BinaryMode::Bytes => SchemaBuilder::bytes(),
        _ => SchemaBuilder::string(),
    }
}

/// The Connect schema of a column (required; the caller applies optionality and default).
pub fn column_schema(spec: &ColumnSpec, m: &MappingConfig) -> SchemaBuilder {
    use MyType::*;
    match &spec.ty {
        TinyInt => SchemaBuilder::int16(),
        SmallInt if spec.unsigned => SchemaBuilder::int32(),
        SmallInt => SchemaBuilder::int16(),
        MediumInt => SchemaBuilder::int32(),
        Int if spec.unsigned => SchemaBuilder::int64(),
        Int => SchemaBuilder::int32(),
        BigInt if spec.unsigned && m.bigint == BigintMode::Precise => decimal::builder(0),
        BigInt => SchemaBuilder::int64(),
        Decimal { precision, scale } => match m.decimal {
            DecimalMode::Precise => decimal::builder(*scale as i32)
                .parameter("connect.decimal.precision", precision.to_string()),
            DecimalMode::Double => SchemaBuilder::float64(),
            DecimalMode::String => SchemaBuilder::string(),
        },
        Float => SchemaBuilder::float32(),
        Double => SchemaBuilder::float64(),
        Bit(1) => SchemaBuilder::boolean(),
        Bit(n) => debezium::bits_builder(*n),
        Text(_) => SchemaBuilder::string(),
        Binary { .. } => binary_builder(m.binary),
        Date => match m.time_precision {
            TimePrecisionMode::Connect => date::builder(),
            _ => debezium::builder(debezium::DATE, SchemaType::Int32),
        },
        Time(_) => match m.time_precision {
            TimePrecisionMode::Connect => time::builder(),
            _ => debezium::builder(debezium::MICRO_TIME, SchemaType::Int64),
        },
        DateTime(fsp) => match m.time_precision {
            TimePrecisionMode::Connect => timestamp::builder(),
            _ if *fsp <= 3 => debezium::builder(debezium::TIMESTAMP, SchemaType::Int64),
            _ => debezium::builder(debezium::MICRO_TIMESTAMP, SchemaType::Int64),
        },
        Timestamp(_) => debezium::builder(debezium::ZONED_TIMESTAMP, SchemaType::String),
        Year => debezium::builder(debezium::YEAR, SchemaType::Int32),
        Enum(labels) => {
            debezium::enum_builder(&labels.iter().map(String::as_str).collect::<Vec<_>>())
        }
        Set(labels) => debezium::builder(debezium::ENUM_SET, SchemaType::String)
            .parameter("allowed", labels.join(",")),
        Json => debezium::builder(debezium::JSON, SchemaType::String),
        Geometry => SchemaBuilder::struct_()
            .name(debezium::GEOMETRY)
            .version(1)
            .doc("Geometry")
            .field("wkb", Schema::bytes())
            .field("srid", Schema::optional_int32()),
    }
}

/// Parses `YYYY-MM-DD[ HH:MM:SS[.ffffff]]` into (y, m, d, micros of day).
fn parse_datetime_text(s: &str) -> Option<(i64, u32, u32, i64)> {
    let (d, t) = match s.split_once([' ', 'T']) {
        Some((d, t)) => (d, Some(t)),
        None => (s, None),
    };
    let mut it = d.split('-');
    let y: i64 = it.next()?.parse().ok()?;
    let m: u32 = it.next()?.parse().ok()?;
    let dd: u32 = it.next()?.parse().ok()?;
    let micros = match t {
        Some(t) => parse_time_text(t)?,
        None => 0,
    };
    Some((y, m, dd, micros))
}

/// Parses `[-]H+:MM:SS[.ffffff]` into signed microseconds.
fn parse_time_text(s: &str) -> Option<i64> {
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let (hms, frac) = match s.split_once('.') {
        Some((a, b)) => (a, b),
        None => (s, ""),
    };
    let mut it = hms.split(':');
    let h: i64 = it.next()?.parse().ok()?;
    let mi: i64 = it.next()?.parse().ok()?;
    let se: i64 = it.next()?.parse().ok()?;
    let us = headwater_connector_common::text::micros_of_fraction(frac)?;
    let v = ((h * 60 + mi) * 60 + se) * 1_000_000 + us;
    Some(if neg { -v } else { v })
}

/// ISO-8601 UTC text of an instant with `fsp` fraction digits (Debezium's ZonedTimestamp).
pub fn zoned_timestamp(epoch_micros: i64, fsp: u32) -> String {
    use headwater_connector_common::text::push_digits;
    let days = epoch_micros.div_euclid(86_400_000_000);
    let rem = epoch_micros.rem_euclid(86_400_000_000);
    let (y, m, d) = civil_from_days(days);
    let secs = rem / 1_000_000;
    let us = rem % 1_000_000;
    let mut s = String::with_capacity(32);
    let two = |s: &mut String, v: i64, sep: char| {
        push_digits(s, v as u64, 2);
        s.push(sep);
    };
    if (0..=9999).contains(&y) {
        push_digits(&mut s, y as u64, 4);
    } else {
        s.push_str(&format!("{y:04}"));
    }
    s.push('-');
    two(&mut s, i64::from(m), '-');
    two(&mut s, i64::from(d), 'T');
    two(&mut s, secs / 3600, ':');
    two(&mut s, secs / 60 % 60, ':');
    push_digits(&mut s, (secs % 60) as u64, 2);
    if fsp > 0 {
        let w = fsp.min(6);
        s.push('.');
        push_digits(&mut s, (us / 10i64.pow(6 - w)) as u64, w as usize);
    }
    s.push('Z');
    s
}

fn bytes_of(v: MyValue) -> Result<Vec<u8>, TypeError> {
    match v {
        MyValue::Bytes(b) => Ok(b),
        MyValue::Int(i) => Ok(i.to_string().into_bytes()),
        MyValue::UInt(u) => Ok(u.to_string().into_bytes()),
        other => Err(err(format!("unexpected value {other:?}"))),
    }
}

fn text_of(v: MyValue) -> Result<String, TypeError> {
    String::from_utf8(bytes_of(v)?).map_err(|_| err("value is not valid UTF-8"))
}

fn int_of(v: MyValue) -> Result<i128, TypeError> {
    match v {
        MyValue::Int(i) => Ok(i128::from(i)),
        MyValue::UInt(u) => Ok(i128::from(u)),
        MyValue::Bytes(b) => std::str::from_utf8(&b)
            .ok()
            .and_then(|s| s.trim().parse::<i128>().ok())
            .ok_or_else(|| err("not an integer")),
        other => Err(err(format!("unexpected integer value {other:?}"))),
    }
}

fn float_of(v: MyValue) -> Result<f64, TypeError> {
    match v {
        MyValue::Float(f) => Ok(f64::from(f)),
        MyValue::Double(d) => Ok(d),
        MyValue::Int(i) => Ok(i as f64),
        MyValue::UInt(u) => Ok(u as f64),
        MyValue::Bytes(b) => std::str::from_utf8(&b)
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok())
            .ok_or_else(|| err("not a number")),
        other => Err(err(format!("unexpected float value {other:?}"))),
    }
}

fn encode_binary(bytes: Vec<u8>, mode: BinaryMode) -> Value {
    match mode {
        BinaryMode::Bytes => Value::Bytes(bytes),
        BinaryMode::Base64 => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
        }
        BinaryMode::Base64UrlSafe => {
            Value::String(base64::engine::general_purpose::URL_SAFE.encode(bytes))
        }
        BinaryMode::Hex => Value::String(bytes.iter().map(|b| format!("{b:02x}")).collect()),
    }
}

/// (y, m, d, micros of day) of a DATE/DATETIME value in either form.
fn datetime_parts(v: MyValue) -> Result<Option<(i64, u32, u32, i64)>, TypeError> {
    let parts = match v {
        MyValue::Date(y, m, d, h, mi, s, us) => (
            i64::from(y),
            u32::from(m),
            u32::from(d),
            ((i64::from(h) * 60 + i64::from(mi)) * 60 + i64::from(s)) * 1_000_000 + i64::from(us),
        ),
        MyValue::Bytes(b) => {
            let s = String::from_utf8(b).map_err(|_| err("date is not UTF-8"))?;
            parse_datetime_text(&s).ok_or_else(|| err(format!("cannot parse date {s:?}")))?
        }
        other => return Err(err(format!("unexpected date value {other:?}"))),
    };
    // Zero dates ('0000-00-00') have no instant: Debezium writes null.
    if parts.1 == 0 || parts.2 == 0 {
        return Ok(None);
    }
    Ok(Some(parts))
}

/// Converts one raw value of a column into its Connect value (`Value::Null` for SQL NULL).
pub fn convert(
    spec: &ColumnSpec,
    v: MyValue,
    origin: Origin,
    m: &MappingConfig,
) -> Result<Value, TypeError> {
    use MyType::*;
    if matches!(v, MyValue::NULL) {
        return Ok(Value::Null);
    }
    Ok(match &spec.ty {
        TinyInt => Value::Int16(int_of(v)? as i16),
        SmallInt if !spec.unsigned => Value::Int16(int_of(v)? as i16),
        MediumInt if !spec.unsigned => {
            // mysql_common does not sign-extend 24-bit binlog values.
            let i = int_of(v)?;
            Value::Int32(if i > 8_388_607 { i - 16_777_216 } else { i } as i32)
        }
        SmallInt | MediumInt => Value::Int32(int_of(v)? as i32),
        Int if spec.unsigned => Value::Int64(int_of(v)? as i64),
        Int => Value::Int32(int_of(v)? as i32),
        BigInt if spec.unsigned && m.bigint == BigintMode::Precise => {
            Value::Bytes(decimal::unscaled_from_i128(int_of(v)?))
        }
        BigInt => Value::Int64(int_of(v)? as i64),
        Decimal { scale, .. } => {
            let s = text_of(v)?;
            match m.decimal {
                DecimalMode::Precise => Value::Bytes(
                    decimal::unscaled_from_str(s.trim(), *scale as i32)
                        .map_err(|e| err(e.message().to_owned()))?,
                ),
                DecimalMode::Double => Value::Float64(
                    s.trim()
                        .parse()
                        .map_err(|_| err(format!("bad decimal {s:?}")))?,
                ),
                DecimalMode::String => Value::String(s.trim().to_owned()),
            }
        }
        Float => Value::Float32(float_of(v)? as f32),
        Double => Value::Float64(float_of(v)?),
        Bit(n) => {
            let mut be = bytes_of(v)?;
            let len = (*n as usize).div_ceil(8);
            if be.len() > len {
                be.drain(..be.len() - len);
            }
            if *n == 1 {
                Value::Boolean(be.iter().any(|b| *b != 0))
            } else {
                // Debezium writes BIT(n) little-endian, exactly ceil(n/8) bytes.
                let mut le: Vec<u8> = be.into_iter().rev().collect();
                le.resize(len, 0);
                Value::Bytes(le)
            }
        }
        Text(cs) => {
            let b = bytes_of(v)?;
            let s = match (origin, cs) {
                (Origin::Binlog, Charset::Latin1) => b.iter().map(|&c| c as char).collect(),
                _ => String::from_utf8(b).map_err(|_| err("string is not valid UTF-8"))?,
            };
            Value::String(s)
        }
        Binary { fixed } => {
            let mut b = bytes_of(v)?;
            if let Some(n) = fixed {
                if b.len() < *n {
                    b.resize(*n, 0);
                }
            }
            encode_binary(b, m.binary)
        }
        Date => match datetime_parts(v)? {
            None => Value::Null,
            Some((y, mo, d, _)) => Value::Int32(days_from_civil(y, mo, d) as i32),
        },
        Time(_) => {
            let us = match v {
                MyValue::Time(neg, days, h, mi, s, us) => {
                    let t = (((i64::from(days) * 24 + i64::from(h)) * 60 + i64::from(mi)) * 60
                        + i64::from(s))
                        * 1_000_000
                        + i64::from(us);
                    if neg {
                        -t
                    } else {
                        t
                    }
                }
                other => {
                    let s = text_of(other)?;
                    parse_time_text(&s).ok_or_else(|| err(format!("cannot parse time {s:?}")))?
                }
            };
            match m.time_precision {
                TimePrecisionMode::Connect => Value::Int32((us / 1000) as i32),
                _ => Value::Int64(us),
            }
        }
        DateTime(fsp) => match datetime_parts(v)? {
            None => Value::Null,
            Some((y, mo, d, tod)) => {
                let us = days_from_civil(y, mo, d) * 86_400_000_000 + tod;
                if *fsp <= 3 || m.time_precision == TimePrecisionMode::Connect {
                    Value::Int64(us.div_euclid(1000))
                } else {
                    Value::Int64(us)
                }
            }
        },
        Timestamp(fsp) => {
            let us = match (origin, v) {
                (_, MyValue::Int(secs)) => secs * 1_000_000,
                (Origin::Binlog, MyValue::Bytes(b)) => {
                    // TIMESTAMP2 as decoded by mysql_common: "secs" or "secs.micros".
                    let s = String::from_utf8(b).map_err(|_| err("timestamp is not UTF-8"))?;
                    let (a, f) = s.split_once('.').unwrap_or((&s, "0"));
                    let secs: i64 = a.parse().map_err(|_| err(format!("bad timestamp {s:?}")))?;
                    let frac: i64 = f.parse().map_err(|_| err(format!("bad timestamp {s:?}")))?;
                    secs * 1_000_000 + frac
                }
                (_, other) => match datetime_parts(other)? {
                    None => 0,
                    Some((y, mo, d, tod)) => days_from_civil(y, mo, d) * 86_400_000_000 + tod,
                },
            };
            if us == 0 {
                // The zero timestamp: no instant.
                Value::Null
            } else {
                Value::String(zoned_timestamp(us, *fsp))
            }
        }
        Year => Value::Int32(int_of(v)? as i32),
        Enum(labels) => match (origin, v) {
            (_, MyValue::Int(i)) => Value::String(label(labels, i)?),
            (_, MyValue::UInt(i)) => Value::String(label(labels, i as i64)?),
            (_, other) => Value::String(text_of(other)?),
        },
        Set(labels) => match origin {
            Origin::Binlog => {
                let bits = match v {
                    MyValue::Bytes(b) => b,
                    MyValue::Int(i) => i.to_le_bytes().to_vec(),
                    MyValue::UInt(u) => u.to_le_bytes().to_vec(),
                    other => return Err(err(format!("unexpected SET value {other:?}"))),
                };
                let picked: Vec<&str> = labels
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| bits.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0))
                    .map(|(_, l)| l.as_str())
                    .collect();
                Value::String(picked.join(","))
            }
            Origin::Text => Value::String(text_of(v)?),
        },
        Json => Value::String(text_of(v)?),
        Geometry => {
            let b = bytes_of(v)?;
            if b.len() < 4 {
                return Err(err("geometry value shorter than its SRID"));
            }
            let srid = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            let schema = column_schema(spec, m).build_ref();
            let mut st = Struct::new(schema).map_err(|e| err(e.message().to_owned()))?;
            st.put("wkb", Value::Bytes(b[4..].to_vec()))
                .map_err(|e| err(e.message().to_owned()))?;
            st.put("srid", Value::Int32(srid))
                .map_err(|e| err(e.message().to_owned()))?;
            Value::Struct(st)
        }
    })
}

fn label(labels: &[String], idx: i64) -> Result<String, TypeError> {
    if idx == 0 {
        return Ok(String::new());
    }
    labels
        .get((idx - 1) as usize)
        .cloned()
        .ok_or_else(|| err(format!("ENUM index {idx} out of range")))
}

/// Parses the `ENUM('a','b')` / `SET(...)` labels of an information_schema COLUMN_TYPE.
pub fn parse_labels(column_type: &str) -> Vec<String> {
    let inner = match (column_type.find('('), column_type.rfind(')')) {
        (Some(a), Some(b)) if b > a => &column_type[a + 1..b],
        _ => return Vec::new(),
    };
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_q = false;
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' if in_q && chars.peek() == Some(&'\'') => {
                cur.push('\'');
                chars.next();
            }
            '\'' => {
                if in_q {
                    out.push(std::mem::take(&mut cur));
                }
                in_q = !in_q;
            }
            '\\' if in_q => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            _ if in_q => cur.push(c),
            _ => {}
        }
    }
    out
}

/// The value a required column gets when the image has none (Debezium's fallbacks).
pub fn fallback_value(schema: &SchemaRef) -> Value {
    if let Some(d) = schema.default_value() {
        return d.clone();
    }
    match schema.name() {
        Some(debezium::ZONED_TIMESTAMP) => return Value::String("1970-01-01T00:00:00Z".into()),
        Some(decimal::LOGICAL_NAME) => return Value::Bytes(vec![0]),
        _ => {}
    }
    match schema.schema_type() {
        SchemaType::Int8 => Value::Int8(0),
        SchemaType::Int16 => Value::Int16(0),
        SchemaType::Int32 => Value::Int32(0),
        SchemaType::Int64 => Value::Int64(0),
        SchemaType::Float32 => Value::Float32(0.0),
        SchemaType::Float64 => Value::Float64(0.0),
        SchemaType::Boolean => Value::Boolean(false),
        SchemaType::String => Value::String(String::new()),
        SchemaType::Bytes => Value::Bytes(Vec::new()),
        _ => Value::Null,
    }
}

/// The default of a column from information_schema's COLUMN_DEFAULT text (MariaDB quotes
/// string literals; `NULL` and expressions other than CURRENT_TIMESTAMP give none).
pub fn default_from_text(
    spec: &ColumnSpec,
    text: Option<&str>,
    m: &MappingConfig,
) -> Option<Value> {
    let t = text?.trim();
    if t.eq_ignore_ascii_case("null") {
        return None;
    }
    let lower = t.to_ascii_lowercase();
    if lower.starts_with("current_timestamp") || lower.starts_with("now(") {
        // Debezium gives NOT NULL temporal columns defaulting to the current time the epoch.
        return match spec.ty {
            MyType::Timestamp(_) if !spec.optional => {
                Some(Value::String("1970-01-01T00:00:00Z".into()))
            }
            MyType::DateTime(_) if !spec.optional => Some(Value::Int64(0)),
            _ => None,
        };
    }
    let literal = if t.len() >= 2 && t.starts_with('\'') && t.ends_with('\'') {
        t[1..t.len() - 1].replace("''", "'")
    } else if t.contains('(') {
        return None;
    } else {
        t.to_owned()
    };
    let raw = match spec.ty {
        MyType::Bit(_) => {
            // b'1010'
            let bits = literal.trim_start_matches("b'").trim_end_matches('\'');
            let n = u64::from_str_radix(bits, 2).ok()?;
            MyValue::Bytes(n.to_be_bytes().to_vec())
        }
        _ => MyValue::Bytes(literal.into_bytes()),
    };
    match convert(spec, raw, Origin::Text, m) {
        Ok(v) if !v.is_null() => Some(v),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(ty: MyType, unsigned: bool) -> ColumnSpec {
        ColumnSpec {
            name: "c".into(),
            ty,
            unsigned,
            optional: true,
            default: None,
            length: None,
            source_type: None,
        }
    }

    fn cv(ty: MyType, unsigned: bool, v: MyValue, o: Origin) -> Value {
        convert(&spec(ty, unsigned), v, o, &MappingConfig::default()).unwrap()
    }

    #[test]
    fn values_match_the_golden_type_mapping() {
        use MyType::*;
        let t = Origin::Text;
        let b = Origin::Binlog;
        assert_eq!(
            cv(TinyInt, true, MyValue::Bytes(b"255".to_vec()), t),
            Value::Int16(255)
        );
        assert_eq!(
            cv(BigInt, true, MyValue::UInt(u64::MAX), b),
            Value::Int64(-1)
        );
        assert_eq!(
            cv(
                Decimal {
                    precision: 12,
                    scale: 2
                },
                false,
                MyValue::Bytes(b"1234567890.12".to_vec()),
                t
            ),
            Value::Bytes(
                base64::engine::general_purpose::STANDARD
                    .decode("HL6ZGhQ=")
                    .unwrap()
            )
        );
        assert_eq!(
            cv(Bit(4), false, MyValue::Bytes(vec![0x0a]), b),
            Value::Bytes(vec![0x0a])
        );
        assert_eq!(
            cv(Bit(16), false, MyValue::Bytes(vec![0x01, 0x02]), b),
            Value::Bytes(vec![0x02, 0x01])
        );
        assert_eq!(
            cv(Bit(64), false, MyValue::Bytes(vec![0]), t),
            Value::Bytes(vec![0; 8])
        );
        assert_eq!(
            cv(Binary { fixed: Some(4) }, false, MyValue::Bytes(vec![]), b),
            Value::Bytes(vec![0; 4])
        );
        assert_eq!(
            cv(Date, false, MyValue::Bytes(b"2024-02-29".to_vec()), t),
            Value::Int32(19782)
        );
        assert_eq!(
            cv(Date, false, MyValue::Date(1000, 1, 1, 0, 0, 0, 0), b),
            Value::Int32(-354285)
        );
        assert_eq!(
            cv(
                Time(6),
                false,
                MyValue::Bytes(b"-838:59:59.000000".to_vec()),
                t
            ),
            Value::Int64(-3020399000000)
        );
        assert_eq!(
            cv(
                Time(6),
                false,
                MyValue::Time(false, 34, 22, 59, 59, 999_999),
                b
            ),
            Value::Int64(3020399999999)
        );
        assert_eq!(
            cv(
                DateTime(0),
                false,
                MyValue::Bytes(b"2024-02-29 13:45:56".to_vec()),
                t
            ),
            Value::Int64(1709214356000)
        );
        assert_eq!(
            cv(
                DateTime(3),
                false,
                MyValue::Date(1970, 1, 1, 0, 0, 0, 1000),
                b
            ),
            Value::Int64(1)
        );
        assert_eq!(
            cv(
                DateTime(6),
                false,
                MyValue::Date(9999, 12, 31, 23, 59, 59, 999_999),
                b
            ),
            Value::Int64(253402300799999999)
        );
        assert_eq!(
            cv(Timestamp(6), false, MyValue::Bytes(b"1.0".to_vec()), b),
            Value::String("1970-01-01T00:00:01.000000Z".into())
        );
        assert_eq!(
            cv(
                Timestamp(6),
                false,
                MyValue::Bytes(b"2024-02-29 13:45:56.123456".to_vec()),
                t
            ),
            Value::String("2024-02-29T13:45:56.123456Z".into())
        );
        let labels = vec!["sad".to_owned(), "ok".into(), "happy".into()];
        assert_eq!(
            cv(Enum(labels.clone()), false, MyValue::Int(3), b),
            Value::String("happy".into())
        );
        let set = vec!["a".to_owned(), "b".into(), "c".into()];
        assert_eq!(
            cv(Set(set.clone()), false, MyValue::Bytes(vec![0b101]), b),
            Value::String("a,c".into())
        );
        assert_eq!(
            cv(Set(set), false, MyValue::Bytes(b"a,c".to_vec()), t),
            Value::String("a,c".into())
        );
        assert_eq!(
            cv(Year, false, MyValue::Bytes(b"2024".to_vec()), b),
            Value::Int32(2024)
        );
        assert_eq!(
            cv(Float, false, MyValue::Bytes(b"-3.4e38".to_vec()), t),
            Value::Float32(-3.4e38)
        );
        assert_eq!(
            cv(Text(Charset::Latin1), false, MyValue::Bytes(vec![0xfc]), b),
            Value::String("ü".into())
        );
        assert!(convert(
            &spec(Text(Charset::Utf8), false),
            MyValue::Bytes(vec![0xff]),
            b,
            &MappingConfig::default()
        )
        .is_err());
        assert_eq!(
            parse_labels("enum('sad','o''k','happy')"),
            vec!["sad", "o'k", "happy"]
        );
        let mut nn = spec(Text(Charset::Utf8), false);
        nn.optional = false;
        assert_eq!(
            default_from_text(&nn, Some("'dflt'"), &MappingConfig::default()),
            Some(Value::String("dflt".into()))
        );
        assert_eq!(
            default_from_text(&nn, Some("NULL"), &MappingConfig::default()),
            None
        );
        let mut ts = spec(Timestamp(6), false);
        ts.optional = false;
        assert_eq!(
            default_from_text(&ts, Some("current_timestamp(6)"), &MappingConfig::default()),
            Some(Value::String("1970-01-01T00:00:00Z".into()))
        );
    }
}
