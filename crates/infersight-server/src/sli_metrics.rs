//! Derived SLIs on `/metrics`, from the rollups of the last five whole minutes, so a Prometheus
//! that scrapes `infersight serve` gets fleet SLIs without any recording rules.
//!
//! Series (labels are low-cardinality by construction: `sli` and `q` are fixed lists,
//! `model` is capped at [`MAX_MODELS`] values, the rest fold into `model="other"`):
//! - `infersight_sli_latency_seconds{sli, q, model}`: p50/p95/p99 (`q` = 0.5, 0.95, 0.99; not
//!   `quantile`, which Prometheus reserves for summaries) of ttft, tpot, e2e, queue;
//! - `infersight_sli_ratio{sli, model}`: error_rate, abort_rate, prefix_cache_hit_rate,
//!   token_efficiency;
//! - `infersight_sli_requests_per_second{model}` and
//!   `infersight_sli_output_tokens_per_second{model}`.

use std::fmt::Write as _;
use std::sync::Arc;

use infersight_rollup::{CounterSli, LatencySli, Rollup, Sli, SliQuery, SliSeries, query_rollups};
use infersight_store::{StorageBackend, StoreError, TimeRange};

use crate::alerts::escape;

/// The window the SLIs cover.
pub const WINDOW_MINUTES: i64 = 5;
/// Models beyond this many (by traffic) are reported together as `other`.
pub const MAX_MODELS: usize = 20;

const MINUTE_NS: i64 = 60_000_000_000;
const QUANTILES: [f64; 3] = [0.5, 0.95, 0.99];

fn query(parts: &[&Rollup], sli: Sli, since: i64, until: i64) -> Vec<SliSeries> {
    query_rollups(
        parts,
        &SliQuery {
            sli,
            quantiles: QUANTILES.to_vec(),
            by: vec!["model".to_string()],
            filters: Vec::new(),
            since_ns: Some(since),
            until_ns: Some(until),
            step_ns: None,
        },
    )
    .unwrap_or_default()
}

