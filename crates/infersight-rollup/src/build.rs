//! Building a rollup from `requests` batches at ingest: each row's dimension values are looked up
//! (borrowed from the batch) in the combination index, its cell found, and its latencies added to
//! the cell's sketches a chunk of rows at a time.
//!
//! A row kept by head sampling stands for several requests: its `attrs` carry
//! [`SAMPLE_WEIGHT_KEY`] (`1 / probability`), and it is counted, and its latencies added, that
//! many times ([`RowWeights`]), so request rates, error rates and quantiles estimate the traffic,
//! not the sample.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hash, Hasher};

use arrow::array::{
    Array, AsArray, Float64Array, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray,
};
use arrow::datatypes::{DataType, TimeUnit};

use infersight_model::normalize::SAMPLE_WEIGHT_KEY;

use crate::sli::LatencySli;
use crate::{Cell, MINUTE_NS, OTHER, Rollup, RollupError};

/// Rows [`Rollup::add_requests`] groups by cell at a time (bounds its scratch memory); tests use
/// an odd small chunk so batches span several.
#[cfg(not(test))]
const ROWS_PER_CHUNK: usize = 1 << 16;
#[cfg(test)]
const ROWS_PER_CHUNK: usize = 97;
/// A row without a cell (its ts is null).
const NO_SLOT: u32 = u32::MAX;

/// What [`Rollup::add_requests`] did with a batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AddStats {
    pub rows: u64,
    pub folded_rows: u64,
    /// Latency values that were negative or not finite, skipped.
    pub invalid_values: u64,
}

pub(crate) enum DimColumn<'a> {
    Str(&'a StringArray),
    Int(&'a Int64Array),
    Missing,
}

impl DimColumn<'_> {
    /// Calls `f` with the row's value as text, borrowed from the column (integers are written
    /// on the stack); a null or missing value is the empty string.
    #[inline]
    pub(crate) fn with_text<R>(&self, row: usize, f: impl FnOnce(&str) -> R) -> R {
        match self {
            DimColumn::Str(a) if a.is_valid(row) => f(a.value(row)),
            DimColumn::Int(a) if a.is_valid(row) => f(decimal(a.value(row), &mut [0; 20])),
            _ => f(""),
        }
    }
}

/// `value` in decimal, as `value.to_string()` writes it, in `buf` (20 bytes fit `i64::MIN`).
pub(crate) fn decimal(value: i64, buf: &mut [u8; 20]) -> &str {
    let mut rest = value.unsigned_abs();
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if value < 0 {
        start -= 1;
        buf[start] = b'-';
    }
    std::str::from_utf8(&buf[start..]).unwrap_or_default()
}

type ComboHasher = <foldhash::fast::RandomState as BuildHasher>::Hasher;

/// Finds a combination's id by the hash of its values, compared in place: at ingest a row's
/// values stay borrowed from its columns, so a known combination costs no allocation. Derived
/// from [`Rollup::combos`] (ids are positions there).
#[derive(Debug, Clone, Default)]
pub(crate) struct ComboIndex {
    table: hashbrown::HashTable<u32>,
    /// The hash of every combination, by id, so growing the table rehashes nothing.
    hashes: Vec<u64>,
    state: foldhash::fast::RandomState,
}

/// Equal whenever the combinations it indexes are (their seeds may differ).
impl PartialEq for ComboIndex {
    fn eq(&self, _: &ComboIndex) -> bool {
        true
    }
}

impl ComboIndex {
    /// The hash of the values `feed` writes, each with `str::hash`.
    #[inline]
    pub(crate) fn hash(&self, feed: impl FnOnce(&mut ComboHasher)) -> u64 {
        let mut hasher = self.state.build_hasher();
        feed(&mut hasher);
        hasher.finish()
    }

    #[inline]
    pub(crate) fn find(&self, hash: u64, mut matches: impl FnMut(u32) -> bool) -> Option<u32> {
        self.table.find(hash, |&id| matches(id)).copied()
    }

    pub(crate) fn insert(&mut self, hash: u64, id: u32) {
        debug_assert_eq!(id as usize, self.hashes.len(), "ids are dense, in order");
        self.hashes.push(hash);
        let hashes = &self.hashes;
        self.table
            .insert_unique(hash, id, |&other| hashes[other as usize]);
    }
}

