//! Root-cause analysis from head-sampled traces and with two independent faults of different
//! kinds, on request rows generated here with seeded noise (placement in attributes the mapping
//! table does not know, as in `fleets`), in a real store with rollups:
//! - sampled rows carry `infersight.sample_weight` (as the OTLP ingest writes it from `ot=th`,
//!   `ot=p` or `SampleRate`), some pods sampled and others complete; every estimate must be
//!   weighted and every significance judged on the rows behind it;
//! - a pod whose GPU throttles (its device metrics, complete) and a regression on a slice that
//!   one coarser combination covers together with that pod: both must be named, each with its
//!   share of the excess;
//! - a pod whose GPU throttles while another pod's KV cache fills and preempts (its metrics
//!   alone show it; its requests are no slower): both are faults, both are named.

use std::collections::BTreeMap;
use std::sync::Arc;

use infersight_model::rng::SplitMix64;
use infersight_model::{MetricRecord, RequestRecord, Table, TableBatch};
use infersight_query::QueryEngine;
use infersight_rca::{RcaReport, RcaRequest, SignalKind, analyse};
use infersight_store::{StorageBackend, Store, StoreOptions};

const MINUTE_NS: i64 = 60_000_000_000;
const START_NS: i64 = 1_767_225_600_000_000_000; // 2026-01-01T00:00:00Z
const MINUTES: i64 = 90;
const ONSET: i64 = 60;

/// One pod: where it runs, what it runs, and how its traces are sampled.
#[derive(Clone)]
struct Pod {
    name: String,
    region: &'static str,
    revision: &'static str,
    cache_mode: &'static str,
    /// Each request's trace is kept with probability `1 / sample_weight`.
    sample_weight: f64,
}

/// Three regions of four pods, half in each cache mode; `rev-42` on `canaries` of them.
fn fleet(sample_weight: impl Fn(&str) -> f64, canaries: &[&str]) -> Vec<Pod> {
    let mut pods = Vec::new();
    for region in ["eu-central", "us-west", "ap-east"] {
        for k in 0..4 {
            let name = format!("engine-{region}-{k}");
            pods.push(Pod {
                revision: if canaries.contains(&name.as_str()) {
                    "rev-42"
                } else {
                    "rev-41"
                },
                sample_weight: sample_weight(region),
                name,
                region,
                cache_mode: if k % 2 == 0 { "fp8" } else { "bf16" },
            });
        }
    }
    pods
}

/// `per_minute` requests a minute spread over the pods, failing at `error_rate`, log-normal
/// latency noise per request and (σ 0.1) per minute for the whole fleet; from [`ONSET`] on, requests of pods `slow`
/// picks are `factor` times slower. Only the sampled requests are returned, each with its
/// weight in `attrs`.
fn generate(
    pods: &[Pod],
    (per_minute, error_rate): (usize, f64),
    slow: &dyn Fn(&Pod) -> Option<f64>,
    seed: u64,
) -> Vec<RequestRecord> {
    let mut rng = SplitMix64::new(seed);
    let tenants = ["northwind", "contoso", "fabrikam", "tailspin"];
    let mut rows = Vec::new();
    for minute in 0..MINUTES {
        let common = (0.1 * rng.normal()).exp();
        for i in 0..per_minute {
            let pod = &pods[i % pods.len()];
            let ts = START_NS + minute * MINUTE_NS + (i as i64) * (MINUTE_NS / per_minute as i64);
            let factor = if minute >= ONSET {
                slow(pod).unwrap_or(1.0)
            } else {
                1.0
            };
            let e2e = 700.0 * factor * common * (0.25 * rng.normal()).exp();
            let failed = rng.uniform() < error_rate;
            let tenant = tenants[rng.below(tenants.len())];
            if rng.uniform() * pod.sample_weight >= 1.0 {
                continue; // not sampled: the trace is dropped
            }
            let mut attrs = serde_json::json!({
                "cloud.region": pod.region,
                "app.revision": pod.revision,
                "team.kv_mode": pod.cache_mode,
            });
            if pod.sample_weight > 1.0 {
                attrs["infersight.sample_weight"] = pod.sample_weight.into();
            }
            rows.push(RequestRecord {
                ts,
                request_id: Some(format!("r-{minute}-{i}")),
                tenant: Some(tenant.into()),
                service: Some("inference".into()),
                worker: Some(pod.name.clone()),
                model: Some("phi-3-mini".into()),
                input_tokens: Some(400 + rng.below(200) as i64),
                output_tokens: Some(150 + rng.below(100) as i64),
                ttft_ms: Some(e2e * 0.2),
                queue_ms: Some(5.0 * (0.3 * rng.normal()).exp()),
                e2e_ms: Some(e2e),
                status: Some(if failed { "error" } else { "ok" }.into()),
                finish_reason: Some("stop".into()),
                attrs: attrs.to_string(),
                ..Default::default()
            });
        }
    }
    rows
}

