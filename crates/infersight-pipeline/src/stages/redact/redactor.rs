//! [`Redactor`]: the compiled redaction engine, shared by the `redact` stage and by any code that
//! is about to log user-provided text.
//!
//! Everything is compiled once in [`Redactor::new`]. Per text, one `RegexSet` pass tells which
//! rules can match at all (most telemetry strings match none and are returned borrowed); only
//! those rules are then run, their candidates validated, overlapping spans merged (the union is
//! replaced, so no fragment of a finding survives) and replaced by placeholders.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use regex::{Regex, RegexSet};

use super::config::{DetectorName, RedactConfig, ReplacementStyle, compile_custom};
use super::detectors::{
    self, Check, KeyHint, Label, PLACEHOLDER_PATTERN, Rule, Source, Span, is_numeric_key,
};
use crate::error::PipelineError;

/// A replacement can make a neighbouring candidate valid (its boundary changed); passes repeat
/// until nothing changes, which is what makes `redact` idempotent. Each pass replaces at least one
/// byte of non-placeholder text, so this bound is never reached on real input.
const MAX_PASSES: usize = 8;

/// Index of the custom patterns' shared hit counter, after the built-in detectors.
const CUSTOM_HITS: usize = DetectorName::ALL.len();

/// Cheap test for JSON keys that name secrets, so JSON without any is not scanned value by value.
const SECRET_KEY_HINT_PATTERN: &str =
    r"(?i)token|secret|passw|api[_\-.]?key|auth|private[_\-.]?key|access[_\-.]?key|bearer|cookie";

pub struct Redactor {
    enabled: bool,
    rules: Vec<Rule>,
    /// One pattern per rule, same order; `None` when there is no rule.
    prefilter: Option<RegexSet>,
    placeholders: Regex,
    secret_keys: Regex,
    style: ReplacementStyle,
    custom_placeholders: Vec<String>,
    /// JSON values under secret-named keys are replaced whole (needs the `api_key` detector).
    redact_secret_keys: bool,
    hits: [AtomicU64; CUSTOM_HITS + 1],
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("enabled", &self.enabled)
            .field("rules", &self.rules.len())
            .field("style", &self.style)
            .finish()
    }
}

impl Redactor {
    /// Validates `config` (every problem at once) and compiles all patterns.
    pub fn new(config: &RedactConfig) -> Result<Self, PipelineError> {
        let problems = config.validate();
        if !problems.is_empty() {
            return Err(PipelineError::InvalidConfig(
                problems
                    .into_iter()
                    .map(|p| format!("redact.{p}"))
                    .collect(),
            ));
        }
        let mut rules = if config.enabled {
            detectors::builtin_rules(&config.detectors)
        } else {
            Vec::new()
        };
        let mut custom_placeholders = Vec::new();
        if config.enabled {
            for (index, pattern) in config.custom.iter().enumerate() {
                let regex = compile_custom(&pattern.regex).map_err(|error| {
                    PipelineError::InvalidConfig(vec![format!(
                        "redact.custom[{index}].regex: invalid regex: {error}"
                    )])
                })?;
                rules.push(Rule {
                    source: Source::Custom(index),
                    check: Check::Custom(index),
                    regex,
                    group: 0,
                });
                custom_placeholders.push(format!("<CUSTOM:{}>", pattern.name));
            }
        }
        let prefilter = if rules.is_empty() {
            None
        } else {
            let set = RegexSet::new(rules.iter().map(|rule| rule.regex.as_str()))
                .map_err(|error| PipelineError::InvalidConfig(vec![format!("redact: {error}")]))?;
            Some(set)
        };
        Ok(Self {
            enabled: config.enabled,
            rules,
            prefilter,
            placeholders: Regex::new(PLACEHOLDER_PATTERN).expect("placeholder pattern compiles"),
            secret_keys: Regex::new(SECRET_KEY_HINT_PATTERN).expect("secret key pattern compiles"),
            style: config.replacement_style,
            custom_placeholders,
            redact_secret_keys: config.enabled && config.detectors.contains(&DetectorName::ApiKey),
            hits: Default::default(),
        })
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Replaces every finding in free text. Returns the input borrowed when nothing was found.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        self.redact_text(text, KeyHint::None)
    }

