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

/// The level named by `token` (`core` is `strip_brackets(token)`).
fn level_of<'a>(token: &str, core: &'a str) -> Option<&'a str> {
    // Every level is 3 to 8 bytes long: most tokens are rejected without touching `LEVELS`.
    if !(3..=8).contains(&core.len()) {
        return None;
    }
    // Bare levels must be upper case (`INFO`); bracketed ones may not be (`[notice]`). Checked
    // before the list: most header and message words are neither.
    let bracketed = token.starts_with('[') || token.starts_with('<');
    if !bracketed && !core.bytes().all(|b| b.is_ascii_uppercase()) {
        return None;
    }
    LEVELS
        .iter()
        .any(|level| level.eq_ignore_ascii_case(core))
        .then_some(core)
}

/// One-letter levels (Android's logcat: `D WindowManager: …`), accepted only after a timestamp.
const LETTER_LEVELS: &[&str] = &["V", "D", "I", "W", "E", "F"];

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
    let mut timestamp_span: Option<(usize, usize)> = None;
    let mut consumed_end = 0;
    let mut offset = 0;
    let mut tokens_seen = 0;
    let bytes = line.as_bytes();
    while let Some((start, end)) = next_token(bytes, offset) {
        if tokens_seen >= 12 {
            break;
        }
        let token = &line[start..end];
        offset = end;
        tokens_seen += 1;
        let after_header = timestamp_span.is_some() || header.level.is_some();
        let core = strip_brackets(token);
        // After the level, a bare number starts the message (`INFO 1234567 exceptions`).
        let number_after_level = header.level.is_some() && core.bytes().all(|b| b.is_ascii_digit());
        if (is_timestampish_core(core) && !number_after_level) || is_bracketed_time(token) {
            timestamp_span = Some(timestamp_span.map_or((start, end), |(s, _)| (s, end)));
        } else if (token == "-" && (after_header || tokens_seen == 1))
            || (tokens_seen == 1
                && level_of(token, core).is_none()
                && is_label_before_timestamp(line, token, end))
        {
            // A separator (`- INFO [x] - message`) or a leading alert label (`- 1117838570 …`,
            // `KERNDTLB 1117838570 …`).
        } else if header.level.is_none()
            && let Some(level) = level_of(token, core).or_else(|| {
                (timestamp_span.is_some() && LETTER_LEVELS.contains(&token)).then_some(token)
            })
        {
            header.level = Some(level);
        } else if after_header
            && header.level.is_none()
            && token.bytes().all(|b| b.is_ascii_digit())
        {
            // A pid or thread id between the timestamp and the level (after the level, a number
            // starts the message: `INFO 109 alignment exceptions`).
        } else if after_header && is_component(token) && end < bytes.len() {
            let (component, component_end) = logger_after_thread(line, token, end);
            header.component = Some(component);
            consumed_end = separator_after(bytes, component_end);
            break;
        } else if after_header && header.level.is_none() && facility_before_level(line, end) {
            // `RAS KERNEL INFO`: upper-case words right before the level.
        } else if timestamp_span.is_some()
            && header.level.is_none()
            && is_host_like(token)
            && host_ends_here(line, end)
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

/// The next token from `offset`: a bracketed group may contain spaces and nested brackets
/// (`[Sun Dec 04 04:47:44 2005]`, `[QuorumPeer[myid=1]/0:0:0:0:0:0:0:0:2181:Election@774]`) and
/// ends at its matching `]` within 200 bytes; other tokens end at whitespace.
fn next_token(bytes: &[u8], mut offset: usize) -> Option<(usize, usize)> {
    while offset < bytes.len() && bytes[offset].is_ascii_whitespace() {
        offset += 1;
    }
    if offset >= bytes.len() {
        return None;
    }
    let start = offset;
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
                        return Some((start, token_end(bytes, start + at + 1)));
                    }
                }
                _ => {}
            }
        }
    }
    Some((start, token_end(bytes, start)))
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

/// After a bracketed thread (`[main]`), a logger name that ends with `:` is the component
/// (`[main] org.apache.hadoop.Foo: msg`); returns the component and where it ends.
fn logger_after_thread<'a>(line: &'a str, token: &'a str, end: usize) -> (&'a str, usize) {
    let bracketed = token.trim_end_matches([':', ']']).trim_start_matches('[');
    if token.starts_with('[')
        && token.ends_with(']')
        && let Some((start, logger_end)) = next_token(line.as_bytes(), end)
        && logger_end < line.len()
    {
        let logger = &line[start..logger_end];
        if let Some(name) = logger.strip_suffix(':')
            && name.len() > 1
            && name.contains('.')
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'$' | b'-'))
        {
            return (name, logger_end);
        }
    }
    (bracketed, end)
}

/// Past a lone `-` separator after the component (`[x@1] - message`), if there is one.
fn separator_after(bytes: &[u8], end: usize) -> usize {
    match next_token(bytes, end) {
        Some((start, separator_end)) if &bytes[start..separator_end] == b"-" => separator_end,
        _ => end,
    }
}

/// The token that ends at `end` is an upper-case word, and a level follows within two more
/// upper-case words (`RAS KERNEL INFO`).
fn facility_before_level(line: &str, end: usize) -> bool {
    // ASCII whitespace bytes never occur inside a multi-byte character: a byte scan back over
    // the word finds the same start as a char search.
    let start = line.as_bytes()[..end]
        .iter()
        .rposition(u8::is_ascii_whitespace)
        .map_or(0, |at| at + 1);
    let word = &line[start..end];
    if !(2..=12).contains(&word.len()) || !word.bytes().all(|b| b.is_ascii_uppercase()) {
        return false;
    }
    let mut offset = end;
    for _ in 0..3 {
        let Some((next_start, next_end)) = next_token(line.as_bytes(), offset) else {
            return false;
        };
        let next = &line[next_start..next_end];
        if level_of(next, next).is_some() {
            return true;
        }
        if !next.bytes().all(|b| b.is_ascii_uppercase()) {
            return false;
        }
        offset = next_end;
    }
    false
}

/// A first token of upper-case letters and `_` followed by a timestamp: an alert label.
fn is_label_before_timestamp(line: &str, token: &str, end: usize) -> bool {
    token.len() > 1
        && token.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
        && next_token(line.as_bytes(), end)
            .is_some_and(|(start, next_end)| is_timestampish(&line[start..next_end]))
}

/// A host name as headers print it: letters, digits and `.-_/:`, with a letter or digit first.
fn is_host_like(token: &str) -> bool {
    token.len() > 1
        && token.as_bytes()[0].is_ascii_alphanumeric()
        && !token.ends_with(':')
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'/' | b':'))
}

/// What follows a host candidate ending at `end` makes it one: more timestamp parts, another
/// host-like token then a timestamp or component, a component (`proc[pid]:`), or facility words
/// before a level.
fn host_ends_here(line: &str, end: usize) -> bool {
    let Some((start, next_end)) = next_token(line.as_bytes(), end) else {
        return false;
    };
    let next = &line[start..next_end];
    is_timestampish(next)
        || (is_component(next) && next_end < line.len() && !next.starts_with('['))
        || facility_before_level(line, next_end)
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

fn token_end(bytes: &[u8], start: usize) -> usize {
    let mut end = start;
    while end < bytes.len() && !bytes[end].is_ascii_whitespace() {
        end += 1;
    }
    end
}
