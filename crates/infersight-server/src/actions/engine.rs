//! The pure policy engine, second of the three layers: one `PolicyState` per policy fed one
//! window at a time ([`ActionEngine::observe`]), deciding fire / suppress / rollback by the rules
//! in the module doc, and the [`Decision`] and [`AuditEntry`] that describe each decision. The
//! caller supplies the time and the measured values: no IO, no clock.

use std::collections::VecDeque;

use infersight_model::time::format_rfc3339;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::config::{ActionKind, Policy};

const HOUR_NS: i64 = 3_600_000_000_000;

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
                    "filters": filters_object(&p.filters),
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
