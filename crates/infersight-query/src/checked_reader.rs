//! Segment bytes checked as the query engine reads them: the Parquet scans of `provider` read
//! through [`CheckedReaderFactory`], DataFusion's own reader wrapped so that every whole page it
//! fetches is compared with the checksums in the segment's footer
//! ([`infersight_store::page_crc`]). A page that does not match fails the statement with the
//! segment and the page named, and the store sets the segment aside
//! ([`StorageBackend::segment_corrupt`]), so the next statement answers from the rest. A file
//! marked by the plan to read its group keys as dictionaries has them hinted in the metadata it
//! returns ([`crate::dictionary_keys`]).

use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::ParquetFileReaderFactory;
use datafusion::datasource::physical_plan::parquet::CachedParquetFileReaderFactory;
use datafusion::execution::cache::cache_manager::FileMetadataCache;
use datafusion::object_store::ObjectStore;
use datafusion::object_store::path::Path as ObjectPath;
use datafusion::parquet::arrow::arrow_reader::ArrowReaderOptions;
use datafusion::parquet::arrow::async_reader::AsyncFileReader;
use datafusion::parquet::errors::ParquetError;
use datafusion::parquet::file::metadata::ParquetMetaData;
use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, Label, MetricBuilder, MetricCategory, MetricType,
};
use futures::FutureExt;
use futures::future::BoxFuture;
use infersight_store::StorageBackend;
use infersight_store::page_crc::PageChecksums;

use crate::dictionary_keys;

/// Readers of one scan's segment files, each checking the pages it fetches. Footers come
/// from the engine's metadata cache when an earlier statement decoded them (a segment's file
/// never changes under its name; the cache also checks its size).
pub(crate) struct CheckedReaderFactory {
    inner: CachedParquetFileReaderFactory,
    store: Arc<dyn StorageBackend>,
    /// The segments by the location the scan reads them at: what to set aside, and where a
    /// local one is.
    segments: Arc<HashMap<ObjectPath, SegmentFile>>,
}

impl std::fmt::Debug for CheckedReaderFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckedReaderFactory")
            .field("segments", &self.segments.len())
            .finish_non_exhaustive()
    }
}

impl CheckedReaderFactory {
    pub(crate) fn new(
        object_store: Arc<dyn ObjectStore>,
        store: Arc<dyn StorageBackend>,
        segments: Arc<HashMap<ObjectPath, SegmentFile>>,
        metadata_cache: Arc<FileMetadataCache>,
    ) -> Self {
        Self {
            inner: CachedParquetFileReaderFactory::new(object_store, metadata_cache),
            store,
            segments,
        }
    }
}

impl ParquetFileReaderFactory for CheckedReaderFactory {
    fn create_reader(
        &self,
        partition_index: usize,
        partitioned_file: PartitionedFile,
        metadata_size_hint: Option<usize>,
        metrics: &ExecutionPlanMetricsSet,
    ) -> datafusion::common::Result<Box<dyn AsyncFileReader + Send>> {
        let location = partitioned_file.object_meta.location.clone();
        let dictionary_keys = dictionary_keys::marked(&partitioned_file);
        // the reads of a local file bypass DataFusion's reader: counted here, as it counts them
        let bytes_scanned = MetricBuilder::new(metrics)
            .with_label(Label::new("filename", Arc::<str>::from(location.as_ref())))
            .with_type(MetricType::Summary)
            .with_category(MetricCategory::Bytes)
            .counter("bytes_scanned", partition_index);
        let segment = self.segments.get(&location).cloned();
        let inner = self.inner.create_reader(
            partition_index,
            partitioned_file,
            metadata_size_hint,
            metrics,
        )?;
        Ok(Box::new(CheckedReader {
            inner,
            location,
            segment,
            store: Arc::clone(&self.store),
            dictionary_keys,
            bytes_scanned,
            pages: None,
            reported: false,
        }))
    }
}

/// A segment a scan reads.
#[derive(Debug, Clone)]
pub(crate) struct SegmentFile {
    pub(crate) id: u64,
    /// The file of a local segment (read with `std::fs`, quarantined when corrupt); `None` for
    /// an object in a bucket (read through the object store, logged when corrupt).
    pub(crate) local: Option<PathBuf>,
}

