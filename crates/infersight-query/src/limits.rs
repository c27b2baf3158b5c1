//! The limits of the SQL surface people and scripts reach (`POST /api/v1/query`,
//! `infersight query`): memory, time and response size per statement, and how many statements
//! one caller may run at once. [`QueryEngine::sql_audited`] applies [`QueryLimits`] when the
//! engine carries them ([`QueryEngine::with_limits`]); the engine's own statements (root-cause
//! analysis, dimensions, reports) run without them.
//!
//! - Memory: each statement gets its own DataFusion memory pool of
//!   [`QueryLimits::memory_limit_bytes`] and no spill directory, so the operators that hold
//!   state (joins, aggregations, sorts, distinct sets) fail with "the query exceeded its memory
//!   limit" instead of growing until the process is killed or an offset overflows.
//! - Time: a statement still running after [`QueryLimits::timeout`] is dropped; dropping the
//!   result stream aborts DataFusion's tasks (they yield cooperatively between batches), so no
//!   core keeps working. The same holds when the HTTP client disconnects and the handler's
//!   future is dropped: [`QueryCounts::cancelled`] counts those. Scans yield by themselves, but
//!   a join makes many batches out of few (a cross join of 20k rows with itself: 400M rows from
//!   three input batches) and an aggregation above it would consume them all without yielding,
//!   so [`JoinsYield`] makes every join's output spend the task's budget too. Statements run on
//!   threads of their own, so one that is slow to yield delays no other task of the server.
//! - Response size: the rows are collected while their Arrow size stays under
//!   [`QueryLimits::max_response_bytes`]; the HTTP API checks the rendered body against it too.
//! - Concurrency: [`CallerSlots`] hands out at most `max_concurrent_per_caller` permits per
//!   caller key (the peer address today, the authenticated identity later).
//!
//! [`QueryEngine::sql_audited`]: crate::QueryEngine::sql_audited
//! [`QueryEngine::with_limits`]: crate::QueryEngine::with_limits

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::config::ConfigOptions;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::coop::CooperativeExec;

use crate::error::QueryError;

const MIB: usize = 1024 * 1024;

/// The last physical optimizer rule of a limited statement: the output of every join goes
/// through a [`CooperativeExec`], which spends a unit of the task's cooperative budget per
/// batch, so the statement's task yields (and can be aborted at its timeout or when its caller
/// leaves) however many batches a join makes out of one input batch.
#[derive(Debug)]
pub(crate) struct JoinsYield;

impl PhysicalOptimizerRule for JoinsYield {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            if !node.name().contains("Join") {
                return Ok(Transformed::no(node));
            }
            let wrapped: Arc<dyn ExecutionPlan> = Arc::new(CooperativeExec::new(node));
            Ok(Transformed::yes(wrapped))
        })
        .map(|transformed| transformed.data)
    }

    fn name(&self) -> &str {
        "joins_yield"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Per-statement limits of the user-facing SQL surface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryLimits {
    /// The statement's DataFusion memory pool (hash tables, sort buffers, join build sides).
    pub memory_limit_bytes: usize,
    /// Wall time from planning to the last row.
    pub timeout: Duration,
    /// Most bytes of result: Arrow bytes while collecting, rendered bytes in the HTTP answer.
    pub max_response_bytes: usize,
    /// Statements one caller may have running at once; more are refused (HTTP 429).
    pub max_concurrent_per_caller: usize,
}

impl Default for QueryLimits {
    fn default() -> Self {
        QueryLimits {
            memory_limit_bytes: 512 * MIB,
            timeout: Duration::from_secs(60),
            max_response_bytes: 32 * MIB,
            max_concurrent_per_caller: 4,
        }
    }
}

impl QueryLimits {
    pub(crate) fn memory_exceeded(&self) -> QueryError {
        QueryError::BadRequest(format!(
            "the query exceeded its memory limit of {}; filter by time, aggregate or select \
             fewer columns (query.memory_limit_bytes)",
            size_text(self.memory_limit_bytes)
        ))
    }

    pub(crate) fn timed_out(&self) -> QueryError {
        QueryError::BadRequest(format!(
            "the query exceeded its time limit of {} s and was stopped; filter by time or \
             aggregate (query.timeout_ms)",
            self.timeout.as_secs_f64()
        ))
    }

    /// The error of a result larger than [`QueryLimits::max_response_bytes`].
    pub fn response_too_large(&self) -> QueryError {
        QueryError::BadRequest(format!(
            "the result exceeds the response limit of {}; select fewer columns, aggregate or \
             add a LIMIT (query.max_response_bytes)",
            size_text(self.max_response_bytes)
        ))
    }
}

/// "512 MB" for whole mebibytes, else bytes.
fn size_text(bytes: usize) -> String {
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MB", bytes / MIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// How the limited statements of one engine ended, since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueryCounts {
    /// Statements executing right now.
    pub running: u64,
    /// Ended with an answer or an error of their own.
    pub finished: u64,
    /// Aborted before they ended (the HTTP client went away, or their timeout passed): counted
    /// when their work has actually stopped.
    pub cancelled: u64,
    pub timed_out: u64,
    pub memory_exceeded: u64,
    pub response_too_large: u64,
    /// DataFusion panicked inside the statement; caught, answered as an internal error.
    pub panicked: u64,
}

#[derive(Debug, Default)]
pub(crate) struct QueryCounters {
    running: AtomicU64,
    finished: AtomicU64,
    cancelled: AtomicU64,
    timed_out: AtomicU64,
    memory_exceeded: AtomicU64,
    response_too_large: AtomicU64,
    panicked: AtomicU64,
}

/// The ends a limited statement can have besides plain success or failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LimitedEnd {
    Finished,
    TimedOut,
    MemoryExceeded,
    ResponseTooLarge,
    Panicked,
}

