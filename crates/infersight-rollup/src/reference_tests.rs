//! The rollup of seeded random `requests` batches equals, byte for byte once encoded, the one
//! a naive per-row reference builds (owned value vectors, a plain map of combinations, one
//! `BTreeMap` entry and one [`DdSketch::add`] per value).

use super::*;
use std::collections::{BTreeMap, HashMap};

use arrow::array::ArrayRef;
use arrow::array::{
    Array, AsArray, Float64Array, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray,
};
use arrow::datatypes::DataType;
use infersight_model::RequestRecord;
use std::sync::Arc;

use infersight_model::rng::SplitMix64 as Rng;

fn pick<T: Clone>(rng: &mut Rng, options: &[T]) -> T {
    options[rng.below(options.len())].clone()
}

fn text(rng: &mut Rng, pool: &[&str]) -> Option<String> {
    // None and "" are the same value in a combination; OTHER collides with the fold-over
    match rng.below(12) {
        0 => None,
        1 => Some(String::new()),
        2 => Some(OTHER.to_string()),
        _ => Some(pick(rng, pool).to_string()),
    }
}

fn latency(rng: &mut Rng) -> Option<f64> {
    match rng.below(40) {
        0 => None,
        1 => Some(f64::NAN),
        2 => Some(-1.5),
        3 => Some(f64::INFINITY),
        4 => Some(f64::NEG_INFINITY),
        5 => Some(0.0),
        6 => Some(-0.0),
        7 => Some(MIN_POSITIVE_PROBE * rng.uniform()),
        8 => Some(1e300 * rng.uniform()),
        9 => Some(f64::MIN_POSITIVE),
        _ => Some((rng.uniform() * 12.0 - 3.0).exp()),
    }
}

const MIN_POSITIVE_PROBE: f64 = crate::sketch::MIN_POSITIVE * 2.0;

fn random_records(rng: &mut Rng, rows: usize, start_ns: i64, span_ns: i64) -> Vec<RequestRecord> {
    let mut records: Vec<RequestRecord> = Vec::with_capacity(rows);
    for i in 0..rows {
        let ts = start_ns + (span_ns as f64 * rng.uniform()) as i64;
        // runs of one combination, as batches that come per resource have
        if i > 0 && rng.below(3) == 0 {
            let mut same = records[i - 1].clone();
            same.ts = ts;
            same.ttft_ms = latency(rng);
            same.e2e_ms = latency(rng);
            records.push(same);
            continue;
        }
        records.push(RequestRecord {
            ts,
            service: text(rng, &["chat", "batch"]),
            worker: text(rng, &["w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7"]),
            model: text(rng, &["a", "b", "c", "d"]),
            tenant: text(rng, &["t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8"]),
            batch_size: match rng.below(6) {
                0 => None,
                1 => Some(i64::MIN),
                2 => Some(-7),
                _ => Some(rng.below(4) as i64),
            },
            input_tokens: (rng.below(5) > 0).then(|| rng.below(5000) as i64 - 10),
            output_tokens: (rng.below(5) > 0).then(|| rng.below(500) as i64),
            cached_tokens: (rng.below(2) > 0).then(|| rng.below(900) as i64),
            queue_ms: latency(rng),
            prefill_ms: latency(rng),
            ttft_ms: latency(rng),
            decode_ms: latency(rng),
            tpot_ms: latency(rng),
            itl_max_ms: latency(rng),
            e2e_ms: latency(rng),
            status: text(rng, &["ok", "error"]),
            finish_reason: text(rng, &["stop", "length"]),
            ..RequestRecord::default()
        });
    }
    if rng.below(2) == 0 {
        records.sort_by_key(|r| r.ts);
    }
    records
}

