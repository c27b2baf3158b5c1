//! The query layer of infersight and the only crate that depends on DataFusion. It serves the six
//! canonical tables of a [`StorageBackend`](infersight_store::StorageBackend) to SQL: each table is
//! a [`TableProvider`](datafusion::catalog::TableProvider) that turns `ts` filters into a time
//! range, asks the store for a snapshot, and scans the snapshot's Parquet segments and memtable
//! batches as one plan. Analytics, reports, the HTTP API and the CLI query through [`QueryEngine`]; the applications
//! over it (root-cause analysis in `infersight-rca`, dimensions, SLIs and canary samples in
//! `infersight-explore`) live in their own crates.
//!
//! Percentiles use DataFusion 55's syntax; both forms work:
//! `approx_percentile_cont(0.99) WITHIN GROUP (ORDER BY e2e_ms)` (or the older
//! `approx_percentile_cont(e2e_ms, 0.99)`) for the t-digest estimate, and
//! `percentile_cont(0.99) WITHIN GROUP (ORDER BY e2e_ms)` (or `percentile_cont(e2e_ms, 0.99)`)
//! and `median(e2e_ms)` for exact values.

pub mod audit;
#[cfg(feature = "ballista")]
pub mod ballista;
mod checked_reader;
mod dictionary_keys;
mod engine;
mod error;
mod folds;
mod group_views;
mod limits;
mod output;
mod percentile;
mod provider;
mod range;
mod route;
mod scope;
mod scoped_store;
mod udf;
mod view_aggregate;

pub use audit::{AccessAudit, AccessContext, AuditStatus, AuditedQuery, Surface};
pub use engine::{BatchStream, QueryEngine};
pub use error::QueryError;
pub use limits::{CallerPermit, CallerSlots, QueryCounts, QueryLimits};
pub use output::{OutputFormat, QueryOutput};
pub use provider::ScanStats;
pub use range::time_range_from_filters;
pub use route::PlanRoute;
pub use scope::OrgScope;
pub use udf::{JSON_GET, json_get_udf, json_get_value, value_text};
