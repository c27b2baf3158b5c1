//! [`Redactor`]: the compiled redaction engine, shared by the `redact` stage and by any code that
//! is about to log user-provided text.
//!
//! Everything is compiled once in [`Redactor::new`]: the default detector set and one set per
//! path rule. Per text, one `RegexSet` pass tells which detectors can match at all (most telemetry
//! strings match none and are returned borrowed); only those are then run, their candidates
//! validated, overlapping spans merged (the union is replaced, so no fragment of a finding
//! survives) and replaced by placeholders or keyed hashes.
//!
//! Column values are redacted through [`Redactor::redact_field`], which resolves the path rules
//! per attribute and reports every replacement to an audit callback (where and how, never what).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use hmac::{Hmac, Mac};
use infersight_model::scan::json_string_end;
use regex::{Regex, RegexSet};
use sha2::Sha256;

use super::config::{
    DetectorName, DetectorRef, MIN_SECRET_BYTES, PathPattern, RedactAction, RedactConfig,
    ReplacementStyle, compile_custom, read_secret,
};
use super::detectors::{
    self, Check, KeyHint, Label, PLACEHOLDER_PATTERN, Rule, Source, Span, is_numeric_key,
    is_version_key,
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

/// Hex digits of the truncated HMAC-SHA256 in a hash placeholder: 64 bits, enough that two
/// distinct values of one fleet practically never share a hash, short enough to read.
pub const HASH_HEX_LEN: usize = 16;

/// One compiled detector set: the section's defaults or a path rule's `detectors`.
#[derive(Debug, Clone)]
struct Matcher {
    rules: Vec<Rule>,
    /// One pattern per rule, same order; `None` when there is no rule.
    prefilter: Option<RegexSet>,
    /// JSON values under secret-named keys are replaced whole (needs the `api_key` detector).
    secret_keys: bool,
    /// Every rule is built in, so a finding inside one string is also a match of strings joined
    /// by `\n` (see [`detectors::builtin_rules`]); custom patterns may use anchors and `\b`.
    builtin_only: bool,
}

impl Matcher {
    fn new(rules: Vec<Rule>, secret_keys: bool) -> Result<Self, PipelineError> {
        let prefilter = if rules.is_empty() {
            None
        } else {
            let set = RegexSet::new(rules.iter().map(|rule| rule.regex.as_str()))
                .map_err(|error| PipelineError::InvalidConfig(vec![format!("redact: {error}")]))?;
            Some(set)
        };
        let builtin_only = rules
            .iter()
            .all(|rule| matches!(rule.source, Source::Builtin(_)));
        Ok(Self {
            rules,
            prefilter,
            secret_keys,
            builtin_only,
        })
    }

    fn empty() -> Self {
        Self {
            rules: Vec::new(),
            prefilter: None,
            secret_keys: false,
            builtin_only: true,
        }
    }
}

/// A `[[stages.redact.rules]]` entry, compiled.
#[derive(Debug)]
struct PathPolicy {
    /// The configured `path`, reported as the audit's `rule`.
    path: String,
    pattern: PathPattern,
    action: RedactAction,
    matcher: Matcher,
}

/// Who decided what happens to a value: the section's defaults or the path rule at this index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Decider {
    Default,
    Rule(usize),
}

/// One replacement, for the audit: where and how, never the value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AuditEvent<'a> {
    /// Attribute key path inside a JSON value; `None` for the column value itself.
    pub key_path: Option<&'a str>,
    pub decider: Decider,
    /// `None` for `drop` and for whole values hashed without a finding.
    pub detector: Option<Source>,
    pub action: RedactAction,
}

pub(crate) type Audit<'f> = &'f mut dyn FnMut(AuditEvent<'_>);

/// How [`Redactor::redact_field`] tells, for a JSON value of a column without path rules, that no
/// finding is possible before validating and walking it. Not configuration: the choice exists so
/// tests and benchmarks can compare the screens on the same input.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JsonScreen {
    /// One pass over the document that hands its string values (decoded) and their keys to the
    /// detectors; numbers, literals and keys are never scanned, exactly as in the walk. Skips a
    /// document only when the walk would change nothing and report nothing.
    #[default]
    StringLeaves,
    /// The former screen, kept as the benchmark baseline: the prefilter and the secret-key regex
    /// over the whole raw document. Numbers such as `"time_to_first_token":0.1819434781140512`
    /// pass it, and it misses findings the walk makes (`"x\n10.1.2.3"` hides the address behind
    /// the escape, `credentials` keys, anchored custom patterns). Never use it in production.
    WholeDocument,
    /// No screen: every document is validated and walked (the reference of equivalence tests).
    Off,
}

/// What the string-leaf screen concluded about a document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Screened {
    /// Valid JSON in which no string can hold a finding: the walk would change nothing.
    Clean,
    /// Valid JSON (the screen read all of it) in which some string might hold a finding.
    Valid,
    /// Not screened to the end (a possible finding stopped it, or the syntax is outside what the
    /// screen reads): validate and walk as without a screen.
    Unknown,
}

