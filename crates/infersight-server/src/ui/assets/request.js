// One request: its attributes and phases, the trace waterfall (gateway → engine → …) with the
// request's queue / prefill / decode drawn inside the serving span, the token timeline when token
// events exist, the engine metrics of its worker at that moment, and its log lines: those whose
// trace or request id column names it, those that carry its request id as the value of any
// attribute (a raw engine line parsed at ingest keeps it in `attrs.request_id`), and those that
// name it in their text. Found by `trace` (trace id) or `request` (request id); `at` (ms)
// narrows the search to the hour around it, otherwise the page's range is searched.

import { sql, h, quote, chips, fmtMs, fmtPct, fmtNum, fmtTime } from './api.js';
import { waterfall, tokenTimeline, momentLine, phaseBars, PHASE_COLOURS } from './charts.js';
import { lineageHref } from './logs.js';

const HOUR = 3600e3;
/** Metrics are shown this far either side of the request's start. */
const AROUND_MS = 5 * 60e3;
/** Gauges an SRE reads at a request's moment, with their formatting. */
const GAUGES = [
  ['kv_cache_usage_ratio', 'KV-cache usage', fmtPct],
  ['requests_running', 'Requests running', (v) => fmtNum(v, 0)],
  ['requests_waiting', 'Requests waiting', (v) => fmtNum(v, 0)],
  ['gpu_utilization_ratio', 'GPU utilization', fmtPct],
  ['gpu_memory_used_bytes', 'GPU memory used', (v) => `${fmtNum(v / 2 ** 30)} GiB`],
  ['preemptions_total', 'Preemptions (counter)', (v) => fmtNum(v, 0)],
];
const REQUEST_FIELDS = ['request_id', 'trace_id', 'span_id', 'tenant', 'session_id', 'service', 'runtime', 'worker', 'device', 'model', 'model_version',
  'lora_adapters', 'kv_cache_policy', 'batch_size', 'input_tokens', 'cached_tokens', 'output_tokens', 'queue_ms', 'prefill_ms', 'ttft_ms', 'decode_ms',
  'tpot_ms', 'itl_max_ms', 'e2e_ms', 'finish_reason', 'status', 'error_type', 'temperature', 'top_p', 'max_tokens', 'spec_draft_tokens', 'spec_accepted_tokens'];
const CHIP_FIELDS = ['model', 'model_version', 'worker', 'lora_adapters', 'kv_cache_policy', 'tenant', 'batch_size', 'status', 'finish_reason'];

/** SQL bounds on `ts` around `at` (ms), or the page window. */
function bounds(ctx) {
  const at = Number(ctx.state.at);
  const [since, until] = Number.isFinite(at) && at > 0 ? [at - HOUR, at + HOUR] : [ctx.win.since, ctx.win.until];
  return { since, until, sql: (alias = '') => `${alias}ts >= to_timestamp_millis(${Math.floor(since)}) AND ${alias}ts < to_timestamp_millis(${Math.ceil(until)})` };
}

/** Spans in tree order (parents before children, siblings by start) with their depth. */
export function treeOrder(spans) {
  const ids = new Set(spans.map((sp) => sp.span_id));
  const children = new Map();
  for (const sp of spans) {
    const parent = sp.parent_span_id && ids.has(sp.parent_span_id) ? sp.parent_span_id : '';
    if (!children.has(parent)) children.set(parent, []);
    children.get(parent).push(sp);
  }
  for (const list of children.values()) list.sort((a, b) => a.start - b.start);
  const out = [];
  const seen = new Set();
  const walk = (parent, depth) => {
    for (const sp of children.get(parent) || []) {
      if (seen.has(sp.span_id)) continue;
      seen.add(sp.span_id);
      out.push({ ...sp, depth: Math.min(depth, 8) });
      walk(sp.span_id, depth + 1);
    }
  };
  walk('', 0);
  return out;
}

