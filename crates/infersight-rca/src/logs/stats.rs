//! The statistics of log evidence, IO-free: lift with a pseudo-event, the Poisson upper tail
//! that decides whether a template's incident count is a real rise, and the single upward
//! change-point of a template's per-minute counts that dates the rise (its lead time).

/// Natural log of `n!`: exact for small `n`, Stirling's series beyond (error < 1e-10).
fn ln_factorial(n: u64) -> f64 {
    if n < 32 {
        return (2..=n).map(|k| (k as f64).ln()).sum();
    }
    let x = n as f64 + 1.0;
    // ln Γ(x) by Stirling's series
    (x - 0.5) * x.ln() - x + 0.5 * (2.0 * std::f64::consts::PI).ln() + 1.0 / (12.0 * x)
        - 1.0 / (360.0 * x.powi(3))
        + 1.0 / (1260.0 * x.powi(5))
}

/// `ln P(X ≥ k)` for `X ~ Poisson(lambda)`; 0 (probability 1) when `k` is at most the mean,
/// where the tail is large and of no interest here.
pub fn ln_poisson_upper_tail(k: u64, lambda: f64) -> f64 {
    if k == 0 || !(lambda.is_finite()) || (k as f64) <= lambda {
        return 0.0;
    }
    if lambda <= 0.0 {
        return f64::NEG_INFINITY;
    }
    // terms t_j = e^-λ λ^j / j! for j ≥ k shrink by λ/(j+1) < 1: sum a few hundred, then bound
    // the rest geometrically
    let ln_first = -lambda + k as f64 * lambda.ln() - ln_factorial(k);
    let mut sum = 1.0;
    let mut term = 1.0;
    let mut j = k;
    for _ in 0..512 {
        j += 1;
        let ratio = lambda / j as f64;
        term *= ratio;
        sum += term;
        if term < 1e-15 * sum {
            break;
        }
    }
    let ratio = lambda / (j + 1) as f64;
    if ratio < 1.0 {
        sum += term * ratio / (1.0 - ratio);
    }
    (ln_first + sum.ln()).min(0.0)
}

/// Incident rate over baseline rate, each window given one pseudo-event so that a template
/// absent from the baseline has a finite lift.
pub fn lift(
    baseline_count: u64,
    baseline_minutes: f64,
    incident_count: u64,
    incident_minutes: f64,
) -> f64 {
    let baseline_rate = (baseline_count as f64 + 1.0) / baseline_minutes.max(1e-9);
    let incident_rate = (incident_count as f64 + 1.0) / incident_minutes.max(1e-9);
    incident_rate / baseline_rate
}

/// `x ln(x / n)`, 0 for `x = 0`: one segment's Poisson log-likelihood at its own rate.
fn segment_ll(sum: f64, minutes: f64) -> f64 {
    if sum <= 0.0 || minutes <= 0.0 {
        0.0
    } else {
        sum * (sum / minutes).ln()
    }
}

/// An upward step in a per-minute count series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChangePoint {
    /// Index of the first minute at the higher rate.
    pub index: usize,
    /// Poisson log-likelihood ratio of "one step here" against "one rate throughout".
    pub llr: f64,
    /// Rate per minute before and after the step.
    pub rate_before: f64,
    pub rate_after: f64,
}

/// The most likely upward step of `counts` at an index in `[first_candidate, counts.len())`,
/// with `prior` = (events, minutes) observed before the series (a disjoint baseline) added to
/// the "before" segment. `None` when no candidate has a higher rate after than before.
pub fn upward_change_point(
    counts: &[u64],
    prior: (u64, f64),
    first_candidate: usize,
) -> Option<ChangePoint> {
    let total_minutes = counts.len() as f64 + prior.1;
    let total: f64 = counts.iter().sum::<u64>() as f64 + prior.0 as f64;
    if total <= 0.0 {
        return None;
    }
    let null_ll = segment_ll(total, total_minutes);
    let mut before = prior.0 as f64
        + counts[..first_candidate.min(counts.len())]
            .iter()
            .sum::<u64>() as f64;
    let mut best: Option<ChangePoint> = None;
    for index in first_candidate..counts.len() {
        let before_minutes = prior.1 + index as f64;
        let after_minutes = counts.len() as f64 - index as f64;
        if before_minutes > 0.0 && after_minutes > 0.0 {
            let after = total - before;
            let rate_before = before / before_minutes;
            let rate_after = after / after_minutes;
            if rate_after > rate_before {
                let llr =
                    segment_ll(before, before_minutes) + segment_ll(after, after_minutes) - null_ll;
                if best.is_none_or(|b| llr > b.llr) {
                    best = Some(ChangePoint {
                        index,
                        llr,
                        rate_before,
                        rate_after,
                    });
                }
            }
        }
        before += counts[index] as f64;
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_tail_matches_direct_sums() {
        // P(X ≥ 3 | 1) = 1 − e^-1 (1 + 1 + 1/2)
        let expected = 1.0 - (-1.0f64).exp() * 2.5;
        assert!((ln_poisson_upper_tail(3, 1.0) - expected.ln()).abs() < 1e-9);
        // P(X ≥ 40 | 40.5) is about one half: no evidence
        assert_eq!(ln_poisson_upper_tail(40, 40.5), 0.0);
        // far tail stays finite and very negative
        let far = ln_poisson_upper_tail(300, 10.0);
        assert!(far.is_finite() && far < -500.0, "{far}");
        assert_eq!(ln_poisson_upper_tail(5, 0.0), f64::NEG_INFINITY);
        // Stirling branch agrees with the exact sum at the switch
        let exact: f64 = (2..=40u64).map(|k| (k as f64).ln()).sum();
        assert!((ln_factorial(40) - exact).abs() < 1e-9);
    }

    #[test]
    fn lift_is_finite_for_new_templates_and_one_for_steady_ones() {
        assert!((lift(60, 60.0, 30, 30.0) - (31.0 / 30.0) / (61.0 / 60.0)).abs() < 1e-12);
        assert!(lift(0, 60.0, 100, 30.0).is_finite());
        assert!(lift(0, 60.0, 100, 30.0) > 100.0);
    }

    #[test]
    fn change_point_finds_the_step() {
        let mut counts = vec![1u64; 40];
        counts.extend(vec![9u64; 20]);
        let cp = upward_change_point(&counts, (0, 0.0), 10).unwrap();
        assert_eq!(cp.index, 40);
        assert!(cp.llr > 50.0, "{cp:?}");
        // flat series: any step is tiny
        let flat = vec![3u64; 60];
        assert!(upward_change_point(&flat, (0, 0.0), 1).is_none_or(|c| c.llr < 1.0));
        assert!(upward_change_point(&[], (0, 0.0), 0).is_none());
        assert!(upward_change_point(&[0, 0, 0], (0, 0.0), 0).is_none());
    }
}
