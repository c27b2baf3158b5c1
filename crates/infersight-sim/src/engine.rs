//! The latency model of one serving worker (continuous batching), fed one request at a time in
//! arrival order. See the crate documentation for the formulas; in short: a request waits for a
//! batch slot and for the prefill pipeline (plus the scheduler's batching wait), prefills its
//! uncached tokens, then decodes at a step time that grows with the running batch and its
//! context; running out of KV blocks preempts (recompute), and a request queued past the gateway
//! timeout is aborted. The state also answers "how many running / waiting, how full is the KV
//! cache" at any instant, for the metrics and stats lines.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};

use crate::fleet::{KvPolicy, WorkerSpec};

pub const PREFIX_BLOCK_TOKENS: u32 = 512;
pub const PAGED_BLOCK_TOKENS: f64 = 16.0;
pub const CONTIGUOUS_CHUNK_TOKENS: f64 = 2_048.0;

/// One request as the engine sees it, with the scenario's effects already folded in.
#[derive(Debug, Clone)]
pub struct EngineRequest<'a> {
    /// When the engine receives it (after gateway and tokenizer), ns.
    pub arrival_ns: i64,
    pub input_tokens: u32,
    pub output_tokens: u32,
    pub max_tokens: u32,
    /// Prefix blocks (512 tokens each) of the prompt, in order.
    pub blocks: &'a [u64],
    /// Multiplies decode step time (thermal throttling, leaks).
    pub step_factor: f64,
    /// Multiplies prefill time.
    pub prefill_factor: f64,
    /// Extra time before the first token that does not hold the prefill pipeline, ms (an
    /// adapter reload the request waits for).
    pub extra_prefill_ms: f64,
    /// Scheduler batching wait for this request, ms.
    pub batch_wait_ms: f64,
    /// KV capacity multiplier (memory taken by something else).
    pub kv_capacity_factor: f64,
    /// Draft-token acceptance probability when the worker speculates.
    pub spec_acceptance: f64,
    /// The gateway gives up after this long, ms.
    pub timeout_ms: f64,
}

/// What happened to a request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timing {
    pub queue_ms: f64,
    pub prefill_ms: f64,
    pub ttft_ms: f64,
    pub decode_ms: f64,
    pub tpot_ms: f64,
    /// Largest gap between two consecutive output tokens: one decode step, plus the whole
    /// preemption stall (recompute) when the request was preempted, which the model puts at its
    /// first decode step. 0 with fewer than two output tokens.
    pub itl_max_ms: f64,
    pub e2e_ms: f64,
    /// Running sequences including this one when it was admitted.
    pub batch_size: u32,
    pub cached_tokens: u32,
    pub preemptions: u32,
    pub spec_draft_tokens: u32,
    pub spec_accepted_tokens: u32,
    /// Queued past the timeout and dropped before admission.
    pub aborted: bool,
    pub start_ns: i64,
    pub end_ns: i64,
}

/// LRU set of cached prefix blocks.
#[derive(Debug, Default)]
struct PrefixCache {
    capacity: usize,
    stamp_of: HashMap<u64, u64>,
    by_stamp: BTreeMap<u64, u64>,
    clock: u64,
}

impl PrefixCache {
    /// Number of leading blocks already cached; then all blocks become most recently used.
    fn lookup_and_insert(&mut self, blocks: &[u64]) -> usize {
        let hits = blocks
            .iter()
            .take_while(|b| self.stamp_of.contains_key(b))
            .count();
        for block in blocks {
            self.clock += 1;
            if let Some(old) = self.stamp_of.insert(*block, self.clock) {
                self.by_stamp.remove(&old);
            }
            self.by_stamp.insert(self.clock, *block);
        }
        while self.stamp_of.len() > self.capacity {
            let Some((_, block)) = self.by_stamp.pop_first() else {
                break;
            };
            self.stamp_of.remove(&block);
        }
        hits
    }
}

#[derive(Debug, Clone, Copy)]
struct Interval {
    arrival_ns: i64,
    start_ns: i64,
    end_ns: i64,
    kv_tokens: f64,
}

/// The evolving state of one worker.
#[derive(Debug)]
pub struct EngineState {
    prefill_free_ns: i64,
    /// (end, kv tokens) of admitted requests, earliest end first.
    running: BinaryHeap<Reverse<(i64, u64)>>,
    kv_used_tokens: f64,
    prefix: PrefixCache,
    /// Recent requests, for instantaneous gauges.
    recent: VecDeque<Interval>,
    pub preemptions_total: u64,
    pub prompt_tokens_total: u64,
    pub generation_tokens_total: u64,
    pub requests_total: u64,
    pub spec_draft_total: u64,
    pub spec_accepted_total: u64,
    pub prefix_queries_total: u64,
    pub prefix_hits_total: u64,
}

