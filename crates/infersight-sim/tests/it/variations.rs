//! Variations change the conventions, not the fault: each one's telemetry is told as it says
//! (dialects, resource attributes, `hw.*` metrics, sampling, process tags, another year), the
//! fault's requests, errors and timeouts are the same as without it, the same seed gives the same
//! output, and the ground truth names what the data carries: its causes select, by the data's own
//! attribute names (resource and span), exactly the requests the fault slowed.

use std::collections::BTreeMap;

use infersight_model::AttrValue;
use infersight_model::mapping::AttributeMapper;
use infersight_sim::variation::{self, Variation};
use infersight_sim::{GroundTruth, Scenario, SimConfig, Simulator};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use crate::support::{Emitted, pairs, quantile, run_memory};

/// 8 workers, 9 minutes (incident = the last 3), 10 requests/s.
fn small(scenario: Scenario, variations: &[Variation]) -> SimConfig {
    let mut config = SimConfig::new(scenario);
    config.seed = 5;
    config.duration_s = 540.0;
    config.workers = 8;
    config.rate_per_s = 10.0;
    config.variations = variations.to_vec();
    config
}

fn truth_of(config: &SimConfig) -> GroundTruth {
    Simulator::new(config.clone()).unwrap().ground_truth()
}

/// An engine span's attributes with its resource's (span wins), its start and TTFT (ms).
struct Row {
    attrs: BTreeMap<String, String>,
    start_ns: i64,
    ttft_ms: Option<f64>,
}

fn engine_rows(traces: &[ExportTraceServiceRequest]) -> Vec<Row> {
    let mut out = Vec::new();
    for rs in traces.iter().flat_map(|t| &t.resource_spans) {
        let resource = rs
            .resource
            .as_ref()
            .map(|r| pairs(&r.attributes))
            .unwrap_or_default();
        for span in rs.scope_spans.iter().flat_map(|s| &s.spans) {
            if span.name != "llm_request" {
                continue;
            }
            let mut attrs: BTreeMap<String, String> = BTreeMap::new();
            let mut ttft_ms = None;
            for (k, v) in resource.iter().chain(pairs(&span.attributes).iter()) {
                if k == "gen_ai.latency.time_to_first_token"
                    && let AttrValue::Double(s) = v
                {
                    ttft_ms = Some(s * 1e3);
                }
                if let Some(label) = v.as_label() {
                    attrs.insert(k.clone(), label);
                }
            }
            out.push(Row {
                attrs,
                start_ns: span.start_time_unix_nano as i64,
                ttft_ms,
            });
        }
    }
    out
}

/// The value of a ground-truth key on a row: the attribute of that name, else (a canonical
/// column name) any attribute the mapping table maps to that column.
fn value_of<'a>(row: &'a Row, key: &str, mapper: &AttributeMapper) -> Option<&'a str> {
    if let Some(v) = row.attrs.get(key) {
        return Some(v);
    }
    row.attrs
        .iter()
        .find(|(k, _)| {
            mapper
                .lookup(k)
                .is_some_and(|(c, _, _)| c.column_name() == key)
        })
        .map(|(_, v)| v.as_str())
}

fn matches(row: &Row, dims: &BTreeMap<String, String>, mapper: &AttributeMapper) -> bool {
    dims.iter()
        .all(|(k, v)| value_of(row, k, mapper) == Some(v.as_str()))
}

/// Median TTFT (ms) of rows in `rows` selected by `pick`.
fn median_ttft(rows: &[&Row], pick: impl Fn(&Row) -> bool) -> Option<f64> {
    let v: Vec<f64> = rows
        .iter()
        .filter(|r| pick(r))
        .filter_map(|r| r.ttft_ms)
        .collect();
    (v.len() >= 5).then(|| quantile(&v, 0.5))
}

/// The LoRA regression (+900 ms TTFT) shows on the requests the truth's first cause selects by
/// the data's names, and nowhere else.
fn assert_truth_selects_the_slowed_requests(variations: &[Variation]) {
    let config = small(Scenario::LoraKvRegression, variations);
    let truth = truth_of(&config);
    let incident_ns = config.start_ns
        + truth_start_offset_ns(&truth)
        + if variations.contains(&Variation::PastYear) {
            -365 * 86_400 * 1_000_000_000
        } else {
            0
        };
    let emitted = run_memory(config);
    let rows = engine_rows(&emitted.traces);
    let mapper = AttributeMapper::default();
    let cause = &truth.root_causes[0].dimensions;
    let during: Vec<&Row> = rows.iter().filter(|r| r.start_ns >= incident_ns).collect();
    let hit = median_ttft(&during, |r| matches(r, cause, &mapper))
        .unwrap_or_else(|| panic!("{variations:?}: no incident request matches {cause:?}"));
    let rest = median_ttft(&during, |r| !matches(r, cause, &mapper)).unwrap();
    assert!(
        hit > rest + 700.0,
        "{variations:?}: {cause:?} median TTFT {hit:.0} ms vs {rest:.0} ms elsewhere"
    );
    let before: Vec<&Row> = rows.iter().filter(|r| r.start_ns < incident_ns).collect();
    if let Some(early) = median_ttft(&before, |r| matches(r, cause, &mapper)) {
        assert!(
            early < rest + 300.0,
            "{variations:?}: {cause:?} slow before the incident ({early:.0} ms)"
        );
    }
}

