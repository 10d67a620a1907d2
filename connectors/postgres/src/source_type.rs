//! A column's type as Debezium's PostgreSQL connector describes it to column mappers
//! (`column.propagate.source.type`, `datatype.propagate.source.type`): the type name the JDBC
//! driver reports and the column size and decimal digits pgjdbc's `getColumns` gives, which
//! become `__debezium.source.column.type`, `.length` and `.scale`.
//!
//! Rules (pgjdbc's `TypeInfoCache` and `PgDatabaseMetaData.getColumns`, Debezium's
//! `PostgresConnection.doReadTableColumn`):
//! - the name is the type's `typname` (`int4`, `varchar`, `bpchar`, `_int4` for arrays, a
//!   domain's or enum's own name, unqualified); an `int2`/`int4`/`int8` column whose default
//!   calls `nextval(` is `smallserial`/`serial`/`bigserial`;
//! - the length is the type's precision for its modifier (arrays: their element type's), or
//!   its display size where the precision is 0 (not for `numeric`); types without a known
//!   size report `i32::MAX` (pgjdbc's `unknownLength`);
//! - the scale is the element type's scale for the modifier, absent for a `numeric` without
//!   a declared precision;
//! - a domain takes its base type's length and scale at the domain's own modifier.
//!
//! Debezium reads these from JDBC metadata for snapshots and from the pgoutput relation
//! message while streaming; the two agree except for a `numeric` without a declared
//! precision (streaming: length 131089, scale 0). This connector gives the JDBC form in both.

use crate::types::{ColumnType, PgType, TypeInfo};

/// The type facts of one column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceColumnType {
    pub name: String,
    pub length: Option<i64>,
    pub scale: Option<i64>,
}

const INT2: u32 = 21;
const INT4: u32 = 23;
const INT8: u32 = 20;
const OID: u32 = 26;
const FLOAT4: u32 = 700;
const FLOAT8: u32 = 701;
const NUMERIC: u32 = 1700;
const CHAR: u32 = 18;
const BOOL: u32 = 16;
const BPCHAR: u32 = 1042;
const VARCHAR: u32 = 1043;
const DATE: u32 = 1082;
const TIME: u32 = 1083;
const TIMETZ: u32 = 1266;
const TIMESTAMP: u32 = 1114;
const TIMESTAMPTZ: u32 = 1184;
const INTERVAL: u32 = 1186;
const BIT: u32 = 1560;
const VARBIT: u32 = 1562;

/// pgjdbc's length for types without one (its `unknownLength` default).
const UNKNOWN_LENGTH: i32 = i32::MAX;

/// The facts of a column of type `ct`; `serial` when its default calls `nextval(`.
pub fn describe(ct: &ColumnType, serial: bool) -> SourceColumnType {
    let info: &TypeInfo = &ct.info;
    let mut name = info.typname.clone();
    if serial {
        match info.oid {
            INT2 => name = "smallserial".into(),
            INT4 => name = "serial".into(),
            INT8 => name = "bigserial".into(),
            _ => {}
        }
    }
    let (length, scale) = match &info.kind {
        PgType::Domain(..) => domain_length_scale(info),
        _ => {
            let oid = element_oid(info);
            let mut length = precision(oid, ct.typmod);
            let is_numeric = info.oid == NUMERIC;
            if !is_numeric && length == 0 {
                length = display_size(oid, ct.typmod);
            }
            let scale = (!(is_numeric && ct.typmod == -1)).then(|| scale(oid, ct.typmod));
            (length, scale)
        }
    };
    SourceColumnType {
        name,
        length: Some(i64::from(length)),
        scale: scale.map(i64::from),
    }
}

/// The OID whose sizes an array takes: its element type's (pgjdbc's
/// `convertArrayToBaseOid`).
fn element_oid(info: &TypeInfo) -> u32 {
    match &info.kind {
        PgType::Array(element) => element.oid,
        _ => info.oid,
    }
}

