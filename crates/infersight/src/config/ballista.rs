//! `[query.ballista]`: when statements go to an Apache DataFusion Ballista cluster
//! (`infersight_query::ballista`, the binary's `cluster` feature). Empty `scheduler` (the
//! default): every statement runs on this node. Checked with the rest of the configuration.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BallistaConfig {
    /// The scheduler's gRPC address (`host:port`, as `infersight ballista scheduler --bind`
    /// listens); empty: no cluster.
    pub scheduler: String,
    /// A statement whose plan reads at least this many bytes of the bucket's segments goes to
    /// the cluster (0: every statement over the bucket's segments).
    pub min_bytes: u64,
    /// ...or at least this many segments; 0: only `min_bytes` counts.
    pub min_segments: usize,
    /// A plan the cluster has not answered within this long runs here instead.
    pub timeout_ms: u64,
}

impl Default for BallistaConfig {
    fn default() -> Self {
        Self {
            scheduler: String::new(),
            min_bytes: 1 << 30,
            min_segments: 0,
            timeout_ms: 300_000,
        }
    }
}

impl BallistaConfig {
    /// Every problem of the section; `bucket` says whether `storage.url` is set (executors
    /// read the bucket's segments: a node without one has nothing to send).
    pub fn validate(&self, bucket: bool) -> Vec<String> {
        let mut errors = Vec::new();
        if self.scheduler.is_empty() {
            return errors;
        }
        if !cfg!(feature = "cluster") {
            errors.push(
                "query.ballista.scheduler: this build has no Ballista support (the binary's \
                 `cluster` feature)"
                    .into(),
            );
        }
        if self.timeout_ms == 0 {
            errors.push("query.ballista.timeout_ms: must be at least 1".into());
        }
        if host_port(&self.scheduler).is_none() {
            errors.push(format!(
                "query.ballista.scheduler: `{}` is not host:port",
                self.scheduler
            ));
        }
        if !bucket {
            errors.push(
                "query.ballista.scheduler needs storage.url: the executors read the bucket's \
                 segments, and a node without a bucket has none to send"
                    .into(),
            );
        }
        errors
    }
}

/// `host:port` (an `http://` in front is allowed) taken apart; `None` when it is not that.
pub fn host_port(address: &str) -> Option<(String, u16)> {
    let bare = address.strip_prefix("http://").unwrap_or(address);
    let (host, port) = bare.rsplit_once(':')?;
    let port = port.parse::<u16>().ok().filter(|port| *port > 0)?;
    (!host.is_empty()).then(|| (host.to_string(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scheduler_needs_an_address_and_a_bucket() {
        assert!(BallistaConfig::default().validate(false).is_empty());
        let config = |scheduler: &str| BallistaConfig {
            scheduler: scheduler.into(),
            ..BallistaConfig::default()
        };
        let problems = config("127.0.0.1:50050").validate(false);
        assert!(
            problems.iter().any(|p| p.contains("needs storage.url")),
            "{problems:?}"
        );
        assert_eq!(
            host_port("http://scheduler.svc:7000"),
            Some(("scheduler.svc".to_string(), 7000))
        );
        for bad in ["127.0.0.1", ":50050", "host:0", "host:port"] {
            let problems = config(bad).validate(true);
            assert!(
                problems.iter().any(|p| p.contains("is not host:port")),
                "{bad}: {problems:?}"
            );
        }
        for good in ["127.0.0.1:50050", "http://scheduler.svc:50050"] {
            let problems = config(good).validate(true);
            assert_eq!(
                problems.iter().any(|p| p.contains("no Ballista support")),
                !cfg!(feature = "cluster"),
                "{good}: {problems:?}"
            );
            assert!(
                !problems.iter().any(|p| p.contains("host:port")),
                "{good}: {problems:?}"
            );
        }
    }
}
