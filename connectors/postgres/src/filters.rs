//! Debezium's include/exclude lists: comma-separated regular expressions (a comma inside a
//! pattern is written `\,`), each matched case-insensitively against the whole qualified name
//! (`schema`, `schema.table`, `schema.table.column`).
//!
//! Invariant: a pattern only ever matches a whole name (it is compiled as `(?i)^(?:p)$`).

pub use headwater_connector_common::name_filter::{split_list, PatternList, Selector};

/// The connector's table and column filters.
#[derive(Clone, Debug, Default)]
pub struct Filters {
    pub schemas: Selector,
    pub tables: Selector,
    pub columns: Selector,
    pub ignore_builtin: bool,
    /// `signal.data.collection` (schema, table): captured whatever the lists say, as in
    /// Debezium, but never snapshotted.
    pub signal_table: Option<(String, String)>,
    /// Whether the table's rows are signals (the source channel is enabled); its watermark
    /// rows are read either way.
    pub source_signals: bool,
}

/// Schemas that are never captured when `table.ignore.builtin` is on.
fn is_builtin_schema(schema: &str) -> bool {
    schema == "pg_catalog" || schema == "information_schema" || schema.starts_with("pg_toast")
}

impl Filters {
    pub fn table_included(&self, schema: &str, table: &str) -> bool {
        if self.is_signal_table(schema, table) {
            return true;
        }
        if self.ignore_builtin && is_builtin_schema(schema) {
            return false;
        }
        self.schemas.accepts(schema) && self.tables.accepts(&format!("{schema}.{table}"))
    }
    pub fn is_signal_table(&self, schema: &str, table: &str) -> bool {
        self.signal_table
            .as_ref()
            .is_some_and(|(s, t)| s == schema && t == table)
    }
    pub fn column_included(&self, schema: &str, table: &str, column: &str) -> bool {
        self.columns.accepts(&format!("{schema}.{table}.{column}"))
    }
    /// Sort key for the snapshot order: tables follow the order of the include-list pattern
    /// they first match (Debezium snapshots in `table.include.list` order), then by name.
    pub fn snapshot_rank(&self, schema: &str, table: &str) -> usize {
        match &self.tables {
            Selector::Include(p) => p
                .position(&format!("{schema}.{table}"))
                .unwrap_or(usize::MAX),
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchored_case_insensitive_and_escaped_commas() {
        assert_eq!(split_list(" a , b\\,c ,,"), vec!["a", "b,c"]);
        let p = PatternList::parse("public.orders,public\\.cust.*").unwrap();
        assert!(p.matches("PUBLIC.ORDERS"));
        assert!(!p.matches("public.orders2"));
        assert!(!p.matches("xpublic.orders"));
        assert!(p.matches("public.customers"));
        assert_eq!(p.position("public.customers"), Some(1));
        assert!(PatternList::parse("a(").is_err());
        let f = Filters {
            tables: Selector::Include(
                PatternList::parse("public.orders,public.customers").unwrap(),
            ),
            ignore_builtin: true,
            ..Filters::default()
        };
        assert!(f.table_included("public", "orders"));
        assert!(!f.table_included("public", "products"));
        assert!(f.snapshot_rank("public", "customers") > f.snapshot_rank("public", "orders"));
        let ex = Filters {
            columns: Selector::Exclude(PatternList::parse("public.orders.note").unwrap()),
            ..Filters::default()
        };
        assert!(!ex.column_included("public", "orders", "note"));
        assert!(ex.column_included("public", "orders", "id"));
        assert!(!Filters {
            ignore_builtin: true,
            ..Filters::default()
        }
        .table_included("pg_catalog", "pg_class"));
    }
}
