//! One folder per stage, named by its verb, each with `config.rs`, `stage.rs` and `tests.rs`.

pub mod redact;
