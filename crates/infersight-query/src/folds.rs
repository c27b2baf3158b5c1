//! The partial states of `count`, `sum` and `avg` for [`crate::view_aggregate`]'s operator,
//! folded from a batch's group indices in one pass per argument instead of one pass per
//! aggregate through DataFusion's group accumulators.
//!
//! `SELECT model, count(*), avg(e2e_ms) … GROUP BY model` through DataFusion's accumulators
//! makes a column of ones for `count(*)`, walks the rows once to count it and once more to
//! count and add up `e2e_ms`: three walks over ten million group indices, each a chain of
//! increments of a few counters (bench/README.md, "count, sum and avg folded"). Here the rows of
//! a group are counted once, each argument is added up once (its nulls counted per group), and
//! every state is read off those: `count(*)` the rows, `count(x)` the rows less `x`'s nulls,
//! `sum(x)` its sum, `avg(x)` the count and the sum. The states have the types and the nulls of
//! DataFusion's own (a `sum` or an `avg` of a group without a value is null). Folded by group
//! index, a group's sum adds its values in DataFusion's order, to the same bits; folded by a
//! dictionary's keys in [`LANES`] lanes, a float sum adds them in another order and may round
//! differently in its last place (as DataFusion's own answers do from run to run: its
//! partitions merge in the order they finish).

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, Int64Array, RecordBatch, UInt64Array,
};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::datatypes::{DataType, Float64Type, Int64Type, Schema};
use datafusion::common::{Result, internal_datafusion_err};
use datafusion::functions_aggregate::average::Avg;
use datafusion::functions_aggregate::count::Count;
use datafusion::functions_aggregate::sum::Sum;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_plan::PhysicalExpr;
use datafusion::physical_plan::expressions::Literal;

/// One aggregate's partial state, read off the folds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    /// `count(*)` (or of a literal that is not null): the group's rows.
    Rows,
    /// `count(x)`, `x` the folds' argument at this index: the rows where `x` is not null.
    Count(usize),
    /// `sum(x)`: null for a group without a value.
    Sum(usize),
    /// `avg(x)`: the count of values and their sum, both null for a group without a value.
    Avg(usize),
}

/// What is added up of an argument.
#[derive(Debug)]
enum Sums {
    /// Nothing: only its nulls are counted (`count(x)`).
    Nothing,
    /// 64-bit integers, wrapping on overflow as DataFusion's `sum`.
    Int(Vec<i64>),
    Float(Vec<f64>),
}

/// One argument of the folded aggregates (evaluated once per batch, whatever reads it).
#[derive(Debug)]
struct Argument {
    expr: Arc<dyn PhysicalExpr>,
    sums: Sums,
    /// The rows of each group where the argument is null.
    nulls: Vec<i64>,
}

/// Lanes of the folds by a dictionary's keys: rows `i` and `i + 1` of a batch add to different
/// counters, so that a run of rows of one value is not one chain of dependent additions.
pub(crate) const LANES: usize = 4;

/// The folds of one partition's groups; see the module documentation.
#[derive(Debug)]
pub(crate) struct Folds {
    /// The rows of each group (of each group's lanes: group `g`'s row `i` counts at
    /// `g * lanes + i % lanes`, as its nulls and its sums).
    rows: Vec<i64>,
    arguments: Vec<Argument>,
    /// 1, or [`LANES`].
    lanes: usize,
}

impl Default for Folds {
    fn default() -> Self {
        Folds {
            rows: Vec::new(),
            arguments: Vec::new(),
            lanes: 1,
        }
    }
}

