//! Debezium's source signals: documents inserted into `signal.data.collection`, read from the
//! change stream like any other change. A signal document has three fields: an id, a type and
//! its data (a document, or a JSON string of one). Debezium reads them by position and so do
//! we.
//!
//! Built: `execute-snapshot` (run as a blocking snapshot of the collections it names, see
//! docs/connectors/mongodb.md) and `log`. Other types are reported in the worker's log and
//! otherwise skipped.
//!
//! Invariant: a request round-trips through [`SnapshotRequest::to_json`] and
//! [`SnapshotRequest::from_json`], which is how an interrupted snapshot finds it in its offset.

use headwater_connector_common::name_filter::PatternList;
use mongodb::bson::{Bson, Document};
use serde_json::{json, Value};

/// What a signal document asks for.
#[derive(Debug)]
pub enum Signal {
    ExecuteSnapshot(SnapshotRequest),
    /// `log`: a message for the worker's log.
    Log(String),
    /// A signal this connector does not act on: its type, and why.
    Unsupported(String, String),
}

/// An `execute-snapshot` signal's data.
#[derive(Debug)]
pub struct SnapshotRequest {
    /// `data-collections`: regexes matched against `<db>.<collection>`.
    pub collections: Vec<String>,
    /// `additional-conditions`: (a regex for `<db>.<collection>`, the query as JSON text).
    pub conditions: Vec<(String, String)>,
    /// `type`: `incremental` (Debezium's default) or `blocking`.
    pub incremental: bool,
    matchers: PatternList,
    condition_matchers: Vec<(PatternList, Document)>,
}

impl SnapshotRequest {
    /// Whether the request names `<db>.<collection>`.
    pub fn names(&self, ns: &str) -> bool {
        self.matchers.matches(ns)
    }

    /// The query the request gives for `<db>.<collection>`, if any (the first that matches).
    pub fn condition(&self, ns: &str) -> Option<&Document> {
        self.condition_matchers
            .iter()
            .find(|(m, _)| m.matches(ns))
            .map(|(_, q)| q)
    }

    /// The request as the offset of its snapshot keeps it.
    pub fn to_json(&self) -> String {
        json!({
            "data-collections": self.collections,
            "type": if self.incremental { "incremental" } else { "blocking" },
            "additional-conditions": self.conditions.iter()
                .map(|(c, f)| json!({"data-collection": c, "filter": f}))
                .collect::<Vec<_>>(),
        })
        .to_string()
    }

    pub fn from_json(text: &str) -> Result<SnapshotRequest, String> {
        let data: Value =
            serde_json::from_str(text).map_err(|e| format!("its data is not JSON: {e}"))?;
        SnapshotRequest::from_data(&data)
    }

