//! S3 and S3-compatible stores (SeaweedFS, MinIO, moto) for the catalog and segments, built from
//! a few settings over the standard `AWS_*` environment (feature `s3`). Conditional writes stay
//! on (`etag`), which the catalog's self-check then verifies against the real server.

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey, S3ConditionalPut};
use object_store::{BackoffConfig, ClientConfigKey, ObjectStore, RetryConfig};

use crate::error::ClusterError;

/// Where the bucket is; what is not set here comes from `AWS_*` variables.
#[derive(Debug, Clone, Default)]
pub struct S3Config {
    pub bucket: String,
    /// `http://127.0.0.1:8333` for a local server; none for AWS itself.
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    /// Plain HTTP (local servers only).
    pub allow_http: bool,
    /// Virtual-hosted-style requests (`bucket.endpoint`); path style otherwise.
    pub virtual_hosted_style: bool,
}

/// The bucket as an object store.
pub fn s3_store(config: &S3Config) -> Result<Arc<dyn ObjectStore>, ClusterError> {
    let mut builder = AmazonS3Builder::from_env()
        .with_bucket_name(&config.bucket)
        .with_allow_http(config.allow_http)
        .with_virtual_hosted_style_request(config.virtual_hosted_style)
        .with_conditional_put(S3ConditionalPut::ETagMatch)
        // an unreachable endpoint fails in seconds (the client's default retries for minutes)
        .with_config(
            AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
            "5s",
        )
        .with_retry(RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: 3,
            retry_timeout: Duration::from_secs(20),
        });
    if let Some(endpoint) = &config.endpoint {
        builder = builder.with_endpoint(endpoint);
    }
    if let Some(region) = &config.region {
        builder = builder.with_region(region);
    }
    if let Some(key) = &config.access_key_id {
        builder = builder.with_access_key_id(key);
    }
    if let Some(secret) = &config.secret_access_key {
        builder = builder.with_secret_access_key(secret);
    }
    Ok(Arc::new(builder.build()?))
}
