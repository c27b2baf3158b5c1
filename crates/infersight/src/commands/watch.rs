//! `infersight watch --since T --until T [--step 30s]`: the watcher of `serve`
//! (`infersight_rca::watch`) replayed over stored data as if live, one step at a time, each
//! step seeing only data before its clock; prints the incidents it would have opened (detection
//! time, onset, verdict, top cause) and the warnings of predictive risk (with each prediction:
//! what runs out on which worker, its ETA and interval). `--record` stores them like the live watcher does
//! (a backfill); without it nothing is written.

use std::sync::Arc;

use infersight_model::time::{format_rfc3339, now_ns, parse_duration_ns, parse_time};
use infersight_query::QueryEngine;
use infersight_rca::IncidentStore;
use infersight_rca::watch::{EpisodeKind, EpisodeReport, Watcher, replay};
use infersight_store::StorageBackend;

use crate::args::{Common, FormatArgs};
use crate::exit::{CliError, rca_error};
use crate::output::OutputFormat;
use crate::wiring;

#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    #[command(flatten)]
    pub common: Common,
    /// First step's clock (RFC 3339, epoch seconds, or relative like -2h).
    #[arg(long, allow_hyphen_values = true)]
    pub since: String,
    /// Last step's clock.
    #[arg(long, allow_hyphen_values = true)]
    pub until: String,
    /// Evaluation step (default: the config's `watch.step`, 30s).
    #[arg(long)]
    pub step: Option<String>,
    /// Store the incidents it opens (as the live watcher does); default: print only.
    #[arg(long)]
    pub record: bool,
    #[command(flatten)]
    pub format: FormatArgs,
}

pub async fn run(args: WatchArgs) -> Result<i32, CliError> {
    let now = now_ns();
    let since =
        parse_time(&args.since, now).map_err(|e| CliError::usage(format!("--since: {e}")))?;
    let until =
        parse_time(&args.until, now).map_err(|e| CliError::usage(format!("--until: {e}")))?;
    if until <= since {
        return Err(CliError::usage("--until must be after --since"));
    }
    let config = args.common.resolve()?;
    let mut settings = config
        .watch_settings()
        .map_err(|errors| CliError::usage(errors.join("; ")))?;
    if let Some(step) = &args.step {
        settings.step_ns = parse_duration_ns(step)
            .filter(|ns| *ns >= 1_000_000_000)
            .ok_or_else(|| {
                CliError::usage(format!("--step: `{step}` is not a duration of at least 1s"))
            })?;
    }
    let store = tokio::task::block_in_place(|| wiring::open_existing_store(&config))?;
    let engine = QueryEngine::new(store.clone() as Arc<dyn StorageBackend>);
    let incidents = args
        .record
        .then(|| IncidentStore::open(&config.store.data_dir));
    let mut watcher = Watcher::new(settings, incidents, None).map_err(rca_error)?;
    let reports = replay(&engine, &mut watcher, since, until)
        .await
        .map_err(rca_error)?;
    match args.format.format {
        OutputFormat::Json => {
            let value =
                serde_json::to_value(&reports).map_err(|e| CliError::failed(e.to_string()))?;
            println!(
                "{}",
                serde_json::to_string_pretty(&value)
                    .map_err(|e| CliError::failed(e.to_string()))?
            );
        }
        OutputFormat::Table | OutputFormat::Csv => print!("{}", render(&reports)),
    }
    Ok(0)
}

/// The incidents as text: one block each.
fn render(reports: &[EpisodeReport]) -> String {
    use std::fmt::Write as _;
    if reports.is_empty() {
        return "no incident would have opened\n".into();
    }
    let mut out = String::new();
    for r in reports {
        let top = r
            .rca
            .root_causes
            .first()
            .map_or_else(|| "(none)".to_string(), |c| c.dimensions.to_string());
        let kind = match r.kind {
            EpisodeKind::Incident => "incident",
            EpisodeKind::Warning => "warning",
        };
        let _ = writeln!(
            out,
            "{}  detected {}  onset {}  (+{:.1} min)  {}",
            r.incident_id.as_deref().unwrap_or(kind),
            format_rfc3339(r.detected_ns),
            format_rfc3339(r.onset_ns),
            (r.detected_ns - r.onset_ns) as f64 / 60e9,
            r.state.as_str()
        );
        if let Some(resolved) = r.resolved_ns {
            let _ = writeln!(out, "  resolved {}", format_rfc3339(resolved));
        }
        for p in &r.predictions {
            let _ = writeln!(out, "  prediction: {}", p.line());
        }
        let _ = writeln!(out, "  top cause: {top}");
        let _ = writeln!(out, "  verdict: {}", r.rca.verdict);
        for d in &r.detections {
            let _ = writeln!(out, "  - {}", d.line());
        }
    }
    out
}
