//! Command-line surface of the `headwater` binary (clap derive).
//!
//! Invariants:
//! * No worker setting has a clap default: an absent flag must stay `None` so
//!   [`crate::settings`] can apply the precedence flag > env > config file >
//!   built-in default. Environment variables are read by clap (`env = ...`)
//!   because they rank just below flags.
//! * Values are validated while parsing (socket addresses, log format, log
//!   filter), so a bad value from a flag or an environment variable is a clap
//!   usage error.
//! * Every parse error becomes a single-line [`Failure`] (exit 2); `--help` and
//!   `--version` are not errors and are returned as [`Parsed::Exit`].
//! * The client subcommands (`connectors`, `topics`, `consume`) share
//!   [`ClientArgs`]: `--url` (env `HEADWATER_URL`, default
//!   [`DEFAULT_URL`]) and optional credentials; they never read worker settings.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::failure::Failure;
use crate::logging::{self, LogFormat};

/// The version string shown by `--version`: crate version plus build commit.
pub const VERSION_LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("HEADWATER_COMMIT"),
    ")"
);

/// Headwater: change data capture in one binary, speaking Kafka Connect's REST
/// dialect.
#[derive(Debug, Parser)]
#[command(
    name = "headwater",
    version = VERSION_LINE,
    propagate_version = true,
    subcommand_required = true,
    arg_required_else_help = false
)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands of `headwater`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a worker: serve the Kafka Connect REST API until SIGINT or SIGTERM.
    ///
    /// Each setting is taken from, in order: its flag, its environment
    /// variable, the config file (--config), the built-in default.
    Worker(Box<WorkerArgs>),
    /// Manage the connectors of a running worker over its REST API.
    Connectors {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: ConnectorsCommand,
    },
    /// List the topics of a running worker's log.
    Topics {
        #[command(flatten)]
        client: ClientArgs,
        /// Print the REST answer as JSON (the default when stdout is not a terminal)
        #[arg(long)]
        json: bool,
    },
    /// Print a topic's records, one JSON object per line.
    ///
    /// Reads what the topic holds and exits; with --follow it starts at the end
    /// (or at the beginning with --from-beginning) and keeps printing new
    /// records until interrupted. Reads are read_committed.
    Consume(ConsumeArgs),
    /// Try Headwater in a minute: a throwaway PostgreSQL with sample tables, a worker,
    /// the sample connector, and the change events as they arrive.
    ///
    /// Needs only the PostgreSQL server binaries (scripts/install-deps installs them).
    /// Everything lives in one temporary directory and is removed on Ctrl-C, unless --keep.
    Quickstart(QuickstartArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish or powershell).
    ///
    /// bash: `headwater completions bash > /etc/bash_completion.d/headwater`;
    /// zsh: `headwater completions zsh > "${fpath[1]}/_headwater"`;
    /// fish: `headwater completions fish > ~/.config/fish/completions/headwater.fish`.
    Completions {
        /// The shell to complete for
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Arguments of `headwater quickstart`.
#[derive(Debug, Clone, Args)]
pub struct QuickstartArgs {
    /// Orders in the sample table (the snapshot copies them, plus 100 customers and 20
    /// products)
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub rows: u64,

    /// Leave PostgreSQL and the worker running on exit (prints how to stop them)
    #[arg(long)]
    pub keep: bool,

    /// Stop this many seconds after the demo changes instead of waiting for Ctrl-C
    #[arg(long, value_name = "SECONDS")]
    pub exit_after: Option<u64>,

    /// REST API port [default: 8083 when free, else any free port]
    #[arg(long, value_name = "PORT")]
    pub rest_port: Option<u16>,

    /// Kafka protocol port [default: 9092 when free, else any free port]
    #[arg(long, value_name = "PORT")]
    pub kafka_port: Option<u16>,
}

/// Writes the completion script for `shell` to `out`.
pub fn write_completions(shell: clap_complete::Shell, out: &mut dyn std::io::Write) {
    clap_complete::generate(shell, &mut Cli::command(), "headwater", out);
}

/// Built-in default of `--url`.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8083";

/// How a client subcommand reaches the worker.
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// Base URL of the worker's REST API (http:// or https://)
    #[arg(long, global = true, value_name = "URL", env = "HEADWATER_URL", default_value = DEFAULT_URL)]
    pub url: String,

    /// PEM file of the CA certificates to trust for an https:// URL
    /// [default: the system's trusted certificates]
    #[arg(long, global = true, value_name = "FILE", env = "HEADWATER_CACERT")]
    pub cacert: Option<PathBuf>,

    /// Bearer token for a worker with rest_auth_token set
    #[arg(
        long,
        global = true,
        value_name = "TOKEN",
        env = "HEADWATER_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,

    /// HTTP Basic credentials for a worker with rest_auth_users set
    #[arg(
        long,
        global = true,
        value_name = "USER:PASSWORD",
        env = "HEADWATER_USER",
        hide_env_values = true
    )]
    pub user: Option<String>,
}

