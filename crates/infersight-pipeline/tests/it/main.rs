//! Integration tests of the pipeline crate: one binary, one module per concern.

// Test code: a failed step should fail the test loudly, so unwrapping is fine here.
#![allow(clippy::unwrap_used)]

mod fuzz;
mod loghub;
mod loghub_score;
mod pipeline;
mod real_logs;
mod vllm_parse;
