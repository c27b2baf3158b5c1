//! `infersight sli`: SLI series from the rollups — quantiles of a latency SLI or a ratio, by
//! dimensions, per step — without scanning raw rows (the same answer as `GET /api/v1/sli`).

use std::sync::Arc;

use infersight_explore::{SliRequest, SliRequestText};
use infersight_model::time::now_ns;
use infersight_store::StorageBackend;

use crate::args::{Common, FormatArgs};
use crate::exit::CliError;
use crate::output::{self, OutputFormat};
use crate::wiring;

#[derive(Debug, clap::Args)]
pub struct SliArgs {
    #[command(flatten)]
    pub common: Common,
    /// ttft, tpot, e2e, queue, prefill, decode, itl_max, error_rate, abort_rate,
    /// request_rate, token_efficiency, prefix_cache_hit_rate, output_tokens_per_s.
    #[arg(long)]
    pub sli: String,
    /// Comma-separated quantiles (0.5,0.99 or p50,p99); default p50,p95,p99.
    #[arg(long)]
    pub q: Option<String>,
    /// Comma-separated dimensions to group by.
    #[arg(long)]
    pub by: Option<String>,
    /// Comma-separated dimension=value filters.
    #[arg(long)]
    pub filter: Option<String>,
    #[arg(long)]
    pub since: Option<String>,
    #[arg(long)]
    pub until: Option<String>,
    /// Point width (1m, 5m, 1h); default one point for the whole range.
    #[arg(long)]
    pub step: Option<String>,
    #[command(flatten)]
    pub format: FormatArgs,
}

impl SliArgs {
    fn request(&self) -> Result<SliRequest, CliError> {
        let text = SliRequestText {
            sli: &self.sli,
            q: self.q.as_deref(),
            by: self.by.as_deref(),
            filter: self.filter.as_deref(),
            since: self.since.as_deref(),
            until: self.until.as_deref(),
            step: self.step.as_deref(),
        };
        SliRequest::parse(&text, now_ns()).map_err(CliError::usage)
    }
}

pub async fn run(args: SliArgs) -> Result<i32, CliError> {
    let request = args.request()?;
    let config = args.common.resolve()?;
    let store = tokio::task::block_in_place(|| wiring::open_existing_store(&config))?;
    let engine = super::query::audited_engine(store.clone() as Arc<dyn StorageBackend>, &config);
    let answer = infersight_explore::sli(&engine, request).await;
    let outcome = answer.as_ref().map(|_| ()).map_err(|e| e.kind());
    super::query::audit_cli_command(
        &engine,
        "sli",
        &super::query::rollup_columns(&config),
        outcome,
    )
    .await;
    let answer = answer.map_err(|e| CliError::from_kind(e.kind(), e.to_string()))?;
    match args.format.format {
        OutputFormat::Json => println!("{}", output::json_line(&answer.to_json())?),
        OutputFormat::Csv => {
            let (header, rows) = answer.table();
            print!("{}", output::csv(&header, rows)?);
        }
        // the rollup answer's own aligned text (its widths count bytes)
        OutputFormat::Table => print!("{}", answer.render_table()),
    }
    Ok(0)
}
