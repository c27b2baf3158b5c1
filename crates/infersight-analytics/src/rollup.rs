//! SLI rollups: per minute and per dimension combination, one quantile sketch per latency SLI plus
//! the additive counters derived SLIs need. The store builds them from `requests` batches at
//! ingest and persists them; the query layer merges them to answer "p99 TTFT by model_version
//! and worker, per minute, since 02:00" without rescanning raw rows.
//!
//! Cardinality guard: a rollup accepts at most `max_combinations` distinct dimension
//! combinations; rows of further combinations fold into the combination whose every value is
//! [`OTHER`], and are counted in [`Rollup::folded_rows`].

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hash, Hasher};

use arrow::array::{
    Array, AsArray, Float64Array, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray,
};
use arrow::datatypes::{DataType, TimeUnit};

use crate::sketch::{DdSketch, DenseSketch, SketchDecodeError, put_varint, take_varint};

/// The value every dimension takes in the fold-over combination.
pub const OTHER: &str = "other";

const MINUTE_NS: i64 = 60_000_000_000;
const HOUR_NS: i64 = 3_600_000_000_000;
const ENCODING_MAGIC: &[u8; 4] = b"ISRU";
const ENCODING_VERSION: u8 = 2;
/// Rows [`Rollup::add_requests`] groups by cell at a time (bounds its scratch memory); tests use
/// an odd small chunk so batches span several.
#[cfg(not(test))]
const ROWS_PER_CHUNK: usize = 1 << 16;
#[cfg(test)]
const ROWS_PER_CHUNK: usize = 97;
/// A row without a cell (its ts is null).
const NO_SLOT: u32 = u32::MAX;

/// Latency SLIs kept as sketches, one per `requests` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LatencySli {
    Queue,
    Prefill,
    Ttft,
    Decode,
    Tpot,
    ItlMax,
    E2e,
}

impl LatencySli {
    pub const ALL: [LatencySli; 7] = [
        LatencySli::Queue,
        LatencySli::Prefill,
        LatencySli::Ttft,
        LatencySli::Decode,
        LatencySli::Tpot,
        LatencySli::ItlMax,
        LatencySli::E2e,
    ];

    /// The name used in the API and CLI (`ttft`).
    pub fn name(self) -> &'static str {
        match self {
            LatencySli::Queue => "queue",
            LatencySli::Prefill => "prefill",
            LatencySli::Ttft => "ttft",
            LatencySli::Decode => "decode",
            LatencySli::Tpot => "tpot",
            LatencySli::ItlMax => "itl_max",
            LatencySli::E2e => "e2e",
        }
    }

    /// The `requests` column it summarizes (milliseconds).
    pub fn column(self) -> &'static str {
        match self {
            LatencySli::Queue => "queue_ms",
            LatencySli::Prefill => "prefill_ms",
            LatencySli::Ttft => "ttft_ms",
            LatencySli::Decode => "decode_ms",
            LatencySli::Tpot => "tpot_ms",
            LatencySli::ItlMax => "itl_max_ms",
            LatencySli::E2e => "e2e_ms",
        }
    }

    fn slot(self) -> usize {
        self as usize
    }
}

/// SLIs computed from the additive counters of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterSli {
    /// Requests per second.
    RequestRate,
    /// Requests with status `error` / requests.
    ErrorRate,
    /// Requests that stopped at the token limit (`finish_reason = length`) / requests.
    AbortRate,
    /// Output tokens / input tokens.
    TokenEfficiency,
    /// Cached (prefix-hit) input tokens / input tokens.
    PrefixCacheHitRate,
    /// Output tokens per second.
    OutputTokensPerSecond,
}

impl CounterSli {
    pub const ALL: [CounterSli; 6] = [
        CounterSli::RequestRate,
        CounterSli::ErrorRate,
        CounterSli::AbortRate,
        CounterSli::TokenEfficiency,
        CounterSli::PrefixCacheHitRate,
        CounterSli::OutputTokensPerSecond,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CounterSli::RequestRate => "request_rate",
            CounterSli::ErrorRate => "error_rate",
            CounterSli::AbortRate => "abort_rate",
            CounterSli::TokenEfficiency => "token_efficiency",
            CounterSli::PrefixCacheHitRate => "prefix_cache_hit_rate",
            CounterSli::OutputTokensPerSecond => "output_tokens_per_s",
        }
    }

    /// `(numerator, denominator)` of the SLI over a merged cell covering `seconds` seconds.
    fn ratio(self, cell: &Cell, seconds: f64) -> (f64, f64) {
        match self {
            CounterSli::RequestRate => (cell.requests as f64, seconds),
            CounterSli::ErrorRate => (cell.errors as f64, cell.requests as f64),
            CounterSli::AbortRate => (cell.truncated as f64, cell.requests as f64),
            CounterSli::TokenEfficiency => (cell.output_tokens as f64, cell.input_tokens as f64),
            CounterSli::PrefixCacheHitRate => (cell.cached_tokens as f64, cell.input_tokens as f64),
            CounterSli::OutputTokensPerSecond => (cell.output_tokens as f64, seconds),
        }
    }
}

/// Any SLI a rollup answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sli {
    Latency(LatencySli),
    Counter(CounterSli),
}

impl Sli {
    /// Parses an API/CLI name; accepts the column form too (`ttft_ms`).
    pub fn parse(name: &str) -> Option<Sli> {
        let bare = name.strip_suffix("_ms").unwrap_or(name);
        LatencySli::ALL
            .into_iter()
            .find(|s| s.name() == bare)
            .map(Sli::Latency)
            .or_else(|| {
                CounterSli::ALL
                    .into_iter()
                    .find(|s| s.name() == name)
                    .map(Sli::Counter)
            })
    }

