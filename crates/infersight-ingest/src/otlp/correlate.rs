//! Correlation of request rows, between the conversion of trace exports ([`super::convert`]) and
//! the `requests` table: one inference request is one row, whatever the span layout. Every span
//! that carries GenAI request attributes is a *candidate* row (`normalize_request`); a gateway,
//! a router's client span or a client SDK span above the engine's span is one too. Candidates of
//! one request are found by the span tree (a candidate below another, through any spans between,
//! even ones without attributes) and by the request id (`gen_ai.response.id`, …) across traces,
//! so a gateway that loses the trace context still finds its engine span.
//!
//! Of a request's candidates the innermost ones (the *leaves*: no candidate below them, the
//! engine's span) stay rows; each outer candidate fills what its leaves leave NULL (the gateway's
//! tenant, route and client in `attrs`, its status: an error anywhere on a one-leaf chain is the
//! request's error) and is then dropped from `requests`. Every span stays in `spans`.
//!
//! Services export their spans separately, so the spans of one request arrive in different
//! exports, in any order. Appended segments are immutable, so the rows are merged *before*
//! append: a [`RequestHold`] keeps candidates and the parent links of every span, by trace, until
//! the trace has been quiet for a while (a number of spans seen since and, for receivers, a wall
//! time), then merges them. What it releases depends only on which spans arrived within that
//! window, never on their order. Held rows are derived data: the spans they come from are
//! appended (and acknowledged) at once, and [`RequestHold::drain`] releases everything at the
//! end of a file or at shutdown.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use infersight_model::RequestRecord;
use serde_json::{Map, Value};

/// How far up a candidate's ancestors are followed (a cycle stops here too).
pub const MAX_DEPTH: usize = 32;

/// A trace is held until this many spans have arrived after its last one, by default.
pub const DEFAULT_LINGER_SPANS: u64 = 1 << 17;

/// Spans (and their candidates) held at most by default; beyond it the oldest traces go first.
pub const DEFAULT_HOLD_SPANS: usize = 1 << 19;

/// How long a receiver holds a quiet trace by default: beyond an OTLP batch span processor's
/// 5 s export delay, so a gateway's spans exported in its next batch still find the engine's.
pub const DEFAULT_LINGER: Duration = Duration::from_secs(10);

/// One span's place in the tree: its trace, its id and its parent's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanLink {
    pub trace: u128,
    pub span: u64,
    pub parent: Option<u64>,
}

/// A request row made from one span, with that span's place in the tree.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub link: SpanLink,
    pub row: RequestRecord,
}

/// What one export gives the hold: the links of all its valid spans and its candidate rows.
#[derive(Debug, Default)]
pub struct ExportRequests {
    pub links: Vec<SpanLink>,
    pub candidates: Vec<Candidate>,
}

impl ExportRequests {
    /// The rows of this export alone, merged (for conversions without a hold).
    pub fn merged(self) -> Vec<RequestRecord> {
        let mut hold = RequestHold::new(HoldLimits::unbounded());
        hold.pass(self, None);
        hold.drain()
    }
}

/// When the hold releases a trace.
#[derive(Debug, Clone, Copy)]
pub struct HoldLimits {
    /// Released once this many spans arrived after the trace's last one.
    pub linger_spans: u64,
    /// Released once this long passed after the trace's last span (`None`: spans only, as a file
    /// reader wants: its result must not depend on how fast it reads).
    pub linger: Option<Duration>,
    /// Spans held at most; beyond it the oldest traces are released early.
    pub capacity_spans: usize,
    /// Released at once when complete: an engine's row (one that knows latency phases) whose
    /// spans up to the trace's root have all arrived, so nothing above it can still come. Rows
    /// then reach the store without waiting out the linger and a bulk load holds next to
    /// nothing; what is released is what waiting would have given, unless a span of another
    /// trace names the same request later (a gateway that lost the trace context): that span's
    /// row is then dropped as a duplicate instead of merged (counted once either way).
    pub release_complete: bool,
}

impl HoldLimits {
    fn unbounded() -> HoldLimits {
        HoldLimits {
            linger_spans: u64::MAX,
            linger: None,
            capacity_spans: usize::MAX,
            release_complete: false,
        }
    }

