//! The knowledge base: runbooks from `knowledge/` (embedded in the binary), the user's own
//! runbooks (`[report] knowledge_dir`) and confirmed past incidents, indexed in RAM (BM25, see
//! `bm25`) and queried with an RCA verdict's evidence.
//!
//! A runbook is Markdown with a small front matter:
//!
//! ```text
//! ---
//! id: kv-cache-preemption            (optional; must equal the file stem)
//! title: KV-cache pressure and preemption storms
//! signals: [preemption_storm, kv_cache_pressure]
//! keywords: [kv cache, preemption, gpu_memory_utilization]
//! ---
//! ## Summary        one paragraph
//! ## Causes         a list
//! ## How to confirm a list (a fenced block belongs to the item above it)
//! ## Fixes          a list
//! ## Verification checklist   a list (`- [ ]` boxes allowed)
//! ```
//!
//! Retrieval decision rules (documented because reports show their scores):
//! - The query is built from the evidence only: signal kinds matched exactly against a
//!   runbook's `signals`, each worth a fixed score that halves with the kind's rank, so the
//!   kinds decide which runbooks lead; then words from the signals' subjects, root-cause
//!   dimension names and values, the symptom's SLI, the top log templates (by lift) and the
//!   verdict, matched against titles, keywords and text (BM25), which choose between runbooks
//!   covering the same kinds. The kinds' own names are not searched as words: that would
//!   favour the generic runbook named after a kind over the specific one that covers it.
//! - Signal kinds are ranked by how much they say about the cause, then by strength (strengths
//!   of different kinds are on different scales — ratios of counts, z-scores, slopes — so they
//!   order signals of one tier only): mechanisms first (leak, preemption, KV pressure, cache
//!   pollution, resonance, truncation, trace loss, flow-control stall, queue build-up, prompt
//!   drift, and kinds this code does not know), then signals that say where but not why
//!   (`version_regression`, `slow_worker`), then symptoms (`error_burst`, `latency_spike`).
//! - Scores are sums over the query's clauses: a fixed score per matched signal kind
//!   (by rank) plus the words' BM25 (comparable within one retrieval, not across retrievals).
//! - A healthy verdict (no symptom, no root cause, no signal) retrieves nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use infersight_rca::RcaReport;
use serde::{Deserialize, Serialize};

use crate::ReportError;
use infersight_model::signal::SignalKind;
use infersight_rca::{Incident, IncidentStatus};

use bm25::{Analyzer, Clause, Index, NewDocument, TextField};

mod bm25;

/// One retrieved runbook or past incident.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KnowledgeHit {
    /// Runbook id (its file stem) or `incident:<id>`.
    pub id: String,
    pub kind: HitKind,
    pub title: String,
    /// The retrieval's score: the matched signal kinds' fixed scores plus the words' BM25.
    pub score: f32,
    /// One paragraph: what this is about.
    pub summary: String,
    pub fixes: Vec<String>,
    pub checklist: Vec<String>,
    /// A runbook's "How to confirm" steps (Markdown; a fenced block belongs to its step); empty
    /// for a past incident and in reports stored before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub confirm: Vec<String>,
    /// The signal kinds a runbook covers (empty for a past incident).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signals: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HitKind {
    Runbook,
    Incident,
}

/// The signal kinds of DESIGN.md's `rca` contract; every one is covered by a built-in runbook.
pub const SIGNAL_KINDS: [&str; 14] = {
    let mut names = [""; 14];
    let mut i = 0;
    while i < names.len() {
        names[i] = SignalKind::CONTRACT[i].name();
        i += 1;
    }
    names
};

/// The runbooks shipped in the binary: (id, Markdown). Every `knowledge/*.md` file must be here
/// (a test checks it).
pub fn builtin_runbooks() -> &'static [(&'static str, &'static str)] {
    macro_rules! runbooks {
        ($($id:literal),* $(,)?) => {
            &[$(($id, include_str!(concat!("../../../knowledge/", $id, ".md")))),*]
        };
    }
    runbooks!(
        "batching-wait-misconfig",
        "error-burst",
        "gpu-memory-leak",
        "http2-flow-control",
        "kv-cache-preemption",
        "latency-surge",
        "lora-adapter-swapping",
        "oom-low-utilization",
        "prefix-cache-pollution",
        "prompt-drift",
        "queue-backlog-503",
        "repeated-output",
        "slow-worker",
        "speculative-decoding-resonance",
        "trace-context-loss",
        "truncation-surge",
        "version-regression",
    )
}

