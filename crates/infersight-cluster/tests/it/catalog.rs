//! The catalog log: racing committers on `InMemory` and `LocalFileSystem` lose no entry and write
//! none twice, a lost race (412) re-reads and retries, contradicting commits are refused, a lost
//! answer is not committed twice, checkpoints replay to the same state, and a store that ignores
//! conditional writes is refused.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;

use infersight_cluster::catalog::{replay, replay_from_start};
use infersight_cluster::layout::{checkpoint_path, log_entry_path};
use infersight_cluster::self_check::{check_conditional_create, check_conditional_update};
use infersight_cluster::{
    Action, CatalogBackend, CatalogConfig, ClusterError, LogEntry, ObjectStoreCatalog, SystemClock,
};
use infersight_model::Table;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::support::{Fault, Faulty, node, open, segment};

const HOUR_NS: i64 = 1_700_000_000_000_000_000;

async fn read_entry(store: &dyn ObjectStore, seq: u64) -> Option<LogEntry> {
    let got = store.get(&log_entry_path(seq)).await.ok()?;
    Some(serde_json::from_slice(&got.bytes().await.unwrap()).unwrap())
}

/// `nodes` handles commit `per_node` segments each at once; the log must hold every one once.
async fn race_committers(store: Arc<dyn ObjectStore>, nodes: usize, per_node: u64) {
    let mut tasks = Vec::new();
    for n in 0..nodes {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            let catalog = open(&store, &format!("ingest-{n}"), 7, Arc::new(SystemClock)).await;
            let me = node(&format!("ingest-{n}"));
            let mut committed = Vec::new();
            for wal_seq in 1..=per_node {
                let added = segment(&me, Table::Requests, HOUR_NS);
                let actions = vec![
                    Action::AddSegment {
                        segment: added.clone(),
                    },
                    Action::FlushedWal {
                        node: me.clone(),
                        wal_seq,
                    },
                ];
                let seq = catalog.commit(actions).await.unwrap();
                committed.push((seq, added.id));
            }
            (committed, catalog.lost_races())
        }));
    }
    let mut seqs = BTreeSet::new();
    let mut ids = BTreeSet::new();
    let mut lost_races = 0;
    for task in tasks {
        let (committed, lost) = task.await.unwrap();
        lost_races += lost;
        for (seq, id) in committed {
            assert!(seqs.insert(seq), "sequence {seq} returned to two commits");
            assert!(ids.insert(id));
        }
    }
    let total = nodes as u64 * per_node;
    eprintln!("{total} commits by {nodes} nodes, {lost_races} lost races");
    assert_eq!(seqs, (1..=total).collect::<BTreeSet<_>>());

    let state = replay_from_start(store.as_ref()).await.unwrap();
    assert_eq!(state.seq, total);
    assert_eq!(state.segments.keys().cloned().collect::<BTreeSet<_>>(), ids);
    for n in 0..nodes {
        assert_eq!(state.flushed_wal[&node(&format!("ingest-{n}"))], per_node);
    }
    // every segment is added by exactly one entry
    let mut seen = BTreeSet::new();
    for seq in 1..=total {
        let entry = read_entry(store.as_ref(), seq).await.unwrap();
        for action in entry.actions {
            if let Action::AddSegment { segment } = action {
                assert!(seen.insert(segment.id), "segment added twice");
            }
        }
    }
    assert_eq!(seen, ids);
    assert!(read_entry(store.as_ref(), total + 1).await.is_none());
    assert_eq!(replay(store.as_ref()).await.unwrap(), state);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_committers_on_in_memory_lose_no_entry_and_write_none_twice() {
    // requests yield as network ones would, so commits interleave and lose races
    let store = Faulty {
        inner: Arc::new(InMemory::new()),
        fault: Fault::Yield,
    };
    race_committers(Arc::new(store), 6, 15).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_committers_on_local_filesystem_lose_no_entry_and_write_none_twice() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalFileSystem::new_with_prefix(dir.path()).unwrap();
    race_committers(Arc::new(store), 4, 10).await;
}

