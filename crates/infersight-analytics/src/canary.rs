//! Canary gate: compares an SLI (a quantile, a mean or a rate) between a baseline and a candidate
//! sample with seeded bootstrap confidence intervals and decides pass or block. IO-free; the query
//! layer fetches the samples.
//!
//! The compared quantity is the relative change of the statistic, signed so that positive means
//! worse: `(candidate − baseline) / |baseline|` when lower is better (latency, error rate), its
//! negation when higher is better (BLEU, a quality score). Its confidence interval is a percentile
//! bootstrap that resamples both samples independently, `resamples` times, from a seeded
//! generator: the same inputs and seed always give the same interval, on every platform and
//! whatever the number of threads.
//!
//! Decision rule: **block** when the interval lies entirely above 0 (the candidate is worse at the
//! configured confidence) **and** the point estimate exceeds `max_regression`; pass otherwise.
//! Without a regression, the first condition holds with probability about (1 − confidence) / 2
//! (2.5 % at 95 %), and the second makes a block rarer still, so a healthy candidate passes in
//! well over 95 % of runs. A regression larger than `max_regression` blocks once the samples are
//! large enough for the interval to clear 0. Rules that were not chosen: "block when the lower
//! bound exceeds `max_regression`" misses regressions just above the tolerance half the time;
//! "block unless the upper bound is below `max_regression`" (non-inferiority) blocks every small
//! or noisy canary. A pass whose upper bound exceeds `max_regression` says so in its reason, so a
//! pipeline can ask for more traffic.
//!
//! Speed: a quantile is bootstrapped without materializing resamples. With the sample sorted once,
//! the r-th smallest of n indexes drawn uniformly with replacement is `⌊n·U₍ᵣ₎⌋`, where `U₍ᵣ₎`,
//! the r-th order statistic of n uniforms, is Beta(r, n − r + 1); the next one follows from
//! `U₍ᵣ₊₁₎ = U₍ᵣ₎ + (1 − U₍ᵣ₎)·Beta(1, n − r)`. Drawing those two numbers gives exactly the
//! interpolated quantile of an ordinary resample, in O(1) per resample. Means resample in O(n)
//! per resample, spread over threads.

pub use infersight_model::rng::SplitMix64;
use std::fmt;

/// What is compared.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Statistic {
    /// A quantile in [0, 1], linearly interpolated between order statistics (type 7).
    Quantile(f64),
    /// The mean (of 0/1 values: a rate).
    Mean,
}

impl Statistic {
    /// `p95`, `p99.9`, `mean`.
    pub fn label(&self) -> String {
        match self {
            Statistic::Quantile(q) => {
                let pct = (q * 100.0 * 1e6).round() / 1e6;
                format!("p{pct}")
            }
            Statistic::Mean => "mean".to_string(),
        }
    }
}

/// Parameters of one gate.
#[derive(Debug, Clone, PartialEq)]
pub struct CanaryConfig {
    pub statistic: Statistic,
    /// Two-sided confidence of the interval, in (0, 1).
    pub confidence: f64,
    /// Bootstrap resamples (at least [`MIN_RESAMPLES`]).
    pub resamples: usize,
    /// The largest tolerated relative worsening (0.05 = 5 %).
    pub max_regression: f64,
    /// Higher values are better (quality scores); latency and error rates are lower-is-better.
    pub higher_is_better: bool,
    pub seed: u64,
    /// Fewer values than this in either sample is an input error, not a decision.
    pub min_samples: usize,
}

/// Fewer resamples make the interval's ends too noisy to decide on.
pub const MIN_RESAMPLES: usize = 100;

impl Default for CanaryConfig {
    fn default() -> Self {
        Self {
            statistic: Statistic::Quantile(0.95),
            confidence: 0.95,
            resamples: 2000,
            max_regression: 0.05,
            higher_is_better: false,
            seed: 0x00C0_FFEE,
            min_samples: 30,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Pass,
    Block,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Pass => "pass",
            Decision::Block => "block",
        }
    }
}

/// One side of the comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArmSummary {
    pub n: usize,
    /// The statistic on the whole sample.
    pub value: f64,
}

