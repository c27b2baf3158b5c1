// Dimensions, breakdown by a dimension and the requests explorer: all from
// `/api/v1/dimensions` and SQL over the store. Each of the three compares an incident window
// with a baseline (compare.js: picked on the page, brushed on the heatmap, else the newest
// stored incident's windows): Dimensions ranks every value by how much more of the slow
// incident requests it holds than of the baseline's requests (BubbleUp's question: what do the
// slow requests have in common?), Breakdown shows each value's p99 before and after, Requests
// orders requests by how unusual they are for their model.

import { getJSON, sql, h, quote, where, parseFilter, stepOf, seconds, fmtMs, fmtPct, fmtTime, REQUEST_DIMENSIONS, LATENCY_SLIS } from './api.js';
import { stackedBars, phaseBars, flame, PALETTE, PHASE_COLOURS } from './charts.js';
import { comparison, comparePicker, windowKeys } from './compare.js';

const TOP = 8;

/**
 * The dimensions worth slicing by (categorical ones) and those set aside: constant (one value:
 * splits nothing) and continuous (a score or a measure: hundreds of distinct numbers). `kind`
 * comes from the server, which judges it on every value.
 */
export function sliceable(dims) {
  const shown = [], constant = [], continuous = [];
  for (const d of dims) {
    if (d.kind === 'constant') constant.push(d);
    else if (d.kind === 'continuous') continuous.push(d);
    else shown.push(d);
  }
  return { shown, constant, continuous };
}

export async function dimensionsPage(ctx) {
  const { state, win } = ctx;
  const [answer, compared] = await Promise.all([
    getJSON(`/api/v1/dimensions?since=${seconds(win.since)}&until=${seconds(win.until)}`),
    comparison(state, win).catch(() => ({ windows: null, incidents: [] })),
  ]);
  const all = answer.dimensions || [];
  const { shown, constant, continuous } = sliceable(all);
  const dims = state.all === '1' ? all : shown;
  ctx.el.append(h('h1', {}, 'Dimensions'),
    h('p', { class: 'muted' }, 'Low-cardinality attributes of the requests in the range, with their most frequent values. Columns link to a breakdown; every value links to its slice\u2019s heatmap (attributes as attrs.<key>=value).'));
  if (!all.length) { ctx.el.append(h('p', { class: 'empty' }, 'No requests in the range.')); return; }
  const names = (list) => list.map((d) => d.name).join(', ');
  const hidden = [
    constant.length ? `${constant.length} constant (one value: ${names(constant)})` : null,
    continuous.length ? `${continuous.length} continuous (many distinct numbers: ${names(continuous)})` : null,
  ].filter(Boolean);
  if (hidden.length) {
    ctx.el.append(h('p', { class: 'muted hidden-dims', 'data-hidden-dimensions': String(constant.length + continuous.length) },
      state.all === '1' ? 'Showing every attribute, ' : 'Not listed: ', hidden.join('; '), '. ',
      h('a', { href: ctx.linkTo('dimensions', { all: state.all === '1' ? null : '1' }) }, state.all === '1' ? 'Hide them' : 'Show them')));
  }
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
            h('td', {}, column || d.source === 'attrs'
              ? h('a', { href: ctx.linkTo('heatmap', { filter: `${column ? '' : 'attrs.'}${d.name}=${v.value}` }) }, v.value) : v.value),
            h('td', { class: 'num' }, String(v.count)),
            h('td', {}, bar));
        })))));
    })));
  const changes = await compareSection(ctx, shown, compared).catch((error) => h('p', { class: 'error', role: 'alert' }, `comparison: ${error.message || error}`));
  ctx.el.append(changes || '', h('h2', {}, 'Values in the range'), h('div', { class: 'panel' }, table));
}

/** Dimensions compared at most, and rows shown. */
const COMPARE_DIMENSIONS = 40;
const COMPARE_ROWS = 12;
/**
 * Baseline rows read for the shares at most: beyond it, one baseline request in `stride` (by
 * its millisecond, which arrivals spread evenly): a share's standard error stays under 0.4 pp
 * and the page stays fast on a long baseline (every row read is unnested into one pair per
 * dimension). Values whose rises differ by less than that (an attribute that nearly coincides
 * with the injected slice's value) may swap places between a sampled and an exact count.
 */
