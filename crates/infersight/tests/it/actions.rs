//! End-to-end tests of `infersight actions`.
