//! SVG charts drawn from `ChartData`, self-contained (no scripts, no external fonts), for the HTML
//! report and the UI.
//!
//! Drawn by hand as plain SVG text so the output is small, needs no runtime and is byte-for-byte
//! deterministic (same data → same SVG). Conventions every chart keeps, which the browser test and
//! the UI rely on:
//! - the root `<svg>` carries `data-chart="<id>"`, `role="img"`, a `<title>` and a `viewBox`;
//! - every mark of a series carries `data-series="<name>"`, and [`Chart::series`] lists the names;
//! - markers that are not data (onset line, windows) carry `data-marker`;
//! - a chart without data is a small SVG with `data-empty="true"` saying "no data";
//! - every text (template texts come from logs) is escaped.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::data::{
    ChartData, Contribution, ContributionPoint, FlameNode, PHASES, RESOURCE_METRICS, WindowMs,
    describe_slice,
};
use crate::document::Report;

/// One rendered chart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chart {
    /// Stable id: `latency-heatmap`, `phase-breakdown`, `contribution`, `template-rates`,
    /// `resources`, `flame`.
    pub id: String,
    pub title: String,
    pub svg: String,
    /// Names of the series whose marks carry `data-series`; empty for a chart without data.
    pub series: Vec<String>,
}

/// Every chart of the report, in a fixed order; charts without data render as "no data".
pub fn render_all(report: &Report) -> Vec<Chart> {
    let data = &report.charts;
    vec![
        heatmap(data),
        phase_breakdown(data),
        contribution(data),
        template_rates(data),
        resources(data),
        flame(data),
    ]
}

// ------------------------------------------------------------------------------ SVG helpers

const WIDTH: f64 = 880.0;
const FONT: &str = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif";
const AXIS_COLOUR: &str = "#555";
const GRID_COLOUR: &str = "#e5e5e5";
const ONSET_COLOUR: &str = "#c0392b";
/// The series colours: Okabe–Ito, told apart under every common colour-vision deficiency. The
/// web UI draws with the same list (its `charts.js` `PALETTE`; a server test keeps them equal).
pub const PALETTE: [&str; 8] = [
    "#0072b2", "#e69f00", "#009e73", "#d55e00", "#cc79a7", "#56b4e9", "#f0e442", "#000000",
];

/// The heatmap's scale from few to many: reversed viridis (perceptually even, colour-blind
/// safe), shared with the web UI's `HEAT_STOPS`.
pub const HEAT_STOPS: [&str; 5] = ["#fde725", "#5ec962", "#21918c", "#3b528b", "#440154"];

/// Escapes text for XML/HTML content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // control characters are not allowed in XML 1.0
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// A coordinate with one decimal; never `-0.0`, never NaN.
fn c(v: f64) -> String {
    let v = if v.is_finite() { v } else { 0.0 };
    let text = format!("{v:.1}");
    if text == "-0.0" { "0.0".into() } else { text }
}

fn phase_colour(phase: &str) -> &'static str {
    match phase {
        "queue" => "#8e6bbf",
        "prefill" => "#2b8cbe",
        "decode" => "#41ab5d",
        _ => "#b0b0b0",
    }
}

fn phase_colour_at(index: usize) -> &'static str {
    phase_colour(PHASES.get(index).copied().unwrap_or("other"))
}

fn truncate(text: &str, max_chars: usize) -> String {
    let text: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().count() <= max_chars {
        text
    } else {
        let mut out: String = text.chars().take(max_chars.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

struct Svg {
    out: String,
}

impl Svg {
    fn new(id: &str, title: &str, height: f64) -> Svg {
        let mut out = String::new();
        let _ = write!(
            out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" data-chart=\"{}\" role=\"img\" \
             viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\" font-family=\"{FONT}\" font-size=\"11\">\
             <title>{}</title>",
            escape(id),
            escape(title),
            w = c(WIDTH),
            h = c(height),
        );
        Svg { out }
    }

    fn push(&mut self, text: &str) {
        self.out.push_str(text);
    }

    fn text(&mut self, x: f64, y: f64, anchor: &str, extra: &str, text: &str) {
        let _ = write!(
            self.out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"{anchor}\"{extra}>{}</text>",
            c(x),
            c(y),
            escape(text)
        );
    }

    fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, extra: &str) {
        let _ = write!(
            self.out,
            "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"{extra}/>",
            c(x1),
            c(y1),
            c(x2),
            c(y2)
        );
    }

    fn finish(mut self) -> String {
        self.out.push_str("</svg>");
        self.out
    }
}

/// A chart with nothing to draw: small, valid, and marked so the UI and tests can tell.
fn empty_chart(id: &str, title: &str, reason: &str) -> Chart {
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart chart-empty\" data-chart=\"{}\" \
         data-empty=\"true\" role=\"img\" viewBox=\"0 0 {w} 60\" width=\"{w}\" height=\"60\" \
         font-family=\"{FONT}\" font-size=\"12\"><title>{} (no data)</title>\
         <rect x=\"0.5\" y=\"0.5\" width=\"{w1}\" height=\"59\" fill=\"#fafafa\" stroke=\"#ddd\"/>\
         <text x=\"{cx}\" y=\"35\" text-anchor=\"middle\" fill=\"#777\">no data: {}</text></svg>",
        escape(id),
        escape(title),
        escape(reason),
        w = c(WIDTH),
        w1 = c(WIDTH - 1.0),
        cx = c(WIDTH / 2.0),
    );
    Chart {
        id: id.into(),
        title: title.into(),
        svg,
        series: Vec::new(),
    }
}

/// A linear map from a domain to a pixel range.
#[derive(Debug, Clone, Copy)]
struct Scale {
    d0: f64,
    d1: f64,
    r0: f64,
    r1: f64,
}

impl Scale {
    fn new(d0: f64, d1: f64, r0: f64, r1: f64) -> Scale {
        let d1 = if d1 > d0 { d1 } else { d0 + 1.0 };
        Scale { d0, d1, r0, r1 }
    }

    fn at(&self, v: f64) -> f64 {
        self.r0 + (v - self.d0) / (self.d1 - self.d0) * (self.r1 - self.r0)
    }
}

/// "Nice" ticks (1, 2, 5 × 10^k steps) from 0 (or `lo`) to at least `hi`; returns the ticks
/// and the number of decimals their labels need.
fn nice_ticks(lo: f64, hi: f64, target: usize) -> (Vec<f64>, usize) {
    let hi = if hi > lo { hi } else { lo + 1.0 };
    let raw = (hi - lo) / target.max(1) as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    };
    let first = (lo / step).floor() * step;
    let mut ticks = Vec::new();
    let mut i = 0;
    loop {
        let t = first + step * i as f64;
        ticks.push(t);
        if t >= hi - step * 1e-9 || i > 100 {
            break;
        }
        i += 1;
    }
    (ticks, decimals)
}

