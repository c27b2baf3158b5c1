// Logs: a substring search over the line text with label filters, the templates in the range with
// their rates (sortable by count or by growth against a baseline; templates of prompt/response
// lines, one per distinct prompt, collapsed into one row), the latest lines (paged), and the lineage of one
// selected record: its template, the request it belongs to, the other records of its trace, the
// records it declares as upstream (and those naming it), and its worker's records within ±5 s.
// Every bit of state is in the URL; every query is bounded in time and LIMITed.

import { sql, h, quote, where, stepOf, fmtMs } from './api.js';
import { s, sparkline, PALETTE } from './charts.js';

const PAGE_SIZE = 100;
/** Templates shown at first, and with `more=1`. */
const TEMPLATE_ROWS = 15;
const TEMPLATE_ROWS_MORE = 50;
/** Options of the template select and of each label select at most. */
const TEMPLATE_OPTIONS = 200;
const LABEL_OPTIONS = 200;
/** Label filters: `key` is both the URL key and the column of `logs`. */
const LABELS = [
  { key: 'severity', title: 'Severity' },
  { key: 'service', title: 'Service' },
  { key: 'worker', title: 'Worker' },
  { key: 'log_class', title: 'Class' },
  { key: 'label', title: 'Label' },
];
/** Keys of this page's state (besides the shell's range keys). */
const PAGE_KEYS = ['q', ...LABELS.map((l) => l.key), 'template', 'sort', 'more', 'offset', 'rec', 'rec_worker', 'rec_template', 'rec_body'];
/** Records of the same worker this close (ns) are the lineage's neighbours. */
const NEAR_NS = 5_000_000_000n;
/** The trace's records and the request are looked for this far around the record. */
const TRACE_PAD_MS = 10 * 60e3;
/** Lines that mention the request id in their text are looked for this far around the record. */
const MENTION_PAD_MS = 2 * 60e3;
/** Attribute keys that name a record, that list its upstream records, that carry a request id. */
const LOG_ID_KEYS = ['log.record.uid', 'log_id'];
const UPSTREAM_KEY = 'upstream_log_ids';
const REQUEST_ID_KEYS = ['request_id', 'request.id', 'gen_ai.request.id'];
/** The columns of a record as the page shows it; `ns` is the timestamp in ns as text. */
const RECORD_COLUMNS = `CAST(CAST(l.ts AS BIGINT) AS VARCHAR) AS ns, l.severity, l.service, l.worker, l.trace_id,
  l.request_id, l.template_id, l.log_class, l.label, l.body`;
/** Text of the templates by id (several rows per template: any one text will do). */
const TEMPLATE_TEXTS = '(SELECT template_id, max(template) AS template FROM templates GROUP BY template_id)';
/** The lineage panel last focused, so a re-render (refresh) does not move the focus again. */
let focusedRecord = null;

// -- small helpers -----------------------------------------------------------------------------

/** A link to this page with the current page state changed by `patch` (null removes a key). */
function here(ctx, patch) {
  const keep = Object.fromEntries(PAGE_KEYS.filter((k) => ctx.state[k] != null).map((k) => [k, ctx.state[k]]));
  return ctx.linkTo('logs', { ...keep, ...patch });
}

/** SQL conditions (on alias `l.`) of the search and the label filters; the template's if asked. */
function filterConditions(state, withTemplate) {
  const parts = [];
  if (state.q) parts.push(`strpos(lower(l.body), lower(${quote(state.q)})) > 0`);
  for (const { key } of LABELS) if (state[key]) parts.push(`l.${key} = ${quote(state[key])}`);
  if (withTemplate && state.template) parts.push(`l.template_id = ${quote(state.template)}`);
  return parts;
}

/** A SQL bound on `l.ts` between two instants in ms. */
const between = (since, until) => where({ since, until }, [], 'l.');
/** `l.column = value`, or IS NULL when the value is missing. */
const equals = (column, value) => (value ? `l.${column} = ${quote(value)}` : `l.${column} IS NULL`);

/** FNV-1a of a line's text, 8 hex digits: tells apart records with the same ts, worker, template. */
export function bodyHash(text) {
  let x = 0x811c9dc5;
  for (let i = 0; i < text.length; i += 1) {
    x ^= text.charCodeAt(i);
    x = Math.imul(x, 0x01000193) >>> 0;
  }
  return x.toString(16).padStart(8, '0');
}

/** ns text → ms (float, keeps µs). */
const msOf = (ns) => Number(BigInt(ns) / 1000n) / 1000;
const count = (n) => Number(n || 0).toLocaleString('en-US');

/** `HH:MM:SS.mmm` (with the date when the range spans more than a day). */
function clock(ms, withDate) {
  const iso = new Date(ms).toISOString();
  return withDate ? `${iso.slice(5, 10)} ${iso.slice(11, 23)}` : iso.slice(11, 23);
}

/** `+1.25 s` / `−320 ms` relative to the selected record. */
function offsetText(ms) {
  if (Math.abs(ms) < 0.5) return '0';
  const sign = ms < 0 ? '−' : '+';
  return `${sign}${fmtMs(Math.abs(ms))}`;
}

function parseAttrs(text) {
  try {
    const value = JSON.parse(text || '{}');
    return value && typeof value === 'object' && !Array.isArray(value) ? value : {};
  } catch {
    return {};
  }
}

/** Ids in `upstream_log_ids`: a JSON array, or a comma-separated string (as the RCA reads it). */
export function upstreamIds(value) {
  if (Array.isArray(value)) return value.filter((v) => typeof v === 'string' || typeof v === 'number').map(String);
  if (typeof value === 'string') return value.split(',').map((v) => v.trim()).filter(Boolean);
  return [];
}

/** The id a record gives itself in its attributes, if any. */
function recordUid(attrs) {
  for (const key of LOG_ID_KEYS) if (attrs[key] != null && attrs[key] !== '') return String(attrs[key]);
  return null;
}