/// A parsed runbook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Runbook {
    /// The file stem.
    pub id: String,
    pub title: String,
    /// Signal kinds this runbook covers.
    pub signals: Vec<String>,
    pub keywords: Vec<String>,
    /// One paragraph.
    pub summary: String,
    pub causes: Vec<String>,
    pub confirm: Vec<String>,
    pub fixes: Vec<String>,
    pub checklist: Vec<String>,
    /// The Markdown after the front matter.
    pub body: String,
}

/// The sections every runbook has, with the heading names accepted for each.
const SECTIONS: [(&str, &[&str]); 5] = [
    ("Summary", &["summary"]),
    ("Causes", &["causes", "cause"]),
    (
        "How to confirm",
        &["how to confirm", "confirm", "diagnosis"],
    ),
    ("Fixes", &["fixes", "fix", "remediation"]),
    (
        "Verification checklist",
        &["verification checklist", "checklist", "verification"],
    ),
];

impl Runbook {
    /// Parses one runbook; `id` is its file stem. A malformed runbook is a `BadRequest` that
    /// names the runbook and the reason.
    pub fn parse(id: &str, text: &str) -> Result<Runbook, ReportError> {
        parse_runbook(id, text)
            .map_err(|reason| ReportError::BadRequest(format!("runbook `{id}`: {reason}")))
    }

    /// Every word a query can match, for the index's text field.
    fn text(&self) -> String {
        let mut text = self.summary.clone();
        for part in [&self.causes, &self.confirm, &self.fixes, &self.checklist] {
            for item in part {
                text.push('\n');
                text.push_str(item);
            }
        }
        text
    }
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn parse_runbook(id: &str, text: &str) -> Result<Runbook, String> {
    if !valid_id(id) {
        return Err("the id (file stem) may only contain letters, digits, `-` and `_`".into());
    }
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines().skip_while(|l| l.trim().is_empty());
    if lines.next().map(str::trim) != Some("---") {
        return Err(
            "missing front matter: the file must start with a `---` block (title, signals, keywords)"
                .into(),
        );
    }
    let mut front: BTreeMap<String, String> = BTreeMap::new();
    let mut closed = false;
    for (number, line) in lines.by_ref().enumerate() {
        let line = line.trim();
        if line == "---" {
            closed = true;
            break;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(format!(
                "bad front matter line {}: `{line}` (expected `key: value`)",
                number + 2
            ));
        };
        let key = key.trim().to_ascii_lowercase();
        if !matches!(key.as_str(), "id" | "title" | "signals" | "keywords") {
            return Err(format!(
                "unknown front matter key `{key}` (expected id, title, signals, keywords)"
            ));
        }
        if front
            .insert(key.clone(), value.trim().to_string())
            .is_some()
        {
            return Err(format!("front matter key `{key}` given twice"));
        }
    }
    if !closed {
        return Err("front matter is not closed by a `---` line".into());
    }
    if let Some(declared) = front.get("id")
        && unquote(declared) != id
    {
        return Err(format!(
            "front matter id `{}` differs from the file stem `{id}`",
            unquote(declared)
        ));
    }
    let title = front
        .get("title")
        .map(|t| unquote(t).to_string())
        .unwrap_or_default();
    if title.is_empty() {
        return Err("front matter has no `title`".into());
    }
    let signals = list_value(front.get("signals").map_or("", String::as_str));
    if let Some(bad) = signals.iter().find(|s| {
        !s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    }) {
        return Err(format!(
            "signal kind `{bad}` is not a snake_case name (known kinds: {})",
            SIGNAL_KINDS.join(", ")
        ));
    }
    let keywords = list_value(front.get("keywords").map_or("", String::as_str));
    let body: String = lines.collect::<Vec<_>>().join("\n");

    // Split the body into `## ` sections.
    let mut sections: BTreeMap<&'static str, Vec<&str>> = BTreeMap::new();
    let mut current: Option<&'static str> = None;
    let mut in_fence = false;
    for line in body.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        }
        if !in_fence && let Some(heading) = line.strip_prefix("## ") {
            let name = heading.trim().trim_end_matches(':').to_ascii_lowercase();
            current = SECTIONS
                .iter()
                .find(|(_, names)| names.contains(&name.as_str()))
                .map(|(canonical, _)| *canonical);
            if let Some(canonical) = current
                && sections.insert(canonical, Vec::new()).is_some()
            {
                return Err(format!("section `## {canonical}` appears twice"));
            }
            continue;
        }
        if !in_fence && line.starts_with("# ") {
            current = None;
            continue;
        }
        if let Some(canonical) = current {
            sections.entry(canonical).or_default().push(line);
        }
    }
    let section = |name: &str| -> Result<&Vec<&str>, String> {
        sections
            .get(name)
            .ok_or_else(|| format!("missing section `## {name}`"))
    };
    let summary = paragraph(section("Summary")?);
    if summary.is_empty() {
        return Err("section `## Summary` is empty".into());
    }
    let mut lists = Vec::new();
    for name in [
        "Causes",
        "How to confirm",
        "Fixes",
        "Verification checklist",
    ] {
        let items = list_items(section(name)?);
        if items.is_empty() {
            return Err(format!("section `## {name}` has no items"));
        }
        lists.push(items);
    }
    let [causes, confirm, fixes, checklist]: [Vec<String>; 4] = lists
        .try_into()
        .map_err(|_| "internal: section count".to_string())?;
    Ok(Runbook {
        id: id.to_string(),
        title,
        signals,
        keywords,
        summary,
        causes,
        confirm,
        fixes,
        checklist,
        body,
    })
}

