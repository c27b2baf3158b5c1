// Dimensions, breakdown by a dimension and the requests explorer: all from
// `/api/v1/dimensions` and SQL over the store.

import { getJSON, sql, h, where, parseFilter, stepOf, seconds, fmtMs, REQUEST_DIMENSIONS, LATENCY_SLIS } from './api.js';
import { stackedBars } from './charts.js';

const TOP = 8;

export async function dimensionsPage(ctx) {
  const { win } = ctx;
  const answer = await getJSON(`/api/v1/dimensions?since=${seconds(win.since)}&until=${seconds(win.until)}`);
  const dims = answer.dimensions || [];
  ctx.el.append(h('h1', {}, 'Dimensions'),
    h('p', { class: 'muted' }, 'Low-cardinality attributes of the requests in the range, with their most frequent values. Columns link to a breakdown and to the slice\u2019s heatmap.'));
  if (!dims.length) { ctx.el.append(h('p', { class: 'empty' }, 'No requests in the range.')); return; }
  const table = h('table', { 'data-table': 'dimensions' },
    h('thead', {}, h('tr', {}, h('th', {}, 'dimension'), h('th', { class: 'num' }, 'distinct'), h('th', {}, 'top values'))),
    h('tbody', {}, dims.map((d) => {
      const column = d.source === 'column' && REQUEST_DIMENSIONS.includes(d.name);
      const max = Math.max(1, ...(d.values || []).map((v) => v.count));
      return h('tr', {},
        h('td', {}, column ? h('a', { href: ctx.linkTo('breakdown', { by: d.name }) }, d.name) : d.name, h('div', { class: 'muted' }, d.source)),
        h('td', { class: 'num' }, String(d.distinct_values)),
        h('td', {}, h('table', {}, h('tbody', {}, (d.values || []).slice(0, 6).map((v) => {
          const bar = h('span', { class: 'bar-h' });
          bar.style.width = `${(100 * v.count) / max}%`;
          return h('tr', {},
            h('td', {}, column ? h('a', { href: ctx.linkTo('heatmap', { filter: `${d.name}=${v.value}` }) }, v.value) : v.value),
            h('td', { class: 'num' }, String(v.count)),
            h('td', {}, bar));
        })))));
    })));
  ctx.el.append(h('div', { class: 'panel' }, table));
}

export async function breakdownPage(ctx) {
  const { state, win } = ctx;
  const by = REQUEST_DIMENSIONS.includes(state.by) ? state.by : 'worker';
  const sli = LATENCY_SLIS.includes(state.sli) ? state.sli : 'ttft';
  const filters = parseFilter(state.filter);
  const step = stepOf(win);
  const cond = where(win, filters);
  const [cells, stats] = await Promise.all([
    sql(`SELECT CAST(date_bin(INTERVAL '${step.ms / 1000} seconds', ts, TIMESTAMP '1970-01-01T00:00:00Z') AS BIGINT) / 1000000 AS t,
      COALESCE(CAST(${by} AS VARCHAR), '(none)') AS v, count(*) AS n FROM requests WHERE ${cond} GROUP BY 1, 2`),
    sql(`SELECT COALESCE(CAST(${by} AS VARCHAR), '(none)') AS v, count(*) AS n,
      approx_percentile_cont(${sli}_ms, 0.5) AS p50, approx_percentile_cont(${sli}_ms, 0.99) AS p99,
      sum(CASE WHEN status = 'error' THEN 1 ELSE 0 END) AS errors
      FROM requests WHERE ${cond} GROUP BY 1 ORDER BY n DESC`),
  ]);
  const top = stats.slice(0, TOP).map((r) => r.v);
  const names = stats.length > TOP ? [...top, 'other'] : top;
  const steps = [...new Set(cells.map((c) => Number(c.t)))].sort((a, b) => a - b);
  const index = new Map(steps.map((t, i) => [t, i]));
  const series = names.map((name) => ({ name, values: steps.map(() => 0) }));
  for (const c of cells) {
    const k = top.includes(c.v) ? top.indexOf(c.v) : names.length - 1;
    series[k].values[index.get(Number(c.t))] += Number(c.n);
  }
  const bySelect = h('select', { name: 'by' }, REQUEST_DIMENSIONS.map((d) => h('option', { value: d, selected: d === by }, d)));
  const sliSelect = h('select', { name: 'sli' }, LATENCY_SLIS.map((d) => h('option', { value: d, selected: d === sli }, d)));
  const filterInput = h('input', { type: 'text', name: 'filter', value: state.filter || '', placeholder: 'model=…', size: 30 });
  ctx.el.append(
    h('h1', {}, `Breakdown by ${by}`),
    h('form', { class: 'toolbar', onsubmit: (e) => { e.preventDefault(); ctx.update({ by: bySelect.value, sli: sliSelect.value, filter: filterInput.value.trim() || null }); } },
      h('label', {}, 'Dimension', bySelect), h('label', {}, 'Latency SLI (table)', sliSelect), h('label', {}, 'Slice', filterInput),
      h('button', { type: 'submit', class: 'secondary' }, 'Apply')),
    h('div', { class: 'panel' },
      h('p', { class: 'muted' }, `Requests per ${step.text}, stacked by ${by} (top ${TOP}).`),
      stackedBars('breakdown', steps, series, step.ms, `requests by ${by}`, win),
      h('div', { class: 'legend' }, names.map((name, i) => h('span', { class: `s${i}` }, name)))),
    h('h2', {}, `${by}: requests and ${sli}`),
    h('div', { class: 'panel' }, h('table', { 'data-table': 'breakdown' },
      h('thead', {}, h('tr', {}, h('th', {}, by), h('th', { class: 'num' }, 'requests'), h('th', { class: 'num' }, `${sli} p50`), h('th', { class: 'num' }, `${sli} p99`), h('th', { class: 'num' }, 'errors'), h('th', {}, ''))),
      h('tbody', {}, stats.map((r) => h('tr', {},
        h('td', {}, r.v), h('td', { class: 'num' }, String(r.n)), h('td', { class: 'num' }, fmtMs(r.p50)), h('td', { class: 'num' }, fmtMs(r.p99)),
        h('td', { class: 'num' }, String(r.errors)),
        h('td', {}, h('a', { href: ctx.linkTo('heatmap', { sli, filter: [state.filter, `${by}=${r.v}`].filter(Boolean).join(',') }) }, 'heatmap'))))))));
}

