//! The signal statements' rows kept between the watcher's runs of `collect_signals_cached` (its
//! behaviour detectors, step 4 of `watch`): a statement whose every row belongs to one minute
//! (grouped by minute, or one sample at its time) is read again only from the first minute it
//! does not hold as settled; minutes older than the last [`LATE_MINUTES`] before the window's
//! end are settled (late exports still fill the newer ones, as the watcher's SLI series allow).
//! Rows that fall out of the window are dropped. The RCA, which runs once, holds no cache.

use std::collections::HashMap;

use arrow::array::{Array, BooleanArray, Int64Array, RecordBatch};
use arrow::compute::{cast, filter_record_batch};
use arrow::datatypes::DataType;
use infersight_query::QueryError;

use super::MINUTE_NS;

/// Minutes read again at every run (and merged again at every step by the watcher's SLI
/// series): exports that arrive late still fill them.
pub const LATE_MINUTES: i64 = 3;

/// The statements kept, one table each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Statement {
    WorkerMinutes,
    MetricSamples,
    EntrySpans,
    FlowControl,
}

/// Rows of the minute-keyed statements, per statement.
#[derive(Debug, Default, Clone)]
pub struct MinuteCache {
    tables: HashMap<Statement, Table>,
}

/// One statement's settled rows: minutes in `[since_ns, settled_ns)`; `valid` once a read
/// filled it (a statement with no rows is then not read whole again).
#[derive(Debug, Default, Clone)]
struct Table {
    valid: bool,
    since_ns: i64,
    settled_ns: i64,
    batches: Vec<RecordBatch>,
}

/// What a cached statement reads now: rows of `[from_ns, until_ns)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) from_ns: i64,
    pub(crate) until_ns: i64,
}

impl MinuteCache {
    /// The range `name` must read for a window `[since_ns, until_ns)` (since on a minute): from
    /// the first minute it does not hold as settled, or the whole window when what it holds
    /// does not lead up to it (first run, the window jumped, the clock went back).
    pub(crate) fn plan(&mut self, name: Statement, since_ns: i64, until_ns: i64) -> Plan {
        debug_assert_eq!(
            since_ns.rem_euclid(MINUTE_NS),
            0,
            "a window on a whole minute"
        );
        let table = self.tables.entry(name).or_default();
        let usable = table.valid
            && table.since_ns <= since_ns
            && since_ns <= table.settled_ns
            && table.settled_ns <= until_ns;
        if !usable {
            *table = Table {
                valid: false,
                since_ns,
                settled_ns: since_ns,
                batches: Vec::new(),
            };
        }
        Plan {
            from_ns: table.settled_ns,
            until_ns,
        }
    }

    /// Keeps the settled minutes of `fresh` (rows of `plan`, time in column `time_column`, Unix
    /// ns), drops what is older than `since_ns`, and returns every row of the window.
    pub(crate) fn merge(
        &mut self,
        name: Statement,
        since_ns: i64,
        plan: Plan,
        time_column: &str,
        fresh: Vec<RecordBatch>,
    ) -> Result<Vec<RecordBatch>, QueryError> {
        let table = self.tables.entry(name).or_default();
        let settled_ns = (plan.until_ns.div_euclid(MINUTE_NS) * MINUTE_NS
            - LATE_MINUTES * MINUTE_NS)
            .max(plan.from_ns);
        let mut kept = Vec::with_capacity(table.batches.len() + fresh.len());
        for batch in table.batches.drain(..) {
            push_nonempty(
                &mut kept,
                keep_rows(&batch, time_column, |t| t >= since_ns)?,
            );
        }
        let mut transient = Vec::new();
        // only rows of the plan's range (a statement that read more adds nothing twice)
        let in_range = |t: i64| t >= plan.from_ns && t < plan.until_ns;
        for batch in fresh {
            push_nonempty(
                &mut kept,
                keep_rows(&batch, time_column, |t| in_range(t) && t < settled_ns)?,
            );
            push_nonempty(
                &mut transient,
                keep_rows(&batch, time_column, |t| in_range(t) && t >= settled_ns)?,
            );
        }
        table.valid = true;
        table.since_ns = since_ns;
        table.settled_ns = settled_ns;
        table.batches = kept;
        let mut out = table.batches.clone();
        out.extend(transient);
        Ok(out)
    }
}

