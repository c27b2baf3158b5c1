// The JSON API and the SQL endpoint, plus the formatting every page shares.

/** A server that limits concurrent calls answers 429: asked again this often, this much later. */
const RETRIES_ON_429 = 6;
const RETRY_BASE_MS = 150;

/** `fetch`, asked again (after Retry-After, or a growing pause) while the server answers 429. */
async function fetchPolitely(path, init) {
  for (let attempt = 0; ; attempt += 1) {
    const response = await fetch(path, init);
    if (response.status !== 429 || attempt >= RETRIES_ON_429) return response;
    const after = Number(response.headers.get('retry-after'));
    const pause = Number.isFinite(after) && after > 0 ? Math.min(after * 1000, 5000) : RETRY_BASE_MS * 2 ** attempt;
    await new Promise((resolve) => setTimeout(resolve, pause * (0.75 + Math.random() / 2)));
  }
}

export async function getJSON(path) {
  const response = await fetchPolitely(path, { headers: { accept: 'application/json' } });
  return answer(response, path);
}

export async function postJSON(path, value) {
  const response = await fetchPolitely(path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json' },
    body: JSON.stringify(value),
  });
  return answer(response, path);
}

async function answer(response, path) {
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const message = body && body.error ? body.error.message || JSON.stringify(body.error) : '';
    const error = new Error(`${path}: ${response.status} ${message}`);
    // 401: the shell asks for a token (login), whatever page asked
    error.status = response.status;
    throw error;
  }
  return body;
}

/** Who is logged in (`GET /api/v1/session`); an error with `status` 401 when no one is. */
export async function session() {
  return getJSON('/api/v1/session');
}

/** Logs in with an API token: the server sets the session cookie; answers who it is. */
export async function logIn(token) {
  return postJSON('/api/v1/session', { token });
}

/** How one may log in (`GET /api/v1/session/methods`): `{token, oidc: {issuer, login} | null}`. */
export async function loginMethods() {
  return getJSON('/api/v1/session/methods');
}

/** Logs out: the server drops the session cookie. */
export async function logOut() {
  await fetch('/api/v1/session', { method: 'DELETE' });
}

/** Queries one page keeps in flight at most (a server may limit each caller's; 429 above it). */
const MAX_QUERIES_IN_FLIGHT = 3;
let inFlight = 0;
const waiting = [];

/** Rows of a SQL query over the store, as objects. */
export async function sql(text) {
  if (inFlight >= MAX_QUERIES_IN_FLIGHT) await new Promise((resolve) => waiting.push(resolve));
  inFlight += 1;
  try {
    const result = await postJSON('/api/v1/query', { sql: text });
    return result.rows || [];
  } finally {
    inFlight -= 1;
    const next = waiting.shift();
    if (next) next();
  }
}

/** Columns of `requests` a filter or a breakdown may name (crates/infersight-model tables.rs). */
export const REQUEST_DIMENSIONS = [
  'tenant', 'service', 'runtime', 'worker', 'device', 'model', 'model_version', 'lora_adapters',
  'kv_cache_policy', 'batch_size', 'finish_reason', 'status', 'error_type',
];

export const LATENCY_SLIS = ['ttft', 'tpot', 'e2e', 'queue', 'prefill', 'decode', 'itl_max'];

export function quote(value) {
  return `'${String(value).replace(/'/g, "''")}'`;
}

/** Prefix of a filter key naming an `attrs` key (`attrs.llm.lora.adapters=x`). */
export const ATTRS_PREFIX = 'attrs.';

/**
 * `key=value,key=value` → [[key, value]]. A key is a column of REQUEST_DIMENSIONS or
 * `attrs.<key>`; a comma splits only where a `key=` follows, so values may hold commas
 * (`lora_adapters=chat-lora,sql-lora`). Unknown keys are an error.
 */
export function parseFilter(text) {
  if (!text) return [];
  return text.split(/,(?=\s*[A-Za-z_][\w.\-]*\s*=)/).map((part) => part.trim()).filter(Boolean).map((part) => {
    const at = part.indexOf('=');
    const key = at > 0 ? part.slice(0, at).trim() : '';
    const known = REQUEST_DIMENSIONS.includes(key) || (key.startsWith(ATTRS_PREFIX) && key.length > ATTRS_PREFIX.length);
    if (!known) {
      throw new Error(`filter “${part}”: expected one of ${REQUEST_DIMENSIONS.join(', ')} or attrs.<key> = value`);
    }
    return [key, part.slice(at + 1).trim()];
  });
}

/** The SQL text of a filter key: a column as text, or `json_get(attrs, 'key')`. */
export function filterExpr(key, alias = '') {
  return key.startsWith(ATTRS_PREFIX) ? `json_get(${alias}attrs, ${quote(key.slice(ATTRS_PREFIX.length))})` : `CAST(${alias}${key} AS VARCHAR)`;
}

/** A SQL condition on `ts` (of table `alias`, e.g. `l.`) for a window in ms, and the filter pairs. */
export function where(win, filters = [], alias = '') {
  const parts = [
    `${alias}ts >= to_timestamp_millis(${Math.floor(win.since)})`,
    `${alias}ts < to_timestamp_millis(${Math.ceil(win.until)})`,
  ];
  for (const [key, value] of filters) parts.push(`${filterExpr(key, alias)} = ${quote(value)}`);
  return parts.join(' AND ');
}

/** Step of a series for a window: at most ~180 points. */
export function stepOf(win) {
  const minutes = (win.until - win.since) / 60000;
  if (minutes <= 180) return { text: '1m', ms: 60000 };
  if (minutes <= 900) return { text: '5m', ms: 300000 };
  if (minutes <= 3 * 1440) return { text: '30m', ms: 1800000 };
  return { text: '1h', ms: 3600000 };
}