fn time_label(ms: i64, long: bool) -> String {
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(t) if long => t.format("%m-%d %H:%M").to_string(),
        Some(t) => t.format("%H:%M").to_string(),
        None => ms.to_string(),
    }
}

/// Tick times (ms) on whole multiples of a round number of minutes, at most about `target`.
fn time_ticks(since_ms: i64, until_ms: i64, target: i64) -> Vec<i64> {
    const MINUTES: [i64; 13] = [1, 2, 5, 10, 15, 20, 30, 60, 120, 180, 360, 720, 1440];
    let span_min = ((until_ms - since_ms) / 60_000).max(1);
    let step_min = MINUTES
        .iter()
        .copied()
        .find(|m| span_min / m <= target)
        .unwrap_or(1440 * ((span_min / 1440 / target.max(1)) + 1));
    let step = step_min * 60_000;
    let mut t = since_ms.div_euclid(step) * step;
    if t < since_ms {
        t += step;
    }
    let mut out = Vec::new();
    while t <= until_ms {
        out.push(t);
        t += step;
    }
    out
}

/// The plot rectangle of a chart.
#[derive(Debug, Clone, Copy)]
struct Plot {
    left: f64,
    top: f64,
    right: f64,
    bottom: f64,
}

/// A time axis under the plot, with vertical grid lines.
fn time_axis(svg: &mut Svg, plot: &Plot, x: &Scale, since_ms: i64, until_ms: i64) {
    let long = until_ms - since_ms > 86_400_000;
    svg.push("<g class=\"axis axis-x\" data-axis=\"x\">");
    svg.line(
        plot.left,
        plot.bottom,
        plot.right,
        plot.bottom,
        &format!(" stroke=\"{AXIS_COLOUR}\""),
    );
    for t in time_ticks(since_ms, until_ms, 8) {
        let px = x.at(t as f64);
        svg.line(
            px,
            plot.bottom,
            px,
            plot.bottom + 4.0,
            &format!(" stroke=\"{AXIS_COLOUR}\""),
        );
        svg.text(
            px,
            plot.bottom + 16.0,
            "middle",
            " fill=\"#333\"",
            &time_label(t, long),
        );
    }
    svg.text(
        plot.right,
        plot.bottom + 30.0,
        "end",
        " fill=\"#666\"",
        "time (UTC)",
    );
    svg.push("</g>");
}

/// A numeric y axis with horizontal grid lines; `label` formats a tick value.
fn value_axis(
    svg: &mut Svg,
    plot: &Plot,
    y: &Scale,
    ticks: &[f64],
    label: &dyn Fn(f64) -> String,
    caption: &str,
) {
    svg.push("<g class=\"axis axis-y\" data-axis=\"y\">");
    for t in ticks {
        let py = y.at(*t);
        svg.line(
            plot.left,
            py,
            plot.right,
            py,
            &format!(" stroke=\"{GRID_COLOUR}\""),
        );
        svg.text(
            plot.left - 6.0,
            py + 4.0,
            "end",
            " fill=\"#333\"",
            &label(*t),
        );
    }
    svg.line(
        plot.left,
        plot.top,
        plot.left,
        plot.bottom,
        &format!(" stroke=\"{AXIS_COLOUR}\""),
    );
    svg.text(
        plot.left,
        plot.top - 8.0,
        "start",
        " fill=\"#666\"",
        caption,
    );
    svg.push("</g>");
}

/// Shaded baseline and incident windows behind the plot.
fn window_bands(svg: &mut Svg, plot: &Plot, x: &Scale, data: &ChartData) {
    for (name, window, colour) in [
        ("baseline", data.baseline, "#3498db"),
        ("incident", data.incident, "#e74c3c"),
    ] {
        let Some(w) = window else { continue };
        let x0 = x.at(w.since_ms as f64).clamp(plot.left, plot.right);
        let x1 = x.at(w.until_ms as f64).clamp(plot.left, plot.right);
        if x1 <= x0 {
            continue;
        }
        let _ = write!(
            svg.out,
            "<rect data-marker=\"{name}-window\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{colour}\" fill-opacity=\"0.06\"/>",
            c(x0),
            c(plot.top),
            c(x1 - x0),
            c(plot.bottom - plot.top)
        );
        // a narrow band at an edge still gets a readable label
        let centre = ((x0 + x1) / 2.0).clamp(plot.left + 30.0, plot.right - 30.0);
        svg.text(
            centre,
            plot.top + 11.0,
            "middle",
            &format!(" fill=\"{colour}\" data-marker=\"{name}-label\""),
            name,
        );
    }
}