/// Every pod's SM clock and temperature every 30 s (complete, whatever the traces); from
/// [`ONSET`] on the `throttled` pod's clock falls by 45 % and its temperature reaches 92 °C.
fn device_metrics(pods: &[Pod], throttled: Option<&str>, seed: u64) -> Vec<MetricRecord> {
    let mut rng = SplitMix64::new(seed ^ 0x5eed);
    let mut rows = Vec::new();
    for pod in pods {
        for step in 0..MINUTES * 2 {
            let ts = START_NS + step * MINUTE_NS / 2;
            let hot = throttled == Some(pod.name.as_str()) && step >= ONSET * 2;
            let clock = if hot { 1.11e9 } else { 1.98e9 } * (1.0 + 0.01 * rng.normal());
            let temperature = if hot { 92.0 } else { 55.0 } + rng.normal();
            for (name, value) in [
                ("gpu_sm_clock_hertz", clock),
                ("gpu_temperature_celsius", temperature),
            ] {
                rows.push(MetricRecord {
                    ts,
                    name: Some(name.into()),
                    kind: Some("gauge".into()),
                    value: Some(value),
                    worker: Some(pod.name.clone()),
                    device: Some("0".into()),
                    ..Default::default()
                });
            }
        }
    }
    rows
}

/// The RCA of `rows` (and `metrics`) in a fresh store with rollups, windows detected.
async fn rca_of(rows: &[RequestRecord], metrics: &[MetricRecord]) -> RcaReport {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(StoreOptions::new(dir.path())).unwrap();
    let mut batches = vec![TableBatch {
        table: Table::Requests,
        batch: RequestRecord::to_batch(rows),
    }];
    if !metrics.is_empty() {
        batches.push(TableBatch {
            table: Table::Metrics,
            batch: MetricRecord::to_batch(metrics),
        });
    }
    store.append(&batches).unwrap();
    let engine = QueryEngine::new(Arc::new(store) as Arc<dyn StorageBackend>);
    analyse(&engine, RcaRequest::default()).await.unwrap()
}

