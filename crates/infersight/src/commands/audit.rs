//! `infersight audit`: prints the access audit (`<data>/audit/access.jsonl` and its rotated
//! files, oldest first) — who read which tables and columns, from where, and how it went —
//! filtered by time, actor or personal fields. Reads the files only, so it works while `serve`
//! runs.

use infersight_model::time::{now_ns, parse_time};
use infersight_query::audit::{AccessAudit, AccessRecord, read_records};
use serde_json::json;

use crate::args::{Common, FormatArgs};
use crate::exit::CliError;
use crate::output::{self, OutputFormat};

/// Rotated files (`access.jsonl.N`) looked at, newest is `.1`.
const MAX_ROTATED: usize = 9;

#[derive(Debug, clap::Args)]
#[command(mut_arg("format", |arg| arg.help("Output format")))]
pub struct AuditArgs {
    #[command(flatten)]
    pub common: Common,
    /// Only accesses at or after this time (RFC 3339, Unix seconds or relative like -24h).
    #[arg(long, allow_hyphen_values = true)]
    pub since: Option<String>,
    /// Only accesses by this actor (`alice`, `cli:bob`, `anonymous`).
    #[arg(long)]
    pub actor: Option<String>,
    /// Only accesses that read a column able to hold personal data.
    #[arg(long)]
    pub personal: bool,
    /// Show the most recent N matching accesses (0: all).
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    #[command(flatten)]
    pub format: FormatArgs,
}

const HEADER: [&str; 8] = [
    "ts",
    "actor",
    "surface",
    "tables",
    "personal_fields",
    "rows",
    "outcome",
    "query_hash",
];

fn cells(record: &AccessRecord) -> [String; 8] {
    let surface = serde_json::to_value(record.surface)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let surface = match &record.what {
        Some(what) => format!("{surface} ({what})"),
        None => surface,
    };
    [
        record.ts.clone(),
        record.actor.clone(),
        surface,
        record.tables.join(" "),
        record.personal_fields.join(" "),
        record.rows.to_string(),
        record.outcome.clone(),
        record
            .query_hash
            .as_deref()
            .map(|h| h.chars().take(12).collect())
            .unwrap_or_default(),
    ]
}

pub async fn run(args: AuditArgs) -> Result<i32, CliError> {
    let config = args.common.resolve()?;
    let since_ns = args
        .since
        .as_deref()
        .map(|text| {
            parse_time(text, now_ns()).map_err(|e| CliError::usage(format!("--since: {e}")))
        })
        .transpose()?;
    let audit = AccessAudit::for_data_dir(&config.store.data_dir);
    let mut paths: Vec<_> = (1..=MAX_ROTATED).rev().map(|i| audit.rotated(i)).collect();
    paths.push(audit.path().to_path_buf());
    let mut records = Vec::new();
    let mut files = 0;
    for path in paths.iter().filter(|p| p.is_file()) {
        files += 1;
        let (read, unreadable) = read_records(path)
            .map_err(|e| CliError::failed(format!("reading {}: {e}", path.display())))?;
        if unreadable > 0 {
            eprintln!(
                "infersight: warning: skipping {unreadable} unreadable line(s) of {}",
                path.display()
            );
        }
        records.extend(read);
    }
    if files == 0 {
        eprintln!(
            "infersight: no accesses recorded (no {})",
            audit.path().display()
        );
    }
    let matching: Vec<&AccessRecord> = records
        .iter()
        .filter(|r| args.actor.as_ref().is_none_or(|a| &r.actor == a))
        .filter(|r| !args.personal || !r.personal_fields.is_empty())
        .filter(|r| {
            since_ns.is_none_or(|since| {
                // A line whose time does not parse is kept: dropping it would hide an access.
                parse_time(&r.ts, 0).map_or(true, |ts| ts >= since)
            })
        })
        .collect();
    let skip = match args.limit {
        0 => 0,
        n => matching.len().saturating_sub(n),
    };
    let shown = &matching[skip..];
    match args.format.format {
        OutputFormat::Json => {
            let text = output::json_pretty(&json!({
                "accesses": shown,
                "matching": matching.len(),
            }))?;
            println!("{text}");
        }
        OutputFormat::Csv => print!("{}", output::csv(&HEADER, shown.iter().map(|r| cells(r)))?),
        OutputFormat::Table => {
            if shown.is_empty() {
                println!("no accesses recorded");
            } else {
                let rows: Vec<Vec<String>> = shown.iter().map(|r| cells(r).to_vec()).collect();
                print!("{}", output::fit_table(Some(&HEADER), &rows));
            }
        }
    }
    Ok(0)
}
