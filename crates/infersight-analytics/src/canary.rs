//! Canary gate: compares an SLI (a quantile, a mean or a rate) between a baseline and a candidate
//! sample with seeded bootstrap confidence intervals and decides pass or block. IO-free; the query
//! layer fetches the samples.
