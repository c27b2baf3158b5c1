//! The commands (clap): `Cli` and its `Command` list, one file per subcommand with its
//! arguments (`XArgs`, shared flags flattened from `crate::args`) and its `run`, which resolves
//! the configuration, builds what it needs through `wiring`, runs, and returns an exit code or a
//! `CliError`. This module only dispatches.

mod actions;
mod audit;
mod ballista;
mod bench_gen;
mod canary;
mod demo;
mod dimensions;
mod incidents;
mod ingest;
mod localize;
mod mapping;
mod query;
mod rca;
mod report;
mod scenarios;
mod serve;
mod simulate;
mod sli;
mod store;
mod templates;
mod tokens;
mod validate;
mod watch;

use clap::{Parser, Subcommand};

use crate::exit::CliError;

#[derive(Debug, Parser)]
#[command(
    name = "infersight",
    version,
    about = "Find out why an LLM inference fleet got slow"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Simulate a fleet with an incident, ingest it over OTLP, and report the latency breakdown.
    Demo(demo::DemoArgs),
    /// Simulate an inference fleet with a fault scenario; write OTLP JSON Lines + raw engine
    /// logs + ground_truth.json to a folder, or send to a running server over OTLP/HTTP.
    Simulate(simulate::SimulateArgs),
    /// List the simulator's fault scenarios.
    Scenarios(scenarios::ScenariosArgs),
    /// Run the OTLP receivers (gRPC :4317, HTTP :4318) and the API (:7070).
    Serve(serve::ServeArgs),
    /// Ingest files: OTLP JSON Lines, plain JSON lines or raw text logs (gzip too).
    Ingest(ingest::IngestArgs),
    /// Run SQL over the store (tables: requests, spans, logs, metrics, tokens, templates, redactions).
    Query(query::QueryArgs),
    /// List the low-cardinality attributes of requests (candidate root-cause dimensions).
    Dimensions(dimensions::DimensionsArgs),
    /// SLI series from the rollups: quantiles of a latency SLI or a ratio, by dimensions, per step.
    Sli(sli::SliArgs),
    /// The incident report: verdict, evidence, runbooks and past incidents, fixes, checklist,
    /// charts (JSON, Markdown, or one self-contained HTML file).
    Report(report::ReportArgs),
    /// Stored RCA verdicts: list, show, confirm (becomes a retrievable past incident) or reject.
    Incidents(incidents::IncidentsArgs),
    /// The audit trail of automatic actions (what fired, was skipped, was rolled back, and why).
    Actions(actions::ActionsArgs),
    /// The access audit: who read which tables and columns (personal ones flagged), and when.
    Audit(audit::AuditArgs),
    /// Canary gate: compare an SLI between a baseline and a candidate value of a dimension with
    /// bootstrap confidence intervals; exit 0 pass, 1 block.
    Canary(canary::CanaryArgs),
    /// Root-cause analysis: when did it go wrong, which attribute combination explains it, which
    /// signals and log templates came with it. Windows are chosen when not given.
    Rca(rca::RcaArgs),
    /// Log templates: mine a file (one row per line) or list the persisted template store.
    Templates(templates::TemplatesArgs),
    /// Root-cause localization of a leaf table (CSV): which attribute combinations explain the
    /// deviation. Additive: --real/--forecast. Derived ratio: --time-col/--at/--numerator/
    /// --denominator [--history N]. Every other column is a dimension unless --dims.
    Localize(localize::LocalizeArgs),
    /// Check a configuration file and report every error at once.
    Validate(validate::ValidateArgs),
    /// Print the attribute and metric-name mapping tables (Markdown).
    Mapping,
    /// Generate benchmark data (see bench/README.md).
    #[command(hide = true, name = "bench-gen")]
    BenchGen(bench_gen::BenchGenArgs),
    /// Store maintenance: statistics, flush, compaction, retention.
    Store(store::StoreArgs),
    /// Replay the watcher of `serve` over stored data as if live, step by step, and print the
    /// incidents it would have opened (detection time, verdict, top cause).
    Watch(watch::WatchArgs),
    /// API tokens of `serve` (`[auth] tokens_file`): create (shown once), list, revoke.
    Tokens(tokens::TokensArgs),
    /// The processes of an Apache DataFusion Ballista cluster that query nodes send large
    /// statements to (`[query.ballista]`): a scheduler, executors. Needs the `cluster` feature.
    Ballista(ballista::BallistaArgs),
}

impl Command {
    /// Long-running commands narrate (`info`); one-shot commands print only warnings and errors.
    pub fn default_log_level(&self) -> &'static str {
        match self {
            Command::Serve(_) | Command::Ballista(_) => "info",
            _ => "warn",
        }
    }
}

pub async fn run(cli: Cli) -> Result<i32, CliError> {
    match cli.command {
        Command::Demo(args) => demo::run(args).await,
        Command::Simulate(args) => simulate::run(args).await,
        Command::Scenarios(args) => scenarios::run(args),
        Command::Serve(args) => serve::run(args).await,
        Command::Ingest(args) => ingest::run(args).await,
        Command::Query(args) => query::run(args).await,
        Command::Dimensions(args) => dimensions::run(args).await,
        Command::Sli(args) => sli::run(args).await,
        Command::Report(args) => report::run(args).await,
        Command::Incidents(args) => incidents::run(args).await,
        Command::Actions(args) => actions::run(args).await,
        Command::Audit(args) => audit::run(args).await,
        Command::Canary(args) => canary::run(args).await,
        Command::Rca(args) => rca::run(args).await,
        Command::Templates(args) => templates::run(args),
        Command::Localize(args) => localize::run(args),
        Command::Validate(args) => validate::run(args),
        Command::Mapping => mapping::run(),
        Command::BenchGen(args) => bench_gen::run(args).await,
        Command::Store(args) => store::run(args).await,
        Command::Watch(args) => watch::run(args).await,
        Command::Tokens(args) => tokens::run(args),
        Command::Ballista(args) => ballista::run(args).await,
    }
}
