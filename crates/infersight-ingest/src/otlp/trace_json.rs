//! Fast path of OTLP/JSON trace decoding, inside [`super::decode`]: the bytes of an
//! `ExportTraceServiceRequest` → the prost message, in one pass without serde. opentelemetry-proto's
//! serde impls buffer every `AnyValue` and build error values while probing untagged forms, which
//! made decoding the largest cost of `infersight ingest`; this parser reads the common, conformant
//! forms directly and [`super::convert`] takes the same message as before.
//!
//! It only *accepts* what the serde path decodes to the very same message, and declines (returns
//! `None`) everything else — syntax errors, enum names, `null` where serde wants a value, numbers
//! outside their type, `0x` ids, escaped keys, duplicate fields, base64 that is not canonical,
//! unknown `AnyValue` kinds, deep nesting. A declined document goes through the serde path, which
//! repairs it or reports the error with its position, so correctness never depends on this file.
//! String unescaping and number conversion are delegated to serde_json itself, so both paths agree
//! bit for bit.

use infersight_model::scan::json_string_end;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList, any_value,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::{Event, Link};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};

/// `AnyValue`s nested deeper than this (arrays of arrays …) are left to serde, which has its own
/// recursion limit and error for them.
const MAX_VALUE_DEPTH: usize = 32;

/// Decodes an OTLP/JSON `ExportTraceServiceRequest`, or `None` when the document is not in the
/// forms this parser knows (the caller then uses the serde path).
pub fn decode_traces_fast(bytes: &[u8]) -> Option<ExportTraceServiceRequest> {
    // one UTF-8 check for the whole document instead of one per string (serde_json rejects
    // invalid UTF-8 in strings, and outside them it is a syntax error, so nothing is lost)
    let text = std::str::from_utf8(bytes).ok()?;
    let mut parser = Parser {
        bytes,
        text,
        pos: 0,
        attrs_hint: 0,
    };
    let mut request = ExportTraceServiceRequest::default();
    let mut seen = Seen::default();
    parser.object(|p, key| match key {
        "resourceSpans" => {
            seen.first(0)?;
            p.array(|p| {
                request.resource_spans.push(p.resource_spans()?);
                Some(())
            })
        }
        _ => p.skip_value(),
    })?;
    parser.ws();
    (parser.pos == bytes.len()).then_some(request)
}

/// Powers of ten up to the largest a [`short_decimal`] divides by; all exact in an `f64`.
const POW10: [f64; 20] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19,
];

/// A number literal (already checked against the JSON grammar) of at most 19 digits and without
/// exponent, converted as serde_json converts it (without its `float_roundtrip` feature, which
/// this workspace does not enable; a test holds both to the same bits): the digits as an integer,
/// divided by the power of ten of the fraction's length. Longer literals and exponents are left to
/// serde_json.
fn short_decimal(literal: &[u8]) -> Option<f64> {
    let (negative, digits) = match literal.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, literal),
    };
    let mut significand = 0u64;
    let mut count = 0usize;
    let mut fraction_digits = None;
    for (index, byte) in digits.iter().enumerate() {
        match byte {
            b'0'..=b'9' => {
                count += 1;
                if count > 19 {
                    return None;
                }
                significand = significand * 10 + u64::from(byte - b'0');
            }
            b'.' if fraction_digits.is_none() => fraction_digits = Some(digits.len() - index - 1),
            _ => return None,
        }
    }
    let value = significand as f64 / POW10[fraction_digits.unwrap_or(0)];
    Some(if negative { -value } else { value })
}

/// Which fields of one object were read, to decline duplicates (serde rejects them).
#[derive(Default)]
struct Seen(u32);

impl Seen {
    fn first(&mut self, field: u32) -> Option<()> {
        let bit = 1u32 << field;
        if self.0 & bit != 0 {
            return None;
        }
        self.0 |= bit;
        Some(())
    }
}

struct Parser<'a> {
    bytes: &'a [u8],
    /// `bytes` as text: slices between ASCII delimiters are `&str` without a check per string.
    text: &'a str,
    pos: usize,
    /// Length of the last attribute list: the next one is usually as long (spans of one export
    /// carry the same attributes), so its vector is allocated once instead of grown.
    attrs_hint: usize,
}