/// Nesting the screen follows; deeper documents are left to validation and the walk.
const SCREEN_MAX_DEPTH: usize = 64;

/// Above this many bytes the joined-strings buffer is not kept for the next document.
const SCREEN_BUFFER_KEEP_BYTES: usize = 64 * 1024;

thread_local! {
    /// The string values of the document being screened, each followed by `\n`; reused so the
    /// screen does not allocate per document.
    static JOINED_STRINGS: std::cell::RefCell<String> = const {
        std::cell::RefCell::new(String::new())
    };
}

/// What became of one column value.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FieldOutcome<'a> {
    /// The value, borrowed when nothing changed.
    Value(Cow<'a, str>),
    /// A `drop` rule removed the whole value.
    Dropped,
}

pub struct Redactor {
    enabled: bool,
    default: Matcher,
    policies: Vec<PathPolicy>,
    placeholders: Regex,
    secret_keys: Regex,
    style: ReplacementStyle,
    custom_names: Vec<String>,
    custom_placeholders: Vec<String>,
    /// Keyed with the secret from `secret_env`; present when some rule hashes.
    hasher: Option<Hmac<Sha256>>,
    json_screen: JsonScreen,
    hits: [AtomicU64; CUSTOM_HITS + 1],
    hashed: AtomicU64,
    dropped: AtomicU64,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // never the secret
        f.debug_struct("Redactor")
            .field("enabled", &self.enabled)
            .field("rules", &self.default.rules.len())
            .field("path_rules", &self.policies.len())
            .field("keyed_hash", &self.hasher.is_some())
            .field("style", &self.style)
            .finish()
    }
}

impl Redactor {
    /// Validates `config` (every problem at once), reads the hash secret and compiles all
    /// patterns.
    pub fn new(config: &RedactConfig) -> Result<Self, PipelineError> {
        let secret = match config.secret_env.as_str() {
            name if !name.is_empty() && config.enabled && config.has_hash_rules() => {
                read_secret(name).map(Some).map_err(|problem| {
                    let mut problems = config.validate_without_secret();
                    problems.push(format!("secret_env: {problem}"));
                    PipelineError::InvalidConfig(
                        problems
                            .into_iter()
                            .map(|p| format!("redact.{p}"))
                            .collect(),
                    )
                })?
            }
            _ => None,
        };
        Self::with_secret(config, secret.as_deref())
    }

    /// [`Redactor::new`] with the hash secret given instead of read from `secret_env` (tests,
    /// embedders that manage their own secrets).
    pub fn with_secret(
        config: &RedactConfig,
        secret: Option<&[u8]>,
    ) -> Result<Self, PipelineError> {
        let problems = config.validate_without_secret();
        if !problems.is_empty() {
            return Err(PipelineError::InvalidConfig(
                problems
                    .into_iter()
                    .map(|p| format!("redact.{p}"))
                    .collect(),
            ));
        }
        let mut all_rules = detectors::builtin_rules(&DetectorName::ALL);
        for (index, pattern) in config.custom.iter().enumerate() {
            let regex = compile_custom(&pattern.regex).map_err(|error| {
                PipelineError::InvalidConfig(vec![format!(
                    "redact.custom[{index}].regex: invalid regex: {error}"
                )])
            })?;
            all_rules.push(Rule {
                source: Source::Custom(index),
                check: Check::Custom(index),
                regex,
                group: 0,
            });
        }
        let select = |wanted: &dyn Fn(Source) -> bool| -> Result<Matcher, PipelineError> {
            let rules: Vec<Rule> = all_rules
                .iter()
                .filter(|rule| wanted(rule.source))
                .cloned()
                .collect();
            let secret_keys = wanted(Source::Builtin(DetectorName::ApiKey));
            Matcher::new(rules, secret_keys)
        };
        let default_wants = |source: Source| match source {
            Source::Builtin(detector) => config.detectors.contains(&detector),
            Source::Custom(_) => true,
        };
        let (default, policies) = if config.enabled {
            let default = select(&default_wants)?;
            let mut policies = Vec::with_capacity(config.rules.len());
            for (index, rule) in config.rules.iter().enumerate() {
                let pattern = PathPattern::parse(&rule.path).map_err(|problem| {
                    PipelineError::InvalidConfig(vec![format!(
                        "redact.rules[{index}].path: {problem}"
                    )])
                })?;
                let matcher = match (&rule.detectors, rule.action) {
                    (_, RedactAction::Drop | RedactAction::Keep) => Matcher::empty(),
                    (None, _) => default.clone(),
                    (Some(names), _) => {
                        let refs: Vec<DetectorRef> = names
                            .iter()
                            .filter_map(|name| config.detector_by_name(name))
                            .collect();
                        select(&|source| match source {
                            Source::Builtin(detector) => {
                                refs.contains(&DetectorRef::Builtin(detector))
                            }
                            Source::Custom(i) => refs.contains(&DetectorRef::Custom(i)),
                        })?
                    }
                };
                policies.push(PathPolicy {
                    path: rule.path.clone(),
                    pattern,
                    action: rule.action,
                    matcher,
                });
            }
            (default, policies)
        } else {
            (Matcher::empty(), Vec::new())
        };
        let hashes = policies.iter().any(|p| p.action == RedactAction::Hash);
        let hasher = match secret {
            Some(secret) if hashes => {
                if secret.len() < MIN_SECRET_BYTES {
                    return Err(PipelineError::InvalidConfig(vec![format!(
                        "redact.secret_env: the hash secret must have at least \
                         {MIN_SECRET_BYTES} bytes"
                    )]));
                }
                let hasher = <Hmac<Sha256> as Mac>::new_from_slice(secret).map_err(|_| {
                    PipelineError::InvalidConfig(vec![
                        "redact.secret_env: the secret cannot key HMAC-SHA256".to_string(),
                    ])
                })?;
                Some(hasher)
            }
            None if hashes => {
                return Err(PipelineError::InvalidConfig(vec![
                    "redact.secret_env: `hash` rules need a secret".to_string(),
                ]));
            }
            _ => None,
        };
        Ok(Self {
            enabled: config.enabled,
            default,
            policies,
            placeholders: Regex::new(PLACEHOLDER_PATTERN).expect("placeholder pattern compiles"),
            secret_keys: Regex::new(SECRET_KEY_HINT_PATTERN).expect("secret key pattern compiles"),
            style: config.replacement_style,
            custom_names: config.custom.iter().map(|c| c.name.clone()).collect(),
            custom_placeholders: config
                .custom
                .iter()
                .map(|c| format!("<CUSTOM:{}>", c.name))
                .collect(),
            hasher,
            json_screen: JsonScreen::default(),
            hits: Default::default(),
            hashed: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        })
    }

