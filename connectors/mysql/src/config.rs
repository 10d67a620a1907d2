//! The connector's configuration: the keys and defaults of Debezium's MySQL and MariaDB
//! connectors (`io.debezium.connector.mysql.MySqlConnector`,
//! `io.debezium.connector.mariadb.MariaDbConnector`; see docs/connectors/mysql.md), validated
//! per field with [`ConfigDef`] plus cross-field checks, parsed into [`MySqlConfig`].
//!
//! Invariants: [`validate`] reports every problem (never stops at the first one) and never
//! fails; [`MySqlConfig::parse`] succeeds only for a configuration [`validate`] accepts. Values
//! naming features this build does not have are rejected with a message that says so, never
//! silently ignored. The `schema.history.internal.*` keys are accepted and unused: this
//! connector needs no history topic (see [`crate::schema`]).

use std::time::Duration;

use headwater_api::config::{ConfigDef, ConfigKey, ConfigType, ConfigValue, Importance, Validator};
use headwater_api::{ConfigValidation, Properties};
use headwater_connector_common::column_mappers::{self, ColumnMappers};
use headwater_connector_common::config::{channel_enabled, pair_check, Unbuilt, COMMON_UNBUILT};
pub use headwater_connector_common::config::{parse_skipped, SkippedOps};
use headwater_connector_common::name_adjust::NameAdjustments;
use headwater_connector_common::snapshot_policy::{
    define_snapshot_mode_keys, validate_configuration_based, ConfigurationBased, StartDelays,
};

use crate::filters::{Filters, PatternList, Selector};
use crate::tls::{SslMode, TlsSettings};
use crate::types::{BigintMode, BinaryMode, DecimalMode, MappingConfig, TimePrecisionMode};

/// Which Debezium connector class the configuration is for; decides `source.connector`, the
/// source schema name and the SSL-mode vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    MySql,
    MariaDb,
}

impl Flavor {
    /// `source.connector`.
    pub fn connector_name(self) -> &'static str {
        match self {
            Flavor::MySql => "mysql",
            Flavor::MariaDb => "mariadb",
        }
    }
    /// The source block's schema name.
    pub fn source_schema_name(self) -> &'static str {
        match self {
            Flavor::MySql => "io.debezium.connector.mysql.Source",
            Flavor::MariaDb => "io.debezium.connector.mariadb.Source",
        }
    }
    /// The schema-change key's schema name.
    pub fn schema_change_key_name(self) -> &'static str {
        match self {
            Flavor::MySql => "io.debezium.connector.mysql.SchemaChangeKey",
            Flavor::MariaDb => "io.debezium.connector.mariadb.SchemaChangeKey",
        }
    }
    /// From `connector.class` (aliases `mariadb`/`MariaDbConnector` select MariaDB).
    pub fn from_props(props: &Properties) -> Flavor {
        match props.get("connector.class") {
            Some(c) if c.to_ascii_lowercase().contains("mariadb") => Flavor::MariaDb,
            _ => Flavor::MySql,
        }
    }
}

/// `snapshot.mode` (shared by the sources).
pub use headwater_connector_common::snapshot_policy::SnapshotMode;

/// `snapshot.locking.mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockingMode {
    /// No global lock where the server gives a consistent binlog position inside a consistent
    /// snapshot (MariaDB); on MySQL a global read lock held only until the position is read.
    Minimal,
    /// Global read lock for the whole snapshot.
    Extended,
    /// No lock at all.
    None,
}

/// The byte bound of the binlog queue when `max.queue.size.in.bytes` is 0.
pub const DEFAULT_QUEUE_BYTES: usize = 8 * 1024 * 1024;