    pub fn name(self) -> &'static str {
        match self {
            Sli::Latency(s) => s.name(),
            Sli::Counter(s) => s.name(),
        }
    }

    /// Every SLI name, for error messages and docs.
    pub fn all_names() -> Vec<&'static str> {
        LatencySli::ALL
            .iter()
            .map(|s| s.name())
            .chain(CounterSli::ALL.iter().map(|s| s.name()))
            .collect()
    }
}

/// Which dimensions a rollup keeps, and its combination budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollupSpec {
    /// `requests` columns (string or integer) that form a combination.
    pub dimensions: Vec<String>,
    pub max_combinations: usize,
}

impl Default for RollupSpec {
    fn default() -> Self {
        RollupSpec {
            dimensions: [
                "service",
                "runtime",
                "worker",
                "model",
                "model_version",
                "lora_adapters",
                "kv_cache_policy",
                "tenant",
            ]
            .map(String::from)
            .to_vec(),
            max_combinations: 20_000,
        }
    }
}

/// Additive counters and latency sketches of the requests of one minute in one combination.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cell {
    pub requests: u64,
    pub errors: u64,
    pub truncated: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_tokens: u64,
    pub sketches: [DdSketch; 7],
}

impl Cell {
    pub fn merge(&mut self, other: &Cell) {
        self.requests += other.requests;
        self.errors += other.errors;
        self.truncated += other.truncated;
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cached_tokens += other.cached_tokens;
        for (mine, theirs) in self.sketches.iter_mut().zip(&other.sketches) {
            mine.merge(theirs);
        }
    }

    pub fn sketch(&self, sli: LatencySli) -> &DdSketch {
        &self.sketches[sli.slot()]
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RollupError {
    #[error("column {column} of the requests batch has type {found}, expected {expected}")]
    ColumnType {
        column: String,
        found: String,
        expected: &'static str,
    },
    #[error("requests batch has no ts column")]
    MissingTs,
    #[error("rollup encoding is damaged: {0}")]
    Decode(String),
    #[error("unknown sli {name:?}; known: {known}")]
    UnknownSli { name: String, known: String },
    #[error("unknown dimension {name:?}; rollups keep: {known}")]
    UnknownDimension { name: String, known: String },
    #[error("invalid sli query: {0}")]
    InvalidQuery(String),
}

impl From<SketchDecodeError> for RollupError {
    fn from(err: SketchDecodeError) -> Self {
        RollupError::Decode(err.to_string())
    }
}

/// What [`Rollup::add_requests`] did with a batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AddStats {
    pub rows: u64,
    pub folded_rows: u64,
    /// Latency values that were negative or not finite, skipped.
    pub invalid_values: u64,
}

/// The rollup of a set of requests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rollup {
    dimensions: Vec<String>,
    max_combinations: usize,
    combos: Vec<Box<[String]>>,
    combo_index: ComboIndex,
    /// Keyed by (minute start in ns since the epoch, combination id).
    cells: BTreeMap<(i64, u32), Cell>,
    /// The same, merged per hour: a query over whole hours merges 60× fewer cells. Derived
    /// (kept in step on add and merge, rebuilt on decode), never persisted.
    hour_cells: BTreeMap<(i64, u32), Cell>,
    /// Whether `hour_cells` reflect `cells`; queries use minute cells only until [`Rollup::seal`].
    hours_current: bool,
    folded_rows: u64,
}

enum DimColumn<'a> {
    Str(&'a StringArray),
    Int(&'a Int64Array),
    Missing,
}

impl DimColumn<'_> {
    /// Calls `f` with the row's value as text, borrowed from the column (integers are written
    /// on the stack); a null or missing value is the empty string.
    #[inline]
    fn with_text<R>(&self, row: usize, f: impl FnOnce(&str) -> R) -> R {
        match self {
            DimColumn::Str(a) if a.is_valid(row) => f(a.value(row)),
            DimColumn::Int(a) if a.is_valid(row) => f(decimal(a.value(row), &mut [0; 20])),
            _ => f(""),
        }
    }
}

/// `value` in decimal, as `value.to_string()` writes it, in `buf` (20 bytes fit `i64::MIN`).
fn decimal(value: i64, buf: &mut [u8; 20]) -> &str {
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
struct ComboIndex {
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
    fn hash(&self, feed: impl FnOnce(&mut ComboHasher)) -> u64 {
        let mut hasher = self.state.build_hasher();
        feed(&mut hasher);
        hasher.finish()
    }

    #[inline]
    fn find(&self, hash: u64, mut matches: impl FnMut(u32) -> bool) -> Option<u32> {
        self.table.find(hash, |&id| matches(id)).copied()
    }

    fn insert(&mut self, hash: u64, id: u32) {
        debug_assert_eq!(id as usize, self.hashes.len(), "ids are dense, in order");
        self.hashes.push(hash);
        let hashes = &self.hashes;
        self.table
            .insert_unique(hash, id, |&other| hashes[other as usize]);
    }
}

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Option<&'a dyn Array> {
    batch.column_by_name(name).map(|c| c.as_ref())
}

fn type_error(name: &str, array: &dyn Array, expected: &'static str) -> RollupError {
    RollupError::ColumnType {
        column: name.to_string(),
        found: array.data_type().to_string(),
        expected,
    }
}

/// Column `name` of `batch` viewed as `A` by `view`; absent is `None`, another type an error.
fn typed_column<'a, A>(
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

fn f64_column<'a>(
    batch: &'a RecordBatch,
    name: &str,
) -> Result<Option<&'a Float64Array>, RollupError> {
    typed_column(batch, name, "Float64", |a| a.as_primitive_opt())
}

fn i64_column<'a>(
    batch: &'a RecordBatch,
    name: &str,
) -> Result<Option<&'a Int64Array>, RollupError> {
    typed_column(batch, name, "Int64", |a| a.as_primitive_opt())
}

