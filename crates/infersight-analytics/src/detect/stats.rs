//! Small robust statistics the detectors share: median/MAD, quantiles, Theil–Sen slope,
//! Mann–Kendall trend test, Spearman/Pearson correlation, normal and Poisson tails.
//! All functions ignore nothing: callers drop non-finite values first.

/// Consistency constant: 1.4826·MAD estimates σ for Gaussian data.
pub const MAD_TO_SIGMA: f64 = 1.4826;

/// `x > 0`, false for NaN (reads better than a negated comparison).
pub fn is_positive(x: f64) -> bool {
    x > 0.0
}

/// Median of finite values; `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    quantile(values, 0.5)
}

/// Empirical quantile with linear interpolation (type 7); `None` when empty.
pub fn quantile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() || !(0.0..=1.0).contains(&p) {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    Some(quantile_sorted(&sorted, p))
}

/// Type-7 quantile of an already sorted, non-empty slice.
pub fn quantile_sorted(sorted: &[f64], p: f64) -> f64 {
    debug_assert!(!sorted.is_empty());
    let position = p.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let low = position.floor() as usize;
    let high = position.ceil() as usize;
    let fraction = position - low as f64;
    sorted[low] + (sorted[high] - sorted[low]) * fraction
}

/// Median absolute deviation around the median (unscaled); `None` when empty.
pub fn mad(values: &[f64]) -> Option<f64> {
    let center = median(values)?;
    let deviations: Vec<f64> = values.iter().map(|v| (v - center).abs()).collect();
    median(&deviations)
}

/// Mean; `None` when empty.
pub fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// Sample standard deviation (n − 1); `None` with fewer than two values.
pub fn std_dev(values: &[f64]) -> Option<f64> {
    if values.len() < 2 {
        return None;
    }
    let m = mean(values)?;
    let ss: f64 = values.iter().map(|v| (v - m) * (v - m)).sum();
    Some((ss / (values.len() - 1) as f64).sqrt())
}

/// Reduces `points` to at most `max_points` by averaging contiguous chunks (time and value),
/// so the O(n²) statistics below stay cheap on long series.
pub fn downsample(points: &[(f64, f64)], max_points: usize) -> Vec<(f64, f64)> {
    if points.len() <= max_points || max_points == 0 {
        return points.to_vec();
    }
    let chunk = points.len().div_ceil(max_points);
    points
        .chunks(chunk)
        .map(|c| {
            let n = c.len() as f64;
            (
                c.iter().map(|p| p.0).sum::<f64>() / n,
                c.iter().map(|p| p.1).sum::<f64>() / n,
            )
        })
        .collect()
}

/// Theil–Sen slope: the median of pairwise slopes (x must be distinct where pairs count).
/// `None` with fewer than two distinct x.
pub fn theil_sen_slope(points: &[(f64, f64)]) -> Option<f64> {
    let mut slopes = Vec::with_capacity(points.len() * points.len().saturating_sub(1) / 2);
    for (i, a) in points.iter().enumerate() {
        for b in &points[i + 1..] {
            let dx = b.0 - a.0;
            if dx != 0.0 {
                slopes.push((b.1 - a.1) / dx);
            }
        }
    }
    median(&slopes)
}

/// Mann–Kendall trend test on values in time order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MannKendall {
    /// S = Σ sign(x_j − x_i), i < j.
    pub s: f64,
    /// Normal approximation with continuity correction and tie-corrected variance.
    pub z: f64,
    /// One-sided p-value for an increasing trend.
    pub p_increasing: f64,
    /// One-sided p-value for a decreasing trend.
    pub p_decreasing: f64,
}