    /// This redactor with another [`JsonScreen`] (tests and benchmarks; the default is exact and
    /// the fastest).
    #[doc(hidden)]
    #[must_use]
    pub fn with_json_screen(mut self, screen: JsonScreen) -> Self {
        self.json_screen = screen;
        self
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Replaces every finding of the default detectors in free text (no path rules apply).
    /// Returns the input borrowed when nothing was found.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        self.text(
            text,
            KeyHint::None,
            &self.default,
            RedactAction::Mask,
            true,
            &mut |_| {},
        )
    }

    /// Redacts every string value of a JSON document with the default detectors, keeping keys,
    /// numbers and the layout of the document (only changed strings are rewritten). Values under
    /// secret-named keys (`password`, `api_key`, `authorization`, `*_token`, `cookie` …) are
    /// replaced whole; bare numbers under quantity keys (`*_bytes`, `*_ms`, `*tokens` …) are not
    /// taken for phone or card numbers. Text that is not valid JSON is redacted as free text.
    pub fn redact_json<'a>(&self, json_text: &'a str) -> Cow<'a, str> {
        match self.redact_field(json_text, true, &[], &mut |_| {}) {
            FieldOutcome::Value(value) => value,
            // no rules, so nothing is dropped
            FieldOutcome::Dropped => Cow::Borrowed(json_text),
        }
    }

    /// The keyed hash of `value` as it appears in placeholders: the first [`HASH_HEX_LEN`] hex
    /// digits of HMAC-SHA256(secret, value). `None` when no `hash` rule is configured.
    pub fn keyed_hash(&self, value: &str) -> Option<String> {
        let mut mac = self.hasher.clone()?;
        mac.update(value.as_bytes());
        let digest = mac.finalize().into_bytes();
        let hex: String = digest[..HASH_HEX_LEN / 2]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Some(hex)
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

    /// Values and findings replaced by keyed hashes since construction.
    pub fn hashed(&self) -> u64 {
        self.hashed.load(Ordering::Relaxed)
    }

    /// Values removed by `drop` rules since construction.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Indices of the path rules that can apply to values of `table.column`, in order.
    pub(crate) fn column_rules(&self, table: &str, column: &str) -> Vec<usize> {
        self.policies
            .iter()
            .enumerate()
            .filter(|(_, policy)| policy.pattern.covers_column(table, column))
            .map(|(index, _)| index)
            .collect()
    }

    /// The configured `path` of a rule (the audit's `rule`), `default` for the defaults.
    pub(crate) fn decider_name(&self, decider: Decider) -> &str {
        match decider {
            Decider::Default => "default",
            Decider::Rule(index) => &self.policies[index].path,
        }
    }

    /// The audit's name of a detector: `email`, …, `custom:<name>`.
    pub(crate) fn source_name(&self, source: Source) -> Cow<'static, str> {
        match source {
            Source::Builtin(detector) => Cow::Borrowed(detector.as_str()),
            Source::Custom(index) => Cow::Owned(format!("custom:{}", self.custom_names[index])),
        }
    }

    /// Redacts free text without counting hits (for names the audit itself stores).
    pub(crate) fn redact_quietly<'a>(&self, text: &'a str) -> Cow<'a, str> {
        self.text(
            text,
            KeyHint::None,
            &self.default,
            RedactAction::Mask,
            false,
            &mut |_| {},
        )
    }

    /// Redacts one column value under the path rules `rules` (from [`Redactor::column_rules`]):
    /// as a JSON document when `as_json` and it parses, else as free text. Every replacement is
    /// reported to `audit`.
    pub(crate) fn redact_field<'a>(
        &self,
        value: &'a str,
        as_json: bool,
        rules: &[usize],
        audit: Audit<'_>,
    ) -> FieldOutcome<'a> {
        // only column rules match the top-level value; a `drop` there removes all of it
        let whole = self.resolve(rules, None);
        let (action, matcher) = self.action_of(whole);
        if action == RedactAction::Drop {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            audit(AuditEvent {
                key_path: None,
                decider: whole,
                detector: None,
                action: RedactAction::Drop,
            });
            return FieldOutcome::Dropped;
        }
        // a `keep` column rule listed before every attribute rule keeps the value outright
        let keep_outright = match whole {
            Decider::Rule(index) => action == RedactAction::Keep && rules.first() == Some(&index),
            Decider::Default => false,
        };
        if keep_outright || (action == RedactAction::Keep && !as_json) {
            return FieldOutcome::Value(Cow::Borrowed(value));
        }
        // set when the screen read the whole document, which is then known to be valid JSON
        let mut validated = false;
        if as_json && rules.is_empty() && self.json_screen != JsonScreen::Off {
            // the fast path of unconfigured columns: most documents cannot hold any finding
            let Some(prefilter) = &matcher.prefilter else {
                return FieldOutcome::Value(Cow::Borrowed(value));
            };
            if self.json_screen == JsonScreen::WholeDocument {
                let might_hit = prefilter.is_match(value)
                    || value.contains("\\u")
                    || (matcher.secret_keys && self.secret_keys.is_match(value));
                if !might_hit {
                    return FieldOutcome::Value(Cow::Borrowed(value));
                }
            } else {
                match screen_string_leaves(value, matcher, prefilter) {
                    Screened::Clean => return FieldOutcome::Value(Cow::Borrowed(value)),
                    Screened::Valid => validated = true,
                    Screened::Unknown => {}
                }
            }
        }
        if as_json && (validated || serde_json::from_str::<serde::de::IgnoredAny>(value).is_ok()) {
            let mut walk = JsonWalk {
                redactor: self,
                json: value,
                rules,
                audit,
                path: String::new(),
                out: String::with_capacity(value.len() + 16),
                changed: false,
            };
            let end = walk.value(0, None, None);
            debug_assert_eq!(value[end..].trim(), "");
            return if walk.changed {
                walk.out.push_str(&value[end..]);
                FieldOutcome::Value(Cow::Owned(walk.out))
            } else {
                FieldOutcome::Value(Cow::Borrowed(value))
            };
        }
        // free text (or JSON that does not parse): only column rules apply
        let redacted = match action {
            RedactAction::Mask | RedactAction::Hash => {
                self.text(value, KeyHint::None, matcher, action, true, &mut |source| {
                    audit(AuditEvent {
                        key_path: None,
                        decider: whole,
                        detector: Some(source),
                        action,
                    });
                })
            }
            RedactAction::Keep | RedactAction::Drop => Cow::Borrowed(value),
        };
        FieldOutcome::Value(redacted)
    }

    /// The first of `rules` matching the value at `key_path`, else the defaults.
    fn resolve(&self, rules: &[usize], key_path: Option<&str>) -> Decider {
        rules
            .iter()
            .copied()
            .find(|&index| self.policies[index].pattern.matches_key(key_path))
            .map_or(Decider::Default, Decider::Rule)
    }

    fn action_of(&self, decider: Decider) -> (RedactAction, &Matcher) {
        match decider {
            Decider::Default => (RedactAction::Mask, &self.default),
            Decider::Rule(index) => {
                let policy = &self.policies[index];
                (policy.action, &policy.matcher)
            }
        }
    }

    /// True when the rule names an attribute (not a whole column): its `hash` hashes whole values.
    fn is_attribute_rule(&self, decider: Decider) -> bool {
        matches!(decider, Decider::Rule(index) if self.policies[index].pattern.key.is_some())
    }

    /// Replaces every finding of `matcher` in `text` (`action` is `Mask` or `Hash`), calling
    /// `found` once per replaced span.
    fn text<'a>(
        &self,
        text: &'a str,
        hint: KeyHint,
        matcher: &Matcher,
        action: RedactAction,
        count_hits: bool,
        found: &mut dyn FnMut(Source),
    ) -> Cow<'a, str> {
        let mut current = Cow::Borrowed(text);
        for _ in 0..MAX_PASSES {
            let spans = self.find_spans(matcher, &current, hint);
            if spans.is_empty() {
                break;
            }
            let replaced = self.apply(&current, &spans, action, count_hits, found);
            current = Cow::Owned(replaced);
        }
        current
    }

    /// One string value of a JSON document, with the key it belongs to.
    fn leaf<'a>(
        &self,
        key: Option<&str>,
        value: &'a str,
        matcher: &Matcher,
        action: RedactAction,
        found: &mut dyn FnMut(Source),
    ) -> Cow<'a, str> {
        if let Some(key) = key {
            if matcher.secret_keys
                && let Some(label) = secret_key_label(key)
                && worth_redacting_whole(value)
                && !self.is_placeholder(value)
            {
                self.hits[DetectorName::ApiKey.index()].fetch_add(1, Ordering::Relaxed);
                found(Source::Builtin(DetectorName::ApiKey));
                return Cow::Owned(self.replacement(label, value, action));
            }
            // Only a bare number is a quantity; text under a quantity key is still scanned fully.
            if is_numeric_key(key) && value.bytes().all(|b| b.is_ascii_digit()) {
                return self.text(value, KeyHint::Numeric, matcher, action, true, found);
            }
            if is_version_key(key) {
                return self.text(value, KeyHint::Version, matcher, action, true, found);
            }
        }
        self.text(value, KeyHint::None, matcher, action, true, found)
    }

    /// A whole attribute value under an attribute `hash` rule: `<LABEL:h:…>` when the value is
    /// exactly one finding of the rule's detectors (so it joins with the same finding hashed in
    /// free text), `<VALUE:h:…>` otherwise. Returns the detector of that finding.
    fn hash_whole(&self, value: &str, matcher: &Matcher) -> (String, Option<Source>) {
        let trimmed = value.trim();
        let spans = self.find_spans(matcher, trimmed, KeyHint::None);
        self.hashed.fetch_add(1, Ordering::Relaxed);
        match spans.as_slice() {
            [only] if only.start == 0 && only.end == trimmed.len() => (
                self.replacement(only.label, trimmed, RedactAction::Hash),
                Some(only.source),
            ),
            _ => (self.hash_placeholder("VALUE", trimmed), None),
        }
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

    /// What replaces `finding`: its placeholder, or for `hash` its keyed-hash placeholder.
    fn replacement(&self, label: Label, finding: &str, action: RedactAction) -> String {
        if action != RedactAction::Hash {
            return self.placeholder(label).to_string();
        }
        match label {
            Label::Custom(index) => {
                self.hash_placeholder(&format!("CUSTOM:{}", self.custom_names[index]), finding)
            }
            label => self.hash_placeholder(label.hash_name(), finding),
        }
    }

    /// `<NAME:h:1a2b3c4d5e6f7a8b>`; `<REDACTED:h:…>` with `replacement_style = "redacted"`.
    fn hash_placeholder(&self, name: &str, value: &str) -> String {
        let name = match self.style {
            ReplacementStyle::Redacted => "REDACTED",
            ReplacementStyle::Placeholder => name,
        };
        match self.keyed_hash(value) {
            Some(hex) => format!("<{name}:h:{hex}>"),
            // validation guarantees a secret for hash rules; never fall back to the value
            None => format!("<{name}>"),
        }
    }

    /// Validated, merged, non-overlapping spans in increasing order.
    fn find_spans(&self, matcher: &Matcher, text: &str, hint: KeyHint) -> Vec<Span> {
        let Some(prefilter) = &matcher.prefilter else {
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
            scan_rule(&matcher.rules[index], text, hint, &protected, &mut spans);
        }
        merge(spans)
    }

    fn apply(
        &self,
        text: &str,
        spans: &[Span],
        action: RedactAction,
        count_hits: bool,
        found: &mut dyn FnMut(Source),
    ) -> String {
        let mut out = String::with_capacity(text.len());
        let mut copied = 0;
        for span in spans {
            debug_assert!(copied <= span.start && span.start < span.end);
            out.push_str(&text[copied..span.start]);
            out.push_str(&self.replacement(span.label, &text[span.start..span.end], action));
            copied = span.end;
            if count_hits {
                let counter = match span.source {
                    Source::Builtin(detector) => detector.index(),
                    Source::Custom(_) => CUSTOM_HITS,
                };
                self.hits[counter].fetch_add(1, Ordering::Relaxed);
                if action == RedactAction::Hash {
                    self.hashed.fetch_add(1, Ordering::Relaxed);
                }
                found(span.source);
            }
        }
        out.push_str(&text[copied..]);
        out
    }
}

