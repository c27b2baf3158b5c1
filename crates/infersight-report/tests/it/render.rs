//! Tests of the report's render module: the SVG charts (well-formed, their series and markers,
//! the empty case, escaping, determinism), the Markdown and HTML renderers, the chart data read
//! from a store holding a simulated incident, and the HTML report in headless Chromium.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read as _;

use infersight_rca::{
    LineageSummary, LogEvidence, RcaReport, RootCause, SequenceAnomaly, Signal, Symptom, Window,
};
use infersight_report::Report;
use infersight_report::charts::{Chart, render_all};
use infersight_report::data::{
    ChartData, Contribution, ContributionPoint, FlameNode, Heatmap, PhaseBreakdown, ResourceSeries,
    TemplateRate, WindowMs,
};
use infersight_report::knowledge::{HitKind, KnowledgeHit};
use infersight_report::narrative::Narrative;
use infersight_report::render;
use infersight_report::report::Advice;
use infersight_testkit::chromium::{self, Driver};
use serde_json::json;

use crate::support;

const EVIL: &str = "<script>alert(1)</script> & x";
const EVIL_ESCAPED: &str = "&lt;script&gt;alert(1)&lt;/script&gt; &amp; x";

const MINUTE_MS: i64 = 60_000;
/// 2025-11-29T10:00:00Z
const T0_MS: i64 = 1_764_410_400_000;

// ----------------------------------------------------------------------- a synthetic report

fn slice() -> BTreeMap<String, String> {
    BTreeMap::from([("worker".to_string(), "worker-3".to_string())])
}

fn synthetic_charts() -> ChartData {
    let baseline = WindowMs {
        since_ms: T0_MS,
        until_ms: T0_MS + 40 * MINUTE_MS,
    };
    let incident = WindowMs {
        since_ms: T0_MS + 40 * MINUTE_MS,
        until_ms: T0_MS + 60 * MINUTE_MS,
    };
    let steps: Vec<i64> = (0..60).map(|i| T0_MS + i * MINUTE_MS).collect();
    let buckets = 12;
    let counts: Vec<Vec<u64>> = (0..60)
        .map(|i| {
            (0..buckets)
                .map(|b| {
                    let centre = if i >= 40 { 8 } else { 4 };
                    let d = (b as i64 - centre).unsigned_abs();
                    if d > 3 { 0 } else { 40 / (1 + d * d) }
                })
                .collect()
        })
        .collect();
    let bounds: Vec<f64> = (0..=buckets)
        .map(|b| (2f64.powf((24 + b) as f64 / 3.0) * 1000.0).round() / 1000.0)
        .collect();
    let phase = |scope: &str, label: &str, window: &str, k: f64| PhaseBreakdown {
        scope: scope.into(),
        label: label.into(),
        window: window.into(),
        requests: 100,
        queue_ms: 20.0 * k,
        prefill_ms: 80.0 * k,
        decode_ms: 400.0,
        other_ms: 5.0,
    };
    let node = |name: &str, parts: [f64; 4]| FlameNode {
        name: name.into(),
        value_ms: parts.iter().sum(),
        children: ["queue", "prefill", "decode", "other"]
            .iter()
            .zip(parts)
            .map(|(n, v)| FlameNode {
                name: (*n).into(),
                value_ms: v,
                children: Vec::new(),
            })
            .collect(),
    };
    let slice_node = node("worker=worker-3", [9000.0, 30000.0, 40000.0, 500.0]);
    let rest_node = node("rest", [2000.0, 8000.0, 280000.0, 3500.0]);
    ChartData {
        span: Some(WindowMs {
            since_ms: T0_MS,
            until_ms: T0_MS + 60 * MINUTE_MS,
        }),
        baseline: Some(baseline),
        incident: Some(incident),
        onset_ms: Some(incident.since_ms),
        step_ms: MINUTE_MS,
        slice: slice(),
        heatmap: Heatmap {
            sli: "ttft_ms".into(),
            steps_ms: steps.clone(),
            bucket_bounds_ms: bounds,
            counts,
        },
        phases: vec![
            phase("fleet", "fleet", "baseline", 1.0),
            phase("fleet", "fleet", "incident", 1.5),
            phase("slice", "worker=worker-3", "baseline", 1.0),
            phase("slice", "worker=worker-3", "incident", 6.0),
        ],
        contribution: Contribution {
            slice: "worker=worker-3".into(),
            threshold_ms: Some(350.0),
            points: steps
                .iter()
                .enumerate()
                .map(|(i, s)| ContributionPoint {
                    step_ms: *s,
                    slice_requests: 60,
                    slice_over: if i >= 40 { 45 } else { 3 },
                    rest_requests: 540,
                    rest_over: 27,
                })
                .collect(),
        },
        templates: vec![
            TemplateRate {
                template_id: "t-1".into(),
                template: EVIL.into(),
                points: (30..60)
                    .map(|i| (T0_MS + i * MINUTE_MS, (i - 29) as u64))
                    .collect(),
            },
            TemplateRate {
                template_id: "t-2".into(),
                template: "CUDA out of memory. Tried to allocate <*> MiB".into(),
                points: vec![(T0_MS + 45 * MINUTE_MS, 4)],
            },
        ],
        workers: vec!["worker-3".into()],
        resources: vec![
            ResourceSeries {
                metric: "gpu_memory_used_bytes".into(),
                worker: "worker-3".into(),
                points: (0..60)
                    .map(|i| (T0_MS + i * MINUTE_MS, 40e9 + i as f64 * 5e8))
                    .collect(),
            },
            ResourceSeries {
                metric: "kv_cache_usage_ratio".into(),
                worker: "worker-3".into(),
                points: (0..60)
                    .map(|i| (T0_MS + i * MINUTE_MS, 0.3 + i as f64 / 100.0))
                    .collect(),
            },
            ResourceSeries {
                metric: "requests_waiting".into(),
                worker: "worker-3".into(),
                points: (0..60)
                    .map(|i| (T0_MS + i * MINUTE_MS, if i >= 40 { 12.0 } else { 1.0 }))
                    .collect(),
            },
        ],
        flame: Some(FlameNode {
            name: "incident requests".into(),
            value_ms: slice_node.value_ms + rest_node.value_ms,
            children: vec![slice_node, rest_node],
        }),
    }
}

