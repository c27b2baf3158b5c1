//! Windows, inside one pod: a pod its complete latency histograms show slowed (see
//! [`crate::pods`]) that no cause found so far covers is localized over its own leaves, and named
//! with the slice found there, or alone.

use std::collections::BTreeMap;

use infersight_analytics::localize::{NoiseModel, Params};
use infersight_query::QueryError;
use infersight_rollup::Cell;

use super::{
    Findings, LeafCells, Significant, evidence, localize_apart_from_demand_shifts, on_signal,
    slice_rate,
};
use crate::Symptom;
use crate::measures::{MODEL_DIMENSION, Measure};
use crate::pods::{POD_ALPHA, SlowPod};

/// How far a pod's mix of a dimension's values must move between the windows (total
/// variation of the request shares) to count as a rollout inside it (see
/// [`LeafCells::inside_pod`]).
const ROLLED_OUT_SHARE: f64 = 0.5;

/// The share of a slowed pod's incident requests that slices set aside as demand shifts must
/// carry for the pod not to be named by its histograms alone (see `Findings::add_pods`).
const POD_DEMAND_SHARE: f64 = 0.2;

/// Most pairs [`LeafCells::pods_set_apart`] names a group of pods by, where fewer do not set
/// them apart.
const MAX_APART: usize = 3;

/// A slice the localization inside one pod found, before it is named.
struct PodSlice<'a> {
    pod: &'a SlowPod,
    /// The pod's measure and the fleet's z in it.
    measure: (f64, &'a Measure),
    /// Its elements without the pod.
    cause: infersight_analytics::localize::RootCause,
}

impl LeafCells {
    /// The leaves of one pod (`pair`: its worker) told apart only by the dimensions that vary
    /// within it (those the pod fixes, its region or node, would only multiply the candidates
    /// the significance bar counts; the model stays, its thresholds need it) and whose mix did
    /// not turn over at the incident (a version rolled out to the pod: its requests from then on
    /// carry a value few or none before did, and a leaf without a baseline cannot be judged;
    /// turned over: the shares of the pod's requests per value moved by [`ROLLED_OUT_SHARE`]
    /// or more in total variation), cells merged over the rest, so each slice is compared with
    /// itself before the rollout. `None` when nothing varies.
    fn inside_pod(&self, pair: &(String, String)) -> Option<LeafCells> {
        let worker = self.dims.iter().position(|d| *d == pair.0)?;
        let pod: Vec<usize> = (0..self.values.len())
            .filter(|&leaf| self.values[leaf][worker] == pair.1)
            .collect();
        // per value of a dimension, its share of the pod's requests in a window
        let shares = |d: usize, cells: &[Cell]| -> BTreeMap<&String, f64> {
            let mut out: BTreeMap<&String, f64> = BTreeMap::new();
            for &leaf in &pod {
                *out.entry(&self.values[leaf][d]).or_default() += cells[leaf].requests as f64;
            }
            let total: f64 = out.values().sum();
            out.values_mut()
                .for_each(|v| *v = if total > 0.0 { *v / total } else { 0.0 });
            out.retain(|_, v| *v > 0.0);
            out
        };
        let kept: Vec<usize> = (0..self.dims.len())
            .filter(|&d| {
                let (before, after) = (shares(d, &self.base), shares(d, &self.incident));
                let values: std::collections::BTreeSet<&&String> =
                    before.keys().chain(after.keys()).collect();
                // how far the pod's mix of the dimension's values moved (total variation)
                let share =
                    |side: &BTreeMap<&String, f64>, v: &String| *side.get(v).unwrap_or(&0.0);
                let moved: f64 = values
                    .iter()
                    .map(|v| (share(&before, v) - share(&after, v)).abs())
                    .sum::<f64>()
                    / 2.0;
                let varies = values.len() > 1;
                self.dims[d] == MODEL_DIMENSION || (varies && moved < ROLLED_OUT_SHARE)
            })
            .collect();
        if !kept.iter().any(|&d| self.dims[d] != MODEL_DIMENSION) {
            return None;
        }
        let mut merged: BTreeMap<Vec<String>, (Cell, Cell, f64, f64)> = BTreeMap::new();
        for &leaf in &pod {
            let key: Vec<String> = kept.iter().map(|&d| self.values[leaf][d].clone()).collect();
            let entry = merged.entry(key).or_default();
            entry.0.merge(&self.base[leaf]);
            entry.1.merge(&self.incident[leaf]);
            // the merged leaf's weight: its leaves' weights, weighted by their requests
            let requests = (self.base[leaf].requests + self.incident[leaf].requests) as f64;
            entry.2 += self.sample_weight[leaf] * requests;
            entry.3 += requests;
        }
        let n = merged.len();
        let mut out = LeafCells {
            dims: kept.iter().map(|&d| self.dims[d].clone()).collect(),
            values: Vec::with_capacity(n),
            base: Vec::with_capacity(n),
            incident: Vec::with_capacity(n),
            stand_in: vec![None; n],
            stand_in_cells: Vec::new(),
            sample_weight: Vec::with_capacity(n),
            fleet_sample_weight: self.fleet_sample_weight,
            known: Vec::new(),
            significant: Significant::new(),
        };
        for (key, (base, incident, weighted, requests)) in merged {
            out.values.push(key);
            out.base.push(base);
            out.incident.push(incident);
            out.sample_weight.push(if requests > 0.0 {
                weighted / requests
            } else {
                1.0
            });
        }
        Some(out)
    }