/// A parsed, validated configuration.
#[derive(Clone, Debug)]
pub struct MySqlConfig {
    pub flavor: Flavor,
    pub tls: TlsSettings,
    pub hostname: String,
    pub port: u16,
    pub user: String,
    pub password: Option<String>,
    pub server_id: u32,
    pub connect_timeout: Duration,
    pub initial_statements: Vec<String>,
    pub topic_prefix: String,
    pub filters: Filters,
    pub snapshot_mode: SnapshotMode,
    /// `snapshot.delay.ms`, `streaming.delay.ms`.
    pub start_delays: StartDelays,
    /// `incremental.snapshot.watermarking.strategy=INSERT_DELETE`: a chunk's window closes by
    /// deleting its open watermark.
    pub watermarks_deleted: bool,
    pub locking_mode: LockingMode,
    /// `snapshot.lock.timeout.ms`.
    pub lock_timeout: Duration,
    /// `snapshot.max.threads`: connections reading snapshot chunks in parallel.
    pub snapshot_max_threads: usize,
    /// `snapshot.chunk.rows`: rows per snapshot chunk of an integer-keyed table.
    pub snapshot_chunk_rows: u64,
    /// `snapshot.tables.order.by.row.count`.
    pub table_order: headwater_connector_common::config::TableOrder,
    /// `incremental.snapshot.chunk.size`: rows per chunk of an incremental snapshot.
    pub incremental_chunk_size: usize,
    pub include_schema_changes: bool,
    pub mapping: MappingConfig,
    pub tombstones_on_delete: bool,
    pub skipped: SkippedOps,
    /// `snapshot.include.collection.list`: the captured tables the initial snapshot reads.
    pub snapshot_tables: Option<PatternList>,
    /// `skip.messages.without.change`.
    pub skip_unchanged: bool,
    /// `snapshot.select.statement.overrides`: (database.table, its SELECT).
    pub snapshot_overrides: Vec<(String, String)>,
    pub message_key_columns: Vec<(PatternList, Vec<String>)>,
    pub gtid_sources: Selector,
    pub max_batch_size: usize,
    pub max_queue_size: usize,
    /// Bytes of binlog events buffered ahead of poll (`max.queue.size.in.bytes`; 0 means
    /// [`DEFAULT_QUEUE_BYTES`]).
    pub max_queue_size_bytes: usize,
    pub poll_interval: Duration,
    pub keep_alive: bool,
    pub keep_alive_interval: Duration,
    pub heartbeat_interval: Duration,
    pub heartbeat_action_query: Option<String>,
    pub heartbeat_topic_prefix: String,
    /// `provide.transaction.metadata`: the transaction topic's suffix when on.
    pub transaction_topic: Option<String>,
    /// `column.truncate.*`, `column.mask.*`: Debezium's column mappers.
    pub column_mappers: ColumnMappers,
    /// `schema.name.adjustment.mode`, `field.name.adjustment.mode`.
    pub names: NameAdjustments,
}

const SNAPSHOT_MODES: &[&str] = &[
    "initial",
    "always",
    "initial_only",
    "no_data",
    "when_needed",
    "recovery",
    "configuration_based",
    "schema_only",
    "schema_only_recovery",
    "never",
    "custom",
];

fn regex_list_validator() -> Validator {
    Validator::custom(|v| match v {
        ConfigValue::String(s) => PatternList::parse(s).map(|_| ()),
        _ => Ok(()),
    })
}

fn key(name: &str, t: ConfigType) -> ConfigKey {
    ConfigKey::new(name, t)
}

fn not_supported_when_true(what: &'static str) -> Validator {
    Validator::custom(move |v| match v {
        ConfigValue::Boolean(true) => Err(format!("{what} is not supported yet")),
        _ => Ok(()),
    })
}

