//! The scan engine behind [`super::localize_additive`] and [`super::localize_derived`]: fits the
//! noise model, enumerates the cuboids (dimension subsets) of the lattice, and greedily picks the
//! element with the highest expectation-based scan statistic until nothing significant is left.
//! Inputs are already validated by the caller (lengths, finiteness, value ids).

use std::collections::HashMap;

use super::{Around, LeafTable, Localization, NoiseModel, Params, RootCause};
use crate::detect::stats::{erfc, normal_quantile, poisson_sf};

#[cfg(test)]
mod dispersion_tests;

/// The noise is fitted on this quantile of the squared standardized residuals, not the median:
/// a cause may cover more than half of the leaves (one of two models), and the median residual
/// would then be an anomalous one. With the lower quartile, up to 75 % of leaves may deviate.
const NOISE_QUANTILE: f64 = 0.25;
/// The `NOISE_QUANTILE` quantile of χ²(1): squared standard-normal residuals have it.
const CHI2_1_NOISE_QUANTILE: f64 = 0.101_531_0;
/// Leaves expecting at least this many events are judged by their Pearson residual (close
/// enough to normal); below, by a quantile residual (see [`count_dispersion`]).
const CONTINUOUS_FROM_EXPECTED: f64 = 100.0;
/// Floor of an element's effective forecast count, so that elements made only of new leaves
/// (forecast 0) get a finite score.
const MIN_EFFECTIVE_FORECAST: f64 = 0.5;
/// The normal rest of an element split in two causes holds at least this share of its
/// forecast (see [`Scan::split`]).
const MIN_NORMAL_SHARE: f64 = 0.25;
/// Two parts must outscore the element they split by this many times the significance
/// threshold (one more cause, and as much again against splitting by chance).
const SPLIT_GAIN: f64 = 2.0;
/// A part of an element whose scan statistic is at most this far below the element's explains
/// it as well (a log-likelihood ratio of e¹: "not worth more than a bare mention" on Kass and
/// Raftery's scale); see [`Scan::trim`].
const TRIM_MAX_LOSS: f64 = 1.0;
/// Up to this many elements a cuboid is indexed with a dense array, beyond with a hash map.
const DENSE_INDEX_LIMIT: u64 = 1 << 20;

/// One cuboid: a subset of dimensions and the element each leaf belongs to in it.
struct Cuboid {
    /// Bit `j` set when table dimension `j` is part of the cuboid.
    mask: u64,
    /// Table dimension indices, ascending.
    dims: Vec<usize>,
    element_of_leaf: Vec<u32>,
    /// One leaf of each element, to read the element's values back.
    first_leaf: Vec<usize>,
}

/// Effective counts (observed, over the noise scale) of a leaf or a sum of leaves: events,
/// their forecast, and the trials they are events among (0 when the measure has none: see
/// [`Tally::statistic`]).
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    real: f64,
    forecast: f64,
    trials: f64,
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, other: Tally) {
        self.real += other.real;
        self.forecast += other.forecast;
        self.trials += other.trials;
    }
}

impl Tally {
    /// The scan statistic of "these events changed by a common factor": Bernoulli (Kulldorff's
    /// case-control model: events among trials, the forecast share against the actual) when
    /// the trials hold the events and their forecast, else Poisson (expectation-based). The
    /// two agree for rare events; as the share of events nears 1 only the Bernoulli sees how
    /// unlikely it is (25 slow requests of 25, where 2 were expected: Poisson 40.1, Bernoulli
    /// 63.1).
    fn statistic(self) -> f64 {
        let (real, trials) = (self.real, self.trials);
        let forecast = self.forecast.max(MIN_EFFECTIVE_FORECAST);
        if trials <= forecast || trials < real {
            return poisson_statistic(real, forecast);
        }
        let rest = |events: f64| trials - events;
        if real <= 0.0 {
            return trials * (trials / rest(forecast)).ln();
        }
        let holds = real * (real / forecast).ln();
        let misses = if rest(real) > 0.0 {
            rest(real) * (rest(real) / rest(forecast)).ln()
        } else {
            0.0
        };
        (holds + misses).max(0.0)
    }
}

/// Per-element sums of one cuboid over the leaves not yet explained.
#[derive(Default, Clone)]
struct Sums {
    tally: Vec<Tally>,
}

