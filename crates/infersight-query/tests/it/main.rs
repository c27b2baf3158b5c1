//! Integration tests of infersight-query, against an in-memory test double of the store.

mod derived;
mod dimensions;
mod errors;
mod percentiles;
mod pruning;
mod render;
mod sql;
mod support;
