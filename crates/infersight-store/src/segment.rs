//! Parquet segments: where flushed and compacted rows live. One segment holds rows of one table
//! and one UTC hour, sorted by `ts`, zstd-compressed, with column statistics so the query engine
//! can prune row groups. Layout: `segments/<table>/<YYYYMMDDHH>/<segment id, 20 digits>.parquet`.
//! Each file's crc32 and its footer's are taken while it is written ([`SegmentChecksum`]) and
//! checked here: the footer at every open ([`check_footer`]), the whole file by
//! [`check_file`] and before every read of the store's own ([`read_segment`]). Each page's crc32
//! goes in the footer too (module `page_crc`), for readers that fetch only some pages.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, RecordBatch, StringArray, TimestampNanosecondArray};
use arrow::compute::{concat_batches, interleave_record_batch, sort_to_indices, take_record_batch};
use chrono::{DateTime, Utc};
use infersight_model::durable;
use infersight_model::org::{DEFAULT_ORG, ORG_COLUMN};
use infersight_model::tables::SCHEMA_VERSION_KEY;
use infersight_model::time::hour_floor_ns;
use infersight_model::{SCHEMA_VERSION, Table};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::arrow_writer::ArrowWriterOptions;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use crate::fsutil::sync_dir;
use crate::page_crc::RecordingPageStores;
use crate::types::{SegmentChecksum, SegmentMeta, StoreError};

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

/// Concatenates batches of one table and sorts the rows by `ts`. Rows that arrive in order (the
/// common case) are not copied a second time: the sort would keep them as they are. Rows out of
/// order are gathered from `batches` straight into their sorted places (a stable sort of
/// (ts, batch, row) positions, then one interleave): sorting a concatenated copy held the rows
/// three times at once (the batches, the copy, the sorted copy), which made a flush's peak
/// memory three times its memtable.
pub(crate) fn concat_sorted(
    table: Table,
    batches: &[RecordBatch],
) -> Result<RecordBatch, StoreError> {
    let mut positions: Vec<(i64, usize, usize)> = Vec::new();
    for (index, batch) in batches.iter().enumerate() {
        let ts = ts_column(batch)?;
        if ts.null_count() > 0 {
            // not a row the store writes (validated before the WAL); sorted the plain way
            let merged = concat_batches(&table.schema(), batches)?;
            let indices = sort_to_indices(ts_column(&merged)?, None, None)?;
            return Ok(take_record_batch(&merged, &indices)?);
        }
        positions.extend(
            ts.values()
                .iter()
                .enumerate()
                .map(|(row, &ts_ns)| (ts_ns, index, row)),
        );
    }
    if positions.windows(2).all(|pair| pair[0].0 <= pair[1].0) {
        return Ok(concat_batches(&table.schema(), batches)?);
    }
    // stable: rows with the same `ts` keep their arrival order (the copy's unstable sort did not)
    positions.sort_by_key(|&(ts_ns, _, _)| ts_ns);
    let indices: Vec<(usize, usize)> = positions
        .into_iter()
        .map(|(_, index, row)| (index, row))
        .collect();
    let sources: Vec<&RecordBatch> = batches.iter().collect();
    Ok(interleave_record_batch(&sources, &indices)?)
}

/// Rows a flush gathers into one batch at a time when they arrived out of order: the writer
/// holds this chunk, not a sorted copy of the hour.
pub(crate) const GATHER_CHUNK_ROWS: usize = 65_536;

/// One UTC hour of a flush's rows in `ts` order ([`sorted_hours`]), handed to the writer a
/// batch at a time ([`HourRows::source`]).
#[derive(Debug, Clone)]
pub(crate) enum HourRows {
    /// Zero-copy slices of batches that arrived in order.
    Slices(Vec<RecordBatch>),
    /// The rows of `sources` that `order[range]` names, in that order, gathered
    /// [`GATHER_CHUNK_ROWS`] at a time as they are written: the hour is never copied whole.
    Gathered {
        sources: Arc<[RecordBatch]>,
        /// (`ts`, source, row) of every row of the flush, stably sorted by `ts`.
        order: Arc<[(i64, u32, u32)]>,
        range: std::ops::Range<usize>,
    },
}

impl HourRows {
    #[cfg(test)]
    pub(crate) fn rows(&self) -> usize {
        match self {
            HourRows::Slices(parts) => parts.iter().map(RecordBatch::num_rows).sum(),
            HourRows::Gathered { range, .. } => range.len(),
        }
    }

    /// The hour's rows, one batch per call, `None` after the last.
    pub(crate) fn source(&self) -> impl FnMut() -> Result<Option<RecordBatch>, StoreError> + '_ {
        let mut next = 0usize;
        let gathered_from: Vec<&RecordBatch> = match self {
            HourRows::Gathered { sources, .. } => sources.iter().collect(),
            HourRows::Slices(_) => Vec::new(),
        };
        move || match self {
            HourRows::Slices(parts) => {
                next += 1;
                Ok(parts.get(next - 1).cloned())
            }
            HourRows::Gathered { order, range, .. } => {
                let start = range.start + next;
                if start >= range.end {
                    return Ok(None);
                }
                let end = (start + GATHER_CHUNK_ROWS).min(range.end);
                next = end - range.start;
                let indices: Vec<(usize, usize)> = order[start..end]
                    .iter()
                    .map(|&(_, source, row)| (source as usize, row as usize))
                    .collect();
                Ok(Some(interleave_record_batch(&gathered_from, &indices)?))
            }
        }
    }
}

