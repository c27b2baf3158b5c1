//! Pods whose requests slowed, read off the serving runtimes' own latency histograms (vLLM's
//! `vllm:time_to_first_token_seconds`, SGLang's alike; canonical `ttft_seconds`), which count
//! every request where the traces may be head-sampled. Read in `analyse` over the windows localization chose; localization then
//! looks inside each such pod that its causes do not already cover (see `windows`).
//!
//! Rule, per pod and measure: the histograms' increase over the baseline and over the incident
//! window (cumulative series; a count that falls is a restart, counted from zero); the pod's
//! threshold is the first bucket bound at or above [`THRESHOLD_QUANTILE`] of its own baseline;
//! its share of requests over it in the incident is tested against its baseline share moved as
//! the other pods' shares moved, by their medians (a fleet-wide rise is no one pod's, and pods
//! slowed by causes of their own hide no other; see [`expected_share`]). The pod slowed when the
//! binomial log-likelihood ratio of that excess clears `ln(tests) + ln(1/SLOW_POD_ALPHA)`, the share
//! at least doubled ([`MIN_RISE`]) and at least [`MIN_OVER`] requests were over.

use std::collections::BTreeMap;

use arrow::array::{Array, AsArray, ListArray};
use arrow::datatypes::{Float64Type, Int64Type};
use infersight_query::{QueryEngine, QueryError};
use infersight_store::TimeRange;

/// The share of a pod's baseline requests at or below its threshold.
const THRESHOLD_QUANTILE: f64 = 0.9;
/// Family-wise probability that noise names a pod, over every pod and measure tested.
const SLOW_POD_ALPHA: f64 = 1e-10;
/// Family-wise probability that noise names a slice inside a slow pod (localization's `alpha`
/// there; see `windows`).
pub(crate) const POD_ALPHA: f64 = 1e-3;
/// The least rise of a pod's share over its threshold, against what was expected.
const MIN_RISE: f64 = 2.0;
/// The least requests over its threshold in the incident.
const MIN_OVER: f64 = 10.0;
/// How far before the baseline a sample is looked for, to start the baseline's increase from.
const LOOKBACK_NS: i64 = 10 * 60 * 1_000_000_000;
/// Canonical histogram names → the localization measure each speaks for. Time to first token
/// only: a request's end-to-end time grows with the tokens it generates, and a pod that serves
/// a tenant whose outputs grew (a demand change, not the pod's) would look slow by it.
const MEASURES: [(&str, &str); 1] = [("ttft_seconds", "ttft")];

/// A pod whose share of slow requests rose, from its complete latency histograms.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SlowPod {
    pub(crate) worker: String,
    /// The localization measure (`ttft`).
    pub(crate) measure: &'static str,
    /// The pod's threshold, seconds.
    pub(crate) threshold_s: f64,
    /// Requests over the threshold and all requests, in the baseline.
    pub(crate) baseline: (f64, f64),
    /// The same in the incident.
    pub(crate) incident: (f64, f64),
    /// The incident share expected from the baseline and the other pods' rise.
    pub(crate) expected: f64,
    pub(crate) llr: f64,
}

impl SlowPod {
    /// One line of evidence, with the numbers.
    pub(crate) fn evidence(&self) -> String {
        let share = |(over, n): (f64, f64)| if n > 0.0 { over / n * 100.0 } else { 0.0 };
        format!(
            "{} over {} s on {} (its runtime's histograms, every request): {:.1} % of {:.0} requests in the incident vs {:.1} % of {:.0} in the baseline ({:.1} % expected from the other pods' change; log-likelihood ratio {:.0})",
            self.measure,
            self.threshold_s,
            self.worker,
            share(self.incident),
            self.incident.1,
            share(self.baseline),
            self.baseline.1,
            self.expected * 100.0,
            self.llr
        )
    }
}

/// One cumulative histogram sample.
#[derive(Debug, Clone)]
struct Sample {
    ts_ns: i64,
    bounds: Vec<f64>,
    counts: Vec<f64>,
}

/// A histogram's bucket bounds and its counts per bucket (one more than bounds).
type Buckets = (Vec<f64>, Vec<f64>);

/// Per (worker, canonical name, labels), its samples in time order.
type HistogramSeries = BTreeMap<(String, String, String), Vec<Sample>>;

