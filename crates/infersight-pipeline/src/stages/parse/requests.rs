//! Request rows from engine request-log lines: the `parse` stage's third output, next to the
//! `logs` rows it rewrites and the `metrics` samples of statistics lines. A fleet that exports no
//! traces still logs one line per finished request — TGI's `generate{… total_time=…}: … Success`
//! span line, SGLang's `--log-requests` `Finish: obj=…, out={…}` line (or the same as a JSON
//! object) — and each such line becomes one row of the `requests` table, so the SLIs, detectors
//! and localization work on log-only deployments too.
//!
//! The line is written when the request completes, so the row's `ts` (the request's start, as
//! for span rows) is the log record's `ts` minus the request's e2e latency; a line whose e2e
//! cannot be read gives no row. Only what the engine printed is stored: TGI prints no TTFT or
//! prefill, and those stay NULL. The phases are then completed and checked by
//! [`complete_breakdown`] like a span's, with a mismatch flagged in `attrs` under
//! [`BREAKDOWN_MISMATCH_KEY`], never fixed.
//!
//! Lines of a log record that carries a `span_id` are skipped by the stage (see `stage.rs`):
//! such a line is correlated with a traced span, the span itself becomes the request row, and a
//! second row from its log line would count the request twice.
//!
//! SGLang prints the request's prompt and output in the same line (`text='…'`). One small
//! scanner reads Python repr (`'key': value`, `key=value`), JSON (`"key": value`) and TGI's Rust
//! Debug structs. It walks the line's own structure — `obj=…, out=…`, then `out`'s `meta_info`
//! (or `out` itself, in older versions) — and skips strings and nested values whole, so text that
//! spells `'e2e_latency': 99` or even `'meta_info': {…}` is never taken for a field (searching
//! for the last `'meta_info': {` would be, when a line is cut off before the real one). A value
//! cut off by the end of a truncated line is never read: only values followed by `,` or a
//! closing bracket count, and a line cut before `out=` gives no row. Nothing of the text is
//! copied into the row.

use std::borrow::Cow;

use infersight_model::RequestRecord;
use infersight_model::breakdown::{BreakdownCheck, complete_breakdown};
use infersight_model::normalize::BREAKDOWN_MISMATCH_KEY;
use infersight_model::time::duration_text_seconds;
use serde_json::{Map, Value};

/// Key in a log-derived request row's `attrs` saying where the row came from (value `"log"`).
pub const REQUEST_SOURCE_KEY: &str = "infersight.request_source";

/// An e2e latency longer than a day is a corrupt number, not a request: its row would land in a
/// store partition far from the log line it came from.
const MAX_E2E_SECONDS: f64 = 86_400.0;

/// Longer strings are not ids or finish reasons (a truncated text), and are not stored.
const MAX_LABEL_BYTES: usize = 256;

/// Same tolerance as `infersight_model::breakdown` (engines stamp phases from different clocks).
const RELATIVE_TOLERANCE: f64 = 0.05;
const ABSOLUTE_TOLERANCE_MS: f64 = 1.0;

/// TGI handlers whose span carries the request timings (`#[instrument(fields(total_time, …))]`).
const TGI_SPANS: &[&str] = &[
    "generate",
    "generate_stream",
    "chat_completions",
    "completions",
];

/// What one request-completion line says about its request, before the log row's context.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LogRequest {
    /// `tgi` or `sglang`.
    pub runtime: &'static str,
    pub request_id: Option<String>,
    /// Always present: a line without a readable e2e is no request row.
    pub e2e_ms: f64,
    pub queue_ms: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub cached_tokens: Option<i64>,
    pub finish_reason: Option<String>,
    pub max_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    /// Engine-specific numbers without a column (`tgi.inference_ms`, …), for `attrs`.
    pub extras: Map<String, Value>,
}

