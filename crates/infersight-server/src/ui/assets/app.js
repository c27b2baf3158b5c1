// The shell: navigation, the time-range picker, URL state and auto-refresh. Every page is a
// module function `render(ctx)` that fills `ctx.el`; the whole state of a view is in the query
// string, so a URL reproduces the view.

import { sql, h } from './api.js';
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
const SHARED = ['range', 'since', 'until', 'refresh'];

const view = document.getElementById('view');
const nav = document.getElementById('nav');
const rangeSelect = document.getElementById('range');
const refreshBox = document.getElementById('refresh');
const updated = document.getElementById('updated');
const customForm = document.getElementById('custom-range');
const rangeFrom = document.getElementById('range-from');
const rangeTo = document.getElementById('range-to');
/** `datetime-local` text of a UTC time in ms, and back (the inputs are read as UTC). */
const localText = (ms) => new Date(ms).toISOString().slice(0, 16);
const fromLocal = (text) => Date.parse(`${text}:00Z`);
let generation = 0;
let timer = null;
let extent = null;

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

/** The window of the state in ms: a relative range ends now; `all` spans the stored requests. */
async function windowOf(state) {
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
  const until = Math.ceil(Date.now() / 60000) * 60000;
  return { since: until - (RANGES[state.range] || RANGES['1h']), until };
}

function drawNav(state) {
  nav.replaceChildren(...Object.entries(PAGES).filter(([, p]) => !p.hidden).map(([key, page]) => {
    const current = key === state.page || (key === 'incidents' && state.page === 'incident') || (key === 'requests' && state.page === 'request');
    return h('a', { href: linkTo(key), 'aria-current': current ? 'page' : null }, page.title);
  }));
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
    const win = await windowOf(state);
    if (state.range === 'custom' && document.activeElement !== rangeFrom && document.activeElement !== rangeTo) {
      rangeFrom.value = localText(win.since);
      rangeTo.value = localText(win.until);
    }
    const ctx = { state, win, el, update, navigate, linkTo, stale: () => mine !== generation };
    await page.render(ctx);
    if (mine !== generation) return;
    view.replaceChildren(el);
    view.dataset.state = 'ready';
  } catch (error) {
    if (mine !== generation) return;
    view.replaceChildren(h('h1', {}, page.title), h('p', { class: 'error', role: 'alert' }, String(error.message || error)));
    view.dataset.state = 'error';
  }
  updated.textContent = `updated ${new Date().toISOString().slice(11, 19)}Z`;
  schedule(state);
}

function schedule(state) {
  clearTimeout(timer);
  if (state.refresh === '1' && state.range !== 'custom') timer = setTimeout(() => { if (!document.hidden) render(); else schedule(readState()); }, REFRESH_MS);
}

rangeSelect.addEventListener('change', async () => {
  extent = null;
  if (rangeSelect.value === 'custom') {
    // start from the window in view; the form applies it
    const win = await windowOf(readState());
    rangeFrom.value = localText(win.since);
    rangeTo.value = localText(win.until);
    customForm.hidden = false;
    rangeFrom.focus();
    return;
  }
  update({ range: rangeSelect.value, since: null, until: null });
});
customForm.addEventListener('submit', (event) => {
  event.preventDefault();
  const [since, until] = [fromLocal(rangeFrom.value), fromLocal(rangeTo.value)];
  if (!(until > since)) { rangeTo.setCustomValidity('the end must be after the start'); rangeTo.reportValidity(); return; }
  rangeTo.setCustomValidity('');
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
render();
