//! `headwater-connector-jdbc`: a relational sink, drop-in for Debezium's
//! `io.debezium.connector.jdbc.JdbcSinkConnector`, writing PostgreSQL and MySQL/MariaDB tables.
//!
//! It consumes Debezium envelopes directly (no unwrap transform needed) as well as flattened
//! records, keeps each destination table in step with its source table (upserts by primary key,
//! deletes, truncates), and delivers exactly once: every batch's rows and the consumed offsets
//! (table `headwater_sink_offsets`, see `offsets.table`) commit in one destination transaction,
//! and a restarted task resumes from the offsets found there.
//!
//! - [`config`]: keys, defaults and cross-field validation; `connection.url` parsing;
//! - [`change`]: a record -> a row change of a table (key, columns, unchanged TOAST);
//! - [`batch`]: a batch's changes reduced per table to set-based steps;
//! - [`sql`]: quoting, schema-evolution DDL and key-change look-ups for both dialects;
//! - [`values`]: Connect types -> SQL types, values -> the destination's input syntax;
//! - [`postgres`] / [`mysql`]: the writers (COPY + merge; multi-row upserts);
//! - [`pgbinary`]: values in PostgreSQL's binary COPY format, per column type;
//! - [`connector`]: the plugin and its task.

pub mod batch;
pub mod change;
pub mod config;
pub mod connector;
pub mod mysql;
pub mod pgbinary;
pub mod postgres;
pub mod sql;
pub mod values;

pub use connector::{JdbcSinkConnector, JdbcSinkTask, CLASS};
