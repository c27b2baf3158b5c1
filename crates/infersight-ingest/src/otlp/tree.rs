//! The span tree, as far as the latency breakdown needs it: spans named after a serving phase
//! (`queue`/`queued`, `prefill`, `decode`, …) are attributed to the request span above them, and
//! their times become the request's [`SpanPhases`] (see `infersight_model::breakdown`), which fill
//! the latency columns its attributes leave NULL — for engines and gateways that trace each phase
//! as a child span instead of setting `gen_ai.latency.*` attributes.
//!
//! Phase spans are found in the same export as their request span, and across exports: an engine's
//! child spans end, and are therefore exported, before their parent, so a bounded memory of recent
//! phase spans ([`SpanTreeCache`], oldest traces forgotten first) lets a parent that arrives in a
//! later export find them. Phase spans that arrive *after* their request span (another service,
//! a slower exporter) are not attributed; the spans table still holds them.
//!
//! A phase span belongs to every ancestor reachable through spans of its own export, up to
//! [`MAX_DEPTH`] levels (`llm_request → scheduler → prefill` works when the scheduler span is in
//! the same export as the prefill span).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use infersight_model::RequestRecord;
use infersight_model::breakdown::SpanPhases;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use super::correlate::{ExportRequests, HoldLimits, RequestHold};

/// How far up a phase span's ancestors are followed.
pub const MAX_DEPTH: usize = 8;

/// Phase spans remembered across exports by default (about 100 bytes each).
pub const DEFAULT_CACHE_SPANS: usize = 65_536;

/// The serving phase a span's name stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Queue,
    Prefill,
    Decode,
}

/// The phase of a span by its name's words (split at `_`, `-`, `.`, `/`, `:` and spaces, any
/// case): `queue`, `queued`, `waiting` → queue; `prefill` → prefill; `decode`, `decoding` →
/// decode. `generate`, `detokenize` and `tokenize` are not phases.
pub fn phase_of(name: &str) -> Option<Phase> {
    let mut words = name
        .split(['_', '-', '.', '/', ' ', ':'])
        .filter(|w| !w.is_empty());
    const WORDS: [(&str, Phase); 10] = [
        ("queue", Phase::Queue),
        ("queued", Phase::Queue),
        ("queuing", Phase::Queue),
        ("queueing", Phase::Queue),
        ("enqueued", Phase::Queue),
        ("waiting", Phase::Queue),
        ("prefill", Phase::Prefill),
        ("prefilling", Phase::Prefill),
        ("decode", Phase::Decode),
        ("decoding", Phase::Decode),
    ];
    // Called for every span of every export: no allocation.
    words.find_map(|word| {
        WORDS
            .iter()
            .find(|(w, _)| word.eq_ignore_ascii_case(w))
            .map(|&(_, phase)| phase)
    })
}

/// One phase span with the span ids above it.
#[derive(Debug, Clone)]
struct PhaseNode {
    phase: Phase,
    start_ns: i64,
    end_ns: i64,
    ancestors: Vec<u64>,
}

impl PhaseNode {
    fn under(&self, span_id: u64) -> bool {
        self.ancestors.contains(&span_id)
    }
}

pub(crate) fn trace_key(bytes: &[u8]) -> Option<u128> {
    Some(u128::from_be_bytes(bytes.try_into().ok()?))
}

pub(crate) fn span_key(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.try_into().ok()?))
}

/// Folds phase nodes into phase times.
#[derive(Debug, Default)]
struct PhaseAccumulator {
    phases: SpanPhases,
    any: bool,
}

impl PhaseAccumulator {
    fn add(&mut self, node: &PhaseNode) {
        if node.end_ns < node.start_ns {
            return;
        }
        self.any = true;
        let extend = |slot: &mut Option<(i64, i64)>| {
            let (first, last) = slot.get_or_insert((node.start_ns, node.end_ns));
            *first = (*first).min(node.start_ns);
            *last = (*last).max(node.end_ns);
        };
        match node.phase {
            Phase::Queue => {
                let ms = (node.end_ns - node.start_ns) as f64 / 1e6;
                *self.phases.queue_ms.get_or_insert(0.0) += ms;
            }
            Phase::Prefill => extend(&mut self.phases.prefill_ns),
            Phase::Decode => extend(&mut self.phases.decode_ns),
        }
    }

