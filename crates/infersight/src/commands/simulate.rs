//! `infersight simulate`: runs the fleet simulator (crate `infersight-sim`) with a fault scenario
//! and delivers its telemetry — to files (OTLP JSON Lines + raw engine logs +
//! `ground_truth.json`) or to a running server's OTLP/HTTP receiver (`crate::sim_sink`) — then
//! prints what it sent.

use std::io::IsTerminal;
use std::path::PathBuf;

use infersight_sim::{
    ArrivalKind, DimensionNames, FileSink, GroundTruth, Scenario, SimConfig, SimSummary, Simulator,
};
use serde_json::json;

use crate::args::FormatArgs;
use crate::exit::CliError;
use crate::output::{self, OutputFormat};
use crate::sim_sink::{OtlpHttpSink, progress_bar, run_into, sim_error};

#[derive(Debug, Clone, clap::Args)]
#[command(mut_arg("format", |arg| arg.help("Summary format")))]
pub struct SimulateArgs {
    /// Scenario (see `infersight scenarios`).
    #[arg(long)]
    pub scenario: String,
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Simulated time, e.g. 30m, 1h, 2d.
    #[arg(long, default_value = "1h")]
    pub duration: String,
    /// Start of simulated time (RFC 3339 or Unix seconds) [default: 2025-11-29T02:00:00Z].
    #[arg(long)]
    pub start: Option<String>,
    #[arg(long, default_value_t = 16)]
    pub workers: usize,
    /// Mean arrival rate of the whole fleet, requests per second.
    #[arg(long, default_value_t = 50.0)]
    pub rate: f64,
    /// Arrival times and lengths: auto (mooncake when the trace data is present, else
    /// poisson), mooncake, azure_code, azure_conv, poisson.
    #[arg(long, default_value = "auto")]
    pub arrivals: String,
    /// Slow variation of the arrival rate: short (±25 % over 30 minutes), daily (an
    /// interactive service's day on the UTC time of day: 0.5× the mean at 02:00, 1.5× at
    /// 14:00, the short cycle on top), none.
    #[arg(long, default_value = "short", value_name = "short|daily|none")]
    pub load_cycle: String,
    /// Rename a dimension attribute, KEY=NAME (keys: model_version, lora_adapters,
    /// kv_cache_policy, batch_size, max_batch_size, batch_wait_ms); repeatable.
    #[arg(long = "dimension", value_name = "KEY=NAME")]
    pub dimensions: Vec<String>,
    /// Write files into this folder.
    #[arg(long, conflicts_with = "otlp", required_unless_present = "otlp")]
    pub out: Option<PathBuf>,
    /// Send to this OTLP/HTTP endpoint (e.g. http://127.0.0.1:4318).
    #[arg(long)]
    pub otlp: Option<String>,
    /// Where to write ground_truth.json [default: inside --out].
    #[arg(long)]
    pub ground_truth: Option<PathBuf>,
    /// Fraction of requests whose engine span carries per-token events (`gen_ai.token`, one
    /// per output token, at most 256); 0 disables. Nothing else the simulator writes changes.
    #[arg(long, value_name = "FRACTION", default_value_t = infersight_sim::DEFAULT_TOKEN_EVENTS)]
    pub token_events: f64,
    /// SGLang workers trace queue / prefill / decode as child spans of the engine span
    /// instead of `gen_ai.latency.*` attributes (ingest rebuilds the breakdown from the tree).
    #[arg(long)]
    pub phase_spans: bool,
    /// Tell the same fault in other conventions, NAME[,NAME...] (repeatable): openinference,
    /// custom_names, resource_dims, gateway_genai, hw_metrics, head_sampling, process_tags,
    /// past_year, rollout, one_pod, one_region, throttled_pod; or a number N for a mix drawn
    /// from N. The ground truth is stated in the names the data then carries.
    #[arg(long = "variation", value_name = "NAME[,NAME...]|N")]
    pub variations: Vec<String>,
    #[command(flatten)]
    pub format: FormatArgs,
    /// Hide the progress bar.
    #[arg(long)]
    pub quiet: bool,
}

pub async fn run(args: SimulateArgs) -> Result<i32, CliError> {
    tokio::task::spawn_blocking(move || simulate(args))
        .await
        .map_err(|e| CliError::failed(format!("simulate task: {e}")))?
}

/// Resolves the arrival source: `auto` replays Mooncake when the data folder has it, else Poisson.
fn arrival_kind(text: &str, data_dir: &std::path::Path) -> Result<ArrivalKind, CliError> {
    if text == "auto" {
        let kind = ArrivalKind::Mooncake;
        let present =
            infersight_sim::arrivals::trace_path(kind, data_dir).is_some_and(|p| p.is_file());
        if present {
            return Ok(kind);
        }
        eprintln!(
            "infersight simulate: no trace data at {} (INFERSIGHT_DATA_DIR); using Poisson arrivals",
            data_dir.display()
        );
        return Ok(ArrivalKind::Poisson);
    }
    text.parse().map_err(sim_error)
}