/// Debezium's `PostgresType.getDefaultLength` / `getDefaultScale` for a domain: the base
/// type's at the domain's modifier (a domain without one takes its base's defaults).
fn domain_length_scale(info: &TypeInfo) -> (i32, Option<i32>) {
    let PgType::Domain(base, modifier) = &info.kind else {
        return default_length_scale(info, -1);
    };
    if *modifier == -1 {
        return match &base.kind {
            PgType::Domain(..) => domain_length_scale(base),
            _ => default_length_scale(base, -1),
        };
    }
    let oid = element_oid(base);
    let mut size = precision(oid, *modifier);
    if size == 0 {
        size = display_size(oid, *modifier);
    }
    let scale = scale(oid, *modifier);
    if size != 0 && size != UNKNOWN_LENGTH {
        return (size, Some(scale));
    }
    // The domain's own OID is no type pgjdbc knows the size of.
    (UNKNOWN_LENGTH, Some(scale))
}

/// A base type's size and scale at `typmod`, the display size standing in for a precision
/// of 0.
fn default_length_scale(info: &TypeInfo, typmod: i32) -> (i32, Option<i32>) {
    let oid = element_oid(info);
    let mut size = precision(oid, typmod);
    if size == 0 {
        size = display_size(oid, typmod);
    }
    (size, Some(scale(oid, typmod)))
}

/// pgjdbc's `TypeInfoCache.getPrecision`.
fn precision(oid: u32, typmod: i32) -> i32 {
    match oid {
        INT2 => 5,
        OID | INT4 => 10,
        INT8 => 19,
        FLOAT4 => 8,
        FLOAT8 => 17,
        NUMERIC if typmod == -1 => 0,
        NUMERIC => ((typmod - 4) >> 16) & 0xFFFF,
        CHAR | BOOL => 1,
        BPCHAR | VARCHAR if typmod == -1 => UNKNOWN_LENGTH,
        BPCHAR | VARCHAR => typmod - 4,
        DATE | TIME | TIMETZ | INTERVAL | TIMESTAMP | TIMESTAMPTZ => display_size(oid, typmod),
        BIT => typmod,
        VARBIT if typmod == -1 => UNKNOWN_LENGTH,
        VARBIT => typmod,
        _ => UNKNOWN_LENGTH,
    }
}

/// pgjdbc's `TypeInfoCache.getScale`.
fn scale(oid: u32, typmod: i32) -> i32 {
    match oid {
        FLOAT4 => 8,
        FLOAT8 => 17,
        NUMERIC if typmod == -1 => 0,
        NUMERIC => (typmod - 4) & 0xFFFF,
        TIME | TIMETZ | TIMESTAMP | TIMESTAMPTZ if typmod == -1 => 6,
        TIME | TIMETZ | TIMESTAMP | TIMESTAMPTZ => typmod,
        INTERVAL if typmod == -1 => 6,
        INTERVAL => typmod & 0xFFFF,
        _ => 0,
    }
}

