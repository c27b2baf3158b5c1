//! The Prometheus text exposition parser and its conversion to OTLP → canonical `metrics` rows:
//! real vLLM dumps (including a truncated one), hand-written SGLang / TGI / Triton / DCGM /
//! OpenMetrics fixtures, line-numbered errors, and property tests that no input panics and that a
//! truncated body keeps exactly the complete samples.

use std::path::PathBuf;

use infersight_ingest::metrics_to_batches;
use infersight_ingest::prometheus::{Exposition, MetricType, exposition_to_otlp, parse};
use infersight_model::mapping::AttributeMapper;
use infersight_model::{MetricRecord, Table};
use opentelemetry_proto::tonic::metrics::v1::metric;
use proptest::prelude::*;

use crate::{batch_of, json};

const SCRAPE_NS: u64 = 1_750_000_000_000_000_000;

fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/prometheus")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `../shared/data` (or `$INFERSIGHT_DATA_DIR`); `None`, with a note, when it is not there.
fn data_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("INFERSIGHT_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data"));
    if dir.join("vllm").is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "skipping: no vLLM data at {} (set INFERSIGHT_DATA_DIR to the shared data folder)",
            dir.join("vllm").display()
        );
        None
    }
}

/// Parses, converts for job `job` / worker `worker` and normalizes: the canonical rows.
fn rows(body: &str, job: &str, worker: &str) -> (Exposition, Vec<MetricRecord>) {
    let exposition = parse(body.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let scraped = exposition_to_otlp(&exposition, job, worker, SCRAPE_NS);
    let converted = metrics_to_batches(&scraped.request, &AttributeMapper::default()).unwrap();
    assert_eq!(converted.rejected, 0, "{:?}", converted.rejection_message);
    let rows = if converted.batches.is_empty() {
        Vec::new()
    } else {
        MetricRecord::from_batch(batch_of(&converted.batches, Table::Metrics)).unwrap()
    };
    (exposition, rows)
}

fn named<'a>(rows: &'a [MetricRecord], name: &str) -> Vec<&'a MetricRecord> {
    rows.iter()
        .filter(|r| r.name.as_deref() == Some(name))
        .collect()
}

fn one<'a>(rows: &'a [MetricRecord], name: &str) -> &'a MetricRecord {
    let found = named(rows, name);
    assert_eq!(
        found.len(),
        1,
        "expected one `{name}` row, got {}: {:?}",
        found.len(),
        rows.iter().map(|r| r.name.clone()).collect::<Vec<_>>()
    );
    found[0]
}

/// Sample lines of a body, split independently of the parser: (name, value) from the text
/// before `{`/space and the last token (the dumps carry no timestamps and no spaces in labels).
fn oracle(body: &str) -> Vec<(String, f64)> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let name_end = l.find(['{', ' ']).unwrap();
            let value = l.rsplit(' ').next().unwrap().parse::<f64>().unwrap();
            (l[..name_end].to_string(), value)
        })
        .collect()
}

