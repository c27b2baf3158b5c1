//! Tests of the `redact` stage: each detector with positives and negatives, the false positives
//! that would destroy telemetry, JSON handling, the stage over canonical batches, the counters,
//! and property tests (idempotence, no leaks, benign text untouched) with a fixed seed.

use std::borrow::Cow;

use infersight_model::{
    LogRecord, MetricRecord, RedactionRecord, RequestRecord, SpanRecord, Table, TableBatch,
    TokenRecord,
};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, RngSeed};

use super::detectors::{cn_id_check_char, luhn_ok, shannon_entropy};
use super::*;
use crate::stage::{Pipeline, Stage};

fn redactor() -> Redactor {
    Redactor::new(&RedactConfig::default()).unwrap()
}

fn only(detector: DetectorName) -> Redactor {
    Redactor::new(&RedactConfig {
        detectors: vec![detector],
        ..RedactConfig::default()
    })
    .unwrap()
}

#[track_caller]
fn assert_redacts(input: &str, expected: &str) {
    let r = redactor();
    assert_eq!(r.redact(input), expected, "input: {input:?}");
}

#[track_caller]
fn assert_unchanged(input: &str) {
    let r = redactor();
    let out = r.redact(input);
    assert!(
        matches!(out, Cow::Borrowed(_)) || out == input,
        "changed {input:?} into {out:?}"
    );
    assert_eq!(out, input);
}

/// Appends the MOD 11-2 check character to 17 digits.
fn cn_id(first17: &str) -> String {
    let check = cn_id_check_char(first17.as_bytes()).unwrap();
    format!("{first17}{}", check as char)
}

