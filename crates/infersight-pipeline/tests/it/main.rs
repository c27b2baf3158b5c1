//! Integration tests of the pipeline crate: one binary, one module per concern.

mod pipeline;
mod real_logs;
