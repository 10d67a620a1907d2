//! Where table schemas come from, and why this connector needs no schema-history topic.
//!
//! Debezium's binlog connectors parse every DDL statement and replay a history topic on each
//! start, because classic TABLE_MAP events only say column types. With
//! `binlog_row_metadata=FULL` (MariaDB ≥ 10.5, MySQL ≥ 8.0) every TABLE_MAP event also carries
//! the column names, signedness, charsets, ENUM/SET labels and primary key, i.e. the complete
//! shape of the table *at that binlog position*. So:
//!
//! - while streaming, [`specs_from_table_map`] gives each row event's exact column list, before
//!   and after any ADD/DROP/MODIFY/RENAME; nothing has to be persisted for restarts, because a
//!   TABLE_MAP precedes every row event of every transaction the stream resumes at;
//! - the snapshot (and column defaults, which TABLE_MAP lacks) read information_schema
//!   ([`load_table`]); a default is only applied to a TABLE_MAP column whose name and type
//!   still match information_schema's column, so a later DDL can at worst drop a default
//!   from the schema, never misplace one.
//!
//! Invariant: both sources yield equal [`ColumnSpec`]s for the same table version (defaults
//! aside), so snapshot and stream records of one table version share one schema.

use mysql_async::binlog::events::{OptionalMetadataField, TableMapEvent};
use mysql_async::consts::ColumnType;
use mysql_async::prelude::Queryable;

use crate::types::{self, Charset, ColumnSpec, MappingConfig, MyType};

/// Charset ids that are `binary`.
const BINARY_CHARSET: u16 = 63;

fn charset_of(id: u16) -> Option<Charset> {
    match id {
        BINARY_CHARSET => None,
        5 | 8 | 15 | 31 | 47 | 48 | 49 | 94 => Some(Charset::Latin1),
        _ => Some(Charset::Utf8),
    }
}

