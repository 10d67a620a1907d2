//! [`PostgresConnector`]: the `SourceConnector` for `io.debezium.connector.postgresql.PostgresConnector`.
//!
//! Invariants: validation reports every key's problems (Debezium's keys and defaults, see
//! [`crate::config`]); a PostgreSQL connector always runs exactly one task, because one slot
//! can only be read by one client.

use headwater_api::plugin::SourceTask;
use headwater_api::{ConfigDef, ConfigValidation, ConnectError, Properties, SourceConnector};

use crate::config;
use crate::task::PostgresSourceTask;

/// The Kafka Connect class name this connector answers to.
pub const CLASS_NAME: &str = "io.debezium.connector.postgresql.PostgresConnector";

/// The PostgreSQL source connector.
#[derive(Clone, Debug, Default)]
pub struct PostgresConnector;

impl SourceConnector for PostgresConnector {
    fn version(&self) -> String {
        crate::CONNECTOR_VERSION.to_owned()
    }

    fn config_def(&self) -> ConfigDef {
        config::config_def()
    }

    fn validate(&self, props: &Properties) -> ConfigValidation {
        config::validate(props)
    }

    fn task_configs(
        &self,
        props: &Properties,
        max_tasks: usize,
    ) -> Result<Vec<Properties>, ConnectError> {
        if max_tasks == 0 {
            return Err(ConnectError::config("tasks.max must be at least 1"));
        }
        let v = config::validate(props);
        if v.error_count() > 0 {
            return Err(ConnectError::config(v.error_message()));
        }
        Ok(vec![props.clone()])
    }

    fn create_task(&self) -> Box<dyn SourceTask> {
        Box::new(PostgresSourceTask::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_task_and_validation() {
        let c = PostgresConnector;
        let mut props = Properties::new();
        for (k, v) in [
            ("connector.class", CLASS_NAME),
            ("database.hostname", "h"),
            ("database.user", "u"),
            ("database.dbname", "d"),
            ("topic.prefix", "cdc"),
            ("tasks.max", "4"),
            ("some.unknown.key", "kept"),
        ] {
            props.insert(k.into(), v.into());
        }
        let tasks = c.task_configs(&props, 4).unwrap();
        assert_eq!(tasks.len(), 1);
        assert_eq!(tasks[0]["some.unknown.key"], "kept");
        props.insert("plugin.name".into(), "wal2json".into());
        let v = c.validate(&props);
        assert_eq!(v.error_count(), 1);
        assert!(c.task_configs(&props, 1).is_err());
        assert!(c.version().ends_with("-headwater"));
    }
}
