//! Raw engine log lines, as each runtime writes them (vLLM V0 and V1, SGLang, TGI): per
//! request the prompt/response line, adapter reloads, preemption and rejection-sampling
//! warnings, CUDA out-of-memory errors and the access line; per chunk the periodic stats lines.
//! The simulator queues them per worker and writes them in time order.

use crate::engine::Gauges;
use crate::fleet::{Runtime, WorkerSpec};
use crate::prompts;
use crate::rng::Rng;
use crate::timefmt;
use crate::variation::{Conventions, ProcessTag};

use super::{ChunkStats, RequestFacts, ms_to_ns};

/// The run's conventions and the process that writes a line (for its process tag).
type Tag<'a> = (&'a Conventions, ProcessTag);

const API: ProcessTag = ProcessTag::ApiServer;
const CORE: ProcessTag = ProcessTag::EngineCore;

/// The raw lines of one request, with their timestamps, in the order they are queued.
pub(super) fn request_lines(
    facts: &RequestFacts,
    rng: &mut Rng,
    preemptions_total: u64,
) -> Vec<(i64, String)> {
    let mut raw: Vec<(i64, String)> = Vec::with_capacity(4);
    raw.push(prompt_line(facts, rng));
    raw.extend(adapter_reload_line(facts));
    raw.extend(preemption_line(facts, preemptions_total));
    raw.extend(rejection_sampling_line(facts));
    raw.extend(out_of_memory_line(facts));
    raw.push(access_line(facts, rng));
    raw
}

/// The prompt, response and top logit of the request, when it reaches the engine.
fn prompt_line(facts: &RequestFacts, rng: &mut Rng) -> (i64, String) {
    let engine_start = facts.times.engine_start_ns;
    let request_id = &facts.ids.request_id;
    let (prompt, response) = if facts.lengths.drifted {
        (prompts::drifted_prompt(rng), prompts::drifted_response())
    } else {
        let prompt = prompts::prompt(rng, facts.injected);
        (prompt, prompts::response(rng, facts.outcome.finish_reason))
    };
    let top = rng.below(32_000);
    (
        engine_start,
        format!(
            "{} [PROMPT] request_id={request_id} tenant={} {prompt} [RESPONSE] {response} [LOGITS] {{\"top_token\": {top}, \"logprob\": {:.3}, \"entropy\": {:.3}}}",
            log_prefix(
                facts.worker,
                (facts.conventions, API),
                "INFO",
                "logger.py:39",
                engine_start
            ),
            facts.tenant_name,
            -rng.exp(0.4),
            rng.unit() * 3.0
        ),
    )
}

/// The regressed slice reloads its adapter pair for every request (`lora_kv_regression`): the
/// engine says so when the request leaves the queue.
fn adapter_reload_line(facts: &RequestFacts) -> Option<(i64, String)> {
    if facts.extra_prefill_ms <= 0.0 {
        return None;
    }
    let timing = &facts.served.timing;
    let at = timing.start_ns + ms_to_ns(timing.queue_ms);
    Some((
        at,
        format!(
            "{} Loading LoRA adapters [{}] for request_id={} from /models/lora: not resident in the LoRA slots of the paged KV pool ({:.0} ms)",
            log_prefix(
                facts.worker,
                (facts.conventions, CORE),
                "INFO",
                "worker_manager.py:212",
                at
            ),
            facts.route.lora.replace(',', ", "),
            facts.ids.request_id,
            facts.extra_prefill_ms
        ),
    ))
}

fn preemption_line(facts: &RequestFacts, preemptions_total: u64) -> Option<(i64, String)> {
    let timing = &facts.served.timing;
    if timing.preemptions == 0 {
        return None;
    }
    Some((
        timing.start_ns + ms_to_ns(timing.prefill_ms) + 1_000_000,
        format!(
            "{} Sequence group {}-0 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption={preemptions_total}",
            log_prefix(
                facts.worker,
                (facts.conventions, CORE),
                "WARNING",
                "scheduler.py:1560",
                timing.start_ns
            ),
            facts.ids.request_id
        ),
    ))
}