/// The columns of the log row a request line came from.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogRowContext<'a> {
    /// The log record's time: when the engine wrote the line, i.e. when the request finished.
    pub ts_ns: i64,
    pub service: Option<&'a str>,
    pub worker: Option<&'a str>,
    pub trace_id: Option<&'a str>,
    /// Used when the line itself names no request id.
    pub request_id: Option<&'a str>,
}

/// The request a TGI or SGLang request-completion line describes, or `None` for any other line.
pub fn parse_request_line(body: &str) -> Option<LogRequest> {
    // Cheap gates first: this runs on every log body.
    if body.contains("total_time=")
        && let Some(request) = parse_tgi_request(body)
    {
        return Some(request);
    }
    if body.contains(SGLANG_FINISH) || body.contains("request.finished") {
        return parse_sglang_finish(body);
    }
    None
}

impl LogRequest {
    /// The `requests` row, and whether its phases contradict each other (the reason is then in
    /// `attrs`). `None` when the start time falls outside the representable range.
    pub fn into_record(self, row: &LogRowContext<'_>) -> Option<(RequestRecord, bool)> {
        debug_assert!(self.e2e_ms.is_finite() && self.e2e_ms >= 0.0);
        // Bounded by MAX_E2E_SECONDS, so the cast cannot saturate.
        let e2e_ns = (self.e2e_ms * 1e6).round() as i64;
        let ts = row.ts_ns.checked_sub(e2e_ns)?;
        let mut record = RequestRecord {
            ts,
            trace_id: row.trace_id.map(str::to_string),
            request_id: self
                .request_id
                .or_else(|| row.request_id.map(str::to_string)),
            service: row.service.map(str::to_string),
            runtime: Some(self.runtime.to_string()),
            worker: row.worker.map(str::to_string),
            input_tokens: self.input_tokens,
            cached_tokens: self.cached_tokens,
            output_tokens: self.output_tokens,
            queue_ms: self.queue_ms,
            ttft_ms: self.ttft_ms,
            tpot_ms: self.tpot_ms,
            e2e_ms: Some(self.e2e_ms),
            finish_reason: self.finish_reason,
            temperature: self.temperature,
            top_p: self.top_p,
            max_tokens: self.max_tokens,
            ..Default::default()
        };
        let mut attrs = Map::new();
        attrs.insert(REQUEST_SOURCE_KEY.into(), Value::String("log".into()));
        attrs.extend(self.extras);
        let mismatch = check_breakdown(&mut record);
        let mismatched = mismatch.is_some();
        if let Some(reason) = mismatch {
            attrs.insert(BREAKDOWN_MISMATCH_KEY.into(), Value::String(reason));
        }
        record.attrs = Value::Object(attrs).to_string();
        Some((record, mismatched))
    }
}

/// [`complete_breakdown`] plus the one check it cannot make without a TTFT, which log lines
/// often lack: the queue is part of e2e, so it cannot be longer. On a mismatch the record keeps
/// the phases as printed (phases derived from contradicting ones would be made up).
fn check_breakdown(record: &mut RequestRecord) -> Option<String> {
    let queue_over_e2e = match (record.queue_ms, record.e2e_ms) {
        (Some(queue), Some(e2e))
            if queue - e2e
                > RELATIVE_TOLERANCE * queue.abs().max(e2e.abs()) + ABSOLUTE_TOLERANCE_MS =>
        {
            Some(format!("queue {queue:.1} exceeds e2e {e2e:.1} ms"))
        }
        _ => None,
    };
    let Some(reason) = queue_over_e2e else {
        return match complete_breakdown(record) {
            BreakdownCheck::Consistent => None,
            BreakdownCheck::Mismatch(reason) => Some(reason),
        };
    };
    let mut probe = record.clone();
    match complete_breakdown(&mut probe) {
        BreakdownCheck::Consistent => Some(reason),
        BreakdownCheck::Mismatch(other) => Some(format!("{other}; {reason}")),
    }
}