    /// What a file reader uses: a window of spans, no wall time (what is stored must not depend
    /// on how fast the file is read), complete requests at once (a bulk load of engine spans
    /// holds nothing).
    pub fn for_files() -> HoldLimits {
        HoldLimits {
            linger_spans: DEFAULT_LINGER_SPANS,
            linger: None,
            capacity_spans: DEFAULT_HOLD_SPANS,
            release_complete: true,
        }
    }

    /// What a receiver uses: a window of spans and of wall time, complete requests at once.
    pub fn for_receivers() -> HoldLimits {
        HoldLimits {
            linger: Some(DEFAULT_LINGER),
            ..HoldLimits::for_files()
        }
    }
}

/// Request ids of released rows remembered, so a late span of a released request is not a
/// second row.
const REMEMBERED_RELEASED_IDS: usize = 1 << 16;

/// The held spans and candidates of one or more traces that belong together.
#[derive(Debug, Default)]
struct Entry {
    traces: Vec<u128>,
    request_ids: Vec<String>,
    /// The keys of the links this entry put into [`RequestHold::parents`] or `roots`.
    links: Vec<(u128, u64)>,
    candidates: Vec<Candidate>,
    /// The span clock and time of the entry's last span.
    touched: (u64, Option<Instant>),
}

impl Entry {
    fn weight(&self) -> usize {
        self.links.len() + self.candidates.len()
    }
}

/// Candidates and span links held by trace until the trace is quiet (see the module doc).
#[derive(Debug)]
pub struct RequestHold {
    limits: HoldLimits,
    entries: HashMap<u64, Entry>,
    by_trace: HashMap<u128, u64>,
    by_request: HashMap<String, u64>,
    /// Parent of every held span that has one.
    parents: HashMap<(u128, u64), u64>,
    /// Held spans without a parent (trace roots).
    roots: HashSet<(u128, u64)>,
    /// Touches in order (span clock, time, entry); an entry touched again has a later one, so
    /// an earlier one whose clock is not the entry's own is stale.
    touches: VecDeque<(u64, Option<Instant>, u64)>,
    /// Request ids of released rows, with what the row knew, oldest first.
    /// (By the id's hash: a row costs no copy of its strings.)
    released_ids: HashMap<u64, RowShape>,
    released_order: VecDeque<u64>,
    /// Traces of rows stored before this hold existed ([`RequestHold::remember_stored`]), by
    /// the trace id's hash, with what each row knew; oldest first.
    stored_traces: HashMap<u64, Vec<RowShape>>,
    stored_order: VecDeque<u64>,
    next_entry: u64,
    clock: u64,
    held: usize,
}

impl Default for RequestHold {
    fn default() -> Self {
        RequestHold::new(HoldLimits::for_receivers())
    }
}

impl RequestHold {
    pub fn new(limits: HoldLimits) -> RequestHold {
        RequestHold {
            limits,
            entries: HashMap::new(),
            by_trace: HashMap::new(),
            by_request: HashMap::new(),
            parents: HashMap::new(),
            roots: HashSet::new(),
            touches: VecDeque::new(),
            released_ids: HashMap::new(),
            released_order: VecDeque::new(),
            stored_traces: HashMap::new(),
            stored_order: VecDeque::new(),
            next_entry: 0,
            clock: 0,
            held: 0,
        }
    }

    /// Spans and candidates held now.
    pub fn len(&self) -> usize {
        self.held
    }

    pub fn is_empty(&self) -> bool {
        self.held == 0
    }

