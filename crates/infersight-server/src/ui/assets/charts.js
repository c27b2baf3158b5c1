// SVG charts drawn in the browser: sparklines, the latency heatmap (with brushing) and stacked
// bars. Every chart is an `svg[data-chart]` whose marks carry `data-series`, and an empty chart
// says so with `data-empty="true"`, so tests can check that every chart has data.

import { fmtMs, fmtTime } from './api.js';

const NS = 'http://www.w3.org/2000/svg';
export const PALETTE = ['#2f6fde', '#e0752d', '#2a9d6a', '#c23b5a', '#7b5cc4', '#8c6d3f', '#d060a8', '#5b8c99', '#9aa3ae'];

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

/** A sparkline of `series` = [{name, points: [[x, y]]}], the first series drawn strongest. */
export function sparkline(id, series, label) {
  const width = 240, height = 40, pad = 2;
  const svg = chart(id, width, height, label);
  const all = series.flatMap((line) => line.points).filter(([, y]) => Number.isFinite(y));
  if (all.length < 2) return emptyNote(svg, width, height);
  const xs = all.map(([x]) => x), ys = all.map(([, y]) => y);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  const [y0, y1] = [Math.min(0, ...ys), Math.max(...ys) || 1];
  const px = (x) => pad + ((x - x0) / (x1 - x0 || 1)) * (width - 2 * pad);
  const py = (y) => height - pad - ((y - y0) / (y1 - y0 || 1)) * (height - 2 * pad);
  series.forEach((line, i) => {
    const points = line.points.filter(([, y]) => Number.isFinite(y));
    if (points.length < 2) return;
    svg.append(s('polyline', {
      'data-series': line.name, fill: 'none', stroke: PALETTE[i % PALETTE.length],
      'stroke-width': i === 0 ? 1.8 : 1, 'stroke-opacity': i === 0 ? 1 : 0.55,
      'vector-effect': 'non-scaling-stroke',
      points: points.map(([x, y]) => `${px(x).toFixed(1)},${py(y).toFixed(1)}`).join(' '),
    }, s('title', {}, line.name)));
  });
  svg.dataset.points = String(all.length);
  return svg;
}

/** Colour of a heatmap cell: light blue → dark red on a log scale of the count. */
function heat(count, max) {
  const t = Math.log1p(count) / Math.log1p(max || 1);
  const hue = 210 - 210 * t;
  return `hsl(${hue.toFixed(0)}, 75%, ${(88 - 45 * t).toFixed(0)}%)`;
}

/**
 * The latency heatmap: x = time step, y = log bucket. `cells` = [{t, b, n}] (t in ms, b the
 * bucket index of `bucketMs(b)`), `win` the window, `stepMs` the column width. Two windows can
 * be brushed: the incident `selection` and the `baseline`; `mode()` says which one a drag (or
 * the arrow keys) sets, and `onBrush(kind, since, until)` reports it in ms (since null when
 * cleared). `lines` = [{name, points: [[t, ms]]}] are drawn over the cells (e.g. p50 and p99),
 * at the fractional bucket `bucketOf(ms)`.
 */
