//! The built-in detectors: one candidate regex per rule (ASCII-only, so the prefilter's DFA stays
//! small) followed by a validator that checks boundaries, checksums and context.
//!
//! Regexes find candidates; validators decide. That split is what keeps false positives away from
//! telemetry: a 16-digit number is a card only if it passes Luhn and starts like a card, an
//! 18-digit number is a resident ID only if its MOD 11-2 check character is right, and a digit run
//! that is part of a longer number, a float, a hex trace id or a UUID is never touched.

use regex::Regex;

use super::config::DetectorName;

/// What a span is replaced with. The declaration order is the priority when spans overlap: the
/// merged span keeps the label that comes first (a JWT inside a bearer header stays `<JWT>`, an
/// OpenAI key sent as a bearer token is `<API_KEY>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Label {
    Jwt,
    ApiKey,
    Token,
    CnId,
    Card,
    Email,
    Phone,
    Ip,
    /// Index into the configured custom patterns.
    Custom(usize),
}

impl Label {
    pub(crate) fn placeholder(self) -> &'static str {
        match self {
            Label::Jwt => "<JWT>",
            Label::Token => "<TOKEN>",
            Label::ApiKey => "<API_KEY>",
            Label::CnId => "<CN_ID>",
            Label::Card => "<CARD>",
            Label::Email => "<EMAIL>",
            Label::Phone => "<PHONE>",
            Label::Ip => "<IP>",
            Label::Custom(_) => "<CUSTOM>",
        }
    }

    /// The name inside a keyed-hash placeholder (`EMAIL` in `<EMAIL:h:…>`); custom patterns
    /// use `CUSTOM:<name>` and are handled by the caller.
    pub(crate) fn hash_name(self) -> &'static str {
        let placeholder = self.placeholder();
        &placeholder[1..placeholder.len() - 1]
    }
}

/// Matches any placeholder this crate writes, plain (`<EMAIL>`) or keyed-hash
/// (`<EMAIL:h:1a2b3c4d5e6f7a8b>`, `<VALUE:h:…>`), so a second pass never redacts its own output.
pub(crate) const PLACEHOLDER_PATTERN: &str = concat!(
    r"<(?:EMAIL|PHONE|CN_ID|CARD|IP|API_KEY|TOKEN|JWT|REDACTED|VALUE|CUSTOM:[A-Za-z0-9_.\-]{1,64})",
    r"(?::h:[0-9a-f]{16})?>"
);

/// Who found a span: a built-in detector or the custom pattern with this index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Source {
    Builtin(DetectorName),
    Custom(usize),
}

/// The validator a rule's candidates go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    Email,
    E164,
    CnMobile,
    CnId,
    Card,
    Ipv4,
    Ipv6,
    VendorKey,
    AwsKey,
    GenericSecret,
    Password,
    Bearer,
    Jwt,
    Custom(usize),
}

#[derive(Debug, Clone)]
pub(crate) struct Rule {
    pub source: Source,
    pub check: Check,
    pub regex: Regex,
    /// Capture group holding the finding (0: the whole match). `api_key=VALUE` keeps the key;
    /// numbers and addresses leave out the boundary character their regex consumed.
    pub group: usize,
}

/// What the caller knows about the text: in JSON, the key the string value belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum KeyHint {
    #[default]
    None,
    /// The key names a count, size, duration or timestamp: bare numbers in it are not PII.
    Numeric,
    /// The key names a version, build or revision (`service.version`, `vllm_version`): a dotted
    /// number in it is a version, not an address.
    Version,
}

/// A validated span to replace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub start: usize,
    pub end: usize,
    pub label: Label,
    pub source: Source,
}

const OCTET: &str = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";

