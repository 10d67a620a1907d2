//! PostgreSQL types: what we know about a column's type ([`PgType`]), the Kafka Connect schema
//! Debezium gives it ([`column_schema`]) and the conversion of its binary wire value (pgoutput
//! `binary 'true'` and `COPY ... (FORMAT binary)`) into that schema's value ([`decode_binary`]).
//!
//! Invariants:
//! - one decoder serves both the snapshot and the stream, so a row reads the same either way;
//! - decoding never panics on malformed input: every length is checked and a bad value is a
//!   [`TypeError`] naming the type;
//! - the value returned always fits the schema [`column_schema`] built for the same
//!   [`ColumnType`] and [`MappingConfig`] (the unit tests check every type against the golden
//!   matrix values).

use std::sync::Arc;

use headwater_api::logical::{date, debezium, decimal, time, timestamp};
use headwater_api::{Schema, SchemaBuilder, SchemaRef, SchemaType, Struct, Value};

use crate::temporal::{self, PG_EPOCH_DAYS};

/// A PostgreSQL type as far as the mapping cares.
#[derive(Clone, Debug, PartialEq)]
pub enum PgType {
    Bool,
    Int2,
    Int4,
    Int8,
    Oid,
    Float4,
    Float8,
    Numeric,
    Money,
    /// text, varchar, bpchar, name, citext: UTF-8 text in both formats.
    Text,
    /// The one-byte `"char"` type.
    Char,
    Bytea,
    Date,
    Time,
    TimeTz,
    Timestamp,
    TimestampTz,
    Interval,
    Uuid,
    Json,
    Jsonb,
    Xml,
    Inet,
    Cidr,
    MacAddr,
    MacAddr8,
    Bit,
    VarBit,
    Point,
    Ltree,
    Hstore,
    Enum(Arc<[String]>),
    Range(Arc<TypeInfo>),
    Array(Arc<TypeInfo>),
    /// A domain over a base type, with the domain's own type modifier.
    Domain(Arc<TypeInfo>, i32),
    /// Anything else (composites, geometric types other than point, extension types).
    Unknown,
}

/// A resolved type: its OID, its name and what it is.
#[derive(Clone, Debug, PartialEq)]
pub struct TypeInfo {
    pub oid: u32,
    /// `typname`, schema-qualified outside `pg_catalog` (`public.mood`).
    pub name: String,
    /// `typname` alone.
    pub typname: String,
    pub kind: PgType,
}

impl TypeInfo {
    /// A type whose `typname` is `name` (a `pg_catalog` type).
    pub fn new(oid: u32, name: impl Into<String>, kind: PgType) -> Arc<TypeInfo> {
        let name = name.into();
        TypeInfo::named(oid, name.clone(), name, kind)
    }

    /// A type named `qualified`, whose `typname` is `typname`.
    pub fn named(oid: u32, qualified: String, typname: String, kind: PgType) -> Arc<TypeInfo> {
        Arc::new(TypeInfo {
            oid,
            name: qualified,
            typname,
            kind,
        })
    }
}

/// The built-in base type a `pg_catalog` type name stands for (`None` for types this mapping
/// treats by category: arrays, enums, ranges, domains, or unknown).
pub fn builtin_kind(typname: &str) -> Option<PgType> {
    Some(match typname {
        "bool" => PgType::Bool,
        "int2" => PgType::Int2,
        "int4" => PgType::Int4,
        "int8" => PgType::Int8,
        "oid" => PgType::Oid,
        "float4" => PgType::Float4,
        "float8" => PgType::Float8,
        "numeric" => PgType::Numeric,
        "money" => PgType::Money,
        "text" | "varchar" | "bpchar" | "name" | "citext" => PgType::Text,
        "char" => PgType::Char,
        "bytea" => PgType::Bytea,
        "date" => PgType::Date,
        "time" => PgType::Time,
        "timetz" => PgType::TimeTz,
        "timestamp" => PgType::Timestamp,
        "timestamptz" => PgType::TimestampTz,
        "interval" => PgType::Interval,
        "uuid" => PgType::Uuid,
        "json" => PgType::Json,
        "jsonb" => PgType::Jsonb,
        "xml" => PgType::Xml,
        "inet" => PgType::Inet,
        "cidr" => PgType::Cidr,
        "macaddr" => PgType::MacAddr,
        "macaddr8" => PgType::MacAddr8,
        "bit" => PgType::Bit,
        "varbit" => PgType::VarBit,
        "point" => PgType::Point,
        "ltree" => PgType::Ltree,
        "hstore" => PgType::Hstore,
        _ => return None,
    })
}

/// A column's type with its modifier (`atttypmod`, -1 when none).
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnType {
    pub info: Arc<TypeInfo>,
    pub typmod: i32,
}

impl ColumnType {
    /// Strips domains: the base type and the effective modifier.
    pub fn resolved(&self) -> (&TypeInfo, i32) {
        let mut info: &TypeInfo = &self.info;
        let mut typmod = self.typmod;
        while let PgType::Domain(base, dom_mod) = &info.kind {
            if typmod < 0 {
                typmod = *dom_mod;
            }
            info = base;
        }
        (info, typmod)
    }
}

/// `decimal.handling.mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecimalMode {
    Precise,
    Double,
    String,
}

/// `time.precision.mode` (the modes this build supports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimePrecisionMode {
    Adaptive,
    AdaptiveTimeMicroseconds,
    Connect,
}

/// `binary.handling.mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryMode {
    Bytes,
    Base64,
    Base64UrlSafe,
    Hex,
}

/// `interval.handling.mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntervalMode {
    Numeric,
    String,
}

/// `hstore.handling.mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HstoreMode {
    Json,
    Map,
}

/// The connector settings that change how a type maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappingConfig {
    pub decimal: DecimalMode,
    pub time_precision: TimePrecisionMode,
    pub binary: BinaryMode,
    pub interval: IntervalMode,
    pub hstore: HstoreMode,
    pub money_fraction_digits: i32,
    pub include_unknown: bool,
}

impl Default for MappingConfig {
    fn default() -> Self {
        MappingConfig {
            decimal: DecimalMode::Precise,
            time_precision: TimePrecisionMode::Adaptive,
            binary: BinaryMode::Bytes,
            interval: IntervalMode::Numeric,
            hstore: HstoreMode::Json,
            money_fraction_digits: 2,
            include_unknown: false,
        }
    }
}

/// A value that could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot decode a {type_name} value: {detail}")]
pub struct TypeError {
    pub type_name: String,
    pub detail: String,
}

