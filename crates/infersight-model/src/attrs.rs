//! Reading the `attrs` column: the JSON object of a row's extra attributes, as the ingest writes
//! it (`normalize`), read back by the query side: dimension discovery counts its top-level keys
//! and the `json_get` UDF picks one of them. Both must agree with what `json_get` has always meant,
//! `serde_json::from_str::<Map<String, Value>>`, without building a map per row.
//!
//! [`read_attrs`] yields a row's top-level `(key, value)` entries in the row's order: flat objects
//! (no escapes, nested values or exponents: the common case) by a small scanner borrowing keys and
//! strings from the row, anything else by serde_json's deserializer visiting the same values. Either
//! way a row reads exactly when the map parse succeeds, and [`ValueTexts`] renders a value as the
//! text `json_get` gives for it (numbers and booleans are rendered only when asked for).

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::HashMap;
use std::fmt::Write as _;

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};

use crate::scan::json_string_end;

/// A top-level value of `attrs`, as far as its readers care.
#[derive(Debug)]
pub enum AttrsValue<'a> {
    /// `null`: `json_get` gives NULL, discovery counts no value.
    Null,
    /// A string, borrowed from the row unless it had escapes.
    Text(Cow<'a, str>),
    /// A number or boolean from serde_json, rendered the way `json_get` renders it.
    Scalar(serde_json::Value),
    /// `true` or `false` from the scanner.
    Bool(bool),
    /// The text of a JSON number that serde_json accepts (checked by [`scan_flat_object`]),
    /// rendered as `json_get` renders the number it parses to.
    Number(&'a str),
    /// An array or object (its text is not kept): not a dimension; `json_get` renders it from
    /// the map.
    NotScalar,
}

/// One parsed `attrs` entry, in the row's order (duplicate keys included).
pub type AttrsEntry<'a> = (Cow<'a, str>, AttrsValue<'a>);

/// Renders scalar values as `json_get` gives them (strings unquoted, numbers and booleans as
/// serde_json writes them), without allocating per value.
#[derive(Debug, Default)]
pub struct ValueTexts {
    buffer: String,
    /// Rendered text of number tokens that are not plain integers (`1.0`, `2.5`); bounded.
    /// Foldhash: the tokens are short and the cache lives for one reader.
    numbers: HashMap<Box<str>, Box<str>, foldhash::fast::RandomState>,
}

/// [`ValueTexts`] forgets its rendered numbers beyond this many.
const MAX_CACHED_NUMBERS: usize = 4096;

impl ValueTexts {
    /// The text `json_get` gives for `value`; `None` for null and for arrays and objects (whose
    /// text the reader does not keep).
    #[inline]
    pub fn text<'t>(&'t mut self, value: &'t AttrsValue<'_>) -> Option<&'t str> {
        match value {
            AttrsValue::Null | AttrsValue::NotScalar => None,
            AttrsValue::Text(text) => Some(text),
            AttrsValue::Bool(value) => Some(if *value { "true" } else { "false" }),
            AttrsValue::Number(token) => {
                let text = self.number(token);
                debug_assert!(text.is_some(), "{token} was checked to be a JSON number");
                text
            }
            AttrsValue::Scalar(scalar) => {
                self.buffer.clear();
                write!(self.buffer, "{scalar}").ok()?;
                Some(&self.buffer)
            }
        }
    }

    /// The text of a number token from [`scan_flat_object`]. An integer of up to 18 digits is
    /// its own text (serde_json reads it as a `u64` or `i64` and writes the same digits), except
    /// `-0`, which serde_json reads as the float `-0.0`; others go through serde_json.
    fn number<'t>(&'t mut self, token: &'t str) -> Option<&'t str> {
        let digits = token.strip_prefix('-').unwrap_or(token);
        if digits.len() <= 18 && token != "-0" && digits.bytes().all(|b| b.is_ascii_digit()) {
            return Some(token);
        }
        if !self.numbers.contains_key(token) {
            let value: serde_json::Value = serde_json::from_str(token).ok()?;
            if self.numbers.len() >= MAX_CACHED_NUMBERS {
                self.numbers.clear();
            }
            self.numbers
                .insert(token.into(), value.to_string().into_boxed_str());
        }
        self.numbers.get(token).map(AsRef::as_ref)
    }
}