impl Folds {
    /// The folds for `aggregates` over rows of `schema`, and each aggregate's [`Output`] where
    /// it is folded (`None`: DataFusion's accumulator computes it). Folded are `count`, `sum`
    /// and `avg` of one argument, not `DISTINCT`, without a filter or an ordering, whose
    /// argument and states have the types folded here (64-bit integers and floats).
    pub(crate) fn plan(
        aggregates: &[Arc<AggregateFunctionExpr>],
        filters: &[Option<Arc<dyn PhysicalExpr>>],
        schema: &Schema,
    ) -> (Folds, Vec<Option<Output>>) {
        let mut folds = Folds::default();
        let outputs = aggregates
            .iter()
            .enumerate()
            .map(|(i, aggregate)| {
                let filtered = filters.get(i).is_none_or(Option::is_some);
                if filtered {
                    return None;
                }
                folds.output_of(aggregate, schema)
            })
            .collect();
        (folds, outputs)
    }

    fn output_of(&mut self, aggregate: &AggregateFunctionExpr, schema: &Schema) -> Option<Output> {
        if aggregate.is_distinct() || !aggregate.order_bys().is_empty() {
            return None;
        }
        let arguments = aggregate.expressions();
        let [argument] = arguments.as_slice() else {
            return None;
        };
        let states = aggregate.state_fields().ok()?;
        let states: Vec<&DataType> = states.iter().map(|field| field.data_type()).collect();
        let function = aggregate.fun().inner();
        if function.is::<Count>() {
            if states != [&DataType::Int64] {
                return None;
            }
            return match argument.downcast_ref::<Literal>() {
                Some(literal) if !literal.value().is_null() => Some(Output::Rows),
                Some(_) => None,
                None => Some(Output::Count(self.argument(argument, None))),
            };
        }
        let argument_type = argument.data_type(schema).ok()?;
        let adds = match argument_type {
            DataType::Int64 => Adds::Int,
            DataType::Float64 => Adds::Float,
            _ => return None,
        };
        if function.is::<Sum>() && states == [&argument_type] {
            return Some(Output::Sum(self.argument(argument, Some(adds))));
        }
        if function.is::<Avg>()
            && adds == Adds::Float
            && states == [&DataType::UInt64, &DataType::Float64]
        {
            return Some(Output::Avg(self.argument(argument, Some(adds))));
        }
        None
    }

    /// The index of `expr` among the arguments (added if new), adding up as `adds` asks.
    fn argument(&mut self, expr: &Arc<dyn PhysicalExpr>, adds: Option<Adds>) -> usize {
        let index = match self
            .arguments
            .iter()
            .position(|argument| argument.expr.as_ref() == expr.as_ref())
        {
            Some(index) => index,
            None => {
                self.arguments.push(Argument {
                    expr: Arc::clone(expr),
                    sums: Sums::Nothing,
                    nulls: Vec::new(),
                });
                self.arguments.len() - 1
            }
        };
        let argument = &mut self.arguments[index];
        match (adds, &argument.sums) {
            (Some(Adds::Int), Sums::Nothing) => argument.sums = Sums::Int(Vec::new()),
            (Some(Adds::Float), Sums::Nothing) => argument.sums = Sums::Float(Vec::new()),
            _ => {}
        }
        index
    }

    /// The same folds with no group, in [`LANES`] lanes.
    pub(crate) fn empty_in_lanes(&self) -> Folds {
        Folds {
            lanes: LANES,
            rows: Vec::new(),
            arguments: self
                .arguments
                .iter()
                .map(|argument| Argument {
                    expr: Arc::clone(&argument.expr),
                    sums: match argument.sums {
                        Sums::Nothing => Sums::Nothing,
                        Sums::Int(_) => Sums::Int(Vec::new()),
                        Sums::Float(_) => Sums::Float(Vec::new()),
                    },
                    nulls: Vec::new(),
                })
                .collect(),
        }
    }

    /// The rows of each group.
    pub(crate) fn rows_of_groups(&self) -> Vec<i64> {
        self.rows
            .chunks_exact(self.lanes)
            .map(|lanes| lanes.iter().sum())
            .collect()
    }

