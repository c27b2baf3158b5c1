//! Automatic actions, the end of the closed loop: policies evaluated over SLIs; a sustained breach
//! emits an action (downgrade model, shrink batch, route to fallback) to a webhook, with dry-run,
//! cooldown, an hourly cap, rollback on recovery, and an audit trail of every decision.
//!
//! Three layers, in the order data flows through them:
//! - [`ActionsConfig`] / [`PolicyConfig`]: the `[actions]` section as written; `validate` reports
//!   every problem at once, `policies` resolves it into [`Policy`] values.
//! - [`ActionEngine`]: a pure state machine with an injected clock. It is fed one observation
//!   per policy per evaluation (a *window*: the SLI over the trailing `window`, or `None` when the
//!   window held no data) and returns at most one [`Decision`]. No IO, no clock, so every rule
//!   below is unit-tested deterministically.
//! - [`ActionRunner`]: the side effects. It measures each policy's SLI from the store's rollups
//!   (the path SLO evaluation and `GET /api/v1/sli` use), feeds the engine, POSTs fires and
//!   rollbacks to the webhook (the sender alerts use: timeout, retries), and appends every decision
//!   to `<data_dir>/actions/audit.jsonl` (fsynced). [`run_action_loop`] drives it in `serve`.
//!
//! The rules, per policy:
//! - A window *breaches* when the value is above `threshold` (latency SLIs in ms, rates as
//!   fractions). After `consecutive` breached windows in a row the policy wants to act.
//! - It fires at most once per breach episode: while its action is in effect (fired and not yet
//!   rolled back) further breached windows are `suppressed` (`already_active`). A new fire also
//!   needs `cooldown` since the previous one (`cooldown`) and fewer than `max_per_hour` fires in
//!   the trailing hour (`hourly_cap`). A suppressed breach that persists fires as soon as the
//!   cooldown or cap allows.
//! - After `recovery_windows` good windows in a row the action is rolled back (`rollback`), or,
//!   with `rollback_on_recovery = false`, the episode just ends (`recovered`, nothing sent).
//! - A window without data (no requests, or fewer than `min_requests`) is neither a breach nor a
//!   recovery: it interrupts both streaks, so acting and rolling back both need uninterrupted
//!   evidence (as Prometheus resets a pending `for:` when its series vanishes).
//! - Dry-run (the default) runs the same machine — cooldowns, caps and episodes behave exactly as
//!   they would live — but records `dry_run` decisions (`would_fire` / `would_roll_back`) and
//!   sends nothing.
//!
//! `consecutive` counts evaluations: every `eval_interval` each policy looks at its trailing
//! `window`, so with `eval_interval < window` consecutive windows overlap and a breach must last
//! about `window + (consecutive - 1) * eval_interval`; set `eval_interval = window` for windows
//! that follow each other back to back.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use infersight_rollup::{CounterSli, Sli};
use infersight_model::time::{format_rfc3339, parse_duration_ns};
use infersight_query::{SliRequest, answer_sli};
use infersight_store::{StorageBackend, TimeRange};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::alerts::{Delivery, WebhookSettings, escape};

const MINUTE_NS: i64 = 60_000_000_000;
const HOUR_NS: i64 = 60 * MINUTE_NS;
/// Audit entries `GET /api/v1/actions` shows (the file keeps them all).
const RECENT_ENTRIES: usize = 100;

/// The `[actions]` configuration section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ActionsConfig {
    /// Decide and audit, send nothing (the default).
    pub dry_run: bool,
    /// Where fire / rollback payloads are POSTed (JSON); required unless `dry_run`.
    pub webhook_url: String,
    pub webhook_timeout: String,
    /// Attempts per payload (backoff 200 ms, doubling).
    pub webhook_attempts: u32,
    /// How often `serve` evaluates every policy (each evaluation is one window).
    pub eval_interval: String,
    /// `[[actions.policies]]`, see [`PolicyConfig`].
    pub policies: Vec<PolicyConfig>,
}

impl Default for ActionsConfig {
    fn default() -> Self {
        Self {
            dry_run: true,
            webhook_url: String::new(),
            webhook_timeout: "5s".into(),
            webhook_attempts: 3,
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

    fn filters_json(&self) -> Value {
        Value::Object(
            self.filters
                .iter()
                .map(|(d, v)| (d.clone(), Value::String(v.clone())))
                .collect(),
        )
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
        if positive_duration(&self.webhook_timeout).is_none() {
            errors.push(duration_error(
                "actions.webhook_timeout",
                &self.webhook_timeout,
            ));
        }
        if !self.webhook_url.is_empty() && !self.webhook_url.starts_with("http://") {
            errors.push(format!(
                "actions.webhook_url: `{}` must be an http:// URL (no TLS in this build)",
                self.webhook_url
            ));
        }
        if self.webhook_attempts == 0 {
            errors.push("actions.webhook_attempts: must be at least 1".into());
        }
        if !self.dry_run && self.webhook_url.is_empty() && !self.policies.is_empty() {
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
            let sli = match Sli::parse(&p.sli) {
                Some(s @ Sli::Latency(_)) => Some(s),
                Some(s @ Sli::Counter(CounterSli::ErrorRate | CounterSli::AbortRate)) => Some(s),
                _ => {
                    errors.push(format!(
                        "{at}.sli: `{}` cannot drive an action; use a latency sli (ttft, e2e, queue, prefill, decode, tpot, itl_max) or error_rate / abort_rate",
                        p.sli
                    ));
                    None
                }
            };
            let latency = matches!(sli, Some(Sli::Latency(_)));
            let quantile = match (sli, p.q) {
                (Some(Sli::Latency(_)), None) => Some(0.95),
                (Some(Sli::Latency(_)), Some(q)) if q > 0.0 && q <= 1.0 => Some(q),
                (Some(Sli::Latency(_)), Some(q)) => {
                    errors.push(format!("{at}.q: {q} must lie in (0, 1], e.g. 0.95"));
                    None
                }
                (Some(_), Some(_)) => {
                    errors.push(format!(
                        "{at}.q: only latency slis have quantiles; remove it for `{}`",
                        p.sli
                    ));
                    None
                }
                (_, _) => None,
            };
            let threshold = match p.threshold {
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
                        p.sli
                    ));
                    None
                }
                Some(t) => Some(t),
            };
            let mut filters = Vec::new();
            for filter in &p.filters {
                match filter.split_once('=') {
                    Some((d, v)) if rollup_dimensions.iter().any(|k| k == d.trim()) => {
                        filters.push((d.trim().to_string(), v.to_string()))
                    }
                    _ => errors.push(format!(
                        "{at}.filters: `{filter}` must be dimension=value with a dimension of store.rollup_dimensions"
                    )),
                }
            }
            let window_ns = match positive_duration(&p.window) {
                Some(ns) if ns >= MINUTE_NS => Some(ns),
                Some(_) => {
                    errors.push(format!(
                        "{at}.window: `{}` is shorter than 1m (rollups are per minute)",
                        p.window
                    ));
                    None
                }
                None => {
                    errors.push(format!(
                        "{at}.window: `{}` is not a duration like 1m, 5m",
                        p.window
                    ));
                    None
                }
            };
            let cooldown_ns = positive_duration(&p.cooldown);
            if cooldown_ns.is_none() {
                errors.push(format!(
                    "{at}.cooldown: `{}` is not a positive duration like 10m",
                    p.cooldown
                ));
            }
            if p.consecutive == 0 {
                errors.push(format!("{at}.consecutive: must be at least 1"));
            }
            if p.recovery_windows == 0 {
                errors.push(format!("{at}.recovery_windows: must be at least 1"));
            }
            if p.max_per_hour == 0 {
                errors.push(format!(
                    "{at}.max_per_hour: must be at least 1 (remove the policy to disable it)"
                ));
            }
            let action = resolve_action(p, &at, &mut errors);
            if errors.len() > before {
                continue;
            }
            if let (Some(sli), Some(threshold), Some(window_ns), Some(cooldown_ns), Some(action)) =
                (sli, threshold, window_ns, cooldown_ns, action)
            {
                policies.push(Policy {
                    name: p.name.clone(),
                    sli,
                    quantile,
                    filters,
                    threshold,
                    window_ns,
                    consecutive: p.consecutive,
                    min_requests: p.min_requests,
                    action,
                    cooldown_ns,
                    max_per_hour: p.max_per_hour,
                    rollback_on_recovery: p.rollback_on_recovery,
                    recovery_windows: p.recovery_windows,
                });
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
        (!self.dry_run && !self.webhook_url.is_empty()).then(|| WebhookSettings {
            url: self.webhook_url.clone(),
            timeout: positive_duration(&self.webhook_timeout)
                .map_or(Duration::from_secs(5), |ns| Duration::from_nanos(ns as u64)),
            attempts: self.webhook_attempts.max(1),
        })
    }

    pub fn eval_interval(&self) -> Duration {
        positive_duration(&self.eval_interval).map_or(Duration::from_secs(30), |ns| {
            Duration::from_nanos(ns as u64)
        })
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

/// Why a wanted fire did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuppressReason {
    /// The last fire was less than `cooldown` ago.
    Cooldown,
    /// `max_per_hour` fires happened in the trailing hour.
    HourlyCap,
    /// The action fired in this episode and has not been rolled back.
    AlreadyActive,
}

impl SuppressReason {
    pub fn name(self) -> &'static str {
        match self {
            SuppressReason::Cooldown => "cooldown",
            SuppressReason::HourlyCap => "hourly_cap",
            SuppressReason::AlreadyActive => "already_active",
        }
    }
}

/// What the engine decided for one window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionKind {
    /// Send the action.
    Fire,
    /// The policy wanted to fire but may not.
    Suppressed(SuppressReason),
    /// The SLI recovered: send the rollback.
    Rollback,
    /// Dry-run: would have fired (state changes as if it had).
    WouldFire,
    /// Dry-run: would have rolled back.
    WouldRollBack,
    /// Recovered with `rollback_on_recovery = false`: the episode ends, nothing is sent.
    Recovered,
}