fn ns(ms: i64) -> i64 {
    ms * 1_000_000
}

fn synthetic_rca() -> RcaReport {
    let onset = ns(T0_MS + 40 * MINUTE_MS);
    RcaReport {
        symptom: Some(Symptom {
            sli: "ttft".into(),
            baseline: 820.0,
            current: 1700.0,
            onset,
            z: 12.0,
        }),
        root_causes: vec![RootCause {
            rank: 1,
            dimensions: slice().into(),
            explained_fraction: 0.82,
            score: 41.5,
            evidence: vec![format!("ttft over 350 ms; log: {EVIL}")],
            slice_rate: None,
        }],
        signals: vec![Signal {
            kind: infersight_rca::SignalKind::GpuMemoryLeak,
            subject: slice().into(),
            onset,
            strength: 3.2,
            detail: "GPU memory +18 GiB over 40 min | slope 0.45 GiB/min".into(),
        }],
        log_evidence: vec![LogEvidence {
            template: EVIL.into(),
            template_id: "t-1".into(),
            lift: 14.0,
            lead_seconds: 120.0,
            baseline_count: 3,
            incident_count: 420,
            subject: slice().into(),
            lineage: Some(LineageSummary {
                records: 20,
                workers: BTreeMap::from([("worker-3".into(), 18), ("worker-5".into(), 2)]),
                requests: 17,
                model_versions: BTreeMap::from([("r1".into(), 2), ("r2".into(), 15)]),
                traces: 17,
                sessions: 9,
                linked_records: 4,
            }),
        }],
        log_sequences: vec![SequenceAnomaly {
            reason: "unseen_event".into(),
            template_id: Some("t-9".into()),
            template: Some(format!("Loading adapter {EVIL}")),
            after_template_id: None,
            after_template: None,
            expected_template_ids: vec![Some("t-1".into())],
            incident_sessions: 354,
            incident_total: 5002,
            baseline_sessions: 0,
            baseline_total: 12877,
            workers: vec![("worker-3".into(), 205), ("worker-7".into(), 149)],
        }],
        suggestions: vec!["restart worker-3".into()],
        checklist: vec!["GPU memory flat for 30 min".into()],
        fleet_wide: false,
        incident_window: Some(Window {
            since: onset,
            until: ns(T0_MS + 60 * MINUTE_MS),
        }),
        baseline_window: Some(Window {
            since: ns(T0_MS),
            until: onset,
        }),
        window_source: "change in ttft".into(),
        verdict: "p99 ttft 820 ms → 1.7 s since 10:40, explained by worker=worker-3 (82 %)".into(),
        elapsed_ms: 12.0,
        timings_ms: BTreeMap::new(),
        incident_id: None,
    }
}

fn synthetic_report() -> Report {
    Report {
        incident_id: "inc-42".into(),
        generated_at: "2025-11-29T11:05:00Z".into(),
        rca: synthetic_rca(),
        knowledge: vec![KnowledgeHit {
            id: "gpu-memory-leak".into(),
            kind: HitKind::Runbook,
            title: "GPU memory leak on one worker".into(),
            score: 7.25,
            summary: "Memory grows without bound until preemption and OOM.".into(),
            fixes: vec!["restart the worker".into()],
            checklist: vec!["memory flat".into()],
            confirm: vec![],
            signals: vec![],
        }],
        suggestions: vec![
            Advice {
                text: "Drain and restart worker-3".into(),
                source: "rca".into(),
                score: 0.0,
            },
            Advice {
                text: "Pin the allocator setting".into(),
                source: "gpu-memory-leak".into(),
                score: 7.25,
            },
        ],
        checklist: vec![Advice {
            text: "GPU memory of worker-3 flat for 30 minutes".into(),
            source: "gpu-memory-leak".into(),
            score: 7.25,
        }],
        charts: synthetic_charts(),
        narrative: Some(Narrative {
            cause: "worker-3 leaks GPU memory".into(),
            confidence: 0.8,
            fixes: vec!["restart".into()],
            checklist: vec!["memory flat".into()],
        }),
        narrative_note: None,
        incident: Default::default(),
        lead: Default::default(),
    }
}

// ---------------------------------------------------------------- a strict markup checker

/// HTML elements without a closing tag.
const VOID: [&str; 6] = ["meta", "br", "input", "hr", "img", "link"];

