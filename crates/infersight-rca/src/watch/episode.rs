//! Incidents that open by themselves (step 5 of [`super`]): one incident per episode. The first
//! step with a detection opens it (onset: the earliest onset among what fired, at most an hour
//! back) and runs the RCA with the onset as the incident window's start and the hour before it
//! as baseline; detections of later steps join it; the verdict is refreshed every
//! `refresh_every_ns` while it is open; after `resolve_after_steps` steps without any detection
//! it resolves with a last verdict over the episode (onset to its last detection). Every
//! transition is stored (`IncidentStore::create_watched` / `update_watched`) and handed to the
//! notifier.

use infersight_model::notice::{IncidentNotice, IncidentNotifier, Severity, Transition as Change};
use infersight_model::signal::SignalKind;
use infersight_model::time::format_rfc3339;
use infersight_query::QueryEngine;
use infersight_store::TimeRange;
use serde::Serialize;

use super::predict::{EXHAUSTION_RISK_ALERTNAME, Prediction};
use super::series::{SLI_CHANGE, sli_of_key};
use super::{Detection, MINUTE_NS, WatchSettings};
use crate::incidents::{Incident, IncidentState, StoredNotice, TimelineEntry, WatchRecord};
use crate::{IncidentStore, RcaError, RcaReport, RcaRequest, analyse};

/// The longest look back for an episode's onset (a slow trend's onset may be far back).
const MAX_ONSET_LOOKBACK_NS: i64 = 60 * MINUTE_NS;
/// The RCA's baseline: the hour before the onset.
const BASELINE_NS: i64 = 60 * MINUTE_NS;

/// One incident the watcher opened, as it stands.
#[derive(Debug, Clone, Serialize)]
pub struct EpisodeReport {
    /// The stored incident's id; `None` when the watcher stores nothing (a dry-run replay).
    pub incident_id: Option<String>,
    pub state: IncidentState,
    #[serde(rename = "onset", serialize_with = "ser_ts")]
    pub onset_ns: i64,
    #[serde(rename = "detected_at", serialize_with = "ser_ts")]
    pub detected_ns: i64,
    #[serde(rename = "resolved_at", serialize_with = "ser_opt_ts")]
    pub resolved_ns: Option<i64>,
    /// Each thing that fired, at its first firing.
    pub detections: Vec<Detection>,
    pub timeline: Vec<TimelineEntry>,
    /// The verdict when the incident opened (one line).
    pub first_verdict: String,
    /// `incident` (something fired) or `warning` (a resource is projected to run out).
    pub kind: EpisodeKind,
    /// A warning's projections as of its latest step (empty for incidents).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub predictions: Vec<Prediction>,
    /// The latest verdict.
    pub rca: RcaReport,
    /// The alert identity a resumed incident keeps (alertname, severity, model, worker: what
    /// Alertmanager knows it by); `None` for an episode this watcher opened.
    #[serde(skip)]
    pub pinned: Option<StoredNotice>,
}

impl EpisodeReport {
    fn record(&self) -> WatchRecord {
        WatchRecord {
            state: self.state,
            onset: format_rfc3339(self.onset_ns),
            detected_at: format_rfc3339(self.detected_ns),
            resolved_at: self.resolved_ns.map(format_rfc3339),
            detections: self.detections.iter().map(Detection::line).collect(),
            timeline: self.timeline.clone(),
            notice: Some(StoredNotice::of(&self.notice())),
        }
    }

    /// The open incident `incident` as a previous watcher left it (`serve` restarted): its
    /// times, timeline, verdict and alert identity; what fired is known only as lines, so later
    /// detections join it anew. `None` when it is not an open watched incident.
    pub fn resumed(incident: &Incident) -> Option<EpisodeReport> {
        let watch = incident
            .watch
            .as_ref()
            .filter(|_| incident.is_watched_open())?;
        let now = infersight_model::time::now_ns();
        let at = |text: &str| infersight_model::time::parse_time(text, now).ok();
        let detected_ns = at(&watch.detected_at)?;
        let mut rca = incident.rca.clone();
        rca.incident_id = Some(incident.id.clone());
        Some(EpisodeReport {
            incident_id: Some(incident.id.clone()),
            state: IncidentState::Open,
            onset_ns: at(&watch.onset).unwrap_or(detected_ns),
            detected_ns,
            resolved_ns: None,
            detections: Vec::new(),
            timeline: watch.timeline.clone(),
            first_verdict: rca.verdict.clone(),
            kind: EpisodeKind::Incident,
            predictions: Vec::new(),
            rca,
            pinned: watch.notice.clone(),
        })
    }

