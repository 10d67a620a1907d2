//! The connector's configuration: the keys and defaults of Debezium's MongoDB connector
//! (`io.debezium.connector.mongodb.MongoDbConnector`; see docs/connectors/mongodb.md),
//! validated per field with [`ConfigDef`] plus cross-field checks, parsed into [`MongoConfig`].
//!
//! Invariants: [`validate`] reports every problem and never fails; [`MongoConfig::parse`]
//! succeeds only for a configuration [`validate`] accepts. Values naming features this build
//! does not have are rejected with a message that says so, never silently ignored.

use std::time::Duration;

use headwater_api::config::{ConfigDef, ConfigKey, ConfigType, ConfigValue, Importance, Validator};
use headwater_api::{ConfigValidation, Properties};
use headwater_connector_common::config::{channel_enabled, pair_check};
pub use headwater_connector_common::config::{parse_skipped, SkippedOps};
use headwater_connector_common::name_filter::{split_list, PatternList, Selector};
use headwater_connector_common::snapshot_policy::{
    define_snapshot_mode_keys, validate_configuration_based, ConfigurationBased, StartDelays,
};
use mongodb::bson::Document;

/// `capture.mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureMode {
    /// Updates carry only their `updateDescription`.
    ChangeStreams,
    /// Updates carry the current full document too (the server looks it up).
    ChangeStreamsUpdateFull,
    /// As `ChangeStreams`, plus `before` from the pre-image where the collection keeps them.
    ChangeStreamsWithPreImage,
    /// As `ChangeStreamsUpdateFull`, plus `before` from the pre-image.
    ChangeStreamsUpdateFullWithPreImage,
}

impl CaptureMode {
    pub fn update_full(self) -> bool {
        matches!(
            self,
            CaptureMode::ChangeStreamsUpdateFull | CaptureMode::ChangeStreamsUpdateFullWithPreImage
        )
    }
    pub fn pre_image(self) -> bool {
        matches!(
            self,
            CaptureMode::ChangeStreamsWithPreImage
                | CaptureMode::ChangeStreamsUpdateFullWithPreImage
        )
    }
}

/// `snapshot.mode` (shared by the sources).
pub use headwater_connector_common::snapshot_policy::SnapshotMode;

/// `cursor.pipeline.order`: where the stages of `cursor.pipeline` go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PipelineOrder {
    /// The connector's own stages first, then the user's (Debezium's default).
    InternalFirst,
    UserFirst,
    /// Only the user's stages: every operation type reaches the connector, which skips the
    /// ones it does not capture.
    UserOnly,
}

/// `cursor.oversize.handling.mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OversizeHandling {
    /// An event above the server's 16 MiB limit fails the stream (the server's error).
    Fail,
    /// Changes of documents whose stored form (before or after) exceeds this many bytes are
    /// dropped by the server, with a `$bsonSize` stage ahead of every other.
    Skip(i64),
    /// Events above the limit arrive as fragments (`$changeStreamSplitLargeEvent`, MongoDB
    /// 6.0.9+/7.0+), reassembled by the task into one event.
    Split,
}

/// A parsed, validated configuration.
#[derive(Clone, Debug)]
pub struct MongoConfig {
    pub connection_string: String,
    pub user: Option<String>,
    pub password: Option<String>,
    pub auth_source: String,
    pub topic_prefix: String,
    pub databases: Selector,
    pub collections: Selector,
    pub capture_mode: CaptureMode,
    /// `capture.mode.full.update.type=post_image`: updates' full documents come from the
    /// post-images (`fullDocument: whenAvailable`) instead of a lookup (`updateLookup`).
    pub post_image: bool,
    /// `capture.scope=database`: the one database to watch (`capture.target`).
    pub capture_database: Option<String>,
    pub snapshot_mode: SnapshotMode,
    /// `snapshot.delay.ms`, `streaming.delay.ms`.
    pub start_delays: StartDelays,
    /// `incremental.snapshot.watermarking.strategy=INSERT_DELETE`: a chunk's window closes by
    /// deleting its open watermark.
    pub watermarks_deleted: bool,
    pub snapshot_max_threads: usize,
    /// `snapshot.chunk.documents`: documents per `_id` range of a large collection.
    pub snapshot_chunk_documents: u64,
    /// `incremental.snapshot.chunk.size`: documents per chunk of an incremental snapshot.
    pub incremental_chunk_size: usize,
    pub snapshot_fetch_size: Option<u32>,
    /// `snapshot.include.collection.list`: which captured collections the snapshot copies.
    pub snapshot_collections: Selector,
    /// `snapshot.collection.filter.overrides`: a query per `db.collection` restricting which
    /// of its documents the snapshot copies.
    pub snapshot_filters: Vec<(String, Document)>,
    /// `signal.data.collection`: `<db>.<collection>` whose inserts are signals (with the
    /// source channel) and where incremental snapshots write their watermarks.
    pub signal_collection: Option<String>,
    /// Whether the signal collection's inserts are signals (the source channel is enabled);
    /// its watermarks are read either way.
    pub source_signals: bool,
    /// `cursor.pipeline`: the user's change-stream stages.
    pub user_pipeline: Vec<Document>,
    pub pipeline_order: PipelineOrder,
    pub oversize: OversizeHandling,
    /// `field.exclude.list`: `db.collection.field.path` patterns.
    pub field_excludes: Vec<String>,
    /// `field.renames`: `(db.collection.field.path, new name)`.
    pub field_renames: Vec<(String, String)>,
    pub tombstones_on_delete: bool,
    pub skipped: SkippedOps,
    pub heartbeat_interval: Duration,
    pub heartbeat_topic_prefix: String,
    pub transaction_topic: Option<String>,
    pub cursor_max_await: Option<Duration>,
    pub max_batch_size: usize,
    pub max_queue_size: usize,
    pub poll_interval: Duration,
    pub connect_timeout: Duration,
    pub server_selection_timeout: Duration,
    /// `mongodb.ssl.enabled`: TLS even when the connection string does not ask for it.
    pub tls: bool,
}

