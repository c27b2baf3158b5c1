//! `infersight demo`: the main job end to end on the embedded default. It starts the real server
//! in-process on free ports with a fresh store, runs the fleet simulator's headline scenario
//! (`lora_kv_regression`: model version × paged KV cache × one LoRA pair gets +900 ms) and sends
//! everything it emits — traces, logs, metrics, raw engine lines — over OTLP/HTTP, shuts down
//! (flushing to Parquet), then answers with SQL — the latency breakdown before vs during the
//! incident and the slices whose over-SLO counts moved most — and runs the root-cause engine,
//! whose verdict it prints and compares with the scenario's ground truth. The verdict is stored
//! as an incident and its full report (runbooks, fixes, checklist, charts) written as
//! `incident.{json,md,html}` beside the demo summary.
//!
//! Arrivals are Poisson, so the demo needs no data folder.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use infersight_model::telemetry::Counters;
use infersight_query::{QueryEngine, QueryOutput};
use infersight_server::ServeSettings;
use infersight_sim::{
    ArrivalKind, GroundTruth, Scenario, SimConfig, SimError, SimSummary, Simulator, TelemetrySink,
};
use infersight_store::StorageBackend;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use crate::args::Common;
use crate::config::Config;
use crate::exit::{CliError, report_error};
use crate::sim_sink::{OtlpHttpSink, progress_bar, run_into, sim_error};
use crate::wiring;

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    #[command(flatten)]
    pub common: Common,
    /// Directory for the store and report [default: a new temporary directory].
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
}

const WORKERS: usize = 16;
const RATE_PER_S: f64 = 30.0;
const DURATION_MIN: i64 = 45;

fn ts_literal(ns: i64) -> String {
    format!("'{}'", infersight_model::time::format_rfc3339(ns))
}

fn sim_config(seed: u64) -> SimConfig {
    let mut config = SimConfig::new(Scenario::LoraKvRegression);
    config.seed = seed;
    config.workers = WORKERS;
    config.rate_per_s = RATE_PER_S;
    config.duration_s = (DURATION_MIN * 60) as f64;
    config.arrivals = ArrivalKind::Poisson;
    config
}

fn config_end_ns(seed: u64) -> i64 {
    sim_config(seed).end_ns()
}

pub async fn run(args: DemoArgs) -> Result<i32, CliError> {
    let mut config = args.common.resolve()?;
    let seed = args.seed;
    let started = std::time::Instant::now();
    let out_dir = args.out.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("infersight-demo-{}", std::process::id()))
    });
    let data = fresh_data_dir(&out_dir)?;
    config.store.data_dir = data.clone();
    let simulator = Simulator::new(sim_config(seed)).map_err(sim_error)?;
    let truth = simulator.ground_truth();
    let incident_start = simulator.incident_start_ns();
    eprintln!(
        "infersight demo: scenario {}, {WORKERS} workers, {DURATION_MIN} min of traffic at {RATE_PER_S} req/s, incident from {}",
        Scenario::LoraKvRegression.name(),
        truth.incident_window.start
    );
    let summary = send_through_server(&config, simulator).await?;

    // Reopen the flushed store and ask it questions, as a user would after an incident.
    let store = tokio::task::block_in_place(|| wiring::open_store(&config))?;
    let engine = QueryEngine::new(store.clone() as Arc<dyn StorageBackend>);
    let answers = ask(&engine, incident_start, seed).await?;
    let mut report = String::new();
    write_sql_sections(&mut report, &summary, &data, &answers);
    let incidents = infersight_rca::IncidentStore::open(&data);
    let recorded = infersight_rca::analyse_and_record(&engine, &incidents, Default::default())
        .await
        .map_err(|e| CliError::failed(format!("rca: {e}")))?;
    let rca = recorded.report.clone();
    let incident = recorded
        .stored()
        .map_err(|e| CliError::failed(format!("rca: {e}")))?;
    write_rca_sections(&mut report, &rca, &truth);
    let _ = writeln!(
        report,
        "Requests whose stored attributes still contain an e-mail address (must be 0, redaction): \n\n```\n{}\n```",
        answers.redacted.render(TABLE).trim_end()
    );
    // The incident report: stored verdict, runbooks, fixes, checklist, charts.
    let full = super::report::build(&engine, &config, &incidents, &incident).await?;
    write_best_runbook(&mut report, &full);
    let written = write_incident_files(&out_dir, &full)?;
    println!("{report}");
    let report_path = out_dir.join("report.md");
    std::fs::write(&report_path, &report)
        .map_err(|e| CliError::failed(format!("{}: {e}", report_path.display())))?;
    eprintln!(
        "infersight demo: finished in {:.1} s; demo summary: {}; incident {} report: {}; store: {} (try: infersight query --data {} \"SELECT worker, count(*) FROM requests GROUP BY worker\")",
        started.elapsed().as_secs_f64(),
        report_path.display(),
        incident.id,
        written.join(", "),
        data.display(),
        data.display()
    );
    Ok(0)
}