/// `sample_weight`: per leaf, the variance weight of one counted event (see
/// [`super::DerivedMeasure::sample_weight`]); empty when every event was observed. Values are
/// turned into observed units before the noise is fitted, so a sampled leaf's significance is
/// that of the rows it holds, while deviations and fractions stay in the caller's units.
pub(super) fn localize(
    table: &LeafTable,
    real: &[f64],
    forecast: &[f64],
    trials: &[f64],
    sample_weight: &[f64],
    params: &Params,
    around: Around<'_>,
) -> Localization {
    let n_leaves = table.len();
    let (dims, skipped_dimensions) = scanned_dimensions(table, params);
    let noise = resolve_noise(params.noise, real);
    let total_deviation: f64 = real.iter().sum::<f64>() - forecast.iter().sum::<f64>();

    let mut result = Localization {
        noise,
        skipped_dimensions,
        ..Localization::default()
    };
    if n_leaves == 0 || dims.is_empty() {
        return result;
    }

    let effective = effective_tallies(noise, (real, forecast, trials), sample_weight);
    let mut scan = Scan::new(table, &dims, params, effective);
    let n_candidates: usize = 1 + scan
        .cuboids
        .iter()
        .map(|c| c.first_leaf.len())
        .sum::<usize>();
    let significance = (n_candidates as f64 / params.alpha).ln();
    result.bar = significance;
    let mut largest_cause_deviation = 0.0_f64;
    for elements in around.known {
        if let Some(mut cause) = scan.explain_known(table, elements, significance, real, forecast) {
            largest_cause_deviation =
                largest_cause_deviation.max((cause.real - cause.forecast).abs());
            cause.explained_fraction = if total_deviation != 0.0 {
                (cause.real - cause.forecast) / total_deviation
            } else {
                0.0
            };
            result.root_causes.push(cause);
        }
    }

    let mut accepting = Accepting {
        real,
        forecast,
        total_deviation,
        largest_cause_deviation,
        min_explained: params.min_explained,
    };
    while result.root_causes.len() < params.max_root_causes {
        let (root_score, best) = scan.best_element();
        let Some((best_cuboid, best_element, best_score)) = best else {
            break;
        };
        if best_score.max(root_score) < significance {
            // explaining marks leaves: what the gates below scan must stay unexplained
            let unexplained = scan.unexplained.clone();
            let mut closest = scan.explain(table, best_cuboid, best_element, real, forecast);
            scan.unexplained = unexplained;
            closest.score = best_score;
            result.strongest_below_bar = Some(closest);
            break;
        }
        let best_score = best_score.max(root_score);
        // Coarsest ancestor (fewest attributes) that explains nearly as well; the fleet first.
        let good_enough = (1.0 - params.coarsen_tolerance) * best_score;
        if root_score >= good_enough {
            result.fleet_wide = true;
            break;
        }
        let (chosen_cuboid, chosen_element, chosen_score) =
            scan.coarsest_ancestor(best_cuboid, best_element, good_enough, 0);
        let chosen = scan
            .split(chosen_cuboid, chosen_element, chosen_score, significance)
            .or_else(|| scan.trim(chosen_cuboid, chosen_element, chosen_score, significance))
            .unwrap_or((chosen_cuboid, chosen_element, chosen_score));
        if !accepting.accept(&mut scan, &mut result, table, chosen) {
            break;
        }
    }
    // Hierarchical testing (see `Around`): the refinements of each significant parent, at the
    // bar of its own descendants, once nothing passes the lattice's; a change of the whole
    // fleet lifts every slice, refinements included, so nothing is gated after one.
    let gates = if result.fleet_wide {
        &[][..]
    } else {
        around.significant
    };
    for parent in gates {
        let Some(gate) = Gate::of(table, &scan, parent) else {
            continue;
        };
        let bar = (gate.candidates as f64 / params.alpha).ln();
        while result.root_causes.len() < params.max_root_causes {
            scan.best_element(); // refills the sums over the unexplained leaves
            let Some((cuboid, element, score)) = scan.best_within(table, &gate) else {
                break;
            };
            if score < bar {
                break;
            }
            let good_enough = (1.0 - params.coarsen_tolerance) * score;
            let (cuboid, element, score) =
                scan.coarsest_ancestor(cuboid, element, good_enough, gate.mask);
            let chosen = scan
                .trim(cuboid, element, score, bar)
                .filter(|&(c, e, _)| gate.holds(table, &scan.cuboids[c], e))
                .unwrap_or((cuboid, element, score));
            if !accepting.accept(&mut scan, &mut result, table, chosen) {
                break;
            }
        }
    }
    result
}

/// What taking an element as a cause needs besides the element.
struct Accepting<'a> {
    real: &'a [f64],
    forecast: &'a [f64],
    total_deviation: f64,
    /// The largest raw deviation of a cause taken so far.
    largest_cause_deviation: f64,
    min_explained: f64,
}

impl Accepting<'_> {
    /// Takes the element `(cuboid, element, score)` as a cause (replacing causes it holds, see
    /// [`remove_descendants`]); `false`, taking nothing, when its raw deviation over its
    /// unexplained leaves is under `min_explained` of the largest so far (or of the total).
    fn accept(
        &mut self,
        scan: &mut Scan,
        result: &mut Localization,
        table: &LeafTable,
        (cuboid, element, score): (usize, u32, f64),
    ) -> bool {
        let deviation = scan.unexplained_deviation(cuboid, element, self.real, self.forecast);
        let reference = self.largest_cause_deviation.max(self.total_deviation.abs());
        if deviation.abs() < self.min_explained * reference || deviation == 0.0 {
            return false;
        }
        self.largest_cause_deviation = self.largest_cause_deviation.max(deviation.abs());
        let mut cause = scan.explain(table, cuboid, element, self.real, self.forecast);
        cause.explained_fraction = if self.total_deviation != 0.0 {
            (cause.real - cause.forecast) / self.total_deviation
        } else {
            0.0
        };
        let merged_score = remove_descendants(
            &mut result.root_causes,
            table,
            &scan.cuboids[cuboid],
            element,
        );
        cause.score = score.max(merged_score);
        result.root_causes.push(cause);
        true
    }
}

/// Per leaf, its values in effective counts: observed rows (values over the leaf's sample
/// weight) over the noise scale (see [`effective_count_scale`]). Without `trials` (one per
/// leaf), 0 each: the Poisson statistic (see [`Tally::statistic`]).
fn effective_tallies(
    noise: NoiseModel,
    (real, forecast, trials): (&[f64], &[f64], &[f64]),
    sample_weight: &[f64],
) -> Vec<Tally> {
    let observed = |values: &[f64]| -> Vec<f64> {
        values
            .iter()
            .enumerate()
            .map(|(leaf, v)| v / sample_weight_of(sample_weight, leaf))
            .collect()
    };
    let (real_observed, forecast_observed) = (observed(real), observed(forecast));
    let scale = effective_count_scale(noise, &real_observed, &forecast_observed);
    let trials_observed = if trials.len() == real.len() {
        observed(trials)
    } else {
        vec![0.0; real.len()]
    };
    (0..real.len())
        .map(|leaf| Tally {
            real: real_observed[leaf] / scale[leaf],
            forecast: forecast_observed[leaf] / scale[leaf],
            trials: trials_observed[leaf] / scale[leaf],
        })
        .collect()
}