export function heatmap({ cells, win, stepMs, bucketMs, bucketOf, selection, baseline, mode = () => 'selection', onBrush, sli, lines = [] }) {
  const width = 1200, height = 380, left = 64, right = 12, top = 10, bottom = 28;
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
  const marks = s('g');
  for (const c of cells) {
    if (c.t + stepMs <= win.since || c.t >= win.until) continue;
    const x = Math.max(left, px(c.t));
    marks.append(s('rect', {
      'data-series': 'requests', x: x.toFixed(1), y: py(c.b).toFixed(1),
      width: Math.max(0.5, Math.min(colW, left + plotW - x)).toFixed(1), height: rowH.toFixed(2),
      fill: heat(c.n, max),
    }, s('title', {}, `${fmtTime(c.t)} · ${fmtMs(bucketMs(c.b))}–${fmtMs(bucketMs(c.b + 1))}: ${c.n} requests`)));
  }
  svg.append(marks);
  lines.forEach((line, i) => {
    const points = line.points.filter(([t, v]) => Number.isFinite(v) && v > 0 && t >= win.since && t < win.until);
    if (points.length < 2) return;
    const y = (v) => Math.min(top + plotH, Math.max(top, top + plotH - (bucketOf(v) - b0) * rowH));
    svg.append(s('polyline', {
      'data-series': line.name, class: 'quantile-line', fill: 'none', stroke: i === 0 ? '#1d2330' : '#ffffff',
      'stroke-width': 1.6, 'stroke-dasharray': i === 0 ? null : '5 3', 'pointer-events': 'none',
      points: points.map(([t, v]) => `${(px(t) + colW / 2).toFixed(1)},${y(v).toFixed(1)}`).join(' '),
    }, s('title', {}, line.name)));
  });
  // axes: latency labels every few rows, time labels at ~8 places
  const axis = s('g');
  const every = Math.max(1, Math.ceil((b1 - b0) / 8));
  for (let b = b0; b <= b1; b += every) {
    const y = top + plotH - (b - b0) * rowH;
    axis.append(s('text', { x: left - 6, y: y + 4, 'text-anchor': 'end' }, fmtMs(bucketMs(b))));
    axis.append(s('line', { x1: left - 3, x2: left, y1: y, y2: y, stroke: '#999' }));
  }
  for (let i = 0; i <= 8; i += 1) {
    const t = win.since + ((win.until - win.since) * i) / 8;
    axis.append(s('text', { x: px(t), y: height - 8, 'text-anchor': i === 0 ? 'start' : i === 8 ? 'end' : 'middle' }, fmtTime(t)));
  }
  axis.append(s('rect', { x: left, y: top, width: plotW, height: plotH, fill: 'none', stroke: '#ccd' }));
  svg.append(axis);
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
        fill: PALETTE[k % PALETTE.length],
      }, s('title', {}, `${fmtTime(t)} ${line.name}: ${v}`)));
      base += v;
    });
  });
  for (let i = 0; i <= 4; i += 1) {
    const v = (max * i) / 4;
    svg.append(s('text', { x: left - 6, y: py(v) + 4, 'text-anchor': 'end' }, v >= 100 || Number.isInteger(v) ? v.toFixed(0) : v.toFixed(1)));
  }
  for (let i = 0; i <= 6; i += 1) {
    const t = t0 + ((t1 - t0) * i) / 6;
    svg.append(s('text', { x: px(t), y: height - 6, 'text-anchor': i === 0 ? 'start' : i === 6 ? 'end' : 'middle' }, fmtTime(t)));
  }
  return svg;
}

/** Colours of the latency phases, shared by every phase chart. */
export const PHASE_COLOURS = { queue: '#e0752d', prefill: '#7b5cc4', decode: '#2f6fde', other: '#9aa3ae' };

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
  for (let i = 0; i <= 4; i += 1) {
    const v = (max * i) / 4;
    svg.append(s('text', { x: left + px(v), y: height - 6, 'text-anchor': i === 0 ? 'start' : i === 4 ? 'end' : 'middle' }, fmtMs(v)));
  }
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
  for (let i = 0; i <= 5; i += 1) {
    const t = t0 + ((t1 - t0) * i) / 5;
    svg.append(s('text', { x: px(t), y: height - 6, 'text-anchor': i === 0 ? 'start' : i === 5 ? 'end' : 'middle' }, `+${fmtMs(t - t0)}`));
  }
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
    svg.append(s('line', { x1: px(mark.at), x2: px(mark.at), y1: top, y2: top + plotH, stroke: '#c62f2f', 'stroke-dasharray': '4 3' }),
      s('text', { x: px(mark.at) + 4, y: top + 10 }, mark.name));
  }
  for (const t of tokens) {
    svg.append(s('circle', {
      'data-series': t.stage || 'token', cx: px(t.at).toFixed(1), cy: py(t.latency).toFixed(1), r: 2.6,
      fill: PHASE_COLOURS[t.stage] || '#2f6fde', 'fill-opacity': t.kv_hit === false ? 0.45 : 0.9,
    }, s('title', {}, `token ${t.step} (${t.stage || 'unknown stage'}) at +${fmtMs(t.at)}: ${fmtMs(t.latency)}${t.kv_hit == null ? '' : t.kv_hit ? ' · KV hit' : ' · KV miss'}`)));
  }
  for (let i = 0; i <= 4; i += 1) {
    const v = (y1 * i * i) / 16;
    svg.append(s('text', { x: left - 6, y: py(v) + 4, 'text-anchor': 'end' }, fmtMs(v)));
  }
  for (let i = 0; i <= 5; i += 1) {
    const x = (x1 * i) / 5;
    svg.append(s('text', { x: px(x), y: height - 6, 'text-anchor': i === 0 ? 'start' : i === 5 ? 'end' : 'middle' }, `+${fmtMs(x)}`));
  }
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
