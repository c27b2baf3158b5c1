//! Page checksums of segments, between the segment writer and every reader of segment bytes.
//! arrow-rs writes no Parquet page CRCs, so the writer's page store ([`RecordingPageStores`])
//! takes a crc32 of every page (header ‖ data) as it is spliced into the file, in file order,
//! and the footer keeps them under [`PAGE_CRC_KEY`]; a reader that fetched a byte range checks
//! each whole page in it ([`PageChecksums::verify`]: the query engine's segment reader), so a
//! page corrupted after the file was written is an error, never a wrong answer.

use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use parquet::arrow::arrow_writer::{
    InMemoryPageStore, PageKey, PageStore, PageStoreArgs, PageStoreFactory,
};
use parquet::file::metadata::{KeyValue, RowGroupMetaData};

/// The footer key that holds a segment's page checksums: `v1:` then, per page in file order,
/// its length and crc32 as 16 hex digits.
pub const PAGE_CRC_KEY: &str = "infersight.page_crc32";
const VERSION_PREFIX: &str = "v1:";
/// Where the first page starts: after the leading `PAR1`.
const FIRST_PAGE_OFFSET: u64 = 4;

/// Pages as the writer spliced them: each page reaches the file as two blobs taken from its
/// column's page store, its header and then its data.
#[derive(Debug, Default)]
struct Recorded {
    pages: Vec<(u32, u32)>,
    header: Option<(usize, crc32fast::Hasher)>,
    /// A blob that did not fit (over 4 GiB): the table is not written.
    unusable: bool,
}

impl Recorded {
    fn blob(&mut self, blob: &[u8]) {
        match self.header.take() {
            None => {
                let mut hasher = crc32fast::Hasher::new();
                hasher.update(blob);
                self.header = Some((blob.len(), hasher));
            }
            Some((header_len, mut hasher)) => {
                hasher.update(blob);
                match u32::try_from(header_len + blob.len()) {
                    Ok(len) => self.pages.push((len, hasher.finalize())),
                    Err(_) => self.unusable = true,
                }
            }
        }
    }
}

/// The page stores of one segment writer: in memory, as arrow-rs's own, recording each page's
/// length and crc32 as the writer takes it back to write it.
#[derive(Debug, Clone, Default)]
pub(crate) struct RecordingPageStores {
    recorded: Arc<Mutex<Recorded>>,
}

impl PageStoreFactory for RecordingPageStores {
    fn create(&self, _args: &PageStoreArgs<'_>) -> parquet::errors::Result<Box<dyn PageStore>> {
        Ok(Box::new(RecordingPageStore {
            inner: InMemoryPageStore::default(),
            recorded: Arc::clone(&self.recorded),
        }))
    }
}

impl RecordingPageStores {
    /// The footer entry of the pages written so far (every row group flushed), or `None` where
    /// the recorded pages do not add up to the column chunks of `row_groups` (a page layout this
    /// writer does not know: the segment is then written without page checksums).
    pub(crate) fn footer_entry(&self, row_groups: &[RowGroupMetaData]) -> Option<KeyValue> {
        let recorded = self.recorded.lock().unwrap_or_else(PoisonError::into_inner);
        let chunks: Vec<Range<u64>> = row_groups
            .iter()
            .flat_map(|group| group.columns())
            .map(|column| {
                let (start, len) = column.byte_range();
                start..start + len
            })
            .collect();
        let contiguous = chunks.first().is_none_or(|c| c.start == FIRST_PAGE_OFFSET)
            && chunks.windows(2).all(|pair| pair[0].end == pair[1].start);
        let pages_len: u64 = recorded.pages.iter().map(|(len, _)| u64::from(*len)).sum();
        let chunks_len: u64 = chunks.iter().map(|c| c.end - c.start).sum();
        if recorded.unusable || recorded.header.is_some() || !contiguous || pages_len != chunks_len
        {
            tracing::warn!(
                pages = recorded.pages.len(),
                pages_len,
                chunks_len,
                "segment pages do not add up to its column chunks; written without page checksums"
            );
            return None;
        }
        let mut value = String::with_capacity(VERSION_PREFIX.len() + 16 * recorded.pages.len());
        value.push_str(VERSION_PREFIX);
        for (len, crc) in &recorded.pages {
            use std::fmt::Write as _;
            let _ = write!(value, "{len:08x}{crc:08x}");
        }
        Some(KeyValue::new(PAGE_CRC_KEY.to_string(), value))
    }
}

struct RecordingPageStore {
    inner: InMemoryPageStore,
    recorded: Arc<Mutex<Recorded>>,
}

