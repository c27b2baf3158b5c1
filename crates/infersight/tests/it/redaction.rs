//! Redaction end to end: seeded OTLP traces and logs carrying thousands of PII values of every
//! detector kind (log bodies, mixed `[PROMPT] … [RESPONSE] …` lines, span attributes, nested
//! attribute maps and arrays) go through `infersight ingest` and a running `infersight serve`;
//! then no raw value may appear in the data directory (WAL bytes, the template store, every
//! table read back through SQL), in any `/api/v1/query` answer, or in the server's own stderr.
//! Path rules (hash, drop, keep), the keyed hash's stability and the `redactions` audit table
//! are checked on the same data.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValueList};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

use crate::support::{Server, bin, kv, ok, post, rows, s};

const SECRET_ENV: &str = "INFERSIGHT_TEST_REDACT_SECRET";
const SECRET: &str = "it-secret-6f1c0d9a2b7e4c58";
const TS: u64 = 1_767_225_600_000_000_000; // 2026-01-01T00:00:00Z
const TABLES: [&str; 7] = [
    "requests",
    "spans",
    "logs",
    "metrics",
    "tokens",
    "templates",
    "redactions",
];

const CONFIG: &str = r#"
[store]
fsync = "always"

[stages.redact]
secret_env = "INFERSIGHT_TEST_REDACT_SECRET"

[[stages.redact.rules]]
path = "*.attrs.enduser.id"
action = "hash"

[[stages.redact.rules]]
path = "*.attrs.http.request.header.authorization"
action = "drop"

[[stages.redact.rules]]
path = "*.attrs.user.*"
action = "hash"

[[stages.redact.rules]]
path = "*.attrs.gen_ai.request.model"
action = "keep"

[[stages.redact.rules]]
path = "logs.body"
action = "hash"
"#;

/// splitmix64: a seeded, dependency-free generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn digits(&mut self, n: usize) -> String {
        (0..n)
            .map(|_| char::from(b'0' + self.below(10) as u8))
            .collect()
    }
    fn alnum(&mut self, n: usize) -> String {
        const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        // always both a letter and a digit, so key validators accept it
        let mut out: String = (0..n.saturating_sub(2))
            .map(|_| char::from(CHARS[self.below(CHARS.len() as u64) as usize]))
            .collect();
        out.push(char::from(b'a' + self.below(26) as u8));
        out.push(char::from(b'0' + self.below(10) as u8));
        out
    }
}

/// The raw PII values of one record, each a value that must never be stored.
#[derive(Debug, Clone)]
struct Pii {
    email: String,
    e164: String,
    cn_mobile: String,
    cn_id: String,
    card: String,
    ipv4: String,
    ipv6: String,
    api_key: String,
    aws_key: String,
    bearer_token: String,
    jwt: String,
}

impl Pii {
    fn values(&self) -> [&str; 11] {
        [
            &self.email,
            &self.e164,
            &self.cn_mobile,
            &self.cn_id,
            &self.card,
            &self.ipv4,
            &self.ipv6,
            &self.api_key,
            &self.aws_key,
            &self.bearer_token,
            &self.jwt,
        ]
    }
}

fn luhn_card(rng: &mut Rng) -> String {
    let mut digits: Vec<u8> = std::iter::once(4)
        .chain((0..14).map(|_| rng.below(10) as u8))
        .collect();
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            let d = u32::from(d);
            if i % 2 == 0 {
                let doubled = d * 2;
                if doubled > 9 { doubled - 9 } else { doubled }
            } else {
                d
            }
        })
        .sum();
    digits.push(((10 - sum % 10) % 10) as u8);
    digits.iter().map(|d| char::from(b'0' + d)).collect()
}

