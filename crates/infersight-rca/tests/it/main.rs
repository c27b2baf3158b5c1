//! Integration tests of infersight-rca, one binary, against the in-memory test store of
//! `infersight-testkit`.

mod logs;
mod prompts;
mod support;
