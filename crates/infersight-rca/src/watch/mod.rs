//! The watcher: "always on" root cause. `serve` calls [`Watcher::step`] every
//! [`WatchSettings::step_ns`] with the wall clock; `infersight watch` calls it with a simulated
//! clock over stored data ([`replay`]). Both are this one code path: a step reads only data
//! before its `now` (whole minutes of rollups, metric samples and SQL windows ending at `now`),
//! so a replay opens the incidents the live watcher would have opened.
//!
//! One step, in order:
//! 1. [`series`]: the fleet's and each model's per-minute SLIs from rollups (kept between steps,
//!    only new minutes and the last few, which late data may still fill, are merged again), each
//!    judged by `infersight_analytics::detect::detect_change` with the RCA's seasonal baseline.
//! 2. [`watermarks`]: resource watermarks of the last minutes' metric samples per worker (one
//!    bounded SQL query): GPU memory used / total, KV-cache usage, preemptions, queue depth.
//!    [`predict`]: time-to-exhaustion projections per worker (GPU memory, KV-cache usage, a
//!    new request's queue wait against the gateway timeout) from the same metric samples; one
//!    whose interval ends inside the horizon opens a *warning* episode, apart from incidents
//!    ([`EpisodeKind`]), carrying the prediction (what, which worker, ETA with its interval).
//! 3. The SLO burn-rate rules (`infersight_analytics::slo`, the same rules as SLO alerting).
//! 4. [`behaviour`]: every few steps, the RCA's resource and behaviour detectors
//!    (`crate::collect_signals`: leak, queue build-up, KV pressure, cache pollution, resonance,
//!    trace-context loss, flow-control stall, truncation surge, prompt drift, error burst) over a
//!    short sliding window against the half hour before it.
//! 5. [`episode`]: what fired becomes one incident per episode: the first detection opens it and
//!    runs the RCA (`crate::analyse`) with the episode's onset as the incident window and the
//!    hour before as baseline; later detections join it; the verdict is refreshed every
//!    [`WatchSettings::refresh_every_ns`]; it resolves after
//!    [`WatchSettings::resolve_after_steps`] quiet steps. Each transition is stored
//!    (`crate::IncidentStore`, when given) and handed to the notifier.
//!
//! Decision rules (users act on them):
//! - Without an open incident a series' baseline is everything in the history before the last
//!   [`WatchSettings::current_minutes`]; while one is open, every series is judged against the
//!   time before the incident's onset (so a fault that persists keeps firing, and thresholds do
//!   not learn the fault).
//! - A series fires on a confirmed level shift over [`WatchSettings::confirm_minutes`] minutes,
//!   or on one minute beyond [`WatchSettings::strong_z`] robust σ.
//! - SLI changes that fire alone open an incident only when the RCA confirms them (a symptom
//!   or a cause); while it finds nothing they are asked about again once a minute. Watermarks,
//!   burn rates and detector signals open at once.

pub mod behaviour;
pub mod episode;
pub mod predict;
pub mod series;
pub mod watermarks;

use std::sync::Arc;

use infersight_analytics::slo::{Slo, default_rules};
use infersight_model::notice::IncidentNotifier;
use infersight_model::signal::Subject;
use infersight_query::QueryEngine;
use infersight_rollup::Rollup;
use infersight_store::TimeRange;
use serde::Serialize;

use crate::{IncidentStore, RcaError};
pub use episode::{EpisodeKind, EpisodeReport, Transition};
pub use predict::{EXHAUSTION_RISK_ALERTNAME, PredictSettings, Prediction};
pub use watermarks::Watermarks;

pub(crate) const MINUTE_NS: i64 = 60_000_000_000;

