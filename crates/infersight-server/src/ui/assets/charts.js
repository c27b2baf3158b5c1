// SVG charts drawn in the browser: sparklines, the latency heatmap (with brushing) and stacked
// bars. Every chart is an `svg[data-chart]` whose marks carry `data-series`, and an empty chart
// says so with `data-empty="true"`, so tests can check that every chart has data. Colours come
// from one colour-blind-safe palette shared with the report (crates/infersight-report charts.rs
// PALETTE and HEAT_STOPS; a test keeps them equal); axes tick on round values and times.

import { fmtMs, fmtTime, fmtTick, fmtTickMs, logTicks, niceTicks, timeTicks } from './api.js';

const NS = 'http://www.w3.org/2000/svg';
/** Okabe–Ito: tells apart for every common colour-vision deficiency (same as the report's). */
export const PALETTE = ['#0072b2', '#e69f00', '#009e73', '#d55e00', '#cc79a7', '#56b4e9', '#f0e442', '#000000'];
/** The colour of an "other" series (everything past the top values). */
export const OTHER_COLOUR = '#b8bec6';
/** Reversed viridis, few → many: the heatmap's scale, perceptually even, colour-blind safe. */
export const HEAT_STOPS = ['#fde725', '#5ec962', '#21918c', '#3b528b', '#440154'];
/** The colour of fault onsets and incident windows drawn over charts. */
export const MARK_COLOUR = '#d55e00';

export function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [key, value] of Object.entries(attrs)) if (value != null) el.setAttribute(key, value);
  for (const child of children) if (child != null) el.append(child);
  return el;
}

function chart(id, width, height, label) {
  return s('svg', {
    'data-chart': id, viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': label,
    class: 'chart', preserveAspectRatio: 'none',
  });
}

function emptyNote(svg, width, height) {
  svg.setAttribute('data-empty', 'true');
  svg.append(s('text', { x: width / 2, y: height / 2, 'text-anchor': 'middle' }, 'no data'));
  return svg;
}

/**
 * Runs of a line's points without a gap: a point whose y is not a number, or (with `stepMs`) a
 * missing step between two points, ends a run, so missing data is drawn as missing.
 */
export function runsOf(points, stepMs = null) {
  const runs = [];
  let run = [];
  let previous = null;
  for (const [x, y] of points) {
    const gap = !Number.isFinite(y) || (stepMs && previous != null && x - previous > 1.5 * stepMs);
    if (gap && run.length) { runs.push(run); run = []; }
    if (Number.isFinite(y)) { run.push([x, y]); previous = x; }
  }
  if (run.length) runs.push(run);
  return runs;
}

/** SVG path text of the runs (a lone point a short dash, so it stays visible). */
function pathOf(runs, px, py) {
  return runs.map((run) => {
    const pts = run.map(([x, y]) => `${px(x).toFixed(1)},${py(y).toFixed(1)}`);
    return run.length === 1 ? `M${pts[0]}h1.5` : `M${pts.join('L')}`;
  }).join('');
}

/**
 * A sparkline of `series` = [{name, points: [[x, y]]}], the first series drawn strongest. With
 * `span` ({since, until}) the x axis is the whole window, so data that stops early leaves the
 * rest empty; with `stepMs` a missing step breaks the line.
 */
export function sparkline(id, series, label, span = null, stepMs = null) {
  const width = 240, height = 40, pad = 2;
  const svg = chart(id, width, height, label);
  const all = series.flatMap((line) => line.points).filter(([, y]) => Number.isFinite(y));
  if (all.length < 1 || (all.length < 2 && !span)) return emptyNote(svg, width, height);
  const xs = all.map(([x]) => x), ys = all.map(([, y]) => y);
  const [x0, x1] = span ? [span.since, span.until] : [Math.min(...xs), Math.max(...xs)];
  const [y0, y1] = [Math.min(0, ...ys), Math.max(...ys) || 1];
  const px = (x) => pad + ((x - x0) / (x1 - x0 || 1)) * (width - 2 * pad);
  const py = (y) => height - pad - ((y - y0) / (y1 - y0 || 1)) * (height - 2 * pad);
  series.forEach((line, i) => {
    const runs = runsOf(line.points, stepMs);
    if (!runs.length) return;
    svg.append(s('path', {
      'data-series': line.name, fill: 'none', stroke: PALETTE[i % PALETTE.length],
      'stroke-width': i === 0 ? 1.8 : 1, 'stroke-opacity': i === 0 ? 1 : 0.55,
      'vector-effect': 'non-scaling-stroke', 'stroke-linecap': 'round', d: pathOf(runs, px, py),
    }, s('title', {}, line.name)));
  });
  svg.dataset.points = String(all.length);
  svg.dataset.runs = String(Math.max(0, ...series.map((line) => runsOf(line.points, stepMs).length)));
  return svg;
}

