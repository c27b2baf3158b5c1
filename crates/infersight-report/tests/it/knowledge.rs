//! Tests of the report's knowledge module.
