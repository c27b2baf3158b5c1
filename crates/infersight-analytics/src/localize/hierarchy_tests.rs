//! Hierarchical testing around significant parents ([`Around::significant`]): a slice inside
//! a combination a coarser scan found significant is tested at the multiplicity of that
//! combination's descendants, not of the whole lattice; nothing else is.

use infersight_model::rng::SplitMix64;

use super::{Around, DerivedMeasure, LeafTable, Localization, Params, localize_derived_around};

/// Dimensions `a` (5 values), `b` (8), `c` (6), `d` (10): 2,400 leaves, 4,158 candidate
/// elements up to four attributes (a bar of ln(4158 / α) = 31.4 at the default α); the 77
/// that refine `a=a2 & b=b6` have a bar of ln(77 / α) = 27.4.
fn table() -> LeafTable {
    let mut table = LeafTable::new(["a", "b", "c", "d"]);
    for a in 1..=5 {
        for b in 1..=8 {
            for c in 1..=6 {
                for d in 1..=10 {
                    table.push_leaf(&[
                        format!("a{a}"),
                        format!("b{b}"),
                        format!("c{c}"),
                        format!("d{d}"),
                    ]);
                }
            }
        }
    }
    table
}

fn value(table: &LeafTable, leaf: usize, dimension: usize) -> &str {
    &table.dimensions[dimension].values[table.code(leaf, dimension) as usize]
}

/// Every leaf 100 requests and 4 events in each window, except the slice `a2 & b6 & c2` (10
/// leaves, 40 events expected): 96 events in the incident, a scan statistic of 29.7, between
/// the two bars above.
fn measure(table: &LeafTable) -> DerivedMeasure {
    let mut measure = DerivedMeasure::default();
    let mut extra = 56;
    for leaf in 0..table.len() {
        let in_slice = value(table, leaf, 0) == "a2"
            && value(table, leaf, 1) == "b6"
            && value(table, leaf, 2) == "c2";
        let rise = if in_slice { extra.min(6) } else { 0 };
        extra -= rise;
        measure.numerator_forecast.push(4.0);
        measure.denominator_forecast.push(100.0);
        measure.numerator_real.push(4.0 + rise as f64);
        measure.denominator_real.push(100.0);
    }
    assert_eq!(extra, 0);
    measure
}

fn pairs(of: &[(&str, &str)]) -> Vec<(String, String)> {
    of.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn causes(result: &Localization) -> Vec<String> {
    result
        .root_causes
        .iter()
        .map(super::RootCause::key)
        .collect()
}

fn localize(
    table: &LeafTable,
    measure: &DerivedMeasure,
    parents: &[Vec<(String, String)>],
) -> Localization {
    let around = Around {
        known: &[],
        significant: parents,
    };
    localize_derived_around(table, measure, &Params::default(), around).unwrap()
}

#[test]
fn a_slice_under_a_significant_parent_is_tested_at_the_parents_multiplicity() {
    let table = table();
    let measure = measure(&table);
    // the lattice's bar: nothing, the slice closest under it
    let alone = localize(&table, &measure, &[]);
    assert!(causes(&alone).is_empty());
    assert!((alone.bar - 31.4).abs() < 0.05, "{}", alone.bar);
    let closest = alone
        .strongest_below_bar
        .as_ref()
        .expect("the closest element");
    assert_eq!(closest.key(), "a=a2&b=b6&c=c2");
    assert!((closest.score - 29.7).abs() < 0.05, "{closest:?}");
    // the parent's: the slice, with its excess (naming the closest marked nothing explained)
    let found = localize(&table, &measure, &[pairs(&[("a", "a2"), ("b", "b6")])]);
    assert_eq!(causes(&found), ["a=a2&b=b6&c=c2"]);
    assert!(found.strongest_below_bar.is_some());
    let cause = &found.root_causes[0];
    assert!((cause.score - 29.7).abs() < 0.05, "{cause:?}");
    assert!((cause.explained_fraction - 1.0).abs() < 1e-9, "{cause:?}");
    // a parent of one attribute has 693 descendants (a bar of 29.6): the slice still passes
    let wide = localize(&table, &measure, &[pairs(&[("a", "a2")])]);
    assert_eq!(causes(&wide), ["a=a2&b=b6&c=c2"]);
}

#[test]
fn a_parent_the_slice_is_not_under_gates_nothing() {
    let table = table();
    let measure = measure(&table);
    for parent in [
        pairs(&[("a", "a3"), ("b", "b6")]),
        pairs(&[("a", "a2"), ("b", "b5")]),
        pairs(&[("a", "a2"), ("e", "e1")]),
        pairs(&[("a", "a2"), ("b", "b66")]),
        Vec::new(),
    ] {
        let result = localize(&table, &measure, std::slice::from_ref(&parent));
        assert!(
            causes(&result).is_empty(),
            "{parent:?}: {:?}",
            causes(&result)
        );
    }
}

#[test]
fn after_a_change_of_the_whole_fleet_nothing_is_gated() {
    let table = table();
    // every leaf's events doubled: the fleet changed, and so did the parent and each refinement
    let mut measure = measure(&table);
    for real in &mut measure.numerator_real {
        *real *= 2.0;
    }
    // a parent that holds a fifth of the excess (a narrower one holds too little of it to be
    // taken at all)
    let parent = pairs(&[("a", "a2")]);
    let result = localize(&table, &measure, std::slice::from_ref(&parent));
    assert!(result.fleet_wide, "{:?}", causes(&result));
    assert!(causes(&result).is_empty(), "{:?}", causes(&result));
}

/// A Poisson draw with mean `mean` (Knuth's product of uniforms; small means only).
fn poisson(rng: &mut SplitMix64, mean: f64) -> f64 {
    let limit = (-mean).exp();
    let (mut k, mut product) = (0.0, rng.uniform());
    while product > limit {
        k += 1.0;
        product *= rng.uniform();
    }
    k
}

#[test]
fn gates_on_every_pair_find_nothing_in_noise() {
    let table = table();
    let every_pair: Vec<Vec<(String, String)>> = (1..=5)
        .flat_map(|a| {
            (1..=8).map(move |b| vec![("a".into(), format!("a{a}")), ("b".into(), format!("b{b}"))])
        })
        .collect();
    for seed in 1..=12 {
        let mut rng = SplitMix64::new(seed);
        let mut measure = DerivedMeasure::default();
        for _ in 0..table.len() {
            measure.numerator_forecast.push(poisson(&mut rng, 4.0));
            measure.denominator_forecast.push(100.0);
            measure.numerator_real.push(poisson(&mut rng, 4.0));
            measure.denominator_real.push(100.0);
        }
        let result = localize(&table, &measure, &every_pair);
        assert!(
            result.root_causes.is_empty(),
            "seed {seed}: {:?}",
            causes(&result)
        );
    }
}
