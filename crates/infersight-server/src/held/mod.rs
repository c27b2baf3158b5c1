//! The request rows `serve` held when it last stopped without shutting down (a crash, a kill),
//! made again at its next start before the receivers open. The receivers hold a traced request's
//! row for a while to merge the spans of its services into it (`ingest::otlp::correlate`); the
//! spans are stored and acknowledged at once, the row only when released. A mark file says rows
//! may be held: made when `serve` starts, removed once a clean shutdown has stored every held
//! row. Found at a start, the rows are rebuilt from the spans stored in the last
//! [`LOOKBACK`] (`ingest::otlp::rebuild`), those the store already has are left out, and the rest
//! go through the ingest queue like any row; the mark stays until the next clean shutdown, so a
//! crash during the rebuild only repeats it. At every start the receivers' hold is then told the
//! rows stored in that window, rebuilt ones included (`SpanTreeCache::remember_stored_requests`),
//! so a span of one of their requests arriving after the restart (a gateway's, exported late)
//! is dropped as a duplicate of the stored row instead of becoming a second row.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use infersight_ingest::receivers::{ReceiverState, SinkError};
use infersight_model::org::DEFAULT_ORG;
use infersight_model::{RequestRecord, SpanRecord, Table, TableBatch};
use infersight_query::QueryEngine;
use infersight_store::{StorageBackend, TimeRange};

/// Spans stored this long before the latest one are read to rebuild held rows: beyond the hold's
/// linger, a long generation (a request span starts when it is received and is exported when it
/// ends) and exporters' delays. A row whose spans all started earlier is not rebuilt.
pub const LOOKBACK: Duration = Duration::from_secs(15 * 60);

/// The mark's name in the data directory.
pub const MARK_FILE: &str = "held-requests.mark";

/// What a start found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Recovered {
    /// The mark was there: the last run did not shut down cleanly.
    pub unclean: bool,
    /// Rows rebuilt and stored.
    pub rows: usize,
}

