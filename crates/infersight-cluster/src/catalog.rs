//! The catalog log in the bucket and the [`CatalogBackend`] seam the roles use.
//!
//! A commit is the next `catalog/log/<seq>.json`, written with If-None-Match: * (`PutMode::Create`):
//! of two nodes writing the same sequence exactly one succeeds; the other reads the entries it
//! missed, checks its actions again against the new state and tries the next sequence. Every
//! `checkpoint_every` commits the committer also writes the state as `catalog/checkpoint/<seq>.json`;
//! opening the catalog reads the latest checkpoint and the entries after it.
//!
//! [`ObjectStoreCatalog::prune`] (the maintaining node) deletes the entries up to the second
//! newest checkpoint and the checkpoints before it, so the log stays about two checkpoints long.
//! A reader that finds the entry after its state missing tells a pruned entry from the end of the
//! log by the checkpoints: a checkpoint at or past that sequence means the entry was written (a
//! checkpoint follows its entry), so it was pruned, and the reader starts again from the latest
//! checkpoint. Nobody can then write a pruned sequence again: a committer reads to the end first.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::TryStreamExt;
use infersight_model::rng::SplitMix64;
use object_store::path::Path;
use object_store::{GetOptions, ObjectStore, ObjectStoreExt as _, PutMode, PutOptions, PutPayload};
use serde::de::DeserializeOwned;

use crate::clock::{Clock, SystemClock};
use crate::entry::{Action, CatalogState, Checkpoint, FORMAT_VERSION, Fence, LogEntry};
use crate::error::ClusterError;
use crate::layout::{
    CHECKPOINT_DIR, LOG_DIR, checkpoint_path, checkpoint_seq, log_entry_path, log_entry_seq,
};
use crate::lease::{self, Acquire, Lease};
use crate::self_check;
use crate::ulid::{NodeId, Ulid};

/// What every role needs from the shared catalog, whatever holds it.
#[async_trait]
pub trait CatalogBackend: Send + Sync + std::fmt::Debug {
    /// Commits `actions` as one entry; returns its sequence. `Conflict` when they contradict the
    /// catalog (checked again after every lost race).
    async fn commit(&self, actions: Vec<Action>) -> Result<u64, ClusterError>;
    /// The same, under `lease`: refused once a later holder of the lease has committed.
    async fn commit_fenced(&self, actions: Vec<Action>, lease: &Lease)
    -> Result<u64, ClusterError>;
    /// The catalog with every entry committed so far.
    async fn refresh(&self) -> Result<Arc<CatalogState>, ClusterError>;
    /// Writes a checkpoint of the current state; returns its sequence (0: nothing to write).
    async fn checkpoint(&self) -> Result<u64, ClusterError>;
    async fn acquire_lease(&self, name: &str, ttl_ms: i64) -> Result<Acquire, ClusterError>;
    async fn renew_lease(&self, lease: &Lease, ttl_ms: i64) -> Result<Lease, ClusterError>;
    async fn release_lease(&self, lease: Lease) -> Result<(), ClusterError>;
}

/// How this node commits.
#[derive(Debug, Clone)]
pub struct CatalogConfig {
    pub node: NodeId,
    /// A checkpoint after every this many entries (at least 1).
    pub checkpoint_every: u64,
    /// Lost races before a commit gives up with `Contended`.
    pub max_attempts: u32,
}

impl CatalogConfig {
    pub fn new(node: NodeId) -> Self {
        Self {
            node,
            checkpoint_every: 100,
            max_attempts: 1000,
        }
    }
}

/// The catalog log in any `object_store` (S3, `LocalFileSystem`, `InMemory`).
#[derive(Debug)]
pub struct ObjectStoreCatalog {
    store: Arc<dyn ObjectStore>,
    config: CatalogConfig,
    clock: Arc<dyn Clock>,
    /// The state as of the last entry this handle read; held across a commit, so one handle's
    /// commits queue behind each other instead of racing.
    state: tokio::sync::Mutex<Arc<CatalogState>>,
    lost_races: AtomicU64,
    /// The log is pruned up to here (by this handle); a prune with nothing new to do lists nothing.
    pruned_through: AtomicU64,
    /// Set once the store has shown it refuses a stale If-Match (checked before the first lease).
    leases_checked: tokio::sync::OnceCell<()>,
}

impl ObjectStoreCatalog {
    /// Checks that the store refuses a second conditional create, then replays the catalog.
    pub async fn open(
        store: Arc<dyn ObjectStore>,
        config: CatalogConfig,
    ) -> Result<Self, ClusterError> {
        Self::open_with_clock(store, config, Arc::new(SystemClock)).await
    }

