//! Per-org ingest limits (issue 22, Loki's and Mimir's per-tenant ingestion rate): the ingest
//! gate, once it knows which org an export is for (`orgs::write_org`), asks [`IngestLimiter`]
//! for one export of that org; past its rate the export is refused with 429 and `Retry-After`
//! (OTLP exporters retry those), before its body is read. The rate counts export requests, not
//! rows or bytes: an exporter's batch size sets how many rows one export carries.
//!
//! The same gate refuses, with 429, the exports of an org whose rows already take its
//! `max_storage_bytes` in segments ([`StorageQuota`]); `serve` counts every org's stored bytes
//! from the catalog every few seconds.
//!
//! Configured per org in `[auth.orgs.<org>]` (`ingest_exports_per_s`, `ingest_burst`); an org
//! not listed is not limited. Limits apply where the gate runs, that is with authentication on.
//!
//! The same section caps how many statements an org's callers run at once
//! (`max_concurrent_queries`, [`OrgQuerySlots`]): the API gate takes a slot of every limited org a
//! request reads before SQL, dimension discovery or root-cause analysis runs, and refuses with
//! 429 and `Retry-After` when one is full, so one team's dashboards cannot take every core from
//! the others.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// `[auth.orgs.<org>]`; what is not set is not limited.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrgLimitConfig {
    /// Exports (OTLP requests) per second, averaged.
    #[serde(default)]
    pub ingest_exports_per_s: Option<f64>,
    /// How many exports may arrive at once after a quiet spell; default: one second's worth
    /// (at least one).
    #[serde(default)]
    pub ingest_burst: Option<u32>,
    /// Statements (SQL, dimension discovery, root-cause analysis) the org's callers may run at
    /// once; more are answered 429 with `Retry-After`.
    #[serde(default)]
    pub max_concurrent_queries: Option<usize>,
    /// How long the org's rows of every table are kept after their hour ended (`30d`); the
    /// store rewrites the segments holding older ones without them. Tables' own retention
    /// applies too.
    #[serde(default)]
    pub retention: Option<String>,
    /// Bytes the org's rows may take in segments (every table and tier; see
    /// `infersight_store::OrgUsage`); once they take that much, its exports are refused with
    /// 429 until retention or a higher limit makes room. Rows not yet flushed count once they
    /// are, so the org may pass the limit by what one flush writes.
    #[serde(default)]
    pub max_storage_bytes: Option<u64>,
}

impl OrgLimitConfig {
    /// `retention` parsed (`None`: unset or not a positive duration).
    pub fn retention_duration(&self) -> Option<std::time::Duration> {
        let ns = infersight_model::time::parse_duration_ns(self.retention.as_deref()?)?;
        (ns > 0).then(|| std::time::Duration::from_nanos(ns as u64))
    }

    /// Every problem, each naming `auth.orgs.<org>.KEY`.
    pub fn validate(&self, org: &str) -> Vec<String> {
        let mut errors = Vec::new();
        if let Some(rate) = self.ingest_exports_per_s
            && !(rate.is_finite() && rate > 0.0)
        {
            errors.push(format!(
                "auth.orgs.{org}.ingest_exports_per_s: must be a positive number, not {rate}"
            ));
        }
        if self.ingest_burst.is_some() && self.ingest_exports_per_s.is_none() {
            errors.push(format!(
                "auth.orgs.{org}.ingest_burst: set without ingest_exports_per_s"
            ));
        }
        if let Some(text) = &self.retention
            && self.retention_duration().is_none()
        {
            errors.push(format!(
                "auth.orgs.{org}.retention: `{text}` is not a positive duration like 12h, 30d"
            ));
        }
        if self.max_concurrent_queries == Some(0) {
            errors.push(format!(
                "auth.orgs.{org}.max_concurrent_queries: must be at least 1"
            ));
        }
        if self.max_storage_bytes == Some(0) {
            errors.push(format!(
                "auth.orgs.{org}.max_storage_bytes: must be at least 1"
            ));
        }
        if self.ingest_burst == Some(0) {
            errors.push(format!("auth.orgs.{org}.ingest_burst: must be at least 1"));
        }
        errors
    }
}