    /// What sets the pods `workers` apart from every other pod, for the slice `elements` found
    /// inside each of them: the `(dimension, value)` pairs each of them holds on all its
    /// incident requests (a version, a cache policy, a region; not those of `elements`) whose
    /// conjunction no other pod's incident requests match. The fewest pairs that do (at most
    /// [`MAX_APART`]; among as few, those whose values the pods' requests moved to most at the
    /// incident, the change they went through, then earlier dimensions first: the serving
    /// columns before discovered attributes), else all they share; `None` when even that
    /// matches another pod (the slice may run there unslowed: the pods stay named) or they
    /// share nothing.
    fn pods_set_apart(
        &self,
        workers: &[&str],
        elements: &[(String, String)],
    ) -> Option<Vec<(String, String)>> {
        let worker = self.dims.iter().position(|d| d == "worker")?;
        let live: Vec<usize> = (0..self.values.len())
            .filter(|&leaf| self.incident[leaf].requests > 0)
            .collect();
        let held = |d: usize| -> Option<&String> {
            let mut values = live
                .iter()
                .filter(|&&leaf| workers.contains(&self.values[leaf][worker].as_str()))
                .map(|&leaf| &self.values[leaf][d]);
            let first = values.next()?;
            values.all(|v| v == first).then_some(first)
        };
        let shared: Vec<(String, String)> = (0..self.dims.len())
            .filter(|&d| d != worker && !elements.iter().any(|(k, _)| *k == self.dims[d]))
            .filter_map(|d| held(d).map(|v| (self.dims[d].clone(), v.clone())))
            .collect();
        // the pods whose incident requests hold every pair of `pairs`
        let pods_of = |pairs: &[(String, String)]| -> std::collections::BTreeSet<&str> {
            live.iter()
                .filter(|&&leaf| self.matches(leaf, pairs))
                .map(|&leaf| self.values[leaf][worker].as_str())
                .collect()
        };
        let wanted: std::collections::BTreeSet<&str> = workers.iter().copied().collect();
        if shared.is_empty() || pods_of(&shared) != wanted {
            return None;
        }
        // how far the pods' requests moved to the pairs' values at the incident (a rollout: its
        // first minutes may fall in the baseline), summed over the pairs
        let group: Vec<usize> = (0..self.values.len())
            .filter(|&leaf| workers.contains(&self.values[leaf][worker].as_str()))
            .collect();
        let share = |cells: &[Cell], pair: &(String, String)| {
            let (mut holding, mut all) = (0.0, 0.0);
            for &leaf in &group {
                let requests = cells[leaf].requests as f64;
                all += requests;
                if self.matches(leaf, std::slice::from_ref(pair)) {
                    holding += requests;
                }
            }
            if all > 0.0 { holding / all } else { 0.0 }
        };
        let moved_to = |pairs: &[(String, String)]| -> f64 {
            pairs
                .iter()
                .map(|pair| share(&self.incident, pair) - share(&self.base, pair))
                .sum()
        };
        for size in 1..=MAX_APART.min(shared.len()) {
            let mut best: Option<(f64, Vec<(String, String)>)> = None;
            let mut pick: Vec<usize> = (0..size).collect();
            loop {
                let pairs: Vec<(String, String)> =
                    pick.iter().map(|&i| shared[i].clone()).collect();
                if pods_of(&pairs) == wanted {
                    let moved = moved_to(&pairs);
                    if best.as_ref().is_none_or(|(m, _)| moved > *m) {
                        best = Some((moved, pairs));
                    }
                }
                // the next combination of `size` indices, in lexicographic order
                let Some(i) = (0..size).rev().find(|&i| pick[i] < shared.len() - size + i) else {
                    break;
                };
                pick[i] += 1;
                for j in i + 1..size {
                    pick[j] = pick[j - 1] + 1;
                }
            }
            if let Some((_, pairs)) = best {
                return Some(pairs);
            }
        }
        Some(shared)
    }

