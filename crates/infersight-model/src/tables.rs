//! The canonical tables as Rust records and versioned Arrow schemas, generated from one column
//! list per table so the record, the schema and the batch builder can never disagree.
//!
//! Every table has a non-null `ts` column (nanoseconds, UTC): the store partitions by its hour and
//! the query layer prunes segments with it. Numeric columns carry their unit in the name. Every
//! table ends with the nullable `org` column ([`crate::org`]), stamped at ingest.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BooleanArray, BooleanBuilder, Float64Array, Float64Builder, Int64Array,
    Int64Builder, ListArray, ListBuilder, RecordBatch, StringArray, StringBuilder,
    TimestampNanosecondArray, TimestampNanosecondBuilder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use serde::{Deserialize, Serialize};

use crate::error::ModelError;

/// Version of the canonical schemas; stored in every schema's metadata and in every segment.
pub const SCHEMA_VERSION: u32 = 1;
pub const SCHEMA_VERSION_KEY: &str = "infersight.schema_version";

/// A batch of rows of one canonical table: the unit receivers hand to the store.
#[derive(Debug, Clone)]
pub struct TableBatch {
    pub table: Table,
    pub batch: RecordBatch,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Table {
    Requests,
    Spans,
    Logs,
    Metrics,
    Tokens,
    Templates,
    /// The redaction audit: what the `redact` stage replaced where (counts, never values).
    Redactions,
}

impl Table {
    /// Every table, in the order of their WAL codes: new tables are appended, never inserted.
    pub const ALL: [Table; 7] = [
        Table::Requests,
        Table::Spans,
        Table::Logs,
        Table::Metrics,
        Table::Tokens,
        Table::Templates,
        Table::Redactions,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Table::Requests => "requests",
            Table::Spans => "spans",
            Table::Logs => "logs",
            Table::Metrics => "metrics",
            Table::Tokens => "tokens",
            Table::Templates => "templates",
            Table::Redactions => "redactions",
        }
    }

    pub fn from_name(name: &str) -> Result<Table, ModelError> {
        Table::ALL
            .into_iter()
            .find(|t| t.name() == name)
            .ok_or_else(|| ModelError::UnknownTable(name.to_string()))
    }

    pub fn schema(self) -> SchemaRef {
        match self {
            Table::Requests => RequestRecord::schema(),
            Table::Spans => SpanRecord::schema(),
            Table::Logs => LogRecord::schema(),
            Table::Metrics => MetricRecord::schema(),
            Table::Tokens => TokenRecord::schema(),
            Table::Templates => TemplateRecord::schema(),
            Table::Redactions => RedactionRecord::schema(),
        }
    }

    /// Position of the stable small integer used in WAL frames.
    pub fn code(self) -> u8 {
        Table::ALL.iter().position(|t| *t == self).unwrap_or(0) as u8
    }

    pub fn from_code(code: u8) -> Option<Table> {
        Table::ALL.get(code as usize).copied()
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

fn ts_type() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()))
}

fn column<'a, T: 'static>(
    batch: &'a RecordBatch,
    table: &'static str,
    name: &str,
) -> Result<&'a T, ModelError> {
    batch
        .column_by_name(name)
        .ok_or_else(|| ModelError::Column {
            table,
            column: name.to_string(),
            reason: "missing".into(),
        })?
        .as_any()
        .downcast_ref::<T>()
        .ok_or_else(|| ModelError::Column {
            table,
            column: name.to_string(),
            reason: "unexpected data type".into(),
        })
}