    /// Redacts every string value of a JSON document, keeping keys, numbers and the layout of
    /// the document (only changed strings are rewritten). Values under secret-named keys
    /// (`password`, `api_key`, `authorization`, `*_token`, `cookie` …) are replaced whole; bare
    /// numbers under quantity keys (`*_bytes`, `*_ms`, `*tokens` …) are not taken for phone or
    /// card numbers. Text that is not valid JSON is redacted as free text.
    pub fn redact_json<'a>(&self, json_text: &'a str) -> Cow<'a, str> {
        let Some(prefilter) = &self.prefilter else {
            return Cow::Borrowed(json_text);
        };
        let might_hit = prefilter.is_match(json_text)
            || json_text.contains("\\u")
            || (self.redact_secret_keys && self.secret_keys.is_match(json_text));
        if !might_hit {
            return Cow::Borrowed(json_text);
        }
        if serde_json::from_str::<serde::de::IgnoredAny>(json_text).is_err() {
            return self.redact(json_text);
        }
        self.redact_json_values(json_text)
    }

    /// Hits per detector since construction (a merged span counts once, for the detector whose
    /// label won); custom patterns share the `custom` counter to keep labels low-cardinality.
    pub fn hits(&self) -> BTreeMap<&'static str, u64> {
        let mut hits: BTreeMap<&'static str, u64> = DetectorName::ALL
            .iter()
            .map(|detector| {
                (
                    detector.as_str(),
                    self.hits[detector.index()].load(Ordering::Relaxed),
                )
            })
            .collect();
        hits.insert("custom", self.hits[CUSTOM_HITS].load(Ordering::Relaxed));
        hits
    }

    /// Total hits of all detectors since construction.
    pub fn total_hits(&self) -> u64 {
        self.hits.iter().map(|h| h.load(Ordering::Relaxed)).sum()
    }

    fn redact_text<'a>(&self, text: &'a str, hint: KeyHint) -> Cow<'a, str> {
        let mut current = Cow::Borrowed(text);
        for _ in 0..MAX_PASSES {
            let spans = self.find_spans(&current, hint);
            if spans.is_empty() {
                break;
            }
            let replaced = self.apply(&current, &spans);
            current = Cow::Owned(replaced);
        }
        current
    }

    /// One string value of a JSON document, with the key it belongs to.
    fn redact_value<'a>(&self, key: Option<&str>, value: &'a str) -> Cow<'a, str> {
        if let Some(key) = key {
            if self.redact_secret_keys
                && let Some(label) = secret_key_label(key)
                && worth_redacting_whole(value)
                && !self.is_placeholder(value)
            {
                self.hits[DetectorName::ApiKey.index()].fetch_add(1, Ordering::Relaxed);
                return Cow::Owned(self.placeholder(label).to_string());
            }
            // Only a bare number is a quantity; text under a quantity key is still scanned fully.
            if is_numeric_key(key) && value.bytes().all(|b| b.is_ascii_digit()) {
                return self.redact_text(value, KeyHint::Numeric);
            }
        }
        self.redact_text(value, KeyHint::None)
    }

    /// True when `value` is exactly one of our placeholders (already redacted).
    fn is_placeholder(&self, value: &str) -> bool {
        self.placeholders
            .find(value)
            .is_some_and(|m| m.len() == value.len())
    }

    fn placeholder(&self, label: Label) -> &str {
        match (self.style, label) {
            (ReplacementStyle::Redacted, _) => "<REDACTED>",
            (ReplacementStyle::Placeholder, Label::Custom(index)) => {
                &self.custom_placeholders[index]
            }
            (ReplacementStyle::Placeholder, label) => label.placeholder(),
        }
    }

    /// Validated, merged, non-overlapping spans in increasing order.
    fn find_spans(&self, text: &str, hint: KeyHint) -> Vec<Span> {
        let Some(prefilter) = &self.prefilter else {
            return Vec::new();
        };
        let matched = prefilter.matches(text);
        if !matched.matched_any() {
            return Vec::new();
        }
        // Our own placeholders are never (part of) a finding: this keeps redaction idempotent.
        let protected: Vec<(usize, usize)> = if text.contains('<') {
            self.placeholders
                .find_iter(text)
                .map(|m| (m.start(), m.end()))
                .collect()
        } else {
            Vec::new()
        };
        let mut spans = Vec::new();
        for index in matched.iter() {
            scan_rule(&self.rules[index], text, hint, &protected, &mut spans);
        }
        merge(spans)
    }

    fn apply(&self, text: &str, spans: &[Span]) -> String {
        let mut out = String::with_capacity(text.len());
        let mut copied = 0;
        for span in spans {
            debug_assert!(copied <= span.start && span.start < span.end);
            out.push_str(&text[copied..span.start]);
            out.push_str(self.placeholder(span.label));
            copied = span.end;
            let counter = match span.source {
                Source::Builtin(detector) => detector.index(),
                Source::Custom(_) => CUSTOM_HITS,
            };
            self.hits[counter].fetch_add(1, Ordering::Relaxed);
        }
        out.push_str(&text[copied..]);
        out
    }

    /// Walks a valid JSON document and rewrites the string values that change.
    fn redact_json_values<'a>(&self, json: &'a str) -> Cow<'a, str> {
        enum Frame<'k> {
            Object {
                expect_key: bool,
                key: Option<Cow<'k, str>>,
            },
            Array {
                key: Option<Cow<'k, str>>,
            },
        }
        let bytes = json.as_bytes();
        let mut stack: Vec<Frame<'a>> = Vec::new();
        let mut out: Option<String> = None;
        let mut copied = 0;
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'"' => {
                    let mut j = i + 1;
                    while bytes[j] != b'"' {
                        j += if bytes[j] == b'\\' { 2 } else { 1 };
                    }
                    let raw = &json[i..=j];
                    let decoded = decode_json_string(raw);
                    match stack.last_mut() {
                        Some(Frame::Object {
                            expect_key: true,
                            key,
                        }) => *key = Some(decoded),
                        frame => {
                            let key = match frame {
                                Some(Frame::Object { key, .. } | Frame::Array { key }) => {
                                    key.as_deref()
                                }
                                None => None,
                            };
                            let redacted = self.redact_value(key, &decoded);
                            if redacted != decoded {
                                let out =
                                    out.get_or_insert_with(|| String::with_capacity(json.len()));
                                out.push_str(&json[copied..i]);
                                let encoded = serde_json::to_string(redacted.as_ref())
                                    .unwrap_or_else(|_| "\"<REDACTED>\"".to_string());
                                out.push_str(&encoded);
                                copied = j + 1;
                            }
                        }
                    }
                    i = j + 1;
                    continue;
                }
                b'{' => stack.push(Frame::Object {
                    expect_key: true,
                    key: None,
                }),
                b'[' => {
                    let key = match stack.last() {
                        Some(Frame::Object { key, .. } | Frame::Array { key }) => key.clone(),
                        None => None,
                    };
                    stack.push(Frame::Array { key });
                }
                b'}' | b']' => {
                    stack.pop();
                }
                b':' => {
                    if let Some(Frame::Object { expect_key, .. }) = stack.last_mut() {
                        *expect_key = false;
                    }
                }
                b',' => {
                    if let Some(Frame::Object { expect_key, .. }) = stack.last_mut() {
                        *expect_key = true;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        match out {
            None => Cow::Borrowed(json),
            Some(mut out) => {
                out.push_str(&json[copied..]);
                Cow::Owned(out)
            }
        }
    }
}