fn cn_id(rng: &mut Rng) -> String {
    const WEIGHTS: [u32; 17] = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2];
    const CHECK: &[u8] = b"10X98765432";
    let first17 = format!(
        "110105{}{:02}{:02}{}",
        1960 + rng.below(45),
        1 + rng.below(12),
        1 + rng.below(28),
        rng.digits(3)
    );
    let sum: u32 = first17
        .bytes()
        .zip(WEIGHTS)
        .map(|(b, w)| u32::from(b - b'0') * w)
        .sum();
    format!("{first17}{}", char::from(CHECK[(sum % 11) as usize]))
}

fn pii(rng: &mut Rng, i: usize) -> Pii {
    let words = [
        "alice", "bob", "chen", "dana", "emeka", "farah", "goro", "hana",
    ];
    let word = words[rng.below(words.len() as u64) as usize];
    Pii {
        email: format!(
            "{word}.{i}x{}@corp{}.example.com",
            rng.digits(3),
            rng.below(9)
        ),
        e164: format!("+1415{}", rng.digits(7)),
        cn_mobile: format!("13{}{}", 8 - rng.below(2), rng.digits(8)),
        cn_id: cn_id(rng),
        card: luhn_card(rng),
        ipv4: format!(
            "172.{}.{}.{}",
            16 + rng.below(16),
            1 + rng.below(254),
            1 + rng.below(254)
        ),
        ipv6: format!(
            "2001:db8:{:x}::{:x}",
            1 + rng.below(0xfff),
            1 + rng.below(0xffff)
        ),
        api_key: format!("sk-proj-{}", rng.alnum(28)),
        aws_key: format!("AKIA{}", rng.alnum(16).to_ascii_uppercase()),
        bearer_token: rng.alnum(32),
        jwt: format!(
            "eyJhbGciOiJIUzI1NiJ9.eyJ{}.{}",
            rng.alnum(24),
            rng.alnum(32)
        ),
    }
}

fn str_value(v: &str) -> AnyValue {
    AnyValue { value: Some(s(v)) }
}