/// The rows of `batches` (one table's) by UTC hour, each hour's rows sorted by `ts` as
/// [`concat_sorted`] sorts them, never copied whole. When the batches are already in order
/// (each sorted, each starting at or after the end of the one before — data arriving in time
/// order) the hours are zero-copy slices of them: concatenating a flush's rows into new memory
/// cost more than encoding them, most of it the kernel zeroing fresh pages. Otherwise (exporters
/// interleave) each hour is the sorted positions of its rows, gathered a chunk at a time as the
/// segment is written ([`HourRows::Gathered`]): a sorted copy of the memtable doubled a flush's
/// peak memory under load.
pub(crate) fn sorted_hours(
    table: Table,
    batches: &[RecordBatch],
) -> Result<Vec<(i64, HourRows)>, StoreError> {
    // a null `ts` (not a row the store writes: rows are validated before the WAL) is sorted
    // the plain way below; each batch knows its null count without a scan
    let nulls = batches
        .iter()
        .map(ts_column)
        .any(|ts| ts.is_ok_and(|ts| ts.null_count() > 0));
    let mut in_order = !nulls;
    let mut last: Option<i64> = None;
    for batch in batches.iter().filter(|b| !nulls && b.num_rows() > 0) {
        let ts = ts_column(batch)?;
        let values = ts.values();
        in_order = last.is_none_or(|last| last <= values[0])
            && values.windows(2).all(|pair| pair[0] <= pair[1]);
        if !in_order {
            break;
        }
        last = values.last().copied();
    }
    let mut hours: Vec<(i64, HourRows)> = Vec::new();
    if in_order {
        for batch in batches.iter().filter(|b| b.num_rows() > 0) {
            for (hour_ns, part) in split_by_hour(batch)? {
                match hours.last_mut() {
                    Some((last_hour, HourRows::Slices(parts))) if *last_hour == hour_ns => {
                        parts.push(part)
                    }
                    _ => hours.push((hour_ns, HourRows::Slices(vec![part]))),
                }
            }
        }
        return Ok(hours);
    }
    let too_many = batches.len() > u32::MAX as usize
        || batches.iter().any(|b| b.num_rows() > u32::MAX as usize);
    if nulls || too_many {
        // not rows the store writes (validated before the WAL): sorted the plain way
        let sorted = concat_sorted(table, batches)?;
        for (hour_ns, part) in split_by_hour(&sorted)? {
            hours.push((hour_ns, HourRows::Slices(vec![part])));
        }
        return Ok(hours);
    }
    let mut order: Vec<(i64, u32, u32)> =
        Vec::with_capacity(batches.iter().map(RecordBatch::num_rows).sum());
    for (source, batch) in batches.iter().enumerate() {
        let ts = ts_column(batch)?.values();
        order.extend((0..ts.len()).map(|row| (ts[row], source as u32, row as u32)));
    }
    // stable: rows with the same `ts` keep their arrival order (batch, then row)
    order.sort_by_key(|&(ts_ns, _, _)| ts_ns);
    let order: Arc<[(i64, u32, u32)]> = order.into();
    let sources: Arc<[RecordBatch]> = batches.into();
    let mut start = 0usize;
    while start < order.len() {
        let hour_ns = hour_floor_ns(order[start].0);
        // the first row of a later hour (there is none after the last hour `i64` holds)
        let end = match hour_ns.checked_add(infersight_model::time::NANOS_PER_HOUR) {
            Some(next_hour_ns) => {
                start + order[start..].partition_point(|&(ts_ns, _, _)| ts_ns < next_hour_ns)
            }
            None => order.len(),
        };
        hours.push((
            hour_ns,
            HourRows::Gathered {
                sources: Arc::clone(&sources),
                order: Arc::clone(&order),
                range: start..end,
            },
        ));
        start = end;
    }
    Ok(hours)
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

/// String columns whose values are (nearly) all distinct: identifiers and per-record attribute
/// JSON. Dictionary encoding them only hashes every value until the dictionary outgrows its page
/// and the writer falls back to plain encoding, so they are written plain from the start (zstd
/// still compresses them). Latencies and timestamps (floats and times) are written plain too.
const HIGH_CARDINALITY_COLUMNS: [&str; 6] = [
    "trace_id",
    "span_id",
    "parent_span_id",
    "request_id",
    "prompt_hash",
    "attrs",
];

/// Whether segments store the string column `name` dictionary-encoded in every table (a label:
/// `model`, `worker`, `tenant`), so a reader can take its dictionary's indices instead of every
/// row's bytes. `false` for the identifiers of [`HIGH_CARDINALITY_COLUMNS`], also where one table
/// keeps a dictionary of them; a file's own column chunks say the rest.
pub fn string_column_has_dictionary(name: &str) -> bool {
    !HIGH_CARDINALITY_COLUMNS.contains(&name)
}

/// Whether a column of `table` is written without a dictionary (see [`HIGH_CARDINALITY_COLUMNS`]).
fn plain_column(table: Table, field: &arrow::datatypes::Field) -> bool {
    use arrow::datatypes::DataType;
    matches!(field.data_type(), DataType::Float64 | DataType::Timestamp(..))
        // a token row per sampled token: its request_id repeats, and a dictionary pays off there
        || (table != Table::Tokens && HIGH_CARDINALITY_COLUMNS.contains(&field.name().as_str()))
}

/// Whether a column of `table` is stored without compression: the floats of `requests` and
/// `spans` (latencies, durations, sampling parameters). zstd gains little on them (a 10M-row
/// `requests` store is 241 MB with, 250 MB without) and decoding it was a quarter of the CPU of
/// an aggregate over `e2e_ms`; `metrics` values repeat and keep it.
fn uncompressed_column(table: Table, field: &arrow::datatypes::Field) -> bool {
    matches!(table, Table::Requests | Table::Spans)
        && matches!(field.data_type(), arrow::datatypes::DataType::Float64)
}

fn writer_properties(table: Table, format: SegmentFormat) -> Result<WriterProperties, StoreError> {
    let mut builder = WriterProperties::builder();
    for field in table.schema().fields() {
        let column = || ColumnPath::from(field.name().as_str());
        if plain_column(table, field) {
            builder = builder.set_column_dictionary_enabled(column(), false);
        }
        if uncompressed_column(table, field) {
            builder = builder.set_column_compression(column(), Compression::UNCOMPRESSED);
        }
    }
    // min/max of attribute JSON prune nothing; every other column keeps page statistics
    if table.schema().column_with_name("attrs").is_some() {
        builder = builder
            .set_column_statistics_enabled(ColumnPath::from("attrs"), EnabledStatistics::None);
    }
    Ok(builder
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(format.zstd_level)?))
        .set_max_row_group_row_count(Some(format.row_group_rows.max(1)))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_key_value_metadata(Some(vec![KeyValue::new(
            SCHEMA_VERSION_KEY.to_string(),
            SCHEMA_VERSION.to_string(),
        )]))
        .build())
}

