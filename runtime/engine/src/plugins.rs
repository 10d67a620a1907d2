//! The explicit plugin registry the worker fills: source and sink connector classes (keyed by their
//! Kafka Connect / Debezium class names plus aliases) and the transform-chain builder.
//!
//! Class resolution follows Kafka Connect: the fully qualified class name, the simple class
//! name, or the simple name without a `Connector` suffix (`PostgresConnector`, `Postgres`),
//! case-sensitive, plus any extra aliases registered. An unknown class gets an error that lists
//! the classes this build has.

use std::sync::Arc;

use headwater_api::config::ConfigValidation;
use headwater_api::{
    ConnectError, Properties, SinkConnector, SourceConnector, SourceRecord, Transform,
};

use crate::model::PluginInfo;

/// Creates a fresh, unconfigured connector instance.
pub type ConnectorFactory = Arc<dyn Fn() -> Box<dyn SourceConnector> + Send + Sync>;

/// One registered source connector class.
#[derive(Clone)]
pub struct ConnectorPlugin {
    pub class: String,
    pub aliases: Vec<String>,
    pub factory: ConnectorFactory,
}

impl ConnectorPlugin {
    fn matches(&self, name: &str) -> bool {
        class_matches(&self.class, &self.aliases, name)
    }
    pub fn version(&self) -> String {
        (self.factory)().version()
    }
}

/// Creates a fresh, unconfigured sink connector instance.
pub type SinkConnectorFactory = Arc<dyn Fn() -> Box<dyn SinkConnector> + Send + Sync>;

/// One registered sink connector class.
#[derive(Clone)]
pub struct SinkPlugin {
    pub class: String,
    pub aliases: Vec<String>,
    pub factory: SinkConnectorFactory,
}

impl SinkPlugin {
    fn matches(&self, name: &str) -> bool {
        class_matches(&self.class, &self.aliases, name)
    }
    pub fn version(&self) -> String {
        (self.factory)().version()
    }
}

/// A connector class of either kind.
#[derive(Clone)]
pub enum AnyConnector {
    Source(ConnectorPlugin),
    Sink(SinkPlugin),
}

impl AnyConnector {
    pub fn config_def(&self) -> headwater_api::ConfigDef {
        match self {
            AnyConnector::Source(p) => (p.factory)().config_def(),
            AnyConnector::Sink(p) => (p.factory)().config_def(),
        }
    }
    pub fn validate(&self, props: &Properties) -> ConfigValidation {
        match self {
            AnyConnector::Source(p) => (p.factory)().validate(props),
            AnyConnector::Sink(p) => (p.factory)().validate(props),
        }
    }
    pub fn class(&self) -> &str {
        match self {
            AnyConnector::Source(p) => &p.class,
            AnyConnector::Sink(p) => &p.class,
        }
    }
    /// `source` or `sink`, as Kafka Connect's REST API says.
    pub fn kind(&self) -> &'static str {
        match self {
            AnyConnector::Source(_) => "source",
            AnyConnector::Sink(_) => "sink",
        }
    }
}

fn class_matches(class: &str, aliases: &[String], name: &str) -> bool {
    let simple = class.rsplit('.').next().unwrap_or(class);
    let short = simple.strip_suffix("Connector").unwrap_or(simple);
    name == class || name == simple || name == short || aliases.iter().any(|a| a == name)
}

/// Validates and builds a connector's whole transform chain (`transforms=...`,
/// `predicates=...`) from its configuration. The chain is itself a transform.
pub trait TransformChainBuilder: Send + Sync {
    /// Per-key errors of the transform and predicate settings (keys prefixed as given).
    fn validate(&self, props: &Properties) -> ConfigValidation;
    /// The configured chain; only called with properties that validated cleanly.
    fn build(&self, props: &Properties) -> Result<Arc<dyn Transform<SourceRecord>>, ConnectError>;
    /// Transform and predicate plugins, for `GET /connector-plugins?connectorsOnly=false`.
    fn plugins(&self) -> Vec<PluginInfo>;
}

/// A build without transforms: any `transforms` or `predicates` setting is an error that
/// says so.
pub struct NoTransforms;

struct Identity;

impl Transform<SourceRecord> for Identity {
    fn apply(&self, record: SourceRecord) -> Result<Option<SourceRecord>, ConnectError> {
        Ok(Some(record))
    }
}