// ---------------------------------------------------------------------------------------------
// TGI: `generate{parameters=GenerateParameters { … } total_time="2.04s" queue_time="64µs" …}`

fn parse_tgi_request(body: &str) -> Option<LogRequest> {
    let bytes = body.as_bytes();
    for (open, _) in body.match_indices('{') {
        let mut name_start = open;
        while name_start > 0
            && (bytes[name_start - 1].is_ascii_alphanumeric() || bytes[name_start - 1] == b'_')
        {
            name_start -= 1;
        }
        let Some(&span) = TGI_SPANS
            .iter()
            .find(|name| **name == &body[name_start..open])
        else {
            continue;
        };
        if let Some(request) = tgi_request(span, &span_fields(body, open + 1)) {
            return Some(request);
        }
    }
    None
}

/// A `tracing` span field: key, value text (inside the quotes when quoted), quoted.
type SpanField<'a> = (&'a str, &'a str, bool);

/// The `key=value` fields of a `tracing` span from `start` (just after its `{`) to its `}`.
/// Values are `"quoted"` (Debug of a string, escaped) or bare (`GenerateParameters { … }`, a
/// struct body with nested brackets and strings). A value cut off by the line's end is dropped.
fn span_fields(body: &str, start: usize) -> Vec<SpanField<'_>> {
    let bytes = body.as_bytes();
    let mut fields = Vec::new();
    let mut pos = start;
    loop {
        pos = skip_ws(bytes, pos);
        let key_start = pos;
        while pos < bytes.len() && (bytes[pos].is_ascii_alphanumeric() || bytes[pos] == b'_') {
            pos += 1;
        }
        if pos == key_start || bytes.get(pos) != Some(&b'=') {
            break; // the span's `}`, the line's end, or something that is no field
        }
        let key = &body[key_start..pos];
        pos += 1;
        if bytes.get(pos) == Some(&b'"') {
            let Some(end) = string_end(bytes, pos) else {
                break;
            };
            fields.push((key, &body[pos + 1..end - 1], true));
            pos = end;
            continue;
        }
        let value_start = pos;
        let mut depth = 0usize;
        let end = loop {
            match bytes.get(pos) {
                None => break None,
                Some(b'"' | b'\'') => match string_end(bytes, pos) {
                    Some(end) => pos = end,
                    None => break None,
                },
                Some(b'{' | b'(' | b'[') => {
                    depth += 1;
                    pos += 1;
                }
                Some(b'}' | b')' | b']') if depth == 0 => break Some(pos),
                Some(b'}' | b')' | b']') => {
                    depth -= 1;
                    pos += 1;
                }
                // `Name { … }`: a struct's name is followed by a space and its body.
                Some(b' ') if depth == 0 => {
                    if bytes.get(skip_ws(bytes, pos)) == Some(&b'{') {
                        pos = skip_ws(bytes, pos);
                    } else {
                        break Some(pos);
                    }
                }
                Some(_) => pos += 1,
            }
        };
        let Some(end) = end else {
            break;
        };
        fields.push((key, &body[value_start..end], false));
    }
    fields
}

fn tgi_request(span: &str, fields: &[SpanField<'_>]) -> Option<LogRequest> {
    let field = |key: &str| fields.iter().find(|field| field.0 == key);
    let seconds = |key: &str| {
        field(key)
            .and_then(|field| duration_text_seconds(field.1))
            .filter(|seconds| *seconds >= 0.0)
    };
    let e2e_seconds = seconds("total_time").filter(|seconds| *seconds <= MAX_E2E_SECONDS)?;
    let mut request = LogRequest {
        runtime: "tgi",
        e2e_ms: e2e_seconds * 1e3,
        queue_ms: seconds("queue_time").map(|s| s * 1e3),
        tpot_ms: seconds("time_per_token").map(|s| s * 1e3),
        ..Default::default()
    };
    request
        .extras
        .insert("tgi.span".into(), Value::String(span.to_string()));
    for (key, extra) in [
        ("validation_time", "tgi.validation_ms"),
        ("inference_time", "tgi.inference_ms"),
    ] {
        if let Some(ms) = seconds(key).map(|s| s * 1e3).and_then(finite_json) {
            request.extras.insert(extra.into(), ms);
        }
    }
    if let Some(&(_, value, quoted)) = field("parameters") {
        // Recorded later with `span.record("parameters", format!("{:?}", …))` the struct is a
        // quoted string, its own strings escaped once more: unescape before walking it.
        let text: Cow<'_, str> = if quoted {
            Cow::Owned(unescape(value))
        } else {
            Cow::Borrowed(value)
        };
        if let Some(open) = text.find('{') {
            request.apply_sampling(complete_fields(&text, open));
        }
    }
    Some(request)
}

