//! Command-line interface definition (clap). Flags override the configuration file and the
//! environment; `--data` and `--config` are accepted by every command that touches the store.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

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

#[derive(Debug, Clone, Args)]
pub struct Common {
    /// TOML configuration file (see `infersight validate`).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// Store directory [default: ./infersight-data or the config's store.data_dir].
    #[arg(long, global = true)]
    pub data: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Csv,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InputFormat {
    Auto,
    OtlpJsonl,
    Jsonl,
    Raw,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Simulate a fleet with an incident, ingest it over OTLP, and report the latency breakdown.
    Demo {
        #[command(flatten)]
        common: Common,
        /// Directory for the store and report [default: a new temporary directory].
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long, default_value_t = 7)]
        seed: u64,
    },
    /// Simulate an inference fleet with a fault scenario; write OTLP JSON Lines + raw engine
    /// logs + ground_truth.json to a folder, or send to a running server over OTLP/HTTP.
    Simulate {
        /// Scenario (see `infersight scenarios`).
        #[arg(long)]
        scenario: String,
        #[arg(long, default_value_t = 7)]
        seed: u64,
        /// Simulated time, e.g. 30m, 1h, 2d.
        #[arg(long, default_value = "1h")]
        duration: String,
        /// Start of simulated time (RFC 3339 or Unix seconds) [default: 2025-11-29T02:00:00Z].
        #[arg(long)]
        start: Option<String>,
        #[arg(long, default_value_t = 16)]
        workers: usize,
        /// Mean arrival rate of the whole fleet, requests per second.
        #[arg(long, default_value_t = 50.0)]
        rate: f64,
        /// Arrival times and lengths: auto (mooncake when the trace data is present, else
        /// poisson), mooncake, azure_code, azure_conv, poisson.
        #[arg(long, default_value = "auto")]
        arrivals: String,
        /// Rename a dimension attribute, KEY=NAME (keys: model_version, lora_adapters,
        /// kv_cache_policy, batch_size, max_batch_size, batch_wait_ms); repeatable.
        #[arg(long = "dimension", value_name = "KEY=NAME")]
        dimensions: Vec<String>,
        /// Write files into this folder.
        #[arg(long, conflicts_with = "otlp", required_unless_present = "otlp")]
        out: Option<PathBuf>,
        /// Send to this OTLP/HTTP endpoint (e.g. http://127.0.0.1:4318).
        #[arg(long)]
        otlp: Option<String>,
        /// Where to write ground_truth.json [default: inside --out].
        #[arg(long)]
        ground_truth: Option<PathBuf>,
        /// Fraction of requests whose engine span carries per-token events (`gen_ai.token`, one
        /// per output token, at most 256); 0 disables. Nothing else the simulator writes changes.
        #[arg(long, value_name = "FRACTION", default_value_t = infersight_sim::DEFAULT_TOKEN_EVENTS)]
        token_events: f64,
        /// SGLang workers trace queue / prefill / decode as child spans of the engine span
        /// instead of `gen_ai.latency.*` attributes (ingest rebuilds the breakdown from the tree).
        #[arg(long)]
        phase_spans: bool,
        /// Summary format.
        #[arg(long, value_enum, default_value = "table")]
        format: OutputFormat,
        /// Hide the progress bar.
        #[arg(long)]
        quiet: bool,
    },
    /// List the simulator's fault scenarios.
    Scenarios {
        #[arg(long, value_enum, default_value = "table")]
        format: OutputFormat,
    },
    /// Run the OTLP receivers (gRPC :4317, HTTP :4318) and the API (:7070).
    Serve {
        #[command(flatten)]
        common: Common,
        /// Address to bind [default: 127.0.0.1].
        #[arg(long)]
        listen: Option<IpAddr>,
        /// OTLP gRPC port (0 picks a free one).
        #[arg(long)]
        otlp_grpc_port: Option<u16>,
        /// OTLP HTTP port (0 picks a free one).
        #[arg(long)]
        otlp_http_port: Option<u16>,
        /// API port (0 picks a free one).
        #[arg(long)]
        api_port: Option<u16>,
    },
    /// Ingest files: OTLP JSON Lines, plain JSON lines or raw text logs (gzip too).
    Ingest {
        #[command(flatten)]
        common: Common,
        /// Files to read.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Input format [default: detected per file].
        #[arg(long, value_enum, default_value = "auto")]
        input_format: InputFormat,
        /// Service name for raw text logs.
        #[arg(long)]
        service: Option<String>,
        /// Worker label for raw text logs.
        #[arg(long)]
        worker: Option<String>,
        /// Summary format.
        #[arg(long, value_enum, default_value = "table")]
        format: OutputFormat,
        /// Hide the progress bar.
        #[arg(long)]
        quiet: bool,
        /// Log every batch in the write-ahead log before storing it, so rows read before a
        /// crash are recovered at the next start. By default a file's rows go straight to the
        /// memtable and are durable once flushed (at the memtable limits and at the end): the
        /// file itself is the log, and nothing is reported stored before the end.
        #[arg(long)]
        wal: bool,
    },
    /// Run SQL over the store (tables: requests, spans, logs, metrics, tokens, templates, redactions).
    Query {
        #[command(flatten)]
        common: Common,
        /// The SQL statement (SELECT, EXPLAIN, SHOW, DESCRIBE).
        sql: String,
        #[arg(long, value_enum, default_value = "table")]
        format: OutputFormat,
        /// Ask a running server instead of opening the store (e.g. http://127.0.0.1:7070).
        #[arg(long)]
        server: Option<String>,
    },
    /// List the low-cardinality attributes of requests (candidate root-cause dimensions).
    Dimensions {
        #[command(flatten)]
        common: Common,
        #[arg(long)]
        since: Option<String>,
        #[arg(long)]
        until: Option<String>,
        /// Attributes with more distinct values are not dimensions.
        #[arg(long)]
        max_cardinality: Option<usize>,
        #[arg(long, value_enum, default_value = "table")]
        format: OutputFormat,
    },
    /// SLI series from the rollups: quantiles of a latency SLI or a ratio, by dimensions, per step.
    Sli {
        #[command(flatten)]
        common: Common,
        /// ttft, tpot, e2e, queue, prefill, decode, itl_max, error_rate, abort_rate,
        /// request_rate, token_efficiency, prefix_cache_hit_rate, output_tokens_per_s.
        #[arg(long)]
        sli: String,
        /// Comma-separated quantiles (0.5,0.99 or p50,p99); default p50,p95,p99.
        #[arg(long)]
        q: Option<String>,
        /// Comma-separated dimensions to group by.
        #[arg(long)]
        by: Option<String>,
        /// Comma-separated dimension=value filters.
        #[arg(long)]
        filter: Option<String>,
        #[arg(long)]
        since: Option<String>,
        #[arg(long)]
        until: Option<String>,
        /// Point width (1m, 5m, 1h); default one point for the whole range.
        #[arg(long)]
        step: Option<String>,
        #[arg(long, value_enum, default_value = "table")]
        format: OutputFormat,
    },
    /// The incident report: verdict, evidence, runbooks and past incidents, fixes, checklist,
    /// charts (JSON, Markdown, or one self-contained HTML file).
    Report(crate::report_cmd::ReportArgs),
    /// Stored RCA verdicts: list, show, confirm (becomes a retrievable past incident) or reject.
    Incidents(crate::incidents_cmd::IncidentsArgs),
    /// The audit trail of automatic actions (what fired, was skipped, was rolled back, and why).
    Actions(crate::actions_cmd::ActionsArgs),
    /// The access audit: who read which tables and columns (personal ones flagged), and when.
    Audit(crate::audit_cmd::AuditArgs),
    /// Canary gate: compare an SLI between a baseline and a candidate value of a dimension with
    /// bootstrap confidence intervals; exit 0 pass, 1 block.
    Canary(crate::canary_cmd::CanaryArgs),
    /// Root-cause analysis: when did it go wrong, which attribute combination explains it, which
    /// signals and log templates came with it. Windows are chosen when not given.
    Rca {
        #[command(flatten)]
        common: Common,
        #[arg(long)]
        since: Option<String>,
        #[arg(long)]
        until: Option<String>,
        #[arg(long = "baseline-since")]
        baseline_since: Option<String>,
        #[arg(long = "baseline-until")]
        baseline_until: Option<String>,
        #[arg(long, value_enum, default_value = "table")]
        format: OutputFormat,
    },
    /// Log templates: mine a file (one row per line) or list the persisted template store.
    Templates {
        #[command(flatten)]
        common: Common,
        #[command(subcommand)]
        action: TemplatesAction,
    },
    /// Root-cause localization of a leaf table (CSV): which attribute combinations explain the
    /// deviation. Additive: --real/--forecast. Derived ratio: --time-col/--at/--numerator/
    /// --denominator [--history N]. Every other column is a dimension unless --dims.
    Localize {
        #[arg(long)]
        table: PathBuf,
        #[arg(long)]
        real: Option<String>,
        #[arg(long)]
        forecast: Option<String>,
        #[arg(long = "time-col")]
        time_col: Option<String>,
        /// The anomalous interval (value of the time column, e.g. a Unix second).
        #[arg(long)]
        at: Option<i64>,
        #[arg(long)]
        numerator: Option<String>,
        #[arg(long)]
        denominator: Option<String>,
        /// Intervals before --at whose mean is the forecast [default: 10].
        #[arg(long)]
        history: Option<usize>,
        /// Comma-separated dimension columns.
        #[arg(long)]
        dims: Option<String>,
    },
    /// Check a configuration file and report every error at once.
    Validate {
        /// The TOML file to check.
        config: PathBuf,
    },
    /// Print the attribute and metric-name mapping tables (Markdown).
    Mapping,
    /// Generate benchmark data (see bench/README.md).
    #[command(hide = true, name = "bench-gen")]
    BenchGen {
        #[command(flatten)]
        common: Common,
        #[command(subcommand)]
        what: BenchGen,
    },
    /// Store maintenance: statistics, flush, compaction, retention.
    Store {
        #[command(flatten)]
        common: Common,
        #[command(subcommand)]
        action: StoreAction,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum TemplatesAction {
    /// Mine FILE: prints `line,template_id,template` for every input line (the store keeps ids).
    Mine {
        file: PathBuf,
        /// Loghub-style header spec, e.g. '<Date> <Time> <Level> <Component>: <Content>';
        /// without it headers are detected.
        #[arg(long = "log-format")]
        log_format: Option<String>,
        #[arg(long, value_enum, default_value = "csv")]
        format: OutputFormat,
    },
    /// List the persisted templates (most frequent first).
    List {
        #[arg(long, value_enum, default_value = "table")]
        format: OutputFormat,
    },
}

#[derive(Debug, Clone, Copy, Subcommand)]
pub enum StoreAction {
    /// Print store statistics (JSON).
    Stats,
    /// Flush the memtable to Parquet segments.
    Flush,
    /// Merge small segments and apply retention.
    Compact,
}

#[derive(Debug, Clone, Subcommand)]
pub enum BenchGen {
    /// OTLP JSON Lines of request spans.
    OtlpJsonl {
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = 1_000_000)]
        spans: u64,
        #[arg(long, default_value_t = 1_000)]
        per_line: u64,
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
    /// Synthetic rows of the requests table, written into the store and flushed.
    Requests {
        #[arg(long, default_value_t = 10_000_000)]
        rows: u64,
        #[arg(long, default_value_t = 4)]
        hours: u64,
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
    /// Time p99 of ttft and e2e by model and worker: from rollups vs an exact DataFusion scan.
    SliCompare {
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
}
