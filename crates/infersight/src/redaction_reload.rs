//! `serve` re-reads its redaction rules (`[stages.redact]`) on SIGHUP and when the configuration
//! file changes, and hands them to the running redact stage (`infersight_pipeline::RedactReload`):
//! every batch after that is redacted by the new rules, none half and half. Each reload, and each
//! refused one, is a line of the access audit (`surface: config`). Turning redaction on or off and
//! its hash secret take effect at a restart only (the parse stage and stored pseudonyms depend on
//! them); such an edit is refused and the running rules stay.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use infersight_pipeline::{RedactConfig, RedactReload, Redactor};
use infersight_query::AccessAudit;

use crate::args::Common;

/// How often the configuration file is looked at for a change.
const POLL: Duration = Duration::from_secs(5);

/// What the last look saw: the file's bytes (hash), the rules running, and why the last attempt
/// was refused (a SIGHUP right after the poll saw the same broken file is not audited twice).
struct Seen {
    file_hash: Option<String>,
    rules: RedactConfig,
    refused: Option<String>,
}

/// Starts the reloader; abort the task when `serve` stops.
pub fn spawn(
    common: Common,
    running: RedactConfig,
    reload: Arc<RedactReload>,
    audit: Arc<AccessAudit>,
) -> tokio::task::JoinHandle<()> {
    let seen = Mutex::new(Seen {
        file_hash: file_hash(&common),
        rules: running,
        refused: None,
    });
    // audited here, not by the reloader: a refusal seen again by SIGHUP is audited once
    infersight_server::periodic::spawn_reloader(
        "the redaction rules",
        POLL,
        std::future::pending(),
        None,
        move |forced| {
            let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
            let hash = file_hash(&common);
            if !forced && hash == seen.file_hash {
                return Ok(None);
            }
            let same_file = hash == seen.file_hash;
            seen.file_hash = hash;
            match next_rules(&common, &seen.rules) {
                Ok(None) => {
                    seen.refused = None;
                    Ok(None)
                }
                Ok(Some((rules, redactor))) => {
                    reload.replace(redactor);
                    let detail = describe(&rules);
                    seen.rules = rules;
                    seen.refused = None;
                    audit.record_change(format!("redaction rules reloaded: {detail}"), Ok(()));
                    Ok(Some(format!(" ({detail})")))
                }
                Err(reason) => {
                    // a SIGHUP right after the poll saw the same broken file: audited once
                    if !(same_file && seen.refused.as_ref() == Some(&reason)) {
                        audit.record_change(
                            format!("redaction rules not reloaded: {reason}"),
                            Err(infersight_model::ErrorKind::BadRequest),
                        );
                    }
                    seen.refused = Some(reason.clone());
                    Err(reason)
                }
            }
        },
    )
}

/// The configuration file's SHA-256, `None` without one (or when it cannot be read: the reload
/// then says why).
fn file_hash(common: &Common) -> Option<String> {
    let path = common.config.as_ref()?;
    std::fs::read(path)
        .ok()
        .map(|bytes| infersight_query::audit::sha256_hex(&bytes))
}

/// The new rules and their redactor, `None` when they did not change, or why they cannot run.
fn next_rules(
    common: &Common,
    running: &RedactConfig,
) -> Result<Option<(RedactConfig, Redactor)>, String> {
    let config = common.resolve().map_err(|e| e.to_string())?;
    let rules = config.stages.redact;
    if rules == *running {
        return Ok(None);
    }
    if rules.enabled != running.enabled || rules.secret_env != running.secret_env {
        return Err(
            "stages.redact.enabled and stages.redact.secret_env take effect at a restart".into(),
        );
    }
    let redactor = Redactor::new(&rules).map_err(|e| e.to_string())?;
    Ok(Some((rules, redactor)))
}

fn describe(rules: &RedactConfig) -> String {
    format!(
        "{} path rules, {} detectors, {} custom patterns",
        rules.rules.len(),
        rules.detectors.len(),
        rules.custom.len()
    )
}
