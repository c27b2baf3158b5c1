//! Typed variable masking, the first step of template mining: every whitespace token of a log
//! message is classified by a hand-written byte classifier (no regex chain) and its variable parts
//! are replaced by `<*>` before the prefix tree is searched.
//!
//! Why before the tree: Drain (He et al., ICWS'17) routes tokens with digits to a `<*>` child, but
//! still compares them position by position; masking typed values first (numbers, hex, UUIDs, IPs,
//! paths, durations, sizes, block ids) makes lines of one event identical up to their words, which is
//! what lets one similarity threshold work for every system (Drain3 masking, Loghub-2.0 guidance).
//! Masking is sub-token: `uid=0` becomes `uid=<*>` and `[173.234.31.186]` becomes `[<*>]`, because
//! the corrected Loghub ground truth (Khan et al., ICSE'22) keeps such keys and brackets constant.

use serde::{Deserialize, Serialize};

/// The placeholder every variable becomes in a template.
pub const WILDCARD: &str = "<*>";

/// What a parameter looks like; stored per template position so queries can cast parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamType {
    Int,
    Float,
    Hex,
    Uuid,
    Ip,
    /// A host name or `host:port` (`proxy.example.com:5070`, `localhost:8080`).
    Host,
    Path,
    Url,
    Duration,
    Size,
    BlockId,
    /// A clock time or a written-out date (`04:01:23`, `Sun Jul 10 04:01:23 2005`).
    Time,
    /// `true`, `false`, `null`: flags the corrected Loghub ground truth treats as variables.
    Bool,
    /// Any other token containing digits (`R02-M1-N0`, `appattempt_1445_0020`).
    Id,
    /// A word that varies between lines of one template (user names, host names).
    Word,
}

impl ParamType {
    pub fn as_str(self) -> &'static str {
        match self {
            ParamType::Int => "int",
            ParamType::Float => "float",
            ParamType::Hex => "hex",
            ParamType::Uuid => "uuid",
            ParamType::Ip => "ip",
            ParamType::Host => "host",
            ParamType::Path => "path",
            ParamType::Url => "url",
            ParamType::Duration => "duration",
            ParamType::Size => "size",
            ParamType::BlockId => "block_id",
            ParamType::Time => "time",
            ParamType::Bool => "bool",
            ParamType::Id => "id",
            ParamType::Word => "word",
        }
    }

    /// The wider of two types seen at one position (a position that held an int and a word is a
    /// word).
    pub fn widen(self, other: ParamType) -> ParamType {
        use ParamType::*;
        match (self, other) {
            (a, b) if a == b => a,
            (Int, Float) | (Float, Int) => Float,
            (Word, _) | (_, Word) => Word,
            _ => Id,
        }
    }
}

/// Byte classes for the per-byte loops of tokenizing and masking: one table lookup per byte
/// instead of a chain of comparisons. OR-ing the classes of a token's bytes gives its *shape*,
/// which answers "has a digit / a colon / maybe a boolean" without another pass over it.
pub(crate) mod class {
    /// `u8::is_ascii_whitespace`: token separator.
    pub(crate) const SPACE: u8 = 1;
    /// `0`-`9`.
    pub(crate) const DIGIT: u8 = 2;
    /// See [`super::is_delimiter`].
    pub(crate) const DELIMITER: u8 = 4;
    /// `:`, which every URL and clock time contains.
    pub(crate) const COLON: u8 = 8;
    /// `t`, `f`, `n` in either case: a byte that may start `true`, `false` or `null`.
    pub(crate) const BOOL_START: u8 = 16;
    /// `.`: a delimiter only in runs (`instruction......0`), see [`super::mask_token`].
    pub(crate) const DOT: u8 = 32;
}

/// Characters that separate a key from its value or wrap a value inside one token. `.`, `-`, `_`
/// and `/` are deliberately absent: they glue identifiers (`core.2275`, `blk_-42`, `/var/log`).
const DELIMITERS: &[u8] = b"=:,()[]{}|#@\"';<>$";