#[tokio::test]
async fn a_lost_race_rereads_the_log_and_commits_at_the_next_sequence() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let clock = Arc::new(SystemClock);
    let first = open(&store, "ingest-a", 100, clock.clone()).await;
    // a second handle whose view is stale: its first write targets a taken sequence
    let second = open(&store, "ingest-b", 100, clock).await;
    let a = node("ingest-a");
    let b = node("ingest-b");
    let one = segment(&a, Table::Spans, HOUR_NS);
    assert_eq!(
        first
            .commit(vec![Action::AddSegment {
                segment: one.clone()
            }])
            .await
            .unwrap(),
        1
    );
    // `second` read nothing yet; sneak an entry in between its read and its write by writing
    // sequence 2 directly, as a node it cannot see would
    let sneaky = LogEntry {
        version: 1,
        seq: 2,
        commit_id: "someone-else".into(),
        node: node("ingest-c"),
        committed_at_ms: 0,
        fence: None,
        actions: vec![Action::FlushedWal {
            node: node("ingest-c"),
            wal_seq: 9,
        }],
    };
    store
        .put(
            &log_entry_path(2),
            PutPayload::from(serde_json::to_vec(&sneaky).unwrap()),
        )
        .await
        .unwrap();
    let two = segment(&b, Table::Spans, HOUR_NS);
    let seq = second
        .commit(vec![Action::AddSegment {
            segment: two.clone(),
        }])
        .await
        .unwrap();
    assert_eq!(seq, 3);
    let state = second.refresh().await.unwrap();
    assert_eq!(state.segments.len(), 2);
    assert_eq!(state.flushed_wal[&node("ingest-c")], 9);
}

#[tokio::test]
async fn a_lost_create_is_answered_412_and_retried_after_rereading() {
    // every request yields first, so the two commits below interleave step by step
    let store: Arc<dyn ObjectStore> = Arc::new(Faulty {
        inner: Arc::new(InMemory::new()),
        fault: Fault::Yield,
    });
    let clock = Arc::new(SystemClock);
    let a = open(&store, "ingest-a", 100, clock.clone()).await;
    let b = open(&store, "ingest-b", 100, clock).await;
    let me_a = node("ingest-a");
    let me_b = node("ingest-b");
    // both handles start from sequence 0 and run on one thread: each reads the (empty) tail
    // before either writes, both create sequence 1, one is answered 412
    let (ra, rb) = tokio::join!(
        a.commit(vec![Action::AddSegment {
            segment: segment(&me_a, Table::Logs, HOUR_NS)
        }]),
        b.commit(vec![Action::AddSegment {
            segment: segment(&me_b, Table::Logs, HOUR_NS)
        }]),
    );
    let mut seqs = [ra.unwrap(), rb.unwrap()];
    seqs.sort_unstable();
    assert_eq!(seqs, [1, 2]);
    assert_eq!(
        a.lost_races() + b.lost_races(),
        1,
        "exactly one of the two lost sequence 1"
    );
    assert_eq!(
        replay_from_start(store.as_ref())
            .await
            .unwrap()
            .segments
            .len(),
        2
    );
}

#[tokio::test]
async fn commits_that_contradict_the_catalog_are_refused_even_after_a_lost_race() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let clock = Arc::new(SystemClock);
    let ingest = open(&store, "ingest-a", 100, clock.clone()).await;
    let me = node("ingest-a");
    let old = segment(&me, Table::Requests, HOUR_NS);
    ingest
        .commit(vec![Action::AddSegment {
            segment: old.clone(),
        }])
        .await
        .unwrap();
    ingest
        .commit(vec![Action::FlushedWal {
            node: me.clone(),
            wal_seq: 50,
        }])
        .await
        .unwrap();

    // two compactors both saw `old` and both try to replace it
    let first = open(&store, "compact-1", 100, clock.clone()).await;
    let second = open(&store, "compact-2", 100, clock).await;
    let merged_first = segment(&node("compact-1"), Table::Requests, HOUR_NS);
    let merged_second = segment(&node("compact-2"), Table::Requests, HOUR_NS);
    first
        .commit(vec![
            Action::RemoveSegment { id: old.id.clone() },
            Action::AddSegment {
                segment: merged_first.clone(),
            },
        ])
        .await
        .unwrap();
    let refused = second
        .commit(vec![
            Action::RemoveSegment { id: old.id.clone() },
            Action::AddSegment {
                segment: merged_second,
            },
        ])
        .await;
    assert!(
        matches!(refused, Err(ClusterError::Conflict(_))),
        "{refused:?}"
    );

    let again = ingest
        .commit(vec![Action::AddSegment {
            segment: merged_first,
        }])
        .await;
    assert!(matches!(again, Err(ClusterError::Conflict(_))), "{again:?}");
    let duplicate = segment(&me, Table::Requests, HOUR_NS);
    let twice = ingest
        .commit(vec![
            Action::AddSegment {
                segment: duplicate.clone(),
            },
            Action::AddSegment { segment: duplicate },
        ])
        .await;
    assert!(matches!(twice, Err(ClusterError::Conflict(_))), "{twice:?}");
    let backwards = ingest
        .commit(vec![Action::FlushedWal {
            node: me,
            wal_seq: 49,
        }])
        .await;
    assert!(
        matches!(backwards, Err(ClusterError::Conflict(_))),
        "{backwards:?}"
    );
    let mut unknown_table = segment(&node("ingest-a"), Table::Requests, HOUR_NS);
    unknown_table.table = "nope".into();
    let invalid = ingest
        .commit(vec![Action::AddSegment {
            segment: unknown_table,
        }])
        .await;
    assert!(
        matches!(invalid, Err(ClusterError::Invalid { .. })),
        "{invalid:?}"
    );
    // nothing refused reached the log
    assert_eq!(replay_from_start(store.as_ref()).await.unwrap().seq, 3);
}

