//! The JDBC sink's configuration: Debezium's `JdbcSinkConnector` keys and defaults, parsed and
//! cross-checked (per-key errors), and the destination given by `connection.url`.
//!
//! Supported URLs: `jdbc:postgresql://host[:port]/database[?...]`,
//! `jdbc:mysql://host[:port]/database[?...]` and `jdbc:mariadb://...`. Of the query
//! parameters, the drivers' TLS settings are read (see [`DestinationTls`]); the others are
//! ignored. Anything else is rejected with a message naming what is supported.

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
    pub tls: DestinationTls,
}

/// TLS to the destination, from the URL's parameters as the JDBC drivers name them, with the
/// drivers' defaults:
/// - PostgreSQL (pgjdbc): `sslmode` (default `prefer`; `ssl=true` alone means `verify-full`),
///   `sslrootcert`, `sslcert`, `sslkey` (PEM, or a PKCS#8 DER key); the modes are libpq's,
///   as the PostgreSQL source has them;
/// - MySQL (Connector/J): `sslMode` (default `PREFERRED`; `useSSL=false` means `DISABLED`,
///   `requireSSL=true` `REQUIRED`, `verifyServerCertificate=true` `VERIFY_CA`, which is
///   refused), `trustCertificateKeyStoreUrl` and `clientCertificateKeyStoreUrl` (PEM files,
///   `file:` prefix allowed);
/// - MariaDB (MariaDB Connector/J): `sslMode` (default `disable`; `useSsl=true` means
///   `verify-full`, or `trust` with `trustServerCertificate=true`), `serverSslCert` (PEM file
///   of the CA or server certificate), `keyStore` (PEM file with certificate and key).
///
/// The modes mean what they mean for the sources (docs/connectors/postgres.md and mysql.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DestinationTls {
    Postgres(headwater_connector_postgres::tls::TlsSettings),
    MySql(headwater_connector_mysql::tls::TlsSettings),
}