#[test]
fn every_real_vllm_dump_parses_with_the_values_of_the_file() {
    let Some(data) = data_dir() else { return };
    let dir = data.join("vllm/vLLMBatchingMemoryGap/metrics_exposition");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 28, "dumps in {}", dir.display());
    for path in files {
        let body = std::fs::read_to_string(&path).unwrap();
        let (exposition, rows) = rows(&body, "vllm", "worker-1");
        let context = path.display();
        assert!(
            exposition.warnings.is_empty(),
            "{context}: {:?}",
            exposition.warnings
        );
        assert_eq!(exposition.families.len(), 15, "{context}");
        let expected = oracle(&body);
        let parsed: Vec<(String, f64)> = exposition
            .samples()
            .map(|s| (s.name.clone(), s.value))
            .collect();
        assert_eq!(parsed, expected, "{context}");
        assert_eq!(rows.len(), expected.len(), "{context}");

        // Old vLLM names map to canonical ones; worker and model land in their columns.
        let model_name = exposition
            .family("vllm:num_requests_running")
            .unwrap()
            .samples[0]
            .label("model_name")
            .unwrap()
            .to_string();
        for canonical in [
            "kv_cache_usage_ratio",
            "cpu_kv_cache_usage_ratio",
            "requests_running",
            "requests_waiting",
            "requests_swapped",
            "preemptions_total",
            "prompt_tokens_total",
            "generation_tokens_total",
            "prefix_cache_hit_ratio",
        ] {
            let row = one(&rows, canonical);
            assert_eq!(row.worker.as_deref(), Some("worker-1"), "{context}");
            assert_eq!(row.engine.as_deref(), Some("vllm"), "{context}");
            assert_eq!(row.model.as_deref(), Some(model_name.as_str()), "{context}");
            assert_eq!(row.ts, SCRAPE_NS as i64, "{context}");
        }
        let kv = one(&rows, "kv_cache_usage_ratio");
        assert_eq!(kv.source_name.as_deref(), Some("vllm:gpu_cache_usage_perc"));
        assert_eq!(kv.kind.as_deref(), Some("gauge"));
        assert_eq!(
            one(&rows, "preemptions_total").kind.as_deref(),
            Some("counter")
        );
        // The fork's own families are kept under their own names.
        assert_eq!(
            named(&rows, "vllm:scheduler_total_time").len(),
            1,
            "{context}"
        );
        let hit = one(&rows, "prefix_cache_hit_ratio");
        assert_eq!(hit.value, Some(-1.0), "{context}");
    }
}

#[test]
fn truncated_vllm_dump_keeps_complete_samples_and_warns_about_the_histogram() {
    let Some(data) = data_dir() else { return };
    let path = data.join("vllm/vllm_metrics_exposition_qwen2.5-coder-1.5b.prom");
    let body = std::fs::read_to_string(&path).unwrap();
    let (exposition, rows) = rows(&body, "vllm", "worker-2");

    // Every sample line of the file is kept, with its value.
    let parsed: Vec<(String, f64)> = exposition
        .samples()
        .map(|s| (s.name.clone(), s.value))
        .collect();
    assert_eq!(parsed, oracle(&body));
    let histogram = exposition.family("vllm:iteration_tokens_total").unwrap();
    assert_eq!(histogram.kind, MetricType::Histogram);
    assert_eq!(histogram.samples.len(), 16); // _sum + 15 buckets up to le="96.0"
    let last = histogram.samples.last().unwrap();
    assert_eq!(last.label("le"), Some("96.0"));
    assert_eq!(last.value, 998.0);

    // The histogram lost its +Inf bucket and _count: reported, and not stored half-made.
    assert_eq!(exposition.warnings.len(), 1, "{:?}", exposition.warnings);
    let warning = exposition.warnings[0].to_string();
    assert!(
        warning.contains("vllm:iteration_tokens_total") && warning.contains("+Inf"),
        "{warning}"
    );
    assert!(named(&rows, "iteration_tokens").is_empty());

    let finished = one(&rows, "requests_finished_total");
    assert_eq!(finished.value, Some(4.0));
    assert_eq!(json(&finished.labels)["finished_reason"], "stop");
    assert_eq!(
        finished.model.as_deref(),
        Some("Qwen/Qwen2.5-Coder-1.5B-Instruct")
    );
    assert_eq!(one(&rows, "generation_tokens_total").value, Some(955.0));
    assert_eq!(one(&rows, "prompt_tokens_total").value, Some(148.0));
    assert_eq!(
        one(&rows, "kv_cache_usage_ratio").worker.as_deref(),
        Some("worker-2")
    );
    let lora = one(&rows, "vllm:lora_requests_info");
    assert_eq!(lora.value, Some(1.7382173358407154e9));
    assert_eq!(json(&lora.labels)["max_lora"], "0");
}