fn unquote(value: &str) -> &str {
    let value = value.trim();
    value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
        .unwrap_or(value)
}

/// `[a, b, c]` or `a, b, c`.
fn list_value(value: &str) -> Vec<String> {
    let value = value.trim();
    let inner = value
        .strip_prefix('[')
        .and_then(|v| v.strip_suffix(']'))
        .unwrap_or(value);
    inner
        .split(',')
        .map(|item| unquote(item).to_string())
        .filter(|item| !item.is_empty())
        .collect()
}

/// The section's text as one paragraph (lines joined with spaces).
fn paragraph(lines: &[&str]) -> String {
    lines
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The start of a list item: `- `, `* `, `+ ` or `1. `, with an optional `[ ]`/`[x]` box.
fn item_start(line: &str) -> Option<&str> {
    let trimmed = line.trim_start();
    let rest = ["- ", "* ", "+ "]
        .iter()
        .find_map(|marker| trimmed.strip_prefix(marker))
        .or_else(|| {
            let digits = trimmed.chars().take_while(char::is_ascii_digit).count();
            (digits > 0)
                .then(|| trimmed[digits..].strip_prefix(". "))
                .flatten()
        })?;
    let rest = rest.trim_start();
    Some(
        ["[ ] ", "[x] ", "[X] "]
            .iter()
            .find_map(|b| rest.strip_prefix(b))
            .unwrap_or(rest)
            .trim(),
    )
}

/// List items; continuation lines join their item, a blank line ends it, a fenced block belongs
/// to the item above it (kept with its line breaks).
fn list_items(lines: &[&str]) -> Vec<String> {
    let mut items: Vec<String> = Vec::new();
    let mut open = false;
    let mut in_fence = false;
    for line in lines {
        if line.trim_start().starts_with("```") {
            if items.is_empty() {
                items.push(String::new());
            }
            let item = items.last_mut().expect("an item exists");
            if !item.is_empty() {
                item.push('\n');
            }
            item.push_str(line.trim());
            in_fence = !in_fence;
            open = !in_fence;
            continue;
        }
        if in_fence {
            let item = items.last_mut().expect("a fence is inside an item");
            item.push('\n');
            item.push_str(line);
            continue;
        }
        if line.trim().is_empty() {
            open = false;
            continue;
        }
        if let Some(text) = item_start(line) {
            items.push(text.to_string());
            open = true;
        } else if open && let Some(item) = items.last_mut() {
            item.push(' ');
            item.push_str(line.trim());
        } else {
            items.push(line.trim().to_string());
            open = true;
        }
    }
    items.retain(|i| !i.trim().is_empty());
    items
}

/// What one indexed document shows when it is retrieved.
#[derive(Debug, Clone)]
struct Entry {
    id: String,
    kind: HitKind,
    title: String,
    summary: String,
    fixes: Vec<String>,
    checklist: Vec<String>,
    confirm: Vec<String>,
    signals: Vec<String>,
}

/// Score of a document covering the first signal kind; each next kind gets
/// [`SIGNAL_BOOST_DECAY`] times the one before. High against the words' BM25 (tens), so the
/// kinds decide and the words choose between runbooks covering the same kinds.
const SIGNAL_BOOST: f32 = 100.0;
const SIGNAL_BOOST_DECAY: f32 = 0.5;
/// At most this many distinct signal kinds go into the query.
const MAX_SIGNAL_KINDS: usize = 5;
/// Field boosts for words.
const TITLE_BOOST: f32 = 1.5;
const KEYWORDS_BOOST: f32 = 2.0;
const TEXT_BOOST: f32 = 1.0;
/// Word weights by where the word came from.
const WEIGHT_SUBJECT: f32 = 0.5;
const WEIGHT_ROOT_CAUSE: f32 = 1.0;
const WEIGHT_SYMPTOM: f32 = 0.5;
const WEIGHT_LOG_TEMPLATE: f32 = 0.5;
const WEIGHT_VERDICT: f32 = 0.25;
/// A word mentioned by several pieces of evidence weighs at most this much.
const MAX_WORD_WEIGHT: f32 = 2.0;
/// Log templates used, best lift first.
const MAX_LOG_TEMPLATES: usize = 5;

/// Runbooks and past incidents, indexed in RAM.
pub struct KnowledgeBase {
    runbooks: Vec<Runbook>,
    entries: Vec<Entry>,
    analyzer: Analyzer,
    /// Document `n` is `entries[n]`.
    index: Index,
}

impl std::fmt::Debug for KnowledgeBase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KnowledgeBase")
            .field("runbooks", &self.runbooks.len())
            .field("entries", &self.entries.len())
            .finish()
    }
}

