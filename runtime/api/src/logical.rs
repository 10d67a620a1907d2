//! Kafka Connect's logical types and Debezium's semantic types: their names, schema builders and
//! the conversions between their wire representation and ordinary Rust values.
//!
//! Values stay in their base representation (see [`crate::value`]); this module is where the
//! meaning of that representation is defined. `Decimal` conversions are exact for any precision
//! (PostgreSQL `numeric` can have thousands of digits): the unscaled value is a big-endian
//! two's-complement byte string, minimal in length, as Java's `BigInteger.toByteArray()` writes it.

use crate::error::DataError;
use crate::schema::{Schema, SchemaBuilder};

/// `org.apache.kafka.connect.data.Decimal`: bytes holding the unscaled value, `scale` parameter.
pub mod decimal {
    use super::*;

    pub const LOGICAL_NAME: &str = "org.apache.kafka.connect.data.Decimal";
    pub const SCALE_PARAMETER: &str = "scale";
    /// Parameter Debezium adds with the column's precision.
    pub const PRECISION_PARAMETER: &str = "connect.decimal.precision";

    /// A Decimal schema builder with the given scale (`Decimal.builder(scale)`).
    pub fn builder(scale: i32) -> SchemaBuilder {
        SchemaBuilder::bytes()
            .name(LOGICAL_NAME)
            .version(1)
            .parameter(SCALE_PARAMETER, scale.to_string())
    }

    /// The scale of a Decimal schema.
    pub fn scale(schema: &Schema) -> Result<i32, DataError> {
        let raw = schema
            .parameter(SCALE_PARAMETER)
            .ok_or_else(|| DataError::new("Invalid Decimal schema: scale parameter not found."))?;
        raw.parse()
            .map_err(|_| DataError::new(format!("Invalid scale for Decimal schema: {raw}")))
    }

    /// Minimal big-endian two's-complement bytes of an `i128` (as `BigInteger.toByteArray()`).
    pub fn unscaled_from_i128(value: i128) -> Vec<u8> {
        let bytes = value.to_be_bytes();
        let negative = value < 0;
        let filler = if negative { 0xff } else { 0x00 };
        let mut start = 0;
        // Drop leading filler bytes while the next byte still carries the sign.
        while start < bytes.len() - 1
            && bytes[start] == filler
            && ((bytes[start + 1] & 0x80) != 0) == negative
        {
            start += 1;
        }
        bytes[start..].to_vec()
    }

    /// The unscaled value as `i128`, or `None` if it does not fit (or is empty).
    pub fn unscaled_to_i128(bytes: &[u8]) -> Option<i128> {
        if bytes.is_empty() || bytes.len() > 16 {
            return None;
        }
        let filler = if bytes[0] & 0x80 != 0 { 0xff } else { 0x00 };
        let mut buf = [filler; 16];
        buf[16 - bytes.len()..].copy_from_slice(bytes);
        Some(i128::from_be_bytes(buf))
    }

