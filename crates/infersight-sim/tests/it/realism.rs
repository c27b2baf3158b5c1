//! Realism of arrivals and the latency model, checked from the emitted telemetry: replayed
//! length distributions match the source traces, TTFT grows with input length, inter-token
//! latency grows with batch size, and queueing grows without bound under overload and drains
//! afterwards.

use infersight_model::RequestRecord;
use infersight_sim::arrivals::RateProfile;
use infersight_sim::arrivals::load_trace;
use infersight_sim::{ArrivalKind, LoadCycle, Scenario, SimConfig, Surge};

use crate::support::{data_dir, quantile, requests, run_memory};

fn healthy(rate: f64, duration_s: f64) -> SimConfig {
    let mut config = SimConfig::new(Scenario::Healthy);
    config.seed = 21;
    config.rate_per_s = rate;
    config.duration_s = duration_s;
    config.load_cycle = LoadCycle::None;
    config
}

#[test]
fn replayed_lengths_match_the_source_trace_quantiles() {
    let Some(dir) = data_dir() else { return };
    for kind in [
        ArrivalKind::Mooncake,
        ArrivalKind::AzureCode,
        ArrivalKind::AzureConv,
    ] {
        let trace = load_trace(kind, &dir).unwrap();
        let n = trace.records.len() as f64;
        // One pass over the whole trace in 10 simulated minutes.
        let mut config = healthy(n / 600.0, 600.0);
        config.arrivals = kind;
        config.data_dir = Some(dir.clone());
        let rows = requests(&run_memory(config).traces);
        assert!(
            (rows.len() as f64 - n).abs() <= 0.01 * n,
            "{}: {} requests for {n} records",
            kind.name(),
            rows.len()
        );
        let source_in: Vec<f64> = trace
            .records
            .iter()
            .map(|r| r.input_tokens as f64)
            .collect();
        let source_out: Vec<f64> = trace
            .records
            .iter()
            .map(|r| r.output_tokens as f64)
            .collect();
        let sim_in: Vec<f64> = rows
            .iter()
            .map(|r| r.input_tokens.unwrap() as f64)
            .collect();
        let sim_out: Vec<f64> = rows
            .iter()
            .map(|r| r.output_tokens.unwrap() as f64)
            .collect();
        for q in [0.1, 0.25, 0.5, 0.75, 0.9, 0.99] {
            for (what, source, sim) in [
                ("input", &source_in, &sim_in),
                ("output", &source_out, &sim_out),
            ] {
                let (a, b) = (quantile(source, q), quantile(sim, q));
                assert!(
                    (b - a).abs() <= 0.05 * a.max(1.0),
                    "{} {what} p{}: source {a} vs simulated {b}",
                    kind.name(),
                    q * 100.0
                );
            }
        }
    }
}

#[test]
fn replay_time_scales_to_the_requested_rate() {
    let Some(dir) = data_dir() else { return };
    let mut config = healthy(30.0, 900.0);
    config.arrivals = ArrivalKind::Mooncake;
    config.data_dir = Some(dir);
    let rows = requests(&run_memory(config).traces);
    // 30 req/s for 15 minutes: 27,000 requests, i.e. the 12,031-record trace looped.
    assert!(
        (rows.len() as f64 / 27_000.0 - 1.0).abs() < 0.03,
        "{}",
        rows.len()
    );
    // Prefix reuse from the hash blocks shows up on prefix-cache workers.
    let cached: i64 = rows
        .iter()
        .filter(|r| r.kv_cache_policy.as_deref() == Some("prefix_cache"))
        .map(|r| r.cached_tokens.unwrap_or(0))
        .sum();
    assert!(cached > 0);
}

fn median_by<K: Fn(&RequestRecord) -> Option<f64>, V: Fn(&RequestRecord) -> Option<f64>>(
    rows: &[RequestRecord],
    bins: &[(f64, f64)],
    key: K,
    value: V,
) -> Vec<f64> {
    bins.iter()
        .map(|(lo, hi)| {
            let v: Vec<f64> = rows
                .iter()
                .filter(|r| key(r).is_some_and(|k| k >= *lo && k < *hi))
                .filter_map(&value)
                .collect();
            assert!(v.len() > 100, "bin {lo}..{hi} has {} rows", v.len());
            quantile(&v, 0.5)
        })
        .collect()
}

fn strictly_increasing(v: &[f64]) -> bool {
    v.windows(2).all(|w| w[1] > w[0])
}

