//! Integration tests of infersight-analytics, one binary.

mod canary;
mod detect;
mod localize;
mod sequence;
mod support;
