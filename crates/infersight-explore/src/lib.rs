//! The questions users ask of the fleet besides "why": which attributes of `requests` slice it
//! ([`dimensions`]), SLI series from the store's rollups ([`sli`]), derived SLIs from raw rows
//! ([`derived`]), the per-request samples a canary gate compares ([`canary`]) and how fresh the
//! stored data is, per source ([`freshness`]). It sits above
//! `infersight-query` (whose SQL engine and partitioned scans it uses) and beside
//! `infersight-rca`; the HTTP API, the CLI and the actions engine call it.

pub mod canary;
pub mod derived;
pub mod dimensions;
pub mod freshness;
pub mod sli;

pub use derived::derived_slis;
pub use dimensions::{Dimension, DimensionKind, DimensionSource, discover_dimensions};
pub use freshness::{Freshness, freshness};
pub use sli::{
    SliAnswer, SliRequest, SliRequestText, answer_sli, parse_filter, parse_quantile, sli,
};
