//! A segment page corrupted while the store runs (after its checks at open): a statement that
//! reads the page fails naming the segment, the store quarantines the segment, and the next
//! statement answers from the rest. The corrupted column is stored uncompressed, so without the
//! page checksums the damaged float would be summed silently.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::Arc;

use datafusion::parquet::file::reader::{FileReader, SerializedFileReader};
use infersight_model::Table;
use infersight_model::time::TimeRange;
use infersight_query::QueryEngine;
use infersight_store::page_crc::PageChecksums;
use infersight_store::{SegmentMeta, StorageBackend, Store};

use crate::bucket::{ingest, simulated_exports, store_options};
use crate::support::scalar;

/// The byte range of column `column`'s chunk in row group 0 of `segment`, and the segment's
/// page checksums.
fn chunk_of(segment: &SegmentMeta, column: &str) -> (std::ops::Range<u64>, PageChecksums) {
    let reader = SerializedFileReader::new(File::open(&segment.path).unwrap()).unwrap();
    let metadata = reader.metadata();
    let footer = metadata.file_metadata().key_value_metadata();
    let pages = PageChecksums::from_footer(footer.map(Vec::as_slice))
        .unwrap()
        .expect("segments are written with page checksums");
    let chunk = (metadata.row_group(0).columns().iter())
        .find(|chunk| chunk.column_path().string() == column)
        .unwrap();
    let (start, len) = chunk.byte_range();
    (start..start + len, pages)
}

/// Flips a bit of the high byte of the last float of `segment`'s `e2e_ms` chunk in row group 0:
/// another value, still a valid float.
fn damage(segment: &SegmentMeta) {
    let (chunk, pages) = chunk_of(segment, "e2e_ms");
    let at = chunk.end - 1;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&segment.path)
        .unwrap();
    let mut byte = [0u8];
    file.seek(SeekFrom::Start(at)).unwrap();
    file.read_exact(&mut byte).unwrap();
    file.seek(SeekFrom::Start(at)).unwrap();
    file.write_all(&[byte[0] ^ 0x40]).unwrap();
    drop(file);
    let damaged = std::fs::read(&segment.path).unwrap();
    assert!(
        pages.verify(0, &damaged).is_err(),
        "the damage is in a page"
    );
}

/// The statement's error names `segment`, the checksum and the quarantine.
async fn fails_on(engine: &QueryEngine, sql: &str, segment: &SegmentMeta) {
    let err = match engine.sql(sql).await {
        Ok(output) => panic!(
            "{sql} answered {} rows from a corrupt segment",
            output.row_count()
        ),
        Err(err) => err.to_string(),
    };
    let name = segment
        .path
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        err.contains(&name) && err.contains("does not match its checksum"),
        "{sql}: {err}"
    );
    assert!(err.contains("quarantined"), "{sql}: {err}");
    assert!(!segment.path.exists(), "the segment left its place");
}

#[tokio::test]
async fn a_page_corrupted_after_open_fails_its_statement_and_is_set_aside() {
    let dir = tempfile::tempdir().unwrap();
    ingest(
        store_options(dir.path(), None, "local"),
        &simulated_exports(),
    );
    let store = Arc::new(Store::open(store_options(dir.path(), None, "local")).unwrap());
    let engine = QueryEngine::new(Arc::clone(&store) as Arc<dyn StorageBackend>);
    let total: u64 = scalar(&engine, "SELECT count(*) FROM requests")
        .await
        .parse()
        .unwrap();

    let snapshot = store.snapshot(Table::Requests, TimeRange::ALL).unwrap();
    let mut by_rows = snapshot.segments.clone();
    by_rows.sort_by_key(|segment| std::cmp::Reverse(segment.rows));
    assert!(by_rows.len() > 2, "the rest must still answer");

    // a GROUP BY on a string key (its scan retyped to views, `group_views`), then a plain sum
    damage(&by_rows[0]);
    let grouped = "SELECT model, round(sum(e2e_ms), 3) FROM requests GROUP BY model";
    fails_on(&engine, grouped, &by_rows[0]).await;
    assert_eq!(store.stats().quarantine.segments, 1);
    damage(&by_rows[1]);
    fails_on(
        &engine,
        "SELECT round(sum(e2e_ms), 3) FROM requests",
        &by_rows[1],
    )
    .await;
    assert_eq!(store.stats().quarantine.segments, 2);
    assert!(dir.path().join("quarantine").exists());

    // the next statement reads the rest: every row but the two segments'
    let after = scalar(&engine, "SELECT count(*) FROM requests").await;
    assert_eq!(
        after.parse::<u64>().unwrap(),
        total - by_rows[0].rows - by_rows[1].rows
    );
    // and a segment left sound reads as before
    let sound = &by_rows[2];
    let (chunk, pages) = chunk_of(sound, "e2e_ms");
    let bytes = std::fs::read(&sound.path).unwrap();
    let range = chunk.start as usize..chunk.end as usize;
    assert!(pages.verify(chunk.start, &bytes[range]).unwrap() >= 1);
}