/// Runs one rule over `text`, pushing validated spans that do not touch a placeholder.
fn scan_rule(
    rule: &Rule,
    text: &str,
    hint: KeyHint,
    protected: &[(usize, usize)],
    spans: &mut Vec<Span>,
) {
    let mut locations = rule.regex.capture_locations();
    let mut position = 0;
    while position <= text.len() {
        let found = if rule.group == 0 {
            rule.regex
                .find_at(text, position)
                .map(|m| ((m.start(), m.end()), (m.start(), m.end())))
        } else {
            rule.regex
                .captures_read_at(&mut locations, text, position)
                .and_then(|m| Some(((m.start(), m.end()), locations.get(rule.group)?)))
        };
        let Some((whole, secret)) = found else {
            break;
        };
        let accepted = detectors::validate(rule.check, text, whole, secret, hint).filter(
            |&(start, end, _)| {
                start < end
                    && !protected
                        .iter()
                        .any(|&(p_start, p_end)| start < p_end && p_start < end)
            },
        );
        match accepted {
            Some((start, end, label)) => {
                spans.push(Span {
                    start,
                    end,
                    label,
                    source: rule.source,
                });
                debug_assert!(end > whole.0);
                position = end;
            }
            // A rejected candidate may hide a valid one starting one character later.
            None => match text[whole.0..].chars().next() {
                Some(c) => position = whole.0 + c.len_utf8(),
                None => break,
            },
        }
    }
}

