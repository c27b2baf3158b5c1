//! OTLP (traces, logs, metrics) from wire bytes to canonical batches: [`decode`] turns a request
//! body into `Export*ServiceRequest` messages, [`convert`] turns those into `TableBatch`es. The
//! gRPC and HTTP servers call both; the file reader reuses them for Collector file-exporter output.
//! [`tokens`] is the part of the trace conversion that turns per-token span events into rows;
//! [`trace_json`] is the serde-free fast path of OTLP/JSON trace decoding.
//! [`tree`] attributes phase spans (`queue`, `prefill`, `decode`) to the request span above them;
//! [`values`] holds what the conversions share (attribute values, rejection tallies).
//! [`correlate`] makes one `requests` row of the spans of one inference request (a gateway's, a
//! router's, the engine's), across exports; [`sampling`] reads how many requests a head-sampled
//! span stands for; [`rebuild`] makes the rows a crash took from the hold again, from stored
//! spans.

pub mod convert;
pub mod correlate;
pub mod decode;
pub mod rebuild;
pub mod sampling;
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
