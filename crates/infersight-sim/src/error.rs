//! Errors of the simulator: bad configuration, unreadable trace data, and sink failures (the
//! caller's IO). Lowercase messages; the binary maps them to exit codes through `kind()`.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("unknown scenario `{0}` (see `infersight scenarios`)")]
    UnknownScenario(String),
    #[error("invalid simulation setting: {0}")]
    Config(String),
    #[error("trace data not found at {path} (set INFERSIGHT_DATA_DIR, or use --arrivals poisson)")]
    DataMissing { path: PathBuf },
    #[error("reading trace {path}: {message}")]
    Data { path: PathBuf, message: String },
    #[error("writing {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("telemetry sink: {0}")]
    Sink(String),
}

/// Whether an error is the caller's input (usage) or a failure while running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimErrorKind {
    BadInput,
    Failed,
}

impl SimError {
    pub fn kind(&self) -> SimErrorKind {
        match self {
            SimError::UnknownScenario(_)
            | SimError::Config(_)
            | SimError::DataMissing { .. }
            | SimError::Data { .. } => SimErrorKind::BadInput,
            SimError::Io { .. } | SimError::Sink(_) => SimErrorKind::Failed,
        }
    }
}