/// The pods that slowed between `baseline` and `incident` (see the module doc), strongest first.
pub(crate) async fn slow_pods(
    engine: &QueryEngine,
    baseline: TimeRange,
    incident: TimeRange,
) -> Result<Vec<SlowPod>, QueryError> {
    let (Some(since), Some(split), Some(until)) =
        (baseline.since_ns, incident.since_ns, incident.until_ns)
    else {
        return Ok(Vec::new());
    };
    let series = read_histograms(engine, since.saturating_sub(LOOKBACK_NS), until).await?;
    Ok(judge(&series, (since, split, until)))
}

async fn read_histograms(
    engine: &QueryEngine,
    since: i64,
    until: i64,
) -> Result<HistogramSeries, QueryError> {
    let names: Vec<String> = MEASURES.iter().map(|(n, _)| format!("'{n}'")).collect();
    let sql = format!(
        "SELECT worker, name, CAST(labels AS VARCHAR) AS labels, CAST(ts AS BIGINT) AS ts_ns, \
         bucket_bounds, bucket_counts FROM metrics \
         WHERE ts >= to_timestamp_nanos({since}) AND ts < to_timestamp_nanos({until}) \
         AND name IN ({}) AND worker IS NOT NULL AND worker <> '' \
         AND bucket_counts IS NOT NULL",
        names.join(", ")
    );
    let output = engine.sql(&sql).await?;
    let mut series = HistogramSeries::new();
    for batch in &output.batches {
        let column = |name: &str| {
            batch
                .column_by_name(name)
                .ok_or_else(|| QueryError::Internal(format!("histogram query lacks {name}")))
        };
        let strings = |name: &str| -> Result<Vec<Option<String>>, QueryError> {
            let c = arrow::compute::cast(column(name)?, &arrow::datatypes::DataType::Utf8)
                .map_err(|e| QueryError::Internal(format!("column {name}: {e}")))?;
            let c = c.as_string::<i32>();
            Ok((0..c.len())
                .map(|i| c.is_valid(i).then(|| c.value(i).to_string()))
                .collect())
        };
        let (workers, names, labels) = (strings("worker")?, strings("name")?, strings("labels")?);
        let ts = column("ts_ns")?
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| QueryError::Internal("ts_ns is not Int64".into()))?;
        let list = |name: &str| -> Result<&ListArray, QueryError> {
            column(name)?
                .as_list_opt::<i32>()
                .ok_or_else(|| QueryError::Internal(format!("{name} is not a list")))
        };
        let (bounds, counts) = (list("bucket_bounds")?, list("bucket_counts")?);
        let floats = |l: &ListArray, i: usize| -> Option<Vec<f64>> {
            if l.is_null(i) {
                return None;
            }
            let v = l.value(i);
            let v = v.as_primitive_opt::<Float64Type>()?;
            Some(v.iter().map(|x| x.unwrap_or(f64::NAN)).collect())
        };
        for row in 0..batch.num_rows() {
            let (Some(worker), Some(name)) = (&workers[row], &names[row]) else {
                continue;
            };
            let (Some(b), Some(c)) = (floats(bounds, row), floats(counts, row)) else {
                continue;
            };
            if ts.is_null(row) || c.len() != b.len() + 1 || c.iter().any(|x| !x.is_finite()) {
                continue;
            }
            let key = (
                worker.clone(),
                name.clone(),
                labels[row].clone().unwrap_or_default(),
            );
            series.entry(key).or_default().push(Sample {
                ts_ns: ts.value(row),
                bounds: b,
                counts: c,
            });
        }
    }
    for samples in series.values_mut() {
        samples.sort_by_key(|s| s.ts_ns);
    }
    Ok(series)
}

/// The increase of one cumulative series over `[from, to)`: from the last sample before `from`
/// (else the first within) to the last before `to`, a count that falls (or bounds that change)
/// counted as a restart from zero. `None` when no sample lies within.
fn increase(samples: &[Sample], from: i64, to: i64) -> Option<Buckets> {
    let start = samples.partition_point(|s| s.ts_ns < from);
    let end = samples.partition_point(|s| s.ts_ns < to);
    if start >= end {
        return None;
    }
    let (mut prev, first) = match start.checked_sub(1) {
        Some(before) => (&samples[before], start),
        None => (&samples[start], start + 1),
    };
    let bounds = samples[end - 1].bounds.clone();
    let mut total = vec![0.0; bounds.len() + 1];
    for cur in &samples[first..end] {
        let restarted =
            cur.bounds != prev.bounds || cur.counts.iter().zip(&prev.counts).any(|(c, p)| c < p);
        if cur.bounds == bounds {
            for (k, t) in total.iter_mut().enumerate() {
                *t += if restarted {
                    cur.counts[k]
                } else {
                    cur.counts[k] - prev.counts[k]
                };
            }
        }
        prev = cur;
    }
    Some((bounds, total))
}