/// A significant parent's subtree (see [`Around`]): its dimensions' bits and values, and how
/// many elements of the lattice refine it (itself included).
struct Gate {
    mask: u64,
    pairs: Vec<(usize, u32)>,
    candidates: usize,
}

impl Gate {
    /// `None` when the parent names a dimension or value the table lacks, or more dimensions
    /// than a cuboid holds.
    fn of(table: &LeafTable, scan: &Scan, parent: &[(String, String)]) -> Option<Gate> {
        let mut mask = 0_u64;
        let mut pairs = Vec::with_capacity(parent.len());
        for (name, value) in parent {
            let dimension = table.dimensions.iter().position(|d| &d.name == name)?;
            let id = table.dimensions[dimension]
                .values
                .iter()
                .position(|v| v == value)?;
            if dimension >= 64 {
                return None;
            }
            mask |= 1 << dimension;
            pairs.push((dimension, id as u32));
        }
        if parent.is_empty() || !scan.cuboid_by_mask.contains_key(&mask) {
            return None;
        }
        let mut gate = Gate {
            mask,
            pairs,
            candidates: 0,
        };
        gate.candidates = scan
            .cuboids
            .iter()
            .map(|c| {
                (0..c.first_leaf.len())
                    .filter(|&e| gate.holds(table, c, e as u32))
                    .count()
            })
            .sum();
        Some(gate)
    }

    /// Whether `element` of `cuboid` refines the parent (carries all its pairs).
    fn holds(&self, table: &LeafTable, cuboid: &Cuboid, element: u32) -> bool {
        let probe = cuboid.first_leaf[element as usize];
        cuboid.mask & self.mask == self.mask
            && self
                .pairs
                .iter()
                .all(|&(dimension, id)| table.code(probe, dimension) == id)
    }
}

/// The sampling weight of `leaf` (1 when none is given, or below 1).
pub(super) fn sample_weight_of(sample_weight: &[f64], leaf: usize) -> f64 {
    sample_weight
        .get(leaf)
        .copied()
        .filter(|w| w.is_finite() && *w > 1.0)
        .unwrap_or(1.0)
}

/// The table dimensions the scan enumerates (ascending), and the names of those it skips: too
/// many values, or beyond the 64 a cuboid mask holds.
fn scanned_dimensions(table: &LeafTable, params: &Params) -> (Vec<usize>, Vec<String>) {
    let mut skipped_dimensions = Vec::new();
    let mut dims = Vec::new();
    for (index, dimension) in table.dimensions.iter().enumerate() {
        if dimension.values.len() > params.max_cardinality || index >= 64 {
            skipped_dimensions.push(dimension.name.clone());
        } else {
            dims.push(index);
        }
    }
    (dims, skipped_dimensions)
}

/// The lattice being scanned and the leaves not yet explained by a cause.
struct Scan {
    cuboids: Vec<Cuboid>,
    cuboid_by_mask: HashMap<u64, usize>,
    /// Per cuboid, refilled by every [`Scan::best_element`].
    sums: Vec<Sums>,
    unexplained: Vec<bool>,
    /// Per leaf, its effective counts.
    effective: Vec<Tally>,
}

impl Scan {
    fn new(table: &LeafTable, dims: &[usize], params: &Params, effective: Vec<Tally>) -> Scan {
        let cuboids = build_cuboids(table, dims, params.max_layer);
        let cuboid_by_mask: HashMap<u64, usize> = cuboids
            .iter()
            .enumerate()
            .map(|(index, cuboid)| (cuboid.mask, index))
            .collect();
        let sums: Vec<Sums> = cuboids
            .iter()
            .map(|cuboid| Sums {
                tally: vec![Tally::default(); cuboid.first_leaf.len()],
            })
            .collect();
        Scan {
            cuboids,
            cuboid_by_mask,
            sums,
            unexplained: vec![true; table.len()],
            effective,
        }
    }

    /// Sums every element of every cuboid over the leaves not yet explained, and returns the
    /// whole fleet's scan statistic and the element with the highest one:
    /// `(cuboid, element, score)`.
    fn best_element(&mut self) -> (f64, Option<(usize, u32, f64)>) {
        let n_leaves = self.unexplained.len();
        let mut root = Tally::default();
        for leaf in 0..n_leaves {
            if self.unexplained[leaf] {
                root += self.effective[leaf];
            }
        }
        let mut best: Option<(usize, u32, f64)> = None;
        for (index, cuboid) in self.cuboids.iter().enumerate() {
            let cuboid_sums = &mut self.sums[index];
            cuboid_sums.tally.fill(Tally::default());
            for leaf in 0..n_leaves {
                if self.unexplained[leaf] {
                    let element = cuboid.element_of_leaf[leaf] as usize;
                    cuboid_sums.tally[element] += self.effective[leaf];
                }
            }
            for element in 0..cuboid.first_leaf.len() {
                let score = cuboid_sums.tally[element].statistic();
                if best.is_none_or(|(_, _, best_score)| clearly_above(score, best_score)) {
                    best = Some((index, element as u32, score));
                }
            }
        }
        (root.statistic(), best)
    }

