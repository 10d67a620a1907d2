//! `headwater-tests`: the test harness crate of Headwater.
//!
//! It starts real, throwaway database servers for integration and end-to-end tests:
//!
//! * [`PostgresServer`] — a private PostgreSQL cluster with `wal_level=logical`, ready for
//!   logical replication (`pgoutput` slots, publications);
//! * [`MariaDbServer`] — a private MariaDB server with a row-based, full-image, full-metadata
//!   binary log, ready for binlog CDC;
//! * [`MongoServer`] — a private SecantusDB server (MongoDB wire protocol, a one-member replica
//!   set with change streams), ready for change-stream CDC;
//! * [`pki::TestPki`]: a test CA and certificates for TLS tests;
//! * [`records::notifications`]: Debezium's notification records as plain values.
//!
//! Invariants every server of this crate keeps:
//!
//! * it owns a fresh temporary directory (data, sockets, logs) that nobody else uses and that
//!   is removed when the handle is dropped;
//! * it listens on `127.0.0.1` only, on a port no other live server of this process uses, and
//!   trusts every local connection (no passwords);
//! * dropping the handle stops the server process (and its process group); the server also
//!   dies when the test process dies, even abnormally, and servers that were never dropped
//!   (e.g. kept in a `static`) are stopped at normal process exit;
//! * starting is blocking and self-contained, so many servers may be started at once from
//!   parallel tests.
//!
//! Binaries are looked up on `PATH` and in the usual Debian locations; a missing binary is a
//! [`HarnessError::BinaryNotFound`] whose message says which package to install.

pub mod bench;
pub mod harness;
pub mod pki;
pub mod records;
pub mod rng;

pub use harness::{
    HarnessError, MariaDbServer, MongoOptions, MongoServer, PostgresServer, S3Server,
    S3_ACCESS_KEY, S3_SECRET_KEY,
};
