//! Integration tests of infersight-analytics, one binary.

mod canary;
mod detect;
mod localize;
mod rollup;
mod sequence;
mod support;
