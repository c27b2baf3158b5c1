//! `infersight incidents`: lists, shows, confirms and rejects stored RCA verdicts, those a person
//! asked for and those the watcher opened by itself (listed with their state, severity and
//! detection time; shown with their timeline, actions and notifications). A confirmed incident
//! (with the person's note: what fixed it) is retrieved as a past incident by the next reports;
//! a rejected one never is.

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
                OutputFormat::Json => print_json(
                    &mut out,
                    &incidents.iter().map(Incident::summary).collect::<Vec<_>>(),
                )?,
                OutputFormat::Csv => {
                    let rows = incidents.iter().map(|incident| {
                        let watch = incident.watch.as_ref();
                        [
                            incident.id.clone(),
                            incident.created_at.clone(),
                            incident.status.to_string(),
                            symptom_of(incident),
                            incident.rca.verdict.clone(),
                            watch.map_or("", |w| w.state.as_str()).to_string(),
                            watch.and_then(|w| w.severity()).unwrap_or("").to_string(),
                            watch.map_or("", |w| w.detected_at.as_str()).to_string(),
                            incident.top_cause().unwrap_or_default(),
                        ]
                    });
                    let header = [
                        "id",
                        "created_at",
                        "status",
                        "symptom",
                        "verdict",
                        "state",
                        "severity",
                        "detected_at",
                        "top_cause",
                    ];
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
                OutputFormat::Json => print_json(&mut out, &incident.summary())?,
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
                OutputFormat::Json => print_json(&mut out, &incident.summary())?,
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

/// `-` for what an incident does not have (a cell of the table).
fn or_dash(value: Option<&str>) -> String {
    value.filter(|v| !v.is_empty()).unwrap_or("-").to_string()
}

fn print_table(out: &mut String, incidents: &[Incident]) {
    if incidents.is_empty() {
        eprintln!("no incidents stored (infersight report stores one per new RCA)");
        return;
    }
    let rows: Vec<Vec<String>> = incidents
        .iter()
        .map(|i| {
            let watch = i.watch.as_ref();
            vec![
                i.id.clone(),
                i.status.to_string(),
                // the watcher's: open / resolved; `-` for verdicts a person asked for
                or_dash(watch.map(|w| w.state.as_str())),
                or_dash(watch.and_then(|w| w.severity())),
                i.created_at.chars().take(19).collect(),
                or_dash(watch.map(|w| &w.detected_at[..w.detected_at.len().min(19)])),
                symptom_of(i),
                or_dash(i.top_cause().as_deref()),
            ]
        })
        .collect();
    let header = [
        "ID",
        "STATUS",
        "STATE",
        "SEVERITY",
        "CREATED",
        "DETECTED",
        "SYMPTOM",
        "ROOT CAUSE",
    ];
    out.push_str(&output::fit_table(Some(&header), &rows));
}

fn print_incident(out: &mut String, incident: &Incident) {
    let rca = &incident.rca;
    outln!(out, "incident  {}", incident.id);
    outln!(out, "status    {}", incident.status);
    outln!(out, "created   {}", incident.created_at);
    outln!(out, "updated   {}", incident.updated_at);
    if let Some(watch) = &incident.watch {
        outln!(
            out,
            "watch     {} ({}), onset {}, detected {}{}",
            watch.state.as_str(),
            watch.severity().unwrap_or("severity not recorded"),
            watch.onset,
            watch.detected_at,
            watch
                .resolved_at
                .as_ref()
                .map(|at| format!(", resolved {at}"))
                .unwrap_or_default()
        );
    }
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
    // onset, detection, verdicts, actions, notifications, resolution, judgement
    for entry in incident.timeline() {
        outln!(
            out,
            "timeline  {} {:<9} {}",
            entry.at,
            entry.event,
            entry.detail
        );
    }
}
