//! Root-cause analysis of small slices and rollouts (issue 19, classes 3 and 4) on generated
//! fleets shaped unlike our simulator's: two models whose latencies differ by an order of
//! magnitude, many small tenants with noise of their own (per-minute swings and short episodes
//! that end by themselves), fleet-wide load swings, and the slice that regresses named by an
//! attribute the mapping table does not know (a different key per seed: a build, a revision, a
//! deployment), in a real store with rollups and detected windows.

use std::collections::BTreeMap;
use std::sync::Arc;

use infersight_model::rng::SplitMix64;
use infersight_model::{RequestRecord, Table, TableBatch};
use infersight_query::QueryEngine;
use infersight_rca::{RcaReport, RcaRequest, SignalKind, analyse};
use infersight_store::{StorageBackend, Store, StoreOptions};

const MINUTE_NS: i64 = 60_000_000_000;
const START_NS: i64 = 1_767_225_600_000_000_000; // 2026-01-01T00:00:00Z

/// Version-like keys no mapping table knows, one per seed: the same class under any name.
const VERSION_KEYS: [&str; 4] = [
    "service.version",
    "acme.engine_build",
    "k8s.deployment.name",
    "team.model_rev",
];

/// The two models: a small fast one and a large slow one (base e2e, ms).
const MODELS: [(&str, f64); 2] = [("qwen2.5-1.5b", 240.0), ("llama-3.1-70b", 3_200.0)];

/// One pod: its zone, its model (index into [`MODELS`]), its build, and when it serves.
#[derive(Clone)]
struct Pod {
    name: String,
    zone: &'static str,
    model: usize,
    build: String,
    serving: (i64, i64),
}

/// What a request is, for a fault to decide whether it is hit.
struct Request<'a> {
    pod: &'a Pod,
    /// A request-level revision (an adapter or prompt-template revision: any pod serves it).
    revision: &'a str,
}