    /// The element with the highest scan statistic among those refining `gate`'s parent, from
    /// the sums [`Scan::best_element`] last filled: `(cuboid, element, score)`.
    fn best_within(&self, table: &LeafTable, gate: &Gate) -> Option<(usize, u32, f64)> {
        let mut best: Option<(usize, u32, f64)> = None;
        for (index, cuboid) in self.cuboids.iter().enumerate() {
            if cuboid.mask & gate.mask != gate.mask {
                continue;
            }
            for element in 0..cuboid.first_leaf.len() as u32 {
                if !gate.holds(table, cuboid, element) {
                    continue;
                }
                let score = self.sums[index].tally[element as usize].statistic();
                if best.is_none_or(|(_, _, b)| clearly_above(score, b)) {
                    best = Some((index, element, score));
                }
            }
        }
        best
    }

    /// The coarsest ancestor of the best element (fewest attributes; the best score among
    /// equally coarse ones) that scores at least `good_enough` and keeps the dimensions of
    /// `floor` (a mask; 0 for none): `(cuboid, element, score)`.
    fn coarsest_ancestor(
        &self,
        best_cuboid: usize,
        best_element: u32,
        good_enough: f64,
        floor: u64,
    ) -> (usize, u32, f64) {
        let (cuboids, sums) = (&self.cuboids, &self.sums);
        let (mut chosen_cuboid, mut chosen_element) = (best_cuboid, best_element);
        let best_mask = cuboids[chosen_cuboid].mask;
        let probe_leaf = cuboids[chosen_cuboid].first_leaf[chosen_element as usize];
        let mut chosen_score = sums[chosen_cuboid].tally[chosen_element as usize].statistic();
        let mut chosen_layer = cuboids[chosen_cuboid].dims.len();
        let mut submask = (best_mask.wrapping_sub(1)) & best_mask;
        while submask != 0 {
            if submask & floor != floor {
                submask = (submask - 1) & best_mask;
                continue;
            }
            if let Some(&index) = self.cuboid_by_mask.get(&submask) {
                let element = cuboids[index].element_of_leaf[probe_leaf];
                let score = sums[index].tally[element as usize].statistic();
                let layer = cuboids[index].dims.len();
                if !clearly_above(good_enough, score)
                    && (layer < chosen_layer
                        || (layer == chosen_layer && clearly_above(score, chosen_score)))
                {
                    chosen_cuboid = index;
                    chosen_element = element;
                    chosen_score = score;
                    chosen_layer = layer;
                }
            }
            submask = (submask - 1) & best_mask;
        }
        (chosen_cuboid, chosen_element, chosen_score)
    }

    /// Two causes whose leaves one coarser combination happens to cover together (a slow pod
    /// that runs the regressing version, say) make that combination the best single element,
    /// normal leaves and all. Scans inside the element: its best part `d`, the best part `d2` of
    /// what is left, and the rest. The element is two causes when the rest is normal (not
    /// significant, at most a quarter of the element's change) yet holds at least
    /// [`MIN_NORMAL_SHARE`] of its forecast, and `d` and `d2` outscore the whole by
    /// [`SPLIT_GAIN`] times the significance threshold; `d` (described
    /// by its pairs and the element's) is then taken first, `d2` found next. A cause whose
    /// leaves all deviate is never split, however unevenly. `None`: the element stands.
    fn split(
        &mut self,
        cuboid: usize,
        element: u32,
        score: f64,
        significance: f64,
    ) -> Option<(usize, u32, f64)> {
        let saved = self.unexplained.clone();
        let inside: Vec<bool> = (0..saved.len())
            .map(|leaf| saved[leaf] && self.cuboids[cuboid].element_of_leaf[leaf] == element)
            .collect();
        let outcome = self
            .best_part(cuboid, &inside, &saved)
            .and_then(|(part, part_score)| {
                let part_cuboid = &self.cuboids[part.0];
                let rest: Vec<bool> = (0..inside.len())
                    .map(|leaf| inside[leaf] && part_cuboid.element_of_leaf[leaf] != part.1)
                    .collect();
                if !rest.iter().any(|r| *r) {
                    return None;
                }
                self.unexplained.clone_from(&rest);
                let (_, other) = self.best_element();
                let (other_cuboid, other_element, other_score) = other?;
                let gain = part_score + other_score - score;
                let of_other = &self.cuboids[other_cuboid].element_of_leaf;
                let (mut normal, mut whole) = (Tally::default(), Tally::default());
                for leaf in (0..inside.len()).filter(|&leaf| inside[leaf]) {
                    whole += self.effective[leaf];
                    if rest[leaf] && of_other[leaf] != other_element {
                        normal += self.effective[leaf];
                    }
                }
                // the rest keeps at most a quarter of the element's change: it did not move
                // with it
                let moved = |t: Tally| t.real / t.forecast - 1.0;
                let normal_rest = normal.forecast >= MIN_NORMAL_SHARE * whole.forecast
                    && moved(normal) <= 0.25 * moved(whole)
                    && normal.statistic() < significance;
                (normal_rest && other_score >= significance && gain >= SPLIT_GAIN * significance)
                    .then_some((part.0, part.1, part_score))
            });
        self.unexplained = saved;
        outcome
    }