/// Appends the Luhn check digit to a card number prefix.
fn card(body: &str) -> String {
    let digits: Vec<u8> = body.bytes().map(|b| b - b'0').collect();
    (0..10u8)
        .map(|check| {
            let mut all = digits.clone();
            all.push(check);
            all
        })
        .find(|all| luhn_ok(all))
        .map(|all| all.iter().map(|d| (d + b'0') as char).collect())
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// detectors

#[test]
fn email() {
    assert_redacts(
        "contact alice.smith+llm@example.co.uk now",
        "contact <EMAIL> now",
    );
    assert_redacts("from:<bob@corp.example.com>", "from:<<EMAIL>>");
    assert_redacts("邮箱zhang_san@qq.com已验证", "邮箱<EMAIL>已验证");
    assert_unchanged("user@localhost failed");
    assert_unchanged("pip install vllm==0.5.2 torch@2.3");
    assert_unchanged("ssh into host@10");
}

#[test]
fn phone_e164() {
    assert_redacts("call +1 (415) 555-2671 asap", "call <PHONE> asap");
    assert_redacts("tel +44 20 7946 0958.", "tel <PHONE>.");
    assert_redacts("+49-30-1234567", "<PHONE>");
    assert_redacts("whatsapp:+14155552671", "whatsapp:<PHONE>");
    // a number after the phone is not swallowed into a too-long candidate
    assert_redacts("+1 415 555 2671 20261", "<PHONE> 20261");
    // too short, signs of deltas, exponents, timezone offsets
    assert_unchanged("retries +1, delta +12.5ms, +1234567");
    assert_unchanged("1e+10 and 2026-11-29T02:17:03+08:00");
}

#[test]
fn phone_cn_mobile() {
    assert_redacts("手机13812345678已注册", "手机<PHONE>已注册");
    assert_redacts("phone=138 1234 5678;", "phone=<PHONE>;");
    assert_redacts("tel: +86 138-1234-5678", "tel: <PHONE>");
    assert_redacts("8613812345678", "<PHONE>");
    // second digit outside 3-9, inside a longer number, fractional part, quantities
    assert_unchanged("12812345678 and 113812345678 and 0.13812345678");
    assert_unchanged("gpu_memory_bytes=17179869184 and 17179869184 bytes");
    assert_unchanged("epoch 1732846623123 ms");
}

#[test]
fn cn_resident_id() {
    let id = cn_id("11010519491231002");
    assert_eq!(id, "11010519491231002X");
    assert_redacts(&format!("id {id} ok"), "id <CN_ID> ok");
    assert_redacts(
        &format!("身份证号{}", cn_id("44030119900307123")),
        "身份证号<CN_ID>",
    );
    let lower = id.to_ascii_lowercase();
    assert_redacts(&format!("id={lower}"), "id=<CN_ID>");
    // a random 18-digit number failing the checksum is left alone
    let valid = cn_id("32010219880101234");
    let last = valid.as_bytes()[17];
    let wrong = if last == b'1' { '2' } else { '1' };
    let invalid = format!("{}{wrong}", &valid[..17]);
    assert_unchanged(&format!("seq {invalid} done"));
    assert_unchanged("nanos 1732846623123456789");
}

#[test]
fn payment_card() {
    assert_redacts("card 4111111111111111 charged", "card <CARD> charged");
    assert_redacts("cc=4111 1111 1111 1111", "cc=<CARD>");
    assert_redacts("amex 3782-822463-10005.", "amex <CARD>.");
    assert_redacts("mc 5555-5555-5555-4444, ok", "mc <CARD>, ok");
    assert_redacts(
        &format!("unionpay {}", card("621700000000000000")),
        "unionpay <CARD>",
    );
    assert_redacts("4111 1111 1111 1111 202", "<CARD> 202");
    // Luhn fails
    assert_unchanged("card 4111111111111112 declined");
    // epoch timestamps (ms, µs) start with 1 and are never cards, even when Luhn passes
    assert_unchanged(&format!("ts={}", card("173284662312")));
    assert_unchanged(&format!("ts={}", card("173284662312345")));
    // mixed separators, inside a float, inside a longer digit run
    assert_unchanged("4111 1111-1111 1111");
    assert_unchanged("0.4111111111111111 and 44111111111111111111");
    assert_unchanged("4111111111111111 bytes");
    // identifiers that end in digits: HDFS block ids, YARN containers, request ids
    assert_unchanged("blk_-6952295868487656571 blk_5165786360127153975 req-4111111111111111");
    assert_unchanged("container_1445144423722_0020_01_000012");
}

#[test]
fn ipv4() {
    assert_redacts("client 192.168.1.23 connected", "client <IP> connected");
    assert_redacts("peer=10.0.0.5:8000,", "peer=<IP>:8000,");
    assert_redacts("from 8.8.8.8.", "from <IP>.");
    assert_unchanged("bad 256.1.1.1 and 1.2.3 and 01.02.03.04");
    assert_unchanged("vllm v0.5.2 and cuda 12.1.0 and v1.2.3.4");
    assert_unchanged("1.2.3.4.5 is a long version");
    // loopback and unspecified addresses identify nobody and are in every server banner
    assert_unchanged("Uvicorn running on http://0.0.0.0:8000 and 127.0.0.1:9090");
}

#[test]
fn dotted_versions_are_not_addresses() {
    // issue 19 class 9: a vLLM version under `service.version` was stored as `<IP>`
    assert_unchanged("vLLM API server version 0.10.1.1");
    assert_unchanged("starting vllm 0.10.1.1 on cuda 12.8");
    assert_unchanged("service.version=1.2.3.4 build: 10.0.0.5 Version 4.3.2.1");
    assert_unchanged("user_agent=\"vllm/2.1.0.1 python-requests/2.31.0.3\"");
    let r = redactor();
    let json = r#"{"service.version":"0.10.1.1","vllm_version":"1.2.3.4","appVersion":"10.0.0.5"}"#;
    assert_eq!(r.redact_json(json), json);
    // the same numbers after any other word, key or path are addresses
    assert_redacts("from 10.0.0.5 version", "from <IP> version");
    assert_redacts("host=192.168.1.1:8080", "host=<IP>:8080");
    assert_redacts(
        "http://10.1.2.3/v1 and /data/log/10.1.2.4/x",
        "http://<IP>/v1 and /data/log/<IP>/x",
    );
    assert_eq!(
        r.redact_json(r#"{"client.address":"10.0.0.5","net.peer.ip":"1.2.3.4"}"#),
        r#"{"client.address":"<IP>","net.peer.ip":"<IP>"}"#
    );
}

/// Four-part versions and real addresses side by side (issue 19 class 9): the context decides,
/// never the number. Versions: after a version word or key, a runtime component, a package pin,
/// or among other components' versions (names in no list included); addresses: after words
/// that place a peer, with a port or a prefix length, or with nothing to say otherwise.
#[test]
fn four_part_versions_and_addresses_are_told_apart_by_context() {
    let versions = [
        "torch 2.1.0.1",
        "Using PyTorch 2.1.0.1 with CUDA 12.1.0.1",
        "vllm 0.10.1.1",
        "build 1.2.3.4",
        "release: 4.3.2.1",
        "engine v 1.2.3.4 started",
        "nccl 2.18.1.1+cuda12.1",
        "NVIDIA driver 10.20.30.40",
        "pip install acme-tokenizer==2.3.1.4",
        "libfoo 1.2.3.4, libbar 2.0.1",
        "deps: zlib 1.3.1, quuxlib 10.0.0.5",
        "python 3.10.12 and flashattn 2.5.8.1",
    ];
    for text in versions {
        assert_unchanged(text);
    }
    let r = redactor();
    for json in [
        r#"{"torch":"2.1.0.1"}"#,
        r#"{"nvidia.driver":"10.20.30.40"}"#,
        r#"{"engine.v":"1.2.3.4"}"#,
    ] {
        assert_eq!(r.redact_json(json), json);
    }
    let addresses = [
        ("from 10.1.2.3", "from <IP>"),
        ("peer=192.168.0.7:8080", "peer=<IP>:8080"),
        ("host 8.8.8.8", "host <IP>"),
        (
            "reached 10.20.30.40 after 3 retries",
            "reached <IP> after 3 retries",
        ),
        ("torch 10.1.2.3:29500", "torch <IP>:29500"),
        ("route 10.1.2.0/24", "route <IP>/24"),
        // a list of versions does not make the peer before it one
        (
            "from 10.1.2.3 with python 3.10.12",
            "from <IP> with python 3.10.12",
        ),
        (
            "client 10.1.2.3, torch 2.1.0.1",
            "client <IP>, torch 2.1.0.1",
        ),
        // two addresses are no list of versions
        ("a 10.1.2.3 b 10.1.2.4", "a <IP> b <IP>"),
        ("Using eth0:10.0.0.5<0>", "Using eth0:<IP><0>"),
    ];
    for (text, expected) in addresses {
        assert_redacts(text, expected);
    }
    assert_eq!(
        r.redact_json(r#"{"net.peer.ip":"2.1.0.1","torch.master":"10.1.2.3"}"#),
        r#"{"net.peer.ip":"<IP>","torch.master":"<IP>"}"#
    );
}

#[test]
fn ipv6() {
    assert_redacts(
        "addr 2001:0db8:85a3:0000:0000:8a2e:0370:7334 up",
        "addr <IP> up",
    );
    assert_redacts("addr 2001:db8::8a2e:370:7334 up", "addr <IP> up");
    assert_redacts("link fe80::1: down", "link <IP>: down");
    assert_redacts("http://[2001:db8::1]:8080/v1", "http://[<IP>]:8080/v1");
    assert_redacts("mapped ::ffff:192.168.1.1", "mapped <IP>");
    assert_unchanged("at 02:17:03 and std::io::Error and Vec::new and u8::MAX");
    assert_unchanged("x[::2] and a[1::3] and ::");
    assert_redacts("ip=::ffff:10.1.2.3;", "ip=<IP>;");
    assert_unchanged("mac 00:1a:2b:3c:4d:5e chip FF:F2:9F:16:E2:23:00:0D:60:E9:1D:DC");
    assert_unchanged("[::1]:8080 and QuorumPeer[myid=1]/0:0:0:0:0:0:0:0:2181");
}

#[test]
fn api_keys() {
    assert_redacts(
        "key sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t done",
        "key <API_KEY> done",
    );
    assert_redacts(
        "anthropic sk-ant-api03-AbCdEf1234567890AbCdEf1234",
        "anthropic <API_KEY>",
    );
    assert_redacts("aws AKIAIOSFODNN7EXAMPLE", "aws <API_KEY>");
    assert_redacts(
        "gh ghp_1234567890abcdefghijklmnopqrstuvwxyzAB",
        "gh <API_KEY>",
    );
    assert_redacts("gho_abcdefghijklmnopqrstuvwxyz0123456789", "<API_KEY>");
    assert_redacts("slack xoxb-123456789012-abcdefABCDEF", "slack <API_KEY>");
    assert_redacts("api_key=Zx8Qp2Lm7Rt4Vb9Nc3Kd", "api_key=<API_KEY>");
    assert_redacts("apikey: 'Zx8Qp2Lm7Rt4Vb9Nc3Kd'", "apikey: '<API_KEY>'");
    assert_redacts("token=9f86d081884c7d659a2feaa0c55ad015", "token=<TOKEN>");
    assert_redacts("password=hunter2!", "password=<API_KEY>");
    // low entropy, words, counts, ordinary dashed words
    assert_unchanged("token=aaaaaaaaaaaaaaaaaaaa and token=the_quick_brown_fox");
    assert_unchanged("max_tokens=4096 prompt_tokens: 512 tokens=128");
    assert_unchanged("Bad activity token: android.os.BinderProxy@2bd79ce");
    assert_unchanged("task-scheduler risk-assessment-module-2024 disk-usage");
    assert_unchanged("AKIA is a prefix, MYAKIAIOSFODNN7EXAMPLE is not a key");
}

#[test]
fn bearer_and_jwt() {
    let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
    assert_redacts(&format!("jwt {jwt} end"), "jwt <JWT> end");
    assert_redacts(
        &format!("Authorization: Bearer {jwt}"),
        "Authorization: Bearer <JWT>",
    );
    assert_redacts(
        "Authorization: Bearer abc123.def-456_ghi",
        "Authorization: Bearer <TOKEN>",
    );
    assert_redacts(
        "authorization=bearer Zm9vYmFyYmF6cXV4",
        "authorization=bearer <TOKEN>",
    );
    assert_unchanged("the bearer instrument is valid");
    assert_unchanged("eyJ alone and eyJhbGciOiJ.only");
}

#[test]
fn non_ascii_neighbours_and_combinations() {
    assert_redacts("é10.0.0.1é ñ4111111111111111ñ", "é<IP>é ñ<CARD>ñ");
    assert_redacts("用户alice@example.com来自10.1.2.3", "用户<EMAIL>来自<IP>");
    assert_redacts(
        "Authorization: Bearer sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t",
        "Authorization: Bearer <API_KEY>",
    );
    // a finding glued to another one is still found once the first is replaced
    assert_redacts("a@b.com4111111111111111", "<EMAIL><CARD>");
    let r = redactor();
    assert_eq!(
        r.redact_json(r#"{"api_keys":["k1","Zx8Qp2Lm7Rt4"],"cookie":"session=abcdef"}"#),
        r#"{"api_keys":["k1","Zx8Qp2Lm7Rt4"],"cookie":"<TOKEN>"}"#
    );
    assert_eq!(
        r.redact_json(r#"{"x_api_key":["Zx8Qp2Lm7Rt4", "ab"]}"#),
        r#"{"x_api_key":["<API_KEY>", "ab"]}"#
    );
}

#[test]
fn custom_patterns() {
    let config = RedactConfig {
        detectors: vec![],
        custom: vec![CustomPattern {
            name: "customer".into(),
            regex: r"CUST-[0-9]{6}".into(),
        }],
        ..RedactConfig::default()
    };
    let r = Redactor::new(&config).unwrap();
    assert_eq!(
        r.redact("order for CUST-123456 shipped"),
        "order for <CUSTOM:customer> shipped"
    );
    assert_eq!(r.hits()["custom"], 1);
    // a custom pattern matching our own placeholder text does not break idempotence
    let config = RedactConfig {
        custom: vec![CustomPattern {
            name: "upper".into(),
            regex: r"[A-Z]{4,}".into(),
        }],
        ..RedactConfig::default()
    };
    let r = Redactor::new(&config).unwrap();
    let once = r.redact("HELLO a@b.com").into_owned();
    assert_eq!(once, "<CUSTOM:upper> <EMAIL>");
    assert_eq!(r.redact(&once), once);
}

#[test]
fn replacement_style_redacted() {
    let r = Redactor::new(&RedactConfig {
        replacement_style: ReplacementStyle::Redacted,
        ..RedactConfig::default()
    })
    .unwrap();
    assert_eq!(r.redact("a@b.com 10.0.0.1"), "<REDACTED> <REDACTED>");
    assert_eq!(r.redact("<REDACTED> <REDACTED>"), "<REDACTED> <REDACTED>");
}

#[test]
fn only_enabled_detectors_run() {
    let r = only(DetectorName::Email);
    assert_eq!(r.redact("a@b.com 10.0.0.1"), "<EMAIL> 10.0.0.1");
    let disabled = Redactor::new(&RedactConfig {
        enabled: false,
        ..RedactConfig::default()
    })
    .unwrap();
    assert_eq!(disabled.redact("a@b.com"), "a@b.com");
    assert_eq!(
        disabled.redact_json(r#"{"password":"hunter22"}"#),
        r#"{"password":"hunter22"}"#
    );
}

#[test]
fn overlapping_findings_are_replaced_as_one() {
    // The generic `token=` rule and the vendor rule find the same value.
    assert_redacts("token=sk-Ab3dEf6hIj9kLm2nOp5qRs8t", "token=<API_KEY>");
    // A card number that is also a valid 18-character ID: one placeholder, the ID wins.
    let id = cn_id("41010519491231002");
    let out = redactor().redact(&id).into_owned();
    assert_eq!(out, "<CN_ID>");
}

// ---------------------------------------------------------------------------------------------
// things that must survive

#[test]
fn telemetry_survives_unchanged() {
    for text in [
        "2026-11-29 02:17:03 INFO engine started",
        "2026-11-29T02:17:03.123456789Z",
        "vllm 0.5.2 on cuda 12.1, torch 2.3.0+cu121",
        "took 12.5ms, ttft=0.25s, e2e 1m2.3s, decode 850us",
        "temperature=0.7 top_p=0.95 ratio 0.25",
        "trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7",
        "trace 12345678901234567890123456789012",
        "request 550e8400-e29b-41d4-a716-446655440000",
        "request 12345678-1234-4111-1111-111111111111",
        "input_tokens=512 output_tokens=1024 cached_tokens=256 batch_size=64",
        "Avg prompt throughput: 4113.6 tokens/s, Running: 12 reqs, GPU KV cache usage: 53.8%",
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "epoch 1732846623 1732846623123 1732846623123456 1732846623123456789",
        "port 8000 pid 41234 count 9999999",
        "model meta-llama/Llama-3.1-8B-Instruct lora=adapter-7 kv_cache_policy=lru",
        "",
    ] {
        assert_unchanged(text);
    }
}

#[test]
fn helper_checksums() {
    assert!(luhn_ok(&[4, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]));
    assert!(!luhn_ok(&[4, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2]));
    assert_eq!(cn_id_check_char(b"11010519491231002"), Some(b'X'));
    assert_eq!(cn_id_check_char(b"1101051949123100"), None);
    assert!(shannon_entropy("aaaa") < 0.01);
    assert!(shannon_entropy("Zx8Qp2Lm7Rt4Vb9Nc3Kd") > 4.0);
}

// ---------------------------------------------------------------------------------------------
// JSON

#[test]
fn json_values_are_redacted_and_keys_kept() {
    let r = redactor();
    let json = r#"{"user.email":"a@b.com","nested":{"ips":["10.0.0.1","ok"]},"n":13812345678,"alice@x.io":1}"#;
    assert_eq!(
        r.redact_json(json),
        r#"{"user.email":"<EMAIL>","nested":{"ips":["<IP>","ok"]},"n":13812345678,"alice@x.io":1}"#
    );
}

#[test]
fn json_secret_keys_and_quantity_keys() {
    let r = redactor();
    assert_eq!(
        r.redact_json(r#"{"password":"hunter2x","x-api-key":"abc","http.request.header.authorization":"Basic Zm9vOmJhcg==","max_tokens":"4096"}"#),
        r#"{"password":"<API_KEY>","x-api-key":"abc","http.request.header.authorization":"<TOKEN>","max_tokens":"4096"}"#
    );
    assert_eq!(
        r.redact_json(r#"{"gpu_memory_bytes":"17179869184","phone":"17179869184"}"#),
        r#"{"gpu_memory_bytes":"17179869184","phone":"<PHONE>"}"#
    );
    // the quantity hint covers a bare number only, not text under such a key
    assert_eq!(
        r.redact_json(r#"{"ms":"card 4111111111111111"}"#),
        r#"{"ms":"card <CARD>"}"#
    );
}

#[test]
fn json_escapes_and_layout() {
    let r = redactor();
    // an escaped `@` is still found; the rest of the document keeps its exact layout
    let json = "{ \"a\" : \"x\\u0040y.com \\\"q\\\"\",\n  \"b\": [1, 2.5, true, null] }";
    assert_eq!(
        r.redact_json(json),
        "{ \"a\" : \"<EMAIL> \\\"q\\\"\",\n  \"b\": [1, 2.5, true, null] }"
    );
    // untouched documents are returned borrowed
    assert!(matches!(
        r.redact_json(r#"{"model":"llama","n":3}"#),
        Cow::Borrowed(_)
    ));
    // not JSON: redacted as text
    assert_eq!(r.redact_json("{broken a@b.com"), "{broken <EMAIL>");
    // a top-level string
    assert_eq!(r.redact_json(r#""10.1.2.3""#), r#""<IP>""#);
}

#[test]
fn json_redaction_is_idempotent() {
    let r = redactor();
    let json = r#"{"authorization":"Bearer abc123def456","msg":"mail a@b.com from 10.0.0.1","password":"<API_KEY>"}"#;
    let once = r.redact_json(json).into_owned();
    assert_eq!(
        once,
        r#"{"authorization":"<TOKEN>","msg":"mail <EMAIL> from <IP>","password":"<API_KEY>"}"#
    );
    assert_eq!(r.redact_json(&once), once);
    assert!(serde_json::from_str::<serde_json::Value>(&once).is_ok());
}

// ---------------------------------------------------------------------------------------------
// counters

#[test]
fn hit_counters_count_replaced_spans() {
    let r = redactor();
    r.redact("a@b.com c@d.org 10.0.0.1 4111111111111111");
    r.redact("nothing here");
    let hits = r.hits();
    assert_eq!(hits["email"], 2);
    assert_eq!(hits["ip"], 1);
    assert_eq!(hits["card"], 1);
    assert_eq!(hits["phone"], 0);
    assert_eq!(hits["custom"], 0);
    assert_eq!(r.total_hits(), 4);
}

// ---------------------------------------------------------------------------------------------
// the stage

fn log(body: &str, attrs: &str) -> LogRecord {
    LogRecord {
        ts: 1,
        service: Some("gateway".into()),
        worker: Some("10.0.0.9:8000".into()),
        trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
        body: Some(body.into()),
        params: Some(r#"["alice@example.com","512"]"#.into()),
        attrs: attrs.into(),
        ..Default::default()
    }
}

#[test]
fn reloaded_rules_apply_from_the_next_batch_and_counters_carry_over() {
    let reload = std::sync::Arc::new(RedactReload::default());
    let mut stage = RedactStage::new(&RedactConfig::default())
        .unwrap()
        .reloaded_by(std::sync::Arc::clone(&reload));
    let body = |stage: &mut RedactStage| -> String {
        let batch = TableBatch {
            table: Table::Logs,
            batch: LogRecord::to_batch(&[log("mail alice@example.com from 10.1.2.3", "{}")]),
        };
        let mut out = Vec::new();
        stage.process(batch, &mut out).unwrap();
        LogRecord::from_batch(&out[0].batch).unwrap()[0]
            .body
            .clone()
            .unwrap_or_default()
    };
    assert_eq!(body(&mut stage), "mail <EMAIL> from <IP>");
    let emails_before = stage.stats()["hits_email"];
    // new rules: addresses only, written as [REDACTED]
    let ip_only = RedactConfig {
        detectors: vec![DetectorName::Ip],
        replacement_style: ReplacementStyle::Redacted,
        ..RedactConfig::default()
    };
    reload.replace(Redactor::new(&ip_only).unwrap());
    assert_eq!(reload.generation(), 1);
    let after = body(&mut stage);
    assert!(
        after.contains("alice@example.com") && !after.contains("10.1.2.3"),
        "{after}"
    );
    assert_eq!(
        stage.stats()["hits_email"],
        emails_before,
        "carried, not reset"
    );
    assert_eq!(stage.stats()["hits_ip"], 2);
    // nothing new: the rules stay
    assert_eq!(body(&mut stage), after);
}

#[test]
fn stage_redacts_a_logs_batch_and_keeps_the_schema() {
    let records = vec![
        log(
            "login ok for alice@example.com from 192.168.0.7",
            r#"{"client.address":"192.168.0.7"}"#,
        ),
        log("Avg prompt throughput: 12.5 tokens/s", "{}"),
        LogRecord {
            ts: 3,
            body: None,
            attrs: "{}".into(),
            ..Default::default()
        },
    ];
    let batch = TableBatch {
        table: Table::Logs,
        batch: LogRecord::to_batch(&records),
    };
    let schema = batch.batch.schema();
    let mut stage = RedactStage::new(&RedactConfig::default()).unwrap();
    let mut out = Vec::new();
    stage.process(batch, &mut out).unwrap();
    // the redacted batch, then its audit
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].table, Table::Logs);
    assert_eq!(out[1].table, Table::Redactions);
    let mut audit: Vec<(String, String, String, i64)> = RedactionRecord::from_batch(&out[1].batch)
        .unwrap()
        .into_iter()
        .map(|r| {
            assert_eq!(r.ts, 0, "minute bucket of ts 1 and 3");
            assert_eq!(r.rule.as_deref(), Some("default"));
            assert_eq!(r.action.as_deref(), Some("mask"));
            (
                r.path.unwrap(),
                r.detector.unwrap(),
                r.source_column.unwrap(),
                r.count.unwrap(),
            )
        })
        .collect();
    audit.sort();
    assert_eq!(
        audit,
        vec![
            (
                "logs.attrs.client.address".into(),
                "ip".into(),
                "attrs".into(),
                1
            ),
            ("logs.body".into(), "email".into(), "body".into(), 1),
            ("logs.body".into(), "ip".into(), "body".into(), 1),
            ("logs.params".into(), "email".into(), "params".into(), 2),
        ]
    );
    assert_eq!(out[0].batch.schema(), schema);
    let back = LogRecord::from_batch(&out[0].batch).unwrap();
    assert_eq!(
        back[0].body.as_deref(),
        Some("login ok for <EMAIL> from <IP>")
    );
    assert_eq!(back[0].attrs, r#"{"client.address":"<IP>"}"#);
    assert_eq!(back[0].params.as_deref(), Some(r#"["<EMAIL>","512"]"#));
    // identifier and label columns are untouched
    assert_eq!(back[0].worker.as_deref(), Some("10.0.0.9:8000"));
    assert_eq!(
        back[0].trace_id.as_deref(),
        Some("4bf92f3577b34da6a3ce929d0e0e4736")
    );
    assert_eq!(
        back[1].body.as_deref(),
        Some("Avg prompt throughput: 12.5 tokens/s")
    );
    // nulls stay null
    assert_eq!(back[2].body, None);
    assert_eq!(back[2].params, None);
    // rows 0 and 1 both had params with an email
    assert_eq!(stage.rows_redacted(), 2);
    let stats = stage.stats();
    assert_eq!(stats["rows_redacted"], 2);
    assert_eq!(stats["hits_email"], 3);
    assert_eq!(stats["hits_ip"], 2);
}

#[test]
fn stage_covers_spans_metrics_and_leaves_tokens_alone() {
    let spans = SpanRecord::to_batch(&[SpanRecord {
        ts: 1,
        name: Some("POST /users/bob@x.io".into()),
        status_message: Some("upstream 10.2.3.4 refused".into()),
        trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
        attrs: r#"{"http.request.header.authorization":"Bearer abcdef123456"}"#.into(),
        ..Default::default()
    }]);
    let metrics = MetricRecord::to_batch(&[MetricRecord {
        ts: 1,
        name: Some("ttft_seconds".into()),
        worker: Some("10.0.0.1".into()),
        labels: r#"{"client":"10.0.0.1","model":"llama"}"#.into(),
        ..Default::default()
    }]);
    let tokens = TokenRecord::to_batch(&[TokenRecord {
        ts: 1,
        request_id: Some("10.0.0.1".into()),
        ..Default::default()
    }]);
    let config = crate::StagesConfig {
        order: vec!["redact".into()],
        ..crate::StagesConfig::default()
    };
    let mut pipeline = Pipeline::from_config(&config).unwrap();
    let out = pipeline
        .run(vec![
            TableBatch {
                table: Table::Spans,
                batch: spans,
            },
            TableBatch {
                table: Table::Metrics,
                batch: metrics,
            },
            TableBatch {
                table: Table::Tokens,
                batch: tokens.clone(),
            },
        ])
        .unwrap();
    let tables: Vec<Table> = out.iter().map(|b| b.table).collect();
    assert_eq!(
        tables,
        [
            Table::Spans,
            Table::Redactions,
            Table::Metrics,
            Table::Redactions,
            Table::Tokens
        ]
    );
    let out: Vec<TableBatch> = out
        .into_iter()
        .filter(|b| b.table != Table::Redactions)
        .collect();
    let span = &SpanRecord::from_batch(&out[0].batch).unwrap()[0];
    assert_eq!(span.name.as_deref(), Some("POST /users/<EMAIL>"));
    assert_eq!(
        span.status_message.as_deref(),
        Some("upstream <IP> refused")
    );
    assert_eq!(
        span.attrs,
        r#"{"http.request.header.authorization":"<TOKEN>"}"#
    );
    let metric = &MetricRecord::from_batch(&out[1].batch).unwrap()[0];
    assert_eq!(metric.labels, r#"{"client":"<IP>","model":"llama"}"#);
    assert_eq!(metric.worker.as_deref(), Some("10.0.0.1"));
    assert_eq!(out[2].batch, tokens);
    let counters = pipeline.counters();
    assert_eq!(counters[0].0, "redact");
    assert_eq!(counters[0].1.received_rows, 3);
    // 3 rows and 4 audit rows (span name, status, attrs; metric labels)
    assert_eq!(counters[0].1.emitted_rows, 3 + 4);
    assert_eq!(counters[0].1.detail["audit_rows"], 4);
    assert_eq!(counters[0].1.failed_rows, 0);
    assert_eq!(counters[0].1.detail["rows_redacted"], 2);
    assert_eq!(counters[0].1.detail["hits_api_key"], 1);
}

#[test]
fn stage_rejects_a_non_utf8_redacted_column() {
    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;
    let schema = Arc::new(Schema::new(vec![Field::new("body", DataType::Int64, true)]));
    let batch = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![1]))]).unwrap();
    let mut stage = RedactStage::new(&RedactConfig::default()).unwrap();
    let mut out = Vec::new();
    let error = stage
        .process(
            TableBatch {
                table: Table::Logs,
                batch,
            },
            &mut out,
        )
        .unwrap_err();
    assert!(error.to_string().contains("expected utf8"), "{error}");
    assert!(out.is_empty());
}

#[test]
fn config_validation_reports_every_problem() {
    let config: RedactConfig = serde_json::from_str(
        r#"{"detectors": ["email", "email"],
            "custom": [{"name": "a b", "regex": "("}, {"name": "x", "regex": "a*"},
                       {"name": "x", "regex": "b"}],
            "replacement_style": "placeholder"}"#,
    )
    .unwrap();
    let problems = config.validate();
    assert_eq!(problems.len(), 5, "{problems:?}");
    assert!(problems[0].contains("listed twice"));
    assert!(problems.iter().any(|p| p.starts_with("custom[0].name")));
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("custom[0].regex: invalid regex"))
    );
    assert!(problems.iter().any(|p| p.contains("empty string")));
    assert!(problems.iter().any(|p| p.contains("`x` is used twice")));
    let error = Redactor::new(&config).unwrap_err();
    assert_eq!(error.kind(), infersight_model::ErrorKind::BadRequest);
    // unknown fields and detectors are rejected by serde
    assert!(serde_json::from_str::<RedactConfig>(r#"{"detector": []}"#).is_err());
    assert!(serde_json::from_str::<RedactConfig>(r#"{"detectors": ["ssn"]}"#).is_err());
    // defaults
    let config: RedactConfig = serde_json::from_str("{}").unwrap();
    assert!(config.enabled);
    assert_eq!(config.detectors, DetectorName::ALL.to_vec());
    assert!(config.validate().is_empty());
    let nothing = RedactConfig {
        detectors: vec![],
        ..RedactConfig::default()
    };
    assert_eq!(nothing.validate().len(), 1);
}

// ---------------------------------------------------------------------------------------------
// volume (not timed: checks correctness over many typical lines)

#[test]
fn ten_thousand_typical_log_lines() {
    let r = redactor();
    let mut redacted_lines = 0;
    for i in 0..10_000u64 {
        let benign = format!(
            "2026-11-29 02:17:{:02} INFO engine.py:{} Avg prompt throughput: {}.{} tokens/s, \
             Running: {} reqs, GPU KV cache usage: {}.{}%, trace_id={:032x}",
            i % 60,
            100 + i % 400,
            i % 5000,
            i % 10,
            i % 64,
            i % 100,
            i % 10,
            u128::from(i) * 0x9e37_79b9_7f4a_7c15
        );
        assert_eq!(r.redact(&benign), benign);
        if i % 10 == 0 {
            let line = format!(
                "user{i}@example.com from 10.{}.{}.{} key sk-Ab3dEf6hIj9kLm2nOp{i:06}",
                i % 256,
                (i / 256) % 256,
                i % 200 + 1
            );
            let out = r.redact(&line);
            assert_eq!(out, "<EMAIL> from <IP> key <API_KEY>", "{line}");
            redacted_lines += 1;
        }
    }
    assert_eq!(redacted_lines, 1000);
    assert_eq!(r.hits()["email"], 1000);
    assert_eq!(r.hits()["ip"], 1000);
    assert_eq!(r.hits()["api_key"], 1000);
}

// ---------------------------------------------------------------------------------------------
// properties (fixed seed: deterministic in CI)

/// One compiled redactor for all property cases (compiling per case dominates debug test time).
fn shared() -> &'static Redactor {
    static SHARED: std::sync::OnceLock<Redactor> = std::sync::OnceLock::new();
    SHARED.get_or_init(redactor)
}

fn proptest_config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        rng_seed: RngSeed::Fixed(0x1f5e_c0de),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Words of 4-8 letters around a finding: "embedded in random text".
fn filler() -> impl Strategy<Value = String> {
    proptest::collection::vec("[a-z]{4,8}", 0..4).prop_map(|words| words.join(" "))
}

fn embed(prefix: &str, pii: &str, suffix: &str) -> String {
    format!("{prefix} {pii} {suffix}")
}

fn email_strategy() -> impl Strategy<Value = String> {
    (
        "[a-z][a-z0-9._]{0,10}",
        "[a-z]{2,10}",
        prop::sample::select(vec!["com", "org", "io", "cn"]),
    )
        .prop_map(|(local, domain, tld)| format!("{local}@{domain}.{tld}"))
}

fn card_strategy() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec![
            ("4", 16),
            ("4", 13),
            ("51", 16),
            ("55", 16),
            ("34", 15),
            ("37", 15),
            ("6011", 16),
            ("62", 19),
        ]),
        prop::collection::vec(0u8..10, 19),
        prop::sample::select(vec!["", " ", "-"]),
    )
        .prop_map(|((prefix, len), digits, separator)| {
            let mut body = prefix.to_string();
            body.extend(
                digits
                    .iter()
                    .take(len - 1 - prefix.len())
                    .map(|d| (d + b'0') as char),
            );
            let number = card(&body);
            if separator.is_empty() || len != 16 {
                number
            } else {
                number
                    .as_bytes()
                    .chunks(4)
                    .map(|c| std::str::from_utf8(c).unwrap())
                    .collect::<Vec<_>>()
                    .join(separator)
            }
        })
}

fn cn_id_strategy() -> impl Strategy<Value = String> {
    (1u8..10, prop::collection::vec(0u8..10, 16)).prop_map(|(first, rest)| {
        let mut first17 = String::from((first + b'0') as char);
        first17.extend(rest.iter().map(|d| (d + b'0') as char));
        cn_id(&first17)
    })
}

fn ipv4_strategy() -> impl Strategy<Value = String> {
    // Loopback and "this network" (0.0.0.0/8, which versions like 0.10.1.1 look like) are not.
    prop::array::uniform4(0u8..=255)
        .prop_filter("not loopback or this network", |[a, ..]| {
            *a != 127 && *a != 0
        })
        .prop_map(|[a, b, c, d]| format!("{a}.{b}.{c}.{d}"))
}

fn any_pii() -> impl Strategy<Value = String> {
    prop_oneof![
        email_strategy(),
        card_strategy(),
        cn_id_strategy(),
        ipv4_strategy()
    ]
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn redaction_is_idempotent(text in "[ -~]{0,80}", pii in any_pii(), position in 0usize..80) {
        let r = shared();
        let cut = text.char_indices().map(|(i, _)| i).chain([text.len()]).nth(position).unwrap_or(text.len());
        let mixed = format!("{}{pii}{}", &text[..cut], &text[cut..]);
        for input in [text.as_str(), mixed.as_str()] {
            let once = r.redact(input).into_owned();
            prop_assert_eq!(r.redact(&once), once.as_str());
        }
    }

    #[test]
    fn redaction_is_idempotent_on_digit_soup(text in "[0-9a-fA-FX .:@+()\\-_=<>/\\[\\]]{0,60}") {
        let r = shared();
        let once = r.redact(&text).into_owned();
        prop_assert_eq!(r.redact(&once), once.as_str());
    }

    #[test]
    fn emails_never_leak(prefix in filler(), email in email_strategy(), suffix in filler()) {
        let out = shared().redact(&embed(&prefix, &email, &suffix)).into_owned();
        prop_assert!(!out.contains(&email), "{} leaked in {}", email, out);
        prop_assert!(out.contains("<EMAIL>"));
    }

    #[test]
    fn cards_never_leak(prefix in filler(), number in card_strategy(), suffix in filler()) {
        let out = shared().redact(&embed(&prefix, &number, &suffix)).into_owned();
        prop_assert!(!out.contains(&number), "{} leaked in {}", number, out);
        prop_assert!(out.contains("<CARD>") || out.contains("<CN_ID>") || out.contains("<PHONE>"), "{}", out);
    }

    #[test]
    fn cn_ids_never_leak(prefix in filler(), id in cn_id_strategy(), suffix in filler()) {
        let out = shared().redact(&embed(&prefix, &id, &suffix)).into_owned();
        prop_assert!(!out.contains(&id), "{} leaked in {}", id, out);
        prop_assert!(out.contains("<CN_ID>"), "{}", out);
    }

    #[test]
    fn ipv4_never_leaks(prefix in filler(), ip in ipv4_strategy(), suffix in filler()) {
        let out = shared().redact(&embed(&prefix, &ip, &suffix)).into_owned();
        prop_assert!(!out.contains(&ip), "{} leaked in {}", ip, out);
        prop_assert!(out.contains("<IP>"));
    }

    #[test]
    fn pii_in_json_values_never_leaks(key in "[a-z_]{1,12}", pii in any_pii()) {
        let json = serde_json::json!({ key.clone(): format!("value {pii} end"), "n": 1 }).to_string();
        let out = shared().redact_json(&json).into_owned();
        prop_assert!(!out.contains(&pii), "{} leaked in {}", pii, out);
        prop_assert!(serde_json::from_str::<serde_json::Value>(&out).is_ok());
    }

    #[test]
    fn benign_text_is_unchanged(text in "[a-z ]+") {
        prop_assert_eq!(shared().redact(&text), text.as_str());
    }
}

// ---------------------------------------------------------------------------------------------
// versions and addresses (issue 19 class 9): the IP detector reads the context

/// Keys that name a version, in the spellings of several conventions (dotted, snake, kebab,
/// camel, upper case).
fn version_key_strategy() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec![
            "",
            "service.",
            "vllm_",
            "app.",
            "sdk-",
            "k8s.container.",
            "telemetry.sdk.",
            "git.",
            "image.",
            "engine_",
            "x.",
        ]),
        prop::sample::select(vec![
            "version", "Version", "VERSION", "ver", "build", "revision", "rev", "release",
        ]),
    )
        .prop_map(|(prefix, segment)| {
            if prefix.is_empty() || segment != "Version" {
                format!("{prefix}{segment}")
            } else {
                // camel case: appVersion, serviceVersion
                format!("{}Version", prefix.trim_end_matches(['.', '_', '-']))
            }
        })
}

/// Four dotted numbers of 0-255: versions and addresses look alike.
fn dotted_strategy() -> impl Strategy<Value = String> {
    (prop::array::uniform4(0u8..=255), 0u8..4).prop_map(|(octets, style)| match style {
        // small numbers, like most versions
        0 => format!(
            "{}.{}.{}.{}",
            octets[0] % 3,
            octets[1] % 20,
            octets[2] % 10,
            octets[3] % 5
        ),
        _ => format!("{}.{}.{}.{}", octets[0], octets[1], octets[2], octets[3]),
    })
}

/// Keys of addresses (OTel and others) and arbitrary keys that do not name a version.
fn address_key_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "client.address",
            "server.address",
            "net.peer.ip",
            "net.sock.peer.addr",
            "network.peer.address",
            "source.address",
            "host.ip",
            "peer",
            "remote_addr",
            "ip",
            "x-forwarded-for",
            "upstream",
        ])
        .prop_map(str::to_string),
        "[a-z][a-z_.]{0,12}".prop_filter("not a version or secret key", |key| {
            !detectors::is_version_key(key) && redactor::secret_key_label(key).is_none()
        }),
    ]
}

/// Free-text contexts of an address: a word other than a version word, a key, a URL.
fn address_text_strategy() -> impl Strategy<Value = (String, String)> {
    (
        prop::sample::select(vec![
            "from {}",
            "host={}:8080",
            "peer {} closed",
            "connect to {} failed",
            "addr: {}",
            "http://{}/v1/chat",
            "client=\"{}\"",
            "[{}]",
            "forwarded for {}, {}",
        ]),
        "[a-z]{4,8}".prop_filter("not a version word", |w| !detectors::is_version_key(w)),
        ipv4_strategy(),
    )
        .prop_map(|(shape, word, ip)| {
            let text = shape.replace("{}", &ip);
            (format!("{word} {text}"), ip)
        })
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn versions_under_version_keys_are_kept_everywhere(
        key in version_key_strategy(),
        version in dotted_strategy(),
    ) {
        let r = shared();
        let json = serde_json::json!({ key.clone(): version.clone() }).to_string();
        prop_assert_eq!(r.redact_json(&json), json.as_str());
        for text in [
            format!("{key}={version}"),
            format!("{key}: {version}"),
            format!("\"{key}\": \"{version}\""),
            format!("starting engine {key} {version}"),
            format!("ua=\"engine/{version} python/3.12\""),
        ] {
            prop_assert_eq!(r.redact(&text), text.as_str());
        }
    }

    #[test]
    fn addresses_under_other_keys_and_words_never_leak(
        key in address_key_strategy(),
        ip in ipv4_strategy(),
        (text, text_ip) in address_text_strategy(),
    ) {
        let r = shared();
        let json = serde_json::json!({ key.clone(): ip.clone() }).to_string();
        let out = r.redact_json(&json).into_owned();
        prop_assert!(!out.contains(&ip), "{} leaked in {}", ip, out);
        for input in [text.clone(), format!("{key}={ip}")] {
            let out = r.redact(&input).into_owned();
            prop_assert!(!out.contains(&text_ip) && !out.contains(&ip), "leaked in {}", out);
            prop_assert!(out.contains("<IP>"), "nothing redacted in {}", out);
        }
    }

    /// The stage (bodies, attrs and params of logs; attrs of requests) agrees with the redactor:
    /// one version and one address per row, wherever they are written.
    #[test]
    fn the_stage_keeps_versions_and_redacts_addresses_in_every_column(
        key in version_key_strategy(),
        version in dotted_strategy(),
        address_key in address_key_strategy(),
        ip in ipv4_strategy(),
    ) {
        let attrs = serde_json::json!({ key.clone(): version.clone(), address_key.clone(): ip.clone() })
            .to_string();
        let mut record = log(&format!("{key}={version} request from {ip}"), &attrs);
        record.params = Some(attrs.clone());
        let batch = TableBatch { table: Table::Logs, batch: LogRecord::to_batch(&[record]) };
        let mut stage = RedactStage::new(&RedactConfig::default()).unwrap();
        let (out, _) = run_stage(&mut stage, batch);
        let row = LogRecord::from_batch(&out.batch).unwrap().remove(0);
        for column in [row.body.unwrap(), row.attrs, row.params.unwrap()] {
            prop_assert!(column.contains(&version), "{} lost in {}", version, column);
            prop_assert!(!column.contains(&ip) || version.contains(&ip), "{} leaked in {}", ip, column);
            prop_assert!(column.contains("<IP>"), "{}", column);
        }
        let request = RequestRecord { ts: 1, attrs: attrs.clone(), ..Default::default() };
        let batch = TableBatch { table: Table::Requests, batch: RequestRecord::to_batch(&[request]) };
        let (out, _) = run_stage(&mut stage, batch);
        let row = RequestRecord::from_batch(&out.batch).unwrap().remove(0);
        prop_assert!(row.attrs.contains(&version) && row.attrs.contains("<IP>"), "{}", row.attrs);
    }
}

// ---------------------------------------------------------------------------------------------
// path rules, keyed hashes, the audit

const SECRET: &[u8] = b"test-secret-0123456789abcdef";

fn ruled(rules: &str) -> RedactConfig {
    serde_json::from_str(&format!(
        r#"{{"secret_env": "INFERSIGHT_TEST_NEVER_SET_7f3a", "rules": {rules}}}"#
    ))
    .unwrap()
}

fn stage_with(config: &RedactConfig, secret: &[u8]) -> RedactStage {
    RedactStage::from_redactor(Redactor::with_secret(config, Some(secret)).unwrap())
}

/// The expected hash placeholder, computed independently of the redactor.
fn hmac_placeholder(name: &str, value: &str, secret: &[u8]) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(secret).unwrap();
    mac.update(value.as_bytes());
    let digest = mac.finalize().into_bytes();
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("<{name}:h:{hex}>")
}

