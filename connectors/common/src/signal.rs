//! Debezium's source signals, as every connector reads them: a row or document with three
//! fields (an id, a type and the data, a JSON document), inserted into `signal.data.collection`
//! and read from the change stream like any other change. The connectors turn their row into
//! a type and a JSON value; this module says what the signal asks for.
//!
//! Built: `execute-snapshot` (a blocking or incremental snapshot of the tables or collections
//! it names; MongoDB runs incremental requests as blocking ones) and `log`; for connectors that
//! run incremental snapshots, [`parse_incremental`] reads their watermarks and `stop-snapshot`,
//! `pause-snapshot`, `resume-snapshot`. Other types are [`Signal::Unsupported`], with the
//! reason.
//!
//! Invariant: a request round-trips through [`SnapshotRequest::to_json`] and
//! [`SnapshotRequest::from_json`], which is how an interrupted snapshot finds it in its offset.

use serde_json::{json, Value};

use crate::name_filter::PatternList;

/// What a signal asks for.
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
    /// `data-collections`: regexes matched against qualified names (`schema.table`,
    /// `db.table`, `db.collection`).
    pub collections: Vec<String>,
    /// `additional-conditions`: (a regex for the qualified name, the filter as text: a SQL
    /// condition for tables, a JSON query for collections).
    pub conditions: Vec<(String, String)>,
    /// `type`: `incremental` (Debezium's default) or `blocking`.
    pub incremental: bool,
    /// The signal's id (its row's or document's first column, its file line's `id`): an
    /// incremental snapshot's notifications carry it as theirs, as Debezium's do.
    pub id: Option<String>,
    matchers: PatternList,
    condition_matchers: Vec<PatternList>,
}

impl SnapshotRequest {
    /// Whether the request names `qualified` (a table's or collection's qualified name).
    pub fn names(&self, qualified: &str) -> bool {
        self.matchers.matches(qualified)
    }

    /// The index in `conditions` of the first condition whose pattern matches `qualified`.
    pub fn condition_index(&self, qualified: &str) -> Option<usize> {
        self.condition_matchers
            .iter()
            .position(|m| m.matches(qualified))
    }

    /// The filter text of the first condition whose pattern matches `qualified`.
    pub fn condition(&self, qualified: &str) -> Option<&str> {
        self.condition_index(qualified)
            .map(|i| self.conditions[i].1.as_str())
    }

    /// Adds another request's tables to this one (several execute-snapshot signals in one
    /// source transaction run as one snapshot). Which request's condition a table named by
    /// both would take is not decidable here, so a merge with conditions on either side drops
    /// them all: every named table is copied whole (more `r` records, never fewer). The result
    /// is blocking unless both were incremental.
    pub fn merge(&mut self, other: SnapshotRequest) {
        self.collections.extend(other.collections);
        self.matchers.extend(other.matchers);
        if self.id.is_none() {
            self.id = other.id;
        }
        self.incremental &= other.incremental;
        if !self.conditions.is_empty() || !other.conditions.is_empty() {
            self.conditions.clear();
            self.condition_matchers.clear();
        }
    }

    /// The request as the offset of its snapshot keeps it.
    pub fn to_json(&self) -> String {
        json!({
            "data-collections": self.collections,
            "type": if self.incremental { "incremental" } else { "blocking" },
            "additional-conditions": self.conditions.iter()
                .map(|(c, f)| json!({"data-collection": c, "filter": f}))
                .collect::<Vec<_>>(),
            "id": self.id,
        })
        .to_string()
    }

    pub fn from_json(text: &str) -> Result<SnapshotRequest, String> {
        let data: Value =
            serde_json::from_str(text).map_err(|e| format!("its data is not JSON: {e}"))?;
        let mut request = SnapshotRequest::from_data(&data)?;
        request.id = data.get("id").and_then(Value::as_str).map(str::to_owned);
        Ok(request)
    }