/// Column specs (without defaults) and primary-key column names from a TABLE_MAP event with
/// full row metadata. Fails when the metadata lacks column names (`binlog_row_metadata` is
/// not FULL): positional columns cannot be matched to a schema reliably.
pub fn specs_from_table_map(
    tme: &TableMapEvent<'_>,
) -> Result<(Vec<ColumnSpec>, Vec<String>), String> {
    let n = tme.columns_count() as usize;
    let mut names = Vec::new();
    let mut unsigned_flags = Vec::new();
    let mut enum_labels: Vec<Vec<String>> = Vec::new();
    let mut set_labels: Vec<Vec<String>> = Vec::new();
    let mut default_cs: Option<(u16, Vec<(u64, u16)>)> = None;
    let mut column_cs: Option<Vec<u16>> = None;
    let mut pk: Vec<u64> = Vec::new();
    let io = |e: std::io::Error| format!("bad TABLE_MAP metadata: {e}");
    for field in tme.iter_optional_meta() {
        match field.map_err(io)? {
            OptionalMetadataField::Signedness(bits) => {
                unsigned_flags = bits.iter().by_vals().collect();
            }
            OptionalMetadataField::ColumnName(cn) => {
                for name in cn.iter_names() {
                    names.push(name.map_err(io)?.name().into_owned());
                }
            }
            OptionalMetadataField::DefaultCharset(dc) => {
                let mut non_default = Vec::new();
                for x in dc.iter_non_default() {
                    let x = x.map_err(io)?;
                    non_default.push((x.column_index(), x.charset()));
                }
                default_cs = Some((dc.default_charset(), non_default));
            }
            OptionalMetadataField::ColumnCharset(cc) => {
                let mut v = Vec::new();
                for c in cc.iter_charsets() {
                    v.push(c.map_err(io)?);
                }
                column_cs = Some(v);
            }
            OptionalMetadataField::EnumStrValue(ev) => {
                for e in ev.iter_values() {
                    let e = e.map_err(io)?;
                    enum_labels.push(e.values().iter().map(|v| v.value().into_owned()).collect());
                }
            }
            OptionalMetadataField::SetStrValue(sv) => {
                for s in sv.iter_values() {
                    let s = s.map_err(io)?;
                    set_labels.push(s.values().iter().map(|v| v.value().into_owned()).collect());
                }
            }
            OptionalMetadataField::SimplePrimaryKey(k) => {
                for i in k.iter_indexes() {
                    pk.push(i.map_err(io)?);
                }
            }
            OptionalMetadataField::PrimaryKeyWithPrefix(k) => {
                for i in k.iter_keys() {
                    pk.push(i.map_err(io)?.column_index());
                }
            }
            _ => {}
        }
    }
    if names.len() != n {
        return Err(format!(
            "the TABLE_MAP event of {}.{} carries no column names; set binlog_row_metadata=FULL on the server",
            tme.database_name(),
            tme.table_name()
        ));
    }
    let nullable = tme.null_bitmask();
    let mut specs = Vec::with_capacity(n);
    let (mut num_i, mut char_i, mut enum_i, mut set_i) = (0usize, 0usize, 0usize, 0usize);
    for (i, name) in names.iter().enumerate() {
        let ct = tme
            .get_column_type(i)
            .map_err(|e| format!("column {name}: {e}"))?
            .ok_or_else(|| format!("column {name}: no type"))?;
        let meta = tme.get_column_metadata(i).unwrap_or(&[]);
        let m0 = meta.first().copied().unwrap_or(0);
        let m1 = meta.get(1).copied().unwrap_or(0);
        let mut unsigned = false;
        if ct.is_numeric_type() {
            unsigned = unsigned_flags.get(num_i).copied().unwrap_or(false);
            num_i += 1;
        }
        let mut charset: Option<Charset> = Some(Charset::Utf8);
        if ct.is_character_type() {
            let id = match (&column_cs, &default_cs) {
                (Some(v), _) => v.get(char_i).copied().unwrap_or(0),
                (None, Some((d, nd))) => nd
                    .iter()
                    .find(|(c, _)| *c as usize == char_i)
                    .map_or(*d, |(_, cs)| *cs),
                (None, None) => 0,
            };
            charset = charset_of(id);
            char_i += 1;
        }
        use ColumnType::*;
        let ty = match ct {
            MYSQL_TYPE_TINY => MyType::TinyInt,
            MYSQL_TYPE_SHORT => MyType::SmallInt,
            MYSQL_TYPE_INT24 => MyType::MediumInt,
            MYSQL_TYPE_LONG => MyType::Int,
            MYSQL_TYPE_LONGLONG => MyType::BigInt,
            MYSQL_TYPE_NEWDECIMAL | MYSQL_TYPE_DECIMAL => MyType::Decimal {
                precision: u32::from(m0),
                scale: u32::from(m1),
            },
            MYSQL_TYPE_FLOAT => MyType::Float,
            MYSQL_TYPE_DOUBLE => MyType::Double,
            MYSQL_TYPE_BIT => MyType::Bit(u32::from(m1) * 8 + u32::from(m0)),
            MYSQL_TYPE_VARCHAR | MYSQL_TYPE_VAR_STRING | MYSQL_TYPE_BLOB
            | MYSQL_TYPE_TINY_BLOB | MYSQL_TYPE_MEDIUM_BLOB | MYSQL_TYPE_LONG_BLOB => match charset {
                Some(cs) => MyType::Text(cs),
                None => MyType::Binary { fixed: None },
            },
            MYSQL_TYPE_STRING => match charset {
                Some(cs) => MyType::Text(cs),
                None => {
                    let len = if (m0 & 0x30) != 0x30 {
                        usize::from(m1) | ((usize::from(m0 & 0x30) ^ 0x30) << 4)
                    } else {
                        usize::from(m1)
                    };
                    MyType::Binary { fixed: Some(len) }
                }
            },
            MYSQL_TYPE_ENUM => {
                let l = enum_labels.get(enum_i).cloned().unwrap_or_default();
                enum_i += 1;
                MyType::Enum(l)
            }
            MYSQL_TYPE_SET => {
                let l = set_labels.get(set_i).cloned().unwrap_or_default();
                set_i += 1;
                MyType::Set(l)
            }
            MYSQL_TYPE_DATE | MYSQL_TYPE_NEWDATE => MyType::Date,
            MYSQL_TYPE_TIME => MyType::Time(0),
            MYSQL_TYPE_TIME2 => MyType::Time(u32::from(m0)),
            MYSQL_TYPE_DATETIME => MyType::DateTime(0),
            MYSQL_TYPE_DATETIME2 => MyType::DateTime(u32::from(m0)),
            MYSQL_TYPE_TIMESTAMP => MyType::Timestamp(0),
            MYSQL_TYPE_TIMESTAMP2 => MyType::Timestamp(u32::from(m0)),
            MYSQL_TYPE_YEAR => MyType::Year,
            MYSQL_TYPE_JSON => MyType::Json,
            MYSQL_TYPE_GEOMETRY => MyType::Geometry,
            other => {
                return Err(format!(
                    "column {name} of {}.{} has binlog type {other:?}, which this connector does not map yet",
                    tme.database_name(),
                    tme.table_name()
                ))
            }
        };
        specs.push(ColumnSpec {
            name: name.clone(),
            ty,
            unsigned,
            optional: nullable.get(i).as_deref().copied().unwrap_or(true),
            default: None,
            length: None,
            source_type: None,
        });
    }
    let pk_names = pk
        .iter()
        .filter_map(|&i| names.get(i as usize).cloned())
        .collect();
    Ok((specs, pk_names))
}

/// A table as information_schema describes it now.
#[derive(Clone, Debug)]
pub struct CatalogTable {
    pub columns: Vec<ColumnSpec>,
    pub primary_key: Vec<String>,
}

