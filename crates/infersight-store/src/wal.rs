//! Write-ahead log: the first stop of every append. Each `append` call becomes ONE framed record
//! (all its batches as Arrow IPC streams), so replay after a crash is all-or-nothing per append.
//! Records are replayed into the memtable at open; files are deleted once a flush has moved every
//! record they hold into Parquet segments (their sequence numbers are `<=` the catalog's
//! `flushed_wal_seq`).
//!
//! Frame layout (little endian):
//!
//! ```text
//! magic u32 "ISWL" | payload_len u32 | crc32(seq ‖ payload) u32 | seq u64 | payload
//! payload = entry_count u32, then per entry: table code u8 | ipc_len u64 | Arrow IPC stream
//! ```
//!
//! Files are named `<first seq, 20 digits>.wal`, so sorting names sorts records.

use std::fs::{File, OpenOptions};
use std::io::{Cursor, Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use infersight_model::{Table, TableBatch};

use crate::fsutil::{remove_file_if_exists, sync_dir};
use crate::types::StoreError;

/// "ISWL" read as a little-endian u32.
pub(crate) const MAGIC: u32 = u32::from_le_bytes(*b"ISWL");
/// magic + payload length + crc + seq.
pub(crate) const HEADER_LEN: usize = 4 + 4 + 4 + 8;
const WAL_EXTENSION: &str = "wal";

/// Encodes the batches of one append into a frame whose header is still blank; the header is
/// filled by [`seal_frame`] once the record has its sequence number. Encoding happens outside the
/// WAL lock so concurrent appenders only serialize on the write itself.
#[cfg(test)]
pub(crate) fn encode_frame(batches: &[TableBatch]) -> Result<Vec<u8>, StoreError> {
    let mut frame = Vec::new();
    encode_frame_into(batches, &mut frame)?;
    Ok(frame)
}

/// [`encode_frame`] into `frame` (cleared first), so an appender can reuse one buffer: a fresh
/// multi-megabyte buffer per append, grown by doubling, made the kernel zero new pages for every
/// record (a tenth of ingest CPU).
pub(crate) fn encode_frame_into(
    batches: &[TableBatch],
    frame: &mut Vec<u8>,
) -> Result<(), StoreError> {
    frame.clear();
    // IPC adds little to the arrays' own size; reserving it up front avoids growing by doubling
    let estimate: usize = batches
        .iter()
        .map(|b| b.batch.get_array_memory_size() + 4096)
        .sum();
    frame.reserve(HEADER_LEN + 4 + estimate);
    frame.resize(HEADER_LEN, 0);
    let count = u32::try_from(batches.len()).map_err(|_| too_large("too many batches"))?;
    frame.extend_from_slice(&count.to_le_bytes());
    for table_batch in batches {
        frame.push(table_batch.table.code());
        let len_at = frame.len();
        frame.extend_from_slice(&0u64.to_le_bytes());
        let start = frame.len();
        let mut writer = StreamWriter::try_new(&mut *frame, table_batch.batch.schema_ref())?;
        writer.write(&table_batch.batch)?;
        writer.finish()?;
        drop(writer);
        let ipc_len = (frame.len() - start) as u64;
        frame[len_at..len_at + 8].copy_from_slice(&ipc_len.to_le_bytes());
    }
    Ok(())
}

fn too_large(what: &str) -> StoreError {
    StoreError::Io {
        path: PathBuf::from("wal"),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("append {what}")),
    }
}

/// Fills the header of a frame built by [`encode_frame`].
pub(crate) fn seal_frame(frame: &mut [u8], seq: u64) -> Result<(), StoreError> {
    debug_assert!(frame.len() >= HEADER_LEN);
    let payload_len =
        u32::try_from(frame.len() - HEADER_LEN).map_err(|_| too_large("is larger than 4 GiB"))?;
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&seq.to_le_bytes());
    hasher.update(&frame[HEADER_LEN..]);
    let crc = hasher.finalize();
    frame[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    frame[4..8].copy_from_slice(&payload_len.to_le_bytes());
    frame[8..12].copy_from_slice(&crc.to_le_bytes());
    frame[12..20].copy_from_slice(&seq.to_le_bytes());
    Ok(())
}

