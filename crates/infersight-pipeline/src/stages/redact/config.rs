//! Configuration of the `redact` stage (`[stages.redact]`): which detectors run by default, the
//! per-path rules (`[[stages.redact.rules]]`: mask, hash, drop or keep one table column or
//! attribute path) and where the keyed-hash secret comes from (`secret_env`, never the file).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// The built-in detectors. Each has a hit counter and a placeholder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DetectorName {
    /// `user@example.com` → `<EMAIL>`.
    Email,
    /// E.164 international numbers and mainland-China mobiles → `<PHONE>`.
    Phone,
    /// Chinese resident identity numbers, MOD 11-2 checked → `<CN_ID>`.
    CnId,
    /// Payment card numbers, Luhn checked → `<CARD>`.
    Card,
    /// IPv4 and IPv6 addresses → `<IP>`.
    Ip,
    /// Vendor API keys and `api_key=`/`token=`/`password=` values → `<API_KEY>` / `<TOKEN>`.
    ApiKey,
    /// `Bearer <token>` → `Bearer <TOKEN>`.
    Bearer,
    /// JSON Web Tokens → `<JWT>`.
    Jwt,
}

impl DetectorName {
    pub const ALL: [DetectorName; 8] = [
        DetectorName::Email,
        DetectorName::Phone,
        DetectorName::CnId,
        DetectorName::Card,
        DetectorName::Ip,
        DetectorName::ApiKey,
        DetectorName::Bearer,
        DetectorName::Jwt,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DetectorName::Email => "email",
            DetectorName::Phone => "phone",
            DetectorName::CnId => "cn_id",
            DetectorName::Card => "card",
            DetectorName::Ip => "ip",
            DetectorName::ApiKey => "api_key",
            DetectorName::Bearer => "bearer",
            DetectorName::Jwt => "jwt",
        }
    }

    /// Position in [`DetectorName::ALL`], the index of the detector's hit counter.
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for DetectorName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A site-specific pattern, e.g. an internal customer number. Its matches become
/// `<CUSTOM:name>`; `name` is restricted to `[A-Za-z0-9_.-]` so placeholders stay recognizable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustomPattern {
    pub name: String,
    pub regex: String,
}

/// How a match is replaced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplacementStyle {
    /// A typed placeholder: `<EMAIL>`, `<CARD>`, `<CUSTOM:name>`.
    #[default]
    Placeholder,
    /// The same `<REDACTED>` for everything (hides which kind of data was present).
    Redacted,
}

/// What a path rule does with the values it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedactAction {
    /// Findings become typed placeholders (`<EMAIL>`): the behaviour without rules.
    Mask,
    /// Findings become keyed hashes (`<EMAIL:h:1a2b3c4d5e6f7a8b>`); on an attribute path the
    /// whole value is hashed, so one user stays joinable without being readable.
    Hash,
    /// The attribute is removed (a whole column becomes null, or `{}` for `attrs`).
    Drop,
    /// No detector runs: for fields known to be safe (model names, route templates).
    Keep,
}

impl RedactAction {
    pub fn as_str(self) -> &'static str {
        match self {
            RedactAction::Mask => "mask",
            RedactAction::Hash => "hash",
            RedactAction::Drop => "drop",
            RedactAction::Keep => "keep",
        }
    }
}

impl std::fmt::Display for RedactAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `[[stages.redact.rules]]` entry: what happens at `path`.
///
/// `path` is `TABLE.COLUMN[.ATTRIBUTE.KEY.PATH]`, e.g. `logs.body`, `requests.attrs.enduser.id`,
/// `spans.attrs.http.request.header.authorization`. The table and the column are single names or
/// `*`; the attribute part is a glob (`*` any run of characters, dots included; `?` one
/// character) over the keys from the column's top-level object down, joined by `.` (so flat
/// `{"enduser.id": …}` and nested `{"enduser": {"id": …}}` are the same path), and also matches
/// everything below it. The first rule that matches a value decides; values no rule matches get
/// the section's defaults (`mask` with `detectors` and `custom`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathRule {
    pub path: String,
    pub action: RedactAction,
    /// For `mask` and `hash`: the built-in detector names and custom pattern names that run at
    /// this path; the section's `detectors` and every custom pattern when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detectors: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedactConfig {
    pub enabled: bool,
    /// Built-in detectors to run; all of them by default.
    pub detectors: Vec<DetectorName>,
    pub custom: Vec<CustomPattern>,
    pub replacement_style: ReplacementStyle,
    /// Per-path rules, first match wins.
    pub rules: Vec<PathRule>,
    /// Name of the environment variable holding the HMAC secret of `hash` rules (at least
    /// [`MIN_SECRET_BYTES`] bytes); empty: none. The secret itself never goes into the config
    /// file. (A string rather than an `Option` so the key exists in the serialized defaults the
    /// binary checks config files against.)
    pub secret_env: String,
}

impl Default for RedactConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            detectors: DetectorName::ALL.to_vec(),
            custom: Vec::new(),
            replacement_style: ReplacementStyle::Placeholder,
            rules: Vec::new(),
            secret_env: String::new(),
        }
    }
}

