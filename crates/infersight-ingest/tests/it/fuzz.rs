//! Fuzz harnesses of the ingest decoders (issue 23 item 6): OTLP protobuf (traces, logs,
//! metrics) from random bytes and from valid messages with bit flips, truncations, inserted bytes
//! and corrupted length prefixes; gzip bodies; the serde-free OTLP/JSON trace decoder against the
//! serde path on generated valid documents (same message out) and on mutated ones; the Prometheus
//! text parser on mutated real expositions; the file reader on random files. Each asserts "no
//! panic, and either Ok or a typed error with a reason".
//!
//! `INFERSIGHT_FUZZ_CASES` sets the cases per harness (CI's default is small), and
//! `INFERSIGHT_FUZZ_SEED` the seed; `bench/fuzz.sh` runs them long. A harness that fails prints the
//! minimized input; each crash found gets a regression test with it (at the end of this file).

use std::io::Write;

use infersight_ingest::otlp::decode::{decode_json, decode_json_serde};
use infersight_ingest::otlp::trace_json::decode_traces_fast;
use infersight_ingest::prometheus::{exposition_to_otlp, parse};
use infersight_ingest::{
    Encoding, FileFormat, FileOptions, IngestError, decode_body, decode_logs, decode_metrics,
    decode_traces, logs_to_batches, metrics_to_batches, read_file, traces_to_batches,
};
use infersight_model::mapping::AttributeMapper;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList, any_value,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::{Event, Link};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use prost::Message;

// ---------------------------------------------------------------------------------------------
// the runner

/// Runs one harness through the shared runner ([`infersight_testkit::fuzz::run`]), with
/// 48 cases in CI unless `INFERSIGHT_FUZZ_CASES` says otherwise.
fn fuzz<S: Strategy>(name: &str, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    infersight_testkit::fuzz::run(name, 48, strategy, test);
}

/// An error must say what went wrong.
fn typed(error: &IngestError) -> Result<(), TestCaseError> {
    prop_assert!(!error.to_string().trim().is_empty(), "{error:?}");
    // the kind is what receivers answer with; asking must not panic either
    let _ = error.kind();
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// generated valid OTLP trace messages

fn any_value() -> impl Strategy<Value = AnyValue> {
    let leaf = prop_oneof![
        any::<String>().prop_map(any_value::Value::StringValue),
        "[a-z ._-]{0,12}".prop_map(any_value::Value::StringValue),
        any::<i64>().prop_map(any_value::Value::IntValue),
        // short decimals, which JSON carries exactly (serde_json without `float_roundtrip` may
        // move a long one by an ulp: `otlp_json_numbers` holds both decoders to the same bits)
        (-100_000_000i64..100_000_000)
            .prop_map(|n| any_value::Value::DoubleValue(n as f64 / 100.0)),
        any::<bool>().prop_map(any_value::Value::BoolValue),
        proptest::collection::vec(any::<u8>(), 0..12).prop_map(any_value::Value::BytesValue),
    ]
    .prop_map(|value| AnyValue { value: Some(value) });
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(|values| AnyValue {
                value: Some(any_value::Value::ArrayValue(ArrayValue { values })),
            }),
            proptest::collection::vec(("[a-z.]{1,8}", inner), 0..4).prop_map(|pairs| AnyValue {
                value: Some(any_value::Value::KvlistValue(KeyValueList {
                    values: pairs
                        .into_iter()
                        .map(|(key, value)| KeyValue {
                            key,
                            value: Some(value),
                            ..Default::default()
                        })
                        .collect(),
                })),
            }),
        ]
    })
}

fn attributes() -> impl Strategy<Value = Vec<KeyValue>> {
    let key = prop_oneof![
        Just("gen_ai.request.model".to_string()),
        Just("gen_ai.usage.input_tokens".to_string()),
        Just("service.name".to_string()),
        Just("http.response.status_code".to_string()),
        "[a-z_.]{1,16}",
        any::<String>(),
    ];
    proptest::collection::vec((key, any_value()), 0..5).prop_map(|pairs| {
        pairs
            .into_iter()
            .map(|(key, value)| KeyValue {
                key,
                value: Some(value),
                ..Default::default()
            })
            .collect()
    })
}