// ---------------------------------------------------------------------------------------------
// SGLang: `Finish: obj=GenerateReqInput(…), out={… 'meta_info': {…}}` and its JSON form

/// SGLang's marker of a finished request in `--log-requests` output.
const SGLANG_FINISH: &str = "Finish: obj=";

fn parse_sglang_finish(body: &str) -> Option<LogRequest> {
    let bytes = body.as_bytes();
    // The line's own structure: `obj=…, out=…` after the marker (repr), or the outermost JSON
    // object. The marker counts only before any `{`, so a JSON line whose text spells it is
    // still read as JSON.
    let top: Vec<Entry<'_>> = match body.find(SGLANG_FINISH) {
        Some(at) if !body[..at].contains('{') => {
            entries_from(body, at + "Finish: ".len()).collect()
        }
        _ if body.contains("request.finished") => entries(body, body.find('{')?).collect(),
        _ => return None,
    };
    let out = opener(body, entry(&top, "out")?.start).filter(|&open| bytes[open] == b'{')?;
    let out_entries: Vec<Entry<'_>> = entries(body, out).collect();
    // Newer versions nest the numbers in `meta_info`; older ones print them in `out` itself.
    let source = entry(&out_entries, "meta_info")
        .and_then(|meta| opener(body, meta.start))
        .filter(|&open| bytes[open] == b'{')
        .unwrap_or(out);
    let fields = complete_fields(body, source);
    let field = |key: &str| {
        fields
            .iter()
            .find(|(name, _)| *name == key)
            .map(|(_, raw)| *raw)
    };
    let e2e_seconds = field("e2e_latency")
        .and_then(number)
        .filter(|seconds| *seconds <= MAX_E2E_SECONDS)?;
    let mut request = LogRequest {
        runtime: "sglang",
        e2e_ms: e2e_seconds * 1e3,
        queue_ms: field("queue_time").and_then(number).map(|s| s * 1e3),
        ttft_ms: field("ttft").and_then(number).map(|s| s * 1e3),
        input_tokens: field("prompt_tokens").and_then(count),
        output_tokens: field("completion_tokens").and_then(count),
        cached_tokens: field("cached_tokens").and_then(count),
        ..Default::default()
    };
    request.finish_reason = field("finish_reason").and_then(|raw| {
        if raw.starts_with('{') {
            complete_fields(raw, 0)
                .into_iter()
                .find(|(key, _)| *key == "type")
                .and_then(|(_, raw)| text(raw))
        } else {
            text(raw) // a plain string in some versions; `None` is no reason
        }
    });
    if let Some(version) = field("weight_version").and_then(text) {
        request
            .extras
            .insert("sglang.weight_version".into(), Value::String(version));
    }
    // `obj=GenerateReqInput(rid='…', sampling_params={…}, …)` or a JSON object.
    let obj_fields = entry(&top, "obj")
        .and_then(|obj| opener(body, obj.start))
        .map(|open| complete_fields(body, open))
        .unwrap_or_default();
    let obj_field = |key: &str| {
        obj_fields
            .iter()
            .find(|(name, _)| *name == key)
            .map(|(_, raw)| *raw)
    };
    let other_field = |entries: &[Entry<'_>], key: &str| {
        let entry = entry(entries, key)?;
        text(body[entry.start..entry.end?].trim())
    };
    request.request_id = field("id")
        .or_else(|| field("rid"))
        .and_then(text)
        .or_else(|| obj_field("rid").and_then(text))
        .or_else(|| other_field(&top, "rid"));
    if let Some(params) = obj_field("sampling_params").filter(|raw| raw.starts_with('{')) {
        request.apply_sampling(complete_fields(params, 0));
    }
    Some(request)
}

