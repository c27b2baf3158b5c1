//! Localization of counts estimated from sampled rows (head-sampled traces counted by their
//! weights): each leaf's significance must be judged on the rows it holds, not on the weighted
//! estimate, or sampling noise is blamed and true causes are over- or under-stated.

use infersight_model::rng::SplitMix64;

use super::{DerivedMeasure, LeafTable, Params, localize_derived};

/// Dimensions `a` (5 values), `b` (8), `c` (6): 240 leaves.
fn table() -> LeafTable {
    let mut table = LeafTable::new(["a", "b", "c"]);
    for a in 1..=5 {
        for b in 1..=8 {
            for c in 1..=6 {
                table.push_leaf(&[format!("a{a}"), format!("b{b}"), format!("c{c}")]);
            }
        }
    }
    table
}

fn in_slice(table: &LeafTable, leaf: usize, slice: &[(&str, &str)]) -> bool {
    slice.iter().all(|(name, value)| {
        let d = table
            .dimensions
            .iter()
            .position(|x| x.name == *name)
            .unwrap_or(usize::MAX);
        d < table.dimensions.len()
            && table.dimensions[d].values[table.code(leaf, d) as usize] == *value
    })
}

/// One window of one leaf: `requests` requests failing at `rate`, each kept with probability
/// `1 / weight` and counted `weight` times: (weighted errors, weighted requests).
fn sampled(rng: &mut SplitMix64, requests: u64, rate: f64, weight: f64) -> (f64, f64) {
    let (mut errors, mut kept) = (0.0, 0.0);
    for _ in 0..requests {
        let failed = rng.uniform() < rate;
        if rng.uniform() * weight < 1.0 {
            kept += weight;
            if failed {
                errors += weight;
            }
        }
    }
    (errors, kept)
}

/// An error-rate measure over the table, every leaf sampled at `1 / weight`; leaves in `slice`
/// fail at `slice_rate` in the incident, the rest at 2 % throughout.
fn measure(
    seed: u64,
    weight_of: impl Fn(&LeafTable, usize) -> f64,
    slice: &[(&str, &str)],
    slice_rate: f64,
) -> (LeafTable, DerivedMeasure) {
    let fleet = Fleet {
        requests: (200, 600),
        rate: 0.02,
    };
    measure_of(&fleet, seed, weight_of, slice, slice_rate)
}

/// Requests per leaf and window (uniform in `requests.0..requests.1`), and the rate of the
/// leaves outside the slice.
struct Fleet {
    requests: (u64, u64),
    rate: f64,
}

fn measure_of(
    fleet: &Fleet,
    seed: u64,
    weight_of: impl Fn(&LeafTable, usize) -> f64,
    slice: &[(&str, &str)],
    slice_rate: f64,
) -> (LeafTable, DerivedMeasure) {
    let table = table();
    let mut rng = SplitMix64::new(seed);
    let mut measure = DerivedMeasure::default();
    let (low, high) = fleet.requests;
    for leaf in 0..table.len() {
        let weight = weight_of(&table, leaf);
        let requests = low + (rng.uniform() * (high - low) as f64) as u64;
        let (base_errors, base_requests) = sampled(&mut rng, requests, fleet.rate, weight);
        let rate = if in_slice(&table, leaf, slice) {
            slice_rate
        } else {
            fleet.rate
        };
        let (errors, now) = sampled(&mut rng, requests, rate, weight);
        measure.numerator_forecast.push(base_errors);
        measure.denominator_forecast.push(base_requests);
        measure.numerator_real.push(errors);
        measure.denominator_real.push(now);
        measure.sample_weight.push(weight);
    }
    (table, measure)
}

fn keys(result: &super::Localization) -> Vec<String> {
    result
        .root_causes
        .iter()
        .map(super::RootCause::key)
        .collect()
}

/// Half the leaves (`c` in c1..c3: one service's spans, say) sampled at 1/8, the rest complete.
fn mixed(table: &LeafTable, leaf: usize) -> f64 {
    if ["c1", "c2", "c3"]
        .iter()
        .any(|c| in_slice(table, leaf, &[("c", c)]))
    {
        8.0
    } else {
        1.0
    }
}

