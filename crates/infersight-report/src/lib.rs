//! The last step of the data flow: an RCA verdict (from `infersight-rca`) becomes a report a
//! person acts on — knowledge-base retrieval over `knowledge/` runbooks and past incidents, charts
//! drawn from the store, an optional LLM narrative — rendered as JSON, Markdown or one HTML file.

pub mod charts;
pub mod data;
pub mod document;
pub mod error;
pub mod format;
pub mod knowledge;
pub mod lead;
pub mod narrative;
pub mod privacy;
pub mod render;
pub mod report;
pub mod tls;

pub use document::{Advice, Report};
pub use error::ReportError;
pub use report::{ReportConfig, ReportFormat};
