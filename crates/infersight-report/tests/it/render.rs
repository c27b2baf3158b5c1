//! Tests of the report's render module.
