//! One request through the fleet: routing (tenant, session, model, LoRA set, gateway and
//! worker) → lengths (prompt, output, `max_tokens`, prefix blocks) → the worker's latency model
//! with the scenario's effects → the outcome (finish reason, error, HTTP status) → ids, then its
//! telemetry: spans and the gateway access record ([`super::trace`]) and raw engine lines
//! ([`super::raw_logs`]).
//!
//! The steps draw from the simulator's main random stream in a fixed order (routing, lengths,
//! serving, outcome, ids, client attributes, access record, raw lines), so a seed always gives
//! the same run: keep that order when changing a step.

use crate::arrivals::Arrival;
use crate::engine::{EngineRequest, PREFIX_BLOCK_TOKENS};
use crate::fleet::{KvPolicy, LORA_SETS, LORA_WEIGHTS, TENANTS, tenant_index};
use crate::rng::{Rng, mix64};
use crate::scenario::{
    BYTES_PER_STREAMED_TOKEN, CACHE_SCANNER, DRIFT_OUTPUT_MEDIAN_TOKENS, DRIFT_OUTPUT_SIGMA,
    Effects, FLOW_WINDOW_BYTES, GATEWAY_TIMEOUT_MS, INJECTION_TENANT, STALL_PER_WINDOW_MS,
};
use crate::variation::conventions::sampled;

use super::{
    ChunkOut, Client, Ids, Lengths, Origin, Outcome, Pending, RequestFacts, Route, Served,
    Simulator, Times, id8, id16, ms_to_ns, raw_logs, trace,
};

impl Simulator {
    /// Simulates one request and adds its spans, access record and raw lines to the chunk.
    pub(super) fn request(&mut self, p: Pending, out: &mut ChunkOut) {
        let Pending {
            at_ns,
            arrival,
            origin,
            ..
        } = p;
        let route = self.route(&arrival, origin);
        let effects = self.plan.effects(
            &self.fleet.workers[route.worker],
            route.lora,
            route.gateway,
            at_ns,
        );
        let lengths = self.lengths(&arrival, origin, &route, &effects, at_ns);
        let injected = origin == Origin::Injection;
        let served = self.serve(at_ns, &route, &lengths, &effects, injected);
        let outcome = self.outcome(&route, &lengths, &served, &effects);

        let rng = &mut self.rng;
        let ids = Ids::draw(rng, effects.drop_context);
        let times = Times::new(at_ns, &served, &outcome);
        let client = Client::draw(rng, injected);
        let worker = &self.fleet.workers[route.worker];
        let conventions = &self.conventions;
        let facts = RequestFacts {
            worker,
            model_version: conventions.model_version(worker, at_ns >= self.plan.incident_start_ns),
            conventions,
            tenant_name: TENANTS[route.tenant].name,
            gateway_version: effects
                .gateway_version
                .unwrap_or(self.fleet.gateways[route.gateway].version),
            extra_prefill_ms: effects.extra_prefill_ms,
            injected,
            route,
            lengths,
            served,
            outcome,
            ids,
            times,
            client,
        };

        // Head sampling (a variation) decides per trace from its id: no random draw.
        let sampling = conventions.sampling();
        let kept = |trace_id: &[u8]| {
            sampling
                .as_ref()
                .is_none_or(|(threshold, _)| sampled(trace_id, *threshold))
        };
        let trace_state = sampling.as_ref().map(|(_, entry)| entry.as_str());
        if kept(&facts.ids.trace_id) {
            let mut span = trace::gateway_span(&facts);
            stamp(std::slice::from_mut(&mut span), trace_state);
            out.gateway_spans
                .entry(facts.route.gateway)
                .or_default()
                .push(span);
        }
        // One draw per request whatever its outcome, so the choice depends on the seed and the
        // request's position only.
        let fraction = self.config.token_events;
        let with_token_events = fraction > 0.0 && self.token_rng.chance(fraction);
        if kept(&facts.ids.engine_trace_id) {
            let mut spans = trace::worker_spans(&facts, self.config.phase_spans, with_token_events);
            stamp(&mut spans.spans, trace_state);
            self.summary.token_events += spans.token_events;
            out.worker_spans
                .entry(facts.route.worker)
                .or_default()
                .extend(spans.spans);
        }
        out.gateway_logs
            .entry(facts.route.gateway)
            .or_default()
            .push(trace::access_record(&facts, rng));

        let preemptions_total = self.engines[facts.route.worker].preemptions_total;
        let raw = raw_logs::request_lines(&facts, rng, preemptions_total);
        let worker_index = facts.route.worker;
        for (ts, text) in raw {
            self.line(worker_index, ts, text);
        }
    }