/// Shortest accepted hash secret: a short secret lets anyone who guesses it test candidate
/// values (emails, phone numbers) against the stored hashes.
pub const MIN_SECRET_BYTES: usize = 16;

/// The tables and columns the stage rewrites; rules may only name these.
pub(crate) const REDACTED_TABLE_COLUMNS: &[(&str, &[&str])] = &[
    ("requests", &["error_type", "attrs"]),
    ("spans", &["name", "status_message", "attrs"]),
    ("logs", &["body", "params", "attrs"]),
    ("metrics", &["labels"]),
    ("templates", &["template"]),
];

/// A rule's `path` split into its table, column and attribute parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PathPattern {
    pub table: String,
    pub column: String,
    /// `None`: the rule covers whole column values.
    pub key: Option<String>,
}

impl PathPattern {
    pub(crate) fn parse(path: &str) -> Result<PathPattern, String> {
        let mut parts = path.splitn(3, '.');
        let table = parts.next().unwrap_or_default();
        let column = parts.next().unwrap_or_default();
        let key = parts.next();
        if table.is_empty() || column.is_empty() || key.is_some_and(str::is_empty) {
            return Err(format!(
                "`{path}` must be TABLE.COLUMN or TABLE.COLUMN.ATTRIBUTE.PATH, e.g. \
                 `logs.body` or `requests.attrs.enduser.id`"
            ));
        }
        for (what, name) in [("table", table), ("column", column)] {
            if name != "*" && !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(format!(
                    "`{path}`: the {what} must be a name or `*`, found `{name}`"
                ));
            }
        }
        if table != "*" {
            let Some((_, columns)) = REDACTED_TABLE_COLUMNS.iter().find(|(t, _)| *t == table)
            else {
                let known: Vec<&str> = REDACTED_TABLE_COLUMNS.iter().map(|(t, _)| *t).collect();
                return Err(format!(
                    "`{path}`: table `{table}` has no redacted columns (tables: {})",
                    known.join(", ")
                ));
            };
            if column != "*" && !columns.contains(&column) {
                return Err(format!(
                    "`{path}`: column `{column}` of `{table}` is not redacted (identifier columns \
                     are stored as they are); redacted columns: {}",
                    columns.join(", ")
                ));
            }
        } else if column != "*"
            && !REDACTED_TABLE_COLUMNS
                .iter()
                .any(|(_, columns)| columns.contains(&column))
        {
            return Err(format!(
                "`{path}`: no table has a redacted column `{column}`"
            ));
        }
        Ok(PathPattern {
            table: table.to_string(),
            column: column.to_string(),
            key: key.map(str::to_string),
        })
    }

    /// True when the rule can apply to some value of this column.
    pub(crate) fn covers_column(&self, table: &str, column: &str) -> bool {
        (self.table == "*" || self.table == table) && (self.column == "*" || self.column == column)
    }

    /// True when the rule applies to the value at `key_path` of a covered column (`None`: the
    /// whole column value). An attribute pattern also matches every path below what it matches.
    pub(crate) fn matches_key(&self, key_path: Option<&str>) -> bool {
        match (&self.key, key_path) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(pattern), Some(path)) => {
                glob_match(pattern.as_bytes(), path.as_bytes())
                    || path
                        .match_indices('.')
                        .any(|(dot, _)| glob_match(pattern.as_bytes(), &path.as_bytes()[..dot]))
            }
        }
    }
}

/// `*` matches any run of bytes (dots included), `?` exactly one byte; everything else itself.
pub(crate) fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    // iterative wildcard matching with one backtrack point: linear in practice
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == b'?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if let Some((star_p, star_t)) = star {
            p = star_p + 1;
            t = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&b| b == b'*')
}

/// Compiled-size limit of one custom regex; keeps a pathological pattern from eating memory.
pub(crate) const CUSTOM_REGEX_SIZE_LIMIT: usize = 1 << 20;
pub(crate) const CUSTOM_NAME_MAX_LEN: usize = 64;

pub(crate) fn compile_custom(regex: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(regex)
        .size_limit(CUSTOM_REGEX_SIZE_LIMIT)
        .build()
}

impl RedactConfig {
    /// Every problem of this section, each prefixed with the offending field; empty when usable.
    /// Includes whether the hash secret is present in the environment (never its value).
    pub fn validate(&self) -> Vec<String> {
        let mut problems = self.validate_without_secret();
        if !self.secret_env.is_empty()
            && self.has_hash_rules()
            && let Err(problem) = read_secret(&self.secret_env)
        {
            problems.push(format!("secret_env: {problem}"));
        }
        problems
    }

    /// True when some path rule hashes (and so needs the secret).
    pub fn has_hash_rules(&self) -> bool {
        self.rules.iter().any(|r| r.action == RedactAction::Hash)
    }

