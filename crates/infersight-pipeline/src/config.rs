//! Configuration of the pipeline stages (the `[stages]` section of the config file).
//!
//! Layer one is this serde struct (`deny_unknown_fields`, so a typo is an error, not a silently
//! ignored key); layer two is [`StagesConfig::validate`], which returns every problem at once;
//! layer three is the resolved stage objects built by [`crate::Pipeline::from_config`].

use serde::{Deserialize, Serialize};

use crate::stages::label::LabelConfig;
use crate::stages::parse::ParseConfig;
use crate::stages::redact::RedactConfig;
use crate::stages::template::TemplateConfig;

/// Names accepted in `stages.order`, in the default order; each is built by `registry`.
pub const STAGE_NAMES: &[&str] = &["parse", "redact", "template", "label"];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StagesConfig {
    /// Stage names in the order batches flow through them. Must include `redact`: turning
    /// redaction off is an explicit `redact.enabled = false`, never an accidental omission.
    pub order: Vec<String>,
    pub parse: ParseConfig,
    pub redact: RedactConfig,
    pub template: TemplateConfig,
    pub label: LabelConfig,
}

impl Default for StagesConfig {
    fn default() -> Self {
        Self {
            // parse splits prompts out of bodies first; redact runs before anything is mined or
            // stored; label needs the template ids
            order: ["parse", "redact", "template", "label"]
                .map(String::from)
                .to_vec(),
            parse: ParseConfig::default(),
            redact: RedactConfig::default(),
            template: TemplateConfig::default(),
            label: LabelConfig::default(),
        }
    }
}

impl StagesConfig {
    /// Every problem of this configuration, empty when it is usable.
    pub fn validate(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (index, name) in self.order.iter().enumerate() {
            if !STAGE_NAMES.contains(&name.as_str()) {
                problems.push(format!(
                    "stages.order[{index}]: unknown stage `{name}` (known stages: {})",
                    STAGE_NAMES.join(", ")
                ));
            }
            if self.order[..index].contains(name) {
                problems.push(format!(
                    "stages.order[{index}]: stage `{name}` is listed twice"
                ));
            }
        }
        if !self.order.iter().any(|name| name == "redact") {
            problems.push(
                "stages.order: must include `redact`; set `stages.redact.enabled = false` to turn \
                 redaction off"
                    .to_string(),
            );
        }
        problems.extend(
            self.redact
                .validate()
                .into_iter()
                .map(|problem| format!("stages.redact.{problem}")),
        );
        let sections = [
            ("parse", self.parse.validate()),
            ("template", self.template.validate()),
            ("label", self.label.validate()),
        ];
        for (section, section_problems) in sections {
            problems.extend(
                section_problems
                    .into_iter()
                    .map(|problem| format!("stages.{section}.{problem}")),
            );
        }
        let position = |name: &str| self.order.iter().position(|n| n == name);
        if let (Some(template), Some(label)) = (position("template"), position("label"))
            && label < template
        {
            problems.push(
                "stages.order: `label` must come after `template` (template rules need template ids)"
                    .to_string(),
            );
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_is_valid_and_runs_redact() {
        let config = StagesConfig::default();
        assert_eq!(config.order, vec!["parse", "redact", "template", "label"]);
        assert!(config.validate().is_empty());
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let error = serde_json::from_str::<StagesConfig>(r#"{"ordr": []}"#).unwrap_err();
        assert!(error.to_string().contains("unknown field"), "{error}");
    }

    #[test]
    fn validate_reports_every_problem() {
        let config: StagesConfig = serde_json::from_str(
            r#"{"order": ["sample", "sample"],
                "redact": {"custom": [{"name": "", "regex": "("}]}}"#,
        )
        .unwrap();
        let problems = config.validate();
        assert!(
            problems
                .iter()
                .any(|p| p.contains("unknown stage `sample`")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.contains("listed twice")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.contains("must include `redact`")),
            "{problems:?}"
        );
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with("stages.redact.custom[0]")),
            "{problems:?}"
        );
        assert!(problems.len() >= 5, "{problems:?}");
    }
}
