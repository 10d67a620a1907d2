//! A column's type as Debezium's MySQL/MariaDB connectors describe it to column mappers
//! (`column.propagate.source.type`, `datatype.propagate.source.type`), which becomes
//! `__debezium.source.column.type`, `.length` and `.scale`.
//!
//! Debezium builds columns with its DDL parser: from `SHOW CREATE TABLE` in a snapshot, from
//! the statement as written while streaming. This connector reads `information_schema`'s
//! `COLUMN_TYPE`, which is the server's own rendering of the type, the text `SHOW CREATE
//! TABLE` prints, so it gives Debezium's snapshot form in snapshots and streaming alike (a
//! column declared `BOOLEAN` is `TINYINT`, length 1; `REAL` is `DOUBLE`; `INTEGER` is `INT`).
//!
//! Rules (Debezium's `DataTypeResolver` entries and `ColumnDefinitionParserListener`):
//! - the name is the upper-cased type keyword, then ` UNSIGNED` when unsigned and
//!   ` UNSIGNED ZEROFILL` when zero-filled (`INT UNSIGNED`, `BIGINT UNSIGNED ZEROFILL`);
//! - the length is the first number in parentheses (a display width, a character or byte
//!   length, a fractional-seconds precision: `datetime(3)` has length 3), the scale the
//!   second; without them both are absent, except DECIMAL/NUMERIC (10 and 0 by default) and
//!   BIT (length 1);
//! - ENUM has length 1 and SET 2n−1 for n members (a remnant of Debezium's first DDL parser,
//!   which Debezium keeps);
//! - character sets and collations are not part of the type.

use crate::types::{parse_labels, ColumnSpec, MyType};

/// The type facts of one column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceColumnType {
    pub name: String,
    pub length: Option<i64>,
    pub scale: Option<i64>,
}

/// The type of a column from its `COLUMN_TYPE` (`int(10) unsigned`, `decimal(10,2)`,
/// `enum('a','b')`).
pub fn from_column_type(column_type: &str) -> SourceColumnType {
    let text = column_type.trim();
    let keyword_end = text
        .find(|c: char| c == '(' || c.is_whitespace())
        .unwrap_or(text.len());
    let keyword = text[..keyword_end].to_ascii_uppercase();
    let mut rest = &text[keyword_end..];
    let mut numbers: Vec<i64> = Vec::new();
    if keyword == "ENUM" || keyword == "SET" {
        // Members may hold parentheses; the modifiers (none for these types) are skipped.
        rest = "";
    } else if let Some(inner) = rest.strip_prefix('(') {
        if let Some(close) = inner.find(')') {
            numbers = inner[..close]
                .split(',')
                .filter_map(|n| n.trim().parse().ok())
                .collect();
            rest = &inner[close + 1..];
        }
    }
    let words: Vec<String> = rest
        .split_whitespace()
        .map(str::to_ascii_lowercase)
        .collect();
    let zerofill = words.iter().any(|w| w == "zerofill");
    let unsigned = zerofill || words.iter().any(|w| w == "unsigned");
    let (length, scale) = match keyword.as_str() {
        "ENUM" => (Some(1), None),
        "SET" => {
            let members = parse_labels(text).len() as i64;
            (Some((2 * members - 1).max(0)), None)
        }
        "DECIMAL" | "NUMERIC" | "DEC" | "FIXED" => (
            Some(numbers.first().copied().unwrap_or(10)),
            Some(numbers.get(1).copied().unwrap_or(0)),
        ),
        "BIT" => (Some(numbers.first().copied().unwrap_or(1)), None),
        _ => (numbers.first().copied(), numbers.get(1).copied()),
    };
    SourceColumnType {
        name: with_sign(keyword, unsigned, zerofill),
        length,
        scale,
    }
}

/// The type of a column `information_schema` did not describe (a table dropped since its
/// binlog events were written), from what the binlog says of it: the name of the type it
/// maps from, and the lengths known.
pub fn from_spec(spec: &ColumnSpec) -> SourceColumnType {
    let (keyword, length, scale) = match &spec.ty {
        MyType::TinyInt => ("TINYINT", None, None),
        MyType::SmallInt => ("SMALLINT", None, None),
        MyType::MediumInt => ("MEDIUMINT", None, None),
        MyType::Int => ("INT", None, None),
        MyType::BigInt => ("BIGINT", None, None),
        MyType::Decimal { precision, scale } => (
            "DECIMAL",
            Some(i64::from(*precision)),
            Some(i64::from(*scale)),
        ),
        MyType::Float => ("FLOAT", None, None),
        MyType::Double => ("DOUBLE", None, None),
        MyType::Bit(n) => ("BIT", Some(i64::from(*n)), None),
        MyType::Text(_) => match spec.length {
            Some(n) => ("VARCHAR", Some(n as i64), None),
            None => ("LONGTEXT", None, None),
        },
        MyType::Binary { fixed: Some(n) } => ("BINARY", Some(*n as i64), None),
        MyType::Binary { fixed: None } => match spec.length {
            Some(n) => ("VARBINARY", Some(n as i64), None),
            None => ("LONGBLOB", None, None),
        },
        MyType::Date => ("DATE", None, None),
        MyType::Time(fsp) => ("TIME", fractional(*fsp), None),
        MyType::DateTime(fsp) => ("DATETIME", fractional(*fsp), None),
        MyType::Timestamp(fsp) => ("TIMESTAMP", fractional(*fsp), None),
        MyType::Year => ("YEAR", None, None),
        MyType::Enum(_) => ("ENUM", Some(1), None),
        MyType::Set(members) => ("SET", Some((2 * members.len() as i64 - 1).max(0)), None),
        MyType::Json => ("JSON", None, None),
        MyType::Geometry => ("GEOMETRY", None, None),
    };
    SourceColumnType {
        name: with_sign(keyword.to_owned(), spec.unsigned, false),
        length,
        scale,
    }
}