/// Mann–Kendall test; `None` with fewer than three values or all values tied.
pub fn mann_kendall(values: &[f64]) -> Option<MannKendall> {
    let n = values.len();
    if n < 3 {
        return None;
    }
    let mut s = 0.0;
    for (i, a) in values.iter().enumerate() {
        for b in &values[i + 1..] {
            s += match b.total_cmp(a) {
                std::cmp::Ordering::Greater => 1.0,
                std::cmp::Ordering::Less => -1.0,
                std::cmp::Ordering::Equal => 0.0,
            };
        }
    }
    let nf = n as f64;
    let mut variance = nf * (nf - 1.0) * (2.0 * nf + 5.0);
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mut start = 0;
    while start < n {
        let mut end = start + 1;
        while end < n && sorted[end] == sorted[start] {
            end += 1;
        }
        let t = (end - start) as f64;
        variance -= t * (t - 1.0) * (2.0 * t + 5.0);
        start = end;
    }
    variance /= 18.0;
    if variance <= 0.0 {
        return None;
    }
    let z = if s > 0.0 {
        (s - 1.0) / variance.sqrt()
    } else if s < 0.0 {
        (s + 1.0) / variance.sqrt()
    } else {
        0.0
    };
    Some(MannKendall {
        s,
        z,
        p_increasing: normal_sf(z),
        p_decreasing: normal_sf(-z),
    })
}

/// Ranks (1-based) with ties averaged.
pub fn ranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let mut result = vec![0.0; values.len()];
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && values[order[end]] == values[order[start]] {
            end += 1;
        }
        let rank = (start + end + 1) as f64 / 2.0;
        for &index in &order[start..end] {
            result[index] = rank;
        }
        start = end;
    }
    result
}

/// Pearson correlation; `None` when lengths differ, fewer than three pairs or a constant side.
pub fn pearson(xs: &[f64], ys: &[f64]) -> Option<f64> {
    if xs.len() != ys.len() || xs.len() < 3 {
        return None;
    }
    let mx = mean(xs)?;
    let my = mean(ys)?;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (x, y) in xs.iter().zip(ys) {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx) * (x - mx);
        syy += (y - my) * (y - my);
    }
    (sxx > 0.0 && syy > 0.0).then(|| (sxy / (sxx * syy).sqrt()).clamp(-1.0, 1.0))
}

/// Spearman rank correlation; `None` as for [`pearson`].
pub fn spearman(xs: &[f64], ys: &[f64]) -> Option<f64> {
    if xs.len() != ys.len() {
        return None;
    }
    pearson(&ranks(xs), &ranks(ys))
}

/// Pairs the values of two time series whose timestamps fall in the same `step_ns` bucket
/// (first value of each bucket), in time order. Non-finite values are skipped.
pub fn align(a: &[(i64, f64)], b: &[(i64, f64)], step_ns: i64) -> (Vec<f64>, Vec<f64>) {
    use std::collections::BTreeMap;
    let step = step_ns.max(1);
    let mut left: BTreeMap<i64, f64> = BTreeMap::new();
    for &(t, v) in a {
        if v.is_finite() {
            left.entry(t.div_euclid(step)).or_insert(v);
        }
    }
    let mut right: BTreeMap<i64, f64> = BTreeMap::new();
    for &(t, v) in b {
        if v.is_finite() {
            right.entry(t.div_euclid(step)).or_insert(v);
        }
    }
    let mut xs = Vec::new();
    let mut ys = Vec::new();
    for (bucket, x) in &left {
        if let Some(y) = right.get(bucket) {
            xs.push(*x);
            ys.push(*y);
        }
    }
    (xs, ys)
}

/// Complementary error function (Numerical Recipes `erfcc`, fractional error < 1.2e-7).
pub fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let ans = t * poly.exp();
    if x >= 0.0 { ans } else { 2.0 - ans }
}