const COMPARE_BASE_ROWS = 20000;

/**
 * Share of each value among the slow requests of the incident window (slower than the
 * baseline's p95 of the SLI) against its share of the baseline's requests; `rows` = [{d, s, v,
 * slow, base}] per dimension (d), source (s) and value (v, null for none), with the totals.
 * Ranked by the difference of shares; values with fewer than `minSlow` slow requests are left out.
 */
export function rankChanges(rows, totals, minSlow = 5) {
  const out = [];
  for (const r of rows) {
    if (r.v == null || Number(r.slow) < minSlow) continue;
    const slowShare = Number(r.slow) / Math.max(1, totals.slow);
    const baseShare = Number(r.base) / Math.max(1, totals.base);
    out.push({ ...r, slow: Number(r.slow), base: Number(r.base), slowShare, baseShare, delta: slowShare - baseShare });
  }
  return out.sort((a, b) => b.delta - a.delta || b.slow - a.slow);
}

/** What differs between the incident and the baseline (`compared`), by dimension value. */
async function compareSection(ctx, dims, compared) {
  const { state } = ctx;
  const { windows } = compared;
  const sli = LATENCY_SLIS.includes(state.sli) ? state.sli : 'ttft';
  const head = [h('h2', {}, 'What differs in the incident'), comparePicker(ctx, compared)];
  if (!windows) {
    return h('section', { 'data-compare': 'none' }, head, h('p', { class: 'muted' },
      'No incident window to compare: pick or type one and a baseline above, brush them on the heatmap, or run RCA to store an incident.'));
  }
  const inWin = (w) => `ts >= to_timestamp_millis(${Math.floor(w[0])}) AND ts < to_timestamp_millis(${Math.ceil(w[1])})`;
  const column = `${sli}_ms`;
  const [{ p, n } = {}] = await sql(`SELECT approx_percentile_cont(${column}, 0.95) AS p, count(*) AS n FROM requests WHERE ${inWin(windows.base)} AND ${column} IS NOT NULL`);
  if (p == null) return h('section', { 'data-compare': 'empty' }, head, h('p', { class: 'empty' }, 'The baseline window holds no requests.'));
  const listed = dims.filter((d) => d.source === 'attrs' || /^[a-z_]+$/.test(d.name)).slice(0, COMPARE_DIMENSIONS);
  const exprOf = (d) => (d.source === 'attrs' ? `json_get(attrs, ${quote(d.name)})` : `CAST(${d.name} AS VARCHAR)`);
  // one scan: each row of the two windows unnested into one (dimension, value) pair per dimension
  const pairs = listed.map((d, i) => `CASE WHEN ${exprOf(d)} IS NULL THEN NULL ELSE concat('${i}', chr(31), ${exprOf(d)}) END`);
  const slow = `(${inWin(windows.sel)} AND ${column} > ${Number(p)})`;
  const stride = Math.max(1, Math.ceil(Number(n) / COMPARE_BASE_ROWS));
  const base = stride > 1 ? `(${inWin(windows.base)} AND (CAST(ts AS BIGINT) / 1000000) % ${stride} = 0)` : `(${inWin(windows.base)})`;
  const [rows, [totals]] = await Promise.all([sql(`SELECT pair, sum(slow) AS slow, sum(base) AS base FROM (
      SELECT unnest(make_array(${pairs.join(', ')})) AS pair, CASE WHEN ${slow} THEN 1 ELSE 0 END AS slow, CASE WHEN ${base} THEN 1 ELSE 0 END AS base
      FROM requests WHERE ${slow} OR ${base}) x
    WHERE pair IS NOT NULL GROUP BY pair`), sql(`SELECT sum(CASE WHEN ${slow} THEN 1 ELSE 0 END) AS slow, sum(CASE WHEN ${inWin(windows.base)} THEN 1 ELSE 0 END) AS base,
      sum(CASE WHEN ${base} THEN 1 ELSE 0 END) AS sampled
    FROM requests WHERE ${slow} OR ${inWin(windows.base)}`)]);
  const parsed = rows.map((r) => {
    const [index, value] = String(r.pair).split('\u001f');
    const d = listed[Number(index)];
    return { d: d.name, s: d.source, v: value, slow: r.slow, base: r.base };
  });
  const ranked = rankChanges(parsed, { slow: Number(totals.slow), base: Number(totals.sampled) }).slice(0, COMPARE_ROWS);
  const span = (w) => `${fmtTime(w[0], true)} – ${fmtTime(w[1])}Z`;
  return h('section', { 'data-compare': windows.from },
    head,
    h('p', { class: 'muted' }, `Incident ${span(windows.sel)} against the baseline ${span(windows.base)} (${windows.from}): `,
      `${Number(totals.slow)} incident requests slower than the baseline's ${sli} p95 (${fmtMs(Number(p))}), ${Number(totals.base)} baseline requests`,
      stride > 1 ? ` (shares from a 1-in-${stride} sample of them, ${Number(totals.sampled)}). ` : '. ',
      'Each value\u2019s share of the slow requests against its share of the baseline, largest rise first.'),
    h('div', { class: 'panel' }, ranked.length ? h('table', { 'data-table': 'dimension-changes' },
      h('thead', {}, h('tr', {}, h('th', {}, 'value'), h('th', { class: 'num' }, 'slow requests'), h('th', { class: 'num' }, 'share of slow'), h('th', { class: 'num' }, 'share of baseline'), h('th', { class: 'num' }, 'change'))),
      h('tbody', {}, ranked.map((r) => {
        const key = `${r.s === 'attrs' ? 'attrs.' : ''}${r.d}`;
        return h('tr', { 'data-change': `${key}=${r.v}` },
          h('td', {}, h('a', { href: ctx.linkTo('heatmap', { sli, filter: `${key}=${r.v}`, ...windowKeys(windows.sel, windows.base) }) }, `${key}=${r.v}`)),
          h('td', { class: 'num' }, String(r.slow)), h('td', { class: 'num' }, fmtPct(r.slowShare)), h('td', { class: 'num' }, fmtPct(r.baseShare)),
          h('td', { class: 'num', 'data-delta': r.delta.toFixed(4) }, `${r.delta >= 0 ? '+' : ''}${(100 * r.delta).toFixed(1)} pp`));
      })))
      : h('p', { class: 'empty' }, 'No value holds more of the slow requests than of the baseline.')));
}