fn build_config(args: &SimulateArgs) -> Result<SimConfig, CliError> {
    let scenario: Scenario = args.scenario.parse().map_err(sim_error)?;
    let mut config = SimConfig::new(scenario);
    config.seed = args.seed;
    let duration_ns =
        infersight_model::time::parse_duration_ns(&args.duration).ok_or_else(|| {
            CliError::usage(format!(
                "--duration `{}`: expected e.g. 90s, 30m, 1h, 2d",
                args.duration
            ))
        })?;
    config.duration_s = duration_ns as f64 / 1e9;
    if let Some(start) = &args.start {
        config.start_ns =
            infersight_model::time::parse_time(start, infersight_model::time::now_ns())
                .map_err(|e| CliError::usage(format!("--start: {e}")))?;
    }
    config.workers = args.workers;
    config.rate_per_s = args.rate;
    config.load_cycle = infersight_sim::LoadCycle::parse(&args.load_cycle).ok_or_else(|| {
        CliError::usage(format!(
            "--load-cycle `{}`: expected short, daily or none",
            args.load_cycle
        ))
    })?;
    config.token_events = args.token_events;
    config.phase_spans = args.phase_spans;
    let data_dir = infersight_sim::default_data_dir();
    config.arrivals = arrival_kind(&args.arrivals, &data_dir)?;
    config.data_dir = Some(data_dir);
    let mut names = DimensionNames::default();
    for spec in &args.dimensions {
        names = names.with_override(spec).map_err(sim_error)?;
    }
    config.dimension_names = names;
    config.variations =
        infersight_sim::variation::parse_list(&args.variations).map_err(sim_error)?;
    config.validate().map_err(sim_error)?;
    Ok(config)
}

/// `infersight simulate` (blocking: run it on a blocking thread).
fn simulate(args: SimulateArgs) -> Result<i32, CliError> {
    let config = build_config(&args)?;
    let started = std::time::Instant::now();
    let sim = Simulator::new(config.clone()).map_err(sim_error)?;
    let truth = sim.ground_truth();
    let (summary, destination) = deliver(&args, sim)?;
    let truth_path = write_ground_truth(&args, &truth)?;
    let sent = Sent {
        config: &config,
        summary: &summary,
        truth: &truth,
        destination: &destination,
        truth_path: truth_path.as_ref(),
        seconds: started.elapsed().as_secs_f64(),
    };
    print_summary(&sent, args.format.format)?;
    Ok(0)
}

/// Runs the simulator into `--out DIR` or `--otlp URL`; the summary and where it went.
fn deliver(args: &SimulateArgs, sim: Simulator) -> Result<(SimSummary, String), CliError> {
    let show = !args.quiet && std::io::stderr().is_terminal();
    match (&args.out, &args.otlp) {
        (Some(dir), None) => {
            let mut sink = FileSink::create(dir).map_err(sim_error)?;
            let summary = run_into(sim, &mut sink, progress_bar("simulating", show))?;
            Ok((summary, dir.display().to_string()))
        }
        (None, Some(url)) => {
            let mut sink = OtlpHttpSink::new(url);
            let summary = run_into(sim, &mut sink, progress_bar("sending over OTLP/HTTP", show))?;
            Ok((summary, sink.base_url.clone()))
        }
        _ => Err(CliError::usage(
            "give exactly one of --out DIR and --otlp URL",
        )),
    }
}

/// `--ground-truth FILE`, else `ground_truth.json` inside `--out`; nothing when sent over OTLP.
fn write_ground_truth(
    args: &SimulateArgs,
    truth: &GroundTruth,
) -> Result<Option<PathBuf>, CliError> {
    match (&args.ground_truth, &args.out) {
        (Some(path), _) => {
            let text = output::json_pretty(truth)?;
            std::fs::write(path, text + "\n")
                .map_err(|e| CliError::failed(format!("{}: {e}", path.display())))?;
            Ok(Some(path.clone()))
        }
        (None, Some(dir)) => Ok(Some(
            infersight_sim::write_ground_truth(dir, truth).map_err(sim_error)?,
        )),
        (None, None) => Ok(None),
    }
}

/// What a run sent, for its summary.
struct Sent<'a> {
    config: &'a SimConfig,
    summary: &'a SimSummary,
    truth: &'a GroundTruth,
    destination: &'a str,
    truth_path: Option<&'a PathBuf>,
    seconds: f64,
}

fn print_summary(sent: &Sent<'_>, format: OutputFormat) -> Result<(), CliError> {
    let Sent {
        config,
        summary,
        truth,
        destination,
        truth_path,
        seconds,
    } = sent;
    match format {
        OutputFormat::Json => {
            let value = json!({
                "scenario": config.scenario.name(),
                "destination": destination,
                "ground_truth_file": truth_path.map(|p| p.display().to_string()),
                "seconds": (seconds * 1000.0).round() / 1000.0,
                "summary": summary,
                "ground_truth": truth,
            });
            println!("{}", output::json_line(&value)?);
        }
        OutputFormat::Table | OutputFormat::Csv => {
            println!(
                "{}: {} requests ({} spans, {} token events, {} log records, {} raw log lines, {} metric points; {} timeouts, {} errors, {} preemptions) in {seconds:.1} s → {destination}",
                config.scenario.name(),
                summary.requests,
                summary.spans,
                summary.token_events,
                summary.log_records,
                summary.raw_lines,
                summary.metric_points,
                summary.timeouts,
                summary.errors,
                summary.preemptions
            );
            println!(
                "arrivals: {}; incident {} .. {}",
                config.arrivals.name(),
                truth.incident_window.start,
                truth.incident_window.end
            );
            if !truth.variations.is_empty() {
                let names: Vec<&str> = truth.variations.iter().map(|v| v.name()).collect();
                println!("variations: {}", names.join(", "));
            }
            if let Some(path) = truth_path {
                println!("ground truth: {}", path.display());
            }
        }
    }
    Ok(())
}