/// How the watcher runs; `Default` gives the documented values, the config overrides them.
#[derive(Debug, Clone)]
pub struct WatchSettings {
    /// Evaluation step (30 s).
    pub step_ns: i64,
    /// SLI history kept for the baseline (49 h: two days make the baseline seasonal).
    pub history_ns: i64,
    /// Minutes at the end of the history judged against the rest when no incident is open (5).
    pub current_minutes: usize,
    /// Minutes a level shift must hold to fire (2).
    pub confirm_minutes: usize,
    /// One minute this many robust σ beyond the baseline fires at once (12).
    pub strong_z: f64,
    /// SPOT risk of the series thresholds (1e-5, the RCA's).
    pub risk_q: f64,
    /// A model's series are judged when its reference carries this many requests per minute (20).
    pub min_requests_per_minute: f64,
    /// Quiet steps before an incident resolves (10: five minutes at the default step).
    pub resolve_after_steps: u32,
    /// A lone SLI change whose RCA blames no slice and finds no signal (a fleet-wide shift
    /// nothing explains) opens an incident only when the symptom moved at least this much
    /// (ratio of incident to baseline value, either way; 1.5). Bursty real traffic moves a
    /// fleet's p99 by 15 % for minutes; a shift that large unexplained is worth a page.
    pub min_unexplained_effect: f64,
    /// …and, for a latency symptom, by at least this many milliseconds of its p99 (50): a queue
    /// whose p99 went 45 → 70 ms at the daily peak moved ×1.5 but nobody waited for it.
    pub min_unexplained_rise_ms: f64,
    /// A lone SLI change whose RCA blames only slices whose odds of a slow (or failed)
    /// request rose less than this many times (`RootCause::odds_ratio`), or load-driven
    /// queueing, is judged as if nothing were blamed: it opens an incident only past
    /// `min_unexplained_effect` or with a signal behind it (4; 1 leaves only the load rule).
    /// Bursty traffic makes a pool that carries half the fleet about twice as often slow for
    /// minutes; a fault of a slice, 15 times and more.
    pub min_cause_odds_ratio: f64,
    /// The verdict of an open incident is recomputed this often (5 min).
    pub refresh_every_ns: i64,
    /// The behaviour detectors run this often (2 min) over this window (5 min) against the
    /// baseline before it (30 min).
    pub behaviour_every_ns: i64,
    pub behaviour_window_ns: i64,
    pub behaviour_baseline_ns: i64,
    pub watermarks: Watermarks,
    /// Time-to-exhaustion projections and the warning horizon.
    pub predict: PredictSettings,
    /// SLOs whose burn-rate rules open incidents (the `[[slo]]` of the config).
    pub slos: Vec<Slo>,
}

impl Default for WatchSettings {
    fn default() -> Self {
        WatchSettings {
            step_ns: 30 * 1_000_000_000,
            history_ns: 49 * 60 * MINUTE_NS,
            current_minutes: 5,
            confirm_minutes: 2,
            strong_z: 12.0,
            risk_q: 1e-5,
            min_requests_per_minute: 20.0,
            resolve_after_steps: 10,
            min_unexplained_effect: 1.5,
            min_cause_odds_ratio: 4.0,
            min_unexplained_rise_ms: 50.0,
            refresh_every_ns: 5 * MINUTE_NS,
            behaviour_every_ns: 2 * MINUTE_NS,
            behaviour_window_ns: 5 * MINUTE_NS,
            behaviour_baseline_ns: 30 * MINUTE_NS,
            watermarks: Watermarks::default(),
            predict: PredictSettings::default(),
            slos: Vec::new(),
        }
    }
}

impl WatchSettings {
    /// Every problem with the settings, one line each (empty: valid).
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.step_ns < 1_000_000_000 {
            out.push("watch.step must be at least 1s".into());
        }
        if self.history_ns < 30 * MINUTE_NS {
            out.push("watch.history must be at least 30m".into());
        }
        if self.current_minutes < self.confirm_minutes.max(1) {
            out.push("watch.current_minutes must be at least watch.confirm_minutes".into());
        }
        if self.confirm_minutes == 0 {
            out.push("watch.confirm_minutes must be at least 1".into());
        }
        if !(self.strong_z.is_finite() && self.strong_z > 0.0) {
            out.push("watch.strong_z must be positive".into());
        }
        if !(self.risk_q > 0.0 && self.risk_q < 0.5) {
            out.push("watch.risk_q must be in (0, 0.5)".into());
        }
        if self.resolve_after_steps == 0 {
            out.push("watch.resolve_after_steps must be at least 1".into());
        }
        if !(self.min_unexplained_effect.is_finite() && self.min_unexplained_effect >= 1.0) {
            out.push(
                "watch.min_unexplained_effect must be at least 1 (1, with watch.min_unexplained_rise_ms 0, turns this gate off)".into(),
            );
        }
        if !(self.min_unexplained_rise_ms.is_finite() && self.min_unexplained_rise_ms >= 0.0) {
            out.push("watch.min_unexplained_rise_ms must be at least 0 (0 turns it off)".into());
        }
        if !(self.min_cause_odds_ratio.is_finite() && self.min_cause_odds_ratio >= 1.0) {
            out.push("watch.min_cause_odds_ratio must be at least 1".into());
        }
        for (name, ns) in [
            ("refresh_every", self.refresh_every_ns),
            ("behaviour_every", self.behaviour_every_ns),
            ("behaviour_window", self.behaviour_window_ns),
            ("behaviour_baseline", self.behaviour_baseline_ns),
        ] {
            if ns < MINUTE_NS {
                out.push(format!("watch.{name} must be at least 1m"));
            }
        }
        out.extend(self.watermarks.problems());
        out.extend(self.predict.problems());
        out
    }
}