#[test]
fn a_last_line_cut_mid_way_is_dropped_with_a_warning_naming_it() {
    let body = fixture("sglang.txt");
    let full = parse(body.as_bytes()).unwrap();
    // Cut inside the value of the gauge on line 9 (`… 0.28` → `… 0.2`).
    let cut_at = body.find("} 0.28").unwrap() + 4;
    let cut = parse(&body.as_bytes()[..cut_at]).unwrap();
    assert_eq!(cut.sample_count(), 2);
    assert_eq!(cut.warnings.len(), 1);
    assert_eq!(cut.warnings[0].line, Some(9));
    assert!(cut.warnings[0].message.contains("newline"));
    let kept: Vec<_> = cut.samples().cloned().collect();
    let first: Vec<_> = full.samples().take(2).cloned().collect();
    assert_eq!(kept, first);
}

#[test]
fn sglang_exposition_maps_to_canonical_names_with_a_per_bucket_histogram() {
    let (exposition, rows) = rows(&fixture("sglang.txt"), "sglang", "sgl-0");
    assert!(exposition.warnings.is_empty(), "{:?}", exposition.warnings);
    assert_eq!(one(&rows, "kv_cache_usage_ratio").value, Some(0.28));
    assert_eq!(one(&rows, "requests_running").value, Some(24.0));
    assert_eq!(one(&rows, "requests_waiting").value, Some(5.0));
    assert_eq!(one(&rows, "prompt_tokens_total").value, Some(8128902.0));
    assert_eq!(
        one(&rows, "prefix_cache_hit_ratio").value,
        Some(0.007507552643049313)
    );
    let ttft = one(&rows, "ttft_seconds");
    assert_eq!(ttft.kind.as_deref(), Some("histogram"));
    assert_eq!(ttft.engine.as_deref(), Some("sglang"));
    assert_eq!(ttft.worker.as_deref(), Some("sgl-0"));
    assert_eq!(
        ttft.model.as_deref(),
        Some("meta-llama/Llama-3.1-8B-Instruct")
    );
    assert_eq!(ttft.sample_count, Some(9100));
    assert_eq!(ttft.value, Some(2.3518979474117756e6));
    assert_eq!(ttft.bucket_bounds, vec![0.1, 0.5, 1.0, 5.0]);
    // Cumulative 6, 210, 1150, 9000, 9100 → per bucket.
    assert_eq!(ttft.bucket_counts, vec![6.0, 204.0, 940.0, 7850.0, 100.0]);
}

#[test]
fn tgi_exposition_maps_histograms_gauges_and_a_summary() {
    let (exposition, rows) = rows(&fixture("tgi.txt"), "tgi", "tgi-0");
    assert!(exposition.warnings.is_empty(), "{:?}", exposition.warnings);
    let e2e = one(&rows, "e2e_seconds");
    assert_eq!(e2e.engine.as_deref(), Some("tgi"));
    assert_eq!(e2e.bucket_bounds, vec![0.5, 1.0, 2.5]);
    assert_eq!(e2e.bucket_counts, vec![2.0, 5.0, 4.0, 1.0]);
    assert_eq!(e2e.sample_count, Some(12));
    assert_eq!(e2e.value, Some(9.75));
    assert_eq!(
        one(&rows, "queue_seconds").bucket_counts,
        vec![10.0, 2.0, 0.0]
    );
    assert_eq!(one(&rows, "requests_waiting").value, Some(3.0));
    assert_eq!(one(&rows, "requests_running").value, Some(8.0));
    let count = one(&rows, "tgi_request_count");
    assert_eq!(count.kind.as_deref(), Some("counter"));
    assert_eq!(count.value, Some(120.0));
    let summaries: Vec<_> = rows
        .iter()
        .filter(|r| r.kind.as_deref() == Some("summary"))
        .collect();
    assert_eq!(summaries.len(), 1);
    let summary = summaries[0];
    assert_eq!(summary.name.as_deref(), Some("tgi_batch_forward_duration"));
    assert_eq!(summary.sample_count, Some(1000));
    assert_eq!(summary.value, Some(14.5));
    let quantiles = named(&rows, "tgi_batch_forward_duration")
        .len()
        .saturating_sub(1);
    let quantile_rows: Vec<_> = rows
        .iter()
        .filter(|r| r.kind.as_deref() == Some("quantile"))
        .collect();
    assert_eq!(quantile_rows.len(), 2);
    assert_eq!(quantiles, 2);
    let p99 = quantile_rows
        .iter()
        .find(|r| json(&r.labels)["quantile"] == "0.99")
        .unwrap();
    assert_eq!(p99.value, Some(0.0456));
    assert_eq!(json(&p99.labels)["method"], "decode");
}

