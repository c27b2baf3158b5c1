//! Clock throttling per pod, from its device metrics (complete where request traces may be
//! sampled): a GPU whose SM clock fell well below its own baseline while the rest of the
//! fleet's did not (thermal or power throttling), its temperature as evidence. Read by
//! `collect_signals` among the metric signals; the pod is a `slow_worker`, and as a device fault
//! it is a known cause for localization (see `analyse`).
//!
//! Rule: per device, its clock's own change point within the incident window (the split that
//! best separates two levels, least squares: a window dated from sampled request rows may start
//! well before the device changed), then the median clock after it against the median before;
//! a device throttles when its clock fell by at least [`MIN_CLOCK_DROP`] more than the fleet's
//! median device did at the same split, and the upper quartile after lies below the lower
//! quartile before (the drop is a level, not a few samples). Each side needs [`MIN_SAMPLES`]
//! samples. The signal's onset is the device's change point.

use std::collections::BTreeMap;

use infersight_analytics::detect::stats::median;
use infersight_model::signal::{SignalKind, Subject};

use super::{MetricSamples, Series};
use crate::Signal;

/// The SM clock series of a device (DCGM `DCGM_FI_DEV_SM_CLOCK`, OTel `hw.gpu.clock.graphics`).
pub(super) const GPU_SM_CLOCK: &str = "gpu_sm_clock_hertz";
/// The device temperature, evidence only.
pub(super) const GPU_TEMPERATURE: &str = "gpu_temperature_celsius";
/// A clock drop, beyond the fleet's, that is throttling (a fifth of the clock).
const MIN_CLOCK_DROP: f64 = 0.2;
/// Samples each side of the split.
const MIN_SAMPLES: usize = 5;

/// One device's clock before and after its change point.
struct DeviceClock<'a> {
    worker: &'a str,
    device: &'a str,
    /// The device's change point (see [`change_point`]).
    split_ns: i64,
    before: Vec<f64>,
    after: Vec<f64>,
    drop: f64,
}

/// The `slow_worker` signals of pods whose devices throttle (see the module doc); `split_ns`
/// starts the incident window.
pub(super) fn throttled_workers(metrics: &MetricSamples, split_ns: i64) -> Vec<Signal> {
    let series: Vec<(&str, &str, &Series)> = metrics
        .iter()
        .flat_map(|(worker, samples)| {
            samples.devices.iter().filter_map(move |(device, names)| {
                Some((worker.as_str(), device.as_str(), names.get(GPU_SM_CLOCK)?))
            })
        })
        .collect();
    let mut clocks: Vec<DeviceClock<'_>> = Vec::new();
    for &(worker, device, clock) in &series {
        let Some(at) = change_point(clock, split_ns) else {
            continue;
        };
        if let Some((before, after, drop)) = clock_drop(clock, at) {
            clocks.push(DeviceClock {
                worker,
                device,
                split_ns: at,
                before,
                after,
                drop,
            });
        }
    }
    let mut by_worker: BTreeMap<&str, (f64, Signal)> = BTreeMap::new();
    // the fleet's median drop per split, read only for devices that throttle on their own
    // account (each split costs a pass over every device's series)
    let mut fleet_drops: BTreeMap<i64, Option<f64>> = BTreeMap::new();
    for clock in &clocks {
        if clock.drop < MIN_CLOCK_DROP || !levels_apart(&clock.before, &clock.after) {
            continue;
        }
        // the fleet's median device over the same split: a fleet-wide cap is no pod's fault
        let fleet_drop = *fleet_drops.entry(clock.split_ns).or_insert_with(|| {
            let drops: Vec<f64> = series
                .iter()
                .filter_map(|(_, _, s)| clock_drop(s, clock.split_ns).map(|d| d.2))
                .collect();
            median(&drops)
        });
        let Some(fleet_drop) = fleet_drop else {
            continue;
        };
        let beyond = clock.drop - fleet_drop.max(0.0);
        if beyond < MIN_CLOCK_DROP {
            continue;
        }
        let signal = throttle_signal(clock, metrics);
        if by_worker.get(clock.worker).is_none_or(|(d, _)| beyond > *d) {
            by_worker.insert(clock.worker, (beyond, signal));
        }
    }
    by_worker.into_values().map(|(_, s)| s).collect()
}

/// The time from `split_ns` on at which `series` (sorted by time) is best split in two levels
/// (the split with the least squared error around each side's mean), with at least
/// [`MIN_SAMPLES`] values each side; `None` when no split leaves that many.
fn change_point(series: &Series, split_ns: i64) -> Option<i64> {
    let n = series.len();
    let total: f64 = series.iter().map(|p| p.1).sum();
    let mut left = 0.0;
    let mut best: Option<(f64, i64)> = None;
    for (i, point) in series.iter().enumerate() {
        // `left` sums the values before `i`
        if i >= MIN_SAMPLES && n - i >= MIN_SAMPLES && point.0 >= split_ns {
            let right = total - left;
            // the squared error falls as this rises
            let explained = left * left / i as f64 + right * right / (n - i) as f64;
            if best.is_none_or(|(e, _)| explained > e) {
                best = Some((explained, point.0));
            }
        }
        left += point.1;
    }
    best.map(|(_, at)| at)
}

/// The values of `series` before and from `split_ns`, and the fall of the median from one to
/// the other (a fraction of the median before); `None` with fewer than [`MIN_SAMPLES`] each
/// side or no clock before.
fn clock_drop(series: &Series, split_ns: i64) -> Option<(Vec<f64>, Vec<f64>, f64)> {
    let (before, after) = split(series, split_ns);
    if before.len() < MIN_SAMPLES || after.len() < MIN_SAMPLES {
        return None;
    }
    let (b, a) = (median(&before)?, median(&after)?);
    (b > 0.0).then(|| (before, after, 1.0 - a / b))
}

