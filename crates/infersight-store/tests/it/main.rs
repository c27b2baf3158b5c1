//! Integration tests of the embedded store, one binary with one module per concern.

mod common;
mod concurrency;
mod durability;
mod flush;
mod maintenance;
mod rollups;
