//! SLOs and multi-window, multi-burn-rate alerts (Google SRE workbook, "Alerting on SLOs",
//! alert #6), computed from SLI rollups. The server evaluates them on an interval and keeps the
//! alert state; this module only computes: no clocks, no IO.
//!
//! An SLO says "`objective` of the requests in any `window` are good". A request is good when
//! its latency SLI is at most `threshold_ms` (latency SLOs, counted from the sketches, exact up
//! to the 1 % bucket width around the threshold) or when it did not fail (`error_rate` SLOs).
//! The burn rate over a window is `bad fraction / (1 - objective)`: 1 spends the budget exactly
//! over the SLO window. An alert fires when both its long and its short window burn faster than
//! its factor (the short window makes it resolve quickly once the problem is gone).

use infersight_rollup::{LatencySli, Rollup, Sli, merge_range};

const MINUTE_NS: i64 = 60_000_000_000;
const HOUR_NS: i64 = 60 * MINUTE_NS;

/// What makes a request good.
#[derive(Debug, Clone, PartialEq)]
pub enum SloTarget {
    /// `sli <= threshold_ms`.
    Latency { sli: LatencySli, threshold_ms: f64 },
    /// The request did not fail (`status != error`).
    Availability,
}

/// One declared SLO.
#[derive(Debug, Clone, PartialEq)]
pub struct Slo {
    pub name: String,
    pub target: SloTarget,
    /// Fraction of good requests promised, e.g. 0.99.
    pub objective: f64,
    /// The compliance window, e.g. 30 days.
    pub window_ns: i64,
    /// Only requests of combinations with these dimension values count.
    pub filters: Vec<(String, String)>,
}

impl Slo {
    /// Builds an SLO from the config's words: `sli` is a latency SLI name (then `threshold_ms`
    /// is required) or `error_rate` / `availability`.
    pub fn new(
        name: &str,
        sli: &str,
        threshold_ms: Option<f64>,
        objective: f64,
        window_ns: i64,
        filters: Vec<(String, String)>,
    ) -> Result<Slo, String> {
        let target = match (Sli::parse(sli), threshold_ms) {
            (Some(Sli::Latency(s)), Some(t)) if t > 0.0 && t.is_finite() => SloTarget::Latency {
                sli: s,
                threshold_ms: t,
            },
            (Some(Sli::Latency(_)), _) => {
                return Err(format!(
                    "slo {name}: latency sli `{sli}` needs a positive threshold_ms"
                ));
            }
            _ if sli == "error_rate" || sli == "availability" => SloTarget::Availability,
            _ => {
                return Err(format!(
                    "slo {name}: sli `{sli}` cannot be an slo; use a latency sli with threshold_ms, or error_rate"
                ));
            }
        };
        if !(objective > 0.0 && objective < 1.0) {
            return Err(format!(
                "slo {name}: objective {objective} must lie strictly between 0 and 1"
            ));
        }
        if window_ns < HOUR_NS {
            return Err(format!("slo {name}: window must be at least 1h"));
        }
        Ok(Slo {
            name: name.to_string(),
            target,
            objective,
            window_ns,
            filters,
        })
    }
}

/// Good and total requests in a range.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Events {
    pub good: u64,
    pub total: u64,
}

impl Events {
    pub fn bad_fraction(&self) -> Option<f64> {
        (self.total > 0).then(|| (self.total - self.good) as f64 / self.total as f64)
    }
}

/// Counts good and total requests of `slo` in `[since_ns, until_ns)`.
pub fn count_events(parts: &[&Rollup], slo: &Slo, since_ns: i64, until_ns: i64) -> Events {
    let cell = merge_range(parts, &slo.filters, Some(since_ns), Some(until_ns));
    match &slo.target {
        SloTarget::Latency { sli, threshold_ms } => {
            let sketch = cell.sketch(*sli);
            Events {
                good: sketch.count_at_most(*threshold_ms),
                total: sketch.count(),
            }
        }
        SloTarget::Availability => Events {
            good: cell.requests - cell.errors.min(cell.requests),
            total: cell.requests,
        },
    }
}

/// One alert rule: both windows must burn faster than `burn_rate`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BurnRule {
    pub severity: &'static str,
    pub long_ns: i64,
    pub short_ns: i64,
    pub burn_rate: f64,
}

