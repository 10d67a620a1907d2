//! Log output of the worker: `tracing` events to stderr, human or JSON lines.
//!
//! Invariants:
//! * Logs go to stderr only; stdout stays free for command output.
//! * `human` format uses ANSI colours only when stderr is a terminal and
//!   `NO_COLOR` is unset, so piped output is plain text.
//! * `json` format writes exactly one JSON object per line, with the event's
//!   message and fields flattened to the top level (`timestamp`, `level`,
//!   `message`, `target`, plus fields such as `rest`).
//! * A log filter accepted by [`parse_filter`] is always accepted by
//!   [`init`]; typos such as `verbose` are rejected instead of being read as a
//!   target name (which `EnvFilter` would silently do).

use std::io::IsTerminal;
use std::str::FromStr;

use clap::ValueEnum;
use serde::{Deserialize, Deserializer};
use tracing_subscriber::filter::{EnvFilter, LevelFilter};

use crate::failure::Failure;

/// How log lines are rendered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines (the default).
    #[default]
    Human,
    /// One JSON object per line.
    Json,
}

/// Validates a log filter: a level (`trace`, `debug`, `info`, `warn`, `error`,
/// `off`) or comma-separated `EnvFilter` directives such as
/// `info,headwater=debug`. Returns the trimmed filter.
pub fn parse_filter(value: &str) -> Result<String, String> {
    let value = value.trim();
    if value.is_empty() {
        return Err("log filter must not be empty".to_owned());
    }
    for directive in value.split(',').map(str::trim) {
        if directive.is_empty() || directive.contains('=') || directive.contains('[') {
            continue;
        }
        if LevelFilter::from_str(directive).is_err() {
            return Err(format!(
                "'{directive}' is not a log level (expected trace, debug, info, warn, error \
                 or off, or a directive like 'headwater=debug')"
            ));
        }
    }
    EnvFilter::builder()
        .parse(value)
        .map_err(|err| format!("invalid log filter '{value}': {err}"))?;
    Ok(value.to_owned())
}

/// `serde` adapter: deserializes an optional log filter through [`parse_filter`].
pub fn deserialize_filter<'de, D>(deserializer: D) -> Result<Option<String>, D::Error>
where
    D: Deserializer<'de>,
{
    let raw = String::deserialize(deserializer)?;
    parse_filter(&raw)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// Installs the global `tracing` subscriber. Call once, early in `main`.
pub fn init(format: LogFormat, filter: &str) -> Result<(), Failure> {
    let filter = EnvFilter::builder()
        .parse(filter)
        .map_err(|err| Failure::usage(format!("invalid log filter '{filter}': {err}")))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Human => {
            let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            builder.with_ansi(ansi).try_init()
        }
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
    installed.map_err(|err| Failure::runtime(format!("cannot initialise logging: {err}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_levels_and_directives() {
        for ok in [
            "info",
            " DEBUG ",
            "off",
            "warn,headwater=debug",
            "headwater_rest=trace",
            "info,[request]=debug",
        ] {
            assert_eq!(parse_filter(ok).as_deref(), Ok(ok.trim()), "{ok}");
        }
    }

    #[test]
    fn rejects_typos_and_garbage() {
        for bad in ["", "  ", "verbose", "info,loud", "headwater=verbose", "!!"] {
            assert!(parse_filter(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn format_spelling_round_trips() {
        for (name, format) in [("human", LogFormat::Human), ("json", LogFormat::Json)] {
            let parsed = <LogFormat as ValueEnum>::from_str(name, false).expect("valid");
            assert_eq!(parsed, format);
            let from_toml: LogFormat =
                serde::Deserialize::deserialize(serde::de::value::StrDeserializer::<
                    serde::de::value::Error,
                >::new(name))
                .expect("valid");
            assert_eq!(from_toml, format);
        }
        assert_eq!(LogFormat::default(), LogFormat::Human);
    }
}
