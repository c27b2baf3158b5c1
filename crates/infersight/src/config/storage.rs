//! `[storage]`: where flushed segments go. Empty `url` (the default) keeps them under
//! `store.data_dir` as on a single node; `s3://bucket/prefix` or `file:///dir` sends them to a
//! bucket with its catalog log (`infersight_store::StoreOptions::remote`), the WAL staying in the
//! data directory. Checked with the rest of the configuration and again after `--storage`;
//! resolved into the store's [`BucketConfig`] here.

use std::path::Path;

use infersight_cluster::{NodeId, StorageUrl};
use infersight_server::role::Role;
use infersight_store::{BucketConfig, RemoteOptions, TierOptions};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// `s3://bucket/prefix` or `file:///absolute/dir`; empty: segments in `store.data_dir`.
    pub url: String,
    /// An S3-compatible server (`http://127.0.0.1:8333`); empty: AWS itself (or `AWS_ENDPOINT_URL`).
    /// An `http://` endpoint allows plain HTTP.
    pub endpoint: String,
    /// Empty: `AWS_REGION` / `AWS_DEFAULT_REGION`, else object_store's default.
    pub region: String,
    /// Path-style requests (`endpoint/bucket/key`), what SeaweedFS, MinIO and moto answer;
    /// false: virtual-hosted style (`bucket.endpoint/key`).
    pub path_style: bool,
    /// Empty: `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN`).
    pub access_key_id: String,
    pub secret_access_key: String,
    /// This node's name in the bucket's catalog log and segment names (letters, digits, `.`, `_`,
    /// `-`); every node writing to one bucket needs its own, the same across its restarts (its
    /// WAL position is kept under it). Empty: `<host name>-<hash of the data directory>`.
    pub node: String,
    /// How long an object no catalog entry names stays in the bucket before the node maintaining
    /// it deletes it: a merged or expired segment (queries planned before may still read it), an
    /// upload whose flush crashed before its commit. Longer than any upload takes to commit.
    pub gc_grace: String,
    /// Segments and sidecars read from the bucket stay in memory up to this many bytes (least
    /// recently used out first; objects over a quarter of it are not kept); 0 turns it off.
    pub read_cache_bytes: u64,
    /// ...and on disk, under the data directory's `bucket-cache/`, up to this many bytes, kept
    /// across restarts (same rules); 0: memory only. Needs `read_cache_bytes`.
    pub disk_cache_bytes: u64,
}

/// `[store.tiers]`: when bucket segments move from the warm tier to the cold one and how long
/// cold ones stay (`infersight_store::TierOptions`). Off while `warm` is empty. Needs a bucket
/// (`storage.url` or `--storage`): checked where the store is opened for `serve`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreTiersConfig {
    /// A (table, hour) moves to the cold tier once the hour ended this long ago (e.g. `7d`);
    /// empty: no cold tier.
    pub warm: String,
    /// Cold segments are deleted this long after their hour ended (e.g. `90d`); empty: kept
    /// until their table's retention.
    pub cold: String,
    /// Where cold segments go in the bucket: one path segment other than `segments`,
    /// `catalog` and `leases`.
    pub cold_prefix: String,
    /// Rows per Parquet row group in cold segments.
    pub cold_row_group_rows: usize,
    /// At most this many (table, hour) partitions move per maintenance pass.
    pub max_partitions_per_pass: usize,
}

impl Default for StoreTiersConfig {
    fn default() -> Self {
        let o = TierOptions::new(std::time::Duration::from_secs(7 * 86_400));
        Self {
            warm: String::new(),
            cold: String::new(),
            cold_prefix: o.cold_prefix,
            cold_row_group_rows: o.cold_row_group_rows,
            max_partitions_per_pass: o.max_partitions_per_pass,
        }
    }
}