/// One pod's requests over its threshold and in all, in the baseline and in the incident.
struct PodShares {
    worker: String,
    threshold_s: f64,
    baseline: (f64, f64),
    incident: (f64, f64),
}

impl PodShares {
    /// The pod's shares over the first bound at or above [`THRESHOLD_QUANTILE`] of its
    /// baseline; `None` without baseline requests or when only the overflow bucket reaches it.
    fn of(worker: &str, bounds: &[f64], base: &[f64], inc: &[f64]) -> Option<Self> {
        let n: f64 = base.iter().sum();
        if n <= 0.0 {
            return None;
        }
        let mut below = 0.0;
        let k = base.iter().position(|c| {
            below += c;
            below >= THRESHOLD_QUANTILE * n
        })?;
        let threshold_s = *bounds.get(k)?;
        let over = |counts: &[f64]| counts[k + 1..].iter().sum::<f64>();
        Some(Self {
            worker: worker.to_string(),
            threshold_s,
            baseline: (over(base), n),
            incident: (over(inc), inc.iter().sum()),
        })
    }

    /// The pod's smoothed baseline share over its threshold.
    fn baseline_share(&self) -> f64 {
        (self.baseline.0 + 0.5) / (self.baseline.1 + 1.0)
    }

    fn incident_share(&self) -> f64 {
        (self.incident.0 + 0.5) / (self.incident.1 + 1.0)
    }
}

/// The slow pods of `series` over the windows `(since, split, until)`.
fn judge(series: &HistogramSeries, (since, split, until): (i64, i64, i64)) -> Vec<SlowPod> {
    let mut by_measure: BTreeMap<&'static str, Vec<PodShares>> = BTreeMap::new();
    for (name, measure) in MEASURES {
        // per worker, its series' increases in each window, summed where their bounds agree
        // with the first's; a series need not span both windows (a rollout restarts the pod
        // under new resource attributes: one series ends at it, another begins)
        let mut per_worker: BTreeMap<&str, [Option<Buckets>; 2]> = BTreeMap::new();
        for ((worker, _, _), samples) in series.iter().filter(|(k, _)| k.1 == name) {
            let sums = per_worker.entry(worker.as_str()).or_default();
            for (sum, (from, to)) in sums.iter_mut().zip([(since, split), (split, until)]) {
                let Some((bounds, counts)) = increase(samples, from, to) else {
                    continue;
                };
                match sum {
                    Some((b, total)) if *b == bounds => add(total, &counts),
                    Some(_) => {}
                    None => *sum = Some((bounds, counts)),
                }
            }
        }
        let shares: Vec<PodShares> = per_worker
            .into_iter()
            .filter_map(|(worker, [base, inc])| {
                let ((bounds, base), (inc_bounds, inc)) = (base?, inc?);
                (bounds == inc_bounds).then(|| PodShares::of(worker, &bounds, &base, &inc))?
            })
            .collect();
        by_measure.insert(measure, shares);
    }
    let tests: usize = by_measure.values().map(Vec::len).sum();
    let bar = (tests.max(1) as f64).ln() + (1.0 / SLOW_POD_ALPHA).ln();
    let mut out = Vec::new();
    for (measure, pods) in &by_measure {
        for (i, pod) in pods.iter().enumerate() {
            let (over, n) = pod.incident;
            if n <= 0.0 || over < MIN_OVER {
                continue;
            }
            let expected = expected_share(pods, i);
            let share = over / n;
            if share < MIN_RISE * expected {
                continue;
            }
            let llr = binomial_llr(over, n, expected);
            if llr >= bar {
                out.push(SlowPod {
                    worker: pod.worker.clone(),
                    measure,
                    threshold_s: pod.threshold_s,
                    baseline: pod.baseline,
                    incident: pod.incident,
                    expected,
                    llr,
                });
            }
        }
    }
    out.sort_by(|a, b| b.llr.total_cmp(&a.llr));
    out
}

fn add(into: &mut [f64], from: &[f64]) {
    for (a, b) in into.iter_mut().zip(from) {
        *a += b;
    }
}