/// [`class`] bits of every byte value.
pub(crate) static BYTE_CLASS: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut byte = 0;
    while byte < 256 {
        let value = byte as u8;
        let mut bits = 0;
        if value.is_ascii_whitespace() {
            bits |= class::SPACE;
        }
        if value.is_ascii_digit() {
            bits |= class::DIGIT;
        }
        if value == b':' {
            bits |= class::COLON;
        }
        if matches!(value, b't' | b'f' | b'n' | b'T' | b'F' | b'N') {
            bits |= class::BOOL_START;
        }
        if value == b'.' {
            bits |= class::DOT;
        }
        table[byte] = bits;
        byte += 1;
    }
    let mut index = 0;
    while index < DELIMITERS.len() {
        table[DELIMITERS[index] as usize] |= class::DELIMITER;
        index += 1;
    }
    table
};

/// The OR of the [`class`] bits of `bytes`.
#[inline]
pub(crate) fn shape_of(bytes: &[u8]) -> u8 {
    bytes
        .iter()
        .fold(0, |shape, &byte| shape | BYTE_CLASS[byte as usize])
}

/// Is `byte` one of [`DELIMITERS`]?
#[inline]
pub(crate) fn is_delimiter(byte: u8) -> bool {
    BYTE_CLASS[byte as usize] & class::DELIMITER != 0
}

#[inline]
fn is_open_wrapper(byte: u8) -> bool {
    matches!(byte, b'(' | b'[' | b'{' | b'<' | b'"' | b'\'')
}

#[inline]
fn is_close_wrapper(byte: u8) -> bool {
    matches!(
        byte,
        b')' | b']' | b'}' | b'>' | b'"' | b'\'' | b',' | b';' | b':' | b'.'
    )
}

fn all_digits(bytes: &[u8]) -> bool {
    !bytes.is_empty() && bytes.iter().all(u8::is_ascii_digit)
}

fn all_hex(bytes: &[u8]) -> bool {
    !bytes.is_empty() && bytes.iter().all(u8::is_ascii_hexdigit)
}

/// `12`, `-3`, `+4`, `1.5`, `1,234` → Int/Float.
fn number_type(bytes: &[u8]) -> Option<ParamType> {
    let body = match bytes.first() {
        Some(b'-' | b'+') => &bytes[1..],
        _ => bytes,
    };
    if body.is_empty() || !body[0].is_ascii_digit() {
        return None;
    }
    let mut dots = 0;
    for (index, &byte) in body.iter().enumerate() {
        match byte {
            b'0'..=b'9' => {}
            b'.' if index + 1 < body.len() => dots += 1,
            _ => return None,
        }
    }
    match dots {
        0 => Some(ParamType::Int),
        1 => Some(ParamType::Float),
        _ => None,
    }
}

const DURATION_UNITS: &[&[u8]] = &[
    b"ns",
    b"us",
    b"\xc2\xb5s",
    b"ms",
    b"s",
    b"sec",
    b"secs",
    b"m",
    b"min",
    b"h",
];
/// Unit words written apart from their number (`12 seconds`, `0 bytes`, `3 hrs`), compared
/// without case, besides [`DURATION_UNITS`] and [`SIZE_UNITS`].
const UNIT_WORDS: &[&[u8]] = &[
    b"byte", b"bytes", b"msec", b"msecs", b"usec", b"usecs", b"nsec", b"second", b"seconds",
    b"mins", b"minute", b"minutes", b"hr", b"hrs", b"hour", b"hours", b"day", b"days", b"millis",
    b"kbps", b"mbps", b"gbps", b"rpm",
];
const SIZE_UNITS: &[&[u8]] = &[
    b"b", b"k", b"kb", b"kib", b"m", b"mb", b"mib", b"g", b"gb", b"gib", b"t", b"tb", b"tib",
];

/// A number followed by a unit: `12ms`, `1.5s`, `64KB`, `3%`, `10seconds`.
fn number_with_unit(bytes: &[u8]) -> Option<ParamType> {
    let split = bytes.iter().rposition(u8::is_ascii_digit)? + 1;
    if split == bytes.len() || split == 0 {
        return None;
    }
    number_type(&bytes[..split])?;
    let unit = &bytes[split..];
    if unit == b"%" {
        return Some(ParamType::Float);
    }
    if unit.len() > 7 {
        return None;
    }
    let mut lower = [0u8; 7];
    for (slot, byte) in lower.iter_mut().zip(unit) {
        *slot = byte.to_ascii_lowercase();
    }
    let lower = &lower[..unit.len()];
    if DURATION_UNITS.contains(&unit) {
        Some(ParamType::Duration)
    } else if SIZE_UNITS.contains(&lower) || lower.starts_with(b"byte") {
        Some(ParamType::Size)
    } else if UNIT_WORDS.contains(&lower) {
        Some(ParamType::Duration)
    } else {
        None
    }
}

