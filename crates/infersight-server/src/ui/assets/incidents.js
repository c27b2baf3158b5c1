// Incidents: the list, and one incident with its verdict, root causes, confirm / reject and
// the full report (the API's self-contained HTML, in a same-origin frame).

import { getJSON, postJSON, h, chips, fmtPct, fmtTime } from './api.js';
import { incidentTable } from './overview.js';

export async function incidentsPage(ctx) {
  const answer = await getJSON('/api/v1/incidents');
  ctx.el.append(h('h1', {}, 'Incidents'), h('div', { class: 'panel' }, incidentTable(answer.incidents || [], ctx)));
}

function actionsTable(actions) {
  const recent = (actions.recent || []).slice(-20).reverse();
  if (!recent.length) return h('p', { class: 'empty' }, `No automatic actions taken${(actions.policies || []).length ? '' : ' (no policies configured)'}.`);
  const keys = ['ts', 'kind', 'policy', 'action', 'value', 'threshold', 'detail'].filter((k) => recent.some((r) => r[k] != null));
  return h('table', {}, h('thead', {}, h('tr', {}, keys.map((k) => h('th', {}, k)))),
    h('tbody', {}, recent.map((r) => h('tr', {}, keys.map((k) => h('td', {}, typeof r[k] === 'object' ? JSON.stringify(r[k]) : String(r[k] ?? '')))))));
}

export async function incidentPage(ctx) {
  const id = ctx.state.id;
  if (!id) throw new Error('no incident id in the URL');
  const [incident, actions] = await Promise.all([
    getJSON(`/api/v1/incidents/${encodeURIComponent(id)}`),
    getJSON('/api/v1/actions'),
  ]);
  const rca = incident.rca || {};
  const causes = rca.root_causes || [];
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
      h('p', {}, h('strong', { class: `status-${incident.status}`, 'data-status': incident.status }, incident.status), ` · created ${fmtTime(Date.parse(incident.created_at), true)}`,
        incident.note ? ` · note: ${incident.note}` : ''),
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
    h('h2', {}, 'Automatic actions'),
    h('div', { class: 'panel' }, actionsTable(actions)),
    h('h2', {}, 'Report'),
    report);
}