impl PageStore for RecordingPageStore {
    fn put(&mut self, value: Bytes) -> parquet::errors::Result<PageKey> {
        self.inner.put(value)
    }

    fn take(&mut self, key: PageKey) -> parquet::errors::Result<Bytes> {
        let blob = self.inner.take(key)?;
        self.recorded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .blob(&blob);
        Ok(blob)
    }

    fn memory_size(&self) -> usize {
        self.inner.memory_size()
    }
}

/// A segment's page checksums, read from its footer: every page's byte range and crc32.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageChecksums {
    /// Page start offsets, ascending; page `i` ends where `i + 1` starts (the last at `end`).
    starts: Vec<u64>,
    end: u64,
    crcs: Vec<u32>,
}

/// A page whose bytes do not match the checksum the writer recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the page at bytes {}..{} does not match its checksum (crc32 {actual:08x}, written {expected:08x})", .page.start, .page.end)]
pub struct PageMismatch {
    pub page: Range<u64>,
    pub expected: u32,
    pub actual: u32,
}

impl PageChecksums {
    /// The checksums in a footer's key-value metadata: `Ok(None)` for a segment written without
    /// them (before they existed), an error for an entry that does not parse.
    pub fn from_footer(key_values: Option<&[KeyValue]>) -> Result<Option<Self>, String> {
        let Some(value) = key_values
            .unwrap_or_default()
            .iter()
            .find(|kv| kv.key == PAGE_CRC_KEY)
            .and_then(|kv| kv.value.as_deref())
        else {
            return Ok(None);
        };
        let digits = value
            .strip_prefix(VERSION_PREFIX)
            .ok_or_else(|| format!("{PAGE_CRC_KEY}: unknown version (not {VERSION_PREFIX})"))?;
        if digits.len() % 16 != 0 || !digits.is_ascii() {
            return Err(format!(
                "{PAGE_CRC_KEY}: {} characters, not 16 hex digits per page",
                digits.len()
            ));
        }
        let count = digits.len() / 16;
        let (mut starts, mut crcs) = (Vec::with_capacity(count), Vec::with_capacity(count));
        let mut at = FIRST_PAGE_OFFSET;
        for page in 0..count {
            let hex = |from: usize| {
                u32::from_str_radix(&digits[from..from + 8], 16)
                    .map_err(|err| format!("{PAGE_CRC_KEY}: page {page}: {err}"))
            };
            let (len, crc) = (hex(page * 16)?, hex(page * 16 + 8)?);
            starts.push(at);
            crcs.push(crc);
            at += u64::from(len);
        }
        Ok(Some(Self {
            starts,
            end: at,
            crcs,
        }))
    }

    /// How many pages the segment has checksums for.
    pub fn pages(&self) -> usize {
        self.crcs.len()
    }

    fn page(&self, index: usize) -> Range<u64> {
        let end = self.starts.get(index + 1).copied().unwrap_or(self.end);
        self.starts[index]..end
    }

    /// Checks every whole page inside `bytes`, read from the file at `offset`; pages the range
    /// only partly covers (and bytes outside the pages: footer, page indexes) are not judged.
    /// Answers how many pages were checked.
    pub fn verify(&self, offset: u64, bytes: &[u8]) -> Result<usize, PageMismatch> {
        let end = offset + bytes.len() as u64;
        let first = self.starts.partition_point(|start| *start < offset);
        let mut checked = 0;
        for index in first..self.crcs.len() {
            let page = self.page(index);
            if page.end > end {
                break;
            }
            let from = usize::try_from(page.start - offset).unwrap_or(usize::MAX);
            let to = usize::try_from(page.end - offset).unwrap_or(usize::MAX);
            let actual = crc32fast::hash(&bytes[from..to]);
            if actual != self.crcs[index] {
                return Err(PageMismatch {
                    page,
                    expected: self.crcs[index],
                    actual,
                });
            }
            checked += 1;
        }
        Ok(checked)
    }
}

#[cfg(test)]
mod tests {
    use std::fs::File;

    use infersight_model::{RequestRecord, Table};
    use parquet::file::reader::{FileReader, SerializedFileReader};

    use super::*;
    use crate::segment::{SegmentFormat, write_segment};