/// A unit written apart from its number (`384.0 B,`, `12 ms`): the word, without trailing
/// punctuation, is a duration or size unit or `%`. Such a word is part of the quantity before it
/// (as `12ms` and `64KB` are when glued), so the miner never splits templates on it.
pub(crate) fn is_unit_word(word: &str) -> bool {
    let unit = word
        .trim_end_matches([',', ';', '.', ')', ']', '}', ':'])
        .as_bytes();
    if unit == b"%" || DURATION_UNITS.contains(&unit) {
        return true;
    }
    if unit.is_empty() || unit.len() > 7 {
        return false;
    }
    let mut lower = [0u8; 7];
    for (slot, byte) in lower.iter_mut().zip(unit) {
        *slot = byte.to_ascii_lowercase();
    }
    let lower = &lower[..unit.len()];
    SIZE_UNITS.contains(&lower) || UNIT_WORDS.contains(&lower)
}

/// `10.0.0.1`, `10.0.0.1:8080`, `/10.0.0.1:8080`.
fn is_ipv4(bytes: &[u8]) -> bool {
    let bytes = bytes.strip_prefix(b"/").unwrap_or(bytes);
    // The first octet starts the token: reject words before scanning for the port.
    if !bytes.first().is_some_and(u8::is_ascii_digit) {
        return false;
    }
    let (address, port) = match bytes.iter().position(|&b| b == b':') {
        Some(colon) => (&bytes[..colon], Some(&bytes[colon + 1..])),
        None => (bytes, None),
    };
    if let Some(port) = port
        && !all_digits(port)
    {
        return false;
    }
    let mut parts = 0;
    for part in address.split(|&b| b == b'.') {
        parts += 1;
        if part.is_empty() || part.len() > 3 || !all_digits(part) {
            return false;
        }
    }
    parts == 4
}

/// Top-level domains that end host names in logs. A short list on purpose: a dotted name whose
/// last label is a file extension or a package (`core.py`, `java.util`, `com.apple.xpc`) is no
/// host.
const HOST_TLDS: &[&[u8]] = &[
    b"com",
    b"net",
    b"org",
    b"edu",
    b"gov",
    b"mil",
    b"io",
    b"us",
    b"uk",
    b"hk",
    b"cn",
    b"jp",
    b"de",
    b"fr",
    b"ru",
    b"br",
    b"au",
    b"ca",
    b"eu",
    b"tw",
    b"kr",
    b"nl",
    b"biz",
    b"local",
    b"lan",
    b"internal",
    b"intranet",
    b"corp",
    b"arpa",
    b"cloud",
    b"localdomain",
];

/// Is `label` (any case) one of [`HOST_TLDS`]?
fn is_tld(label: &[u8]) -> bool {
    if label.len() < 2 || label.len() > 11 {
        return false;
    }
    let mut lower = [0u8; 11];
    for (slot, byte) in lower.iter_mut().zip(label) {
        *slot = byte.to_ascii_lowercase();
    }
    HOST_TLDS.contains(&&lower[..label.len()])
}

/// Cheap gate for digit-free tokens: does the token end (before closing punctuation) in `.tld`?
/// Only then can it hold a host name, so other dotted words (`org.apache.Foo`, `done.`) skip the
/// host check.
#[inline]
fn may_end_in_host(bytes: &[u8]) -> bool {
    let mut end = bytes.len();
    while end > 0 && (is_close_wrapper(bytes[end - 1]) || bytes[end - 1] == b'/') {
        end -= 1;
    }
    let mut start = end;
    while start > 0 && bytes[start - 1].is_ascii_alphabetic() {
        start -= 1;
    }
    start > 1 && bytes[start - 1] == b'.' && is_tld(&bytes[start..end])
}

