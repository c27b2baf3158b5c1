//! `infersight actions`: prints the audit trail of the automatic actions `serve` decided
//! (`<data>/actions/audit.jsonl`): what fired, what was suppressed and why, what was rolled back,
//! what a dry run would have done, and what the webhook answered. Reads the file only, so it
//! works while `serve` runs.

use infersight_server::actions::{AuditEntry, audit_path, read_audit};
use serde_json::json;

use crate::cli::{Common, OutputFormat};
use crate::exit::CliError;

#[derive(Debug, clap::Args)]
pub struct ActionsArgs {
    #[command(flatten)]
    pub common: Common,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: OutputFormat,
    /// Show the most recent N decisions (0: all).
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
}

pub async fn run(args: ActionsArgs) -> Result<i32, CliError> {
    let config = crate::commands::resolve(&args.common)?;
    let path = audit_path(&config.store.data_dir);
    let read = read_audit(&path)
        .map_err(|e| CliError::failed(format!("reading {}: {e}", path.display())))?;
    let Some(read) = read else {
        eprintln!("infersight: no actions recorded (no {})", path.display());
        match args.format {
            OutputFormat::Json => println!("{}", json!({ "entries": [] })),
            OutputFormat::Csv => println!("{}", HEADER.join(",")),
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
    match args.format {
        OutputFormat::Json => {
            let text = serde_json::to_string_pretty(&json!({
                "entries": entries,
                "corrupt_lines": read.corrupt.len(),
            }))
            .map_err(|e| CliError::failed(e.to_string()))?;
            println!("{text}");
        }
        OutputFormat::Csv => {
            println!("{}", HEADER.join(","));
            for entry in entries {
                let row: Vec<String> = cells(entry).iter().map(|c| csv_cell(c)).collect();
                println!("{}", row.join(","));
            }
        }
        OutputFormat::Table => {
            if entries.is_empty() {
                println!("no actions recorded");
            } else {
                print!("{}", table(entries));
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

fn csv_cell(cell: &str) -> String {
    if cell.contains([',', '"', '\n']) {
        format!("\"{}\"", cell.replace('"', "\"\""))
    } else {
        cell.to_string()
    }
}

fn table(entries: &[AuditEntry]) -> String {
    let rows: Vec<Vec<String>> = entries.iter().map(cells).collect();
    let mut widths: Vec<usize> = HEADER.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
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
    let header: Vec<String> = HEADER.iter().map(|h| h.to_string()).collect();
    let mut out = line(&header);
    out.push('\n');
    for row in &rows {
        out.push_str(&line(row));
        out.push('\n');
    }
    out
}
