//! Engine errors, each of which maps to one HTTP status of Kafka Connect's REST API.

use headwater_log::LogError;

/// What went wrong in an engine operation.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// 404: no such connector, task or plugin.
    #[error("{0}")]
    NotFound(String),
    /// 409: the connector already exists.
    #[error("{0}")]
    AlreadyExists(String),
    /// 400: the request is invalid (bad config, wrong state, ...).
    #[error("{0}")]
    BadRequest(String),
    /// 500: the log failed.
    #[error("log error: {0}")]
    Log(#[from] LogError),
    /// 500: anything else.
    #[error("{0}")]
    Internal(String),
}

impl EngineError {
    /// The HTTP status Kafka Connect answers with for this error.
    pub fn http_status(&self) -> u16 {
        match self {
            EngineError::NotFound(_) => 404,
            EngineError::AlreadyExists(_) => 409,
            EngineError::BadRequest(_) => 400,
            EngineError::Log(_) | EngineError::Internal(_) => 500,
        }
    }
}
