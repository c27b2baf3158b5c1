//! The serde-free OTLP/JSON trace decoder (`otlp::trace_json`) against the serde path: whatever
//! it accepts decodes to the very message serde gives; whatever it declines still decodes (or
//! fails with the same error) through `decode_json`, which falls back to serde.

use infersight_ingest::otlp::decode::{decode_json, decode_json_serde};
use infersight_ingest::otlp::trace_json::decode_traces_fast;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;

/// Serde's result, rendered so that errors compare too.
fn serde_result(doc: &str) -> Result<ExportTraceServiceRequest, String> {
    decode_json_serde::<ExportTraceServiceRequest>(doc.as_bytes()).map_err(|e| e.to_string())
}

/// The fast path accepts `doc` and agrees with serde; returns the message.
fn accepted(doc: &str) -> ExportTraceServiceRequest {
    let fast = decode_traces_fast(doc.as_bytes())
        .unwrap_or_else(|| panic!("fast path declined a conformant document: {doc}"));
    assert_eq!(Ok(fast.clone()), serde_result(doc), "{doc}");
    fast
}

/// The fast path declines `doc`, and `decode_json` (with the fallback) gives serde's result.
fn declined(doc: &str) -> Result<ExportTraceServiceRequest, String> {
    assert!(
        decode_traces_fast(doc.as_bytes()).is_none(),
        "fast path accepted {doc}"
    );
    let through_fallback =
        decode_json::<ExportTraceServiceRequest>(doc.as_bytes()).map_err(|e| e.to_string());
    let serde = serde_result(doc);
    assert_eq!(through_fallback, serde, "{doc}");
    serde
}

/// Either way, `decode_json` gives serde's result.
fn same_as_serde(doc: &str) {
    if let Some(fast) = decode_traces_fast(doc.as_bytes()) {
        assert_eq!(Ok(fast), serde_result(doc), "{doc}");
    }
    let through =
        decode_json::<ExportTraceServiceRequest>(doc.as_bytes()).map_err(|e| e.to_string());
    assert_eq!(through, serde_result(doc), "{doc}");
}

/// A document with one span whose attributes are `attrs` (a JSON array body) and whose other
/// members are `span_extra` (leading comma included when not empty).
fn doc_with(attrs: &str, span_extra: &str) -> String {
    format!(
        r#"{{"resourceSpans":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"vllm"}}}}]}},"scopeSpans":[{{"scope":{{"name":"s","version":"1"}},"spans":[{{"traceId":"5B8EFFF798038103D269B633813FC60C","spanId":"eee19b7ec3c1b174","name":"llm_request","kind":2,"startTimeUnixNano":"1700000000000000000","endTimeUnixNano":1700000001500000000,"attributes":[{attrs}]{span_extra}}}]}}]}}]}}"#
    )
}

fn first_attr(message: &ExportTraceServiceRequest) -> Option<any_value::Value> {
    message.resource_spans[0].scope_spans[0].spans[0].attributes[0]
        .value
        .as_ref()
        .and_then(|v| v.value.clone())
}

