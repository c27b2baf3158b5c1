//! Fuzz harnesses of the model's parsers (issue 23 item 6): the raw-line prefix parser
//! (`log_prefix`: times, levels, vLLM process tags, year anchors at the ends of time), the time and
//! duration parsers users type into (`time`), the `attrs` reader against serde_json (it must fail
//! exactly when serde_json does) and the JSON string scanner. Each asserts "no panic, and either
//! a value or a typed answer".
//!
//! `INFERSIGHT_FUZZ_CASES` sets the cases per harness (CI's default is small), and
//! `INFERSIGHT_FUZZ_SEED` the seed; `bench/fuzz.sh` runs them long.

use chrono::{TimeZone, Utc};
use infersight_model::attrs::read_attrs;
use infersight_model::log_prefix::{
    YearAnchor, normalize_severity, parse_iso_timestamp, parse_log_prefix, parse_log_prefix_near,
    process_tag,
};
use infersight_model::scan::{json_string_end, json_string_is_plain};
use infersight_model::time::{duration_text_seconds, parse_duration_ns, parse_range, parse_time};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// Runs one harness through the shared runner ([`infersight_testkit::fuzz::run`]), with
/// 256 cases in CI unless `INFERSIGHT_FUZZ_CASES` says otherwise.
fn fuzz<S: Strategy>(name: &str, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    infersight_testkit::fuzz::run(name, 256, strategy, test);
}

/// Text shaped like the start of a log line, with any characters (multi-byte ones included)
/// where the parsers slice.
fn log_line() -> impl Strategy<Value = String> {
    let part = prop_oneof![
        Just("INFO ".to_string()),
        Just("WARNING ".to_string()),
        Just("[error] ".to_string()),
        Just("level=warn ".to_string()),
        "[IWEF][0-9]{4} [0-9:.]{0,16} ",
        "\\(([A-Za-z_0-9]{0,12})( pid=[0-9]{0,12})?( rank=[0-9]{0,12})?\\)? ?",
        "[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,9})? ",
        "\\[?[0-9]{4,5}-[0-9]{1,2}-[0-9]{1,2}[T ][0-9]{1,2}:[0-9]{2}(:[0-9]{2})?([.,][0-9]{0,12})?(Z|[+-][0-9]{2}:?[0-9]{2})?\\]? ",
        "[a-z_]{1,8}\\.py:[0-9]{1,5}\\] ",
        "[0-9]{1,20}",
        any::<char>().prop_map(String::from),
        "[ -~]{0,6}",
        ".{0,4}",
    ];
    proptest::collection::vec(part, 0..7).prop_map(|parts| parts.concat())
}

fn anchor() -> impl Strategy<Value = YearAnchor> {
    let instant = prop_oneof![
        any::<i64>(),
        Just(i64::MIN),
        Just(i64::MAX),
        0i64..4_102_444_800_000_000_000,
    ];
    prop_oneof![
        prop_oneof![any::<i32>(), 1900i32..2300].prop_map(YearAnchor::Year),
        (instant.clone(), instant.clone()).prop_map(|(a, b)| YearAnchor::Near {
            from_ns: a.min(b),
            to_ns: a.max(b),
        }),
        instant.prop_map(YearAnchor::Before),
    ]
}

#[test]
fn log_prefix_never_panics() {
    fuzz(
        "log_prefix",
        (log_line(), anchor(), 0i64..4_102_444_800),
        |(line, anchor, now_s)| {
            let near = parse_log_prefix_near(&line, anchor);
            prop_assert!(!near.year_inferred || near.ts_ns.is_some(), "{near:?}");
            let now = Utc.timestamp_opt(now_s, 0).unwrap();
            let prefix = parse_log_prefix(&line, now);
            prop_assert!(!prefix.year_inferred || prefix.ts_ns.is_some());
            if let Some(tag) = process_tag(&line) {
                prop_assert!(line.contains(tag.title));
            }
            for word in line.split_whitespace() {
                let _ = normalize_severity(word);
            }
            let _ = parse_iso_timestamp(&line);
            Ok(())
        },
    );
}