/// The connector's configuration keys (shared by the MySQL and MariaDB classes; the SSL mode
/// accepts both vocabularies).
pub fn config_def() -> ConfigDef {
    use ConfigType::*;
    let def = ConfigDef::new()
        .define(key("database.hostname", String).importance(Importance::High).validator(Validator::NonEmptyString).group("Connection", 1)
            .doc("Resolvable hostname or IP address of the MySQL/MariaDB server."))
        .define(key("database.port", Int).default_str("3306").validator(Validator::between(1.0, 65535.0)).group("Connection", 2)
            .doc("Port of the server."))
        .define(key("database.user", String).importance(Importance::High).validator(Validator::NonEmptyString).group("Connection", 3)
            .doc("User; needs SELECT, RELOAD (MySQL snapshot lock), REPLICATION SLAVE and REPLICATION CLIENT."))
        .define(key("database.password", Password).default_null().group("Connection", 4)
            .doc("Password of the user."))
        .define(key("database.server.id", Long).importance(Importance::High).validator(Validator::between(1.0, 4294967295.0)).group("Connection", 5)
            .doc("Numeric id of this binlog client; unique among all replicas and binlog clients of the server."))
        .define(key("database.server.id.offset", Long).default_str("10000").doc("Offset added to database.server.id by Debezium's signalling snapshot connections (unused here)."))
        .define(key("database.ssl.mode", String).default_null()
            .validator(Validator::custom(|v| {
                match SslMode::parse(&v.to_config_string()) {
                    Some(_) => Ok(()),
                    None => Err("String must be one of: disabled, preferred, required, verify_ca, verify_identity (MariaDB: disable, trust, verify-ca, verify-full)".into()),
                }
            }))
            .doc("TLS mode; MySQL default preferred, MariaDB default disable. preferred: TLS when the server has it; required (trust): TLS without certificate checks; verify_identity (verify-full): the certificate must chain to database.ssl.truststore and name the host. verify_ca (verify-ca) is not supported."))
        .define(key("database.ssl.truststore", String).default_null()
            .doc("PEM file of the CA certificates to trust (verify_identity); Java key stores are refused with the command that exports them."))
        .define(key("database.ssl.truststore.password", Password).default_null()
            .doc("Not needed: the trust store is a PEM file."))
        .define(key("database.ssl.keystore", String).default_null()
            .doc("PEM file with the client certificate and its (unencrypted) key, sent when the server asks for one."))
        .define(key("database.ssl.keystore.password", Password).default_null()
            .doc("Not needed: the key store is a PEM file with an unencrypted key."))
        .define(key("database.initial.statements", String).default_null().doc("Semicolon-separated SQL statements run on each new connection."))
        .define(key("connect.timeout.ms", Long).default_str("30000").validator(Validator::at_least(1.0)).doc("Timeout for establishing a connection."))
        .define(key("connect.keep.alive", Boolean).default_str("true").doc("Reconnect the binlog reader when its connection drops."))
        .define(key("connect.keep.alive.interval.ms", Long).default_str("60000").validator(Validator::at_least(1.0)).doc("Interval of the keep-alive check."))
        .define(key("topic.prefix", String).importance(Importance::High)
            .validator(Validator::custom(|v| {
                let s = v.to_config_string();
                if s.is_empty() {
                    Err("String must be non-empty".into())
                } else if !s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-') {
                    Err("Topic prefix may only contain ASCII letters, digits, '.', '_' and '-'".into())
                } else {
                    Ok(())
                }
            }))
            .doc("Prefix of every topic name, the schema-change topic and the offsets' source partition."))
        .define(key("database.include.list", String).default_null().validator(regex_list_validator()).doc("Databases to capture (regexes)."))
        .define(key("database.exclude.list", String).default_null().validator(regex_list_validator()).doc("Databases not to capture (regexes)."))
        .define(key("table.include.list", String).default_null().validator(regex_list_validator()).doc("Tables to capture, as db.table regexes."))
        .define(key("table.exclude.list", String).default_null().validator(regex_list_validator()).doc("Tables not to capture, as db.table regexes."))
        .define(key("column.include.list", String).default_null().validator(regex_list_validator()).doc("Columns to include, as db.table.column regexes."))
        .define(key("column.exclude.list", String).default_null().validator(regex_list_validator()).doc("Columns to exclude, as db.table.column regexes."))
        .define(key("table.ignore.builtin", Boolean).default_str("true").doc("Ignore the system databases (mysql, sys, information_schema, performance_schema)."))
        .define(key("snapshot.mode", String).default_str("initial")
            .validator(Validator::custom(|v| {
                let s = v.to_config_string().to_ascii_lowercase();
                match s.as_str() {
                    "custom" => Err("snapshot.mode=custom needs a Java Snapshotter class; use initial, always, initial_only, no_data, when_needed, recovery or configuration_based".to_owned()),
                    _ if SNAPSHOT_MODES.contains(&s.as_str()) => Ok(()),
                    _ => Err(format!("String must be one of (case insensitive): {}", SNAPSHOT_MODES[..7].join(", "))),
                }
            }))
            .doc("initial, always, initial_only, no_data, when_needed, recovery, configuration_based (the snapshot.mode.configuration.based.* keys say what happens; schema_only, never = no_data and schema_only_recovery = recovery are deprecated aliases)."))
        .define(key("snapshot.lock.timeout.ms", Long).default_str("10000").validator(Validator::at_least(0.0)).doc("How long the snapshot waits for FLUSH TABLES WITH READ LOCK (the server's lock_wait_timeout, in whole seconds, at least 1) before it fails; a lock request queued behind a long query blocks the server's writers meanwhile."))
        .define(key("snapshot.locking.mode", String).default_str("minimal")
            .validator(Validator::custom(|v| {
                let s = v.to_config_string().to_ascii_lowercase();
                match s.as_str() {
                    "minimal" | "extended" | "none" => Ok(()),
                    "minimal_percona" | "minimal_percona_no_table_locks" | "minimal_at_least_once" | "custom" =>
                        Err(format!("snapshot.locking.mode={s} is not supported yet; use minimal, extended or none")),
                    _ => Err("String must be one of (case insensitive): minimal, extended, none, minimal_percona, minimal_percona_no_table_locks, custom".into()),
                }
            }))
            .doc("minimal (MariaDB: no global lock at all, the binlog position comes from the consistent snapshot), extended, none."))
        .define(key("snapshot.max.threads", Int).default_str("2").validator(Validator::at_least(1.0)).doc("Connections reading snapshot chunks in parallel, all in consistent-snapshot transactions that see the same data (MariaDB: taken without a lock when their binlog positions agree, else under a brief global read lock when snapshot.locking.mode allows it, else one connection). Debezium's default is 1."))
        .define(key("snapshot.chunk.rows", Long).default_str("100000").validator(Validator::at_least(1.0)).doc("Headwater: rows per snapshot chunk (tables with a single-column integer primary key are split into key ranges and resume after a crash at the last committed key)."))
        .define(key("snapshot.fetch.size", Int).default_null().validator(Validator::at_least(1.0)).doc("Rows per fetch (results are streamed)."))
        .define(key("include.schema.changes", Boolean).default_str("true").doc("Emit schema-change events (DDL) on the topic.prefix topic."))
        .define(key("include.query", Boolean).default_str("false").validator(not_supported_when_true("include.query (source.query needs ANNOTATE_ROWS / ROWS_QUERY events)")).doc("Original SQL in source.query (not supported yet)."))
        .define(key("decimal.handling.mode", String).default_str("precise").validator(Validator::one_of_case_insensitive(&["precise", "double", "string"])).doc("How DECIMAL values are represented."))
        .define(key("time.precision.mode", String).default_str("adaptive_time_microseconds")
            .validator(Validator::custom(|v| {
                let s = v.to_config_string().to_ascii_lowercase();
                match s.as_str() {
                    "adaptive_time_microseconds" | "connect" => Ok(()),
                    "adaptive" | "isostring" | "microseconds" | "nanoseconds" => Err(format!("time.precision.mode {s} is not supported yet; use adaptive_time_microseconds or connect")),
                    _ => Err("String must be one of (case insensitive): adaptive_time_microseconds, connect".into()),
                }
            }))
            .doc("How temporal values are represented."))
        .define(key("bigint.unsigned.handling.mode", String).default_str("long").validator(Validator::one_of_case_insensitive(&["long", "precise"])).doc("BIGINT UNSIGNED as int64 (wrapping) or Decimal."))
        .define(key("binary.handling.mode", String).default_str("bytes").validator(Validator::one_of_case_insensitive(&["bytes", "base64", "base64-url-safe", "hex"])).doc("How binary values are represented."))
        .define(key("enable.time.adjuster", Boolean).default_str("true").doc("Two-digit years are adjusted (the server stores four-digit years; kept for compatibility)."))
        .define(key("gtid.source.includes", String).default_null().validator(regex_list_validator()).doc("GTID sources (server UUIDs / MariaDB domain-server) whose transactions are captured."))
        .define(key("gtid.source.excludes", String).default_null().validator(regex_list_validator()).doc("GTID sources whose transactions are skipped."))
        .define(key("gtid.source.filter.dml.events", Boolean).default_str("true").doc("Apply the GTID source filter to DML events."))
        .define(key("tombstones.on.delete", Boolean).default_str("true").doc("Emit a tombstone after each delete."))
        .define(key("skipped.operations", String).default_str("t")
            .validator(Validator::custom(|v| parse_skipped(&v.to_config_string()).map(|_| ())))
            .doc("Operations not emitted: comma list of c, u, d, t, or none."))
        .define(key("message.key.columns", String).default_null()
            .validator(Validator::custom(|v| parse_message_key_columns(&v.to_config_string()).map(|_| ())))
            .doc("Custom keys: db.table:col1,col2;db.t2:id"))
        .define(key("provide.transaction.metadata", Boolean).default_str("false").doc("BEGIN/END records on <topic.prefix>.<topic.transaction> and the transaction block in every change event."))
        .define(key("topic.transaction", String).default_str(headwater_connector_common::txmeta::DEFAULT_TOPIC_SUFFIX).doc("Suffix of the transaction metadata topic."))
        .define(key("heartbeat.interval.ms", Int).default_str("0").validator(Validator::at_least(0.0)).doc("Interval of heartbeat records on <topic.heartbeat.prefix>.<topic.prefix> carrying the current binlog position (0 = off), so the stored offset follows the binlog while captured tables are quiet."))
        .define(key("heartbeat.action.query", String).default_null().doc("SQL run on each heartbeat."))
        .define(key("topic.heartbeat.prefix", String).default_str(headwater_connector_common::heartbeat::DEFAULT_TOPIC_PREFIX).doc("Prefix of the heartbeat topic."))
        .define(key("event.deserialization.failure.handling.mode", String).default_str("fail")
            .validator(Validator::custom(|v| {
                let s = v.to_config_string().to_ascii_lowercase();
                match s.as_str() {
                    "fail" => Ok(()),
                    "warn" | "skip" | "ignore" => Err(format!("event.deserialization.failure.handling.mode={s} would drop events; only fail is supported")),
                    _ => Err("String must be one of (case insensitive): fail, warn, skip".into()),
                }
            }))
            .doc("What to do with an undecodable event: fail (only)."))
        .define(key("inconsistent.schema.handling.mode", String).default_str("fail").validator(Validator::one_of_case_insensitive(&["fail", "warn", "skip"])).doc("Kept for compatibility: table schemas come from each TABLE_MAP event, so they cannot be inconsistent."))
        .define(key("max.batch.size", Int).default_str("2048").validator(Validator::at_least(1.0)).doc("Maximum records per poll."))
        .define(key("max.queue.size", Int).default_str("8192").validator(Validator::at_least(1.0)).doc("Maximum binlog events buffered ahead of poll."))
        .define(key("max.queue.size.in.bytes", Long).default_str("0").validator(Validator::at_least(0.0)).doc("Maximum bytes of binlog events buffered ahead of poll; 0 (the default) means 8 MiB (Debezium treats 0 as unbounded, which lets a burst of large row events fill the heap)."))
        .define(key("poll.interval.ms", Long).default_str("500").validator(Validator::at_least(0.0)).doc("How long poll waits for new changes."))
        .define(key("schema.history.internal", String).default_null().doc("Accepted and unused: schemas come from TABLE_MAP metadata, no history topic is needed."))
        .define(key("schema.history.internal.kafka.topic", String).default_null().doc("Accepted and unused (see schema.history.internal)."))
        .define(key("schema.history.internal.kafka.bootstrap.servers", String).default_null().doc("Accepted and unused (see schema.history.internal)."));
    let def = def.define(key("signal.data.collection", String).default_null().validator(Validator::custom(|v| match v {
        ConfigValue::String(s) if !s.trim().is_empty() => parse_signal_table(s).map(|_| ()),
        _ => Ok(()),
    })).doc("The table (<database>.<table>, columns id, type, data) whose inserted rows are signals: execute-snapshot (incremental: in chunks while streaming; blocking: streaming pauses), stop-/pause-/resume-snapshot and log. It is captured like an included table but never snapshotted; incremental snapshots insert their watermark rows into it."));
    let def = def
        .define(key("snapshot.include.collection.list", String).default_null().validator(regex_list_validator()).doc("Regexes for database.table of the captured tables the initial snapshot copies (default: all); the others are only streamed. Signalled snapshots copy what the signal names."))
        .define(key("snapshot.select.statement.overrides", String).default_null().doc("Tables (database.table) whose initial snapshot runs the SELECT of snapshot.select.statement.overrides.<database>.<table> instead of reading the whole table; it must return the table's columns in table order (SELECT * ...)."))
        .define(key("skip.messages.without.change", Boolean).default_str("false").doc("Skip update events whose captured columns did not change (needs the old row image: the binlog's full row images have it)."));
    let def = headwater_connector_common::config::define_unbuilt_keys(def, COMMON_UNBUILT);
    let def = headwater_connector_common::config::define_unbuilt_keys(def, MYSQL_UNBUILT);
    let def = headwater_connector_common::config::define_unbuilt_keys(
        def,
        headwater_connector_common::config::NAME_ADJUSTMENT_AVRO,
    );
    let def = define_snapshot_mode_keys(def);
    let def = headwater_connector_common::config::define_errors_max_retries(def);
    let def = headwater_connector_common::notification::define_keys(def);
    let def = headwater_connector_common::context_headers::define_keys(def);
    let def = headwater_connector_common::config::TableOrder::define(def);
    headwater_connector_common::config::define_signal_keys(def)
}