/// Decodes a record payload back into the batches of the original append.
pub(crate) fn decode_payload(payload: &[u8]) -> Result<Vec<TableBatch>, String> {
    let mut reader = ByteReader {
        data: payload,
        pos: 0,
    };
    let count = reader.u32()?;
    let mut out = Vec::new();
    for _ in 0..count {
        let code = reader.u8()?;
        let table = Table::from_code(code).ok_or_else(|| format!("unknown table code {code}"))?;
        let len = usize::try_from(reader.u64()?).map_err(|_| "entry length overflows")?;
        let bytes = reader.take(len)?;
        let stream = StreamReader::try_new(Cursor::new(bytes), None)
            .map_err(|e| format!("arrow ipc stream of `{table}`: {e}"))?;
        for batch in stream {
            let batch = batch.map_err(|e| format!("arrow ipc batch of `{table}`: {e}"))?;
            out.push(TableBatch { table, batch });
        }
    }
    if reader.pos != payload.len() {
        return Err(format!(
            "{} trailing bytes after the last entry",
            payload.len() - reader.pos
        ));
    }
    Ok(out)
}

struct ByteReader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> ByteReader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|end| *end <= self.data.len());
        let end = end.ok_or_else(|| format!("entry overruns the payload at byte {}", self.pos))?;
        let bytes = &self.data[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, String> {
        let mut buf = [0u8; 4];
        buf.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(buf))
    }

    fn u64(&mut self) -> Result<u64, String> {
        let mut buf = [0u8; 8];
        buf.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(buf))
    }
}

/// A part of a WAL file that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScanProblem {
    /// Byte offset of the first record that could not be read.
    pub offset: u64,
    /// Bytes skipped from `offset` to the next readable record (or to the end of the file).
    pub skipped: u64,
    pub reason: String,
    /// Whether the bytes from `offset` on are what a write cut short by a crash leaves (a short
    /// header or record, or zeros) with nothing readable after them: never acknowledged. Anything
    /// else (a checksum mismatch, garbage, a readable record after the damage) is corruption.
    pub is_tail: bool,
}

/// The readable records of one WAL file.
#[derive(Debug)]
pub(crate) struct WalScan {
    pub data: Vec<u8>,
    /// (seq, byte range of the payload in `data`), in file order.
    pub records: Vec<(u64, Range<usize>)>,
    /// Length of the prefix made of whole, valid records.
    pub valid_len: u64,
    /// Unreadable parts, in file order; reading resumes at the next valid frame after each.
    pub problems: Vec<ScanProblem>,
}

/// Reads every valid record of a WAL file. A frame that is short, has a bad magic or a CRC
/// mismatch is skipped up to the next offset where a whole valid frame starts, so one damaged
/// record does not take the records after it along.
pub(crate) fn scan_file(path: &Path) -> Result<WalScan, StoreError> {
    let data = std::fs::read(path).map_err(StoreError::io(path))?;
    let (records, valid_len, problems) = scan_bytes(&data);
    Ok(WalScan {
        data,
        records,
        valid_len,
        problems,
    })
}

type ScanResult = (Vec<(u64, Range<usize>)>, u64, Vec<ScanProblem>);

/// Why the frame at `pos` is unreadable, and whether that looks like a torn write.
struct FrameError {
    reason: String,
    torn: bool,
}

/// The frame starting at `pos`: (seq, payload range, end).
fn frame_at(data: &[u8], pos: usize) -> Result<(u64, Range<usize>, usize), FrameError> {
    let all_zero = |from: usize| data[from.min(data.len())..].iter().all(|b| *b == 0);
    let rest = &data[pos..];
    if rest.len() < HEADER_LEN {
        return Err(FrameError {
            reason: "short frame header".into(),
            torn: true,
        });
    }
    let field =
        |at: usize| u32::from_le_bytes([rest[at], rest[at + 1], rest[at + 2], rest[at + 3]]);
    let magic = field(0);
    let payload_len = field(4) as usize;
    let crc = field(8);
    let mut seq_bytes = [0u8; 8];
    seq_bytes.copy_from_slice(&rest[12..20]);
    let seq = u64::from_le_bytes(seq_bytes);
    if magic != MAGIC {
        // a torn write that the file system zero-filled looks like this; garbage does not
        return Err(FrameError {
            reason: format!("bad frame magic {magic:#010x}"),
            torn: all_zero(pos),
        });
    }
    let end = pos.saturating_add(HEADER_LEN).saturating_add(payload_len);
    if end > data.len() {
        return Err(FrameError {
            reason: "short record".into(),
            torn: true,
        });
    }
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&seq_bytes);
    hasher.update(&data[pos + HEADER_LEN..end]);
    if hasher.finalize() != crc {
        return Err(FrameError {
            reason: format!("crc mismatch in record {seq}"),
            torn: false,
        });
    }
    Ok((seq, pos + HEADER_LEN..end, end))
}