    /// Adds an export's spans and candidates, then releases (merged) the traces that are due at
    /// `now` (`None`: by spans only), and the complete ones if the limits say so.
    pub fn pass(&mut self, export: ExportRequests, now: Option<Instant>) -> Vec<RequestRecord> {
        let ExportRequests { links, candidates } = export;
        self.clock += links.len() as u64;
        let touched = (self.clock, now);
        let (candidates, alone, mut released) = if self.limits.release_complete {
            self.take_alone(candidates)
        } else {
            (candidates, HashSet::new(), Vec::new())
        };
        for link in links {
            if alone.contains(&link.trace) {
                continue;
            }
            let id = self.entry_of_trace(link.trace, touched);
            let key = (link.trace, link.span);
            let new = match link.parent {
                Some(parent) => self.parents.insert(key, parent).is_none(),
                None => self.roots.insert(key),
            };
            if new && let Some(entry) = self.entries.get_mut(&id) {
                entry.links.push(key);
                self.held += 1;
            }
        }
        let mut with_candidates: Vec<u64> = Vec::new();
        for candidate in candidates {
            if self.is_released_duplicate(&candidate.row) {
                continue;
            }
            let id = self.entry_of_candidate(&candidate, touched);
            if let Some(entry) = self.entries.get_mut(&id) {
                entry.candidates.push(candidate);
                self.held += 1;
            }
            with_candidates.push(id);
        }
        released.extend(self.release(now, false));
        if self.limits.release_complete {
            released.extend(self.release_complete(with_candidates));
        }
        sort_rows(&mut released);
        released
    }

    /// The common case, released without being held: an engine's row (it knows phases) whose
    /// span is its trace's root, alone of its trace in the export, of a trace and request id
    /// nothing is held for. Returns the other candidates, the traces of those released, and
    /// their rows.
    fn take_alone(
        &mut self,
        candidates: Vec<Candidate>,
    ) -> (Vec<Candidate>, HashSet<u128>, Vec<RequestRecord>) {
        let mut per_trace: HashMap<u128, usize> = HashMap::with_capacity(candidates.len());
        for candidate in &candidates {
            *per_trace.entry(candidate.link.trace).or_default() += 1;
        }
        let mut rest = Vec::new();
        let mut alone = HashSet::new();
        let mut rows = Vec::new();
        for candidate in candidates {
            let trace = candidate.link.trace;
            let is_alone = candidate.link.parent.is_none()
                && per_trace.get(&trace) == Some(&1)
                && breakdown_score(&candidate.row) > 0
                && !self.by_trace.contains_key(&trace)
                && candidate
                    .row
                    .request_id
                    .as_ref()
                    .is_none_or(|id| !self.by_request.contains_key(id));
            if !is_alone {
                rest.push(candidate);
                continue;
            }
            alone.insert(trace);
            if !self.is_released_duplicate(&candidate.row) {
                self.remember_released(&candidate.row);
                rows.push(candidate.row);
            }
        }
        (rest, alone, rows)
    }

    /// Releases the traces due at `now` (for a receiver's periodic tick).
    pub fn release_due(&mut self, now: Instant) -> Vec<RequestRecord> {
        self.release(Some(now), false)
    }

    /// Releases everything held (end of a file, shutdown).
    pub fn drain(&mut self) -> Vec<RequestRecord> {
        self.release(None, true)
    }

    /// Rows the store holds from before this hold existed (`serve` restarted; a crash's held
    /// rows rebuilt from their spans, `otlp::rebuild`), oldest first: a late span of one of
    /// their requests is then dropped as a duplicate of the stored row, as if this hold had
    /// released it: by request id as for released rows, and, for a span that knows no latency
    /// phase (a gateway's, a client's), by trace, when it names the same model and its time
    /// overlaps the row's (the rebuild's rule for what a stored row already merged). Remembered
    /// within the same bound as released rows; the newest are kept.
    pub fn remember_stored(&mut self, rows: &[RequestRecord]) {
        for row in rows {
            self.remember_released(row);
            let Some(trace) = row.trace_id.as_ref().filter(|t| !t.is_empty()) else {
                continue;
            };
            let key = text_hash(trace);
            let shapes = self.stored_traces.entry(key).or_default();
            if shapes.is_empty() {
                self.stored_order.push_back(key);
            }
            shapes.push(RowShape::of(row));
            while self.stored_order.len() > REMEMBERED_RELEASED_IDS {
                if let Some(oldest) = self.stored_order.pop_front() {
                    self.stored_traces.remove(&oldest);
                }
            }
        }
    }