fn terr(ti: &TypeInfo, detail: impl Into<String>) -> TypeError {
    TypeError {
        type_name: ti.name.clone(),
        detail: detail.into(),
    }
}

/// Precision and scale of a `numeric(p,s)` modifier.
pub fn numeric_precision_scale(typmod: i32) -> Option<(i32, i32)> {
    if typmod < 4 {
        return None;
    }
    let t = typmod - 4;
    let precision = (t >> 16) & 0xffff;
    // The scale is an 11-bit signed number (negative scales since PostgreSQL 15).
    let raw = t & 0x7ff;
    let scale = if raw & 0x400 != 0 { raw - 0x800 } else { raw };
    Some((precision, scale))
}

/// Fractional-second precision of a time/timestamp modifier (6 when unspecified).
fn time_precision(typmod: i32) -> i32 {
    if typmod < 0 {
        6
    } else {
        typmod & 0xffff
    }
}

/// The point schema Debezium uses (`io.debezium.data.geometry.Point`).
pub fn point_schema(optional: bool) -> SchemaBuilder {
    let b = SchemaBuilder::struct_()
        .name(debezium::POINT)
        .version(1)
        .doc("Geometry (POINT)")
        .field("x", Schema::float64())
        .field("y", Schema::float64())
        .field("wkb", SchemaBuilder::bytes().optional().build_ref())
        .field("srid", Schema::optional_int32());
    if optional {
        b.optional()
    } else {
        b
    }
}

/// The Connect schema builder of a column type, without optionality or default; `None` when the
/// type is not mapped (unknown type without `include.unknown.datatypes`).
pub fn column_schema(ct: &ColumnType, cfg: &MappingConfig) -> Option<SchemaBuilder> {
    let (ti, typmod) = ct.resolved();
    Some(match &ti.kind {
        PgType::Bool => SchemaBuilder::boolean(),
        PgType::Int2 => SchemaBuilder::int16(),
        PgType::Int4 => SchemaBuilder::int32(),
        PgType::Int8 | PgType::Oid => SchemaBuilder::int64(),
        PgType::Float4 => SchemaBuilder::float32(),
        PgType::Float8 => SchemaBuilder::float64(),
        PgType::Numeric => match cfg.decimal {
            DecimalMode::Precise => match numeric_precision_scale(typmod) {
                Some((p, s)) => {
                    decimal::builder(s).parameter(decimal::PRECISION_PARAMETER, p.to_string())
                }
                None => debezium::variable_scale_decimal_builder(),
            },
            DecimalMode::Double => SchemaBuilder::float64(),
            DecimalMode::String => SchemaBuilder::string(),
        },
        PgType::Money => match cfg.decimal {
            DecimalMode::Precise => decimal::builder(cfg.money_fraction_digits),
            DecimalMode::Double => SchemaBuilder::float64(),
            DecimalMode::String => SchemaBuilder::string(),
        },
        PgType::Text
        | PgType::Char
        | PgType::Inet
        | PgType::Cidr
        | PgType::MacAddr
        | PgType::MacAddr8
        | PgType::Range(_) => SchemaBuilder::string(),
        PgType::Bytea => match cfg.binary {
            BinaryMode::Bytes => SchemaBuilder::bytes(),
            _ => SchemaBuilder::string(),
        },
        PgType::Date => match cfg.time_precision {
            TimePrecisionMode::Connect => date::builder(),
            _ => debezium::builder(debezium::DATE, SchemaType::Int32),
        },
        PgType::Time => match cfg.time_precision {
            TimePrecisionMode::Connect => time::builder(),
            TimePrecisionMode::AdaptiveTimeMicroseconds => {
                debezium::builder(debezium::MICRO_TIME, SchemaType::Int64)
            }
            TimePrecisionMode::Adaptive => {
                if time_precision(typmod) <= 3 {
                    debezium::builder(debezium::TIME, SchemaType::Int32)
                } else {
                    debezium::builder(debezium::MICRO_TIME, SchemaType::Int64)
                }
            }
        },
        PgType::TimeTz => debezium::builder(debezium::ZONED_TIME, SchemaType::String),
        PgType::Timestamp => match cfg.time_precision {
            TimePrecisionMode::Connect => timestamp::builder(),
            _ => {
                if time_precision(typmod) <= 3 {
                    debezium::builder(debezium::TIMESTAMP, SchemaType::Int64)
                } else {
                    debezium::builder(debezium::MICRO_TIMESTAMP, SchemaType::Int64)
                }
            }
        },
        PgType::TimestampTz => debezium::builder(debezium::ZONED_TIMESTAMP, SchemaType::String),
        PgType::Interval => match cfg.interval {
            IntervalMode::Numeric => debezium::builder(debezium::MICRO_DURATION, SchemaType::Int64),
            IntervalMode::String => debezium::builder(debezium::INTERVAL, SchemaType::String),
        },
        PgType::Uuid => debezium::builder(debezium::UUID, SchemaType::String),
        PgType::Json | PgType::Jsonb => debezium::builder(debezium::JSON, SchemaType::String),
        PgType::Xml => debezium::builder(debezium::XML, SchemaType::String),
        PgType::Bit | PgType::VarBit => {
            let len = if typmod < 0 { i32::MAX } else { typmod };
            if matches!(ti.kind, PgType::Bit) && len == 1 {
                SchemaBuilder::boolean()
            } else {
                debezium::bits_builder(len as u32)
            }
        }
        PgType::Point => point_schema(false),
        PgType::Ltree => debezium::builder(debezium::LTREE, SchemaType::String),
        PgType::Hstore => match cfg.hstore {
            HstoreMode::Json => debezium::builder(debezium::JSON, SchemaType::String),
            HstoreMode::Map => SchemaBuilder::map(Schema::string(), Schema::optional_string()),
        },
        PgType::Enum(labels) => {
            let refs: Vec<&str> = labels.iter().map(String::as_str).collect();
            debezium::enum_builder(&refs)
        }
        PgType::Array(elem) => {
            let ect = ColumnType {
                info: elem.clone(),
                typmod,
            };
            let item = column_schema(&ect, cfg)?.optional().build_ref();
            SchemaBuilder::array(item)
        }
        PgType::Domain(..) => return None, // resolved() strips domains
        PgType::Unknown => {
            if cfg.include_unknown {
                SchemaBuilder::bytes()
            } else {
                return None;
            }
        }
    })
}

/// A bounds-checked reader over one binary value.
struct Bin<'a> {
    b: &'a [u8],
    ti: &'a TypeInfo,
}

