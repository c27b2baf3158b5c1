//! Integration tests of the simulator, all checked from the emitted telemetry (OTLP parsed back
//! and normalized through the real mapping table), never from simulator internals: determinism,
//! file output, realism of the latency model and arrivals, and every scenario's injected effect.

// Test code: a failed step should fail the test loudly, so unwrapping is fine here.
#![allow(clippy::unwrap_used)]

mod determinism;
mod realism;
mod scenarios;
mod support;
mod tokens;
mod variations;