/// The share over its threshold that pod `i` would have in the incident had it changed as the
/// other pods did: its baseline share times their median rise (each pod's incident share over
/// its baseline share) or plus their median shift (the difference), whichever is more (a
/// slowdown that adds the same delay everywhere moves shares by about the same amount, one that
/// scales latency by about the same factor). Medians, not the pods pooled: other pods slowed by
/// causes of their own (a throttled GPU, a rollout on two of eight pods) would otherwise raise
/// what every pod is expected to do, and hide the pods that slowed together.
fn expected_share(pods: &[PodShares], i: usize) -> f64 {
    let own = pods[i].baseline_share();
    let others = || {
        pods.iter()
            .enumerate()
            .filter(move |(j, pod)| *j != i && pod.incident.1 > 0.0)
            .map(|(_, pod)| (pod.incident_share(), pod.baseline_share()))
    };
    let (Some(rise), Some(shift)) = (
        median(others().map(|(inc, base)| inc / base).collect()),
        median(others().map(|(inc, base)| inc - base).collect()),
    ) else {
        return own;
    };
    let scaled = own * rise.max(1.0);
    let shifted = own + shift.max(0.0);
    scaled.max(shifted).min(0.999)
}

/// The median of `values` (the mean of the middle two for an even count); `None` when empty.
fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// The log-likelihood ratio of `over` of `n` against a share `p0`, 0 when the share is lower.
fn binomial_llr(over: f64, n: f64, p0: f64) -> f64 {
    let p = over / n;
    if p <= p0 {
        return 0.0;
    }
    let term = |x: f64, a: f64, b: f64| if x > 0.0 { x * (a / b).ln() } else { 0.0 };
    term(over, p, p0) + term(n - over, 1.0 - p, 1.0 - p0)
}

#[cfg(test)]
mod tests {
    use infersight_model::rng::SplitMix64 as Rng;

    use super::*;

    const MIN: i64 = 60_000_000_000;
    const BOUNDS: [f64; 8] = [0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0];

    /// Cumulative samples every 30 s over `minutes`, `per_scrape` requests each, latencies
    /// log-normal around `median` s, from `from_minute` on a `slowed` share of them +`extra` s.
    fn series(
        rng: &mut Rng,
        minutes: i64,
        per_scrape: usize,
        median: f64,
        (from_minute, slowed, extra): (i64, f64, f64),
    ) -> Vec<Sample> {
        let mut counts = vec![0.0; BOUNDS.len() + 1];
        let mut out = Vec::new();
        for k in 1..=minutes * 2 {
            let ts_ns = k * MIN / 2;
            for _ in 0..per_scrape {
                let mut value: f64 = median * (0.3 * rng.normal()).exp();
                if ts_ns > from_minute * MIN && rng.uniform() < slowed {
                    value += extra;
                }
                counts[BOUNDS.partition_point(|b| *b < value)] += 1.0;
            }
            out.push(Sample {
                ts_ns,
                bounds: BOUNDS.to_vec(),
                counts: counts.clone(),
            });
        }
        out
    }

    /// Eight pods (medians 0.2–0.55 s) over 30 minutes, the incident from minute 20; `fault`
    /// gives pod `i`'s slowing (from minute, share, extra seconds).
    fn fleet(seed: u64, fault: impl Fn(usize) -> (i64, f64, f64)) -> Vec<SlowPod> {
        judge(&fleet_series(seed, fault), (MIN, 20 * MIN, 30 * MIN))
    }

    fn fleet_series(seed: u64, fault: impl Fn(usize) -> (i64, f64, f64)) -> HistogramSeries {
        let mut rng = Rng::new(seed);
        let mut all = HistogramSeries::new();
        for i in 0..8 {
            let key = (format!("worker-{i:02}"), "ttft_seconds".into(), "{}".into());
            let median = 0.2 + 0.05 * i as f64;
            all.insert(key, series(&mut rng, 30, 20, median, fault(i)));
        }
        all
    }

