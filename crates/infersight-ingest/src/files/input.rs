//! The first step of the file receiver: a file on disk → lines. Opens the file, takes its
//! modification time (the time of records that carry none), detects gzip by its magic bytes,
//! counts the bytes read from disk for the progress report, and reads lines with a hard cap. The
//! line loop that hands each line on is `workers::read_lines`; format detection reads through
//! here too, so this file names nothing else of the receiver.

use std::cell::Cell;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::rc::Rc;

use chrono::{DateTime, Utc};

/// An open file, ready to be read line by line.
pub(super) struct OpenedFile {
    /// The file's bytes, decompressed when it is gzip.
    pub(super) reader: Box<dyn BufRead>,
    /// Bytes read from disk so far (compressed bytes for a gzip file).
    pub(super) bytes_read: Rc<Cell<u64>>,
    /// The file's modification time, or now when it has none.
    pub(super) mtime_ns: i64,
}

/// Opens `path`, gzip-decoding it when it starts with the gzip magic bytes.
pub(super) fn open(path: &Path) -> std::io::Result<OpenedFile> {
    let file = File::open(path)?;
    let mtime_ns = file
        .metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| DateTime::<Utc>::from(t).timestamp_nanos_opt())
        .unwrap_or_else(infersight_model::time::now_ns);
    let bytes_read = Rc::new(Cell::new(0u64));
    let counting = CountingReader {
        inner: file,
        count: Rc::clone(&bytes_read),
    };
    let mut buffered = BufReader::with_capacity(256 * 1024, counting);
    let is_gzip = buffered.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    let reader: Box<dyn BufRead> = if is_gzip {
        let decoder = flate2::bufread::MultiGzDecoder::new(buffered);
        Box::new(BufReader::with_capacity(256 * 1024, decoder))
    } else {
        Box::new(buffered)
    };
    Ok(OpenedFile {
        reader,
        bytes_read,
        mtime_ns,
    })
}

/// Counts the bytes read from the file underneath any decompression.
struct CountingReader<R> {
    inner: R,
    count: Rc<Cell<u64>>,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LineRead {
    Eof,
    /// A line (without its `\n`) is in the buffer.
    Line,
    /// The line was longer than the cap; it was skipped and its length is given.
    TooLong(u64),
}

/// Reads the next line into `line` (without the newline), holding at most `max_bytes` of it: a
/// longer line is consumed chunk by chunk up to its newline and reported as `TooLong`.
pub(super) fn read_line_bounded(
    reader: &mut dyn BufRead,
    line: &mut Vec<u8>,
    max_bytes: usize,
) -> std::io::Result<LineRead> {
    line.clear();
    let mut length = 0u64;
    let mut too_long = false;
    let mut started = false;
    loop {
        let available = match reader.fill_buf() {
            Ok(available) => available,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(match (started, too_long) {
                (false, _) => LineRead::Eof,
                (true, true) => LineRead::TooLong(length),
                (true, false) => LineRead::Line,
            });
        }
        started = true;
        let newline = memchr::memchr(b'\n', available);
        let chunk = &available[..newline.unwrap_or(available.len())];
        length += chunk.len() as u64;
        if !too_long {
            if line.len() + chunk.len() > max_bytes {
                too_long = true;
                line.clear();
                line.shrink_to(64 * 1024);
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let consumed = chunk.len() + usize::from(newline.is_some());
        reader.consume(consumed);
        if newline.is_some() {
            return Ok(if too_long {
                LineRead::TooLong(length)
            } else {
                LineRead::Line
            });
        }
    }
}