/// Gauges of a worker at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Gauges {
    pub running: u32,
    pub waiting: u32,
    pub kv_usage: f64,
}

impl EngineState {
    pub fn new(spec: &WorkerSpec) -> Self {
        Self {
            prefill_free_ns: i64::MIN / 2,
            running: BinaryHeap::new(),
            kv_used_tokens: 0.0,
            prefix: PrefixCache {
                capacity: if spec.kv_policy == KvPolicy::PrefixCache {
                    spec.prefix_cache_blocks
                } else {
                    0
                },
                ..Default::default()
            },
            recent: VecDeque::new(),
            preemptions_total: 0,
            prompt_tokens_total: 0,
            generation_tokens_total: 0,
            requests_total: 0,
            spec_draft_total: 0,
            spec_accepted_total: 0,
            prefix_queries_total: 0,
            prefix_hits_total: 0,
        }
    }

    fn release_until(&mut self, t_ns: i64) {
        while let Some(Reverse((end, kv))) = self.running.peek().copied() {
            if end > t_ns {
                break;
            }
            self.running.pop();
            self.kv_used_tokens = (self.kv_used_tokens - kv as f64).max(0.0);
        }
    }

    /// Runs one request through the model. Requests must come in non-decreasing arrival order.
    pub fn admit(&mut self, spec: &WorkerSpec, req: &EngineRequest<'_>) -> Timing {
        let arrival = req.arrival_ns;
        self.release_until(arrival);
        // A batch slot: when full, the earliest-finishing sequence frees one.
        let mut slot_ns = arrival;
        while self.running.len() >= spec.max_batch {
            let Some(Reverse((end, kv))) = self.running.pop() else {
                break;
            };
            self.kv_used_tokens = (self.kv_used_tokens - kv as f64).max(0.0);
            slot_ns = slot_ns.max(end);
        }
        // The prefill pipeline is serial; the scheduler waits `batch_wait` after the previous
        // prefill before taking the next (vLLM's scheduler delay, TGI's waiting ratio).
        let wait_ns = (req.batch_wait_ms * 1e6) as i64;
        let start = arrival.max(slot_ns).max(self.prefill_free_ns + wait_ns);
        let queue_ms = (start - arrival) as f64 / 1e6;
        if queue_ms > req.timeout_ms {
            return Timing {
                queue_ms: req.timeout_ms,
                e2e_ms: req.timeout_ms,
                aborted: true,
                start_ns: arrival,
                end_ns: arrival + (req.timeout_ms * 1e6) as i64,
                ..Default::default()
            };
        }
        self.release_until(start);

        // Prefix cache: leading full 512-token blocks already resident are not recomputed.
        let full_blocks = (req.input_tokens / PREFIX_BLOCK_TOKENS) as usize;
        let blocks = &req.blocks[..req.blocks.len().min(full_blocks)];
        let cached_tokens = if self.prefix.capacity > 0 && !blocks.is_empty() {
            self.prefix_queries_total += blocks.len() as u64;
            let hits = self.prefix.lookup_and_insert(blocks);
            self.prefix_hits_total += hits as u64;
            ((hits as u32) * PREFIX_BLOCK_TOKENS).min(req.input_tokens.saturating_sub(1))
        } else {
            0
        };
        let uncached = (req.input_tokens - cached_tokens) as f64;
        let prefill_ms = (spec.prefill_overhead_ms
            + uncached / spec.prefill_tokens_per_s * 1_000.0)
            * req.prefill_factor;
        self.prefill_free_ns = start + (prefill_ms * 1e6) as i64;
        let prefill_ms = prefill_ms + req.extra_prefill_ms;
        let prefill_ns = (prefill_ms * 1e6) as i64;

        let batch_size = self.running.len() as u32 + 1;
        let context = req.input_tokens as f64 + req.output_tokens as f64 / 2.0;
        let step_ms = (spec.step_base_ms * (1.0 + spec.step_batch_coeff * batch_size as f64)
            + spec.step_ctx_ms_per_1k * context / 1_000.0)
            * req.step_factor;
        // Speculative decoding: k drafts per step, each accepted with probability a (until the
        // first rejection), so a step yields (1 - a^(k+1)) / (1 - a) tokens and costs ~25 % more.
        let decode_steps_tokens = req.output_tokens.saturating_sub(1) as f64;
        let (tokens_per_step, step_cost, draft, accepted) = match spec.spec_tokens {
            Some(k) if decode_steps_tokens > 0.0 => {
                let a = req.spec_acceptance.clamp(0.0, 0.99);
                let per_step = (1.0 - a.powi(k as i32 + 1)) / (1.0 - a);
                let steps = (decode_steps_tokens / per_step).ceil();
                let draft = (steps * k as f64) as u32;
                let accepted = ((per_step - 1.0) * steps).round().min(draft as f64) as u32;
                (per_step, step_ms * 1.25, draft, accepted)
            }
            _ => (1.0, step_ms, 0, 0),
        };
        let tpot_ms = step_cost / tokens_per_step;
        let mut decode_ms = decode_steps_tokens * tpot_ms;
        let mut stall_ms = 0.0;

        // KV: paged holds prompt + output in 16-token blocks; contiguous reserves prompt +
        // max_tokens rounded up to 2k-token chunks. Over capacity → the newest sequence is
        // preempted (recompute): it re-prefills prompt + half its output after waiting a while.
        let kv_tokens = match spec.kv_policy {
            KvPolicy::Contiguous => {
                ((req.input_tokens + req.max_tokens) as f64 / CONTIGUOUS_CHUNK_TOKENS).ceil()
                    * CONTIGUOUS_CHUNK_TOKENS
            }
            _ => {
                ((req.input_tokens + req.output_tokens) as f64 / PAGED_BLOCK_TOKENS).ceil()
                    * PAGED_BLOCK_TOKENS
            }
        };
        let capacity = spec.kv_capacity_tokens * req.kv_capacity_factor;
        let overflow = self.kv_used_tokens + kv_tokens - capacity;
        let preemptions = if overflow <= 0.0 {
            0
        } else {
            (1.0 + overflow / kv_tokens.max(1.0)).floor().min(3.0) as u32
        };
        if preemptions > 0 {
            let recompute_ms = (req.input_tokens as f64 + req.output_tokens as f64 / 2.0)
                / spec.prefill_tokens_per_s
                * 1_000.0
                * req.prefill_factor;
            stall_ms = preemptions as f64 * (recompute_ms + 40.0 * step_ms);
            decode_ms += stall_ms;
            self.preemptions_total += preemptions as u64;
        }
        let ttft_ms = queue_ms + prefill_ms;
        let e2e_ms = ttft_ms + decode_ms;
        let end = start + prefill_ns + (decode_ms * 1e6) as i64;
        self.running.push(Reverse((end, kv_tokens as u64)));
        self.kv_used_tokens += kv_tokens;
        self.recent.push_back(Interval {
            arrival_ns: arrival,
            start_ns: start,
            end_ns: end,
            kv_tokens,
        });
        self.requests_total += 1;
        self.prompt_tokens_total += req.input_tokens as u64;
        self.generation_tokens_total += req.output_tokens as u64;
        self.spec_draft_total += draft as u64;
        self.spec_accepted_total += accepted as u64;
        Timing {
            queue_ms,
            prefill_ms,
            ttft_ms,
            decode_ms,
            tpot_ms: if req.output_tokens > 1 {
                decode_ms / (req.output_tokens - 1) as f64
            } else {
                0.0
            },
            itl_max_ms: if req.output_tokens > 1 {
                tpot_ms + stall_ms
            } else {
                0.0
            },
            e2e_ms,
            batch_size,
            cached_tokens,
            preemptions,
            spec_draft_tokens: draft,
            spec_accepted_tokens: accepted,
            aborted: false,
            start_ns: start,
            end_ns: end,
        }
    }

    /// Records a request that was aborted in the queue (it waited but never ran).
    pub fn note_aborted(&mut self, arrival_ns: i64, end_ns: i64) {
        self.recent.push_back(Interval {
            arrival_ns,
            start_ns: end_ns,
            end_ns,
            kv_tokens: 0.0,
        });
    }

    /// Running / waiting / KV usage at `t_ns`; forgets requests that ended before it. Valid once
    /// every request arriving up to `t_ns` has been admitted.
    pub fn gauges(&mut self, spec: &WorkerSpec, t_ns: i64, kv_capacity_factor: f64) -> Gauges {
        self.recent.retain(|i| i.end_ns > t_ns);
        let mut g = Gauges::default();
        let mut kv = 0.0;
        for i in &self.recent {
            if i.arrival_ns <= t_ns && t_ns < i.start_ns {
                g.waiting += 1;
            } else if i.start_ns <= t_ns && t_ns < i.end_ns {
                g.running += 1;
                kv += i.kv_tokens;
            }
        }
        g.kv_usage = (kv / (spec.kv_capacity_tokens * kv_capacity_factor)).min(1.0);
        g
    }
}