/// Seeded traces and logs: `n` requests, each with its own PII. Answers the requests (one JSON
/// line each for traces and logs) and every raw value used.
fn fleet(
    seed: u64,
    n: usize,
) -> (
    Vec<ExportTraceServiceRequest>,
    Vec<ExportLogsServiceRequest>,
    Vec<Pii>,
) {
    let mut rng = Rng(seed);
    let all: Vec<Pii> = (0..n).map(|i| pii(&mut rng, i)).collect();
    let mut traces = Vec::new();
    let mut logs = Vec::new();
    for (chunk_index, chunk) in all.chunks(50).enumerate() {
        let mut spans = Vec::new();
        let mut records = Vec::new();
        for (j, p) in chunk.iter().enumerate() {
            let i = chunk_index * 50 + j;
            let ts = TS + i as u64 * 250_000_000;
            let mut trace_id = [3u8; 16];
            trace_id[..8].copy_from_slice(&(i as u64 + 1).to_be_bytes());
            trace_id[8..].copy_from_slice(&seed.to_be_bytes());
            let span_id = ((i as u64) << 8 | 1).to_be_bytes().to_vec();
            let request_id = format!("req-{seed}-{i}");
            spans.push(Span {
                trace_id: trace_id.to_vec(),
                span_id: span_id.clone(),
                name: format!("llm_request for {}", p.email),
                kind: 2,
                start_time_unix_nano: ts,
                end_time_unix_nano: ts + 1_500_000_000,
                attributes: vec![
                    kv("gen_ai.request.model", s("llama-3-8b")),
                    kv("gen_ai.request.id", s(&request_id)),
                    kv(
                        "gen_ai.usage.prompt_tokens",
                        Value::IntValue(100 + i as i64),
                    ),
                    kv("gen_ai.usage.completion_tokens", Value::IntValue(20)),
                    kv("gen_ai.latency.e2e", Value::DoubleValue(1.5)),
                    kv("enduser.id", s(&p.email)),
                    kv(
                        "http.request.header.authorization",
                        s(&format!("Bearer {}", p.bearer_token)),
                    ),
                    kv("user.phone", s(&p.e164)),
                    kv("client.address", s(&p.ipv4)),
                    kv("net.peer.ip6", s(&p.ipv6)),
                    kv(
                        "gen_ai.prompt",
                        s(&format!(
                            "my id is {} and card {} , call {} ",
                            p.cn_id, p.card, p.cn_mobile
                        )),
                    ),
                    kv(
                        "app.profile",
                        Value::KvlistValue(KeyValueList {
                            values: vec![
                                kv("contact", s(&format!("mail {} today", p.email))),
                                kv(
                                    "keys",
                                    Value::ArrayValue(ArrayValue {
                                        values: vec![str_value(&p.api_key), str_value(&p.aws_key)],
                                    }),
                                ),
                                kv("session", s(&format!("jwt {}", p.jwt))),
                            ],
                        }),
                    ),
                ],
                ..Default::default()
            });
            let bodies = [
                format!("user {} logged in from {}", p.email, p.ipv4),
                format!(
                    "[PROMPT] please email {} or call {} , my card is {} and id {} [RESPONSE] \
                     done, I have written to {} from {}",
                    p.email, p.e164, p.card, p.cn_id, p.email, p.ipv6
                ),
                format!(
                    "auth failed api_key={} token: Bearer {} jwt={} aws {} phone {} ",
                    p.api_key, p.bearer_token, p.jwt, p.aws_key, p.cn_mobile
                ),
            ];
            for (k, body) in bodies.into_iter().enumerate() {
                records.push(LogRecord {
                    time_unix_nano: ts + k as u64 * 1_000_000,
                    severity_text: "INFO".into(),
                    body: Some(str_value(&body)),
                    trace_id: trace_id.to_vec(),
                    span_id: span_id.clone(),
                    attributes: vec![
                        kv("request.id", s(&request_id)),
                        kv("enduser.id", s(&p.email)),
                        kv("http.client_ip", s(&p.ipv4)),
                        kv(
                            "payload",
                            s(&format!(
                                r#"{{"user":{{"card":"{}","ids":["{}"]}}}}"#,
                                p.card, p.cn_id
                            )),
                        ),
                    ],
                    ..Default::default()
                });
            }
        }
        let resource = Resource {
            attributes: vec![
                kv("service.name", s("vllm")),
                kv("k8s.pod.name", s("worker-1")),
            ],
            ..Default::default()
        };
        traces.push(ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(resource.clone()),
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                schema_url: String::new(),
            }],
        });
        logs.push(ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(resource),
                scope_logs: vec![ScopeLogs {
                    log_records: records,
                    ..Default::default()
                }],
                schema_url: String::new(),
            }],
        });
    }
    (traces, logs, all)
}

fn write_jsonl<T: serde::Serialize>(path: &Path, items: &[T]) {
    let mut text = String::new();
    for item in items {
        text.push_str(&serde_json::to_string(item).unwrap());
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

/// Every raw value found in `haystack`, with `what` for the message.
fn leaks<'a>(haystack: &[u8], values: &'a BTreeSet<String>) -> Vec<&'a str> {
    let text = String::from_utf8_lossy(haystack);
    values
        .iter()
        .filter(|v| text.contains(v.as_str()))
        .map(String::as_str)
        .collect()
}

fn raw_values(all: &[Pii]) -> BTreeSet<String> {
    all.iter()
        .flat_map(|p| p.values().map(str::to_string))
        .collect()
}

/// Raw bytes of every file under `dir` whose path contains one of `parts` (all when empty).
fn scan_files(dir: &Path, parts: &[&str], values: &BTreeSet<String>) -> (usize, Vec<String>) {
    let mut scanned = 0;
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&next) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let name = path.to_string_lossy().into_owned();
            if !parts.is_empty() && !parts.iter().any(|p| name.contains(p)) {
                continue;
            }
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            scanned += 1;
            for leak in leaks(&bytes, values) {
                found.push(format!("{leak} in {name}"));
            }
        }
    }
    (scanned, found)
}

