//! A property test: random interleavings of commits, checkpoints, log pruning, re-opens, lease
//! operations and clock moves by three nodes over one store agree, after every step, with a
//! plain model of the catalog and the lease; at the end replay from checkpoints equals replay
//! from the start.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use infersight_cluster::catalog::{replay, replay_from_start};
use infersight_cluster::{
    Acquire, Action, CatalogBackend, ClusterError, Lease, ManualClock, NodeId, ObjectStoreCatalog,
    SegmentId,
};
use infersight_model::Table;
use object_store::ObjectStore;
use object_store::memory::InMemory;
use proptest::prelude::*;

use crate::support::{node, open, segment};

const NODES: usize = 3;
const TTL_MS: i64 = 1_000;
const LEASE: &str = "compact";

#[derive(Debug, Clone)]
enum Op {
    Add(usize),
    Remove(usize, usize),
    RemoveMissing(usize),
    Flush(usize, u64),
    Checkpoint(usize),
    Prune(usize),
    Reopen(usize),
    Acquire(usize),
    Renew(usize),
    Release(usize),
    FencedAdd(usize),
    Advance(i64),
}

fn op() -> impl Strategy<Value = Op> {
    let who = 0..NODES;
    prop_oneof![
        4 => who.clone().prop_map(Op::Add),
        2 => (who.clone(), any::<usize>()).prop_map(|(n, k)| Op::Remove(n, k)),
        1 => who.clone().prop_map(Op::RemoveMissing),
        2 => (who.clone(), 0..3_u64).prop_map(|(n, by)| Op::Flush(n, by)),
        1 => who.clone().prop_map(Op::Checkpoint),
        2 => who.clone().prop_map(Op::Prune),
        1 => who.clone().prop_map(Op::Reopen),
        2 => who.clone().prop_map(Op::Acquire),
        1 => who.clone().prop_map(Op::Renew),
        1 => who.clone().prop_map(Op::Release),
        2 => who.clone().prop_map(Op::FencedAdd),
        2 => (0..2 * TTL_MS).prop_map(Op::Advance),
    ]
}

/// What the lease record in the store says.
#[derive(Debug, Default)]
struct LeaseModel {
    holder: Option<usize>,
    epoch: u64,
    expires_at_ms: i64,
    /// The highest epoch that has committed under the lease.
    fenced_at: u64,
}

#[derive(Debug, Default)]
struct Model {
    seq: u64,
    segments: BTreeSet<SegmentId>,
    flushed: BTreeMap<NodeId, u64>,
    lease: LeaseModel,
}

struct World {
    store: Arc<dyn ObjectStore>,
    clock: Arc<ManualClock>,
    catalogs: Vec<ObjectStoreCatalog>,
    held: Vec<Option<Lease>>,
    model: Model,
}

fn name(n: usize) -> String {
    format!("node-{n}")
}

impl World {
    async fn new() -> Self {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let clock = Arc::new(ManualClock::new(10_000));
        let mut catalogs = Vec::new();
        for n in 0..NODES {
            catalogs.push(open(&store, &name(n), 3, clock.clone()).await);
        }
        Self {
            store,
            clock,
            catalogs,
            held: vec![None; NODES],
            model: Model::default(),
        }
    }

    async fn commit_ok(&mut self, n: usize, actions: Vec<Action>, lease: Option<&Lease>) {
        let seq = match lease {
            Some(lease) => self.catalogs[n].commit_fenced(actions.clone(), lease).await,
            None => self.catalogs[n].commit(actions.clone()).await,
        }
        .unwrap();
        self.model.seq += 1;
        assert_eq!(seq, self.model.seq);
        for action in actions {
            match action {
                Action::AddSegment { segment } => assert!(self.model.segments.insert(segment.id)),
                Action::RemoveSegment { id } => assert!(self.model.segments.remove(&id)),
                Action::FlushedWal { node, wal_seq } => {
                    self.model.flushed.insert(node, wal_seq);
                }
            }
        }
    }

