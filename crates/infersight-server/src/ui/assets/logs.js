// Logs: templates with their rates, the latest lines, from SQL over `logs` and `templates`.

import { sql, h, quote, where, fmtNum, fmtTime } from './api.js';

export async function logsPage(ctx) {
  const { state, win } = ctx;
  const cond = where(win);
  const template = state.template ? ` AND template_id = ${quote(state.template)}` : '';
  const [templates, logs] = await Promise.all([
    sql(`SELECT l.template_id AS id, max(t.template) AS template, count(*) AS n, max(l.severity) AS severity
      FROM logs l LEFT JOIN (SELECT template_id, max(template) AS template FROM templates GROUP BY template_id) t ON l.template_id = t.template_id
      WHERE ${where(win, [], 'l.')} GROUP BY l.template_id ORDER BY n DESC LIMIT 50`),
    sql(`SELECT CAST(ts AS BIGINT) / 1000000 AS ts, severity, worker, body FROM logs WHERE ${cond}${template} ORDER BY ts DESC LIMIT 100`),
  ]);
  const max = Math.max(1, ...templates.map((t) => Number(t.n)));
  ctx.el.append(
    h('h1', {}, 'Logs and templates'),
    h('h2', {}, 'Templates in the range'),
    h('div', { class: 'panel' }, templates.length ? h('table', { 'data-table': 'templates' },
      h('thead', {}, h('tr', {}, h('th', {}, 'template'), h('th', { class: 'num' }, 'lines'), h('th', {}, ''))),
      h('tbody', {}, templates.map((t) => {
        const bar = h('span', { class: 'bar-h' });
        bar.style.width = `${(100 * Number(t.n)) / max}%`;
        return h('tr', { 'aria-current': t.id === state.template ? 'true' : null },
          h('td', {}, h('a', { href: ctx.linkTo('logs', { template: t.id }) }, h('pre', { class: 'log' }, t.template || t.id || '(no template)'))),
          h('td', { class: 'num' }, fmtNum(Number(t.n), 0)), h('td', {}, bar));
      }))) : h('p', { class: 'empty' }, 'No logs in the range.')),
    h('h2', {}, state.template ? `Latest lines of template ${state.template}` : 'Latest lines'),
    state.template ? h('p', {}, h('a', { href: ctx.linkTo('logs') }, 'all templates')) : '',
    h('div', { class: 'panel' }, logs.length ? h('table', { 'data-table': 'logs' },
      h('thead', {}, h('tr', {}, h('th', {}, 'time'), h('th', {}, 'severity'), h('th', {}, 'worker'), h('th', {}, 'line'))),
      h('tbody', {}, logs.map((l) => h('tr', {}, h('td', {}, fmtTime(Number(l.ts), true)), h('td', {}, l.severity || ''), h('td', {}, l.worker || ''), h('td', {}, h('pre', { class: 'log' }, l.body || ''))))))
      : h('p', { class: 'empty' }, 'No lines.')));
}
