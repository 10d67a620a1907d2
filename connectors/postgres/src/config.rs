//! The connector's configuration: Debezium PostgreSQL connector keys with Debezium's defaults
//! (see docs/connectors/postgres.md for every key and where we differ), validated per field with
//! [`ConfigDef`], plus cross-field checks, parsed into [`PostgresConfig`].
//!
//! Invariants: [`validate`] reports every problem (never stops at the first one) and never
//! fails; [`PostgresConfig::parse`] succeeds only for a configuration [`validate`] accepts.
//! Values that name features this build does not have yet are rejected with a message that
//! says so, rather than silently ignored.

use std::time::Duration;

use headwater_api::config::{ConfigDef, ConfigKey, ConfigType, ConfigValue, Importance, Validator};
use headwater_api::{ConfigValidation, Properties};
use headwater_connector_common::column_mappers::{self, ColumnMappers};
use headwater_connector_common::config::{channel_enabled, pair_check, Unbuilt, COMMON_UNBUILT};
pub use headwater_connector_common::config::{parse_skipped, SkippedOps};
use headwater_connector_common::name_adjust::NameAdjustments;

use crate::filters::{Filters, PatternList, Selector};
use headwater_connector_common::snapshot_policy::{
    define_snapshot_mode_keys, validate_configuration_based, ConfigurationBased, StartDelays,
};

use crate::replication::SslMode;
use crate::tls::TlsSettings;
use crate::types::{
    BinaryMode, DecimalMode, HstoreMode, IntervalMode, MappingConfig, TimePrecisionMode,
};

/// `snapshot.mode` (shared by the sources).
pub use headwater_connector_common::snapshot_policy::SnapshotMode;

/// `publication.autocreate.mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PublicationAutocreate {
    Disabled,
    AllTables,
    Filtered,
    NoTables,
}

/// `lsn.flush.mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LsnFlushMode {
    /// Confirm what the engine committed (and, when nothing is outstanding, keepalive positions).
    Connector,
    /// Same as `connector` here (keepalive positions are confirmed in both).
    ConnectorAndDriver,
    /// Never confirm: the user advances the slot.
    Manual,
}

/// A parsed, validated configuration.
#[derive(Clone, Debug)]
pub struct PostgresConfig {
    pub hostname: String,
    pub port: u16,
    pub user: String,
    pub password: Option<String>,
    pub dbname: String,
    pub tls: TlsSettings,
    pub connect_timeout: Duration,
    pub initial_statements: Vec<String>,
    pub topic_prefix: String,
    pub filters: Filters,
    pub slot_name: String,
    pub slot_drop_on_stop: bool,
    pub slot_stream_params: Vec<(String, String)>,
    /// Ask for streamed in-progress transactions (PostgreSQL 14+).
    pub transaction_streaming: bool,
    /// Where streamed transactions are buffered.
    pub transaction_spill_dir: std::path::PathBuf,
    pub slot_max_retries: u32,
    pub slot_retry_delay: Duration,
    pub publication_name: String,
    pub publication_autocreate: PublicationAutocreate,
    /// `publish.via.partition.root`: partitioned tables are captured as their root table.
    pub publish_via_root: bool,
    pub snapshot_mode: SnapshotMode,
    /// `snapshot.delay.ms`, `streaming.delay.ms`.
    pub start_delays: StartDelays,
    /// `incremental.snapshot.watermarking.strategy=INSERT_DELETE`: a chunk's window closes by
    /// deleting its open watermark.
    pub watermarks_deleted: bool,
    pub snapshot_fetch_size: usize,
    pub snapshot_max_threads: usize,
    pub snapshot_chunk_rows: u64,
    /// `snapshot.tables.order.by.row.count`.
    pub table_order: headwater_connector_common::config::TableOrder,
    /// `snapshot.locking.mode=shared`: ACCESS SHARE locks on the tables for the snapshot.
    pub snapshot_lock_shared: bool,
    /// `snapshot.lock.timeout.ms`.
    pub snapshot_lock_timeout: Duration,
    /// `incremental.snapshot.chunk.size`: rows per chunk of an incremental snapshot.
    pub incremental_chunk_size: usize,
    pub mapping: MappingConfig,
    pub unavailable_placeholder: String,
    pub tombstones_on_delete: bool,
    pub skipped: SkippedOps,
    /// `snapshot.include.collection.list`: the captured tables the initial snapshot copies.
    pub snapshot_tables: Option<PatternList>,
    /// `skip.messages.without.change`.
    pub skip_unchanged: bool,
    /// `snapshot.select.statement.overrides`: (schema.table, its SELECT).
    pub snapshot_overrides: Vec<(String, String)>,
    /// `message.key.columns`: (table pattern, key columns).
    pub message_key_columns: Vec<(PatternList, Vec<String>)>,
    pub max_batch_size: usize,
    pub max_queue_size: usize,
    pub max_queue_size_bytes: usize,
    pub poll_interval: Duration,
    pub status_update_interval: Duration,
    pub heartbeat_interval: Duration,
    pub heartbeat_action_query: Option<String>,
    pub heartbeat_topic_prefix: String,
    /// `provide.transaction.metadata`: the transaction topic's suffix when on.
    pub transaction_topic: Option<String>,
    pub lsn_flush_mode: LsnFlushMode,
    pub message_prefixes: Selector,
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
    "configuration_based",
    "never",
    "schema_only",
    "custom",
];

