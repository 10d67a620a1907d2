//! SQL text both writers build the same way up to dialect: identifier quoting, the schema
//! evolution a shape needs (`CREATE TABLE` / `ADD COLUMN`, or the error when evolution is off),
//! and the look-up of a key change's old row for its unchanged columns.
//!
//! Invariants: these functions only build text and decide; the writers execute. Identifiers
//! are always quoted where a dialect would otherwise fold or misread them.

use headwater_api::{ConnectError, Schema, SchemaRef, Value};

use crate::batch::UpsertRow;
use crate::change::{Column, Shape};
use crate::config::DatabaseKind;
use crate::values::sql_type;

/// Quotes an identifier for `db`: PostgreSQL quotes only names that need it (it folds bare
/// names to lower case) unless `always`; MySQL always uses backticks.
pub fn quote(db: DatabaseKind, name: &str, always: bool) -> String {
    match db {
        DatabaseKind::MySql => format!("`{}`", name.replace('`', "``")),
        DatabaseKind::Postgres => {
            let plain = name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if plain && !always {
                name.to_owned()
            } else {
                format!("\"{}\"", name.replace('"', "\"\""))
            }
        }
    }
}

/// `schema.table` or `table`, each part quoted.
pub fn quote_table(db: DatabaseKind, name: &str, always: bool) -> String {
    match name.split_once('.') {
        Some((s, t)) => format!("{}.{}", quote(db, s, always), quote(db, t, always)),
        None => quote(db, name, always),
    }
}

/// What a table needs before rows of a shape can be written.
#[derive(Debug, PartialEq)]
pub enum Evolution {
    Nothing,
    /// `CREATE TABLE` statement.
    Create(String),
    /// One `ALTER TABLE ... ADD COLUMN` per missing column: (column, statement).
    AddColumns(Vec<(String, String)>),
}

/// The evolution `shape` needs, given the table's columns (`None`: no such table); an error
/// naming what is missing when `schema_evolution` is off.
pub fn evolution(
    db: DatabaseKind,
    always_quote: bool,
    schema_evolution: bool,
    table: &str,
    shape: &Shape,
    existing: Option<&[String]>,
) -> Result<Evolution, ConnectError> {
    let q = quote_table(db, table, always_quote);
    let qc = |name: &str| quote(db, name, always_quote);
    let Some(existing) = existing else {
        if !schema_evolution {
            return Err(ConnectError::fatal(format!(
                "table {table} does not exist in the destination; create it, or set schema.evolution=basic"
            )));
        }
        let mut cols: Vec<String> = shape
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let key = shape.key.contains(&i);
                let null = match (key || !c.schema.is_optional(), db) {
                    (true, _) => " NOT NULL",
                    (false, DatabaseKind::MySql) => " NULL",
                    (false, DatabaseKind::Postgres) => "",
                };
                format!("{} {}{null}", qc(&c.name), sql_type(db, &c.schema, key))
            })
            .collect();
        if !shape.key.is_empty() {
            let key: Vec<String> = shape
                .key
                .iter()
                .map(|&i| qc(&shape.columns[i].name))
                .collect();
            cols.push(format!("PRIMARY KEY ({})", key.join(", ")));
        }
        let engine = if db == DatabaseKind::MySql {
            " ENGINE=InnoDB"
        } else {
            ""
        };
        return Ok(Evolution::Create(format!(
            "CREATE TABLE IF NOT EXISTS {q} ({}){engine}",
            cols.join(", ")
        )));
    };
    // MySQL column names are case-insensitive.
    let has = |name: &str| {
        existing.iter().any(|m| match db {
            DatabaseKind::MySql => m.eq_ignore_ascii_case(name),
            DatabaseKind::Postgres => m == name,
        })
    };
    let missing: Vec<&Column> = shape.columns.iter().filter(|c| !has(&c.name)).collect();
    if missing.is_empty() {
        return Ok(Evolution::Nothing);
    }
    if !schema_evolution {
        let names: Vec<&str> = missing.iter().map(|c| c.name.as_str()).collect();
        return Err(ConnectError::fatal(format!(
            "table {table} has no column(s) {}; add them, or set schema.evolution=basic",
            names.join(", ")
        )));
    }
    Ok(Evolution::AddColumns(
        missing
            .into_iter()
            .map(|c| {
                let ddl = match db {
                    DatabaseKind::Postgres => format!(
                        "ALTER TABLE {q} ADD COLUMN IF NOT EXISTS {} {}",
                        qc(&c.name),
                        sql_type(db, &c.schema, false)
                    ),
                    DatabaseKind::MySql => format!(
                        "ALTER TABLE {q} ADD COLUMN {} {} NULL",
                        qc(&c.name),
                        sql_type(db, &c.schema, false)
                    ),
                };
                (c.name.clone(), ddl)
            })
            .collect(),
    ))
}

