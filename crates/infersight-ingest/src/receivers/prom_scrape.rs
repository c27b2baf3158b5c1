//! Prometheus scrape receiver: the one receiver that pulls. Each configured target (a vLLM,
//! SGLang, TGI or Triton `/metrics` endpoint, or NVIDIA's DCGM exporter) gets a task that fetches
//! its exposition on an interval, parses and converts it (`crate::prometheus`, then the OTLP
//! metrics conversion, so names and labels are normalized exactly as for OTLP pushes), and submits
//! the canonical batches to the ingest queue through [`ReceiverState::submit`]. Every scrape also
//! records `scrape_up` (1/0), `scrape_duration_seconds` and `scrape_samples_scraped` for the
//! target, as Prometheus records `up`.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use crate::prometheus::convert::{health_metrics, scrape_request};
use crate::prometheus::{ExpositionError, ParseWarning, exposition_to_otlp, parse};
use crate::receivers::sink::SinkError;
use crate::receivers::{IngestOrg, ReceiverState};
use infersight_model::telemetry::catalog;

/// What the scraper asks for: the classic text format, which every engine serves.
pub const ACCEPT: &str = "text/plain;version=0.0.4";

/// One resolved scrape target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScrapeTarget {
    /// `http://host:port/metrics`.
    pub url: String,
    /// `service.name` of the scraped metrics (e.g. `vllm`, `dcgm`).
    pub job: String,
    /// `service.instance.id` (→ the `worker` column); host:port of the URL when `None`.
    pub worker: Option<String>,
    pub interval: Duration,
    /// Whole-scrape deadline (connect, request, body); shorter than `interval`.
    pub timeout: Duration,
    /// For an `https://` URL: the PEM certificates the target's certificate must chain to;
    /// `None`: the web's root certificates.
    pub ca_file: Option<std::path::PathBuf>,
    /// A file holding the bearer token sent as `Authorization: Bearer …` (Prometheus'
    /// `authorization.credentials_file`), read at every scrape so a rotated token is picked up.
    pub bearer_token_file: Option<std::path::PathBuf>,
}

impl ScrapeTarget {
    /// The worker the target's metrics are recorded under: the configured one, else host:port.
    pub fn instance(&self) -> String {
        if let Some(worker) = self.worker.as_ref().filter(|w| !w.is_empty()) {
            return worker.clone();
        }
        self.url
            .parse::<http::Uri>()
            .ok()
            .and_then(|uri| {
                let authority = uri.authority()?;
                Some(match authority.port_u16() {
                    Some(port) => format!("{}:{port}", authority.host()),
                    None if uri.scheme_str() == Some("https") => {
                        format!("{}:443", authority.host())
                    }
                    None => format!("{}:80", authority.host()),
                })
            })
            .unwrap_or_else(|| self.url.clone())
    }
}

/// Checks a target URL: absolute `http://host[:port]/path` or `https://…` (rustls, the
/// certificate verified against the web's roots or the target's `ca_file`).
pub fn check_url(url: &str) -> Result<(), String> {
    if !url.contains("://") {
        return Err(format!(
            "`{url}` has no scheme; expected http://host:port/metrics"
        ));
    }
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("`{url}` is not a valid URL: {e}"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(other) => return Err(format!("`{url}`: scheme `{other}` is not http or https")),
        None => {
            return Err(format!(
                "`{url}` has no scheme; expected http://host:port/metrics"
            ));
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("`{url}` has no host"));
    }
    Ok(())
}

