//! `headwater-connector-postgres`: a PostgreSQL source connector that reads the built-in
//! `pgoutput` logical decoding plugin and emits Debezium's PostgreSQL change events, so it can
//! replace `io.debezium.connector.postgresql.PostgresConnector` with the same connector JSON.
//!
//! Layers, bottom up:
//! - [`lsn`], [`replication`], [`tls`]: WAL positions and a replication-protocol client (TLS,
//!   startup with `replication=database`, authentication, replication commands, the CopyBoth
//!   stream);
//! - [`pgoutput`]: the logical replication message decoder;
//! - [`types`], [`temporal`]: Debezium's type mapping and value conversion from the binary
//!   wire format (used by both the snapshot and the stream);
//! - [`catalog`]: table and type metadata from the system catalogs; [`source_type`]: a
//!   column's type as the JDBC driver describes it (for `column.propagate.source.type`);
//! - [`event`]: Debezium's key/value/envelope schemas and records;
//! - [`config`], [`filters`]: connector configuration (Debezium's keys and defaults);
//! - [`task`], [`connector`]: the `SourceTask` / `SourceConnector` implementations.
//!
//! Invariant kept across the crate: the replication slot's confirmed flush position only moves
//! to positions whose records the engine reported durable through `SourceTask::commit` (or,
//! when nothing is outstanding, to keepalive positions that carry no captured change).

pub mod catalog;
pub mod config;
pub mod connector;
pub mod event;
pub mod filters;
pub mod incremental;
pub mod lsn;
pub mod pgoutput;
pub mod replication;
pub mod snapshot;
pub mod source_type;
pub mod streamed;
pub mod task;
pub mod temporal;
pub mod tls;
pub mod types;

pub use connector::PostgresConnector;
pub use task::PostgresSourceTask;

/// The version string this connector reports (`source.version` in every event, and the plugin
/// version). Debezium writes its own release (`3.6.3.Final`); we write ours.
pub const CONNECTOR_VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "-headwater");

/// The text of a tokio-postgres error with its causes ("error performing TLS handshake:
/// invalid peer certificate: UnknownIssuer"): its own `Display` names only the kind.
pub fn sql_error_text(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}
