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

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use infersight_model::RequestRecord;
use infersight_model::org::DEFAULT_ORG;

use infersight_model::mapping::AttributeMapper;

use crate::otlp::tree::SpanTreeCache;
use infersight_model::telemetry::Counters;

/// What every receiver (HTTP and gRPC) shares: where batches go, how attributes map, the
/// counters, the size limit, the in-flight permits and the decoders' permits.
#[derive(Clone)]
pub struct ReceiverState {
    pub sink: Arc<dyn Sink>,
    pub mapper: Arc<AttributeMapper>,
    /// Phase spans of recent trace exports, for request spans exported after their children;
    /// one tree per org.
    pub span_tree: Arc<OrgSpanTrees>,
    pub counters: Arc<Counters>,
    /// Largest accepted body, compressed or not (and the cap on decompressed size).
    pub max_body_bytes: usize,
    /// Requests being read, waiting for a decoder, decoded or converted at once; beyond it the
    /// answer is 429, so memory stays bounded before the ingest queue is reached.
    pub in_flight: Arc<tokio::sync::Semaphore>,
    /// Requests decoded and converted at once ([`ReceiverState::decode`]); the others of the
    /// `in_flight` wait for a permit. [`decoder_permits`] makes two per core by default.
    pub decoders: Arc<tokio::sync::Semaphore>,
}

/// The [`ReceiverState::decoders`] permits: `threads`, or two per core when it is 0 (one per
/// core acked 0.82–0.89× as many spans in `bench/serve_ingest.sh`'s soak: fewer exports
/// finish together, so the ingest queue folds fewer into each fsynced append).
pub fn decoder_permits(threads: usize) -> Arc<tokio::sync::Semaphore> {
    let threads = match threads {
        0 => 2 * std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    Arc::new(tokio::sync::Semaphore::new(threads))
}

impl ReceiverState {
    /// Hands the non-empty batches of a converted request to the sink and waits until they are
    /// durable; a request with nothing to store succeeds at once.
    pub async fn submit(
        &self,
        org: &IngestOrg,
        converted: &crate::Converted,
    ) -> Result<(), SinkError> {
        let batches: Vec<_> = converted
            .batches
            .iter()
            .filter(|b| b.batch.num_rows() > 0)
            .cloned()
            .collect();
        if batches.is_empty() {
            return Ok(());
        }
        self.sink.submit(&org.0, batches).await
    }

    /// Runs a request's decompression, decoding and conversion on the blocking pool once a
    /// [`ReceiverState::decoders`] permit is free. It is CPU work: more of it at once than there
    /// are cores only adds blocking threads, each holding a decoded export and its allocator's
    /// cache (`bench/serve_ingest.sh`'s soak on 2 cores: 1.9 GB RSS and rising with ~70 such
    /// threads, 1.2 GB and flat with 4 permits, at the same acked rate).
    pub async fn decode<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, tokio::task::JoinError> {
        // never closed; were it, the work would run without a permit rather than not at all
        let permit = self.decoders.clone().acquire_owned().await.ok();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            work()
        })
        .await
    }

    /// Why the sink refuses every submission right now ([`Sink::refusal`]), asked before a
    /// request is read or converted.
    pub fn refusal(&self) -> Option<SinkError> {
        self.sink.refusal()
    }
}

/// The org an export is written for: the ingest gate puts it on the request (from the caller's
/// token and `X-Scope-OrgID`); without authentication there is none and the receivers write
/// for [`DEFAULT_ORG`]. Nothing in the payload can change it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestOrg(pub String);

impl Default for IngestOrg {
    fn default() -> Self {
        IngestOrg(DEFAULT_ORG.to_string())
    }
}

/// The receivers' span trees, one per org: two orgs may send the same trace ids (the same
/// simulator, a replayed file), and one org's spans must never complete, hold back or drop as
/// duplicates another org's request rows.
pub struct OrgSpanTrees {
    trees: Mutex<BTreeMap<String, Arc<SpanTreeCache>>>,
}

impl Default for OrgSpanTrees {
    fn default() -> Self {
        OrgSpanTrees::with_default_org(SpanTreeCache::default())
    }
}

impl OrgSpanTrees {
    /// `tree` serves the default org; other orgs get a default [`SpanTreeCache`] on first use.
    pub fn with_default_org(tree: SpanTreeCache) -> OrgSpanTrees {
        OrgSpanTrees {
            trees: Mutex::new(BTreeMap::from([(DEFAULT_ORG.to_string(), Arc::new(tree))])),
        }
    }

    /// The tree of `org`, made on first use.
    pub fn for_org(&self, org: &str) -> Arc<SpanTreeCache> {
        let mut trees = self.trees.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(trees.entry(org.to_string()).or_default())
    }

    fn each(&self) -> Vec<(String, Arc<SpanTreeCache>)> {
        let trees = self.trees.lock().unwrap_or_else(PoisonError::into_inner);
        trees
            .iter()
            .map(|(org, tree)| (org.clone(), Arc::clone(tree)))
            .collect()
    }

    /// Every org's rows whose traces have been quiet long enough.
    pub fn release_due_requests(&self) -> Vec<(String, Vec<RequestRecord>)> {
        self.each()
            .into_iter()
            .map(|(org, tree)| (org, tree.release_due_requests()))
            .filter(|(_, rows)| !rows.is_empty())
            .collect()
    }

    /// Every org's rows still held.
    pub fn drain_requests(&self) -> Vec<(String, Vec<RequestRecord>)> {
        self.each()
            .into_iter()
            .map(|(org, tree)| (org, tree.drain_requests()))
            .filter(|(_, rows)| !rows.is_empty())
            .collect()
    }

    /// Tells each org's tree about its stored rows (by their `org`; null: the default org).
    pub fn remember_stored_requests(&self, rows: &[RequestRecord]) {
        let mut by_org: BTreeMap<&str, Vec<RequestRecord>> = BTreeMap::new();
        for row in rows {
            by_org
                .entry(row.org.as_deref().unwrap_or(DEFAULT_ORG))
                .or_default()
                .push(row.clone());
        }
        for (org, rows) in by_org {
            self.for_org(org).remember_stored_requests(&rows);
        }
    }

    /// Rows held over every org.
    pub fn held_requests(&self) -> usize {
        self.each()
            .iter()
            .map(|(_, tree)| tree.held_requests())
            .sum()
    }
}
