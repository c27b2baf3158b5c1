//! The bounded ingest queue between receivers (async) and the store (blocking): receivers submit
//! converted batches and wait for the acknowledgement; one worker thread runs each submission
//! through the pipeline's [`BatchWriter`] stages and appends everything queued at that moment in
//! one logged store append (group commit), then answers each submitter. A full queue answers `Full` at once, which receivers turn into 429 /
//! RESOURCE_EXHAUSTED so clients retry: memory stays bounded and nothing acknowledged is lost.
//! While the store refuses appends (its memtable over the hard limit), the queue says so ahead
//! ([`Sink::refusal`]) and receivers answer 503 / UNAVAILABLE before converting an export.

use std::sync::Arc;
use std::thread::JoinHandle;

use infersight_ingest::{Sink, SinkError, SinkFuture};
use infersight_model::append::Durability;
use infersight_model::{ErrorKind, TableBatch};
use infersight_pipeline::BatchWriter;
use infersight_store::{AppendReceipt, StorageBackend};
use tokio::sync::{mpsc, oneshot};

use infersight_model::telemetry::{Counters, catalog};

struct Job {
    /// Every row of the job is stored for this org (the writer stamps it).
    org: String,
    batches: Vec<TableBatch>,
    ack: oneshot::Sender<Result<AppendReceipt, SinkError>>,
}

/// Handle receivers hold; cheap to clone.
#[derive(Clone)]
pub struct IngestQueue {
    tx: mpsc::Sender<Job>,
    counters: Arc<Counters>,
    capacity: usize,
    /// The store the worker appends to, asked whether it refuses appends right now
    /// ([`Sink::refusal`]); `None`: never refuses ahead.
    backpressure: Option<Arc<dyn StorageBackend>>,
}

/// Most jobs folded into one store append.
const MAX_JOBS_PER_APPEND: usize = 256;
/// Most Arrow bytes folded into one store append.
const MAX_BYTES_PER_APPEND: usize = 64 * 1024 * 1024;

fn job_bytes(job: &Job) -> usize {
    job.batches
        .iter()
        .map(|b| b.batch.get_array_memory_size())
        .sum()
}

impl IngestQueue {
    /// Starts the worker thread. Dropping every `IngestQueue` clone lets the worker drain what is
    /// queued and exit; join the returned handle to wait for that.
    pub fn start(
        mut writer: BatchWriter,
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
                    let mut bytes = job_bytes(&first);
                    let mut jobs = vec![first];
                    // Fold what is queued into one append, within a count and a size budget
                    // (one WAL record must stay far below the frame limit).
                    while jobs.len() < MAX_JOBS_PER_APPEND && bytes < MAX_BYTES_PER_APPEND {
                        match rx.try_recv() {
                            Ok(job) => {
                                bytes += job_bytes(&job);
                                jobs.push(job);
                            }
                            Err(_) => break,
                        }
                    }
                    counters.set_gauge(&catalog::QUEUE_DEPTH, &[], rx.len() as f64);
                    // A panic in a stage or the store must not end ingestion for good: fail
                    // this group's submitters (their acks drop → Internal) and keep serving.
                    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        process(&mut writer, jobs, &counters)
                    }));
                    if outcome.is_err() {
                        counters.add(
                            &catalog::STAGE_FAILED_ROWS,
                            &[("stage", "queue_worker_panic")],
                            1,
                        );
                        tracing::error!(
                            "ingest worker recovered from a panic; that group of submissions failed"
                        );
                    }
                }
            })
            .expect("spawning the ingest worker thread");
        (
            IngestQueue {
                backpressure: None,
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

    /// Refuses submissions ahead ([`Sink::refusal`]) while `store` refuses appends.
    pub fn with_backpressure(mut self, store: Arc<dyn StorageBackend>) -> IngestQueue {
        self.backpressure = Some(store);
        self
    }

    /// Queues batches of `org` and waits until they are durable. `Full` when the queue has no
    /// room.
    pub async fn submit_and_wait(
        &self,
        org: &str,
        batches: Vec<TableBatch>,
    ) -> Result<AppendReceipt, SinkError> {
        let rows: u64 = batches.iter().map(|b| b.batch.num_rows() as u64).sum();
        let (ack, wait) = oneshot::channel();
        let job = Job {
            org: org.to_string(),
            batches,
            ack,
        };
        match self.tx.try_send(job) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.counters.add(
                    &catalog::STAGE_DROPPED_ROWS,
                    &[("stage", "queue"), ("reason", "queue_full")],
                    rows,
                );
                return Err(SinkError::Full);
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                return Err(SinkError::Unavailable("server is shutting down".into()));
            }
        }
        self.counters
            .add(&catalog::STAGE_RECEIVED_ROWS, &[("stage", "queue")], rows);
        wait.await
            .unwrap_or_else(|_| Err(SinkError::Internal("ingest worker stopped".into())))
    }
}

