//! The request rows the receivers' span tree holds until the spans of their request have arrived
//! (see [`crate::otlp::correlate`]), handed to the [`Sink`](super::Sink) when no export comes to
//! carry them: every tick those whose traces have been quiet long enough, and at shutdown, after
//! the receivers stopped and before the sink does, all of them.

use std::future::Future;
use std::time::Duration;

use infersight_model::{RequestRecord, Table, TableBatch};

use super::{ReceiverState, SinkError};

/// How often quiet traces are looked for by default (a tenth of the hold's linger).
pub const DEFAULT_TICK: Duration = Duration::from_secs(1);

/// Tries of a submission the sink refuses for being full, a tick apart.
const FULL_RETRIES: usize = 20;

/// The periodic release, running until the receivers stop; [`HeldRequests::finish`] hands on
/// what is left.
pub struct HeldRequests {
    /// Ends with whether every row it released was stored.
    task: tokio::task::JoinHandle<bool>,
    state: ReceiverState,
}

impl HeldRequests {
    /// Starts releasing the rows of `state`'s span tree every `every` until `stop` resolves.
    pub fn spawn(
        state: &ReceiverState,
        every: Duration,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> HeldRequests {
        let ticking = state.clone();
        let task = tokio::spawn(async move {
            let mut ticker = tokio::time::interval(every);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tokio::pin!(stop);
            let mut all_stored = true;
            loop {
                tokio::select! {
                    _ = &mut stop => return all_stored,
                    _ = ticker.tick() => {}
                }
                for (org, rows) in ticking.span_tree.release_due_requests() {
                    all_stored &= submit(&ticking, &org, rows, every).await;
                }
            }
        });
        HeldRequests {
            task,
            state: state.clone(),
        }
    }

    /// Once the receivers have stopped: ends the ticks and hands every row still held to the
    /// sink (the spans they were made of are stored already). Returns whether every row the
    /// hold released was stored (a failed submission is logged; the rows can be rebuilt from
    /// their stored spans, see `ingest::otlp::rebuild`).
    pub async fn finish(self) -> bool {
        let ticks_stored = match self.task.await {
            Ok(stored) => stored,
            Err(error) => {
                tracing::error!(%error, "the held-request release task failed");
                false
            }
        };
        let mut all_stored = ticks_stored;
        for (org, rows) in self.state.span_tree.drain_requests() {
            all_stored &= submit(&self.state, &org, rows, DEFAULT_TICK).await;
        }
        all_stored
    }
}

/// Hands rows to the sink, retrying while it is full; a failure is logged with the rows lost.
/// Returns whether they were stored.
async fn submit(
    state: &ReceiverState,
    org: &str,
    rows: Vec<RequestRecord>,
    pause: Duration,
) -> bool {
    if rows.is_empty() {
        return true;
    }
    let batch = TableBatch {
        table: Table::Requests,
        batch: RequestRecord::to_batch(&rows),
    };
    for _ in 0..FULL_RETRIES {
        match state.sink.submit(org, vec![batch.clone()]).await {
            Ok(()) => return true,
            Err(SinkError::Full) => tokio::time::sleep(pause).await,
            Err(error) => {
                tracing::error!(%error, rows = rows.len(), "held request rows were not stored");
                return false;
            }
        }
    }
    tracing::error!(
        rows = rows.len(),
        "held request rows were not stored: the ingest queue stayed full"
    );
    false
}
