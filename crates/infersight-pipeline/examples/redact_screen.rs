//! Timing of the `redact` stage on span rows as `infersight ingest` sees them (name `llm_request`,
//! vLLM-style `attrs`), under each JSON screen: the former whole-document screen, no screen (the
//! full walk) and the string-leaf screen. Also checks that all three give the same rows and audit.
//! `cargo run --release -p infersight-pipeline --example redact_screen -- [SPANS]` (200000 default)

use std::time::{Duration, Instant};

use infersight_model::{SpanRecord, Table, TableBatch};
use infersight_pipeline::stages::redact::JsonScreen;
use infersight_pipeline::{RedactConfig, RedactStage, Redactor, Stage};

/// Rows per batch handed to the stage.
const BATCH_ROWS: usize = 4096;

/// Timed runs per screen; the fastest counts (the others absorb warm-up and noise).
const RUNS: usize = 5;

/// SplitMix64, seeded: the same spans on every run.
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

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The `attrs` of one span as the OTLP receiver writes them (keys sorted, floats in full).
fn span_attrs(rng: &mut Rng, request: u64) -> String {
    let models = ["mistral-7b", "llama-3-8b", "qwen2-7b"];
    let queue = rng.unit() * 0.05;
    let first_token = 0.05 + rng.unit() * 0.3;
    let e2e = first_token + rng.unit() * 2.0;
    format!(
        concat!(
            r#"{{"gen_ai.latency.e2e":{},"gen_ai.latency.time_in_queue":{},"#,
            r#""gen_ai.latency.time_to_first_token":{},"gen_ai.request.id":"req-{}","#,
            r#""gen_ai.request.model":"{}","gen_ai.usage.input_tokens":{},"#,
            r#""gen_ai.usage.output_tokens":{},"k8s.pod.name":"worker-{}","#,
            r#""service.name":"vllm","tenant":"tenant-{}"}}"#
        ),
        e2e,
        queue,
        first_token,
        request,
        models[rng.below(models.len() as u64) as usize],
        16 + rng.below(2000),
        1 + rng.below(1000),
        rng.below(16),
        rng.below(8),
    )
}

fn span_records(spans: usize) -> Vec<SpanRecord> {
    let mut rng = Rng(0x0005_9a75_eed5);
    (0..spans as u64)
        .map(|request| SpanRecord {
            ts: 1_700_000_000_000_000_000 + request as i64 * 1_000_000,
            name: Some("llm_request".into()),
            kind: Some("server".into()),
            service: Some("vllm".into()),
            status: Some("ok".into()),
            attrs: span_attrs(&mut rng, request),
            ..Default::default()
        })
        .collect()
}

fn span_batches(records: &[SpanRecord]) -> Vec<TableBatch> {
    records
        .chunks(BATCH_ROWS)
        .map(|chunk| TableBatch {
            table: Table::Spans,
            batch: SpanRecord::to_batch(chunk),
        })
        .collect()
}

/// One pass of a fresh stage over all batches: the time and everything it emitted.
fn run(screen: JsonScreen, batches: &[TableBatch]) -> (Duration, Vec<TableBatch>) {
    let redactor = Redactor::new(&RedactConfig::default())
        .expect("the default redaction config is valid")
        .with_json_screen(screen);
    let mut stage = RedactStage::from_redactor(redactor);
    let mut out = Vec::with_capacity(batches.len());
    let started = Instant::now();
    for batch in batches {
        stage
            .process(batch.clone(), &mut out)
            .expect("span batches redact");
    }
    (started.elapsed(), out)
}

fn main() {
    let spans: usize = match std::env::args().nth(1) {
        Some(arg) => arg.parse().unwrap_or_else(|_| {
            eprintln!("usage: redact_screen [SPANS]");
            std::process::exit(2);
        }),
        None => 200_000,
    };
    let records = span_records(spans);
    let batches = span_batches(&records);
    let screens = [
        ("whole-document (before)", JsonScreen::WholeDocument),
        ("no screen (full walk)", JsonScreen::Off),
        ("string leaves (now)", JsonScreen::StringLeaves),
    ];
    let mut best = [Duration::MAX; 3];
    let mut best_attrs_only = [Duration::MAX; 3];
    let mut outputs: Vec<Option<Vec<TableBatch>>> = vec![None, None, None];
    for _ in 0..RUNS {
        for (index, &(_, screen)) in screens.iter().enumerate() {
            let (elapsed, out) = run(screen, &batches);
            best[index] = best[index].min(elapsed);
            outputs[index] = Some(out);
            // the documents alone, without the stage around them
            let redactor = Redactor::new(&RedactConfig::default())
                .expect("the default redaction config is valid")
                .with_json_screen(screen);
            let started = Instant::now();
            for record in &records {
                std::hint::black_box(redactor.redact_json(&record.attrs));
            }
            best_attrs_only[index] = best_attrs_only[index].min(started.elapsed());
        }
    }
    let rows = |out: &Option<Vec<TableBatch>>| -> Vec<(Table, arrow::record_batch::RecordBatch)> {
        out.iter()
            .flatten()
            .map(|b| (b.table, b.batch.clone()))
            .collect()
    };
    for (index, (name, _)) in screens.iter().enumerate() {
        assert!(
            rows(&outputs[index]) == rows(&outputs[1]),
            "{name}: the output differs from the full walk"
        );
    }
    // what the names cost before the stage skipped repeated clean values: one call per row
    let redactor = Redactor::new(&RedactConfig::default()).expect("valid");
    let mut names_per_row = Duration::MAX;
    for _ in 0..RUNS {
        let started = Instant::now();
        for _ in 0..spans {
            std::hint::black_box(redactor.redact(std::hint::black_box("llm_request")));
        }
        names_per_row = names_per_row.min(started.elapsed());
    }
    println!("{spans} spans (name + attrs), {BATCH_ROWS} rows per batch, best of {RUNS} runs");
    for (index, (name, _)) in screens.iter().enumerate() {
        let seconds = best[index].as_secs_f64();
        println!(
            "  {name:<24} {:>8.1} ms  {:>10.0} spans/s  {:>6.3} µs/span  (attrs alone: {:.3} µs)",
            seconds * 1e3,
            spans as f64 / seconds,
            seconds * 1e6 / spans as f64,
            best_attrs_only[index].as_secs_f64() * 1e6 / spans as f64
        );
    }
    println!(
        "  names redacted row by row (before the repeat skip): {:.1} ms",
        names_per_row.as_secs_f64() * 1e3
    );
    let now = best[2].as_secs_f64();
    let attrs_now = best_attrs_only[2].as_secs_f64();
    println!(
        "  speed-up of the stage: {:.1}x over the former screen, {:.1}x over the full walk",
        best[0].as_secs_f64() / now,
        best[1].as_secs_f64() / now
    );
    println!(
        "  speed-up of attrs alone: {:.1}x over the former screen, {:.1}x over the full walk",
        best_attrs_only[0].as_secs_f64() / attrs_now,
        best_attrs_only[1].as_secs_f64() / attrs_now
    );
}
