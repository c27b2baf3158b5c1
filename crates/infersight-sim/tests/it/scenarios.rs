//! Every scenario's injected effect is visible in the emitted telemetry: its SLI moves by the
//! stated amount in the stated attribute combination and not elsewhere. Rows come from engine
//! spans normalized by the real mapping table; resource signals from the emitted metrics and raw
//! engine logs.

use std::collections::BTreeMap;

use infersight_model::RequestRecord;
use infersight_sim::Scenario;
use infersight_sim::scenario::{LORA_REGRESSION_MS, STALL_PER_WINDOW_MS};
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Point;

use crate::support::{Emitted, quantile, requests, run_memory, short, spans};

/// Incident = last third of the 30-minute run.
const INCIDENT_FROM_S: f64 = 1_200.0;

struct Split {
    start_ns: i64,
}

impl Split {
    fn new() -> Self {
        Split {
            start_ns: infersight_sim::config::DEFAULT_START_NS,
        }
    }
    fn incident(&self, ts: i64) -> bool {
        (ts - self.start_ns) as f64 / 1e9 >= INCIDENT_FROM_S
    }
    /// Baseline excludes the first 2 minutes (warm-up of caches and queues).
    fn baseline(&self, ts: i64) -> bool {
        let s = (ts - self.start_ns) as f64 / 1e9;
        (120.0..INCIDENT_FROM_S).contains(&s)
    }
}

fn values(
    rows: &[RequestRecord],
    when: impl Fn(i64) -> bool,
    pick: impl Fn(&RequestRecord) -> Option<f64>,
    filter: impl Fn(&RequestRecord) -> bool,
) -> Vec<f64> {
    rows.iter()
        .filter(|r| when(r.ts) && filter(r))
        .filter_map(&pick)
        .collect()
}

/// (baseline, incident) quantile of `pick` over rows matching `filter`.
fn shift(
    rows: &[RequestRecord],
    q: f64,
    pick: impl Fn(&RequestRecord) -> Option<f64> + Copy,
    filter: impl Fn(&RequestRecord) -> bool + Copy,
) -> (f64, f64) {
    let split = Split::new();
    let before = values(rows, |t| split.baseline(t), pick, filter);
    let during = values(rows, |t| split.incident(t), pick, filter);
    (quantile(&before, q), quantile(&during, q))
}

fn e2e(r: &RequestRecord) -> Option<f64> {
    r.e2e_ms
}
fn ttft(r: &RequestRecord) -> Option<f64> {
    r.ttft_ms
}

fn is(field: &Option<String>, value: &str) -> bool {
    field.as_deref() == Some(value)
}

fn workers(rows: &[RequestRecord]) -> Vec<String> {
    let mut w: Vec<String> = rows.iter().filter_map(|r| r.worker.clone()).collect();
    w.sort();
    w.dedup();
    w
}

/// Last value of a gauge per (worker, window) from the emitted metrics.
fn gauge_series(emitted: &Emitted, name: &str, worker: &str) -> Vec<(i64, f64)> {
    let mut out = Vec::new();
    for export in &emitted.sink.metrics {
        for rm in &export.resource_metrics {
            let is_worker = rm.resource.as_ref().is_some_and(|r| {
                r.attributes.iter().any(|kv| {
                    kv.key == "k8s.pod.name"
                        && crate::support::attr(kv.value.as_ref().unwrap())
                            .as_label()
                            .as_deref()
                            == Some(worker)
                })
            });
            if !is_worker {
                continue;
            }
            for sm in &rm.scope_metrics {
                for m in sm.metrics.iter().filter(|m| m.name == name) {
                    let points = match &m.data {
                        Some(Data::Gauge(g)) => &g.data_points,
                        Some(Data::Sum(s)) => &s.data_points,
                        _ => continue,
                    };
                    for p in points {
                        if let Some(Point::AsDouble(v)) = p.value {
                            out.push((p.time_unix_nano as i64, v));
                        }
                    }
                }
            }
        }
    }
    out
}

fn raw_lines_of<'a>(emitted: &'a Emitted, worker: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    emitted
        .sink
        .raw_lines
        .iter()
        .filter(move |(w, _, _, _)| w == worker)
        .map(|(_, _, _, l)| l.as_str())
}

fn lora_slice(r: &RequestRecord) -> bool {
    is(&r.model_version, "r2")
        && is(&r.kv_cache_policy, "paged")
        && is(&r.lora_adapters, "chat-lora,sql-lora")
}