/// Debezium MySQL/MariaDB keys that change what is emitted and that Headwater has only in
/// their default form (see [`Unbuilt`]).
const MYSQL_UNBUILT: &[Unbuilt] = &[
    Unbuilt {
        key: "read.only",
        accepted: &["false"],
        why: "read-only incremental snapshots are not built: incremental snapshots write their watermark rows to signal.data.collection, so the connector needs write access to it",
    },
    Unbuilt {
        key: "topic.naming.strategy",
        accepted: &["io.debezium.schema.DefaultTopicNamingStrategy"],
        why: "topics are named <topic.prefix>.<database>.<table>; rename them with the RegexRouter transform instead",
    },
    Unbuilt {
        key: "sourceinfo.struct.maker",
        accepted: &[
            "io.debezium.connector.mysql.MySqlSourceInfoStructMaker",
            "io.debezium.connector.mariadb.MariaDbSourceInfoStructMaker",
        ],
        why: "the source block is Debezium's default one",
    },
    Unbuilt {
        key: "snapshot.query.mode",
        accepted: &["select_all"],
        why: "snapshots read whole tables",
    },
    Unbuilt {
        key: "include.schema.comments",
        accepted: &["false"],
        why: "column comments are not read",
    },
];

/// `signal.data.collection`: `<database>.<table>` (Debezium's form for MySQL), matched exactly.
fn parse_signal_table(s: &str) -> Result<(String, String), String> {
    match s.trim().split_once('.') {
        Some((db, table)) if !db.is_empty() && !table.is_empty() && !table.contains('.') => {
            Ok((db.to_owned(), table.to_owned()))
        }
        _ => Err(format!("{s:?} must be <database>.<table>")),
    }
}