struct CheckedReader {
    inner: Box<dyn AsyncFileReader + Send>,
    location: ObjectPath,
    segment: Option<SegmentFile>,
    store: Arc<dyn StorageBackend>,
    /// Columns the plan reads as dictionaries ([`dictionary_keys`]), hinted in the metadata.
    dictionary_keys: Option<Arc<BTreeSet<String>>>,
    /// Bytes read from a local file (`EXPLAIN ANALYZE`'s `bytes_scanned`).
    bytes_scanned: Count,
    /// The footer's page checksums, once the metadata was read (`None`: a segment written
    /// before them, or no metadata yet: nothing is checked).
    pages: Option<Arc<PageChecksums>>,
    reported: bool,
}

impl CheckedReader {
    /// The statement's error for a corrupt segment; the store hears of it once, on a blocking
    /// thread (setting a segment aside waits for the store's maintenance lock, which a
    /// compaction may hold for seconds).
    async fn corrupt(&mut self, reason: String) -> ParquetError {
        if !self.reported {
            self.reported = true;
            if let Some(id) = self.segment.as_ref().map(|segment| segment.id) {
                let store = Arc::clone(&self.store);
                let told = reason.clone();
                let _ = tokio::task::spawn_blocking(move || store.segment_corrupt(id, told)).await;
            }
        }
        let after = match &self.segment {
            Some(SegmentFile { local: Some(_), .. }) => {
                "; it was set aside (quarantined): run the statement again to read the rest"
            }
            _ => "",
        };
        ParquetError::General(format!(
            "segment {} is corrupt: {reason}{after}",
            self.location
        ))
    }

    /// Every whole page of `bytes` (read at `offset`) against its checksum.
    fn check(&self, offset: u64, bytes: &[u8]) -> Result<(), String> {
        match &self.pages {
            Some(pages) => pages
                .verify(offset, bytes)
                .map(|_| ())
                .map_err(|mismatch| mismatch.to_string()),
            None => Ok(()),
        }
    }
}

impl CheckedReader {
    /// `ranges` of the segment: a local file read with `std::fs` on a blocking thread, a bucket
    /// object through the object store.
    async fn fetch(&mut self, ranges: Vec<Range<u64>>) -> Result<Vec<Bytes>, ParquetError> {
        let Some(path) = self.segment.as_ref().and_then(|s| s.local.clone()) else {
            return self.inner.get_byte_ranges(ranges).await;
        };
        let read = tokio::task::spawn_blocking(move || read_local(&path, &ranges))
            .await
            .map_err(|join| ParquetError::External(Box::new(join)))??;
        self.bytes_scanned
            .add(read.iter().map(Bytes::len).sum::<usize>());
        Ok(read)
    }
}

