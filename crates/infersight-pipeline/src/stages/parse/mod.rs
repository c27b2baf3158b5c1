//! The `parse` stage: the first stage after decoding. It recognizes what a log body is (prompt,
//! response, engine statistics, access line, …), sets `log_class`, lifts key=value pairs and
//! embedded JSON into `attrs`, splits mixed `[PROMPT] … [RESPONSE] … [LOGITS] {…}` lines (prompt and
//! response redacted on the spot), turns vLLM / SGLang / TGI statistics lines into rows of the
//! `metrics` table under canonical names, and turns TGI / SGLang request-completion lines into
//! rows of the `requests` table (unless the line belongs to a traced span, whose span is the row).
//!
//! `lines` and `requests` hold the pure line parsers (usable without Arrow); `stage` applies them
//! to batches.

mod config;
mod lines;
mod requests;
mod stage;

pub use config::ParseConfig;
pub use lines::{LogClass, Logits, MetricSample, ParsedLine, parse_line};
pub use requests::{LogRequest, LogRowContext, REQUEST_SOURCE_KEY, parse_request_line};
pub use stage::ParseStage;

#[cfg(test)]
mod tests;
