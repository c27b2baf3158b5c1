//! Canary samples: reads the per-request values of an SLI (a column or a numeric attribute) for a
//! baseline and a candidate value of a dimension, for the gate in `infersight-analytics::canary`.
//!
//! A dimension is a named column of `requests` (`model_version`, `worker`, …; the numeric
//! settings `batch_size`, `max_tokens`, `temperature`, `top_p`, `spec_draft_tokens` compare as
//! numbers), an attribute name the mapping table normalizes into one (`deploy.model_revision` →
//! `model_version`: normalization moved it out of `attrs`), or any other key of `attrs` (read with
//! `json_get`). Names are checked against `[A-Za-z0-9_.-]` before they reach SQL; values are
//! quoted string literals with quotes doubled (DataFusion's dialect has no backslash escapes).
//! Rows whose SLI value is NULL or NaN (a request that never produced a first token, an
//! attribute that is absent or not a number) are left out.

use arrow::array::{Array, Float64Array, Int64Array};
use arrow::compute::cast;
use arrow::datatypes::DataType;
use infersight_model::mapping::REQUEST_ATTRIBUTES;
use infersight_store::TimeRange;

use crate::dimensions::{SETTING_COLUMNS, STRING_COLUMNS};
use infersight_query::QueryEngine;
use infersight_query::QueryError;

/// Latency SLIs by short name and column.
pub const LATENCY_SLIS: &[(&str, &str)] = &[
    ("queue", "queue_ms"),
    ("prefill", "prefill_ms"),
    ("ttft", "ttft_ms"),
    ("decode", "decode_ms"),
    ("tpot", "tpot_ms"),
    ("itl_max", "itl_max_ms"),
    ("e2e", "e2e_ms"),
];

/// The SQL predicate of a failed request (the same one the root-cause engine counts).
const ERROR_PREDICATE: &str = "status = 'error' OR (error_type IS NOT NULL AND error_type <> '')";

/// Longest dimension or attribute name accepted.
const MAX_NAME_LEN: usize = 256;

/// What the gate compares per request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CanarySli {
    /// A latency column, in milliseconds.
    Latency {
        name: &'static str,
        column: &'static str,
    },
    /// 1 for a failed request, 0 otherwise: its mean is the error rate.
    Error,
    /// A numeric attribute (`attr:bleu`, `attr:toxicity`), e.g. a quality score.
    Attr(String),
}

impl CanarySli {
    /// Parses `ttft`, `ttft_ms`, `error`, `attr:<key>`; an unknown name is a bad request that
    /// lists the valid ones.
    pub fn parse(text: &str) -> Result<CanarySli, QueryError> {
        let text = text.trim();
        if let Some(key) = text.strip_prefix("attr:") {
            check_name("attribute", key)?;
            return Ok(CanarySli::Attr(key.to_string()));
        }
        if text == "error" || text == "errors" || text == "error_rate" {
            return Ok(CanarySli::Error);
        }
        LATENCY_SLIS
            .iter()
            .find(|(name, column)| text == *name || text == *column)
            .map(|(name, column)| CanarySli::Latency { name, column })
            .ok_or_else(|| {
                let names: Vec<&str> = LATENCY_SLIS.iter().map(|(name, _)| *name).collect();
                QueryError::BadRequest(format!(
                    "unknown SLI `{text}`; valid: {} (or the column name, e.g. ttft_ms), error, attr:<key>",
                    names.join(", ")
                ))
            })
    }

    /// `ttft`, `error`, `attr:bleu`.
    pub fn label(&self) -> String {
        match self {
            CanarySli::Latency { name, .. } => (*name).to_string(),
            CanarySli::Error => "error".to_string(),
            CanarySli::Attr(key) => format!("attr:{key}"),
        }
    }

    /// Unit of the values (`ms` for latency), if any.
    pub fn unit(&self) -> Option<&'static str> {
        match self {
            CanarySli::Latency { .. } => Some("ms"),
            _ => None,
        }
    }

    /// Whether values are 0/1, so only the mean (a rate) makes sense.
    pub fn is_rate(&self) -> bool {
        matches!(self, CanarySli::Error)
    }

    fn sql_expression(&self) -> String {
        match self {
            CanarySli::Latency { column, .. } => format!("CAST({column} AS DOUBLE)"),
            CanarySli::Error => format!("CASE WHEN {ERROR_PREDICATE} THEN 1.0 ELSE 0.0 END"),
            CanarySli::Attr(key) => {
                format!(
                    "TRY_CAST(json_get(attrs, {}) AS DOUBLE)",
                    string_literal(key)
                )
            }
        }
    }
}

