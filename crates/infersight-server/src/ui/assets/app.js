// The shell: navigation, the time-range picker, URL state, auto-refresh and freshness. Every page
// is a module function `render(ctx)` that fills `ctx.el`; the whole state of a view is in the
// query string, so a URL reproduces the view. The header says when the data last arrived; a
// relative range ends at the last data when nothing newer exists (said on screen, `anchor=now`
// undoes it), an empty range offers to jump to the last data, and a source that stopped sending
// while the others go on is warned about on every page. With authentication on, a caller the
// server does not know gets the login form (an API token; the server keeps it in an HttpOnly
// cookie) and the header says who is logged in.

import { sql, getJSON, h, ago, fmtTime, isoText, fromIsoText, session, logIn, logOut, loginMethods } from './api.js';
import { overview } from './overview.js';
import { heatmapPage } from './heatmap.js';
import { incidentsPage, incidentPage } from './incidents.js';
import { breakdownPage, dimensionsPage, requestsPage } from './explore.js';
import { logsPage } from './logs.js';
import { requestPage } from './request.js';

const PAGES = {
  overview: { title: 'Overview', render: overview },
  heatmap: { title: 'Heatmap', render: heatmapPage },
  breakdown: { title: 'Breakdown', render: breakdownPage },
  dimensions: { title: 'Dimensions', render: dimensionsPage },
  requests: { title: 'Requests', render: requestsPage },
  request: { title: 'Request', render: requestPage, hidden: true },
  logs: { title: 'Logs', render: logsPage },
  incidents: { title: 'Incidents', render: incidentsPage },
  incident: { title: 'Incident', render: incidentPage, hidden: true },
};

const RANGES = { '15m': 15 * 60e3, '1h': 3600e3, '6h': 6 * 3600e3, '24h': 24 * 3600e3, '7d': 7 * 24 * 3600e3 };
const REFRESH_MS = 30000;
/** Keys that carry over when moving between pages: the time range and refresh. */
const SHARED = ['range', 'since', 'until', 'refresh', 'anchor'];
/** A relative range ends at the last data once the data is this much older than now. */
const ANCHOR_AFTER_MS = 3 * 60e3;
/** The freshness answer is reused this long between renders (a refresh asks again). */
const FRESHNESS_TTL_MS = 10e3;

const view = document.getElementById('view');
const nav = document.getElementById('nav');
const rangeSelect = document.getElementById('range');
const refreshBox = document.getElementById('refresh');
const updated = document.getElementById('updated');
const lastData = document.getElementById('last-data');
const customForm = document.getElementById('custom-range');
const rangeFrom = document.getElementById('range-from');
const rangeTo = document.getElementById('range-to');
const who = document.getElementById('who');
// the custom range's ISO text (api.js), exported here too for the tests that import the shell
export { isoText, fromIsoText };
let generation = 0;
let timer = null;
let extent = null;
let fresh = null;

function readState() {
  const state = Object.fromEntries(new URLSearchParams(location.search));
  if (!PAGES[state.page]) state.page = 'overview';
  if (!state.range) state.range = state.since && state.until ? 'custom' : '1h';
  return state;
}

/** The URL of a state: the page first, then the other keys in a stable order. */
export function urlOf(state) {
  const params = new URLSearchParams();
  params.set('page', state.page || 'overview');
  for (const key of Object.keys(state).sort()) {
    if (key !== 'page' && state[key] != null && state[key] !== '') params.set(key, state[key]);
  }
  return `/?${params}`;
}

/** A link to `page` keeping the time range (and `extra` keys). */
export function linkTo(page, extra = {}) {
  const state = readState();
  const next = { page };
  for (const key of SHARED) if (state[key] != null) next[key] = state[key];
  return urlOf({ ...next, ...extra });
}

export function navigate(url, { replace = false } = {}) {
  if (replace) history.replaceState(null, '', url);
  else history.pushState(null, '', url);
  render();
}

/** Changes keys of the current state (null removes one) and re-renders. */
export function update(patch, options) {
  const state = { ...readState(), ...patch };
  for (const key of Object.keys(state)) if (state[key] == null || state[key] === '') delete state[key];
  navigate(urlOf(state), options);
}

