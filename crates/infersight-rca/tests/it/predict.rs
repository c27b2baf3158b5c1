//! Predictive risk of the watcher (`infersight_rca::watch::predict`) over a real store: eight
//! workers serving requests and exporting metrics every 10 s with seeded noise (GPU memory
//! used and total bytes, KV-cache usage, waiting requests, the finished-requests counter).
//! Checked, each on data shaped like its class rather than one scenario:
//! - a leak (one worker's memory rising linearly from a flat start): a warning episode opens
//!   with a prediction for that worker's GPU memory whose ETA interval holds the true time of
//!   exhaustion at (nearly) every step, across seeds, well before it; no other worker warns;
//! - a queue growing on one worker against the gateway timeout, learnt from the timed-out
//!   requests of the history: the warning comes before the first request would time out;
//! - a fleet whose series are flat and noisy (memory, KV usage swinging with load, a small
//!   queue coming and going) for two hours: no warning.

use std::sync::Arc;

use infersight_model::rng::SplitMix64;
use infersight_model::{MetricRecord, RequestRecord, Table, TableBatch};
use infersight_query::QueryEngine;
use infersight_rca::watch::{
    EXHAUSTION_RISK_ALERTNAME, EpisodeKind, Prediction, WatchSettings, Watcher,
};
use infersight_store::{StorageBackend, Store, StoreOptions};

const MINUTE_NS: i64 = 60_000_000_000;
const SECOND_NS: i64 = 1_000_000_000;
const START_NS: i64 = 1_767_225_600_000_000_000; // 2026-01-01T00:00:00Z
const CAPACITY: f64 = 24.0e9;
const WORKERS: usize = 8;

/// What goes wrong, and from which minute.
#[derive(Debug, Clone, Copy)]
enum Fault {
    None,
    /// worker-3's used memory: half the capacity, then +`per_minute` of it from `from`.
    Leak {
        from: i64,
        per_minute: f64,
    },
    /// worker-5's queue: +`per_minute` waiting requests from `from`, drained at 0.5/s.
    Queue {
        from: i64,
        per_minute: f64,
    },
    /// worker-2's KV usage: every 7 minutes a burst of long prompts ramps it from 0.2 to 0.8
    /// in 90 s, then it drops back (a bursty real trace does that); nothing fills.
    KvBursts,
    /// worker-6's KV usage: +`per_minute` of the pool on top of its load from `from` (sessions
    /// that keep growing): it fills.
    KvFill {
        from: i64,
        per_minute: f64,
    },
}

fn at(minute: i64) -> i64 {
    START_NS + minute * MINUTE_NS
}

fn metric(ts: i64, worker: u64, name: &str, value: f64, device: &str) -> MetricRecord {
    MetricRecord {
        ts,
        name: Some(name.into()),
        kind: Some("gauge".into()),
        value: Some(value),
        worker: Some(format!("worker-{worker}")),
        device: Some(device.into()),
        labels: "{}".into(),
        ..Default::default()
    }
}

/// Metric samples every 10 s of minutes `[0, minutes)`.
fn metrics(seed: u64, minutes: i64, fault: Fault) -> Vec<MetricRecord> {
    let mut rng = SplitMix64::new(seed);
    let mut rows = Vec::new();
    let mut finished = [0.0_f64; WORKERS];
    for tick in 0..minutes * 6 {
        let ts = START_NS + tick * 10 * SECOND_NS;
        let minute = tick as f64 / 6.0;
        // load swings ±40 % over 40 minutes
        let load = 1.0 + 0.4 * (minute * std::f64::consts::TAU / 40.0).sin();
        for w in 0..WORKERS as u64 {
            let mut used = 0.5 + 0.002 * rng.normal();
            let mut waiting = if rng.uniform() < 0.1 * load {
                rng.below(3) as f64
            } else {
                0.0
            };
            match fault {
                Fault::Leak { from, per_minute } if w == 3 => {
                    used += (minute - from as f64).max(0.0) * per_minute;
                }
                Fault::Queue { from, per_minute } if w == 5 => {
                    waiting += ((minute - from as f64).max(0.0) * per_minute).floor();
                }
                _ => {}
            }
            finished[w as usize] += (5.0 * load + rng.normal()).max(0.0).round();
            let mut kv = 0.35 * load + 0.08 * rng.normal();
            match fault {
                Fault::KvBursts if w == 2 && minute % 7.0 < 1.5 => {
                    kv = 0.2 + 0.4 * (minute % 7.0) + 0.03 * rng.normal();
                }
                Fault::KvFill { from, per_minute } if w == 6 => {
                    kv += (minute - from as f64).max(0.0) * per_minute;
                }
                _ => {}
            }
            let kv = kv.clamp(0.0, 1.0);
            rows.push(metric(ts, w, "gpu_memory_used_bytes", used * CAPACITY, "0"));
            if tick % 30 == 0 {
                rows.push(metric(ts, w, "gpu_memory_total_bytes", CAPACITY, "0"));
            }
            rows.push(metric(ts, w, "kv_cache_usage_ratio", kv, ""));
            rows.push(metric(ts, w, "requests_waiting", waiting, ""));
            rows.push(metric(
                ts,
                w,
                "requests_finished_total",
                finished[w as usize],
                "",
            ));
        }
    }
    rows
}

