//! [`MongoDbConnector`]: the `SourceConnector` for `io.debezium.connector.mongodb.MongoDbConnector`.
//!
//! Invariants: validation reports every key's problems (see [`crate::config`]); the connector
//! always runs exactly one task, because one change stream is read by one client.

use headwater_api::plugin::SourceTask;
use headwater_api::{ConfigDef, ConfigValidation, ConnectError, Properties, SourceConnector};

use crate::config;
use crate::task::MongoSourceTask;

/// Debezium's MongoDB connector class.
pub const MONGODB_CLASS: &str = "io.debezium.connector.mongodb.MongoDbConnector";

/// The MongoDB source connector.
#[derive(Clone, Debug, Default)]
pub struct MongoDbConnector;

impl SourceConnector for MongoDbConnector {
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
        Box::new(MongoSourceTask::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_task_and_validation() {
        let c = MongoDbConnector;
        let mut props = Properties::new();
        for (k, v) in [
            ("connector.class", MONGODB_CLASS),
            (
                "mongodb.connection.string",
                "mongodb://127.0.0.1:27017/?replicaSet=rs0",
            ),
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
