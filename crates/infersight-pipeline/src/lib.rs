//! The ingest pipeline: receivers hand canonical [`TableBatch`]es to a [`Pipeline`], which runs them
//! through synchronous [`Stage`]s (`parse`, `redact`, `template`, `label`) before the store persists
//! them.
//!
//! Personal data must never reach storage or one of our own logs, so `redact` runs on every batch
//! and [`Redactor`] is also usable on its own by any crate that is about to log user text.
//!
//! Layout: [`stage`] holds the trait, the counters and the runner, [`registry`] the one closed list
//! of stages, [`config`] the serde configuration, `stages/<verb>/` one folder per stage, and
//! [`writer`] the one ingest runtime ([`BatchWriter`]: stages → store append → counters) that
//! `serve` and `infersight ingest` share.
//!
//! [`TableBatch`]: infersight_model::TableBatch

pub mod config;
pub mod error;
pub mod registry;
pub mod stage;
pub mod stages;
pub mod writer;

pub use config::STAGE_NAMES;
pub use config::StagesConfig;
pub use error::PipelineError;
pub use registry::build_stage;
pub use stage::{Pipeline, Stage, StageCounters};
pub use stages::label::{LabelConfig, LabelRule, LabelRules, LabelStage};
pub use stages::parse::{LogClass, ParseConfig, ParseStage, ParsedLine, parse_line};
pub use stages::redact::{
    CustomPattern, DetectorName, PathRule, RedactAction, RedactConfig, RedactReload, RedactStage,
    Redactor, ReplacementStyle,
};
pub use stages::template::{
    LogFormat, MinedLine, MinerConfig, TemplateConfig, TemplateInfo, TemplateStage, TemplateStore,
    mine_lines,
};
pub use writer::{BatchWriter, WriteError};
