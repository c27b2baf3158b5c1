//! Integration tests of infersight-rollup, one binary.

mod accuracy;