/// What `pick` takes of each org's valid limits (an org with an invalid key is left out, see
/// [`OrgLimitConfig::validate`]), for the orgs where it takes something.
fn valid_limits<T>(
    orgs: &BTreeMap<String, OrgLimitConfig>,
    pick: impl Fn(&OrgLimitConfig) -> Option<T>,
) -> BTreeMap<String, T> {
    (orgs.iter())
        .filter(|(org, limit)| limit.validate(org).is_empty())
        .filter_map(|(org, limit)| Some((org.clone(), pick(limit)?)))
        .collect()
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
        let limits = valid_limits(orgs, |limit| {
            let rate = limit.ingest_exports_per_s?;
            let burst = limit.ingest_burst.map_or(rate.ceil().max(1.0), f64::from);
            Some((rate, burst))
        });
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

/// The bytes each org with a `max_storage_bytes` may store, against what it stored when last
/// counted ([`StorageQuota::record`], every [`STORAGE_POLL`] in `serve`).
#[derive(Debug, Default)]
pub struct StorageQuota {
    limits: BTreeMap<String, u64>,
    used: parking_lot::RwLock<BTreeMap<String, u64>>,
}

/// How often `serve` counts each org's stored bytes for [`StorageQuota`].
pub const STORAGE_POLL: std::time::Duration = std::time::Duration::from_secs(5);

impl StorageQuota {
    /// The quota of `[auth.orgs]` (validated; invalid entries are left out).
    pub fn new(orgs: &BTreeMap<String, OrgLimitConfig>) -> StorageQuota {
        StorageQuota {
            limits: valid_limits(orgs, |limit| limit.max_storage_bytes),
            used: parking_lot::RwLock::default(),
        }
    }

    /// Whether any org has a storage limit (else nothing needs counting).
    pub fn is_empty(&self) -> bool {
        self.limits.is_empty()
    }

    /// The stored bytes of every org, as the store counted them now.
    pub fn record(&self, usage: &BTreeMap<String, infersight_store::OrgUsage>) {
        let used = (self.limits.keys())
            .map(|org| (org.clone(), usage.get(org).map_or(0, |u| u.bytes)))
            .collect();
        *self.used.write() = used;
    }

    /// `Err((stored, limit))` when `org` has a limit and stores that much already.
    pub fn admit(&self, org: &str) -> Result<(), (u64, u64)> {
        let Some(&limit) = self.limits.get(org) else {
            return Ok(());
        };
        let stored = self.used.read().get(org).copied().unwrap_or(0);
        if stored >= limit {
            return Err((stored, limit));
        }
        Ok(())
    }

    /// `org`'s limit and what it stored when last counted; `None` without a limit.
    pub fn usage(&self, org: &str) -> Option<(u64, u64)> {
        let &limit = self.limits.get(org)?;
        Some((self.used.read().get(org).copied().unwrap_or(0), limit))
    }
}

/// How many statements each limited org runs now, against its `max_concurrent_queries`.
#[derive(Debug, Default)]
pub struct OrgQuerySlots {
    limits: BTreeMap<String, usize>,
    running: Arc<Mutex<HashMap<String, usize>>>,
}

/// Slots of the limited orgs one request reads, held while its statement runs
/// ([`OrgQuerySlots::try_acquire`]); dropping it frees them.
#[derive(Debug)]
pub struct OrgQueryPermit {
    running: Arc<Mutex<HashMap<String, usize>>>,
    orgs: Vec<String>,
}

impl Drop for OrgQueryPermit {
    fn drop(&mut self) {
        let mut running = self.running.lock();
        for org in &self.orgs {
            if let Some(count) = running.get_mut(org) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    running.remove(org);
                }
            }
        }
    }
}

impl OrgQuerySlots {
    /// The slots of `[auth.orgs]` (validated; invalid entries are left out).
    pub fn new(orgs: &BTreeMap<String, OrgLimitConfig>) -> OrgQuerySlots {
        OrgQuerySlots {
            limits: valid_limits(orgs, |limit| limit.max_concurrent_queries),
            running: Arc::default(),
        }
    }

    /// One slot of every limited org in `orgs` (the orgs a request reads), all or none;
    /// `Err((org, limit))` names an org whose slots are all taken. A request that reads every
    /// org (an admin, authentication off) is not limited by any one org.
    pub fn try_acquire(&self, orgs: &[String]) -> Result<OrgQueryPermit, (String, usize)> {
        let limited: Vec<&String> = (orgs.iter())
            .filter(|org| self.limits.contains_key(*org))
            .collect();
        let mut running = self.running.lock();
        for org in &limited {
            let limit = self.limits[*org];
            if running.get(*org).copied().unwrap_or(0) >= limit {
                return Err(((*org).clone(), limit));
            }
        }
        for org in &limited {
            *running.entry((*org).clone()).or_insert(0) += 1;
        }
        Ok(OrgQueryPermit {
            running: Arc::clone(&self.running),
            orgs: limited.into_iter().cloned().collect(),
        })
    }