    /// Parses a plain decimal string (`-12.345`, `7`, `.5`, `1e3` is rejected) into the unscaled
    /// two's-complement bytes at `scale`. Extra fraction digits beyond `scale` are an error
    /// (no silent rounding); missing ones are zero-filled.
    pub fn unscaled_from_str(text: &str, scale: i32) -> Result<Vec<u8>, DataError> {
        let bad = || DataError::new(format!("Invalid decimal value: {text:?}"));
        let (negative, digits) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
        };
        let (int_part, frac_part) = digits.split_once('.').unwrap_or((digits, ""));
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(bad());
        }
        if !int_part
            .bytes()
            .chain(frac_part.bytes())
            .all(|b| b.is_ascii_digit())
        {
            return Err(bad());
        }
        let frac_trimmed = frac_part.trim_end_matches('0');
        let scale_usize = usize::try_from(scale.max(0)).unwrap_or(0);
        if frac_trimmed.len() > scale_usize {
            return Err(DataError::new(format!(
                "Decimal value {text} has more fraction digits than scale {scale}"
            )));
        }
        let mut decimal_digits: Vec<u8> = int_part.bytes().map(|b| b - b'0').collect();
        decimal_digits.extend(frac_part.bytes().take(scale_usize).map(|b| b - b'0'));
        decimal_digits.extend(std::iter::repeat_n(
            0,
            scale_usize.saturating_sub(frac_part.len()),
        ));
        if scale < 0 {
            // Negative scale: the unscaled value is value / 10^-scale; it must divide exactly.
            let drop = usize::try_from(-scale).unwrap_or(0);
            let keep = decimal_digits.len().saturating_sub(drop);
            if decimal_digits[keep..].iter().any(|&d| d != 0) {
                return Err(bad());
            }
            decimal_digits.truncate(keep);
        }
        let magnitude = decimal_digits_to_base256(&decimal_digits);
        Ok(twos_complement(magnitude, negative))
    }

    /// Renders unscaled two's-complement bytes at `scale` as a plain decimal string, the way
    /// Java's `BigDecimal.toPlainString()` does (`-0.01`, `100`, `0.000`).
    pub fn unscaled_to_string(bytes: &[u8], scale: i32) -> String {
        if bytes.is_empty() {
            return "0".to_owned();
        }
        let negative = bytes[0] & 0x80 != 0;
        let magnitude = if negative {
            negate(bytes)
        } else {
            bytes.to_vec()
        };
        let mut digits = base256_to_decimal_digits(&magnitude);
        let mut out = String::with_capacity(digits.len() + 3);
        if negative && digits.iter().any(|&d| d != 0) {
            out.push('-');
        }
        if scale <= 0 {
            if digits.iter().all(|&d| d == 0) {
                out.push('0');
            } else {
                out.extend(digits.iter().map(|d| char::from(b'0' + d)));
                out.extend(std::iter::repeat_n(
                    '0',
                    usize::try_from(-scale).unwrap_or(0),
                ));
            }
            return out;
        }
        let scale = usize::try_from(scale).unwrap_or(0);
        if digits.len() <= scale {
            let mut padded = vec![0u8; scale + 1 - digits.len()];
            padded.extend_from_slice(&digits);
            digits = padded;
        }
        let split = digits.len() - scale;
        out.extend(digits[..split].iter().map(|d| char::from(b'0' + d)));
        out.push('.');
        out.extend(digits[split..].iter().map(|d| char::from(b'0' + d)));
        out
    }

    /// Decimal digits (most significant first) to an unsigned big-endian magnitude.
    fn decimal_digits_to_base256(digits: &[u8]) -> Vec<u8> {
        // Little-endian base-256 accumulator, multiplied by 10 and incremented per digit.
        let mut acc: Vec<u8> = Vec::with_capacity(digits.len() / 2 + 1);
        for &d in digits {
            let mut carry = u32::from(d);
            for byte in acc.iter_mut() {
                let v = u32::from(*byte) * 10 + carry;
                *byte = (v & 0xff) as u8;
                carry = v >> 8;
            }
            while carry > 0 {
                acc.push((carry & 0xff) as u8);
                carry >>= 8;
            }
        }
        acc.reverse();
        acc
    }

    /// Unsigned big-endian magnitude to decimal digits (most significant first, at least one).
    fn base256_to_decimal_digits(magnitude: &[u8]) -> Vec<u8> {
        let mut work: Vec<u8> = magnitude.to_vec();
        let mut out = Vec::with_capacity(magnitude.len() * 3);
        while work.iter().any(|&b| b != 0) {
            let mut rem = 0u32;
            for byte in work.iter_mut() {
                let v = (rem << 8) | u32::from(*byte);
                *byte = (v / 10) as u8;
                rem = v % 10;
            }
            out.push(rem as u8);
            let nz = work.iter().position(|&b| b != 0).unwrap_or(work.len());
            work.drain(..nz);
        }
        if out.is_empty() {
            out.push(0);
        }
        out.reverse();
        out
    }

    /// Minimal two's-complement encoding of a sign and unsigned magnitude.
    fn twos_complement(magnitude: Vec<u8>, negative: bool) -> Vec<u8> {
        let mut m = magnitude;
        let nz = m.iter().position(|&b| b != 0).unwrap_or(m.len());
        m.drain(..nz);
        if m.is_empty() {
            return vec![0];
        }
        if !negative {
            if m[0] & 0x80 != 0 {
                m.insert(0, 0);
            }
            return m;
        }
        let mut neg = negate(&m);
        if neg[0] & 0x80 == 0 {
            neg.insert(0, 0xff);
        }
        // Minimise: drop 0xff bytes whose successor keeps the sign bit.
        let mut start = 0;
        while start + 1 < neg.len() && neg[start] == 0xff && neg[start + 1] & 0x80 != 0 {
            start += 1;
        }
        neg.drain(..start);
        neg
    }

    /// Two's-complement negation of a big-endian byte string (same length).
    fn negate(bytes: &[u8]) -> Vec<u8> {
        let mut out: Vec<u8> = bytes.iter().map(|b| !b).collect();
        for byte in out.iter_mut().rev() {
            let (v, overflow) = byte.overflowing_add(1);
            *byte = v;
            if !overflow {
                break;
            }
        }
        out
    }
}