    async fn run(&mut self, op: Op) {
        let now = self.clock.as_ref();
        let now_ms = infersight_cluster::Clock::now_ms(now);
        match op {
            Op::Add(n) => {
                let added = segment(&node(&name(n)), Table::Requests, 0);
                self.commit_ok(n, vec![Action::AddSegment { segment: added }], None)
                    .await;
            }
            Op::Remove(n, k) if !self.model.segments.is_empty() => {
                let id = self
                    .model
                    .segments
                    .iter()
                    .nth(k % self.model.segments.len())
                    .cloned();
                let id = id.unwrap();
                self.commit_ok(n, vec![Action::RemoveSegment { id }], None)
                    .await;
            }
            Op::Remove(n, _) | Op::RemoveMissing(n) => {
                let id = SegmentId::new(&node(&name(n)));
                let refused = self.catalogs[n]
                    .commit(vec![Action::RemoveSegment { id }])
                    .await;
                assert!(
                    matches!(refused, Err(ClusterError::Conflict(_))),
                    "{refused:?}"
                );
            }
            Op::Flush(n, by) => {
                let me = node(&name(n));
                let wal_seq = self.model.flushed.get(&me).copied().unwrap_or(0) + by;
                self.commit_ok(n, vec![Action::FlushedWal { node: me, wal_seq }], None)
                    .await;
            }
            Op::Checkpoint(n) => {
                assert_eq!(self.catalogs[n].checkpoint().await.unwrap(), self.model.seq);
            }
            // pruning changes no state: every handle, however far behind, still agrees and
            // commits the next sequence
            Op::Prune(n) => {
                self.catalogs[n].prune().await.unwrap();
            }
            Op::Reopen(n) => {
                self.catalogs[n] = open(&self.store, &name(n), 3, self.clock.clone()).await;
            }
            Op::Acquire(n) => self.acquire(n, now_ms).await,
            Op::Renew(n) => {
                let Some(lease) = self.held[n].clone() else {
                    return;
                };
                let renewed = self.catalogs[n].renew_lease(&lease, TTL_MS).await;
                if self.model.lease.holder == Some(n) && self.model.lease.epoch == lease.epoch {
                    self.held[n] = Some(renewed.unwrap());
                    self.model.lease.expires_at_ms = now_ms + TTL_MS;
                } else {
                    assert!(
                        matches!(renewed, Err(ClusterError::LeaseLost { .. })),
                        "{renewed:?}"
                    );
                    self.held[n] = None;
                }
            }
            Op::Release(n) => {
                let Some(lease) = self.held[n].take() else {
                    return;
                };
                let epoch = lease.epoch;
                self.catalogs[n].release_lease(lease).await.unwrap();
                if self.model.lease.holder == Some(n) && self.model.lease.epoch == epoch {
                    self.model.lease.expires_at_ms = 0;
                }
            }
            Op::FencedAdd(n) => {
                let Some(lease) = self.held[n].clone() else {
                    return;
                };
                let added = segment(&node(&name(n)), Table::Spans, 0);
                let actions = vec![Action::AddSegment { segment: added }];
                if lease.epoch >= self.model.lease.fenced_at {
                    self.commit_ok(n, actions, Some(&lease)).await;
                    self.model.lease.fenced_at = lease.epoch;
                } else {
                    let refused = self.catalogs[n].commit_fenced(actions, &lease).await;
                    assert!(
                        matches!(refused, Err(ClusterError::Conflict(_))),
                        "{refused:?}"
                    );
                }
            }
            Op::Advance(ms) => self.clock.advance_ms(ms),
        }
    }

    async fn acquire(&mut self, n: usize, now_ms: i64) {
        let outcome = self.catalogs[n].acquire_lease(LEASE, TTL_MS).await.unwrap();
        let lease = &mut self.model.lease;
        let free =
            lease.holder.is_none() || lease.holder == Some(n) || lease.expires_at_ms <= now_ms;
        if free {
            if lease.holder != Some(n) {
                lease.epoch += 1;
            }
            lease.holder = Some(n);
            lease.expires_at_ms = now_ms + TTL_MS;
            let got = match outcome {
                Acquire::Acquired(got) => got,
                other => panic!("model says free, store says {other:?}"),
            };
            assert_eq!(got.epoch, lease.epoch);
            self.held[n] = Some(got);
        } else {
            match outcome {
                Acquire::HeldBy {
                    holder,
                    expires_at_ms,
                } => {
                    assert_eq!(Some(holder), lease.holder.map(|h| node(&name(h))));
                    assert_eq!(expires_at_ms, lease.expires_at_ms);
                }
                other => panic!("model says held, store says {other:?}"),
            }
        }
    }

    async fn agrees(&self, n: usize) {
        let state = self.catalogs[n].refresh().await.unwrap();
        assert_eq!(state.seq, self.model.seq);
        assert_eq!(
            state.segments.keys().cloned().collect::<BTreeSet<_>>(),
            self.model.segments
        );
        let flushed: BTreeMap<NodeId, u64> = state.flushed_wal.clone();
        assert_eq!(flushed, self.model.flushed);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn interleavings_agree_with_the_model(ops in prop::collection::vec((op(), 0..NODES), 1..60)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let mut world = World::new().await;
            for (op, observer) in ops {
                world.run(op).await;
                world.agrees(observer).await;
            }
            let from_start = replay_from_start(world.store.as_ref()).await.unwrap();
            assert_eq!(replay(world.store.as_ref()).await.unwrap(), from_start);
            assert_eq!(from_start.seq, world.model.seq);
        });
    }
}
