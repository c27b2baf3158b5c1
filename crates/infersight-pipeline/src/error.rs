//! Errors of the pipeline crate. Each maps onto an [`ErrorKind`] so the edges (HTTP, gRPC, CLI)
//! answer consistently: configuration problems are the caller's fault, batch problems are ours.

use infersight_model::{ErrorKind, ModelError};

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// Every problem `validate()` found, reported at once.
    #[error("invalid pipeline config: {}", .0.join("; "))]
    InvalidConfig(Vec<String>),
    #[error("unknown stage `{name}` (known stages: {known})")]
    UnknownStage { name: String, known: String },
    #[error("column `{column}` of table `{table}`: {reason}")]
    Column {
        table: &'static str,
        column: String,
        reason: String,
    },
    #[error("stage `{stage}` failed: {reason}")]
    Stage { stage: &'static str, reason: String },
    #[error("invalid log format `{spec}`: {reason}")]
    LogFormat { spec: String, reason: String },
    #[error("template store `{path}`: {reason}")]
    TemplateStore { path: String, reason: String },
    #[error("invalid label rules: {0}")]
    LabelRules(String),
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    #[error(transparent)]
    Model(#[from] ModelError),
}

impl PipelineError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            PipelineError::InvalidConfig(_)
            | PipelineError::UnknownStage { .. }
            | PipelineError::LogFormat { .. }
            | PipelineError::LabelRules(_) => ErrorKind::BadRequest,
            PipelineError::TemplateStore { .. } => ErrorKind::Internal,
            PipelineError::Column { .. }
            | PipelineError::Stage { .. }
            | PipelineError::Arrow(_) => ErrorKind::Internal,
            PipelineError::Model(error) => error.kind(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_lowercase_and_kinds_map() {
        let error = PipelineError::InvalidConfig(vec!["a".into(), "b".into()]);
        assert_eq!(error.to_string(), "invalid pipeline config: a; b");
        assert_eq!(error.kind(), ErrorKind::BadRequest);
        let error = PipelineError::UnknownStage {
            name: "x".into(),
            known: "redact".into(),
        };
        assert_eq!(
            error.to_string(),
            "unknown stage `x` (known stages: redact)"
        );
        let error = PipelineError::Column {
            table: "logs",
            column: "body".into(),
            reason: "expected utf8".into(),
        };
        assert_eq!(error.kind(), ErrorKind::Internal);
        assert!(error.to_string().starts_with("column `body`"));
    }
}
