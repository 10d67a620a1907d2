//! `headwater-connector-mysql`: a MySQL / MariaDB source connector that reads the binary log
//! (row events) and emits Debezium's MySQL/MariaDB change events, so it can replace
//! `io.debezium.connector.mysql.MySqlConnector` and
//! `io.debezium.connector.mariadb.MariaDbConnector` with the same connector JSON.
//!
//! Layers, bottom up:
//! - [`types`]: Debezium's type mapping and value conversion (text protocol and binlog forms);
//! - [`schema`]: table shapes from TABLE_MAP full metadata and information_schema;
//! - [`event`]: key/value/envelope schemas, the source block and records;
//! - [`binlog`]: positions, MariaDB GTIDs and the event kinds mysql_common leaves unparsed;
//! - [`snapshot`]: the chunked, parallel, resumable initial snapshot;
//! - [`config`], [`filters`], [`tls`]: Debezium's keys and defaults, TLS settings;
//! - [`task`], [`connector`]: the `SourceTask` / `SourceConnector` implementations.
//!
//! Invariant kept across the crate: a committed source offset always names a binlog position
//! at a transaction boundary whose records the engine reported durable.

pub mod binlog;
pub mod config;
pub mod connector;
pub mod event;
pub mod filters;
pub mod incremental;
pub mod schema;
pub mod snapshot;
pub mod source_type;
pub mod task;
pub mod tls;
pub mod types;

pub use connector::MySqlConnector;
pub use task::MySqlSourceTask;

/// The version string this connector reports (`source.version` and the plugin version).
pub const CONNECTOR_VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "-headwater");