/// `headwater connectors ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum ConnectorsCommand {
    /// List connector names
    List {
        /// Print JSON (the default when stdout is not a terminal)
        #[arg(long)]
        json: bool,
    },
    /// Show a connector's config and tasks
    Get {
        name: String,
        /// Print JSON (the default when stdout is not a terminal)
        #[arg(long)]
        json: bool,
    },
    /// Create a connector from a file: {"name","config"} JSON, flat JSON with
    /// "name", or a .properties file
    Create {
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Print JSON (the default when stdout is not a terminal)
        #[arg(long)]
        json: bool,
    },
    /// Replace a connector's config (creating it if missing) from a file
    Update {
        name: String,
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Print JSON (the default when stdout is not a terminal)
        #[arg(long)]
        json: bool,
    },
    /// Show a connector's and its tasks' states
    Status {
        name: String,
        /// Print JSON (the default when stdout is not a terminal)
        #[arg(long)]
        json: bool,
    },
    /// Pause a connector's tasks
    Pause { name: String },
    /// Resume a paused or stopped connector
    Resume { name: String },
    /// Stop a connector (tear its tasks down; offsets can then be changed)
    Stop { name: String },
    /// Restart a connector (and with --include-tasks its tasks)
    Restart {
        name: String,
        /// Restart the tasks too
        #[arg(long)]
        include_tasks: bool,
        /// Restart only instances that are FAILED
        #[arg(long)]
        only_failed: bool,
        /// Print JSON (the default when stdout is not a terminal)
        #[arg(long)]
        json: bool,
    },
    /// Delete a connector (its offsets are kept)
    Delete { name: String },
}

/// Arguments of `headwater consume`.
#[derive(Debug, Clone, Args)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub client: ClientArgs,

    /// The topic to read
    pub topic: String,

    /// Read only this partition [default: all partitions]
    #[arg(long, value_name = "P")]
    pub partition: Option<u32>,

    /// With --follow: start at the beginning instead of the end
    #[arg(long)]
    pub from_beginning: bool,

    /// Keep polling for new records until interrupted
    #[arg(long)]
    pub follow: bool,

    /// Stop after this many records
    #[arg(long, value_name = "N")]
    pub max: Option<u64>,
}

/// Arguments of `headwater worker`. Every setting is optional here; defaults are
/// applied in [`crate::settings::Settings::resolve`].
#[derive(Debug, Clone, Default, Args)]
pub struct WorkerArgs {
    /// Connector configuration files, created or updated at start (like
    /// connect-standalone): POST /connectors JSON, flat JSON with "name", or
    /// .properties
    #[arg(value_name = "CONNECTOR_FILES")]
    pub connector_files: Vec<PathBuf>,

    /// Directory for the worker's state (lock file, cluster id)
    /// [default: ./data]
    #[arg(long, value_name = "DIR", env = "HEADWATER_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// Address the Kafka Connect REST API listens on [default: 127.0.0.1:8083]
    #[arg(long, value_name = "IP:PORT", env = "HEADWATER_REST_LISTEN")]
    pub rest_listen: Option<SocketAddr>,

    /// Address of the Kafka protocol listener that Kafka clients consume from
    /// (port 0 picks a free port) [default: 127.0.0.1:9092]
    #[arg(long, value_name = "IP:PORT", env = "HEADWATER_KAFKA_LISTEN")]
    pub kafka_listen: Option<SocketAddr>,

    /// Also serve the embedded schema registry on its own listener (it is
    /// always served on the REST listener too) [default: off]
    #[arg(long, value_name = "IP:PORT", env = "HEADWATER_SCHEMA_REGISTRY_LISTEN")]
    pub schema_registry_listen: Option<SocketAddr>,