fn check_lora_regression(rows: &[RequestRecord], skip_worker: Option<&str>) {
    // Every request of the slice waits the same extra time before its first token, so TTFT
    // moves by it at every quantile, p99 included; e2e too (its p99 is left out: it carries the
    // sampling noise of the output-length tail, ±700 ms with this many requests).
    for (q, low, high) in [(0.5, 0.9, 1.1), (0.99, 0.8, 1.2)] {
        let (b, d) = shift(rows, q, ttft, lora_slice);
        assert!(
            (low * LORA_REGRESSION_MS..high * LORA_REGRESSION_MS).contains(&(d - b)),
            "slice ttft p{} {b:.0} → {d:.0}",
            q * 100.0
        );
    }
    for (q, low, high) in [(0.5, 0.8, 1.2), (0.9, 0.7, 1.3)] {
        let (b, d) = shift(rows, q, e2e, lora_slice);
        assert!(
            (low * LORA_REGRESSION_MS..high * LORA_REGRESSION_MS).contains(&(d - b)),
            "slice p{} {b:.0} → {d:.0}",
            q * 100.0
        );
    }
    // Nowhere else: every other (version, policy, LoRA) combination keeps its median.
    let mut combos = BTreeMap::new();
    for r in rows.iter().filter(|r| !lora_slice(r)) {
        if skip_worker.is_some_and(|w| is(&r.worker, w)) {
            continue;
        }
        let key = (
            r.model_version.clone(),
            r.kv_cache_policy.clone(),
            r.lora_adapters.clone(),
        );
        combos.entry(key).or_insert(());
    }
    assert!(combos.len() >= 17, "{}", combos.len());
    for (v, k, l) in combos.keys() {
        let f = |r: &RequestRecord| {
            r.model_version == *v
                && r.kv_cache_policy == *k
                && r.lora_adapters == *l
                && !skip_worker.is_some_and(|w| is(&r.worker, w))
        };
        let (b, d) = shift(rows, 0.5, e2e, f);
        assert!(
            (d - b).abs() < 0.15 * b.max(400.0),
            "{v:?} {k:?} {l:?}: p50 {b:.0} → {d:.0}"
        );
    }
}

#[test]
fn lora_kv_regression_moves_p99_by_900ms_on_one_slice_only() {
    let mut config = short(Scenario::LoraKvRegression, 1);
    config.rate_per_s = 40.0;
    let emitted = run_memory(config);
    check_lora_regression(&requests(&emitted.traces), None);
}

fn check_slow_worker(emitted: &Emitted, rows: &[RequestRecord]) {
    let target = "worker-11";
    let (b, d) = shift(rows, 0.5, e2e, |r| is(&r.worker, target));
    assert!(
        (1.7..2.8).contains(&(d / b)),
        "{target} p50 {b:.0} → {d:.0}"
    );
    for w in workers(rows).iter().filter(|w| *w != target) {
        let (b, d) = shift(
            rows,
            0.5,
            |r| r.ttft_ms,
            |r| is(&r.worker, w) && !lora_slice(r),
        );
        assert!(d / b < 1.3, "{w} ttft p50 {b:.0} → {d:.0}");
    }
    let temps = gauge_series(emitted, "DCGM_FI_DEV_GPU_TEMP", target);
    let last = temps.last().unwrap().1;
    let early = temps[10].1;
    assert!(last >= 90.0 && early < 80.0, "{early} → {last}");
    let clock = gauge_series(emitted, "DCGM_FI_DEV_SM_CLOCK", target);
    assert!(clock.last().unwrap().1 < 0.6 * clock[10].1);
}

#[test]
fn slow_worker_doubles_one_workers_latency_and_runs_hot() {
    let emitted = run_memory(short(Scenario::SlowWorker, 2));
    let rows = requests(&emitted.traces);
    check_slow_worker(&emitted, &rows);
}

#[test]
fn two_causes_shows_both() {
    let emitted = run_memory(short(Scenario::TwoCauses, 3));
    let rows = requests(&emitted.traces);
    check_lora_regression(&rows, Some("worker-11"));
    check_slow_worker(&emitted, &rows);
}

