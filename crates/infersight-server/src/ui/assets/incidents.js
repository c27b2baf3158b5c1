// Incidents: the list, kept up to date without a reload (it polls `GET /api/v1/incidents`), and
// one incident with its timeline (an SVG chart of onset, detection, verdict updates, automatic
// actions, notifications sent and resolution), verdict, root causes, the actions taken while it
// was open, confirm / reject and the full report (the API's self-contained HTML, in a
// same-origin frame).

import { getJSON, postJSON, h, chips, fmtPct, fmtTime } from './api.js';
import { incidentTable, judgement } from './overview.js';
import { incidentTimeline } from './charts.js';

/** How often the list asks for incidents while it is in view. */
export const LIST_POLL_MS = 5000;

export async function incidentsPage(ctx) {
  const answer = await getJSON('/api/v1/incidents');
  const panel = h('div', { class: 'panel', 'data-live': 'incidents', 'data-polls': '0' }, incidentTable(answer.incidents || [], ctx));
  const status = h('p', { class: 'muted', 'aria-live': 'polite' }, `Updates every ${LIST_POLL_MS / 1000} s.`);
  ctx.el.append(h('h1', {}, 'Incidents'), status, panel);
  let last = JSON.stringify(answer.incidents || []);
  const timer = setInterval(async () => {
    // another page (or a newer render of this one) took over: stop asking
    if (ctx.stale()) { clearInterval(timer); return; }
    if (document.hidden) return;
    try {
      const next = await getJSON('/api/v1/incidents');
      const text = JSON.stringify(next.incidents || []);
      panel.dataset.polls = String(Number(panel.dataset.polls) + 1);
      if (text !== last) {
        last = text;
        panel.replaceChildren(incidentTable(next.incidents || [], ctx));
      }
      status.textContent = `Updates every ${LIST_POLL_MS / 1000} s; last ${new Date().toISOString().slice(11, 19)}Z.`;
      status.classList.remove('error');
    } catch (error) {
      status.textContent = `Could not update: ${error.message}`;
      status.classList.add('error');
    }
  }, LIST_POLL_MS);
}

/** The actions taken while the incident was open: time, action, target, outcome. */
function actionsTable(actions) {
  if (!actions.length) return h('p', { class: 'empty' }, 'No automatic action taken while it was open.');
  return h('table', { 'data-table': 'incident-actions' },
    h('thead', {}, h('tr', {}, ['time', 'action', 'target', 'outcome', 'policy'].map((k) => h('th', {}, k)))),
    h('tbody', {}, actions.map((a) => h('tr', {},
      h('td', {}, fmtTime(Date.parse(a.at), true)), h('td', {}, a.action), h('td', {}, a.target),
      h('td', {}, a.outcome), h('td', {}, a.policy || '')))));
}

/** State, severity and times of an incident the watcher opened. */
function watchLine(watch) {
  if (!watch) return null;
  const parts = [
    h('strong', { class: `state-${watch.state}`, 'data-state': watch.state }, watch.state),
    watch.notice ? h('span', { class: `severity-${watch.notice.severity}`, 'data-severity': watch.notice.severity }, ` · ${watch.notice.severity}`) : null,
    ` · onset ${fmtTime(Date.parse(watch.onset), true)} · detected ${fmtTime(Date.parse(watch.detected_at), true)}`,
    watch.resolved_at ? ` · resolved ${fmtTime(Date.parse(watch.resolved_at), true)}` : '',
  ];
  return h('p', { 'data-watch': '' }, 'Opened by the watcher: ', parts);
}

export async function incidentPage(ctx) {
  const id = ctx.state.id;
  if (!id) throw new Error('no incident id in the URL');
  const incident = await getJSON(`/api/v1/incidents/${encodeURIComponent(id)}`);
  const rca = incident.rca || {};
  const causes = rca.root_causes || [];
  const timeline = incident.timeline || [];
  const note = h('textarea', { id: 'note', name: 'note', 'aria-label': 'Note (required to confirm)', placeholder: 'what you found or did (required to confirm)' }, incident.note || '');
  const feedback = h('span', { class: 'muted', 'aria-live': 'polite' });
  const decide = (verdict) => async () => {
    if (verdict === 'confirm' && !note.value.trim()) { feedback.textContent = 'A note is required to confirm.'; note.focus(); return; }
    try {
      await postJSON(`/api/v1/incidents/${encodeURIComponent(id)}/${verdict}`, { note: note.value.trim() });
      ctx.navigate(location.pathname + location.search, { replace: true });
    } catch (error) {
      feedback.textContent = error.message;
      feedback.classList.add('error');
    }
  };
  const report = h('iframe', {
    class: 'report', title: `Report of incident ${id}`,
    src: `/api/v1/incidents/${encodeURIComponent(id)}/report?format=html&llm=false`,
  });
  // same origin: fit the frame to the report so the page scrolls once
  report.addEventListener('load', () => {
    const doc = report.contentDocument;
    if (doc && doc.documentElement) report.style.height = `${doc.documentElement.scrollHeight + 20}px`;
    report.dataset.loaded = 'true';
  });
  ctx.el.append(
    h('h1', {}, `Incident ${id}`),
    h('div', { class: 'panel', 'data-incident': id },
      h('p', {}, 'Judgement: ', h('strong', { class: `status-${incident.status}`, 'data-status': incident.status }, judgement(incident.status)), ` · created ${fmtTime(Date.parse(incident.created_at), true)}`,
        incident.note ? ` · note: ${incident.note}` : ''),
      watchLine(incident.watch),
      h('p', { 'data-verdict': '' }, rca.verdict || 'no verdict'),
      h('h2', {}, 'Root causes'),
      causes.length
        ? h('ol', { 'data-root-causes': '' }, causes.map((rc) => h('li', { class: 'rc' }, chips(rc.dimensions), ` explains ${fmtPct(rc.explained_fraction)}`)))
        : h('p', { class: 'empty' }, rca.fleet_wide ? 'Fleet-wide: no single slice explains it.' : 'No root cause found.'),
      h('h2', {}, 'Your verdict'),
      note,
      h('div', { class: 'actions-row' },
        h('button', { type: 'button', 'data-action': 'confirm', onclick: decide('confirm') }, 'Confirm'),
        h('button', { type: 'button', class: 'secondary', 'data-action': 'reject', onclick: decide('reject') }, 'Reject'),
        feedback)),
    ...(timeline.length ? [h('h2', {}, 'Timeline'), h('div', { class: 'panel' }, incidentTimeline(timeline, Date.now()))] : []),
    h('h2', {}, 'Automatic actions'),
    h('div', { class: 'panel' }, actionsTable(incident.actions || [])),
    h('h2', {}, 'Report'),
    report);
}
