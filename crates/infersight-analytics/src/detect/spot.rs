//! SPOT thresholds (Siffer et al., KDD 2017): peaks over an initial threshold, a generalized
//! Pareto fit of the excesses, and the extreme quantile z_q at a small risk q.
//!
//! The GPD fit takes the highest-likelihood candidate among Grimshaw's maximum-likelihood roots
//! (Grimshaw 1993: with θ = γ/σ, the likelihood equations reduce to one equation in θ,
//! u(θ)·v(θ) = 1 with u = mean(1/(1+θY)), v = 1 + mean(ln(1+θY)); roots are bracketed on a
//! log-spaced grid on both sides of 0 and refined by bisection), the probability-weighted-moment
//! estimate (Hosking & Wallis 1987) and the exponential fit (γ = 0, σ = mean excess).

use super::stats::{is_positive, mean, quantile_sorted};
use super::{DetectError, bad_param};

/// A generalized Pareto distribution fitted to excesses: shape γ (ξ), scale σ.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpdFit {
    pub shape: f64,
    pub scale: f64,
    pub log_likelihood: f64,
    pub method: GpdMethod,
}

/// Which estimator produced the chosen fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpdMethod {
    Grimshaw,
    ProbabilityWeightedMoments,
    Exponential,
}

/// The SPOT threshold of a sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpotThreshold {
    /// t: the `init_quantile` quantile of the sample.
    pub initial_threshold: f64,
    /// z_q: exceeded with probability about `risk_q`.
    pub threshold: f64,
    pub fit: GpdFit,
    /// N_t: number of values strictly above t.
    pub peaks: usize,
    /// n: sample size.
    pub observations: usize,
}

/// GPD log-likelihood of excesses `y` (all > 0); `None` outside the support.
fn gpd_log_likelihood(y: &[f64], shape: f64, scale: f64) -> Option<f64> {
    if !is_positive(scale) || !shape.is_finite() {
        return None;
    }
    let n = y.len() as f64;
    if shape.abs() < 1e-12 {
        return Some(-n * scale.ln() - y.iter().sum::<f64>() / scale);
    }
    let mut sum = 0.0;
    for &value in y {
        let arg = 1.0 + shape * value / scale;
        if !is_positive(arg) {
            return None;
        }
        sum += arg.ln();
    }
    let ll = -n * scale.ln() - (1.0 + 1.0 / shape) * sum;
    ll.is_finite().then_some(ll)
}

/// w(θ) = u(θ)·v(θ) − 1 of Grimshaw's reduction, with (γ, σ) at θ.
fn grimshaw_w(y: &[f64], theta: f64) -> Option<(f64, f64, f64)> {
    let n = y.len() as f64;
    let (mut u, mut v) = (0.0, 0.0);
    for &value in y {
        let s = 1.0 + theta * value;
        if !is_positive(s) {
            return None;
        }
        u += 1.0 / s;
        v += s.ln();
    }
    u /= n;
    v = 1.0 + v / n;
    let shape = v - 1.0;
    Some((u * v - 1.0, shape, shape / theta))
}

fn grimshaw_roots(y: &[f64]) -> Vec<(f64, f64)> {
    let y_max = y.iter().copied().fold(f64::MIN, f64::max);
    let y_min = y.iter().copied().fold(f64::MAX, f64::min);
    let y_mean = mean(y).unwrap_or(0.0);
    let mut roots = Vec::new();
    if !is_positive(y_max) || !is_positive(y_mean) {
        return roots;
    }
    const GRID: usize = 200;
    let tiny = 1e-8 / y_max;
    let mut intervals: Vec<(f64, f64, f64)> = Vec::new(); // (sign, low |θ|, high |θ|)
    intervals.push((-1.0, tiny, (1.0 / y_max) * (1.0 - 1e-9)));
    let upper = if y_min > 0.0 {
        (2.0 * (y_mean - y_min) / (y_min * y_min)).min(1e6 / y_mean)
    } else {
        1e6 / y_mean
    };
    if upper > tiny {
        intervals.push((1.0, tiny, upper));
    }
    for (sign, low, high) in intervals {
        let ratio = (high / low).ln();
        let mut previous: Option<(f64, f64)> = None;
        for k in 0..=GRID {
            let theta = sign * low * (ratio * k as f64 / GRID as f64).exp();
            let Some((w, _, _)) = grimshaw_w(y, theta) else {
                previous = None;
                continue;
            };
            if let Some((theta_prev, w_prev)) = previous
                && w_prev.signum() != w.signum()
            {
                let (mut a, mut b, mut wa) = (theta_prev, theta, w_prev);
                for _ in 0..80 {
                    let middle = 0.5 * (a + b);
                    let Some((wm, _, _)) = grimshaw_w(y, middle) else {
                        break;
                    };
                    if wm.signum() == wa.signum() {
                        a = middle;
                        wa = wm;
                    } else {
                        b = middle;
                    }
                }
                if let Some((_, shape, scale)) = grimshaw_w(y, 0.5 * (a + b))
                    && scale > 0.0
                {
                    roots.push((shape, scale));
                }
            }
            previous = Some((theta, w));
        }
    }
    roots
}

