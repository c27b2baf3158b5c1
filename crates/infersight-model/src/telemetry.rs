//! The engine's own telemetry, the leaf every crate that counts uses: the [`catalog`] of metric
//! names, types and help texts (one place, so `/metrics` documents itself consistently), and
//! [`Counters`], the registry receivers, pipeline stages, the ingest queue and the API update and
//! `/metrics` renders as Prometheus text: an observability engine must be observable.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use std::sync::Mutex;

type Labels = Vec<(&'static str, String)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    Counter,
    Gauge,
}

/// One metric of the catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metric {
    pub name: &'static str,
    pub kind: MetricType,
    pub help: &'static str,
}

/// Every metric infersight exposes about itself on `/metrics` (the fleet's SLIs and SLO burn
/// rates, rendered from rollups, are written by the server's `sli_metrics`). Labels stay
/// low-cardinality: protocol, signal, outcome, stage, reason, job, table, counter, sink, target.
pub mod catalog {
    use super::{Metric, MetricType::Counter, MetricType::Gauge};

    const fn metric(name: &'static str, kind: super::MetricType, help: &'static str) -> Metric {
        Metric { name, kind, help }
    }

    pub const RECEIVER_REQUESTS: Metric = metric(
        "infersight_receiver_requests_total",
        Counter,
        "export requests received, by protocol, signal and outcome",
    );
    pub const RECEIVER_RECORDS: Metric = metric(
        "infersight_receiver_records_total",
        Counter,
        "records received, by protocol, signal and outcome",
    );
    pub const SCRAPES: Metric = metric(
        "infersight_scrapes_total",
        Counter,
        "scrapes of Prometheus targets, by job, outcome and failure reason",
    );
    pub const SCRAPE_SAMPLES: Metric = metric(
        "infersight_scrape_samples_total",
        Counter,
        "samples parsed from scraped expositions, by job",
    );
    pub const SCRAPE_PARSE_WARNINGS: Metric = metric(
        "infersight_scrape_parse_warnings_total",
        Counter,
        "incomplete parts of scraped expositions (cut last line, histogram without +Inf), by job",
    );
    pub const STAGE_RECEIVED_ROWS: Metric = metric(
        "infersight_stage_received_rows_total",
        Counter,
        "rows received by a stage",
    );
    pub const STAGE_EMITTED_ROWS: Metric = metric(
        "infersight_stage_emitted_rows_total",
        Counter,
        "rows a stage passed on",
    );
    pub const STAGE_FAILED_ROWS: Metric = metric(
        "infersight_stage_failed_rows_total",
        Counter,
        "rows a stage failed to process",
    );
    pub const STAGE_DROPPED_ROWS: Metric = metric(
        "infersight_stage_dropped_rows_total",
        Counter,
        "rows not accepted by a stage, by reason (queue_full: the client was told to retry)",
    );
    pub const STAGE_DETAIL: Metric = metric(
        "infersight_stage_detail_total",
        Counter,
        "stage-specific counters (e.g. redactions per detector)",
    );
    pub const QUEUE_DEPTH: Metric = metric(
        "infersight_queue_depth",
        Gauge,
        "submissions waiting in the ingest queue",
    );
    pub const AUDIT_WRITES: Metric = metric(
        "infersight_audit_writes_total",
        Counter,
        "access audit lines written (ok) or lost (failed)",
    );
    pub const STORE_SEGMENTS: Metric = metric(
        "infersight_store_segments",
        Gauge,
        "parquet segments in the catalog",
    );
    pub const STORE_SEGMENT_ROWS: Metric = metric(
        "infersight_store_segment_rows",
        Gauge,
        "rows in parquet segments",
    );
    pub const STORE_SEGMENT_BYTES: Metric = metric(
        "infersight_store_segment_bytes",
        Gauge,
        "bytes of parquet segments",
    );
    pub const STORE_TIER_SEGMENTS: Metric = metric(
        "infersight_store_tier_segments",
        Gauge,
        "parquet segments by tier: hot (local files), warm and cold (in the bucket)",
    );
    pub const STORE_TIER_SEGMENT_BYTES: Metric = metric(
        "infersight_store_tier_segment_bytes",
        Gauge,
        "bytes of parquet segments by tier",
    );
    pub const STORE_ORG_ROWS: Metric = metric(
        "infersight_store_org_rows",
        Gauge,
        "rows in parquet segments by org (every table and tier)",
    );
    pub const STORE_ORG_BYTES: Metric = metric(
        "infersight_store_org_bytes",
        Gauge,
        "bytes of parquet segments by org: each segment's bytes split by its rows",
    );
    pub const STORE_MEMTABLE_ROWS: Metric = metric(
        "infersight_store_memtable_rows",
        Gauge,
        "rows in the memtable, not yet in segments",
    );
    pub const STORE_MEMTABLE_BYTES: Metric = metric(
        "infersight_store_memtable_bytes",
        Gauge,
        "bytes held by the memtable",
    );
    pub const STORE_WAL_BYTES: Metric = metric(
        "infersight_store_wal_bytes",
        Gauge,
        "bytes in write-ahead log files",
    );
    pub const STORE_APPENDS: Metric = metric(
        "infersight_store_appends",
        Gauge,
        "store appends since start",
    );
    pub const STORE_FSYNCS: Metric =
        metric("infersight_store_fsyncs", Gauge, "wal fsyncs since start");
    pub const STORE_FLUSHES: Metric = metric(
        "infersight_store_flushes",
        Gauge,
        "memtable flushes since start",
    );
    pub const STORE_COMPACTIONS: Metric = metric(
        "infersight_store_compactions",
        Gauge,
        "compactions since start",
    );
    pub const STORE_QUARANTINED: Metric = metric(
        "infersight_store_quarantined_total",
        Counter,
        "corrupt store files set aside in <data>/quarantine since start, by kind (segment, rollup, wal)",
    );
    pub const STORE_WAL_REGIONS_DROPPED: Metric = metric(
        "infersight_store_wal_regions_dropped_total",
        Counter,
        "unreadable write-ahead log regions skipped at replay since start (each held a record or more)",
    );
    pub const STORE_BUCKET_CACHE_READS: Metric = metric(
        "infersight_store_bucket_cache_reads_total",
        Counter,
        "segment and sidecar reads from the bucket's read cache since start, by result (hit: memory, disk_hit, miss, bypass: too large to cache)",
    );
    pub const STORE_BUCKET_CACHE_EVICTIONS: Metric = metric(
        "infersight_store_bucket_cache_evictions_total",
        Counter,
        "objects the bucket's read cache dropped to stay within its size since start",
    );
    pub const STORE_BUCKET_CACHE_BYTES: Metric = metric(
        "infersight_store_bucket_cache_bytes",
        Gauge,
        "bytes held by the bucket's read cache in memory",
    );
    pub const STORE_BUCKET_CACHE_DISK_BYTES: Metric = metric(
        "infersight_store_bucket_cache_disk_bytes",
        Gauge,
        "bytes held by the bucket's read cache on disk (<data>/bucket-cache/)",
    );
    pub const QUERY_PLANS: Metric = metric(
        "infersight_query_plans_total",
        Counter,
        "statements' physical plans by route since start (cluster: accepted by a Ballista cluster; here: run on this node by choice; fallback: meant for the cluster, run here because submitting failed or the cluster's stream failed, the latter also counted as cluster)",
    );