fn run_stage(stage: &mut RedactStage, batch: TableBatch) -> (TableBatch, Vec<RedactionRecord>) {
    let mut out = Vec::new();
    stage.process(batch, &mut out).unwrap();
    let audit = out
        .iter()
        .filter(|b| b.table == Table::Redactions)
        .flat_map(|b| RedactionRecord::from_batch(&b.batch).unwrap())
        .collect();
    (out.swap_remove(0), audit)
}

fn audit_summary(audit: &[RedactionRecord]) -> Vec<String> {
    let mut rows: Vec<String> = audit
        .iter()
        .map(|r| {
            format!(
                "{} {} {} {} {}",
                r.path.as_deref().unwrap(),
                r.rule.as_deref().unwrap(),
                r.detector.as_deref().unwrap_or("-"),
                r.action.as_deref().unwrap(),
                r.count.unwrap()
            )
        })
        .collect();
    rows.sort();
    rows
}

const RULES: &str = r#"[
    {"path": "requests.attrs.enduser.id", "action": "hash"},
    {"path": "spans.attrs.http.request.header.authorization", "action": "drop"},
    {"path": "*.attrs.user.*", "action": "hash", "detectors": ["email"]},
    {"path": "requests.attrs.gen_ai.request.model", "action": "keep"},
    {"path": "logs.body", "action": "hash", "detectors": ["email", "phone"]},
    {"path": "logs.params", "action": "drop"},
    {"path": "metrics.labels", "action": "drop"},
    {"path": "templates.template", "action": "keep"}
]"#;