#[tokio::test]
async fn a_commit_whose_answer_was_lost_is_found_in_the_log_not_written_twice() {
    // the create of the first entry lands, but its answer is a transport error
    let store: Arc<dyn ObjectStore> = Arc::new(Faulty {
        inner: Arc::new(InMemory::new()),
        fault: Fault::LoseAnswers(AtomicU32::new(1)),
    });
    let catalog = open(&store, "ingest-a", 100, Arc::new(SystemClock)).await;
    let me = node("ingest-a");
    let seq = catalog
        .commit(vec![Action::AddSegment {
            segment: segment(&me, Table::Tokens, HOUR_NS),
        }])
        .await
        .unwrap();
    assert_eq!(seq, 1);
    let next = catalog
        .commit(vec![Action::AddSegment {
            segment: segment(&me, Table::Tokens, HOUR_NS),
        }])
        .await
        .unwrap();
    assert_eq!(next, 2);
    let state = replay_from_start(store.as_ref()).await.unwrap();
    assert_eq!((state.seq, state.segments.len()), (2, 2));
}

#[tokio::test]
async fn replay_from_the_latest_checkpoint_equals_replay_from_the_start() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let clock = Arc::new(SystemClock);
    let nodes = [node("ingest-a"), node("ingest-b")];
    let catalogs = [
        open(&store, "ingest-a", 5, clock.clone()).await,
        open(&store, "ingest-b", 5, clock).await,
    ];
    let mut live = Vec::new();
    for step in 0..23_u64 {
        let who = (step % 2) as usize;
        let mut actions = vec![Action::FlushedWal {
            node: nodes[who].clone(),
            wal_seq: step,
        }];
        if step % 3 == 2 {
            let gone: infersight_cluster::SegmentMeta = live.remove(0);
            actions.push(Action::RemoveSegment { id: gone.id });
        } else {
            let added = segment(&nodes[who], Table::Requests, HOUR_NS + step as i64);
            live.push(added.clone());
            actions.push(Action::AddSegment { segment: added });
        }
        catalogs[who].commit(actions).await.unwrap();
    }
    for seq in [5, 10, 15, 20] {
        assert!(
            store.head(&checkpoint_path(seq)).await.is_ok(),
            "checkpoint {seq}"
        );
    }
    let from_start = replay_from_start(store.as_ref()).await.unwrap();
    assert_eq!(from_start.seq, 23);
    assert_eq!(from_start.segments.len(), live.len());
    assert_eq!(replay(store.as_ref()).await.unwrap(), from_start);

    // an unreadable newest checkpoint falls back to the one before it
    store
        .put(
            &checkpoint_path(20),
            PutPayload::from_static(b"{\"version\":1,\"sta"),
        )
        .await
        .unwrap();
    assert_eq!(replay(store.as_ref()).await.unwrap(), from_start);

    // the checkpoint really is what replay starts from: without the entries it covers, the
    // state is still whole
    store
        .put(
            &checkpoint_path(20),
            PutPayload::from(
                serde_json::to_vec(&infersight_cluster::entry::Checkpoint {
                    version: 1,
                    state: replay_from_start_until(store.as_ref(), 20).await,
                })
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    for seq in 1..=20 {
        store.delete(&log_entry_path(seq)).await.unwrap();
    }
    assert_eq!(replay(store.as_ref()).await.unwrap(), from_start);
}

/// The state after entries 1..=`seq` (replayed by hand).
async fn replay_from_start_until(
    store: &dyn ObjectStore,
    seq: u64,
) -> infersight_cluster::CatalogState {
    let mut state = infersight_cluster::CatalogState::default();
    for s in 1..=seq {
        state.apply(&read_entry(store, s).await.unwrap());
    }
    state
}

#[tokio::test]
async fn a_store_that_ignores_conditional_writes_is_refused_before_anything_is_written() {
    let careless: Arc<dyn ObjectStore> = Arc::new(Faulty {
        inner: Arc::new(InMemory::new()),
        fault: Fault::IgnoreConditions,
    });
    let refused =
        ObjectStoreCatalog::open(Arc::clone(&careless), CatalogConfig::new(node("ingest-a"))).await;
    match refused {
        Err(error @ ClusterError::UnsafeStore(_)) => {
            assert!(error.to_string().contains("412"), "{error}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(matches!(
        check_conditional_update(careless.as_ref()).await,
        Err(ClusterError::UnsafeStore(_))
    ));
    assert!(read_entry(careless.as_ref(), 1).await.is_none());
    // the probes were cleaned up
    let left = futures::TryStreamExt::try_collect::<Vec<_>>(careless.list(None))
        .await
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn local_filesystem_has_conditional_create_but_no_conditional_update() {
    let dir = tempfile::tempdir().unwrap();
    let local = LocalFileSystem::new_with_prefix(dir.path()).unwrap();
    check_conditional_create(&local).await.unwrap();
    assert!(matches!(
        check_conditional_update(&local).await,
        Err(ClusterError::UnsafeStore(_))
    ));
    let memory = InMemory::new();
    check_conditional_create(&memory).await.unwrap();
    check_conditional_update(&memory).await.unwrap();
}

#[test]
fn a_segment_entry_without_a_tier_is_warm_and_a_cold_one_round_trips() {
    let mut meta = segment(&node("ingest-1"), Table::Spans, HOUR_NS);
    let warm = serde_json::to_value(&meta).unwrap();
    assert!(
        warm.get("tier").is_none(),
        "warm is the default, not written: {warm}"
    );
    let parsed: infersight_cluster::SegmentMeta = serde_json::from_value(warm).unwrap();
    assert_eq!(parsed.tier, infersight_cluster::Tier::Warm);
    meta.tier = infersight_cluster::Tier::Cold;
    let cold = serde_json::to_value(&meta).unwrap();
    assert_eq!(cold["tier"], "cold");
    let parsed: infersight_cluster::SegmentMeta = serde_json::from_value(cold).unwrap();
    assert_eq!(parsed, meta);
}

/// Pruning: the entries up to the second newest checkpoint and the checkpoints before it go; a
/// new reader and a handle that fell behind before the pruning both arrive at the same state,
/// and the lagging handle's next commit takes the next sequence, never a pruned one.
#[tokio::test]
async fn a_pruned_log_reads_the_same_and_a_lagging_committer_never_reuses_a_sequence() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let config = |name: &str| {
        let mut config = CatalogConfig::new(node(name));
        config.checkpoint_every = 5;
        config
    };
    let writer = ObjectStoreCatalog::open(Arc::clone(&store), config("ingest-a"))
        .await
        .unwrap();
    let flush = |wal_seq: u64| {
        vec![Action::FlushedWal {
            node: node("ingest-a"),
            wal_seq,
        }]
    };
    writer.commit(flush(1)).await.unwrap();
    // behind from here on
    let lagging = ObjectStoreCatalog::open(Arc::clone(&store), config("ingest-b"))
        .await
        .unwrap();
    for wal_seq in 2..=23 {
        writer.commit(flush(wal_seq)).await.unwrap();
    }
    let before = replay_from_start(store.as_ref()).await.unwrap();
    let pruned = writer.prune().await.unwrap();
    assert_eq!(
        (pruned.entries, pruned.checkpoints, pruned.through),
        (15, 2, 15),
        "entries 1..=15 and checkpoints 5 and 10 go; 15 and 20 stay"
    );
    for seq in 1..=15 {
        assert!(read_entry(store.as_ref(), seq).await.is_none(), "{seq}");
    }
    assert!(read_entry(store.as_ref(), 16).await.is_some());
    assert_eq!(
        writer.prune().await.unwrap(),
        Default::default(),
        "nothing new"
    );

    assert_eq!(replay(store.as_ref()).await.unwrap(), before);
    assert_eq!(*lagging.refresh().await.unwrap(), before);
    let lagging = ObjectStoreCatalog::open(Arc::clone(&store), config("ingest-b"))
        .await
        .unwrap();
    let behind = ObjectStoreCatalog::open(Arc::clone(&store), config("ingest-c"))
        .await
        .unwrap();
    for seq in 24..=31 {
        writer.commit(flush(seq)).await.unwrap();
    }
    assert_eq!(writer.prune().await.unwrap().through, 25);
    // `behind` last read entry 23, now pruned up to 25: its commit lands after 31
    let seq = behind
        .commit(vec![Action::FlushedWal {
            node: node("ingest-c"),
            wal_seq: 1,
        }])
        .await
        .unwrap();
    assert_eq!(seq, 32);
    assert!(read_entry(store.as_ref(), 24).await.is_none());
    assert_eq!(lagging.refresh().await.unwrap().seq, 32);
    assert_eq!(replay(store.as_ref()).await.unwrap().seq, 32);
}
