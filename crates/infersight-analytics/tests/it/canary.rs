//! Canary gate tests: seeded synthetic samples with and without a regression (decision rates over
//! many seeds), quality scores where higher is better, error rates, bad inputs, and speed.
//!
//! `bench_rates` (ignored) prints the rates and timings quoted in bench/README.md; run it with
//! `cargo test --release -p infersight-analytics --test it canary::bench_rates -- --ignored
//! --nocapture` (bench/canary.sh does).

use std::time::Instant;

use infersight_analytics::canary::{
    CanaryConfig, CanaryError, Decision, Statistic, compare, format_percent,
};

use crate::support::Rng;

/// Request latencies: lognormal around a 400 ms median, sigma 0.5 (p95 ≈ 910 ms).
fn latencies(rng: &mut Rng, n: usize, scale: f64) -> Vec<f64> {
    (0..n)
        .map(|_| scale * 400.0 * (0.5 * rng.normal()).exp())
        .collect()
}

/// A quality score such as BLEU: normal around `mean` with sd 8, clipped to 0..100.
fn scores(rng: &mut Rng, n: usize, mean: f64) -> Vec<f64> {
    (0..n)
        .map(|_| (mean + 8.0 * rng.normal()).clamp(0.0, 100.0))
        .collect()
}

fn p95(seed: u64) -> CanaryConfig {
    CanaryConfig {
        statistic: Statistic::Quantile(0.95),
        seed,
        ..CanaryConfig::default()
    }
}

/// Share of `seeds` whose gate blocks, for samples drawn by `draw(seed)`.
fn block_rate(
    seeds: std::ops::Range<u64>,
    config: impl Fn(u64) -> CanaryConfig,
    draw: impl Fn(&mut Rng) -> (Vec<f64>, Vec<f64>),
) -> f64 {
    let count = seeds.end - seeds.start;
    let blocks = seeds
        .filter(|&seed| {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9) ^ 0xA5A5);
            let (baseline, candidate) = draw(&mut rng);
            let result = compare(&baseline, &candidate, &config(seed)).unwrap();
            result.decision == Decision::Block
        })
        .count();
    blocks as f64 / count as f64
}

#[test]
fn a_twenty_percent_p95_regression_blocks() {
    let rate = block_rate(0..100, p95, |rng| {
        (latencies(rng, 2000, 1.0), latencies(rng, 2000, 1.2))
    });
    println!("detection rate, +20 % p95, n=2000 per arm, 100 seeds: {rate:.3}");
    assert!(rate >= 0.95, "detection rate {rate}");
}

#[test]
fn no_regression_passes() {
    let rate = block_rate(1000..1200, p95, |rng| {
        (latencies(rng, 2000, 1.0), latencies(rng, 2000, 1.0))
    });
    println!("false-block rate, no regression, n=2000 per arm, 200 seeds: {rate:.3}");
    assert!(rate <= 0.05, "false-block rate {rate}");
    // Small samples (the minimum allowed) must not block more often either.
    let rate = block_rate(2000..2200, p95, |rng| {
        (latencies(rng, 30, 1.0), latencies(rng, 30, 1.0))
    });
    println!("false-block rate, no regression, n=30 per arm, 200 seeds: {rate:.3}");
    assert!(rate <= 0.05, "false-block rate at n=30: {rate}");
}

#[test]
fn a_regression_within_the_tolerance_passes() {
    // +2 % is real and detectable with 20k samples, but below the 5 % tolerance.
    let mut rng = Rng(77);
    let baseline = latencies(&mut rng, 20_000, 1.0);
    let candidate = latencies(&mut rng, 20_000, 1.02);
    let result = compare(&baseline, &candidate, &p95(1)).unwrap();
    assert_eq!(result.decision, Decision::Pass, "{result}");
}

