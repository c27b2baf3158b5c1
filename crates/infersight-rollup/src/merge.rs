//! Merging rollups: one rollup into another (segments compacted, memtable added at query time),
//! per-hour splits for the sidecars, and the range merges SLOs and localization read.

use std::collections::HashMap;

use crate::{Cell, HOUR_NS, MINUTE_NS, Rollup};

impl Rollup {
    /// Adds `other` into `self`, matching combinations by their values on `self`'s dimensions
    /// (a dimension `other` lacks is the empty string).
    pub fn merge(&mut self, other: &Rollup) {
        let positions: Vec<Option<usize>> = self
            .dimensions
            .iter()
            .map(|d| other.dimensions.iter().position(|o| o == d))
            .collect();
        let mut remap: Vec<(u32, bool)> = Vec::with_capacity(other.combos.len());
        for combo in &other.combos {
            let values: Vec<String> = positions
                .iter()
                .map(|p| p.map_or_else(String::new, |i| combo[i].clone()))
                .collect();
            remap.push(self.combo_id(&values));
        }
        for (&(minute, combo), cell) in &other.cells {
            let (id, folded) = remap[combo as usize];
            if folded {
                self.folded_rows += cell.requests;
            }
            self.cells.entry((minute, id)).or_default().merge(cell);
        }
        if self.hours_current && other.hours_current {
            for (&(hour, combo), cell) in &other.hour_cells {
                let (id, _) = remap[combo as usize];
                self.hour_cells.entry((hour, id)).or_default().merge(cell);
            }
        } else {
            self.hours_current = false;
        }
        self.folded_rows += other.folded_rows;
    }

    /// Splits into one rollup per hour (persisted next to that hour's segments).
    pub fn split_by_hour(&self) -> Vec<(i64, Rollup)> {
        let mut hours: std::collections::BTreeMap<i64, Rollup> = Default::default();
        for (&(minute, combo), cell) in &self.cells {
            let hour = minute.div_euclid(HOUR_NS) * HOUR_NS;
            let part = hours.entry(hour).or_insert_with(|| Rollup {
                dimensions: self.dimensions.clone(),
                max_combinations: self.max_combinations,
                ..Rollup::default()
            });
            let (id, _) = part.combo_id(&self.combos[combo as usize]);
            part.cells.entry((minute, id)).or_default().merge(cell);
        }
        for part in hours.values_mut() {
            part.rebuild_hour_cells();
        }
        // folded rows are attributed to the first hour so the total is kept
        if let Some((_, first)) = hours.iter_mut().next() {
            first.folded_rows = self.folded_rows;
        }
        hours.into_iter().collect()
    }

    /// Calls `visit(start, combo, cell)` for every cell in `[since, until)`: whole hours inside
    /// the range from hour cells when `hours_ok` (the caller's buckets are whole hours), the
    /// minutes of partly covered hours from minute cells. `since` is a minute boundary.
    pub(crate) fn visit_cells(
        &self,
        since: i64,
        until: i64,
        hours_ok: bool,
        mut visit: impl FnMut(i64, u32, &Cell),
    ) {
        if !self.hours_current {
            for (&(minute, combo), cell) in self.cells.range((since, 0)..(until, 0)) {
                visit(minute, combo, cell);
            }
            return;
        }
        let first_hour = since.div_euclid(HOUR_NS).saturating_mul(HOUR_NS);
        let mut partial_hours: Vec<i64> = Vec::new();
        for (&(hour, combo), cell) in self.hour_cells.range((first_hour, 0)..) {
            if hour >= until {
                break;
            }
            if hours_ok && hour >= since && hour.saturating_add(HOUR_NS) <= until {
                visit(hour, combo, cell);
            } else if partial_hours.last() != Some(&hour) {
                partial_hours.push(hour);
            }
        }
        for hour in partial_hours {
            let lo = hour.max(since);
            let hi = hour.saturating_add(HOUR_NS).min(until);
            for (&(minute, combo), cell) in self.cells.range((lo, 0)..(hi, 0)) {
                visit(minute, combo, cell);
            }
        }
    }

    pub(crate) fn rebuild_hour_cells(&mut self) {
        self.hours_current = true;
        self.hour_cells.clear();
        for (&(minute, combo), cell) in &self.cells {
            let hour = minute.div_euclid(HOUR_NS) * HOUR_NS;
            self.hour_cells
                .entry((hour, combo))
                .or_default()
                .merge(cell);
        }
    }
}

/// Every cell of `parts` in `[since_ns, until_ns)` (whole minutes) whose combination matches
/// `filters`, merged into one: the fleet-wide (or filtered) totals SLOs are computed from.
pub fn merge_range(
    parts: &[&Rollup],
    filters: &[(String, String)],
    since_ns: Option<i64>,
    until_ns: Option<i64>,
) -> Cell {
    let since = since_ns.map_or(i64::MIN, |s| s.div_euclid(MINUTE_NS) * MINUTE_NS);
    let until = until_ns.unwrap_or(i64::MAX);
    let mut total = Cell::default();
    for part in parts {
        let keep: Vec<bool> = part
            .combos
            .iter()
            .map(|combo| {
                filters.iter().all(|(d, want)| {
                    let pos = part.dimensions.iter().position(|p| p == d);
                    pos.map_or("", |i| combo[i].as_str()) == want
                })
            })
            .collect();
        part.visit_cells(since, until, true, |_, combo, cell| {
            if keep[combo as usize] {
                total.merge(cell);
            }
        });
    }
    total
}

/// Every dimension combination of `parts` with its cells in `[since_ns, until_ns)` merged: the
/// leaves root-cause localization works on. Dimensions are those of the first part (a part
/// without one of them contributes the empty string).
pub fn combination_totals(
    parts: &[&Rollup],
    since_ns: Option<i64>,
    until_ns: Option<i64>,
) -> (Vec<String>, Vec<(Vec<String>, Cell)>) {
    let Some(first) = parts.first() else {
        return (Vec::new(), Vec::new());
    };
    let dimensions = first.dimensions.clone();
    let since = since_ns.map_or(i64::MIN, |s| s.div_euclid(MINUTE_NS) * MINUTE_NS);
    let until = until_ns.unwrap_or(i64::MAX);
    let mut index: HashMap<Vec<String>, usize> = HashMap::new();
    let mut out: Vec<(Vec<String>, Cell)> = Vec::new();
    for part in parts {
        let positions: Vec<Option<usize>> = dimensions
            .iter()
            .map(|d| part.dimensions.iter().position(|p| p == d))
            .collect();
        let mut slot_of_combo: Vec<Option<usize>> = vec![None; part.combos.len()];
        part.visit_cells(since, until, true, |_, combo, cell| {
            let slot = *slot_of_combo[combo as usize].get_or_insert_with(|| {
                let values: Vec<String> = positions
                    .iter()
                    .map(|p| p.map_or_else(String::new, |i| part.combos[combo as usize][i].clone()))
                    .collect();
                *index.entry(values.clone()).or_insert_with(|| {
                    out.push((values, Cell::default()));
                    out.len() - 1
                })
            });
            out[slot].1.merge(cell);
        });
    }
    (dimensions, out)
}
