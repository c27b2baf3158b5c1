//! The HTML report: one self-contained file (inline CSS and SVG, no script, a print
//! stylesheet) with the Markdown's content plus every chart, one section per function, in page
//! order.

use std::fmt::Write as _;

use infersight_model::time::format_rfc3339;
use infersight_rca::RcaReport;

use super::{
    advice_or_rca, dimensions_text, kind_text, lead_text, lineage_text, number, sequence_reason,
    sequence_step, share_text, symptom_line, window_text, workers_text,
};
use crate::charts::{self, escape};
use crate::document::{Advice, Report};

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
.lead .headline{font-size:18px;font-weight:600;margin:6px 0}
.lead .do-now{font-size:16px;background:#eef6ee;border-left:4px solid #2e7d32;padding:8px 12px}
pre{background:var(--soft);border:1px solid var(--line);padding:6px 8px;white-space:pre-wrap}
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
    head(&mut out, report);
    lead_section(&mut out, report);
    summary_cards(&mut out, rca);
    incident_section(&mut out, report);
    narrative(&mut out, report);
    root_causes(&mut out, rca);
    chart_figures(&mut out, report);
    signals(&mut out, rca);
    log_evidence(&mut out, rca);
    log_sequences(&mut out, rca);
    knowledge(&mut out, report);
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
    windows(&mut out, rca);
    footer(&mut out, report);
    out
}

/// The document head (title, inline CSS), the title, meta line and verdict.
fn head(out: &mut String, report: &Report) {
    let rca = &report.rca;
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
}

/// What to read first (`crate::lead`): the symptom, what to do now, the first check, the
/// causes with their kinds and workers, and the runbook's confirm steps with their SQL.
fn lead_section(out: &mut String, report: &Report) {
    let lead = &report.lead;
    if lead.do_now.is_none() && lead.confirm.is_empty() && lead.causes.is_empty() {
        return;
    }
    out.push_str("<section class=\"lead\">\n<h2>Do now</h2>\n");
    if let Some(headline) = &lead.headline {
        let _ = writeln!(out, "<p class=\"headline\">{}</p>", h(headline));
    }
    if let Some(action) = &lead.do_now {
        let _ = writeln!(out, "<p class=\"do-now\"><b>Do now:</b> {}</p>", h(action));
    }
    if let Some(check) = &lead.first_check {
        let _ = write!(
            out,
            "<p><b>First check</b> <span class=\"src\">({})</span>: {}</p>",
            h(&check.source),
            h(&check.text)
        );
        if let Some(sql) = &check.sql {
            let _ = write!(out, "<pre><code>{}</code></pre>", h(sql));
        }
        out.push('\n');
    }
    if !lead.causes.is_empty() {
        out.push_str("<ol class=\"causes\">\n");
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
                "<li value=\"{}\"><code>{}</code> — {}, explains {}{}</li>",
                cause.rank,
                h(&cause.slice),
                h(&cause.kind),
                h(&cause.explained),
                h(&workers)
            );
        }
        out.push_str("</ol>\n");
    }
    if let Some(note) = &lead.ranking_note {
        let _ = writeln!(out, "<p class=\"note\">{}</p>", h(note));
    }
    if let Some(first) = lead.confirm.first() {
        let _ = writeln!(out, "<h3>How to confirm ({})</h3>\n<ol>", h(&first.source));
        for step in &lead.confirm {
            let _ = write!(out, "<li>{}", h(&step.text));
            if let Some(sql) = &step.sql {
                let _ = write!(out, "<pre><code>{}</code></pre>", h(sql));
            }
            out.push_str("</li>\n");
        }
        out.push_str("</ol>\n");
    }
    out.push_str("</section>\n");
}

/// The watcher's record, the automatic actions taken and the timeline, when there are any.
fn incident_section(out: &mut String, report: &Report) {
    let section = &report.incident;
    if section.is_empty() {
        return;
    }
    out.push_str("<h2>Incident</h2>\n");
    let facts = [
        ("state", section.state.map(|s| s.as_str().to_string())),
        ("severity", section.severity.clone()),
        ("onset", section.onset.clone()),
        ("detected", section.detected_at.clone()),
        ("resolved", section.resolved_at.clone()),
    ];
    if facts.iter().any(|(_, v)| v.is_some()) {
        out.push_str("<table class=\"incident-facts\"><tbody>\n");
        for (label, value) in facts {
            if let Some(value) = value {
                let _ = writeln!(out, "<tr><th>{}</th><td>{}</td></tr>", h(label), h(&value));
            }
        }
        out.push_str("</tbody></table>\n");
    }
    out.push_str("<h3>Automatic actions</h3>\n");
    if section.actions.is_empty() {
        out.push_str("<p class=\"note\">None taken while it was open.</p>\n");
    } else {
        out.push_str("<table class=\"incident-actions\"><thead><tr><th>time</th><th>action</th><th>target</th><th>outcome</th><th>policy</th></tr></thead><tbody>\n");
        for a in &section.actions {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                h(&a.at),
                h(&a.action),
                h(&a.target),
                h(&a.outcome),
                h(a.policy.as_deref().unwrap_or("")),
            );
        }
        out.push_str("</tbody></table>\n");
    }
    if !section.timeline.is_empty() {
        out.push_str("<h3>Timeline</h3>\n<table class=\"incident-timeline\"><thead><tr><th>time</th><th>event</th><th>detail</th></tr></thead><tbody>\n");
        for e in &section.timeline {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                h(&e.at),
                h(&e.event),
                h(&e.detail)
            );
        }
        out.push_str("</tbody></table>\n");
    }
}

fn summary_cards(out: &mut String, rca: &RcaReport) {
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
}

fn narrative(out: &mut String, report: &Report) {
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
}

fn root_causes(out: &mut String, rca: &RcaReport) {
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
}

fn chart_figures(out: &mut String, report: &Report) {
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
}

fn signals(out: &mut String, rca: &RcaReport) {
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
}

fn log_evidence(out: &mut String, rca: &RcaReport) {
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
}

fn log_sequences(out: &mut String, rca: &RcaReport) {
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
}

fn knowledge(out: &mut String, report: &Report) {
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
}

fn windows(out: &mut String, rca: &RcaReport) {
    out.push_str("<h2>Windows</h2>\n<table><tbody>\n");
    for (label, value) in [
        ("incident", window_text(&rca.incident_window)),
        ("baseline", window_text(&rca.baseline_window)),
        ("chosen by", rca.window_source.clone()),
    ] {
        let _ = writeln!(out, "<tr><th>{}</th><td>{}</td></tr>", h(label), h(&value));
    }
    out.push_str("</tbody></table>\n");
}

fn footer(out: &mut String, report: &Report) {
    let _ = writeln!(
        out,
        "<footer>infersight report · incident {} · generated {}</footer>",
        h(&report.incident_id),
        h(&report.generated_at)
    );
    out.push_str("</main>\n</body>\n</html>\n");
}