// One rule set per column kind: the Rust type, the Arrow type, the builder, append and read-back.
macro_rules! kind {
    (@ty ts) => { i64 };
    (@ty ots) => { Option<i64> };
    (@ty str) => { Option<String> };
    (@ty i64) => { Option<i64> };
    (@ty f64) => { Option<f64> };
    (@ty bool) => { Option<bool> };
    (@ty json) => { String };
    (@ty f64list) => { Vec<f64> };

    (@dt ts) => { (ts_type(), false) };
    (@dt ots) => { (ts_type(), true) };
    (@dt str) => { (DataType::Utf8, true) };
    (@dt i64) => { (DataType::Int64, true) };
    (@dt f64) => { (DataType::Float64, true) };
    (@dt bool) => { (DataType::Boolean, true) };
    (@dt json) => { (DataType::Utf8, false) };
    (@dt f64list) => { (DataType::List(Arc::new(Field::new("item", DataType::Float64, true))), true) };

    (@builder ts) => { TimestampNanosecondBuilder };
    (@builder ots) => { TimestampNanosecondBuilder };
    (@builder str) => { StringBuilder };
    (@builder i64) => { Int64Builder };
    (@builder f64) => { Float64Builder };
    (@builder bool) => { BooleanBuilder };
    (@builder json) => { StringBuilder };
    (@builder f64list) => { ListBuilder<Float64Builder> };

    (@new ts) => { TimestampNanosecondBuilder::new().with_timezone("UTC") };
    (@new ots) => { TimestampNanosecondBuilder::new().with_timezone("UTC") };
    (@new str) => { StringBuilder::new() };
    (@new i64) => { Int64Builder::new() };
    (@new f64) => { Float64Builder::new() };
    (@new bool) => { BooleanBuilder::new() };
    (@new json) => { StringBuilder::new() };
    (@new f64list) => { ListBuilder::new(Float64Builder::new()) };

    // builders sized for `$r` (a slice of records) up front, strings by their total length
    (@cap ts, $r:expr, $c:ident) => { TimestampNanosecondBuilder::with_capacity($r.len()).with_timezone("UTC") };
    (@cap ots, $r:expr, $c:ident) => { TimestampNanosecondBuilder::with_capacity($r.len()).with_timezone("UTC") };
    (@cap str, $r:expr, $c:ident) => {
        StringBuilder::with_capacity($r.len(), $r.iter().map(|x| x.$c.as_deref().map_or(0, str::len)).sum())
    };
    (@cap i64, $r:expr, $c:ident) => { Int64Builder::with_capacity($r.len()) };
    (@cap f64, $r:expr, $c:ident) => { Float64Builder::with_capacity($r.len()) };
    (@cap bool, $r:expr, $c:ident) => { BooleanBuilder::with_capacity($r.len()) };
    (@cap json, $r:expr, $c:ident) => {
        StringBuilder::with_capacity($r.len(), $r.iter().map(|x| x.$c.len().max(2)).sum())
    };
    (@cap f64list, $r:expr, $c:ident) => { ListBuilder::with_capacity(Float64Builder::new(), $r.len()) };

    (@push ts, $b:expr, $v:expr) => { $b.append_value(*$v) };
    (@push ots, $b:expr, $v:expr) => { $b.append_option(*$v) };
    (@push str, $b:expr, $v:expr) => { $b.append_option($v.as_deref()) };
    (@push i64, $b:expr, $v:expr) => { $b.append_option(*$v) };
    (@push f64, $b:expr, $v:expr) => { $b.append_option(*$v) };
    (@push bool, $b:expr, $v:expr) => { $b.append_option(*$v) };
    (@push json, $b:expr, $v:expr) => { $b.append_value(if $v.is_empty() { "{}" } else { $v.as_str() }) };
    (@push f64list, $b:expr, $v:expr) => {{
        if $v.is_empty() {
            $b.append_null();
        } else {
            $b.values().append_slice($v);
            $b.append(true);
        }
    }};

    (@arr ts) => { TimestampNanosecondArray };
    (@arr ots) => { TimestampNanosecondArray };
    (@arr str) => { StringArray };
    (@arr i64) => { Int64Array };
    (@arr f64) => { Float64Array };
    (@arr bool) => { BooleanArray };
    (@arr json) => { StringArray };
    (@arr f64list) => { ListArray };

    (@get ts, $a:expr, $i:expr) => { $a.value($i) };
    (@get ots, $a:expr, $i:expr) => { (!$a.is_null($i)).then(|| $a.value($i)) };
    (@get str, $a:expr, $i:expr) => { (!$a.is_null($i)).then(|| $a.value($i).to_string()) };
    (@get i64, $a:expr, $i:expr) => { (!$a.is_null($i)).then(|| $a.value($i)) };
    (@get f64, $a:expr, $i:expr) => { (!$a.is_null($i)).then(|| $a.value($i)) };
    (@get bool, $a:expr, $i:expr) => { (!$a.is_null($i)).then(|| $a.value($i)) };
    (@get json, $a:expr, $i:expr) => { $a.value($i).to_string() };
    (@get f64list, $a:expr, $i:expr) => {{
        if $a.is_null($i) {
            Vec::new()
        } else {
            let values = $a.value($i);
            values
                .as_any()
                .downcast_ref::<Float64Array>()
                .map(|v| v.iter().map(|x| x.unwrap_or(f64::NAN)).collect())
                .unwrap_or_default()
        }
    }};
}