fn my_type(
    data_type: &str,
    column_type: &str,
    precision: Option<u64>,
    scale: Option<u64>,
    dt_precision: Option<u64>,
    charset: Option<&str>,
    char_len: Option<u64>,
) -> Result<MyType, String> {
    let text = || match charset {
        Some(cs) if cs.to_ascii_lowercase().starts_with("latin1") => MyType::Text(Charset::Latin1),
        _ => MyType::Text(Charset::Utf8),
    };
    let fsp = dt_precision.unwrap_or(0) as u32;
    Ok(match data_type.to_ascii_lowercase().as_str() {
        "tinyint" => MyType::TinyInt,
        "smallint" => MyType::SmallInt,
        "mediumint" => MyType::MediumInt,
        "int" | "integer" => MyType::Int,
        "bigint" => MyType::BigInt,
        "decimal" | "numeric" => MyType::Decimal {
            precision: precision.unwrap_or(10) as u32,
            scale: scale.unwrap_or(0) as u32,
        },
        "float" => MyType::Float,
        "double" | "real" => MyType::Double,
        "bit" => MyType::Bit(precision.unwrap_or(1) as u32),
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" => text(),
        "json" if charset.is_some() => text(),
        "json" => MyType::Json,
        "binary" => MyType::Binary {
            fixed: Some(char_len.unwrap_or(0) as usize),
        },
        "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" => {
            MyType::Binary { fixed: None }
        }
        "date" => MyType::Date,
        "time" => MyType::Time(fsp),
        "datetime" => MyType::DateTime(fsp),
        "timestamp" => MyType::Timestamp(fsp),
        "year" => MyType::Year,
        "enum" => MyType::Enum(types::parse_labels(column_type)),
        "set" => MyType::Set(types::parse_labels(column_type)),
        "geometry" | "point" | "linestring" | "polygon" | "multipoint" | "multilinestring"
        | "multipolygon" | "geometrycollection" | "geomcollection" => MyType::Geometry,
        other => return Err(format!("type {other} ({column_type}) is not mapped yet")),
    })
}

type ColumnRow = (
    String,
    String,
    String,
    String,
    Option<String>,
    Option<u64>,
    Option<u64>,
    Option<u64>,
    Option<String>,
    Option<u64>,
);

/// Reads a table's columns (with defaults) and primary key from information_schema.
pub async fn load_table(
    conn: &mut mysql_async::Conn,
    db: &str,
    table: &str,
    mapping: &MappingConfig,
) -> Result<CatalogTable, String> {
    let rows: Vec<ColumnRow> = conn
        .exec(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, \
             NUMERIC_PRECISION, NUMERIC_SCALE, DATETIME_PRECISION, CHARACTER_SET_NAME, \
             CHARACTER_OCTET_LENGTH \
             FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? \
             ORDER BY ORDINAL_POSITION",
            (db, table),
        )
        .await
        .map_err(|e| format!("reading the columns of {db}.{table}: {e}"))?;
    let mut columns = Vec::with_capacity(rows.len());
    for (name, data_type, column_type, nullable, default, prec, scale, dtp, cs, octets) in rows {
        let ty = my_type(
            &data_type,
            &column_type,
            prec,
            scale,
            dtp,
            cs.as_deref(),
            octets,
        )
        .map_err(|e| format!("{db}.{table}.{name}: {e}"))?;
        let mut spec = ColumnSpec {
            name,
            ty,
            unsigned: column_type.to_ascii_lowercase().contains("unsigned"),
            optional: nullable.eq_ignore_ascii_case("YES"),
            default: None,
            length: declared_length(&data_type, &column_type),
            source_type: Some(std::sync::Arc::new(crate::source_type::from_column_type(
                &column_type,
            ))),
        };
        spec.default = types::default_from_text(&spec, default.as_deref(), mapping);
        columns.push(spec);
    }
    let primary_key: Vec<String> = conn
        .exec(
            "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND CONSTRAINT_NAME = 'PRIMARY' \
             ORDER BY ORDINAL_POSITION",
            (db, table),
        )
        .await
        .map_err(|e| format!("reading the primary key of {db}.{table}: {e}"))?;
    Ok(CatalogTable {
        columns,
        primary_key,
    })
}

/// Copies information_schema's defaults, declared lengths and type renderings onto TABLE_MAP
/// columns whose name and type match.
pub fn apply_defaults(specs: &mut [ColumnSpec], catalog: Option<&CatalogTable>) {
    let Some(cat) = catalog else { return };
    for s in specs.iter_mut() {
        if let Some(c) = cat.columns.iter().find(|c| c.same_column(s)) {
            s.default = c.default.clone();
            s.length = c.length;
            s.source_type = c.source_type.clone();
        }
    }
}

/// The declared length of `char(n)`, `varchar(n)`, `binary(n)` and `varbinary(n)` columns
/// (`COLUMN_TYPE`), in characters or bytes.
fn declared_length(data_type: &str, column_type: &str) -> Option<usize> {
    let kind = data_type.to_ascii_lowercase();
    if !matches!(kind.as_str(), "char" | "varchar" | "binary" | "varbinary") {
        return None;
    }
    let open = column_type.find('(')?;
    let close = column_type[open..].find(')')? + open;
    column_type[open + 1..close].trim().parse().ok()
}