/// `<out>/data`, emptied if a previous demo left one; `out` is created.
fn fresh_data_dir(out_dir: &Path) -> Result<PathBuf, CliError> {
    let data = out_dir.join("data");
    if data.exists() {
        std::fs::remove_dir_all(&data)
            .map_err(|e| CliError::failed(format!("{}: {e}", data.display())))?;
    }
    std::fs::create_dir_all(out_dir)
        .map_err(|e| CliError::failed(format!("{}: {e}", out_dir.display())))?;
    Ok(data)
}

/// Starts the server in-process on free ports over a fresh store, sends the simulator's
/// telemetry to its OTLP/HTTP receiver, and stops it (which flushes the store).
async fn send_through_server(
    config: &Config,
    simulator: Simulator,
) -> Result<SimSummary, CliError> {
    let store = tokio::task::block_in_place(|| wiring::open_store(config))?;
    let counters = Arc::new(Counters::new());
    let writer = wiring::batch_writer(config, store.clone(), counters.clone())?;
    let settings = ServeSettings {
        listen: [127, 0, 0, 1].into(),
        otlp_grpc_port: 0,
        otlp_http_port: 0,
        api_port: 0,
        max_body_bytes: config.server.max_body_bytes,
        queue_capacity: config.server.queue_capacity,
        decode_threads: config.server.decode_threads,
        max_query_rows: config.query.max_rows,
        max_dimension_cardinality: config.query.max_dimension_cardinality,
        query_limits: config.query.limits(),
        role: infersight_server::role::Role::All,
    };
    let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(infersight_server::serve(
        settings,
        store.clone() as Arc<dyn StorageBackend>,
        writer,
        wiring::mapper(config),
        counters,
        move |addrs| {
            let _ = addr_tx.send(addrs);
        },
        async move {
            let _ = stop_rx.await;
        },
    ));
    let addrs = addr_rx
        .await
        .map_err(|_| CliError::failed("demo server did not start"))?;

    let otlp_http = addrs
        .otlp_http
        .ok_or_else(|| CliError::failed("demo server has no OTLP listener"))?;
    let url = format!("http://{otlp_http}");
    let show = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let limits = (
        config.store.memtable_max_bytes,
        config.store.memtable_max_rows,
    );
    let flushed = store.clone();
    let summary = tokio::task::spawn_blocking(move || {
        let mut sink = FlushingSink {
            inner: OtlpHttpSink::new(&url),
            store: flushed,
            max_bytes: limits.0 as u64,
            max_rows: limits.1 as u64,
        };
        run_into(
            simulator,
            &mut sink,
            progress_bar("sending over OTLP/HTTP", show),
        )
    })
    .await
    .map_err(|e| CliError::failed(e.to_string()))??;
    let _ = stop_tx.send(());
    server
        .await
        .map_err(|e| CliError::failed(e.to_string()))?
        .map_err(|e| CliError::failed(e.to_string()))?;
    drop(store);
    Ok(summary)
}

/// The OTLP/HTTP sink, and a flush of the store whenever a simulated chunk leaves its memtable
/// over `store.memtable_max_bytes` or `_rows`. Without it the whole run stayed in memory until
/// the shutdown's flush, which then sorted and encoded all of it at once (1.8 GB peak RSS for
/// the demo's 85k requests). Flushing at chunk boundaries (every request of the chunk is
/// acknowledged, so in the memtable), not on serve's wall-clock maintenance tick, cuts the
/// segments at the same rows in every run: approximate percentiles depend on the segments, and
/// the demo's report stays the same from run to run.
struct FlushingSink {
    inner: OtlpHttpSink,
    store: Arc<infersight_store::Store>,
    max_bytes: u64,
    max_rows: u64,
}