    /// Statements `org` runs now.
    pub fn running(&self, org: &str) -> usize {
        self.running.lock().get(org).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_org_at_its_query_limit_is_refused_until_a_statement_ends_and_others_run() {
        let mut orgs = BTreeMap::new();
        let limit = |n| OrgLimitConfig {
            max_concurrent_queries: Some(n),
            ..OrgLimitConfig::default()
        };
        orgs.insert("acme".to_string(), limit(2));
        orgs.insert("globex".to_string(), limit(1));
        let slots = OrgQuerySlots::new(&orgs);
        let acme = vec!["acme".to_string()];
        let both = vec!["acme".to_string(), "globex".to_string()];
        let first = slots.try_acquire(&acme).unwrap();
        let second = slots.try_acquire(&both).unwrap();
        assert_eq!((slots.running("acme"), slots.running("globex")), (2, 1));
        assert_eq!(
            slots.try_acquire(&acme).unwrap_err(),
            ("acme".to_string(), 2)
        );
        // all or none: globex is full, so acme's count does not move either
        drop(first);
        let err = slots.try_acquire(&both).unwrap_err();
        assert_eq!(err, ("globex".to_string(), 1));
        assert_eq!(slots.running("acme"), 1);
        // an org without a limit, and every org at once, are not limited
        for _ in 0..5 {
            std::mem::forget(slots.try_acquire(&["initech".to_string()]).unwrap());
        }
        assert_eq!(slots.running("initech"), 0);
        drop(second);
        assert_eq!((slots.running("acme"), slots.running("globex")), (0, 0));
        let _again = slots.try_acquire(&both).unwrap();
    }

    #[test]
    fn an_org_storing_its_limit_is_refused_until_it_stores_less_and_others_are_not() {
        let mut orgs = BTreeMap::new();
        let limit = |bytes| OrgLimitConfig {
            max_storage_bytes: Some(bytes),
            ..OrgLimitConfig::default()
        };
        orgs.insert("acme".to_string(), limit(1_000));
        orgs.insert("globex".to_string(), limit(0));
        let quota = StorageQuota::new(&orgs);
        assert!(!quota.is_empty());
        // nothing counted yet: nothing stored
        assert_eq!(quota.admit("acme"), Ok(()));
        let usage = |pairs: &[(&str, u64)]| {
            (pairs.iter())
                .map(|&(org, bytes)| {
                    (
                        org.to_string(),
                        infersight_store::OrgUsage { rows: 1, bytes },
                    )
                })
                .collect::<BTreeMap<_, _>>()
        };
        quota.record(&usage(&[("acme", 999), ("initech", 1 << 40)]));
        assert_eq!(quota.admit("acme"), Ok(()));
        assert_eq!(quota.usage("acme"), Some((999, 1_000)));
        quota.record(&usage(&[("acme", 1_000)]));
        assert_eq!(quota.admit("acme"), Err((1_000, 1_000)));
        // an org without a limit, and an invalid limit (left out), are not limited
        assert_eq!(quota.admit("initech"), Ok(()));
        assert_eq!(quota.admit("globex"), Ok(()));
        assert_eq!(quota.usage("initech"), None);
        // retention made room
        quota.record(&usage(&[("acme", 10)]));
        assert_eq!(quota.admit("acme"), Ok(()));
        assert_eq!(
            limit(0).validate("globex"),
            ["auth.orgs.globex.max_storage_bytes: must be at least 1"]
        );
    }

    const S: i64 = 1_000_000_000;

    fn limiter(rate: f64, burst: Option<u32>) -> IngestLimiter {
        let mut orgs = BTreeMap::new();
        orgs.insert(
            "acme".to_string(),
            OrgLimitConfig {
                ingest_exports_per_s: Some(rate),
                ingest_burst: burst,
                ..OrgLimitConfig::default()
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
                ingest_exports_per_s: Some(rate),
                ingest_burst: burst,
                ..OrgLimitConfig::default()
            };
            let errors = config.validate("acme");
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert!(errors[0].starts_with("auth.orgs.acme."), "{errors:?}");
        }
        // an invalid limit is left out rather than refusing everything
        assert_eq!(self::limiter(0.0, None).admit("acme", 0), Ok(()));
        let burst_alone = OrgLimitConfig {
            ingest_burst: Some(3),
            ..OrgLimitConfig::default()
        };
        assert_eq!(burst_alone.validate("acme").len(), 1);
        let no_queries = OrgLimitConfig {
            max_concurrent_queries: Some(0),
            ..OrgLimitConfig::default()
        };
        let errors = no_queries.validate("acme");
        assert!(
            errors == ["auth.orgs.acme.max_concurrent_queries: must be at least 1"],
            "{errors:?}"
        );
        let retention = |text: &str| OrgLimitConfig {
            retention: Some(text.into()),
            ..OrgLimitConfig::default()
        };
        assert_eq!(
            retention("30d").retention_duration(),
            Some(std::time::Duration::from_secs(30 * 86_400))
        );
        for bad in ["forever", "0s", ""] {
            let errors = retention(bad).validate("acme");
            assert!(
                errors.len() == 1 && errors[0].starts_with("auth.orgs.acme.retention: "),
                "{bad}: {errors:?}"
            );
        }
    }
}
