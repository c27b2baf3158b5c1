//! The one table of the API port's routes and what each asks of its caller. The router
//! (`api::router`, with `incidents::routes` and `ui::routes` merged in) and this table must list
//! the same paths: the authorization layer answers 500 for a matched path the table lacks (it
//! fails closed, the handler never runs), and a test reads the built router's paths and fails on
//! any route without a row here. A method the table does not list for a path is answered 405.

use axum::http::Method;

use super::role::{Access, Role};

/// One route: method and path pattern (as given to axum's `route`), who may call it, and whether
/// a call is written to the access audit (`true` for everything that reads or changes stored
/// data; `/api/v1/query` writes its own, richer line).
#[derive(Debug, Clone, Copy)]
pub struct RouteRule {
    pub method: &'static str,
    pub path: &'static str,
    pub access: Access,
    pub audit: Audit,
}

/// How a call of a route reaches the access audit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audit {
    /// Not audited: health, metrics scrapes, static files, configuration state.
    No,
    /// One line per call by the authorization layer: who, which route, the outcome.
    Call,
    /// The handler writes its own line (SQL: the tables and columns read).
    Handler,
}

const fn rule(method: &'static str, path: &'static str, access: Access, audit: Audit) -> RouteRule {
    RouteRule {
        method,
        path,
        access,
        audit,
    }
}

const VIEWER: Access = Access::Role(Role::Viewer);
const ANALYST: Access = Access::Role(Role::Analyst);
const OPERATOR: Access = Access::Role(Role::Operator);

/// The routes whose calls run statements over stored rows (SQL, dimension discovery,
/// root-cause analysis): each holds a slot of every limited org it reads while it runs
/// (`[auth.orgs.<org>] max_concurrent_queries`).
const STATEMENT_ROUTES: &[(&str, &str)] = &[
    ("POST", "/api/v1/query"),
    ("GET", "/api/v1/dimensions"),
    ("POST", "/api/v1/rca"),
];

/// Whether a call of `rule` runs statements (see [`STATEMENT_ROUTES`]).
pub fn runs_statements(rule: &RouteRule) -> bool {
    STATEMENT_ROUTES
        .iter()
        .any(|(method, path)| *method == rule.method && *path == rule.path)
}

/// Every route of the API port. Add a row here with every new route.
pub const ROUTES: &[RouteRule] = &[
    rule("GET", "/healthz", Access::Public, Audit::No),
    // Prometheus scrapes with a viewer token (`authorization.credentials` in its scrape config)
    rule("GET", "/metrics", VIEWER, Audit::No),
    rule("POST", "/api/v1/query", ANALYST, Audit::Handler),
    // dimension discovery is the explore page: attribute values, possibly personal ones
    rule("GET", "/api/v1/dimensions", ANALYST, Audit::Call),
    rule("GET", "/api/v1/sli", VIEWER, Audit::Call),
    rule("GET", "/api/v1/sli/derived", VIEWER, Audit::Call),
    // runs an analysis over stored data and stores its verdict as an incident
    rule("POST", "/api/v1/rca", ANALYST, Audit::Call),
    rule("GET", "/api/v1/slo", VIEWER, Audit::No),
    rule("GET", "/api/v1/alerts", VIEWER, Audit::No),
    rule("GET", "/api/v1/actions", VIEWER, Audit::No),
    // the store's statistics, or the caller's orgs' row counts (read through SQL): a read
    rule("GET", "/api/v1/stats", VIEWER, Audit::Call),
    // when each source last sent data (names of services and workers, no values)
    rule("GET", "/api/v1/freshness", VIEWER, Audit::No),
    rule("GET", "/api/v1/incidents", VIEWER, Audit::Call),
    rule("GET", "/api/v1/incidents/{id}", VIEWER, Audit::Call),
    rule("GET", "/api/v1/incidents/{id}/report", VIEWER, Audit::Call),
    rule(
        "POST",
        "/api/v1/incidents/{id}/confirm",
        OPERATOR,
        Audit::Call,
    ),
    rule(
        "POST",
        "/api/v1/incidents/{id}/reject",
        OPERATOR,
        Audit::Call,
    ),
    // the UI's login (`auth::session`): a login checks its token itself; who is logged in
    rule("POST", "/api/v1/session", Access::Public, Audit::No),
    rule("DELETE", "/api/v1/session", Access::Public, Audit::No),
    rule("GET", "/api/v1/session", VIEWER, Audit::No),
    // the login through the identity provider (`auth::oidc_login`): it checks what comes back
    rule("GET", "/api/v1/session/methods", Access::Public, Audit::No),
    rule(
        "GET",
        "/api/v1/session/oidc/login",
        Access::Public,
        Audit::No,
    ),
    rule(
        "GET",
        "/api/v1/session/oidc/callback",
        Access::Public,
        Audit::No,
    ),
    // the UI's page and static files hold no data; its API calls are checked one by one
    rule("GET", "/", Access::Public, Audit::No),
    rule("GET", "/ui/{name}", Access::Public, Audit::No),
];

/// What the table says of a request to a matched path.
#[derive(Debug, Clone, Copy)]
pub enum Lookup {
    Rule(&'static RouteRule),
    /// The path is in the table, not with this method.
    MethodNotListed,
    /// The path is not in the table: a route without a declared role.
    Undeclared,
}

/// The rule of `method` on the matched `path` pattern (HEAD is answered as GET, as axum does).
pub fn lookup(method: &Method, path: &str) -> Lookup {
    let method = if method == Method::HEAD {
        "GET"
    } else {
        method.as_str()
    };
    let mut path_known = false;
    for rule in ROUTES.iter().filter(|r| r.path == path) {
        path_known = true;
        if rule.method == method {
            return Lookup::Rule(rule);
        }
    }
    if path_known {
        Lookup::MethodNotListed
    } else {
        Lookup::Undeclared
    }
}
