//! A physical operator between a Parquet scan and DataFusion's final aggregate: the partial
//! `GROUP BY` of one string key that [`crate::group_views`] reads as views, grouping each batch by
//! the views' 16 bytes and looking at a key's bytes once per distinct view.
//!
//! Read from a dictionary-encoded column (`model`, `worker`, `tenant`), every row of a batch
//! holding the same value holds the same view: a string of up to 12 bytes is inline in it, a
//! longer one is named by its buffer and offset in the dictionary's values. DataFusion's own
//! partial aggregate hashes and compares each row's view against the groups
//! (`GroupValuesBytesView::intern`, 24 % of the CPU of `GROUP BY model` with a count and a mean
//! over 10M rows); here a row costs one probe of a small table keyed by the view, and only a
//! view not yet seen in the batch is hashed by its bytes. `count`, `sum` and `avg` are folded
//! from the group indices in one pass per argument ([`crate::folds`]); the other aggregates are
//! DataFusion's own group accumulators, fed exactly as its partial aggregate feeds them. Either
//! way the partial states are DataFusion's (and the final aggregate above is unchanged); only a
//! float sum folded by a dictionary's keys may round differently in its last place. When every
//! aggregate is an exact percentile, a group's values are handed on in pieces where they lie
//! (a batch of one row per long piece, see [`PartialAggregation::emit`]), not copied into one
//! list per group.
//!
//! Read as a dictionary instead ([`crate::dictionary_keys`]), the key costs less again: a row's
//! group is one lookup by its index into the dictionary, whose values are looked up by their
//! bytes once per values array (the reader hands out one per column chunk) and only when a row
//! has them.
//!
//! The operator stands for one partial [`AggregateExec`] it keeps (schema, properties,
//! requirements and expressions all come from it). It holds its groups' states within the
//! session's memory pool, and hands them on early (a partial aggregate may emit a group more
//! than once) when the pool refuses more or the groups reach [`EMIT_AT_GROUPS`].

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, DictionaryArray, StringArray, StringViewArray, StringViewBuilder,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::Int32Type;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result, Statistics, internal_datafusion_err};
use datafusion::execution::TaskContext;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::GroupsAccumulatorAdapter;
use datafusion::physical_expr::OrderingRequirements;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_plan::aggregates::{
    AggregateExec, AggregateMode, aggregate_expressions, evaluate_many,
};
use datafusion::physical_plan::execution_plan::CardinalityEffect;
use datafusion::physical_plan::execution_plan::ReplaceChildrenOptions;
use datafusion::physical_plan::expressions::Column;
use datafusion::physical_plan::metrics::{
    BaselineMetrics, Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildStats, DisplayAs, DisplayFormatType, ExecutionPlan, InputDistributionRequirements,
    InputOrderMode, PhysicalExpr, PlanProperties, SendableRecordBatchStream, StatisticsArgs,
};
use futures::StreamExt;

use crate::dictionary_keys::dictionary_type;
use crate::folds::{Folds, Output};
use crate::percentile::{ChunkedPercentile, chunked_percentile, empty_list};

/// Groups held before a partition hands its states on: a partial aggregate over a key this
/// varied reduces little, and the final aggregate merges what is handed on more than once.
pub(crate) const EMIT_AT_GROUPS: usize = 1 << 16;

/// Slots of the per-batch table from a view to its group (a power of two).
const VIEW_SLOTS: usize = 256;

/// The operator; see the module documentation.
#[derive(Debug)]
pub(crate) struct ViewKeyAggregateExec {
    /// The partial aggregate this operator runs.
    aggregate: Arc<dyn ExecutionPlan>,
    /// The key's column in the aggregate's input.
    key: usize,
    aggr_expr: Vec<Arc<AggregateFunctionExpr>>,
    filter_expr: Vec<Option<Arc<dyn PhysicalExpr>>>,
    /// Groups held before a partition hands its states on ([`EMIT_AT_GROUPS`]).
    emit_at_groups: usize,
    metrics: ExecutionPlanMetricsSet,
}

