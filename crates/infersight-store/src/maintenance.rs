//! Background maintenance: two std threads keep the store in shape while it serves appends. The
//! flusher flushes the memtable when it is due ([`Store::flush_pass`]) and, for
//! [`FsyncPolicy::Interval`], fsyncs the WAL on schedule; the upkeep thread compacts small
//! segments, applies retention and tiers ([`Store::upkeep_pass`]) and reads every segment
//! against its checksum after its first pass and then every `StoreOptions::verify_interval`,
//! a slice per wake-up at `StoreOptions::verify_bytes_per_sec` (`Store::verify_slice`; without
//! a rate, [`Store::verify_segments`] in one go). Apart, a long compaction does not hold
//! flushes back while appends fill the memtable to its hard limit. Errors are logged, never
//! raised.

use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::scrub::ScrubCursor;
use crate::store::Store;
use crate::types::FsyncPolicy;

#[derive(Debug, Default)]
struct StopSignal {
    stopped: Mutex<bool>,
    wake: Condvar,
}

/// Owns the maintenance threads; [`MaintenanceHandle::stop`] (or dropping the handle) stops and
/// joins them. The threads hold only a weak reference, so they never keep the store alive.
#[derive(Debug)]
pub struct MaintenanceHandle {
    signal: Arc<StopSignal>,
    threads: Vec<JoinHandle<()>>,
}

impl MaintenanceHandle {
    /// Stops the threads after their current step and waits for them.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        *self.signal.stopped.lock() = true;
        self.signal.wake.notify_all();
        for thread in self.threads.drain(..) {
            if thread.join().is_err() {
                tracing::error!("store maintenance thread panicked");
            }
        }
    }
}

impl Drop for MaintenanceHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Store {
    /// Starts the maintenance threads: every `tick` the flusher runs [`Store::flush_pass`] and
    /// the upkeep thread [`Store::upkeep_pass`]; with [`FsyncPolicy::Interval`] the flusher also
    /// fsyncs the WAL every `interval_ms`.
    pub fn spawn_maintenance(self: &Arc<Self>, tick: Duration) -> MaintenanceHandle {
        let signal = Arc::new(StopSignal::default());
        let fsync_every = match self.options().fsync {
            FsyncPolicy::Interval { interval_ms } => {
                Some(Duration::from_millis(interval_ms.max(1)))
            }
            FsyncPolicy::Always | FsyncPolicy::Never => None,
        };
        let mut threads = Vec::new();
        for role in [Role::Flusher, Role::Upkeep] {
            let store = Arc::downgrade(self);
            let thread_signal = Arc::clone(&signal);
            let spawned = std::thread::Builder::new()
                .name(role.thread_name().into())
                .spawn(move || maintenance_loop(store, &thread_signal, tick, role, fsync_every));
            match spawned {
                Ok(thread) => threads.push(thread),
                Err(err) => {
                    tracing::error!(%err, thread = role.thread_name(), "could not start a store maintenance thread");
                }
            }
        }
        MaintenanceHandle { signal, threads }
    }
}

/// What a maintenance thread does each tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// [`Store::flush_pass`], and the WAL's fsync on schedule.
    Flusher,
    /// [`Store::upkeep_pass`], and the segments read after the first pass and on schedule.
    Upkeep,
}

impl Role {
    fn thread_name(self) -> &'static str {
        match self {
            Role::Flusher => "infersight-store-flush",
            Role::Upkeep => "infersight-store-maintenance",
        }
    }
}

/// How often the flusher looks whether the memtable reached its flush size between ticks.
const FLUSH_SIZE_CHECK_EVERY: Duration = Duration::from_millis(100);