    fn finish(self) -> Option<SpanPhases> {
        self.any.then_some(self.phases)
    }
}

/// The phase spans of one export, by trace.
#[derive(Debug, Default)]
pub struct BatchTree {
    nodes: HashMap<u128, Vec<PhaseNode>>,
}

impl BatchTree {
    /// Finds the phase spans of `request` and their ancestors within it; costs one name check per
    /// span when there are none.
    pub fn build(request: &ExportTraceServiceRequest) -> BatchTree {
        let spans = || {
            request
                .resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .flat_map(|s| &s.spans)
        };
        if !spans().any(|span| phase_of(&span.name).is_some()) {
            return BatchTree::default();
        }
        let mut parents: HashMap<(u128, u64), u64> = HashMap::new();
        for span in spans() {
            if let (Some(trace), Some(id), Some(parent)) = (
                trace_key(&span.trace_id),
                span_key(&span.span_id),
                span_key(&span.parent_span_id),
            ) {
                parents.insert((trace, id), parent);
            }
        }
        let mut nodes: HashMap<u128, Vec<PhaseNode>> = HashMap::new();
        for span in spans() {
            let Some(phase) = phase_of(&span.name) else {
                continue;
            };
            let (Some(trace), Some(id)) = (trace_key(&span.trace_id), span_key(&span.span_id))
            else {
                continue;
            };
            let (Ok(start_ns), Ok(end_ns)) = (
                i64::try_from(span.start_time_unix_nano),
                i64::try_from(span.end_time_unix_nano),
            ) else {
                continue;
            };
            let mut ancestors = Vec::new();
            let mut at = id;
            while ancestors.len() < MAX_DEPTH {
                let Some(&parent) = parents.get(&(trace, at)) else {
                    break;
                };
                ancestors.push(parent);
                at = parent;
            }
            if ancestors.is_empty() {
                continue;
            }
            nodes.entry(trace).or_default().push(PhaseNode {
                phase,
                start_ns,
                end_ns,
                ancestors,
            });
        }
        BatchTree { nodes }
    }

    fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    fn phases_of(&self, trace: u128, span_id: u64, into: &mut PhaseAccumulator) {
        for node in self.nodes.get(&trace).into_iter().flatten() {
            if node.under(span_id) {
                into.add(node);
            }
        }
    }
}

#[derive(Debug, Default)]
struct CacheInner {
    traces: HashMap<u128, Vec<PhaseNode>>,
    order: VecDeque<u128>,
    spans: usize,
}

/// The span tree across exports: phase spans of recent exports, so that a request span exported
/// after its children still finds them (bounded: beyond `capacity` spans the oldest traces are
/// forgotten), and the request rows held until their request's other spans have arrived (see
/// [`super::correlate`]).
#[derive(Debug)]
pub struct SpanTreeCache {
    inner: Mutex<CacheInner>,
    /// Spans held, readable without the lock (the common case is an empty cache).
    held: AtomicUsize,
    capacity: usize,
    requests: Mutex<RequestHold>,
}

impl Default for SpanTreeCache {
    /// A receiver's: request rows are held for a while of spans and of wall time.
    fn default() -> Self {
        SpanTreeCache::with_limits(DEFAULT_CACHE_SPANS, HoldLimits::for_receivers())
    }
}

impl SpanTreeCache {
    pub fn new(capacity: usize) -> SpanTreeCache {
        SpanTreeCache::with_limits(capacity, HoldLimits::for_receivers())
    }

    /// A file reader's: request rows are held for a window of spans, not of time, so what is
    /// stored does not depend on how fast the file is read.
    pub fn for_files() -> SpanTreeCache {
        SpanTreeCache::with_limits(DEFAULT_CACHE_SPANS, HoldLimits::for_files())
    }

