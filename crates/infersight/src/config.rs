//! Configuration in three layers: defaults < TOML file < environment (`INFERSIGHT__SECTION__KEY`)
//! < command-line flags. The raw layers are merged as TOML values, checked for unknown keys and
//! wrong types section by section, then `validate` reports every semantic problem at once, and
//! only then are the resolved settings handed to the engines.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use arrow::datatypes::DataType;
use infersight_model::RequestRecord;
use infersight_model::mapping::RequestColumn;
use infersight_model::time::parse_duration_ns;
use infersight_rollup::RollupSpec;
use infersight_store::{FsyncPolicy, StoreOptions};
use serde::{Deserialize, Serialize};

mod ballista;
mod storage;
pub use ballista::BallistaConfig;
#[cfg(feature = "cluster")]
pub use ballista::host_port as ballista_host_port;
pub use storage::{StorageConfig, StoreTiersConfig};

pub const ENV_PREFIX: &str = "INFERSIGHT__";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Configuration format version; only 1 exists.
    pub version: u32,
    pub server: ServerConfig,
    pub store: StoreConfig,
    /// Where flushed segments go: `store.data_dir` (default) or a bucket.
    pub storage: StorageConfig,
    pub normalize: NormalizeConfig,
    pub query: QueryConfig,
    /// Pipeline stages between receivers and the store (order, redaction settings).
    pub stages: infersight_pipeline::StagesConfig,
    /// Prometheus `/metrics` targets `serve` scrapes (engines, DCGM exporter).
    pub scrape: ScrapeConfig,
    /// SLOs, burn-rate alerting and the webhook alerts go to.
    pub alerts: AlertsConfig,
    /// The incident report: extra runbooks, retrieval, the optional LLM narrative.
    pub report: infersight_report::ReportConfig,
    /// Automatic actions on sustained SLI breaches (dry-run by default).
    pub actions: infersight_server::actions::ActionsConfig,
    /// Where incident and SLO notifications go: Alertmanager, the signed webhook.
    pub notify: infersight_server::notify::NotifyConfig,
    /// The watcher inside `serve` (and `infersight watch`): step, history, watermarks.
    pub watch: WatchConfig,
    /// Authentication and roles on every listener of `serve` (off unless `tokens_file` is set).
    pub auth: infersight_server::auth::AuthConfig,
    /// The duration settings above, parsed by `validate` when the configuration is loaded.
    #[serde(skip)]
    durations: Durations,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            version: 1,
            server: ServerConfig::default(),
            store: StoreConfig::default(),
            storage: StorageConfig::default(),
            normalize: NormalizeConfig::default(),
            query: QueryConfig::default(),
            stages: infersight_pipeline::StagesConfig::default(),
            scrape: ScrapeConfig::default(),
            alerts: AlertsConfig::default(),
            report: infersight_report::ReportConfig::default(),
            actions: infersight_server::actions::ActionsConfig::default(),
            notify: infersight_server::notify::NotifyConfig::default(),
            watch: WatchConfig::default(),
            auth: infersight_server::auth::AuthConfig::default(),
            durations: Durations::default(),
        }
    }
}

/// The configuration's durations, written as text in TOML (`500ms`, `30s`, `15m`, `2h`, `7d`)
/// and parsed once, by [`Config::validate`]; commands read them here, never the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Durations {
    /// `server.maintenance_interval`.
    pub maintenance_interval: Duration,
    /// `store.flush_interval`.
    pub flush_interval: Duration,
    /// `store.retention`; `None` (empty text) keeps everything.
    pub retention: Option<Duration>,
    /// `store.retention_by_table`, by canonical table; `None` keeps that table's data.
    pub retention_by_table: BTreeMap<infersight_model::Table, Option<Duration>>,
    /// `store.retired_grace`; zero (empty text) deletes retired files at once.
    pub retired_grace: Duration,
    /// `store.verify_interval`; `None` (empty text): segments are read whole once after start.
    pub verify_interval: Option<Duration>,
    /// `[store.tiers]` parsed; `None` while its `warm` is empty.
    pub tiers: Option<infersight_store::TierOptions>,
    /// `scrape.interval` and `scrape.timeout`.
    pub scrape_interval: Duration,
    pub scrape_timeout: Duration,
    /// Interval and timeout of each of `scrape.targets`, the section's where it sets none.
    pub scrape_targets: Vec<(Duration, Duration)>,
    /// `alerts.eval_interval`.
    pub alerts_eval_interval: Duration,
}

/// `[scrape]`'s parsed durations, on their way into [`Durations`].
struct ScrapeDurations {
    interval: Duration,
    timeout: Duration,
    targets: Vec<(Duration, Duration)>,
}

