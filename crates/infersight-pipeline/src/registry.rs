//! The one closed registry of stages: every stage the pipeline can run is listed here, by the
//! verb that names its folder under `stages/`. No plugin magic: adding a stage means adding a line.

use crate::config::StagesConfig;
use crate::error::PipelineError;
use crate::stage::{Pipeline, Stage};
use crate::stages::label::LabelStage;
use crate::stages::parse::ParseStage;
use crate::stages::redact::RedactStage;
use crate::stages::template::TemplateStage;

pub use crate::config::STAGE_NAMES;

/// Builds the stage called `name` from its section of `config`.
pub fn build_stage(name: &str, config: &StagesConfig) -> Result<Box<dyn Stage>, PipelineError> {
    match name {
        "parse" => {
            let stage = ParseStage::new(&config.parse)?;
            let position = |name: &str| config.order.iter().position(|n| n == name);
            let redacted_later = config.redact.enabled && position("redact") > position("parse");
            Ok(Box::new(if redacted_later {
                stage.deferring_redaction()
            } else {
                stage
            }))
        }
        "redact" => Ok(Box::new(RedactStage::new(&config.redact)?)),
        "template" => Ok(Box::new(TemplateStage::new(&config.template)?)),
        "label" => Ok(Box::new(LabelStage::new(&config.label)?)),
        other => Err(PipelineError::UnknownStage {
            name: other.to_string(),
            known: STAGE_NAMES.join(", "),
        }),
    }
}

impl Pipeline {
    /// Validates the configuration (reporting every problem at once) and builds the stages named
    /// in `config.order` through the registry.
    pub fn from_config(config: &StagesConfig) -> Result<Self, PipelineError> {
        let problems = config.validate();
        if !problems.is_empty() {
            return Err(PipelineError::InvalidConfig(problems));
        }
        let stages = config
            .order
            .iter()
            .map(|name| build_stage(name, config))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::new(stages))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_stage_builds_with_defaults() {
        let config = StagesConfig::default();
        for name in STAGE_NAMES {
            assert_eq!(build_stage(name, &config).unwrap().name(), *name);
        }
        assert!(matches!(
            build_stage("sample", &config),
            Err(PipelineError::UnknownStage { .. })
        ));
    }
}