/// Slot names may only hold lower-case letters, digits and `_` (PostgreSQL's rule), at most 63.
fn valid_slot_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

fn regex_list_validator() -> Validator {
    Validator::custom(|v| match v {
        ConfigValue::String(s) => PatternList::parse(s).map(|_| ()),
        _ => Ok(()),
    })
}

fn key(name: &str, t: ConfigType) -> ConfigKey {
    ConfigKey::new(name, t)
}

/// The connector's configuration keys.
pub fn config_def() -> ConfigDef {
    use ConfigType::*;
    let def = ConfigDef::new()
        .define(key("database.hostname", String).importance(Importance::High).validator(Validator::NonEmptyString).group("Connection", 1)
            .doc("Resolvable hostname or IP address of the PostgreSQL server."))
        .define(key("database.port", Int).default_str("5432").validator(Validator::between(1.0, 65535.0)).group("Connection", 2)
            .doc("Port of the PostgreSQL server."))
        .define(key("database.user", String).importance(Importance::High).validator(Validator::NonEmptyString).group("Connection", 3)
            .doc("Name of the PostgreSQL user; needs the REPLICATION attribute (or superuser) and SELECT on captured tables."))
        .define(key("database.password", Password).default_null().group("Connection", 4)
            .doc("Password of the PostgreSQL user (cleartext, md5 and SCRAM-SHA-256 authentication)."))
        .define(key("database.dbname", String).importance(Importance::High).validator(Validator::NonEmptyString).group("Connection", 5)
            .doc("Name of the database to capture."))
        .define(key("database.sslmode", String).default_str("prefer")
            .validator(Validator::custom(|v| {
                let s = v.to_config_string();
                match SslMode::parse(&s) {
                    None => Err("String must be one of: disable, allow, prefer, require, verify-ca, verify-full".into()),
                    Some(_) => Ok(()),
                }
            }))
            .doc("disable: plain TCP; allow: plain TCP, TLS when the server refuses it; prefer: TLS when the server offers it; require: TLS without certificate checks (with database.sslrootcert: as verify-ca); verify-ca: the certificate must chain to database.sslrootcert; verify-full: and name database.hostname."))
        .define(key("database.sslrootcert", String).default_null()
            .doc("PEM file of the CA certificates to trust (verify-ca, verify-full; default ~/.postgresql/root.crt)."))
        .define(key("database.sslcert", String).default_null()
            .doc("PEM file of the client certificate, sent when the server asks for one."))
        .define(key("database.sslkey", String).default_null()
            .doc("The client certificate's key: PEM, or PKCS#8 DER as pgjdbc takes it; not encrypted."))
        .define(key("database.sslpassword", Password).default_null()
            .validator(Validator::custom(|v| {
                if v.to_config_string().is_empty() {
                    Ok(())
                } else {
                    Err("encrypted client keys are not supported; give database.sslkey an unencrypted key".into())
                }
            }))
            .doc("Not supported: the client key must not be encrypted."))
        .define(key("database.sslfactory", String).default_null()
            .doc("pgjdbc's SSL socket factory class; ignored (TLS is set by database.sslmode and the files)."))
        .define(key("database.initial.statements", String).default_null()
            .doc("Semicolon-separated SQL statements run on each new (non-replication) connection."))
        .define(key("connect.timeout.ms", Long).default_str("30000").validator(Validator::at_least(1.0))
            .doc("Timeout for establishing a connection."))
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
            .doc("Prefix of every topic name and the source partition of the offsets."))
        .define(key("schema.include.list", String).default_null().validator(regex_list_validator()).doc("Schemas to capture (regexes)."))
        .define(key("schema.exclude.list", String).default_null().validator(regex_list_validator()).doc("Schemas not to capture (regexes)."))
        .define(key("table.include.list", String).default_null().validator(regex_list_validator()).doc("Tables to capture, as schema.table regexes."))
        .define(key("table.exclude.list", String).default_null().validator(regex_list_validator()).doc("Tables not to capture, as schema.table regexes."))
        .define(key("column.include.list", String).default_null().validator(regex_list_validator()).doc("Columns to include, as schema.table.column regexes."))
        .define(key("column.exclude.list", String).default_null().validator(regex_list_validator()).doc("Columns to exclude, as schema.table.column regexes."))
        .define(key("table.ignore.builtin", Boolean).default_str("true").doc("Ignore system schemas."))
        .define(key("plugin.name", String).default_str("pgoutput")
            .validator(Validator::custom(|v| {
                let s = v.to_config_string();
                if s.eq_ignore_ascii_case("pgoutput") {
                    Ok(())
                } else {
                    Err(format!("plugin {s} is not supported: Headwater reads PostgreSQL's built-in pgoutput plugin only ({s} needs a server extension and a different decoder); set plugin.name=pgoutput or remove the key"))
                }
            }))
            .doc("Logical decoding plugin; only pgoutput (the default here, unlike Debezium's decoderbufs)."))
        .define(key("slot.name", String).default_str("debezium")
            .validator(Validator::custom(|v| {
                let s = v.to_config_string();
                if valid_slot_name(&s) { Ok(()) } else { Err("Slot names may only contain lower case letters, numbers, and the underscore character, at most 63 of them".into()) }
            }))
            .doc("Name of the logical replication slot (cluster-wide)."))
        .define(key("slot.drop.on.stop", Boolean).default_str("false").doc("Drop the slot when the task stops."))
        .define(key("slot.stream.params", String).default_null().doc("Semicolon-separated key=value options passed to START_REPLICATION."))
        .define(key("transaction.streaming", Boolean).default_str("true").doc("Headwater: on PostgreSQL 14+, receive transactions larger than the server's logical_decoding_work_mem while they run (pgoutput protocol 2, streaming 'on') and buffer them in transaction.spill.dir until they commit, instead of the server spilling them into the primary's pg_replslot directory."))
        .define(key("transaction.spill.dir", String).default_null().doc("Headwater: directory for the files that buffer streamed in-progress transactions (unlinked at creation; default: the system temporary directory)."))
        .define(key("slot.max.retries", Int).default_str("6").validator(Validator::at_least(0.0)).doc("How often to retry when the slot is busy."))
        .define(key("slot.retry.delay.ms", Long).default_str("10000").validator(Validator::at_least(0.0)).doc("Delay between slot retries."))
        .define(key("publication.name", String).default_str("dbz_publication")
            .validator(Validator::custom(|v| {
                let s = v.to_config_string();
                if !s.is_empty() && s.len() <= 63 && !s.contains(['"', '\'', '\0']) { Ok(()) } else { Err("Publication names must be 1-63 characters without quotes".into()) }
            }))
            .doc("Name of the publication pgoutput streams."))
        .define(key("publication.autocreate.mode", String).default_str("all_tables")
            .validator(Validator::one_of_case_insensitive(&["disabled", "all_tables", "filtered", "no_tables"]))
            .doc("Whether and how the publication is created."))
        .define(key("publish.via.partition.root", Boolean).default_str("false")
            .doc("Capture partitioned tables as their root: the publication is created with publish_via_partition_root, changes of every partition go out under the root's topic, and the root (not its partitions) is snapshotted."))
        .define(key("snapshot.mode", String).default_str("initial")
            .validator(Validator::custom(|v| {
                let s = v.to_config_string().to_ascii_lowercase();
                match s.as_str() {
                    "custom" => Err("snapshot.mode=custom needs a Java Snapshotter class; use initial, always, initial_only, no_data, when_needed or configuration_based".to_owned()),
                    _ if SNAPSHOT_MODES.contains(&s.as_str()) => Ok(()),
                    _ => Err(format!("String must be one of (case insensitive): {}", SNAPSHOT_MODES[..8].join(", "))),
                }
            }))
            .doc("initial, always, initial_only, no_data, when_needed, configuration_based (the snapshot.mode.configuration.based.* keys say what happens; never and schema_only are deprecated aliases of no_data)."))
        .define(key("snapshot.fetch.size", Int).default_str("10240").validator(Validator::at_least(1.0)).doc("Rows read per poll during the snapshot."))
        .define(key("snapshot.max.threads", Int).default_str("2").validator(Validator::at_least(1.0)).doc("Connections reading snapshot chunks in parallel, each in a transaction that imported the same snapshot (Debezium's default is 1)."))
        .define(key("snapshot.chunk.rows", Long).default_str("100000").validator(Validator::at_least(1.0)).doc("Headwater: rows per snapshot chunk (a table is split by ranges of its integer primary key, else by ctid page ranges)."))
        .define(key("decimal.handling.mode", String).default_str("precise").validator(Validator::one_of_case_insensitive(&["precise", "double", "string"])).doc("How numeric values are represented."))
        .define(key("time.precision.mode", String).default_str("adaptive")
            .validator(Validator::custom(|v| {
                let s = v.to_config_string().to_ascii_lowercase();
                match s.as_str() {
                    "adaptive" | "adaptive_time_microseconds" | "connect" => Ok(()),
                    "isostring" | "microseconds" | "nanoseconds" | "structured" => Err(format!("time.precision.mode {s} is not supported yet; use adaptive, adaptive_time_microseconds or connect")),
                    _ => Err("String must be one of (case insensitive): adaptive, adaptive_time_microseconds, connect".into()),
                }
            }))
            .doc("How temporal values are represented."))
        .define(key("binary.handling.mode", String).default_str("bytes").validator(Validator::one_of_case_insensitive(&["bytes", "base64", "base64-url-safe", "hex"])).doc("How bytea values are represented."))
        .define(key("interval.handling.mode", String).default_str("numeric").validator(Validator::one_of_case_insensitive(&["numeric", "string"])).doc("How interval values are represented."))
        .define(key("hstore.handling.mode", String).default_str("json").validator(Validator::one_of_case_insensitive(&["json", "map"])).doc("How hstore values are represented."))
        .define(key("money.fraction.digits", Short).default_str("2").validator(Validator::between(0.0, 30.0)).doc("Fraction digits of money values."))
        .define(key("include.unknown.datatypes", Boolean).default_str("false").doc("Include columns of unknown types (as their raw binary value)."))
        .define(key("unavailable.value.placeholder", String).default_str("__debezium_unavailable_value").doc("Placeholder for unchanged TOASTed values."))
        .define(key("tombstones.on.delete", Boolean).default_str("true").doc("Emit a tombstone after each delete."))
        .define(key("skipped.operations", String).default_str("t")
            .validator(Validator::custom(|v| parse_skipped(&v.to_config_string()).map(|_| ())))
            .doc("Operations not emitted: comma list of c, u, d, t, or none."))
        .define(key("message.key.columns", String).default_null()
            .validator(Validator::custom(|v| parse_message_key_columns(&v.to_config_string()).map(|_| ())))
            .doc("Custom keys: schema.table:col1,col2;schema.t2:id"))
        .define(key("provide.transaction.metadata", Boolean).default_str("false").doc("BEGIN/END records on <topic.prefix>.<topic.transaction> and the transaction block in every change event."))
        .define(key("topic.transaction", String).default_str(headwater_connector_common::txmeta::DEFAULT_TOPIC_SUFFIX).doc("Suffix of the transaction metadata topic."))
        .define(key("max.batch.size", Int).default_str("2048").validator(Validator::at_least(1.0)).doc("Maximum records per poll."))
        .define(key("max.queue.size", Int).default_str("8192").validator(Validator::at_least(1.0)).doc("Maximum replication messages buffered ahead of poll."))
        .define(key("max.queue.size.in.bytes", Long).default_str("0").validator(Validator::at_least(0.0)).doc("Maximum bytes buffered ahead of poll (0 = count-bounded only)."))
        .define(key("poll.interval.ms", Long).default_str("500").validator(Validator::at_least(0.0)).doc("How long poll waits for new changes."))
        .define(key("status.update.interval.ms", Int).default_str("10000").validator(Validator::at_least(1.0)).doc("Interval of standby status updates to the server."))
        .define(key("heartbeat.interval.ms", Int).default_str("0").validator(Validator::at_least(0.0)).doc("Interval of heartbeat records on <topic.heartbeat.prefix>.<topic.prefix> carrying the current position, and of heartbeat.action.query (0 = off)."))
        .define(key("topic.heartbeat.prefix", String).default_str(headwater_connector_common::heartbeat::DEFAULT_TOPIC_PREFIX).doc("Prefix of the heartbeat topic."))
        .define(key("heartbeat.action.query", String).default_null().doc("SQL run on each heartbeat, e.g. to keep an idle slot advancing."))
        .define(key("lsn.flush.mode", String).default_str("connector").validator(Validator::one_of_case_insensitive(&["connector", "connector_and_driver", "manual"])).doc("Who confirms the slot position."))
        .define(key("flush.lsn.source", Boolean).default_null().doc("Deprecated: true = lsn.flush.mode connector, false = manual."))
        .define(key("message.prefix.include.list", String).default_null().validator(regex_list_validator()).doc("Logical decoding message prefixes to include."))
        .define(key("message.prefix.exclude.list", String).default_null().validator(regex_list_validator()).doc("Logical decoding message prefixes to exclude."));
    let def = def.define(key("signal.data.collection", String).default_null().validator(Validator::custom(|v| match v {
        ConfigValue::String(s) if !s.trim().is_empty() => parse_signal_table(s).map(|_| ()),
        _ => Ok(()),
    })).doc("The table (<schema>.<table>, columns id, type, data) whose inserted rows are signals: execute-snapshot (incremental: in chunks while streaming; blocking: streaming pauses), stop-/pause-/resume-snapshot and log. It is captured like an included table but never snapshotted; incremental snapshots insert their watermark rows into it."));
    let def = def
        .define(key("snapshot.include.collection.list", String).default_null().validator(regex_list_validator()).doc("Regexes for schema.table of the captured tables the initial snapshot copies (default: all); the others are only streamed. Signalled snapshots copy what the signal names."))
        .define(key("snapshot.select.statement.overrides", String).default_null().doc("Tables (schema.table) whose initial snapshot runs the SELECT of snapshot.select.statement.overrides.<schema>.<table> instead of reading the whole table; it must return the table's captured columns."))
        .define(key("skip.messages.without.change", Boolean).default_str("false").doc("Skip update events whose captured columns did not change (needs the old row image: REPLICA IDENTITY FULL)."));
    let def = headwater_connector_common::config::define_unbuilt_keys(def, COMMON_UNBUILT);
    let def = headwater_connector_common::config::define_unbuilt_keys(def, POSTGRES_UNBUILT);
    let def = headwater_connector_common::config::define_unbuilt_keys(
        def,
        headwater_connector_common::config::NAME_ADJUSTMENT_AVRO,
    );
    let def = define_snapshot_mode_keys(def);
    let def = headwater_connector_common::config::define_errors_max_retries(def);
    let def = headwater_connector_common::notification::define_keys(def);
    let def = headwater_connector_common::context_headers::define_keys(def);
    let def = headwater_connector_common::config::TableOrder::define(def);
    let def = def
        .define(key("snapshot.locking.mode", String).default_str("none").validator(Validator::custom(|v| {
            let s = v.to_config_string();
            match s.trim().to_ascii_lowercase().as_str() {
                "none" | "shared" => Ok(()),
                "custom" => Err("snapshot.locking.mode=custom is not supported: custom lock implementations are Java classes; use none or shared".to_owned()),
                _ => Err(format!("snapshot.locking.mode={s} is not one of none, shared")),
            }
        })).doc("none (Debezium's default): the snapshot takes no table locks; shared: in the snapshot's transaction, before reading the tables' definitions, it takes ACCESS SHARE locks on the tables to copy (LOCK TABLE ... IN ACCESS SHARE MODE), held until the snapshot ends, so no schema change of them runs meanwhile."))
        .define(key("snapshot.lock.timeout.ms", Long).default_str("10000").validator(Validator::at_least(0.0)).doc("With snapshot.locking.mode=shared: how long the snapshot waits for its table locks (lock_timeout; 0 waits without limit) before the task retries."));
    headwater_connector_common::config::define_signal_keys(def)
}