    /// Tenant, model, LoRA set and gateway, then the session, which picks the worker: sessions
    /// stick to a worker of their model (prefix reuse).
    fn route(&mut self, arrival: &Arrival, origin: Origin) -> Route {
        let rng = &mut self.rng;
        let tenant = match origin {
            Origin::Normal => {
                let weights: Vec<f64> = TENANTS.iter().map(|t| t.weight).collect();
                rng.weighted(&weights)
            }
            Origin::Scanner => tenant_index(CACHE_SCANNER),
            Origin::Injection => tenant_index(INJECTION_TENANT),
        };
        let model_index = TENANTS[tenant]
            .model
            .unwrap_or_else(|| rng.below(2) as usize);
        let lora = LORA_SETS[rng.weighted(&LORA_WEIGHTS)];
        let gateway = rng.below(self.fleet.gateways.len() as u64) as usize;
        let session = match origin {
            Origin::Scanner => self.rng.next_u64(),
            _ if arrival.hash_ids.len() > 1 => mix64(arrival.hash_ids[1]),
            _ => self.session(tenant),
        };
        let eligible = &self.fleet.by_model[model_index];
        let worker = eligible[(mix64(session ^ 0x77) % eligible.len() as u64) as usize];
        Route {
            tenant,
            lora,
            gateway,
            session,
            worker,
        }
    }

    /// Picks a session of `tenant`: 60 % continue a recent one (multi-turn), else a new one.
    fn session(&mut self, tenant: usize) -> u64 {
        let recent = &mut self.sessions[tenant];
        if !recent.is_empty() && self.rng.chance(0.6) {
            return recent[self.rng.below(recent.len() as u64) as usize];
        }
        let id = self.rng.next_u64();
        if recent.len() < 256 {
            recent.push(id);
        } else {
            let slot = self.rng.below(256) as usize;
            recent[slot] = id;
        }
        id
    }

    /// Prompt and output lengths, `max_tokens` and the prompt's prefix blocks.
    fn lengths(
        &mut self,
        arrival: &Arrival,
        origin: Origin,
        route: &Route,
        effects: &Effects,
        at_ns: i64,
    ) -> Lengths {
        let rng = &mut self.rng;
        let tenant_spec = &TENANTS[route.tenant];
        // Lengths: trace replay keeps the source's; synthesized prompts get the tenant's system
        // prompt in front.
        let sys_blocks = tenant_spec.system_prompt_blocks;
        let mut input = arrival.input_tokens.max(1);
        if !self.trace_replay && origin == Origin::Normal {
            input += sys_blocks * PREFIX_BLOCK_TOKENS;
        }
        // A drifted tenant's client asks for long documents and sets max_tokens for them, so
        // its outputs grow without being truncated.
        let drifted = self.plan.prompt_drift(tenant_spec.name, at_ns);
        let natural_output = if drifted {
            rng.lognormal(DRIFT_OUTPUT_MEDIAN_TOKENS, DRIFT_OUTPUT_SIGMA)
                .clamp(256.0, 4_000.0) as u32
        } else {
            arrival.output_tokens.max(1)
        };
        // Clients set max_tokens from what they normally get; 1.5 % are set too tight.
        let max_tokens = if rng.chance(0.015) {
            natural_output
        } else {
            [256u32, 512, 1024, 2048, 4096, 8192]
                .into_iter()
                .find(|m| *m as f64 >= natural_output as f64 * 1.2)
                .unwrap_or(natural_output.max(8192))
        };
        let wanted = ((natural_output as f64) * effects.output_factor).round() as u32;
        Lengths {
            input,
            output: wanted.min(max_tokens).max(1),
            max_tokens,
            truncated: wanted >= max_tokens,
            drifted,
            blocks: prefix_blocks(arrival, origin, route, input, sys_blocks),
        }
    }