/// The onset as a dashed vertical line with a label.
fn onset_line(svg: &mut Svg, plot: &Plot, x: &Scale, onset_ms: Option<i64>, long: bool) {
    let Some(onset) = onset_ms else { return };
    let px = x.at(onset as f64);
    if px < plot.left - 0.5 || px > plot.right + 0.5 {
        return;
    }
    svg.line(
        px,
        plot.top,
        px,
        plot.bottom,
        &format!(
            " class=\"onset\" data-marker=\"onset\" stroke=\"{ONSET_COLOUR}\" stroke-width=\"1.5\" stroke-dasharray=\"5 3\""
        ),
    );
    let anchor = if px > plot.right - 80.0 {
        "end"
    } else {
        "start"
    };
    let dx = if anchor == "end" { -4.0 } else { 4.0 };
    svg.text(
        px + dx,
        plot.top + 24.0,
        anchor,
        &format!(" fill=\"{ONSET_COLOUR}\" font-weight=\"600\" data-marker=\"onset-label\""),
        &format!("onset {}", time_label(onset, long)),
    );
}

/// A horizontal legend; returns the y under it.
fn legend(svg: &mut Svg, x0: f64, y: f64, items: &[(String, &str)]) -> f64 {
    let mut x = x0;
    let mut y = y;
    svg.push("<g class=\"legend\">");
    for (label, colour) in items {
        let label = truncate(label, 100);
        let width = 22.0 + 6.2 * label.chars().count() as f64;
        if x + width > WIDTH - 10.0 && x > x0 {
            x = x0;
            y += 16.0;
        }
        let _ = write!(
            svg.out,
            "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{colour}\"/>",
            c(x),
            c(y - 9.0)
        );
        svg.text(x + 14.0, y, "start", " fill=\"#333\"", &label);
        x += width + 12.0;
    }
    svg.push("</g>");
    y + 16.0
}

fn format_ms(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v >= 10_000.0 {
        format!("{:.0} s", v / 1000.0)
    } else if v >= 1000.0 {
        let s = format!("{:.1}", v / 1000.0);
        format!("{} s", s.trim_end_matches('0').trim_end_matches('.'))
    } else if v >= 1.0 {
        format!("{v:.0} ms")
    } else {
        format!("{v:.2} ms")
    }
}