#[test]
fn every_any_value_kind_decodes_as_serde_does() {
    let cases: &[(&str, Option<any_value::Value>)] = &[
        (
            r#""stringValue":"llama""#,
            Some(any_value::Value::StringValue("llama".into())),
        ),
        (
            r#""stringValue":"""#,
            Some(any_value::Value::StringValue(String::new())),
        ),
        (r#""intValue":"694""#, Some(any_value::Value::IntValue(694))),
        (r#""intValue":694"#, Some(any_value::Value::IntValue(694))),
        (r#""intValue":"-12""#, Some(any_value::Value::IntValue(-12))),
        (r#""intValue":-12"#, Some(any_value::Value::IntValue(-12))),
        (
            r#""intValue":"9223372036854775807""#,
            Some(any_value::Value::IntValue(i64::MAX)),
        ),
        (
            r#""intValue":-9223372036854775808"#,
            Some(any_value::Value::IntValue(i64::MIN)),
        ),
        (
            r#""doubleValue":0.1819434781140512"#,
            Some(any_value::Value::DoubleValue(0.1819434781140512)),
        ),
        (
            r#""doubleValue":3"#,
            Some(any_value::Value::DoubleValue(3.0)),
        ),
        (
            r#""doubleValue":-2.5e-3"#,
            Some(any_value::Value::DoubleValue(-2.5e-3)),
        ),
        (
            r#""doubleValue":1E+300"#,
            Some(any_value::Value::DoubleValue(1e300)),
        ),
        (
            r#""doubleValue":-0"#,
            Some(any_value::Value::DoubleValue(-0.0)),
        ),
        (
            r#""doubleValue":18446744073709551616"#,
            Some(any_value::Value::DoubleValue(18446744073709551616.0)),
        ),
        (
            r#""boolValue":true"#,
            Some(any_value::Value::BoolValue(true)),
        ),
        (
            r#""boolValue":false"#,
            Some(any_value::Value::BoolValue(false)),
        ),
        (
            r#""bytesValue":"aGk=""#,
            Some(any_value::Value::BytesValue(b"hi".to_vec())),
        ),
        (
            r#""bytesValue":"""#,
            Some(any_value::Value::BytesValue(Vec::new())),
        ),
        (r#""stringValue":null"#, None),
        ("", None),
    ];
    for (body, expected) in cases {
        let doc = doc_with(&format!(r#"{{"key":"a","value":{{{body}}}}}"#), "");
        let message = accepted(&doc);
        assert_eq!(&first_attr(&message), expected, "{body}");
    }
    // nested arrays and kvlists, a null value, a value-less pair, unknown members skipped
    for attrs in [
        r#"{"key":"a","value":{"arrayValue":{"values":[{"stringValue":"x"},{"intValue":"1"},{"arrayValue":{"values":[]}},{}]}}}"#,
        r#"{"key":"a","value":{"kvlistValue":{"values":[{"key":"b","value":{"doubleValue":1.5}},{"key":"c","value":{"kvlistValue":{"values":[]}}}]}}}"#,
        r#"{"key":"a","value":{"arrayValue":{"values":[],"extra":{"deep":[1,2,{"x":null}]}}}}"#,
        r#"{"key":"a","value":null}"#,
        r#"{"key":"a"}"#,
        r#"{"key":"a","value":{"stringValue":"x"},"keyStrindex":0,"unknown":[true,false,null,"s",-1.5e3]}"#,
        r#"{"key":"a","value":{"stringValue":"x"}},{"key":"a","value":{"intValue":"2"}}"#,
    ] {
        accepted(&doc_with(attrs, ""));
    }
}

#[test]
fn times_and_numbers_as_strings_or_numbers() {
    for extra in [
        r#","flags":257,"droppedAttributesCount":3,"droppedEventsCount":0,"droppedLinksCount":1"#,
        r#","status":{"code":2,"message":"boom"}"#,
        r#","status":null"#,
        r#","status":{}"#,
        r#","events":[{"timeUnixNano":"1700000000100000000","name":"gen_ai.content.completion.token","attributes":[{"key":"i","value":{"intValue":1}}],"droppedAttributesCount":0},{"timeUnixNano":1700000000200000000,"name":"t"}]"#,
        r#","links":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","traceState":"a=b","attributes":[],"droppedAttributesCount":0,"flags":1}]"#,
        r#","parentSpanId":"","traceState":"""#,
    ] {
        accepted(&doc_with("", extra));
    }
    // times: strings with leading zeros, plain numbers, zero
    let doc = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"startTimeUnixNano":"0001","endTimeUnixNano":0}]}]}]}"#;
    let message = accepted(doc);
    let span = &message.resource_spans[0].scope_spans[0].spans[0];
    assert_eq!((span.start_time_unix_nano, span.end_time_unix_nano), (1, 0));
}

#[test]
fn missing_and_empty_members_default_as_in_serde() {
    for doc in [
        "{}",
        r#"{"resourceSpans":[]}"#,
        r#"{"resourceSpans":[{}]}"#,
        r#"{"resourceSpans":[{"resource":null,"scopeSpans":[{"scope":null,"spans":[]}]}]}"#,
        r#"{"resourceSpans":[{"resource":{"attributes":[],"droppedAttributesCount":0,"entityRefs":[]},"schemaUrl":"https://x","scopeSpans":[{"scope":{"name":"n","attributes":[{"key":"k","value":{"boolValue":true}}]},"schemaUrl":"u","spans":[{}]}]}]}"#,
        r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"no ids, no times"}]}]}],"extra":1}"#,
        " \r\n\t{ \"resourceSpans\" : [ { \"scopeSpans\" : [ ] } ] } \n ",
    ] {
        accepted(doc);
    }
}

