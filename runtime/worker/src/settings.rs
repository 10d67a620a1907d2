//! Worker settings: the TOML config file and the merge of all setting sources.
//!
//! Every setting resolves independently with the precedence
//! **flag > environment variable > config file > built-in default**. Flags and
//! `HEADWATER_*` variables arrive together in [`WorkerArgs`] (clap reads the
//! variables); the config file is [`FileSettings`]. `RUST_LOG` is honoured for
//! the log filter when neither `--log-level` nor `HEADWATER_LOG_LEVEL` is set,
//! ranking above the file like the other environment variables.
//!
//! Invariants:
//! * The config file holds top-level keys only (`data_dir`, `rest_listen`,
//!   `kafka_listen`, `schema_registry_listen`, `log_format`, `log_level`, `rest_auth_token`,
//!   `rest_auth_users`, `rest_tls_cert`, `rest_tls_key`, `kafka_tls_cert`, `kafka_tls_key`,
//!   `kafka_tls_client_ca`, `kafka_advertised_address`, `kafka_sasl_users`,
//!   `kafka_sasl_mechanisms`); any other key, or a `[table]`, is rejected
//!   (`deny_unknown_fields`).
//! * REST authentication is off unless a token or a user is set; an empty
//!   token, user list or TLS path means "not set" (so the shipped file can list
//!   every key with its default). Secrets never appear in `Debug` output.
//! * HTTPS on the REST listener needs both `rest_tls_cert` and `rest_tls_key`; one
//!   without the other is a usage error, never silently plain HTTP. The files are
//!   read when the worker starts ([`headwater_rest::tls::ServerTls::load`]), and a
//!   file that does not load is a usage error too. The same holds for TLS on the
//!   Kafka listener (`kafka_tls_cert`, `kafka_tls_key`; `kafka_tls_client_ca` only
//!   with them).
//! * Relative `data_dir` values are relative to the worker's current directory,
//!   wherever they come from (not to the config file's directory).
//! * A [`Settings`] value is fully validated; every error is a single-line
//!   usage [`Failure`] (exit 2) naming its source.

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use headwater_kafka::sasl::{Mechanism, SaslUsers};
use headwater_rest::tls::TlsFiles;
use headwater_rest::RestAuth;
use serde::Deserialize;

use crate::cli::WorkerArgs;
use crate::failure::Failure;
use crate::logging::{self, LogFormat};

/// Built-in default for `data_dir`.
pub const DEFAULT_DATA_DIR: &str = "./data";
/// Built-in default for `rest_listen`.
pub const DEFAULT_REST_LISTEN: &str = "127.0.0.1:8083";
/// Built-in default for `kafka_listen`.
pub const DEFAULT_KAFKA_LISTEN: &str = "127.0.0.1:9092";
/// Built-in default for `log_level`.
pub const DEFAULT_LOG_LEVEL: &str = "info";

/// The contents of a worker config file. Absent keys are `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSettings {
    /// See [`Settings::data_dir`].
    pub data_dir: Option<PathBuf>,
    /// See [`Settings::rest_listen`].
    #[serde(default, deserialize_with = "deserialize_addr")]
    pub rest_listen: Option<SocketAddr>,
    /// See [`Settings::kafka_listen`].
    #[serde(default, deserialize_with = "deserialize_addr")]
    pub kafka_listen: Option<SocketAddr>,
    /// See [`Settings::schema_registry_listen`].
    #[serde(default, deserialize_with = "deserialize_addr")]
    pub schema_registry_listen: Option<SocketAddr>,
    /// See [`Settings::log_format`].
    pub log_format: Option<LogFormat>,
    /// See [`Settings::log_level`].
    #[serde(default, deserialize_with = "logging::deserialize_filter")]
    pub log_level: Option<String>,
    /// Bearer token required on the REST API (empty: none).
    pub rest_auth_token: Option<String>,
    /// HTTP Basic users, `"user:password"` each.
    pub rest_auth_users: Option<Vec<String>>,
    /// PEM certificate chain for HTTPS on the REST listener (empty: plain HTTP).
    pub rest_tls_cert: Option<PathBuf>,
    /// PEM private key of `rest_tls_cert`.
    pub rest_tls_key: Option<PathBuf>,
    /// PEM certificate chain for TLS on the Kafka listener (empty: plain text).
    pub kafka_tls_cert: Option<PathBuf>,
    /// PEM private key of `kafka_tls_cert`.
    pub kafka_tls_key: Option<PathBuf>,
    /// PEM CA certificates Kafka clients' certificates must chain to (empty: none asked).
    pub kafka_tls_client_ca: Option<PathBuf>,
    /// `HOST:PORT` Kafka clients are told to connect to (empty: the address they used).
    pub kafka_advertised_address: Option<String>,
    /// SASL users of the Kafka listener, `"user:password"` each (empty: no SASL).
    pub kafka_sasl_users: Option<Vec<String>>,
    /// SASL mechanisms offered (empty: all of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512).
    pub kafka_sasl_mechanisms: Option<Vec<String>>,
}