/// `org.apache.kafka.connect.data.Date`: int32 days since 1970-01-01.
pub mod date {
    use super::*;
    pub const LOGICAL_NAME: &str = "org.apache.kafka.connect.data.Date";
    pub fn builder() -> SchemaBuilder {
        SchemaBuilder::int32().name(LOGICAL_NAME).version(1)
    }
}

/// `org.apache.kafka.connect.data.Time`: int32 milliseconds since midnight.
pub mod time {
    use super::*;
    pub const LOGICAL_NAME: &str = "org.apache.kafka.connect.data.Time";
    pub fn builder() -> SchemaBuilder {
        SchemaBuilder::int32().name(LOGICAL_NAME).version(1)
    }
}

/// `org.apache.kafka.connect.data.Timestamp`: int64 milliseconds since the epoch.
pub mod timestamp {
    use super::*;
    pub const LOGICAL_NAME: &str = "org.apache.kafka.connect.data.Timestamp";
    pub fn builder() -> SchemaBuilder {
        SchemaBuilder::int64().name(LOGICAL_NAME).version(1)
    }
}

/// Debezium's semantic types (`io.debezium.time.*`, `io.debezium.data.*`). All are version 1
/// except where noted; the builders return required schemas, call `.optional()` as needed.
pub mod debezium {
    use super::*;
    use crate::schema::SchemaType;

    pub const DATE: &str = "io.debezium.time.Date";
    pub const TIME: &str = "io.debezium.time.Time";
    pub const MICRO_TIME: &str = "io.debezium.time.MicroTime";
    pub const NANO_TIME: &str = "io.debezium.time.NanoTime";
    pub const TIMESTAMP: &str = "io.debezium.time.Timestamp";
    pub const MICRO_TIMESTAMP: &str = "io.debezium.time.MicroTimestamp";
    pub const NANO_TIMESTAMP: &str = "io.debezium.time.NanoTimestamp";
    pub const ZONED_TIMESTAMP: &str = "io.debezium.time.ZonedTimestamp";
    pub const ZONED_TIME: &str = "io.debezium.time.ZonedTime";
    pub const YEAR: &str = "io.debezium.time.Year";
    pub const MICRO_DURATION: &str = "io.debezium.time.MicroDuration";
    pub const NANO_DURATION: &str = "io.debezium.time.NanoDuration";
    pub const INTERVAL: &str = "io.debezium.time.Interval";
    pub const ISO_DATE: &str = "io.debezium.time.IsoDate";
    pub const ISO_TIME: &str = "io.debezium.time.IsoTime";
    pub const ISO_TIMESTAMP: &str = "io.debezium.time.IsoTimestamp";
    pub const JSON: &str = "io.debezium.data.Json";
    pub const XML: &str = "io.debezium.data.Xml";
    pub const UUID: &str = "io.debezium.data.Uuid";
    pub const ENUM: &str = "io.debezium.data.Enum";
    pub const ENUM_SET: &str = "io.debezium.data.EnumSet";
    pub const BITS: &str = "io.debezium.data.Bits";
    pub const VARIABLE_SCALE_DECIMAL: &str = "io.debezium.data.VariableScaleDecimal";
    pub const LTREE: &str = "io.debezium.data.Ltree";
    pub const TSVECTOR: &str = "io.debezium.data.Tsvector";
    pub const DOUBLE_VECTOR: &str = "io.debezium.data.DoubleVector";
    pub const FLOAT_VECTOR: &str = "io.debezium.data.FloatVector";
    pub const SPARSE_DOUBLE_VECTOR: &str = "io.debezium.data.SparseDoubleVector";
    pub const GEOMETRY: &str = "io.debezium.data.geometry.Geometry";
    pub const GEOGRAPHY: &str = "io.debezium.data.geometry.Geography";
    pub const POINT: &str = "io.debezium.data.geometry.Point";