pub(crate) fn column<'a>(batch: &'a RecordBatch, name: &str) -> Option<&'a dyn Array> {
    batch.column_by_name(name).map(|c| c.as_ref())
}

pub(crate) fn type_error(name: &str, array: &dyn Array, expected: &'static str) -> RollupError {
    RollupError::ColumnType {
        column: name.to_string(),
        found: array.data_type().to_string(),
        expected,
    }
}

/// Column `name` of `batch` viewed as `A` by `view`; absent is `None`, another type an error.
pub(crate) fn typed_column<'a, A>(
    batch: &'a RecordBatch,
    name: &str,
    expected: &'static str,
    view: impl FnOnce(&'a dyn Array) -> Option<&'a A>,
) -> Result<Option<&'a A>, RollupError> {
    match column(batch, name) {
        None => Ok(None),
        Some(a) => view(a)
            .map(Some)
            .ok_or_else(|| type_error(name, a, expected)),
    }
}

pub(crate) fn f64_column<'a>(
    batch: &'a RecordBatch,
    name: &str,
) -> Result<Option<&'a Float64Array>, RollupError> {
    typed_column(batch, name, "Float64", |a| a.as_primitive_opt())
}

pub(crate) fn i64_column<'a>(
    batch: &'a RecordBatch,
    name: &str,
) -> Result<Option<&'a Int64Array>, RollupError> {
    typed_column(batch, name, "Int64", |a| a.as_primitive_opt())
}

pub(crate) fn str_column<'a>(
    batch: &'a RecordBatch,
    name: &str,
) -> Result<Option<&'a StringArray>, RollupError> {
    typed_column(batch, name, "Utf8", |a| a.as_string_opt::<i32>())
}

pub(crate) fn sum_u64(column: Option<&Int64Array>, row: usize) -> u64 {
    column
        .filter(|c| c.is_valid(row))
        .map_or(0, |c| c.value(row).max(0) as u64)
}

/// The columns of a `requests` batch that [`Rollup::add_requests`] reads, borrowed from it.
struct RequestColumns<'a> {
    ts: &'a TimestampNanosecondArray,
    /// One per rollup dimension, in the rollup's order.
    dims: Vec<DimColumn<'a>>,
    /// One per [`LatencySli::ALL`], in its order; `None` when the batch lacks it.
    latency: Vec<Option<&'a Float64Array>>,
    status: Option<&'a StringArray>,
    finish: Option<&'a StringArray>,
    input: Option<&'a Int64Array>,
    output: Option<&'a Int64Array>,
    cached: Option<&'a Int64Array>,
    weights: RowWeights<'a>,
}

/// The sampling weight of each row of a batch, as a whole count: a weight `w` counts
/// `floor(w)` or `floor(w) + 1` times, the latter with probability `w - floor(w)` by a hash of
/// the row's start time, so sums stay integers (cells and their sidecar format are unchanged)
/// and their expectation is the weighted sum. The rounding adds at most 1/4 to a row's
/// variance, far below the sampling's own `w (w - 1)`.
pub(crate) struct RowWeights<'a> {
    /// `None` when no row of the batch has a weight (checked once over the whole column).
    attrs: Option<&'a StringArray>,
}

impl<'a> RowWeights<'a> {
    fn read(batch: &'a RecordBatch) -> Result<Self, RollupError> {
        let attrs = str_column(batch, "attrs")?.filter(|attrs| {
            std::str::from_utf8(attrs.values().as_slice())
                .is_ok_and(|text| text.contains(SAMPLE_WEIGHT_KEY))
        });
        Ok(RowWeights { attrs })
    }

    /// Whether every row counts once.
    fn is_uniform(&self) -> bool {
        self.attrs.is_none()
    }

    /// The weight of a row (1 without one), at least 1.
    pub(crate) fn weight(&self, row: usize) -> f64 {
        self.attrs
            .filter(|attrs| attrs.is_valid(row))
            .and_then(|attrs| weight_in_attrs(attrs.value(row)))
            .unwrap_or(1.0)
    }

