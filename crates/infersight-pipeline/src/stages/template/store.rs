//! The persisted template store: the miner's clusters with their stable ids, counts and parameter
//! types, saved as one JSON file (`templates.json`) in a directory, and the `mine_lines` entry
//! point behind `infersight templates mine` / `templates list`.
//!
//! Ids survive restarts because they are stored, not recomputed: a template's id is the hash of
//! its text when it was first created, and it is kept while the template generalizes and when a
//! compaction merges another template into it (the absorbed id is listed as an alias) or splits
//! templates out of it (each child has its own id and names its parent in `split_from`). The
//! split evidence (words seen per variable position, bounded) is stored too, so a restart neither
//! loses it nor lets a compaction merge a child back into its parent.

use std::path::{Path, PathBuf};

use infersight_model::durable;
use serde::{Deserialize, Serialize};

use super::config::MinerConfig;
use super::format::{LogFormat, detect_header};
use super::mask::ParamType;
use super::miner::{ClusterRef, Miner, RestoredCluster, SplitFrom, ValueSample};
use crate::error::PipelineError;

/// Version of the `templates.json` layout. Version 2 added `split_from` and `value_samples`
/// (optional: version 1 files are read as they are; they hold no split evidence); version 3
/// `tokens`, listed for templates with a folded variable phrase (a token with spaces, `<*> bytes`),
/// optional too.
pub const STORE_VERSION: u32 = 3;

/// One template as listed by `infersight templates list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TemplateInfo {
    pub template_id: String,
    pub template: String,
    pub count: u64,
    /// Nanoseconds since the epoch, when the lines carried timestamps.
    pub first_seen: Option<i64>,
    pub last_seen: Option<i64>,
    /// Type of each `<*>` of the template, in order.
    pub param_types: Vec<ParamType>,
    /// Ids of templates merged into this one (they may still appear in stored rows).
    pub aliases: Vec<String>,
    /// Id of the over-general template this one was split out of (lines mined before the split
    /// carry that id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_from: Option<String>,
}

impl TemplateInfo {
    /// Lines per second between first and last sighting; `None` without timestamps or with a
    /// single instant.
    pub fn rate_per_second(&self) -> Option<f64> {
        let span_ns = self.last_seen? - self.first_seen?;
        (span_ns > 0).then(|| self.count as f64 / (span_ns as f64 / 1e9))
    }
}

/// One input line's result, as printed by `infersight templates mine` (`line,template_id,template`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MinedLine {
    /// 1-based line number in the input.
    pub line_no: usize,
    pub template_id: String,
    pub template: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoreFile {
    version: u32,
    templates: Vec<StoredTemplate>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredTemplate {
    template_id: String,
    template: String,
    count: u64,
    first_seen: Option<i64>,
    last_seen: Option<i64>,
    /// Per token position; `null` where the token is constant.
    param_types: Vec<Option<ParamType>>,
    merged_into: Option<String>,
    /// The template's tokens, when one of them holds a space (a folded phrase); otherwise the
    /// tokens are the template's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tokens: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    split_from: Option<StoredSplit>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    value_samples: Vec<StoredSample>,
}

/// The parent a template was split out of, and the token position it pins to a word.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredSplit {
    template_id: String,
    position: u32,
}

/// The words seen at one variable position (split evidence), with their line counts.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredSample {
    position: u32,
    values: Vec<(String, u32)>,
}

/// A miner plus the directory it persists to.
#[derive(Debug)]
pub struct TemplateStore {
    miner: Miner,
    dir: Option<PathBuf>,
}

impl TemplateStore {
    pub const FILE_NAME: &'static str = "templates.json";

    /// An empty, in-memory store.
    pub fn new(config: MinerConfig) -> Self {
        Self {
            miner: Miner::new(config),
            dir: None,
        }
    }