#[test]
fn gpu_memory_leak_grows_memory_at_low_utilization_and_latency_tenfold() {
    let emitted = run_memory(short(Scenario::GpuMemoryLeak, 4));
    let rows = requests(&emitted.traces);
    let target = "worker-03";
    let split = Split::new();
    let late = |t: i64| (t - split.start_ns) as f64 / 1e9 >= 1_700.0;
    let base = values(&rows, |t| split.baseline(t), e2e, |r| is(&r.worker, target));
    let end = values(&rows, late, e2e, |r| is(&r.worker, target));
    let ratio = quantile(&end, 0.5) / quantile(&base, 0.5);
    assert!(ratio > 6.0, "latency ×{ratio:.1} at the end");
    for w in workers(&rows).iter().filter(|w| *w != target) {
        let (b, d) = shift(&rows, 0.5, e2e, |r| is(&r.worker, w));
        assert!(d / b < 1.3, "{w}: {b:.0} → {d:.0}");
    }
    let mem = gauge_series(&emitted, "DCGM_FI_DEV_FB_USED", target);
    let gb = |mib: f64| mib * 1_048_576.0 / 1e9;
    assert!(
        (11.5..12.5).contains(&gb(mem[60].1)),
        "baseline {} GB",
        gb(mem[60].1)
    );
    assert!(
        (22.0..23.5).contains(&gb(mem.last().unwrap().1)),
        "end {} GB",
        gb(mem.last().unwrap().1)
    );
    let util = gauge_series(&emitted, "DCGM_FI_DEV_GPU_UTIL", target);
    assert!(
        util.iter()
            .filter(|(t, _)| split.incident(*t))
            .all(|(_, u)| *u < 5.0)
    );
    assert!(
        util.iter()
            .filter(|(t, _)| split.baseline(*t))
            .any(|(_, u)| *u > 20.0)
    );
    let other = gauge_series(&emitted, "DCGM_FI_DEV_FB_USED", "worker-04");
    assert!(gb(other.last().unwrap().1) < 12.5);
    assert!(
        raw_lines_of(&emitted, target)
            .any(|l| l.contains("torch.OutOfMemoryError: CUDA out of memory"))
    );
    assert!(!raw_lines_of(&emitted, "worker-04").any(|l| l.contains("CUDA out of memory")));
}

#[test]
fn batching_misconfig_builds_a_queue_and_timeouts_on_one_deployment() {
    let emitted = run_memory(short(Scenario::BatchingMisconfig, 5));
    let rows = requests(&emitted.traces);
    let deployment =
        |r: &RequestRecord| is(&r.model, "qwen2.5-7b-instruct") && is(&r.model_version, "r1");
    let (b, d) = shift(&rows, 0.5, |r| r.queue_ms, deployment);
    assert!(b < 50.0 && d > 10_000.0, "queue p50 {b:.0} → {d:.0} ms");
    let timeouts = |f: &dyn Fn(&RequestRecord) -> bool| {
        rows.iter()
            .filter(|r| f(r) && is(&r.error_type, "timeout"))
            .count()
    };
    assert!(timeouts(&deployment) > 100, "{}", timeouts(&deployment));
    assert_eq!(timeouts(&|r: &RequestRecord| !deployment(r)), 0);
    let (b, d) = shift(&rows, 0.5, |r| r.queue_ms, |r| !deployment(r));
    assert!(d - b < 20.0, "elsewhere queue p50 {b:.1} → {d:.1}");
    assert!(
        rows.iter()
            .filter(|r| deployment(r))
            .any(|r| r.attrs.contains("\"serving.batch.wait_ms\":2000"))
    );
}

#[test]
fn cache_pollution_raises_the_victims_ttft_on_prefix_cache_workers() {
    let emitted = run_memory(short(Scenario::CachePollution, 6));
    let rows = requests(&emitted.traces);
    let prefix = |r: &RequestRecord| is(&r.kv_cache_policy, "prefix_cache");
    let victim = |r: &RequestRecord| prefix(r) && is(&r.tenant, "globex");
    let (b, d) = shift(&rows, 0.5, ttft, victim);
    assert!(d - b > 100.0, "victim ttft p50 {b:.0} → {d:.0}");
    let (cb, cd) = shift(&rows, 0.5, |r| r.cached_tokens.map(|c| c as f64), victim);
    assert!(
        cb >= 4_096.0 && cd < cb / 2.0,
        "victim cached tokens {cb} → {cd}"
    );
    for tenant in ["umbrella", "stark"] {
        let (b, d) = shift(&rows, 0.5, ttft, |r| prefix(r) && is(&r.tenant, tenant));
        assert!(d - b < 40.0, "{tenant} ttft p50 {b:.0} → {d:.0}");
    }
    let (b, d) = shift(&rows, 0.5, ttft, |r| !prefix(r) && is(&r.tenant, "globex"));
    assert!(d - b < 40.0, "victim elsewhere {b:.0} → {d:.0}");
}

