//! Integration tests of the cluster's catalog log and leases on `InMemory` and `LocalFileSystem`
//! (and, with the `s3` feature, on real S3 servers): racing committers, 412 handling, replay from
//! checkpoints, lease takeover and fencing, and a property test against a model of the catalog.

// Test code: a failed step should fail the test loudly, so unwrapping is fine here.
#![allow(clippy::unwrap_used)]

mod catalog;
mod lease;
mod model;
#[cfg(feature = "s3")]
mod s3;
mod segments;
mod support;
