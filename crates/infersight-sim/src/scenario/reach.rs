//! Where a fault strikes beyond its scenario's own definition, for the variations that move it:
//! narrowed to one pod or one region of the slice it hits (`one_pod`, `one_region`), or joined
//! by a second fault, a thermally throttled pod outside that slice (`throttled_pod`). Chosen
//! once per run from the seed (a random stream of its own, so nothing else moves); the plan
//! consults [`Reach::admits`] and [`Reach::throttled`], and the ground truth is restated here.

use std::collections::BTreeMap;

use crate::fleet::{Fleet, LORA_SETS, WorkerSpec};
use crate::rng::Rng;
use crate::variation::Variation;

use super::{ExpectedSignal, GroundTruth, Plan, RootCauseTruth, cause, signal};

/// Random stream of the reach's choices (streams 1–4 drive the rest of the run).
const REACH_STREAM: u64 = 5;

/// Dimensions of a cause that a worker's settings decide (the rest are per request).
const WORKER_KEYS: [&str; 4] = ["worker", "model", "model_version", "kv_cache_policy"];

/// The fault's reach: everywhere its scenario says (the default), or narrowed, or with a
/// second throttled pod.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reach {
    /// The one worker (fleet index) the scenario's fault acts on.
    pub only_worker: Option<usize>,
    /// The one region the scenario's fault acts in.
    pub only_region: Option<&'static str>,
    /// A worker thermally throttled besides the scenario's fault.
    pub throttled: Option<usize>,
}

impl Reach {
    /// Whether the scenario's own fault acts on `worker`.
    pub fn admits(&self, worker: &WorkerSpec) -> bool {
        self.only_worker.is_none_or(|w| w == worker.index)
            && self.only_region.is_none_or(|r| r == worker.region)
    }

    /// Chooses the reach of `variations` for `plan` on `fleet` (its reach still the default).
    pub fn choose(plan: &Plan, fleet: &Fleet, variations: &[Variation], seed: u64) -> Reach {
        let mut rng = Rng::stream(seed, REACH_STREAM);
        let mut reach = Reach::default();
        let affected: Vec<&WorkerSpec> = fleet.workers.iter().filter(|w| plan.acts_on(w)).collect();
        let narrowable = plan.scenario.narrowable() && affected.len() > 1;
        if narrowable && variations.contains(&Variation::OnePod) {
            reach.only_worker = Some(pick(&mut rng, &affected).index);
        }
        if narrowable && variations.contains(&Variation::OneRegion) {
            reach.only_region = Some(pick(&mut rng, &affected).region);
        }
        if variations.contains(&Variation::ThrottledPod)
            && Variation::ThrottledPod.applies_to(plan.scenario)
        {
            let causes = plan.root_causes(fleet);
            let bystanders: Vec<&WorkerSpec> = fleet
                .workers
                .iter()
                .filter(|w| !plan.acts_on(w) && !causes.iter().any(|c| names(c, w)))
                .collect();
            if !bystanders.is_empty() {
                reach.throttled = Some(pick(&mut rng, &bystanders).index);
            }
        }
        reach
    }

    /// States the ground truth of the reach: a narrowed cause names its pod (in place of the
    /// settings the pod implies) or adds its region, on the cause and on every expected signal
    /// about it; a throttled pod adds its own cause, signals and runbook.
    pub fn restate(&self, fleet: &Fleet, truth: &mut GroundTruth) {
        for cause in &mut truth.root_causes {
            let narrowed = self.narrowed(fleet, &cause.dimensions);
            // A region of a small fleet may hold one pod of the slice: the pod is as right.
            let pods: Vec<&WorkerSpec> = fleet
                .workers
                .iter()
                .filter(|w| self.only_region.is_some_and(|r| r == w.region))
                .filter(|w| names(cause, w))
                .collect();
            if let [pod] = pods.as_slice() {
                let mut alternative = cause.dimensions.clone();
                alternative.retain(|key, _| !WORKER_KEYS.contains(&key.as_str()));
                alternative.extend(dims_of_worker(pod));
                cause.equivalent.push(alternative);
            }
            for expected in &mut truth.expected_signals {
                if expected.subject == cause.dimensions {
                    expected.subject = narrowed.clone();
                }
            }
            cause.dimensions = narrowed;
        }
        if let Some(index) = self.throttled {
            let pod = dims_of_worker(&fleet.workers[index]);
            truth.root_causes.push(cause(
                pod.clone(),
                "e2e_ms p50",
                "×2.2 (prefill and decode) on that worker, a second fault at the same time; GPU temperature 92 °C, SM clock −45 %",
            ));
            let signals: [ExpectedSignal; 2] = [
                signal("slow_worker", pod.clone()),
                signal("latency_spike", pod),
            ];
            truth.expected_signals.extend(signals);
            if !truth.expected_runbooks.iter().any(|r| r == "slow-worker") {
                truth.expected_runbooks.push("slow-worker".to_string());
            }
        }
    }

    fn narrowed(
        &self,
        fleet: &Fleet,
        dimensions: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        let mut out = dimensions.clone();
        if let Some(index) = self.only_worker {
            out.retain(|key, _| !WORKER_KEYS.contains(&key.as_str()));
            out.extend(dims_of_worker(&fleet.workers[index]));
        }
        if let Some(region) = self.only_region {
            out.insert("cloud.region".to_string(), region.to_string());
        }
        out
    }
}

fn pick<'a>(rng: &mut Rng, workers: &[&'a WorkerSpec]) -> &'a WorkerSpec {
    workers[rng.below(workers.len() as u64) as usize]
}

fn dims_of_worker(worker: &WorkerSpec) -> BTreeMap<String, String> {
    BTreeMap::from([("worker".to_string(), worker.name.clone())])
}

/// Whether `cause` names `worker`: it has settings a worker decides, and `worker` has them all.
fn names(cause: &RootCauseTruth, worker: &WorkerSpec) -> bool {
    let mut decided = cause
        .dimensions
        .iter()
        .filter(|(key, _)| WORKER_KEYS.contains(&key.as_str()))
        .peekable();
    decided.peek().is_some()
        && decided.all(|(key, value)| match key.as_str() {
            "worker" => worker.name == *value,
            "model" => worker.model == value,
            "model_version" => worker.model_version == value,
            _ => worker.kv_policy.name() == value,
        })
}

impl Plan {
    /// Whether the scenario's fault changes anything on `worker` late in the incident, for
    /// some LoRA set. Through gateway 0 only: the faults of an upgraded gateway (gateway 1)
    /// reach every worker and are nobody's slice.
    fn acts_on(&self, worker: &WorkerSpec) -> bool {
        let late = self.end_ns - 1;
        let calm = super::WorkerCondition {
            leaked_gb: 0.0,
            utilization_cap: None,
            throttle: 0.0,
            kv_capacity_factor: 1.0,
            batch_wait_ms: None,
        };
        self.condition(worker, late) != calm
            || LORA_SETS
                .iter()
                .any(|lora| self.effects(worker, lora, 0, late) != super::Effects::default())
    }
}
