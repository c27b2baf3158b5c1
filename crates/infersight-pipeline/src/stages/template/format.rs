//! Header splitting, the step before mining: a log line is `header + content`, and only the content
//! is mined. With a Loghub-style format spec (`<Date> <Time> <Level> <Component>: <Content>`, the
//! `--log-format` flag) the spec decides; without one, [`detect_header`] strips leading timestamps,
//! levels, pids and a component the way most runtimes print them.
//!
//! Spec semantics follow logparser's `generate_logformat_regex` (Zhu et al., ICSE'19) so the
//! published per-system format strings work unchanged: `<Name>` captures lazily, literal text is a
//! regex fragment (hence `\[`), and runs of spaces match any whitespace.

use super::mask::{is_month, is_weekday};
use crate::error::PipelineError;

/// The Loghub benchmark's format specs per system (logpai/logparser `benchmark_settings`, Zhu et
/// al. ICSE'19), exactly what `--log-format` takes: the only per-system input of the accuracy
/// evaluation (`examples/loghub_eval.rs`, the accuracy test) and of the golden digest test.
pub const LOGHUB_FORMATS: &[(&str, &str)] = &[
    (
        "Android",
        r"<Date> <Time>  <Pid>  <Tid> <Level> <Component>: <Content>",
    ),
    ("Apache", r"\[<Time>\] \[<Level>\] <Content>"),
    (
        "BGL",
        r"<Label> <Timestamp> <Date> <Node> <Time> <NodeRepeat> <Type> <Component> <Level> <Content>",
    ),
    (
        "HDFS",
        r"<Date> <Time> <Pid> <Level> <Component>: <Content>",
    ),
    (
        "Hadoop",
        r"<Date> <Time> <Level> \[<Process>\] <Component>: <Content>",
    ),
    ("HealthApp", r"<Time>\|<Component>\|<Pid>\|<Content>"),
    (
        "Linux",
        r"<Month> <Date> <Time> <Level> <Component>(\[<PID>\])?: <Content>",
    ),
    (
        "OpenSSH",
        r"<Date> <Day> <Time> <Component> sshd\[<Pid>\]: <Content>",
    ),
    ("Spark", r"<Date> <Time> <Level> <Component>: <Content>"),
    (
        "Zookeeper",
        r"<Date> <Time> - <Level>  \[<Node>:<Component>@<Id>\] - <Content>",
    ),
];

/// A compiled Loghub-style format spec.
#[derive(Debug, Clone)]
pub struct LogFormat {
    spec: String,
    regex: regex::Regex,
    names: Vec<String>,
}

/// A line split into its header fields and its content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitLine<'a> {
    pub content: &'a str,
    /// Header fields by name (`Level`, `Component`, …), in spec order.
    pub fields: Vec<(&'a str, &'a str)>,
}

impl SplitLine<'_> {
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(field, _)| field.eq_ignore_ascii_case(name))
            .map(|(_, value)| *value)
    }
}

impl LogFormat {
    /// Compiles `spec`; it must name a `<Content>` field.
    pub fn parse(spec: &str) -> Result<Self, PipelineError> {
        let bad = |reason: String| PipelineError::LogFormat {
            spec: spec.to_string(),
            reason,
        };
        let mut pattern = String::from("^");
        let mut names = Vec::new();
        let mut rest = spec;
        while let Some(open) = rest.find('<') {
            let Some(close_offset) = rest[open..].find('>') else {
                return Err(bad("unclosed `<`".into()));
            };
            let close = open + close_offset;
            push_literal(&mut pattern, &rest[..open]);
            let name = &rest[open + 1..close];
            if name.is_empty()
                || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                || name.as_bytes()[0].is_ascii_digit()
            {
                return Err(bad(format!(
                    "field name `{name}` must be [A-Za-z_][A-Za-z0-9_]*"
                )));
            }
            if names.iter().any(|known| known == name) {
                return Err(bad(format!("field `{name}` appears twice")));
            }
            pattern.push_str(&format!("(?P<{name}>.*?)"));
            names.push(name.to_string());
            rest = &rest[close + 1..];
        }
        push_literal(&mut pattern, rest);
        pattern.push('$');
        if !names.iter().any(|name| name == "Content") {
            return Err(bad("the spec must contain `<Content>`".into()));
        }
        let regex = regex::RegexBuilder::new(&pattern)
            .size_limit(1 << 20)
            .build()
            .map_err(|error| bad(error.to_string().replace('\n', " ")))?;
        Ok(Self {
            spec: spec.to_string(),
            regex,
            names,
        })
    }

