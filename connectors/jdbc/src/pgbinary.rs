//! PostgreSQL's binary COPY format: how a Connect value is sent for the destination column's
//! type, so the server stores it without parsing text. In the text format, parsing numerics
//! and timestamps is a large part of a COPY's server-side cost; binary values of those types
//! are a few integers the server copies into place.
//!
//! The writer asks [`encoding_for`] per column (Connect schema, destination type OID). Only
//! pairs whose binary value means exactly what the text format's value means have an encoding;
//! a COPY where any column lacks one uses the text format instead, so every destination type
//! keeps working (enums, arrays, extension types, a `timestamptz` column fed a zone-less
//! timestamp, which text input reads in the session's time zone, ...).
//!
//! Invariants: decimals are exact (from their unscaled bytes, never through a float); zoned
//! timestamps become UTC microseconds (`infinity`/`-infinity` as PostgreSQL's sentinels);
//! temporal values follow the same unit conversions as the text renderer ([`crate::values`]);
//! an integer that does not fit its column, or a value that does not match its schema, is an
//! error naming the column, never a wrapped or guessed value.

use headwater_api::civil::days_from_civil;
use headwater_api::logical::{debezium, decimal};
use headwater_api::{ConnectError, Schema, SchemaType, Value};

/// The start of a binary COPY stream: signature, flags (none) and header extension length (0).
pub const HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";
/// The end of a binary COPY stream (a tuple field count of -1).
pub const TRAILER: &[u8] = &[0xff, 0xff];

/// Type OIDs of PostgreSQL's built-in types that have an encoding here.
pub mod oid {
    pub const BOOL: u32 = 16;
    pub const BYTEA: u32 = 17;
    pub const INT8: u32 = 20;
    pub const INT2: u32 = 21;
    pub const INT4: u32 = 23;
    pub const TEXT: u32 = 25;
    pub const JSON: u32 = 114;
    pub const FLOAT4: u32 = 700;
    pub const FLOAT8: u32 = 701;
    pub const BPCHAR: u32 = 1042;
    pub const VARCHAR: u32 = 1043;
    pub const DATE: u32 = 1082;
    pub const TIME: u32 = 1083;
    pub const TIMESTAMP: u32 = 1114;
    pub const TIMESTAMPTZ: u32 = 1184;
    pub const INTERVAL: u32 = 1186;
    pub const NUMERIC: u32 = 1700;
    pub const UUID: u32 = 2950;
    pub const JSONB: u32 = 3802;
}

/// The unit of a temporal integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Millis,
    Micros,
    Nanos,
}

impl Unit {
    /// Microseconds, as the text renderer computes them (milliseconds saturate, nanoseconds
    /// round toward negative infinity).
    fn micros(self, v: i64) -> i64 {
        match self {
            Unit::Millis => v.saturating_mul(1000),
            Unit::Micros => v,
            Unit::Nanos => v.div_euclid(1000),
        }
    }
}

/// How one column's values are written in binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryEncoding {
    Bool,
    Int2,
    Int4,
    Int8,
    Float4,
    Float8,
    /// `text`, `varchar`, `bpchar` and `json`: the string's UTF-8 bytes.
    Text,
    Jsonb,
    Bytea,
    Numeric,
    /// Days since 1970 (Connect and Debezium dates).
    Date,
    Time(Unit),
    /// `timestamp` from a zone-less epoch-based timestamp.
    Timestamp(Unit),
    /// `timestamptz` from Debezium's `ZonedTimestamp` string.
    TimestamptzFromString,
    /// `interval` from Debezium's `MicroDuration`.
    Interval,
    Uuid,
}

/// Microseconds between 1970-01-01 and PostgreSQL's epoch, 2000-01-01.
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;
/// Days between 1970-01-01 and 2000-01-01.
const PG_EPOCH_DAYS: i32 = 10_957;
const MICROS_PER_DAY: i64 = 86_400_000_000;
/// The largest display scale a numeric can carry.
const NUMERIC_DSCALE_MAX: i32 = 0x3FFF;

