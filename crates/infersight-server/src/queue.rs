//! The bounded ingest queue between receivers (async) and the store (blocking): receivers submit
//! converted batches and wait for the acknowledgement; one worker thread runs the pipeline stages
//! and appends everything queued at that moment in one store append (group commit), then answers
//! each submitter. A full queue answers `Full` at once, which receivers turn into 429 /
//! RESOURCE_EXHAUSTED so clients retry: memory stays bounded and nothing acknowledged is lost.

use std::sync::Arc;
use std::thread::JoinHandle;

use infersight_model::{ErrorKind, TableBatch};
use infersight_store::{AppendReceipt, StorageBackend};
use tokio::sync::{mpsc, oneshot};

use crate::counters::Counters;

/// Pipeline stages applied to each submission before it is stored (redaction and friends).
pub type Transform =
    Box<dyn FnMut(Vec<TableBatch>) -> Result<Vec<TableBatch>, TransformError> + Send>;

#[derive(Debug, Clone)]
pub struct TransformError {
    pub kind: ErrorKind,
    pub message: String,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum SubmitError {
    #[error("ingest queue is full; retry later")]
    Full,
    #[error("{0}")]
    Rejected(String),
    #[error("store unavailable: {0}")]
    Unavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl SubmitError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            SubmitError::Full | SubmitError::Unavailable(_) => ErrorKind::Unavailable,
            SubmitError::Rejected(_) => ErrorKind::BadRequest,
            SubmitError::Internal(_) => ErrorKind::Internal,
        }
    }
}

struct Job {
    batches: Vec<TableBatch>,
    ack: oneshot::Sender<Result<AppendReceipt, SubmitError>>,
}

/// Handle receivers hold; cheap to clone.
#[derive(Clone)]
pub struct IngestQueue {
    tx: mpsc::Sender<Job>,
    counters: Arc<Counters>,
    capacity: usize,
}

/// Most jobs folded into one store append.
const MAX_JOBS_PER_APPEND: usize = 256;

impl IngestQueue {
    /// Starts the worker thread. Dropping every `IngestQueue` clone lets the worker drain what is
    /// queued and exit; join the returned handle to wait for that.
    pub fn start(
        store: Arc<dyn StorageBackend>,
        mut transform: Transform,
        capacity: usize,
        counters: Arc<Counters>,
    ) -> (IngestQueue, JoinHandle<()>) {
        let capacity = capacity.max(1);
        let (tx, mut rx) = mpsc::channel::<Job>(capacity);
        let worker_counters = counters.clone();
        let handle = std::thread::Builder::new()
            .name("infersight-ingest".into())
            .spawn(move || {
                let counters = worker_counters;
                while let Some(first) = rx.blocking_recv() {
                    let mut jobs = vec![first];
                    while jobs.len() < MAX_JOBS_PER_APPEND {
                        match rx.try_recv() {
                            Ok(job) => jobs.push(job),
                            Err(_) => break,
                        }
                    }
                    counters.set_gauge(
                        "infersight_queue_depth",
                        "submissions waiting in the ingest queue",
                        &[],
                        rx.len() as f64,
                    );
                    process(&*store, &mut transform, jobs, &counters);
                }
            })
            .expect("spawning the ingest worker thread");
        (
            IngestQueue {
                tx,
                counters,
                capacity,
            },
            handle,
        )
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Queues batches and waits until they are durable. `Full` when the queue has no room.
    pub async fn submit(&self, batches: Vec<TableBatch>) -> Result<AppendReceipt, SubmitError> {
        let rows: u64 = batches.iter().map(|b| b.batch.num_rows() as u64).sum();
        let (ack, wait) = oneshot::channel();
        match self.tx.try_send(Job { batches, ack }) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.counters.add(
                    "infersight_stage_dropped_rows_total",
                    "rows not accepted by a stage, by reason (the client was told to retry)",
                    &[("stage", "queue"), ("reason", "queue_full")],
                    rows,
                );
                return Err(SubmitError::Full);
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                return Err(SubmitError::Unavailable("server is shutting down".into()));
            }
        }
        self.counters.add(
            "infersight_stage_received_rows_total",
            "rows received by a stage",
            &[("stage", "queue")],
            rows,
        );
        wait.await
            .unwrap_or_else(|_| Err(SubmitError::Internal("ingest worker stopped".into())))
    }
}

fn process(
    store: &dyn StorageBackend,
    transform: &mut Transform,
    jobs: Vec<Job>,
    counters: &Counters,
) {
    let mut accepted: Vec<(Job, usize, usize)> = Vec::with_capacity(jobs.len());
    let mut all = Vec::new();
    for mut job in jobs {
        let batches = std::mem::take(&mut job.batches);
        let rows: u64 = batches.iter().map(|b| b.batch.num_rows() as u64).sum();
        match transform(batches) {
            Ok(out) => {
                let start = all.len();
                all.extend(out);
                accepted.push((job, start, all.len()));
            }
            Err(e) => {
                counters.add(
                    "infersight_stage_failed_rows_total",
                    "rows a stage failed to process",
                    &[("stage", "pipeline")],
                    rows,
                );
                let error = match e.kind {
                    ErrorKind::BadRequest | ErrorKind::TooLarge => SubmitError::Rejected(e.message),
                    _ => SubmitError::Internal(e.message),
                };
                let _ = job.ack.send(Err(error));
            }
        }
    }
    if accepted.is_empty() {
        return;
    }
    let rows: u64 = all.iter().map(|b| b.batch.num_rows() as u64).sum();
    match store.append(&all) {
        Ok(receipt) => {
            counters.add(
                "infersight_stage_emitted_rows_total",
                "rows a stage passed on",
                &[("stage", "store")],
                rows,
            );
            for (job, start, end) in accepted {
                let job_rows = all[start..end]
                    .iter()
                    .map(|b| b.batch.num_rows() as u64)
                    .sum();
                let _ = job.ack.send(Ok(AppendReceipt {
                    wal_seq: receipt.wal_seq,
                    rows: job_rows,
                }));
            }
        }
        Err(e) => {
            counters.add(
                "infersight_stage_failed_rows_total",
                "rows a stage failed to process",
                &[("stage", "store")],
                rows,
            );
            tracing::error!(error = %e, "store append failed");
            let error = match e.kind() {
                ErrorKind::BadRequest => SubmitError::Rejected(e.to_string()),
                ErrorKind::Unavailable => SubmitError::Unavailable(e.to_string()),
                _ => SubmitError::Internal(e.to_string()),
            };
            for (job, _, _) in accepted {
                let _ = job.ack.send(Err(error.clone()));
            }
        }
    }
}
