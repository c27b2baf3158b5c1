//! Integration tests of infersight-rollup, one binary.

// Test code: a failed step should fail the test loudly, so unwrapping is fine here.
#![allow(clippy::unwrap_used)]

mod accuracy;
mod sampling;
