//! Assembles the report: an incident's RCA verdict, the runbooks and past incidents retrieved for
//! its evidence, advice drawn from them (with the retrieval score), the chart data read from the
//! store, and the optional LLM narrative. Rendering lives in `render`.

use std::path::{Path, PathBuf};

use infersight_rca::RcaReport;
use serde::{Deserialize, Serialize};

pub use crate::document::{Advice, Report};
use crate::knowledge::KnowledgeHit;
use crate::narrative::LlmConfig;

/// The `[report]` configuration section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReportConfig {
    /// Extra runbooks (Markdown, same format as `knowledge/`) indexed beside the built-in ones;
    /// a file with the id of a built-in runbook replaces it. Empty: built-in only.
    pub knowledge_dir: PathBuf,
    /// How many runbooks and past incidents the report shows.
    pub retrieval_limit: usize,
    /// Optional OpenAI-compatible endpoint for a narrative.
    pub llm: LlmConfig,
}

impl Default for ReportConfig {
    fn default() -> Self {
        Self {
            knowledge_dir: PathBuf::new(),
            retrieval_limit: 5,
            llm: LlmConfig::default(),
        }
    }
}

impl ReportConfig {
    /// The user's runbook directory; `None` when not configured (built-in runbooks only).
    pub fn extra_knowledge_dir(&self) -> Option<&Path> {
        (!self.knowledge_dir.as_os_str().is_empty()).then_some(self.knowledge_dir.as_path())
    }
}

/// The past incidents a report on `incident` may retrieve: every confirmed incident except
/// `incident` itself (a confirmed verdict must not cite itself as its own precedent). Reads
/// the incident files: blocking.
pub fn past_incidents(
    incidents: &infersight_rca::IncidentStore,
    incident: &infersight_rca::Incident,
) -> Result<Vec<infersight_rca::Incident>, crate::ReportError> {
    Ok(incidents
        .confirmed()?
        .into_iter()
        .filter(|past| past.id != incident.id)
        // an org's report cites only what its own orgs' incidents taught
        .filter(|past| past.visible_to_orgs(incident.orgs.as_deref()))
        .collect())
}

/// The report of a stored incident, as `infersight report` builds it: the knowledge base holds
/// the built-in runbooks, the configured extra runbooks and [`past_incidents`]. Reading the
/// incidents and indexing the knowledge base run on a blocking thread.
pub async fn build_for_incident(
    engine: &infersight_query::QueryEngine,
    incidents: &infersight_rca::IncidentStore,
    incident: &infersight_rca::Incident,
    config: &ReportConfig,
) -> Result<Report, crate::ReportError> {
    let (incidents_for_load, incident_for_load) = (incidents.clone(), incident.clone());
    let extra = config.extra_knowledge_dir().map(Path::to_path_buf);
    let knowledge_base = tokio::task::spawn_blocking(move || {
        let past = past_incidents(&incidents_for_load, &incident_for_load)?;
        crate::knowledge::KnowledgeBase::load(extra.as_deref(), &past)
    })
    .await
    .map_err(|e| crate::ReportError::Io(format!("knowledge base task: {e}")))??;
    Report::build(engine, incident, &knowledge_base, config).await
}

/// How many fixes a runbook other than the best one may contribute.
const FIXES_PER_SECONDARY_HIT: usize = 2;
/// A secondary hit contributes only when its score is at least this share of the best one.
const SECONDARY_SCORE_SHARE: f32 = 0.5;