    #[test]
    fn the_increase_spans_the_window_and_a_restart_counts_from_zero() {
        let at = |ts_ns: i64, counts: [f64; 3]| Sample {
            ts_ns,
            bounds: vec![1.0, 2.0],
            counts: counts.to_vec(),
        };
        let samples = [
            at(0, [1.0, 0.0, 0.0]),
            at(10, [3.0, 1.0, 0.0]),
            at(20, [4.0, 1.0, 2.0]),
            at(30, [1.0, 0.0, 0.0]), // restarted: counts from zero
            at(40, [2.0, 1.0, 0.0]),
        ];
        assert_eq!(increase(&samples, 5, 25).unwrap().1, vec![3.0, 1.0, 2.0]);
        assert_eq!(increase(&samples, 25, 50).unwrap().1, vec![2.0, 1.0, 0.0]);
        // no sample before the window: from its first
        assert_eq!(increase(&samples, -5, 15).unwrap().1, vec![2.0, 1.0, 0.0]);
        assert!(increase(&samples, 41, 50).is_none());
    }

    #[test]
    fn a_pod_whose_share_of_slow_requests_rose_is_named_and_noise_is_not() {
        for seed in 1..=10 {
            let quiet = fleet(seed, |_| (0, 0.0, 0.0));
            assert!(quiet.is_empty(), "seed {seed}: noise named {quiet:?}");
            // a third of pod 3's requests gain 0.9 s in the incident
            let slowed = fleet(seed, |i| {
                if i == 3 {
                    (20, 0.3, 0.9)
                } else {
                    (0, 0.0, 0.0)
                }
            });
            assert_eq!(slowed.len(), 1, "seed {seed}: {slowed:?}");
            let pod = &slowed[0];
            assert_eq!((pod.worker.as_str(), pod.measure), ("worker-03", "ttft"));
            let share = pod.incident.0 / pod.incident.1;
            assert!(share > 0.15 && pod.expected < 0.15, "{pod:?}");
            // the same from minute 0: no rise between the windows
            let always = fleet(seed, |i| if i == 3 { (0, 0.3, 0.9) } else { (0, 0.0, 0.0) });
            assert!(always.is_empty(), "seed {seed}: {always:?}");
            // pod 3 restarted under new labels at the incident (a rollout): one series ends,
            // another begins, counting from zero
            let mut relabelled = fleet_series(seed, |i| {
                if i == 3 {
                    (20, 0.3, 0.9)
                } else {
                    (0, 0.0, 0.0)
                }
            });
            let key = (
                "worker-03".to_string(),
                "ttft_seconds".to_string(),
                "{}".to_string(),
            );
            let old = relabelled.remove(&key).unwrap();
            let (before, after): (Vec<Sample>, Vec<Sample>) =
                old.into_iter().partition(|s| s.ts_ns < 20 * MIN);
            let last = before.last().unwrap().counts.clone();
            let restarted = after
                .into_iter()
                .map(|mut s| {
                    s.counts.iter_mut().zip(&last).for_each(|(c, l)| *c -= l);
                    s
                })
                .collect();
            relabelled.insert(key.clone(), before);
            relabelled.insert((key.0, key.1, r#"{"version":"r3"}"#.into()), restarted);
            let found = judge(&relabelled, (MIN, 20 * MIN, 30 * MIN));
            assert_eq!(found.len(), 1, "seed {seed}: {found:?}");
            assert_eq!(found[0].worker, "worker-03");
            // every pod alike: the fleet's rise is no one pod's
            let fleet_wide = fleet(seed, |_| (20, 0.3, 0.9));
            assert!(fleet_wide.is_empty(), "seed {seed}: {fleet_wide:?}");
        }
    }

    #[test]
    fn pods_slowed_by_another_cause_hide_no_pod_that_slowed_too() {
        for seed in 1..=10 {
            // pods 1 and 5 lose a fifth of their requests to a rollout's +0.9 s; pod 2
            // throttles: most of its requests gain 2 s
            let found = fleet(seed, |i| match i {
                1 | 5 => (20, 0.2, 0.9),
                2 => (20, 0.8, 2.0),
                _ => (0, 0.0, 0.0),
            });
            let named: Vec<&str> = found.iter().map(|p| p.worker.as_str()).collect();
            for pod in ["worker-01", "worker-02", "worker-05"] {
                assert!(named.contains(&pod), "seed {seed}: {pod} not in {found:?}");
            }
            assert_eq!(named.len(), 3, "seed {seed}: {found:?}");
            // five of eight alike: still the fleet's
            let most = fleet(seed, |i| if i < 5 { (20, 0.3, 0.9) } else { (0, 0.0, 0.0) });
            assert!(most.is_empty(), "seed {seed}: {most:?}");
        }
    }
}