/// The binary encoding of values of `schema` for a column of type `type_oid` (domains resolved
/// to their base type), or `None` when such a column must be sent as text.
pub fn encoding_for(schema: &Schema, type_oid: u32) -> Option<BinaryEncoding> {
    use BinaryEncoding as E;
    let name = schema.name().unwrap_or("");
    let enc = match (schema.schema_type(), name, type_oid) {
        (SchemaType::Bytes, decimal::LOGICAL_NAME, oid::NUMERIC) => E::Numeric,
        (SchemaType::Bytes, decimal::LOGICAL_NAME, _) => return None,
        (SchemaType::Struct, debezium::VARIABLE_SCALE_DECIMAL, oid::NUMERIC) => E::Numeric,
        (SchemaType::Int32, "org.apache.kafka.connect.data.Date" | debezium::DATE, oid::DATE) => {
            E::Date
        }
        (SchemaType::Int32, "org.apache.kafka.connect.data.Time" | debezium::TIME, oid::TIME) => {
            E::Time(Unit::Millis)
        }
        (SchemaType::Int64, debezium::MICRO_TIME, oid::TIME) => E::Time(Unit::Micros),
        (SchemaType::Int64, debezium::NANO_TIME, oid::TIME) => E::Time(Unit::Nanos),
        (
            SchemaType::Int64,
            "org.apache.kafka.connect.data.Timestamp" | debezium::TIMESTAMP,
            oid::TIMESTAMP,
        ) => E::Timestamp(Unit::Millis),
        (SchemaType::Int64, debezium::MICRO_TIMESTAMP, oid::TIMESTAMP) => {
            E::Timestamp(Unit::Micros)
        }
        (SchemaType::Int64, debezium::NANO_TIMESTAMP, oid::TIMESTAMP) => E::Timestamp(Unit::Nanos),
        (SchemaType::Int64, debezium::MICRO_DURATION, oid::INTERVAL) => E::Interval,
        (SchemaType::String, debezium::ZONED_TIMESTAMP, oid::TIMESTAMPTZ) => {
            E::TimestamptzFromString
        }
        // Any other temporal logical type goes as text (its text form is what the column
        // parses; the integer would not mean the same).
        (
            SchemaType::Int32 | SchemaType::Int64,
            "org.apache.kafka.connect.data.Date"
            | "org.apache.kafka.connect.data.Time"
            | "org.apache.kafka.connect.data.Timestamp"
            | debezium::DATE
            | debezium::TIME
            | debezium::MICRO_TIME
            | debezium::NANO_TIME
            | debezium::TIMESTAMP
            | debezium::MICRO_TIMESTAMP
            | debezium::NANO_TIMESTAMP
            | debezium::MICRO_DURATION,
            _,
        ) => return None,
        (SchemaType::Boolean, _, oid::BOOL) => E::Bool,
        (SchemaType::Int8 | SchemaType::Int16, _, oid::INT2) => E::Int2,
        (SchemaType::Int8 | SchemaType::Int16 | SchemaType::Int32, _, oid::INT4) => E::Int4,
        (
            SchemaType::Int8 | SchemaType::Int16 | SchemaType::Int32 | SchemaType::Int64,
            _,
            oid::INT8,
        ) => E::Int8,
        (SchemaType::Float32, _, oid::FLOAT4) => E::Float4,
        (SchemaType::Float32 | SchemaType::Float64, _, oid::FLOAT8) => E::Float8,
        (SchemaType::String, _, oid::TEXT | oid::VARCHAR | oid::BPCHAR | oid::JSON) => E::Text,
        (SchemaType::String, _, oid::JSONB) => E::Jsonb,
        (SchemaType::String, _, oid::UUID) => E::Uuid,
        (SchemaType::Bytes, _, oid::BYTEA) => E::Bytea,
        _ => return None,
    };
    Some(enc)
}