#[test]
fn ttft_grows_with_input_length_and_itl_with_batch_size() {
    let rows = requests(&run_memory(healthy(60.0, 900.0)).traces);
    let uncached =
        |r: &RequestRecord| Some((r.input_tokens? - r.cached_tokens.unwrap_or(0)) as f64);
    let ttft = median_by(
        &rows,
        &[
            (0.0, 800.0),
            (800.0, 1_600.0),
            (1_600.0, 3_200.0),
            (3_200.0, 1e9),
        ],
        uncached,
        |r| r.ttft_ms,
    );
    assert!(strictly_increasing(&ttft), "ttft by input length {ttft:?}");
    assert!(ttft[3] > 2.0 * ttft[0], "{ttft:?}");
    // Inter-token latency without speculative decoding, by batch size at admission.
    let plain: Vec<RequestRecord> = rows
        .into_iter()
        .filter(|r| r.spec_draft_tokens.is_none() && r.output_tokens.unwrap_or(0) > 16)
        .collect();
    let itl = median_by(
        &plain,
        &[(1.0, 4.0), (4.0, 8.0), (8.0, 14.0), (14.0, 1e9)],
        |r| r.batch_size.map(|b| b as f64),
        |r| r.tpot_ms,
    );
    assert!(strictly_increasing(&itl), "itl by batch size {itl:?}");
}

#[test]
fn queue_grows_without_bound_under_overload_and_drains_after() {
    let mut config = healthy(30.0, 900.0);
    // 15× the load for two minutes, well past the fleet's capacity.
    config.surges = vec![Surge {
        start_s: 300.0,
        end_s: 420.0,
        factor: 15.0,
    }];
    let rows = requests(&run_memory(config).traces);
    let start = infersight_sim::config::DEFAULT_START_NS;
    let queue_in = |from_s: f64, to_s: f64| {
        let v: Vec<f64> = rows
            .iter()
            .filter(|r| {
                let s = (r.ts - start) as f64 / 1e9;
                s >= from_s && s < to_s
            })
            .filter_map(|r| r.queue_ms)
            .collect();
        quantile(&v, 0.5)
    };
    let before = queue_in(200.0, 300.0);
    let during: Vec<f64> = (0..4)
        .map(|i| queue_in(300.0 + 30.0 * i as f64, 330.0 + 30.0 * i as f64))
        .collect();
    let after = queue_in(600.0, 900.0);
    assert!(before < 20.0, "before {before}");
    assert!(
        strictly_increasing(&during),
        "queue during overload {during:?}"
    );
    assert!(during[3] > 5.0 * during[0].max(100.0), "{during:?}");
    assert!(after < 20.0, "queue must drain: {after}");
}

#[test]
fn the_daily_cycle_follows_the_time_of_day_and_keeps_the_mean_rate() {
    // A day from midnight UTC, then the same day started at noon: the busy hours are the
    // afternoon's whatever the run's start.
    for start_hour in [0_i64, 12] {
        let mut config = healthy(10.0, 86_400.0);
        config.load_cycle = LoadCycle::Daily;
        config.start_ns = (1_764_374_400 + start_hour * 3_600) * 1_000_000_000; // 2025-11-29 00:00 UTC + h
        let profile = RateProfile::new(&config);
        let mean_over = |from_h: i64, to_h: i64| {
            let (a, b) = (
                (from_h - start_hour).rem_euclid(24),
                (to_h - start_hour).rem_euclid(24),
            );
            let (a, b) = (a * 3_600, if b == 0 { 86_400 } else { b * 3_600 });
            (a..b).map(|s| profile.at(s as f64)).sum::<f64>() / (b - a) as f64
        };
        let day = (0..86_400).map(|s| profile.at(s as f64)).sum::<f64>() / 86_400.0;
        assert!(
            (day - 1.0).abs() < 0.01,
            "start {start_hour}h: day mean {day}"
        );
        let (peak, trough) = (mean_over(13, 15), mean_over(1, 3));
        assert!(
            (1.4..1.6).contains(&peak),
            "start {start_hour}h: 13-15h {peak}"
        );
        assert!(
            (0.45..0.6).contains(&trough),
            "start {start_hour}h: 01-03h {trough}"
        );
    }
    // and the default short cycle is the same as before: ±25 % over 30 minutes from the start
    let profile = RateProfile::new(&healthy(10.0, 3_600.0));
    assert!((profile.at(0.0) - 1.0).abs() < 1e-9);
    let mut config = healthy(10.0, 3_600.0);
    config.load_cycle = LoadCycle::Short;
    let profile = RateProfile::new(&config);
    assert!(
        (profile.at(450.0) - 1.25).abs() < 0.01,
        "{}",
        profile.at(450.0)
    );
    assert!(
        (profile.at(1_350.0) - 0.75).abs() < 0.01,
        "{}",
        profile.at(1_350.0)
    );
}