#[test]
fn unicode_and_escapes_are_unescaped_as_serde_does() {
    for value in [
        r#"caf\u00e9"#,
        r#"\ud83d\ude00 smile"#,
        r#"quote \" backslash \\ slash \/ tab \t nl \n cr \r bs \b ff \f"#,
        "raw unicode: 日本語 ✓",
        r#"\u0000 nul"#,
    ] {
        let doc = doc_with(
            &format!(r#"{{"key":"a","value":{{"stringValue":"{value}"}}}}"#),
            "",
        );
        accepted(&doc);
        accepted(&doc_with("", "").replace("\"llm_request\"", &format!("\"{value}\"")));
    }
    // a lone surrogate and a bad escape are errors, reported by serde
    for value in [r#"\ud800"#, r#"\x41"#, r#"\u12"#] {
        let doc = doc_with(
            &format!(r#"{{"key":"a","value":{{"stringValue":"{value}"}}}}"#),
            "",
        );
        let error = declined(&doc).unwrap_err();
        assert!(
            error.starts_with("invalid otlp json at line 1 column"),
            "{error}"
        );
    }
}

#[test]
fn spec_valid_forms_it_does_not_know_fall_back_to_serde() {
    let lenient = [
        // enum names instead of numbers (the serde path repairs them)
        doc_with("", r#","status":{"code":"STATUS_CODE_ERROR"}"#)
            .replace(r#""kind":2"#, r#""kind":"SPAN_KIND_SERVER""#),
        // a key/value without its key, arrays and kvlists without their values
        doc_with(r#"{"value":{"stringValue":"x"}}"#, ""),
        doc_with(r#"{"key":"a","value":{"arrayValue":{}}}"#, ""),
        doc_with(r#"{"key":"a","value":{"kvlistValue":{}}}"#, ""),
        // an id with a 0x prefix, a time with a plus sign
        doc_with("", "").replace(
            r#""spanId":"eee19b7ec3c1b174""#,
            r#""spanId":"0xeee19b7ec3c1b174""#,
        ),
        doc_with("", "").replace(r#""1700000000000000000""#, r#""+1700000000000000000""#),
        // duplicate members: the serde path keeps the last, as a parsed JSON object does
        doc_with("", r#","kind":3"#),
        r#"{"resourceSpans":[],"resourceSpans":[]}"#.to_string(),
        // serde's sequence form of a struct
        "[]".to_string(),
        // an escaped key, an int64 with a plus sign
        doc_with(r#"{"k\u0065y":"a","value":{"stringValue":"x"}}"#, ""),
        doc_with(r#"{"key":"a","value":{"intValue":"+5"}}"#, ""),
    ];
    for doc in &lenient {
        let message = declined(doc);
        assert!(message.is_ok(), "{doc}: {message:?}");
    }
    // entity refs are not read by the fast path (this one lacks its schemaUrl: serde refuses it)
    let with_entity_ref = doc_with("", "").replace(
        r#""resource":{"#,
        r#""resource":{"entityRefs":[{"type":"service","idKeys":["service.name"]}],"#,
    );
    assert!(declined(&with_entity_ref).is_err());
    let with_entity_ref =
        with_entity_ref.replace(r#""type""#, r#""schemaUrl":"","descriptionKeys":[],"type""#);
    assert!(declined(&with_entity_ref).is_ok());
    // forms serde refuses: declined, and the error is serde's
    let refused = [
        doc_with(r#"{"key":"a","value":{"doubleValue":"NaN"}}"#, ""),
        doc_with(r#"{"key":"a","value":{"bytesValue":"aGk"}}"#, ""),
        doc_with(r#"{"key":"a","value":{"intValue":1.5}}"#, ""),
        doc_with(
            r#"{"key":"a","value":{"intValue":"9223372036854775808"}}"#,
            "",
        ),
        doc_with(r#"{"key":"a","value":{"intValue":-0}}"#, ""),
        doc_with("", r#","flags":-1"#),
        doc_with("", r#","flags":4294967296"#),
        doc_with("", r#","kind":-0"#).replace(r#""kind":2,"#, ""),
        doc_with("", r#","droppedAttributesCount":1.0"#),
        doc_with("", r#","name":null"#).replace(r#""name":"llm_request","#, ""),
        doc_with("", r#","attributes":null"#).replace(r#""attributes":[],"#, ""),
        doc_with("", "").replace(
            r#""startTimeUnixNano":"1700000000000000000""#,
            r#""startTimeUnixNano":-1"#,
        ),
        doc_with("", "").replace(
            r#""startTimeUnixNano":"1700000000000000000""#,
            r#""startTimeUnixNano":1.7e18"#,
        ),
        doc_with("", "").replace("eee19b7ec3c1b174", "eee19b7ec3c1b17"),
        doc_with("", "").replace("eee19b7ec3c1b174", "zzz19b7ec3c1b174"),
        r#"{"resourceSpans":{}}"#.to_string(),
    ];
    for doc in &refused {
        let error = declined(doc);
        assert!(error.is_err(), "{doc}: {error:?}");
    }
}

#[test]
fn malformed_and_truncated_documents_get_serde_errors() {
    let doc = doc_with(
        r#"{"key":"a","value":{"arrayValue":{"values":[{"stringValue":"caf\u00e9"},{"doubleValue":1.5e3}]}}},{"key":"b","value":{"bytesValue":"aGk="}}"#,
        r#","events":[{"timeUnixNano":"1700000000100000000","name":"e"}],"status":{"code":1}"#,
    );
    accepted(&doc);
    // every prefix (up to the last byte) is truncated JSON
    for end in 0..doc.len() {
        if !doc.is_char_boundary(end) {
            continue;
        }
        let error = declined(&doc[..end]).unwrap_err();
        assert!(error.starts_with("invalid otlp json"), "{end}: {error}");
    }
    let variants = [
        format!("{doc} x"),
        format!("{doc},"),
        doc.replacen("},{", "},,{", 1),
        doc.replacen("[{", "[{,", 1),
        doc.replacen(":", "=", 1),
        doc.replacen("\"code\":1", "\"code\":tru", 1),
        doc.replacen("1.5e3", "1.5e", 1),
        doc.replacen("1.5e3", "01.5", 1),
        doc.replacen("\"name\":\"e\"", "\"name\":\"e\tf\"", 1),
        doc.replacen("1700000000100000000", "17000000001000000000000", 1),
    ];
    for bad in variants {
        assert_ne!(bad, doc);
        let error = declined(&bad).unwrap_err();
        assert!(error.starts_with("invalid otlp json"), "{bad}: {error}");
    }
}

#[test]
fn seeded_random_documents_agree_with_serde() {
    // SplitMix64: deterministic, no dependency
    let mut state = 7u64;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let values = [
        r#"{"stringValue":"v"}"#,
        r#"{"stringValue":"\u00e9\n"}"#,
        r#"{"intValue":"123"}"#,
        r#"{"intValue":-7}"#,
        r#"{"doubleValue":0.30000000000000004}"#,
        r#"{"doubleValue":12345678901234567890}"#,
        r#"{"boolValue":false}"#,
        r#"{"bytesValue":"AAEC"}"#,
        r#"{"arrayValue":{"values":[{"intValue":"1"},{"stringValue":"2"}]}}"#,
        r#"{"kvlistValue":{"values":[{"key":"x","value":{"boolValue":true}}]}}"#,
        r#"{}"#,
        "null",
        // not accepted by the fast path, or not at all
        r#"{"doubleValue":"1.5"}"#,
        r#"{"arrayValue":{}}"#,
        r#"{"intValue":"0x10"}"#,
    ];
    let keys = ["gen_ai.request.model", "tenant", "k", "", "ключ"];
    let mut accepted_count = 0;
    for _ in 0..2000 {
        let attrs: Vec<String> = (0..next() % 5)
            .map(|_| {
                let key = keys[(next() % keys.len() as u64) as usize];
                let value = values[(next() % values.len() as u64) as usize];
                format!(r#"{{"key":"{key}","value":{value}}}"#)
            })
            .collect();
        let start = match next() % 3 {
            0 => format!(r#""{}""#, next() >> 1),
            1 => format!("{}", next() >> 1),
            _ => "\"\"".to_string(),
        };
        let span = format!(
            r#"{{"traceId":"{:032x}","spanId":"{:016x}","name":"n{}","kind":{},"startTimeUnixNano":{start},"attributes":[{}]}}"#,
            u128::from(next()) << 64 | u128::from(next()),
            next(),
            next() % 10,
            next() % 6,
            attrs.join(",")
        );
        let doc =
            format!(r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{span},{span}]}}]}}]}}"#);
        same_as_serde(&doc);
        accepted_count += usize::from(decode_traces_fast(doc.as_bytes()).is_some());
    }
    assert!(accepted_count > 200, "only {accepted_count} accepted");
}