/// [`write_segment_stream`] of rows already in `batches` (tests).
#[cfg(test)]
pub(crate) fn write_segment(
    data_dir: &Path,
    table: Table,
    hour_ns: i64,
    id: u64,
    batches: &[RecordBatch],
    format: SegmentFormat,
) -> Result<SegmentMeta, StoreError> {
    let mut batches = batches.iter();
    let mut next = || Ok(batches.next().cloned());
    write_segment_stream(data_dir, table, hour_ns, id, &mut next, format)
}

/// The next batch of rows to write, `None` after the last (see [`write_segment_stream`]).
pub(crate) type BatchSource<'a> = dyn FnMut() -> Result<Option<RecordBatch>, StoreError> + 'a;

/// Writes rows of one (table, hour), sorted by `ts`, as segment `id`: to a `.tmp` file,
/// fsynced, renamed into place, directory fsynced (`infersight_model::durable`); the caller
/// records it in the catalog. `next` hands the rows over one batch at a time, each encoded as it
/// comes: only the row group being encoded is held, not the segment (a flush, a merge).
pub(crate) fn write_segment_stream(
    data_dir: &Path,
    table: Table,
    hour_ns: i64,
    id: u64,
    next: &mut BatchSource<'_>,
    format: SegmentFormat,
) -> Result<SegmentMeta, StoreError> {
    let path = segment_path(data_dir, table, hour_ns, id);
    let hour_dir = path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| data_dir.to_path_buf());
    let created_dir = !hour_dir.exists();
    std::fs::create_dir_all(&hour_dir).map_err(StoreError::io(&hour_dir))?;
    let mut checksum = None;
    let mut seen = RowsSeen::default();
    let mut tracked = || -> Result<Option<RecordBatch>, StoreError> {
        let batch = next()?;
        if let Some(batch) = &batch {
            seen.add(batch)?;
        }
        Ok(batch)
    };
    durable::write_atomic_with(&path, |file| {
        checksum = Some(write_file(&path, file, table, &mut tracked, format)?);
        Ok::<(), StoreError>(())
    })?;
    if created_dir {
        // make the new hour (and maybe table) directory itself durable
        for dir in hour_dir.ancestors().skip(1).take(2) {
            sync_dir(dir)?;
        }
    }
    let bytes = std::fs::metadata(&path)
        .map_err(StoreError::io(&path))?
        .len();
    let (min_ts_ns, max_ts_ns) = (
        seen.min_ts_ns.unwrap_or(hour_ns),
        seen.max_ts_ns.unwrap_or(hour_ns),
    );
    debug_assert_eq!(hour_floor_ns(min_ts_ns), hour_ns);
    debug_assert_eq!(hour_floor_ns(max_ts_ns), hour_ns);
    Ok(SegmentMeta {
        id,
        table,
        hour_ns,
        path,
        location: None,
        rows: seen.rows,
        bytes,
        min_ts_ns,
        max_ts_ns,
        schema_version: SCHEMA_VERSION,
        rollup_bytes: None,
        checksum,
        tier: Default::default(),
        org_rows: Some(seen.org_rows),
    })
}

/// Rows, `ts` bounds and rows per org of the batches a segment was written from.
#[derive(Debug, Default)]
struct RowsSeen {
    rows: u64,
    min_ts_ns: Option<i64>,
    max_ts_ns: Option<i64>,
    org_rows: std::collections::BTreeMap<String, u64>,
}

impl RowsSeen {
    fn add(&mut self, batch: &RecordBatch) -> Result<(), StoreError> {
        self.rows += batch.num_rows() as u64;
        let orgs = orgs_of(batch)?;
        let mut run: Option<(&str, u64)> = None;
        // rows arrive in runs of one org (each export is stamped whole): counted per run
        for row in 0..batch.num_rows() {
            let org = org_at(orgs, row);
            match &mut run {
                Some((current, n)) if *current == org => *n += 1,
                _ => {
                    if let Some((current, n)) = run.take() {
                        *self.org_rows.entry(current.to_string()).or_insert(0) += n;
                    }
                    run = Some((org, 1));
                }
            }
        }
        if let Some((current, n)) = run {
            *self.org_rows.entry(current.to_string()).or_insert(0) += n;
        }
        let ts = ts_column(batch)?;
        if let Some(low) = arrow::compute::min(ts) {
            self.min_ts_ns = Some(self.min_ts_ns.map_or(low, |m| m.min(low)));
        }
        if let Some(high) = arrow::compute::max(ts) {
            self.max_ts_ns = Some(self.max_ts_ns.map_or(high, |m| m.max(high)));
        }
        Ok(())
    }
}

/// The `org` column of a batch of the canonical schema (`None`: a batch without one, whose rows
/// are the default org's).
pub(crate) fn orgs_of(batch: &RecordBatch) -> Result<Option<&StringArray>, StoreError> {
    let Some(column) = batch.column_by_name(ORG_COLUMN) else {
        return Ok(None);
    };
    column
        .as_any()
        .downcast_ref::<StringArray>()
        .map(Some)
        .ok_or_else(|| {
            StoreError::Arrow(arrow::error::ArrowError::SchemaError(format!(
                "column {ORG_COLUMN} is {}, not Utf8",
                column.data_type()
            )))
        })
}