    /// An element that is a cause plus leaves that hardly moved (the regressing slice on paged
    /// KV *and* the same slice on contiguous workers, whose few slow requests rose with their
    /// own fleet) may score a hair above the cause alone: the extra leaves' small excess adds
    /// as much as their extra forecast costs. The element is trimmed to its best proper part
    /// when that part scores within [`TRIM_MAX_LOSS`] of it and the rest is no cause on its own:
    /// not significant, and closer to unchanged than to the part's factor (Poisson likelihood
    /// of the rest's effective count under each). The rest stays unexplained for later rounds.
    /// `None`: the element stands.
    fn trim(
        &mut self,
        cuboid: usize,
        element: u32,
        score: f64,
        significance: f64,
    ) -> Option<(usize, u32, f64)> {
        let saved = self.unexplained.clone();
        let inside: Vec<bool> = (0..saved.len())
            .map(|leaf| saved[leaf] && self.cuboids[cuboid].element_of_leaf[leaf] == element)
            .collect();
        let part = self.best_part(cuboid, &inside, &saved);
        self.unexplained = saved;
        let ((part_cuboid, part_element), part_score) = part?;
        if part_score < score - TRIM_MAX_LOSS {
            return None;
        }
        let of_part = &self.cuboids[part_cuboid].element_of_leaf;
        let (mut kept, mut rest) = (Tally::default(), Tally::default());
        for leaf in (0..inside.len()).filter(|&leaf| inside[leaf]) {
            if of_part[leaf] == part_element {
                kept += self.effective[leaf];
            } else {
                rest += self.effective[leaf];
            }
        }
        let factor = kept.real / kept.forecast.max(MIN_EFFECTIVE_FORECAST);
        let log_likelihood = |t: Tally, factor: f64| {
            let expected = (t.forecast * factor).max(f64::MIN_POSITIVE);
            t.real * expected.ln() - expected
        };
        let unchanged = log_likelihood(rest, 1.0) > log_likelihood(rest, factor);
        (rest.forecast > 0.0 && unchanged && rest.statistic() < significance).then_some((
            part_cuboid,
            part_element,
            part_score,
        ))
    }

    /// The best proper part of the leaves marked `inside` (an element of `cuboid`, with
    /// `unexplained` the scan's leaves): the element of any cuboid that covers some of them but
    /// not all, scored on its leaves inside. Described by its own pairs when none of its
    /// unexplained leaves lies outside, else with the outer element's pairs added (so it
    /// describes only leaves inside); `None` when nothing is a proper part or that description
    /// is beyond the scanned layers.
    fn best_part(
        &mut self,
        cuboid: usize,
        inside: &[bool],
        unexplained: &[bool],
    ) -> Option<((usize, u32), f64)> {
        self.unexplained = inside.to_vec();
        self.best_element(); // fills the sums over `inside`
        let n_inside = inside.iter().filter(|i| **i).count();
        let mut best: Option<(usize, u32, f64)> = None;
        for (index, part) in self.cuboids.iter().enumerate() {
            let mut leaves_inside = vec![0_usize; part.first_leaf.len()];
            for leaf in (0..inside.len()).filter(|&leaf| inside[leaf]) {
                leaves_inside[part.element_of_leaf[leaf] as usize] += 1;
            }
            for (element, &count) in leaves_inside.iter().enumerate() {
                if count == 0 || count == n_inside {
                    continue;
                }
                let score = self.sums[index].tally[element].statistic();
                if best.is_none_or(|(_, _, b)| score > b) {
                    best = Some((index, element as u32, score));
                }
            }
        }
        let (part_cuboid, part_element, part_score) = best?;
        let part_of = &self.cuboids[part_cuboid].element_of_leaf;
        let contained = (0..inside.len())
            .all(|leaf| inside[leaf] || !unexplained[leaf] || part_of[leaf] != part_element);
        if contained {
            return Some(((part_cuboid, part_element), part_score));
        }
        let probe =
            (0..inside.len()).find(|&leaf| inside[leaf] && part_of[leaf] == part_element)?;
        let mask = self.cuboids[part_cuboid].mask | self.cuboids[cuboid].mask;
        let combined = *self.cuboid_by_mask.get(&mask)?;
        let element = self.cuboids[combined].element_of_leaf[probe];
        Some(((combined, element), part_score))
    }

    /// A combination known from elsewhere, as a cause when its unexplained leaves deviate with
    /// a scan statistic of at least `significance`. Its leaves are set aside (explained)
    /// whenever they rise at all: a known fault's excess, too few rows to be significant on
    /// its own, must not be lent to a coarser combination that also covers a second cause.
    fn explain_known(
        &mut self,
        table: &LeafTable,
        elements: &[(String, String)],
        significance: f64,
        real: &[f64],
        forecast: &[f64],
    ) -> Option<RootCause> {
        if elements.is_empty()
            || !elements
                .iter()
                .all(|(name, _)| table.dimensions.iter().any(|d| &d.name == name))
        {
            return None;
        }
        let leaves: Vec<usize> = leaves_of(table, elements)
            .into_iter()
            .filter(|&leaf| self.unexplained[leaf])
            .collect();
        let mut tally = Tally::default();
        let (mut element_real, mut element_forecast) = (0.0, 0.0);
        for &leaf in &leaves {
            tally += self.effective[leaf];
            element_real += real[leaf];
            element_forecast += forecast[leaf];
        }
        if leaves.is_empty() || element_real <= element_forecast {
            return None;
        }
        for &leaf in &leaves {
            self.unexplained[leaf] = false;
        }
        let score = tally.statistic();
        if score < significance {
            return None;
        }
        let mut ordered = elements.to_vec();
        ordered.sort_by_key(|(name, _)| table.dimensions.iter().position(|d| &d.name == name));
        Some(RootCause {
            elements: ordered,
            explained_fraction: 0.0,
            score,
            real: element_real,
            forecast: element_forecast,
            leaves: leaves.len(),
        })
    }

