//! The `[actions]` section: the serde structs as users write them ([`ActionsConfig`],
//! [`PolicyConfig`]), `validate` reporting every problem at once, and their resolution into the
//! [`Policy`] values the engine runs. First of the three layers; no IO.

use std::time::Duration;

use infersight_model::time::parse_duration_ns;
use infersight_rollup::{CounterSli, Sli};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::webhook::{WebhookConfig, WebhookSettings};

pub(super) const MINUTE_NS: i64 = 60_000_000_000;

/// The `[actions]` configuration section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ActionsConfig {
    /// Decide and audit, send nothing (the default).
    pub dry_run: bool,
    /// `webhook_url`, `webhook_timeout`, `webhook_attempts`: where fire / rollback payloads are
    /// POSTed (JSON); the URL is required unless `dry_run`.
    #[serde(flatten)]
    pub webhook: WebhookConfig,
    /// How often `serve` evaluates every policy (each evaluation is one window).
    pub eval_interval: String,
    /// `[[actions.policies]]`, see [`PolicyConfig`].
    pub policies: Vec<PolicyConfig>,
}

impl Default for ActionsConfig {
    fn default() -> Self {
        Self {
            dry_run: true,
            webhook: WebhookConfig::default(),
            eval_interval: "30s".into(),
            policies: Vec::new(),
        }
    }
}

/// One `[[actions.policies]]` entry as written.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    pub name: String,
    /// A latency SLI (`ttft`, `e2e`, `queue`, `prefill`, `decode`, `tpot`, `itl_max`) or a rate
    /// where higher is worse (`error_rate`, `abort_rate`).
    pub sli: String,
    /// Quantile of a latency SLI (default 0.95); not allowed for rates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub q: Option<f64>,
    /// `dimension=value` pairs (dimensions of `store.rollup_dimensions`).
    pub filters: Vec<String>,
    /// Breach above this: milliseconds for latency SLIs, a fraction in [0, 1] for rates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// The trailing window each evaluation measures (at least 1m: rollups are per minute).
    pub window: String,
    /// Breached windows in a row before acting.
    pub consecutive: u32,
    /// Windows with fewer requests count as no data.
    pub min_requests: u64,
    /// `downgrade_model` (needs `fallback_version`), `shrink_batch` (needs `max_batch`),
    /// `route_fallback` (needs `pool`).
    pub action: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_batch: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// Least time between two fires of this policy.
    pub cooldown: String,
    /// Most fires in any trailing hour.
    pub max_per_hour: u32,
    /// Send a rollback when the SLI has recovered.
    pub rollback_on_recovery: bool,
    /// Good windows in a row that count as recovered.
    pub recovery_windows: u32,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        Self {
            name: String::new(),
            sli: String::new(),
            q: None,
            filters: Vec::new(),
            threshold: None,
            window: "5m".into(),
            consecutive: 3,
            min_requests: 1,
            action: String::new(),
            fallback_version: None,
            max_batch: None,
            pool: None,
            cooldown: "10m".into(),
            max_per_hour: 3,
            rollback_on_recovery: true,
            recovery_windows: 3,
        }
    }
}

/// What a policy asks the fleet to do, with the parameter it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionKind {
    DowngradeModel { fallback_version: String },
    ShrinkBatch { max_batch: u64 },
    RouteFallback { pool: String },
}

impl ActionKind {
    pub const NAMES: [&'static str; 3] = ["downgrade_model", "shrink_batch", "route_fallback"];

    pub fn name(&self) -> &'static str {
        match self {
            ActionKind::DowngradeModel { .. } => "downgrade_model",
            ActionKind::ShrinkBatch { .. } => "shrink_batch",
            ActionKind::RouteFallback { .. } => "route_fallback",
        }
    }

    /// The parameters as the webhook and the audit trail carry them.
    pub fn params(&self) -> Value {
        match self {
            ActionKind::DowngradeModel { fallback_version } => {
                json!({ "fallback_version": fallback_version })
            }
            ActionKind::ShrinkBatch { max_batch } => json!({ "max_batch": max_batch }),
            ActionKind::RouteFallback { pool } => json!({ "pool": pool }),
        }
    }
}