    /// Only the content of a line (`None` when the line does not match the spec).
    pub fn content<'a>(&self, line: &'a str) -> Option<&'a str> {
        let line = line.trim_end_matches(['\r', '\n']);
        self.regex
            .captures(line)
            .and_then(|captures| captures.name("Content"))
            .map(|content| content.as_str())
    }

    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// Splits a line by the spec; `None` when the line does not match it (logparser drops such
    /// lines; callers here fall back to mining the whole line).
    pub fn split<'a>(&'a self, line: &'a str) -> Option<SplitLine<'a>> {
        let line = line.trim_end_matches(['\r', '\n']);
        let captures = self.regex.captures(line)?;
        let content = captures.name("Content")?.as_str();
        let fields = self
            .names
            .iter()
            .filter(|name| *name != "Content")
            .filter_map(|name| {
                captures
                    .name(name)
                    .map(|value| (name.as_str(), value.as_str()))
            })
            .collect();
        Some(SplitLine { content, fields })
    }
}

impl std::str::FromStr for LogFormat {
    type Err = PipelineError;
    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        LogFormat::parse(spec)
    }
}

/// Literal spec text: a regex fragment with every run of spaces matching any whitespace.
fn push_literal(pattern: &mut String, literal: &str) {
    let mut in_spaces = false;
    for ch in literal.chars() {
        if ch == ' ' {
            if !in_spaces {
                pattern.push_str(r"\s+");
            }
            in_spaces = true;
        } else {
            pattern.push(ch);
            in_spaces = false;
        }
    }
}

const LEVELS: &[&str] = &[
    "TRACE", "DEBUG", "INFO", "NOTICE", "WARN", "WARNING", "ERROR", "ERR", "FATAL", "CRITICAL",
    "CRIT", "SEVERE", "ALERT", "EMERG",
];

/// Header fields found by [`detect_header`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DetectedHeader<'a> {
    pub content: &'a str,
    pub timestamp: Option<&'a str>,
    pub level: Option<&'a str>,
    pub component: Option<&'a str>,
}

/// The token without leading `[(<` and trailing `])>:,` (ASCII only, so trimming bytes is the
/// same as trimming chars; runs for every header token, hence bytes).
#[inline]
fn strip_brackets(token: &str) -> &str {
    let bytes = token.as_bytes();
    let mut start = 0;
    while start < bytes.len() && matches!(bytes[start], b'[' | b'(' | b'<') {
        start += 1;
    }
    let mut end = bytes.len();
    while end > start && matches!(bytes[end - 1], b']' | b')' | b'>' | b':' | b',') {
        end -= 1;
    }
    &token[start..end]
}

/// A month or weekday name, a compact date or epoch (6+ digits), or 2+ digits with date
/// punctuation (`2005-06-03`, `16:13:38.811`, `2024-05-01T10:00:00Z`). One pass over the bytes.
fn is_timestampish(token: &str) -> bool {
    is_timestampish_core(strip_brackets(token))
}

/// [`is_timestampish`] of a token already passed through [`strip_brackets`].
fn is_timestampish_core(core: &str) -> bool {
    let bytes = core.as_bytes();
    if is_month(bytes) || is_weekday(bytes) {
        return true;
    }
    let mut digits = 0;
    let mut has_separator = false;
    for &byte in bytes {
        match byte {
            b'0'..=b'9' => digits += 1,
            b'-' | b'/' | b':' | b'.' => has_separator = true,
            b',' | b'T' | b'Z' | b'+' => {}
            // Neither all digits nor all date bytes: no rule below can hold.
            _ => return false,
        }
    }
    // Compact dates and epochs: `081109`, `203615`, `1117838570`.
    if digits == bytes.len() && digits >= 6 {
        return true;
    }
    digits >= 2 && has_separator
}

