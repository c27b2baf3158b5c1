//! The network surfaces of infersight: the HTTP API with `/healthz` and `/metrics`, the ingest
//! queue that connects the receivers (from `infersight-ingest`) to the store, and `serve`, which
//! runs them all.

pub mod actions;
pub mod alerts;
pub mod api;
pub mod auth;
pub mod errors;
pub mod held;
pub mod incidents;
pub mod notify;
pub mod org_watch;
pub mod periodic;
pub mod process_state;
pub mod queue;
pub mod reports;
pub mod resume;
pub mod role;
pub mod serve;
pub mod sli_metrics;
pub mod state;
pub mod timeline;
pub mod tls;
pub mod ui;
pub mod webhook;

pub use queue::IngestQueue;
pub use serve::{BoundAddrs, ServeError, ServeSettings, serve};
