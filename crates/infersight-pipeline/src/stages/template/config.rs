//! Configuration of the `template` stage (`[stages.template]`) and of the miner itself.
//!
//! One miner configuration serves every log source: the defaults below were chosen once on the
//! whole corrected Loghub-2k set, never per system (see `bench/README.md`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Settings of the Drain-family miner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MinerConfig {
    /// Fraction of positions that must match for a line to join a cluster (Drain's `st`).
    pub similarity_threshold: f64,
    /// Leading tokens used as tree keys below the token-count layer (Drain's depth − 2).
    pub tree_depth: usize,
    /// Children per tree node before new keys go to the `<*>` child (Drain's `maxChild`).
    pub max_children: usize,
    /// Tokens of a message beyond this count are ignored (guards against megabyte lines).
    pub max_tokens: usize,
    /// The stage compacts (merges covered templates, splits over-general ones) after this many
    /// lines.
    pub compact_every_lines: u64,
    /// Splitting: a template position that generalized from a constant is split into one template
    /// per value when it took at most this many distinct constant words (each frequent, see below).
    /// At most [`MinerConfig::MAX_SPLIT_VALUES`]; below 2 turns splitting (and value tracking) off.
    pub split_max_values: usize,
    /// Splitting: lines seen at the position before its values are trusted.
    pub split_min_lines: u64,
    /// Splitting: every value must have at least this share of the position's lines (a rare value
    /// is a sign of an open set, such as user names, that happens to be small so far).
    pub split_min_share: f64,
}

impl Default for MinerConfig {
    fn default() -> Self {
        Self {
            similarity_threshold: 0.7,
            tree_depth: 2,
            max_children: 100,
            max_tokens: 256,
            compact_every_lines: 100_000,
            split_max_values: SPLIT_MAX_VALUES_DEFAULT,
            split_min_lines: SPLIT_MIN_LINES_DEFAULT,
            split_min_share: SPLIT_MIN_SHARE_DEFAULT,
        }
    }
}

const SPLIT_MAX_VALUES_DEFAULT: usize = 4;
const SPLIT_MIN_LINES_DEFAULT: u64 = 20;
const SPLIT_MIN_SHARE_DEFAULT: f64 = 0.1;

impl MinerConfig {
    /// The most distinct values the miner tracks per template position (the memory bound of the
    /// split evidence): `split_max_values` may not exceed it.
    pub const MAX_SPLIT_VALUES: usize = 8;

    /// Every problem of this section, each prefixed with the offending field.
    pub fn validate(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if !(self.similarity_threshold > 0.0 && self.similarity_threshold <= 1.0) {
            problems.push(format!(
                "similarity_threshold: {} must be in (0, 1]",
                self.similarity_threshold
            ));
        }
        if self.max_children < 2 {
            problems.push(format!(
                "max_children: {} must be at least 2",
                self.max_children
            ));
        }
        if self.max_tokens == 0 {
            problems.push("max_tokens: must be at least 1".to_string());
        }
        if self.split_max_values > Self::MAX_SPLIT_VALUES {
            problems.push(format!(
                "split_max_values: {} must be at most {}",
                self.split_max_values,
                Self::MAX_SPLIT_VALUES
            ));
        }
        if !(0.0..=1.0).contains(&self.split_min_share) {
            problems.push(format!(
                "split_min_share: {} must be in [0, 1]",
                self.split_min_share
            ));
        }
        if self.compact_every_lines == 0 {
            problems.push("compact_every_lines: must be at least 1".to_string());
        }
        problems
    }
}

/// The `template` stage: mines the `body` of every log row into `template_id` and `params`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TemplateConfig {
    pub enabled: bool,
    pub miner: MinerConfig,
    /// Directory of the persisted template store (`templates.json`); `None` keeps templates in
    /// memory only (ids are still deterministic, but counts restart).
    pub store_dir: Option<PathBuf>,
    /// Emit a `templates` batch (new and changed templates) after every processed logs batch.
    pub emit_templates: bool,
}

impl Default for TemplateConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            miner: MinerConfig::default(),
            store_dir: None,
            emit_templates: true,
        }
    }
}

impl TemplateConfig {
    pub fn validate(&self) -> Vec<String> {
        self.miner
            .validate()
            .into_iter()
            .map(|problem| format!("miner.{problem}"))
            .collect()
    }
}
