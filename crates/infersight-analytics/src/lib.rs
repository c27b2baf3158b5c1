//! IO-free analytics: quantile sketches and SLIs, anomaly detection, root-cause localization.
//! Takes plain slices and structs, returns plain structs; callers do the reading and writing.

pub mod canary;
pub mod derived;
pub mod detect;
pub mod localize;
pub mod rollup;
pub mod sequence;
pub mod sketch;
pub mod slo;
