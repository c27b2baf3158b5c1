//! The tokens file: API tokens stored hashed, written by `infersight tokens create|revoke` and
//! read by `serve` (again whenever it changes). A token is `ist_` and 64 hex digits (32 random
//! bytes from the OS); the file keeps only its SHA-256, so a copy of the file lets nobody in.
//! The file is JSON, written atomically with mode 0600:
//!
//! ```json
//! {"version": 1, "tokens": [{"name": "exporters", "role": "ingest", "tenants": ["team-a"],
//!   "created": "2026-12-03T10:00:00.000Z", "expires": "2027-01-02T10:00:00.000Z",
//!   "sha256": "9f86d0…"}]}
//! ```
//!
//! A presented token is hashed and compared with every stored hash in constant time (no early
//! exit on a byte or on a match), so response times say nothing about stored hashes.

use std::io::Read;
use std::path::Path;

use infersight_model::time::{format_rfc3339, parse_time};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::role::Role;

/// The prefix of every token this version creates (secret scanners can match it).
pub const TOKEN_PREFIX: &str = "ist_";
/// The longest token accepted for hashing; longer ones are refused unhashed.
pub const MAX_TOKEN_BYTES: usize = 512;
/// Longest bearer token a request may carry: an identity provider's JWT (`oidc`) runs to a few
/// kilobytes; the tokens file's own tokens stay within [`MAX_TOKEN_BYTES`].
pub const MAX_BEARER_BYTES: usize = 8192;
/// The largest tokens file read.
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// A problem with the tokens file or a token operation.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("tokens file {path}: {message}")]
    File { path: String, message: String },
    #[error("{0}")]
    Invalid(String),
    #[error("no token named `{0}`")]
    NoSuchToken(String),
}

/// One stored token (never the token itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenEntry {
    pub name: String,
    pub role: Role,
    #[serde(default)]
    pub tenants: Vec<String>,
    /// RFC 3339.
    pub created: String,
    /// RFC 3339; `None`: never expires.
    #[serde(default)]
    pub expires: Option<String>,
    /// SHA-256 of the token, hex.
    pub sha256: String,
}

/// The file as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenFile {
    pub version: u32,
    #[serde(default)]
    pub tokens: Vec<TokenEntry>,
}

impl Default for TokenFile {
    fn default() -> Self {
        TokenFile {
            version: 1,
            tokens: Vec::new(),
        }
    }
}

/// A checked token, ready for lookups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredToken {
    pub name: String,
    pub role: Role,
    pub tenants: Vec<String>,
    pub expires_ns: Option<i64>,
    hash: [u8; 32],
}

/// What a presented token turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenMatch<'a> {
    Valid(&'a StoredToken),
    Expired(&'a StoredToken),
    Unknown,
}

/// The checked tokens of one version of the file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenSet {
    tokens: Vec<StoredToken>,
}

impl TokenSet {
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The stored token whose hash is `token`'s, checked against every entry in constant time.
    pub fn find(&self, token: &str, now_ns: i64) -> TokenMatch<'_> {
        if token.is_empty() || token.len() > MAX_TOKEN_BYTES {
            return TokenMatch::Unknown;
        }
        let presented: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for (index, stored) in self.tokens.iter().enumerate() {
            if constant_time_eq(&stored.hash, &presented) {
                found = Some(index);
            }
        }
        match found.and_then(|index| self.tokens.get(index)) {
            Some(stored) if stored.expires_ns.is_some_and(|at| at <= now_ns) => {
                TokenMatch::Expired(stored)
            }
            Some(stored) => TokenMatch::Valid(stored),
            None => TokenMatch::Unknown,
        }
    }
}

/// Equal slices, compared without an early exit.
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let difference = a
        .iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(difference) == 0
}

/// A token name: 1–64 of letters, digits, `.`, `_`, `-` (it is shown in logs and the audit).
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "token name `{}`: use 1-64 letters, digits, `.`, `_` or `-`",
            name.escape_debug()
        ))
    }
}

impl TokenFile {
    /// Parses and checks the file's text: every problem, each naming its entry.
    pub fn parse(text: &str) -> Result<TokenFile, String> {
        let file: TokenFile = serde_json::from_str(text).map_err(|e| e.to_string())?;
        file.to_set()?;
        Ok(file)
    }