    /// Gateway and tokenizer time, then the worker's engine admits the request (queue,
    /// prefill, decode, preemptions).
    fn serve(
        &mut self,
        at_ns: i64,
        route: &Route,
        lengths: &Lengths,
        effects: &Effects,
        injected: bool,
    ) -> Served {
        let rng = &mut self.rng;
        let worker = &self.fleet.workers[route.worker];
        let spec_acceptance = if injected {
            0.15 + 0.05 * rng.unit()
        } else {
            0.68 + 0.06 * rng.unit()
        };
        let gateway_ms = 1.2 + rng.exp(0.6);
        let tokenize_ms = 0.3 + lengths.input as f64 * 0.000_4;
        let engine_arrival_ns = at_ns + ((gateway_ms + tokenize_ms) * 1e6) as i64;
        let condition = self.plan.condition(worker, at_ns);
        let engine_request = EngineRequest {
            arrival_ns: engine_arrival_ns,
            input_tokens: lengths.input,
            output_tokens: lengths.output,
            max_tokens: lengths.max_tokens,
            blocks: &lengths.blocks,
            step_factor: effects.step_factor * (1.0 + 0.04 * rng.normal()).clamp(0.85, 1.2),
            prefill_factor: effects.prefill_factor,
            extra_prefill_ms: effects.extra_prefill_ms,
            batch_wait_ms: effects.batch_wait_ms.unwrap_or(worker.batch_wait_ms),
            kv_capacity_factor: effects.kv_capacity_factor,
            spec_acceptance,
            timeout_ms: GATEWAY_TIMEOUT_MS,
        };
        let timing = self.engines[route.worker].admit(worker, &engine_request);
        if timing.aborted {
            self.engines[route.worker].note_aborted(engine_arrival_ns, timing.end_ns);
            self.summary.timeouts += 1;
        }
        Served {
            gateway_ms,
            tokenize_ms,
            engine_arrival_ns,
            batch_wait_ms: engine_request.batch_wait_ms,
            timing,
            condition,
        }
    }

    /// How the request ends (timeout, out of memory, truncated or complete), and what it adds
    /// to its worker's stats line and the run's summary.
    fn outcome(
        &mut self,
        route: &Route,
        lengths: &Lengths,
        served: &Served,
        effects: &Effects,
    ) -> Outcome {
        let timing = &served.timing;
        let (input, output) = (lengths.input, lengths.output);
        // The end of the incident of a leaking worker: allocations fail.
        let oom = served.condition.leaked_gb > 10.0 && !timing.aborted && self.rng.chance(0.3);
        if !timing.aborted && !oom {
            self.latency[route.worker].served(timing.end_ns, timing.ttft_ms, timing.e2e_ms);
        }
        let stats = &mut self.chunk_stats[route.worker];
        if !timing.aborted {
            stats.prompt_tokens += input as u64;
            stats.generation_tokens += output as u64;
            stats.draft += timing.spec_draft_tokens as u64;
            stats.accepted += timing.spec_accepted_tokens as u64;
            if self.fleet.workers[route.worker].kv_policy == KvPolicy::PrefixCache {
                stats.prefix_queries += input as u64;
                stats.prefix_hits += timing.cached_tokens as u64;
            }
        }
        self.summary.requests += 1;
        self.summary.preemptions += timing.preemptions as u64;

        let post_ms = 0.2 + output as f64 * 0.003;
        let stall_ms = if effects.flow_stall && !timing.aborted {
            let bytes = output as f64 * BYTES_PER_STREAMED_TOKEN;
            (bytes / FLOW_WINDOW_BYTES).floor() * STALL_PER_WINDOW_MS
        } else {
            0.0
        };
        let (output_emitted, finish_reason, error_type) = if timing.aborted {
            (0, "abort", Some("timeout"))
        } else if oom {
            (output / 3, "abort", Some("OutOfMemoryError"))
        } else if lengths.truncated {
            (output, "length", None)
        } else {
            (output, "stop", None)
        };
        if error_type.is_some() {
            self.summary.errors += 1;
        }
        let http_status: i64 = match error_type {
            Some("timeout") => 504,
            Some(_) => 500,
            None => 200,
        };
        Outcome {
            oom,
            output_emitted,
            finish_reason,
            error_type,
            http_status,
            post_ms,
            stall_ms,
        }
    }
}