impl KnowledgeBase {
    /// The built-in runbooks, the user's runbooks in `extra_dir` (`*.md`; a file whose stem is a
    /// built-in id replaces that runbook) and the confirmed incidents of `past` (others are
    /// skipped), indexed for retrieval.
    pub fn load(extra_dir: Option<&Path>, past: &[Incident]) -> Result<KnowledgeBase, ReportError> {
        let mut runbooks: Vec<Runbook> = builtin_runbooks()
            .iter()
            .map(|(id, text)| Runbook::parse(id, text))
            .collect::<Result<_, _>>()?;
        if let Some(dir) = extra_dir {
            for runbook in read_runbook_dir(dir)? {
                match runbooks.iter_mut().find(|r| r.id == runbook.id) {
                    Some(existing) => {
                        tracing::info!(id = %runbook.id, "user runbook replaces the built-in one");
                        *existing = runbook;
                    }
                    None => runbooks.push(runbook),
                }
            }
        }
        for runbook in &runbooks {
            for kind in &runbook.signals {
                if !SIGNAL_KINDS.contains(&kind.as_str()) {
                    tracing::warn!(id = %runbook.id, kind = %kind, "runbook names an unknown signal kind");
                }
            }
        }

        let analyzer = Analyzer::new();
        let mut index = Index::default();
        let mut entries = Vec::new();
        for runbook in &runbooks {
            let mut doc = NewDocument::default();
            for kind in &runbook.signals {
                doc.signal(kind);
            }
            doc.text(TextField::Title, runbook.title.as_str());
            // The id's words are keywords too (`lora-adapter-swapping`).
            doc.text(TextField::Keywords, runbook.id.replace(['-', '_'], " "));
            for keyword in &runbook.keywords {
                doc.text(TextField::Keywords, words_of(keyword));
            }
            doc.text(TextField::Text, words_of(&runbook.text()));
            let number = index.add(&analyzer, doc);
            debug_assert_eq!(number, entries.len(), "document n is entries[n]");
            entries.push(Entry {
                id: runbook.id.clone(),
                kind: HitKind::Runbook,
                title: runbook.title.clone(),
                summary: runbook.summary.clone(),
                fixes: runbook.fixes.clone(),
                checklist: runbook.checklist.clone(),
                confirm: runbook.confirm.clone(),
                signals: runbook.signals.clone(),
            });
        }
        for incident in past
            .iter()
            .filter(|i| i.status == IncidentStatus::Confirmed)
        {
            let rca = &incident.rca;
            let mut doc = NewDocument::default();
            let mut keywords = Vec::new();
            for signal in &rca.signals {
                doc.signal(signal.kind.name());
                keywords.push(signal.kind.name().replace('_', " "));
                for (key, value) in &signal.subject {
                    keywords.push(words_of(&format!("{key} {value}")));
                }
            }
            for cause in &rca.root_causes {
                for (key, value) in &cause.dimensions {
                    keywords.push(words_of(&format!("{key} {value}")));
                }
            }
            if let Some(symptom) = &rca.symptom {
                keywords.push(words_of(&symptom.sli));
            }
            doc.text(TextField::Title, words_of(&rca.verdict));
            for keyword in keywords {
                doc.text(TextField::Keywords, keyword);
            }
            let note = incident.note.clone().unwrap_or_default();
            doc.text(
                TextField::Text,
                words_of(&format!("{note}\n{}", rca.verdict)),
            );
            let number = index.add(&analyzer, doc);
            debug_assert_eq!(number, entries.len(), "document n is entries[n]");
            let mut fixes: Vec<String> = incident
                .note
                .iter()
                .filter(|n| !n.trim().is_empty())
                .cloned()
                .collect();
            fixes.extend(rca.suggestions.iter().cloned());
            entries.push(Entry {
                id: format!("incident:{}", incident.id),
                kind: HitKind::Incident,
                title: format!("Past incident {} ({})", incident.id, incident.created_at),
                summary: match &incident.note {
                    Some(note) if !note.trim().is_empty() => {
                        format!("{} — confirmed: {note}", rca.verdict)
                    }
                    _ => rca.verdict.clone(),
                },
                fixes,
                checklist: rca.checklist.clone(),
                confirm: Vec::new(),
                signals: Vec::new(),
            });
        }
        Ok(KnowledgeBase {
            runbooks,
            entries,
            analyzer,
            index,
        })
    }

