//! The leaves of one measure (every dimension combination with its baseline and incident
//! cells), their localization, demand-shift set-asides, and the choice among overlapping causes.

use std::collections::BTreeMap;

use infersight_analytics::localize::{
    Around, DerivedMeasure, LeafTable, Params, localize_derived_around,
};
use infersight_model::signal::{SignalKind, Subject};
use infersight_query::QueryError;
use infersight_rollup::Cell;

use crate::{DEMAND_SHIFT_FACTOR, DEMAND_SHIFT_MIN_REQUESTS, Signal};

/// A measure's events of one leaf (by index) in a cell of its requests.
pub(crate) type LeafEvents<'a> = Box<dyn Fn(usize, &Cell) -> f64 + 'a>;

/// The leaves of one measure, for localizing any subset of them.
pub(crate) struct Leaves<'a> {
    pub(crate) dims: &'a [String],
    pub(crate) values: &'a [Vec<String>],
    pub(crate) base: &'a [Cell],
    pub(crate) incident: &'a [Cell],
    /// Per leaf, what stands in for an empty baseline (its peers at the same time, or what it
    /// replaced), when anything does.
    pub(crate) stand_in: Vec<Option<&'a Cell>>,
    /// A leaf's events in a cell of its requests (its own, or what stands in for its baseline).
    pub(crate) event_of: LeafEvents<'a>,
    pub(crate) denominator_of: &'a (dyn Fn(&Cell) -> f64 + Send + Sync),
    /// Per leaf, the requests one observed row stands for (1 when every request was
    /// observed): counts are estimates, judged on the rows behind them.
    pub(crate) sample_weight: &'a [f64],
    /// Causes known from complete sources (a pod whose device metrics show a fault): taken
    /// first where they deviate, the rest localized around them.
    pub(crate) known: &'a [Vec<(String, String)>],
    /// Combinations the first pass (over the stored rollups, same window) found significant
    /// in this measure: their refinements are tested at their own multiplicity (see
    /// [`Around`]).
    pub(crate) significant: &'a [Vec<(String, String)>],
}

