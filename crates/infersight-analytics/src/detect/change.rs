//! Spike and level-shift detection on one SLI series with onset time: robust (optionally
//! seasonal) baseline, SPOT tail thresholds, CUSUM for small sustained shifts. The method and
//! its parameters are described in the module docs of [`crate::detect`].

use super::spot::{GpdFit, spot_threshold};
use super::stats::{MAD_TO_SIGMA, median, squash};
use super::{DetectError, Evidence, Finding, MINUTE_NS, SignalKind, bad_param, ev};

/// Which excursions to look for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Up,
    Down,
    Both,
}

impl Direction {
    fn allows_up(self) -> bool {
        matches!(self, Direction::Up | Direction::Both)
    }
    fn allows_down(self) -> bool {
        matches!(self, Direction::Down | Direction::Both)
    }
}

/// Parameters of [`detect_change`]; `Default` gives the documented values.
#[derive(Debug, Clone, PartialEq)]
pub struct DetectParams {
    /// Grid step (default one minute).
    pub step_ns: i64,
    /// Points before this time form the baseline; `None`: the first half of the grid.
    pub baseline_end_ns: Option<i64>,
    /// Seasonal period (e.g. a day); used when the baseline holds at least two periods.
    pub period_ns: Option<i64>,
    /// Half-width, in grid steps, of the phase window pooled for the seasonal profile.
    pub seasonal_smooth_points: usize,
    pub direction: Direction,
    /// SPOT risk q: probability that a baseline-like point exceeds the threshold.
    pub risk_q: f64,
    pub spot_init_quantile: f64,
    /// Fewer excesses over the initial threshold than this: robust z fallback.
    pub spot_min_peaks: usize,
    pub fallback_z: f64,
    pub min_threshold_z: f64,
    pub cusum_k: f64,
    pub cusum_h: f64,
    pub confirm_points: usize,
    pub shift_band_z: f64,
    pub onset_band_z: f64,
    pub max_gap_points: usize,
    pub min_baseline_points: usize,
    pub min_scale_abs: f64,
    pub min_scale_rel: f64,
    pub max_grid_points: usize,
}

impl Default for DetectParams {
    fn default() -> Self {
        DetectParams {
            step_ns: MINUTE_NS,
            baseline_end_ns: None,
            period_ns: None,
            seasonal_smooth_points: 7,
            direction: Direction::Both,
            risk_q: 1e-4,
            spot_init_quantile: 0.98,
            spot_min_peaks: 10,
            fallback_z: 5.0,
            min_threshold_z: 3.0,
            cusum_k: 1.0,
            cusum_h: 6.0,
            confirm_points: 10,
            shift_band_z: 2.0,
            onset_band_z: 2.0,
            max_gap_points: 2,
            min_baseline_points: 30,
            min_scale_abs: 1e-9,
            min_scale_rel: 1e-3,
            max_grid_points: 1 << 22,
        }
    }
}

impl DetectParams {
    fn validate(&self) -> Result<(), DetectError> {
        let positive = |name: &'static str, value: f64| {
            if value > 0.0 && value.is_finite() {
                Ok(())
            } else {
                Err(bad_param(
                    name,
                    format!("{value} must be positive and finite"),
                ))
            }
        };
        if self.step_ns <= 0 {
            return Err(bad_param("step_ns", "must be positive"));
        }
        if let Some(period) = self.period_ns
            && period < 2 * self.step_ns
        {
            return Err(bad_param("period_ns", "must span at least two steps"));
        }
        positive("fallback_z", self.fallback_z)?;
        positive("min_threshold_z", self.min_threshold_z)?;
        positive("cusum_h", self.cusum_h)?;
        positive("shift_band_z", self.shift_band_z)?;
        positive("onset_band_z", self.onset_band_z)?;
        if !(self.cusum_k >= 0.0 && self.cusum_k.is_finite()) {
            return Err(bad_param("cusum_k", "must be non-negative and finite"));
        }
        if !(self.min_scale_abs >= 0.0 && self.min_scale_rel >= 0.0) {
            return Err(bad_param(
                "min_scale_abs",
                "scale floors must be non-negative",
            ));
        }
        if self.confirm_points == 0 {
            return Err(bad_param("confirm_points", "must be at least 1"));
        }
        if self.min_baseline_points < 3 {
            return Err(bad_param("min_baseline_points", "must be at least 3"));
        }
        // risk_q and spot_init_quantile are checked by spot_threshold.
        Ok(())
    }
}