fn id(len: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => proptest::collection::vec(any::<u8>(), len),
        1 => Just(Vec::new()),
    ]
}

fn span() -> impl Strategy<Value = Span> {
    let event =
        (any::<u64>(), "[a-z_.]{0,12}", attributes()).prop_map(|(time, name, attributes)| Event {
            time_unix_nano: time,
            name,
            attributes,
            dropped_attributes_count: 0,
        });
    let link = (id(16), id(8), "[a-z=,]{0,8}", attributes(), any::<u32>()).prop_map(
        |(trace_id, span_id, trace_state, attributes, flags)| Link {
            trace_id,
            span_id,
            trace_state,
            attributes,
            dropped_attributes_count: 0,
            flags,
        },
    );
    (
        (id(16), id(8), id(8), "[a-z =-]{0,8}", any::<String>()),
        (0i32..6, any::<u64>(), any::<u64>(), any::<u32>()),
        attributes(),
        proptest::collection::vec(event, 0..3),
        proptest::collection::vec(link, 0..2),
        proptest::option::of((0i32..3, any::<String>())),
        (any::<u32>(), any::<u32>(), any::<u32>()),
    )
        .prop_map(
            |(
                (trace_id, span_id, parent_span_id, trace_state, name),
                (kind, start, end, flags),
                attributes,
                events,
                links,
                status,
                (dropped_attributes, dropped_events, dropped_links),
            )| Span {
                trace_id,
                span_id,
                trace_state,
                parent_span_id,
                flags,
                name,
                kind,
                start_time_unix_nano: start,
                end_time_unix_nano: end,
                attributes,
                dropped_attributes_count: dropped_attributes,
                events,
                dropped_events_count: dropped_events,
                links,
                dropped_links_count: dropped_links,
                status: status.map(|(code, message)| Status { message, code }),
            },
        )
}

fn traces_request() -> impl Strategy<Value = ExportTraceServiceRequest> {
    let scope = (
        proptest::option::of(("[a-z.]{0,10}", "[0-9.]{0,6}", attributes())),
        proptest::collection::vec(span(), 0..4),
        "[a-z:/.]{0,12}",
    )
        .prop_map(|(scope, spans, schema_url)| ScopeSpans {
            scope: scope.map(|(name, version, attributes)| InstrumentationScope {
                name,
                version,
                attributes,
                dropped_attributes_count: 0,
            }),
            spans,
            schema_url,
        });
    let resource = (
        proptest::option::of(attributes()),
        proptest::collection::vec(scope, 0..3),
        "[a-z:/.]{0,12}",
    )
        .prop_map(|(resource, scope_spans, schema_url)| ResourceSpans {
            resource: resource.map(|attributes| Resource {
                attributes,
                dropped_attributes_count: 0,
                entity_refs: Vec::new(),
            }),
            scope_spans,
            schema_url,
        });
    proptest::collection::vec(resource, 0..3)
        .prop_map(|resource_spans| ExportTraceServiceRequest { resource_spans })
}

// ---------------------------------------------------------------------------------------------
// mutations of valid encodings

#[derive(Debug, Clone)]
enum Mutation {
    FlipBit(prop::sample::Index, u8),
    Truncate(prop::sample::Index),
    SetByte(prop::sample::Index, u8),
    Insert(prop::sample::Index, Vec<u8>),
    Remove(prop::sample::Index, usize),
    /// A length prefix of a length-delimited field (found by walking the message) replaced.
    Length(prop::sample::Index, u64),
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    let length = prop_oneof![
        any::<u64>(),
        0u64..300,
        Just(u64::from(u32::MAX)),
        Just(u64::MAX)
    ];
    let one = prop_oneof![
        (any::<prop::sample::Index>(), 0u8..8).prop_map(|(at, bit)| Mutation::FlipBit(at, bit)),
        any::<prop::sample::Index>().prop_map(Mutation::Truncate),
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(at, b)| Mutation::SetByte(at, b)),
        (
            any::<prop::sample::Index>(),
            proptest::collection::vec(any::<u8>(), 1..8)
        )
            .prop_map(|(at, bytes)| Mutation::Insert(at, bytes)),
        (any::<prop::sample::Index>(), 1usize..16).prop_map(|(at, n)| Mutation::Remove(at, n)),
        (any::<prop::sample::Index>(), length).prop_map(|(at, n)| Mutation::Length(at, n)),
    ];
    proptest::collection::vec(one, 1..4)
}