    /// Adds the rows of `batch`, row `i` to group `indices[i]` of `groups` (each index below
    /// `groups`).
    pub(crate) fn update<I: GroupIndex>(
        &mut self,
        batch: &RecordBatch,
        indices: &[I],
        groups: usize,
    ) -> Result<()> {
        if self.lanes == LANES {
            self.update_in::<I, LANES>(batch, indices, groups)
        } else {
            self.update_in::<I, 1>(batch, indices, groups)
        }
    }

    fn update_in<I: GroupIndex, const L: usize>(
        &mut self,
        batch: &RecordBatch,
        indices: &[I],
        groups: usize,
    ) -> Result<()> {
        let slots = groups * L;
        self.rows.resize(slots, 0);
        // the rows are counted in the first argument's pass, or on their own without one
        let mut rows = Some(self.rows.as_mut_slice());
        for argument in &mut self.arguments {
            let values = argument
                .expr
                .evaluate(batch)?
                .into_array(batch.num_rows())?;
            argument.nulls.resize(slots, 0);
            let valid = values
                .logical_nulls()
                .filter(|nulls| nulls.null_count() > 0);
            let pass = Pass::<I, L> {
                indices,
                valid: valid.as_ref(),
                nulls: &mut argument.nulls,
            };
            match &mut argument.sums {
                Sums::Nothing => pass.count(rows.take()),
                Sums::Int(sums) => {
                    sums.resize(slots, 0);
                    let values = values.as_primitive_opt::<Int64Type>().ok_or_else(|| {
                        internal_datafusion_err!("sum of {}, not Int64", values.data_type())
                    })?;
                    pass.add(sums, rows.take(), values.values(), |sum, value| {
                        *sum = sum.wrapping_add(value);
                    });
                }
                Sums::Float(sums) => {
                    sums.resize(slots, 0.0);
                    let values = values.as_primitive_opt::<Float64Type>().ok_or_else(|| {
                        internal_datafusion_err!("sum of {}, not Float64", values.data_type())
                    })?;
                    pass.add(sums, rows.take(), values.values(), |sum, value| {
                        *sum += value;
                    });
                }
            }
        }
        if let Some(rows) = rows {
            count_rows::<I, L>(rows, indices);
        }
        Ok(())
    }

    /// Adds the groups of `other` (the same folds, in lanes) with rows to these (in one lane),
    /// its group `i` to group `groups_of[i]` of `groups`.
    pub(crate) fn add(&mut self, other: &Folds, groups_of: &[usize], groups: usize) {
        self.rows.resize(groups, 0);
        let lanes = other.lanes;
        // each of other's groups with rows: its lanes, and the group they add to
        let from = || {
            other
                .rows
                .chunks_exact(lanes)
                .zip(groups_of)
                .enumerate()
                .filter(|(_, (rows, _))| rows.iter().any(|rows| *rows > 0))
                .map(move |(i, (_, group))| (i * lanes..(i + 1) * lanes, *group))
        };
        for (slots, group) in from() {
            self.rows[group] += other.rows[slots].iter().sum::<i64>();
        }
        for (argument, theirs) in self.arguments.iter_mut().zip(&other.arguments) {
            argument.nulls.resize(groups, 0);
            for (slots, group) in from() {
                argument.nulls[group] += theirs.nulls[slots].iter().sum::<i64>();
            }
            match (&mut argument.sums, &theirs.sums) {
                (Sums::Int(sums), Sums::Int(partial)) => {
                    sums.resize(groups, 0);
                    for (slots, group) in from() {
                        for sum in &partial[slots] {
                            sums[group] = sums[group].wrapping_add(*sum);
                        }
                    }
                }
                (Sums::Float(sums), Sums::Float(partial)) => {
                    sums.resize(groups, 0.0);
                    for (slots, group) in from() {
                        sums[group] += partial[slots].iter().sum::<f64>();
                    }
                }
                _ => {}
            }
        }
    }