fn bad(column: &str, schema: &Schema, value: &Value) -> ConnectError {
    ConnectError::data(format!(
        "column {column}: value {value:?} does not match its schema {:?} {}",
        schema.schema_type(),
        schema.name().unwrap_or("")
    ))
}

fn out_of_range(column: &str, value: &Value, what: &str) -> ConnectError {
    ConnectError::data(format!(
        "column {column}: value {value:?} is out of range for {what}"
    ))
}

/// Appends one field (length, then bytes; length -1 for NULL) of a binary COPY tuple.
pub fn encode(
    encoding: BinaryEncoding,
    column: &str,
    schema: &Schema,
    value: &Value,
    out: &mut Vec<u8>,
) -> Result<(), ConnectError> {
    use BinaryEncoding as E;
    let fixed = |out: &mut Vec<u8>, bytes: &[u8]| {
        out.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
        out.extend_from_slice(bytes);
    };
    let int = |v: &Value| -> Option<i64> {
        match *v {
            Value::Int8(x) => Some(i64::from(x)),
            Value::Int16(x) => Some(i64::from(x)),
            Value::Int32(x) => Some(i64::from(x)),
            Value::Int64(x) => Some(x),
            _ => None,
        }
    };
    if value.is_null() {
        out.extend_from_slice(&(-1i32).to_be_bytes());
        return Ok(());
    }
    match (encoding, value) {
        (E::Bool, Value::Boolean(b)) => fixed(out, &[u8::from(*b)]),
        (E::Int2, v) => {
            let x = int(v).ok_or_else(|| bad(column, schema, value))?;
            let x = i16::try_from(x).map_err(|_| out_of_range(column, value, "smallint"))?;
            fixed(out, &x.to_be_bytes());
        }
        (E::Int4, v) => {
            let x = int(v).ok_or_else(|| bad(column, schema, value))?;
            let x = i32::try_from(x).map_err(|_| out_of_range(column, value, "integer"))?;
            fixed(out, &x.to_be_bytes());
        }
        (E::Int8, v) => {
            let x = int(v).ok_or_else(|| bad(column, schema, value))?;
            fixed(out, &x.to_be_bytes());
        }
        (E::Float4, Value::Float32(x)) => fixed(out, &x.to_be_bytes()),
        (E::Float8, Value::Float32(x)) => fixed(out, &f64::from(*x).to_be_bytes()),
        (E::Float8, Value::Float64(x)) => fixed(out, &x.to_be_bytes()),
        (E::Text, Value::String(s)) => fixed(out, s.as_bytes()),
        (E::Jsonb, Value::String(s)) => {
            out.extend_from_slice(&(s.len() as i32 + 1).to_be_bytes());
            // jsonb's binary format: a version byte, then the JSON text.
            out.push(1);
            out.extend_from_slice(s.as_bytes());
        }
        (E::Bytea, Value::Bytes(b)) => fixed(out, b),
        (E::Numeric, Value::Bytes(b)) => {
            let scale = decimal::scale(schema).map_err(|_| bad(column, schema, value))?;
            numeric(b, scale, out).map_err(|what| out_of_range(column, value, what))?;
        }
        (E::Numeric, Value::Struct(s)) => {
            let (Some(Value::Int32(scale)), Some(Value::Bytes(b))) =
                (s.get("scale"), s.get("value"))
            else {
                return Err(bad(column, schema, value));
            };
            numeric(b, *scale, out).map_err(|what| out_of_range(column, value, what))?;
        }
        (E::Date, Value::Int32(days)) => {
            let d = days
                .checked_sub(PG_EPOCH_DAYS)
                .ok_or_else(|| out_of_range(column, value, "date"))?;
            fixed(out, &d.to_be_bytes());
        }
        (E::Time(unit), v) => {
            let x = int(v).ok_or_else(|| bad(column, schema, value))?;
            let micros = unit.micros(x).rem_euclid(MICROS_PER_DAY);
            fixed(out, &micros.to_be_bytes());
        }
        (E::Timestamp(unit), Value::Int64(x)) => {
            let t = unit
                .micros(*x)
                .checked_sub(PG_EPOCH_MICROS)
                .ok_or_else(|| out_of_range(column, value, "timestamp"))?;
            fixed(out, &t.to_be_bytes());
        }
        (E::TimestamptzFromString, Value::String(s)) => {
            let t = zoned_timestamp_pg_micros(s).ok_or_else(|| {
                ConnectError::data(format!(
                    "column {column}: {s:?} is not an ISO-8601 timestamp with an offset"
                ))
            })?;
            fixed(out, &t.to_be_bytes());
        }
        (E::Interval, Value::Int64(us)) => {
            out.extend_from_slice(&16i32.to_be_bytes());
            out.extend_from_slice(&us.to_be_bytes());
            out.extend_from_slice(&0i32.to_be_bytes()); // days
            out.extend_from_slice(&0i32.to_be_bytes()); // months
        }
        (E::Uuid, Value::String(s)) => {
            let u = uuid_bytes(s).ok_or_else(|| {
                ConnectError::data(format!("column {column}: {s:?} is not a UUID"))
            })?;
            fixed(out, &u);
        }
        _ => return Err(bad(column, schema, value)),
    }
    Ok(())
}