    /// The notice receivers get (Alertmanager labels and annotations, the webhook body).
    pub fn notice(&self) -> IncidentNotice {
        if self.kind == EpisodeKind::Warning {
            return warning_notice(self);
        }
        let cause = self
            .rca
            .root_causes
            .first()
            .map(|c| c.dimensions.clone())
            .unwrap_or_default();
        let from_subjects = |key: &str| {
            cause.get(key).cloned().or_else(|| {
                self.detections
                    .iter()
                    .find_map(|d| d.subject.get(key).cloned())
            })
        };
        let paging = self
            .detections
            .iter()
            .any(|d| d.kind == "sli_change" || d.key.ends_with("/page"));
        let summary = match (&self.rca.symptom, cause.is_empty()) {
            (Some(s), false) => format!(
                "{} {:.0} → {:.0} since {} on {cause}",
                s.sli,
                s.baseline,
                s.current,
                format_rfc3339(self.onset_ns)
            ),
            (Some(s), true) => format!(
                "{} {:.0} → {:.0} since {}",
                s.sli,
                s.baseline,
                s.current,
                format_rfc3339(self.onset_ns)
            ),
            (None, _) => self
                .detections
                .first()
                .map_or_else(|| "incident".to_string(), Detection::line),
        };
        let mut description = self.rca.verdict.clone();
        if let Some(first) = self.rca.suggestions.first() {
            description.push_str("\nfirst step: ");
            description.push_str(first);
        }
        let pinned = self.pinned.as_ref();
        IncidentNotice {
            incident_id: self
                .incident_id
                .clone()
                .unwrap_or_else(|| format!("watch-{}", self.onset_ns / 1_000_000_000)),
            alertname: pinned.map_or_else(|| "InferenceIncident".into(), |p| p.alertname.clone()),
            severity: match pinned {
                Some(p) => p.severity(),
                None if paging => Severity::Critical,
                None => Severity::Warning,
            },
            summary,
            description,
            model: pinned.map_or_else(|| from_subjects("model"), |p| p.model.clone()),
            worker: pinned.map_or_else(|| from_subjects("worker"), |p| p.worker.clone()),
            cause,
            onset_ns: self.onset_ns,
            detected_ns: self.detected_ns,
            resolved_ns: self.resolved_ns,
            report_path: self
                .incident_id
                .as_ref()
                .map(|id| format!("/api/v1/incidents/{id}/report")),
            extra_labels: Default::default(),
        }
    }

    fn push(&mut self, at_ns: i64, event: &str, detail: String) {
        self.timeline.push(TimelineEntry {
            at: format_rfc3339(at_ns),
            event: event.into(),
            detail,
        });
    }
}

fn ser_ts<S: serde::Serializer>(ns: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_rfc3339(*ns))
}

fn ser_opt_ts<S: serde::Serializer>(ns: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
    match ns {
        Some(ns) => s.serialize_str(&format_rfc3339(*ns)),
        None => s.serialize_none(),
    }
}

/// What an episode is: an incident (a detection fired) or a warning (a projection says a
/// resource runs out within the horizon). Each kind has its own episodes: a warning open does
/// not hold back an incident, nor the reverse.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EpisodeKind {
    #[default]
    Incident,
    Warning,
}

/// A transition of one incident, as the step made it.
#[derive(Debug, Clone)]
pub struct Transition {
    pub change: Change,
    pub report: EpisodeReport,
}

/// The open episode.
#[derive(Debug, Clone)]
struct Open {
    report: EpisodeReport,
    quiet_steps: u32,
    last_refresh_ns: i64,
    /// The last step with a detection (the episode's end when it resolves).
    last_active_ns: i64,
}

/// Every episode of this watcher.
#[derive(Debug, Clone, Default)]
pub struct Episodes {
    closed: Vec<EpisodeReport>,
    open: Option<Open>,
    kind: EpisodeKind,
    /// The latest step's projections (warnings carry them).
    predictions: Vec<Prediction>,
    /// When the RCA last found nothing behind SLI changes that fired alone (they open no
    /// incident; asked again a minute later while they keep firing).
    unconfirmed_ns: Option<i64>,
}

impl Episodes {
    /// The episodes of warnings (projections), apart from incidents.
    pub fn warnings() -> Episodes {
        Episodes {
            kind: EpisodeKind::Warning,
            ..Episodes::default()
        }
    }

    /// The projections of the step about to advance: a warning opened or open carries them.
    pub fn set_predictions(&mut self, predictions: &[Prediction]) {
        self.predictions = predictions.to_vec();
    }

    pub fn open_onset(&self) -> Option<i64> {
        self.open.as_ref().map(|o| o.report.onset_ns)
    }

    pub fn open_id(&self) -> Option<String> {
        self.open
            .as_ref()
            .and_then(|o| o.report.incident_id.clone())
    }

    pub fn reports(&self) -> Vec<EpisodeReport> {
        let mut out = self.closed.clone();
        out.extend(self.open.as_ref().map(|o| o.report.clone()));
        out
    }

