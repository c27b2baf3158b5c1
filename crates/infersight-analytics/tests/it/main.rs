//! Integration tests of infersight-analytics, one binary.

// Test code: a failed step should fail the test loudly, so unwrapping is fine here.
#![allow(clippy::unwrap_used)]

mod canary;
mod detect;
mod localize;
mod sequence;
mod support;
