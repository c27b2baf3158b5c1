// Latency heatmap (time × log latency bucket) of one SLI for the fleet or a slice, from SQL
// over `requests`, with the p50 and p99 of each step drawn over it. Brushing a window (and,
// optionally, a baseline) and pressing "Run RCA on selection" posts them to `/api/v1/rca` and
// opens the stored incident; without a brushed baseline the engine picks one. Stored incidents
// are marked over it (their onset and span), with a colour legend of the counts.

import { sql, getJSON, postJSON, h, where, parseFilter, stepOf, fmtMs, fmtTime, LATENCY_SLIS } from './api.js';
import { heatmap, heatLegend } from './charts.js';

/** Four buckets per octave: bucket b spans [2^(b/4), 2^((b+1)/4)) ms. */
const PER_OCTAVE = 4;
const bucketMs = (b) => 2 ** (b / PER_OCTAVE);
const bucketOf = (ms) => Math.log2(Math.max(ms, 0.5)) * PER_OCTAVE;
const windowOf = (a, b) => (a && b && Number(b) > Number(a) ? [Number(a), Number(b)] : null);

/**
 * Marks of the stored incidents: each one's span (onset to resolution, or to its last update
 * while open) as an incident band with its onset. A server without incidents has none.
 */
export function incidentMarks(incidents) {
  const marks = [];
  for (const i of incidents) {
    const onset = Date.parse(i.onset || i.detected_at || '');
    if (!Number.isFinite(onset)) continue;
    const end = Date.parse(i.resolved_at || i.updated_at || '');
    const label = `${i.top_cause || i.verdict || 'incident'} (onset ${fmtTime(onset, true)})`;
    marks.push({ kind: 'incident', since: onset, until: Number.isFinite(end) && end > onset ? end : onset, label, id: i.id });
  }
  return marks;
}