    /// Every runbook (built-in, with the user's replacements and additions).
    pub fn runbooks(&self) -> &[Runbook] {
        &self.runbooks
    }

    pub fn runbook(&self, id: &str) -> Option<&Runbook> {
        self.runbooks.iter().find(|r| r.id == id)
    }

    /// Runbooks and past incidents for an RCA verdict, best first (at most `limit`); empty for
    /// a healthy verdict.
    pub fn retrieve(&self, rca: &RcaReport, limit: usize) -> Vec<KnowledgeHit> {
        if rca.signals.is_empty() && rca.root_causes.is_empty() && rca.symptom.is_none() {
            return Vec::new();
        }
        let mut clauses: Vec<Clause> = Vec::new();
        // Signal kinds by tier (mechanism, place, symptom), then strength; each kind once.
        let mut signals: Vec<_> = rca.signals.iter().collect();
        signals.sort_by(|a, b| {
            signal_tier(a.kind.name())
                .cmp(&signal_tier(b.kind.name()))
                .then(b.strength.total_cmp(&a.strength))
        });
        let mut kinds: Vec<&str> = Vec::new();
        for signal in &signals {
            if !kinds.contains(&signal.kind.name()) && kinds.len() < MAX_SIGNAL_KINDS {
                kinds.push(signal.kind.name());
            }
        }
        let mut boost = SIGNAL_BOOST;
        for kind in &kinds {
            clauses.push(self.signal_clause(kind, boost));
            boost *= SIGNAL_BOOST_DECAY;
        }
        let mut words = WordWeights::default();
        for (rank, signal) in signals.iter().enumerate() {
            let scale = if rank == 0 { 1.0 } else { 0.5 };
            for (key, value) in &signal.subject {
                words.add(
                    &self.analyzer,
                    &format!("{key} {value}"),
                    WEIGHT_SUBJECT * scale,
                );
            }
        }
        for (rank, cause) in rca.root_causes.iter().enumerate() {
            let scale = if rank == 0 { 1.0 } else { 0.5 };
            for (key, value) in &cause.dimensions {
                words.add(
                    &self.analyzer,
                    &format!("{key} {value}"),
                    WEIGHT_ROOT_CAUSE * scale,
                );
            }
        }
        if let Some(symptom) = &rca.symptom {
            words.add(&self.analyzer, &symptom.sli, WEIGHT_SYMPTOM);
        }
        let mut templates: Vec<_> = rca.log_evidence.iter().collect();
        templates.sort_by(|a, b| b.lift.total_cmp(&a.lift));
        for evidence in templates.iter().take(MAX_LOG_TEMPLATES) {
            words.add(&self.analyzer, &evidence.template, WEIGHT_LOG_TEMPLATE);
        }
        words.add(&self.analyzer, &rca.verdict, WEIGHT_VERDICT);
        clauses.extend(self.word_clauses(&words));
        self.search(clauses, limit)
    }

