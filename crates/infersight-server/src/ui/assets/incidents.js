// Incidents: the list, kept up to date without a reload (it polls `GET /api/v1/incidents`), and
// one incident. Its page leads with action: the symptom with units, one "do now" line, the first
// check with its SQL (run here through `/api/v1/query`), each cause with its kind, explained share
// and implicated workers, the incidents of the same event, all on the first screen (the API's
// `lead`, written by the report crate's formatter); then the runbook's confirm steps, confirm /
// reject, the timeline (an SVG chart of onset, detection, verdict updates, automatic actions,
// notifications sent and resolution), the actions taken while it was open, and the full report
// (the API's self-contained HTML, in a same-origin frame, folded: it repeats the verdict).

import { getJSON, postJSON, sql, h, chips, fmtTime } from './api.js';
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

/** Rows a confirm query shows on the page. */
const RESULT_ROWS = 20;

/** A confirm step's SQL with a button that runs it through `/api/v1/query` and shows the rows. */
function runnableSql(text, key) {
  const result = h('div', { class: 'sql-result', 'data-sql-result': key, 'aria-live': 'polite' });
  const run = h('button', { type: 'button', class: 'secondary', 'data-run-sql': key }, 'Run');
  run.addEventListener('click', async () => {
    run.disabled = true;
    result.replaceChildren(h('span', { class: 'muted' }, 'running…'));
    try {
      const rows = await sql(text);
      const columns = rows.length ? Object.keys(rows[0]) : [];
      result.replaceChildren(
        h('p', { class: 'muted', 'data-rows': String(rows.length) }, `${rows.length} row${rows.length === 1 ? '' : 's'}${rows.length > RESULT_ROWS ? `, the first ${RESULT_ROWS} shown` : ''}`),
        rows.length ? h('table', {}, h('thead', {}, h('tr', {}, columns.map((c) => h('th', {}, c)))),
          h('tbody', {}, rows.slice(0, RESULT_ROWS).map((r) => h('tr', {}, columns.map((c) => h('td', {}, r[c] == null ? '' : String(r[c]))))))) : null);
    } catch (error) {
      result.replaceChildren(h('span', { class: 'error' }, error.message));
    } finally {
      run.disabled = false;
    }
  });
  return h('div', { class: 'sql' }, h('pre', {}, h('code', {}, text)), run, result);
}

/** One confirm step: its text, and its SQL when it has some. */
function confirmStep(step, key) {
  return [h('span', {}, step.text), step.sql ? runnableSql(step.sql, key) : null];
}

/** The causes: rank, slice, kind, explained share, the workers where it shows. */
function causeList(lead, rca) {
  const causes = lead.causes || [];
  if (!causes.length) {
    return h('p', { class: 'empty', 'data-root-causes': '' }, rca.fleet_wide ? 'Fleet-wide: no single slice explains it.' : 'No root cause found.');
  }
  const byRank = new Map((rca.root_causes || []).map((c) => [c.rank, c]));
  return h('ol', { 'data-root-causes': '' }, causes.map((c) => h('li', { class: 'rc', value: c.rank, 'data-kind': c.kind },
    chips((byRank.get(c.rank) || {}).dimensions), ' ',
    h('span', { class: `kind kind-${c.kind.replace(/\W+/g, '-')}` }, c.kind),
    ` · explains ${c.explained}`,
    c.workers.length ? h('span', { class: 'muted', 'data-workers': '' }, ` · workers: ${c.workers.join(', ')} (${c.serving_workers} serving it)`) : null)));
}

/** The first screen: headline, do now, first check, causes, related incidents, the verdict. */
function leadPanel(incident, ctx) {
  const rca = incident.rca || {};
  const lead = incident.lead || {};
  const related = incident.related || [];
  return h('div', { class: 'panel lead', 'data-lead': '' },
    h('p', { class: 'headline', 'data-headline': '' }, lead.headline || 'No SLI moved significantly against the baseline.'),
    lead.do_now ? h('p', { class: 'do-now', 'data-do-now': '' }, h('strong', {}, 'Do now: '), lead.do_now) : null,
    lead.first_check ? h('div', { class: 'first-check', 'data-first-check': '' },
      h('strong', {}, 'First check '), h('span', { class: 'muted' }, `(${lead.first_check.source}) `),
      confirmStep(lead.first_check, 'first')) : null,
    h('h2', {}, 'Causes'),
    causeList(lead, rca),
    lead.ranking_note ? h('p', { class: 'muted', 'data-ranking-note': '' }, lead.ranking_note) : null,
    related.length ? h('p', { 'data-related': '' }, 'Same event as ', related.map((id, i) => [i ? ', ' : '', h('a', { href: ctx.linkTo('incident', { id }) }, id)])) : null,
    h('p', { class: 'muted verdict', 'data-verdict': '' }, rca.verdict || 'no verdict'));
}

/** The runbook's confirm steps, each SQL runnable. */
function confirmSection(lead) {
  const steps = lead.confirm || [];
  if (!steps.length) return [];
  return [h('h2', {}, `How to confirm (${steps[0].source})`),
    h('div', { class: 'panel' }, h('ol', { 'data-confirm': '' }, steps.map((step, i) => h('li', {}, confirmStep(step, `step-${i}`)))))];
}

export async function incidentPage(ctx) {
  const id = ctx.state.id;
  if (!id) throw new Error('no incident id in the URL');
  const incident = await getJSON(`/api/v1/incidents/${encodeURIComponent(id)}`);
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
  // same origin: fit the frame to the report so the page scrolls once (again when unfolded)
  const fit = () => {
    const doc = report.contentDocument;
    if (doc && doc.documentElement && doc.documentElement.scrollHeight) report.style.height = `${doc.documentElement.scrollHeight + 20}px`;
  };
  report.addEventListener('load', () => { fit(); report.dataset.loaded = 'true'; });
  const folded = h('details', { class: 'report-fold', 'data-report': '' },
    h('summary', {}, 'Full report: evidence, charts, runbooks (repeats the verdict)'), report);
  folded.addEventListener('toggle', fit);
  ctx.el.append(
    h('h1', {}, `Incident ${id}`),
    h('p', { 'data-incident': id }, 'Judgement: ', h('strong', { class: `status-${incident.status}`, 'data-status': incident.status }, judgement(incident.status)), ` · created ${fmtTime(Date.parse(incident.created_at), true)}`,
      incident.note ? ` · note: ${incident.note}` : ''),
    ...(incident.watch ? [watchLine(incident.watch)] : []),
    leadPanel(incident, ctx),
    ...confirmSection(incident.lead || {}),
    h('h2', {}, 'Your verdict'),
    h('div', { class: 'panel' }, note,
      h('div', { class: 'actions-row' },
        h('button', { type: 'button', 'data-action': 'confirm', onclick: decide('confirm') }, 'Confirm'),
        h('button', { type: 'button', class: 'secondary', 'data-action': 'reject', onclick: decide('reject') }, 'Reject'),
        feedback)),
    ...(timeline.length ? [h('h2', {}, 'Timeline'), h('div', { class: 'panel' }, incidentTimeline(timeline, Date.now()))] : []),
    h('h2', {}, 'Automatic actions'),
    h('div', { class: 'panel' }, actionsTable(incident.actions || [])),
    h('h2', {}, 'Report'),
    folded);
}