    pub async fn open_with_clock(
        store: Arc<dyn ObjectStore>,
        mut config: CatalogConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, ClusterError> {
        config.checkpoint_every = config.checkpoint_every.max(1);
        config.max_attempts = config.max_attempts.max(1);
        self_check::check_conditional_create(store.as_ref()).await?;
        let state = replay(store.as_ref()).await?;
        Ok(Self {
            store,
            config,
            clock,
            state: tokio::sync::Mutex::new(Arc::new(state)),
            lost_races: AtomicU64::new(0),
            pruned_through: AtomicU64::new(0),
            leases_checked: tokio::sync::OnceCell::new(),
        })
    }

    /// Races this handle lost to other committers (each cost one re-read and one retry).
    pub fn lost_races(&self) -> u64 {
        self.lost_races.load(Ordering::Relaxed)
    }

    /// Deletes what no reader needs any more: the log entries up to the second newest readable
    /// checkpoint and the checkpoints before it (the newest may turn out unreadable: the one
    /// before it and the entries after it stay). Safe beside readers and committers (see the
    /// module docs); only the node maintaining the bucket calls it.
    pub async fn prune(&self) -> Result<PruneReport, ClusterError> {
        let store = self.store.as_ref();
        let mut checkpoints = checkpoint_seqs(store).await?;
        checkpoints.sort_unstable_by(|a, b| b.cmp(a));
        // the second newest that reads back whole
        let mut keep_from = None;
        for &seq in checkpoints.iter().skip(1) {
            if let Ok(Some(_)) = read_checkpoint(store, seq).await {
                keep_from = Some(seq);
                break;
            }
        }
        let Some(keep_from) = keep_from else {
            return Ok(PruneReport::default());
        };
        if keep_from <= self.pruned_through.load(Ordering::Relaxed) {
            return Ok(PruneReport::default());
        }
        let mut report = PruneReport::default();
        let entries: Vec<Path> = store
            .list(Some(&Path::from(LOG_DIR)))
            .try_filter_map(|meta| {
                let old = log_entry_seq(&meta.location).is_some_and(|seq| seq <= keep_from);
                futures::future::ready(Ok(old.then_some(meta.location)))
            })
            .try_collect()
            .await?;
        for path in entries {
            delete_if_there(store, &path).await?;
            report.entries += 1;
        }
        for seq in checkpoints.into_iter().filter(|&seq| seq < keep_from) {
            delete_if_there(store, &checkpoint_path(seq)).await?;
            report.checkpoints += 1;
        }
        self.pruned_through.store(keep_from, Ordering::Relaxed);
        report.through = keep_from;
        Ok(report)
    }

    async fn commit_entry(
        &self,
        actions: Vec<Action>,
        fence: Option<Fence>,
    ) -> Result<u64, ClusterError> {
        let commit_id = Ulid::generate().to_string();
        let mut jitter = SplitMix64::new(Ulid::generate().time_ms() ^ self.lost_races());
        let mut guard = self.state.lock().await;
        let state = Arc::make_mut(&mut guard);
        for attempt in 0..self.config.max_attempts {
            let read = read_tail(self.store.as_ref(), state).await?;
            if let Some(mine) = read.iter().find(|entry| entry.commit_id == commit_id) {
                // our write landed though its answer was lost: committing again would duplicate it
                return Ok(mine.seq);
            }
            state.check(&actions, fence.as_ref())?;
            let entry = LogEntry {
                version: FORMAT_VERSION,
                seq: state.seq + 1,
                commit_id: commit_id.clone(),
                node: self.config.node.clone(),
                committed_at_ms: self.clock.now_ms(),
                fence: fence.clone(),
                actions: actions.clone(),
            };
            let path = log_entry_path(entry.seq);
            match put_json(self.store.as_ref(), &path, &entry, PutMode::Create).await {
                Ok(()) => {
                    state.apply(&entry);
                    if entry.seq.is_multiple_of(self.config.checkpoint_every) {
                        write_checkpoint(self.store.as_ref(), state).await;
                    }
                    return Ok(entry.seq);
                }
                Err(ClusterError::Store(object_store::Error::AlreadyExists { .. })) => {
                    self.lost_races.fetch_add(1, Ordering::Relaxed);
                    // a few ms of jitter, growing with the losses, so racers spread out
                    let ceiling_ms = 1_u64 << attempt.min(5);
                    let pause_ms = jitter.next_u64() % (ceiling_ms + 1);
                    tokio::time::sleep(Duration::from_millis(pause_ms)).await;
                }
                // no answer (a reset, a timeout) does not say the write failed: if the entry is
                // in the log, the commit is done; otherwise the caller gets the error
                Err(error) => {
                    return match read_tail(self.store.as_ref(), state).await {
                        Ok(read) => read
                            .iter()
                            .find(|entry| entry.commit_id == commit_id)
                            .map(|mine| mine.seq)
                            .ok_or(error),
                        Err(_) => Err(error),
                    };
                }
            }
        }
        Err(ClusterError::Contended {
            attempts: self.config.max_attempts,
        })
    }
}

#[async_trait]
impl CatalogBackend for ObjectStoreCatalog {
    async fn commit(&self, actions: Vec<Action>) -> Result<u64, ClusterError> {
        self.commit_entry(actions, None).await
    }