impl ViewKeyAggregateExec {
    /// `aggregate` run by this operator, or `None` when it is not a partial aggregate of rows by
    /// one `Utf8View` or `Dictionary(Int32, Utf8)` column, in input order, without a limit.
    pub(crate) fn try_new(aggregate: Arc<dyn ExecutionPlan>) -> Option<Self> {
        let (key, aggr_expr, filter_expr) = {
            let partial = aggregate.downcast_ref::<AggregateExec>()?;
            let group_by = partial.group_expr();
            if *partial.mode() != AggregateMode::Partial
                || !group_by.is_single()
                || group_by.expr().len() != 1
                || partial.limit_options().is_some()
                || !matches!(partial.input_order_mode(), InputOrderMode::Linear)
                || !aggregate.dynamic_expressions_produced().is_empty()
            {
                return None;
            }
            let column = group_by.expr()[0].0.downcast_ref::<Column>()?;
            let input = partial.input().schema();
            let key_type = input.fields().get(column.index())?.data_type();
            if key_type != &DataType::Utf8View && key_type != &dictionary_type() {
                return None;
            }
            (
                column.index(),
                partial.aggr_expr().to_vec(),
                partial.filter_expr().to_vec(),
            )
        };
        Some(Self {
            aggregate,
            key,
            aggr_expr,
            filter_expr,
            emit_at_groups: EMIT_AT_GROUPS,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// Whether there are aggregates and every one is an exact percentile whose states are
    /// handed on in pieces (see [`PartialAggregation::emit`]).
    pub(crate) fn hands_on_in_pieces(&self) -> bool {
        let input = self.input().schema();
        !self.aggr_expr.is_empty()
            && self
                .aggr_expr
                .iter()
                .all(|expr| chunked_percentile(expr, &input).is_some())
    }

    fn input(&self) -> &Arc<dyn ExecutionPlan> {
        // `try_new` checked it is one: an aggregate has one child
        self.aggregate.children()[0]
    }
}

impl DisplayAs for ViewKeyAggregateExec {
    fn fmt_as(&self, format: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let aggregates: Vec<&str> = self.aggr_expr.iter().map(|expr| expr.name()).collect();
        let key = self.input().schema().field(self.key).name().clone();
        match format {
            DisplayFormatType::Default | DisplayFormatType::Verbose => write!(
                f,
                "ViewKeyAggregateExec: mode=Partial, gby=[{key}], aggr=[{}]",
                aggregates.join(", ")
            ),
            DisplayFormatType::TreeRender => {
                writeln!(f, "gby={key}")?;
                write!(f, "aggr={}", aggregates.join(", "))
            }
        }
    }
}

impl ExecutionPlan for ViewKeyAggregateExec {
    fn name(&self) -> &str {
        "ViewKeyAggregateExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.aggregate.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        self.aggregate.children()
    }

    fn input_distribution_requirements(&self) -> InputDistributionRequirements {
        self.aggregate.input_distribution_requirements()
    }

    #[allow(deprecated)]
    fn required_input_distribution(&self) -> Vec<datafusion::physical_plan::Distribution> {
        self.aggregate.required_input_distribution()
    }

    fn required_input_ordering(&self) -> Vec<Option<OrderingRequirements>> {
        self.aggregate.required_input_ordering()
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        self.aggregate.maintains_input_order()
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        self.aggregate.benefits_from_input_partitioning()
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        self.aggregate.apply_expressions(f)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let aggregate = Arc::clone(&self.aggregate).replace_children(children, options)?;
        match Self::try_new(Arc::clone(&aggregate)) {
            Some(replaced) => Ok(Arc::new(replaced)),
            // new children that no longer give the key as views: DataFusion's aggregate runs
            None => Ok(aggregate),
        }
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(
                datafusion::physical_plan::execution_plan::ChildrenPropertiesMode::Recompute,
            ),
        )
    }

    fn child_stats_requests(&self, partition: Option<usize>) -> Vec<ChildStats> {
        self.aggregate.child_stats_requests(partition)
    }

    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        self.aggregate.statistics_from_inputs(input_stats, args)
    }

    fn cardinality_effect(&self) -> CardinalityEffect {
        self.aggregate.cardinality_effect()
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let schema = self.schema();
        let input = self.input().execute(partition, Arc::clone(&context))?;
        let (folds, outputs) =
            Folds::plan(&self.aggr_expr, &self.filter_expr, &self.input().schema());
        let input_schema = self.input().schema();
        let aggregates = self
            .aggr_expr
            .iter()
            .zip(outputs)
            .map(|(expr, output)| match output {
                Some(output) => Ok(Aggregate::Folded(output)),
                None => match chunked_percentile(expr, &input_schema) {
                    Some(percentile) => Ok(Aggregate::Percentile(percentile)),
                    None => group_accumulator(expr).map(Aggregate::Accumulator),
                },
            })
            .collect::<Result<Vec<_>>>()?;
        let all_folded = aggregates
            .iter()
            .all(|aggregate| matches!(aggregate, Aggregate::Folded(_)));
        let in_pieces = !aggregates.is_empty()
            && aggregates
                .iter()
                .all(|aggregate| matches!(aggregate, Aggregate::Percentile(_)));
        let partial = PartialAggregation {
            key: self.key,
            arguments: aggregate_expressions(&self.aggr_expr, &AggregateMode::Partial, 0)?,
            filters: self.filter_expr.clone(),
            aggregates,
            in_pieces,
            by_value: folds.empty_in_lanes(),
            folds,
            all_folded,
            groups: ViewGroups::default(),
            indices: Vec::new(),
            schema: Arc::clone(&schema),
            // it gives memory back by handing its states on, as DataFusion's partial aggregate
            reservation: MemoryConsumer::new(format!("ViewKeyAggregateExec[{partition}]"))
                .with_can_spill(true)
                .register(context.memory_pool()),
            baseline: BaselineMetrics::new(&self.metrics, partition),
            emitted_for_memory: MetricBuilder::new(&self.metrics)
                .counter("emitted_early_for_memory", partition),
            emitted_for_groups: MetricBuilder::new(&self.metrics)
                .counter("emitted_early_for_groups", partition),
            folded_by_value: MetricBuilder::new(&self.metrics)
                .counter("batches_folded_by_value", partition),
            pieces: MetricBuilder::new(&self.metrics).counter("states_in_pieces", partition),
            emit_at_groups: self.emit_at_groups,
        };
        // a partition's states may be several batches (see `PartialAggregation::emit`): the
        // ones not yet handed on wait in `pending`
        let batches = futures::stream::unfold(
            (input, partial, VecDeque::new(), false),
            |(mut input, mut partial, mut pending, done)| async move {
                if let Some(batch) = pending.pop_front() {
                    return Some((Ok(batch), (input, partial, pending, done)));
                }
                if done {
                    return None;
                }
                loop {
                    let last = match input.next().await {
                        Some(Ok(batch)) => match partial.aggregate(&batch) {
                            Ok(false) => continue,
                            Ok(true) => false,
                            Err(error) => {
                                return Some((Err(error), (input, partial, pending, true)));
                            }
                        },
                        Some(Err(error)) => {
                            return Some((Err(error), (input, partial, pending, true)));
                        }
                        None if partial.groups.len() == 0 => {
                            partial.baseline.done();
                            return None;
                        }
                        None => true,
                    };
                    let emitted = partial.emit();
                    if last {
                        partial.baseline.done();
                    }
                    // the groups are gone whether or not their states made batches
                    return match emitted {
                        Ok(batches) => {
                            pending.extend(batches);
                            let first = pending.pop_front()?;
                            Some((Ok(first), (input, partial, pending, last)))
                        }
                        Err(error) => Some((Err(error), (input, partial, pending, true))),
                    };
                }
            },
        );
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, batches)))
    }
}

