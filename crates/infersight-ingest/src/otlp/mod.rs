//! OTLP (traces, logs, metrics) from wire bytes to canonical batches: [`decode`] turns a request
//! body into `Export*ServiceRequest` messages, [`convert`] turns those into `TableBatch`es. The
//! gRPC and HTTP servers call both; the file reader reuses them for Collector file-exporter output.
//! [`tokens`] is the part of the trace conversion that turns per-token span events into rows;
//! [`trace_json`] is the serde-free fast path of OTLP/JSON trace decoding.
//! [`tree`] attributes phase spans (`queue`, `prefill`, `decode`) to the request span above them;
//! [`values`] holds what the conversions share (attribute values, rejection tallies).

pub mod convert;
pub mod decode;
pub mod tokens;
pub mod trace_json;
pub mod tree;
pub mod values;

pub use convert::{
    Converted, logs_to_batches, metrics_to_batches, traces_to_batches, traces_to_batches_with,
};
pub use decode::{Encoding, decode_body, decode_logs, decode_metrics, decode_traces};
pub use tokens::{MAX_TOKEN_EVENTS_PER_SPAN, TOKEN_EVENT_NAMES};
pub use tree::{SpanTreeCache, phase_of};
