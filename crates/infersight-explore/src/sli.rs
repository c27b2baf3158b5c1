//! SLI answers from rollups: the store hands over the per-minute sketches covering a time range
//! and this module merges them by the requested dimensions and step. It never scans raw rows,
//! which is what makes `GET /api/v1/sli` and `infersight sli` answer in milliseconds.

use std::sync::Arc;

use infersight_model::time::{format_rfc3339, parse_duration_ns, parse_range};
use infersight_rollup::{Rollup, Sli, SliQuery, SliSeries, query_rollups};
use infersight_store::{StorageBackend, TimeRange};
use serde_json::{Value, json};

use infersight_query::{QueryEngine, QueryError};

const MINUTE_NS: i64 = 60_000_000_000;

/// An SLI question as the API and CLI state it (strings are parsed and checked here, once).
#[derive(Debug, Clone, Default)]
pub struct SliRequest {
    /// `ttft`, `e2e`, `error_rate`, …
    pub sli: String,
    /// Quantiles for latency SLIs; empty means p50, p95 and p99.
    pub quantiles: Vec<f64>,
    pub by: Vec<String>,
    /// `dimension=value` pairs every counted combination must match.
    pub filters: Vec<(String, String)>,
    pub range: TimeRange,
    /// `1m`, `5m`, `1h`; `None`: one point for the whole range.
    pub step: Option<String>,
}

/// An SLI question as strings, as `GET /api/v1/sli` and `infersight sli` take it: the SLI name,
/// comma-separated quantiles (`0.5,0.99` or `p50,p99`), dimensions and `dimension=value`
/// filters, the time range and the step.
#[derive(Debug, Clone, Copy, Default)]
pub struct SliRequestText<'a> {
    pub sli: &'a str,
    pub q: Option<&'a str>,
    pub by: Option<&'a str>,
    pub filter: Option<&'a str>,
    pub since: Option<&'a str>,
    pub until: Option<&'a str>,
    pub step: Option<&'a str>,
}

impl SliRequest {
    /// Parses the strings of a request (relative times count back from `now_ns`); the error
    /// says which part is wrong.
    pub fn parse(text: &SliRequestText<'_>, now_ns: i64) -> Result<Self, String> {
        Ok(SliRequest {
            sli: text.sli.to_string(),
            quantiles: comma_list(text.q)
                .into_iter()
                .map(parse_quantile)
                .collect::<Result<_, _>>()?,
            by: comma_list(text.by).into_iter().map(String::from).collect(),
            filters: comma_list(text.filter)
                .into_iter()
                .map(parse_filter)
                .collect::<Result<_, _>>()?,
            range: parse_range(text.since, text.until, now_ns)?,
            step: text.step.map(String::from),
        })
    }
}

/// The non-empty trimmed items of a comma-separated list.
fn comma_list(text: Option<&str>) -> Vec<&str> {
    text.map(|t| {
        t.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect()
    })
    .unwrap_or_default()
}

/// The series that answer an [`SliRequest`].
#[derive(Debug, Clone)]
pub struct SliAnswer {
    pub sli: Sli,
    pub quantiles: Vec<f64>,
    pub by: Vec<String>,
    pub step_ns: Option<i64>,
    pub series: Vec<SliSeries>,
}

/// Parses `0.99`, `99`, `p99` into a quantile in `[0, 1]`.
pub fn parse_quantile(text: &str) -> Result<f64, String> {
    let bare = text.trim().trim_start_matches(['p', 'P']);
    let value: f64 = bare
        .parse()
        .map_err(|_| format!("quantile {text:?} is not a number (use 0.99 or p99)"))?;
    // percentages: 99.9 → 0.999 exactly, not 0.9990000000000001
    let q = if value > 1.0 {
        (value * 1e7).round() / 1e9
    } else {
        value
    };
    if (0.0..=1.0).contains(&q) {
        Ok(q)
    } else {
        Err(format!("quantile {text:?} is outside [0, 1]"))
    }
}