/// Why a scrape failed; [`ScrapeError::reason`] is the low-cardinality counter label.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    #[error("cannot reach {url}: {message}")]
    Connect { url: String, message: String },
    #[error("no complete answer from {url} within {timeout_ms} ms")]
    Timeout { url: String, timeout_ms: u128 },
    #[error("{url} answered HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("reading the body from {url}: {message}")]
    Body { url: String, message: String },
    #[error("the body from {url} exceeds the limit of {limit} bytes")]
    TooLarge { url: String, limit: usize },
    #[error("{url}: {source}")]
    Parse {
        url: String,
        #[source]
        source: ExpositionError,
    },
    #[error("storing the scrape of {url}: {source}")]
    Sink {
        url: String,
        #[source]
        source: SinkError,
    },
    #[error("scrape of {url} failed internally: {message}")]
    Internal { url: String, message: String },
    #[error("the bearer token for {url}: {message}")]
    Credentials { url: String, message: String },
}

impl ScrapeError {
    pub fn reason(&self) -> &'static str {
        match self {
            ScrapeError::Connect { .. } => "connect",
            ScrapeError::Timeout { .. } => "timeout",
            ScrapeError::Status { .. } => "http_status",
            ScrapeError::Body { .. } => "body",
            ScrapeError::TooLarge { .. } => "too_large",
            ScrapeError::Parse { .. } => "parse",
            ScrapeError::Sink {
                source: SinkError::Full,
                ..
            } => "queue_full",
            ScrapeError::Sink { .. } => "store",
            ScrapeError::Internal { .. } => "internal",
            ScrapeError::Credentials { .. } => "credentials",
        }
    }
}

/// What one successful scrape produced.
#[derive(Debug, Clone, Default)]
pub struct ScrapeStats {
    pub samples: usize,
    pub warnings: Vec<ParseWarning>,
    pub accepted_points: u64,
    pub rejected_points: u64,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(1)
}

/// The agent that scrapes `target`: its timeout, no proxy, and for https its `ca_file`'s
/// roots (when that file cannot be read any more, no root at all: every scrape fails, counted
/// and logged, and nothing is trusted unverified).
pub fn agent(target: &ScrapeTarget) -> ureq::Agent {
    let mut config = ureq::Agent::config_builder()
        .timeout_global(Some(target.timeout))
        .http_status_as_error(false)
        // Targets are addressed directly; an HTTP(S)_PROXY meant for the internet must not
        // capture in-cluster scrapes.
        .proxy(None)
        .user_agent("infersight-scraper");
    if let Some(path) = &target.ca_file {
        let roots = read_ca_file(path).unwrap_or_else(|problem| {
            tracing::error!(url = %target.url, "{problem}; its scrapes will fail");
            Vec::new()
        });
        config = config.tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::Specific(std::sync::Arc::new(roots)))
                .build(),
        );
    }
    config.build().into()
}

/// The certificates of the PEM file at `path` (at least one, nothing else); the error names
/// the file.
pub fn read_ca_file(
    path: &std::path::Path,
) -> Result<Vec<ureq::tls::Certificate<'static>>, String> {
    let shown = path.display();
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read `{shown}`: {e}"))?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&bytes) {
        match item {
            Ok(ureq::tls::PemItem::Certificate(cert)) => certs.push(cert.to_owned()),
            Ok(_) => {
                return Err(format!(
                    "`{shown}` holds something other than certificates (a private key?)"
                ));
            }
            Err(e) => return Err(format!("`{shown}` is not PEM: {e}")),
        }
    }
    if certs.is_empty() {
        return Err(format!("`{shown}` holds no PEM certificate"));
    }
    Ok(certs)
}

/// The bearer token in `path`: its first line, trimmed; an empty one is an error.
pub fn read_bearer_token(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    let token = text.lines().next().unwrap_or_default().trim().to_string();
    if token.is_empty() {
        return Err(format!("`{}` is empty", path.display()));
    }
    Ok(token)
}