/// `proxy.example.com`, `ip-10-0-0-1.ec2.internal`, `NODE-7.fareast.corp.example.com`: labels of
/// letters, digits and `-`, the last one a known top-level domain (`.io` only with three labels or
/// more: `java.io` is a package).
fn is_host_name(bytes: &[u8]) -> bool {
    if bytes.len() < 4 || bytes.len() > 253 {
        return false;
    }
    // The last label rejects most dotted tokens (numbers, addresses, versions, packages, file
    // names) before the labels are walked: it must be a known top-level domain.
    let Some(last_dot) = bytes.iter().rposition(|&b| b == b'.') else {
        return false;
    };
    let tail = &bytes[last_dot + 1..];
    if !tail.iter().all(u8::is_ascii_alphabetic) || !is_tld(tail) {
        return false;
    }
    let mut labels = 0;
    let mut last: &[u8] = &[];
    for label in bytes.split(|&b| b == b'.') {
        if label.is_empty()
            || label.len() > 63
            || label[0] == b'-'
            || !label
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
        {
            return false;
        }
        labels += 1;
        last = label;
    }
    labels >= 2 && is_tld(last) && (labels >= 3 || !last.eq_ignore_ascii_case(b"io"))
}

/// `host:port` with a host name, `localhost` or an IPv4 address, and a port of 1-5 digits.
fn is_host_port(bytes: &[u8]) -> bool {
    let Some(colon) = bytes.iter().rposition(|&b| b == b':') else {
        return false;
    };
    let (host, port) = (&bytes[..colon], &bytes[colon + 1..]);
    (1..=5).contains(&port.len())
        && all_digits(port)
        && (host.eq_ignore_ascii_case(b"localhost") || is_host_name(host) || is_ipv4(host))
}

/// `fe80::1c2a:3bff:fe4d:5e6f%en0`, `2001:db8::1`, `::1`: hex groups of at most four digits
/// separated by `:`, with `::` or eight groups, an optional `%interface` suffix.
fn is_ipv6(bytes: &[u8]) -> bool {
    let address = match bytes.iter().position(|&b| b == b'%') {
        Some(percent) => &bytes[..percent],
        None => bytes,
    };
    let compressed = address.windows(2).any(|pair| pair == b"::");
    let mut groups = 0;
    for group in address.split(|&b| b == b':') {
        if group.len() > 4 || !group.iter().all(u8::is_ascii_hexdigit) {
            return false;
        }
        groups += usize::from(!group.is_empty());
    }
    address.len() >= 3 && groups <= 8 && (compressed || groups == 8)
}

/// `00:1a:2b:3c:4d:5e` or `00-1A-2B-3C-4D-5E`: six or more two-digit hex groups (MAC, EUI-64
/// and longer hardware ids).
fn is_mac(bytes: &[u8]) -> bool {
    bytes.len() >= 17
        && bytes.len() % 3 == 2
        && matches!(bytes[2], b':' | b'-')
        && bytes.iter().enumerate().all(|(index, &byte)| {
            if index % 3 == 2 {
                byte == bytes[2]
            } else {
                byte.is_ascii_hexdigit()
            }
        })
}

/// A Windows path: `C:\Windows\...` or `\\server\share\...`.
fn is_windows_path(bytes: &[u8]) -> bool {
    (bytes.len() > 3 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':' && bytes[2] == b'\\')
        || (bytes.len() > 2 && bytes[0] == b'\\' && bytes[1] == b'\\')
}

/// Does the token hold a Windows path somewhere (`(C:\x)`, `Core:C:\x`)? The gate before
/// [`is_windows_path`] for tokens without digits.
#[inline]
fn may_hold_windows_path(bytes: &[u8]) -> bool {
    bytes
        .windows(2)
        .any(|pair| pair == b":\\" || pair == b"\\\\")
}

/// 8-4-4-4-12 hex digits.
fn is_uuid(bytes: &[u8]) -> bool {
    bytes.len() == 36
        && bytes.iter().enumerate().all(|(index, &byte)| match index {
            8 | 13 | 18 | 23 => byte == b'-',
            _ => byte.is_ascii_hexdigit(),
        })
}

