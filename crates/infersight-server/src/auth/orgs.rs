//! Which org a caller writes for and which orgs it reads (infersight's tenants, Loki's
//! `X-Scope-OrgID`), decided by the gates from the caller's [`Identity`]: the ingest gate puts
//! the one org of an export on the request (`infersight_ingest::receivers::IngestOrg`, stamped on
//! every row by the writer), the API gate the org scope of a read (`infersight_query::OrgScope`,
//! enforced by the query layer's table providers).
//!
//! A token's `tenants` are its orgs; a token bound to none (and a trusted proxy's user) has the
//! default org only. With authentication off everything is written for the default org and every
//! org is read, whatever the header says: today's zero-config behaviour.

use infersight_model::org::DEFAULT_ORG;
use infersight_query::OrgScope;

use super::{Identity, Refusal, Via};

/// The header that picks an org among a token's (Loki's, Mimir's, Tempo's name).
pub const SCOPE_HEADER: &str = "x-scope-orgid";

/// The orgs `identity` may write and read; `None` when authentication is off (all of them).
fn orgs_of(identity: &Identity) -> Option<Vec<String>> {
    match identity.via {
        Via::Open => None,
        Via::Token | Via::Proxy if identity.tenants.is_empty() => {
            Some(vec![DEFAULT_ORG.to_string()])
        }
        Via::Token | Via::Proxy => Some(identity.tenants.clone()),
    }
}

fn not_yours(identity: &Identity, org: &str) -> Refusal {
    Refusal::Forbidden(format!(
        "`{}` is not bound to the org `{}` named in X-Scope-OrgID",
        identity.name,
        org.escape_debug()
    ))
}

/// The one org an export of `identity` is stored for: its only org, or the one `header` names
/// among several (403 when the header names one it lacks, or when it has several and no header
/// picks one).
pub fn write_org(identity: &Identity, header: Option<&str>) -> Result<String, Refusal> {
    let Some(orgs) = orgs_of(identity) else {
        return Ok(DEFAULT_ORG.to_string());
    };
    match header.map(str::trim) {
        Some(named) => orgs
            .iter()
            .find(|org| org.as_str() == named)
            .cloned()
            .ok_or_else(|| not_yours(identity, named)),
        None => match orgs.as_slice() {
            [only] => Ok(only.clone()),
            _ => Err(Refusal::Forbidden(format!(
                "`{}` is bound to the orgs {}: name the one this export is for with \
                 X-Scope-OrgID",
                identity.name,
                orgs.join(", ")
            ))),
        },
    }
}

/// The orgs a read of `identity` sees: all of its orgs, or those `header` names (`a|b`, each one
/// of its orgs, else 403).
pub fn read_scope(identity: &Identity, header: Option<&str>) -> Result<OrgScope, Refusal> {
    let Some(orgs) = orgs_of(identity) else {
        return Ok(OrgScope::All);
    };
    let Some(header) = header else {
        return Ok(OrgScope::Only(orgs));
    };
    let mut named = Vec::new();
    for org in header.split('|').map(str::trim) {
        if !orgs.iter().any(|own| own == org) {
            return Err(not_yours(identity, org));
        }
        if !named.iter().any(|seen: &String| seen == org) {
            named.push(org.to_string());
        }
    }
    Ok(OrgScope::Only(named))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Role;

    fn caller(via: Via, tenants: &[&str]) -> Identity {
        Identity {
            name: "t".into(),
            role: Role::Analyst,
            tenants: tenants.iter().map(|t| t.to_string()).collect(),
            via,
        }
    }

    #[test]
    fn an_export_is_stored_for_one_of_the_tokens_orgs() {
        let one = caller(Via::Token, &["a"]);
        assert_eq!(write_org(&one, None), Ok("a".into()));
        assert_eq!(write_org(&one, Some("a")), Ok("a".into()));
        assert!(matches!(
            write_org(&one, Some("b")),
            Err(Refusal::Forbidden(_))
        ));
        let two = caller(Via::Token, &["a", "b"]);
        assert!(matches!(write_org(&two, None), Err(Refusal::Forbidden(_))));
        assert_eq!(write_org(&two, Some("b")), Ok("b".into()));
        assert!(matches!(
            write_org(&two, Some("a|b")),
            Err(Refusal::Forbidden(_))
        ));
        let unbound = caller(Via::Token, &[]);
        assert_eq!(write_org(&unbound, None), Ok(DEFAULT_ORG.into()));
        assert!(matches!(
            write_org(&unbound, Some("a")),
            Err(Refusal::Forbidden(_))
        ));
        // authentication off: the header counts for nothing
        let open = caller(Via::Open, &[]);
        assert_eq!(write_org(&open, Some("a")), Ok(DEFAULT_ORG.into()));
    }

    #[test]
    fn a_read_sees_the_tokens_orgs_or_those_it_names() {
        let two = caller(Via::Token, &["a", "b"]);
        assert_eq!(
            read_scope(&two, None),
            Ok(OrgScope::Only(vec!["a".into(), "b".into()]))
        );
        assert_eq!(read_scope(&two, Some("b")), Ok(OrgScope::org("b")));
        assert_eq!(
            read_scope(&two, Some("b|a|b")),
            Ok(OrgScope::Only(vec!["b".into(), "a".into()]))
        );
        assert!(matches!(
            read_scope(&two, Some("a|c")),
            Err(Refusal::Forbidden(_))
        ));
        assert_eq!(
            read_scope(&caller(Via::Proxy, &[]), None),
            Ok(OrgScope::org(DEFAULT_ORG))
        );
        assert_eq!(
            read_scope(&caller(Via::Open, &[]), Some("a")),
            Ok(OrgScope::All)
        );
    }
}
