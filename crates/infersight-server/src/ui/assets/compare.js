// The incident window and the baseline that Dimensions, Breakdown and Requests compare, and the
// picker that sets them on each of those pages. The windows live in the URL (`sel_since`,
// `sel_until`, `base_since`, `base_until`, ms since the epoch: what the heatmap's brushing
// writes); without them a page compares the newest stored incident overlapping its range. The
// picker offers the stored incidents (their RCA's windows come with `GET /api/v1/incidents`)
// and the four times typed as ISO UTC, and links to the heatmap to brush them instead.

import { getJSON, h, fmtTime, isoText, fromIsoText } from './api.js';

/** Incidents the picker offers, newest first. */
const PICKER_INCIDENTS = 20;

/** `[since, until]` in ms of a stored `{since, until}` (RFC 3339), else null. */
function spanOf(window) {
  if (!window) return null;
  const span = [Date.parse(window.since), Date.parse(window.until)];
  return span.every(Number.isFinite) && span[1] > span[0] ? span : null;
}

/** The stored incidents that carry both windows: `{id, label, sel, base}`, newest first. */
export function comparableIncidents(rows) {
  const out = [];
  for (const row of rows || []) {
    const [sel, base] = [spanOf(row.incident_window), spanOf(row.baseline_window)];
    if (!sel || !base) continue;
    const what = row.top_cause || row.verdict || 'incident';
    out.push({ id: row.id, label: `${fmtTime(sel[0], true).replace(/:\d\dZ$/, 'Z')} · ${what}`, sel, base });
  }
  return out;
}

/**
 * The windows to compare: the URL's incident (`sel_*`) and baseline (`base_*`), else those of
 * the newest stored incident overlapping the range `win`. Answers `{ windows, incidents }`:
 * `windows` is `{sel, base, from, id?}` or null, `incidents` what the picker offers.
 */
export async function comparison(state, win) {
  const given = (a, b) => (Number(b) > Number(a) ? [Number(a), Number(b)] : null);
  const rows = await getJSON('/api/v1/incidents').then((a) => a.incidents || [], () => []);
  const incidents = comparableIncidents(rows).slice(0, PICKER_INCIDENTS);
  const sel = given(state.sel_since, state.sel_until);
  const base = given(state.base_since, state.base_until);
  if (sel && base) {
    // an incident's windows typed back (the picker's text keeps whole seconds) are still its own
    const near = (a, b) => a.every((v, k) => Math.abs(v - b[k]) < 1000);
    const same = incidents.find((i) => near(i.sel, sel) && near(i.base, base));
    return { windows: { sel, base, from: same ? `incident ${same.id}` : 'the windows in the URL', id: same && same.id }, incidents };
  }
  const newest = incidents.find((i) => i.sel[1] > win.since && i.sel[0] < win.until);
  return { windows: newest ? { sel: newest.sel, base: newest.base, from: `incident ${newest.id}`, id: newest.id } : null, incidents };
}

/** The windows alone (`comparison(…).windows`). */
export async function comparisonWindows(state, win) {
  return (await comparison(state, win)).windows;
}

/** The URL keys of a pair of windows (null clears them). */
export function windowKeys(sel, base) {
  const text = (v) => (v == null ? null : String(Math.round(v)));
  return { sel_since: text(sel && sel[0]), sel_until: text(sel && sel[1]), base_since: text(base && base[0]), base_until: text(base && base[1]) };
}

/**
 * The picker: a stored incident (its windows) or the two windows typed as ISO UTC, applied to
 * the URL with `extra` keys (the requests page switches to its "most unusual" order); "clear"
 * goes back to the default. `compared` is `comparison()`'s answer.
 */
export function comparePicker(ctx, compared, extra = {}) {
  const { windows, incidents } = compared;
  const input = (name, value, label) => h('label', {}, label, h('input', {
    type: 'text', name, value: value == null ? '' : isoText(value, true), placeholder: 'YYYY-MM-DD HH:MM', size: 17,
    inputmode: 'numeric', autocomplete: 'off', spellcheck: 'false', 'data-compare-input': name,
  }));
  const fields = [
    input('sel-from', windows && windows.sel[0], 'incident from'), input('sel-to', windows && windows.sel[1], 'to'),
    input('base-from', windows && windows.base[0], 'baseline from'), input('base-to', windows && windows.base[1], 'to'),
  ];
  const [selFrom, selTo, baseFrom, baseTo] = fields.map((label) => label.querySelector('input'));
  const choice = h('select', { name: 'compare-incident', 'data-compare-incident': '' },
    h('option', { value: '', selected: !windows || !windows.id }, incidents.length ? 'the windows typed here' : 'no stored incident'),
    incidents.map((i) => h('option', { value: i.id, selected: Boolean(windows && windows.id === i.id) }, i.label)));
  // an incident picked fills the four times with its windows
  choice.addEventListener('change', () => {
    const picked = incidents.find((i) => i.id === choice.value);
    if (!picked) return;
    [[selFrom, picked.sel[0]], [selTo, picked.sel[1]], [baseFrom, picked.base[0]], [baseTo, picked.base[1]]]
      .forEach(([el, v]) => { el.value = isoText(v, true); el.setCustomValidity(''); });
  });
  const apply = (event) => {
    event.preventDefault();
    const times = [selFrom, selTo, baseFrom, baseTo].map((el) => {
      const ms = fromIsoText(el.value);
      el.setCustomValidity(Number.isFinite(ms) ? '' : 'a UTC time as YYYY-MM-DD HH:MM');
      return ms;
    });
    if (Number.isFinite(times[0]) && Number.isFinite(times[1]) && !(times[1] > times[0])) selTo.setCustomValidity('the end must be after the start');
    if (Number.isFinite(times[2]) && Number.isFinite(times[3]) && !(times[3] > times[2])) baseTo.setCustomValidity('the end must be after the start');
    if (![selFrom, selTo, baseFrom, baseTo].every((el) => el.reportValidity())) return;
    ctx.update({ ...windowKeys([times[0], times[1]], [times[2], times[3]]), ...extra, offset: null });
  };
  const inUrl = Number(ctx.state.sel_until) > Number(ctx.state.sel_since);
  const brush = ctx.linkTo('heatmap', { sli: ctx.state.sli || null, filter: ctx.state.filter || null, ...(windows ? windowKeys(windows.sel, windows.base) : {}) });
  return h('form', { class: 'toolbar compare-picker', 'data-compare-picker': windows ? windows.from : 'none', onsubmit: apply },
    h('label', {}, 'Compare', choice), fields,
    h('span', { class: 'muted' }, 'UTC'),
    h('button', { type: 'submit', class: 'secondary', 'data-action': 'compare' }, 'Compare'),
    inUrl ? h('button', { type: 'button', class: 'secondary', 'data-action': 'clear-compare', onclick: () => ctx.update({ ...windowKeys(null, null), offset: null }) }, 'Default windows') : null,
    h('a', { href: brush, class: 'muted' }, 'or brush them on the heatmap'));
}