fn is_bool_literal(bytes: &[u8]) -> bool {
    bytes.eq_ignore_ascii_case(b"true")
        || bytes.eq_ignore_ascii_case(b"false")
        || bytes.eq_ignore_ascii_case(b"null")
}

/// Cheap pre-check for [`needs_mask_shaped`]: could the token contain a boolean or null literal, i.e.
/// does any 4-byte window equal `true`, `fals` or `null` ignoring ASCII case? Only windows that
/// start with `t`, `f` or `n` are compared (`byte | 0x20` folds exactly `T`/`t`, `F`/`f`, `N`/`n`
/// onto the lower-case letter and no other byte onto them).
#[inline]
fn may_hold_bool(bytes: &[u8]) -> bool {
    let mut at = 0;
    while at + 4 <= bytes.len() {
        let rest = &bytes[at + 1..at + 4];
        let found = match bytes[at] | 0x20 {
            b't' => rest.eq_ignore_ascii_case(b"rue"),
            b'f' => rest.eq_ignore_ascii_case(b"als"),
            b'n' => rest.eq_ignore_ascii_case(b"ull"),
            _ => false,
        };
        if found {
            return true;
        }
        at += 1;
    }
    false
}

/// Does `://` occur in `bytes`?
#[inline]
fn has_scheme_separator(bytes: &[u8]) -> bool {
    let mut at = 0;
    while at + 3 <= bytes.len() {
        if bytes[at] == b':' && bytes[at + 1] == b'/' && bytes[at + 2] == b'/' {
            return true;
        }
        at += 1;
    }
    false
}

/// Classifies a whole (unwrapped) token; `None` means "not a value by itself", in which case the
/// token is masked segment by segment. `shape` is [`shape_of`]`(bytes)`, which spares the scans
/// for a digit and a colon; its `DIGIT` bit must be exact, its `COLON` bit may be set without a
/// colon (it only gates the URL and clock checks, which look for the colon themselves).
fn classify_value(bytes: &[u8], shape: u8) -> Option<ParamType> {
    let first = *bytes.first()?;
    if is_bool_literal(bytes) {
        return Some(ParamType::Bool);
    }
    if first == b'/' && bytes.len() > 1 {
        return Some(if is_ipv4(bytes) {
            ParamType::Ip
        } else {
            ParamType::Path
        });
    }
    let has_colon = shape & class::COLON != 0;
    if bytes.len() > 8 && has_colon && has_scheme_separator(bytes) {
        return Some(ParamType::Url);
    }
    if (first == b'\\' || has_colon) && is_windows_path(bytes) {
        return Some(ParamType::Path);
    }
    if has_colon && is_mac(bytes) {
        return Some(ParamType::Hex);
    }
    if (has_colon && is_host_port(bytes)) || (shape & class::DOT != 0 && is_host_name(bytes)) {
        return Some(ParamType::Host);
    }
    if shape & class::DIGIT == 0 {
        return None;
    }
    if let Some(kind) = number_type(bytes) {
        return Some(kind);
    }
    if bytes.len() > 2
        && (bytes.starts_with(b"0x") || bytes.starts_with(b"0X"))
        && all_hex(&bytes[2..])
    {
        return Some(ParamType::Hex);
    }
    if is_ipv4(bytes) {
        return Some(ParamType::Ip);
    }
    if is_uuid(bytes) {
        return Some(ParamType::Uuid);
    }
    if has_colon && is_clock(bytes) {
        return Some(ParamType::Time);
    }
    if has_colon && is_ipv6(bytes) {
        return Some(ParamType::Ip);
    }
    if bytes.starts_with(b"blk_") {
        return Some(ParamType::BlockId);
    }
    if let Some(kind) = number_with_unit(bytes) {
        return Some(kind);
    }
    None
}