/// One thing that fired at a step: a series, a watermark, an SLO rule or a behaviour signal.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Detection {
    /// Identity across steps (`sli/ttft/fleet`, `watermark/kv_cache_usage_ratio/worker-06`, …):
    /// an open incident lists each once.
    pub key: String,
    /// `sli_change`, `watermark`, `slo_burn`, or a signal kind (`gpu_memory_leak`, …).
    pub kind: String,
    pub subject: Subject,
    /// When the excursion began, Unix ns.
    #[serde(rename = "onset", serialize_with = "ser_ts")]
    pub onset_ns: i64,
    /// How far beyond the threshold (robust σ for series; value / threshold for watermarks).
    pub strength: f64,
    pub detail: String,
}

impl Detection {
    /// `kind subject: detail`, one line.
    pub fn line(&self) -> String {
        if self.subject.is_empty() {
            format!("{} (fleet): {}", self.kind, self.detail)
        } else {
            format!("{} {}: {}", self.kind, self.subject, self.detail)
        }
    }
}

fn ser_ts<S: serde::Serializer>(ns: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&infersight_model::time::format_rfc3339(*ns))
}

/// The watcher's state between steps.
pub struct Watcher {
    settings: WatchSettings,
    series: series::SeriesCache,
    behaviour: behaviour::BehaviourCache,
    episodes: episode::Episodes,
    /// Warning episodes (projections), apart from incidents.
    warnings: episode::Episodes,
    predict: predict::PredictCache,
    last_predictions: Vec<Prediction>,
    incidents: Option<IncidentStore>,
    notifier: Option<Arc<dyn IncidentNotifier>>,
    /// The whole minute the last detections were computed up to, and they: every detector
    /// reads whole minutes, so a step inside the same minute reuses them.
    last_end_ns: Option<i64>,
    last_detections: Vec<Detection>,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher")
            .field("settings", &self.settings)
            .field("open", &self.episodes.open_id())
            .finish_non_exhaustive()
    }
}

/// What one step saw and did.
#[derive(Debug, Clone, Default)]
pub struct StepOutcome {
    pub detections: Vec<Detection>,
    /// Resources projected to run out within the horizon.
    pub predictions: Vec<Prediction>,
    /// Of incidents, then of warnings.
    pub transitions: Vec<Transition>,
}

impl Watcher {
    /// A watcher; `incidents`: where opened incidents are stored (`None`: kept in memory only,
    /// as a dry-run replay does); `notifier`: where transitions go.
    pub fn new(
        settings: WatchSettings,
        incidents: Option<IncidentStore>,
        notifier: Option<Arc<dyn IncidentNotifier>>,
    ) -> Result<Watcher, RcaError> {
        let problems = settings.problems();
        if !problems.is_empty() {
            return Err(RcaError::BadRequest(problems.join("; ")));
        }
        Ok(Watcher {
            settings,
            series: series::SeriesCache::default(),
            behaviour: behaviour::BehaviourCache::default(),
            episodes: episode::Episodes::default(),
            warnings: episode::Episodes::warnings(),
            predict: predict::PredictCache::default(),
            last_predictions: Vec::new(),
            incidents,
            notifier,
            last_end_ns: None,
            last_detections: Vec::new(),
        })
    }

    pub fn settings(&self) -> &WatchSettings {
        &self.settings
    }