/// A batch of a few columns only, with null timestamps: the shape of a hand-made or older
/// batch (missing columns roll up as empty dimensions and no values).
fn sparse_batch(rng: &mut Rng, rows: usize, start_ns: i64) -> RecordBatch {
    let ts: Vec<Option<i64>> = (0..rows)
        .map(|_| (rng.below(8) > 0).then(|| start_ns + rng.below(300) as i64 * 1_000_000_000))
        .collect();
    let worker: Vec<Option<String>> = (0..rows).map(|_| text(rng, &["w0", "w1", "w9"])).collect();
    let batch_size: Vec<Option<i64>> = (0..rows)
        .map(|_| (rng.below(4) > 0).then(|| rng.below(3) as i64))
        .collect();
    let ttft: Vec<Option<f64>> = (0..rows).map(|_| latency(rng)).collect();
    RecordBatch::try_from_iter([
        (
            "ts",
            Arc::new(TimestampNanosecondArray::from(ts)) as ArrayRef,
        ),
        ("worker", Arc::new(StringArray::from(worker)) as ArrayRef),
        (
            "batch_size",
            Arc::new(Int64Array::from(batch_size)) as ArrayRef,
        ),
        ("ttft_ms", Arc::new(Float64Array::from(ttft)) as ArrayRef),
    ])
    .unwrap()
}

fn dim_text(batch: &RecordBatch, name: &str, row: usize) -> String {
    let Some(column) = batch.column_by_name(name) else {
        return String::new();
    };
    if column.is_null(row) {
        return String::new();
    }
    match column.data_type() {
        DataType::Utf8 => column.as_string::<i32>().value(row).to_string(),
        DataType::Int64 => column
            .as_primitive::<arrow::datatypes::Int64Type>()
            .value(row)
            .to_string(),
        other => panic!("dimension of type {other}"),
    }
}

fn f64_at(batch: &RecordBatch, name: &str, row: usize) -> Option<f64> {
    let column = batch.column_by_name(name)?;
    let values = column.as_primitive::<arrow::datatypes::Float64Type>();
    values.is_valid(row).then(|| values.value(row))
}

fn i64_at(batch: &RecordBatch, name: &str, row: usize) -> u64 {
    batch
        .column_by_name(name)
        .map(|c| c.as_primitive::<arrow::datatypes::Int64Type>())
        .filter(|c| c.is_valid(row))
        .map_or(0, |c| c.value(row).max(0) as u64)
}

fn str_is(batch: &RecordBatch, name: &str, row: usize, want: &str) -> bool {
    batch
        .column_by_name(name)
        .map(|c| c.as_string::<i32>())
        .is_some_and(|c| c.is_valid(row) && c.value(row) == want)
}

/// The straightforward per-row rollup (what `add_requests` did before it was optimized).
fn reference_rollup(spec: &RollupSpec, batches: &[RecordBatch]) -> (Rollup, AddStats) {
    let max = spec.max_combinations.max(1);
    let mut ids: HashMap<Vec<String>, u32> = HashMap::new();
    let mut combos: Vec<Box<[String]>> = Vec::new();
    let mut cells: BTreeMap<(i64, u32), Cell> = BTreeMap::new();
    let mut stats = AddStats::default();
    for batch in batches {
        let ts = batch
            .column_by_name("ts")
            .unwrap()
            .as_primitive::<arrow::datatypes::TimestampNanosecondType>();
        for row in 0..batch.num_rows() {
            if ts.is_null(row) {
                continue;
            }
            let values: Vec<String> = spec
                .dimensions
                .iter()
                .map(|d| dim_text(batch, d, row))
                .collect();
            let (combo, folded) = match ids.get(&values) {
                Some(&id) => (id, false),
                None => {
                    let over = combos.len() >= max;
                    let key = if over {
                        vec![OTHER.to_string(); spec.dimensions.len()]
                    } else {
                        values
                    };
                    let next = combos.len() as u32;
                    let id = *ids.entry(key.clone()).or_insert_with(|| {
                        combos.push(key.into_boxed_slice());
                        next
                    });
                    (id, over)
                }
            };
            stats.folded_rows += u64::from(folded);
            let minute = ts.value(row).div_euclid(MINUTE_NS) * MINUTE_NS;
            let cell = cells.entry((minute, combo)).or_default();
            cell.requests += 1;
            cell.errors += u64::from(str_is(batch, "status", row, "error"));
            cell.truncated += u64::from(str_is(batch, "finish_reason", row, "length"));
            cell.input_tokens += i64_at(batch, "input_tokens", row);
            cell.output_tokens += i64_at(batch, "output_tokens", row);
            cell.cached_tokens += i64_at(batch, "cached_tokens", row);
            for sli in LatencySli::ALL {
                if let Some(v) = f64_at(batch, sli.column(), row)
                    && !cell.sketches[sli.slot()].add(v)
                {
                    stats.invalid_values += 1;
                }
            }
            stats.rows += 1;
        }
    }
    let mut rollup = Rollup::new(spec);
    rollup.combos = combos;
    rollup.cells = cells;
    rollup.folded_rows = stats.folded_rows;
    (rollup, stats)
}

