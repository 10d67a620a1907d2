//! Debezium's source signals for MongoDB: documents inserted into `signal.data.collection`, read
//! from the change stream like any other change. A signal document has three fields: an id, a
//! type and its data (a document, or a JSON string of one). Debezium reads them by position and
//! so do we. What a signal asks for is read by [`headwater_connector_common::signal`]; here its
//! `additional-conditions` filters become queries.
//!
//! Built: `execute-snapshot` (blocking, or incremental: chunks in `_id` order between
//! watermark documents while streaming goes on, see docs/connectors/mongodb.md), the
//! incremental snapshot's watermarks and `stop-snapshot`, `pause-snapshot`, `resume-snapshot`,
//! and `log`. Other types are reported in the worker's log and otherwise skipped.
//!
//! Invariant: a request round-trips through [`SnapshotRequest::to_json`] and
//! [`SnapshotRequest::from_json`], which is how an interrupted snapshot finds it in its offset.

use headwater_connector_common::signal::{self as common, SnapshotRequest as Request};
use mongodb::bson::{Bson, Document};
use serde_json::Value;

/// What a signal document asks for.
#[derive(Debug)]
pub enum Signal {
    ExecuteSnapshot(SnapshotRequest),
    /// An incremental snapshot's watermark, or its `stop-snapshot`, `pause-snapshot`,
    /// `resume-snapshot`.
    Incremental(common::IncrementalSignal),
    /// `log`: a message for the worker's log.
    Log(String),
    /// A signal this connector does not act on: its type, and why.
    Unsupported(String, String),
}

/// An `execute-snapshot` signal's data, with its conditions read as queries.
#[derive(Debug)]
pub struct SnapshotRequest {
    request: Request,
    /// The query of each of `request.conditions`.
    queries: Vec<Document>,
}

impl std::ops::Deref for SnapshotRequest {
    type Target = Request;
    fn deref(&self) -> &Request {
        &self.request
    }
}

impl SnapshotRequest {
    /// The query the request gives for `<db>.<collection>`, if any (the first that matches).
    pub fn condition(&self, ns: &str) -> Option<&Document> {
        self.request.condition_index(ns).map(|i| &self.queries[i])
    }

    pub fn from_json(text: &str) -> Result<SnapshotRequest, String> {
        SnapshotRequest::with_queries(Request::from_json(text)?)
    }

    fn with_queries(request: Request) -> Result<SnapshotRequest, String> {
        let mut queries = Vec::with_capacity(request.conditions.len());
        for (collection, filter) in &request.conditions {
            queries.push(query_of(collection, filter)?);
        }
        Ok(SnapshotRequest { request, queries })
    }
}

/// An `additional-conditions` filter (JSON text) of `collection` as a query document.
pub fn query_of(collection: &str, filter: &str) -> Result<Document, String> {
    let query: Value = serde_json::from_str(filter)
        .map_err(|e| format!("the filter of {collection} is not JSON: {e}"))?;
    let Value::Object(map) = query else {
        return Err(format!("the filter of {collection} is not a JSON document"));
    };
    Document::try_from(map)
        .map_err(|e| format!("the filter of {collection} is not extended JSON: {e}"))
}

/// Reads a signal document (the inserted document of the signal collection).
pub fn parse(doc: &Document) -> Signal {
    let mut fields = doc.iter().map(|(_, v)| v);
    let (id, kind, data) = (fields.next(), fields.next(), fields.next());
    let Some(Bson::String(kind)) = kind else {
        return Signal::Unsupported(
            "?".into(),
            "its second field (the signal's type) is not a string".into(),
        );
    };
    let data: Value = match data {
        Some(Bson::String(text)) => match common::data_from_text(text) {
            Ok(v) => v,
            Err(e) => return Signal::Unsupported(kind.clone(), e),
        },
        Some(Bson::Document(d)) => Bson::Document(d.clone()).into_relaxed_extjson(),
        _ => Value::Null,
    };
    let id = match id {
        Some(Bson::String(s)) => Some(s.clone()),
        None | Some(Bson::Null) => None,
        Some(other) => Some(other.to_string()),
    };
    match common::parse_incremental(id.as_deref(), kind, &data) {
        Some(Ok(signal)) => return Signal::Incremental(signal),
        Some(Err(why)) => return Signal::Unsupported(kind.clone(), why),
        None => {}
    }
    match common::parse(kind, &data) {
        common::Signal::ExecuteSnapshot(mut r) => match SnapshotRequest::with_queries({
            r.id = id;
            r
        }) {
            Ok(r) => Signal::ExecuteSnapshot(r),
            Err(e) => Signal::Unsupported(kind.clone(), e),
        },
        common::Signal::Log(m) => Signal::Log(m),
        common::Signal::Unsupported(k, why) => Signal::Unsupported(k, why),
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
            assert!(matches!(r.id.as_deref(), Some("s1" | "s2")), "{:?}", r.id);
            assert_eq!(again.id, r.id, "the offsets keep the signal's id");
        }
    }

    #[test]
    fn other_signals_and_bad_data_say_why() {
        let default_type =
            doc! {"_id": "a", "type": "execute-snapshot", "data": {"data-collections": ["x.y"]}};
        assert!(matches!(parse(&default_type), Signal::ExecuteSnapshot(r) if r.incremental));
        let log = doc! {"_id": "b", "type": "log", "data": {"message": "hello"}};
        assert!(matches!(parse(&log), Signal::Log(m) if m == "hello"));
        let close = doc! {"_id": "hw-1-close", "type": "snapshot-window-close", "data": "{}"};
        assert!(matches!(
            parse(&close),
            Signal::Incremental(common::IncrementalSignal::WindowClose(id)) if id == "hw-1"
        ));
        for (d, says) in [
            (
                doc! {"_id": "c", "type": "pause-snapshot", "data": {"type": "blocking"}},
                "incremental snapshots only",
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
