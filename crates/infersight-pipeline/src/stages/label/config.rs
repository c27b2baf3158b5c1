//! Configuration of the `label` stage (`[stages.label]`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::rules::LabelRule;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LabelConfig {
    pub enabled: bool,
    /// Start from the built-in serving-fault rules (`oom`, `cuda_error`, …).
    pub default_rules: bool,
    /// A TOML (`[[rule]]` tables) or JSON (`{"rule": [...]}`) rules file, added after the defaults.
    pub rules_file: Option<PathBuf>,
    /// Rules given inline in the config, added last.
    pub rules: Vec<LabelRule>,
    /// Templates first seen after this many rows are "new".
    pub warmup_rows: u64,
    /// A new template is flagged once it has this many unlabeled rows.
    pub new_template_min_count: u64,
}

impl Default for LabelConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            default_rules: true,
            rules_file: None,
            rules: Vec::new(),
            warmup_rows: 10_000,
            new_template_min_count: 50,
        }
    }
}

impl LabelConfig {
    pub fn validate(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (index, rule) in self.rules.iter().enumerate() {
            problems.extend(
                rule.validate()
                    .into_iter()
                    .map(|p| format!("rules[{index}].{p}")),
            );
        }
        if self.new_template_min_count == 0 {
            problems.push("new_template_min_count: must be at least 1".into());
        }
        problems
    }
}