fn process(writer: &mut BatchWriter, jobs: Vec<Job>, counters: &Counters) {
    let mut accepted: Vec<(Job, usize, usize)> = Vec::with_capacity(jobs.len());
    let mut all = Vec::new();
    for mut job in jobs {
        let batches = std::mem::take(&mut job.batches);
        let rows: u64 = batches.iter().map(|b| b.batch.num_rows() as u64).sum();
        match writer.transform(&job.org, batches) {
            Ok(out) => {
                let start = all.len();
                all.extend(out);
                accepted.push((job, start, all.len()));
            }
            Err(e) => {
                counters.add(&catalog::STAGE_FAILED_ROWS, &[("stage", "pipeline")], rows);
                let error = match e.kind() {
                    ErrorKind::BadRequest | ErrorKind::TooLarge => {
                        SinkError::Rejected(e.to_string())
                    }
                    _ => SinkError::Internal(e.to_string()),
                };
                let _ = job.ack.send(Err(error));
            }
        }
    }
    if accepted.is_empty() {
        return;
    }
    match writer.append(&all, Durability::Logged) {
        Ok(appended) => {
            for (job, start, end) in accepted {
                let job_rows = all[start..end]
                    .iter()
                    .map(|b| b.batch.num_rows() as u64)
                    .sum();
                let _ = job.ack.send(Ok(AppendReceipt {
                    wal_seq: appended.wal_seq,
                    rows: job_rows,
                }));
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "store append failed");
            // A disk that is full or failing is a condition the client should wait out and
            // retry (503 + Retry-After, gRPC UNAVAILABLE), not a reason to drop its data.
            let error = match e.kind {
                ErrorKind::BadRequest => SinkError::Rejected(e.to_string()),
                _ => SinkError::Unavailable(e.to_string()),
            };
            for (job, _, _) in accepted {
                let _ = job.ack.send(Err(error.clone()));
            }
        }
    }
}

impl Sink for IngestQueue {
    fn submit(&self, org: &str, batches: Vec<TableBatch>) -> SinkFuture {
        let queue = self.clone();
        let org = org.to_string();
        Box::pin(async move { queue.submit_and_wait(&org, batches).await.map(|_| ()) })
    }