const CAPTURE_MODES: &[&str] = &[
    "change_streams",
    "change_streams_update_full",
    "change_streams_with_pre_image",
    "change_streams_update_full_with_pre_image",
];

fn key(name: &str, t: ConfigType) -> ConfigKey {
    ConfigKey::new(name, t)
}

fn regex_list_validator() -> Validator {
    Validator::custom(|v| match v {
        ConfigValue::String(s) => PatternList::parse(s).map(|_| ()),
        _ => Ok(()),
    })
}

/// `field.renames` entries: `db.coll.path:newName`, comma separated.
fn parse_renames(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (path, name) = part.rsplit_once(':').ok_or_else(|| {
            format!("{part:?} must be <database>.<collection>.<field>:<new name>")
        })?;
        if path.split('.').count() < 3 || name.trim().is_empty() || name.contains('.') {
            return Err(format!(
                "{part:?} must be <database>.<collection>.<field>:<new name> (the new name without dots)"
            ));
        }
        out.push((path.trim().to_owned(), name.trim().to_owned()));
    }
    Ok(out)
}

fn parse_excludes(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if part.split('.').count() < 3 {
            return Err(format!(
                "{part:?} must be <database>.<collection>.<field path>"
            ));
        }
        out.push(part.to_owned());
    }
    Ok(out)
}

/// A JSON document in the configuration (a snapshot filter, a pipeline stage) as BSON.
/// Strict JSON; BSON types are written in extended JSON (`{"$oid": "…"}`,
/// `{"$date": "2026-01-01T00:00:00Z"}`, `{"$numberLong": "…"}`, …). The mongo shell's
/// constructors (`ObjectId("…")`) and unquoted keys are not JSON and are refused.
fn json_document(value: serde_json::Value, what: &str) -> Result<Document, String> {
    let serde_json::Value::Object(map) = value else {
        return Err(format!("{what} must be a JSON document ({{…}})"));
    };
    Document::try_from(map).map_err(|e| format!("{what} is not valid extended JSON: {e}"))
}

fn parse_json(text: &str, what: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(text).map_err(|e| {
        format!("{what} is not valid JSON ({e}); keys and strings need double quotes, and BSON types are written in extended JSON such as {{\"$oid\": \"…\"}}")
    })
}

/// `cursor.pipeline`: a JSON array of aggregation stages, each a document with one field
/// (the stage's name, such as `$match`). An empty value is no stage.
pub fn parse_pipeline(text: &str) -> Result<Vec<Document>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let what = "Change stream pipeline JSON";
    let serde_json::Value::Array(stages) = parse_json(text, what)? else {
        return Err(format!(
            "{what} is invalid: it must be an array of stages, such as [{{\"$match\": {{\"operationType\": \"insert\"}}}}]"
        ));
    };
    stages
        .into_iter()
        .enumerate()
        .map(|(i, stage)| {
            let what = format!("stage {} of the change stream pipeline", i + 1);
            let one_stage = matches!(&stage, serde_json::Value::Object(m)
                if m.len() == 1 && m.keys().all(|k| k.starts_with('$')));
            let stage = json_document(stage, &what)?;
            if stage.contains_key("$changeStreamSplitLargeEvent") {
                return Err(format!(
                    "{what}: $changeStreamSplitLargeEvent belongs to cursor.oversize.handling.mode=split, which puts it last and puts the split events together again"
                ));
            }
            if !one_stage {
                return Err(format!(
                    "{what} must have exactly one field, the stage's name ($match, $project, $addFields, …)"
                ));
            }
            Ok(stage)
        })
        .collect()
}

/// `snapshot.collection.filter.overrides`: the `db.collection` names it lists.
fn filter_override_names(text: &str) -> Result<Vec<String>, String> {
    let names = split_list(text);
    for name in &names {
        match name.split_once('.') {
            Some((db, coll)) if !db.is_empty() && !coll.is_empty() => {}
            _ => return Err(format!("{name:?} must be <database>.<collection>")),
        }
    }
    Ok(names)
}

/// The include/exclude lists `filters.match.mode` applies to.
const FILTER_LISTS: [&str; 4] = [
    "database.include.list",
    "database.exclude.list",
    "collection.include.list",
    "collection.exclude.list",
];

const FILTER_OVERRIDES: &str = "snapshot.collection.filter.overrides";

/// The snapshot filter of one collection named in `snapshot.collection.filter.overrides`,
/// read from `snapshot.collection.filter.overrides.<db>.<collection>`.
fn snapshot_filter(props: &Properties, name: &str) -> Result<Document, (String, String)> {
    let key = format!("{FILTER_OVERRIDES}.{name}");
    let Some(text) = props.get(&key).map(|t| t.trim()).filter(|t| !t.is_empty()) else {
        return Err((
            key.clone(),
            format!("{FILTER_OVERRIDES} names {name}, so {key} must hold its snapshot query (a JSON document such as {{\"status\": \"active\"}})"),
        ));
    };
    let what = format!("the snapshot query of {name}");
    parse_json(text, &what)
        .and_then(|v| json_document(v, &what))
        .map_err(|e| (key, e))
}