#[test]
fn attribute_rules_hash_keep_and_default_mask() {
    let config = ruled(RULES);
    let mut stage = stage_with(&config, SECRET);
    let attrs = r#"{"enduser.id":"u-42","gen_ai.request.model":"gpt-4o a@b.com","user":{"email":"a@b.com","note":"call 10.0.0.1"},"other":"x@y.com","n":7}"#;
    let nested = r#"{"enduser":{"id":"u-42"}}"#;
    let batch = RequestRecord::to_batch(&[
        RequestRecord {
            ts: 61_000_000_000,
            attrs: attrs.into(),
            error_type: Some("quota for x@y.com".into()),
            ..Default::default()
        },
        RequestRecord {
            ts: 62_000_000_000,
            attrs: nested.into(),
            ..Default::default()
        },
    ]);
    let (out, audit) = run_stage(
        &mut stage,
        TableBatch {
            table: Table::Requests,
            batch,
        },
    );
    let back = RequestRecord::from_batch(&out.batch).unwrap();
    let user = hmac_placeholder("VALUE", "u-42", SECRET);
    let email = hmac_placeholder("EMAIL", "a@b.com", SECRET);
    let note = hmac_placeholder("VALUE", "call 10.0.0.1", SECRET);
    assert_eq!(
        back[0].attrs,
        format!(
            r#"{{"enduser.id":"{user}","gen_ai.request.model":"gpt-4o a@b.com","user":{{"email":"{email}","note":"{note}"}},"other":"<EMAIL>","n":7}}"#
        )
    );
    // flat and nested keys are the same path, and hash to the same value
    assert_eq!(back[1].attrs, format!(r#"{{"enduser":{{"id":"{user}"}}}}"#));
    // columns without a rule keep the defaults
    assert_eq!(back[0].error_type.as_deref(), Some("quota for <EMAIL>"));
    assert!(audit.iter().all(|r| r.ts == 60_000_000_000), "{audit:?}");
    assert_eq!(
        audit_summary(&audit),
        vec![
            "requests.attrs.enduser.id requests.attrs.enduser.id - hash 2",
            "requests.attrs.other default email mask 1",
            "requests.attrs.user.email *.attrs.user.* email hash 1",
            "requests.attrs.user.note *.attrs.user.* - hash 1",
            "requests.error_type default email mask 1",
        ]
    );
    // redacting the output again changes nothing and records nothing
    let again = RequestRecord::to_batch(&back);
    let (twice, audit) = run_stage(
        &mut stage,
        TableBatch {
            table: Table::Requests,
            batch: again.clone(),
        },
    );
    assert_eq!(twice.batch, again);
    assert!(audit.is_empty(), "{audit:?}");
}

#[test]
fn drop_rules_remove_members_and_columns() {
    let config = ruled(RULES);
    let mut stage = stage_with(&config, SECRET);
    let cases = [
        (
            r#"{"http.request.header.authorization":"Bearer abcdef123456","http.method":"GET"}"#,
            r#"{"http.method":"GET"}"#,
        ),
        (
            r#"{"a": "1", "http.request.header.authorization": {"x": [1, 2]}}"#,
            r#"{"a": "1"}"#,
        ),
        (
            r#"{"http": {"request.header.authorization": "x"}, "b": true}"#,
            r#"{"http": {}, "b": true}"#,
        ),
        (
            r#"{"a":1,"http.request.header.authorization":"x","http.request.header.authorization":"y","c":[]}"#,
            r#"{"a":1,"c":[]}"#,
        ),
    ];
    for (input, expected) in cases {
        let batch = SpanRecord::to_batch(&[SpanRecord {
            ts: 1,
            attrs: input.into(),
            ..Default::default()
        }]);
        let (out, audit) = run_stage(
            &mut stage,
            TableBatch {
                table: Table::Spans,
                batch,
            },
        );
        let span = &SpanRecord::from_batch(&out.batch).unwrap()[0];
        assert_eq!(span.attrs, expected, "{input}");
        assert!(serde_json::from_str::<serde_json::Value>(&span.attrs).is_ok());
        assert!(audit.iter().all(|r| r.action.as_deref() == Some("drop")
            && r.detector.is_none()
            && r.path.as_deref() == Some("spans.attrs.http.request.header.authorization")));
    }
    // whole columns: nullable ones become null, `labels` (non-null JSON) becomes `{}`
    let logs = LogRecord::to_batch(&[log("mail a@b.com or +14155552671 from 10.0.0.1", "{}")]);
    let (out, audit) = run_stage(
        &mut stage,
        TableBatch {
            table: Table::Logs,
            batch: logs,
        },
    );
    let back = &LogRecord::from_batch(&out.batch).unwrap()[0];
    assert_eq!(back.params, None);
    // the rule's detectors run, the others do not (the IP stays)
    assert_eq!(
        back.body.as_deref().unwrap(),
        format!(
            "mail {} or {} from 10.0.0.1",
            hmac_placeholder("EMAIL", "a@b.com", SECRET),
            hmac_placeholder("PHONE", "+14155552671", SECRET)
        )
    );
    assert_eq!(
        audit_summary(&audit),
        vec![
            "logs.body logs.body email hash 1",
            "logs.body logs.body phone hash 1",
            "logs.params logs.params - drop 1",
        ]
    );
    let metrics = MetricRecord::to_batch(&[MetricRecord {
        ts: 1,
        labels: r#"{"client":"10.0.0.1"}"#.into(),
        ..Default::default()
    }]);
    let (out, _) = run_stage(
        &mut stage,
        TableBatch {
            table: Table::Metrics,
            batch: metrics,
        },
    );
    assert_eq!(
        MetricRecord::from_batch(&out.batch).unwrap()[0].labels,
        "{}"
    );
    assert!(stage.stats()["values_dropped"] >= 7);
}

#[test]
fn keep_rules_run_no_detector_and_rules_are_first_match() {
    let config = ruled(
        r#"[{"path": "logs.attrs.user.password", "action": "drop"},
            {"path": "logs.attrs.user", "action": "keep"},
            {"path": "templates.template", "action": "keep"}]"#,
    );
    let r = Redactor::with_secret(&config, None).unwrap();
    let rules = r.column_rules("logs", "attrs");
    let json = r#"{"user":{"password":"hunter2x","mail":"a@b.com"},"mail":"a@b.com"}"#;
    let mut events = Vec::new();
    let out = r.redact_field(json, true, &rules, &mut |e| {
        events.push((e.key_path.map(str::to_string), e.action));
    });
    assert_eq!(
        out,
        redactor::FieldOutcome::Value(Cow::Owned(
            r#"{"user":{"mail":"a@b.com"},"mail":"<EMAIL>"}"#.into()
        ))
    );
    assert_eq!(
        events,
        vec![
            (Some("user.password".into()), RedactAction::Drop),
            (Some("mail".into()), RedactAction::Mask)
        ]
    );
    let rules = r.column_rules("templates", "template");
    assert_eq!(
        r.redact_field("to <*> a@b.com", false, &rules, &mut |_| {}),
        redactor::FieldOutcome::Value(Cow::Borrowed("to <*> a@b.com"))
    );
    // no hash rule: no secret needed, and `keyed_hash` has nothing to key
    assert_eq!(r.keyed_hash("x"), None);
}

#[test]
fn keyed_hash_is_stable_per_secret_and_differs_across_secrets() {
    let config = ruled(r#"[{"path": "*.attrs.enduser.id", "action": "hash"}]"#);
    let a = Redactor::with_secret(&config, Some(SECRET)).unwrap();
    let b = Redactor::with_secret(&config, Some(SECRET)).unwrap();
    let c = Redactor::with_secret(&config, Some(b"another-secret-0123456789")).unwrap();
    let value = "alice@example.com";
    let ha = a.keyed_hash(value).unwrap();
    assert_eq!(ha.len(), HASH_HEX_LEN);
    assert!(
        ha.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );
    assert_eq!(Some(ha.clone()), b.keyed_hash(value));
    assert_ne!(Some(ha.clone()), c.keyed_hash(value));
    assert_ne!(Some(ha), a.keyed_hash("alice@example.org"));
    let rules = a.column_rules("requests", "attrs");
    let json = r#"{"enduser.id":"alice@example.com"}"#;
    let once = match a.redact_field(json, true, &rules, &mut |_| {}) {
        redactor::FieldOutcome::Value(v) => v.into_owned(),
        redactor::FieldOutcome::Dropped => unreachable!(),
    };
    assert_eq!(
        once,
        format!(
            r#"{{"enduser.id":"{}"}}"#,
            hmac_placeholder("EMAIL", value, SECRET)
        )
    );
    // placeholders (hashed or not) are never hashed again
    assert_eq!(
        a.redact_field(&once, true, &rules, &mut |_| {}),
        redactor::FieldOutcome::Value(Cow::Borrowed(once.as_str()))
    );
    assert_eq!(a.redact(&once), once);
    // a short secret is refused, and so is a hash rule without one
    assert!(Redactor::with_secret(&config, Some(b"short")).is_err());
    assert!(Redactor::with_secret(&config, None).is_err());
}

#[test]
fn rule_validation_reports_every_problem() {
    let config: RedactConfig = serde_json::from_str(
        r#"{"rules": [
            {"path": "requests.model", "action": "keep"},
            {"path": "nope.attrs", "action": "mask"},
            {"path": "logs", "action": "mask"},
            {"path": "logs.attrs.x", "action": "drop", "detectors": ["email"]},
            {"path": "logs.attrs.y", "action": "mask", "detectors": []},
            {"path": "logs.attrs.z", "action": "hash", "detectors": ["ssn"]},
            {"path": "logs.attrs.x", "action": "keep"},
            {"path": "*.nope", "action": "keep"}
        ]}"#,
    )
    .unwrap();
    let problems = config.validate();
    let expect = [
        "rules[0].path: `requests.model`: column `model` of `requests` is not redacted",
        "rules[1].path: `nope.attrs`: table `nope` has no redacted columns",
        "rules[2].path: `logs` must be TABLE.COLUMN",
        "rules[3].detectors: only `mask` and `hash` rules run detectors",
        "rules[4].detectors: must not be empty",
        "rules[5].detectors: unknown detector `ssn`",
        "rules[6].path: `logs.attrs.x` is listed twice",
        "rules[7].path: `*.nope`: no table has a redacted column `nope`",
        "secret_env: `hash` rules need a secret",
    ];
    for expected in expect {
        assert!(
            problems.iter().any(|p| p.starts_with(expected)),
            "missing {expected:?} in {problems:#?}"
        );
    }
    assert_eq!(problems.len(), expect.len(), "{problems:#?}");
    // an unknown action is a serde error
    assert!(
        serde_json::from_str::<RedactConfig>(
            r#"{"rules": [{"path": "logs.body", "action": "x"}]}"#
        )
        .is_err()
    );
    // the named variable must be set: the message names it, never a value
    let config = ruled(r#"[{"path": "logs.body", "action": "hash"}]"#);
    let problems = config.validate();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with(
            "secret_env: environment variable `INFERSIGHT_TEST_NEVER_SET_7f3a` is not set"
        ),
        "{problems:?}"
    );
    let error = Redactor::new(&config).unwrap_err().to_string();
    assert!(error.contains("INFERSIGHT_TEST_NEVER_SET_7f3a"), "{error}");
    // custom pattern names are valid detector names for rules
    let config: RedactConfig = serde_json::from_str(
        r#"{"custom": [{"name": "tenant_key", "regex": "tk_[0-9a-f]{8}"}],
            "rules": [{"path": "logs.body", "action": "mask", "detectors": ["tenant_key"]}]}"#,
    )
    .unwrap();
    assert!(config.validate().is_empty());
    let r = Redactor::new(&config).unwrap();
    let rules = r.column_rules("logs", "body");
    assert_eq!(
        r.redact_field("tk_0a1b2c3d a@b.com", false, &rules, &mut |_| {}),
        redactor::FieldOutcome::Value(Cow::Owned("<CUSTOM:tenant_key> a@b.com".into()))
    );
}