#[test]
fn triton_counters_are_scaled_from_microseconds() {
    let (exposition, rows) = rows(&fixture("triton.txt"), "triton", "triton-0");
    assert!(exposition.warnings.is_empty(), "{:?}", exposition.warnings);
    let success = one(&rows, "requests_finished_total");
    assert_eq!(success.value, Some(1234.0));
    assert_eq!(success.kind.as_deref(), Some("counter"));
    assert_eq!(success.engine.as_deref(), Some("triton"));
    assert_eq!(success.model.as_deref(), Some("llama3"));
    assert_eq!(json(&success.labels)["version"], "1");
    let failure = one(&rows, "requests_failed_total");
    assert_eq!(json(&failure.labels)["reason"], "BACKEND");
    let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-9 * b.abs().max(1.0));
    assert!(close(one(&rows, "e2e_seconds_total").value, 543.21));
    assert!(close(one(&rows, "queue_seconds_total").value, 12.5));
    assert!(close(one(&rows, "compute_seconds_total").value, 498.0));
    assert_eq!(one(&rows, "requests_waiting").value, Some(4.0));
    assert_eq!(one(&rows, "nv_gpu_utilization").value, Some(0.83));
}

#[test]
fn dcgm_gauges_are_scaled_and_attributed_to_the_gpu() {
    let (exposition, rows) = rows(&fixture("dcgm.txt"), "dcgm", "gpu-node-7");
    assert!(exposition.warnings.is_empty(), "{:?}", exposition.warnings);
    let used = one(&rows, "gpu_memory_used_bytes");
    assert_eq!(used.value, Some(71234.0 * 1048576.0));
    assert_eq!(used.engine.as_deref(), Some("dcgm"));
    assert_eq!(used.device.as_deref(), Some("0"));
    // the GPU's pod (DCGM's pod mapping) is the worker, not the scrape target
    assert_eq!(used.worker.as_deref(), Some("vllm-worker-0"));
    let labels = json(&used.labels);
    assert_eq!(labels["service.instance.id"], "gpu-node-7");
    assert_eq!(labels["modelName"], "NVIDIA H100 80GB HBM3");
    assert_eq!(
        one(&rows, "gpu_memory_free_bytes").value,
        Some(9866.0 * 1048576.0)
    );
    let util = named(&rows, "gpu_utilization_ratio");
    assert_eq!(util.len(), 2);
    assert!(util[0].value.is_some_and(|v| (v - 0.87).abs() < 1e-12));
    assert_eq!(util[1].device.as_deref(), Some("1"));
    assert_eq!(util[1].value, Some(0.0));
    assert_eq!(one(&rows, "gpu_sm_clock_hertz").value, Some(1980.0 * 1e6));
    assert_eq!(one(&rows, "gpu_temperature_celsius").value, Some(54.0));
    assert_eq!(one(&rows, "gpu_power_watts").value, Some(512.304));
}

