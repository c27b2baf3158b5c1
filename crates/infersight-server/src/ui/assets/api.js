// The JSON API and the SQL endpoint, plus the formatting every page shares.

export async function getJSON(path) {
  const response = await fetch(path, { headers: { accept: 'application/json' } });
  return answer(response, path);
}

export async function postJSON(path, value) {
  const response = await fetch(path, {
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
    throw new Error(`${path}: ${response.status} ${message}`);
  }
  return body;
}

/** Rows of a SQL query over the store, as objects. */
export async function sql(text) {
  const result = await postJSON('/api/v1/query', { sql: text });
  return result.rows || [];
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
