//! Integration tests of the embedded store, one binary with one module per concern.

// Test code: a failed step should fail the test loudly, so unwrapping is fine here.
#![allow(clippy::unwrap_used)]

mod bucket;
mod common;
mod concurrency;
mod disk_full;
mod durability;
mod flush;
mod integrity;
mod maintenance;
mod rollups;