impl Leaves<'_> {
    pub(crate) fn localize(
        &self,
        subset: &[usize],
        params: &Params,
    ) -> Result<infersight_analytics::localize::Localization, QueryError> {
        let mut table = LeafTable::new(self.dims.iter().cloned());
        let mut measure = DerivedMeasure::default();
        for &leaf in subset {
            table.push_leaf(&self.values[leaf]);
            measure
                .numerator_real
                .push((self.event_of)(leaf, &self.incident[leaf]));
            measure
                .numerator_forecast
                .push(self.baseline_value(leaf, |c| (self.event_of)(leaf, c)));
            measure
                .denominator_real
                .push((self.denominator_of)(&self.incident[leaf]));
            measure
                .denominator_forecast
                .push(self.baseline_value(leaf, self.denominator_of));
            measure.sample_weight.push(self.sample_weight[leaf]);
        }
        let around = Around {
            known: self.known,
            significant: self.significant,
        };
        let found = localize_derived_around(&table, &measure, params, around)
            .map_err(|e| QueryError::Internal(format!("localization: {e}")))?;
        tracing::debug!(
            dimensions = self.dims.len(),
            leaves = subset.len(),
            bar = found.bar,
            causes = ?found
                .root_causes
                .iter()
                .map(|c| (&c.elements, c.score))
                .collect::<Vec<_>>(),
            closest = ?found.strongest_below_bar.as_ref().map(|c| (&c.elements, c.score)),
            "localized"
        );
        Ok(found)
    }

    /// `value` of the leaf's baseline cell; of its stand-in scaled to the leaf's own incident
    /// requests (the stand-in's rates, at the leaf's volume), when it has one.
    fn baseline_value(&self, leaf: usize, value: impl Fn(&Cell) -> f64) -> f64 {
        match self.stand_in[leaf] {
            Some(cell) if cell.requests > 0 => {
                value(cell) * self.incident[leaf].requests as f64 / cell.requests as f64
            }
            _ => value(&self.base[leaf]),
        }
    }

    /// Whether every leaf of `subset` under `elements` is compared with a stand-in (nothing of
    /// it existed in the baseline).
    pub(crate) fn all_stand_in(&self, subset: &[usize], elements: &[(String, String)]) -> bool {
        let mut under = subset
            .iter()
            .filter(|&&leaf| self.matches(leaf, elements))
            .peekable();
        under.peek().is_some() && under.all(|&leaf| self.stand_in[leaf].is_some())
    }

    /// The slice `elements` (among `subset`) as a demand shift, when its requests' mean prompt
    /// length grew by [`DEMAND_SHIFT_FACTOR`] or more (see the module doc); each side needs
    /// [`DEMAND_SHIFT_MIN_REQUESTS`] observed rows (sampled rows count once, not by weight).
    pub(crate) fn demand_shift(
        &self,
        subset: &[usize],
        elements: &[(String, String)],
    ) -> Option<DemandShift> {
        let (mut base, mut inc) = ((0u64, 0u64), (0u64, 0u64));
        let mut observed = (0.0, 0.0);
        for &leaf in subset.iter().filter(|&&leaf| self.matches(leaf, elements)) {
            let requests = self.baseline_value(leaf, |c: &Cell| c.requests as f64);
            base.0 += requests as u64;
            base.1 += self.baseline_value(leaf, |c: &Cell| c.input_tokens as f64) as u64;
            inc.0 += self.incident[leaf].requests;
            inc.1 += self.incident[leaf].input_tokens;
            observed.0 += requests / self.sample_weight[leaf];
            observed.1 += self.incident[leaf].requests as f64 / self.sample_weight[leaf];
        }
        let enough = DEMAND_SHIFT_MIN_REQUESTS as f64;
        if observed.0 < enough || observed.1 < enough || base.0 == 0 || inc.0 == 0 || base.1 == 0 {
            return None;
        }
        let before = base.1 as f64 / base.0 as f64;
        let after = inc.1 as f64 / inc.0 as f64;
        (after >= DEMAND_SHIFT_FACTOR * before).then(|| DemandShift {
            elements: elements.to_vec(),
            before,
            after,
        })
    }

    /// `elements` localized among `subset` only, described in the whole table: pairs that hold
    /// on every leaf it covers in `subset` are added while they leave out leaves of the table
    /// outside `subset` that it also matches (a tenant's slice found among prefix-caching leaves
    /// is that tenant *on prefix-caching workers*).
    pub(crate) fn specialize(
        &self,
        subset: &[usize],
        elements: Vec<(String, String)>,
    ) -> Vec<(String, String)> {
        self.narrow(elements, |leaf| subset.contains(&leaf))
    }

    /// `elements` described apart from the known causes: a cause found on the leaves the known
    /// ones left (its excess lives there) gets the pairs that leave their leaves out (the
    /// regressing revision *on fp8 pods*, when the throttled pod runs that revision too).
    pub(crate) fn apart_from_known(
        &self,
        elements: Vec<(String, String)>,
    ) -> Vec<(String, String)> {
        if self.known.is_empty() || self.known.iter().any(|k| same_pairs(k, &elements)) {
            return elements;
        }
        self.narrow(elements, |leaf| {
            !self.known.iter().any(|known| self.matches(leaf, known))
        })
    }

    /// `elements` with pairs added, each holding on every leaf it covers among those `inside`
    /// picks, while they leave out leaves it also covers outside.
    fn narrow(
        &self,
        mut elements: Vec<(String, String)>,
        inside: impl Fn(usize) -> bool,
    ) -> Vec<(String, String)> {
        let covered: Vec<usize> = (0..self.values.len())
            .filter(|&leaf| inside(leaf) && self.matches(leaf, &elements))
            .collect();
        let outside = |elements: &[(String, String)]| -> usize {
            (0..self.values.len())
                .filter(|&leaf| !inside(leaf) && self.matches(leaf, elements))
                .count()
        };
        let mut left = outside(&elements);
        while left > 0 {
            let mut best: Option<(usize, (String, String))> = None;
            for (d, dim) in self.dims.iter().enumerate() {
                if elements.iter().any(|(name, _)| name == dim) {
                    continue;
                }
                let Some(&first) = covered.first() else {
                    return elements;
                };
                let value = &self.values[first][d];
                if covered.iter().any(|&leaf| &self.values[leaf][d] != value) {
                    continue;
                }
                let mut candidate = elements.clone();
                candidate.push((dim.clone(), value.clone()));
                let remaining = outside(&candidate);
                if remaining < left && best.as_ref().is_none_or(|(r, _)| remaining < *r) {
                    best = Some((remaining, (dim.clone(), value.clone())));
                }
            }
            let Some((remaining, pair)) = best else {
                break;
            };
            elements.push(pair);
            left = remaining;
        }
        elements.sort();
        elements
    }

    pub(crate) fn matches(&self, leaf: usize, elements: &[(String, String)]) -> bool {
        elements.iter().all(|(dim, value)| {
            self.dims
                .iter()
                .position(|d| d == dim)
                .is_some_and(|i| &self.values[leaf][i] == value)
        })
    }
}

/// A slice whose requests' mean prompt length grew: set aside from latency localization.
pub(crate) struct DemandShift {
    pub(crate) elements: Vec<(String, String)>,
    /// Mean input tokens per request in the baseline and in the incident.
    pub(crate) before: f64,
    pub(crate) after: f64,
}

