//! Per-worker metrics at the end of each chunk, as a Prometheus scrape would give them: the
//! runtime's own gauges, counters and latency histograms (vLLM V0/V1, SGLang, TGI names;
//! [`super::histograms`]) and the GPU's memory,
//! utilization, temperature and SM clock (which show a leak or a throttled GPU), from the DCGM
//! exporter or, under the `hw_metrics` variation, in OTel's `hw.*` conventions. The
//! same pass queues each worker's periodic stats lines ([`super::raw_logs`]).

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::{Metric, ResourceMetrics, ScopeMetrics};

use crate::engine::{EngineState, Gauges};
use crate::error::SimError;
use crate::fleet::{Runtime, WorkerSpec};
use crate::otlp::{self, s};
use crate::rng::Rng;
use crate::scenario::WorkerCondition;
use crate::sink::TelemetrySink;
use crate::variation::GpuMetrics;

use super::{ChunkStats, Simulator, raw_logs, round6, worker_resource};

/// When the metrics are taken, and when their counters started (the start of the run).
#[derive(Clone, Copy)]
struct Scrape {
    at_ns: i64,
    start_ns: i64,
}

impl Simulator {
    /// Exports every worker's metrics at `at_ns` and queues its stats lines.
    pub(super) fn metrics_and_stats(
        &mut self,
        at_ns: i64,
        sink: &mut dyn TelemetrySink,
    ) -> Result<(), SimError> {
        let scrape = Scrape {
            at_ns,
            start_ns: self.config.start_ns,
        };
        let chunk_s = self.config.chunk_s;
        let mut resource_metrics = Vec::with_capacity(self.fleet.workers.len());
        for w in 0..self.fleet.workers.len() {
            let worker = &self.fleet.workers[w];
            let cond = self.plan.condition(worker, at_ns);
            let gauges = self.engines[w].gauges(worker, at_ns, cond.kv_capacity_factor);
            let stats = std::mem::take(&mut self.chunk_stats[w]);
            let mut metrics = runtime_metrics(worker, &self.engines[w], &gauges, &stats, &scrape);
            let label = [s("model_name", worker.model)];
            metrics.extend(self.latency[w].export(at_ns, scrape.start_ns, &label));
            let reading = GpuReading::take(worker, &gauges, &cond, &mut self.rng);
            metrics.extend(match self.conventions.gpu_metrics() {
                GpuMetrics::Dcgm => dcgm_metrics(worker, &reading, at_ns),
                GpuMetrics::Hw => hw_metrics(worker, &reading, at_ns),
            });
            self.summary.metric_points += metrics.len() as u64;
            let rolled = at_ns > self.plan.incident_start_ns;
            resource_metrics.push(ResourceMetrics {
                resource: worker_resource(worker, &self.conventions, rolled),
                scope_metrics: vec![ScopeMetrics {
                    scope: otlp::scope("prometheus-scrape", "1"),
                    metrics,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            });
            let tags = &self.conventions;
            for line in raw_logs::stats_lines(worker, tags, &stats, &gauges, at_ns, chunk_s) {
                self.line(w, at_ns - 1, line);
            }
        }
        sink.metrics(ExportMetricsServiceRequest { resource_metrics })?;
        Ok(())
    }
}

/// The serving runtime's own metrics, in its names.
fn runtime_metrics(
    worker: &WorkerSpec,
    engine: &EngineState,
    gauges: &Gauges,
    stats: &ChunkStats,
    scrape: &Scrape,
) -> Vec<Metric> {
    match worker.runtime {
        Runtime::Vllm => vllm_metrics(worker, engine, gauges, scrape),
        Runtime::Sglang => sglang_metrics(worker, engine, gauges, stats, scrape),
        Runtime::Tgi => tgi_metrics(worker, gauges, scrape),
    }
}

fn vllm_metrics(
    worker: &WorkerSpec,
    engine: &EngineState,
    gauges: &Gauges,
    scrape: &Scrape,
) -> Vec<Metric> {
    let Scrape { at_ns, start_ns } = *scrape;
    let label = || vec![s("model_name", worker.model)];
    let kv_name = if worker.vllm_v1 {
        "vllm:kv_cache_usage_perc"
    } else {
        "vllm:gpu_cache_usage_perc"
    };
    let mut metrics = vec![
        otlp::gauge(
            "vllm:num_requests_running",
            "",
            at_ns,
            gauges.running as f64,
            label(),
        ),
        otlp::gauge(
            "vllm:num_requests_waiting",
            "",
            at_ns,
            gauges.waiting as f64,
            label(),
        ),
        otlp::gauge(kv_name, "", at_ns, round6(gauges.kv_usage), label()),
    ];
    for (name, value) in [
        ("vllm:num_preemptions_total", engine.preemptions_total),
        ("vllm:prompt_tokens_total", engine.prompt_tokens_total),
        (
            "vllm:generation_tokens_total",
            engine.generation_tokens_total,
        ),
        ("vllm:request_success_total", engine.requests_total),
    ] {
        metrics.push(otlp::counter(name, at_ns, start_ns, value as f64, label()));
    }
    if worker.spec_tokens.is_some() {
        metrics.push(otlp::counter(
            "vllm:spec_decode_num_draft_tokens_total",
            at_ns,
            start_ns,
            engine.spec_draft_total as f64,
            label(),
        ));
        metrics.push(otlp::counter(
            "vllm:spec_decode_num_accepted_tokens_total",
            at_ns,
            start_ns,
            engine.spec_accepted_total as f64,
            label(),
        ));
    }
    metrics
}

fn sglang_metrics(
    worker: &WorkerSpec,
    engine: &EngineState,
    gauges: &Gauges,
    stats: &ChunkStats,
    scrape: &Scrape,
) -> Vec<Metric> {
    let Scrape { at_ns, start_ns } = *scrape;
    let label = || vec![s("model_name", worker.model)];
    let hit = if stats.prefix_queries > 0 {
        stats.prefix_hits as f64 / stats.prefix_queries as f64
    } else {
        0.0
    };
    vec![
        otlp::gauge(
            "sglang:num_running_reqs",
            "",
            at_ns,
            gauges.running as f64,
            label(),
        ),
        otlp::gauge(
            "sglang:num_queue_reqs",
            "",
            at_ns,
            gauges.waiting as f64,
            label(),
        ),
        otlp::gauge(
            "sglang:token_usage",
            "",
            at_ns,
            round6(gauges.kv_usage),
            label(),
        ),
        otlp::gauge("sglang:cache_hit_rate", "", at_ns, round6(hit), label()),
        otlp::counter(
            "sglang:prompt_tokens_total",
            at_ns,
            start_ns,
            engine.prompt_tokens_total as f64,
            label(),
        ),
        otlp::counter(
            "sglang:generation_tokens_total",
            at_ns,
            start_ns,
            engine.generation_tokens_total as f64,
            label(),
        ),
    ]
}

fn tgi_metrics(worker: &WorkerSpec, gauges: &Gauges, scrape: &Scrape) -> Vec<Metric> {
    let at_ns = scrape.at_ns;
    let label = || vec![s("model_name", worker.model)];
    vec![
        otlp::gauge(
            "tgi_batch_current_size",
            "",
            at_ns,
            gauges.running as f64,
            label(),
        ),
        otlp::gauge("tgi_queue_size", "", at_ns, gauges.waiting as f64, label()),
    ]
}

/// One scrape of a worker's GPU: memory used (MiB), utilization (%), temperature (°C) and SM
/// clock (MHz), whichever exporter reports it.
struct GpuReading {
    used_mib: f64,
    util_pct: f64,
    temp_c: f64,
    clock_mhz: f64,
}

impl GpuReading {
    fn take(worker: &WorkerSpec, gauges: &Gauges, cond: &WorkerCondition, rng: &mut Rng) -> Self {
        let busy = (gauges.running as f64 / 24.0).min(1.0);
        let mut util = if gauges.running == 0 {
            rng.unit() * 2.0
        } else {
            (22.0 + 76.0 * busy + 2.0 * rng.normal()).clamp(5.0, 99.0)
        };
        if let Some(cap) = cond.utilization_cap {
            util = util.min(cap * rng.unit().max(0.2));
        }
        if cond.throttle > 0.0 && gauges.running > 0 {
            util = 99.0;
        }
        let used_mib = (12.0 + cond.leaked_gb + 0.05 * rng.normal()) * 1e9 / 1_048_576.0;
        let temp = if cond.throttle > 0.0 {
            91.0 + rng.unit() * 2.0
        } else {
            48.0 + 0.22 * util + rng.unit() * 2.0
        };
        let clock = worker.gpu.max_sm_clock_mhz
            * if cond.throttle > 0.0 {
                0.55
            } else {
                0.985 + 0.01 * rng.unit()
            };
        Self {
            used_mib,
            util_pct: util,
            temp_c: temp,
            clock_mhz: clock,
        }
    }
}

/// DCGM exporter: memory (MiB), utilization (%), temperature, SM clock.
fn dcgm_metrics(worker: &WorkerSpec, reading: &GpuReading, at_ns: i64) -> Vec<Metric> {
    let gpu = || {
        vec![
            s("gpu", "0"),
            s("modelName", worker.gpu.name),
            s("Hostname", worker.name.clone()),
        ]
    };
    vec![
        otlp::gauge(
            "DCGM_FI_DEV_FB_USED",
            "MiB",
            at_ns,
            reading.used_mib.round(),
            gpu(),
        ),
        otlp::gauge(
            "DCGM_FI_DEV_FB_TOTAL",
            "MiB",
            at_ns,
            worker.gpu.memory_total_mib,
            gpu(),
        ),
        otlp::gauge(
            "DCGM_FI_DEV_GPU_UTIL",
            "%",
            at_ns,
            reading.util_pct.round(),
            gpu(),
        ),
        otlp::gauge(
            "DCGM_FI_DEV_GPU_TEMP",
            "C",
            at_ns,
            reading.temp_c.round(),
            gpu(),
        ),
        otlp::gauge(
            "DCGM_FI_DEV_SM_CLOCK",
            "MHz",
            at_ns,
            reading.clock_mhz.round(),
            gpu(),
        ),
    ]
}

/// OTel hardware semantic conventions: `hw.gpu.memory.usage` and `hw.gpu.memory.limit` (bytes),
/// `hw.gpu.utilization` (ratio 0–1) and `hw.temperature` (°C), each keyed by `hw.id` (the
/// GPU's UUID); OTel has no SM-clock metric, so a throttled GPU shows by its temperature.
fn hw_metrics(worker: &WorkerSpec, reading: &GpuReading, at_ns: i64) -> Vec<Metric> {
    let mib = 1_048_576.0;
    let gpu_id = format!(
        "GPU-{:08x}-0000-4000-8000-{:012x}",
        0x5eed_0000 + worker.index,
        worker.index
    );
    let gpu = || {
        vec![
            s("hw.id", gpu_id.clone()),
            s("hw.name", worker.gpu.name),
            s("hw.vendor", "NVIDIA"),
            s("hw.type", "gpu"),
        ]
    };
    let sensor = vec![
        s("hw.id", format!("{gpu_id}-temp")),
        s("hw.parent", gpu_id.clone()),
        s("hw.name", "GPU core"),
        s("hw.type", "temperature"),
    ];
    vec![
        otlp::gauge(
            "hw.gpu.memory.usage",
            "By",
            at_ns,
            (reading.used_mib.round() * mib).round(),
            gpu(),
        ),
        otlp::gauge(
            "hw.gpu.memory.limit",
            "By",
            at_ns,
            worker.gpu.memory_total_mib * mib,
            gpu(),
        ),
        otlp::gauge(
            "hw.gpu.utilization",
            "1",
            at_ns,
            round6(reading.util_pct.round() / 100.0),
            gpu(),
        ),
        otlp::gauge(
            "hw.temperature",
            "Cel",
            at_ns,
            reading.temp_c.round(),
            sensor,
        ),
    ]
}
