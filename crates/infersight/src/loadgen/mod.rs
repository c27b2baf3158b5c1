//! `infersight bench-gen otlp-load`: the serve-path load generator of bench/serve_ingest.sh. It
//! stands where a fleet's OTLP exporters stand, in front of `serve`'s receivers: N exporters
//! (each with its own connection, gRPC and HTTP/protobuf alternating) send pre-encoded batches
//! of simulated spans ([`pool`]) for a duration or a batch count, closed-loop (each sender
//! waits for its answer, and honours Retry-After) or paced to an offered span rate; it reports
//! acknowledged spans per second, ack latency percentiles and the 429 / 503 / failed answers
//! ([`tally`]). `--write-jsonl` writes the same spans as a file for `infersight ingest`.

mod client;
mod pool;
mod tally;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use client::{Client, Outcome, Protocol};
use pool::{Pool, PoolSpec, SpanSource};
use tally::Tally;

use crate::exit::CliError;

#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// OTLP/gRPC receiver, e.g. http://127.0.0.1:4317.
    #[arg(long)]
    pub grpc: Option<String>,
    /// OTLP/HTTP receiver, e.g. http://127.0.0.1:4318 (traces go to /v1/traces).
    #[arg(long)]
    pub http: Option<String>,
    /// Concurrent exporters, each with its own connection; with both receivers given, even
    /// ones use gRPC and odd ones HTTP.
    #[arg(long, default_value_t = 16)]
    pub exporters: usize,
    /// Requests each exporter keeps in flight.
    #[arg(long, default_value_t = 1)]
    pub in_flight: usize,
    /// Stop sending after this long (e.g. 30s, 10m).
    #[arg(long, default_value = "30s")]
    pub duration: String,
    /// Stop after this many batches in all.
    #[arg(long)]
    pub batches: Option<u64>,
    /// Offered load in spans per second, paced over all exporters; without it every sender
    /// sends as soon as its previous batch was answered.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Spans per export request (an OTel SDK's batch span processor sends up to 512).
    #[arg(long, default_value_t = 512)]
    pub batch_spans: usize,
    /// Simulated spans in the pool of batches every exporter cycles through (ids are rewritten
    /// on every pass, so nothing is sent twice).
    #[arg(long, default_value_t = 100_000)]
    pub pool_spans: u64,
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// The spans sent: the simulator's traces, or bench/ingest.sh's one-span requests.
    #[arg(long, value_enum, default_value = "simulated")]
    pub spans: SpanSource,
    /// Date the simulated pool so that it ends when the run starts, so a server's watcher sees
    /// the load as live traffic (every pass repeats those minutes with new ids); without it the
    /// simulator's fixed start. Simulated spans only.
    #[arg(long)]
    pub ending_now: bool,
    /// Write the spans as OTLP JSON Lines into this file (whole passes over the pool, ids
    /// rewritten as a send would) for `infersight ingest`.
    #[arg(long)]
    pub write_jsonl: Option<PathBuf>,
    /// Passes over the pool written by --write-jsonl.
    #[arg(long, default_value_t = 1)]
    pub jsonl_rounds: u64,
    /// Print a progress line on stderr this often (0s: never).
    #[arg(long, default_value = "10s")]
    pub progress_every: String,
    /// For `https://` receivers (OTLP/HTTP over TLS, gRPC over TLS with ALPN h2): the PEM
    /// certificates the server's must chain to.
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// Sent as `Authorization: Bearer …` (HTTP header, gRPC metadata).
    #[arg(long, env = "INFERSIGHT_LOAD_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// What every sender shares: the pool, the next batch to claim and when to stop.
struct Plan {
    pool: Pool,
    next: AtomicU64,
    max_batches: u64,
    start: Instant,
    deadline: Instant,
    /// With `--rate`: batch `i` is due at `start + i × batch_interval`.
    batch_interval: Option<Duration>,
}

fn duration_arg(flag: &str, text: &str) -> Result<Duration, CliError> {
    infersight_model::time::parse_duration_ns(text)
        .filter(|ns| *ns >= 0)
        .map(|ns| Duration::from_nanos(ns as u64))
        .ok_or_else(|| CliError::usage(format!("{flag}: `{text}` is not a duration")))
}

pub async fn run(args: LoadArgs) -> Result<i32, CliError> {
    let duration = duration_arg("--duration", &args.duration)?;
    let progress_every = duration_arg("--progress-every", &args.progress_every)?;
    if args.exporters == 0 || args.in_flight == 0 {
        return Err(CliError::usage(
            "--exporters and --in-flight must be positive",
        ));
    }
    if args.rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
        return Err(CliError::usage("--rate must be a positive number"));
    }
    let spec = PoolSpec {
        spans: args.pool_spans,
        batch_spans: args.batch_spans,
        seed: args.seed,
        source: args.spans,
        ending_now: args.ending_now,
    };
    if args.ending_now && args.spans != SpanSource::Simulated {
        return Err(CliError::usage("--ending-now dates simulated spans only"));
    }
    let built = Instant::now();
    let pool = tokio::task::spawn_blocking(move || Pool::build(&spec))
        .await
        .map_err(|e| CliError::failed(format!("simulating the pool: {e}")))??;
    eprintln!(
        "pool: {} batches, {} spans, {} traces ({:.1} s)",
        pool.len(),
        pool.spans,
        pool.traces,
        built.elapsed().as_secs_f64()
    );
    if let Some(path) = &args.write_jsonl {
        let spans = pool.write_jsonl(path, args.jsonl_rounds)?;
        eprintln!("wrote {spans} spans to {}", path.display());
    }
    if args.grpc.is_none() && args.http.is_none() {
        if args.write_jsonl.is_none() {
            return Err(CliError::usage("give --grpc, --http or --write-jsonl"));
        }
        return Ok(0);
    }
    let clients = connect(&args).await?;
    let report = send(&args, pool, clients, duration, progress_every).await;
    println!("{report}");
    Ok(0)
}

