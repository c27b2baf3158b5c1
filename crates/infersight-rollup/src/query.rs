//! SLI answers over rollups: the cells of the requested range grouped by the requested
//! dimensions and step, latency quantiles from merged sketches, counter SLIs from summed cells.

use std::collections::HashMap;

use crate::sketch::DenseSketch;
use crate::sli::Sli;
use crate::{Cell, HOUR_NS, MINUTE_NS, Rollup, RollupError};

/// One SLI question over rollups.
#[derive(Debug, Clone, PartialEq)]
pub struct SliQuery {
    pub sli: Sli,
    /// Quantiles for latency SLIs (ignored for counter SLIs).
    pub quantiles: Vec<f64>,
    /// Dimensions to group by (empty: the whole fleet).
    pub by: Vec<String>,
    /// Only combinations with these values.
    pub filters: Vec<(String, String)>,
    pub since_ns: Option<i64>,
    pub until_ns: Option<i64>,
    /// Point width; `None`: one point over the whole range. A multiple of a minute.
    pub step_ns: Option<i64>,
}

/// One point of a series.
#[derive(Debug, Clone, PartialEq)]
pub struct SliPoint {
    /// Start of the point's interval.
    pub ts_ns: i64,
    /// Requests in the interval.
    pub requests: u64,
    /// One value per requested quantile for latency SLIs, one value for counter SLIs; `None`
    /// where undefined (no values, zero denominator).
    pub values: Vec<Option<f64>>,
    /// Mean of a latency SLI.
    pub mean: Option<f64>,
}

/// The points of one group.
#[derive(Debug, Clone, PartialEq)]
pub struct SliSeries {
    /// `(dimension, value)` in the order of `SliQuery::by`.
    pub group: Vec<(String, String)>,
    pub points: Vec<SliPoint>,
}

/// What one thread gathered from its share of the parts: groups by key, counter cells, and
/// dense latency accumulators (many sketches per group merge without reallocation).
#[derive(Default)]
pub(crate) struct Accumulator {
    keys: Vec<Vec<String>>,
    cells: HashMap<(u32, i64), Cell>,
    dense: HashMap<(u32, i64), (u64, DenseSketch)>,
}

pub(crate) fn accumulate(
    parts: &[&Rollup],
    query: &SliQuery,
    since: i64,
    until: i64,
    latency_slot: Option<usize>,
) -> Accumulator {
    let mut out = Accumulator::default();
    // group lookup by the joined key, so known groups cost no allocation
    let mut group_ids: HashMap<String, u32> = HashMap::new();
    let mut joined = String::new();
    for part in parts {
        let by_pos: Vec<Option<usize>> = query
            .by
            .iter()
            .map(|d| part.dimensions.iter().position(|p| p == d))
            .collect();
        let filter_pos: Vec<(Option<usize>, &str)> = query
            .filters
            .iter()
            .map(|(d, v)| (part.dimensions.iter().position(|p| p == d), v.as_str()))
            .collect();
        // per combination: its group id, or None when filtered out
        let combo_group: Vec<Option<u32>> = part
            .combos
            .iter()
            .map(|combo| {
                let keep = filter_pos
                    .iter()
                    .all(|(pos, want)| pos.map_or("", |i| combo[i].as_str()) == *want);
                keep.then(|| {
                    joined.clear();
                    for p in &by_pos {
                        joined.push_str(p.map_or("", |i| combo[i].as_str()));
                        joined.push('\u{1f}');
                    }
                    if let Some(&id) = group_ids.get(joined.as_str()) {
                        return id;
                    }
                    let id = out.keys.len() as u32;
                    out.keys.push(
                        by_pos
                            .iter()
                            .map(|p| p.map_or_else(String::new, |i| combo[i].clone()))
                            .collect(),
                    );
                    group_ids.insert(joined.clone(), id);
                    id
                })
            })
            .collect();
        let hour_steps = query.step_ns.is_none_or(|step| step % HOUR_NS == 0);
        part.visit_cells(since, until, hour_steps, |start, combo, cell| {
            let Some(group) = combo_group[combo as usize] else {
                return;
            };
            let bucket = match query.step_ns {
                Some(step) => start.div_euclid(step) * step,
                None => i64::MIN,
            };
            match latency_slot {
                Some(slot) => {
                    let target = out.dense.entry((group, bucket)).or_default();
                    target.0 += cell.requests;
                    target.1.merge(&cell.sketches[slot]);
                }
                None => out.cells.entry((group, bucket)).or_default().merge(cell),
            }
        });
    }
    out
}