/// Checks `text` is well-formed markup: balanced tags, quoted attributes without raw `<`,
/// `&` only as an entity, no raw `<` in text. With `html`, void elements, `<!DOCTYPE>` are
/// allowed and several top-level elements are not an error. Returns the root tag names.
fn check_markup(text: &str, html: bool) -> Result<Vec<String>, String> {
    let bytes = text.as_bytes();
    let mut stack: Vec<String> = Vec::new();
    let mut roots = Vec::new();
    let mut i = 0;
    let check_entities = |s: &str, at: usize| -> Result<(), String> {
        let mut rest = s;
        while let Some(p) = rest.find('&') {
            let after = &rest[p + 1..];
            let end = after
                .find(';')
                .ok_or_else(|| format!("bare & near byte {at}"))?;
            let name = &after[..end];
            let ok = matches!(name, "amp" | "lt" | "gt" | "quot" | "apos")
                || (name.starts_with('#')
                    && name.len() > 1
                    && name[1..].chars().all(|c| c.is_ascii_digit()));
            if !ok {
                return Err(format!("bad entity &{name}; near byte {at}"));
            }
            rest = &after[end + 1..];
        }
        Ok(())
    };
    while i < bytes.len() {
        if bytes[i] != b'<' {
            let next = text[i..].find('<').map_or(bytes.len(), |p| i + p);
            let chunk = &text[i..next];
            check_entities(chunk, i)?;
            if stack.is_empty() && !chunk.trim().is_empty() {
                return Err(format!("text outside the root near byte {i}: {chunk:?}"));
            }
            i = next;
            continue;
        }
        if text[i..].starts_with("<!--") {
            let end = text[i..].find("-->").ok_or("unterminated comment")?;
            i += end + 3;
            continue;
        }
        if text[i..].starts_with("<!") {
            if !html
                || !text[i..]
                    .to_ascii_lowercase()
                    .starts_with("<!doctype html>")
            {
                return Err(format!("unexpected declaration near byte {i}"));
            }
            i += "<!DOCTYPE html>".len();
            continue;
        }
        // a tag: find its end outside quotes
        let mut j = i + 1;
        let mut quote = false;
        while j < bytes.len() && (quote || bytes[j] != b'>') {
            if bytes[j] == b'"' {
                quote = !quote;
            } else if quote && bytes[j] == b'<' {
                return Err(format!("raw < in an attribute near byte {j}"));
            }
            j += 1;
        }
        if j >= bytes.len() {
            return Err(format!("unterminated tag near byte {i}"));
        }
        let tag = &text[i + 1..j];
        i = j + 1;
        if let Some(name) = tag.strip_prefix('/') {
            let name = name.trim();
            match stack.pop() {
                Some(open) if open == name => {}
                Some(open) => return Err(format!("</{name}> closes <{open}>")),
                None => return Err(format!("</{name}> without an open tag")),
            }
            continue;
        }
        let self_closing = tag.ends_with('/');
        let tag = tag.trim_end_matches('/');
        let name_end = tag.find(|c: char| c.is_whitespace()).unwrap_or(tag.len());
        let name = &tag[..name_end];
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == ':')
        {
            return Err(format!("bad tag name {name:?}"));
        }
        // attributes: name="value" pairs, or bare names in HTML
        let mut rest = tag[name_end..].trim_start();
        let mut seen = BTreeSet::new();
        while !rest.is_empty() {
            let key_end = rest
                .find(|c: char| c == '=' || c.is_whitespace())
                .unwrap_or(rest.len());
            let key = &rest[..key_end];
            if key.is_empty()
                || !key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | ':' | '_'))
            {
                return Err(format!("bad attribute name {key:?} in <{name}>"));
            }
            if !seen.insert(key.to_string()) {
                return Err(format!("duplicate attribute {key} in <{name}>"));
            }
            rest = &rest[key_end..];
            if let Some(after) = rest.strip_prefix('=') {
                let after = after
                    .strip_prefix('"')
                    .ok_or_else(|| format!("unquoted attribute {key} in <{name}>"))?;
                let end = after
                    .find('"')
                    .ok_or_else(|| format!("unterminated attribute {key}"))?;
                check_entities(&after[..end], i)?;
                rest = after[end + 1..].trim_start();
            } else if html {
                rest = rest.trim_start();
            } else {
                return Err(format!("attribute {key} without a value in <{name}>"));
            }
        }
        if stack.is_empty() {
            roots.push(name.to_string());
        }
        let void = html && VOID.contains(&name.to_ascii_lowercase().as_str());
        if !self_closing && !void {
            stack.push(name.to_string());
        }
        // the content of <style> is CSS, not markup
        if html && name == "style" {
            let end = text[i..].find("</style>").ok_or("unterminated <style>")?;
            i += end;
        }
    }
    if let Some(open) = stack.pop() {
        return Err(format!("<{open}> never closed"));
    }
    if !html && roots.len() != 1 {
        return Err(format!("expected one root element, found {roots:?}"));
    }
    Ok(roots)
}

/// Distinct values of `attribute="…"` in `text`, unescaped.
fn attribute_values(text: &str, attribute: &str) -> BTreeSet<String> {
    let needle = format!(" {attribute}=\"");
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(p) = rest.find(&needle) {
        let after = &rest[p + needle.len()..];
        let end = after.find('"').unwrap_or(after.len());
        out.insert(unescape(&after[..end]));
        rest = &after[end..];
    }
    out
}

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

