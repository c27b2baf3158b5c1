//! Time-to-exhaustion projections: a resource series that rises toward a limit (GPU memory
//! toward the device's capacity, KV-cache usage toward a full pool, a request's expected queue
//! wait toward the gateway timeout) and when it will reach it, with an interval. IO-free: the
//! watcher (`infersight-rca`'s `watch::predict`) reads the samples and decides what to warn
//! about; this module only fits and projects.
//!
//! Method, for samples `(t, y)` (sorted by time) and a limit `L`:
//! 1. Where the trend starts: a hinge model (flat at the median before `τ`, a Theil–Sen line
//!    after it) over at most [`ExhaustionParams::max_candidates`] candidate `τ`, the one with
//!    the least absolute error wins (ties: the longer line). A series that was flat and began to
//!    rise a few minutes ago is fitted on the rise only, so the flat part does not dilute the
//!    slope; a series that rises all along keeps its whole window.
//! 2. The line after `τ`: Theil–Sen slope `b` (Sen 1968, Theil 1950) with its distribution-free
//!    confidence interval `[b_lo, b_hi]` (the order statistics of the pairwise slopes at
//!    `(N ∓ z·√Var S)/2`, Kendall's S variance), intercept the median of `y − b·t`; a
//!    Mann–Kendall test (one-sided p < `alpha`) says the rise is a trend and not noise.
//! 3. The level now: the line at `now`, ± `z·1.4826·MAD(residuals)/√m` (`m` points on the line).
//! 4. ETA = (L − level) / b; the interval takes the steepest slope with the highest level
//!    (earliest) and the flattest slope with the lowest level (latest). When `b_lo ≤ 0` the
//!    latest end is unbounded: the data cannot rule out that the rise stops.
//!
//! A caller that wants confidence asks for the latest end inside its horizon.

use super::stats::{MAD_TO_SIGMA, mad, mann_kendall, median, normal_quantile};
use super::{DetectError, bad_param, check_sorted};

/// How projections are fitted.
#[derive(Debug, Clone, PartialEq)]
pub struct ExhaustionParams {
    /// Two-sided confidence of the slope and level intervals (0.99: a warning pages a person, and
    /// a fleet has many series).
    pub confidence: f64,
    /// One-sided Mann–Kendall p-value the rise needs (0.01).
    pub alpha: f64,
    /// Fewest samples on the fitted line (6).
    pub min_points: usize,
    /// Longer series keep their latest this many samples (90).
    pub max_points: usize,
    /// Candidate trend starts tried (12).
    pub max_candidates: usize,
}

impl Default for ExhaustionParams {
    fn default() -> Self {
        ExhaustionParams {
            confidence: 0.99,
            alpha: 0.01,
            min_points: 6,
            max_points: 90,
            max_candidates: 12,
        }
    }
}

/// A rising series projected to its limit; times in ns, slopes per second.
#[derive(Debug, Clone, PartialEq)]
pub struct Projection {
    /// The fitted level at `now`.
    pub level: f64,
    pub limit: f64,
    pub slope_per_s: f64,
    pub slope_low_per_s: f64,
    pub slope_high_per_s: f64,
    /// Seconds from `now` to the limit: point estimate and interval (`eta_high_s`: `None` when
    /// the interval is unbounded, the slope's lower end not above zero).
    pub eta_s: f64,
    pub eta_low_s: f64,
    pub eta_high_s: Option<f64>,
    /// First sample of the fitted line (the trend's start).
    pub fit_from_ns: i64,
    pub points: usize,
    /// One-sided Mann–Kendall p-value of the rise.
    pub p_value: f64,
}

impl Projection {
    /// True when the limit is reached within `horizon_s` even at the interval's latest end.
    pub fn confident_within(&self, horizon_s: f64) -> bool {
        self.eta_high_s.is_some_and(|late| late <= horizon_s)
    }
}

