//! Integration tests of infersight-analytics, one binary.

mod detect;
mod localize;
mod rollup;
mod sequence;
mod support;