/// The durations of the default configuration (a test holds them to the default texts).
impl Default for Durations {
    fn default() -> Self {
        Self {
            maintenance_interval: Duration::from_secs(5),
            flush_interval: Duration::from_secs(60),
            retention: None,
            retention_by_table: BTreeMap::new(),
            retired_grace: Duration::from_secs(300),
            verify_interval: Some(Duration::from_secs(7 * 24 * 3600)),
            tiers: None,
            scrape_interval: Duration::from_secs(15),
            scrape_timeout: Duration::from_secs(5),
            scrape_targets: Vec::new(),
            alerts_eval_interval: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub listen: String,
    pub otlp_grpc_port: u16,
    pub otlp_http_port: u16,
    pub api_port: u16,
    /// Largest request body (compressed) and largest decompressed payload, in bytes.
    pub max_body_bytes: usize,
    /// Submissions that may wait for the store; beyond it receivers answer 429.
    pub queue_capacity: usize,
    /// Exports decoded and converted at once (the other requests in flight wait); 0: two per
    /// core.
    pub decode_threads: usize,
    /// How often the store flushes, compacts and applies retention in the background.
    pub maintenance_interval: String,
    /// TLS on every listener (`[server.tls]`); off while `cert_file` is empty.
    pub tls: ServerTlsConfig,
    /// What this node does in a cluster: `all` (everything, the default), `ingest`, `query` or
    /// `compact` (see the README's Running a cluster); every role but `all` needs
    /// `[storage] url`. `serve --role` overrides it.
    pub role: infersight_server::role::Role,
}

/// `[server.tls]`: the certificate every listener presents, and the CA whose client
/// certificates the OTLP listeners require (mTLS). Files are PEM, re-read on SIGHUP and when
/// they change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerTlsConfig {
    /// The certificate chain, leaf first; setting it (with `key_file`) turns TLS on.
    pub cert_file: String,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: String,
    /// OTLP exporters must present a certificate signed by one of these; empty: none asked.
    pub client_ca_file: String,
}

impl ServerTlsConfig {
    /// The files, when TLS is on; the problems of a half-set section.
    pub fn files(&self) -> Result<Option<infersight_server::tls::TlsFiles>, Vec<String>> {
        let mut errors = Vec::new();
        match (self.cert_file.is_empty(), self.key_file.is_empty()) {
            (true, true) => {
                if !self.client_ca_file.is_empty() {
                    errors.push(
                        "server.tls.client_ca_file: needs server.tls.cert_file and key_file \
                         (client certificates are asked for over TLS only)"
                            .to_string(),
                    );
                }
                return if errors.is_empty() {
                    Ok(None)
                } else {
                    Err(errors)
                };
            }
            (false, true) => errors.push("server.tls.key_file: must be set with cert_file".into()),
            (true, false) => errors.push("server.tls.cert_file: must be set with key_file".into()),
            (false, false) => {}
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Some(infersight_server::tls::TlsFiles {
            cert_file: self.cert_file.clone().into(),
            key_file: self.key_file.clone().into(),
            client_ca_file: (!self.client_ca_file.is_empty())
                .then(|| self.client_ca_file.clone().into()),
        }))
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1".into(),
            otlp_grpc_port: 4317,
            otlp_http_port: 4318,
            api_port: 7070,
            max_body_bytes: 16 * 1024 * 1024,
            queue_capacity: 64,
            decode_threads: 0,
            maintenance_interval: "5s".into(),
            tls: ServerTlsConfig::default(),
            role: infersight_server::role::Role::All,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    pub data_dir: PathBuf,
    /// `always` (fsync before acknowledging), `interval` or `never`.
    pub fsync: String,
    pub fsync_interval_ms: u64,
    pub memtable_max_rows: usize,
    pub memtable_max_bytes: usize,
    pub flush_interval: String,
    pub compaction_min_segments: usize,
    pub compaction_small_bytes: u64,
    /// Keep data this long (e.g. `7d`); empty keeps everything.
    pub retention: String,
    /// Per table over `retention` (`[store.retention_by_table]`, e.g. `tokens = "2d"`,
    /// `spans = "7d"`, `requests = "90d"`); an empty text keeps that table's data.
    pub retention_by_table: BTreeMap<String, String>,
    /// The warm and cold tiers of segments in a bucket (`[store.tiers]`).
    pub tiers: StoreTiersConfig,
    /// Files of segments replaced by compaction or expired by retention stay this long for
    /// queries already planned over them; empty deletes them at once.
    pub retired_grace: String,
    /// Every segment is read against its checksum after `serve` starts and then this often;
    /// empty: only after start.
    pub verify_interval: String,
    /// Bytes per second those scrubs read at most, a slice per maintenance tick on one thread;
    /// 0: as fast as every core reads, in one go.
    pub verify_bytes_per_sec: u64,
    pub zstd_level: i32,
    /// Build per-minute SLI rollups of `requests` (sketches per dimension combination).
    pub rollups: bool,
    /// `requests` columns a rollup combination is made of.
    pub rollup_dimensions: Vec<String>,
    /// Combinations per rollup beyond which rows fold into `other` (counted).
    pub rollup_max_combinations: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        let o = StoreOptions::new("./infersight-data");
        Self {
            data_dir: o.data_dir,
            fsync: "always".into(),
            fsync_interval_ms: 200,
            memtable_max_rows: o.memtable_max_rows,
            memtable_max_bytes: o.memtable_max_bytes,
            flush_interval: "60s".into(),
            compaction_min_segments: o.compaction_min_segments,
            compaction_small_bytes: o.compaction_small_bytes,
            retention: String::new(),
            retention_by_table: BTreeMap::new(),
            tiers: StoreTiersConfig::default(),
            retired_grace: "5m".into(),
            verify_interval: "7d".into(),
            verify_bytes_per_sec: o.verify_bytes_per_sec.unwrap_or(0),
            zstd_level: o.zstd_level,
            rollups: true,
            rollup_dimensions: RollupSpec::default().dimensions,
            rollup_max_combinations: RollupSpec::default().max_combinations,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NormalizeConfig {
    /// Extra attribute names for canonical request columns, e.g. `"acme.lora_set" = "lora_adapters"`.
    pub aliases: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueryConfig {
    /// Most rows `POST /api/v1/query` returns.
    pub max_rows: usize,
    /// Attributes with more distinct values than this are not dimensions.
    pub max_dimension_cardinality: usize,
    /// Memory pool of one statement of `POST /api/v1/query` (`infersight query` on the store
    /// runs unlimited: the operator's own machine).
    pub memory_limit_bytes: usize,
    /// Longest one such statement may run.
    pub timeout_ms: u64,
    /// Largest answer of `POST /api/v1/query`, in bytes.
    pub max_response_bytes: usize,
    /// Statements one caller (its token or proxy user, else its peer address) may run at once
    /// on `POST /api/v1/query`; more are answered 429 with `Retry-After`.
    pub max_concurrent_per_caller: usize,
    /// Large statements on a Ballista cluster.
    pub ballista: BallistaConfig,
}

impl Default for QueryConfig {
    fn default() -> Self {
        let limits = infersight_query::QueryLimits::default();
        Self {
            max_rows: 100_000,
            max_dimension_cardinality: 200,
            memory_limit_bytes: limits.memory_limit_bytes,
            timeout_ms: u64::try_from(limits.timeout.as_millis()).unwrap_or(u64::MAX),
            max_response_bytes: limits.max_response_bytes,
            max_concurrent_per_caller: limits.max_concurrent_per_caller,
            ballista: BallistaConfig::default(),
        }
    }
}

impl QueryConfig {
    /// The limits of the SQL surface the server offers (`POST /api/v1/query`).
    pub fn limits(&self) -> infersight_query::QueryLimits {
        infersight_query::QueryLimits {
            memory_limit_bytes: self.memory_limit_bytes,
            timeout: std::time::Duration::from_millis(self.timeout_ms),
            max_response_bytes: self.max_response_bytes,
            max_concurrent_per_caller: self.max_concurrent_per_caller,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScrapeConfig {
    /// How often each target is scraped (a target's own `interval` wins).
    pub interval: String,
    /// Deadline of one scrape: connect, request and body; shorter than the interval.
    pub timeout: String,
    /// `[{ url = "http://host:port/metrics", job = "vllm", worker = "worker-1" }]`.
    pub targets: Vec<ScrapeTargetConfig>,
}

impl Default for ScrapeConfig {
    fn default() -> Self {
        Self {
            interval: "15s".into(),
            timeout: "5s".into(),
            targets: Vec::new(),
        }
    }
}

/// One scrape target; `interval` and `timeout` override the section's.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScrapeTargetConfig {
    /// `http://host:port/metrics`.
    pub url: String,
    /// Recorded as `service.name` (e.g. `vllm`, `sglang`, `tgi`, `triton`, `dcgm`).
    pub job: String,
    /// The `worker` of every sample; host:port of the URL when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// For an `https://` URL: the PEM certificates the target's must chain to (a private CA);
    /// absent: the web's root certificates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// A file whose first line is the bearer token sent to the target (re-read every scrape).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bearer_token_file: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlertsConfig {
    /// How often `serve` evaluates the SLOs.
    pub eval_interval: String,
    /// `webhook_url`, `webhook_timeout`, `webhook_attempts`, `ca_file`: where firing / resolved
    /// notifications are POSTed (JSON, http or https); no URL: none.
    #[serde(flatten)]
    pub webhook: infersight_server::webhook::WebhookConfig,
    /// `[{ name = "ttft", sli = "ttft", threshold_ms = 2000, objective = 0.99, window = "30d",
    /// filters = ["model=llama-3-8b"] }]`; `sli = "error_rate"` needs no threshold.
    pub slos: Vec<SloConfig>,
}

impl Default for AlertsConfig {
    fn default() -> Self {
        Self {
            eval_interval: "30s".into(),
            webhook: infersight_server::webhook::WebhookConfig::default(),
            slos: Vec::new(),
        }
    }
}

/// One SLO.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SloConfig {
    pub name: String,
    pub sli: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold_ms: Option<f64>,
    pub objective: f64,
    pub window: String,
    /// `dimension=value` pairs (rollup dimensions).
    pub filters: Vec<String>,
}

impl Default for SloConfig {
    fn default() -> Self {
        Self {
            name: String::new(),
            sli: String::new(),
            threshold_ms: None,
            objective: 0.99,
            window: "30d".into(),
            filters: Vec::new(),
        }
    }
}

/// `[watch]`: the watcher that opens incidents by itself (`infersight_rca::watch`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WatchConfig {
    /// Run the watcher inside `serve`.
    pub enabled: bool,
    /// Evaluation step.
    pub step: String,
    /// SLI history the baseline is learnt from (two days make it seasonal).
    pub history: String,
    /// Quiet steps before an incident resolves.
    pub resolve_after_steps: u32,
    /// A lone SLI change the RCA explains by no slice and no signal opens an incident only when
    /// the fleet's symptom moved at least this much (ratio; 1, with `min_unexplained_rise_ms`
    /// 0, turns this gate off, not the rule that the RCA's symptom must measure a part of the
    /// request the fired SLI measures).
    pub min_unexplained_effect: f64,
    /// …and, for a latency symptom, by at least this many milliseconds of its p99 (0: off).
    pub min_unexplained_rise_ms: f64,
    /// Causes whose odds of a slow (or failed) request rose less than this many times (and
    /// load-driven queueing) count as no cause for that gate (1: only load).
    pub min_cause_odds_ratio: f64,
    /// How often an open incident's verdict is recomputed.
    pub refresh_every: String,
    /// How often the resource and behaviour detectors run.
    pub behaviour_every: String,
    /// Watermarks; 0 turns one off.
    pub gpu_memory_used_fraction: f64,
    pub kv_cache_usage_ratio: f64,
    pub preemptions_per_minute: f64,
    pub requests_waiting: f64,
    /// Throughput health index below which the fleet or a model fires (0 turns it off).
    pub thi_min: f64,
    /// Token efficiency below this fraction of the subject's reference fires (0: off).
    pub token_efficiency_ratio: f64,
    /// Predictive risk: a warning opens when a resource (GPU memory, KV cache, the queue
    /// against the gateway timeout) is projected to run out within this horizon.
    pub predict_horizon: String,
    /// A KV-cache projection needs a rise that has lasted this long (bursty traffic swings KV
    /// usage by half the pool within a minute); "0s" turns the rule off.
    pub predict_kv_min_trend: String,
    /// The gateway's timeout for the queue projection; empty: learnt from timed-out requests,
    /// else 60s.
    pub gateway_timeout: String,
}

impl Default for WatchConfig {
    fn default() -> Self {
        let s = infersight_rca::watch::WatchSettings::default();
        let w = s.watermarks;
        Self {
            enabled: true,
            step: "30s".into(),
            history: "49h".into(),
            resolve_after_steps: s.resolve_after_steps,
            min_unexplained_effect: s.min_unexplained_effect,
            min_cause_odds_ratio: s.min_cause_odds_ratio,
            min_unexplained_rise_ms: s.min_unexplained_rise_ms,
            refresh_every: "5m".into(),
            behaviour_every: "2m".into(),
            gpu_memory_used_fraction: w.gpu_memory_used_fraction.unwrap_or(0.0),
            kv_cache_usage_ratio: w.kv_cache_usage_ratio.unwrap_or(0.0),
            preemptions_per_minute: w.preemptions_per_minute.unwrap_or(0.0),
            requests_waiting: w.requests_waiting.unwrap_or(0.0),
            thi_min: w.thi_min.unwrap_or(0.0),
            token_efficiency_ratio: w.token_efficiency_ratio.unwrap_or(0.0),
            predict_horizon: "30m".into(),
            predict_kv_min_trend: "10m".into(),
            gateway_timeout: String::new(),
        }
    }
}

impl Config {
    /// The watcher's settings (with the SLOs of `[alerts]`); every problem names `watch.KEY`.
    pub fn watch_settings(&self) -> Result<infersight_rca::watch::WatchSettings, Vec<String>> {
        let w = &self.watch;
        let mut errors = Vec::new();
        let mut ns = |key: &str, text: &str| {
            parse_duration(&mut errors, &format!("watch.{key}"), text)
                .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        };
        let (step_ns, history_ns) = (ns("step", &w.step), ns("history", &w.history));
        let (refresh_every_ns, behaviour_every_ns) = (
            ns("refresh_every", &w.refresh_every),
            ns("behaviour_every", &w.behaviour_every),
        );
        let predict_horizon_ns = ns("predict_horizon", &w.predict_horizon);
        // "0s" or empty: every rise counts (the rule off)
        let kv_min_trend_ns = match w.predict_kv_min_trend.trim() {
            "" | "0" | "0s" | "0m" => 0,
            text => ns("predict_kv_min_trend", text),
        };
        let gateway_timeout_ns =
            parse_optional_duration(&mut errors, "watch.gateway_timeout", &w.gateway_timeout)
                .flatten()
                .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        let on = |v: f64| (v != 0.0).then_some(v);
        let settings = infersight_rca::watch::WatchSettings {
            step_ns,
            history_ns,
            resolve_after_steps: w.resolve_after_steps,
            min_unexplained_effect: w.min_unexplained_effect,
            min_cause_odds_ratio: w.min_cause_odds_ratio,
            min_unexplained_rise_ms: w.min_unexplained_rise_ms,
            refresh_every_ns,
            behaviour_every_ns,
            watermarks: infersight_rca::watch::Watermarks {
                gpu_memory_used_fraction: on(w.gpu_memory_used_fraction),
                kv_cache_usage_ratio: on(w.kv_cache_usage_ratio),
                preemptions_per_minute: on(w.preemptions_per_minute),
                requests_waiting: on(w.requests_waiting),
                thi_min: on(w.thi_min),
                token_efficiency_ratio: on(w.token_efficiency_ratio),
            },
            predict: infersight_rca::watch::PredictSettings {
                horizon_ns: predict_horizon_ns,
                gateway_timeout_ns,
                kv_min_trend_ns,
                ..infersight_rca::watch::PredictSettings::default()
            },
            slos: self.slos().unwrap_or_default(),
            ..infersight_rca::watch::WatchSettings::default()
        };
        if errors.is_empty() {
            errors.extend(settings.problems());
        }
        if errors.is_empty() {
            Ok(settings)
        } else {
            Err(errors)
        }
    }
}

/// Every problem found while loading, each with where it is (`section.key`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<String>);

impl std::fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} configuration error(s): {}",
            self.0.len(),
            self.0.join("; ")
        )
    }
}

impl std::error::Error for ConfigErrors {}

fn known_keys() -> toml::Table {
    toml::Table::try_from(Config::default()).unwrap_or_default()
}

/// Parses an environment value as a TOML scalar (`8080`, `true`, `"x"`), else as a plain string.
fn env_value(raw: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()))
}