/// Transient or sustained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Spike,
    LevelShift,
}

/// Where a threshold came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ThresholdMethod {
    Spot {
        initial_threshold: f64,
        fit: GpdFit,
        peaks: usize,
    },
    /// Too few peaks over the initial threshold: `fallback_z`.
    RobustZ,
}

/// A detected change: the first alarm after the baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangePoint {
    pub kind: ChangeKind,
    /// `Up` or `Down`.
    pub direction: Direction,
    /// First point of the excursion.
    pub onset_ns: i64,
    /// The point that raised the alarm.
    pub alarm_ns: i64,
    /// Last point of a spike's excursion; `None` for a level shift.
    pub end_ns: Option<i64>,
    /// True when the alarm came from the CUSUM rather than a single point over the threshold.
    pub alarm_by_cusum: bool,
    /// False when the series ended before `confirm_points` points followed the alarm (then the
    /// kind is judged on fewer points; with fewer than three it is `Spike`).
    pub confirmed: bool,
    pub baseline_median: f64,
    /// Robust σ of the baseline residuals (after floors).
    pub baseline_scale: f64,
    /// Expected value (seasonal or flat baseline) at the onset.
    pub expected_at_onset: f64,
    /// Threshold in units of `baseline_scale`, in the alarm's direction.
    pub threshold_z: f64,
    pub threshold_method: ThresholdMethod,
    /// Value and standardized residual of the most extreme point of the excursion (spike) or
    /// the confirmation window (level shift).
    pub peak_ns: i64,
    pub peak_value: f64,
    pub peak_z: f64,
    /// Effect size in the series' unit: median residual over the confirmation window for a
    /// level shift, peak residual for a spike (signed).
    pub shift: f64,
    /// Share of the confirmation window beyond the band (`shift_band_z`, or `cusum_k` for a
    /// CUSUM alarm) in the alarm's direction.
    pub sustained_fraction: f64,
    pub seasonal: bool,
    pub baseline_points: usize,
    /// Last timestamp of the series (grid).
    pub series_end_ns: i64,
}

impl ChangePoint {
    /// The change as a [`Finding`] of `kind` about `subject` (e.g. `LatencySpike` for a latency
    /// SLI of `[("model", "m")]`).
    pub fn to_finding(&self, kind: SignalKind, subject: &[(&str, &str)]) -> Finding {
        let shape_word = match self.kind {
            ChangeKind::Spike => "spike",
            ChangeKind::LevelShift => "level shift",
        };
        let relative_change =
            (self.baseline_median != 0.0).then(|| self.shift / self.baseline_median.abs());
        let mut evidence: Vec<Evidence> = vec![
            ev("baseline_median", self.baseline_median),
            ev("baseline_scale", self.baseline_scale),
            ev("expected_at_onset", self.expected_at_onset),
            ev("threshold_z", self.threshold_z),
            ev("peak_value", self.peak_value),
            ev("peak_z", self.peak_z),
            ev("shift", self.shift),
            ev("sustained_fraction", self.sustained_fraction),
            ev(
                "level_shift",
                f64::from(u8::from(self.kind == ChangeKind::LevelShift)),
            ),
            ev("seasonal", f64::from(u8::from(self.seasonal))),
            ev("baseline_points", self.baseline_points as f64),
        ];
        if let ThresholdMethod::Spot { fit, peaks, .. } = self.threshold_method {
            evidence.push(ev("gpd_shape", fit.shape));
            evidence.push(ev("gpd_scale", fit.scale));
            evidence.push(ev("spot_peaks", peaks as f64));
        }
        Finding {
            kind,
            subject: super::subject(subject),
            onset_ns: self.onset_ns,
            window_start_ns: self.onset_ns,
            window_end_ns: self.end_ns.unwrap_or(self.series_end_ns),
            magnitude: self.shift,
            relative_change,
            score: self.peak_z.abs(),
            confidence: squash(self.peak_z.abs() / self.threshold_z, 1.0),
            evidence,
            detail: format!(
                "{shape_word} {}: {:.4} vs expected {:.4} (z = {:.1}, threshold {:.1})",
                if self.direction == Direction::Down {
                    "down"
                } else {
                    "up"
                },
                self.peak_value,
                self.expected_at_onset,
                self.peak_z,
                self.threshold_z
            ),
        }
    }
}