fn encode_varint(mut value: u64, out: &mut Vec<u8>) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Reads a varint at `at`: its value and its end.
fn read_varint(bytes: &[u8], mut at: usize) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(at)?;
        at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some((value, at));
        }
    }
    None
}

/// Where the length prefixes of length-delimited fields are (start and end of each varint),
/// nested messages included: every length-delimited field is tried as a message too.
fn length_prefixes(bytes: &[u8], base: usize, out: &mut Vec<(usize, usize)>, depth: usize) {
    let mut at = 0;
    while at < bytes.len() {
        let Some((tag, after_tag)) = read_varint(bytes, at) else {
            return;
        };
        let after = match tag & 7 {
            0 => match read_varint(bytes, after_tag) {
                Some((_, end)) => end,
                None => return,
            },
            1 => after_tag + 8,
            5 => after_tag + 4,
            2 => {
                let Some((len, body)) = read_varint(bytes, after_tag) else {
                    return;
                };
                let Some(end) = usize::try_from(len).ok().and_then(|l| body.checked_add(l)) else {
                    return;
                };
                if end > bytes.len() {
                    return;
                }
                out.push((base + after_tag, base + body));
                if depth < 8 {
                    length_prefixes(&bytes[body..end], base + body, out, depth + 1);
                }
                end
            }
            _ => return,
        };
        at = after;
    }
}

fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for mutation in mutations {
        let len = bytes.len();
        match mutation {
            Mutation::FlipBit(at, bit) if len > 0 => bytes[at.index(len)] ^= 1 << bit,
            Mutation::Truncate(at) => bytes.truncate(at.index(len + 1)),
            Mutation::SetByte(at, byte) if len > 0 => bytes[at.index(len)] = *byte,
            Mutation::Insert(at, new) => {
                let at = at.index(len + 1);
                bytes.splice(at..at, new.iter().copied());
            }
            Mutation::Remove(at, n) if len > 0 => {
                let at = at.index(len);
                bytes.drain(at..(at + n).min(len));
            }
            Mutation::Length(which, value) => {
                let mut prefixes = Vec::new();
                length_prefixes(&bytes, 0, &mut prefixes, 0);
                if !prefixes.is_empty() {
                    let (start, end) = prefixes[which.index(prefixes.len())];
                    let mut varint = Vec::new();
                    encode_varint(*value, &mut varint);
                    bytes.splice(start..end, varint);
                }
            }
            _ => {}
        }
    }
    bytes
}

// ---------------------------------------------------------------------------------------------
// seeds for logs and metrics (hand-written, spec-shaped)

const LOGS_JSON: &str = r#"{"resourceLogs":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"router"}}]},"scopeLogs":[{"scope":{"name":"s"},"logRecords":[{"timeUnixNano":"1700000000000000000","observedTimeUnixNano":"1700000000000000001","severityNumber":17,"severityText":"ERROR","body":{"stringValue":"upstream timeout"},"attributes":[{"key":"gen_ai.request.model","value":{"stringValue":"m"}},{"key":"n","value":{"intValue":"3"}}],"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174"},{"body":{"kvlistValue":{"values":[{"key":"a","value":{"arrayValue":{"values":[{"doubleValue":1.5},{"boolValue":true}]}}}]}}}]}]}]}"#;

const METRICS_JSON: &str = r#"{"resourceMetrics":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"vllm"}}]},"scopeMetrics":[{"metrics":[{"name":"vllm:num_requests_waiting","gauge":{"dataPoints":[{"asInt":"3","timeUnixNano":"1700000000000000000","attributes":[{"key":"model_name","value":{"stringValue":"m"}}]}]}},{"name":"vllm:e2e_request_latency_seconds","histogram":{"aggregationTemporality":2,"dataPoints":[{"timeUnixNano":"1700000000000000000","count":"4","sum":2.5,"bucketCounts":["1","2","1"],"explicitBounds":[0.1,1.0]}]}},{"name":"tokens_total","sum":{"isMonotonic":true,"aggregationTemporality":2,"dataPoints":[{"asDouble":12.0,"timeUnixNano":"1700000000000000000"}]}},{"name":"lat","summary":{"dataPoints":[{"timeUnixNano":"1700000000000000000","count":"2","sum":1.0,"quantileValues":[{"quantile":0.5,"value":0.4}]}]}},{"name":"exp","exponentialHistogram":{"dataPoints":[{"timeUnixNano":"1700000000000000000","count":"3","scale":2,"zeroCount":"1","positive":{"offset":-1,"bucketCounts":["1","1"]}}]}}]}]}]}"#;

