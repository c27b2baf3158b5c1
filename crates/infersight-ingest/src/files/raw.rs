//! Raw text logs of a file (vLLM, SGLang, TGI, Triton, uvicorn, Python logging, …): one log row
//! per non-empty line, its time and level read from the start of the line; a line without a time
//! (a traceback's continuation) takes the time of the last line that had one, or the file's
//! modification time. The prefix is read by [`infersight_model::log_prefix`]; what the body says
//! is left to the pipeline's `parse` stage.
//!
//! The time is read here, before the pipeline, and not in the `parse` stage: a row leaves ingest
//! with its `ts` (the store partitions by it, and the stage can be switched off), and a line
//! without a time takes the one of the line before it in this file, an order only the file
//! reader knows.

use infersight_model::LogRecord;
use infersight_model::log_prefix::parse_log_prefix;

use super::reader::FileReader;

impl FileReader<'_> {
    pub(super) fn raw_line(&mut self, raw: &[u8]) {
        self.summary.records_read += 1;
        let text = String::from_utf8_lossy(raw);
        let parsed = parse_log_prefix(&text, self.now);
        let ts = match parsed.ts_ns {
            Some(ts) => {
                self.last_ts_ns = Some(ts);
                ts
            }
            None => self.last_ts_ns.unwrap_or(self.mtime_ns),
        };
        self.pending.logs.push(LogRecord {
            ts,
            severity: parsed.severity.map(str::to_string),
            service: self.options.service.clone(),
            worker: self.options.worker.clone(),
            body: Some(text.into_owned()),
            attrs: self.file_attrs.clone(),
            ..Default::default()
        });
        self.pending.records += 1;
    }
}
