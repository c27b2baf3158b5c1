//! Test-only helpers shared by the workspace's integration tests (never a dependency of a
//! shipped crate): [`chromium`], a small WebDriver client that drives headless Chromium
//! through chromedriver, used by the HTML report test (`infersight-report`) and the web UI's
//! end-to-end test (`infersight`); [`webhook`], a receiver for what `serve` POSTs out, and
//! [`https`], one behind a self-signed certificate for the https clients; [`jwt`], a test
//! identity provider's keys and tokens;
//! [`store`], an in-memory storage backend for the query and root-cause tests; [`fuzz`], the
//! fuzz harnesses' runner; [`seaweedfs`], a real S3 server for segments in a bucket.

// Test-only code: a failed setup step should fail the test loudly, so unwrapping is fine here.
#![allow(clippy::unwrap_used)]

pub mod chromium;
pub mod fuzz;
pub mod https;
pub mod jwt;
pub mod oidc_provider;
pub mod seaweedfs;
pub mod store;
pub mod webhook;
