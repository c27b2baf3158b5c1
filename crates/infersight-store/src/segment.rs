//! Parquet segments: where flushed and compacted rows live. One segment holds rows of one table
//! and one UTC hour, sorted by `ts`, zstd-compressed, with column statistics so the query engine
//! can prune row groups. Layout: `segments/<table>/<YYYYMMDDHH>/<segment id, 20 digits>.parquet`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, RecordBatch, TimestampNanosecondArray};
use arrow::compute::{concat_batches, sort_to_indices, take_record_batch};
use chrono::{DateTime, Utc};
use infersight_model::tables::SCHEMA_VERSION_KEY;
use infersight_model::time::hour_floor_ns;
use infersight_model::{SCHEMA_VERSION, Table};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};

use crate::fsutil::sync_dir;
use crate::types::{SegmentMeta, StoreError};

pub(crate) const SEGMENTS_DIR: &str = "segments";
const SEGMENT_EXTENSION: &str = "parquet";

/// Settings of the Parquet writer, taken from `StoreOptions`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SegmentFormat {
    pub zstd_level: i32,
    pub row_group_rows: usize,
}

/// `YYYYMMDDHH` of the UTC hour starting at `hour_ns`.
pub(crate) fn hour_dir_name(hour_ns: i64) -> String {
    DateTime::<Utc>::from_timestamp_nanos(hour_ns)
        .format("%Y%m%d%H")
        .to_string()
}

/// Where segment `id` of (`table`, hour) lives under `data_dir`.
pub(crate) fn segment_path(data_dir: &Path, table: Table, hour_ns: i64, id: u64) -> PathBuf {
    data_dir
        .join(SEGMENTS_DIR)
        .join(table.name())
        .join(hour_dir_name(hour_ns))
        .join(format!("{id:020}.{SEGMENT_EXTENSION}"))
}

fn ts_column(batch: &RecordBatch) -> Result<&TimestampNanosecondArray, StoreError> {
    batch
        .column_by_name("ts")
        .and_then(|c| c.as_any().downcast_ref::<TimestampNanosecondArray>())
        .ok_or_else(|| {
            StoreError::Arrow(arrow::error::ArrowError::SchemaError(
                "batch has no timestamp(ns) column `ts`".into(),
            ))
        })
}

/// Concatenates batches of one table and sorts the rows by `ts`.
pub(crate) fn concat_sorted(
    table: Table,
    batches: &[RecordBatch],
) -> Result<RecordBatch, StoreError> {
    let merged = concat_batches(&table.schema(), batches)?;
    let indices = sort_to_indices(ts_column(&merged)?, None, None)?;
    Ok(take_record_batch(&merged, &indices)?)
}

/// Splits a batch sorted by `ts` into one zero-copy slice per UTC hour.
pub(crate) fn split_by_hour(sorted: &RecordBatch) -> Result<Vec<(i64, RecordBatch)>, StoreError> {
    let ts = ts_column(sorted)?;
    let mut parts = Vec::new();
    let mut start = 0usize;
    while start < ts.len() {
        let hour_ns = hour_floor_ns(ts.value(start));
        let next_hour_ns = hour_ns.saturating_add(infersight_model::time::NANOS_PER_HOUR);
        // rows are sorted: find the first row of a later hour
        let mut end = start + 1;
        while end < ts.len() && ts.value(end) < next_hour_ns {
            end += 1;
        }
        parts.push((hour_ns, sorted.slice(start, end - start)));
        start = end;
    }
    Ok(parts)
}

fn writer_properties(format: SegmentFormat) -> Result<WriterProperties, StoreError> {
    Ok(WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(format.zstd_level)?))
        .set_max_row_group_row_count(Some(format.row_group_rows.max(1)))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_key_value_metadata(Some(vec![KeyValue::new(
            SCHEMA_VERSION_KEY.to_string(),
            SCHEMA_VERSION.to_string(),
        )]))
        .build())
}

