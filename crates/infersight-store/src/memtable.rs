//! The memtable: appended batches after they are durable in the WAL and before a flush writes
//! them to Parquet. Every entry remembers the WAL record it came from, so a flush can take
//! exactly the records of the WAL files it is about to delete, while appends go on.

use arrow::array::RecordBatch;
use infersight_model::tables::ts_range;
use infersight_model::{Table, TableBatch};

use crate::types::TimeRange;

#[derive(Debug, Clone)]
struct MemEntry {
    seq: u64,
    batch: RecordBatch,
    min_ts_ns: i64,
    max_ts_ns: i64,
    bytes: u64,
}

#[derive(Debug, Default, Clone, Copy)]
struct TableCounters {
    rows: u64,
    bytes: u64,
}

/// Unflushed batches per table, in insertion order.
#[derive(Debug)]
pub(crate) struct Memtable {
    entries: Vec<Vec<MemEntry>>,
    counters: Vec<TableCounters>,
}

impl Default for Memtable {
    fn default() -> Self {
        Memtable {
            entries: vec![Vec::new(); Table::ALL.len()],
            counters: vec![TableCounters::default(); Table::ALL.len()],
        }
    }
}

impl Memtable {
    /// Adds the non-empty batch of WAL record `seq`. Batches must already follow the table
    /// schema (the store validates before writing the WAL).
    pub(crate) fn insert(&mut self, seq: u64, table_batch: TableBatch) {
        let TableBatch { table, batch } = table_batch;
        let Some((min_ts_ns, max_ts_ns)) = ts_range(&batch) else {
            return; // no rows
        };
        let bytes = batch.get_array_memory_size() as u64;
        let index = usize::from(table.code());
        self.counters[index].rows += batch.num_rows() as u64;
        self.counters[index].bytes += bytes;
        self.entries[index].push(MemEntry {
            seq,
            batch,
            min_ts_ns,
            max_ts_ns,
            bytes,
        });
    }

    /// Batches of `table` that may hold rows in `range` (whole batches; the reader filters rows).
    pub(crate) fn overlapping(&self, table: Table, range: TimeRange) -> Vec<RecordBatch> {
        self.entries[usize::from(table.code())]
            .iter()
            .filter(|e| range.overlaps(e.min_ts_ns, e.max_ts_ns))
            .map(|e| e.batch.clone())
            .collect()
    }

    /// Batches of every table from WAL records `<= seq`, for a flush (cheap: batches are shared).
    pub(crate) fn batches_up_to(&self, seq: u64) -> Vec<(Table, Vec<RecordBatch>)> {
        Table::ALL
            .into_iter()
            .map(|table| {
                let batches = self.entries[usize::from(table.code())]
                    .iter()
                    .filter(|e| e.seq <= seq)
                    .map(|e| e.batch.clone())
                    .collect();
                (table, batches)
            })
            .collect()
    }

    /// Drops the entries of WAL records `<= seq` once a flush has published them as segments;
    /// returns the number of rows dropped.
    pub(crate) fn remove_up_to(&mut self, seq: u64) -> u64 {
        let mut removed_rows = 0;
        for (entries, counters) in self.entries.iter_mut().zip(self.counters.iter_mut()) {
            entries.retain(|e| {
                if e.seq > seq {
                    return true;
                }
                let rows = e.batch.num_rows() as u64;
                removed_rows += rows;
                counters.rows -= rows;
                counters.bytes -= e.bytes;
                false
            });
        }
        removed_rows
    }

    pub(crate) fn table_rows(&self, table: Table) -> u64 {
        self.counters[usize::from(table.code())].rows
    }

    pub(crate) fn rows(&self) -> u64 {
        self.counters.iter().map(|c| c.rows).sum()
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.counters.iter().map(|c| c.bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use infersight_model::RequestRecord;

    use super::*;

    fn requests(ts: &[i64]) -> TableBatch {
        let records: Vec<_> = ts
            .iter()
            .map(|ts| RequestRecord {
                ts: *ts,
                ..Default::default()
            })
            .collect();
        TableBatch {
            table: Table::Requests,
            batch: RequestRecord::to_batch(&records),
        }
    }

    #[test]
    fn flush_takes_only_records_up_to_its_seq() {
        let mut memtable = Memtable::default();
        memtable.insert(1, requests(&[10, 20]));
        memtable.insert(3, requests(&[30]));
        memtable.insert(2, requests(&[]));
        assert_eq!(memtable.rows(), 3);
        let taken = memtable.batches_up_to(2);
        assert_eq!(taken[0].1.len(), 1);
        assert_eq!(memtable.remove_up_to(2), 2);
        assert_eq!(memtable.table_rows(Table::Requests), 1);
        assert!(memtable.bytes() > 0);
        assert_eq!(memtable.remove_up_to(3), 1);
        assert_eq!(memtable.rows(), 0);
        assert_eq!(memtable.bytes(), 0);
    }

    #[test]
    fn overlapping_filters_whole_batches_by_ts() {
        let mut memtable = Memtable::default();
        memtable.insert(1, requests(&[10, 20]));
        memtable.insert(2, requests(&[100, 110]));
        let range = TimeRange {
            since_ns: Some(15),
            until_ns: Some(100),
        };
        let batches = memtable.overlapping(Table::Requests, range);
        assert_eq!(batches.len(), 1);
        assert_eq!(batches[0].num_rows(), 2);
        assert!(memtable.overlapping(Table::Logs, TimeRange::ALL).is_empty());
    }
}