    fn refusal(&self) -> Option<SinkError> {
        let refusal = self.backpressure.as_ref()?.append_refusal()?;
        Some(SinkError::Unavailable(refusal.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use infersight_model::append::{AppendError, Appended, BatchAppend};
    use infersight_model::org::DEFAULT_ORG;
    use infersight_model::{RequestRecord, Table};
    use infersight_pipeline::{Pipeline, PipelineError, Stage};

    use super::*;

    /// Counts appends; can be slowed down to fill the queue.
    struct SlowStore {
        delay: Duration,
        appends: Mutex<Vec<usize>>,
    }

    impl BatchAppend for SlowStore {
        fn append_batches(
            &self,
            batches: &[TableBatch],
            _: Durability,
        ) -> Result<Appended, AppendError> {
            std::thread::sleep(self.delay);
            let rows: usize = batches.iter().map(|b| b.batch.num_rows()).sum();
            self.appends.lock().unwrap().push(rows);
            Ok(Appended {
                wal_seq: 1,
                rows: rows as u64,
            })
        }
    }

    /// A writer with no stages over `store`.
    fn writer(store: &Arc<SlowStore>, stages: Vec<Box<dyn Stage>>) -> BatchWriter {
        BatchWriter::new(
            Pipeline::new(stages),
            Arc::clone(store) as Arc<dyn BatchAppend>,
            Arc::new(Counters::new()),
        )
    }

    /// Rejects the first batch it sees as a bad request, passes the others on.
    struct RejectFirst {
        seen: usize,
    }

    impl Stage for RejectFirst {
        fn name(&self) -> &'static str {
            "reject_first"
        }
        fn process(
            &mut self,
            batch: TableBatch,
            out: &mut Vec<TableBatch>,
        ) -> Result<(), PipelineError> {
            self.seen += 1;
            if self.seen == 1 {
                return Err(PipelineError::LabelRules("bad row".into()));
            }
            out.push(batch);
            Ok(())
        }
    }

    fn one_row() -> Vec<TableBatch> {
        vec![TableBatch {
            table: Table::Requests,
            batch: RequestRecord::to_batch(&[RequestRecord::default()]),
        }]
    }

    #[tokio::test]
    async fn the_queue_refuses_ahead_while_its_store_refuses_appends() {
        let dir = tempfile::tempdir().unwrap();
        let mut options = infersight_store::StoreOptions::new(dir.path());
        options.memtable_max_bytes = 1 << 20;
        options.fsync = infersight_store::FsyncPolicy::Never;
        let store = Arc::new(infersight_store::Store::open(options).unwrap());
        let idle = Arc::new(SlowStore {
            delay: Duration::ZERO,
            appends: Mutex::new(vec![]),
        });
        let (queue, _worker) =
            IngestQueue::start(writer(&idle, vec![]), 4, Arc::new(Counters::new()));
        let queue = queue.with_backpressure(Arc::clone(&store) as Arc<dyn StorageBackend>);
        assert!(queue.refusal().is_none(), "an empty store takes appends");
        let rows: Vec<RequestRecord> = (0..64)
            .map(|i| RequestRecord {
                ts: i,
                attrs: "x".repeat(128 << 10),
                ..Default::default()
            })
            .collect();
        let big = [TableBatch {
            table: Table::Requests,
            batch: RequestRecord::to_batch(&rows),
        }];
        while store.append(&big).is_ok() {}
        match queue.refusal() {
            Some(SinkError::Unavailable(message)) => {
                assert!(message.contains("hard limit"), "{message}");
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
        store.flush().unwrap();
        assert!(queue.refusal().is_none(), "taken again after a flush");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn full_queue_refuses_at_once_and_queued_work_is_grouped() {
        let store = Arc::new(SlowStore {
            delay: Duration::from_millis(200),
            appends: Mutex::new(vec![]),
        });
        let (queue, worker) =
            IngestQueue::start(writer(&store, vec![]), 2, Arc::new(Counters::new()));
        let submits: Vec<_> = (0..8)
            .map(|_| {
                let q = queue.clone();
                tokio::spawn(async move { q.submit_and_wait(DEFAULT_ORG, one_row()).await })
            })
            .collect();
        let mut ok = 0;
        let mut full = 0;
        for s in submits {
            match s.await.unwrap() {
                Ok(_) => ok += 1,
                Err(SinkError::Full) => full += 1,
                Err(e) => panic!("{e}"),
            }
        }
        assert!(
            full > 0,
            "8 submissions into a queue of 2 behind a slow store were never refused"
        );
        assert_eq!(ok + full, 8);
        drop(queue);
        worker.join().unwrap();
        let appends = store.appends.lock().unwrap();
        assert_eq!(
            appends.iter().sum::<usize>(),
            ok,
            "every acknowledged row was appended"
        );
        assert!(
            appends.len() < ok || ok == 1,
            "queued submissions share appends: {appends:?}"
        );
    }

    #[tokio::test]
    async fn failing_transform_rejects_only_its_submission() {
        let store = Arc::new(SlowStore {
            delay: Duration::ZERO,
            appends: Mutex::new(vec![]),
        });
        let stages: Vec<Box<dyn Stage>> = vec![Box::new(RejectFirst { seen: 0 })];
        let (queue, worker) =
            IngestQueue::start(writer(&store, stages), 4, Arc::new(Counters::new()));
        let first = queue.submit_and_wait(DEFAULT_ORG, one_row()).await;
        assert!(
            matches!(first, Err(SinkError::Rejected(ref m)) if m.contains("bad row")),
            "{first:?}"
        );
        assert!(queue.submit_and_wait(DEFAULT_ORG, one_row()).await.is_ok());
        drop(queue);
        worker.join().unwrap();
        assert_eq!(*store.appends.lock().unwrap(), vec![1]);
    }
}
