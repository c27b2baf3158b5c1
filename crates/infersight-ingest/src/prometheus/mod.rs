//! Prometheus scrape, protocol layer: the text exposition format 0.0.4 (and the OpenMetrics text
//! subset inference engines emit) is parsed into metric families ([`parse`]), then turned into an
//! OTLP `ExportMetricsServiceRequest` ([`convert`]) so that `metrics_to_batches` normalizes names
//! and labels once for both the OTLP receivers and the scrape receiver
//! (`receivers::prom_scrape`).

pub mod convert;
pub mod parse;

pub use convert::{ScrapedRequest, exposition_to_otlp, health_metrics};
pub use parse::{
    Exposition, ExpositionError, Family, HistogramSeries, MetricType, ParseWarning, Sample,
    SummarySeries, parse,
};
