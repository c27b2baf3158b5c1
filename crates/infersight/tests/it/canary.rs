//! End-to-end tests of `infersight canary`.