fn subject(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn causes(report: &RcaReport) -> Vec<BTreeMap<String, String>> {
    report
        .root_causes
        .iter()
        .map(|c| c.dimensions.clone().into())
        .collect()
}

/// Class 10: two regions' traces sampled at 1/8, one complete; a regression on a combination
/// of two attributes in a sampled region. The slice is named, and nothing else: the sampled
/// pods' noise (eight times a complete pod's per counted request) is no cause.
#[tokio::test]
async fn a_slice_is_localized_from_sampled_rows_and_their_noise_is_no_cause() {
    let weight = |region: &str| if region == "us-west" { 1.0 } else { 8.0 };
    let slice = subject(&[("cloud.region", "ap-east"), ("team.kv_mode", "fp8")]);
    for seed in [1, 2, 3] {
        let pods = fleet(weight, &[]);
        let slow = |p: &Pod| (p.region == "ap-east" && p.cache_mode == "fp8").then_some(2.5);
        let report = rca_of(&generate(&pods, (480, 0.005), &slow, seed), &[]).await;
        let found = causes(&report);
        assert_eq!(
            found,
            vec![slice.clone()],
            "seed {seed}: {}",
            report.verdict
        );
        // its share of the excess is an estimate of the traffic's: near all of it
        let share = report.root_causes[0].explained_fraction;
        assert!((0.6..=1.4).contains(&share), "seed {seed}: share {share}");
    }
}

/// Class 10: a healthy fleet whose traces are all sampled at 1/10 (twelve rows a minute) has
/// no symptom and blames nothing: counted by their weights, its requests look ten times as
/// many as the rows that carry them, and judged as if complete its noise is a fleet-wide rise.
#[tokio::test]
async fn a_healthy_sampled_fleet_blames_nothing() {
    let mut false_alarms = Vec::new();
    for seed in 1..=12 {
        let pods = fleet(|_| 10.0, &[]);
        let report = rca_of(&generate(&pods, (120, 0.0), &|_| None, seed), &[]).await;
        assert!(
            report.root_causes.is_empty() && !report.fleet_wide,
            "seed {seed}: {:?}\n{}",
            causes(&report),
            report.verdict
        );
        if report.symptom.is_some() {
            false_alarms.push((seed, report.verdict));
        }
    }
    // judged as if complete, 9 of these 12 seeds show a fleet-wide symptom
    assert!(false_alarms.len() <= 2, "{false_alarms:#?}");
}

/// Class 5: a regression on `rev-42 & fp8` and a throttled pod that runs `rev-42` too, so that
/// `app.revision=rev-42` alone covers both faults and nothing else. The pod's own device
/// metrics name it; the slice is localized around it; both are named with their shares, from
/// complete traces and from traces sampled at 1/10.
#[tokio::test]
async fn a_throttled_pod_and_a_slice_regression_are_both_named() {
    let canaries = ["engine-us-west-0", "engine-us-west-1", "engine-ap-east-0"];
    let throttled = "engine-us-west-1";
    let slice = subject(&[("app.revision", "rev-42"), ("team.kv_mode", "fp8")]);
    for (seed, weight) in [(7, 1.0), (8, 1.0), (9, 10.0)] {
        let pods = fleet(|_| weight, &canaries);
        let slow = |p: &Pod| {
            if p.name == throttled {
                Some(2.2)
            } else {
                (p.revision == "rev-42" && p.cache_mode == "fp8").then_some(1.8)
            }
        };
        let rows = generate(&pods, (480, 0.005), &slow, seed);
        let report = rca_of(&rows, &device_metrics(&pods, Some(throttled), seed)).await;
        let found = causes(&report);
        let top: Vec<_> = found.iter().take(2).collect();
        let pod = subject(&[("worker", throttled)]);
        assert!(
            top.contains(&&slice) && top.contains(&&pod),
            "seed {seed} (1/{weight}): {found:?}\n{}",
            report.verdict
        );
        for cause in report.root_causes.iter().take(2) {
            assert!(
                cause.explained_fraction > 0.15,
                "seed {seed}: {:?} explains {}",
                cause.dimensions,
                cause.explained_fraction
            );
        }
        assert!(
            report
                .signals
                .iter()
                .any(|s| s.kind == SignalKind::SlowWorker && s.subject == pod),
            "seed {seed}: {:?}",
            report.signals
        );
    }
}

/// Every pod's KV-cache usage and cumulative preemptions every 30 s; from [`ONSET`] on the
/// `storming` pod's cache is full and it preempts ~50 requests a minute (the others: ~1 an
/// hour), while its requests stay as fast as before (a signal-only fault).
fn kv_metrics(pods: &[Pod], storming: &str, seed: u64) -> Vec<MetricRecord> {
    let mut rng = SplitMix64::new(seed ^ 0xcafe);
    let mut rows = Vec::new();
    for pod in pods {
        let mut preempted = 0.0;
        for step in 0..MINUTES * 2 {
            let ts = START_NS + step * MINUTE_NS / 2;
            let storm = pod.name == storming && step >= ONSET * 2;
            let usage = if storm {
                1.0
            } else {
                0.55 + 0.1 * rng.uniform()
            };
            preempted += if storm {
                20.0 + rng.below(11) as f64
            } else if rng.uniform() < 0.01 {
                1.0
            } else {
                0.0
            };
            for (name, kind, value) in [
                ("kv_cache_usage_ratio", "gauge", usage),
                ("preemptions_total", "counter", preempted),
            ] {
                rows.push(MetricRecord {
                    ts,
                    name: Some(name.into()),
                    kind: Some(kind.into()),
                    value: Some(value),
                    worker: Some(pod.name.clone()),
                    ..Default::default()
                });
            }
        }
    }
    rows
}

/// Two faults of different kinds on different pods: one pod's GPU throttles (its requests
/// slow down, localization finds it), another's KV cache fills and preempts (only its metrics
/// show it). The second is a cause of its own, ranked right after the first, from complete
/// traces and from traces sampled at 1/10; when the storm is on the throttled pod itself there
/// is one cause, not two.
#[tokio::test]
async fn a_signal_only_fault_beside_a_localized_one_is_named_second() {
    let throttled = "engine-us-west-1";
    for (seed, weight, storming) in [
        (11, 1.0, "engine-eu-central-2"),
        (12, 10.0, "engine-ap-east-3"),
        (13, 1.0, throttled),
    ] {
        let pods = fleet(|_| weight, &[]);
        let slow = |p: &Pod| (p.name == throttled).then_some(2.2);
        let rows = generate(&pods, (480, 0.005), &slow, seed);
        let mut metrics = device_metrics(&pods, Some(throttled), seed);
        metrics.extend(kv_metrics(&pods, storming, seed));
        let report = rca_of(&rows, &metrics).await;
        let found = causes(&report);
        let pod = subject(&[("worker", throttled)]);
        let storm = subject(&[("worker", storming)]);
        assert!(
            report
                .signals
                .iter()
                .any(|s| s.kind == SignalKind::PreemptionStorm && s.subject == storm),
            "seed {seed}: {:?}",
            report.signals
        );
        if storming == throttled {
            assert_eq!(found.first(), Some(&pod), "seed {seed}: {}", report.verdict);
            assert_eq!(
                found.iter().filter(|c| **c == pod).count(),
                1,
                "seed {seed}: {found:?}"
            );
            continue;
        }
        assert_eq!(
            found.iter().take(2).collect::<Vec<_>>(),
            vec![&pod, &storm],
            "seed {seed} (1/{weight}): {}",
            report.verdict
        );
        assert!(
            report.verdict.contains(storming),
            "seed {seed}: {}",
            report.verdict
        );
    }
}

/// A preemption storm on one pod (its metrics alone show it) in a fleet whose traces are all
/// sampled at 1/10: the sampled rows' noise may move a slice's series enough for the first pass
/// (over the rollups) to choose a window, which the second pass (each leaf judged on its rows)
/// does not confirm; such a window is a false alarm, and the storm is read in the window the
/// data would get if nothing had changed. Never a detected-change window without a symptom.
#[tokio::test]
async fn an_unconfirmed_window_does_not_hide_a_signal_only_fault() {
    let storming = "engine-ap-east-1";
    let storm = subject(&[("worker", storming)]);
    for seed in 21..=26 {
        let pods = fleet(|_| 10.0, &[]);
        let rows = generate(&pods, (240, 0.0), &|_| None, seed);
        let report = rca_of(&rows, &kv_metrics(&pods, storming, seed)).await;
        assert!(
            report.symptom.is_some() || !report.window_source.starts_with("change"),
            "seed {seed}: {} ({})",
            report.verdict,
            report.window_source
        );
        assert_eq!(
            causes(&report).first(),
            Some(&storm),
            "seed {seed}: {} ({})",
            report.verdict,
            report.window_source
        );
    }
}

/// One pod slowed from [`ONSET`] in a fleet whose traces are sampled at 1/10, and one earlier
/// minute (eight before the onset) in which every request was slow (a burst the sampled rows
/// make look like the start of a change); the data ends ten minutes after the onset. Dated by
/// the fleet's series from that minute, the window dilutes the pod's ten minutes among eight
/// normal ones and no slice explains the change; the pod's own series dates it and names it.
#[tokio::test]
async fn a_lone_early_minute_does_not_hide_a_slow_pod() {
    let slow_pod = "engine-eu-central-2";
    let pod = subject(&[("worker", slow_pod)]);
    let mut named = 0;
    let seeds = 31..=42;
    for seed in seeds.clone() {
        let pods = fleet(|_| 10.0, &[]);
        let slow = |p: &Pod| (p.name == slow_pod).then_some(2.5);
        let mut rows = generate(&pods, (480, 0.0), &slow, seed);
        // the data ends ten minutes after the onset
        rows.retain(|r| r.ts < START_NS + (ONSET + 10) * MINUTE_NS);
        let burst = START_NS + (ONSET - 8) * MINUTE_NS;
        for row in rows
            .iter_mut()
            .filter(|r| (burst..burst + MINUTE_NS).contains(&r.ts))
        {
            row.e2e_ms = row.e2e_ms.map(|v| v * 4.0);
            row.ttft_ms = row.ttft_ms.map(|v| v * 4.0);
        }
        let report = rca_of(&rows, &[]).await;
        assert!(report.symptom.is_some(), "seed {seed}: {}", report.verdict);
        if causes(&report).first() == Some(&pod) {
            named += 1;
        } else {
            eprintln!("seed {seed}: {} ({})", report.verdict, report.window_source);
        }
    }
    // dated by the fleet's series alone, 7 of these 12 seeds name the pod; some sampled seeds
    // still date the change far too early (20+ minutes) for any slice's series to help
    assert!(named >= 9, "the slow pod named in {named} of 12 seeds");
}