impl DecisionKind {
    /// The audit trail's `decision` field.
    pub fn name(self) -> &'static str {
        match self {
            DecisionKind::Fire => "fire",
            DecisionKind::Suppressed(_) => "suppressed",
            DecisionKind::Rollback => "rollback",
            DecisionKind::WouldFire | DecisionKind::WouldRollBack => "dry_run",
            DecisionKind::Recovered => "recovered",
        }
    }

    /// The audit trail's `reason` field.
    pub fn reason(self) -> Option<&'static str> {
        match self {
            DecisionKind::Suppressed(r) => Some(r.name()),
            DecisionKind::WouldFire => Some("would_fire"),
            DecisionKind::WouldRollBack => Some("would_roll_back"),
            DecisionKind::Recovered => Some("rollback_on_recovery_disabled"),
            DecisionKind::Fire | DecisionKind::Rollback => None,
        }
    }

    /// The webhook payload's `kind` for decisions that send one.
    pub fn webhook_kind(self) -> Option<&'static str> {
        match self {
            DecisionKind::Fire => Some("fire"),
            DecisionKind::Rollback => Some("rollback"),
            _ => None,
        }
    }
}

/// One decision, with what the audit trail and the webhook need to describe it.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub at_ns: i64,
    pub policy: String,
    pub kind: DecisionKind,
    pub action: ActionKind,
    pub sli: &'static str,
    pub quantile: Option<f64>,
    pub filters: Vec<(String, String)>,
    pub value: f64,
    pub threshold: f64,
    /// Breached windows in a row (fire, suppressed) or good windows in a row (rollback).
    pub windows: u32,
    pub window_ns: i64,
    pub dry_run: bool,
    /// Human words on the reason (`last fired 2m ago; cooldown 10m`).
    pub detail: Option<String>,
}

impl Decision {
    /// The webhook body for a fire or rollback.
    pub fn payload(&self) -> Option<Value> {
        let kind = self.kind.webhook_kind()?;
        Some(json!({
            "kind": kind,
            "policy": self.policy,
            "action": self.action.name(),
            "params": self.action.params(),
            "sli": self.sli,
            "q": self.quantile,
            "filters": filters_object(&self.filters),
            "value": self.value,
            "threshold": self.threshold,
            "consecutive_windows": self.windows,
            "window_s": self.window_ns / 1_000_000_000,
            "ts": format_rfc3339(self.at_ns),
        }))
    }

    /// The audit entry, before the webhook outcome is known.
    pub fn audit_entry(&self) -> AuditEntry {
        AuditEntry {
            ts: format_rfc3339(self.at_ns),
            ts_ns: self.at_ns,
            policy: self.policy.clone(),
            decision: self.kind.name().to_string(),
            action: self.action.name().to_string(),
            params: self.action.params(),
            sli: self.sli.to_string(),
            q: self.quantile,
            filters: filters_object(&self.filters),
            value: self.value,
            threshold: self.threshold,
            windows: self.windows,
            dry_run: self.dry_run,
            reason: self.kind.reason().map(str::to_string),
            detail: self.detail.clone(),
            webhook: None,
        }
    }
}

fn filters_object(filters: &[(String, String)]) -> Value {
    Value::Object(
        filters
            .iter()
            .map(|(d, v)| (d.clone(), Value::String(v.clone())))
            .collect(),
    )
}

/// One line of `audit.jsonl`. Unknown fields are tolerated on reading (older / newer writers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub ts: String,
    pub ts_ns: i64,
    pub policy: String,
    /// `fire`, `suppressed`, `rollback`, `dry_run`, `recovered`.
    pub decision: String,
    pub action: String,
    #[serde(default)]
    pub params: Value,
    pub sli: String,
    #[serde(default)]
    pub q: Option<f64>,
    #[serde(default)]
    pub filters: Value,
    pub value: f64,
    pub threshold: f64,
    /// Consecutive windows that led to the decision.
    pub windows: u32,
    pub dry_run: bool,
    /// `cooldown`, `hourly_cap`, `already_active`, `would_fire`, `would_roll_back`, … or null.
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub detail: Option<String>,
    /// What the webhook said; null when nothing was to be sent (dry-run, suppressed, recovered).
    #[serde(default)]
    pub webhook: Option<WebhookOutcome>,
}

/// The audit trail's record of one webhook POST.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookOutcome {
    /// `delivered` or `failed`.
    pub outcome: String,
    pub attempts: u32,
    #[serde(default)]
    pub status: Option<u16>,
    #[serde(default)]
    pub error: Option<String>,
}

