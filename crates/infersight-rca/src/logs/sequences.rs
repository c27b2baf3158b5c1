//! Log-sequence anomalies for an incident: the logs of each request (or trace) form a session —
//! its template ids in time order — and a next-event model trained on the baseline window's
//! sessions (`infersight_analytics::sequence`, DeepLog-style, count-based) judges the incident
//! window's. Sessions it does not expect are grouped by what was unexpected ("after `A`, `B`
//! was never seen in the baseline"), which the report shows next to the template rates.
//!
//! Decision rules (documented because users act on them):
//! - Session: the records of one `request_id` (the column, else the `request_id` attribute
//!   `parse` lifts from engine lines), else one `trace_id`, with a template id, in time order
//!   (ties by record order); it belongs to the window of its first record. Prompt and response
//!   lines (`log_class` `prompt_input`, `response_output`) are left out by
//!   [`super::system_lines`]: their templates follow the users' text, not what the system did,
//!   and the online miner keeps minting new ones. Records without such a key are not in any
//!   session. Sessions that start in the incident's last
//!   [`END_GRACE_NS`] are left out (they may still be running where the data ends, and would
//!   look cut short). At most [`MAX_SESSION_EVENTS`] events per session and
//!   [`MAX_RECORDS`] records in all are read (the newest are dropped first when over).
//! - Model: trained on the baseline's sessions when there are at least
//!   [`MIN_BASELINE_SESSIONS`] (default parameters of the HDFS-selected model: context 4,
//!   support 5, every seen successor a candidate). The baseline's own sessions are scored by the
//!   same model, so a rare path that the support rule flags in the baseline too is discounted.
//! - Sample: at most [`MAX_SESSIONS_PER_SIDE`] sessions per window, chosen by a hash of the
//!   session key (deterministic; counts in the report are of the sample).
//! - Pattern: (reason, unexpected event, the event before it); for an event no baseline
//!   session logged, the event alone (what came before it varies and says little), reported
//!   with the step that most often preceded it. Its incident count must be at
//!   least [`MIN_SUPPORT`] sessions and [`MIN_SHARE`] of the incident's sessions (a handful of
//!   sessions under a template the online miner only just created is no finding) and lie in the Poisson upper tail of its baseline share
//!   times the incident's sessions (plus half a pseudo-session) with p below
//!   [`FAMILY_ALPHA`] divided by the number of patterns. Ranked by excess sessions; at most
//!   [`MAX_PATTERNS`].

use std::collections::{BTreeMap, HashMap};

use arrow::array::Array;
use infersight_analytics::sequence::{
    EventId, EventInterner, NextEvent, NextEventModel, SequenceParams, UnexpectedReason,
};

use super::stats::ln_poisson_upper_tail;
use super::{
    FAMILY_ALPHA, MIN_SUPPORT, i64_column, optional, string_column, system_lines, ts_between,
};
use crate::RcaContext;
use crate::contract::SequenceAnomaly;
use infersight_query::QueryEngine;
use infersight_query::QueryError;

/// Baseline sessions needed before the model is trusted.
pub const MIN_BASELINE_SESSIONS: usize = 100;
/// Events kept per session.
pub const MAX_SESSION_EVENTS: usize = 256;
/// Log records read at most (both windows).
pub const MAX_RECORDS: usize = 2_000_000;
/// Incident sessions starting this close to the incident's end are left out.
pub const END_GRACE_NS: i64 = 60_000_000_000;
/// Sessions per window scored at most (a deterministic sample above that).
pub const MAX_SESSIONS_PER_SIDE: usize = 25_000;
/// A pattern must hold at least this share of the incident's sessions.
pub const MIN_SHARE: f64 = 0.001;
/// Patterns reported at most.
pub const MAX_PATTERNS: usize = 5;