/// Appends a numeric field for the unscaled two's-complement `bytes` at `scale`: base-10000
/// digit groups aligned on the decimal point, leading and trailing zero groups dropped, the
/// display scale kept (so `1.50` stays `1.50`).
fn numeric(bytes: &[u8], scale: i32, out: &mut Vec<u8>) -> Result<(), &'static str> {
    let mut buffer = itoa::Buffer::new();
    let text;
    let (negative, magnitude): (bool, &str) = match decimal::unscaled_to_i128(bytes) {
        Some(v) => (v < 0, buffer.format(v.unsigned_abs())),
        None if bytes.is_empty() => (false, "0"),
        None => {
            // Wider than 128 bits: take the digits of the plain text form.
            text = decimal::unscaled_to_string(bytes, 0);
            match text.strip_prefix('-') {
                Some(digits) => (true, digits),
                None => (false, text.as_str()),
            }
        }
    };
    let digits = magnitude.as_bytes();
    // A negative scale multiplies by 10^-scale: that many zeros after the digits.
    let (extra_zeros, scale) = if scale < 0 {
        (scale.unsigned_abs() as usize, 0usize)
    } else {
        (0, scale as usize)
    };
    if scale > NUMERIC_DSCALE_MAX as usize {
        return Err("numeric (scale too large)");
    }
    let len = digits.len() + extra_zeros;
    let digit = |i: usize| -> u16 {
        // The i-th decimal digit of the magnitude (with the appended zeros).
        if i < digits.len() {
            u16::from(digits[i] - b'0')
        } else {
            0
        }
    };
    let int_len = len.saturating_sub(scale);
    let lead = (4 - int_len % 4) % 4;
    let int_groups = (int_len + lead) / 4;
    let frac_groups = scale.div_ceil(4);
    // Position of the first magnitude digit in the padded digit string
    // (zeros(lead) + integer digits + fraction digits + zeros).
    let first = lead + scale.saturating_sub(len);
    let group = |g: usize| -> u16 {
        let mut v = 0u16;
        for p in g * 4..g * 4 + 4 {
            v *= 10;
            if p >= first && p - first < len {
                v += digit(p - first);
            }
        }
        v
    };
    let total = int_groups + frac_groups;
    let lo = (0..total).find(|&g| group(g) != 0);
    let (ndigits, weight, first_group) = match lo {
        None => (0usize, 0i64, 0usize),
        Some(lo) => {
            let hi = (lo..total).rev().find(|&g| group(g) != 0).unwrap_or(lo);
            (hi - lo + 1, int_groups as i64 - 1 - lo as i64, lo)
        }
    };
    let weight = i16::try_from(weight).map_err(|_| "numeric (too many digits)")?;
    let ndigits_i16 = i16::try_from(ndigits).map_err(|_| "numeric (too many digits)")?;
    let sign: u16 = if negative && ndigits > 0 { 0x4000 } else { 0 };
    out.extend_from_slice(&((8 + 2 * ndigits) as i32).to_be_bytes());
    out.extend_from_slice(&ndigits_i16.to_be_bytes());
    out.extend_from_slice(&weight.to_be_bytes());
    out.extend_from_slice(&sign.to_be_bytes());
    out.extend_from_slice(&(scale as u16).to_be_bytes());
    for g in first_group..first_group + ndigits {
        out.extend_from_slice(&group(g).to_be_bytes());
    }
    Ok(())
}