/** Colour at `t` in [0, 1] along HEAT_STOPS, interpolated in RGB. */
export function heatColour(t) {
  const x = Math.min(1, Math.max(0, t)) * (HEAT_STOPS.length - 1);
  const i = Math.min(HEAT_STOPS.length - 2, Math.floor(x));
  const rgb = (hex) => [1, 3, 5].map((k) => parseInt(hex.slice(k, k + 2), 16));
  const [a, b] = [rgb(HEAT_STOPS[i]), rgb(HEAT_STOPS[i + 1])];
  const f = x - i;
  return `#${a.map((v, k) => Math.round(v + (b[k] - v) * f).toString(16).padStart(2, '0')).join('')}`;
}

/** Colour of a heatmap cell: the log of its count against the largest. */
function heat(count, max) {
  return heatColour(Math.log1p(count) / Math.log1p(max || 1));
}

/**
 * The counts the heatmap legend labels, from 1 to `max` on the same log scale as the cells:
 * round numbers (1-2-5) in between.
 */
export function legendCounts(max) {
  if (!(max > 1)) return [1];
  const counts = [1];
  for (const v of logTicks(1, max, 6)) if (v > 1 && v < max * 0.8) counts.push(v);
  counts.push(max);
  return counts;
}

/** The heatmap's colour legend (HTML): a swatch per count of `legendCounts`. */
export function heatLegend(max, unit = 'requests per cell') {
  const el = document.createElement('div');
  el.className = 'heat-legend';
  el.dataset.legend = 'colour';
  el.setAttribute('role', 'img');
  const counts = legendCounts(max);
  el.setAttribute('aria-label', `colour scale: ${counts.join(', ')} ${unit}`);
  const title = document.createElement('span');
  title.className = 'muted';
  title.textContent = unit;
  el.append(title);
  for (const n of counts) {
    const item = document.createElement('span');
    item.className = 'swatch';
    item.dataset.count = String(n);
    item.style.setProperty('--swatch', heat(n, max));
    item.textContent = n >= 1e4 ? `${Math.round(n / 1e3)} k` : String(n);
    el.append(item);
  }
  return el;
}

/**
 * The latency heatmap: x = time step, y = log bucket. `cells` = [{t, b, n}] (t in ms, b the
 * bucket index of `bucketMs(b)`), `win` the window, `stepMs` the column width. Two windows can
 * be brushed: the incident `selection` and the `baseline`; `mode()` says which one a drag (or
 * the arrow keys) sets, and `onBrush(kind, since, until)` reports it in ms (since null when
 * cleared). `lines` = [{name, points: [[t, ms]]}] are drawn over the cells (e.g. p50 and p99),
 * at the fractional bucket `bucketOf(ms)`, broken where a step has no data. `marks` =
 * [{kind: 'onset' | 'incident', since, until?, label}] are drawn over the plot: an onset as a
 * dashed rule, an incident as a band along the top from its onset to its end (or the window's).
 */