/// The first offset after `from` where a whole valid frame starts.
fn next_frame(data: &[u8], from: usize) -> Option<usize> {
    let magic = MAGIC.to_le_bytes();
    (from..data.len().saturating_sub(HEADER_LEN - 1))
        .filter(|at| data[*at..*at + 4] == magic)
        .find(|at| frame_at(data, *at).is_ok())
}

fn scan_bytes(data: &[u8]) -> ScanResult {
    let mut records = Vec::new();
    let mut problems = Vec::new();
    let mut pos = 0usize;
    while pos < data.len() {
        match frame_at(data, pos) {
            Ok((seq, payload, end)) => {
                records.push((seq, payload));
                pos = end;
            }
            Err(error) => {
                let next = next_frame(data, pos + 1);
                problems.push(ScanProblem {
                    offset: pos as u64,
                    skipped: (next.unwrap_or(data.len()) - pos) as u64,
                    reason: error.reason,
                    is_tail: next.is_none() && error.torn,
                });
                match next {
                    Some(next) => pos = next,
                    None => break,
                }
            }
        }
    }
    let valid_len = problems.first().map_or(data.len() as u64, |p| p.offset);
    (records, valid_len, problems)
}

/// The whole frame (header and payload) of a record whose payload is `payload` in its file.
pub(crate) fn frame_range(payload: &Range<usize>) -> Range<usize> {
    payload.start - HEADER_LEN..payload.end
}

/// The file name of a WAL file whose first record has `first_seq`.
pub(crate) fn file_name(first_seq: u64) -> String {
    format!("{first_seq:020}.{WAL_EXTENSION}")
}

/// WAL files of a directory as (first seq, path), sorted; files that do not look like WAL files
/// are left alone.
pub(crate) fn list_files(dir: &Path) -> Result<Vec<(u64, PathBuf)>, StoreError> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(StoreError::io(dir))? {
        let path = entry.map_err(StoreError::io(dir))?.path();
        if path.extension().and_then(|e| e.to_str()) != Some(WAL_EXTENSION) {
            continue;
        }
        match path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<u64>().ok())
        {
            Some(first_seq) => files.push((first_seq, path)),
            None => {
                tracing::warn!(path = %path.display(), "ignoring wal file with unexpected name")
            }
        }
    }
    files.sort();
    Ok(files)
}

/// A WAL file no longer written to, kept until a flush covers its last record.
#[derive(Debug, Clone)]
pub(crate) struct SealedWal {
    pub path: PathBuf,
    /// Highest sequence number in the file; 0 when it holds no records.
    pub last_seq: u64,
    pub bytes: u64,
}

/// The file appends currently go to, plus the sealed files before it. Owned by the store's WAL
/// mutex: writes are serialized, fsyncs are not (see `Store`'s group commit).
#[derive(Debug)]
pub(crate) struct WalWriter {
    dir: PathBuf,
    active: Arc<File>,
    active_path: PathBuf,
    active_bytes: u64,
    active_records: u64,
    sealed: Vec<SealedWal>,
    next_seq: u64,
    /// Set when a write could not be rolled back or an fsync failed: what is on disk is then
    /// unknown, so no further record may be acknowledged.
    poisoned: Option<String>,
}

impl WalWriter {
    /// Starts a new active file whose first record will be `next_seq`.
    pub(crate) fn create(
        dir: &Path,
        next_seq: u64,
        sealed: Vec<SealedWal>,
    ) -> Result<WalWriter, StoreError> {
        let (active, active_path) = create_file(dir, next_seq)?;
        Ok(WalWriter {
            dir: dir.to_path_buf(),
            active: Arc::new(active),
            active_path,
            active_bytes: 0,
            active_records: 0,
            sealed,
            next_seq,
            poisoned: None,
        })
    }