/// Sorts spans and merges overlapping ones into their union, keeping the highest-priority label.
fn merge(mut spans: Vec<Span>) -> Vec<Span> {
    spans.sort_by_key(|span| (span.start, std::cmp::Reverse(span.end)));
    let mut merged: Vec<Span> = Vec::with_capacity(spans.len());
    for span in spans {
        match merged.last_mut() {
            Some(last) if span.start < last.end => {
                last.end = last.end.max(span.end);
                if span.label < last.label {
                    last.label = span.label;
                    last.source = span.source;
                }
            }
            _ => merged.push(span),
        }
    }
    merged
}

fn decode_json_string(raw: &str) -> Cow<'_, str> {
    if raw.contains('\\') {
        Cow::Owned(serde_json::from_str::<String>(raw).unwrap_or_default())
    } else {
        Cow::Borrowed(&raw[1..raw.len() - 1])
    }
}

/// The label for a JSON key that names a secret, e.g. `password`, `x-api-key`,
/// `http.request.header.authorization`, `refresh_token`, `cookie`; `None` for ordinary keys
/// (`max_tokens`, `gen_ai.usage.input_tokens` are counts, not secrets).
fn secret_key_label(key: &str) -> Option<Label> {
    const EXACT: &[&str] = &["token", "auth", "secret", "apikey", "bearer", "credentials"];
    const SUFFIXES: &[&str] = &[
        "api_key",
        "apikey",
        "access_token",
        "auth_token",
        "refresh_token",
        "id_token",
        "session_token",
        "private_token",
        "bearer_token",
        "client_secret",
        "secret_key",
        "private_key",
        "access_key",
        "password",
        "passwd",
        "_secret",
        "authorization",
        "cookie",
    ];
    let key = key.to_ascii_lowercase().replace(['-', '.', ' '], "_");
    let secret = EXACT.contains(&key.as_str()) || SUFFIXES.iter().any(|s| key.ends_with(s));
    if !secret {
        return None;
    }
    let token_like = ["token", "auth", "bearer", "cookie"]
        .iter()
        .any(|w| key.contains(w));
    Some(if token_like {
        Label::Token
    } else {
        Label::ApiKey
    })
}

fn worth_redacting_whole(value: &str) -> bool {
    let value = value.trim();
    value.len() >= 4
        && !["true", "false", "null", "none", "n/a"].contains(&value.to_ascii_lowercase().as_str())
}
