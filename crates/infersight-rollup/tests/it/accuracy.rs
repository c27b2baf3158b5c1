//! Rollup accuracy over a simulated day: p50/p95/p99 per slice and fleet-wide, answered from
//! per-minute sketches merged across rollup parts, within 1 % of the exact quantile.

use arrow::array::RecordBatch;
use infersight_model::RequestRecord;
use infersight_model::rng::SplitMix64 as Rng;
use infersight_model::tables::RequestBatchBuilder;
use infersight_rollup::sketch::RELATIVE_ACCURACY;
use infersight_rollup::{Rollup, RollupSpec, Sli, SliQuery, query_rollups};

const DAY_START_NS: i64 = 1_764_374_400_000_000_000; // 2025-11-29T00:00:00Z
const MINUTE_NS: i64 = 60_000_000_000;

/// A day of traffic: diurnal rate, 8 workers × 3 model versions, lognormal TTFT whose median
/// depends on the worker and the hour, with a heavy tail on one version.
fn simulated_day(seed: u64) -> Vec<RequestRecord> {
    let mut rng = Rng::new(seed);
    let mut records = Vec::new();
    for minute in 0..1440i64 {
        let hour = minute as f64 / 60.0;
        let rate = 40.0 + 30.0 * (std::f64::consts::PI * (hour - 6.0) / 12.0).sin();
        let n = rate.max(5.0) as i64;
        for i in 0..n {
            let worker = (rng.uniform() * 8.0) as usize;
            let version = (rng.uniform() * 3.0) as usize;
            let median = 150.0 * (1.0 + worker as f64 * 0.1) * (1.0 + 0.3 * (hour / 24.0));
            let sigma = if version == 2 { 1.1 } else { 0.5 };
            let ttft = median * (sigma * rng.normal()).exp();
            records.push(RequestRecord {
                ts: DAY_START_NS + minute * MINUTE_NS + i * (MINUTE_NS / n),
                worker: Some(format!("worker-{worker}")),
                model_version: Some(format!("r{version}")),
                ttft_ms: Some(ttft),
                e2e_ms: Some(ttft * 4.0 + rng.uniform() * 100.0),
                ..RequestRecord::default()
            });
        }
    }
    records
}

fn batch(records: &[RequestRecord]) -> RecordBatch {
    let mut builder = RequestBatchBuilder::new();
    for r in records {
        builder.push(r);
    }
    builder.finish()
}

fn exact(mut values: Vec<f64>, q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    values[(q * (values.len() - 1) as f64).floor() as usize]
}

#[test]
fn a_day_of_rollups_matches_exact_quantiles_within_one_percent() {
    let records = simulated_day(2026);
    let spec = RollupSpec {
        dimensions: vec!["worker".into(), "model_version".into()],
        max_combinations: 1000,
    };
    // as the store does: one rollup per flush (every ~10 minutes), persisted and read back
    let parts: Vec<Rollup> = records
        .chunks(4_000)
        .map(|chunk| {
            let mut part = Rollup::new(&spec);
            part.add_requests(&batch(chunk)).unwrap();
            Rollup::decode(&part.encode()).unwrap()
        })
        .collect();
    let refs: Vec<&Rollup> = parts.iter().collect();
    let quantiles = vec![0.5, 0.95, 0.99];
    for (sli, column) in [("ttft", 0usize), ("e2e", 1)] {
        let value = |r: &RequestRecord| if column == 0 { r.ttft_ms } else { r.e2e_ms };
        for by in [
            vec![],
            vec!["model_version".to_string()],
            vec!["worker".to_string(), "model_version".to_string()],
        ] {
            let series = query_rollups(
                &refs,
                &SliQuery {
                    sli: Sli::parse(sli).unwrap(),
                    quantiles: quantiles.clone(),
                    by: by.clone(),
                    filters: Vec::new(),
                    since_ns: None,
                    until_ns: None,
                    step_ns: None,
                },
            )
            .unwrap();
            let expected_groups = match by.len() {
                0 => 1,
                1 => 3,
                _ => 24,
            };
            assert_eq!(series.len(), expected_groups, "{sli} by {by:?}");
            for s in &series {
                let members: Vec<f64> = records
                    .iter()
                    .filter(|r| {
                        s.group.iter().all(|(d, v)| {
                            let actual = if d == "worker" {
                                &r.worker
                            } else {
                                &r.model_version
                            };
                            actual.as_deref() == Some(v.as_str())
                        })
                    })
                    .filter_map(value)
                    .collect();
                assert_eq!(s.points[0].requests, members.len() as u64);
                for (i, &q) in quantiles.iter().enumerate() {
                    let want = exact(members.clone(), q);
                    let got = s.points[0].values[i].unwrap();
                    let err = (got - want).abs() / want;
                    assert!(
                        err <= RELATIVE_ACCURACY + 1e-9,
                        "{sli} {:?} q={q}: rollup {got} vs exact {want} ({err:.4})",
                        s.group
                    );
                }
            }
        }
    }
}

#[test]
fn ranges_that_cut_hours_mix_hour_and_minute_cells_exactly() {
    let records = simulated_day(7);
    let spec = RollupSpec {
        dimensions: vec!["worker".into()],
        max_combinations: 100,
    };
    let mut unsealed = Rollup::new(&spec);
    unsealed.add_requests(&batch(&records)).unwrap();
    let mut sealed = unsealed.clone();
    sealed.seal();
    let since = DAY_START_NS + (3 * 60 + 17) * MINUTE_NS;
    let until = DAY_START_NS + (9 * 60 + 42) * MINUTE_NS;
    for (rollup, step) in [&unsealed, &sealed].into_iter().flat_map(|r| {
        [None, Some(60 * MINUTE_NS), Some(5 * MINUTE_NS)]
            .into_iter()
            .map(move |step| (r, step))
    }) {
        let series = query_rollups(
            &[rollup],
            &SliQuery {
                sli: Sli::parse("ttft").unwrap(),
                quantiles: vec![0.99],
                by: Vec::new(),
                filters: Vec::new(),
                since_ns: Some(since),
                until_ns: Some(until),
                step_ns: step,
            },
        )
        .unwrap();
        let total: u64 = series[0].points.iter().map(|p| p.requests).sum();
        let in_range: Vec<f64> = records
            .iter()
            .filter(|r| r.ts >= since && r.ts < until)
            .filter_map(|r| r.ttft_ms)
            .collect();
        assert_eq!(total, in_range.len() as u64, "step {step:?}");
        if step.is_none() {
            let want = exact(in_range, 0.99);
            let got = series[0].points[0].values[0].unwrap();
            assert!(
                (got - want).abs() / want <= RELATIVE_ACCURACY + 1e-9,
                "{got} vs {want}"
            );
        }
    }
}