    /// How many times the row counts (see the type's doc); `ts` seeds its rounding.
    fn count(&self, row: usize, ts: i64) -> u64 {
        if self.is_uniform() {
            return 1;
        }
        let weight = self.weight(row);
        let whole = weight.floor();
        let up = unit_hash(ts) < weight - whole;
        // at most MAX_WEIGHT + 1
        whole as u64 + u64::from(up)
    }
}

/// The number after `"infersight.sample_weight":` in a row's `attrs`, if any, at least 1. The key
/// is matched with its closing quote, so text inside a string value (where a quote is escaped)
/// never matches.
pub(crate) fn weight_in_attrs(attrs: &str) -> Option<f64> {
    let (at, _) = attrs.match_indices(SAMPLE_WEIGHT_KEY).find(|&(at, key)| {
        attrs[..at].ends_with('"') && attrs[at + key.len()..].starts_with("\":")
    })?;
    let rest = &attrs[at + SAMPLE_WEIGHT_KEY.len() + 2..];
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-')))
        .unwrap_or(rest.len());
    let weight: f64 = rest[..end].parse().ok()?;
    (weight.is_finite() && weight >= 1.0).then_some(weight.min(MAX_WEIGHT))
}

/// Larger weights are taken as this (one row standing for four billion requests is a corrupt
/// number, and sums must not overflow).
const MAX_WEIGHT: f64 = 4_294_967_296.0;