/**
 * Per value of `by`: the SLI's p99 in the baseline and in the incident window (`windows`:
 * picked, the URL's, else the newest stored incident's), their change, and the order by the
 * relative change (largest rise first, values without both last). Null without windows.
 */
async function sliceChanges(windows, by, sli, filters) {
  if (!windows) return null;
  const p99 = (w) => sql(`SELECT ${valueOf(by)} AS v, approx_percentile_cont(${sli}_ms, 0.99) AS p99 FROM requests
    WHERE ${where({ since: w[0], until: w[1] }, filters)} GROUP BY 1`);
  const [base, sel] = await Promise.all([p99(windows.base), p99(windows.sel)]);
  const byValue = new Map();
  for (const r of base) byValue.set(r.v, { base: Number(r.p99) });
  for (const r of sel) byValue.set(r.v, { ...(byValue.get(r.v) || {}), sel: Number(r.p99) });
  const rise = (v) => { const c = byValue.get(v); return c && c.base > 0 && Number.isFinite(c.sel) ? c.sel / c.base - 1 : -Infinity; };
  return {
    ...windows,
    order: (rows) => [...rows].sort((a, b) => rise(b.v) - rise(a.v)),
    cells: (v) => {
      const c = byValue.get(v) || {};
      const r = rise(v);
      return [h('td', { class: 'num' }, fmtMs(c.base)), h('td', { class: 'num' }, fmtMs(c.sel)),
        h('td', { class: 'num', 'data-change': Number.isFinite(r) ? r.toFixed(4) : '' }, Number.isFinite(r) ? `${r >= 0 ? '+' : ''}${(100 * r).toFixed(0)} %` : '–')];
    },
  };
}