    /// Opens the store in `dir`, loading `templates.json` when it exists (a missing file is an
    /// empty store; a corrupt one is an error, never silently discarded).
    pub fn open(dir: &Path, config: MinerConfig) -> Result<Self, PipelineError> {
        let path = dir.join(Self::FILE_NAME);
        let mut store = Self {
            miner: Miner::new(config),
            dir: Some(dir.to_path_buf()),
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(store),
            Err(error) => return Err(store_error(&path, error.to_string())),
        };
        let file: StoreFile = serde_json::from_str(&text)
            .map_err(|error| store_error(&path, format!("corrupt store: {error}")))?;
        if !(1..=STORE_VERSION).contains(&file.version) {
            return Err(store_error(
                &path,
                format!(
                    "unsupported store version {} (expected {STORE_VERSION})",
                    file.version
                ),
            ));
        }
        let index_of: std::collections::HashMap<&str, u32> = file
            .templates
            .iter()
            .enumerate()
            .map(|(index, template)| (template.template_id.as_str(), index as u32))
            .collect();
        if index_of.len() != file.templates.len() {
            return Err(store_error(
                &path,
                "corrupt store: duplicate template ids".into(),
            ));
        }
        let max_values = MinerConfig::MAX_SPLIT_VALUES;
        for template in &file.templates {
            let corrupt = |reason: String| {
                store_error(
                    &path,
                    format!(
                        "corrupt store: template `{}`: {reason}",
                        template.template_id
                    ),
                )
            };
            let merged_into = match &template.merged_into {
                None => None,
                Some(id) => Some(*index_of.get(id.as_str()).ok_or_else(|| {
                    store_error(&path, format!("corrupt store: unknown merge target `{id}`"))
                })?),
            };
            let tokens = match &template.tokens {
                Some(tokens) => {
                    if tokens.iter().any(|token| token.trim().is_empty()) {
                        return Err(corrupt("an empty token".into()));
                    }
                    tokens.len()
                }
                None => template.template.split_ascii_whitespace().count(),
            };
            let split_from = match &template.split_from {
                None => None,
                Some(split) => {
                    let parent = *index_of.get(split.template_id.as_str()).ok_or_else(|| {
                        corrupt(format!("unknown split parent `{}`", split.template_id))
                    })?;
                    if split.position as usize >= tokens {
                        return Err(corrupt(format!(
                            "split position {} beyond its {tokens} tokens",
                            split.position
                        )));
                    }
                    Some(SplitFrom {
                        parent,
                        position: split.position,
                    })
                }
            };
            let mut samples = Vec::with_capacity(template.value_samples.len());
            for stored in &template.value_samples {
                if stored.position as usize >= tokens || stored.values.len() > max_values {
                    return Err(corrupt(format!(
                        "value sample at position {} with {} words does not fit",
                        stored.position,
                        stored.values.len()
                    )));
                }
                let mut sample = ValueSample::new(stored.position);
                for (value, count) in &stored.values {
                    // A word is one token and no variable (those never enter a sample).
                    if value.is_empty()
                        || value.contains(char::is_whitespace)
                        || value.contains(super::mask::WILDCARD)
                    {
                        return Err(corrupt(format!("value sample word `{value}`")));
                    }
                    let sym = store.miner.symbols.intern(value);
                    sample.add(sym, *count, max_values);
                }
                samples.push(sample);
            }
            store.miner.restore(RestoredCluster {
                id: &template.template_id,
                template: &template.template,
                tokens: template.tokens.as_deref(),
                count: template.count,
                first_seen: template.first_seen,
                last_seen: template.last_seen,
                param_types: template.param_types.clone(),
                merged_into,
                split_from,
                samples,
            });
        }
        Ok(store)
    }

    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    pub fn miner(&self) -> &Miner {
        &self.miner
    }

    pub fn miner_mut(&mut self) -> &mut Miner {
        &mut self.miner
    }

    /// Mines one message (content only; split the header first).
    pub fn mine(&mut self, content: &str, ts: Option<i64>) -> ClusterRef {
        self.miner.add(content, ts)
    }

    /// Writes `templates.json` into the store's directory, atomically and durably
    /// (`infersight_model::durable`: temp file, fsync, rename, fsync of the directory).
    pub fn save(&self) -> Result<(), PipelineError> {
        let Some(dir) = &self.dir else {
            return Err(PipelineError::TemplateStore {
                path: String::new(),
                reason: "the store has no directory".into(),
            });
        };
        self.save_to(dir)
    }

