//! The Markdown report: verdict, symptom, evidence tables, knowledge, advice, narrative and
//! windows, one section per function, in page order (no charts; the HTML has them).

use std::fmt::Write as _;

use infersight_model::time::format_rfc3339;
use infersight_rca::RcaReport;

use super::{
    advice_or_rca, dimensions_text, kind_text, lead_text, lineage_text, number, sequence_reason,
    sequence_step, share_text, symptom_line, window_text, workers_text,
};
use crate::document::{Advice, Report};

/// Escapes text for Markdown: entities for HTML's specials, backslashes for Markdown's own.
pub fn markdown_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\\' | '`' | '*' | '_' | '[' | ']' | '|' | '#' | '~' => {
                out.push('\\');
                out.push(c);
            }
            '\n' | '\r' | '\t' => out.push(' '),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn md(text: &str) -> String {
    markdown_escape(text)
}

/// The report as Markdown: verdict, symptom, evidence tables, knowledge, advice, narrative and
/// windows (no charts; the HTML has them).
pub fn markdown(report: &Report) -> String {
    let rca = &report.rca;
    let mut out = String::new();
    header(&mut out, report);
    lead_section(&mut out, report);
    incident_section(&mut out, report);
    symptom(&mut out, rca);
    root_causes(&mut out, rca);
    signals(&mut out, rca);
    log_evidence(&mut out, rca);
    log_sequences(&mut out, rca);
    knowledge(&mut out, report);
    advice(
        &mut out,
        "Suggestions",
        &advice_or_rca(&report.suggestions, &rca.suggestions),
        "- ",
    );
    advice(
        &mut out,
        "Checklist",
        &advice_or_rca(&report.checklist, &rca.checklist),
        "- [ ] ",
    );
    narrative(&mut out, report);
    windows(&mut out, rca);
    out
}

fn header(out: &mut String, report: &Report) {
    let rca = &report.rca;
    let _ = writeln!(out, "# Incident {}\n", md(&report.incident_id));
    let _ = writeln!(out, "**Verdict:** {}\n", md(&rca.verdict));
    let _ = writeln!(out, "Generated {}.\n", md(&report.generated_at));
}

/// What to read first (`crate::lead`): the symptom, what to do now, the first check, the
/// causes with their kinds and workers, and the runbook's confirm steps with their SQL.
fn lead_section(out: &mut String, report: &Report) {
    let lead = &report.lead;
    if lead.do_now.is_none() && lead.confirm.is_empty() && lead.causes.is_empty() {
        return;
    }
    out.push_str("## Do now\n\n");
    if let Some(headline) = &lead.headline {
        let _ = writeln!(out, "**{}**\n", md(headline));
    }
    if let Some(action) = &lead.do_now {
        let _ = writeln!(out, "- **Do now:** {}", md(action));
    }
    if let Some(check) = &lead.first_check {
        let _ = writeln!(
            out,
            "- **First check** ({}): {}",
            md(&check.source),
            md(&check.text)
        );
        if let Some(sql) = &check.sql {
            let _ = writeln!(out, "\n  ```sql\n  {sql}\n  ```");
        }
    }
    out.push('\n');
    for cause in &lead.causes {
        let workers = if cause.workers.is_empty() {
            String::new()
        } else {
            format!(
                "; workers: {} ({} serving it)",
                cause.workers.join(", "),
                cause.serving_workers
            )
        };
        let _ = writeln!(
            out,
            "{}. {} — {}, explains {}{}",
            cause.rank,
            md(&cause.slice),
            md(&cause.kind),
            md(&cause.explained),
            md(&workers)
        );
    }
    if let Some(note) = &lead.ranking_note {
        let _ = writeln!(out, "\n_{}_", md(note));
    }
    if !lead.confirm.is_empty() {
        let _ = writeln!(
            out,
            "\n### How to confirm ({})\n",
            md(&lead.confirm[0].source)
        );
        for (i, step) in lead.confirm.iter().enumerate() {
            let _ = writeln!(out, "{}. {}", i + 1, md(&step.text));
            if let Some(sql) = &step.sql {
                let _ = writeln!(out, "\n   ```sql\n   {sql}\n   ```\n");
            }
        }
    }
    out.push('\n');
}

/// The watcher's record, the automatic actions taken and the timeline, when there are any.
fn incident_section(out: &mut String, report: &Report) {
    let section = &report.incident;
    if section.is_empty() {
        return;
    }
    out.push_str("## Incident\n\n");
    for (label, value) in [
        ("State", section.state.map(|s| s.as_str().to_string())),
        ("Severity", section.severity.clone()),
        ("Onset", section.onset.clone()),
        ("Detected", section.detected_at.clone()),
        ("Resolved", section.resolved_at.clone()),
    ] {
        if let Some(value) = value {
            let _ = writeln!(out, "- **{label}:** {}", md(&value));
        }
    }
    out.push_str("\n### Automatic actions\n\n");
    if section.actions.is_empty() {
        out.push_str("None taken while it was open.\n\n");
    } else {
        out.push_str("| time | action | target | outcome | policy |\n|---|---|---|---|---|\n");
        for a in &section.actions {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                md(&a.at),
                md(&a.action),
                md(&a.target),
                md(&a.outcome),
                md(a.policy.as_deref().unwrap_or(""))
            );
        }
        out.push('\n');
    }
    if !section.timeline.is_empty() {
        out.push_str("### Timeline\n\n| time | event | detail |\n|---|---|---|\n");
        for e in &section.timeline {
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                md(&e.at),
                md(&e.event),
                md(&e.detail)
            );
        }
        out.push('\n');
    }
}

fn symptom(out: &mut String, rca: &RcaReport) {
    out.push_str("## Symptom\n\n");
    match symptom_line(rca) {
        Some(line) => {
            let _ = writeln!(out, "{}\n", md(&line));
        }
        None => out.push_str("No symptom: no SLI moved significantly.\n\n"),
    }
    if rca.fleet_wide {
        out.push_str("The change is fleet-wide: no specific slice explains it.\n\n");
    }
}

fn root_causes(out: &mut String, rca: &RcaReport) {
    out.push_str("## Root causes\n\n");
    if rca.root_causes.is_empty() {
        out.push_str("None localized.\n\n");
    } else {
        out.push_str("| rank | slice | explained | score | evidence |\n|---:|---|---:|---:|---|\n");
        for cause in &rca.root_causes {
            let _ = writeln!(
                out,
                "| {} | {} | {:.0} % | {} | {} |",
                cause.rank,
                md(&dimensions_text(&cause.dimensions)),
                cause.explained_fraction * 100.0,
                number(cause.score),
                md(&cause.evidence.join("; "))
            );
        }
        out.push('\n');
    }
}

fn signals(out: &mut String, rca: &RcaReport) {
    out.push_str("## Signals\n\n");
    if rca.signals.is_empty() {
        out.push_str("None.\n\n");
    } else {
        out.push_str("| kind | subject | onset | strength | detail |\n|---|---|---|---:|---|\n");
        for s in &rca.signals {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                md(s.kind.name()),
                md(&dimensions_text(&s.subject)),
                md(&format_rfc3339(s.onset)),
                number(s.strength),
                md(&s.detail)
            );
        }
        out.push('\n');
    }
}

fn log_evidence(out: &mut String, rca: &RcaReport) {
    out.push_str("## Log evidence\n\n");
    if rca.log_evidence.is_empty() {
        out.push_str("None.\n\n");
    } else {
        out.push_str(
            "| template | lift | lead | baseline | incident | subject | lineage |\n|---|---:|---|---:|---:|---|---|\n",
        );
        for e in &rca.log_evidence {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                md(&e.template),
                number(e.lift),
                md(&lead_text(e.lead_seconds)),
                e.baseline_count,
                e.incident_count,
                md(&dimensions_text(&e.subject)),
                md(&lineage_text(e.lineage.as_ref()))
            );
        }
        out.push('\n');
    }
}

fn log_sequences(out: &mut String, rca: &RcaReport) {
    if !rca.log_sequences.is_empty() {
        out.push_str("## Unexpected log sequences\n\nRequests and traces whose log sequence a next-event model of the baseline's sessions does not expect.\n\n");
        out.push_str("| unexpected | after | why | incident sessions | baseline sessions | workers |\n|---|---|---|---:|---:|---|\n");
        for a in &rca.log_sequences {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} |",
                md(&sequence_step(
                    a.template.as_deref(),
                    a.template_id.as_deref(),
                    "end of session"
                )),
                md(&sequence_step(
                    a.after_template.as_deref(),
                    a.after_template_id.as_deref(),
                    "start of session"
                )),
                md(&sequence_reason(&a.reason)),
                share_text(a.incident_sessions, a.incident_total),
                share_text(a.baseline_sessions, a.baseline_total),
                md(&workers_text(&a.workers))
            );
        }
        out.push('\n');
    }
}

fn knowledge(out: &mut String, report: &Report) {
    out.push_str("## Runbooks and past incidents\n\n");
    if report.knowledge.is_empty() {
        out.push_str("None matched.\n\n");
    } else {
        out.push_str("| kind | title | id | score | summary |\n|---|---|---|---:|---|\n");
        for hit in &report.knowledge {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.2} | {} |",
                kind_text(hit.kind),
                md(&hit.title),
                md(&hit.id),
                hit.score,
                md(&hit.summary)
            );
        }
        out.push('\n');
    }
}

/// A `## heading` list of advice, each item `{bullet}text — _source_ (score s)`.
fn advice(out: &mut String, heading: &str, items: &[Advice], bullet: &str) {
    let _ = writeln!(out, "## {heading}\n");
    if items.is_empty() {
        out.push_str("None.\n\n");
        return;
    }
    for a in items {
        let _ = writeln!(
            out,
            "{bullet}{} — _{}_ (score {:.2})",
            md(&a.text),
            md(&a.source),
            a.score
        );
    }
    out.push('\n');
}