/// The org of `row` (null, or no column: the default org).
pub(crate) fn org_at(orgs: Option<&StringArray>, row: usize) -> &str {
    match orgs {
        Some(orgs) if !orgs.is_null(row) => orgs.value(row),
        _ => DEFAULT_ORG,
    }
}

/// `batch` without the rows of `orgs`.
pub(crate) fn without_orgs(
    batch: &RecordBatch,
    orgs: &std::collections::BTreeSet<String>,
) -> Result<RecordBatch, StoreError> {
    let column = orgs_of(batch)?;
    let keep: arrow::array::BooleanArray = (0..batch.num_rows())
        .map(|row| Some(!orgs.contains(org_at(column, row))))
        .collect();
    Ok(arrow::compute::filter_record_batch(batch, &keep)?)
}

/// The last bytes of a segment kept while it is written, to checksum its footer: far more than
/// any footer of ours (a few KiB per row group).
const FOOTER_KEEP_BYTES: usize = 8 << 20;
const PARQUET_MAGIC: &[u8; 4] = b"PAR1";

/// Passes bytes through to the file, hashing them and keeping the last [`FOOTER_KEEP_BYTES`].
struct ChecksumWriter<W> {
    inner: W,
    hasher: crc32fast::Hasher,
    tail: Vec<u8>,
    /// The last write error: the Parquet writer turns some into text (its buffer's
    /// `into_inner`), and a full disk must still be told apart from a bug.
    failed: Arc<std::sync::Mutex<Option<std::io::ErrorKind>>>,
}

impl<W: Write> Write for ChecksumWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf).inspect_err(|err| {
            if let Ok(mut failed) = self.failed.lock() {
                *failed = Some(err.kind());
            }
        })?;
        let written = &buf[..n];
        self.hasher.update(written);
        if written.len() >= FOOTER_KEEP_BYTES {
            self.tail.clear();
            self.tail
                .extend_from_slice(&written[written.len() - FOOTER_KEEP_BYTES..]);
        } else {
            if self.tail.len() + written.len() > 2 * FOOTER_KEEP_BYTES {
                self.tail.drain(..self.tail.len() - FOOTER_KEEP_BYTES);
            }
            self.tail.extend_from_slice(written);
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The footer's length from the last 8 bytes of a Parquet file (metadata length, `PAR1`).
fn footer_len(trailer: &[u8]) -> Option<usize> {
    let trailer: &[u8; 8] = trailer.try_into().ok()?;
    if &trailer[4..] != PARQUET_MAGIC {
        return None;
    }
    let metadata_len = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]);
    usize::try_from(metadata_len).ok()?.checked_add(8)
}

/// Encodes the batches of `next` as Parquet into `file` (the durable writer fsyncs it); answers
/// the file's checksums.
fn write_file(
    path: &Path,
    file: &mut File,
    table: Table,
    next: &mut BatchSource<'_>,
    format: SegmentFormat,
) -> Result<SegmentChecksum, StoreError> {
    let failed = Arc::new(std::sync::Mutex::new(None));
    let sink = ChecksumWriter {
        inner: file,
        hasher: crc32fast::Hasher::new(),
        tail: Vec::new(),
        failed: Arc::clone(&failed),
    };
    let encode = || -> Result<ChecksumWriter<&mut File>, StoreError> {
        let pages = RecordingPageStores::default();
        let options = ArrowWriterOptions::new()
            .with_properties(writer_properties(table, format)?)
            .with_page_store_factory(Arc::new(pages.clone()));
        let mut writer = ArrowWriter::try_new_with_options(sink, table.schema(), options)?;
        // row groups are cut by row count across batches, as for one concatenated batch
        while let Some(batch) = next()? {
            writer.write(&batch)?;
        }
        // every page is in the file once the last row group is: their checksums go in the footer
        writer.flush()?;
        if let Some(entry) = pages.footer_entry(writer.flushed_row_groups()) {
            writer.append_key_value_metadata(entry);
        }
        Ok(writer.into_inner()?)
    };
    let sink = encode().map_err(|err| {
        // the file's own I/O error, whatever text the encoder made of it
        match failed.lock().ok().and_then(|failed| *failed) {
            Some(kind) => StoreError::Io {
                path: durable::temp_path(path),
                source: std::io::Error::new(kind, err.to_string()),
            },
            None => err,
        }
    })?;
    let tail = &sink.tail;
    let footer_bytes = tail
        .len()
        .checked_sub(8)
        .and_then(|at| footer_len(&tail[at..]))
        .filter(|len| *len <= tail.len())
        // a footer larger than what was kept (never seen): only its trailer is checked at open
        .unwrap_or(8.min(tail.len()));
    Ok(SegmentChecksum {
        file_crc32: sink.hasher.finalize(),
        footer_bytes: u32::try_from(footer_bytes).unwrap_or(8),
        footer_crc32: crc32fast::hash(&tail[tail.len() - footer_bytes..]),
        rollup_crc32: None,
    })
}

/// What checking a segment file found.
#[derive(Debug)]
pub(crate) enum FileCheck {
    Sound,
    /// The file is missing, has the wrong size or bytes that do not match their checksum.
    Corrupt(String),
    /// The file could not be read for another reason (permissions, an I/O error): not judged.
    Unreadable(std::io::Error),
}

fn open_checked(path: &Path, expected_bytes: u64) -> Result<File, FileCheck> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err(FileCheck::Corrupt("the file is missing".into()));
        }
        Err(err) => return Err(FileCheck::Unreadable(err)),
    };
    let len = file.metadata().map_err(FileCheck::Unreadable)?.len();
    if len != expected_bytes {
        return Err(FileCheck::Corrupt(format!(
            "{len} bytes on disk, {expected_bytes} written"
        )));
    }
    Ok(file)
}