/// Numbers and addresses may only start after one of these (or at the start of the text). The
/// regex consumes that character and the finding is capture group 1: without a fixed start, a
/// counted repetition like `[2-6][0-9]{12,18}` makes the DFA track every start offset inside a
/// digit run, which blows up its states on digit-heavy lines (HDFS block ids, epoch stamps).
const NUMBER_START: &str = r"(?:^|[^0-9A-Za-z_.])";
const IPV4_START: &str = r"(?:^|[^0-9A-Za-z.])";
const IPV6_START: &str = r"(?:^|[^0-9A-Za-z:.])";

/// The rules of the enabled built-in detectors, in a fixed order.
///
/// Invariant the JSON screen relies on: no pattern has an assertion (`$`, `\b`, `\A`, `(?m)` …)
/// except `^` as the first branch of a start alternative `(?:^|[^…])` whose class admits `\n`.
/// A match inside one string is then also a match of that string inside others joined by `\n`.
pub(crate) fn builtin_rules(enabled: &[DetectorName]) -> Vec<Rule> {
    let ipv4 = format!("{IPV4_START}({OCTET}(?:\\.{OCTET}){{3}})");
    let table: Vec<(DetectorName, Check, String, usize)> = vec![
        (
            DetectorName::Email,
            Check::Email,
            r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}".into(),
            0,
        ),
        (
            DetectorName::Phone,
            Check::E164,
            r"\+[1-9][0-9]{0,3}(?:[ \-]?(?:\([0-9]{1,4}\)|[0-9]{1,6}))+".into(),
            0,
        ),
        (
            DetectorName::Phone,
            Check::CnMobile,
            format!(r"{NUMBER_START}((?:\+?86[ \-]?)?1[3-9][0-9](?:[ \-]?[0-9]{{4}}){{2}})"),
            1,
        ),
        (DetectorName::CnId, Check::CnId, format!(r"{NUMBER_START}([1-9][0-9]{{16}}[0-9Xx])"), 1),
        (
            DetectorName::Card,
            Check::Card,
            format!(
                "{NUMBER_START}({})",
                concat!(
                    r"[2-6][0-9]{12,18}",
                    r"|[2-6][0-9]{3}(?:[ \-][0-9]{4}){2}[ \-][0-9]{1,4}(?:[ \-][0-9]{1,3})?",
                    r"|3[0-9]{3}[ \-][0-9]{6}[ \-][0-9]{4,5}",
                )
            ),
            1,
        ),
        (DetectorName::Ip, Check::Ipv4, ipv4, 1),
        (
            DetectorName::Ip,
            Check::Ipv6,
            format!(
                r"{IPV6_START}([0-9A-Fa-f]{{0,4}}(?::[0-9A-Fa-f]{{0,4}}){{2,7}}(?:\.[0-9]{{1,3}}){{0,3}})"
            ),
            1,
        ),
        (
            DetectorName::ApiKey,
            Check::VendorKey,
            concat!(
                r"sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{20,}",
                r"|gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}",
                r"|xox[baprs]-[A-Za-z0-9\-]{10,}",
            )
            .into(),
            0,
        ),
        (DetectorName::ApiKey, Check::AwsKey, r"(?:AKIA|ASIA)[0-9A-Z]{16}".into(), 0),
        (
            DetectorName::ApiKey,
            Check::GenericSecret,
            concat!(
                r#"(?i)((?:x[_\-]?)?api[_\-]?key|apikey|access[_\-]?key(?:[_\-]?id)?"#,
                r#"|secret[_\-]?(?:access[_\-]?)?key|(?:access|auth|refresh|id|session|private)[_\-]?token"#,
                r#"|client[_\-]?secret|token|secret)"#,
                r#"["']?[ \t]*[:=][ \t]*["']?([A-Za-z0-9_\-.+/=~]{16,})"#,
            )
            .into(),
            2,
        ),
        (
            DetectorName::ApiKey,
            Check::Password,
            r#"(?i)(passwd|password)["']?[ \t]*[:=][ \t]*["']?([^ \t\r\n"'<>,;&\\]{4,})"#.into(),
            2,
        ),
        (
            DetectorName::Bearer,
            Check::Bearer,
            r"(?i)bearer[ \t]+([A-Za-z0-9\-._~+/]{8,}=*)".into(),
            1,
        ),
        (
            DetectorName::Jwt,
            Check::Jwt,
            r"eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*".into(),
            0,
        ),
    ];
    table
        .into_iter()
        .filter(|(detector, ..)| enabled.contains(detector))
        .map(|(detector, check, pattern, group)| Rule {
            source: Source::Builtin(detector),
            check,
            regex: Regex::new(&pattern).expect("built-in redaction patterns compile"),
            group,
        })
        .collect()
}