fn narrative(out: &mut String, report: &Report) {
    out.push_str("## Narrative\n\n");
    match (&report.narrative, &report.narrative_note) {
        (Some(n), _) => {
            let _ = writeln!(
                out,
                "{} (confidence {:.0} %)\n",
                md(&n.cause),
                n.confidence * 100.0
            );
            if !n.fixes.is_empty() {
                out.push_str("Fixes:\n\n");
                for f in &n.fixes {
                    let _ = writeln!(out, "- {}", md(f));
                }
                out.push('\n');
            }
            if !n.checklist.is_empty() {
                out.push_str("Verify:\n\n");
                for f in &n.checklist {
                    let _ = writeln!(out, "- [ ] {}", md(f));
                }
                out.push('\n');
            }
        }
        (None, Some(note)) => {
            let _ = writeln!(out, "No narrative: {}\n", md(note));
        }
        (None, None) => out.push_str("No narrative.\n\n"),
    }
}

fn windows(out: &mut String, rca: &RcaReport) {
    out.push_str("## Windows\n\n");
    let _ = writeln!(
        out,
        "- incident: {}",
        md(&window_text(&rca.incident_window))
    );
    let _ = writeln!(
        out,
        "- baseline: {}",
        md(&window_text(&rca.baseline_window))
    );
    if !rca.window_source.is_empty() {
        let _ = writeln!(out, "- chosen by: {}", md(&rca.window_source));
    }
}
