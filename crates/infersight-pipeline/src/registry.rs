//! The one closed registry of stages: every stage the pipeline can run is listed here, by the
//! verb that names its folder under `stages/`. No plugin magic: adding a stage means adding a line.

use crate::config::StagesConfig;
use crate::error::PipelineError;
use crate::stage::{Pipeline, Stage};
use crate::stages::label::LabelStage;
use crate::stages::parse::ParseStage;
use std::sync::Arc;

use crate::stages::redact::{RedactReload, RedactStage};
use crate::stages::template::TemplateStage;

pub use crate::config::STAGE_NAMES;

/// Builds the stage called `name` from its section of `config`.
pub fn build_stage(name: &str, config: &StagesConfig) -> Result<Box<dyn Stage>, PipelineError> {
    build_stage_reloading(name, config, None)
}

/// [`build_stage`], the redact stage taking new rules from `redact_reload` when given.
pub fn build_stage_reloading(
    name: &str,
    config: &StagesConfig,
    redact_reload: Option<&Arc<RedactReload>>,
) -> Result<Box<dyn Stage>, PipelineError> {
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
        "redact" => {
            let stage = RedactStage::new(&config.redact)?;
            Ok(Box::new(match redact_reload {
                Some(reload) => stage.reloaded_by(Arc::clone(reload)),
                None => stage,
            }))
        }
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
        Self::from_config_reloading(config, None)
    }

    /// [`Pipeline::from_config`] whose redact stage takes new rules from `redact_reload`.
    pub fn from_config_reloading(
        config: &StagesConfig,
        redact_reload: Option<&Arc<RedactReload>>,
    ) -> Result<Self, PipelineError> {
        let problems = config.validate();
        if !problems.is_empty() {
            return Err(PipelineError::InvalidConfig(problems));
        }
        let stages = config
            .order
            .iter()
            .map(|name| build_stage_reloading(name, config, redact_reload))
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