/// Decides whether a candidate is a real finding and which bytes to replace.
///
/// `whole` is the regex match, `secret` the capture group holding the finding (equal to `whole`
/// for rules without a group). Returns the span to replace, possibly shorter than the candidate.
pub(crate) fn validate(
    check: Check,
    text: &str,
    whole: (usize, usize),
    secret: (usize, usize),
    hint: KeyHint,
) -> Option<(usize, usize, Label)> {
    // Rules that keep a key (`api_key=`, `Bearer `) look at the whole match; the others at the
    // finding itself (for numbers, the match also holds the boundary character before it).
    let (start, end) = match check {
        Check::GenericSecret | Check::Password | Check::Bearer => whole,
        _ => secret,
    };
    let candidate = &text[start..end];
    let before = prev_char(text, start);
    match check {
        Check::Email => Some((start, end, Label::Email)),
        Check::E164 => {
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '+') {
                return None;
            }
            let end = longest_group_prefix(text, start, end, 8, 15)?;
            Some((start, end, Label::Phone))
        }
        Check::CnMobile => {
            if before == Some('.')
                || (!candidate.starts_with('+') && number_continues_before(text, start))
            {
                return None;
            }
            if !digit_boundary_after(text, end) {
                return None;
            }
            let bare = candidate.bytes().all(|b| b.is_ascii_digit()) && candidate.len() == 11;
            if bare && benign_numeric_context(text, start, end, hint) {
                return None;
            }
            Some((start, end, Label::Phone))
        }
        Check::CnId => {
            if before == Some('.')
                || number_continues_before(text, start)
                || !digit_boundary_after(text, end)
                || inside_hex_identifier(text, start, end)
                || !cn_id_checksum_ok(candidate)
            {
                return None;
            }
            Some((start, end, Label::CnId))
        }
        Check::Card => validate_card(text, (start, end), before, hint),
        Check::Ipv4 => {
            // 0.0.0.0/8 is "this network": no peer ever has such an address, while versions
            // (`vllm 0.10.1.1`) very often look like one.
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '.')
                || !digit_boundary_after(text, end)
                || candidate
                    .parse::<std::net::Ipv4Addr>()
                    .is_ok_and(|ip| ip.is_loopback() || ip.octets()[0] == 0)
                || version_context(text, (start, end), hint)
            {
                return None;
            }
            Some((start, end, Label::Ip))
        }
        Check::Ipv6 => ipv6(text, start, end).map(|(s, e)| (s, e, Label::Ip)),
        Check::VendorKey => {
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                return None;
            }
            let body = candidate
                .split_once(['-', '_'])
                .map_or(candidate, |(_, body)| body);
            let has_digit = body.bytes().any(|b| b.is_ascii_digit());
            let has_alpha = body.bytes().any(|b| b.is_ascii_alphabetic());
            (has_digit && has_alpha).then_some((start, end, Label::ApiKey))
        }
        Check::AwsKey => {
            if before.is_some_and(|c| c.is_ascii_alphanumeric())
                || next_char(text, end).is_some_and(|c| c.is_ascii_alphanumeric())
            {
                return None;
            }
            Some((start, end, Label::ApiKey))
        }
        Check::GenericSecret => {
            let value = &text[secret.0..secret.1];
            if !looks_like_secret(value) {
                return None;
            }
            let key = text[start..secret.0].to_ascii_lowercase();
            let label = if key.contains("token") {
                Label::Token
            } else {
                Label::ApiKey
            };
            Some((secret.0, secret.1, label))
        }
        Check::Password => Some((secret.0, secret.1, Label::ApiKey)),
        Check::Bearer => {
            if before.is_some_and(|c| c.is_ascii_alphanumeric()) {
                return None;
            }
            let token = &text[secret.0..secret.1];
            let opaque = token
                .bytes()
                .any(|b| b.is_ascii_digit() || b"-._~+/=".contains(&b));
            opaque.then_some((secret.0, secret.1, Label::Token))
        }
        Check::Jwt => {
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                return None;
            }
            Some((start, end, Label::Jwt))
        }
        Check::Custom(index) => (start < end).then_some((start, end, Label::Custom(index))),
    }
}

