//! Debezium's notifications (`notification.enabled.channels`): what a connector says about its
//! snapshots, as Debezium's `InitialSnapshotNotificationService` and
//! `IncrementalSnapshotNotificationService` say it.
//!
//! Two channels are built: `log` writes each notification to the worker's log (Debezium's
//! `[Notification Service]` line), and `sink` hands it out as a record on
//! `notification.sink.topic.name` with key `{id}` (schema
//! `io.debezium.connector.common.NotificationKey`) and value `{id, aggregate_type, type,
//! additional_data, timestamp}` (schema `io.debezium.connector.common.Notification`). `jmx` is
//! refused: there is no JMX in Headwater.
//!
//! Invariants: a [`Notifier`] with no channel costs nothing and queues nothing; sink records
//! queue in the order they were raised and leave only through [`Notifier::drain_into`], which a
//! task calls at the end of each poll. They carry no source offset, so they never move the
//! committed position (the data records around them do). A notification raised in a poll that
//! fails is logged but its record is not delivered (the task restarts from its offsets), as in
//! Debezium.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use headwater_api::config::{ConfigDef, ConfigKey, ConfigType, Validator};
use headwater_api::{
    ConfigValidation, OffsetMap, Properties, Schema, SchemaBuilder, SchemaRef, SourceRecord,
    Struct, Value,
};

/// `notification.enabled.channels`.
pub const ENABLED_CHANNELS: &str = "notification.enabled.channels";
/// `notification.sink.topic.name`.
pub const SINK_TOPIC: &str = "notification.sink.topic.name";

/// Debezium's aggregate type of initial (and blocking) snapshot notifications.
pub const INITIAL_SNAPSHOT: &str = "Initial Snapshot";
/// Debezium's aggregate type of incremental snapshot notifications.
pub const INCREMENTAL_SNAPSHOT: &str = "Incremental Snapshot";

/// Defines `notification.enabled.channels` (log, sink) and `notification.sink.topic.name`.
pub fn define_keys(def: ConfigDef) -> ConfigDef {
    def.define(
        ConfigKey::new(ENABLED_CHANNELS, ConfigType::String)
            .default_null()
            .validator(Validator::custom(|v| {
                let text = v.to_config_string();
                let unknown = channels(&text).find(|c| !c.eq_ignore_ascii_case("log") && !c.eq_ignore_ascii_case("sink"));
                match unknown {
                    Some(c) if c.eq_ignore_ascii_case("jmx") => Err("notification channel jmx is not supported: Headwater has no JMX; use sink (records on notification.sink.topic.name) or log".to_owned()),
                    Some(c) => Err(format!("notification channel {c:?} is not supported: log and sink are")),
                    None => Ok(()),
                }
            }))
            .doc("Where snapshot notifications go: log (the worker's log) and/or sink (records on notification.sink.topic.name), comma-separated; none by default."),
    )
    .define(
        ConfigKey::new(SINK_TOPIC, ConfigType::String)
            .default_null()
            .doc("The topic of the sink channel's notification records; required when notification.enabled.channels names sink."),
    )
}

fn channels(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim).filter(|c| !c.is_empty())
}

fn sink_topic(props: &Properties) -> Option<&str> {
    props
        .get(SINK_TOPIC)
        .map(|t| t.trim())
        .filter(|t| !t.is_empty())
}

fn enabled(props: &Properties, channel: &str) -> bool {
    props
        .get(ENABLED_CHANNELS)
        .is_some_and(|t| channels(t).any(|c| c.eq_ignore_ascii_case(channel)))
}

/// The cross-key rule: the sink channel needs its topic.
pub fn validate(v: &mut ConfigValidation, props: &Properties) {
    if enabled(props, "sink") && sink_topic(props).is_none() {
        v.add_error(
            SINK_TOPIC,
            "Notification topic name must be provided when the sink notification channel is enabled",
        );
    }
}