/** The request id of a record: its column, an attribute, or `request_id=…` in its text. */
export function requestIdOf(record, attrs) {
  if (record.request_id) return { id: record.request_id, from: 'the request_id column' };
  for (const key of REQUEST_ID_KEYS) if (attrs[key]) return { id: String(attrs[key]), from: `the attribute ${key}` };
  const match = /\brequest[_.]?id[=:]\s*"?([A-Za-z0-9_.:-]{4,})/.exec(record.body || '');
  return match ? { id: match[1], from: 'the line text' } : null;
}

/** The body with every case-insensitive occurrence of `q` marked. */
function highlighted(body, q) {
  if (!q || !body) return body || '';
  const lower = body.toLowerCase();
  const needle = q.toLowerCase();
  if (lower.length !== body.length || !needle) return body;
  const parts = [];
  let at = 0;
  for (let i = lower.indexOf(needle); i >= 0; i = lower.indexOf(needle, at)) {
    parts.push(body.slice(at, i), h('mark', {}, body.slice(i, i + needle.length)));
    at = i + needle.length;
  }
  parts.push(body.slice(at));
  return parts;
}

/** Points [t, lines] for every step of the window, zero where there are none. */
function filledSeries(win, step, pairs) {
  const byStep = new Map(pairs.map(([t, c]) => [Number(t), Number(c)]));
  const first = Math.floor(win.since / step.ms) * step.ms;
  const points = [];
  for (let t = first; t < win.until; t += step.ms) points.push([t, byStep.get(t) || 0]);
  if (points.length === 1) points.push([first + step.ms, 0]);
  return points;
}

/**
 * The two windows template growth compares, in ms: the URL's baseline (`base_since`,
 * `base_until`) against its selection (`sel_since`, `sel_until`) or the rest of the range after
 * the baseline; else the last quarter of the data against the rest, where the data spans its
 * first to its last line in the range (`[firstMs, lastMs]`), not the range: a range that runs
 * past the data (or starts before it) must not read as a fall (or a rise). Bounds are on steps.
 * Null when the range has no lines.
 */
export function growthWindows(win, stepMs, [firstMs, lastMs], state = {}) {
  if (!Number.isFinite(lastMs)) return null;
  const snap = (t) => Math.round(t / stepMs) * stepMs;
  const given = (a, b) => (Number(b) > Number(a) ? [Number(a), Number(b)] : null);
  const base = given(state.base_since, state.base_until);
  if (base) {
    const recent = given(state.sel_since, state.sel_until) || [base[1], win.until];
    const [b0, b1] = [Math.max(win.since, snap(base[0])), Math.min(win.until, snap(base[1]))];
    const [r0, r1] = [Math.max(win.since, snap(recent[0])), Math.min(win.until, snap(recent[1]))];
    if (b1 > b0 && r1 > r0) return { base: [b0, b1], recent: [r0, r1], from: 'baseline' };
  }
  const end = Math.min(win.until, (Math.floor(lastMs / stepMs) + 1) * stepMs);
  const start = Math.floor(Math.max(win.since, Number.isFinite(firstMs) ? firstMs : win.since) / stepMs) * stepMs;
  if (end - start < 2 * stepMs) return null;
  const cut = Math.min(end - stepMs, Math.max(start + stepMs, snap(start + 0.75 * (end - start))));
  return { base: [start, cut], recent: [cut, end], from: 'data' };
}

/**
 * Growth of a template: its rate in the recent window over its rate in the baseline. `isNew`
 * when it has no baseline lines but recent ones; `rank` is smoothed (+1 baseline line) for
 * sorting, so new templates come first by their recent count.
 */
export function growthOf(recent, base, windows) {
  if (!windows) return { growth: null, isNew: false, rank: 0 };
  const recentMs = windows.recent[1] - windows.recent[0];
  const baseMs = windows.base[1] - windows.base[0];
  const rate = (n, ms) => n / Math.max(1, ms);
  return {
    growth: base > 0 ? rate(recent, recentMs) / rate(base, baseMs) : null,
    isNew: base === 0 && recent > 0,
    rank: rate(recent, recentMs) / rate(base + 1, baseMs),
  };
}

/**
 * A template that carries free text (a prompt, a response, messages) gets one template per
 * distinct text: such templates are collapsed on their text up to the content marker, when at
 * least FAMILY_MIN share it. (Rust regex syntax, for DataFusion's regexp_replace.)
 */
const CONTENT_MARKER = String.raw`^(.*?\b(?:prompt|prompts|response|completion|messages)\b\S*)\s.*$`;
const FAMILY_MIN = 3;
/** The id prefix of a collapsed family's row. */
const FAMILY = 'family:';

// -- the page ----------------------------------------------------------------------------------