    /// A requests segment of `rows` rows in row groups of 3,000, with dictionary and plain
    /// columns, zstd and uncompressed ones; the file's bytes and its page checksums.
    fn segment(rows: usize, seed: u64) -> (Vec<u8>, PageChecksums, SerializedFileReader<File>) {
        let mut state = seed | 1;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let records: Vec<RequestRecord> = (0..rows)
            .map(|i| RequestRecord {
                ts: i as i64 * 1_000,
                request_id: Some(format!("req-{:x}", next())),
                model: Some(format!("model-{}", next() % 3)),
                e2e_ms: Some((next() % 10_000) as f64 / 7.0),
                attrs: format!("{{\"n\":{}}}", next() % 1000),
                ..Default::default()
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let format = SegmentFormat {
            zstd_level: 1,
            row_group_rows: 3_000,
        };
        let batch = RequestRecord::to_batch(&records);
        let meta = write_segment(dir.path(), Table::Requests, 0, 1, &[batch], format).unwrap();
        let bytes = std::fs::read(&meta.path).unwrap();
        let reader = SerializedFileReader::new(File::open(&meta.path).unwrap()).unwrap();
        let footer = reader.metadata().file_metadata().key_value_metadata();
        let pages = PageChecksums::from_footer(footer.map(Vec::as_slice))
            .unwrap()
            .expect("the segment has page checksums");
        (bytes, pages, reader)
    }

    #[test]
    fn every_page_of_a_segment_matches_the_checksum_in_its_footer() {
        for (rows, seed) in [(1, 3), (2_999, 5), (10_000, 7)] {
            let (bytes, pages, reader) = segment(rows, seed);
            let metadata = reader.metadata();
            let chunks: Vec<(u64, u64)> = (metadata.row_groups().iter())
                .flat_map(|group| group.columns().iter().map(|c| c.byte_range()))
                .collect();
            assert_eq!(metadata.num_row_groups(), rows.div_ceil(3_000));
            // at least one page per column chunk, and they cover the chunks exactly
            assert!(pages.pages() >= chunks.len(), "{} pages", pages.pages());
            let last = chunks.last().unwrap();
            assert_eq!(pages.end, last.0 + last.1);
            // the whole file: every page checked; each chunk alone: its pages
            assert_eq!(pages.verify(0, &bytes), Ok(pages.pages()));
            let mut checked = 0;
            for (start, len) in &chunks {
                let range = *start as usize..(*start + *len) as usize;
                let n = pages.verify(*start, &bytes[range]).unwrap();
                assert!(n >= 1);
                checked += n;
            }
            assert_eq!(checked, pages.pages());
        }
    }

    #[test]
    fn a_changed_byte_is_found_in_its_page_and_nowhere_else() {
        let (bytes, pages, _) = segment(10_000, 11);
        let mut state = 0x2545_F491_4F6C_DD1D_u64;
        for _ in 0..20 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let at = 4 + state % (pages.end - 4);
            let mut damaged = bytes.clone();
            damaged[at as usize] ^= 0x10;
            let page = pages.page(pages.starts.partition_point(|s| *s <= at) - 1);
            assert!(page.contains(&at));
            let err = pages.verify(0, &damaged).unwrap_err();
            assert_eq!(err.page, page, "byte {at}");
            assert!(err.to_string().contains("does not match its checksum"));
            // a read of only the page itself finds it; one that stops short of its end does not
            let own = page.start as usize..page.end as usize;
            assert!(pages.verify(page.start, &damaged[own.clone()]).is_err());
            let short = own.start..own.end - 1;
            assert_eq!(pages.verify(page.start, &damaged[short]), Ok(0));
            // the pages after it are sound
            let after = page.end as usize..pages.end as usize;
            assert!(pages.verify(page.end, &damaged[after]).is_ok());
        }
    }

    #[test]
    fn footer_entries_that_do_not_parse_are_errors_and_old_segments_have_none() {
        let entry = |value: &str| vec![KeyValue::new(PAGE_CRC_KEY.to_string(), value.to_string())];
        assert_eq!(PageChecksums::from_footer(None), Ok(None));
        let other = vec![KeyValue::new("k".to_string(), "v".to_string())];
        assert_eq!(PageChecksums::from_footer(Some(&other)), Ok(None));
        for bad in [
            "v2:0000000100000002",
            "v1:00000001000000",
            "v1:0000000g00000002",
        ] {
            let err = PageChecksums::from_footer(Some(&entry(bad))).unwrap_err();
            assert!(err.starts_with(PAGE_CRC_KEY), "{bad}: {err}");
        }
        let two = PageChecksums::from_footer(Some(&entry("v1:0000000a0000000100000005ffffffff")))
            .unwrap()
            .unwrap();
        assert_eq!((two.pages(), two.page(0), two.page(1)), (2, 4..14, 14..19));
    }
}
