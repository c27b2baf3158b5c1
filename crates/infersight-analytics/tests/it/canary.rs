//! Canary gate tests.