    /// Takes `report` (a stored open incident) as the open episode, as if its last detection
    /// were at `now_ns`: it resolves after the quiet steps unless something fires again. False
    /// (nothing changes) when an episode is already open.
    pub fn resume(&mut self, report: EpisodeReport, now_ns: i64) -> bool {
        if self.open.is_some() {
            return false;
        }
        self.open = Some(Open {
            report,
            quiet_steps: 0,
            last_refresh_ns: now_ns,
            last_active_ns: now_ns.div_euclid(MINUTE_NS) * MINUTE_NS,
        });
        true
    }

    /// Whether `detections` open an incident only once the RCA confirms them: SLI changes that
    /// fire alone. A fleet is judged on hundreds of series every minute, so a moderate shift of
    /// one of them happens by chance several times a day; the RCA (seasonal baseline, SPOT
    /// thresholds, localization) is the second opinion. Watermarks, burn rates, detector
    /// signals and warnings need none.
    fn needs_confirmation(&self, detections: &[Detection]) -> bool {
        self.kind == EpisodeKind::Incident && detections.iter().all(|d| d.kind == SLI_CHANGE)
    }

    /// Opens, updates or resolves the incident after a step at `now_ns` found `detections`.
    pub async fn advance(
        &mut self,
        engine: &QueryEngine,
        settings: &WatchSettings,
        now_ns: i64,
        detections: &[Detection],
        store: Option<&IncidentStore>,
        notifier: Option<&dyn IncidentNotifier>,
    ) -> Result<Vec<Transition>, RcaError> {
        let end_ns = now_ns.div_euclid(MINUTE_NS) * MINUTE_NS;
        let Some(mut open) = self.open.take() else {
            if detections.is_empty() {
                self.unconfirmed_ns = None;
                return Ok(Vec::new());
            }
            let confirm = self
                .needs_confirmation(detections)
                .then_some(Gate::of(settings));
            if confirm.is_some() && self.unconfirmed_ns.is_some_and(|t| now_ns - t < MINUTE_NS) {
                return Ok(Vec::new());
            }
            let shape = (self.kind, self.predictions.as_slice());
            let Some(opened) =
                open_episode(engine, now_ns, end_ns, detections, shape, store, confirm).await?
            else {
                self.unconfirmed_ns = Some(now_ns);
                return Ok(Vec::new());
            };
            self.unconfirmed_ns = None;
            let transition = emit(Change::Opened, &opened.report, notifier);
            self.open = Some(opened);
            return Ok(vec![transition]);
        };
        let mut changed = false;
        for d in detections {
            if !open
                .report
                .detections
                .iter()
                .any(|known| known.key == d.key)
            {
                open.report.push(now_ns, "detection", d.line());
                open.report.detections.push(d.clone());
                changed = true;
            }
        }
        if !self.predictions.is_empty() {
            open.report.predictions.clone_from(&self.predictions);
        }
        if detections.is_empty() {
            open.quiet_steps += 1;
        } else {
            open.quiet_steps = 0;
            open.last_active_ns = end_ns;
        }
        if open.quiet_steps >= settings.resolve_after_steps {
            let until = open.last_active_ns.max(open.report.onset_ns + MINUTE_NS);
            refresh(engine, &mut open.report, until, now_ns).await?;
            open.report.state = IncidentState::Resolved;
            open.report.resolved_ns = Some(now_ns);
            open.report.push(
                now_ns,
                "resolved",
                format!("quiet for {} steps", open.quiet_steps),
            );
            save(store, &open.report).await?;
            let transition = emit(Change::Resolved, &open.report, notifier);
            self.closed.push(open.report);
            return Ok(vec![transition]);
        }
        if now_ns - open.last_refresh_ns >= settings.refresh_every_ns {
            changed |= refresh(engine, &mut open.report, end_ns, now_ns).await?;
            open.last_refresh_ns = now_ns;
        }
        let mut out = Vec::new();
        if changed {
            save(store, &open.report).await?;
            out.push(emit(Change::Updated, &open.report, notifier));
        }
        self.open = Some(open);
        Ok(out)
    }

    /// The open incident's verdict over everything up to `now_ns` (the end of a replay).
    pub async fn refresh_final(
        &mut self,
        engine: &QueryEngine,
        now_ns: i64,
        store: Option<&IncidentStore>,
        notifier: Option<&dyn IncidentNotifier>,
    ) -> Result<Vec<Transition>, RcaError> {
        let Some(open) = self.open.as_mut() else {
            return Ok(Vec::new());
        };
        let end_ns = now_ns.div_euclid(MINUTE_NS) * MINUTE_NS;
        if !refresh(engine, &mut open.report, end_ns, now_ns).await? {
            return Ok(Vec::new());
        }
        open.last_refresh_ns = now_ns;
        save(store, &open.report).await?;
        Ok(vec![emit(Change::Updated, &open.report, notifier)])
    }
}

