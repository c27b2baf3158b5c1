//! Per-worker request latency histograms, as vLLM and SGLang export them (TTFT and end-to-end,
//! seconds, the runtimes' own bucket bounds): cumulative from the run's start, each finished
//! request counted at the time it finished, every request (complete where traces are
//! head-sampled). `request` adds a request when it is served, `metrics` exports at each scrape
//! what finished by then.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::Metric;

use crate::fleet::Runtime;
use crate::otlp;

/// vLLM's `vllm:time_to_first_token_seconds` bucket bounds.
const VLLM_TTFT_BOUNDS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// vLLM's `vllm:e2e_request_latency_seconds` bucket bounds.
const VLLM_E2E_BOUNDS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
/// SGLang's `sglang:time_to_first_token_seconds` bucket bounds.
const SGLANG_TTFT_BOUNDS: &[f64] = &[
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 120.0, 160.0,
];
/// SGLang's `sglang:e2e_request_latency_seconds` bucket bounds.
const SGLANG_E2E_BOUNDS: &[f64] = &[
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 150.0,
    200.0, 250.0, 300.0, 350.0, 500.0, 1000.0,
];

/// One cumulative histogram: a count per bucket (the last above every bound), the sum and
/// count of what it holds.
#[derive(Debug, Clone)]
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    /// Adds one value; a value equal to a bound falls in that bound's bucket (Prometheus `le`).
    fn add(&mut self, value: f64) {
        let bucket = self.bounds.partition_point(|b| *b < value);
        self.counts[bucket] += 1;
        self.sum += value;
        self.count += 1;
    }
}

/// The latency histograms of one worker, and the requests served that have not finished yet.
#[derive(Debug, Clone)]
pub(super) struct LatencyHistograms {
    names: Option<(&'static str, &'static str)>,
    /// (end, TTFT seconds, e2e seconds) of requests not yet finished at the last scrape; the
    /// seconds as `f64::to_bits` (ordered by end only where it matters).
    pending: BinaryHeap<Reverse<(i64, u64, u64)>>,
    ttft: Histogram,
    e2e: Histogram,
}

impl LatencyHistograms {
    /// The histograms `runtime` exports (TGI's are not simulated: none).
    pub(super) fn new(runtime: Runtime) -> Self {
        let (names, ttft, e2e) = match runtime {
            Runtime::Vllm => (
                Some((
                    "vllm:time_to_first_token_seconds",
                    "vllm:e2e_request_latency_seconds",
                )),
                VLLM_TTFT_BOUNDS,
                VLLM_E2E_BOUNDS,
            ),
            Runtime::Sglang => (
                Some((
                    "sglang:time_to_first_token_seconds",
                    "sglang:e2e_request_latency_seconds",
                )),
                SGLANG_TTFT_BOUNDS,
                SGLANG_E2E_BOUNDS,
            ),
            Runtime::Tgi => (None, VLLM_TTFT_BOUNDS, VLLM_E2E_BOUNDS),
        };
        Self {
            names,
            pending: BinaryHeap::new(),
            ttft: Histogram::new(ttft),
            e2e: Histogram::new(e2e),
        }
    }

    /// A request that finishes at `end_ns` (engine time to first token and end to end, ms).
    pub(super) fn served(&mut self, end_ns: i64, ttft_ms: f64, e2e_ms: f64) {
        if self.names.is_some() {
            let (ttft, e2e) = (ttft_ms / 1_000.0, e2e_ms / 1_000.0);
            self.pending
                .push(Reverse((end_ns, ttft.to_bits(), e2e.to_bits())));
        }
    }

    /// The histograms at `at_ns` (every request finished by then), counted from `start_ns`.
    pub(super) fn export(&mut self, at_ns: i64, start_ns: i64, attrs: &[KeyValue]) -> Vec<Metric> {
        let Some((ttft_name, e2e_name)) = self.names else {
            return Vec::new();
        };
        while let Some(Reverse((end, ttft, e2e))) = self.pending.peek().copied() {
            if end > at_ns {
                break;
            }
            self.pending.pop();
            self.ttft.add(f64::from_bits(ttft));
            self.e2e.add(f64::from_bits(e2e));
        }
        [(ttft_name, &self.ttft), (e2e_name, &self.e2e)]
            .into_iter()
            .map(|(name, h)| {
                otlp::histogram(
                    name,
                    "s",
                    (at_ns, start_ns),
                    (h.count, h.sum, &h.counts, h.bounds),
                    attrs.to_vec(),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;

    fn buckets(metric: &Metric) -> (u64, f64, Vec<u64>, Vec<f64>) {
        let Some(Data::Histogram(h)) = &metric.data else {
            panic!("{} is no histogram", metric.name);
        };
        let p = &h.data_points[0];
        (
            p.count,
            p.sum.unwrap_or_default(),
            p.bucket_counts.clone(),
            p.explicit_bounds.clone(),
        )
    }

    #[test]
    fn a_request_counts_once_at_its_end_in_the_bucket_its_latency_falls_in() {
        let mut h = LatencyHistograms::new(Runtime::Vllm);
        h.served(2_000, 120.0, 900.0); // ttft 0.12 s, e2e 0.9 s
        h.served(5_000, 1_000.0, 3_000.0); // on a bound: the bound's bucket
        let first = h.export(1_000, 0, &[]);
        assert_eq!(first.len(), 2);
        assert_eq!(
            buckets(&first[0]).0,
            0,
            "nothing finished by the first scrape"
        );
        let second = h.export(2_000, 0, &[]);
        let (count, sum, counts, bounds) = buckets(&second[1]);
        assert_eq!((count, counts.len()), (1, bounds.len() + 1));
        assert!((sum - 0.9).abs() < 1e-12);
        assert_eq!(counts[bounds.iter().position(|b| *b == 1.0).unwrap()], 1);
        let third = h.export(9_000, 0, &[]);
        let (count, _, counts, bounds) = buckets(&third[0]);
        assert_eq!(count, 2, "cumulative");
        assert_eq!(counts[bounds.iter().position(|b| *b == 0.25).unwrap()], 1);
        assert_eq!(counts[bounds.iter().position(|b| *b == 1.0).unwrap()], 1);
        assert_eq!(counts.iter().sum::<u64>(), 2);
        assert!(
            LatencyHistograms::new(Runtime::Tgi)
                .export(9_000, 0, &[])
                .is_empty()
        );
    }
}