/// Overlays `INFERSIGHT__SECTION__KEY=value` variables onto the raw table.
fn overlay_env(raw: &mut toml::Table, env: &[(String, String)], errors: &mut Vec<String>) {
    for (name, value) in env {
        let Some(path) = name.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        let parts: Vec<String> = path.split("__").map(|p| p.to_ascii_lowercase()).collect();
        if parts.iter().any(String::is_empty) {
            errors.push(format!("environment variable {name}: empty path segment"));
            continue;
        }
        if let Err(e) = set_path(raw, &parts, env_value(value)) {
            errors.push(format!("environment variable {name}: {e}"));
        }
    }
}

fn set_path(table: &mut toml::Table, parts: &[String], value: toml::Value) -> Result<(), String> {
    match parts {
        [] => Ok(()),
        [last] => {
            table.insert(last.clone(), value);
            Ok(())
        }
        [first, rest @ ..] => {
            let entry = table
                .entry(first.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            match entry {
                toml::Value::Table(sub) => set_path(sub, rest, value),
                _ => Err(format!("`{first}` is not a section")),
            }
        }
    }
}

fn check_unknown(raw: &toml::Table, known: &toml::Table, prefix: &str, errors: &mut Vec<String>) {
    for (key, value) in raw {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match known.get(key) {
            None => errors.push(format!("{path}: unknown key")),
            Some(toml::Value::Table(known_sub)) if !known_sub.is_empty() => {
                if let toml::Value::Table(sub) = value {
                    check_unknown(sub, known_sub, &path, errors);
                }
            }
            Some(_) => {}
        }
    }
}

/// Loads the configuration: defaults, then `file` (if any), then the environment.
pub fn load(file: Option<&Path>, env: &[(String, String)]) -> Result<Config, ConfigErrors> {
    let mut errors = Vec::new();
    let mut raw = match file {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => match toml::from_str::<toml::Table>(&text) {
                Ok(t) => t,
                Err(e) => {
                    return Err(ConfigErrors(vec![format!(
                        "{}: {}",
                        path.display(),
                        e.message()
                    )]));
                }
            },
            Err(e) => return Err(ConfigErrors(vec![format!("{}: {e}", path.display())])),
        },
        None => toml::Table::new(),
    };
    overlay_env(&mut raw, env, &mut errors);
    let known = known_keys();
    // `normalize.aliases` is a free-form table checked by `validate`.
    let mut known_for_check = known.clone();
    if let Some(toml::Value::Table(n)) = known_for_check.get_mut("normalize") {
        n.insert("aliases".into(), toml::Value::Table(toml::Table::new()));
    }
    check_unknown(&raw, &known_for_check, "", &mut errors);

    // Each key is tried on its own over the defaults, so every mistyped key is reported.
    let mut config = Config::default();
    load_section("server", raw.get("server"), &mut config.server, &mut errors);
    load_section("store", raw.get("store"), &mut config.store, &mut errors);
    load_section(
        "storage",
        raw.get("storage"),
        &mut config.storage,
        &mut errors,
    );
    load_section(
        "normalize",
        raw.get("normalize"),
        &mut config.normalize,
        &mut errors,
    );
    load_section("query", raw.get("query"), &mut config.query, &mut errors);
    load_section("stages", raw.get("stages"), &mut config.stages, &mut errors);
    load_section("scrape", raw.get("scrape"), &mut config.scrape, &mut errors);
    load_section("alerts", raw.get("alerts"), &mut config.alerts, &mut errors);
    load_section("report", raw.get("report"), &mut config.report, &mut errors);
    load_section(
        "actions",
        raw.get("actions"),
        &mut config.actions,
        &mut errors,
    );
    load_section("notify", raw.get("notify"), &mut config.notify, &mut errors);
    load_section("watch", raw.get("watch"), &mut config.watch, &mut errors);
    load_section("auth", raw.get("auth"), &mut config.auth, &mut errors);
    match raw.get("version") {
        Some(toml::Value::Integer(v)) => config.version = u32::try_from(*v).unwrap_or(u32::MAX),
        Some(other) => errors.push(format!(
            "version: expected an integer, found {}",
            other.type_str()
        )),
        None => {}
    }
    match config.validate() {
        Ok(durations) if errors.is_empty() => {
            config.durations = durations;
            Ok(config)
        }
        Ok(_) => Err(ConfigErrors(errors)),
        Err(problems) => {
            errors.extend(problems);
            Err(ConfigErrors(errors))
        }
    }
}