/// Why an incremental snapshot finished a table (Debezium's `TableScanCompletionStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableScanStatus {
    /// Every chunk was handed out.
    Succeeded,
    /// The table held no row (no largest key).
    Empty,
    /// No primary key (nor `message.key.columns`): it cannot be read in chunks.
    NoPrimaryKey,
    /// The table is gone or not captured.
    UnknownSchema,
    /// The server refused the table's statements.
    SqlException,
}

impl TableScanStatus {
    fn name(self) -> &'static str {
        match self {
            TableScanStatus::Succeeded => "SUCCEEDED",
            TableScanStatus::Empty => "EMPTY",
            TableScanStatus::NoPrimaryKey => "NO_PRIMARY_KEY",
            TableScanStatus::UnknownSchema => "UNKNOWN_SCHEMA",
            TableScanStatus::SqlException => "SQL_EXCEPTION",
        }
    }
}

/// Raises a connector's notifications on its enabled channels; cheap to clone (clones share
/// one queue), and a no-op when no channel is enabled.
#[derive(Clone, Debug, Default)]
pub struct Notifier(Option<Arc<Channels>>);

#[derive(Debug)]
struct Channels {
    /// `topic.prefix`: Debezium's `connector_name` entry.
    connector_name: String,
    log: bool,
    sink: Option<Sink>,
    /// Rows the current table of the incremental snapshot handed out so far.
    incremental_rows: std::sync::atomic::AtomicU64,
}

#[derive(Debug)]
struct Sink {
    topic: String,
    key_schema: SchemaRef,
    value_schema: SchemaRef,
    queue: Mutex<Vec<SourceRecord>>,
}

impl Notifier {
    /// The notifier `props` ask for (`notification.enabled.channels`), for the connector
    /// whose `topic.prefix` is `connector_name`.
    pub fn from_props(props: &Properties, connector_name: &str) -> Notifier {
        let log = enabled(props, "log");
        let sink = match (enabled(props, "sink"), sink_topic(props)) {
            (true, Some(topic)) => Some(Sink {
                topic: topic.to_owned(),
                key_schema: SchemaBuilder::struct_()
                    .name("io.debezium.connector.common.NotificationKey")
                    .version(1)
                    .field("id", Schema::string())
                    .build_ref(),
                value_schema: SchemaBuilder::struct_()
                    .name("io.debezium.connector.common.Notification")
                    .version(1)
                    .field("id", Schema::string())
                    .field("type", Schema::string())
                    .field("aggregate_type", Schema::string())
                    .field(
                        "additional_data",
                        SchemaBuilder::map(Schema::string(), Schema::string())
                            .optional()
                            .build_ref(),
                    )
                    .field("timestamp", Schema::int64())
                    .build_ref(),
                queue: Mutex::new(Vec::new()),
            }),
            _ => None,
        };
        if !log && sink.is_none() {
            return Notifier(None);
        }
        Notifier(Some(Arc::new(Channels {
            connector_name: connector_name.to_owned(),
            log,
            sink,
            incremental_rows: Default::default(),
        })))
    }

    /// Whether any channel is enabled.
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// Appends the sink records raised since the last call to `out`.
    pub fn drain_into(&self, out: &mut Vec<SourceRecord>) {
        if let Some(sink) = self.0.as_ref().and_then(|c| c.sink.as_ref()) {
            let mut queue = sink.queue.lock().unwrap_or_else(|e| e.into_inner());
            out.append(&mut queue);
        }
    }

