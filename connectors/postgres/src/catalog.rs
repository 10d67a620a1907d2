//! Table and type metadata read from PostgreSQL's system catalogs over an ordinary SQL
//! connection (tokio-postgres): type resolution by OID (domains, enums, ranges, arrays), table
//! columns with nullability, defaults and primary key, and the tables a connector captures.
//!
//! Invariants:
//! - a resolved [`TypeInfo`] is cached per OID for the life of the registry (types do not change
//!   meaning under an OID; enum labels added later are picked up by [`TypeRegistry::forget`]);
//! - column defaults are evaluated by the server into the column's own binary format, so they
//!   decode exactly like row values; defaults that are not constants (function calls) are
//!   dropped, except temporal "now"-style defaults which become the epoch as in Debezium.

use std::collections::HashMap;
use std::sync::Arc;

use headwater_api::plugin::BoxFuture;
use tokio_postgres::types::{FromSql, Type};
use tokio_postgres::Client;

use crate::types::{builtin_kind, ColumnType, PgType, TypeInfo};

/// Any value as its raw binary bytes.
pub struct RawValue(pub Vec<u8>);

impl<'a> FromSql<'a> for RawValue {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(RawValue(raw.to_vec()))
    }
    fn accepts(_: &Type) -> bool {
        true
    }
}

/// Resolves type OIDs through `pg_type` and caches the result.
#[derive(Default)]
pub struct TypeRegistry {
    cache: HashMap<u32, Arc<TypeInfo>>,
}

impl TypeRegistry {
    pub fn new() -> Self {
        TypeRegistry::default()
    }

    /// Drops a cached type (after a Type message announced a change).
    pub fn forget(&mut self, oid: u32) {
        self.cache.remove(&oid);
    }

    /// The type behind `oid`.
    pub fn resolve<'a>(
        &'a mut self,
        client: &'a Client,
        oid: u32,
    ) -> BoxFuture<'a, Result<Arc<TypeInfo>, tokio_postgres::Error>> {
        Box::pin(async move {
            if let Some(t) = self.cache.get(&oid) {
                return Ok(t.clone());
            }
            let row = client
                .query_opt(
                    "SELECT t.typname::text, n.nspname::text, t.typtype::text, t.typbasetype, \
                     t.typtypmod, t.typelem, t.typcategory::text, COALESCE(r.rngsubtype, 0::oid), \
                     ARRAY(SELECT e.enumlabel::text FROM pg_enum e WHERE e.enumtypid = t.oid \
                           ORDER BY e.enumsortorder) \
                     FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace \
                     LEFT JOIN pg_range r ON r.rngtypid = t.oid WHERE t.oid = $1",
                    &[&oid],
                )
                .await?;
            let info = match row {
                None => TypeInfo::new(oid, format!("oid {oid}"), PgType::Unknown),
                Some(row) => {
                    let name: String = row.get(0);
                    let nsp: String = row.get(1);
                    let typtype: String = row.get(2);
                    let base: u32 = row.get(3);
                    let typtypmod: i32 = row.get(4);
                    let elem: u32 = row.get(5);
                    let category: String = row.get(6);
                    let subtype: u32 = row.get(7);
                    let labels: Vec<String> = row.get(8);
                    let kind = match typtype.as_str() {
                        "d" => PgType::Domain(self.resolve(client, base).await?, typtypmod),
                        "e" => PgType::Enum(labels.into()),
                        "r" => PgType::Range(self.resolve(client, subtype).await?),
                        _ if category == "A" && elem != 0 => {
                            PgType::Array(self.resolve(client, elem).await?)
                        }
                        _ => {
                            let builtin = builtin_kind(&name);
                            let extension = matches!(name.as_str(), "citext" | "ltree" | "hstore");
                            match builtin {
                                Some(k) if nsp == "pg_catalog" || extension => k,
                                _ => PgType::Unknown,
                            }
                        }
                    };
                    let qualified = if nsp == "pg_catalog" {
                        name.clone()
                    } else {
                        format!("{nsp}.{name}")
                    };
                    TypeInfo::named(oid, qualified, name, kind)
                }
            };
            self.cache.insert(oid, info.clone());
            Ok(info)
        })
    }
}

/// A column as the catalog describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnMeta {
    pub name: String,
    pub ct: ColumnType,
    pub not_null: bool,
    /// The default, evaluated into the column type's binary format.
    pub default_raw: Option<Vec<u8>>,
    pub generated: bool,
    /// The default calls `nextval(` (a serial column to the JDBC driver).
    pub serial: bool,
}

/// A table as the catalog describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct TableMeta {
    pub oid: u32,
    pub schema: String,
    pub name: String,
    pub columns: Vec<ColumnMeta>,
    /// Primary key column names in key order (empty without a primary key).
    pub primary_key: Vec<String>,
    /// `relreplident`: `d`, `n`, `f` or `i`.
    pub replica_identity: char,
    /// A partitioned table (`relkind = 'p'`): its rows are its partitions'.
    pub partitioned: bool,
}

/// Quotes an identifier for SQL.
pub fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// Quotes a string literal for SQL.
pub fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn is_temporal(ct: &ColumnType) -> bool {
    matches!(
        ct.resolved().0.kind,
        PgType::Date | PgType::Time | PgType::TimeTz | PgType::Timestamp | PgType::TimestampTz
    )
}

