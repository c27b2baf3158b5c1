//! Canary samples: reads the per-request values of an SLI (a column or a numeric attribute) for a
//! baseline and a candidate value of a dimension, for the gate in `infersight-analytics::canary`.
