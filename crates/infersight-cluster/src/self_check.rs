//! The startup check of the store the catalog lives in: the catalog log is safe only if a second
//! create of the same key is refused (If-None-Match: * answered with 412), and leases only if a
//! stale If-Match is refused. A store (or a proxy, or an S3 clone) that silently accepts both
//! writes would let two nodes commit the same sequence, so it is refused before anything is written.

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};

use crate::error::ClusterError;
use crate::layout::self_check_path;
use crate::ulid::Ulid;

/// Refuses a store that does not answer a second If-None-Match create of one key with 412.
pub async fn check_conditional_create(store: &dyn ObjectStore) -> Result<(), ClusterError> {
    let probe = self_check_path(Ulid::generate());
    let first = put(store, &probe, "first", PutMode::Create).await;
    if let Err(error) = first {
        return Err(refusal_or_failure(
            error,
            "a conditional create (If-None-Match: *)",
        ));
    }
    let second = put(store, &probe, "second", PutMode::Create).await;
    remove_probe(store, &probe).await;
    match second {
        Err(object_store::Error::AlreadyExists { .. }) => Ok(()),
        Ok(_) => Err(ClusterError::UnsafeStore(format!(
            "`{store}` accepted a second create of `{probe}` (If-None-Match: *) instead of \
             answering 412 Precondition Failed: it ignores conditional writes, so two nodes could \
             commit the same catalog sequence (for S3 clients: conditional put must be `etag`)"
        ))),
        Err(error) => Err(refusal_or_failure(
            error,
            "a second create of the same key (expected 412 Precondition Failed)",
        )),
    }
}

/// Refuses a store that does not apply a matching If-Match or does not refuse a stale one with
/// 412; leases need both.
pub async fn check_conditional_update(store: &dyn ObjectStore) -> Result<(), ClusterError> {
    let probe = self_check_path(Ulid::generate());
    let created = put(store, &probe, "first", PutMode::Create)
        .await
        .map_err(|error| refusal_or_failure(error, "a conditional create (If-None-Match: *)"))?;
    let stale = UpdateVersion::from(created);
    let current = put(store, &probe, "second", PutMode::Update(stale.clone())).await;
    let outcome = match current {
        Ok(_) => match put(store, &probe, "third", PutMode::Update(stale)).await {
            Err(object_store::Error::Precondition { .. }) => Ok(()),
            Ok(_) => Err(ClusterError::UnsafeStore(format!(
                "`{store}` accepted an update of `{probe}` with a stale If-Match instead of \
                 answering 412 Precondition Failed: two nodes could hold one lease"
            ))),
            Err(error) => Err(refusal_or_failure(
                error,
                "an update with a stale If-Match (expected 412 Precondition Failed)",
            )),
        },
        Err(error) => Err(refusal_or_failure(
            error,
            "an update with the current If-Match",
        )),
    };
    remove_probe(store, &probe).await;
    outcome
}

async fn put(
    store: &dyn ObjectStore,
    path: &Path,
    body: &'static str,
    mode: PutMode,
) -> object_store::Result<object_store::PutResult> {
    store
        .put_opts(
            path,
            PutPayload::from_static(body.as_bytes()),
            PutOptions::from(mode),
        )
        .await
}

/// A store that cannot do the operation at all is refused; one that failed to answer (down,
/// denied) is an ordinary store error the caller may retry.
fn refusal_or_failure(error: object_store::Error, operation: &str) -> ClusterError {
    match error {
        object_store::Error::NotImplemented { .. }
        | object_store::Error::Precondition { .. }
        | object_store::Error::AlreadyExists { .. }
        | object_store::Error::NotModified { .. } => {
            ClusterError::UnsafeStore(format!("{operation} failed: {error}"))
        }
        other => ClusterError::Store(other),
    }
}

async fn remove_probe(store: &dyn ObjectStore, probe: &Path) {
    if let Err(error) = store.delete(probe).await {
        tracing::warn!(%probe, %error, "could not delete the self-check probe");
    }
}