function attrsTable(text) {
  let attrs = {};
  try { attrs = JSON.parse(text || '{}') || {}; } catch { attrs = { attrs: text }; }
  const keys = Object.keys(attrs).sort();
  if (!keys.length) return h('p', { class: 'empty' }, 'No other attributes.');
  return h('table', { 'data-table': 'attrs' }, h('tbody', {}, keys.map((k) => h('tr', {},
    h('th', {}, k), h('td', {}, typeof attrs[k] === 'object' ? JSON.stringify(attrs[k]) : String(attrs[k]))))));
}

/** Characters an id may hold: a mention of `id` in a text must not continue with one. */
const ID_CHAR = /[A-Za-z0-9_.:-]/;

/** Whether `text` names `id` as a whole token (not as part of a longer id). */
export function mentions(text, id) {
  if (!text || !id) return false;
  for (let at = text.indexOf(id); at >= 0; at = text.indexOf(id, at + 1)) {
    const before = at > 0 ? text[at - 1] : '';
    const after = text[at + id.length] || '';
    if (!ID_CHAR.test(before) && !ID_CHAR.test(after)) return true;
  }
  return false;
}

/**
 * The SQL condition of the request's log lines (alias-free): its trace or request id column,
 * its request id as the exact value of any attribute (`"…":"<id>"`), or in the line's text
 * (checked for a whole-token mention with `mentions` afterwards).
 */
export function logCondition(traceId, requestId) {
  const parts = [];
  if (traceId) parts.push(`trace_id = ${quote(traceId)}`);
  if (requestId) {
    parts.push(`request_id = ${quote(requestId)}`);
    parts.push(`strpos(attrs, ${quote(JSON.stringify(String(requestId)))}) > 0`);
    parts.push(`strpos(body, ${quote(requestId)}) > 0`);
  }
  return parts.length ? parts.join(' OR ') : 'false';
}

/** Whether a log row found by `logCondition` really belongs to the request. */
export function belongsToRequest(row, traceId, requestId) {
  if (traceId && row.trace_id === traceId) return true;
  if (!requestId) return false;
  if (row.request_id === requestId) return true;
  let attrs = {};
  try { attrs = JSON.parse(row.attrs || '{}') || {}; } catch { attrs = {}; }
  if (Object.values(attrs).some((v) => v === requestId)) return true;
  return mentions(row.body, requestId);
}

function fieldValue(key, value) {
  if (value == null) return '–';
  if (key.endsWith('_ms')) return fmtMs(Number(value));
  return String(value);
}