/// The workbook's rules for a 30-day window: 2 % of the budget in 1 h or 5 % in 6 h page;
/// 10 % in 3 days opens a ticket. Windows scale with the SLO window (factors stay).
pub fn default_rules(window_ns: i64) -> Vec<BurnRule> {
    let scale = window_ns as f64 / (30.0 * 24.0 * HOUR_NS as f64);
    let w = |ns: i64| ((ns as f64 * scale) as i64).max(MINUTE_NS) / MINUTE_NS * MINUTE_NS;
    vec![
        BurnRule {
            severity: "page",
            long_ns: w(HOUR_NS),
            short_ns: w(5 * MINUTE_NS),
            burn_rate: 14.4,
        },
        BurnRule {
            severity: "page",
            long_ns: w(6 * HOUR_NS),
            short_ns: w(30 * MINUTE_NS),
            burn_rate: 6.0,
        },
        BurnRule {
            severity: "ticket",
            long_ns: w(72 * HOUR_NS),
            short_ns: w(6 * HOUR_NS),
            burn_rate: 1.0,
        },
    ]
}

/// Burn over one window.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowBurn {
    pub window_ns: i64,
    pub events: Events,
    /// `None` without requests in the window.
    pub burn_rate: Option<f64>,
}

/// One rule's verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleStatus {
    pub rule: BurnRule,
    pub long: WindowBurn,
    pub short: WindowBurn,
    pub firing: bool,
}

/// An SLO's state at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct SloStatus {
    pub name: String,
    pub objective: f64,
    /// Over the whole SLO window.
    pub compliance: Option<f64>,
    /// Fraction of the error budget left over the SLO window (negative when overspent).
    pub budget_remaining: Option<f64>,
    pub rules: Vec<RuleStatus>,
}

impl SloStatus {
    /// The most severe firing severity (`page` before `ticket`).
    pub fn firing_severities(&self) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = self
            .rules
            .iter()
            .filter(|r| r.firing)
            .map(|r| r.rule.severity)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }
}

fn window_burn(parts: &[&Rollup], slo: &Slo, now_ns: i64, window_ns: i64) -> WindowBurn {
    // whole minutes only: the current minute is still filling
    let until = now_ns.div_euclid(MINUTE_NS) * MINUTE_NS;
    let events = count_events(parts, slo, until - window_ns, until);
    WindowBurn {
        window_ns,
        events,
        burn_rate: events.bad_fraction().map(|bad| bad / (1.0 - slo.objective)),
    }
}