/** The store's freshness (`GET /api/v1/freshness`), reused for a few seconds; null if unknown. */
async function freshness(force) {
  if (!force && fresh && Date.now() - fresh.at < FRESHNESS_TTL_MS) return fresh.answer;
  const answer = await getJSON('/api/v1/freshness').catch(() => null);
  fresh = { at: Date.now(), answer };
  return answer;
}

/**
 * The window of a relative range of `length` ms: it ends now, or at the (minute after the) last
 * data when that is older than ANCHOR_AFTER_MS and the URL does not say `anchor=now`. Answers
 * the window and whether it was moved.
 */
export function relativeWindow(length, now, lastDataMs, anchor) {
  const until = Math.ceil(now / 60000) * 60000;
  if (anchor !== 'now' && Number.isFinite(lastDataMs) && now - lastDataMs > ANCHOR_AFTER_MS) {
    const end = Math.ceil((lastDataMs + 1) / 60000) * 60000;
    return { since: end - length, until: end, anchored: true };
  }
  return { since: until - length, until, anchored: false };
}

/**
 * The window of the state in ms: a relative range ends now (or at the last data, see
 * `relativeWindow`); `all` spans the stored requests.
 */
async function windowOf(state, known = fresh && fresh.answer) {
  if (state.range === 'custom') {
    const [since, until] = [Number(state.since), Number(state.until)];
    if (Number.isFinite(since) && Number.isFinite(until) && until > since) return { since, until };
    throw new Error('a custom range needs since < until (ms since the epoch) in the URL');
  }
  if (state.range === 'all') {
    if (!extent) {
      const [row] = await sql('SELECT CAST(min(ts) AS BIGINT) / 1000000 AS a, CAST(max(ts) AS BIGINT) / 1000000 AS b FROM requests');
      extent = row && row.a != null ? { since: Math.floor(row.a / 60000) * 60000, until: Math.ceil((row.b + 1) / 60000) * 60000 } : null;
    }
    if (extent) return { ...extent };
  }
  return relativeWindow(RANGES[state.range] || RANGES['1h'], Date.now(), known ? Number(known.last_data_ms) : NaN, state.anchor);
}

/** The header's "last data HH:MM (N min ago)", warning-coloured when the store is stale. */
function drawLastData(answer) {
  if (!answer || answer.last_data_ms == null) {
    lastData.textContent = answer ? 'no data stored yet' : '';
    lastData.classList.toggle('stale', false);
    delete lastData.dataset.lastData;
    return;
  }
  const at = Number(answer.last_data_ms);
  const old = Date.now() - at > 86400e3;
  lastData.textContent = `last data ${old ? fmtTime(at, true).replace(/:\d\dZ$/, 'Z') : `${fmtTime(at)}Z`} (${ago(at)})`;
  lastData.title = `the newest stored row: ${new Date(at).toISOString()}`;
  lastData.classList.toggle('stale', Boolean(answer.stale));
  lastData.dataset.lastData = String(at);
  lastData.dataset.stale = answer.stale ? 'true' : 'false';
}

/** Sources that stopped while the others went on, one entry per service/worker. */
export function stoppedSources(answer) {
  const byName = new Map();
  for (const source of (answer && answer.sources) || []) {
    if (!source.stopped) continue;
    const name = source.worker || source.service || '(unnamed source)';
    const entry = byName.get(name) || { name, tables: [], last: 0 };
    entry.tables.push(source.table);
    entry.last = Math.max(entry.last, Number(source.last_ms));
    byName.set(name, entry);
  }
  return [...byName.values()].sort((a, b) => a.last - b.last);
}

/** Whether any watched table holds a row in the window (one row each at most is read). */
async function holdsData(win) {
  const cond = `ts >= to_timestamp_millis(${Math.floor(win.since)}) AND ts < to_timestamp_millis(${Math.ceil(win.until)})`;
  const rows = await sql(['requests', 'logs', 'metrics'].map((t) => `SELECT * FROM (SELECT 1 AS x FROM ${t} WHERE ${cond} LIMIT 1)`).join(' UNION ALL '));
  return rows.length > 0;
}

/**
 * Notices above the page: the range moved to the last data, an empty range (`empty`: no row in
 * it, or it starts after the last data), stopped sources.
 */