export async function logsPage(ctx) {
  const { state, win } = ctx;
  const step = stepOf(win);
  const stepNs = step.ms * 1e6;
  const offset = Math.max(0, Math.floor(Number(state.offset) || 0));
  const sort = state.sort === 'growth' ? 'growth' : 'count';
  const range = where(win, [], 'l.');
  const matching = [range, ...filterConditions(state, true)].join(' AND ');
  const anyTemplate = [range, ...filterConditions(state, false)].join(' AND ');
  const span = win.until - win.since;
  const templateRows = state.more === '1' ? TEMPLATE_ROWS_MORE : TEMPLATE_ROWS;
  // growth compares two windows; without a baseline in the URL they end at the last line (only
  // the templates' query waits for it: the other queries start at once)
  const windowsOf = sql(`SELECT CAST(min(l.ts) AS BIGINT) / 1000000 AS first, CAST(max(l.ts) AS BIGINT) / 1000000 AS last
    FROM logs l WHERE ${anyTemplate}`).then(([{ first, last } = {}]) => growthWindows(win, step.ms, [first == null ? NaN : Number(first), last == null ? NaN : Number(last)], state));
  const inWindow = (w) => (w ? `t >= ${w[0]} AND t < ${w[1]}` : 'false');

  const labelFacets = LABELS.map(({ key }) => `SELECT * FROM (SELECT ${quote(key)} AS k, l.${key} AS v, count(*) AS n FROM logs l
    WHERE ${range} AND l.${key} IS NOT NULL GROUP BY l.${key} ORDER BY n DESC LIMIT ${LABEL_OPTIONS})`).join(' UNION ALL ')
    // and every line of the range, with or without a label
    + ` UNION ALL SELECT '' AS k, NULL AS v, count(*) AS n FROM logs l WHERE ${range}`;
  const [facets, templateOptions, [total], templates, lines, lineage, windows] = await Promise.all([
    sql(labelFacets),
    sql(`SELECT c.id, c.n, t.template FROM (SELECT l.template_id AS id, count(*) AS n FROM logs l WHERE ${range} AND l.template_id IS NOT NULL
      GROUP BY l.template_id ORDER BY n DESC LIMIT ${TEMPLATE_OPTIONS}) c LEFT JOIN ${TEMPLATE_TEXTS} t ON c.id = t.template_id ORDER BY c.n DESC`),
    sql(`SELECT count(*) AS n FROM logs l WHERE ${matching}`),
    windowsOf.then((windows) => {
      const [recentMs, baseMs] = windows ? [windows.recent[1] - windows.recent[0], windows.base[1] - windows.base[0]] : [1, 1];
      const growthSql = `(recent * ${baseMs}.0) / ((base + 1) * ${recentMs}.0)`;
      return sql(`WITH g AS (SELECT l.template_id AS id, CAST(l.ts AS BIGINT) / ${stepNs} * ${step.ms} AS t, count(*) AS c FROM logs l WHERE ${anyTemplate} GROUP BY 1, 2),
      tt AS (SELECT i.id, max(x.template) AS template FROM (SELECT DISTINCT id FROM g) i LEFT JOIN templates x ON i.id = x.template_id GROUP BY i.id),
      fk AS (SELECT id, template, regexp_replace(template, ${quote(CONTENT_MARKER)}, '\${1}', 'is') AS fam FROM tt),
      fams AS (SELECT fam, count(*) AS members FROM fk WHERE fam <> template GROUP BY fam HAVING count(*) >= ${FAMILY_MIN}),
      k AS (SELECT fk.id, CASE WHEN fams.fam IS NULL THEN fk.id ELSE concat(${quote(FAMILY)}, fams.fam) END AS key,
        CASE WHEN fams.fam IS NULL THEN fk.template ELSE fams.fam END AS template, COALESCE(fams.members, 1) AS members FROM fk LEFT JOIN fams ON fk.fam = fams.fam),
      gk AS (SELECT k.key, k.template, k.members, g.t, sum(g.c) AS c FROM g LEFT JOIN k ON g.id = k.id GROUP BY 1, 2, 3, 4)
      SELECT key AS id, max(template) AS template, max(members) AS members, sum(c) AS n,
        sum(CASE WHEN ${inWindow(windows && windows.recent)} THEN c ELSE 0 END) AS recent,
        sum(CASE WHEN ${inWindow(windows && windows.base)} THEN c ELSE 0 END) AS base,
        array_agg(t ORDER BY t) AS ts, array_agg(c ORDER BY t) AS cs
      FROM gk GROUP BY key ORDER BY ${sort === 'growth' ? `${growthSql} DESC, n DESC` : 'n DESC'} LIMIT ${TEMPLATE_ROWS_MORE}`);
    }),
    sql(`SELECT ${RECORD_COLUMNS} FROM logs l WHERE ${matching}
      ORDER BY l.ts DESC, l.worker, l.template_id, l.body LIMIT ${PAGE_SIZE + 1} OFFSET ${offset}`),
    lineagePanel(ctx, step).catch((error) => h('section', { class: 'panel lineage', 'data-lineage': 'error' },
      h('h2', {}, 'Lineage'), h('p', { class: 'error', role: 'alert' }, String(error.message || error)))),
    windowsOf,
  ]);

  const matchingCount = Number(total ? total.n : 0);
  const inRange = facets.filter((f) => f.k === '').reduce((sum, f) => sum + Number(f.n), 0);
  const withDate = span > 86400e3;
  const byFacet = new Map(LABELS.map(({ key }) => [key, facets.filter((f) => f.k === key)]));

  ctx.el.append(
    h('h1', {}, 'Logs'),
    searchForm(ctx, byFacet, templateOptions),
    summary(ctx, matchingCount, inRange, templateOptions),
    lineage || '',
    templatesSection(ctx, templates, { step, sort, windows, templateRows, matchingCount }),
    linesSection(ctx, lines, { offset, matchingCount, withDate }),
  );
  if (lineage && state.rec && focusedRecord !== state.rec) {
    focusedRecord = state.rec;
    // after the shell has put the page in place: bring the panel into view, focus its heading
    setTimeout(() => {
      const heading = lineage.querySelector('h2');
      if (!lineage.isConnected || !heading) return;
      lineage.scrollIntoView({ block: 'start' });
      heading.focus({ preventScroll: true });
    }, 0);
  } else if (!state.rec) {
    focusedRecord = null;
  }
}

