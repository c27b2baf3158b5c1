//! Automatic actions, the end of the closed loop: policies evaluated over SLIs; a sustained breach
//! emits an action (downgrade model, shrink batch, route to fallback) to a webhook, with dry-run,
//! cooldown, an hourly cap, rollback on recovery, and an audit trail of every decision.
//!
//! Three layers, in the order data flows through them, one file each:
//! - `config`: [`ActionsConfig`] / [`PolicyConfig`], the `[actions]` section as written;
//!   `validate` reports every problem at once, `policies` resolves it into [`Policy`] values.
//! - `engine`: [`ActionEngine`], a pure state machine with an injected clock. It is fed one
//!   observation per policy per evaluation (a *window*: the SLI over the trailing `window`, or
//!   `None` when the window held no data) and returns at most one [`Decision`]. No IO, no clock,
//!   so every rule below is unit-tested deterministically.
//! - `runner`: [`ActionRunner`], the side effects. It measures each policy's SLI from the store's
//!   rollups (the path SLO evaluation and `GET /api/v1/sli` use), feeds the engine, POSTs fires
//!   and rollbacks to the webhook (`crate::webhook`, the sender alerts use: timeout, retries), and
//!   appends every decision to `<data_dir>/actions/audit.jsonl` (fsynced). [`run_action_loop`]
//!   drives it in `serve`.
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

mod config;
mod engine;
mod runner;
#[cfg(test)]
mod tests;

pub use config::{ActionKind, ActionsConfig, Policy, PolicyConfig};
pub use engine::{
    ActionEngine, AuditEntry, Decision, DecisionKind, SuppressReason, WebhookOutcome,
};
pub use runner::{
    ActionRunner, ActionsError, ActionsSettings, AuditRead, audit_path, measure, read_audit,
    run_action_loop,
};