    /// The partial state of `output` for each of `groups` (in group order).
    pub(crate) fn state(&mut self, output: Output, groups: usize) -> Result<Vec<ArrayRef>> {
        self.rows.resize(groups, 0);
        let index = match output {
            Output::Rows => return Ok(vec![Arc::new(Int64Array::from(self.rows.clone()))]),
            Output::Count(index) | Output::Sum(index) | Output::Avg(index) => index,
        };
        let argument = self
            .arguments
            .get_mut(index)
            .ok_or_else(|| internal_datafusion_err!("folded argument {index} missing"))?;
        argument.nulls.resize(groups, 0);
        let values: Vec<i64> = self
            .rows
            .iter()
            .zip(&argument.nulls)
            .map(|(rows, nulls)| rows - nulls)
            .collect();
        let seen = || Some(NullBuffer::from_iter(values.iter().map(|n| *n > 0)));
        let sums: ArrayRef = match &mut argument.sums {
            Sums::Nothing => return Ok(vec![Arc::new(Int64Array::from(values))]),
            _ if output == Output::Count(index) => {
                return Ok(vec![Arc::new(Int64Array::from(values))]);
            }
            Sums::Int(sums) => {
                sums.resize(groups, 0);
                Arc::new(Int64Array::new(sums.clone().into(), seen()))
            }
            Sums::Float(sums) => {
                sums.resize(groups, 0.0);
                Arc::new(Float64Array::new(sums.clone().into(), seen()))
            }
        };
        Ok(match output {
            Output::Avg(_) => {
                let counts: Vec<u64> = values.iter().map(|n| n.unsigned_abs()).collect();
                vec![Arc::new(UInt64Array::new(counts.into(), seen())), sums]
            }
            _ => vec![sums],
        })
    }

    /// Every group gone (after their states were handed on).
    pub(crate) fn clear(&mut self) {
        self.rows.clear();
        for argument in &mut self.arguments {
            argument.nulls.clear();
            match &mut argument.sums {
                Sums::Nothing => {}
                Sums::Int(sums) => sums.clear(),
                Sums::Float(sums) => sums.clear(),
            }
        }
    }

    /// Bytes held, for the memory pool.
    pub(crate) fn size(&self) -> usize {
        let words = self.rows.capacity()
            + self
                .arguments
                .iter()
                .map(|argument| {
                    argument.nulls.capacity()
                        + match &argument.sums {
                            Sums::Nothing => 0,
                            Sums::Int(sums) => sums.capacity(),
                            Sums::Float(sums) => sums.capacity(),
                        }
                })
                .sum::<usize>();
        words * 8
    }
}

/// What an argument's values add up as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Adds {
    Int,
    Float,
}

/// A row's group as a batch gives it: an index into the groups, or a dictionary key (into the
/// values, which the caller checked are all in range).
pub(crate) trait GroupIndex: Copy {
    fn group(self) -> usize;
}

impl GroupIndex for usize {
    fn group(self) -> usize {
        self
    }
}

impl GroupIndex for i32 {
    fn group(self) -> usize {
        // never negative: the caller checked the keys
        usize::try_from(self).unwrap_or(usize::MAX)
    }
}

/// The counter of row `row` of group `group` among `L` lanes.
fn slot<I: GroupIndex, const L: usize>(row: usize, group: I) -> usize {
    group.group() * L + (row & (L - 1))
}

/// One pass over a batch's rows for one argument, into `L` lanes.
struct Pass<'a, I, const L: usize> {
    indices: &'a [I],
    /// The argument's validity, `None` when no row is null.
    valid: Option<&'a NullBuffer>,
    nulls: &'a mut [i64],
}