#[test]
fn path_globs() {
    use super::config::{PathPattern, glob_match};
    assert!(glob_match(b"user.*", b"user.email"));
    assert!(glob_match(b"*", b""));
    assert!(glob_match(b"a?c*", b"abcdef"));
    assert!(!glob_match(b"user.*", b"username"));
    assert!(!glob_match(b"a*b", b"aXXc"));
    let pattern = PathPattern::parse("*.attrs.user.*").unwrap();
    assert!(pattern.covers_column("spans", "attrs"));
    assert!(!pattern.covers_column("logs", "body"));
    assert!(pattern.matches_key(Some("user.email")));
    assert!(pattern.matches_key(Some("user.address.city")));
    assert!(!pattern.matches_key(Some("user")));
    assert!(!pattern.matches_key(None));
    let subtree = PathPattern::parse("requests.attrs.enduser").unwrap();
    assert!(subtree.matches_key(Some("enduser")));
    assert!(subtree.matches_key(Some("enduser.id")));
    assert!(!subtree.matches_key(Some("enduser_id")));
    let column = PathPattern::parse("logs.body").unwrap();
    assert!(column.matches_key(None) && column.matches_key(Some("x")));
}

fn hashing_shared() -> &'static Redactor {
    static REDACTOR: std::sync::OnceLock<Redactor> = std::sync::OnceLock::new();
    REDACTOR.get_or_init(|| Redactor::with_secret(&ruled(RULES), Some(SECRET)).unwrap())
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn hashed_attributes_never_leak_and_are_idempotent(
        key in "(enduser\\.id|user\\.name|user\\.contact|note|msg)",
        prefix in filler(),
        pii in any_pii(),
    ) {
        let r = hashing_shared();
        let rules = r.column_rules("requests", "attrs");
        let value = embed(&prefix, &pii, "");
        let json = serde_json::json!({ key.clone(): value, "nested": { key: pii.clone() } }).to_string();
        let once = match r.redact_field(&json, true, &rules, &mut |_| {}) {
            redactor::FieldOutcome::Value(v) => v.into_owned(),
            redactor::FieldOutcome::Dropped => unreachable!(),
        };
        prop_assert!(!once.contains(&pii), "{} leaked in {}", pii, once);
        prop_assert!(serde_json::from_str::<serde_json::Value>(&once).is_ok());
        prop_assert_eq!(
            r.redact_field(&once, true, &rules, &mut |_| {}),
            redactor::FieldOutcome::Value(Cow::Borrowed(once.as_str()))
        );
        let body_rules = r.column_rules("logs", "body");
        let text = format!("{prefix} {pii} done");
        let hashed = match r.redact_field(&text, false, &body_rules, &mut |_| {}) {
            redactor::FieldOutcome::Value(v) => v.into_owned(),
            redactor::FieldOutcome::Dropped => unreachable!(),
        };
        prop_assert_eq!(
            r.redact_field(&hashed, false, &body_rules, &mut |_| {}),
            redactor::FieldOutcome::Value(Cow::Borrowed(hashed.as_str()))
        );
    }
}

