//! The parsers of what a caller sends: the `Authorization: Bearer <token>` header (HTTP header or
//! gRPC metadata, the same bytes), the UI's session cookie, and the proxy addresses of `[auth] trusted_proxies`
//! (`10.0.0.0/8`, `::1`, `127.0.0.1/32`). Both take any input and answer an error, never panic.

use std::net::IpAddr;

use super::tokens::MAX_BEARER_BYTES;

/// The token of an `Authorization` header value: scheme `Bearer` (any case), one or more spaces,
/// a token68 (RFC 7235: letters, digits, `-._~+/`, then `=` padding).
pub fn parse_bearer(value: &[u8]) -> Result<&str, String> {
    const EXPECTED: &str = "expected `Authorization: Bearer <token>`";
    let text = std::str::from_utf8(value)
        .map_err(|_| format!("the Authorization header is not ASCII; {EXPECTED}"))?
        .trim_matches(|c| c == ' ' || c == '\t');
    let (scheme, rest) = text
        .split_once([' ', '\t'])
        .ok_or_else(|| format!("the Authorization header has no token; {EXPECTED}"))?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        let shown: String = scheme.chars().take(16).collect();
        return Err(format!(
            "the Authorization scheme `{}` is not supported; {EXPECTED}",
            shown.escape_debug()
        ));
    }
    let token = rest.trim_start_matches([' ', '\t']);
    if token.is_empty() || token.len() > MAX_BEARER_BYTES {
        return Err(format!(
            "the bearer token is empty or longer than {MAX_BEARER_BYTES} bytes"
        ));
    }
    let body = token.trim_end_matches('=');
    let token68 = !body.is_empty()
        && body.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/')
        });
    if !token68 {
        return Err(format!(
            "the bearer token holds characters a token cannot have; {EXPECTED}"
        ));
    }
    Ok(token)
}

/// The cookie holding a logged-in browser's token (`super::session`).
pub const SESSION_COOKIE: &str = "infersight_token";

/// The token of the session cookie in `headers`, if any.
pub fn cookie_token(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, token)| token.trim().to_string())
        .filter(|token| !token.is_empty())
}

/// An address block: `addr/prefix`, or one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let text = text.trim();
        let (addr_text, prefix_text) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let addr: IpAddr = addr_text
            .parse()
            .map_err(|_| format!("`{text}` is not an address or address/prefix"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix_text {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("`{text}`: the prefix must be 0..={max}"))?,
        };
        Ok(Cidr { addr, prefix })
    }

    /// Whether `ip` is in the block (an IPv4-mapped IPv6 peer counts as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => prefix_match(
                u128::from(u32::from(net)),
                u128::from(u32::from(ip)),
                self.prefix,
                32,
            ),
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                prefix_match(u128::from(net), u128::from(ip), self.prefix, 128)
            }
            _ => false,
        }
    }
}

fn prefix_match(net: u128, ip: u128, prefix: u8, bits: u32) -> bool {
    let prefix = u32::from(prefix).min(bits);
    if prefix == 0 {
        return true;
    }
    let shift = bits - prefix;
    (net >> shift) == (ip >> shift)
}