impl StoreTiersConfig {
    /// The tiers, `None` while `warm` is empty; problems go to `errors` (then the outer `None`).
    pub(super) fn parse(&self, errors: &mut Vec<String>) -> Option<Option<TierOptions>> {
        if self.warm.is_empty() {
            let set = !self.cold.is_empty();
            if set {
                errors.push(
                    "store.tiers.cold: set without store.tiers.warm (the age at which segments \
                     go cold)"
                        .into(),
                );
                return None;
            }
            return Some(None);
        }
        let before = errors.len();
        let warm = super::parse_duration(errors, "store.tiers.warm", &self.warm);
        let cold = super::parse_optional_duration(errors, "store.tiers.cold", &self.cold);
        if let Err(e) = infersight_cluster::layout::check_tier_prefix(&self.cold_prefix) {
            errors.push(format!("store.tiers.cold_prefix: {e}"));
        }
        if self.cold_row_group_rows == 0 {
            errors.push("store.tiers.cold_row_group_rows: must be at least 1".into());
        }
        if self.max_partitions_per_pass == 0 {
            errors.push("store.tiers.max_partitions_per_pass: must be at least 1".into());
        }
        if let (Some(warm), Some(Some(cold))) = (warm, cold)
            && cold <= warm
        {
            errors.push(format!(
                "store.tiers.cold: `{}` ends before the warm tier does (`{}`): cold data is \
                 kept this long after its hour, counted from the same point",
                self.cold, self.warm
            ));
        }
        if errors.len() > before {
            return None;
        }
        Some(Some(TierOptions {
            warm_for: warm?,
            cold_for: cold?,
            cold_prefix: self.cold_prefix.clone(),
            cold_row_group_rows: self.cold_row_group_rows,
            max_partitions_per_pass: self.max_partitions_per_pass,
        }))
    }
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            url: String::new(),
            endpoint: String::new(),
            region: String::new(),
            path_style: true,
            access_key_id: String::new(),
            secret_access_key: String::new(),
            node: String::new(),
            gc_grace: "10m".into(),
            read_cache_bytes: 256 << 20,
            disk_cache_bytes: 2 << 30,
        }
    }
}

impl StorageConfig {
    /// Every problem of the section (none when `url` is empty: the other keys are then unused).
    pub fn validate(&self) -> Vec<String> {
        let mut errors = Vec::new();
        if self.url.is_empty() {
            return errors;
        }
        if let Err(e) = StorageUrl::parse(&self.url) {
            errors.push(format!("storage.url: {e}"));
        }
        let web = ["http://", "https://"];
        if !self.endpoint.is_empty() && !web.iter().any(|s| self.endpoint.starts_with(s)) {
            errors.push(format!(
                "storage.endpoint: `{}` is not an http:// or https:// URL",
                self.endpoint
            ));
        }
        if self.access_key_id.is_empty() != self.secret_access_key.is_empty() {
            errors.push(
                "storage.access_key_id and storage.secret_access_key: set both or neither (neither: the AWS_* variables)"
                    .into(),
            );
        }
        if let Some(grace) = super::parse_duration(&mut errors, "storage.gc_grace", &self.gc_grace)
            && grace < std::time::Duration::from_secs(60)
        {
            errors.push(format!(
                "storage.gc_grace: `{}` is under 1m: garbage collection could delete an upload \
                 whose commit is on its way, or a segment a running query reads",
                self.gc_grace
            ));
        }
        if self.disk_cache_bytes > 0 && self.read_cache_bytes == 0 {
            errors.push(
                "storage.disk_cache_bytes: the disk cache is the memory cache's second level; \
                 set storage.read_cache_bytes too (or disk_cache_bytes = 0)"
                    .into(),
            );
        }
        // a derived node id is valid by construction
        if !self.node.is_empty()
            && let Err(e) = NodeId::new(&self.node)
        {
            errors.push(format!("storage.node: {e}"));
        }
        errors
    }

    /// A role other than `all` runs only part of the work, so it needs the others' segments:
    /// the problem when no bucket is set.
    pub fn check_role(&self, role: Role) -> Option<String> {
        (role != Role::All && self.url.is_empty()).then(|| {
            format!(
                "server.role: `{role}` needs storage.url (the nodes of a cluster share their \
                 segments through a bucket); a single node runs `all`"
            )
        })
    }

    /// The bucket and node the store in `data_dir` sends segments to, maintained by this node
    /// when `maintain`; `None` without `url`.
    pub fn remote(&self, data_dir: &Path, maintain: bool) -> Option<RemoteOptions> {
        let bucket = self.bucket()?;
        let mut remote = RemoteOptions::new(bucket, self.node_id(data_dir));
        remote.maintain = maintain;
        remote.read_cache_bytes = self.read_cache_bytes;
        remote.disk_cache_bytes = self.disk_cache_bytes;
        if let Some(grace) = super::parse_duration(&mut Vec::new(), "", &self.gc_grace) {
            remote.gc_grace = grace;
        }
        Some(remote)
    }

    /// The bucket's client settings; `None` without `url`.
    pub fn bucket(&self) -> Option<BucketConfig> {
        if self.url.is_empty() {
            return None;
        }
        let set = |text: &str| (!text.is_empty()).then(|| text.to_string());
        Some(BucketConfig {
            url: self.url.clone(),
            endpoint: set(&self.endpoint),
            region: set(&self.region),
            access_key_id: set(&self.access_key_id),
            secret_access_key: set(&self.secret_access_key),
            allow_http: self.endpoint.starts_with("http://"),
            virtual_hosted_style: !self.path_style,
        })
    }

