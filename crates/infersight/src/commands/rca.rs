//! `infersight rca`: root-cause analysis over the store — when did it go wrong, which attribute
//! combination explains it, which signals and log templates came with it. Windows are chosen
//! when not given. Every verdict is stored as an incident (see `infersight incidents`), so it
//! can be confirmed, rejected and reported on later.

use std::sync::Arc;

use infersight_model::time::now_ns;
use infersight_rca::{IncidentStore, RcaRequest, RecordedRca, analyse_and_record};
use infersight_store::StorageBackend;

use crate::args::{Common, FormatArgs};
use crate::exit::{CliError, rca_error};
use crate::output::OutputFormat;
use crate::wiring;

#[derive(Debug, clap::Args)]
pub struct RcaArgs {
    #[command(flatten)]
    pub common: Common,
    #[arg(long)]
    pub since: Option<String>,
    #[arg(long)]
    pub until: Option<String>,
    #[arg(long = "baseline-since")]
    pub baseline_since: Option<String>,
    #[arg(long = "baseline-until")]
    pub baseline_until: Option<String>,
    #[command(flatten)]
    pub format: FormatArgs,
}

pub async fn run(args: RcaArgs) -> Result<i32, CliError> {
    let request = rca_request(
        args.since,
        args.until,
        args.baseline_since,
        args.baseline_until,
    )?;
    let config = args.common.resolve()?;
    let store = tokio::task::block_in_place(|| wiring::open_existing_store(&config))?;
    let engine = super::query::audited_engine(store.clone() as Arc<dyn StorageBackend>, &config);
    // Every verdict is stored, so it can be confirmed (becoming a retrievable past
    // incident) and reported on later.
    let incidents = IncidentStore::open(&config.store.data_dir);
    let analysed = analyse_and_record(&engine, &incidents, request).await;
    let outcome = analysed.as_ref().map(|_| ()).map_err(|e| e.kind());
    super::query::audit_cli_command(
        &engine,
        "rca",
        &super::query::rollup_columns(&config),
        outcome,
    )
    .await;
    let RecordedRca { report, incident } = analysed.map_err(rca_error)?;
    match args.format.format {
        OutputFormat::Json => {
            // through a `Value`, so the keys print sorted
            let value =
                serde_json::to_value(&report).map_err(|e| CliError::failed(e.to_string()))?;
            println!(
                "{}",
                serde_json::to_string_pretty(&value)
                    .map_err(|e| CliError::failed(e.to_string()))?
            )
        }
        OutputFormat::Table | OutputFormat::Csv => {
            print!("{}", render_rca(&report));
            match incident {
                Some(incident) => println!(
                    "incident: {} (infersight report --incident {})",
                    incident.id, incident.id
                ),
                None => println!("incident: none stored (not enough data)"),
            }
        }
    }
    Ok(0)
}

/// Windows of `infersight rca` from the flags: both ends of a window or neither.
pub fn rca_request(
    since: Option<String>,
    until: Option<String>,
    baseline_since: Option<String>,
    baseline_until: Option<String>,
) -> Result<RcaRequest, CliError> {
    RcaRequest::from_bounds(
        (since.as_deref(), until.as_deref()),
        (baseline_since.as_deref(), baseline_until.as_deref()),
        now_ns(),
    )
    .map_err(CliError::usage)
}

/// The RCA report as text for a terminal: verdict, causes, signals, log evidence, advice.
pub fn render_rca(report: &infersight_rca::RcaReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "verdict: {}", report.verdict);
    if let (Some(i), Some(b)) = (&report.incident_window, &report.baseline_window) {
        let _ = writeln!(
            out,
            "incident: {} → {}   baseline: {} → {}",
            infersight_model::time::format_rfc3339(i.since),
            infersight_model::time::format_rfc3339(i.until),
            infersight_model::time::format_rfc3339(b.since),
            infersight_model::time::format_rfc3339(b.until)
        );
    }
    if !report.root_causes.is_empty() {
        let _ = writeln!(out, "\nroot causes:");
    }
    for cause in &report.root_causes {
        let _ = writeln!(
            out,
            "  {}. {}  (score {:.0}, explains {:.0} %)",
            cause.rank,
            cause.dimensions,
            cause.score,
            cause.explained_fraction * 100.0
        );
        for e in &cause.evidence {
            let _ = writeln!(out, "       - {e}");
        }
    }
    if !report.signals.is_empty() {
        let _ = writeln!(out, "\nsignals:");
    }
    for s in &report.signals {
        let _ = writeln!(
            out,
            "  {:<20} {:<40} {}",
            s.kind.name(),
            s.subject.to_string(),
            s.detail
        );
    }
    if !report.log_evidence.is_empty() {
        let _ = writeln!(out, "\nlog evidence:");
    }
    for l in report.log_evidence.iter().take(10) {
        let _ = writeln!(
            out,
            "  lift {:>7.1}  lead {:>6.0} s  {}",
            l.lift, l.lead_seconds, l.template
        );
    }
    for (title, items) in [
        ("suggestions", &report.suggestions),
        ("checklist", &report.checklist),
    ] {
        if !items.is_empty() {
            let _ = writeln!(out, "\n{title}:");
            for item in items {
                let _ = writeln!(out, "  - {item}");
            }
        }
    }
    out
}