export function heatmap({ cells, win, stepMs, bucketMs, bucketOf, selection, baseline, mode = () => 'selection', onBrush, sli, lines = [], marks = [] }) {
  const width = 1200, height = 520, left = 64, right = 12, top = 14, bottom = 28;
  const svg = chart('latency-heatmap', width, height, `${sli} latency heatmap`);
  svg.classList.add('heatmap');
  svg.removeAttribute('preserveAspectRatio');
  svg.dataset.sinceMs = String(win.since);
  svg.dataset.untilMs = String(win.until);
  if (!cells.length) return emptyNote(svg, width, height);
  const buckets = cells.map((c) => c.b);
  const [b0, b1] = [Math.min(...buckets), Math.max(...buckets) + 1];
  const max = Math.max(...cells.map((c) => c.n));
  const plotW = width - left - right, plotH = height - top - bottom;
  const px = (t) => left + ((t - win.since) / (win.until - win.since)) * plotW;
  const tOf = (x) => win.since + ((x - left) / plotW) * (win.until - win.since);
  const rowH = plotH / (b1 - b0);
  const py = (b) => top + plotH - (b - b0 + 1) * rowH;
  const colW = Math.max(1, (stepMs / (win.until - win.since)) * plotW);
  const cellMarks = s('g');
  for (const c of cells) {
    if (c.t + stepMs <= win.since || c.t >= win.until) continue;
    const x = Math.max(left, px(c.t));
    cellMarks.append(s('rect', {
      'data-series': 'requests', x: x.toFixed(1), y: py(c.b).toFixed(1),
      width: Math.max(0.5, Math.min(colW, left + plotW - x)).toFixed(1), height: rowH.toFixed(2),
      fill: heat(c.n, max),
    }, s('title', {}, `${fmtTime(c.t)} · ${fmtMs(bucketMs(c.b))}–${fmtMs(bucketMs(c.b + 1))}: ${c.n} requests`)));
  }
  svg.append(cellMarks);
  // the quantile lines: a light halo under each, so they read on dark and light cells alike
  lines.forEach((line, i) => {
    const points = line.points.filter(([t, v]) => Number.isFinite(v) && v > 0 && t >= win.since && t < win.until);
    const runs = runsOf(points, stepMs);
    if (!runs.length) return;
    const y = (v) => Math.min(top + plotH, Math.max(top, top + plotH - (bucketOf(v) - b0) * rowH));
    const d = pathOf(runs, (t) => px(t) + colW / 2, y);
    svg.append(s('path', { d, fill: 'none', stroke: '#ffffff', 'stroke-width': 3.4, 'stroke-opacity': 0.85, 'pointer-events': 'none' }));
    svg.append(s('path', {
      'data-series': line.name, class: 'quantile-line', fill: 'none', stroke: i === 0 ? MARK_COLOUR : '#1d2330',
      'stroke-width': 1.6, 'stroke-dasharray': i === 0 ? null : '5 3', 'pointer-events': 'none', d,
    }, s('title', {}, line.name)));
  });
  svg.append(heatmapAxes({ win, px, left, top, plotW, plotH, height, b0, b1, rowH, bucketMs, bucketOf }));
  svg.append(windowMarks(marks, { win, px, left, top, plotW, plotH }));
  // brushing: drag across the plot; arrow keys on the focused chart move / resize the selection
  const brushes = {
    baseline: s('rect', { class: 'brush baseline', y: top, height: plotH, x: left, width: 0, visibility: 'hidden', 'data-marker': 'baseline' }),
    selection: s('rect', { class: 'brush', y: top, height: plotH, x: left, width: 0, visibility: 'hidden', 'data-marker': 'selection' }),
  };
  const overlay = s('rect', { class: 'overlay', x: left, y: top, width: plotW, height: plotH, fill: 'transparent' });
  svg.append(brushes.baseline, brushes.selection, overlay);
  svg.setAttribute('tabindex', '0');
  svg.setAttribute('aria-label', `${sli} latency heatmap; drag, or use the arrow keys (shift to widen, Escape to clear), to select a window`);
  const windows = { selection: selection ? [...selection] : null, baseline: baseline ? [...baseline] : null };
  let current = null;
  const drawOne = (kind) => {
    const brush = brushes[kind], w = windows[kind];
    if (!w) { brush.setAttribute('visibility', 'hidden'); return; }
    const [a, b] = [Math.max(win.since, w[0]), Math.min(win.until, w[1])];
    brush.setAttribute('visibility', b > a ? 'visible' : 'hidden');
    brush.setAttribute('x', px(a).toFixed(1));
    brush.setAttribute('width', Math.max(1, px(b) - px(a)).toFixed(1));
  };
  // `current` is the window of the kind being brushed
  const draw = () => { windows[mode()] = current; drawOne('selection'); drawOne('baseline'); };
  drawOne('selection');
  drawOne('baseline');
  const toPlotX = (event) => {
    const box = svg.getBoundingClientRect();
    const x = ((event.clientX - box.left) / box.width) * width;
    return Math.min(left + plotW, Math.max(left, x));
  };
  const snap = (t) => Math.round(t / stepMs) * stepMs;
  let anchor = null;
  overlay.addEventListener('pointerdown', (event) => {
    event.preventDefault();
    current = windows[mode()];
    anchor = tOf(toPlotX(event));
    current = [anchor, anchor];
    draw();
    const move = (e) => {
      const t = tOf(toPlotX(e));
      current = [Math.min(anchor, t), Math.max(anchor, t)];
      draw();
    };
    const up = (e) => {
      move(e);
      window.removeEventListener('pointermove', move);
      window.removeEventListener('pointerup', up);
      const [a, b] = [snap(current[0]), snap(current[1])];
      if (b - a < stepMs) { current = null; draw(); onBrush(mode(), null); return; }
      current = [a, b];
      draw();
      onBrush(mode(), a, b);
    };
    window.addEventListener('pointermove', move);
    window.addEventListener('pointerup', up);
  });
  svg.addEventListener('keydown', (event) => {
    current = windows[mode()];
    if (event.key === 'Escape') { current = null; draw(); onBrush(mode(), null); return; }
    if (event.key !== 'ArrowLeft' && event.key !== 'ArrowRight') return;
    event.preventDefault();
    const d = event.key === 'ArrowLeft' ? -stepMs : stepMs;
    if (!current) {
      const end = snap(win.until);
      current = [end - 10 * stepMs, end];
    } else if (event.shiftKey) {
      current = [current[0], Math.max(current[0] + stepMs, current[1] + d)];
    } else {
      current = [current[0] + d, current[1] + d];
    }
    draw();
    onBrush(mode(), current[0], current[1]);
  });
  return svg;
}