/// A card number candidate (`Check::Card`): the whole candidate or its longest group prefix that
/// passes the length, separator, issuer-prefix and Luhn checks, outside identifiers and benign
/// numeric contexts.
fn validate_card(
    text: &str,
    (start, end): (usize, usize),
    before: Option<char>,
    hint: KeyHint,
) -> Option<(usize, usize, Label)> {
    let candidate = &text[start..end];
    if before == Some('.')
        || number_continues_before(text, start)
        || inside_hex_identifier(text, start, end)
    {
        return None;
    }
    let contiguous = candidate.bytes().all(|b| b.is_ascii_digit());
    // Try the whole candidate, then shorter group prefixes: "4111 1111 1111 1111 202"
    // is a card followed by a number, not a 19-digit card that fails Luhn.
    for end in group_ends(text, start, end).into_iter().rev() {
        let digits: Vec<u8> = text[start..end]
            .bytes()
            .filter(u8::is_ascii_digit)
            .map(|b| b - b'0')
            .collect();
        if !(13..=19).contains(&digits.len())
            || !separators_consistent(&text[start..end])
            || !card_prefix_ok(&digits)
            || !luhn_ok(&digits)
        {
            continue;
        }
        if contiguous
            && (!digit_boundary_after(text, end) || benign_numeric_context(text, start, end, hint))
        {
            return None;
        }
        if !contiguous && next_char(text, end).is_some_and(|c| c.is_ascii_alphanumeric()) {
            continue;
        }
        return Some((start, end, Label::Card));
    }
    None
}

/// True when the digits at `start` continue an identifier or a number before them: `blk_695…`,
/// `blk_-695…`, `req-4111…`, `x4111…`. ASCII only, like [`digit_boundary_after`].
fn number_continues_before(text: &str, start: usize) -> bool {
    let bytes = &text.as_bytes()[..start];
    match bytes {
        [] => false,
        [.., before, b'-'] => before.is_ascii_alphanumeric() || *before == b'_',
        [.., before] => before.is_ascii_alphanumeric() || *before == b'_',
    }
}

fn prev_char(text: &str, index: usize) -> Option<char> {
    text[..index].chars().next_back()
}

fn next_char(text: &str, index: usize) -> Option<char> {
    text[index..].chars().next()
}

/// True when the number ending at `end` really ends there: no letter or digit follows, and no
/// `.digit` (which would make it the integer part of a float or a longer dotted number).
fn digit_boundary_after(text: &str, end: usize) -> bool {
    // ASCII only: in Chinese logs a number often touches CJK text ("手机13800138000").
    match &text.as_bytes()[end..] {
        [] => true,
        [b'.', next, ..] => !next.is_ascii_digit(),
        [next, ..] => !next.is_ascii_alphanumeric(),
    }
}

/// Ends of digit groups (after a digit or `)` that is not followed by another digit) within
/// `[start, end)`, in increasing order; `end` itself is always included when it ends a group.
fn group_ends(text: &str, start: usize, end: usize) -> Vec<usize> {
    let bytes = text.as_bytes();
    (start + 1..=end)
        .filter(|&i| {
            let previous = bytes[i - 1];
            (previous.is_ascii_digit() || previous == b')')
                && (i == end || !(bytes[i].is_ascii_digit() || bytes[i] == b')'))
        })
        .collect()
}