#[test]
fn block_reports_the_interval_and_reason() {
    let mut rng = Rng(5);
    let baseline = latencies(&mut rng, 4000, 1.0);
    let candidate = latencies(&mut rng, 4000, 1.3);
    let result = compare(&baseline, &candidate, &p95(5)).unwrap();
    assert_eq!(result.decision, Decision::Block, "{result}");
    assert!(result.ci_low > 0.0 && result.ci_low <= result.relative_change);
    assert!(result.relative_change <= result.ci_high);
    assert!(
        (result.relative_change - 0.3).abs() < 0.08,
        "{}",
        result.relative_change
    );
    assert_eq!((result.baseline.n, result.candidate.n), (4000, 4000));
    let line = result.to_string();
    assert!(line.starts_with("BLOCK p95: baseline "), "{line}");
    assert!(line.contains("[95 % CI +"), "{line}");
    assert!(line.contains("max regression 5 %"), "{line}");
    // The same seed gives the same interval.
    let again = compare(&baseline, &candidate, &p95(5)).unwrap();
    assert_eq!(result, again);
}

#[test]
fn quality_scores_where_higher_is_better() {
    let config = |seed| CanaryConfig {
        statistic: Statistic::Mean,
        higher_is_better: true,
        seed,
        ..CanaryConfig::default()
    };
    // A 10 % drop of the mean score blocks …
    let drop = block_rate(0..40, config, |rng| {
        (scores(rng, 1000, 30.0), scores(rng, 1000, 27.0))
    });
    assert!(drop >= 0.95, "a 10 % quality drop blocked in {drop}");
    // … a 10 % rise passes, and so does no change.
    let rise = block_rate(0..40, config, |rng| {
        (scores(rng, 1000, 30.0), scores(rng, 1000, 33.0))
    });
    assert_eq!(rise, 0.0);
    let same = block_rate(100..200, config, |rng| {
        (scores(rng, 1000, 30.0), scores(rng, 1000, 30.0))
    });
    assert!(same <= 0.05, "false-block rate {same}");
    let mut rng = Rng(3);
    let result = compare(
        &scores(&mut rng, 1000, 30.0),
        &scores(&mut rng, 1000, 27.0),
        &config(3),
    )
    .unwrap();
    // positive = worse, even though the score went down
    assert!(result.relative_change > 0.05, "{result}");
    assert!(result.candidate.value < result.baseline.value);
}

#[test]
fn error_rates_compare_as_means_of_zero_one() {
    let config = CanaryConfig {
        statistic: Statistic::Mean,
        ..CanaryConfig::default()
    };
    let mut rng = Rng(21);
    let errors = |rng: &mut Rng, n, p: f64| -> Vec<f64> {
        (0..n).map(|_| f64::from(rng.uniform() < p)).collect()
    };
    let result = compare(
        &errors(&mut rng, 5000, 0.01),
        &errors(&mut rng, 5000, 0.03),
        &config,
    )
    .unwrap();
    assert_eq!(result.decision, Decision::Block, "{result}");
    // No errors on either side: no change, pass.
    let result = compare(&vec![0.0; 500], &vec![0.0; 500], &config).unwrap();
    assert_eq!(result.relative_change, 0.0);
    assert_eq!(result.decision, Decision::Pass, "{result}");
    // Errors where the baseline had none: an infinite relative change, blocked.
    let mut candidate = vec![0.0; 500];
    candidate[..25].fill(1.0);
    let result = compare(&vec![0.0; 500], &candidate, &config).unwrap();
    assert_eq!(result.relative_change, f64::INFINITY);
    assert_eq!(result.decision, Decision::Block, "{result}");
    assert_eq!(format_percent(result.relative_change), "+inf %");
}