/// pgjdbc's `TypeInfoCache.getDisplaySize`.
fn display_size(oid: u32, typmod: i32) -> i32 {
    match oid {
        INT2 => 6,
        INT4 => 11,
        OID => 10,
        INT8 => 20,
        FLOAT4 => 15,
        FLOAT8 => 25,
        CHAR | BOOL => 1,
        DATE => 13,
        TIME | TIMETZ | TIMESTAMP | TIMESTAMPTZ => {
            let seconds = match typmod {
                -1 => 7,
                0 => 0,
                1 => 3,
                n => n + 1,
            };
            match oid {
                TIME => 8 + seconds,
                TIMETZ => 8 + seconds + 6,
                TIMESTAMP => 13 + 1 + 8 + seconds,
                _ => 13 + 1 + 8 + seconds + 6,
            }
        }
        INTERVAL => 49,
        VARCHAR | BPCHAR if typmod == -1 => UNKNOWN_LENGTH,
        VARCHAR | BPCHAR => typmod - 4,
        NUMERIC if typmod == -1 => 131_089,
        NUMERIC => {
            let precision = ((typmod - 4) >> 16) & 0xFFFF;
            let scale = (typmod - 4) & 0xFFFF;
            1 + precision + i32::from(scale != 0)
        }
        BIT => typmod,
        VARBIT if typmod == -1 => UNKNOWN_LENGTH,
        VARBIT => typmod,
        _ => UNKNOWN_LENGTH,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn base(oid: u32, name: &str, kind: PgType) -> Arc<TypeInfo> {
        TypeInfo::new(oid, name, kind)
    }

    fn column(info: Arc<TypeInfo>, typmod: i32) -> ColumnType {
        ColumnType { info, typmod }
    }

    fn facts(ct: &ColumnType) -> (String, Option<i64>, Option<i64>) {
        let d = describe(ct, false);
        (d.name, d.length, d.scale)
    }

    #[test]
    fn sizes_follow_pgjdbc() {
        let max = Some(i64::from(i32::MAX));
        let int4 = base(INT4, "int4", PgType::Int4);
        assert_eq!(
            facts(&column(int4.clone(), -1)),
            ("int4".into(), Some(10), Some(0))
        );
        let varchar = base(VARCHAR, "varchar", PgType::Text);
        // varchar(255): typmod 259.
        assert_eq!(
            facts(&column(varchar.clone(), 259)),
            ("varchar".into(), Some(255), Some(0))
        );
        assert_eq!(facts(&column(varchar, -1)).1, max);
        assert_eq!(
            facts(&column(base(25, "text", PgType::Text), -1)),
            ("text".into(), max, Some(0))
        );
        // numeric(12,2): typmod (12 << 16 | 2) + 4; a bare numeric has no scale.
        let numeric = base(NUMERIC, "numeric", PgType::Numeric);
        assert_eq!(
            facts(&column(numeric.clone(), (12 << 16 | 2) + 4)),
            ("numeric".into(), Some(12), Some(2))
        );
        assert_eq!(
            facts(&column(numeric.clone(), -1)),
            ("numeric".into(), Some(0), None)
        );
        let ts = base(TIMESTAMP, "timestamp", PgType::Timestamp);
        assert_eq!(
            facts(&column(ts.clone(), -1)),
            ("timestamp".into(), Some(29), Some(6))
        );
        assert_eq!(
            facts(&column(ts, 3)),
            ("timestamp".into(), Some(26), Some(3))
        );
        let tstz = base(TIMESTAMPTZ, "timestamptz", PgType::TimestampTz);
        assert_eq!(facts(&column(tstz, -1)).1, Some(35));
        assert_eq!(
            facts(&column(base(DATE, "date", PgType::Date), -1)),
            ("date".into(), Some(13), Some(0))
        );
        assert_eq!(
            facts(&column(base(BOOL, "bool", PgType::Bool), -1)),
            ("bool".into(), Some(1), Some(0))
        );
        assert_eq!(
            facts(&column(base(FLOAT8, "float8", PgType::Float8), -1)),
            ("float8".into(), Some(17), Some(17))
        );
        assert_eq!(facts(&column(base(2950, "uuid", PgType::Uuid), -1)).1, max);
        // Arrays: the element's sizes; a bare numeric[] falls back to the display size.
        let int4_array = base(1007, "_int4", PgType::Array(int4.clone()));
        assert_eq!(
            facts(&column(int4_array, -1)),
            ("_int4".into(), Some(10), Some(0))
        );
        let numeric_array = base(1231, "_numeric", PgType::Array(numeric.clone()));
        assert_eq!(facts(&column(numeric_array, -1)).1, Some(131_089));
        // serial: the name the driver reports for an integer column defaulting to nextval().
        assert_eq!(describe(&column(int4, -1), true).name, "serial");
        assert_eq!(
            describe(&column(base(INT8, "int8", PgType::Int8), -1), true).name,
            "bigserial"
        );
        // A domain over numeric(5,1) and one over it without a modifier.
        let money_like = base(90001, "price", PgType::Domain(numeric, (5 << 16 | 1) + 4));
        assert_eq!(
            facts(&column(money_like.clone(), -1)),
            ("price".into(), Some(5), Some(1))
        );
        let nested = base(90002, "retail_price", PgType::Domain(money_like, -1));
        assert_eq!(
            facts(&column(nested, -1)),
            ("retail_price".into(), Some(5), Some(1))
        );
    }
}
