//! Counting, inside dimension discovery ([`super`]): the counters one worker keeps for the
//! batches of its partition, and their merge. Counting looks up by `&str` in foldhash maps,
//! allocating only for a new value. `attrs` is read by [`infersight_model::attrs`] without
//! building a `serde_json::Map` (keys and strings borrowed from the row for flat objects): a row
//! counts exactly when `json_get` can parse it, and a value's text is the one `json_get` gives
//! (numbers and booleans are rendered only when counted), so dimension values match what
//! `json_get` filters compare against.
//!
//! Memory stays bounded: an attribute stops tracking values once it exceeds `max_cardinality` in
//! a worker (it is excluded anyway), and at most [`MAX_ATTR_KEYS`] distinct `attrs` keys are
//! tracked per discovery, admitted first come across all workers. With `P` partitions
//! (`target_partitions`, the core count) at most `P × (named columns + MAX_ATTR_KEYS) ×
//! (max_cardinality + 1)` values are held, plus at most 4096 rendered numbers per worker.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

use arrow::array::{
    Array, ArrayRef, AsArray, LargeStringArray, RecordBatch, StringArray, StringViewArray,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int64Type};
use infersight_model::attrs::{AttrsEntry, AttrsValue, ValueTexts, read_attrs};

use super::{
    ATTRS_COLUMN, Dimension, DimensionKind, DimensionSource, MAX_ATTR_KEYS, SETTING_COLUMNS,
    STRING_COLUMNS, is_numeric_value,
};
use infersight_query::QueryError;

/// An attribute whose every distinct value equals its row count is an id (request ids, uuids),
/// not a dimension, once there are more rows than this.
pub(super) const ID_MIN_ROWS: u64 = 20;

/// Hash maps keyed by short strings on the per-row path: foldhash (already built for DataFusion)
/// is several times faster than SipHash there, and the inputs are not attacker-chosen keys of a
/// long-lived map (every map lives for one request and is capped).
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
type FastSet<K> = HashSet<K, foldhash::fast::RandomState>;

/// Value counts of one attribute, capped at `max_cardinality` distinct values: one more and the
/// attribute is excluded. The outcome does not depend on the order values arrive in, so counters
/// of disjoint row sets merge into the counter of their union.
#[derive(Debug, Default)]
pub(super) struct Counter {
    pub(super) counts: FastMap<Box<str>, u64>,
    pub(super) total_rows: u64,
    /// More distinct values than allowed were seen; `counts` was dropped.
    pub(super) too_many: bool,
    /// The attribute held an array or object at least once.
    not_scalar: bool,
}

impl Counter {
    /// Counts `rows` rows holding `value`; looks up by `&str`, allocating only for a new value.
    pub(super) fn add(&mut self, value: &str, rows: u64, max_cardinality: usize) {
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
    pub(super) fn merge(&mut self, other: Counter, max_cardinality: usize) {
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

    pub(super) fn into_dimension(
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
        let all_numeric = self.counts.keys().all(|value| is_numeric_value(value));
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
            kind: DimensionKind::of(distinct_values, all_numeric),
        })
    }
}

/// The `attrs` keys tracked by one discovery, shared by its workers: a key is admitted the first
/// time any worker meets it while fewer than [`MAX_ATTR_KEYS`] are tracked. Once the set is full
/// it never changes, so a tracked key was tracked from its first row on and its counts are exact.
#[derive(Debug, Default)]
pub(super) struct AttrKeyAdmission {
    keys: Mutex<FastSet<Box<str>>>,
}

/// The counters of one worker (or, after merging, of the whole discovery).
pub(super) struct Discovery {
    max_cardinality: usize,
    columns: Vec<(&'static str, Counter)>,
    /// Local index of each tracked `attrs` key into `attrs`.
    pub(super) attr_ids: FastMap<Box<str>, usize>,
    attrs: Vec<TrackedAttr>,
    /// The key that started the last row (see [`TrackedAttr::next`]).
    first_attr: Option<usize>,
    /// `attrs` rows parsed so far (row marks).
    attrs_rows: u64,
    admission: Arc<AttrKeyAdmission>,
    /// Reused buffers: entries of a row not tracked locally yet, the local id of each entry of a
    /// row, integer counts of a batch, value counts of a dictionary's entries, the text of an
    /// integer.
    untracked: Vec<usize>,
    row_ids: Vec<Option<usize>>,
    integer_counts: FastMap<i64, u64>,
    dictionary_counts: Vec<u64>,
    integer_text: String,
    /// Renders `attrs` numbers and booleans as `json_get` does.
    texts: ValueTexts,
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

impl Discovery {
    pub(super) fn new(max_cardinality: usize, admission: Arc<AttrKeyAdmission>) -> Self {
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
            integer_text: String::new(),
            texts: ValueTexts::default(),
        }
    }

    pub(super) fn observe(&mut self, batch: &RecordBatch) -> Result<(), QueryError> {
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
                self.integer_text.clear();
                write!(self.integer_text, "{value}").expect("writing to a String");
                counter.add(&self.integer_text, *rows, max_cardinality);
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
    pub(super) fn observe_attrs<'a>(&mut self, text: &'a str, entries: &mut Vec<AttrsEntry<'a>>) {
        // Rows whose attrs are not a JSON object contribute nothing (json_get returns NULL too).
        if !read_attrs(text, entries) {
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
    fn admit_and_count(&mut self, entries: &[AttrsEntry<'_>]) {
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
    pub(super) fn merge(&mut self, other: Discovery) {
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

    pub(super) fn finish(self, max_values: usize) -> Vec<Dimension> {
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

/// Counts one `attrs` value; its text is what `infersight_query::value_text` gives.
fn count_attr(
    counter: &mut Counter,
    value: &AttrsValue<'_>,
    texts: &mut ValueTexts,
    max_cardinality: usize,
) {
    match value {
        AttrsValue::Null => {}
        AttrsValue::NotScalar => counter.not_scalar = true,
        // Excluded already: keep the row count, skip rendering and lookups.
        _ if counter.too_many || counter.not_scalar => counter.total_rows += 1,
        scalar => {
            if let Some(text) = texts.text(scalar) {
                counter.add(text, 1, max_cardinality);
            }
        }
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

pub(super) fn as_utf8(column: &ArrayRef) -> Result<ArrayRef, QueryError> {
    if column.data_type() == &DataType::Utf8 {
        return Ok(Arc::clone(column));
    }
    cast(column, &DataType::Utf8)
        .map_err(|error| QueryError::Internal(format!("reading a dimension column: {error}")))
}
