//! Tests of dimension discovery: the counters, and the partitioned discovery against
//! [`super::reference`] on seeded random batches of every column layout.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, DictionaryArray, Float64Array, Int16Array, Int32Array, Int64Array,
    LargeStringArray, RecordBatch, StringArray, StringViewArray, TimestampNanosecondArray,
};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, Field, Int16Type, Int32Type, Schema, TimeUnit};
use infersight_store::TimeRange;

use super::count::{Counter, Discovery};
use super::*;

/// The time column of the canonical tables.
const TS_COLUMN: &str = "ts";

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

/// A counter of `rows` rows over the values `value(i)`.
fn counted(rows: usize, value: impl Fn(usize) -> String) -> Dimension {
    let mut counter = Counter::default();
    for i in 0..rows {
        counter.add(&value(i), 1, 1000);
    }
    counter
        .into_dimension("d".into(), DimensionSource::Attrs, 5)
        .unwrap()
}

/// Scores (hundreds of distinct numbers, seeded) are continuous and a single value is constant,
/// judged on every value, not the few reported; settings and names stay categorical, however
/// many values they have, and a number column with few values is a setting.
#[test]
fn dimensions_are_told_categorical_constant_or_continuous() {
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut score = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        format!("{:.3}", (rng % 1000) as f64 / 1000.0)
    };
    let scores: Vec<String> = (0..4000).map(|_| score()).collect();
    let dimension = counted(4000, |i| scores[i].clone());
    assert!(
        dimension.distinct_values >= 190,
        "{}",
        dimension.distinct_values
    );
    assert_eq!(dimension.kind, DimensionKind::Continuous);
    assert_eq!(
        counted(500, |_| "vllm".into()).kind,
        DimensionKind::Constant
    );
    assert_eq!(counted(500, |_| "0.5".into()).kind, DimensionKind::Constant);
    assert_eq!(
        counted(500, |i| (1 << (i % 8)).to_string()).kind,
        DimensionKind::Categorical
    );
    assert_eq!(
        counted(5000, |i| format!("tenant-{}", i % 300)).kind,
        DimensionKind::Categorical
    );
    // one non-number among many numbers: a label that happens to be numeric mostly
    assert_eq!(
        counted(5000, |i| if i == 0 {
            "n/a".into()
        } else {
            (i % 300).to_string()
        })
        .kind,
        DimensionKind::Categorical
    );
    assert_eq!(
        counted(5000, |i| (i % 300).to_string()).kind,
        DimensionKind::Continuous
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
                    Some(value) => Some(match dictionary.iter().position(|v| *v == Some(value)) {
                        Some(position) => position as i16,
                        None => {
                            dictionary.push(Some(value));
                            (dictionary.len() - 1) as i16
                        }
                    }),
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

/// One stream per partition, as [`QueryEngine::scan_partitions`] hands them over (the real
/// engine's partitioned scans are exercised by the crate's integration tests).
fn streams(partitions: &[Vec<RecordBatch>]) -> Vec<BatchStream> {
    partitions
        .iter()
        .map(|batches| {
            let batches = batches.clone().into_iter().map(Ok);
            Box::pin(futures::stream::iter(batches)) as BatchStream
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
        for (max_cardinality, max_values) in [(0, 5), (1, 5), (2, 1), (5, 3), (10, 20), (1000, 100)]
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
async fn discovery_of_range_filtered_partitions_equals_the_reference() {
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
                            .as_primitive::<arrow::datatypes::TimestampNanosecondType>();
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
            let actual = discover_partitions(streams(&in_range), max_cardinality)
                .await
                .unwrap()
                .finish(10);
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
                if let Some(value) = infersight_query::value_text(&value) {
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
