//! OTLP (traces, logs, metrics) from wire bytes to canonical batches: [`decode`] turns a request
//! body into `Export*ServiceRequest` messages, [`convert`] turns those into `TableBatch`es. The
//! gRPC and HTTP servers call both; the file reader reuses them for Collector file-exporter output.

pub mod convert;
pub mod decode;

pub use convert::{Converted, logs_to_batches, metrics_to_batches, traces_to_batches};
pub use decode::{Encoding, decode_body, decode_logs, decode_metrics, decode_traces};