fn assert_chart_contract(chart: &Chart) {
    let svg = &chart.svg;
    let roots = check_markup(svg, false)
        .unwrap_or_else(|e| panic!("chart {} is not well-formed: {e}\n{svg}", chart.id));
    assert_eq!(roots, ["svg"], "chart {}", chart.id);
    let open_end = svg.find('>').unwrap();
    let open = &svg[..open_end];
    assert!(
        open.contains(&format!("data-chart=\"{}\"", chart.id)),
        "{}",
        chart.id
    );
    assert!(open.contains("role=\"img\""), "{}", chart.id);
    assert!(open.contains("viewBox=\"0 0 "), "{}", chart.id);
    assert!(
        svg[open_end..].starts_with("><title>"),
        "{}: title first",
        chart.id
    );
    let marks = attribute_values(svg, "data-series");
    let listed: BTreeSet<String> = chart.series.iter().cloned().collect();
    assert_eq!(
        marks, listed,
        "chart {}: the series of the marks and of Chart::series differ",
        chart.id
    );
    assert_eq!(
        listed.len(),
        chart.series.len(),
        "chart {}: duplicate series names",
        chart.id
    );
    if svg.contains("data-empty=\"true\"") {
        assert!(chart.series.is_empty(), "{}", chart.id);
        assert!(svg.contains("no data"), "{}", chart.id);
    } else {
        assert!(!chart.series.is_empty(), "chart {} has no series", chart.id);
        assert!(
            svg.contains("data-axis=\"x\""),
            "chart {} lacks an x axis",
            chart.id
        );
        assert!(
            svg.contains("<text"),
            "chart {} lacks tick labels",
            chart.id
        );
    }
}

// ------------------------------------------------------------------------------- the tests

#[test]
fn markup_checker_rejects_broken_markup() {
    // the checker the chart tests rely on must be able to fail
    for bad in [
        "<svg><g></svg>",
        "<svg><title>a & b</title></svg>",
        "<svg a=\"<\"></svg>",
        "<svg a=b></svg>",
        "<svg></svg><svg></svg>",
        "<svg><text>x < y</text></svg>",
        "<svg><rect></g></svg>",
        "<svg>",
    ] {
        assert!(check_markup(bad, false).is_err(), "accepted {bad}");
    }
    assert!(check_markup("<svg a=\"1 &amp; 2\"><g/><text>&lt;</text></svg>", false).is_ok());
}

#[test]
fn every_chart_is_well_formed_and_carries_its_series() {
    let report = synthetic_report();
    let charts = render_all(&report);
    let ids: Vec<&str> = charts.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "latency-heatmap",
            "phase-breakdown",
            "contribution",
            "template-rates",
            "resources",
            "flame"
        ]
    );
    for chart in &charts {
        assert_chart_contract(chart);
        assert!(
            !chart.svg.contains("data-empty"),
            "chart {} rendered empty from full data",
            chart.id
        );
    }
    let by_id: BTreeMap<&str, &Chart> = charts.iter().map(|c| (c.id.as_str(), c)).collect();
    assert_eq!(by_id["latency-heatmap"].series, ["requests"]);
    assert_eq!(
        by_id["phase-breakdown"].series,
        ["queue", "prefill", "decode", "other"]
    );
    assert_eq!(by_id["contribution"].series, ["slice", "rest"]);
    assert_eq!(by_id["template-rates"].series, ["t-1", "t-2"]);
    assert_eq!(
        by_id["resources"].series,
        [
            "gpu_memory_used_bytes/worker-3",
            "kv_cache_usage_ratio/worker-3",
            "requests_waiting/worker-3"
        ]
    );
    assert_eq!(
        by_id["flame"].series,
        [
            "total", "slice", "queue", "prefill", "decode", "other", "rest"
        ]
    );
    // the onset is marked with a line and a label on every time chart
    for id in [
        "latency-heatmap",
        "contribution",
        "template-rates",
        "resources",
    ] {
        let svg = &by_id[id].svg;
        assert!(
            svg.contains("data-marker=\"onset\""),
            "{id} lacks the onset line"
        );
        assert!(
            svg.contains(">onset 10:40</text>"),
            "{id} lacks the onset label"
        );
    }
    // one onset line per resource panel
    assert_eq!(
        by_id["resources"]
            .svg
            .matches("data-marker=\"onset\"")
            .count(),
        3
    );
    // the heatmap draws one cell per non-zero count
    let cells = synthetic_charts()
        .heatmap
        .counts
        .iter()
        .flatten()
        .filter(|n| **n > 0)
        .count();
    assert_eq!(
        by_id["latency-heatmap"]
            .svg
            .matches("data-series=\"requests\"")
            .count(),
        cells
    );
    // windows are marked behind the time charts
    assert!(
        by_id["latency-heatmap"]
            .svg
            .contains("data-marker=\"baseline-window\"")
    );
    assert!(
        by_id["latency-heatmap"]
            .svg
            .contains("data-marker=\"incident-window\"")
    );
}

#[test]
fn charts_without_data_render_small_empty_svgs() {
    let mut report = synthetic_report();
    report.charts = ChartData::default();
    let charts = render_all(&report);
    assert_eq!(charts.len(), 6);
    for chart in &charts {
        assert!(
            chart.svg.contains("data-empty=\"true\""),
            "{} is not marked empty",
            chart.id
        );
        assert_chart_contract(chart);
    }
    // partly empty: counts all zero, series without points, a flame with no time
    let mut data = synthetic_charts();
    for row in &mut data.heatmap.counts {
        row.iter_mut().for_each(|n| *n = 0);
    }
    data.templates.iter_mut().for_each(|t| t.points.clear());
    data.resources.iter_mut().for_each(|r| r.points.clear());
    data.flame = Some(FlameNode {
        name: "incident requests".into(),
        value_ms: 0.0,
        children: Vec::new(),
    });
    report.charts = data;
    let charts = render_all(&report);
    for chart in &charts {
        assert_chart_contract(chart);
        let empty = chart.svg.contains("data-empty=\"true\"");
        let expect_empty = matches!(
            chart.id.as_str(),
            "latency-heatmap" | "template-rates" | "resources" | "flame"
        );
        assert_eq!(empty, expect_empty, "{}", chart.id);
    }
    // the HTML report still renders every chart
    let html = render::html(&report);
    assert_eq!(html.matches(" data-chart=\"").count(), 6);
}

