//! Integration tests of infersight-model: one binary, one module per concern.

// Test code: a failed step should fail the test loudly, so unwrapping is fine here.
#![allow(clippy::unwrap_used)]

mod fuzz;