impl<'a> Bin<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], TypeError> {
        if self.b.len() < n {
            return Err(terr(
                self.ti,
                format!("value too short (needed {n} more bytes)"),
            ));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn i16(&mut self) -> Result<i16, TypeError> {
        let s = self.take(2)?;
        Ok(i16::from_be_bytes([s[0], s[1]]))
    }
    fn i32(&mut self) -> Result<i32, TypeError> {
        let s = self.take(4)?;
        Ok(i32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn i64(&mut self) -> Result<i64, TypeError> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(i64::from_be_bytes(a))
    }
    fn f64(&mut self) -> Result<f64, TypeError> {
        Ok(f64::from_bits(self.i64()? as u64))
    }
    fn exact<const N: usize>(&mut self) -> Result<[u8; N], TypeError> {
        if self.b.len() != N {
            return Err(terr(
                self.ti,
                format!("expected {N} bytes, got {}", self.b.len()),
            ));
        }
        let mut a = [0u8; N];
        a.copy_from_slice(self.b);
        self.b = &[];
        Ok(a)
    }
    fn utf8(&self, bytes: &'a [u8]) -> Result<&'a str, TypeError> {
        std::str::from_utf8(bytes).map_err(|_| terr(self.ti, "invalid UTF-8"))
    }
}

/// A decoded PostgreSQL numeric.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PgNumeric {
    NaN,
    PosInfinity,
    NegInfinity,
    Finite {
        negative: bool,
        weight: i16,
        dscale: u16,
        digits: Vec<i16>,
    },
}

/// The unscaled value at `scale` of a finite binary numeric whose value fits an `i64` and
/// needs no rounding, read straight from the wire bytes (the common case of `numeric(p,s)`
/// columns); `None` for anything else, which [`PgNumeric`] handles.
pub fn numeric_unscaled_i64(raw: &[u8], scale: i32) -> Option<i64> {
    const POW10: [i64; 19] = {
        let mut p = [1i64; 19];
        let mut i = 1;
        while i < 19 {
            p[i] = p[i - 1] * 10;
            i += 1;
        }
        p
    };
    let word = |at: usize| -> Option<i16> {
        raw.get(at..at + 2)
            .map(|b| i16::from_be_bytes([b[0], b[1]]))
    };
    let ndigits = usize::try_from(word(0)?).ok()?;
    let weight = i32::from(word(2)?);
    let negative = match word(4)? as u16 {
        0x0000 => false,
        0x4000 => true,
        _ => return None,
    };
    if raw.len() != 8 + 2 * ndigits {
        return None;
    }
    let mut acc: i64 = 0;
    for i in 0..ndigits {
        let d = i64::from(word(8 + 2 * i)?);
        if !(0..10_000).contains(&d) {
            return None;
        }
        let exp = 4 * (weight - i as i32) + scale;
        let term = if exp >= 0 {
            if d == 0 {
                continue;
            }
            d.checked_mul(*POW10.get(exp as usize)?)?
        } else if exp > -4 {
            let div = POW10[(-exp) as usize];
            if d % div != 0 {
                return None;
            }
            d / div
        } else if d == 0 {
            0
        } else {
            return None;
        };
        acc = acc.checked_add(term)?;
    }
    Some(if negative { -acc } else { acc })
}

impl PgNumeric {
    pub fn parse(raw: &[u8], ti: &TypeInfo) -> Result<PgNumeric, TypeError> {
        let mut r = Bin { b: raw, ti };
        let ndigits = r.i16()?;
        let weight = r.i16()?;
        let sign = r.i16()? as u16;
        let dscale = r.i16()? as u16;
        match sign {
            0xC000 => return Ok(PgNumeric::NaN),
            0xD000 => return Ok(PgNumeric::PosInfinity),
            0xF000 => return Ok(PgNumeric::NegInfinity),
            0x0000 | 0x4000 => {}
            other => return Err(terr(ti, format!("bad numeric sign {other:#x}"))),
        }
        if ndigits < 0 || r.b.len() != ndigits as usize * 2 {
            return Err(terr(ti, "numeric digit count does not match its length"));
        }
        let mut digits = Vec::with_capacity(ndigits as usize);
        for _ in 0..ndigits {
            let d = r.i16()?;
            if !(0..10000).contains(&d) {
                return Err(terr(ti, format!("bad numeric digit {d}")));
            }
            digits.push(d);
        }
        Ok(PgNumeric::Finite {
            negative: sign == 0x4000,
            weight,
            dscale: dscale & 0x3fff,
            digits,
        })
    }

    /// The unscaled value at `scale` as an i128, if it fits and needs no rounding.
    pub fn unscaled_i128(&self, scale: i32) -> Option<i128> {
        let PgNumeric::Finite {
            negative,
            weight,
            digits,
            ..
        } = self
        else {
            return None;
        };
        let mut acc: i128 = 0;
        for (i, &d) in digits.iter().enumerate() {
            let exp = 4 * (i32::from(*weight) - i as i32) + scale;
            let d = i128::from(d);
            let term = if exp >= 0 {
                if exp > 38 {
                    if d == 0 {
                        continue;
                    }
                    return None;
                }
                d.checked_mul(10i128.checked_pow(exp as u32)?)?
            } else if exp > -4 {
                let div = 10i128.pow((-exp) as u32);
                if d % div != 0 {
                    return None;
                }
                d / div
            } else {
                if d != 0 {
                    return None;
                }
                0
            };
            acc = acc.checked_add(term)?;
        }
        Some(if *negative { -acc } else { acc })
    }

    /// The plain decimal text (`-12.340` with `dscale` fraction digits), or `NaN`/`Infinity`.
    pub fn to_plain_string(&self) -> String {
        let (negative, weight, dscale, digits) = match self {
            PgNumeric::NaN => return "NaN".into(),
            PgNumeric::PosInfinity => return "Infinity".into(),
            PgNumeric::NegInfinity => return "-Infinity".into(),
            PgNumeric::Finite {
                negative,
                weight,
                dscale,
                digits,
            } => (*negative, i32::from(*weight), usize::from(*dscale), digits),
        };
        let digit_at = |i: i32| -> i16 {
            if i < 0 {
                0
            } else {
                digits.get(i as usize).copied().unwrap_or(0)
            }
        };
        let mut int_part = String::new();
        if weight >= 0 {
            for i in 0..=weight {
                let d = digit_at(i);
                if int_part.is_empty() {
                    if d != 0 {
                        int_part.push_str(&d.to_string());
                    }
                } else {
                    int_part.push_str(&format!("{d:04}"));
                }
            }
        }
        if int_part.is_empty() {
            int_part.push('0');
        }
        let mut frac = String::new();
        let mut i = weight + 1;
        while frac.len() < dscale {
            frac.push_str(&format!("{:04}", digit_at(i)));
            i += 1;
        }
        frac.truncate(dscale);
        let is_zero = int_part == "0" && frac.bytes().all(|b| b == b'0');
        let mut out = String::with_capacity(int_part.len() + frac.len() + 2);
        if negative && !is_zero {
            out.push('-');
        }
        out.push_str(&int_part);
        if !frac.is_empty() {
            out.push('.');
            out.push_str(&frac);
        }
        out
    }

    /// The display scale.
    pub fn dscale(&self) -> i32 {
        match self {
            PgNumeric::Finite { dscale, .. } => i32::from(*dscale),
            _ => 0,
        }
    }

    /// Unscaled two's-complement bytes at `scale`.
    pub fn unscaled_bytes(&self, scale: i32, ti: &TypeInfo) -> Result<Vec<u8>, TypeError> {
        if let Some(v) = self.unscaled_i128(scale) {
            return Ok(decimal::unscaled_from_i128(v));
        }
        decimal::unscaled_from_str(&self.to_plain_string(), scale)
            .map_err(|e| terr(ti, e.message().to_owned()))
    }
}

fn binary_value(bytes: &[u8], mode: BinaryMode) -> Value {
    use base64::Engine as _;
    match mode {
        BinaryMode::Bytes => Value::Bytes(bytes.to_vec()),
        BinaryMode::Base64 => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
        }
        BinaryMode::Base64UrlSafe => {
            Value::String(base64::engine::general_purpose::URL_SAFE.encode(bytes))
        }
        BinaryMode::Hex => {
            let mut s = String::with_capacity(bytes.len() * 2);
            for b in bytes {
                s.push_str(&format!("{b:02x}"));
            }
            Value::String(s)
        }
    }
}