fn format_count(v: f64) -> String {
    if v.abs() >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v.abs() >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if v.abs() >= 1000.0 {
        format!("{:.1}k", v / 1e3)
    } else if v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        let text = format!("{v:.2}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

// -------------------------------------------------------------------------------- heatmap

fn heat_colour(t: f64) -> String {
    // along HEAT_STOPS, evenly spaced, interpolated in RGB (as the UI's heatColour)
    let channel = |hex: &str, i: usize| {
        hex.get(1 + 2 * i..3 + 2 * i)
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .map_or(0.0, f64::from)
    };
    let x = t.clamp(0.0, 1.0) * (HEAT_STOPS.len() - 1) as f64;
    let i = (x.floor() as usize).min(HEAT_STOPS.len() - 2);
    let f = x - i as f64;
    let (a, b) = (HEAT_STOPS[i], HEAT_STOPS[i + 1]);
    let rgb = [0, 1, 2].map(|k| channel(a, k) + (channel(b, k) - channel(a, k)) * f);
    format!(
        "#{:02x}{:02x}{:02x}",
        rgb[0].round() as u8,
        rgb[1].round() as u8,
        rgb[2].round() as u8
    )
}

fn heatmap(data: &ChartData) -> Chart {
    let id = "latency-heatmap";
    let sli = if data.heatmap.sli.is_empty() {
        "latency".to_string()
    } else {
        data.heatmap.sli.clone()
    };
    let title = format!("{sli} distribution per minute (requests per latency bucket)");
    let h = &data.heatmap;
    if h.is_empty() || h.bucket_bounds_ms.len() < 2 || h.steps_ms.is_empty() {
        return empty_chart(id, &title, "no request latencies in the windows");
    }
    let height = 330.0;
    let plot = Plot {
        left: 64.0,
        top: 34.0,
        right: WIDTH - 90.0,
        bottom: height - 44.0,
    };
    let step_ms = data.step_ms.max(1);
    let since = h.steps_ms[0];
    let until = h.steps_ms[h.steps_ms.len() - 1] + step_ms;
    let x = Scale::new(since as f64, until as f64, plot.left, plot.right);
    let buckets = h.bucket_bounds_ms.len() - 1;
    let y = Scale::new(0.0, buckets as f64, plot.bottom, plot.top);
    let max = h.counts.iter().flatten().copied().max().unwrap_or(1).max(1);
    let mut svg = Svg::new(id, &title, height);
    let _ = write!(
        svg.out,
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#fcfcfc\"/>",
        c(plot.left),
        c(plot.top),
        c(plot.right - plot.left),
        c(plot.bottom - plot.top)
    );
    svg.push("<g data-series-group=\"requests\">");
    let cell_w = x.at((since + step_ms) as f64) - x.at(since as f64);
    let cell_h = y.at(0.0) - y.at(1.0);
    for (step, row) in h.steps_ms.iter().zip(&h.counts) {
        for (b, n) in row.iter().enumerate() {
            if *n == 0 {
                continue;
            }
            let t = (*n as f64).ln_1p() / (max as f64).ln_1p();
            let _ = write!(
                svg.out,
                "<rect data-series=\"requests\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{} · {}–{}: {n} requests</title></rect>",
                c(x.at(*step as f64)),
                c(y.at(b as f64 + 1.0)),
                c(cell_w + 0.3),
                c(cell_h + 0.3),
                heat_colour(t),
                escape(&time_label(*step, false)),
                escape(&format_ms(h.bucket_bounds_ms[b])),
                escape(&format_ms(h.bucket_bounds_ms[b + 1])),
            );
        }
    }
    svg.push("</g>");
    // y axis: bucket bounds, about eight labels
    svg.push("<g class=\"axis axis-y\" data-axis=\"y\">");
    let every = buckets.div_ceil(8).max(1);
    for b in (0..=buckets).step_by(every) {
        let py = y.at(b as f64);
        svg.line(
            plot.left - 4.0,
            py,
            plot.left,
            py,
            &format!(" stroke=\"{AXIS_COLOUR}\""),
        );
        svg.text(
            plot.left - 6.0,
            py + 4.0,
            "end",
            " fill=\"#333\"",
            &format_ms(h.bucket_bounds_ms[b]),
        );
    }
    svg.line(
        plot.left,
        plot.top,
        plot.left,
        plot.bottom,
        &format!(" stroke=\"{AXIS_COLOUR}\""),
    );
    svg.text(
        plot.left,
        plot.top - 8.0,
        "start",
        " fill=\"#666\"",
        &format!("{sli} (log scale)"),
    );
    svg.push("</g>");
    time_axis(&mut svg, &plot, &x, since, until);
    window_bands(&mut svg, &plot, &x, data);
    onset_line(
        &mut svg,
        &plot,
        &x,
        data.onset_ms,
        until - since > 86_400_000,
    );
    // colour legend: five swatches from 1 request to the maximum
    svg.push("<g class=\"legend\" data-legend=\"colour\">");
    let lx = plot.right + 14.0;
    svg.text(lx, plot.top + 4.0, "start", " fill=\"#666\"", "requests");
    for i in 0..5 {
        let t = i as f64 / 4.0;
        let n = ((max as f64 + 1.0).powf(t) - 1.0).round().max(1.0);
        let py = plot.top + 14.0 + i as f64 * 20.0;
        let _ = write!(
            svg.out,
            "<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"14\" fill=\"{}\" stroke=\"#ccc\"/>",
            c(lx),
            c(py),
            heat_colour(t)
        );
        svg.text(
            lx + 20.0,
            py + 11.0,
            "start",
            " fill=\"#333\"",
            &format_count(n),
        );
    }
    svg.push("</g>");
    Chart {
        id: id.into(),
        title,
        svg: svg.finish(),
        series: vec!["requests".into()],
    }
}

// ------------------------------------------------------------------------- phase breakdown

fn phase_breakdown(data: &ChartData) -> Chart {
    let id = "phase-breakdown";
    let title = "Mean request time by phase: baseline vs incident".to_string();
    let rows: Vec<_> = data.phases.iter().filter(|p| p.requests > 0).collect();
    if rows.is_empty() {
        return empty_chart(id, &title, "no requests with phase times");
    }
    let row_h = 30.0;
    let height = 70.0 + row_h * rows.len() as f64 + 40.0;
    let plot = Plot {
        left: 230.0,
        top: 30.0,
        right: WIDTH - 90.0,
        bottom: 30.0 + row_h * rows.len() as f64,
    };
    let max = rows.iter().map(|r| r.total_ms()).fold(0.0, f64::max);
    let (ticks, _) = nice_ticks(0.0, max.max(1.0), 6);
    let top_tick = *ticks.last().unwrap_or(&1.0);
    let x = Scale::new(0.0, top_tick, plot.left, plot.right);
    let mut svg = Svg::new(id, &title, height);
    // x axis (ms) with grid
    svg.push("<g class=\"axis axis-x\" data-axis=\"x\">");
    for t in &ticks {
        let px = x.at(*t);
        svg.line(
            px,
            plot.top,
            px,
            plot.bottom,
            &format!(" stroke=\"{GRID_COLOUR}\""),
        );
        svg.text(
            px,
            plot.bottom + 16.0,
            "middle",
            " fill=\"#333\"",
            &format_ms(*t),
        );
    }
    svg.line(
        plot.left,
        plot.bottom,
        plot.right,
        plot.bottom,
        &format!(" stroke=\"{AXIS_COLOUR}\""),
    );
    svg.text(
        plot.right,
        plot.bottom + 30.0,
        "end",
        " fill=\"#666\"",
        "mean time per request",
    );
    svg.push("</g>");
    // y axis: one category per row
    svg.push("<g class=\"axis axis-y\" data-axis=\"y\">");
    for (i, row) in rows.iter().enumerate() {
        let py = plot.top + row_h * i as f64 + row_h / 2.0 + 4.0;
        let scope = if row.scope == "fleet" {
            "fleet".to_string()
        } else {
            truncate(&row.label, 26)
        };
        svg.text(
            plot.left - 8.0,
            py,
            "end",
            " fill=\"#333\"",
            &format!("{scope} · {} ({} req)", row.window, row.requests),
        );
    }
    svg.line(
        plot.left,
        plot.top,
        plot.left,
        plot.bottom,
        &format!(" stroke=\"{AXIS_COLOUR}\""),
    );
    svg.push("</g>");
    let mut present = [false; 4];
    for (i, row) in rows.iter().enumerate() {
        let y0 = plot.top + row_h * i as f64 + 5.0;
        let mut acc = 0.0;
        for (p, value) in row.values().iter().enumerate() {
            if *value <= 0.0 {
                continue;
            }
            present[p] = true;
            let x0 = x.at(acc);
            let x1 = x.at(acc + value);
            let _ = write!(
                svg.out,
                "<rect data-series=\"{phase}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{} {} · {phase}: {}</title></rect>",
                c(x0),
                c(y0),
                c((x1 - x0).max(0.5)),
                c(row_h - 10.0),
                phase_colour_at(p),
                escape(&row.label),
                escape(&row.window),
                escape(&format_ms(*value)),
                phase = PHASES[p],
            );
            acc += value;
        }
        svg.text(
            x.at(acc) + 4.0,
            y0 + row_h / 2.0,
            "start",
            " fill=\"#333\"",
            &format_ms(acc),
        );
    }
    let items: Vec<(String, &str)> = PHASES
        .iter()
        .enumerate()
        .filter(|(i, _)| present[*i])
        .map(|(_, p)| (p.to_string(), phase_colour(p)))
        .collect();
    legend(&mut svg, plot.left, height - 10.0, &items);
    Chart {
        id: id.into(),
        title,
        svg: svg.finish(),
        series: PHASES
            .iter()
            .enumerate()
            .filter(|(i, _)| present[*i])
            .map(|(_, p)| p.to_string())
            .collect(),
    }
}

// ----------------------------------------------------------------------------- contribution

/// Colours of the contribution chart's series: the root-cause slice, and the rest of the fleet.
const SLICE_COLOUR: &str = "#d62728";
const REST_COLOUR: &str = "#7fb3d5";

fn contribution(data: &ChartData) -> Chart {
    let id = "contribution";
    let contribution = &data.contribution;
    let title = contribution_title(contribution);
    let total: u64 = contribution
        .points
        .iter()
        .map(|p| p.slice_requests + p.rest_requests)
        .sum();
    if contribution.points.is_empty() || total == 0 {
        return empty_chart(id, &title, "no requests in the windows");
    }
    let height = 300.0;
    let plot = Plot {
        left: 64.0,
        top: 30.0,
        right: WIDTH - 20.0,
        bottom: height - 62.0,
    };
    let step_ms = data.step_ms.max(1);
    let (since, until) = contribution_span(data, step_ms);
    let x = Scale::new(since as f64, until as f64, plot.left, plot.right);
    let (y, ticks) = over_threshold_scale(&contribution.points, &plot);
    let mut svg = Svg::new(id, &title, height);
    window_bands(&mut svg, &plot, &x, data);
    value_axis(
        &mut svg,
        &plot,
        &y,
        &ticks,
        &format_count,
        "requests over threshold",
    );
    let bar_w = (x.at((since + step_ms) as f64) - x.at(since as f64) - 1.0).max(0.8);
    let mut groups = contribution_bars(&contribution.points, &x, &y, bar_w);
    let (series, items) = contribution_series(contribution);
    for name in &series {
        let marks = groups.remove(name.as_str()).unwrap_or_default();
        let _ = write!(svg.out, "<g data-series-group=\"{name}\">{marks}");
        share_line(&mut svg, name, &contribution.points, &x, &plot, step_ms);
        svg.push("</g>");
    }
    time_axis(&mut svg, &plot, &x, since, until);
    onset_line(
        &mut svg,
        &plot,
        &x,
        data.onset_ms,
        until - since > 86_400_000,
    );
    legend(&mut svg, plot.left, height - 8.0, &items);
    Chart {
        id: id.into(),
        title,
        svg: svg.finish(),
        series,
    }
}

/// "Requests over <threshold> (baseline p95) per minute", with the slice when there is one.
fn contribution_title(contribution: &Contribution) -> String {
    let threshold = contribution
        .threshold_ms
        .map(format_ms)
        .unwrap_or_else(|| "?".into());
    if contribution.slice.is_empty() {
        format!("Requests over {threshold} (baseline p95) per minute")
    } else {
        format!(
            "Requests over {threshold} (baseline p95) per minute: {} vs the rest",
            contribution.slice
        )
    }
}

/// The time span of the chart: the report's span, else the first point to one step past the
/// last (`points` is not empty).
fn contribution_span(data: &ChartData, step_ms: i64) -> (i64, i64) {
    let points = &data.contribution.points;
    match data.span {
        Some(WindowMs { since_ms, until_ms }) => (since_ms, until_ms),
        None => (
            points[0].step_ms,
            points[points.len() - 1].step_ms + step_ms,
        ),
    }
}

/// The value scale of the stacked bars (requests over the threshold, slice + rest), with its
/// ticks; a strip at the top of the plot is left for the share lines.
fn over_threshold_scale(points: &[ContributionPoint], plot: &Plot) -> (Scale, Vec<f64>) {
    let max = points
        .iter()
        .map(|p| p.slice_over + p.rest_over)
        .max()
        .unwrap_or(0) as f64;
    let (ticks, _) = nice_ticks(0.0, max.max(1.0), 5);
    let y = Scale::new(
        0.0,
        *ticks.last().unwrap_or(&1.0),
        plot.bottom,
        plot.top + 14.0,
    );
    (y, ticks)
}

/// The stacked bars of each step, rest below slice, as SVG marks per series (`rest`, `slice`);
/// a series with no over-threshold requests in a step has no bar there.
fn contribution_bars(
    points: &[ContributionPoint],
    x: &Scale,
    y: &Scale,
    bar_w: f64,
) -> BTreeMap<&'static str, String> {
    let mut groups: BTreeMap<&'static str, String> = BTreeMap::new();
    for p in points {
        let px = x.at(p.step_ms as f64) + 0.5;
        let label = escape(&time_label(p.step_ms, false));
        let base = y.at(0.0);
        let rest_top = y.at(p.rest_over as f64);
        if p.rest_over > 0 {
            let _ = write!(
                groups.entry("rest").or_default(),
                "<rect data-series=\"rest\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{REST_COLOUR}\"><title>{label} rest: {} of {} over</title></rect>",
                c(px),
                c(rest_top),
                c(bar_w),
                c(base - rest_top),
                p.rest_over,
                p.rest_requests
            );
        }
        if p.slice_over > 0 {
            let top = y.at((p.rest_over + p.slice_over) as f64);
            let _ = write!(
                groups.entry("slice").or_default(),
                "<rect data-series=\"slice\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{SLICE_COLOUR}\"><title>{label} slice: {} of {} over</title></rect>",
                c(px),
                c(top),
                c(bar_w),
                c(rest_top - top),
                p.slice_over,
                p.slice_requests
            );
        }
    }
    groups
}

/// The series the chart draws (`slice` when there is one, then `rest`) and their legend items.
fn contribution_series(contribution: &Contribution) -> (Vec<String>, Vec<(String, &'static str)>) {
    // series present as marks: always draw at least a baseline mark so a series with no
    // over-threshold requests still shows in the legend and has a mark
    let has_slice = !contribution.slice.is_empty();
    let mut series = Vec::new();
    let mut items = Vec::new();
    if has_slice {
        series.push("slice".to_string());
        items.push((contribution.slice.clone(), SLICE_COLOUR));
    }
    series.push("rest".to_string());
    items.push((
        if has_slice {
            "rest of the fleet".to_string()
        } else {
            "all requests".to_string()
        },
        REST_COLOUR,
    ));
    (series, items)
}

/// The series' share of its requests over the threshold, per step, as a thin line along the
/// top of the plot (`name` is `slice` or `rest`).
fn share_line(
    svg: &mut Svg,
    name: &str,
    points: &[ContributionPoint],
    x: &Scale,
    plot: &Plot,
    step_ms: i64,
) {
    let _ = write!(
        svg.out,
        "<polyline data-series=\"{name}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1\" stroke-opacity=\"0.8\" points=\"",
        if name == "slice" {
            SLICE_COLOUR
        } else {
            REST_COLOUR
        }
    );
    let mut first = true;
    for p in points {
        let (over, requests) = if name == "slice" {
            (p.slice_over, p.slice_requests)
        } else {
            (p.rest_over, p.rest_requests)
        };
        let share = if requests == 0 {
            0.0
        } else {
            over as f64 / requests as f64
        };
        let px = x.at(p.step_ms as f64 + step_ms as f64 / 2.0);
        let py = plot.top + 14.0 - 12.0 * share;
        if !first {
            svg.push(" ");
        }
        first = false;
        let _ = write!(svg.out, "{},{}", c(px), c(py));
    }
    svg.push("\"><title>share of the series' requests over the threshold</title></polyline>");
}

// ---------------------------------------------------------------------------- line charts

/// Points of a series on every step of the span (missing steps 0 when `fill_zero`).
fn stepped(
    points: &[(i64, f64)],
    since: i64,
    until: i64,
    step_ms: i64,
    fill_zero: bool,
) -> Vec<(i64, f64)> {
    if !fill_zero {
        return points.to_vec();
    }
    let values: BTreeMap<i64, f64> = points.iter().copied().collect();
    let mut out = Vec::new();
    let mut t = since.div_euclid(step_ms) * step_ms;
    while t < until {
        out.push((t, values.get(&t).copied().unwrap_or(0.0)));
        t += step_ms;
    }
    out
}

struct Line<'a> {
    series: String,
    colour: &'a str,
    points: Vec<(i64, f64)>,
    tooltip: String,
}

/// Draws one line panel (axes, windows, onset, lines) inside `plot`.
fn line_panel(
    svg: &mut Svg,
    plot: &Plot,
    data: &ChartData,
    (since, until): (i64, i64),
    lines: &[Line<'_>],
    value_label: &dyn Fn(f64) -> String,
    caption: &str,
) {
    let x = Scale::new(since as f64, until as f64, plot.left, plot.right);
    let lo = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(f64::INFINITY, f64::min);
    let hi = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(f64::NEG_INFINITY, f64::max);
    let lo = if lo.is_finite() { lo.min(0.0) } else { 0.0 };
    let hi = if hi.is_finite() { hi } else { 1.0 };
    let (ticks, _) = nice_ticks(lo, if hi > lo { hi } else { lo + 1.0 }, 4);
    let y = Scale::new(
        ticks[0],
        *ticks.last().unwrap_or(&1.0),
        plot.bottom,
        plot.top + 14.0,
    );
    window_bands(svg, plot, &x, data);
    value_axis(svg, plot, &y, &ticks, value_label, caption);
    let half = data.step_ms.max(1) as f64 / 2.0;
    for line in lines {
        let _ = write!(
            svg.out,
            "<polyline data-series=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\" stroke-linejoin=\"round\" points=\"",
            escape(&line.series),
            line.colour
        );
        for (i, (t, v)) in line.points.iter().enumerate() {
            if i > 0 {
                svg.push(" ");
            }
            let _ = write!(svg.out, "{},{}", c(x.at(*t as f64 + half)), c(y.at(*v)));
        }
        let _ = write!(
            svg.out,
            "\"><title>{}</title></polyline>",
            escape(&line.tooltip)
        );
        if line.points.len() == 1 {
            let (t, v) = line.points[0];
            let _ = write!(
                svg.out,
                "<circle data-series=\"{}\" cx=\"{}\" cy=\"{}\" r=\"2.5\" fill=\"{}\"/>",
                escape(&line.series),
                c(x.at(t as f64 + half)),
                c(y.at(v)),
                line.colour
            );
        }
    }
    time_axis(svg, plot, &x, since, until);
    onset_line(svg, plot, &x, data.onset_ms, until - since > 86_400_000);
}

fn span_of(data: &ChartData, fallback: impl Iterator<Item = i64>) -> Option<(i64, i64)> {
    if let Some(span) = data.span {
        return Some((span.since_ms, span.until_ms));
    }
    let times: Vec<i64> = fallback.collect();
    let lo = *times.iter().min()?;
    let hi = *times.iter().max()?;
    Some((lo, hi + data.step_ms.max(1)))
}

fn template_rates(data: &ChartData) -> Chart {
    let id = "template-rates";
    let title = "Log templates that rose with the incident (records per minute)".to_string();
    let templates: Vec<_> = data
        .templates
        .iter()
        .filter(|t| !t.points.is_empty())
        .collect();
    let Some((since, until)) = span_of(
        data,
        templates.iter().flat_map(|t| t.points.iter().map(|p| p.0)),
    ) else {
        return empty_chart(id, &title, "no log evidence");
    };
    if templates.is_empty() {
        return empty_chart(id, &title, "no log evidence");
    }
    let legend_rows = templates.len() as f64;
    let height = 230.0 + 48.0 + 16.0 * legend_rows;
    let plot = Plot {
        left: 64.0,
        top: 30.0,
        right: WIDTH - 20.0,
        bottom: 230.0,
    };
    let step = data.step_ms.max(1);
    let lines: Vec<Line<'_>> = templates
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let points: Vec<(i64, f64)> = t.points.iter().map(|(s, n)| (*s, *n as f64)).collect();
            Line {
                series: t.template_id.clone(),
                colour: PALETTE[i % PALETTE.len()],
                points: stepped(&points, since, until, step, true),
                tooltip: truncate(&t.template, 200),
            }
        })
        .collect();
    let mut svg = Svg::new(id, &title, height);
    line_panel(
        &mut svg,
        &plot,
        data,
        (since, until),
        &lines,
        &format_count,
        "records per minute",
    );
    // one legend row per template: its text is the interesting part
    svg.push("<g class=\"legend\">");
    for (i, line) in lines.iter().enumerate() {
        let y = plot.bottom + 48.0 + 16.0 * i as f64;
        let _ = write!(
            svg.out,
            "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/>",
            c(plot.left),
            c(y - 9.0),
            line.colour
        );
        svg.text(
            plot.left + 14.0,
            y,
            "start",
            " fill=\"#333\"",
            &truncate(&line.tooltip, 105),
        );
    }
    svg.push("</g>");
    Chart {
        id: id.into(),
        title,
        svg: svg.finish(),
        series: lines.iter().map(|l| l.series.clone()).collect(),
    }
}