fn check(seed: u64, spec: &RollupSpec, batches: &[RecordBatch]) {
    let mut rollup = Rollup::new(spec);
    let mut stats = AddStats::default();
    for batch in batches {
        let s = rollup.add_requests(batch).unwrap();
        stats.rows += s.rows;
        stats.folded_rows += s.folded_rows;
        stats.invalid_values += s.invalid_values;
    }
    let (mut reference, want_stats) = reference_rollup(spec, batches);
    assert_eq!(stats, want_stats, "seed {seed}");
    assert_eq!(rollup.combos, reference.combos, "seed {seed}");
    assert!(rollup.encode() == reference.encode(), "seed {seed}");
    rollup.seal();
    reference.seal();
    assert!(rollup.hour_cells == reference.hour_cells, "seed {seed}");
    assert!(rollup.encode() == reference.encode(), "seed {seed}");
    // the index still finds every combination after the rows: a decoded copy answers alike
    let decoded = Rollup::decode(&rollup.encode()).unwrap();
    assert_eq!(decoded.encode(), rollup.encode(), "seed {seed}");
}

#[test]
fn random_batches_roll_up_like_the_per_row_reference() {
    const HOUR: i64 = 3_600_000_000_000;
    let start = 1_764_381_600_000_000_000;
    for seed in 0..24u64 {
        let mut rng = Rng::new(seed);
        let spec = RollupSpec {
            dimensions: [
                "service",
                "worker",
                "batch_size",
                "model",
                "absent",
                "tenant",
            ]
            .map(String::from)
            .to_vec(),
            // small budgets fold, large ones keep every combination
            max_combinations: pick(&mut rng, &[1, 7, 60, 400, 20_000]),
        };
        let mut batches = Vec::new();
        for b in 0..1 + rng.below(5) {
            // batches overlap in time, so later ones add to existing cells
            let offset = rng.below(3) as i64 * HOUR / 2;
            let rows = pick(&mut rng, &[0, 1, 50, 700, 3000]);
            let records = random_records(&mut rng, rows, start + offset, 3 * HOUR);
            batches.push(RequestRecord::to_batch(&records));
            if b % 2 == 1 {
                batches.push(sparse_batch(&mut rng, 200, start + offset));
            }
        }
        check(seed, &spec, &batches);
    }
}

#[test]
fn the_reference_check_catches_a_difference() {
    let mut rng = Rng::new(99);
    let spec = RollupSpec {
        dimensions: vec!["worker".into()],
        max_combinations: 100,
    };
    let batch = RequestRecord::to_batch(&random_records(&mut rng, 500, 0, MINUTE_NS * 90));
    let mut rollup = Rollup::new(&spec);
    rollup.add_requests(&batch).unwrap();
    let (mut reference, _) = reference_rollup(&spec, std::slice::from_ref(&batch));
    assert!(rollup.encode() == reference.encode());
    // one value more in one sketch is a different encoding
    reference.cells.values_mut().next().unwrap().sketches[2].add(42.0);
    assert!(rollup.encode() != reference.encode());
}