/// One client per exporter: gRPC for even exporters and HTTP for odd ones when both are given.
async fn connect(args: &LoadArgs) -> Result<Vec<Client>, CliError> {
    let access = client::Access::new(args.ca_file.as_deref(), args.token.as_deref())?;
    let mut clients = Vec::with_capacity(args.exporters);
    for exporter in 0..args.exporters {
        let client = match (&args.grpc, &args.http) {
            (Some(grpc), Some(_)) if exporter % 2 == 0 => Client::grpc(grpc, &access).await?,
            (Some(grpc), None) => Client::grpc(grpc, &access).await?,
            (_, Some(http)) => Client::http(http, &access),
            (None, None) => return Err(CliError::usage("give --grpc or --http")),
        };
        clients.push(client);
    }
    Ok(clients)
}

/// Runs every sender to the end and reports.
async fn send(
    args: &LoadArgs,
    pool: Pool,
    clients: Vec<Client>,
    duration: Duration,
    progress_every: Duration,
) -> serde_json::Value {
    let start = Instant::now();
    let batch_interval = args
        .rate
        .map(|rate| Duration::from_secs_f64(pool.spans as f64 / pool.len().max(1) as f64 / rate));
    let plan = Arc::new(Plan {
        pool,
        next: AtomicU64::new(0),
        max_batches: args.batches.unwrap_or(u64::MAX),
        start,
        deadline: start + duration,
        batch_interval,
    });
    let tally = Arc::new(Tally::default());
    let cpu_before = cpu_seconds();
    let mut senders = Vec::new();
    for client in clients {
        for _ in 0..args.in_flight {
            let (plan, tally, client) = (plan.clone(), tally.clone(), client.clone());
            senders.push(tokio::spawn(sender(client, plan, tally)));
        }
    }
    let progress = (!progress_every.is_zero())
        .then(|| tokio::spawn(progress_lines(tally.clone(), progress_every)));
    let mut latencies: [Vec<u32>; 2] = [Vec::new(), Vec::new()];
    for sender in senders {
        if let Ok((protocol, us)) = sender.await {
            latencies[protocol as usize].extend(us);
        }
    }
    let elapsed = start.elapsed();
    if let Some(progress) = progress {
        progress.abort();
    }
    let mut report = tally::report(&tally, latencies, elapsed);
    report["exporters"] = serde_json::json!(args.exporters);
    report["in_flight"] = serde_json::json!(args.in_flight);
    report["offered_spans_per_s"] = serde_json::json!(args.rate);
    report["pool"] = serde_json::json!({
        "source": format!("{:?}", args.spans).to_lowercase(),
        "batches": plan.pool.len(),
        "spans": plan.pool.spans,
        "traces": plan.pool.traces,
        "batch_spans": args.batch_spans,
    });
    report["generator_cpu_s"] = serde_json::json!(cpu_seconds() - cpu_before);
    report
}

/// One sender: claims the next batch, waits for its time when paced, sends it and counts the
/// answer; answers the acknowledged requests' latencies in microseconds.
async fn sender(mut client: Client, plan: Arc<Plan>, tally: Arc<Tally>) -> (Protocol, Vec<u32>) {
    let protocol = client.protocol();
    let mut latencies = Vec::new();
    loop {
        let index = plan.next.fetch_add(1, Ordering::Relaxed);
        if index >= plan.max_batches {
            break;
        }
        if let Some(every) = plan.batch_interval {
            let due = plan.start + every.mul_f64(index as f64);
            if due >= plan.deadline {
                break;
            }
            tokio::time::sleep_until(due.into()).await;
        }
        if Instant::now() >= plan.deadline {
            break;
        }
        let (body, spans) = plan.pool.body(index);
        tally.sent(protocol, spans);
        let sent_at = Instant::now();
        let outcome = client.send(body).await;
        let took = sent_at.elapsed();
        tally.answered(protocol, spans, &outcome);
        let wait = match outcome {
            Outcome::Acked { .. } => {
                latencies.push(u32::try_from(took.as_micros()).unwrap_or(u32::MAX));
                continue;
            }
            Outcome::Throttled(wait) | Outcome::Unavailable(wait) => wait,
            Outcome::Failed(_) => Duration::from_millis(100),
        };
        // paced senders keep to the schedule; closed-loop ones back off as an exporter would
        if plan.batch_interval.is_none() {
            tokio::time::sleep(wait.min(Duration::from_secs(1))).await;
        }
    }
    (protocol, latencies)
}

/// A line on stderr every `every`: acknowledged spans/s and the other answers since the last.
async fn progress_lines(tally: Arc<Tally>, every: Duration) {
    let start = Instant::now();
    let mut last = tally.totals();
    loop {
        tokio::time::sleep(every).await;
        let now = tally.totals();
        eprintln!(
            "[{:.0} s] acked {:.0} spans/s, throttled {}, unavailable {}, failed {}",
            start.elapsed().as_secs_f64(),
            (now[0] - last[0]) as f64 / every.as_secs_f64(),
            now[1] - last[1],
            now[2] - last[2],
            now[3] - last[3],
        );
        last = now;
    }
}

/// User + system CPU seconds of this process so far (Linux `/proc/self/stat`, 100 ticks per
/// second); 0 where it cannot be read.
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // fields after the command name (which may hold spaces) in parentheses
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the line: 12th and 13th after the name
    (ticks(11) + ticks(12)) / 100.0
}