#[test]
fn log_text_is_escaped_everywhere() {
    let mut report = synthetic_report();
    report.incident_id = "inc-<b>42</b>".into();
    report.narrative_note = Some(EVIL.into());
    report.narrative = None;
    report.knowledge[0].summary = EVIL.into();
    report.suggestions[0].text = EVIL.into();
    report.charts.slice = BTreeMap::from([("tenant".to_string(), EVIL.to_string())]);
    report.charts.contribution.slice = format!("tenant={EVIL}");
    report.rca.root_causes[0].dimensions = report.charts.slice.clone().into();

    let html = render::html(&report);
    check_markup(&html, true).unwrap_or_else(|e| panic!("HTML not well-formed: {e}"));
    assert!(!html.contains("<script"), "raw <script in the HTML");
    assert!(
        !html.contains("<b>42"),
        "raw incident id markup in the HTML"
    );
    assert!(html.contains(EVIL_ESCAPED));
    for chart in render_all(&report) {
        assert!(!chart.svg.contains("<script"), "{}", chart.id);
        assert_chart_contract(&chart);
    }
    let template_chart = render_all(&report)
        .into_iter()
        .find(|c| c.id == "template-rates")
        .unwrap();
    assert!(template_chart.svg.contains(EVIL_ESCAPED));

    let markdown = render::markdown(&report);
    assert!(!markdown.contains("<script"), "raw <script in the Markdown");
    assert!(!markdown.contains('<'), "a raw < in the Markdown");
    assert!(markdown.contains(EVIL_ESCAPED));
}

#[test]
fn rendering_is_deterministic() {
    let a = synthetic_report();
    let b = synthetic_report();
    assert_eq!(render::html(&a), render::html(&b));
    assert_eq!(render::markdown(&a), render::markdown(&b));
    assert_eq!(render_all(&a), render_all(&a.clone()));
    // through JSON and back (stored reports are re-rendered from JSON)
    let text = serde_json::to_string(&a).unwrap();
    let back: Report = serde_json::from_str(&text).unwrap();
    assert_eq!(render::html(&back), render::html(&a));
}

#[test]
fn markdown_has_every_section() {
    let report = synthetic_report();
    let md = render::markdown(&report);
    for needle in [
        "# Incident inc-42",
        "**Verdict:** p99 ttft 820 ms",
        "## Symptom",
        "TTFT p99 820 ms → 1.7 s, ×2.07; onset 2025-11-29T10:40:00",
        "## Root causes",
        "| 1 | worker=worker-3 | 82 % | 41.5 |",
        "## Signals",
        "| gpu\\_memory\\_leak | worker=worker-3 |",
        "GPU memory +18 GiB over 40 min \\| slope",
        "## Log evidence",
        "| 14 | 120 s before | 3 | 420 | worker=worker-3 | 20 record(s) on worker-3 ×18, worker-5 ×2; 17 request(s) served by r2 ×15, r1 ×2; 4 link(s) to other evidence |",
        "## Unexpected log sequences",
        "| (start of session) | no baseline session logged it | 354 of 5002 (7.1 %) | 0 of 12877 (0.0 %) | worker-3 ×205, worker-7 ×149 |",
        "## Runbooks and past incidents",
        "| runbook | GPU memory leak on one worker | gpu-memory-leak | 7.25 |",
        "## Suggestions",
        "- Drain and restart worker-3 — _rca_ (score 0.00)",
        "- Pin the allocator setting — _gpu-memory-leak_ (score 7.25)",
        "## Checklist",
        "- [ ] GPU memory of worker-3 flat for 30 minutes — _gpu-memory-leak_ (score 7.25)",
        "## Narrative",
        "worker-3 leaks GPU memory (confidence 80 %)",
        "## Windows",
        "- incident: 2025-11-29T10:40:00",
        "- chosen by: change in ttft",
    ] {
        assert!(md.contains(needle), "markdown lacks {needle:?}:\n{md}");
    }
    assert!(!md.contains("<svg"), "markdown has no charts");
    let mut without = report.clone();
    without.narrative = None;
    without.narrative_note = Some("no LLM endpoint configured".into());
    assert!(render::markdown(&without).contains("No narrative: no LLM endpoint configured"));
    assert!(render::html(&without).contains("No narrative: no LLM endpoint configured"));
}

#[test]
fn html_is_one_self_contained_file() {
    let report = synthetic_report();
    let html = render::html(&report);
    assert!(html.starts_with("<!DOCTYPE html>"));
    check_markup(&html, true).unwrap_or_else(|e| panic!("HTML not well-formed: {e}"));
    assert!(html.contains("<style>"));
    assert!(html.contains("@media print"));
    for forbidden in [
        "<script",
        "<link",
        " src=",
        "href=\"http",
        "url(",
        "@import",
        "<iframe",
    ] {
        assert!(!html.contains(forbidden), "HTML contains {forbidden}");
    }
    // the same content as the Markdown, plus the charts
    for needle in [
        "worker=worker-3",
        "gpu_memory_leak",
        "GPU memory leak on one worker",
        "7.25",
        "type=\"checkbox\"",
        "gpu-memory-leak · score 7.25",
        "worker-3 leaks GPU memory",
        "change in ttft",
        "<h2>Unexpected log sequences</h2>",
        "354 of 5002 (7.1 %)",
    ] {
        assert!(html.contains(needle), "HTML lacks {needle:?}");
    }
    for chart in render_all(&report) {
        assert!(html.contains(&chart.svg), "HTML lacks chart {}", chart.id);
    }
}