/// Debezium's `Bits` bytes of a bit string: `java.util.BitSet.toByteArray()` of the bits with
/// the last character as bit 0 (little-endian, minimal length, empty when no bit is set).
fn bits_to_bitset_bytes(nbits: usize, data: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; nbits.div_ceil(8)];
    let mut highest: Option<usize> = None;
    for i in 0..nbits {
        let set = data
            .get(i / 8)
            .map(|b| b & (0x80 >> (i % 8)) != 0)
            .unwrap_or(false);
        if set {
            let idx = nbits - 1 - i;
            out[idx / 8] |= 1 << (idx % 8);
            highest = Some(highest.map_or(idx, |h: usize| h.max(idx)));
        }
    }
    match highest {
        Some(h) => {
            out.truncate(h / 8 + 1);
            out
        }
        None => Vec::new(),
    }
}

fn inet_text(raw: &[u8], ti: &TypeInfo, always_bits: bool) -> Result<String, TypeError> {
    let mut r = Bin { b: raw, ti };
    let head = r.take(4)?;
    let (family, bits, nb) = (head[0], head[1], head[3] as usize);
    let addr = r.take(nb)?;
    let (text, max) = match (family, nb) {
        (2, 4) => (
            std::net::Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3]).to_string(),
            32,
        ),
        (3, 16) => {
            let mut a = [0u8; 16];
            a.copy_from_slice(addr);
            (std::net::Ipv6Addr::from(a).to_string(), 128)
        }
        _ => {
            return Err(terr(
                ti,
                format!("bad address family {family} / length {nb}"),
            ))
        }
    };
    if always_bits || bits != max {
        Ok(format!("{text}/{bits}"))
    } else {
        Ok(text)
    }
}