// ---------------------------------------------------------------------------------------------
// the JSON screen: skipping a document must never change what the full walk would do

/// SplitMix64: a seeded generator for documents built by hand (layout, escapes, malformations).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    fn chars(&mut self, alphabet: &str, len: usize) -> String {
        let alphabet = alphabet.as_bytes();
        (0..len)
            .map(|_| alphabet[self.below(alphabet.len())] as char)
            .collect()
    }
}

const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// Keys: secret-named (some only the walk recognises: `credentials`, `api key`), quantity keys,
/// the span attributes of the benchmark, non-ASCII, and escaped keys (one decodes to `password`).
const SCREEN_KEYS: &[&str] = &[
    "service.version",
    "password",
    "api_key",
    "x-api-key",
    "credentials",
    "Api Key",
    "private key",
    "authorization",
    "http.request.header.authorization",
    "refresh_token",
    "Cookie",
    "token",
    "secret",
    "gen_ai.usage.input_tokens",
    "gen_ai.latency.time_to_first_token",
    "max_tokens",
    "gpu_memory_bytes",
    "phone",
    "user.email",
    "msg",
    "tenant",
    "k8s.pod.name",
    "gen_ai.request.id",
    "用户",
    r"pass\u0077ord",
    r#"a\"b"#,
    "note",
];