/// The incident's start relative to the run's start (the truth's windows, as text).
fn truth_start_offset_ns(truth: &GroundTruth) -> i64 {
    let minutes = |t: &str| -> i64 {
        let hm = &t[11..16];
        hm[..2].parse::<i64>().unwrap() * 60 + hm[3..].parse::<i64>().unwrap()
    };
    (minutes(&truth.incident_window.start) - minutes(&truth.start)) * 60_000_000_000
}

#[test]
fn the_truth_names_what_the_data_carries_under_each_variation() {
    for variations in [
        vec![Variation::Openinference],
        vec![Variation::CustomNames],
        vec![Variation::ResourceDims],
        vec![Variation::Rollout],
        vec![Variation::ResourceDims, Variation::Rollout],
        vec![Variation::OnePod],
        vec![Variation::OneRegion, Variation::CustomNames],
        vec![Variation::PastYear, Variation::GatewayGenai],
    ] {
        assert_truth_selects_the_slowed_requests(&variations);
    }
}

#[test]
fn a_rollout_build_exists_only_from_the_incident_on() {
    let config = small(Scenario::LoraKvRegression, &[Variation::Rollout]);
    let truth = truth_of(&config);
    let incident_ns = config.start_ns + truth_start_offset_ns(&truth);
    assert_eq!(
        truth.root_causes[0]
            .dimensions
            .get("model_version")
            .map(String::as_str),
        Some("r3")
    );
    let rows = engine_rows(&run_memory(config).traces);
    let mapper = AttributeMapper::default();
    let r3 = |r: &&Row| value_of(r, "model_version", &mapper) == Some("r3");
    assert!(rows.iter().filter(r3).all(|r| r.start_ns >= incident_ns));
    assert!(rows.iter().filter(r3).count() > 100);
}

fn outcome(e: &Emitted) -> (u64, u64, u64, u64, u64) {
    let s = &e.summary;
    (
        s.requests,
        s.timeouts,
        s.errors,
        s.preemptions,
        s.log_records,
    )
}

#[test]
fn conventions_change_neither_the_traffic_nor_the_fault_and_repeat_per_seed() {
    let plain = run_memory(small(Scenario::BatchingMisconfig, &[]));
    for v in Variation::ALL {
        if matches!(
            v,
            Variation::OnePod | Variation::OneRegion | Variation::ThrottledPod
        ) {
            continue;
        }
        let a = run_memory(small(Scenario::BatchingMisconfig, &[v]));
        assert_eq!(outcome(&a), outcome(&plain), "{}", v.name());
        assert_eq!(
            a.sink.raw_lines.len(),
            plain.sink.raw_lines.len(),
            "{}",
            v.name()
        );
        let b = run_memory(small(Scenario::BatchingMisconfig, &[v]));
        assert_eq!(a.traces, b.traces, "{}: same seed, same traces", v.name());
        assert_eq!(a.sink.raw_lines, b.sink.raw_lines, "{}", v.name());
    }
}

#[test]
fn head_sampling_keeps_a_tenth_of_traces_with_their_threshold_and_everything_else() {
    let plain = run_memory(small(Scenario::Healthy, &[]));
    let sampled = run_memory(small(Scenario::Healthy, &[Variation::HeadSampling]));
    let spans: Vec<_> = sampled
        .traces
        .iter()
        .flat_map(|t| &t.resource_spans)
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .collect();
    assert!(
        spans
            .iter()
            .all(|s| s.trace_state == "ot=th:e6666666666666")
    );
    let share = sampled.summary.spans as f64 / plain.summary.spans as f64;
    assert!((0.08..0.12).contains(&share), "kept {share:.3} of spans");
    assert_eq!(sampled.summary.metric_points, plain.summary.metric_points);
    assert_eq!(sampled.summary.log_records, plain.summary.log_records);
    assert_eq!(sampled.sink.raw_lines, plain.sink.raw_lines);
    // the runtimes' latency histograms count every request, sampled or not
    let (plain_latency, sampled_latency) = (latency_counts(&plain), latency_counts(&sampled));
    assert_eq!(sampled_latency, plain_latency);
    let mut served: BTreeMap<String, u64> = BTreeMap::new();
    for row in engine_rows(&plain.traces) {
        *served.entry(row.attrs["k8s.pod.name"].clone()).or_default() += 1;
    }
    let e2e =
        |((name, _), _): &(&(String, String), &u64)| name.ends_with("e2e_request_latency_seconds");
    let pods: Vec<_> = plain_latency.iter().filter(e2e).collect();
    assert!(pods.len() >= 4, "{pods:?}");
    for ((_, pod), count) in pods {
        let served = served[pod];
        assert!(
            *count <= served && *count as f64 > 0.95 * served as f64,
            "{pod}: {count} counted of {served} served"
        );
    }
}