/// Caption, the factor from the metric's unit to the unit shown, and the tick label of a metric.
fn metric_label(metric: &str) -> (&'static str, f64, fn(f64) -> String) {
    fn gib(v: f64) -> String {
        format!("{} GiB", format_count(v))
    }
    fn percent(v: f64) -> String {
        format!("{} %", format_count(v))
    }
    match metric {
        "gpu_memory_used_bytes" => ("GPU memory used", 1.0 / (1u64 << 30) as f64, gib),
        "kv_cache_usage_ratio" => ("KV-cache usage", 100.0, percent),
        "requests_waiting" => ("requests waiting (queue length)", 1.0, format_count),
        _ => ("value", 1.0, format_count),
    }
}

fn resources(data: &ChartData) -> Chart {
    let id = "resources";
    let workers_text = data.workers.join(", ");
    let title = if workers_text.is_empty() {
        "Resources of the implicated workers".to_string()
    } else {
        format!("Resources of the implicated workers: {workers_text}")
    };
    let metrics: Vec<&str> = RESOURCE_METRICS
        .iter()
        .copied()
        .filter(|m| {
            data.resources
                .iter()
                .any(|r| r.metric == *m && !r.points.is_empty())
        })
        .collect();
    let Some((since, until)) = span_of(
        data,
        data.resources
            .iter()
            .flat_map(|r| r.points.iter().map(|p| p.0)),
    ) else {
        return empty_chart(id, &title, "no resource metrics for the implicated workers");
    };
    if metrics.is_empty() {
        return empty_chart(id, &title, "no resource metrics for the implicated workers");
    }
    let panel_h = 170.0;
    let height = 30.0 + panel_h * metrics.len() as f64 + 10.0;
    let mut svg = Svg::new(id, &title, height);
    // worker colours are the same in every panel
    let mut worker_order: Vec<&str> = data.workers.iter().map(String::as_str).collect();
    for r in &data.resources {
        if !worker_order.contains(&r.worker.as_str()) {
            worker_order.push(&r.worker);
        }
    }
    let colour_of =
        |w: &str| PALETTE[worker_order.iter().position(|x| *x == w).unwrap_or(0) % PALETTE.len()];
    let items: Vec<(String, &str)> = worker_order
        .iter()
        .filter(|w| data.resources.iter().any(|r| r.worker == **w))
        .map(|w| (w.to_string(), colour_of(w)))
        .collect();
    legend(&mut svg, 64.0, 16.0, &items);
    let mut series = Vec::new();
    for (i, metric) in metrics.iter().enumerate() {
        let top = 30.0 + panel_h * i as f64 + 14.0;
        let plot = Plot {
            left: 64.0,
            top,
            right: WIDTH - 20.0,
            bottom: top + panel_h - 58.0,
        };
        let (caption, factor, formatter) = metric_label(metric);
        let lines: Vec<Line<'_>> = data
            .resources
            .iter()
            .filter(|r| r.metric == *metric && !r.points.is_empty())
            .map(|r| Line {
                series: format!("{}/{}", r.metric, r.worker),
                colour: colour_of(&r.worker),
                points: r.points.iter().map(|(t, v)| (*t, v * factor)).collect(),
                tooltip: format!("{caption} on {}", r.worker),
            })
            .collect();
        let _ = write!(svg.out, "<g data-panel=\"{}\">", escape(metric));
        line_panel(
            &mut svg,
            &plot,
            data,
            (since, until),
            &lines,
            &formatter,
            &format!("{caption} ({metric})"),
        );
        svg.push("</g>");
        series.extend(lines.iter().map(|l| l.series.clone()));
    }
    Chart {
        id: id.into(),
        title,
        svg: svg.finish(),
        series,
    }
}