/// Debezium PostgreSQL keys that change what is emitted and that Headwater has only in their
/// default form (see [`Unbuilt`]).
const POSTGRES_UNBUILT: &[Unbuilt] = &[
    Unbuilt {
        key: "read.only",
        accepted: &["false"],
        why: "read-only incremental snapshots are not built: incremental snapshots write their watermark rows to signal.data.collection, so the connector needs write access to it",
    },
    Unbuilt {
        key: "topic.naming.strategy",
        accepted: &["io.debezium.schema.SchemaTopicNamingStrategy"],
        why: "topics are named <topic.prefix>.<schema>.<table> (Debezium's default SchemaTopicNamingStrategy; DefaultTopicNamingStrategy drops the schema on PostgreSQL); rename them with the RegexRouter transform instead",
    },
    Unbuilt {
        key: "sourceinfo.struct.maker",
        accepted: &["io.debezium.connector.postgresql.PostgresSourceInfoStructMaker"],
        why: "the source block is Debezium's default one",
    },
    Unbuilt {
        key: "snapshot.query.mode",
        accepted: &["select_all"],
        why: "snapshots copy whole tables",
    },
    Unbuilt {
        key: "replica.identity.autoset.values",
        accepted: &[],
        why: "the connector does not change REPLICA IDENTITY; set it with ALTER TABLE ... REPLICA IDENTITY",
    },
    Unbuilt {
        key: "xmin.fetch.interval.ms",
        accepted: &["0"],
        why: "source.xmin is not filled",
    },
    Unbuilt {
        key: "offset.mismatch.strategy",
        accepted: &["no_validation", "trust_greater_lsn"],
        why: "streaming resumes at the later of the committed offset and the slot's confirmed position",
    },
    Unbuilt {
        key: "include.schema.comments",
        accepted: &["false"],
        why: "column comments are not read",
    },
    Unbuilt {
        key: "slot.failover",
        accepted: &["false"],
        why: "failover slots are not created",
    },
];

