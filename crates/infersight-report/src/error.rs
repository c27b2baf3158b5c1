//! Errors of the report layer, classified like every other crate's (bad request / not found /
//! unavailable / internal) so the CLI and API answer them with the right exit code or status.

use infersight_model::ErrorKind;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The caller asked for something malformed (unknown format, bad incident id).
    #[error("{0}")]
    BadRequest(String),
    /// The incident (or runbook) does not exist.
    #[error("{0}")]
    NotFound(String),
    /// A file or index could not be read or written.
    #[error("{0}")]
    Io(String),
    #[error(transparent)]
    Query(#[from] infersight_query::QueryError),
    /// The incident store or the root-cause analysis failed.
    #[error(transparent)]
    Rca(#[from] infersight_rca::RcaError),
}

impl ReportError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            ReportError::BadRequest(_) => ErrorKind::BadRequest,
            ReportError::NotFound(_) => ErrorKind::NotFound,
            ReportError::Io(_) => ErrorKind::Internal,
            ReportError::Query(e) => e.kind(),
            ReportError::Rca(e) => e.kind(),
        }
    }

    /// An i/o error with the path it concerns.
    pub fn io(path: &std::path::Path, error: impl std::fmt::Display) -> Self {
        ReportError::Io(format!("{}: {error}", path.display()))
    }
}