/// The projection of `points` to `limit` as seen at `now_ns`; `None` when the series does not
/// rise (no significant trend, or a slope not above zero) or holds too few samples.
pub fn project_exhaustion(
    points: &[(i64, f64)],
    limit: f64,
    now_ns: i64,
    params: &ExhaustionParams,
) -> Result<Option<Projection>, DetectError> {
    check_params(params)?;
    if !limit.is_finite() {
        return Err(bad_param("limit", format!("{limit} is not finite")));
    }
    check_sorted("exhaustion", points.iter().map(|p| p.0))?;
    let finite: Vec<(i64, f64)> = points.iter().copied().filter(|p| p.1.is_finite()).collect();
    let recent = &finite[finite.len().saturating_sub(params.max_points)..];
    if recent.len() < params.min_points {
        return Ok(None);
    }
    let origin = recent[0].0;
    let xy: Vec<(f64, f64)> = recent
        .iter()
        .map(|&(t, y)| ((t - origin) as f64 / 1e9, y))
        .collect();
    let start = trend_start(&xy, params);
    let line = &xy[start..];
    let Some(trend) = mann_kendall(&line.iter().map(|p| p.1).collect::<Vec<_>>()) else {
        return Ok(None);
    };
    let Some(fit) = sen_fit(line, params.confidence) else {
        return Ok(None);
    };
    if trend.p_increasing >= params.alpha || fit.slope <= 0.0 {
        return Ok(None);
    }
    let z = normal_quantile(0.5 + params.confidence / 2.0);
    let now_x = (now_ns - origin) as f64 / 1e9;
    let level = fit.intercept + fit.slope * now_x;
    let residuals: Vec<f64> = line
        .iter()
        .map(|&(x, y)| y - (fit.intercept + fit.slope * x))
        .collect();
    let spread = mad(&residuals).unwrap_or(0.0) * MAD_TO_SIGMA;
    let level_band = z * spread / (line.len() as f64).sqrt();
    let room = limit - level;
    let eta_s = (room / fit.slope).max(0.0);
    let eta_low_s = ((room - level_band) / fit.high.max(fit.slope)).max(0.0);
    let eta_high_s = (fit.low > 0.0).then(|| ((room + level_band) / fit.low).max(0.0));
    Ok(Some(Projection {
        level,
        limit,
        slope_per_s: fit.slope,
        slope_low_per_s: fit.low,
        slope_high_per_s: fit.high,
        eta_s,
        eta_low_s,
        eta_high_s,
        fit_from_ns: recent[start].0,
        points: line.len(),
        p_value: trend.p_increasing,
    }))
}

fn check_params(p: &ExhaustionParams) -> Result<(), DetectError> {
    if !(p.confidence > 0.5 && p.confidence < 1.0) {
        return Err(bad_param("confidence", "must be in (0.5, 1)"));
    }
    if !(p.alpha > 0.0 && p.alpha < 0.5) {
        return Err(bad_param("alpha", "must be in (0, 0.5)"));
    }
    if p.min_points < 4 || p.max_points < p.min_points || p.max_candidates == 0 {
        return Err(bad_param(
            "min_points",
            "need 4 <= min_points <= max_points and max_candidates >= 1",
        ));
    }
    Ok(())
}

/// The index where the rise starts: the hinge with the least absolute error.
fn trend_start(xy: &[(f64, f64)], params: &ExhaustionParams) -> usize {
    let last = xy.len() - params.min_points;
    let stride = (last / params.max_candidates).max(1);
    let mut best: Option<(f64, usize)> = None;
    for k in (0..=last).step_by(stride) {
        let Some(cost) = hinge_cost(xy, k) else {
            continue;
        };
        // strictly better only: ties keep the longer line (the earlier start)
        if best.is_none_or(|(c, _)| cost < c * (1.0 - 1e-9)) {
            best = Some((cost, k));
        }
    }
    best.map_or(0, |(_, k)| k)
}

/// Absolute error of "flat at the median before `k`, Theil–Sen line from `k`".
fn hinge_cost(xy: &[(f64, f64)], k: usize) -> Option<f64> {
    let (flat, line) = xy.split_at(k);
    let flat_cost = match median(&flat.iter().map(|p| p.1).collect::<Vec<_>>()) {
        Some(m) => flat.iter().map(|p| (p.1 - m).abs()).sum(),
        None => 0.0,
    };
    let slope = super::stats::theil_sen_slope(line)?;
    let intercept = median(&line.iter().map(|p| p.1 - slope * p.0).collect::<Vec<_>>())?;
    let line_cost: f64 = line
        .iter()
        .map(|p| (p.1 - intercept - slope * p.0).abs())
        .sum();
    Some(flat_cost + line_cost)
}

struct SenFit {
    slope: f64,
    low: f64,
    high: f64,
    intercept: f64,
}