#[test]
fn openmetrics_eof_created_float_timestamps_and_exemplars() {
    let body = fixture("openmetrics.txt");
    let exposition = parse(body.as_bytes()).unwrap();
    assert!(exposition.warnings.is_empty(), "{:?}", exposition.warnings);
    let scraped = exposition_to_otlp(&exposition, "vllm", "w", SCRAPE_NS);
    let metrics = &scraped.request.resource_metrics[0].scope_metrics[0].metrics;
    let counter = metrics
        .iter()
        .find(|m| m.name == "vllm:num_preemptions_total")
        .unwrap();
    let Some(metric::Data::Sum(sum)) = &counter.data else {
        panic!("{counter:?}")
    };
    assert!(sum.is_monotonic);
    assert_eq!(
        sum.data_points[0].start_time_unix_nano,
        1_738_217_300_000_000_000
    );
    // `_created` is a start time, not a series of its own.
    assert!(!metrics.iter().any(|m| m.name.ends_with("_created")));
    let histogram = metrics
        .iter()
        .find(|m| m.name == "vllm:e2e_request_latency_seconds")
        .unwrap();
    assert_eq!(histogram.unit, "seconds");
    let Some(metric::Data::Histogram(h)) = &histogram.data else {
        panic!("{histogram:?}")
    };
    assert_eq!(h.data_points[0].bucket_counts, vec![1, 3, 1]);
    assert_eq!(h.data_points[0].explicit_bounds, vec![0.3, 1.0]);
    assert_eq!(
        h.data_points[0].start_time_unix_nano,
        1_738_217_300_000_000_000
    );

    let (_, rows) = rows(&body, "vllm", "w");
    let kv = one(&rows, "kv_cache_usage_ratio");
    assert_eq!(kv.ts, 1_738_217_400_500_000_000); // the sample's own (float seconds) timestamp
    assert_eq!(json(&kv.labels)["engine"], "0");
    assert_eq!(one(&rows, "preemptions_total").value, Some(17.0));
    assert_eq!(one(&rows, "e2e_seconds").sample_count, Some(5));
}

#[test]
fn label_escapes_special_values_and_millisecond_timestamps() {
    let body = concat!(
        "# HELP x A help with a \\\\ backslash\\nand a newline\n",
        "# TYPE x gauge\n",
        "x{path=\"C:\\\\dir\",quote=\"say \\\"hi\\\"\",nl=\"a\\nb\",utf=\"ünï\",} NaN\n",
        "pos_inf +Inf 1700000000123\n",
        "neg_inf{ a = \"1\" } -Inf\n",
        "\n",
        "# an ordinary comment\n",
        "sci 1.5e-3\r\n",
    );
    let exposition = parse(body.as_bytes()).unwrap();
    assert!(exposition.warnings.is_empty(), "{:?}", exposition.warnings);
    let x = &exposition.family("x").unwrap();
    assert_eq!(
        x.help.as_deref(),
        Some("A help with a \\ backslash\nand a newline")
    );
    let sample = &x.samples[0];
    assert!(sample.value.is_nan());
    assert_eq!(sample.label("path"), Some("C:\\dir"));
    assert_eq!(sample.label("quote"), Some("say \"hi\""));
    assert_eq!(sample.label("nl"), Some("a\nb"));
    assert_eq!(sample.label("utf"), Some("ünï"));
    let pos = &exposition.family("pos_inf").unwrap().samples[0];
    assert_eq!(pos.value, f64::INFINITY);
    assert_eq!(pos.timestamp_ms, Some(1_700_000_000_123));
    assert_eq!(pos.line, 4);
    let neg = &exposition.family("neg_inf").unwrap().samples[0];
    assert_eq!(neg.value, f64::NEG_INFINITY);
    assert_eq!(neg.label("a"), Some("1"));
    assert_eq!(exposition.family("sci").unwrap().samples[0].value, 0.0015);
    assert_eq!(exposition.family("sci").unwrap().kind, MetricType::Untyped);

    let scraped = exposition_to_otlp(&exposition, "j", "w", SCRAPE_NS);
    let converted = metrics_to_batches(&scraped.request, &AttributeMapper::default()).unwrap();
    let rows = MetricRecord::from_batch(batch_of(&converted.batches, Table::Metrics)).unwrap();
    assert_eq!(one(&rows, "pos_inf").ts, 1_700_000_000_123_000_000);
    assert_eq!(json(&one(&rows, "x").labels)["quote"], "say \"hi\"");
}

