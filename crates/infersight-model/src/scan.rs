//! Byte scans shared by the hot text paths of ingestion and querying: the OTLP/JSON decoder, the
//! JSON writer of `attrs`, the `attrs` reader ([`crate::attrs`]: dimension discovery and
//! `json_get`) and the redaction stage all walk JSON strings, and a byte-at-a-time loop over them
//! was the largest single cost of `infersight ingest`. [`json_string_special`] looks at eight
//! bytes per step (SWAR: plain `u64` arithmetic, no `unsafe`, no target features);
//! [`json_string_end`] is the one reader of a whole JSON string (escapes included) built on it.

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// High bit set in each byte of `word` that is zero. Only the lowest flagged byte is exact (a
/// borrow can flag bytes above a true zero), which is all a forward scan needs.
#[inline]
fn zero_bytes(word: u64) -> u64 {
    word.wrapping_sub(ONES) & !word & HIGHS
}

/// High bit set in each byte of `word` below 0x20 (lowest flagged byte exact, as above).
#[inline]
fn control_bytes(word: u64) -> u64 {
    word.wrapping_sub(ONES * 0x20) & !word & HIGHS
}

/// High bit set in each byte of `word` that ends a plain run of a JSON string: `"`, `\` or a
/// control character.
#[inline]
fn string_special_bytes(word: u64) -> u64 {
    zero_bytes(word ^ (ONES * u64::from(b'"')))
        | zero_bytes(word ^ (ONES * u64::from(b'\\')))
        | control_bytes(word)
}

#[inline]
fn is_string_special(byte: u8) -> bool {
    byte == b'"' || byte == b'\\' || byte < 0x20
}

/// Index of the first byte at or after `from` that a JSON string cannot hold as is — `"`, `\` or
/// a control character (below 0x20) — or `bytes.len()` when there is none. Words are read past
/// the end of a short string (the first special byte is what counts), so only the last bytes of
/// the whole buffer are looked at one by one.
#[inline]
pub fn json_string_special(bytes: &[u8], from: usize) -> usize {
    let mut at = from.min(bytes.len());
    while let Some(chunk) = bytes.get(at..at + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let special = string_special_bytes(u64::from_le_bytes(word));
        if special != 0 {
            return at + (special.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    bytes[at..]
        .iter()
        .position(|b| is_string_special(*b))
        .map_or(bytes.len(), |i| at + i)
}

/// Whether `text` can be written inside JSON quotes without escaping anything.
#[inline]
pub fn json_string_is_plain(text: &str) -> bool {
    json_string_special(text.as_bytes(), 0) == text.len()
}

/// Where a JSON string ends, as read by [`json_string_end`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonStringEnd {
    /// Index of the closing quote.
    pub quote: usize,
    /// Whether the string holds an escape, so its text is not the bytes between its quotes.
    pub escaped: bool,
}

/// Reads the JSON string whose content starts at `start` (just after its opening quote): where
/// its closing quote is and whether it holds escapes. `None` when the text ends inside it, or it
/// holds a raw control character or an escape JSON does not have (serde_json rejects all three).
/// A `\u` escape is checked for its four hex digits only; surrogate pairs are the decoder's
/// business, so a string this accepts may still fail to decode.
#[inline]
pub fn json_string_end(bytes: &[u8], start: usize) -> Option<JsonStringEnd> {
    let mut at = start;
    let mut escaped = false;
    loop {
        at = json_string_special(bytes, at);
        match *bytes.get(at)? {
            b'"' => return Some(JsonStringEnd { quote: at, escaped }),
            b'\\' => {
                escaped = true;
                at += match *bytes.get(at + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => 2,
                    b'u' if bytes
                        .get(at + 2..at + 6)
                        .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit)) =>
                    {
                        6
                    }
                    _ => return None,
                };
            }
            // a control character
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(bytes: &[u8], from: usize) -> usize {
        (from..bytes.len())
            .find(|i| is_string_special(bytes[*i]))
            .unwrap_or(bytes.len())
    }

    #[test]
    fn finds_the_first_special_byte_at_every_position() {
        // every special byte (and its neighbours in value) at every offset of a 20-byte buffer,
        // from every start, against the byte-at-a-time definition
        let specials = [b'"', b'\\', 0u8, 0x1f, b'\n'];
        let fillers = [b'a', 0x20, 0x21, 0x5b, 0x5d, 0x7f, 0x80, 0xff, b'#', b'!'];
        for filler in fillers {
            for special in specials {
                for at in 0..20 {
                    let mut bytes = vec![filler; 20];
                    bytes[at] = special;
                    for from in 0..=20 {
                        assert_eq!(
                            json_string_special(&bytes, from),
                            reference(&bytes, from),
                            "special {special:#x} at {at}, filler {filler:#x}, from {from}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn agrees_with_the_definition_on_seeded_random_bytes() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        for _ in 0..2_000 {
            let len = (next() % 40) as usize;
            // mostly plain bytes, sometimes a special one, and bytes just above/below the limits
            let bytes: Vec<u8> = (0..len)
                .map(|_| match next() % 16 {
                    0 => b'"',
                    1 => b'\\',
                    2 => (next() % 0x20) as u8,
                    3 => 0x20 + (next() % 3) as u8,
                    4 => 0x5b + (next() % 3) as u8,
                    _ => (next() % 256) as u8,
                })
                .collect();
            for from in 0..=len {
                assert_eq!(json_string_special(&bytes, from), reference(&bytes, from));
            }
        }
    }

    #[test]
    fn plain_strings_are_told_from_those_needing_escapes() {
        assert!(json_string_is_plain(""));
        assert!(json_string_is_plain("llama-3-8b/with spaces and ünïcode"));
        assert!(!json_string_is_plain("a \"quoted\" word"));
        assert!(!json_string_is_plain("back\\slash"));
        assert!(!json_string_is_plain("line\nbreak"));
        assert!(!json_string_is_plain("0123456789abcdef\t"));
        assert_eq!(json_string_special(b"abc", 10), 3);
    }

    /// `json_string_end` agrees with serde_json on where a string ends and whether it holds
    /// escapes, wherever serde_json can read the string.
    #[test]
    fn string_ends_agree_with_serde_json() {
        let cases: &[(&str, Option<(usize, bool)>)] = &[
            (r#""""#, Some((1, false))),
            (r#""plain" tail"#, Some((6, false))),
            (r#""a\"b""#, Some((5, true))),
            (r#""\\""#, Some((3, true))),
            (r#""\u00e9 and \/ \b\f\n\r\t""#, Some((25, true))),
            (r#""\ud800""#, Some((7, true))),
            (r#""\u00g9""#, None),
            (r#""\u00""#, None),
            (r#""\x""#, None),
            (r#""cut off"#, None),
            (r#""ends in a backslash\"#, None),
            ("\"tab\there\"", None),
            ("\"\u{7f}\u{80}é\"", Some((6, false))),
        ];
        for (text, expected) in cases {
            let found = json_string_end(text.as_bytes(), 1).map(|end| (end.quote, end.escaped));
            assert_eq!(found, *expected, "{text}");
            let serde = serde_json::Deserializer::from_str(text)
                .into_iter::<String>()
                .next()
                .and_then(Result::ok);
            if let Some(decoded) = serde {
                let end = json_string_end(text.as_bytes(), 1).unwrap();
                assert_eq!(end.escaped, decoded != text[1..end.quote], "{text}");
            } else if !text.contains("\\ud800") {
                assert_eq!(found, None, "{text}");
            }
        }
    }
}