// ---------------------------------------------------------------------------------------------
// The scanner: Python repr, Rust Debug and JSON values, strings skipped whole

fn skip_ws(bytes: &[u8], mut pos: usize) -> usize {
    while bytes.get(pos).is_some_and(u8::is_ascii_whitespace) {
        pos += 1;
    }
    pos
}

/// Index just past the closing quote of the string whose opening quote is at `open`; `None`
/// when the text ends inside it. A backslash escapes the next byte (Python repr, JSON, Debug).
fn string_end(bytes: &[u8], open: usize) -> Option<usize> {
    let quote = bytes[open];
    let mut pos = open + 1;
    while pos < bytes.len() {
        match bytes[pos] {
            b'\\' => pos += 2,
            byte if byte == quote => return Some(pos + 1),
            _ => pos += 1,
        }
    }
    None
}

/// End (exclusive) of the value starting at `start`: the first `,` or closing bracket outside
/// strings and nested brackets. `None` when the text ends first: a cut-off value is never read.
fn value_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut pos = start;
    while pos < bytes.len() {
        match bytes[pos] {
            b'\'' | b'"' => {
                pos = string_end(bytes, pos)?;
                continue;
            }
            b'{' | b'[' | b'(' => depth += 1,
            b'}' | b']' | b')' if depth == 0 => return Some(pos),
            b'}' | b']' | b')' => depth -= 1,
            b',' if depth == 0 => return Some(pos),
            _ => {}
        }
        pos += 1;
    }
    None
}

/// The opening bracket of the container value at `start`: `{…}`, `Name(…)` (a Python dataclass)
/// or `Name { … }` (a Rust struct).
fn opener(text: &str, start: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut pos = start;
    while pos < bytes.len()
        && (bytes[pos].is_ascii_alphanumeric() || matches!(bytes[pos], b'_' | b'.'))
    {
        pos += 1;
    }
    if pos > start {
        pos = skip_ws(bytes, pos);
    }
    matches!(bytes.get(pos), Some(b'{' | b'(')).then_some(pos)
}

/// One `key: value` (or `key=value`) entry: the key and where its value starts and ends (`end`
/// is `None` when the text ends inside the value).
#[derive(Debug, Clone, Copy)]
struct Entry<'a> {
    key: &'a str,
    start: usize,
    end: Option<usize>,
}

fn entry<'e, 'a>(entries: &'e [Entry<'a>], key: &str) -> Option<&'e Entry<'a>> {
    entries.iter().find(|entry| entry.key == key)
}

/// The entries of the dict, call or struct whose opening bracket is at `open`.
fn entries(text: &str, open: usize) -> Entries<'_> {
    debug_assert!(matches!(text.as_bytes().get(open), Some(b'{' | b'(')));
    entries_from(text, open + 1)
}

/// The entries of a `key=value, …` list starting at `start`, up to its closing bracket, anything
/// that is no entry, or the first value the text's end cuts off (yielded, without an end).
/// Nested values are skipped whole, strings included: text never yields an entry.
fn entries_from(text: &str, start: usize) -> Entries<'_> {
    Entries {
        text,
        pos: start,
        done: false,
    }
}

