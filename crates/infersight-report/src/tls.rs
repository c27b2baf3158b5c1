//! https for every client infersight calls out with: the report's LLM narrative here, and in
//! `serve` the notification sinks (`[notify]`) and the alert and action webhooks (`[alerts]`,
//! `[actions]`). One rule for all: ureq over rustls (ring), the server's certificate verified
//! against the web's root certificates compiled in (webpki-roots), or, when the section's
//! `ca_file` is set, only against that PEM file's certificates (a private CA, a self-signed
//! receiver). A certificate that does not verify fails the call; nothing is trusted unverified.

use std::sync::Arc;

use ureq::config::ConfigBuilder;
use ureq::tls::{Certificate, PemItem, RootCerts, TlsConfig};
use ureq::typestate::AgentScope;

/// The certificates of a `ca_file`, shared by the clients that use them.
pub type CaCerts = Arc<Vec<Certificate<'static>>>;

/// The certificates of the PEM file at `path` (at least one; keys and other sections are
/// refused, so a private key put there by mistake is noticed). The error names the file and
/// what is wrong, for the caller to prefix with its key (`notify.ca_file: ...`).
pub fn read_ca_file(path: &str) -> Result<Vec<Certificate<'static>>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read `{path}`: {e}"))?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&bytes) {
        match item {
            Ok(PemItem::Certificate(cert)) => certs.push(cert),
            Ok(_) => {
                return Err(format!(
                    "`{path}` holds something other than certificates (a private key?)"
                ));
            }
            Err(e) => return Err(format!("`{path}` is not PEM: {e}")),
        }
    }
    if certs.is_empty() {
        return Err(format!("`{path}` holds no PEM certificate"));
    }
    Ok(certs)
}

/// The problem of the `ca_file` key `key` (`alerts.ca_file`), worded for `infersight
/// validate`; `None` when it is empty (the web's roots) or holds certificates.
pub fn check_ca_file(key: &str, path: &str) -> Option<String> {
    if path.is_empty() {
        return None;
    }
    read_ca_file(path)
        .err()
        .map(|problem| format!("{key}: {problem}"))
}

/// The roots of a `ca_file` key: `Ok(None)` when it is empty (the web's roots), else its
/// certificates; the error is [`check_ca_file`]'s.
pub fn ca_certs(key: &str, path: &str) -> Result<Option<CaCerts>, String> {
    if path.is_empty() {
        return Ok(None);
    }
    read_ca_file(path)
        .map(|certs| Some(Arc::new(certs)))
        .map_err(|problem| format!("{key}: {problem}"))
}

/// The roots of a `ca_file` key for a client being built after the configuration was
/// validated: when the file cannot be read any more, an empty set of roots (every https call
/// fails, counted and logged by the caller) and an error log line, never the web's roots in
/// its place.
pub fn ca_certs_or_none_trusted(key: &str, path: &str) -> Option<CaCerts> {
    ca_certs(key, path).unwrap_or_else(|problem| {
        tracing::error!("{problem}; https calls will fail until it is fixed");
        Some(Arc::new(Vec::new()))
    })
}

/// `builder` with https verified against `ca_certs`, or the web's roots when `None`.
pub fn with_roots(
    builder: ConfigBuilder<AgentScope>,
    ca_certs: Option<&CaCerts>,
) -> ConfigBuilder<AgentScope> {
    match ca_certs {
        Some(certs) => builder.tls_config(
            TlsConfig::builder()
                .root_certs(RootCerts::Specific(Arc::clone(certs)))
                .build(),
        ),
        None => builder,
    }
}

/// Whether `url` is one the clients can call: `http://` or `https://`.
pub fn is_web_url(url: &str) -> bool {
    url.starts_with("http://") || url.starts_with("https://")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_must_hold_certificates_and_only_them() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let text = dir.path().join("text.pem");
        std::fs::write(&text, "not a certificate\n").unwrap();
        let key = dir.path().join("key.pem");
        std::fs::write(
            &key,
            "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIO1a\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        for (path, says) in [
            (&missing, "cannot read"),
            (&text, "no PEM certificate"),
            (&key, "something other than certificates"),
        ] {
            let path = path.display().to_string();
            let problem = check_ca_file("x.ca_file", &path).unwrap_or_default();
            assert!(
                problem.starts_with("x.ca_file: ") && problem.contains(says),
                "{problem}"
            );
            assert!(ca_certs("x.ca_file", &path).is_err());
            let fallback = ca_certs_or_none_trusted("x.ca_file", &path);
            assert!(
                fallback.is_some_and(|roots| roots.is_empty()),
                "fails closed"
            );
        }
        assert_eq!(check_ca_file("x.ca_file", ""), None);
        assert!(matches!(ca_certs("x.ca_file", ""), Ok(None)));
    }
}