/// Evaluates `slo` at `now_ns` with `rules`.
pub fn evaluate(parts: &[&Rollup], slo: &Slo, rules: &[BurnRule], now_ns: i64) -> SloStatus {
    let whole = window_burn(parts, slo, now_ns, slo.window_ns);
    let rules = rules
        .iter()
        .map(|rule| {
            let long = window_burn(parts, slo, now_ns, rule.long_ns);
            let short = window_burn(parts, slo, now_ns, rule.short_ns);
            let over = |w: &WindowBurn| w.burn_rate.is_some_and(|b| b >= rule.burn_rate);
            RuleStatus {
                rule: *rule,
                firing: over(&long) && over(&short),
                long,
                short,
            }
        })
        .collect();
    SloStatus {
        name: slo.name.clone(),
        objective: slo.objective,
        compliance: whole.events.bad_fraction().map(|bad| 1.0 - bad),
        budget_remaining: whole.burn_rate.map(|b| 1.0 - b),
        rules,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infersight_model::RequestRecord;
    use infersight_model::tables::RequestBatchBuilder;
    use infersight_rollup::RollupSpec;

    const T0: i64 = 1_764_374_400_000_000_000;

    /// One request per second for `minutes`, TTFT 100 ms; from `bad_from` on, `bad_every`-th
    /// requests take 2 s and fail.
    fn traffic(minutes: i64, bad_from: i64, bad_every: i64) -> Rollup {
        let mut builder = RequestBatchBuilder::new();
        for second in 0..minutes * 60 {
            let bad = second >= bad_from * 60 && second % bad_every == 0;
            builder.push(&RequestRecord {
                ts: T0 + second * 1_000_000_000,
                worker: Some("w1".into()),
                ttft_ms: Some(if bad { 2000.0 } else { 100.0 }),
                status: Some(if bad { "error" } else { "ok" }.into()),
                ..RequestRecord::default()
            });
        }
        let mut rollup = Rollup::new(&RollupSpec::default());
        rollup.add_requests(&builder.finish()).unwrap();
        rollup
    }

    fn ttft_slo(window_ns: i64) -> Slo {
        Slo::new("ttft-500", "ttft", Some(500.0), 0.99, window_ns, Vec::new()).unwrap()
    }

    #[test]
    fn counts_good_events_for_latency_and_availability() {
        let rollup = traffic(10, 0, 4);
        let slo = ttft_slo(24 * HOUR_NS);
        let events = count_events(&[&rollup], &slo, T0, T0 + 10 * MINUTE_NS);
        assert_eq!(events.total, 600);
        assert_eq!(events.good, 450);
        let avail = Slo::new("avail", "error_rate", None, 0.999, 24 * HOUR_NS, Vec::new()).unwrap();
        let events = count_events(&[&rollup], &avail, T0, T0 + 5 * MINUTE_NS);
        assert_eq!((events.good, events.total), (225, 300));
        let other_worker = Slo {
            filters: vec![("worker".into(), "w2".into())],
            ..avail
        };
        assert_eq!(
            count_events(&[&rollup], &other_worker, T0, T0 + HOUR_NS).total,
            0
        );
    }

    #[test]
    fn fast_burn_pages_only_when_both_windows_burn() {
        // two healthy hours, then 10 % of requests slow for 20 minutes: burn rate 10 on a 99 %
        // SLO — not 14.4, so the 1h rule stays quiet; the 6h/30m rule (6) pages
        let rollup = traffic(140, 120, 10);
        let slo = ttft_slo(30 * 24 * HOUR_NS);
        let rules = default_rules(slo.window_ns);
        let now = T0 + 140 * MINUTE_NS;
        let status = evaluate(&[&rollup], &slo, &rules, now);
        let short_1h = &status.rules[0];
        assert!(
            (short_1h.short.burn_rate.unwrap() - 10.0).abs() < 0.01,
            "{short_1h:?}"
        );
        assert!(!short_1h.firing);
        let six_hours = &status.rules[1];
        // long window 6h covers 140 minutes of which 20 bad: 1.43 % bad → burn 1.43 < 6
        assert!(!six_hours.firing, "{six_hours:?}");
        // but that is above 1 over both ticket windows (3d and 6h hold the same 140 minutes)
        assert_eq!(status.firing_severities(), vec!["ticket"]);

        // everything failing for 20 minutes: 100 % bad → burn 100 in the short windows, and
        // 20/60 bad in the last hour → 33 ≥ 14.4
        let rollup = traffic(140, 120, 1);
        let status = evaluate(&[&rollup], &slo, &rules, now);
        assert!(status.rules[0].firing, "{:?}", status.rules[0]);
        assert_eq!(status.firing_severities(), vec!["page", "ticket"]);
        assert!(status.budget_remaining.unwrap() < 1.0);

        // an hour after the end of the incident the 5-minute window is clean: resolved
        let later = T0 + 200 * MINUTE_NS;
        let status = evaluate(&[&rollup], &slo, &rules, later);
        assert!(!status.rules[0].firing);
    }

    #[test]
    fn bad_declarations_are_refused_with_the_reason() {
        let day = 24 * HOUR_NS;
        assert!(
            Slo::new("a", "ttft", None, 0.99, day, vec![])
                .unwrap_err()
                .contains("threshold")
        );
        assert!(
            Slo::new("b", "ttft", Some(100.0), 1.0, day, vec![])
                .unwrap_err()
                .contains("objective")
        );
        assert!(
            Slo::new("c", "tokens", None, 0.9, day, vec![])
                .unwrap_err()
                .contains("cannot")
        );
        assert!(
            Slo::new("d", "error_rate", None, 0.9, MINUTE_NS, vec![])
                .unwrap_err()
                .contains("1h")
        );
        let rules = default_rules(30 * 24 * HOUR_NS);
        assert_eq!(rules[0].long_ns, HOUR_NS);
        assert_eq!(rules[0].short_ns, 5 * MINUTE_NS);
    }
}
