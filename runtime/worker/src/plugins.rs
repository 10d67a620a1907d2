//! The explicit plugin list of this build: every connector class the worker can run, keyed by
//! its Kafka Connect / Debezium class name plus short aliases. Adding a plugin means adding it
//! here; an unknown class in a connector config gets an error listing these.

use headwater_engine::Plugins;

/// The plugins of this build.
pub fn registry() -> Plugins {
    Plugins::new().register_source(
        headwater_connector_datagen::CLASS,
        &["datagen", "Datagen"],
        || Box::new(headwater_connector_datagen::DatagenConnector),
    )
}
