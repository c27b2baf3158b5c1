//! Tests of the three layers: the engine's rules on scripted windows, the config's validation,
//! and the runner against a real webhook receiver, a real audit file and a real store.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use infersight_model::time::format_rfc3339;
use infersight_rollup::{LatencySli, Sli};
use serde_json::{Value, json};

use super::config::MINUTE_NS;
use super::*;
use crate::webhook::WebhookSettings;

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
        "dry_run": false, "webhook_url": "ftp://x", "eval_interval": "soon",
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
        "actions.webhook_url: `ftp://x` must be an http:// or https:// URL",
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

#[test]
fn the_webhook_keys_stay_in_the_section_and_unknown_keys_are_still_rejected() {
    let config = policy_config(json!({
        "dry_run": false, "webhook_url": "http://hooks/a", "webhook_timeout": "2s",
        "webhook_attempts": 5,
    }));
    let webhook = config.webhook().unwrap();
    assert_eq!(webhook.url, "http://hooks/a");
    assert_eq!(webhook.timeout, Duration::from_secs(2));
    assert_eq!(webhook.attempts, 5);
    let written = serde_json::to_value(&config).unwrap();
    assert_eq!(written["webhook_timeout"], "2s", "{written}");
    let unknown = serde_json::from_value::<ActionsConfig>(json!({ "webhook_retries": 2 }));
    let error = unknown.unwrap_err().to_string();
    assert!(error.contains("unknown field `webhook_retries`"), "{error}");
    let bad = policy_config(json!({ "webhook_timeout": "0s", "webhook_attempts": 0 }));
    assert_eq!(
        bad.validate(&[], true),
        [
            "actions.webhook_timeout: `0s` is not a positive duration like 500ms, 30s, 15m, 2h",
            "actions.webhook_attempts: must be at least 1",
        ]
    );
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
                ca_certs: None,
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
    assert!(
        runner.render_metrics().contains(
            "infersight_action_decisions_total{policy=\"ttft-guard\",decision=\"fire\"} 1"
        )
    );
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
    use infersight_store::{FsyncPolicy, StorageBackend, Store, StoreOptions};
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