fn parse_message_key_columns(s: &str) -> Result<Vec<(PatternList, Vec<String>)>, String> {
    let mut out = Vec::new();
    for part in s.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (table, cols) = part
            .rsplit_once(':')
            .ok_or_else(|| format!("{part:?} must be <db.table>:<column>[,<column>...]"))?;
        let cols: Vec<String> = cols
            .split(',')
            .map(|c| c.trim().to_owned())
            .filter(|c| !c.is_empty())
            .collect();
        if cols.is_empty() {
            return Err(format!("{part:?} names no key column"));
        }
        out.push((PatternList::parse(table.trim())?, cols));
    }
    Ok(out)
}

/// The TLS settings of `props` (the mode's default depends on the connector class); `None`
/// when the mode is not a valid one.
fn tls_settings(props: &Properties) -> Option<TlsSettings> {
    let file = |k: &str| {
        props
            .get(k)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
    };
    let mode = match props.get("database.ssl.mode") {
        Some(m) => SslMode::parse(m)?,
        None => match Flavor::from_props(props) {
            Flavor::MySql => SslMode::Preferred,
            Flavor::MariaDb => SslMode::Disabled,
        },
    };
    Some(TlsSettings {
        mode,
        truststore: file("database.ssl.truststore"),
        keystore: file("database.ssl.keystore"),
    })
}

