//! The `cache_pollution` signal over hand-made `requests`: from the onset one sender scans long
//! documents of distinct prefixes through the prefix-caching workers, evicting the system
//! prompt its neighbours share. The signal names the polluter (its subject), whatever plays the
//! tenant's part: the mapped `tenant` column, or an attribute no mapping table knows (an
//! organisation key, an API key's hash); the victims and their hit rates are in the detail.

use infersight_model::RequestRecord;
use infersight_model::rng::SplitMix64;
use infersight_rca::{SignalKind, collect_signals};

use crate::support::{EngineOf, MINUTE_NS, TestStore, base_ns, rca_context};

const SENDERS: [&str; 4] = ["northwind", "initech", "umbrella", "scanco"];
const POLLUTER: &str = "scanco";

/// Where the sender is written.
#[derive(Debug, Clone, Copy)]
enum SenderKey {
    TenantColumn,
    Attribute(&'static str),
}

/// What changes from minute 60.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Change {
    /// The polluter scans long documents of distinct prefixes; the others' hit rate falls.
    Pollution,
    /// No one pollutes: a fault makes one request in three of every sender time out before its
    /// prefill (a long prompt, no token cached, an error status).
    Timeouts,
}

/// The serving build each worker reports: `backend-0` runs a new engine release.
fn build_of(worker: usize) -> &'static str {
    if worker == 0 { "0.10.2" } else { "0.4.9" }
}

/// 90 minutes: three senders share a 6k-token system prompt (≈ 80 % of their input cached on
/// the two prefix-caching workers); from minute 60, `change`. Under [`Change::Pollution`] the
/// polluter's scans go to `backend-0` when `builds` (each row then carries its worker's
/// `service.version` and tracer scope, so the new build serves the polluter and the old one its
/// victims).
fn fleet(key: SenderKey, seed: u64, change: Change, builds: bool) -> Vec<RequestRecord> {
    let mut rng = SplitMix64::new(seed);
    let mut rows = Vec::new();
    for minute in 0..90i64 {
        let changed = minute >= 60;
        for (s, sender) in SENDERS.iter().enumerate() {
            for k in 0..6i64 {
                let ts = base_ns() + minute * MINUTE_NS + (s as i64 * 6 + k) * 2_000_000_000;
                let scanning = change == Change::Pollution && *sender == POLLUTER && changed;
                let timed_out = change == Change::Timeouts && changed && k % 3 == 0;
                let input: i64 = if scanning || timed_out {
                    16_000 + (rng.uniform() * 4_000.0) as i64
                } else {
                    7_000 + (rng.uniform() * 800.0) as i64
                };
                let hit = if timed_out || scanning {
                    0.0
                } else if *sender == POLLUTER {
                    0.1
                } else if changed && change == Change::Pollution {
                    0.15
                } else {
                    0.8
                };
                let cached =
                    (input as f64 * (hit + 0.04 * (rng.uniform() - 0.5)).clamp(0.0, 1.0)) as i64;
                let worker = if scanning && builds {
                    0
                } else {
                    (s + k as usize) % 2
                };
                let mut fields = vec![("service.name".to_string(), "llm-backend".to_string())];
                if builds {
                    fields.push(("service.version".into(), build_of(worker).into()));
                    let scope = ["vllm.tracing", "sglang.tracing"][worker];
                    fields.push(("otel.scope.name".into(), scope.into()));
                }
                let mut row = RequestRecord {
                    ts,
                    request_id: Some(format!("chatcmpl-{seed}-{minute}-{s}-{k}")),
                    model: Some("qwen2.5-14b".into()),
                    worker: Some(format!("backend-{worker}")),
                    input_tokens: Some(input),
                    cached_tokens: Some(cached),
                    output_tokens: Some(if timed_out { 0 } else { 200 }),
                    e2e_ms: Some(if timed_out { 30_000.0 } else { 1_500.0 }),
                    ..Default::default()
                };
                if timed_out {
                    row.status = Some("error".into());
                    row.error_type = Some("timeout".into());
                }
                match key {
                    SenderKey::TenantColumn => row.tenant = Some(sender.to_string()),
                    SenderKey::Attribute(name) => fields.push((name.into(), sender.to_string())),
                }
                let attrs: Vec<String> = fields
                    .iter()
                    .map(|(k, v)| format!("\"{k}\":\"{v}\""))
                    .collect();
                row.attrs = format!("{{{}}}", attrs.join(","));
                rows.push(row);
            }
        }
    }
    rows
}

/// The cache-pollution signals of `rows`.
async fn pollution_of(rows: &[RequestRecord]) -> Vec<infersight_rca::Signal> {
    let store = TestStore::new();
    store.append_requests(rows);
    let signals = collect_signals(&store.engine(), &rca_context("ttft", Vec::new()))
        .await
        .unwrap();
    signals
        .into_iter()
        .filter(|s| s.kind == SignalKind::CachePollution)
        .collect()
}