fn str_column<'a>(
    batch: &'a RecordBatch,
    name: &str,
) -> Result<Option<&'a StringArray>, RollupError> {
    typed_column(batch, name, "Utf8", |a| a.as_string_opt::<i32>())
}

fn sum_u64(column: Option<&Int64Array>, row: usize) -> u64 {
    column
        .filter(|c| c.is_valid(row))
        .map_or(0, |c| c.value(row).max(0) as u64)
}

impl Rollup {
    pub fn new(spec: &RollupSpec) -> Rollup {
        Rollup {
            dimensions: spec.dimensions.clone(),
            max_combinations: spec.max_combinations.max(1),
            ..Rollup::default()
        }
    }

    pub fn dimensions(&self) -> &[String] {
        &self.dimensions
    }

    /// Rows that fell beyond the combination budget and were folded into [`OTHER`].
    pub fn folded_rows(&self) -> u64 {
        self.folded_rows
    }

    pub fn combinations(&self) -> usize {
        self.combos.len()
    }

    pub fn cell_count(&self) -> usize {
        self.cells.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// Total requests summarized.
    pub fn requests(&self) -> u64 {
        self.cells.values().map(|c| c.requests).sum()
    }

    /// `(first minute, last minute)` start times in ns, if any rows.
    pub fn minute_bounds(&self) -> Option<(i64, i64)> {
        let min = self.cells.keys().map(|k| k.0).min()?;
        let max = self.cells.keys().map(|k| k.0).max()?;
        Some((min, max))
    }

    /// The id of the combination `values`, added when new; beyond the budget the id of the
    /// fold-over combination, with `true`.
    fn combo_id(&mut self, values: &[String]) -> (u32, bool) {
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
    fn combo_id_by(
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

    fn push_combo(&mut self, hash: u64, values: Box<[String]>) -> u32 {
        debug_assert_eq!(values.len(), self.dimensions.len());
        let id = self.combos.len() as u32;
        self.combos.push(values);
        self.combo_index.insert(hash, id);
        id
    }

    /// Adds every row of a `requests` batch (columns looked up by name; a dimension the batch
    /// lacks is the empty string). Rows with a null ts are skipped.
    pub fn add_requests(&mut self, batch: &RecordBatch) -> Result<AddStats, RollupError> {
        let ts_array = column(batch, "ts").ok_or(RollupError::MissingTs)?;
        let ts: &TimestampNanosecondArray = match ts_array.data_type() {
            DataType::Timestamp(TimeUnit::Nanosecond, _) => ts_array.as_primitive(),
            _ => return Err(type_error("ts", ts_array, "Timestamp(ns)")),
        };
        let mut dims = Vec::with_capacity(self.dimensions.len());
        for name in &self.dimensions {
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
        let status = str_column(batch, "status")?;
        let finish = str_column(batch, "finish_reason")?;
        let input = i64_column(batch, "input_tokens")?;
        let output = i64_column(batch, "output_tokens")?;
        let cached = i64_column(batch, "cached_tokens")?;

        let mut stats = AddStats::default();
        // The cells this batch touches are taken out of `cells` on first touch and put back at
        // the end (one hash lookup per row, not a B-tree descent). Rows are added a chunk at a
        // time grouped by cell, so a cell's sketches stay in cache while its rows go in; within
        // a cell, rows keep their order (sketch sums are order-sensitive).
        let mut staged_slot: HashMap<(i64, u32), u32, foldhash::fast::RandomState> =
            HashMap::default();
        let mut staged_keys: Vec<(i64, u32)> = Vec::new();
        let mut staged: Vec<Cell> = Vec::new();
        let mut last_slot: Option<((i64, u32), u32)> = None;
        // the combination of the last row rolled up
        let mut previous: Option<(u32, bool)> = None;
        // per staged cell: requests, errors, truncated, input, output and cached tokens (integer
        // sums, so they are added per row here and into the cells at the end)
        let mut counters: Vec<[u64; 6]> = Vec::new();
        let mut slot_of_row: Vec<u32> = Vec::with_capacity(ROWS_PER_CHUNK);
        let mut position_of_row: Vec<u32> = Vec::with_capacity(ROWS_PER_CHUNK);
        let mut slot_starts: Vec<u32> = Vec::new();
        let mut ordered: Vec<Option<f64>> = Vec::with_capacity(ROWS_PER_CHUNK);
        for chunk_start in (0..batch.num_rows()).step_by(ROWS_PER_CHUNK) {
            let chunk = chunk_start..batch.num_rows().min(chunk_start + ROWS_PER_CHUNK);
            slot_of_row.clear();
            for row in chunk.clone() {
                if ts.is_null(row) {
                    slot_of_row.push(NO_SLOT);
                    continue;
                }
                let minute = ts.value(row).div_euclid(MINUTE_NS) * MINUTE_NS;
                let row_matches = |combo: &[String]| {
                    dims.iter()
                        .zip(combo)
                        .all(|(d, v)| d.with_text(row, |text| text == v))
                };
                let (combo, folded) = match previous {
                    // consecutive rows of one combination (batches that come per resource)
                    // skip the hash; a folded row's values are not its combination's
                    Some((id, false)) if row_matches(&self.combos[id as usize]) => (id, false),
                    _ => {
                        let hash = self.combo_index.hash(|h| {
                            for d in &dims {
                                d.with_text(row, |text| text.hash(h));
                            }
                        });
                        let c = self.combo_id_by(hash, row_matches, || {
                            dims.iter()
                                .map(|d| d.with_text(row, str::to_string))
                                .collect()
                        });
                        previous = Some(c);
                        c
                    }
                };
                if folded {
                    stats.folded_rows += 1;
                    self.folded_rows += 1;
                }
                let key = (minute, combo);
                let slot = match last_slot {
                    Some((last, slot)) if last == key => slot,
                    _ => {
                        let slot = *staged_slot.entry(key).or_insert_with(|| {
                            staged_keys.push(key);
                            staged.push(self.cells.remove(&key).unwrap_or_default());
                            counters.push([0; 6]);
                            (staged.len() - 1) as u32
                        });
                        last_slot = Some((key, slot));
                        slot
                    }
                };
                slot_of_row.push(slot);
                let error = status.is_some_and(|s| s.is_valid(row) && s.value(row) == "error");
                let truncated = finish.is_some_and(|s| s.is_valid(row) && s.value(row) == "length");
                let counts = &mut counters[slot as usize];
                counts[0] += 1;
                counts[1] += u64::from(error);
                counts[2] += u64::from(truncated);
                counts[3] += sum_u64(input, row);
                counts[4] += sum_u64(output, row);
                counts[5] += sum_u64(cached, row);
                stats.rows += 1;
            }
            // stable counting sort of the chunk's rows by cell: each row's position in cell order
            slot_starts.clear();
            slot_starts.resize(staged.len() + 1, 0);
            for &slot in slot_of_row.iter().filter(|&&s| s != NO_SLOT) {
                slot_starts[slot as usize + 1] += 1;
            }
            for i in 1..slot_starts.len() {
                slot_starts[i] += slot_starts[i - 1];
            }
            let placed = slot_starts[staged.len()] as usize;
            let mut next = slot_starts.clone();
            position_of_row.clear();
            position_of_row.extend(slot_of_row.iter().map(|&slot| {
                if slot == NO_SLOT {
                    return NO_SLOT;
                }
                let position = next[slot as usize];
                next[slot as usize] += 1;
                position
            }));
            // one latency column at a time: read it in row order into cell order, then add
            // each cell's run of values to its sketch
            for (sli, values) in latency.iter().enumerate() {
                let Some(values) = values else { continue };
                ordered.clear();
                ordered.resize(placed, None);
                for (row, &position) in chunk.clone().zip(&position_of_row) {
                    if position != NO_SLOT && values.is_valid(row) {
                        ordered[position as usize] = Some(values.value(row));
                    }
                }
                for (slot, bounds) in slot_starts.windows(2).enumerate() {
                    if bounds[0] == bounds[1] {
                        continue;
                    }
                    let sketch = &mut staged[slot].sketches[sli];
                    for value in ordered[bounds[0] as usize..bounds[1] as usize]
                        .iter()
                        .flatten()
                    {
                        if !sketch.add(*value) {
                            stats.invalid_values += 1;
                        }
                    }
                }
            }
        }
        for (cell, counts) in staged.iter_mut().zip(&counters) {
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
            let mut order: Vec<u32> = (0..staged.len() as u32).collect();
            order.sort_unstable_by_key(|&slot| staged_keys[slot as usize]);
            self.cells = order
                .into_iter()
                .map(|slot| {
                    let slot = slot as usize;
                    (staged_keys[slot], std::mem::take(&mut staged[slot]))
                })
                .collect();
        } else {
            self.cells.extend(staged_keys.into_iter().zip(staged));
        }
        self.hours_current = false;
        Ok(stats)
    }

    /// Derives the hour cells from the minute cells, so queries over whole hours merge 60×
    /// fewer cells. Call once a rollup is complete (the store does before caching it);
    /// unsealed rollups answer the same, from minute cells.
    pub fn seal(&mut self) {
        if !self.hours_current {
            self.rebuild_hour_cells();
        }
    }

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
    fn visit_cells(
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

    fn rebuild_hour_cells(&mut self) {
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

    /// Binary form: magic, version, dimensions, combinations, then cells sorted by key.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.cells.len() * 64);
        out.extend_from_slice(ENCODING_MAGIC);
        out.push(ENCODING_VERSION);
        put_varint(&mut out, self.max_combinations as u64);
        put_varint(&mut out, self.folded_rows);
        put_varint(&mut out, self.dimensions.len() as u64);
        for d in &self.dimensions {
            put_str(&mut out, d);
        }
        put_varint(&mut out, self.combos.len() as u64);
        for combo in &self.combos {
            for v in combo.iter() {
                put_str(&mut out, v);
            }
        }
        put_varint(&mut out, self.cells.len() as u64);
        for (key, cell) in &self.cells {
            out.extend_from_slice(&key.0.to_le_bytes());
            put_varint(&mut out, u64::from(key.1));
            for n in [
                cell.requests,
                cell.errors,
                cell.truncated,
                cell.input_tokens,
                cell.output_tokens,
                cell.cached_tokens,
            ] {
                put_varint(&mut out, n);
            }
            for sketch in &cell.sketches {
                sketch.encode(&mut out);
            }
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Rollup, RollupError> {
        let mut input = bytes;
        let magic = input
            .get(..4)
            .ok_or_else(|| RollupError::Decode("truncated header".into()))?;
        if magic != ENCODING_MAGIC {
            return Err(RollupError::Decode("not a rollup file".into()));
        }
        input = &input[4..];
        let version = *input
            .first()
            .ok_or_else(|| RollupError::Decode("truncated header".into()))?;
        if version != ENCODING_VERSION {
            return Err(RollupError::Decode(format!(
                "unsupported version {version}"
            )));
        }
        input = &input[1..];
        let max_combinations = take_varint(&mut input)? as usize;
        let folded_rows = take_varint(&mut input)?;
        let dim_count = take_len(&mut input)?;
        let mut dimensions = Vec::with_capacity(dim_count);
        for _ in 0..dim_count {
            dimensions.push(take_str(&mut input)?);
        }
        let combo_count = take_len(&mut input)?;
        let mut rollup = Rollup {
            dimensions,
            max_combinations,
            folded_rows,
            ..Rollup::default()
        };
        for _ in 0..combo_count {
            let mut values = Vec::with_capacity(dim_count);
            for _ in 0..dim_count {
                values.push(take_str(&mut input)?);
            }
            let hash = rollup.combo_index.hash(|h| {
                for v in &values {
                    v.as_str().hash(h);
                }
            });
            let combos = &rollup.combos;
            if rollup
                .combo_index
                .find(hash, |id| *combos[id as usize] == *values)
                .is_some()
            {
                return Err(RollupError::Decode("duplicate combination".into()));
            }
            rollup.push_combo(hash, values.into_boxed_slice());
        }
        let cell_count = take_len(&mut input)?;
        for _ in 0..cell_count {
            if input.len() < 8 {
                return Err(RollupError::Decode("truncated cell".into()));
            }
            let (ts, rest) = input.split_at(8);
            input = rest;
            let minute = i64::from_le_bytes(
                ts.try_into()
                    .map_err(|_| RollupError::Decode("truncated cell".into()))?,
            );
            let combo = take_varint(&mut input)?;
            if combo >= combo_count as u64 {
                return Err(RollupError::Decode(
                    "cell names an unknown combination".into(),
                ));
            }
            let mut cell = Cell {
                requests: take_varint(&mut input)?,
                errors: take_varint(&mut input)?,
                truncated: take_varint(&mut input)?,
                input_tokens: take_varint(&mut input)?,
                output_tokens: take_varint(&mut input)?,
                cached_tokens: take_varint(&mut input)?,
                ..Cell::default()
            };
            for sketch in &mut cell.sketches {
                *sketch = DdSketch::decode(&mut input)?;
            }
            rollup.cells.insert((minute, combo as u32), cell);
        }
        if !input.is_empty() {
            return Err(RollupError::Decode("trailing bytes".into()));
        }
        rollup.rebuild_hour_cells();
        Ok(rollup)
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

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn take_len(input: &mut &[u8]) -> Result<usize, RollupError> {
    let n = take_varint(input)?;
    // every element takes at least one byte, so a larger count is damage, not a big file
    if n > input.len() as u64 {
        return Err(RollupError::Decode(
            "count exceeds the remaining bytes".into(),
        ));
    }
    Ok(n as usize)
}

fn take_str(input: &mut &[u8]) -> Result<String, RollupError> {
    let len = take_len(input)?;
    let (bytes, rest) = input.split_at(len);
    *input = rest;
    String::from_utf8(bytes.to_vec()).map_err(|_| RollupError::Decode("invalid utf-8".into()))
}

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
struct Accumulator {
    keys: Vec<Vec<String>>,
    cells: HashMap<(u32, i64), Cell>,
    dense: HashMap<(u32, i64), (u64, DenseSketch)>,
}

fn accumulate(
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
    // a cell covers its whole minute: one that starts before `since` but reaches it counts
    let since = query
        .since_ns
        .map_or(i64::MIN, |s| s.div_euclid(MINUTE_NS) * MINUTE_NS);
    let until = query.until_ns.unwrap_or(i64::MAX);
    let latency_slot = match query.sli {
        Sli::Latency(s) => Some(s.slot()),
        Sli::Counter(_) => None,
    };
    // parts are independent: split them over the cores, merge the per-thread results
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(parts.len() / 4)
        .max(1);
    let partials: Vec<Accumulator> = if threads == 1 {
        vec![accumulate(parts, query, since, until, latency_slot)]
    } else {
        let chunk = parts.len().div_ceil(threads);
        std::thread::scope(|scope| {
            let handles: Vec<_> = parts
                .chunks(chunk)
                .map(|chunk| {
                    scope.spawn(move || accumulate(chunk, query, since, until, latency_slot))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        })
    };
    let mut groups: HashMap<Vec<String>, u32> = HashMap::new();
    let mut group_keys: Vec<Vec<String>> = Vec::new();
    let mut acc: HashMap<(u32, i64), Cell> = HashMap::new();
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
    for ((group, bucket), cell) in acc {
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
        let point = match query.sli {
            Sli::Latency(s) => {
                let sketch = cell.sketch(s);
                SliPoint {
                    ts_ns: if bucket == i64::MIN {
                        query.since_ns.unwrap_or(first_minute)
                    } else {
                        bucket
                    },
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
                let (num, den) = s.ratio(&cell, seconds);
                SliPoint {
                    ts_ns: if bucket == i64::MIN {
                        query.since_ns.unwrap_or(first_minute)
                    } else {
                        bucket
                    },
                    requests: cell.requests,
                    values: vec![(den > 0.0).then(|| num / den)],
                    mean: None,
                }
            }
        };
        series[group as usize].points.push(point);
    }
    series.retain(|s| !s.points.is_empty());
    for s in &mut series {
        s.points.sort_by_key(|p| p.ts_ns);
    }
    series.sort_by(|a, b| a.group.cmp(&b.group));
    Ok(series)
}

#[cfg(test)]
mod tests {
    use super::*;
    use infersight_model::RequestRecord;
    use infersight_model::tables::RequestBatchBuilder;

    fn record(minute: i64, worker: &str, version: &str, ttft: f64) -> RequestRecord {
        RequestRecord {
            ts: 1_764_381_600_000_000_000 + minute * MINUTE_NS + 1_000,
            worker: Some(worker.into()),
            model_version: Some(version.into()),
            ttft_ms: Some(ttft),
            e2e_ms: Some(ttft * 10.0),
            status: Some(if ttft > 500.0 { "error" } else { "ok" }.into()),
            input_tokens: Some(100),
            output_tokens: Some(50),
            cached_tokens: Some(25),
            ..RequestRecord::default()
        }
    }

    fn batch(records: &[RequestRecord]) -> RecordBatch {
        let mut builder = RequestBatchBuilder::new();
        for r in records {
            builder.push(r);
        }
        builder.finish()
    }

    fn spec(max_combinations: usize) -> RollupSpec {
        RollupSpec {
            dimensions: vec!["worker".into(), "model_version".into()],
            max_combinations,
        }
    }

    fn query(sli: &str, by: &[&str]) -> SliQuery {
        SliQuery {
            sli: Sli::parse(sli).unwrap(),
            quantiles: vec![0.5, 0.99],
            by: by.iter().map(|s| s.to_string()).collect(),
            filters: Vec::new(),
            since_ns: None,
            until_ns: None,
            step_ns: None,
        }
    }

    #[test]
    fn groups_filters_and_steps() {
        let mut records = Vec::new();
        for minute in 0..10 {
            for i in 0..20 {
                records.push(record(minute, "w1", "r1", 100.0 + i as f64));
                let slow = if minute >= 5 { 1000.0 } else { 100.0 };
                records.push(record(minute, "w2", "r2", slow + i as f64));
            }
        }
        let mut rollup = Rollup::new(&spec(100));
        let stats = rollup.add_requests(&batch(&records)).unwrap();
        assert_eq!(stats.rows, 400);
        assert_eq!(rollup.combinations(), 2);

        let by_worker = query_rollups(&[&rollup], &query("ttft", &["worker"])).unwrap();
        assert_eq!(by_worker.len(), 2);
        assert_eq!(by_worker[0].group, vec![("worker".into(), "w1".into())]);
        let w1 = &by_worker[0].points[0];
        assert_eq!(w1.requests, 200);
        assert!((w1.values[1].unwrap() - 118.0).abs() / 118.0 <= 0.01);
        let w2_p99 = by_worker[1].points[0].values[1].unwrap();
        assert!((w2_p99 - 1019.0).abs() / 1019.0 <= 0.01, "{w2_p99}");

        let mut stepped = query("error_rate", &["worker"]);
        stepped.step_ns = Some(5 * MINUTE_NS);
        stepped.filters = vec![("model_version".into(), "r2".into())];
        let series = query_rollups(&[&rollup], &stepped).unwrap();
        assert_eq!(series.len(), 1);
        let values: Vec<f64> = series[0]
            .points
            .iter()
            .map(|p| p.values[0].unwrap())
            .collect();
        assert_eq!(values, vec![0.0, 1.0]);

        let hit = query_rollups(&[&rollup], &query("prefix_cache_hit_rate", &[])).unwrap();
        assert_eq!(hit[0].points[0].values[0], Some(0.25));

        let err = query_rollups(&[&rollup], &query("ttft", &["tenant"])).unwrap_err();
        assert!(matches!(err, RollupError::UnknownDimension { .. }), "{err}");
    }

    #[test]
    fn a_column_of_the_wrong_type_is_an_error_naming_it() {
        use arrow::array::{ArrayRef, StringArray, TimestampNanosecondArray};
        use std::sync::Arc;
        let batch = RecordBatch::try_from_iter([
            (
                "ts",
                Arc::new(TimestampNanosecondArray::from(vec![1_i64])) as ArrayRef,
            ),
            (
                "ttft_ms",
                Arc::new(StringArray::from(vec!["fast"])) as ArrayRef,
            ),
        ])
        .unwrap();
        let err = Rollup::new(&spec(10)).add_requests(&batch).unwrap_err();
        assert!(
            matches!(&err, RollupError::ColumnType { column, .. } if column == "ttft_ms"),
            "{err}"
        );
        assert!(err.to_string().contains("Float64"), "{err}");
    }

    #[test]
    fn budget_folds_into_other_and_counts() {
        let records: Vec<RequestRecord> = (0..10)
            .map(|i| record(0, &format!("w{i}"), "r1", 50.0))
            .collect();
        let mut rollup = Rollup::new(&spec(3));
        let stats = rollup.add_requests(&batch(&records)).unwrap();
        assert_eq!(stats.folded_rows, 7);
        assert_eq!(rollup.combinations(), 4);
        let series = query_rollups(&[&rollup], &query("ttft", &["worker"])).unwrap();
        let other = series.iter().find(|s| s.group[0].1 == OTHER).unwrap();
        assert_eq!(other.points[0].requests, 7);
        assert_eq!(rollup.requests(), 10);
    }

    #[test]
    fn merge_split_and_encode_preserve_answers() {
        let records: Vec<RequestRecord> = (0..180)
            .map(|m| record(m, if m % 2 == 0 { "a" } else { "b" }, "r1", 10.0 + m as f64))
            .collect();
        let mut whole = Rollup::new(&spec(100));
        whole.add_requests(&batch(&records)).unwrap();
        let mut halves = Rollup::new(&spec(100));
        let mut first = Rollup::new(&spec(100));
        first.add_requests(&batch(&records[..90])).unwrap();
        let mut second = Rollup::new(&RollupSpec {
            dimensions: vec!["model_version".into(), "worker".into()],
            max_combinations: 100,
        });
        second.add_requests(&batch(&records[90..])).unwrap();
        halves.merge(&first);
        halves.merge(&second);
        let q = query("ttft", &["worker"]);
        assert_eq!(
            query_rollups(&[&whole], &q).unwrap(),
            query_rollups(&[&halves], &q).unwrap()
        );
        let hours = whole.split_by_hour();
        assert_eq!(hours.len(), 3);
        let decoded: Vec<Rollup> = hours
            .iter()
            .map(|(_, r)| Rollup::decode(&r.encode()).unwrap())
            .collect();
        let refs: Vec<&Rollup> = decoded.iter().collect();
        assert_eq!(
            query_rollups(&refs, &q).unwrap(),
            query_rollups(&[&whole], &q).unwrap()
        );
        let bytes = whole.encode();
        for cut in [3, 10, bytes.len() - 1] {
            assert!(Rollup::decode(&bytes[..cut]).is_err());
        }
    }
}

#[cfg(test)]
mod reference_tests {
    //! The rollup of seeded random `requests` batches equals, byte for byte once encoded, the one
    //! a naive per-row reference builds (owned value vectors, a plain map of combinations, one
    //! `BTreeMap` entry and one [`DdSketch::add`] per value).

    use super::*;
    use arrow::array::ArrayRef;
    use infersight_model::RequestRecord;
    use std::sync::Arc;

    use crate::canary::SplitMix64 as Rng;

    fn pick<T: Clone>(rng: &mut Rng, options: &[T]) -> T {
        options[rng.below(options.len())].clone()
    }

    fn text(rng: &mut Rng, pool: &[&str]) -> Option<String> {
        // None and "" are the same value in a combination; OTHER collides with the fold-over
        match rng.below(12) {
            0 => None,
            1 => Some(String::new()),
            2 => Some(OTHER.to_string()),
            _ => Some(pick(rng, pool).to_string()),
        }
    }

    fn latency(rng: &mut Rng) -> Option<f64> {
        match rng.below(40) {
            0 => None,
            1 => Some(f64::NAN),
            2 => Some(-1.5),
            3 => Some(f64::INFINITY),
            4 => Some(f64::NEG_INFINITY),
            5 => Some(0.0),
            6 => Some(-0.0),
            7 => Some(MIN_POSITIVE_PROBE * rng.uniform()),
            8 => Some(1e300 * rng.uniform()),
            9 => Some(f64::MIN_POSITIVE),
            _ => Some((rng.uniform() * 12.0 - 3.0).exp()),
        }
    }

    const MIN_POSITIVE_PROBE: f64 = crate::sketch::MIN_POSITIVE * 2.0;

    fn random_records(
        rng: &mut Rng,
        rows: usize,
        start_ns: i64,
        span_ns: i64,
    ) -> Vec<RequestRecord> {
        let mut records: Vec<RequestRecord> = Vec::with_capacity(rows);
        for i in 0..rows {
            let ts = start_ns + (span_ns as f64 * rng.uniform()) as i64;
            // runs of one combination, as batches that come per resource have
            if i > 0 && rng.below(3) == 0 {
                let mut same = records[i - 1].clone();
                same.ts = ts;
                same.ttft_ms = latency(rng);
                same.e2e_ms = latency(rng);
                records.push(same);
                continue;
            }
            records.push(RequestRecord {
                ts,
                service: text(rng, &["chat", "batch"]),
                worker: text(rng, &["w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7"]),
                model: text(rng, &["a", "b", "c", "d"]),
                tenant: text(rng, &["t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8"]),
                batch_size: match rng.below(6) {
                    0 => None,
                    1 => Some(i64::MIN),
                    2 => Some(-7),
                    _ => Some(rng.below(4) as i64),
                },
                input_tokens: (rng.below(5) > 0).then(|| rng.below(5000) as i64 - 10),
                output_tokens: (rng.below(5) > 0).then(|| rng.below(500) as i64),
                cached_tokens: (rng.below(2) > 0).then(|| rng.below(900) as i64),
                queue_ms: latency(rng),
                prefill_ms: latency(rng),
                ttft_ms: latency(rng),
                decode_ms: latency(rng),
                tpot_ms: latency(rng),
                itl_max_ms: latency(rng),
                e2e_ms: latency(rng),
                status: text(rng, &["ok", "error"]),
                finish_reason: text(rng, &["stop", "length"]),
                ..RequestRecord::default()
            });
        }
        if rng.below(2) == 0 {
            records.sort_by_key(|r| r.ts);
        }
        records
    }

    /// A batch of a few columns only, with null timestamps: the shape of a hand-made or older
    /// batch (missing columns roll up as empty dimensions and no values).
    fn sparse_batch(rng: &mut Rng, rows: usize, start_ns: i64) -> RecordBatch {
        let ts: Vec<Option<i64>> = (0..rows)
            .map(|_| (rng.below(8) > 0).then(|| start_ns + rng.below(300) as i64 * 1_000_000_000))
            .collect();
        let worker: Vec<Option<String>> =
            (0..rows).map(|_| text(rng, &["w0", "w1", "w9"])).collect();
        let batch_size: Vec<Option<i64>> = (0..rows)
            .map(|_| (rng.below(4) > 0).then(|| rng.below(3) as i64))
            .collect();
        let ttft: Vec<Option<f64>> = (0..rows).map(|_| latency(rng)).collect();
        RecordBatch::try_from_iter([
            (
                "ts",
                Arc::new(TimestampNanosecondArray::from(ts)) as ArrayRef,
            ),
            ("worker", Arc::new(StringArray::from(worker)) as ArrayRef),
            (
                "batch_size",
                Arc::new(Int64Array::from(batch_size)) as ArrayRef,
            ),
            ("ttft_ms", Arc::new(Float64Array::from(ttft)) as ArrayRef),
        ])
        .unwrap()
    }

    fn dim_text(batch: &RecordBatch, name: &str, row: usize) -> String {
        let Some(column) = batch.column_by_name(name) else {
            return String::new();
        };
        if column.is_null(row) {
            return String::new();
        }
        match column.data_type() {
            DataType::Utf8 => column.as_string::<i32>().value(row).to_string(),
            DataType::Int64 => column
                .as_primitive::<arrow::datatypes::Int64Type>()
                .value(row)
                .to_string(),
            other => panic!("dimension of type {other}"),
        }
    }

    fn f64_at(batch: &RecordBatch, name: &str, row: usize) -> Option<f64> {
        let column = batch.column_by_name(name)?;
        let values = column.as_primitive::<arrow::datatypes::Float64Type>();
        values.is_valid(row).then(|| values.value(row))
    }

    fn i64_at(batch: &RecordBatch, name: &str, row: usize) -> u64 {
        batch
            .column_by_name(name)
            .map(|c| c.as_primitive::<arrow::datatypes::Int64Type>())
            .filter(|c| c.is_valid(row))
            .map_or(0, |c| c.value(row).max(0) as u64)
    }

    fn str_is(batch: &RecordBatch, name: &str, row: usize, want: &str) -> bool {
        batch
            .column_by_name(name)
            .map(|c| c.as_string::<i32>())
            .is_some_and(|c| c.is_valid(row) && c.value(row) == want)
    }

    /// The straightforward per-row rollup (what `add_requests` did before it was optimized).
    fn reference_rollup(spec: &RollupSpec, batches: &[RecordBatch]) -> (Rollup, AddStats) {
        let max = spec.max_combinations.max(1);
        let mut ids: HashMap<Vec<String>, u32> = HashMap::new();
        let mut combos: Vec<Box<[String]>> = Vec::new();
        let mut cells: BTreeMap<(i64, u32), Cell> = BTreeMap::new();
        let mut stats = AddStats::default();
        for batch in batches {
            let ts = batch
                .column_by_name("ts")
                .unwrap()
                .as_primitive::<arrow::datatypes::TimestampNanosecondType>();
            for row in 0..batch.num_rows() {
                if ts.is_null(row) {
                    continue;
                }
                let values: Vec<String> = spec
                    .dimensions
                    .iter()
                    .map(|d| dim_text(batch, d, row))
                    .collect();
                let (combo, folded) = match ids.get(&values) {
                    Some(&id) => (id, false),
                    None => {
                        let over = combos.len() >= max;
                        let key = if over {
                            vec![OTHER.to_string(); spec.dimensions.len()]
                        } else {
                            values
                        };
                        let next = combos.len() as u32;
                        let id = *ids.entry(key.clone()).or_insert_with(|| {
                            combos.push(key.into_boxed_slice());
                            next
                        });
                        (id, over)
                    }
                };
                stats.folded_rows += u64::from(folded);
                let minute = ts.value(row).div_euclid(MINUTE_NS) * MINUTE_NS;
                let cell = cells.entry((minute, combo)).or_default();
                cell.requests += 1;
                cell.errors += u64::from(str_is(batch, "status", row, "error"));
                cell.truncated += u64::from(str_is(batch, "finish_reason", row, "length"));
                cell.input_tokens += i64_at(batch, "input_tokens", row);
                cell.output_tokens += i64_at(batch, "output_tokens", row);
                cell.cached_tokens += i64_at(batch, "cached_tokens", row);
                for sli in LatencySli::ALL {
                    if let Some(v) = f64_at(batch, sli.column(), row)
                        && !cell.sketches[sli.slot()].add(v)
                    {
                        stats.invalid_values += 1;
                    }
                }
                stats.rows += 1;
            }
        }
        let mut rollup = Rollup::new(spec);
        rollup.combos = combos;
        rollup.cells = cells;
        rollup.folded_rows = stats.folded_rows;
        (rollup, stats)
    }

    fn check(seed: u64, spec: &RollupSpec, batches: &[RecordBatch]) {
        let mut rollup = Rollup::new(spec);
        let mut stats = AddStats::default();
        for batch in batches {
            let s = rollup.add_requests(batch).unwrap();
            stats.rows += s.rows;
            stats.folded_rows += s.folded_rows;
            stats.invalid_values += s.invalid_values;
        }
        let (mut reference, want_stats) = reference_rollup(spec, batches);
        assert_eq!(stats, want_stats, "seed {seed}");
        assert_eq!(rollup.combos, reference.combos, "seed {seed}");
        assert!(rollup.encode() == reference.encode(), "seed {seed}");
        rollup.seal();
        reference.seal();
        assert!(rollup.hour_cells == reference.hour_cells, "seed {seed}");
        assert!(rollup.encode() == reference.encode(), "seed {seed}");
        // the index still finds every combination after the rows: a decoded copy answers alike
        let decoded = Rollup::decode(&rollup.encode()).unwrap();
        assert_eq!(decoded.encode(), rollup.encode(), "seed {seed}");
    }

    #[test]
    fn random_batches_roll_up_like_the_per_row_reference() {
        const HOUR: i64 = 3_600_000_000_000;
        let start = 1_764_381_600_000_000_000;
        for seed in 0..24u64 {
            let mut rng = Rng::new(seed);
            let spec = RollupSpec {
                dimensions: [
                    "service",
                    "worker",
                    "batch_size",
                    "model",
                    "absent",
                    "tenant",
                ]
                .map(String::from)
                .to_vec(),
                // small budgets fold, large ones keep every combination
                max_combinations: pick(&mut rng, &[1, 7, 60, 400, 20_000]),
            };
            let mut batches = Vec::new();
            for b in 0..1 + rng.below(5) {
                // batches overlap in time, so later ones add to existing cells
                let offset = rng.below(3) as i64 * HOUR / 2;
                let rows = pick(&mut rng, &[0, 1, 50, 700, 3000]);
                let records = random_records(&mut rng, rows, start + offset, 3 * HOUR);
                batches.push(RequestRecord::to_batch(&records));
                if b % 2 == 1 {
                    batches.push(sparse_batch(&mut rng, 200, start + offset));
                }
            }
            check(seed, &spec, &batches);
        }
    }

    #[test]
    fn the_reference_check_catches_a_difference() {
        let mut rng = Rng::new(99);
        let spec = RollupSpec {
            dimensions: vec!["worker".into()],
            max_combinations: 100,
        };
        let batch = RequestRecord::to_batch(&random_records(&mut rng, 500, 0, MINUTE_NS * 90));
        let mut rollup = Rollup::new(&spec);
        rollup.add_requests(&batch).unwrap();
        let (mut reference, _) = reference_rollup(&spec, std::slice::from_ref(&batch));
        assert!(rollup.encode() == reference.encode());
        // one value more in one sketch is a different encoding
        reference.cells.values_mut().next().unwrap().sketches[2].add(42.0);
        assert!(rollup.encode() != reference.encode());
    }
}