/// Puts a sampled trace's `tracestate` on its spans.
fn stamp(spans: &mut [opentelemetry_proto::tonic::trace::v1::Span], trace_state: Option<&str>) {
    if let Some(state) = trace_state {
        for span in spans {
            span.trace_state = state.to_string();
        }
    }
}

/// Prefix blocks: the trace's, or tenant system prompt + session history by position.
fn prefix_blocks(
    arrival: &Arrival,
    origin: Origin,
    route: &Route,
    input: u32,
    sys_blocks: u32,
) -> Vec<u64> {
    if !arrival.hash_ids.is_empty() {
        return arrival.hash_ids.clone();
    }
    let full_blocks = input / PREFIX_BLOCK_TOKENS;
    let (tenant, session) = (route.tenant, route.session);
    (0..full_blocks)
        .map(|j| match origin {
            Origin::Scanner => mix64(session ^ (j as u64) << 20),
            _ if j < sys_blocks => (1u64 << 62) | ((tenant as u64) << 16) | j as u64,
            _ => mix64(session.wrapping_add(j as u64)),
        })
        .collect()
}

impl Ids {
    /// The trace, its spans and the request id, in this order from the main stream.
    fn draw(rng: &mut Rng, drop_context: bool) -> Self {
        let trace_id = id16(rng);
        let gateway_span_id = id8(rng);
        let tokenizer_span_id = id8(rng);
        let engine_span_id = id8(rng);
        let post_span_id = id8(rng);
        let request_id = format!("cmpl-{}", rng.hex128());
        let (engine_trace_id, tokenizer_parent) = if drop_context {
            (id16(rng), Vec::new())
        } else {
            (trace_id.clone(), gateway_span_id.clone())
        };
        Self {
            trace_id,
            gateway_span_id,
            tokenizer_span_id,
            engine_span_id,
            post_span_id,
            request_id,
            engine_trace_id,
            tokenizer_parent,
        }
    }
}

impl Times {
    /// Gateway → tokenizer → engine → detokenizer → (flow-control stall) → response end.
    fn new(at_ns: i64, served: &Served, outcome: &Outcome) -> Self {
        let tokenizer_start_ns = at_ns + ms_to_ns(served.gateway_ms);
        let engine_start_ns = served.engine_arrival_ns;
        let engine_end_ns = engine_start_ns + ms_to_ns(served.timing.e2e_ms);
        let post_end_ns = engine_end_ns + ms_to_ns(outcome.post_ms);
        let gateway_end_ns = post_end_ns + ms_to_ns(outcome.stall_ms + 0.4);
        Self {
            at_ns,
            tokenizer_start_ns,
            engine_start_ns,
            engine_end_ns,
            post_end_ns,
            gateway_end_ns,
            client_e2e_ms: (gateway_end_ns - at_ns) as f64 / 1e6,
        }
    }
}

impl Client {
    fn draw(rng: &mut Rng, injected: bool) -> Self {
        let email = format!(
            "{}{}@example.com",
            ["jane.doe", "wei.zhang", "c.garcia", "ops"][rng.below(4) as usize],
            rng.below(1000)
        );
        let injection_score = if injected {
            0.85 + 0.14 * rng.unit()
        } else {
            (rng.exp(0.02)).min(0.6)
        };
        let temperature = [0.0, 0.2, 0.7, 1.0][rng.below(4) as usize];
        Self {
            email,
            injection_score,
            temperature,
        }
    }
}