/// Text around findings; `\n`, `\t`, `\"`, `\/`, `\u0040` are JSON escapes in the document.
const SCREEN_GLUE: &[&str] = &[
    " ", " ", "", ", ", ": ", "=", r"\n", r"\t", r#"\""#, r"\/", r"\\", "\u{00e9}", " 用户 ", "😀",
];

/// One string value's content as it appears in the document (escapes not decoded).
fn screen_string(rng: &mut Rng) -> String {
    let pii = match rng.below(24) {
        0 => format!("{}{}@example.com", rng.chars("abcxyz", 4), rng.below(99)),
        1 => r"bob\u0040example.org".to_string(),
        2 => "+1 415 555 2671".to_string(),
        3 => format!("138{}", rng.chars("0123456789", 8)),
        4 => card(rng.pick(&["411111111111111", "555555555555444", "601100000000000"])),
        5 => "4111 1111 1111 1111".to_string(),
        6 => cn_id(rng.pick(&["11010519491231002", "44030419900101001"])),
        7 => format!(
            "10.{}.{}.{}",
            rng.below(256),
            rng.below(256),
            1 + rng.below(254)
        ),
        8 => format!("2001:db8::{:x}", 1 + rng.below(0xfff)),
        9 => format!("sk-proj-{}", rng.chars(ALNUM, 24)),
        10 => format!("ghp_{}", rng.chars(ALNUM, 36)),
        11 => format!("AKIA{}", rng.chars("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)),
        12 => format!("token={}", rng.chars(ALNUM, 20)),
        13 => format!("api_key: {}", rng.chars(ALNUM, 18)),
        14 => "password=hunter22".to_string(),
        15 => format!("Bearer {}", rng.chars(ALNUM, 16)),
        16 => format!(
            "eyJhbGciOiJIUzI1NiJ9.eyJ{}.{}",
            rng.chars(ALNUM, 12),
            rng.chars(ALNUM, 10)
        ),
        17 => rng
            .pick(&["<EMAIL>", "<TOKEN>", "<API_KEY>", "<REDACTED>"])
            .to_string(),
        18 => format!("ord-{}", rng.chars("0123456789", 6)),
        19 => format!("0.{}", rng.chars("0123456789", 16)),
        20 => rng
            .pick(&["true", "null", "n/a", "", "abc", "x"])
            .to_string(),
        // benign telemetry
        _ => rng
            .pick(&[
                "llm_request",
                "mistral-7b",
                "worker-10",
                "req-4711",
                "tenant-3",
                "vllm",
                "4bf92f3577b34da6a3ce929d0e0e4736",
                "550e8400-e29b-41d4-a716-446655440000",
                "1700000000123",
                "0.10.1.1",
                "1.2.3.4",
            ])
            .to_string(),
    };
    match rng.below(4) {
        0 => pii,
        1 => format!("{}{}", rng.pick(SCREEN_GLUE), pii),
        _ => format!(
            "{}{}{}{}{}",
            rng.pick(&["mail", "user", "from", "", "手机"]),
            rng.pick(SCREEN_GLUE),
            pii,
            rng.pick(SCREEN_GLUE),
            rng.pick(&["ok", "", "done", "2026"])
        ),
    }
}

/// A JSON number, often one a detector would take for a finding if it were text.
fn screen_number(rng: &mut Rng) -> String {
    match rng.below(9) {
        0 => format!("0.{}", rng.chars("0123456789", 16)),
        1 => card("411111111111111"),
        2 => format!("138{}", rng.chars("0123456789", 8)),
        3 => format!("-{}", rng.below(1000)),
        4 => "1.5e-7".to_string(),
        5 => "0".to_string(),
        6 => "1700000000123456789".to_string(),
        _ => rng.below(100_000).to_string(),
    }
}

fn screen_space(rng: &mut Rng) -> &'static str {
    rng.pick(&["", "", "", " ", "\n  ", "\t"])
}

fn screen_value(rng: &mut Rng, depth: usize, out: &mut String) {
    match rng.below(20) {
        0..=8 => {
            out.push('"');
            out.push_str(&screen_string(rng));
            out.push('"');
        }
        9..=13 => out.push_str(&screen_number(rng)),
        14 | 15 => out.push_str(rng.pick(&["true", "false", "null"])),
        16 | 17 if depth < 3 => screen_object(rng, depth + 1, out),
        _ if depth < 3 => screen_array(rng, depth + 1, out),
        _ => out.push_str("null"),
    }
}

fn screen_object(rng: &mut Rng, depth: usize, out: &mut String) {
    out.push('{');
    let members = rng.below(if depth == 0 { 11 } else { 4 });
    for index in 0..members {
        if index > 0 {
            out.push(',');
        }
        out.push_str(screen_space(rng));
        out.push('"');
        out.push_str(rng.pick(SCREEN_KEYS));
        out.push('"');
        out.push_str(screen_space(rng));
        out.push(':');
        out.push_str(screen_space(rng));
        screen_value(rng, depth, out);
        out.push_str(screen_space(rng));
    }
    out.push('}');
}

fn screen_array(rng: &mut Rng, depth: usize, out: &mut String) {
    out.push('[');
    for index in 0..rng.below(4) {
        if index > 0 {
            out.push(',');
        }
        out.push_str(screen_space(rng));
        screen_value(rng, depth, out);
    }
    out.push(']');
}

/// A document: mostly a flat object like span attributes, sometimes nested, an array, a top-level
/// scalar, or broken JSON (which is then redacted as free text).
fn screen_document(rng: &mut Rng) -> String {
    let mut doc = String::new();
    match rng.below(20) {
        0 => screen_array(rng, 1, &mut doc),
        1 => screen_value(rng, 3, &mut doc),
        _ => {
            // depth 3 allows no nesting: a flat object like span attributes
            let depth = if rng.chance(60) { 3 } else { 0 };
            screen_object(rng, depth, &mut doc);
        }
    }
    if rng.chance(10) {
        doc.push_str(rng.pick(&[" ", "\n", "x", ",", "}"]));
    }
    if rng.chance(8) && doc.len() > 1 {
        // cut anywhere (at a character boundary), or break a token
        let mut cut = 1 + rng.below(doc.len() - 1);
        while !doc.is_char_boundary(cut) {
            cut -= 1;
        }
        match rng.below(3) {
            0 => doc.truncate(cut),
            1 => doc.insert_str(cut, rng.pick(&["\"", ",", "\\", "\u{1}", "01", "-", "]"])),
            _ => doc = doc.replacen("\":", "\" ", 1),
        }
    }
    doc
}

/// Everything one call changes: the outcome, the audit events and what it added to the counters
/// (hits per detector, hashed, dropped).
type FieldTrace = (
    String,
    Vec<(Option<String>, String, Option<String>, RedactAction)>,
    Vec<u64>,
);

fn counters(redactor: &Redactor) -> Vec<u64> {
    let mut counters: Vec<u64> = redactor.hits().into_values().collect();
    counters.extend([redactor.hashed(), redactor.dropped()]);
    counters
}

fn field_trace(redactor: &Redactor, doc: &str) -> FieldTrace {
    let before = counters(redactor);
    let mut events = Vec::new();
    let outcome = redactor.redact_field(doc, true, &[], &mut |event| {
        events.push((
            event.key_path.map(str::to_string),
            redactor.decider_name(event.decider).to_string(),
            event.detector.map(|s| redactor.source_name(s).into_owned()),
            event.action,
        ));
    });
    let outcome = match outcome {
        redactor::FieldOutcome::Value(value) => value.into_owned(),
        redactor::FieldOutcome::Dropped => "<dropped>".to_string(),
    };
    let added = counters(redactor)
        .into_iter()
        .zip(before)
        .map(|(after, before)| after - before)
        .collect();
    (outcome, events, added)
}

/// The configurations the screen is checked under: defaults, without `api_key` (no secret keys),
/// the `redacted` style, and custom patterns (anchored, word-bounded, plain) with and without
/// the built-in detectors.
fn screen_configs() -> Vec<(&'static str, RedactConfig)> {
    let custom = vec![
        CustomPattern {
            name: "order".into(),
            regex: r"^ord-[0-9]{6}$".into(),
        },
        CustomPattern {
            name: "tenant".into(),
            regex: r"\btenant-[0-9]\b".into(),
        },
        CustomPattern {
            name: "worker".into(),
            regex: r"worker-1[0-9]".into(),
        },
    ];
    vec![
        ("defaults", RedactConfig::default()),
        (
            "no api_key",
            RedactConfig {
                detectors: DetectorName::ALL
                    .into_iter()
                    .filter(|&d| d != DetectorName::ApiKey)
                    .collect(),
                ..RedactConfig::default()
            },
        ),
        (
            "redacted style",
            RedactConfig {
                replacement_style: ReplacementStyle::Redacted,
                ..RedactConfig::default()
            },
        ),
        (
            "custom and built-in",
            RedactConfig {
                custom: custom.clone(),
                ..RedactConfig::default()
            },
        ),
        (
            "custom only",
            RedactConfig {
                detectors: vec![],
                custom,
                ..RedactConfig::default()
            },
        ),
    ]
}

/// Redacts `documents` random documents with `screen` and without one (the full walk) and
/// returns the documents whose outcome, audit or counters differ.
fn screen_mismatches(screen: JsonScreen, documents: usize) -> Vec<String> {
    let mut mismatches = Vec::new();
    let mut unchanged = 0;
    for (name, config) in screen_configs() {
        let screened = Redactor::new(&config).unwrap().with_json_screen(screen);
        let full = Redactor::new(&config)
            .unwrap()
            .with_json_screen(JsonScreen::Off);
        let mut rng = Rng(0x005e_ed0f_a775);
        for _ in 0..documents {
            let doc = screen_document(&mut rng);
            let expected = field_trace(&full, &doc);
            let actual = field_trace(&screened, &doc);
            unchanged += usize::from(expected.0 == doc);
            if actual != expected {
                mismatches.push(format!(
                    "{name}: {doc:?}\n  screened: {actual:?}\n  full:     {expected:?}"
                ));
            }
        }
    }
    // both kinds must be common, or one side of the screen goes untested
    let total = documents * screen_configs().len();
    assert!(
        (total / 5..total * 4 / 5).contains(&unchanged),
        "{unchanged} of {total} documents unchanged"
    );
    mismatches
}

#[test]
fn string_leaf_screen_equals_the_full_walk() {
    let mismatches = screen_mismatches(JsonScreen::StringLeaves, 1500);
    assert!(
        mismatches.is_empty(),
        "{} mismatches, first ones:\n{}",
        mismatches.len(),
        mismatches[..mismatches.len().min(5)].join("\n")
    );
}

#[test]
fn the_equivalence_check_catches_the_whole_document_screen() {
    // the former screen skips documents the walk redacts; the same generator must find that, or
    // the check above proves nothing
    let mismatches = screen_mismatches(JsonScreen::WholeDocument, 1500);
    assert!(!mismatches.is_empty());
}

#[test]
fn string_leaf_screen_finds_what_the_whole_document_screen_missed() {
    let config = RedactConfig {
        custom: vec![CustomPattern {
            name: "order".into(),
            regex: r"^ord-[0-9]{6}$".into(),
        }],
        ..RedactConfig::default()
    };
    let cases = [
        // the escape puts an `n` before the address in the raw text, a newline in the value
        (
            r#"{"msg":"conn from\n10.1.2.3"}"#,
            r#"{"msg":"conn from\n<IP>"}"#,
        ),
        (
            r#"{"credentials":"hunter22"}"#,
            r#"{"credentials":"<API_KEY>"}"#,
        ),
        (r#"{"Api Key":"abcdefgh"}"#, r#"{"Api Key":"<API_KEY>"}"#),
        (r#"{"id":"ord-123456"}"#, r#"{"id":"<CUSTOM:order>"}"#),
    ];
    for screen in [JsonScreen::StringLeaves, JsonScreen::Off] {
        let r = Redactor::new(&config).unwrap().with_json_screen(screen);
        for (input, expected) in cases {
            assert_eq!(r.redact_json(input), expected, "{screen:?} {input}");
        }
    }
    let old = Redactor::new(&config)
        .unwrap()
        .with_json_screen(JsonScreen::WholeDocument);
    for (input, _) in cases {
        assert_eq!(old.redact_json(input), input);
    }
}

#[test]
fn typical_span_attributes_are_screened_clean() {
    let r = redactor();
    let attrs = r#"{"gen_ai.latency.e2e":1.217255792005766,"gen_ai.latency.time_in_queue":0.02042197079777501,"gen_ai.latency.time_to_first_token":0.1819434781140512,"gen_ai.request.id":"req-0","gen_ai.request.model":"mistral-7b","gen_ai.usage.input_tokens":694,"gen_ai.usage.output_tokens":676,"k8s.pod.name":"worker-10","service.name":"vllm","tenant":"tenant-0"}"#;
    assert!(matches!(r.redact_json(attrs), Cow::Borrowed(_)));
    // the former screen let it through to validation and the walk
    let prefilter = regex::RegexSet::new(
        detectors::builtin_rules(&DetectorName::ALL)
            .iter()
            .map(|rule| rule.regex.as_str()),
    )
    .unwrap();
    assert!(prefilter.is_match(attrs));
}

/// `secret_key_label` as it was written before it stopped allocating.
fn secret_key_label_reference(key: &str) -> Option<detectors::Label> {
    use super::redactor::{SECRET_KEY_SUFFIXES as SUFFIXES, SECRET_KEYS_EXACT as EXACT};
    let key = key.to_ascii_lowercase().replace(['-', '.', ' '], "_");
    let secret = EXACT.contains(&key.as_str()) || SUFFIXES.iter().any(|s| key.ends_with(s));
    if !secret {
        return None;
    }
    let token_like = ["token", "auth", "bearer", "cookie"]
        .iter()
        .any(|w| key.contains(w));
    Some(if token_like {
        detectors::Label::Token
    } else {
        detectors::Label::ApiKey
    })
}

#[test]
fn secret_key_label_keeps_its_definition() {
    let mut rng = Rng(7);
    let mut keys: Vec<String> = SCREEN_KEYS.iter().map(|k| k.to_string()).collect();
    keys.extend(
        [
            "",
            "TOKEN",
            "x.Api-Key",
            "my secret",
            "Bearer_Token",
            "passwd",
            "cookies",
            "authz",
            "ÄUTH",
            "tok",
            "api_key2",
        ]
        .map(String::from),
    );
    for _ in 0..5000 {
        let parts: Vec<&str> = (0..1 + rng.below(3))
            .map(|_| {
                rng.pick(&[
                    "api", "key", "Token", "auth", "secret", "pass", "wd", "word", "COOKIE",
                    "bearer", "id", "x", "é", "-", ".", " ", "_",
                ])
            })
            .collect();
        keys.push(parts.concat());
    }
    for key in keys {
        assert_eq!(
            redactor::secret_key_label(&key),
            secret_key_label_reference(&key),
            "{key:?}"
        );
    }
}

#[test]
fn builtin_patterns_keep_the_join_invariant() {
    for rule in detectors::builtin_rules(&DetectorName::ALL) {
        let pattern = rule.regex.as_str();
        // drop the allowed start alternatives and negated classes, then no assertion may remain
        let mut rest = pattern.replace("(?:^|[^", "(?:|[");
        for class_start in pattern.match_indices("(?:^|[^").map(|(i, _)| i + 7) {
            let class = &pattern[class_start..][..pattern[class_start..].find(']').unwrap()];
            assert!(
                !class.contains(r"\n") && !class.contains(r"\s"),
                "{pattern}: the start class must admit a newline"
            );
        }
        rest = rest.replace("[^", "[");
        for assertion in ["^", "$", r"\b", r"\B", r"\A", r"\z", "(?m", "(?u", "(?-u"] {
            assert!(!rest.contains(assertion), "{pattern}: {assertion}");
        }
    }
}

#[test]
fn stage_skips_only_repeated_clean_values() {
    let names = [
        "llm_request",
        "llm_request",
        "mail a@b.com",
        "mail a@b.com",
        "llm_request",
        "llm_request",
    ];
    let spans = SpanRecord::to_batch(
        &names
            .iter()
            .map(|name| SpanRecord {
                ts: 1,
                name: Some(name.to_string()),
                attrs: r#"{"k8s.pod.name":"worker-10"}"#.into(),
                ..Default::default()
            })
            .collect::<Vec<_>>(),
    );
    let mut stage = RedactStage::new(&RedactConfig::default()).unwrap();
    let (out, audit) = run_stage(
        &mut stage,
        TableBatch {
            table: Table::Spans,
            batch: spans,
        },
    );
    let names: Vec<Option<String>> = SpanRecord::from_batch(&out.batch)
        .unwrap()
        .into_iter()
        .map(|span| span.name)
        .collect();
    let expected = [
        "llm_request",
        "llm_request",
        "mail <EMAIL>",
        "mail <EMAIL>",
        "llm_request",
        "llm_request",
    ];
    assert_eq!(names, expected.map(|name| Some(name.to_string())));
    assert_eq!(audit_summary(&audit), ["spans.name default email mask 2"]);
    assert_eq!(stage.redactor().total_hits(), 2);
    assert_eq!(stage.rows_redacted(), 2);
}