fn toml_error_text(e: &toml::de::Error) -> String {
    e.message().trim().replace('\n', " ")
}

fn load_section<T: Serialize + serde::de::DeserializeOwned>(
    name: &str,
    raw: Option<&toml::Value>,
    target: &mut T,
    errors: &mut Vec<String>,
) {
    let Some(value) = raw else { return };
    let toml::Value::Table(section) = value else {
        errors.push(format!(
            "{name}: expected a table, found {}",
            value.type_str()
        ));
        return;
    };
    let defaults = toml::Table::try_from(&*target).unwrap_or_default();
    let mut merged = defaults.clone();
    for (key, v) in section {
        if !defaults.contains_key(key) {
            continue; // reported as an unknown key
        }
        let mut one = defaults.clone();
        one.insert(key.clone(), v.clone());
        match toml::Value::Table(one).try_into::<T>() {
            Ok(_) => {
                merged.insert(key.clone(), v.clone());
            }
            Err(e) => errors.push(format!("{name}.{key}: {}", toml_error_text(&e))),
        }
    }
    match toml::Value::Table(merged).try_into::<T>() {
        Ok(v) => *target = v,
        Err(e) => errors.push(format!("{name}: {}", toml_error_text(&e))),
    }
}

/// `text` as a positive duration, or an error naming `key` (and `None`).
fn parse_duration(errors: &mut Vec<String>, key: &str, text: &str) -> Option<Duration> {
    let parsed = duration(text);
    if parsed.is_none() {
        errors.push(format!(
            "{key}: `{text}` is not a positive duration like 500ms, 30s, 15m, 2h, 7d"
        ));
    }
    parsed
}

/// Like [`parse_duration`], where empty text means no duration (`Some(None)`).
fn parse_optional_duration(
    errors: &mut Vec<String>,
    key: &str,
    text: &str,
) -> Option<Option<Duration>> {
    if text.is_empty() {
        return Some(None);
    }
    parse_duration(errors, key, text).map(Some)
}

impl Config {
    /// `[store.retention_by_table]` parsed: every key a canonical table, every value a duration
    /// (empty: keep).
    fn retention_by_table(
        &self,
        errors: &mut Vec<String>,
    ) -> BTreeMap<infersight_model::Table, Option<Duration>> {
        let mut parsed = BTreeMap::new();
        for (name, text) in &self.store.retention_by_table {
            let key = format!("store.retention_by_table.{name}");
            let Ok(table) = infersight_model::Table::from_name(name) else {
                let tables: Vec<&str> = infersight_model::Table::ALL
                    .iter()
                    .map(|t| t.name())
                    .collect();
                errors.push(format!("{key}: not a table (one of {})", tables.join(", ")));
                continue;
            };
            if let Some(retention) = parse_optional_duration(errors, &key, text) {
                parsed.insert(table, retention);
            }
        }
        parsed
    }