/// An injected prompt on a speculative worker rolls back most of its draft tokens.
fn rejection_sampling_line(facts: &RequestFacts) -> Option<(i64, String)> {
    let timing = &facts.served.timing;
    if !(facts.injected && facts.worker.spec_tokens.is_some() && timing.spec_draft_tokens > 0) {
        return None;
    }
    let engine_start = facts.times.engine_start_ns;
    Some((
        engine_start + ms_to_ns(timing.prefill_ms) + 2_000_000,
        format!(
            "{} Rejection sampling failed for {}: accepted {} of {} draft tokens, rolled back {} speculative positions",
            log_prefix(
                facts.worker,
                (facts.conventions, CORE),
                "WARNING",
                "rejection_sampler.py:212",
                engine_start
            ),
            facts.ids.request_id,
            timing.spec_accepted_tokens,
            timing.spec_draft_tokens,
            timing.spec_draft_tokens - timing.spec_accepted_tokens
        ),
    ))
}

fn out_of_memory_line(facts: &RequestFacts) -> Option<(i64, String)> {
    if !facts.outcome.oom {
        return None;
    }
    let worker = facts.worker;
    let engine_end = facts.times.engine_end_ns;
    let used = 12.0 + facts.served.condition.leaked_gb;
    Some((
        engine_end,
        format!(
            "{} Error in model execution (request {}): torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of {:.2} GiB of which {:.2} MiB is free. Process 2817 has {:.2} GiB memory in use. Of the allocated memory {:.2} GiB is allocated by PyTorch, and 0.61 GiB is reserved by PyTorch but unallocated.",
            log_prefix(
                worker,
                (facts.conventions, CORE),
                "ERROR",
                "engine.py:1124",
                engine_end
            ),
            facts.ids.request_id,
            worker.gpu.memory_total_mib / 1024.0,
            (worker.gpu.memory_total_mib - used * 953.674).max(20.0),
            used * 0.931,
            used * 0.931 - 0.61
        ),
    ))
}

/// Access line when the response ends (uvicorn for vLLM and SGLang; TGI logs its router).
fn access_line(facts: &RequestFacts, rng: &mut Rng) -> (i64, String) {
    let engine_end = facts.times.engine_end_ns;
    let http_status = facts.outcome.http_status;
    let timing = &facts.served.timing;
    let line = match facts.worker.runtime {
        Runtime::Vllm | Runtime::Sglang => {
            let reason = match http_status {
                200 => "OK",
                504 => "Gateway Timeout",
                _ => "Internal Server Error",
            };
            let tag = facts
                .conventions
                .process_tag(facts.worker, API)
                .unwrap_or_default();
            format!(
                "{tag}INFO:     10.8.{}.{}:{} - \"POST /v1/chat/completions HTTP/1.1\" {http_status} {reason}",
                facts.route.gateway,
                10 + rng.below(4),
                30_000 + rng.below(30_000)
            )
        }
        Runtime::Tgi => format!(
            "{}  INFO chat_completions{{total_time=\"{:.6}s\" validation_time=\"{:.6}s\" queue_time=\"{:.6}s\" inference_time=\"{:.6}s\" time_per_token=\"{:.6}s\"}}: text_generation_router::server: router/src/server.rs:637: Success",
            timefmt::rfc3339_micros(engine_end),
            timing.e2e_ms / 1e3,
            facts.served.tokenize_ms / 1e3,
            timing.queue_ms / 1e3,
            (timing.prefill_ms + timing.decode_ms) / 1e3,
            timing.tpot_ms / 1e3
        ),
    };
    (engine_end, line)
}