#[test]
fn injection_resonance_raises_injection_rejections_and_rollbacks_together() {
    let emitted = run_memory(short(Scenario::InjectionResonance, 7));
    let rows = requests(&emitted.traces);
    let split = Split::new();
    let score = |r: &RequestRecord| {
        serde_json::from_str::<serde_json::Value>(&r.attrs).unwrap()["serving.guardrail.injection_score"]
            .as_f64()
            .unwrap()
    };
    let acceptance = |when: &dyn Fn(i64) -> bool, f: &dyn Fn(&RequestRecord) -> bool| {
        let (mut d, mut a) = (0i64, 0i64);
        for r in rows.iter().filter(|r| when(r.ts) && f(r)) {
            d += r.spec_draft_tokens.unwrap_or(0);
            a += r.spec_accepted_tokens.unwrap_or(0);
        }
        a as f64 / d.max(1) as f64
    };
    let initech = |r: &RequestRecord| is(&r.tenant, "initech");
    let base = acceptance(&|t| split.baseline(t), &initech);
    let during = acceptance(&|t| split.incident(t), &initech);
    assert!(
        (0.38..0.5).contains(&base) && during < base - 0.1,
        "initech acceptance {base:.2} → {during:.2}"
    );
    let injected = acceptance(&|t| split.incident(t), &|r| initech(r) && score(r) > 0.8);
    assert!(injected < 0.1, "{injected}");
    let others = |r: &RequestRecord| !initech(r);
    let (ob, od) = (
        acceptance(&|t| split.baseline(t), &others),
        acceptance(&|t| split.incident(t), &others),
    );
    assert!((ob - od).abs() < 0.03, "others {ob:.2} → {od:.2}");
    let high =
        |when: &dyn Fn(i64) -> bool| rows.iter().filter(|r| when(r.ts) && score(r) > 0.8).count();
    assert_eq!(high(&|t| split.baseline(t)), 0);
    assert!(high(&|t| split.incident(t)) > 300);
    let rejections = emitted
        .sink
        .raw_lines
        .iter()
        .filter(|(_, _, _, l)| l.contains("Rejection sampling failed"))
        .count();
    assert!(rejections > 50, "{rejections}");
    assert!(
        emitted
            .sink
            .raw_lines
            .iter()
            .filter(|(_, _, _, l)| l.contains("Rejection sampling failed"))
            .all(|(_, _, t, _)| split.incident(*t))
    );
}

#[test]
fn truncation_surge_hits_one_model() {
    let emitted = run_memory(short(Scenario::TruncationSurge, 8));
    let rows = requests(&emitted.traces);
    let split = Split::new();
    let share = |when: &dyn Fn(i64) -> bool, model: &str| {
        let m: Vec<_> = rows
            .iter()
            .filter(|r| when(r.ts) && is(&r.model, model))
            .collect();
        m.iter().filter(|r| is(&r.finish_reason, "length")).count() as f64 / m.len() as f64
    };
    let (b, d) = (
        share(&|t| split.baseline(t), "qwen2.5-7b-instruct"),
        share(&|t| split.incident(t), "qwen2.5-7b-instruct"),
    );
    assert!(b < 0.05 && d > 0.25, "qwen length share {b:.3} → {d:.3}");
    let (b, d) = (
        share(&|t| split.baseline(t), "llama-3.1-8b-instruct"),
        share(&|t| split.incident(t), "llama-3.1-8b-instruct"),
    );
    assert!(b < 0.05 && (d - b).abs() < 0.02, "llama {b:.3} → {d:.3}");
}

/// Gateway spans and how many engine-side children each has.
fn gateway_children(all: &[crate::support::SpanRow]) -> Vec<(&crate::support::SpanRow, usize)> {
    let mut children: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
    for s in all.iter().filter(|s| !s.parent.is_empty()) {
        *children.entry(s.parent.clone()).or_default() += 1;
    }
    all.iter()
        .filter(|s| s.service == "gateway")
        .map(|g| (g, children.get(&g.span_id).copied().unwrap_or(0)))
        .collect()
}

