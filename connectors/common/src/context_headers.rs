//! Debezium's context headers (`extended.headers.enabled`, Debezium 3.2.1 and later, on by
//! default): four string headers on every change event that say which connector made it.
//!
//! - `__debezium.context.connectorLogicalName`: the `topic.prefix`;
//! - `__debezium.context.taskId`: the task's number (`0` for these one-task connectors);
//! - `__debezium.context.connectorName`: the connector type as Debezium names it
//!   (`postgresql`, `mysql`, `mariadb`, `mongodb`);
//! - `__debezium.context.runId`: a UUID drawn when the task starts, so a restart (of the worker
//!   or of the task after an error) is told apart from the run before it; time-ordered
//!   (version 7) as Debezium's `UUIDUtils` draws them, so a later run's id sorts after.
//!
//! As in Debezium's `EventDispatcher`, they go on data change events (snapshot, incremental
//! snapshot and streaming, the tombstone after a delete, PostgreSQL's logical-decoding
//! messages) and on MySQL's schema-change records, after the headers the event already has
//! (`__debezium.oldkey`/`newkey` of a key change come first); heartbeats, transaction metadata
//! and notifications carry none.
//!
//! Invariants: a disabled [`ContextHeaders`] adds nothing and costs one branch; an enabled one
//! holds the four headers built once per task start and adds them to each record as one
//! shared run (`Headers::push_shared`: a reference count, no copy), which reads as four
//! ordinary headers to transforms and converters.

use std::sync::Arc;

use headwater_api::config::{ConfigDef, ConfigKey, ConfigType};
use headwater_api::{Header, Headers, Properties, Schema, Value};

/// `extended.headers.enabled`.
pub const ENABLED: &str = "extended.headers.enabled";
/// The header with the connector's logical name (`topic.prefix`).
pub const LOGICAL_NAME: &str = "__debezium.context.connectorLogicalName";
/// The header with the task's number.
pub const TASK_ID: &str = "__debezium.context.taskId";
/// The header with the connector type (`postgresql`, `mysql`, `mariadb`, `mongodb`).
pub const CONNECTOR_NAME: &str = "__debezium.context.connectorName";
/// The header with the task run's UUID.
pub const RUN_ID: &str = "__debezium.context.runId";

/// Defines `extended.headers.enabled` (boolean, default true as in Debezium 3.2.1+).
pub fn define_keys(def: ConfigDef) -> ConfigDef {
    def.define(
        ConfigKey::new(ENABLED, ConfigType::Boolean)
            .default_str("true")
            .doc("Add Debezium's context headers (__debezium.context.connectorLogicalName, taskId, connectorName, runId) to change events and their tombstones, PostgreSQL logical messages and MySQL schema-change records."),
    )
}

/// The context headers of one task run; cheap to clone (clones share the headers).
#[derive(Clone, Debug, Default)]
pub struct ContextHeaders(Option<Arc<[Header]>>);

impl ContextHeaders {
    /// Headers that add nothing (`extended.headers.enabled=false`).
    pub fn disabled() -> Self {
        ContextHeaders(None)
    }

    /// The headers of a new run of task `task_id` of a connector of type `connector_type`
    /// with logical name `logical_name`, or none when `extended.headers.enabled` is false.
    pub fn from_props(
        props: &Properties,
        logical_name: &str,
        task_id: u32,
        connector_type: &str,
    ) -> Self {
        // Validated as a boolean by the connector's ConfigDef.
        let enabled = props
            .get(ENABLED)
            .is_none_or(|v| !v.trim().eq_ignore_ascii_case("false"));
        if !enabled {
            return ContextHeaders::disabled();
        }
        ContextHeaders::new(
            logical_name,
            task_id,
            connector_type,
            &uuid::Uuid::now_v7().to_string(),
        )
    }

    /// Enabled headers with the given values.
    pub fn new(logical_name: &str, task_id: u32, connector_type: &str, run_id: &str) -> Self {
        let string = Schema::string();
        let header = |key: &str, value: String| Header {
            key: key.to_owned(),
            schema: Some(string.clone()),
            value: Value::String(value),
        };
        ContextHeaders(Some(Arc::from(vec![
            header(LOGICAL_NAME, logical_name.to_owned()),
            header(TASK_ID, task_id.to_string()),
            header(CONNECTOR_NAME, connector_type.to_owned()),
            header(RUN_ID, run_id.to_owned()),
        ])))
    }

    /// Whether these headers add anything.
    pub fn is_enabled(&self) -> bool {
        self.0.is_some()
    }

    /// The run's UUID, when enabled.
    pub fn run_id(&self) -> Option<&str> {
        self.0.as_ref().and_then(|h| h[3].value.as_str())
    }

    /// Appends the four headers to `headers` (nothing when disabled), shared: a record
    /// holds a reference to the run's headers, not copies.
    pub fn add_to(&self, headers: &mut Headers) {
        if let Some(all) = &self.0 {
            headers.push_shared(all);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> Properties {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn on_by_default_with_debeziums_names_and_a_fresh_run_id_per_start() {
        let first = ContextHeaders::from_props(&props(&[]), "cdc", 0, "postgresql");
        let mut headers = Headers::new();
        headers.add("__debezium.newkey", None, Value::Null);
        first.add_to(&mut headers);
        let shown: Vec<(&str, Option<&str>)> = headers
            .iter()
            .map(|h| (h.key.as_str(), h.value.as_str()))
            .collect();
        let run = first.run_id().expect("enabled");
        assert_eq!(
            shown,
            vec![
                ("__debezium.newkey", None),
                ("__debezium.context.connectorLogicalName", Some("cdc")),
                ("__debezium.context.taskId", Some("0")),
                ("__debezium.context.connectorName", Some("postgresql")),
                ("__debezium.context.runId", Some(run)),
            ]
        );
        let parsed = uuid::Uuid::parse_str(run).expect("a UUID");
        assert_eq!(
            parsed.get_version_num(),
            7,
            "time-ordered, as Debezium's: {run}"
        );
        assert!(headers
            .iter()
            .skip(1)
            .all(|h| h.schema.as_ref().is_some_and(|s| s.name().is_none())));
        let second = ContextHeaders::from_props(&props(&[]), "cdc", 0, "postgresql");
        assert_ne!(second.run_id(), first.run_id());
        std::thread::sleep(std::time::Duration::from_millis(2));
        let third = ContextHeaders::from_props(&props(&[]), "cdc", 0, "postgresql");
        assert!(third.run_id() > first.run_id(), "a later run sorts after");
    }

    #[test]
    fn disabled_adds_nothing() {
        let off = ContextHeaders::from_props(
            &props(&[("extended.headers.enabled", "false")]),
            "cdc",
            0,
            "mysql",
        );
        assert!(!off.is_enabled());
        let mut headers = Headers::new();
        off.add_to(&mut headers);
        assert!(headers.is_empty());
        let def = define_keys(ConfigDef::new());
        let bad = def.validate(&props(&[("extended.headers.enabled", "maybe")]));
        assert!(bad.error_count() > 0);
    }
}