/// The values of `series` before and from `split_ns`.
fn split(series: &Series, split_ns: i64) -> (Vec<f64>, Vec<f64>) {
    let before = series
        .iter()
        .filter(|p| p.0 < split_ns)
        .map(|p| p.1)
        .collect();
    let after = series
        .iter()
        .filter(|p| p.0 >= split_ns)
        .map(|p| p.1)
        .collect();
    (before, after)
}

/// Whether the upper quartile of `after` lies below the lower quartile of `before`.
fn levels_apart(before: &[f64], after: &[f64]) -> bool {
    let quartile = |values: &[f64], q: f64| -> f64 {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        sorted[((sorted.len() - 1) as f64 * q).round() as usize]
    };
    quartile(after, 0.75) < quartile(before, 0.25)
}

fn throttle_signal(clock: &DeviceClock<'_>, metrics: &MetricSamples) -> Signal {
    let split_ns = clock.split_ns;
    let mhz = |values: &[f64]| median(values).unwrap_or(0.0) / 1e6;
    let temperature = metrics
        .get(clock.worker)
        .and_then(|m| m.devices.get(clock.device))
        .and_then(|names| names.get(GPU_TEMPERATURE))
        .map(|series| split(series, split_ns))
        .and_then(|(b, a)| Some((median(&b)?, median(&a)?)))
        .map_or(String::new(), |(b, a)| {
            format!(", temperature {b:.0} °C → {a:.0} °C")
        });
    let device = if clock.device.is_empty() {
        String::new()
    } else {
        format!("device {}: ", clock.device)
    };
    Signal {
        kind: SignalKind::SlowWorker,
        subject: Subject::of([("worker", clock.worker)]),
        onset: split_ns,
        strength: clock.drop * 100.0,
        detail: format!(
            "{device}SM clock {:.0} MHz → {:.0} MHz (−{:.0} %){temperature}: the GPU throttles",
            mhz(&clock.before),
            mhz(&clock.after),
            clock.drop * 100.0
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signals::WorkerMetrics;

    const MINUTE: i64 = 60_000_000_000;

    fn worker(clock_before: f64, clock_after: f64, temperature_after: f64) -> WorkerMetrics {
        let mut names: BTreeMap<String, Series> = BTreeMap::new();
        let clock: Series = (0..30)
            .map(|m| {
                let wobble = 1.0 + 0.01 * ((m * 7 % 5) as f64 - 2.0);
                let level = if m < 20 { clock_before } else { clock_after };
                (m * MINUTE, level * wobble)
            })
            .collect();
        let temperature: Series = (0..30)
            .map(|m| (m * MINUTE, if m < 20 { 55.0 } else { temperature_after }))
            .collect();
        names.insert(GPU_SM_CLOCK.into(), clock);
        names.insert(GPU_TEMPERATURE.into(), temperature);
        WorkerMetrics {
            names: BTreeMap::new(),
            devices: BTreeMap::from([("0".to_string(), names)]),
        }
    }

    #[test]
    fn a_pod_whose_clock_falls_alone_throttles() {
        let mut metrics: MetricSamples = BTreeMap::new();
        for k in 0..6 {
            metrics.insert(format!("pod-{k}"), worker(1.98e9, 1.98e9, 55.0));
        }
        metrics.insert("pod-hot".into(), worker(1.98e9, 1.1e9, 91.0));
        let signals = throttled_workers(&metrics, 20 * MINUTE);
        assert_eq!(signals.len(), 1, "{signals:?}");
        assert_eq!(
            signals[0].subject.get("worker").map(String::as_str),
            Some("pod-hot")
        );
        assert!(signals[0].detail.contains("91 °C"), "{}", signals[0].detail);
    }

    #[test]
    fn a_fleet_wide_clock_cap_is_no_pod_fault() {
        let mut metrics: MetricSamples = BTreeMap::new();
        for k in 0..6 {
            metrics.insert(format!("pod-{k}"), worker(1.98e9, 1.3e9, 60.0));
        }
        // the window starting at the cap or well before it
        for window_start in [20, 8, 12] {
            let signals = throttled_workers(&metrics, window_start * MINUTE);
            assert!(
                signals.is_empty(),
                "from minute {window_start}: {signals:?}"
            );
        }
    }

    #[test]
    fn a_window_that_starts_early_still_finds_the_throttling_and_its_onset() {
        let mut metrics: MetricSamples = BTreeMap::new();
        for k in 0..6 {
            metrics.insert(format!("pod-{k}"), worker(1.98e9, 1.98e9, 55.0));
        }
        metrics.insert("pod-hot".into(), worker(1.98e9, 1.1e9, 91.0));
        // the window dated 12, 9 and 2 minutes before the clock fell (at minute 20), and late
        for window_start in [8, 11, 18, 20, 23] {
            let signals = throttled_workers(&metrics, window_start * MINUTE);
            assert_eq!(signals.len(), 1, "from minute {window_start}: {signals:?}");
            let expected_onset = window_start.max(20) * MINUTE;
            assert_eq!(signals[0].onset, expected_onset, "from {window_start}");
            assert!(signals[0].detail.contains("91 °C"), "{}", signals[0].detail);
        }
        // too late a window leaves too few samples before the end
        assert!(throttled_workers(&metrics, 27 * MINUTE).is_empty());
    }
}