thread_local! {
    /// Spans in the last `scopeSpans` decoded on this thread, for the same reason: exports of one
    /// source are alike, and growing a vector of large spans copies them several times.
    static SPANS_HINT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Most spans one hint reserves room for.
const MAX_SPANS_HINT: usize = 4096;

impl<'a> Parser<'a> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.bytes.get(self.pos).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.pos += 1)
    }

    fn eat_literal(&mut self, literal: &[u8]) -> Option<()> {
        self.ws();
        let end = self.pos + literal.len();
        (self.bytes.get(self.pos..end)? == literal).then(|| self.pos = end)
    }

    /// `null` (consumed) or something else (not consumed).
    fn null(&mut self) -> bool {
        self.eat_literal(b"null").is_some()
    }

    /// An object; `member` is called with each key and must consume its value.
    fn object(&mut self, mut member: impl FnMut(&mut Self, &str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.pos += 1;
            return Some(());
        }
        loop {
            let key = self.plain_str()?;
            self.eat(b':')?;
            member(self, key)?;
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An array; `item` is called for each element and must consume it.
    fn array(&mut self, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.pos += 1;
            return Some(());
        }
        loop {
            item(self)?;
            match self.peek()? {
                b',' => self.pos += 1,
                b']' => {
                    self.pos += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// The extent of the string starting at the current position: (start of its content, end of
    /// its content, whether it has escapes); the closing quote is consumed. Raw control characters
    /// and escapes JSON does not have are declined, as serde_json rejects them (it still decodes
    /// the escapes, and rejects lone surrogates).
    fn string_extent(&mut self) -> Option<(usize, usize, bool)> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.pos + 1;
        let end = json_string_end(self.bytes, start)?;
        self.pos = end.quote + 1;
        Some((start, end.quote, end.escaped))
    }

    /// A string without escapes, borrowed (keys, ids, numbers in strings).
    fn plain_str(&mut self) -> Option<&'a str> {
        let (start, end, escaped) = self.string_extent()?;
        if escaped {
            return None;
        }
        self.text.get(start..end)
    }

    /// Any string, unescaped exactly as serde_json does (it does the unescaping).
    fn string(&mut self) -> Option<String> {
        let (start, end, escaped) = self.string_extent()?;
        if escaped {
            return serde_json::from_slice::<String>(&self.bytes[start - 1..=end]).ok();
        }
        self.text.get(start..end).map(str::to_owned)
    }

    /// The bytes of a JSON number literal, checked against the JSON grammar.
    fn number_literal(&mut self) -> Option<&'a [u8]> {
        self.ws();
        let start = self.pos;
        let digits = |p: &mut Self| {
            let from = p.pos;
            while p.bytes.get(p.pos).is_some_and(u8::is_ascii_digit) {
                p.pos += 1;
            }
            p.pos - from
        };
        if self.bytes.get(self.pos) == Some(&b'-') {
            self.pos += 1;
        }
        let int_start = self.pos;
        let int_digits = digits(self);
        if int_digits == 0 || (int_digits > 1 && self.bytes[int_start] == b'0') {
            return None;
        }
        if self.bytes.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            if digits(self) == 0 {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.bytes.get(self.pos) {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.bytes.get(self.pos) {
                self.pos += 1;
            }
            if digits(self) == 0 {
                return None;
            }
        }
        Some(&self.bytes[start..self.pos])
    }

    /// A plain integer literal (no fraction, no exponent), as text.
    fn integer_literal(&mut self) -> Option<&'a str> {
        let literal = self.number_literal()?;
        // serde_json reads `-0` as a float, which integer fields refuse
        if literal == b"-0" || literal.iter().any(|b| matches!(b, b'.' | b'e' | b'E')) {
            return None;
        }
        std::str::from_utf8(literal).ok()
    }

    fn u32_number(&mut self) -> Option<u32> {
        self.integer_literal()?.parse().ok()
    }

    fn i32_number(&mut self) -> Option<i32> {
        self.integer_literal()?.parse().ok()
    }

    /// A `fixed64` time: an integer literal or a string of digits.
    fn u64_number_or_string(&mut self) -> Option<u64> {
        let text = if self.peek()? == b'"' {
            let text = self.plain_str()?;
            if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            text
        } else {
            self.integer_literal()?
        };
        text.parse().ok()
    }

    /// An `int64` attribute value: an integer literal or a string of an optional `-` and digits.
    fn i64_number_or_string(&mut self) -> Option<i64> {
        let text = if self.peek()? == b'"' {
            let text = self.plain_str()?;
            let digits = text.strip_prefix('-').unwrap_or(text);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            text
        } else {
            self.integer_literal()?
        };
        text.parse().ok()
    }

    /// A `double`: any JSON number, converted by serde_json (the serde path reads it as a
    /// `serde_json::Number` first too, so the bits are the same).
    fn double(&mut self) -> Option<f64> {
        let literal = self.number_literal()?;
        if let Some(value) = short_decimal(literal) {
            return Some(value);
        }
        serde_json::from_slice::<serde_json::Number>(literal)
            .ok()?
            .as_f64()
    }

    fn bool(&mut self) -> Option<bool> {
        if self.eat_literal(b"true").is_some() {
            Some(true)
        } else {
            self.eat_literal(b"false").map(|()| false)
        }
    }

    /// Hex-encoded bytes (trace and span ids): hex digits only, even length.
    fn hex_bytes(&mut self) -> Option<Vec<u8>> {
        let text = self.plain_str()?.as_bytes();
        if !text.len().is_multiple_of(2) {
            return None;
        }
        let nibble = |b: u8| -> Option<u8> {
            match b {
                b'0'..=b'9' => Some(b - b'0'),
                b'a'..=b'f' => Some(b - b'a' + 10),
                b'A'..=b'F' => Some(b - b'A' + 10),
                _ => None,
            }
        };
        text.chunks_exact(2)
            .map(|pair| Some((nibble(pair[0])? << 4) | nibble(pair[1])?))
            .collect()
    }

    /// Skips any JSON value, validated by serde_json.
    fn skip_value(&mut self) -> Option<()> {
        self.ws();
        let mut values = serde_json::Deserializer::from_slice(&self.bytes[self.pos..])
            .into_iter::<serde::de::IgnoredAny>();
        values.next()?.ok()?;
        self.pos += values.byte_offset();
        Some(())
    }

    // -----------------------------------------------------------------------------------------
    // OTLP messages

    fn resource_spans(&mut self) -> Option<ResourceSpans> {
        let mut out = ResourceSpans::default();
        let mut seen = Seen::default();
        self.object(|p, key| match key {
            "resource" => {
                seen.first(0)?;
                out.resource = if p.null() { None } else { Some(p.resource()?) };
                Some(())
            }
            "scopeSpans" => {
                seen.first(1)?;
                p.array(|p| {
                    out.scope_spans.push(p.scope_spans()?);
                    Some(())
                })
            }
            "schemaUrl" => {
                seen.first(2)?;
                out.schema_url = p.string()?;
                Some(())
            }
            _ => p.skip_value(),
        })?;
        Some(out)
    }

    fn resource(&mut self) -> Option<Resource> {
        let mut out = Resource::default();
        let mut seen = Seen::default();
        self.object(|p, key| match key {
            "attributes" => {
                seen.first(0)?;
                out.attributes = p.key_values(0)?;
                Some(())
            }
            "droppedAttributesCount" => {
                seen.first(1)?;
                out.dropped_attributes_count = p.u32_number()?;
                Some(())
            }
            // entity refs are not used downstream; only their empty form is read here
            "entityRefs" => {
                seen.first(2)?;
                p.array(|_| None)
            }
            _ => p.skip_value(),
        })?;
        Some(out)
    }

    fn scope_spans(&mut self) -> Option<ScopeSpans> {
        let mut out = ScopeSpans::default();
        let mut seen = Seen::default();
        self.object(|p, key| match key {
            "scope" => {
                seen.first(0)?;
                out.scope = if p.null() { None } else { Some(p.scope()?) };
                Some(())
            }
            "spans" => {
                seen.first(1)?;
                // no more than the rest of the document could hold (a span takes 64+ bytes),
                // so one small export after a large one does not reserve room for thousands
                let room = (p.bytes.len() - p.pos) / 64;
                out.spans.reserve(SPANS_HINT.get().min(room));
                p.array(|p| {
                    out.spans.push(p.span()?);
                    Some(())
                })?;
                SPANS_HINT.set(out.spans.len().min(MAX_SPANS_HINT));
                Some(())
            }
            "schemaUrl" => {
                seen.first(2)?;
                out.schema_url = p.string()?;
                Some(())
            }
            _ => p.skip_value(),
        })?;
        Some(out)
    }

    fn scope(&mut self) -> Option<InstrumentationScope> {
        let mut out = InstrumentationScope::default();
        let mut seen = Seen::default();
        self.object(|p, key| match key {
            "name" => {
                seen.first(0)?;
                out.name = p.string()?;
                Some(())
            }
            "version" => {
                seen.first(1)?;
                out.version = p.string()?;
                Some(())
            }
            "attributes" => {
                seen.first(2)?;
                out.attributes = p.key_values(0)?;
                Some(())
            }
            "droppedAttributesCount" => {
                seen.first(3)?;
                out.dropped_attributes_count = p.u32_number()?;
                Some(())
            }
            _ => p.skip_value(),
        })?;
        Some(out)
    }

    fn span(&mut self) -> Option<Span> {
        let mut out = Span::default();
        let mut seen = Seen::default();
        self.object(|p, key| {
            match key {
                "traceId" => {
                    seen.first(0)?;
                    out.trace_id = p.hex_bytes()?;
                }
                "spanId" => {
                    seen.first(1)?;
                    out.span_id = p.hex_bytes()?;
                }
                "traceState" => {
                    seen.first(2)?;
                    out.trace_state = p.string()?;
                }
                "parentSpanId" => {
                    seen.first(3)?;
                    out.parent_span_id = p.hex_bytes()?;
                }
                "flags" => {
                    seen.first(4)?;
                    out.flags = p.u32_number()?;
                }
                "name" => {
                    seen.first(5)?;
                    out.name = p.string()?;
                }
                // a name (`SPAN_KIND_SERVER`) is declined: the serde path repairs it
                "kind" => {
                    seen.first(6)?;
                    out.kind = p.i32_number()?;
                }
                "startTimeUnixNano" => {
                    seen.first(7)?;
                    out.start_time_unix_nano = p.u64_number_or_string()?;
                }
                "endTimeUnixNano" => {
                    seen.first(8)?;
                    out.end_time_unix_nano = p.u64_number_or_string()?;
                }
                "attributes" => {
                    seen.first(9)?;
                    out.attributes = p.key_values(0)?;
                }
                "droppedAttributesCount" => {
                    seen.first(10)?;
                    out.dropped_attributes_count = p.u32_number()?;
                }
                "events" => {
                    seen.first(11)?;
                    p.array(|p| {
                        out.events.push(p.event()?);
                        Some(())
                    })?;
                }
                "droppedEventsCount" => {
                    seen.first(12)?;
                    out.dropped_events_count = p.u32_number()?;
                }
                "links" => {
                    seen.first(13)?;
                    p.array(|p| {
                        out.links.push(p.link()?);
                        Some(())
                    })?;
                }
                "droppedLinksCount" => {
                    seen.first(14)?;
                    out.dropped_links_count = p.u32_number()?;
                }
                "status" => {
                    seen.first(15)?;
                    out.status = if p.null() { None } else { Some(p.status()?) };
                }
                _ => p.skip_value()?,
            }
            Some(())
        })?;
        Some(out)
    }

    fn event(&mut self) -> Option<Event> {
        let mut out = Event::default();
        let mut seen = Seen::default();
        self.object(|p, key| {
            match key {
                "timeUnixNano" => {
                    seen.first(0)?;
                    out.time_unix_nano = p.u64_number_or_string()?;
                }
                "name" => {
                    seen.first(1)?;
                    out.name = p.string()?;
                }
                "attributes" => {
                    seen.first(2)?;
                    out.attributes = p.key_values(0)?;
                }
                "droppedAttributesCount" => {
                    seen.first(3)?;
                    out.dropped_attributes_count = p.u32_number()?;
                }
                _ => p.skip_value()?,
            }
            Some(())
        })?;
        Some(out)
    }

    fn link(&mut self) -> Option<Link> {
        let mut out = Link::default();
        let mut seen = Seen::default();
        self.object(|p, key| {
            match key {
                "traceId" => {
                    seen.first(0)?;
                    out.trace_id = p.hex_bytes()?;
                }
                "spanId" => {
                    seen.first(1)?;
                    out.span_id = p.hex_bytes()?;
                }
                "traceState" => {
                    seen.first(2)?;
                    out.trace_state = p.string()?;
                }
                "attributes" => {
                    seen.first(3)?;
                    out.attributes = p.key_values(0)?;
                }
                "droppedAttributesCount" => {
                    seen.first(4)?;
                    out.dropped_attributes_count = p.u32_number()?;
                }
                "flags" => {
                    seen.first(5)?;
                    out.flags = p.u32_number()?;
                }
                _ => p.skip_value()?,
            }
            Some(())
        })?;
        Some(out)
    }

    fn status(&mut self) -> Option<Status> {
        let mut out = Status::default();
        let mut seen = Seen::default();
        self.object(|p, key| {
            match key {
                "message" => {
                    seen.first(0)?;
                    out.message = p.string()?;
                }
                // a name (`STATUS_CODE_ERROR`) is declined: the serde path repairs it
                "code" => {
                    seen.first(1)?;
                    out.code = p.i32_number()?;
                }
                _ => p.skip_value()?,
            }
            Some(())
        })?;
        Some(out)
    }

    /// A list of `KeyValue`s (attributes, or the values of a `kvlistValue` at `depth`).
    fn key_values(&mut self, depth: usize) -> Option<Vec<KeyValue>> {
        let mut out = Vec::with_capacity(self.attrs_hint);
        self.array(|p| {
            out.push(p.key_value(depth)?);
            Some(())
        })?;
        self.attrs_hint = out.len().min(64);
        Some(out)
    }

    fn key_value(&mut self, depth: usize) -> Option<KeyValue> {
        let mut key = None;
        let mut value = None;
        let mut key_strindex = 0;
        let mut seen = Seen::default();
        self.object(|p, name| {
            match name {
                "key" => {
                    seen.first(0)?;
                    key = Some(p.string()?);
                }
                "value" => {
                    seen.first(1)?;
                    value = if p.null() {
                        None
                    } else {
                        Some(p.any_value(depth)?)
                    };
                }
                "keyStrindex" => {
                    seen.first(2)?;
                    key_strindex = p.i32_number()?;
                }
                _ => p.skip_value()?,
            }
            Some(())
        })?;
        // serde requires the key; the serde path repairs a missing one
        Some(KeyValue {
            key: key?,
            value,
            key_strindex,
        })
    }

    /// An `AnyValue`: `{}` or exactly one known kind; `null` for a kind means no value, as in
    /// the serde path.
    fn any_value(&mut self, depth: usize) -> Option<AnyValue> {
        if depth > MAX_VALUE_DEPTH {
            return None;
        }
        let mut value = None;
        let mut members = 0;
        self.object(|p, key| {
            members += 1;
            if members > 1 {
                return None;
            }
            if p.null() {
                return matches!(
                    key,
                    "stringValue"
                        | "boolValue"
                        | "intValue"
                        | "doubleValue"
                        | "arrayValue"
                        | "kvlistValue"
                        | "bytesValue"
                )
                .then_some(());
            }
            value = Some(match key {
                "stringValue" => any_value::Value::StringValue(p.string()?),
                "intValue" => any_value::Value::IntValue(p.i64_number_or_string()?),
                "doubleValue" => any_value::Value::DoubleValue(p.double()?),
                "boolValue" => any_value::Value::BoolValue(p.bool()?),
                "arrayValue" => any_value::Value::ArrayValue(ArrayValue {
                    values: p.values_member(|p| {
                        let mut items = Vec::new();
                        p.array(|p| {
                            items.push(p.any_value(depth + 1)?);
                            Some(())
                        })?;
                        Some(items)
                    })?,
                }),
                "kvlistValue" => any_value::Value::KvlistValue(KeyValueList {
                    values: p.values_member(|p| p.key_values(depth + 1))?,
                }),
                "bytesValue" => any_value::Value::BytesValue(base64_standard(p.plain_str()?)?),
                _ => return None,
            });
            Some(())
        })?;
        Some(AnyValue { value })
    }

    /// The `{"values": …}` object of an `arrayValue` or `kvlistValue`; other members are ignored
    /// as by serde, a missing `values` is declined (the serde path repairs it).
    fn values_member<T>(&mut self, mut read: impl FnMut(&mut Self) -> Option<T>) -> Option<T> {
        let mut values = None;
        self.object(|p, key| match key {
            "values" if values.is_none() => {
                values = Some(read(p)?);
                Some(())
            }
            "values" => None,
            _ => p.skip_value(),
        })?;
        values
    }
}

/// Canonical standard base64 (with padding, zero trailing bits) → bytes; anything else is declined
/// so that every accepted input decodes the same under any standard decoder.
fn base64_standard(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let sextet = |b: u8| -> Option<u32> {
        Some(u32::from(match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    };
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    let quads = bytes.len() / 4;
    for (index, quad) in bytes.chunks_exact(4).enumerate() {
        let padding = quad.iter().rev().take_while(|b| **b == b'=').count();
        if padding > 2 || (padding > 0 && index + 1 != quads) {
            return None;
        }
        let mut word = 0u32;
        for &b in &quad[..4 - padding] {
            word = (word << 6) | sextet(b)?;
        }
        word <<= 6 * padding as u32;
        let [_, a, b, c] = word.to_be_bytes();
        match padding {
            0 => out.extend_from_slice(&[a, b, c]),
            1 if c == 0 => out.extend_from_slice(&[a, b]),
            2 if b == 0 && c == 0 => out.push(a),
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_base64_only() {
        assert_eq!(base64_standard(""), Some(vec![]));
        assert_eq!(base64_standard("aGk="), Some(b"hi".to_vec()));
        assert_eq!(base64_standard("aGV5"), Some(b"hey".to_vec()));
        assert_eq!(base64_standard("aA=="), Some(b"h".to_vec()));
        assert_eq!(base64_standard("/+8="), Some(vec![0xff, 0xef]));
        assert_eq!(base64_standard("aGk"), None, "unpadded");
        assert_eq!(base64_standard("aGl="), None, "non-zero trailing bits");
        assert_eq!(base64_standard("aA==aGV5"), None, "padding inside");
        assert_eq!(base64_standard("a==="), None);
        assert_eq!(base64_standard("aG-5"), None, "url alphabet");
    }

    #[test]
    fn short_decimals_are_what_serde_json_makes_of_them() {
        let serde = |text: &str| {
            serde_json::from_str::<serde_json::Number>(text)
                .ok()
                .and_then(|n| n.as_f64())
        };
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut fast = 0;
        for round in 0..200_000 {
            // integer and fraction lengths around the 19-digit limit, zeros inside and around
            let int_len = (next() % 12) as usize;
            let frac_len = (next() % 22) as usize;
            let digit = |n: u64| char::from(b'0' + (n % 10) as u8);
            let mut text = String::new();
            if next() % 3 == 0 {
                text.push('-');
            }
            if int_len == 0 || next() % 4 == 0 {
                text.push('0');
            } else {
                text.push(char::from(b'1' + (next() % 9) as u8));
                (1..int_len).for_each(|_| text.push(digit(next())));
            }
            if frac_len > 0 {
                text.push('.');
                (0..frac_len)
                    .for_each(|_| text.push(if next() % 5 == 0 { '0' } else { digit(next()) }));
            }
            if round % 1000 == 0 {
                text = [
                    "0",
                    "-0",
                    "0.0",
                    "-0.0",
                    "1.5",
                    "9999999999999999999",
                    "0.1",
                ][round / 1000 % 7]
                    .to_string();
            }
            let Some(value) = short_decimal(text.as_bytes()) else {
                continue;
            };
            fast += 1;
            let expected = serde(&text).expect("a valid literal");
            assert_eq!(value.to_bits(), expected.to_bits(), "{text}");
        }
        assert!(fast > 100_000, "only {fast} literals took the short path");
        // exponents and more than 19 digits are left to serde_json
        assert_eq!(short_decimal(b"1e5"), None);
        assert_eq!(short_decimal(b"0.12345678901234567890"), None);
    }

    #[test]
    fn number_grammar() {
        let literal = |text: &str| {
            let mut parser = Parser {
                bytes: text.as_bytes(),
                text,
                pos: 0,
                attrs_hint: 0,
            };
            parser
                .number_literal()
                .filter(|_| parser.pos == text.len())
                .is_some()
        };
        for ok in ["0", "-0", "12", "1.5", "-1.5e10", "1E+2", "0.0e-0"] {
            assert!(literal(ok), "{ok}");
        }
        for bad in ["01", "-", "1.", ".5", "1e", "+1", "--1"] {
            assert!(!literal(bad), "{bad}");
        }
    }
}
