//! One `put`'s changes, reduced per table to what the destination must do, in an order that
//! gives the same final state as applying every change one by one.
//!
//! With a primary key and `insert.mode` upsert or update, only the last change per key counts
//! (a later upsert replaces an earlier one, a delete removes it), except that columns a later
//! upsert leaves unchanged (unchanged TOAST) take the value an earlier upsert of the same batch
//! wrote. Without reduction (`insert.mode=insert`) changes stay in order, and the table is
//! flushed whenever the kind of change switches. A truncate flushes the table first.

use std::collections::HashMap;
use std::sync::Arc;

use headwater_api::Value;

use crate::change::{Action, Change, Shape};

/// A row to insert or update (see [`Action::Upsert`]).
#[derive(Clone, Debug, PartialEq)]
pub struct UpsertRow {
    pub shape: Arc<Shape>,
    pub values: Vec<Value>,
    pub unchanged: Vec<bool>,
    pub carry_key: Option<Vec<String>>,
}

/// Rows of one upsert step that carry the same columns (the shape's, minus unchanged ones),
/// written with one statement.
#[derive(Debug)]
pub struct ColumnGroup {
    pub shape: Arc<Shape>,
    /// Indexes into the shape's columns of the columns written.
    pub present: Vec<usize>,
    /// Per row, the values of the `present` columns.
    pub rows: Vec<Vec<Value>>,
}

/// Groups an upsert step's rows by the columns they carry, keeping their order within a group
/// (groups touch distinct keys when the batch was reduced).
pub fn group_by_columns(rows: Vec<UpsertRow>) -> Vec<ColumnGroup> {
    let mut groups: Vec<ColumnGroup> = Vec::new();
    for row in rows {
        let present: Vec<usize> = (0..row.shape.columns.len())
            .filter(|&i| !row.unchanged[i])
            .collect();
        let values: Vec<Value> = if present.len() == row.values.len() {
            row.values
        } else {
            let mut all = row.values;
            present
                .iter()
                .map(|&i| std::mem::take(&mut all[i]))
                .collect()
        };
        match groups.iter_mut().find(|g| {
            (Arc::ptr_eq(&g.shape, &row.shape) || *g.shape == *row.shape) && g.present == present
        }) {
            Some(g) => g.rows.push(values),
            None => groups.push(ColumnGroup {
                shape: row.shape,
                present,
                rows: vec![values],
            }),
        }
    }
    groups
}

/// What to apply to one table, in this order.
#[derive(Debug, PartialEq)]
pub enum Step {
    Upserts(Vec<UpsertRow>),
    Deletes(Arc<Shape>, Vec<Vec<Value>>),
    Truncate,
}

/// The steps of one table.
#[derive(Debug, Default)]
pub struct TablePlan {
    pub steps: Vec<Step>,
    reduced: Option<Reduced>,
}

#[derive(Debug, Default)]
struct Reduced {
    /// The last change per key, in the order each key first appeared.
    last: Vec<(Arc<Shape>, Action)>,
    /// Key bytes -> index into `last` (a fast hasher: one lookup per row).
    index: HashMap<Vec<u8>, usize, foldhash::fast::RandomState>,
}