/// Parses `dimension=value`.
pub fn parse_filter(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .filter(|(d, _)| !d.trim().is_empty())
        .map(|(d, v)| (d.trim().to_string(), v.to_string()))
        .ok_or_else(|| format!("filter {text:?} must look like dimension=value"))
}

fn resolve(request: &SliRequest) -> Result<SliQuery, QueryError> {
    let sli = Sli::parse(&request.sli).ok_or_else(|| {
        QueryError::BadRequest(format!(
            "unknown sli {:?}; known: {}",
            request.sli,
            Sli::all_names().join(", ")
        ))
    })?;
    let step_ns = request
        .step
        .as_deref()
        .map(|s| {
            parse_duration_ns(s)
                .filter(|ns| *ns >= MINUTE_NS && ns % MINUTE_NS == 0)
                .ok_or_else(|| {
                    QueryError::BadRequest(format!(
                        "step {s:?} must be a whole number of minutes (1m, 5m, 1h)"
                    ))
                })
        })
        .transpose()?;
    let quantiles = if request.quantiles.is_empty() {
        vec![0.5, 0.95, 0.99]
    } else {
        request.quantiles.clone()
    };
    Ok(SliQuery {
        sli,
        quantiles,
        by: request.by.clone(),
        filters: request.filters.clone(),
        since_ns: request.range.since_ns,
        until_ns: request.range.until_ns,
        step_ns,
    })
}

/// Answers `request` from the store's rollups (blocking: call from a blocking thread).
pub fn answer_sli(
    store: &dyn StorageBackend,
    request: &SliRequest,
) -> Result<SliAnswer, QueryError> {
    let query = resolve(request)?;
    let parts: Vec<Arc<Rollup>> = store.rollups(request.range)?;
    let refs: Vec<&Rollup> = parts.iter().map(Arc::as_ref).collect();
    let series = query_rollups(&refs, &query).map_err(|e| QueryError::BadRequest(e.to_string()))?;
    Ok(SliAnswer {
        sli: query.sli,
        quantiles: match query.sli {
            Sli::Latency(_) => query.quantiles,
            Sli::Counter(_) => Vec::new(),
        },
        by: query.by,
        step_ns: query.step_ns,
        series,
    })
}

/// [`answer_sli`] over `engine`'s store, on a blocking thread (rollup merging is CPU work).
pub async fn sli(engine: &QueryEngine, request: SliRequest) -> Result<SliAnswer, QueryError> {
    let store = Arc::clone(engine.store());
    tokio::task::spawn_blocking(move || answer_sli(store.as_ref(), &request))
        .await
        .map_err(|e| QueryError::Internal(format!("sli task failed: {e}")))?
}

fn quantile_label(q: f64) -> String {
    let pct = q * 100.0;
    if (pct - pct.round()).abs() < 1e-9 {
        format!("p{}", pct.round() as i64)
    } else {
        format!("p{pct}")
    }
}

impl SliAnswer {
    /// Labels of the value columns: `p50`, `p99` for latency SLIs, the SLI's name otherwise.
    pub fn value_labels(&self) -> Vec<String> {
        if self.quantiles.is_empty() {
            vec![self.sli.name().to_string()]
        } else {
            self.quantiles.iter().map(|&q| quantile_label(q)).collect()
        }
    }

    pub fn to_json(&self) -> Value {
        let labels = self.value_labels();
        let series: Vec<Value> = self
            .series
            .iter()
            .map(|s| {
                let group: serde_json::Map<String, Value> = s
                    .group
                    .iter()
                    .map(|(d, v)| (d.clone(), Value::String(v.clone())))
                    .collect();
                let points: Vec<Value> = s
                    .points
                    .iter()
                    .map(|p| {
                        let values: serde_json::Map<String, Value> = labels
                            .iter()
                            .zip(&p.values)
                            .map(|(l, v)| (l.clone(), json!(v)))
                            .collect();
                        json!({
                            "ts": format_rfc3339(p.ts_ns),
                            "requests": p.requests,
                            "values": values,
                            "mean": p.mean,
                        })
                    })
                    .collect();
                json!({ "group": group, "points": points })
            })
            .collect();
        json!({
            "sli": self.sli.name(),
            "unit": match self.sli { Sli::Latency(_) => "ms", Sli::Counter(_) => "ratio" },
            "by": self.by,
            "step_s": self.step_ns.map(|ns| ns / 1_000_000_000),
            "series": series,
        })
    }