/// The level named by `token` (`core` is `strip_brackets(token)`; `core_every`, when known, its
/// [`header_class`] bits).
fn level_of<'a>(token: &str, core: &'a str, core_every: Option<u8>) -> Option<&'a str> {
    // Every level is 3 to 8 bytes long: most tokens are rejected without touching `LEVELS`.
    if !(3..=8).contains(&core.len()) {
        return None;
    }
    // Bare levels must be upper case (`INFO`); bracketed ones may not be (`[notice]`). Checked
    // before the list: most header and message words are neither.
    let bracketed = token.starts_with('[') || token.starts_with('<');
    let shouted = || {
        core_every.map_or_else(
            || core.bytes().all(|b| b.is_ascii_uppercase()),
            |every| every & header_class::UPPER != 0,
        )
    };
    if !bracketed && !shouted() {
        return None;
    }
    LEVELS
        .iter()
        .any(|level| level.eq_ignore_ascii_case(core))
        .then_some(core)
}

/// One-letter levels (Android's logcat: `D WindowManager: …`), accepted only after a timestamp.
const LETTER_LEVELS: &[&str] = &["V", "D", "I", "W", "E", "F"];

/// At most this many leading tokens are read as a header.
const MAX_HEADER_TOKENS: usize = 12;

/// Byte classes of header tokens, OR-ed and AND-ed per token while its end is found, so the
/// checks that run on every header token (all digits, all upper case, timestamp bytes, host
/// bytes) are bit tests instead of scans.
mod header_class {
    pub(super) const DIGIT: u8 = 1;
    pub(super) const UPPER: u8 = 2;
    /// A byte a timestamp may hold: a digit, date punctuation, `,`, `T`, `Z`, `+`.
    pub(super) const DATE: u8 = 4;
    /// Date punctuation: `-`, `/`, `:`, `.`.
    pub(super) const DATE_SEPARATOR: u8 = 8;
    /// A byte of a host name as headers print it: a letter, a digit, `.-_/:`.
    pub(super) const HOST: u8 = 16;
    /// An upper-case letter or `_` (alert labels).
    pub(super) const LABEL: u8 = 32;
    /// ASCII whitespace (only inside a bracketed group).
    pub(super) const SPACE: u8 = 64;
}

static HEADER_CLASS: [u8; 256] = {
    use header_class::*;
    let mut table = [0u8; 256];
    let mut byte = 0;
    while byte < 256 {
        let value = byte as u8;
        let mut bits = 0;
        if value.is_ascii_digit() {
            bits |= DIGIT | DATE | HOST;
        }
        if value.is_ascii_uppercase() {
            bits |= UPPER | LABEL | HOST;
        }
        if value.is_ascii_lowercase() {
            bits |= HOST;
        }
        if matches!(value, b'-' | b'/' | b':' | b'.') {
            bits |= DATE | DATE_SEPARATOR | HOST;
        }
        if matches!(value, b',' | b'T' | b'Z' | b'+') {
            bits |= DATE;
        }
        if value == b'_' {
            bits |= LABEL | HOST;
        }
        if value.is_ascii_whitespace() {
            bits |= SPACE;
        }
        table[byte] = bits;
        byte += 1;
    }
    table
};

/// One token of a header: where it is and the classes of its bytes.
#[derive(Debug, Clone, Copy, Default)]
struct HeaderToken {
    start: usize,
    end: usize,
    /// The [`header_class`] bits every byte has.
    every: u8,
    /// The [`header_class`] bits some byte has.
    any: u8,
}

/// The leading tokens of a line, each found and classified once, on demand. Header rules look a
/// few tokens ahead (a host before a timestamp, facility words before a level, a logger after a
/// thread); they read these instead of scanning the line again.
struct HeaderTokens<'a> {
    line: &'a str,
    /// The header's tokens and a lookahead of at most four more (a host's next token, then up to
    /// three facility words before a level).
    tokens: [HeaderToken; MAX_HEADER_TOKENS + 4],
    len: usize,
    /// Where the next token search starts.
    offset: usize,
}

impl<'a> HeaderTokens<'a> {
    fn new(line: &'a str) -> Self {
        Self {
            line,
            tokens: [HeaderToken::default(); MAX_HEADER_TOKENS + 4],
            len: 0,
            offset: 0,
        }
    }