fn seed_logs() -> ExportLogsServiceRequest {
    decode_json(LOGS_JSON.as_bytes()).unwrap()
}

fn seed_metrics() -> ExportMetricsServiceRequest {
    decode_json(METRICS_JSON.as_bytes()).unwrap()
}

/// Decodes and converts protobuf `bytes` as each signal; Ok or a typed error, never a panic.
fn decode_and_convert_protobuf(bytes: &[u8]) -> Result<(), TestCaseError> {
    let mapper = AttributeMapper::default();
    match decode_traces(bytes, Encoding::Protobuf) {
        Ok(request) => {
            if let Err(e) = traces_to_batches(&request, &mapper) {
                typed(&e)?;
            }
        }
        Err(e) => typed(&e)?,
    }
    match decode_logs(bytes, Encoding::Protobuf) {
        Ok(request) => {
            if let Err(e) = logs_to_batches(&request, &mapper) {
                typed(&e)?;
            }
        }
        Err(e) => typed(&e)?,
    }
    match decode_metrics(bytes, Encoding::Protobuf) {
        Ok(request) => {
            if let Err(e) = metrics_to_batches(&request, &mapper) {
                typed(&e)?;
            }
        }
        Err(e) => typed(&e)?,
    }
    Ok(())
}

/// Decodes and converts JSON `bytes` as each signal; Ok or a typed error, never a panic. The
/// serde-free trace decoder, where it accepts, gives serde's message.
fn decode_and_convert_json(bytes: &[u8]) -> Result<(), TestCaseError> {
    let mapper = AttributeMapper::default();
    if let Some(fast) = decode_traces_fast(bytes) {
        let serde = decode_json_serde::<ExportTraceServiceRequest>(bytes);
        prop_assert_eq!(
            Some(&fast),
            serde.as_ref().ok(),
            "fast path disagrees with serde"
        );
    }
    match decode_traces(bytes, Encoding::Json) {
        Ok(request) => {
            if let Err(e) = traces_to_batches(&request, &mapper) {
                typed(&e)?;
            }
        }
        Err(e) => typed(&e)?,
    }
    match decode_logs(bytes, Encoding::Json) {
        Ok(request) => {
            if let Err(e) = logs_to_batches(&request, &mapper) {
                typed(&e)?;
            }
        }
        Err(e) => typed(&e)?,
    }
    match decode_metrics(bytes, Encoding::Json) {
        Ok(request) => {
            if let Err(e) = metrics_to_batches(&request, &mapper) {
                typed(&e)?;
            }
        }
        Err(e) => typed(&e)?,
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// JSON rendering with the freedoms the format allows

/// How a generated document is written: key order, blanks, numbers as strings or as numbers.
#[derive(Debug, Clone)]
struct Style {
    /// Drives the key order of each object (rotated by this, object after object).
    rotate: usize,
    blanks: &'static str,
    /// 64-bit integers written as JSON numbers instead of strings (both are valid OTLP/JSON).
    bare_integers: bool,
}

fn style() -> impl Strategy<Value = Style> {
    (
        any::<usize>(),
        prop::sample::select(vec!["", " ", "\t", " \r\n  "]),
        any::<bool>(),
    )
        .prop_map(|(rotate, blanks, bare_integers)| Style {
            rotate,
            blanks,
            bare_integers,
        })
}

const INTEGER_STRING_KEYS: [&str; 4] = [
    "startTimeUnixNano",
    "endTimeUnixNano",
    "timeUnixNano",
    "intValue",
];

fn render(value: &serde_json::Value, style: &Style, key: Option<&str>, out: &mut String) {
    use serde_json::Value as Json;
    let blanks = style.blanks;
    match value {
        Json::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            if !entries.is_empty() {
                let by = style.rotate % entries.len();
                entries.rotate_left(by);
            }
            out.push('{');
            for (index, (k, v)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(blanks);
                out.push_str(&serde_json::to_string(k).unwrap());
                out.push_str(blanks);
                out.push(':');
                out.push_str(blanks);
                render(v, style, Some(k), out);
            }
            out.push_str(blanks);
            out.push('}');
        }
        Json::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(blanks);
                render(item, style, key, out);
            }
            out.push(']');
        }
        Json::String(text)
            if style.bare_integers
                && key.is_some_and(|k| INTEGER_STRING_KEYS.contains(&k))
                && text.parse::<i128>().is_ok() =>
        {
            out.push_str(text);
        }
        other => out.push_str(&serde_json::to_string(other).unwrap()),
    }
}

