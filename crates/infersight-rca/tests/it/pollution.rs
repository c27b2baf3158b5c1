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

/// 90 minutes: three senders share a 6k-token system prompt (≈ 80 % of their input cached on
/// the two prefix-caching workers); from minute 60 the polluter sends 16k-token documents of
/// distinct prefixes and the others' hit rate falls to ≈ 15 %.
fn fleet(key: SenderKey, seed: u64) -> Vec<RequestRecord> {
    let mut rng = SplitMix64::new(seed);
    let mut rows = Vec::new();
    for minute in 0..90i64 {
        let polluting = minute >= 60;
        for (s, sender) in SENDERS.iter().enumerate() {
            for k in 0..6i64 {
                let ts = base_ns() + minute * MINUTE_NS + (s as i64 * 6 + k) * 2_000_000_000;
                let scanning = *sender == POLLUTER && polluting;
                let input: i64 = if scanning {
                    16_000 + (rng.uniform() * 4_000.0) as i64
                } else {
                    7_000 + (rng.uniform() * 800.0) as i64
                };
                let hit = if *sender == POLLUTER {
                    if scanning { 0.0 } else { 0.1 }
                } else if polluting {
                    0.15
                } else {
                    0.8
                };
                let cached =
                    (input as f64 * (hit + 0.04 * (rng.uniform() - 0.5)).clamp(0.0, 1.0)) as i64;
                let mut attrs = String::from("{\"service.name\":\"llm-backend\"}");
                let mut row = RequestRecord {
                    ts,
                    request_id: Some(format!("chatcmpl-{seed}-{minute}-{s}-{k}")),
                    model: Some("qwen2.5-14b".into()),
                    worker: Some(format!("backend-{}", (s + k as usize) % 2)),
                    input_tokens: Some(input),
                    cached_tokens: Some(cached),
                    output_tokens: Some(200),
                    e2e_ms: Some(1_500.0),
                    ..Default::default()
                };
                match key {
                    SenderKey::TenantColumn => row.tenant = Some(sender.to_string()),
                    SenderKey::Attribute(name) => {
                        attrs =
                            format!("{{\"{name}\":\"{sender}\",\"service.name\":\"llm-backend\"}}");
                    }
                }
                row.attrs = attrs;
                rows.push(row);
            }
        }
    }
    rows
}

#[tokio::test]
async fn the_polluter_is_the_subject_whatever_plays_the_tenant() {
    for key in [
        SenderKey::TenantColumn,
        SenderKey::Attribute("user.org"),
        SenderKey::Attribute("api_key_sha256"),
    ] {
        let store = TestStore::new();
        store.append_requests(&fleet(key, 7));
        let signals = collect_signals(&store.engine(), &rca_context("ttft", Vec::new()))
            .await
            .unwrap();
        let pollution: Vec<_> = signals
            .iter()
            .filter(|s| s.kind == SignalKind::CachePollution)
            .collect();
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