#[test]
fn trace_context_loss_orphans_spans_behind_one_gateway_version() {
    let emitted = run_memory(short(Scenario::TraceContextLoss, 9));
    let all = spans(&emitted.traces);
    let gateways = gateway_children(&all);
    let childless = |version: &str| {
        let g: Vec<_> = gateways
            .iter()
            .filter(|(g, _)| g.service_version == version)
            .collect();
        (g.iter().filter(|(_, c)| *c == 0).count(), g.len())
    };
    let (lost, total) = childless("2.4.0");
    assert!(total > 1_000 && lost == total, "{lost}/{total}");
    let (lost, total) = childless("2.3.1");
    assert!(total > 1_000 && lost == 0, "{lost}/{total}");
    let split = Split::new();
    let roots = |when: &dyn Fn(i64) -> bool| {
        all.iter()
            .filter(|s| s.name == "tokenize" && s.parent.is_empty() && when(s.start_ns))
            .count()
    };
    assert_eq!(roots(&|t| split.baseline(t)), 0);
    assert!(roots(&|t| split.incident(t)) > 1_000);
}

#[test]
fn flow_control_stall_delays_long_streams_behind_one_gateway_version() {
    let emitted = run_memory(short(Scenario::FlowControlStall, 10));
    let all = spans(&emitted.traces);
    let by_trace: BTreeMap<Vec<u8>, &crate::support::SpanRow> = all
        .iter()
        .filter(|s| s.name == "llm_request")
        .map(|s| (s.trace_id.clone(), s))
        .collect();
    let overhead = |version: &str, long: bool| {
        let v: Vec<f64> = all
            .iter()
            .filter(|g| g.service == "gateway" && g.service_version == version)
            .filter_map(|g| by_trace.get(&g.trace_id).map(|e| (g, e)))
            .filter(|(_, e)| {
                let out = e
                    .int("gen_ai.usage.output_tokens")
                    .or(e.int("gen_ai.usage.completion_tokens"))
                    .unwrap_or(0);
                (out > 512) == long
            })
            .map(|(g, e)| g.duration_ms() - e.duration_ms())
            .collect();
        quantile(&v, 0.5)
    };
    assert!(
        overhead("2.4.0", true) >= 2.0 * STALL_PER_WINDOW_MS,
        "{}",
        overhead("2.4.0", true)
    );
    assert!(overhead("2.4.0", false) < 20.0 + 2.0 * STALL_PER_WINDOW_MS);
    assert!(
        overhead("2.3.1", true) < 20.0,
        "{}",
        overhead("2.3.1", true)
    );
    // The engine never sees it.
    let rows = requests(&emitted.traces);
    let (b, d) = shift(&rows, 0.5, e2e, |_| true);
    assert!((d / b - 1.0).abs() < 0.15, "engine e2e p50 {b:.0} → {d:.0}");
}

#[test]
fn preemption_storm_on_one_worker() {
    let emitted = run_memory(short(Scenario::PreemptionStorm, 11));
    let rows = requests(&emitted.traces);
    let split = Split::new();
    let preempted = |r: &RequestRecord| {
        r.attrs.contains("\"serving.preemptions\":")
            && !r.attrs.contains("\"serving.preemptions\":0")
    };
    let share = |when: &dyn Fn(i64) -> bool, w: &str| {
        let m: Vec<_> = rows
            .iter()
            .filter(|r| when(r.ts) && is(&r.worker, w))
            .collect();
        m.iter().filter(|r| preempted(r)).count() as f64 / m.len() as f64
    };
    let target = "worker-06";
    let (b, d) = (
        share(&|t| split.baseline(t), target),
        share(&|t| split.incident(t), target),
    );
    assert!(
        b < 0.02 && d > 0.3,
        "{target} preempted share {b:.3} → {d:.3}"
    );
    for w in workers(&rows).iter().filter(|w| *w != target) {
        assert!(share(&|t| split.incident(t), w) < 0.02, "{w}");
    }
    let (b, d) = shift(&rows, 0.5, e2e, |r| is(&r.worker, target));
    assert!(d / b > 1.3, "{b:.0} → {d:.0}");
    let counter = gauge_series(&emitted, "vllm:num_preemptions_total", target);
    assert!(counter.last().unwrap().1 > 10.0 * counter[110].1.max(1.0));
    assert!(
        raw_lines_of(&emitted, target)
            .filter(|l| l.contains("is preempted by PreemptionMode.RECOMPUTE"))
            .count()
            > 100
    );
}