function searchForm(ctx, byFacet, templateOptions) {
  const { state } = ctx;
  const select = (name, title, options, current) => {
    const values = options.map((o) => o.value);
    if (current && !values.includes(current)) options = [{ value: current, text: `${current} (none in range)` }, ...options];
    return h('label', {}, title, h('select', { name, disabled: options.length ? null : true },
      h('option', { value: '' }, options.length ? 'any' : 'none in range'),
      options.map((o) => h('option', { value: o.value, selected: o.value === current ? true : null }, o.text))));
  };
  const form = h('form', {
    class: 'toolbar logs-search', role: 'search', 'aria-label': 'Search the logs', 'data-form': 'log-search',
    onsubmit: (event) => {
      event.preventDefault();
      const data = new FormData(form);
      const patch = { q: String(data.get('q') || '').trim() || null, template: data.get('template') || null, offset: null };
      for (const { key } of LABELS) patch[key] = data.get(key) || null;
      ctx.update(patch);
    },
  },
  h('label', { class: 'search-box' }, 'Line text contains',
    h('input', {
      type: 'search', name: 'q', value: state.q || '', placeholder: 'e.g. timeout', autocomplete: 'off',
      spellcheck: 'false', 'aria-describedby': 'logs-search-hint',
    }),
    h('span', { id: 'logs-search-hint', class: 'hint' }, 'Case-insensitive substring match (no wildcards or regex).')),
  LABELS.map(({ key, title }) => select(key, title, (byFacet.get(key) || []).map((f) => ({ value: f.v, text: `${f.v} (${count(f.n)})` })), state[key])),
  select('template', 'Template', templateOptions.map((t) => ({
    value: t.id, text: `${truncate(t.template || t.id, 70)} (${count(t.n)})`,
  })), state.template),
  h('div', { class: 'actions-row' },
    h('button', { type: 'submit' }, 'Search'),
    h('a', { class: 'button-link', href: here(ctx, Object.fromEntries(['q', 'template', 'offset', ...LABELS.map((l) => l.key)].map((k) => [k, null]))) }, 'Clear')));
  return form;
}

function truncate(text, n) {
  const flat = String(text).replace(/\s+/g, ' ');
  return flat.length > n ? `${flat.slice(0, n - 1)}…` : flat;
}

function summary(ctx, matchingCount, inRange, templateOptions) {
  const { state } = ctx;
  const active = [];
  if (state.q) active.push(['q', `text contains “${state.q}”`]);
  for (const { key } of LABELS) if (state[key]) active.push([key, `${key} = ${state[key]}`]);
  if (state.template) {
    const t = templateOptions.find((o) => o.id === state.template);
    active.push(['template', `template = ${truncate(t && t.template ? t.template : state.template, 60)}`]);
  }
  return h('div', { class: 'logs-summary' },
    h('p', { 'data-count': 'matching', 'data-value': String(matchingCount), 'data-in-range': String(inRange), 'data-since': String(ctx.win.since), 'data-until': String(ctx.win.until) },
      h('strong', {}, count(matchingCount)), active.length ? ` matching lines of ${count(inRange)} in the range` : ' lines in the range'),
    active.length ? h('ul', { class: 'filter-chips', 'aria-label': 'Active filters' }, active.map(([key, text]) => h('li', {},
      h('a', { class: 'chip', href: here(ctx, { [key]: null, offset: null }), 'aria-label': `Remove the filter ${text}`, 'data-filter': key }, text, h('span', { 'aria-hidden': 'true' }, ' ×'))))) : '');
}

function templatesSection(ctx, templates, { step, sort, windows, templateRows, matchingCount }) {
  const { state, win } = ctx;
  const rows = templates.map((t) => {
    const n = Number(t.n);
    const recent = Number(t.recent);
    const base = Number(t.base);
    const pairs = (t.ts || []).map((ts, i) => [ts, (t.cs || [])[i]]);
    const family = t.id != null && String(t.id).startsWith(FAMILY) ? Number(t.members) : 0;
    return { ...t, n, recent, base, family, ...growthOf(recent, base, windows), points: filledSeries(win, step, pairs) };
  });
  rows.sort(sort === 'growth' ? (a, b) => b.rank - a.rank || b.n - a.n : (a, b) => b.n - a.n);
  const shown = rows.slice(0, templateRows);
  const sortLink = (key, text) => h('a', { href: here(ctx, { sort: key === 'count' ? null : key }), 'aria-current': sort === key ? 'true' : null, 'data-sort': key }, text);
  const period = (w) => `${clock(w[0], w[1] - w[0] > 86400e3).slice(0, 5)}–${clock(w[1], false).slice(0, 5)}`;
  const growthText = !windows ? 'Growth needs lines in the range.'
    : `Growth: the rate ${period(windows.recent)} over the rate ${period(windows.base)} (${windows.from === 'baseline' ? 'the baseline in the URL' : 'the last quarter of the data against the rest; the data ends at the last line'}); "new": no line in the baseline.`;
  return h('section', { class: 'logs-templates', 'aria-labelledby': 'logs-templates-title' },
    h('div', { class: 'section-head' },
      h('h2', { id: 'logs-templates-title' }, 'Templates'),
      h('p', { class: 'sort' }, 'Sort ', sortLink('count', 'by lines'), ' · ', sortLink('growth', 'by growth'))),
    h('p', { class: 'muted', 'data-growth-windows': windows ? `${windows.base.join('-')}/${windows.recent.join('-')}` : '' },
      `Templates of the matching lines (any template), with their lines per ${step.text}. ${growthText} Templates of prompt/response lines (one per distinct text) are collapsed into one row. Click a template to filter by it.`),
    h('div', { class: 'panel' }, shown.length ? [
      h('table', { 'data-table': 'templates', class: 'templates' },
        h('thead', {}, h('tr', {}, h('th', {}, 'template'), h('th', { class: 'num' }, 'lines'), h('th', { class: 'num' }, 'growth'), h('th', {}, `lines per ${step.text}`))),
        h('tbody', {}, shown.map((t) => {
          const text = t.family ? `${t.template} … (${count(t.family)} templates of prompt/response text)` : t.template || t.id || '(no template)';
          const selected = t.id != null && t.id === state.template;
          const growthCell = t.isNew ? 'new' : t.growth == null ? '–' : `×${t.growth >= 10 ? t.growth.toFixed(0) : t.growth.toFixed(2)}`;
          return h('tr', { 'data-template': t.family ? '' : t.id || '', 'data-family': t.family ? String(t.family) : null, 'aria-current': selected ? 'true' : null },
            h('td', {}, t.family ? h('pre', { class: 'log clamp', title: text }, text) : h('a', {
              href: here(ctx, { template: selected ? null : t.id, offset: null }), title: text,
              'aria-label': `${selected ? 'Stop filtering by' : 'Filter by'} template ${truncate(text, 120)}`,
            }, h('pre', { class: 'log clamp' }, text))),
            h('td', { class: 'num' }, count(t.n)),
            h('td', { class: 'num', 'data-growth': t.isNew ? 'new' : t.growth == null ? '' : t.growth.toFixed(3), 'data-rank': t.rank.toFixed(6), title: `${count(t.recent)} lines in the recent window, ${count(t.base)} in the baseline` },
              growthCell),
            h('td', { class: 'spark' }, sparkline('template-rate', [{ name: t.id || 'none', points: t.points }], `Lines per ${step.text} of template ${truncate(text, 80)}`)));
        }))),
      rows.length > shown.length ? h('p', {}, h('a', { href: here(ctx, { more: '1' }) }, `Show ${rows.length} templates`))
        : state.more === '1' && rows.length > TEMPLATE_ROWS ? h('p', {}, h('a', { href: here(ctx, { more: null }) }, `Show the top ${TEMPLATE_ROWS}`)) : '',
    ] : h('p', { class: 'empty' }, matchingCount ? 'No templates.' : 'No lines match in the range.')));
}