// ---------------------------------------------------------------------------------------------
// harnesses

#[test]
fn otlp_protobuf_random_bytes() {
    fuzz(
        "otlp_protobuf_random_bytes",
        proptest::collection::vec(any::<u8>(), 0..1024),
        |bytes| decode_and_convert_protobuf(&bytes),
    );
}

#[test]
fn otlp_protobuf_mutated_traces() {
    fuzz(
        "otlp_protobuf_mutated_traces",
        (traces_request(), mutations()),
        |(request, mutations)| {
            let bytes = mutate(request.encode_to_vec(), &mutations);
            decode_and_convert_protobuf(&bytes)
        },
    );
}

#[test]
fn otlp_protobuf_mutated_logs_and_metrics() {
    let logs = seed_logs().encode_to_vec();
    let metrics = seed_metrics().encode_to_vec();
    fuzz(
        "otlp_protobuf_mutated_logs_and_metrics",
        (any::<bool>(), mutations()),
        |(which, mutations)| {
            let seed = if which { &logs } else { &metrics };
            decode_and_convert_protobuf(&mutate(seed.clone(), &mutations))
        },
    );
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

#[test]
fn gzip_bodies() {
    const MAX_BYTES: usize = 64 * 1024;
    fuzz(
        "gzip_bodies",
        (
            traces_request(),
            mutations(),
            prop::sample::select(vec!["gzip", "x-gzip", "deflate", "identity", "br"]),
            any::<bool>(),
        ),
        |(request, mutations, coding, json)| {
            let (content_type, payload) = if json {
                ("application/json", serde_json::to_vec(&request).unwrap())
            } else {
                ("application/x-protobuf", request.encode_to_vec())
            };
            let body = mutate(gzip(&payload), &mutations);
            match decode_body(&body, Some(content_type), Some(coding), MAX_BYTES) {
                Ok((bytes, encoding)) => {
                    prop_assert!(bytes.len() <= MAX_BYTES);
                    match decode_traces(&bytes, encoding) {
                        Ok(request) => {
                            if let Err(e) = traces_to_batches(&request, &AttributeMapper::default())
                            {
                                typed(&e)?;
                            }
                        }
                        Err(e) => typed(&e)?,
                    }
                }
                Err(e) => typed(&e)?,
            }
            Ok(())
        },
    );
}

#[test]
fn otlp_json_fast_decoder_matches_serde_on_valid_documents() {
    fuzz(
        "otlp_json_fast_vs_serde_valid",
        (traces_request(), style()),
        |(request, style)| {
            let value = serde_json::to_value(&request).unwrap();
            let mut doc = String::new();
            render(&value, &style, None, &mut doc);
            let serde =
                decode_json_serde::<ExportTraceServiceRequest>(doc.as_bytes()).map_err(|e| {
                    TestCaseError::fail(format!("serde rejects a valid document: {e}: {doc}"))
                })?;
            prop_assert_eq!(&serde, &request, "serde round trip: {}", doc);
            if let Some(fast) = decode_traces_fast(doc.as_bytes()) {
                prop_assert_eq!(&fast, &request, "fast path: {}", doc);
            }
            let through = decode_json::<ExportTraceServiceRequest>(doc.as_bytes()).unwrap();
            prop_assert_eq!(&through, &request);
            Ok(())
        },
    );
}

/// A span document whose one attribute holds the number literal `literal`.
fn number_doc(kind: &str, literal: &str) -> String {
    format!(
        r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","name":"n","startTimeUnixNano":{literal},"attributes":[{{"key":"k","value":{{"{kind}":{literal}}}}}]}}]}}]}}]}}"#
    )
}

#[test]
fn otlp_json_numbers() {
    fuzz(
        "otlp_json_numbers",
        (
            prop::sample::select(vec!["doubleValue", "intValue"]),
            prop_oneof![
                "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,24})?([eE][+-]?[0-9]{1,3})?",
                "\"-?[0-9]{0,22}(\\.[0-9]{0,4})?\"",
                any::<f64>().prop_map(|x| x.to_string()),
                any::<i64>().prop_map(|x| x.to_string()),
                any::<u64>().prop_map(|x| x.to_string()),
            ],
        ),
        |(kind, literal)| {
            let doc = number_doc(kind, &literal);
            let serde = decode_json_serde::<ExportTraceServiceRequest>(doc.as_bytes());
            if let Some(fast) = decode_traces_fast(doc.as_bytes()) {
                prop_assert_eq!(Some(&fast), serde.as_ref().ok(), "{}", doc);
            }
            decode_and_convert_json(doc.as_bytes())
        },
    );
}

/// Bytes that matter to a JSON parser, to insert into a document.
fn json_noise() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::sample::select(vec![
            &b"\""[..],
            b"\\",
            b"{",
            b"}",
            b"[",
            b"]",
            b",",
            b":",
            b"null",
            b"-",
            b"e9",
            b"1e999",
            b"\\u",
            b"\\ud800",
            b"0x",
            b"\xff",
            b"\xc3",
            b" ",
            b"\"\"",
            b"{}",
        ])
        .prop_map(<[u8]>::to_vec),
        proptest::collection::vec(any::<u8>(), 1..4),
    ]
}