    /// The slice `elements` over the fleet's leaves as a cause in `measure`, for slices found
    /// alike inside pods: its events per unit in the incident (`real`) and in the baseline
    /// (`forecast`; a stand-in where it has none), its share of the fleet's excess (the
    /// incident units at the baseline rate, each side aggregated), and the pods' scores summed.
    fn slice_cause(
        &self,
        measure: &Measure,
        elements: Vec<(String, String)>,
        found: &[PodSlice<'_>],
    ) -> infersight_analytics::localize::RootCause {
        let leaves = self.leaves(measure);
        // (incident events, incident units, baseline events, baseline units)
        let totals = |slice: bool| {
            let mut t = (0.0, 0.0, 0.0, 0.0);
            for leaf in 0..self.values.len() {
                if slice && !self.matches(leaf, &elements) {
                    continue;
                }
                let (incident, base) = (&self.incident[leaf], self.baseline_of(leaf));
                t.0 += (leaves.event_of)(leaf, incident);
                t.1 += (leaves.denominator_of)(incident);
                t.2 += (leaves.event_of)(leaf, base);
                t.3 += (leaves.denominator_of)(base);
            }
            t
        };
        let rate = |events: f64, units: f64| if units > 0.0 { events / units } else { 0.0 };
        let excess = |t: (f64, f64, f64, f64)| t.0 - t.1 * rate(t.2, t.3);
        let (slice, fleet) = (totals(true), totals(false));
        infersight_analytics::localize::RootCause {
            explained_fraction: if excess(fleet) != 0.0 {
                excess(slice) / excess(fleet)
            } else {
                0.0
            },
            score: found.iter().map(|s| s.cause.score).sum(),
            real: rate(slice.0, slice.1),
            forecast: rate(slice.2, slice.3),
            leaves: found.iter().map(|s| s.cause.leaves).sum(),
            elements,
        }
    }

    /// Whether the leaf holds every `(dimension, value)` of `elements`.
    fn matches(&self, leaf: usize, elements: &[(String, String)]) -> bool {
        elements.iter().all(|(dim, value)| {
            self.dims
                .iter()
                .position(|d| d == dim)
                .is_some_and(|i| &self.values[leaf][i] == value)
        })
    }
}

impl Findings {
    /// Each pod of `pods` whose requests no cause found so far (nor a known one) covers is
    /// looked inside: its leaves alone are localized in the pod's measure at [`POD_ALPHA`] (the
    /// pod's rise is established on its complete histograms; what is left is which of its
    /// slices carries it, a far smaller family than the fleet's), each slice found named with
    /// the pod; without one, the pod itself is the cause, on its histograms' evidence, ranked
    /// like a known cause, unless slices set aside as demand shifts (there, or by the fleet's
    /// measures, carrying [`POD_DEMAND_SHARE`] of its requests) may explain its rise.
    /// Where no fleet measure moved enough to be a symptom (sampled traces hide a pod's share of
    /// the fleet), the first pod named gives the symptom: its histograms count every request.
    pub(super) fn add_pods(
        &mut self,
        cells: &LeafCells,
        (measures, onset): (&[(f64, Measure)], i64),
        pods: &[SlowPod],
        params: &Params,
    ) -> Result<(), QueryError> {
        // few leaves, the slice a large part of them: a dispersion fitted there would be the
        // slice's own change (see `NoiseModel::Poisson`)
        let params = Params {
            alpha: POD_ALPHA,
            noise: NoiseModel::Poisson,
            ..params.clone()
        };
        let mut found_inside: Vec<PodSlice<'_>> = Vec::new();
        for pod in pods {
            let Some((z, measure)) = measures.iter().find(|(_, m)| m.name == pod.measure) else {
                continue;
            };
            let pair = ("worker".to_string(), pod.worker.clone());
            let leaves = cells.leaves(measure);
            let inside: Vec<usize> = (0..cells.values.len())
                .filter(|&leaf| leaves.matches(leaf, std::slice::from_ref(&pair)))
                .collect();
            let found: Vec<Vec<(String, String)>> = self
                .causes
                .iter()
                .map(|c| {
                    c.dimensions
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .chain(cells.known.iter().cloned())
                .collect();
            let covered = found
                .iter()
                .any(|elements| inside.iter().any(|&leaf| leaves.matches(leaf, elements)));
            if inside.is_empty() || covered {
                continue;
            }
            // the pod's leaves localized; a slice set aside there as a demand shift (its prompts
            // grew) explains the pod's rise by what it was sent, not by the pod
            let (causes, set_aside) = match cells.inside_pod(&pair) {
                Some(pod_cells) => {
                    let pod_leaves = pod_cells.leaves(measure);
                    let mut all: Vec<usize> = (0..pod_cells.values.len())
                        .filter(|&leaf| (measure.eligible)(pod_cells.baseline_of(leaf)))
                        .collect();
                    let eligible = all.len();
                    let found = localize_apart_from_demand_shifts(
                        &pod_leaves,
                        measure,
                        &mut all,
                        &params,
                        &mut self.demand_shifts,
                    )?;
                    (found.root_causes, all.len() < eligible)
                }
                None => (Vec::new(), false),
            };
            if causes.is_empty() && (set_aside || self.demand_carries(cells, &inside)) {
                continue;
            }
            if self.symptom.is_none() {
                self.symptom = Some(Symptom {
                    sli: measure.name.clone(),
                    baseline: measure.fleet_values.0,
                    current: measure.fleet_values.1,
                    onset,
                    z: *z,
                });
            }
            if causes.is_empty() {
                let dimensions: BTreeMap<String, String> = [pair.clone()].into_iter().collect();
                if !self.causes.iter().any(|c| c.dimensions == dimensions) {
                    self.causes.push(on_signal(dimensions, pod.evidence()));
                }
            }
            for mut cause in causes {
                cause.elements.retain(|e| *e != pair);
                found_inside.push(PodSlice {
                    pod,
                    measure: (*z, measure),
                    cause,
                });
            }
        }
        self.name_pod_slices(cells, found_inside);
        Ok(())
    }

    /// Names the slices found inside pods: each with its pod, but the same slice found alike
    /// inside several pods of one measure with what sets those pods apart instead, when their
    /// attributes do (see [`LeafCells::pods_set_apart`]: the fleet's slice that sampled traces
    /// hid, not one cause per pod it runs on). Its score is the pods' summed (their
    /// log-likelihood ratios are over disjoint requests); its rates and share of the excess are
    /// the merged slice's own, over the fleet's leaves.
    fn name_pod_slices(&mut self, cells: &LeafCells, found: Vec<PodSlice<'_>>) {
        // by measure and slice
        type Slice = Vec<(String, String)>;
        let mut groups: BTreeMap<(String, Slice), Vec<PodSlice<'_>>> = BTreeMap::new();
        for slice in found {
            let mut key = slice.cause.elements.clone();
            key.sort();
            groups
                .entry((slice.measure.1.name.clone(), key))
                .or_default()
                .push(slice);
        }
        for ((_, elements), slices) in groups {
            let workers: Vec<&str> = slices.iter().map(|s| s.pod.worker.as_str()).collect();
            let apart = (slices.len() > 1)
                .then(|| cells.pods_set_apart(&workers, &elements))
                .flatten();
            let Some(apart) = apart else {
                for slice in slices {
                    let pair = ("worker".to_string(), slice.pod.worker.clone());
                    let mut cause = slice.cause;
                    cause.elements.push(pair);
                    let (z, measure) = slice.measure;
                    let evidence = format!(
                        "{}; {}",
                        evidence(measure, z, &cause, None),
                        slice.pod.evidence()
                    );
                    let rate = slice_rate(&cause, None);
                    self.add_cause(&cause, evidence, false, rate);
                }
                continue;
            };
            let (z, measure) = slices[0].measure;
            let mut merged = elements.clone();
            merged.extend(apart.iter().cloned());
            let cause = cells.slice_cause(measure, merged, &slices);
            let evidence = format!(
                "{}; found alike inside {} (the only pods with {}): {}",
                evidence(measure, z, &cause, None),
                workers.join(", "),
                apart
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" & "),
                slices
                    .iter()
                    .map(|s| s.pod.evidence())
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            let rate = slice_rate(&cause, None);
            self.add_cause(&cause, evidence, false, rate);
        }
    }

    /// Whether slices set aside as demand shifts so far carry [`POD_DEMAND_SHARE`] or more of
    /// the incident requests of the leaves `pod`: the pod's rise may be what it was sent.
    fn demand_carries(&self, cells: &LeafCells, pod: &[usize]) -> bool {
        let (mut shifted, mut all) = (0.0, 0.0);
        for &leaf in pod {
            let requests = cells.incident[leaf].requests as f64;
            all += requests;
            if self
                .demand_shifts
                .iter()
                .any(|d| cells.matches(leaf, &d.elements))
            {
                shifted += requests;
            }
        }
        all > 0.0 && shifted >= POD_DEMAND_SHARE * all
    }
}

#[cfg(test)]
mod tests {
    use infersight_model::rng::SplitMix64 as Rng;

    use super::*;

    /// Leaves over `dims` (the first is `worker`) from `rows` of (values, incident requests),
    /// each with 50 baseline requests.
    fn cells(dims: &[&str], rows: &[(Vec<String>, u64)]) -> LeafCells {
        let cell = |requests| Cell {
            requests,
            ..Cell::default()
        };
        LeafCells {
            dims: dims.iter().map(|d| d.to_string()).collect(),
            values: rows.iter().map(|(v, _)| v.clone()).collect(),
            base: rows.iter().map(|_| cell(50)).collect(),
            incident: rows.iter().map(|(_, n)| cell(*n)).collect(),
            stand_in: vec![None; rows.len()],
            stand_in_cells: Vec::new(),
            sample_weight: vec![1.0; rows.len()],
            fleet_sample_weight: 1.0,
            known: Vec::new(),
            significant: Significant::new(),
        }
    }

    const DIMS: [&str; 5] = ["worker", "build", "cache", "zone", "tenant"];

    /// Per pod: its build, cache and zone; each pod serves three tenants.
    fn fleet(pods: &[[&str; 3]]) -> LeafCells {
        let mut rows = Vec::new();
        for (i, [build, cache, zone]) in pods.iter().enumerate() {
            for tenant in ["acme", "globex", "initech"] {
                let values = [&format!("pod-{i}"), *build, *cache, *zone, tenant];
                rows.push((values.iter().map(|v| v.to_string()).collect(), 40));
            }
        }
        cells(&DIMS, &rows)
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn pods_are_named_by_the_fewest_attributes_only_they_share() {
        let cells = fleet(&[
            ["b1", "paged", "east"],
            ["b2", "paged", "east"],
            ["b2", "flat", "west"],
            ["b1", "flat", "east"],
            ["b2", "paged", "west"],
            ["b1", "flat", "west"],
        ]);
        let tenant = pairs(&[("tenant", "acme")]);
        // pods 1 and 4 are the only ones on build b2 with the paged cache (zone differs)
        assert_eq!(
            cells.pods_set_apart(&["pod-1", "pod-4"], &tenant),
            Some(pairs(&[("build", "b2"), ("cache", "paged")]))
        );
        // one pair is enough when one pair sets them apart: pods 2 and 4 are the b2 & west pods,
        // and 0, 1, 3 the only east ones
        assert_eq!(
            cells.pods_set_apart(&["pod-0", "pod-1", "pod-3"], &tenant),
            Some(pairs(&[("zone", "east")]))
        );
        // pods 0 and 2 share nothing
        assert_eq!(cells.pods_set_apart(&["pod-0", "pod-2"], &tenant), None);
        // pods 0 and 3 share b1 & east; b1 alone is pod 5's too, east alone pod 1's
        let got = cells.pods_set_apart(&["pod-0", "pod-3"], &tenant);
        assert_eq!(got, Some(pairs(&[("build", "b1"), ("zone", "east")])));
        // a dimension the slice itself names is not what sets the pods apart
        assert_eq!(
            cells.pods_set_apart(&["pod-1", "pod-4"], &pairs(&[("cache", "paged")])),
            None
        );
    }

    #[test]
    fn among_as_few_pairs_a_value_the_pods_changed_to_names_them() {
        // pods 1 and 4 alone run runtime v0.10, before and during the incident; at the
        // incident they alone moved from r2 to r3 (the other odd pods stay on r2)
        let dims = ["worker", "runtime", "version", "tenant"];
        let mut rows = Vec::new();
        let runtime = ["v0.9", "v0.10", "v0.9", "v0.9", "v0.10", "v0.9"];
        for (pod, runtime) in runtime.iter().enumerate() {
            let moved = pod == 1 || pod == 4;
            for tenant in ["acme", "globex"] {
                let row = |version: &str| {
                    [&format!("pod-{pod}"), *runtime, version, tenant]
                        .map(|v| v.to_string())
                        .to_vec()
                };
                let version = if pod % 2 == 0 { "r1" } else { "r2" };
                rows.push((row(version), if moved { 0 } else { 40 }));
                if moved {
                    rows.push((row("r3"), 40));
                }
            }
        }
        let mut cells = cells(&dims, &rows);
        // the rollout's first minute fell in the baseline: a few r3 requests there
        for leaf in 0..cells.values.len() {
            if cells.values[leaf][2] == "r3" {
                cells.base[leaf].requests = 3;
            }
        }
        let tenant = pairs(&[("tenant", "acme")]);
        assert_eq!(
            cells.pods_set_apart(&["pod-1", "pod-4"], &tenant),
            Some(pairs(&[("version", "r3")]))
        );
        // had the two pods run r3 all along, the earlier dimension names them
        for leaf in 0..cells.values.len() {
            cells.base[leaf].requests = cells.incident[leaf].requests;
        }
        assert_eq!(
            cells.pods_set_apart(&["pod-1", "pod-4"], &tenant),
            Some(pairs(&[("runtime", "v0.10")]))
        );
    }

    #[test]
    fn pods_are_not_merged_when_another_pod_shares_all_they_share() {
        // pod 5 is b2 & paged too: the slice may run there unslowed
        let cells = fleet(&[
            ["b1", "paged", "east"],
            ["b2", "paged", "east"],
            ["b2", "flat", "west"],
            ["b1", "flat", "east"],
            ["b2", "paged", "east"],
            ["b2", "paged", "east"],
        ]);
        let tenant = pairs(&[("tenant", "acme")]);
        assert_eq!(cells.pods_set_apart(&["pod-1", "pod-4"], &tenant), None);
        assert_eq!(
            cells.pods_set_apart(&["pod-1", "pod-4", "pod-5"], &tenant),
            Some(pairs(&[("build", "b2"), ("cache", "paged")]))
        );
    }

    #[test]
    fn a_value_a_pod_changed_during_the_incident_does_not_set_it_apart() {
        // pod 1 serves part of its incident requests on b1 still: b2 is not held by all of
        // them, and a pod that served no incident request on a value does not hold it
        let mut cells = fleet(&[
            ["b1", "paged", "east"],
            ["b2", "paged", "east"],
            ["b1", "flat", "west"],
            ["b2", "paged", "west"],
        ]);
        let tenant = pairs(&[("tenant", "acme")]);
        assert_eq!(
            cells.pods_set_apart(&["pod-1", "pod-3"], &tenant),
            Some(pairs(&[("build", "b2")]))
        );
        // pod 3's first leaf (three tenants per pod), on the old build
        let mut old = cells.values[9].clone();
        old[1] = "b1".into();
        cells.values.push(old);
        cells.base.push(Cell::default());
        cells.incident.push(Cell {
            requests: 5,
            ..Cell::default()
        });
        cells.stand_in.push(None);
        cells.sample_weight.push(1.0);
        // left to share: the paged cache, which pod 0 has too
        assert_eq!(cells.pods_set_apart(&["pod-1", "pod-3"], &tenant), None);
        cells.incident.last_mut().unwrap().requests = 0;
        assert_eq!(
            cells.pods_set_apart(&["pod-1", "pod-3"], &tenant),
            Some(pairs(&[("build", "b2")]))
        );
    }

    #[test]
    fn whatever_the_fleet_the_pairs_named_match_exactly_the_pods() {
        for seed in 0..200 {
            let mut rng = Rng::new(seed);
            let builds = ["b1", "b2", "b3"];
            let caches = ["paged", "flat"];
            let zones = ["east", "west", "north"];
            let pods: Vec<[&str; 3]> = (0..8)
                .map(|_| {
                    [
                        builds[rng.below(3)],
                        caches[rng.below(2)],
                        zones[rng.below(3)],
                    ]
                })
                .collect();
            let cells = fleet(&pods);
            let group: Vec<String> = (0..8)
                .filter(|_| rng.uniform() < 0.3)
                .map(|i| format!("pod-{i}"))
                .collect();
            let workers: Vec<&str> = group.iter().map(String::as_str).collect();
            if workers.len() < 2 {
                continue;
            }
            let shared: Vec<usize> = (0..3)
                .filter(|&d| {
                    workers.iter().all(|w| {
                        let i: usize = w[4..].parse().unwrap();
                        pods[i][d] == pods[workers[0][4..].parse::<usize>().unwrap()][d]
                    })
                })
                .collect();
            let matching = |pairs: &[(String, String)]| -> Vec<String> {
                (0..8)
                    .filter(|&i| {
                        pairs.iter().all(|(k, v)| {
                            let d = DIMS.iter().position(|x| x == k).unwrap() - 1;
                            pods[i][d] == v.as_str()
                        })
                    })
                    .map(|i| format!("pod-{i}"))
                    .collect()
            };
            let all_shared: Vec<(String, String)> = shared
                .iter()
                .map(|&d| {
                    let i: usize = workers[0][4..].parse().unwrap();
                    (DIMS[d + 1].to_string(), pods[i][d].to_string())
                })
                .collect();
            let tenant = pairs(&[("tenant", "globex")]);
            match cells.pods_set_apart(&workers, &tenant) {
                Some(found) => {
                    assert_eq!(matching(&found), group, "seed {seed}: {found:?}");
                    assert!(found.iter().all(|p| all_shared.contains(p)), "seed {seed}");
                    // none smaller pins the group
                    for drop in 0..found.len() {
                        let mut fewer = found.clone();
                        fewer.remove(drop);
                        assert!(
                            fewer.is_empty() || matching(&fewer) != group,
                            "seed {seed}: {found:?} is not the fewest"
                        );
                    }
                }
                None => assert!(
                    all_shared.is_empty() || matching(&all_shared) != group,
                    "seed {seed}: {all_shared:?} sets {group:?} apart"
                ),
            }
        }
    }
}