    /// Token `index` (from 0), `None` past the end of the line.
    #[inline]
    fn get(&mut self, index: usize) -> Option<HeaderToken> {
        while self.len <= index {
            let token = next_token(self.line.as_bytes(), self.offset)?;
            debug_assert!(
                self.len < self.tokens.len(),
                "header lookahead beyond its bound"
            );
            *self.tokens.get_mut(self.len)? = token;
            self.len += 1;
            self.offset = token.end;
        }
        Some(self.tokens[index])
    }

    #[inline]
    fn text(&self, token: HeaderToken) -> &'a str {
        &self.line[token.start..token.end]
    }
}

/// Automatic header detection for lines without a format spec: leading timestamp tokens
/// (dates, times, month and weekday names, epoch-like numbers next to them), a level
/// (`INFO`, `[error]`, a logcat letter after a timestamp), bare pids, lone `-` separators, a
/// host between or after timestamp parts (syslog's `Jun 14 15:16:01 host proc[pid]:`), upper-case
/// facility words before a level (`RAS KERNEL INFO`), and a component token that ends with `:` or
/// `]` (`dfs.DataNode$PacketResponder:`, `llm_engine.py:123]`, `[thread] org.Logger:`). A
/// `time|component|pid|` prefix is a header too. Content is what follows.
pub fn detect_header(line: &str) -> DetectedHeader<'_> {
    let line = line.trim_end_matches(['\r', '\n']);
    if let Some(header) = pipe_header(line) {
        return header;
    }
    let mut header = DetectedHeader {
        content: line,
        ..DetectedHeader::default()
    };
    let mut tokens = HeaderTokens::new(line);
    let mut timestamp_span: Option<(usize, usize)> = None;
    let mut consumed_end = 0;
    for index in 0..MAX_HEADER_TOKENS {
        let Some(current) = tokens.get(index) else {
            break;
        };
        let (start, end) = (current.start, current.end);
        let token = tokens.text(current);
        let first = index == 0;
        let after_header = timestamp_span.is_some() || header.level.is_some();
        let core = strip_brackets(token);
        // The token's class bits hold for its core when no bracket was stripped.
        let core_every = (core.len() == token.len()).then_some(current.every);
        // After the level, a bare number starts the message (`INFO 1234567 exceptions`).
        let number_after_level = header.level.is_some()
            && core_every.map_or_else(
                || core.bytes().all(|b| b.is_ascii_digit()),
                |every| every & header_class::DIGIT != 0,
            );
        let level = if first || header.level.is_none() {
            level_of(token, core, core_every)
        } else {
            None
        };
        if (is_timestampish_classified(core, core_every, current.any) && !number_after_level)
            || is_bracketed_time(token)
        {
            timestamp_span = Some(timestamp_span.map_or((start, end), |(s, _)| (s, end)));
        } else if (token == "-" && (after_header || first))
            || (first && level.is_none() && is_label_before_timestamp(&mut tokens, current))
        {
            // A separator (`- INFO [x] - message`) or a leading alert label (`- 1117838570 …`,
            // `KERNDTLB 1117838570 …`).
        } else if header.level.is_none()
            && let Some(level) = level.or_else(|| {
                (timestamp_span.is_some() && token.len() == 1 && LETTER_LEVELS.contains(&token))
                    .then_some(token)
            })
        {
            header.level = Some(level);
        } else if after_header && header.level.is_none() && current.every & header_class::DIGIT != 0
        {
            // A pid or thread id between the timestamp and the level (after the level, a number
            // starts the message: `INFO 109 alignment exceptions`).
        } else if after_header && is_component(token) && end < line.len() {
            let (component, component_index) = logger_after_thread(&mut tokens, index);
            header.component = Some(component);
            consumed_end = separator_after(&mut tokens, component_index);
            break;
        } else if after_header
            && header.level.is_none()
            && facility_before_level(&mut tokens, index)
        {
            // `RAS KERNEL INFO`: upper-case words right before the level.
        } else if timestamp_span.is_some()
            && header.level.is_none()
            && is_host_like(token, current.every)
            && host_ends_here(&mut tokens, index)
        {
            // A host between timestamp parts or before the process: `dn228`, `combo`.
        } else {
            break;
        }
        consumed_end = end;
    }
    if timestamp_span.is_none() && header.level.is_none() {
        return header;
    }
    header.timestamp = timestamp_span.map(|(start, end)| &line[start..end]);
    header.content = line[consumed_end..].trim_start();
    header
}