/// The periodic engine stats lines of one worker for the chunk that ends at `at_ns`
/// (throughput, running and waiting requests, KV use, prefix hits, speculative decoding).
pub(super) fn stats_lines(
    worker: &WorkerSpec,
    conventions: &Conventions,
    stats: &ChunkStats,
    gauges: &Gauges,
    at_ns: i64,
    chunk_s: f64,
) -> Vec<String> {
    let prompt_tps = stats.prompt_tokens as f64 / chunk_s;
    let gen_tps = stats.generation_tokens as f64 / chunk_s;
    let kv_pct = gauges.kv_usage * 100.0;
    let mut lines = Vec::new();
    match worker.runtime {
        Runtime::Vllm if worker.vllm_v1 => {
            let hit = if stats.prefix_queries > 0 {
                stats.prefix_hits as f64 / stats.prefix_queries as f64 * 100.0
            } else {
                0.0
            };
            lines.push(format!(
                "{} Engine 000: Avg prompt throughput: {prompt_tps:.1} tokens/s, Avg generation throughput: {gen_tps:.1} tokens/s, Running: {} reqs, Waiting: {} reqs, GPU KV cache usage: {kv_pct:.1}%, Prefix cache hit rate: {hit:.1}%",
                log_prefix(worker, (conventions, API), "INFO", "loggers.py:123", at_ns),
                gauges.running,
                gauges.waiting
            ));
            if stats.draft > 0 {
                let rate = stats.accepted as f64 / stats.draft as f64;
                lines.push(format!(
                    "{} SpecDecoding metrics: Mean acceptance length: {:.2}, Accepted: {} tokens, Drafted: {} tokens, Avg Draft acceptance rate: {:.1}%",
                    log_prefix(worker, (conventions, API), "INFO", "metrics.py:96", at_ns),
                    1.0 + rate * worker.spec_tokens.unwrap_or(0) as f64,
                    stats.accepted,
                    stats.draft,
                    rate * 100.0
                ));
            }
        }
        Runtime::Vllm => {
            lines.push(format!(
                "{} Avg prompt throughput: {prompt_tps:.1} tokens/s, Avg generation throughput: {gen_tps:.1} tokens/s, Running: {} reqs, Swapped: 0 reqs, Pending: {} reqs, GPU KV cache usage: {kv_pct:.1}%, CPU KV cache usage: 0.0%.",
                log_prefix(worker, (conventions, API), "INFO", "metrics.py:351", at_ns),
                gauges.running,
                gauges.waiting
            ));
            if stats.draft > 0 {
                let rate = stats.accepted as f64 / stats.draft as f64;
                lines.push(format!(
                    "{} Speculative metrics: Draft acceptance rate: {rate:.3}, System efficiency: {:.3}, Number of speculative tokens: {}, Number of accepted tokens: {}, Number of draft tokens: {}, Number of emitted tokens: {}.",
                    log_prefix(worker, (conventions, API), "INFO", "metrics.py:455", at_ns),
                    (rate * 0.85).min(1.0),
                    worker.spec_tokens.unwrap_or(0),
                    stats.accepted,
                    stats.draft,
                    stats.generation_tokens
                ));
            }
        }
        Runtime::Sglang => lines.push(format!(
            "[{} TP0] Decode batch. #running-req: {}, #token: {}, token usage: {:.2}, gen throughput (token/s): {gen_tps:.2}, #queue-req: {}",
            timefmt::date_time(at_ns),
            gauges.running,
            (gauges.kv_usage * worker.kv_capacity_tokens) as u64,
            gauges.kv_usage,
            gauges.waiting
        )),
        Runtime::Tgi => {}
    }
    lines
}

/// The logger prefix of a worker's runtime: vLLM V0 `INFO 11-29 02:00:10 file.py:N]`, V1
/// `INFO 11-29 02:00:10 [file.py:N]` (after the writing process's tag, `(APIServer pid=N) `,
/// under `process_tags`), SGLang `[2025-11-29 02:00:10]`, TGI RFC 3339.
fn log_prefix(worker: &WorkerSpec, tag: Tag<'_>, level: &str, file: &str, ts_ns: i64) -> String {
    match worker.runtime {
        Runtime::Vllm if worker.vllm_v1 => {
            let tag = tag.0.process_tag(worker, tag.1).unwrap_or_default();
            format!("{tag}{level} {} [{file}]", timefmt::vllm(ts_ns))
        }
        Runtime::Vllm => format!("{level} {} {file}]", timefmt::vllm(ts_ns)),
        Runtime::Sglang => format!("[{}] {level}", timefmt::date_time(ts_ns)),
        Runtime::Tgi => format!("{}  {level}", timefmt::rfc3339_micros(ts_ns)),
    }
}