impl TelemetrySink for FlushingSink {
    fn traces(&mut self, r: ExportTraceServiceRequest) -> Result<(), SimError> {
        self.inner.traces(r)
    }
    fn logs(&mut self, r: ExportLogsServiceRequest) -> Result<(), SimError> {
        self.inner.logs(r)
    }
    fn metrics(&mut self, r: ExportMetricsServiceRequest) -> Result<(), SimError> {
        self.inner.metrics(r)
    }
    fn raw_log_line(&mut self, w: &str, s: &str, ts: i64, l: &str) -> Result<(), SimError> {
        self.inner.raw_log_line(w, s, ts, l)
    }
    fn chunk_done(&mut self, until_ns: i64, fraction: f64) -> Result<(), SimError> {
        self.inner.chunk_done(until_ns, fraction)?;
        let stats = self.store.stats();
        let rows: u64 = stats.tables.iter().map(|(_, t)| t.memtable_rows).sum();
        if stats.memtable_bytes >= self.max_bytes || rows >= self.max_rows {
            self.store
                .flush()
                .map_err(|e| SimError::Sink(format!("flushing the demo's store: {e}")))?;
        }
        Ok(())
    }
    fn finish(&mut self) -> Result<(), SimError> {
        self.inner.finish()
    }
}

const TABLE: infersight_query::OutputFormat = infersight_query::OutputFormat::Table;

/// The SQL answers of the demo summary.
struct Answers {
    breakdown: QueryOutput,
    threshold_ms: f64,
    movers: QueryOutput,
    redacted: QueryOutput,
}

async fn sql(engine: &QueryEngine, sql: String) -> Result<QueryOutput, CliError> {
    engine
        .sql(&sql)
        .await
        .map_err(|e| CliError::failed(format!("{e}: {sql}")))
}

/// The latency breakdown before vs during the incident, the baseline p99, the slices with the
/// most requests over it (normalized for window length), and e-mail addresses left in `attrs`.
async fn ask(engine: &QueryEngine, incident_start: i64, seed: u64) -> Result<Answers, CliError> {
    let window = |alias: &str| {
        format!(
            "CASE WHEN ts >= {} THEN '2 incident' ELSE '1 baseline' END AS {alias}",
            ts_literal(incident_start)
        )
    };
    let breakdown_sql = format!(
        "SELECT {}, count(*) AS requests, \
         round(avg(queue_ms), 1) AS queue_ms_avg, round(avg(prefill_ms), 1) AS prefill_ms_avg, \
         round(avg(ttft_ms), 1) AS ttft_ms_avg, round(avg(decode_ms), 1) AS decode_ms_avg, \
         round(approx_percentile_cont(e2e_ms, 0.5), 0) AS e2e_ms_p50, round(approx_percentile_cont(e2e_ms, 0.99), 0) AS e2e_ms_p99 \
         FROM requests GROUP BY 1 ORDER BY 1",
        window("window")
    );
    let threshold_sql = format!(
        "SELECT approx_percentile_cont(e2e_ms, 0.99) FROM requests WHERE ts < {}",
        ts_literal(incident_start)
    );
    let breakdown = sql(engine, breakdown_sql).await?;
    let threshold = sql(engine, threshold_sql).await?;
    let threshold_ms = threshold
        .to_json_value()
        .map_err(|e| CliError::failed(e.to_string()))?
        .get("rows")
        .and_then(|r| r.get(0))
        .and_then(|row| {
            row.as_object()
                .and_then(|o| o.values().next().cloned())
                .or_else(|| row.get(0).cloned())
        })
        .and_then(|v| v.as_f64())
        .unwrap_or(1_000.0);
    let movers_sql = format!(
        "SELECT model_version, kv_cache_policy, lora_adapters, \
         sum(CASE WHEN ts < {inc} AND e2e_ms > {thr} THEN 1 ELSE 0 END) AS slow_before, \
         sum(CASE WHEN ts >= {inc} AND e2e_ms > {thr} THEN 1 ELSE 0 END) AS slow_during, \
         round(avg(CASE WHEN ts < {inc} THEN e2e_ms END), 0) AS e2e_ms_avg_before, \
         round(avg(CASE WHEN ts >= {inc} THEN e2e_ms END), 0) AS e2e_ms_avg_during \
         FROM requests GROUP BY 1, 2, 3 ORDER BY slow_during - slow_before * {ratio} DESC LIMIT 5",
        inc = ts_literal(incident_start),
        thr = threshold_ms,
        ratio = (config_end_ns(seed) - incident_start) as f64
            / (incident_start - infersight_sim::config::DEFAULT_START_NS) as f64,
    );
    let movers = sql(engine, movers_sql).await?;
    let redacted = sql(
        engine,
        "SELECT count(*) AS with_email FROM requests WHERE attrs LIKE '%@example.com%'".into(),
    )
    .await?;
    Ok(Answers {
        breakdown,
        threshold_ms,
        movers,
        redacted,
    })
}