    /// A candidate of a request whose row was released already, knowing no more of its phases
    /// than that row did (a late gateway span of another trace), or an outer span of a trace
    /// whose row was stored before this hold existed.
    fn is_released_duplicate(&self, row: &RequestRecord) -> bool {
        let shape = RowShape::of(row);
        let outer_of_stored = shape.score == 0
            && row
                .trace_id
                .as_ref()
                .and_then(|trace| self.stored_traces.get(&text_hash(trace)))
                .is_some_and(|rows| rows.iter().any(|r| r.same_request(&shape)));
        if outer_of_stored {
            return true;
        }
        let Some(released) = row
            .request_id
            .as_ref()
            .and_then(|id| self.released_ids.get(&text_hash(id)))
        else {
            return false;
        };
        shape.score <= released.score && released.same_request(&shape)
    }

    /// The entry a candidate joins: its trace's, joined with the one holding its request id.
    fn entry_of_candidate(
        &mut self,
        candidate: &Candidate,
        touched: (u64, Option<Instant>),
    ) -> u64 {
        let id = self.entry_of_trace(candidate.link.trace, touched);
        let Some(request_id) = candidate.row.request_id.clone().filter(|r| !r.is_empty()) else {
            return id;
        };
        match self.by_request.get(&request_id).copied() {
            Some(other) if other != id => self.join(other, id),
            Some(_) => id,
            None => {
                self.by_request.insert(request_id.clone(), id);
                if let Some(entry) = self.entries.get_mut(&id) {
                    entry.request_ids.push(request_id);
                }
                id
            }
        }
    }

    /// The entry of `trace`, new if none, marked as touched.
    fn entry_of_trace(&mut self, trace: u128, touched: (u64, Option<Instant>)) -> u64 {
        let id = match self.by_trace.get(&trace) {
            Some(&id) => id,
            None => {
                let id = self.next_entry;
                self.next_entry += 1;
                self.by_trace.insert(trace, id);
                self.entries.insert(
                    id,
                    Entry {
                        traces: vec![trace],
                        ..Default::default()
                    },
                );
                id
            }
        };
        if let Some(entry) = self.entries.get_mut(&id)
            && entry.touched.0 != touched.0
        {
            entry.touched = touched;
            self.touches.push_back((touched.0, touched.1, id));
        }
        id
    }

    /// Moves entry `from` into `into` (two traces that share a request id); returns `into`.
    fn join(&mut self, into: u64, from: u64) -> u64 {
        let Some(moved) = self.entries.remove(&from) else {
            return into;
        };
        for trace in &moved.traces {
            self.by_trace.insert(*trace, into);
        }
        for request_id in &moved.request_ids {
            self.by_request.insert(request_id.clone(), into);
        }
        if let Some(entry) = self.entries.get_mut(&into) {
            entry.traces.extend(moved.traces);
            entry.request_ids.extend(moved.request_ids);
            entry.links.extend(moved.links);
            entry.candidates.extend(moved.candidates);
            if moved.touched.0 > entry.touched.0 {
                entry.touched = moved.touched;
                self.touches
                    .push_back((moved.touched.0, moved.touched.1, into));
            }
        }
        into
    }

    fn is_due(&self, touched: (u64, Option<Instant>), now: Option<Instant>) -> bool {
        let by_spans = self.clock.saturating_sub(touched.0) >= self.limits.linger_spans;
        let by_time = match (self.limits.linger, touched.1, now) {
            (Some(linger), Some(at), Some(now)) => now.saturating_duration_since(at) >= linger,
            _ => false,
        };
        by_spans || by_time || self.held > self.limits.capacity_spans
    }

    fn release(&mut self, now: Option<Instant>, all: bool) -> Vec<RequestRecord> {
        let mut released = Vec::new();
        while let Some(&(clock, at, id)) = self.touches.front() {
            let current = self.entries.get(&id).map(|e| e.touched.0);
            if current != Some(clock) {
                // stale: the entry was touched again, joined or released
                self.touches.pop_front();
                continue;
            }
            if !all && !self.is_due((clock, at), now) {
                break;
            }
            self.touches.pop_front();
            if let Some(entry) = self.entries.remove(&id) {
                released.extend(self.merge_entry(entry));
            }
        }
        sort_rows(&mut released);
        released
    }