    /// Reads an `execute-snapshot` signal's data document.
    pub fn from_data(data: &Value) -> Result<SnapshotRequest, String> {
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
                if filter.trim().is_empty() {
                    return Err(format!("the filter of {collection} is empty"));
                }
                conditions.push((collection.trim().to_owned(), filter));
            }
        }
        let literal_commas = |p: &str| p.replace(',', "\\,");
        let joined = collections
            .iter()
            .map(|c| literal_commas(c))
            .collect::<Vec<_>>()
            .join(",");
        let matchers = PatternList::parse(&joined)?;
        let condition_matchers = conditions
            .iter()
            .map(|(c, _)| PatternList::parse(&literal_commas(c)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(SnapshotRequest {
            collections,
            conditions,
            incremental,
            id: None,
            matchers,
            condition_matchers,
        })
    }
}

/// Reads the data field's text: empty means no data, anything else must be JSON.
pub fn data_from_text(text: &str) -> Result<Value, String> {
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(text).map_err(|e| format!("its data is not JSON: {e}"))
}

/// What a signal of type `kind` with `data` asks for.
pub fn parse(kind: &str, data: &Value) -> Signal {
    match kind {
        "execute-snapshot" => match SnapshotRequest::from_data(data) {
            Ok(r) => Signal::ExecuteSnapshot(r),
            Err(e) => Signal::Unsupported(kind.to_owned(), e),
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

/// The signals that steer an incremental snapshot, for the connectors that run one (PostgreSQL):
/// Debezium's watermarks and its `stop-snapshot`, `pause-snapshot` and `resume-snapshot`.
#[derive(Debug)]
pub enum IncrementalSignal {
    /// `snapshot-window-open`: the chunk id (the row's id without its `-open` suffix).
    WindowOpen(String),
    /// `snapshot-window-close`: the chunk id (the row's id without its `-close` suffix).
    WindowClose(String),
    /// `stop-snapshot` of an incremental snapshot: the tables to drop from it (`None`: all).
    Stop(Option<SnapshotRequest>),
    /// `pause-snapshot`: no new chunk is read until `resume-snapshot`.
    Pause,
    /// `resume-snapshot`.
    Resume,
}

/// Reads a signal that steers an incremental snapshot (`id` is the signal row's id); `None`
/// for every other type, which [`parse`] reads. `Some(Err)` says why one is not acted on.
pub fn parse_incremental(
    id: Option<&str>,
    kind: &str,
    data: &Value,
) -> Option<Result<IncrementalSignal, String>> {
    let of_incremental = || {
        match data.get("type").and_then(Value::as_str) {
        None => Ok(()),
        Some(t) if t.eq_ignore_ascii_case("incremental") => Ok(()),
        Some(t) => Err(format!(
            "{kind} acts on incremental snapshots only, not on type {t:?} (a blocking snapshot cannot be stopped or paused)"
        )),
    }
    };
    let chunk_id = |suffix: &str| match id {
        Some(id) => Ok(id.strip_suffix(suffix).unwrap_or(id).to_owned()),
        None => Err(format!(
            "{kind}: the signal's id (first column) is not text"
        )),
    };
    Some(match kind {
        "snapshot-window-open" => chunk_id("-open").map(IncrementalSignal::WindowOpen),
        "snapshot-window-close" => chunk_id("-close").map(IncrementalSignal::WindowClose),
        "stop-snapshot" => of_incremental().and_then(|()| match data.get("data-collections") {
            None | Some(Value::Null) => Ok(IncrementalSignal::Stop(None)),
            Some(Value::Array(items)) if items.is_empty() => Ok(IncrementalSignal::Stop(None)),
            Some(_) => SnapshotRequest::from_data(data).map(|r| IncrementalSignal::Stop(Some(r))),
        }),
        "pause-snapshot" => of_incremental().map(|()| IncrementalSignal::Pause),
        "resume-snapshot" => of_incremental().map(|()| IncrementalSignal::Resume),
        _ => return None,
    })
}

/// A row deleted from the signal table (`id`, its first column) when the incremental
/// snapshot closes its windows by deleting the open watermark
/// (`incremental.snapshot.watermarking.strategy=INSERT_DELETE`): the deletion of
/// `<chunk>-open` closes that chunk's window, as Debezium reads it; other deletions are
/// nothing.
pub fn deleted_watermark(id: Option<&str>) -> Option<IncrementalSignal> {
    id?.strip_suffix("-open")
        .map(|chunk| IncrementalSignal::WindowClose(chunk.to_owned()))
}

/// Whether a signal type is an incremental snapshot's watermark (acted on whichever channels
/// are enabled: the snapshot writes them itself).
pub fn is_watermark(kind: Option<&str>) -> bool {
    matches!(kind, Some("snapshot-window-open" | "snapshot-window-close"))
}

/// Reads a row inserted into a relational connector's signal table (its id, type and data
/// columns as text, Debezium's order): an incremental snapshot's watermark or steering signal
/// is returned for the connector to act on at once; an `execute-snapshot` request is merged
/// into `pending` (the open transaction's, acted on at its commit); `log` is logged, and a
/// signal not acted on is logged with the reason.
pub fn read_row(
    id: Option<String>,
    kind: Option<String>,
    data: Option<String>,
    pending: Option<&mut Option<SnapshotRequest>>,
) -> Option<IncrementalSignal> {
    let Some(kind) = kind else {
        tracing::warn!("signal not acted on: its second column (the signal's type) is not text");
        return None;
    };
    let data = match data.map(|d| data_from_text(&d)).transpose() {
        Ok(d) => d.unwrap_or_default(),
        Err(why) => {
            tracing::warn!(signal = %kind, reason = %why, "signal not acted on");
            return None;
        }
    };
    match parse_incremental(id.as_deref(), &kind, &data) {
        Some(Ok(signal)) => return Some(signal),
        Some(Err(why)) => {
            tracing::warn!(signal = %kind, reason = %why, "signal not acted on");
            return None;
        }
        None => {}
    }
    match parse(&kind, &data) {
        Signal::ExecuteSnapshot(mut request) => {
            request.id = id;
            let kind = if request.incremental {
                "incremental (in chunks while streaming goes on)"
            } else {
                "blocking (streaming pauses until the tables are copied)"
            };
            tracing::info!(tables = ?request.collections, conditions = ?request.conditions, kind, "execute-snapshot signal: acted on once its transaction commits");
            if let Some(pending) = pending {
                match pending {
                    Some(earlier) => earlier.merge(request),
                    None => *pending = Some(request),
                }
            }
        }
        Signal::Log(message) => tracing::info!(message = %message, "log signal"),
        Signal::Unsupported(kind, why) => {
            tracing::warn!(signal = %kind, reason = %why, "signal not acted on");
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn execute_snapshot_round_trips_and_matches_names() {
        let data = json!({
            "data-collections": ["public\\.orders", "public\\.line.*"], "type": "BLOCKING",
            "additional-conditions": [{"data-collection": "public.orders", "filter": "status = 'open'"}],
        });
        let Signal::ExecuteSnapshot(r) = parse("execute-snapshot", &data) else {
            panic!("not a snapshot request");
        };
        assert!(!r.incremental);
        assert!(r.names("public.orders") && r.names("PUBLIC.line_items"));
        assert!(!r.names("public.customers"));
        assert_eq!(r.condition("public.orders"), Some("status = 'open'"));
        assert_eq!(r.condition("public.line_items"), None);
        let again = SnapshotRequest::from_json(&r.to_json()).unwrap();
        assert_eq!(again.collections, r.collections);
        assert_eq!(again.conditions, r.conditions);
        assert!(!again.incremental);
    }

    #[test]
    fn merged_requests_name_both_and_copy_whole_tables() {
        let one = SnapshotRequest::from_data(&json!({"data-collections": ["a.x"],
            "additional-conditions": [{"data-collection": "a.x", "filter": "id > 1"}]}))
        .unwrap();
        let mut merged = one;
        merged.merge(
            SnapshotRequest::from_data(&json!({"data-collections": ["b.y"], "type": "blocking",
                "additional-conditions": [{"data-collection": "a.x", "filter": "id > 2"}]}))
            .unwrap(),
        );
        assert!(merged.names("a.x") && merged.names("b.y") && !merged.names("c.z"));
        assert_eq!(merged.condition("a.x"), None, "conditions go with a merge");
        assert!(!merged.incremental);
        let again = SnapshotRequest::from_json(&merged.to_json()).unwrap();
        assert!(again.names("b.y"));
        assert_eq!(again.condition_index("a.x"), None);
    }

    #[test]
    fn incremental_signals_are_read_with_their_ids() {
        let open = parse_incremental(Some("c1-open"), "snapshot-window-open", &Value::Null);
        assert!(matches!(open, Some(Ok(IncrementalSignal::WindowOpen(id))) if id == "c1"));
        let close = parse_incremental(Some("c1-close"), "snapshot-window-close", &json!({}));
        assert!(matches!(close, Some(Ok(IncrementalSignal::WindowClose(id))) if id == "c1"));
        let all = parse_incremental(Some("s"), "stop-snapshot", &json!({"type": "INCREMENTAL"}));
        assert!(matches!(all, Some(Ok(IncrementalSignal::Stop(None)))));
        let some = parse_incremental(
            Some("s"),
            "stop-snapshot",
            &json!({"data-collections": ["public\\.a"], "type": "incremental"}),
        );
        let Some(Ok(IncrementalSignal::Stop(Some(r)))) = some else {
            panic!("{some:?}");
        };
        assert!(r.names("public.a") && !r.names("public.b"));
        assert!(matches!(
            parse_incremental(None, "pause-snapshot", &Value::Null),
            Some(Ok(IncrementalSignal::Pause))
        ));
        assert!(matches!(
            parse_incremental(None, "resume-snapshot", &json!({"type": "incremental"})),
            Some(Ok(IncrementalSignal::Resume))
        ));
        let blocking = parse_incremental(None, "pause-snapshot", &json!({"type": "blocking"}));
        assert!(matches!(blocking, Some(Err(why)) if why.contains("incremental snapshots only")));
        assert!(matches!(
            parse_incremental(None, "snapshot-window-open", &Value::Null),
            Some(Err(why)) if why.contains("id")
        ));
        assert!(parse_incremental(Some("x"), "execute-snapshot", &Value::Null).is_none());
        assert!(parse_incremental(Some("x"), "log", &Value::Null).is_none());
    }

    #[test]
    fn other_signals_and_bad_data_say_why() {
        assert!(matches!(
            parse("execute-snapshot", &json!({"data-collections": ["x.y"]})),
            Signal::ExecuteSnapshot(r) if r.incremental
        ));
        assert!(
            matches!(parse("log", &json!({"message": "hello"})), Signal::Log(m) if m == "hello")
        );
        assert_eq!(data_from_text("  ").unwrap(), Value::Null);
        assert!(data_from_text("{").unwrap_err().contains("not JSON"));
        for (kind, data, says) in [
            ("pause-snapshot", Value::Null, "execute-snapshot and log"),
            (
                "execute-snapshot",
                json!({"data-collections": []}),
                "missing or empty",
            ),
            (
                "execute-snapshot",
                json!({"data-collections": ["x.y"], "type": "fast"}),
                "not incremental or blocking",
            ),
            (
                "execute-snapshot",
                json!({"data-collections": ["x.y"], "additional-conditions": [{"data-collection": "x.y", "filter": " "}]}),
                "is empty",
            ),
            (
                "execute-snapshot",
                json!({"data-collections": ["x.y"], "additional-conditions": {"x": 1}}),
                "not an array",
            ),
            (
                "execute-snapshot",
                json!({"data-collections": ["a("]}),
                "a(",
            ),
        ] {
            let Signal::Unsupported(_, why) = parse(kind, &data) else {
                panic!("{kind} {data} accepted");
            };
            assert!(why.contains(says), "{kind} {data}: {why}");
        }
    }
}