/// The connector's configuration keys.
pub fn config_def() -> ConfigDef {
    use ConfigType::*;
    let def = ConfigDef::new()
        .define(key("mongodb.connection.string", String).importance(Importance::High).validator(Validator::custom(|v| {
            let s = v.to_config_string();
            if s.starts_with("mongodb://") || s.starts_with("mongodb+srv://") {
                Ok(())
            } else {
                Err("must be a MongoDB connection string (mongodb://… or mongodb+srv://…)".into())
            }
        })).group("Connection", 1)
            .doc("Connection string of the replica set or sharded cluster (mongodb://host:port/?replicaSet=rs0)."))
        .define(key("mongodb.user", String).default_null().group("Connection", 2).doc("User, when the connection string has none."))
        .define(key("mongodb.password", Password).default_null().group("Connection", 3).doc("Password of mongodb.user."))
        .define(key("mongodb.authsource", String).default_str("admin").doc("Database the credentials are defined in."))
        .define(key("mongodb.hosts", String).default_null().validator(Validator::custom(|_| Err("mongodb.hosts was removed in Debezium 2.2; use mongodb.connection.string".into()))).doc("Removed; use mongodb.connection.string."))
        .define(key("mongodb.connect.timeout.ms", Long).default_str("10000").validator(Validator::at_least(1.0)).doc("Connection timeout."))
        .define(key("mongodb.server.selection.timeout.ms", Long).default_str("30000").validator(Validator::at_least(1.0)).doc("Server selection timeout."))
        .define(key("mongodb.socket.timeout.ms", Long).default_str("0").validator(Validator::at_least(0.0)).doc("Accepted; the driver's socket timeouts apply."))
        .define(key("mongodb.heartbeat.frequency.ms", Long).default_str("10000").validator(Validator::at_least(1.0)).doc("Accepted; the driver's monitoring interval applies."))
        .define(key("mongodb.poll.interval.ms", Long).default_str("30000").validator(Validator::at_least(1.0)).doc("Accepted; topology changes are followed by the driver."))
        .define(key("mongodb.ssl.enabled", Boolean).default_str("false").doc("Connect with TLS (as tls=true in the connection string; either turns it on)."))
        .define(key("mongodb.ssl.invalid.hostname.allowed", Boolean).default_str("false").validator(Validator::custom(|v| {
            if v.to_config_string() == "true" {
                Err("mongodb.ssl.invalid.hostname.allowed=true is not supported: Headwater's TLS (rustls) always checks the server's host name; give the server a certificate that names it".into())
            } else {
                Ok(())
            }
        })).doc("Must stay false: the server certificate's host name is always checked."))
        .define(key("topic.prefix", String).importance(Importance::High).validator(Validator::custom(|v| {
            let s = v.to_config_string();
            if s.is_empty() {
                Err("topic.prefix must be set".into())
            } else if !s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) {
                Err(format!("topic.prefix {s:?} may only contain ASCII letters, digits, '.', '_' and '-'"))
            } else {
                Ok(())
            }
        })).doc("Prefix of every topic name (<prefix>.<db>.<collection>) and the source partition."))
        .define(key("database.include.list", String).default_null().doc("Databases to capture: regexes, or names with filters.match.mode=literal."))
        .define(key("database.exclude.list", String).default_null().doc("Databases not to capture: regexes, or names with filters.match.mode=literal."))
        .define(key("collection.include.list", String).default_null().doc("Collections to capture: regexes matched against <db>.<collection>, or such names with filters.match.mode=literal."))
        .define(key("collection.exclude.list", String).default_null().doc("Collections not to capture (regexes, or names with filters.match.mode=literal)."))
        .define(key("capture.mode", String).default_str("change_streams_update_full").validator(Validator::one_of_case_insensitive(CAPTURE_MODES)).doc("What update events carry: change_streams, change_streams_update_full (default), and the _with_pre_image variants."))
        .define(key("capture.scope", String).default_str("deployment").validator(Validator::one_of_case_insensitive(&["deployment", "database"])).doc("Watch the whole deployment, or one database (capture.target)."))
        .define(key("capture.target", String).default_null().doc("The database watched when capture.scope=database."))
        .define(key("snapshot.mode", String).default_str("initial")
            .validator(Validator::custom(|v| match v.to_config_string().to_ascii_lowercase().as_str() {
                "initial" | "always" | "initial_only" | "no_data" | "never" | "when_needed" | "configuration_based" => Ok(()),
                "custom" => Err("snapshot.mode=custom needs a Java Snapshotter class; use initial, always, initial_only, no_data, when_needed or configuration_based".to_owned()),
                other => Err(format!("snapshot.mode {other:?} is not one of initial, always, initial_only, no_data, when_needed, configuration_based")),
            }))
            .doc("initial (default), always (a new snapshot at every start), initial_only, no_data (never), when_needed, configuration_based (the snapshot.mode.configuration.based.* keys say what happens)."))
        .define(key("snapshot.max.threads", Int).default_str("1").validator(Validator::at_least(1.0)).doc("Collections (and _id ranges of large ones) copied in parallel."))
        .define(key("snapshot.chunk.documents", Long).default_str("500000").validator(Validator::at_least(1.0)).doc("Headwater: a collection with more documents, all with ObjectId _ids, is copied in _id ranges of about this many documents (in parallel, resumable after any committed document)."))
        .define(key("snapshot.fetch.size", Int).default_null().validator(Validator::at_least(1.0)).doc("Documents per snapshot batch."))
        .define(key("snapshot.include.collection.list", String).default_null().validator(regex_list_validator()).doc("Collections to snapshot, of those captured: regexes matched against <db>.<collection> (default: all captured)."))
        .define(key("capture.mode.full.update.type", String).default_str("lookup").validator(Validator::custom(|v| match v.to_config_string().to_ascii_lowercase().as_str() {
            "lookup" => Ok(()),
            "post_image" => Ok(()),
            other => Err(format!("capture.mode.full.update.type {other:?} is not one of lookup, post_image")),
        })).doc("How the *_update_full capture modes get an update's full document: lookup (default; the server reads the document's current state) or post_image (the state right after the update, from the collection's post-images, which need changeStreamPreAndPostImages)."))
        .define(key("filters.match.mode", String).default_str("regex").validator(Validator::one_of_case_insensitive(&["regex", "literal"])).doc("How the database and collection include/exclude lists match: regex (default, each item a regular expression) or literal (each item the exact name; case-insensitive either way)."))
        .define(key(FILTER_OVERRIDES, String).default_null().validator(Validator::custom(|v| match v {
            ConfigValue::String(s) => filter_override_names(s).map(|_| ()),
            _ => Ok(()),
        })).doc("Collections (<db>.<collection>, comma separated) whose snapshot copies only the documents matching the query in snapshot.collection.filter.overrides.<db>.<collection> (a JSON document; extended JSON for BSON types)."))
        .define(key("field.exclude.list", String).default_null().validator(Validator::custom(|v| match v {
            ConfigValue::String(s) => parse_excludes(s).map(|_| ()),
            _ => Ok(()),
        })).doc("Fields left out of events: <db>.<collection>.<field path>, comma separated."))
        .define(key("field.renames", String).default_null().validator(Validator::custom(|v| match v {
            ConfigValue::String(s) => parse_renames(s).map(|_| ()),
            _ => Ok(()),
        })).doc("Fields renamed in events: <db>.<collection>.<field path>:<new name>, comma separated."))
        .define(key("tombstones.on.delete", Boolean).default_str("true").doc("Emit a tombstone after each delete."))
        .define(key("skipped.operations", String).default_str("t")
            .validator(Validator::custom(|v| parse_skipped(&v.to_config_string()).map(|_| ())))
            .doc("Operations not emitted: comma list of c, u, d, t, or none."))
        .define(key("heartbeat.interval.ms", Int).default_str("0").validator(Validator::at_least(0.0)).doc("Interval of heartbeat records carrying the current resume point (0 = off)."))
        .define(key("topic.heartbeat.prefix", String).default_str(headwater_connector_common::heartbeat::DEFAULT_TOPIC_PREFIX).doc("Prefix of the heartbeat topic."))
        .define(key("provide.transaction.metadata", Boolean).default_str("false").doc("BEGIN/END records on <topic.prefix>.<topic.transaction> and the transaction block in every change event."))
        .define(key("topic.transaction", String).default_str(headwater_connector_common::txmeta::DEFAULT_TOPIC_SUFFIX).doc("Suffix of the transaction metadata topic."))
        .define(key("cursor.max.await.time.ms", Long).default_null().validator(Validator::at_least(0.0)).doc("How long the server waits for new changes before answering an empty batch."))
        .define(key("cursor.pipeline", String).default_null().validator(Validator::custom(|v| match v {
            ConfigValue::String(s) => parse_pipeline(s).map(|_| ()),
            _ => Ok(()),
        })).doc("Aggregation stages added to the change stream, as a JSON array ([{\"$match\": …}]); extended JSON for BSON types."))
        .define(key("cursor.pipeline.order", String).default_str("internal_first").validator(Validator::one_of_case_insensitive(&["internal_first", "user_first", "user_only"])).doc("internal_first (default): the connector's stages, then cursor.pipeline; user_first: the other way round; user_only: cursor.pipeline alone."))
        .define(key("cursor.oversize.handling.mode", String).default_str("fail").validator(Validator::custom(|v| match v.to_config_string().to_ascii_lowercase().as_str() {
            "fail" | "skip" | "split" => Ok(()),
            other => Err(format!("cursor.oversize.handling.mode {other:?} is not one of fail, skip, split")),
        })).doc("Changes of documents above the server's event size limit: fail (default), skip (with cursor.oversize.skip.threshold), or split (the server splits such events with $changeStreamSplitLargeEvent and the task reassembles them)."))
        .define(key("cursor.oversize.skip.threshold", Int).default_str("0").validator(Validator::at_least(0.0)).doc("With cursor.oversize.handling.mode=skip: changes of documents whose BSON size, before or after the change, exceeds this many bytes are left out by the server."))
        .define(key("signal.data.collection", String).default_null().validator(Validator::custom(|v| match v {
            ConfigValue::String(s) if !s.trim().is_empty() => match s.trim().split_once('.') {
                Some((db, coll)) if matches!(db, "admin" | "config" | "local") || coll.starts_with("system.") => {
                    Err(format!("{s:?} is never seen by change streams (the admin, config and local databases and system collections are not streamed); choose a collection of your own database"))
                }
                Some((db, coll)) if !db.is_empty() && !coll.is_empty() => Ok(()),
                _ => Err(format!("{s:?} must be <database>.<collection>")),
            },
            _ => Ok(()),
        })).doc("The collection (<db>.<collection>) whose inserted documents are signals: execute-snapshot (incremental: in _id chunks while streaming; blocking: streaming pauses), stop-/pause-/resume-snapshot and log. Incremental snapshots insert their watermark documents into it."))
        .define(key("max.batch.size", Int).default_str("2048").validator(Validator::at_least(1.0)).doc("Maximum records per poll."))
        .define(key("max.queue.size", Int).default_str("8192").validator(Validator::at_least(1.0)).doc("Maximum change events buffered ahead of poll."))
        .define(key("poll.interval.ms", Long).default_str("500").validator(Validator::at_least(0.0)).doc("How long poll waits for new changes."));
    let def = headwater_connector_common::config::define_unbuilt_keys(
        def,
        headwater_connector_common::config::COMMON_UNBUILT,
    );
    let def = headwater_connector_common::config::define_unbuilt_keys(def, MONGODB_UNBUILT);
    let def = headwater_connector_common::config::define_unbuilt_keys(
        def,
        headwater_connector_common::config::NAME_ADJUSTMENT_SCHEMA_ONLY,
    );
    let def = define_snapshot_mode_keys(def);
    let def = headwater_connector_common::config::define_errors_max_retries(def);
    let def = headwater_connector_common::notification::define_keys(def);
    let def = headwater_connector_common::context_headers::define_keys(def);
    headwater_connector_common::config::define_signal_keys(def)
}