    /// Releases the entries among `ids` that are complete (see [`HoldLimits::release_complete`]).
    fn release_complete(&mut self, mut ids: Vec<u64>) -> Vec<RequestRecord> {
        ids.sort_unstable();
        ids.dedup();
        let mut released = Vec::new();
        for id in ids {
            let complete = self.entries.get(&id).is_some_and(|entry| {
                entry.candidates.iter().any(|c| breakdown_score(&c.row) > 0)
                    && entry.candidates.iter().all(|c| self.reaches_root(c.link))
            });
            if complete && let Some(entry) = self.entries.remove(&id) {
                released.extend(self.merge_entry(entry));
            }
        }
        released
    }

    /// Whether every span from `link` up to its trace's root has arrived.
    fn reaches_root(&self, link: SpanLink) -> bool {
        let mut at = link.span;
        for _ in 0..MAX_DEPTH {
            if self.roots.contains(&(link.trace, at)) {
                return true;
            }
            match self.parents.get(&(link.trace, at)) {
                Some(&parent) => at = parent,
                None => return false,
            }
        }
        false
    }

    /// Forgets an entry's keys and merges its candidates.
    fn merge_entry(&mut self, entry: Entry) -> Vec<RequestRecord> {
        self.held -= entry.weight();
        for trace in &entry.traces {
            self.by_trace.remove(trace);
        }
        for request_id in &entry.request_ids {
            self.by_request.remove(request_id);
        }
        let mut parents: HashMap<(u128, u64), u64> = HashMap::with_capacity(entry.links.len());
        for key in &entry.links {
            match self.parents.remove(key) {
                Some(parent) => {
                    parents.insert(*key, parent);
                }
                None => {
                    self.roots.remove(key);
                }
            }
        }
        let rows = merge_candidates(entry.candidates, &parents);
        for row in &rows {
            self.remember_released(row);
        }
        rows
    }

    fn remember_released(&mut self, row: &RequestRecord) {
        let Some(id) = row.request_id.as_ref().filter(|r| !r.is_empty()) else {
            return;
        };
        let key = text_hash(id);
        if self.released_ids.insert(key, RowShape::of(row)).is_none() {
            self.released_order.push_back(key);
        }
        while self.released_order.len() > REMEMBERED_RELEASED_IDS {
            if let Some(oldest) = self.released_order.pop_front() {
                self.released_ids.remove(&oldest);
            }
        }
    }
}

/// Released rows in a fixed order (start, trace, span), whatever order their spans came in.
fn sort_rows(rows: &mut [RequestRecord]) {
    rows.sort_by(|a, b| (a.ts, &a.trace_id, &a.span_id).cmp(&(b.ts, &b.trace_id, &b.span_id)));
}

/// How many latency phases a row knows (an engine's span knows some, a gateway's none).
fn breakdown_score(row: &RequestRecord) -> usize {
    [
        row.queue_ms,
        row.prefill_ms,
        row.ttft_ms,
        row.decode_ms,
        row.tpot_ms,
    ]
    .iter()
    .filter(|v| v.is_some())
    .count()
}

/// The candidates above each candidate, nearest first, through any held spans between.
fn candidate_ancestors(
    candidates: &[Candidate],
    parents: &HashMap<(u128, u64), u64>,
) -> Vec<Vec<usize>> {
    let index: HashMap<(u128, u64), usize> = candidates
        .iter()
        .enumerate()
        .map(|(i, c)| ((c.link.trace, c.link.span), i))
        .collect();
    candidates
        .iter()
        .map(|candidate| {
            let trace = candidate.link.trace;
            let mut found = Vec::new();
            let mut at = candidate.link.parent;
            for _ in 0..MAX_DEPTH {
                let Some(span) = at else { break };
                if span == candidate.link.span {
                    // a cycle through itself: invalid ids, the span is taken as alone
                    return Vec::new();
                }
                if let Some(&i) = index.get(&(trace, span))
                    && !found.contains(&i)
                {
                    found.push(i);
                }
                at = parents.get(&(trace, span)).copied();
            }
            found
        })
        .collect()
}