/** Round latency ticks (1-2-5 ms / s) on the log rows, round times on the x axis, the frame. */
function heatmapAxes({ win, px, left, top, plotW, plotH, height, b0, b1, rowH, bucketMs, bucketOf }) {
  const axis = s('g', { class: 'axis' });
  const yOf = (ms) => top + plotH - (bucketOf(ms) - b0) * rowH;
  for (const v of logTicks(bucketMs(b0), bucketMs(b1), 12)) {
    const y = yOf(v);
    axis.append(s('text', { x: left - 6, y: y + 4, 'text-anchor': 'end', 'data-tick': String(v) }, fmtTickMs(v)));
    axis.append(s('line', { x1: left - 3, x2: left, y1: y, y2: y, stroke: '#999' }));
  }
  const { step, ticks } = timeTicks(win.since, win.until, 10);
  for (const t of ticks) {
    const x = px(t);
    axis.append(s('line', { x1: x, x2: x, y1: top + plotH, y2: top + plotH + 4, stroke: '#999' }));
    axis.append(s('text', { x, y: height - 8, 'text-anchor': x - left < 20 ? 'start' : left + plotW - x < 20 ? 'end' : 'middle', 'data-tick': String(t) }, fmtTick(t, step)));
  }
  axis.append(s('rect', { x: left, y: top, width: plotW, height: plotH, fill: 'none', stroke: '#ccd' }));
  return axis;
}

/** Onsets (dashed rules) and incidents (bands along the top) inside the window. */
function windowMarks(marks, { win, px, left, top, plotW, plotH }) {
  const g = s('g', { class: 'window-marks', 'pointer-events': 'none' });
  const clamp = (t) => Math.min(left + plotW, Math.max(left, px(t)));
  for (const mark of marks) {
    const until = mark.until ?? mark.since;
    if (!(until >= win.since && mark.since <= win.until)) continue;
    if (mark.kind === 'incident') {
      const [a, b] = [clamp(mark.since), clamp(Math.max(until, mark.since))];
      g.append(s('rect', {
        'data-marker': 'incident', x: a.toFixed(1), y: top - 10, width: Math.max(3, b - a).toFixed(1), height: 7,
        fill: MARK_COLOUR, 'fill-opacity': 0.75,
      }, s('title', {}, mark.label)));
    }
    if (mark.kind === 'onset' || mark.kind === 'incident') {
      if (mark.since < win.since || mark.since > win.until) continue;
      const x = px(mark.since).toFixed(1);
      g.append(s('line', {
        'data-marker': 'onset', x1: x, x2: x, y1: top, y2: top + plotH, stroke: MARK_COLOUR, 'stroke-width': 1.4, 'stroke-dasharray': '6 4',
      }, s('title', {}, `onset: ${mark.label}`)));
    }
  }
  return g;
}

