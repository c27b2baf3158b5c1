// Fleet overview: SLI tiles with sparklines (from the rollups), SLO status, firing alerts and
// open incidents. Sparklines span the whole window and break where steps have no requests, so
// data that stopped looks stopped; a tile whose latest value is old says when it is from.

import { getJSON, h, chips, fmtMs, fmtPct, fmtNum, fmtTime, seconds, stepOf } from './api.js';
import { sparkline } from './charts.js';

const LATENCY_TILES = [['ttft', 'TTFT'], ['tpot', 'TPOT'], ['e2e', 'End-to-end']];
const RATE_TILES = [
  ['error_rate', 'Error rate', fmtPct],
  ['abort_rate', 'Abort rate (length)', fmtPct],
  ['request_rate', 'Throughput', (v) => `${fmtNum(v)} req/s`],
  ['output_tokens_per_s', 'Output tokens', (v) => `${fmtNum(v)} tok/s`],
];

function sliPath(win, sli, q) {
  const params = new URLSearchParams({ sli, since: seconds(win.since), until: seconds(win.until), step: stepOf(win).text });
  if (q) params.set('q', q);
  return `/api/v1/sli?${params}`;
}

/** The fleet series' points as [[ts ms, values]] (the single group of an unsliced query). */
function points(answer) {
  const series = (answer.series || [])[0];
  const pts = (series ? series.points : []).filter((p) => p.requests > 0).map((p) => [Date.parse(p.ts), p.values, p.requests]);
  // the newest step is usually still filling: leave it out when it is much thinner
  if (pts.length > 2 && pts[pts.length - 1][2] < pts[pts.length - 2][2] / 2) pts.pop();
  return pts;
}

function last(pts) {
  return pts.length ? pts[pts.length - 1] : null;
}

/** ` · at HH:MM` when the latest point is more than two steps before the window's end. */
function latestAt(latest, win) {
  const step = stepOf(win).ms;
  return latest && win.until - latest[0] > 3 * step ? ` · at ${fmtTime(latest[0])}` : '';
}

function latencyTile(key, title, answer, ctx) {
  const pts = points(answer);
  const latest = last(pts);
  const line = (q) => ({ name: q, points: pts.map(([t, v]) => [t, v[q]]) });
  const peak = Math.max(...pts.map(([, v]) => v.p99 ?? -Infinity));
  return h('a', { class: 'tile panel', href: ctx.linkTo('heatmap', { sli: key }), 'data-tile': key, 'aria-label': `${title}: open the heatmap` },
    h('h3', {}, `${title} p99`),
    h('div', { class: 'value', 'data-value': key }, latest ? fmtMs(latest[1].p99) : '–'),
    h('div', { class: 'sub' }, latest ? `p50 ${fmtMs(latest[1].p50)} · p95 ${fmtMs(latest[1].p95)} · peak p99 ${fmtMs(peak)}${latestAt(latest, ctx.win)}` : 'no requests in the range'),
    sparkline(`spark-${key}`, [line('p99'), line('p95'), line('p50')], `${title} p50, p95, p99 over the range`, ctx.win, stepOf(ctx.win).ms));
}

function rateTile(key, title, format, answer, win) {
  const pts = points(answer);
  const latest = last(pts);
  const values = pts.map(([t, v]) => [t, v[key]]);
  const mean = values.length ? values.reduce((a, [, v]) => a + (v || 0), 0) / values.length : null;
  return h('div', { class: 'tile panel', 'data-tile': key },
    h('h3', {}, title),
    h('div', { class: 'value', 'data-value': key }, latest ? format(latest[1][key]) : '–'),
    h('div', { class: 'sub' }, mean == null ? 'no requests in the range' : `range mean ${format(mean)}${latestAt(latest, win)}`),
    sparkline(`spark-${key}`, [{ name: key, points: values }], `${title} over the range`, win, stepOf(win).ms));
}

const windowText = (seconds) => (seconds % 86400 === 0 ? `${seconds / 86400}d` : seconds % 3600 === 0 ? `${seconds / 3600}h` : `${Math.round(seconds / 60)}m`);

/** One rule's burn rates: long / short window against its threshold, marked when firing. */
function burnCell(rule) {
  const rate = (v) => (v == null || !Number.isFinite(v) ? '–' : `${v.toFixed(v >= 10 ? 0 : 1)}×`);
  return h('td', { class: rule.firing ? 'num error' : 'num', 'data-burn': rule.severity, title: `fires when both windows burn faster than ${rule.burn_rate_threshold}× the budget` },
    `${rate(rule.long_burn_rate)} / ${rate(rule.short_burn_rate)}`, h('div', { class: 'muted' }, `${windowText(rule.long_window_s)} / ${windowText(rule.short_window_s)} > ${rule.burn_rate_threshold}×`));
}