/// A group accumulator for `expr`, as DataFusion's aggregate makes it: its own where it has
/// one, else its row accumulator behind an adapter.
fn group_accumulator(expr: &Arc<AggregateFunctionExpr>) -> Result<Box<dyn GroupsAccumulator>> {
    if expr.groups_accumulator_supported() {
        return expr.create_groups_accumulator();
    }
    let expr = Arc::clone(expr);
    Ok(Box::new(GroupsAccumulatorAdapter::new(move || {
        expr.create_accumulator()
    })))
}

/// How one aggregate's partial state is computed.
enum Aggregate {
    /// By DataFusion's group accumulator.
    Accumulator(Box<dyn GroupsAccumulator>),
    /// Read off the folds.
    Folded(Output),
    /// An exact percentile's, which can hand its states on in pieces.
    Percentile(ChunkedPercentile),
}

impl Aggregate {
    /// The group accumulator behind the aggregate, unless it is folded.
    fn accumulator(&mut self) -> Option<&mut dyn GroupsAccumulator> {
        match self {
            Aggregate::Accumulator(accumulator) => Some(accumulator.as_mut()),
            Aggregate::Percentile(percentile) => Some(percentile),
            Aggregate::Folded(_) => None,
        }
    }
}

/// One partition's aggregation in progress.
struct PartialAggregation {
    key: usize,
    /// Each aggregate's arguments (and ordering columns), as DataFusion's partial aggregate
    /// evaluates them.
    arguments: Vec<Vec<Arc<dyn PhysicalExpr>>>,
    filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
    aggregates: Vec<Aggregate>,
    /// Every aggregate is an exact percentile: the states are handed on in pieces.
    in_pieces: bool,
    /// The folded aggregates' counts and sums.
    folds: Folds,
    /// Every aggregate is folded: a batch whose key is a dictionary of few values is folded by
    /// its keys into `by_value`, then added to `folds` by the values' groups.
    all_folded: bool,
    by_value: Folds,
    groups: ViewGroups,
    /// Each row's group in the batch being aggregated.
    indices: Vec<usize>,
    schema: SchemaRef,
    reservation: MemoryReservation,
    baseline: BaselineMetrics,
    /// States handed on before the input ended: the pool refused more, or the groups reached
    /// `emit_at_groups`.
    emitted_for_memory: Count,
    emitted_for_groups: Count,
    /// Batches folded by their dictionary's keys.
    folded_by_value: Count,
    /// Pieces of states handed on as batches of their own.
    pieces: Count,
    emit_at_groups: usize,
}

impl PartialAggregation {
    /// Adds `batch` to the groups; `true` when the states are to be handed on now.
    fn aggregate(&mut self, batch: &RecordBatch) -> Result<bool> {
        let elapsed = self.baseline.elapsed_compute().clone();
        let _timer = elapsed.timer();
        let keys = batch.column(self.key);
        if self.all_folded
            && let Some(dictionary) = keys.as_dictionary_opt::<Int32Type>()
            && let Some(values) = foldable_by_value(dictionary)
        {
            self.by_value
                .update(batch, dictionary.keys().values(), values)?;
            let groups_of = self
                .groups
                .groups_of_values(dictionary, &self.by_value.rows_of_groups())?;
            self.folds
                .add(&self.by_value, &groups_of, self.groups.len());
            self.by_value.clear();
            self.folded_by_value.add(1);
        } else {
            self.aggregate_by_row(batch)?;
        }
        let size = self.groups.size()
            + self.indices.capacity() * std::mem::size_of::<usize>()
            + self.folds.size()
            + self.by_value.size()
            + self
                .aggregates
                .iter()
                .map(|aggregate| match aggregate {
                    Aggregate::Accumulator(accumulator) => accumulator.size(),
                    Aggregate::Percentile(percentile) => percentile.size(),
                    Aggregate::Folded(_) => 0,
                })
                .sum::<usize>();
        // the pool refusing more is a reason to hand the states on (if there is a group), not
        // to fail: the final aggregate above accounts for what it merges
        if self.reservation.try_resize(size).is_err() && self.groups.len() > 0 {
            self.emitted_for_memory.add(1);
            return Ok(true);
        }
        if self.groups.len() >= self.emit_at_groups {
            self.emitted_for_groups.add(1);
            return Ok(true);
        }
        Ok(false)
    }

    /// Adds `batch` row by row: each row's group, then the accumulators and the folds.
    fn aggregate_by_row(&mut self, batch: &RecordBatch) -> Result<()> {
        let keys = batch.column(self.key);
        if let Some(views) = keys.as_string_view_opt() {
            self.groups.intern(views, &mut self.indices);
        } else if let Some(dictionary) = keys.as_dictionary_opt::<Int32Type>() {
            self.groups
                .intern_dictionary(dictionary, &mut self.indices)?;
        } else {
            return Err(internal_datafusion_err!(
                "ViewKeyAggregateExec: key column is {}, not Utf8View or a dictionary",
                keys.data_type()
            ));
        }
        let groups = self.groups.len();
        for ((aggregate, arguments), filter) in self
            .aggregates
            .iter_mut()
            .zip(&self.arguments)
            .zip(&self.filters)
        {
            let Some(accumulator) = aggregate.accumulator() else {
                continue;
            };
            let values = evaluate_many(std::slice::from_ref(arguments), batch)?;
            let filter = match filter {
                Some(filter) => Some(filter.evaluate(batch)?.into_array(batch.num_rows())?),
                None => None,
            };
            let filter = match &filter {
                Some(filter) => Some(filter.as_boolean_opt().ok_or_else(|| {
                    internal_datafusion_err!("aggregate filter is {}", filter.data_type())
                })?),
                None => None,
            };
            accumulator.update_batch(&values[0], &self.indices, filter, groups)?;
        }
        if self
            .aggregates
            .iter()
            .any(|aggregate| matches!(aggregate, Aggregate::Folded(_)))
        {
            self.folds.update(batch, &self.indices, groups)?;
        }
        Ok(())
    }

