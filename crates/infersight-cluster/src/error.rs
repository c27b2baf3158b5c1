//! Errors of the cluster layer (object-store failures, conflicting commits, leases, stores that do
//! not honour conditional writes), each mapped onto the shared [`ErrorKind`].

use infersight_model::ErrorKind;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
    /// An object the catalog wrote cannot be read back as what it should be.
    #[error("catalog object `{path}` is not valid: {reason}")]
    Corrupt { path: String, reason: String },
    /// The commit contradicts the catalog (a segment added twice, removed when absent, a WAL
    /// sequence going back, a fenced-off lease epoch); retrying the same actions fails again.
    #[error("commit conflicts with the catalog: {0}")]
    Conflict(String),
    /// Other committers won every race for the next log sequence.
    #[error(
        "gave up committing after {attempts} attempts: other committers kept winning the next sequence"
    )]
    Contended { attempts: u32 },
    /// The store's conditional writes cannot be trusted, so neither can the catalog or leases.
    #[error("refusing the object store: {0}")]
    UnsafeStore(String),
    /// The lease was taken over (after it expired) or released: the holder must stop acting.
    #[error("lease `{name}` is no longer held by `{holder}`")]
    LeaseLost { name: String, holder: String },
    #[error("invalid {what} `{value}`: {reason}")]
    Invalid {
        what: &'static str,
        value: String,
        reason: &'static str,
    },
}

impl ClusterError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            ClusterError::Store(object_store::Error::NotFound { .. }) => ErrorKind::NotFound,
            ClusterError::Store(_) | ClusterError::Contended { .. } => ErrorKind::Unavailable,
            ClusterError::LeaseLost { .. } => ErrorKind::Unavailable,
            ClusterError::Conflict(_) | ClusterError::Invalid { .. } => ErrorKind::BadRequest,
            ClusterError::UnsafeStore(_) => ErrorKind::BadRequest,
            ClusterError::Corrupt { .. } => ErrorKind::Internal,
        }
    }
}