struct Grid {
    start_ns: i64,
    values: Vec<Option<f64>>,
}

fn to_grid(series: &[(i64, f64)], params: &DetectParams) -> Result<Grid, DetectError> {
    super::check_sorted("series", series.iter().map(|p| p.0))?;
    let Some(&(start_ns, _)) = series.first() else {
        return Err(DetectError::TooShort {
            series: "series",
            needed: params.min_baseline_points,
            got: 0,
        });
    };
    let last_ns = series[series.len() - 1].0;
    let span = (i128::from(last_ns) - i128::from(start_ns)) / i128::from(params.step_ns);
    let points = usize::try_from(span + 1).unwrap_or(usize::MAX);
    if points > params.max_grid_points {
        return Err(DetectError::TooLong {
            series: "series",
            points,
            limit: params.max_grid_points,
        });
    }
    let mut sums = vec![(0.0_f64, 0_u32); points];
    for &(t, value) in series {
        if value.is_finite() {
            let index = ((t - start_ns) / params.step_ns) as usize;
            sums[index].0 += value;
            sums[index].1 += 1;
        }
    }
    Ok(Grid {
        start_ns,
        values: sums
            .into_iter()
            .map(|(sum, count)| (count > 0).then(|| sum / f64::from(count)))
            .collect(),
    })
}

/// Expected value per grid index and whether the seasonal profile was used.
fn expected_values(
    values: &[Option<f64>],
    baseline_end: usize,
    baseline_median: f64,
    params: &DetectParams,
) -> (Vec<f64>, Vec<Option<f64>>, bool) {
    let n = values.len();
    let period = params
        .period_ns
        .map(|p| ((p + params.step_ns / 2) / params.step_ns) as usize)
        .unwrap_or(0);
    if period < 2 || baseline_end < 2 * period {
        let flat = vec![baseline_median; n];
        let baseline_residuals = values[..baseline_end]
            .iter()
            .map(|v| v.map(|x| x - baseline_median))
            .collect();
        return (flat, baseline_residuals, false);
    }
    let half = params.seasonal_smooth_points.min(period / 2);
    // Per phase: (index, value) of baseline points within ±half phases (circular).
    let mut pools: Vec<Vec<(usize, f64)>> = vec![Vec::new(); period];
    for (index, value) in values[..baseline_end].iter().enumerate() {
        let Some(x) = *value else { continue };
        let phase = index % period;
        for offset in 0..=(2 * half) {
            let target = (phase + period + offset - half) % period;
            pools[target].push((index, x));
        }
    }
    let profile: Vec<f64> = pools
        .iter()
        .map(|pool| {
            let xs: Vec<f64> = pool.iter().map(|p| p.1).collect();
            median(&xs).unwrap_or(baseline_median)
        })
        .collect();
    let expected: Vec<f64> = (0..n).map(|i| profile[i % period]).collect();
    // Leave-own-period-out residuals for the baseline: honest out-of-sample spread.
    let baseline_residuals = values[..baseline_end]
        .iter()
        .enumerate()
        .map(|(index, value)| {
            let x = (*value)?;
            let others: Vec<f64> = pools[index % period]
                .iter()
                .filter(|(j, _)| j.abs_diff(index) * 2 >= period)
                .map(|p| p.1)
                .collect();
            Some(x - median(&others).unwrap_or(profile[index % period]))
        })
        .collect();
    (expected, baseline_residuals, true)
}