/// At a start: rebuilds and stores the rows held when the last run stopped, if the mark says it
/// did not shut down cleanly, then sets the mark for this run. An error leaves the mark in place
/// (the next start tries again).
pub async fn recover_and_mark(
    mark: &Path,
    store: &Arc<dyn StorageBackend>,
    state: &ReceiverState,
) -> Result<Recovered, String> {
    let mut recovered = Recovered::default();
    let mut known = if mark.exists() {
        recovered.unclean = true;
        let Recent { stored, rebuilt } = recent_rows(store, state, true).await?;
        recovered.rows = rebuilt.len();
        submit(state, rebuilt.clone()).await?;
        stored.into_iter().chain(rebuilt).collect()
    } else {
        // the hold's memory only: a failure costs at worst a late span's second row
        recent_rows(store, state, false)
            .await
            .map(|recent| recent.stored)
            .unwrap_or_else(|error| {
                tracing::warn!(%error, "the receivers start without the stored requests' ids");
                Vec::new()
            })
    };
    known.sort_by_key(|row| row.ts);
    state.span_tree.remember_stored_requests(&known);
    let mark = mark.to_path_buf();
    tokio::task::spawn_blocking(move || {
        infersight_model::durable::write_atomic(&mark, b"serve holds request rows\n")
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("cannot set the held-request mark: {e}"))?;
    Ok(recovered)
}

/// After a clean shutdown stored every held row: no row is held any more.
pub fn clear_mark(mark: &Path) {
    let removed = std::fs::remove_file(mark)
        .map_err(|e| e.to_string())
        .and_then(|()| {
            let dir = mark.parent().unwrap_or(Path::new("."));
            infersight_model::durable::sync_dir(dir).map_err(|e| e.to_string())
        });
    if let Err(error) = removed {
        tracing::warn!(%error, mark = %mark.display(), "the held-request mark was not removed");
    }
}

/// The request rows of the last [`LOOKBACK`] of stored spans: those the store has, and (with
/// `rebuild`) those it lacks, made again from the spans.
#[derive(Debug, Default)]
struct Recent {
    stored: Vec<RequestRecord>,
    rebuilt: Vec<RequestRecord>,
}

/// The stored rows of the last [`LOOKBACK`] of stored spans, and with `rebuild` the rows of
/// those spans that the store lacks.
async fn recent_rows(
    store: &Arc<dyn StorageBackend>,
    state: &ReceiverState,
    rebuild: bool,
) -> Result<Recent, String> {
    let Some(latest) = latest_span_ns(store.as_ref())? else {
        return Ok(Recent::default());
    };
    let lookback = i64::try_from(LOOKBACK.as_nanos()).unwrap_or(i64::MAX);
    let since = latest
        .min(infersight_model::time::now_ns())
        .saturating_sub(lookback);
    let engine = QueryEngine::new(store.clone());
    // a stored row starts at its engine span, which may precede the window's gateway spans
    let mut stored = Vec::new();
    let stored_since = since.saturating_sub(lookback);
    for batch in &read_since(&engine, RequestRecord::COLUMNS, "requests", stored_since)
        .await?
        .batches
    {
        stored.extend(RequestRecord::from_batch(batch).map_err(|e| e.to_string())?);
    }
    if !rebuild {
        return Ok(Recent {
            stored,
            rebuilt: Vec::new(),
        });
    }
    let mut spans = Vec::new();
    for batch in &read_since(&engine, SpanRecord::COLUMNS, "spans", since)
        .await?
        .batches
    {
        spans.extend(SpanRecord::from_batch(batch).map_err(|e| e.to_string())?);
    }
    let mapper = state.mapper.clone();
    tokio::task::spawn_blocking(move || {
        rebuild_per_org(&spans, &stored, &mapper).map(|rebuilt| Recent { stored, rebuilt })
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("rebuilding held request rows: {e}"))
}

/// The rows of `spans` that `stored` lacks, rebuilt org by org (two orgs may share trace ids),
/// each carrying its org.
fn rebuild_per_org(
    spans: &[SpanRecord],
    stored: &[RequestRecord],
    mapper: &infersight_model::mapping::AttributeMapper,
) -> Result<Vec<RequestRecord>, String> {
    let org_of = |org: &Option<String>| org.clone().unwrap_or_else(|| DEFAULT_ORG.to_string());
    let mut orgs: BTreeMap<String, (Vec<SpanRecord>, Vec<RequestRecord>)> = BTreeMap::new();
    for span in spans {
        orgs.entry(org_of(&span.org))
            .or_default()
            .0
            .push(span.clone());
    }
    for row in stored {
        if let Some((_, rows)) = orgs.get_mut(&org_of(&row.org)) {
            rows.push(row.clone());
        }
    }
    let mut rebuilt = Vec::new();
    for (org, (spans, stored)) in orgs {
        let rows = infersight_ingest::otlp::rebuild::rebuild_requests(&spans, &stored, mapper)
            .map_err(|e| format!("rebuilding held request rows: {e}"))?;
        rebuilt.extend(rows.into_iter().map(|row| RequestRecord {
            org: Some(org.clone()),
            ..row
        }));
    }
    Ok(rebuilt)
}

/// The latest start of a stored span (`None`: no span stored).
fn latest_span_ns(store: &dyn StorageBackend) -> Result<Option<i64>, String> {
    let snapshot = store
        .snapshot(Table::Spans, TimeRange::default())
        .map_err(|e| format!("reading the spans table: {e}"))?;
    let mut latest = snapshot.segments.iter().map(|s| s.max_ts_ns).max();
    for batch in &snapshot.memtable {
        let rows = SpanRecord::from_batch(batch).map_err(|e| e.to_string())?;
        latest = latest.max(rows.iter().map(|r| r.ts).max());
    }
    Ok(latest)
}

/// Every row of `table` from `since` on, all `columns`.
async fn read_since(
    engine: &QueryEngine,
    columns: &[&str],
    table: &str,
    since: i64,
) -> Result<infersight_query::QueryOutput, String> {
    let sql = format!(
        "SELECT {} FROM {table} WHERE ts >= to_timestamp_nanos({since})",
        columns.join(", ")
    );
    engine
        .sql(&sql)
        .await
        .map_err(|e| format!("reading {table}: {e}"))
}

/// Stores rebuilt rows through the ingest queue, each for its org, waiting while it is full.
async fn submit(state: &ReceiverState, rows: Vec<RequestRecord>) -> Result<(), String> {
    let mut by_org: BTreeMap<String, Vec<RequestRecord>> = BTreeMap::new();
    for row in rows {
        let org = row.org.clone().unwrap_or_else(|| DEFAULT_ORG.to_string());
        by_org.entry(org).or_default().push(row);
    }
    for (org, rows) in by_org {
        submit_for(state, &org, rows).await?;
    }
    Ok(())
}

async fn submit_for(
    state: &ReceiverState,
    org: &str,
    rows: Vec<RequestRecord>,
) -> Result<(), String> {
    let batch = TableBatch {
        table: Table::Requests,
        batch: RequestRecord::to_batch(&rows),
    };
    for _ in 0..100 {
        match state.sink.submit(org, vec![batch.clone()]).await {
            Ok(()) => return Ok(()),
            Err(SinkError::Full) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(error) => return Err(format!("storing rebuilt request rows: {error}")),
        }
    }
    Err("storing rebuilt request rows: the ingest queue stayed full".into())
}

#[cfg(test)]
mod tests;
