//! The vocabulary of a verdict, shared by the detectors that find signals, the root-cause
//! application that reports them, the report that retrieves runbooks for them and every surface
//! that prints them: [`SignalKind`] (the `rca` contract's `signals[].kind`, DESIGN.md) and
//! [`Subject`] (an attribute combination: a root cause, a signal's subject) with the one way a
//! combination is written for people.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Deref, DerefMut};

use serde::{Deserialize, Serialize};

/// Signal kinds of the `rca` JSON contract; the serde name (and [`SignalKind::name`]) is the
/// wire name. New kinds may be added; existing ones keep their name and meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignalKind {
    LatencySpike,
    GpuMemoryLeak,
    QueueBuildup,
    KvCachePressure,
    PreemptionStorm,
    CachePollution,
    Resonance,
    TruncationSurge,
    TraceContextLoss,
    FlowControlStall,
    SlowWorker,
    VersionRegression,
    PromptDrift,
    ErrorBurst,
    /// A slice whose prompts grew so much that its latency has no comparable baseline (not in
    /// DESIGN.md's list; the root-cause engine reports it beside the contract's kinds).
    DemandShift,
}

impl SignalKind {
    /// The kinds DESIGN.md's contract lists, in its order; every one has a built-in runbook.
    pub const CONTRACT: [SignalKind; 14] = [
        SignalKind::LatencySpike,
        SignalKind::GpuMemoryLeak,
        SignalKind::QueueBuildup,
        SignalKind::KvCachePressure,
        SignalKind::PreemptionStorm,
        SignalKind::CachePollution,
        SignalKind::Resonance,
        SignalKind::TruncationSurge,
        SignalKind::TraceContextLoss,
        SignalKind::FlowControlStall,
        SignalKind::SlowWorker,
        SignalKind::VersionRegression,
        SignalKind::PromptDrift,
        SignalKind::ErrorBurst,
    ];

    /// Every kind: the contract's and [`SignalKind::DemandShift`].
    pub const ALL: [SignalKind; 15] = {
        let mut all = [SignalKind::DemandShift; 15];
        let mut i = 0;
        while i < SignalKind::CONTRACT.len() {
            all[i] = SignalKind::CONTRACT[i];
            i += 1;
        }
        all
    };

    /// The name used in the `rca` JSON `signals[].kind`.
    pub const fn name(self) -> &'static str {
        match self {
            SignalKind::LatencySpike => "latency_spike",
            SignalKind::GpuMemoryLeak => "gpu_memory_leak",
            SignalKind::QueueBuildup => "queue_buildup",
            SignalKind::KvCachePressure => "kv_cache_pressure",
            SignalKind::PreemptionStorm => "preemption_storm",
            SignalKind::CachePollution => "cache_pollution",
            SignalKind::Resonance => "resonance",
            SignalKind::TruncationSurge => "truncation_surge",
            SignalKind::TraceContextLoss => "trace_context_loss",
            SignalKind::FlowControlStall => "flow_control_stall",
            SignalKind::SlowWorker => "slow_worker",
            SignalKind::VersionRegression => "version_regression",
            SignalKind::PromptDrift => "prompt_drift",
            SignalKind::ErrorBurst => "error_burst",
            SignalKind::DemandShift => "demand_shift",
        }
    }

    /// The kind whose wire name is `name`.
    pub fn parse(name: &str) -> Option<SignalKind> {
        SignalKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl fmt::Display for SignalKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An attribute combination (`attribute → value`, ordered by attribute): a root cause, the
/// subject of a signal, the slice log evidence was restricted to. Serialized as a plain JSON
/// object; empty means the whole fleet.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Subject(pub BTreeMap<String, String>);

impl Subject {
    /// How an empty subject is written.
    pub const FLEET: &'static str = "the whole fleet";

    /// A subject of `(attribute, value)` pairs.
    pub fn of<K: Into<String>, V: Into<String>>(pairs: impl IntoIterator<Item = (K, V)>) -> Self {
        Subject(
            pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }

    pub fn into_inner(self) -> BTreeMap<String, String> {
        self.0
    }

    /// How `combination` is written for people (the [`Display`](fmt::Display) of a subject),
    /// for callers that hold a plain map.
    pub fn describe(combination: &BTreeMap<String, String>) -> String {
        Written(combination).to_string()
    }
}

/// The one rendering of a combination behind [`Subject`]'s `Display` and [`Subject::describe`].
struct Written<'a>(&'a BTreeMap<String, String>);

impl fmt::Display for Written<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str(Subject::FLEET);
        }
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" & ")?;
            }
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

/// `attr=value & attr=value` (attributes in order), or [`Subject::FLEET`] when empty: the one
/// way every report, CLI table and verdict writes a combination.
impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Written(&self.0).fmt(f)
    }
}

impl Deref for Subject {
    type Target = BTreeMap<String, String>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for Subject {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl From<BTreeMap<String, String>> for Subject {
    fn from(map: BTreeMap<String, String>) -> Self {
        Subject(map)
    }
}

impl From<Subject> for BTreeMap<String, String> {
    fn from(subject: Subject) -> Self {
        subject.0
    }
}

impl FromIterator<(String, String)> for Subject {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Self {
        Subject(iter.into_iter().collect())
    }
}

impl PartialEq<BTreeMap<String, String>> for Subject {
    fn eq(&self, other: &BTreeMap<String, String>) -> bool {
        &self.0 == other
    }
}

impl<'a> IntoIterator for &'a Subject {
    type Item = (&'a String, &'a String);
    type IntoIter = std::collections::btree_map::Iter<'a, String, String>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_by_name_and_serde() {
        for kind in SignalKind::ALL {
            assert_eq!(SignalKind::parse(kind.name()), Some(kind));
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.name()));
            assert_eq!(serde_json::from_str::<SignalKind>(&json).unwrap(), kind);
        }
        assert_eq!(SignalKind::parse("no_such_kind"), None);
        assert!(serde_json::from_str::<SignalKind>("\"no_such_kind\"").is_err());
        // every kind once, the contract's first
        let mut names: Vec<&str> = SignalKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names[..14], SignalKind::CONTRACT.map(|k| k.name()));
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SignalKind::ALL.len());
    }

    #[test]
    fn subjects_are_written_one_way() {
        let subject = Subject::of([("model_version", "r2"), ("kv_cache_policy", "paged")]);
        assert_eq!(
            subject.to_string(),
            "kv_cache_policy=paged & model_version=r2"
        );
        assert_eq!(Subject::default().to_string(), "the whole fleet");
        assert_eq!(
            serde_json::to_string(&subject).unwrap(),
            r#"{"kv_cache_policy":"paged","model_version":"r2"}"#
        );
    }
}
