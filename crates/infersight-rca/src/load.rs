//! Load-driven queueing among the causes: after localization and the signals read off the
//! causes, before the advice. A cause whose requests waited longer in the queue while their own
//! prefill and decode did not change, and whose queue time rose and fell with its request rate,
//! is the load on its workers, not a fault of what the slice names (a model version, an
//! adapter set): it is labelled as load (a `queue_buildup` signal, its evidence says so) and no
//! `version_regression` is read off it, so the advice is capacity and admission, not a rollback.
//!
//! Decision rule (documented because the advice follows it), on the slice's cells of the rollups
//! (or the leaf rollup the causes came from), baseline vs incident, at least
//! [`MIN_REQUESTS`] requests each side:
//! - queue time rose: p50 or p90 of `queue` at least [`QUEUE_FACTOR`] × and
//!   [`QUEUE_MIN_RISE_MS`] more;
//! - the work did not change: p50 of `prefill` and of `decode` within [`FLAT_FACTOR`] × either
//!   way (a slice without those phases is not judged);
//! - load rose: the slice's requests per minute at least [`LOAD_FACTOR`] ×;
//! - queue time follows load: across the minutes of both windows, the rank correlation of the
//!   slice's requests per minute and its p90 queue time is at least [`MIN_CORRELATION`] (a
//!   misconfigured batching wait steps up once and stays there, whatever the load).

use std::collections::BTreeMap;
use std::sync::Arc;

use infersight_model::signal::{SignalKind, Subject};
use infersight_query::QueryError;
use infersight_rollup::{Cell, LatencySli, Rollup, merge_range};
use infersight_store::TimeRange;

use crate::{LOAD_DRIVEN, MINUTE_NS, RcaContext, RcaReport, Signal};

/// Requests each side before a slice is judged.
pub const MIN_REQUESTS: u64 = 30;
/// Queue time must grow by this factor…
pub const QUEUE_FACTOR: f64 = 1.5;
/// …and by this many milliseconds.
pub const QUEUE_MIN_RISE_MS: f64 = 10.0;
/// Prefill and decode p50 within this factor either way count as unchanged.
pub const FLAT_FACTOR: f64 = 1.2;
/// The slice's requests per minute must grow by this factor.
pub const LOAD_FACTOR: f64 = 1.15;
/// Rank correlation of requests per minute and p90 queue time, minute by minute.
pub const MIN_CORRELATION: f64 = 0.5;
/// Minutes with fewer requests of the slice are left out of the correlation.
const MIN_MINUTE_REQUESTS: u64 = 3;
/// Causes examined (the ranked ones a report shows).
const MAX_CAUSES: usize = 3;

/// What made a cause load-driven queueing: (baseline, incident) of each measure.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadQueueing {
    /// p90 queue time, ms.
    pub queue_ms: (f64, f64),
    pub prefill_ms: (f64, f64),
    pub decode_ms: (f64, f64),
    /// Requests per minute.
    pub rate: (f64, f64),
    /// Rank correlation of requests per minute and p90 queue time across the minutes.
    pub correlation: f64,
}

impl LoadQueueing {
    /// One line of evidence.
    pub fn detail(&self) -> String {
        format!(
            "{LOAD_DRIVEN}: queue p90 {:.0} ms → {:.0} ms while prefill p50 ({:.0} → {:.0} ms) and decode p50 ({:.0} → {:.0} ms) did not change; {:.0} → {:.0} requests/min (×{:.2}), queue time follows the load minute by minute (rank correlation {:.2})",
            self.queue_ms.0,
            self.queue_ms.1,
            self.prefill_ms.0,
            self.prefill_ms.1,
            self.decode_ms.0,
            self.decode_ms.1,
            self.rate.0,
            self.rate.1,
            self.rate.1 / self.rate.0.max(f64::MIN_POSITIVE),
            self.correlation
        )
    }
}

fn minutes(range: TimeRange) -> f64 {
    match (range.since_ns, range.until_ns) {
        (Some(a), Some(b)) if b > a => (b - a) as f64 / MINUTE_NS as f64,
        _ => 0.0,
    }
}

fn p(cell: &Cell, sli: LatencySli, q: f64) -> Option<f64> {
    cell.sketch(sli).quantile(q)
}

/// Whether the slice `filters` of `refs` is load-driven queueing between the windows of `ctx`
/// (the module's rule).
pub fn load_queueing(
    refs: &[&Rollup],
    ctx: &RcaContext,
    filters: &[(String, String)],
) -> Option<LoadQueueing> {
    let window = |w: TimeRange| merge_range(refs, filters, w.since_ns, w.until_ns);
    let (base, inc) = (window(ctx.baseline), window(ctx.incident));
    if base.requests < MIN_REQUESTS || inc.requests < MIN_REQUESTS {
        return None;
    }
    let rose = |q: f64| {
        let (before, after) = (
            p(&base, LatencySli::Queue, q)?,
            p(&inc, LatencySli::Queue, q)?,
        );
        Some(after >= QUEUE_FACTOR * before && after - before >= QUEUE_MIN_RISE_MS)
    };
    if !(rose(0.5)? || rose(0.9)?) {
        return None;
    }
    let flat = |sli: LatencySli| -> Option<(f64, f64)> {
        let (before, after) = (p(&base, sli, 0.5)?, p(&inc, sli, 0.5)?);
        let unchanged =
            before > 0.0 && after <= FLAT_FACTOR * before && after * FLAT_FACTOR >= before;
        unchanged.then_some((before, after))
    };
    let prefill_ms = flat(LatencySli::Prefill)?;
    let decode_ms = flat(LatencySli::Decode)?;
    let (base_minutes, inc_minutes) = (minutes(ctx.baseline), minutes(ctx.incident));
    if base_minutes <= 0.0 || inc_minutes <= 0.0 {
        return None;
    }
    let rate = (
        base.requests as f64 / base_minutes,
        inc.requests as f64 / inc_minutes,
    );
    if rate.1 < LOAD_FACTOR * rate.0 {
        return None;
    }
    let correlation = load_follows_queue(refs, ctx, filters)?;
    (correlation >= MIN_CORRELATION).then(|| LoadQueueing {
        queue_ms: (
            p(&base, LatencySli::Queue, 0.9).unwrap_or(0.0),
            p(&inc, LatencySli::Queue, 0.9).unwrap_or(0.0),
        ),
        prefill_ms,
        decode_ms,
        rate,
        correlation,
    })
}