function linesSection(ctx, lines, { offset, matchingCount, withDate }) {
  const { state } = ctx;
  const more = lines.length > PAGE_SIZE;
  const page = lines.slice(0, PAGE_SIZE);
  const selected = state.rec || null;
  const pager = () => h('nav', { class: 'pager', 'aria-label': 'Pages of lines' },
    offset > 0 ? h('a', { href: here(ctx, { offset: offset - PAGE_SIZE > 0 ? String(offset - PAGE_SIZE) : null }), 'data-page': 'previous', rel: 'prev' }, '← newer')
      : h('span', { class: 'muted', 'aria-disabled': 'true' }, '← newer'),
    h('span', {}, page.length ? `lines ${count(offset + 1)}–${count(offset + page.length)} of ${count(matchingCount)}` : ''),
    more ? h('a', { href: here(ctx, { offset: String(offset + PAGE_SIZE) }), 'data-page': 'next', rel: 'next' }, 'older →')
      : h('span', { class: 'muted', 'aria-disabled': 'true' }, 'older →'));
  return h('section', { class: 'logs-lines', 'aria-labelledby': 'logs-lines-title' },
    h('div', { class: 'section-head' }, h('h2', { id: 'logs-lines-title' }, 'Latest lines'), page.length ? pager() : ''),
    h('div', { class: 'panel' }, page.length ? h('table', { 'data-table': 'logs', class: 'lines' },
      h('thead', {}, h('tr', {}, h('th', { class: 'time' }, 'time (UTC)'), h('th', { class: 'sev' }, 'severity'), h('th', { class: 'who' }, 'worker'),
        h('th', { class: 'cls' }, 'label'), h('th', {}, 'line'), h('th', { class: 'act' }, h('span', { class: 'visually-hidden' }, 'lineage')))),
      h('tbody', {}, page.map((l) => {
        const ms = msOf(l.ns);
        const isSelected = selected === l.ns && (state.rec_body ? state.rec_body === bodyHash(l.body || '') : true);
        return h('tr', { 'data-ns': l.ns, 'data-template': l.template_id || '', 'aria-current': isSelected ? 'true' : null, class: severityClass(l.severity) },
          h('td', { class: 'time', title: new Date(ms).toISOString() }, clock(ms, withDate)),
          h('td', { class: 'sev' }, l.severity || ''),
          h('td', { class: 'who', title: l.service ? `service ${l.service}` : null }, l.worker || ''),
          h('td', { class: 'cls' }, l.log_class || '', l.label ? [' ', h('span', { class: 'chip' }, l.label)] : ''),
          h('td', { class: 'body' }, h('pre', { class: 'log' }, highlighted(l.body, state.q))),
          h('td', { class: 'act' }, h('a', {
            class: 'button-link small', href: recordLink(ctx, l), 'data-action': 'lineage',
            'aria-label': `Lineage of the line at ${clock(ms, withDate)} on ${l.worker || 'no worker'}`,
          }, 'lineage')));
      }))) : h('p', { class: 'empty' }, offset > 0 && matchingCount > 0
      ? ['No lines on this page. ', h('a', { href: here(ctx, { offset: null }) }, 'Back to the newest lines')] : 'No lines match.')),
    page.length && (more || offset > 0) ? pager() : '');
}

function severityClass(severity) {
  const s = String(severity || '').toUpperCase();
  if (s.startsWith('ERR') || s === 'FATAL' || s === 'CRITICAL') return 'sev-error';
  if (s.startsWith('WARN')) return 'sev-warn';
  return null;
}

function recordLink(ctx, r) {
  return here(ctx, recordKeys(r));
}

/** The URL keys selecting record `r` ({ns, worker, template_id, body}) for its lineage. */
function recordKeys(r) {
  return { rec: r.ns, rec_worker: r.worker || null, rec_template: r.template_id || null, rec_body: bodyHash(r.body || '') };
}

/** A link from another page to the lineage of record `r` on the logs page, without filters. */
export function lineageHref(ctx, r) {
  return ctx.linkTo('logs', recordKeys(r));
}

// -- the lineage of one record -----------------------------------------------------------------