    /// Actual minus forecast, summed over the element's leaves not yet explained.
    fn unexplained_deviation(
        &self,
        cuboid: usize,
        element: u32,
        real: &[f64],
        forecast: &[f64],
    ) -> f64 {
        let cuboid = &self.cuboids[cuboid];
        let mut deviation = 0.0;
        for leaf in 0..self.unexplained.len() {
            if self.unexplained[leaf] && cuboid.element_of_leaf[leaf] == element {
                deviation += real[leaf] - forecast[leaf];
            }
        }
        deviation
    }

    /// Marks every leaf of the element explained and returns it as a cause (its values, sums
    /// and leaf count; fraction and score are the caller's).
    fn explain(
        &mut self,
        table: &LeafTable,
        cuboid: usize,
        element: u32,
        real: &[f64],
        forecast: &[f64],
    ) -> RootCause {
        let cuboid = &self.cuboids[cuboid];
        let (mut element_real, mut element_forecast, mut element_leaves) = (0.0, 0.0, 0_usize);
        for leaf in 0..self.unexplained.len() {
            if cuboid.element_of_leaf[leaf] == element {
                element_real += real[leaf];
                element_forecast += forecast[leaf];
                element_leaves += 1;
                self.unexplained[leaf] = false;
            }
        }
        let probe = cuboid.first_leaf[element as usize];
        let elements = cuboid
            .dims
            .iter()
            .map(|&dimension| {
                let id = table.code(probe, dimension) as usize;
                let dim = &table.dimensions[dimension];
                (dim.name.clone(), dim.values[id].clone())
            })
            .collect();
        RootCause {
            elements,
            explained_fraction: 0.0,
            score: 0.0,
            real: element_real,
            forecast: element_forecast,
            leaves: element_leaves,
        }
    }
}

/// A cause that is an ancestor of causes found before (they were its most deviating part, the
/// rest of it deviates too) replaces them: one coarser element, same leaves. Removes those
/// descendants of the element and returns the highest score among them (0 when none).
fn remove_descendants(
    root_causes: &mut Vec<RootCause>,
    table: &LeafTable,
    cuboid: &Cuboid,
    element: u32,
) -> f64 {
    let probe = cuboid.first_leaf[element as usize];
    let chosen_pairs: Vec<(usize, u32)> = cuboid
        .dims
        .iter()
        .map(|&dimension| (dimension, table.code(probe, dimension)))
        .collect();
    let mut merged_score = 0.0_f64;
    root_causes.retain(|earlier| {
        let is_descendant = chosen_pairs.iter().all(|&(dimension, id)| {
            let name = &table.dimensions[dimension].name;
            let value = &table.dimensions[dimension].values[id as usize];
            earlier
                .elements
                .iter()
                .any(|(n, v)| n == name && v == value)
        });
        if is_descendant {
            merged_score = merged_score.max(earlier.score);
        }
        !is_descendant
    });
    merged_score
}

/// Whether `score` beats `other` by more than rounding: elements over the same leaves (one of
/// them a coarser description, its extra leaves empty in this measure) sum the same values in
/// another order, and the first found, the coarser, must win such a tie.
fn clearly_above(score: f64, other: f64) -> bool {
    score > other + 1e-9 * other.abs().max(1.0)
}

/// Expectation-based Poisson log-likelihood ratio of "this element changed by a common factor".
fn poisson_statistic(real_effective: f64, forecast_effective: f64) -> f64 {
    let forecast = forecast_effective.max(MIN_EFFECTIVE_FORECAST);
    if real_effective <= 0.0 {
        return forecast;
    }
    (real_effective * (real_effective / forecast).ln() - (real_effective - forecast)).max(0.0)
}

fn resolve_noise(noise: NoiseModel, real: &[f64]) -> NoiseModel {
    match noise {
        NoiseModel::Auto => {
            if real.iter().all(|value| value.fract() == 0.0) {
                NoiseModel::Counts
            } else {
                NoiseModel::Relative
            }
        }
        other => other,
    }
}

/// `κ_i = Var(v_i) / f_i` per leaf, fitted robustly around the fleet-wide ratio.
fn effective_count_scale(noise: NoiseModel, real: &[f64], forecast: &[f64]) -> Vec<f64> {
    // The fleet-wide factor is the forecast-weighted median of the leaf ratios, not the total
    // ratio: the total is pulled by the anomaly itself, the median by the normal majority.
    let fleet_factor = weighted_median_ratio(real, forecast).unwrap_or(1.0);
    match noise {
        NoiseModel::Relative => {
            let mut positive: Vec<f64> = forecast.iter().copied().filter(|f| *f > 0.0).collect();
            let reference = median(&mut positive).unwrap_or(1.0);
            let mut ratios: Vec<f64> = real
                .iter()
                .zip(forecast)
                .filter(|(_, f)| **f > 0.0)
                .map(|(v, f)| {
                    let residual = v - fleet_factor * f;
                    residual * residual / (f * (f + reference))
                })
                .collect();
            let relative_variance = (quantile(&mut ratios, NOISE_QUANTILE).unwrap_or(1.0)
                / CHI2_1_NOISE_QUANTILE)
                .max(1e-10);
            forecast
                .iter()
                .map(|f| relative_variance * (f.max(0.0) + reference))
                .collect()
        }
        NoiseModel::Poisson => vec![1.0; forecast.len()],
        NoiseModel::Counts | NoiseModel::Auto => {
            // Leaves expecting at least one event carry the dispersion; tiny leaves are all
            // zeros and say little about it.
            let leaves = |min_expected: f64| -> Vec<(f64, f64)> {
                real.iter()
                    .zip(forecast)
                    .filter(|(_, f)| fleet_factor * **f >= min_expected && **f > 0.0)
                    .map(|(v, f)| (*v, fleet_factor * f))
                    .collect()
            };
            let mut sample = leaves(1.0);
            if sample.len() < 20 {
                sample = leaves(0.0);
            }
            vec![count_dispersion(&sample); forecast.len()]
        }
    }
}