/// Theil–Sen slope with Sen's confidence interval (ties ignored in Var S: a wider interval).
fn sen_fit(line: &[(f64, f64)], confidence: f64) -> Option<SenFit> {
    let mut slopes = Vec::with_capacity(line.len() * line.len().saturating_sub(1) / 2);
    for (i, a) in line.iter().enumerate() {
        for b in &line[i + 1..] {
            let dx = b.0 - a.0;
            if dx > 0.0 {
                slopes.push((b.1 - a.1) / dx);
            }
        }
    }
    if slopes.len() < 3 {
        return None;
    }
    slopes.sort_by(f64::total_cmp);
    let slope = median(&slopes)?;
    let n = line.len() as f64;
    let pairs = slopes.len() as f64;
    let c =
        normal_quantile(0.5 + confidence / 2.0) * (n * (n - 1.0) * (2.0 * n + 5.0) / 18.0).sqrt();
    let rank = |r: f64| -> usize { (r.clamp(1.0, pairs) as usize).saturating_sub(1) };
    let low = slopes[rank(((pairs - c) / 2.0).floor())];
    let high = slopes[rank(((pairs + c) / 2.0).ceil() + 1.0)];
    let intercept = median(&line.iter().map(|p| p.1 - slope * p.0).collect::<Vec<_>>())?;
    Some(SenFit {
        slope,
        low,
        high,
        intercept,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use infersight_model::rng::SplitMix64;

    const S: i64 = 1_000_000_000;

    /// Samples every 10 s for `minutes`: flat at `base` until `rise_from_s`, then rising by
    /// `slope` per second, with Gaussian noise of σ `noise`.
    fn series(
        seed: u64,
        minutes: i64,
        base: f64,
        rise_from_s: i64,
        slope: f64,
        noise: f64,
    ) -> Vec<(i64, f64)> {
        let mut rng = SplitMix64::new(seed);
        (0..minutes * 6)
            .map(|i| {
                let t = i * 10;
                let rise = (t - rise_from_s).max(0) as f64 * slope;
                (t * S, base + rise + noise * rng.normal())
            })
            .collect()
    }

    #[test]
    fn a_leak_s_eta_interval_holds_the_truth_across_seeds() {
        // 0.5 of capacity, flat for 4 minutes, then +0.015 a minute; 12 minutes seen: the truth
        // is when the noiseless line reaches 1.0
        let slope = 0.015 / 60.0;
        let now = 12 * 60 * S;
        let truth_s = (0.5 / slope + 240.0) - 720.0;
        let mut covered = 0;
        let seeds = 40;
        for seed in 0..seeds {
            let points = series(seed, 12, 0.5, 240, slope, 0.004);
            let p = project_exhaustion(&points, 1.0, now, &ExhaustionParams::default())
                .unwrap()
                .expect("a leak rises");
            assert!(
                (p.fit_from_ns - 240 * S).abs() <= 90 * S,
                "seed {seed}: trend start {} s",
                p.fit_from_ns / S
            );
            let high = p.eta_high_s.expect("the interval is bounded");
            assert!(p.eta_low_s <= p.eta_s && p.eta_s <= high);
            assert!(
                (p.eta_s - truth_s).abs() < 0.25 * truth_s,
                "seed {seed}: eta {} vs {truth_s}",
                p.eta_s
            );
            if (p.eta_low_s..=high).contains(&truth_s) {
                covered += 1;
            }
        }
        // a 99 % interval: at least 37 of 40 (binomial tail below 1 % for a true 99 %)
        assert!(covered >= 37, "covered {covered} of {seeds}");
    }

    #[test]
    fn a_flat_noisy_series_projects_nothing_or_no_confident_eta() {
        let mut confident = 0;
        for seed in 0..200 {
            let points = series(seed, 15, 0.6, 0, 0.0, 0.03);
            let p = project_exhaustion(&points, 1.0, 15 * 60 * S, &ExhaustionParams::default())
                .unwrap();
            if p.is_some_and(|p| p.confident_within(1800.0)) {
                confident += 1;
            }
        }
        assert!(confident <= 2, "{confident} of 200 flat series warned");
    }

    #[test]
    fn a_falling_series_and_short_input_project_nothing() {
        let falling = series(1, 10, 0.9, 0, -0.01 / 60.0, 0.002);
        let p = ExhaustionParams::default();
        assert_eq!(
            project_exhaustion(&falling, 1.0, 600 * S, &p).unwrap(),
            None
        );
        assert_eq!(
            project_exhaustion(&falling[..3], 1.0, 600 * S, &p).unwrap(),
            None
        );
        let unsorted = [(2 * S, 1.0), (S, 1.0)];
        assert!(project_exhaustion(&unsorted, 1.0, 0, &p).is_err());
        assert!(project_exhaustion(&falling, f64::NAN, 0, &p).is_err());
    }
}