export async function requestPage(ctx) {
  const { state } = ctx;
  const key = state.request ? 'request_id' : state.trace ? 'trace_id' : null;
  if (!key) throw new Error('no request in the URL (request=<request id> or trace=<trace id>)');
  const id = state.request || state.trace;
  const range = bounds(ctx);
  const [request] = await sql(`SELECT CAST(ts AS BIGINT) / 1000000 AS ts_ms, ${REQUEST_FIELDS.join(', ')}, attrs
    FROM requests WHERE ${key} = ${quote(id)} AND ${range.sql()} ORDER BY ts LIMIT 1`);
  const title = `Request ${id}`;
  if (!request) {
    ctx.el.append(h('h1', {}, title), h('p', { class: 'empty', 'data-missing': '' },
      `No request with ${key} = ${id} between ${fmtTime(range.since, true)} and ${fmtTime(range.until, true)}; widen the time range.`));
    return;
  }
  const start = Number(request.ts_ms);
  const near = `ts >= to_timestamp_millis(${Math.floor(start - AROUND_MS)}) AND ts < to_timestamp_millis(${Math.ceil(start + AROUND_MS + (Number(request.e2e_ms) || 0))})`;
  const traceCond = request.trace_id ? `trace_id = ${quote(request.trace_id)}` : 'false';
  const logCond = logCondition(request.trace_id, request.request_id);
  const [spans, tokens, metrics, logRows] = await Promise.all([
    sql(`SELECT span_id, parent_span_id, name, service, kind, status, status_message, CAST(ts AS BIGINT) / 1000000.0 AS start_ms, duration_ms
      FROM spans WHERE ${traceCond} AND ${near} ORDER BY ts LIMIT 500`),
    request.request_id
      ? sql(`SELECT step, CAST(ts AS BIGINT) / 1000000.0 AS t, latency_ms, stage, kv_hit FROM tokens
          WHERE request_id = ${quote(request.request_id)} AND ${near} ORDER BY step, ts LIMIT 5000`)
      : Promise.resolve([]),
    request.worker
      ? sql(`SELECT name, CAST(ts AS BIGINT) / 1000000 AS t, avg(value) AS v FROM metrics
          WHERE worker = ${quote(request.worker)} AND name IN (${GAUGES.map(([n]) => quote(n)).join(', ')}) AND ${near}
          GROUP BY name, ts ORDER BY name, t`)
      : Promise.resolve([]),
    sql(`SELECT CAST(ts AS BIGINT) / 1000000 AS ts, CAST(CAST(ts AS BIGINT) AS VARCHAR) AS ns, severity, service, worker, template_id, body,
        trace_id, request_id, attrs FROM logs
      WHERE ${near} AND (${logCond}) ORDER BY ts LIMIT 400`),
  ]);
  const logs = logRows.filter((l) => belongsToRequest(l, request.trace_id, request.request_id)).slice(0, 200);

  // -- phases: queue, prefill, decode and the rest of e2e
  const phase = (k) => Math.max(0, Number(request[`${k}_ms`]) || 0);
  const ms = (k) => (request[k] == null ? null : Number(request[k]));
  const e2e = Number(request.e2e_ms) || 0;
  const parts = { queue: phase('queue'), prefill: phase('prefill'), decode: phase('decode') };
  parts.other = Math.max(0, e2e - parts.queue - parts.prefill - parts.decode);
  const phaseNames = ['queue', 'prefill', 'decode', 'other'];

  // -- waterfall: the serving span (the request's own span) carries the phases
  const ordered = treeOrder(spans.map((sp) => ({
    ...sp, start: Number(sp.start_ms), end: Number(sp.start_ms) + (Number(sp.duration_ms) || 0),
  })));
  for (const sp of ordered) {
    if (sp.span_id === request.span_id) {
      let t = sp.start;
      sp.phases = ['queue', 'prefill', 'decode'].map((name) => { const p = { name, start: t, end: t + parts[name] }; t += parts[name]; return p; });
    }
  }

  // -- tokens: time since the request's start; latency as given, else the gap to the previous
  const tokenPoints = [];
  let previous = null;
  for (const t of tokens) {
    const at = Number(t.t) - start;
    const latency = t.latency_ms != null ? Number(t.latency_ms) : previous == null ? at : at - previous;
    tokenPoints.push({ step: Number(t.step), at, latency, stage: t.stage, kv_hit: t.kv_hit });
    previous = at;
  }
  const gaps = tokenPoints.slice(1).map((t) => t.latency);
  const tokenSummary = tokenPoints.length
    ? `${tokenPoints.length} token events; first at +${fmtMs(tokenPoints[0].at)}, mean gap ${fmtMs(gaps.reduce((a, b) => a + b, 0) / (gaps.length || 1))}, largest gap ${fmtMs(Math.max(0, ...gaps))}.`
    : null;

  // -- metrics of the worker: the value at the request's start (last point before it) and a line
  const byName = new Map();
  for (const m of metrics) {
    if (!byName.has(m.name)) byName.set(m.name, []);
    byName.get(m.name).push([Number(m.t), Number(m.v)]);
  }
  const gaugeCards = GAUGES.filter(([name]) => byName.has(name)).map(([name, title, format]) => {
    const points = byName.get(name);
    const before = points.filter(([t]) => t <= start);
    const atStart = (before.length ? before[before.length - 1] : points[0])[1];
    const range = points.map(([, v]) => v);
    return h('div', { class: 'panel metric-card', 'data-metric': name },
      h('h3', {}, title),
      h('div', { class: 'value', 'data-value': name }, format(atStart)),
      h('div', { class: 'sub' }, `±5 min: ${format(Math.min(...range))} – ${format(Math.max(...range))}`),
      momentLine(`metric-${name}`, points, start, `${title} of ${request.worker} around the request`, format));
  });

  ctx.el.append(
    h('h1', {}, title),
    h('p', { class: 'muted' }, `${fmtTime(start, true)} · `, h('a', { href: ctx.linkTo('requests', { filter: request.worker ? `worker=${request.worker}` : null }) }, 'requests of this worker')),
    h('div', { class: 'panel', 'data-request': request.request_id || request.trace_id },
      h('div', {}, chips(Object.fromEntries(CHIP_FIELDS.filter((k) => request[k] != null).map((k) => [k, request[k]])))),
      h('p', { 'data-phases': '' }, `end to end ${fmtMs(e2e)} = queue ${fmtMs(parts.queue)} + prefill ${fmtMs(parts.prefill)} + decode ${fmtMs(parts.decode)}`
        + `${parts.other > 0.5 ? ` + other ${fmtMs(parts.other)}` : ''}; TTFT ${fmtMs(ms('ttft_ms'))}, TPOT ${fmtMs(ms('tpot_ms'))}, largest gap ${fmtMs(ms('itl_max_ms'))}; `
        + `${request.input_tokens ?? '–'} input tokens (${request.cached_tokens ?? '–'} cached), ${request.output_tokens ?? '–'} output.`),
      phaseBars('request-phases', [{ name: 'this request', parts }], phaseNames, 'The request\u2019s time by phase'),
      h('div', { class: 'legend' }, phaseNames.map((p) => { const el = h('span', {}, p); el.style.setProperty('--swatch', PHASE_COLOURS[p]); return el; }))),
    h('h2', {}, `Trace ${request.trace_id || ''}`),
    h('div', { class: 'panel' }, ordered.length
      ? [h('p', { class: 'muted' }, `${ordered.length} spans; the serving span shows the request\u2019s queue, prefill and decode inside it.`),
        waterfall('trace-waterfall', ordered, `Spans of trace ${request.trace_id}`)]
      : h('p', { class: 'empty' }, 'No spans of this trace are stored.')),
    h('h2', {}, 'Token timeline'),
    h('div', { class: 'panel', 'data-tokens': String(tokenPoints.length) }, tokenPoints.length
      ? [h('p', { class: 'muted' }, tokenSummary, ' Each dot is a token: its time since the request started (x) and its latency (y, square-root scale); faint dots missed the KV cache.'),
        tokenTimeline('token-timeline', tokenPoints, 'Token latencies of the request', request.ttft_ms != null ? [{ name: 'TTFT', at: Number(request.ttft_ms) }] : [])]
      : h('p', { class: 'empty' }, 'No token events for this request (engines emit them for a sample of requests, if at all).')),
    h('h2', {}, `Engine metrics of ${request.worker || 'its worker'} at that moment`),
    gaugeCards.length ? h('div', { class: 'metric-cards' }, gaugeCards) : h('div', { class: 'panel' }, h('p', { class: 'empty' }, 'No engine metrics of this worker around the request.')),
    h('h2', {}, `Log lines (${logs.length})`),
    h('div', { class: 'panel', 'data-request-logs': String(logs.length) }, logs.length ? h('table', { 'data-table': 'request-logs' },
      h('thead', {}, h('tr', {}, h('th', {}, 'time'), h('th', {}, 'severity'), h('th', {}, 'service'), h('th', {}, 'worker'), h('th', {}, 'line'), h('th', {}, ''))),
      h('tbody', {}, logs.map((l) => h('tr', {}, h('td', {}, fmtTime(Number(l.ts), true)), h('td', {}, l.severity || ''), h('td', {}, l.service || ''), h('td', {}, l.worker || ''),
        h('td', {}, h('pre', { class: 'log' }, l.body || '')), h('td', {}, h('a', { href: lineageHref(ctx, l), 'data-lineage-link': '' }, 'lineage'))))))
      : h('p', { class: 'empty' }, 'No log lines carry this trace or request id (as a column, an attribute or in their text).')),
    h('h2', {}, 'Attributes'),
    h('div', { class: 'panel cols' },
      h('table', { 'data-table': 'request-fields' }, h('tbody', {}, REQUEST_FIELDS.filter((k) => request[k] != null).map((k) => h('tr', {}, h('th', {}, k), h('td', {}, fieldValue(k, request[k])))))),
      attrsTable(request.attrs)));
}
