//! Errors of the receivers: everything that can go wrong between the bytes on the wire (or in a
//! file) and the canonical batches handed to the pipeline. Each error maps onto an
//! [`ErrorKind`] so the HTTP/gRPC servers and the CLI answer consistently (400, 413, 415, …).

use std::path::PathBuf;

use infersight_model::{ErrorKind, ModelError};

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The body is not a valid protobuf encoding of the expected OTLP message.
    #[error("malformed protobuf: {0}")]
    MalformedProtobuf(String),
    /// The body is not valid OTLP/JSON; the message names the position when serde_json knows it.
    #[error("invalid otlp json{}: {message}", position_suffix(*line, *column))]
    InvalidJson {
        message: String,
        line: usize,
        column: usize,
    },
    /// Missing or unknown `Content-Type`; the OTLP/HTTP receiver answers 415.
    #[error("unsupported content type {0}; expected application/x-protobuf or application/json")]
    UnsupportedContentType(String),
    /// A `Content-Encoding` other than gzip, deflate or identity.
    #[error("unsupported content encoding `{0}`; expected gzip, deflate or identity")]
    UnsupportedContentEncoding(String),
    /// The body (compressed or decompressed) exceeds the configured limit.
    #[error("payload too large: exceeds the limit of {limit} bytes")]
    TooLarge { limit: usize },
    /// Converting the request would copy its resource attributes into so many rows that the
    /// result exceeds the limit (a small body can otherwise expand by orders of magnitude).
    #[error(
        "request would expand to about {estimate} bytes after copying resource attributes into every record, more than the limit of {limit}; send fewer records per resource"
    )]
    Expansion { estimate: usize, limit: usize },
    /// The body claims to be compressed (gzip or deflate) but does not decompress.
    #[error("invalid compressed body: {0}")]
    Gzip(String),
    /// An attribute cannot be converted for its canonical column; the whole request is rejected.
    #[error("invalid attribute: {0}")]
    Model(#[from] ModelError),
    /// Reading an input file failed.
    #[error("cannot read `{}`: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The consumer of converted batches (the pipeline or the store) refused a batch.
    #[error("cannot store batch: {0}")]
    Sink(String),
    /// Building an Arrow batch failed (a bug: the records follow the generated schemas).
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
}

fn position_suffix(line: usize, column: usize) -> String {
    if line == 0 {
        String::new()
    } else {
        format!(" at line {line} column {column}")
    }
}

impl IngestError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            IngestError::MalformedProtobuf(_)
            | IngestError::InvalidJson { .. }
            | IngestError::UnsupportedContentType(_)
            | IngestError::UnsupportedContentEncoding(_)
            | IngestError::Gzip(_) => ErrorKind::BadRequest,
            IngestError::TooLarge { .. } | IngestError::Expansion { .. } => ErrorKind::TooLarge,
            IngestError::Model(e) => e.kind(),
            IngestError::Io { source, .. } => match source.kind() {
                std::io::ErrorKind::NotFound => ErrorKind::NotFound,
                std::io::ErrorKind::InvalidData | std::io::ErrorKind::InvalidInput => {
                    ErrorKind::BadRequest
                }
                _ => ErrorKind::Internal,
            },
            IngestError::Sink(_) => ErrorKind::Unavailable,
            IngestError::Arrow(_) => ErrorKind::Internal,
        }
    }

    /// Builds [`IngestError::InvalidJson`] from a serde_json error, keeping its position apart
    /// from its message so the display reads "invalid otlp json at line 1 column 57: …".
    pub(crate) fn from_json(err: &serde_json::Error) -> IngestError {
        let full = err.to_string();
        let suffix = format!(" at line {} column {}", err.line(), err.column());
        let message = full.strip_suffix(&suffix).unwrap_or(&full).to_string();
        IngestError::InvalidJson {
            message,
            line: err.line(),
            column: err.column(),
        }
    }
}