/// Keys starting with this are serde_json's private markers: `serde_json::Value` reads an object
/// whose first key is one specially (`{"$serde_json::private::RawValue": "5"}` is the number 5).
const SERDE_JSON_PRIVATE_KEY: &str = "$serde_json::private::";

/// Parses `text` as a JSON object into `entries`, which it clears first (row order, repeated
/// keys kept: of a repeated key the map, and so `json_get`, keeps the last value). False, with
/// `entries` unspecified, exactly when `serde_json::from_str::<Map<String, Value>>(text)` fails.
/// Flat objects go through [`scan_flat_object`]; the rest through serde_json's deserializer,
/// which visits every value, nested ones included, with the same calls as for a `Map`; only the
/// values are not built. A row with a private-marker object inside is left to serde_json whole
/// (its entries then come from the map: in key order, without repeats).
pub fn read_attrs<'a>(text: &'a str, entries: &mut Vec<AttrsEntry<'a>>) -> bool {
    entries.clear();
    if scan_flat_object(text, entries) {
        return true;
    }
    entries.clear();
    let unusual = Cell::new(false);
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let parsed = AttrsSeed {
        entries: &mut *entries,
        unusual: &unusual,
    }
    .deserialize(&mut deserializer)
    .and_then(|()| deserializer.end());
    if parsed.is_ok() {
        return true;
    }
    if !unusual.get() {
        return false;
    }
    entries.clear();
    let Ok(object) = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(text)
    else {
        return false;
    };
    entries.extend(object.into_iter().map(|(key, value)| {
        let value = match value {
            serde_json::Value::Null => AttrsValue::Null,
            serde_json::Value::String(text) => AttrsValue::Text(Cow::Owned(text)),
            serde_json::Value::Array(_) | serde_json::Value::Object(_) => AttrsValue::NotScalar,
            scalar => AttrsValue::Scalar(scalar),
        };
        (Cow::Owned(key), value)
    }));
    true
}

/// The common case of [`read_attrs`] without serde: an object whose keys and string values have
/// no escapes and whose values are strings, numbers without exponent, `true`, `false` or `null`.
/// True, with `entries` filled, only for text serde_json accepts as a `Map<String, Value>`;
/// false for anything else (other shapes, and every invalid text), which serde_json then decides.
fn scan_flat_object<'a>(text: &'a str, entries: &mut Vec<AttrsEntry<'a>>) -> bool {
    let bytes = text.as_bytes();
    let mut at = skip_whitespace(bytes, 0);
    if bytes.get(at) != Some(&b'{') {
        return false;
    }
    at = skip_whitespace(bytes, at + 1);
    if bytes.get(at) == Some(&b'}') {
        return skip_whitespace(bytes, at + 1) == bytes.len();
    }
    loop {
        if bytes.get(at) != Some(&b'"') {
            return false;
        }
        let Some((key, next)) = plain_string(text, at + 1) else {
            return false;
        };
        at = skip_whitespace(bytes, next);
        if bytes.get(at) != Some(&b':') {
            return false;
        }
        at = skip_whitespace(bytes, at + 1);
        let rest = &bytes[at..];
        let (value, next) = match rest.first() {
            Some(b'"') => match plain_string(text, at + 1) {
                Some((value, next)) => (AttrsValue::Text(Cow::Borrowed(value)), next),
                None => return false,
            },
            Some(b't') if rest.starts_with(b"true") => (AttrsValue::Bool(true), at + 4),
            Some(b'f') if rest.starts_with(b"false") => (AttrsValue::Bool(false), at + 5),
            Some(b'n') if rest.starts_with(b"null") => (AttrsValue::Null, at + 4),
            Some(b'-' | b'0'..=b'9') => match number_end(bytes, at) {
                Some(end) => (AttrsValue::Number(&text[at..end]), end),
                None => return false,
            },
            _ => return false,
        };
        entries.push((Cow::Borrowed(key), value));
        at = skip_whitespace(bytes, next);
        match bytes.get(at) {
            Some(b',') => at = skip_whitespace(bytes, at + 1),
            Some(b'}') => return skip_whitespace(bytes, at + 1) == bytes.len(),
            _ => return false,
        }
    }
}

