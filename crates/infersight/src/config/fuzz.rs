//! Fuzz harness of the configuration loader (issue 23 item 6): the default configuration written
//! as TOML, with values swapped for ones of every type and range (durations that overflow,
//! `nan`, huge integers, tables where scalars go), lines dropped or repeated, TOML syntax noise,
//! and `INFERSIGHT__…` variables on top. `load` must return a configuration or its errors, each
//! with a reason, and a loaded configuration's derived settings must build — never a panic.
//!
//! Seeded (`INFERSIGHT_FUZZ_SEED`), `INFERSIGHT_FUZZ_CASES` cases (a small default in CI), or
//! more until `INFERSIGHT_FUZZ_SECONDS` have passed (`bench/fuzz.sh`).

use std::io::Write;
use std::time::Instant;

use infersight_model::rng::SplitMix64;

use super::{Config, ENV_PREFIX, load};

/// Values a key may be given: every TOML type, the ends of their ranges, durations that do not
/// fit, text where numbers go.
const VALUES: [&str; 34] = [
    "0",
    "-1",
    "1",
    "65536",
    "9223372036854775807",
    "-9223372036854775808",
    "1e308",
    "nan",
    "inf",
    "-inf",
    "0.0",
    "-0.5",
    "true",
    "false",
    "\"\"",
    "\"x\"",
    "\"-5s\"",
    "\"0s\"",
    "\"1ns\"",
    "\"99999999999999999999d\"",
    "\"9223372036s\"",
    "\"1.5h\"",
    "\"ms\"",
    "\"nan\"",
    "\"0.0.0.0:99999\"",
    "\"127.0.0.1:0\"",
    "\"/dev/null/x\"",
    "\"日本\"",
    "[]",
    "[1, \"a\"]",
    "[\"p99\", \"model\"]",
    "{}",
    "{ a = 1 }",
    "1979-05-27T07:32:00Z",
];

/// Bytes that change what TOML text means.
const NOISE: [&str; 12] = [
    "[", "]", "[[", "=", "\"", "'", "\n", "#", ".", "{", "}", "\\u",
];

fn cases() -> u64 {
    std::env::var("INFERSIGHT_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

fn seed() -> u64 {
    std::env::var("INFERSIGHT_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x1f5e_2023)
}

fn pick<'a>(rng: &mut SplitMix64, items: &[&'a str]) -> &'a str {
    items[rng.below(items.len())]
}

/// The default configuration's TOML with values swapped, lines dropped or repeated, noise.
fn mutated_document(rng: &mut SplitMix64, lines: &[String]) -> String {
    let mut out = String::new();
    // a few documents get many changes, most a handful, so some load and are derived from
    // (about one in eight has none: every key added to the configuration lowers the share of
    // changed documents that still load)
    let swap_percent = [0, 0, 1, 2, 5, 20][rng.below(6)];
    let edit_percent = [0, 0, 0, 1, 3][rng.below(5)];
    for line in lines {
        let roll = rng.below(100);
        if roll < edit_percent {
            continue;
        }
        let line = match line.split_once(" = ") {
            Some((key, _)) if rng.below(100) < swap_percent => {
                format!("{key} = {}", pick(rng, &VALUES))
            }
            _ => line.clone(),
        };
        out.push_str(&line);
        out.push('\n');
        if roll >= 100 - edit_percent {
            out.push_str(&line);
            out.push('\n');
        }
    }
    for _ in 0..rng.below(3) * usize::from(rng.below(2) == 0) {
        let mut at = rng.below(out.len() + 1);
        while !out.is_char_boundary(at) {
            at -= 1;
        }
        out.insert_str(at, pick(rng, &NOISE));
    }
    out
}

/// `INFERSIGHT__SECTION__KEY=value` variables over the keys of the document.
fn environment(rng: &mut SplitMix64, keys: &[String]) -> Vec<(String, String)> {
    (0..rng.below(3))
        .map(|_| {
            let key = &keys[rng.below(keys.len())];
            let name = format!(
                "{ENV_PREFIX}{}",
                key.replace('.', "__").to_ascii_uppercase()
            );
            let value = pick(rng, &VALUES).trim_matches('"').to_string();
            (name, value)
        })
        .collect()
}

/// Dotted paths of the scalar keys of the default configuration.
fn key_paths(table: &toml::Table, prefix: &str, out: &mut Vec<String>) {
    for (key, value) in table {
        let path = format!("{prefix}{key}");
        match value {
            toml::Value::Table(sub) => key_paths(sub, &format!("{path}."), out),
            _ => out.push(path),
        }
    }
}

/// Everything a command derives from a loaded configuration.
fn derive_everything(config: &Config) {
    let _ = config.validate();
    let _ = config.watch_settings();
    let _ = config.slos();
    let _ = config.store_options();
    let _ = config.query.limits();
    let _ = config.aliases();
    let _ = config.template_store_dir();
}

#[test]
fn config_loader_returns_a_configuration_or_its_errors() {
    let default_text = toml::to_string(&Config::default()).expect("the defaults serialize");
    let lines: Vec<String> = default_text.lines().map(str::to_string).collect();
    let mut keys = Vec::new();
    key_paths(&super::known_keys(), "", &mut keys);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("infersight.toml");
    let mut rng = SplitMix64::new(seed());
    let started = Instant::now();
    // with `INFERSIGHT_FUZZ_SECONDS`, cases go on until that much time has passed
    let budget_s: Option<f64> = std::env::var("INFERSIGHT_FUZZ_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok());
    let mut cases = cases();
    let mut case = 0;
    let mut loaded = 0u64;
    while case < cases {
        let text = mutated_document(&mut rng, &lines);
        let env = environment(&mut rng, &keys);
        let mut file = std::fs::File::create(&path).expect("the config file");
        file.write_all(text.as_bytes()).expect("written");
        drop(file);
        let outcome = std::panic::catch_unwind(|| match load(Some(&path), &env) {
            Ok(config) => {
                derive_everything(&config);
                true
            }
            Err(errors) => {
                assert!(!errors.0.is_empty(), "an error without a reason");
                assert!(errors.0.iter().all(|e| !e.trim().is_empty()), "{errors}");
                false
            }
        });
        match outcome {
            Ok(true) => loaded += 1,
            Ok(false) => {}
            Err(_) => panic!("case {case} panicked; env {env:?}; document:\n{text}"),
        }
        case += 1;
        if case == cases && budget_s.is_some_and(|s| started.elapsed().as_secs_f64() < s) {
            cases += 1000;
        }
    }
    eprintln!(
        "fuzz config_loader: {cases} cases in {:.2} s, ok ({loaded} loaded)",
        started.elapsed().as_secs_f64()
    );
    // the derived settings are fuzzed too only if some documents load
    assert!(
        loaded * 50 >= cases,
        "only {loaded} of {cases} documents loaded"
    );
}