/** Stacked bars: `steps` (ms), `series` = [{name, values[]}] aligned with steps. */
export function stackedBars(id, steps, series, stepMs, label, span = null) {
  const width = 1200, height = 260, left = 56, right = 8, top = 8, bottom = 24;
  const svg = chart(id, width, height, label);
  svg.removeAttribute('preserveAspectRatio');
  const totals = steps.map((_, i) => series.reduce((sum, line) => sum + (line.values[i] || 0), 0));
  const max = Math.max(0, ...totals);
  if (!steps.length || max === 0) return emptyNote(svg, width, height);
  const plotW = width - left - right, plotH = height - top - bottom;
  const [t0, t1] = span ? [span.since, span.until] : [steps[0], steps[steps.length - 1] + stepMs];
  const px = (t) => left + ((t - t0) / (t1 - t0)) * plotW;
  const barW = Math.max(1, (stepMs / (t1 - t0)) * plotW - 1);
  const py = (v) => top + plotH - (v / max) * plotH;
  steps.forEach((t, i) => {
    if (t < t0 || t >= t1) return;
    let base = 0;
    series.forEach((line, k) => {
      const v = line.values[i] || 0;
      if (!v) return;
      svg.append(s('rect', {
        'data-series': line.name, x: px(t).toFixed(1), width: barW.toFixed(1),
        y: py(base + v).toFixed(1), height: Math.max(0.5, py(base) - py(base + v)).toFixed(1),
        fill: line.name === 'other' ? OTHER_COLOUR : PALETTE[k % PALETTE.length],
      }, s('title', {}, `${fmtTime(t)} ${line.name}: ${v}`)));
      base += v;
    });
  });
  for (const v of niceTicks(0, max, 4)) {
    svg.append(s('text', { x: left - 6, y: py(v) + 4, 'text-anchor': 'end', 'data-tick': String(v) }, String(v)));
  }
  const { step, ticks } = timeTicks(t0, t1, 8);
  for (const t of ticks) {
    const x = px(t);
    svg.append(s('text', { x, y: height - 6, 'text-anchor': x - left < 20 ? 'start' : width - right - x < 20 ? 'end' : 'middle', 'data-tick': String(t) }, fmtTick(t, step)));
  }
  return svg;
}

/** Colours of the latency phases, shared by every phase chart. */
export const PHASE_COLOURS = { queue: PALETTE[1], prefill: PALETTE[4], decode: PALETTE[0], other: OTHER_COLOUR };

/**
 * Horizontal stacked bars, one per row: `rows` = [{name, parts: {phase: ms}}] drawn with the
 * `phases` order and colours; the axis is milliseconds. Used for "where the time goes" by a
 * dimension's values.
 */
export function phaseBars(id, rows, phases, label) {
  const rowH = 22, left = 180, right = 70, top = 4, bottom = 22, width = 1200;
  const height = top + bottom + Math.max(1, rows.length) * rowH;
  const svg = chart(id, width, height, label);
  svg.removeAttribute('preserveAspectRatio');
  const total = (row) => phases.reduce((a, p) => a + Math.max(0, row.parts[p] || 0), 0);
  const max = Math.max(0, ...rows.map(total));
  if (!rows.length || max <= 0) return emptyNote(svg, width, height);
  const plotW = width - left - right;
  const px = (v) => (v / max) * plotW;
  rows.forEach((row, i) => {
    const y = top + i * rowH;
    svg.append(s('text', { x: left - 8, y: y + rowH / 2 + 4, 'text-anchor': 'end' }, truncate(row.name, 28)));
    let x = left;
    for (const phase of phases) {
      const v = Math.max(0, row.parts[phase] || 0);
      if (!v) continue;
      svg.append(s('rect', {
        'data-series': phase, x: x.toFixed(1), y: y + 3, width: Math.max(0.5, px(v)).toFixed(1), height: rowH - 6,
        fill: PHASE_COLOURS[phase] || '#999',
      }, s('title', {}, `${row.name} · ${phase}: ${fmtMs(v)} (${((100 * v) / (total(row) || 1)).toFixed(0)} %)`)));
      x += px(v);
    }
    svg.append(s('text', { x: x + 6, y: y + rowH / 2 + 4 }, fmtMs(total(row))));
  });
  const ticks = niceTicks(0, max, 5);
  ticks.forEach((v, i) => {
    svg.append(s('text', { x: left + px(v), y: height - 6, 'text-anchor': i === 0 ? 'start' : 'middle', 'data-tick': String(v) }, fmtTickMs(v)));
  });
  return svg;
}

function truncate(text, n) {
  const value = String(text);
  return value.length > n ? `${value.slice(0, n - 1)}…` : value;
}