/// The longest prefix of `[start, end)` ending at a group boundary whose digit count lies in
/// `min..=max` digits: `+1 415 555 2671 2026` is a phone number followed by a year.
fn longest_group_prefix(
    text: &str,
    start: usize,
    end: usize,
    min: usize,
    max: usize,
) -> Option<usize> {
    group_ends(text, start, end)
        .into_iter()
        .rev()
        .find(|&group_end| {
            let digits = text[start..group_end]
                .bytes()
                .filter(u8::is_ascii_digit)
                .count();
            (min..=max).contains(&digits)
        })
}

fn separators_consistent(candidate: &str) -> bool {
    let mut separators = candidate.bytes().filter(|b| !b.is_ascii_digit());
    match separators.next() {
        None => true,
        Some(first) => separators.all(|b| b == first),
    }
}

/// Issuer prefixes of the networks that use 13-19 digit numbers. Leading `1` is excluded on
/// purpose: epoch timestamps in ms/µs/ns (13/16/19 digits) start with `1` until 2033.
fn card_prefix_ok(digits: &[u8]) -> bool {
    let two = digits[0] * 10 + digits[1];
    match digits[0] {
        2 => {
            let four = u32::from(two) * 100 + u32::from(digits[2]) * 10 + u32::from(digits[3]);
            (2221..=2720).contains(&four) && digits.len() == 16
        }
        3 => matches!(two, 30 | 34 | 35 | 36 | 37 | 38 | 39),
        4..=6 => true,
        _ => false,
    }
}

pub(crate) fn luhn_ok(digits: &[u8]) -> bool {
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            let d = u32::from(d);
            if i % 2 == 1 {
                let doubled = d * 2;
                if doubled > 9 { doubled - 9 } else { doubled }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// ISO 7064 MOD 11-2 check character of the first 17 digits of a resident ID number.
pub(crate) fn cn_id_check_char(first17: &[u8]) -> Option<u8> {
    const WEIGHTS: [u32; 17] = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2];
    const CHECK: &[u8; 11] = b"10X98765432";
    if first17.len() != 17 || !first17.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let sum: u32 = first17
        .iter()
        .zip(WEIGHTS)
        .map(|(&b, w)| u32::from(b - b'0') * w)
        .sum();
    Some(CHECK[(sum % 11) as usize])
}

fn cn_id_checksum_ok(candidate: &str) -> bool {
    let bytes = candidate.as_bytes();
    bytes.len() == 18 && cn_id_check_char(&bytes[..17]) == Some(bytes[17].to_ascii_uppercase())
}

/// A candidate inside a UUID or a long hex identifier (trace id, hash) is part of that id.
fn inside_hex_identifier(text: &str, start: usize, end: usize) -> bool {
    let bytes = text.as_bytes();
    let is_id_byte = |b: u8| b.is_ascii_hexdigit() || b == b'-';
    let mut left = start;
    while left > 0 && is_id_byte(bytes[left - 1]) {
        left -= 1;
    }
    let mut right = end;
    while right < bytes.len() && is_id_byte(bytes[right]) {
        right += 1;
    }
    if (left, right) == (start, end) {
        return false;
    }
    let token = &text[left..right];
    let hex_count = token.bytes().filter(u8::is_ascii_hexdigit).count();
    let is_uuid = token.len() == 36
        && token.bytes().enumerate().all(|(i, b)| {
            if matches!(i, 8 | 13 | 18 | 23) {
                b == b'-'
            } else {
                b.is_ascii_hexdigit()
            }
        });
    is_uuid || (hex_count >= 32 && token.bytes().any(|b| b.is_ascii_alphabetic()))
}

/// Words after a number that make it a quantity, not an identifier.
const UNIT_WORDS: &[&str] = &[
    "b", "bytes", "byte", "kb", "mb", "gb", "kib", "mib", "gib", "ms", "us", "µs", "ns", "tokens",
    "tok", "blocks",
];

/// Last segments of keys whose values are quantities (`gpu_memory_bytes=17179869184`).
const NUMERIC_KEY_SUFFIXES: &[&str] = &[
    "bytes",
    "byte",
    "ms",
    "us",
    "ns",
    "nanos",
    "nano",
    "sec",
    "secs",
    "seconds",
    "tokens",
    "count",
    "size",
    "total",
    "len",
    "length",
    "ts",
    "timestamp",
    "time",
    "offset",
    "seq",
    "step",
    "duration",
    "latency",
    "elapsed",
    "memory",
    "mem",
    "blocks",
    "usage",
    "capacity",
    "limit",
];

/// True when the key names a count, size, duration or timestamp.
pub(crate) fn is_numeric_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    let last = key.rsplit(['_', '.', '-']).next().unwrap_or(&key);
    NUMERIC_KEY_SUFFIXES.contains(&last) || key.ends_with("bytes") || key.ends_with("tokens")
}

