//! The explicit plugin list of this build: every connector class the worker can run, keyed by
//! its Kafka Connect / Debezium class name plus short aliases, and the transform chain
//! (Kafka Connect's and Debezium's SMTs and predicates from `headwater-transforms`). Adding a
//! plugin means adding it here; an unknown class in a connector config gets an error listing
//! the known ones.

use std::sync::Arc;

use headwater_api::config::ConfigValidation;
use headwater_api::{ConnectError, Properties, SourceRecord, Transform};
use headwater_engine::{PluginInfo, Plugins, TransformChainBuilder};
use headwater_transforms::TransformChain;

/// The plugins of this build.
pub fn registry() -> Plugins {
    let plugins = Plugins::new()
        .register_source(
            headwater_connector_postgres::connector::CLASS_NAME,
            &["postgres", "postgresql"],
            || Box::new(headwater_connector_postgres::PostgresConnector),
        )
        .register_source(
            headwater_connector_mysql::connector::MYSQL_CLASS,
            &["mysql"],
            || Box::new(headwater_connector_mysql::MySqlConnector),
        )
        .register_source(
            headwater_connector_mysql::connector::MARIADB_CLASS,
            &["mariadb"],
            || Box::new(headwater_connector_mysql::MySqlConnector),
        )
        .register_source(
            headwater_connector_mongodb::connector::MONGODB_CLASS,
            &["mongodb", "mongo"],
            || Box::new(headwater_connector_mongodb::MongoDbConnector),
        )
        .register_source(
            headwater_connector_datagen::CLASS,
            &["datagen", "Datagen"],
            || Box::new(headwater_connector_datagen::DatagenConnector),
        )
        .register_sink(
            headwater_connector_jdbc::CLASS,
            &["jdbc", "JdbcSink"],
            || Box::new(headwater_connector_jdbc::JdbcSinkConnector),
        )
        .with_transforms(Arc::new(KafkaTransforms));
    #[cfg(feature = "parquet")]
    let plugins = plugins.register_sink(
        headwater_connector_parquet::CLASS,
        &["parquet", "ParquetSink"],
        || Box::new(headwater_connector_parquet::ParquetSinkConnector),
    );
    plugins
}

/// The transform chain of `headwater-transforms`.
struct KafkaTransforms;

struct Chain(TransformChain<SourceRecord>);

impl Transform<SourceRecord> for Chain {
    fn apply(&self, record: SourceRecord) -> Result<Option<SourceRecord>, ConnectError> {
        self.0.apply(record)
    }
}

impl TransformChainBuilder for KafkaTransforms {
    fn validate(&self, props: &Properties) -> ConfigValidation {
        headwater_transforms::validate::<SourceRecord>(props)
    }

    fn build(&self, props: &Properties) -> Result<Arc<dyn Transform<SourceRecord>>, ConnectError> {
        Ok(Arc::new(Chain(
            headwater_transforms::build::<SourceRecord>(props)?,
        )))
    }

    fn plugins(&self) -> Vec<PluginInfo> {
        let version = env!("CARGO_PKG_VERSION");
        let transforms = headwater_transforms::registry::transforms::<SourceRecord>()
            .into_iter()
            .map(|t| PluginInfo {
                class: t.class.to_owned(),
                plugin_type: "transformation".into(),
                version: version.into(),
            });
        let predicates = headwater_transforms::registry::predicates::<SourceRecord>()
            .into_iter()
            .map(|p| PluginInfo {
                class: p.class.to_owned(),
                plugin_type: "predicate".into(),
                version: version.into(),
            });
        transforms.chain(predicates).collect()
    }
}
