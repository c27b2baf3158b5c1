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
 * bucket index of `bucketMs(b)`), `win` the window, `stepMs` the column width. `onBrush(since,
 * until)` is called with the selection in ms (null when cleared); `selection` draws one.
 */
export function heatmap({ cells, win, stepMs, bucketMs, selection, onBrush, sli }) {
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
  const brush = s('rect', { class: 'brush', y: top, height: plotH, x: left, width: 0, visibility: 'hidden', 'data-marker': 'selection' });
  const overlay = s('rect', { class: 'overlay', x: left, y: top, width: plotW, height: plotH, fill: 'transparent' });
  svg.append(brush, overlay);
  svg.setAttribute('tabindex', '0');
  svg.setAttribute('aria-label', `${sli} latency heatmap; drag, or use the arrow keys (shift to widen), to select a window`);
  let current = selection ? [...selection] : null;
  const draw = () => {
    if (!current) { brush.setAttribute('visibility', 'hidden'); return; }
    const [a, b] = [Math.max(win.since, current[0]), Math.min(win.until, current[1])];
    brush.setAttribute('visibility', 'visible');
    brush.setAttribute('x', px(a).toFixed(1));
    brush.setAttribute('width', Math.max(1, px(b) - px(a)).toFixed(1));
  };
  draw();
  const toPlotX = (event) => {
    const box = svg.getBoundingClientRect();
    const x = ((event.clientX - box.left) / box.width) * width;
    return Math.min(left + plotW, Math.max(left, x));
  };
  const snap = (t) => Math.round(t / stepMs) * stepMs;
  let anchor = null;
  overlay.addEventListener('pointerdown', (event) => {
    event.preventDefault();
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
      if (b - a < stepMs) { current = null; draw(); onBrush(null); return; }
      current = [a, b];
      draw();
      onBrush(a, b);
    };
    window.addEventListener('pointermove', move);
    window.addEventListener('pointerup', up);
  });
  svg.addEventListener('keydown', (event) => {
    if (event.key === 'Escape') { current = null; draw(); onBrush(null); return; }
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
    onBrush(current[0], current[1]);
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