const PHASES = ['queue', 'prefill', 'decode', 'other'];
/** SQL of a dimension's value as text, `(none)` for NULL. */
const valueOf = (column) => `COALESCE(CAST(${column} AS VARCHAR), '(none)')`;
/** Sums of the phases (ms) of the grouped requests; `other` is e2e minus the three. */
const PHASE_SUMS = `sum(COALESCE(queue_ms, 0)) AS queue, sum(COALESCE(prefill_ms, 0)) AS prefill, sum(COALESCE(decode_ms, 0)) AS decode,
  sum(greatest(COALESCE(e2e_ms, 0) - COALESCE(queue_ms, 0) - COALESCE(prefill_ms, 0) - COALESCE(decode_ms, 0), 0)) AS other`;

/** The top `limit` groups of `rows` by `value(row)`, the rest merged into `other` with `merge`. */
function topGroups(rows, limit, value, merge) {
  const sorted = [...rows].sort((a, b) => value(b) - value(a));
  if (sorted.length <= limit) return sorted;
  return [...sorted.slice(0, limit), sorted.slice(limit).reduce(merge)];
}

/** The flame tree: all requests → values of `by` → values of `by2` (if any) → phases. */
function flameTree(rows, by2) {
  const phaseNodes = (r) => PHASES.map((p) => ({ name: p, value: Number(r[p]) || 0, phase: p })).filter((n) => n.value > 0);
  const total = (r) => PHASES.reduce((a, p) => a + (Number(r[p]) || 0), 0);
  const mergeRows = (name) => (a, b) => ({ v: name, v2: name, n: Number(a.n) + Number(b.n), ...Object.fromEntries(PHASES.map((p) => [p, Number(a[p]) + Number(b[p])])) });
  const byValue = new Map();
  for (const r of rows) {
    if (!byValue.has(r.v)) byValue.set(r.v, []);
    byValue.get(r.v).push(r);
  }
  const firstLevel = [...byValue.entries()].map(([v, list]) => ({ v, list, ...list.reduce(mergeRows(v)) }));
  const children = topGroups(firstLevel, 8, total, (a, b) => ({ ...mergeRows('other')(a, b), list: [...a.list, ...b.list] })).map((group) => {
    const node = { name: group.v, value: total(group), note: `${group.n} requests` };
    if (by2) {
      const inner = topGroups(group.list, 6, total, mergeRows('other'));
      node.children = inner.map((r) => ({ name: r.v2, value: total(r), note: `${r.n} requests`, children: phaseNodes(r) }));
    } else {
      node.children = phaseNodes(group);
    }
    return node;
  });
  return { name: 'all requests', value: children.reduce((a, c) => a + c.value, 0), children };
}