    pub const NOTIFICATIONS_SENT: Metric = metric(
        "infersight_notifications_sent_total",
        Counter,
        "notifications a sink accepted (2xx), by sink and target",
    );
    pub const NOTIFICATIONS_FAILED: Metric = metric(
        "infersight_notifications_failed_total",
        Counter,
        "notifications given up on (attempts exhausted, or refused with a 4xx), by sink and target",
    );
    pub const NOTIFICATION_RETRIES: Metric = metric(
        "infersight_notification_retries_total",
        Counter,
        "failed notification attempts that were retried, by sink and target",
    );
    pub const NOTIFICATIONS_DROPPED: Metric = metric(
        "infersight_notifications_dropped_total",
        Counter,
        "notifications never attempted, by sink, target and reason (queue_full, shutdown)",
    );
    pub const NOTIFICATION_QUEUE_DEPTH: Metric = metric(
        "infersight_notification_queue_depth",
        Gauge,
        "notifications waiting for a sink, by sink and target",
    );

    /// The whole catalog, for documentation and the uniqueness test.
    pub const ALL: &[Metric] = &[
        RECEIVER_REQUESTS,
        RECEIVER_RECORDS,
        SCRAPES,
        SCRAPE_SAMPLES,
        SCRAPE_PARSE_WARNINGS,
        STAGE_RECEIVED_ROWS,
        STAGE_EMITTED_ROWS,
        STAGE_FAILED_ROWS,
        STAGE_DROPPED_ROWS,
        STAGE_DETAIL,
        QUEUE_DEPTH,
        AUDIT_WRITES,
        STORE_SEGMENTS,
        STORE_SEGMENT_ROWS,
        STORE_SEGMENT_BYTES,
        STORE_TIER_SEGMENTS,
        STORE_TIER_SEGMENT_BYTES,
        STORE_ORG_ROWS,
        STORE_ORG_BYTES,
        STORE_MEMTABLE_ROWS,
        STORE_MEMTABLE_BYTES,
        STORE_WAL_BYTES,
        STORE_BUCKET_CACHE_READS,
        STORE_BUCKET_CACHE_EVICTIONS,
        STORE_BUCKET_CACHE_BYTES,
        STORE_BUCKET_CACHE_DISK_BYTES,
        STORE_APPENDS,
        STORE_FSYNCS,
        STORE_FLUSHES,
        STORE_COMPACTIONS,
        STORE_QUARANTINED,
        STORE_WAL_REGIONS_DROPPED,
        QUERY_PLANS,
        NOTIFICATIONS_SENT,
        NOTIFICATIONS_FAILED,
        NOTIFICATION_RETRIES,
        NOTIFICATIONS_DROPPED,
        NOTIFICATION_QUEUE_DEPTH,
    ];
}