/// Per (latency histogram, worker), its count at the last scrape, and each histogram's buckets
/// summing to its count at every scrape.
fn latency_counts(e: &Emitted) -> BTreeMap<(String, String), u64> {
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    let mut out = BTreeMap::new();
    for rm in e.sink.metrics.iter().flat_map(|m| &m.resource_metrics) {
        let resource = rm
            .resource
            .as_ref()
            .map(|r| pairs(&r.attributes))
            .unwrap_or_default();
        let pod = resource
            .iter()
            .find_map(|(k, v)| (k == "k8s.pod.name").then(|| v.as_label()).flatten())
            .unwrap_or_default();
        for m in rm.scope_metrics.iter().flat_map(|s| &s.metrics) {
            let Some(Data::Histogram(h)) = &m.data else {
                continue;
            };
            for p in &h.data_points {
                assert_eq!(p.bucket_counts.iter().sum::<u64>(), p.count, "{}", m.name);
                assert_eq!(p.bucket_counts.len(), p.explicit_bounds.len() + 1);
                out.insert((m.name.clone(), pod.clone()), p.count);
            }
        }
    }
    assert!(
        out.keys()
            .any(|(n, _)| n == "vllm:time_to_first_token_seconds"),
        "{out:?}"
    );
    out
}

#[test]
fn hw_metrics_replace_dcgm_with_the_same_readings() {
    let config = |v: &[Variation]| small(Scenario::GpuMemoryLeak, v);
    let names = |e: &Emitted| -> Vec<String> {
        let mut n: Vec<String> = e
            .sink
            .metrics
            .iter()
            .flat_map(|m| &m.resource_metrics)
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
            .map(|m| m.name.clone())
            .collect();
        n.sort();
        n.dedup();
        n
    };
    let hw = run_memory(config(&[Variation::HwMetrics]));
    let hw_names = names(&hw);
    assert!(
        !hw_names.iter().any(|n| n.starts_with("DCGM")),
        "{hw_names:?}"
    );
    for want in [
        "hw.gpu.memory.usage",
        "hw.gpu.memory.limit",
        "hw.gpu.utilization",
        "hw.temperature",
    ] {
        assert!(hw_names.iter().any(|n| n == want), "{want} missing");
    }
    assert!(
        names(&run_memory(config(&[])))
            .iter()
            .any(|n| n == "DCGM_FI_DEV_FB_USED")
    );
}

#[test]
fn process_tags_prefix_vllm_v1_lines_only_and_past_year_moves_time() {
    let plain = run_memory(small(Scenario::PreemptionStorm, &[]));
    let tagged = run_memory(small(Scenario::PreemptionStorm, &[Variation::ProcessTags]));
    let mut tags = 0;
    for (p, t) in plain.sink.raw_lines.iter().zip(&tagged.sink.raw_lines) {
        if t.3 != p.3 {
            tags += 1;
            let rest = t.3.split_once(") ").map(|x| x.1);
            assert!(
                t.3.starts_with("(APIServer pid=") || t.3.starts_with("(EngineCore_0 pid="),
                "{}",
                t.3
            );
            assert_eq!(rest, Some(p.3.as_str()));
        }
    }
    assert!(tags > 1_000, "{tags} tagged lines");
    let past = run_memory(small(Scenario::PreemptionStorm, &[Variation::PastYear]));
    let year_ns = 365 * 86_400 * 1_000_000_000i64;
    for (p, q) in plain
        .sink
        .raw_lines
        .iter()
        .zip(&past.sink.raw_lines)
        .take(500)
    {
        assert_eq!(q.2, p.2 - year_ns);
    }
    let truth = truth_of(&small(Scenario::PreemptionStorm, &[Variation::PastYear]));
    assert!(truth.start.starts_with("2024-11-29"), "{}", truth.start);
}

