//! The `template` stage: mines the `body` of log rows into templates (`template_id`, `params`)
//! with an online Drain-family miner, and keeps the templates in a persisted store.
//!
//! Flow inside: `format` splits headers off raw lines (CLI path; bodies arriving through the
//! pipeline are already content), `mask` masks typed variables per token, `fold` joins a
//! parameter written as several tokens into one, `miner` routes the masked tokens through the
//! prefix tree, `store` persists templates with stable ids, and
//! `stage` applies it all to `logs` batches.

mod config;
mod fold;
mod format;
mod mask;
mod miner;
mod stage;
mod store;

pub use config::{MinerConfig, TemplateConfig};
pub use format::{DetectedHeader, LOGHUB_FORMATS, LogFormat, SplitLine, detect_header};
pub use mask::{ParamType, WILDCARD, mask_token, param_type};
pub use miner::{ClusterRef, Compaction, Miner, template_hash};
pub use stage::TemplateStage;
pub use store::{
    MinedLine, STORE_VERSION, TemplateInfo, TemplateStore, line_content, mine_lines,
    mine_lines_into,
};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod unseen_tests;