    pub fn with_limits(capacity: usize, limits: HoldLimits) -> SpanTreeCache {
        SpanTreeCache {
            inner: Mutex::new(CacheInner::default()),
            held: AtomicUsize::new(0),
            capacity,
            requests: Mutex::new(RequestHold::new(limits)),
        }
    }

    fn hold(&self) -> std::sync::MutexGuard<'_, RequestHold> {
        // As for the phase spans: a panic under the lock leaves at worst a stale entry.
        self.requests.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Holds an export's request candidates; returns the rows released now, merged.
    pub fn pass_requests(&self, requests: ExportRequests) -> Vec<RequestRecord> {
        let now = Instant::now();
        self.hold().pass(requests, Some(now))
    }

    /// The held rows whose traces have been quiet long enough (a receiver's periodic tick).
    pub fn release_due_requests(&self) -> Vec<RequestRecord> {
        self.hold().release_due(Instant::now())
    }

    /// Every held row, merged as far as its spans allow (end of a file, shutdown).
    pub fn drain_requests(&self) -> Vec<RequestRecord> {
        self.hold().drain()
    }

    /// Tells the hold which rows the store already has from before it existed (a restart), so
    /// a late span of their requests is not a second row (see `RequestHold::remember_stored`).
    pub fn remember_stored_requests(&self, rows: &[RequestRecord]) {
        self.hold().remember_stored(rows);
    }

    /// Spans and request candidates held for correlation.
    pub fn held_requests(&self) -> usize {
        self.hold().len()
    }

    /// Phase spans held now.
    pub fn len(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheInner> {
        // A panic while holding the lock cannot leave the maps inconsistent in a way that
        // matters here (at worst a trace is missing from `order`), so a poisoned lock is used.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn phases_of(&self, trace: u128, span_id: u64, into: &mut PhaseAccumulator) {
        if self.is_empty() {
            return;
        }
        let inner = self.lock();
        for node in inner.traces.get(&trace).into_iter().flatten() {
            if node.under(span_id) {
                into.add(node);
            }
        }
    }

    /// Whether the cache holds a phase span of any trace of an export: only then does converting
    /// the export with the cache differ from converting it without (the file reader converts
    /// exports on several threads without the cache and redoes, in order, those it matters to).
    pub fn knows_any_trace_of(&self, export: &ExportTraces) -> bool {
        if self.is_empty() {
            return false;
        }
        let inner = self.lock();
        export
            .traces
            .iter()
            .any(|trace| inner.traces.contains_key(trace))
    }

    /// Remembers the phase spans of an export converted without the cache, as converting it with
    /// the cache would have at its end, and holds its request rows; returns the rows released.
    pub fn remember_export(&self, export: ExportTraces) -> Vec<RequestRecord> {
        self.remember(export.tree);
        self.pass_export_requests(export.requests)
    }

    /// Holds the request rows of an export whose phase spans need no remembering (converted
    /// again with the cache); returns the rows released. Without a wall time: the file reader's
    /// path, whose hold counts spans.
    fn pass_export_requests(&self, requests: ExportRequests) -> Vec<RequestRecord> {
        self.hold().pass(requests, None)
    }

    fn remember(&self, batch: BatchTree) {
        if self.capacity == 0 || batch.is_empty() {
            return;
        }
        let mut inner = self.lock();
        for (trace, nodes) in batch.nodes {
            inner.spans += nodes.len();
            match inner.traces.entry(trace) {
                std::collections::hash_map::Entry::Occupied(mut held) => {
                    held.get_mut().extend(nodes)
                }
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(nodes);
                    inner.order.push_back(trace);
                }
            }
        }
        while inner.spans > self.capacity {
            let Some(oldest) = inner.order.pop_front() else {
                break;
            };
            if let Some(nodes) = inner.traces.remove(&oldest) {
                inner.spans -= nodes.len();
            }
        }
        self.held.store(inner.spans, Ordering::Relaxed);
    }
}