/// A new episode from the detections of the step at `now_ns`, with its first verdict, stored;
/// none when `confirm` asks the RCA to confirm and it does not (see [`unconfirmed`]: no symptom
/// and nothing to blame, a symptom of another part of the request, or only a shift smaller than
/// the gate's effect with no cause that explains it and no signal behind it).
async fn open_episode(
    engine: &QueryEngine,
    now_ns: i64,
    end_ns: i64,
    detections: &[Detection],
    (kind, predictions): (EpisodeKind, &[Prediction]),
    store: Option<&IncidentStore>,
    confirm: Option<Gate>,
) -> Result<Option<Open>, RcaError> {
    let earliest = detections
        .iter()
        .map(|d| d.onset_ns)
        .min()
        .unwrap_or(end_ns);
    let onset_ns = earliest
        .div_euclid(MINUTE_NS)
        .saturating_mul(MINUTE_NS)
        .max(end_ns - MAX_ONSET_LOOKBACK_NS)
        .min(end_ns - MINUTE_NS);
    let rca = verdict(engine, onset_ns, end_ns).await?;
    if let Some(why) = confirm.and_then(|gate| unconfirmed(&rca, gate, detections)) {
        tracing::info!(
            detections = detections.len(),
            first = %detections[0].line(),
            "watch: {why}; no incident opened"
        );
        return Ok(None);
    }
    let mut report = EpisodeReport {
        incident_id: None,
        state: IncidentState::Open,
        onset_ns,
        detected_ns: now_ns,
        resolved_ns: None,
        detections: Vec::new(),
        timeline: Vec::new(),
        first_verdict: rca.verdict.clone(),
        kind,
        predictions: predictions.to_vec(),
        rca,
        pinned: None,
    };
    report.push(onset_ns, "onset", "earliest onset of what fired".into());
    for d in detections {
        report.push(now_ns, "detected", d.line());
        report.detections.push(d.clone());
    }
    report.push(now_ns, "verdict", report.rca.verdict.clone());
    if let Some(store) = store {
        let (rca, record, store) = (report.rca.clone(), report.record(), store.clone());
        // a watcher over one org's rows (`serve` with authentication) opens that org's incidents
        let orgs = engine.scope().orgs().map(<[String]>::to_vec);
        let incident =
            tokio::task::spawn_blocking(move || store.create_watched_for_orgs(&rca, record, orgs))
                .await
                .map_err(|e| RcaError::Io(format!("incident store task failed: {e}")))??;
        report.incident_id = Some(incident.id.clone());
        report.rca.incident_id = Some(incident.id);
    }
    Ok(Some(Open {
        report,
        quiet_steps: 0,
        last_refresh_ns: now_ns,
        last_active_ns: end_ns,
    }))
}

/// What the RCA must show to confirm a lone SLI change (see [`unconfirmed`]).
#[derive(Debug, Clone, Copy)]
struct Gate {
    /// `watch.min_unexplained_effect`.
    min_effect: f64,
    /// `watch.min_cause_odds_ratio`.
    min_odds_ratio: f64,
    /// `watch.min_unexplained_rise_ms`.
    min_rise_ms: f64,
}

impl Gate {
    fn of(settings: &WatchSettings) -> Gate {
        Gate {
            min_effect: settings.min_unexplained_effect,
            min_odds_ratio: settings.min_cause_odds_ratio,
            min_rise_ms: settings.min_unexplained_rise_ms,
        }
    }
}

