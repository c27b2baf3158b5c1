//! `infersight report`: builds the report of a stored incident (or of a fresh RCA, stored as a
//! new incident) and writes it as JSON, Markdown or one self-contained HTML file.
//!
//! A report reads the store, so it is one entry of the access audit (`surface: cli_report`): the
//! union of the tables and columns of every SQL statement it ran (the engine tracks them), plus
//! the `requests` rollup dimensions when it ran a new RCA (localization reads the rollups).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use infersight_model::ErrorKind;
use infersight_query::{AccessContext, QueryEngine, Surface};
use infersight_rca::incidents::{Incident, IncidentStore};
use infersight_report::{Report, ReportFormat};
use infersight_store::StorageBackend;

use crate::args::Common;
use crate::config::Config;
use crate::exit::{CliError, report_error};
use crate::wiring;

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    #[command(flatten)]
    pub common: Common,
    /// A stored incident (see `infersight incidents list`) [default: run a new RCA and store it].
    #[arg(long)]
    pub incident: Option<String>,
    /// Incident window start, for a new RCA (as in `infersight rca`); chosen when not given.
    #[arg(long)]
    pub since: Option<String>,
    #[arg(long)]
    pub until: Option<String>,
    #[arg(long)]
    pub baseline_since: Option<String>,
    #[arg(long)]
    pub baseline_until: Option<String>,
    /// json, markdown (md) or html.
    #[arg(long, default_value = "markdown")]
    pub format: String,
    /// Write the report here instead of stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Skip the LLM narrative even when an endpoint is configured.
    #[arg(long)]
    pub no_llm: bool,
}

pub async fn run(args: ReportArgs) -> Result<i32, CliError> {
    let mut config = args.common.resolve()?;
    let format = ReportFormat::parse(&args.format).map_err(|e| CliError::usage(e.to_string()))?;
    if args.no_llm {
        config.report.llm.endpoint.clear();
    }
    let window_given = args.since.is_some()
        || args.until.is_some()
        || args.baseline_since.is_some()
        || args.baseline_until.is_some();
    if args.incident.is_some() && window_given {
        return Err(CliError::usage(
            "--incident reports a stored RCA; windows apply only to a new one",
        ));
    }
    let request = super::rca::rca_request(
        args.since,
        args.until,
        args.baseline_since,
        args.baseline_until,
    )?;
    let store = tokio::task::block_in_place(|| wiring::open_existing_store(&config))?;
    let engine = super::query::audited_engine(store.clone() as Arc<dyn StorageBackend>, &config);
    let incidents = IncidentStore::open(&config.store.data_dir);
    let ran_rca = args.incident.is_none();
    let built = build_audited_parts(
        &engine,
        &config,
        &incidents,
        args.incident.as_deref(),
        request,
    )
    .await;
    audit_report(&engine, &config, ran_rca, args.incident.as_deref(), &built).await;
    let report = built.map_err(|(kind, message)| CliError::from_kind(kind, message))?;
    let text = report.render(format).map_err(report_error)?;
    match &args.out {
        Some(path) => {
            write_file(path, &text)?;
            eprintln!(
                "infersight report: {} written to {}",
                format.extension(),
                path.display()
            );
        }
        None => print!("{text}"),
    }
    Ok(0)
}

/// The stored incident (or a new RCA, stored) and its report; errors keep their kind for the
/// audit.
async fn build_audited_parts(
    engine: &QueryEngine,
    config: &Config,
    incidents: &IncidentStore,
    incident_id: Option<&str>,
    request: infersight_rca::RcaRequest,
) -> Result<Report, (ErrorKind, String)> {
    let rca_failed = |error: infersight_rca::RcaError| (error.kind(), error.to_string());
    let incident = match incident_id {
        Some(id) => incidents.get(id).map_err(rca_failed)?,
        None => {
            let incident = infersight_rca::analyse_and_record(engine, incidents, request)
                .await
                .and_then(infersight_rca::RecordedRca::stored)
                .map_err(rca_failed)?;
            eprintln!("infersight report: stored as incident {}", incident.id);
            incident
        }
    };
    infersight_report::report::build_for_incident(engine, incidents, &incident, &config.report)
        .await
        .map_err(|error| (error.kind(), error.to_string()))
}

/// One access-audit line for the whole report (it runs many statements): what they read, the
/// rows they returned, the outcome; no query hash (there is no one statement).
async fn audit_report(
    engine: &QueryEngine,
    config: &Config,
    ran_rca: bool,
    incident_id: Option<&str>,
    built: &Result<Report, (ErrorKind, String)>,
) {
    let id = match built {
        Ok(report) => Some(report.incident_id.as_str()),
        Err(_) => incident_id,
    };
    let mut context = AccessContext::cli(Surface::CliReport);
    context.what = Some(match id {
        Some(id) => format!("report:{id}"),
        None => "report".to_string(),
    });
    let outcome = built.as_ref().map(|_| ()).map_err(|(kind, _)| *kind);
    let rollups = if ran_rca {
        super::query::rollup_columns(config)
    } else {
        Vec::new()
    };
    super::query::audit_command(engine, context, &rollups, outcome).await;
}

/// The report of `incident`: the knowledge base holds the runbooks and every confirmed past
/// incident except this one (shared with the server's report endpoint).
pub async fn build(
    engine: &QueryEngine,
    config: &Config,
    incidents: &IncidentStore,
    incident: &Incident,
) -> Result<Report, CliError> {
    infersight_report::report::build_for_incident(engine, incidents, incident, &config.report)
        .await
        .map_err(report_error)
}

fn write_file(path: &Path, text: &str) -> Result<(), CliError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| CliError::failed(format!("{}: {e}", parent.display())))?;
    }
    std::fs::write(path, text).map_err(|e| CliError::failed(format!("{}: {e}", path.display())))
}