/// Screens a JSON document under the defaults (no path rules) by what the walk would scan: the
/// decoded string values, with the key each is passed to [`Redactor::leaf`] under. A string can
/// change only if the value matches the prefilter or its key names a secret; numbers, literals
/// and keys are copied by the walk and so never looked at here.
fn screen_string_leaves(json: &str, matcher: &Matcher, prefilter: &RegexSet) -> Screened {
    let secret_key = |key: Option<&str>| matcher.secret_keys && key.is_some_and(is_secret_key);
    if !matcher.builtin_only {
        // custom patterns may be anchored: each string is matched on its own
        let scanned =
            LeafScan::new(json).run(&mut |key, value| secret_key(key) || prefilter.is_match(value));
        return match scanned {
            Ok(()) => Screened::Clean,
            Err(_) => Screened::Unknown,
        };
    }
    JOINED_STRINGS.with_borrow_mut(|joined| {
        joined.clear();
        // One prefilter pass over all strings instead of one per string. Built-in patterns have
        // no assertion but a start-of-text alternative that `\n` also satisfies, so a match in
        // one string is a match of the joined text; a match across strings only costs the walk.
        let scanned = LeafScan::new(json).run(&mut |key, value| {
            if secret_key(key) {
                return true;
            }
            joined.push_str(value);
            joined.push('\n');
            false
        });
        let screened = match scanned {
            Ok(()) if prefilter.is_match(joined) => Screened::Valid,
            Ok(()) => Screened::Clean,
            Err(_) => Screened::Unknown,
        };
        if joined.capacity() > SCREEN_BUFFER_KEEP_BYTES {
            *joined = String::new();
        }
        screened
    })
}