// ------------------------------------------------------------------ chart data from a store

#[test]
fn collect_reads_the_simulated_incident() {
    let sim = support::simulated();
    let (rca, data) = (&sim.rca, &sim.charts);
    assert!(
        rca.incident_window.is_some() && rca.baseline_window.is_some(),
        "the RCA chose windows: {}",
        rca.verdict
    );
    let baseline = data.baseline.expect("baseline window");
    let incident = data.incident.expect("incident window");
    assert!(data.span.is_some() && data.onset_ms.is_some());
    assert_eq!(data.step_ms, MINUTE_MS);

    // heatmap: counts on both sides of the onset, contiguous steps, one row per step
    let heatmap = &data.heatmap;
    assert!(heatmap.sli == "ttft_ms" || heatmap.sli == "e2e_ms");
    assert!(heatmap.total_in(&baseline) > 0, "no baseline counts");
    assert!(heatmap.total_in(&incident) > 0, "no incident counts");
    assert_eq!(heatmap.counts.len(), heatmap.steps_ms.len());
    assert!(
        heatmap
            .steps_ms
            .windows(2)
            .all(|w| w[1] - w[0] == MINUTE_MS)
    );
    assert!(
        heatmap
            .counts
            .iter()
            .all(|row| row.len() + 1 == heatmap.bucket_bounds_ms.len())
    );
    assert!(heatmap.bucket_bounds_ms.windows(2).all(|w| w[1] > w[0]));

    // the slice is the leaking worker, and its requests got slower
    let top = rca.root_causes.first().expect("a root cause");
    assert_eq!(
        top.dimensions.get("worker"),
        Some(&sim.leak_worker),
        "the RCA found the leaking worker: {}",
        rca.verdict
    );
    assert_eq!(top.dimensions, data.slice);
    let phase = |scope: &str, window: &str| {
        data.phases
            .iter()
            .find(|p| p.scope == scope && p.window == window)
            .unwrap_or_else(|| panic!("no {scope} {window} phases: {:?}", data.phases))
    };
    let (slice_before, slice_during) = (phase("slice", "baseline"), phase("slice", "incident"));
    assert!(slice_before.requests > 0 && slice_during.requests > 0);
    assert!(
        slice_during.total_ms() > slice_before.total_ms(),
        "slice phases did not grow: {slice_before:?} → {slice_during:?}"
    );
    let fleet_during = phase("fleet", "incident");
    assert!(fleet_during.requests > slice_during.requests);
    assert!(
        slice_during.total_ms() > fleet_during.total_ms(),
        "the slice is slower than the fleet in the incident"
    );

    // contribution: the slice's over-threshold share rose; points inside the span
    let c = &data.contribution;
    assert!(c.threshold_ms.is_some_and(|t| t > 0.0));
    let share = |w: &WindowMs| {
        let (over, n) = c
            .points
            .iter()
            .filter(|p| w.contains_ms(p.step_ms))
            .fold((0, 0), |(o, n), p| (o + p.slice_over, n + p.slice_requests));
        over as f64 / n.max(1) as f64
    };
    assert!(
        share(&incident) > share(&baseline),
        "slice over-threshold share did not rise"
    );

    // resources: the implicated worker's GPU memory, and it grew
    assert_eq!(data.workers.first(), Some(&sim.leak_worker));
    let memory = data
        .resources
        .iter()
        .find(|r| r.metric == "gpu_memory_used_bytes" && r.worker == sim.leak_worker)
        .expect("GPU memory series of the leaking worker");
    assert!(memory.points.len() > 10);
    let first = memory.points.first().unwrap().1;
    let last = memory.points.last().unwrap().1;
    assert!(last > first, "GPU memory did not grow: {first} → {last}");

    // templates follow the log evidence (ids and texts), at most five
    assert!(data.templates.len() <= 5);
    for (t, e) in data.templates.iter().zip(&rca.log_evidence) {
        assert_eq!(t.template_id, e.template_id);
    }
    if !rca.log_evidence.is_empty() {
        assert!(
            data.templates.iter().any(|t| !t.points.is_empty()),
            "log evidence but no template rates"
        );
    }

    // flame: the incident's time, split into the slice and the rest, then phases
    let flame = data.flame.as_ref().expect("flame");
    assert_eq!(flame.children.len(), 2);
    let sum: f64 = flame.children.iter().map(|c| c.value_ms).sum();
    assert!((sum - flame.value_ms).abs() < 1e-6 * flame.value_ms.max(1.0));
    for child in &flame.children {
        assert_eq!(child.children.len(), 4);
    }

    // the charts of the simulated report keep the contract
    for chart in render_all(&sim.report) {
        assert_chart_contract(&chart);
    }
    // the JSON form reads back (floats may differ in the last bit: compare the exact parts)
    let json = serde_json::to_string(data).unwrap();
    let back: ChartData = serde_json::from_str(&json).unwrap();
    assert_eq!(back.heatmap.counts, data.heatmap.counts);
    assert_eq!(back.heatmap.steps_ms, data.heatmap.steps_ms);
    assert_eq!(back.contribution.points, data.contribution.points);
    assert_eq!(back.templates, data.templates);
    assert_eq!(back.resources.len(), data.resources.len());
    assert_eq!((back.span, back.onset_ms), (data.span, data.onset_ms));
}

