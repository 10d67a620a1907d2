//! The one error type the `headwater` binary reports before exiting non-zero.
//!
//! Invariants:
//! * A [`Failure`] carries the process exit code with it: [`Failure::usage`]
//!   (exit 2) for anything the operator must fix before retrying — bad flags or
//!   values, an unreadable or invalid config file, unsupported arguments, a data
//!   dir already in use — and [`Failure::runtime`] (exit 1) for operational
//!   failures such as I/O errors or an address that cannot be bound.
//! * Its message is always a single line (newlines are folded into spaces), so
//!   `main` can print exactly one `error: <message>` line to stderr.

use std::fmt;

/// Exit code for usage and configuration errors (matches clap's convention).
pub const EXIT_USAGE: u8 = 2;
/// Exit code for runtime failures.
pub const EXIT_RUNTIME: u8 = 1;

/// A fatal error with the exit code it maps to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    /// A usage/configuration error: exit code 2.
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(EXIT_USAGE, message.into())
    }

    /// A runtime failure: exit code 1.
    pub fn runtime(message: impl Into<String>) -> Self {
        Self::new(EXIT_RUNTIME, message.into())
    }

    fn new(code: u8, message: String) -> Self {
        Self {
            code,
            message: one_line(&message),
        }
    }

    /// The process exit code for this failure.
    pub fn code(&self) -> u8 {
        self.code
    }

    /// The single-line message (without the `error: ` prefix).
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// Joins the non-blank lines of `text`, each trimmed, with single spaces.
pub fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_single_line_and_codes_fixed() {
        let usage = Failure::usage("bad\n  value\r\n\nhere  too ");
        assert_eq!(usage.message(), "bad value here  too");
        assert_eq!(usage.code(), 2);
        let runtime = Failure::runtime("boom");
        assert_eq!(runtime.code(), 1);
        assert_eq!(runtime.to_string(), "boom");
    }
}