impl FileSettings {
    /// Reads and parses the config file at `path`.
    pub fn load(path: &Path) -> Result<Self, Failure> {
        let text = fs::read_to_string(path).map_err(|err| {
            Failure::usage(format!("cannot read config file {}: {err}", path.display()))
        })?;
        Self::parse(&text).map_err(|detail| {
            Failure::usage(format!("invalid config file {}: {detail}", path.display()))
        })
    }

    /// Parses config file text; the error says where and what went wrong,
    /// quoting the offending line.
    pub fn parse(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|err| {
            let message = crate::failure::one_line(err.message());
            match err.span() {
                Some(span) => {
                    let (line, column, source) = locate(text, span.start);
                    format!("line {line}, column {column}: {message} (in `{source}`)")
                }
                None => message,
            }
        })
    }
}

/// 1-based line and column (in characters) of byte `offset` in `text`, and
/// that line's text (trimmed, shortened to 80 characters).
fn locate(text: &str, offset: usize) -> (usize, usize, String) {
    let offset = (0..=offset.min(text.len()))
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    let source = text[line_start..].lines().next().unwrap_or("").trim();
    let mut shown: String = source.chars().take(80).collect();
    if source.chars().count() > 80 {
        shown.push('…');
    }
    (line, column, shown)
}

/// `serde` adapter: an optional `IP:PORT` socket address with a helpful error.
fn deserialize_addr<'de, D>(deserializer: D) -> Result<Option<SocketAddr>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let raw = String::deserialize(deserializer)?;
    raw.trim().parse().map(Some).map_err(|_| {
        serde::de::Error::custom(format!(
            "invalid socket address '{raw}' (expected IP:PORT, e.g. 127.0.0.1:8083)"
        ))
    })
}

/// Fully resolved worker settings (`Debug` hides the REST and Kafka credentials).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Directory holding the lock file and the cluster id.
    pub data_dir: PathBuf,
    /// Address of the REST listener.
    pub rest_listen: SocketAddr,
    /// Address of the Kafka protocol listener.
    pub kafka_listen: SocketAddr,
    /// A listener of its own for the schema registry (it is on the REST listener anyway).
    pub schema_registry_listen: Option<SocketAddr>,
    /// Log line format.
    pub log_format: LogFormat,
    /// Log filter (validated by [`logging::parse_filter`]).
    pub log_level: String,
    /// The config file the settings were read from, if any.
    pub config_file: Option<PathBuf>,
    /// REST authentication (off when empty).
    pub rest_auth: RestAuth,
    /// HTTPS on the REST (and schema registry) listener: `None` serves plain HTTP.
    pub rest_tls: Option<TlsFiles>,
    /// TLS on the Kafka listener: `None` serves plain text.
    pub kafka_tls: Option<TlsFiles>,
    /// The broker address given to Kafka clients: `None` is the one each connected to.
    pub kafka_advertised: Option<(String, u16)>,
    /// SASL on the Kafka listener (no users: no SASL).
    pub kafka_sasl: KafkaSasl,
}

impl Settings {
    /// Resolves settings from the command line (flags and `HEADWATER_*`
    /// variables, already merged by clap), `RUST_LOG`, and the config file named
    /// by `--config`/`HEADWATER_CONFIG`.
    pub fn resolve(args: &WorkerArgs, rust_log: Option<&str>) -> Result<Self, Failure> {
        let file = match &args.config {
            Some(path) => FileSettings::load(path)?,
            None => FileSettings::default(),
        };
        Self::merge(args, rust_log, file)
    }