/// Type of a segment that contains a digit, or `None` when it is an identifier that merely
/// contains a digit (`ssh2`, `jk2_init`, `log4j`, `L1`): Drain's rule "any digit is a variable"
/// turns those constants into `<*>`; a value starts with a digit, is hex, or is mostly digits.
/// `shape` as for [`classify_value`].
fn classify_segment(bytes: &[u8], shape: u8) -> Option<ParamType> {
    if let Some(kind) = classify_value(bytes, shape) {
        return Some(kind);
    }
    if bytes.len() >= 6 && all_hex(bytes) {
        return Some(ParamType::Hex);
    }
    if bytes[0].is_ascii_digit() {
        return Some(ParamType::Id);
    }
    let (mut digits, mut letters) = (0usize, 0usize);
    for byte in bytes {
        digits += usize::from(byte.is_ascii_digit());
        letters += usize::from(byte.is_ascii_alphabetic());
    }
    if digits >= letters {
        Some(ParamType::Id)
    } else {
        None
    }
}

/// Does this token need masking at all? The fast path: most tokens are plain words. `shape` is
/// [`shape_of`]`(bytes)`, which the tokenizer computes while looking for the token's end.
#[inline]
pub(crate) fn needs_mask_shaped(bytes: &[u8], shape: u8) -> bool {
    bytes.first() == Some(&b'/')
        || shape & class::DIGIT != 0
        || (shape & class::BOOL_START != 0 && may_hold_bool(bytes))
        || (shape & class::DOT != 0 && may_end_in_host(bytes))
        || (shape & class::COLON != 0 && may_hold_windows_path(bytes))
        || bytes.starts_with(b"\\\\")
}

/// Writes the masked form of `token` into `out` (cleared first) and returns the type of its first
/// variable, or `None` when nothing was masked (then `out` equals `token`).
pub fn mask_token(token: &str, out: &mut String) -> Option<ParamType> {
    mask_token_shaped(token, shape_of(token.as_bytes()), out)
}

/// [`mask_token`] with the token's [`shape_of`] known (the tokenizer computes it while looking
/// for the token's end).
pub(crate) fn mask_token_shaped(token: &str, shape: u8, out: &mut String) -> Option<ParamType> {
    out.clear();
    let bytes = token.as_bytes();
    // Strip wrappers: `[10.0.0.1]`, `(12)`, `"abc",`.
    let mut start = 0;
    while start < bytes.len() && is_open_wrapper(bytes[start]) {
        start += 1;
    }
    let mut end = bytes.len();
    while end > start && is_close_wrapper(bytes[end - 1]) {
        end -= 1;
    }
    // The token's shape serves for its core: wrappers hold no digit, so the `DIGIT` bit is the
    // core's; the `COLON` bit may be set for a stripped trailing `:`, which `classify_value`
    // tolerates (it only gates checks that find no match without a colon).
    if start < end
        && let Some(kind) = classify_value(&bytes[start..end], shape)
    {
        out.push_str(&token[..start]);
        out.push_str(WILDCARD);
        out.push_str(&token[end..]);
        return Some(kind);
    }
    // `key=value` with a value that is one as a whole (`client=10.0.0.1:4242`, `node=a.example.com`):
    // the value becomes one `<*>`, as the ground truth writes it, rather than one per segment.
    if let Some((value_start, kind)) = keyed_value(bytes, start, end) {
        out.push_str(&token[..value_start]);
        out.push_str(WILDCARD);
        out.push_str(&token[end..]);
        return Some(kind);
    }
    // Segment masking: split at delimiters, replace every segment that holds a value by `<*>`.
    // `out` is the token with those segments replaced; `copied` is where the part of the token not
    // yet written to `out` starts (delimiters are ASCII, so every cut is a char boundary).
    let mut first_kind = None;
    let mut copied = 0;
    let mut index = 0;
    loop {
        // One segment: up to the next delimiter or the end, with its shape.
        let segment_start = index;
        let mut segment_shape = 0;
        while let Some(&byte) = bytes.get(index) {
            let byte_class = BYTE_CLASS[byte as usize];
            if byte_class & (class::DELIMITER | class::DOT) != 0
                && (byte_class & class::DELIMITER != 0 || is_in_dot_run(bytes, index))
            {
                break;
            }
            segment_shape |= byte_class;
            index += 1;
        }
        let segment = &bytes[segment_start..index];
        let kind = if segment.len() > 1 && segment[0] == b'/' {
            Some(if is_ipv4(segment) {
                ParamType::Ip
            } else {
                ParamType::Path
            })
        } else if segment_shape & class::DIGIT != 0 {
            classify_segment(segment, segment_shape)
        } else if segment_shape & class::DOT != 0 && is_host_name(segment) {
            Some(ParamType::Host)
        } else if is_bool_literal(segment) {
            Some(ParamType::Bool)
        } else {
            None
        };
        if let Some(kind) = kind {
            first_kind.get_or_insert(kind);
            out.push_str(&token[copied..segment_start]);
            out.push_str(WILDCARD);
            copied = index;
        }
        if index >= bytes.len() {
            break;
        }
        index += 1; // the delimiter
    }
    out.push_str(&token[copied..]);
    first_kind
}