impl From<&Delivery> for WebhookOutcome {
    fn from(delivery: &Delivery) -> Self {
        match delivery {
            Delivery::Delivered { attempts, status } => WebhookOutcome {
                outcome: "delivered".into(),
                attempts: *attempts,
                status: Some(*status),
                error: None,
            },
            Delivery::Failed { attempts, error } => WebhookOutcome {
                outcome: "failed".into(),
                attempts: *attempts,
                status: None,
                error: Some(error.clone()),
            },
        }
    }
}

/// One policy's memory between windows.
#[derive(Debug, Clone)]
struct PolicyState {
    policy: Policy,
    breach_windows: u32,
    good_windows: u32,
    /// When the action in effect fired (really, or as a dry run); `None`: nothing in effect.
    active_since_ns: Option<i64>,
    last_fire_ns: Option<i64>,
    /// Fire times of the trailing hour, oldest first.
    recent_fires_ns: VecDeque<i64>,
    last_value: Option<f64>,
    last_eval_ns: Option<i64>,
    windows_evaluated: u64,
    no_data_windows: u64,
}

impl PolicyState {
    fn new(policy: Policy) -> Self {
        PolicyState {
            policy,
            breach_windows: 0,
            good_windows: 0,
            active_since_ns: None,
            last_fire_ns: None,
            recent_fires_ns: VecDeque::new(),
            last_value: None,
            last_eval_ns: None,
            windows_evaluated: 0,
            no_data_windows: 0,
        }
    }

    fn prune_fires(&mut self, now_ns: i64) {
        while self
            .recent_fires_ns
            .front()
            .is_some_and(|t| now_ns - t >= HOUR_NS)
        {
            self.recent_fires_ns.pop_front();
        }
    }

    fn record_fire(&mut self, now_ns: i64) {
        self.last_fire_ns = Some(now_ns);
        self.recent_fires_ns.push_back(now_ns);
        self.active_since_ns = Some(now_ns);
    }

    fn phase(&self) -> &'static str {
        match (self.active_since_ns.is_some(), self.breach_windows > 0) {
            (true, true) => "active_breaching",
            (true, false) => "active_recovering",
            (false, true) => "breaching",
            (false, false) => "idle",
        }
    }
}

/// The policies' state machine. Pure: the caller supplies the time and the measured values.
#[derive(Debug, Clone)]
pub struct ActionEngine {
    states: Vec<PolicyState>,
    dry_run: bool,
}