/**
 * A flame-style (icicle) chart of a tree `{name, value, children}`: each level is a row, each
 * node as wide as its share of the root's value, children left to right under their parent.
 * `colour(node, depth)` picks the fill; marks carry `data-series` = the node's name.
 */
export function flame(id, root, label, colour) {
  const width = 1200, rowH = 24;
  const depth = (node) => 1 + Math.max(0, ...(node.children || []).map(depth));
  const levels = root && root.value > 0 ? depth(root) : 1;
  const height = levels * rowH + 4;
  const svg = chart(id, width, height, label);
  svg.removeAttribute('preserveAspectRatio');
  if (!root || !(root.value > 0)) return emptyNote(svg, width, height);
  const draw = (node, x, w, level, path) => {
    if (w < 0.5) return;
    const y = level * rowH;
    const share = node.value / root.value;
    const name = path.length ? `${path.join(' › ')} › ${node.name}` : node.name;
    const g = s('g', { 'data-series': node.name },
      s('rect', { x: x.toFixed(1), y, width: Math.max(0.5, w - 1).toFixed(1), height: rowH - 2, fill: colour(node, level), rx: 2 }),
      s('title', {}, `${name}: ${fmtMs(node.value)} total, ${(100 * share).toFixed(1)} %${node.note ? ` · ${node.note}` : ''}`));
    if (w > 40) g.append(s('text', { x: x + 4, y: y + rowH / 2 + 3, class: 'flame-label' }, truncate(`${node.name} ${(100 * share).toFixed(0)}%`, Math.floor(w / 7))));
    svg.append(g);
    let cx = x;
    for (const child of node.children || []) {
      const cw = (child.value / (node.value || 1)) * w;
      draw(child, cx, cw, level + 1, [...path, node.name]);
      cx += cw;
    }
  };
  draw(root, 0, width, 0, []);
  return svg;
}

/**
 * A trace waterfall: `spans` = [{id, name, service, start, end, depth, status, phases?}] with
 * times in ms; each span a bar on its own row, indented by depth. `phases` = [{name, start,
 * end}] are drawn inside the span's bar (the request's queue / prefill / decode).
 */
export function waterfall(id, spans, label) {
  const rowH = 24, left = 300, right = 80, top = 4, bottom = 22, width = 1200;
  const height = top + bottom + Math.max(1, spans.length) * rowH;
  const svg = chart(id, width, height, label);
  svg.removeAttribute('preserveAspectRatio');
  if (!spans.length) return emptyNote(svg, width, height);
  const t0 = Math.min(...spans.map((sp) => sp.start));
  const t1 = Math.max(...spans.map((sp) => sp.end ?? sp.start));
  const plotW = width - left - right;
  const px = (t) => left + ((t - t0) / (t1 - t0 || 1)) * plotW;
  spans.forEach((sp, i) => {
    const y = top + i * rowH;
    const end = sp.end ?? sp.start;
    svg.append(s('text', { x: 4 + 12 * sp.depth, y: y + rowH / 2 + 4 }, truncate(`${sp.service ? `${sp.service} · ` : ''}${sp.name}`, 40 - 2 * sp.depth)));
    const bar = s('g', { 'data-series': sp.name },
      s('rect', {
        x: px(sp.start).toFixed(1), y: y + 4, width: Math.max(1, px(end) - px(sp.start)).toFixed(1), height: rowH - 8,
        fill: sp.status === 'error' ? '#c62f2f' : PALETTE[(sp.depth + 7) % PALETTE.length], 'fill-opacity': sp.phases ? 0.25 : 0.85,
      }),
      s('title', {}, `${sp.name} (${sp.service || 'unknown service'}): starts at +${fmtMs(sp.start - t0)}, lasts ${fmtMs(end - sp.start)}${sp.status ? ` · ${sp.status}` : ''}`));
    for (const phase of sp.phases || []) {
      if (!(phase.end > phase.start)) continue;
      bar.append(s('rect', {
        'data-phase': phase.name, x: px(phase.start).toFixed(1), y: y + 4, width: Math.max(0.5, px(phase.end) - px(phase.start)).toFixed(1),
        height: rowH - 8, fill: PHASE_COLOURS[phase.name] || '#999',
      }, s('title', {}, `${phase.name}: ${fmtMs(phase.end - phase.start)}`)));
    }
    svg.append(bar);
    svg.append(s('text', { x: px(end) + 4, y: y + rowH / 2 + 4 }, fmtMs(end - sp.start)));
  });
  niceTicks(0, t1 - t0, 5).forEach((v, i) => {
    svg.append(s('text', { x: px(t0 + v), y: height - 6, 'text-anchor': i === 0 ? 'start' : 'middle' }, `+${fmtTickMs(v)}`));
  });
  return svg;
}