export async function breakdownPage(ctx) {
  const { state, win } = ctx;
  const by = REQUEST_DIMENSIONS.includes(state.by) ? state.by : 'worker';
  const by2 = REQUEST_DIMENSIONS.includes(state.by2) && state.by2 !== by ? state.by2 : null;
  const sli = LATENCY_SLIS.includes(state.sli) ? state.sli : 'ttft';
  const filters = parseFilter(state.filter);
  const step = stepOf(win);
  const cond = where(win, filters);
  const [cells, stats, nested, compared] = await Promise.all([
    sql(`SELECT CAST(date_bin(INTERVAL '${step.ms / 1000} seconds', ts, TIMESTAMP '1970-01-01T00:00:00Z') AS BIGINT) / 1000000 AS t,
      ${valueOf(by)} AS v, count(*) AS n FROM requests WHERE ${cond} GROUP BY 1, 2`),
    sql(`SELECT ${valueOf(by)} AS v, count(*) AS n,
      approx_percentile_cont(${sli}_ms, 0.5) AS p50, approx_percentile_cont(${sli}_ms, 0.99) AS p99,
      sum(CASE WHEN status = 'error' THEN 1 ELSE 0 END) AS errors, ${PHASE_SUMS}
      FROM requests WHERE ${cond} GROUP BY 1 ORDER BY n DESC`),
    by2 ? sql(`SELECT ${valueOf(by)} AS v, ${valueOf(by2)} AS v2, count(*) AS n, ${PHASE_SUMS}
      FROM requests WHERE ${cond} GROUP BY 1, 2`) : Promise.resolve(null),
    comparison(state, win).catch(() => ({ windows: null, incidents: [] })),
  ]);
  const compare = await sliceChanges(compared.windows, by, sli, filters);
  const top = stats.slice(0, TOP).map((r) => r.v);
  const names = stats.length > TOP ? [...top, 'other'] : top;
  const steps = [...new Set(cells.map((c) => Number(c.t)))].sort((a, b) => a - b);
  const index = new Map(steps.map((t, i) => [t, i]));
  const series = names.map((name) => ({ name, values: steps.map(() => 0) }));
  for (const c of cells) {
    const k = top.includes(c.v) ? top.indexOf(c.v) : names.length - 1;
    series[k].values[index.get(Number(c.t))] += Number(c.n);
  }
  // mean time per request in each phase, for the values with the most requests
  const phaseRows = stats.slice(0, 16).map((r) => ({
    name: `${r.v} (${r.n})`, parts: Object.fromEntries(PHASES.map((p) => [p, Number(r[p]) / Math.max(1, Number(r.n))])),
  }));
  const tree = flameTree(nested || stats, by2);
  const phaseColour = (node, depth) => (node.phase ? PHASE_COLOURS[node.phase] : depth === 0 ? '#5f6b7a' : PALETTE[(depth * 3 + node.name.length) % PALETTE.length]);
  const dimensionSelect = (name, current, none) => h('select', { name }, none ? h('option', { value: '', selected: !current }, '(none)') : null,
    REQUEST_DIMENSIONS.map((d) => h('option', { value: d, selected: d === current }, d)));
  const bySelect = dimensionSelect('by', by, false);
  const by2Select = dimensionSelect('by2', by2, true);
  const sliSelect = h('select', { name: 'sli' }, LATENCY_SLIS.map((d) => h('option', { value: d, selected: d === sli }, d)));
  const filterInput = h('input', { type: 'text', name: 'filter', value: state.filter || '', placeholder: 'model=…', size: 30 });
  const legend = (list) => h('div', { class: 'legend' }, list.map((p) => { const el = h('span', {}, p); el.style.setProperty('--swatch', PHASE_COLOURS[p]); return el; }));
  ctx.el.append(
    h('h1', {}, `Breakdown by ${by}${by2 ? ` and ${by2}` : ''}`),
    h('form', { class: 'toolbar', onsubmit: (e) => { e.preventDefault(); ctx.update({ by: bySelect.value, by2: by2Select.value || null, sli: sliSelect.value, filter: filterInput.value.trim() || null }); } },
      h('label', {}, 'Dimension', bySelect), h('label', {}, 'Then by', by2Select), h('label', {}, 'Latency SLI (table)', sliSelect), h('label', {}, 'Slice', filterInput),
      h('button', { type: 'submit', class: 'secondary' }, 'Apply')),
    h('h2', {}, 'Where request time goes'),
    h('div', { class: 'panel' },
      h('p', { class: 'muted' }, `Mean time per request in each phase, by ${by} (requests in brackets); “other” is end-to-end time not in queue, prefill or decode.`),
      phaseBars('breakdown-phases', phaseRows, PHASES, `mean phase time per request by ${by}`),
      legend(PHASES)),
    h('div', { class: 'panel' },
      h('p', { class: 'muted' }, `Total request time, split by ${by}${by2 ? `, then ${by2}` : ''}, then phase: each box is as wide as its share of all request time. Hover for the numbers.`),
      flame('breakdown-flame', tree, `flame chart of request time by ${by}${by2 ? ` and ${by2}` : ''} and phase`, phaseColour)),
    h('h2', {}, 'Requests over time'),
    h('div', { class: 'panel' },
      h('p', { class: 'muted' }, `Requests per ${step.text}, stacked by ${by} (top ${TOP}).`),
      stackedBars('breakdown', steps, series, step.ms, `requests by ${by}`, win),
      h('div', { class: 'legend' }, names.map((name, i) => h('span', { class: `s${i}` }, name)))),
    h('h2', {}, `${by}: requests and ${sli}`),
    comparePicker(ctx, compared),
    compare ? h('p', { class: 'muted', 'data-compare': compare.from }, `p99 in the baseline ${fmtTime(compare.base[0], true)}–${fmtTime(compare.base[1])}Z and in the incident ${fmtTime(compare.sel[0], true)}–${fmtTime(compare.sel[1])}Z (${compare.from}), largest rise first.`) : null,
    h('div', { class: 'panel' }, h('table', { 'data-table': 'breakdown' },
      h('thead', {}, h('tr', {}, h('th', {}, by), h('th', { class: 'num' }, 'requests'), h('th', { class: 'num' }, `${sli} p50`), h('th', { class: 'num' }, `${sli} p99`),
        compare ? [h('th', { class: 'num' }, 'p99 baseline'), h('th', { class: 'num' }, 'p99 incident'), h('th', { class: 'num' }, 'change')] : null,
        h('th', { class: 'num' }, 'errors'), h('th', {}, ''))),
      h('tbody', {}, (compare ? compare.order(stats) : stats).map((r) => h('tr', { 'data-value': r.v },
        h('td', {}, r.v), h('td', { class: 'num' }, String(r.n)), h('td', { class: 'num' }, fmtMs(r.p50)), h('td', { class: 'num' }, fmtMs(r.p99)),
        compare ? compare.cells(r.v) : null,
        h('td', { class: 'num' }, String(r.errors)),
        h('td', {}, h('a', { href: ctx.linkTo('heatmap', { sli, filter: [state.filter, `${by}=${r.v}`].filter(Boolean).join(',') }) }, 'heatmap'), ' · ',
          h('a', { href: ctx.linkTo('requests', { filter: [state.filter, `${by}=${r.v}`].filter(Boolean).join(',') }) }, 'requests'))))))));
}

