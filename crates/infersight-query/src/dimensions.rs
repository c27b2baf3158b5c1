//! Dimension discovery: which attributes of `requests` are low-cardinality enough to slice
//! latency by. Root-cause localization searches combinations of these, so the set is discovered
//! from the data (named columns and every scalar key of `attrs`), not hard-coded.
//!
//! One streaming scan of the range counts values per attribute. Each partition of the scan has
//! its own worker: a task decodes the partition's batches and counts each on a blocking thread
//! while it decodes the next; the workers' counters are merged at the end, with the same result
//! as one pass over all rows. Counting looks up by `&str` in foldhash maps, allocating only for a
//! new value. `attrs` is read without building a `serde_json::Map`: flat objects (no escapes,
//! nested values or exponents: the common case) by a small scanner borrowing keys and strings
//! from the row, anything else by serde_json's deserializer visiting the same values. Either way
//! a row counts exactly when `json_get` can parse it, and a value's text is the one `json_get`
//! gives (numbers and booleans are rendered only when counted), so dimension values match what
//! `json_get` filters compare against.
//!
//! Memory stays bounded: an attribute stops tracking values once it exceeds `max_cardinality` in
//! a worker (it is excluded anyway), and at most [`MAX_ATTR_KEYS`] distinct `attrs` keys are
//! tracked per discovery, admitted first come across all workers. With `P` partitions
//! (`target_partitions`, the core count) at most `P × (named columns + MAX_ATTR_KEYS) ×
//! (max_cardinality + 1)` values are held, plus at most 4096 rendered numbers per worker.

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, LargeStringArray, RecordBatch, StringArray, StringViewArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::prelude::{SessionContext, col, lit};
use datafusion::scalar::ScalarValue;
use futures::StreamExt;
use infersight_model::Table;
use infersight_model::scan::json_string_special;
use infersight_store::TimeRange;
use serde::Serialize;
use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};

use crate::error::QueryError;
use crate::range::TS_COLUMN;

/// Named string columns of `requests` that can be dimensions.
pub const STRING_COLUMNS: &[&str] = &[
    "tenant",
    "session_id",
    "service",
    "runtime",
    "worker",
    "device",
    "model",
    "model_version",
    "lora_adapters",
    "kv_cache_policy",
    "finish_reason",
    "status",
    "error_type",
];

/// Numeric columns of `requests` that behave like settings; their values are reported as text.
pub const SETTING_COLUMNS: &[&str] = &["batch_size", "max_tokens"];

const ATTRS_COLUMN: &str = "attrs";

/// At most this many distinct `attrs` keys are tracked per discovery; later new keys are ignored.
pub const MAX_ATTR_KEYS: usize = 4096;

/// An attribute whose every distinct value equals its row count is an id (request ids, uuids),
/// not a dimension, once there are more rows than this.
const ID_MIN_ROWS: u64 = 20;

/// Hash maps keyed by short strings on the per-row path: foldhash (already built for DataFusion)
/// is several times faster than SipHash there, and the inputs are not attacker-chosen keys of a
/// long-lived map (every map lives for one request and is capped).
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
type FastSet<K> = HashSet<K, foldhash::fast::RandomState>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DimensionSource {
    /// A named column of `requests`.
    Column,
    /// A top-level key of the `attrs` JSON column.
    Attrs,
}

impl DimensionSource {
    pub fn as_str(self) -> &'static str {
        match self {
            DimensionSource::Column => "column",
            DimensionSource::Attrs => "attrs",
        }
    }
}

impl std::fmt::Display for DimensionSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A candidate dimension and its value distribution in the requested range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Dimension {
    /// Column name, or the `attrs` key (e.g. `llm.lora.adapters`).
    pub name: String,
    pub source: DimensionSource,
    /// Distinct non-null values.
    pub distinct_values: u64,
    /// Rows carrying a non-null value of the attribute.
    pub total_rows: u64,
    /// The most frequent values with their row counts, by count descending then value ascending.
    pub values: Vec<(String, u64)>,
}

/// Value counts of one attribute, capped at `max_cardinality` distinct values: one more and the
/// attribute is excluded. The outcome does not depend on the order values arrive in, so counters
/// of disjoint row sets merge into the counter of their union.
#[derive(Debug, Default)]
struct Counter {
    counts: FastMap<Box<str>, u64>,
    total_rows: u64,
    /// More distinct values than allowed were seen; `counts` was dropped.
    too_many: bool,
    /// The attribute held an array or object at least once.
    not_scalar: bool,
}

impl Counter {
    /// Counts `rows` rows holding `value`; looks up by `&str`, allocating only for a new value.
    fn add(&mut self, value: &str, rows: u64, max_cardinality: usize) {
        self.total_rows += rows;
        if self.too_many {
            return;
        }
        if let Some(count) = self.counts.get_mut(value) {
            *count += rows;
            return;
        }
        self.insert_new(value.into(), rows, max_cardinality);
    }

    fn insert_new(&mut self, value: Box<str>, rows: u64, max_cardinality: usize) {
        debug_assert!(!self.too_many && !self.counts.contains_key(&value));
        if self.counts.len() >= max_cardinality {
            self.too_many = true;
            self.counts = FastMap::default();
            return;
        }
        self.counts.insert(value, rows);
    }

    /// Adds the counts of `other`, which saw other rows. Too many distinct values in either, or
    /// in both together, means too many overall; `total_rows` adds up either way.
    fn merge(&mut self, other: Counter, max_cardinality: usize) {
        self.total_rows += other.total_rows;
        self.not_scalar |= other.not_scalar;
        if other.too_many {
            self.too_many = true;
            self.counts = FastMap::default();
        }
        for (value, rows) in other.counts {
            if self.too_many {
                return;
            }
            match self.counts.get_mut(&value) {
                Some(count) => *count += rows,
                None => self.insert_new(value, rows, max_cardinality),
            }
        }
    }

    fn into_dimension(
        self,
        name: String,
        source: DimensionSource,
        max_values: usize,
    ) -> Option<Dimension> {
        let distinct_values = self.counts.len() as u64;
        let is_id = distinct_values == self.total_rows && self.total_rows > ID_MIN_ROWS;
        if self.too_many || self.not_scalar || self.total_rows == 0 || is_id {
            return None;
        }
        let mut values: Vec<(String, u64)> = self
            .counts
            .into_iter()
            .map(|(value, count)| (value.into_string(), count))
            .collect();
        values.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        values.truncate(max_values);
        Some(Dimension {
            name,
            source,
            distinct_values,
            total_rows: self.total_rows,
            values,
        })
    }
}

/// The `attrs` keys tracked by one discovery, shared by its workers: a key is admitted the first
/// time any worker meets it while fewer than [`MAX_ATTR_KEYS`] are tracked. Once the set is full
/// it never changes, so a tracked key was tracked from its first row on and its counts are exact.
#[derive(Debug, Default)]
struct AttrKeyAdmission {
    keys: Mutex<FastSet<Box<str>>>,
}