/// The text exposition of the derived SLIs at `now_ns` (empty without traffic or rollups).
pub fn render(store: &dyn StorageBackend, now_ns: i64) -> Result<String, StoreError> {
    let until = now_ns.div_euclid(MINUTE_NS) * MINUTE_NS;
    let since = until - WINDOW_MINUTES * MINUTE_NS;
    let parts: Vec<Arc<Rollup>> = match store.rollups(TimeRange {
        since_ns: Some(since),
        until_ns: Some(until),
    }) {
        Ok(parts) => parts,
        Err(StoreError::RollupsDisabled) => return Ok(String::new()),
        Err(err) => return Err(err),
    };
    let refs: Vec<&Rollup> = parts.iter().map(Arc::as_ref).collect();
    // the models with the most requests keep their own label
    let mut by_traffic: Vec<(String, u64)> =
        query(&refs, Sli::Counter(CounterSli::RequestRate), since, until)
            .into_iter()
            .map(|s| (s.group[0].1.clone(), s.points[0].requests))
            .collect();
    by_traffic.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let kept: Vec<String> = by_traffic
        .iter()
        .take(MAX_MODELS)
        .map(|(m, _)| m.clone())
        .collect();
    let label = |model: &str| {
        if kept.iter().any(|k| k == model) {
            if model.is_empty() {
                "unknown".to_string()
            } else {
                escape(model)
            }
        } else {
            "other".to_string()
        }
    };
    let mut out = String::new();
    if kept.is_empty() {
        return Ok(out);
    }
    out.push_str("# HELP infersight_sli_latency_seconds Latency SLI quantiles over the last 5 minutes, from rollups.\n# TYPE infersight_sli_latency_seconds gauge\n");
    for sli in [
        LatencySli::Ttft,
        LatencySli::Tpot,
        LatencySli::E2e,
        LatencySli::Queue,
    ] {
        for series in query(&refs, Sli::Latency(sli), since, until) {
            if !kept.contains(&series.group[0].1) {
                continue; // folded models have no meaningful merged quantile here
            }
            for (q, value) in QUANTILES.iter().zip(&series.points[0].values) {
                if let Some(ms) = value {
                    let _ = writeln!(
                        out,
                        "infersight_sli_latency_seconds{{sli=\"{}\",q=\"{q}\",model=\"{}\"}} {}",
                        sli.name(),
                        label(&series.group[0].1),
                        ms / 1000.0
                    );
                }
            }
        }
    }
    out.push_str("# HELP infersight_sli_ratio Ratio SLIs over the last 5 minutes, from rollups.\n# TYPE infersight_sli_ratio gauge\n");
    for sli in [
        CounterSli::ErrorRate,
        CounterSli::AbortRate,
        CounterSli::PrefixCacheHitRate,
        CounterSli::TokenEfficiency,
    ] {
        for series in query(&refs, Sli::Counter(sli), since, until) {
            if let Some(value) = series.points[0].values[0]
                && kept.contains(&series.group[0].1)
            {
                let _ = writeln!(
                    out,
                    "infersight_sli_ratio{{sli=\"{}\",model=\"{}\"}} {value}",
                    sli.name(),
                    label(&series.group[0].1)
                );
            }
        }
    }
    for (name, sli, help) in [
        (
            "infersight_sli_requests_per_second",
            CounterSli::RequestRate,
            "Requests per second over the last 5 minutes.",
        ),
        (
            "infersight_sli_output_tokens_per_second",
            CounterSli::OutputTokensPerSecond,
            "Output tokens per second over the last 5 minutes.",
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        let mut other = 0.0;
        for series in query(&refs, Sli::Counter(sli), since, until) {
            let value = series.points[0].values[0].unwrap_or(0.0);
            if kept.contains(&series.group[0].1) {
                let _ = writeln!(
                    out,
                    "{name}{{model=\"{}\"}} {value}",
                    label(&series.group[0].1)
                );
            } else {
                other += value;
            }
        }
        if other > 0.0 {
            let _ = writeln!(out, "{name}{{model=\"other\"}} {other}");
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use infersight_model::{RequestRecord, Table, TableBatch};
    use infersight_store::{FsyncPolicy, Store, StoreOptions};

    #[test]
    fn renders_the_last_five_minutes_per_model() {
        let dir = tempfile::tempdir().unwrap();
        let mut options = StoreOptions::new(dir.path());
        options.fsync = FsyncPolicy::Never;
        let store = Store::open(options).unwrap();
        let now = 1_764_374_400_000_000_000 + 10 * MINUTE_NS + 30_000_000_000;
        let records: Vec<RequestRecord> = (0..600)
            .map(|i| RequestRecord {
                // one request per second over the last 10 minutes
                ts: now - 600_000_000_000 + i * 1_000_000_000,
                model: Some(if i % 3 == 0 { "llama" } else { "qwen" }.into()),
                ttft_ms: Some(200.0),
                status: Some(if i % 10 == 0 { "error" } else { "ok" }.into()),
                output_tokens: Some(10),
                ..RequestRecord::default()
            })
            .collect();
        store
            .append(&[TableBatch {
                table: Table::Requests,
                batch: RequestRecord::to_batch(&records),
            }])
            .unwrap();
        let text = render(&store, now).unwrap();
        assert!(
            text.contains(
                "infersight_sli_latency_seconds{sli=\"ttft\",q=\"0.99\",model=\"qwen\"} 0.2"
            ),
            "{text}"
        );
        // five whole minutes: 300 requests, 1 per second
        let rate: f64 = text
            .lines()
            .filter(|l| l.starts_with("infersight_sli_requests_per_second{"))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum();
        assert!((rate - 1.0).abs() < 1e-9, "{text}");
        assert!(
            text.contains("infersight_sli_ratio{sli=\"error_rate\",model=\"llama\"}"),
            "{text}"
        );
    }
}
