//! `infersight canary`: the canary gate over stored requests (exit 0 pass, 1 block).
//!
//! Reads the SLI values of the requests whose dimension is the baseline value and of those where
//! it is the candidate value (`infersight_explore::canary`), compares them with a seeded bootstrap
//! (`infersight_analytics::canary`, which documents the decision rule), and prints one verdict
//! line (or a JSON object) for a CI pipeline. Too few samples, non-finite values, an unknown SLI
//! or a bad flag are bad input (exit 2), never a pass.

use std::sync::Arc;

use infersight_analytics::canary::{
    CanaryConfig, CanaryResult, Decision, Statistic, compare, format_confidence, format_percent,
    format_value,
};
use infersight_explore::canary::{CanarySli, canary_samples};
use infersight_query::QueryEngine;
use infersight_store::{StorageBackend, TimeRange};
use serde_json::json;

use crate::args::Common;
use crate::exit::CliError;
use crate::output;
use crate::wiring;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CanaryFormat {
    Table,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CanaryStat {
    /// The quantile given by --q.
    Quantile,
    /// The mean (the rate, for `--sli error`).
    Mean,
}

#[derive(Debug, clap::Args)]
pub struct CanaryArgs {
    #[command(flatten)]
    pub common: Common,
    /// The attribute that tells the two apart: a requests column (`model_version`), a mapped
    /// attribute name (`deploy.model_revision`) or any `attrs` key.
    #[arg(long)]
    pub dimension: String,
    /// The dimension's value serving the current version.
    #[arg(long)]
    pub baseline: String,
    /// The dimension's value serving the version under test.
    #[arg(long)]
    pub candidate: String,
    /// queue, prefill, ttft, decode, tpot, itl_max, e2e (or the column name), error (the error
    /// rate), or attr:<key> for a numeric attribute such as a quality score.
    #[arg(long, default_value = "ttft")]
    pub sli: String,
    /// Quantile compared (0.95 or p95) [default: 0.95].
    #[arg(long)]
    pub q: Option<String>,
    /// Statistic compared [default: quantile; mean for --sli error].
    #[arg(long, value_enum)]
    pub stat: Option<CanaryStat>,
    /// Start of the compared window (RFC 3339, Unix seconds, or relative like -1h).
    #[arg(long)]
    pub since: Option<String>,
    /// End of the compared window (exclusive).
    #[arg(long)]
    pub until: Option<String>,
    /// Largest tolerated relative worsening: 0.05 or 5%.
    #[arg(long, default_value = "0.05")]
    pub max_regression: String,
    /// Two-sided confidence of the bootstrap interval.
    #[arg(long, default_value_t = 0.95)]
    pub confidence: f64,
    #[arg(long, default_value_t = 2000)]
    pub resamples: usize,
    /// Seed of the bootstrap (the same data and seed give the same verdict).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Higher values are better (quality scores such as BLEU); latency and errors are not.
    #[arg(long)]
    pub higher_is_better: bool,
    /// Fewer requests than this on either side is bad input (exit 2), not a verdict.
    #[arg(long, default_value_t = 30)]
    pub min_samples: usize,
    #[arg(long, value_enum, default_value = "table")]
    pub format: CanaryFormat,
}

pub async fn run(args: CanaryArgs) -> Result<i32, CliError> {
    let config = args.common.resolve()?;
    let sli = CanarySli::parse(&args.sli).map_err(|e| CliError::usage(e.to_string()))?;
    let gate = gate_config(&args, &sli)?;
    let range = time_range(args.since.as_deref(), args.until.as_deref())?;

    let store = tokio::task::block_in_place(|| wiring::open_existing_store(&config))?;
    let engine = QueryEngine::new(store.clone() as Arc<dyn StorageBackend>);
    let (baseline, candidate) = canary_samples(
        &engine,
        &args.dimension,
        &args.baseline,
        &args.candidate,
        &args.sli,
        range,
    )
    .await
    .map_err(|e| CliError::from_kind(e.kind(), e.to_string()))?;
    // The bootstrap burns CPU for up to a fraction of a second: keep it off the async workers.
    let result = tokio::task::spawn_blocking(move || compare(&baseline, &candidate, &gate))
        .await
        .map_err(|e| CliError::failed(format!("canary task: {e}")))?
        .map_err(|e| {
            CliError::usage(format!(
                "{} = {} vs {}: {e}",
                args.dimension, args.baseline, args.candidate
            ))
        })?;

    match args.format {
        CanaryFormat::Table => println!("{}", verdict_line(&args, &sli, &result)),
        CanaryFormat::Json => {
            let value = verdict_json(&args, &sli, &result, range, gate_seed(&args));
            println!("{}", output::json_pretty(&value)?);
        }
    }
    Ok(match result.decision {
        Decision::Pass => 0,
        Decision::Block => 1,
    })
}

fn gate_seed(args: &CanaryArgs) -> u64 {
    args.seed.unwrap_or(CanaryConfig::default().seed)
}

fn gate_config(args: &CanaryArgs, sli: &CanarySli) -> Result<CanaryConfig, CliError> {
    let statistic = match (args.stat, sli.is_rate()) {
        (Some(CanaryStat::Quantile), true) => {
            return Err(CliError::usage(
                "--sli error is a 0/1 value per request; compare its rate with --stat mean",
            ));
        }
        (Some(CanaryStat::Mean), _) | (None, true) => {
            if args.q.is_some() {
                return Err(CliError::usage("--q applies to --stat quantile only"));
            }
            Statistic::Mean
        }
        (Some(CanaryStat::Quantile), false) | (None, false) => {
            let q = match &args.q {
                Some(text) => infersight_explore::parse_quantile(text)
                    .map_err(|e| CliError::usage(format!("--q: {e}")))?,
                None => 0.95,
            };
            Statistic::Quantile(q)
        }
    };
    let config = CanaryConfig {
        statistic,
        confidence: args.confidence,
        resamples: args.resamples,
        max_regression: parse_fraction(&args.max_regression)
            .map_err(|e| CliError::usage(format!("--max-regression: {e}")))?,
        higher_is_better: args.higher_is_better,
        seed: gate_seed(args),
        min_samples: args.min_samples,
    };
    Ok(config)
}

/// `0.05`, `5%` or `5 %` → 0.05.
fn parse_fraction(text: &str) -> Result<f64, String> {
    let text = text.trim();
    let (number, scale) = match text.strip_suffix('%') {
        Some(number) => (number.trim(), 0.01),
        None => (text, 1.0),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a number (use 0.05 or 5%)"))?;
    let value = value * scale;
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(format!("`{text}` must be a fraction ≥ 0 (0.05 or 5%)"))
    }
}

fn time_range(since: Option<&str>, until: Option<&str>) -> Result<TimeRange, CliError> {
    let now = infersight_model::time::now_ns();
    let parse = |text: Option<&str>, flag: &str| {
        text.map(|t| {
            infersight_model::time::parse_time(t, now)
                .map_err(|e| CliError::usage(format!("{flag}: {e}")))
        })
        .transpose()
    };
    let range = TimeRange {
        since_ns: parse(since, "--since")?,
        until_ns: parse(until, "--until")?,
    };
    if let (Some(since), Some(until)) = (range.since_ns, range.until_ns)
        && since >= until
    {
        return Err(CliError::usage("--since must be before --until"));
    }
    Ok(range)
}

fn with_unit(value: f64, sli: &CanarySli) -> String {
    match sli.unit() {
        Some(unit) => format!("{} {unit}", format_value(value)),
        None => format_value(value),
    }
}

/// `BLOCK ttft p95 (model_version r2 vs r1): baseline 812 ms (n=4210), candidate 1034 ms
/// (n=4188), +27.3 % [95 % CI +22.1 %, +32.8 %] > max regression 5 %`, then the reason.
fn verdict_line(args: &CanaryArgs, sli: &CanarySli, result: &CanaryResult) -> String {
    let comparison = match result.decision {
        Decision::Block => ">",
        Decision::Pass => "vs",
    };
    format!(
        "{} {} {} ({} {} vs {}): baseline {} (n={}), candidate {} (n={}), {} [{} CI {}, {}] {comparison} max regression {}\n  {}",
        result.decision.as_str().to_uppercase(),
        sli.label(),
        result.statistic.label(),
        args.dimension,
        args.candidate,
        args.baseline,
        with_unit(result.baseline.value, sli),
        result.baseline.n,
        with_unit(result.candidate.value, sli),
        result.candidate.n,
        format_percent(result.relative_change),
        format_confidence(result.confidence),
        format_percent(result.ci_low),
        format_percent(result.ci_high),
        format_confidence(result.max_regression),
        result.reason,
    )
}

/// The same fields as the line, as JSON; an infinite relative change (a zero baseline) is
/// written as `null` with `relative_change_text` saying which way.
fn verdict_json(
    args: &CanaryArgs,
    sli: &CanarySli,
    result: &CanaryResult,
    range: TimeRange,
    seed: u64,
) -> serde_json::Value {
    let finite = |v: f64| v.is_finite().then_some(v);
    let time = |ns: Option<i64>| ns.map(infersight_model::time::format_rfc3339);
    json!({
        "decision": result.decision.as_str(),
        "dimension": args.dimension,
        "sli": sli.label(),
        "statistic": result.statistic.label(),
        "unit": sli.unit(),
        "baseline": {
            "value": args.baseline,
            "n": result.baseline.n,
            "statistic": finite(result.baseline.value),
        },
        "candidate": {
            "value": args.candidate,
            "n": result.candidate.n,
            "statistic": finite(result.candidate.value),
        },
        "relative_change": finite(result.relative_change),
        "relative_change_text": format_percent(result.relative_change),
        "ci_low": finite(result.ci_low),
        "ci_high": finite(result.ci_high),
        "confidence": result.confidence,
        "max_regression": result.max_regression,
        "higher_is_better": result.higher_is_better,
        "resamples": result.resamples,
        "seed": seed,
        "since": time(range.since_ns),
        "until": time(range.until_ns),
        "reason": result.reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_parse_with_or_without_percent() {
        assert_eq!(parse_fraction("0.05"), Ok(0.05));
        assert!((parse_fraction("5%").unwrap() - 0.05).abs() < 1e-12);
        assert!((parse_fraction("12.5 %").unwrap() - 0.125).abs() < 1e-12);
        assert!(parse_fraction("-1").is_err());
        assert!(parse_fraction("five").is_err());
    }
}