    /// The precedence rules, without any I/O.
    pub fn merge(
        args: &WorkerArgs,
        rust_log: Option<&str>,
        file: FileSettings,
    ) -> Result<Self, Failure> {
        let rust_log = match rust_log.map(str::trim).filter(|v| !v.is_empty()) {
            Some(value) => Some(
                logging::parse_filter(value)
                    .map_err(|err| Failure::usage(format!("invalid RUST_LOG: {err}")))?,
            ),
            None => None,
        };
        let log_level = args
            .log_level
            .clone()
            .or(rust_log)
            .or(file.log_level)
            .unwrap_or_else(|| DEFAULT_LOG_LEVEL.to_owned());

        let data_dir = args
            .data_dir
            .clone()
            .or(file.data_dir)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
        if data_dir.as_os_str().is_empty() {
            return Err(Failure::usage("data_dir must not be empty"));
        }

        let non_empty_path = |p: Option<PathBuf>| p.filter(|p| !p.as_os_str().is_empty());
        let tls_cert = non_empty_path(args.rest_tls_cert.clone().or(file.rest_tls_cert));
        let tls_key = non_empty_path(args.rest_tls_key.clone().or(file.rest_tls_key));
        let rest_tls = match (tls_cert, tls_key) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert_setting: "rest_tls_cert",
                cert,
                key_setting: "rest_tls_key",
                key,
                client_ca: None,
            }),
            (Some(_), None) | (None, Some(_)) => {
                return Err(Failure::usage(
                    "rest_tls_cert and rest_tls_key go together: set both for HTTPS on the REST listener, or neither",
                ))
            }
        };
        let kafka_cert = non_empty_path(args.kafka_tls_cert.clone().or(file.kafka_tls_cert));
        let kafka_key = non_empty_path(args.kafka_tls_key.clone().or(file.kafka_tls_key));
        let kafka_client_ca = non_empty_path(
            args.kafka_tls_client_ca
                .clone()
                .or(file.kafka_tls_client_ca),
        );
        let kafka_tls = match (kafka_cert, kafka_key) {
            (None, None) if kafka_client_ca.is_some() => {
                return Err(Failure::usage(
                    "kafka_tls_client_ca needs TLS on the Kafka listener: set kafka_tls_cert and kafka_tls_key too",
                ))
            }
            (None, None) => None,
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert_setting: "kafka_tls_cert",
                cert,
                key_setting: "kafka_tls_key",
                key,
                client_ca: kafka_client_ca.map(|ca| ("kafka_tls_client_ca", ca)),
            }),
            (Some(_), None) | (None, Some(_)) => {
                return Err(Failure::usage(
                    "kafka_tls_cert and kafka_tls_key go together: set both for TLS on the Kafka listener, or neither",
                ))
            }
        };
        let kafka_advertised = match args
            .kafka_advertised_address
            .clone()
            .or(file.kafka_advertised_address)
            .filter(|a| !a.trim().is_empty())
        {
            None => None,
            Some(text) => Some(parse_host_port(&text).ok_or_else(|| {
                Failure::usage(format!(
                    "kafka_advertised_address '{text}' is not HOST:PORT (a name or IP, then a port from 1 to 65535; an IPv6 address in brackets)"
                ))
            })?),
        };
        let token = args
            .rest_auth_token
            .clone()
            .or(file.rest_auth_token)
            .filter(|t| !t.is_empty());
        // Flag or variable values that are all empty count as not given (an unset `${VAR}` in a
        // compose file must not switch off the users the config file sets).
        let given = |values: &[String]| values.iter().any(|v| !v.is_empty());
        let user_specs = if given(&args.rest_auth_users) {
            args.rest_auth_users.clone()
        } else {
            file.rest_auth_users.unwrap_or_default()
        };
        let users = user_passwords("rest_auth_users", &user_specs)?;
        let sasl_specs = if given(&args.kafka_sasl_users) {
            args.kafka_sasl_users.clone()
        } else {
            file.kafka_sasl_users.unwrap_or_default()
        };
        let mechanism_names = if given(&args.kafka_sasl_mechanisms) {
            args.kafka_sasl_mechanisms.clone()
        } else {
            file.kafka_sasl_mechanisms.unwrap_or_default()
        };
        let mut mechanisms = Vec::new();
        for name in mechanism_names
            .iter()
            .map(|n| n.trim())
            .filter(|n| !n.is_empty())
        {
            let mechanism = Mechanism::parse(name).ok_or_else(|| {
                Failure::usage(format!(
                    "kafka_sasl_mechanisms: unknown mechanism '{name}' (offered: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"
                ))
            })?;
            if !mechanisms.contains(&mechanism) {
                mechanisms.push(mechanism);
            }
        }
        if mechanisms.is_empty() {
            mechanisms = Mechanism::ALL.to_vec();
        }
        let kafka_sasl = KafkaSasl {
            users: user_passwords("kafka_sasl_users", &sasl_specs)?,
            mechanisms,
        };

        Ok(Self {
            data_dir,
            rest_listen: args
                .rest_listen
                .or(file.rest_listen)
                .unwrap_or_else(|| default_addr(DEFAULT_REST_LISTEN)),
            kafka_listen: args
                .kafka_listen
                .or(file.kafka_listen)
                .unwrap_or_else(|| default_addr(DEFAULT_KAFKA_LISTEN)),
            schema_registry_listen: args.schema_registry_listen.or(file.schema_registry_listen),
            log_format: args.log_format.or(file.log_format).unwrap_or_default(),
            log_level,
            config_file: args.config.clone(),
            rest_auth: RestAuth { token, users },
            rest_tls,
            kafka_tls,
            kafka_advertised,
            kafka_sasl,
        })
    }
}