#[test]
fn otlp_json_mutated_documents() {
    fuzz(
        "otlp_json_mutated",
        (
            traces_request(),
            style(),
            0usize..3,
            proptest::collection::vec(
                (any::<prop::sample::Index>(), json_noise(), any::<bool>()),
                1..4,
            ),
            any::<prop::sample::Index>(),
        ),
        |(request, style, which, edits, cut)| {
            let mut doc = match which {
                0 => {
                    let mut text = String::new();
                    render(
                        &serde_json::to_value(&request).unwrap(),
                        &style,
                        None,
                        &mut text,
                    );
                    text.into_bytes()
                }
                1 => LOGS_JSON.as_bytes().to_vec(),
                _ => METRICS_JSON.as_bytes().to_vec(),
            };
            for (at, noise, replace) in edits {
                let at = at.index(doc.len() + 1);
                let end = if replace {
                    (at + noise.len()).min(doc.len())
                } else {
                    at
                };
                doc.splice(at..end, noise);
            }
            if cut.index(4) == 0 {
                doc.truncate(cut.index(doc.len() + 1));
            }
            decode_and_convert_json(&doc)
        },
    );
}

#[test]
fn otlp_json_random_bytes() {
    fuzz(
        "otlp_json_random_bytes",
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..256),
            "\\{\"resource(Spans|Logs|Metrics)\":\\[[\\[\\]{}\":,a-zA-Z0-9 .\\\\-]{0,80}"
                .prop_map(String::into_bytes),
        ],
        |bytes| decode_and_convert_json(&bytes),
    );
}