/// `ranges` of the file at `path`, each read into fresh memory that is not zeroed first:
/// object_store's local reads zero every range before reading into it, a tenth of the
/// instructions of a light aggregate (bench/README.md, "Label keys read as their dictionary").
fn read_local(path: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>, ParquetError> {
    let failed = |error: std::io::Error| {
        ParquetError::General(format!("segment {}: {error}", path.display()))
    };
    let mut file = std::fs::File::open(path).map_err(failed)?;
    let size = file.metadata().map_err(failed)?.len();
    ranges
        .iter()
        .map(|range| {
            let len = range.end.saturating_sub(range.start);
            // a range from damaged metadata is refused before memory is taken for it
            if range.end > size {
                return Err(ParquetError::EOF(format!(
                    "segment {}: bytes {}..{} run past its end ({size} bytes)",
                    path.display(),
                    range.start,
                    range.end,
                )));
            }
            file.seek(SeekFrom::Start(range.start)).map_err(failed)?;
            let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
            (&mut file)
                .take(len)
                .read_to_end(&mut bytes)
                .map_err(failed)?;
            if bytes.len() as u64 != len {
                return Err(ParquetError::EOF(format!(
                    "segment {}: bytes {}..{} run past its end ({} read)",
                    path.display(),
                    range.start,
                    range.end,
                    bytes.len()
                )));
            }
            Ok(Bytes::from(bytes))
        })
        .collect()
}

impl AsyncFileReader for CheckedReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, Result<Bytes, ParquetError>> {
        async move {
            let offset = range.start;
            let bytes = self.fetch(vec![range]).await?.pop().ok_or_else(|| {
                ParquetError::General(format!("segment {}: nothing read", self.location))
            })?;
            if let Err(reason) = self.check(offset, &bytes) {
                return Err(self.corrupt(reason).await);
            }
            Ok(bytes)
        }
        .boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, Result<Vec<Bytes>, ParquetError>> {
        async move {
            let offsets: Vec<u64> = ranges.iter().map(|range| range.start).collect();
            let fetched = self.fetch(ranges).await?;
            for (offset, bytes) in offsets.into_iter().zip(&fetched) {
                if let Err(reason) = self.check(offset, bytes) {
                    return Err(self.corrupt(reason).await);
                }
            }
            Ok(fetched)
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, Result<Arc<ParquetMetaData>, ParquetError>> {
        async move {
            let metadata = self.inner.get_metadata(options).await?;
            let footer = metadata.file_metadata().key_value_metadata();
            match PageChecksums::from_footer(footer.map(Vec::as_slice)) {
                Ok(pages) => self.pages = pages.map(Arc::new),
                Err(reason) => return Err(self.corrupt(reason).await),
            }
            match &self.dictionary_keys {
                Some(keys) => dictionary_keys::hint(metadata, keys),
                None => Ok(metadata),
            }
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use datafusion::arrow::array::{RecordBatch, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::object_store::ObjectMeta;
    use datafusion::object_store::local::LocalFileSystem;
    use datafusion::parquet::arrow::ArrowWriter;
    use datafusion::parquet::arrow::arrow_reader::ArrowReaderMetadata;
    use infersight_store::{Store, StoreOptions};

    use super::*;
    use crate::dictionary_keys::{dictionary_type, mark};

    /// The type the Arrow schema of a file's metadata, as this factory's reader returns it,
    /// gives its one column `model`, with the file marked or not.
    async fn read_type(marked: bool) -> DataType {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn StorageBackend> =
            Arc::new(Store::open(StoreOptions::new(dir.path().join("data"))).unwrap());
        let path = dir.path().join("labels.parquet");
        let schema = Arc::new(Schema::new(vec![Field::new("model", DataType::Utf8, true)]));
        let models = StringArray::from_iter_values((0..50).map(|i| format!("model-{}", i % 3)));
        let batch = RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(models)]).unwrap();
        let mut writer =
            ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), schema, None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let factory = CheckedReaderFactory::new(
            Arc::new(LocalFileSystem::new()),
            store,
            Arc::new(HashMap::new()),
            datafusion::execution::runtime_env::RuntimeEnv::default()
                .cache_manager
                .get_file_metadata_cache(),
        );
        let mut file = PartitionedFile::new_from_meta(ObjectMeta {
            location: ObjectPath::from_absolute_path(&path).unwrap(),
            last_modified: chrono::DateTime::UNIX_EPOCH,
            size: std::fs::metadata(&path).unwrap().len(),
            e_tag: None,
            version: None,
        });
        if marked {
            mark(&mut file, &Arc::new(["model".to_string()].into()));
        }
        let mut reader = factory
            .create_reader(0, file, None, &ExecutionPlanMetricsSet::new())
            .unwrap();
        let metadata = reader.get_metadata(None).await.unwrap();
        let metadata = ArrowReaderMetadata::try_new(metadata, ArrowReaderOptions::new()).unwrap();
        metadata.schema().field(0).data_type().clone()
    }

    #[test]
    fn local_ranges_are_read_whole_or_fail_with_the_segment_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("segment.parquet");
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let ranges = [0..4, 9_000..10_000, 17..4_113, 5..5];
        let read = read_local(&path, &ranges).unwrap();
        for (range, got) in ranges.iter().zip(&read) {
            assert_eq!(
                got.as_ref(),
                &bytes[range.start as usize..range.end as usize]
            );
        }
        let past_end = 9_990..10_010;
        let past = read_local(&path, std::slice::from_ref(&past_end))
            .unwrap_err()
            .to_string();
        assert!(
            past.contains("9990..10010 run past its end (10000 bytes)"),
            "{past}"
        );
        // a range no file has, as damaged metadata could ask for: refused, nothing allocated
        let huge = 0..u64::MAX;
        let refused = read_local(&path, std::slice::from_ref(&huge))
            .unwrap_err()
            .to_string();
        assert!(refused.contains("run past its end"), "{refused}");
        let gone = dir.path().join("gone.parquet");
        let head = 0..4;
        let missing = read_local(&gone, std::slice::from_ref(&head))
            .unwrap_err()
            .to_string();
        assert!(missing.contains(&gone.display().to_string()), "{missing}");
    }

    #[tokio::test]
    async fn a_file_marked_for_dictionary_keys_reads_them_as_dictionaries() {
        assert_eq!(read_type(true).await, dictionary_type());
        assert_eq!(read_type(false).await, DataType::Utf8);
    }
}