function freshnessNotices(state, win, answer, empty) {
  const notices = [];
  const last = answer && answer.last_data_ms != null ? Number(answer.last_data_ms) : null;
  if (win.anchored && last != null) {
    notices.push(h('div', { class: 'notice', role: 'status', 'data-notice': 'anchored' }, h('p', {},
      `No data since ${fmtTime(last, true)} (${ago(last)}): the range ends at the last data instead of now.`,
      h('a', { href: urlOf({ ...state, anchor: 'now' }) }, 'Show up to now'))));
  } else if (last != null && state.page !== 'incident' && state.page !== 'request' && (empty || last < win.since)) {
    const span = win.until - win.since;
    const end = Math.ceil((last + 1) / 60000) * 60000;
    notices.push(h('div', { class: 'notice', role: 'status', 'data-notice': 'empty-range' }, h('p', {},
      `No data in this range: the last data is at ${fmtTime(last, true)} (${ago(last)}).`,
      h('a', { href: urlOf({ ...state, range: 'custom', since: String(end - span), until: String(end), anchor: null }), 'data-action': 'jump-to-last-data' }, 'Jump to the last data'))));
  }
  if (answer && answer.stale && last != null && !win.anchored && win.until > last) {
    notices.push(h('div', { class: 'notice stopped', role: 'alert', 'data-freshness-warning': 'all' }, h('p', {},
      `No source has sent data for ${ago(last).replace(' ago', '')}: the newest row is from ${fmtTime(last, true)}. Is the pipeline down?`)));
  }
  const stopped = stoppedSources(answer);
  if (stopped.length) {
    notices.push(h('div', { class: 'notice stopped', role: 'alert', 'data-freshness-warning': 'stopped' },
      h('p', {}, `${stopped.length === 1 ? 'A source stopped' : `${stopped.length} sources stopped`} sending while the others go on: `,
        stopped.slice(0, 8).map((s, i) => h('span', { 'data-stopped-source': s.name },
          `${i ? '; ' : ''}${s.name} (${s.tables.join(', ')}; last ${fmtTime(s.last, Date.now() - s.last > 86400e3)}, ${ago(s.last)})`)),
        stopped.length > 8 ? ` and ${stopped.length - 8} more` : '', '.')));
  }
  return notices;
}

function drawNav(state) {
  nav.replaceChildren(...Object.entries(PAGES).filter(([, p]) => !p.hidden).map(([key, page]) => {
    const current = key === state.page || (key === 'incidents' && state.page === 'incident') || (key === 'requests' && state.page === 'request');
    return h('a', { href: linkTo(key), 'aria-current': current ? 'page' : null }, page.title);
  }));
}

/** The header's "name (role) · Log out", when authentication is on. */
function drawWho(me) {
  if (!me || !me.authentication) {
    who.hidden = true;
    who.replaceChildren();
    return;
  }
  const orgs = me.orgs && me.orgs.length ? ` · ${me.orgs.join(', ')}` : '';
  const out = h('button', { type: 'button', class: 'secondary', 'data-action': 'log-out' }, 'Log out');
  out.addEventListener('click', async () => {
    await logOut();
    drawWho(null);
    showLogin('Logged out.');
  });
  who.replaceChildren(h('span', { 'data-who': me.name, title: `role ${me.role}` }, `${me.name} (${me.role})${orgs}`), out);
  who.hidden = false;
}

/** The login form in place of the page: an API token, checked by the server. */
function showLogin(message) {
  clearTimeout(timer);
  generation += 1;
  drawWho(null);
  document.title = 'Log in · infersight';
  const input = h('input', { type: 'password', id: 'login-token', name: 'token', autocomplete: 'off', spellcheck: 'false', placeholder: 'ist_…', required: true, 'aria-label': 'API token' });
  const status = h('p', { class: message && message !== 'Logged out.' ? 'error' : 'muted', role: 'alert', 'data-login-status': '' }, message || '');
  const form = h('form', { class: 'login', 'data-login': '' },
    h('label', {}, 'API token ', input),
    h('button', { type: 'submit' }, 'Log in'),
    status,
    h('p', { class: 'muted' }, 'Create one with `infersight tokens create --role viewer` (or analyst, operator, admin).'));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    try {
      drawWho(await logIn(input.value.trim()));
      input.value = '';
      render();
    } catch (error) {
      status.className = 'error';
      status.textContent = error.status === 401 ? 'That token is unknown, revoked or expired.' : String(error.message || error);
    }
  });
  // an identity provider, when the server has one for the UI: its button above the token form
  const provider = h('div', { class: 'login-provider', hidden: true });
  view.replaceChildren(h('h1', {}, 'Log in'), provider, form);
  view.dataset.state = 'login';
  input.focus();
  loginMethods().then((methods) => {
    if (!methods || !methods.oidc) return;
    provider.replaceChildren(
      h('a', { class: 'button', href: methods.oidc.login, 'data-login-oidc': '' }, 'Log in with your identity provider'),
      h('p', { class: 'muted' }, `${methods.oidc.issuer}; or with an API token below.`));
    provider.hidden = false;
  }).catch(() => {});
}