#[test]
fn a_throttled_pod_is_a_second_cause_outside_the_slice() {
    let config = small(Scenario::LoraKvRegression, &[Variation::ThrottledPod]);
    let truth = truth_of(&config);
    assert_eq!(truth.root_causes.len(), 2);
    let pod = truth.root_causes[1].dimensions["worker"].clone();
    let rows = engine_rows(&run_memory(config.clone()).traces);
    let mapper = AttributeMapper::default();
    let incident_ns = config.start_ns + truth_start_offset_ns(&truth);
    let on_pod = |r: &Row| value_of(r, "worker", &mapper) == Some(pod.as_str());
    let before: Vec<&Row> = rows.iter().filter(|r| r.start_ns < incident_ns).collect();
    let during: Vec<&Row> = rows.iter().filter(|r| r.start_ns >= incident_ns).collect();
    let (b, d) = (
        median_ttft(&before, on_pod).unwrap(),
        median_ttft(&during, on_pod).unwrap(),
    );
    assert!(d > 1.5 * b, "{pod}: TTFT {b:.0} → {d:.0} ms");
    assert!(!matches(
        rows.iter().find(|r| on_pod(r)).unwrap(),
        &truth.root_causes[0].dimensions,
        &mapper
    ));
}

#[test]
fn variation_lists_parse_mix_by_seed_and_reject_conflicts() {
    let parsed = variation::parse_list(&["rollout, hw_metrics".into(), "rollout".into()]).unwrap();
    assert_eq!(parsed, vec![Variation::HwMetrics, Variation::Rollout]);
    assert!(variation::parse_list(&["one_pod,one_region".into()]).is_err());
    assert!(variation::parse_list(&["nonsense".into()]).is_err());
    assert_eq!(variation::mix(9), variation::mix(9));
    assert!((1..40).any(|n| variation::mix(n) != variation::mix(1)));
    assert!(variation::mix(0).is_empty());
    for n in 1..40 {
        assert!(variation::check_combination(&variation::mix(n)).is_ok());
    }
}

#[test]
fn the_truth_lists_only_the_variations_that_took_effect() {
    let config = small(
        Scenario::SlowWorker,
        &[
            Variation::OnePod,
            Variation::ThrottledPod,
            Variation::Rollout,
        ],
    );
    let truth = truth_of(&config);
    assert_eq!(truth.variations, vec![Variation::Rollout]);
    assert_eq!(truth.root_causes.len(), 1, "{:?}", truth.root_causes);
    let plain = truth_of(&small(Scenario::SlowWorker, &[]));
    assert!(plain.variations.is_empty());
    assert_eq!(plain.root_causes, truth.root_causes);
}

#[test]
fn equivalent_combinations_select_the_same_requests() {
    let mapper = AttributeMapper::default();
    for scenario in [Scenario::BatchingMisconfig, Scenario::SlowWorker] {
        let config = small(scenario, &[Variation::ResourceDims, Variation::Rollout]);
        let truth = truth_of(&config);
        let rows = engine_rows(&run_memory(config).traces);
        for cause in &truth.root_causes {
            assert!(!cause.equivalent.is_empty(), "{scenario:?}: {cause:?}");
            let selected: Vec<bool> = rows
                .iter()
                .map(|r| matches(r, &cause.dimensions, &mapper))
                .collect();
            assert!(selected.iter().filter(|s| **s).count() > 50);
            for alternative in &cause.equivalent {
                let same = rows
                    .iter()
                    .zip(&selected)
                    .all(|(r, s)| matches(r, alternative, &mapper) == *s);
                assert!(
                    same,
                    "{scenario:?}: {alternative:?} ≠ {:?}",
                    cause.dimensions
                );
            }
        }
    }
}

/// A scenario's description names the worker its fault is on in the run's own fleet: the
/// default fleet's index wraps in a smaller one, as the fault does (the slow worker of an
/// 8-worker fleet is `worker-03`, not the default fleet's `worker-11`).
#[test]
fn a_description_names_the_faulty_worker_of_its_own_fleet() {
    for workers in [4, 8, 16] {
        for scenario in Scenario::ALL.iter().filter(|s| s.named_worker().is_some()) {
            let mut config = small(*scenario, &[]);
            config.workers = workers;
            let truth = truth_of(&config);
            let worker = truth
                .root_causes
                .iter()
                .find_map(|c| c.dimensions.get("worker"))
                .unwrap_or_else(|| {
                    panic!("{}: no worker in {:?}", scenario.name(), truth.root_causes)
                });
            let named: Vec<&str> = truth
                .description
                .match_indices("worker-")
                .map(|(at, _)| &truth.description[at..at + "worker-00".len()])
                .collect();
            assert_eq!(
                named,
                [worker.as_str()],
                "{} on {workers}: {}",
                scenario.name(),
                truth.description
            );
        }
    }
}