#[test]
fn healthy_moves_nothing_beyond_load() {
    let emitted = run_memory(short(Scenario::Healthy, 12));
    let rows = requests(&emitted.traces);
    assert_eq!(rows.len() as u64, emitted.summary.requests);
    assert_eq!(emitted.summary.errors + emitted.summary.timeouts, 0);
    assert!(rows.iter().all(|r| r.error_type.is_none()));
    for w in workers(&rows) {
        let (b, d) = shift(&rows, 0.5, e2e, |r| is(&r.worker, &w));
        assert!((0.8..1.25).contains(&(d / b)), "{w}: {b:.0} → {d:.0}");
    }
    let mut combos: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r.model_version.clone(),
                r.kv_cache_policy.clone(),
                r.lora_adapters.clone(),
            )
        })
        .collect();
    combos.sort();
    combos.dedup();
    for (v, k, l) in combos {
        let (b, d) = shift(&rows, 0.99, e2e, |r| {
            r.model_version == v && r.kv_cache_policy == k && r.lora_adapters == l
        });
        assert!(
            (d - b).abs() < 0.35 * b,
            "{v:?} {k:?} {l:?}: p99 {b:.0} → {d:.0}"
        );
    }
    let preempted = rows
        .iter()
        .filter(|r| !r.attrs.contains("\"serving.preemptions\":0"))
        .count();
    assert!(preempted < rows.len() / 100, "{preempted}");
}

#[test]
fn prompt_drift_changes_one_tenants_prompts_and_output_lengths() {
    let emitted = run_memory(short(Scenario::PromptDrift, 13));
    let rows = requests(&emitted.traces);
    let split = Split::new();
    let tenant = infersight_sim::scenario::DRIFT_TENANT;
    let output = |r: &RequestRecord| r.output_tokens.map(|o| o as f64);
    fn of(name: &str) -> impl Fn(&RequestRecord) -> bool + Copy + '_ {
        move |r| is(&r.tenant, name)
    }
    // Nearly every drifted output lies beyond the tenant's baseline mean + 3σ.
    let base = values(&rows, |t| split.baseline(t), output, of(tenant));
    let mean = base.iter().sum::<f64>() / base.len() as f64;
    let sd = (base.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / base.len() as f64).sqrt();
    let during = values(&rows, |t| split.incident(t), output, of(tenant));
    let outliers = during.iter().filter(|x| **x > mean + 3.0 * sd).count() as f64;
    assert!(
        outliers / during.len() as f64 > 0.8,
        "{tenant}: {outliers} of {} outputs beyond {mean:.0} + 3 × {sd:.0}",
        during.len()
    );
    let (b, d) = shift(&rows, 0.5, e2e, of(tenant));
    assert!(d > 3.0 * b, "{tenant} e2e p50 {b:.0} → {d:.0}");
    // The client sets max_tokens for the long documents: no truncation surge.
    let truncated = rows
        .iter()
        .filter(|r| split.incident(r.ts) && of(tenant)(r))
        .filter(|r| is(&r.finish_reason, "length"))
        .count();
    assert!(
        (truncated as f64) < 0.05 * during.len() as f64,
        "{truncated}"
    );
    for other in ["acme", "initech", "umbrella", "hooli"] {
        let (b, d) = shift(&rows, 0.5, output, of(other));
        assert!(
            (d / b - 1.0).abs() < 0.15,
            "{other} output p50 {b:.0} → {d:.0}"
        );
        let (b, d) = shift(&rows, 0.5, e2e, of(other));
        assert!((d / b - 1.0).abs() < 0.2, "{other} e2e p50 {b:.0} → {d:.0}");
    }
    // Prompts: the drifted tenant's incident prompts start with none of its baseline's
    // openings; another tenant's keep theirs.
    let openings = |name: &str, when: &dyn Fn(i64) -> bool| {
        let marker = format!("tenant={name} ");
        let mut out: Vec<String> = emitted
            .sink
            .raw_lines
            .iter()
            .filter(|(_, _, t, l)| when(*t) && l.contains("[PROMPT]"))
            .filter_map(|(_, _, _, l)| {
                let text = &l[l.find(&marker)? + marker.len()..];
                Some(
                    text.split_whitespace()
                        .take(4)
                        .collect::<Vec<_>>()
                        .join(" "),
                )
            })
            .collect();
        out.sort();
        out.dedup();
        out
    };
    let before = openings(tenant, &|t| split.baseline(t));
    let after = openings(tenant, &|t| split.incident(t));
    assert!(
        before.len() >= 4 && after.len() >= 4,
        "{before:?} {after:?}"
    );
    assert!(
        after.iter().all(|o| !before.contains(o)),
        "{before:?} {after:?}"
    );
    let before = openings("acme", &|t| split.baseline(t));
    let after = openings("acme", &|t| split.incident(t));
    assert!(
        after.iter().all(|o| before.contains(o)),
        "{before:?} {after:?}"
    );
}
