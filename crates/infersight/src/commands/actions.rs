//! `infersight actions`: prints the audit trail of the automatic actions `serve` decided
//! (`<data>/actions/audit.jsonl`): what fired, what was suppressed and why, what was rolled back,
//! what a dry run would have done, and what the webhook answered. Reads the file only, so it
//! works while `serve` runs.

use infersight_server::actions::{AuditEntry, audit_path, read_audit};
use serde_json::json;

use crate::args::{Common, FormatArgs};
use crate::exit::CliError;
use crate::output::{self, OutputFormat};

#[derive(Debug, clap::Args)]
#[command(mut_arg("format", |arg| arg.help("Output format")))]
pub struct ActionsArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub format: FormatArgs,
    /// Show the most recent N decisions (0: all).
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
}

pub async fn run(args: ActionsArgs) -> Result<i32, CliError> {
    let config = args.common.resolve()?;
    let path = audit_path(&config.store.data_dir);
    let read = read_audit(&path)
        .map_err(|e| CliError::failed(format!("reading {}: {e}", path.display())))?;
    let Some(read) = read else {
        eprintln!("infersight: no actions recorded (no {})", path.display());
        match args.format.format {
            OutputFormat::Json => println!("{}", output::json_line(&json!({ "entries": [] }))?),
            OutputFormat::Csv => print!("{}", output::csv(&HEADER, Vec::<Vec<String>>::new())?),
            OutputFormat::Table => println!("no actions recorded"),
        }
        return Ok(0);
    };
    for (line, why) in &read.corrupt {
        eprintln!(
            "infersight: warning: skipping corrupt line {line} of {}: {why}",
            path.display()
        );
    }
    let skip = if args.limit == 0 {
        0
    } else {
        read.entries.len().saturating_sub(args.limit)
    };
    let entries = &read.entries[skip..];
    match args.format.format {
        OutputFormat::Json => {
            let text = output::json_pretty(&json!({
                "entries": entries,
                "corrupt_lines": read.corrupt.len(),
            }))?;
            println!("{text}");
        }
        OutputFormat::Csv => print!("{}", output::csv(&HEADER, entries.iter().map(cells))?),
        OutputFormat::Table => {
            if entries.is_empty() {
                println!("no actions recorded");
            } else {
                let rows: Vec<Vec<String>> = entries.iter().map(cells).collect();
                print!("{}", output::fit_table(Some(&HEADER), &rows));
            }
        }
    }
    Ok(0)
}

const HEADER: [&str; 11] = [
    "ts",
    "policy",
    "decision",
    "reason",
    "action",
    "params",
    "sli",
    "value",
    "threshold",
    "windows",
    "webhook",
];

fn cells(entry: &AuditEntry) -> Vec<String> {
    let sli = match entry.q {
        Some(q) => format!("{} p{}", entry.sli, trim_float(q * 100.0)),
        None => entry.sli.clone(),
    };
    let params = entry
        .params
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| match v {
                    serde_json::Value::String(s) => format!("{k}={s}"),
                    other => format!("{k}={other}"),
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    let webhook = match &entry.webhook {
        None if entry.dry_run => "dry-run".to_string(),
        None => "-".to_string(),
        Some(w) => match &w.error {
            Some(error) => format!("{} ({error})", w.outcome),
            None => w.outcome.clone(),
        },
    };
    vec![
        entry.ts.clone(),
        entry.policy.clone(),
        entry.decision.clone(),
        entry.reason.clone().unwrap_or_else(|| "-".into()),
        entry.action.clone(),
        params,
        sli,
        trim_float(entry.value),
        trim_float(entry.threshold),
        entry.windows.to_string(),
        webhook,
    ]
}

fn trim_float(v: f64) -> String {
    let text = format!("{v:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}
