//! Fuzz harnesses of the pipeline's text stages (issue 23 item 6): the template miner (any
//! lines, any configuration within its documented bounds, compactions at any point), header
//! detection and user log-format specs, the `parse` stage's line parser, and the redactor (no
//! panic on any text, idempotent, valid JSON stays valid, and generated emails, IPs, cards and keys
//! embedded in random text never survive). Each asserts "no panic, and either a value or a typed
//! error".
//!
//! `INFERSIGHT_FUZZ_CASES` sets the cases per harness (CI's default is small), and
//! `INFERSIGHT_FUZZ_SEED` the seed; `bench/fuzz.sh` runs them long.

use std::sync::OnceLock;

use infersight_pipeline::stages::template::{Miner, detect_header};
use infersight_pipeline::{LogFormat, MinerConfig, RedactConfig, Redactor, mine_lines, parse_line};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// Runs one harness through the shared runner ([`infersight_testkit::fuzz::run`]), with
/// 64 cases in CI unless `INFERSIGHT_FUZZ_CASES` says otherwise.
fn fuzz<S: Strategy>(name: &str, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    infersight_testkit::fuzz::run(name, 64, strategy, test);
}

/// Tokens of log lines: words, numbers, ids, paths, punctuation, multi-byte text, blanks.
fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,8}",
        "[A-Z][a-z]{0,6}:?",
        "-?[0-9]{1,12}(\\.[0-9]{1,4})?",
        "0x[0-9a-f]{1,16}",
        "/[a-z]{1,5}(/[a-z0-9]{1,5}){0,3}",
        "[a-z]{1,4}=[a-z0-9]{0,6}",
        "[\\[\\](){}<>:;,=|\"'*#$%-]{1,3}",
        "(é|ü|日本|😀|\u{200b}|\u{0}|\u{7f}){1,3}",
        ".{1,4}",
    ]
}

fn line() -> impl Strategy<Value = String> {
    (
        proptest::collection::vec(token(), 0..24),
        prop::sample::select(vec![" ", "  ", "\t", " | "]),
    )
        .prop_map(|(tokens, blank)| tokens.join(blank))
}

/// Lines of a few shapes repeated with varying values (so templates form, merge and split),
/// plus noise lines.
fn lines() -> impl Strategy<Value = Vec<String>> {
    let shaped = (
        proptest::collection::vec(line(), 1..4),
        proptest::collection::vec((any::<prop::sample::Index>(), "[a-z0-9]{1,6}"), 1..40),
    )
        .prop_map(|(shapes, picks)| {
            picks
                .into_iter()
                .map(|(which, value)| format!("{} {value}", shapes[which.index(shapes.len())]))
                .collect::<Vec<_>>()
        });
    (shaped, proptest::collection::vec(line(), 0..10)).prop_map(|(mut a, b)| {
        a.extend(b);
        a
    })
}

fn miner_config() -> impl Strategy<Value = MinerConfig> {
    (
        0.0f64..=1.0,
        1usize..6,
        1usize..8,
        1usize..64,
        1u64..50,
        1usize..6,
        1u64..10,
        0.0f64..=1.0,
    )
        .prop_map(
            |(
                similarity_threshold,
                tree_depth,
                max_children,
                max_tokens,
                compact_every_lines,
                split_max_values,
                split_min_lines,
                split_min_share,
            )| MinerConfig {
                similarity_threshold,
                tree_depth,
                max_children,
                max_tokens,
                compact_every_lines,
                split_max_values,
                split_min_lines,
                split_min_share,
            },
        )
}

