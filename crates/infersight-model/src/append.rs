//! The seam between the ingest runtime and whatever persists its batches: the pipeline's
//! `BatchWriter` runs the stages and hands the result to a [`BatchAppend`], which the store
//! implements (a remote backend could too). It lives in the model so the pipeline and the store
//! stay siblings that know nothing of each other.

use crate::{ErrorKind, TableBatch};

/// How an append is made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Through the write-ahead log (fsynced per the store's rule) before the append returns:
    /// what receivers acknowledge, and `infersight ingest --wal`.
    Logged,
    /// Into the memtable only: a bulk load whose input is its own log; durable once flushed.
    Bulk,
}

/// What one append stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Appended {
    /// The write-ahead-log sequence of the append (0 for a bulk append).
    pub wal_seq: u64,
    pub rows: u64,
}

/// Why an append failed, with its kind (a bad batch is rejected; a failing disk is a condition
/// to wait out).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct AppendError {
    pub kind: ErrorKind,
    pub message: String,
}

/// Where the ingest runtime appends canonical batches.
pub trait BatchAppend: Send + Sync {
    fn append_batches(
        &self,
        batches: &[TableBatch],
        durability: Durability,
    ) -> Result<Appended, AppendError>;

    /// Flushes the memtable when it is over its limits, so memory stays bounded on long bulk
    /// loads (a server flushes on its own schedule instead).
    fn flush_if_full(&self) -> Result<(), AppendError> {
        Ok(())
    }
}
