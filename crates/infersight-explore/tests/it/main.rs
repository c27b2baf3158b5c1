//! Integration tests of infersight-explore, against an in-memory test double of the store.

// Test code: a failed step should fail the test loudly, so unwrapping is fine here.
#![allow(clippy::unwrap_used)]

mod derived;
mod dimensions;
mod freshness;
mod support;