fn human_duration(ns: i64) -> String {
    let s = ns.max(0) / 1_000_000_000;
    if s >= 3600 && s % 3600 == 0 {
        format!("{}h", s / 3600)
    } else if s >= 60 && s % 60 == 0 {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

impl ActionEngine {
    pub fn new(policies: Vec<Policy>, dry_run: bool) -> ActionEngine {
        ActionEngine {
            states: policies.into_iter().map(PolicyState::new).collect(),
            dry_run,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    pub fn dry_run(&self) -> bool {
        self.dry_run
    }

    pub fn policies(&self) -> impl Iterator<Item = &Policy> {
        self.states.iter().map(|s| &s.policy)
    }

    /// Whether `policy`'s action is in effect (fired, not yet rolled back or recovered).
    pub fn is_active(&self, policy: &str) -> bool {
        self.states
            .iter()
            .any(|s| s.policy.name == policy && s.active_since_ns.is_some())
    }

    /// Feeds one window of `policy`: `value` is the SLI over the window, `None` when it held no
    /// data. Returns the decision the window caused, if any. An unknown policy is ignored.
    pub fn observe(&mut self, now_ns: i64, policy: &str, value: Option<f64>) -> Option<Decision> {
        let dry_run = self.dry_run;
        let state = self.states.iter_mut().find(|s| s.policy.name == policy)?;
        state.last_eval_ns = Some(now_ns);
        state.windows_evaluated += 1;
        let value = value.filter(|v| v.is_finite());
        state.last_value = value;
        let Some(value) = value else {
            // No data is neither a breach nor a recovery; it interrupts both streaks.
            state.no_data_windows += 1;
            state.breach_windows = 0;
            state.good_windows = 0;
            return None;
        };
        // the policy's settings, apart from the state they govern (the clone is small)
        let p = state.policy.clone();
        let (kind, windows, detail) = if value > p.threshold {
            state.breach_windows += 1;
            state.good_windows = 0;
            if state.breach_windows < p.consecutive {
                return None;
            }
            state.prune_fires(now_ns);
            let since_last = state.last_fire_ns.map(|t| now_ns - t);
            let (kind, detail) = if let Some(since) = state.active_since_ns {
                (
                    DecisionKind::Suppressed(SuppressReason::AlreadyActive),
                    Some(format!(
                        "in effect since {}; waiting for {} good windows",
                        format_rfc3339(since),
                        p.recovery_windows
                    )),
                )
            } else if let Some(since) = since_last.filter(|s| *s < p.cooldown_ns) {
                (
                    DecisionKind::Suppressed(SuppressReason::Cooldown),
                    Some(format!(
                        "last fired {} ago; cooldown {}",
                        human_duration(since),
                        human_duration(p.cooldown_ns)
                    )),
                )
            } else if state.recent_fires_ns.len() >= p.max_per_hour as usize {
                (
                    DecisionKind::Suppressed(SuppressReason::HourlyCap),
                    Some(format!(
                        "{} fires in the last hour; max_per_hour {}",
                        state.recent_fires_ns.len(),
                        p.max_per_hour
                    )),
                )
            } else {
                state.record_fire(now_ns);
                let kind = if dry_run {
                    DecisionKind::WouldFire
                } else {
                    DecisionKind::Fire
                };
                (kind, None)
            };
            (kind, state.breach_windows, detail)
        } else {
            state.good_windows += 1;
            state.breach_windows = 0;
            if state.active_since_ns.is_none() || state.good_windows < p.recovery_windows {
                return None;
            }
            state.active_since_ns = None;
            let kind = if !p.rollback_on_recovery {
                DecisionKind::Recovered
            } else if dry_run {
                DecisionKind::WouldRollBack
            } else {
                DecisionKind::Rollback
            };
            (kind, state.good_windows, None)
        };
        Some(Decision {
            at_ns: now_ns,
            policy: p.name,
            kind,
            action: p.action,
            sli: p.sli.name(),
            quantile: p.quantile,
            filters: p.filters,
            value,
            threshold: p.threshold,
            windows,
            window_ns: p.window_ns,
            dry_run,
            detail,
        })
    }

    /// Rebuilds cooldowns, hourly caps and actions in effect from an earlier audit trail, so a
    /// restart neither re-fires inside a cooldown nor forgets an action awaiting rollback. Only
    /// entries of the current mode count: a dry-run "would fire" did not change the fleet.
    /// Streaks start from zero.
    pub fn restore(&mut self, entries: &[AuditEntry], now_ns: i64) {
        for entry in entries {
            if entry.dry_run != self.dry_run {
                continue;
            }
            let Some(state) = self
                .states
                .iter_mut()
                .find(|s| s.policy.name == entry.policy)
            else {
                continue;
            };
            let reason = entry.reason.as_deref();
            match (entry.decision.as_str(), reason) {
                ("fire", _) | ("dry_run", Some("would_fire")) => state.record_fire(entry.ts_ns),
                ("rollback", _) | ("recovered", _) | ("dry_run", Some("would_roll_back")) => {
                    state.active_since_ns = None
                }
                _ => {}
            }
        }
        for state in &mut self.states {
            state.prune_fires(now_ns);
        }
    }

    /// The policies and their state, for `GET /api/v1/actions`.
    pub fn state_json(&self, now_ns: i64) -> Vec<Value> {
        self.states
            .iter()
            .map(|s| {
                let p = &s.policy;
                let fires_last_hour = s
                    .recent_fires_ns
                    .iter()
                    .filter(|t| now_ns - **t < HOUR_NS)
                    .count();
                json!({
                    "name": p.name,
                    "sli": p.sli.name(),
                    "q": p.quantile,
                    "filters": p.filters_json(),
                    "threshold": p.threshold,
                    "window_s": p.window_ns / 1_000_000_000,
                    "consecutive": p.consecutive,
                    "action": p.action.name(),
                    "params": p.action.params(),
                    "cooldown_s": p.cooldown_ns / 1_000_000_000,
                    "max_per_hour": p.max_per_hour,
                    "rollback_on_recovery": p.rollback_on_recovery,
                    "recovery_windows": p.recovery_windows,
                    "state": s.phase(),
                    "active": s.active_since_ns.is_some(),
                    "active_since": s.active_since_ns.map(format_rfc3339),
                    "breach_windows": s.breach_windows,
                    "good_windows": s.good_windows,
                    "last_value": s.last_value,
                    "last_evaluated": s.last_eval_ns.map(format_rfc3339),
                    "last_fire": s.last_fire_ns.map(format_rfc3339),
                    "cooldown_until": s.last_fire_ns
                        .map(|t| t + p.cooldown_ns)
                        .filter(|t| *t > now_ns)
                        .map(format_rfc3339),
                    "fires_last_hour": fires_last_hour,
                    "windows_evaluated": s.windows_evaluated,
                    "no_data_windows": s.no_data_windows,
                })
            })
            .collect()
    }
}

/// Where the audit trail of a store lives.
pub fn audit_path(data_dir: &Path) -> PathBuf {
    data_dir.join("actions").join("audit.jsonl")
}

/// An audit trail as read back: the entries, and the lines that did not parse.
#[derive(Debug, Default)]
pub struct AuditRead {
    pub entries: Vec<AuditEntry>,
    /// `(1-based line number, why)` of every line that is not an entry.
    pub corrupt: Vec<(usize, String)>,
}

/// Reads an audit trail; `Ok(None)` when there is none. A corrupt line (a torn write, an edit)
/// is reported, not fatal.
pub fn read_audit(path: &Path) -> std::io::Result<Option<AuditRead>> {
    let text = match std::fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut read = AuditRead::default();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<AuditEntry>(line) {
            Ok(entry) => read.entries.push(entry),
            Err(e) => read.corrupt.push((i + 1, e.to_string())),
        }
    }
    Ok(Some(read))
}

#[derive(Debug, thiserror::Error)]
pub enum ActionsError {
    #[error("audit trail {path}: {source}")]
    Audit {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The append-only audit file: one JSON object per line, fsynced after each.
#[derive(Debug)]
struct AuditLog {
    path: PathBuf,
    file: Mutex<File>,
}

impl AuditLog {
    fn open(path: &Path) -> std::io::Result<AuditLog> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(path)?;
        // a torn last line (crash mid-write) must not swallow the next entry
        let len = file.metadata()?.len();
        if len > 0 {
            file.seek(SeekFrom::Start(len - 1))?;
            let mut last = [0u8; 1];
            file.read_exact(&mut last)?;
            if last[0] != b'\n' {
                file.write_all(b"\n")?;
            }
        }
        Ok(AuditLog {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        })
    }

    fn append(&self, entry: &AuditEntry) -> std::io::Result<()> {
        let mut line = serde_json::to_string(entry).map_err(std::io::Error::other)?;
        line.push('\n');
        let mut file = self.file.lock();
        file.write_all(line.as_bytes())?;
        file.sync_data()
    }
}

/// What `serve` needs to run the policies.
#[derive(Debug, Clone)]
pub struct ActionsSettings {
    pub policies: Vec<Policy>,
    pub dry_run: bool,
    /// Required to send anything; `None` in dry-run.
    pub webhook: Option<WebhookSettings>,
    /// `<data_dir>/actions/audit.jsonl`, see [`audit_path`].
    pub audit_path: PathBuf,
    pub eval_interval: Duration,
}

#[derive(Debug, Default)]
struct RunnerStats {
    recent: VecDeque<AuditEntry>,
    /// `(policy, decision)` → count, for `/metrics`.
    decisions: BTreeMap<(String, &'static str), u64>,
    webhook_delivered: u64,
    webhook_failed: u64,
    audit_failed: u64,
    evaluation_errors: u64,
}

/// The engine with its side effects: measuring, sending, auditing.
#[derive(Debug)]
pub struct ActionRunner {
    engine: Mutex<ActionEngine>,
    webhook: Option<WebhookSettings>,
    audit: AuditLog,
    eval_interval: Duration,
    stats: Mutex<RunnerStats>,
}

impl ActionRunner {
    /// Opens (creating) the audit trail and restores the state an earlier run left in it.
    pub fn open(settings: ActionsSettings, now_ns: i64) -> Result<ActionRunner, ActionsError> {
        let audit_error = |source| ActionsError::Audit {
            path: settings.audit_path.clone(),
            source,
        };
        let previous = read_audit(&settings.audit_path).map_err(audit_error)?;
        let audit = AuditLog::open(&settings.audit_path).map_err(audit_error)?;
        let mut engine = ActionEngine::new(settings.policies, settings.dry_run);
        let mut stats = RunnerStats::default();
        if let Some(previous) = previous {
            for (line, why) in &previous.corrupt {
                tracing::warn!(line = *line, why = %why, path = %settings.audit_path.display(), "skipping a corrupt audit line");
            }
            engine.restore(&previous.entries, now_ns);
            let skip = previous.entries.len().saturating_sub(RECENT_ENTRIES);
            stats.recent = previous.entries.into_iter().skip(skip).collect();
        }
        Ok(ActionRunner {
            engine: Mutex::new(engine),
            webhook: settings.webhook,
            audit,
            eval_interval: settings.eval_interval,
            stats: Mutex::new(stats),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.engine.lock().is_empty()
    }

    pub fn eval_interval(&self) -> Duration {
        self.eval_interval
    }

    pub fn audit_path(&self) -> &Path {
        &self.audit.path
    }

    /// Measures every policy's SLI over its trailing window at `now_ns` and acts on the
    /// decisions. Blocking (rollup reads, webhook, fsync): call from a blocking thread.
    pub fn evaluate(&self, store: &dyn StorageBackend, now_ns: i64) -> Vec<AuditEntry> {
        let policies: Vec<Policy> = self.engine.lock().policies().cloned().collect();
        let mut entries = Vec::new();
        for policy in &policies {
            let value = match measure(store, policy, now_ns) {
                Ok(value) => value,
                Err(err) => {
                    // an unreadable window is no evidence either way
                    tracing::warn!(policy = %policy.name, %err, "action policy evaluation failed");
                    self.stats.lock().evaluation_errors += 1;
                    None
                }
            };
            entries.extend(self.observe(now_ns, &policy.name, value));
        }
        entries
    }

    /// Feeds one window to the engine and carries out its decision: POSTs fires and rollbacks
    /// (never in dry-run), appends the decision with the webhook's outcome to the audit trail.
    /// A failing webhook or audit write is recorded and logged, never raised. Blocking.
    pub fn observe(&self, now_ns: i64, policy: &str, value: Option<f64>) -> Option<AuditEntry> {
        // the engine lock is not held while sending: the API keeps answering
        let decision = self.engine.lock().observe(now_ns, policy, value)?;
        let mut entry = decision.audit_entry();
        if let (Some(payload), Some(webhook)) = (decision.payload(), &self.webhook)
            && !decision.dry_run
        {
            let delivery = webhook.post_json(&webhook.agent(), &payload.to_string(), "action");
            entry.webhook = Some(WebhookOutcome::from(&delivery));
        }
        match &entry.webhook {
            Some(w) if w.outcome == "failed" => tracing::error!(
                policy,
                decision = entry.decision.as_str(),
                error = w.error.as_deref().unwrap_or(""),
                "action webhook failed"
            ),
            _ => tracing::warn!(
                policy,
                decision = entry.decision.as_str(),
                reason = entry.reason.as_deref().unwrap_or(""),
                action = entry.action.as_str(),
                value = entry.value,
                "action decision"
            ),
        }
        let audited = self.audit.append(&entry);
        let mut stats = self.stats.lock();
        if let Err(err) = audited {
            stats.audit_failed += 1;
            tracing::error!(%err, path = %self.audit.path.display(), "cannot append to the action audit trail");
        }
        match entry.webhook.as_ref().map(|w| w.outcome.as_str()) {
            Some("delivered") => stats.webhook_delivered += 1,
            Some(_) => stats.webhook_failed += 1,
            None => {}
        }
        *stats
            .decisions
            .entry((policy.to_string(), decision.kind.name()))
            .or_default() += 1;
        stats.recent.push_back(entry.clone());
        while stats.recent.len() > RECENT_ENTRIES {
            stats.recent.pop_front();
        }
        Some(entry)
    }

    /// `GET /api/v1/actions`: the policies' state and the recent audit entries (oldest first).
    pub fn state_json(&self, now_ns: i64) -> Value {
        let (dry_run, policies) = {
            let engine = self.engine.lock();
            (engine.dry_run(), engine.state_json(now_ns))
        };
        let stats = self.stats.lock();
        json!({
            "dry_run": dry_run,
            "eval_interval_s": self.eval_interval.as_secs_f64(),
            "audit_path": self.audit.path.display().to_string(),
            "policies": policies,
            "recent": stats.recent.iter().collect::<Vec<_>>(),
            "webhook_delivered": stats.webhook_delivered,
            "webhook_failed": stats.webhook_failed,
            "audit_failed": stats.audit_failed,
            "evaluation_errors": stats.evaluation_errors,
        })
    }

    /// Prometheus text for `/metrics`. Labels: `policy` (configured, few), `decision` (five).
    pub fn render_metrics(&self) -> String {
        let active: Vec<(String, bool)> = {
            let engine = self.engine.lock();
            engine
                .policies()
                .map(|p| (p.name.clone(), engine.is_active(&p.name)))
                .collect()
        };
        let stats = self.stats.lock();
        let mut out = String::new();
        if active.is_empty() {
            return out;
        }
        out.push_str("# HELP infersight_action_decisions_total Decisions of automatic-action policies (fire, suppressed, rollback, dry_run, recovered).\n# TYPE infersight_action_decisions_total counter\n");
        for ((policy, decision), n) in &stats.decisions {
            let _ = writeln!(
                out,
                "infersight_action_decisions_total{{policy=\"{}\",decision=\"{decision}\"}} {n}",
                escape(policy)
            );
        }
        out.push_str("# HELP infersight_action_active Whether a policy's action is in effect (fired, not rolled back).\n# TYPE infersight_action_active gauge\n");
        for (policy, is_active) in &active {
            let _ = writeln!(
                out,
                "infersight_action_active{{policy=\"{}\"}} {}",
                escape(policy),
                u8::from(*is_active)
            );
        }
        out.push_str("# HELP infersight_action_webhook_total Action webhook POSTs by outcome.\n# TYPE infersight_action_webhook_total counter\n");
        let _ = writeln!(
            out,
            "infersight_action_webhook_total{{outcome=\"delivered\"}} {}",
            stats.webhook_delivered
        );
        let _ = writeln!(
            out,
            "infersight_action_webhook_total{{outcome=\"failed\"}} {}",
            stats.webhook_failed
        );
        let _ = writeln!(
            out,
            "# HELP infersight_action_audit_failed_total Audit entries that could not be written.\n# TYPE infersight_action_audit_failed_total counter\ninfersight_action_audit_failed_total {}",
            stats.audit_failed
        );
        out
    }
}

/// The policy's SLI over `[now - window, now)` from the rollups (the SLO path); `None` when the
/// window holds fewer than `min_requests` requests or the value is undefined.
pub fn measure(
    store: &dyn StorageBackend,
    policy: &Policy,
    now_ns: i64,
) -> Result<Option<f64>, infersight_query::QueryError> {
    let request = SliRequest {
        sli: policy.sli.name().to_string(),
        quantiles: policy.quantile.into_iter().collect(),
        by: Vec::new(),
        filters: policy.filters.clone(),
        range: TimeRange {
            since_ns: Some(now_ns - policy.window_ns),
            until_ns: Some(now_ns),
        },
        step: None,
    };
    let answer = answer_sli(store, &request)?;
    Ok(answer
        .series
        .first()
        .and_then(|s| s.points.first())
        .filter(|p| p.requests >= policy.min_requests.max(1))
        .and_then(|p| p.values.first().copied().flatten()))
}

/// Evaluates the policies every `eval_interval` until `shutdown` resolves.
pub async fn run_action_loop(
    runner: Arc<ActionRunner>,
    store: Arc<dyn StorageBackend>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    if runner.is_empty() {
        return;
    }
    let mut ticker = tokio::time::interval(runner.eval_interval());
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = ticker.tick() => {}
        }
        let runner = Arc::clone(&runner);
        let store = Arc::clone(&store);
        let result = tokio::task::spawn_blocking(move || {
            runner.evaluate(store.as_ref(), infersight_model::time::now_ns());
        })
        .await;
        if let Err(err) = result {
            tracing::error!(%err, "action evaluation task failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infersight_rollup::LatencySli;
    use std::io::Write;
    use std::sync::mpsc;

    const T0: i64 = 1_764_374_400_000_000_000;
    const SEC: i64 = 1_000_000_000;

    fn ttft_policy() -> Policy {
        Policy {
            consecutive: 3,
            cooldown_ns: 10 * MINUTE_NS,
            max_per_hour: 3,
            recovery_windows: 2,
            window_ns: MINUTE_NS,
            ..Policy::new(
                "ttft-guard",
                Sli::Latency(LatencySli::Ttft),
                500.0,
                ActionKind::DowngradeModel {
                    fallback_version: "v1".into(),
                },
            )
        }
    }

    /// Feeds `values` one window per 30 s from `start`, returning the decisions with their
    /// window index.
    fn feed(
        engine: &mut ActionEngine,
        start: i64,
        values: &[Option<f64>],
    ) -> Vec<(usize, DecisionKind)> {
        values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| {
                engine
                    .observe(start + i as i64 * 30 * SEC, "ttft-guard", *v)
                    .map(|d| (i, d.kind))
            })
            .collect()
    }

    const BAD: Option<f64> = Some(900.0);
    const GOOD: Option<f64> = Some(100.0);

    #[test]
    fn a_breach_of_n_windows_fires_once_and_continued_breach_is_suppressed() {
        let mut engine = ActionEngine::new(vec![ttft_policy()], false);
        let decisions = feed(&mut engine, T0, &[BAD, BAD, GOOD, BAD, BAD, BAD, BAD, BAD]);
        // the good window resets the streak: the fire needs windows 3, 4, 5
        assert_eq!(
            decisions,
            vec![
                (5, DecisionKind::Fire),
                (6, DecisionKind::Suppressed(SuppressReason::AlreadyActive)),
                (7, DecisionKind::Suppressed(SuppressReason::AlreadyActive)),
            ]
        );
        assert!(engine.is_active("ttft-guard"));
        let suppressed = engine
            .observe(T0 + 10 * 30 * SEC, "ttft-guard", BAD)
            .unwrap();
        assert_eq!(suppressed.windows, 6);
        assert_eq!(suppressed.payload(), None, "a suppression sends nothing");
    }

    #[test]
    fn cooldown_suppresses_a_new_episode_then_fires_again_after_it() {
        let mut engine = ActionEngine::new(vec![ttft_policy()], false);
        // fire at window 2 (t = 60 s); recover (2 good windows) → rollback at window 4
        let decisions = feed(&mut engine, T0, &[BAD, BAD, BAD, GOOD, GOOD]);
        assert_eq!(
            decisions,
            vec![(2, DecisionKind::Fire), (4, DecisionKind::Rollback)]
        );
        assert!(!engine.is_active("ttft-guard"));
        // a new breach 3 min after the fire: within the 10 min cooldown, every window suppressed
        let start = T0 + 5 * 30 * SEC;
        let within: Vec<Option<f64>> = vec![BAD; 14]; // windows at 150 s .. 540 s
        let decisions = feed(&mut engine, start, &within);
        assert_eq!(decisions.len(), 12);
        assert!(
            decisions
                .iter()
                .all(|(_, k)| *k == DecisionKind::Suppressed(SuppressReason::Cooldown)),
            "{decisions:?}"
        );
        // the breach persists past the cooldown (fire at 60 s + 600 s): one fire, then active
        let after = feed(&mut engine, T0 + 660 * SEC, &[BAD, BAD]);
        assert_eq!(
            after,
            vec![
                (0, DecisionKind::Fire),
                (1, DecisionKind::Suppressed(SuppressReason::AlreadyActive))
            ]
        );
    }

    #[test]
    fn the_hourly_cap_limits_fires_across_episodes() {
        let policy = Policy {
            consecutive: 1,
            recovery_windows: 1,
            cooldown_ns: MINUTE_NS,
            max_per_hour: 2,
            ..ttft_policy()
        };
        let mut engine = ActionEngine::new(vec![policy], false);
        let mut kinds = Vec::new();
        // alternate bad / good every 5 minutes: each bad window is a new episode past cooldown
        for i in 0..6 {
            let t = T0 + i * 5 * MINUTE_NS;
            let v = if i % 2 == 0 { BAD } else { GOOD };
            kinds.extend(engine.observe(t, "ttft-guard", v).map(|d| d.kind));
        }
        assert_eq!(
            kinds,
            vec![
                DecisionKind::Fire,
                DecisionKind::Rollback,
                DecisionKind::Fire,
                DecisionKind::Rollback,
                DecisionKind::Suppressed(SuppressReason::HourlyCap),
            ]
        );
        // an hour after the first fire the cap has room again
        let d = engine
            .observe(T0 + 61 * MINUTE_NS, "ttft-guard", BAD)
            .unwrap();
        assert_eq!(d.kind, DecisionKind::Fire);
    }

    #[test]
    fn recovery_needs_consecutive_good_windows_and_rolls_back_once() {
        let mut engine = ActionEngine::new(vec![ttft_policy()], false);
        let decisions = feed(
            &mut engine,
            T0,
            &[BAD, BAD, BAD, GOOD, BAD, GOOD, GOOD, GOOD, GOOD],
        );
        assert_eq!(
            decisions,
            vec![(2, DecisionKind::Fire), (6, DecisionKind::Rollback)]
        );
        // rollback_on_recovery = false: the episode ends without sending anything
        let policy = Policy {
            rollback_on_recovery: false,
            ..ttft_policy()
        };
        let mut engine = ActionEngine::new(vec![policy], false);
        let decisions = feed(&mut engine, T0, &[BAD, BAD, BAD, GOOD, GOOD]);
        assert_eq!(
            decisions,
            vec![(2, DecisionKind::Fire), (4, DecisionKind::Recovered)]
        );
        let recovered = engine.observe(T0, "ttft-guard", GOOD);
        assert_eq!(recovered, None);
    }

    #[test]
    fn windows_without_data_neither_breach_nor_recover() {
        let mut engine = ActionEngine::new(vec![ttft_policy()], false);
        // no data between breaches interrupts the streak: never three in a row
        let decisions = feed(
            &mut engine,
            T0,
            &[
                BAD,
                BAD,
                None,
                BAD,
                BAD,
                None,
                None,
                BAD,
                Some(f64::NAN),
                BAD,
            ],
        );
        assert!(decisions.is_empty(), "{decisions:?}");
        // an active action is not rolled back by silence, only by good windows in a row
        let decisions = feed(
            &mut engine,
            T0 + 10 * MINUTE_NS,
            &[
                None, BAD, BAD, BAD, GOOD, None, GOOD, None, None, GOOD, GOOD,
            ],
        );
        assert_eq!(
            decisions,
            vec![(3, DecisionKind::Fire), (10, DecisionKind::Rollback)]
        );
    }

    #[test]
    fn dry_run_decides_the_same_but_marks_it() {
        let mut engine = ActionEngine::new(vec![ttft_policy()], true);
        let decisions = feed(&mut engine, T0, &[BAD, BAD, BAD, BAD, GOOD, GOOD]);
        assert_eq!(
            decisions,
            vec![
                (2, DecisionKind::WouldFire),
                (3, DecisionKind::Suppressed(SuppressReason::AlreadyActive)),
                (5, DecisionKind::WouldRollBack),
            ]
        );
        let d = engine.observe(T0 + 4 * MINUTE_NS, "ttft-guard", BAD);
        assert_eq!(d, None, "the streak starts again");
        let mut engine = ActionEngine::new(vec![ttft_policy()], true);
        let d = feed(&mut engine, T0, &[BAD, BAD, BAD]);
        assert_eq!(d.len(), 1);
        let decision = engine.observe(T0, "ttft-guard", GOOD);
        assert!(decision.is_none());
        let mut engine = ActionEngine::new(vec![ttft_policy()], true);
        for i in 0..2 {
            engine.observe(T0 + i, "ttft-guard", BAD);
        }
        let d = engine.observe(T0 + 2, "ttft-guard", BAD).unwrap();
        assert_eq!(d.audit_entry().decision, "dry_run");
        assert_eq!(d.audit_entry().reason.as_deref(), Some("would_fire"));
        assert!(d.audit_entry().dry_run);
        assert_eq!(d.payload(), None, "dry-run has nothing to send");
    }

    #[test]
    fn restore_keeps_cooldowns_and_active_actions_across_restarts() {
        let mut engine = ActionEngine::new(vec![ttft_policy()], false);
        let fired = feed(&mut engine, T0, &[BAD, BAD, BAD]);
        assert_eq!(fired, vec![(2, DecisionKind::Fire)]);
        let entry = engine
            .observe(T0 + 90 * SEC, "ttft-guard", BAD)
            .unwrap()
            .audit_entry();
        let mut fire_entry = entry.clone();
        fire_entry.decision = "fire".into();
        fire_entry.reason = None;
        fire_entry.ts_ns = T0 + 60 * SEC;
        // a restarted engine remembers the action in effect and the cooldown
        let mut restarted = ActionEngine::new(vec![ttft_policy()], false);
        restarted.restore(&[fire_entry.clone()], T0 + 2 * MINUTE_NS);
        assert!(restarted.is_active("ttft-guard"));
        let mut rolled_back = fire_entry.clone();
        rolled_back.decision = "rollback".into();
        rolled_back.ts_ns = T0 + 3 * MINUTE_NS;
        let mut restarted = ActionEngine::new(vec![ttft_policy()], false);
        restarted.restore(&[fire_entry.clone(), rolled_back], T0 + 4 * MINUTE_NS);
        assert!(!restarted.is_active("ttft-guard"));
        let d = feed(&mut restarted, T0 + 4 * MINUTE_NS, &[BAD, BAD, BAD]);
        assert_eq!(
            d,
            vec![(2, DecisionKind::Suppressed(SuppressReason::Cooldown))]
        );
        // dry-run entries do not restrain a live engine
        let mut dry = fire_entry;
        dry.decision = "dry_run".into();
        dry.reason = Some("would_fire".into());
        dry.dry_run = true;
        let mut live = ActionEngine::new(vec![ttft_policy()], false);
        live.restore(&[dry], T0 + 2 * MINUTE_NS);
        assert!(!live.is_active("ttft-guard"));
    }

    fn policy_config(value: Value) -> ActionsConfig {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn config_defaults_and_every_error_at_once() {
        let defaults = ActionsConfig::default();
        assert!(defaults.dry_run, "dry-run is the default");
        assert_eq!(defaults.eval_interval, "30s");
        assert!(defaults.validate(&[], false).is_empty());
        let unknown = serde_json::from_value::<ActionsConfig>(
            json!({ "policies": [{ "name": "x", "treshold": 1 }] }),
        );
        assert!(unknown.is_err(), "unknown policy keys are rejected");
        let dims = vec!["model".to_string(), "worker".to_string()];
        let good = policy_config(json!({
            "dry_run": true,
            "policies": [{
                "name": "ttft", "sli": "ttft", "q": 0.99, "threshold": 800.0, "window": "1m",
                "action": "shrink_batch", "max_batch": 16, "filters": ["model=llama"],
            }],
        }));
        let policies = good.policies(&dims).unwrap();
        assert_eq!(policies[0].quantile, Some(0.99));
        assert_eq!(policies[0].consecutive, 3);
        assert_eq!(policies[0].cooldown_ns, 10 * MINUTE_NS);
        assert_eq!(
            policies[0].filters,
            vec![("model".to_string(), "llama".to_string())]
        );
        assert!(policies[0].rollback_on_recovery);
        assert_eq!(
            policies[0].action,
            ActionKind::ShrinkBatch { max_batch: 16 }
        );
        assert!(good.validate(&dims, true).is_empty());
        assert!(good.webhook().is_none(), "dry-run has no webhook");
        let bad = policy_config(json!({
            "dry_run": false, "webhook_url": "https://x", "eval_interval": "soon",
            "policies": [
                { "name": "a", "sli": "ttft", "threshold": 500.0, "action": "downgrade_model",
                  "pool": "spare" },
                { "name": "a", "sli": "error_rate", "q": 0.9, "threshold": 2.0,
                  "action": "route_fallback", "pool": "spare", "window": "10s", "consecutive": 0 },
                { "name": "c", "sli": "request_rate", "action": "reboot", "cooldown": "x",
                  "filters": ["colour=red"] },
            ],
        }));
        let errors = bad.validate(&dims, true);
        let joined = errors.join("\n");
        for needle in [
            "actions.eval_interval: `soon`",
            "actions.webhook_url: `https://x` must be an http:// URL",
            "actions.policies[0] (a).fallback_version: `downgrade_model` needs a non-empty fallback_version",
            "actions.policies[0] (a).pool: not used by `downgrade_model`",
            "actions.policies[1] (a).name: `a` is used twice",
            "actions.policies[1] (a).q: only latency slis",
            "actions.policies[1] (a).threshold: 2 must be a fraction",
            "actions.policies[1] (a).window: `10s` is shorter than 1m",
            "actions.policies[1] (a).consecutive: must be at least 1",
            "actions.policies[2] (c).sli: `request_rate` cannot drive an action",
            "actions.policies[2] (c).threshold: required",
            "actions.policies[2] (c).action: `reboot` is not one of",
            "actions.policies[2] (c).cooldown: `x`",
            "actions.policies[2] (c).filters: `colour=red`",
        ] {
            assert!(joined.contains(needle), "missing {needle:?} in\n{joined}");
        }
        let no_hook = policy_config(json!({
            "dry_run": false,
            "policies": [{ "name": "x", "sli": "e2e", "threshold": 1.0,
                           "action": "route_fallback", "pool": "p" }],
        }));
        let errors = no_hook.validate(&dims, false).join("\n");
        assert!(errors.contains("actions.webhook_url: required when dry_run = false"));
        assert!(errors.contains("set store.rollups = true"));
    }

    /// A webhook receiver answering `status`, with the URL the runner posts to.
    fn receiver(status: u16) -> (String, mpsc::Receiver<Value>) {
        let (addr, received) = infersight_testkit::webhook::webhook_receiver(status);
        (format!("http://{addr}/hook"), received)
    }

    fn runner(dir: &Path, dry_run: bool, url: Option<String>) -> ActionRunner {
        ActionRunner::open(
            ActionsSettings {
                policies: vec![ttft_policy()],
                dry_run,
                webhook: url.map(|url| WebhookSettings {
                    url,
                    timeout: Duration::from_secs(5),
                    attempts: 2,
                }),
                audit_path: audit_path(dir),
                eval_interval: Duration::from_secs(1),
            },
            T0,
        )
        .unwrap()
    }

    fn drive(runner: &ActionRunner, values: &[Option<f64>]) -> Vec<AuditEntry> {
        values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| runner.observe(T0 + i as i64 * 30 * SEC, "ttft-guard", *v))
            .collect()
    }

    #[test]
    fn a_webhook_receiver_sees_fire_and_rollback_and_the_audit_holds_every_decision() {
        let dir = tempfile::tempdir().unwrap();
        let (url, received) = receiver(200);
        let runner = runner(dir.path(), false, Some(url));
        let entries = drive(&runner, &[BAD, BAD, BAD, BAD, BAD, GOOD, GOOD, BAD]);
        let decisions: Vec<&str> = entries.iter().map(|e| e.decision.as_str()).collect();
        assert_eq!(
            decisions,
            ["fire", "suppressed", "suppressed", "rollback"],
            "{entries:?}"
        );
        let fire = received.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(fire["kind"], "fire");
        assert_eq!(fire["policy"], "ttft-guard");
        assert_eq!(fire["action"], "downgrade_model");
        assert_eq!(fire["params"]["fallback_version"], "v1");
        assert_eq!(fire["sli"], "ttft");
        assert_eq!(fire["value"], 900.0);
        assert_eq!(fire["threshold"], 500.0);
        assert_eq!(fire["consecutive_windows"], 3);
        assert_eq!(fire["ts"], format_rfc3339(T0 + 60 * SEC));
        let rollback = received.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(rollback["kind"], "rollback");
        assert_eq!(rollback["consecutive_windows"], 2);
        assert!(
            received.recv_timeout(Duration::from_millis(300)).is_err(),
            "suppressed decisions send nothing"
        );
        assert_eq!(entries[0].webhook.as_ref().unwrap().outcome, "delivered");
        assert_eq!(entries[1].webhook, None);
        assert_eq!(entries[1].reason.as_deref(), Some("already_active"));
        // the file holds exactly what was decided, in order, and reads back
        let read = read_audit(&audit_path(dir.path())).unwrap().unwrap();
        assert!(read.corrupt.is_empty());
        assert_eq!(read.entries, entries);
        let state = runner.state_json(T0 + 5 * MINUTE_NS);
        assert_eq!(state["recent"].as_array().unwrap().len(), 4);
        assert_eq!(state["policies"][0]["state"], "breaching");
        assert_eq!(state["webhook_delivered"], 2);
        assert!(runner.render_metrics().contains(
            "infersight_action_decisions_total{policy=\"ttft-guard\",decision=\"fire\"} 1"
        ));
    }

    #[test]
    fn dry_run_sends_nothing_but_audits_everything() {
        let dir = tempfile::tempdir().unwrap();
        let (url, received) = receiver(200);
        // even with a webhook configured, a dry-run runner never calls it
        let runner = runner(dir.path(), true, Some(url));
        let entries = drive(&runner, &[BAD, BAD, BAD, BAD, GOOD, GOOD]);
        let decisions: Vec<(&str, Option<&str>)> = entries
            .iter()
            .map(|e| (e.decision.as_str(), e.reason.as_deref()))
            .collect();
        assert_eq!(
            decisions,
            [
                ("dry_run", Some("would_fire")),
                ("suppressed", Some("already_active")),
                ("dry_run", Some("would_roll_back")),
            ]
        );
        assert!(entries.iter().all(|e| e.dry_run && e.webhook.is_none()));
        assert!(received.recv_timeout(Duration::from_millis(500)).is_err());
        let read = read_audit(&audit_path(dir.path())).unwrap().unwrap();
        assert_eq!(read.entries.len(), 3);
    }

    #[test]
    fn a_failing_webhook_is_audited_and_the_runner_carries_on() {
        let dir = tempfile::tempdir().unwrap();
        let (url, received) = receiver(500);
        let runner = runner(dir.path(), false, Some(url));
        let entries = drive(&runner, &[BAD, BAD, BAD]);
        let hook = entries[0].webhook.as_ref().unwrap();
        assert_eq!(hook.outcome, "failed");
        assert_eq!(hook.attempts, 2);
        assert!(hook.error.as_deref().unwrap().contains("500"), "{hook:?}");
        for _ in 0..2 {
            // the first attempt and one retry
            received.recv_timeout(Duration::from_secs(5)).unwrap();
        }
        // an unreachable webhook too
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hook", closed.local_addr().unwrap());
        drop(closed);
        let dir2 = tempfile::tempdir().unwrap();
        let runner = self::runner(dir2.path(), false, Some(url));
        let entries = drive(&runner, &[BAD, BAD, BAD]);
        let hook = entries[0].webhook.as_ref().unwrap();
        assert_eq!(hook.outcome, "failed");
        assert!(hook.error.as_deref().unwrap().contains("unreachable"));
        let read = read_audit(&audit_path(dir2.path())).unwrap().unwrap();
        assert_eq!(read.entries[0].webhook.as_ref().unwrap().outcome, "failed");
    }

    #[test]
    fn a_restarted_runner_restores_state_and_survives_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let (url, received) = receiver(200);
        {
            let runner = runner(dir.path(), false, Some(url.clone()));
            drive(&runner, &[BAD, BAD, BAD]);
        }
        assert_eq!(
            received.recv_timeout(Duration::from_secs(5)).unwrap()["kind"],
            "fire"
        );
        let path = audit_path(dir.path());
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b"{\"torn\": ").unwrap();
        drop(file);
        let runner = runner(dir.path(), false, Some(url));
        assert!(runner.engine.lock().is_active("ttft-guard"));
        // still breaching after the restart: the action is in effect, nothing is re-sent
        let entries = drive(&runner, &[BAD, BAD, BAD]);
        assert_eq!(entries[0].reason.as_deref(), Some("already_active"));
        assert!(received.recv_timeout(Duration::from_millis(300)).is_err());
        let read = read_audit(&path).unwrap().unwrap();
        assert_eq!(read.corrupt.len(), 1);
        assert_eq!(read.entries.len(), 2);
    }

    #[test]
    fn the_runner_measures_the_sli_from_the_store() {
        use infersight_model::{RequestRecord, Table, TableBatch};
        use infersight_store::{FsyncPolicy, Store, StoreOptions};
        let dir = tempfile::tempdir().unwrap();
        let mut options = StoreOptions::new(dir.path().join("store"));
        options.fsync = FsyncPolicy::Never;
        let store = Store::open(options).unwrap();
        let append = |from_s: i64, to_s: i64, ttft: f64| {
            let records: Vec<RequestRecord> = (from_s..to_s)
                .map(|s| RequestRecord {
                    ts: T0 + s * SEC,
                    ttft_ms: Some(ttft),
                    ..RequestRecord::default()
                })
                .collect();
            store
                .append(&[TableBatch {
                    table: Table::Requests,
                    batch: RequestRecord::to_batch(&records),
                }])
                .unwrap();
        };
        let policy = Policy {
            consecutive: 2,
            ..ttft_policy()
        };
        let runner = ActionRunner::open(
            ActionsSettings {
                policies: vec![policy.clone()],
                dry_run: true,
                webhook: None,
                audit_path: audit_path(dir.path()),
                eval_interval: Duration::from_secs(1),
            },
            T0,
        )
        .unwrap();
        // nothing stored yet: no data, no decision
        assert_eq!(measure(&store, &policy, T0).unwrap(), None);
        assert!(runner.evaluate(&store, T0).is_empty());
        append(0, 180, 100.0);
        assert_eq!(
            measure(&store, &policy, T0 + 120 * SEC)
                .unwrap()
                .map(f64::round),
            Some(100.0)
        );
        append(180, 300, 2000.0);
        assert!(runner.evaluate(&store, T0 + 300 * SEC).is_empty());
        let entries = runner.evaluate(&store, T0 + 330 * SEC);
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert_eq!(entries[0].decision, "dry_run");
        assert!(entries[0].value > 1900.0, "{:?}", entries[0]);
    }
}