    /// Every semantic problem at once (types were checked while loading); without any, the
    /// parsed durations.
    pub fn validate(&self) -> Result<Durations, Vec<String>> {
        let mut errors = Vec::new();
        if self.version != 1 {
            errors.push(format!(
                "version: {} is not supported (only 1)",
                self.version
            ));
        }
        if self.server.listen.parse::<IpAddr>().is_err() {
            errors.push(format!(
                "server.listen: `{}` is not an IP address",
                self.server.listen
            ));
        }
        let ports = [
            ("server.otlp_grpc_port", self.server.otlp_grpc_port),
            ("server.otlp_http_port", self.server.otlp_http_port),
            ("server.api_port", self.server.api_port),
        ];
        for (i, (a, pa)) in ports.iter().enumerate() {
            for (b, pb) in &ports[i + 1..] {
                if pa == pb && *pa != 0 {
                    errors.push(format!("{a} and {b} are both {pa}"));
                }
            }
        }
        if self.server.max_body_bytes < 1024 {
            errors.push("server.max_body_bytes: must be at least 1024".into());
        }
        if self.server.queue_capacity == 0 {
            errors.push("server.queue_capacity: must be at least 1".into());
        }
        self.validate_tls(&mut errors);
        let maintenance_interval = parse_duration(
            &mut errors,
            "server.maintenance_interval",
            &self.server.maintenance_interval,
        );
        if self.store.data_dir.as_os_str().is_empty() {
            errors.push("store.data_dir: must not be empty".into());
        }
        if !["always", "interval", "never"].contains(&self.store.fsync.as_str()) {
            errors.push(format!(
                "store.fsync: `{}` is not one of always, interval, never",
                self.store.fsync
            ));
        }
        if self.store.fsync == "interval" && self.store.fsync_interval_ms == 0 {
            errors
                .push("store.fsync_interval_ms: must be positive with fsync = \"interval\"".into());
        }
        if self.store.memtable_max_rows == 0 {
            errors.push("store.memtable_max_rows: must be at least 1".into());
        }
        let flush_interval = parse_duration(
            &mut errors,
            "store.flush_interval",
            &self.store.flush_interval,
        );
        let retention =
            parse_optional_duration(&mut errors, "store.retention", &self.store.retention);
        let retention_by_table = self.retention_by_table(&mut errors);
        let tiers = self.store.tiers.parse(&mut errors);
        let retired_grace = parse_optional_duration(
            &mut errors,
            "store.retired_grace",
            &self.store.retired_grace,
        );
        let verify_interval = parse_optional_duration(
            &mut errors,
            "store.verify_interval",
            &self.store.verify_interval,
        );
        if !(1..=22).contains(&self.store.zstd_level) {
            errors.push(format!(
                "store.zstd_level: {} is outside 1..=22",
                self.store.zstd_level
            ));
        }
        if self.store.compaction_min_segments < 2 {
            errors.push("store.compaction_min_segments: must be at least 2".into());
        }
        for (key, column) in &self.normalize.aliases {
            if RequestColumn::from_column_name(column).is_none() {
                errors.push(format!(
                    "normalize.aliases.{key}: `{column}` is not a column of the requests table"
                ));
            }
        }
        for column in &self.store.rollup_dimensions {
            let usable = RequestRecord::schema()
                .field_with_name(column)
                .is_ok_and(|f| matches!(f.data_type(), DataType::Utf8 | DataType::Int64));
            if !usable {
                errors.push(format!(
                    "store.rollup_dimensions: `{column}` is not a string or integer column of the requests table"
                ));
            }
        }
        if self.store.rollup_max_combinations == 0 {
            errors.push("store.rollup_max_combinations: must be at least 1".into());
        }
        self.validate_query(&mut errors);
        errors.extend(self.stages.validate());
        let scrape = self.validate_scrape(&mut errors);
        let alerts_eval_interval = self.validate_alerts(&mut errors);
        errors.extend(
            self.actions
                .validate(&self.store.rollup_dimensions, self.store.rollups),
        );
        errors.extend(self.report.llm.validate());
        errors.extend(self.notify.validate());
        errors.extend(self.auth.validate());
        errors.extend(self.storage.validate());
        errors.extend(self.storage.check_role(self.server.role));
        if let Err(problems) = self.watch_settings() {
            errors.extend(problems);
        }
        if self.report.retrieval_limit == 0 {
            errors.push("report.retrieval_limit: must be at least 1".to_string());
        }
        match (
            maintenance_interval,
            flush_interval,
            retention,
            (retired_grace, verify_interval),
            scrape,
            alerts_eval_interval,
            tiers,
        ) {
            (Some(m), Some(f), Some(r), (Some(g), Some(v)), Some(s), Some(a), Some(t))
                if errors.is_empty() =>
            {
                Ok(Durations {
                    maintenance_interval: m,
                    flush_interval: f,
                    retention: r,
                    retention_by_table,
                    retired_grace: g.unwrap_or_default(),
                    verify_interval: v,
                    tiers: t,
                    scrape_interval: s.interval,
                    scrape_timeout: s.timeout,
                    scrape_targets: s.targets,
                    alerts_eval_interval: a,
                })
            }
            _ => Err(errors),
        }
    }

    /// `[store.tiers]` moves segments within a bucket: the problem when the store has none
    /// (checked once `--storage` applied).
    pub fn check_tiers(&self) -> Option<String> {
        (self.durations.tiers.is_some() && self.storage.url.is_empty()).then(|| {
            "store.tiers: the warm and cold tiers are segments in a bucket; set storage.url \
             (or --storage), or leave store.tiers.warm empty on a single node"
                .to_string()
        })
    }

    /// The parsed durations (see [`Durations`]).
    pub fn durations(&self) -> &Durations {
        &self.durations
    }

    /// The configured SLOs, each checked; errors name `alerts.slos[i]`.
    pub fn slos(&self) -> Result<Vec<infersight_analytics::slo::Slo>, Vec<String>> {
        let mut errors = Vec::new();
        let mut slos = Vec::new();
        let mut names = std::collections::HashSet::new();
        for (i, slo) in self.alerts.slos.iter().enumerate() {
            let at = format!("alerts.slos[{i}]");
            if slo.name.trim().is_empty() {
                errors.push(format!("{at}.name: must not be empty"));
                continue;
            }
            if !names.insert(slo.name.clone()) {
                errors.push(format!("{at}.name: `{}` is used twice", slo.name));
            }
            let Some(window_ns) = parse_duration_ns(&slo.window) else {
                errors.push(format!("{at}.window: `{}` is not a duration", slo.window));
                continue;
            };
            let mut filters = Vec::new();
            for filter in &slo.filters {
                match filter.split_once('=') {
                    Some((d, v)) if self.store.rollup_dimensions.iter().any(|k| k == d.trim()) => {
                        filters.push((d.trim().to_string(), v.to_string()))
                    }
                    _ => errors.push(format!(
                        "{at}.filters: `{filter}` must be dimension=value with a dimension of store.rollup_dimensions"
                    )),
                }
            }
            match infersight_analytics::slo::Slo::new(
                &slo.name,
                &slo.sli,
                slo.threshold_ms,
                slo.objective,
                window_ns,
                filters,
            ) {
                Ok(s) => slos.push(s),
                Err(e) => errors.push(format!("{at}: {e}")),
            }
        }
        if errors.is_empty() {
            Ok(slos)
        } else {
            Err(errors)
        }
    }