/// True when a bare number sits in a quantity context: `17179869184 bytes`,
/// `gpu_memory_bytes=17179869184`, or a JSON value under such a key.
fn benign_numeric_context(text: &str, start: usize, end: usize, hint: KeyHint) -> bool {
    if hint == KeyHint::Numeric {
        return true;
    }
    let rest = &text[end..];
    let rest = rest.strip_prefix(' ').unwrap_or(rest);
    let word_len = rest
        .find(|c: char| !c.is_alphabetic())
        .unwrap_or(rest.len());
    if word_len > 0 && UNIT_WORDS.contains(&rest[..word_len].to_lowercase().as_str()) {
        return true;
    }
    preceding_key(text, start).is_some_and(is_numeric_key)
}

/// Where the key-like word (`[A-Za-z0-9_.-]+`) that ends `text` starts; a char boundary also
/// when a non-ASCII character comes before it.
fn key_start(text: &str) -> usize {
    text.char_indices()
        .rev()
        .find(|&(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
        .map_or(0, |(i, c)| i + c.len_utf8())
}

/// The `key` of a `key=value` / `key: value` / `"key": "value"` right before `start`.
fn preceding_key(text: &str, start: usize) -> Option<&str> {
    let before = text[..start].trim_end_matches([' ', '\t', '"', '\'']);
    let before = before.strip_suffix(['=', ':'])?;
    let before = before.trim_end_matches([' ', '\t', '"', '\'']);
    let key = &before[key_start(before)..];
    (!key.is_empty()).then_some(key)
}

/// Runtime components of a serving stack whose name is followed by their version in banners and
/// environment dumps (`torch 2.1.0.1`, `CUDA 12.1.0.1`, `"nccl": "2.18.1.1"`): generic software
/// names, none of which names a host or a peer.
const RUNTIME_COMPONENTS: &[&str] = &[
    "torch",
    "pytorch",
    "cuda",
    "cudnn",
    "cublas",
    "nccl",
    "rccl",
    "rocm",
    "hip",
    "triton",
    "tensorrt",
    "python",
    "driver",
    "firmware",
    "vbios",
    "bios",
    "kernel",
    "linux",
    "glibc",
    "gcc",
    "openssl",
    "jdk",
    "java",
    "numpy",
    "transformers",
    "tokenizers",
    "xformers",
    "flashinfer",
    "onnxruntime",
    "tensorflow",
    "jax",
];

/// Words after which a dotted number is an address whatever else the text says.
const ADDRESS_WORDS: &[&str] = &[
    "from",
    "to",
    "at",
    "by",
    "via",
    "on",
    "for",
    "host",
    "hostname",
    "peer",
    "ip",
    "ipv4",
    "addr",
    "address",
    "client",
    "server",
    "remote",
    "local",
    "src",
    "source",
    "dst",
    "dest",
    "destination",
    "gateway",
    "gw",
    "proxy",
    "upstream",
    "endpoint",
    "node",
    "target",
    "master",
    "bind",
    "listen",
    "listening",
    "connect",
    "connected",
    "connecting",
    "resolved",
    "dns",
    "nameserver",
    "router",
    "subnet",
    "inet",
    "nexthop",
];

/// True when the key names a version, build or revision (`version`, `service.version`,
/// `vllm_version`, `appVersion`, `build`, `git.revision`) or a runtime component whose value is
/// its version (`torch`, `nvidia.driver`).
pub(crate) fn is_version_key(key: &str) -> bool {
    names_a_version(key, true)
}

/// [`is_version_key`], with runtime components or without.
fn names_a_version(key: &str, or_component: bool) -> bool {
    infersight_model::mapping::names_a_version(key) || (or_component && names_a_component(key))
}

/// True when the key's last segment is a [`RUNTIME_COMPONENTS`] name (`torch`, `nvidia.driver`).
fn names_a_component(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    let last = key.rsplit(['_', '.', '-']).next().unwrap_or(&key);
    RUNTIME_COMPONENTS.contains(&last)
}

/// True when the dotted number at `start` is a version by its context: under a version key
/// (`hint`), after one in the text (`service.version=1.2.3.4`, `"version": "1.2.3.4"`,
/// `version 1.2.3.4`, `torch 2.1.0.1`), as the version of a product token (`vllm/1.2.3.4`, as
/// in a User-Agent), pinned to a package (`lib==1.2.3.4`), or as one entry of a list of
/// components and their versions (`libfoo 1.2.3.4, libbar 2.0.1`). Addresses after any other
/// word (`from 10.0.0.5`, `host=10.0.0.5`), or with a port or prefix length, are not.
fn version_context(text: &str, (start, end): (usize, usize), hint: KeyHint) -> bool {
    if hint == KeyHint::Version {
        return true;
    }
    if let Some(product) = text[..start].strip_suffix('/') {
        let name_start = key_start(product);
        // a product token stands alone (`vllm/…`); `/var/log/10.0.0.5` is a path
        let alone = product[..name_start]
            .chars()
            .next_back()
            .is_none_or(|c| c.is_whitespace() || matches!(c, '(' | '"' | '\'' | ',' | ';'));
        return alone
            && product[name_start..]
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphabetic());
    }
    let before = text[..start].trim_end_matches([' ', '\t', '"', '\'']);
    if let Some(package) = ["==", "~=", ">=", "<=", "!="]
        .iter()
        .find_map(|pin| before.strip_suffix(pin))
    {
        return package.ends_with(|c: char| c.is_ascii_alphanumeric());
    }
    let before = before.strip_suffix(['=', ':']).unwrap_or(before);
    let before = before.trim_end_matches([' ', '\t', '"', '\'']);
    let word_start = key_start(before);
    let word = &before[word_start..];
    if word.is_empty() {
        return false;
    }
    // an address with a port (`torch 10.0.0.5:29500`) or a prefix length (`/24`) is a version
    // only after a word that says so
    let port_or_prefix =
        matches!(text.as_bytes()[end..], [b':' | b'/', next, ..] if next.is_ascii_digit());
    if names_a_version(word, !port_or_prefix) {
        return true;
    }
    let lower = word.to_ascii_lowercase();
    !port_or_prefix
        && word.starts_with(|c: char| c.is_ascii_alphabetic())
        && !ADDRESS_WORDS.contains(&lower.as_str())
        && (version_pair_after(&text[end..]) || version_pair_before(&text[..word_start]))
}

/// A dotted number no address looks like: three parts (`3.10.12`), or more than four.
fn is_plain_version(number: &str) -> bool {
    let parts: Vec<&str> = number.split('.').collect();
    parts.len() >= 3
        && parts.len() != 4
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// The text after a candidate goes on with another component and its version (`, cuda 12.1.0`).
fn version_pair_after(rest: &str) -> bool {
    let rest = rest.trim_start_matches([',', ';', ' ', '\t']);
    let rest = rest.strip_prefix("and ").unwrap_or(rest);
    let name_end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
        .unwrap_or(rest.len());
    let (name, rest) = rest.split_at(name_end);
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return false;
    }
    let rest = rest.trim_start_matches([' ', '=', ':', '/', 'v']);
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    is_plain_version(rest[..number_end].trim_end_matches('.'))
}

/// The text before a candidate's word ends with another component and its version
/// (`python 3.10.12, `).
fn version_pair_before(head: &str) -> bool {
    let head = head.trim_end_matches([',', ';', ' ', '\t']);
    let head = head.strip_suffix(" and").unwrap_or(head);
    let number_start = head
        .rfind(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or(0, |i| i + 1);
    let (head, number) = head.split_at(number_start);
    let head = head.trim_end_matches([' ', '=', ':', '/', 'v']);
    is_plain_version(number)
        && head[key_start(head)..].starts_with(|c: char| c.is_ascii_alphabetic())
}

/// Generic `token=VALUE` values: long, mixed character classes, high Shannon entropy, not a dotted
/// name — so `token=the_quick_brown_fox` or a run of one character is left alone.
fn looks_like_secret(value: &str) -> bool {
    // `token: android.os.BinderProxy@2bd79ce` names a class, it is not a secret.
    let dotted_name = value.contains('.')
        && value
            .split('.')
            .all(|part| part.bytes().all(|b| b.is_ascii_alphabetic()));
    if dotted_name {
        return false;
    }
    let classes = [
        value.bytes().any(|b| b.is_ascii_lowercase()),
        value.bytes().any(|b| b.is_ascii_uppercase()),
        value.bytes().any(|b| b.is_ascii_digit()),
    ];
    value.len() >= 16
        && classes.iter().filter(|&&c| c).count() >= 2
        && shannon_entropy(value) >= 3.0
}

pub(crate) fn shannon_entropy(value: &str) -> f64 {
    let mut counts = [0u32; 256];
    for b in value.bytes() {
        counts[b as usize] += 1;
    }
    let len = value.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / len;
            -p * p.log2()
        })
        .sum()
}

