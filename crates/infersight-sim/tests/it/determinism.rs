//! Same seed → byte-identical output; different seeds differ; the files are what the Collector's
//! file exporter writes and the mapping table understands.

use infersight_sim::{Scenario, SimConfig};

use crate::support::{requests, run_files, spans};

fn small(seed: u64) -> SimConfig {
    let mut config = SimConfig::new(Scenario::LoraKvRegression);
    config.seed = seed;
    config.duration_s = 180.0;
    config.workers = 8;
    config.rate_per_s = 20.0;
    config
}

fn read_all(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap().display().to_string();
                files.push((rel, std::fs::read(&path).unwrap()));
            }
        }
    }
    files.sort();
    files
}

#[test]
fn same_seed_is_byte_identical_and_other_seeds_differ() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let c = tempfile::tempdir().unwrap();
    let (sa, _) = run_files(small(11), a.path());
    let (sb, _) = run_files(small(11), b.path());
    let (sc, _) = run_files(small(12), c.path());
    assert_eq!(sa, sb);
    let (fa, fb, fc) = (read_all(a.path()), read_all(b.path()), read_all(c.path()));
    assert!(
        fa.len() >= 3 + 8,
        "jsonl files and one raw log per worker: {}",
        fa.len()
    );
    assert_eq!(fa, fb, "same seed must give byte-identical files");
    for ((name, x), (_, y)) in fa.iter().zip(&fc) {
        if name.ends_with(".jsonl") {
            assert_ne!(x, y, "{name} must differ between seeds");
        }
    }
    assert_ne!(sa.requests, 0);
    assert_ne!(sa, sc);
}

#[test]
fn files_are_collector_encoded_and_fill_the_request_columns() {
    let dir = tempfile::tempdir().unwrap();
    let (summary, traces) = run_files(small(5), dir.path());
    let first = std::fs::read_to_string(dir.path().join("traces.jsonl")).unwrap();
    let first = first.lines().next().unwrap();
    // Collector file-exporter encoding: camelCase, hex ids, int64 as strings.
    assert!(
        first.starts_with("{\"resourceSpans\":["),
        "{}",
        &first[..80]
    );
    assert!(first.contains("\"traceId\":\""), "hex trace ids");
    assert!(
        first.contains("\"startTimeUnixNano\":\""),
        "int64 as strings"
    );
    assert!(
        first.contains("\"intValue\":\""),
        "int attributes as strings"
    );
    let trace_hex = first.split("\"traceId\":\"").nth(1).unwrap();
    assert!(trace_hex[..32].chars().all(|c| c.is_ascii_hexdigit()));

    let all = spans(&traces);
    assert_eq!(all.len() as u64, summary.spans);
    assert_eq!(
        all.len() as u64,
        summary.requests * 4,
        "gateway, tokenizer, engine, detokenize"
    );
    let rows = requests(&traces);
    assert_eq!(
        rows.len() as u64,
        summary.requests,
        "one requests row per request"
    );
    for row in &rows {
        assert!(
            row.model.is_some() && row.model_version.is_some(),
            "{row:?}"
        );
        assert!(row.lora_adapters.is_some() && row.kv_cache_policy.is_some());
        assert!(row.batch_size.is_some() && row.worker.is_some() && row.tenant.is_some());
        assert!(row.runtime.is_some() && row.device.is_some() && row.session_id.is_some());
        assert!(row.input_tokens.is_some() && row.output_tokens.is_some());
        assert!(row.queue_ms.is_some() && row.e2e_ms.is_some());
        if row.status.as_deref() != Some("error") && row.error_type.is_none() {
            assert!(row.prefill_ms.is_some() && row.ttft_ms.is_some() && row.decode_ms.is_some());
            let sum = row.ttft_ms.unwrap() + row.decode_ms.unwrap();
            assert!(
                (sum - row.e2e_ms.unwrap()).abs() < 0.01,
                "e2e = ttft + decode: {row:?}"
            );
        }
    }
    // Both GenAI dialects are emitted (current names and the deprecated ones vLLM still uses).
    let current = all
        .iter()
        .any(|s| s.attrs.contains_key("gen_ai.usage.input_tokens"));
    let deprecated = all
        .iter()
        .any(|s| s.attrs.contains_key("gen_ai.usage.prompt_tokens"));
    assert!(current && deprecated);

    let truth = std::fs::read_dir(dir.path().join("raw")).unwrap().count();
    assert_eq!(truth, 8, "one raw log per worker");
    let raw = std::fs::read_to_string(dir.path().join("raw/worker-01.log")).unwrap();
    assert!(
        raw.contains("[loggers.py:123] Engine 000: Avg prompt throughput:"),
        "vLLM V1 stats"
    );
    assert!(raw.contains("INFO:     10.8."), "uvicorn access lines");
    assert!(raw.contains("[PROMPT]") && raw.contains("[RESPONSE]") && raw.contains("[LOGITS] {"));
    let v0 = std::fs::read_to_string(dir.path().join("raw/worker-00.log")).unwrap();
    assert!(
        v0.contains(" metrics.py:351] Avg prompt throughput:")
            && v0.contains("Swapped: 0 reqs, Pending:")
    );
    // Lines of each raw file are in time order (vLLM's MM-DD HH:MM:SS sorts as text within a day).
    let times: Vec<&str> = raw
        .lines()
        .filter(|l| l.starts_with("INFO 1"))
        .map(|l| &l[5..19])
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]));
    assert!(
        std::fs::metadata(dir.path().join("metrics.jsonl"))
            .unwrap()
            .len()
            > 0
    );
    assert!(
        std::fs::metadata(dir.path().join("logs.jsonl"))
            .unwrap()
            .len()
            > 0
    );
}