macro_rules! canonical_table {
    ($(#[$doc:meta])* $record:ident, $builder:ident, $table:literal, { $( $col:ident : $kind:ident ),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
        pub struct $record {
            $( pub $col: kind!(@ty $kind), )*
        }

        impl $record {
            pub const TABLE_NAME: &'static str = $table;
            pub const COLUMNS: &'static [&'static str] = &[$( stringify!($col) ),*];

            pub fn schema() -> SchemaRef {
                static SCHEMA: std::sync::OnceLock<SchemaRef> = std::sync::OnceLock::new();
                SCHEMA
                    .get_or_init(|| {
                        let fields: Vec<Field> = vec![$({
                            let (data_type, nullable) = kind!(@dt $kind);
                            Field::new(stringify!($col), data_type, nullable)
                        }),*];
                        let metadata = [(SCHEMA_VERSION_KEY.to_string(), SCHEMA_VERSION.to_string())]
                            .into_iter()
                            .collect();
                        Arc::new(Schema::new_with_metadata(fields, metadata))
                    })
                    .clone()
            }

            /// Reads rows back from a batch of this table (tests, exports, the WAL's self-check).
            pub fn from_batch(batch: &RecordBatch) -> Result<Vec<$record>, ModelError> {
                $( let $col = column::<kind!(@arr $kind)>(batch, $table, stringify!($col))?; )*
                Ok((0..batch.num_rows())
                    .map(|i| $record { $( $col: kind!(@get $kind, $col, i), )* })
                    .collect())
            }
        }

        /// Column-wise builder: push records, then `finish` into one `RecordBatch`.
        pub struct $builder {
            rows: usize,
            $( $col: kind!(@builder $kind), )*
        }

        impl Default for $builder {
            fn default() -> Self {
                Self::new()
            }
        }

        impl $builder {
            pub fn new() -> Self {
                Self { rows: 0, $( $col: kind!(@new $kind), )* }
            }

            pub fn push(&mut self, record: &$record) {
                self.rows += 1;
                $( kind!(@push $kind, self.$col, &record.$col); )*
            }

            pub fn len(&self) -> usize {
                self.rows
            }

            pub fn is_empty(&self) -> bool {
                self.rows == 0
            }

            pub fn finish(&mut self) -> RecordBatch {
                self.rows = 0;
                let columns: Vec<ArrayRef> = vec![$( Arc::new(self.$col.finish()) as ArrayRef ),*];
                RecordBatch::try_new($record::schema(), columns)
                    .expect("builder columns follow the generated schema")
            }
        }

        impl $record {
            pub fn to_batch(records: &[$record]) -> RecordBatch {
                let mut builder = $builder { rows: 0, $( $col: kind!(@cap $kind, records, $col), )* };
                for record in records {
                    builder.push(record);
                }
                builder.finish()
            }
        }
    };
}