/// Answers `query` from the union of `parts`, without touching raw rows. Series are sorted by
/// group values, points by time.
pub fn query_rollups(parts: &[&Rollup], query: &SliQuery) -> Result<Vec<SliSeries>, RollupError> {
    check_query(parts, query)?;
    // a cell covers its whole minute: one that starts before `since` but reaches it counts
    let since = query
        .since_ns
        .map_or(i64::MIN, |s| s.div_euclid(MINUTE_NS) * MINUTE_NS);
    let until = query.until_ns.unwrap_or(i64::MAX);
    let latency_slot = match query.sli {
        Sli::Latency(s) => Some(s.slot()),
        Sli::Counter(_) => None,
    };
    let partials = accumulate_in_parallel(parts, query, since, until, latency_slot);
    let (group_keys, acc) = merge_partials(partials, latency_slot);
    // the data's first and last minute in the range: a whole-range query's cells all sit in
    // one bucket and do not keep them
    let extent = parts
        .iter()
        .filter_map(|part| part.minute_bounds())
        .map(|(first, last)| (first.max(since), last.min(until)))
        .filter(|(first, last)| first <= last)
        .reduce(|(a, b), (c, d)| (a.min(c), b.max(d)));
    Ok(series_of(query, &group_keys, acc, extent))
}

/// The query's step, quantiles and dimensions, checked against what `parts` hold.
fn check_query(parts: &[&Rollup], query: &SliQuery) -> Result<(), RollupError> {
    if let Some(step) = query.step_ns
        && (step <= 0 || step % MINUTE_NS != 0)
    {
        return Err(RollupError::InvalidQuery(
            "step must be a positive whole number of minutes".into(),
        ));
    }
    if query.quantiles.iter().any(|q| !(0.0..=1.0).contains(q)) {
        return Err(RollupError::InvalidQuery(
            "quantiles must lie in [0, 1]".into(),
        ));
    }
    if let Sli::Latency(_) = query.sli
        && query.quantiles.is_empty()
    {
        return Err(RollupError::InvalidQuery(
            "a latency sli needs at least one quantile".into(),
        ));
    }
    // a dimension no part keeps is a mistake worth naming (empty parts know nothing)
    let known: Vec<&String> = parts.iter().flat_map(|p| p.dimensions.iter()).collect();
    for name in query.by.iter().chain(query.filters.iter().map(|(d, _)| d)) {
        if !parts.is_empty() && !known.contains(&name) {
            let mut names: Vec<&str> = known.iter().map(|s| s.as_str()).collect();
            names.sort_unstable();
            names.dedup();
            return Err(RollupError::UnknownDimension {
                name: name.clone(),
                known: names.join(", "),
            });
        }
    }
    Ok(())
}

