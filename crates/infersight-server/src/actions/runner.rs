//! The runner, last of the three layers and the only one with side effects: it measures each
//! policy's SLI from the store's rollups, feeds the [`ActionEngine`], POSTs fires and rollbacks
//! to the webhook, appends every decision to the fsynced audit trail
//! (`<data_dir>/actions/audit.jsonl`) and keeps the counters `GET /api/v1/actions` and
//! `/metrics` show. [`run_action_loop`] drives it in `serve`.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use infersight_explore::{SliRequest, answer_sli};
use infersight_store::{StorageBackend, TimeRange};
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::config::Policy;
use super::engine::{ActionEngine, AuditEntry, WebhookOutcome};
use crate::alerts::escape;
use crate::webhook::{Delivery, WebhookSettings};

/// Audit entries `GET /api/v1/actions` shows (the file keeps them all).
const RECENT_ENTRIES: usize = 100;

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
    /// `pub(super)` for the tests, which look at the engine's state after a restart.
    pub(super) engine: Mutex<ActionEngine>,
    webhook: Option<WebhookSettings>,
    audit: AuditLog,
    eval_interval: Duration,
    stats: Mutex<RunnerStats>,
    /// Where actions taken are recorded on the open incidents (`serve` with incidents).
    incidents: Option<crate::timeline::IncidentRecorder>,
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
            incidents: None,
        })
    }

    /// Records every action taken on the incidents the watcher holds open (`serve`).
    pub fn with_incidents(mut self, recorder: crate::timeline::IncidentRecorder) -> ActionRunner {
        self.incidents = Some(recorder);
        self
    }

    /// The recent audit entries, oldest first (what `GET /api/v1/actions` shows).
    pub fn recent(&self) -> Vec<AuditEntry> {
        self.stats.lock().recent.iter().cloned().collect()
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
        if let Some(recorder) = &self.incidents {
            recorder.action_taken(&entry);
        }
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

/// Evaluates the policies every `eval_interval` until `shutdown` resolves (the loop of
/// [`crate::periodic::run_every`], shared with alerts).
pub async fn run_action_loop(
    runner: Arc<ActionRunner>,
    store: Arc<dyn StorageBackend>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    if runner.is_empty() {
        return;
    }
    let interval = runner.eval_interval();
    crate::periodic::run_every(interval, "action evaluation", shutdown, move || {
        runner.evaluate(store.as_ref(), infersight_model::time::now_ns());
    })
    .await;
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