/// Validates an IPv6 candidate; returns the span to replace.
fn ipv6(text: &str, start: usize, mut end: usize) -> Option<(usize, usize)> {
    // "fe80::1: link down" — a single trailing colon belongs to the sentence.
    if text[start..end].ends_with(':') && !text[start..end].ends_with("::") {
        end -= 1;
    }
    let candidate = &text[start..end];
    let colons = candidate.bytes().filter(|&b| b == b':').count();
    let full_form = colons == 7 || (colons == 6 && candidate.contains('.'));
    if !(candidate.contains("::") || full_form)
        || !candidate.bytes().any(|b| b.is_ascii_digit())
        || !candidate.split([':', '.']).any(|group| !group.is_empty())
        || candidate
            .parse::<std::net::Ipv6Addr>()
            .is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified())
        || candidate.parse::<std::net::Ipv6Addr>().is_err()
    {
        return None;
    }
    let before = prev_char(text, start);
    if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == ':' || c == '.') {
        return None;
    }
    // `x[::2]`, `a[1::3]` are slices, `http://[::1]:80` is an address.
    if before == Some('[')
        && prev_char(text, start - 1)
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == ']' || c == ')')
    {
        return None;
    }
    if next_char(text, end).is_some_and(|c| c.is_ascii_alphanumeric() || c == '.') {
        return None;
    }
    // More colon groups follow: a longer colon-hex id (chip or key fingerprint), not an address.
    if let [b':', next, ..] = &text.as_bytes()[end..]
        && next.is_ascii_hexdigit()
    {
        return None;
    }
    Some((start, end))
}
