//! Integration tests of infersight-query, against an in-memory test double of the store.

// Test code: a failed step should fail the test loudly, so unwrapping is fine here.
#![allow(clippy::unwrap_used)]

#[cfg(feature = "ballista")]
mod ballista;
mod bucket;
mod corruption;
mod errors;
mod group_views;
mod lockdown;
mod metadata_cache;
mod percentiles;
mod pruning;
mod render;
mod route;
mod sql;
mod support;