#[test]
fn template_miner_never_panics() {
    fuzz(
        "template_miner",
        (
            lines(),
            miner_config(),
            proptest::collection::vec(any::<prop::sample::Index>(), 0..3),
        ),
        |(lines, config, compact_at)| {
            let mut miner = Miner::new(config.clone());
            let compact_at: Vec<usize> = compact_at
                .iter()
                .map(|i| i.index(lines.len() + 1))
                .collect();
            let mut clusters = Vec::new();
            for (index, line) in lines.iter().enumerate() {
                if compact_at.contains(&index) {
                    let _ = miner.compact();
                }
                let cluster = miner.add(line, Some(index as i64 * 1_000_000_000));
                clusters.push((cluster, line));
            }
            let _ = miner.compact();
            for (cluster, line) in clusters {
                let resolved = miner.resolve_line(cluster, line);
                let text = miner.template_text(resolved);
                prop_assert!(!miner.template_id(resolved).is_empty());
                let _ = miner.params(resolved, line);
                let _ = text;
            }
            let mined = mine_lines(lines.iter().map(String::as_str), &config, None);
            prop_assert_eq!(mined.len(), lines.len());
            for (index, mined) in mined.iter().enumerate() {
                prop_assert_eq!(mined.line_no, index + 1);
            }
            Ok(())
        },
    );
}

#[test]
fn headers_and_format_specs_never_panic() {
    let spec = proptest::collection::vec(
        prop_oneof![
            Just("<Content>".to_string()),
            Just("<Date> <Time>".to_string()),
            "<[A-Za-z_0-9]{0,6}>?",
            "[ :,\\[\\]().*+?^$|\\\\{}-]{0,3}",
            ".{0,3}",
        ],
        0..6,
    )
    .prop_map(|parts| parts.concat());
    fuzz("headers_and_formats", (spec, line()), |(spec, line)| {
        let header = detect_header(&line);
        prop_assert!(line.contains(header.content), "{header:?}");
        match LogFormat::parse(&spec) {
            Ok(format) => {
                if let Some(split) = format.split(&line) {
                    prop_assert!(line.contains(split.content));
                }
                let _ = format.content(&line);
                let mined = mine_lines([line.as_str()], &MinerConfig::default(), Some(&format));
                prop_assert_eq!(mined.len(), 1);
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
        let _ = parse_line(&line);
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// the redactor

fn redactor() -> &'static Redactor {
    static SHARED: OnceLock<Redactor> = OnceLock::new();
    SHARED.get_or_init(|| Redactor::new(&RedactConfig::default()).unwrap())
}

/// Random text around a finding: any characters, multi-byte ones included, but no dotted
/// number (`lib 1.2.3` beside an address makes it a list of versions, which the redactor keeps
/// by design).
fn noise() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,16}",
        "[a-zA-Z0-9 ._:=,;/-]{0,16}",
        "(日本語|é|😀| |\\t|\\n){0,4}",
    ]
    .prop_filter("no dotted number", |text| {
        let bytes = text.as_bytes();
        !bytes
            .windows(3)
            .any(|w| w[0].is_ascii_digit() && w[1] == b'.' && w[2].is_ascii_digit())
    })
}

/// What separates a finding from the text around it: blanks, punctuation, quotes, CJK
/// punctuation, JSON syntax.
fn boundary() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        " ", "\t", "\n", ", ", "; ", " (", ") ", "\"", "'", " <", "> ", "|", "，", "。", "：",
        " [", "] ",
    ])
}

fn luhn_complete(body: &str) -> String {
    let digits: Vec<u32> = body.chars().filter_map(|c| c.to_digit(10)).collect();
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            if i % 2 == 0 {
                let x = d * 2;
                if x > 9 { x - 9 } else { x }
            } else {
                d
            }
        })
        .sum();
    format!("{body}{}", (10 - sum % 10) % 10)
}

