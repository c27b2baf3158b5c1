//! Integration tests of the pipeline crate: one binary, one module per concern.

mod loghub;
mod loghub_score;
mod pipeline;
mod real_logs;
mod vllm_parse;
