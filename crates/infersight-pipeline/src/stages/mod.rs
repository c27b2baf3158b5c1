//! One folder per stage, named by its verb, each with `config.rs`, `stage.rs` and `tests.rs`.
//! Recommended order: `parse` → `redact` → `template` → `label`.

pub mod label;
pub mod parse;
pub mod redact;
pub mod template;