fn prometheus_fixture(name: &str) -> String {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/prometheus")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn prometheus_mutated_expositions() {
    let bodies: Vec<Vec<u8>> = [
        "dcgm.txt",
        "openmetrics.txt",
        "sglang.txt",
        "tgi.txt",
        "triton.txt",
    ]
    .iter()
    .map(|name| prometheus_fixture(name).into_bytes())
    .collect();
    let noise = prop_oneof![
        prop::sample::select(vec![
            &b"{"[..],
            b"}",
            b"\"",
            b"\\",
            b"=",
            b",",
            b"\n",
            b"# TYPE x histogram\n",
            b"# HELP ",
            b"le=\"+Inf\"",
            b"NaN",
            b"-Inf",
            b" 1e308",
            b" 9999999999999999999",
            b"_bucket",
            b"_sum",
            b"_count",
            b"# EOF\n",
            b"\xff",
            b"quantile=\"0.5\"",
        ])
        .prop_map(<[u8]>::to_vec),
        proptest::collection::vec(any::<u8>(), 1..4),
    ];
    fuzz(
        "prometheus_mutated",
        (
            0usize..5,
            proptest::collection::vec((any::<prop::sample::Index>(), noise, any::<bool>()), 1..6),
        ),
        |(which, edits)| {
            let mut body = bodies[which].clone();
            for (at, noise, replace) in edits {
                let at = at.index(body.len() + 1);
                let end = if replace {
                    (at + noise.len()).min(body.len())
                } else {
                    at
                };
                body.splice(at..end, noise);
            }
            match parse(&body) {
                Ok(exposition) => {
                    let scraped =
                        exposition_to_otlp(&exposition, "job", "worker", 1_750_000_000_000_000_000);
                    if let Err(e) =
                        metrics_to_batches(&scraped.request, &AttributeMapper::default())
                    {
                        typed(&e)?;
                    }
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
            Ok(())
        },
    );
}

/// A file's lines: log-ish text, JSON objects, OTLP exports (cut or not), random bytes.
fn file_content() -> impl Strategy<Value = Vec<u8>> {
    let line = prop_oneof![
        "(INFO|WARNING|ERROR|I1129|\\(APIServer pid=[0-9]{1,5}\\) INFO) [0-9]{2}-[0-9]{2} [0-9:.,]{0,12} [a-z_.]{1,8}:[0-9]{1,4}\\] .{0,30}"
            .prop_map(String::into_bytes),
        "[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.,+Z-]{0,20} .{0,30}".prop_map(String::into_bytes),
        "\\{\"(ts|time|timestamp|msg|message|level|model|latency_ms|trace_id)\":(\"[^\"]{0,10}\"|[0-9.e-]{1,12}|null|\\{\\}|\\[\\]),?.{0,20}\\}?"
            .prop_map(String::into_bytes),
        (0usize..3, any::<prop::sample::Index>()).prop_map(|(which, cut)| {
            let doc = [super_traces_json(), LOGS_JSON, METRICS_JSON][which].as_bytes();
            doc[..cut.index(doc.len() + 1).max(doc.len() / 2)].to_vec()
        }),
        proptest::collection::vec(any::<u8>(), 0..40),
    ];
    (
        proptest::collection::vec(line, 0..8),
        prop::sample::select(vec![&b"\n"[..], b"\r\n", b"\n\n"]),
        any::<bool>(),
    )
        .prop_map(|(lines, newline, bom)| {
            let mut content = if bom {
                b"\xEF\xBB\xBF".to_vec()
            } else {
                Vec::new()
            };
            for line in lines {
                content.extend(line);
                content.extend_from_slice(newline);
            }
            content
        })
}

fn super_traces_json() -> &'static str {
    crate::otlp_json::SPEC_JSON
}

#[test]
fn file_reader_on_random_files() {
    let dir = tempfile::tempdir().unwrap();
    let mapper = AttributeMapper::default();
    fuzz(
        "file_reader_random_files",
        (
            file_content(),
            prop::sample::select(vec!["f.jsonl", "f.log", "f", "f.json"]),
            prop::sample::select(vec![
                FileFormat::Auto,
                FileFormat::OtlpJsonl,
                FileFormat::JsonLines,
                FileFormat::Raw,
            ]),
        ),
        |(content, name, format)| {
            let path = dir.path().join(name);
            std::fs::write(&path, &content).unwrap();
            let options = FileOptions {
                format,
                ..FileOptions::default()
            };
            let mut stored = 0u64;
            let summary = read_file(
                &path,
                &options,
                &mapper,
                &mut |batches| {
                    stored += batches
                        .iter()
                        .map(|b| b.batch.num_rows() as u64)
                        .sum::<u64>();
                    Ok(())
                },
                &mut |_| {},
            )
            .map_err(|e| TestCaseError::fail(format!("a readable file failed: {e}")))?;
            // the summary's documented invariant, and a reason for every rejection
            prop_assert_eq!(
                summary.records_read,
                summary.records_stored + summary.rejected,
                "{:?}",
                summary
            );
            prop_assert_eq!(
                summary.first_errors.is_empty(),
                summary.rejected == 0,
                "{:?}",
                summary
            );
            Ok(())
        },
    );
}
