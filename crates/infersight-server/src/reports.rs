//! The report service behind the incident routes and `POST /api/v1/rca`: the incident store of
//! the server's data directory, the `[report]` settings, and a cache of knowledge bases. Incident
//! files are small but read and written with blocking i/o, and the knowledge base is an index
//! built in RAM, so both run on blocking threads. A cached knowledge base depends only on
//! the confirmed incidents a report may cite (every confirmed one except the incident itself) and
//! on the user's runbook directory: it is reused while neither changed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use infersight_query::QueryEngine;
use infersight_rca::RcaReport;
use infersight_rca::incidents::{Incident, IncidentStatus, IncidentStore};
use infersight_report::knowledge::KnowledgeBase;
use infersight_report::report::past_incidents;
use infersight_report::{Report, ReportConfig, ReportError};
use parking_lot::Mutex;

/// Knowledge bases kept at once: the one for open incidents (every confirmed incident) and a
/// few for reports on confirmed incidents (each leaves itself out).
const KNOWLEDGE_CACHE_ENTRIES: usize = 4;

/// What a knowledge base was built from; equal keys give equal knowledge bases.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KnowledgeKey {
    /// (id, updated_at) of the past incidents, in the store's order (newest first).
    past: Vec<(String, String)>,
    /// (file name, length, modification time) of the user's runbook directory's entries, sorted.
    runbook_files: Vec<(String, u64, Option<SystemTime>)>,
}

/// The incident store and the `[report]` settings of one server, with the knowledge-base cache.
pub struct ReportService {
    incidents: IncidentStore,
    config: ReportConfig,
    /// Most recently used last.
    knowledge_cache: Mutex<Vec<(KnowledgeKey, Arc<KnowledgeBase>)>>,
}

impl std::fmt::Debug for ReportService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReportService")
            .field("incidents", &self.incidents.dir())
            .field("knowledge_dir", &self.config.knowledge_dir)
            .field("cached_knowledge_bases", &self.knowledge_cache.lock().len())
            .finish()
    }
}

/// Runs blocking work (incident files, index building) off the async workers.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ReportError> + Send + 'static,
) -> Result<T, ReportError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ReportError::Io(format!("incident task failed: {e}")))?
}

impl ReportService {
    /// The incidents of `data_dir` (the store's data directory) and the `[report]` settings.
    pub fn new(data_dir: &Path, config: ReportConfig) -> ReportService {
        ReportService {
            incidents: IncidentStore::open(data_dir),
            config,
            knowledge_cache: Mutex::new(Vec::new()),
        }
    }

    pub fn incidents(&self) -> &IncidentStore {
        &self.incidents
    }

    pub fn config(&self) -> &ReportConfig {
        &self.config
    }

    /// Runs the root-cause analysis and stores its verdict as a new, open incident (the report
    /// carries the incident's id).
    pub async fn analyse_and_record(
        &self,
        engine: &infersight_query::QueryEngine,
        request: infersight_rca::RcaRequest,
    ) -> Result<infersight_rca::RecordedRca, ReportError> {
        Ok(infersight_rca::analyse_and_record(engine, &self.incidents, request).await?)
    }

    /// Stores `rca` as a new, open incident.
    pub async fn create(&self, rca: RcaReport) -> Result<Incident, ReportError> {
        let incidents = self.incidents.clone();
        blocking(move || Ok(incidents.create(&rca)?)).await
    }

    pub async fn get(&self, id: String) -> Result<Incident, ReportError> {
        let incidents = self.incidents.clone();
        blocking(move || Ok(incidents.get(&id)?)).await
    }

    /// Every incident, newest first.
    pub async fn list(&self) -> Result<Vec<Incident>, ReportError> {
        let incidents = self.incidents.clone();
        blocking(move || Ok(incidents.list()?)).await
    }

    pub async fn set_status(
        &self,
        id: String,
        status: IncidentStatus,
        note: Option<String>,
    ) -> Result<Incident, ReportError> {
        let incidents = self.incidents.clone();
        blocking(move || Ok(incidents.set_status(&id, status, note)?)).await
    }

    /// The report of incident `id`; `with_llm: false` skips the narrative even when an
    /// endpoint is configured.
    pub async fn report(
        self: &Arc<Self>,
        engine: &QueryEngine,
        id: String,
        with_llm: bool,
    ) -> Result<Report, ReportError> {
        let service = Arc::clone(self);
        let (incident, knowledge_base) = blocking(move || {
            let incident = service.incidents.get(&id)?;
            let knowledge_base = service.knowledge_for(&incident)?;
            Ok((incident, knowledge_base))
        })
        .await?;
        let mut config = self.config.clone();
        if !with_llm {
            config.llm.endpoint.clear();
        }
        Report::build(engine, &incident, &knowledge_base, &config).await
    }

    /// The knowledge base for a report on `incident`, from the cache when what it is built from
    /// has not changed. Blocking.
    pub(crate) fn knowledge_for(
        &self,
        incident: &Incident,
    ) -> Result<Arc<KnowledgeBase>, ReportError> {
        let past = past_incidents(&self.incidents, incident)?;
        let extra = self.config.extra_knowledge_dir();
        let key = KnowledgeKey {
            past: past
                .iter()
                .map(|i| (i.id.clone(), i.updated_at.clone()))
                .collect(),
            runbook_files: extra.map(runbook_files).unwrap_or_default(),
        };
        {
            let mut cache = self.knowledge_cache.lock();
            if let Some(position) = cache.iter().position(|(k, _)| *k == key) {
                let entry = cache.remove(position);
                let knowledge_base = Arc::clone(&entry.1);
                cache.push(entry);
                return Ok(knowledge_base);
            }
        }
        // Built outside the lock: two requests may build the same one; the later insert wins.
        let knowledge_base = Arc::new(KnowledgeBase::load(extra, &past)?);
        let mut cache = self.knowledge_cache.lock();
        cache.retain(|(k, _)| *k != key);
        if cache.len() >= KNOWLEDGE_CACHE_ENTRIES {
            cache.remove(0);
        }
        cache.push((key, Arc::clone(&knowledge_base)));
        Ok(knowledge_base)
    }
}

/// The entries of the user's runbook directory with their sizes and modification times (an
/// unreadable directory lists nothing: loading then reports the error).
fn runbook_files(dir: &Path) -> Vec<(String, u64, Option<SystemTime>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|entry| {
            let path: PathBuf = entry.path();
            let metadata = std::fs::metadata(&path).ok();
            (
                entry.file_name().to_string_lossy().into_owned(),
                metadata.as_ref().map_or(0, std::fs::Metadata::len),
                metadata.and_then(|m| m.modified().ok()),
            )
        })
        .collect();
    files.sort();
    files
}