/// One row per request of a set of candidates (see the module doc).
pub fn merge_candidates(
    candidates: Vec<Candidate>,
    parents: &HashMap<(u128, u64), u64>,
) -> Vec<RequestRecord> {
    let candidates = dedupe_spans(candidates);
    if candidates.len() < 2 {
        return candidates.into_iter().map(|c| c.row).collect();
    }
    let ancestors = candidate_ancestors(&candidates, parents);
    let mut is_outer = vec![false; candidates.len()];
    for list in &ancestors {
        for &a in list {
            is_outer[a] = true;
        }
    }
    let mut leaves_under = vec![0usize; candidates.len()];
    for (i, list) in ancestors.iter().enumerate() {
        if !is_outer[i] {
            for &a in list {
                leaves_under[a] += 1;
            }
        }
    }
    let mut rows: Vec<Option<RequestRecord>> = vec![None; candidates.len()];
    let outer_rows: Vec<Option<&RequestRecord>> = candidates
        .iter()
        .enumerate()
        .map(|(i, c)| is_outer[i].then_some(&c.row))
        .collect();
    for (i, candidate) in candidates.iter().enumerate() {
        if is_outer[i] {
            continue;
        }
        let mut row = candidate.row.clone();
        for &a in &ancestors[i] {
            if let Some(outer) = outer_rows[a] {
                merge_into(&mut row, outer, leaves_under[a] == 1);
            }
        }
        rows[i] = Some(row);
    }
    merge_by_request_id(rows.into_iter().flatten().collect())
}

/// The same span twice (an export sent again) is one candidate: the first, filled by the rest.
fn dedupe_spans(candidates: Vec<Candidate>) -> Vec<Candidate> {
    let mut position: HashMap<(u128, u64), usize> = HashMap::new();
    let mut kept: Vec<Candidate> = Vec::with_capacity(candidates.len());
    for candidate in candidates {
        let key = (candidate.link.trace, candidate.link.span);
        match position.get(&key) {
            Some(&i) => merge_into(&mut kept[i].row, &candidate.row, true),
            None => {
                position.insert(key, kept.len());
                kept.push(candidate);
            }
        }
    }
    kept
}

/// Time two rows of one request may lie apart beyond their own intervals (clocks of different
/// hosts, a gateway's span ending before its upstream's is exported).
const SAME_REQUEST_SLACK_NS: i64 = 1_000_000_000;

/// What is known of a released row, to tell a late span of the same request from one of another
/// request that reuses its id (engines that number their requests from 0).
#[derive(Debug, Clone, PartialEq)]
struct RowShape {
    score: usize,
    start_ns: i64,
    end_ns: i64,
    /// The model's name's hash.
    model: Option<u64>,
}