impl<I: GroupIndex, const L: usize> Pass<'_, I, L> {
    /// Counts the null rows of each group (and the rows, where `rows` is given).
    fn count(self, rows: Option<&mut [i64]>) {
        if let Some(rows) = rows {
            count_rows::<I, L>(rows, self.indices);
        }
        if let Some(valid) = self.valid {
            for (row, group) in self.indices.iter().enumerate() {
                if valid.is_null(row) {
                    self.nulls[slot::<I, L>(row, *group)] += 1;
                }
            }
        }
    }

    /// Adds each row's value to its group's sum, counting the null rows (and the rows, where
    /// `rows` is given: in the same pass when no row is null).
    fn add<T: Copy>(
        self,
        sums: &mut [T],
        rows: Option<&mut [i64]>,
        values: &[T],
        add: impl Fn(&mut T, T),
    ) {
        match (self.valid, rows) {
            (None, Some(rows)) => {
                // whole chunks of `L` rows, row `i` of a chunk in lane `i`, then the rest
                let mut groups = self.indices.chunks_exact(L);
                let mut chunk_values = values.chunks_exact(L);
                for (groups, values) in (&mut groups).zip(&mut chunk_values) {
                    for (lane, (group, value)) in groups.iter().zip(values).enumerate() {
                        let slot = group.group() * L + lane;
                        rows[slot] += 1;
                        add(&mut sums[slot], *value);
                    }
                }
                let rest = groups.remainder().iter().zip(chunk_values.remainder());
                for (lane, (group, value)) in rest.enumerate() {
                    let slot = group.group() * L + lane;
                    rows[slot] += 1;
                    add(&mut sums[slot], *value);
                }
            }
            (None, None) => {
                for (row, (group, value)) in self.indices.iter().zip(values).enumerate() {
                    add(&mut sums[slot::<I, L>(row, *group)], *value);
                }
            }
            (Some(valid), rows) => {
                if let Some(rows) = rows {
                    count_rows::<I, L>(rows, self.indices);
                }
                for (row, (group, value)) in self.indices.iter().zip(values).enumerate() {
                    let slot = slot::<I, L>(row, *group);
                    if valid.is_valid(row) {
                        add(&mut sums[slot], *value);
                    } else {
                        self.nulls[slot] += 1;
                    }
                }
            }
        }
    }
}