const REQUEST_COLUMNS = ['ts', 'request_id', 'worker', 'model_version', 'lora_adapters', 'kv_cache_policy', 'status', 'finish_reason', 'input_tokens', 'output_tokens', 'queue_ms', 'ttft_ms', 'tpot_ms', 'e2e_ms'];
const ORDERS = { slowest_ttft: 'ttft_ms DESC NULLS LAST', slowest_e2e: 'e2e_ms DESC NULLS LAST', newest: 'ts DESC', oldest: 'ts ASC' };

export async function requestsPage(ctx) {
  const { state, win } = ctx;
  const filters = parseFilter(state.filter);
  const order = ORDERS[state.order] ? state.order : 'slowest_ttft';
  const rows = await sql(`SELECT ${REQUEST_COLUMNS.map((c) => (c === 'ts' ? 'CAST(ts AS BIGINT) / 1000000 AS ts' : c)).join(', ')}
    FROM requests WHERE ${where(win, filters)} ORDER BY ${ORDERS[order]} LIMIT 200`);
  const orderSelect = h('select', { name: 'order' }, Object.keys(ORDERS).map((o) => h('option', { value: o, selected: o === order }, o.replace('_', ' '))));
  const filterInput = h('input', { type: 'text', name: 'filter', value: state.filter || '', placeholder: 'worker=worker-03,status=error', size: 36 });
  const cell = (c, v) => {
    if (v == null) return h('td', {}, '');
    if (c === 'ts') return h('td', { title: new Date(Number(v)).toISOString() }, new Date(Number(v)).toISOString().slice(11, 23));
    if (c.endsWith('_ms')) return h('td', { class: 'num' }, fmtMs(Number(v)));
    if (c.endsWith('_tokens')) return h('td', { class: 'num' }, String(v));
    return h('td', {}, String(v));
  };
  ctx.el.append(
    h('h1', {}, 'Requests'),
    h('form', { class: 'toolbar', onsubmit: (e) => { e.preventDefault(); ctx.update({ order: orderSelect.value, filter: filterInput.value.trim() || null }); } },
      h('label', {}, 'Order', orderSelect), h('label', {}, 'Slice', filterInput), h('button', { type: 'submit', class: 'secondary' }, 'Apply')),
    h('p', { class: 'muted' }, `${rows.length} requests shown (at most 200).`),
    h('div', { class: 'panel scroll' }, rows.length ? h('table', { 'data-table': 'requests' },
      h('thead', {}, h('tr', {}, REQUEST_COLUMNS.map((c) => h('th', { class: c.endsWith('_ms') || c.endsWith('_tokens') ? 'num' : null }, c.replace('_ms', '').replace('_tokens', ' tok'))))),
      h('tbody', {}, rows.map((r) => h('tr', {}, REQUEST_COLUMNS.map((c) => cell(c, r[c]))))))
      : h('p', { class: 'empty' }, 'No requests match.')));
}
