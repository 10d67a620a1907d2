//! Reading what source tasks hand out, for the connectors' tests: Debezium's notification
//! records (`notification.enabled.channels=sink`) as plain values.
//!
//! Invariant: [`notifications`] panics on a notification record that breaks Debezium's shape
//! (a key id other than the value's, a source offset, a field of another type), so every test
//! reading them checks the shape too.

use std::collections::BTreeMap;

use headwater_api::{SourceRecord, Value};

/// One notification record's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notification {
    pub id: String,
    /// `Initial Snapshot` or `Incremental Snapshot`.
    pub aggregate_type: String,
    /// `STARTED`, `IN_PROGRESS`, ...
    pub kind: String,
    pub data: BTreeMap<String, String>,
}

fn text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        other => panic!("a notification field is not text: {other:?}"),
    }
}

/// The notifications among `records` that went to `topic`, in order.
pub fn notifications(records: &[SourceRecord], topic: &str) -> Vec<Notification> {
    records
        .iter()
        .filter(|r| r.topic == topic)
        .map(|r| {
            assert!(
                r.source_offset.is_empty(),
                "a notification carries no offset"
            );
            let v = r.value.as_struct().expect("a struct value");
            assert_eq!(
                r.key.as_struct().and_then(|k| k.get("id")),
                v.get("id"),
                "the key is the notification's id"
            );
            let data = match v.get("additional_data") {
                Some(Value::Map(m)) => m
                    .iter()
                    .map(|(k, v)| (text(Some(k)), text(Some(v))))
                    .collect(),
                other => panic!("no additional data: {other:?}"),
            };
            Notification {
                id: text(v.get("id")),
                aggregate_type: text(v.get("aggregate_type")),
                kind: text(v.get("type")),
                data,
            }
        })
        .collect()
}