/// The look-up of a key change's old row: the SQL (old key values as text parameters) and the
/// columns it reads, or `None` when the row carries nothing to look up.
pub fn carry_query(
    db: DatabaseKind,
    always_quote: bool,
    table: &str,
    row: &UpsertRow,
) -> Option<(String, Vec<String>, Vec<usize>)> {
    let old_key = row.carry_key.clone()?;
    let carried: Vec<usize> = (0..row.unchanged.len())
        .filter(|&i| row.unchanged[i])
        .collect();
    if carried.is_empty() {
        return None;
    }
    let shape = &row.shape;
    let qc = |i: usize| quote(db, &shape.columns[i].name, always_quote);
    let (select, cond): (Vec<String>, Vec<String>) = match db {
        DatabaseKind::Postgres => (
            carried
                .iter()
                .map(|&i| format!("{}::text", qc(i)))
                .collect(),
            shape
                .key
                .iter()
                .enumerate()
                .map(|(j, &i)| format!("{}::text = ${}", qc(i), j + 1))
                .collect(),
        ),
        DatabaseKind::MySql => (
            carried.iter().map(|&i| qc(i)).collect(),
            shape
                .key
                .iter()
                .map(|&i| format!("CAST({} AS CHAR) = ?", qc(i)))
                .collect(),
        ),
    };
    let sql = format!(
        "SELECT {} FROM {} WHERE {}",
        select.join(", "),
        quote_table(db, table, always_quote),
        cond.join(" AND ")
    );
    Some((sql, old_key, carried))
}

/// Puts the old row's values (as `schema`, text or raw bytes) into the carried columns.
pub fn fill_carried(row: &mut UpsertRow, carried: &[usize], values: Vec<Value>, schema: SchemaRef) {
    let mut shape: Shape = (*row.shape).clone();
    for (&i, v) in carried.iter().zip(values) {
        shape.columns[i].schema = schema.clone();
        row.values[i] = v;
        row.unchanged[i] = false;
    }
    row.shape = std::sync::Arc::new(shape);
}

/// The schema carried values are written with: PostgreSQL's text output is valid input for the
/// same type; MySQL's raw values go back as bytes.
pub fn carried_schema(db: DatabaseKind) -> SchemaRef {
    match db {
        DatabaseKind::Postgres => Schema::optional_string(),
        DatabaseKind::MySql => headwater_api::SchemaBuilder::bytes().optional().build_ref(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn shape() -> Shape {
        Shape {
            columns: vec![
                Column {
                    name: "id".into(),
                    schema: Schema::int64(),
                },
                Column {
                    name: "Note".into(),
                    schema: Schema::optional_string(),
                },
            ],
            key: vec![0],
        }
    }

    #[test]
    fn evolution_creates_adds_or_explains() {
        let pg = DatabaseKind::Postgres;
        let Evolution::Create(ddl) = evolution(pg, false, true, "t", &shape(), None).unwrap()
        else {
            panic!()
        };
        assert_eq!(
            ddl,
            "CREATE TABLE IF NOT EXISTS t (id bigint NOT NULL, \"Note\" text, PRIMARY KEY (id))"
        );
        let my = evolution(
            DatabaseKind::MySql,
            false,
            true,
            "s.t",
            &shape(),
            Some(&["ID".into()]),
        )
        .unwrap();
        assert_eq!(
            my,
            Evolution::AddColumns(vec![(
                "Note".into(),
                "ALTER TABLE `s`.`t` ADD COLUMN `Note` longtext NULL".into()
            )])
        );
        let err = evolution(pg, false, false, "t", &shape(), Some(&["id".into()])).unwrap_err();
        assert!(err.to_string().contains("has no column(s) Note"), "{err}");
        assert_eq!(
            evolution(
                pg,
                false,
                false,
                "t",
                &shape(),
                Some(&["id".into(), "Note".into()])
            )
            .unwrap(),
            Evolution::Nothing
        );
    }

    #[test]
    fn carry_queries_read_the_unchanged_columns_by_old_key() {
        let row = UpsertRow {
            shape: Arc::new(shape()),
            values: vec![Value::Int64(2), Value::String("placeholder".into())],
            unchanged: vec![false, true],
            carry_key: Some(vec!["1".into()]),
        };
        let (sql, params, carried) = carry_query(DatabaseKind::Postgres, false, "t", &row).unwrap();
        assert_eq!(sql, "SELECT \"Note\"::text FROM t WHERE id::text = $1");
        assert_eq!((params, carried.clone()), (vec!["1".to_owned()], vec![1]));
        let mut row = row;
        fill_carried(
            &mut row,
            &carried,
            vec![Value::String("kept".into())],
            carried_schema(DatabaseKind::Postgres),
        );
        assert_eq!(row.unchanged, vec![false, false]);
        assert_eq!(row.values[1], Value::String("kept".into()));
    }
}