/// A byte string that identifies key values (equal keys, equal bytes; common types without
/// formatting).
fn key_bytes<'v>(values: impl Iterator<Item = &'v Value>) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    for v in values {
        match v {
            Value::Int8(x) => {
                out.push(1);
                out.extend_from_slice(&i64::from(*x).to_le_bytes());
            }
            Value::Int16(x) => {
                out.push(1);
                out.extend_from_slice(&i64::from(*x).to_le_bytes());
            }
            Value::Int32(x) => {
                out.push(1);
                out.extend_from_slice(&i64::from(*x).to_le_bytes());
            }
            Value::Int64(x) => {
                out.push(1);
                out.extend_from_slice(&x.to_le_bytes());
            }
            Value::String(s) => {
                out.push(2);
                out.extend_from_slice(&(s.len() as u64).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            Value::Bytes(b) => {
                out.push(3);
                out.extend_from_slice(&(b.len() as u64).to_le_bytes());
                out.extend_from_slice(b);
            }
            other => {
                let text = format!("{other:?}");
                out.push(4);
                out.extend_from_slice(&(text.len() as u64).to_le_bytes());
                out.extend_from_slice(text.as_bytes());
            }
        }
    }
    out
}

impl TablePlan {
    fn flush_reduced(&mut self) {
        let Some(r) = self.reduced.take() else {
            return;
        };
        let mut ups = Vec::with_capacity(r.last.len());
        let mut dels: Option<(Arc<Shape>, Vec<Vec<Value>>)> = None;
        for (shape, action) in r.last {
            match action {
                Action::Upsert {
                    values,
                    unchanged,
                    carry_key,
                } => ups.push(UpsertRow {
                    shape,
                    values,
                    unchanged,
                    carry_key,
                }),
                Action::Delete { key } => match &mut dels {
                    Some((_, keys)) => keys.push(key),
                    None => dels = Some((shape, vec![key])),
                },
                Action::Truncate => {}
            }
        }
        // Keys are distinct, so deletes and upserts commute.
        if let Some((shape, keys)) = dels {
            self.steps.push(Step::Deletes(shape, keys));
        }
        if !ups.is_empty() {
            self.steps.push(Step::Upserts(ups));
        }
    }

    fn push_reduced(&mut self, change: Change) {
        let r = self.reduced.get_or_insert_with(Reduced::default);
        let key = match &change.action {
            Action::Upsert { values, .. } => {
                key_bytes(change.shape.key.iter().map(|&i| &values[i]))
            }
            Action::Delete { key } => key_bytes(key.iter()),
            Action::Truncate => return,
        };
        let earlier = r.index.get(&key).copied();
        let mut action = change.action;
        if let (
            Action::Upsert {
                values, unchanged, ..
            },
            Some((
                prev_shape,
                Action::Upsert {
                    values: prev_values,
                    unchanged: prev_unchanged,
                    ..
                },
            )),
        ) = (&mut action, earlier.map(|i| &r.last[i]))
        {
            if unchanged.iter().any(|u| *u) {
                for (i, col) in change.shape.columns.iter().enumerate() {
                    if !unchanged[i] {
                        continue;
                    }
                    if let Some(j) = prev_shape.columns.iter().position(|c| c.name == col.name) {
                        if !prev_unchanged[j] {
                            values[i] = prev_values[j].clone();
                            unchanged[i] = false;
                        }
                    }
                }
            }
        }
        match earlier {
            Some(i) => r.last[i] = (change.shape, action),
            None => {
                r.index.insert(key, r.last.len());
                r.last.push((change.shape, action));
            }
        }
    }

    fn push_in_order(&mut self, change: Change) {
        match change.action {
            Action::Upsert {
                values,
                unchanged,
                carry_key,
            } => {
                let row = UpsertRow {
                    shape: change.shape,
                    values,
                    unchanged,
                    carry_key,
                };
                if let Some(Step::Upserts(rows)) = self.steps.last_mut() {
                    rows.push(row);
                } else {
                    self.steps.push(Step::Upserts(vec![row]));
                }
            }
            Action::Delete { key } => {
                if let Some(Step::Deletes(_, keys)) = self.steps.last_mut() {
                    keys.push(key);
                } else {
                    self.steps.push(Step::Deletes(change.shape, vec![key]));
                }
            }
            Action::Truncate => self.steps.push(Step::Truncate),
        }
    }
}

/// Per table (in order of first appearance), the steps of a batch.
pub fn plan(changes: Vec<Change>, reduce: bool) -> Vec<(String, TablePlan)> {
    let mut tables: Vec<(String, TablePlan)> = Vec::new();
    for change in changes {
        let idx = match tables.iter().position(|(t, _)| *t == change.table) {
            Some(i) => i,
            None => {
                tables.push((change.table.clone(), TablePlan::default()));
                tables.len() - 1
            }
        };
        let plan = &mut tables[idx].1;
        let has_key = !change.shape.key.is_empty();
        match change.action {
            Action::Truncate => {
                plan.flush_reduced();
                plan.steps.push(Step::Truncate);
            }
            _ if reduce && has_key => plan.push_reduced(change),
            _ => {
                plan.flush_reduced();
                plan.push_in_order(change);
            }
        }
    }
    for (_, plan) in &mut tables {
        plan.flush_reduced();
    }
    tables
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::Column;
    use headwater_api::Schema;

    fn shape() -> Arc<Shape> {
        Arc::new(Shape {
            columns: vec![
                Column {
                    name: "id".into(),
                    schema: Schema::int32(),
                },
                Column {
                    name: "doc".into(),
                    schema: Schema::string(),
                },
            ],
            key: vec![0],
        })
    }

    fn up(id: i32, doc: Option<&str>) -> Change {
        Change {
            table: "t".into(),
            shape: shape(),
            action: Action::Upsert {
                values: vec![
                    Value::Int32(id),
                    Value::String(doc.unwrap_or("__placeholder").into()),
                ],
                unchanged: vec![false, doc.is_none()],
                carry_key: None,
            },
        }
    }

    fn del(id: i32) -> Change {
        Change {
            table: "t".into(),
            shape: Arc::new(Shape {
                columns: vec![shape().columns[0].clone()],
                key: vec![0],
            }),
            action: Action::Delete {
                key: vec![Value::Int32(id)],
            },
        }
    }

    #[test]
    fn the_last_change_per_key_wins_and_unchanged_columns_take_earlier_values() {
        let plans = plan(
            vec![
                up(1, Some("a")),
                up(2, Some("b")),
                del(1),
                up(2, None),
                up(3, None),
            ],
            true,
        );
        assert_eq!(plans.len(), 1);
        let steps = &plans[0].1.steps;
        assert_eq!(steps.len(), 2);
        let Step::Deletes(_, keys) = &steps[0] else {
            panic!("{steps:?}")
        };
        assert_eq!(keys, &vec![vec![Value::Int32(1)]]);
        let Step::Upserts(rows) = &steps[1] else {
            panic!("{steps:?}")
        };
        assert_eq!(rows.len(), 2);
        assert_eq!(
            rows[0].values[1],
            Value::String("b".into()),
            "filled from the earlier upsert"
        );
        assert_eq!(rows[0].unchanged, vec![false, false]);
        assert_eq!(
            rows[1].unchanged,
            vec![false, true],
            "nothing earlier to fill from"
        );
    }

    #[test]
    fn without_reduction_changes_keep_their_order() {
        let plans = plan(vec![up(1, Some("a")), del(1), up(1, Some("b"))], false);
        let kinds: Vec<&str> = plans[0]
            .1
            .steps
            .iter()
            .map(|s| match s {
                Step::Upserts(_) => "u",
                Step::Deletes(..) => "d",
                Step::Truncate => "t",
            })
            .collect();
        assert_eq!(kinds, ["u", "d", "u"]);
    }
}