/// The index of the first byte at or after `at` that is not JSON whitespace.
fn skip_whitespace(bytes: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\t' | b'\r') = bytes.get(at) {
        at += 1;
    }
    at
}

/// The string starting at byte `start` (after its opening quote) and the index after its closing
/// quote, if it ends before any backslash or control character (which serde_json rejects).
fn plain_string(text: &str, start: usize) -> Option<(&str, usize)> {
    let end = json_string_end(text.as_bytes(), start)?;
    (!end.escaped).then(|| (&text[start..end.quote], end.quote + 1))
}

/// The end of the JSON number starting at `start`, if it is one serde_json reads without error:
/// `-`, then `0` or a non-zero digit and digits, then optionally `.` and digits. Exponents and
/// tokens of 300 characters or more (which could overflow an `f64`) are left to serde_json.
fn number_end(bytes: &[u8], start: usize) -> Option<usize> {
    let digits_from = |mut at: usize| {
        while bytes.get(at).is_some_and(u8::is_ascii_digit) {
            at += 1;
        }
        at
    };
    let mut at = start + usize::from(bytes[start] == b'-');
    at = match bytes.get(at)? {
        b'0' => at + 1,
        b'1'..=b'9' => digits_from(at + 1),
        _ => return None,
    };
    if bytes.get(at) == Some(&b'.') {
        let fraction_end = digits_from(at + 1);
        if fraction_end == at + 1 {
            return None;
        }
        at = fraction_end;
    }
    if matches!(bytes.get(at), Some(b'e' | b'E')) || at - start >= 300 {
        return None;
    }
    Some(at)
}

/// The top-level object of `attrs`: what `Map<String, Value>`'s `deserialize_map` visits.
struct AttrsSeed<'s, 'a> {
    entries: &'s mut Vec<AttrsEntry<'a>>,
    unusual: &'s Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for AttrsSeed<'_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for AttrsSeed<'_, 'de> {
    type Value = ();

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let value = map.next_value_seed(ValueSeed {
                unusual: self.unusual,
            })?;
            self.entries.push((key, value));
        }
        Ok(())
    }
}

/// A top-level key, borrowed unless it had escapes.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_string(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a string")
    }

    fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(key))
    }

    fn visit_str<E>(self, key: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(key.to_owned()))
    }

    fn visit_string<E>(self, key: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(key))
    }
}