/// Two requests a second; with `timeouts`, one request of each of the first 20 minutes timed
/// out at the gateway after 30 s.
fn requests(seed: u64, minutes: i64, timeouts: bool) -> Vec<RequestRecord> {
    let mut rng = SplitMix64::new(seed ^ 0x5eed);
    let mut rows = Vec::new();
    for minute in 0..minutes {
        for i in 0..120 {
            let ts = at(minute) + i * 500_000_000;
            let worker = rng.below(WORKERS);
            let timed_out = timeouts && minute < 20 && i == 0;
            let ttft = 80.0 * (0.2 * rng.normal()).exp();
            rows.push(RequestRecord {
                ts,
                request_id: Some(format!("r-{minute}-{i}")),
                service: Some("inference".into()),
                worker: Some(format!("worker-{worker}")),
                model: Some("llama-3-8b".into()),
                input_tokens: Some(400 + rng.below(200) as i64),
                output_tokens: Some(if timed_out {
                    0
                } else {
                    150 + rng.below(100) as i64
                }),
                ttft_ms: Some(ttft),
                e2e_ms: Some(if timed_out {
                    30_000.0
                } else {
                    ttft + 900.0 * (0.2 * rng.normal()).exp()
                }),
                status: Some(if timed_out { "error" } else { "ok" }.into()),
                error_type: timed_out.then(|| "timeout".into()),
                finish_reason: Some("stop".into()),
                ..Default::default()
            });
        }
    }
    rows
}

fn engine_of(
    dir: &std::path::Path,
    requests: Vec<RequestRecord>,
    metrics: Vec<MetricRecord>,
) -> QueryEngine {
    let store = Store::open(StoreOptions::new(dir)).unwrap();
    store
        .append(&[
            TableBatch {
                table: Table::Requests,
                batch: RequestRecord::to_batch(&requests),
            },
            TableBatch {
                table: Table::Metrics,
                batch: MetricRecord::to_batch(&metrics),
            },
        ])
        .unwrap();
    QueryEngine::new(Arc::new(store) as Arc<dyn StorageBackend>)
}

fn settings() -> WatchSettings {
    WatchSettings {
        step_ns: MINUTE_NS,
        // the behaviour detectors are not the point here (and cost most of a step)
        behaviour_every_ns: 600 * MINUTE_NS,
        ..WatchSettings::default()
    }
}

/// Every step's predictions from `since` to `until` (minutes), and the watcher after them.
async fn run(engine: &QueryEngine, since: i64, until: i64) -> (Vec<Prediction>, Watcher) {
    run_with(settings(), engine, since, until).await
}