/// A finding the default detectors must catch, and the part of it that must not survive.
fn finding() -> impl Strategy<Value = (String, String)> {
    let email = (
        "[a-z][a-z0-9._]{0,10}[a-z0-9]",
        "[a-z]{2,10}",
        prop::sample::select(vec!["com", "org", "io", "cn", "co.uk"]),
    )
        .prop_map(|(local, domain, tld)| {
            let email = format!("{local}@{domain}.{tld}");
            (email.clone(), email)
        });
    let ipv4 = (1u8..=223, any::<u8>(), any::<u8>(), 1u8..=254)
        .prop_filter("not loopback or this network", |(a, ..)| *a != 127)
        .prop_map(|(a, b, c, d)| {
            let ip = format!("{a}.{b}.{c}.{d}");
            (ip.clone(), ip)
        });
    let card = (
        prop::sample::select(vec!["4", "51", "55", "6011"]),
        proptest::collection::vec(0u8..10, 14),
    )
        .prop_map(|(prefix, digits)| {
            let mut body = prefix.to_string();
            body.extend(
                digits
                    .iter()
                    .take(15 - prefix.len())
                    .map(|d| char::from(b'0' + d)),
            );
            let number = luhn_complete(&body);
            (number.clone(), number)
        });
    let key = (
        "[A-Za-z0-9]{40}",
        prop::sample::select(vec!["sk-", "sk-proj-", "ghp_", "AKIA"]),
    )
        .prop_map(|(tail, prefix)| {
            let key = if prefix == "AKIA" {
                format!("AKIA{}", tail[..16].to_ascii_uppercase())
            } else {
                format!("{prefix}{tail}")
            };
            (key.clone(), key)
        });
    // a generic `name=value` secret is one that looks random (long, mixed classes, varied
    // characters: `token=the_quick_brown_fox` is left alone by design)
    let random_secret = "[A-Za-z0-9]{20,40}".prop_filter("random-looking", |value| {
        let distinct: std::collections::BTreeSet<char> = value.chars().collect();
        value.chars().any(|c| c.is_ascii_digit())
            && value.chars().any(|c| c.is_ascii_alphabetic())
            && distinct.len() >= 12
    });
    let assigned = (
        prop::sample::select(vec![
            "api_key=",
            "token=",
            "client_secret: ",
            "x-api-key=\"",
            "access_token=",
        ]),
        random_secret,
    )
        .prop_map(|(name, secret)| (format!("{name}{secret}"), secret));
    // a password is any value of four characters or more
    let password = (
        prop::sample::select(vec!["password=", "passwd: ", "PASSWORD = "]),
        "[A-Za-z0-9!@#%^*]{4,20}",
    )
        .prop_map(|(name, secret)| (format!("{name}{secret}"), secret));
    prop_oneof![email, ipv4, card, key, assigned, password]
}

#[test]
fn redactor_never_panics_and_is_idempotent() {
    fuzz(
        "redactor_any_text",
        proptest::collection::vec(any::<char>(), 0..200),
        |chars| {
            let text: String = chars.into_iter().collect();
            let once = redactor().redact(&text).into_owned();
            let twice = redactor().redact(&once).into_owned();
            prop_assert_eq!(&twice, &once, "not idempotent on {:?}", text);
            // JSON in, JSON out
            let json = serde_json::json!({ "body": text, "nested": { "list": [text.clone(), 1] } })
                .to_string();
            let redacted = redactor().redact_json(&json);
            prop_assert!(
                serde_json::from_str::<serde_json::Value>(&redacted).is_ok(),
                "{}",
                redacted
            );
            Ok(())
        },
    );
}

#[test]
fn generated_findings_in_random_text_never_survive() {
    fuzz(
        "redactor_no_leak",
        (noise(), boundary(), finding(), boundary(), noise()),
        |(before, open, (finding, secret), close, after)| {
            // plain words around the finding: after `v` or `torch` a dotted number is a
            // version, and a number before `b` or `ms` a quantity, by design
            let text = format!("{before} at{open}{finding}{close}ok{after}");
            let out = redactor().redact(&text);
            prop_assert!(!out.contains(&secret), "{:?} survived in {:?}", secret, out);
            let json = serde_json::json!({ "message": text }).to_string();
            let out = redactor().redact_json(&json);
            prop_assert!(
                !out.contains(&secret),
                "{:?} survived in JSON {:?}",
                secret,
                out
            );
            Ok(())
        },
    );
}
