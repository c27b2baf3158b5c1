//! Roles: what a caller may do, from its token (or the role given to a trusted proxy's users).
//! `viewer < analyst < operator < admin` is one ladder, each role holding every right below it;
//! `ingest` stands apart: it may only push telemetry to the OTLP receivers.
//!
//! Why a separate `ingest` role: an exporter's token sits in the environment of every pod that
//! exports (`OTEL_EXPORTER_OTLP_HEADERS`), so it is the token most likely to leak. With `ingest`
//! a leaked exporter token can add data but read none of the prompts, users and verdicts already
//! stored. `admin` may ingest too (one token for a test or a single-person setup).

use serde::{Deserialize, Serialize};

/// A caller's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Pushes OTLP telemetry; reads nothing.
    Ingest,
    /// Dashboards, SLIs, SLOs and alerts, incidents and their reports.
    Viewer,
    /// A viewer who also runs SQL, dimension discovery (explore) and root-cause analyses.
    Analyst,
    /// An analyst who also confirms and rejects incidents (and, later, takes actions).
    Operator,
    /// Everything, including tokens and configuration.
    Admin,
}

impl Role {
    /// Every role, in the order `infersight tokens` lists them.
    pub const ALL: [Role; 5] = [
        Role::Ingest,
        Role::Viewer,
        Role::Analyst,
        Role::Operator,
        Role::Admin,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Role::Ingest => "ingest",
            Role::Viewer => "viewer",
            Role::Analyst => "analyst",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    /// A role by name, or an error listing the names.
    pub fn parse(text: &str) -> Result<Role, String> {
        Role::ALL
            .into_iter()
            .find(|role| role.name() == text.trim())
            .ok_or_else(|| {
                format!(
                    "`{text}` is not a role; use one of {}",
                    Role::ALL.map(Role::name).join(", ")
                )
            })
    }

    /// The ladder's rank; `None` for `ingest`, which is not on it.
    pub(crate) fn rank(self) -> Option<u8> {
        match self {
            Role::Ingest => None,
            Role::Viewer => Some(1),
            Role::Analyst => Some(2),
            Role::Operator => Some(3),
            Role::Admin => Some(4),
        }
    }

    /// Whether a caller with this role may do what `required` may.
    pub fn grants(self, required: Role) -> bool {
        match (self.rank(), required.rank()) {
            (Some(have), Some(need)) => have >= need,
            // only ingest and admin push telemetry
            (_, None) => matches!(self, Role::Ingest | Role::Admin),
            // ingest reads nothing
            (None, Some(_)) => false,
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a route asks of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone, even unauthenticated: health checks and the UI's static files (no data).
    Public,
    /// An authenticated caller whose role grants this one.
    Role(Role),
}

impl Access {
    pub fn describe(self) -> String {
        match self {
            Access::Public => "public".to_string(),
            Access::Role(role) => role.name().to_string(),
        }
    }
}
