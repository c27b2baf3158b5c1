//! Errors of the model layer (schema mismatches, attributes of the wrong type) and the error kinds
//! every crate maps its own errors onto, so the edges (HTTP, gRPC, CLI) answer consistently.

/// What an error means for the caller: the HTTP status, gRPC code and CLI exit code derive from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The input is wrong; retrying the same input will fail again (HTTP 400, exit 2).
    BadRequest,
    /// The input is larger than allowed (HTTP 413).
    TooLarge,
    /// A named thing does not exist (HTTP 404).
    NotFound,
    /// Temporarily unable to accept work; retry later (HTTP 429/503, gRPC RESOURCE_EXHAUSTED/UNAVAILABLE).
    Unavailable,
    /// A bug or an environment failure (disk full, permission denied) (HTTP 500, exit 1).
    Internal,
}

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("attribute `{key}` has type {actual}, expected {expected}")]
    AttributeType {
        key: String,
        expected: &'static str,
        actual: &'static str,
    },
    /// The offending value is kept for the caller but never printed: it may carry personal data.
    #[error("attribute `{key}` has a string value of {} characters that is not a valid {expected}", value.chars().count())]
    AttributeValue {
        key: String,
        expected: &'static str,
        value: String,
    },
    #[error("column `{column}` of table `{table}`: {reason}")]
    Column {
        table: &'static str,
        column: String,
        reason: String,
    },
    #[error("unknown table `{0}`")]
    UnknownTable(String),
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
}

impl ModelError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            ModelError::AttributeType { .. } | ModelError::AttributeValue { .. } => {
                ErrorKind::BadRequest
            }
            ModelError::UnknownTable(_) => ErrorKind::NotFound,
            ModelError::Column { .. } | ModelError::Arrow(_) => ErrorKind::Internal,
        }
    }
}
