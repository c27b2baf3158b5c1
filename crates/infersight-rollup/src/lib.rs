//! Rollups and sketches, the leaf both the store and the analytics build on: per minute and per
//! dimension combination, one quantile sketch per latency SLI ([`sketch`]) plus the additive
//! counters derived SLIs need. The store builds them from `requests` batches at ingest
//! ([`build`]) and persists them next to each segment in the sidecar format of [`codec`]; SLI
//! answers, SLOs and root-cause localization merge them ([`merge`], [`query`]) to answer "p99 TTFT
//! by model_version and worker, per minute, since 02:00" without rescanning raw rows.
//!
//! Cardinality guard: a rollup accepts at most `max_combinations` distinct dimension
//! combinations; rows of further combinations fold into the combination whose every value is
//! [`OTHER`], and are counted in [`Rollup::folded_rows`].

pub mod build;
pub mod codec;
pub mod merge;
pub mod query;
#[cfg(test)]
mod reference_tests;
pub mod sketch;
pub mod sli;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

pub use build::AddStats;
pub use merge::{combination_totals, merge_range};
pub use query::{SliPoint, SliQuery, SliSeries, query_rollups};
pub use sli::{CounterSli, LatencySli, Sli};

use build::ComboIndex;
use sketch::{DdSketch, SketchDecodeError};

/// The value every dimension takes in the fold-over combination.
pub const OTHER: &str = "other";

pub(crate) const MINUTE_NS: i64 = 60_000_000_000;
pub(crate) const HOUR_NS: i64 = 3_600_000_000_000;

/// Which dimensions a rollup keeps, and its combination budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollupSpec {
    /// `requests` columns (string or integer) that form a combination.
    pub dimensions: Vec<String>,
    pub max_combinations: usize,
}

impl Default for RollupSpec {
    fn default() -> Self {
        RollupSpec {
            dimensions: [
                "service",
                "runtime",
                "worker",
                "model",
                "model_version",
                "lora_adapters",
                "kv_cache_policy",
                "tenant",
            ]
            .map(String::from)
            .to_vec(),
            max_combinations: 20_000,
        }
    }
}

/// Additive counters and latency sketches of the requests of one minute in one combination.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cell {
    pub requests: u64,
    pub errors: u64,
    pub truncated: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_tokens: u64,
    pub sketches: [DdSketch; 7],
}

impl Cell {
    pub fn merge(&mut self, other: &Cell) {
        self.requests += other.requests;
        self.errors += other.errors;
        self.truncated += other.truncated;
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cached_tokens += other.cached_tokens;
        for (mine, theirs) in self.sketches.iter_mut().zip(&other.sketches) {
            mine.merge(theirs);
        }
    }

    pub fn sketch(&self, sli: LatencySli) -> &DdSketch {
        &self.sketches[sli.slot()]
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RollupError {
    #[error("column {column} of the requests batch has type {found}, expected {expected}")]
    ColumnType {
        column: String,
        found: String,
        expected: &'static str,
    },
    #[error("requests batch has no ts column")]
    MissingTs,
    #[error("rollup encoding is damaged: {0}")]
    Decode(String),
    #[error("zstd: {0}")]
    Compression(String),
    #[error("unknown sli {name:?}; known: {known}")]
    UnknownSli { name: String, known: String },
    #[error("unknown dimension {name:?}; rollups keep: {known}")]
    UnknownDimension { name: String, known: String },
    #[error("invalid sli query: {0}")]
    InvalidQuery(String),
}

impl From<SketchDecodeError> for RollupError {
    fn from(err: SketchDecodeError) -> Self {
        RollupError::Decode(err.to_string())
    }
}

/// The rollup of a set of requests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rollup {
    dimensions: Vec<String>,
    max_combinations: usize,
    combos: Vec<Box<[String]>>,
    combo_index: ComboIndex,
    /// Keyed by (minute start in ns since the epoch, combination id).
    cells: BTreeMap<(i64, u32), Cell>,
    /// The same, merged per hour: a query over whole hours merges 60× fewer cells. Derived
    /// (kept in step on add and merge, rebuilt on decode), never persisted.
    hour_cells: BTreeMap<(i64, u32), Cell>,
    /// Whether `hour_cells` reflect `cells`; queries use minute cells only until [`Rollup::seal`].
    hours_current: bool,
    folded_rows: u64,
}

impl Rollup {
    pub fn new(spec: &RollupSpec) -> Rollup {
        Rollup {
            dimensions: spec.dimensions.clone(),
            max_combinations: spec.max_combinations.max(1),
            ..Rollup::default()
        }
    }

    /// The spec this rollup was built with.
    pub fn spec(&self) -> RollupSpec {
        RollupSpec {
            dimensions: self.dimensions.clone(),
            max_combinations: self.max_combinations,
        }
    }

    pub fn dimensions(&self) -> &[String] {
        &self.dimensions
    }

    /// Rows that fell beyond the combination budget and were folded into [`OTHER`].
    pub fn folded_rows(&self) -> u64 {
        self.folded_rows
    }

    pub fn combinations(&self) -> usize {
        self.combos.len()
    }

    pub fn cell_count(&self) -> usize {
        self.cells.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// Total requests summarized.
    pub fn requests(&self) -> u64 {
        self.cells.values().map(|c| c.requests).sum()
    }

    /// `(first minute, last minute)` start times in ns, if any rows.
    pub fn minute_bounds(&self) -> Option<(i64, i64)> {
        let min = self.cells.keys().map(|k| k.0).min()?;
        let max = self.cells.keys().map(|k| k.0).max()?;
        Some((min, max))
    }
}