fn two_digits(b: &[u8], at: usize) -> Option<u32> {
    let (h, l) = (*b.get(at)?, *b.get(at + 1)?);
    if h.is_ascii_digit() && l.is_ascii_digit() {
        Some(u32::from(h - b'0') * 10 + u32::from(l - b'0'))
    } else {
        None
    }
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` by hand, the form Debezium's
/// `ZonedTimestamp` strings have; `None` for anything else.
fn fast_zoned_unix_micros(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
        return None;
    }
    if b[16] != b':' {
        return None;
    }
    let year = i64::from(two_digits(b, 0)? * 100 + two_digits(b, 2)?);
    let (month, day) = (two_digits(b, 5)?, two_digits(b, 8)?);
    let (hour, minute, second) = (two_digits(b, 11)?, two_digits(b, 14)?, two_digits(b, 17)?);
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        _ => return None,
    };
    if day == 0 || day > days_in_month || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut i = 19;
    let mut micros = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        let mut scale = 100_000i64;
        let mut round_up = false;
        while let Some(c) = b.get(i).filter(|c| c.is_ascii_digit()) {
            let d = i64::from(c - b'0');
            if i - start < 6 {
                micros += d * scale;
                scale /= 10;
            } else if i - start == 6 {
                // Microseconds are PostgreSQL's precision: round half up on the seventh digit.
                round_up = d >= 5;
            }
            i += 1;
        }
        if i == start || i - start > 9 {
            return None;
        }
        micros += i64::from(round_up);
    }
    let offset_seconds = match b.get(i)? {
        b'Z' if i + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let (h, m) = (two_digits(b, i + 1)?, two_digits(b, i + 4)?);
            if h > 23 || m > 59 {
                return None;
            }
            let s = i64::from(h * 3600 + m * 60);
            if *sign == b'-' {
                -s
            } else {
                s
            }
        }
        _ => return None,
    };
    let seconds = days_from_civil(year, month, day) * 86_400
        + i64::from(hour * 3600 + minute * 60 + second)
        - offset_seconds;
    Some(seconds * 1_000_000 + micros)
}

/// A `ZonedTimestamp` string as PostgreSQL's binary `timestamptz`: microseconds since
/// 2000-01-01 UTC, `i64::MAX`/`i64::MIN` for `infinity`/`-infinity`.
fn zoned_timestamp_pg_micros(s: &str) -> Option<i64> {
    let unix = match fast_zoned_unix_micros(s) {
        Some(us) => us,
        None => match s {
            "infinity" => return Some(i64::MAX),
            "-infinity" => return Some(i64::MIN),
            _ => {
                let ts: jiff::Timestamp = s.parse().ok()?;
                ts.as_microsecond()
            }
        },
    };
    unix.checked_sub(PG_EPOCH_MICROS)
}

/// The 16 bytes of a UUID written as 32 hexadecimal digits, with or without hyphens and
/// braces (the forms PostgreSQL's `uuid` input takes).
fn uuid_bytes(s: &str) -> Option<[u8; 16]> {
    let s = s
        .strip_prefix('{')
        .and_then(|r| r.strip_suffix('}'))
        .unwrap_or(s);
    let mut out = [0u8; 16];
    let mut n = 0usize;
    for c in s.bytes() {
        if c == b'-' {
            continue;
        }
        let v = (c as char).to_digit(16)? as u8;
        let byte = out.get_mut(n / 2)?;
        *byte = (*byte << 4) | v;
        n += 1;
    }
    (n == 32).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use headwater_api::SchemaBuilder;

    fn field(enc: BinaryEncoding, schema: &Schema, value: Value) -> Vec<u8> {
        let mut out = Vec::new();
        encode(enc, "c", schema, &value, &mut out).unwrap();
        let len = i32::from_be_bytes(out[..4].try_into().unwrap());
        assert_eq!(len as usize, out.len() - 4, "length prefix");
        out.split_off(4)
    }

    fn numeric_of(unscaled: i128, scale: i32) -> (i16, i16, u16, u16, Vec<u16>) {
        let schema = decimal::builder(scale).build();
        let b = field(
            BinaryEncoding::Numeric,
            &schema,
            Value::Bytes(decimal::unscaled_from_i128(unscaled)),
        );
        let h = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let digits = (0..h(0) as usize).map(|k| h(8 + 2 * k)).collect();
        (h(0) as i16, h(2) as i16, h(4), h(6), digits)
    }

    #[test]
    fn numerics_are_base_10000_groups_around_the_point() {
        // (ndigits, weight, sign, dscale, digits), as PostgreSQL's numeric_send writes them.
        assert_eq!(numeric_of(12345, 2), (2, 0, 0, 2, vec![123, 4500]));
        assert_eq!(numeric_of(-12345, 2), (2, 0, 0x4000, 2, vec![123, 4500]));
        assert_eq!(numeric_of(5, 2), (1, -1, 0, 2, vec![500]));
        assert_eq!(numeric_of(100, 0), (1, 0, 0, 0, vec![100]));
        assert_eq!(numeric_of(10000, 0), (1, 1, 0, 0, vec![1]));
        assert_eq!(numeric_of(1, 5), (1, -2, 0, 5, vec![1000]));
        assert_eq!(numeric_of(150, 2), (2, 0, 0, 2, vec![1, 5000]));
        assert_eq!(numeric_of(0, 3), (0, 0, 0, 3, vec![]));
        assert_eq!(numeric_of(-0, 0), (0, 0, 0, 0, vec![]));
        assert_eq!(
            numeric_of(123_456_789_012, 4),
            (3, 1, 0, 4, vec![1234, 5678, 9012])
        );
        // Trailing zero groups are dropped, the display scale stays: 1.00000000.
        assert_eq!(numeric_of(100_000_000, 8), (1, 0, 0, 8, vec![1]));
        // A negative scale appends zeros: 7 * 10^5.
        assert_eq!(numeric_of(7, -5), (1, 1, 0, 0, vec![70]));
        // Wider than 128 bits: 10^40.
        let wide = decimal::unscaled_from_str(&format!("1{}", "0".repeat(40)), 0).unwrap();
        let b = field(
            BinaryEncoding::Numeric,
            &decimal::builder(0).build(),
            Value::Bytes(wide),
        );
        assert_eq!(&b[..8], &[0, 1, 0, 10, 0, 0, 0, 0]);
        assert_eq!(&b[8..], &[0, 1]);
    }

    #[test]
    fn zoned_timestamps_parse_fast_and_slow() {
        let pg = |s: &str| zoned_timestamp_pg_micros(s).unwrap();
        assert_eq!(pg("2000-01-01T00:00:00Z"), 0);
        assert_eq!(pg("2000-01-01T00:00:00.5Z"), 500_000);
        assert_eq!(pg("2000-01-01T01:00:00+01:00"), 0);
        assert_eq!(pg("1999-12-31T23:59:59.999999Z"), -1);
        assert_eq!(pg("2000-01-01T00:00:00.0000015Z"), 2);
        assert_eq!(pg("2024-02-29T12:34:56.123456Z"), {
            let ts: jiff::Timestamp = "2024-02-29T12:34:56.123456Z".parse().unwrap();
            ts.as_microsecond() - PG_EPOCH_MICROS
        });
        assert_eq!(pg("infinity"), i64::MAX);
        assert_eq!(pg("-infinity"), i64::MIN);
        // Not the fast form: jiff parses it.
        assert_eq!(pg("2000-01-01 00:00:00Z"), 0);
        assert!(zoned_timestamp_pg_micros("2023-02-29T00:00:00Z").is_none());
        assert!(zoned_timestamp_pg_micros("yesterday").is_none());
        for s in [
            "1970-01-01T00:00:00Z",
            "1900-03-01T00:00:00Z",
            "2399-12-31T23:59:59Z",
        ] {
            let ts: jiff::Timestamp = s.parse().unwrap();
            assert_eq!(fast_zoned_unix_micros(s), Some(ts.as_microsecond()), "{s}");
        }
    }

    #[test]
    fn uuids_with_and_without_hyphens() {
        let u = uuid_bytes("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11").unwrap();
        assert_eq!(u[0], 0xa0);
        assert_eq!(u[15], 0x11);
        assert_eq!(uuid_bytes("{a0eebc999c0b4ef8bb6d6bb9bd380a11}"), Some(u));
        assert!(uuid_bytes("a0eebc99").is_none());
        assert!(uuid_bytes("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11ff").is_none());
        assert!(uuid_bytes("g0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11").is_none());
    }

    #[test]
    fn encodings_only_where_binary_means_the_same_as_text() {
        let zoned = SchemaBuilder::string()
            .name(debezium::ZONED_TIMESTAMP)
            .build();
        assert_eq!(
            encoding_for(&zoned, oid::TIMESTAMPTZ),
            Some(BinaryEncoding::TimestamptzFromString)
        );
        // A zoned string into a zone-less column, a zone-less timestamp into timestamptz:
        // text input handles the zone differently, so text it is.
        assert_eq!(encoding_for(&zoned, oid::TIMESTAMP), None);
        let micro = SchemaBuilder::int64()
            .name(debezium::MICRO_TIMESTAMP)
            .build();
        assert_eq!(encoding_for(&micro, oid::TIMESTAMPTZ), None);
        assert_eq!(encoding_for(&micro, oid::INT8), None);
        assert_eq!(encoding_for(&Schema::int64(), oid::INT4), None);
        assert_eq!(
            encoding_for(&Schema::int16(), oid::INT8),
            Some(BinaryEncoding::Int8)
        );
        assert_eq!(encoding_for(&Schema::float64(), oid::FLOAT4), None);
        assert_eq!(encoding_for(&Schema::string(), 16_384), None);
        assert_eq!(
            encoding_for(&SchemaBuilder::array(Schema::int32()).build(), 1007),
            None
        );
    }

    #[test]
    fn out_of_range_and_mismatched_values_are_errors() {
        let mut out = Vec::new();
        let e = encode(
            BinaryEncoding::Int2,
            "qty",
            &Schema::int32(),
            &Value::Int32(70_000),
            &mut out,
        )
        .unwrap_err();
        assert!(e.to_string().contains("qty"), "{e}");
        assert!(encode(
            BinaryEncoding::Int8,
            "c",
            &Schema::int64(),
            &Value::String("1".into()),
            &mut out
        )
        .is_err());
        out.clear();
        encode(
            BinaryEncoding::Text,
            "c",
            &Schema::string(),
            &Value::Null,
            &mut out,
        )
        .unwrap();
        assert_eq!(out, (-1i32).to_be_bytes());
    }
}