/// The check at every open, one read of the file's tail: the file exists with the size the
/// catalog recorded, ends in a Parquet trailer, and its footer matches its checksum.
pub(crate) fn check_footer(meta: &SegmentMeta) -> FileCheck {
    let check = || -> Result<(), FileCheck> {
        let mut file = open_checked(&meta.path, meta.bytes)?;
        let tail_len = meta
            .checksum
            .map_or(8, |c| u64::from(c.footer_bytes))
            .min(meta.bytes);
        let mut tail = vec![0u8; usize::try_from(tail_len).unwrap_or(8)];
        file.seek(SeekFrom::End(-(tail_len as i64)))
            .and_then(|_| file.read_exact(&mut tail))
            .map_err(FileCheck::Unreadable)?;
        if tail.len() < 8 || footer_len(&tail[tail.len() - 8..]).is_none() {
            return Err(FileCheck::Corrupt("no parquet trailer at its end".into()));
        }
        if let Some(checksum) = meta.checksum
            && crc32fast::hash(&tail) != checksum.footer_crc32
        {
            return Err(FileCheck::Corrupt(
                "the parquet footer does not match its checksum".into(),
            ));
        }
        Ok(())
    };
    check().err().unwrap_or(FileCheck::Sound)
}

/// Reads the whole file and compares it with its checksum (segments written before checksums:
/// size and trailer only).
pub(crate) fn check_file(meta: &SegmentMeta) -> FileCheck {
    let Some(checksum) = meta.checksum else {
        return check_footer(meta);
    };
    let check = || -> Result<(), FileCheck> {
        let mut file = open_checked(&meta.path, meta.bytes)?;
        let mut hasher = crc32fast::Hasher::new();
        let mut buffer = vec![0u8; 1 << 20];
        loop {
            let n = file.read(&mut buffer).map_err(FileCheck::Unreadable)?;
            if n == 0 {
                break;
            }
            hasher.update(&buffer[..n]);
        }
        if hasher.finalize() != checksum.file_crc32 {
            return Err(FileCheck::Corrupt(
                "the file does not match its checksum".into(),
            ));
        }
        Ok(())
    };
    check().err().unwrap_or(FileCheck::Sound)
}

/// Reads every row of a segment, with the table's canonical schema, after checking the file
/// against its checksum. A file that fails the check or does not decode is
/// [`StoreError::Corrupt`] with `what = "segment"` (the caller quarantines it).
pub(crate) fn read_segment(meta: &SegmentMeta) -> Result<Vec<RecordBatch>, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        what: SEGMENT,
        path: meta.path.clone(),
        reason,
    };
    match check_file(meta) {
        FileCheck::Sound => {}
        FileCheck::Corrupt(reason) => return Err(corrupt(reason)),
        FileCheck::Unreadable(source) => {
            return Err(StoreError::Io {
                path: meta.path.clone(),
                source,
            });
        }
    }
    let file = File::open(&meta.path).map_err(StoreError::io(&meta.path))?;
    decode(meta, file)
}

/// [`read_segment`] of a segment fetched from a bucket: `bytes` checked against the size and
/// checksum the catalog recorded, then decoded.
pub(crate) fn read_segment_bytes(
    meta: &SegmentMeta,
    bytes: bytes::Bytes,
) -> Result<Vec<RecordBatch>, StoreError> {
    check_bytes(meta, &bytes)?;
    decode(meta, bytes)
}

/// A bucket object's bytes against the size and checksum the catalog recorded.
fn check_bytes(meta: &SegmentMeta, bytes: &[u8]) -> Result<(), StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        what: SEGMENT,
        path: meta.path.clone(),
        reason,
    };
    if bytes.len() as u64 != meta.bytes {
        return Err(corrupt(format!(
            "{} bytes in the bucket, {} written",
            bytes.len(),
            meta.bytes
        )));
    }
    if let Some(checksum) = meta.checksum
        && crc32fast::hash(bytes) != checksum.file_crc32
    {
        return Err(corrupt("the object does not match its checksum".into()));
    }
    Ok(())
}

/// Every row of a segment's Parquet bytes, with the table's canonical schema; what does not
/// decode is `Corrupt`.
fn decode<R: parquet::file::reader::ChunkReader + 'static>(
    meta: &SegmentMeta,
    source: R,
) -> Result<Vec<RecordBatch>, StoreError> {
    decode_stream(meta, source)?.collect()
}

/// Rows of one segment read a batch at a time ([`segment_batches`]).
pub(crate) type SegmentBatches = Box<dyn Iterator<Item = Result<RecordBatch, StoreError>> + Send>;

/// Rows per batch when a segment is streamed into a merge.
const STREAM_BATCH_ROWS: usize = 8192;

/// [`decode`] a batch at a time: only the row group being read is held.
fn decode_stream<R: parquet::file::reader::ChunkReader + 'static>(
    meta: &SegmentMeta,
    source: R,
) -> Result<SegmentBatches, StoreError> {
    let table = meta.table;
    let path = meta.path.clone();
    let corrupt = move |err: StoreError| match err {
        StoreError::Parquet(_) | StoreError::Arrow(_) => StoreError::Corrupt {
            what: SEGMENT,
            path: path.clone(),
            reason: err.to_string(),
        },
        other => other,
    };
    let reader = ParquetRecordBatchReaderBuilder::try_new(source)
        .and_then(|builder| builder.with_batch_size(STREAM_BATCH_ROWS).build())
        .map_err(|err| corrupt(err.into()))?;
    let schema = table.schema();
    Ok(Box::new(reader.map(move |batch| {
        let canonical = || -> Result<RecordBatch, StoreError> {
            // a segment from before a column was appended (such as `org`): null in that column
            let batch = infersight_model::tables::with_appended_columns(table, batch?);
            Ok(RecordBatch::try_new(
                Arc::clone(&schema),
                batch.columns().to_vec(),
            )?)
        };
        canonical().map_err(&corrupt)
    })))
}

