//! `headwater-engine`: the connector runtime of a worker.
//!
//! - [`engine`]: connector lifecycle and the operations behind the REST API;
//! - [`runner`]: the source task loop that keeps the durability contract (records and their
//!   offsets in one log transaction; the task is told only after it is durable);
//! - [`sink_runner`]: the sink task loop (log -> converters -> transforms -> `put` -> sink
//!   offsets);
//! - [`stores`]: configs, offsets and statuses in internal compacted log topics;
//! - [`plugins`]: the explicit registry of connector classes and the transform-chain builder;
//! - [`convert`]: key/value/header converters per connector;
//! - [`providers`]: `${env:..}`/`${file:..}`/`${dir:..}` config placeholders, resolved when a
//!   connector is validated or its tasks start (never stored resolved), and log redaction;
//! - [`metrics`]: per-task counters/histograms and the Prometheus text rendering;
//! - [`model`]: Kafka Connect's REST entity shapes.
//!
//! Depends on `headwater-api`, `headwater-log` and `headwater-format` only.

pub mod convert;
pub mod engine;
pub mod error;
pub mod metrics;
pub mod model;
pub mod plugins;
pub mod providers;
pub mod runner;
pub mod sealer;
pub mod sink_runner;
pub mod stores;

pub use engine::{framework_config_def, Engine, EngineConfig, ValidationReport};
pub use error::EngineError;
pub use model::{
    ConnectorInfo, ConnectorStateInfo, PluginInfo, State, TargetState, TaskInfo, TaskState,
};
pub use plugins::{Plugins, TransformChainBuilder};