/// The gate's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct CanaryResult {
    pub statistic: Statistic,
    pub baseline: ArmSummary,
    pub candidate: ArmSummary,
    /// Relative change, positive = worse (see the module docs); ±∞ when the baseline statistic
    /// is 0 and the candidate's is not.
    pub relative_change: f64,
    /// Percentile-bootstrap interval of `relative_change` at `confidence`.
    pub ci_low: f64,
    pub ci_high: f64,
    pub confidence: f64,
    pub max_regression: f64,
    pub higher_is_better: bool,
    pub resamples: usize,
    pub decision: Decision,
    /// One sentence: why this decision.
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CanaryError {
    #[error("the {arm} has {got} values; the gate needs at least {min}")]
    TooFewSamples {
        arm: &'static str,
        got: usize,
        min: usize,
    },
    #[error("the {arm} has a non-finite value ({value}) at index {index}")]
    NonFinite {
        arm: &'static str,
        index: usize,
        value: f64,
    },
    #[error("parameter {name} is invalid: {reason}")]
    BadParam { name: &'static str, reason: String },
}

/// Formats a relative change as a signed percentage (`+27.3 %`, `-0.4 %`, `+inf %`).
pub fn format_percent(fraction: f64) -> String {
    if fraction.is_infinite() {
        return if fraction > 0.0 { "+inf %" } else { "-inf %" }.to_string();
    }
    format!("{:+.1} %", fraction * 100.0)
}

impl fmt::Display for CanaryResult {
    /// `BLOCK p95: baseline 812 (n=4210), candidate 1034 (n=4188), +27.3 % [95 % CI +22.1 %,
    /// +32.8 %]: <reason>` — callers that know the unit print their own line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: baseline {} (n={}), candidate {} (n={}), {} [{} CI {}, {}]: {}",
            self.decision.as_str().to_uppercase(),
            self.statistic.label(),
            format_value(self.baseline.value),
            self.baseline.n,
            format_value(self.candidate.value),
            self.candidate.n,
            format_percent(self.relative_change),
            format_confidence(self.confidence),
            format_percent(self.ci_low),
            format_percent(self.ci_high),
            self.reason
        )
    }
}

/// A fraction as an unsigned percentage without trailing zeros: `95 %`, `99.5 %`, `5 %`.
pub fn format_confidence(confidence: f64) -> String {
    let pct = (confidence * 100.0 * 1e6).round() / 1e6;
    format!("{pct} %")
}

/// A statistic with as many digits as its size needs.
pub fn format_value(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude >= 100.0 {
        format!("{value:.0}")
    } else if magnitude >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.4}")
    }
}

/// Compares `candidate` with `baseline`; see the module docs for the statistic, the interval and
/// the decision rule.
pub fn compare(
    baseline: &[f64],
    candidate: &[f64],
    config: &CanaryConfig,
) -> Result<CanaryResult, CanaryError> {
    validate_config(config)?;
    check_sample("baseline", baseline, config.min_samples)?;
    check_sample("candidate", candidate, config.min_samples)?;

    let sign = if config.higher_is_better { -1.0 } else { 1.0 };
    let relative = |b: f64, c: f64| relative_change(b, c, sign);

    let (baseline_value, candidate_value, mut changes) = match config.statistic {
        Statistic::Quantile(q) => {
            let b = sorted(baseline);
            let c = sorted(candidate);
            let point = (quantile_sorted(&b, q), quantile_sorted(&c, q));
            let changes = bootstrap(config, |rng| {
                relative(
                    resampled_quantile(&b, q, rng),
                    resampled_quantile(&c, q, rng),
                )
            });
            (point.0, point.1, changes)
        }
        Statistic::Mean => {
            // Sorted so the result does not depend on the order the rows arrived in.
            let b = sorted(baseline);
            let c = sorted(candidate);
            let point = (mean(&b), mean(&c));
            let changes = bootstrap(config, |rng| {
                relative(resampled_mean(&b, rng), resampled_mean(&c, rng))
            });
            (point.0, point.1, changes)
        }
    };
    changes.sort_by(|a, b| a.total_cmp(b));
    let alpha = 1.0 - config.confidence;
    let ci_low = quantile_sorted(&changes, alpha / 2.0);
    let ci_high = quantile_sorted(&changes, 1.0 - alpha / 2.0);
    let point = relative(baseline_value, candidate_value);
    let (decision, reason) = decide(point, ci_low, ci_high, config);
    Ok(CanaryResult {
        statistic: config.statistic,
        baseline: ArmSummary {
            n: baseline.len(),
            value: baseline_value,
        },
        candidate: ArmSummary {
            n: candidate.len(),
            value: candidate_value,
        },
        relative_change: point,
        ci_low,
        ci_high,
        confidence: config.confidence,
        max_regression: config.max_regression,
        higher_is_better: config.higher_is_better,
        resamples: config.resamples,
        decision,
        reason,
    })
}