impl TransformChainBuilder for NoTransforms {
    fn validate(&self, props: &Properties) -> ConfigValidation {
        let mut v = ConfigValidation::default();
        for key in ["transforms", "predicates"] {
            if props.get(key).is_some_and(|v| !v.trim().is_empty()) {
                v.add_error(
                    key,
                    format!("{key} are not available in this build of Headwater"),
                );
            }
        }
        v
    }
    fn build(&self, _props: &Properties) -> Result<Arc<dyn Transform<SourceRecord>>, ConnectError> {
        Ok(Arc::new(Identity))
    }
    fn plugins(&self) -> Vec<PluginInfo> {
        Vec::new()
    }
}

/// The registry.
#[derive(Clone)]
pub struct Plugins {
    connectors: Vec<ConnectorPlugin>,
    sinks: Vec<SinkPlugin>,
    transforms: Arc<dyn TransformChainBuilder>,
}

impl Default for Plugins {
    fn default() -> Self {
        Plugins {
            connectors: Vec::new(),
            sinks: Vec::new(),
            transforms: Arc::new(NoTransforms),
        }
    }
}

impl Plugins {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a source connector class.
    pub fn register_source(
        mut self,
        class: &str,
        aliases: &[&str],
        factory: impl Fn() -> Box<dyn SourceConnector> + Send + Sync + 'static,
    ) -> Self {
        self.connectors.push(ConnectorPlugin {
            class: class.to_owned(),
            aliases: aliases.iter().map(|a| (*a).to_owned()).collect(),
            factory: Arc::new(factory),
        });
        self
    }

    /// Registers a sink connector class.
    pub fn register_sink(
        mut self,
        class: &str,
        aliases: &[&str],
        factory: impl Fn() -> Box<dyn SinkConnector> + Send + Sync + 'static,
    ) -> Self {
        self.sinks.push(SinkPlugin {
            class: class.to_owned(),
            aliases: aliases.iter().map(|a| (*a).to_owned()).collect(),
            factory: Arc::new(factory),
        });
        self
    }

    /// Finds a connector class of either kind; the error message lists the known classes.
    pub fn find_any(&self, name: &str) -> Result<AnyConnector, String> {
        if let Some(p) = self.sinks.iter().find(|p| p.matches(name)) {
            return Ok(AnyConnector::Sink(p.clone()));
        }
        self.find_connector(name)
            .map(|p| AnyConnector::Source(p.clone()))
    }

    /// Sets the transform-chain builder.
    pub fn with_transforms(mut self, builder: Arc<dyn TransformChainBuilder>) -> Self {
        self.transforms = builder;
        self
    }

    pub fn transforms(&self) -> &Arc<dyn TransformChainBuilder> {
        &self.transforms
    }

    /// Finds a connector class; the error message lists the known classes.
    pub fn find_connector(&self, name: &str) -> Result<&ConnectorPlugin, String> {
        self.connectors.iter().find(|p| p.matches(name)).ok_or_else(|| {
            let known: Vec<&str> = self
                .connectors
                .iter()
                .map(|p| p.class.as_str())
                .chain(self.sinks.iter().map(|p| p.class.as_str()))
                .collect();
            format!(
                "Failed to find any class that implements Connector and which name matches {name}, available connectors are: {}",
                known.join(", ")
            )
        })
    }

    /// Connector plugins (and, unless `connectors_only`, transforms, predicates, converters).
    pub fn plugin_infos(&self, connectors_only: bool) -> Vec<PluginInfo> {
        let mut out: Vec<PluginInfo> = self
            .connectors
            .iter()
            .map(|p| PluginInfo {
                class: p.class.clone(),
                plugin_type: "source".into(),
                version: p.version(),
            })
            .chain(self.sinks.iter().map(|p| PluginInfo {
                class: p.class.clone(),
                plugin_type: "sink".into(),
                version: p.version(),
            }))
            .collect();
        if !connectors_only {
            out.extend(self.transforms.plugins());
            out.extend(
                headwater_format::converters::converters()
                    .into_iter()
                    .map(|c| PluginInfo {
                        class: c.class.into(),
                        plugin_type: "converter".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                    }),
            );
        }
        out
    }
}