/**
 * The token timeline of one request: x = time since the request started, y = the token's
 * latency (gap to the previous token), one mark per token, coloured by stage; `marks` =
 * [{name, at}] draws labelled vertical rules (e.g. the first token).
 */
export function tokenTimeline(id, tokens, label, marks = []) {
  const width = 1200, height = 220, left = 64, right = 12, top = 10, bottom = 26;
  const svg = chart(id, width, height, label);
  svg.removeAttribute('preserveAspectRatio');
  if (!tokens.length) return emptyNote(svg, width, height);
  const x1 = Math.max(...tokens.map((t) => t.at), ...marks.map((m) => m.at), 1);
  const y1 = Math.max(...tokens.map((t) => t.latency), 1);
  const plotW = width - left - right, plotH = height - top - bottom;
  const px = (x) => left + (x / x1) * plotW;
  const py = (y) => top + plotH - (Math.sqrt(Math.max(0, y)) / Math.sqrt(y1)) * plotH;
  for (const mark of marks) {
    svg.append(s('line', { x1: px(mark.at), x2: px(mark.at), y1: top, y2: top + plotH, stroke: MARK_COLOUR, 'stroke-dasharray': '4 3', 'data-marker': mark.name, 'data-at': String(mark.at) }),
      s('text', { x: px(mark.at) + 4, y: top + 10 }, mark.name));
  }
  for (const t of tokens) {
    svg.append(s('circle', {
      'data-series': t.stage || 'token', cx: px(t.at).toFixed(1), cy: py(t.latency).toFixed(1), r: 2.6,
      fill: PHASE_COLOURS[t.stage] || PALETTE[0], 'fill-opacity': t.kv_hit === false ? 0.45 : 0.9,
    }, s('title', {}, `token ${t.step} (${t.stage || 'unknown stage'}) at +${fmtMs(t.at)}: ${fmtMs(t.latency)}${t.kv_hit == null ? '' : t.kv_hit ? ' · KV hit' : ' · KV miss'}`)));
  }
  for (const v of niceTicks(0, y1, 4)) {
    svg.append(s('text', { x: left - 6, y: py(v) + 4, 'text-anchor': 'end' }, fmtTickMs(v)));
  }
  niceTicks(0, x1, 5).forEach((x, i) => {
    svg.append(s('text', { x: px(x), y: height - 6, 'text-anchor': i === 0 ? 'start' : 'middle' }, `+${fmtTickMs(x)}`));
  });
  svg.append(s('rect', { x: left, y: top, width: plotW, height: plotH, fill: 'none', stroke: '#ccd' }));
  return svg;
}

/**
 * A small line chart of one metric around a moment: `points` = [[t ms, v]], `at` the moment
 * (a vertical rule), `format` the value formatter for the axis.
 */
export function momentLine(id, points, at, label, format) {
  const width = 360, height = 90, left = 52, right = 6, top = 6, bottom = 18;
  const svg = chart(id, width, height, label);
  svg.removeAttribute('preserveAspectRatio');
  const pts = points.filter(([, v]) => Number.isFinite(v));
  if (pts.length < 2) return emptyNote(svg, width, height);
  const [x0, x1] = [Math.min(at, ...pts.map(([t]) => t)), Math.max(at, ...pts.map(([t]) => t))];
  const [y0, y1] = [Math.min(0, ...pts.map(([, v]) => v)), Math.max(...pts.map(([, v]) => v)) || 1];
  const plotW = width - left - right, plotH = height - top - bottom;
  const px = (t) => left + ((t - x0) / (x1 - x0 || 1)) * plotW;
  const py = (v) => top + plotH - ((v - y0) / (y1 - y0 || 1)) * plotH;
  svg.append(s('polyline', {
    'data-series': id, fill: 'none', stroke: PALETTE[0], 'stroke-width': 1.5,
    points: pts.map(([t, v]) => `${px(t).toFixed(1)},${py(v).toFixed(1)}`).join(' '),
  }, s('title', {}, label)));
  svg.append(s('line', { x1: px(at), x2: px(at), y1: top, y2: top + plotH, stroke: '#c62f2f', 'stroke-dasharray': '3 2', 'data-marker': 'request' }));
  svg.append(s('text', { x: left - 4, y: top + 8, 'text-anchor': 'end' }, format(y1)));
  svg.append(s('text', { x: left - 4, y: top + plotH, 'text-anchor': 'end' }, format(y0)));
  svg.append(s('text', { x: left, y: height - 4 }, fmtTime(x0)));
  svg.append(s('text', { x: width - right, y: height - 4, 'text-anchor': 'end' }, fmtTime(x1)));
  return svg;
}