    /// `node`, else `<host>-<hash>`: the host name (characters a node id cannot hold replaced by
    /// `_`; `node` without one) and 8 hex digits of the data directory's absolute path, so two
    /// stores on one host never share an id and a restarted one keeps its own.
    pub fn node_id(&self, data_dir: &Path) -> String {
        if !self.node.is_empty() {
            return self.node.clone();
        }
        let path = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
        // FNV-1a: the same digits from every build (std's hashers promise no stable output)
        let hash = path
            .as_os_str()
            .as_encoded_bytes()
            .iter()
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
        format!("{}-{:08x}", host_name(), hash & 0xffff_ffff)
    }
}

/// The host name with characters a node id cannot hold replaced by `_`; `node` without one.
fn host_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    let host: String = host
        .trim()
        .chars()
        .take(48)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    match host.trim_start_matches(['.', '-']) {
        "" => "node".into(),
        name => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_url(url: &str) -> StorageConfig {
        StorageConfig {
            url: url.into(),
            ..StorageConfig::default()
        }
    }

    #[test]
    fn no_url_is_the_local_data_dir() {
        assert!(StorageConfig::default().validate().is_empty());
        assert!(
            StorageConfig::default()
                .remote(Path::new("data"), true)
                .is_none()
        );
    }

    #[test]
    fn an_unknown_scheme_or_a_bad_endpoint_is_named() {
        let errors = with_url("gs://bucket/x").validate();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].starts_with("storage.url: "), "{errors:?}");
        let mut config = with_url("s3://bucket/x");
        config.endpoint = "127.0.0.1:8333".into();
        config.access_key_id = "key".into();
        config.node = "-x".into();
        config.read_cache_bytes = 0;
        let errors = config.validate();
        assert_eq!(errors.len(), 4, "{errors:?}");
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("storage.disk_cache_bytes: ")),
            "{errors:?}"
        );
        config.disk_cache_bytes = 0;
        assert_eq!(config.validate().len(), 3);
    }

    #[test]
    fn a_local_endpoint_allows_http_and_path_style_is_the_default() {
        let mut config = with_url("s3://bucket/cluster");
        config.endpoint = "http://127.0.0.1:8333".into();
        config.node = "ingest-1".into();
        assert!(config.validate().is_empty());
        let Some(remote) = config.remote(Path::new("data"), true) else {
            panic!("a URL gives a bucket")
        };
        assert!(remote.bucket.allow_http);
        assert!(!remote.bucket.virtual_hosted_style);
        assert_eq!(remote.bucket.access_key_id, None);
        assert_eq!(remote.node, "ingest-1");
        assert_eq!(
            (remote.read_cache_bytes, remote.disk_cache_bytes),
            (256 << 20, 2 << 30)
        );
        config.node = String::new();
        let id = config.node_id(Path::new("/srv/infersight/a"));
        assert!(NodeId::new(&id).is_ok(), "{id}");
        assert_eq!(id, config.node_id(Path::new("/srv/infersight/a")));
        assert_ne!(id, config.node_id(Path::new("/srv/infersight/b")));
    }

    #[test]
    fn roles_need_a_bucket_and_say_whether_the_node_maintains_it() {
        let local = StorageConfig::default();
        assert_eq!(local.check_role(Role::All), None);
        for role in [Role::Ingest, Role::Query, Role::Compact] {
            let problem = local.check_role(role).unwrap_or_default();
            assert!(
                problem.contains(&format!("`{role}` needs storage.url")),
                "{problem}"
            );
        }
        let mut config = with_url("file:///srv/bucket");
        assert_eq!(config.check_role(Role::Query), None);
        let remote = config.remote(Path::new("data"), false);
        assert!(remote.as_ref().is_some_and(|r| !r.maintain), "{remote:?}");
        assert_eq!(
            remote.map(|r| r.gc_grace),
            Some(std::time::Duration::from_secs(600))
        );
        config.gc_grace = "90s".into();
        let remote = config.remote(Path::new("data"), true);
        assert!(remote.as_ref().is_some_and(|r| r.maintain), "{remote:?}");
        assert_eq!(
            remote.map(|r| r.gc_grace),
            Some(std::time::Duration::from_secs(90))
        );
        for bad in ["soon", "5s"] {
            config.gc_grace = bad.into();
            let errors = config.validate();
            assert!(
                errors.len() == 1 && errors[0].contains("storage.gc_grace"),
                "{errors:?}"
            );
        }
    }
}