/// Why the RCA does not confirm a lone SLI change (`None`: it does):
/// - it finds no symptom and nothing to blame;
/// - or its symptom is another part of the request than any SLI that fired (see [`sli_parts`]:
///   a TPOT shift at the daily peak whose RCA, on its seasonal baseline, finds only a queue-time
///   wobble with a slice behind it, is not confirmed by that slice; the RCA has no TPOT measure
///   of its own, so a TPOT change is confirmed by an e2e symptom, or by a verdict that names a
///   cause from a signal without a request symptom);
/// - or the symptom moved less than `gate.min_effect` (ratio either way) or, as a latency, by
///   fewer than `gate.min_rise_ms` milliseconds, and nothing explains
///   it: no cause but weak ones (see [`weak_cause`]: load-driven queueing, or a slice whose
///   odds of a slow or failed request rose less than `gate.min_odds_ratio` ×), and no signal but the
///   spike itself, a demand shift (load), or what was read off a cause (see [`read_off`]).
fn unconfirmed(rca: &RcaReport, gate: Gate, fired: &[Detection]) -> Option<String> {
    let Some(symptom) = &rca.symptom else {
        return rca
            .root_causes
            .is_empty()
            .then(|| "the RCA finds nothing behind what fired".into());
    };
    let mut fired_slis: Vec<&str> = fired.iter().filter_map(|d| sli_of_key(&d.key)).collect();
    fired_slis.sort_unstable();
    fired_slis.dedup();
    let judged = sli_parts(&symptom.sli);
    if !fired_slis.is_empty() && fired_slis.iter().all(|f| sli_parts(f) & judged == 0) {
        return Some(format!(
            "the RCA's symptom is {}, a part of the request no SLI that fired ({}) measures",
            symptom.sli,
            fired_slis.join(", ")
        ));
    }
    if rca
        .root_causes
        .iter()
        .any(|c| !weak_cause(c, gate.min_odds_ratio))
    {
        return None;
    }
    let explains = |s: &crate::Signal| {
        !matches!(s.kind, SignalKind::LatencySpike | SignalKind::DemandShift)
            && !rca.root_causes.iter().any(|c| read_off(s, c))
    };
    if rca.signals.iter().any(explains) {
        return None;
    }
    let (low, high) = if symptom.current >= symptom.baseline {
        (symptom.baseline, symptom.current)
    } else {
        (symptom.current, symptom.baseline)
    };
    let effect = if low > 0.0 { high / low } else { f64::INFINITY };
    // a latency symptom's values are p99 milliseconds: a part of the request that moved by a
    // few of them is not what users wait for, whatever its ratio
    let rise_ms = latency_sli(&symptom.sli).then_some(high - low);
    let short = rise_ms.is_some_and(|rise| rise < gate.min_rise_ms);
    if effect >= gate.min_effect && !short {
        return None;
    }
    let shift = match rise_ms {
        Some(rise) if short => format!(
            "{} shift {:.0} → {:.0} ms (+{rise:.0} ms, under +{:.0} ms)",
            symptom.sli, symptom.baseline, symptom.current, gate.min_rise_ms
        ),
        _ => format!(
            "{} shift {:.4} → {:.4} (×{effect:.2}, under ×{})",
            symptom.sli, symptom.baseline, symptom.current, gate.min_effect
        ),
    };
    Some(match rca.root_causes.first() {
        None => format!("the RCA finds only an unexplained fleet-wide {shift}"),
        Some(top) => format!(
            "the RCA names only weak causes ({}: {}) behind a {shift}",
            infersight_model::signal::Subject::describe(&top.dimensions),
            match top.odds_ratio() {
                _ if top.is_load_driven() => "load-driven queueing".to_string(),
                Some(ratio) => format!(
                    "odds ratio of its share ×{ratio:.2}, under ×{}",
                    gate.min_odds_ratio
                ),
                None => "weak".to_string(),
            }
        ),
    })
}

/// Whether `signal` was read off `cause` rather than found by a detector of its own: the version
/// regression, slow worker or load-driven queue build-up the RCA states about a cause carry its
/// subject and quote one of its evidence lines (a GPU throttle's slow worker, a queue that builds
/// on every worker of a slice, say what their own detector saw).
fn read_off(signal: &crate::Signal, cause: &crate::RootCause) -> bool {
    matches!(
        signal.kind,
        SignalKind::VersionRegression | SignalKind::SlowWorker | SignalKind::QueueBuildup
    ) && signal.subject == cause.dimensions
        && cause
            .evidence
            .iter()
            .any(|line| !line.is_empty() && signal.detail.contains(line.as_str()))
}

/// Whether a cause does not by itself confirm a lone SLI change: load-driven queueing (an
/// effect of load, not a fault), or a slice whose odds of a slow or failed request rose less
/// than `min_odds_ratio` × (see [`crate::SliceRate::odds_ratio`]). Bursty traffic at a daily
/// peak makes a pool that carries half the fleet about twice as often slow for minutes; a fault
/// of a slice (a slow worker, a regressing version, a tenant's prompts) 15 × and more. A cause
/// known only from a signal (no rate) is not weak.
fn weak_cause(cause: &crate::RootCause, min_odds_ratio: f64) -> bool {
    cause.is_load_driven()
        || cause
            .odds_ratio()
            .is_some_and(|ratio| ratio < min_odds_ratio)
}

/// Whether the RCA states `sli` as a latency (its symptom's values are p99 milliseconds).
fn latency_sli(sli: &str) -> bool {
    infersight_rollup::LatencySli::ALL
        .iter()
        .any(|latency| latency.name() == sli)
}