/// Over-dispersion `φ ≥ 1` (`Var = φ μ`) of counts `(v, μ)` (actual, expected): the squared
/// standardized residuals' `NOISE_QUANTILE` quantile over χ²(1)'s. A small expected count is
/// discrete, and its squared Pearson residual `(v − μ)² / μ` sits above χ²(1)'s lower quartile
/// even when the count is exactly Poisson (a leaf expecting 0.3 events holds none with
/// probability 0.74, a squared residual of 0.3 against 0.10): with traces kept at 10 % most leaves
/// expect less than one event, and that read as a dispersion of 2.2, which cut every element's
/// statistic by as much.
///
/// Below [`CONTINUOUS_FROM_EXPECTED`] a leaf's residual is therefore a quantile residual (Dunn
/// and Smyth, "Randomized quantile residuals", J. Comput. Graph. Stat. 1996): `u` uniform
/// between `P(V < v)` and `P(V ≤ v)` under Poisson(μ) is exactly uniform, and its two-sided
/// position `|2u − 1|` is what `P(|Z| ≤ |z|)` is for a normal residual `z`. Instead of drawing
/// `u`, each leaf contributes the probability that its position is at most `t`, and the quantile
/// is taken of that mixture (the draws' expectation: deterministic and steadier). Large counts
/// use their position `P(|Z| ≤ |v − μ| / √μ)`. The quantile is turned back into a squared
/// residual with the normal quantile.
///
/// Limit: leaves expecting well under one event (μ ≲ 0.5) hold little but zeros, whose
/// positions barely move with the dispersion; on such leaves alone the fit is about 1 whatever
/// the truth, and the significance bar (`alpha`) is what guards against heavier tails.
fn count_dispersion(sample: &[(f64, f64)]) -> f64 {
    // Per leaf, the interval its `u` is uniform on (a point for a large count's position).
    let intervals: Vec<(f64, f64)> = sample
        .iter()
        .map(|&(v, mu)| {
            if mu >= CONTINUOUS_FROM_EXPECTED {
                let position = 1.0 - erfc((v - mu).abs() / (2.0 * mu).sqrt());
                let u = 0.5 + position / 2.0;
                (u, u)
            } else {
                // counts estimated from weighted rows need not be whole
                let k = v.max(0.0).round();
                let below = 1.0 - poisson_sf(k, mu);
                let at_most = 1.0 - poisson_sf(k + 1.0, mu);
                (below, at_most.max(below))
            }
        })
        .collect();
    if intervals.is_empty() {
        return 1.0;
    }
    // P(position ≤ t), over the leaves: the share of each interval inside [(1 − t)/2, (1 + t)/2].
    let share_within = |t: f64| -> f64 {
        let (low, high) = ((1.0 - t) / 2.0, (1.0 + t) / 2.0);
        let total: f64 = intervals
            .iter()
            .map(|&(a, b)| {
                if b - a > 1e-15 {
                    ((b.min(high) - a.max(low)) / (b - a)).clamp(0.0, 1.0)
                } else if (2.0 * a - 1.0).abs() <= t {
                    1.0
                } else {
                    0.0
                }
            })
            .sum();
        total / intervals.len() as f64
    };
    let (mut low, mut high) = (0.0, 1.0);
    for _ in 0..60 {
        let middle = 0.5 * (low + high);
        if share_within(middle) >= NOISE_QUANTILE {
            high = middle;
        } else {
            low = middle;
        }
    }
    let z = normal_quantile(0.5 + high.min(1.0 - 1e-12) / 2.0);
    (z * z / CHI2_1_NOISE_QUANTILE).max(1.0)
}

/// Median of `real / forecast` over leaves with a positive forecast, each weighted by it.
fn weighted_median_ratio(real: &[f64], forecast: &[f64]) -> Option<f64> {
    let mut ratios: Vec<(f64, f64)> = real
        .iter()
        .zip(forecast)
        .filter(|(_, f)| **f > 0.0)
        .map(|(v, f)| (v / f, *f))
        .collect();
    ratios.sort_by(|a, b| a.0.total_cmp(&b.0));
    let half = ratios.iter().map(|(_, weight)| weight).sum::<f64>() / 2.0;
    let mut cumulative = 0.0;
    for (ratio, weight) in ratios {
        cumulative += weight;
        if cumulative >= half {
            return Some(ratio).filter(|r| *r > 0.0);
        }
    }
    None
}

fn quantile(values: &mut [f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let index = ((values.len() - 1) as f64 * q).round() as usize;
    let (_, value, _) = values.select_nth_unstable_by(index, f64::total_cmp);
    Some(*value)
}

fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let middle = values.len() / 2;
    let (_, value, _) = values.select_nth_unstable_by(middle, f64::total_cmp);
    Some(*value)
}

/// Every non-empty subset of `dims` with at most `max_layer` members, by increasing size.
fn build_cuboids(table: &LeafTable, dims: &[usize], max_layer: usize) -> Vec<Cuboid> {
    let mut subsets: Vec<Vec<usize>> = Vec::new();
    let max_layer = max_layer.min(dims.len());
    for layer in 1..=max_layer {
        let mut chosen = Vec::with_capacity(layer);
        combinations(dims, layer, 0, &mut chosen, &mut subsets);
    }
    subsets
        .into_iter()
        .map(|cuboid_dims| index_cuboid(table, cuboid_dims))
        .collect()
}

