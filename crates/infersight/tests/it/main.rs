//! End-to-end tests of the `infersight` binary: CLI commands, the running server over real
//! sockets (OTLP HTTP and gRPC), durability across SIGKILL, backpressure, and a real
//! OpenTelemetry SDK client. One integration-test binary for the crate.

// Test code: a failed step should fail the test loudly, so unwrapping is fine here.
#![allow(clippy::unwrap_used)]

mod actions;
mod audit;
mod auth;
#[cfg(feature = "cluster")]
mod ballista;
mod canary;
mod cli;
mod crash;
mod incidents_api;
mod notify;
mod prometheus;
mod python_otel;
mod query_attacks;
mod rca;
mod redaction;
mod report;
mod scrape;
mod serve_load;
mod server;
mod sli;
mod storage;
mod support;
mod ui;
mod ui_compare;
mod ui_fresh;
mod ui_incidents;
mod ui_login;
mod ui_logs;
mod variations;
mod watch;