#[test]
fn collect_falls_back_without_windows_and_empties_an_unknown_slice() {
    let sim = support::simulated();
    let data = &sim.degraded;
    let span = data.span.expect("a span");
    assert_eq!(
        span.until_ms - span.since_ms,
        60 * MINUTE_MS,
        "the last hour"
    );
    assert_eq!(data.incident, Some(span));
    assert_eq!(data.baseline, None);
    assert_eq!(data.onset_ms, Some(span.since_ms));
    // data end: the simulated half hour ends inside the hour
    let last_step = *sim.charts.heatmap.steps_ms.last().unwrap();
    assert_eq!(span.until_ms, last_step + MINUTE_MS);
    assert_eq!(data.heatmap.sli, "e2e_ms", "no symptom: e2e");
    assert!(data.heatmap.total_in(&span) > 0);
    // only the incident, and no slice rows: no request has the key
    assert_eq!(
        data.phases
            .iter()
            .map(|p| (p.scope.as_str(), p.window.as_str()))
            .collect::<Vec<_>>(),
        [("fleet", "incident")]
    );
    assert_eq!(
        data.slice.get("serving.no_such_key"),
        Some(&"x".to_string())
    );
    assert!(
        data.contribution
            .points
            .iter()
            .all(|p| p.slice_requests == 0)
    );
    assert!(data.contribution.points.iter().any(|p| p.rest_requests > 0));
    assert!(data.templates.is_empty());
    let flame = data.flame.as_ref().expect("flame");
    assert_eq!(
        flame
            .children
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        ["rest"]
    );
    // no worker named and no baseline to compare: no resource series, an empty chart
    assert!(data.workers.is_empty() && data.resources.is_empty());
    let mut report = sim.report.clone();
    report.rca = support::degraded_rca(&sim.rca);
    report.charts = data.clone();
    for chart in render_all(&report) {
        assert_chart_contract(&chart);
    }
}

trait ContainsMs {
    fn contains_ms(&self, ms: i64) -> bool;
}

impl ContainsMs for WindowMs {
    fn contains_ms(&self, ms: i64) -> bool {
        ms >= self.since_ms && ms < self.until_ms
    }
}

// -------------------------------------------------------------------- headless Chromium

/// For every `svg[data-chart]`: its id, rendered size, emptiness and the distinct series of
/// its marks; plus the page's width (no horizontal scrolling at 1280 px).
const INSPECT_CHARTS: &str = r#"
const charts = [...document.querySelectorAll('svg[data-chart]')].map(svg => {
  const box = svg.getBoundingClientRect();
  const marks = [...svg.querySelectorAll('[data-series]')];
  const series = [...new Set(marks.map(m => m.getAttribute('data-series')))];
  const visible = marks.filter(m => { const b = m.getBoundingClientRect(); return b.width > 0 || b.height > 0; }).length;
  return { id: svg.getAttribute('data-chart'), width: box.width, height: box.height,
           empty: svg.getAttribute('data-empty') === 'true', series, marks: marks.length, visible,
           onset: svg.querySelectorAll('[data-marker="onset"]').length };
});
return { charts, scrollWidth: document.documentElement.scrollWidth,
         innerWidth: window.innerWidth, scrollHeight: document.documentElement.scrollHeight,
         title: document.title };
"#;