fn push_nonempty(into: &mut Vec<RecordBatch>, batch: RecordBatch) {
    if batch.num_rows() > 0 {
        into.push(batch);
    }
}

/// The rows of `batch` whose time (column `time_column`, a timestamp or Unix ns) passes `keep`;
/// rows without a time are dropped.
fn keep_rows(
    batch: &RecordBatch,
    time_column: &str,
    keep: impl Fn(i64) -> bool,
) -> Result<RecordBatch, QueryError> {
    let column = batch.column_by_name(time_column).ok_or_else(|| {
        QueryError::Internal(format!(
            "cached signal statement lacks column {time_column}"
        ))
    })?;
    let times = cast(column, &DataType::Int64)
        .map_err(|e| QueryError::Internal(format!("column {time_column}: {e}")))?;
    let times = times
        .as_any()
        .downcast_ref::<Int64Array>()
        .ok_or_else(|| QueryError::Internal(format!("column {time_column} is not a time")))?;
    let mask: BooleanArray = (0..times.len())
        .map(|i| Some(times.is_valid(i) && keep(times.value(i))))
        .collect();
    if mask.true_count() == batch.num_rows() {
        return Ok(batch.clone());
    }
    filter_record_batch(batch, &mask)
        .map_err(|e| QueryError::Internal(format!("filtering cached rows: {e}")))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Float64Array, TimestampNanosecondArray};
    use arrow::datatypes::{Field, Schema, TimeUnit};

    use super::*;

    /// A statement's rows: one per (minute, value), the minute as a timestamp.
    fn rows(minutes: &[(i64, f64)]) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new(
                "minute",
                DataType::Timestamp(TimeUnit::Nanosecond, None),
                true,
            ),
            Field::new("v", DataType::Float64, true),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(TimestampNanosecondArray::from(
                    minutes.iter().map(|m| m.0 * MINUTE_NS).collect::<Vec<_>>(),
                )),
                Arc::new(Float64Array::from(
                    minutes.iter().map(|m| m.1).collect::<Vec<_>>(),
                )),
            ],
        )
        .expect("batch")
    }

    fn minutes(batches: &[RecordBatch]) -> Vec<(i64, f64)> {
        let mut out = Vec::new();
        for b in batches {
            let t = cast(b.column(0), &DataType::Int64).expect("cast");
            let t = t.as_any().downcast_ref::<Int64Array>().expect("ints");
            let v = b
                .column(1)
                .as_any()
                .downcast_ref::<Float64Array>()
                .expect("floats");
            for i in 0..b.num_rows() {
                out.push((t.value(i) / MINUTE_NS, v.value(i)));
            }
        }
        out.sort_by_key(|m| m.0);
        out
    }

    /// The store as a statement sees it at a run: minute m holds value `m` plus what arrived late.
    fn read(plan: Plan, late: &[(i64, f64)]) -> RecordBatch {
        let mut all: Vec<(i64, f64)> = (plan.from_ns / MINUTE_NS
            ..(plan.until_ns + MINUTE_NS - 1).div_euclid(MINUTE_NS))
            .map(|m| (m, m as f64))
            .collect();
        for (m, v) in late {
            if let Some(cell) = all.iter_mut().find(|c| c.0 == *m) {
                cell.1 += v;
            }
        }
        rows(&all)
    }

    /// One run of the worker statement over minutes `[since, until)` with `late` exports in the
    /// store: its plan, and every row it returns.
    fn run(
        cache: &mut MinuteCache,
        (since, until): (i64, i64),
        late: &[(i64, f64)],
    ) -> (Plan, Vec<(i64, f64)>) {
        let plan = cache.plan(
            Statement::WorkerMinutes,
            since * MINUTE_NS,
            until * MINUTE_NS,
        );
        let got = cache
            .merge(
                Statement::WorkerMinutes,
                since * MINUTE_NS,
                plan,
                "minute",
                vec![read(plan, late)],
            )
            .expect("merge");
        (plan, minutes(&got))
    }

    fn plain(range: std::ops::Range<i64>) -> Vec<(i64, f64)> {
        range.map(|m| (m, m as f64)).collect()
    }

    #[test]
    fn a_sliding_window_reads_only_its_new_and_late_minutes() {
        let mut cache = MinuteCache::default();
        // first run: minutes 100..135 read whole
        let (plan, got) = run(&mut cache, (100, 135), &[]);
        assert_eq!(plan.from_ns, 100 * MINUTE_NS);
        assert_eq!(got, plain(100..135));
        // two minutes later: only from the first unsettled minute (135 - 3); a late export
        // filled minute 133 since the first run: it is read again and counts
        let (plan, got) = run(&mut cache, (102, 137), &[(133, 0.5)]);
        assert_eq!(plan.from_ns, 132 * MINUTE_NS);
        let want: Vec<(i64, f64)> = (102..137)
            .map(|m| (m, m as f64 + if m == 133 { 0.5 } else { 0.0 }))
            .collect();
        assert_eq!(got, want, "each minute once, none older than the window");
    }

    #[test]
    fn a_window_that_jumps_or_goes_back_is_read_whole() {
        let mut cache = MinuteCache::default();
        run(&mut cache, (100, 135), &[]);
        // a replay that starts over
        let (plan, got) = run(&mut cache, (50, 85), &[]);
        assert_eq!(plan.from_ns, 50 * MINUTE_NS);
        assert_eq!(got, plain(50..85));
        // a window past everything held
        let plan = cache.plan(Statement::WorkerMinutes, 200 * MINUTE_NS, 235 * MINUTE_NS);
        assert_eq!(plan.from_ns, 200 * MINUTE_NS);
        // statements are cached apart
        let plan = cache.plan(Statement::FlowControl, 50 * MINUTE_NS, 85 * MINUTE_NS);
        assert_eq!(plan.from_ns, 50 * MINUTE_NS);
    }

    #[test]
    fn a_statement_without_rows_is_not_read_whole_again() {
        let mut cache = MinuteCache::default();
        let plan = cache.plan(Statement::FlowControl, 100 * MINUTE_NS, 135 * MINUTE_NS);
        let got = cache
            .merge(
                Statement::FlowControl,
                100 * MINUTE_NS,
                plan,
                "minute",
                Vec::new(),
            )
            .expect("merge");
        assert!(got.is_empty());
        let plan = cache.plan(Statement::FlowControl, 102 * MINUTE_NS, 137 * MINUTE_NS);
        assert_eq!(plan.from_ns, 132 * MINUTE_NS);
    }

    #[test]
    fn rows_outside_the_plan_are_not_kept_twice() {
        let mut cache = MinuteCache::default();
        run(&mut cache, (100, 135), &[]);
        let plan = cache.plan(Statement::WorkerMinutes, 102 * MINUTE_NS, 137 * MINUTE_NS);
        // a statement that read from minute 120 instead of the plan's 132
        let wider = Plan {
            from_ns: 120 * MINUTE_NS,
            ..plan
        };
        let got = cache
            .merge(
                Statement::WorkerMinutes,
                102 * MINUTE_NS,
                plan,
                "minute",
                vec![read(wider, &[])],
            )
            .expect("merge");
        assert_eq!(minutes(&got), plain(102..137));
    }

    #[test]
    fn a_row_without_its_time_column_is_an_error_not_a_panic() {
        let mut cache = MinuteCache::default();
        let plan = cache.plan(Statement::WorkerMinutes, 0, 10 * MINUTE_NS);
        let err = cache
            .merge(
                Statement::WorkerMinutes,
                0,
                plan,
                "ts",
                vec![read(plan, &[])],
            )
            .expect_err("no ts column");
        assert!(err.to_string().contains("lacks column ts"), "{err}");
    }
}
