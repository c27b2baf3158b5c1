//! Rollouts, read off localization: a cause whose leaves carry a value no baseline leaf has (a
//! build, revision or deployment that exists only from the incident on, under whatever name,
//! mapped or not, span or resource attribute) has no baseline of its own. `windows` compares it
//! with its peers at the same time and with what it replaced ([`compare`]) and says both in the
//! cause's evidence. A cause whose name says version gets its version regression in `advice`
//! (new or not); any other rollout gets one here ([`version_regression`]).

use std::collections::{BTreeMap, BTreeSet};

use infersight_model::signal::{SignalKind, Subject};
use infersight_rollup::Cell;

use crate::Signal;

/// A new slice's share of events against its two references.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Comparison {
    /// Events per unit of the slice in the incident.
    pub(crate) slice: f64,
    /// The same of its peers at the same time: incident leaves that agree with one of its leaves
    /// on every dimension where that leaf's value is old, and hold old values where it holds new
    /// ones (the same tenants and models on the previous build); `None` without any.
    pub(crate) peers: Option<f64>,
    /// The same of what it replaced: baseline leaves that agree with one of its leaves on every
    /// dimension where that leaf's value is old; `None` without any.
    pub(crate) replaced: Option<f64>,
}

/// The leaves of one measure, as [`compare`] reads them.
pub(crate) struct LeafView<'a> {
    pub(crate) values: &'a [Vec<String>],
    pub(crate) base: &'a [Cell],
    pub(crate) incident: &'a [Cell],
    pub(crate) event_of: &'a dyn Fn(usize, &Cell) -> f64,
    pub(crate) denominator_of: &'a dyn Fn(&Cell) -> f64,
}

/// Compares the slice made of `slice_leaves` (each without baseline traffic) with its peers and
/// with what it replaced; `None` when the slice is empty or has no value new in the incident.
pub(crate) fn compare(view: &LeafView<'_>, slice_leaves: &[usize]) -> Option<Comparison> {
    let n_dims = view.values.first().map_or(0, Vec::len);
    let old: Vec<BTreeSet<&String>> = (0..n_dims)
        .map(|d| {
            view.values
                .iter()
                .zip(view.base)
                .filter(|(_, cell)| cell.requests > 0)
                .map(|(row, _)| &row[d])
                .collect()
        })
        .collect();
    let is_old = |row: &[String], d: usize| old[d].contains(&row[d]);
    let (mut peers, mut replaced) = (BTreeSet::new(), BTreeSet::new());
    let mut any_new = false;
    for &leaf in slice_leaves {
        let row = &view.values[leaf];
        let new: Vec<bool> = (0..n_dims).map(|d| !is_old(row, d)).collect();
        any_new |= new.iter().any(|n| *n);
        let agrees = |other: &Vec<String>| (0..n_dims).all(|d| new[d] || other[d] == row[d]);
        for (p, other) in view.values.iter().enumerate() {
            if !agrees(other) {
                continue;
            }
            if view.base[p].requests > 0 {
                replaced.insert(p);
            }
            if view.incident[p].requests > 0 && (0..n_dims).all(|d| !new[d] || is_old(other, d)) {
                peers.insert(p);
            }
        }
    }
    if !any_new {
        return None;
    }
    let share = |leaves: &mut dyn Iterator<Item = (usize, &Cell)>| -> Option<f64> {
        let (mut events, mut units) = (0.0, 0.0);
        for (leaf, cell) in leaves {
            events += (view.event_of)(leaf, cell);
            units += (view.denominator_of)(cell);
        }
        (units > 0.0).then(|| events / units)
    };
    Some(Comparison {
        slice: share(&mut slice_leaves.iter().map(|&l| (l, &view.incident[l])))?,
        peers: share(&mut peers.iter().map(|&p| (p, &view.incident[p]))),
        replaced: share(&mut replaced.iter().map(|&r| (r, &view.base[r]))),
    })
}

impl Comparison {
    /// "45.0 % … vs 5.1 % for its peers at the same time and 4.9 % for what it replaced before
    /// the incident", in the words of the cause's evidence (`unit`: what events are counted out
    /// of).
    pub(crate) fn text(&self, unit: &str) -> String {
        let mut against = Vec::new();
        if let Some(peers) = self.peers {
            against.push(format!(
                "{:.1} % for its peers at the same time",
                peers * 100.0
            ));
        }
        if let Some(replaced) = self.replaced {
            against.push(format!(
                "{:.1} % for what it replaced before the incident",
                replaced * 100.0
            ));
        }
        let against = if against.is_empty() {
            "nothing to compare with".to_string()
        } else {
            against.join(" and ")
        };
        format!(
            "{:.1} % of the slice's {unit} in the incident (new in the incident) vs {against}",
            self.slice * 100.0
        )
    }
}

/// The version regression a cause new in the incident makes: `evidence` is its first line.
pub(crate) fn version_regression(
    subject: &BTreeMap<String, String>,
    evidence: &str,
    score: f64,
    onset: i64,
) -> Signal {
    Signal {
        kind: SignalKind::VersionRegression,
        subject: subject.clone().into(),
        onset,
        strength: score,
        detail: format!(
            "{} exists only from the incident on and regressed: {evidence}",
            Subject::describe(subject)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(requests: u64, errors: u64) -> Cell {
        Cell {
            requests,
            errors,
            ..Cell::default()
        }
    }

    /// dims: (build, tenant); b-8 is new; tenant t3 only exists in the incident too.
    #[test]
    fn a_new_build_is_compared_with_its_peers_and_what_it_replaced() {
        let values: Vec<Vec<String>> = [
            ["b-7", "t1"],
            ["b-7", "t2"],
            ["b-8", "t1"],
            ["b-8", "t2"],
            ["b-7", "t3"],
        ]
        .iter()
        .map(|r| r.iter().map(|v| v.to_string()).collect())
        .collect();
        let base = [
            cell(100, 2),
            cell(100, 4),
            cell(0, 0),
            cell(0, 0),
            cell(0, 0),
        ];
        let incident = [
            cell(50, 5),
            cell(50, 5),
            cell(50, 25),
            cell(50, 25),
            cell(40, 0),
        ];
        let view = LeafView {
            values: &values,
            base: &base,
            incident: &incident,
            event_of: &|_, c: &Cell| c.errors as f64,
            denominator_of: &|c: &Cell| c.requests as f64,
        };
        let got = compare(&view, &[2, 3]).unwrap();
        assert!((got.slice - 0.5).abs() < 1e-9, "{got:?}");
        // peers: b-7 with t1 or t2 in the incident (t3 is not a peer of any b-8 leaf)
        assert!((got.peers.unwrap() - 0.1).abs() < 1e-9, "{got:?}");
        // replaced: b-7 with t1 or t2 before
        assert!((got.replaced.unwrap() - 0.03).abs() < 1e-9, "{got:?}");
        let text = got.text("requests");
        assert!(
            text.contains("peers") && text.contains("replaced"),
            "{text}"
        );
        // a slice of old values only is no rollout
        assert_eq!(compare(&view, &[0]), None);
    }
}