canonical_table!(
    /// One inference request: the serving span, with every known attribute variant normalized.
    RequestRecord, RequestBatchBuilder, "requests", {
    ts: ts,
    trace_id: str,
    span_id: str,
    request_id: str,
    tenant: str,
    session_id: str,
    service: str,
    runtime: str,
    worker: str,
    device: str,
    model: str,
    model_version: str,
    lora_adapters: str,
    kv_cache_policy: str,
    batch_size: i64,
    input_tokens: i64,
    cached_tokens: i64,
    output_tokens: i64,
    queue_ms: f64,
    prefill_ms: f64,
    ttft_ms: f64,
    decode_ms: f64,
    tpot_ms: f64,
    itl_max_ms: f64,
    e2e_ms: f64,
    finish_reason: str,
    status: str,
    error_type: str,
    temperature: f64,
    top_p: f64,
    max_tokens: i64,
    spec_draft_tokens: i64,
    spec_accepted_tokens: i64,
    prompt_hash: str,
    attrs: json,
    // the org that owns the row, stamped at ingest (`crate::org`); null in older data
    org: str,
});

canonical_table!(
    /// One OTLP span, whatever it describes.
    SpanRecord, SpanBatchBuilder, "spans", {
    ts: ts,
    end_ts: ots,
    duration_ms: f64,
    trace_id: str,
    span_id: str,
    parent_span_id: str,
    name: str,
    kind: str,
    service: str,
    status: str,
    status_message: str,
    attrs: json,
    // the org that owns the row, stamped at ingest (`crate::org`); null in older data
    org: str,
});

canonical_table!(
    /// One log record; `body` is stored only after redaction.
    LogRecord, LogBatchBuilder, "logs", {
    ts: ts,
    severity: str,
    service: str,
    worker: str,
    trace_id: str,
    span_id: str,
    request_id: str,
    body: str,
    template_id: str,
    params: str,
    log_class: str,
    label: str,
    label_confidence: f64,
    attrs: json,
    // the org that owns the row, stamped at ingest (`crate::org`); null in older data
    org: str,
});

canonical_table!(
    /// One metric sample under its canonical name; histogram samples carry their buckets.
    MetricRecord, MetricBatchBuilder, "metrics", {
    ts: ts,
    name: str,
    source_name: str,
    kind: str,
    value: f64,
    sample_count: i64,
    model: str,
    worker: str,
    device: str,
    engine: str,
    bucket_bounds: f64list,
    bucket_counts: f64list,
    labels: json,
    // the org that owns the row, stamped at ingest (`crate::org`); null in older data
    org: str,
});

canonical_table!(
    /// One sampled per-token event of a request.
    TokenRecord, TokenBatchBuilder, "tokens", {
    ts: ts,
    request_id: str,
    step: i64,
    latency_ms: f64,
    stage: str,
    kv_hit: bool,
    // the org that owns the row, stamped at ingest (`crate::org`); null in older data
    org: str,
});

canonical_table!(
    /// One version of a mined log template; the latest row per `template_id` is current.
    TemplateRecord, TemplateBatchBuilder, "templates", {
    ts: ts,
    template_id: str,
    template: str,
    first_seen: ots,
    last_seen: ots,
    count: i64,
    param_types: json,
    // the org that owns the row, stamped at ingest (`crate::org`); null in older data
    org: str,
});

canonical_table!(
    /// One count of the redaction audit: how many findings (or attributes) the `redact` stage
    /// replaced in one minute of data, per table, column/attribute path, rule, detector and
    /// action. Written in the same store append as the redacted rows; never holds a value.
    RedactionRecord, RedactionBatchBuilder, "redactions", {
    // start of the minute of the redacted rows' own `ts`
    ts: ts,
    source_table: str,
    source_column: str,
    // `table.column[.attribute.key.path]`, e.g. `requests.attrs.enduser.id`
    path: str,
    // the `path` pattern of the rule that applied, or `default`
    rule: str,
    // `email`, `phone`, …, `custom:NAME`; null for `drop` and for whole values hashed without a finding
    detector: str,
    // `mask`, `hash` or `drop`
    action: str,
    count: i64,
    // the org that owns the row, stamped at ingest (`crate::org`); null in older data
    org: str,
});