    /// Takes over `incident`, an open incident a previous watcher stored (`serve` restarted):
    /// later steps update it and resolve it as if this watcher had opened it (its alert keeps
    /// the identity it was sent with). A warning (its alert an [`EXHAUSTION_RISK_ALERTNAME`])
    /// takes the warnings' place, anything else the incidents'. False when it is not an open
    /// watched incident or its place is taken.
    pub fn resume(&mut self, incident: &crate::Incident, now_ns: i64) -> bool {
        let Some(report) = EpisodeReport::resumed(incident) else {
            return false;
        };
        let warning = report
            .pinned
            .as_ref()
            .is_some_and(|n| n.alertname == EXHAUSTION_RISK_ALERTNAME);
        if warning {
            self.warnings.resume(report, now_ns)
        } else {
            self.episodes.resume(report, now_ns)
        }
    }

    /// Every incident and warning this watcher opened, by detection time, as they stand now.
    pub fn reports(&self) -> Vec<EpisodeReport> {
        let mut out = self.episodes.reports();
        out.extend(self.warnings.reports());
        out.sort_by_key(|r| r.detected_ns);
        out
    }

    /// One evaluation at `now_ns` (the wall clock live, the simulated clock in a replay): reads
    /// only data before `now_ns`, then opens, updates or resolves the incident.
    pub async fn step(
        &mut self,
        engine: &QueryEngine,
        now_ns: i64,
    ) -> Result<StepOutcome, RcaError> {
        let end_ns = now_ns.div_euclid(MINUTE_NS) * MINUTE_NS;
        let detections = if self.last_end_ns == Some(end_ns) {
            self.last_detections.clone()
        } else {
            let detections = self.detect(engine, now_ns, end_ns).await?;
            self.last_end_ns = Some(end_ns);
            self.last_detections = detections.clone();
            detections
        };
        let clock = std::time::Instant::now();
        let mut transitions = self
            .episodes
            .advance(
                engine,
                &self.settings,
                now_ns,
                &detections,
                self.incidents.as_ref(),
                self.notifier.as_deref(),
            )
            .await?;
        transitions.extend(self.advance_warnings(engine, now_ns).await?);
        if !transitions.is_empty() {
            tracing::debug!(
                ms = clock.elapsed().as_secs_f64() * 1e3,
                "watch: incident transitions"
            );
        }
        Ok(StepOutcome {
            detections,
            predictions: self.last_predictions.clone(),
            transitions,
        })
    }

    /// Opens, updates or resolves the warning episode from the step's predictions.
    async fn advance_warnings(
        &mut self,
        engine: &QueryEngine,
        now_ns: i64,
    ) -> Result<Vec<Transition>, RcaError> {
        let horizon_ns = self.settings.predict.horizon_ns;
        let risks: Vec<Detection> = self
            .last_predictions
            .iter()
            .map(|p| p.detection(horizon_ns))
            .collect();
        self.warnings.set_predictions(&self.last_predictions);
        self.warnings
            .advance(
                engine,
                &self.settings,
                now_ns,
                &risks,
                self.incidents.as_ref(),
                self.notifier.as_deref(),
            )
            .await
    }

    /// Everything that fires at `now_ns` (whole minutes up to `end_ns`).
    async fn detect(
        &mut self,
        engine: &QueryEngine,
        now_ns: i64,
        end_ns: i64,
    ) -> Result<Vec<Detection>, RcaError> {
        let frozen_onset = self.episodes.open_onset();
        let lap = |clock: &mut std::time::Instant| {
            let ms = clock.elapsed().as_secs_f64() * 1e3;
            *clock = std::time::Instant::now();
            ms
        };
        let mut clock = std::time::Instant::now();
        let mut detections = self.rollup_detections(engine, now_ns, frozen_onset).await?;
        let series_ms = lap(&mut clock);
        detections.extend(
            watermarks::detect(engine, &self.settings.watermarks, end_ns, &self.settings).await?,
        );
        let watermarks_ms = lap(&mut clock);
        self.last_predictions = self
            .predict
            .evaluate(engine, &self.settings, end_ns)
            .await?;
        let predict_ms = lap(&mut clock);
        if let Some(found) = self
            .behaviour
            .evaluate(engine, &self.settings, end_ns, frozen_onset)
            .await?
        {
            detections.extend(found);
        }
        tracing::debug!(
            series_ms,
            watermarks_ms,
            predict_ms,
            behaviour_ms = lap(&mut clock),
            found = detections.len(),
            "watch: detectors"
        );
        Ok(detections)
    }