    /// Rows for a table: `ts`, the group's dimensions, `requests`, the values, `mean`.
    pub fn table(&self) -> (Vec<String>, Vec<Vec<String>>) {
        let mut header = vec!["ts".to_string()];
        header.extend(self.by.iter().cloned());
        header.push("requests".into());
        header.extend(self.value_labels());
        let latency = matches!(self.sli, Sli::Latency(_));
        if latency {
            header.push("mean".into());
        }
        let fmt = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"));
        let mut rows = Vec::new();
        for s in &self.series {
            for p in &s.points {
                let mut row = vec![format_rfc3339(p.ts_ns)];
                row.extend(s.group.iter().map(|(_, v)| v.clone()));
                row.push(p.requests.to_string());
                row.extend(p.values.iter().map(|v| fmt(*v)));
                if latency {
                    row.push(fmt(p.mean));
                }
                rows.push(row);
            }
        }
        (header, rows)
    }

    /// The table as aligned text.
    pub fn render_table(&self) -> String {
        let (header, rows) = self.table();
        let mut widths: Vec<usize> = header.iter().map(String::len).collect();
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.len());
            }
        }
        let line = |cells: &[String]| {
            cells
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_string()
        };
        let mut out = line(&header);
        out.push('\n');
        for row in &rows {
            out.push_str(&line(row));
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_filters_parse() {
        assert_eq!(parse_quantile("p99"), Ok(0.99));
        assert_eq!(parse_quantile("0.5"), Ok(0.5));
        assert_eq!(parse_quantile("99.9"), Ok(0.999));
        assert!(parse_quantile("abc").is_err());
        assert!(parse_quantile("-1").is_err());
        assert_eq!(
            parse_filter("worker=w-1"),
            Ok(("worker".to_string(), "w-1".to_string()))
        );
        assert!(parse_filter("=x").is_err());
        assert_eq!(quantile_label(0.999), "p99.9");
    }

    #[test]
    fn requests_parse_from_their_strings() {
        let text = SliRequestText {
            sli: "ttft",
            q: Some(" p50, ,0.99"),
            by: Some("model,worker"),
            filter: Some("tenant=acme"),
            since: Some("100"),
            until: Some("200"),
            step: Some("5m"),
        };
        let request = SliRequest::parse(&text, 0).unwrap();
        assert_eq!(request.quantiles, vec![0.5, 0.99]);
        assert_eq!(request.by, vec!["model", "worker"]);
        assert_eq!(request.filters, vec![("tenant".into(), "acme".into())]);
        assert_eq!(request.range.since_ns, Some(100_000_000_000));
        assert_eq!(request.step.as_deref(), Some("5m"));
        let backwards = SliRequestText {
            since: Some("200"),
            until: Some("100"),
            ..text
        };
        assert!(SliRequest::parse(&backwards, 0).is_err());
        let bad_filter = SliRequestText {
            filter: Some("tenant"),
            ..text
        };
        assert!(
            SliRequest::parse(&bad_filter, 0)
                .unwrap_err()
                .contains("dimension=value")
        );
    }

    #[test]
    fn bad_requests_are_named() {
        let bad_sli = SliRequest {
            sli: "latency".into(),
            ..SliRequest::default()
        };
        let err = resolve(&bad_sli).unwrap_err();
        assert!(err.to_string().contains("known: queue"), "{err}");
        let bad_step = SliRequest {
            sli: "ttft".into(),
            step: Some("30s".into()),
            ..SliRequest::default()
        };
        assert!(
            resolve(&bad_step)
                .unwrap_err()
                .to_string()
                .contains("minutes")
        );
    }
}
