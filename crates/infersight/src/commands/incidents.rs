//! `infersight incidents`: lists, shows, confirms and rejects stored RCA verdicts. A confirmed
//! incident (with the person's note: what fixed it) is retrieved as a past incident by the next
//! reports; a rejected one never is.

use infersight_rca::incidents::{Incident, IncidentStatus, IncidentStore};

use crate::args::Common;
use crate::exit::{CliError, rca_error};
use crate::output::{self, OutputFormat};

/// `writeln!` into the output buffer (writing to a `String` cannot fail).
macro_rules! outln {
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($out, $($arg)*);
    }};
}

#[derive(Debug, clap::Args)]
pub struct IncidentsArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(subcommand)]
    pub action: IncidentsAction,
    /// Output format (JSON goes to stdout).
    #[arg(long, value_enum, default_value = "table", global = true)]
    pub format: OutputFormat,
}

#[derive(Debug, clap::Subcommand)]
pub enum IncidentsAction {
    /// List stored incidents, newest first.
    List,
    /// Show one incident: status, note and the stored RCA verdict.
    Show { id: String },
    /// The verdict was right: say what fixed it; the incident becomes retrievable.
    Confirm {
        id: String,
        /// What fixed it (shown as the first fix when the incident is retrieved).
        #[arg(long)]
        note: String,
    },
    /// The verdict was wrong; it will not be retrieved.
    Reject {
        id: String,
        /// Why it was wrong.
        #[arg(long)]
        note: Option<String>,
    },
}

pub async fn run(args: IncidentsArgs) -> Result<i32, CliError> {
    let config = args.common.resolve()?;
    let store = IncidentStore::open(&config.store.data_dir);
    let format = args.format;
    let mut out = String::new();
    match args.action {
        IncidentsAction::List => {
            let incidents = store.list().map_err(rca_error)?;
            match format {
                OutputFormat::Json => {
                    print_json(&mut out, &incidents.iter().map(summary).collect::<Vec<_>>())?
                }
                OutputFormat::Csv => {
                    let rows = incidents.iter().map(|incident| {
                        [
                            incident.id.clone(),
                            incident.created_at.clone(),
                            incident.status.to_string(),
                            symptom_of(incident),
                            incident.rca.verdict.clone(),
                        ]
                    });
                    let header = ["id", "created_at", "status", "symptom", "verdict"];
                    out.push_str(&output::csv(&header, rows)?);
                }
                OutputFormat::Table => print_table(&mut out, &incidents),
            }
        }
        IncidentsAction::Show { id } => {
            let incident = store.get(&id).map_err(rca_error)?;
            match format {
                OutputFormat::Json => print_json(&mut out, &incident)?,
                OutputFormat::Csv => {
                    return Err(CliError::usage(
                        "incidents show prints table or json, not csv",
                    ));
                }
                OutputFormat::Table => print_incident(&mut out, &incident),
            }
        }
        IncidentsAction::Confirm { id, note } => {
            if note.trim().is_empty() {
                return Err(CliError::usage(
                    "--note must say what fixed it (it is shown when the incident is retrieved)",
                ));
            }
            let incident = store
                .set_status(&id, IncidentStatus::Confirmed, Some(note))
                .map_err(rca_error)?;
            match format {
                OutputFormat::Json => print_json(&mut out, &summary(&incident))?,
                _ => outln!(
                    out,
                    "incident {} confirmed: it is now retrievable as a past incident (incident:{}) in reports",
                    incident.id,
                    incident.id
                ),
            }
        }
        IncidentsAction::Reject { id, note } => {
            let incident = store
                .set_status(&id, IncidentStatus::Rejected, note)
                .map_err(rca_error)?;
            match format {
                OutputFormat::Json => print_json(&mut out, &summary(&incident))?,
                _ => outln!(
                    out,
                    "incident {} rejected: it will not be retrieved as a past incident",
                    incident.id
                ),
            }
        }
    }
    output::emit(&out);
    Ok(0)
}

/// The list row: everything but the full RCA.
fn summary(incident: &Incident) -> serde_json::Value {
    serde_json::json!({
        "id": incident.id,
        "created_at": incident.created_at,
        "updated_at": incident.updated_at,
        "status": incident.status,
        "note": incident.note,
        "symptom": incident.rca.symptom.as_ref().map(|s| &s.sli),
        "onset": incident.rca.symptom.as_ref().map(|s| infersight_model::time::format_rfc3339(s.onset)),
        "root_causes": incident.rca.root_causes.iter().map(|c| &c.dimensions).collect::<Vec<_>>(),
        "signals": incident.rca.signals.iter().map(|s| &s.kind).collect::<Vec<_>>(),
        "verdict": incident.rca.verdict,
    })
}

fn print_json<T: serde::Serialize>(out: &mut String, value: &T) -> Result<(), CliError> {
    let text = output::json_pretty(value)?;
    out.push_str(&text);
    out.push('\n');
    Ok(())
}

fn symptom_of(incident: &Incident) -> String {
    incident
        .rca
        .symptom
        .as_ref()
        .map(|s| s.sli.clone())
        .unwrap_or_else(|| "-".into())
}

fn cause_of(incident: &Incident) -> String {
    incident
        .rca
        .root_causes
        .first()
        .map(|c| c.dimensions.to_string())
        .unwrap_or_else(|| "-".into())
}

fn print_table(out: &mut String, incidents: &[Incident]) {
    if incidents.is_empty() {
        eprintln!("no incidents stored (infersight report stores one per new RCA)");
        return;
    }
    let rows: Vec<Vec<String>> = incidents
        .iter()
        .map(|i| {
            vec![
                i.id.clone(),
                i.status.to_string(),
                i.created_at.chars().take(19).collect(),
                symptom_of(i),
                cause_of(i),
            ]
        })
        .collect();
    let header = ["ID", "STATUS", "CREATED", "SYMPTOM", "ROOT CAUSE"];
    out.push_str(&output::fit_table(Some(&header), &rows));
}

fn print_incident(out: &mut String, incident: &Incident) {
    let rca = &incident.rca;
    outln!(out, "incident  {}", incident.id);
    outln!(out, "status    {}", incident.status);
    outln!(out, "created   {}", incident.created_at);
    outln!(out, "updated   {}", incident.updated_at);
    if let Some(note) = &incident.note {
        outln!(out, "note      {note}");
    }
    outln!(out, "verdict   {}", rca.verdict);
    if let Some(s) = &rca.symptom {
        outln!(
            out,
            "symptom   {} {:.1} → {:.1} since {}",
            s.sli,
            s.baseline,
            s.current,
            infersight_model::time::format_rfc3339(s.onset)
        );
    }
    for cause in &rca.root_causes {
        outln!(
            out,
            "cause #{}  {} (explains {:.0} %)",
            cause.rank,
            cause.dimensions,
            cause.explained_fraction * 100.0
        );
    }
    for signal in &rca.signals {
        outln!(out, "signal    {} — {}", signal.kind, signal.detail);
    }
    for suggestion in &rca.suggestions {
        outln!(out, "suggest   {suggestion}");
    }
}
