//! Root-cause analysis on fleets shaped unlike our simulator's: request rows generated here with
//! seeded noise, whose placement lives in attributes the mapping table does not know (a region,
//! a revision and a cache mode under a team's own names, as resource attributes in `attrs`), in
//! a real store with rollups. Each test is one class of fault: a regression on a combination of
//! such attributes, a slice too small to move any fleet series, a rollout that has no baseline
//! of its own, and two causes at once.

use std::collections::BTreeMap;
use std::sync::Arc;

use infersight_model::rng::SplitMix64;
use infersight_model::{RequestRecord, Table, TableBatch};
use infersight_query::QueryEngine;
use infersight_rca::{RcaReport, RcaRequest, analyse};
use infersight_store::{StorageBackend, Store, StoreOptions};

const MINUTE_NS: i64 = 60_000_000_000;
const START_NS: i64 = 1_767_225_600_000_000_000; // 2026-01-01T00:00:00Z

/// One pod of the generated fleet: where it runs and what it runs.
#[derive(Clone)]
struct Pod {
    name: String,
    region: &'static str,
    revision: &'static str,
    cache_mode: &'static str,
    model: &'static str,
    /// Minutes during which the pod serves, `[from, to)`.
    serving: (i64, i64),
}

/// A fault: from `onset` (minute), requests of pods matching `hit` get latency × `factor` and
/// fail with probability `error_rate`.
struct Fault {
    onset: i64,
    hit: Box<dyn Fn(&Pod) -> bool>,
    factor: f64,
    error_rate: f64,
}

/// `pods_per_region` pods in each of three regions, half the pods in each cache mode; every third
/// pod serves the slower model when `two_models`.
///
/// Latency is localized as "requests over the fleet's baseline p95", so a regression of the fast
/// model in a fleet whose tail belongs to the slow one hardly counts; the tests of slices and
/// rollouts use one model, apart from that limitation.
fn fleet(pods_per_region: usize, two_models: bool) -> Vec<Pod> {
    let mut pods = Vec::new();
    for region in ["eu-central", "us-west", "ap-east"] {
        for k in 0..pods_per_region {
            pods.push(Pod {
                name: format!("engine-{region}-{k}"),
                region,
                revision: "rev-41",
                cache_mode: if k % 2 == 0 { "fp8" } else { "bf16" },
                model: if two_models && k % 3 == 0 {
                    "mixtral-8x7b"
                } else {
                    "phi-3-mini"
                },
                serving: (0, i64::MAX),
            });
        }
    }
    pods
}