/// `batch` of `table` written before columns were appended to its schema (such as `org`), with
/// those columns added as nulls; any other batch unchanged (the caller checks its schema). The
/// schema only ever grows at its end by nullable columns, so older WAL records and segments stay
/// readable.
pub fn with_appended_columns(table: Table, batch: RecordBatch) -> RecordBatch {
    let expected = table.schema();
    let have = batch.num_columns();
    let fields = expected.fields();
    let is_older_prefix = have < fields.len()
        && fields[have..].iter().all(|field| field.is_nullable())
        && fields[..have]
            .iter()
            .zip(batch.schema().fields())
            .all(|(want, got)| want.name() == got.name() && want.data_type() == got.data_type());
    if !is_older_prefix {
        return batch;
    }
    let rows = batch.num_rows();
    let mut columns = batch.columns().to_vec();
    columns.extend(
        fields[have..]
            .iter()
            .map(|field| arrow::array::new_null_array(field.data_type(), rows)),
    );
    RecordBatch::try_new(expected, columns).unwrap_or(batch)
}

/// Minimum and maximum of the `ts` column of a batch of any canonical table.
pub fn ts_range(batch: &RecordBatch) -> Option<(i64, i64)> {
    let ts = batch
        .column_by_name("ts")?
        .as_any()
        .downcast_ref::<TimestampNanosecondArray>()?;
    let min = arrow::compute::min(ts)?;
    let max = arrow::compute::max(ts)?;
    Some((min, max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_batches() {
        let records = vec![
            RequestRecord {
                ts: 1_700_000_000_000_000_000,
                model: Some("llama-3-8b".into()),
                input_tokens: Some(512),
                ttft_ms: Some(83.5),
                attrs: r#"{"k":"v"}"#.into(),
                ..Default::default()
            },
            RequestRecord {
                ts: 1_700_000_001_000_000_000,
                ..Default::default()
            },
        ];
        let batch = RequestRecord::to_batch(&records);
        assert_eq!(batch.num_rows(), 2);
        let back = RequestRecord::from_batch(&batch).unwrap();
        assert_eq!(back[0], records[0]);
        // an empty attrs object is stored as "{}"
        assert_eq!(back[1].attrs, "{}");
        assert_eq!(ts_range(&batch), Some((records[0].ts, records[1].ts)));
    }

    #[test]
    fn histogram_buckets_round_trip() {
        let record = MetricRecord {
            ts: 5,
            name: Some("ttft_seconds".into()),
            bucket_bounds: vec![0.1, 1.0],
            bucket_counts: vec![3.0, 4.0, 1.0],
            labels: "{}".into(),
            ..Default::default()
        };
        let batch = MetricRecord::to_batch(std::slice::from_ref(&record));
        assert_eq!(MetricRecord::from_batch(&batch).unwrap()[0], record);
    }

    #[test]
    fn every_table_has_a_versioned_schema_with_ts() {
        for table in Table::ALL {
            let schema = table.schema();
            assert_eq!(schema.field(0).name(), "ts", "{table}");
            assert_eq!(
                schema
                    .metadata()
                    .get(SCHEMA_VERSION_KEY)
                    .map(String::as_str),
                Some("1")
            );
            assert_eq!(Table::from_code(table.code()), Some(table));
            assert_eq!(Table::from_name(table.name()).unwrap(), table);
        }
        assert!(Table::from_name("nope").is_err());
    }

    #[test]
    fn batches_from_before_the_org_column_read_with_null_org() {
        let full = RequestRecord::to_batch(&[RequestRecord {
            ts: 7,
            model: Some("m".into()),
            ..Default::default()
        }]);
        let older = full
            .project(&(0..full.num_columns() - 1).collect::<Vec<_>>())
            .unwrap();
        let upgraded = with_appended_columns(Table::Requests, older);
        let back = RequestRecord::from_batch(&upgraded).unwrap();
        assert_eq!((back[0].ts, back[0].org.clone()), (7, None));
        // anything else is left for the caller to refuse
        let spans = SpanRecord::to_batch(&[SpanRecord::default()]);
        assert_eq!(
            with_appended_columns(Table::Requests, spans.clone()).schema(),
            spans.schema()
        );
    }

    #[test]
    fn from_batch_reports_wrong_schema() {
        let batch = SpanRecord::to_batch(&[SpanRecord::default()]);
        let err = RequestRecord::from_batch(&batch).unwrap_err();
        assert!(err.to_string().contains("requests"), "{err}");
    }
}