/// The URL's query parameters, percent-decoded.
fn query_params(url: &str) -> Vec<(String, String)> {
    fn decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            let hex = |b: u8| (b as char).to_digit(16);
            match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
                (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                    out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                    i += 3;
                }
                (b, _, _) => {
                    out.push(b);
                    i += 1;
                }
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    url.split_once('?')
        .map(|(_, q)| q)
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// The TLS settings a URL's parameters give (errors name the parameter).
fn destination_tls(url: &str, kind: DatabaseKind, mariadb: bool) -> Result<DestinationTls, String> {
    let params = query_params(url);
    // The last value of a parameter, `Some("")` when it is given without a value.
    let given = |name: &str| {
        params
            .iter()
            .rev()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    };
    let get = |name: &str| given(name).filter(|v| !v.is_empty());
    let file = |name: &str| {
        get(name).map(|v| std::path::PathBuf::from(v.strip_prefix("file:").unwrap_or(v)))
    };
    let bad = |what: String| format!("connection.url: {what}");
    match kind {
        DatabaseKind::Postgres => {
            use headwater_connector_postgres::replication::SslMode;
            if get("sslpassword").is_some() {
                return Err(bad("sslpassword: encrypted client keys are not supported; give sslkey an unencrypted key".into()));
            }
            let mode = match get("sslmode") {
                Some(m) => SslMode::parse(m).ok_or_else(|| {
                    bad(format!("sslmode={m} must be one of disable, allow, prefer, require, verify-ca, verify-full"))
                })?,
                // pgjdbc: `ssl` present (with no value, or any but false) means verify-full.
                None if given("ssl").is_some_and(|v| !v.eq_ignore_ascii_case("false")) => {
                    SslMode::VerifyFull
                }
                None => SslMode::Prefer,
            };
            let settings = headwater_connector_postgres::tls::TlsSettings {
                mode,
                root_cert: file("sslrootcert"),
                client_cert: file("sslcert"),
                client_key: file("sslkey"),
            };
            if settings.attempts_tls() {
                // The messages name the source's keys; here the URL's parameters are meant.
                settings
                    .client_config()
                    .map_err(|m| bad(m.replace("database.ssl", "ssl")))?;
            }
            Ok(DestinationTls::Postgres(settings))
        }
        DatabaseKind::MySql => {
            use headwater_connector_mysql::tls::SslMode;
            let flag = |name: &str| get(name).map(|v| v.eq_ignore_ascii_case("true"));
            let mode = match get("sslMode") {
                Some(m) => SslMode::parse(m).ok_or_else(|| {
                    bad(format!("sslMode={m} must be one of DISABLED, PREFERRED, REQUIRED, VERIFY_IDENTITY (MariaDB: disable, trust, verify-full)"))
                })?,
                // The legacy flags, as each driver maps them when sslMode is not given.
                None if flag("useSSL") == Some(false) => SslMode::Disabled,
                // MariaDB Connector/J: useSsl checks the certificate unless told to trust it.
                None if mariadb && flag("useSSL") == Some(true) => {
                    if flag("trustServerCertificate") == Some(true) {
                        SslMode::Required
                    } else {
                        SslMode::VerifyIdentity
                    }
                }
                // Connector/J: verifyServerCertificate=true is VERIFY_CA (refused below).
                None if !mariadb && flag("verifyServerCertificate") == Some(true) => {
                    SslMode::VerifyCa
                }
                None if flag("requireSSL") == Some(true) => SslMode::Required,
                None if mariadb => SslMode::Disabled,
                None => SslMode::Preferred,
            };
            let settings = headwater_connector_mysql::tls::TlsSettings {
                mode,
                truststore: file("trustCertificateKeyStoreUrl").or_else(|| file("serverSslCert")),
                keystore: file("clientCertificateKeyStoreUrl").or_else(|| file("keyStore")),
            };
            settings.check().map_err(|m| {
                bad(m
                    .replace(
                        "database.ssl.truststore",
                        "the trust store (trustCertificateKeyStoreUrl, serverSslCert)",
                    )
                    .replace(
                        "database.ssl.keystore",
                        "the key store (clientCertificateKeyStoreUrl, keyStore)",
                    )
                    .replace("database.ssl.mode", "sslMode"))
            })?;
            Ok(DestinationTls::MySql(settings))
        }
    }
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
    let mariadb = rest.starts_with("jdbc:mariadb://");
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
        tls: destination_tls(url, kind, mariadb)?,
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
    fn tls_parameters_of_each_driver_and_their_defaults() {
        use headwater_connector_mysql::tls::SslMode as MyMode;
        use headwater_connector_postgres::replication::SslMode as PgMode;
        let pg = |url: &str| match parse_url(url).map(|d| d.tls) {
            Ok(DestinationTls::Postgres(t)) => Ok(t),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e),
        };
        let my = |url: &str| match parse_url(url).map(|d| d.tls) {
            Ok(DestinationTls::MySql(t)) => Ok(t),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e),
        };
        assert_eq!(pg("jdbc:postgresql://h/d").unwrap().mode, PgMode::Prefer);
        // ssl=true alone is verify-full, which needs a CA file (libpq's default is unlikely).
        match pg("jdbc:postgresql://h/d?ssl=true") {
            Ok(t) => assert_eq!(t.mode, PgMode::VerifyFull),
            Err(e) => assert!(
                e.contains("sslmode=verify-full") && e.contains("sslrootcert"),
                "{e}"
            ),
        }
        let t = pg("jdbc:postgresql://h/d?user=u&sslmode=REQUIRE&sslcert=/c%20d.pem&sslkey=/k.pk8")
            .err()
            .unwrap();
        // Both client files are read (and here do not exist).
        assert!(t.contains("connection.url: sslcert /c d.pem"), "{t}");
        assert!(pg("jdbc:postgresql://h/d?sslmode=sometimes")
            .unwrap_err()
            .contains("sslmode=sometimes"));
        assert!(pg("jdbc:postgresql://h/d?sslmode=require&sslpassword=x")
            .unwrap_err()
            .contains("encrypted"));
        assert_eq!(my("jdbc:mysql://h/d").unwrap().mode, MyMode::Preferred);
        assert_eq!(my("jdbc:mariadb://h/d").unwrap().mode, MyMode::Disabled);
        assert_eq!(
            my("jdbc:mysql://h/d?useSSL=false").unwrap().mode,
            MyMode::Disabled
        );
        assert_eq!(
            my("jdbc:mysql://h/d?requireSSL=true").unwrap().mode,
            MyMode::Required
        );
        assert_eq!(
            my("jdbc:mariadb://h/d?sslMode=trust").unwrap().mode,
            MyMode::Required
        );
        // The legacy flags never mean less than the drivers make of them.
        assert_eq!(
            my("jdbc:mariadb://h/d?useSsl=true").unwrap().mode,
            MyMode::VerifyIdentity
        );
        assert_eq!(
            my("jdbc:mariadb://h/d?useSsl=true&trustServerCertificate=true")
                .unwrap()
                .mode,
            MyMode::Required
        );
        assert!(
            my("jdbc:mysql://h/d?useSSL=true&requireSSL=true&verifyServerCertificate=true")
                .unwrap_err()
                .contains("verify_ca")
        );
        match pg("jdbc:postgresql://h/d?ssl") {
            Ok(t) => assert_eq!(t.mode, PgMode::VerifyFull),
            Err(e) => assert!(e.contains("sslmode=verify-full"), "{e}"),
        }
        assert_eq!(
            pg("jdbc:postgresql://h/d?ssl=false").unwrap().mode,
            PgMode::Prefer
        );
        assert!(my(
            "jdbc:mysql://h/d?sslMode=VERIFY_IDENTITY&trustCertificateKeyStoreUrl=file:/nope.pem"
        )
        .unwrap_err()
        .contains("/nope.pem"));
        assert!(my("jdbc:mysql://h/d?sslMode=VERIFY_CA")
            .unwrap_err()
            .contains("verify_ca"));
    }

    #[test]
    fn urls_of_each_supported_database_parse() {
        assert_eq!(
            parse_url("jdbc:postgresql://db.example:6543/warehouse?sslmode=disable").unwrap(),
            Destination {
                kind: DatabaseKind::Postgres,
                host: "db.example".into(),
                port: 6543,
                database: "warehouse".into(),
                tls: DestinationTls::Postgres(
                    headwater_connector_postgres::tls::TlsSettings::disabled()
                ),
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