/// [`is_timestampish_core`] of a core whose class bits are known when `every` is: bit tests
/// instead of a byte loop for most tokens.
#[inline]
fn is_timestampish_classified(core: &str, every: Option<u8>, any: u8) -> bool {
    let Some(every) = every else {
        return is_timestampish_core(core);
    };
    if is_month(core.as_bytes()) || is_weekday(core.as_bytes()) {
        return true;
    }
    if every & header_class::DATE == 0 {
        return false;
    }
    if every & header_class::DIGIT != 0 {
        // Compact dates and epochs: `081109`, `203615`, `1117838570`.
        return core.len() >= 6;
    }
    any & header_class::DATE_SEPARATOR != 0 && core.bytes().filter(u8::is_ascii_digit).count() >= 2
}

/// [`is_timestampish`] of a header token.
#[inline]
fn is_timestampish_token(tokens: &HeaderTokens<'_>, token: HeaderToken) -> bool {
    let text = tokens.text(token);
    let core = strip_brackets(text);
    is_timestampish_classified(
        core,
        (core.len() == text.len()).then_some(token.every),
        token.any,
    )
}

/// The next token from `offset`: a bracketed group may contain spaces and nested brackets
/// (`[Sun Dec 04 04:47:44 2005]`, `[QuorumPeer[myid=1]/0:0:0:0:0:0:0:0:2181:Election@774]`) and
/// ends at its matching `]` within 200 bytes; other tokens end at whitespace.
fn next_token(bytes: &[u8], mut offset: usize) -> Option<HeaderToken> {
    while offset < bytes.len() && bytes[offset].is_ascii_whitespace() {
        offset += 1;
    }
    if offset >= bytes.len() {
        return None;
    }
    let start = offset;
    let mut rest = start;
    if bytes[start] == b'[' {
        let window = &bytes[start..bytes.len().min(start + 200)];
        let mut depth = 0usize;
        for (at, &byte) in window.iter().enumerate() {
            match byte {
                b'[' => depth += 1,
                b']' => {
                    depth -= 1;
                    if depth == 0 {
                        // The group and what is glued to it (`[main]:`).
                        rest = start + at + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    let (mut every, mut any) = (u8::MAX, 0u8);
    for &byte in &bytes[start..rest] {
        let class = HEADER_CLASS[byte as usize];
        every &= class;
        any |= class;
    }
    let mut end = rest;
    while let Some(&byte) = bytes.get(end) {
        let class = HEADER_CLASS[byte as usize];
        if class & header_class::SPACE != 0 {
            break;
        }
        every &= class;
        any |= class;
        end += 1;
    }
    Some(HeaderToken {
        start,
        end,
        every,
        any,
    })
}

/// `[Sun Dec 04 04:47:44 2005]`: a bracketed group of timestamp parts and numbers.
fn is_bracketed_time(token: &str) -> bool {
    token.starts_with('[') && {
        let inner = token.trim_start_matches('[').trim_end_matches(']');
        inner.split_ascii_whitespace().any(is_timestampish)
            && inner
                .split_ascii_whitespace()
                .all(|t| is_timestampish(t) || t.bytes().all(|b| b.is_ascii_digit()))
    }
}

/// A component: a token that ends with `:` or `]` (`sshd[24200]:`, `[main]`, `metrics.py:360]`).
fn is_component(token: &str) -> bool {
    token.len() > 1 && (token.ends_with(':') || token.ends_with(']'))
}

/// The component in token `index`: after a bracketed thread (`[main]`), a logger name that ends
/// with `:` is the component (`[main] org.apache.hadoop.Foo: msg`). Returns the component and the
/// index of the token it ends with.
fn logger_after_thread<'a>(tokens: &mut HeaderTokens<'a>, index: usize) -> (&'a str, usize) {
    let Some(current) = tokens.get(index) else {
        return ("", index);
    };
    let token = tokens.text(current);
    let bracketed = token.trim_end_matches([':', ']']).trim_start_matches('[');
    if token.starts_with('[')
        && token.ends_with(']')
        && let Some(next) = tokens.get(index + 1)
        && next.end < tokens.line.len()
    {
        let logger = tokens.text(next);
        if let Some(name) = logger.strip_suffix(':')
            && name.len() > 1
            && name.contains('.')
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'$' | b'-'))
        {
            return (name, index + 1);
        }
    }
    (bracketed, index)
}

/// Where the header ends after the component in token `index`: past a lone `-` separator
/// (`[x@1] - message`) if one follows, else at the component's end.
fn separator_after(tokens: &mut HeaderTokens<'_>, index: usize) -> usize {
    let component_end = tokens.get(index).map_or(0, |token| token.end);
    match tokens.get(index + 1) {
        Some(next) if tokens.text(next) == "-" => next.end,
        _ => component_end,
    }
}

/// Token `index` ends in an upper-case word, and a level follows within two more upper-case
/// words (`RAS KERNEL INFO`).
fn facility_before_level(tokens: &mut HeaderTokens<'_>, index: usize) -> bool {
    let Some(current) = tokens.get(index) else {
        return false;
    };
    let upper_word = if current.any & header_class::SPACE == 0 {
        (2..=12).contains(&(current.end - current.start))
            && current.every & header_class::UPPER != 0
    } else {
        // A bracketed group with spaces: the word after its last space.
        let text = tokens.text(current);
        let word = text
            .rsplit(|c: char| c.is_ascii_whitespace())
            .next()
            .unwrap_or(text);
        (2..=12).contains(&word.len()) && word.bytes().all(|b| b.is_ascii_uppercase())
    };
    if !upper_word {
        return false;
    }
    for ahead in 1..=3 {
        let Some(next) = tokens.get(index + ahead) else {
            return false;
        };
        let text = tokens.text(next);
        if level_of(text, text, Some(next.every)).is_some() {
            return true;
        }
        if next.every & header_class::UPPER == 0 {
            return false;
        }
    }
    false
}

/// The first token (`first`) is upper-case letters and `_`, and a timestamp follows: an alert
/// label.
fn is_label_before_timestamp(tokens: &mut HeaderTokens<'_>, first: HeaderToken) -> bool {
    first.end - first.start > 1
        && first.every & header_class::LABEL != 0
        && tokens
            .get(1)
            .is_some_and(|next| is_timestampish_token(tokens, next))
}

/// A host name as headers print it: letters, digits and `.-_/:`, with a letter or digit first
/// (`every`: the token's class bits).
fn is_host_like(token: &str, every: u8) -> bool {
    token.len() > 1
        && token.as_bytes()[0].is_ascii_alphanumeric()
        && !token.ends_with(':')
        && every & header_class::HOST != 0
}

/// What follows a host candidate in token `index` makes it one: more timestamp parts, a
/// component (`proc[pid]:`), or facility words before a level.
fn host_ends_here(tokens: &mut HeaderTokens<'_>, index: usize) -> bool {
    let Some(next) = tokens.get(index + 1) else {
        return false;
    };
    let text = tokens.text(next);
    is_timestampish_token(tokens, next)
        || (is_component(text) && next.end < tokens.line.len() && !text.starts_with('['))
        || facility_before_level(tokens, index + 1)
}

/// `20171223-22:15:29:606|Step_LSC|30002312|message`: a timestamp field then `|`-separated
/// fields without spaces (a component, a pid) before the content; the pid ends the header.
fn pipe_header(line: &str) -> Option<DetectedHeader<'_>> {
    // The timestamp field holds no whitespace, so the first `|` counts only before the first
    // space: most lines are rejected after their first token instead of a scan of the whole line.
    let first_bar = line
        .bytes()
        .position(|byte| byte == b'|' || byte.is_ascii_whitespace())
        .filter(|&at| line.as_bytes()[at] == b'|')?;
    let timestamp = &line[..first_bar];
    if timestamp.contains(char::is_whitespace) || !is_timestampish(timestamp) {
        return None;
    }
    let mut header = DetectedHeader {
        content: line,
        timestamp: Some(timestamp),
        ..DetectedHeader::default()
    };
    let mut rest = &line[first_bar + 1..];
    for _ in 0..3 {
        let Some(bar) = rest.find('|') else { break };
        let field = &rest[..bar];
        if field.is_empty() || field.contains(char::is_whitespace) {
            break;
        }
        rest = &rest[bar + 1..];
        if field.bytes().all(|b| b.is_ascii_digit()) {
            break;
        }
        header.component.get_or_insert(field);
    }
    header.content = rest.trim_start();
    Some(header)
}