fn maintenance_loop(
    store: Weak<Store>,
    signal: &StopSignal,
    tick: Duration,
    role: Role,
    fsync_every: Option<Duration>,
) {
    let tick = tick.max(Duration::from_millis(1));
    let fsync_every = fsync_every.filter(|_| role == Role::Flusher);
    let mut wake_every = fsync_every.map_or(tick, |every| every.min(tick));
    if role == Role::Flusher {
        // a memtable that reached its flush size is flushed now, not at the next tick: under
        // load it would grow by seconds of appends meanwhile (towards its hard limit)
        wake_every = wake_every.min(FLUSH_SIZE_CHECK_EVERY);
    }
    let mut next_pass = Instant::now() + tick;
    // whether a full memtable may be flushed before the tick
    let mut early = true;
    let mut next_sync = fsync_every.map(|every| Instant::now() + every);
    // the whole segments are read after the first pass (the open only checked their footers),
    // then every `verify_interval`
    let mut next_verify = (role == Role::Upkeep).then(Instant::now);
    // a scrub read a slice at a time (`verify_bytes_per_sec`), and when its next slice is due
    let mut scrub: Option<ScrubCursor> = None;
    let mut next_slice = Instant::now();
    loop {
        {
            let mut stopped = signal.stopped.lock();
            if !*stopped {
                signal.wake.wait_for(&mut stopped, wake_every);
            }
            if *stopped {
                return;
            }
        }
        let Some(store) = store.upgrade() else {
            return;
        };
        if store.is_closed() {
            return;
        }
        let now = Instant::now();
        if let (Some(every), Some(due)) = (fsync_every, next_sync)
            && now >= due
        {
            if let Err(err) = store.sync_wal() {
                tracing::error!(%err, "periodic wal fsync failed");
            }
            next_sync = Some(now + every);
        }
        let flush_size_reached = role == Role::Flusher && early && store.flush_size_reached();
        if now >= next_pass || flush_size_reached {
            let pass = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match role {
                Role::Flusher => store.flush_pass(),
                Role::Upkeep => store.upkeep_pass(infersight_model::time::now_ns()),
            }));
            // after a failure (a full disk) the next try waits for the tick: no error every
            // 100 ms
            early = matches!(pass, Ok(Ok(())));
            match pass {
                Ok(Ok(())) => {}
                Ok(Err(err)) if store.is_closed() => {
                    tracing::debug!(%err, "maintenance stopped by close");
                }
                Ok(Err(err)) => tracing::error!(%err, "store maintenance failed"),
                Err(_) => tracing::error!("store maintenance panicked"),
            }
            next_pass = Instant::now() + tick;
            if scrub.is_none() && next_verify.is_some_and(|due| Instant::now() >= due) {
                match store.options().verify_bytes_per_sec {
                    Some(_) => {
                        scrub = Some(ScrubCursor::default());
                        next_verify = None;
                        next_slice = Instant::now();
                    }
                    None => {
                        match store.verify_segments() {
                            Ok(report) => tracing::debug!(?report, "segments verified"),
                            Err(err) => tracing::error!(%err, "segment verification failed"),
                        }
                        next_verify = next_scrub(&store);
                    }
                }
            }
        }
        if let Some(cursor) = scrub.as_mut()
            && Instant::now() >= next_slice
        {
            let rate = store
                .options()
                .verify_bytes_per_sec
                .unwrap_or(u64::MAX)
                .max(1);
            // a slice is what the rate allows per wake-up; a segment larger than that is read
            // whole, and the next slice waits until the average is back under the rate
            let budget =
                u64::try_from(u128::from(rate) * wake_every.as_millis() / 1000).unwrap_or(u64::MAX);
            let started = Instant::now();
            let slice = store.verify_slice(cursor, budget);
            let done = match slice {
                Ok((bytes, done)) => {
                    next_slice = started + Duration::from_secs_f64(bytes as f64 / rate as f64);
                    done
                }
                Err(err) => {
                    tracing::error!(%err, "segment verification failed");
                    true
                }
            };
            if done {
                tracing::debug!(report = ?cursor.report, "segments verified");
                scrub = None;
                next_verify = next_scrub(&store);
            }
        }
    }
}

/// When the next scrub is due, after one ended now (`None`: never, `verify_interval` unset).
fn next_scrub(store: &Store) -> Option<Instant> {
    store
        .options()
        .verify_interval
        .map(|every| Instant::now() + every)
}