/// Validates a configuration: every key's own checks plus the cross-field rules.
pub fn validate(props: &Properties) -> ConfigValidation {
    let mut v = config_def().validate(props);
    column_mappers::validate(&mut v, props);
    validate_configuration_based(&mut v, props);
    headwater_connector_common::notification::validate(&mut v, props);
    if let Err(e) = headwater_connector_common::config::parse_snapshot_overrides(props) {
        v.add_error("snapshot.select.statement.overrides", e);
    }
    if let Some(tls) = tls_settings(props) {
        if let Err(message) = tls.check() {
            let field = ["database.ssl.truststore", "database.ssl.keystore"]
                .into_iter()
                .find(|k| message.starts_with(k))
                .unwrap_or("database.ssl.mode");
            v.add_error(field, message);
        }
    }
    pair_check(
        &mut v,
        props,
        "database.include.list",
        "database.exclude.list",
    );
    pair_check(&mut v, props, "table.include.list", "table.exclude.list");
    pair_check(&mut v, props, "column.include.list", "column.exclude.list");
    pair_check(
        &mut v,
        props,
        "gtid.source.includes",
        "gtid.source.excludes",
    );
    let num = |k: &str, d: i64| {
        props
            .get(k)
            .and_then(|s| s.trim().parse::<i64>().ok())
            .unwrap_or(d)
    };
    if num("max.queue.size", 8192) <= num("max.batch.size", 2048) {
        v.add_error(
            "max.queue.size",
            "Must be larger than the maximum batch size (max.batch.size)",
        );
    }
    v
}

fn selector(p: &headwater_api::config::ParsedConfig, include: &str, exclude: &str) -> Selector {
    let list = |k: &str| {
        p.get_string(k)
            .and_then(|s| PatternList::parse(s).ok())
            .filter(|l| !l.is_empty())
    };
    match (list(include), list(exclude)) {
        (Some(i), _) => Selector::Include(i),
        (None, Some(e)) => Selector::Exclude(e),
        (None, None) => Selector::All,
    }
}

