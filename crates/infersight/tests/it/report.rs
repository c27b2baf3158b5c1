//! End-to-end tests of `infersight report`.