/// A top-level value: the calls `serde_json::Value`'s visitor handles, mapped to [`AttrsValue`].
struct ValueSeed<'s> {
    unusual: &'s Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = AttrsValue<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = AttrsValue<'de>;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Self::Value, E> {
        Ok(AttrsValue::Scalar(serde_json::Value::Bool(value)))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Self::Value, E> {
        Ok(AttrsValue::Scalar(serde_json::Value::Number(value.into())))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Self::Value, E> {
        Ok(AttrsValue::Scalar(serde_json::Value::Number(value.into())))
    }

    fn visit_i128<E: serde::de::Error>(self, value: i128) -> Result<Self::Value, E> {
        let number = number_from(serde::de::value::I128Deserializer::new(value))?;
        Ok(AttrsValue::Scalar(serde_json::Value::Number(number)))
    }

    fn visit_u128<E: serde::de::Error>(self, value: u128) -> Result<Self::Value, E> {
        let number = number_from(serde::de::value::U128Deserializer::new(value))?;
        Ok(AttrsValue::Scalar(serde_json::Value::Number(number)))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Self::Value, E> {
        Ok(
            serde_json::Number::from_f64(value).map_or(AttrsValue::Null, |number| {
                AttrsValue::Scalar(serde_json::Value::Number(number))
            }),
        )
    }

    fn visit_borrowed_str<E>(self, value: &'de str) -> Result<Self::Value, E> {
        Ok(AttrsValue::Text(Cow::Borrowed(value)))
    }

    fn visit_str<E>(self, value: &str) -> Result<Self::Value, E> {
        Ok(AttrsValue::Text(Cow::Owned(value.to_owned())))
    }

    fn visit_string<E>(self, value: String) -> Result<Self::Value, E> {
        Ok(AttrsValue::Text(Cow::Owned(value)))
    }

    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(AttrsValue::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(AttrsValue::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        walk_seq(seq, self.unusual)?;
        Ok(AttrsValue::NotScalar)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        walk_map(map, self.unusual)?;
        Ok(AttrsValue::NotScalar)
    }
}

fn number_from<'de, D: Deserializer<'de>>(deserializer: D) -> Result<serde_json::Number, D::Error> {
    serde::Deserialize::deserialize(deserializer)
}

/// Elements of an array, visited as `serde_json::Value` visits them but not kept.
fn walk_seq<'de, A: SeqAccess<'de>>(mut seq: A, unusual: &Cell<bool>) -> Result<(), A::Error> {
    while seq.next_element_seed(NestedSeed { unusual })?.is_some() {}
    Ok(())
}

/// Entries of a nested object, visited as `serde_json::Value` visits them but not kept. Its first
/// key is classified by `Value`; a private marker there marks the row `unusual` and fails it.
fn walk_map<'de, A: MapAccess<'de>>(mut map: A, unusual: &Cell<bool>) -> Result<(), A::Error> {
    let Some(first_is_private) = map.next_key_seed(NestedKeySeed)? else {
        return Ok(());
    };
    if first_is_private {
        unusual.set(true);
        return Err(A::Error::custom("an object with a serde_json marker key"));
    }
    map.next_value_seed(NestedSeed { unusual })?;
    while map.next_key_seed(NestedKeySeed)?.is_some() {
        map.next_value_seed(NestedSeed { unusual })?;
    }
    Ok(())
}

/// A key inside a nested value: only whether it is a private marker matters.
struct NestedKeySeed;

impl<'de> DeserializeSeed<'de> for NestedKeySeed {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for NestedKeySeed {
    type Value = bool;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a string")
    }

    fn visit_str<E>(self, key: &str) -> Result<bool, E> {
        Ok(key.starts_with(SERDE_JSON_PRIVATE_KEY))
    }
}

/// A value inside an array or object, checked like `serde_json::Value` checks it, not kept.
struct NestedSeed<'s> {
    unusual: &'s Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for NestedSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NestedSeed<'_> {
    type Value = ();

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_i128<E: serde::de::Error>(self, value: i128) -> Result<(), E> {
        number_from(serde::de::value::I128Deserializer::new(value)).map(drop)
    }

    fn visit_u128<E: serde::de::Error>(self, value: u128) -> Result<(), E> {
        number_from(serde::de::value::U128Deserializer::new(value)).map(drop)
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        walk_seq(seq, self.unusual)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        walk_map(map, self.unusual)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use proptest::test_runner::{Config as ProptestConfig, RngSeed};

    use super::*;

    /// What `json_get` gives for a value of the map (`infersight_query::udf::value_text`), with
    /// arrays and objects marked as the reader marks them.
    fn map_text(value: &serde_json::Value) -> Option<String> {
        match value {
            serde_json::Value::Null => None,
            serde_json::Value::String(text) => Some(text.clone()),
            serde_json::Value::Array(_) | serde_json::Value::Object(_) => {
                Some("<not scalar>".to_string())
            }
            other => Some(other.to_string()),
        }
    }

    /// Checks [`read_attrs`] against `serde_json::Map` on `text`: it reads exactly what the map
    /// parse accepts, and the last value of each key renders as the map's value does.
    fn assert_reads_like_a_map(text: &str) -> Result<(), TestCaseError> {
        let mut entries = Vec::new();
        let parsed = read_attrs(text, &mut entries);
        let map = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(text);
        prop_assert_eq!(parsed, map.is_ok(), "{}", text);
        let Ok(map) = map else { return Ok(()) };
        let mut texts = ValueTexts::default();
        let mut rendered: BTreeMap<String, Option<String>> = BTreeMap::new();
        for (key, value) in &entries {
            let text = match value {
                AttrsValue::NotScalar => Some("<not scalar>".to_string()),
                value => texts.text(value).map(str::to_string),
            };
            rendered.insert(key.to_string(), text);
        }
        let expected: BTreeMap<String, Option<String>> = map
            .iter()
            .map(|(key, value)| (key.clone(), map_text(value)))
            .collect();
        prop_assert_eq!(rendered, expected, "{}", text);
        Ok(())
    }

    /// `read_attrs` accepts exactly what `serde_json::Map` accepts and yields the same values.
    #[test]
    fn attrs_read_like_a_serde_json_map() {
        let deep = format!(r#"{{"deep":{}{}}}"#, "[".repeat(200), "]".repeat(200));
        let texts = [
            r#"{"a":1,"b":1.0,"c":2.5e3,"d":-0,"e":-0.0,"f":1E2,"g":18446744073709551616}"#,
            r#"{"big":12345678901234567890,"neg":-9223372036854775808,"small":1.5E-7}"#,
            r#"{"s":"x\ny","u":"\u00e9","k\"q":true,"\u0041":null,"A":false}"#,
            r#"{"dup":1,"dup":"two","other":[],"dup":null}"#,
            r#"  {"ws" : [ 1 , { "a" : { } } ] }  "#,
            r#"{"raw":{"$serde_json::private::RawValue":"5"}}"#,
            r#"{"raw":{"\u0024serde_json::private::RawValue":"[1]"}}"#,
            r#"{"raw":[{"$serde_json::private::RawValue":"true"}]}"#,
            r#"{"raw":{"$serde_json::private::RawValue":5}}"#,
            r#"{"raw":{"$serde_json::private::RawValue":"5","more":1}}"#,
            r#"{"$serde_json::private::RawValue":"top level keys are plain"}"#,
            r#"{"a":"\ud800"}"#,
            r#"{"a":1e400}"#,
            r#"{"a":"\x"}"#,
            r#"{"a":1} x"#,
            r#"{"a":1,}"#,
            r#"{"a"}"#,
            "{\"a\":1}\n",
            "{",
            "",
            "[1]",
            "3",
            "\"s\"",
            "null",
            &deep,
            "{}",
            " { } ",
            "{\t\"a\"\r\n:\n1\t}",
            r#"{"a":1}}"#,
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":-}"#,
            r#"{"a":-0}"#,
            r#"{"a":-0.0}"#,
            r#"{"a":0.50}"#,
            r#"{"a":-12.250}"#,
            r#"{"a":.5}"#,
            r#"{"a":+1}"#,
            r#"{"a":123456789012345678,"b":-123456789012345678}"#,
            r#"{"a":1234567890123456789,"b":-1234567890123456789}"#,
            r#"{"a":99999999999999999999,"b":-99999999999999999999}"#,
            r#"{"a":tru}"#,
            r#"{"a":truex}"#,
            r#"{"a":nul,"b":1}"#,
            r#"{"a":falsy}"#,
            "{\"a\":\"tab\there\"}",
            "{\"a\":\"\u{7f}\u{80}é\"}",
            r#"{"a":"12345678","b":"1234567","c":"123456789","":""}"#,
            r#"{"a" "b"}"#,
            r#"{"a":1 "b":2}"#,
            r#"{"a":1,,"b":2}"#,
            &format!(r#"{{"a":{}}}"#, "9".repeat(310)),
            &format!(r#"{{"a":{}}}"#, "9".repeat(299)),
            &format!(r#"{{"a":0.{}1}}"#, "0".repeat(400)),
            &format!(r#"{{"a":1{}.5}}"#, "0".repeat(320)),
        ];
        for text in texts {
            if let Err(error) = assert_reads_like_a_map(text) {
                panic!("{error}");
            }
        }
    }

    #[test]
    fn entries_keep_the_row_order_and_borrow_flat_rows() {
        let text = r#"{"b":"x","a":2,"b":null}"#;
        let mut entries = vec![(Cow::Borrowed("stale"), AttrsValue::Null)];
        assert!(read_attrs(text, &mut entries));
        let keys: Vec<&str> = entries.iter().map(|(key, _)| key.as_ref()).collect();
        assert_eq!(keys, ["b", "a", "b"]);
        assert!(matches!(
            &entries[0],
            (Cow::Borrowed(_), AttrsValue::Text(Cow::Borrowed("x")))
        ));
        assert!(matches!(entries[1].1, AttrsValue::Number("2")));
    }

    fn proptest_config() -> ProptestConfig {
        ProptestConfig {
            cases: 512,
            rng_seed: RngSeed::Fixed(0xa7_75_0b_1e),
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    /// A JSON string literal: plain text, or text with quotes, backslashes, control characters
    /// and non-ASCII written as serde_json escapes them or as `\u` escapes.
    fn string_literal() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => "[a-z._]{0,12}".prop_map(|text| format!("\"{text}\"")),
            2 => "[a-zé\"\\\\\n\t\u{1}/ ]{0,10}"
                .prop_map(|text| serde_json::to_string(&text).unwrap()),
            1 => "[a-z]{0,3}".prop_map(|text| format!("\"\\u00e9{text}\\/\\u0041\"")),
        ]
    }

    /// A JSON number literal, in the forms serde_json reads (some it reads as floats or rejects).
    fn number_literal() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            (-1000i64..1000).prop_map(|n| n.to_string()),
            any::<f64>().prop_map(|n| n.to_string()),
            (any::<i32>(), 0u32..1000).prop_map(|(a, b)| format!("{a}.{b}")),
            (-5i32..5, 0u32..100, -30i32..30).prop_map(|(a, b, e)| format!("{a}.{b}e{e}")),
            Just("-0".to_string()),
            Just("-0.0".to_string()),
            Just("1E400".to_string()),
            "[1-9][0-9]{18,24}",
        ]
    }

    /// Any JSON value up to a small depth, written with some whitespace.
    fn value_literal() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            3 => string_literal(),
            3 => number_literal(),
            1 => prop::sample::select(vec!["true", "false", "null"]).prop_map(str::to_string),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4)
                    .prop_map(|items| format!("[{}]", items.join(", "))),
                prop::collection::vec((string_literal(), inner), 0..4).prop_map(|members| {
                    let members: Vec<String> = members
                        .into_iter()
                        .map(|(key, value)| format!("{key}:{value}"))
                        .collect();
                    format!("{{ {} }}", members.join(","))
                }),
            ]
        })
    }

    /// An `attrs` object: mostly flat, with repeated keys, escapes, nested values and numbers of
    /// every form; the separators draw from JSON's whitespace.
    fn attrs_object() -> impl Strategy<Value = String> {
        let key = prop_oneof![
            4 => prop::sample::select(vec!["model", "a", "b", "llm.lora", ""])
                .prop_map(|key| format!("\"{key}\"")),
            1 => string_literal(),
        ];
        let value = prop_oneof![
            3 => string_literal(),
            3 => number_literal(),
            1 => prop::sample::select(vec!["true", "false", "null"]).prop_map(str::to_string),
            1 => value_literal(),
        ];
        let space = prop::sample::select(vec!["", "", "", " ", "\n", "\t", "\r\n "]);
        prop::collection::vec((key, value, space), 0..8).prop_map(|members| {
            let members: Vec<String> = members
                .into_iter()
                .map(|(key, value, space)| format!("{space}{key}{space}:{value}{space}"))
                .collect();
            format!("{{{}}}", members.join(","))
        })
    }

    proptest! {
        #![proptest_config(proptest_config())]

        /// Random objects, flat or not, read like a `serde_json::Map`.
        #[test]
        fn random_attrs_read_like_a_serde_json_map(text in attrs_object()) {
            assert_reads_like_a_map(&text)?;
        }

        /// Damaged objects (cut short, or a byte replaced) are refused exactly when the map
        /// refuses them.
        #[test]
        fn damaged_attrs_read_like_a_serde_json_map(
            text in attrs_object(),
            at in any::<prop::sample::Index>(),
            byte in prop::sample::select(b"\"\\{}[],:. -0e\x01".to_vec()),
            cut in any::<bool>(),
        ) {
            let mut bytes = text.into_bytes();
            let at = at.index(bytes.len());
            if cut {
                bytes.truncate(at);
            } else {
                bytes[at] = byte;
            }
            if let Ok(text) = String::from_utf8(bytes) {
                assert_reads_like_a_map(&text)?;
            }
        }
    }
}
