//! What an on-call person reads first about an incident: the symptom with units, one "do now"
//! line, the first check (a runbook step, with SQL the page can run), each cause with what kind
//! of cause it is and the workers where it shows, and why the causes are ranked as they are
//! when their explained shares say otherwise. The report opens with it and the incident page
//! (`GET /api/v1/incidents/{id}`'s `lead`) shows it on its first screen; numbers are written by
//! [`crate::format`].
//!
//! Decision rules (documented because people act on them):
//! - Do now: the engine's own suggestion for the top cause's subject (a rollback for a version
//!   regression, capacity for load), else the first suggestion, else the best runbook's first fix.
//! - Runbook: the first retrieved runbook covering a signal kind seen on the top cause (latency
//!   spikes aside) and none seen only on the other causes (it was retrieved for them), else the
//!   first covering a kind of the top cause, else the first runbook retrieved. Its "How to confirm" steps are listed;
//!   the first check is its first step with SQL (else its first step).
//! - SQL of a step: a fenced block, else the first inline code span that starts with `SELECT`
//!   or `WITH`; a placeholder `<key>` is filled from the top cause (`<worker>` also from its
//!   first implicated worker); a step whose SQL keeps a placeholder is shown without SQL.
//! - Kind of a cause: `load` when its evidence says load-driven queueing, else from the signals
//!   on its subject (`version regression`, `slow worker`, …), else `slice`.

use std::collections::BTreeMap;

use infersight_model::signal::{SignalKind, Subject};
use infersight_query::{QueryEngine, QueryError};
use infersight_rca::RcaReport;
use serde::{Deserialize, Serialize};

use crate::data::{CauseWorkers, cause_workers};
use crate::format;
use crate::knowledge::{HitKind, KnowledgeHit};

/// Causes the lead describes.
pub const MAX_CAUSES: usize = 3;
/// Confirm steps listed.
pub const MAX_CONFIRM_STEPS: usize = 5;

/// One "How to confirm" step of a runbook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfirmStep {
    /// The step's text (Markdown, its SQL block left out).
    pub text: String,
    /// The SQL to run, placeholders filled; `None` when the step has none to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sql: Option<String>,
    /// The runbook's id.
    pub source: String,
}

/// One cause as the lead shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CauseLine {
    pub rank: usize,
    /// `key=value & …`.
    pub slice: String,
    /// `load`, `version regression`, `slow worker`, …, `slice`.
    pub kind: String,
    /// The share of its measure's excess it explains, written (`93 %`).
    pub explained: String,
    /// Its first line of evidence.
    pub evidence: String,
    /// Where it shows: the workers of its slice whose latency rose most, written
    /// (`worker-03 +880 ms`), and how many served it.
    pub workers: Vec<String>,
    pub serving_workers: usize,
}

/// What the incident page and the report open with.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Lead {
    /// `TTFT p99 194 ms → 963 ms, ×4.95`; `None` when no SLI moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headline: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub do_now: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_check: Option<ConfirmStep>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub confirm: Vec<ConfirmStep>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<CauseLine>,
    /// Why the ranking differs from the order of the explained shares, when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranking_note: Option<String>,
}

impl Lead {
    /// The lead of `rca` with the runbooks retrieved for it (`knowledge`, best first) and the
    /// implicated workers of each cause read from the store behind `engine`.
    pub async fn build(
        engine: &QueryEngine,
        rca: &RcaReport,
        knowledge: &[KnowledgeHit],
    ) -> Result<Lead, QueryError> {
        let mut workers = Vec::new();
        for cause in rca.root_causes.iter().take(MAX_CAUSES) {
            let dimensions: BTreeMap<String, String> = cause.dimensions.clone().into();
            workers.push(cause_workers(engine, rca, &dimensions).await?);
        }
        Ok(Lead::of(rca, knowledge, &workers))
    }

