//! Debezium's include/exclude lists: comma-separated regular expressions (a comma inside a
//! pattern is written `\,`), each matched case-insensitively against the whole qualified name
//! (`db`, `db.table`, `db.table.column`).
//!
//! Invariant: a pattern only ever matches a whole name (it is compiled as `(?i)^(?:p)$`).

pub use headwater_connector_common::name_filter::{split_list, PatternList, Selector};

/// The connector's database, table and column filters.
#[derive(Clone, Debug, Default)]
pub struct Filters {
    pub databases: Selector,
    pub tables: Selector,
    pub columns: Selector,
    pub ignore_builtin: bool,
    /// `signal.data.collection` (database, table): captured whatever the lists say, as in
    /// Debezium, but never snapshotted.
    pub signal_table: Option<(String, String)>,
    /// Whether the table's rows are signals (the source channel is enabled); its watermark
    /// rows are read either way.
    pub source_signals: bool,
}

/// Databases that are never captured when `table.ignore.builtin` is on.
fn is_builtin_db(db: &str) -> bool {
    matches!(
        db.to_ascii_lowercase().as_str(),
        "mysql" | "information_schema" | "performance_schema" | "sys"
    )
}

impl Filters {
    pub fn table_included(&self, db: &str, table: &str) -> bool {
        if self.is_signal_table(db, table) {
            return true;
        }
        if self.ignore_builtin && is_builtin_db(db) {
            return false;
        }
        self.databases.accepts(db) && self.tables.accepts(&format!("{db}.{table}"))
    }
    pub fn is_signal_table(&self, db: &str, table: &str) -> bool {
        self.signal_table
            .as_ref()
            .is_some_and(|(d, t)| d == db && t == table)
    }
    pub fn column_included(&self, db: &str, table: &str, column: &str) -> bool {
        self.columns.accepts(&format!("{db}.{table}.{column}"))
    }
    /// Sort key for the snapshot order: tables follow the order of the include-list pattern
    /// they first match (Debezium snapshots in `table.include.list` order), then by name.
    pub fn snapshot_rank(&self, db: &str, table: &str) -> usize {
        match &self.tables {
            Selector::Include(p) => p.position(&format!("{db}.{table}")).unwrap_or(usize::MAX),
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchored_case_insensitive_and_builtin() {
        assert_eq!(split_list(" a , b\\,c ,,"), vec!["a", "b,c"]);
        let f = Filters {
            tables: Selector::Include(PatternList::parse("public.orders,public.cust.*").unwrap()),
            ignore_builtin: true,
            ..Filters::default()
        };
        assert!(f.table_included("PUBLIC", "ORDERS"));
        assert!(!f.table_included("public", "orders2"));
        assert!(f.table_included("public", "customers"));
        assert!(f.snapshot_rank("public", "customers") > f.snapshot_rank("public", "orders"));
        assert!(!Filters {
            ignore_builtin: true,
            ..Filters::default()
        }
        .table_included("mysql", "user"));
        assert!(PatternList::parse("a(").is_err());
        let ex = Filters {
            columns: Selector::Exclude(PatternList::parse("public.orders.note").unwrap()),
            ..Filters::default()
        };
        assert!(!ex.column_included("public", "orders", "note"));
        assert!(ex.column_included("public", "orders", "id"));
    }
}