/** Lanes of the incident timeline, top to bottom, and the events each holds. */
export const TIMELINE_LANES = [
  ['fault', ['onset']],
  ['watcher', ['detected', 'detection']],
  ['verdict', ['verdict']],
  ['actions', ['action']],
  ['notifications', ['notified']],
  ['outcome', ['resolved', 'confirmed', 'rejected']],
];

/**
 * The incident timeline: one lane per kind of event (onset, detection, verdict updates,
 * automatic actions, notifications sent, resolution), each entry a mark at its time with its
 * detail as a tooltip; the episode (onset to resolution, or to `nowMs` while open) is shaded.
 * `entries` = [{at: RFC 3339, event, detail}].
 */
export function incidentTimeline(entries, nowMs) {
  const width = 1200, laneHeight = 30, left = 120, right = 24, top = 10, axis = 26;
  const height = top + TIMELINE_LANES.length * laneHeight + axis;
  const svg = chart('incident-timeline', width, height, 'Incident timeline');
  svg.removeAttribute('preserveAspectRatio');
  const marks = entries.map((e) => ({ ...e, ms: Date.parse(e.at) })).filter((e) => Number.isFinite(e.ms));
  if (!marks.length) return emptyNote(svg, width, height);
  const onset = marks.find((e) => e.event === 'onset');
  const end = marks.find((e) => e.event === 'resolved');
  let t0 = Math.min(...marks.map((e) => e.ms));
  let t1 = Math.max(...marks.map((e) => e.ms), end ? 0 : nowMs);
  const pad = Math.max((t1 - t0) * 0.04, 30000);
  t0 -= pad; t1 += pad;
  const px = (ms) => left + ((ms - t0) / (t1 - t0)) * (width - left - right);
  const laneOf = (event) => Math.max(0, TIMELINE_LANES.findIndex(([, events]) => events.includes(event)));
  const ly = (lane) => top + lane * laneHeight + laneHeight / 2;
  if (onset) {
    const stop = end ? end.ms : nowMs;
    svg.append(s('rect', {
      class: 'episode', x: px(onset.ms), y: top, width: Math.max(1, px(stop) - px(onset.ms)),
      height: TIMELINE_LANES.length * laneHeight, fill: '#c23b5a', 'fill-opacity': 0.07,
    }, s('title', {}, end ? 'the episode, onset to resolution' : 'the episode so far (still open)')));
  }
  TIMELINE_LANES.forEach(([name], lane) => {
    svg.append(s('line', { x1: left, x2: width - right, y1: ly(lane), y2: ly(lane), stroke: '#dfe3e8' }));
    svg.append(s('text', { x: left - 8, y: ly(lane) + 4, 'text-anchor': 'end' }, name));
  });
  for (const e of marks) {
    const lane = laneOf(e.event);
    const colour = PALETTE[lane % PALETTE.length];
    const x = px(e.ms), y = ly(lane);
    const shape = e.event === 'onset' || e.event === 'resolved'
      ? s('rect', { x: x - 1.5, y: y - 11, width: 3, height: 22, fill: colour })
      : s('circle', { cx: x, cy: y, r: 6, fill: colour, 'fill-opacity': 0.85 });
    shape.setAttribute('data-series', e.event);
    shape.setAttribute('data-at', e.at);
    shape.append(s('title', {}, `${e.at.slice(0, 19).replace('T', ' ')}Z · ${e.event}: ${e.detail || ''}`));
    svg.append(shape);
  }
  const ticks = 6;
  for (let i = 0; i <= ticks; i += 1) {
    const t = t0 + ((t1 - t0) * i) / ticks;
    svg.append(s('text', { x: px(t), y: height - 8, 'text-anchor': i === 0 ? 'start' : i === ticks ? 'end' : 'middle' }, fmtTime(t)));
  }
  svg.dataset.entries = String(marks.length);
  return svg;
}