    /// Free-text search over runbooks and past incidents (the UI's search box); a word that is
    /// a signal kind also matches runbooks covering it.
    pub fn search_text(&self, text: &str, limit: usize) -> Vec<KnowledgeHit> {
        let mut clauses: Vec<Clause> = Vec::new();
        let mut seen = Vec::new();
        for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            let word = word.to_ascii_lowercase();
            if SIGNAL_KINDS.contains(&word.as_str()) && !seen.contains(&word) {
                clauses.push(self.signal_clause(&word, SIGNAL_BOOST));
                seen.push(word);
            }
        }
        let mut words = WordWeights::default();
        words.add(&self.analyzer, text, 1.0);
        clauses.extend(self.word_clauses(&words));
        self.search(clauses, limit)
    }

    /// Documents covering `kind` score `score`, however many kinds they cover and however
    /// common the kind is (a runbook covering two kinds is not half about each).
    fn signal_clause(&self, kind: &str, score: f32) -> Clause {
        Clause::Signal {
            kind: kind.to_owned(),
            score,
        }
    }

    fn word_clauses(&self, words: &WordWeights) -> Vec<Clause> {
        let mut clauses = Vec::new();
        for (word, weight) in &words.0 {
            let weight = weight.min(MAX_WORD_WEIGHT);
            for (field, field_boost) in [
                (TextField::Title, TITLE_BOOST),
                (TextField::Keywords, KEYWORDS_BOOST),
                (TextField::Text, TEXT_BOOST),
            ] {
                clauses.push(Clause::Word {
                    word: word.clone(),
                    field,
                    boost: weight * field_boost,
                });
            }
        }
        clauses
    }

    fn search(&self, clauses: Vec<Clause>, limit: usize) -> Vec<KnowledgeHit> {
        if clauses.is_empty() || limit == 0 {
            return Vec::new();
        }
        let mut hits = Vec::new();
        for (number, score) in self.index.search(&clauses) {
            let Some(entry) = self.entries.get(number) else {
                continue;
            };
            hits.push(KnowledgeHit {
                id: entry.id.clone(),
                kind: entry.kind,
                title: entry.title.clone(),
                score,
                summary: entry.summary.clone(),
                fixes: entry.fixes.clone(),
                checklist: entry.checklist.clone(),
                confirm: entry.confirm.clone(),
                signals: entry.signals.clone(),
            });
        }
        // Ties in score keep a stable order (by id), so reports are reproducible.
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.id.cmp(&b.id)));
        hits.truncate(limit);
        hits
    }
}

/// How much a signal kind says about the cause: 0 a mechanism, 1 where but not why, 2 a symptom.
fn signal_tier(kind: &str) -> u8 {
    match kind {
        "version_regression" | "slow_worker" => 1,
        "error_burst" | "latency_spike" => 2,
        _ => 0,
    }
}

/// Query words (already analysed: lowercased, stemmed, no stop words) with their summed weight.
#[derive(Default)]
struct WordWeights(BTreeMap<String, f32>);

impl WordWeights {
    fn add(&mut self, analyzer: &Analyzer, text: &str, weight: f32) {
        let mut seen: Vec<String> = Vec::new();
        for word in analyzer.words(&words_of(text)) {
            // Numbers (thresholds, counts, timestamps) say nothing about the cause.
            if word.chars().all(|c| c.is_ascii_digit()) || seen.contains(&word) {
                continue;
            }
            *self.0.entry(word.clone()).or_default() += weight;
            seen.push(word);
        }
    }
}

/// Identifiers split into words: `kv_cache_usage_ratio` → `kv cache usage ratio`,
/// `chat-lora,sql-lora` → `chat lora sql lora` (the tokenizer splits on the rest).
fn words_of(text: &str) -> String {
    text.replace(['_', '-', ':', '.'], " ")
}

/// The `*.md` runbooks of a directory (not recursive), by file name.
fn read_runbook_dir(dir: &Path) -> Result<Vec<Runbook>, ReportError> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            ReportError::BadRequest(format!(
                "knowledge directory {} does not exist",
                dir.display()
            ))
        } else {
            ReportError::io(dir, e)
        }
    })?;
    let mut paths: Vec<PathBuf> = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| ReportError::io(dir, e))?.path();
        if path.extension().is_some_and(|e| e == "md") && path.is_file() {
            paths.push(path);
        }
    }
    paths.sort();
    let mut runbooks = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).map_err(|e| ReportError::io(&path, e))?;
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        let runbook = parse_runbook(&stem, &text).map_err(|reason| {
            ReportError::BadRequest(format!("runbook {}: {reason}", path.display()))
        })?;
        runbooks.push(runbook);
    }
    Ok(runbooks)
}