/// From minute `onset` on, requests `hit` selects are `factor` × slower.
struct Fault {
    onset: i64,
    hit: Box<dyn Fn(&Request<'_>) -> bool>,
    factor: f64,
}

/// The generated fleet and its traffic.
struct Fleet {
    pods: Vec<Pod>,
    minutes: i64,
    per_minute: usize,
    /// σ of the per-minute load swing every request feels.
    swing: f64,
    /// Noise of the small slices: σ of each tenant's per-minute swing, and how many tenants get
    /// one transient episode (10-15 minutes × 2, then back).
    tenant_swing: f64,
    episodes: usize,
    /// Share of requests that carry revision `r-canary` (the rest `r-main`).
    canary_share: f64,
}

/// `per_zone` pods in each of three zones; the first `fast` of each zone serve the fast model.
fn pods(per_zone: usize, fast: usize, build: &str) -> Vec<Pod> {
    let mut out = Vec::new();
    for zone in ["zone-a", "zone-b", "zone-c"] {
        for k in 0..per_zone {
            let model = usize::from(k >= fast);
            out.push(Pod {
                name: format!("{}-{zone}-{k}", MODELS[model].0),
                zone,
                model,
                build: build.into(),
                serving: (0, i64::MAX),
            });
        }
    }
    out
}

const TENANTS: usize = 24;

impl Fleet {
    /// Seeded rows: pods in turn, tenants with Zipf-like shares (the smallest near 1 %), each
    /// tenant's noise, then the faults.
    fn rows(&self, faults: &[Fault], version_key: &str, seed: u64) -> Vec<RequestRecord> {
        let mut rng = SplitMix64::new(seed);
        let weights: Vec<f64> = (0..TENANTS).map(|t| 1.0 / (t as f64 + 2.0)).collect();
        let total: f64 = weights.iter().sum();
        let episodes: Vec<(usize, i64, i64)> = (0..self.episodes)
            .map(|_| {
                let tenant = rng.below(TENANTS);
                let start = 20 + rng.below((self.minutes - 40) as usize) as i64;
                (tenant, start, start + 10 + rng.below(6) as i64)
            })
            .collect();
        let mut rows = Vec::new();
        for minute in 0..self.minutes {
            let common = (self.swing * rng.normal()).exp();
            let tenant_factor: Vec<f64> = (0..TENANTS)
                .map(|t| {
                    let episode = episodes
                        .iter()
                        .any(|(e, from, to)| *e == t && (*from..*to).contains(&minute));
                    (self.tenant_swing * rng.normal()).exp() * if episode { 2.0 } else { 1.0 }
                })
                .collect();
            let serving: Vec<&Pod> = self
                .pods
                .iter()
                .filter(|p| p.serving.0 <= minute && minute < p.serving.1)
                .collect();
            for i in 0..self.per_minute {
                let pod = serving[i % serving.len()];
                let mut pick = rng.uniform() * total;
                let tenant = weights
                    .iter()
                    .position(|w| {
                        pick -= w;
                        pick < 0.0
                    })
                    .unwrap_or(TENANTS - 1);
                let revision = if rng.uniform() < self.canary_share {
                    "r-canary"
                } else {
                    "r-main"
                };
                let request = Request { pod, revision };
                let factor: f64 = faults
                    .iter()
                    .filter(|f| minute >= f.onset && (f.hit)(&request))
                    .map(|f| f.factor)
                    .product();
                let e2e = MODELS[pod.model].1
                    * factor
                    * common
                    * tenant_factor[tenant]
                    * (0.25 * rng.normal()).exp();
                let ts = START_NS
                    + minute * MINUTE_NS
                    + (i as i64) * (MINUTE_NS / self.per_minute as i64);
                let attrs = serde_json::json!({
                    "cloud.availability_zone": pod.zone,
                    version_key: pod.build,
                    "acme.prompt_revision": revision,
                    "k8s.pod.name": pod.name,
                });
                rows.push(RequestRecord {
                    ts,
                    request_id: Some(format!("q-{minute}-{i}")),
                    tenant: Some(format!("tenant-{tenant:02}")),
                    service: Some("llm".into()),
                    worker: Some(pod.name.clone()),
                    model: Some(MODELS[pod.model].0.into()),
                    input_tokens: Some(300 + rng.below(300) as i64),
                    output_tokens: Some(100 + rng.below(150) as i64),
                    ttft_ms: Some(e2e * 0.15),
                    queue_ms: Some(4.0 * (0.3 * rng.normal()).exp()),
                    e2e_ms: Some(e2e),
                    status: Some("ok".into()),
                    finish_reason: Some("stop".into()),
                    attrs: attrs.to_string(),
                    ..Default::default()
                });
            }
        }
        rows
    }
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

fn top_cause(report: &RcaReport) -> BTreeMap<String, String> {
    report
        .root_causes
        .first()
        .map(|c| c.dimensions.clone().into())
        .unwrap_or_default()
}

fn explain(report: &RcaReport) -> String {
    let causes: Vec<String> = report
        .root_causes
        .iter()
        .map(|c| format!("{:?}", c.dimensions))
        .collect();
    format!(
        "{}\n{}\ncauses: {causes:?}",
        report.window_source, report.verdict
    )
}

fn onset_minute(report: &RcaReport) -> i64 {
    report
        .symptom
        .as_ref()
        .map_or(-1, |s| (s.onset - START_NS) / MINUTE_NS)
}

/// Class 3, latency judged against its own model: the fast model regresses (× 2.2) in one
/// zone, a tenth of the traffic; its slowed requests stay far below the slow model's, so
/// against the fleet's baseline p95 nothing moved.
#[tokio::test]
async fn a_fast_model_regression_is_judged_against_its_own_baseline() {
    for seed in [11, 12, 13] {
        let key = VERSION_KEYS[seed as usize % VERSION_KEYS.len()];
        let fleet = Fleet {
            pods: pods(6, 2, "b-7"),
            minutes: 90,
            per_minute: 200,
            swing: 0.0,
            tenant_swing: 0.0,
            episodes: 0,
            canary_share: 0.0,
        };
        let fault = Fault {
            onset: 60,
            hit: Box::new(|r: &Request<'_>| r.pod.model == 0 && r.pod.zone == "zone-b"),
            factor: 2.2,
        };
        let report = rca_of(&fleet.rows(&[fault], key, seed)).await;
        let top = top_cause(&report);
        let fast = MODELS[0].0;
        assert!(
            top == subject(&[("cloud.availability_zone", "zone-b"), ("model", fast)]),
            "seed {seed}: {}",
            explain(&report)
        );
        let onset = onset_minute(&report);
        assert!((55..=66).contains(&onset), "seed {seed}: onset {onset}");
    }
}

/// Class 3 among noise: 6 % of the requests (a request-level revision no rollup column holds,
/// served by every pod) regress × 1.8 early in the data, under fleet-wide load swings, while
/// many small tenants swing on their own and a few have short episodes of their own. The real
/// regression is chosen, with its onset, on every seed.
#[tokio::test]
async fn a_small_regression_is_chosen_over_noisy_small_slices() {
    for seed in [21, 22, 23, 24] {
        let key = VERSION_KEYS[seed as usize % VERSION_KEYS.len()];
        let fleet = Fleet {
            pods: pods(6, 0, "b-7"),
            minutes: 150,
            per_minute: 200,
            swing: 0.12,
            tenant_swing: 0.3,
            episodes: 4,
            canary_share: 0.06,
        };
        let onset = 40 + (seed as i64 % 4) * 3;
        let fault = Fault {
            onset,
            hit: Box::new(|r: &Request<'_>| r.revision == "r-canary"),
            factor: 1.8,
        };
        let report = rca_of(&fleet.rows(&[fault], key, seed)).await;
        assert_eq!(
            top_cause(&report),
            subject(&[("acme.prompt_revision", "r-canary")]),
            "seed {seed}: {}",
            explain(&report)
        );
        let found = onset_minute(&report);
        assert!(
            (onset - 5..=onset + 12).contains(&found),
            "seed {seed}: onset {found}, truth {onset}: {}",
            explain(&report)
        );
    }
}

/// Class 3 where no fleet series moves: the same 6 % request-level revision regresses
/// (× 1.7) under strong fleet-wide load swings, early enough that most of the hour before the
/// last third is regressed too (comparing the last third with it finds nothing), late enough
/// that the first third, the detectors' reference, is not. Only the revision's own onset
/// series, an attribute no rollup column holds, finds the window.
#[tokio::test]
async fn a_slice_no_fleet_series_shows_gets_its_onset_from_its_attribute() {
    for seed in [51, 52, 53] {
        let key = VERSION_KEYS[seed as usize % VERSION_KEYS.len()];
        let fleet = Fleet {
            pods: pods(6, 0, "b-7"),
            minutes: 150,
            per_minute: 200,
            swing: 0.3,
            tenant_swing: 0.3,
            episodes: 2,
            canary_share: 0.06,
        };
        let fault = Fault {
            onset: 58,
            hit: Box::new(|r: &Request<'_>| r.revision == "r-canary"),
            factor: 1.7,
        };
        let report = rca_of(&fleet.rows(&[fault], key, seed)).await;
        assert_eq!(
            top_cause(&report),
            subject(&[("acme.prompt_revision", "r-canary")]),
            "seed {seed}: {}",
            explain(&report)
        );
        let found = onset_minute(&report);
        assert!((53..=70).contains(&found), "seed {seed}: onset {found}");
    }
}

/// A rollout: from minute `at`, pods on build `build` replace every other pod of `zone` (so
/// each model keeps pods of the old build there).
fn roll_out(pods: &mut Vec<Pod>, zone: &str, build: &str, at: i64) {
    let old: Vec<usize> = (0..pods.len()).filter(|&i| pods[i].zone == zone).collect();
    for (n, &i) in old.iter().enumerate().skip(1).step_by(2) {
        pods[i].serving.1 = at;
        let mut new = pods[i].clone();
        new.name = format!("{}-{build}-{n}", pods[i].name);
        new.build = build.into();
        new.serving = (at, i64::MAX);
        pods.push(new);
    }
}

/// The RCA of [`rollout_fleet`] over `pods` where build `b-8` (under `key`) is 1.8× slower
/// from minute 60.
async fn rca_of_slower_build(pods: Vec<Pod>, key: &str, seed: u64) -> RcaReport {
    let fault = Fault {
        onset: 60,
        hit: Box::new(|r: &Request<'_>| r.pod.build == "b-8"),
        factor: 1.8,
    };
    rca_of(&rollout_fleet(pods).rows(&[fault], key, seed)).await
}

/// The quiet 90-minute fleet of the rollout tests: `pods`, mild load swings, no episodes.
fn rollout_fleet(pods: Vec<Pod>) -> Fleet {
    Fleet {
        pods,
        minutes: 90,
        per_minute: 240,
        swing: 0.05,
        tenant_swing: 0.1,
        episodes: 0,
        canary_share: 0.0,
    }
}

/// Class 4: a build that exists only from the incident on, under a different key per seed,
/// regresses: it is the cause, compared with its peers at the same time and with what it
/// replaced, and a version regression names it whatever its key.
#[tokio::test]
async fn a_rollout_under_any_name_is_a_version_regression() {
    for seed in [31, 32, 33, 34] {
        let key = VERSION_KEYS[seed as usize % VERSION_KEYS.len()];
        let mut all = pods(4, 2, "b-7");
        roll_out(&mut all, "zone-c", "b-8", 60);
        let report = rca_of_slower_build(all, key, seed).await;
        let expected = subject(&[(key, "b-8")]);
        assert_eq!(
            top_cause(&report),
            expected,
            "seed {seed}: {}",
            explain(&report)
        );
        let regressions: Vec<_> = report
            .signals
            .iter()
            .filter(|s| s.kind == SignalKind::VersionRegression)
            .collect();
        // one signal, whether the key names a version (read off in `advice`) or not (a rollout)
        let [regression] = regressions[..] else {
            panic!(
                "seed {seed}: not one version regression: {:?}",
                report.signals
            );
        };
        assert_eq!(
            BTreeMap::from(regression.subject.clone()),
            expected,
            "seed {seed}"
        );
        for words in ["peers", "replaced"] {
            assert!(
                regression.detail.contains(words),
                "seed {seed}: {}",
                regression.detail
            );
        }
    }
}

/// Class 4, the other way round: a build rolled out at the incident's start that does *not*
/// regress, while one pod of the old build slows down: the pod is blamed and no version
/// regression is reported for the innocent build.
#[tokio::test]
async fn an_innocent_rollout_is_not_a_version_regression() {
    for seed in [41, 42] {
        let key = VERSION_KEYS[seed as usize % VERSION_KEYS.len()];
        let mut all = pods(4, 2, "b-7");
        roll_out(&mut all, "zone-a", "b-8", 60);
        let slow = all
            .iter()
            .find(|p| p.zone == "zone-b" && p.model == 1)
            .unwrap()
            .name
            .clone();
        let fleet = rollout_fleet(all);
        let victim = slow.clone();
        let fault = Fault {
            onset: 60,
            hit: Box::new(move |r: &Request<'_>| r.pod.name == victim),
            factor: 2.0,
        };
        let report = rca_of(&fleet.rows(&[fault], key, seed)).await;
        let top = top_cause(&report);
        assert!(
            top == subject(&[("worker", &slow)]) || top == subject(&[("k8s.pod.name", &slow)]),
            "seed {seed}: {}",
            explain(&report)
        );
        assert!(
            !report
                .signals
                .iter()
                .any(|s| s.kind == SignalKind::VersionRegression),
            "seed {seed}: {:?}",
            report.signals
        );
    }
}

/// A build that served before the incident (one pod of the large model in two zones) regresses
/// from minute 60: no rollout, so only the name says it is a version. Under names that say so
/// (OTel's, a team's own, a revision) the cause is a version regression; under a name that does
/// not (`acme.pool`), the same cause is not.
#[tokio::test]
async fn a_regressing_build_is_a_version_regression_when_its_name_says_version() {
    let cases = [
        ("service.version", true),
        ("model.revision", true),
        ("acme.engine_build", true),
        ("appVersion", true),
        ("acme.pool", false),
    ];
    for (seed, (key, is_version)) in (51..).zip(cases) {
        let mut all = pods(4, 2, "b-7");
        for pod in all
            .iter_mut()
            .filter(|p| p.zone != "zone-c" && p.model == 1)
        {
            if pod.name.ends_with("-3") {
                pod.build = "b-8".into();
            }
        }
        let report = rca_of_slower_build(all, key, seed).await;
        let expected = subject(&[(key, "b-8")]);
        assert_eq!(top_cause(&report), expected, "{key}: {}", explain(&report));
        let regressions: Vec<BTreeMap<String, String>> = report
            .signals
            .iter()
            .filter(|s| s.kind == SignalKind::VersionRegression)
            .map(|s| s.subject.clone().into())
            .collect();
        if is_version {
            assert_eq!(regressions, vec![expected], "{key}: {:?}", report.signals);
        } else {
            assert!(regressions.is_empty(), "{key}: {:?}", report.signals);
        }
    }
}
