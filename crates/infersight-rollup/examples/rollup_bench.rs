//! Benchmark of building SLI rollups at ingest: 1M seeded `requests` rows shaped like those of the
//! ingest benchmark (`infersight bench-gen otlp-jsonl`: one request per millisecond of ts, so 1M
//! rows span ≈17 minutes of one hour; 16 workers × 4 models × 10 tenants and a few other
//! dimensions drawn per row, so consecutive rows rarely share a combination; some null and
//! invalid latencies), rolled up the way the store does it (one rollup per hour segment with the
//! default spec, sealed, encoded).
//!
//! Prints the median time per 1M rows of `add_requests` + `seal` and of `encode`, and an FNV
//! checksum of every encoded rollup, so two builds of this example (before / after a change) can
//! be compared for speed and for byte-identical output.
//!
//! Usage: `cargo run --release -p infersight-analytics --example rollup_bench [--rows N]
//! [--repeat N]`

use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use infersight_model::RequestRecord;
use infersight_rollup::{Rollup, RollupSpec};

const START_NS: i64 = 1_764_381_600_000_000_000;
const HOUR_NS: i64 = 3_600_000_000_000;

/// SplitMix64 (`infersight_model::rng`), so every run rolls up the same rows.
type Rng = infersight_model::rng::SplitMix64;

/// Log-normal with the given median (Box–Muller).
fn lognormal(rng: &mut Rng, median: f64, sigma: f64) -> f64 {
    let u1 = rng.uniform().max(1e-12);
    let u2 = rng.uniform();
    let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
    median * (sigma * z).exp()
}

/// The rows, sorted by ts (as the store sorts before a flush) and cut into hour batches.
fn hour_batches(rows: usize) -> Vec<RecordBatch> {
    const MODELS: [&str; 4] = ["llama-3-8b", "llama-3-70b", "qwen-2.5-7b", "mistral-7b"];
    let mut rng = Rng::new(20_261_129);
    let step_ns = 1_000_000; // ≈1000 requests per second of ts
    let mut batches = Vec::new();
    let mut records = Vec::new();
    let mut hour = START_NS / HOUR_NS;
    for i in 0..rows {
        let ts = START_NS + i as i64 * step_ns + rng.below(1000) as i64;
        if ts / HOUR_NS != hour && !records.is_empty() {
            batches.push(RequestRecord::to_batch(&records));
            records.clear();
        }
        hour = ts / HOUR_NS;
        let worker = rng.below(16);
        let model = worker % 4;
        let tenant = rng.below(10);
        let version = if rng.uniform() < 0.8 { "r1" } else { "r2" };
        let lora = match rng.below(6) {
            0 => Some("support-bot".to_string()),
            1 => Some("sql-helper".to_string()),
            _ => None,
        };
        let ttft = lognormal(&mut rng, 180.0 * (1.0 + model as f64 * 0.2), 0.6);
        let decode = lognormal(&mut rng, 900.0, 0.8);
        let output_tokens = 20 + rng.below(400) as i64;
        let invalid = rng.below(2000) == 0;
        records.push(RequestRecord {
            ts,
            tenant: Some(format!("tenant-{tenant}")),
            service: Some(if worker < 8 { "chat-api" } else { "batch-api" }.to_string()),
            runtime: Some(
                if worker.is_multiple_of(2) {
                    "vllm"
                } else {
                    "sglang"
                }
                .to_string(),
            ),
            worker: Some(format!("worker-{worker:02}")),
            model: Some(MODELS[model].to_string()),
            model_version: Some(version.to_string()),
            lora_adapters: lora,
            kv_cache_policy: Some("lru".to_string()),
            input_tokens: Some(100 + rng.below(4000) as i64),
            cached_tokens: (rng.below(3) > 0).then(|| rng.below(1000) as i64),
            output_tokens: Some(output_tokens),
            queue_ms: (rng.below(10) > 0).then(|| lognormal(&mut rng, 5.0, 1.5)),
            prefill_ms: Some(ttft * 0.8),
            ttft_ms: Some(if invalid { -1.0 } else { ttft }),
            decode_ms: Some(decode),
            tpot_ms: Some(decode / output_tokens as f64),
            itl_max_ms: (rng.below(4) > 0).then(|| lognormal(&mut rng, 60.0, 0.7)),
            e2e_ms: Some(ttft + decode),
            finish_reason: Some(if rng.below(20) == 0 { "length" } else { "stop" }.to_string()),
            status: Some(if rng.below(50) == 0 { "error" } else { "ok" }.to_string()),
            ..RequestRecord::default()
        });
    }
    if !records.is_empty() {
        batches.push(RequestRecord::to_batch(&records));
    }
    batches
}

fn fnv(bytes: &[u8], mut hash: u64) -> u64 {
    for &b in bytes {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort_unstable();
    times[times.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map_or(default, |v| v.parse().expect("a number"))
    };
    let rows = flag("--rows", 1_000_000);
    let repeat = flag("--repeat", 5);
    let batches = hour_batches(rows);
    let spec = RollupSpec::default();
    let mut build_times = Vec::new();
    let mut encode_times = Vec::new();
    let mut checksum = 0xcbf2_9ce4_8422_2325;
    let mut encoded_bytes = 0;
    let mut cells = 0;
    for run in 0..repeat {
        let started = Instant::now();
        let rollups: Vec<Rollup> = batches
            .iter()
            .map(|batch| {
                let mut rollup = Rollup::new(&spec);
                rollup.add_requests(batch).expect("a requests batch");
                rollup.seal();
                rollup
            })
            .collect();
        build_times.push(started.elapsed());
        let started = Instant::now();
        let encoded: Vec<Vec<u8>> = rollups.iter().map(Rollup::encode).collect();
        encode_times.push(started.elapsed());
        if run == 0 {
            for bytes in &encoded {
                checksum = fnv(bytes, checksum);
                encoded_bytes += bytes.len();
            }
            cells = rollups.iter().map(Rollup::cell_count).sum::<usize>();
        }
    }
    let per_million = |d: Duration| d.as_secs_f64() * 1e3 * 1e6 / rows as f64;
    println!(
        "rows {rows} in {} hour batches, {cells} cells, {encoded_bytes} encoded bytes, checksum {checksum:016x}",
        batches.len()
    );
    println!(
        "build (add_requests + seal) {:.1} ms per 1M rows, encode {:.1} ms per 1M rows (median of {repeat})",
        per_million(median(build_times)),
        per_million(median(encode_times)),
    );
}
