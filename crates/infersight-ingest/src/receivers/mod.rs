//! Network receivers: OTLP/HTTP (`:4318`) and OTLP/gRPC (`:4317`), which are pushed to, and the
//! Prometheus scrape receiver, which pulls. They decode and convert with this crate's protocol
//! layer and hand canonical batches to a [`Sink`] (the server's ingest queue); the push receivers
//! answer the client only once the sink has made them durable. [`HeldRequests`] hands on the
//! request rows held for spans of their request still to come when no export carries them.

pub mod held;
pub mod otlp_grpc;
pub mod otlp_http;
pub mod prom_scrape;
pub mod sink;

pub use held::HeldRequests;
pub use sink::{Sink, SinkError, SinkFuture};

use std::sync::Arc;

use infersight_model::mapping::AttributeMapper;

use crate::otlp::tree::SpanTreeCache;
use infersight_model::telemetry::Counters;

/// What every receiver (HTTP and gRPC) shares: where batches go, how attributes map, the
/// counters, the size limit and the in-flight permits.
#[derive(Clone)]
pub struct ReceiverState {
    pub sink: Arc<dyn Sink>,
    pub mapper: Arc<AttributeMapper>,
    /// Phase spans of recent trace exports, for request spans exported after their children.
    pub span_tree: Arc<SpanTreeCache>,
    pub counters: Arc<Counters>,
    /// Largest accepted body, compressed or not (and the cap on decompressed size).
    pub max_body_bytes: usize,
    /// Requests being read, decoded or converted at once; beyond it the answer is 429, so memory
    /// stays bounded before the ingest queue is reached.
    pub in_flight: Arc<tokio::sync::Semaphore>,
}

impl ReceiverState {
    /// Hands the non-empty batches of a converted request to the sink and waits until they are
    /// durable; a request with nothing to store succeeds at once.
    pub async fn submit(&self, converted: &crate::Converted) -> Result<(), SinkError> {
        let batches: Vec<_> = converted
            .batches
            .iter()
            .filter(|b| b.batch.num_rows() > 0)
            .cloned()
            .collect();
        if batches.is_empty() {
            return Ok(());
        }
        self.sink.submit(batches).await
    }
}