fn fractional(fsp: u32) -> Option<i64> {
    (fsp > 0).then_some(i64::from(fsp))
}

fn with_sign(mut name: String, unsigned: bool, zerofill: bool) -> String {
    if unsigned {
        name.push_str(" UNSIGNED");
    }
    if zerofill {
        name.push_str(" ZEROFILL");
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(column_type: &str) -> (String, Option<i64>, Option<i64>) {
        let s = from_column_type(column_type);
        (s.name, s.length, s.scale)
    }

    fn expect(
        name: &str,
        length: Option<i64>,
        scale: Option<i64>,
    ) -> (String, Option<i64>, Option<i64>) {
        (name.to_owned(), length, scale)
    }

    #[test]
    fn column_types_read_as_debeziums_ddl_parser_reads_them() {
        assert_eq!(t("int(11)"), expect("INT", Some(11), None));
        assert_eq!(t("int"), expect("INT", None, None));
        assert_eq!(
            t("int(10) unsigned"),
            expect("INT UNSIGNED", Some(10), None)
        );
        assert_eq!(t("int unsigned"), expect("INT UNSIGNED", None, None));
        assert_eq!(t("tinyint(1)"), expect("TINYINT", Some(1), None));
        assert_eq!(
            t("bigint(20) unsigned zerofill"),
            expect("BIGINT UNSIGNED ZEROFILL", Some(20), None)
        );
        assert_eq!(t("decimal(10,2)"), expect("DECIMAL", Some(10), Some(2)));
        assert_eq!(t("decimal(19)"), expect("DECIMAL", Some(19), Some(0)));
        assert_eq!(t("decimal"), expect("DECIMAL", Some(10), Some(0)));
        assert_eq!(
            t("decimal(5,2) unsigned"),
            expect("DECIMAL UNSIGNED", Some(5), Some(2))
        );
        assert_eq!(t("float(7,3)"), expect("FLOAT", Some(7), Some(3)));
        assert_eq!(t("float"), expect("FLOAT", None, None));
        assert_eq!(t("double"), expect("DOUBLE", None, None));
        assert_eq!(t("double(18,4)"), expect("DOUBLE", Some(18), Some(4)));
        assert_eq!(t("varchar(24)"), expect("VARCHAR", Some(24), None));
        assert_eq!(t("char(1)"), expect("CHAR", Some(1), None));
        assert_eq!(t("longtext"), expect("LONGTEXT", None, None));
        assert_eq!(t("binary(16)"), expect("BINARY", Some(16), None));
        assert_eq!(t("varbinary(32)"), expect("VARBINARY", Some(32), None));
        assert_eq!(t("bit(5)"), expect("BIT", Some(5), None));
        assert_eq!(t("bit"), expect("BIT", Some(1), None));
        assert_eq!(t("enum('a','b','c')"), expect("ENUM", Some(1), None));
        assert_eq!(t("enum('a(1)','b')"), expect("ENUM", Some(1), None));
        assert_eq!(t("set('a','b','c')"), expect("SET", Some(5), None));
        assert_eq!(t("set('x','y')"), expect("SET", Some(3), None));
        assert_eq!(t("date"), expect("DATE", None, None));
        assert_eq!(t("datetime(3)"), expect("DATETIME", Some(3), None));
        assert_eq!(t("datetime"), expect("DATETIME", None, None));
        assert_eq!(t("timestamp(6)"), expect("TIMESTAMP", Some(6), None));
        assert_eq!(t("time(2)"), expect("TIME", Some(2), None));
        assert_eq!(t("year(4)"), expect("YEAR", Some(4), None));
        assert_eq!(t("json"), expect("JSON", None, None));
        assert_eq!(t("point"), expect("POINT", None, None));
    }

    #[test]
    fn binlog_only_columns_get_the_names_of_their_types() {
        let spec = |ty: MyType, unsigned: bool, length: Option<usize>| ColumnSpec {
            name: "c".into(),
            ty,
            unsigned,
            optional: true,
            default: None,
            length,
            source_type: None,
        };
        let f = |s: ColumnSpec| {
            let t = from_spec(&s);
            (t.name, t.length, t.scale)
        };
        assert_eq!(
            f(spec(MyType::Int, true, None)),
            expect("INT UNSIGNED", None, None)
        );
        assert_eq!(
            f(spec(
                MyType::Text(crate::types::Charset::Utf8),
                false,
                Some(24)
            )),
            expect("VARCHAR", Some(24), None)
        );
        assert_eq!(
            f(spec(
                MyType::Decimal {
                    precision: 8,
                    scale: 3
                },
                false,
                None
            )),
            expect("DECIMAL", Some(8), Some(3))
        );
        assert_eq!(
            f(spec(MyType::DateTime(0), false, None)),
            expect("DATETIME", None, None)
        );
        assert_eq!(
            f(spec(MyType::Set(vec!["a".into(), "b".into()]), false, None)),
            expect("SET", Some(3), None)
        );
    }
}
