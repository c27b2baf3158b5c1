//! Integration tests of infersight-server over a real listener.

// Test code: a failed step should fail the test loudly, so unwrapping is fine here.
#![allow(clippy::unwrap_used)]

mod oidc_login;
mod org_limits;
mod org_surfaces;
mod org_templates;
mod orgs;
mod query_limits;
