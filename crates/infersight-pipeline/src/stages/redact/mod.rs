//! The `redact` stage: replaces personal data and secrets in every free-text and JSON column with
//! typed placeholders (`<EMAIL>`, `<CARD>`, …) or keyed hashes (`<EMAIL:h:…>`), or drops them, per
//! path rule, before a batch reaches the store; and records what it did in the `redactions` table.
//!
//! [`Redactor`] is the reusable engine (also for our own logs); [`RedactStage`] applies it to the
//! canonical tables and emits the audit; `detectors` holds the patterns and their validators
//! (Luhn, MOD 11-2, …); `config` the section, its path rules and their validation.

mod config;
mod detectors;
mod redactor;
mod stage;

pub use config::{
    CustomPattern, DetectorName, MIN_SECRET_BYTES, PathRule, RedactAction, RedactConfig,
    ReplacementStyle,
};
pub use redactor::{HASH_HEX_LEN, JsonScreen, Redactor};
pub use stage::{AUDIT_BUCKET_NS, RedactReload, RedactStage};

#[cfg(test)]
mod tests;