/// A validated policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub name: String,
    pub sli: Sli,
    /// The quantile of a latency SLI; `None` for rates.
    pub quantile: Option<f64>,
    pub filters: Vec<(String, String)>,
    pub threshold: f64,
    pub window_ns: i64,
    pub consecutive: u32,
    pub min_requests: u64,
    pub action: ActionKind,
    pub cooldown_ns: i64,
    pub max_per_hour: u32,
    pub rollback_on_recovery: bool,
    pub recovery_windows: u32,
}

impl Policy {
    /// A policy with the config's defaults, for tests and embedding.
    pub fn new(name: &str, sli: Sli, threshold: f64, action: ActionKind) -> Policy {
        let d = PolicyConfig::default();
        Policy {
            name: name.to_string(),
            sli,
            quantile: matches!(sli, Sli::Latency(_)).then_some(0.95),
            filters: Vec::new(),
            threshold,
            window_ns: parse_duration_ns(&d.window).unwrap_or(5 * MINUTE_NS),
            consecutive: d.consecutive,
            min_requests: d.min_requests,
            action,
            cooldown_ns: parse_duration_ns(&d.cooldown).unwrap_or(10 * MINUTE_NS),
            max_per_hour: d.max_per_hour,
            rollback_on_recovery: d.rollback_on_recovery,
            recovery_windows: d.recovery_windows,
        }
    }
}

fn positive_duration(text: &str) -> Option<i64> {
    parse_duration_ns(text).filter(|ns| *ns > 0)
}

impl ActionsConfig {
    /// Every problem of the section at once, each naming its key (`actions.policies[0] (name)`).
    /// `rollup_dimensions` are the dimensions filters may use; policies read rollups, so
    /// `rollups_enabled` must be true when any policy is configured.
    pub fn validate(&self, rollup_dimensions: &[String], rollups_enabled: bool) -> Vec<String> {
        let mut errors = Vec::new();
        let duration_error = |key: &str, text: &str| {
            format!("{key}: `{text}` is not a positive duration like 500ms, 30s, 15m, 2h")
        };
        if positive_duration(&self.eval_interval).is_none() {
            errors.push(duration_error("actions.eval_interval", &self.eval_interval));
        }
        errors.extend(self.webhook.validate("actions", duration_error));
        if !self.dry_run && self.webhook.webhook_url.is_empty() && !self.policies.is_empty() {
            errors.push(
                "actions.webhook_url: required when dry_run = false (where should actions go?)"
                    .into(),
            );
        }
        if !self.policies.is_empty() && !rollups_enabled {
            errors.push(
                "actions.policies: policies are evaluated from rollups; set store.rollups = true"
                    .into(),
            );
        }
        if let Err(problems) = self.policies(rollup_dimensions) {
            errors.extend(problems);
        }
        errors
    }

    /// The policies, resolved and checked; every error names `actions.policies[i] (name)`.
    pub fn policies(&self, rollup_dimensions: &[String]) -> Result<Vec<Policy>, Vec<String>> {
        let mut errors = Vec::new();
        let mut policies = Vec::new();
        let mut names = std::collections::HashSet::new();
        for (i, p) in self.policies.iter().enumerate() {
            let at = if p.name.trim().is_empty() {
                format!("actions.policies[{i}]")
            } else {
                format!("actions.policies[{i}] ({})", p.name)
            };
            let before = errors.len();
            if p.name.trim().is_empty() {
                errors.push(format!("{at}.name: must not be empty"));
            } else if !names.insert(p.name.as_str()) {
                errors.push(format!("{at}.name: `{}` is used twice", p.name));
            }
            let policy = p.resolve(&at, rollup_dimensions, &mut errors);
            if let Some(policy) = policy.filter(|_| errors.len() == before) {
                policies.push(policy);
            }
        }
        if errors.is_empty() {
            Ok(policies)
        } else {
            Err(errors)
        }
    }

