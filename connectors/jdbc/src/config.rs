//! The JDBC sink's configuration: Debezium's `JdbcSinkConnector` keys and defaults, parsed and
//! cross-checked (per-key errors), and the destination given by `connection.url`.
//!
//! Supported URLs: `jdbc:postgresql://host[:port]/database[?...]`,
//! `jdbc:mysql://host[:port]/database[?...]` and `jdbc:mariadb://...` (query parameters other
//! than `user`/`password` are ignored). Anything else is rejected with a message naming what is
//! supported.

use headwater_api::config::{
    ConfigDef, ConfigKey, ConfigType, ConfigValidation, Importance, Validator,
};
use headwater_api::{ConnectError, Properties};

/// Which database the sink writes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatabaseKind {
    Postgres,
    /// MySQL and MariaDB (one dialect).
    MySql,
}

/// Where `connection.url` points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    pub kind: DatabaseKind,
    pub host: String,
    pub port: u16,
    pub database: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertMode {
    Insert,
    Upsert,
    Update,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrimaryKeyMode {
    None,
    Kafka,
    RecordKey,
    RecordValue,
}

/// A parsed, validated configuration.
#[derive(Clone, Debug)]
pub struct JdbcSinkConfig {
    pub destination: Destination,
    pub username: String,
    pub password: Option<String>,
    pub insert_mode: InsertMode,
    pub primary_key_mode: PrimaryKeyMode,
    pub primary_key_fields: Vec<String>,
    pub delete_enabled: bool,
    pub truncate_enabled: bool,
    pub schema_evolution: bool,
    pub collection_name_format: String,
    pub batch_size: usize,
    pub quote_identifiers: bool,
    pub unavailable_placeholder: String,
    pub offsets_table: String,
    pub field_include: Vec<String>,
    pub field_exclude: Vec<String>,
}

pub const DEFAULT_OFFSETS_TABLE: &str = "headwater_sink_offsets";

pub fn config_def() -> ConfigDef {
    let key = ConfigKey::new;
    ConfigDef::new()
        .define(key("connection.url", ConfigType::String).importance(Importance::High).validator(Validator::NonEmptyString).group("Connection", 1)
            .doc("jdbc:postgresql://host:port/db, jdbc:mysql://host:port/db or jdbc:mariadb://host:port/db."))
        .define(key("connection.username", ConfigType::String).importance(Importance::High).validator(Validator::NonEmptyString).group("Connection", 2).doc("Database user."))
        .define(key("connection.password", ConfigType::Password).default_null().importance(Importance::High).group("Connection", 3).doc("Database password."))
        .define(key("insert.mode", ConfigType::String).default_str("insert").validator(Validator::one_of_case_insensitive(&["insert", "upsert", "update"])).importance(Importance::Medium)
            .doc("insert: plain inserts; upsert: insert or update by primary key (needs a primary key); update: update by primary key only."))
        .define(key("primary.key.mode", ConfigType::String).default_str("none").validator(Validator::one_of_case_insensitive(&["none", "kafka", "record_key", "record_value"])).importance(Importance::Medium)
            .doc("Where the primary key comes from: none, kafka (__connect_topic, __connect_partition, __connect_offset), record_key (the record key's fields), record_value (primary.key.fields of the value)."))
        .define(key("primary.key.fields", ConfigType::String).default_null().importance(Importance::Medium)
            .doc("Comma-separated key columns: for record_value the value fields; for record_key a subset of the key's fields (or the column name of a primitive key)."))
        .define(key("delete.enabled", ConfigType::Boolean).default_str("false").importance(Importance::Medium)
            .doc("Delete rows for delete events and tombstones (needs primary.key.mode=record_key)."))
        .define(key("truncate.enabled", ConfigType::Boolean).default_str("false").importance(Importance::Medium).doc("Truncate the table for truncate events."))
        .define(key("schema.evolution", ConfigType::String).default_str("none").validator(Validator::one_of_case_insensitive(&["none", "basic"])).importance(Importance::Medium)
            .doc("basic: create missing tables and add missing columns; none: the tables must exist."))
        .define(key("collection.name.format", ConfigType::String).default_str("${topic}").importance(Importance::Medium)
            .doc("Destination table name: ${topic} (dots become underscores), ${source.db}, ${source.schema}, ${source.table} are replaced."))
        .define(key("table.name.format", ConfigType::String).default_null().importance(Importance::Low).doc("Deprecated alias of collection.name.format."))
        .define(key("batch.size", ConfigType::Int).default_str("500").validator(Validator::at_least(1.0)).importance(Importance::Medium)
            .doc("Rows per statement (PostgreSQL copies any number of rows per statement; this bounds MySQL multi-row statements)."))
        .define(key("quote.identifiers", ConfigType::Boolean).default_str("false").importance(Importance::Low)
            .doc("Quote every table and column name (names that need quoting are always quoted)."))
        .define(key("field.include.list", ConfigType::String).default_null().importance(Importance::Low).doc("Comma-separated fields to write (topic:field or field)."))
        .define(key("field.exclude.list", ConfigType::String).default_null().importance(Importance::Low).doc("Comma-separated fields not to write (topic:field or field)."))
        .define(key("use.time.zone", ConfigType::String).default_str("UTC").importance(Importance::Low).doc("Accepted; temporal values are written in UTC."))
        .define(key("unavailable.value.placeholder", ConfigType::String).default_str("__debezium_unavailable_value").importance(Importance::Low)
            .doc("Headwater: the source's placeholder for unchanged TOASTed values; columns holding it are left as they are in the destination."))
        .define(key("offsets.table", ConfigType::String).default_str(DEFAULT_OFFSETS_TABLE).validator(Validator::NonEmptyString).importance(Importance::Low)
            .doc("Headwater: destination table holding the consumed offsets, committed in the same transaction as the rows (exactly once)."))
}

/// Parses `jdbc:<kind>://host[:port]/database[?params]`.
pub fn parse_url(url: &str) -> Result<Destination, String> {
    let rest = url.trim();
    let (kind, rest, default_port) = if let Some(r) = rest.strip_prefix("jdbc:postgresql://") {
        (DatabaseKind::Postgres, r, 5432)
    } else if let Some(r) = rest
        .strip_prefix("jdbc:mysql://")
        .or_else(|| rest.strip_prefix("jdbc:mariadb://"))
    {
        (DatabaseKind::MySql, r, 3306)
    } else {
        return Err(format!(
            "unsupported connection.url {url:?}: Headwater's JDBC sink writes to jdbc:postgresql://, jdbc:mysql:// and jdbc:mariadb:// URLs"
        ));
    };
    let rest = rest.split('?').next().unwrap_or("");
    let (hostport, database) = rest
        .split_once('/')
        .ok_or_else(|| format!("connection.url {url:?} names no database (…/<database>)"))?;
    if database.is_empty() {
        return Err(format!("connection.url {url:?} names no database"));
    }
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) => (
            h,
            p.parse::<u16>()
                .map_err(|_| format!("connection.url {url:?}: bad port {p:?}"))?,
        ),
        None => (hostport, default_port),
    };
    if host.is_empty() {
        return Err(format!("connection.url {url:?} names no host"));
    }
    Ok(Destination {
        kind,
        host: host.trim_matches(|c| c == '[' || c == ']').to_owned(),
        port,
        database: database.to_owned(),
    })
}