    /// TOML config file with worker settings (see config/worker.toml)
    #[arg(long, value_name = "FILE", env = "HEADWATER_CONFIG")]
    pub config: Option<PathBuf>,

    /// Log line format [default: human]
    #[arg(long, value_enum, value_name = "FORMAT", env = "HEADWATER_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,

    /// Log filter: a level (trace, debug, info, warn, error, off) or
    /// directives like "info,headwater=debug"; RUST_LOG is used when neither
    /// this flag nor HEADWATER_LOG_LEVEL is set [default: info]
    #[arg(long, value_name = "FILTER", env = "HEADWATER_LOG_LEVEL", value_parser = logging::parse_filter)]
    pub log_level: Option<String>,

    /// Require 'Authorization: Bearer TOKEN' on every REST request except
    /// GET /health [default: off]
    #[arg(
        long,
        value_name = "TOKEN",
        env = "HEADWATER_REST_AUTH_TOKEN",
        hide_env_values = true
    )]
    pub rest_auth_token: Option<String>,

    /// Accept HTTP Basic credentials USER:PASSWORD on the REST API (repeat
    /// the flag, or separate users with commas in the variable) [default: off]
    #[arg(
        long = "rest-auth-user",
        value_name = "USER:PASSWORD",
        env = "HEADWATER_REST_AUTH_USERS",
        hide_env_values = true
    )]
    pub rest_auth_users: Vec<String>,

    /// PEM certificate chain (server certificate first) for HTTPS on the REST
    /// and schema registry listeners; set together with --rest-tls-key
    /// [default: plain HTTP]
    #[arg(long, value_name = "FILE", env = "HEADWATER_REST_TLS_CERT")]
    pub rest_tls_cert: Option<PathBuf>,

    /// PEM private key (unencrypted) of --rest-tls-cert
    #[arg(long, value_name = "FILE", env = "HEADWATER_REST_TLS_KEY")]
    pub rest_tls_key: Option<PathBuf>,

    /// PEM certificate chain (server certificate first) for TLS on the Kafka
    /// listener (clients use security.protocol=SSL); set together with
    /// --kafka-tls-key [default: plain text]
    #[arg(long, value_name = "FILE", env = "HEADWATER_KAFKA_TLS_CERT")]
    pub kafka_tls_cert: Option<PathBuf>,

    /// PEM private key (unencrypted) of --kafka-tls-cert
    #[arg(long, value_name = "FILE", env = "HEADWATER_KAFKA_TLS_KEY")]
    pub kafka_tls_key: Option<PathBuf>,

    /// PEM CA certificates: Kafka clients must present a certificate one of
    /// them signed (Kafka's ssl.client.auth=required) [default: not asked]
    #[arg(long, value_name = "FILE", env = "HEADWATER_KAFKA_TLS_CLIENT_CA")]
    pub kafka_tls_client_ca: Option<PathBuf>,

    /// Require SASL authentication on the Kafka listener as one of these users
    /// USER:PASSWORD (repeat the flag, or separate users with commas in the
    /// variable); clients use security.protocol=SASL_SSL (with TLS) or
    /// SASL_PLAINTEXT [default: no SASL]
    #[arg(
        long = "kafka-sasl-user",
        value_name = "USER:PASSWORD",
        env = "HEADWATER_KAFKA_SASL_USERS",
        hide_env_values = true
    )]
    pub kafka_sasl_users: Vec<String>,

    /// SASL mechanisms offered to Kafka clients, comma-separated (Kafka's
    /// sasl.enabled.mechanisms) [default: PLAIN,SCRAM-SHA-256,SCRAM-SHA-512]
    #[arg(
        long,
        value_name = "LIST",
        env = "HEADWATER_KAFKA_SASL_MECHANISMS",
        value_delimiter = ','
    )]
    pub kafka_sasl_mechanisms: Vec<String>,

    /// HOST:PORT Kafka clients are told to connect to (Kafka's
    /// advertised.listeners) [default: the address each client connected to]
    #[arg(
        long,
        value_name = "HOST:PORT",
        env = "HEADWATER_KAFKA_ADVERTISED_ADDRESS"
    )]
    pub kafka_advertised_address: Option<String>,
}

/// Outcome of parsing the command line.
#[derive(Debug)]
pub enum Parsed {
    /// Run this command.
    Run(Box<Cli>),
    /// Help or version text to print to stdout, then exit 0.
    Exit(String),
}

