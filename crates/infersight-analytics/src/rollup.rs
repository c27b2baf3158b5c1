//! SLI rollups: per minute and per dimension combination, one quantile sketch per latency SLI plus
//! the additive counters derived SLIs need. The store builds them from `requests` batches at
//! ingest and persists them; the query layer merges them to answer "p99 TTFT by model_version
//! and worker, per minute, since 02:00" without rescanning raw rows.
//!
//! Cardinality guard: a rollup accepts at most `max_combinations` distinct dimension
//! combinations; rows of further combinations fold into the combination whose every value is
//! [`OTHER`], and are counted in [`Rollup::folded_rows`].

use std::collections::{BTreeMap, HashMap};

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
    combo_ids: HashMap<Box<[String]>, u32>,
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
    fn value(&self, row: usize) -> String {
        match self {
            DimColumn::Str(a) if a.is_valid(row) => a.value(row).to_string(),
            DimColumn::Int(a) if a.is_valid(row) => a.value(row).to_string(),
            _ => String::new(),
        }
    }

    fn same_as_previous(&self, row: usize) -> bool {
        if row == 0 {
            return false;
        }
        match self {
            DimColumn::Str(a) => {
                a.is_valid(row) == a.is_valid(row - 1)
                    && (!a.is_valid(row) || a.value(row) == a.value(row - 1))
            }
            DimColumn::Int(a) => {
                a.is_valid(row) == a.is_valid(row - 1)
                    && (!a.is_valid(row) || a.value(row) == a.value(row - 1))
            }
            DimColumn::Missing => true,
        }
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

    fn combo_id(&mut self, values: Vec<String>) -> (u32, bool) {
        if let Some(&id) = self.combo_ids.get(values.as_slice()) {
            return (id, false);
        }
        let over_budget = self.combos.len() >= self.max_combinations;
        let key: Box<[String]> = if over_budget {
            vec![OTHER.to_string(); self.dimensions.len()].into_boxed_slice()
        } else {
            values.into_boxed_slice()
        };
        if let Some(&id) = self.combo_ids.get(&key) {
            return (id, over_budget);
        }
        let id = self.combos.len() as u32;
        self.combos.push(key.clone());
        self.combo_ids.insert(key, id);
        (id, over_budget)
    }

    /// Adds every row of a `requests` batch (columns looked up by name; a dimension the batch
    /// lacks is the empty string).
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
        let mut current: Option<(u32, bool)> = None;
        for row in 0..batch.num_rows() {
            if ts.is_null(row) {
                continue;
            }
            let minute = ts.value(row).div_euclid(MINUTE_NS) * MINUTE_NS;
            // consecutive rows of one combination (common: batches come per resource) reuse it
            let same = current.is_some() && dims.iter().all(|d| d.same_as_previous(row));
            let (combo, folded) = match (same, current) {
                (true, Some(c)) => c,
                _ => {
                    let values: Vec<String> = dims.iter().map(|d| d.value(row)).collect();
                    let c = self.combo_id(values);
                    current = Some(c);
                    c
                }
            };
            if folded {
                stats.folded_rows += 1;
                self.folded_rows += 1;
            }
            let error = status.is_some_and(|s| s.is_valid(row) && s.value(row) == "error");
            let truncated = finish.is_some_and(|s| s.is_valid(row) && s.value(row) == "length");
            let cell = self.cells.entry((minute, combo)).or_default();
            cell.requests += 1;
            cell.errors += u64::from(error);
            cell.truncated += u64::from(truncated);
            cell.input_tokens += sum_u64(input, row);
            cell.output_tokens += sum_u64(output, row);
            cell.cached_tokens += sum_u64(cached, row);
            for (slot, values) in latency.iter().enumerate() {
                if let Some(values) = values.filter(|v| v.is_valid(row)) {
                    cell.sketches[slot].add(values.value(row));
                }
            }
            for values in latency.iter().flatten() {
                let v = values.value(row);
                if values.is_valid(row) && (!v.is_finite() || v < 0.0) {
                    stats.invalid_values += 1;
                }
            }
            stats.rows += 1;
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
            remap.push(self.combo_id(values));
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
            let (id, _) = part.combo_id(self.combos[combo as usize].to_vec());
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
            let key: Box<[String]> = values.into_boxed_slice();
            if rollup.combo_ids.contains_key(&key) {
                return Err(RollupError::Decode("duplicate combination".into()));
            }
            rollup
                .combo_ids
                .insert(key.clone(), rollup.combos.len() as u32);
            rollup.combos.push(key);
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