/// A hash of `value` uniform in [0, 1) (SplitMix64's finalizer).
fn unit_hash(value: i64) -> f64 {
    let mut z = (value as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

impl<'a> RequestColumns<'a> {
    fn read(batch: &'a RecordBatch, dimensions: &[String]) -> Result<Self, RollupError> {
        let ts_array = column(batch, "ts").ok_or(RollupError::MissingTs)?;
        let ts: &TimestampNanosecondArray = match ts_array.data_type() {
            DataType::Timestamp(TimeUnit::Nanosecond, _) => ts_array.as_primitive(),
            _ => return Err(type_error("ts", ts_array, "Timestamp(ns)")),
        };
        let mut dims = Vec::with_capacity(dimensions.len());
        for name in dimensions {
            dims.push(match column(batch, name) {
                None => DimColumn::Missing,
                Some(a) if a.data_type() == &DataType::Utf8 => DimColumn::Str(a.as_string()),
                Some(a) if a.data_type() == &DataType::Int64 => DimColumn::Int(a.as_primitive()),
                Some(a) => return Err(type_error(name, a, "Utf8 or Int64")),
            });
        }
        let latency: Vec<Option<&Float64Array>> = LatencySli::ALL
            .iter()
            .map(|s| f64_column(batch, s.column()))
            .collect::<Result<_, _>>()?;
        Ok(RequestColumns {
            ts,
            dims,
            latency,
            status: str_column(batch, "status")?,
            finish: str_column(batch, "finish_reason")?,
            input: i64_column(batch, "input_tokens")?,
            output: i64_column(batch, "output_tokens")?,
            cached: i64_column(batch, "cached_tokens")?,
            weights: RowWeights::read(batch)?,
        })
    }
}

/// The cells one batch touches, taken out of the rollup while its rows go in; a cell's slot is
/// its index here.
#[derive(Default)]
struct Staging {
    slot_of_key: HashMap<(i64, u32), u32, foldhash::fast::RandomState>,
    keys: Vec<(i64, u32)>,
    cells: Vec<Cell>,
    /// per staged cell: requests, errors, truncated, input, output and cached tokens (integer
    /// sums, so they are added per row here and into the cells at the end)
    counters: Vec<[u64; 6]>,
    /// The key and slot of the last row, for runs of rows of one cell.
    last: Option<((i64, u32), u32)>,
}

impl Staging {
    /// The slot of the cell `key`, taken out of `cells` (or new) on first touch.
    fn slot(&mut self, key: (i64, u32), cells: &mut BTreeMap<(i64, u32), Cell>) -> u32 {
        match self.last {
            Some((last, slot)) if last == key => slot,
            _ => {
                let slot = *self.slot_of_key.entry(key).or_insert_with(|| {
                    self.keys.push(key);
                    self.cells.push(cells.remove(&key).unwrap_or_default());
                    self.counters.push([0; 6]);
                    (self.cells.len() - 1) as u32
                });
                self.last = Some((key, slot));
                slot
            }
        }
    }

    /// Counts the row in its cell's integer sums, `times` times (its sampling weight).
    fn count_row(&mut self, slot: u32, columns: &RequestColumns<'_>, row: usize, times: u64) {
        let error = columns
            .status
            .is_some_and(|s| s.is_valid(row) && s.value(row) == "error");
        let truncated = columns
            .finish
            .is_some_and(|s| s.is_valid(row) && s.value(row) == "length");
        let counts = &mut self.counters[slot as usize];
        let add =
            |sum: &mut u64, value: u64| *sum = sum.saturating_add(value.saturating_mul(times));
        add(&mut counts[0], 1);
        add(&mut counts[1], u64::from(error));
        add(&mut counts[2], u64::from(truncated));
        add(&mut counts[3], sum_u64(columns.input, row));
        add(&mut counts[4], sum_u64(columns.output, row));
        add(&mut counts[5], sum_u64(columns.cached, row));
    }
}

/// One chunk's rows in cell order (a stable counting sort by slot), with buffers reused from
/// chunk to chunk.
struct ChunkOrder {
    /// Per row of the chunk, its cell's slot or [`NO_SLOT`].
    slot_of_row: Vec<u32>,
    /// Per row of the chunk, its position in cell order or [`NO_SLOT`].
    position_of_row: Vec<u32>,
    /// Slot `s`'s rows are at positions `slot_starts[s]..slot_starts[s + 1]`.
    slot_starts: Vec<u32>,
    /// How many rows have a position.
    placed: usize,
    /// One latency column's values in cell order.
    ordered: Vec<Option<f64>>,
    /// Per row of the chunk, how many times it counts (its sampling weight); empty when every
    /// row counts once.
    times_of_row: Vec<u64>,
    /// The same in cell order.
    ordered_times: Vec<u64>,
}

impl Default for ChunkOrder {
    fn default() -> Self {
        ChunkOrder {
            slot_of_row: Vec::with_capacity(ROWS_PER_CHUNK),
            position_of_row: Vec::with_capacity(ROWS_PER_CHUNK),
            slot_starts: Vec::new(),
            placed: 0,
            ordered: Vec::with_capacity(ROWS_PER_CHUNK),
            times_of_row: Vec::new(),
            ordered_times: Vec::new(),
        }
    }
}

impl ChunkOrder {
    /// Stable counting sort of the chunk's rows by cell: each row's position in cell order.
    fn sort_by_cell(&mut self, n_slots: usize) {
        let slot_starts = &mut self.slot_starts;
        slot_starts.clear();
        slot_starts.resize(n_slots + 1, 0);
        for &slot in self.slot_of_row.iter().filter(|&&s| s != NO_SLOT) {
            slot_starts[slot as usize + 1] += 1;
        }
        for i in 1..slot_starts.len() {
            slot_starts[i] += slot_starts[i - 1];
        }
        self.placed = slot_starts[n_slots] as usize;
        let mut next = slot_starts.clone();
        self.position_of_row.clear();
        self.position_of_row
            .extend(self.slot_of_row.iter().map(|&slot| {
                if slot == NO_SLOT {
                    return NO_SLOT;
                }
                let position = next[slot as usize];
                next[slot as usize] += 1;
                position
            }));
    }

    /// One latency column at a time: reads it in row order into cell order, then adds each
    /// cell's run of values to its sketch (each value as many times as its row counts).
    fn add_latencies(
        &mut self,
        latency: &[Option<&Float64Array>],
        chunk: std::ops::Range<usize>,
        cells: &mut [Cell],
        stats: &mut AddStats,
    ) {
        let weighted = !self.times_of_row.is_empty();
        if weighted {
            self.ordered_times.clear();
            self.ordered_times.resize(self.placed, 1);
            for (&times, &position) in self.times_of_row.iter().zip(&self.position_of_row) {
                if position != NO_SLOT {
                    self.ordered_times[position as usize] = times;
                }
            }
        }
        for (sli, values) in latency.iter().enumerate() {
            let Some(values) = values else { continue };
            self.ordered.clear();
            self.ordered.resize(self.placed, None);
            for (row, &position) in chunk.clone().zip(&self.position_of_row) {
                if position != NO_SLOT && values.is_valid(row) {
                    self.ordered[position as usize] = Some(values.value(row));
                }
            }
            for (slot, bounds) in self.slot_starts.windows(2).enumerate() {
                if bounds[0] == bounds[1] {
                    continue;
                }
                let sketch = &mut cells[slot].sketches[sli];
                let run = bounds[0] as usize..bounds[1] as usize;
                if weighted {
                    for (value, &times) in self.ordered[run.clone()]
                        .iter()
                        .zip(&self.ordered_times[run])
                    {
                        if let Some(value) = value
                            && !sketch.add_n(*value, times)
                        {
                            stats.invalid_values += 1;
                        }
                    }
                    continue;
                }
                for value in self.ordered[run].iter().flatten() {
                    if !sketch.add(*value) {
                        stats.invalid_values += 1;
                    }
                }
            }
        }
    }
}

impl Rollup {
    /// The id of the combination `values`, added when new; beyond the budget the id of the
    /// fold-over combination, with `true`.
    pub(crate) fn combo_id(&mut self, values: &[String]) -> (u32, bool) {
        let hash = self.combo_index.hash(|h| {
            for v in values {
                v.as_str().hash(h);
            }
        });
        self.combo_id_by(hash, |combo| combo == values, || values.into())
    }

    /// [`Rollup::combo_id`] of the combination whose hash is `hash`, that `matches` and that
    /// `owned` makes (called only to add it).
    #[inline]
    pub(crate) fn combo_id_by(
        &mut self,
        hash: u64,
        mut matches: impl FnMut(&[String]) -> bool,
        owned: impl FnOnce() -> Box<[String]>,
    ) -> (u32, bool) {
        let combos = &self.combos;
        if let Some(id) = self
            .combo_index
            .find(hash, |id| matches(&combos[id as usize]))
        {
            return (id, false);
        }
        if self.combos.len() < self.max_combinations {
            return (self.push_combo(hash, owned()), false);
        }
        let width = self.dimensions.len();
        let other_hash = self.combo_index.hash(|h| {
            for _ in 0..width {
                OTHER.hash(h);
            }
        });
        let is_other = |id: u32| combos[id as usize].iter().all(|v| v == OTHER);
        if let Some(id) = self.combo_index.find(other_hash, is_other) {
            return (id, true);
        }
        let other = vec![OTHER.to_string(); width].into_boxed_slice();
        (self.push_combo(other_hash, other), true)
    }

    pub(crate) fn push_combo(&mut self, hash: u64, values: Box<[String]>) -> u32 {
        debug_assert_eq!(values.len(), self.dimensions.len());
        let id = self.combos.len() as u32;
        self.combos.push(values);
        self.combo_index.insert(hash, id);
        id
    }

    /// Adds every row of a `requests` batch (columns looked up by name; a dimension the batch
    /// lacks is the empty string). Rows with a null ts are skipped.
    pub fn add_requests(&mut self, batch: &RecordBatch) -> Result<AddStats, RollupError> {
        let columns = RequestColumns::read(batch, &self.dimensions)?;
        let mut stats = AddStats::default();
        // The cells this batch touches are taken out of `cells` on first touch and put back at
        // the end (one hash lookup per row, not a B-tree descent). Rows are added a chunk at a
        // time grouped by cell, so a cell's sketches stay in cache while its rows go in; within
        // a cell, rows keep their order (sketch sums are order-sensitive).
        let mut staging = Staging::default();
        // the combination of the last row rolled up
        let mut previous: Option<(u32, bool)> = None;
        let mut order = ChunkOrder::default();
        for chunk_start in (0..batch.num_rows()).step_by(ROWS_PER_CHUNK) {
            let chunk = chunk_start..batch.num_rows().min(chunk_start + ROWS_PER_CHUNK);
            order.slot_of_row.clear();
            order.times_of_row.clear();
            for row in chunk.clone() {
                let times = if columns.weights.is_uniform() || columns.ts.is_null(row) {
                    1
                } else {
                    columns.weights.count(row, columns.ts.value(row))
                };
                if !columns.weights.is_uniform() {
                    order.times_of_row.push(times);
                }
                let slot = self.stage_row(
                    &columns,
                    row,
                    times,
                    &mut staging,
                    &mut previous,
                    &mut stats,
                );
                order.slot_of_row.push(slot);
            }
            order.sort_by_cell(staging.cells.len());
            order.add_latencies(&columns.latency, chunk, &mut staging.cells, &mut stats);
        }
        self.put_back(staging);
        self.hours_current = false;
        Ok(stats)
    }

    /// Finds the row's cell (staging it on first touch) and counts the row in it; returns the
    /// cell's slot, or [`NO_SLOT`] for a row without a ts.
    fn stage_row(
        &mut self,
        columns: &RequestColumns<'_>,
        row: usize,
        times: u64,
        staging: &mut Staging,
        previous: &mut Option<(u32, bool)>,
        stats: &mut AddStats,
    ) -> u32 {
        if columns.ts.is_null(row) {
            return NO_SLOT;
        }
        let minute = columns.ts.value(row).div_euclid(MINUTE_NS) * MINUTE_NS;
        let (combo, folded) = self.combo_of_row(&columns.dims, row, previous);
        if folded {
            stats.folded_rows += 1;
            self.folded_rows += 1;
        }
        let slot = staging.slot((minute, combo), &mut self.cells);
        staging.count_row(slot, columns, row, times);
        stats.rows += 1;
        slot
    }

    /// The combination of the row's dimension values (see [`Rollup::combo_id`]); `previous` is
    /// that of the row before.
    fn combo_of_row(
        &mut self,
        dims: &[DimColumn<'_>],
        row: usize,
        previous: &mut Option<(u32, bool)>,
    ) -> (u32, bool) {
        let row_matches = |combo: &[String]| {
            dims.iter()
                .zip(combo)
                .all(|(d, v)| d.with_text(row, |text| text == v))
        };
        match *previous {
            // consecutive rows of one combination (batches that come per resource)
            // skip the hash; a folded row's values are not its combination's
            Some((id, false)) if row_matches(&self.combos[id as usize]) => (id, false),
            _ => {
                let hash = self.combo_index.hash(|h| {
                    for d in dims {
                        d.with_text(row, |text| text.hash(h));
                    }
                });
                let c = self.combo_id_by(hash, row_matches, || {
                    dims.iter()
                        .map(|d| d.with_text(row, str::to_string))
                        .collect()
                });
                *previous = Some(c);
                c
            }
        }
    }

    /// Adds the staged cells' integer sums and puts the cells back into the rollup.
    fn put_back(&mut self, staging: Staging) {
        let Staging {
            keys,
            mut cells,
            counters,
            ..
        } = staging;
        for (cell, counts) in cells.iter_mut().zip(&counters) {
            cell.requests += counts[0];
            cell.errors += counts[1];
            cell.truncated += counts[2];
            cell.input_tokens += counts[3];
            cell.output_tokens += counts[4];
            cell.cached_tokens += counts[5];
        }
        if self.cells.is_empty() {
            // a fresh rollup (the store's case): build the tree in one sorted pass
            // (sorting slots, not the large cells, then moving each cell once)
            let mut order: Vec<u32> = (0..cells.len() as u32).collect();
            order.sort_unstable_by_key(|&slot| keys[slot as usize]);
            self.cells = order
                .into_iter()
                .map(|slot| {
                    let slot = slot as usize;
                    (keys[slot], std::mem::take(&mut cells[slot]))
                })
                .collect();
        } else {
            self.cells.extend(keys.into_iter().zip(cells));
        }
    }

    /// Derives the hour cells from the minute cells, so queries over whole hours merge 60×
    /// fewer cells. Call once a rollup is complete (the store does before caching it);
    /// unsealed rollups answer the same, from minute cells.
    pub fn seal(&mut self) {
        if !self.hours_current {
            self.rebuild_hour_cells();
        }
    }
}