/// A session under construction.
struct Session {
    /// Hash of the session key: the deterministic sample order.
    key_hash: u64,
    first_ts: i64,
    worker: Option<String>,
    events: Vec<EventId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Step {
    Start,
    End,
    /// Any preceding step (the key of an event no baseline session logged).
    Any,
    Event(EventId),
}

type PatternKey = (u8, Step, Step);

/// Unexpected log sequences of the incident against the baseline (see the module doc).
pub async fn sequence_anomalies(
    engine: &QueryEngine,
    ctx: &RcaContext,
) -> Result<Vec<SequenceAnomaly>, QueryError> {
    let (Some(b0), Some(b1), Some(i0), Some(i1)) = (
        ctx.baseline.since_ns,
        ctx.baseline.until_ns,
        ctx.incident.since_ns,
        ctx.incident.until_ns,
    ) else {
        return Ok(Vec::new());
    };
    if b1 <= b0 || i1 <= i0 {
        return Ok(Vec::new());
    }
    let (interner, sessions) = read_sessions(engine, (b0.min(i0), b1.max(i1))).await?;
    let Some((baseline, incident)) = split_sessions(&sessions, (b0, b1), (i0, i1)) else {
        return Ok(Vec::new());
    };
    let model = NextEventModel::train(
        baseline.iter().map(|s| s.events.as_slice()),
        SequenceParams::default(),
    )
    .map_err(|e| QueryError::Internal(format!("sequence model: {e}")))?;
    let mut base_counts: HashMap<PatternKey, u64> = HashMap::new();
    for session in &baseline {
        if let Some((key, _, _)) = pattern_of(&model, &session.events) {
            *base_counts.entry(key).or_default() += 1;
        }
    }
    let found = incident_patterns(&model, &incident);
    let kept = significant_patterns(found, &base_counts, baseline.len(), incident.len());
    let totals = (incident.len() as u64, baseline.len() as u64);
    Ok(kept
        .into_iter()
        .map(|(key, f)| anomaly_of(&interner, key, f, &base_counts, totals))
        .collect())
}

/// The sessions of the records in `range` (see the module doc), by session key, with the
/// interner of their template ids.
async fn read_sessions(
    engine: &QueryEngine,
    range: (i64, i64),
) -> Result<(EventInterner, HashMap<String, Session>), QueryError> {
    let sql = format!(
        "SELECT COALESCE(request_id, CAST(json_get(attrs, 'request_id') AS VARCHAR), trace_id) AS session, \
           CAST(ts AS BIGINT) AS t, template_id, worker FROM logs \
         WHERE {} AND template_id IS NOT NULL \
           AND {} \
           AND COALESCE(request_id, CAST(json_get(attrs, 'request_id') AS VARCHAR), trace_id) IS NOT NULL \
         ORDER BY t LIMIT {MAX_RECORDS}",
        ts_between("ts", range),
        system_lines("log_class")
    );
    let output = engine.sql(&sql).await?;
    let mut interner = EventInterner::new();
    let mut sessions: HashMap<String, Session> = HashMap::new();
    for batch in &output.batches {
        let keys = string_column(batch, 0)?;
        let ts = i64_column(batch, 1)?;
        let templates = string_column(batch, 2)?;
        let workers = string_column(batch, 3)?;
        for row in 0..batch.num_rows() {
            let (Some(key), Some(template)) = (optional(&keys, row), optional(&templates, row))
            else {
                continue;
            };
            if key.is_empty() || !ts.is_valid(row) {
                continue;
            }
            let event = interner.intern(template);
            let session = sessions.entry(key.to_string()).or_insert_with(|| Session {
                key_hash: fnv1a(key.as_bytes()),
                first_ts: ts.value(row),
                worker: optional(&workers, row).map(str::to_string),
                events: Vec::new(),
            });
            if session.events.len() < MAX_SESSION_EVENTS {
                session.events.push(event);
            }
        }
    }
    Ok((interner, sessions))
}

/// The baseline's and the incident's sessions (by their first record; not those starting in
/// the incident's last [`END_GRACE_NS`]), each sampled to [`MAX_SESSIONS_PER_SIDE`]; `None`
/// when the baseline has too few for a model or the incident none.
fn split_sessions(
    sessions: &HashMap<String, Session>,
    (b0, b1): (i64, i64),
    (i0, i1): (i64, i64),
) -> Option<(Vec<&Session>, Vec<&Session>)> {
    let in_window = |t: i64, (lo, hi): (i64, i64)| t >= lo && t < hi;
    let mut baseline: Vec<&Session> = Vec::new();
    let mut incident: Vec<&Session> = Vec::new();
    let incident_end = if i1 - i0 > 2 * END_GRACE_NS {
        i1 - END_GRACE_NS
    } else {
        i1
    };
    for session in sessions.values() {
        if in_window(session.first_ts, (i0, i1)) {
            if session.first_ts >= incident_end {
                continue;
            }
            incident.push(session);
        } else if in_window(session.first_ts, (b0, b1)) {
            baseline.push(session);
        }
    }
    if baseline.len() < MIN_BASELINE_SESSIONS || incident.is_empty() {
        return None;
    }
    for side in [&mut baseline, &mut incident] {
        if side.len() > MAX_SESSIONS_PER_SIDE {
            side.sort_unstable_by_key(|s| (s.key_hash, s.first_ts));
            side.truncate(MAX_SESSIONS_PER_SIDE);
        }
    }
    Some((baseline, incident))
}

/// The incident sessions of one pattern.
struct Found {
    sessions: u64,
    /// What preceded the unexpected step, per session.
    afters: BTreeMap<Step, u64>,
    workers: BTreeMap<String, u64>,
    expected: Vec<Option<EventId>>,
}

/// The incident's unexpected sessions grouped by pattern.
fn incident_patterns(model: &NextEventModel, incident: &[&Session]) -> HashMap<PatternKey, Found> {
    let mut found: HashMap<PatternKey, Found> = HashMap::new();
    for session in incident {
        let Some((key, after, expected)) = pattern_of(model, &session.events) else {
            continue;
        };
        let entry = found.entry(key).or_insert_with(|| Found {
            sessions: 0,
            afters: BTreeMap::new(),
            workers: BTreeMap::new(),
            expected,
        });
        entry.sessions += 1;
        *entry.afters.entry(after).or_default() += 1;
        if let Some(worker) = &session.worker {
            *entry.workers.entry(worker.clone()).or_default() += 1;
        }
    }
    found
}

/// The patterns that pass the support, share and Poisson tests (see the module doc), ranked by
/// excess sessions over the baseline's expectation, at most [`MAX_PATTERNS`].
fn significant_patterns(
    found: HashMap<PatternKey, Found>,
    base_counts: &HashMap<PatternKey, u64>,
    baseline_total: usize,
    incident_total: usize,
) -> Vec<(PatternKey, Found)> {
    let (n_base, n_inc) = (baseline_total as f64, incident_total as f64);
    let ln_alpha = (FAMILY_ALPHA / found.len().max(1) as f64).ln();
    let mut kept: Vec<(f64, PatternKey, Found)> = found
        .into_iter()
        .filter_map(|(key, f)| {
            let before = base_counts.get(&key).copied().unwrap_or(0);
            let expected = (before as f64 + 0.5) / n_base * n_inc;
            let significant = f.sessions >= MIN_SUPPORT
                && f.sessions as f64 >= MIN_SHARE * n_inc
                && ln_poisson_upper_tail(f.sessions, expected) < ln_alpha;
            significant.then_some((f.sessions as f64 - expected, key, f))
        })
        .collect();
    kept.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    kept.truncate(MAX_PATTERNS);
    kept.into_iter().map(|(_, key, f)| (key, f)).collect()
}

/// The report's record of one pattern: the step most often before the surprise, the top three
/// workers. `totals`: the incident's and the baseline's (sampled) sessions.
fn anomaly_of(
    interner: &EventInterner,
    key: PatternKey,
    f: Found,
    base_counts: &HashMap<PatternKey, u64>,
    (incident_total, baseline_total): (u64, u64),
) -> SequenceAnomaly {
    let name = |step: Step| match step {
        Step::Event(id) => interner.name(id).map(str::to_string),
        Step::Start | Step::End | Step::Any => None,
    };
    let (reason, observed, _) = key;
    let after = f
        .afters
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
        .map_or(Step::Start, |(step, _)| *step);
    let mut workers: Vec<(String, u64)> = f.workers.into_iter().collect();
    workers.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    workers.truncate(3);
    SequenceAnomaly {
        reason: REASONS[reason as usize].to_string(),
        template_id: name(observed),
        template: None,
        after_template_id: name(after),
        after_template: None,
        expected_template_ids: f
            .expected
            .iter()
            .map(|e| e.and_then(|id| interner.name(id).map(str::to_string)))
            .collect(),
        incident_sessions: f.sessions,
        incident_total,
        baseline_sessions: base_counts.get(&key).copied().unwrap_or(0),
        baseline_total,
        workers,
    }
}

const REASONS: [&str; 4] = ["unseen_event", "unseen_transition", "premature_end", "rare"];

/// The first unexpected step of a session as a pattern key, with the step before it and what
/// was expected there (`None` in the list: the end of the session); `None` for a normal session.
fn pattern_of(
    model: &NextEventModel,
    events: &[EventId],
) -> Option<(PatternKey, Step, Vec<Option<EventId>>)> {
    let score = model.score(events);
    let first = score.first_unexpected?;
    let reason = match first.reason {
        UnexpectedReason::UnseenEvent => 0,
        UnexpectedReason::UnseenTransition => 1,
        UnexpectedReason::PrematureEnd => 2,
        UnexpectedReason::NotInTopK => 3,
    };
    let observed = match first.observed {
        NextEvent::Event(id) => Step::Event(id),
        NextEvent::EndOfSession => Step::End,
    };
    let after = match first.position.checked_sub(1) {
        Some(at) => Step::Event(events[at]),
        None => Step::Start,
    };
    let expected = first
        .expected
        .iter()
        .take(3)
        .map(|(next, _)| match next {
            NextEvent::Event(id) => Some(*id),
            NextEvent::EndOfSession => None,
        })
        .collect();
    let key_after = if reason == 0 { Step::Any } else { after };
    Some(((reason, observed, key_after), after, expected))
}

/// FNV-1a, 64 bits: a stable hash for the session sample.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