    /// The webhook actions go to; `None` in dry-run or when no URL is set.
    pub fn webhook(&self) -> Option<WebhookSettings> {
        if self.dry_run {
            return None;
        }
        self.webhook.settings("actions")
    }

    pub fn eval_interval(&self) -> Duration {
        positive_duration(&self.eval_interval).map_or(Duration::from_secs(30), |ns| {
            Duration::from_nanos(ns as u64)
        })
    }
}

impl PolicyConfig {
    /// This policy resolved, its problems (each named `{at}.key`) appended to `errors` in the
    /// order of the keys; `None` when any key is wrong.
    fn resolve(
        &self,
        at: &str,
        rollup_dimensions: &[String],
        errors: &mut Vec<String>,
    ) -> Option<Policy> {
        let sli = self.resolve_sli(at, errors);
        let quantile = self.resolve_quantile(sli, at, errors);
        let threshold = self.resolve_threshold(sli, at, errors);
        let filters = self.resolve_filters(rollup_dimensions, at, errors);
        let window_ns = self.resolve_window(at, errors);
        let cooldown_ns = positive_duration(&self.cooldown);
        if cooldown_ns.is_none() {
            errors.push(format!(
                "{at}.cooldown: `{}` is not a positive duration like 10m",
                self.cooldown
            ));
        }
        self.check_counts(at, errors);
        let action = resolve_action(self, at, errors);
        Some(Policy {
            name: self.name.clone(),
            sli: sli?,
            quantile,
            filters,
            threshold: threshold?,
            window_ns: window_ns?,
            consecutive: self.consecutive,
            min_requests: self.min_requests,
            action: action?,
            cooldown_ns: cooldown_ns?,
            max_per_hour: self.max_per_hour,
            rollback_on_recovery: self.rollback_on_recovery,
            recovery_windows: self.recovery_windows,
        })
    }

    /// Latency SLIs and the rates where higher is worse; other SLIs cannot drive an action.
    fn resolve_sli(&self, at: &str, errors: &mut Vec<String>) -> Option<Sli> {
        match Sli::parse(&self.sli) {
            Some(s @ Sli::Latency(_)) => Some(s),
            Some(s @ Sli::Counter(CounterSli::ErrorRate | CounterSli::AbortRate)) => Some(s),
            _ => {
                errors.push(format!(
                    "{at}.sli: `{}` cannot drive an action; use a latency sli (ttft, e2e, queue, prefill, decode, tpot, itl_max) or error_rate / abort_rate",
                    self.sli
                ));
                None
            }
        }
    }

    /// The quantile of a latency SLI (0.95 unless `q` says otherwise); rates take none.
    fn resolve_quantile(
        &self,
        sli: Option<Sli>,
        at: &str,
        errors: &mut Vec<String>,
    ) -> Option<f64> {
        match (sli, self.q) {
            (Some(Sli::Latency(_)), None) => Some(0.95),
            (Some(Sli::Latency(_)), Some(q)) if q > 0.0 && q <= 1.0 => Some(q),
            (Some(Sli::Latency(_)), Some(q)) => {
                errors.push(format!("{at}.q: {q} must lie in (0, 1], e.g. 0.95"));
                None
            }
            (Some(_), Some(_)) => {
                errors.push(format!(
                    "{at}.q: only latency slis have quantiles; remove it for `{}`",
                    self.sli
                ));
                None
            }
            (_, _) => None,
        }
    }

    /// Milliseconds for latency SLIs, a fraction in [0, 1) for rates.
    fn resolve_threshold(
        &self,
        sli: Option<Sli>,
        at: &str,
        errors: &mut Vec<String>,
    ) -> Option<f64> {
        let latency = matches!(sli, Some(Sli::Latency(_)));
        match self.threshold {
            None => {
                errors.push(format!(
                    "{at}.threshold: required (milliseconds for latency slis, a fraction for rates)"
                ));
                None
            }
            Some(t) if latency && !(t > 0.0 && t.is_finite()) => {
                errors.push(format!(
                    "{at}.threshold: {t} must be a positive number of milliseconds"
                ));
                None
            }
            Some(t) if sli.is_some() && !latency && !(0.0..1.0).contains(&t) => {
                errors.push(format!(
                    "{at}.threshold: {t} must be a fraction in [0, 1) for `{}`",
                    self.sli
                ));
                None
            }
            Some(t) => Some(t),
        }
    }