#[test]
fn times_and_durations_never_panic() {
    let text = prop_oneof![
        "-?[0-9]{1,22}(\\.[0-9]{0,12})?(ns|us|µs|ms|s|m|min|h|d|w|y)?",
        "now(-| - )?[0-9]{0,22}[smhdw]?",
        "[0-9]{4,6}-[0-9]{1,2}-[0-9]{1,2}([T ][0-9:.]{0,18})?(Z|[+-][0-9:]{0,6})?",
        ".{0,12}",
    ];
    fuzz(
        "times_and_durations",
        (text.clone(), text, any::<i64>()),
        |(since, until, now_ns)| {
            let since_ns = parse_time(&since, now_ns);
            if let Err(reason) = &since_ns {
                prop_assert!(!reason.is_empty());
            }
            if let Ok(range) = parse_range(Some(&since), Some(&until), now_ns)
                && let (Some(s), Some(u)) = (range.since_ns, range.until_ns)
            {
                prop_assert!(s < u);
            }
            let _ = parse_duration_ns(&since);
            if let Some(seconds) = duration_text_seconds(&since) {
                prop_assert!(!seconds.is_nan());
            }
            Ok(())
        },
    );
}

/// `attrs`-shaped objects: flat or nested, with escapes, numbers of every form, repeated keys,
/// then cut or spliced.
fn attrs_text() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        "\"([a-z0-9 ]|\\\\[\"\\\\/bfnrt]|\\\\u[0-9a-fA-F]{4}|\\\\u[dD][89abAB][0-9a-f]{2}|é|\\t)*\"",
        "-?(0|[1-9][0-9]{0,20})(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,4})?",
        Just("true".to_string()),
        Just("null".to_string()),
        Just("{}".to_string()),
        Just("[1,{\"a\":[]}]".to_string()),
        Just("{\"$serde_json::private::Number\":\"1\"}".to_string()),
        ".{0,3}",
    ];
    let entry = ("\"[a-z.]{0,4}\"", value).prop_map(|(k, v)| format!("{k}:{v}"));
    (
        proptest::collection::vec(entry, 0..5),
        prop::sample::select(vec!["", " ", "\n"]),
        any::<prop::sample::Index>(),
        any::<bool>(),
    )
        .prop_map(|(entries, blank, cut, truncate)| {
            let text = format!("{{{blank}{}{blank}}}", entries.join(&format!(",{blank}")));
            if truncate {
                let mut at = cut.index(text.len() + 1);
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                text[..at].to_string()
            } else {
                text
            }
        })
}

#[test]
fn attrs_reader_fails_exactly_when_serde_json_does() {
    fuzz("attrs_reader", attrs_text(), |text| {
        let mut entries = Vec::new();
        let read = read_attrs(&text, &mut entries);
        let serde = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&text);
        prop_assert_eq!(read, serde.is_ok(), "{} / {:?}", text, serde.err());
        Ok(())
    });
}

/// Whether `text` holds a `\\u` escape of a UTF-16 surrogate (`\\uD800` to `\\uDFFF`).
fn has_surrogate_escape(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    ["8", "9", "a", "b", "c", "d", "e", "f"]
        .iter()
        .any(|digit| lower.contains(&format!("\\ud{digit}")))
}

#[test]
fn json_string_scanner_agrees_with_serde_json() {
    let content = prop_oneof![
        "([ -~]|\\\\u[0-9a-fA-F]{0,4}|\\\\[a-z\"]|[\\x00-\\x1f]|é|€|😀)*",
        proptest::collection::vec(any::<u8>(), 0..24)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ];
    fuzz("json_string_scanner", content, |content| {
        let quoted = format!("\"{content}\"");
        let bytes = quoted.as_bytes();
        let scanned = json_string_end(bytes, 1);
        match serde_json::from_str::<String>(&quoted) {
            // serde_json reads the whole text as one string: the scanner ends at its last quote
            Ok(text) => {
                let end = scanned.ok_or_else(|| TestCaseError::fail("scanner gave up"))?;
                prop_assert_eq!(end.quote, bytes.len() - 1);
                prop_assert_eq!(!end.escaped, text == content);
                prop_assert_eq!(json_string_is_plain(&content), !end.escaped);
            }
            Err(_) => {
                // what the scanner accepts, serde_json reads as a string up to that quote
                // (a lone surrogate escape is the decoder's business, see `json_string_end`)
                if let Some(end) = scanned {
                    let prefix = &quoted[..=end.quote];
                    if let Err(e) = serde_json::from_str::<String>(prefix) {
                        prop_assert!(has_surrogate_escape(prefix), "{prefix}: {e}");
                    }
                }
            }
        }
        Ok(())
    });
}
