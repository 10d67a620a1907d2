//! Pieces shared by Headwater's Debezium-compatible source connectors.
//!
//! - [`name_filter`]: Debezium's include/exclude lists (comma-separated, anchored,
//!   case-insensitive regular expressions over qualified names).
//! - [`column_mappers`]: Debezium's column truncation, masking and hashing.
//! - [`name_adjust`]: Debezium's `avro` schema and field name adjustment.
//! - [`context_headers`]: Debezium's `__debezium.context.*` headers
//!   (`extended.headers.enabled`).
//! - [`config`]: `skipped.operations` and the include/exclude pair rule.
//! - [`signal`]: Debezium's source signals (`execute-snapshot`, `log`).
//! - [`signal_file`]: Debezium's file signal channel (`signal.file`).
//! - [`incremental`]: what incremental snapshots share (progress, windows, watermarks).
//! - [`heartbeat`]: Debezium's heartbeat records (`heartbeat.interval.ms`).
//! - [`notification`]: Debezium's snapshot notifications (the log and sink channels).
//! - [`snapshot_policy`]: what `snapshot.mode` asks at a task's start, and
//!   `configuration_based`.
//! - [`text`]: allocation-free number text for timestamps and times.
//! - [`txmeta`]: Debezium's transaction metadata (`provide.transaction.metadata`).

pub mod column_mappers;
pub mod config;
pub mod context_headers;
pub mod heartbeat;
pub mod incremental;
pub mod name_adjust;
pub mod name_filter;
pub mod notification;
pub mod signal;
pub mod signal_file;
pub mod snapshot_policy;
pub mod text;
pub mod txmeta;