/// Debezium MongoDB keys that change what is emitted and that Headwater has only in their
/// default form.
const MONGODB_UNBUILT: &[headwater_connector_common::config::Unbuilt] = &[
    headwater_connector_common::config::Unbuilt {
        key: "topic.naming.strategy",
        accepted: &["io.debezium.schema.DefaultTopicNamingStrategy"],
        why: "topics are named <topic.prefix>.<database>.<collection>; rename them with the RegexRouter transform instead",
    },
    headwater_connector_common::config::Unbuilt {
        key: "sourceinfo.struct.maker",
        accepted: &["io.debezium.connector.mongodb.MongoDbSourceInfoStructMaker"],
        why: "the source block is Debezium's default one",
    },
    headwater_connector_common::config::Unbuilt {
        key: "json.serialization.mode",
        accepted: &["legacy"],
        why: "documents are written in Debezium's default extended JSON",
    },
    headwater_connector_common::config::Unbuilt {
        key: "capture.start.op.time",
        accepted: &["-1"],
        why: "without an offset, streaming starts where the snapshot (or no_data) starts it",
    },
];

/// Validates a configuration: every key's own checks plus the cross-field rules.
pub fn validate(props: &Properties) -> ConfigValidation {
    let mut v = config_def().validate(props);
    validate_configuration_based(&mut v, props);
    headwater_connector_common::notification::validate(&mut v, props);
    pair_check(
        &mut v,
        props,
        "database.include.list",
        "database.exclude.list",
    );
    pair_check(
        &mut v,
        props,
        "collection.include.list",
        "collection.exclude.list",
    );
    let literal = props
        .get("filters.match.mode")
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("literal"));
    if !literal {
        for key in FILTER_LISTS {
            if let Some(Err(e)) = props.get(key).map(|l| PatternList::parse(l)) {
                v.add_error(key, e);
            }
        }
    }
    let scope = props
        .get("capture.scope")
        .map(|s| s.trim().to_ascii_lowercase())
        .unwrap_or_default();
    if scope == "database" {
        let target = props.get("capture.target").map(|t| t.trim());
        let signal_db = props
            .get("signal.data.collection")
            .and_then(|s| s.trim().split_once('.'))
            .map(|(db, _)| db);
        if let (Some(target), Some(db)) = (target, signal_db) {
            if db != target {
                v.add_error(
                    "signal.data.collection",
                    format!("with capture.scope=database the signal collection must be in the watched database {target:?}, or its inserts are never seen"),
                );
            }
        }
    }
    if scope == "database"
        && props
            .get("capture.target")
            .is_none_or(|t| t.trim().is_empty())
    {
        v.add_error(
            "capture.target",
            "capture.scope=database needs capture.target (the database to watch)",
        );
    }
    let listed = props
        .get(FILTER_OVERRIDES)
        .and_then(|t| filter_override_names(t).ok())
        .unwrap_or_default();
    for name in &listed {
        if let Err((key, message)) = snapshot_filter(props, name) {
            v.add_error(&key, message);
        }
    }
    let prefix = format!("{FILTER_OVERRIDES}.");
    for key in props.keys() {
        if let Some(name) = key.strip_prefix(&prefix) {
            if !listed.iter().any(|l| l == name) {
                v.add_error(
                    key,
                    format!("{key} is set but {name} is not listed in {FILTER_OVERRIDES}, so it would not apply; list it there (names are exact, case included)"),
                );
            }
        }
    }
    let num = |k: &str, d: i64| {
        props
            .get(k)
            .and_then(|s| s.trim().parse::<i64>().ok())
            .unwrap_or(d)
    };
    let oversize = props
        .get("cursor.oversize.handling.mode")
        .map(|m| m.trim().to_ascii_lowercase());
    if oversize.as_deref() == Some("skip") && num("cursor.oversize.skip.threshold", 0) <= 0 {
        v.add_error(
            "cursor.oversize.skip.threshold",
            "Invalid threshold value for skipped document size: cursor.oversize.handling.mode=skip needs a threshold above 0 bytes",
        );
    }
    if num("max.queue.size", 8192) <= num("max.batch.size", 2048) {
        v.add_error(
            "max.queue.size",
            "Must be larger than the maximum batch size (max.batch.size)",
        );
    }
    v
}