/// P(Z > z) for a standard normal Z.
pub fn normal_sf(z: f64) -> f64 {
    if z.is_nan() {
        return f64::NAN;
    }
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// The standard normal quantile (Acklam's rational approximation, |error| < 1.2e-9).
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let p = p.clamp(1e-12, 1.0 - 1e-12);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, n = 9; ~15 digits).
pub fn ln_gamma(x: f64) -> f64 {
    const COEFFICIENTS: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = COEFFICIENTS[0];
    let t = x + 7.5;
    for (i, c) in COEFFICIENTS.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// Regularized lower incomplete gamma P(a, x) (series / continued fraction, Numerical Recipes).
pub fn gamma_p(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if a <= 0.0 {
        return 1.0;
    }
    let gln = ln_gamma(a);
    if x < a + 1.0 {
        let mut ap = a;
        let mut sum = 1.0 / a;
        let mut del = sum;
        for _ in 0..10_000 {
            ap += 1.0;
            del *= x / ap;
            sum += del;
            if del.abs() < sum.abs() * 1e-15 {
                break;
            }
        }
        (sum.ln() - x + a * x.ln() - gln).exp().clamp(0.0, 1.0)
    } else {
        1.0 - gamma_q_continued_fraction(a, x, gln)
    }
}

fn gamma_q_continued_fraction(a: f64, x: f64, gln: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let mut b = x + 1.0 - a;
    let mut c = 1.0 / TINY;
    let mut d = 1.0 / b;
    let mut h = d;
    for i in 1..10_000 {
        let an = -(i as f64) * (i as f64 - a);
        b += 2.0;
        d = an * d + b;
        if d.abs() < TINY {
            d = TINY;
        }
        c = b + an / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let delta = d * c;
        h *= delta;
        if (delta - 1.0).abs() < 1e-15 {
            break;
        }
    }
    ((-x + a * x.ln() - gln).exp() * h).clamp(0.0, 1.0)
}

/// P(X ≥ k) for X ~ Poisson(λ). Equals the regularized lower incomplete gamma P(k, λ).
pub fn poisson_sf(k: f64, lambda: f64) -> f64 {
    if k <= 0.0 {
        return 1.0;
    }
    if lambda <= 0.0 {
        return 0.0;
    }
    gamma_p(k.ceil(), lambda)
}

/// P(X ≥ k) for X ~ Binomial(n, p), by the normal approximation with continuity correction
/// (used only for evidence, where n is at least tens).
pub fn binomial_sf_approx(k: f64, n: f64, p: f64) -> f64 {
    if k <= 0.0 {
        return 1.0;
    }
    if p <= 0.0 {
        return 0.0;
    }
    let variance = n * p * (1.0 - p);
    if variance <= 0.0 {
        return if k <= n * p { 1.0 } else { 0.0 };
    }
    normal_sf((k - 0.5 - n * p) / variance.sqrt())
}

/// Maps a non-negative score to 0..1 (0 at 0, 0.63 at `scale`).
pub fn squash(score: f64, scale: f64) -> f64 {
    if !is_positive(score) || !is_positive(scale) {
        return 0.0;
    }
    1.0 - (-score / scale).exp()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_normal_quantile_matches_known_values() {
        assert!((normal_quantile(0.975) - 1.959_964).abs() < 1e-5);
        assert!((normal_quantile(0.5)).abs() < 1e-9);
        assert!((normal_quantile(0.01) + 2.326_348).abs() < 1e-5);
    }

    #[test]
    fn normal_tail_matches_known_values() {
        assert!((normal_sf(0.0) - 0.5).abs() < 1e-7);
        assert!((normal_sf(1.959_964) - 0.025).abs() < 1e-6);
        assert!((normal_sf(3.719_016) - 1e-4).abs() < 1e-7);
    }

    #[test]
    fn poisson_tail_matches_direct_sum() {
        let lambda: f64 = 3.0;
        let mut cdf = 0.0;
        let mut pmf = (-lambda).exp();
        for k in 0..8 {
            cdf += pmf;
            pmf *= lambda / (k as f64 + 1.0);
        }
        // P(X >= 8) = 1 - P(X <= 7)
        assert!((poisson_sf(8.0, lambda) - (1.0 - cdf)).abs() < 1e-10);
        assert!((poisson_sf(0.0, lambda) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn theil_sen_and_mann_kendall_see_a_line() {
        let points: Vec<(f64, f64)> = (0..20).map(|i| (i as f64, 2.0 * i as f64 + 1.0)).collect();
        assert!((theil_sen_slope(&points).unwrap() - 2.0).abs() < 1e-12);
        let values: Vec<f64> = points.iter().map(|p| p.1).collect();
        let mk = mann_kendall(&values).unwrap();
        assert!(mk.p_increasing < 1e-6 && mk.p_decreasing > 0.99);
        assert!(mann_kendall(&[1.0, 1.0, 1.0]).is_none());
    }

    #[test]
    fn spearman_handles_ties_and_monotone_maps() {
        let xs = [1.0, 2.0, 2.0, 3.0, 4.0];
        let ys: Vec<f64> = xs.iter().map(|x: &f64| x.exp()).collect();
        assert!((spearman(&xs, &ys).unwrap() - 1.0).abs() < 1e-12);
        assert!(spearman(&xs, &[1.0; 5]).is_none());
    }
}
