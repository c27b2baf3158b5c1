//! Tests of the report's narrative module.
