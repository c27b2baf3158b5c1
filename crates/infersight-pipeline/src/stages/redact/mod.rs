//! The `redact` stage: replaces personal data and secrets in every free-text and JSON column with
//! typed placeholders (`<EMAIL>`, `<CARD>`, …) before a batch reaches the store.
//!
//! [`Redactor`] is the reusable engine (also for our own logs); [`RedactStage`] applies it to the
//! canonical tables; `detectors` holds the patterns and their validators (Luhn, MOD 11-2, …).

mod config;
mod detectors;
mod redactor;
mod stage;

pub use config::{CustomPattern, DetectorName, RedactConfig, ReplacementStyle};
pub use redactor::Redactor;
pub use stage::RedactStage;

#[cfg(test)]
mod tests;