/// Quotes a range bound as PostgreSQL's `range_out` does.
fn range_bound(text: &str) -> String {
    let needs = text.is_empty()
        || text
            .chars()
            .any(|c| matches!(c, '"' | '\\' | '(' | ')' | '[' | ']' | ',') || c.is_whitespace());
    if !needs {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        if c == '"' || c == '\\' {
            out.push(c);
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// PostgreSQL's text output of a binary value, for the element types a range can have.
fn pg_text(ct: &ColumnType, raw: &[u8]) -> Result<String, TypeError> {
    let (ti, _) = ct.resolved();
    let mut r = Bin { b: raw, ti };
    Ok(match &ti.kind {
        PgType::Int2 => i16::from_be_bytes(r.exact::<2>()?).to_string(),
        PgType::Int4 => i32::from_be_bytes(r.exact::<4>()?).to_string(),
        PgType::Int8 => i64::from_be_bytes(r.exact::<8>()?).to_string(),
        PgType::Numeric => PgNumeric::parse(raw, ti)?.to_plain_string(),
        PgType::Date => match i32::from_be_bytes(r.exact::<4>()?) {
            i32::MAX => "infinity".into(),
            i32::MIN => "-infinity".into(),
            d => temporal::pg_date_text(i64::from(d) + i64::from(PG_EPOCH_DAYS)),
        },
        PgType::Timestamp | PgType::TimestampTz => {
            let v = i64::from_be_bytes(r.exact::<8>()?);
            match v {
                i64::MAX => "infinity".into(),
                i64::MIN => "-infinity".into(),
                v => {
                    let t = temporal::pg_timestamp_text(crate::pgoutput::pg_time_to_unix_micros(v));
                    if matches!(ti.kind, PgType::TimestampTz) {
                        format!("{t}+00")
                    } else {
                        t
                    }
                }
            }
        }
        PgType::Text => r.utf8(raw)?.to_owned(),
        _ => {
            return Err(terr(
                ti,
                "rendering this type as text inside a range is not supported yet",
            ))
        }
    })
}

/// Decodes one binary wire value of a column into its Connect value for the column's field
/// schema `schema` (as built from [`column_schema`]); SQL NULL is handled by the caller, but
/// values Debezium cannot represent (numeric NaN in precise mode) come back as `Null`.
pub fn decode_binary(
    ct: &ColumnType,
    raw: &[u8],
    cfg: &MappingConfig,
    schema: &SchemaRef,
) -> Result<Value, TypeError> {
    let (ti, typmod) = ct.resolved();
    let mut r = Bin { b: raw, ti };
    Ok(match &ti.kind {
        PgType::Bool => Value::Boolean(r.exact::<1>()?[0] != 0),
        PgType::Int2 => Value::Int16(i16::from_be_bytes(r.exact::<2>()?)),
        PgType::Int4 => Value::Int32(i32::from_be_bytes(r.exact::<4>()?)),
        PgType::Int8 => Value::Int64(i64::from_be_bytes(r.exact::<8>()?)),
        PgType::Oid => Value::Int64(i64::from(u32::from_be_bytes(r.exact::<4>()?))),
        PgType::Float4 => Value::Float32(f32::from_bits(u32::from_be_bytes(r.exact::<4>()?))),
        PgType::Float8 => Value::Float64(f64::from_bits(u64::from_be_bytes(r.exact::<8>()?))),
        PgType::Numeric => {
            if cfg.decimal == DecimalMode::Precise {
                if let Some((_, scale)) = numeric_precision_scale(typmod) {
                    if let Some(unscaled) = numeric_unscaled_i64(raw, scale) {
                        return Ok(Value::Bytes(decimal::unscaled_from_i128(i128::from(
                            unscaled,
                        ))));
                    }
                }
            }
            let n = PgNumeric::parse(raw, ti)?;
            match cfg.decimal {
                DecimalMode::Precise => {
                    if !matches!(n, PgNumeric::Finite { .. }) {
                        // Debezium: NaN and infinities have no BigDecimal: null.
                        return Ok(Value::Null);
                    }
                    match numeric_precision_scale(typmod) {
                        Some((_, s)) => Value::Bytes(n.unscaled_bytes(s, ti)?),
                        None => {
                            let scale = n.dscale();
                            let mut st =
                                Struct::new(schema.clone()).map_err(|e| terr(ti, e.message()))?;
                            let unscaled = n.unscaled_bytes(scale, ti)?;
                            st.put_at(0, Value::Int32(scale))
                                .and_then(|s| s.put_at(1, Value::Bytes(unscaled)))
                                .map_err(|e| terr(ti, e.message()))?;
                            Value::Struct(st)
                        }
                    }
                }
                DecimalMode::Double => Value::Float64(match n {
                    PgNumeric::NaN => f64::NAN,
                    PgNumeric::PosInfinity => f64::INFINITY,
                    PgNumeric::NegInfinity => f64::NEG_INFINITY,
                    _ => n.to_plain_string().parse().unwrap_or(f64::NAN),
                }),
                DecimalMode::String => Value::String(n.to_plain_string()),
            }
        }
        PgType::Money => {
            let cents = i128::from(i64::from_be_bytes(r.exact::<8>()?));
            let f = cfg.money_fraction_digits;
            let unscaled = if f >= 2 {
                cents * 10i128.pow((f - 2).min(30) as u32)
            } else {
                cents / 10i128.pow((2 - f).min(30) as u32)
            };
            match cfg.decimal {
                DecimalMode::Precise => Value::Bytes(decimal::unscaled_from_i128(unscaled)),
                DecimalMode::Double => Value::Float64(cents as f64 / 100.0),
                DecimalMode::String => Value::String(decimal::unscaled_to_string(
                    &decimal::unscaled_from_i128(cents),
                    2,
                )),
            }
        }
        PgType::Text | PgType::Json | PgType::Xml | PgType::Enum(_) => {
            Value::String(r.utf8(raw)?.to_owned())
        }
        PgType::Char => Value::String(String::from_utf8_lossy(raw).into_owned()),
        PgType::Jsonb | PgType::Ltree => {
            let body = r.take(1).and_then(|v| {
                if v[0] == 1 {
                    Ok(r.b)
                } else {
                    Err(terr(ti, format!("unknown binary version {}", v[0])))
                }
            })?;
            Value::String(r.utf8(body)?.to_owned())
        }
        PgType::Bytea => binary_value(raw, cfg.binary),
        PgType::Date => {
            let d = i32::from_be_bytes(r.exact::<4>()?);
            // Debezium's epochDay of PostgreSQL's raw value, wrapping like a Java int
            // (infinity = i32::MAX becomes -2147472692, as in the golden records).
            Value::Int32(d.wrapping_add(PG_EPOCH_DAYS))
        }
        PgType::Time => {
            let micros = i64::from_be_bytes(r.exact::<8>()?);
            let ms = || Value::Int32(micros.div_euclid(1000) as i32);
            match cfg.time_precision {
                TimePrecisionMode::Connect => ms(),
                TimePrecisionMode::AdaptiveTimeMicroseconds => Value::Int64(micros),
                TimePrecisionMode::Adaptive => {
                    if time_precision(typmod) <= 3 {
                        ms()
                    } else {
                        Value::Int64(micros)
                    }
                }
            }
        }
        PgType::TimeTz => {
            let micros = r.i64()?;
            let zone_west_secs = r.i32()?;
            let utc = micros + i64::from(zone_west_secs) * 1_000_000;
            Value::String(temporal::zoned_time(utc))
        }
        PgType::Timestamp => {
            let v = i64::from_be_bytes(r.exact::<8>()?);
            let millis_only =
                cfg.time_precision == TimePrecisionMode::Connect || time_precision(typmod) <= 3;
            Value::Int64(match v {
                i64::MAX => temporal::POSITIVE_INFINITY_MILLIS,
                i64::MIN => temporal::NEGATIVE_INFINITY_MILLIS,
                v => {
                    let unix = crate::pgoutput::pg_time_to_unix_micros(v);
                    if millis_only {
                        unix.div_euclid(1000)
                    } else {
                        unix
                    }
                }
            })
        }
        PgType::TimestampTz => {
            let v = i64::from_be_bytes(r.exact::<8>()?);
            Value::String(match v {
                i64::MAX => "infinity".into(),
                i64::MIN => "-infinity".into(),
                v => temporal::zoned_timestamp(
                    crate::pgoutput::pg_time_to_unix_micros(v),
                    Some(time_precision(typmod).clamp(0, 6) as usize),
                ),
            })
        }
        PgType::Interval => {
            let micros = r.i64()?;
            let days = r.i32()?;
            let months = r.i32()?;
            match cfg.interval {
                IntervalMode::Numeric => {
                    Value::Int64(temporal::interval_micros(months, days, micros))
                }
                IntervalMode::String => Value::String(temporal::interval_iso(months, days, micros)),
            }
        }
        PgType::Uuid => {
            let b = r.exact::<16>()?;
            let h: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
            Value::String(format!(
                "{}-{}-{}-{}-{}",
                h[0..4].concat(),
                h[4..6].concat(),
                h[6..8].concat(),
                h[8..10].concat(),
                h[10..16].concat()
            ))
        }
        PgType::Inet => Value::String(inet_text(raw, ti, false)?),
        PgType::Cidr => Value::String(inet_text(raw, ti, true)?),
        PgType::MacAddr | PgType::MacAddr8 => {
            let n = if matches!(ti.kind, PgType::MacAddr) {
                6
            } else {
                8
            };
            if raw.len() != n {
                return Err(terr(ti, format!("expected {n} bytes, got {}", raw.len())));
            }
            let parts: Vec<String> = raw.iter().map(|x| format!("{x:02x}")).collect();
            Value::String(parts.join(":"))
        }
        PgType::Bit | PgType::VarBit => {
            let nbits = r.i32()?;
            let nbits = usize::try_from(nbits).map_err(|_| terr(ti, "negative bit length"))?;
            if r.b.len() != nbits.div_ceil(8) {
                return Err(terr(ti, "bit length does not match the data"));
            }
            let len = if typmod < 0 { i32::MAX } else { typmod };
            if matches!(ti.kind, PgType::Bit) && len == 1 {
                Value::Boolean(r.b.first().is_some_and(|b| b & 0x80 != 0))
            } else {
                Value::Bytes(bits_to_bitset_bytes(nbits, r.b))
            }
        }
        PgType::Point => {
            let x = r.f64()?;
            let y = r.f64()?;
            let mut wkb = Vec::with_capacity(21);
            wkb.push(1u8);
            wkb.extend_from_slice(&1u32.to_le_bytes());
            wkb.extend_from_slice(&x.to_le_bytes());
            wkb.extend_from_slice(&y.to_le_bytes());
            let mut st = Struct::new(schema.clone()).map_err(|e| terr(ti, e.message()))?;
            st.put_at(0, Value::Float64(x))
                .and_then(|s| s.put_at(1, Value::Float64(y)))
                .and_then(|s| s.put_at(2, Value::Bytes(wkb)))
                .map_err(|e| terr(ti, e.message()))?;
            Value::Struct(st)
        }
        PgType::Hstore => {
            let n = r.i32()?;
            let n = usize::try_from(n).map_err(|_| terr(ti, "negative hstore count"))?;
            let mut pairs = Vec::with_capacity(n.min(raw.len()));
            for _ in 0..n {
                let kl = usize::try_from(r.i32()?).map_err(|_| terr(ti, "null hstore key"))?;
                let kb = r.take(kl)?;
                let k = r.utf8(kb)?.to_owned();
                let vl = r.i32()?;
                let v = if vl < 0 {
                    None
                } else {
                    let vb = r.take(vl as usize)?;
                    Some(r.utf8(vb)?.to_owned())
                };
                pairs.push((k, v));
            }
            match cfg.hstore {
                HstoreMode::Json => {
                    let mut m = serde_json::Map::new();
                    for (k, v) in pairs {
                        m.insert(
                            k,
                            v.map_or(serde_json::Value::Null, serde_json::Value::String),
                        );
                    }
                    Value::String(serde_json::Value::Object(m).to_string())
                }
                HstoreMode::Map => Value::Map(
                    pairs
                        .into_iter()
                        .map(|(k, v)| (Value::String(k), v.map_or(Value::Null, Value::String)))
                        .collect(),
                ),
            }
        }
        PgType::Range(sub) => {
            let flags = r.take(1)?[0];
            if flags & 0x01 != 0 {
                return Ok(Value::String("empty".into()));
            }
            let sub_ct = ColumnType {
                info: sub.clone(),
                typmod: -1,
            };
            let mut bound = |present: bool| -> Result<String, TypeError> {
                if !present {
                    return Ok(String::new());
                }
                let len =
                    usize::try_from(r.i32()?).map_err(|_| terr(ti, "bad range bound length"))?;
                let b = r.take(len)?;
                Ok(range_bound(&pg_text(&sub_ct, b)?))
            };
            let lower = bound(flags & 0x08 == 0 && flags & 0x20 == 0)?;
            let upper = bound(flags & 0x10 == 0 && flags & 0x40 == 0)?;
            Value::String(format!(
                "{}{lower},{upper}{}",
                if flags & 0x02 != 0 { '[' } else { '(' },
                if flags & 0x04 != 0 { ']' } else { ')' }
            ))
        }
        PgType::Array(elem) => {
            let ndim = r.i32()?;
            let _has_null = r.i32()?;
            let _elem_oid = r.i32()?;
            if !(0..=6).contains(&ndim) {
                return Err(terr(ti, format!("bad array dimension count {ndim}")));
            }
            let mut count: usize = if ndim == 0 { 0 } else { 1 };
            for _ in 0..ndim {
                let n = usize::try_from(r.i32()?).map_err(|_| terr(ti, "negative array size"))?;
                let _lbound = r.i32()?;
                count = count.saturating_mul(n);
            }
            if count > r.b.len() / 4 {
                return Err(terr(ti, "array larger than its data"));
            }
            let ect = ColumnType {
                info: elem.clone(),
                typmod,
            };
            let item_schema = schema
                .value_schema()
                .ok_or_else(|| terr(ti, "array column without an item schema"))?;
            let mut items = Vec::with_capacity(count);
            for _ in 0..count {
                let len = r.i32()?;
                if len < 0 {
                    items.push(Value::Null);
                } else {
                    let b = r.take(len as usize)?;
                    items.push(decode_binary(&ect, b, cfg, item_schema)?);
                }
            }
            Value::Array(items)
        }
        PgType::Domain(..) => return Err(terr(ti, "unresolved domain")),
        PgType::Unknown => Value::Bytes(raw.to_vec()),
    })
}

/// The value Debezium puts in a required column that has no value in an old row image (a
/// replica-identity-only `before`): the column default if it has one, otherwise the type's
/// zero (`0`, `""`, epoch, empty bytes, ...).
pub fn fallback_value(schema: &SchemaRef) -> Value {
    if let Some(d) = schema.default_value() {
        return d.clone();
    }
    match schema.name() {
        Some(debezium::ZONED_TIMESTAMP) => return Value::String("1970-01-01T00:00:00Z".into()),
        Some(debezium::ZONED_TIME) => return Value::String("00:00:00Z".into()),
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
        SchemaType::Array => Value::Array(Vec::new()),
        SchemaType::Map => Value::Map(Vec::new()),
        SchemaType::Struct => {
            let mut st = match Struct::new(schema.clone()) {
                Ok(s) => s,
                Err(_) => return Value::Null,
            };
            for f in schema.fields() {
                if !f.schema().is_optional() {
                    let _ = st.put_at(f.index(), fallback_value(f.schema()));
                }
            }
            Value::Struct(st)
        }
    }
}

/// The value that stands for an unchanged TOASTed column the server did not send
/// (`unavailable.value.placeholder`), shaped for the column's schema; `None` when the schema
/// cannot carry it (the caller then uses null or the fallback).
pub fn placeholder_value(schema: &Schema, placeholder: &str) -> Option<Value> {
    match schema.schema_type() {
        SchemaType::String => Some(Value::String(placeholder.to_owned())),
        SchemaType::Bytes if schema.name().is_none() => {
            Some(Value::Bytes(placeholder.as_bytes().to_vec()))
        }
        SchemaType::Array => {
            let item = schema.value_schema()?;
            placeholder_value(item, placeholder).map(|v| Value::Array(vec![v]))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    fn ct(kind: PgType, name: &str, typmod: i32) -> ColumnType {
        ColumnType {
            info: TypeInfo::new(0, name, kind),
            typmod,
        }
    }

    fn dec(c: &ColumnType, raw: &[u8], cfg: &MappingConfig) -> Result<Value, TypeError> {
        let schema = column_schema(c, cfg).unwrap().optional().build_ref();
        decode_binary(c, raw, cfg, &schema)
    }

    fn b64(v: &Value) -> String {
        match v {
            Value::Bytes(b) => base64::engine::general_purpose::STANDARD.encode(b),
            other => panic!("{other:?}"),
        }
    }

    fn numeric_bytes(weight: i16, sign: u16, dscale: u16, digits: &[i16]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&(digits.len() as i16).to_be_bytes());
        v.extend_from_slice(&weight.to_be_bytes());
        v.extend_from_slice(&sign.to_be_bytes());
        v.extend_from_slice(&dscale.to_be_bytes());
        for d in digits {
            v.extend_from_slice(&d.to_be_bytes());
        }
        v
    }

    #[test]
    fn the_numeric_fast_path_agrees_with_the_general_one() {
        let n = ct(PgType::Numeric, "numeric", -1);
        let mut rng = 0x2545_F491_4F6C_DD1Du64;
        let mut next = |m: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % m
        };
        let mut fast = 0;
        for case in 0..20_000 {
            let ndigits = next(7) as usize;
            let digits: Vec<i16> = (0..ndigits)
                .map(|_| match next(4) {
                    0 => 0,
                    1 => 9999,
                    _ => next(10_000) as i16,
                })
                .collect();
            let weight = next(12) as i16 - 6;
            let sign = if next(2) == 0 { 0 } else { 0x4000 };
            let raw = numeric_bytes(weight, sign, 4, &digits);
            let scale = next(12) as i32 - 2;
            let general = PgNumeric::parse(&raw, &n.info)
                .unwrap()
                .unscaled_i128(scale)
                .filter(|v| i64::try_from(*v).is_ok());
            let quick = numeric_unscaled_i64(&raw, scale).map(i128::from);
            assert_eq!(
                quick, general,
                "case {case}: {digits:?} weight {weight} scale {scale}"
            );
            fast += usize::from(quick.is_some());
        }
        assert!(fast > 5_000, "{fast}");
        // NaN, infinities and bad lengths are left to the general path.
        assert_eq!(
            numeric_unscaled_i64(&numeric_bytes(0, 0xC000, 0, &[]), 2),
            None
        );
        assert_eq!(
            numeric_unscaled_i64(&numeric_bytes(0, 0xD000, 0, &[]), 2),
            None
        );
        assert_eq!(numeric_unscaled_i64(&[0, 1, 0, 0], 2), None);
    }

    #[test]
    fn golden_matrix_values() {
        let cfg = MappingConfig::default();
        // numeric(12,2) 1234567890.12 -> "HL6ZGhQ="
        let n12 = ct(PgType::Numeric, "numeric", ((12 << 16) | 2) + 4);
        let raw = numeric_bytes(2, 0, 2, &[12, 3456, 7890, 1200]);
        assert_eq!(b64(&dec(&n12, &raw, &cfg).unwrap()), "HL6ZGhQ=");
        // -0.01 -> "/w=="
        let raw = numeric_bytes(-1, 0x4000, 2, &[100]);
        assert_eq!(b64(&dec(&n12, &raw, &cfg).unwrap()), "/w==");
        // numeric(10) 9999999999 -> "AlQL4/8="
        let n10 = ct(PgType::Numeric, "numeric", (10 << 16) + 4);
        let raw = numeric_bytes(2, 0, 0, &[99, 9999, 9999]);
        assert_eq!(b64(&dec(&n10, &raw, &cfg).unwrap()), "AlQL4/8=");
        // unconstrained -0.000001 -> {scale 6, value "/w=="}
        let n = ct(PgType::Numeric, "numeric", -1);
        let raw = numeric_bytes(-2, 0x4000, 6, &[100]);
        let v = dec(&n, &raw, &cfg).unwrap();
        let st = v.as_struct().unwrap();
        assert_eq!(st.get("scale"), Some(&Value::Int32(6)));
        assert_eq!(b64(st.get("value").unwrap()), "/w==");
        // NaN -> null in precise mode
        let raw = numeric_bytes(0, 0xC000, 0, &[]);
        assert_eq!(dec(&n, &raw, &cfg).unwrap(), Value::Null);
        assert_eq!(
            PgNumeric::parse(
                &numeric_bytes(
                    0,
                    0,
                    35,
                    &[3, 1415, 9265, 3589, 7932, 3846, 2643, 3832, 7950, 2880]
                ),
                &n.info
            )
            .unwrap()
            .to_plain_string(),
            "3.14159265358979323846264338327950288"
        );
        // money 12.34 -> "BNI="
        let money = ct(PgType::Money, "money", -1);
        assert_eq!(
            b64(&dec(&money, &1234i64.to_be_bytes(), &cfg).unwrap()),
            "BNI="
        );
        // bit(4) B'1010' -> "Cg==", varbit B'110' -> "Bg==", B'0000' -> ""
        let bit4 = ct(PgType::Bit, "bit", 4);
        let mut raw = 4i32.to_be_bytes().to_vec();
        raw.push(0xA0);
        assert_eq!(b64(&dec(&bit4, &raw, &cfg).unwrap()), "Cg==");
        let mut raw = 3i32.to_be_bytes().to_vec();
        raw.push(0xC0);
        assert_eq!(
            b64(&dec(&ct(PgType::VarBit, "varbit", 16), &raw, &cfg).unwrap()),
            "Bg=="
        );
        let mut raw = 4i32.to_be_bytes().to_vec();
        raw.push(0);
        assert_eq!(b64(&dec(&bit4, &raw, &cfg).unwrap()), "");
        // date infinity wraps like Debezium
        let d = ct(PgType::Date, "date", -1);
        assert_eq!(
            dec(&d, &i32::MAX.to_be_bytes(), &cfg).unwrap(),
            Value::Int32(-2147472692)
        );
        assert_eq!(
            dec(&d, &(-730_119i32).to_be_bytes(), &cfg).unwrap(),
            Value::Int32(-719162)
        );
        // timestamp infinity
        let ts = ct(PgType::Timestamp, "timestamp", -1);
        assert_eq!(
            dec(&ts, &i64::MAX.to_be_bytes(), &cfg).unwrap(),
            Value::Int64(9223372036825200000)
        );
        let ts3 = ct(PgType::Timestamp, "timestamp", 3);
        let minus_one_ms = -946_684_800_000_000i64 - 1000;
        assert_eq!(
            dec(&ts3, &minus_one_ms.to_be_bytes(), &cfg).unwrap(),
            Value::Int64(-1)
        );
        // timetz 13:45:56.123456+02
        let mut raw = 49_556_123_456i64.to_be_bytes().to_vec();
        raw.extend_from_slice(&(-7200i32).to_be_bytes());
        assert_eq!(
            dec(&ct(PgType::TimeTz, "timetz", -1), &raw, &cfg).unwrap(),
            Value::String("11:45:56.123456Z".into())
        );
        // interval 1 year 2 mons 3 days 04:05:06.789
        let mut raw = 14_706_789_000i64.to_be_bytes().to_vec();
        raw.extend_from_slice(&3i32.to_be_bytes());
        raw.extend_from_slice(&14i32.to_be_bytes());
        assert_eq!(
            dec(&ct(PgType::Interval, "interval", -1), &raw, &cfg).unwrap(),
            Value::Int64(37091106789000)
        );
        // inet / cidr
        let inet = ct(PgType::Inet, "inet", -1);
        assert_eq!(
            dec(&inet, &[2, 24, 0, 4, 192, 168, 1, 10], &cfg).unwrap(),
            Value::String("192.168.1.10/24".into())
        );
        let mut v6 = vec![3, 128, 0, 16];
        v6.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
        assert_eq!(dec(&inet, &v6, &cfg).unwrap(), Value::String("::1".into()));
        // point
        let mut raw = 1.5f64.to_be_bytes().to_vec();
        raw.extend_from_slice(&(-2.25f64).to_be_bytes());
        let p = dec(&ct(PgType::Point, "point", -1), &raw, &cfg).unwrap();
        assert_eq!(
            b64(p.as_struct().unwrap().get("wkb").unwrap()),
            "AQEAAAAAAAAAAAD4PwAAAAAAAALA"
        );
        // int4range [1,10)
        let mut raw = vec![0x02];
        raw.extend_from_slice(&4i32.to_be_bytes());
        raw.extend_from_slice(&1i32.to_be_bytes());
        raw.extend_from_slice(&4i32.to_be_bytes());
        raw.extend_from_slice(&10i32.to_be_bytes());
        let int4 = TypeInfo::new(23, "int4", PgType::Int4);
        let range = ct(PgType::Range(int4.clone()), "int4range", -1);
        assert_eq!(
            dec(&range, &raw, &cfg).unwrap(),
            Value::String("[1,10)".into())
        );
        assert_eq!(
            dec(&range, &[1], &cfg).unwrap(),
            Value::String("empty".into())
        );
        // int[] {1,2,NULL,4}
        let mut raw = Vec::new();
        for v in [1i32, 1, 23, 4, 1] {
            raw.extend_from_slice(&v.to_be_bytes());
        }
        for v in [Some(1i32), Some(2), None, Some(4)] {
            match v {
                Some(v) => {
                    raw.extend_from_slice(&4i32.to_be_bytes());
                    raw.extend_from_slice(&v.to_be_bytes());
                }
                None => raw.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        let arr = ct(PgType::Array(int4), "_int4", -1);
        assert_eq!(
            dec(&arr, &raw, &cfg).unwrap(),
            Value::Array(vec![
                Value::Int32(1),
                Value::Int32(2),
                Value::Null,
                Value::Int32(4)
            ])
        );
        let schema = column_schema(&arr, &cfg).unwrap().optional().build_ref();
        headwater_api::value::validate_value(&schema, &dec(&arr, &raw, &cfg).unwrap()).unwrap();
    }

    #[test]
    fn malformed_values_are_errors() {
        let cfg = MappingConfig::default();
        let int4 = TypeInfo::new(23, "int4", PgType::Int4);
        let kinds = vec![
            PgType::Bool,
            PgType::Int2,
            PgType::Int4,
            PgType::Int8,
            PgType::Numeric,
            PgType::Money,
            PgType::Jsonb,
            PgType::Date,
            PgType::Time,
            PgType::TimeTz,
            PgType::Timestamp,
            PgType::TimestampTz,
            PgType::Interval,
            PgType::Uuid,
            PgType::Inet,
            PgType::MacAddr,
            PgType::Bit,
            PgType::Point,
            PgType::Hstore,
            PgType::Range(int4.clone()),
            PgType::Array(int4),
        ];
        let mut x: u32 = 12345;
        for kind in kinds {
            let c = ct(kind, "t", -1);
            for len in 0..40 {
                let mut raw = Vec::with_capacity(len);
                for _ in 0..len {
                    x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    raw.push((x >> 16) as u8);
                }
                // Must return, never panic.
                if let Some(b) = column_schema(&c, &cfg) {
                    let _ = decode_binary(&c, &raw, &cfg, &b.optional().build_ref());
                }
            }
        }
        assert!(dec(&ct(PgType::Int4, "int4", -1), &[1, 2], &cfg).is_err());
    }

    #[test]
    fn fallbacks_and_placeholders() {
        let zts = debezium::builder(debezium::ZONED_TIMESTAMP, SchemaType::String).build_ref();
        assert_eq!(
            fallback_value(&zts),
            Value::String("1970-01-01T00:00:00Z".into())
        );
        assert_eq!(
            fallback_value(&decimal::builder(2).build_ref()),
            Value::Bytes(vec![0])
        );
        assert_eq!(
            fallback_value(&SchemaBuilder::int32().build_ref()),
            Value::Int32(0)
        );
        assert_eq!(
            placeholder_value(&SchemaBuilder::string().build(), "__x"),
            Some(Value::String("__x".into()))
        );
        assert_eq!(
            placeholder_value(&SchemaBuilder::int32().build(), "__x"),
            None
        );
        assert_eq!(numeric_precision_scale(((12 << 16) | 2) + 4), Some((12, 2)));
        assert_eq!(numeric_precision_scale(-1), None);
    }
}