    async fn commit_fenced(
        &self,
        actions: Vec<Action>,
        lease: &Lease,
    ) -> Result<u64, ClusterError> {
        self.commit_entry(actions, Some(lease.fence())).await
    }

    async fn refresh(&self) -> Result<Arc<CatalogState>, ClusterError> {
        let mut guard = self.state.lock().await;
        read_tail(self.store.as_ref(), Arc::make_mut(&mut guard)).await?;
        Ok(Arc::clone(&guard))
    }

    async fn checkpoint(&self) -> Result<u64, ClusterError> {
        let mut guard = self.state.lock().await;
        let state = Arc::make_mut(&mut guard);
        read_tail(self.store.as_ref(), state).await?;
        if state.seq > 0 {
            let checkpoint = Checkpoint {
                version: FORMAT_VERSION,
                state: state.clone(),
            };
            let path = checkpoint_path(state.seq);
            match put_json(self.store.as_ref(), &path, &checkpoint, PutMode::Create).await {
                // the same sequence always holds the same state: another node's copy will do
                Ok(()) | Err(ClusterError::Store(object_store::Error::AlreadyExists { .. })) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(state.seq)
    }

    async fn acquire_lease(&self, name: &str, ttl_ms: i64) -> Result<Acquire, ClusterError> {
        let store = self.store.as_ref();
        // a store without conditional updates could hand out a lease nobody can renew or take over
        self.leases_checked
            .get_or_try_init(|| self_check::check_conditional_update(store))
            .await?;
        lease::acquire(store, self.clock.as_ref(), name, &self.config.node, ttl_ms).await
    }

    async fn renew_lease(&self, lease: &Lease, ttl_ms: i64) -> Result<Lease, ClusterError> {
        lease::renew(self.store.as_ref(), self.clock.as_ref(), lease, ttl_ms).await
    }

    async fn release_lease(&self, lease: Lease) -> Result<(), ClusterError> {
        lease::release(self.store.as_ref(), lease).await
    }
}

/// The catalog from the latest readable checkpoint and the entries after it.
pub async fn replay(store: &dyn ObjectStore) -> Result<CatalogState, ClusterError> {
    let mut state = latest_checkpoint(store).await?;
    read_tail(store, &mut state).await?;
    Ok(state)
}

/// The catalog from entry 1 on, ignoring checkpoints (a check of them while the log is whole);
/// once the log is pruned, from the latest checkpoint past the pruned entries.
pub async fn replay_from_start(store: &dyn ObjectStore) -> Result<CatalogState, ClusterError> {
    let mut state = CatalogState::default();
    read_tail(store, &mut state).await?;
    Ok(state)
}

/// What [`ObjectStoreCatalog::prune`] deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneReport {
    pub entries: u64,
    pub checkpoints: u64,
    /// Entries up to this sequence are gone (0: nothing pruned this time).
    pub through: u64,
}

/// Applies the entries after `state.seq` until the end of the log; returns them. Entries pruned
/// since `state` (a checkpoint is at or past the missing one) restart it from the latest
/// checkpoint, whose entries are not returned.
async fn read_tail(
    store: &dyn ObjectStore,
    state: &mut CatalogState,
) -> Result<Vec<LogEntry>, ClusterError> {
    let mut read = Vec::new();
    loop {
        let seq = state.seq + 1;
        let path = log_entry_path(seq);
        let Some(entry) = get_json::<LogEntry>(store, &path).await? else {
            let Some(newest) = checkpoint_at_or_after(store, seq).await? else {
                return Ok(read);
            };
            let checkpoint = latest_checkpoint(store).await?;
            if checkpoint.seq < seq {
                return Err(ClusterError::Corrupt {
                    path: path.to_string(),
                    reason: format!(
                        "the entry was pruned (checkpoint {newest} is past it) and no readable \
                         checkpoint covers it"
                    ),
                });
            }
            tracing::debug!(
                from = state.seq,
                to = checkpoint.seq,
                "catalog entries pruned meanwhile; reading from the latest checkpoint"
            );
            *state = checkpoint;
            continue;
        };
        if entry.version > FORMAT_VERSION || entry.seq != seq {
            return Err(ClusterError::Corrupt {
                path: path.to_string(),
                reason: format!(
                    "entry says sequence {} format {} (expected sequence {seq}, format at most {FORMAT_VERSION})",
                    entry.seq, entry.version
                ),
            });
        }
        state.apply(&entry);
        read.push(entry);
    }
}

/// The newest checkpoint that reads back whole; an unreadable one is skipped for the one before
/// (pruning keeps the entries after the second newest), and none at all is the empty catalog.
async fn latest_checkpoint(store: &dyn ObjectStore) -> Result<CatalogState, ClusterError> {
    let mut seqs = checkpoint_seqs(store).await?;
    seqs.sort_unstable_by(|a, b| b.cmp(a));
    for seq in seqs {
        match read_checkpoint(store, seq).await {
            Ok(Some(state)) => return Ok(state),
            Ok(None) => {}
            Err(error @ ClusterError::Corrupt { .. }) => {
                tracing::warn!(path = %checkpoint_path(seq), %error, "unreadable checkpoint; using an older one");
            }
            Err(error) => return Err(error),
        }
    }
    Ok(CatalogState::default())
}

/// Checkpoint `seq`'s state, `None` when it is gone or is not what its name says (a newer
/// format, another sequence: logged).
async fn read_checkpoint(
    store: &dyn ObjectStore,
    seq: u64,
) -> Result<Option<CatalogState>, ClusterError> {
    let path = checkpoint_path(seq);
    match get_json::<Checkpoint>(store, &path).await? {
        Some(checkpoint) if checkpoint.version <= FORMAT_VERSION && checkpoint.state.seq == seq => {
            Ok(Some(checkpoint.state))
        }
        Some(_) => {
            tracing::warn!(%path, "checkpoint does not match its name; using an older one");
            Ok(None)
        }
        None => Ok(None),
    }
}

/// The first checkpoint at or after `seq`, if any: listed from there on, not from the start.
async fn checkpoint_at_or_after(
    store: &dyn ObjectStore,
    seq: u64,
) -> Result<Option<u64>, ClusterError> {
    let prefix = Path::from(CHECKPOINT_DIR);
    let before = checkpoint_path(seq.saturating_sub(1));
    let found: Vec<u64> = store
        .list_with_offset(Some(&prefix), &before)
        .try_filter_map(|meta| {
            let at = checkpoint_seq(&meta.location).filter(|&at| at >= seq);
            futures::future::ready(Ok(at))
        })
        .try_collect()
        .await?;
    Ok(found.into_iter().min())
}

/// The sequences of the checkpoints in the bucket, in no order.
async fn checkpoint_seqs(store: &dyn ObjectStore) -> Result<Vec<u64>, ClusterError> {
    let prefix = Path::from(CHECKPOINT_DIR);
    Ok(store
        .list(Some(&prefix))
        .try_filter_map(|meta| futures::future::ready(Ok(checkpoint_seq(&meta.location))))
        .try_collect()
        .await?)
}

/// Deletes `path`; one already gone (another pruner) is fine.
async fn delete_if_there(store: &dyn ObjectStore, path: &Path) -> Result<(), ClusterError> {
    match store.delete(path).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// A checkpoint after a commit is an optimisation: a failure is logged, never the commit's.
async fn write_checkpoint(store: &dyn ObjectStore, state: &CatalogState) {
    let checkpoint = Checkpoint {
        version: FORMAT_VERSION,
        state: state.clone(),
    };
    let path = checkpoint_path(state.seq);
    match put_json(store, &path, &checkpoint, PutMode::Create).await {
        Ok(()) | Err(ClusterError::Store(object_store::Error::AlreadyExists { .. })) => {}
        Err(error) => tracing::warn!(%path, %error, "could not write the catalog checkpoint"),
    }
}

async fn get_json<T: DeserializeOwned>(
    store: &dyn ObjectStore,
    path: &Path,
) -> Result<Option<T>, ClusterError> {
    let got = match store.get_opts(path, GetOptions::default()).await {
        Ok(got) => got,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(error) => return Err(error.into()),
    };
    let bytes = got.bytes().await?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|error| ClusterError::Corrupt {
            path: path.to_string(),
            reason: error.to_string(),
        })
}

async fn put_json<T: serde::Serialize>(
    store: &dyn ObjectStore,
    path: &Path,
    value: &T,
    mode: PutMode,
) -> Result<(), ClusterError> {
    let body = serde_json::to_vec(value).map_err(|error| ClusterError::Corrupt {
        path: path.to_string(),
        reason: format!("cannot serialize: {error}"),
    })?;
    store
        .put_opts(path, PutPayload::from(body), PutOptions::from(mode))
        .await?;
    Ok(())
}