    /// Appends one frame built by [`encode_frame`] and returns its sequence number. On failure the
    /// file is truncated back so a half-written frame never sits in the middle of the log.
    pub(crate) fn write(&mut self, frame: &mut [u8]) -> Result<u64, StoreError> {
        if let Some(reason) = &self.poisoned {
            return Err(self.poisoned_error(reason));
        }
        let seq = self.next_seq;
        seal_frame(frame, seq)?;
        let mut file: &File = &self.active;
        if let Err(source) = file.write_all(frame) {
            let rollback = file
                .set_len(self.active_bytes)
                .and_then(|()| file.seek(SeekFrom::Start(self.active_bytes)).map(|_| ()));
            if let Err(err) = rollback {
                self.poisoned = Some(format!("could not roll back a failed write: {err}"));
            }
            return Err(StoreError::Io {
                path: self.active_path.clone(),
                source,
            });
        }
        self.next_seq += 1;
        self.active_bytes += frame.len() as u64;
        self.active_records += 1;
        Ok(seq)
    }

    fn poisoned_error(&self, reason: &str) -> StoreError {
        StoreError::Io {
            path: self.active_path.clone(),
            source: std::io::Error::other(format!("write-ahead log is unusable: {reason}")),
        }
    }

    pub(crate) fn poison(&mut self, reason: String) {
        self.poisoned.get_or_insert(reason);
    }

    /// Takes the next sequence number for an append that is not logged (a bulk load's, see
    /// `Store::append_unlogged`): no bytes are written, and replay never sees it.
    pub(crate) fn skip(&mut self) -> Result<u64, StoreError> {
        if let Some(reason) = &self.poisoned {
            return Err(self.poisoned_error(reason));
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        Ok(seq)
    }

    /// Sequence number of the last record written or skipped (0 before the first).
    pub(crate) fn last_written_seq(&self) -> u64 {
        self.next_seq - 1
    }

    /// The active file, to fsync outside the WAL lock.
    pub(crate) fn active_file(&self) -> (Arc<File>, PathBuf) {
        (self.active.clone(), self.active_path.clone())
    }

    /// Seals the active file and starts a new one, so appends continue while a flush moves the
    /// sealed records to Parquet. Returns whether the sealed file was fsynced. A file without
    /// records is kept as the active one.
    pub(crate) fn rotate(&mut self, fsync_sealed: bool) -> Result<bool, StoreError> {
        if let Some(reason) = &self.poisoned {
            return Err(self.poisoned_error(reason));
        }
        if self.active_records == 0 {
            return Ok(false);
        }
        if fsync_sealed && let Err(err) = self.active.sync_data() {
            self.poison(format!("fsync failed: {err}"));
            return Err(StoreError::Io {
                path: self.active_path.clone(),
                source: err,
            });
        }
        let (file, path) = create_file(&self.dir, self.next_seq)?;
        let old_path = std::mem::replace(&mut self.active_path, path);
        self.active = Arc::new(file);
        self.sealed.push(SealedWal {
            path: old_path,
            last_seq: self.next_seq - 1,
            bytes: self.active_bytes,
        });
        self.active_bytes = 0;
        self.active_records = 0;
        Ok(fsync_sealed)
    }

    /// Takes the sealed files whose records are all covered by a flush; the caller deletes them
    /// outside the lock.
    pub(crate) fn take_flushed(&mut self, flushed_wal_seq: u64) -> Vec<SealedWal> {
        let (done, keep) = std::mem::take(&mut self.sealed)
            .into_iter()
            .partition(|s| s.last_seq <= flushed_wal_seq);
        self.sealed = keep;
        done
    }

    /// Gives back sealed files whose deletion failed, so a later flush retries.
    pub(crate) fn restore_sealed(&mut self, files: Vec<SealedWal>) {
        self.sealed.extend(files);
        self.sealed.sort_by(|a, b| a.path.cmp(&b.path));
    }

    /// (files, bytes) of the whole log, active file included.
    pub(crate) fn size(&self) -> (u64, u64) {
        let sealed_bytes: u64 = self.sealed.iter().map(|s| s.bytes).sum();
        (
            self.sealed.len() as u64 + 1,
            sealed_bytes + self.active_bytes,
        )
    }

    /// Removes the active file when it holds no records (clean shutdown).
    pub(crate) fn remove_active_if_empty(&self) -> Result<(), StoreError> {
        if self.active_records == 0 {
            remove_file_if_exists(&self.active_path)?;
        }
        Ok(())
    }
}

fn create_file(dir: &Path, first_seq: u64) -> Result<(File, PathBuf), StoreError> {
    let path = dir.join(file_name(first_seq));
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .map_err(StoreError::io(&path))?;
    sync_dir(dir)?;
    Ok((file, path))
}

#[cfg(test)]
mod tests {
    use infersight_model::{LogRecord, RequestRecord};