/// The title, what was ingested, the latency breakdown and the slices that moved.
fn write_sql_sections(report: &mut String, summary: &SimSummary, data: &Path, answers: &Answers) {
    let _ = writeln!(report, "# infersight demo report\n");
    let _ = writeln!(
        report,
        "{} requests from {WORKERS} workers ({} spans, {} log records, {} raw engine log lines, {} metric points) ingested over OTLP/HTTP into {}.\n",
        summary.requests,
        summary.spans,
        summary.log_records,
        summary.raw_lines,
        summary.metric_points,
        data.display()
    );
    let _ = writeln!(
        report,
        "## Latency breakdown, baseline vs incident\n\n```\n{}\n```\n",
        answers.breakdown.render(TABLE).trim_end()
    );
    let _ = writeln!(
        report,
        "## Slices with the most requests over the baseline p99 ({:.0} ms), normalized for window length\n\n```\n{}\n```\n",
        answers.threshold_ms,
        answers.movers.render(TABLE).trim_end()
    );
}

/// The engine's verdict, and whether its top cause is the injected one.
fn write_rca_sections(report: &mut String, rca: &infersight_rca::RcaReport, truth: &GroundTruth) {
    let _ = writeln!(
        report,
        "## Root-cause analysis (`infersight rca`)\n\n**Verdict:** {}\n\n```\n{}```\n",
        rca.verdict,
        super::rca::render_rca(rca)
    );
    let _ = writeln!(
        report,
        "Engine verdict vs ground truth: {}.\n",
        match (rca.root_causes.first(), truth.root_causes.first()) {
            (Some(found), Some(injected)) if found.dimensions == injected.dimensions =>
                "the top-ranked root cause is the injected one",
            (None, None) => "nothing blamed on a healthy fleet",
            _ => "MISMATCH: the top-ranked root cause is not the injected one",
        }
    );
    for cause in &truth.root_causes {
        let _ = writeln!(
            report,
            "Injected (ground truth): {} — {}: {}, from {}.\n",
            infersight_model::signal::Subject::describe(&cause.dimensions),
            cause.sli,
            cause.effect,
            truth.incident_window.start
        );
    }
}

fn write_best_runbook(report: &mut String, full: &infersight_report::Report) {
    if let Some(best) = full.knowledge.first() {
        let _ = writeln!(
            report,
            "\nBest-matching runbook: {} (`{}`, score {:.1}); first fix: {}\n",
            best.title,
            best.id,
            best.score,
            full.suggestions
                .iter()
                .find(|a| a.source == best.id)
                .map_or("-", |a| a.text.as_str())
        );
    }
}

/// `incident.{json,md,html}` in `out_dir`; their paths.
fn write_incident_files(
    out_dir: &Path,
    full: &infersight_report::Report,
) -> Result<Vec<String>, CliError> {
    let mut written = Vec::new();
    for format in [
        infersight_report::ReportFormat::Json,
        infersight_report::ReportFormat::Markdown,
        infersight_report::ReportFormat::Html,
    ] {
        let path = out_dir.join(format!("incident.{}", format.extension()));
        let text = full.render(format).map_err(report_error)?;
        std::fs::write(&path, text)
            .map_err(|e| CliError::failed(format!("{}: {e}", path.display())))?;
        written.push(path.display().to_string());
    }
    Ok(written)
}
