//! `infersight bench-gen` (hidden): writes the benchmark data of bench/README.md with the
//! generators of `crate::benchgen` — OTLP JSON Lines for the ingest benchmark, `requests` rows
//! straight into a store for the query benchmark, and the rollup-vs-scan SLI timing.

use std::path::PathBuf;

use infersight_store::StorageBackend;

use crate::args::Common;
use crate::config::Config;
use crate::exit::CliError;
use crate::wiring;

#[derive(Debug, clap::Args)]
pub struct BenchGenArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(subcommand)]
    pub what: BenchGen,
}

#[derive(Debug, Clone, clap::Subcommand)]
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
        /// Flush after about every this many rows (many small segments per hour, for the
        /// compaction benchmark); 0: once, at the end.
        #[arg(long, default_value_t = 0)]
        flush_every: u64,
    },
    /// Time p99 of ttft and e2e by model and worker: from rollups vs an exact DataFusion scan.
    SliCompare {
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
    /// Send simulated spans to a running `serve` over OTLP/gRPC and OTLP/HTTP from many
    /// exporters; report acknowledged spans/s, ack latency and 429/503 answers (JSON).
    OtlpLoad(crate::loadgen::LoadArgs),
}

pub async fn run(args: BenchGenArgs) -> Result<i32, CliError> {
    if let BenchGen::OtlpLoad(load) = args.what {
        return crate::loadgen::run(load).await;
    }
    let config = args.common.resolve()?;
    tokio::task::spawn_blocking(move || bench_gen(config, args.what))
        .await
        .map_err(|e| CliError::failed(format!("bench-gen task: {e}")))?
}

fn bench_gen(mut config: Config, what: BenchGen) -> Result<i32, CliError> {
    match what {
        BenchGen::OtlpJsonl {
            out,
            spans,
            per_line,
            seed,
        } => crate::benchgen::otlp_jsonl(&out, spans, per_line, seed)?,
        BenchGen::Requests {
            rows,
            hours,
            seed,
            flush_every,
        } => {
            config.store.fsync = "never".into();
            config.store.memtable_max_rows = usize::MAX / 2;
            let store = wiring::open_store(&config)?;
            crate::benchgen::requests(&*store, rows, hours, seed, flush_every)?;
            store.close().map_err(|e| CliError::failed(e.to_string()))?;
        }
        BenchGen::SliCompare { runs } => {
            let store = wiring::open_existing_store(&config)?;
            let report = crate::benchgen::sli_compare(store, runs)?;
            println!("{report}");
        }
        BenchGen::OtlpLoad(_) => return Err(CliError::usage("otlp-load runs asynchronously")),
    }
    Ok(0)
}