fn selector(p: &headwater_api::config::ParsedConfig, include: &str, exclude: &str) -> Selector {
    selector_of(p, include, exclude, false)
}

/// An include/exclude pair as regexes, or as literal names (`filters.match.mode=literal`).
fn selector_of(
    p: &headwater_api::config::ParsedConfig,
    include: &str,
    exclude: &str,
    literal: bool,
) -> Selector {
    let list = |k: &str| {
        p.get_string(k)
            .and_then(|s| {
                if literal {
                    Some(PatternList::literals(s))
                } else {
                    PatternList::parse(s).ok()
                }
            })
            .filter(|l| !l.is_empty())
    };
    match (list(include), list(exclude)) {
        (Some(i), _) => Selector::Include(i),
        (None, Some(e)) => Selector::Exclude(e),
        (None, None) => Selector::All,
    }
}

impl MongoConfig {
    /// Parses a configuration that [`validate`] accepts; otherwise returns the validation.
    pub fn parse(props: &Properties) -> Result<MongoConfig, ConfigValidation> {
        let validation = validate(props);
        if validation.error_count() > 0 {
            return Err(validation);
        }
        let p = config_def().parse(props)?;
        let s = |k: &str| p.get_string(k).unwrap_or_default().to_owned();
        let opt = |k: &str| p.get_string(k).map(str::to_owned).filter(|v| !v.is_empty());
        let lower = |k: &str| s(k).to_ascii_lowercase();
        let long = |k: &str| p.get_long(k).unwrap_or(0);
        let ms = |k: &str| Duration::from_millis(u64::try_from(long(k)).unwrap_or(0));
        let capture_mode = match lower("capture.mode").as_str() {
            "change_streams" => CaptureMode::ChangeStreams,
            "change_streams_with_pre_image" => CaptureMode::ChangeStreamsWithPreImage,
            "change_streams_update_full_with_pre_image" => {
                CaptureMode::ChangeStreamsUpdateFullWithPreImage
            }
            _ => CaptureMode::ChangeStreamsUpdateFull,
        };
        let snapshot_mode = match lower("snapshot.mode").as_str() {
            "initial_only" => SnapshotMode::InitialOnly,
            "no_data" => SnapshotMode::NoData,
            "never" => {
                tracing::warn!("snapshot.mode=never is deprecated; treating it as no_data");
                SnapshotMode::NoData
            }
            "when_needed" => SnapshotMode::WhenNeeded,
            "always" => SnapshotMode::Always,
            "configuration_based" => {
                SnapshotMode::ConfigurationBased(ConfigurationBased::from_props(props))
            }
            _ => SnapshotMode::Initial,
        };
        let start_delays = StartDelays::from_props(props);
        if lower("capture.mode.full.update.type") == "post_image" && !capture_mode.update_full() {
            tracing::warn!(capture_mode = %s("capture.mode"), "capture.mode.full.update.type=post_image has no effect: only the change_streams_update_full capture modes carry an update's full document");
        }
        let literal_filters = lower("filters.match.mode") == "literal";
        let snapshot_filters = opt(FILTER_OVERRIDES)
            .map(|t| filter_override_names(&t).unwrap_or_default())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|name| {
                let filter = snapshot_filter(props, &name).ok()?;
                Some((name, filter))
            })
            .collect();
        let pipeline_order = match lower("cursor.pipeline.order").as_str() {
            "user_first" => PipelineOrder::UserFirst,
            "user_only" => PipelineOrder::UserOnly,
            _ => PipelineOrder::InternalFirst,
        };
        let oversize = match lower("cursor.oversize.handling.mode").as_str() {
            "skip" => OversizeHandling::Skip(long("cursor.oversize.skip.threshold")),
            "split" => OversizeHandling::Split,
            _ => OversizeHandling::Fail,
        };
        Ok(MongoConfig {
            snapshot_filters,
            // Inserts are signals only when the source channel is enabled (Debezium's rule);
            // with the file channel alone the collection holds the watermarks.
            signal_collection: opt("signal.data.collection")
                .map(|s| s.trim().to_owned())
                .filter(|_| channel_enabled(props, "source") || channel_enabled(props, "file")),
            source_signals: channel_enabled(props, "source"),
            user_pipeline: parse_pipeline(&s("cursor.pipeline")).unwrap_or_default(),
            pipeline_order,
            oversize,
            connection_string: s("mongodb.connection.string"),
            user: opt("mongodb.user"),
            password: opt("mongodb.password"),
            auth_source: s("mongodb.authsource"),
            topic_prefix: s("topic.prefix"),
            databases: selector_of(
                &p,
                "database.include.list",
                "database.exclude.list",
                literal_filters,
            ),
            collections: selector_of(
                &p,
                "collection.include.list",
                "collection.exclude.list",
                literal_filters,
            ),
            capture_mode,
            post_image: lower("capture.mode.full.update.type") == "post_image",
            capture_database: (lower("capture.scope") == "database").then(|| s("capture.target")),
            snapshot_mode,
            start_delays,
            watermarks_deleted: headwater_connector_common::config::watermarks_deleted(props),
            snapshot_max_threads: usize::try_from(long("snapshot.max.threads"))
                .unwrap_or(1)
                .max(1),
            snapshot_chunk_documents: u64::try_from(long("snapshot.chunk.documents"))
                .unwrap_or(500_000)
                .max(1),
            snapshot_collections: selector(&p, "snapshot.include.collection.list", ""),
            incremental_chunk_size: p
                .get_long("incremental.snapshot.chunk.size")
                .unwrap_or(1024)
                .clamp(1, 1 << 20) as usize,
            snapshot_fetch_size: p
                .get_long("snapshot.fetch.size")
                .and_then(|n| u32::try_from(n).ok()),
            field_excludes: opt("field.exclude.list")
                .map(|e| parse_excludes(&e).unwrap_or_default())
                .unwrap_or_default(),
            field_renames: opt("field.renames")
                .map(|r| parse_renames(&r).unwrap_or_default())
                .unwrap_or_default(),
            tls: p.get_bool("mongodb.ssl.enabled").unwrap_or(false),
            tombstones_on_delete: p.get_bool("tombstones.on.delete").unwrap_or(true),
            skipped: parse_skipped(&s("skipped.operations")).unwrap_or_default(),
            heartbeat_interval: ms("heartbeat.interval.ms"),
            heartbeat_topic_prefix: s("topic.heartbeat.prefix"),
            transaction_topic: p
                .get_bool("provide.transaction.metadata")
                .unwrap_or(false)
                .then(|| s("topic.transaction")),
            cursor_max_await: p
                .get_long("cursor.max.await.time.ms")
                .map(|n| Duration::from_millis(u64::try_from(n).unwrap_or(0))),
            max_batch_size: usize::try_from(long("max.batch.size")).unwrap_or(2048),
            max_queue_size: usize::try_from(long("max.queue.size")).unwrap_or(8192),
            poll_interval: ms("poll.interval.ms"),
            connect_timeout: ms("mongodb.connect.timeout.ms"),
            server_selection_timeout: ms("mongodb.server.selection.timeout.ms"),
        })
    }

    /// Whether `db.collection` is captured.
    pub fn captures(&self, db: &str, collection: &str) -> bool {
        if matches!(db, "admin" | "config" | "local") {
            return false;
        }
        if let Some(target) = &self.capture_database {
            if target != db {
                return false;
            }
        }
        self.databases.accepts(db) && self.collections.accepts(&format!("{db}.{collection}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(kv: &[(&str, &str)]) -> Properties {
        let mut p = Properties::new();
        p.insert(
            "mongodb.connection.string".into(),
            "mongodb://127.0.0.1:27017/?replicaSet=rs0".into(),
        );
        p.insert("topic.prefix".into(), "cdc".into());
        for (k, v) in kv {
            p.insert((*k).into(), (*v).into());
        }
        p
    }

    #[test]
    fn configuration_based_snapshot_mode_reads_its_keys() {
        let c = MongoConfig::parse(&props(&[
            ("snapshot.mode", "Configuration_Based"),
            ("snapshot.mode.configuration.based.start.stream", "true"),
            (
                "snapshot.mode.configuration.based.snapshot.on.data.error",
                "true",
            ),
        ]))
        .unwrap();
        let policy = c.snapshot_mode.policy();
        assert!(policy.streams && !policy.without_offset && !policy.every_start);
        assert_eq!(
            policy.lost_position,
            headwater_connector_common::snapshot_policy::LostPosition::StreamFromNow
        );
        let Err(nothing) = MongoConfig::parse(&props(&[("snapshot.mode", "configuration_based")]))
        else {
            panic!("a configuration that captures nothing was accepted");
        };
        assert!(nothing.error_message().contains("capture nothing"));
        let Err(custom) = MongoConfig::parse(&props(&[("snapshot.mode", "custom")])) else {
            panic!("snapshot.mode=custom was accepted");
        };
        assert!(custom.error_message().contains("Java"));
    }

    #[test]
    fn debezium_filter_keys_are_applied_or_refused_never_ignored() {
        let c = MongoConfig::parse(&props(&[(
            "snapshot.include.collection.list",
            "shop\\.orders,shop\\.cust.*",
        )]))
        .unwrap();
        assert!(c.snapshot_collections.accepts("shop.orders"));
        assert!(c.snapshot_collections.accepts("shop.customers"));
        assert!(!c.snapshot_collections.accepts("shop.audit"));
        let all = MongoConfig::parse(&props(&[])).unwrap();
        assert!(all.snapshot_collections.accepts("shop.audit"));
        for (k, v, says) in [
            ("capture.mode.full.update.type", "sometimes", "not one of"),
            ("filters.match.mode", "glob", "regex"),
        ] {
            let Err(refused) = MongoConfig::parse(&props(&[(k, v)])) else {
                panic!("{k}={v} accepted");
            };
            let e = refused.error_message();
            assert!(e.contains(k) && e.contains(says), "{k}={v}: {e}");
        }
        for (k, v) in [
            ("capture.mode.full.update.type", "LOOKUP"),
            ("capture.mode.full.update.type", "post_image"),
            ("snapshot.mode", "always"),
            ("filters.match.mode", "regex"),
            ("filters.match.mode", "LITERAL"),
            ("cursor.oversize.handling.mode", "fail"),
            ("cursor.oversize.handling.mode", "split"),
        ] {
            assert!(MongoConfig::parse(&props(&[(k, v)])).is_ok(), "{k}={v}");
        }
    }

    #[test]
    fn defaults_are_debeziums() {
        let c = MongoConfig::parse(&props(&[])).unwrap();
        assert_eq!(c.capture_mode, CaptureMode::ChangeStreamsUpdateFull);
        assert_eq!(c.snapshot_mode, SnapshotMode::Initial);
        assert!(c.tombstones_on_delete);
        assert!(c.skipped.truncate && !c.skipped.create);
        assert_eq!(c.max_batch_size, 2048);
        assert!(c.capture_database.is_none());
        assert!(c.captures("shop", "orders"));
        assert!(!c.captures("admin", "system.users"));
    }

    #[test]
    fn filters_and_every_bad_field_is_reported() {
        let c = MongoConfig::parse(&props(&[(
            "collection.include.list",
            "shop.orders,shop.customers",
        )]))
        .unwrap();
        assert!(c.captures("shop", "orders"));
        assert!(
            c.captures("SHOP", "Orders"),
            "case-insensitive, as Debezium"
        );
        assert!(!c.captures("shop", "orders_archive"), "anchored");
        assert!(!c.captures("other", "orders"));
        let mut p = props(&[
            ("capture.mode", "oplog"),
            ("snapshot.mode", "custom"),
            ("capture.scope", "database"),
            ("mongodb.hosts", "rs0/h:27017"),
            ("field.renames", "shop.orders"),
            ("collection.include.list", "a.b"),
            ("collection.exclude.list", "a.c"),
        ]);
        p.insert("mongodb.connection.string".into(), "h:27017".into());
        let v = validate(&p);
        let errs = v.errors_by_field();
        for k in [
            "mongodb.connection.string",
            "capture.mode",
            "snapshot.mode",
            "capture.target",
            "mongodb.hosts",
            "field.renames",
            "collection.exclude.list",
        ] {
            assert!(errs.contains_key(k), "{k}: {errs:?}");
        }
        assert!(MongoConfig::parse(&p).is_err());
    }

    #[test]
    fn literal_filters_match_whole_names_and_regex_filters_must_compile() {
        let bad_regex = [("collection.include.list", "shop.orders(")];
        let v = validate(&props(&bad_regex));
        let errs = v.errors_by_field();
        assert!(errs.contains_key("collection.include.list"), "{errs:?}");
        let c = MongoConfig::parse(&props(&[
            ("filters.match.mode", "literal"),
            ("collection.include.list", "shop.orders(, shop.line.items"),
            ("database.exclude.list", "audit"),
        ]))
        .unwrap();
        assert!(c.captures("shop", "orders("));
        assert!(c.captures("SHOP", "line.items"));
        assert!(!c.captures("shop", "lineXitems"), "a dot is a dot");
        assert!(!c.captures("shop", "orders"));
        let c = MongoConfig::parse(&props(&[
            ("filters.match.mode", "literal"),
            ("database.exclude.list", "audit"),
        ]))
        .unwrap();
        assert!(c.captures("shop", "orders"));
        assert!(!c.captures("audit", "log"));
        assert!(c.captures("audit2", "log"));
    }

    #[test]
    fn cursor_pipeline_is_a_json_array_of_stages() {
        let c = MongoConfig::parse(&props(&[
            (
                "cursor.pipeline",
                r#"[{"$match": {"fullDocument.owner": {"$oid": "65a1b2c3d4e5f60718293a4b"}, "fullDocument.n": {"$gt": 5}}}, {"$project": {"fullDocument.secret": 0}}]"#,
            ),
            ("cursor.pipeline.order", "USER_FIRST"),
        ]))
        .unwrap();
        assert_eq!(c.pipeline_order, PipelineOrder::UserFirst);
        assert_eq!(c.user_pipeline.len(), 2);
        let owner = c.user_pipeline[0]
            .get_document("$match")
            .unwrap()
            .get_object_id("fullDocument.owner")
            .unwrap();
        assert_eq!(owner.to_hex(), "65a1b2c3d4e5f60718293a4b");
        let keys: Vec<&String> = c.user_pipeline[0]
            .get_document("$match")
            .unwrap()
            .keys()
            .collect();
        assert_eq!(keys, ["fullDocument.owner", "fullDocument.n"], "order kept");
        let d = MongoConfig::parse(&props(&[])).unwrap();
        assert!(d.user_pipeline.is_empty());
        assert_eq!(d.pipeline_order, PipelineOrder::InternalFirst);
        assert_eq!(d.oversize, OversizeHandling::Fail);
        for (text, says) in [
            (r#"{"$match": {}}"#, "must be an array"),
            (r#"[{$match: {}}]"#, "not valid JSON"),
            (r#"[{"$match": {}, "$project": {}}]"#, "stage 1"),
            (r#"[{"$match": {}}, {"match": {}}]"#, "stage 2"),
            (
                r#"[{"$match": {"d": {"$date": "yesterday"}}}]"#,
                "extended JSON",
            ),
            (r#"[3]"#, "JSON document"),
            (
                r#"[{"$changeStreamSplitLargeEvent": {}}]"#,
                "cursor.oversize.handling.mode=split",
            ),
        ] {
            let v = validate(&props(&[("cursor.pipeline", text)]));
            let errs = v.errors_by_field();
            let e = errs.get("cursor.pipeline").map(|e| e.join(" "));
            assert!(
                e.as_deref().is_some_and(|e| e.contains(says)),
                "{text}: {e:?}"
            );
        }
    }

    #[test]
    fn snapshot_filter_overrides_need_a_query_per_collection() {
        let c = MongoConfig::parse(&props(&[
            (FILTER_OVERRIDES, "shop.orders, shop.customers"),
            (
                "snapshot.collection.filter.overrides.shop.orders",
                r#"{"status": "open", "placed": {"$gte": {"$date": "2026-01-01T00:00:00Z"}}}"#,
            ),
            (
                "snapshot.collection.filter.overrides.shop.customers",
                r#"{"active": true}"#,
            ),
        ]))
        .unwrap();
        assert_eq!(c.snapshot_filters.len(), 2);
        assert_eq!(c.snapshot_filters[0].0, "shop.orders");
        assert_eq!(c.snapshot_filters[0].1.get_str("status").unwrap(), "open");
        assert!(c.snapshot_filters[0]
            .1
            .get_document("placed")
            .unwrap()
            .get_datetime("$gte")
            .is_ok());
        let v = validate(&props(&[
            (FILTER_OVERRIDES, "shop.orders,shop.customers,nodot"),
            ("snapshot.collection.filter.overrides.shop.orders", "[1]"),
        ]));
        let errs = v.errors_by_field();
        assert!(errs.contains_key(FILTER_OVERRIDES), "{errs:?}");
        let v = validate(&props(&[
            (FILTER_OVERRIDES, "shop.orders,shop.customers"),
            ("snapshot.collection.filter.overrides.shop.orders", "[1]"),
        ]));
        let errs = v.errors_by_field();
        for key in [
            "snapshot.collection.filter.overrides.shop.orders",
            "snapshot.collection.filter.overrides.shop.customers",
        ] {
            assert!(errs.contains_key(key), "{key}: {errs:?}");
        }
        let v = validate(&props(&[
            (FILTER_OVERRIDES, "shop.orders"),
            ("snapshot.collection.filter.overrides.shop.orders", "{}"),
            ("snapshot.collection.filter.overrides.shop.Orders", "{}"),
        ]));
        let errs = v.errors_by_field();
        assert_eq!(
            errs.keys().copied().collect::<Vec<_>>(),
            ["snapshot.collection.filter.overrides.shop.Orders"],
            "an override for a collection not listed"
        );
    }

    #[test]
    fn oversize_skip_needs_a_threshold() {
        let skip = [("cursor.oversize.handling.mode", "skip")];
        let v = validate(&props(&skip));
        let errs = v.errors_by_field();
        assert!(
            errs.contains_key("cursor.oversize.skip.threshold"),
            "{errs:?}"
        );
        let c = MongoConfig::parse(&props(&[
            ("cursor.oversize.handling.mode", "skip"),
            ("cursor.oversize.skip.threshold", "1048576"),
        ]))
        .unwrap();
        assert_eq!(c.oversize, OversizeHandling::Skip(1_048_576));
    }

    #[test]
    fn signal_collection_is_a_namespace_in_the_watched_database() {
        let c = MongoConfig::parse(&props(&[("signal.data.collection", "ops.signals")])).unwrap();
        assert_eq!(c.signal_collection.as_deref(), Some("ops.signals"));
        let off = MongoConfig::parse(&props(&[
            ("signal.data.collection", "ops.signals"),
            ("signal.enabled.channels", ""),
        ]))
        .unwrap();
        assert_eq!(off.signal_collection, None, "the source channel is off");
        for (kv, key) in [
            (
                vec![("signal.data.collection", "signals")],
                "signal.data.collection",
            ),
            (
                vec![
                    ("signal.data.collection", "ops.signals"),
                    ("capture.scope", "database"),
                    ("capture.target", "shop"),
                ],
                "signal.data.collection",
            ),
            (
                vec![("signal.enabled.channels", "source,kafka")],
                "signal.enabled.channels",
            ),
            (
                vec![("signal.data.collection", "admin.signals")],
                "signal.data.collection",
            ),
        ] {
            let v = validate(&props(&kv));
            assert!(v.errors_by_field().contains_key(key), "{kv:?}");
        }
    }
}