    /// Checks `[alerts]`; its parsed `eval_interval`.
    fn validate_alerts(&self, errors: &mut Vec<String>) -> Option<Duration> {
        let alerts = &self.alerts;
        let eval_interval = parse_duration(errors, "alerts.eval_interval", &alerts.eval_interval);
        // the webhook keys [actions] has too; a bad timeout worded as every duration here
        errors.extend(alerts.webhook.validate("alerts", |key, text| {
            let mut problem = Vec::new();
            parse_duration(&mut problem, key, text);
            problem.concat()
        }));
        if !alerts.slos.is_empty() && !self.store.rollups {
            errors.push(
                "alerts.slos: SLOs are computed from rollups; set store.rollups = true".into(),
            );
        }
        if let Err(problems) = self.slos() {
            errors.extend(problems);
        }
        eval_interval
    }

    /// Checks `[scrape]`; its parsed durations when they all parse.
    /// `[server.tls]`: set whole or not at all, and its files readable and matching.
    /// `[query]`'s limits.
    fn validate_query(&self, errors: &mut Vec<String>) {
        let query = &self.query;
        let checks = [
            (query.max_rows == 0, "query.max_rows: must be at least 1"),
            (
                query.memory_limit_bytes < 1024 * 1024,
                "query.memory_limit_bytes: must be at least 1048576 (1 MiB)",
            ),
            (
                query.timeout_ms == 0,
                "query.timeout_ms: must be at least 1",
            ),
            (
                query.max_response_bytes < 1024,
                "query.max_response_bytes: must be at least 1024",
            ),
            (
                query.max_concurrent_per_caller == 0,
                "query.max_concurrent_per_caller: must be at least 1",
            ),
        ];
        errors.extend(
            checks
                .into_iter()
                .filter(|(failed, _)| *failed)
                .map(|(_, problem)| problem.to_string()),
        );
        errors.extend(query.ballista.validate(!self.storage.url.is_empty()));
    }

    fn validate_tls(&self, errors: &mut Vec<String>) {
        match self.server.tls.files() {
            Err(problems) => errors.extend(problems),
            Ok(Some(files)) => {
                if let Err(problem) = infersight_server::tls::Tls::load(files) {
                    errors.push(problem.to_string());
                }
            }
            Ok(None) => {}
        }
    }

    fn validate_scrape(&self, errors: &mut Vec<String>) -> Option<ScrapeDurations> {
        let scrape = &self.scrape;
        let interval = parse_duration(errors, "scrape.interval", &scrape.interval);
        let timeout = parse_duration(errors, "scrape.timeout", &scrape.timeout);
        if let (Some(interval), Some(timeout)) = (interval, timeout)
            && timeout >= interval
        {
            errors.push(format!(
                "scrape.timeout: `{}` must be shorter than scrape.interval `{}`",
                scrape.timeout, scrape.interval
            ));
        }
        let mut seen = std::collections::HashSet::new();
        let mut targets = Vec::new();
        for (i, target) in scrape.targets.iter().enumerate() {
            let at = format!("scrape.targets[{i}]");
            if let Err(e) = infersight_ingest::receivers::prom_scrape::check_url(&target.url) {
                errors.push(format!("{at}.url: {e}"));
            }
            if target.job.trim().is_empty() {
                errors.push(format!("{at}.job: must not be empty (e.g. \"vllm\")"));
            }
            if let Some(path) = &target.ca_file {
                if !target.url.starts_with("https://") {
                    errors.push(format!("{at}.ca_file: only an https:// url uses it"));
                }
                if let Err(problem) =
                    infersight_ingest::receivers::prom_scrape::read_ca_file(path.as_ref())
                {
                    errors.push(format!("{at}.ca_file: {problem}"));
                }
            }
            if let Some(path) = &target.bearer_token_file
                && let Err(problem) =
                    infersight_ingest::receivers::prom_scrape::read_bearer_token(path.as_ref())
            {
                errors.push(format!("{at}.bearer_token_file: {problem}"));
            }
            if target.worker.as_ref().is_some_and(|w| w.trim().is_empty()) {
                errors.push(format!(
                    "{at}.worker: must not be empty (leave it out to use the target's host:port)"
                ));
            }
            let target_interval = match &target.interval {
                Some(text) => parse_duration(errors, &format!("{at}.interval"), text),
                None => interval,
            };
            let target_timeout = match &target.timeout {
                Some(text) => parse_duration(errors, &format!("{at}.timeout"), text),
                None => timeout,
            };
            if target.interval.is_some() || target.timeout.is_some() {
                let interval_text = target.interval.as_deref().unwrap_or(&scrape.interval);
                let timeout_text = target.timeout.as_deref().unwrap_or(&scrape.timeout);
                if let (Some(i), Some(t)) = (target_interval, target_timeout)
                    && t >= i
                {
                    errors.push(format!(
                        "{at}: timeout `{timeout_text}` must be shorter than interval `{interval_text}`"
                    ));
                }
            }
            if !seen.insert((target.url.as_str(), target.job.as_str())) {
                errors.push(format!(
                    "{at}: `{}` is already a target of job `{}`",
                    target.url, target.job
                ));
            }
            targets.push(target_interval.zip(target_timeout));
        }
        Some(ScrapeDurations {
            interval: interval?,
            timeout: timeout?,
            targets: targets.into_iter().collect::<Option<_>>()?,
        })
    }

    pub fn store_options(&self) -> StoreOptions {
        let mut o = StoreOptions::new(&self.store.data_dir);
        o.fsync = match self.store.fsync.as_str() {
            "never" => FsyncPolicy::Never,
            "interval" => FsyncPolicy::Interval {
                interval_ms: self.store.fsync_interval_ms,
            },
            _ => FsyncPolicy::Always,
        };
        o.memtable_max_rows = self.store.memtable_max_rows;
        o.memtable_max_bytes = self.store.memtable_max_bytes;
        o.flush_interval = self.durations.flush_interval;
        o.compaction_min_segments = self.store.compaction_min_segments;
        o.compaction_small_bytes = self.store.compaction_small_bytes;
        o.retention = self.durations.retention;
        o.retention_by_table = self.durations.retention_by_table.clone();
        o.tiers = self.durations.tiers.clone();
        o.retention_by_org = self.auth.retention_by_org();
        o.retired_grace = self.durations.retired_grace;
        o.verify_interval = self.durations.verify_interval;
        o.verify_bytes_per_sec = Some(self.store.verify_bytes_per_sec).filter(|rate| *rate > 0);
        o.zstd_level = self.store.zstd_level;
        o.rollup = self.store.rollups.then(|| RollupSpec {
            dimensions: self.store.rollup_dimensions.clone(),
            max_combinations: self.store.rollup_max_combinations,
        });
        o.remote = self
            .storage
            .remote(&self.store.data_dir, self.server.role.maintains_bucket());
        o
    }

    /// Where mined templates persist: `stages.template.store_dir`, else `<data dir>/templates`
    /// (shared by `serve`'s template stage and `infersight templates`).
    pub fn template_store_dir(&self) -> PathBuf {
        self.stages
            .template
            .store_dir
            .clone()
            .unwrap_or_else(|| self.store.data_dir.join("templates"))
    }

    pub fn aliases(&self) -> Vec<(String, RequestColumn)> {
        self.normalize
            .aliases
            .iter()
            .filter_map(|(k, c)| RequestColumn::from_column_name(c).map(|c| (k.clone(), c)))
            .collect()
    }
}