impl MySqlConfig {
    /// Parses a configuration that [`validate`] accepts; otherwise returns the validation.
    pub fn parse(props: &Properties) -> Result<MySqlConfig, ConfigValidation> {
        let validation = validate(props);
        if validation.error_count() > 0 {
            return Err(validation);
        }
        let p = config_def().parse(props)?;
        let s = |k: &str| p.get_string(k).unwrap_or_default().to_owned();
        let lower = |k: &str| s(k).to_ascii_lowercase();
        let long = |k: &str| p.get_long(k).unwrap_or(0);
        let ms = |k: &str| Duration::from_millis(u64::try_from(long(k)).unwrap_or(0));
        let source_signals = channel_enabled(props, "source");
        let snapshot_mode = match lower("snapshot.mode").as_str() {
            "always" => SnapshotMode::Always,
            "initial_only" => SnapshotMode::InitialOnly,
            "no_data" => SnapshotMode::NoData,
            "schema_only" | "never" => {
                tracing::warn!("snapshot.mode={} is deprecated (removed in Debezium 3.3); treating it as no_data", lower("snapshot.mode"));
                SnapshotMode::NoData
            }
            "recovery" | "schema_only_recovery" => SnapshotMode::Recovery,
            "when_needed" => SnapshotMode::WhenNeeded,
            "configuration_based" => {
                SnapshotMode::ConfigurationBased(ConfigurationBased::from_props(props))
            }
            _ => SnapshotMode::Initial,
        };
        let start_delays = StartDelays::from_props(props);
        let locking_mode = match lower("snapshot.locking.mode").as_str() {
            "extended" => LockingMode::Extended,
            "none" => LockingMode::None,
            _ => LockingMode::Minimal,
        };
        let mapping = MappingConfig {
            decimal: match lower("decimal.handling.mode").as_str() {
                "double" => DecimalMode::Double,
                "string" => DecimalMode::String,
                _ => DecimalMode::Precise,
            },
            time_precision: match lower("time.precision.mode").as_str() {
                "connect" => TimePrecisionMode::Connect,
                _ => TimePrecisionMode::AdaptiveTimeMicroseconds,
            },
            bigint: match lower("bigint.unsigned.handling.mode").as_str() {
                "precise" => BigintMode::Precise,
                _ => BigintMode::Long,
            },
            binary: match lower("binary.handling.mode").as_str() {
                "base64" => BinaryMode::Base64,
                "base64-url-safe" => BinaryMode::Base64UrlSafe,
                "hex" => BinaryMode::Hex,
                _ => BinaryMode::Bytes,
            },
        };
        let initial_statements = p
            .get_string("database.initial.statements")
            .map(|s| {
                s.split(';')
                    .map(str::trim)
                    .filter(|x| !x.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        Ok(MySqlConfig {
            flavor: Flavor::from_props(props),
            tls: tls_settings(props).unwrap_or_else(TlsSettings::disabled),
            hostname: s("database.hostname"),
            port: u16::try_from(long("database.port")).unwrap_or(3306),
            user: s("database.user"),
            password: p.get_string("database.password").map(str::to_owned),
            server_id: u32::try_from(long("database.server.id")).unwrap_or(1),
            connect_timeout: ms("connect.timeout.ms"),
            initial_statements,
            topic_prefix: s("topic.prefix"),
            filters: Filters {
                databases: selector(&p, "database.include.list", "database.exclude.list"),
                tables: selector(&p, "table.include.list", "table.exclude.list"),
                columns: selector(&p, "column.include.list", "column.exclude.list"),
                ignore_builtin: p.get_bool("table.ignore.builtin").unwrap_or(true),
                // Rows of the table are signals only when the source channel is enabled
                // (Debezium's rule); with the file channel alone it holds the watermarks.
                signal_table: p
                    .get_string("signal.data.collection")
                    .filter(|t| !t.trim().is_empty())
                    .and_then(|t| parse_signal_table(t).ok())
                    .filter(|_| source_signals || channel_enabled(props, "file")),
                source_signals,
            },
            snapshot_mode,
            start_delays,
            watermarks_deleted: headwater_connector_common::config::watermarks_deleted(props),
            locking_mode,
            lock_timeout: ms("snapshot.lock.timeout.ms"),
            snapshot_max_threads: usize::try_from(long("snapshot.max.threads"))
                .unwrap_or(1)
                .max(1),
            snapshot_chunk_rows: u64::try_from(long("snapshot.chunk.rows"))
                .unwrap_or(100_000)
                .max(1),
            table_order: headwater_connector_common::config::TableOrder::from_props(props),
            incremental_chunk_size: p
                .get_long("incremental.snapshot.chunk.size")
                .unwrap_or(1024)
                .clamp(1, 1 << 20) as usize,
            include_schema_changes: p.get_bool("include.schema.changes").unwrap_or(true),
            mapping,
            tombstones_on_delete: p.get_bool("tombstones.on.delete").unwrap_or(true),
            skipped: parse_skipped(&s("skipped.operations")).unwrap_or_default(),
            snapshot_tables: p
                .get_string("snapshot.include.collection.list")
                .filter(|l| !l.trim().is_empty())
                .and_then(|l| PatternList::parse(l).ok()),
            skip_unchanged: p.get_bool("skip.messages.without.change").unwrap_or(false),
            snapshot_overrides: headwater_connector_common::config::parse_snapshot_overrides(props)
                .unwrap_or_default(),
            message_key_columns: p
                .get_string("message.key.columns")
                .map(|s| parse_message_key_columns(s).unwrap_or_default())
                .unwrap_or_default(),
            gtid_sources: selector(&p, "gtid.source.includes", "gtid.source.excludes"),
            max_batch_size: usize::try_from(long("max.batch.size")).unwrap_or(2048),
            max_queue_size: usize::try_from(long("max.queue.size")).unwrap_or(8192),
            max_queue_size_bytes: match usize::try_from(long("max.queue.size.in.bytes")) {
                Ok(0) | Err(_) => DEFAULT_QUEUE_BYTES,
                Ok(n) => n.min(u32::MAX as usize),
            },
            poll_interval: ms("poll.interval.ms"),
            keep_alive: p.get_bool("connect.keep.alive").unwrap_or(true),
            keep_alive_interval: ms("connect.keep.alive.interval.ms"),
            heartbeat_interval: ms("heartbeat.interval.ms"),
            heartbeat_action_query: p.get_string("heartbeat.action.query").map(str::to_owned),
            heartbeat_topic_prefix: s("topic.heartbeat.prefix"),
            transaction_topic: p
                .get_bool("provide.transaction.metadata")
                .unwrap_or(false)
                .then(|| s("topic.transaction")),
            column_mappers: ColumnMappers::parse(props),
            names: NameAdjustments::from_props(props),
        })
    }

    /// The key columns `message.key.columns` sets for a table, if any.
    pub fn key_columns_for(&self, db: &str, table: &str) -> Option<&[String]> {
        let name = format!("{db}.{table}");
        self.message_key_columns
            .iter()
            .find(|(p, _)| p.matches(&name))
            .map(|(_, c)| c.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> Properties {
        let mut p: Properties = [
            (
                "connector.class",
                "io.debezium.connector.mysql.MySqlConnector",
            ),
            ("database.hostname", "127.0.0.1"),
            ("database.user", "root"),
            ("database.server.id", "5400"),
            ("topic.prefix", "cdc"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        for (k, v) in pairs {
            p.insert((*k).to_owned(), (*v).to_owned());
        }
        p
    }

    #[test]
    fn configuration_based_snapshot_mode_reads_its_keys() {
        let c = MySqlConfig::parse(&props(&[
            ("snapshot.mode", "Configuration_Based"),
            ("snapshot.mode.configuration.based.start.stream", "true"),
            (
                "snapshot.mode.configuration.based.snapshot.on.data.error",
                "true",
            ),
        ]))
        .unwrap();
        let policy = c.snapshot_mode.policy();
        assert!(policy.streams && !policy.without_offset && !policy.every_start);
        assert_eq!(
            policy.lost_position,
            headwater_connector_common::snapshot_policy::LostPosition::StreamFromNow
        );
        let Err(nothing) = MySqlConfig::parse(&props(&[("snapshot.mode", "configuration_based")]))
        else {
            panic!("a configuration that captures nothing was accepted");
        };
        assert!(nothing.error_message().contains("capture nothing"));
        let Err(custom) = MySqlConfig::parse(&props(&[("snapshot.mode", "custom")])) else {
            panic!("snapshot.mode=custom was accepted");
        };
        assert!(custom.error_message().contains("Java"));
    }

    #[test]
    fn defaults_match_debezium() {
        let c = MySqlConfig::parse(&props(&[])).unwrap();
        assert_eq!(c.port, 3306);
        assert_eq!(c.server_id, 5400);
        assert_eq!(c.flavor, Flavor::MySql);
        assert_eq!(c.snapshot_mode, SnapshotMode::Initial);
        assert_eq!(c.locking_mode, LockingMode::Minimal);
        assert!(c.include_schema_changes && c.tombstones_on_delete && c.keep_alive);
        assert!(c.skipped.truncate && !c.skipped.create);
        assert_eq!(c.mapping, MappingConfig::default());
        assert_eq!(c.max_batch_size, 2048);
        assert_eq!(
            c.max_queue_size_bytes, DEFAULT_QUEUE_BYTES,
            "0 means the built-in byte bound"
        );
        assert_eq!(c.poll_interval, Duration::from_millis(500));
        let m = MySqlConfig::parse(&props(&[(
            "connector.class",
            "io.debezium.connector.mariadb.MariaDbConnector",
        )]))
        .unwrap();
        assert_eq!(m.flavor, Flavor::MariaDb);
        assert_eq!(
            m.flavor.source_schema_name(),
            "io.debezium.connector.mariadb.Source"
        );
    }

    #[test]
    fn every_bad_field_is_reported() {
        let mut p = props(&[
            ("snapshot.mode", "custom"),
            ("snapshot.locking.mode", "minimal_percona"),
            ("decimal.handling.mode", "exact"),
            ("database.ssl.mode", "verify_ca"),
            ("table.include.list", "a.b"),
            ("table.exclude.list", "a.c"),
            ("skipped.operations", "x"),
            ("heartbeat.interval.ms", "-1"),
            ("event.deserialization.failure.handling.mode", "skip"),
            ("snapshot.select.statement.overrides", "a.b"),
            ("snapshot.query.mode", "custom"),
            ("include.schema.comments", "true"),
            ("column.mask.with.x.chars", "a.b.c"),
        ]);
        p.remove("database.server.id");
        let v = validate(&p);
        let errs = v.errors_by_field();
        for k in [
            "database.server.id",
            "snapshot.mode",
            "snapshot.locking.mode",
            "decimal.handling.mode",
            "database.ssl.mode",
            "table.exclude.list",
            "skipped.operations",
            "snapshot.select.statement.overrides",
            "snapshot.query.mode",
            "include.schema.comments",
            "column.mask.with.x.chars",
            "heartbeat.interval.ms",
            "event.deserialization.failure.handling.mode",
        ] {
            assert!(errs.contains_key(k), "{k}: {errs:?}");
        }
        assert!(MySqlConfig::parse(&p).is_err());
        let c = MySqlConfig::parse(&props(&[
            ("message.key.columns", "public.t:a,b"),
            ("snapshot.mode", "schema_only_recovery"),
            ("bigint.unsigned.handling.mode", "precise"),
        ]))
        .unwrap();
        assert_eq!(
            c.key_columns_for("public", "t"),
            Some(&["a".to_owned(), "b".to_owned()][..])
        );
        assert_eq!(c.snapshot_mode, SnapshotMode::Recovery);
        assert_eq!(c.mapping.bigint, BigintMode::Precise);
    }

    #[test]
    fn signal_table_is_captured_and_must_be_database_dot_table() {
        let c = MySqlConfig::parse(&props(&[
            ("table.include.list", "shop.orders"),
            ("signal.data.collection", "ops.debezium_signal"),
        ]))
        .unwrap();
        assert!(c.filters.table_included("ops", "debezium_signal"));
        assert!(!c.filters.table_included("ops", "other"));
        let off = MySqlConfig::parse(&props(&[
            ("signal.data.collection", "ops.debezium_signal"),
            ("signal.enabled.channels", ""),
        ]))
        .unwrap();
        assert_eq!(off.filters.signal_table, None, "the source channel is off");
        let v = validate(&props(&[("signal.data.collection", "debezium_signal")]));
        let errs = v.errors_by_field();
        assert!(errs["signal.data.collection"][0].contains("<database>.<table>"));
    }
}
