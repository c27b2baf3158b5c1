//! Network receivers: OTLP/HTTP (`:4318`) and OTLP/gRPC (`:4317`). They decode and convert with
//! this crate's protocol layer and hand canonical batches to a [`Sink`] (the server's ingest queue),
//! answering the client only once the sink has made them durable.

pub mod otlp_grpc;
pub mod otlp_http;
pub mod sink;

pub use sink::{Sink, SinkError, SinkFuture};
