//! Errors of the root-cause application, classified like every other crate's (bad request / not
//! found / unavailable / internal) so the CLI and the API answer them with the right exit code or
//! status.

use infersight_model::ErrorKind;

#[derive(Debug, thiserror::Error)]
pub enum RcaError {
    /// The caller asked for something malformed (a bad incident id).
    #[error("{0}")]
    BadRequest(String),
    /// The incident does not exist.
    #[error("{0}")]
    NotFound(String),
    /// An incident file could not be read or written.
    #[error("{0}")]
    Io(String),
    #[error(transparent)]
    Query(#[from] infersight_query::QueryError),
}

impl RcaError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            RcaError::BadRequest(_) => ErrorKind::BadRequest,
            RcaError::NotFound(_) => ErrorKind::NotFound,
            RcaError::Io(_) => ErrorKind::Internal,
            RcaError::Query(e) => e.kind(),
        }
    }

    /// An i/o error with the path it concerns.
    pub fn io(path: &std::path::Path, error: impl std::fmt::Display) -> Self {
        RcaError::Io(format!("{}: {error}", path.display()))
    }
}