fn decide(point: f64, ci_low: f64, ci_high: f64, config: &CanaryConfig) -> (Decision, String) {
    let max = format_confidence(config.max_regression);
    let confidence = format_confidence(config.confidence);
    if ci_low > 0.0 && point > config.max_regression {
        return (
            Decision::Block,
            format!(
                "the candidate is worse at {confidence} confidence and {} exceeds the max regression {max}",
                format_percent(point)
            ),
        );
    }
    let mut reason = if ci_low > 0.0 {
        format!(
            "the candidate is worse at {confidence} confidence, but {} is within the max regression {max}",
            format_percent(point)
        )
    } else if ci_high < 0.0 {
        format!("the candidate is better at {confidence} confidence")
    } else {
        format!("no significant change: the {confidence} interval includes 0")
    };
    if ci_high > config.max_regression {
        reason.push_str(&format!(
            "; the upper bound {} exceeds the max regression {max}: more samples would narrow it",
            format_percent(ci_high)
        ));
    }
    (Decision::Pass, reason)
}

/// `sign · (candidate − baseline) / |baseline|`; ±∞ (or 0) when the baseline is 0.
fn relative_change(baseline: f64, candidate: f64, sign: f64) -> f64 {
    let difference = sign * (candidate - baseline);
    if baseline == 0.0 {
        if difference == 0.0 {
            0.0
        } else {
            difference.signum() * f64::INFINITY
        }
    } else {
        difference / baseline.abs()
    }
}

fn validate_config(config: &CanaryConfig) -> Result<(), CanaryError> {
    let bad = |name: &'static str, reason: String| Err(CanaryError::BadParam { name, reason });
    if let Statistic::Quantile(q) = config.statistic
        && !(0.0..=1.0).contains(&q)
    {
        return bad("quantile", format!("{q} is outside 0..1"));
    }
    if !(config.confidence > 0.0 && config.confidence < 1.0) {
        return bad(
            "confidence",
            format!("{} is outside (0, 1)", config.confidence),
        );
    }
    if config.resamples < MIN_RESAMPLES {
        return bad(
            "resamples",
            format!("{} is below {MIN_RESAMPLES}", config.resamples),
        );
    }
    if !(config.max_regression.is_finite() && config.max_regression >= 0.0) {
        return bad(
            "max_regression",
            format!(
                "{} must be a finite fraction ≥ 0 (0.05 = 5 %)",
                config.max_regression
            ),
        );
    }
    if config.min_samples == 0 {
        return bad("min_samples", "must be at least 1".to_string());
    }
    Ok(())
}

fn check_sample(arm: &'static str, values: &[f64], min: usize) -> Result<(), CanaryError> {
    if let Some((index, value)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(CanaryError::NonFinite {
            arm,
            index,
            value: *value,
        });
    }
    if values.len() < min {
        return Err(CanaryError::TooFewSamples {
            arm,
            got: values.len(),
            min,
        });
    }
    Ok(())
}

fn sorted(values: &[f64]) -> Vec<f64> {
    let mut out = values.to_vec();
    out.sort_unstable_by(|a, b| a.total_cmp(b));
    out
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

/// The `q` quantile of an ascending, non-empty slice, interpolated linearly between the order
/// statistics around `(n − 1)·q` (Hyndman–Fan type 7, numpy's default).
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    debug_assert!(!sorted.is_empty());
    debug_assert!(sorted.windows(2).all(|w| w[0] <= w[1]));
    let (lower, fraction) = rank(sorted.len(), q);
    if fraction == 0.0 || lower + 1 >= sorted.len() {
        return sorted[lower];
    }
    interpolate(sorted[lower], sorted[lower + 1], fraction)
}

