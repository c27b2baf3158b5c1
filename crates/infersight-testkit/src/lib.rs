//! Test-only helpers shared by the workspace's integration tests (never a dependency of a
//! shipped crate): [`chromium`], a small WebDriver client that drives headless Chromium
//! through chromedriver, used by the HTML report test (`infersight-report`) and the web UI's
//! end-to-end test (`infersight`); [`webhook`], a receiver for what `serve` POSTs out.

pub mod chromium;
pub mod webhook;