    /// The lead from what was read (`workers`: one per cause, in rank order).
    pub fn of(rca: &RcaReport, knowledge: &[KnowledgeHit], workers: &[CauseWorkers]) -> Lead {
        let causes: Vec<CauseLine> = rca
            .root_causes
            .iter()
            .take(MAX_CAUSES)
            .enumerate()
            .map(|(i, cause)| CauseLine {
                rank: cause.rank,
                slice: Subject::describe(&cause.dimensions),
                kind: cause_kind(rca, i),
                explained: format::percent(cause.explained_fraction),
                evidence: cause.evidence.first().cloned().unwrap_or_default(),
                workers: workers
                    .get(i)
                    .map(|w| w.workers.iter().map(worker_text).collect())
                    .unwrap_or_default(),
                serving_workers: workers.get(i).map_or(0, |w| w.serving),
            })
            .collect();
        let fill = placeholders(rca, workers.first());
        let confirm: Vec<ConfirmStep> = runbook(rca, knowledge)
            .map(|hit| {
                hit.confirm
                    .iter()
                    .take(MAX_CONFIRM_STEPS)
                    .map(|step| confirm_step(step, &hit.id, &fill))
                    .collect()
            })
            .unwrap_or_default();
        let first_check = confirm
            .iter()
            .find(|s| s.sql.is_some())
            .or(confirm.first())
            .cloned();
        Lead {
            headline: rca
                .symptom
                .as_ref()
                .map(|s| format::symptom_line(&s.sli, s.baseline, s.current)),
            do_now: do_now(rca, knowledge),
            first_check,
            confirm,
            ranking_note: ranking_note(rca),
            causes,
        }
    }
}

fn worker_text(w: &crate::data::WorkerChange) -> String {
    match w.change_ms {
        Some(change) if change >= 0.0 => format!("{} +{}", w.worker, format::duration_ms(change)),
        Some(change) => format!("{} −{}", w.worker, format::duration_ms(-change)),
        None => format!("{} (new)", w.worker),
    }
}

/// What kind of cause the `index`-th is (see the module's rule).
fn cause_kind(rca: &RcaReport, index: usize) -> String {
    let cause = &rca.root_causes[index];
    if cause.is_load_driven() {
        return "load".into();
    }
    rca.signals
        .iter()
        .filter(|s| s.subject == cause.dimensions && s.kind != SignalKind::LatencySpike)
        .map(|s| s.kind.name().replace('_', " "))
        .next()
        .unwrap_or_else(|| "slice".into())
}

/// The engine's suggestion for the top cause, else the first one, else the best runbook's fix.
fn do_now(rca: &RcaReport, knowledge: &[KnowledgeHit]) -> Option<String> {
    let top = rca
        .root_causes
        .first()
        .map(|c| Subject::describe(&c.dimensions));
    top.as_ref()
        .and_then(|top| rca.suggestions.iter().find(|s| s.contains(top.as_str())))
        .or(rca.suggestions.first())
        .cloned()
        .or_else(|| {
            knowledge
                .iter()
                .find(|h| h.kind == HitKind::Runbook)
                .and_then(|h| h.fixes.first().cloned())
        })
}

/// The runbook whose confirm steps the lead lists (see the module's rule).
fn runbook<'a>(rca: &RcaReport, knowledge: &'a [KnowledgeHit]) -> Option<&'a KnowledgeHit> {
    let runbooks = || {
        knowledge
            .iter()
            .filter(|h| h.kind == HitKind::Runbook && !h.confirm.is_empty())
    };
    let kinds_on = |cause: &infersight_rca::RootCause| -> Vec<&str> {
        rca.signals
            .iter()
            .filter(|s| s.subject == cause.dimensions && s.kind != SignalKind::LatencySpike)
            .map(|s| s.kind.name())
            .collect()
    };
    let top_kinds: Vec<&str> = rca.root_causes.first().map(kinds_on).unwrap_or_default();
    // kinds seen only on the other causes: a runbook covering one was retrieved for them
    let other_kinds: Vec<&str> = rca
        .root_causes
        .iter()
        .skip(1)
        .flat_map(kinds_on)
        .filter(|k| !top_kinds.contains(k))
        .collect();
    let covers =
        |h: &&KnowledgeHit, kinds: &[&str]| h.signals.iter().any(|k| kinds.contains(&k.as_str()));
    runbooks()
        .find(|h| covers(h, &top_kinds) && !covers(h, &other_kinds))
        .or_else(|| runbooks().find(|h| covers(h, &top_kinds)))
        .or_else(|| runbooks().next())
}