/// Why [`LeafScan`] stopped before the end of the document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ScanStop {
    /// The visitor found a string that might hold a finding.
    MightHit,
    /// Syntax the scan does not read: not JSON, a top level that is not an object or array (the
    /// walk starts at byte 0), or nesting deeper than [`SCREEN_MAX_DEPTH`].
    Unread,
}

/// A syntax pass over a JSON document that hands each string value to a visitor with the key the
/// walk would give it: the member's key, inherited by the elements of an array. It accepts a
/// subset of what serde_json accepts (same numbers, literals, escapes and whitespace; no control
/// characters in strings), so a document it reads to the end is valid JSON.
struct LeafScan<'a> {
    json: &'a str,
    at: usize,
}

impl<'a> LeafScan<'a> {
    fn new(json: &'a str) -> Self {
        Self { json, at: 0 }
    }

    /// Reads the whole document; `visit` returns true to stop at a string that might hit.
    fn run(mut self, visit: &mut dyn FnMut(Option<&str>, &str) -> bool) -> Result<(), ScanStop> {
        if !matches!(self.peek(), Some(b'{' | b'[')) {
            return Err(ScanStop::Unread);
        }
        self.value(None, 0, visit)?;
        self.skip_whitespace();
        if self.at == self.json.len() {
            Ok(())
        } else {
            Err(ScanStop::Unread)
        }
    }