async function lineagePanel(ctx, step) {
  const { state, win } = ctx;
  if (!state.rec) return null;
  if (!/^\d{1,19}$/.test(state.rec)) throw new Error(`rec=${state.rec}: expected a timestamp in ns`);
  const ns = BigInt(state.rec);
  const ms = Number(ns / 1000000n);
  const close = h('a', { class: 'button-link small', href: here(ctx, { rec: null, rec_worker: null, rec_template: null, rec_body: null }), 'data-action': 'close-lineage' }, 'Close');
  const candidates = await sql(`SELECT ${RECORD_COLUMNS}, l.span_id, l.label_confidence, l.attrs FROM logs l
    WHERE ${between(ms, ms + 1)} AND CAST(l.ts AS BIGINT) = ${ns} AND ${equals('worker', state.rec_worker)} AND ${equals('template_id', state.rec_template)} LIMIT 50`);
  const record = candidates.find((r) => bodyHash(r.body || '') === state.rec_body) || candidates[0];
  if (!record) {
    return h('section', { class: 'panel lineage', 'data-lineage': 'missing', 'aria-labelledby': 'lineage-title' },
      h('div', { class: 'section-head' }, h('h2', { id: 'lineage-title', tabindex: '-1' }, 'Lineage'), close),
      h('p', { class: 'empty' }, `No record at ${new Date(ms).toISOString()} on ${state.rec_worker || 'no worker'} is stored (any more).`));
  }
  const attrs = parseAttrs(record.attrs);
  const uid = recordUid(attrs);
  const upstream = upstreamIds(attrs[UPSTREAM_KEY]);
  const request = requestIdOf(record, attrs);
  const nsNum = ns;
  const notSelf = (r) => !(r.ns === record.ns && r.worker === record.worker && r.template_id === record.template_id && r.body === record.body);
  const templateId = record.template_id;

  const idIn = (ids) => ids.map(quote).join(', ');
  const [templateText, templateSeries, requests, related, upstreamRows, downstreamRows, nearby] = await Promise.all([
    templateId ? sql(`SELECT max(template) AS template, min(first_seen) AS first_seen FROM templates WHERE template_id = ${quote(templateId)}`) : [],
    templateId ? sql(`SELECT CAST(l.ts AS BIGINT) / ${step.ms * 1e6} * ${step.ms} AS t, count(*) AS c FROM logs l
      WHERE ${where(win, [], 'l.')} AND l.template_id = ${quote(templateId)} GROUP BY 1`) : [],
    request || record.trace_id ? sql(`SELECT CAST(ts AS BIGINT) / 1000000 AS ts_ms, trace_id, request_id, model, model_version, worker, tenant,
        lora_adapters, kv_cache_policy, ttft_ms, e2e_ms, status FROM requests
      WHERE ${where({ since: ms - TRACE_PAD_MS, until: ms + TRACE_PAD_MS })}
        AND (${[request && `request_id = ${quote(request.id)}`, record.trace_id && `trace_id = ${quote(record.trace_id)}`].filter(Boolean).join(' OR ')})
      ORDER BY ts LIMIT 10`) : [],
    request || record.trace_id ? sql(`SELECT ${RECORD_COLUMNS} FROM logs l WHERE ${between(ms - TRACE_PAD_MS, ms + TRACE_PAD_MS)} AND (${[
      record.trace_id && `l.trace_id = ${quote(record.trace_id)}`,
      request && `l.request_id = ${quote(request.id)}`,
      request && `(${between(ms - MENTION_PAD_MS, ms + MENTION_PAD_MS)} AND strpos(l.body, ${quote(request.id)}) > 0)`,
    ].filter(Boolean).join(' OR ')}) ORDER BY l.ts LIMIT 101`) : [],
    upstream.length ? sql(`SELECT ${RECORD_COLUMNS}, l.attrs FROM logs l WHERE ${between(ms - TRACE_PAD_MS, ms + TRACE_PAD_MS)}
      AND (${upstream.map((id) => `strpos(l.attrs, ${quote(id)}) > 0`).join(' OR ')})
      AND (${LOG_ID_KEYS.map((key) => `json_get(l.attrs, ${quote(key)}) IN (${idIn(upstream)})`).join(' OR ')}) ORDER BY l.ts LIMIT 50`) : [],
    uid ? sql(`SELECT ${RECORD_COLUMNS}, l.attrs FROM logs l WHERE ${between(ms - TRACE_PAD_MS, ms + TRACE_PAD_MS)}
      AND strpos(l.attrs, ${quote(UPSTREAM_KEY)}) > 0 AND strpos(l.attrs, ${quote(uid)}) > 0 ORDER BY l.ts LIMIT 200`) : [],
    record.worker ? sql(`SELECT ${RECORD_COLUMNS} FROM logs l WHERE ${between(ms - 5001, ms + 5002)} AND l.worker = ${quote(record.worker)}
      AND CAST(l.ts AS BIGINT) BETWEEN ${nsNum - NEAR_NS} AND ${nsNum + NEAR_NS}
      AND ${templateId ? `(l.template_id <> ${quote(templateId)} OR l.template_id IS NULL)` : 'l.template_id IS NOT NULL'}
      ORDER BY abs(CAST(l.ts AS BIGINT) - ${nsNum}) LIMIT 40`) : [],
  ]);

  const requestRow = (request && requests.find((r) => r.request_id === request.id)) || requests.find((r) => record.trace_id && r.trace_id === record.trace_id) || null;
  // a gateway's record: what the serving worker logged while it served the request
  const servingWorker = requestRow && requestRow.worker && requestRow.worker !== record.worker ? requestRow.worker : null;
  const servingSince = requestRow ? Number(requestRow.ts_ms) - 5000 : 0;
  const servingUntil = requestRow ? Number(requestRow.ts_ms) + (Number(requestRow.e2e_ms) || 0) + 5000 : 0;
  const serving = servingWorker ? await sql(`SELECT ${RECORD_COLUMNS} FROM logs l WHERE ${between(servingSince, servingUntil)}
    AND l.worker = ${quote(servingWorker)} ORDER BY abs(CAST(l.ts AS BIGINT) - ${nsNum}) LIMIT 60`) : [];
  const sameRequest = related.filter(notSelf).slice(0, 100);
  const downstream = downstreamRows.filter((r) => upstreamIds(parseAttrs(r.attrs)[UPSTREAM_KEY]).includes(uid));
  const neighbours = nearby.sort((a, b) => (BigInt(a.ns) < BigInt(b.ns) ? -1 : 1));
  const recordMs = msOf(record.ns);
  const templateInfo = templateText[0] || {};
  const templatePoints = filledSeries(win, step, templateSeries.map((r) => [r.t, r.c]));
  const templateLines = templateSeries.reduce((sum, r) => sum + Number(r.c), 0);

  const groups = [
    { key: 'trace', lane: 'trace / request', title: record.trace_id ? 'Same trace or request' : 'Same request', rows: sameRequest, colour: PALETTE[1],
      empty: record.trace_id || request ? 'No other record of this trace or request within ±10 min.' : 'The record carries no trace or request id.' },
    { key: 'upstream', lane: 'upstream', title: 'Upstream (declared)', rows: upstreamRows, colour: PALETTE[4],
      empty: upstream.length ? `None of ${upstream.join(', ')} is stored within ±10 min.` : 'The record declares no upstream records (attribute upstream_log_ids).' },
    { key: 'downstream', lane: 'downstream', title: 'Downstream (naming this record)', rows: downstream, colour: PALETTE[3],
      empty: uid ? `No record names ${uid} as upstream within ±10 min.` : 'The record has no id of its own (log.record.uid / log_id).' },
    { key: 'worker', lane: 'same worker ±5 s', title: 'Same worker ±5 s (other templates)', rows: neighbours, colour: PALETTE[2],
      empty: record.worker ? `No record of another template on ${record.worker} within ±5 s.` : 'The record has no worker.' },
  ];
  if (servingWorker) {
    groups.push({ key: 'serving', lane: `serving worker`, title: `On the serving worker ${servingWorker} during the request ±5 s`, colour: PALETTE[7],
      rows: serving.sort((a, b) => (BigInt(a.ns) < BigInt(b.ns) ? -1 : 1)), empty: `No record of ${servingWorker} during the request.` });
  }

  const requestLink = requestRow
    ? ctx.linkTo('request', requestRow.trace_id ? { trace: requestRow.trace_id, at: String(requestRow.ts_ms) } : { request: requestRow.request_id, at: String(requestRow.ts_ms) })
    : record.trace_id ? ctx.linkTo('request', { trace: record.trace_id, at: String(Math.round(recordMs)) })
      : request ? ctx.linkTo('request', { request: request.id, at: String(Math.round(recordMs)) }) : null;

  const field = (term, value, attrs = {}) => (value == null || value === '' ? '' : [h('dt', {}, term), h('dd', attrs, value)]);
  return h('section', { class: 'panel lineage', 'data-lineage': record.ns, 'aria-labelledby': 'lineage-title' },
    h('div', { class: 'section-head' },
      h('h2', { id: 'lineage-title', tabindex: '-1' }, `Lineage of the line at ${clock(recordMs, true)} on ${record.worker || 'no worker'}`),
      close),
    h('pre', { class: 'log record' }, record.body || ''),
    h('dl', { class: 'facts' },
      field('time', `${new Date(recordMs).toISOString()} (${record.ns} ns)`),
      field('severity', record.severity), field('service', record.service), field('worker', record.worker),
      field('class', record.log_class), field('label', record.label && `${record.label}${record.label_confidence != null ? ` (${Number(record.label_confidence).toFixed(2)})` : ''}`),
      field('trace', record.trace_id), field('span', record.span_id), field('request', request && request.id), field('record id', uid)),
    h('div', { class: 'lineage-cols' },
      h('div', { class: 'lineage-template', 'data-lineage-template': templateId || '' },
        h('h3', {}, 'Template'),
        templateId ? [
          h('pre', { class: 'log' }, templateInfo.template || templateId),
          h('p', { class: 'muted' }, `${count(templateLines)} ${templateLines === 1 ? 'line' : 'lines'} in the range`,
            templateInfo.first_seen ? ` · first seen ${String(templateInfo.first_seen).slice(0, 19).replace('T', ' ')}Z` : '', ' · ',
            h('a', { href: here(ctx, { template: templateId, offset: null }) }, 'filter by it')),
          sparkline('lineage-template-rate', [{ name: templateId, points: templatePoints }], `Lines per ${step.text} of the record's template`),
        ] : h('p', { class: 'empty' }, 'The record has no template.')),
      h('div', { class: 'lineage-request', 'data-lineage-request': requestRow ? (requestRow.request_id || requestRow.trace_id) : '' },
        h('h3', {}, 'Request'),
        requestRow ? [
          h('dl', { class: 'facts' },
            field('model version', requestRow.model_version, { 'data-model-version': requestRow.model_version || '' }),
            field('model', requestRow.model), field('worker', requestRow.worker), field('tenant', requestRow.tenant),
            field('LoRA', requestRow.lora_adapters), field('KV cache', requestRow.kv_cache_policy),
            field('TTFT', requestRow.ttft_ms != null ? fmtMs(Number(requestRow.ttft_ms)) : null),
            field('end to end', requestRow.e2e_ms != null ? fmtMs(Number(requestRow.e2e_ms)) : null),
            field('status', requestRow.status), field('request id', requestRow.request_id), field('trace', requestRow.trace_id)),
          h('p', { class: 'muted' }, request ? `Found by the request id from ${request.from}${requestRow.request_id === request.id ? '' : ' (via the trace)'}.` : 'Found by the trace id.'),
          h('p', {}, h('a', { href: requestLink, 'data-action': 'open-request' }, 'Open the request')),
        ] : [
          h('p', { class: 'empty' }, request || record.trace_id
            ? `No request with ${request ? `request id ${request.id}` : ''}${request && record.trace_id ? ' or ' : ''}${record.trace_id ? `trace ${record.trace_id}` : ''} within ±10 min.`
            : 'The record carries no trace or request id.'),
          requestLink ? h('p', {}, h('a', { href: requestLink, 'data-action': 'open-request' }, 'Look the request up')) : '',
        ])),
    timeline(ctx, record, requestRow, groups),
    groups.map((g) => h('div', { class: 'lineage-group', 'data-lineage-group': g.key },
      h('h3', {}, `${g.title} (${g.rows.length >= 100 ? '100+' : g.rows.length})`),
      g.rows.length ? relatedTable(ctx, g.key, g.rows, recordMs) : h('p', { class: 'empty' }, g.empty))));
}

