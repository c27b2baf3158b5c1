//! Test-only helpers shared by the workspace's integration tests (never a dependency of a
//! shipped crate). Today: [`chromium`], a small WebDriver client that drives headless Chromium
//! through chromedriver, used by the HTML report test (`infersight-report`) and the web UI's
//! end-to-end test (`infersight`).

pub mod chromium;
