//! Fleet simulator: workers, requests, latency model, fault scenarios with ground truth, and
//! the telemetry (OTLP traces, logs, metrics; raw engine logs) a real fleet would emit. It sits
//! in front of the whole data flow — its output is what the receivers and file readers ingest —
//! and does no IO of its own beyond reading the replay traces and the optional [`FileSink`].
//!
//! ```no_run
//! use infersight_sim::{FileSink, Scenario, SimConfig, Simulator};
//! let mut config = SimConfig::new(Scenario::LoraKvRegression);
//! config.duration_s = 600.0;
//! let sim = Simulator::new(config)?;
//! let truth = sim.ground_truth();
//! let mut sink = FileSink::create(std::path::Path::new("out"))?;
//! let summary = sim.run(&mut sink)?;
//! infersight_sim::write_ground_truth(std::path::Path::new("out"), &truth)?;
//! # Ok::<(), infersight_sim::SimError>(())
//! ```
//!
//! # The fleet
//!
//! Worker `i` of `n` (see [`fleet::WorkerSpec::new`]): model `llama-3.1-8b-instruct` for the first
//! half, `qwen2.5-7b-instruct` for the second; model version `r1` (even) / `r2` (odd); KV-cache
//! policy by ⌊i/2⌋ mod 4: `paged` (0, 3), `contiguous` (1), `prefix_cache` (2) — so every policy
//! runs both versions; runtime SGLang (i mod 8 = 5), TGI (i mod 8 = 2), vLLM otherwise (V0 0.6.3
//! log format when 3 | i, else V1 0.10.2); speculative decoding (4 draft tokens) on vLLM workers
//! with i mod 4 = 0; max batch 128 when 3 | i, else 64; GPUs L4 (A10G, 0.8× speed, when
//! i mod 5 = 4); span attributes in the current GenAI names when ⌊i/4⌋ is even, the deprecated
//! ones otherwise. Six tenants with fixed shares
//! and system prompts; sessions stick to a worker (prefix reuse); two gateways.
//!
//! # Latency model
//!
//! Per worker, requests are admitted in arrival order (continuous batching):
//!
//! * **queue** `q = max(a, slot, prefill_free + w) − a`, where `a` is the engine arrival, `slot`
//!   the time a batch slot frees (at most `max_batch` running), `prefill_free` the end of the
//!   previous prefill (prefills are serial) and `w` the scheduler's batching wait. When arrivals
//!   exceed capacity `q` grows without bound (until the 60 s gateway timeout aborts requests:
//!   status 504, `error.type=timeout`) and drains back to zero afterwards.
//! * **prefill** `p = 12 ms + (input − cached) / (90 000 tok/s · speed)`; `cached` is the length
//!   of the leading 512-token hash blocks found in the worker's LRU prefix cache (prefix_cache
//!   policy only; 96 blocks; Mooncake `hash_ids` or tenant system prompt + session history).
//! * **decode step** `s = (7 ms / speed) · (1 + b / 48) + 0.12 ms · context / 1000`, `b` the running
//!   batch including this request, `context = input + output / 2`. With speculative decoding
//!   (`k` drafts, acceptance `α`) a step costs `1.25 s` and yields `(1 − α^(k+1)) / (1 − α)` tokens.
//!   TPOT = step / tokens per step; **decode** `d = (output − 1) · TPOT`.
//! * **preemption**: KV use is prompt + output in 16-token blocks (paged) or prompt + max_tokens
//!   in 2 048-token chunks (contiguous) against 600 k tokens; the overflow preempts the request
//!   up to 3 times, each costing a recompute prefill of `input + output/2` tokens plus 40 steps.
//! * **TTFT** `= q + p`; **e2e (engine)** `= TTFT + d` (+ preemption cost); the client-side
//!   latency (gateway span) adds gateway (≈1.8 ms), tokenizer (0.3 ms + 0.4 µs/token),
//!   detokenizer (0.2 ms + 3 µs/token) and any HTTP/2 flow-control stall.
//!
//! * **token events**: a fraction of engine spans (`SimConfig::token_events`, default 0.5 %,
//!   drawn from a random stream of its own) carries one `gen_ai.token` event per output token, at
//!   most 256: the first at TTFT, the next after the max inter-token latency (one step, plus the
//!   preemption stall when preempted), then one step apart — so the gaps average TPOT.
//!
//! Scenario faults act on these terms only (see [`scenario`]): extra prefill time, step and
//! prefill factors, a batching wait, a KV-capacity factor, output-length factor, extra traffic,
//! gateway behaviour, and one tenant's prompt text and output lengths (prompt drift).
//!
//! The parameters are calibrated so that 16 workers carry the Mooncake trace (mean prompt 12k
//! tokens) at 50 req/s busy but healthy; they are not measurements of the GPU models named.
//!
//! # Arrivals
//!
//! [`ArrivalKind::Mooncake`], [`ArrivalKind::AzureCode`], [`ArrivalKind::AzureConv`] replay the
//! real traces under `INFERSIGHT_DATA_DIR` (default `../shared/data`) time-scaled to the requested
//! mean rate (looped when needed, every record kept), with input/output lengths as recorded;
//! [`ArrivalKind::Poisson`] needs no data (lognormal lengths: input median 900 tokens + system
//! prompt, output median 180; log-σ 0.9 and 0.7). A slow ±25 % load variation (30-minute period) and optional surges
//! warp time rather than drop arrivals.
//!
//! # Variations
//!
//! [`SimConfig::variations`] tells the same fault in other conventions ([`variation`]): other
//! attribute dialects and names no mapping knows, dimensions on the resource, GenAI attributes on
//! the gateway span, OTel `hw.*` GPU metrics, head-sampled traces, vLLM 0.10 process tags, another
//! year, a rollout, a fault narrowed to one pod or region, or a second fault. The ground truth is
//! then stated in the names the data carries. Without variations the output is unchanged.

pub mod arrivals;
pub mod config;
pub mod engine;
pub mod error;
pub mod fleet;
mod otlp;
pub mod prompts;
pub mod rng;
pub mod scenario;
pub mod sim;
pub mod sink;
pub mod timefmt;
pub mod variation;

pub use config::{
    ArrivalKind, DEFAULT_TOKEN_EVENTS, DimensionNames, LoadCycle, MAX_TOKEN_EVENTS_PER_REQUEST,
    SimConfig, Surge, default_data_dir,
};
pub use error::{SimError, SimErrorKind};
pub use rng::Rng;
pub use scenario::{GroundTruth, Scenario};
pub use sim::{SimSummary, Simulator};
pub use sink::{FileSink, MemorySink, TelemetrySink, write_ground_truth};
pub use variation::Variation;