fn cli_query(data: &Path, sql: &str) -> serde_json::Value {
    let out = Command::new(bin())
        .args(["query", "--format", "json", "--data"])
        .arg(data)
        .arg(sql)
        .env_remove("INFERSIGHT_LOG")
        .output()
        .unwrap();
    let text = ok(&out, sql);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// A JSON answer's rows as `column → value` maps (the CLI prints an array of objects).
fn objects(answer: &serde_json::Value) -> Vec<BTreeMap<String, serde_json::Value>> {
    if let Some(items) = answer.as_array() {
        return items
            .iter()
            .filter_map(|row| row.as_object())
            .map(|row| row.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .collect();
    }
    rows(answer)
        .into_iter()
        .map(|row| row.into_iter().collect())
        .collect()
}

/// `<EMAIL:h:…>` tokens in `text`.
fn email_hashes(text: &str) -> BTreeSet<String> {
    text.match_indices("<EMAIL:h:")
        .filter_map(|(start, _)| text.get(start..start + 26))
        .filter(|token| token.ends_with('>'))
        .map(str::to_string)
        .collect()
}

/// `WHERE` clause selecting the rows of request 5 of seed 7 (its trace id).
const REQUEST_5: &str = "trace_id = '00000000000000060000000000000007'";

/// The hashed `enduser.id` of the span of an answer, read through SQL.
fn enduser_hash(answer: &serde_json::Value) -> String {
    let rows = objects(answer);
    let attrs = rows[0]["attrs"].as_str().unwrap().to_string();
    let attrs: serde_json::Value = serde_json::from_str(&attrs).unwrap();
    attrs["enduser.id"].as_str().unwrap().to_string()
}

fn assert_audit(audit: &[BTreeMap<String, serde_json::Value>], n: usize) {
    let count = |path: &str, rule: &str, action: &str| -> i64 {
        audit
            .iter()
            .filter(|r| r["path"] == path && r["rule"] == rule && r["action"] == action)
            .map(|r| r["n"].as_i64().unwrap_or(0))
            .sum()
    };
    let n = n as i64;
    assert_eq!(
        count(
            "spans.attrs.http.request.header.authorization",
            "*.attrs.http.request.header.authorization",
            "drop"
        ),
        n,
        "{audit:#?}"
    );
    assert_eq!(
        count("spans.attrs.enduser.id", "*.attrs.enduser.id", "hash"),
        n,
        "{audit:#?}"
    );
    assert_eq!(
        count("logs.attrs.enduser.id", "*.attrs.enduser.id", "hash"),
        3 * n,
        "{audit:#?}"
    );
    assert_eq!(
        count("spans.attrs.user.phone", "*.attrs.user.*", "hash"),
        n,
        "{audit:#?}"
    );
    assert!(
        // (`parse` splits mixed `[PROMPT] … [RESPONSE]` lines before `redact` sees them)
        count("logs.body", "logs.body", "hash") >= 7 * n,
        "{audit:#?}"
    );
    assert!(
        count("spans.attrs.app.profile.keys", "default", "mask") >= 2 * n,
        "{audit:#?}"
    );
    assert!(
        count("logs.attrs.payload", "default", "mask") >= 2 * n,
        "{audit:#?}"
    );
    let detectors: BTreeSet<&str> = audit
        .iter()
        .filter_map(|r| r["detector"].as_str())
        .collect();
    for detector in [
        "email", "phone", "cn_id", "card", "ip", "api_key", "bearer", "jwt",
    ] {
        assert!(
            detectors.contains(detector),
            "no audit row for {detector}: {detectors:?}"
        );
    }
}

const AUDIT_SQL: &str = "SELECT path, rule, detector, action, sum(count) AS n FROM redactions \
                         GROUP BY path, rule, detector, action ORDER BY path";

#[test]
fn no_raw_pii_reaches_the_store_the_api_or_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let n = 300;

    // 1. the CLI: `infersight ingest` of OTLP JSON lines
    let (traces, logs, all) = fleet(7, n);
    let values = raw_values(&all);
    assert!(
        values.len() >= 11 * n - 5,
        "{} distinct values",
        values.len()
    );
    write_jsonl(&dir.path().join("traces.jsonl"), &traces);
    write_jsonl(&dir.path().join("logs.jsonl"), &logs);
    // the scan itself works: every raw value is found in the input files
    let mut input = std::fs::read(dir.path().join("traces.jsonl")).unwrap();
    input.extend(std::fs::read(dir.path().join("logs.jsonl")).unwrap());
    assert_eq!(leaks(&input, &values).len(), values.len());
    let config = dir.path().join("infersight.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let data = dir.path().join("data-cli");

    // a hash rule without its secret is a clear config error, from validate and from ingest
    let validate = Command::new(bin())
        .arg("validate")
        .arg(&config)
        .env_remove(SECRET_ENV)
        .output()
        .unwrap();
    assert_ne!(validate.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&validate.stderr).into_owned()
        + &String::from_utf8_lossy(&validate.stdout);
    assert!(
        stderr.contains(&format!("environment variable `{SECRET_ENV}` is not set")),
        "{stderr}"
    );
    let validate = Command::new(bin())
        .arg("validate")
        .arg(&config)
        .env(SECRET_ENV, SECRET)
        .output()
        .unwrap();
    ok(&validate, "validate with the secret");

    let ingest = |secret: Option<&str>| {
        let mut command = Command::new(bin());
        command
            .args(["ingest", "--quiet", "--config"])
            .arg(&config)
            .arg("--data")
            .arg(&data)
            .arg(dir.path().join("traces.jsonl"))
            .arg(dir.path().join("logs.jsonl"))
            .env_remove("INFERSIGHT_LOG")
            .env_remove(SECRET_ENV);
        if let Some(secret) = secret {
            command.env(SECRET_ENV, secret);
        }
        command.output().unwrap()
    };
    let refused = ingest(None);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    let out = ingest(Some(SECRET));
    ok(&out, "ingest");
    assert!(leaks(&out.stderr, &values).is_empty());
    assert!(leaks(&out.stdout, &values).is_empty());

    // every table, read back through SQL (decompressed Parquet and the memtable alike)
    let mut stored_rows = 0;
    for table in TABLES {
        let answer = cli_query(&data, &format!("SELECT * FROM {table}"));
        let text = answer.to_string();
        let found = leaks(text.as_bytes(), &values);
        assert!(found.is_empty(), "{table} leaks {found:?}");
        stored_rows += objects(&answer).len();
    }
    assert!(stored_rows > 4 * n, "only {stored_rows} rows stored");
    // raw bytes: the WAL and the template store (and every other file; Parquet pages are
    // compressed, which is why the tables were read through SQL above)
    let (scanned, found) = scan_files(&data, &[], &values);
    assert!(scanned > 0);
    assert!(found.is_empty(), "{found:#?}");

    // the rules did their work: authorization dropped, enduser.id hashed, model kept
    let spans = objects(&cli_query(&data, "SELECT attrs FROM spans"));
    assert_eq!(spans.len(), n);
    for span in &spans {
        let attrs: serde_json::Value =
            serde_json::from_str(span["attrs"].as_str().unwrap()).unwrap();
        assert!(
            attrs.get("http.request.header.authorization").is_none(),
            "{attrs}"
        );
        let enduser = attrs["enduser.id"].as_str().unwrap();
        assert!(
            enduser.starts_with("<EMAIL:h:") && enduser.len() == 26,
            "{enduser}"
        );
        assert!(
            attrs["user.phone"]
                .as_str()
                .unwrap()
                .starts_with("<PHONE:h:"),
            "{attrs}"
        );
    }
    let models = objects(&cli_query(&data, "SELECT DISTINCT model FROM requests"));
    assert_eq!(models.len(), 1);
    assert_eq!(models[0]["model"], "llama-3-8b");

    // joinable: the hash of request 5's user in span attrs is the one in its log bodies
    let span_hash = enduser_hash(&cli_query(
        &data,
        &format!("SELECT attrs FROM spans WHERE {REQUEST_5}"),
    ));
    let bodies = objects(&cli_query(
        &data,
        &format!("SELECT body FROM logs WHERE {REQUEST_5}"),
    ));
    assert!(!bodies.is_empty());
    let body_hashes: BTreeSet<String> = bodies
        .iter()
        .flat_map(|b| email_hashes(b["body"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(body_hashes, BTreeSet::from([span_hash.clone()]));

    // the audit: counts per path, rule, detector and action; never a value
    let audit = objects(&cli_query(&data, AUDIT_SQL));
    assert_audit(&audit, n);
    let buckets = objects(&cli_query(
        &data,
        "SELECT count(DISTINCT ts) AS buckets, min(ts) AS first FROM redactions",
    ));
    // 300 requests 250 ms apart: 75 s of data, two minute buckets
    assert_eq!(buckets[0]["buckets"], 2, "{buckets:?}");

    // 2. the server: OTLP/HTTP JSON into `infersight serve`, same seed, same secret
    let server_data = dir.path().join("data-server");
    let server = Server::start_with(
        &server_data,
        &std::fs::read_to_string(&config).unwrap(),
        &[("INFERSIGHT_LOG", "info"), (SECRET_ENV, SECRET)],
    );
    for (traces, logs) in traces.iter().zip(&logs) {
        let body = serde_json::to_vec(traces).unwrap();
        let (status, _, answer) = post(
            &format!("http://{}/v1/traces", server.http),
            "application/json",
            &body,
            false,
        );
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
        let body = serde_json::to_vec(logs).unwrap();
        let (status, _, answer) = post(
            &format!("http://{}/v1/logs", server.http),
            "application/json",
            &body,
            false,
        );
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    }
    // acknowledged appends are in the WAL (fsync = always) and not yet flushed: scan it
    let (wal_files, found) = scan_files(&server_data, &["/wal/"], &values);
    assert!(wal_files > 0, "no WAL file to scan");
    assert!(found.is_empty(), "{found:#?}");
    let (_, found) = scan_files(&server_data, &[], &values);
    assert!(found.is_empty(), "{found:#?}");
    // every table over the API
    for table in TABLES {
        let answer = server.sql(&format!("SELECT * FROM {table}"));
        let found = leaks(answer.to_string().as_bytes(), &values);
        assert!(found.is_empty(), "API {table} leaks {found:?}");
    }
    let audit = objects(&server.sql(AUDIT_SQL));
    assert_audit(&audit, n);
    // the same secret hashes the same user the same way in both stores
    let server_hash =
        enduser_hash(&server.sql(&format!("SELECT attrs FROM spans WHERE {REQUEST_5}")));
    assert_eq!(server_hash, span_hash);
    let stderr = server.stop();
    let found = leaks(stderr.as_bytes(), &values);
    assert!(found.is_empty(), "server stderr leaks {found:?}");
    // after shutdown (flushed to Parquet) nothing appeared either
    let (_, found) = scan_files(&server_data, &[], &values);
    assert!(found.is_empty(), "{found:#?}");
    for table in ["spans", "logs", "redactions"] {
        let answer = cli_query(&server_data, &format!("SELECT * FROM {table}"));
        assert!(leaks(answer.to_string().as_bytes(), &values).is_empty());
    }

    // 3. another secret: the same user hashes differently (not joinable across secrets)
    let other_data = dir.path().join("data-other");
    let out = Command::new(bin())
        .args(["ingest", "--quiet", "--config"])
        .arg(&config)
        .arg("--data")
        .arg(&other_data)
        .arg(dir.path().join("traces.jsonl"))
        .env_remove("INFERSIGHT_LOG")
        .env(SECRET_ENV, "another-secret-with-enough-bytes")
        .output()
        .unwrap();
    ok(&out, "ingest with another secret");
    let other_hash = enduser_hash(&cli_query(
        &other_data,
        &format!("SELECT attrs FROM spans WHERE {REQUEST_5}"),
    ));
    assert!(other_hash.starts_with("<EMAIL:h:"));
    assert_ne!(other_hash, span_hash);
}

/// One log line with `body`, at `TS` plus `n` seconds.
fn one_log(body: &str, n: u64) -> Vec<u8> {
    use prost::Message;
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![kv("service.name", s("gateway"))],
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                log_records: vec![LogRecord {
                    time_unix_nano: TS + n * 1_000_000_000,
                    body: Some(str_value(body)),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

/// The `surface: config` lines of the access audit.
fn config_audit(data: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(data.join("audit/access.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|line| line["surface"] == "config")
        .collect()
}

/// `serve` takes new redaction rules from its configuration file on SIGHUP: the next lines are
/// redacted by them; a broken file or a change that needs a restart is refused and the running
/// rules stay; each attempt is a line of the access audit.
#[test]
fn redaction_rules_reload_on_sighup_and_every_reload_is_audited() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let base = "[store]\nfsync = \"always\"\n";
    let server = Server::start(&data, base);
    let config = data.with_extension("toml");
    let line = "mail alice@example.com from 10.1.2.3";
    let send = |n: u64| {
        let (status, _, body) = server.post_otlp(
            "/v1/logs",
            "application/x-protobuf",
            &one_log(line, n),
            false,
        );
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    };
    let bodies = || -> Vec<String> {
        rows(&server.sql("SELECT body FROM logs ORDER BY ts"))
            .into_iter()
            .map(|row| row[0].1.as_str().unwrap_or_default().to_string())
            .collect()
    };
    let hangup_and_wait_for = |lines: usize| {
        let status = Command::new("kill")
            .args(["-HUP", &server.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while config_audit(&data).len() < lines {
            assert!(
                std::time::Instant::now() < deadline,
                "no reload recorded: {}",
                server.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    send(0);
    // addresses only, and one marker for every kind
    std::fs::write(
        &config,
        format!("{base}[stages.redact]\ndetectors = [\"ip\"]\nreplacement_style = \"redacted\"\n"),
    )
    .unwrap();
    hangup_and_wait_for(1);
    send(1);
    // a detector that does not exist, then a change that needs a restart: both refused
    std::fs::write(
        &config,
        format!("{base}[stages.redact]\ndetectors = [\"nope\"]\n"),
    )
    .unwrap();
    hangup_and_wait_for(2);
    std::fs::write(&config, format!("{base}[stages.redact]\nenabled = false\n")).unwrap();
    hangup_and_wait_for(3);
    send(2);
    assert_eq!(
        bodies(),
        [
            "mail <EMAIL> from <IP>",
            "mail alice@example.com from <REDACTED>",
            "mail alice@example.com from <REDACTED>",
        ]
    );
    let audit = config_audit(&data);
    let whats: Vec<&str> = audit.iter().map(|l| l["what"].as_str().unwrap()).collect();
    assert!(
        whats[0].starts_with("redaction rules reloaded: 0 path rules, 1 detectors"),
        "{whats:?}"
    );
    assert_eq!(audit[0]["outcome"], "ok");
    assert!(
        whats[1].contains("not reloaded") && whats[1].contains("nope"),
        "{whats:?}"
    );
    assert!(whats[2].contains("take effect at a restart"), "{whats:?}");
    assert!(
        audit[1..].iter().all(|l| l["outcome"] == "bad_request"),
        "{audit:?}"
    );
    server.stop();
}