/// What the in-order reader of a file needs of an export converted on another thread: the
/// traces it touches, its phase spans and its request rows, without the export itself (which is
/// dropped where it was decoded).
#[derive(Debug, Default)]
pub struct ExportTraces {
    traces: Vec<u128>,
    tree: BatchTree,
    requests: ExportRequests,
}

impl ExportTraces {
    /// The traces of `request`, with its phase spans as [`BatchTree::build`] found them and its
    /// request candidates.
    pub fn new(
        request: &ExportTraceServiceRequest,
        tree: BatchTree,
        requests: ExportRequests,
    ) -> ExportTraces {
        let mut traces: Vec<u128> = request
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
            .filter_map(|span| trace_key(&span.trace_id))
            .collect();
        // spans of one trace are usually exported together
        traces.dedup();
        ExportTraces {
            traces,
            tree,
            requests,
        }
    }

    /// The export's request candidates (tests compare them with a direct conversion's).
    #[cfg(test)]
    pub(crate) fn into_requests(self) -> ExportRequests {
        self.requests
    }
}

/// The span tree seen while converting one export: its own phase spans plus the cache's.
#[derive(Debug)]
pub struct TreeView<'a> {
    batch: BatchTree,
    cache: Option<&'a SpanTreeCache>,
}

impl<'a> TreeView<'a> {
    pub fn new(request: &ExportTraceServiceRequest, cache: Option<&'a SpanTreeCache>) -> Self {
        TreeView {
            batch: BatchTree::build(request),
            cache,
        }
    }

    /// The phases of the span `span_id` of `trace_id` (raw OTLP ids), if any phase span is
    /// known below it.
    pub fn phases_of(&self, trace_id: &[u8], span_id: &[u8]) -> Option<SpanPhases> {
        if self.batch.is_empty() && self.cache.is_none_or(SpanTreeCache::is_empty) {
            return None;
        }
        let (trace, span) = (trace_key(trace_id)?, span_key(span_id)?);
        let mut phases = PhaseAccumulator::default();
        self.batch.phases_of(trace, span, &mut phases);
        if let Some(cache) = self.cache {
            cache.phases_of(trace, span, &mut phases);
        }
        phases.finish()
    }

    /// This export's phase spans.
    pub fn into_batch(self) -> BatchTree {
        self.batch
    }

    /// Hands this export's phase spans to the cache for request spans still to come.
    pub fn remember(self) {
        if let Some(cache) = self.cache {
            cache.remember(self.batch);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_names_are_read_by_word() {
        for (name, phase) in [
            ("queue", Some(Phase::Queue)),
            ("queued", Some(Phase::Queue)),
            ("scheduler.waiting", Some(Phase::Queue)),
            ("Prefill Forward", Some(Phase::Prefill)),
            ("llm.prefill", Some(Phase::Prefill)),
            ("decode_loop", Some(Phase::Decode)),
            ("Decoding", Some(Phase::Decode)),
            ("generate", None),
            ("generate_stream", None),
            ("detokenize", None),
            ("tokenize", None),
            ("POST /v1/chat/completions", None),
        ] {
            assert_eq!(phase_of(name), phase, "{name}");
        }
    }

    #[test]
    fn cyclic_parents_stop_at_the_depth_limit() {
        use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
        let span = |id: u8, parent: u8, name: &str| Span {
            trace_id: vec![1; 16],
            span_id: vec![0, 0, 0, 0, 0, 0, 0, id],
            parent_span_id: vec![0, 0, 0, 0, 0, 0, 0, parent],
            name: name.into(),
            start_time_unix_nano: 10,
            end_time_unix_nano: 20,
            ..Default::default()
        };
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![span(1, 2, "prefill"), span(2, 1, "a")],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let tree = BatchTree::build(&request);
        let nodes = &tree.nodes[&u128::from_be_bytes([1; 16])];
        assert_eq!(nodes[0].ancestors.len(), MAX_DEPTH);
        let mut phases = PhaseAccumulator::default();
        tree.phases_of(u128::from_be_bytes([1; 16]), 2, &mut phases);
        assert_eq!(phases.finish().unwrap().prefill_ns, Some((10, 20)));
    }
}
