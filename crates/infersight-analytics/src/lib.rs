//! IO-free analytics: anomaly detection, root-cause localization, log sequences, derived SLIs,
//! SLOs and the canary gate, over rollups (`infersight-rollup`) and plain slices.
//! Takes plain slices and structs, returns plain structs; callers do the reading and writing.

pub mod canary;
pub mod derived;
pub mod detect;
pub mod localize;
pub mod sequence;
pub mod slo;