/// `per_minute` requests a minute for `minutes`, spread evenly over the pods serving then, with
/// log-normal latency noise per request and (σ `swing`) per minute for the whole fleet; tenants
/// at random.
fn generate(
    pods: &[Pod],
    minutes: i64,
    per_minute: usize,
    faults: &[Fault],
    seed: u64,
    swing: f64,
) -> Vec<RequestRecord> {
    let mut rng = SplitMix64::new(seed);
    let tenants = ["northwind", "contoso", "fabrikam", "tailspin"];
    let mut rows = Vec::new();
    for minute in 0..minutes {
        // load swings every pod feels at once (batching, traffic mix)
        let common = (swing * rng.normal()).exp();
        let serving: Vec<&Pod> = pods
            .iter()
            .filter(|p| p.serving.0 <= minute && minute < p.serving.1)
            .collect();
        for i in 0..per_minute {
            let pod = serving[i % serving.len()];
            let ts = START_NS + minute * MINUTE_NS + (i as i64) * (MINUTE_NS / per_minute as i64);
            let mut factor = 1.0;
            let mut error_rate: f64 = 0.005;
            for fault in faults {
                if minute >= fault.onset && (fault.hit)(pod) {
                    factor *= fault.factor;
                    error_rate = error_rate.max(fault.error_rate);
                }
            }
            let base = if pod.model == "mixtral-8x7b" {
                1_600.0
            } else {
                700.0
            };
            let e2e = base * factor * common * (0.25 * rng.normal()).exp();
            let failed = rng.uniform() < error_rate;
            let attrs = serde_json::json!({
                "cloud.region": pod.region,
                "app.revision": pod.revision,
                "team.kv_mode": pod.cache_mode,
                "k8s.pod.name": pod.name,
                "deployment.environment.name": "production",
                "request.priority": rng.below(3) as i64,
                "sampler.temperature": (rng.uniform() * 100.0).round() / 100.0,
                "http.response.status_code": if failed { 503 } else { 200 },
            });
            rows.push(RequestRecord {
                ts,
                request_id: Some(format!("r-{minute}-{i}")),
                tenant: Some(tenants[rng.below(tenants.len())].into()),
                service: Some("inference".into()),
                worker: Some(pod.name.clone()),
                model: Some(pod.model.into()),
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

/// The RCA of `rows` in a fresh store with rollups (windows detected).
async fn rca_of(rows: &[RequestRecord]) -> RcaReport {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(StoreOptions::new(dir.path())).unwrap();
    store
        .append(&[TableBatch {
            table: Table::Requests,
            batch: RequestRecord::to_batch(rows),
        }])
        .unwrap();
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

/// Class 2: the regression is on a combination of two attributes no rollup column holds.
#[tokio::test]
async fn a_regression_on_attribute_values_is_localized_to_them() {
    for seed in [1, 2] {
        let pods = fleet(4, true);
        let fault = Fault {
            onset: 60,
            hit: Box::new(|p: &Pod| p.region == "ap-east" && p.cache_mode == "fp8"),
            factor: 2.5,
            error_rate: 0.005,
        };
        let report = rca_of(&generate(&pods, 90, 240, &[fault], seed, 0.0)).await;
        let found = causes(&report);
        assert_eq!(
            found.first(),
            Some(&subject(&[
                ("cloud.region", "ap-east"),
                ("team.kv_mode", "fp8")
            ])),
            "seed {seed}: {found:?}\n{}",
            report.verdict
        );
        // outcomes, measurements and per-request values are no dimensions
        for cause in &found {
            for key in [
                "http.response.status_code",
                "sampler.temperature",
                "request.priority",
            ] {
                assert!(!cause.contains_key(key), "seed {seed}: {found:?}");
            }
        }
    }
}

/// Class 3: one revision in one region, one pod out of 25 (4 % of the traffic), regresses early in
/// the data under fleet-wide load swings; the last third is all regressed, so only an onset of
/// its own (the fleet's, or the slice's when the fleet's does not move) finds it.
#[tokio::test]
async fn a_small_slice_gets_its_own_onset() {
    for seed in [3, 4] {
        let mut pods = fleet(8, false);
        pods.push(Pod {
            name: "engine-us-west-canary".into(),
            region: "us-west",
            revision: "rev-42",
            cache_mode: "bf16",
            model: "phi-3-mini",
            serving: (0, i64::MAX),
        });
        let fault = Fault {
            onset: 45,
            hit: Box::new(|p: &Pod| p.revision == "rev-42"),
            factor: 1.6,
            error_rate: 0.005,
        };
        let report = rca_of(&generate(&pods, 150, 160, &[fault], seed, 0.15)).await;
        let found = causes(&report);
        assert!(
            report.symptom.is_some(),
            "seed {seed}: {} / {}",
            report.window_source,
            report.verdict
        );
        let top = found.first().cloned().unwrap_or_default();
        assert!(
            top == subject(&[("app.revision", "rev-42")])
                || top == subject(&[("worker", "engine-us-west-canary")]),
            "seed {seed}: {found:?}\n{}",
            report.verdict
        );
        let onset = report.symptom.as_ref().unwrap().onset;
        let minute = (onset - START_NS) / MINUTE_NS;
        assert!(
            (40..=80).contains(&minute),
            "seed {seed}: onset at {minute}"
        );
    }
}

/// A rollout: from minute `at`, new pods on `revision` replace half of `region`'s pods.
fn roll_out(pods: &mut Vec<Pod>, region: &'static str, revision: &'static str, at: i64) {
    let old: Vec<usize> = pods
        .iter()
        .enumerate()
        .filter(|(_, p)| p.region == region)
        .map(|(i, _)| i)
        .collect();
    for (n, &i) in old.iter().enumerate().take(old.len() / 2) {
        pods[i].serving.1 = at;
        let mut new = pods[i].clone();
        new.name = format!("engine-{region}-{revision}-{n}");
        new.revision = revision;
        new.serving = (at, i64::MAX);
        pods.push(new);
    }
}

/// Class 4: the regressing revision exists only in the incident window.
#[tokio::test]
async fn a_rollout_is_compared_with_its_peers() {
    for seed in [5, 6] {
        let mut pods = fleet(4, false);
        roll_out(&mut pods, "eu-central", "rev-42", 60);
        let fault = Fault {
            onset: 60,
            hit: Box::new(|p: &Pod| p.revision == "rev-42"),
            factor: 1.8,
            error_rate: 0.005,
        };
        let report = rca_of(&generate(&pods, 90, 240, &[fault], seed, 0.0)).await;
        let found = causes(&report);
        assert_eq!(
            found.first(),
            Some(&subject(&[("app.revision", "rev-42")])),
            "seed {seed}: {found:?}\n{}",
            report.verdict
        );
        assert!(
            report.root_causes[0].evidence[0].contains("peers"),
            "{:?}",
            report.root_causes[0].evidence
        );
    }
}

/// Class 5: a throttled pod and a regressing rollout at once.
#[tokio::test]
async fn two_causes_at_once_are_both_named() {
    for seed in [7, 8] {
        let mut pods = fleet(4, false);
        roll_out(&mut pods, "us-west", "rev-42", 60);
        let faults = [
            Fault {
                onset: 60,
                hit: Box::new(|p: &Pod| p.revision == "rev-42"),
                factor: 1.8,
                error_rate: 0.005,
            },
            Fault {
                onset: 60,
                hit: Box::new(|p: &Pod| p.name == "engine-ap-east-1"),
                factor: 2.5,
                error_rate: 0.005,
            },
        ];
        let report = rca_of(&generate(&pods, 90, 240, &faults, seed, 0.0)).await;
        let found = causes(&report);
        assert!(!report.fleet_wide, "seed {seed}: {}", report.verdict);
        for expected in [
            subject(&[("app.revision", "rev-42")]),
            subject(&[("worker", "engine-ap-east-1")]),
        ] {
            assert!(
                found.iter().take(3).any(|c| c == &expected),
                "seed {seed}: {expected:?} not in {found:?}\n{}",
                report.verdict
            );
        }
    }
}

/// Class 13: errors chose the window while latency stayed put: the verdict names the error rate
/// with numbers that differ, in percent.
#[tokio::test]
async fn the_verdict_names_the_measure_that_changed_with_differing_numbers() {
    let pods = fleet(4, true);
    let fault = Fault {
        onset: 60,
        hit: Box::new(|p: &Pod| p.region == "us-west"),
        factor: 1.0,
        error_rate: 0.2,
    };
    let report = rca_of(&generate(&pods, 90, 240, &[fault], 9, 0.0)).await;
    let verdict = &report.verdict;
    assert!(verdict.starts_with("error_rate rose from "), "{verdict}");
    let numbers: Vec<&str> = verdict
        .trim_start_matches("error_rate rose from ")
        .split(" since ")
        .next()
        .unwrap()
        .split(" to ")
        .collect();
    assert_eq!(numbers.len(), 2, "{verdict}");
    assert_ne!(numbers[0], numbers[1], "{verdict}");
    assert!(numbers.iter().all(|n| n.ends_with(" %")), "{verdict}");
}