fn count_rows<I: GroupIndex, const L: usize>(rows: &mut [i64], indices: &[I]) {
    for (row, group) in indices.iter().enumerate() {
        rows[slot::<I, L>(row, *group)] += 1;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use datafusion::arrow::datatypes::Field;
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::datasource::MemTable;
    use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
    use datafusion::physical_plan::expressions::col;
    use datafusion::prelude::{SessionConfig, SessionContext};

    use super::*;

    fn schema() -> Arc<Schema> {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("v", DataType::Int64, true),
            Field::new("f", DataType::Float64, true),
            Field::new("i", DataType::Int32, true),
        ]))
    }

    /// Rows of [`schema`] with `values` in `v`.
    fn batch(values: Vec<Option<i64>>) -> RecordBatch {
        let rows = values.len();
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(datafusion::arrow::array::StringArray::from(vec!["x"; rows])),
                Arc::new(Int64Array::from(values)),
                Arc::new(Float64Array::from(vec![0.0; rows])),
                Arc::new(datafusion::arrow::array::Int32Array::from(vec![0; rows])),
            ],
        )
        .unwrap()
    }

    /// What [`Folds::plan`] makes of the partial aggregate of `sql` over `t` ([`schema`]).
    async fn planned(sql: &str) -> Vec<Option<Output>> {
        // two partitions of rows: a partial aggregate below a final one
        let context =
            SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
        let partition = vec![batch(vec![Some(1), None])];
        let table = MemTable::try_new(schema(), vec![partition.clone(), partition]).unwrap();
        context.register_table("t", Arc::new(table)).unwrap();
        let plan = context.sql(sql).await.unwrap();
        let plan = plan.create_physical_plan().await.unwrap();
        let mut found = None;
        plan.apply(|node| {
            if let Some(aggregate) = node.downcast_ref::<AggregateExec>()
                && *aggregate.mode() == AggregateMode::Partial
            {
                let (_, outputs) = Folds::plan(
                    aggregate.aggr_expr(),
                    aggregate.filter_expr(),
                    &aggregate.input().schema(),
                );
                found = Some(outputs);
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        found.unwrap()
    }

    #[tokio::test]
    async fn count_sum_and_avg_are_folded_and_share_their_arguments() {
        let outputs = planned(
            "SELECT k, count(*), count(v), sum(v), avg(f), sum(f), avg(v), sum(i), min(f) FROM t GROUP BY k",
        )
        .await;
        // v, f, then the casts avg(v) and sum(i) read (to Float64 and Int64)
        assert_eq!(
            outputs,
            [
                Some(Output::Rows),
                Some(Output::Count(0)),
                Some(Output::Sum(0)),
                Some(Output::Avg(1)),
                Some(Output::Sum(1)),
                Some(Output::Avg(2)),
                Some(Output::Sum(3)),
                None,
            ]
        );
        let outputs = planned(
            "SELECT k, count(DISTINCT v), sum(v) FILTER (WHERE f > 1), count(NULL), array_agg(v ORDER BY f) FROM t GROUP BY k",
        )
        .await;
        assert_eq!(outputs, [None, None, None, None]);
    }

    #[test]
    fn a_group_without_a_value_has_null_sums_and_a_zero_count() {
        let v = col("v", &schema()).unwrap();
        let mut folds = Folds::default();
        assert_eq!(folds.argument(&v, Some(Adds::Int)), 0);
        // group 2 only ever null; group 0 wraps past i64::MAX as DataFusion's sum does
        folds
            .update(
                &batch(vec![Some(i64::MAX), None, Some(2), None]),
                &[0, 1, 0, 2],
                3,
            )
            .unwrap();
        folds
            .update(&batch(vec![Some(5), None]), &[1, 2], 3)
            .unwrap();
        let ints = |arrays: Vec<ArrayRef>| -> Vec<Option<i64>> {
            arrays[0].as_primitive::<Int64Type>().iter().collect()
        };
        assert_eq!(
            ints(folds.state(Output::Rows, 3).unwrap()),
            [Some(2), Some(2), Some(2)]
        );
        assert_eq!(
            ints(folds.state(Output::Count(0), 3).unwrap()),
            [Some(2), Some(1), Some(0)]
        );
        assert_eq!(
            ints(folds.state(Output::Sum(0), 3).unwrap()),
            [Some(i64::MIN + 1), Some(5), None]
        );
        folds.clear();
        folds.update(&batch(vec![Some(7)]), &[0], 1).unwrap();
        assert_eq!(ints(folds.state(Output::Sum(0), 1).unwrap()), [Some(7)]);
    }

    #[test]
    fn folds_in_lanes_by_key_add_up_to_the_folds_by_group() {
        let v = col("v", &schema()).unwrap();
        let mut by_group = Folds::default();
        by_group.argument(&v, Some(Adds::Int));
        let mut by_key = by_group.empty_in_lanes();
        let mut merged = Folds::default();
        merged.argument(&v, Some(Adds::Int));
        // eleven rows (not a whole number of lanes) of keys 0..3; key 3 has no row, and no
        // group either
        let keys: Vec<i32> = vec![0, 2, 0, 1, 0, 0, 2, 0, 1, 0, 0];
        let groups_of = [2, 0, 1, usize::MAX];
        let values = (0..11)
            .map(|i| (i % 4 != 1).then_some(i * 10))
            .collect::<Vec<_>>();
        let rows = batch(values);
        let indices: Vec<usize> = keys.iter().map(|key| groups_of[*key as usize]).collect();
        by_group.update(&rows, &indices, 3).unwrap();
        by_key.update(&rows, &keys, 4).unwrap();
        assert_eq!(by_key.rows_of_groups(), [7, 2, 2, 0]);
        merged.add(&by_key, &groups_of, 3);
        for output in [Output::Rows, Output::Count(0), Output::Sum(0)] {
            assert_eq!(
                merged.state(output, 3).unwrap(),
                by_group.state(output, 3).unwrap(),
                "{output:?}"
            );
        }
    }
}
