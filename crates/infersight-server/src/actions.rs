//! Automatic actions, the end of the closed loop: policies evaluated over SLIs; a sustained breach
//! emits an action (downgrade model, shrink batch, route to fallback) to a webhook, with dry-run,
//! cooldown, an hourly cap, rollback on recovery, and an audit trail of every decision.

use serde::{Deserialize, Serialize};

/// The `[actions]` configuration section.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ActionsConfig {
    /// Decide and audit, send nothing (the default).
    pub dry_run: bool,
}