/// `text` as a positive duration (`500ms`, `30s`, `15m`, `2h`, `7d`); `None` when it is not one.
pub fn duration(text: &str) -> Option<Duration> {
    parse_duration_ns(text)
        .filter(|ns| *ns > 0)
        .map(|ns| Duration::from_nanos(ns as u64))
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    #[test]
    fn defaults_are_valid() {
        let config = load(None, &[]).unwrap();
        assert_eq!(config.server.api_port, 7070);
        assert_eq!(config.store.data_dir, PathBuf::from("./infersight-data"));
    }

    #[test]
    fn default_durations_are_the_default_texts_parsed() {
        let config = Config::default();
        assert_eq!(config.validate().as_ref(), Ok(config.durations()));
        let file = write(concat!(
            "[store]\nretention = \"7d\"\nretired_grace = \"\"\n",
            "[scrape]\ninterval = \"2s\"\ntimeout = \"1s\"\n",
            "targets = [{ url = \"http://h/metrics\", job = \"vllm\", timeout = \"500ms\" }]\n",
        ));
        let durations = load(Some(file.path()), &[]).unwrap().durations().clone();
        assert_eq!(durations.retention, Some(Duration::from_secs(7 * 86_400)));
        assert_eq!(durations.retired_grace, Duration::ZERO);
        assert_eq!(
            durations.scrape_targets,
            vec![(Duration::from_secs(2), Duration::from_millis(500))]
        );
    }

    #[test]
    fn the_scrub_rate_is_a_cap_unless_zero() {
        let default = load(None, &[]).unwrap().store_options();
        assert_eq!(
            default.verify_bytes_per_sec,
            Some(infersight_store::types::DEFAULT_VERIFY_BYTES_PER_SEC)
        );
        let file = write("[store]\nverify_bytes_per_sec = 1048576\n");
        let options = load(Some(file.path()), &[]).unwrap().store_options();
        assert_eq!(options.verify_bytes_per_sec, Some(1 << 20));
        let file = write("[store]\nverify_bytes_per_sec = 0\n");
        let options = load(Some(file.path()), &[]).unwrap().store_options();
        assert_eq!(options.verify_bytes_per_sec, None, "every core, in one go");
    }

    #[test]
    fn retention_by_table_overrides_the_store_retention_per_table() {
        use infersight_model::Table;
        let file = write(concat!(
            "[store]\nretention = \"30d\"\n",
            "[store.retention_by_table]\ntokens = \"2d\"\nspans = \"7d\"\nrequests = \"\"\n",
        ));
        let config = load(Some(file.path()), &[]).unwrap();
        let options = config.store_options();
        let day = Duration::from_secs(86_400);
        assert_eq!(options.retention_of(Table::Tokens), Some(2 * day));
        assert_eq!(options.retention_of(Table::Spans), Some(7 * day));
        assert_eq!(options.retention_of(Table::Requests), None, "kept");
        assert_eq!(options.retention_of(Table::Logs), Some(30 * day));
        let file = write("[store.retention_by_table]\ntoken = \"2d\"\nspans = \"a week\"\n");
        let errors = load(Some(file.path()), &[]).unwrap_err().to_string();
        assert!(
            errors.contains("store.retention_by_table.token: not a table")
                && errors.contains("store.retention_by_table.spans"),
            "{errors}"
        );
    }

    #[test]
    fn store_tiers_parse_into_the_store_options_and_need_a_bucket() {
        let day = Duration::from_secs(86_400);
        let config = load(None, &[]).unwrap();
        assert_eq!(config.store_options().tiers, None, "off by default");
        assert_eq!(config.check_tiers(), None);
        let file = write(concat!(
            "[store.tiers]\nwarm = \"7d\"\ncold = \"90d\"\ncold_prefix = \"archive\"\n",
            "cold_row_group_rows = 500000\n",
        ));
        let mut config = load(Some(file.path()), &[]).unwrap();
        let tiers = config.store_options().tiers.unwrap();
        assert_eq!((tiers.warm_for, tiers.cold_for), (7 * day, Some(90 * day)));
        assert_eq!(tiers.cold_prefix, "archive");
        assert_eq!(tiers.cold_row_group_rows, 500_000);
        assert_eq!(tiers.max_partitions_per_pass, 16);
        let problem = config.check_tiers().unwrap();
        assert!(problem.contains("storage.url"), "{problem}");
        config.storage.url = "file:///tmp/bucket".into();
        assert_eq!(config.check_tiers(), None);
        let file = write(concat!(
            "[store.tiers]\nwarm = \"7d\"\ncold = \"2d\"\ncold_prefix = \"segments\"\n",
            "cold_row_group_rows = 0\n",
        ));
        let errors = load(Some(file.path()), &[]).unwrap_err().to_string();
        for expected in [
            "store.tiers.cold: `2d` ends before the warm tier does",
            "store.tiers.cold_prefix",
            "store.tiers.cold_row_group_rows",
        ] {
            assert!(errors.contains(expected), "{expected}: {errors}");
        }
        let file = write("[store.tiers]\ncold = \"90d\"\n");
        let errors = load(Some(file.path()), &[]).unwrap_err().to_string();
        assert!(errors.contains("without store.tiers.warm"), "{errors}");
    }

    #[test]
    fn an_orgs_own_retention_reaches_the_store_options() {
        let file = write(concat!(
            "[auth.orgs.acme]\nretention = \"30d\"\nmax_concurrent_queries = 2\n",
            "max_storage_bytes = 1000000\n",
            "[auth.orgs.globex]\ningest_exports_per_s = 5.0\n",
        ));
        let config = load(Some(file.path()), &[]).unwrap();
        let by_org = config.store_options().retention_by_org;
        assert_eq!(
            by_org.into_iter().collect::<Vec<_>>(),
            [("acme".to_string(), Duration::from_secs(30 * 86_400))]
        );
        assert_eq!(
            config.auth.storage_quota().usage("acme"),
            Some((0, 1_000_000))
        );
        let file = write("[auth.orgs.acme]\nretention = \"a month\"\nmax_storage_bytes = 0\n");
        let errors = load(Some(file.path()), &[]).unwrap_err().to_string();
        assert!(errors.contains("auth.orgs.acme.retention"), "{errors}");
        assert!(
            errors.contains("auth.orgs.acme.max_storage_bytes"),
            "{errors}"
        );
    }

    #[test]
    fn env_overrides_file_which_overrides_defaults() {
        let file = write("[server]\napi_port = 8000\notlp_http_port = 9000\n");
        let env = vec![(
            "INFERSIGHT__SERVER__API_PORT".to_string(),
            "8100".to_string(),
        )];
        let config = load(Some(file.path()), &env).unwrap();
        assert_eq!(config.server.api_port, 8100);
        assert_eq!(config.server.otlp_http_port, 9000);
        assert_eq!(config.server.otlp_grpc_port, 4317);
    }

    #[test]
    fn reports_every_error_at_once() {
        let file = write(
            "[server]\napi_port = \"x\"\nbogus = 1\n[store]\nfsync = \"sometimes\"\nretention = \"forever\"\n[normalize.aliases]\n\"acme.lora\" = \"no_such_column\"\n[nope]\n",
        );
        let errors = load(Some(file.path()), &[]).unwrap_err().0;
        let joined = errors.join("\n");
        for needle in [
            "server.bogus: unknown key",
            "nope: unknown key",
            "server.api_port:",
            "store.fsync",
            "store.retention",
            "normalize.aliases.acme.lora",
        ] {
            assert!(joined.contains(needle), "missing `{needle}` in:\n{joined}");
        }
    }

    #[test]
    fn slos_are_validated_all_at_once() {
        let file = write(concat!(
            "[alerts]\nwebhook_url = \"ftp://hooks\"\nwebhook_attempts = 0\n",
            "slos = [\n",
            "  { name = \"ok\", sli = \"ttft\", threshold_ms = 500, objective = 0.99, window = \"30d\", filters = [\"model=llama\"] },\n",
            "  { name = \"ok\", sli = \"error_rate\", objective = 0.999 },\n",
            "  { name = \"no-threshold\", sli = \"e2e\" },\n",
            "  { name = \"bad-filter\", sli = \"error_rate\", filters = [\"colour=red\"] },\n",
            "  { name = \"bad-objective\", sli = \"error_rate\", objective = 1.5 },\n",
            "]\n",
        ));
        let errors = load(Some(file.path()), &[]).unwrap_err().0;
        let joined = errors.join("\n");
        for needle in [
            "alerts.webhook_url: `ftp://hooks` must be an http:// or https:// URL",
            "alerts.webhook_attempts: must be at least 1",
            "alerts.slos[1].name: `ok` is used twice",
            "alerts.slos[2]: slo no-threshold: latency sli `e2e` needs a positive threshold_ms",
            "alerts.slos[3].filters: `colour=red`",
            "alerts.slos[4]: slo bad-objective: objective 1.5",
        ] {
            assert!(joined.contains(needle), "missing `{needle}` in:\n{joined}");
        }
        let unknown =
            write("[alerts]\nslos = [{ name = \"x\", sli = \"error_rate\", bogus = 1 }]\n");
        let errors = load(Some(unknown.path()), &[]).unwrap_err().0;
        assert!(
            errors.join("\n").contains("unknown field `bogus`"),
            "{errors:?}"
        );
        let good = write(
            "[alerts]\nslos = [{ name = \"a\", sli = \"error_rate\", objective = 0.999, window = \"7d\" }]\n",
        );
        let config = load(Some(good.path()), &[]).unwrap();
        assert_eq!(config.slos().unwrap().len(), 1);
    }

    #[test]
    fn server_tls_is_validated_naming_the_key_and_file() {
        for (text, needle) in [
            (
                "[server.tls]\ncert_file = \"/x.pem\"\n",
                "server.tls.key_file: must be set with cert_file",
            ),
            (
                "[server.tls]\nclient_ca_file = \"/x.pem\"\n",
                "server.tls.client_ca_file: needs server.tls.cert_file",
            ),
            (
                "[server.tls]\ncert_file = \"/nonexistent/c.pem\"\nkey_file = \"/nonexistent/k.pem\"\n",
                "server.tls.cert_file: cannot read `/nonexistent/c.pem`",
            ),
        ] {
            let file = write(text);
            let joined = load(Some(file.path()), &[]).unwrap_err().0.join("\n");
            assert!(joined.contains(needle), "missing `{needle}` in:\n{joined}");
        }
        let dir = tempfile::tempdir().unwrap();
        let pki = infersight_testkit::https::TestPki::new("config").write(dir.path());
        let file = write(&format!(
            "[server.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\nclient_ca_file = \"{}\"\n",
            pki.server_cert.display(),
            pki.server_key.display(),
            pki.ca.display()
        ));
        let config = load(Some(file.path()), &[]).unwrap();
        let files = config.server.tls.files().unwrap().unwrap();
        assert_eq!(files.client_ca_file.as_deref(), Some(pki.ca.as_path()));
        assert_eq!(Config::default().server.tls.files().unwrap(), None);
    }

    #[test]
    fn scrape_targets_are_validated_all_at_once() {
        let file = write(concat!(
            "[scrape]\ninterval = \"2s\"\ntimeout = \"1s\"\n",
            "targets = [\n",
            "  { url = \"http://10.0.0.5:8000/metrics\", job = \"vllm\", worker = \"worker-1\" },\n",
            "  { url = \"https://x/metrics\", job = \"dcgm\", ca_file = \"/nonexistent/ca.pem\", bearer_token_file = \"/nonexistent/token\" },\n",
            "  { url = \"not a url\", job = \"\" },\n",
            "  { url = \"http://h:9400/metrics\", job = \"dcgm\", timeout = \"3s\" },\n",
            "  { url = \"http://10.0.0.5:8000/metrics\", job = \"vllm\", interval = \"soon\" },\n",
            "]\n",
        ));
        let errors = load(Some(file.path()), &[]).unwrap_err().0;
        let joined = errors.join("\n");
        for needle in [
            "scrape.targets[1].ca_file: cannot read `/nonexistent/ca.pem`",
            "scrape.targets[1].bearer_token_file: cannot read `/nonexistent/token`",
            "scrape.targets[2].url:",
            "scrape.targets[2].job: must not be empty",
            "scrape.targets[3]: timeout `3s` must be shorter than interval `2s`",
            "scrape.targets[4].interval: `soon` is not a positive duration",
            "scrape.targets[4]: `http://10.0.0.5:8000/metrics` is already a target of job `vllm`",
        ] {
            assert!(joined.contains(needle), "missing `{needle}` in:\n{joined}");
        }
        assert_eq!(errors.len(), 7, "{joined}");

        let file = write(
            "[scrape]\ninterval = \"5s\"\ntimeout = \"5s\"\ntargets = [{ url = \"http://h/metrics\", job = \"vllm\", bogus = 1 }]\n",
        );
        let joined = load(Some(file.path()), &[]).unwrap_err().0.join("\n");
        assert!(
            joined.contains("scrape.timeout: `5s` must be shorter than scrape.interval `5s`"),
            "{joined}"
        );
        assert!(
            joined.contains("scrape.targets: unknown field `bogus`"),
            "{joined}"
        );

        let file = write(
            "[scrape]\ninterval = \"200ms\"\ntimeout = \"100ms\"\ntargets = [{ url = \"http://127.0.0.1:9/metrics\", job = \"vllm\", worker = \"w\" }, { url = \"http://h:8000/metrics\", job = \"tgi\", interval = \"1s\", timeout = \"500ms\" }]\n",
        );
        let config = load(Some(file.path()), &[]).unwrap();
        let targets = crate::wiring::scrape_targets(&config);
        assert_eq!(targets.len(), 2);
        assert_eq!(targets[0].interval, Duration::from_millis(200));
        assert_eq!(targets[0].timeout, Duration::from_millis(100));
        assert_eq!(targets[0].worker.as_deref(), Some("w"));
        assert_eq!(targets[1].interval, Duration::from_secs(1));
        assert_eq!(targets[1].timeout, Duration::from_millis(500));
        assert_eq!(targets[1].instance(), "h:8000");
    }

    #[test]
    fn syntax_errors_name_the_file() {
        let file = write("[server\n");
        let errors = load(Some(file.path()), &[]).unwrap_err().0;
        assert_eq!(errors.len(), 1);
        assert!(errors[0].contains(&file.path().display().to_string()));
    }
}