export function seconds(ms) {
  return (ms / 1000).toFixed(3);
}

export function fmtMs(value) {
  if (value == null || !Number.isFinite(value)) return '–';
  if (value >= 1000) return `${(value / 1000).toFixed(value >= 10000 ? 1 : 2)} s`;
  return `${value.toFixed(value >= 100 ? 0 : 1)} ms`;
}

export function fmtPct(value) {
  if (value == null || !Number.isFinite(value)) return '–';
  return `${(value * 100).toFixed(value < 0.1 ? 2 : 1)} %`;
}

export function fmtNum(value, digits = 1) {
  if (value == null || !Number.isFinite(value)) return '–';
  if (Math.abs(value) >= 1e6) return `${(value / 1e6).toFixed(digits)} M`;
  if (Math.abs(value) >= 1e4) return `${(value / 1e3).toFixed(digits)} k`;
  return value.toFixed(Math.abs(value) >= 100 ? 0 : digits);
}

/**
 * Round ticks over [lo, hi]: multiples of a step of 1, 2 or 5 × 10^k, the smallest such step
 * giving at most `count` intervals.
 */
export function niceTicks(lo, hi, count = 5) {
  if (!(hi > lo) || !Number.isFinite(lo) || !Number.isFinite(hi)) return Number.isFinite(lo) ? [lo] : [];
  const raw = (hi - lo) / Math.max(1, count);
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw * (1 - 1e-9));
  const ticks = [];
  for (let i = Math.ceil(lo / step - 1e-9); i * step <= hi + step * 1e-9; i += 1) ticks.push(Number((i * step).toPrecision(12)));
  return ticks;
}

/** Ticks of a log axis over [lo, hi] (> 0): 1-2-5 × 10^k, or only the powers of ten when too many. */
export function logTicks(lo, hi, count = 10) {
  if (!(hi > lo) || !(lo > 0)) return [];
  const ticks = [];
  for (let k = Math.floor(Math.log10(lo)); 10 ** k <= hi; k += 1) {
    for (const m of [1, 2, 5]) {
      const v = Number((m * 10 ** k).toPrecision(12));
      if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) ticks.push(v);
    }
  }
  return ticks.length > count ? ticks.filter((v) => Math.abs(Math.log10(v) - Math.round(Math.log10(v))) < 1e-9) : ticks;
}

/** Steps of a time axis: round seconds, minutes, hours, days. */
const TIME_STEPS_MS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400].map((s) => s * 1000);

/**
 * Ticks of a time axis over [since, until] (ms): multiples of the smallest round step (1 s …
 * 30 s, 1, 2, 5, 10, 15, 30 min, 1, 2, 3, 6, 12 h, days) giving at most `count` intervals, so
 * labels fall on round times in UTC. Answers `{ step, ticks }`.
 */
export function timeTicks(since, until, count = 8) {
  if (!(until > since)) return { step: 60000, ticks: [] };
  const span = until - since;
  const step = TIME_STEPS_MS.find((s) => span / s <= count) || 86400e3 * Math.ceil(span / 86400e3 / count);
  const ticks = [];
  for (let t = Math.ceil(since / step) * step; t <= until; t += step) ticks.push(t);
  return { step, ticks };
}

/** A time tick's label: seconds when the step is under a minute, the date when it is days. */
export function fmtTick(ms, step) {
  const iso = new Date(ms).toISOString();
  if (step < 60000) return iso.slice(11, 19);
  if (step >= 86400e3) return iso.slice(5, 10);
  return iso.slice(11, 16);
}

/** A round latency for an axis: `200 ms`, `1 s`, `2.5 s`. */
export function fmtTickMs(value) {
  if (!Number.isFinite(value)) return '–';
  if (value >= 1000) return `${Number((value / 1000).toPrecision(3))} s`;
  return `${Number(value.toPrecision(3))} ms`;
}

/** `N min ago` / `N h ago` / `N d ago` of a time `ms` before `now`. */
export function ago(ms, now = Date.now()) {
  const minutes = Math.max(0, Math.round((now - ms) / 60000));
  if (minutes < 90) return `${minutes} min ago`;
  if (minutes < 48 * 60) return `${Math.round(minutes / 60)} h ago`;
  return `${Math.round(minutes / 1440)} d ago`;
}

/**
 * ISO text (`YYYY-MM-DD HH:MM`, UTC) of a time in ms, with `:SS` when `withSeconds` and the time
 * has seconds (a brushed window's edge); `fromIsoText` reads it back (a `T`, seconds and a
 * trailing `Z` are taken too), NaN for anything else.
 */
export function isoText(ms, withSeconds = false) {
  const iso = new Date(ms).toISOString();
  return iso.slice(0, withSeconds && iso.slice(17, 19) !== '00' ? 19 : 16).replace('T', ' ');
}

export function fromIsoText(text) {
  const match = /^\s*(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2})(:\d{2})?\s*Z?\s*$/.exec(text || '');
  return match ? Date.parse(`${match[1]}T${match[2]}${match[3] || ':00'}Z`) : NaN;
}

export function fmtTime(ms, withDate = false) {
  const d = new Date(ms);
  const iso = d.toISOString();
  return withDate ? `${iso.slice(0, 10)} ${iso.slice(11, 19)}Z` : `${iso.slice(11, 16)}`;
}

/** Creates an element with attributes and children (strings become text: never HTML). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value == null || value === false) continue;
    if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? '' : value);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child == null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

/** `{k: v}` → chips `k=v`. */
export function chips(dimensions) {
  return Object.entries(dimensions || {}).map(([k, v]) => h('span', { class: 'chip' }, `${k}=${v}`));
}
