// Latency heatmap (time × log latency bucket) of one SLI for the fleet or a slice, from SQL
// over `requests`. Brushing a window and pressing "Run RCA on selection" posts that window to
// `/api/v1/rca` and opens the stored incident.

import { sql, postJSON, h, where, parseFilter, stepOf, fmtMs, fmtTime, LATENCY_SLIS } from './api.js';
import { heatmap } from './charts.js';

/** Four buckets per octave: bucket b spans [2^(b/4), 2^((b+1)/4)) ms. */
const PER_OCTAVE = 4;
const bucketMs = (b) => 2 ** (b / PER_OCTAVE);

export async function heatmapPage(ctx) {
  const { state, win } = ctx;
  const sli = LATENCY_SLIS.includes(state.sli) ? state.sli : 'ttft';
  const filters = parseFilter(state.filter);
  const step = stepOf(win);
  const column = `${sli}_ms`;
  const rows = await sql(`SELECT CAST(date_bin(INTERVAL '${step.ms / 1000} seconds', ts, TIMESTAMP '1970-01-01T00:00:00Z') AS BIGINT) / 1000000 AS t,
    CAST(floor(log2(greatest(${column}, 0.5)) * ${PER_OCTAVE}) AS BIGINT) AS b, count(*) AS n
    FROM requests WHERE ${where(win, filters)} AND ${column} IS NOT NULL GROUP BY 1, 2`);
  const cells = rows.map((r) => ({ t: Number(r.t), b: Number(r.b), n: Number(r.n) }));
  let selection = state.sel_since && state.sel_until ? [Number(state.sel_since), Number(state.sel_until)] : null;

  const status = h('span', { class: 'muted', 'aria-live': 'polite', 'data-selection': '' });
  const run = h('button', { type: 'button', 'data-action': 'run-rca', disabled: !selection }, 'Run RCA on selection');
  const zoom = h('button', { type: 'button', class: 'secondary', disabled: !selection }, 'Zoom to selection');
  const describe = () => {
    status.textContent = selection
      ? `selected ${fmtTime(selection[0], true)} – ${fmtTime(selection[1], true)} (${Math.round((selection[1] - selection[0]) / 60000)} min)`
      : 'drag across the chart (or focus it and use ← →, shift to widen) to select a window';
    status.dataset.selection = selection ? `${selection[0]}-${selection[1]}` : '';
    run.disabled = !selection;
    zoom.disabled = !selection;
  };
  describe();
  const onBrush = (a, b) => {
    selection = a == null ? null : [a, b];
    describe();
    // keep the selection shareable without re-rendering the chart
    const params = new URLSearchParams(location.search);
    if (selection) { params.set('sel_since', String(a)); params.set('sel_until', String(b)); } else { params.delete('sel_since'); params.delete('sel_until'); }
    history.replaceState(null, '', `/?${params}`);
  };
  run.addEventListener('click', async () => {
    if (!selection) return;
    run.disabled = true;
    status.textContent = 'running root-cause analysis…';
    try {
      const report = await postJSON('/api/v1/rca', {
        since: new Date(selection[0]).toISOString(), until: new Date(selection[1]).toISOString(),
      });
      if (!report.incident_id) throw new Error('the server stores no incidents (no data directory?)');
      ctx.navigate(ctx.linkTo('incident', { id: report.incident_id }));
    } catch (error) {
      status.textContent = `RCA failed: ${error.message}`;
      status.classList.add('error');
      run.disabled = false;
    }
  });
  zoom.addEventListener('click', () => ctx.update({ range: 'custom', since: String(selection[0]), until: String(selection[1]), sel_since: null, sel_until: null }));

  const sliSelect = h('select', { name: 'sli' }, LATENCY_SLIS.map((name) => h('option', { value: name, selected: name === sli }, name)));
  const filterInput = h('input', { type: 'text', name: 'filter', value: state.filter || '', placeholder: 'model_version=r2,worker=worker-03', size: 36 });
  const form = h('form', { class: 'toolbar', onsubmit: (event) => { event.preventDefault(); ctx.update({ sli: sliSelect.value, filter: filterInput.value.trim() || null }); } },
    h('label', {}, 'SLI', sliSelect),
    h('label', {}, 'Slice (column=value, …)', filterInput),
    h('button', { type: 'submit', class: 'secondary' }, 'Apply'));
  const total = cells.reduce((a, c) => a + c.n, 0);
  ctx.el.append(
    h('h1', {}, `${sli} latency heatmap`),
    form,
    h('div', { class: 'panel' },
      h('p', { class: 'muted' }, `${total} requests${filters.length ? ` where ${state.filter}` : ''}; ${step.text} columns, ${PER_OCTAVE} buckets per doubling of latency; darker = more requests.`),
      heatmap({ cells, win, stepMs: step.ms, bucketMs, selection, onBrush, sli }),
      h('div', { class: 'toolbar' }, run, zoom, status)),
    h('p', { class: 'muted' }, `Cells with latency ≥ ${fmtMs(bucketMs(Math.max(...cells.map((c) => c.b), 0)))} are the slowest row.`));
}