    /// [`RedactConfig::validate`] without looking at the environment.
    pub(crate) fn validate_without_secret(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut seen_detectors = BTreeSet::new();
        for detector in &self.detectors {
            if !seen_detectors.insert(*detector) {
                problems.push(format!("detectors: `{detector}` is listed twice"));
            }
        }
        let mut seen_names = BTreeSet::new();
        for (index, pattern) in self.custom.iter().enumerate() {
            let field = format!("custom[{index}]");
            if pattern.name.is_empty() {
                problems.push(format!("{field}.name: must not be empty"));
            } else if pattern.name.len() > CUSTOM_NAME_MAX_LEN
                || !pattern
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
            {
                problems.push(format!(
                    "{field}.name: `{}` must be 1-{CUSTOM_NAME_MAX_LEN} characters of \
                     [A-Za-z0-9_.-]",
                    pattern.name
                ));
            } else if !seen_names.insert(pattern.name.as_str()) {
                problems.push(format!("{field}.name: `{}` is used twice", pattern.name));
            }
            match compile_custom(&pattern.regex) {
                Err(error) => {
                    let error = error.to_string().replace('\n', " ");
                    problems.push(format!("{field}.regex: invalid regex: {error}"));
                }
                Ok(regex) if regex.is_match("") => {
                    problems.push(format!("{field}.regex: must not match the empty string"));
                }
                Ok(_) => {}
            }
        }
        self.validate_rules(&mut problems);
        if self.enabled
            && self.detectors.is_empty()
            && self.custom.is_empty()
            && self.rules.is_empty()
        {
            problems.push(
                "enabled: redaction is enabled but no detector or custom pattern is configured; \
                 set `enabled = false` to turn it off"
                    .to_string(),
            );
        }
        problems
    }

    fn validate_rules(&self, problems: &mut Vec<String>) {
        let mut seen_paths = BTreeSet::new();
        for (index, rule) in self.rules.iter().enumerate() {
            let field = format!("rules[{index}]");
            if let Err(problem) = PathPattern::parse(&rule.path) {
                problems.push(format!("{field}.path: {problem}"));
            } else if !seen_paths.insert(rule.path.as_str()) {
                problems.push(format!(
                    "{field}.path: `{}` is listed twice (the first rule wins)",
                    rule.path
                ));
            }
            let Some(detectors) = &rule.detectors else {
                continue;
            };
            match rule.action {
                RedactAction::Drop | RedactAction::Keep => problems.push(format!(
                    "{field}.detectors: only `mask` and `hash` rules run detectors, this rule \
                     does `{}`",
                    rule.action
                )),
                RedactAction::Mask | RedactAction::Hash if detectors.is_empty() => {
                    problems.push(format!(
                        "{field}.detectors: must not be empty; use `action = \"keep\"` to run no \
                         detector"
                    ));
                }
                RedactAction::Mask | RedactAction::Hash => {}
            }
            for name in detectors {
                if self.detector_by_name(name).is_none() {
                    let known: Vec<&str> = DetectorName::ALL
                        .iter()
                        .map(|d| d.as_str())
                        .chain(self.custom.iter().map(|c| c.name.as_str()))
                        .collect();
                    problems.push(format!(
                        "{field}.detectors: unknown detector `{name}` (known: {})",
                        known.join(", ")
                    ));
                }
            }
        }
        let valid_name = |name: &str| name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        match self.secret_env.as_str() {
            "" if self.has_hash_rules() => problems.push(
                "secret_env: `hash` rules need a secret; set `secret_env` to the name of an \
                 environment variable holding it (never the secret itself)"
                    .to_string(),
            ),
            name if !valid_name(name) => problems.push(format!(
                "secret_env: `{name}` is not an environment variable name ([A-Za-z0-9_]); put \
                 the secret in the environment and its name here"
            )),
            _ => {}
        }
    }

    /// A rule's detector name: a built-in detector or a custom pattern (by index).
    pub(crate) fn detector_by_name(&self, name: &str) -> Option<DetectorRef> {
        if let Some(detector) = DetectorName::ALL.iter().find(|d| d.as_str() == name) {
            return Some(DetectorRef::Builtin(*detector));
        }
        self.custom
            .iter()
            .position(|c| c.name == name)
            .map(DetectorRef::Custom)
    }
}

/// A detector named by a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DetectorRef {
    Builtin(DetectorName),
    Custom(usize),
}

/// Reads the hash secret from the environment variable `name`; the error never shows the value.
pub(crate) fn read_secret(name: &str) -> Result<Vec<u8>, String> {
    match std::env::var_os(name) {
        None => Err(format!(
            "environment variable `{name}` is not set; `hash` rules need a secret of at least \
             {MIN_SECRET_BYTES} bytes in it"
        )),
        Some(value) => {
            let bytes = value.into_encoded_bytes();
            if bytes.len() < MIN_SECRET_BYTES {
                Err(format!(
                    "environment variable `{name}` holds {} bytes; the hash secret must have at \
                     least {MIN_SECRET_BYTES}",
                    bytes.len()
                ))
            } else {
                Ok(bytes)
            }
        }
    }
}