/// Numeric columns of `requests` that make sense as an A/B split (settings, not measurements);
/// their values compare as numbers, so `0.7` matches a stored 0.7 whatever its text.
pub const NUMERIC_DIMENSION_COLUMNS: &[&str] = &[
    "batch_size",
    "max_tokens",
    "temperature",
    "top_p",
    "spec_draft_tokens",
];

/// Where a dimension's values are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CanaryDimension {
    /// A named string column of `requests` (possibly reached through the mapping table).
    Column(&'static str),
    /// A numeric setting column of `requests`.
    NumericColumn(&'static str),
    /// A key of `attrs`.
    Attr(String),
}

impl CanaryDimension {
    /// Resolves a dimension name; see the module docs.
    pub fn resolve(dimension: &str) -> Result<CanaryDimension, QueryError> {
        check_name("dimension", dimension)?;
        let named = |name: &str| {
            if let Some(column) = NUMERIC_DIMENSION_COLUMNS.iter().find(|c| **c == name) {
                return Some(CanaryDimension::NumericColumn(column));
            }
            STRING_COLUMNS
                .iter()
                .chain(SETTING_COLUMNS)
                .find(|column| **column == name)
                .map(|column| CanaryDimension::Column(column))
        };
        if let Some(resolved) = named(dimension) {
            return Ok(resolved);
        }
        if let Some(resolved) = REQUEST_ATTRIBUTES
            .iter()
            .find(|row| row.key == dimension)
            .and_then(|row| named(row.column.column_name()))
        {
            return Ok(resolved);
        }
        Ok(CanaryDimension::Attr(dimension.to_string()))
    }

    /// The SQL predicate "this request's dimension is `value`".
    fn matches(&self, value: &str) -> Result<String, QueryError> {
        Ok(match self {
            CanaryDimension::Column(column) => {
                format!("CAST({column} AS VARCHAR) = {}", string_literal(value))
            }
            CanaryDimension::NumericColumn(column) => {
                let number: f64 = value
                    .trim()
                    .parse()
                    .ok()
                    .filter(|n: &f64| n.is_finite())
                    .ok_or_else(|| {
                        QueryError::BadRequest(format!(
                            "{column} is numeric; `{value}` is not a number"
                        ))
                    })?;
                format!("{column} = CAST({number:?} AS DOUBLE)")
            }
            CanaryDimension::Attr(key) => format!(
                "json_get(attrs, {}) = {}",
                string_literal(key),
                string_literal(value)
            ),
        })
    }
}

/// The SLI values of requests whose `dimension` equals `baseline`, and of those where it equals
/// `candidate`, in `range`; see the module docs for names, values and left-out rows.
pub async fn canary_samples(
    engine: &QueryEngine,
    dimension: &str,
    baseline: &str,
    candidate: &str,
    sli: &str,
    range: TimeRange,
) -> Result<(Vec<f64>, Vec<f64>), QueryError> {
    let sli = CanarySli::parse(sli)?;
    let source = CanaryDimension::resolve(dimension)?;
    if baseline == candidate {
        return Err(QueryError::BadRequest(format!(
            "baseline and candidate are both `{baseline}`; compare two different values"
        )));
    }
    let sql = samples_sql(&source, baseline, candidate, &sli, range)?;
    let output = engine.sql(&sql).await?;
    let mut baseline_values = Vec::new();
    let mut candidate_values = Vec::new();
    for batch in &output.batches {
        let arms = cast(batch.column(0), &DataType::Int64)
            .map_err(|e| QueryError::Internal(format!("reading canary arms: {e}")))?;
        let values = cast(batch.column(1), &DataType::Float64)
            .map_err(|e| QueryError::Internal(format!("reading canary values: {e}")))?;
        let arms = arms
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| QueryError::Internal("canary arms are not integers".into()))?;
        let values = values
            .as_any()
            .downcast_ref::<Float64Array>()
            .ok_or_else(|| QueryError::Internal("canary values are not numbers".into()))?;
        for row in 0..batch.num_rows() {
            if arms.is_null(row) || values.is_null(row) {
                continue;
            }
            match arms.value(row) {
                0 => baseline_values.push(values.value(row)),
                _ => candidate_values.push(values.value(row)),
            }
        }
    }
    Ok((baseline_values, candidate_values))
}

