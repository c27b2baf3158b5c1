//! `infersight query SQL`: runs one statement over the store through the query engine (an entry
//! of the access audit, `surface: cli_query`), or asks a running server's `/api/v1/query` with
//! `--server`. The engine renders the result as a table, CSV or JSON.

use std::sync::Arc;

use infersight_model::ErrorKind;
use infersight_query::{AccessContext, QueryEngine, Surface};
use infersight_store::StorageBackend;
use serde_json::json;

use crate::args::{Common, FormatArgs};
use crate::config::Config;
use crate::exit::CliError;
use crate::output::OutputFormat;
use crate::wiring;

#[derive(Debug, clap::Args)]
pub struct QueryArgs {
    #[command(flatten)]
    pub common: Common,
    /// The SQL statement (SELECT, EXPLAIN, SHOW, DESCRIBE).
    pub sql: String,
    #[command(flatten)]
    pub format: FormatArgs,
    /// Ask a running server instead of opening the store (e.g. http://127.0.0.1:7070); with
    /// authentication on, the token in $INFERSIGHT_TOKEN goes along.
    #[arg(long)]
    pub server: Option<String>,
}

pub async fn run(args: QueryArgs) -> Result<i32, CliError> {
    let format = args.format.format;
    if let Some(server) = &args.server {
        return ask_server(server, &args.sql, format).await;
    }
    let config = args.common.resolve()?;
    let store = tokio::task::block_in_place(|| wiring::open_existing_store(&config))?;
    let mut engine = QueryEngine::new(store.clone() as Arc<dyn StorageBackend>)
        .with_access_audit(wiring::access_audit(&config));
    if let Some(route) = wiring::plan_route(&config, store.as_ref()) {
        engine = engine.with_route(route);
    }
    let context = infersight_query::AccessContext::cli(infersight_query::Surface::CliQuery);
    let audited = engine.sql_audited(&args.sql, None, &context).await;
    warn_unaudited(&audited.audit);
    let output = audited
        .result
        .map_err(|e| CliError::from_kind(e.kind(), e.to_string()))?;
    let text = output
        .try_render(query_format(format))
        .map_err(|e| CliError::failed(e.to_string()))?;
    println!("{}", text.trim_end());
    Ok(0)
}

fn query_format(format: OutputFormat) -> infersight_query::OutputFormat {
    match format {
        OutputFormat::Table => infersight_query::OutputFormat::Table,
        OutputFormat::Csv => infersight_query::OutputFormat::Csv,
        OutputFormat::Json => infersight_query::OutputFormat::Json,
    }
}

/// The API token `--server` sends when the server has authentication on.
pub const TOKEN_ENV: &str = "INFERSIGHT_TOKEN";

/// `POST {server}/api/v1/query` (with the token of `$INFERSIGHT_TOKEN`, if set); the server
/// renders, and its error keeps its exit code.
async fn ask_server(server: &str, sql: &str, format: OutputFormat) -> Result<i32, CliError> {
    let format_name = match format {
        OutputFormat::Table => "table",
        OutputFormat::Csv => "csv",
        OutputFormat::Json => "json",
    };
    let url = format!("{}/api/v1/query", server.trim_end_matches('/'));
    let body = json!({ "sql": sql, "format": format_name }).to_string();
    let response = tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut request = agent
            .post(&url)
            .header("content-type", "application/json")
            // who asks, for the server's access audit (a proxy's own header wins there)
            .header("x-infersight-user", infersight_query::audit::cli_actor());
        // a server with authentication on wants a token (an analyst's or above)
        if let Ok(token) = std::env::var(TOKEN_ENV)
            && !token.trim().is_empty()
        {
            request = request.header("authorization", format!("Bearer {}", token.trim()));
        }
        request
            .send(body.as_str())
            .map_err(|e| CliError::failed(format!("{url}: {e}")))
            .and_then(|mut r| {
                let status = r.status().as_u16();
                let text = r
                    .body_mut()
                    .read_to_string()
                    .map_err(|e| CliError::failed(format!("{url}: {e}")))?;
                Ok((status, text))
            })
    })
    .await
    .map_err(|e| CliError::failed(e.to_string()))??;
    match response {
        (200, text) => {
            println!("{}", text.trim_end());
            Ok(0)
        }
        (status, text) => {
            let message = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
                .unwrap_or(text);
            Err(if status < 500 {
                CliError::usage(message)
            } else {
                CliError::failed(message)
            })
        }
    }
}

/// A command's access that could not be audited is a warning, never a lost answer.
pub fn warn_unaudited(status: &infersight_query::AuditStatus) {
    if let infersight_query::AuditStatus::Failed(error) = status {
        tracing::warn!(%error, "access audit not written; the answer is printed anyway");
    }
}

/// The `requests` columns the rollups hold (localization and SLIs read their per-minute
/// sketches by these dimensions); none when the store keeps no rollups.
pub fn rollup_columns(config: &Config) -> Vec<&str> {
    if !config.store.rollups {
        return Vec::new();
    }
    config
        .store
        .rollup_dimensions
        .iter()
        .map(String::as_str)
        .collect()
}

/// One line of the access audit for a command that read the store through `engine` (built
/// with `with_access_tracking`): what its statements read, plus `read_directly`, the columns of
/// `requests` it read without SQL (rollups, scans).
pub async fn audit_command(
    engine: &QueryEngine,
    context: AccessContext,
    read_directly: &[&str],
    outcome: Result<(), ErrorKind>,
) {
    let tracked = engine.tracked_access();
    let mut accessed = tracked.accessed;
    if !read_directly.is_empty() {
        accessed.add_columns("requests", read_directly.iter().copied());
    }
    let status = engine
        .record_access(&context, &accessed, tracked.rows, outcome, None)
        .await;
    warn_unaudited(&status);
}

/// An engine over `store` that tracks what its statements read, for [`audit_command`].
pub fn audited_engine(store: Arc<dyn StorageBackend>, config: &Config) -> QueryEngine {
    let engine = QueryEngine::new(Arc::clone(&store))
        .with_access_audit(wiring::access_audit(config))
        .with_access_tracking();
    match wiring::plan_route(config, store.as_ref()) {
        Some(route) => engine.with_route(route),
        None => engine,
    }
}

/// [`audit_command`] for the CLI command `name` (`rca`, `sli`, `dimensions`): `surface: cli`,
/// the command in `what`.
pub async fn audit_cli_command(
    engine: &QueryEngine,
    name: &str,
    read_directly: &[&str],
    outcome: Result<(), ErrorKind>,
) {
    let mut context = AccessContext::cli(Surface::Cli);
    context.what = Some(name.to_string());
    audit_command(engine, context, read_directly, outcome).await;
}