async fn run_with(
    settings: WatchSettings,
    engine: &QueryEngine,
    since: i64,
    until: i64,
) -> (Vec<Prediction>, Watcher) {
    let mut watcher = Watcher::new(settings, None, None).unwrap();
    let mut seen = Vec::new();
    for minute in since..=until {
        let outcome = watcher.step(engine, at(minute)).await.unwrap();
        seen.extend(outcome.predictions);
    }
    (seen, watcher)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leak_warns_early_with_an_eta_interval_that_holds_the_truth() {
    // +2 % of capacity a minute from minute 30: full at minute 55
    let fault = Fault::Leak {
        from: 30,
        per_minute: 0.02,
    };
    let truth = at(55);
    for seed in [1, 2, 3] {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine_of(
            dir.path(),
            requests(seed, 48, false),
            metrics(seed, 48, fault),
        );
        let (seen, watcher) = run(&engine, 20, 48).await;
        assert!(
            seen.iter().all(|p| p.resource == "gpu_memory"
                && p.subject.get("worker").map(String::as_str) == Some("worker-3")),
            "seed {seed}: {:#?}",
            seen.iter().map(Prediction::line).collect::<Vec<_>>()
        );
        let first = seen
            .first()
            .unwrap_or_else(|| panic!("seed {seed}: no warning"));
        assert!(
            first.at_ns <= at(40),
            "seed {seed}: first warned at minute {}",
            (first.at_ns - START_NS) / MINUTE_NS
        );
        let held = seen
            .iter()
            .filter(|p| (p.eta_low_ns..=p.eta_high_ns).contains(&truth))
            .count();
        assert!(
            held * 10 >= seen.len() * 9,
            "seed {seed}: {held} of {} intervals hold minute 55: {:#?}",
            seen.len(),
            seen.iter().map(Prediction::line).collect::<Vec<_>>()
        );
        let warnings: Vec<_> = watcher
            .reports()
            .into_iter()
            .filter(|r| r.kind == EpisodeKind::Warning)
            .collect();
        assert_eq!(warnings.len(), 1, "seed {seed}: one warning episode");
        let notice = warnings[0].notice();
        assert_eq!(notice.alertname, EXHAUSTION_RISK_ALERTNAME);
        assert_eq!(notice.worker.as_deref(), Some("worker-3"));
        assert!(
            notice.summary.contains("gpu_memory") && notice.description.contains("device capacity"),
            "{notice:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_growing_queue_warns_before_the_gateway_timeout() {
    // a new request's wait grows by 12 s a minute from minute 30 (6 more waiting, drained at
    // about 0.5/s); the timed-out requests of the history reveal a 30 s timeout: the first
    // request times out at about minute 32.5
    let fault = Fault::Queue {
        from: 30,
        per_minute: 6.0,
    };
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_of(dir.path(), requests(4, 40, true), metrics(4, 40, fault));
    let (seen, _) = run(&engine, 20, 40).await;
    let queue: Vec<&Prediction> = seen.iter().filter(|p| p.resource == "queue_wait").collect();
    let first = queue.first().unwrap_or_else(|| {
        panic!(
            "no queue warning: {:#?}",
            seen.iter().map(Prediction::line).collect::<Vec<_>>()
        )
    });
    assert_eq!(
        first.subject.get("worker").map(String::as_str),
        Some("worker-5")
    );
    assert!(
        first.at_ns < at(32) + 30 * SECOND_NS,
        "warned at {} s after minute 30",
        (first.at_ns - at(30)) / SECOND_NS
    );
    assert!((first.limit - 30.0).abs() < 1.0, "{}", first.line());
    assert!(first.limit_source.contains("timed-out"), "{}", first.line());
    assert!(
        queue
            .iter()
            .all(|p| p.subject.get("worker").map(String::as_str) == Some("worker-5")),
        "{:#?}",
        queue.iter().map(|p| p.line()).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_flat_noisy_hours_warn_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_of(
        dir.path(),
        requests(5, 120, false),
        metrics(5, 120, Fault::None),
    );
    let (seen, watcher) = run(&engine, 15, 120).await;
    assert!(
        seen.is_empty(),
        "{:#?}",
        seen.iter().map(Prediction::line).collect::<Vec<_>>()
    );
    assert!(
        watcher
            .reports()
            .iter()
            .all(|r| r.kind != EpisodeKind::Warning),
        "a warning opened"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_bursts_warn_nothing_a_pool_that_fills_warns() {
    // bursts: ramps of 90 s from 0.2 to 0.8, every 7 minutes for an hour
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_of(
        dir.path(),
        requests(6, 75, false),
        metrics(6, 75, Fault::KvBursts),
    );
    let (seen, _) = run(&engine, 15, 75).await;
    let lines = |seen: &[Prediction]| seen.iter().map(Prediction::line).collect::<Vec<_>>();
    assert!(seen.is_empty(), "{:#?}", lines(&seen));
    // a projection from any rise, however short, warns of them
    let eager = WatchSettings {
        predict: infersight_rca::watch::PredictSettings {
            kv_min_trend_ns: 0,
            ..settings().predict
        },
        ..settings()
    };
    let (seen, _) = run_with(eager, &engine, 15, 75).await;
    assert!(
        seen.iter().any(|p| p.resource == "kv_cache"),
        "the bursts must look like a fill to a projection from a minute: {:#?}",
        lines(&seen)
    );
    // a pool that fills: +4 % of it a minute from minute 50 on top of the load (which rises
    // into minute 50 and falls after, so the pool's rise starts before the fill) is full near
    // minute 70; the warning comes once the rise has lasted 10 minutes, 6 minutes or more
    // before that
    let dir = tempfile::tempdir().unwrap();
    let fill = Fault::KvFill {
        from: 50,
        per_minute: 0.04,
    };
    let engine = engine_of(dir.path(), requests(7, 80, false), metrics(7, 80, fill));
    let (seen, _) = run(&engine, 40, 80).await;
    let kv: Vec<&Prediction> = seen.iter().filter(|p| p.resource == "kv_cache").collect();
    let first = kv
        .first()
        .unwrap_or_else(|| panic!("no KV warning: {:#?}", lines(&seen)));
    assert_eq!(
        first.subject.get("worker").map(String::as_str),
        Some("worker-6")
    );
    assert!(
        first.at_ns <= at(64) && first.at_ns - first.trend_from_ns >= 10 * MINUTE_NS,
        "{}",
        first.line()
    );
}