/// [`read_segment`] a batch at a time: the file is checked against its checksum first, then
/// decoded as the batches are taken.
pub(crate) fn segment_batches(meta: &SegmentMeta) -> Result<SegmentBatches, StoreError> {
    match check_file(meta) {
        FileCheck::Sound => {}
        FileCheck::Corrupt(reason) => {
            return Err(StoreError::Corrupt {
                what: SEGMENT,
                path: meta.path.clone(),
                reason,
            });
        }
        FileCheck::Unreadable(source) => {
            return Err(StoreError::Io {
                path: meta.path.clone(),
                source,
            });
        }
    }
    let file = File::open(&meta.path).map_err(StoreError::io(&meta.path))?;
    decode_stream(meta, file)
}

/// [`read_segment_bytes`] a batch at a time (the bytes, compressed, stay whole).
pub(crate) fn segment_bytes_batches(
    meta: &SegmentMeta,
    bytes: bytes::Bytes,
) -> Result<SegmentBatches, StoreError> {
    check_bytes(meta, &bytes)?;
    decode_stream(meta, bytes)
}

/// Rows of several segments of one (table, hour), each sorted by `ts` as the store writes them,
/// merged into one stream sorted by `ts`, `chunk_rows` at a time: compaction writes a partition
/// without holding it in memory, only each input's current batch and the chunk being built.
/// Rows with the same `ts` keep the order of the inputs, then their order within an input: the
/// same rows in the same order as [`concat_sorted`] of the inputs read whole. An input out of
/// order (never written by the store) loses no row; the output is then merely not sorted.
pub(crate) struct SortedMerge {
    inputs: Vec<MergeInput>,
    /// (`ts` of an input's next row, the input), smallest first.
    heads: std::collections::BinaryHeap<std::cmp::Reverse<(i64, usize)>>,
    chunk_rows: usize,
}

struct MergeInput {
    batches: SegmentBatches,
    /// The batch being merged and its `ts` column.
    batch: Option<(RecordBatch, TimestampNanosecondArray)>,
    row: usize,
}

impl MergeInput {
    /// The `ts` of the next row, reading the next non-empty batch when this one is done.
    fn head(&mut self) -> Result<Option<i64>, StoreError> {
        loop {
            if let Some((batch, ts)) = &self.batch
                && self.row < batch.num_rows()
            {
                // a null `ts` is not a row the store writes; it sorts first, as in a sort
                return Ok(Some(if ts.is_null(self.row) {
                    i64::MIN
                } else {
                    ts.value(self.row)
                }));
            }
            match self.batches.next().transpose()? {
                Some(batch) => {
                    let ts = ts_column(&batch)?.clone();
                    self.batch = Some((batch, ts));
                    self.row = 0;
                }
                None => {
                    self.batch = None;
                    return Ok(None);
                }
            }
        }
    }
}

impl SortedMerge {
    pub(crate) fn new(inputs: Vec<SegmentBatches>, chunk_rows: usize) -> Result<Self, StoreError> {
        let mut merge = SortedMerge {
            inputs: inputs
                .into_iter()
                .map(|batches| MergeInput {
                    batches,
                    batch: None,
                    row: 0,
                })
                .collect(),
            heads: std::collections::BinaryHeap::new(),
            chunk_rows: chunk_rows.max(1),
        };
        for index in 0..merge.inputs.len() {
            if let Some(ts) = merge.inputs[index].head()? {
                merge.heads.push(std::cmp::Reverse((ts, index)));
            }
        }
        Ok(merge)
    }

    /// The next chunk of merged rows, `None` when every input is done.
    pub(crate) fn next_chunk(&mut self) -> Result<Option<RecordBatch>, StoreError> {
        // the batches rows of this chunk come from: an input's batch stays here after the input
        // moved on to its next one
        let mut sources: Vec<RecordBatch> = Vec::new();
        let mut source_of: Vec<Option<usize>> = vec![None; self.inputs.len()];
        let mut indices: Vec<(usize, usize)> = Vec::with_capacity(self.chunk_rows);
        while indices.len() < self.chunk_rows {
            let Some(std::cmp::Reverse((_, index))) = self.heads.pop() else {
                break;
            };
            let input = &mut self.inputs[index];
            let Some((batch, _)) = &input.batch else {
                continue;
            };
            let source = match source_of[index] {
                Some(source) => source,
                None => {
                    sources.push(batch.clone());
                    source_of[index] = Some(sources.len() - 1);
                    sources.len() - 1
                }
            };
            indices.push((source, input.row));
            input.row += 1;
            let exhausted = input.row >= batch.num_rows();
            if let Some(ts) = input.head()? {
                if exhausted {
                    source_of[index] = None;
                }
                self.heads.push(std::cmp::Reverse((ts, index)));
            }
        }
        if indices.is_empty() {
            return Ok(None);
        }
        let sources: Vec<&RecordBatch> = sources.iter().collect();
        Ok(Some(interleave_record_batch(&sources, &indices)?))
    }
}

/// `StoreError::Corrupt::what` of a segment that failed its check.
pub(crate) const SEGMENT: &str = "segment";

#[cfg(test)]
mod tests {
    use infersight_model::RequestRecord;
    use infersight_model::time::NANOS_PER_HOUR;

    use super::*;

    /// Every batch `rows` hands the writer.
    fn collect(rows: &HourRows) -> Vec<RecordBatch> {
        let mut source = rows.source();
        let mut batches = Vec::new();
        while let Some(batch) = source().unwrap() {
            batches.push(batch);
        }
        batches
    }

    /// Segments as streams of batches, for the merge.
    fn streams(inputs: &[Vec<RecordBatch>]) -> Vec<SegmentBatches> {
        (inputs.iter())
            .map(|batches| {
                let batches: Vec<Result<RecordBatch, StoreError>> =
                    batches.iter().cloned().map(Ok).collect();
                Box::new(batches.into_iter()) as SegmentBatches
            })
            .collect()
    }