/// [`accumulate`] over `parts`: parts are independent, so they are split over the cores (four
/// parts a thread at least), one partial result per thread.
fn accumulate_in_parallel(
    parts: &[&Rollup],
    query: &SliQuery,
    since: i64,
    until: i64,
    latency_slot: Option<usize>,
) -> Vec<Accumulator> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(parts.len() / 4)
        .max(1);
    if threads == 1 {
        return vec![accumulate(parts, query, since, until, latency_slot)];
    }
    let chunk = parts.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = parts
            .chunks(chunk)
            .map(|chunk| scope.spawn(move || accumulate(chunk, query, since, until, latency_slot)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}

/// One cell per (group id, bucket start; `i64::MIN` for the whole range).
type GroupCells = HashMap<(u32, i64), Cell>;

/// Merges the per-thread results: the groups' values (a group's id is its index) and one cell
/// per group and bucket.
fn merge_partials(
    partials: Vec<Accumulator>,
    latency_slot: Option<usize>,
) -> (Vec<Vec<String>>, GroupCells) {
    let mut groups: HashMap<Vec<String>, u32> = HashMap::new();
    let mut group_keys: Vec<Vec<String>> = Vec::new();
    let mut acc: GroupCells = HashMap::new();
    for partial in partials {
        let ids: Vec<u32> = partial
            .keys
            .into_iter()
            .map(|key| {
                let next = group_keys.len() as u32;
                *groups.entry(key.clone()).or_insert_with(|| {
                    group_keys.push(key);
                    next
                })
            })
            .collect();
        for ((group, bucket), cell) in partial.cells {
            acc.entry((ids[group as usize], bucket))
                .or_default()
                .merge(&cell);
        }
        if let Some(slot) = latency_slot {
            for ((group, bucket), (requests, sketch)) in partial.dense {
                let cell = acc.entry((ids[group as usize], bucket)).or_default();
                cell.requests += requests;
                cell.sketches[slot].merge(&sketch.finish());
            }
        }
    }
    (group_keys, acc)
}

/// One series per group that has points, sorted by group values, its points by time.
fn series_of(
    query: &SliQuery,
    group_keys: &[Vec<String>],
    acc: GroupCells,
    extent: Option<(i64, i64)>,
) -> Vec<SliSeries> {
    let mut series: Vec<SliSeries> = group_keys
        .iter()
        .map(|key| SliSeries {
            group: query.by.iter().cloned().zip(key.iter().cloned()).collect(),
            points: Vec::new(),
        })
        .collect();
    let mut first_minute = i64::MAX;
    let mut last_minute = i64::MIN;
    for &(_, bucket) in acc.keys() {
        first_minute = first_minute.min(bucket);
        last_minute = last_minute.max(bucket);
    }
    if query.step_ns.is_none()
        && let Some((first, last)) = extent
    {
        (first_minute, last_minute) = (first, last);
    }
    for ((group, bucket), cell) in acc {
        let point = point_of(query, bucket, &cell, first_minute, last_minute);
        series[group as usize].points.push(point);
    }
    series.retain(|s| !s.points.is_empty());
    for s in &mut series {
        s.points.sort_by_key(|p| p.ts_ns);
    }
    series.sort_by(|a, b| a.group.cmp(&b.group));
    series
}

/// The SLI of one bucket's cell (`i64::MIN`: the whole range); `first_minute` and `last_minute`
/// are the data's extent, for a range the query leaves open.
fn point_of(
    query: &SliQuery,
    bucket: i64,
    cell: &Cell,
    first_minute: i64,
    last_minute: i64,
) -> SliPoint {
    let seconds = match query.step_ns {
        Some(step) => step as f64 / 1e9,
        None => {
            // whole range: the queried interval when bounded, else the data's extent
            let lo = query.since_ns.unwrap_or(first_minute);
            let hi = query
                .until_ns
                .unwrap_or(last_minute.saturating_add(MINUTE_NS));
            ((hi - lo) as f64 / 1e9).max(60.0)
        }
    };
    let ts_ns = if bucket == i64::MIN {
        query.since_ns.unwrap_or(first_minute)
    } else {
        bucket
    };
    match query.sli {
        Sli::Latency(s) => {
            let sketch = cell.sketch(s);
            SliPoint {
                ts_ns,
                requests: cell.requests,
                values: query
                    .quantiles
                    .iter()
                    .map(|&q| sketch.quantile(q))
                    .collect(),
                mean: sketch.mean(),
            }
        }
        Sli::Counter(s) => {
            let (num, den) = s.ratio(cell, seconds);
            SliPoint {
                ts_ns,
                requests: cell.requests,
                values: vec![(den > 0.0).then(|| num / den)],
                mean: None,
            }
        }
    }
}