impl QueryCounters {
    pub(crate) fn counts(&self) -> QueryCounts {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        QueryCounts {
            running: read(&self.running),
            finished: read(&self.finished),
            cancelled: read(&self.cancelled),
            timed_out: read(&self.timed_out),
            memory_exceeded: read(&self.memory_exceeded),
            response_too_large: read(&self.response_too_large),
            panicked: read(&self.panicked),
        }
    }

    /// Counts one end that no [`RunningQuery`] reports (a timeout, a panic).
    pub(crate) fn count(&self, end: LimitedEnd) {
        self.counter(end).fetch_add(1, Ordering::Relaxed);
    }

    fn counter(&self, end: LimitedEnd) -> &AtomicU64 {
        match end {
            LimitedEnd::Finished => &self.finished,
            LimitedEnd::TimedOut => &self.timed_out,
            LimitedEnd::MemoryExceeded => &self.memory_exceeded,
            LimitedEnd::ResponseTooLarge => &self.response_too_large,
            LimitedEnd::Panicked => &self.panicked,
        }
    }

    /// Counts one statement as running until the guard ends it ([`RunningQuery::end`]) or is
    /// dropped (cancelled).
    pub(crate) fn start(self: &Arc<Self>) -> RunningQuery {
        self.running.fetch_add(1, Ordering::Relaxed);
        RunningQuery {
            counters: Arc::clone(self),
            ended: false,
        }
    }
}

/// One statement in [`QueryCounts::running`].
pub(crate) struct RunningQuery {
    counters: Arc<QueryCounters>,
    ended: bool,
}

impl RunningQuery {
    pub(crate) fn end(mut self, end: LimitedEnd) {
        self.ended = true;
        self.counters.count(end);
    }
}

impl Drop for RunningQuery {
    fn drop(&mut self) {
        // a panic is counted by whoever catches it
        if !self.ended && !std::thread::panicking() {
            self.counters.cancelled.fetch_add(1, Ordering::Relaxed);
        }
        self.counters.running.fetch_sub(1, Ordering::Relaxed);
    }
}

/// At most `limit` running statements per caller key.
#[derive(Debug)]
pub struct CallerSlots {
    limit: usize,
    held: Mutex<HashMap<String, usize>>,
}

impl CallerSlots {
    pub fn new(limit: usize) -> CallerSlots {
        CallerSlots {
            limit,
            held: Mutex::new(HashMap::new()),
        }
    }

    /// A permit for one more statement of `caller`, `None` when it already runs `limit`. The
    /// permit frees its slot when dropped.
    pub fn try_acquire(self: &Arc<Self>, caller: &str) -> Option<CallerPermit> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let count = held.entry(caller.to_string()).or_insert(0);
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(CallerPermit {
            slots: Arc::clone(self),
            caller: caller.to_string(),
        })
    }

    /// Statements `caller` has running.
    pub fn held(&self, caller: &str) -> usize {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(caller)
            .copied()
            .unwrap_or(0)
    }
}

/// One running statement of one caller; see [`CallerSlots::try_acquire`].
#[derive(Debug)]
pub struct CallerPermit {
    slots: Arc<CallerSlots>,
    caller: String,
}

impl Drop for CallerPermit {
    fn drop(&mut self) {
        let mut held = self
            .slots
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.caller) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(&self.caller);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_gets_at_most_its_slots_and_gets_them_back() {
        let slots = Arc::new(CallerSlots::new(2));
        let first = slots.try_acquire("10.0.0.1");
        let second = slots.try_acquire("10.0.0.1");
        assert!(first.is_some() && second.is_some());
        assert!(slots.try_acquire("10.0.0.1").is_none());
        // another caller is not affected
        assert!(slots.try_acquire("10.0.0.2").is_some());
        drop(first);
        assert_eq!(slots.held("10.0.0.1"), 1);
        assert!(slots.try_acquire("10.0.0.1").is_some());
        drop(second);
        assert_eq!(slots.held("10.0.0.1"), 0);
    }

    #[test]
    fn a_dropped_statement_counts_as_cancelled() {
        let counters = Arc::new(QueryCounters::default());
        let running = counters.start();
        assert_eq!(counters.counts().running, 1);
        drop(running);
        counters.start().end(LimitedEnd::MemoryExceeded);
        counters.count(LimitedEnd::TimedOut);
        let counts = counters.counts();
        assert_eq!(
            (
                counts.running,
                counts.cancelled,
                counts.memory_exceeded,
                counts.timed_out
            ),
            (0, 1, 1, 1)
        );
    }

    #[test]
    fn limit_messages_name_the_limit_and_its_key() {
        let limits = QueryLimits {
            memory_limit_bytes: 4 * MIB,
            timeout: Duration::from_millis(1500),
            max_response_bytes: 1000,
            max_concurrent_per_caller: 1,
        };
        let memory = limits.memory_exceeded().to_string();
        assert!(memory.contains("memory limit of 4 MB"), "{memory}");
        assert!(memory.contains("query.memory_limit_bytes"), "{memory}");
        assert!(limits.timed_out().to_string().contains("1.5 s"));
        let size = limits.response_too_large().to_string();
        assert!(size.contains("1000 bytes"), "{size}");
    }
}