function sloPanel(slo) {
  const slos = slo.slos || [];
  if (!slos.length) return h('p', { class: 'empty' }, 'No SLOs configured ([alerts] slos).');
  const severities = [...new Set(slos.flatMap((s) => (s.rules || []).map((r) => r.severity)))];
  return h('table', { 'data-table': 'slos' },
    h('thead', {}, h('tr', {}, h('th', {}, 'SLO'), h('th', { class: 'num' }, 'objective'), h('th', { class: 'num' }, 'compliance'), h('th', { class: 'num' }, 'budget left'),
      severities.map((sev) => h('th', { class: 'num' }, `burn rate (${sev})`)), h('th', {}, 'firing'))),
    h('tbody', {}, slos.map((s) => h('tr', {},
      h('td', {}, s.name), h('td', { class: 'num' }, fmtPct(s.objective)), h('td', { class: 'num' }, fmtPct(s.compliance)),
      h('td', { class: s.budget_remaining != null && s.budget_remaining < 0 ? 'num error' : 'num' }, fmtPct(s.budget_remaining)),
      severities.map((sev) => { const rule = (s.rules || []).find((r) => r.severity === sev); return rule ? burnCell(rule) : h('td', {}, ''); }),
      h('td', {}, (s.rules || []).filter((r) => r.firing).map((r) => r.severity).join(', ') || 'no')))));
}

/** A person's judgement of a verdict as the UI words it (`open`: nobody has judged it yet). */
export function judgement(status) {
  return status === 'open' ? 'pending' : status;
}

/**
 * The incident list: when it was detected (or created, for a verdict a person asked for), the
 * watcher's state and severity, the person's status, the top cause and the verdict. Rows carry
 * `data-incident-row` and their state, so a live list can be checked.
 */
export function incidentTable(incidents, ctx) {
  if (!incidents.length) return h('p', { class: 'empty' }, 'No incidents.');
  return h('table', { 'data-table': 'incidents' },
    h('thead', {}, h('tr', {}, ['detected', 'state', 'severity', 'judgement', 'top cause', 'verdict'].map((k) => h('th', {}, k)))),
    h('tbody', {}, incidents.map((i) => h('tr', { 'data-incident-row': i.id, 'data-state': i.state || 'manual' },
      h('td', {}, h('a', { href: ctx.linkTo('incident', { id: i.id }) }, fmtTime(Date.parse(i.detected_at || i.created_at), true))),
      h('td', { class: i.state ? `state-${i.state}` : 'muted' }, i.state || (i.origin === 'watch' ? '' : 'asked')),
      h('td', { class: i.severity ? `severity-${i.severity}` : 'muted' }, i.severity || '–'),
      h('td', { class: `status-${i.status}` }, judgement(i.status)),
      h('td', {}, i.top_cause ? h('span', { class: 'chip' }, i.top_cause) : (i.root_causes || []).slice(0, 1).map((rc) => chips(rc))),
      h('td', {}, i.verdict || '')))));
}

export async function overview(ctx) {
  const { win } = ctx;
  const [latency, rates, slo, alerts, incidents] = await Promise.all([
    Promise.all(LATENCY_TILES.map(([key]) => getJSON(sliPath(win, key, '0.5,0.95,0.99')))),
    Promise.all(RATE_TILES.map(([key]) => getJSON(sliPath(win, key)))),
    getJSON('/api/v1/slo'),
    getJSON('/api/v1/alerts'),
    getJSON('/api/v1/incidents'),
  ]);
  // open: the watcher's episode still runs, or a verdict someone asked for is not judged yet
  const open = (incidents.incidents || []).filter((i) => (i.state ? i.state === 'open' : i.status === 'open'));
  const firing = alerts.alerts || [];
  ctx.el.append(
    h('h1', {}, 'Fleet overview'),
    h('p', { class: 'muted' }, `${fmtTime(win.since, true)} – ${fmtTime(win.until, true)}; latest complete step shown, sparklines over the range. Click a latency tile for its heatmap.`),
    h('section', { class: 'tiles', 'aria-label': 'Service level indicators' },
      LATENCY_TILES.map(([key, title], i) => latencyTile(key, title, latency[i], ctx)),
      RATE_TILES.map(([key, title, format], i) => rateTile(key, title, format, rates[i], win))),
    h('div', { class: 'cols' },
      h('section', {}, h('h2', {}, 'SLOs'), h('div', { class: 'panel' }, sloPanel(slo),
        firing.length ? h('p', { class: 'error' }, `Firing: ${firing.map((a) => `${a.slo} (${a.severity})`).join(', ')}`) : h('p', { class: 'muted' }, 'No alert firing.'))),
      h('section', {}, h('h2', {}, `Open incidents (${open.length})`), h('div', { class: 'panel' }, incidentTable(open, ctx)))));
}