/// A top-level value of `attrs`, as far as discovery cares.
#[derive(Debug)]
enum AttrValue<'a> {
    /// `null`: the key is tracked but the row has no value for it.
    Null,
    /// A string, borrowed from the row unless it had escapes.
    Text(Cow<'a, str>),
    /// A number or boolean from serde_json, rendered the way `json_get` renders it when counted.
    Scalar(serde_json::Value),
    /// `true` or `false` from the scanner.
    Bool(bool),
    /// The text of a JSON number that serde_json accepts (checked by [`scan_flat_object`]),
    /// rendered when counted as `json_get` renders the number it parses to.
    Number(&'a str),
    /// An array or object: the attribute is not a dimension.
    NotScalar,
}

/// One parsed `attrs` entry, in the row's order (duplicate keys included).
type AttrEntry<'a> = (Cow<'a, str>, AttrValue<'a>);

/// The counters of one worker (or, after merging, of the whole discovery).
struct Discovery {
    max_cardinality: usize,
    columns: Vec<(&'static str, Counter)>,
    /// Local index of each tracked `attrs` key into `attrs`.
    attr_ids: FastMap<Box<str>, usize>,
    attrs: Vec<TrackedAttr>,
    /// The key that started the last row (see [`TrackedAttr::next`]).
    first_attr: Option<usize>,
    /// `attrs` rows parsed so far (row marks).
    attrs_rows: u64,
    admission: Arc<AttrKeyAdmission>,
    /// Reused buffers: entries of a row not tracked locally yet, the local id of each entry of a
    /// row, integer counts of a batch, value counts of a dictionary's entries.
    untracked: Vec<usize>,
    row_ids: Vec<Option<usize>>,
    integer_counts: FastMap<i64, u64>,
    dictionary_counts: Vec<u64>,
    texts: ScalarTexts,
}

/// One tracked `attrs` key of a worker.
struct TrackedAttr {
    key: Box<str>,
    counter: Counter,
    /// The `attrs` row that last counted this key, so a key repeated in a row counts once.
    row_mark: u64,
    /// The key that followed this one where it was last looked up: rows from one source list
    /// the same keys in the same order, so most keys are found by one comparison, no hashing.
    next: Option<usize>,
}

/// Renders numbers and booleans as `crate::udf::value_text` does, without allocating per value.
#[derive(Default)]
struct ScalarTexts {
    buffer: String,
    /// Rendered text of number tokens that are not plain integers (`1.0`, `2.5`); bounded.
    numbers: FastMap<Box<str>, Box<str>>,
}

/// [`ScalarTexts`] forgets its rendered numbers beyond this many.
const MAX_CACHED_NUMBERS: usize = 4096;

impl ScalarTexts {
    fn render(&mut self, value: &serde_json::Value) -> &str {
        self.buffer.clear();
        write!(self.buffer, "{value}").expect("writing to a String");
        &self.buffer
    }

    fn integer(&mut self, value: i64) -> &str {
        self.buffer.clear();
        write!(self.buffer, "{value}").expect("writing to a String");
        &self.buffer
    }

    /// The text of a number token from [`scan_flat_object`]. An integer of up to 18 digits is
    /// its own text (serde_json reads it as a `u64` or `i64` and writes the same digits), except
    /// `-0`, which serde_json reads as the float `-0.0`; others go through serde_json.
    fn number<'t>(&'t mut self, token: &'t str) -> Option<&'t str> {
        let digits = token.strip_prefix('-').unwrap_or(token);
        if digits.len() <= 18 && token != "-0" && digits.bytes().all(|b| b.is_ascii_digit()) {
            return Some(token);
        }
        if !self.numbers.contains_key(token) {
            let value: serde_json::Value = serde_json::from_str(token).ok()?;
            if self.numbers.len() >= MAX_CACHED_NUMBERS {
                self.numbers.clear();
            }
            self.numbers
                .insert(token.into(), value.to_string().into_boxed_str());
        }
        self.numbers.get(token).map(AsRef::as_ref)
    }
}

impl Discovery {
    fn new(max_cardinality: usize, admission: Arc<AttrKeyAdmission>) -> Self {
        let columns = STRING_COLUMNS
            .iter()
            .chain(SETTING_COLUMNS)
            .map(|name| (*name, Counter::default()))
            .collect();
        Self {
            max_cardinality,
            columns,
            attr_ids: FastMap::default(),
            attrs: Vec::new(),
            first_attr: None,
            attrs_rows: 0,
            admission,
            untracked: Vec::new(),
            row_ids: Vec::new(),
            integer_counts: FastMap::default(),
            dictionary_counts: Vec::new(),
            texts: ScalarTexts::default(),
        }
    }

    fn observe(&mut self, batch: &RecordBatch) -> Result<(), QueryError> {
        for index in 0..self.columns.len() {
            if let Some(column) = batch.column_by_name(self.columns[index].0) {
                self.observe_column(index, column)?;
            }
        }
        if let Some(column) = batch.column_by_name(ATTRS_COLUMN) {
            let converted;
            let strings = match Strings::new(column.as_ref()) {
                Some(strings) => strings,
                None => {
                    converted = as_utf8(column)?;
                    Strings::new(converted.as_ref()).expect("cast to Utf8")
                }
            };
            let mut entries = Vec::new();
            strings.for_each(|text| self.observe_attrs(text, &mut entries));
        }
        Ok(())
    }

    /// Counts one named column. Values are read in place (`Utf8`, `LargeUtf8`, `Utf8View`,
    /// dictionaries of those); integers and dictionary entries are counted per batch first and
    /// rendered once per distinct value; anything else is cast to `Utf8`.
    fn observe_column(&mut self, index: usize, column: &ArrayRef) -> Result<(), QueryError> {
        let max_cardinality = self.max_cardinality;
        let counter = &mut self.columns[index].1;
        if let Some(integers) = column.as_primitive_opt::<Int64Type>() {
            if counter.too_many {
                counter.total_rows += (integers.len() - integers.null_count()) as u64;
                return Ok(());
            }
            self.integer_counts.clear();
            for value in integers.iter().flatten() {
                *self.integer_counts.entry(value).or_default() += 1;
            }
            for (value, rows) in &self.integer_counts {
                counter.add(self.texts.integer(*value), *rows, max_cardinality);
            }
            return Ok(());
        }
        if let Some(strings) = Strings::new(column.as_ref()) {
            count_strings(counter, strings, max_cardinality);
            return Ok(());
        }
        if let Some(dictionary) = column.as_any_dictionary_opt()
            && let Some(values) = Strings::new(dictionary.values().as_ref())
        {
            if values.array().is_empty() {
                // no entries: every row is null
                return Ok(());
            }
            let nulls = column.logical_nulls();
            self.dictionary_counts.clear();
            self.dictionary_counts.resize(values.array().len(), 0);
            for (row, key) in dictionary.normalized_keys().into_iter().enumerate() {
                if nulls.as_ref().is_none_or(|nulls| nulls.is_valid(row)) {
                    self.dictionary_counts[key] += 1;
                }
            }
            for (key, rows) in self.dictionary_counts.iter().enumerate() {
                if *rows > 0
                    && let Some(value) = values.get(key)
                {
                    counter.add(value, *rows, max_cardinality);
                }
            }
            return Ok(());
        }
        let converted = as_utf8(column)?;
        let strings = Strings::new(converted.as_ref()).expect("cast to Utf8");
        count_strings(counter, strings, max_cardinality);
        Ok(())
    }

    /// Counts the top-level keys of one `attrs` value. `entries` is a buffer reused across the
    /// rows of a batch.
    fn observe_attrs<'a>(&mut self, text: &'a str, entries: &mut Vec<AttrEntry<'a>>) {
        entries.clear();
        // Rows whose attrs are not a JSON object contribute nothing (json_get returns NULL too).
        if !parse_attrs(text, entries) {
            return;
        }
        self.attrs_rows += 1;
        let row = self.attrs_rows;
        self.row_ids.clear();
        let mut previous: Option<usize> = None;
        for (key, _) in entries.iter() {
            let predicted = match previous {
                Some(id) => self.attrs[id].next,
                None => self.first_attr,
            };
            let id = match predicted {
                Some(id) if self.attrs[id].key.as_ref() == key.as_ref() => Some(id),
                _ => {
                    let found = self.attr_ids.get(key.as_ref()).copied();
                    if found.is_some() {
                        match previous {
                            Some(previous) => self.attrs[previous].next = found,
                            None => self.first_attr = found,
                        }
                    }
                    found
                }
            };
            self.row_ids.push(id);
            previous = id.or(previous);
        }
        self.untracked.clear();
        // Of a repeated key serde_json keeps the last value: walk the row backwards and count
        // each key at its first sighting.
        for (index, ((_, value), id)) in entries.iter().zip(&self.row_ids).enumerate().rev() {
            let Some(id) = *id else {
                self.untracked.push(index);
                continue;
            };
            let attr = &mut self.attrs[id];
            if attr.row_mark == row {
                continue;
            }
            attr.row_mark = row;
            count_attr(
                &mut attr.counter,
                value,
                &mut self.texts,
                self.max_cardinality,
            );
        }
        if !self.untracked.is_empty() {
            self.admit_and_count(entries);
        }
    }

    /// Tracks the keys of this row's `untracked` entries that the shared admission lets in,
    /// and counts their values.
    fn admit_and_count(&mut self, entries: &[AttrEntry<'_>]) {
        // A `serde_json::Map` is visited in key order, so when the cap is reached mid-row the
        // smallest new keys are the ones tracked. The sort is stable and `untracked` runs from
        // the row's end, so each key's first index there is its last value in the row.
        let mut untracked = std::mem::take(&mut self.untracked);
        untracked.sort_by(|&a, &b| entries[a].0.cmp(&entries[b].0));
        untracked.dedup_by(|later, earlier| entries[*later].0 == entries[*earlier].0);
        let admission = Arc::clone(&self.admission);
        let mut admitted = admission
            .keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for &index in &untracked {
            let (key, value) = &entries[index];
            if !admitted.contains(key.as_ref()) {
                if admitted.len() >= MAX_ATTR_KEYS {
                    continue;
                }
                admitted.insert(key.as_ref().into());
            }
            self.attr_ids.insert(key.as_ref().into(), self.attrs.len());
            let mut attr = TrackedAttr {
                key: key.as_ref().into(),
                counter: Counter::default(),
                row_mark: self.attrs_rows,
                next: None,
            };
            count_attr(
                &mut attr.counter,
                value,
                &mut self.texts,
                self.max_cardinality,
            );
            self.attrs.push(attr);
        }
        drop(admitted);
        debug_assert!(self.attr_ids.len() <= MAX_ATTR_KEYS);
        self.untracked = untracked;
    }

    /// Adds the counters of a worker that saw other rows.
    fn merge(&mut self, other: Discovery) {
        let max_cardinality = self.max_cardinality;
        for ((name, mine), (other_name, theirs)) in self.columns.iter_mut().zip(other.columns) {
            debug_assert_eq!(*name, other_name);
            mine.merge(theirs, max_cardinality);
        }
        for theirs in other.attrs {
            match self.attr_ids.get(&theirs.key) {
                Some(&id) => self.attrs[id]
                    .counter
                    .merge(theirs.counter, max_cardinality),
                None => {
                    self.attr_ids.insert(theirs.key.clone(), self.attrs.len());
                    self.attrs.push(TrackedAttr {
                        row_mark: 0,
                        next: None,
                        ..theirs
                    });
                }
            }
        }
        debug_assert!(self.attr_ids.len() <= MAX_ATTR_KEYS);
    }

    fn finish(self, max_values: usize) -> Vec<Dimension> {
        let columns = self.columns.into_iter().filter_map(|(name, counter)| {
            counter.into_dimension(name.to_string(), DimensionSource::Column, max_values)
        });
        let attrs = self.attrs.into_iter().filter_map(|attr| {
            attr.counter
                .into_dimension(attr.key.into_string(), DimensionSource::Attrs, max_values)
        });
        let mut dimensions: Vec<Dimension> = columns.chain(attrs).collect();
        dimensions.sort_by(|a, b| a.name.cmp(&b.name).then(a.source.cmp(&b.source)));
        dimensions
    }
}

fn count_strings(counter: &mut Counter, strings: Strings<'_>, max_cardinality: usize) {
    if counter.too_many {
        counter.total_rows += strings.non_null_count();
        return;
    }
    // Runs of one value (a constant or skewed column, a sorted one) cost a comparison per row
    // instead of a lookup; counts do not depend on the order they are added in.
    let mut run: Option<(&str, u64)> = None;
    strings.for_each(|value| match &mut run {
        Some((last, rows)) if *last == value => *rows += 1,
        _ => {
            if let Some((last, rows)) = run.replace((value, 1)) {
                counter.add(last, rows, max_cardinality);
            }
        }
    });
    if let Some((last, rows)) = run {
        counter.add(last, rows, max_cardinality);
    }
}

/// Counts one `attrs` value; its text is what `crate::udf::value_text` gives.
fn count_attr(
    counter: &mut Counter,
    value: &AttrValue<'_>,
    texts: &mut ScalarTexts,
    max_cardinality: usize,
) {
    if counter.too_many || counter.not_scalar {
        // Excluded already: keep the row count, skip rendering and lookups.
        match value {
            AttrValue::Null => {}
            AttrValue::NotScalar => counter.not_scalar = true,
            AttrValue::Text(_)
            | AttrValue::Scalar(_)
            | AttrValue::Bool(_)
            | AttrValue::Number(_) => counter.total_rows += 1,
        }
        return;
    }
    match value {
        AttrValue::Null => {}
        AttrValue::NotScalar => counter.not_scalar = true,
        AttrValue::Text(text) => counter.add(text, 1, max_cardinality),
        AttrValue::Scalar(scalar) => counter.add(texts.render(scalar), 1, max_cardinality),
        AttrValue::Bool(value) => {
            counter.add(if *value { "true" } else { "false" }, 1, max_cardinality)
        }
        AttrValue::Number(token) => match texts.number(token) {
            Some(text) => counter.add(text, 1, max_cardinality),
            None => debug_assert!(false, "{token} was checked to be a JSON number"),
        },
    }
}

/// A string column read in place, whichever of Arrow's string layouts DataFusion hands over.
#[derive(Clone, Copy)]
enum Strings<'a> {
    Utf8(&'a StringArray),
    LargeUtf8(&'a LargeStringArray),
    Utf8View(&'a StringViewArray),
}

impl<'a> Strings<'a> {
    fn new(array: &'a dyn Array) -> Option<Self> {
        match array.data_type() {
            DataType::Utf8 => Some(Strings::Utf8(array.as_string::<i32>())),
            DataType::LargeUtf8 => Some(Strings::LargeUtf8(array.as_string::<i64>())),
            DataType::Utf8View => Some(Strings::Utf8View(array.as_string_view())),
            _ => None,
        }
    }

    fn array(self) -> &'a dyn Array {
        match self {
            Strings::Utf8(array) => array,
            Strings::LargeUtf8(array) => array,
            Strings::Utf8View(array) => array,
        }
    }

    fn non_null_count(self) -> u64 {
        let array = self.array();
        (array.len() - array.null_count()) as u64
    }

    fn get(self, index: usize) -> Option<&'a str> {
        if self.array().is_null(index) {
            return None;
        }
        Some(match self {
            Strings::Utf8(array) => array.value(index),
            Strings::LargeUtf8(array) => array.value(index),
            Strings::Utf8View(array) => array.value(index),
        })
    }

    /// Calls `each` with every non-null value, in row order.
    fn for_each(self, each: impl FnMut(&'a str)) {
        match self {
            Strings::Utf8(array) => array.iter().flatten().for_each(each),
            Strings::LargeUtf8(array) => array.iter().flatten().for_each(each),
            Strings::Utf8View(array) => array.iter().flatten().for_each(each),
        }
    }
}

fn as_utf8(column: &ArrayRef) -> Result<ArrayRef, QueryError> {
    if column.data_type() == &DataType::Utf8 {
        return Ok(Arc::clone(column));
    }
    cast(column, &DataType::Utf8)
        .map_err(|error| QueryError::Internal(format!("reading a dimension column: {error}")))
}

/// The common case of [`parse_attrs`] without serde: an object whose keys and string values have
/// no escapes and whose values are strings, numbers without exponent, `true`, `false` or `null`.
/// True, with `entries` filled, only for text serde_json accepts as a `Map<String, Value>`;
/// false for anything else (other shapes, and every invalid text), which serde_json then decides.
fn scan_flat_object<'a>(text: &'a str, entries: &mut Vec<AttrEntry<'a>>) -> bool {
    let bytes = text.as_bytes();
    let mut at = skip_whitespace(bytes, 0);
    if bytes.get(at) != Some(&b'{') {
        return false;
    }
    at = skip_whitespace(bytes, at + 1);
    if bytes.get(at) == Some(&b'}') {
        return skip_whitespace(bytes, at + 1) == bytes.len();
    }
    loop {
        if bytes.get(at) != Some(&b'"') {
            return false;
        }
        let Some((key, next)) = plain_string(text, at + 1) else {
            return false;
        };
        at = skip_whitespace(bytes, next);
        if bytes.get(at) != Some(&b':') {
            return false;
        }
        at = skip_whitespace(bytes, at + 1);
        let rest = &bytes[at..];
        let (value, next) = match rest.first() {
            Some(b'"') => match plain_string(text, at + 1) {
                Some((value, next)) => (AttrValue::Text(Cow::Borrowed(value)), next),
                None => return false,
            },
            Some(b't') if rest.starts_with(b"true") => (AttrValue::Bool(true), at + 4),
            Some(b'f') if rest.starts_with(b"false") => (AttrValue::Bool(false), at + 5),
            Some(b'n') if rest.starts_with(b"null") => (AttrValue::Null, at + 4),
            Some(b'-' | b'0'..=b'9') => match number_end(bytes, at) {
                Some(end) => (AttrValue::Number(&text[at..end]), end),
                None => return false,
            },
            _ => return false,
        };
        entries.push((Cow::Borrowed(key), value));
        at = skip_whitespace(bytes, next);
        match bytes.get(at) {
            Some(b',') => at = skip_whitespace(bytes, at + 1),
            Some(b'}') => return skip_whitespace(bytes, at + 1) == bytes.len(),
            _ => return false,
        }
    }
}

/// The index of the first byte at or after `at` that is not JSON whitespace.
fn skip_whitespace(bytes: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\t' | b'\r') = bytes.get(at) {
        at += 1;
    }
    at
}

/// The string starting at byte `start` (after its opening quote) and the index after its closing
/// quote, if it ends before any backslash or control character (which serde_json rejects).
fn plain_string(text: &str, start: usize) -> Option<(&str, usize)> {
    let end = json_string_special(text.as_bytes(), start);
    (text.as_bytes().get(end) == Some(&b'"')).then(|| (&text[start..end], end + 1))
}

/// The end of the JSON number starting at `start`, if it is one serde_json reads without error:
/// `-`, then `0` or a non-zero digit and digits, then optionally `.` and digits. Exponents and
/// tokens of 300 characters or more (which could overflow an `f64`) are left to serde_json.
fn number_end(bytes: &[u8], start: usize) -> Option<usize> {
    let digits_from = |mut at: usize| {
        while bytes.get(at).is_some_and(u8::is_ascii_digit) {
            at += 1;
        }
        at
    };
    let mut at = start + usize::from(bytes[start] == b'-');
    at = match bytes.get(at)? {
        b'0' => at + 1,
        b'1'..=b'9' => digits_from(at + 1),
        _ => return None,
    };
    if bytes.get(at) == Some(&b'.') {
        let fraction_end = digits_from(at + 1);
        if fraction_end == at + 1 {
            return None;
        }
        at = fraction_end;
    }
    if matches!(bytes.get(at), Some(b'e' | b'E')) || at - start >= 300 {
        return None;
    }
    Some(at)
}

/// Keys starting with this are serde_json's private markers: `serde_json::Value` reads an object
/// whose first key is one specially (`{"$serde_json::private::RawValue": "5"}` is the number 5).
const SERDE_JSON_PRIVATE_KEY: &str = "$serde_json::private::";

/// Parses `text` as a JSON object into `entries` (row order, repeated keys kept). False, with
/// `entries` unspecified, exactly when `serde_json::from_str::<Map<String, Value>>(text)` fails.
/// Flat objects go through [`scan_flat_object`]; the rest through serde_json's deserializer,
/// which visits every value, nested ones included, with the same calls as for a `Map`; only the
/// values are not built. A row with a private-marker object inside is left to serde_json whole.
fn parse_attrs<'a>(text: &'a str, entries: &mut Vec<AttrEntry<'a>>) -> bool {
    if scan_flat_object(text, entries) {
        return true;
    }
    entries.clear();
    let unusual = Cell::new(false);
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let parsed = AttrsSeed {
        entries: &mut *entries,
        unusual: &unusual,
    }
    .deserialize(&mut deserializer)
    .and_then(|()| deserializer.end());
    if parsed.is_ok() {
        return true;
    }
    if !unusual.get() {
        return false;
    }
    entries.clear();
    let Ok(object) = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(text)
    else {
        return false;
    };
    entries.extend(object.into_iter().map(|(key, value)| {
        let value = match value {
            serde_json::Value::Null => AttrValue::Null,
            serde_json::Value::String(text) => AttrValue::Text(Cow::Owned(text)),
            serde_json::Value::Array(_) | serde_json::Value::Object(_) => AttrValue::NotScalar,
            scalar => AttrValue::Scalar(scalar),
        };
        (Cow::Owned(key), value)
    }));
    true
}