// ----------------------------------------------------------------------------------- flame

fn flame(data: &ChartData) -> Chart {
    let id = "flame";
    let title = "Where request time went during the incident".to_string();
    let Some(root) = data.flame.as_ref().filter(|r| r.value_ms > 0.0) else {
        return empty_chart(id, &title, "no incident requests");
    };
    let depth = flame_depth(root);
    let row_h = 30.0;
    let height = 40.0 + row_h * depth as f64 + 40.0;
    let plot = Plot {
        left: 20.0,
        top: 30.0,
        right: WIDTH - 20.0,
        bottom: 30.0 + row_h * depth as f64,
    };
    let x = Scale::new(0.0, root.value_ms, plot.left, plot.right);
    let mut svg = Svg::new(id, &title, height);
    let mut series: Vec<String> = Vec::new();
    let slice_name = describe_slice(&data.slice);
    flame_node(
        &mut svg,
        &x,
        &plot,
        root,
        (0.0, 0),
        root.value_ms,
        &slice_name,
        &mut series,
    );
    // x axis: share of all incident request time
    svg.push("<g class=\"axis axis-x\" data-axis=\"x\">");
    svg.line(
        plot.left,
        plot.bottom + 2.0,
        plot.right,
        plot.bottom + 2.0,
        &format!(" stroke=\"{AXIS_COLOUR}\""),
    );
    for i in 0..=5 {
        let share = i as f64 / 5.0;
        let px = plot.left + (plot.right - plot.left) * share;
        svg.line(
            px,
            plot.bottom + 2.0,
            px,
            plot.bottom + 6.0,
            &format!(" stroke=\"{AXIS_COLOUR}\""),
        );
        let anchor = match i {
            0 => "start",
            5 => "end",
            _ => "middle",
        };
        svg.text(
            px,
            plot.bottom + 18.0,
            anchor,
            " fill=\"#333\"",
            &format!("{:.0} %", share * 100.0),
        );
    }
    svg.text(
        plot.right,
        plot.bottom + 32.0,
        "end",
        " fill=\"#666\"",
        &format!(
            "share of request time in the incident (total {})",
            format_ms(root.value_ms)
        ),
    );
    svg.push("</g>");
    Chart {
        id: id.into(),
        title,
        svg: svg.finish(),
        series,
    }
}

