//! One-shot analysis commands over files, without a server: `infersight templates mine|list`
//! (the log template miner and its persisted store) and `infersight localize` (root-cause
//! localization of a benchmark-style leaf table).

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use infersight_analytics::localize::{CliMeasure, CliSpec, Params, localize_csv};
use infersight_pipeline::stages::template::mine_lines_into;
use infersight_pipeline::{LogFormat, MinerConfig, TemplateStore};
use serde_json::json;

use crate::cli::OutputFormat;
use crate::config::Config;
use crate::exit::CliError;

/// Where `templates` keeps its store: `<data dir>/templates` (the `template` stage of `serve`
/// uses the same directory unless `stages.template.store_dir` says otherwise).
pub fn template_store_dir(config: &Config) -> PathBuf {
    config
        .stages
        .template
        .store_dir
        .clone()
        .unwrap_or_else(|| config.store.data_dir.join("templates"))
}

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

fn read_lines(path: &Path) -> Result<Vec<String>, CliError> {
    let file = std::fs::File::open(path)
        .map_err(|e| CliError::usage(format!("cannot open {}: {e}", path.display())))?;
    let mut lines = Vec::new();
    for (index, line) in BufReader::new(file).split(b'\n').enumerate() {
        let bytes =
            line.map_err(|e| CliError::failed(format!("reading {}: {e}", path.display())))?;
        // logs are not always valid UTF-8; a lossy line still mines to a template
        let text = String::from_utf8_lossy(&bytes);
        let text = text.strip_suffix('\r').unwrap_or(&text);
        if text.len() > 16 * 1024 * 1024 {
            return Err(CliError::usage(format!(
                "{}:{}: line longer than 16 MiB",
                path.display(),
                index + 1
            )));
        }
        lines.push(text.to_string());
    }
    Ok(lines)
}

/// `infersight templates mine FILE`: one output row per input line.
pub fn templates_mine(
    config: &Config,
    file: &Path,
    log_format: Option<&str>,
    format: OutputFormat,
) -> Result<i32, CliError> {
    let spec = log_format
        .map(LogFormat::parse)
        .transpose()
        .map_err(|e| CliError::usage(e.to_string()))?;
    let lines = read_lines(file)?;
    let dir = template_store_dir(config);
    std::fs::create_dir_all(&dir)
        .map_err(|e| CliError::failed(format!("cannot create {}: {e}", dir.display())))?;
    let mut store = TemplateStore::open(&dir, config.stages.template.miner.clone())
        .map_err(|e| CliError::failed(e.to_string()))?;
    let mined = mine_lines_into(&mut store, lines.iter().map(String::as_str), spec.as_ref());
    store.save().map_err(|e| CliError::failed(e.to_string()))?;
    let mut out = std::io::stdout().lock();
    use std::io::Write as _;
    let write_error = |e: std::io::Error| CliError::failed(format!("writing output: {e}"));
    match format {
        OutputFormat::Json => {
            for m in &mined {
                writeln!(
                    out,
                    "{}",
                    json!({"line": m.line_no, "template_id": m.template_id, "template": m.template})
                )
                .map_err(write_error)?;
            }
        }
        OutputFormat::Csv | OutputFormat::Table => {
            writeln!(out, "line,template_id,template").map_err(write_error)?;
            for m in &mined {
                writeln!(
                    out,
                    "{},{},{}",
                    m.line_no,
                    m.template_id,
                    csv_field(&m.template)
                )
                .map_err(write_error)?;
            }
        }
    }
    Ok(0)
}

/// `infersight templates list`: the persisted templates, most frequent first.
pub fn templates_list(config: &Config, format: OutputFormat) -> Result<i32, CliError> {
    let dir = template_store_dir(config);
    let store = TemplateStore::open(&dir, MinerConfig::default())
        .map_err(|e| CliError::failed(e.to_string()))?;
    let mut templates = store.list();
    templates.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.template_id.cmp(&b.template_id))
    });
    match format {
        OutputFormat::Json => {
            let list: Vec<_> = templates
                .iter()
                .map(|t| {
                    json!({
                        "template_id": t.template_id,
                        "template": t.template,
                        "count": t.count,
                        "rate_per_s": t.rate_per_second(),
                        "param_types": t.param_types,
                        "aliases": t.aliases,
                        "split_from": t.split_from,
                    })
                })
                .collect();
            println!(
                "{}",
                json!({ "store": dir.display().to_string(), "templates": list })
            );
        }
        OutputFormat::Csv | OutputFormat::Table => {
            println!("template_id,count,template");
            for t in &templates {
                println!("{},{},{}", t.template_id, t.count, csv_field(&t.template));
            }
        }
    }
    Ok(0)
}

/// The measure arguments of `infersight localize`, as given.
#[derive(Debug, Default)]
pub struct LocalizeArgs {
    pub table: PathBuf,
    pub real: Option<String>,
    pub forecast: Option<String>,
    pub time_col: Option<String>,
    pub at: Option<i64>,
    pub numerator: Option<String>,
    pub denominator: Option<String>,
    pub history: Option<usize>,
    pub dims: Option<String>,
}

/// `infersight localize --table FILE.csv …`: prints `{"root_causes": [...], "fleet_wide": ..}`.
pub fn localize(args: LocalizeArgs) -> Result<i32, CliError> {
    let measure = match args {
        LocalizeArgs {
            real: Some(ref real),
            forecast: Some(ref forecast),
            time_col: None,
            numerator: None,
            denominator: None,
            ..
        } => CliMeasure::Additive {
            real: real.clone(),
            forecast: forecast.clone(),
        },
        LocalizeArgs {
            real: None,
            forecast: None,
            time_col: Some(ref time),
            at: Some(at),
            numerator: Some(ref numerator),
            denominator: Some(ref denominator),
            ..
        } => CliMeasure::Derived {
            time: time.clone(),
            at,
            numerator: numerator.clone(),
            denominator: denominator.clone(),
            history: args.history.unwrap_or(10),
        },
        _ => {
            return Err(CliError::usage(
                "give either --real and --forecast (additive), or --time-col, --at, --numerator and --denominator (derived ratio)",
            ));
        }
    };
    let spec = CliSpec {
        measure,
        dims: args.dims.as_deref().map(|d| {
            d.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        }),
    };
    let file = std::fs::File::open(&args.table)
        .map_err(|e| CliError::usage(format!("cannot open {}: {e}", args.table.display())))?;
    let reader: Box<dyn Read> = Box::new(BufReader::new(file));
    let result = localize_csv(reader, &spec, &Params::default())
        .map_err(|e| CliError::usage(format!("{}: {e}", args.table.display())))?;
    let causes: Vec<String> = result.root_causes.iter().map(|c| c.key()).collect();
    println!(
        "{}",
        json!({ "root_causes": causes, "fleet_wide": result.fleet_wide })
    );
    Ok(0)
}

/// The RCA report as text for a terminal: verdict, causes, signals, log evidence, advice.
pub fn render_rca(report: &infersight_query::RcaReport) -> String {
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
        let dims: Vec<String> = cause
            .dimensions
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(
            out,
            "  {}. {}  (score {:.0}, explains {:.0} %)",
            cause.rank,
            dims.join(" & "),
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
        let subject: Vec<String> = s.subject.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            out,
            "  {:<20} {:<40} {}",
            s.kind,
            subject.join(" & "),
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