/// The binary value Debezium gives "now"-style temporal defaults: the epoch (midnight).
fn epoch_raw(ct: &ColumnType) -> Option<Vec<u8>> {
    Some(match ct.resolved().0.kind {
        PgType::Date => (-crate::temporal::PG_EPOCH_DAYS).to_be_bytes().to_vec(),
        PgType::Time => 0i64.to_be_bytes().to_vec(),
        PgType::TimeTz => {
            let mut v = 0i64.to_be_bytes().to_vec();
            v.extend_from_slice(&0i32.to_be_bytes());
            v
        }
        PgType::Timestamp | PgType::TimestampTz => (-crate::pgoutput::PG_EPOCH_OFFSET_MICROS)
            .to_be_bytes()
            .to_vec(),
        _ => return None,
    })
}

/// Whether a default expression is a constant literal (possibly with casts).
fn is_constant_default(expr: &str) -> bool {
    let e = expr.trim();
    let first = e.chars().next().unwrap_or(' ');
    let literal_start = first == '\''
        || first.is_ascii_digit()
        || (first == '-' && e[1..].starts_with(|c: char| c.is_ascii_digit()))
        || e.eq_ignore_ascii_case("true")
        || e.eq_ignore_ascii_case("false");
    literal_start && !e.contains("nextval(")
}

/// Loads a table's metadata; `None` when the table does not exist.
pub async fn load_table(
    client: &Client,
    types: &mut TypeRegistry,
    schema: &str,
    table: &str,
) -> Result<Option<TableMeta>, tokio_postgres::Error> {
    let Some(rel) = client
        .query_opt(
            "SELECT c.oid, c.relreplident::text, c.relkind = 'p' FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2",
            &[&schema, &table],
        )
        .await?
    else {
        return Ok(None);
    };
    let oid: u32 = rel.get(0);
    let replident: String = rel.get(1);
    let partitioned: bool = rel.get(2);
    let rows = client
        .query(
            "SELECT a.attname::text, a.atttypid, a.atttypmod, a.attnotnull, \
             pg_get_expr(d.adbin, d.adrelid), format_type(a.atttypid, a.atttypmod), \
             a.attgenerated::text \
             FROM pg_attribute a LEFT JOIN pg_attrdef d \
               ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
             WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            &[&oid],
        )
        .await?;
    let mut columns = Vec::with_capacity(rows.len());
    for row in rows {
        let name: String = row.get(0);
        let type_oid: u32 = row.get(1);
        let typmod: i32 = row.get(2);
        let not_null: bool = row.get(3);
        let default_expr: Option<String> = row.get(4);
        let type_text: String = row.get(5);
        let generated: String = row.get(6);
        let info = types.resolve(client, type_oid).await?;
        let ct = ColumnType { info, typmod };
        let generated = !generated.is_empty();
        let serial = default_expr
            .as_deref()
            .is_some_and(|e| e.contains("nextval("));
        let default_raw = match default_expr {
            Some(expr) if !generated => {
                if is_constant_default(&expr) {
                    let sql = format!("SELECT ({expr})::{type_text}");
                    match client.query_one(sql.as_str(), &[]).await {
                        Ok(r) => r.get::<_, Option<RawValue>>(0).map(|v| v.0),
                        Err(e) => {
                            tracing::debug!(column = %name, %expr, error = %e, "default not evaluated");
                            None
                        }
                    }
                } else if is_temporal(&ct) {
                    epoch_raw(&ct)
                } else {
                    None
                }
            }
            _ => None,
        };
        columns.push(ColumnMeta {
            name,
            ct,
            not_null,
            default_raw,
            generated,
            serial,
        });
    }
    let pk_rows = client
        .query(
            "SELECT a.attname::text FROM pg_index i \
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) \
             WHERE i.indrelid = $1 AND i.indisprimary \
             ORDER BY array_position(i.indkey::int2[], a.attnum)",
            &[&oid],
        )
        .await?;
    Ok(Some(TableMeta {
        oid,
        schema: schema.to_owned(),
        name: table.to_owned(),
        columns,
        primary_key: pk_rows.iter().map(|r| r.get(0)).collect(),
        replica_identity: replident.chars().next().unwrap_or('d'),
        partitioned,
    }))
}

/// Every table outside the system schemas, as `(schema, table)` sorted by name: ordinary
/// tables (partitions included), or with `via_root` (`publish.via.partition.root`) the tables
/// that are no partition, partitioned roots among them.
pub async fn list_tables(
    client: &Client,
    via_root: bool,
) -> Result<Vec<(String, String)>, tokio_postgres::Error> {
    let kinds = if via_root {
        "c.relkind IN ('r', 'p') AND NOT c.relispartition"
    } else {
        "c.relkind = 'r'"
    };
    let rows = client
        .query(
            &format!(
                "SELECT n.nspname::text, c.relname::text FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE {kinds} AND n.nspname NOT IN ('pg_catalog', 'information_schema') \
               AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp%' \
             ORDER BY 1, 2"
            ),
            &[],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_defaults() {
        assert!(is_constant_default("'dflt'::text"));
        assert!(is_constant_default("42"));
        assert!(is_constant_default("'-1'::integer"));
        assert!(is_constant_default("-1.5"));
        assert!(is_constant_default("true"));
        assert!(!is_constant_default("now()"));
        assert!(!is_constant_default("CURRENT_TIMESTAMP"));
        assert!(!is_constant_default("nextval('t_id_seq'::regclass)"));
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
    }
}