    /// Writes `templates.json` into `dir`, creating the directory.
    pub fn save_to(&self, dir: &Path) -> Result<(), PipelineError> {
        std::fs::create_dir_all(dir).map_err(|error| store_error(dir, error.to_string()))?;
        let clusters = &self.miner.clusters;
        let file = StoreFile {
            version: STORE_VERSION,
            templates: clusters
                .iter()
                .map(|cluster| StoredTemplate {
                    template_id: cluster.id.clone(),
                    template: self.miner.render(&cluster.tokens),
                    count: cluster.count,
                    first_seen: cluster.first_seen,
                    last_seen: cluster.last_seen,
                    param_types: cluster.param_types.clone(),
                    merged_into: cluster
                        .merged_into
                        .map(|index| clusters[index as usize].id.clone()),
                    tokens: self.miner.phrase_tokens(cluster),
                    split_from: cluster.split_from.map(|split| StoredSplit {
                        template_id: clusters[split.parent as usize].id.clone(),
                        position: split.position,
                    }),
                    value_samples: cluster
                        .samples
                        .iter()
                        .map(|sample| StoredSample {
                            position: sample.position,
                            values: sample
                                .values()
                                .iter()
                                .map(|&(sym, count)| {
                                    (self.miner.symbols.text(sym).to_string(), count)
                                })
                                .collect(),
                        })
                        .collect(),
                })
                .collect(),
        };
        let path = dir.join(Self::FILE_NAME);
        let text = serde_json::to_string_pretty(&file)
            .map_err(|error| store_error(&path, error.to_string()))?;
        // through `templates.json.tmp`, fsynced, renamed, directory fsynced
        durable::write_atomic(&path, text.as_bytes())
            .map_err(|error| store_error(&error.path, error.source.to_string()))
    }

    /// Every live template, most frequent first (ties by id, so the order is deterministic).
    pub fn list(&self) -> Vec<TemplateInfo> {
        let clusters = &self.miner.clusters;
        let mut aliases: Vec<Vec<String>> = vec![Vec::new(); clusters.len()];
        for cluster in clusters {
            if cluster.merged_into.is_some() {
                let mut target = cluster.merged_into;
                let mut last = 0;
                while let Some(index) = target {
                    last = index;
                    target = clusters[index as usize].merged_into;
                }
                aliases[last as usize].push(cluster.id.clone());
            }
        }
        let mut list: Vec<TemplateInfo> = clusters
            .iter()
            .zip(aliases)
            .filter(|(cluster, _)| cluster.merged_into.is_none())
            .map(|(cluster, aliases)| TemplateInfo {
                template_id: cluster.id.clone(),
                template: self.miner.render(&cluster.tokens),
                count: cluster.count,
                first_seen: cluster.first_seen,
                last_seen: cluster.last_seen,
                param_types: cluster.param_types.iter().flatten().copied().collect(),
                aliases,
                split_from: cluster
                    .split_from
                    .map(|split| clusters[split.parent as usize].id.clone()),
            })
            .collect();
        list.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then_with(|| a.template_id.cmp(&b.template_id))
        });
        list
    }
}

fn store_error(path: &Path, reason: String) -> PipelineError {
    PipelineError::TemplateStore {
        path: path.display().to_string(),
        reason,
    }
}

/// The content of a raw line: by the format spec when one is given and the line matches it,
/// else by automatic header detection.
pub fn line_content<'a>(line: &'a str, format: Option<&LogFormat>) -> &'a str {
    if let Some(format) = format
        && let Some(content) = format.content(line)
    {
        return content;
    }
    if format.is_some() {
        return line.trim_end_matches(['\r', '\n']);
    }
    detect_header(line).content
}

/// Mines `lines` into `store` and returns, for every line, its final template (after the whole
/// input was seen and the store compacted, as Loghub evaluates parsers): merges are followed, and
/// a line mined into a template that the compaction split is reported with the split-out template
/// of its word ([`Miner::resolve_line`]), so earlier and later lines of one word agree.
pub fn mine_lines_into<'a, I>(
    store: &mut TemplateStore,
    lines: I,
    format: Option<&LogFormat>,
) -> Vec<MinedLine>
where
    I: IntoIterator<Item = &'a str>,
{
    let mined: Vec<(&str, ClusterRef)> = lines
        .into_iter()
        .map(|line| {
            let content = line_content(line, format);
            (content, store.mine(content, None))
        })
        .collect();
    store.miner.compact();
    let mut cache: std::collections::HashMap<u32, (String, String)> = Default::default();
    mined
        .into_iter()
        .enumerate()
        .map(|(index, (content, cluster))| {
            let live = store.miner.resolve_line(cluster, content);
            let (template_id, template) = cache
                .entry(live.0)
                .or_insert_with(|| {
                    (
                        store.miner.template_id(live).to_string(),
                        store.miner.template_text(live),
                    )
                })
                .clone();
            MinedLine {
                line_no: index + 1,
                template_id,
                template,
            }
        })
        .collect()
}

/// Mines `lines` with a fresh in-memory store: the library side of `infersight templates mine`.
pub fn mine_lines<'a, I>(
    lines: I,
    config: &MinerConfig,
    format: Option<&LogFormat>,
) -> Vec<MinedLine>
where
    I: IntoIterator<Item = &'a str>,
{
    let mut store = TemplateStore::new(config.clone());
    mine_lines_into(&mut store, lines, format)
}