/// `signal.data.collection`: `<schema>.<table>` (Debezium's form for PostgreSQL), as written
/// (names are matched exactly, as PostgreSQL stores them).
fn parse_signal_table(s: &str) -> Result<(String, String), String> {
    match s.trim().split_once('.') {
        Some((schema, table))
            if !schema.is_empty() && !table.is_empty() && !table.contains('.') =>
        {
            Ok((schema.to_owned(), table.to_owned()))
        }
        _ => Err(format!("{s:?} must be <schema>.<table>")),
    }
}

fn parse_message_key_columns(s: &str) -> Result<Vec<(PatternList, Vec<String>)>, String> {
    let mut out = Vec::new();
    for part in s.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (table, cols) = part
            .rsplit_once(':')
            .ok_or_else(|| format!("{part:?} must be <schema.table>:<column>[,<column>...]"))?;
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

/// Validates a configuration: every key's own checks plus the cross-field rules.
pub fn validate(props: &Properties) -> ConfigValidation {
    let mut v = config_def().validate(props);
    column_mappers::validate(&mut v, props);
    validate_configuration_based(&mut v, props);
    headwater_connector_common::notification::validate(&mut v, props);
    if let Err(e) = headwater_connector_common::config::parse_snapshot_overrides(props) {
        v.add_error("snapshot.select.statement.overrides", e);
    }
    pair_check(&mut v, props, "schema.include.list", "schema.exclude.list");
    pair_check(&mut v, props, "table.include.list", "table.exclude.list");
    pair_check(&mut v, props, "column.include.list", "column.exclude.list");
    pair_check(
        &mut v,
        props,
        "message.prefix.include.list",
        "message.prefix.exclude.list",
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
    if let Some(tls) = tls_settings(props).filter(TlsSettings::attempts_tls) {
        if let Err(message) = tls.client_config() {
            // The message names the key it is about; the mode's own when it names none.
            let field = [
                "database.sslrootcert",
                "database.sslcert",
                "database.sslkey",
            ]
            .into_iter()
            .find(|k| message.starts_with(k))
            .unwrap_or("database.sslmode");
            v.add_error(field, message);
        }
    }
    if let Some(mode) = props.get("publication.autocreate.mode") {
        if mode.eq_ignore_ascii_case("filtered")
            && props.get("table.include.list").is_none()
            && props.get("schema.include.list").is_none()
            && props.get("table.exclude.list").is_none()
            && props.get("schema.exclude.list").is_none()
        {
            v.add_error(
                "publication.autocreate.mode",
                "publication.autocreate.mode=filtered needs table or schema include/exclude lists",
            );
        }
    }
    v
}

/// The TLS settings of `props`; `None` when the mode is not a valid one.
fn tls_settings(props: &Properties) -> Option<TlsSettings> {
    let file = |k: &str| {
        props
            .get(k)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
    };
    Some(TlsSettings {
        mode: SslMode::parse(
            props
                .get("database.sslmode")
                .map_or("prefer", String::as_str)
                .trim(),
        )?,
        root_cert: file("database.sslrootcert"),
        client_cert: file("database.sslcert"),
        client_key: file("database.sslkey"),
    })
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

impl PostgresConfig {
    /// Parses a configuration that [`validate`] accepts; otherwise returns the validation.
    pub fn parse(props: &Properties) -> Result<PostgresConfig, ConfigValidation> {
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
            "never" | "schema_only" => {
                tracing::warn!("snapshot.mode={} is deprecated (removed in Debezium 3.3); treating it as no_data", lower("snapshot.mode"));
                SnapshotMode::NoData
            }
            "when_needed" => SnapshotMode::WhenNeeded,
            "configuration_based" => {
                SnapshotMode::ConfigurationBased(ConfigurationBased::from_props(props))
            }
            _ => SnapshotMode::Initial,
        };
        let start_delays = StartDelays::from_props(props);
        let mut lsn_flush_mode = match lower("lsn.flush.mode").as_str() {
            "manual" => LsnFlushMode::Manual,
            "connector_and_driver" => LsnFlushMode::ConnectorAndDriver,
            _ => LsnFlushMode::Connector,
        };
        if props.get("lsn.flush.mode").is_none() && p.get_bool("flush.lsn.source") == Some(false) {
            lsn_flush_mode = LsnFlushMode::Manual;
        }
        let mapping = MappingConfig {
            decimal: match lower("decimal.handling.mode").as_str() {
                "double" => DecimalMode::Double,
                "string" => DecimalMode::String,
                _ => DecimalMode::Precise,
            },
            time_precision: match lower("time.precision.mode").as_str() {
                "adaptive_time_microseconds" => TimePrecisionMode::AdaptiveTimeMicroseconds,
                "connect" => TimePrecisionMode::Connect,
                _ => TimePrecisionMode::Adaptive,
            },
            binary: match lower("binary.handling.mode").as_str() {
                "base64" => BinaryMode::Base64,
                "base64-url-safe" => BinaryMode::Base64UrlSafe,
                "hex" => BinaryMode::Hex,
                _ => BinaryMode::Bytes,
            },
            interval: match lower("interval.handling.mode").as_str() {
                "string" => IntervalMode::String,
                _ => IntervalMode::Numeric,
            },
            hstore: match lower("hstore.handling.mode").as_str() {
                "map" => HstoreMode::Map,
                _ => HstoreMode::Json,
            },
            money_fraction_digits: long("money.fraction.digits") as i32,
            include_unknown: p.get_bool("include.unknown.datatypes").unwrap_or(false),
        };
        let stream_params = p
            .get_string("slot.stream.params")
            .map(|raw| {
                raw.split(';')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                    .collect()
            })
            .unwrap_or_default();
        Ok(PostgresConfig {
            hostname: s("database.hostname"),
            port: long("database.port") as u16,
            user: s("database.user"),
            password: p.get_string("database.password").map(str::to_owned),
            dbname: s("database.dbname"),
            tls: tls_settings(props).unwrap_or_else(TlsSettings::disabled),
            connect_timeout: ms("connect.timeout.ms"),
            initial_statements: p
                .get_string("database.initial.statements")
                .map(|st| {
                    st.split(';')
                        .map(str::trim)
                        .filter(|x| !x.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            topic_prefix: s("topic.prefix"),
            filters: Filters {
                schemas: selector(&p, "schema.include.list", "schema.exclude.list"),
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
            slot_name: s("slot.name"),
            slot_drop_on_stop: p.get_bool("slot.drop.on.stop").unwrap_or(false),
            slot_stream_params: stream_params,
            transaction_streaming: p.get_bool("transaction.streaming").unwrap_or(true),
            transaction_spill_dir: p
                .get_string("transaction.spill.dir")
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|| std::env::temp_dir().join("headwater-streamed-transactions")),
            slot_max_retries: long("slot.max.retries") as u32,
            slot_retry_delay: ms("slot.retry.delay.ms"),
            publication_name: s("publication.name"),
            publish_via_root: p.get_bool("publish.via.partition.root").unwrap_or(false),
            publication_autocreate: match lower("publication.autocreate.mode").as_str() {
                "disabled" => PublicationAutocreate::Disabled,
                "filtered" => PublicationAutocreate::Filtered,
                "no_tables" => PublicationAutocreate::NoTables,
                _ => PublicationAutocreate::AllTables,
            },
            snapshot_mode,
            start_delays,
            watermarks_deleted: headwater_connector_common::config::watermarks_deleted(props),
            snapshot_fetch_size: long("snapshot.fetch.size").max(1) as usize,
            snapshot_max_threads: long("snapshot.max.threads").max(1) as usize,
            snapshot_chunk_rows: long("snapshot.chunk.rows").max(1) as u64,
            table_order: headwater_connector_common::config::TableOrder::from_props(props),
            snapshot_lock_shared: lower("snapshot.locking.mode") == "shared",
            snapshot_lock_timeout: ms("snapshot.lock.timeout.ms"),
            incremental_chunk_size: p
                .get_long("incremental.snapshot.chunk.size")
                .unwrap_or(1024)
                .clamp(1, 1 << 20) as usize,
            mapping,
            unavailable_placeholder: s("unavailable.value.placeholder"),
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
                .map(|m| parse_message_key_columns(m).unwrap_or_default())
                .unwrap_or_default(),
            max_batch_size: long("max.batch.size").max(1) as usize,
            max_queue_size: long("max.queue.size").max(1) as usize,
            max_queue_size_bytes: long("max.queue.size.in.bytes").max(0) as usize,
            poll_interval: ms("poll.interval.ms"),
            status_update_interval: ms("status.update.interval.ms"),
            heartbeat_interval: ms("heartbeat.interval.ms"),
            heartbeat_action_query: p.get_string("heartbeat.action.query").map(str::to_owned),
            transaction_topic: p
                .get_bool("provide.transaction.metadata")
                .unwrap_or(false)
                .then(|| {
                    p.get_string("topic.transaction")
                        .unwrap_or(headwater_connector_common::txmeta::DEFAULT_TOPIC_SUFFIX)
                        .to_owned()
                }),
            heartbeat_topic_prefix: p
                .get_string("topic.heartbeat.prefix")
                .unwrap_or(headwater_connector_common::heartbeat::DEFAULT_TOPIC_PREFIX)
                .to_owned(),
            lsn_flush_mode,
            message_prefixes: selector(
                &p,
                "message.prefix.include.list",
                "message.prefix.exclude.list",
            ),
            column_mappers: ColumnMappers::parse(props),
            names: NameAdjustments::from_props(props),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use headwater_api::properties as props;

    fn base() -> Vec<(&'static str, &'static str)> {
        vec![
            (
                "connector.class",
                "io.debezium.connector.postgresql.PostgresConnector",
            ),
            ("database.hostname", "localhost"),
            ("database.user", "u"),
            ("database.dbname", "db"),
            ("topic.prefix", "cdc"),
        ]
    }

    #[test]
    fn defaults_match_debezium_except_plugin() {
        let c = PostgresConfig::parse(&props(&base())).unwrap();
        assert_eq!(c.port, 5432);
        assert_eq!(c.slot_name, "debezium");
        assert_eq!(c.publication_name, "dbz_publication");
        assert_eq!(c.publication_autocreate, PublicationAutocreate::AllTables);
        assert_eq!(c.snapshot_mode, SnapshotMode::Initial);
        assert_eq!(c.mapping, MappingConfig::default());
        assert!(c.skipped.truncate && !c.skipped.create);
        assert!(c.tombstones_on_delete);
        assert_eq!(c.max_batch_size, 2048);
        assert_eq!(c.unavailable_placeholder, "__debezium_unavailable_value");
        assert_eq!(c.lsn_flush_mode, LsnFlushMode::Connector);
    }

    #[test]
    fn per_field_errors() {
        let mut p = base();
        p.extend([
            ("plugin.name", "decoderbufs"),
            ("snapshot.mode", "sometimes"),
            ("slot.name", "Bad-Slot"),
            ("table.include.list", "public.a"),
            ("table.exclude.list", "public.b"),
            ("skipped.operations", "x"),
            ("database.sslmode", "verify-full"),
            ("database.sslrootcert", "/nonexistent/root.crt"),
            ("time.precision.mode", "nanoseconds"),
            ("converters", "isbn"),
            ("topic.delimiter", "_"),
            ("publish.via.partition.root", "maybe"),
            (
                "topic.naming.strategy",
                "io.debezium.schema.DefaultTopicNamingStrategy",
            ),
        ]);
        let v = validate(&props(&p));
        let errs = v.errors_by_field();
        assert!(errs["plugin.name"][0].contains("pgoutput"), "{errs:?}");
        assert!(errs["snapshot.mode"][0].contains("initial"));
        assert!(errs["slot.name"][0].contains("lower case"));
        assert!(errs["table.exclude.list"][0].contains("already specified"));
        assert!(errs["skipped.operations"][0].contains("x"));
        assert!(
            errs["database.sslrootcert"][0].contains("/nonexistent/root.crt"),
            "{errs:?}"
        );
        assert!(errs["time.precision.mode"][0].contains("not supported yet"));
        assert!(errs["converters"][0].contains("converters=isbn is not supported"));
        assert!(errs["topic.delimiter"][0].contains("RegexRouter"));
        assert!(
            errs.contains_key("publish.via.partition.root"),
            "not a boolean: {errs:?}"
        );
        assert!(
            errs["topic.naming.strategy"][0].contains("drops the schema"),
            "DefaultTopicNamingStrategy names PostgreSQL topics <prefix>.<table>"
        );
        let mut ok = base();
        ok.push((
            "topic.naming.strategy",
            "io.debezium.schema.SchemaTopicNamingStrategy",
        ));
        assert!(PostgresConfig::parse(&props(&ok)).is_ok());
        assert!(PostgresConfig::parse(&props(&p)).is_err());
        let mut p = base();
        p.retain(|(k, _)| *k != "topic.prefix");
        assert!(validate(&props(&p))
            .errors_by_field()
            .contains_key("topic.prefix"));
    }

    #[test]
    fn unbuilt_notification_channels_read_only_and_bad_watermarks_are_refused() {
        for (k, v, says) in [
            ("notification.enabled.channels", "log,jmx", "JMX"),
            ("read.only", "true", "signal.data.collection"),
            (
                "incremental.snapshot.watermarking.strategy",
                "insert_update",
                "INSERT_DELETE",
            ),
            ("errors.max.retries", "-2", "errors.max.retries"),
        ] {
            let mut p = base();
            p.push((k, v));
            let Err(refused) = PostgresConfig::parse(&props(&p)) else {
                panic!("{k}={v} accepted");
            };
            let e = refused.error_message();
            assert!(e.contains(k) && e.contains(says), "{k}={v}: {e}");
        }
        let mut p = base();
        p.extend([
            ("notification.enabled.channels", "LOG, sink"),
            ("notification.sink.topic.name", "notes"),
            ("read.only", "false"),
            (
                "incremental.snapshot.watermarking.strategy",
                "insert_delete",
            ),
            ("errors.max.retries", "3"),
        ]);
        let c = PostgresConfig::parse(&props(&p)).unwrap();
        assert!(c.watermarks_deleted);
    }

    #[test]
    fn configuration_based_snapshot_mode_reads_its_keys() {
        let mut p = base();
        p.extend([
            ("snapshot.mode", "configuration_based"),
            ("snapshot.mode.configuration.based.snapshot.data", "true"),
        ]);
        let c = PostgresConfig::parse(&props(&p)).unwrap();
        let policy = c.snapshot_mode.policy();
        assert!(policy.every_start && !policy.streams);
        let mut p = base();
        p.push(("snapshot.mode", "configuration_based"));
        let errs = PostgresConfig::parse(&props(&p)).unwrap_err();
        let errs = errs.errors_by_field();
        assert!(
            errs["snapshot.mode.configuration.based.start.stream"][0].contains("capture nothing")
        );
        let mut p = base();
        p.push(("snapshot.mode", "custom"));
        let errs = PostgresConfig::parse(&props(&p)).unwrap_err();
        assert!(errs.errors_by_field()["snapshot.mode"][0].contains("Java"));
    }

    #[test]
    fn aliases_and_lists() {
        let mut p = base();
        p.extend([
            ("snapshot.mode", "never"),
            ("plugin.name", "PGOUTPUT"),
            ("skipped.operations", "none"),
            ("message.key.columns", "public.t:a,b;public.u:id"),
            ("table.include.list", "public.orders,public.customers"),
        ]);
        let c = PostgresConfig::parse(&props(&p)).unwrap();
        assert_eq!(c.snapshot_mode, SnapshotMode::NoData);
        assert_eq!(c.skipped, SkippedOps::default());
        assert_eq!(c.message_key_columns.len(), 2);
        assert_eq!(c.message_key_columns[0].1, vec!["a", "b"]);
        assert!(c.filters.table_included("public", "Orders"));
    }

    #[test]
    fn signal_table_is_captured_and_must_be_schema_dot_table() {
        let mut p = base();
        p.extend([
            ("table.include.list", "public.orders"),
            ("signal.data.collection", "ops.debezium_signal"),
        ]);
        let c = PostgresConfig::parse(&props(&p)).unwrap();
        assert_eq!(
            c.filters.signal_table,
            Some(("ops".to_owned(), "debezium_signal".to_owned()))
        );
        assert!(c.filters.table_included("ops", "debezium_signal"));
        assert!(!c.filters.table_included("ops", "other"));
        p.push(("signal.enabled.channels", ""));
        let off = PostgresConfig::parse(&props(&p)).unwrap();
        assert_eq!(off.filters.signal_table, None, "the source channel is off");
        for bad in ["debezium_signal", "a.b.c", ".x"] {
            let mut p = base();
            p.push(("signal.data.collection", bad));
            let v = validate(&props(&p));
            let errs = v.errors_by_field();
            assert!(
                errs["signal.data.collection"][0].contains("<schema>.<table>"),
                "{bad}: {errs:?}"
            );
        }
    }
}