fn list(value: Option<&str>) -> Vec<String> {
    value
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Validates every key and the cross-field rules.
pub fn validate(props: &Properties) -> ConfigValidation {
    let mut v = config_def().validate(props);
    if let Some(url) = props.get("connection.url") {
        if let Err(e) = parse_url(url) {
            v.add_error("connection.url", e);
        }
    }
    let lower = |k: &str, d: &str| {
        props
            .get(k)
            .map_or(d.to_owned(), |x| x.trim().to_ascii_lowercase())
    };
    let pk_mode = lower("primary.key.mode", "none");
    let insert_mode = lower("insert.mode", "insert");
    if lower("delete.enabled", "false") == "true" && pk_mode != "record_key" {
        v.add_error(
            "delete.enabled",
            "Deletes are only supported with primary.key.mode=record_key",
        );
    }
    if insert_mode != "insert" && pk_mode == "none" {
        v.add_error(
            "insert.mode",
            format!("insert.mode={insert_mode} needs a primary key: set primary.key.mode to record_key, record_value or kafka"),
        );
    }
    if pk_mode == "record_value"
        && list(props.get("primary.key.fields").map(String::as_str)).is_empty()
    {
        v.add_error(
            "primary.key.fields",
            "primary.key.mode=record_value needs primary.key.fields",
        );
    }
    v
}

impl JdbcSinkConfig {
    /// From a configuration that [`validate`]d without errors.
    pub fn parse(props: &Properties) -> Result<JdbcSinkConfig, ConnectError> {
        let errors = validate(props);
        if errors.error_count() > 0 {
            return Err(ConnectError::config(errors.error_message()));
        }
        let p = config_def()
            .parse(props)
            .map_err(|e| ConnectError::config(e.error_message()))?;
        let s = |k: &str| p.get_string(k).unwrap_or_default().to_owned();
        let lower = |k: &str| s(k).to_ascii_lowercase();
        let destination = parse_url(&s("connection.url")).map_err(ConnectError::config)?;
        Ok(JdbcSinkConfig {
            destination,
            username: s("connection.username"),
            password: p.get_string("connection.password").map(str::to_owned),
            insert_mode: match lower("insert.mode").as_str() {
                "upsert" => InsertMode::Upsert,
                "update" => InsertMode::Update,
                _ => InsertMode::Insert,
            },
            primary_key_mode: match lower("primary.key.mode").as_str() {
                "kafka" => PrimaryKeyMode::Kafka,
                "record_key" => PrimaryKeyMode::RecordKey,
                "record_value" => PrimaryKeyMode::RecordValue,
                _ => PrimaryKeyMode::None,
            },
            primary_key_fields: list(p.get_string("primary.key.fields")),
            delete_enabled: p.get_bool("delete.enabled").unwrap_or(false),
            truncate_enabled: p.get_bool("truncate.enabled").unwrap_or(false),
            schema_evolution: lower("schema.evolution") == "basic",
            collection_name_format: p
                .get_string("table.name.format")
                .filter(|_| props.get("collection.name.format").is_none())
                .map(str::to_owned)
                .unwrap_or_else(|| s("collection.name.format")),
            batch_size: p.get_long("batch.size").unwrap_or(500).max(1) as usize,
            quote_identifiers: p.get_bool("quote.identifiers").unwrap_or(false),
            unavailable_placeholder: s("unavailable.value.placeholder"),
            offsets_table: s("offsets.table"),
            field_include: list(p.get_string("field.include.list")),
            field_exclude: list(p.get_string("field.exclude.list")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use headwater_api::properties as props;

    #[test]
    fn urls_of_each_supported_database_parse() {
        assert_eq!(
            parse_url("jdbc:postgresql://db.example:6543/warehouse?sslmode=disable").unwrap(),
            Destination {
                kind: DatabaseKind::Postgres,
                host: "db.example".into(),
                port: 6543,
                database: "warehouse".into()
            }
        );
        let m = parse_url("jdbc:mariadb://10.0.0.1/dw").unwrap();
        assert_eq!(
            (m.kind, m.port, m.database.as_str()),
            (DatabaseKind::MySql, 3306, "dw")
        );
        assert!(parse_url("jdbc:sqlserver://x/y")
            .unwrap_err()
            .contains("jdbc:postgresql://"));
        assert!(parse_url("jdbc:postgresql://host")
            .unwrap_err()
            .contains("no database"));
    }

    #[test]
    fn cross_field_rules_report_per_key() {
        let v = validate(&props(&[
            ("connection.url", "jdbc:postgresql://h/db"),
            ("connection.username", "u"),
            ("insert.mode", "upsert"),
            ("delete.enabled", "true"),
        ]));
        let by = v.errors_by_field();
        assert!(by["insert.mode"][0].contains("needs a primary key"));
        assert!(by["delete.enabled"][0].contains("record_key"));
        let ok = validate(&props(&[
            ("connection.url", "jdbc:postgresql://h/db"),
            ("connection.username", "u"),
            ("insert.mode", "upsert"),
            ("primary.key.mode", "record_key"),
            ("delete.enabled", "true"),
        ]));
        assert_eq!(ok.error_count(), 0, "{:?}", ok.errors_by_field());
        let c = JdbcSinkConfig::parse(&props(&[
            ("connection.url", "jdbc:postgresql://h/db"),
            ("connection.username", "u"),
            ("table.name.format", "t_${topic}"),
        ]))
        .unwrap();
        assert_eq!(c.collection_name_format, "t_${topic}");
        assert_eq!(c.batch_size, 500);
    }
}