    /// Raises one notification; its id is `id` (an incremental snapshot's signal id) or a new
    /// UUID (Debezium's when no signal correlates it). The connector's name is added to
    /// `data`.
    pub fn notify(
        &self,
        id: Option<&str>,
        aggregate_type: &str,
        kind: &str,
        data: &[(&str, String)],
    ) {
        let Some(c) = self.0.as_ref() else {
            return;
        };
        let id = id.map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned);
        let timestamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let mut entries: Vec<(&str, &str)> = data.iter().map(|(k, v)| (*k, v.as_str())).collect();
        entries.push(("connector_name", &c.connector_name));
        entries.sort_unstable();
        if c.log {
            let mut map = String::new();
            for (i, (k, v)) in entries.iter().enumerate() {
                let _ = write!(map, "{}{k}={v}", if i == 0 { "" } else { ", " });
            }
            tracing::info!(
                "[Notification Service]  {{id='{id}', aggregateType='{aggregate_type}', type='{kind}', additionalData={{{map}}}, timestamp={timestamp}}}"
            );
        }
        if let Some(sink) = &c.sink {
            let additional = Value::Map(
                entries
                    .iter()
                    .map(|(k, v)| (Value::from(*k), Value::from(*v)))
                    .collect(),
            );
            let key = Value::Struct(Struct::from_trusted_values(
                sink.key_schema.clone(),
                vec![Value::from(id.as_str())],
            ));
            let value = Value::Struct(Struct::from_trusted_values(
                sink.value_schema.clone(),
                vec![
                    Value::from(id.as_str()),
                    Value::from(kind),
                    Value::from(aggregate_type),
                    additional,
                    Value::Int64(timestamp),
                ],
            ));
            let record = SourceRecord::new(
                OffsetMap::new(),
                OffsetMap::new(),
                sink.topic.clone(),
                Some(sink.key_schema.clone()),
                key,
                Some(sink.value_schema.clone()),
                value,
            );
            sink.queue
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(record);
        }
    }

    // Initial (and blocking) snapshots.

    /// A snapshot starts.
    pub fn initial_started(&self) {
        self.notify(None, INITIAL_SNAPSHOT, "STARTED", &[]);
    }
    /// A start found no snapshot to take (its offsets say it was done, or the mode takes none).
    pub fn initial_skipped(&self) {
        self.notify(None, INITIAL_SNAPSHOT, "SKIPPED", &[]);
    }
    /// The snapshot starts copying `table`, one of `tables` (all it copies; `None` where
    /// Debezium leaves them out, as its MongoDB connector does).
    pub fn initial_table_started(&self, table: &str, tables: Option<&[String]>) {
        let mut data = vec![("current_collection_in_progress", table.to_owned())];
        if let Some(tables) = tables {
            data.push(("data_collections", tables.join(",")));
        }
        self.notify(None, INITIAL_SNAPSHOT, "IN_PROGRESS", &data);
    }
    /// The snapshot copied all of `table` (`rows` rows; `None` where Debezium leaves the count
    /// and the table list out).
    pub fn initial_table_done(&self, table: &str, rows_and_tables: Option<(u64, &[String])>) {
        let mut data = vec![
            ("scanned_collection", table.to_owned()),
            ("status", "SUCCEEDED".to_owned()),
        ];
        if let Some((rows, tables)) = rows_and_tables {
            data.push(("data_collections", tables.join(",")));
            data.push(("total_rows_scanned", rows.to_string()));
        }
        self.notify(None, INITIAL_SNAPSHOT, "TABLE_SCAN_COMPLETED", &data);
    }
    /// The server failed the copy of `table`.
    pub fn initial_table_failed(&self, table: &str) {
        self.notify(
            None,
            INITIAL_SNAPSHOT,
            "TABLE_SCAN_COMPLETED",
            &[
                ("scanned_collection", table.to_owned()),
                ("status", "SQL_EXCEPTION".to_owned()),
            ],
        );
    }
    /// The snapshot copied everything.
    pub fn initial_completed(&self) {
        self.notify(None, INITIAL_SNAPSHOT, "COMPLETED", &[]);
    }
    /// The snapshot ended before copying everything (an error; it runs again at the next
    /// start unless it was a signalled one).
    pub fn initial_aborted(&self) {
        self.notify(None, INITIAL_SNAPSHOT, "ABORTED", &[]);
    }

    // Incremental snapshots.

    /// An incremental snapshot of `tables` starts.
    pub fn incremental_started(&self, id: Option<&str>, tables: &[String]) {
        self.reset_incremental_rows();
        self.notify(
            id,
            INCREMENTAL_SNAPSHOT,
            "STARTED",
            &[("data_collections", tables.join(","))],
        );
    }
    /// `pause-snapshot` (`paused`) or `resume-snapshot` took effect.
    pub fn incremental_paused(&self, id: Option<&str>, paused: bool, tables: &[String]) {
        let kind = if paused { "PAUSED" } else { "RESUMED" };
        self.notify(
            id,
            INCREMENTAL_SNAPSHOT,
            kind,
            &[("data_collections", tables.join(","))],
        );
    }
    /// A chunk of `table` was read: `max` is the table's largest key when its copy started,
    /// `last` the chunk's last key (each key column as text, comma-separated).
    pub fn incremental_chunk(
        &self,
        id: Option<&str>,
        tables: &[String],
        table: &str,
        max: &[String],
        last: &[String],
    ) {
        let max = if max.is_empty() {
            "\"<null>\"".to_owned()
        } else {
            max.join(",")
        };
        self.notify(
            id,
            INCREMENTAL_SNAPSHOT,
            "IN_PROGRESS",
            &[
                ("data_collections", tables.join(",")),
                ("current_collection_in_progress", table.to_owned()),
                ("maximum_key", max),
                ("last_processed_key", last.join(",")),
            ],
        );
    }
    /// `rows` more rows of the current table were handed out.
    pub fn incremental_rows(&self, rows: u64) {
        if let Some(c) = &self.0 {
            c.incremental_rows
                .fetch_add(rows, std::sync::atomic::Ordering::Relaxed);
        }
    }
    pub(crate) fn reset_incremental_rows(&self) -> u64 {
        self.0.as_ref().map_or(0, |c| {
            c.incremental_rows
                .swap(0, std::sync::atomic::Ordering::Relaxed)
        })
    }
    /// The incremental snapshot is done with `table` (one of `tables`), for `status`.
    pub fn incremental_table_done(
        &self,
        id: Option<&str>,
        tables: &[String],
        table: &str,
        status: TableScanStatus,
    ) {
        let rows = self.reset_incremental_rows();
        self.notify(
            id,
            INCREMENTAL_SNAPSHOT,
            "TABLE_SCAN_COMPLETED",
            &[
                ("data_collections", tables.join(",")),
                ("scanned_collection", table.to_owned()),
                ("total_rows_scanned", rows.to_string()),
                ("status", status.name().to_owned()),
            ],
        );
    }
    /// The incremental snapshot copied every table.
    pub fn incremental_completed(&self, id: Option<&str>) {
        self.notify(id, INCREMENTAL_SNAPSHOT, "COMPLETED", &[]);
    }
    /// `stop-snapshot` dropped `tables` (`None`: all of them) from the incremental snapshot.
    pub fn incremental_aborted(&self, id: Option<&str>, tables: Option<&[String]>) {
        match tables {
            Some(tables) => self.notify(
                id,
                INCREMENTAL_SNAPSHOT,
                "ABORTED",
                &[("data_collections", tables.join(","))],
            ),
            None => {
                self.reset_incremental_rows();
                self.notify(id, INCREMENTAL_SNAPSHOT, "ABORTED", &[]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headwater_api::properties;

    fn map_of(record: &SourceRecord) -> Vec<(String, String)> {
        let value = record.value.as_struct().expect("struct value");
        match value.get("additional_data") {
            Some(Value::Map(entries)) => entries
                .iter()
                .map(|(k, v)| {
                    let text = |v: &Value| match v {
                        Value::String(s) => s.to_string(),
                        other => panic!("not text: {other:?}"),
                    };
                    (text(k), text(v))
                })
                .collect(),
            other => panic!("no map: {other:?}"),
        }
    }

    #[test]
    fn no_channel_queues_nothing_and_log_only_queues_nothing() {
        let off = Notifier::from_props(&Properties::new(), "cdc");
        assert!(!off.is_on());
        off.initial_started();
        let log = Notifier::from_props(&properties(&[(ENABLED_CHANNELS, "log")]), "cdc");
        assert!(log.is_on());
        log.initial_started();
        let mut out = Vec::new();
        off.drain_into(&mut out);
        log.drain_into(&mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn sink_records_have_debeziums_schemas_and_come_out_in_order() {
        let n = Notifier::from_props(
            &properties(&[(ENABLED_CHANNELS, "log, sink"), (SINK_TOPIC, "notes")]),
            "cdc",
        );
        let tables = vec!["public.a".to_owned(), "public.b".to_owned()];
        n.initial_started();
        n.initial_table_started("public.a", Some(&tables));
        n.initial_table_done("public.a", Some((3, &tables)));
        n.initial_completed();
        let shared = n.clone();
        shared.incremental_started(Some("sig-1"), &tables);
        shared.incremental_rows(5);
        shared.incremental_rows(2);
        shared.incremental_table_done(
            Some("sig-1"),
            &tables,
            "public.a",
            TableScanStatus::Succeeded,
        );
        let mut out = Vec::new();
        n.drain_into(&mut out);
        let kinds: Vec<String> = out
            .iter()
            .map(|r| {
                let v = r.value.as_struct().unwrap();
                format!("{:?}/{:?}", v.get("aggregate_type"), v.get("type"))
            })
            .collect();
        assert_eq!(out.len(), 6, "{kinds:?}");
        for r in &out {
            assert_eq!(r.topic, "notes");
            assert!(r.source_offset.is_empty());
            let key = r.key.as_struct().unwrap();
            let value = r.value.as_struct().unwrap();
            assert_eq!(
                key.schema().name(),
                Some("io.debezium.connector.common.NotificationKey")
            );
            assert_eq!(
                value.schema().name(),
                Some("io.debezium.connector.common.Notification")
            );
            assert_eq!(key.get("id"), value.get("id"));
            assert!(matches!(value.get("timestamp"), Some(Value::Int64(t)) if *t > 0));
        }
        let field = |i: usize, f: &str| match out[i].value.as_struct().unwrap().get(f) {
            Some(Value::String(s)) => s.to_string(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            (field(0, "aggregate_type"), field(0, "type")),
            ("Initial Snapshot".to_owned(), "STARTED".to_owned())
        );
        assert_eq!(
            map_of(&out[0]),
            vec![("connector_name".into(), "cdc".into())]
        );
        assert_eq!(field(2, "type"), "TABLE_SCAN_COMPLETED");
        assert_eq!(
            map_of(&out[2]),
            vec![
                ("connector_name".into(), "cdc".into()),
                ("data_collections".into(), "public.a,public.b".into()),
                ("scanned_collection".into(), "public.a".into()),
                ("status".into(), "SUCCEEDED".into()),
                ("total_rows_scanned".into(), "3".into()),
            ]
        );
        assert_eq!(field(3, "type"), "COMPLETED");
        assert_eq!(field(4, "aggregate_type"), "Incremental Snapshot");
        assert!(map_of(&out[5]).contains(&("total_rows_scanned".into(), "7".into())));
        let mut again = Vec::new();
        n.drain_into(&mut again);
        assert!(again.is_empty(), "drained once");
    }

    #[test]
    fn the_sink_needs_its_topic_and_jmx_is_refused() {
        let def = define_keys(ConfigDef::new());
        let check = |pairs: &[(&str, &str)]| {
            let props = properties(pairs);
            let mut v = def.validate(&props);
            validate(&mut v, &props);
            v
        };
        assert_eq!(check(&[(ENABLED_CHANNELS, "sink,log")]).error_count(), 1);
        assert_eq!(
            check(&[(ENABLED_CHANNELS, "sink"), (SINK_TOPIC, "n")]).error_count(),
            0
        );
        let jmx = check(&[(ENABLED_CHANNELS, "log,jmx")]);
        assert_eq!(jmx.error_count(), 1);
        assert_eq!(check(&[(ENABLED_CHANNELS, "kafka")]).error_count(), 1);
        assert_eq!(check(&[]).error_count(), 0);
    }
}