#[test]
fn malformed_lines_fail_with_their_line_number_and_reason() {
    let cases: &[(&str, usize, &str)] = &[
        ("a 1\nb{x=\"1\" 2\n", 2, "expected `,` or `}`"),
        ("a 1\nb{x=1} 2\n", 2, "double quotes"),
        ("a{x=\"\\t\"} 1\n", 1, "invalid escape `\\t`"),
        ("a{x=\"open} 1\n", 1, "not closed by `\"`"),
        ("a{x=\"1\",x=\"2\"} 1\n", 1, "appears twice"),
        ("a{9x=\"1\"} 1\n", 1, "cannot start a label name"),
        ("a\n", 1, "has no value"),
        ("a one\n", 1, "`one` is not a valid value"),
        ("a 1 soon\n", 1, "not a valid timestamp"),
        ("a 1 2 3\n", 1, "unexpected `3`"),
        ("1a 1\n", 1, "cannot start a metric name"),
        ("{\"a\"} 1\n", 1, "quoted (UTF-8) metric names"),
        (
            "# TYPE a gauge\n# TYPE a gauge\na 1\n",
            2,
            "second `# TYPE`",
        ),
        ("# HELP a x\n# HELP a y\n", 2, "second `# HELP`"),
        ("# TYPE a teapot\n", 1, "unknown metric type `teapot`"),
        ("# TYPE a\n", 1, "without a type"),
        ("# TYPE\n", 1, "without a metric name"),
        ("a 1\n# TYPE a counter\n", 2, "after its samples"),
        ("# TYPE h histogram\nh_bucket 1\n", 2, "has no `le` label"),
        (
            "# TYPE h histogram\nh_bucket{le=\"x\"} 1\n",
            2,
            "not a number",
        ),
        ("# TYPE s summary\ns 1\n", 2, "no `quantile` label"),
        (
            "# TYPE h histogram\nh 1\n",
            2,
            "does not fit the histogram family",
        ),
    ];
    for (body, line, reason) in cases {
        let error = parse(body.as_bytes()).expect_err(body);
        assert_eq!(error.line, *line, "{body:?}: {error}");
        assert!(
            error.reason.contains(reason),
            "{body:?}: `{}` does not mention `{reason}`",
            error.reason
        );
        assert!(
            error
                .to_string()
                .starts_with(&format!("invalid exposition at line {line}: "))
        );
    }
    let error = parse(b"ok 1\nbad \xff 1\n").unwrap_err();
    assert_eq!(error.line, 2);
    assert!(error.reason.contains("not valid UTF-8"), "{error}");
}

#[test]
fn incomplete_and_inconsistent_series_are_warnings_not_errors() {
    let body = concat!(
        "# TYPE h histogram\n",
        "h_bucket{le=\"1\"} 5\n",
        "h_bucket{le=\"2\"} 3\n",
        "h_bucket{le=\"+Inf\"} 9\n",
        "h_count 9\n",
        "# TYPE g histogram\n",
        "g_bucket{le=\"1\"} 2\n",
        "g_count 4\n",
        "g_sum 3.5\n",
        "# TYPE s summary\n",
        "s{quantile=\"0.5\"} 1\n",
        "s_sum 10\n",
        "dup 1\n",
        "dup 2\n",
        "a 1\n",
        "# EOF\n",
        "after 1\n",
    );
    let exposition = parse(body.as_bytes()).unwrap();
    let warnings: Vec<String> = exposition.warnings.iter().map(|w| w.to_string()).collect();
    let has = |needle: &str| warnings.iter().any(|w| w.contains(needle));
    assert!(has("line 14: duplicate sample `dup`"), "{warnings:?}");
    assert!(
        has("line 17: content after `# EOF` ignored"),
        "{warnings:?}"
    );
    assert!(
        has("histogram `h`: cumulative bucket counts decrease"),
        "{warnings:?}"
    );
    assert!(has("summary `s`: no `_count`"), "{warnings:?}");
    assert_eq!(warnings.len(), 4, "{warnings:?}");
    assert_eq!(exposition.family("dup").unwrap().samples[0].value, 1.0);
    assert!(exposition.family("after").is_none());
    // `g` has no +Inf bucket but a `_count`: complete enough.
    let (_, rows) = rows(body, "j", "w");
    let g = one(&rows, "g");
    assert_eq!(g.bucket_counts, vec![2.0, 2.0]);
    assert_eq!(g.sample_count, Some(4));
    assert!(named(&rows, "h").is_empty());
    assert!(named(&rows, "s").is_empty());
}

