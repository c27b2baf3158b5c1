//! CLI errors and exit codes: 0 ok, 1 the command or check failed, 2 bad usage or input. Every
//! error is one line on stderr; JSON results go to stdout.

#[derive(Debug)]
pub struct CliError {
    pub code: i32,
    pub message: String,
}

impl CliError {
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            code: 2,
            message: message.into(),
        }
    }

    pub fn failed(message: impl Into<String>) -> Self {
        Self {
            code: 1,
            message: message.into(),
        }
    }

    pub fn from_kind(kind: infersight_model::ErrorKind, message: impl Into<String>) -> Self {
        use infersight_model::ErrorKind::*;
        match kind {
            BadRequest | TooLarge | NotFound => Self::usage(message),
            Unavailable | Internal => Self::failed(message),
        }
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<crate::config::ConfigErrors> for CliError {
    fn from(e: crate::config::ConfigErrors) -> Self {
        Self::usage(e.to_string())
    }
}

/// A report error, with its kind's exit code.
pub fn report_error(error: infersight_report::ReportError) -> CliError {
    CliError::from_kind(error.kind(), error.to_string())
}

/// A root-cause or incident-store error, with its kind's exit code.
pub fn rca_error(error: infersight_rca::RcaError) -> CliError {
    CliError::from_kind(error.kind(), error.to_string())
}