#[test]
fn sampled_leaves_are_judged_on_their_rows() {
    let mut wrong_without = 0;
    for seed in 1..=8 {
        for (slice, rate) in [(&[("a", "a2"), ("b", "b6")][..], 0.3), (&[][..], 0.02)] {
            let (table, mut m) = measure(seed, mixed, slice, rate);
            let result = localize_derived(&table, &m, &Params::default()).unwrap();
            let want: Vec<String> = (!slice.is_empty())
                .then(|| "a=a2&b=b6".to_string())
                .into_iter()
                .collect();
            assert_eq!(keys(&result), want, "seed {seed}");
            assert!(!result.fleet_wide, "seed {seed}");
            // the same counts taken as complete: sampling noise of the sampled half is blamed
            m.sample_weight.clear();
            let unweighted = localize_derived(&table, &m, &Params::default()).unwrap();
            wrong_without += usize::from(keys(&unweighted) != want);
        }
    }
    assert!(wrong_without >= 2, "the test no longer tells the fix apart");
}

#[test]
fn a_cause_inside_the_sampled_part_is_found_with_its_share() {
    for seed in 11..=16 {
        let slice = [("a", "a3"), ("c", "c2")];
        let (table, m) = measure(seed, mixed, &slice, 0.25);
        let result = localize_derived(&table, &m, &Params::default()).unwrap();
        assert_eq!(keys(&result), vec!["a=a3&c=c2".to_string()], "seed {seed}");
        let cause = &result.root_causes[0];
        // the rate and the share of the excess are of the weighted estimate (the traffic),
        // within the sampling noise of a 1/8 sample of the whole fleet's excess
        assert!(
            (0.5..=2.0).contains(&cause.explained_fraction),
            "seed {seed}: {cause:?}"
        );
        assert!(
            (cause.real - 0.25).abs() < 0.07 && cause.forecast < 0.04,
            "seed {seed}: {cause:?}"
        );
    }
}

#[test]
fn a_sample_weight_per_leaf_is_checked() {
    let (table, mut m) = measure(1, mixed, &[], 0.02);
    m.sample_weight.truncate(3);
    assert!(localize_derived(&table, &m, &Params::default()).is_err());
    m.sample_weight = vec![f64::NAN; table.len()];
    assert!(localize_derived(&table, &m, &Params::default()).is_err());
}

/// Every leaf sampled at 1/10: each expects well under one failed request per window.
fn all_sampled(_: &LeafTable, _: usize) -> f64 {
    10.0
}

/// A sparse fleet with every trace kept at 1/10 (4–12 rows a leaf and window, 5 % of them
/// events: most leaves expect less than one): a slice where 70 % of the requests are events is
/// found, and nothing is found without it. The dispersion fitted by comparing squared Pearson
/// residuals with χ²(1) read the discreteness of such counts as over-dispersion of about 2 and
/// found the slice in 2 of these 8 seeds; the quantile residuals find it in 7.
#[test]
fn a_slice_of_a_sparse_sampled_fleet_is_found() {
    let fleet = Fleet {
        requests: (40, 120),
        rate: 0.05,
    };
    let slice = [("a", "a2"), ("b", "b6")];
    let found = (41..=48)
        .filter(|&seed| {
            let (table, m) = measure_of(&fleet, seed, all_sampled, &slice, 0.7);
            let result = localize_derived(&table, &m, &Params::default()).unwrap();
            keys(&result) == ["a=a2&b=b6"]
        })
        .count();
    assert!(found >= 6, "found in {found} of 8 seeds");
    for seed in 41..=56 {
        let (table, m) = measure_of(&fleet, seed, all_sampled, &[], fleet.rate);
        let result = localize_derived(&table, &m, &Params::default()).unwrap();
        assert!(
            result.root_causes.is_empty() && !result.fleet_wide,
            "seed {seed}: {:?}",
            keys(&result)
        );
    }
}
