//! Canonical records of infersight: the six tables every receiver writes and every engine reads,
//! their versioned Arrow schemas, the one attribute-mapping table, and the errors shared by all crates.
//!
//! Data flow: receivers decode a protocol into [`AttrValue`] key/values, [`normalize`] maps them onto
//! the canonical columns with [`mapping`], the records are packed into Arrow batches with the
//! builders in [`tables`], and the store persists those batches unchanged.

pub mod append;
pub mod attrs;
pub mod breakdown;
pub mod durable;
pub mod error;
pub mod log_prefix;
pub mod mapping;
pub mod normalize;
pub mod notice;
pub mod org;
pub mod rng;
pub mod scan;
pub mod signal;
pub mod tables;
pub mod telemetry;
pub mod time;
pub mod value;

pub use error::{ErrorKind, ModelError};
pub use tables::{
    LogRecord, MetricRecord, RedactionRecord, RequestRecord, SCHEMA_VERSION, SpanRecord, Table,
    TableBatch, TemplateRecord, TokenRecord,
};
pub use value::AttrValue;