impl DemandShift {
    pub(crate) fn signal(&self, onset: i64) -> Signal {
        let subject: BTreeMap<String, String> = self.elements.iter().cloned().collect();
        let factor = self.after / self.before;
        Signal {
            kind: SignalKind::DemandShift,
            detail: format!(
                "{}: prompts {factor:.1}× longer (mean input tokens {:.0} → {:.0}); its latency rise follows its own prompt length, so it was set aside when localizing latency",
                Subject::describe(&subject),
                self.before,
                self.after
            ),
            subject: subject.into(),
            onset,
            strength: factor,
        }
    }
}

/// With several causes, the greedy scan may pick for the first one a coarser combination that
/// also covers the leaves of a later, independent cause (their excess makes the superset look
/// better). Backfitting: localize each cause again on the leaves no *other* cause covers, and
/// keep the refined combination when it overlaps the original one. Then every cause is
/// described apart from the known causes ([`Leaves::apart_from_known`]).
pub(crate) fn backfit(
    leaves: &Leaves<'_>,
    universe: &[usize],
    causes: &mut [infersight_analytics::localize::RootCause],
    params: &Params,
) -> Result<(), QueryError> {
    if causes.len() >= 2 {
        refit(leaves, universe, causes, params)?;
    }
    for cause in causes.iter_mut() {
        cause.elements = leaves.apart_from_known(std::mem::take(&mut cause.elements));
    }
    Ok(())
}

/// The refit of [`backfit`], for two causes or more.
fn refit(
    leaves: &Leaves<'_>,
    universe: &[usize],
    causes: &mut [infersight_analytics::localize::RootCause],
    params: &Params,
) -> Result<(), QueryError> {
    let originals: Vec<Vec<(String, String)>> = causes.iter().map(|c| c.elements.clone()).collect();
    for i in 0..causes.len() {
        if leaves.known.iter().any(|k| same_pairs(k, &originals[i])) {
            continue; // known from elsewhere: its description is not the scan's to refine
        }
        let subset: Vec<usize> = universe
            .iter()
            .copied()
            .filter(|&leaf| {
                originals
                    .iter()
                    .enumerate()
                    .all(|(j, other)| j == i || !leaves.matches(leaf, other))
            })
            .collect();
        let refined = leaves.localize(&subset, params)?;
        let mut elements = originals[i].clone();
        if let Some(best) = refined.root_causes.into_iter().next()
            && best.elements.iter().any(|pair| originals[i].contains(pair))
        {
            causes[i].real = best.real;
            causes[i].forecast = best.forecast;
            causes[i].score = causes[i].score.max(best.score);
            elements = best.elements;
        }
        let others: Vec<&Vec<(String, String)>> = originals
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, o)| o)
            .collect();
        causes[i].elements = prefer_disjoint(leaves, &subset, elements, &others);
    }
    Ok(())
}

/// Whether two combinations hold the same pairs, in any order.
fn same_pairs(a: &[(String, String)], b: &[(String, String)]) -> bool {
    a.len() == b.len() && a.iter().all(|pair| b.contains(pair))
}

/// Among combinations that cover exactly the same leaves of `subset` as `elements` (one pair
/// swapped for another dimension's value), the one that covers the fewest leaves of the other
/// causes in the whole table: of two equivalent descriptions of a cause, the one that does not
/// also describe another cause's leaves is the more specific explanation.
pub(crate) fn prefer_disjoint(
    leaves: &Leaves<'_>,
    subset: &[usize],
    elements: Vec<(String, String)>,
    others: &[&Vec<(String, String)>],
) -> Vec<(String, String)> {
    let coverage = |e: &[(String, String)]| -> Vec<usize> {
        subset
            .iter()
            .copied()
            .filter(|&leaf| leaves.matches(leaf, e))
            .collect()
    };
    let overlap = |e: &[(String, String)]| -> usize {
        (0..leaves.values.len())
            .filter(|&leaf| {
                leaves.matches(leaf, e) && others.iter().any(|o| leaves.matches(leaf, o))
            })
            .count()
    };
    let target = coverage(&elements);
    let mut best = (overlap(&elements), elements.clone());
    for (k, _) in elements.iter().enumerate() {
        for (d, dim) in leaves.dims.iter().enumerate() {
            if elements.iter().any(|(name, _)| name == dim) {
                continue;
            }
            let mut values: Vec<&String> =
                target.iter().map(|&leaf| &leaves.values[leaf][d]).collect();
            values.sort();
            values.dedup();
            let [value] = values.as_slice() else {
                continue; // the swapped-in pair must hold on every covered leaf
            };
            let mut candidate = elements.clone();
            candidate[k] = (dim.clone(), (*value).clone());
            if coverage(&candidate) == target {
                let score = overlap(&candidate);
                if score < best.0 {
                    best = (score, candidate);
                }
            }
        }
    }
    let mut chosen = best.1;
    chosen.sort();
    chosen
}