    /// Every group's key and states as batches of the partial aggregate's schema; the groups
    /// start again empty. One batch, a row per group; when every aggregate is an exact
    /// percentile, a row per group for the short rest of its values and a batch of one row
    /// for each long piece of one aggregate's values (the others' states empty there), so the
    /// values are handed on where they lie, not copied (a final aggregate merges a group's
    /// rows into one state, as it does a group handed on early).
    fn emit(&mut self) -> Result<Vec<RecordBatch>> {
        let _timer = self.baseline.elapsed_compute().timer();
        let groups = self.groups.len();
        let keys: ArrayRef = Arc::new(self.groups.take());
        let key_type = self.schema.field(0).data_type();
        let keys = if keys.data_type() == key_type {
            keys
        } else {
            cast(&keys, key_type)?
        };
        let mut columns: Vec<ArrayRef> = vec![Arc::clone(&keys)];
        let mut pieces = Vec::new();
        for (index, aggregate) in self.aggregates.iter_mut().enumerate() {
            columns.extend(match aggregate {
                Aggregate::Percentile(percentile) if self.in_pieces => {
                    let (rest, long) = percentile.state_in_pieces()?;
                    pieces.extend(long.into_iter().map(|(group, list)| (index, group, list)));
                    vec![rest]
                }
                Aggregate::Folded(output) => self.folds.state(*output, groups)?,
                other => other
                    .accumulator()
                    .map_or_else(|| Ok(Vec::new()), |a| a.state(EmitTo::All))?,
            });
        }
        self.folds.clear();
        self.reservation.free();
        let mut batches = vec![RecordBatch::try_new(Arc::clone(&self.schema), columns)?];
        for (aggregate, group, list) in pieces {
            let mut columns = vec![keys.slice(group, 1)];
            for other in 0..self.aggregates.len() {
                columns.push(if other == aggregate {
                    Arc::clone(&list)
                } else {
                    empty_list()?
                });
            }
            batches.push(RecordBatch::try_new(Arc::clone(&self.schema), columns)?);
            self.pieces.add(1);
        }
        for batch in &batches {
            self.baseline.record_output(batch.num_rows());
        }
        Ok(batches)
    }
}

/// The distinct keys seen, numbered in order of first sight (a null key is a group of its own).
#[derive(Default)]
struct ViewGroups {
    by_bytes: HashMap<Box<str>, usize, foldhash::fast::RandomState>,
    /// Bytes of the keys in `by_bytes`.
    key_bytes: usize,
    null: Option<usize>,
    count: usize,
    /// The batch being interned: views already resolved, `(view, group)` by a hash of the view.
    slots: Vec<Option<(u128, usize)>>,
    /// The dictionary values last met (the Parquet reader hands out the same strings for all
    /// batches of a column chunk) and the group of each value index, [`UNSEEN`] until a row has
    /// it.
    dictionary: Option<(ArrayRef, Vec<usize>)>,
}

/// A dictionary value no row of the groups has had yet: it is not a group (a value left by a
/// filter, or of rows in another batch, must not become an empty group).
const UNSEEN: usize = usize::MAX;

impl ViewGroups {
    fn len(&self) -> usize {
        self.count
    }

    /// Bytes held (the keys, the table and its slots), for the memory pool.
    fn size(&self) -> usize {
        self.key_bytes
            + self.by_bytes.capacity()
                * (std::mem::size_of::<Box<str>>() + std::mem::size_of::<usize>() + 1)
            + self.slots.capacity() * std::mem::size_of::<Option<(u128, usize)>>()
            + self.dictionary.as_ref().map_or(0, |(_, groups)| {
                groups.capacity() * std::mem::size_of::<usize>()
            })
    }

    /// Each row's group in `keys` (string values), into `indices`: one lookup by the row's index
    /// into its dictionary, whose values are looked up by their bytes once per dictionary.
    fn intern_dictionary(
        &mut self,
        keys: &DictionaryArray<Int32Type>,
        indices: &mut Vec<usize>,
    ) -> Result<()> {
        indices.clear();
        indices.reserve(keys.len());
        let values = keys.values();
        let (strings, mut groups) = self.take_value_groups(values)?;
        // each row's group by its index: one lookup, no branch; a value no row had yet (or an
        // index outside the values) reads as `UNSEEN`, and the rows left are settled after
        indices.extend(keys.keys().values().iter().map(|index| {
            // a negative index turns into one far outside the values
            let index = usize::try_from(index.cast_unsigned()).unwrap_or(usize::MAX);
            groups.get(index).copied().unwrap_or(UNSEEN)
        }));
        let unseen = indices.contains(&UNSEEN);
        let result = if unseen || keys.null_count() > 0 {
            self.settle(keys, strings, &mut groups, indices)
        } else {
            Ok(())
        };
        self.dictionary = Some((Arc::clone(values), groups));
        result
    }