/// Hosking–Wallis PWM estimate (shape γ, scale σ).
fn pwm_fit(y: &[f64]) -> Option<(f64, f64)> {
    let mut sorted = y.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len() as f64;
    let a0 = mean(&sorted)?;
    let a1 = sorted
        .iter()
        .enumerate()
        .map(|(i, value)| (1.0 - (i as f64 + 1.0 - 0.35) / n) * value)
        .sum::<f64>()
        / n;
    let denominator = a0 - 2.0 * a1;
    if !is_positive(denominator) {
        return None;
    }
    let scale = 2.0 * a0 * a1 / denominator;
    let shape = 2.0 - a0 / denominator;
    (scale > 0.0 && shape.is_finite()).then_some((shape, scale))
}

/// Fits a GPD to excesses over a threshold (values > 0; others are ignored). `None` with fewer
/// than three positive finite excesses.
pub fn fit_gpd(excesses: &[f64]) -> Option<GpdFit> {
    let y: Vec<f64> = excesses
        .iter()
        .copied()
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    if y.len() < 3 {
        return None;
    }
    let mut candidates: Vec<(f64, f64, GpdMethod)> = grimshaw_roots(&y)
        .into_iter()
        .map(|(shape, scale)| (shape, scale, GpdMethod::Grimshaw))
        .collect();
    if let Some((shape, scale)) = pwm_fit(&y) {
        candidates.push((shape, scale, GpdMethod::ProbabilityWeightedMoments));
    }
    candidates.push((0.0, mean(&y)?, GpdMethod::Exponential));
    candidates
        .into_iter()
        .filter_map(|(shape, scale, method)| {
            gpd_log_likelihood(&y, shape, scale).map(|log_likelihood| GpdFit {
                shape,
                scale,
                log_likelihood,
                method,
            })
        })
        .max_by(|a, b| a.log_likelihood.total_cmp(&b.log_likelihood))
}

/// The SPOT quantile z_q of `sample` for risk `risk_q`, with the initial threshold at the
/// `init_quantile` quantile. When the fitted shape is negative (bounded tail) the quantile is
/// taken from the exponential tail (γ = 0, σ = mean excess) instead, which is conservative. `Ok(None)` when fewer than `min_peaks` values exceed it (the caller
/// falls back to another threshold) or the fit fails. Non-finite values are ignored.
pub fn spot_threshold(
    sample: &[f64],
    risk_q: f64,
    init_quantile: f64,
    min_peaks: usize,
) -> Result<Option<SpotThreshold>, DetectError> {
    if !(init_quantile > 0.0 && init_quantile < 1.0) {
        return Err(bad_param("spot_init_quantile", "must lie in (0, 1)"));
    }
    if !(risk_q > 0.0 && risk_q < 1.0 - init_quantile) {
        return Err(bad_param(
            "risk_q",
            format!(
                "must lie in (0, 1 - init_quantile = {})",
                1.0 - init_quantile
            ),
        ));
    }
    let mut sorted: Vec<f64> = sample.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return Ok(None);
    }
    sorted.sort_by(f64::total_cmp);
    let t = quantile_sorted(&sorted, init_quantile);
    let excesses: Vec<f64> = sorted.iter().filter(|v| **v > t).map(|v| v - t).collect();
    if excesses.len() < min_peaks.max(3) {
        return Ok(None);
    }
    let Some(fit) = fit_gpd(&excesses) else {
        return Ok(None);
    };
    let ratio = risk_q * sorted.len() as f64 / excesses.len() as f64;
    // A negative shape means a bounded tail; fitted on a light (e.g. Gaussian) tail it puts the
    // endpoint too close and the threshold too low. Extrapolate with the exponential tail then.
    let threshold = if fit.shape < 1e-12 {
        t - mean(&excesses).unwrap_or(fit.scale) * ratio.ln()
    } else {
        t + fit.scale / fit.shape * (ratio.powf(-fit.shape) - 1.0)
    };
    if !threshold.is_finite() {
        return Ok(None);
    }
    Ok(Some(SpotThreshold {
        initial_threshold: t,
        threshold,
        fit,
        peaks: excesses.len(),
        observations: sorted.len(),
    }))
}
