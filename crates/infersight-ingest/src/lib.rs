//! Receivers' protocol layer: OTLP payloads (protobuf or JSON, gzip or plain), Prometheus text
//! expositions and files (OTLP JSON lines, JSON lines, raw text logs) → canonical `TableBatch`es
//! for the pipeline. The network receivers (OTLP gRPC/HTTP and the Prometheus scraper, in
//! [`receivers`]) and the `infersight ingest` command are built on it; receivers hand their
//! batches to a [`Sink`].

pub mod error;
pub mod files;
pub mod otlp;
pub mod prometheus;
pub mod receivers;

pub use error::IngestError;
pub use files::{FileFormat, FileOptions, FileStream, FileSummary, read_file, read_file_of_stream};
pub use otlp::convert::{
    Converted, logs_to_batches, metrics_to_batches, traces_to_batches, traces_to_batches_with,
};
pub use otlp::decode::{Encoding, decode_body, decode_logs, decode_metrics, decode_traces};
pub use otlp::tree::SpanTreeCache;
pub use receivers::{Sink, SinkError, SinkFuture};
