//! Renders a `Report` as Markdown ([`markdown`]) or one self-contained HTML file with the SVG
//! charts ([`html`]); this file holds the text both share (slices, windows, numbers, symptom,
//! log sequences, lineage).
//!
//! Both renderers are pure functions of the report (same report → same bytes). Every text that
//! came from data (templates are log lines, slice values are attributes) is escaped: in HTML as
//! entities, in Markdown as entities for `<`, `>`, `&` (Markdown viewers render inline HTML)
//! plus backslashes for Markdown's own punctuation. The HTML needs no network and no script:
//! inline CSS, inline SVG, a print stylesheet.

mod html;
mod markdown;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use infersight_model::time::format_rfc3339;
use infersight_rca::{LineageSummary, RcaReport, Window};

use crate::document::Advice;
use crate::knowledge::HitKind;

pub use html::html;
pub use markdown::{markdown, markdown_escape};

// ---------------------------------------------------------------------------------- shared

fn dimensions_text(dimensions: &BTreeMap<String, String>) -> String {
    infersight_model::signal::Subject::describe(dimensions)
}

fn window_text(window: &Option<Window>) -> String {
    match window {
        Some(w) => format!("{} → {}", format_rfc3339(w.since), format_rfc3339(w.until)),
        None => "—".into(),
    }
}

fn number(v: f64) -> String {
    crate::format::significant(v)
}

/// The symptom with units and its onset: `TTFT p99 194 ms → 963 ms, ×4.95; onset …`.
fn symptom_line(rca: &RcaReport) -> Option<String> {
    let s = rca.symptom.as_ref()?;
    Some(format!(
        "{}; onset {}",
        crate::format::symptom_line(&s.sli, s.baseline, s.current),
        format_rfc3339(s.onset)
    ))
}

fn kind_text(kind: HitKind) -> &'static str {
    match kind {
        HitKind::Runbook => "runbook",
        HitKind::Incident => "past incident",
    }
}

/// The report's advice, or the engine's own when the report carries none.
fn advice_or_rca(advice: &[Advice], own: &[String]) -> Vec<Advice> {
    if advice.is_empty() {
        own.iter()
            .map(|text| Advice {
                text: text.clone(),
                source: "rca".into(),
                score: 0.0,
            })
            .collect()
    } else {
        advice.to_vec()
    }
}

fn lead_text(seconds: f64) -> String {
    if seconds >= 0.0 {
        format!("{seconds:.0} s before")
    } else {
        format!("{:.0} s after", -seconds)
    }
}

/// One step of a log sequence: the template text, else its id, else what `None` stands for.
fn sequence_step(template: Option<&str>, id: Option<&str>, none: &str) -> String {
    match (template, id) {
        (Some(text), _) => text.to_string(),
        (None, Some(id)) => format!("template {id}"),
        (None, None) => format!("({none})"),
    }
}

fn sequence_reason(reason: &str) -> String {
    match reason {
        "unseen_event" => "no baseline session logged it".into(),
        "unseen_transition" => "never followed that step in the baseline".into(),
        "premature_end" => "baseline sessions never ended there".into(),
        "rare" => "rare after that step in the baseline".into(),
        other => other.to_string(),
    }
}

/// `n of total (p %)`.
fn share_text(n: u64, total: u64) -> String {
    if total == 0 {
        return n.to_string();
    }
    format!("{n} of {total} ({:.1} %)", n as f64 * 100.0 / total as f64)
}

fn workers_text(workers: &[(String, u64)]) -> String {
    workers
        .iter()
        .map(|(w, n)| format!("{w} ×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `"{n} record(s) on w1 ×18, w2 ×2; 17 request(s): r2 ×15, r1 ×2"`: where a template's records
/// lead in the lineage graph (workers they were logged on, model versions of their requests).
fn lineage_text(lineage: Option<&LineageSummary>) -> String {
    let Some(l) = lineage else {
        return "—".to_string();
    };
    let counts = |map: &BTreeMap<String, usize>| {
        let mut items: Vec<(&String, &usize)> = map.iter().collect();
        items.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        items
            .iter()
            .take(3)
            .map(|(k, n)| format!("{k} ×{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut text = format!("{} record(s)", l.records);
    if !l.workers.is_empty() {
        let _ = write!(text, " on {}", counts(&l.workers));
    }
    if l.requests > 0 {
        let _ = write!(text, "; {} request(s)", l.requests);
        if !l.model_versions.is_empty() {
            let _ = write!(text, " served by {}", counts(&l.model_versions));
        }
    }
    if l.linked_records > 0 {
        let _ = write!(text, "; {} link(s) to other evidence", l.linked_records);
    }
    text
}