fn flame_depth(node: &FlameNode) -> usize {
    1 + node.children.iter().map(flame_depth).max().unwrap_or(0)
}

/// Series name of a flame node: `total` (root), a phase name, `slice` or `rest`.
fn flame_series(node: &FlameNode, level: usize, slice_name: &str) -> String {
    if level == 0 {
        "total".into()
    } else if PHASES.contains(&node.name.as_str()) {
        node.name.clone()
    } else if !slice_name.is_empty() && node.name == slice_name {
        "slice".into()
    } else {
        "rest".into()
    }
}

#[allow(clippy::too_many_arguments)]
fn flame_node(
    svg: &mut Svg,
    x: &Scale,
    plot: &Plot,
    node: &FlameNode,
    (offset, level): (f64, usize),
    total: f64,
    slice_name: &str,
    series: &mut Vec<String>,
) {
    if node.value_ms <= 0.0 {
        return;
    }
    let name = flame_series(node, level, slice_name);
    if !series.contains(&name) {
        series.push(name.clone());
    }
    let colour = match name.as_str() {
        "total" => "#7f8c8d",
        "slice" => "#d62728",
        "rest" => "#7fb3d5",
        phase => phase_colour(phase),
    };
    let x0 = x.at(offset);
    let width = (x.at(offset + node.value_ms) - x0).max(0.5);
    let y = plot.top + 30.0 * level as f64;
    let share = node.value_ms / total * 100.0;
    let _ = write!(
        svg.out,
        "<g><rect data-series=\"{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"28\" fill=\"{colour}\" stroke=\"#fff\"><title>{}: {:.1} % ({})</title></rect>",
        escape(&name),
        c(x0),
        c(y),
        c(width),
        escape(&node.name),
        share,
        escape(&format_ms(node.value_ms)),
    );
    let label = format!("{} {:.0} %", node.name, share);
    let fits = (width - 8.0) / 6.4;
    if fits >= 6.0 {
        let ink = if matches!(name.as_str(), "rest" | "other") {
            "#1d232a"
        } else {
            "#fff"
        };
        svg.text(
            x0 + 4.0,
            y + 18.0,
            "start",
            &format!(" fill=\"{ink}\" font-weight=\"600\""),
            &truncate(&label, fits as usize),
        );
    }
    svg.push("</g>");
    let mut child_offset = offset;
    for child in &node.children {
        flame_node(
            svg,
            x,
            plot,
            child,
            (child_offset, level + 1),
            total,
            slice_name,
            series,
        );
        child_offset += child.value_ms.max(0.0);
    }
}