fn combinations(
    dims: &[usize],
    size: usize,
    start: usize,
    chosen: &mut Vec<usize>,
    out: &mut Vec<Vec<usize>>,
) {
    if chosen.len() == size {
        out.push(chosen.clone());
        return;
    }
    for index in start..dims.len() {
        chosen.push(dims[index]);
        combinations(dims, size, index + 1, chosen, out);
        chosen.pop();
    }
}

fn index_cuboid(table: &LeafTable, dims: Vec<usize>) -> Cuboid {
    let n_leaves = table.len();
    let mask = dims.iter().fold(0_u64, |mask, &d| mask | (1 << d));
    let mut element_of_leaf = Vec::with_capacity(n_leaves);
    let mut first_leaf = Vec::new();
    // Mixed-radix key over the cuboid's dimensions; fits u64 for the cardinalities allowed.
    let radices: Vec<u64> = dims
        .iter()
        .map(|&d| table.dimensions[d].values.len().max(1) as u64)
        .collect();
    let space = radices
        .iter()
        .try_fold(1_u64, |product, &radix| product.checked_mul(radix));
    let key_of = |leaf: usize| -> u64 {
        dims.iter().zip(&radices).fold(0_u64, |key, (&d, &radix)| {
            key.wrapping_mul(radix)
                .wrapping_add(u64::from(table.code(leaf, d)))
        })
    };
    match space {
        Some(space) if space <= DENSE_INDEX_LIMIT => {
            let mut slot = vec![u32::MAX; space as usize];
            for leaf in 0..n_leaves {
                let key = key_of(leaf) as usize;
                if slot[key] == u32::MAX {
                    slot[key] = first_leaf.len() as u32;
                    first_leaf.push(leaf);
                }
                element_of_leaf.push(slot[key]);
            }
        }
        Some(_) => {
            let mut slot: HashMap<u64, u32> = HashMap::new();
            for leaf in 0..n_leaves {
                let next = first_leaf.len() as u32;
                let element = *slot.entry(key_of(leaf)).or_insert(next);
                if element == next {
                    first_leaf.push(leaf);
                }
                element_of_leaf.push(element);
            }
        }
        None => {
            let mut slot: HashMap<Vec<u32>, u32> = HashMap::new();
            for leaf in 0..n_leaves {
                let key: Vec<u32> = dims.iter().map(|&d| table.code(leaf, d)).collect();
                let next = first_leaf.len() as u32;
                let element = *slot.entry(key).or_insert(next);
                if element == next {
                    first_leaf.push(leaf);
                }
                element_of_leaf.push(element);
            }
        }
    }
    Cuboid {
        mask,
        dims,
        element_of_leaf,
        first_leaf,
    }
}

/// Leaves under an element given as `(dimension name, value)` pairs.
pub(super) fn leaves_of(table: &LeafTable, elements: &[(String, String)]) -> Vec<usize> {
    let resolved: Vec<(usize, Option<u32>)> = elements
        .iter()
        .filter_map(|(name, value)| {
            let dimension = table.dimensions.iter().position(|d| &d.name == name)?;
            let id = table.dimensions[dimension]
                .values
                .iter()
                .position(|known| known == value)
                .map(|id| id as u32);
            Some((dimension, id))
        })
        .collect();
    (0..table.len())
        .filter(|&leaf| {
            resolved
                .iter()
                .all(|&(dimension, id)| Some(table.code(leaf, dimension)) == id)
        })
        .collect()
}

#[cfg(test)]
mod statistic_tests {
    use super::{Tally, poisson_statistic};

    fn tally(real: f64, forecast: f64, trials: f64) -> Tally {
        Tally {
            real,
            forecast,
            trials,
        }
    }

    #[test]
    fn events_that_fill_their_trials_weigh_more_than_a_poisson_count_says() {
        // 25 slow requests of 25 where 2 were expected
        let bernoulli = tally(25.0, 2.0, 25.0).statistic();
        let poisson = poisson_statistic(25.0, 2.0);
        assert!((poisson - 40.1).abs() < 0.1, "{poisson}");
        assert!(
            (bernoulli - 25.0 * (25.0_f64 / 2.0).ln()).abs() < 1e-9,
            "{bernoulli}"
        );
        // rare events among many trials: the two agree
        let rare = tally(25.0, 2.0, 1e6).statistic();
        assert!((rare - poisson).abs() < 0.01, "{rare} vs {poisson}");
    }

    #[test]
    fn the_bernoulli_statistic_is_never_below_the_poisson_one() {
        for trials in [10.0, 40.0, 200.0] {
            for forecast in [0.5, 3.0, 9.5] {
                for step in 0..=20 {
                    let real = trials * step as f64 / 20.0;
                    let b = tally(real, forecast, trials).statistic();
                    let p = poisson_statistic(real, forecast);
                    assert!(b >= p - 1e-9, "{real}/{forecast}/{trials}: {b} < {p}");
                }
            }
        }
    }

    #[test]
    fn without_trials_that_hold_the_events_the_count_is_poisson() {
        for (real, forecast, trials) in [(7.0, 2.0, 0.0), (7.0, 2.0, 5.0), (1.0, 3.0, 2.5)] {
            assert_eq!(
                tally(real, forecast, trials).statistic(),
                poisson_statistic(real, forecast),
                "{real}/{forecast}/{trials}"
            );
        }
    }
}
