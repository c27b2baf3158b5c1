//! Integration tests of infersight-rca, one binary, against the in-memory test store of
//! `infersight-testkit`.

// Test code: a failed step should fail the test loudly, so unwrapping is fine here.
#![allow(clippy::unwrap_used)]

mod fleets;
mod incidents;
mod load;
mod logs;
mod memory;
mod pollution;
mod predict;
mod prompts;
mod sampling;
mod slices;
mod support;
mod traces;
mod watch;
