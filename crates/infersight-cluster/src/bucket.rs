//! Where a store's segments and catalog live, named by one URL (`[storage] url`):
//! `s3://bucket/prefix` (an S3 or S3-compatible server, feature `s3`) or `file:///absolute/dir`
//! (a directory standing in for a bucket: a shared mount, and the tests). The store writes its
//! segments and the catalog log through [`Bucket::scoped`] (keys under the prefix, the
//! `layout` names); the query engine reads the same segment objects through [`Bucket::store`],
//! registered under [`Bucket::url`], by their full key ([`Bucket::key`]).

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::path::Path;
use object_store::prefix::PrefixStore;

use crate::error::ClusterError;

/// The storage settings; what is not set here comes from the standard `AWS_*` environment
/// variables (S3 only).
#[derive(Debug, Clone, Default)]
pub struct BucketConfig {
    /// `s3://bucket[/prefix]` or `file:///absolute/dir`.
    pub url: String,
    /// `http://127.0.0.1:8333` for a local S3 server; none for AWS itself.
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    /// Plain HTTP to the endpoint (local servers only).
    pub allow_http: bool,
    /// `https://bucket.endpoint/key` instead of the path style `https://endpoint/bucket/key`
    /// (object_store's default, which SeaweedFS, MinIO and moto answer).
    pub virtual_hosted_style: bool,
}

/// An opened bucket: the client of the whole bucket and where this store's keys start in it.
#[derive(Debug, Clone)]
pub struct Bucket {
    /// Scheme and authority (`s3://bucket`, `file://`): what the query engine registers
    /// [`Bucket::store`] under.
    pub url: String,
    /// The client of the whole bucket (for `file://`, of the filesystem from `/`).
    pub store: Arc<dyn ObjectStore>,
    /// Where this store's keys start under [`Bucket::store`].
    pub prefix: Path,
    /// The configured URL, for messages.
    pub configured: String,
}

/// A storage URL taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageUrl {
    S3 { bucket: String, prefix: String },
    File { dir: std::path::PathBuf },
}

impl StorageUrl {
    pub fn parse(url: &str) -> Result<StorageUrl, ClusterError> {
        let invalid = |reason: &'static str| ClusterError::Invalid {
            what: "storage url",
            value: url.to_string(),
            reason,
        };
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            let valid_bucket = !bucket.is_empty()
                && bucket
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
            if !valid_bucket {
                return Err(invalid(
                    "the bucket name must be letters, digits, `.`, `-`, `_`",
                ));
            }
            return Ok(StorageUrl::S3 {
                bucket: bucket.to_string(),
                prefix: prefix.trim_matches('/').to_string(),
            });
        }
        if let Some(dir) = url.strip_prefix("file://") {
            if !dir.starts_with('/') {
                return Err(invalid(
                    "a file URL names an absolute directory: file:///dir",
                ));
            }
            return Ok(StorageUrl::File { dir: dir.into() });
        }
        Err(invalid("expected s3://bucket/prefix or file:///dir"))
    }
}

impl Bucket {
    /// Builds the client (no request is made: [`crate::self_check`] is the first one).
    pub fn open(config: &BucketConfig) -> Result<Bucket, ClusterError> {
        match StorageUrl::parse(&config.url)? {
            StorageUrl::S3 { bucket, prefix } => Self::s3(config, bucket, prefix),
            StorageUrl::File { dir } => {
                let io = |source: std::io::Error| ClusterError::Invalid {
                    what: "storage directory",
                    value: format!("{}: {source}", dir.display()),
                    reason: "cannot be created or resolved",
                };
                std::fs::create_dir_all(&dir).map_err(io)?;
                let dir = dir.canonicalize().map_err(io)?;
                let prefix =
                    Path::from_absolute_path(&dir).map_err(|e| ClusterError::Store(e.into()))?;
                Ok(Bucket {
                    url: "file://".into(),
                    store: Arc::new(object_store::local::LocalFileSystem::new()),
                    prefix,
                    configured: config.url.clone(),
                })
            }
        }
    }

    #[cfg(feature = "s3")]
    fn s3(config: &BucketConfig, bucket: String, prefix: String) -> Result<Bucket, ClusterError> {
        let store = crate::s3::s3_store(&crate::s3::S3Config {
            bucket: bucket.clone(),
            endpoint: config.endpoint.clone(),
            region: config.region.clone(),
            access_key_id: config.access_key_id.clone(),
            secret_access_key: config.secret_access_key.clone(),
            allow_http: config.allow_http,
            virtual_hosted_style: config.virtual_hosted_style,
        })?;
        Ok(Bucket {
            url: format!("s3://{bucket}"),
            store,
            prefix: Path::from(prefix),
            configured: config.url.clone(),
        })
    }

    #[cfg(not(feature = "s3"))]
    fn s3(config: &BucketConfig, _bucket: String, _prefix: String) -> Result<Bucket, ClusterError> {
        Err(ClusterError::Invalid {
            what: "storage url",
            value: config.url.clone(),
            reason: "this build has no S3 support (the binary's `cluster` feature, the `s3` feature of the store)",
        })
    }

    /// The bucket below the prefix: the keys of `layout`.
    pub fn scoped(&self) -> Arc<dyn ObjectStore> {
        if self.prefix.as_ref().is_empty() {
            return Arc::clone(&self.store);
        }
        Arc::new(PrefixStore::new(
            Arc::clone(&self.store),
            self.prefix.clone(),
        ))
    }

    /// The full key in [`Bucket::store`] of `relative`, a key of [`Bucket::scoped`].
    pub fn key(&self, relative: &Path) -> Path {
        self.prefix.parts().chain(relative.parts()).collect()
    }

    /// `url/key`, for messages.
    pub fn display_key(&self, relative: &Path) -> String {
        format!("{}/{}", self.configured.trim_end_matches('/'), relative)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_taken_apart_or_refused_with_a_reason() {
        assert_eq!(
            StorageUrl::parse("s3://infersight/prod/eu/").ok(),
            Some(StorageUrl::S3 {
                bucket: "infersight".into(),
                prefix: "prod/eu".into()
            })
        );
        assert_eq!(
            StorageUrl::parse("s3://b").ok(),
            Some(StorageUrl::S3 {
                bucket: "b".into(),
                prefix: String::new()
            })
        );
        for bad in ["s3://", "s3:///x", "file://relative", "gs://b", "/tmp/x"] {
            let err = StorageUrl::parse(bad).err().map(|e| e.to_string());
            assert!(
                err.as_deref().is_some_and(|e| e.contains("storage url")),
                "{bad}: {err:?}"
            );
        }
    }

    #[test]
    fn file_buckets_key_under_their_directory() -> Result<(), ClusterError> {
        let dir = tempfile::tempdir().map_err(|e| ClusterError::Corrupt {
            path: String::new(),
            reason: e.to_string(),
        })?;
        let bucket = Bucket::open(&BucketConfig {
            url: format!("file://{}/b", dir.path().display()),
            ..BucketConfig::default()
        })?;
        let key = bucket.key(&Path::from("segments/logs/x.parquet"));
        assert!(
            key.as_ref().ends_with("/b/segments/logs/x.parquet"),
            "{key}"
        );
        assert!(!key.as_ref().starts_with('/'));
        assert_eq!(bucket.url, "file://");
        Ok(())
    }
}