    fn from_data(data: &Value) -> Result<SnapshotRequest, String> {
        let collections: Vec<String> = match data.get("data-collections") {
            Some(Value::Array(items)) if !items.is_empty() => items
                .iter()
                .map(|v| {
                    v.as_str().map(|s| s.trim().to_owned()).ok_or_else(|| {
                        "data-collections holds something other than a string".to_owned()
                    })
                })
                .collect::<Result<_, _>>()?,
            _ => return Err("data-collections is missing or empty".into()),
        };
        let incremental = match data.get("type").and_then(Value::as_str) {
            None => true,
            Some(t) if t.eq_ignore_ascii_case("incremental") => true,
            Some(t) if t.eq_ignore_ascii_case("blocking") => false,
            Some(other) => {
                return Err(format!(
                    "snapshot type {other:?} is not incremental or blocking"
                ))
            }
        };
        let mut conditions = Vec::new();
        if let Some(list) = data.get("additional-conditions") {
            let Value::Array(items) = list else {
                return Err("additional-conditions is not an array".into());
            };
            for item in items {
                let (Some(collection), Some(filter)) = (
                    item.get("data-collection").and_then(Value::as_str),
                    item.get("filter"),
                ) else {
                    return Err("each additional condition needs data-collection and filter".into());
                };
                let filter = match filter {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                conditions.push((collection.to_owned(), filter));
            }
        }
        let joined = collections
            .iter()
            .map(|c| c.replace(',', "\\,"))
            .collect::<Vec<_>>()
            .join(",");
        let matchers = PatternList::parse(&joined)?;
        let mut condition_matchers = Vec::new();
        for (collection, filter) in &conditions {
            let m = PatternList::parse(&collection.replace(',', "\\,"))?;
            let query: Value = serde_json::from_str(filter)
                .map_err(|e| format!("the filter of {collection} is not JSON: {e}"))?;
            let Value::Object(map) = query else {
                return Err(format!("the filter of {collection} is not a JSON document"));
            };
            let query = Document::try_from(map)
                .map_err(|e| format!("the filter of {collection} is not extended JSON: {e}"))?;
            condition_matchers.push((m, query));
        }
        Ok(SnapshotRequest {
            collections,
            conditions,
            incremental,
            matchers,
            condition_matchers,
        })
    }
}

/// Reads a signal document (the inserted document of the signal collection).
pub fn parse(doc: &Document) -> Signal {
    let mut fields = doc.iter().map(|(_, v)| v);
    let (_id, kind, data) = (fields.next(), fields.next(), fields.next());
    let Some(Bson::String(kind)) = kind else {
        return Signal::Unsupported(
            "?".into(),
            "its second field (the signal's type) is not a string".into(),
        );
    };
    let data: Value = match data {
        Some(Bson::String(text)) if text.trim().is_empty() => Value::Null,
        Some(Bson::String(text)) => match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                return Signal::Unsupported(kind.clone(), format!("its data is not JSON: {e}"))
            }
        },
        Some(Bson::Document(d)) => Bson::Document(d.clone()).into_relaxed_extjson(),
        _ => Value::Null,
    };
    match kind.as_str() {
        "execute-snapshot" => match SnapshotRequest::from_data(&data) {
            Ok(r) => Signal::ExecuteSnapshot(r),
            Err(e) => Signal::Unsupported(kind.clone(), e),
        },
        "log" => Signal::Log(
            data.get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        ),
        other => Signal::Unsupported(
            other.to_owned(),
            "Headwater acts on execute-snapshot and log signals only".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::doc;

    #[test]
    fn execute_snapshot_with_data_as_a_document_or_a_string() {
        let as_doc = doc! {"_id": "s1", "type": "execute-snapshot", "data": {
            "data-collections": ["shop\\.orders", "shop\\.line.*"], "type": "BLOCKING",
            "additional-conditions": [{"data-collection": "shop.orders", "filter": "{\"status\": \"open\"}"}],
        }};
        let as_text = doc! {"id": "s2", "type": "execute-snapshot",
        "data": r#"{"data-collections": ["shop\\.orders", "shop\\.line.*"], "type": "blocking", "additional-conditions": [{"data-collection": "shop.orders", "filter": {"status": "open"}}]}"#};
        for d in [as_doc, as_text] {
            let Signal::ExecuteSnapshot(r) = parse(&d) else {
                panic!("{d}");
            };
            assert!(!r.incremental);
            assert!(r.names("shop.orders") && r.names("SHOP.line_items"));
            assert!(!r.names("shop.customers"));
            assert_eq!(r.condition("shop.orders"), Some(&doc! {"status": "open"}));
            assert_eq!(r.condition("shop.line_items"), None);
            let again = SnapshotRequest::from_json(&r.to_json()).unwrap();
            assert_eq!(again.collections, r.collections);
            assert_eq!(again.conditions, r.conditions);
            assert!(!again.incremental);
        }
    }

    #[test]
    fn other_signals_and_bad_data_say_why() {
        let default_type =
            doc! {"_id": "a", "type": "execute-snapshot", "data": {"data-collections": ["x.y"]}};
        assert!(matches!(parse(&default_type), Signal::ExecuteSnapshot(r) if r.incremental));
        let log = doc! {"_id": "b", "type": "log", "data": {"message": "hello"}};
        assert!(matches!(parse(&log), Signal::Log(m) if m == "hello"));
        for (d, says) in [
            (
                doc! {"_id": "c", "type": "pause-snapshot", "data": ""},
                "execute-snapshot and log",
            ),
            (
                doc! {"_id": "d", "type": "execute-snapshot", "data": {"data-collections": []}},
                "missing or empty",
            ),
            (
                doc! {"_id": "e", "type": "execute-snapshot", "data": "{"},
                "not JSON",
            ),
            (
                doc! {"_id": "f", "type": "execute-snapshot", "data": {"data-collections": ["x.y"], "type": "fast"}},
                "not incremental or blocking",
            ),
            (
                doc! {"_id": "g", "type": "execute-snapshot", "data": {"data-collections": ["x.y"],
                "additional-conditions": [{"data-collection": "x.y", "filter": "status = 1"}]}},
                "not JSON",
            ),
            (doc! {"_id": "h", "type": 5}, "not a string"),
        ] {
            let Signal::Unsupported(_, why) = parse(&d) else {
                panic!("{d} accepted");
            };
            assert!(why.contains(says), "{d}: {why}");
        }
    }
}
