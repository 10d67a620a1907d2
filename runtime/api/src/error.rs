//! Error classes a plugin can raise, mirroring Kafka Connect's exception hierarchy.
//!
//! The engine decides what to do from the [`ErrorKind`] alone: `Retriable` errors restart the
//! task with backoff, everything else fails it. A [`ConnectError`] keeps its cause chain so the
//! REST status `trace` can show where a failure came from.

use std::error::Error as StdError;
use std::fmt;

/// A value did not fit its schema, or a schema was malformed (Kafka's `DataException`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataError {
    message: String,
}

impl DataError {
    pub fn new(message: impl Into<String>) -> Self {
        DataError {
            message: message.into(),
        }
    }
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for DataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl StdError for DataError {}

/// What kind of failure a [`ConnectError`] is; decides retry versus fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Transient (connection lost, server restarting): retry with backoff.
    Retriable,
    /// Bad data (Kafka's `DataException`).
    Data,
    /// Bad configuration (Kafka's `ConfigException`).
    Config,
    /// A requested feature this build does not have.
    NotSupported,
    /// Anything else that must stop the task.
    Fatal,
}

/// A failure raised by a connector, task, transform, predicate or converter.
#[derive(Debug)]
pub struct ConnectError {
    kind: ErrorKind,
    message: String,
    cause: Option<Box<dyn StdError + Send + Sync + 'static>>,
}

impl ConnectError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ConnectError {
            kind,
            message: message.into(),
            cause: None,
        }
    }
    pub fn retriable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Retriable, message)
    }
    pub fn data(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Data, message)
    }
    pub fn config(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Config, message)
    }
    pub fn not_supported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotSupported, message)
    }
    pub fn fatal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Fatal, message)
    }
    /// Attaches the underlying cause.
    pub fn with_cause(mut self, cause: impl StdError + Send + Sync + 'static) -> Self {
        self.cause = Some(Box::new(cause));
        self
    }
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
    pub fn message(&self) -> &str {
        &self.message
    }
    pub fn is_retriable(&self) -> bool {
        self.kind == ErrorKind::Retriable
    }
    /// The message followed by every cause, one per line (`Caused by: ...`), as shown in the
    /// REST `trace` field.
    pub fn trace(&self) -> String {
        let mut out = format!("{:?}: {}", self.kind, self.message);
        let mut next: Option<&(dyn StdError + 'static)> = self.source();
        while let Some(cause) = next {
            out.push_str("\nCaused by: ");
            out.push_str(&cause.to_string());
            next = cause.source();
        }
        out
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl StdError for ConnectError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.cause
            .as_deref()
            .map(|c| c as &(dyn StdError + 'static))
    }
}

impl From<DataError> for ConnectError {
    fn from(e: DataError) -> Self {
        ConnectError::data(e.message.clone()).with_cause(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_lists_the_cause_chain() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let err = ConnectError::retriable("cannot reach the database").with_cause(io);
        assert!(err.is_retriable());
        assert_eq!(
            err.trace(),
            "Retriable: cannot reach the database\nCaused by: connection refused"
        );
        let data: ConnectError = DataError::new("bad value").into();
        assert_eq!(data.kind(), ErrorKind::Data);
    }
}