/// SASL on the Kafka listener: users (`(name, password)`; none: no SASL) and mechanisms.
/// `Debug` shows the user names only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct KafkaSasl {
    pub users: Vec<(String, String)>,
    pub mechanisms: Vec<Mechanism>,
}

impl std::fmt::Debug for KafkaSasl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let users: Vec<&str> = self.users.iter().map(|(u, _)| u.as_str()).collect();
        let mechanisms: Vec<&str> = self.mechanisms.iter().map(|m| m.name()).collect();
        f.debug_struct("KafkaSasl")
            .field("users", &users)
            .field("mechanisms", &mechanisms)
            .finish()
    }
}

impl KafkaSasl {
    /// Whether the listener requires SASL.
    pub fn enabled(&self) -> bool {
        !self.users.is_empty()
    }

    /// The listener's user store (SCRAM credentials derived here, with fresh salts).
    pub fn users(&self) -> SaslUsers {
        SaslUsers::new(self.users.clone(), self.mechanisms.clone())
    }
}

/// `USER:PASSWORD` entries of the setting `setting` (empty entries skipped), each with both
/// parts non-empty and each user once; an error names the user when there is one, and never
/// echoes text that may be a password.
fn user_passwords(setting: &str, specs: &[String]) -> Result<Vec<(String, String)>, Failure> {
    let mut users: Vec<(String, String)> = Vec::new();
    for spec in specs.iter().filter(|s| !s.is_empty()) {
        match spec.split_once(':') {
            Some((user, password)) if !user.is_empty() && !password.is_empty() => {
                if users.iter().any(|(u, _)| u == user) {
                    return Err(Failure::usage(format!(
                        "{setting}: user '{user}' is listed twice"
                    )));
                }
                users.push((user.to_owned(), password.to_owned()))
            }
            Some((user, _)) if !user.is_empty() => {
                return Err(Failure::usage(format!(
                    "{setting}: entry for user '{user}' must be USER:PASSWORD with both parts non-empty"
                )));
            }
            _ => {
                return Err(Failure::usage(format!(
                    "{setting}: an entry is not USER:PASSWORD (both parts non-empty; in the environment variable, entries are separated by commas, so a password there cannot hold one)"
                )));
            }
        }
    }
    Ok(users)
}

/// `HOST:PORT` with a non-empty host (a name, an IPv4 address, or an IPv6 address in
/// brackets, returned without them) and a port from 1 to 65535.
fn parse_host_port(text: &str) -> Option<(String, u16)> {
    let text = text.trim();
    let (host, port) = if let Some(v6) = text.strip_prefix('[') {
        let (host, rest) = v6.split_once(']')?;
        host.parse::<std::net::Ipv6Addr>().ok()?;
        (host, rest.strip_prefix(':')?)
    } else {
        let (host, port) = text.rsplit_once(':')?;
        if host.contains(':') {
            return None;
        }
        (host, port)
    };
    let valid_host = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'));
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let port: u16 = port.parse().ok().filter(|p| *p > 0)?;
    valid_host.then(|| (host.to_owned(), port))
}

