//! Head-sampled request rows (each with `infersight.sample_weight` in `attrs`, as the OTLP
//! conversion writes it from `tracestate`): a seeded fleet whose workers are sampled at different
//! probabilities, one of them fractional. Rates and quantiles from the weighted rollup match the
//! unsampled truth within tolerance; the same rows counted once each do not.

use arrow::array::RecordBatch;
use infersight_model::RequestRecord;
use infersight_model::normalize::SAMPLE_WEIGHT_KEY;
use infersight_model::rng::SplitMix64 as Rng;
use infersight_rollup::{Rollup, RollupSpec, Sli, SliQuery, query_rollups};

const HOUR_START_NS: i64 = 1_764_374_400_000_000_000;
const MINUTE_NS: i64 = 60_000_000_000;

/// Worker, share of traffic, sampling probability, error rate, median e2e (ms).
const WORKERS: [(&str, f64, f64, f64, f64); 3] = [
    ("worker-a", 0.5, 0.125, 0.02, 400.0),
    ("worker-b", 0.3, 0.5, 0.10, 1_600.0),
    ("worker-c", 0.2, 0.3, 0.05, 800.0),
];

/// An hour of traffic, every request (the truth), and the rows head sampling kept.
fn fleet(seed: u64) -> (Vec<RequestRecord>, Vec<RequestRecord>) {
    let mut rng = Rng::new(seed);
    let (mut all, mut sampled) = (Vec::new(), Vec::new());
    for minute in 0..60i64 {
        for i in 0..300i64 {
            let pick = rng.uniform();
            let mut cumulative = 0.0;
            let &(worker, _, probability, error_rate, median) = WORKERS
                .iter()
                .find(|w| {
                    cumulative += w.1;
                    pick < cumulative
                })
                .unwrap_or(&WORKERS[2]);
            let row = RequestRecord {
                ts: HOUR_START_NS + minute * MINUTE_NS + i * (MINUTE_NS / 300),
                worker: Some(worker.to_string()),
                model: Some("llama-3-8b".to_string()),
                status: Some(
                    if rng.uniform() < error_rate {
                        "error"
                    } else {
                        "ok"
                    }
                    .to_string(),
                ),
                e2e_ms: Some(median * (0.3 * rng.normal()).exp()),
                attrs: "{}".to_string(),
                ..RequestRecord::default()
            };
            if rng.uniform() < probability {
                let mut kept = row.clone();
                kept.attrs = format!(r#"{{"{SAMPLE_WEIGHT_KEY}":{}}}"#, 1.0 / probability);
                sampled.push(kept);
            }
            all.push(row);
        }
    }
    (all, sampled)
}

fn rollup(rows: &[RequestRecord]) -> Rollup {
    let spec = RollupSpec {
        dimensions: vec!["worker".into()],
        max_combinations: 100,
    };
    let mut rollup = Rollup::new(&spec);
    // as the store does, in flushes of a few thousand rows
    for chunk in rows.chunks(1_500) {
        let batch: RecordBatch = RequestRecord::to_batch(chunk);
        rollup.add_requests(&batch).unwrap();
    }
    rollup
}

/// (requests, error rate, p50 e2e, p95 e2e) of the whole fleet.
fn fleet_figures(rollup: &Rollup) -> (f64, f64, f64, f64) {
    let ask = |sli: &str, quantiles: Vec<f64>| {
        let series = query_rollups(
            &[rollup],
            &SliQuery {
                sli: Sli::parse(sli).unwrap(),
                quantiles,
                by: Vec::new(),
                filters: Vec::new(),
                since_ns: None,
                until_ns: None,
                step_ns: None,
            },
        )
        .unwrap();
        series[0].points[0].clone()
    };
    let errors = ask("error_rate", Vec::new());
    let e2e = ask("e2e", vec![0.5, 0.95]);
    (
        errors.requests as f64,
        errors.values[0].unwrap(),
        e2e.values[0].unwrap(),
        e2e.values[1].unwrap(),
    )
}

fn quantile(mut values: Vec<f64>, q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    values[(q * (values.len() - 1) as f64).floor() as usize]
}

#[test]
fn weighted_rollups_of_a_head_sampled_fleet_match_the_unsampled_truth() {
    for seed in [1_u64, 19, 2026] {
        let (all, sampled) = fleet(seed);
        let truth_errors = all
            .iter()
            .filter(|r| r.status.as_deref() == Some("error"))
            .count() as f64;
        let e2e: Vec<f64> = all.iter().filter_map(|r| r.e2e_ms).collect();
        let truth = (
            all.len() as f64,
            truth_errors / all.len() as f64,
            quantile(e2e.clone(), 0.5),
            quantile(e2e, 0.95),
        );

        let weighted = fleet_figures(&rollup(&sampled));
        let relative = |got: f64, want: f64| (got - want).abs() / want;
        assert!(
            relative(weighted.0, truth.0) < 0.05,
            "seed {seed}: {weighted:?} vs {truth:?}"
        );
        assert!(
            (weighted.1 - truth.1).abs() < 0.01,
            "seed {seed}: {weighted:?} vs {truth:?}"
        );
        assert!(
            relative(weighted.2, truth.2) < 0.08,
            "seed {seed}: {weighted:?} vs {truth:?}"
        );
        assert!(
            relative(weighted.3, truth.3) < 0.08,
            "seed {seed}: {weighted:?} vs {truth:?}"
        );

        // the same rows, each counted once: the sample's mix, not the fleet's
        let once: Vec<RequestRecord> = sampled
            .iter()
            .map(|r| RequestRecord {
                attrs: "{}".to_string(),
                ..r.clone()
            })
            .collect();
        let unweighted = fleet_figures(&rollup(&once));
        assert!(relative(unweighted.0, truth.0) > 0.5, "{unweighted:?}");
        assert!(
            (unweighted.1 - truth.1).abs() > 0.015,
            "{unweighted:?} vs {truth:?}"
        );
        assert!(
            relative(unweighted.2, truth.2) > 0.2,
            "{unweighted:?} vs {truth:?}"
        );
    }
}

#[test]
fn rows_without_a_weight_count_once_beside_weighted_ones() {
    let row = |ts: i64, attrs: &str| RequestRecord {
        ts: HOUR_START_NS + ts,
        worker: Some("w".into()),
        e2e_ms: Some(100.0),
        attrs: attrs.to_string(),
        ..RequestRecord::default()
    };
    let rows = vec![
        row(0, "{}"),
        row(
            1,
            &format!(r#"{{"a":1,"{SAMPLE_WEIGHT_KEY}":4.0,"z":"x"}}"#),
        ),
        // text that spells the key inside a string value is not a weight
        row(2, &format!(r#"{{"note":"\"{SAMPLE_WEIGHT_KEY}\":9"}}"#)),
        // a weight below 1 is not a probability's inverse: counted once
        row(3, &format!(r#"{{"{SAMPLE_WEIGHT_KEY}":0.5}}"#)),
    ];
    let (requests, ..) = fleet_figures(&rollup(&rows));
    assert_eq!(requests, 7.0);
}