    fn peek(&self) -> Option<u8> {
        self.json.as_bytes().get(self.at).copied()
    }

    /// JSON whitespace only (the walk's `is_ascii_whitespace` also takes form feeds, which
    /// serde_json rejects).
    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), ScanStop> {
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(ScanStop::Unread)
        }
    }

    fn value(
        &mut self,
        key: Option<&str>,
        depth: usize,
        visit: &mut dyn FnMut(Option<&str>, &str) -> bool,
    ) -> Result<(), ScanStop> {
        match self.peek() {
            Some(b'{') => self.object(depth + 1, visit),
            Some(b'[') => self.array(key, depth + 1, visit),
            Some(b'"') => {
                let value = self.string()?;
                if visit(key, &value) {
                    Err(ScanStop::MightHit)
                } else {
                    Ok(())
                }
            }
            Some(b't') => self.literal("true"),
            Some(b'f') => self.literal("false"),
            Some(b'n') => self.literal("null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(ScanStop::Unread),
        }
    }

    fn object(
        &mut self,
        depth: usize,
        visit: &mut dyn FnMut(Option<&str>, &str) -> bool,
    ) -> Result<(), ScanStop> {
        if depth > SCREEN_MAX_DEPTH {
            return Err(ScanStop::Unread);
        }
        self.at += 1;
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(());
        }
        loop {
            if self.peek() != Some(b'"') {
                return Err(ScanStop::Unread);
            }
            let key = self.string()?;
            self.skip_whitespace();
            self.expect(b':')?;
            self.skip_whitespace();
            self.value(Some(&key), depth, visit)?;
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => {
                    self.at += 1;
                    self.skip_whitespace();
                }
                Some(b'}') => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(ScanStop::Unread),
            }
        }
    }

    fn array(
        &mut self,
        key: Option<&str>,
        depth: usize,
        visit: &mut dyn FnMut(Option<&str>, &str) -> bool,
    ) -> Result<(), ScanStop> {
        if depth > SCREEN_MAX_DEPTH {
            return Err(ScanStop::Unread);
        }
        self.at += 1;
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(());
        }
        loop {
            self.value(key, depth, visit)?;
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => {
                    self.at += 1;
                    self.skip_whitespace();
                }
                Some(b']') => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(ScanStop::Unread),
            }
        }
    }

    /// The string at the cursor (its opening quote), decoded exactly as the walk decodes it.
    fn string(&mut self) -> Result<Cow<'a, str>, ScanStop> {
        let start = self.at;
        // a control character, an unknown escape or the end of the text stops the scan
        let end = json_string_end(self.json.as_bytes(), start + 1).ok_or(ScanStop::Unread)?;
        self.at = end.quote + 1;
        let raw = &self.json[start..self.at];
        Ok(if end.escaped {
            decode_json_string(raw)
        } else {
            Cow::Borrowed(&raw[1..raw.len() - 1])
        })
    }

    fn literal(&mut self, word: &str) -> Result<(), ScanStop> {
        if self.json.as_bytes()[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            Ok(())
        } else {
            Err(ScanStop::Unread)
        }
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, the grammar serde_json checks.
    fn number(&mut self) -> Result<(), ScanStop> {
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek() {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(ScanStop::Unread),
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            self.some_digits()?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            self.some_digits()?;
        }
        Ok(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.at += 1;
        }
    }

    fn some_digits(&mut self) -> Result<(), ScanStop> {
        let start = self.at;
        self.digits();
        if self.at > start {
            Ok(())
        } else {
            Err(ScanStop::Unread)
        }
    }
}

