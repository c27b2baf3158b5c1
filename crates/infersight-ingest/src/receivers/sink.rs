//! The seam between receivers and whatever stores their batches: receivers know only this trait,
//! so the store (or a remote backend) can change without touching protocol code.

use std::future::Future;
use std::pin::Pin;

use infersight_model::{ErrorKind, TableBatch};

pub type SinkFuture = Pin<Box<dyn Future<Output = Result<(), SinkError>> + Send>>;

/// Accepts converted batches of one org; the future resolves once they are durable
/// (acknowledged data is never lost) or with the reason they were not taken. The sink stamps
/// every row it stores with `org` (`infersight_model::org`), whatever the rows say.
pub trait Sink: Send + Sync + 'static {
    fn submit(&self, org: &str, batches: Vec<TableBatch>) -> SinkFuture;

    /// Why any submission would be refused right now (the store over its memtable's hard limit):
    /// receivers answer it before the work they can still skip (OTLP/HTTP before reading the
    /// body; OTLP/gRPC, whose message tonic has decoded, before converting it), so an overloaded
    /// server spends its cores catching up, not on work it would throw away. `None` when
    /// submissions are taken.
    fn refusal(&self) -> Option<SinkError> {
        None
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum SinkError {
    /// No room right now: the client should retry (HTTP 429, gRPC RESOURCE_EXHAUSTED).
    #[error("ingest queue is full; retry later")]
    Full,
    #[error("{0}")]
    Rejected(String),
    #[error("store unavailable: {0}")]
    Unavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl SinkError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            SinkError::Full | SinkError::Unavailable(_) => ErrorKind::Unavailable,
            SinkError::Rejected(_) => ErrorKind::BadRequest,
            SinkError::Internal(_) => ErrorKind::Internal,
        }
    }
}
