//! `headwater-connector-mongodb`: a MongoDB source connector on change streams that emits
//! Debezium's MongoDB change events, so it can replace
//! `io.debezium.connector.mongodb.MongoDbConnector` with the same connector JSON.
//!
//! Layers, bottom up:
//! - [`extjson`]: the Java driver's extended JSON in the three dialects Debezium's events mix;
//! - [`fields`]: `field.exclude.list` / `field.renames`;
//! - [`event`]: key/envelope/source schemas and records;
//! - [`snapshot`]: the chunked, parallel snapshot (initial, or asked for by a signal);
//! - [`split`]: reassembly of events the server split (`cursor.oversize.handling.mode=split`);
//! - [`signal`]: Debezium's signal documents (`signal.data.collection`);
//! - [`config`]: Debezium's keys and defaults;
//! - [`task`], [`connector`]: the `SourceTask` / `SourceConnector` implementations.
//!
//! Invariant kept across the crate: a committed source offset always names a resume point
//! whose events the engine reported durable.

pub mod config;
pub mod connector;
pub mod event;
pub mod extjson;
pub mod fields;
pub mod rawbson;
pub mod signal;
pub mod snapshot;
pub mod split;
pub mod task;

pub use connector::MongoDbConnector;
pub use task::MongoSourceTask;

/// The version string this connector reports (`source.version` and the plugin version).
pub const CONNECTOR_VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "-headwater");