/// Parses `args` (including the program name).
pub fn parse<I, T>(args: I) -> Result<Parsed, Failure>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let parsed = Cli::command()
        .try_get_matches_from(&args)
        .and_then(|matches| {
            let mut cli = Cli::from_arg_matches(&matches)?;
            split_user_variables(&mut cli, &matches);
            Ok(cli)
        });
    match parsed {
        Ok(cli) => Ok(Parsed::Run(Box::new(cli))),
        Err(err) => match err.kind() {
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                Ok(Parsed::Exit(err.render().to_string()))
            }
            _ => Err(Failure::usage(summarize(&err, &args))),
        },
    }
}

/// `HEADWATER_REST_AUTH_USERS` and `HEADWATER_KAFKA_SASL_USERS` list users separated by
/// commas; the repeatable flags take one `USER:PASSWORD` each, whole (a password may hold a
/// comma there).
fn split_user_variables(cli: &mut Cli, matches: &clap::ArgMatches) {
    let (Command::Worker(worker), Some(("worker", sub))) = (&mut cli.command, matches.subcommand())
    else {
        return;
    };
    for (id, values) in [
        ("rest_auth_users", &mut worker.rest_auth_users),
        ("kafka_sasl_users", &mut worker.kafka_sasl_users),
    ] {
        if sub.value_source(id) == Some(clap::parser::ValueSource::EnvVariable) {
            *values = values
                .iter()
                .flat_map(|v| v.split(','))
                .map(str::to_owned)
                .collect();
        }
    }
}

