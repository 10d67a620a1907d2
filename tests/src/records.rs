//! Reading what source tasks hand out, for the connectors' tests: Debezium's notification
//! records (`notification.enabled.channels=sink`) as plain values, and Debezium's context
//! headers (`extended.headers.enabled`).
//!
//! Invariant: [`notifications`] panics on a notification record that breaks Debezium's shape
//! (a key id other than the value's, a source offset, a field of another type), and
//! [`context_headers`] on context headers that are not Debezium's four strings in its order at
//! the end of the record's headers, so every test reading them checks the shape too.

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

/// Debezium's context headers of one record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextHeaders {
    /// `__debezium.context.connectorLogicalName`.
    pub logical_name: String,
    /// `__debezium.context.taskId`.
    pub task_id: String,
    /// `__debezium.context.connectorName`.
    pub connector_name: String,
    /// `__debezium.context.runId`.
    pub run_id: String,
    /// The keys of the headers before them (`__debezium.newkey`, ...).
    pub before: Vec<String>,
}

/// The record's context headers, `None` when it has none; panics when they are there but not
/// as Debezium writes them (four string headers, in its order, last, with a UUID run id).
pub fn context_headers(record: &SourceRecord) -> Option<ContextHeaders> {
    const KEYS: [&str; 4] = [
        "__debezium.context.connectorLogicalName",
        "__debezium.context.taskId",
        "__debezium.context.connectorName",
        "__debezium.context.runId",
    ];
    let all: Vec<_> = record.headers.iter().collect();
    let first = all
        .iter()
        .position(|h| h.key.starts_with("__debezium.context."))?;
    let ours = &all[first..];
    assert_eq!(
        ours.iter().map(|h| h.key.as_str()).collect::<Vec<_>>(),
        KEYS,
        "context headers of a record on {}",
        record.topic
    );
    let values: Vec<String> = ours
        .iter()
        .map(|h| match &h.value {
            Value::String(s) => s.clone(),
            other => panic!("context header {} is not text: {other:?}", h.key),
        })
        .collect();
    assert!(is_uuid(&values[3]), "the run id is a UUID: {:?}", values[3]);
    Some(ContextHeaders {
        logical_name: values[0].clone(),
        task_id: values[1].clone(),
        connector_name: values[2].clone(),
        run_id: values[3].clone(),
        before: all[..first].iter().map(|h| h.key.clone()).collect(),
    })
}

fn is_uuid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The task runs seen in records' context headers, in order (a run id that differs from the
/// last one seen starts a run).
#[derive(Clone, Debug, Default)]
pub struct RunIds(pub Vec<String>);

impl RunIds {
    /// Checks that every record carries context headers with this logical name, task `0` and
    /// connector type, and notes their run ids.
    pub fn check(&mut self, records: &[SourceRecord], logical_name: &str, connector_name: &str) {
        for r in records {
            let ctx = context_headers(r)
                .unwrap_or_else(|| panic!("a record on {} without context headers", r.topic));
            assert_eq!(
                (
                    ctx.logical_name.as_str(),
                    ctx.task_id.as_str(),
                    ctx.connector_name.as_str()
                ),
                (logical_name, "0", connector_name),
                "context headers of a record on {}",
                r.topic
            );
            if self.0.last() != Some(&ctx.run_id) {
                assert!(
                    !self.0.contains(&ctx.run_id),
                    "run id {} came back after another",
                    ctx.run_id
                );
                self.0.push(ctx.run_id);
            }
        }
    }
}