/// `low + fraction · (high − low)`, without the NaN of `∞ − ∞` (relative changes can be ±∞).
fn interpolate(low: f64, high: f64, fraction: f64) -> f64 {
    if low == high || low.is_infinite() {
        low
    } else if high.is_infinite() {
        high
    } else {
        low + fraction * (high - low)
    }
}

/// 0-based lower order statistic and interpolation weight of the `q` quantile of `n` values.
fn rank(n: usize, q: f64) -> (usize, f64) {
    let h = (n - 1) as f64 * q.clamp(0.0, 1.0);
    let lower = (h.floor() as usize).min(n - 1);
    (lower, h - lower as f64)
}

/// Runs `resample` `config.resamples` times, each with its own generator derived from the seed
/// and the resample's index, over the available cores. Deterministic whatever the thread count.
fn bootstrap<F>(config: &CanaryConfig, resample: F) -> Vec<f64>
where
    F: Fn(&mut SplitMix64) -> f64 + Sync,
{
    let total = config.resamples;
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 16)
        .min(total);
    let mut out = vec![0.0; total];
    let chunk = total.div_ceil(threads);
    let run = |start: usize, slots: &mut [f64]| {
        for (offset, slot) in slots.iter_mut().enumerate() {
            let mut rng = SplitMix64::for_stream(config.seed, (start + offset) as u64);
            *slot = resample(&mut rng);
        }
    };
    if threads == 1 {
        run(0, &mut out);
    } else {
        std::thread::scope(|scope| {
            for (index, slots) in out.chunks_mut(chunk).enumerate() {
                let run = &run;
                scope.spawn(move || run(index * chunk, slots));
            }
        });
    }
    out
}

/// The interpolated `q` quantile of one bootstrap resample of `sorted`, drawn through the order
/// statistics of uniforms (see the module docs) in O(1).
fn resampled_quantile(sorted: &[f64], q: f64, rng: &mut SplitMix64) -> f64 {
    let n = sorted.len();
    let (lower, fraction) = rank(n, q);
    // 1-based rank of the lower order statistic of the resample.
    let r = lower + 1;
    let u_lower = rng.beta(r as f64, (n - r + 1) as f64);
    let index = |u: f64| ((u * n as f64) as usize).min(n - 1);
    let low = sorted[index(u_lower)];
    if fraction == 0.0 || r >= n {
        return low;
    }
    // Given U(r), U(r+1) − U(r) is (1 − U(r)) times the minimum of n − r uniforms.
    let gap = 1.0 - rng.uniform_open().powf(1.0 / (n - r) as f64);
    let u_upper = u_lower + (1.0 - u_lower) * gap;
    let high = sorted[index(u_upper)];
    interpolate(low, high, fraction)
}