/** Columns of the requests table: when and which, the latencies first, then the rest. */
const REQUEST_COLUMNS = ['ts', 'request_id', 'ttft_ms', 'tpot_ms', 'e2e_ms', 'queue_ms', 'worker', 'model_version', 'lora_adapters', 'kv_cache_policy', 'finish_reason', 'status', 'input_tokens', 'output_tokens'];
/** Columns a header click sorts by. */
const SORTABLE = ['ts', 'ttft_ms', 'tpot_ms', 'e2e_ms', 'queue_ms', 'input_tokens', 'output_tokens', 'worker', 'model_version', 'finish_reason'];
/** Named orders (URLs written before the sortable headers keep working). */
const NAMED_ORDERS = { slowest_ttft: 'ttft_ms.desc', slowest_e2e: 'e2e_ms.desc', newest: 'ts.desc', oldest: 'ts.asc', most_unusual: 'unusual.desc' };
/** The pseudo-column of "how unusual for its slice": TTFT over its model's baseline p95. */
const UNUSUAL = 'unusual';
/** A status that says nothing (OTel's default): shown as blank. */
const UNSET_STATUS = ['unset', 'STATUS_CODE_UNSET', ''];
const PAGE = 100;

/** `column.asc|desc` of the URL's `order` (a named order, or a sortable column), and its SQL. */
export function orderOf(text) {
  const named = NAMED_ORDERS[text] || text || NAMED_ORDERS.slowest_ttft;
  const [column, direction] = named.split('.');
  if (!SORTABLE.includes(column) && column !== UNUSUAL) return orderOf('slowest_ttft');
  const dir = direction === 'asc' ? 'asc' : 'desc';
  return { column, dir, key: `${column}.${dir}`, sql: `${column} ${dir.toUpperCase()} NULLS LAST` };
}