/// A 64-bit hash of a text (ids and names compared without keeping them).
fn text_hash(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

impl RowShape {
    fn of(row: &RequestRecord) -> RowShape {
        let e2e_ns = row
            .e2e_ms
            .filter(|ms| ms.is_finite() && *ms >= 0.0)
            .map_or(0, |ms| (ms * 1e6) as i64);
        RowShape {
            score: breakdown_score(row),
            start_ns: row.ts,
            end_ns: row.ts.saturating_add(e2e_ns),
            model: row.model.as_deref().map(text_hash),
        }
    }

    /// The same request seen by two spans: the same model (when both name one) and overlapping
    /// times.
    fn same_request(&self, other: &RowShape) -> bool {
        let models_agree = match (&self.model, &other.model) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        models_agree
            && self.start_ns <= other.end_ns.saturating_add(SAME_REQUEST_SLACK_NS)
            && other.start_ns <= self.end_ns.saturating_add(SAME_REQUEST_SLACK_NS)
    }
}

/// Two rows of one request id are one request: the same model (when both name one) and times
/// that overlap (within a slack for clocks), as the hold merges them.
pub fn same_request(a: &RequestRecord, b: &RequestRecord) -> bool {
    RowShape::of(a).same_request(&RowShape::of(b))
}

/// Rows with the same request id (not one above the other in a trace: another trace, a lost
/// context) that agree on model and time are one request: the row that knows most of the latency
/// breakdown stays, filled by the others.
fn merge_by_request_id(rows: Vec<RequestRecord>) -> Vec<RequestRecord> {
    let mut groups: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, row) in rows.iter().enumerate() {
        if let Some(id) = row.request_id.as_ref().filter(|r| !r.is_empty()) {
            groups.entry(id.clone()).or_default().push(i);
        }
    }
    if groups.values().all(|members| members.len() < 2) {
        return rows;
    }
    let mut rows: Vec<Option<RequestRecord>> = rows.into_iter().map(Some).collect();
    let mut groups: Vec<Vec<usize>> = groups.into_values().filter(|m| m.len() > 1).collect();
    groups.sort();
    for members in groups {
        let Some(&base) = members.iter().max_by(|&&a, &&b| {
            let key = |i: usize| {
                rows[i]
                    .as_ref()
                    .map(|r| (breakdown_score(r), r.ts, r.span_id.clone()))
            };
            key(a).cmp(&key(b))
        }) else {
            continue;
        };
        let Some(mut merged) = rows[base].take() else {
            continue;
        };
        let shape = RowShape::of(&merged);
        for &other in members.iter().filter(|&&i| i != base) {
            let same = rows[other]
                .as_ref()
                .is_some_and(|r| shape.same_request(&RowShape::of(r)));
            if same && let Some(outer) = rows[other].take() {
                merge_into(&mut merged, &outer, true);
            }
        }
        rows[base] = Some(merged);
    }
    rows.into_iter().flatten().collect()
}

/// Fills what `row` (an inner span's) leaves NULL from `outer` (a span above it, or of the same
/// request); `single`: `outer` is above no other row, so its error is this request's error.
pub fn merge_into(row: &mut RequestRecord, outer: &RequestRecord, single: bool) {
    macro_rules! fill {
        ($($field:ident),* $(,)?) => {
            $( if row.$field.is_none() { row.$field = outer.$field.clone(); } )*
        };
    }
    fill!(
        request_id,
        tenant,
        session_id,
        service,
        runtime,
        worker,
        device,
        model,
        model_version,
        lora_adapters,
        kv_cache_policy,
        batch_size,
        input_tokens,
        cached_tokens,
        output_tokens,
        queue_ms,
        prefill_ms,
        ttft_ms,
        decode_ms,
        tpot_ms,
        itl_max_ms,
        e2e_ms,
        finish_reason,
        error_type,
        temperature,
        top_p,
        max_tokens,
        spec_draft_tokens,
        spec_accepted_tokens,
        prompt_hash,
        trace_id,
    );
    let is = |status: &Option<String>, what: &str| status.as_deref() == Some(what);
    let known = |status: &Option<String>| !(status.is_none() || is(status, "unset"));
    if (single && is(&outer.status, "error")) || (!known(&row.status) && known(&outer.status)) {
        row.status = outer.status.clone();
    }
    row.attrs = merged_attrs(&row.attrs, &outer.attrs);
}

