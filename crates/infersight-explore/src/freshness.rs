//! Freshness: when the store last received data, and from which sources (a service or worker of
//! `requests`, `logs` or `metrics`) that used to send it has gone quiet. The UI's header reads it
//! (`GET /api/v1/freshness`) to say "last data HH:MM", to end relative ranges at the last data
//! when nothing newer exists, and to warn about a stopped source: a dead pipeline must not look
//! like a quiet, healthy fleet. Three small SQL aggregations over the recent rows, no rollups.

use infersight_model::time::format_rfc3339;
use infersight_query::{QueryEngine, QueryError};
use serde::Serialize;
use serde_json::Value;

/// The tables whose sources are watched, and the columns naming a source in each.
const TABLES: [(&str, &str, &str); 3] = [
    ("requests", "service", "worker"),
    ("logs", "service", "worker"),
    ("metrics", "CAST(NULL AS VARCHAR)", "worker"),
];

/// The last data is looked for this far back from now first (cheap: recent segments only); only
/// when none is there is the whole store asked.
const RECENT_NS: i64 = 3600 * 1_000_000_000;

/// Sources are listed from this long before the last data: a source silent for longer is gone,
/// not stopped.
pub const LOOKBACK_NS: i64 = 3 * 3600 * 1_000_000_000;

/// A source is stale after this much silence at least ...
pub const MIN_SILENCE_NS: i64 = 3 * 60 * 1_000_000_000;

/// ... or after this many of its own mean gaps, whichever is longer: a source that sends every
/// few minutes is not stale after three.
pub const SILENT_GAPS: i64 = 10;

/// A source must have sent this many rows to have a rhythm to miss.
pub const MIN_ROWS: u64 = 3;

/// One source of one table: what it sent in the lookback and when.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SourceFreshness {
    pub table: &'static str,
    pub service: Option<String>,
    pub worker: Option<String>,
    pub rows: u64,
    pub first_ms: i64,
    pub last_ms: i64,
    pub last: String,
    /// Silent longer than its own rhythm allows, counted to `now`.
    pub stale: bool,
    /// Silent longer than its rhythm allows while the rest of the store kept receiving data:
    /// this source stopped, not the whole pipeline.
    pub stopped: bool,
}

/// The freshness of the store at `now_ms`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Freshness {
    pub now_ms: i64,
    /// The newest row of any watched table; `None` for an empty store.
    pub last_data_ms: Option<i64>,
    pub last_data: Option<String>,
    /// Whether the whole store has been silent longer than [`MIN_SILENCE_NS`].
    pub stale: bool,
    /// The newest row of each table that has any.
    pub tables: Vec<TableFreshness>,
    /// Every source seen in the lookback, stopped ones first, then by table and name.
    pub sources: Vec<SourceFreshness>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TableFreshness {
    pub table: &'static str,
    pub last_ms: i64,
    pub last: String,
}

/// How long a source may stay silent: [`SILENT_GAPS`] of its mean gap, at least
/// [`MIN_SILENCE_NS`]. `None` when it sent too few rows to have a rhythm.
pub fn allowed_silence_ns(rows: u64, first_ns: i64, last_ns: i64) -> Option<i64> {
    if rows < MIN_ROWS {
        return None;
    }
    let mean_gap = (last_ns - first_ns).max(0) / (rows as i64 - 1);
    Some(mean_gap.saturating_mul(SILENT_GAPS).max(MIN_SILENCE_NS))
}

/// Whether a source silent since `last_ns` is stale at `reference_ns`.
pub fn silent_too_long(rows: u64, first_ns: i64, last_ns: i64, reference_ns: i64) -> bool {
    allowed_silence_ns(rows, first_ns, last_ns)
        .is_some_and(|allowed| reference_ns - last_ns > allowed)
}

