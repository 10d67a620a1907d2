//! [`MySqlConnector`]: the `SourceConnector` for `io.debezium.connector.mysql.MySqlConnector`
//! and `io.debezium.connector.mariadb.MariaDbConnector`.
//!
//! Invariants: validation reports every key's problems (see [`crate::config`]); the connector
//! always runs exactly one task, because one binlog stream is read by one client.

use headwater_api::plugin::SourceTask;
use headwater_api::{ConfigDef, ConfigValidation, ConnectError, Properties, SourceConnector};

use crate::config;
use crate::task::MySqlSourceTask;

/// Debezium's MySQL connector class.
pub const MYSQL_CLASS: &str = "io.debezium.connector.mysql.MySqlConnector";
/// Debezium's MariaDB connector class.
pub const MARIADB_CLASS: &str = "io.debezium.connector.mariadb.MariaDbConnector";

/// The MySQL / MariaDB source connector (the flavour follows `connector.class`).
#[derive(Clone, Debug, Default)]
pub struct MySqlConnector;

impl SourceConnector for MySqlConnector {
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
        Box::new(MySqlSourceTask::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_task_and_validation() {
        let c = MySqlConnector;
        let mut props = Properties::new();
        for (k, v) in [
            ("connector.class", MARIADB_CLASS),
            ("database.hostname", "h"),
            ("database.user", "u"),
            ("database.server.id", "5400"),
            ("topic.prefix", "cdc"),
            ("tasks.max", "4"),
        ] {
            props.insert(k.into(), v.into());
        }
        let tasks = c.task_configs(&props, 4).unwrap();
        assert_eq!(tasks.len(), 1);
        props.insert("snapshot.mode".into(), "bogus".into());
        assert_eq!(c.validate(&props).error_count(), 1);
        assert!(c.task_configs(&props, 1).is_err());
        assert!(c.version().ends_with("-headwater"));
    }
}
