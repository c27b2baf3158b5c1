//! Which orgs' rows a query session sees ([`OrgScope`]), enforced inside the table providers
//! (`provider::StoreTable::scan`): every scan of a scoped session ends in a filter on the `org`
//! column (`infersight_model::org`) before any operator of the statement sees a row, so joins,
//! CTEs, UNIONs, subqueries and `json_get` over any table only ever read the scope's rows, and
//! no SQL text is rewritten. The filter sits above the scan, so an exact row count kept in a
//! segment's statistics cannot answer `count(*)` for the whole table either.
//!
//! Rows stored before the `org` column existed hold null there and belong to
//! [`DEFAULT_ORG`](infersight_model::org::DEFAULT_ORG).

use datafusion::logical_expr::Expr;
use datafusion::prelude::{col, lit};
use infersight_model::org::{DEFAULT_ORG, ORG_COLUMN};

/// The orgs a query session reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrgScope {
    /// Every org: the zero-config single tenant, and the server's own engines (watcher, RCA).
    All,
    /// Only these orgs' rows (none: no row at all).
    Only(Vec<String>),
}

impl OrgScope {
    /// One org.
    pub fn org(org: &str) -> OrgScope {
        OrgScope::Only(vec![org.to_string()])
    }

    /// The orgs of an [`OrgScope::Only`]; `None` for [`OrgScope::All`].
    pub fn orgs(&self) -> Option<&[String]> {
        match self {
            OrgScope::All => None,
            OrgScope::Only(orgs) => Some(orgs),
        }
    }

    /// The predicate a scan's rows must pass; `None` for [`OrgScope::All`].
    pub(crate) fn predicate(&self) -> Option<Expr> {
        let OrgScope::Only(orgs) = self else {
            return None;
        };
        if orgs.is_empty() {
            return Some(lit(false));
        }
        let named =
            col(ORG_COLUMN).in_list(orgs.iter().map(|org| lit(org.as_str())).collect(), false);
        Some(if orgs.iter().any(|org| org == DEFAULT_ORG) {
            named.or(col(ORG_COLUMN).is_null())
        } else {
            named
        })
    }
}
