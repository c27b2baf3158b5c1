//! Background maintenance: a std thread that keeps the store in shape while it serves appends:
//! flushes the memtable when it is due, compacts small segments, applies retention, reads every
//! segment against its checksum once after the first pass ([`Store::verify_segments`]), and for
//! [`FsyncPolicy::Interval`] fsyncs the WAL on schedule. Errors are logged, never raised.

use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::store::Store;
use crate::types::FsyncPolicy;

#[derive(Debug, Default)]
struct StopSignal {
    stopped: Mutex<bool>,
    wake: Condvar,
}

/// Owns the maintenance thread; [`MaintenanceHandle::stop`] (or dropping the handle) stops and
/// joins it. The thread holds only a weak reference, so it never keeps the store alive.
#[derive(Debug)]
pub struct MaintenanceHandle {
    signal: Arc<StopSignal>,
    thread: Option<JoinHandle<()>>,
}

impl MaintenanceHandle {
    /// Stops the thread after its current step and waits for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        *self.signal.stopped.lock() = true;
        self.signal.wake.notify_all();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("store maintenance thread panicked");
        }
    }
}

impl Drop for MaintenanceHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Store {
    /// Starts the maintenance thread: every `tick` it runs [`Store::run_maintenance`]; with
    /// [`FsyncPolicy::Interval`] it also fsyncs the WAL every `interval_ms`.
    pub fn spawn_maintenance(self: &Arc<Self>, tick: Duration) -> MaintenanceHandle {
        let signal = Arc::new(StopSignal::default());
        let store = Arc::downgrade(self);
        let fsync_every = match self.options().fsync {
            FsyncPolicy::Interval { interval_ms } => {
                Some(Duration::from_millis(interval_ms.max(1)))
            }
            FsyncPolicy::Always | FsyncPolicy::Never => None,
        };
        let thread_signal = Arc::clone(&signal);
        let spawned = std::thread::Builder::new()
            .name("infersight-store-maintenance".into())
            .spawn(move || maintenance_loop(store, &thread_signal, tick, fsync_every));
        let thread = match spawned {
            Ok(thread) => Some(thread),
            Err(err) => {
                tracing::error!(%err, "could not start the store maintenance thread");
                None
            }
        };
        MaintenanceHandle { signal, thread }
    }
}

fn maintenance_loop(
    store: Weak<Store>,
    signal: &StopSignal,
    tick: Duration,
    fsync_every: Option<Duration>,
) {
    let tick = tick.max(Duration::from_millis(1));
    let wake_every = fsync_every.map_or(tick, |every| every.min(tick));
    let mut next_pass = Instant::now() + tick;
    let mut next_sync = fsync_every.map(|every| Instant::now() + every);
    // the whole segments are read once per start (the open only checked their footers)
    let mut verified = false;
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
        if now >= next_pass {
            let pass = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                store.run_maintenance(infersight_model::time::now_ns())
            }));
            match pass {
                Ok(Ok(())) => {}
                Ok(Err(err)) if store.is_closed() => {
                    tracing::debug!(%err, "maintenance stopped by close");
                }
                Ok(Err(err)) => tracing::error!(%err, "store maintenance failed"),
                Err(_) => tracing::error!("store maintenance panicked"),
            }
            next_pass = Instant::now() + tick;
            if !verified {
                verified = true;
                match store.verify_segments() {
                    Ok(report) => tracing::debug!(?report, "segments verified"),
                    Err(err) => tracing::error!(%err, "segment verification failed"),
                }
            }
        }
    }
}
