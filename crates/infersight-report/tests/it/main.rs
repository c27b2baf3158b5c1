//! Integration tests of infersight-report, one binary.

mod knowledge;
mod narrative;
mod render;
mod support;