#[tokio::test]
async fn the_polluter_is_the_subject_whatever_plays_the_tenant() {
    for key in [
        SenderKey::TenantColumn,
        SenderKey::Attribute("user.org"),
        SenderKey::Attribute("api_key_sha256"),
    ] {
        let pollution = pollution_of(&fleet(key, 7, Change::Pollution, false)).await;
        let context = format!("{key:?}: {pollution:#?}");
        assert_eq!(pollution.len(), 1, "{context}");
        let subject_key = match key {
            SenderKey::TenantColumn => "tenant",
            SenderKey::Attribute(name) => name,
        };
        assert_eq!(
            pollution[0].subject.get(subject_key).map(String::as_str),
            Some(POLLUTER),
            "{context}"
        );
        assert_eq!(pollution[0].subject.len(), 1, "{context}");
        for victim in &SENDERS[..3] {
            assert!(
                pollution[0]
                    .detail
                    .contains(&format!("{subject_key}={victim} ")),
                "victim {victim} named: {context}"
            );
        }
    }
}

/// A build serves requests; it sends none. Where the sender is an attribute no mapping knows,
/// a `service.version` or a tracer's `otel.scope.name` of few values could pass for one: here
/// the new build serves the polluter's scans and the old one its victims, so the build's
/// "tenants" show a polluter and a victim too. The sender is named, the build is not.
#[tokio::test]
async fn a_build_that_serves_the_polluter_is_not_named_in_its_place() {
    for seed in [7, 8] {
        let rows = fleet(
            SenderKey::Attribute("customer.org"),
            seed,
            Change::Pollution,
            true,
        );
        let pollution = pollution_of(&rows).await;
        let context = format!("seed {seed}: {pollution:#?}");
        assert_eq!(pollution.len(), 1, "{context}");
        assert_eq!(
            pollution[0].subject.get("customer.org").map(String::as_str),
            Some(POLLUTER),
            "{context}"
        );
        for serving in ["service.version", "otel.scope.name"] {
            assert!(!pollution[0].detail.contains(serving), "{context}");
        }
    }
}

/// A request that timed out before its prefill looked nothing up in the prefix cache: a fault
/// that makes every sender's long prompts time out lowers no hit rate and scatters no one's
/// accesses, so it names no polluter.
#[tokio::test]
async fn timeouts_are_no_cache_pollution() {
    for key in [SenderKey::TenantColumn, SenderKey::Attribute("user.org")] {
        let rows = fleet(key, 11, Change::Timeouts, false);
        let pollution = pollution_of(&rows).await;
        assert!(pollution.is_empty(), "{key:?}: {pollution:#?}");
    }
}

/// 70 minutes: `northwind` (six requests a minute, no shared prefix) and the polluter as in
/// [`fleet`], and `globex`, a sender of 1.5 requests a minute whose 12k-token system
/// prompt is 95 % cached until the polluter's scans (from minute 60) have evicted it, at minute
/// 65: the last five of the incident's ten minutes.
fn sparse_victim_fleet(seed: u64) -> Vec<RequestRecord> {
    let mut rng = SplitMix64::new(seed);
    let mut rows = Vec::new();
    let mut row =
        |ts: i64, sender: &str, worker: usize, input: i64, hit: f64, rng: &mut SplitMix64| {
            let cached =
                (input as f64 * (hit + 0.04 * (rng.uniform() - 0.5)).clamp(0.0, 1.0)) as i64;
            rows.push(RequestRecord {
                ts,
                request_id: Some(format!("chatcmpl-{seed}-{ts}")),
                tenant: Some(sender.to_string()),
                model: Some("qwen2.5-14b".into()),
                worker: Some(format!("backend-{worker}")),
                input_tokens: Some(input),
                cached_tokens: Some(cached),
                output_tokens: Some(200),
                e2e_ms: Some(1_500.0),
                ..Default::default()
            });
        };
    for minute in 0..70i64 {
        let at = |slot: i64| base_ns() + minute * MINUTE_NS + slot * 2_000_000_000;
        for k in 0..6i64 {
            let input = 7_000 + (rng.uniform() * 800.0) as i64;
            row(at(k), "northwind", k as usize % 2, input, 0.1, &mut rng);
            let (input, hit) = if minute >= 60 {
                (16_000 + (rng.uniform() * 4_000.0) as i64, 0.0)
            } else {
                (7_000 + (rng.uniform() * 800.0) as i64, 0.1)
            };
            row(at(6 + k), POLLUTER, k as usize % 2, input, hit, &mut rng);
        }
        for k in 0..3i64 {
            if rng.uniform() < 0.5 {
                let input = 12_000 + (rng.uniform() * 2_000.0) as i64;
                let hit = if minute >= 65 { 0.0 } else { 0.95 };
                row(at(12 + k), "globex", k as usize % 2, input, hit, &mut rng);
            }
        }
    }
    rows
}

/// A sender of 1.5 requests a minute is pooled over minutes, and its cache was evicted only five
/// minutes after the polluter began: its pooled medians do not move, its token-weighted hit
/// rate from the eviction on has. The polluter is named, with that victim.
#[tokio::test]
async fn a_sparse_victim_evicted_late_names_its_polluter() {
    for seed in [21, 22, 23, 24] {
        let pollution = pollution_of(&sparse_victim_fleet(seed)).await;
        let context = format!("seed {seed}: {pollution:#?}");
        assert_eq!(pollution.len(), 1, "{context}");
        assert_eq!(
            pollution[0].subject.get("tenant").map(String::as_str),
            Some(POLLUTER),
            "{context}"
        );
        assert!(pollution[0].detail.contains("tenant=globex "), "{context}");
        assert!(
            !pollution[0].detail.contains("tenant=northwind "),
            "{context}"
        );
    }
}