    /// The group of each value of `keys`'s dictionary that has rows (`rows[value] > 0`); the
    /// others [`UNSEEN`] or a group an earlier batch gave them. `keys` has no null key.
    fn groups_of_values(
        &mut self,
        keys: &DictionaryArray<Int32Type>,
        rows: &[i64],
    ) -> Result<Vec<usize>> {
        let values = keys.values();
        let (strings, mut groups) = self.take_value_groups(values)?;
        for (value, rows) in rows.iter().enumerate() {
            if *rows > 0 && groups.get(value) == Some(&UNSEEN) {
                groups[value] = if strings.is_null(value) {
                    self.null_group()
                } else {
                    self.group_of(strings.value(value))
                };
            }
        }
        let resolved = groups.clone();
        self.dictionary = Some((Arc::clone(values), groups));
        Ok(resolved)
    }

    /// The strings of a dictionary's `values` and the group of each (taken: the caller puts
    /// them back), kept from the batch before when they are its values.
    fn take_value_groups<'a>(
        &mut self,
        values: &'a ArrayRef,
    ) -> Result<(&'a StringArray, Vec<usize>)> {
        let strings = values.as_string_opt::<i32>().ok_or_else(|| {
            internal_datafusion_err!(
                "ViewKeyAggregateExec: dictionary of {}, not Utf8",
                values.data_type()
            )
        })?;
        let fresh = !matches!(&self.dictionary, Some((seen, _)) if same_strings(seen, strings));
        if fresh {
            self.dictionary = Some((Arc::clone(values), vec![UNSEEN; values.len()]));
        }
        let Some((_, groups)) = self.dictionary.take() else {
            return Err(internal_datafusion_err!("dictionary groups missing"));
        };
        Ok((strings, groups))
    }

    /// The rows of `keys` [`Self::intern_dictionary`] left: null keys to the null group, and
    /// values no row had before to their groups (new ones if no other row had their bytes).
    fn settle(
        &mut self,
        keys: &DictionaryArray<Int32Type>,
        strings: &StringArray,
        groups: &mut [usize],
        indices: &mut [usize],
    ) -> Result<()> {
        for (row, group) in indices.iter_mut().enumerate() {
            if keys.is_null(row) {
                *group = self.null_group();
                continue;
            }
            if *group != UNSEEN {
                continue;
            }
            let index = keys.keys().value(row);
            let Some(value) = usize::try_from(index)
                .ok()
                .filter(|index| *index < groups.len())
            else {
                return Err(internal_datafusion_err!(
                    "dictionary index {index} outside its {} values",
                    groups.len()
                ));
            };
            if groups[value] == UNSEEN {
                groups[value] = if strings.is_null(value) {
                    self.null_group()
                } else {
                    self.group_of(strings.value(value))
                };
            }
            *group = groups[value];
        }
        Ok(())
    }

    /// Each row's group in `keys`, into `indices`. Equal views in one array are equal strings
    /// (inline bytes, or the same buffer, offset and length), so a view met again in the batch
    /// needs no look at its bytes; equal strings under different views meet in `by_bytes`.
    fn intern(&mut self, keys: &StringViewArray, indices: &mut Vec<usize>) {
        indices.clear();
        indices.reserve(keys.len());
        self.slots.clear();
        self.slots.resize(VIEW_SLOTS, None);
        let views = keys.views();
        for (row, view) in views.iter().enumerate() {
            if keys.is_null(row) {
                let group = self.null_group();
                indices.push(group);
                continue;
            }
            let slot = slot_of(*view);
            if let Some((seen, group)) = self.slots[slot]
                && seen == *view
            {
                indices.push(group);
                continue;
            }
            let group = self.group_of(keys.value(row));
            self.slots[slot] = Some((*view, group));
            indices.push(group);
        }
        debug_assert_eq!(indices.len(), keys.len());
    }

    fn null_group(&mut self) -> usize {
        *self.null.get_or_insert_with(|| {
            self.count += 1;
            self.count - 1
        })
    }

    fn group_of(&mut self, key: &str) -> usize {
        if let Some(group) = self.by_bytes.get(key) {
            return *group;
        }
        let group = self.count;
        self.by_bytes.insert(key.into(), group);
        self.key_bytes += key.len();
        self.count += 1;
        group
    }

    /// The keys in group order, as views; no group is left.
    fn take(&mut self) -> StringViewArray {
        let mut keys: Vec<Option<Box<str>>> = vec![None; self.count];
        for (key, group) in self.by_bytes.drain() {
            keys[group] = Some(key);
        }
        // every group but the null one has its key
        debug_assert_eq!(
            keys.iter().filter(|key| key.is_none()).count(),
            usize::from(self.null.is_some())
        );
        self.null = None;
        self.count = 0;
        self.key_bytes = 0;
        // the groups the dictionary's values had are gone
        self.dictionary = None;
        let mut builder = StringViewBuilder::with_capacity(keys.len());
        for key in keys {
            match key {
                Some(key) => builder.append_value(key),
                None => builder.append_null(),
            }
        }
        builder.finish()
    }
}

/// The number of values of `keys`'s dictionary when its batch can be folded by key: no key is
/// null, every key is within the values, and the values are fewer than half the rows (what is
/// done per value costs less than what is saved per row).
fn foldable_by_value(keys: &DictionaryArray<Int32Type>) -> Option<usize> {
    let values = keys.values().len();
    if keys.keys().null_count() > 0 || values > keys.len() / 2 {
        return None;
    }
    // one pass the compiler vectorizes, rather than one that stops at the first bad key
    let (lowest, highest) = keys
        .keys()
        .values()
        .iter()
        .fold((i32::MAX, i32::MIN), |(lo, hi), key| {
            (lo.min(*key), hi.max(*key))
        });
    let within = lowest >= 0 && usize::try_from(highest).is_ok_and(|highest| highest < values);
    within.then_some(values)
}