/// For a core `bytes[start..end]` of the form `key=value`, with an identifier key (letters,
/// digits, `_`, `-`, `.`, starting with a letter) and a value that [`classify_value`] types as a
/// whole: where the value starts, and its type.
fn keyed_value(bytes: &[u8], start: usize, end: usize) -> Option<(usize, ParamType)> {
    let core = &bytes[start..end];
    let equals = core.iter().position(|&byte| byte == b'=')?;
    let (key, value) = (&core[..equals], &core[equals + 1..]);
    if !key.first().is_some_and(u8::is_ascii_alphabetic)
        || !key
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        || value.is_empty()
    {
        return None;
    }
    let kind = classify_value(value, shape_of(value))?;
    Some((start + equals + 1, kind))
}

/// Is the `.` at `index` part of a run of dots? A run is a delimiter (`instruction......0`), a
/// single dot is not (`core.2`).
#[inline]
fn is_in_dot_run(bytes: &[u8], index: usize) -> bool {
    bytes.get(index + 1) == Some(&b'.') || (index > 0 && bytes[index - 1] == b'.')
}

/// Best-effort type of a parameter value taken from a log line.
pub fn param_type(value: &str) -> ParamType {
    let bytes = value.as_bytes();
    let mut start = 0;
    while start < bytes.len() && is_open_wrapper(bytes[start]) {
        start += 1;
    }
    let mut end = bytes.len();
    while end > start && is_close_wrapper(bytes[end - 1]) {
        end -= 1;
    }
    let core = &bytes[start..end];
    let shape = shape_of(core);
    if let Some(kind) = classify_value(core, shape) {
        return kind;
    }
    if shape & class::DIGIT != 0 {
        classify_segment(core, shape).unwrap_or(ParamType::Id)
    } else {
        ParamType::Word
    }
}

/// An English month abbreviation as logs print it (`Jan` … `Dec`). A pattern match, not a list
/// search: it runs for every three-letter capitalized token.
#[inline]
pub(crate) fn is_month(bytes: &[u8]) -> bool {
    matches!(
        bytes,
        b"Jan"
            | b"Feb"
            | b"Mar"
            | b"Apr"
            | b"May"
            | b"Jun"
            | b"Jul"
            | b"Aug"
            | b"Sep"
            | b"Oct"
            | b"Nov"
            | b"Dec"
    )
}

/// An English weekday abbreviation (`Mon` … `Sun`).
#[inline]
pub(crate) fn is_weekday(bytes: &[u8]) -> bool {
    matches!(
        bytes,
        b"Mon" | b"Tue" | b"Wed" | b"Thu" | b"Fri" | b"Sat" | b"Sun"
    )
}

/// `hh:mm` or `hh:mm:ss`, optionally with fractional seconds.
pub(crate) fn is_clock(bytes: &[u8]) -> bool {
    // The hour's first byte must be a digit (its part is digits, `.` and `,`, and the part before
    // the first `.`/`,` is not empty): reject other tokens without splitting.
    if !bytes.first().is_some_and(u8::is_ascii_digit) {
        return false;
    }
    let mut parts = 0;
    for part in bytes.split(|&b| b == b':') {
        parts += 1;
        let whole = part
            .split(|&b| b == b'.' || b == b',')
            .next()
            .unwrap_or(part);
        if whole.is_empty()
            || whole.len() > 2
            || !part
                .iter()
                .all(|b| b.is_ascii_digit() || *b == b'.' || *b == b',')
        {
            return false;
        }
    }
    (2..=3).contains(&parts)
}
