//! Segment bytes checked as the query engine reads them: the Parquet scans of `provider` read
//! through [`CheckedReaderFactory`], DataFusion's own reader wrapped so that every whole page it
//! fetches is compared with the checksums in the segment's footer
//! ([`infersight_store::page_crc`]). A page that does not match fails the statement with the
//! segment and the page named, and the store sets the segment aside
//! ([`StorageBackend::segment_corrupt`]), so the next statement answers from the rest.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::ParquetFileReaderFactory;
use datafusion::datasource::physical_plan::parquet::DefaultParquetFileReaderFactory;
use datafusion::object_store::ObjectStore;
use datafusion::object_store::path::Path as ObjectPath;
use datafusion::parquet::arrow::arrow_reader::ArrowReaderOptions;
use datafusion::parquet::arrow::async_reader::AsyncFileReader;
use datafusion::parquet::errors::ParquetError;
use datafusion::parquet::file::metadata::ParquetMetaData;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use futures::FutureExt;
use futures::future::BoxFuture;
use infersight_store::StorageBackend;
use infersight_store::page_crc::PageChecksums;

/// Readers of one scan's segment files, each checking the pages it fetches.
pub(crate) struct CheckedReaderFactory {
    inner: DefaultParquetFileReaderFactory,
    store: Arc<dyn StorageBackend>,
    /// Segment ids by the location the scan reads them at, to name what to set aside, and
    /// whether the segment is a local file (quarantined) rather than a bucket object (logged).
    segments: Arc<HashMap<ObjectPath, (u64, bool)>>,
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
        segments: Arc<HashMap<ObjectPath, (u64, bool)>>,
    ) -> Self {
        Self {
            inner: DefaultParquetFileReaderFactory::new(object_store),
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
        let segment = self.segments.get(&location).copied();
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
            pages: None,
            reported: false,
        }))
    }
}

struct CheckedReader {
    inner: Box<dyn AsyncFileReader + Send>,
    location: ObjectPath,
    segment: Option<(u64, bool)>,
    store: Arc<dyn StorageBackend>,
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
            if let Some((id, _)) = self.segment {
                let store = Arc::clone(&self.store);
                let told = reason.clone();
                let _ = tokio::task::spawn_blocking(move || store.segment_corrupt(id, told)).await;
            }
        }
        let after = match self.segment {
            Some((_, true)) => {
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

impl AsyncFileReader for CheckedReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, Result<Bytes, ParquetError>> {
        async move {
            let offset = range.start;
            let bytes = self.inner.get_bytes(range).await?;
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
            let fetched = self.inner.get_byte_ranges(ranges).await?;
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
            Ok(metadata)
        }
        .boxed()
    }
}