/// One pass over a valid JSON document that copies it to `out`, applying the path rules per
/// value: `drop` removes a member (its comma too), attribute `hash` replaces a whole value, `keep`
/// leaves strings alone, `mask`/`hash` rewrite findings in strings. Unchanged parts keep their
/// exact bytes. Recursion depth is bounded by serde_json's nesting limit, checked before.
struct JsonWalk<'r, 'a, 'f> {
    redactor: &'r Redactor,
    json: &'a str,
    rules: &'r [usize],
    audit: Audit<'f>,
    /// Key path of the value being walked, keys joined by `.`; empty at the top level.
    path: String,
    out: String,
    changed: bool,
}

impl JsonWalk<'_, '_, '_> {
    fn key_path(&self) -> Option<&str> {
        (!self.path.is_empty()).then_some(self.path.as_str())
    }

    fn skip_ws(&self, mut i: usize) -> usize {
        let bytes = self.json.as_bytes();
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    }

    /// Index after the string starting at `i` (its opening quote). The document is valid JSON
    /// (checked before the walk), so the string has an end.
    fn string_end(&self, i: usize) -> usize {
        json_string_end(self.json.as_bytes(), i + 1).map_or(self.json.len(), |end| end.quote + 1)
    }

    /// Index after the value starting at `i`.
    fn value_end(&self, i: usize) -> usize {
        let bytes = self.json.as_bytes();
        match bytes[i] {
            b'"' => self.string_end(i),
            b'{' | b'[' => {
                let mut depth = 0usize;
                let mut j = i;
                loop {
                    match bytes[j] {
                        b'"' => {
                            j = self.string_end(j);
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                return j + 1;
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
            }
            _ => {
                let mut j = i;
                while j < bytes.len()
                    && !matches!(bytes[j], b',' | b']' | b'}')
                    && !bytes[j].is_ascii_whitespace()
                {
                    j += 1;
                }
                j
            }
        }
    }

    fn report(&mut self, decider: Decider, detector: Option<Source>, action: RedactAction) {
        let key_path = (!self.path.is_empty()).then_some(self.path.as_str());
        (self.audit)(AuditEvent {
            key_path,
            decider,
            detector,
            action,
        });
    }

    /// Walks the value at `start`; `decided` is the rule already resolved for it (members resolve
    /// before deciding whether to drop). Returns the index after the value.
    fn value(&mut self, start: usize, key: Option<&str>, decided: Option<Decider>) -> usize {
        let decider = decided.unwrap_or_else(|| self.redactor.resolve(self.rules, self.key_path()));
        let (action, matcher) = self.redactor.action_of(decider);
        let bytes = self.json.as_bytes();
        let first = bytes[start];
        let scalar_literal = matches!(first, b't' | b'f' | b'n');
        if action == RedactAction::Drop {
            // not reached: members are dropped by `object`, the top level by `redact_field`, and
            // an array element shares the path of its array; `null` is the safe answer anyway
            let end = self.value_end(start);
            self.redactor.dropped.fetch_add(1, Ordering::Relaxed);
            self.report(decider, None, RedactAction::Drop);
            self.out.push_str("null");
            self.changed = true;
            return end;
        }
        if action == RedactAction::Hash
            && self.redactor.is_attribute_rule(decider)
            && !scalar_literal
        {
            let end = self.value_end(start);
            let raw = &self.json[start..end];
            let value = if first == b'"' {
                decode_json_string(raw)
            } else {
                Cow::Borrowed(raw)
            };
            if self.redactor.is_placeholder(&value) {
                self.out.push_str(raw);
            } else {
                let (hashed, detector) = self.redactor.hash_whole(&value, matcher);
                self.report(decider, detector, RedactAction::Hash);
                self.out.push_str(
                    &serde_json::to_string(&hashed).unwrap_or_else(|_| "\"<REDACTED>\"".into()),
                );
                self.changed = true;
            }
            return end;
        }
        match first {
            b'{' => self.object(start),
            b'[' => self.array(start, key),
            b'"' => {
                let end = self.string_end(start);
                let raw = &self.json[start..end];
                let decoded = decode_json_string(raw);
                let redacted = if action == RedactAction::Keep {
                    Cow::Borrowed(decoded.as_ref())
                } else {
                    let mut events = Vec::new();
                    let redacted = self
                        .redactor
                        .leaf(key, &decoded, matcher, action, &mut |s| {
                            events.push(s);
                        });
                    for source in events {
                        self.report(decider, Some(source), action);
                    }
                    redacted
                };
                if redacted != decoded {
                    let encoded = serde_json::to_string(redacted.as_ref())
                        .unwrap_or_else(|_| "\"<REDACTED>\"".to_string());
                    self.out.push_str(&encoded);
                    self.changed = true;
                } else {
                    self.out.push_str(raw);
                }
                end
            }
            _ => {
                let end = self.value_end(start);
                self.out.push_str(&self.json[start..end]);
                end
            }
        }
    }

    fn object(&mut self, start: usize) -> usize {
        let bytes = self.json.as_bytes();
        self.out.push('{');
        let mut i = start + 1;
        let mut kept = 0usize;
        loop {
            let ws_start = i;
            i = self.skip_ws(i);
            if bytes[i] == b'}' {
                self.out.push_str(&self.json[ws_start..=i]);
                return i + 1;
            }
            let key_end = self.string_end(i);
            let key = decode_json_string(&self.json[i..key_end]);
            let colon = self.skip_ws(key_end);
            debug_assert_eq!(bytes[colon], b':');
            let value_start = self.skip_ws(colon + 1);
            let path_len = self.path.len();
            if !self.path.is_empty() {
                self.path.push('.');
            }
            self.path.push_str(&key);
            let decider = self.redactor.resolve(self.rules, self.key_path());
            let (action, _) = self.redactor.action_of(decider);
            let (value_end, dropped) = if action == RedactAction::Drop {
                self.redactor.dropped.fetch_add(1, Ordering::Relaxed);
                self.report(decider, None, RedactAction::Drop);
                self.changed = true;
                (self.value_end(value_start), true)
            } else {
                if kept > 0 {
                    self.out.push(',');
                }
                kept += 1;
                self.out.push_str(&self.json[ws_start..value_start]);
                (self.value(value_start, Some(&key), Some(decider)), false)
            };
            self.path.truncate(path_len);
            let after = self.skip_ws(value_end);
            if !dropped {
                self.out.push_str(&self.json[value_end..after]);
            }
            match bytes[after] {
                b',' => i = after + 1,
                _ => {
                    debug_assert_eq!(bytes[after], b'}');
                    self.out.push('}');
                    return after + 1;
                }
            }
        }
    }

    fn array(&mut self, start: usize, key: Option<&str>) -> usize {
        let bytes = self.json.as_bytes();
        self.out.push('[');
        let mut i = start + 1;
        let mut first = true;
        loop {
            let ws_start = i;
            i = self.skip_ws(i);
            if bytes[i] == b']' {
                self.out.push_str(&self.json[ws_start..=i]);
                return i + 1;
            }
            if !first {
                self.out.push(',');
            }
            first = false;
            self.out.push_str(&self.json[ws_start..i]);
            let value_end = self.value(i, key, None);
            let after = self.skip_ws(value_end);
            self.out.push_str(&self.json[value_end..after]);
            match bytes[after] {
                b',' => i = after + 1,
                _ => {
                    debug_assert_eq!(bytes[after], b']');
                    self.out.push(']');
                    return after + 1;
                }
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

fn is_secret_key(key: &str) -> bool {
    secret_key_label(key).is_some()
}

/// Keys that name a secret outright, and endings that do (compared lowercased, with `-`, `.` and
/// ` ` read as `_`).
pub(super) const SECRET_KEYS_EXACT: &[&str] =
    &["token", "auth", "secret", "apikey", "bearer", "credentials"];
pub(super) const SECRET_KEY_SUFFIXES: &[&str] = &[
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

/// The label for a JSON key that names a secret, e.g. `password`, `x-api-key`,
/// `http.request.header.authorization`, `refresh_token`, `cookie`; `None` for ordinary keys
/// (`max_tokens`, `gen_ai.usage.input_tokens` are counts, not secrets).
pub(super) fn secret_key_label(key: &str) -> Option<Label> {
    // The key is compared as if lowercased with `-`, `.` and ` ` read as `_`, byte by byte: this
    // runs for every string value of every screened document, so it must not allocate.
    let key = key.as_bytes();
    let normalized = |b: u8| match b {
        b'-' | b'.' | b' ' => b'_',
        b => b.to_ascii_lowercase(),
    };
    let word_at = |at: usize, word: &str| {
        key.len() >= at + word.len()
            && key[at..at + word.len()]
                .iter()
                .zip(word.bytes())
                .all(|(&k, w)| normalized(k) == w)
    };
    // every word is compared from its end, so most keys are told apart by their last byte
    let last = normalized(*key.last()?);
    let ends_alike = |word: &&&str| word.as_bytes().last() == Some(&last);
    let secret = SECRET_KEYS_EXACT
        .iter()
        .filter(ends_alike)
        .any(|word| key.len() == word.len() && word_at(0, word))
        || SECRET_KEY_SUFFIXES
            .iter()
            .filter(ends_alike)
            .any(|suffix| key.len() >= suffix.len() && word_at(key.len() - suffix.len(), suffix));
    if !secret {
        return None;
    }
    let token_like = ["token", "auth", "bearer", "cookie"]
        .iter()
        .any(|word| (0..key.len()).any(|at| word_at(at, word)));
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