/// Whether `seen` (held, so its buffers cannot be freed and their addresses reused) holds the
/// same strings as `strings` by sharing its buffers: the Parquet reader hands each batch of a
/// column chunk a new values array over the chunk's one dictionary.
fn same_strings(seen: &ArrayRef, strings: &StringArray) -> bool {
    let Some(seen) = seen.as_string_opt::<i32>() else {
        return false;
    };
    seen.len() == strings.len()
        && seen.offset() == strings.offset()
        && std::ptr::eq(seen.values().as_ptr(), strings.values().as_ptr())
        && std::ptr::eq(
            seen.offsets().inner().inner().as_ptr(),
            strings.offsets().inner().inner().as_ptr(),
        )
        && match (seen.nulls(), strings.nulls()) {
            (None, None) => true,
            (Some(a), Some(b)) => {
                a.offset() == b.offset() && std::ptr::eq(a.buffer().as_ptr(), b.buffer().as_ptr())
            }
            _ => false,
        }
}

/// The slot of `view` in the per-batch table.
fn slot_of(view: u128) -> usize {
    #[allow(clippy::cast_possible_truncation)]
    let folded = (view as u64) ^ ((view >> 64) as u64);
    // the top bits of a multiplicative hash
    (folded.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - VIEW_SLOTS.trailing_zeros())) as usize
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use datafusion::arrow::array::{Float64Array, Int64Array};
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
    use datafusion::datasource::MemTable;
    use datafusion::execution::memory_pool::GreedyMemoryPool;
    use datafusion::execution::runtime_env::RuntimeEnvBuilder;
    use datafusion::physical_plan::{collect, displayable};
    use datafusion::prelude::{SessionConfig, SessionContext};

    use super::*;

    /// Keys: short (inline in a view) and long, an empty string, nulls; each long one written
    /// again per row (equal strings under different views) in `copied` batches, once per batch
    /// (equal views) in the others; about 380 distinct keys in a batch, more than the table of
    /// views has slots.
    fn batch(schema: &SchemaRef, seed: i64, copied: bool, rows: i64) -> RecordBatch {
        let mut keys = if copied {
            StringViewBuilder::new()
        } else {
            StringViewBuilder::new().with_deduplicate_strings()
        };
        let mut values = Vec::new();
        let mut floats = Vec::new();
        for row in 0..rows {
            let i = seed * 7919 + row;
            match i % 11 {
                0 => keys.append_null(),
                1 => keys.append_value(""),
                2 | 3 => keys.append_value(format!("k{}", i % 5)),
                4..=6 => keys.append_value(format!("a-much-longer-model-name-{}", i % 4000)),
                _ => keys.append_value(format!("llama-3.1-70b-instruct-{}", i % 3)),
            }
            values.push((i % 13 != 0).then_some(i % 17));
            floats.push(i as f64 * 0.5 + (i % 29) as f64);
        }
        RecordBatch::try_new(
            Arc::clone(schema),
            vec![
                Arc::new(keys.finish()),
                Arc::new(Int64Array::from(values)),
                Arc::new(Float64Array::from(floats)),
            ],
        )
        .unwrap()
    }

    /// The test table in a session of three partitions (over `pool_bytes` of memory, if given),
    /// with the engine's `percentile_cont` where `ours`; its key `Utf8View`, or a dictionary
    /// (each batch its own) where `dictionary`.
    fn context(ours: bool, pool_bytes: Option<usize>, dictionary: bool) -> SessionContext {
        let viewed = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8View, true),
            Field::new("v", DataType::Int64, true),
            Field::new("f", DataType::Float64, false),
        ]));
        let schema = if dictionary {
            let mut fields: Vec<Field> =
                viewed.fields().iter().map(|f| f.as_ref().clone()).collect();
            fields[0] = fields[0].clone().with_data_type(dictionary_type());
            Arc::new(Schema::new(fields))
        } else {
            Arc::clone(&viewed)
        };
        let partitions: Vec<Vec<RecordBatch>> = (0..3)
            .map(|partition| {
                (0..4)
                    .map(|n| {
                        let batch = batch(&viewed, partition * 4 + n, n % 2 == 0, 1400);
                        let mut columns = batch.columns().to_vec();
                        columns[0] = cast(&columns[0], schema.field(0).data_type()).unwrap();
                        RecordBatch::try_new(Arc::clone(&schema), columns).unwrap()
                    })
                    .collect()
            })
            .collect();
        let mut runtime = RuntimeEnvBuilder::new();
        if let Some(bytes) = pool_bytes {
            runtime = runtime.with_memory_pool(Arc::new(GreedyMemoryPool::new(bytes)));
        }
        let context = SessionContext::new_with_config_rt(
            SessionConfig::new().with_target_partitions(3),
            runtime.build_arc().unwrap(),
        );
        if ours {
            context.register_udaf(crate::percentile::PercentileCont::udaf());
        }
        let table = MemTable::try_new(schema, partitions).unwrap();
        context.register_table("t", Arc::new(table)).unwrap();
        context
    }

    /// `sql` with its partial aggregates by one key run by the operator (emitting every
    /// `emit_at_groups`) and the engine's `percentile_cont`, and how many operators there were.
    async fn ours(
        sql: &str,
        emit_at_groups: usize,
        pool_bytes: Option<usize>,
        dictionary: bool,
    ) -> (Arc<dyn ExecutionPlan>, SessionContext, usize) {
        let context = context(true, pool_bytes, dictionary);
        let plan = context.sql(sql).await.unwrap();
        let plan = plan.create_physical_plan().await.unwrap();
        let mut replaced = 0;
        let ours = plan
            .transform_up(|node| {
                Ok(match ViewKeyAggregateExec::try_new(Arc::clone(&node)) {
                    Some(mut exec) => {
                        exec.emit_at_groups = emit_at_groups;
                        replaced += 1;
                        Transformed::yes(Arc::new(exec) as Arc<dyn ExecutionPlan>)
                    }
                    None => Transformed::no(node),
                })
            })
            .data()
            .unwrap();
        let shown = displayable(ours.as_ref()).indent(true).to_string();
        assert_eq!(
            shown.contains("ViewKeyAggregateExec"),
            replaced > 0,
            "{shown}"
        );
        (ours, context, replaced)
    }

    async fn answer(plan: Arc<dyn ExecutionPlan>, context: &SessionContext) -> String {
        let batches = collect(plan, context.task_ctx()).await.unwrap();
        pretty_format_batches(&batches).unwrap().to_string()
    }

    /// The answer of `sql` as DataFusion plans it alone, and as [`ours`] runs it (with the
    /// batches it folded by value).
    async fn both(
        sql: &str,
        emit_at_groups: usize,
        dictionary: bool,
    ) -> (String, String, usize, usize) {
        let theirs = context(false, None, dictionary);
        let plan = theirs.sql(sql).await.unwrap();
        let plan = plan.create_physical_plan().await.unwrap();
        let (plan_ours, context_ours, replaced) = ours(sql, emit_at_groups, None, dictionary).await;
        let answer_ours = answer(Arc::clone(&plan_ours), &context_ours).await;
        let mut by_value = 0;
        plan_ours
            .apply(|node| {
                if let Some(metrics) = node.metrics() {
                    by_value += metrics
                        .sum_by_name("batches_folded_by_value")
                        .map_or(0, |count| count.as_usize());
                }
                Ok(TreeNodeRecursion::Continue)
            })
            .unwrap();
        (answer(plan, &theirs).await, answer_ours, replaced, by_value)
    }

    /// Two rendered answers alike, numbers with a fraction to 1e-12 of their size: sums of
    /// floats folded by value add in another order (as DataFusion's own do from run to run,
    /// its partitions merging in the order they finish).
    fn same_answer(ours: &str, theirs: &str) -> bool {
        let cells = |answer: &str| -> Vec<String> {
            answer
                .lines()
                .flat_map(|line| line.split('|').map(|cell| cell.trim().to_string()))
                .collect::<Vec<_>>()
        };
        let (ours, theirs) = (cells(ours), cells(theirs));
        ours.len() == theirs.len()
            && ours.iter().zip(&theirs).all(|(a, b)| {
                a == b
                    || match (a.parse::<f64>(), b.parse::<f64>()) {
                        (Ok(x), Ok(y)) => {
                            a.contains('.') && (x - y).abs() <= 1e-12 * x.abs().max(y.abs())
                        }
                        _ => false,
                    }
            })
    }

    /// Rows the operators of `plan` handed on, and their early hand-overs for memory.
    fn handed_on(plan: &Arc<dyn ExecutionPlan>) -> (usize, usize) {
        let mut found = (0, 0);
        plan.apply(|node| {
            if node.name() == "ViewKeyAggregateExec"
                && let Some(metrics) = node.metrics()
            {
                found.0 += metrics.output_rows().unwrap_or(0);
                found.1 += metrics
                    .sum_by_name("emitted_early_for_memory")
                    .map_or(0, |count| count.as_usize());
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        found
    }

    #[tokio::test]
    async fn a_memory_pool_that_refuses_more_gets_the_states_early() {
        // no ORDER BY: a sort reserves more than this pool has; the rows are sorted here
        let sql = "SELECT k, count(*) AS n, sum(v) AS s FROM t GROUP BY k";
        let sorted = |answer: String| {
            let mut lines: Vec<String> = answer.lines().map(str::to_string).collect();
            lines.sort();
            lines
        };
        let (plan, context, _) = ours(sql, EMIT_AT_GROUPS, None, false).await;
        let roomy = sorted(answer(Arc::clone(&plan), &context).await);
        let (roomy_rows, roomy_early) = handed_on(&plan);
        // room for the final aggregate's groups, not for all three partials' as well
        let (plan, context, _) = ours(sql, EMIT_AT_GROUPS, Some(128 << 10), false).await;
        let tight = sorted(answer(Arc::clone(&plan), &context).await);
        let (tight_rows, tight_early) = handed_on(&plan);
        assert_eq!(tight, roomy);
        assert!(roomy.len() > 1000, "{}", roomy.len());
        assert_eq!(roomy_early, 0);
        // handed on when refused (rather than failing), the groups after it counted anew
        assert!(
            tight_early > 0 && tight_rows >= roomy_rows,
            "{tight_rows} {roomy_rows} {tight_early}"
        );
    }

    #[tokio::test]
    async fn partial_aggregates_by_views_answer_as_datafusions_own() {
        let statements = [
            "SELECT k, count(*) AS n, count(v) AS nv, sum(v) AS s, avg(f) AS mean, min(f) AS lo, max(v) AS hi FROM t GROUP BY k ORDER BY k NULLS FIRST",
            "SELECT k, count(*) FILTER (WHERE v > 8) AS big, sum(v) FILTER (WHERE f > 100) AS late FROM t GROUP BY k ORDER BY k NULLS FIRST",
            "SELECT k, percentile_cont(0.9) WITHIN GROUP (ORDER BY f) AS p90, approx_distinct(v) AS d, first_value(v ORDER BY f) AS first FROM t GROUP BY k ORDER BY k NULLS FIRST",
            "SELECT k, percentile_cont(0.37) WITHIN GROUP (ORDER BY f DESC) AS p FROM t WHERE v IS NOT NULL GROUP BY k ORDER BY k NULLS FIRST",
            "SELECT k, min(k) AS same, count(DISTINCT v) AS dv FROM t WHERE f > 50 GROUP BY k HAVING count(*) > 2 ORDER BY k NULLS FIRST",
            // every aggregate folded, no null key: a dictionary's batches folded by its keys
            "SELECT k, count(*) AS n, count(v) AS nv, sum(v) AS s, avg(f) AS mean, sum(f * 3) AS sf FROM t WHERE k IS NOT NULL GROUP BY k ORDER BY k",
            // folded: float sums, the average of integers (cast), a count of a literal, an
            // argument shared by three aggregates; the long keys' `w` is always null (their sum
            // and mean are null), the count of a null literal is DataFusion's
            "SELECT k, sum(f) AS sf, avg(v) AS av, count(1) AS one, count(NULL) AS none, count(w) AS nw, sum(w) AS sw, avg(w * 0.5) AS aw FROM (SELECT *, CASE WHEN length(k) > 20 THEN NULL ELSE v END AS w FROM t) GROUP BY k ORDER BY k NULLS FIRST",
        ];
        for sql in statements {
            for (emit_at_groups, dictionary) in [
                (EMIT_AT_GROUPS, false),
                (3, false),
                (EMIT_AT_GROUPS, true),
                (3, true),
            ] {
                let (theirs, ours, replaced, by_value) =
                    both(sql, emit_at_groups, dictionary).await;
                assert!(
                    same_answer(&ours, &theirs),
                    "{sql}, emitting every {emit_at_groups} groups, dictionary: {dictionary}\n{ours}\n{theirs}"
                );
                assert_eq!(
                    by_value > 0,
                    dictionary && sql.contains("WHERE k IS NOT NULL"),
                    "{sql}: {by_value} batches folded by value"
                );
                // hundreds of keys and a null group in the answer
                assert!(theirs.lines().count() > 300, "{sql}: {theirs}");
                if !sql.contains("DISTINCT") {
                    assert_eq!(replaced, 1, "{sql}");
                }
            }
        }
    }

    #[test]
    fn dictionary_values_become_groups_only_when_a_row_has_them() {
        // one values array for two batches, as the Parquet reader hands out a column chunk's
        let values: ArrayRef = Arc::new(datafusion::arrow::array::StringArray::from(vec![
            Some("qwen"),
            Some("unused"),
            None,
            Some("mistral-small-24b-instruct"),
            Some("qwen"),
        ]));
        let batch = |keys: Vec<Option<i32>>| {
            DictionaryArray::<Int32Type>::try_new(keys.into(), Arc::clone(&values)).unwrap()
        };
        let mut groups = ViewGroups::default();
        let mut indices = Vec::new();
        groups
            .intern_dictionary(&batch(vec![Some(3), None, Some(0), Some(2)]), &mut indices)
            .unwrap();
        // a null key and a null value are the one null group
        assert_eq!(indices, [0, 1, 2, 1]);
        // the same array again: its resolved values kept; an equal string at another index
        groups
            .intern_dictionary(&batch(vec![Some(4), Some(0), Some(3)]), &mut indices)
            .unwrap();
        assert_eq!(indices, [2, 2, 0]);
        assert_eq!(groups.len(), 3, "`unused` is no group");
        // a batch whose values array is new over the same buffers (as the reader makes each
        // batch's) keeps the values resolved: index 3 has no row here and is still known
        let remade = datafusion::arrow::array::make_array(batch(vec![Some(0)]).to_data());
        groups
            .intern_dictionary(remade.as_dictionary::<Int32Type>(), &mut indices)
            .unwrap();
        assert_eq!(indices, [2]);
        assert_eq!(groups.dictionary.as_ref().map(|(_, map)| map[3]), Some(0));
        let keys: Vec<Option<String>> = groups
            .take()
            .iter()
            .map(|key| key.map(str::to_string))
            .collect();
        assert_eq!(
            keys,
            [
                Some("mistral-small-24b-instruct".into()),
                None,
                Some("qwen".into())
            ]
        );
        // after the groups were handed on, numbered anew
        groups
            .intern_dictionary(&batch(vec![Some(0), Some(0)]), &mut indices)
            .unwrap();
        assert_eq!(indices, [0, 0]);
        assert_eq!(groups.len(), 1);
    }

    #[test]
    fn equal_strings_under_different_views_are_one_group() {
        let mut copied = StringViewBuilder::new();
        let mut shared = StringViewBuilder::new().with_deduplicate_strings();
        for builder in [&mut copied, &mut shared] {
            for key in ["qwen", "mistral-small-24b-instruct", "", "qwen"] {
                builder.append_value(key);
            }
            builder.append_null();
            builder.append_value("mistral-small-24b-instruct");
        }
        let (copied, shared) = (copied.finish(), shared.finish());
        assert_ne!(copied.views()[1], copied.views()[5]);
        assert_eq!(shared.views()[1], shared.views()[5]);
        let mut groups = ViewGroups::default();
        let mut indices = Vec::new();
        groups.intern(&copied, &mut indices);
        assert_eq!(indices, [0, 1, 2, 0, 3, 1]);
        groups.intern(&shared, &mut indices);
        assert_eq!(indices, [0, 1, 2, 0, 3, 1]);
        assert_eq!(groups.len(), 4);
        let keys = groups.take();
        let keys: Vec<Option<&str>> = keys.iter().collect();
        assert_eq!(
            keys,
            [
                Some("qwen"),
                Some("mistral-small-24b-instruct"),
                Some(""),
                None
            ]
        );
        assert_eq!(groups.len(), 0);
    }
}