async function render() {
  const state = readState();
  const mine = ++generation;
  drawNav(state);
  rangeSelect.value = state.range;
  customForm.hidden = state.range !== 'custom';
  refreshBox.checked = state.refresh === '1';
  const page = PAGES[state.page];
  document.title = `${page.title} · infersight`;
  view.dataset.state = 'loading';
  view.dataset.page = state.page;
  const el = h('div');
  try {
    const answer = await freshness(false);
    if (mine !== generation) return;
    drawLastData(answer);
    const win = await windowOf(state, answer);
    if (state.range === 'custom' && document.activeElement !== rangeFrom && document.activeElement !== rangeTo) {
      rangeFrom.value = isoText(win.since);
      rangeTo.value = isoText(win.until);
    }
    const ctx = { state, win, el, update, navigate, linkTo, freshness: answer, stale: () => mine !== generation };
    // a range picked by hand may hold nothing: say so, and offer the last data
    const [, holds] = await Promise.all([page.render(ctx), state.range === 'custom' && answer && answer.last_data_ms != null ? holdsData(win).catch(() => true) : true]);
    if (mine !== generation) return;
    view.replaceChildren(...freshnessNotices(state, win, answer, !holds), el);
    view.dataset.state = 'ready';
  } catch (error) {
    if (mine !== generation) return;
    if (error.status === 401) {
      showLogin('Your session ended: log in again.');
      return;
    }
    view.replaceChildren(h('h1', {}, page.title), h('p', { class: 'error', role: 'alert' }, String(error.message || error)));
    view.dataset.state = 'error';
  }
  updated.textContent = `updated ${new Date().toISOString().slice(11, 19)}Z`;
  schedule(state);
}

function schedule(state) {
  clearTimeout(timer);
  if (state.refresh === '1' && state.range !== 'custom') timer = setTimeout(() => { fresh = null; if (!document.hidden) render(); else schedule(readState()); }, REFRESH_MS);
}

rangeSelect.addEventListener('change', async () => {
  extent = null;
  if (rangeSelect.value === 'custom') {
    // start from the window in view; the form applies it
    const win = await windowOf(readState());
    rangeFrom.value = isoText(win.since);
    rangeTo.value = isoText(win.until);
    customForm.hidden = false;
    rangeFrom.focus();
    return;
  }
  update({ range: rangeSelect.value, since: null, until: null });
});
customForm.addEventListener('submit', (event) => {
  event.preventDefault();
  const [since, until] = [fromIsoText(rangeFrom.value), fromIsoText(rangeTo.value)];
  for (const [input, value] of [[rangeFrom, since], [rangeTo, until]]) {
    input.setCustomValidity(Number.isFinite(value) ? '' : 'a UTC time as YYYY-MM-DD HH:MM');
  }
  if (Number.isFinite(since) && Number.isFinite(until) && !(until > since)) rangeTo.setCustomValidity('the end must be after the start');
  if (!rangeFrom.reportValidity() || !rangeTo.reportValidity()) return;
  update({ range: 'custom', since: String(since), until: String(until) });
});
refreshBox.addEventListener('change', () => update({ refresh: refreshBox.checked ? '1' : null }, { replace: true }));
// same-page links go through history instead of a reload
document.addEventListener('click', (event) => {
  const link = event.target.closest && event.target.closest('a[href^="/?"]');
  if (!link || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) return;
  event.preventDefault();
  navigate(link.getAttribute('href'));
  view.focus({ preventScroll: true });
});
window.addEventListener('popstate', render);
// who is calling first: a stranger gets the login form instead of a page of refusals
session()
  .then((me) => { drawWho(me); render(); })
  .catch((error) => (error.status === 401 ? showLogin('') : render()));