impl Report {
    /// Builds the report of one stored incident: retrieval, advice, chart data, and the narrative
    /// when an LLM endpoint is configured (the report is complete without it).
    pub async fn build(
        engine: &infersight_query::QueryEngine,
        incident: &infersight_rca::Incident,
        knowledge_base: &crate::knowledge::KnowledgeBase,
        config: &ReportConfig,
    ) -> Result<Report, crate::ReportError> {
        let rca = incident.rca.clone();
        let knowledge = knowledge_base.retrieve(&rca, config.retrieval_limit);
        let (suggestions, checklist) = advice(&rca, &knowledge);
        let charts = crate::data::collect(engine, &rca).await?;
        let lead = match crate::lead::Lead::build(engine, &rca, &knowledge).await {
            Ok(lead) => lead,
            Err(error) => {
                // the implicated workers are left out; the rest does not read the store
                tracing::warn!(%error, "the lead's workers were not read");
                crate::lead::Lead::of(&rca, &knowledge, &[])
            }
        };
        let mut report = Report {
            incident_id: incident.id.clone(),
            generated_at: infersight_model::time::format_rfc3339(infersight_model::time::now_ns()),
            rca,
            knowledge,
            suggestions,
            checklist,
            charts,
            narrative: None,
            narrative_note: None,
            incident: crate::document::IncidentSection::of(incident),
            lead,
        };
        // The narrative call is blocking network i/o with its own timeout.
        let llm = config.llm.clone();
        let evidence = report.clone();
        let outcome =
            tokio::task::spawn_blocking(move || crate::narrative::narrate(&llm, &evidence))
                .await
                .map_err(|e| crate::ReportError::Io(format!("narrative task: {e}")))?;
        report.narrative = outcome.narrative;
        report.narrative_note = outcome.note;
        Ok(report)
    }
}

/// Suggestions and checklist: the engine's own (specific to the localized slice) first, then the
/// best runbook's or past incident's in full, then the first few of other hits that score close
/// to it. Every item says where it came from and with what retrieval score; duplicates are
/// dropped.
pub fn advice(rca: &RcaReport, knowledge: &[KnowledgeHit]) -> (Vec<Advice>, Vec<Advice>) {
    let mut suggestions = Vec::new();
    let mut checklist = Vec::new();
    let push = |list: &mut Vec<Advice>, text: &str, source: &str, score: f32| {
        let text = text.trim();
        if !text.is_empty() && !list.iter().any(|a: &Advice| a.text == text) {
            list.push(Advice {
                text: text.to_string(),
                source: source.to_string(),
                score,
            });
        }
    };
    for text in &rca.suggestions {
        push(&mut suggestions, text, "rca", 0.0);
    }
    for text in &rca.checklist {
        push(&mut checklist, text, "rca", 0.0);
    }
    let best = knowledge.first().map_or(0.0, |hit| hit.score);
    for (index, hit) in knowledge.iter().enumerate() {
        let (fixes, checks) = if index == 0 {
            (hit.fixes.len(), hit.checklist.len())
        } else if hit.score >= best * SECONDARY_SCORE_SHARE {
            (FIXES_PER_SECONDARY_HIT, FIXES_PER_SECONDARY_HIT)
        } else {
            continue;
        };
        for text in hit.fixes.iter().take(fixes) {
            push(&mut suggestions, text, &hit.id, hit.score);
        }
        for text in hit.checklist.iter().take(checks) {
            push(&mut checklist, text, &hit.id, hit.score);
        }
    }
    (suggestions, checklist)
}

/// The output formats of `infersight report`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportFormat {
    Json,
    Markdown,
    Html,
}

impl ReportFormat {
    pub fn parse(text: &str) -> Result<ReportFormat, crate::ReportError> {
        match text.to_ascii_lowercase().as_str() {
            "json" => Ok(ReportFormat::Json),
            "md" | "markdown" => Ok(ReportFormat::Markdown),
            "html" => Ok(ReportFormat::Html),
            other => Err(crate::ReportError::BadRequest(format!(
                "unknown report format `{other}` (expected json, markdown or html)"
            ))),
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            ReportFormat::Json => "json",
            ReportFormat::Markdown => "md",
            ReportFormat::Html => "html",
        }
    }
}

impl Report {
    /// The report in one format.
    pub fn render(&self, format: ReportFormat) -> Result<String, crate::ReportError> {
        match format {
            ReportFormat::Json => serde_json::to_string_pretty(self)
                .map_err(|e| crate::ReportError::Io(format!("report json: {e}"))),
            ReportFormat::Markdown => Ok(crate::render::markdown(self)),
            ReportFormat::Html => Ok(crate::render::html(self)),
        }
    }

    /// The report as a caller who may not see personal fields gets it, in every format:
    /// identifying values hidden and templates cut ([`crate::privacy`]).
    pub fn without_personal(&self) -> Result<Report, crate::ReportError> {
        let failed = |e: serde_json::Error| crate::ReportError::Io(format!("report json: {e}"));
        let mut value = serde_json::to_value(self).map_err(failed)?;
        crate::privacy::hide_personal(&mut value);
        serde_json::from_value(value).map_err(failed)
    }
}