/// One metric family: its type, help text and the value of each label set.
type Family = (MetricType, &'static str, BTreeMap<Labels, f64>);

#[derive(Default)]
pub struct Counters {
    series: Mutex<BTreeMap<&'static str, Family>>,
}

impl Counters {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `by` to a counter. Labels must be low-cardinality (protocol, signal, stage, reason).
    pub fn add(&self, metric: &Metric, labels: &[(&'static str, &str)], by: u64) {
        debug_assert_eq!(metric.kind, MetricType::Counter, "{}", metric.name);
        self.update(metric, labels, |v| *v += by as f64);
    }

    /// Sets a counter to a cumulative value kept elsewhere (e.g. a pipeline stage's own counts).
    pub fn set_counter(&self, metric: &Metric, labels: &[(&'static str, &str)], value: u64) {
        debug_assert_eq!(metric.kind, MetricType::Counter, "{}", metric.name);
        self.update(metric, labels, |v| *v = value as f64);
    }

    pub fn set_gauge(&self, metric: &Metric, labels: &[(&'static str, &str)], value: f64) {
        debug_assert_eq!(metric.kind, MetricType::Gauge, "{}", metric.name);
        self.update(metric, labels, |v| *v = value);
    }

    /// Replaces every series of a gauge with `values` (one label `label` each): a series not
    /// in `values` is gone, not left at its last value (orgs whose data all expired, say).
    pub fn set_gauges(&self, metric: &Metric, label: &'static str, values: &[(&str, f64)]) {
        debug_assert_eq!(metric.kind, MetricType::Gauge, "{}", metric.name);
        let family = values
            .iter()
            .map(|(value, v)| (vec![(label, value.to_string())], *v))
            .collect();
        let mut series = self
            .series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        series.insert(metric.name, (metric.kind, metric.help, family));
    }

    fn update(
        &self,
        metric: &Metric,
        labels: &[(&'static str, &str)],
        apply: impl FnOnce(&mut f64),
    ) {
        let key: Labels = labels.iter().map(|(k, v)| (*k, v.to_string())).collect();
        let mut series = self
            .series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = series
            .entry(metric.name)
            .or_insert_with(|| (metric.kind, metric.help, BTreeMap::new()));
        apply(entry.2.entry(key).or_insert(0.0));
    }

    /// Current value of one series (tests and the CLI summary).
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let series = self
            .series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        series
            .get(name)
            .and_then(|(_, _, values)| {
                values.iter().find_map(|(l, v)| {
                    let matches = labels
                        .iter()
                        .all(|(k, want)| l.iter().any(|(lk, lv)| lk == k && lv == want));
                    matches.then_some(*v)
                })
            })
            .unwrap_or(0.0)
    }

    /// Sum of every series of a metric whose labels include `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let series = self
            .series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        series
            .get(name)
            .map(|(_, _, values)| {
                values
                    .iter()
                    .filter(|(l, _)| {
                        labels
                            .iter()
                            .all(|(k, want)| l.iter().any(|(lk, lv)| lk == k && lv == want))
                    })
                    .map(|(_, v)| *v)
                    .sum()
            })
            .unwrap_or(0.0)
    }

    pub fn render(&self) -> String {
        let series = self
            .series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = String::new();
        for (name, (kind, help, values)) in series.iter() {
            let _ = writeln!(out, "# HELP {name} {help}");
            let type_name = match kind {
                MetricType::Counter => "counter",
                MetricType::Gauge => "gauge",
            };
            let _ = writeln!(out, "# TYPE {name} {type_name}");
            for (labels, value) in values {
                out.push_str(name);
                if !labels.is_empty() {
                    out.push('{');
                    for (i, (k, v)) in labels.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        let escaped = v
                            .replace('\\', "\\\\")
                            .replace('"', "\\\"")
                            .replace('\n', "\\n");
                        let _ = write!(out, "{k}=\"{escaped}\"");
                    }
                    out.push('}');
                }
                let _ = writeln!(out, " {value}");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text_with_escaped_labels() {
        const X: Metric = Metric {
            name: "infersight_x_total",
            kind: MetricType::Counter,
            help: "things",
        };
        const DEPTH: Metric = Metric {
            name: "infersight_depth",
            kind: MetricType::Gauge,
            help: "depth",
        };
        let c = Counters::new();
        c.add(&X, &[("reason", "a\"b")], 2);
        c.add(&X, &[("reason", "a\"b")], 3);
        c.set_gauge(&DEPTH, &[], 7.0);
        let text = c.render();
        assert!(text.contains("# TYPE infersight_x_total counter"), "{text}");
        assert!(
            text.contains("infersight_x_total{reason=\"a\\\"b\"} 5"),
            "{text}"
        );
        assert!(text.contains("infersight_depth 7"), "{text}");
        assert_eq!(c.get("infersight_x_total", &[("reason", "a\"b")]), 5.0);
    }

    #[test]
    fn catalog_names_are_unique_and_follow_prometheus_conventions() {
        let mut names: Vec<&str> = catalog::ALL.iter().map(|m| m.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "a metric name is in the catalog twice");
        for m in catalog::ALL {
            assert!(m.name.starts_with("infersight_"), "{}", m.name);
            assert!(!m.help.is_empty(), "{}", m.name);
            // counters end in _total, except the store's cumulative gauges (kept for dashboards)
            if m.kind == MetricType::Counter {
                assert!(m.name.ends_with("_total"), "{}", m.name);
            }
        }
    }
}