/// Writes rows of one (table, hour), already sorted by `ts`, as segment `id`: to a `.tmp` file,
/// fsynced, renamed into place, directory fsynced. The caller records it in the catalog.
pub(crate) fn write_segment(
    data_dir: &Path,
    table: Table,
    hour_ns: i64,
    id: u64,
    batch: &RecordBatch,
    format: SegmentFormat,
) -> Result<SegmentMeta, StoreError> {
    let path = segment_path(data_dir, table, hour_ns, id);
    let hour_dir = path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| data_dir.to_path_buf());
    let created_dir = !hour_dir.exists();
    std::fs::create_dir_all(&hour_dir).map_err(StoreError::io(&hour_dir))?;
    let tmp_path = path.with_extension(format!("{SEGMENT_EXTENSION}.tmp"));
    let result = write_file(&tmp_path, table, batch, format);
    let result = result.and_then(|()| {
        std::fs::rename(&tmp_path, &path).map_err(StoreError::io(&path))?;
        sync_dir(&hour_dir)?;
        if created_dir {
            // make the new hour (and maybe table) directory itself durable
            for dir in hour_dir.ancestors().skip(1).take(2) {
                sync_dir(dir)?;
            }
        }
        Ok(())
    });
    if let Err(err) = result {
        let _ = std::fs::remove_file(&tmp_path);
        return Err(err);
    }
    let bytes = std::fs::metadata(&path)
        .map_err(StoreError::io(&path))?
        .len();
    let ts = ts_column(batch)?;
    debug_assert!(!ts.is_empty());
    let min_ts_ns = arrow::compute::min(ts).unwrap_or(hour_ns);
    let max_ts_ns = arrow::compute::max(ts).unwrap_or(hour_ns);
    debug_assert_eq!(hour_floor_ns(min_ts_ns), hour_ns);
    debug_assert_eq!(hour_floor_ns(max_ts_ns), hour_ns);
    Ok(SegmentMeta {
        id,
        table,
        hour_ns,
        path,
        rows: batch.num_rows() as u64,
        bytes,
        min_ts_ns,
        max_ts_ns,
        schema_version: SCHEMA_VERSION,
        rollup_bytes: None,
    })
}

fn write_file(
    tmp_path: &Path,
    table: Table,
    batch: &RecordBatch,
    format: SegmentFormat,
) -> Result<(), StoreError> {
    let file = File::create(tmp_path).map_err(StoreError::io(tmp_path))?;
    let mut writer = ArrowWriter::try_new(file, table.schema(), Some(writer_properties(format)?))?;
    writer.write(batch)?;
    let file = writer.into_inner()?;
    file.sync_all().map_err(StoreError::io(tmp_path))
}

/// Reads every row of a segment, with the table's canonical schema.
pub(crate) fn read_segment(meta: &SegmentMeta) -> Result<Vec<RecordBatch>, StoreError> {
    let file = File::open(&meta.path).map_err(StoreError::io(&meta.path))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)?.build()?;
    let schema = meta.table.schema();
    let mut batches = Vec::new();
    for batch in reader {
        let batch = batch?;
        batches.push(RecordBatch::try_new(
            Arc::clone(&schema),
            batch.columns().to_vec(),
        )?);
    }
    Ok(batches)
}

#[cfg(test)]
mod tests {
    use infersight_model::RequestRecord;
    use infersight_model::time::NANOS_PER_HOUR;

    use super::*;

    #[test]
    fn hour_directories_are_utc() {
        // 2023-11-14T22:13:20Z
        assert_eq!(hour_dir_name(1_700_000_000_000_000_000), "2023111422");
        let path = segment_path(Path::new("/d"), Table::Logs, 0, 7);
        assert_eq!(
            path,
            Path::new("/d/segments/logs/1970010100/00000000000000000007.parquet")
        );
    }

    #[test]
    fn sorts_and_splits_by_hour() {
        let ts = [
            2 * NANOS_PER_HOUR + 5,
            5,
            NANOS_PER_HOUR,
            1,
            2 * NANOS_PER_HOUR,
        ];
        let records: Vec<_> = ts
            .iter()
            .map(|ts| RequestRecord {
                ts: *ts,
                ..Default::default()
            })
            .collect();
        let sorted = concat_sorted(Table::Requests, &[RequestRecord::to_batch(&records)]).unwrap();
        let parts = split_by_hour(&sorted).unwrap();
        let shape: Vec<(i64, usize)> = parts.iter().map(|(h, b)| (*h, b.num_rows())).collect();
        assert_eq!(
            shape,
            vec![(0, 2), (NANOS_PER_HOUR, 1), (2 * NANOS_PER_HOUR, 2)]
        );
        let first = RequestRecord::from_batch(&parts[0].1).unwrap();
        assert_eq!(first.iter().map(|r| r.ts).collect::<Vec<_>>(), vec![1, 5]);
    }
}