/// The report in headless Chromium (the WebDriver client is `infersight_testkit::chromium`):
/// no console errors, every chart laid out with its series, screenshots under
/// `target/report-screenshots/`. The log channel is proven live at the end by a deliberate
/// `console.error`, so "no errors" cannot pass vacuously.
#[test]
fn html_report_renders_in_headless_chromium() {
    if !chromium::available("html_report_renders_in_headless_chromium") {
        return;
    }
    let sim = support::simulated();
    let report = &sim.report;
    let expected: BTreeMap<String, Chart> = render_all(report)
        .into_iter()
        .map(|c| (c.id.clone(), c))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    std::fs::write(&page, render::html(report)).unwrap();
    let profile = tempfile::tempdir().unwrap();

    let mut driver = Driver::start();
    driver.open_session(profile.path());
    driver.set_window_size(1280, 800);
    driver.navigate(&format!("file://{}", page.display()));

    // (a) no console errors; every chart laid out with its series
    let errors = driver.console_errors();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    let inspected = driver.execute(INSPECT_CHARTS, json!([]));
    assert!(
        inspected["title"]
            .as_str()
            .is_some_and(|t| t.contains(&report.incident_id))
    );
    let charts = inspected["charts"].as_array().expect("charts");
    assert_eq!(
        charts.len(),
        expected.len(),
        "charts on the page: {charts:#?}"
    );
    for chart in charts {
        let id = chart["id"].as_str().unwrap();
        let want = expected
            .get(id)
            .unwrap_or_else(|| panic!("unexpected chart {id}"));
        let (w, h) = (
            chart["width"].as_f64().unwrap(),
            chart["height"].as_f64().unwrap(),
        );
        assert!(w > 100.0 && h > 20.0, "chart {id} laid out at {w}×{h}");
        let series: BTreeSet<String> = chart["series"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect();
        let want_series: BTreeSet<String> = want.series.iter().cloned().collect();
        assert_eq!(series, want_series, "series of chart {id}");
        if !chart["empty"].as_bool().unwrap() {
            assert!(
                chart["visible"].as_u64().unwrap() > 0,
                "chart {id} has no visible marks"
            );
        }
    }
    for id in [
        "latency-heatmap",
        "phase-breakdown",
        "contribution",
        "flame",
    ] {
        let chart = charts.iter().find(|c| c["id"] == json!(id)).unwrap();
        assert_eq!(chart["empty"], json!(false), "chart {id} is empty");
    }
    let heatmap = charts
        .iter()
        .find(|c| c["id"] == json!("latency-heatmap"))
        .unwrap();
    assert_eq!(heatmap["onset"], json!(1), "the heatmap's onset line");
    let (scroll_width, inner_width) = (
        inspected["scrollWidth"].as_f64().unwrap(),
        inspected["innerWidth"].as_f64().unwrap(),
    );
    assert!(
        scroll_width <= inner_width,
        "the page scrolls sideways at 1280 px: {scroll_width} > {inner_width}"
    );

    // (b) screenshots: the first screen at 1280×800, then the whole page
    let out = chromium::screenshot_dir(env!("CARGO_MANIFEST_DIR"), "report-screenshots");
    let first_screen = driver.screenshot();
    let full_height = inspected["scrollHeight"].as_f64().unwrap().ceil() as u64;
    driver.set_window_size(1280, full_height.clamp(800, 12_000));
    let full_page = driver.screenshot();
    for (name, png) in [
        ("report-1280x800.png", &first_screen),
        ("report-full.png", &full_page),
    ] {
        driver.check_and_save_screenshot(png, &out, name);
    }

    // the console channel works: a deliberate error is seen
    driver.assert_console_channel_works();

    // keep a copy of the page beside the screenshots for the CI artifacts
    let mut html = String::new();
    std::fs::File::open(&page)
        .unwrap()
        .read_to_string(&mut html)
        .unwrap();
    std::fs::write(out.join("report.html"), html).unwrap();
}

/// The incident section of a report whose incident the watcher opened and acted on.
fn incident_section() -> infersight_report::document::IncidentSection {
    use infersight_rca::incidents::{ActionRecord, IncidentState, TimelineEntry};
    let entry = |at: &str, event: &str, detail: &str| TimelineEntry {
        at: at.into(),
        event: event.into(),
        detail: detail.into(),
    };
    infersight_report::document::IncidentSection {
        state: Some(IncidentState::Resolved),
        severity: Some("critical".into()),
        onset: Some("2025-11-29T10:40:00.000Z".into()),
        detected_at: Some("2025-11-29T10:42:00.000Z".into()),
        resolved_at: Some("2025-11-29T11:05:00.000Z".into()),
        detections: vec!["sli_change (fleet): ttft rose".into()],
        actions: vec![ActionRecord {
            at: "2025-11-29T10:44:00.000Z".into(),
            action: "route_to_fallback".into(),
            target: format!("tenant={EVIL}"),
            outcome: "delivered".into(),
            policy: Some("fallback-on-ttft".into()),
            detail: None,
        }],
        timeline: vec![
            entry("2025-11-29T10:40:00.000Z", "onset", ""),
            entry("2025-11-29T10:42:00.000Z", "detected", "ttft rose"),
            entry(
                "2025-11-29T10:44:00.000Z",
                "action",
                "route_to_fallback: delivered",
            ),
            entry(
                "2025-11-29T10:44:05.000Z",
                "notified",
                "alertmanager opened: sent",
            ),
            entry("2025-11-29T11:05:00.000Z", "resolved", "quiet for 10 steps"),
        ],
    }
}

#[test]
fn the_incident_section_shows_state_actions_and_timeline_in_every_format() {
    let plain = synthetic_report();
    assert!(!render::html(&plain).contains("<h2>Incident</h2>"));
    assert!(!render::markdown(&plain).contains("## Incident\n"));
    assert!(
        serde_json::to_value(&plain)
            .unwrap()
            .get("incident")
            .is_none()
    );

    let mut report = synthetic_report();
    report.incident = incident_section();
    let html = render::html(&report);
    check_markup(&html, true).unwrap_or_else(|e| panic!("HTML not well-formed: {e}"));
    for needle in [
        "<h2>Incident</h2>",
        "<th>state</th><td>resolved</td>",
        "<th>severity</th><td>critical</td>",
        "<td>route_to_fallback</td>",
        "<td>delivered</td>",
        "<td>fallback-on-ttft</td>",
        "<td>notified</td>",
        EVIL_ESCAPED,
    ] {
        assert!(html.contains(needle), "HTML lacks {needle}");
    }
    assert!(!html.contains("<script"));
    let markdown = render::markdown(&report);
    assert!(markdown.contains("## Incident"), "{markdown}");
    assert!(
        markdown.contains("| 2025-11-29T10:44:00.000Z | route\\_to\\_fallback |"),
        "{markdown}"
    );
    assert!(!markdown.contains('<'));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(
        json["incident"]["actions"][0]["action"],
        "route_to_fallback"
    );
    assert_eq!(json["incident"]["actions"][0]["outcome"], "delivered");
    assert_eq!(json["incident"]["state"], "resolved");
    assert_eq!(json["incident"]["timeline"].as_array().unwrap().len(), 5);
    let back: Report = serde_json::from_value(json).unwrap();
    assert_eq!(back.incident, report.incident);
}