/// The store's freshness at `now_ns`; see [`Freshness`].
pub async fn freshness(engine: &QueryEngine, now_ns: i64) -> Result<Freshness, QueryError> {
    let tables = last_rows(engine, Some(now_ns - RECENT_NS)).await?;
    let tables = if tables.is_empty() {
        last_rows(engine, None).await?
    } else {
        tables
    };
    let last_ns = tables.iter().map(|(_, ns)| *ns).max();
    let mut sources = Vec::new();
    if let Some(last_ns) = last_ns {
        for (table, service, worker) in TABLES {
            sources.extend(sources_of(engine, (table, service, worker), last_ns, now_ns).await?);
        }
    }
    sources.sort_by(|a, b| {
        b.stopped
            .cmp(&a.stopped)
            .then(b.stale.cmp(&a.stale))
            .then(a.table.cmp(b.table))
            .then(a.worker.cmp(&b.worker))
            .then(a.service.cmp(&b.service))
    });
    Ok(Freshness {
        now_ms: now_ns / 1_000_000,
        last_data_ms: last_ns.map(|ns| ns / 1_000_000),
        last_data: last_ns.map(format_rfc3339),
        stale: last_ns.is_some_and(|ns| now_ns - ns > MIN_SILENCE_NS),
        tables: tables
            .iter()
            .map(|(table, ns)| TableFreshness {
                table,
                last_ms: ns / 1_000_000,
                last: format_rfc3339(*ns),
            })
            .collect(),
        sources,
    })
}

/// The newest `ts` of each watched table since `since_ns` (all rows when `None`).
async fn last_rows(
    engine: &QueryEngine,
    since_ns: Option<i64>,
) -> Result<Vec<(&'static str, i64)>, QueryError> {
    let filter = since_ns.map_or_else(String::new, |ns| {
        format!(" WHERE ts >= to_timestamp_nanos({ns})")
    });
    let sql = TABLES
        .iter()
        .map(|(table, ..)| {
            format!(
                "SELECT '{table}' AS t, CAST(max(ts) AS BIGINT) AS last_ns FROM {table}{filter}"
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    let answer = engine.sql(&sql).await?.to_json_value()?;
    let mut out = Vec::new();
    for row in rows(&answer) {
        let (Some(table), Some(ns)) = (row["t"].as_str(), row["last_ns"].as_i64()) else {
            continue;
        };
        if let Some((name, ..)) = TABLES.iter().find(|(name, ..)| *name == table) {
            out.push((*name, ns));
        }
    }
    out.sort_by_key(|(table, _)| TABLES.iter().position(|(name, ..)| name == table));
    Ok(out)
}

/// The sources of one table in the lookback before `last_ns`, judged against `now_ns` (stale)
/// and against `last_ns`, the newest row of any table (stopped).
async fn sources_of(
    engine: &QueryEngine,
    (table, service, worker): (&'static str, &str, &str),
    last_ns: i64,
    now_ns: i64,
) -> Result<Vec<SourceFreshness>, QueryError> {
    let since = last_ns - LOOKBACK_NS;
    let sql = format!(
        "SELECT {service} AS service, {worker} AS worker, count(*) AS n, \
         CAST(min(ts) AS BIGINT) AS first_ns, CAST(max(ts) AS BIGINT) AS last_ns \
         FROM {table} WHERE ts >= to_timestamp_nanos({since}) GROUP BY 1, 2"
    );
    let answer = engine.sql(&sql).await?.to_json_value()?;
    let mut out = Vec::new();
    for row in rows(&answer) {
        let text = |key: &str| row[key].as_str().map(str::to_string);
        let (Some(n), Some(first), Some(last)) = (
            row["n"].as_u64(),
            row["first_ns"].as_i64(),
            row["last_ns"].as_i64(),
        ) else {
            continue;
        };
        out.push(SourceFreshness {
            table,
            service: text("service"),
            worker: text("worker"),
            rows: n,
            first_ms: first / 1_000_000,
            last_ms: last / 1_000_000,
            last: format_rfc3339(last),
            stale: silent_too_long(n, first, last, now_ns),
            stopped: silent_too_long(n, first, last, last_ns),
        });
    }
    Ok(out)
}

fn rows(value: &Value) -> Vec<&serde_json::Map<String, Value>> {
    value["rows"]
        .as_array()
        .map(|rows| rows.iter().filter_map(Value::as_object).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60 * 1_000_000_000;

    #[test]
    fn a_source_is_stale_after_its_own_rhythm_or_three_minutes() {
        // a worker sending every second: stale after three minutes, not two
        let (first, last) = (0, 3600 * 1_000_000_000);
        assert!(!silent_too_long(3601, first, last, last + 2 * MIN));
        assert!(silent_too_long(3601, first, last, last + 4 * MIN));
        // a scheduler logging every five minutes: fifty minutes of silence are its rhythm
        assert!(!silent_too_long(13, first, last, last + 40 * MIN));
        assert!(silent_too_long(13, first, last, last + 51 * MIN));
        // two rows are no rhythm: never judged
        assert!(!silent_too_long(2, first, last, last + 600 * MIN));
        // data from the future (a skewed clock) is not silence
        assert!(!silent_too_long(3601, first, last, last - 10 * MIN));
    }
}