    /// Every semantic type name this module knows with its base type.
    pub const ALL: &[(&str, SchemaType)] = &[
        (DATE, SchemaType::Int32),
        (TIME, SchemaType::Int32),
        (MICRO_TIME, SchemaType::Int64),
        (NANO_TIME, SchemaType::Int64),
        (TIMESTAMP, SchemaType::Int64),
        (MICRO_TIMESTAMP, SchemaType::Int64),
        (NANO_TIMESTAMP, SchemaType::Int64),
        (ZONED_TIMESTAMP, SchemaType::String),
        (ZONED_TIME, SchemaType::String),
        (YEAR, SchemaType::Int32),
        (MICRO_DURATION, SchemaType::Int64),
        (NANO_DURATION, SchemaType::Int64),
        (INTERVAL, SchemaType::String),
        (ISO_DATE, SchemaType::String),
        (ISO_TIME, SchemaType::String),
        (ISO_TIMESTAMP, SchemaType::String),
        (JSON, SchemaType::String),
        (XML, SchemaType::String),
        (UUID, SchemaType::String),
        (ENUM, SchemaType::String),
        (ENUM_SET, SchemaType::String),
        (BITS, SchemaType::Bytes),
        (VARIABLE_SCALE_DECIMAL, SchemaType::Struct),
        (LTREE, SchemaType::String),
        (TSVECTOR, SchemaType::String),
        (DOUBLE_VECTOR, SchemaType::Array),
        (FLOAT_VECTOR, SchemaType::Array),
        (SPARSE_DOUBLE_VECTOR, SchemaType::Struct),
        (GEOMETRY, SchemaType::Struct),
        (GEOGRAPHY, SchemaType::Struct),
        (POINT, SchemaType::Struct),
    ];

    /// A version-1 semantic type over a primitive base type (`Date`, `MicroTimestamp`, `Json`, ...).
    /// For struct/array based names use the dedicated builders below.
    pub fn builder(name: &str, base: SchemaType) -> SchemaBuilder {
        SchemaBuilder::new(base).name(name).version(1)
    }

    /// `io.debezium.data.Enum` with its `allowed` values.
    pub fn enum_builder(allowed: &[&str]) -> SchemaBuilder {
        builder(ENUM, SchemaType::String).parameter("allowed", allowed.join(","))
    }

    /// `io.debezium.data.Bits` of `length` bits.
    pub fn bits_builder(length: u32) -> SchemaBuilder {
        builder(BITS, SchemaType::Bytes).parameter("length", length.to_string())
    }

    /// `io.debezium.data.VariableScaleDecimal`: struct `{scale: int32, value: bytes}`.
    pub fn variable_scale_decimal_builder() -> SchemaBuilder {
        SchemaBuilder::struct_()
            .name(VARIABLE_SCALE_DECIMAL)
            .version(1)
            .doc("Variable scaled decimal")
            .field("scale", Schema::int32())
            .field("value", Schema::bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::decimal::*;

    #[test]
    fn i128_bytes_match_java_biginteger() {
        assert_eq!(unscaled_from_i128(0), vec![0x00]);
        assert_eq!(unscaled_from_i128(127), vec![0x7f]);
        assert_eq!(unscaled_from_i128(128), vec![0x00, 0x80]);
        assert_eq!(unscaled_from_i128(-1), vec![0xff]);
        assert_eq!(unscaled_from_i128(-128), vec![0x80]);
        assert_eq!(unscaled_from_i128(-129), vec![0xff, 0x7f]);
        assert_eq!(unscaled_from_i128(1998), vec![0x07, 0xce]);
        for v in [
            -70000i128,
            -256,
            -255,
            0,
            1,
            255,
            256,
            65535,
            i64::MAX as i128,
            i128::MIN,
            i128::MAX,
        ] {
            assert_eq!(unscaled_to_i128(&unscaled_from_i128(v)), Some(v));
        }
    }

    #[test]
    fn string_roundtrip_matches_plain_string() {
        for (text, scale, plain) in [
            ("19.98", 2, "19.98"),
            ("-0.01", 2, "-0.01"),
            ("0", 0, "0"),
            ("9999999999", 0, "9999999999"),
            ("1234567890.12", 2, "1234567890.12"),
            ("5.5", 2, "5.50"),
            ("-0.000001", 6, "-0.000001"),
            (
                "3.14159265358979323846264338327950288",
                35,
                "3.14159265358979323846264338327950288",
            ),
            (
                "-123456789012345678901234567890123456789012345678901234567890",
                3,
                "-123456789012345678901234567890123456789012345678901234567890.000",
            ),
        ] {
            let bytes = unscaled_from_str(text, scale).unwrap();
            assert_eq!(unscaled_to_string(&bytes, scale), plain, "{text}");
        }
        // Matches the i128 encoder where both apply.
        assert_eq!(
            unscaled_from_str("-1.29", 2).unwrap(),
            unscaled_from_i128(-129)
        );
        assert_eq!(
            unscaled_from_str("19.98", 2).unwrap(),
            unscaled_from_i128(1998)
        );
        assert!(unscaled_from_str("1.234", 2).is_err());
        assert!(unscaled_from_str("abc", 2).is_err());
        assert!(unscaled_from_str("", 2).is_err());
    }
}