export async function requestsPage(ctx) {
  const { state, win } = ctx;
  const filters = parseFilter(state.filter);
  const order = orderOf(state.order);
  const offset = Math.max(0, Math.floor(Number(state.offset) || 0));
  const withTokens = state.tokens === '1';
  let cond = where(win, filters);
  if (withTokens) cond += ` AND request_id IN (SELECT DISTINCT request_id FROM tokens WHERE ${where(win)})`;
  // most unusual for its slice: TTFT over its model's p95 in the baseline (picked, the URL's or
  // the newest stored incident's), else in the range
  const comparing = comparison(state, win).catch(() => ({ windows: null, incidents: [] }));
  const compared = order.column === UNUSUAL ? await comparing : null;
  const windows = compared && compared.windows;
  const baseWin = windows ? { since: windows.base[0], until: windows.base[1] } : win;
  const unusualSql = () => {
    let aliased = where(win, filters, 'r.');
    if (withTokens) aliased += ` AND r.request_id IN (SELECT DISTINCT request_id FROM tokens WHERE ${where(win)})`;
    return `SELECT ${REQUEST_COLUMNS.map((c) => (c === 'ts' ? 'CAST(r.ts AS BIGINT) / 1000000 AS ts' : `r.${c}`)).join(', ')}, r.trace_id,
        r.ttft_ms / m.p95 AS unusual
      FROM requests r LEFT JOIN (SELECT model, approx_percentile_cont(ttft_ms, 0.95) AS p95 FROM requests WHERE ${where(baseWin)} AND ttft_ms > 0 GROUP BY model) m
        ON r.model = m.model
      WHERE ${aliased} ORDER BY unusual DESC NULLS LAST, r.request_id LIMIT ${PAGE} OFFSET ${offset}`;
  };
  const [rows, [{ n: total } = { n: 0 }], picked] = await Promise.all([
    order.column === UNUSUAL ? sql(unusualSql()) : sql(`SELECT ${REQUEST_COLUMNS.map((c) => (c === 'ts' ? 'CAST(ts AS BIGINT) / 1000000 AS ts' : c)).join(', ')}, trace_id
      FROM requests WHERE ${cond} ORDER BY ${order.sql}, request_id LIMIT ${PAGE} OFFSET ${offset}`),
    sql(`SELECT count(*) AS n FROM requests WHERE ${cond}`),
    comparing,
  ]);
  // status only when some row has one that says something
  const columns = REQUEST_COLUMNS.filter((c) => c !== 'status' || rows.some((r) => r.status != null && !UNSET_STATUS.includes(String(r.status))));
  if (order.column === UNUSUAL) columns.splice(2, 0, UNUSUAL);
  const orderSelect = h('select', { name: 'order' }, Object.keys(NAMED_ORDERS).map((o) => h('option', { value: o, selected: NAMED_ORDERS[o] === order.key }, o.replace('_', ' '))),
    Object.values(NAMED_ORDERS).includes(order.key) ? null : h('option', { value: order.key, selected: true }, `${order.column.replace('_ms', '')} ${order.dir === 'asc' ? 'ascending' : 'descending'}`));
  const filterInput = h('input', { type: 'text', name: 'filter', value: state.filter || '', placeholder: 'worker=worker-03,attrs.gen_ai.system=vllm', size: 40 });
  const tokensBox = h('input', { type: 'checkbox', name: 'tokens', checked: withTokens });
  const detail = (r) => ctx.linkTo('request', r.request_id ? { request: r.request_id, at: String(r.ts) } : { trace: r.trace_id, at: String(r.ts) });
  const spansDays = win.until - win.since > 86400e3 || new Date(win.since).getUTCDate() !== new Date(win.until - 1).getUTCDate();
  const cell = (r, c) => {
    const v = r[c];
    if (v == null) return h('td', {}, '');
    if (c === 'ts') {
      const iso = new Date(Number(v)).toISOString();
      return h('td', { title: iso, 'data-ts': String(v) }, spansDays ? `${iso.slice(0, 10)} ${iso.slice(11, 23)}` : iso.slice(11, 23));
    }
    if (c === 'request_id') return h('td', {}, h('a', { href: detail(r), 'data-request-link': '' }, String(v)));
    if (c === 'status' && UNSET_STATUS.includes(String(v))) return h('td', {}, '');
    if (c === UNUSUAL) return h('td', { class: 'num', 'data-unusual': Number(v).toFixed(3), title: 'TTFT over its model\u2019s baseline p95' }, `×${Number(v).toFixed(1)}`);
    if (c.endsWith('_ms')) return h('td', { class: 'num' }, fmtMs(Number(v)));
    if (c.endsWith('_tokens')) return h('td', { class: 'num' }, String(v));
    return h('td', {}, String(v));
  };
  const keep = pick(state, ['order', 'filter', 'tokens', 'sel_since', 'sel_until', 'base_since', 'base_until']);
  const pageLink = (to, text) => h('a', { href: ctx.linkTo('requests', { ...keep, offset: to ? String(to) : null }), rel: to > offset ? 'next' : 'prev' }, text);
  const total_ = Number(total);
  const pager = h('nav', { class: 'pager', 'aria-label': 'Pages of requests' },
    offset > 0 ? pageLink(Math.max(0, offset - PAGE), '← previous') : null,
    h('span', { class: 'muted' }, rows.length ? `${offset + 1}–${offset + rows.length} of ${total_}` : `0 of ${total_}`),
    offset + PAGE < total_ ? pageLink(offset + PAGE, 'next →') : null);
  const title = (c) => (c === UNUSUAL ? 'vs model p95' : c === 'ts' ? `time (UTC${spansDays ? '' : `, ${new Date(win.since).toISOString().slice(0, 10)}`})` : c.replace('_ms', '').replace('_tokens', ' tok'));
  const header = (c) => {
    const numeric = c.endsWith('_ms') || c.endsWith('_tokens') || c === UNUSUAL;
    if (!SORTABLE.includes(c)) return h('th', { class: numeric ? 'num' : null }, title(c));
    const current = order.column === c;
    // a first click sorts latencies and counts largest first, names A→Z; a second reverses
    const next = current ? (order.dir === 'desc' ? 'asc' : 'desc') : (c === 'ts' || numeric ? 'desc' : 'asc');
    return h('th', { class: numeric ? 'num' : null, 'aria-sort': current ? (order.dir === 'asc' ? 'ascending' : 'descending') : null },
      h('button', { type: 'button', class: 'sort', 'data-sort': c, 'aria-pressed': current ? 'true' : 'false',
        onclick: () => ctx.update({ order: `${c}.${next}`, offset: null }) }, title(c), current ? (order.dir === 'asc' ? ' ▲' : ' ▼') : ''));
  };
  ctx.el.append(
    h('h1', {}, 'Requests'),
    h('form', { class: 'toolbar', onsubmit: (e) => { e.preventDefault(); ctx.update({ order: orderSelect.value, filter: filterInput.value.trim() || null, tokens: tokensBox.checked ? '1' : null, offset: null }); } },
      h('label', {}, 'Order', orderSelect), h('label', {}, 'Slice (column=value or attrs.key=value, …)', filterInput),
      h('label', { class: 'check' }, tokensBox, 'with token events'),
      h('button', { type: 'submit', class: 'secondary' }, 'Apply')),
    comparePicker(ctx, picked, { order: 'most_unusual' }),
    order.column === UNUSUAL ? h('p', { class: 'muted', 'data-compare': windows ? windows.from : 'none' }, windows
      ? `“vs model p95”: each request’s TTFT over its model’s p95 in the baseline ${fmtTime(windows.base[0], true)}–${fmtTime(windows.base[1])}Z (${windows.from}).`
      : '“vs model p95”: each request’s TTFT over its model’s p95 in the range (no baseline picked or stored).') : null,
    pager,
    h('div', { class: 'panel scroll' }, rows.length ? h('table', { 'data-table': 'requests' },
      h('thead', {}, h('tr', {}, columns.map(header))),
      h('tbody', {}, rows.map((r) => h('tr', {}, columns.map((c) => cell(r, c))))))
      : h('p', { class: 'empty' }, 'No requests match.')));
}

function pick(object, keys) {
  return Object.fromEntries(keys.filter((k) => object[k] != null).map((k) => [k, object[k]]));
}
