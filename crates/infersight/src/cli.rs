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
    },
    /// Run SQL over the store (tables: requests, spans, logs, metrics, tokens, templates).
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
}
