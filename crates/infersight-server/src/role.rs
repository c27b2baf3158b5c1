//! What one `serve` process does in a cluster (issue 21): `all` (the default, one node doing
//! everything), `ingest` (receivers and scrapers; flushes to the shared bucket), `query` (the
//! API, UI, watcher, alerts and actions over the bucket's catalog) or `compact` (merges,
//! expires and garbage-collects the bucket's segments). `serve` binds, routes and starts loops
//! by it; a node outside its role's work answers /healthz, /metrics and /api/v1/stats only.

use std::str::FromStr;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    #[default]
    All,
    Ingest,
    Query,
    Compact,
}

impl Role {
    pub const NAMES: &'static str = "all, ingest, query, compact";

    pub fn name(self) -> &'static str {
        match self {
            Role::All => "all",
            Role::Ingest => "ingest",
            Role::Query => "query",
            Role::Compact => "compact",
        }
    }

    /// Binds the OTLP listeners and runs the scrapers.
    pub fn receives(self) -> bool {
        matches!(self, Role::All | Role::Ingest)
    }

    /// Serves the query API and the UI and runs the watcher, SLO alerts and actions.
    pub fn answers_queries(self) -> bool {
        matches!(self, Role::All | Role::Query)
    }

    /// Merges, expires and garbage-collects the bucket's segments.
    pub fn maintains_bucket(self) -> bool {
        matches!(self, Role::All | Role::Compact)
    }

    /// What the node answers instead, for the message of a route outside its role.
    pub(crate) fn elsewhere(self) -> &'static str {
        match self {
            Role::Ingest => "it receives telemetry; ask a query node",
            Role::Compact => "it maintains the bucket; ask a query node",
            Role::All | Role::Query => "",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(text: &str) -> Result<Role, String> {
        match text {
            "all" => Ok(Role::All),
            "ingest" => Ok(Role::Ingest),
            "query" => Ok(Role::Query),
            "compact" => Ok(Role::Compact),
            other => Err(format!("unknown role `{other}` (one of {})", Role::NAMES)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_role_parses_from_its_name_and_each_part_of_the_work_has_one_role_besides_all() {
        for role in [Role::All, Role::Ingest, Role::Query, Role::Compact] {
            assert_eq!(role.name().parse::<Role>(), Ok(role));
        }
        let err = "reader".parse::<Role>().unwrap_err();
        assert!(err.contains("reader") && err.contains(Role::NAMES), "{err}");
        let only = |work: fn(Role) -> bool| -> Vec<Role> {
            [Role::Ingest, Role::Query, Role::Compact]
                .into_iter()
                .filter(|r| work(*r))
                .collect()
        };
        assert_eq!(only(Role::receives), [Role::Ingest]);
        assert_eq!(only(Role::answers_queries), [Role::Query]);
        assert_eq!(only(Role::maintains_bucket), [Role::Compact]);
        assert!(
            Role::All.receives() && Role::All.answers_queries() && Role::All.maintains_bucket()
        );
    }
}