/// The parts of a request an SLI measures, as bits: queue, prefill, decode, prefix cache, output
/// length, errors, aborts. Two SLIs that share none measure different things (TPOT and queue
/// time); TTFT shares the queue and the prefill, e2e every latency part, the prefix cache's hit
/// rate the prefill. An SLI of no known part shares every part (nothing is ruled out).
fn sli_parts(sli: &str) -> u8 {
    const QUEUE: u8 = 1;
    const PREFILL: u8 = 2;
    const DECODE: u8 = 4;
    const CACHE: u8 = 8;
    const LENGTH: u8 = 16;
    const ERRORS: u8 = 32;
    const ABORTS: u8 = 64;
    match sli {
        "queue" => QUEUE,
        "prefill" => PREFILL,
        "ttft" => QUEUE | PREFILL,
        "decode" | "tpot" | "itl_max" => DECODE,
        "e2e" => QUEUE | PREFILL | DECODE | LENGTH,
        "prefix_cache_hit_rate" | "prefix_cache_miss_rate" => CACHE | PREFILL,
        "output_tokens_per_request" => LENGTH | DECODE | ABORTS,
        "error_rate" => ERRORS,
        "abort_rate" => ABORTS | LENGTH,
        _ => u8::MAX,
    }
}

/// The RCA over `[onset, until)` against the hour before the onset.
async fn verdict(
    engine: &QueryEngine,
    onset_ns: i64,
    until_ns: i64,
) -> Result<RcaReport, RcaError> {
    let request = RcaRequest {
        incident: Some(TimeRange {
            since_ns: Some(onset_ns),
            until_ns: Some(until_ns.max(onset_ns + MINUTE_NS)),
        }),
        baseline: Some(TimeRange {
            since_ns: Some(onset_ns - BASELINE_NS),
            until_ns: Some(onset_ns),
        }),
    };
    Ok(analyse(engine, request).await?)
}

/// Recomputes the verdict over `[onset, until_ns)`; true when its one line changed.
async fn refresh(
    engine: &QueryEngine,
    report: &mut EpisodeReport,
    until_ns: i64,
    now_ns: i64,
) -> Result<bool, RcaError> {
    let mut rca = verdict(engine, report.onset_ns, until_ns).await?;
    rca.incident_id = report.incident_id.clone();
    let changed = rca.verdict != report.rca.verdict;
    if changed {
        report.push(now_ns, "verdict", rca.verdict.clone());
    }
    report.rca = rca;
    Ok(changed)
}

/// Writes the incident as it stands (when there is a store).
async fn save(store: Option<&IncidentStore>, report: &EpisodeReport) -> Result<(), RcaError> {
    let (Some(store), Some(id)) = (store, report.incident_id.clone()) else {
        return Ok(());
    };
    let (rca, record, store) = (report.rca.clone(), report.record(), store.clone());
    tokio::task::spawn_blocking(move || store.update_watched(&id, &rca, &record))
        .await
        .map_err(|e| RcaError::Io(format!("incident store task failed: {e}")))??;
    Ok(())
}

/// Hands the transition to the notifier (which only enqueues) and returns it.
fn emit(
    change: Change,
    report: &EpisodeReport,
    notifier: Option<&dyn IncidentNotifier>,
) -> Transition {
    if let Some(notifier) = notifier {
        notifier.notify(change, &report.notice());
    }
    tracing::info!(
        incident = report.incident_id.as_deref().unwrap_or("-"),
        transition = change.as_str(),
        onset = %format_rfc3339(report.onset_ns),
        verdict = %report.rca.verdict,
        "watch"
    );
    Transition {
        change,
        report: report.clone(),
    }
}