fn tail_threshold(
    standardized: &[f64],
    params: &DetectParams,
) -> Result<(f64, ThresholdMethod), DetectError> {
    let spot = spot_threshold(
        standardized,
        params.risk_q,
        params.spot_init_quantile,
        params.spot_min_peaks,
    )?;
    Ok(match spot {
        Some(found) => (
            found.threshold.max(params.min_threshold_z),
            ThresholdMethod::Spot {
                initial_threshold: found.initial_threshold,
                fit: found.fit,
                peaks: found.peaks,
            },
        ),
        None => (
            params.fallback_z.max(params.min_threshold_z),
            ThresholdMethod::RobustZ,
        ),
    })
}

/// Detects the first spike or level shift after the baseline of `series` (timestamps in ns,
/// non-decreasing; NaN/∞ values and missing steps are gaps). `Ok(None)`: nothing beyond the
/// thresholds, or no points after the baseline.
///
/// Steps: grid the series → fit the baseline (expected values, robust scale, tail thresholds)
/// → scan for the first alarm → walk back to its onset → judge spike or level shift from the
/// confirmation window → measure the peak and the shift.
pub fn detect_change(
    series: &[(i64, f64)],
    params: &DetectParams,
) -> Result<Option<ChangePoint>, DetectError> {
    params.validate()?;
    let grid = to_grid(series, params)?;
    let n = grid.values.len();
    let baseline_end = baseline_end_index(&grid, params);
    let baseline_values: Vec<f64> = grid.values[..baseline_end]
        .iter()
        .flatten()
        .copied()
        .collect();
    if baseline_values.len() < params.min_baseline_points {
        return Err(DetectError::TooShort {
            series: "baseline",
            needed: params.min_baseline_points,
            got: baseline_values.len(),
        });
    }
    if baseline_end == n {
        return Ok(None);
    }
    let baseline = Baseline::fit(&grid, baseline_end, &baseline_values, params)?;
    let z = baseline.standardize(&grid.values);
    let Some(alarm) = first_alarm(&z, baseline_end, &baseline, params) else {
        return Ok(None);
    };
    let sign = alarm.sign();
    let (threshold_z, threshold_method) = match alarm.direction {
        Direction::Up => baseline.threshold_up,
        _ => baseline.threshold_down,
    };
    let onset_index = if alarm.by_cusum {
        alarm.cusum_run_start
    } else {
        excursion_edge(&z, alarm.index, (0..alarm.index).rev(), sign, params)
    };
    let shape = Shape::judge(&z, &alarm, params);
    // Spike end: last point beyond the onset band going forward.
    let end_index = (shape.kind == ChangeKind::Spike)
        .then(|| excursion_edge(&z, alarm.index, alarm.index + 1..n, sign, params));
    let peak_range = match end_index {
        Some(end) => onset_index..end + 1,
        None => alarm.index..shape.window_end,
    };
    let (peak_index, peak_signed) = peak_range
        .filter_map(|i| z[i].map(|zi| (i, sign * zi)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((alarm.index, 0.0));
    let residual = |i: usize| grid.values[i].map(|x| x - baseline.expected[i]);
    let shift = match shape.kind {
        ChangeKind::LevelShift => {
            let window_residuals: Vec<f64> =
                shape.window.iter().filter_map(|w| residual(w.0)).collect();
            median(&window_residuals).unwrap_or(0.0)
        }
        ChangeKind::Spike => residual(peak_index).unwrap_or(0.0),
    };
    let time_of = |index: usize| grid.start_ns + index as i64 * params.step_ns;
    Ok(Some(ChangePoint {
        kind: shape.kind,
        direction: alarm.direction,
        onset_ns: time_of(onset_index),
        alarm_ns: time_of(alarm.index),
        end_ns: end_index.map(time_of),
        alarm_by_cusum: alarm.by_cusum,
        confirmed: shape.confirmed,
        baseline_median: baseline.median,
        baseline_scale: baseline.scale,
        expected_at_onset: baseline.expected[onset_index],
        threshold_z,
        threshold_method,
        peak_ns: time_of(peak_index),
        peak_value: grid.values[peak_index].unwrap_or(f64::NAN),
        peak_z: sign * peak_signed,
        shift,
        sustained_fraction: shape.sustained_fraction,
        seasonal: baseline.seasonal,
        baseline_points: baseline_values.len(),
        series_end_ns: time_of(n - 1),
    }))
}

/// First grid index after the baseline: `baseline_end_ns` rounded up to the grid, or half the
/// grid.
fn baseline_end_index(grid: &Grid, params: &DetectParams) -> usize {
    let n = grid.values.len();
    match params.baseline_end_ns {
        Some(end) => {
            let offset = i128::from(end) - i128::from(grid.start_ns);
            let step = i128::from(params.step_ns);
            usize::try_from(((offset + step - 1).max(0) / step).min(n as i128)).unwrap_or(n)
        }
        None => n / 2,
    }
}

/// What the baseline says to expect: the value at each grid index, the residuals' center and
/// robust scale, and the tail thresholds (in units of the scale) each way.
struct Baseline {
    median: f64,
    expected: Vec<f64>,
    seasonal: bool,
    center: f64,
    scale: f64,
    threshold_up: (f64, ThresholdMethod),
    threshold_down: (f64, ThresholdMethod),
}

impl Baseline {
    fn fit(
        grid: &Grid,
        baseline_end: usize,
        baseline_values: &[f64],
        params: &DetectParams,
    ) -> Result<Self, DetectError> {
        let baseline_median = median(baseline_values).unwrap_or(0.0);
        let (expected, baseline_residuals, seasonal) =
            expected_values(&grid.values, baseline_end, baseline_median, params);
        let residuals: Vec<f64> = baseline_residuals.iter().flatten().copied().collect();
        let center = median(&residuals).unwrap_or(0.0);
        let deviations: Vec<f64> = residuals.iter().map(|r| (r - center).abs()).collect();
        let mut scale = MAD_TO_SIGMA * median(&deviations).unwrap_or(0.0);
        if scale <= 0.0 {
            // Mostly-constant data (e.g. small counts): mean absolute deviation, σ-consistent.
            scale = 1.2533 * deviations.iter().sum::<f64>() / deviations.len().max(1) as f64;
        }
        let scale = scale
            .max(params.min_scale_abs)
            .max(params.min_scale_rel * baseline_median.abs())
            .max(f64::MIN_POSITIVE);
        let z_baseline: Vec<f64> = residuals.iter().map(|r| (r - center) / scale).collect();
        let negated: Vec<f64> = z_baseline.iter().map(|z| -z).collect();
        let threshold_up = tail_threshold(&z_baseline, params)?;
        let threshold_down = tail_threshold(&negated, params)?;
        Ok(Baseline {
            median: baseline_median,
            expected,
            seasonal,
            center,
            scale,
            threshold_up,
            threshold_down,
        })
    }

    /// Standardized residual of every grid point (`None` for gaps).
    fn standardize(&self, values: &[Option<f64>]) -> Vec<Option<f64>> {
        values
            .iter()
            .zip(&self.expected)
            .map(|(value, e)| value.map(|x| (x - e - self.center) / self.scale))
            .collect()
    }
}

/// The point that raised the first alarm.
struct Alarm {
    index: usize,
    /// `Up` or `Down`.
    direction: Direction,
    by_cusum: bool,
    /// Where the CUSUM run in the alarm's direction started (the onset of a CUSUM alarm).
    cusum_run_start: usize,
}

impl Alarm {
    /// +1 up, −1 down: multiplies a standardized residual so that the alarm's way is positive.
    fn sign(&self) -> f64 {
        if self.direction == Direction::Up {
            1.0
        } else {
            -1.0
        }
    }
}

/// Scans the points after the baseline for the first one beyond a tail threshold, or the first
/// where a CUSUM exceeds `cusum_h`.
fn first_alarm(
    z: &[Option<f64>],
    baseline_end: usize,
    baseline: &Baseline,
    params: &DetectParams,
) -> Option<Alarm> {
    let (threshold_up, threshold_down) = (baseline.threshold_up.0, baseline.threshold_down.0);
    let (mut cusum_up, mut cusum_down) = (0.0_f64, 0.0_f64);
    let (mut run_start_up, mut run_start_down) = (baseline_end, baseline_end);
    let alarm = |index, direction, by_cusum, run_start_up, run_start_down| {
        Some(Alarm {
            index,
            direction,
            by_cusum,
            cusum_run_start: if direction == Direction::Up {
                run_start_up
            } else {
                run_start_down
            },
        })
    };
    for (index, value) in z.iter().enumerate().skip(baseline_end) {
        let Some(zi) = *value else { continue };
        if params.direction.allows_up() && zi > threshold_up {
            return alarm(index, Direction::Up, false, run_start_up, run_start_down);
        }
        if params.direction.allows_down() && -zi > threshold_down {
            return alarm(index, Direction::Down, false, run_start_up, run_start_down);
        }
        if cusum_up == 0.0 {
            run_start_up = index;
        }
        if cusum_down == 0.0 {
            run_start_down = index;
        }
        cusum_up = (cusum_up + zi - params.cusum_k).max(0.0);
        cusum_down = (cusum_down - zi - params.cusum_k).max(0.0);
        if params.direction.allows_up() && cusum_up > params.cusum_h {
            return alarm(index, Direction::Up, true, run_start_up, run_start_down);
        }
        if params.direction.allows_down() && cusum_down > params.cusum_h {
            return alarm(index, Direction::Down, true, run_start_up, run_start_down);
        }
    }
    None
}

/// Walks `indices` away from the alarm while the points stay beyond the onset band (in the
/// alarm's way, `sign`), stepping over at most `max_gap_points` missing points in a row; returns
/// the last index beyond the band (the alarm's own when none is).
fn excursion_edge(
    z: &[Option<f64>],
    alarm_index: usize,
    indices: impl Iterator<Item = usize>,
    sign: f64,
    params: &DetectParams,
) -> usize {
    let mut edge = alarm_index;
    let mut gap = 0;
    for index in indices {
        match z[index].map(|zi| sign * zi > params.onset_band_z) {
            None => {
                gap += 1;
                if gap > params.max_gap_points {
                    break;
                }
            }
            Some(true) => {
                edge = index;
                gap = 0;
            }
            Some(false) => break,
        }
    }
    edge
}

/// Spike or level shift, judged on the confirmation window (`confirm_points` from the alarm).
struct Shape {
    kind: ChangeKind,
    /// (index, signed standardized residual) of the window's points.
    window: Vec<(usize, f64)>,
    /// One past the window's last index.
    window_end: usize,
    /// The series held a whole window.
    confirmed: bool,
    sustained_fraction: f64,
}

impl Shape {
    fn judge(z: &[Option<f64>], alarm: &Alarm, params: &DetectParams) -> Self {
        let n = z.len();
        let sign = alarm.sign();
        let window_end = (alarm.index + params.confirm_points).min(n);
        let window: Vec<(usize, f64)> = (alarm.index..window_end)
            .filter_map(|i| z[i].map(|zi| (i, sign * zi)))
            .collect();
        let confirmed = alarm.index + params.confirm_points <= n;
        let signed: Vec<f64> = window.iter().map(|w| w.1).collect();
        // A CUSUM alarm is tuned for shifts of at least 2k, so its level is k.
        let band = if alarm.by_cusum {
            params.cusum_k.max(f64::EPSILON)
        } else {
            params.shift_band_z
        };
        let sustained = signed.iter().filter(|v| **v > band).count();
        let sustained_fraction = sustained as f64 / signed.len().max(1) as f64;
        let level_shift = signed.len() >= 3.min(params.confirm_points)
            && median(&signed).is_some_and(|m| m > band);
        Shape {
            kind: if level_shift {
                ChangeKind::LevelShift
            } else {
                ChangeKind::Spike
            },
            window,
            window_end,
            confirmed,
            sustained_fraction,
        }
    }
}
