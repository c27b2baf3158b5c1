//! The network surfaces of infersight: OTLP receivers (gRPC and HTTP), the HTTP API with
//! `/healthz` and `/metrics`, and the ingest queue that connects receivers to the store.

pub mod api;
pub mod counters;
pub mod otlp_grpc;
pub mod otlp_http;
pub mod queue;
pub mod serve;

pub use counters::Counters;
pub use queue::{IngestQueue, SubmitError, Transform, TransformError};
pub use serve::{BoundAddrs, ServeError, ServeSettings, serve};
