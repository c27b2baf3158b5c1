//! The `label` stage: the last content stage before storage. It gives every log row an intent
//! label (`oom`, `cuda_error`, `timeout`, …) with a confidence, from a rules file of keywords,
//! template ids and field values, and flags templates that are new and suddenly frequent.
//!
//! `rules` holds the rule model, the default serving-fault rules and the matcher; `stage` applies
//! it to batches after `template` has filled `template_id`.

mod config;
mod rules;
mod stage;

pub use config::LabelConfig;
pub use rules::{LabelRule, LabelRules, NEW_TEMPLATE_LABEL, default_rules};
pub use stage::LabelStage;

#[cfg(test)]
mod tests;