    /// The checked tokens: version 1, unique valid names, a 64-hex-digit hash, RFC 3339 times.
    pub fn to_set(&self) -> Result<TokenSet, String> {
        let mut problems = Vec::new();
        if self.version != 1 {
            problems.push(format!(
                "version {} is not supported (only 1)",
                self.version
            ));
        }
        let mut names = std::collections::HashSet::new();
        let mut tokens = Vec::with_capacity(self.tokens.len());
        for (index, entry) in self.tokens.iter().enumerate() {
            let at = format!("tokens[{index}]");
            if let Err(problem) = check_name(&entry.name) {
                problems.push(format!("{at}: {problem}"));
            } else if !names.insert(entry.name.as_str()) {
                problems.push(format!("{at}: the name `{}` is used twice", entry.name));
            }
            let hash = decode_hash(&entry.sha256);
            if hash.is_none() {
                problems.push(format!("{at}.sha256: expected 64 hex digits"));
            }
            if let Err(problem) = parse_time(&entry.created, 0) {
                problems.push(format!("{at}.created: {problem}"));
            }
            let expires_ns = match entry.expires.as_deref().map(|t| parse_time(t, 0)) {
                Some(Err(problem)) => {
                    problems.push(format!("{at}.expires: {problem}"));
                    None
                }
                Some(Ok(ns)) => Some(ns),
                None => None,
            };
            if let Some(hash) = hash {
                tokens.push(StoredToken {
                    name: entry.name.clone(),
                    role: entry.role,
                    tenants: entry.tenants.clone(),
                    expires_ns,
                    hash,
                });
            }
        }
        if problems.is_empty() {
            Ok(TokenSet { tokens })
        } else {
            Err(problems.join("; "))
        }
    }

    /// Reads and checks `path`; a missing file is an empty one.
    pub fn read(path: &Path) -> Result<TokenFile, TokenError> {
        let file_error = |message: String| TokenError::File {
            path: path.display().to_string(),
            message,
        };
        let file = match std::fs::File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(TokenFile::default()),
            Err(e) => return Err(file_error(e.to_string())),
        };
        let mut text = String::new();
        file.take(MAX_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| file_error(e.to_string()))?;
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(file_error(format!("larger than {MAX_FILE_BYTES} bytes")));
        }
        TokenFile::parse(&text).map_err(file_error)
    }

    /// Writes the file atomically and durably, readable by its owner only (0600).
    pub fn write(&self, path: &Path) -> Result<(), TokenError> {
        let file_error = |message: String| TokenError::File {
            path: path.display().to_string(),
            message,
        };
        let mut text = serde_json::to_string_pretty(self).map_err(|e| file_error(e.to_string()))?;
        text.push('\n');
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| file_error(e.to_string()))?;
        }
        infersight_model::durable::write_atomic_with(path, |file| {
            use std::io::Write;
            let at = |source| infersight_model::durable::DurableError {
                path: path.to_path_buf(),
                source,
            };
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                file.set_permissions(std::fs::Permissions::from_mode(0o600))
                    .map_err(at)?;
            }
            file.write_all(text.as_bytes()).map_err(at)
        })
        .map_err(|e| file_error(e.source.to_string()))
    }

    /// Adds a token named `name` and returns it (the only time it exists outside the caller).
    pub fn create(
        &mut self,
        name: &str,
        role: Role,
        tenants: Vec<String>,
        expires_ns: Option<i64>,
        now_ns: i64,
    ) -> Result<String, TokenError> {
        check_name(name).map_err(TokenError::Invalid)?;
        if self.tokens.iter().any(|t| t.name == name) {
            return Err(TokenError::Invalid(format!(
                "a token named `{name}` exists; revoke it first or pick another name"
            )));
        }
        if let Some(tenant) = tenants.iter().find(|t| t.trim().is_empty()) {
            return Err(TokenError::Invalid(format!(
                "tenant `{tenant}`: must not be empty"
            )));
        }
        let token = generate_token().map_err(TokenError::Invalid)?;
        self.tokens.push(TokenEntry {
            name: name.to_string(),
            role,
            tenants,
            created: format_rfc3339(now_ns),
            expires: expires_ns.map(format_rfc3339),
            sha256: hex(&Sha256::digest(token.as_bytes())),
        });
        Ok(token)
    }

    /// Removes the token named `name`.
    pub fn revoke(&mut self, name: &str) -> Result<TokenEntry, TokenError> {
        let index = self
            .tokens
            .iter()
            .position(|t| t.name == name)
            .ok_or_else(|| TokenError::NoSuchToken(name.to_string()))?;
        Ok(self.tokens.remove(index))
    }
}

/// `ist_` and 32 bytes from the operating system's random source, as hex.
pub fn generate_token() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut bytes))
        .map_err(|e| format!("reading random bytes from /dev/urandom: {e}"))?;
    Ok(format!("{TOKEN_PREFIX}{}", hex(&bytes)))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

fn decode_hash(text: &str) -> Option<[u8; 32]> {
    let text = text.as_bytes();
    if text.len() != 64 {
        return None;
    }
    let mut hash = [0u8; 32];
    for (slot, pair) in hash.iter_mut().zip(text.chunks_exact(2)) {
        let high = (pair[0] as char).to_digit(16)?;
        let low = (pair[1] as char).to_digit(16)?;
        *slot = u8::try_from(high * 16 + low).ok()?;
    }
    Some(hash)
}