#[test]
fn bad_inputs_are_rejected_with_a_reason() {
    let good = vec![1.0; 100];
    let mut with_nan = good.clone();
    with_nan[7] = f64::NAN;
    let error = compare(&good, &with_nan, &CanaryConfig::default()).unwrap_err();
    assert!(
        matches!(
            error,
            CanaryError::NonFinite {
                arm: "candidate",
                index: 7,
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(
        error.to_string(),
        "the candidate has a non-finite value (NaN) at index 7"
    );
    let mut with_inf = good.clone();
    with_inf[0] = f64::INFINITY;
    let error = compare(&with_inf, &good, &CanaryConfig::default()).unwrap_err();
    assert!(
        matches!(
            error,
            CanaryError::NonFinite {
                arm: "baseline",
                index: 0,
                ..
            }
        ),
        "{error}"
    );
    let error = compare(&good[..10], &good, &CanaryConfig::default()).unwrap_err();
    assert_eq!(
        error,
        CanaryError::TooFewSamples {
            arm: "baseline",
            got: 10,
            min: 30
        }
    );
    assert_eq!(
        error.to_string(),
        "the baseline has 10 values; the gate needs at least 30"
    );
    assert!(compare(&good, &[], &CanaryConfig::default()).is_err());
    for (config, name) in [
        (
            CanaryConfig {
                statistic: Statistic::Quantile(1.5),
                ..CanaryConfig::default()
            },
            "quantile",
        ),
        (
            CanaryConfig {
                confidence: 1.0,
                ..CanaryConfig::default()
            },
            "confidence",
        ),
        (
            CanaryConfig {
                resamples: 10,
                ..CanaryConfig::default()
            },
            "resamples",
        ),
        (
            CanaryConfig {
                max_regression: -0.1,
                ..CanaryConfig::default()
            },
            "max_regression",
        ),
        (
            CanaryConfig {
                max_regression: f64::NAN,
                ..CanaryConfig::default()
            },
            "max_regression",
        ),
    ] {
        let error = compare(&good, &good, &config).unwrap_err();
        assert!(
            matches!(&error, CanaryError::BadParam { name: n, .. } if *n == name),
            "{name}: {error}"
        );
    }
}

#[test]
fn a_quantile_gate_over_fifty_thousand_samples_is_fast() {
    let mut rng = Rng(9);
    let baseline = latencies(&mut rng, 50_000, 1.0);
    let candidate = latencies(&mut rng, 50_000, 1.0);
    let started = Instant::now();
    let result = compare(&baseline, &candidate, &p95(9)).unwrap();
    let elapsed = started.elapsed();
    println!("p95 gate, 50k + 50k, 2000 resamples: {elapsed:?} ({result})");
    // Generous for a debug build on a busy 2-core machine; release takes a few milliseconds.
    assert!(elapsed.as_secs_f64() < 2.0, "{elapsed:?}");
    assert!(result.ci_high - result.ci_low < 0.05, "{result}");
}

/// Rates and timings for bench/README.md (release build; see the module docs).
#[test]
#[ignore = "benchmark: run in release through bench/canary.sh"]
fn bench_rates() {
    let seeds = 1000_u64;
    for n in [30, 200, 2000] {
        let rate = block_rate(0..seeds, p95, |rng| {
            (latencies(rng, n, 1.0), latencies(rng, n, 1.0))
        });
        println!("false-block rate p95, no regression, n={n} per arm, {seeds} seeds: {rate:.4}");
    }
    for (n, factor) in [(200, 1.2), (2000, 1.1), (2000, 1.2)] {
        let rate = block_rate(0..seeds, p95, |rng| {
            (latencies(rng, n, 1.0), latencies(rng, n, factor))
        });
        println!(
            "detection rate p95, {} regression, n={n} per arm, {seeds} seeds: {rate:.4}",
            format_percent(factor - 1.0)
        );
    }
    let mean = |seed| CanaryConfig {
        statistic: Statistic::Mean,
        seed,
        ..CanaryConfig::default()
    };
    let rate = block_rate(0..seeds, mean, |rng| {
        (latencies(rng, 2000, 1.0), latencies(rng, 2000, 1.0))
    });
    println!("false-block rate mean, no regression, n=2000 per arm, {seeds} seeds: {rate:.4}");
    let mut rng = Rng(9);
    let baseline = latencies(&mut rng, 50_000, 1.0);
    let candidate = latencies(&mut rng, 50_000, 1.0);
    for config in [p95(9), mean(9)] {
        let runs: Vec<f64> = (0..5)
            .map(|_| {
                let started = Instant::now();
                compare(&baseline, &candidate, &config).unwrap();
                started.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        let mut sorted = runs.clone();
        sorted.sort_by(|a, b| a.total_cmp(b));
        println!(
            "time for one {} gate, 50k + 50k samples, 2000 resamples: median {:.1} ms (runs {:?})",
            config.statistic.label(),
            sorted[2],
            runs.iter().map(|r| format!("{r:.1}")).collect::<Vec<_>>()
        );
    }
}
