//! Configuration of the `redact` stage (`[stages.redact]`).

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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedactConfig {
    pub enabled: bool,
    /// Built-in detectors to run; all of them by default.
    pub detectors: Vec<DetectorName>,
    pub custom: Vec<CustomPattern>,
    pub replacement_style: ReplacementStyle,
}

impl Default for RedactConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            detectors: DetectorName::ALL.to_vec(),
            custom: Vec::new(),
            replacement_style: ReplacementStyle::Placeholder,
        }
    }
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
    pub fn validate(&self) -> Vec<String> {
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
        if self.enabled && self.detectors.is_empty() && self.custom.is_empty() {
            problems.push(
                "enabled: redaction is enabled but no detector or custom pattern is configured; \
                 set `enabled = false` to turn it off"
                    .to_string(),
            );
        }
        problems
    }
}
