//! Raw text logs of a file (vLLM, SGLang, TGI, Triton, uvicorn, Python logging, …): one log row
//! per non-empty line, its time and level read from the start of the line; a line without a time
//! (a traceback's continuation) takes the time of the last line that had one, or the file's
//! modification time. The prefix is read by [`infersight_model::log_prefix`]; what the body says
//! is left to the pipeline's `parse` stage. vLLM's process tag (`(VllmWorker rank=0 pid=789) `)
//! becomes the `process.title`, `process.pid` and `rank` attributes.
//!
//! The time is read here, before the pipeline, and not in the `parse` stage: a row leaves ingest
//! with its `ts` (the store partitions by it, and the stage can be switched off), and a line
//! without a time takes the one of the line before it in this file, an order only the file
//! reader knows.
//!
//! Year-less times (vLLM `11-29 02:17:03`, glog `I1129 …`) take their year, for the first such
//! line of the file, from the first of: the year given (`FileOptions::year`); the first line of
//! the file's head that has a full date; the data around the file
//! (`FileOptions::time_context_ns`: the store's time range and the files read before); the
//! latest year that does not put it after the file's modification time. Every later line is
//! placed nearest to the line before it, so a log that runs past New Year moves on to the next
//! year. [`RawTimes`] says what was chosen and how many lines fall outside the data around them.

use std::io::{BufRead, Read};
use std::path::Path;

use infersight_model::LogRecord;
use infersight_model::log_prefix::{LinePrefix, YearAnchor, parse_log_prefix_near, process_tag};

use super::FILE_PATH_ATTR;
use super::input;
use super::raw_times::{CONTEXT_SLACK_NS, MAX_CACHED_TAGS, YearSource};
use super::reader::FileReader;

/// Lines of a file's head searched for a full date.
const HEAD_SCAN_LINES: usize = 10_000;
/// Bytes of a file's head searched for a full date.
const HEAD_SCAN_BYTES: u64 = 4 * 1024 * 1024;
impl FileReader<'_> {
    pub(super) fn raw_line(&mut self, raw: &[u8]) {
        self.summary.records_read += 1;
        let text = String::from_utf8_lossy(raw);
        let parsed = self.raw_prefix(&text);
        let ts = match parsed.ts_ns {
            Some(ts) => {
                self.last_ts_ns = Some(ts);
                self.note_raw_time(ts, parsed.year_inferred);
                ts
            }
            None => self.last_ts_ns.unwrap_or(self.mtime_ns),
        };
        let attrs = self.raw_attrs(&text);
        self.pending.logs.push(LogRecord {
            ts,
            severity: parsed.severity.map(str::to_string),
            service: self.options.service.clone(),
            worker: self.options.worker.clone(),
            body: Some(text.into_owned()),
            attrs,
            ..Default::default()
        });
        self.pending.records += 1;
    }

    /// The line's prefix, a year-less time placed by the anchor (found at the first one).
    fn raw_prefix(&mut self, text: &str) -> LinePrefix {
        let first_year_less = self.summary.raw_times.year_inferred_lines == 0;
        let current = self
            .raw
            .anchor
            .filter(|_| !(first_year_less && self.options.year.is_some()));
        let mut parsed =
            parse_log_prefix_near(text, current.map_or(YearAnchor::Year(2000), |a| a.0));
        let mut source = current.map(|a| a.1);
        if parsed.year_inferred && current.is_none() {
            let (anchor, first_source) = self.first_year_anchor();
            parsed = parse_log_prefix_near(text, anchor);
            source = Some(first_source);
        }
        if let Some(ts) = parsed.ts_ns {
            let source = match (parsed.year_inferred, source) {
                (true, Some(source)) => {
                    if first_year_less {
                        self.summary.raw_times.year_source = Some(source);
                    }
                    source
                }
                _ => YearSource::FileDates,
            };
            self.raw.anchor = Some((YearAnchor::near(ts), source));
        }
        parsed
    }

    /// Where the first year-less time of the file is placed (see the module doc).
    fn first_year_anchor(&self) -> (YearAnchor, YearSource) {
        if let Some(year) = self.options.year {
            return (YearAnchor::Year(year), YearSource::Given);
        }
        if let Some(ts) = first_dated_time(&self.path) {
            return (YearAnchor::near(ts), YearSource::FileDates);
        }
        if let Some((from_ns, to_ns)) = self.options.time_context_ns {
            let anchor = YearAnchor::Near {
                from_ns: from_ns.min(to_ns),
                to_ns: from_ns.max(to_ns),
            };
            return (anchor, YearSource::Context);
        }
        let now_ns = self.now.timestamp_nanos_opt().unwrap_or(i64::MAX);
        (
            YearAnchor::Before(self.mtime_ns.min(now_ns)),
            YearSource::FileModified,
        )
    }

    fn note_raw_time(&mut self, ts: i64, year_inferred: bool) {
        let times = &mut self.summary.raw_times;
        times.timed_lines += 1;
        times.year_inferred_lines += u64::from(year_inferred);
        times.range_ns = Some(match times.range_ns {
            Some((first, last)) => (first.min(ts), last.max(ts)),
            None => (ts, ts),
        });
        if let Some((from_ns, to_ns)) = self.options.time_context_ns
            && (ts < from_ns.saturating_sub(CONTEXT_SLACK_NS)
                || ts > to_ns.saturating_add(CONTEXT_SLACK_NS))
        {
            times.outside_context += 1;
        }
    }

    /// The file's attributes, with those of the line's process tag when it has one.
    fn raw_attrs(&mut self, text: &str) -> String {
        let Some(tag) = process_tag(text) else {
            return self.file_attrs.clone();
        };
        let key = format!("{}/{:?}/{:?}", tag.title, tag.pid, tag.rank);
        if let Some(attrs) = self.raw.tag_attrs.get(&key) {
            return attrs.clone();
        }
        let mut attrs = serde_json::Map::new();
        attrs.insert(FILE_PATH_ATTR.into(), self.path_display.clone().into());
        attrs.insert("process.title".into(), tag.title.into());
        if let Some(pid) = tag.pid {
            attrs.insert("process.pid".into(), pid.into());
        }
        if let Some(rank) = tag.rank {
            attrs.insert("rank".into(), rank.into());
        }
        let attrs = serde_json::Value::Object(attrs).to_string();
        if self.raw.tag_attrs.len() < MAX_CACHED_TAGS {
            self.raw.tag_attrs.insert(key, attrs.clone());
        }
        attrs
    }
}

/// The time of the first line with a full date in the head of the file, if any: it dates the
/// year-less lines around it.
fn first_dated_time(path: &Path) -> Option<i64> {
    let opened = input::open(path).ok()?;
    let mut head = opened.reader.take(HEAD_SCAN_BYTES);
    let mut line = Vec::new();
    for _ in 0..HEAD_SCAN_LINES {
        line.clear();
        if head.read_until(b'\n', &mut line).ok()? == 0 {
            return None;
        }
        let text = String::from_utf8_lossy(&line);
        let parsed = parse_log_prefix_near(&text, YearAnchor::Year(2000));
        if let Some(ts) = parsed.ts_ns
            && !parsed.year_inferred
        {
            return Some(ts);
        }
    }
    None
}