export async function heatmapPage(ctx) {
  const { state, win } = ctx;
  const sli = LATENCY_SLIS.includes(state.sli) ? state.sli : 'ttft';
  const filters = parseFilter(state.filter);
  const step = stepOf(win);
  const column = `${sli}_ms`;
  const bin = `CAST(date_bin(INTERVAL '${step.ms / 1000} seconds', ts, TIMESTAMP '1970-01-01T00:00:00Z') AS BIGINT) / 1000000`;
  const cond = `${where(win, filters)} AND ${column} IS NOT NULL`;
  const [rows, quantiles, incidents] = await Promise.all([
    sql(`SELECT ${bin} AS t, CAST(floor(log2(greatest(${column}, 0.5)) * ${PER_OCTAVE}) AS BIGINT) AS b, count(*) AS n
      FROM requests WHERE ${cond} GROUP BY 1, 2`),
    sql(`SELECT ${bin} AS t, approx_percentile_cont(${column}, 0.5) AS p50, approx_percentile_cont(${column}, 0.99) AS p99
      FROM requests WHERE ${cond} GROUP BY 1 ORDER BY 1`),
    getJSON('/api/v1/incidents').then((answer) => answer.incidents || [], () => []),
  ]);
  const marks = incidentMarks(incidents);
  const cells = rows.map((r) => ({ t: Number(r.t), b: Number(r.b), n: Number(r.n) }));
  const lines = ['p99', 'p50'].map((q) => ({ name: q, points: quantiles.map((r) => [Number(r.t), Number(r[q])]) }));
  let selection = windowOf(state.sel_since, state.sel_until);
  let baseline = windowOf(state.base_since, state.base_until);
  let mode = 'selection';

  const status = h('span', { class: 'muted', 'aria-live': 'polite', 'data-selection': '' });
  const run = h('button', { type: 'button', 'data-action': 'run-rca', disabled: !selection }, 'Run RCA on selection');
  const zoom = h('button', { type: 'button', class: 'secondary', disabled: !selection }, 'Zoom to selection');
  const span = (w) => `${fmtTime(w[0], true)} – ${fmtTime(w[1], true)} (${Math.round((w[1] - w[0]) / 60000)} min)`;
  const describe = () => {
    status.textContent = selection
      ? `selected ${span(selection)}; baseline ${baseline ? span(baseline) : 'chosen by the engine'}`
      : 'drag across the chart (or focus it and use ← →, shift to widen) to select a window';
    status.dataset.selection = selection ? `${selection[0]}-${selection[1]}` : '';
    status.dataset.baseline = baseline ? `${baseline[0]}-${baseline[1]}` : '';
    run.disabled = !selection;
    zoom.disabled = !selection;
  };
  describe();
  const onBrush = (kind, a, b) => {
    const w = a == null ? null : [a, b];
    if (kind === 'baseline') baseline = w; else selection = w;
    describe();
    // keep the windows shareable without re-rendering the chart
    const params = new URLSearchParams(location.search);
    const [k0, k1] = kind === 'baseline' ? ['base_since', 'base_until'] : ['sel_since', 'sel_until'];
    if (w) { params.set(k0, String(a)); params.set(k1, String(b)); } else { params.delete(k0); params.delete(k1); }
    history.replaceState(null, '', `/?${params}`);
  };
  const modeRadio = (value, text) => h('label', { class: 'check' },
    h('input', { type: 'radio', name: 'brush-mode', value, checked: value === mode, 'data-brush-mode': value, onchange: () => { mode = value; } }), text);
  const modes = h('fieldset', { class: 'modes' }, h('legend', {}, 'Dragging selects'),
    modeRadio('selection', 'the incident window'), modeRadio('baseline', 'a baseline (optional)'));
  run.addEventListener('click', async () => {
    if (!selection) return;
    run.disabled = true;
    status.textContent = 'running root-cause analysis…';
    try {
      const body = { since: new Date(selection[0]).toISOString(), until: new Date(selection[1]).toISOString() };
      if (baseline) {
        body.baseline_since = new Date(baseline[0]).toISOString();
        body.baseline_until = new Date(baseline[1]).toISOString();
      }
      const report = await postJSON('/api/v1/rca', body);
      if (!report.incident_id) {
        // not enough data in the window (or a server that keeps no incidents): the verdict says
        status.textContent = report.verdict || 'no incident stored';
        status.dataset.verdict = 'not-stored';
        run.disabled = false;
        return;
      }
      ctx.navigate(ctx.linkTo('incident', { id: report.incident_id }));
    } catch (error) {
      status.textContent = `RCA failed: ${error.message}`;
      status.classList.add('error');
      run.disabled = false;
    }
  });
  zoom.addEventListener('click', () => ctx.update({ range: 'custom', since: String(selection[0]), until: String(selection[1]), sel_since: null, sel_until: null, base_since: null, base_until: null }));

  const sliSelect = h('select', { name: 'sli' }, LATENCY_SLIS.map((name) => h('option', { value: name, selected: name === sli }, name)));
  const filterInput = h('input', { type: 'text', name: 'filter', value: state.filter || '', placeholder: 'model_version=r2,worker=worker-03', size: 36 });
  const form = h('form', { class: 'toolbar', onsubmit: (event) => { event.preventDefault(); ctx.update({ sli: sliSelect.value, filter: filterInput.value.trim() || null }); } },
    h('label', {}, 'SLI', sliSelect),
    h('label', {}, 'Slice (column=value, …)', filterInput),
    h('button', { type: 'submit', class: 'secondary' }, 'Apply'));
  const total = cells.reduce((a, c) => a + c.n, 0);
  const max = Math.max(0, ...cells.map((c) => c.n));
  const shownMarks = marks.filter((m) => m.until >= win.since && m.since <= win.until);
  ctx.el.append(
    h('h1', {}, `${sli} latency heatmap`),
    form,
    h('div', { class: 'panel' },
      h('p', { class: 'muted' }, `${total} requests${filters.length ? ` where ${state.filter}` : ''}; ${step.text} columns, ${PER_OCTAVE} buckets per doubling of latency; darker = more requests; the solid line is the p99 of each column, the dashed one the p50${shownMarks.length ? `; ${shownMarks.length} stored incident${shownMarks.length > 1 ? 's' : ''} marked along the top, dashed at the onset` : ''}.`),
      heatmap({ cells, win, stepMs: step.ms, bucketMs, bucketOf, selection, baseline, mode: () => mode, onBrush, sli, lines, marks }),
      cells.length ? heatLegend(max) : null,
      h('div', { class: 'toolbar' }, modes, run, zoom, status)),
    h('p', { class: 'muted' }, `Cells with latency ≥ ${fmtMs(bucketMs(Math.max(...cells.map((c) => c.b), 0)))} are the slowest row.`));
}
