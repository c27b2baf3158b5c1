//! OTLP (traces, logs, metrics) from wire bytes to canonical batches: [`decode`] turns a request
//! body into `Export*ServiceRequest` messages, [`convert`] turns those into `TableBatch`es. The
//! gRPC and HTTP servers call both; the file reader reuses them for Collector file-exporter output.
//! [`tokens`] is the part of the trace conversion that turns per-token span events into rows.

pub mod convert;
pub mod decode;
pub mod tokens;

pub use convert::{Converted, logs_to_batches, metrics_to_batches, traces_to_batches};
pub use decode::{Encoding, decode_body, decode_logs, decode_metrics, decode_traces};
pub use tokens::{MAX_TOKEN_EVENTS_PER_SPAN, TOKEN_EVENT_NAMES};