fn real_or_fixture_bodies() -> Vec<String> {
    let mut bodies: Vec<String> = [
        "sglang.txt",
        "tgi.txt",
        "triton.txt",
        "dcgm.txt",
        "openmetrics.txt",
    ]
    .iter()
    .map(|n| fixture(n))
    .collect();
    if let Some(data) = data_dir() {
        let prom = data.join("vllm/vllm_metrics_exposition_qwen2.5-coder-1.5b.prom");
        if let Ok(body) = std::fs::read_to_string(prom) {
            bodies.push(body);
        }
    }
    bodies
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(exposition) = parse(&bytes) {
            let scraped = exposition_to_otlp(&exposition, "j", "w", SCRAPE_NS);
            let _ = metrics_to_batches(&scraped.request, &AttributeMapper::default());
        }
    }

    #[test]
    fn exposition_shaped_noise_never_panics(
        lines in proptest::collection::vec(
            "(# (HELP|TYPE|UNIT|EOF) )?[a-z_:]{0,4}(_bucket|_sum|_count|_total|_created)?(\\{([a-z]{1,3}|le|quantile)=\"[a-z0-9.+\\\\\"Inf]{0,5}\"[,}]{0,2})? ?(counter|histogram|summary|gauge|-?[0-9.e+]{1,6}|NaN|\\+Inf)? ?[0-9.]{0,4}",
            0..24,
        ),
        newline_at_end in any::<bool>(),
    ) {
        let mut body = lines.join("\n");
        if newline_at_end {
            body.push('\n');
        }
        match parse(body.as_bytes()) {
            Ok(exposition) => {
                let scraped = exposition_to_otlp(&exposition, "j", "w", SCRAPE_NS);
                let converted = metrics_to_batches(&scraped.request, &AttributeMapper::default());
                prop_assert!(converted.is_ok());
            }
            Err(e) => prop_assert!(e.line >= 1 && e.line <= lines.len().max(1)),
        }
    }

    /// Cutting a valid body anywhere keeps exactly the samples of the lines before the cut.
    #[test]
    fn any_truncation_keeps_a_prefix_of_the_samples(which in 0usize..6, cut in any::<prop::sample::Index>()) {
        let bodies = real_or_fixture_bodies();
        let body = &bodies[which % bodies.len()];
        let full = parse(body.as_bytes()).unwrap();
        let at = cut.index(body.len() + 1);
        let head = &body.as_bytes()[..at];
        let truncated = parse(head).unwrap();
        let kept: Vec<_> = truncated.samples().cloned().collect();
        let all: Vec<_> = full.samples().cloned().collect();
        prop_assert!(kept.len() <= all.len());
        // Family order may differ only if a family is cut before its first sample; compare as
        // sets of (line, sample).
        for sample in &kept {
            prop_assert!(all.contains(sample), "{:?} not in the full parse", sample);
        }
        let complete_lines = head.iter().filter(|b| **b == b'\n').count();
        let expected = all.iter().filter(|s| s.line <= complete_lines).count();
        prop_assert_eq!(kept.len(), expected);
        let last_line = head.rsplit(|b| *b == b'\n').next().unwrap_or_default();
        if !last_line.is_empty() && last_line != b"# EOF" {
            prop_assert!(truncated.warnings.iter().any(|w| w.message.contains("newline")));
        }
    }
}
