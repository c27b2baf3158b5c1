//! Per-org ingest limits (issue 22, Loki's and Mimir's per-tenant ingestion rate): the ingest
//! gate, once it knows which org an export is for (`orgs::write_org`), asks [`IngestLimiter`]
//! for one export of that org; past its rate the export is refused with 429 and `Retry-After`
//! (OTLP exporters retry those), before its body is read. The rate counts export requests, not
//! rows or bytes: an exporter's batch size sets how many rows one export carries.
//!
//! Configured per org in `[auth.orgs.<org>]` (`ingest_exports_per_s`, `ingest_burst`); an org
//! not listed is not limited. Limits apply where the gate runs, that is with authentication on.

use std::collections::{BTreeMap, HashMap};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// `[auth.orgs.<org>]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrgLimitConfig {
    /// Exports (OTLP requests) per second, averaged.
    pub ingest_exports_per_s: f64,
    /// How many exports may arrive at once after a quiet spell; default: one second's worth
    /// (at least one).
    #[serde(default)]
    pub ingest_burst: Option<u32>,
}

impl OrgLimitConfig {
    /// Every problem, each naming `auth.orgs.<org>.KEY`.
    pub fn validate(&self, org: &str) -> Vec<String> {
        let mut errors = Vec::new();
        if !(self.ingest_exports_per_s.is_finite() && self.ingest_exports_per_s > 0.0) {
            errors.push(format!(
                "auth.orgs.{org}.ingest_exports_per_s: must be a positive number, not {}",
                self.ingest_exports_per_s
            ));
        }
        if self.ingest_burst == Some(0) {
            errors.push(format!("auth.orgs.{org}.ingest_burst: must be at least 1"));
        }
        errors
    }
}

/// One org's token bucket.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at_ns: i64,
}

/// The ingest rate of each limited org, and what each has left.
#[derive(Debug, Default)]
pub struct IngestLimiter {
    /// org → (exports per second, burst).
    limits: BTreeMap<String, (f64, f64)>,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl IngestLimiter {
    /// The limiter of `[auth.orgs]` (validated: see [`OrgLimitConfig::validate`]; invalid
    /// entries are left out).
    pub fn new(orgs: &BTreeMap<String, OrgLimitConfig>) -> IngestLimiter {
        let limits = orgs
            .iter()
            .filter(|(org, limit)| limit.validate(org).is_empty())
            .map(|(org, limit)| {
                let rate = limit.ingest_exports_per_s;
                let burst = limit.ingest_burst.map_or(rate.ceil().max(1.0), f64::from);
                (org.clone(), (rate, burst))
            })
            .collect();
        IngestLimiter {
            limits,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one export of `org` at `now_ns`; `Err(seconds)` when it is over its rate: retry
    /// after that many seconds (at least 1).
    pub fn admit(&self, org: &str, now_ns: i64) -> Result<(), u64> {
        let Some(&(rate, burst)) = self.limits.get(org) else {
            return Ok(());
        };
        let mut buckets = self.buckets.lock();
        let bucket = buckets.entry(org.to_string()).or_insert(Bucket {
            tokens: burst,
            at_ns: now_ns,
        });
        let elapsed_s = now_ns.saturating_sub(bucket.at_ns).max(0) as f64 / 1e9;
        bucket.tokens = (bucket.tokens + elapsed_s * rate).min(burst);
        bucket.at_ns = bucket.at_ns.max(now_ns);
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        let wait_s = ((1.0 - bucket.tokens) / rate).ceil();
        Err(if wait_s.is_finite() {
            (wait_s as u64).max(1)
        } else {
            u64::MAX
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    fn limiter(rate: f64, burst: Option<u32>) -> IngestLimiter {
        let mut orgs = BTreeMap::new();
        orgs.insert(
            "acme".to_string(),
            OrgLimitConfig {
                ingest_exports_per_s: rate,
                ingest_burst: burst,
            },
        );
        IngestLimiter::new(&orgs)
    }

    #[test]
    fn an_org_past_its_burst_waits_for_its_rate_and_others_do_not() {
        let limiter = limiter(0.5, Some(3));
        for _ in 0..3 {
            assert_eq!(limiter.admit("acme", 10 * S), Ok(()));
        }
        // empty: one export every two seconds
        assert_eq!(limiter.admit("acme", 10 * S), Err(2));
        assert_eq!(limiter.admit("acme", 11 * S), Err(1));
        assert_eq!(limiter.admit("acme", 12 * S), Ok(()));
        assert_eq!(limiter.admit("acme", 12 * S), Err(2));
        // a long quiet spell refills the burst, no more
        for _ in 0..3 {
            assert_eq!(limiter.admit("acme", 1_000 * S), Ok(()));
        }
        assert!(limiter.admit("acme", 1_000 * S).is_err());
        // an org without a limit, and a clock going backwards
        for _ in 0..100 {
            assert_eq!(limiter.admit("globex", 0), Ok(()));
        }
        assert!(limiter.admit("acme", 0).is_err());
    }

    #[test]
    fn the_default_burst_is_a_seconds_worth_and_bad_limits_are_named() {
        let limiter = limiter(2.5, None);
        for _ in 0..3 {
            assert_eq!(limiter.admit("acme", 0), Ok(()));
        }
        assert_eq!(limiter.admit("acme", 0), Err(1));
        for (rate, burst) in [(0.0, None), (-1.0, None), (f64::NAN, None), (1.0, Some(0))] {
            let config = OrgLimitConfig {
                ingest_exports_per_s: rate,
                ingest_burst: burst,
            };
            let errors = config.validate("acme");
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert!(errors[0].starts_with("auth.orgs.acme."), "{errors:?}");
        }
        // an invalid limit is left out rather than refusing everything
        assert_eq!(self::limiter(0.0, None).admit("acme", 0), Ok(()));
    }
}