/** Records related to the selected one: time, offset, who, template/class, text, their lineage. */
function relatedTable(ctx, key, rows, recordMs) {
  return h('table', { 'data-table': `lineage-${key}`, class: 'lines related' },
    h('thead', {}, h('tr', {}, h('th', { class: 'time' }, 'time (UTC)'), h('th', { class: 'num off' }, 'offset'), h('th', { class: 'sev' }, 'severity'),
      h('th', { class: 'who' }, 'worker'), h('th', { class: 'cls' }, 'label'), h('th', {}, 'line'), h('th', { class: 'act' }, h('span', { class: 'visually-hidden' }, 'lineage')))),
    h('tbody', {}, rows.map((r) => {
      const ms = msOf(r.ns);
      return h('tr', { 'data-ns': r.ns, class: severityClass(r.severity) },
        h('td', { class: 'time', title: new Date(ms).toISOString() }, clock(ms, false)),
        h('td', { class: 'num off' }, offsetText(ms - recordMs)),
        h('td', { class: 'sev' }, r.severity || ''),
        h('td', { class: 'who', title: r.service ? `service ${r.service}` : null }, r.worker || ''),
        h('td', { class: 'cls' }, r.log_class || '', r.label ? [' ', h('span', { class: 'chip' }, r.label)] : ''),
        h('td', { class: 'body' }, h('pre', { class: 'log clamp' }, r.body || '')),
        h('td', { class: 'act' }, h('a', { class: 'button-link small', href: recordLink(ctx, r), 'data-action': 'lineage', 'aria-label': `Lineage of the line at ${clock(ms, false)} on ${r.worker || 'no worker'}` }, 'lineage')));
    })));
}