/// Condenses clap's multi-line error into one line: the error itself, the
/// environment variable a bad value came from (if it did not come from a flag),
/// the possible values, clap's "similar name" tips, and a pointer to the
/// relevant `--help`.
fn summarize(err: &clap::Error, args: &[OsString]) -> String {
    let rendered = err.render().to_string();
    let mut lines = rendered.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or("invalid command line");
    let mut message = first
        .strip_prefix("error:")
        .unwrap_or(first)
        .trim()
        .to_owned();
    // "the following required arguments were not provided:" lists them on the next lines.
    let mut lines = lines.peekable();
    if message.ends_with(':') {
        while let Some(arg) = lines.next_if(|l| l.starts_with('<') || l.starts_with("--")) {
            message.push(' ');
            message.push_str(arg);
        }
    }

    let cli = Cli::command();
    let subcommand = args
        .get(1)
        .and_then(|arg| arg.to_str())
        .and_then(|name| cli.find_subcommand(name));
    if let (Some(subcommand), Some(ContextValue::String(invalid))) =
        (subcommand, err.get(ContextKind::InvalidArg))
    {
        // "--rest-listen <IP:PORT>" -> "rest-listen"
        let long = invalid
            .trim_start_matches('-')
            .split_whitespace()
            .next()
            .unwrap_or_default();
        let flag = format!("--{long}");
        let on_command_line = args.iter().filter_map(|a| a.to_str()).any(|a| {
            a == flag
                || a.strip_prefix(flag.as_str())
                    .is_some_and(|r| r.starts_with('='))
        });
        let env = subcommand
            .get_arguments()
            .find(|arg| arg.get_long() == Some(long))
            .and_then(|arg| arg.get_env());
        if let (false, Some(env)) = (on_command_line, env) {
            message.push_str(&format!(
                " (from environment variable {})",
                env.to_string_lossy()
            ));
        }
    }
    for line in lines {
        if line.starts_with("[possible values:") {
            message.push(' ');
            message.push_str(line);
        } else if let Some(tip) = line.strip_prefix("tip:").filter(|t| t.contains("similar")) {
            message.push_str(&format!(" (tip: {})", tip.trim()));
        }
    }
    let command = match subcommand {
        Some(subcommand) => format!("headwater {}", subcommand.get_name()),
        None => "headwater".to_owned(),
    };
    format!("{message}; see '{command} --help'")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    fn usage_error(args: &[&str]) -> Failure {
        match parse(args) {
            Err(failure) => failure,
            Ok(parsed) => panic!("{args:?} should fail, got {parsed:?}"),
        }
    }

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn user_flags_are_whole_and_user_variables_split_at_commas() {
        let worker = |argv: &[&str]| {
            let Parsed::Run(cli) = parse(argv.iter().copied()).expect("parses") else {
                panic!("expected a command");
            };
            let Command::Worker(args) = cli.command else {
                panic!("expected worker");
            };
            args
        };
        let args = worker(&[
            "headwater",
            "worker",
            "--kafka-sasl-user",
            "alice:pa,ss",
            "--rest-auth-user",
            "bob:x,y",
        ]);
        assert_eq!(args.kafka_sasl_users, ["alice:pa,ss"]);
        assert_eq!(args.rest_auth_users, ["bob:x,y"]);
        // The variable: only this test process sets it (nextest runs each test alone).
        std::env::set_var("HEADWATER_KAFKA_SASL_USERS", "alice:a,bob:b");
        let args = worker(&["headwater", "worker"]);
        std::env::remove_var("HEADWATER_KAFKA_SASL_USERS");
        assert_eq!(args.kafka_sasl_users, ["alice:a", "bob:b"]);
    }

    #[test]
    fn worker_flags_parse_without_defaults() {
        let Parsed::Run(cli) = parse(["headwater", "worker"]).expect("parses") else {
            panic!("expected a command");
        };
        let Command::Worker(args) = cli.command else {
            panic!("expected worker");
        };
        // Env vars could fill these in; the test binary does not set them.
        if std::env::var_os("HEADWATER_REST_LISTEN").is_none() {
            assert_eq!(args.rest_listen, None);
        }
        assert!(args.connector_files.is_empty());

        let Parsed::Run(cli) = parse([
            "headwater",
            "worker",
            "--data-dir",
            "/tmp/x",
            "--rest-listen",
            "0.0.0.0:1234",
            "--kafka-listen",
            "[::1]:9093",
            "--log-format",
            "json",
            "--log-level",
            "debug",
            "a.json",
        ])
        .expect("parses") else {
            panic!("expected a command");
        };
        let Command::Worker(args) = cli.command else {
            panic!("expected worker");
        };
        assert_eq!(args.data_dir, Some(PathBuf::from("/tmp/x")));
        assert_eq!(args.rest_listen, Some("0.0.0.0:1234".parse().unwrap()));
        assert_eq!(args.kafka_listen, Some("[::1]:9093".parse().unwrap()));
        assert_eq!(args.log_format, Some(LogFormat::Json));
        assert_eq!(args.log_level.as_deref(), Some("debug"));
        assert_eq!(args.connector_files, [PathBuf::from("a.json")]);
    }

    #[test]
    fn errors_are_one_line_with_help_pointer() {
        let cases: &[(&[&str], &str, &str)] = &[
            (
                &["headwater", "worker", "--bogus"],
                "unexpected argument '--bogus'",
                "see 'headwater worker --help'",
            ),
            (
                &["headwater", "worker", "--rest-listen", "nope"],
                "invalid value 'nope' for '--rest-listen <IP:PORT>'",
                "see 'headwater worker --help'",
            ),
            (
                &["headwater", "worker", "--log-level", "verbose"],
                "'verbose' is not a log level",
                "see 'headwater worker --help'",
            ),
            (
                &["headwater", "worker", "--log-format", "xml"],
                "invalid value 'xml' for '--log-format <FORMAT>' [possible values: human, json]",
                "see 'headwater worker --help'",
            ),
            (
                &["headwater"],
                "requires a subcommand",
                "see 'headwater --help'",
            ),
            (
                &["headwater", "wrker"],
                "unrecognized subcommand 'wrker'",
                "see 'headwater --help'",
            ),
        ];
        for (args, contains, ends_with) in cases {
            let failure = usage_error(args);
            assert_eq!(failure.code(), 2);
            let message = failure.message();
            assert!(!message.contains('\n'), "{message}");
            assert!(!message.starts_with("error"), "{message}");
            assert!(message.contains(contains), "{args:?}: {message}");
            assert!(message.ends_with(ends_with), "{args:?}: {message}");
        }
    }

    #[test]
    fn env_sourced_values_are_attributed_to_their_variable() {
        // A value that clap read from the environment is reported as such; the
        // same value given as a flag is not. (Uses a variable name unique to
        // this test so parallel tests are unaffected.)
        let name = "HEADWATER_KAFKA_LISTEN";
        if std::env::var_os(name).is_some() {
            return;
        }
        let cmd = Cli::command();
        let worker = cmd.find_subcommand("worker").expect("worker");
        let kafka = worker
            .get_arguments()
            .find(|arg| arg.get_long() == Some("kafka-listen"))
            .expect("--kafka-listen");
        assert_eq!(kafka.get_env().and_then(|e| e.to_str()), Some(name));

        let err = Cli::command()
            .try_get_matches_from(["headwater", "worker", "--kafka-listen", "nope"])
            .expect_err("invalid");
        let from_flag = summarize(
            &err,
            &[
                "headwater".into(),
                "worker".into(),
                "--kafka-listen".into(),
                "nope".into(),
            ],
        );
        assert!(!from_flag.contains("environment"), "{from_flag}");
        let from_env = summarize(&err, &["headwater".into(), "worker".into()]);
        assert!(
            from_env.contains("(from environment variable HEADWATER_KAFKA_LISTEN)"),
            "{from_env}"
        );
    }

    #[test]
    fn client_subcommands_parse() {
        let Parsed::Run(cli) = parse([
            "headwater",
            "connectors",
            "restart",
            "x",
            "--include-tasks",
            "--url",
            "http://h:1",
        ])
        .expect("parses") else {
            panic!("expected a command");
        };
        let Command::Connectors { client, command } = cli.command else {
            panic!("expected connectors");
        };
        assert_eq!(client.url, "http://h:1");
        assert!(matches!(
            command,
            ConnectorsCommand::Restart {
                include_tasks: true,
                only_failed: false,
                ..
            }
        ));
        let Parsed::Run(cli) = parse([
            "headwater",
            "consume",
            "t",
            "--partition",
            "2",
            "--follow",
            "--max",
            "5",
        ])
        .expect("parses") else {
            panic!("expected a command");
        };
        let Command::Consume(args) = cli.command else {
            panic!("expected consume");
        };
        assert_eq!(
            (args.topic.as_str(), args.partition, args.follow, args.max),
            ("t", Some(2), true, Some(5))
        );
        let failure = usage_error(&["headwater", "connectors", "get"]);
        assert_eq!(failure.code(), 2);
        assert!(
            failure
                .message()
                .ends_with("see 'headwater connectors --help'"),
            "{}",
            failure.message()
        );
        let failure = usage_error(&["headwater", "consume", "t", "--max", "many"]);
        assert!(failure.message().contains("--max"), "{}", failure.message());
    }

    #[test]
    fn similar_flag_tip_is_kept() {
        let failure = usage_error(&["headwater", "worker", "--data-dr", "x"]);
        assert!(failure.message().contains("tip:"), "{}", failure.message());
        assert!(
            failure.message().contains("--data-dir"),
            "{}",
            failure.message()
        );
    }

    #[test]
    fn help_and_version_are_not_errors() {
        match parse(["headwater", "--version"]).expect("not an error") {
            Parsed::Exit(text) => assert!(text.contains(env!("CARGO_PKG_VERSION")), "{text}"),
            other => panic!("unexpected {other:?}"),
        }
        match parse(["headwater", "worker", "--help"]).expect("not an error") {
            Parsed::Exit(text) => {
                for needle in [
                    "--data-dir",
                    "HEADWATER_DATA_DIR",
                    "HEADWATER_REST_LISTEN",
                    "HEADWATER_KAFKA_LISTEN",
                    "HEADWATER_CONFIG",
                    "HEADWATER_LOG_FORMAT",
                    "HEADWATER_LOG_LEVEL",
                    "CONNECTOR_FILES",
                ] {
                    assert!(text.contains(needle), "help lacks {needle}: {text}");
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn help_states_the_real_defaults() {
        use crate::settings::{
            DEFAULT_DATA_DIR, DEFAULT_KAFKA_LISTEN, DEFAULT_LOG_LEVEL, DEFAULT_REST_LISTEN,
        };
        let help = Cli::command()
            .find_subcommand_mut("worker")
            .expect("worker subcommand")
            .render_long_help()
            .to_string();
        for default in [
            DEFAULT_DATA_DIR,
            DEFAULT_REST_LISTEN,
            DEFAULT_KAFKA_LISTEN,
            DEFAULT_LOG_LEVEL,
            LogFormat::default()
                .to_possible_value()
                .expect("visible value")
                .get_name(),
        ] {
            assert!(
                help.contains(&format!("[default: {default}]")),
                "help does not mention default {default}: {help}"
            );
        }
    }
}
