//! `infersight templates mine|list`: the log template miner over a file, without a server
//! (one output row per input line; ids persist in the template store), and the persisted
//! template store itself, most frequent first.

use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};

use infersight_pipeline::stages::template::mine_lines_into;
use infersight_pipeline::{LogFormat, MinerConfig, TemplateStore};
use serde_json::json;

use crate::args::{Common, FormatArgs};
use crate::config::Config;
use crate::exit::CliError;
use crate::output::{self, OutputFormat};

#[derive(Debug, clap::Args)]
pub struct TemplatesArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(subcommand)]
    pub action: TemplatesAction,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum TemplatesAction {
    /// Mine FILE: prints `line,template_id,template` for every input line (the store keeps ids).
    Mine {
        file: PathBuf,
        /// Loghub-style header spec, e.g. '<Date> <Time> <Level> <Component>: <Content>';
        /// without it headers are detected.
        #[arg(long = "log-format")]
        log_format: Option<String>,
        // CSV by default (one row per line of FILE), so not the shared table-first `--format`.
        #[arg(long, value_enum, default_value = "csv")]
        format: OutputFormat,
    },
    /// List the persisted templates (most frequent first).
    List {
        #[command(flatten)]
        format: FormatArgs,
    },
}

pub fn run(args: TemplatesArgs) -> Result<i32, CliError> {
    let config = args.common.resolve()?;
    match args.action {
        TemplatesAction::Mine {
            file,
            log_format,
            format,
        } => mine(&config, &file, log_format.as_deref(), format),
        TemplatesAction::List { format } => list(&config, format.format),
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
fn mine(
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
    let dir = config.template_store_dir();
    std::fs::create_dir_all(&dir)
        .map_err(|e| CliError::failed(format!("cannot create {}: {e}", dir.display())))?;
    let mut store = TemplateStore::open(&dir, config.stages.template.miner.clone())
        .map_err(|e| CliError::failed(e.to_string()))?;
    let mined = mine_lines_into(&mut store, lines.iter().map(String::as_str), spec.as_ref());
    store.save().map_err(|e| CliError::failed(e.to_string()))?;
    let text = match format {
        OutputFormat::Json => {
            let mut text = String::new();
            for m in &mined {
                let line = json!({"line": m.line_no, "template_id": m.template_id, "template": m.template});
                text.push_str(&output::json_line(&line)?);
                text.push('\n');
            }
            text
        }
        OutputFormat::Csv | OutputFormat::Table => output::csv(
            &["line", "template_id", "template"],
            mined.iter().map(|m| {
                [
                    m.line_no.to_string(),
                    m.template_id.to_string(),
                    m.template.clone(),
                ]
            }),
        )?,
    };
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .map_err(|e| CliError::failed(format!("writing output: {e}")))?;
    Ok(0)
}

/// `infersight templates list`: the persisted templates, most frequent first.
fn list(config: &Config, format: OutputFormat) -> Result<i32, CliError> {
    let dir = config.template_store_dir();
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
            let value = json!({ "store": dir.display().to_string(), "templates": list });
            println!("{}", output::json_line(&value)?);
        }
        OutputFormat::Csv | OutputFormat::Table => {
            let rows = templates.iter().map(|t| {
                [
                    t.template_id.to_string(),
                    t.count.to_string(),
                    t.template.clone(),
                ]
            });
            print!(
                "{}",
                output::csv(&["template_id", "count", "template"], rows)?
            );
        }
    }
    Ok(0)
}
