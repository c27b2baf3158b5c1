//! Leases: one holder at a time, an expired lease is taken over (its epoch raised), the old
//! holder can neither renew it nor commit under it, and racing takers get exactly one winner.

use std::sync::Arc;

use infersight_cluster::{
    Acquire, Action, CatalogBackend, ClusterError, ManualClock, ObjectStoreCatalog, SystemClock,
};
use infersight_model::Table;
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;

use crate::support::{node, open, segment};

const TTL_MS: i64 = 10_000;
const HOUR_NS: i64 = 1_700_000_000_000_000_000;

fn acquired(outcome: Acquire) -> infersight_cluster::Lease {
    match outcome {
        Acquire::Acquired(lease) => lease,
        Acquire::HeldBy { holder, .. } => panic!("lease held by {holder}"),
    }
}

#[tokio::test]
async fn an_expired_lease_is_taken_over_and_its_old_holder_fenced_off() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let clock = Arc::new(ManualClock::new(1_000_000));
    let old = open(&store, "compact-1", 100, clock.clone()).await;
    let new = open(&store, "compact-2", 100, clock.clone()).await;

    let first = acquired(old.acquire_lease("compact", TTL_MS).await.unwrap());
    assert_eq!(first.epoch, 1);
    match new.acquire_lease("compact", TTL_MS).await.unwrap() {
        Acquire::HeldBy {
            holder,
            expires_at_ms,
        } => {
            assert_eq!(holder, node("compact-1"));
            assert_eq!(expires_at_ms, 1_000_000 + TTL_MS);
        }
        Acquire::Acquired(_) => panic!("two holders"),
    }
    // renewing keeps the epoch and moves the expiry
    clock.advance_ms(TTL_MS / 2);
    let first = old.renew_lease(&first, TTL_MS).await.unwrap();
    assert_eq!((first.epoch, first.expires_at_ms), (1, 1_005_000 + TTL_MS));
    clock.advance_ms(TTL_MS - 1);
    assert!(matches!(
        new.acquire_lease("compact", TTL_MS).await.unwrap(),
        Acquire::HeldBy { .. }
    ));

    // the old holder stalls past its expiry; the other node takes over with a higher epoch
    clock.advance_ms(2);
    let second = acquired(new.acquire_lease("compact", TTL_MS).await.unwrap());
    assert_eq!(second.epoch, 2);
    let merged = segment(&node("compact-2"), Table::Requests, HOUR_NS);
    new.commit_fenced(vec![Action::AddSegment { segment: merged }], &second)
        .await
        .unwrap();

    let renewed = old.renew_lease(&first, TTL_MS).await;
    assert!(
        matches!(renewed, Err(ClusterError::LeaseLost { .. })),
        "{renewed:?}"
    );
    let stale = segment(&node("compact-1"), Table::Requests, HOUR_NS);
    let fenced = old
        .commit_fenced(vec![Action::AddSegment { segment: stale }], &first)
        .await;
    assert!(
        matches!(fenced, Err(ClusterError::Conflict(_))),
        "{fenced:?}"
    );

    // released: free at once for the other node, epoch raised again
    new.release_lease(second).await.unwrap();
    let third = acquired(old.acquire_lease("compact", TTL_MS).await.unwrap());
    assert_eq!(third.epoch, 3);
    // releasing a lease taken over since does nothing
    old.release_lease(first).await.unwrap();
    assert!(matches!(
        new.acquire_lease("compact", TTL_MS).await.unwrap(),
        Acquire::HeldBy { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_racing_for_a_free_lease_get_exactly_one_holder() {
    for round in 0..5 {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let mut tasks = Vec::new();
        for n in 0..8 {
            let store = Arc::clone(&store);
            tasks.push(tokio::spawn(async move {
                let catalog =
                    open(&store, &format!("compact-{n}"), 100, Arc::new(SystemClock)).await;
                catalog.acquire_lease("compact", TTL_MS).await.unwrap()
            }));
        }
        let mut holders = 0;
        for task in tasks {
            if let Acquire::Acquired(_) = task.await.unwrap() {
                holders += 1;
            }
        }
        assert_eq!(holders, 1, "round {round}");
    }
}

#[tokio::test]
async fn leases_on_a_store_without_conditional_updates_are_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    let catalog = ObjectStoreCatalog::open(
        store,
        infersight_cluster::CatalogConfig::new(node("compact-1")),
    )
    .await
    .unwrap();
    match catalog.acquire_lease("compact", TTL_MS).await {
        Err(error @ ClusterError::UnsafeStore(_)) => {
            assert!(error.to_string().contains("If-Match"), "{error}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}