    /// `dimension=value` pairs over dimensions the rollups keep.
    fn resolve_filters(
        &self,
        rollup_dimensions: &[String],
        at: &str,
        errors: &mut Vec<String>,
    ) -> Vec<(String, String)> {
        let mut filters = Vec::new();
        for filter in &self.filters {
            match filter.split_once('=') {
                Some((d, v)) if rollup_dimensions.iter().any(|k| k == d.trim()) => {
                    filters.push((d.trim().to_string(), v.to_string()))
                }
                _ => errors.push(format!(
                    "{at}.filters: `{filter}` must be dimension=value with a dimension of store.rollup_dimensions"
                )),
            }
        }
        filters
    }

    /// At least a minute: rollups are per minute.
    fn resolve_window(&self, at: &str, errors: &mut Vec<String>) -> Option<i64> {
        match positive_duration(&self.window) {
            Some(ns) if ns >= MINUTE_NS => Some(ns),
            Some(_) => {
                errors.push(format!(
                    "{at}.window: `{}` is shorter than 1m (rollups are per minute)",
                    self.window
                ));
                None
            }
            None => {
                errors.push(format!(
                    "{at}.window: `{}` is not a duration like 1m, 5m",
                    self.window
                ));
                None
            }
        }
    }

    /// The streak lengths and the hourly cap are at least 1.
    fn check_counts(&self, at: &str, errors: &mut Vec<String>) {
        if self.consecutive == 0 {
            errors.push(format!("{at}.consecutive: must be at least 1"));
        }
        if self.recovery_windows == 0 {
            errors.push(format!("{at}.recovery_windows: must be at least 1"));
        }
        if self.max_per_hour == 0 {
            errors.push(format!(
                "{at}.max_per_hour: must be at least 1 (remove the policy to disable it)"
            ));
        }
    }
}

/// The action and the one parameter it needs; a parameter another action needs is an error
/// (most likely a mix-up).
fn resolve_action(p: &PolicyConfig, at: &str, errors: &mut Vec<String>) -> Option<ActionKind> {
    let given: Vec<&str> = [
        p.fallback_version.as_ref().map(|_| "fallback_version"),
        p.max_batch.as_ref().map(|_| "max_batch"),
        p.pool.as_ref().map(|_| "pool"),
    ]
    .into_iter()
    .flatten()
    .collect();
    let (needed, action) = match p.action.as_str() {
        "downgrade_model" => (
            "fallback_version",
            p.fallback_version
                .clone()
                .filter(|v| !v.trim().is_empty())
                .map(|fallback_version| ActionKind::DowngradeModel { fallback_version }),
        ),
        "shrink_batch" => (
            "max_batch",
            p.max_batch
                .filter(|b| *b > 0)
                .map(|max_batch| ActionKind::ShrinkBatch { max_batch }),
        ),
        "route_fallback" => (
            "pool",
            p.pool
                .clone()
                .filter(|v| !v.trim().is_empty())
                .map(|pool| ActionKind::RouteFallback { pool }),
        ),
        other => {
            errors.push(format!(
                "{at}.action: `{other}` is not one of {}",
                ActionKind::NAMES.join(", ")
            ));
            return None;
        }
    };
    if action.is_none() {
        errors.push(format!(
            "{at}.{needed}: `{}` needs a non-empty {needed}",
            p.action
        ));
    }
    for extra in given.into_iter().filter(|g| *g != needed) {
        errors.push(format!(
            "{at}.{extra}: not used by `{}` (it takes {needed})",
            p.action
        ));
    }
    action
}