    use super::*;

    fn frame(seq: u64) -> Vec<u8> {
        let batches = vec![
            TableBatch {
                table: Table::Requests,
                batch: RequestRecord::to_batch(&[RequestRecord {
                    ts: 7,
                    ..Default::default()
                }]),
            },
            TableBatch {
                table: Table::Logs,
                batch: LogRecord::to_batch(&vec![
                    LogRecord {
                        ts: 8,
                        ..Default::default()
                    };
                    3
                ]),
            },
        ];
        let mut frame = encode_frame(&batches).unwrap();
        seal_frame(&mut frame, seq).unwrap();
        frame
    }

    #[test]
    fn frames_round_trip() {
        let mut data = frame(1);
        data.extend(frame(2));
        let (records, valid_len, problems) = scan_bytes(&data);
        assert_eq!(problems, vec![]);
        assert_eq!(valid_len, data.len() as u64);
        assert_eq!(records.iter().map(|r| r.0).collect::<Vec<_>>(), vec![1, 2]);
        let batches = decode_payload(&data[records[1].1.clone()]).unwrap();
        assert_eq!(batches.len(), 2);
        assert_eq!(batches[0].table, Table::Requests);
        assert_eq!(batches[1].table, Table::Logs);
        assert_eq!(batches[1].batch.num_rows(), 3);
        assert_eq!(&data[frame_range(&records[1].1)], &frame(2)[..]);
    }

    #[test]
    fn torn_tail_and_middle_corruption_are_told_apart() {
        let one = frame(1);
        let mut data = one.clone();
        data.extend(frame(2));
        // torn: the second record is cut short
        let (records, valid_len, problems) = scan_bytes(&data[..data.len() - 5]);
        assert_eq!(records.len(), 1);
        assert_eq!(valid_len, one.len() as u64);
        assert!(problems[0].is_tail);
        // a flipped byte in the last record with nothing after it: the record is complete, so it
        // is damage, not a torn write
        let mut last_flipped = data.clone();
        let at = last_flipped.len() - 3;
        last_flipped[at] ^= 0xff;
        let (records, _, problems) = scan_bytes(&last_flipped);
        assert_eq!(records.len(), 1);
        assert!(!problems[0].is_tail);
        // a zero-filled tail (file extended but never written) is torn, not corrupt
        let mut zero_tail = one.clone();
        zero_tail.extend(vec![0u8; 64]);
        let (records, _, problems) = scan_bytes(&zero_tail);
        assert_eq!(records.len(), 1);
        assert!(problems[0].is_tail);
    }

    #[test]
    fn reading_resumes_after_a_damaged_record_in_the_middle() {
        let frames: Vec<Vec<u8>> = (1..=4).map(frame).collect();
        let starts: Vec<usize> = frames
            .iter()
            .scan(0, |at, f| {
                let start = *at;
                *at += f.len();
                Some(start)
            })
            .collect();
        let data: Vec<u8> = frames.concat();
        // a flipped payload byte in record 2, and a garbled header of record 3
        for (damaged, at) in [
            (vec![2], starts[1] + HEADER_LEN + 2),
            (vec![3], starts[2] + 5),
        ] {
            let mut bad = data.clone();
            bad[at] ^= 0x5a;
            let (records, valid_len, problems) = scan_bytes(&bad);
            let seqs: Vec<u64> = records.iter().map(|r| r.0).collect();
            let expected: Vec<u64> = (1..=4).filter(|s| !damaged.contains(s)).collect();
            assert_eq!(seqs, expected, "damage at byte {at}");
            assert_eq!(problems.len(), 1);
            let problem = &problems[0];
            assert!(!problem.is_tail);
            let bad_index = damaged[0] as usize - 1;
            assert_eq!(problem.offset, starts[bad_index] as u64);
            assert_eq!(problem.skipped, frames[bad_index].len() as u64);
            assert_eq!(valid_len, starts[bad_index] as u64);
        }
    }

    #[test]
    fn decode_rejects_garbage() {
        assert!(decode_payload(&[1, 0, 0, 0, 42]).is_err());
        assert!(decode_payload(&[1, 0, 0, 0, 0, 200, 0, 0, 0, 0, 0, 0, 0]).is_err());
        assert!(decode_payload(&[0, 0, 0, 0, 9]).is_err());
    }
}