/// Rank correlation, minute by minute over both windows, of the slice's requests and its p90
/// queue time; `None` with fewer than 10 usable minutes.
fn load_follows_queue(
    refs: &[&Rollup],
    ctx: &RcaContext,
    filters: &[(String, String)],
) -> Option<f64> {
    let since = ctx.baseline.since_ns?.min(ctx.incident.since_ns?);
    let until = ctx.baseline.until_ns?.max(ctx.incident.until_ns?);
    let mut points: Vec<(f64, f64)> = Vec::new();
    let mut minute = since.div_euclid(MINUTE_NS) * MINUTE_NS;
    while minute < until {
        let cell = merge_range(refs, filters, Some(minute), Some(minute + MINUTE_NS));
        if cell.requests >= MIN_MINUTE_REQUESTS
            && let Some(queue) = p(&cell, LatencySli::Queue, 0.9)
        {
            points.push((cell.requests as f64, queue));
        }
        minute += MINUTE_NS;
    }
    if points.len() < 10 {
        return None;
    }
    let xs: Vec<f64> = points.iter().map(|p| p.0).collect();
    let ys: Vec<f64> = points.iter().map(|p| p.1).collect();
    Some(pearson(&ranks(&xs), &ranks(&ys)))
}

/// Ranks with ties averaged (1-based).
fn ranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let mut out = vec![0.0; values.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && values[order[j + 1]] == values[order[i]] {
            j += 1;
        }
        let rank = (i + j) as f64 / 2.0 + 1.0;
        for &k in &order[i..=j] {
            out[k] = rank;
        }
        i = j + 1;
    }
    out
}

fn pearson(xs: &[f64], ys: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (x, y) in xs.iter().zip(ys) {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx) * (x - mx);
        syy += (y - my) * (y - my);
    }
    if sxx <= 0.0 || syy <= 0.0 {
        return 0.0;
    }
    sxy / (sxx * syy).sqrt()
}

/// Labels the load-driven queueing causes of `report` (the module's rule): their evidence leads
/// with the load line, a `queue_buildup` signal names them, the `version_regression` and
/// `slow_worker` signals read off them are dropped, and when the top cause is one the verdict
/// says so. `leaf_rollup`, when the causes came from one, is read instead of the store's rollups.
/// Reads rollups: call it on a blocking thread.
pub fn label_load_causes(
    store: &dyn infersight_store::StorageBackend,
    leaf_rollup: Option<&Rollup>,
    ctx: &RcaContext,
    report: &mut RcaReport,
) -> Result<(), QueryError> {
    if report.root_causes.is_empty() {
        return Ok(());
    }
    let parts = match leaf_rollup {
        Some(_) => Vec::new(),
        None => store.rollups(TimeRange::ALL)?,
    };
    let refs: Vec<&Rollup> = match leaf_rollup {
        Some(rollup) => vec![rollup],
        None => parts.iter().map(Arc::as_ref).collect(),
    };
    for index in 0..report.root_causes.len().min(MAX_CAUSES) {
        let subject: BTreeMap<String, String> = report.root_causes[index].dimensions.clone().into();
        let filters: Vec<(String, String)> = subject.into_iter().collect();
        let Some(load) = load_queueing(&refs, ctx, &filters) else {
            continue;
        };
        label(report, index, &load, ctx.onset_ns);
    }
    Ok(())
}

/// Writes the label of the cause at `index` (see [`label_load_causes`]).
fn label(report: &mut RcaReport, index: usize, load: &LoadQueueing, onset_ns: i64) {
    let cause = &mut report.root_causes[index];
    let detail = load.detail();
    cause.evidence.insert(0, detail.clone());
    let subject = cause.dimensions.clone();
    report.signals.retain(|s| {
        !(s.subject == subject
            && matches!(
                s.kind,
                SignalKind::VersionRegression | SignalKind::SlowWorker
            ))
    });
    report.signals.push(Signal {
        kind: SignalKind::QueueBuildup,
        subject: subject.clone(),
        onset: onset_ns,
        strength: load.rate.1 / load.rate.0.max(f64::MIN_POSITIVE),
        detail: format!("{}: {detail}", Subject::describe(&subject)),
    });
    if index == 0 {
        report.verdict = format!(
            "{}; {} is load-driven queueing, not a fault of its version: add capacity or admission control there",
            report.verdict,
            Subject::describe(&subject)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_average_ties_and_pearson_of_ranks_is_spearman() {
        assert_eq!(ranks(&[10.0, 30.0, 20.0, 20.0]), [1.0, 4.0, 2.5, 2.5]);
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        let rising = [2.0, 4.0, 9.0, 16.0, 100.0];
        assert!((pearson(&ranks(&x), &ranks(&rising)) - 1.0).abs() < 1e-12);
        let falling: Vec<f64> = rising.iter().rev().copied().collect();
        assert!((pearson(&ranks(&x), &ranks(&falling)) + 1.0).abs() < 1e-12);
        assert_eq!(pearson(&[1.0, 1.0], &[2.0, 3.0]), 0.0);
    }
}