/// The mean of one bootstrap resample of `values` (n draws with replacement).
fn resampled_mean(values: &[f64], rng: &mut SplitMix64) -> f64 {
    let n = values.len();
    let mut sum = 0.0;
    for _ in 0..n {
        sum += values[rng.below(n)];
    }
    sum / n as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lognormal(rng: &mut SplitMix64, n: usize, median: f64, sigma: f64) -> Vec<f64> {
        (0..n)
            .map(|_| median * (sigma * rng.normal()).exp())
            .collect()
    }

    #[test]
    fn quantiles_interpolate_like_numpy() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile_sorted(&v, 0.0), 1.0);
        assert_eq!(quantile_sorted(&v, 1.0), 4.0);
        assert!((quantile_sorted(&v, 0.5) - 2.5).abs() < 1e-12);
        assert!((quantile_sorted(&v, 0.95) - 3.85).abs() < 1e-12);
        assert_eq!(quantile_sorted(&[7.0], 0.3), 7.0);
    }

    /// The O(1) order-statistic resampling must have the distribution of an ordinary resample's
    /// quantile: compare the mean and spread of both over many draws.
    #[test]
    fn order_statistic_resampling_matches_ordinary_resampling() {
        let mut data_rng = SplitMix64::new(3);
        for (n, q) in [(40, 0.95), (200, 0.5), (400, 0.99), (57, 0.0), (57, 1.0)] {
            let sample = sorted(&lognormal(&mut data_rng, n, 100.0, 0.6));
            let draws = 20_000;
            let mut fast = Vec::with_capacity(draws);
            let mut slow = Vec::with_capacity(draws);
            let mut rng = SplitMix64::new(11);
            let mut buffer = vec![0.0; n];
            for _ in 0..draws {
                fast.push(resampled_quantile(&sample, q, &mut rng));
                for slot in buffer.iter_mut() {
                    *slot = sample[rng.below(n)];
                }
                buffer.sort_by(|a, b| a.total_cmp(b));
                slow.push(quantile_sorted(&buffer, q));
            }
            let moments = |v: &[f64]| {
                let m = mean(v);
                let sd = (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
                (m, sd)
            };
            let (fast_mean, fast_sd) = moments(&fast);
            let (slow_mean, slow_sd) = moments(&slow);
            let scale = slow_sd.max(1e-9);
            assert!(
                (fast_mean - slow_mean).abs() < 0.05 * scale + 1e-9,
                "n={n} q={q}: mean {fast_mean} vs {slow_mean} (sd {slow_sd})"
            );
            assert!(
                (fast_sd - slow_sd).abs() < 0.05 * scale + 1e-9,
                "n={n} q={q}: sd {fast_sd} vs {slow_sd}"
            );
            fast.sort_by(|a, b| a.total_cmp(b));
            slow.sort_by(|a, b| a.total_cmp(b));
            for p in [0.025, 0.5, 0.975] {
                let (f, s) = (quantile_sorted(&fast, p), quantile_sorted(&slow, p));
                assert!(
                    (f - s).abs() < 0.1 * scale + 1e-9,
                    "n={n} q={q} p={p}: {f} vs {s}"
                );
            }
        }
    }

    #[test]
    fn beta_draws_have_the_right_mean() {
        let mut rng = SplitMix64::new(5);
        for (a, b) in [(1.0, 1.0), (2.0, 5.0), (950.0, 51.0), (47_500.0, 2_501.0)] {
            let draws = 20_000;
            let m = (0..draws).map(|_| rng.beta(a, b)).sum::<f64>() / draws as f64;
            let expected = a / (a + b);
            let sd = (a * b / ((a + b).powi(2) * (a + b + 1.0))).sqrt();
            assert!(
                (m - expected).abs() < 5.0 * sd / (draws as f64).sqrt() + 1e-12,
                "Beta({a},{b}): {m} vs {expected}"
            );
        }
    }

    #[test]
    fn results_do_not_depend_on_the_thread_count() {
        let mut rng = SplitMix64::new(9);
        let b = lognormal(&mut rng, 500, 100.0, 0.5);
        let c = lognormal(&mut rng, 500, 100.0, 0.5);
        let config = CanaryConfig {
            statistic: Statistic::Mean,
            resamples: 333,
            ..CanaryConfig::default()
        };
        let first = compare(&b, &c, &config).unwrap();
        // The order the values arrive in does not matter.
        let reversed: Vec<f64> = c.iter().rev().copied().collect();
        assert_eq!(first, compare(&b, &reversed, &config).unwrap());
        // A serial run of the same streams gives the same interval.
        let (b, c) = (sorted(&b), sorted(&c));
        let mut serial: Vec<f64> = (0..config.resamples)
            .map(|i| {
                let mut rng = SplitMix64::for_stream(config.seed, i as u64);
                relative_change(
                    resampled_mean(&b, &mut rng),
                    resampled_mean(&c, &mut rng),
                    1.0,
                )
            })
            .collect();
        serial.sort_by(|a, b| a.total_cmp(b));
        let alpha = 1.0 - config.confidence;
        assert_eq!(first.ci_low, quantile_sorted(&serial, alpha / 2.0));
        assert_eq!(first.ci_high, quantile_sorted(&serial, 1.0 - alpha / 2.0));
    }

    #[test]
    fn relative_change_signs_and_zero_baselines() {
        assert!((relative_change(100.0, 120.0, 1.0) - 0.2).abs() < 1e-12);
        assert!((relative_change(100.0, 120.0, -1.0) + 0.2).abs() < 1e-12);
        assert_eq!(relative_change(0.0, 0.0, 1.0), 0.0);
        assert_eq!(relative_change(0.0, 0.01, 1.0), f64::INFINITY);
        assert_eq!(relative_change(0.0, 0.01, -1.0), f64::NEG_INFINITY);
        // a negative baseline: moving up is still "up" relative to its magnitude
        assert!((relative_change(-2.0, -1.0, 1.0) - 0.5).abs() < 1e-12);
    }
}