/**
 * The lineage as a timeline: one lane per relation, a dot per record (a link to its lineage; the
 * tables below are the keyboard path), the request as a bar from its start over its e2e time.
 */
function timeline(ctx, record, requestRow, groups) {
  const recordMs = msOf(record.ns);
  const lanes = [{ key: 'record', lane: 'this record', rows: [record], colour: PALETTE[0] }];
  if (requestRow) lanes.push({ key: 'request', lane: 'request', rows: [], colour: PALETTE[5] });
  for (const g of groups) if (g.rows.length) lanes.push(g);
  const times = [recordMs, ...lanes.flatMap((l) => l.rows.map((r) => msOf(r.ns)))];
  const requestStart = requestRow ? Number(requestRow.ts_ms) : null;
  const requestEnd = requestRow ? requestStart + (Number(requestRow.e2e_ms) || 0) : null;
  if (requestRow) times.push(requestStart, requestEnd);
  let [t0, t1] = [Math.min(...times), Math.max(...times)];
  if (t1 - t0 < 1000) { t0 -= 500; t1 += 500; }
  const pad = (t1 - t0) * 0.03;
  [t0, t1] = [t0 - pad, t1 + pad];
  const width = 1200, left = 170, right = 16, top = 8, laneH = 26, bottom = 26;
  const height = top + lanes.length * laneH + bottom;
  const px = (t) => left + ((t - t0) / (t1 - t0)) * (width - left - right);
  const svg = s('svg', {
    'data-chart': 'lineage', viewBox: `0 0 ${width} ${height}`, role: 'img', class: 'chart lineage-chart',
    'aria-label': `Timeline of the record's lineage: ${lanes.map((l) => (l.key === 'request' || l.key === 'record' ? l.lane : `${l.lane} ${l.rows.length}`)).join(', ')}`,
  });
  svg.append(s('line', { x1: px(recordMs), x2: px(recordMs), y1: top, y2: top + lanes.length * laneH, class: 'now' }));
  lanes.forEach((lane, i) => {
    const y = top + i * laneH + laneH / 2;
    svg.append(s('text', { x: 8, y: y + 4, class: 'lane' }, `${lane.lane}${lane.key === 'record' || lane.key === 'request' ? '' : ` (${lane.rows.length})`}`));
    svg.append(s('line', { x1: left, x2: width - right, y1: y, y2: y, class: 'lane-line' }));
    if (lane.key === 'request') {
      const x = px(requestStart);
      svg.append(s('rect', {
        'data-series': 'request', x: x.toFixed(1), y: y - 6, height: 12, rx: 2, width: Math.max(2, px(requestEnd) - x).toFixed(1), fill: lane.colour,
      }, s('title', {}, `request ${requestRow.request_id || requestRow.trace_id}: ${requestRow.model_version || ''} on ${requestRow.worker || ''}, e2e ${fmtMs(Number(requestRow.e2e_ms))}`)));
      return;
    }
    for (const r of lane.rows) {
      const ms = msOf(r.ns);
      const mark = s('circle', {
        'data-series': lane.key, cx: px(ms).toFixed(1), cy: y, r: lane.key === 'record' ? 6 : 4.5, fill: lane.colour,
        stroke: lane.key === 'record' ? '#1d2330' : 'none',
      }, s('title', {}, `${offsetText(ms - recordMs)} ${r.worker || ''}: ${truncate(r.body || '', 160)}`));
      svg.append(lane.key === 'record' ? mark : s('a', { href: recordLink(ctx, r), tabindex: '-1' }, mark));
    }
  });
  for (let i = 0; i <= 6; i += 1) {
    const t = t0 + ((t1 - t0) * i) / 6;
    svg.append(s('text', { x: px(t), y: height - 8, 'text-anchor': i === 0 ? 'start' : i === 6 ? 'end' : 'middle' }, offsetText(t - recordMs)));
  }
  return h('figure', { class: 'lineage-timeline' }, svg,
    h('figcaption', { class: 'muted' }, 'Time relative to the record; click a dot, or use the tables below, for that record\u2019s own lineage.'));
}