/// The entries of the container at `open` whose values are whole, with their trimmed text.
impl LogRequest {
    /// The sampling settings among `fields` (TGI's `GenerateParameters`, SGLang's
    /// `sampling_params`, which name them alike).
    fn apply_sampling(&mut self, fields: Vec<(&str, &str)>) {
        for (key, raw) in fields {
            match key {
                "max_new_tokens" => self.max_tokens = count(raw),
                "temperature" => self.temperature = number(raw),
                "top_p" => self.top_p = number(raw),
                _ => {}
            }
        }
    }
}

fn complete_fields(text: &str, open: usize) -> Vec<(&str, &str)> {
    entries(text, open)
        .filter_map(|entry| Some((entry.key, text[entry.start..entry.end?].trim())))
        .collect()
}

struct Entries<'a> {
    text: &'a str,
    pos: usize,
    done: bool,
}

impl<'a> Iterator for Entries<'a> {
    type Item = Entry<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        self.done = true; // until an entry is read whole
        let bytes = self.text.as_bytes();
        let mut pos = skip_ws(bytes, self.pos);
        let key = match *bytes.get(pos)? {
            b'\'' | b'"' => {
                let end = string_end(bytes, pos)?;
                let key = &self.text[pos + 1..end - 1];
                pos = end;
                key
            }
            _ => {
                // Keyword arguments, Rust Debug structs and old SGLang versions: bare keys.
                let start = pos;
                while pos < bytes.len()
                    && (bytes[pos].is_ascii_alphanumeric() || bytes[pos] == b'_')
                {
                    pos += 1;
                }
                if pos == start {
                    return None;
                }
                &self.text[start..pos]
            }
        };
        pos = skip_ws(bytes, pos);
        if !matches!(bytes.get(pos), Some(b':' | b'=')) {
            return None;
        }
        let start = skip_ws(bytes, pos + 1);
        let end = value_end(bytes, start);
        if let Some(end) = end
            && bytes[end] == b','
        {
            self.pos = end + 1;
            self.done = false;
        }
        Some(Entry { key, start, end })
    }
}

/// `Some(x)` (Rust Debug) and `np.float64(x)` (numpy repr) wrap a scalar: the scalar's text.
fn unwrap_scalar(raw: &str) -> &str {
    let raw = raw.trim();
    if let Some(inner) = raw.strip_suffix(')')
        && let Some(open) = inner.find('(')
        && inner[..open]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
    {
        return inner[open + 1..].trim();
    }
    raw
}

/// A finite, non-negative number (`nan`, `inf`, `None`, negatives and text are no value).
fn number(raw: &str) -> Option<f64> {
    let value: f64 = unwrap_scalar(raw).parse().ok()?;
    (value.is_finite() && value >= 0.0).then_some(value.abs())
}

/// A non-negative whole number (`7`, or `7.0` from a float-typed engine field).
fn count(raw: &str) -> Option<i64> {
    let raw = unwrap_scalar(raw);
    let value = raw.parse::<i64>().ok().or_else(|| {
        let value: f64 = raw.parse().ok()?;
        (value.fract() == 0.0 && value.abs() < 9.0e15).then_some(value as i64)
    })?;
    (value >= 0).then_some(value)
}

/// The content of a value that is exactly one quoted string (not `'a' ... 'b'`, SGLang's
/// truncated form), unescaped, when short enough to be a label.
fn text(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    if !matches!(bytes.first(), Some(b'\'' | b'"'))
        || string_end(bytes, 0) != Some(bytes.len())
        || raw.len() > MAX_LABEL_BYTES + 2
    {
        return None;
    }
    let value = unescape(&raw[1..raw.len() - 1]);
    (!value.is_empty()).then_some(value)
}

/// Backslash escapes of repr, JSON and Debug strings: `\n`, `\t`, `\r`; any other escaped
/// character stands for itself (`\'`, `\"`, `\\`).
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(ch) = chars.next() {
        if ch != '\\' {
            out.push(ch);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

fn finite_json(value: f64) -> Option<Value> {
    serde_json::Number::from_f64(value).map(Value::Number)
}
