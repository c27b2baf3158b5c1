//! Renders a `Report` as Markdown or one self-contained HTML file with the SVG charts.
//!
//! Both renderers are pure functions of the report (same report → same bytes). Every text that
//! came from data (templates are log lines, slice values are attributes) is escaped: in HTML as
//! entities, in Markdown as entities for `<`, `>`, `&` (Markdown viewers render inline HTML)
//! plus backslashes for Markdown's own punctuation. The HTML needs no network and no script:
//! inline CSS, inline SVG, a print stylesheet.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use infersight_model::time::format_rfc3339;
use infersight_rca::{LineageSummary, RcaReport, Window};

use crate::charts::{self, escape};
use crate::knowledge::HitKind;
use crate::report::{Advice, Report};

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
    if !v.is_finite() {
        "—".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// The symptom's value with its unit: latency SLIs are milliseconds (p99), the rest rates.
fn sli_value(sli: &str, v: f64) -> String {
    if sli.ends_with("rate") {
        format!("{:.2} %", v * 100.0)
    } else {
        format!("{} ms", number(v))
    }
}

fn symptom_line(rca: &RcaReport) -> Option<String> {
    let s = rca.symptom.as_ref()?;
    let what = if s.sli.ends_with("rate") {
        s.sli.clone()
    } else {
        format!("p99 {}", s.sli)
    };
    let factor = if s.baseline > 0.0 {
        format!(" (×{:.2})", s.current / s.baseline)
    } else {
        String::new()
    };
    Some(format!(
        "{what}: {} → {}{factor}, onset {}",
        sli_value(&s.sli, s.baseline),
        sli_value(&s.sli, s.current),
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

// -------------------------------------------------------------------------------- markdown

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
    let _ = writeln!(out, "# Incident {}\n", md(&report.incident_id));
    let _ = writeln!(out, "**Verdict:** {}\n", md(&rca.verdict));
    let _ = writeln!(out, "Generated {}.\n", md(&report.generated_at));

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

    out.push_str("## Suggestions\n\n");
    let suggestions = advice_or_rca(&report.suggestions, &rca.suggestions);
    if suggestions.is_empty() {
        out.push_str("None.\n\n");
    } else {
        for a in &suggestions {
            let _ = writeln!(
                out,
                "- {} — _{}_ (score {:.2})",
                md(&a.text),
                md(&a.source),
                a.score
            );
        }
        out.push('\n');
    }

    out.push_str("## Checklist\n\n");
    let checklist = advice_or_rca(&report.checklist, &rca.checklist);
    if checklist.is_empty() {
        out.push_str("None.\n\n");
    } else {
        for a in &checklist {
            let _ = writeln!(
                out,
                "- [ ] {} — _{}_ (score {:.2})",
                md(&a.text),
                md(&a.source),
                a.score
            );
        }
        out.push('\n');
    }

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
    out
}

// ------------------------------------------------------------------------------------ html

const CSS: &str = "\
:root{--fg:#1d232a;--muted:#5f6b76;--line:#dfe3e8;--accent:#c0392b;--bg:#fff;--soft:#f6f8fa}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif}
main{max-width:1200px;margin:0 auto;padding:24px 32px 48px}
h1{font-size:24px;margin:0 0 4px}
h2{font-size:18px;margin:28px 0 10px;padding-bottom:4px;border-bottom:1px solid var(--line)}
.meta{color:var(--muted);margin:0 0 14px}
.verdict{font-size:16px;background:#fdf2f0;border-left:4px solid var(--accent);padding:10px 14px;margin:12px 0}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(220px,1fr));gap:12px;margin:12px 0}
.card{background:var(--soft);border:1px solid var(--line);border-radius:6px;padding:10px 12px}
.card b{display:block;color:var(--muted);font-weight:600;font-size:12px;text-transform:uppercase;letter-spacing:.04em}
table{border-collapse:collapse;width:100%;margin:6px 0 12px;font-size:13px}
th,td{border:1px solid var(--line);padding:5px 8px;text-align:left;vertical-align:top}
th{background:var(--soft)}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
code,.template{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px;word-break:break-word}
.charts{display:grid;grid-template-columns:1fr;gap:18px}
figure{margin:0;border:1px solid var(--line);border-radius:6px;padding:10px 12px;background:#fff;break-inside:avoid;page-break-inside:avoid}
figcaption{font-weight:600;margin-bottom:6px}
svg.chart{display:block;width:100%;height:auto;max-width:100%}
ul.advice{padding-left:20px}
ul.checklist{list-style:none;padding-left:4px}
ul.checklist li{margin:3px 0}
.src{color:var(--muted);font-size:12px}
.note{color:var(--muted);font-style:italic}
footer{margin-top:32px;color:var(--muted);font-size:12px}
@media print{main{max-width:none;padding:0}h2{break-after:avoid}table,figure{break-inside:avoid}body{font-size:11px}.verdict{background:none}}
";

fn h(text: &str) -> String {
    escape(text)
}

fn html_advice(out: &mut String, items: &[Advice], checklist: bool) {
    if items.is_empty() {
        out.push_str("<p class=\"note\">None.</p>\n");
        return;
    }
    let class = if checklist { "checklist" } else { "advice" };
    let _ = writeln!(out, "<ul class=\"{class}\">");
    for a in items {
        let source = format!("{} · score {:.2}", a.source, a.score);
        if checklist {
            let _ = writeln!(
                out,
                "<li><label><input type=\"checkbox\"> {}</label> <span class=\"src\">({})</span></li>",
                h(&a.text),
                h(&source)
            );
        } else {
            let _ = writeln!(
                out,
                "<li>{} <span class=\"src\">({})</span></li>",
                h(&a.text),
                h(&source)
            );
        }
    }
    out.push_str("</ul>\n");
}

/// The report as one self-contained HTML file: the Markdown's content plus every chart inline.
pub fn html(report: &Report) -> String {
    let rca = &report.rca;
    let mut out = String::new();
    let title = format!("Incident {} — infersight", report.incident_id);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>\n{CSS}</style>\n</head>\n<body>\n<main>\n",
        h(&title)
    );
    let _ = writeln!(out, "<h1>Incident {}</h1>", h(&report.incident_id));
    let _ = writeln!(
        out,
        "<p class=\"meta\">Generated {} by infersight. Window chosen by: {}.</p>",
        h(&report.generated_at),
        h(if rca.window_source.is_empty() {
            "—"
        } else {
            &rca.window_source
        })
    );
    let _ = writeln!(out, "<p class=\"verdict\">{}</p>", h(&rca.verdict));

    // summary cards
    out.push_str("<section class=\"cards\">\n");
    let symptom = symptom_line(rca).unwrap_or_else(|| "no SLI moved significantly".into());
    let top = rca
        .root_causes
        .first()
        .map(|c| {
            format!(
                "{} ({:.0} % explained)",
                dimensions_text(&c.dimensions),
                c.explained_fraction * 100.0
            )
        })
        .unwrap_or_else(|| {
            if rca.fleet_wide {
                "fleet-wide".into()
            } else {
                "none localized".into()
            }
        });
    for (label, value) in [
        ("Symptom", symptom),
        ("Top root cause", top),
        ("Incident window", window_text(&rca.incident_window)),
        ("Baseline window", window_text(&rca.baseline_window)),
    ] {
        let _ = writeln!(
            out,
            "<div class=\"card\"><b>{}</b>{}</div>",
            h(label),
            h(&value)
        );
    }
    out.push_str("</section>\n");

    // narrative
    out.push_str("<h2>Narrative</h2>\n");
    match (&report.narrative, &report.narrative_note) {
        (Some(n), _) => {
            let _ = writeln!(
                out,
                "<p>{} <span class=\"src\">(confidence {:.0} %)</span></p>",
                h(&n.cause),
                n.confidence * 100.0
            );
            if !n.fixes.is_empty() {
                out.push_str("<p>Fixes:</p><ul class=\"advice\">\n");
                for f in &n.fixes {
                    let _ = writeln!(out, "<li>{}</li>", h(f));
                }
                out.push_str("</ul>\n");
            }
            if !n.checklist.is_empty() {
                out.push_str("<p>Verify:</p><ul class=\"checklist\">\n");
                for f in &n.checklist {
                    let _ = writeln!(
                        out,
                        "<li><label><input type=\"checkbox\"> {}</label></li>",
                        h(f)
                    );
                }
                out.push_str("</ul>\n");
            }
        }
        (None, Some(note)) => {
            let _ = writeln!(out, "<p class=\"note\">No narrative: {}</p>", h(note));
        }
        (None, None) => out.push_str("<p class=\"note\">No narrative.</p>\n"),
    }

    // root causes
    out.push_str("<h2>Root causes</h2>\n");
    if rca.root_causes.is_empty() {
        out.push_str("<p class=\"note\">None localized.</p>\n");
    } else {
        out.push_str("<table><thead><tr><th>rank</th><th>slice</th><th>explained</th><th>score</th><th>evidence</th></tr></thead><tbody>\n");
        for cause in &rca.root_causes {
            let evidence: Vec<String> = cause.evidence.iter().map(|e| h(e)).collect();
            let _ = writeln!(
                out,
                "<tr><td class=\"num\">{}</td><td><code>{}</code></td><td class=\"num\">{:.0} %</td><td class=\"num\">{}</td><td>{}</td></tr>",
                cause.rank,
                h(&dimensions_text(&cause.dimensions)),
                cause.explained_fraction * 100.0,
                h(&number(cause.score)),
                evidence.join("<br>")
            );
        }
        out.push_str("</tbody></table>\n");
    }

    // charts
    out.push_str("<h2>Charts</h2>\n<div class=\"charts\">\n");
    for chart in charts::render_all(report) {
        let _ = writeln!(
            out,
            "<figure id=\"chart-{}\"><figcaption>{}</figcaption>\n{}\n</figure>",
            h(&chart.id),
            h(&chart.title),
            chart.svg
        );
    }
    out.push_str("</div>\n");

    // signals
    out.push_str("<h2>Signals</h2>\n");
    if rca.signals.is_empty() {
        out.push_str("<p class=\"note\">None.</p>\n");
    } else {
        out.push_str("<table><thead><tr><th>kind</th><th>subject</th><th>onset</th><th>strength</th><th>detail</th></tr></thead><tbody>\n");
        for s in &rca.signals {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                h(s.kind.name()),
                h(&dimensions_text(&s.subject)),
                h(&format_rfc3339(s.onset)),
                h(&number(s.strength)),
                h(&s.detail)
            );
        }
        out.push_str("</tbody></table>\n");
    }

    // log evidence
    out.push_str("<h2>Log evidence</h2>\n");
    if rca.log_evidence.is_empty() {
        out.push_str("<p class=\"note\">None.</p>\n");
    } else {
        out.push_str("<table><thead><tr><th>template</th><th>lift</th><th>lead</th><th>baseline</th><th>incident</th><th>subject</th><th>lineage</th></tr></thead><tbody>\n");
        for e in &rca.log_evidence {
            let _ = writeln!(
                out,
                "<tr><td class=\"template\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td><code>{}</code></td><td>{}</td></tr>",
                h(&e.template),
                h(&number(e.lift)),
                h(&lead_text(e.lead_seconds)),
                e.baseline_count,
                e.incident_count,
                h(&dimensions_text(&e.subject)),
                h(&lineage_text(e.lineage.as_ref()))
            );
        }
        out.push_str("</tbody></table>\n");
    }
    if !rca.log_sequences.is_empty() {
        out.push_str("<h2>Unexpected log sequences</h2>\n<p class=\"note\">Requests and traces whose log sequence a next-event model of the baseline's sessions does not expect.</p>\n");
        out.push_str("<table><thead><tr><th>unexpected</th><th>after</th><th>why</th><th>incident sessions</th><th>baseline sessions</th><th>workers</th></tr></thead><tbody>\n");
        for a in &rca.log_sequences {
            let _ = writeln!(
                out,
                "<tr><td class=\"template\">{}</td><td class=\"template\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                h(&sequence_step(
                    a.template.as_deref(),
                    a.template_id.as_deref(),
                    "end of session"
                )),
                h(&sequence_step(
                    a.after_template.as_deref(),
                    a.after_template_id.as_deref(),
                    "start of session"
                )),
                h(&sequence_reason(&a.reason)),
                h(&share_text(a.incident_sessions, a.incident_total)),
                h(&share_text(a.baseline_sessions, a.baseline_total)),
                h(&workers_text(&a.workers))
            );
        }
        out.push_str("</tbody></table>\n");
    }

    // knowledge
    out.push_str("<h2>Runbooks and past incidents</h2>\n");
    if report.knowledge.is_empty() {
        out.push_str("<p class=\"note\">None matched.</p>\n");
    } else {
        out.push_str("<table><thead><tr><th>kind</th><th>title</th><th>score</th><th>summary</th></tr></thead><tbody>\n");
        for hit in &report.knowledge {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{} <span class=\"src\">{}</span></td><td class=\"num\">{:.2}</td><td>{}</td></tr>",
                kind_text(hit.kind),
                h(&hit.title),
                h(&hit.id),
                hit.score,
                h(&hit.summary)
            );
        }
        out.push_str("</tbody></table>\n");
    }

    out.push_str("<h2>Suggestions</h2>\n");
    html_advice(
        &mut out,
        &advice_or_rca(&report.suggestions, &rca.suggestions),
        false,
    );
    out.push_str("<h2>Checklist</h2>\n");
    html_advice(
        &mut out,
        &advice_or_rca(&report.checklist, &rca.checklist),
        true,
    );

    out.push_str("<h2>Windows</h2>\n<table><tbody>\n");
    for (label, value) in [
        ("incident", window_text(&rca.incident_window)),
        ("baseline", window_text(&rca.baseline_window)),
        ("chosen by", rca.window_source.clone()),
    ] {
        let _ = writeln!(out, "<tr><th>{}</th><td>{}</td></tr>", h(label), h(&value));
    }
    out.push_str("</tbody></table>\n");
    let _ = writeln!(
        out,
        "<footer>infersight report · incident {} · generated {}</footer>",
        h(&report.incident_id),
        h(&report.generated_at)
    );
    out.push_str("</main>\n</body>\n</html>\n");
    out
}