/// Fetches a target's body (blocking; run it on a blocking thread).
fn fetch(
    agent: &ureq::Agent,
    target: &ScrapeTarget,
    max_body_bytes: usize,
) -> Result<Vec<u8>, ScrapeError> {
    let url = &target.url;
    let timeout = || ScrapeError::Timeout {
        url: url.clone(),
        timeout_ms: target.timeout.as_millis(),
    };
    let mut request = agent.get(url).header("accept", ACCEPT);
    if let Some(path) = &target.bearer_token_file {
        let token = read_bearer_token(path).map_err(|message| ScrapeError::Credentials {
            url: url.clone(),
            message,
        })?;
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let mut response = request.call().map_err(|e| match e {
        ureq::Error::Timeout(_) => timeout(),
        other => ScrapeError::Connect {
            url: url.clone(),
            message: other.to_string(),
        },
    })?;
    let status = response.status().as_u16();
    if !(200..300).contains(&status) {
        return Err(ScrapeError::Status {
            url: url.clone(),
            status,
        });
    }
    response
        .body_mut()
        .with_config()
        .limit(max_body_bytes as u64)
        .read_to_vec()
        .map_err(|e| match e {
            ureq::Error::Timeout(_) => timeout(),
            ureq::Error::BodyExceedsLimit(_) => ScrapeError::TooLarge {
                url: url.clone(),
                limit: max_body_bytes,
            },
            other => ScrapeError::Body {
                url: url.clone(),
                message: other.to_string(),
            },
        })
}

/// One scrape: fetch, parse, convert, submit. A failed fetch or parse still records
/// `scrape_up = 0` for the target.
pub async fn scrape_once(
    target: &ScrapeTarget,
    agent: &ureq::Agent,
    max_body_bytes: usize,
    state: &ReceiverState,
) -> Result<ScrapeStats, ScrapeError> {
    let started = Instant::now();
    let scrape_time_ns = now_ns();
    let instance = target.instance();
    let work = {
        let agent = agent.clone();
        let target = target.clone();
        let instance = instance.clone();
        let mapper = state.mapper.clone();
        // HTTP, parsing and conversion block or burn CPU: keep them off the async workers.
        tokio::task::spawn_blocking(move || {
            let body = fetch(&agent, &target, max_body_bytes)?;
            let exposition = parse(&body).map_err(|source| ScrapeError::Parse {
                url: target.url.clone(),
                source,
            })?;
            let samples = exposition.sample_count();
            let mut scraped =
                exposition_to_otlp(&exposition, &target.job, &instance, scrape_time_ns);
            let duration_s = started.elapsed().as_secs_f64();
            if let Some(scope) = scraped
                .request
                .resource_metrics
                .first_mut()
                .and_then(|r| r.scope_metrics.first_mut())
            {
                scope
                    .metrics
                    .extend(health_metrics(true, duration_s, samples, scrape_time_ns));
            }
            let converted = crate::metrics_to_batches(&scraped.request, &mapper).map_err(|e| {
                ScrapeError::Internal {
                    url: target.url.clone(),
                    message: e.to_string(),
                }
            })?;
            let mut warnings = exposition.warnings;
            warnings.append(&mut scraped.warnings);
            Ok::<_, ScrapeError>((converted, samples, warnings))
        })
    };
    let outcome = match work.await {
        Ok(result) => result,
        Err(e) => Err(ScrapeError::Internal {
            url: target.url.clone(),
            message: e.to_string(),
        }),
    };
    match outcome {
        Ok((converted, samples, warnings)) => {
            // scrape targets are the operator's own configuration: the default org
            state
                .submit(&IngestOrg::default(), &converted)
                .await
                .map_err(|source| ScrapeError::Sink {
                    url: target.url.clone(),
                    source,
                })?;
            Ok(ScrapeStats {
                samples,
                warnings,
                accepted_points: converted.accepted,
                rejected_points: converted.rejected,
            })
        }
        Err(error) => {
            let duration_s = started.elapsed().as_secs_f64();
            let request = scrape_request(
                &target.job,
                &instance,
                health_metrics(false, duration_s, 0, scrape_time_ns),
            );
            // Best effort: the failure itself is what gets counted and logged.
            if let Ok(converted) = crate::metrics_to_batches(&request, &state.mapper) {
                let _ = state.submit(&IngestOrg::default(), &converted).await;
            }
            Err(error)
        }
    }
}

/// The counters of one scrape outcome (on `/metrics`).
fn count(state: &ReceiverState, target: &ScrapeTarget, outcome: &Result<ScrapeStats, ScrapeError>) {
    let counters = &state.counters;
    let job = target.job.as_str();
    match outcome {
        Ok(stats) => {
            counters.add(&catalog::SCRAPES, &[("job", job), ("outcome", "ok")], 1);
            counters.add(
                &catalog::SCRAPE_SAMPLES,
                &[("job", job)],
                stats.samples as u64,
            );
            counters.add(
                &catalog::SCRAPE_PARSE_WARNINGS,
                &[("job", job)],
                stats.warnings.len() as u64,
            );
            for (result, n) in [
                ("accepted", stats.accepted_points),
                ("rejected", stats.rejected_points),
            ] {
                counters.add(
                    &catalog::RECEIVER_RECORDS,
                    &[
                        ("protocol", "prom_scrape"),
                        ("signal", "metrics"),
                        ("outcome", result),
                    ],
                    n,
                );
            }
        }
        Err(error) => counters.add(
            &catalog::SCRAPES,
            &[
                ("job", job),
                ("outcome", "failed"),
                ("reason", error.reason()),
            ],
            1,
        ),
    }
}

/// What was last logged for a target, so a failing target logs once per change, not per scrape.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Health {
    Unknown,
    Up { warned: bool },
    Down { reason: &'static str },
}

fn log_change(
    target: &ScrapeTarget,
    previous: &Health,
    outcome: &Result<ScrapeStats, ScrapeError>,
) -> Health {
    match outcome {
        Ok(stats) => {
            let warned = !stats.warnings.is_empty();
            if matches!(previous, Health::Down { .. }) {
                tracing::info!(url = %target.url, job = %target.job, "scrape target is up again");
            } else if *previous == Health::Unknown {
                tracing::debug!(url = %target.url, job = %target.job, samples = stats.samples, "first scrape succeeded");
            }
            let warned_before = matches!(previous, Health::Up { warned: true });
            if let Some(first) = stats.warnings.first()
                && !warned_before
            {
                tracing::warn!(
                    url = %target.url,
                    job = %target.job,
                    warnings = stats.warnings.len(),
                    %first,
                    "scraped exposition is incomplete; complete samples were kept"
                );
            }
            Health::Up { warned }
        }
        Err(error) => {
            let reason = error.reason();
            if *previous != (Health::Down { reason }) {
                tracing::warn!(url = %target.url, job = %target.job, %error, "scrape target is down");
            }
            Health::Down { reason }
        }
    }
}

async fn run_target(
    target: ScrapeTarget,
    max_body_bytes: usize,
    state: ReceiverState,
    mut stop: watch::Receiver<bool>,
) {
    let agent = agent(&target);
    let mut ticker = tokio::time::interval(target.interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut health = Health::Unknown;
    loop {
        tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => return,
            _ = ticker.tick() => {}
        }
        // A scrape in progress is abandoned on shutdown: its blocking fetch ends by its own
        // timeout, holding no queue handle.
        let outcome = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => return,
            outcome = scrape_once(&target, &agent, max_body_bytes, &state) => outcome,
        };
        count(&state, &target, &outcome);
        health = log_change(&target, &health, &outcome);
    }
}

/// Starts one scraping task per target; each ends promptly once `stop` turns true (or its
/// sender is dropped). The tasks hold clones of `state` (and so of the ingest queue) until then.
pub fn spawn_scrapers(
    targets: Vec<ScrapeTarget>,
    max_body_bytes: usize,
    state: ReceiverState,
    stop: watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    targets
        .into_iter()
        .map(|target| {
            tokio::spawn(run_target(
                target,
                max_body_bytes,
                state.clone(),
                stop.clone(),
            ))
        })
        .collect()
}