/// The query [`canary_samples`] runs: `arm` 0 for the baseline, 1 for the candidate, and the
/// SLI `value` (exposed for tests and `EXPLAIN`).
pub fn samples_sql(
    source: &CanaryDimension,
    baseline: &str,
    candidate: &str,
    sli: &CanarySli,
    range: TimeRange,
) -> Result<String, QueryError> {
    let is_baseline = source.matches(baseline)?;
    let is_candidate = source.matches(candidate)?;
    let mut conditions = vec![format!("(({is_baseline}) OR ({is_candidate}))")];
    if let Some(since) = range.since_ns {
        conditions.push(format!("ts >= to_timestamp_nanos({since})"));
    }
    if let Some(until) = range.until_ns {
        conditions.push(format!("ts < to_timestamp_nanos({until})"));
    }
    Ok(format!(
        "SELECT arm, value FROM (SELECT CASE WHEN {is_baseline} THEN 0 ELSE 1 END AS arm, {} AS value \
         FROM requests WHERE {}) WHERE value IS NOT NULL AND NOT isnan(value)",
        sli.sql_expression(),
        conditions.join(" AND ")
    ))
}

/// A SQL string literal: quotes doubled, nothing else is special in DataFusion's dialect.
fn string_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// Names reach SQL only as literals, but are still held to a plain character set so a typo or a
/// crafted name fails loudly instead of matching nothing.
fn check_name(what: &str, name: &str) -> Result<(), QueryError> {
    let valid = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if valid {
        Ok(())
    } else {
        Err(QueryError::BadRequest(format!(
            "{what} name `{name}` must be 1 to {MAX_NAME_LEN} characters of A-Z a-z 0-9 _ . -"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slis_parse_and_unknown_ones_list_the_valid_names() {
        assert_eq!(
            CanarySli::parse("ttft").unwrap(),
            CanarySli::Latency {
                name: "ttft",
                column: "ttft_ms"
            }
        );
        assert_eq!(CanarySli::parse("e2e_ms").unwrap().label(), "e2e");
        assert_eq!(CanarySli::parse("error").unwrap(), CanarySli::Error);
        assert_eq!(
            CanarySli::parse("attr:bleu").unwrap(),
            CanarySli::Attr("bleu".into())
        );
        let error = CanarySli::parse("latency").unwrap_err().to_string();
        assert!(
            error.contains("unknown SLI `latency`")
                && error.contains("ttft")
                && error.contains("attr:<key>"),
            "{error}"
        );
        assert!(CanarySli::parse("attr:x' OR 1=1 --").is_err());
        assert!(CanarySli::parse("attr:").is_err());
    }

    #[test]
    fn dimensions_resolve_to_columns_mapped_names_or_attrs() {
        assert_eq!(
            CanaryDimension::resolve("model_version").unwrap(),
            CanaryDimension::Column("model_version")
        );
        assert_eq!(
            CanaryDimension::resolve("deploy.model_revision").unwrap(),
            CanaryDimension::Column("model_version")
        );
        assert_eq!(
            CanaryDimension::resolve("k8s.deployment.name").unwrap(),
            CanaryDimension::Attr("k8s.deployment.name".into())
        );
        assert_eq!(
            CanaryDimension::resolve("temperature").unwrap(),
            CanaryDimension::NumericColumn("temperature")
        );
        for bad in ["", "a b", "x'--", "json_get(attrs)", "a;drop"] {
            let error = CanaryDimension::resolve(bad).unwrap_err();
            assert!(
                error.to_string().contains("must be 1 to 256 characters"),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn values_are_quoted_literals() {
        let sql = samples_sql(
            &CanaryDimension::Attr("deploy.rev".into()),
            "r1",
            "it's'); DROP TABLE requests; --",
            &CanarySli::parse("ttft").unwrap(),
            TimeRange {
                since_ns: Some(5),
                until_ns: Some(9),
            },
        )
        .unwrap();
        assert!(
            sql.contains("json_get(attrs, 'deploy.rev') = 'it''s''); DROP TABLE requests; --'"),
            "{sql}"
        );
        assert!(sql.contains("CASE WHEN json_get(attrs, 'deploy.rev') = 'r1' THEN 0"));
        assert!(sql.contains("ts >= to_timestamp_nanos(5) AND ts < to_timestamp_nanos(9)"));
        let numeric = CanaryDimension::NumericColumn("temperature");
        let sli = CanarySli::Error;
        let sql = samples_sql(&numeric, "0.2", "1", &sli, TimeRange::ALL).unwrap();
        assert!(sql.contains("temperature = CAST(0.2 AS DOUBLE)"), "{sql}");
        assert!(sql.contains("temperature = CAST(1.0 AS DOUBLE)"), "{sql}");
        let error = samples_sql(&numeric, "0.2", "1 OR 1=1", &sli, TimeRange::ALL).unwrap_err();
        assert_eq!(
            error.to_string(),
            "temperature is numeric; `1 OR 1=1` is not a number"
        );
    }
}