/// What `<key>` placeholders are filled with: the top cause's values, and `<worker>` from its
/// first implicated worker when it names none.
fn placeholders(rca: &RcaReport, top_workers: Option<&CauseWorkers>) -> BTreeMap<String, String> {
    let mut fill: BTreeMap<String, String> = rca
        .root_causes
        .first()
        .map(|c| c.dimensions.clone().into())
        .unwrap_or_default();
    if let Some(worker) = top_workers.and_then(|w| w.workers.first()) {
        fill.entry("worker".into())
            .or_insert_with(|| worker.worker.clone());
    }
    fill
}

/// One confirm step: its text without the SQL it runs (a fenced block left out, an inline
/// query written as "the query below"), and the SQL to run (see the module's rule).
fn confirm_step(step: &str, source: &str, fill: &BTreeMap<String, String>) -> ConfirmStep {
    let (text, fenced) = match step.find("```") {
        Some(start) => {
            let block = &step[start + 3..];
            let body = block.split_once('\n').map_or("", |(_, rest)| rest);
            let body = body.split("```").next().unwrap_or_default();
            (
                step[..start].trim().to_string(),
                Some(body.trim().to_string()),
            )
        }
        None => (step.trim().to_string(), None),
    };
    let inline = || {
        text.split('`')
            .skip(1)
            .step_by(2)
            .find(|code| {
                let head = code.trim_start().to_ascii_uppercase();
                head.starts_with("SELECT ") || head.starts_with("WITH ")
            })
            .map(str::to_string)
    };
    let fenced = fenced.filter(|s| !s.is_empty());
    let code = if fenced.is_none() { inline() } else { None };
    let sql = fenced
        .or_else(|| code.clone())
        .map(|sql| fill_placeholders(&sql, fill))
        .filter(|sql| !has_placeholder(sql));
    // an inline query that is shown as the step's SQL is not repeated in its text
    let text = match (&code, &sql) {
        (Some(code), Some(_)) => text.replacen(&format!("`{code}`"), "the query below", 1),
        _ => text,
    };
    ConfirmStep {
        text,
        sql,
        source: source.to_string(),
    }
}

fn fill_placeholders(sql: &str, fill: &BTreeMap<String, String>) -> String {
    let mut out = sql.to_string();
    for (key, value) in fill {
        out = out.replace(&format!("<{key}>"), &value.replace('\'', "''"));
    }
    out
}

/// Whether `sql` still has a `<word>` placeholder (comparisons like `a < b` have spaces).
fn has_placeholder(sql: &str) -> bool {
    sql.split('<').skip(1).any(|rest| {
        rest.split_once('>').is_some_and(|(word, _)| {
            !word.is_empty()
                && word
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        })
    })
}

/// Why the ranking differs from the explained shares, when a lower-ranked cause explains more.
fn ranking_note(rca: &RcaReport) -> Option<String> {
    let causes = &rca.root_causes[..rca.root_causes.len().min(MAX_CAUSES)];
    let top = causes.first()?;
    let larger = causes
        .iter()
        .skip(1)
        .find(|c| c.explained_fraction > top.explained_fraction + 1e-9)?;
    let load = larger.is_load_driven();
    Some(format!(
        "Causes are ranked by how unusual their change is (scan score), not by the share they \
         explain: {} explains {} of the excess, more than {} ({}), but its change is less \
         significant{}.",
        Subject::describe(&larger.dimensions),
        format::percent(larger.explained_fraction),
        Subject::describe(&top.dimensions),
        format::percent(top.explained_fraction),
        if load {
            " and it is load-driven queueing, an effect of load rather than a fault"
        } else {
            ""
        }
    ))
}

#[cfg(test)]
mod tests;
