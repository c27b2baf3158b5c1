//! Leases in the bucket (`leases/<name>`): one holder at a time for work that must not run twice
//! (compaction, retention, garbage collection). Taken and renewed with If-Match, so of two nodes
//! racing for an expired lease exactly one wins; each change of holder raises the lease's epoch,
//! which fences the old holder's catalog commits (`entry::Fence`).
//!
//! Needs a store with conditional updates (S3, InMemory). `LocalFileSystem` has none: there the
//! lease answers `UnsafeStore`; a single node needs no lease (it holds its data directory's lock).

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::{Deserialize, Serialize};

use crate::clock::Clock;
use crate::entry::{FORMAT_VERSION, Fence};
use crate::error::ClusterError;
use crate::layout::lease_path;
use crate::ulid::{NodeId, Ulid};

/// A lease this node holds until `expires_at_ms` unless renewed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub name: String,
    pub holder: NodeId,
    /// Raised at every change of holder; commits made under the lease carry it.
    pub epoch: u64,
    pub expires_at_ms: i64,
    version: UpdateVersion,
}

impl Lease {
    pub fn fence(&self) -> Fence {
        Fence {
            lease: self.name.clone(),
            epoch: self.epoch,
        }
    }
}

/// What asking for a lease got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    Acquired(Lease),
    HeldBy { holder: NodeId, expires_at_ms: i64 },
}

/// `leases/<name>`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LeaseRecord {
    version: u32,
    holder: NodeId,
    epoch: u64,
    expires_at_ms: i64,
    /// New at every write: S3 ETags are the content's MD5, so two writes of equal records would
    /// share an ETag and a stale If-Match could pass.
    write_id: String,
}

/// Takes lease `name` for `ttl_ms` if it is free, expired, or already `holder`'s.
pub async fn acquire(
    store: &dyn ObjectStore,
    clock: &dyn Clock,
    name: &str,
    holder: &NodeId,
    ttl_ms: i64,
) -> Result<Acquire, ClusterError> {
    let path = lease_path(name)?;
    let now_ms = clock.now_ms();
    let (mode, epoch) = match read_record(store, &path).await? {
        None => (PutMode::Create, 1),
        Some((current, _)) if current.holder != *holder && current.expires_at_ms > now_ms => {
            return Ok(Acquire::HeldBy {
                holder: current.holder,
                expires_at_ms: current.expires_at_ms,
            });
        }
        Some((current, version)) => {
            let epoch = if current.holder == *holder {
                current.epoch
            } else {
                current.epoch + 1
            };
            (PutMode::Update(version), epoch)
        }
    };
    let record = LeaseRecord {
        version: FORMAT_VERSION,
        holder: holder.clone(),
        epoch,
        expires_at_ms: now_ms.saturating_add(ttl_ms),
        write_id: Ulid::generate().to_string(),
    };
    match write_record(store, &path, &record, mode).await {
        Ok(version) => Ok(Acquire::Acquired(lease_of(name, record, version))),
        // another node got there between our read and our write: report who holds it now
        Err(
            object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. },
        ) => match read_record(store, &path).await? {
            Some((current, _)) => Ok(Acquire::HeldBy {
                holder: current.holder,
                expires_at_ms: current.expires_at_ms,
            }),
            None => Err(ClusterError::Conflict(format!(
                "lease `{name}` changed while taking it and is gone now"
            ))),
        },
        Err(error) => Err(update_error(error, name)),
    }
}

/// Extends `lease` by `ttl_ms` from now; `LeaseLost` when another node has taken it since.
pub async fn renew(
    store: &dyn ObjectStore,
    clock: &dyn Clock,
    lease: &Lease,
    ttl_ms: i64,
) -> Result<Lease, ClusterError> {
    let path = lease_path(&lease.name)?;
    let record = LeaseRecord {
        version: FORMAT_VERSION,
        holder: lease.holder.clone(),
        epoch: lease.epoch,
        expires_at_ms: clock.now_ms().saturating_add(ttl_ms),
        write_id: Ulid::generate().to_string(),
    };
    let mode = PutMode::Update(lease.version.clone());
    match write_record(store, &path, &record, mode).await {
        Ok(version) => Ok(lease_of(&lease.name, record, version)),
        Err(object_store::Error::Precondition { .. }) => Err(ClusterError::LeaseLost {
            name: lease.name.clone(),
            holder: lease.holder.to_string(),
        }),
        Err(error) => Err(update_error(error, &lease.name)),
    }
}

/// Gives `lease` up at once (it stays recorded as expired, so the epoch survives); a lease
/// already taken over is left alone.
pub async fn release(store: &dyn ObjectStore, lease: Lease) -> Result<(), ClusterError> {
    let path = lease_path(&lease.name)?;
    let record = LeaseRecord {
        version: FORMAT_VERSION,
        holder: lease.holder.clone(),
        epoch: lease.epoch,
        expires_at_ms: 0,
        write_id: Ulid::generate().to_string(),
    };
    match write_record(store, &path, &record, PutMode::Update(lease.version)).await {
        Ok(_) | Err(object_store::Error::Precondition { .. }) => Ok(()),
        Err(error) => Err(update_error(error, &lease.name)),
    }
}

fn lease_of(name: &str, record: LeaseRecord, version: UpdateVersion) -> Lease {
    Lease {
        name: name.to_string(),
        holder: record.holder,
        epoch: record.epoch,
        expires_at_ms: record.expires_at_ms,
        version,
    }
}

async fn read_record(
    store: &dyn ObjectStore,
    path: &Path,
) -> Result<Option<(LeaseRecord, UpdateVersion)>, ClusterError> {
    let got = match store.get(path).await {
        Ok(got) => got,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(error) => return Err(error.into()),
    };
    let version = UpdateVersion {
        e_tag: got.meta.e_tag.clone(),
        version: got.meta.version.clone(),
    };
    let bytes = got.bytes().await?;
    let record: LeaseRecord =
        serde_json::from_slice(&bytes).map_err(|error| ClusterError::Corrupt {
            path: path.to_string(),
            reason: error.to_string(),
        })?;
    if record.version > FORMAT_VERSION {
        return Err(ClusterError::Corrupt {
            path: path.to_string(),
            reason: format!("written by a newer infersight (format {})", record.version),
        });
    }
    Ok(Some((record, version)))
}

async fn write_record(
    store: &dyn ObjectStore,
    path: &Path,
    record: &LeaseRecord,
    mode: PutMode,
) -> object_store::Result<UpdateVersion> {
    let body = serde_json::to_vec(record).map_err(|error| object_store::Error::Generic {
        store: "lease",
        source: Box::new(error),
    })?;
    let result = store
        .put_opts(path, PutPayload::from(body), PutOptions::from(mode))
        .await?;
    Ok(UpdateVersion::from(result))
}

fn update_error(error: object_store::Error, name: &str) -> ClusterError {
    match error {
        object_store::Error::NotImplemented { .. } => ClusterError::UnsafeStore(format!(
            "lease `{name}` needs conditional updates (If-Match), which this store does not \
             support: {error}"
        )),
        other => ClusterError::Store(other),
    }
}