/// The top-level object of `attrs`: what `Map<String, Value>`'s `deserialize_map` visits.
struct AttrsSeed<'s, 'a> {
    entries: &'s mut Vec<AttrEntry<'a>>,
    unusual: &'s Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for AttrsSeed<'_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for AttrsSeed<'_, 'de> {
    type Value = ();

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let value = map.next_value_seed(ValueSeed {
                unusual: self.unusual,
            })?;
            self.entries.push((key, value));
        }
        Ok(())
    }
}

/// A top-level key, borrowed unless it had escapes.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_string(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a string")
    }

    fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(key))
    }

    fn visit_str<E>(self, key: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(key.to_owned()))
    }

    fn visit_string<E>(self, key: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(key))
    }
}

/// A top-level value: the calls `serde_json::Value`'s visitor handles, mapped to [`AttrValue`].
struct ValueSeed<'s> {
    unusual: &'s Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = AttrValue<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = AttrValue<'de>;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Self::Value, E> {
        Ok(AttrValue::Scalar(serde_json::Value::Bool(value)))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Self::Value, E> {
        Ok(AttrValue::Scalar(serde_json::Value::Number(value.into())))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Self::Value, E> {
        Ok(AttrValue::Scalar(serde_json::Value::Number(value.into())))
    }

    fn visit_i128<E: serde::de::Error>(self, value: i128) -> Result<Self::Value, E> {
        let number = number_from(serde::de::value::I128Deserializer::new(value))?;
        Ok(AttrValue::Scalar(serde_json::Value::Number(number)))
    }

    fn visit_u128<E: serde::de::Error>(self, value: u128) -> Result<Self::Value, E> {
        let number = number_from(serde::de::value::U128Deserializer::new(value))?;
        Ok(AttrValue::Scalar(serde_json::Value::Number(number)))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Self::Value, E> {
        Ok(
            serde_json::Number::from_f64(value).map_or(AttrValue::Null, |number| {
                AttrValue::Scalar(serde_json::Value::Number(number))
            }),
        )
    }

    fn visit_borrowed_str<E>(self, value: &'de str) -> Result<Self::Value, E> {
        Ok(AttrValue::Text(Cow::Borrowed(value)))
    }

    fn visit_str<E>(self, value: &str) -> Result<Self::Value, E> {
        Ok(AttrValue::Text(Cow::Owned(value.to_owned())))
    }

    fn visit_string<E>(self, value: String) -> Result<Self::Value, E> {
        Ok(AttrValue::Text(Cow::Owned(value)))
    }

    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(AttrValue::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(AttrValue::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        walk_seq(seq, self.unusual)?;
        Ok(AttrValue::NotScalar)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        walk_map(map, self.unusual)?;
        Ok(AttrValue::NotScalar)
    }
}

fn number_from<'de, D: Deserializer<'de>>(deserializer: D) -> Result<serde_json::Number, D::Error> {
    serde::Deserialize::deserialize(deserializer)
}

/// Elements of an array, visited as `serde_json::Value` visits them but not kept.
fn walk_seq<'de, A: SeqAccess<'de>>(mut seq: A, unusual: &Cell<bool>) -> Result<(), A::Error> {
    while seq.next_element_seed(NestedSeed { unusual })?.is_some() {}
    Ok(())
}

/// Entries of a nested object, visited as `serde_json::Value` visits them but not kept. Its first
/// key is classified by `Value`; a private marker there marks the row `unusual` and fails it.
fn walk_map<'de, A: MapAccess<'de>>(mut map: A, unusual: &Cell<bool>) -> Result<(), A::Error> {
    let Some(first_is_private) = map.next_key_seed(NestedKeySeed)? else {
        return Ok(());
    };
    if first_is_private {
        unusual.set(true);
        return Err(A::Error::custom("an object with a serde_json marker key"));
    }
    map.next_value_seed(NestedSeed { unusual })?;
    while map.next_key_seed(NestedKeySeed)?.is_some() {
        map.next_value_seed(NestedSeed { unusual })?;
    }
    Ok(())
}

/// A key inside a nested value: only whether it is a private marker matters.
struct NestedKeySeed;

impl<'de> DeserializeSeed<'de> for NestedKeySeed {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for NestedKeySeed {
    type Value = bool;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a string")
    }

    fn visit_str<E>(self, key: &str) -> Result<bool, E> {
        Ok(key.starts_with(SERDE_JSON_PRIVATE_KEY))
    }
}

/// A value inside an array or object, checked like `serde_json::Value` checks it, not kept.
struct NestedSeed<'s> {
    unusual: &'s Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for NestedSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NestedSeed<'_> {
    type Value = ();

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_i128<E: serde::de::Error>(self, value: i128) -> Result<(), E> {
        number_from(serde::de::value::I128Deserializer::new(value)).map(drop)
    }

    fn visit_u128<E: serde::de::Error>(self, value: u128) -> Result<(), E> {
        number_from(serde::de::value::U128Deserializer::new(value)).map(drop)
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        walk_seq(seq, self.unusual)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        walk_map(map, self.unusual)
    }
}

fn ts_literal(ns: i64) -> datafusion::prelude::Expr {
    lit(ScalarValue::TimestampNanosecond(
        Some(ns),
        Some("UTC".into()),
    ))
}

pub(crate) async fn discover_dimensions(
    context: &SessionContext,
    range: TimeRange,
    max_cardinality: usize,
    max_values: usize,
) -> Result<Vec<Dimension>, QueryError> {
    let mut frame = context.table(Table::Requests.name()).await?;
    if let Some(since) = range.since_ns {
        frame = frame.filter(col(TS_COLUMN).gt_eq(ts_literal(since)))?;
    }
    if let Some(until) = range.until_ns {
        frame = frame.filter(col(TS_COLUMN).lt(ts_literal(until)))?;
    }
    let columns: Vec<&str> = STRING_COLUMNS
        .iter()
        .chain(SETTING_COLUMNS)
        .copied()
        .chain([ATTRS_COLUMN])
        .collect();
    let streams = frame
        .select_columns(&columns)?
        .execute_stream_partitioned()
        .await?;
    let discovery = discover_partitions(streams, max_cardinality).await?;
    Ok(discovery.finish(max_values))
}

/// Counts every partition's stream on its own worker and merges the workers' counters.
async fn discover_partitions(
    streams: Vec<SendableRecordBatchStream>,
    max_cardinality: usize,
) -> Result<Discovery, QueryError> {
    let admission = Arc::new(AttrKeyAdmission::default());
    let mut workers = tokio::task::JoinSet::new();
    for stream in streams {
        let discovery = Discovery::new(max_cardinality, Arc::clone(&admission));
        workers.spawn(discover_partition(stream, discovery));
    }
    let mut merged = Discovery::new(max_cardinality, admission);
    while let Some(worker) = workers.join_next().await {
        merged.merge(worker.map_err(worker_failed)??);
    }
    Ok(merged)
}

async fn discover_partition(
    mut stream: SendableRecordBatchStream,
    discovery: Discovery,
) -> Result<Discovery, QueryError> {
    // Counting a batch takes milliseconds of CPU, so it runs on a blocking thread, while this
    // task decodes the partition's next batch.
    let mut counting = tokio::task::spawn_blocking(move || Ok(discovery));
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        let mut discovery = counting.await.map_err(worker_failed)??;
        counting = tokio::task::spawn_blocking(move || {
            discovery.observe(&batch)?;
            Ok::<_, QueryError>(discovery)
        });
    }
    counting.await.map_err(worker_failed)?
}

fn worker_failed(error: tokio::task::JoinError) -> QueryError {
    QueryError::Internal(format!("dimension discovery worker failed: {error}"))
}

/// The implementation before the parallel, allocation-free one, kept verbatim as the reference
/// the tests compare against: one pass over the batches in order, `serde_json::Map` per row.
#[cfg(test)]
mod reference {
    use std::collections::HashMap;

    use datafusion::arrow::array::{Array, Int64Array, RecordBatch, StringArray};

    use super::{
        ATTRS_COLUMN, Dimension, DimensionSource, ID_MIN_ROWS, MAX_ATTR_KEYS, SETTING_COLUMNS,
        STRING_COLUMNS, as_utf8,
    };
    use crate::error::QueryError;
    use crate::udf::value_text;

    #[derive(Debug, Default)]
    struct Counter {
        counts: HashMap<String, u64>,
        total_rows: u64,
        too_many: bool,
        not_scalar: bool,
    }

    impl Counter {
        fn add(&mut self, value: &str, max_cardinality: usize) {
            self.total_rows += 1;
            if self.too_many {
                return;
            }
            if let Some(count) = self.counts.get_mut(value) {
                *count += 1;
                return;
            }
            if self.counts.len() >= max_cardinality {
                self.too_many = true;
                self.counts = HashMap::new();
                return;
            }
            self.counts.insert(value.to_string(), 1);
        }

        fn into_dimension(
            self,
            name: String,
            source: DimensionSource,
            max_values: usize,
        ) -> Option<Dimension> {
            let distinct_values = self.counts.len() as u64;
            let is_id = distinct_values == self.total_rows && self.total_rows > ID_MIN_ROWS;
            if self.too_many || self.not_scalar || self.total_rows == 0 || is_id {
                return None;
            }
            let mut values: Vec<(String, u64)> = self.counts.into_iter().collect();
            values.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            values.truncate(max_values);
            Some(Dimension {
                name,
                source,
                distinct_values,
                total_rows: self.total_rows,
                values,
            })
        }
    }

    pub(super) struct Discovery {
        max_cardinality: usize,
        columns: Vec<(&'static str, Counter)>,
        attrs: HashMap<String, Counter>,
    }

    impl Discovery {
        pub(super) fn new(max_cardinality: usize) -> Self {
            let columns = STRING_COLUMNS
                .iter()
                .chain(SETTING_COLUMNS)
                .map(|name| (*name, Counter::default()))
                .collect();
            Self {
                max_cardinality,
                columns,
                attrs: HashMap::new(),
            }
        }

        pub(super) fn observe(&mut self, batch: &RecordBatch) -> Result<(), QueryError> {
            let max_cardinality = self.max_cardinality;
            for (name, counter) in &mut self.columns {
                let Some(column) = batch.column_by_name(name) else {
                    continue;
                };
                if let Some(integers) = column.as_any().downcast_ref::<Int64Array>() {
                    for value in integers.iter().flatten() {
                        counter.add(&value.to_string(), max_cardinality);
                    }
                } else {
                    let strings = as_utf8(column)?;
                    let strings = strings
                        .as_any()
                        .downcast_ref::<StringArray>()
                        .expect("utf8");
                    for value in strings.iter().flatten() {
                        counter.add(value, max_cardinality);
                    }
                }
            }
            if let Some(column) = batch.column_by_name(ATTRS_COLUMN) {
                let strings = as_utf8(column)?;
                let strings = strings
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .expect("utf8");
                for text in strings.iter().flatten() {
                    self.observe_attrs(text);
                }
            }
            Ok(())
        }

        pub(super) fn observe_attrs(&mut self, text: &str) {
            let Ok(object) =
                serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(text)
            else {
                return;
            };
            for (key, value) in object {
                if !self.attrs.contains_key(&key) && self.attrs.len() >= MAX_ATTR_KEYS {
                    continue;
                }
                let counter = self.attrs.entry(key).or_default();
                match &value {
                    serde_json::Value::Array(_) | serde_json::Value::Object(_) => {
                        counter.not_scalar = true
                    }
                    scalar => {
                        if let Some(text) = value_text(scalar) {
                            counter.add(&text, self.max_cardinality);
                        }
                    }
                }
            }
        }

        pub(super) fn finish(self, max_values: usize) -> Vec<Dimension> {
            let columns = self.columns.into_iter().filter_map(|(name, counter)| {
                counter.into_dimension(name.to_string(), DimensionSource::Column, max_values)
            });
            let attrs = self.attrs.into_iter().filter_map(|(key, counter)| {
                counter.into_dimension(key, DimensionSource::Attrs, max_values)
            });
            let mut dimensions: Vec<Dimension> = columns.chain(attrs).collect();
            dimensions.sort_by(|a, b| a.name.cmp(&b.name).then(a.source.cmp(&b.source)));
            dimensions
        }
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{
        DictionaryArray, Float64Array, Int16Array, Int32Array, Int64Array, TimestampNanosecondArray,
    };
    use datafusion::arrow::compute::filter_record_batch;
    use datafusion::arrow::datatypes::{Field, Int16Type, Int32Type, Schema, SchemaRef, TimeUnit};
    use datafusion::datasource::MemTable;
    use datafusion::physical_plan::stream::RecordBatchStreamAdapter;

    use super::*;

    #[test]
    fn counter_excludes_ids_and_high_cardinality() {
        let mut low = Counter::default();
        for i in 0..100 {
            low.add(if i % 3 == 0 { "a" } else { "b" }, 1, 10);
        }
        let dimension = low
            .into_dimension("x".into(), DimensionSource::Column, 1)
            .unwrap();
        assert_eq!(dimension.distinct_values, 2);
        assert_eq!(dimension.total_rows, 100);
        assert_eq!(dimension.values, vec![("b".to_string(), 66)]);

        let mut ids = Counter::default();
        for i in 0..21 {
            ids.add(&i.to_string(), 1, 100);
        }
        assert!(
            ids.into_dimension("id".into(), DimensionSource::Attrs, 5)
                .is_none()
        );

        let mut few_ids = Counter::default();
        for i in 0..20 {
            few_ids.add(&i.to_string(), 1, 100);
        }
        assert!(
            few_ids
                .into_dimension("id".into(), DimensionSource::Attrs, 5)
                .is_some()
        );

        let mut wide = Counter::default();
        for i in 0..50 {
            wide.add(&(i % 11).to_string(), 1, 10);
        }
        assert!(wide.too_many);
        assert_eq!(wide.total_rows, 50);
        assert!(
            wide.into_dimension("w".into(), DimensionSource::Column, 5)
                .is_none()
        );
    }

    #[test]
    fn merged_counters_cut_off_at_the_union() {
        // 6 distinct values in each half, 11 together: within a limit of 10 apart, over it merged
        let mut first = Counter::default();
        let mut second = Counter::default();
        for i in 0..60 {
            first.add(&(i % 6).to_string(), 1, 10);
            second.add(&(5 + i % 6).to_string(), 2, 10);
        }
        assert!(!first.too_many && !second.too_many);
        first.merge(second, 10);
        assert!(first.too_many);
        assert_eq!(first.total_rows, 180);

        let mut first = Counter::default();
        let mut second = Counter::default();
        first.add("a", 3, 2);
        second.add("b", 1, 2);
        second.add("a", 1, 2);
        first.merge(second, 2);
        let dimension = first
            .into_dimension("m".into(), DimensionSource::Column, 5)
            .unwrap();
        assert_eq!(
            dimension.values,
            vec![("a".to_string(), 4), ("b".to_string(), 1)]
        );

        let mut too_many = Counter::default();
        too_many.add("a", 1, 0);
        let mut fine = Counter::default();
        fine.add("a", 1, 1);
        fine.merge(too_many, 1);
        assert!(fine.too_many);
        assert_eq!(fine.total_rows, 2);
    }

    #[test]
    fn attrs_with_structured_values_are_not_dimensions() {
        let mut discovery = Discovery::new(10, Arc::default());
        for text in [r#"{"k":"v","list":[1],"n":2,"nothing":null}"#, "not json"] {
            discovery.observe_attrs(text, &mut Vec::new());
        }
        let names: Vec<String> = discovery
            .finish(5)
            .into_iter()
            .map(|dimension| dimension.name)
            .collect();
        assert_eq!(names, vec!["k".to_string(), "n".to_string()]);
    }

    /// `parse_attrs` accepts exactly what `serde_json::Map` accepts and yields the same values.
    #[test]
    fn attrs_parse_like_a_serde_json_map() {
        let deep = format!(r#"{{"deep":{}{}}}"#, "[".repeat(200), "]".repeat(200));
        let texts = [
            r#"{"a":1,"b":1.0,"c":2.5e3,"d":-0,"e":-0.0,"f":1E2,"g":18446744073709551616}"#,
            r#"{"big":12345678901234567890,"neg":-9223372036854775808,"small":1.5E-7}"#,
            r#"{"s":"x\ny","u":"\u00e9","k\"q":true,"\u0041":null,"A":false}"#,
            r#"{"dup":1,"dup":"two","other":[],"dup":null}"#,
            r#"  {"ws" : [ 1 , { "a" : { } } ] }  "#,
            r#"{"raw":{"$serde_json::private::RawValue":"5"}}"#,
            r#"{"raw":{"\u0024serde_json::private::RawValue":"[1]"}}"#,
            r#"{"raw":[{"$serde_json::private::RawValue":"true"}]}"#,
            r#"{"raw":{"$serde_json::private::RawValue":5}}"#,
            r#"{"raw":{"$serde_json::private::RawValue":"5","more":1}}"#,
            r#"{"$serde_json::private::RawValue":"top level keys are plain"}"#,
            r#"{"a":"\ud800"}"#,
            r#"{"a":1e400}"#,
            r#"{"a":"\x"}"#,
            r#"{"a":1} x"#,
            r#"{"a":1,}"#,
            r#"{"a"}"#,
            "{\"a\":1}\n",
            "{",
            "",
            "[1]",
            "3",
            "\"s\"",
            "null",
            &deep,
            "{}",
            " { } ",
            "{\t\"a\"\r\n:\n1\t}",
            r#"{"a":1}}"#,
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":-}"#,
            r#"{"a":-0}"#,
            r#"{"a":-0.0}"#,
            r#"{"a":0.50}"#,
            r#"{"a":-12.250}"#,
            r#"{"a":.5}"#,
            r#"{"a":+1}"#,
            r#"{"a":123456789012345678,"b":-123456789012345678}"#,
            r#"{"a":1234567890123456789,"b":-1234567890123456789}"#,
            r#"{"a":99999999999999999999,"b":-99999999999999999999}"#,
            r#"{"a":tru}"#,
            r#"{"a":truex}"#,
            r#"{"a":nul,"b":1}"#,
            r#"{"a":falsy}"#,
            "{\"a\":\"tab\there\"}",
            "{\"a\":\"\u{7f}\u{80}é\"}",
            r#"{"a":"12345678","b":"1234567","c":"123456789","":""}"#,
            r#"{"a" "b"}"#,
            r#"{"a":1 "b":2}"#,
            r#"{"a":1,,"b":2}"#,
            &format!(r#"{{"a":{}}}"#, "9".repeat(310)),
            &format!(r#"{{"a":{}}}"#, "9".repeat(299)),
            &format!(r#"{{"a":0.{}1}}"#, "0".repeat(400)),
            &format!(r#"{{"a":1{}.5}}"#, "0".repeat(320)),
        ];
        for text in texts {
            let mut entries = Vec::new();
            let parsed = parse_attrs(text, &mut entries);
            let map = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(text);
            assert_eq!(parsed, map.is_ok(), "{text}");
            let Ok(map) = map else { continue };
            // last value per key, rendered as discovery renders it
            let mut rendered: std::collections::BTreeMap<String, Option<String>> =
                Default::default();
            for (key, value) in &entries {
                let text = match value {
                    AttrValue::Null => None,
                    AttrValue::NotScalar => Some("<not scalar>".to_string()),
                    AttrValue::Text(text) => Some(text.to_string()),
                    AttrValue::Scalar(scalar) => Some(scalar.to_string()),
                    AttrValue::Bool(value) => Some(value.to_string()),
                    AttrValue::Number(token) => {
                        Some(ScalarTexts::default().number(token).unwrap().to_string())
                    }
                };
                rendered.insert(key.to_string(), text);
            }
            let expected: std::collections::BTreeMap<String, Option<String>> = map
                .iter()
                .map(|(key, value)| {
                    let text = match value {
                        serde_json::Value::Array(_) | serde_json::Value::Object(_) => {
                            Some("<not scalar>".to_string())
                        }
                        scalar => crate::udf::value_text(scalar),
                    };
                    (key.clone(), text)
                })
                .collect();
            assert_eq!(rendered, expected, "{text}");
        }
    }

    /// splitmix64: seeded and dependency-free.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }

        fn percent(&mut self, percent: usize) -> bool {
            self.below(100) < percent
        }

        fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
            &items[self.below(items.len())]
        }
    }

    /// How one named column's values are drawn in a test case.
    #[derive(Debug, Clone, Copy)]
    struct Shape {
        /// Distinct values per partition; 0: a new value every row (an id).
        cardinality: usize,
        null_percent: usize,
        /// Each partition draws from its own values, so the union has `partitions ×` as many.
        per_partition: bool,
    }

    impl Shape {
        fn random(rng: &mut Rng) -> Shape {
            Shape {
                cardinality: *rng.pick(&[0, 1, 2, 3, 5, 9, 12, 40, 300]),
                null_percent: *rng.pick(&[0, 0, 10, 50, 100]),
                per_partition: rng.percent(40),
            }
        }

        fn value(self, rng: &mut Rng, partition: usize, row: usize) -> Option<i64> {
            if rng.percent(self.null_percent) {
                return None;
            }
            if self.cardinality == 0 {
                return Some((partition * 100_000 + row) as i64);
            }
            let base = if self.per_partition {
                partition * self.cardinality
            } else {
                0
            };
            Some((base + rng.below(self.cardinality)) as i64)
        }
    }

    fn text_of(value: i64) -> String {
        match value {
            0 => String::new(),
            1 => "é ü".to_string(),
            other => format!("v{other}"),
        }
    }

    /// A string column in one of the layouts DataFusion may hand over.
    fn string_column(values: &[Option<String>], layout: usize) -> (ArrayRef, DataType) {
        let strs = || values.iter().map(|value| value.as_deref());
        match layout {
            0 => (Arc::new(StringArray::from_iter(strs())), DataType::Utf8),
            1 => (
                Arc::new(LargeStringArray::from_iter(strs())),
                DataType::LargeUtf8,
            ),
            2 => (
                Arc::new(StringViewArray::from_iter(strs())),
                DataType::Utf8View,
            ),
            3 => {
                let array: DictionaryArray<Int32Type> = strs().collect();
                let data_type = array.data_type().clone();
                (Arc::new(array), data_type)
            }
            _ => {
                // Utf8View values with a null entry that some null rows point at
                let mut dictionary: Vec<Option<&str>> = vec![None];
                let mut keys = Vec::new();
                for (row, value) in strs().enumerate() {
                    let key = match value {
                        None if row % 2 == 0 => None,
                        None => Some(0),
                        Some(value) => {
                            Some(match dictionary.iter().position(|v| *v == Some(value)) {
                                Some(position) => position as i16,
                                None => {
                                    dictionary.push(Some(value));
                                    (dictionary.len() - 1) as i16
                                }
                            })
                        }
                    };
                    keys.push(key);
                }
                let array = DictionaryArray::<Int16Type>::try_new(
                    Int16Array::from(keys),
                    Arc::new(StringViewArray::from(dictionary)),
                )
                .unwrap();
                let data_type = array.data_type().clone();
                (Arc::new(array), data_type)
            }
        }
    }

    fn setting_column(values: &[Option<i64>], layout: usize) -> (ArrayRef, DataType) {
        match layout {
            0 | 1 => (Arc::new(Int64Array::from(values.to_vec())), DataType::Int64),
            2 => (
                Arc::new(Int32Array::from_iter(
                    values.iter().map(|value| value.map(|v| v as i32)),
                )),
                DataType::Int32,
            ),
            3 => (
                Arc::new(Float64Array::from_iter(
                    values.iter().map(|value| value.map(|v| v as f64 / 4.0)),
                )),
                DataType::Float64,
            ),
            _ => {
                let texts: Vec<Option<String>> = values
                    .iter()
                    .map(|value| value.map(|v| v.to_string()))
                    .collect();
                string_column(&texts, 0)
            }
        }
    }

    /// JSON texts of `attrs` keys (escapes included) and the values each may take.
    const ATTR_KEYS: &[(&str, &[&str])] = &[
        ("model", &[r#""llama""#, r#""mistral""#, r#""q\"w""#]),
        (
            "llm.lora.adapters",
            &[r#""a""#, r#""b""#, r#""a,b""#, "null"],
        ),
        ("sampled", &["true", "false"]),
        (
            "n",
            &[
                "1",
                "1.0",
                "2.5e3",
                "2500",
                "-0",
                "-0.0",
                "0.1",
                "1e2",
                "1E2",
                "12345678901234567890",
                "18446744073709551616",
                "-9223372036854775808",
                "1.5E-7",
                "3",
            ],
        ),
        (
            "f",
            &["0.1", "0.30000000000000004", "1e-10", "123456789.123"],
        ),
        (
            "nested",
            &["{}", r#"{"a":{"b":[1.0,null]}}"#, r#""scalar""#],
        ),
        ("list", &["[]", r#"[1,"x",[null]]"#]),
        ("nothing", &["null"]),
        (r#"esc\"q"#, &[r#""x\ny""#, r#""\u00e9""#, r#""é""#]),
        (r"\u0041", &["1", "2"]),
        ("A", &["2", "3"]),
        (r"caf\u00e9", &[r#""x""#, r#""y""#]),
        ("café", &[r#""y""#, r#""z""#]),
        ("$serde_json::private::RawValue", &[r#""5""#, "5"]),
        (
            "raw",
            &[
                r#"{"$serde_json::private::RawValue":"5"}"#,
                r#"{"\u0024serde_json::private::RawValue":"7"}"#,
                "5",
                r#""5""#,
            ],
        ),
        ("emptys", &[r#""""#, r#"" ""#]),
    ];

    /// Values that make the whole row invalid for serde_json.
    const BAD_VALUES: &[&str] = &[
        r#""\ud800""#,
        "1e400",
        r#""\x""#,
        r#"{"$serde_json::private::RawValue":5}"#,
        r#"{"$serde_json::private::RawValue":"5","more":1}"#,
    ];

    const BAD_ROWS: &[&str] = &[
        "[1]",
        "3",
        "\"s\"",
        "null",
        "not json",
        r#"{"a":1} x"#,
        r#"{"a":1,}"#,
        "",
        r#"  {"a": 1}  "#,
        "{\"a\":1}\n",
        "{",
        r#"{"a"}"#,
    ];

    fn attrs_text(rng: &mut Rng, partition: usize, row: usize, seed: u64) -> Option<String> {
        if rng.percent(8) {
            return None;
        }
        if rng.percent(5) {
            return Some(rng.pick(BAD_ROWS).to_string());
        }
        let mut entries: Vec<(String, String)> = Vec::new();
        for (key, values) in ATTR_KEYS {
            if rng.percent(60) {
                entries.push((key.to_string(), rng.pick(values).to_string()));
            }
        }
        if rng.percent(70) {
            entries.push(("uuid".into(), format!(r#""u-{seed}-{partition}-{row}""#)));
        }
        if rng.percent(70) {
            entries.push(("part".into(), format!(r#""p{partition}-{}""#, rng.below(4))));
        }
        if rng.percent(2) {
            entries.push(("bad".into(), rng.pick(BAD_VALUES).to_string()));
        }
        if rng.percent(1) {
            entries.push((
                "deep".into(),
                format!("{}{}", "[".repeat(200), "]".repeat(200)),
            ));
        }
        // shuffle, then sometimes repeat a key with another value
        for index in (1..entries.len()).rev() {
            let other = rng.below(index + 1);
            entries.swap(index, other);
        }
        if !entries.is_empty() && rng.percent(15) {
            let (key, _) = entries[rng.below(entries.len())].clone();
            let values = ATTR_KEYS
                .iter()
                .find(|(k, _)| *k == key)
                .map_or(&["0"][..], |(_, values)| values);
            let position = rng.below(entries.len() + 1);
            entries.insert(position, (key, rng.pick(values).to_string()));
        }
        let space = if rng.percent(20) { " " } else { "" };
        let body: Vec<String> = entries
            .iter()
            .map(|(key, value)| format!(r#""{key}"{space}:{space}{value}"#))
            .collect();
        Some(format!("{{{space}{}{space}}}", body.join(",")))
    }

    /// `partitions` of random batches; each partition picks its own layouts and may lack columns.
    fn random_partitions(seed: u64, partitions: usize) -> Vec<Vec<RecordBatch>> {
        let mut rng = Rng(seed);
        let shapes: Vec<Shape> = STRING_COLUMNS
            .iter()
            .chain(SETTING_COLUMNS)
            .map(|_| Shape::random(&mut rng))
            .collect();
        (0..partitions)
            .map(|partition| {
                let string_layouts: Vec<Option<usize>> = (0..STRING_COLUMNS.len())
                    .map(|_| (!rng.percent(5)).then(|| rng.below(5)))
                    .collect();
                let setting_layouts: Vec<Option<usize>> = (0..SETTING_COLUMNS.len())
                    .map(|_| (!rng.percent(5)).then(|| rng.below(5)))
                    .collect();
                let attrs_layout = (!rng.percent(5)).then(|| rng.below(4));
                let mut row = 0;
                (0..rng.below(4))
                    .map(|_| {
                        let rows = *rng.pick(&[0, 1, 7, 60, 250]);
                        let mut fields = Vec::new();
                        let mut columns = Vec::new();
                        for (index, name) in STRING_COLUMNS.iter().enumerate() {
                            let values: Vec<Option<String>> = (0..rows)
                                .map(|offset| {
                                    shapes[index]
                                        .value(&mut rng, partition, row + offset)
                                        .map(text_of)
                                })
                                .collect();
                            if let Some(layout) = string_layouts[index] {
                                let (column, data_type) = string_column(&values, layout);
                                fields.push(Field::new(*name, data_type, true));
                                columns.push(column);
                            }
                        }
                        for (index, name) in SETTING_COLUMNS.iter().enumerate() {
                            let shape = shapes[STRING_COLUMNS.len() + index];
                            let values: Vec<Option<i64>> = (0..rows)
                                .map(|offset| {
                                    let value = shape.value(&mut rng, partition, row + offset);
                                    value.map(|v| if v % 7 == 3 { -v } else { v })
                                })
                                .collect();
                            if let Some(layout) = setting_layouts[index] {
                                let (column, data_type) = setting_column(&values, layout);
                                fields.push(Field::new(*name, data_type, true));
                                columns.push(column);
                            }
                        }
                        let texts: Vec<Option<String>> = (0..rows)
                            .map(|offset| attrs_text(&mut rng, partition, row + offset, seed))
                            .collect();
                        if let Some(layout) = attrs_layout {
                            let (column, data_type) = string_column(&texts, layout);
                            fields.push(Field::new(ATTRS_COLUMN, data_type, true));
                            columns.push(column);
                        }
                        row += rows;
                        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
                    })
                    .collect()
            })
            .collect()
    }

    fn streams(partitions: &[Vec<RecordBatch>]) -> Vec<SendableRecordBatchStream> {
        partitions
            .iter()
            .map(|batches| {
                let schema: SchemaRef = batches
                    .first()
                    .map_or_else(|| Arc::new(Schema::empty()), RecordBatch::schema);
                let batches = batches.clone().into_iter().map(Ok);
                Box::pin(RecordBatchStreamAdapter::new(
                    schema,
                    futures::stream::iter(batches),
                )) as SendableRecordBatchStream
            })
            .collect()
    }

    fn reference_dimensions(
        partitions: &[Vec<RecordBatch>],
        max_cardinality: usize,
        max_values: usize,
    ) -> Vec<Dimension> {
        let mut reference = reference::Discovery::new(max_cardinality);
        for batch in partitions.iter().flatten() {
            reference.observe(batch).unwrap();
        }
        reference.finish(max_values)
    }

    #[tokio::test]
    async fn partitioned_discovery_equals_the_reference_on_random_batches() {
        let mut listed = (0, 0);
        for seed in 0..40_u64 {
            let partitions = random_partitions(seed, 1 + seed as usize % 5);
            for (max_cardinality, max_values) in
                [(0, 5), (1, 5), (2, 1), (5, 3), (10, 20), (1000, 100)]
            {
                let expected = reference_dimensions(&partitions, max_cardinality, max_values);
                let actual = discover_partitions(streams(&partitions), max_cardinality)
                    .await
                    .unwrap()
                    .finish(max_values);
                assert_eq!(
                    actual, expected,
                    "seed {seed}, max_cardinality {max_cardinality}"
                );
                if max_cardinality == 1000 {
                    for dimension in &expected {
                        match dimension.source {
                            DimensionSource::Column => listed.0 += 1,
                            DimensionSource::Attrs => listed.1 += 1,
                        }
                    }
                }
            }
        }
        // the comparison is not vacuous
        assert!(listed.0 > 40 && listed.1 > 40, "{listed:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn discovery_through_a_partitioned_table_equals_the_reference() {
        let mut fields = vec![Field::new(
            TS_COLUMN,
            DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
            false,
        )];
        fields.extend(
            STRING_COLUMNS
                .iter()
                .map(|name| Field::new(*name, DataType::Utf8View, true)),
        );
        fields.extend(
            SETTING_COLUMNS
                .iter()
                .map(|name| Field::new(*name, DataType::Int64, true)),
        );
        fields.push(Field::new(ATTRS_COLUMN, DataType::Utf8, true));
        let schema = Arc::new(Schema::new(fields));

        let mut rng = Rng(7);
        let shapes: Vec<Shape> = (0..STRING_COLUMNS.len() + SETTING_COLUMNS.len())
            .map(|_| Shape::random(&mut rng))
            .collect();
        let mut ts = 0_i64;
        let partitions: Vec<Vec<RecordBatch>> = (0..4)
            .map(|partition| {
                (0..3)
                    .map(|_| {
                        let rows = 200;
                        let mut columns: Vec<ArrayRef> = vec![Arc::new(
                            TimestampNanosecondArray::from_iter_values(ts..ts + rows as i64)
                                .with_timezone("UTC"),
                        )];
                        ts += rows as i64;
                        for shape in &shapes[..STRING_COLUMNS.len()] {
                            let values: Vec<Option<String>> = (0..rows)
                                .map(|row| shape.value(&mut rng, partition, row).map(text_of))
                                .collect();
                            columns.push(string_column(&values, 2).0);
                        }
                        for shape in &shapes[STRING_COLUMNS.len()..] {
                            let values: Vec<Option<i64>> = (0..rows)
                                .map(|row| shape.value(&mut rng, partition, row))
                                .collect();
                            columns.push(setting_column(&values, 0).0);
                        }
                        let texts: Vec<Option<String>> = (0..rows)
                            .map(|row| attrs_text(&mut rng, partition, row, 7))
                            .collect();
                        columns.push(string_column(&texts, 0).0);
                        RecordBatch::try_new(Arc::clone(&schema), columns).unwrap()
                    })
                    .collect()
            })
            .collect();
        let context = SessionContext::new();
        let table = MemTable::try_new(Arc::clone(&schema), partitions.clone()).unwrap();
        context
            .register_table(Table::Requests.name(), Arc::new(table))
            .unwrap();

        for range in [
            TimeRange::ALL,
            TimeRange {
                since_ns: Some(500),
                until_ns: Some(1900),
            },
        ] {
            let in_range: Vec<Vec<RecordBatch>> = partitions
                .iter()
                .map(|batches| {
                    batches
                        .iter()
                        .map(|batch| {
                            let ts = batch
                                .column(0)
                                .as_primitive::<datafusion::arrow::datatypes::TimestampNanosecondType>();
                            let keep = ts
                                .iter()
                                .map(|ts| {
                                    let ts = ts.unwrap();
                                    Some(
                                        range.since_ns.is_none_or(|since| ts >= since)
                                            && range.until_ns.is_none_or(|until| ts < until),
                                    )
                                })
                                .collect();
                            filter_record_batch(batch, &keep).unwrap()
                        })
                        .collect()
                })
                .collect();
            for max_cardinality in [3, 12, 1000] {
                let expected = reference_dimensions(&in_range, max_cardinality, 10);
                let actual = discover_dimensions(&context, range, max_cardinality, 10)
                    .await
                    .unwrap();
                assert_eq!(actual, expected, "{range:?} {max_cardinality}");
                assert!(!actual.is_empty());
            }
        }
    }

    fn key_cap_partitions(partitions: usize) -> Vec<Vec<RecordBatch>> {
        let mut rng = Rng(99);
        (0..partitions)
            .map(|_| {
                (0..2)
                    .map(|_| {
                        let texts: Vec<Option<String>> = (0..150)
                            .map(|_| {
                                let body: Vec<String> = (0..40)
                                    .map(|_| {
                                        let key = rng.below(6000);
                                        let value = if rng.percent(10) {
                                            "null".to_string()
                                        } else {
                                            format!(r#""{}""#, rng.below(3))
                                        };
                                        format!(r#""k{key}":{value}"#)
                                    })
                                    .collect();
                                Some(format!("{{{}}}", body.join(",")))
                            })
                            .collect();
                        let (column, data_type) = string_column(&texts, 0);
                        let schema = Schema::new(vec![Field::new(ATTRS_COLUMN, data_type, true)]);
                        RecordBatch::try_new(Arc::new(schema), vec![column]).unwrap()
                    })
                    .collect()
            })
            .collect()
    }

    #[tokio::test]
    async fn attrs_keys_are_capped_like_the_reference() {
        // one partition: the same keys as the reference are tracked
        let partitions = key_cap_partitions(1);
        let expected = reference_dimensions(&partitions, 10, 10);
        let discovery = discover_partitions(streams(&partitions), 10).await.unwrap();
        assert_eq!(discovery.attr_ids.len(), MAX_ATTR_KEYS);
        assert_eq!(discovery.finish(10), expected);

        // several: other keys may win the race, but never more than the cap, and every tracked
        // key is counted over all rows
        let partitions = key_cap_partitions(4);
        let discovery = discover_partitions(streams(&partitions), 10).await.unwrap();
        assert_eq!(discovery.attr_ids.len(), MAX_ATTR_KEYS);
        let dimensions = discovery.finish(10);
        assert!(dimensions.len() > MAX_ATTR_KEYS / 2);
        let mut counts: HashMap<String, HashMap<String, u64>> = HashMap::new();
        for batch in partitions.iter().flatten() {
            for text in batch.column(0).as_string::<i32>().iter().flatten() {
                let object: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_str(text).unwrap();
                for (key, value) in object {
                    if let Some(value) = crate::udf::value_text(&value) {
                        *counts.entry(key).or_default().entry(value).or_default() += 1;
                    }
                }
            }
        }
        for dimension in &dimensions {
            let mut values: Vec<(String, u64)> = counts
                .remove(&dimension.name)
                .unwrap()
                .into_iter()
                .collect();
            values.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            assert_eq!(dimension.values, values, "{}", dimension.name);
        }
    }
}
