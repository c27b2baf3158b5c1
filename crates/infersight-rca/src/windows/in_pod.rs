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
                if !cause.elements.contains(&pair) {
                    cause.elements.push(pair.clone());
                }
                let evidence = format!(
                    "{}; {}",
                    evidence(measure, *z, &cause, None),
                    pod.evidence()
                );
                let rate = slice_rate(&cause, None);
                self.add_cause(&cause, evidence, false, rate);
            }
        }
        Ok(())
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