    /// Series and SLO detections (blocking: rollups; on a blocking thread).
    async fn rollup_detections(
        &mut self,
        engine: &QueryEngine,
        now_ns: i64,
        frozen_onset: Option<i64>,
    ) -> Result<Vec<Detection>, RcaError> {
        let store = Arc::clone(engine.store());
        let settings = self.settings.clone();
        let mut cache = std::mem::take(&mut self.series);
        let (cache, result) = tokio::task::spawn_blocking(move || {
            let result = cache
                .update(store.as_ref(), &settings, now_ns, frozen_onset.is_some())
                .map(|()| {
                    let mut found = cache.detect(&settings, now_ns, frozen_onset);
                    found.extend(slo_detections(store.as_ref(), &settings.slos, now_ns));
                    found
                });
            (cache, result)
        })
        .await
        .map_err(|e| RcaError::Io(format!("watch task failed: {e}")))?;
        self.series = cache;
        result.map_err(|e| RcaError::Io(format!("watch: reading rollups: {e}")))
    }

    /// Closes the open incident at `now_ns` with a last verdict (the end of a replay); live,
    /// incidents resolve by themselves.
    pub async fn finish(
        &mut self,
        engine: &QueryEngine,
        now_ns: i64,
    ) -> Result<Vec<Transition>, RcaError> {
        let mut out = Vec::new();
        for episodes in [&mut self.episodes, &mut self.warnings] {
            out.extend(
                episodes
                    .refresh_final(
                        engine,
                        now_ns,
                        self.incidents.as_ref(),
                        self.notifier.as_deref(),
                    )
                    .await?,
            );
        }
        Ok(out)
    }
}

/// The SLO rules firing at `now_ns`, one detection per (SLO, severity); a store without
/// rollups or a failed read gives none (logged).
fn slo_detections(
    store: &dyn infersight_store::StorageBackend,
    slos: &[Slo],
    now_ns: i64,
) -> Vec<Detection> {
    if slos.is_empty() {
        return Vec::new();
    }
    let rules: Vec<_> = slos.iter().map(|s| default_rules(s.window_ns)).collect();
    let longest = slos
        .iter()
        .zip(&rules)
        .flat_map(|(s, r)| std::iter::once(s.window_ns).chain(r.iter().map(|r| r.long_ns)))
        .max()
        .unwrap_or(0);
    let parts: Vec<Arc<Rollup>> = match store.rollups(TimeRange {
        since_ns: Some(now_ns - longest),
        until_ns: Some(now_ns),
    }) {
        Ok(parts) => parts,
        Err(error) => {
            tracing::warn!(%error, "watch: SLO rules skipped");
            return Vec::new();
        }
    };
    let refs: Vec<&Rollup> = parts.iter().map(Arc::as_ref).collect();
    let mut out = Vec::new();
    for (slo, rules) in slos.iter().zip(&rules) {
        let status = infersight_analytics::slo::evaluate(&refs, slo, rules, now_ns);
        for rule in status.rules.iter().filter(|r| r.firing) {
            let key = format!("slo/{}/{}", slo.name, rule.rule.severity);
            if out.iter().any(|d: &Detection| d.key == key) {
                continue;
            }
            let burn = rule.short.burn_rate.unwrap_or(0.0);
            out.push(Detection {
                key,
                kind: "slo_burn".into(),
                subject: Subject::of(slo.filters.iter().cloned()),
                onset_ns: now_ns - rule.rule.short_ns,
                strength: burn / rule.rule.burn_rate,
                detail: format!(
                    "SLO {} burns its budget ×{burn:.1} (rule: ×{} over {} min, {})",
                    slo.name,
                    rule.rule.burn_rate,
                    rule.rule.long_ns / MINUTE_NS,
                    rule.rule.severity
                ),
            });
        }
    }
    out
}

/// Runs the watcher over stored data from `since_ns` to `until_ns`, one step at a time as if
/// live (each step sees only data before its clock), then gives the open incident its last
/// verdict. Returns every incident it opened, oldest first.
pub async fn replay(
    engine: &QueryEngine,
    watcher: &mut Watcher,
    since_ns: i64,
    until_ns: i64,
) -> Result<Vec<EpisodeReport>, RcaError> {
    if until_ns <= since_ns {
        return Err(RcaError::BadRequest(
            "the replay's --until must be after --since".into(),
        ));
    }
    let step = watcher.settings.step_ns;
    let mut now = since_ns;
    while now <= until_ns {
        watcher.step(engine, now).await?;
        now += step;
    }
    watcher.finish(engine, until_ns).await?;
    Ok(watcher.reports())
}