/// The notice of a warning episode: [`EXHAUSTION_RISK_ALERTNAME`], severity warning, the
/// predictions in the summary and description (Alertmanager annotations).
fn warning_notice(report: &EpisodeReport) -> IncidentNotice {
    let first = report.predictions.first();
    let summary = first.map_or_else(
        || {
            report
                .detections
                .first()
                .map_or_else(|| "exhaustion risk".to_string(), Detection::line)
        },
        Prediction::summary,
    );
    let mut description: Vec<String> = report.predictions.iter().map(Prediction::line).collect();
    if report.state == IncidentState::Resolved {
        description.insert(0, "the trend stopped".into());
    }
    description.push(format!("verdict: {}", report.rca.verdict));
    let worker = first.and_then(|p| p.subject.get("worker").cloned());
    let mut extra_labels = std::collections::BTreeMap::new();
    if let Some(p) = first {
        extra_labels.insert("resource".to_string(), p.resource.to_string());
    }
    IncidentNotice {
        incident_id: report
            .incident_id
            .clone()
            .unwrap_or_else(|| format!("risk-{}", report.onset_ns / 1_000_000_000)),
        alertname: EXHAUSTION_RISK_ALERTNAME.into(),
        severity: Severity::Warning,
        summary,
        description: description.join("\n"),
        cause: first.map(|p| p.subject.clone()).unwrap_or_default(),
        model: None,
        worker,
        onset_ns: report.onset_ns,
        detected_ns: report.detected_ns,
        resolved_ns: report.resolved_ns,
        report_path: report
            .incident_id
            .as_ref()
            .map(|id| format!("/api/v1/incidents/{id}/report")),
        extra_labels,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{RootCause, Symptom};
    use infersight_model::signal::Subject;

    fn report(sli: Option<(&str, f64, f64)>, causes: usize) -> RcaReport {
        let symptom = sli.map(|(sli, baseline, current)| Symptom {
            sli: sli.into(),
            baseline,
            current,
            onset: 0,
            z: 5.0,
        });
        let causes = (0..causes)
            .map(|rank| RootCause {
                rank: rank + 1,
                dimensions: Subject::of([("tenant", "globex")]),
                explained_fraction: 0.4,
                score: 90.0,
                evidence: Vec::new(),
                slice_rate: None,
            })
            .collect();
        RcaReport::of(symptom, causes)
    }

    const GATE: Gate = Gate {
        min_effect: 1.5,
        min_odds_ratio: 4.0,
        min_rise_ms: 50.0,
    };

    fn fired(keys: &[&str]) -> Vec<Detection> {
        keys.iter()
            .map(|key| Detection {
                key: (*key).into(),
                kind: SLI_CHANGE.into(),
                subject: Subject::default(),
                onset_ns: 0,
                strength: 4.0,
                detail: String::new(),
            })
            .collect()
    }

    #[test]
    fn a_cause_behind_another_part_of_the_request_confirms_nothing() {
        let tpot = fired(&["sli/tpot/fleet", "sli/tpot/model=llama-3.1-8b-instruct"]);
        // the daily peak: TPOT fired, the RCA's symptom is a queue wobble with a slice behind it
        let why = unconfirmed(&report(Some(("queue", 42.0, 50.0)), 1), GATE, &tpot);
        assert!(why.is_some_and(|w| w.contains("queue") && w.contains("tpot")));
        // the same slice behind a TPOT or e2e symptom confirms it
        assert_eq!(
            unconfirmed(&report(Some(("tpot", 40.0, 44.0)), 1), GATE, &tpot),
            None
        );
        assert_eq!(
            unconfirmed(&report(Some(("e2e", 900.0, 950.0)), 1), GATE, &tpot),
            None
        );
        // TTFT covers the queue; one related SLI among those that fired is enough
        let ttft = fired(&["sli/ttft/fleet"]);
        assert_eq!(
            unconfirmed(&report(Some(("queue", 42.0, 50.0)), 1), GATE, &ttft),
            None
        );
        let both = fired(&["sli/tpot/fleet", "sli/queue/fleet"]);
        assert_eq!(
            unconfirmed(&report(Some(("queue", 42.0, 50.0)), 1), GATE, &both),
            None
        );
        // an unrelated symptom is no confirmation even when it is large
        assert!(unconfirmed(&report(Some(("error_rate", 0.01, 0.2)), 0), GATE, &tpot).is_some());
    }

    #[test]
    fn an_unexplained_fleet_wide_shift_confirms_only_when_large() {
        let e2e = fired(&["sli/e2e/fleet"]);
        assert!(unconfirmed(&report(Some(("e2e", 1000.0, 1150.0)), 0), GATE, &e2e).is_some());
        assert_eq!(
            unconfirmed(&report(Some(("e2e", 1000.0, 2000.0)), 0), GATE, &e2e),
            None
        );
        assert!(unconfirmed(&report(None, 0), GATE, &e2e).is_some());
        // a part of the request 1.6 × slower but by 27 ms (queue p99 45 → 72 ms) is no page
        let queue = fired(&["sli/queue/model=llama-3.1-8b-instruct"]);
        let why = unconfirmed(&report(Some(("queue", 45.0, 72.0)), 0), GATE, &queue);
        assert!(why.is_some_and(|w| w.contains("+27 ms")));
        assert_eq!(
            unconfirmed(&report(Some(("queue", 45.0, 145.0)), 0), GATE, &queue),
            None
        );
        // rates have no milliseconds: ten times the errors confirms
        let errors = fired(&["sli/error_rate/fleet"]);
        assert_eq!(
            unconfirmed(&report(Some(("error_rate", 0.001, 0.01)), 0), GATE, &errors),
            None
        );
        // a symptom of an SLI no part is known of rules nothing out
        assert_eq!(
            unconfirmed(&report(Some(("gpu_seconds", 1.0, 1.1)), 1), GATE, &e2e),
            None
        );
    }

    /// The report of a TTFT change behind `slice` (share of its requests over the reference p95
    /// `rate`, baseline → incident), with the signals the RCA reads off such a cause.
    fn slice_report(ttft: (f64, f64), rate: (f64, f64), evidence: &str) -> RcaReport {
        let dimensions = Subject::of([("model_version", "r2")]);
        let mut rca = report(Some(("ttft", ttft.0, ttft.1)), 0);
        rca.root_causes.push(RootCause {
            rank: 1,
            dimensions: dimensions.clone(),
            explained_fraction: 0.96,
            score: 35.0,
            evidence: vec![evidence.into()],
            slice_rate: Some(crate::SliceRate {
                baseline: rate.0,
                incident: rate.1,
            }),
        });
        // what the RCA reads off such a cause: its version regression quotes its evidence
        let regressed = format!("model_version=r2 regressed: {evidence}");
        rca.signals.push(signal(
            SignalKind::VersionRegression,
            dimensions.clone(),
            &regressed,
        ));
        rca.signals.push(signal(
            SignalKind::LatencySpike,
            dimensions,
            "fleet p99 ttft",
        ));
        rca
    }

    fn signal(kind: SignalKind, subject: Subject, detail: &str) -> crate::Signal {
        crate::Signal {
            kind,
            subject,
            onset: 0,
            strength: 5.0,
            detail: detail.into(),
        }
    }

    #[test]
    fn a_slice_only_somewhat_more_often_slow_is_weak() {
        let queue = fired(&["sli/queue/fleet"]);
        let over = "ttft_ms over their model's baseline p95";
        // the Mooncake peak: half the fleet 1.9 × as often over the p95, p99 × 1.2
        let burst = slice_report((1466.0, 1755.0), (0.043, 0.083), over);
        let why = unconfirmed(&burst, GATE, &queue).expect("a weak cause confirms nothing");
        assert!(
            why.contains("model_version=r2") && why.contains("×2.01"),
            "{why}"
        );
        // a slow worker: 8.6 × as often over it confirms even a p99 that moved 8 %
        let slow = slice_report((159.0, 172.0), (0.055, 0.474), over);
        assert_eq!(unconfirmed(&slow, GATE, &queue), None);
        // a weak cause behind a large shift confirms it
        let large = slice_report((1466.0, 2900.0), (0.043, 0.083), over);
        assert_eq!(unconfirmed(&large, GATE, &queue), None);
        // so does an independent signal, about the slice or anything else
        let r2 = Subject::of([("model_version", "r2")]);
        let independent = [
            (
                SignalKind::GpuMemoryLeak,
                r2.clone(),
                "gpu memory +40 MB/min",
            ),
            // a detector's own finding about the same subject, not a quote of the cause
            (
                SignalKind::QueueBuildup,
                r2.clone(),
                "every worker of the slice (worker-01, worker-03) builds a queue",
            ),
            // what was read off another slice than the weak cause
            (
                SignalKind::VersionRegression,
                Subject::of([("model_version", "r3")]),
                "model_version=r3 regressed: ttft_ms over their model's baseline p95",
            ),
        ];
        for (kind, subject, detail) in independent {
            let mut with = burst.clone();
            with.signals.push(signal(kind, subject, detail));
            assert_eq!(unconfirmed(&with, GATE, &queue), None, "{detail}");
        }
        // load-driven queueing is weak whatever its share did
        let load = slice_report(
            (1130.0, 1380.0),
            (0.047, 0.4),
            "load-driven queueing: queue p90 399 ms → 608 ms",
        );
        assert!(unconfirmed(&load, GATE, &queue).is_some_and(|w| w.contains("load-driven")));
        // a cause known only from a signal (no share) is not weak
        let mut known = burst.clone();
        known.root_causes[0].slice_rate = None;
        assert_eq!(unconfirmed(&known, GATE, &queue), None);
        // a slice new to the fleet, from no events to some, is not weak
        let new = slice_report((1466.0, 1755.0), (0.0, 0.02), over);
        assert_eq!(unconfirmed(&new, GATE, &queue), None);
        // an odds ratio of 1 turns the share rule off
        let off = Gate {
            min_odds_ratio: 1.0,
            ..GATE
        };
        assert_eq!(unconfirmed(&burst, off, &queue), None);
    }

    #[test]
    fn every_watched_sli_has_its_parts() {
        for sli in [
            "queue",
            "prefill",
            "ttft",
            "decode",
            "tpot",
            "itl_max",
            "e2e",
            "prefix_cache_hit_rate",
            "prefix_cache_miss_rate",
            "output_tokens_per_request",
            "error_rate",
            "abort_rate",
        ] {
            assert_ne!(sli_parts(sli), u8::MAX, "{sli}");
            assert_ne!(sli_parts(sli), 0, "{sli}");
        }
        assert_eq!(sli_parts("tpot") & sli_parts("queue"), 0);
        assert_ne!(sli_parts("ttft") & sli_parts("queue"), 0);
    }
}