fn default_addr(text: &str) -> SocketAddr {
    text.parse()
        .expect("built-in default addresses are valid socket addresses")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(text: &str) -> SocketAddr {
        text.parse().expect("valid address")
    }

    #[test]
    fn defaults_apply_when_nothing_is_set() {
        let settings =
            Settings::merge(&WorkerArgs::default(), None, FileSettings::default()).expect("ok");
        assert_eq!(
            settings,
            Settings {
                data_dir: PathBuf::from(DEFAULT_DATA_DIR),
                rest_listen: addr(DEFAULT_REST_LISTEN),
                kafka_listen: addr(DEFAULT_KAFKA_LISTEN),
                schema_registry_listen: None,
                log_format: LogFormat::Human,
                log_level: DEFAULT_LOG_LEVEL.to_owned(),
                config_file: None,
                rest_auth: RestAuth::default(),
                rest_tls: None,
                kafka_tls: None,
                kafka_advertised: None,
                kafka_sasl: KafkaSasl {
                    users: Vec::new(),
                    mechanisms: Mechanism::ALL.to_vec(),
                },
            }
        );
    }

    #[test]
    fn file_beats_defaults_and_args_beat_file() {
        let file = FileSettings::parse(
            r#"
            data_dir = "/var/lib/headwater"
            rest_listen = "0.0.0.0:18083"
            kafka_listen = "0.0.0.0:19092"
            log_format = "json"
            log_level = "debug"
            "#,
        )
        .expect("valid file");

        let from_file = Settings::merge(&WorkerArgs::default(), None, file.clone()).expect("ok");
        assert_eq!(from_file.data_dir, PathBuf::from("/var/lib/headwater"));
        assert_eq!(from_file.rest_listen, addr("0.0.0.0:18083"));
        assert_eq!(from_file.kafka_listen, addr("0.0.0.0:19092"));
        assert_eq!(from_file.log_format, LogFormat::Json);
        assert_eq!(from_file.log_level, "debug");

        let args = WorkerArgs {
            data_dir: Some(PathBuf::from("here")),
            rest_listen: Some(addr("127.0.0.1:1")),
            kafka_listen: Some(addr("127.0.0.1:2")),
            log_format: Some(LogFormat::Human),
            log_level: Some("warn".to_owned()),
            config: Some(PathBuf::from("worker.toml")),
            connector_files: Vec::new(),
            ..WorkerArgs::default()
        };
        let from_args = Settings::merge(&args, Some("trace"), file).expect("ok");
        assert_eq!(from_args.data_dir, PathBuf::from("here"));
        assert_eq!(from_args.rest_listen, addr("127.0.0.1:1"));
        assert_eq!(from_args.kafka_listen, addr("127.0.0.1:2"));
        assert_eq!(from_args.log_format, LogFormat::Human);
        assert_eq!(from_args.log_level, "warn");
        assert_eq!(from_args.config_file, Some(PathBuf::from("worker.toml")));
    }

    #[test]
    fn rust_log_ranks_between_log_level_and_file() {
        let file = FileSettings {
            log_level: Some("error".to_owned()),
            ..FileSettings::default()
        };
        let settings = Settings::merge(&WorkerArgs::default(), Some("debug"), file.clone());
        assert_eq!(settings.expect("ok").log_level, "debug");
        let blank = Settings::merge(&WorkerArgs::default(), Some("  "), file.clone());
        assert_eq!(blank.expect("ok").log_level, "error");
        let bad = Settings::merge(&WorkerArgs::default(), Some("verbose"), file)
            .expect_err("invalid RUST_LOG");
        assert_eq!(bad.code(), 2);
        assert!(bad.message().starts_with("invalid RUST_LOG"), "{bad}");
    }

    #[test]
    fn rest_auth_resolves_and_tls_is_refused() {
        let file = FileSettings::parse(
            r#"
            rest_auth_token = "from-file"
            rest_auth_users = ["alice:pw1", "bob:pw:2"]
            "#,
        )
        .expect("valid file");
        let s = Settings::merge(&WorkerArgs::default(), None, file.clone()).expect("ok");
        assert_eq!(s.rest_auth.token.as_deref(), Some("from-file"));
        assert_eq!(
            s.rest_auth.users,
            [
                ("alice".to_owned(), "pw1".to_owned()),
                ("bob".to_owned(), "pw:2".to_owned())
            ]
        );
        let shown = format!("{s:?}");
        assert!(
            !shown.contains("from-file") && !shown.contains("pw1"),
            "{shown}"
        );

        let args = WorkerArgs {
            rest_auth_token: Some("flag".into()),
            rest_auth_users: vec!["carol:x".into()],
            ..WorkerArgs::default()
        };
        let s = Settings::merge(&args, None, file).expect("ok");
        assert_eq!(s.rest_auth.token.as_deref(), Some("flag"));
        assert_eq!(s.rest_auth.users, [("carol".to_owned(), "x".to_owned())]);

        let bad = WorkerArgs {
            rest_auth_users: vec!["dave".into()],
            ..WorkerArgs::default()
        };
        let err = Settings::merge(&bad, None, FileSettings::default()).expect_err("bad user");
        assert_eq!(err.code(), 2);
        assert!(err.message().contains("USER:PASSWORD"), "{err}");

        let tls = FileSettings::parse(r#"rest_tls_cert = "/etc/cert.pem""#).expect("parses");
        let err = Settings::merge(&WorkerArgs::default(), None, tls).expect_err("tls");
        assert_eq!(err.code(), 2);
        assert!(err.message().contains("go together"), "{err}");

        let tls =
            FileSettings::parse("rest_tls_cert = \"/etc/c.pem\"\nrest_tls_key = \"/etc/k.pem\"")
                .expect("parses");
        let args = WorkerArgs {
            rest_tls_key: Some("/run/k.pem".into()),
            ..WorkerArgs::default()
        };
        let s = Settings::merge(&args, None, tls).expect("both set");
        let files = s.rest_tls.expect("tls on");
        assert_eq!(files.cert, Path::new("/etc/c.pem"));
        assert_eq!(
            files.key,
            Path::new("/run/k.pem"),
            "the flag wins over the file"
        );
        assert_eq!(files.client_ca, None);
    }

    #[test]
    fn kafka_tls_and_advertised_address() {
        let merge = |text: &str| {
            Settings::merge(
                &WorkerArgs::default(),
                None,
                FileSettings::parse(text).expect("parses"),
            )
        };
        let s = merge("kafka_tls_cert = \"c.pem\"\nkafka_tls_key = \"k.pem\"\nkafka_tls_client_ca = \"ca.pem\"")
            .expect("ok");
        let files = s.kafka_tls.expect("kafka tls");
        assert_eq!(
            files.client_ca,
            Some(("kafka_tls_client_ca", PathBuf::from("ca.pem")))
        );
        assert!(s.rest_tls.is_none());
        for (text, message) in [
            ("kafka_tls_key = \"k.pem\"", "go together"),
            (
                "kafka_tls_client_ca = \"ca.pem\"",
                "needs TLS on the Kafka listener",
            ),
            ("kafka_advertised_address = \"broker\"", "is not HOST:PORT"),
            (
                "kafka_advertised_address = \"broker:0\"",
                "is not HOST:PORT",
            ),
            (
                "kafka_advertised_address = \"::1:9092\"",
                "is not HOST:PORT",
            ),
            (
                "kafka_advertised_address = \"a b:9092\"",
                "is not HOST:PORT",
            ),
            (
                "kafka_advertised_address = \"broker:+9092\"",
                "is not HOST:PORT",
            ),
        ] {
            let err = merge(text).expect_err(text);
            assert_eq!(err.code(), 2);
            assert!(err.message().contains(message), "{text}: {err}");
        }
        for (text, host, port) in [
            ("broker.example.com:9093", "broker.example.com", 9093),
            ("10.0.0.7:19092", "10.0.0.7", 19092),
            ("[fd00::7]:9092", "fd00::7", 9092),
        ] {
            let s = merge(&format!("kafka_advertised_address = \"{text}\"")).expect(text);
            assert_eq!(s.kafka_advertised, Some((host.to_owned(), port)));
        }
        assert_eq!(
            merge("kafka_advertised_address = \"\"")
                .unwrap()
                .kafka_advertised,
            None
        );
        let s = merge("kafka_sasl_users = [\"alice:a:b\", \"\"]").unwrap();
        assert_eq!(
            s.kafka_sasl,
            KafkaSasl {
                users: vec![("alice".to_owned(), "a:b".to_owned())],
                mechanisms: Mechanism::ALL.to_vec(),
            }
        );
        let s = merge("kafka_sasl_mechanisms = [\"SCRAM-SHA-512\", \" PLAIN\"]").unwrap();
        assert_eq!(
            s.kafka_sasl.mechanisms,
            [Mechanism::ScramSha512, Mechanism::Plain]
        );
        let err = merge("kafka_sasl_mechanisms = [\"GSSAPI\"]").unwrap_err();
        assert!(err.message().contains("'GSSAPI'"), "{err}");
        assert!(!format!("{s:?}").contains("a:b"), "no password in Debug");
        let err = merge("kafka_sasl_users = [\"bob\"]").unwrap_err();
        assert!(
            err.message().contains("kafka_sasl_users") && !err.message().contains("bob"),
            "no echo of what may be a password: {err}"
        );
        let err = merge("kafka_sasl_users = [\"bob:\"]").unwrap_err();
        assert!(err.message().contains("'bob'"), "{err}");
        let err = merge("kafka_sasl_users = [\"bob:1\", \"bob:2\"]").unwrap_err();
        assert!(err.message().contains("listed twice"), "{err}");
        // An empty flag or variable does not switch off the file's users.
        let args = WorkerArgs {
            kafka_sasl_users: vec![String::new()],
            ..WorkerArgs::default()
        };
        let file = FileSettings::parse("kafka_sasl_users = [\"alice:x\"]").unwrap();
        let s = Settings::merge(&args, None, file).unwrap();
        assert!(s.kafka_sasl.enabled());
    }

    #[test]
    fn empty_data_dir_is_rejected() {
        let file = FileSettings::parse(r#"data_dir = """#).expect("parses");
        let err = Settings::merge(&WorkerArgs::default(), None, file).expect_err("empty");
        assert_eq!(err.code(), 2);
    }

    #[test]
    fn file_errors_are_located_and_single_line() {
        let cases = [
            (
                "rest_listen = \"0.0.0.0:1\"\nbogus = 1\n",
                "line 2, column 1",
                "unknown field `bogus`",
            ),
            (
                "[worker]\ndata_dir = \"x\"\n",
                "line 1",
                "unknown field `worker`",
            ),
            (
                "rest_listen = \"localhost\"\n",
                "line 1",
                "invalid socket address 'localhost'",
            ),
            (
                "kafka_listen = 9092\n",
                "line 1",
                "(in `kafka_listen = 9092`)",
            ),
            ("x = \"é\"", "line 1, column 1", "unknown field `x`"),
            ("log_format = \"xml\"\n", "line 1", "unknown variant `xml`"),
            ("log_level = \"verbose\"\n", "line 1", "not a log level"),
            ("data_dir = \n", "line 1", ""),
        ];
        for (text, location, detail) in cases {
            let err = FileSettings::parse(text).expect_err(text);
            assert!(!err.contains('\n'), "{err}");
            assert!(err.starts_with(location), "{text:?}: {err}");
            assert!(err.contains(detail), "{text:?}: {err}");
        }
    }

    #[test]
    fn load_reports_unreadable_files() {
        let err =
            FileSettings::load(Path::new("/nonexistent/headwater.toml")).expect_err("missing");
        assert_eq!(err.code(), 2);
        assert!(
            err.message()
                .starts_with("cannot read config file /nonexistent/headwater.toml:"),
            "{err}"
        );
    }

    #[test]
    fn shipped_config_file_matches_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/worker.toml");
        let file = FileSettings::load(&path).expect("config/worker.toml is valid");
        assert_eq!(
            file,
            FileSettings {
                data_dir: Some(PathBuf::from(DEFAULT_DATA_DIR)),
                rest_listen: Some(addr(DEFAULT_REST_LISTEN)),
                kafka_listen: Some(addr(DEFAULT_KAFKA_LISTEN)),
                schema_registry_listen: None,
                log_format: Some(LogFormat::default()),
                log_level: Some(DEFAULT_LOG_LEVEL.to_owned()),
                rest_auth_token: Some(String::new()),
                rest_auth_users: Some(Vec::new()),
                rest_tls_cert: Some(PathBuf::new()),
                rest_tls_key: Some(PathBuf::new()),
                kafka_tls_cert: Some(PathBuf::new()),
                kafka_tls_key: Some(PathBuf::new()),
                kafka_tls_client_ca: Some(PathBuf::new()),
                kafka_advertised_address: Some(String::new()),
                kafka_sasl_users: Some(Vec::new()),
                kafka_sasl_mechanisms: Some(
                    ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
                        .map(String::from)
                        .to_vec()
                ),
            },
            "every setting must appear in config/worker.toml with its default"
        );
    }
}