    #[test]
    fn the_streaming_merge_gives_the_rows_and_order_of_the_whole_sort() {
        // seeded: inputs of sorted runs with many equal `ts` across and within inputs, batches
        // of uneven sizes (some empty), chunks smaller and larger than a batch
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move |bound: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % bound
        };
        for case in 0..40 {
            let inputs_n = 1 + next(6) as usize;
            let mut inputs: Vec<Vec<RecordBatch>> = Vec::new();
            let mut all: Vec<RecordBatch> = Vec::new();
            for input in 0..inputs_n {
                let rows = next(700) as i64;
                let mut ts = next(50) as i64;
                let records: Vec<RequestRecord> = (0..rows)
                    .map(|row| {
                        ts += next(3) as i64; // ties within an input
                        RequestRecord {
                            ts,
                            request_id: Some(format!("c{case}-i{input}-r{row}")),
                            ..Default::default()
                        }
                    })
                    .collect();
                let mut batches = Vec::new();
                let mut at = 0;
                while at < records.len() {
                    let size = (next(300) as usize).min(records.len() - at);
                    batches.push(RequestRecord::to_batch(&records[at..at + size]));
                    at += size;
                }
                all.extend(batches.iter().cloned());
                inputs.push(batches);
            }
            let chunk_rows = 1 + next(500) as usize;
            let mut merge = SortedMerge::new(streams(&inputs), chunk_rows).unwrap();
            let mut chunks = Vec::new();
            while let Some(chunk) = merge.next_chunk().unwrap() {
                assert!(chunk.num_rows() <= chunk_rows);
                chunks.push(chunk);
            }
            let merged = concat_batches(&Table::Requests.schema(), &chunks).unwrap();
            let expected = concat_sorted(Table::Requests, &all).unwrap();
            assert_eq!(merged.num_rows(), expected.num_rows(), "case {case}");
            assert!(
                merged == expected,
                "case {case}: the merge differs from the sort"
            );
        }
    }

    #[test]
    fn a_segment_that_fails_midway_fails_the_merge_with_its_error() {
        let records: Vec<RequestRecord> = (0..10)
            .map(|ts| RequestRecord {
                ts,
                ..Default::default()
            })
            .collect();
        let good = RequestRecord::to_batch(&records);
        let failing: SegmentBatches = Box::new(
            vec![
                Ok(good.clone()),
                Err(StoreError::Corrupt {
                    what: SEGMENT,
                    path: PathBuf::from("/bucket/bad.parquet"),
                    reason: "page 3 does not decode".into(),
                }),
            ]
            .into_iter(),
        );
        let inputs = vec![streams(&[vec![good]]).remove(0), failing];
        let mut merge = SortedMerge::new(inputs, 4).unwrap();
        let err = loop {
            match merge.next_chunk() {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("the failure was swallowed"),
                Err(err) => break err,
            }
        };
        assert!(err.to_string().contains("page 3 does not decode"), "{err}");
    }

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
    fn rows_in_order_come_out_as_the_sort_leaves_them() {
        // ties in `ts` told apart by `request_id`; the fast path must give what sorting gives
        let records: Vec<_> = (0..3000)
            .map(|i| RequestRecord {
                ts: i / 7,
                request_id: Some(format!("r{i}")),
                ..Default::default()
            })
            .collect();
        let batches = [
            RequestRecord::to_batch(&records[..1000]),
            RequestRecord::to_batch(&records[1000..]),
        ];
        let fast = concat_sorted(Table::Requests, &batches).unwrap();
        let merged = concat_batches(&Table::Requests.schema(), &batches).unwrap();
        let indices = sort_to_indices(ts_column(&merged).unwrap(), None, None).unwrap();
        let sorted = take_record_batch(&merged, &indices).unwrap();
        assert!(fast == sorted, "the fast path differs from the sort");
        let ids: Vec<_> = RequestRecord::from_batch(&fast)
            .unwrap()
            .into_iter()
            .map(|r| r.request_id)
            .collect();
        let expected: Vec<_> = records.iter().map(|r| r.request_id.clone()).collect();
        assert!(ids == expected, "rows in order changed order");
        // out of order: sorted by ts
        let shuffled = [batches[1].clone(), batches[0].clone()];
        let out = concat_sorted(Table::Requests, &shuffled).unwrap();
        let ts: Vec<i64> = RequestRecord::from_batch(&out)
            .unwrap()
            .iter()
            .map(|r| r.ts)
            .collect();
        assert!(ts.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(ts.len(), 3000);
    }

    #[test]
    fn rows_out_of_order_are_gathered_as_the_sort_of_a_copy_orders_them() {
        // ties in `ts` within and across batches, batches overlapping in time, an empty batch
        let batch = |ts: &[i64], tag: &str| {
            let records: Vec<_> = ts
                .iter()
                .enumerate()
                .map(|(i, ts)| RequestRecord {
                    ts: *ts,
                    request_id: Some(format!("{tag}{i}")),
                    e2e_ms: Some(*ts as f64 / 3.0),
                    ..Default::default()
                })
                .collect();
            RequestRecord::to_batch(&records)
        };
        let ts_a: Vec<i64> = (0..2000).map(|i| (i * 7919) % 997).collect();
        let ts_b: Vec<i64> = (0..1500).map(|i| (i * 31) % 600 + 300).collect();
        let batches = [batch(&ts_a, "a"), batch(&[], "e"), batch(&ts_b, "b")];
        // expected: the concatenated rows sorted by `ts`, ties in arrival order (batch, row)
        let merged = concat_batches(&Table::Requests.schema(), &batches).unwrap();
        let ts = ts_column(&merged).unwrap().values().to_vec();
        let mut order: Vec<u32> = (0..ts.len() as u32).collect();
        order.sort_by_key(|&i| ts[i as usize]);
        let indices = arrow::array::UInt32Array::from(order);
        let expected = take_record_batch(&merged, &indices).unwrap();
        let gathered = concat_sorted(Table::Requests, &batches).unwrap();
        assert!(
            gathered == expected,
            "gathered rows differ from the sorted copy"
        );
    }

    #[test]
    fn hours_of_batches_in_order_are_slices_with_the_sorted_rows() {
        let batch = |ts: &[i64], tag: &str| {
            let records: Vec<_> = ts
                .iter()
                .enumerate()
                .map(|(i, ts)| RequestRecord {
                    ts: *ts,
                    request_id: Some(format!("{tag}{i}")),
                    ..Default::default()
                })
                .collect();
            RequestRecord::to_batch(&records)
        };
        let h = NANOS_PER_HOUR;
        let cases = [
            // in order, across two hour boundaries, with a tie across batches and an empty batch
            vec![
                batch(&[1, 5, h - 1], "a"),
                batch(&[], "e"),
                batch(&[h - 1, h, 2 * h], "b"),
                batch(&[2 * h + 1], "c"),
            ],
            // out of order across batches
            vec![batch(&[h, h + 1], "a"), batch(&[2, 3], "b")],
            // out of order inside a batch
            vec![batch(&[1, 2], "a"), batch(&[5, 4, h], "b")],
        ];
        for (case, batches) in cases.iter().enumerate() {
            let expected =
                split_by_hour(&concat_sorted(Table::Requests, batches).unwrap()).unwrap();
            let hours = sorted_hours(Table::Requests, batches).unwrap();
            assert_eq!(hours.len(), expected.len(), "case {case}");
            for ((hour, rows), (want_hour, want)) in hours.iter().zip(&expected) {
                assert_eq!(hour, want_hour, "case {case}");
                assert_eq!(rows.rows(), want.num_rows(), "case {case}");
                let got = concat_batches(&Table::Requests.schema(), &collect(rows)).unwrap();
                assert!(got == *want, "case {case}, hour {hour}: rows differ");
            }
        }
        // the in-order case is cut without copying: three hours from the four batches
        let parts: Vec<usize> = sorted_hours(Table::Requests, &cases[0])
            .unwrap()
            .iter()
            .map(|(_, rows)| match rows {
                HourRows::Slices(parts) => parts.len(),
                HourRows::Gathered { .. } => panic!("rows in order were gathered"),
            })
            .collect();
        assert_eq!(parts, vec![2, 1, 2]);
    }

    #[test]
    fn rows_out_of_order_are_gathered_a_chunk_at_a_time_in_sorted_order() {
        // exporters interleave: 40 batches of 5,000 rows each, every batch spread over two
        // hours and out of order with the others, more rows per hour than one chunk
        let h = NANOS_PER_HOUR;
        let batches: Vec<RecordBatch> = (0..40i64)
            .map(|b| {
                let records: Vec<_> = (0..5000i64)
                    .map(|i| RequestRecord {
                        // a third of the rows in the first hour, two thirds in the next; 3,000
                        // distinct times, so most rows tie with rows of other batches
                        ts: h - 1_000_000 + ((i * 7919 + b * 104_729) % 3_000) * 1_000,
                        request_id: Some(format!("{b}-{i}")),
                        ..Default::default()
                    })
                    .collect();
                RequestRecord::to_batch(&records)
            })
            .collect();
        let expected = split_by_hour(&concat_sorted(Table::Requests, &batches).unwrap()).unwrap();
        let hours = sorted_hours(Table::Requests, &batches).unwrap();
        assert_eq!(hours.len(), 2);
        for ((hour, rows), (want_hour, want)) in hours.iter().zip(&expected) {
            assert_eq!(hour, want_hour);
            assert!(
                matches!(rows, HourRows::Gathered { .. }),
                "hour {hour} was copied"
            );
            let chunks = collect(rows);
            assert!(chunks.iter().all(|c| c.num_rows() <= GATHER_CHUNK_ROWS));
            assert_eq!(
                chunks.len(),
                want.num_rows().div_ceil(GATHER_CHUNK_ROWS),
                "hour {hour}"
            );
            let got = concat_batches(&Table::Requests.schema(), &chunks).unwrap();
            assert!(
                got == *want,
                "hour {hour}: rows differ from the sorted copy"
            );
        }
        assert_eq!(hours.iter().map(|(_, r)| r.rows()).sum::<usize>(), 200_000);
    }

    #[test]
    fn identifiers_are_written_plain_and_labels_with_a_dictionary() {
        use parquet::basic::Encoding;
        use parquet::file::reader::{FileReader, SerializedFileReader};

        let records: Vec<_> = (0..5000)
            .map(|i| RequestRecord {
                ts: i,
                trace_id: Some(format!("{i:032x}")),
                request_id: Some(format!("req-{i}")),
                model: Some(format!("model-{}", i % 3)),
                attrs: format!("{{\"n\":{i}}}"),
                ..Default::default()
            })
            .collect();
        let batch = RequestRecord::to_batch(&records);
        let dir = tempfile::tempdir().unwrap();
        let format = SegmentFormat {
            zstd_level: 1,
            row_group_rows: 4096,
        };
        let meta = write_segment(
            dir.path(),
            Table::Requests,
            0,
            1,
            std::slice::from_ref(&batch),
            format,
        )
        .unwrap();
        let reader = SerializedFileReader::new(File::open(&meta.path).unwrap()).unwrap();
        let parquet_meta = reader.metadata();
        assert_eq!(parquet_meta.num_row_groups(), 2);
        for group in parquet_meta.row_groups() {
            for chunk in group.columns() {
                let name = chunk.column_path().string();
                let dictionary = chunk.encodings().any(|e| e == Encoding::RLE_DICTIONARY);
                let plain_expected = HIGH_CARDINALITY_COLUMNS.contains(&name.as_str())
                    || name.ends_with("_ms")
                    || name == "ts"
                    || ["temperature", "top_p"].contains(&name.as_str());
                assert_eq!(dictionary, !plain_expected, "column {name}");
            }
        }
        let read =
            concat_batches(&Table::Requests.schema(), &read_segment(&meta).unwrap()).unwrap();
        assert!(read == batch, "rows changed on the way through the segment");
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