/// The union of two `attrs` objects, the first winning a key both have.
fn merged_attrs(inner: &str, outer: &str) -> String {
    let parse = |text: &str| serde_json::from_str::<Map<String, Value>>(text).ok();
    match (parse(inner), parse(outer)) {
        (Some(mut inner_map), Some(outer_map)) => {
            let before = inner_map.len();
            for (key, value) in outer_map {
                inner_map.entry(key).or_insert(value);
            }
            if inner_map.len() == before {
                inner.to_string()
            } else {
                Value::Object(inner_map).to_string()
            }
        }
        (None, Some(_)) => outer.to_string(),
        _ => inner.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(span: u64, model: Option<&str>) -> RequestRecord {
        RequestRecord {
            ts: span as i64,
            span_id: Some(format!("{span:016x}")),
            model: model.map(str::to_string),
            attrs: "{}".into(),
            ..Default::default()
        }
    }

    fn candidate(span: u64, parent: Option<u64>, row: RequestRecord) -> Candidate {
        Candidate {
            link: SpanLink {
                trace: 7,
                span,
                parent,
            },
            row,
        }
    }

    #[test]
    fn an_ancestor_cycle_ends() {
        let parents: HashMap<(u128, u64), u64> = [((7, 1), 2), ((7, 2), 1)].into();
        let rows = merge_candidates(
            vec![
                candidate(1, Some(2), row(1, Some("m"))),
                candidate(2, Some(1), row(2, None)),
            ],
            &parents,
        );
        // each is above the other: invalid ids, both kept as they are
        assert_eq!(rows.len(), 2);
    }

    #[test]
    fn attrs_of_the_inner_row_win() {
        let merged = merged_attrs(r#"{"a":1,"b":2}"#, r#"{"b":3,"c":4}"#);
        assert_eq!(merged, r#"{"a":1,"b":2,"c":4}"#);
        assert_eq!(merged_attrs(r#"{"a":1}"#, "not json"), r#"{"a":1}"#);
    }

    #[test]
    fn a_held_trace_is_released_once_quiet_by_spans() {
        let mut hold = RequestHold::new(HoldLimits {
            linger_spans: 3,
            ..HoldLimits::unbounded()
        });
        let link = |trace: u128, span: u64| SpanLink {
            trace,
            span,
            parent: None,
        };
        let first = ExportRequests {
            links: vec![link(1, 1)],
            candidates: vec![Candidate {
                link: link(1, 1),
                row: row(1, Some("m")),
            }],
        };
        assert!(hold.pass(first, None).is_empty());
        let others = ExportRequests {
            links: vec![link(2, 1), link(3, 1), link(4, 1)],
            candidates: Vec::new(),
        };
        let released = hold.pass(others, None);
        assert_eq!(released.len(), 1);
        assert!(hold.drain().is_empty());
        assert!(hold.is_empty());
    }
    /// Rows stored before the hold existed (a restart): a late outer span of one of their
    /// traces, or a span naming one of their request ids, is no second row; an outer span of
    /// another request of the same trace (another model, another time), an engine's span of
    /// that trace, and spans of other traces are rows as before.
    #[test]
    fn late_spans_of_stored_rows_are_duplicates() {
        let stored = |trace: &str, id: Option<&str>| RequestRecord {
            ts: 1_000_000_000,
            trace_id: Some(trace.into()),
            request_id: id.map(str::to_string),
            e2e_ms: Some(1_000.0),
            ttft_ms: Some(100.0),
            ..row(1, Some("m"))
        };
        let late = |trace: &str, span: u64, ts: i64, model: &str, id: Option<&str>| Candidate {
            link: SpanLink {
                trace: 1,
                span,
                parent: None,
            },
            row: RequestRecord {
                ts,
                trace_id: Some(trace.into()),
                request_id: id.map(str::to_string),
                e2e_ms: Some(1_200.0),
                ..row(span, Some(model))
            },
        };
        let mut hold = RequestHold::new(HoldLimits::unbounded());
        hold.remember_stored(&[stored("aa", None), stored("bb", Some("req-b"))]);
        let engine = Candidate {
            row: RequestRecord {
                ttft_ms: Some(90.0),
                ..late("aa", 14, 1_000_000_000, "m", None).row
            },
            ..late("aa", 14, 1_000_000_000, "m", None)
        };
        let candidates = vec![
            late("aa", 10, 900_000_000, "m", None),
            late("cc", 11, 900_000_000, "m", Some("req-b")),
            late("aa", 12, 9_000_000_000, "m", None),
            late("aa", 13, 900_000_000, "other", None),
            engine,
            late("dd", 15, 900_000_000, "m", None),
        ];
        let export = ExportRequests {
            links: candidates.iter().map(|c| c.link).collect(),
            candidates,
        };
        assert!(hold.pass(export, None).is_empty());
        let mut spans: Vec<_> = hold.drain().into_iter().filter_map(|r| r.span_id).collect();
        spans.sort();
        let expected: Vec<String> = [12u64, 13, 14, 15]
            .iter()
            .map(|s| format!("{s:016x}"))
            .collect();
        assert_eq!(spans, expected);
    }
}
