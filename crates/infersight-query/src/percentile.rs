//! The engine's `percentile_cont` (alias `quantile_cont`), registered in every session over
//! DataFusion's own: planned, typed, simplified and answered exactly as DataFusion's (every
//! part of the function is DataFusion's, and the same arithmetic picks the value), with a
//! `GROUP BY` accumulator for `Float64` of its own that moves each value fewer times.
//!
//! An exact percentile keeps every value of its group until the end. DataFusion's accumulator
//! pushes each value onto a growing vector per group (each growth copies the group's values
//! into fresh pages), flattens the groups into the partial state (a copy), and the final
//! aggregate extends a growing vector per group with the partial states (a copy, and again the
//! growths). Over 10M rows by model that was 37 % of the statement's CPU in `memmove` and 103k
//! page faults (bench/README.md, "Query"). Here a group's values are chunks that never move:
//! filled in place as rows arrive, long merged partial states kept as the buffers they came in,
//! each value copied once into the state a partial aggregate hands on. A large group's
//! percentile is then picked from a window around its rank (bounds from a sample, one counting
//! pass, a selection among the values between them: a few percent of the group unless many
//! values tie), not from a copy of all its values; the answer is the same, the window only
//! decides how much is copied and reordered.
//!
//! The engine's own partial aggregate ([`crate::view_aggregate`]) asks for a group's state in
//! pieces instead ([`ChunkedPercentile::state_in_pieces`]) when every aggregate of its
//! statement is one of these: each long chunk handed on over its own buffer, only the short
//! rest copied. With the final aggregate merging the partitions' streams in one partition
//! ([`crate::group_views`]), a value is then written once, where a row first puts it, and read
//! where it lies: over 10M rows by model 27k page faults instead of 66–77k, 0.6× the CPU.
//!
//! Where a partial aggregate stops grouping (a key of many values), it asks the accumulator to
//! turn rows into states; DataFusion's asserts one argument, is given three, and panics. Ours
//! builds the states itself, and DataFusion's, kept for the calls ours does not take (`Float32`,
//! a percentile that is not a plain literal), is handed only the value.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Float64Array, Float64Builder, ListArray,
};
use datafusion::arrow::buffer::{BooleanBuffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Float64Type, Schema};
use datafusion::common::{Result, ScalarValue, exec_datafusion_err, internal_datafusion_err};
use datafusion::functions_aggregate::percentile_cont::percentile_cont_udaf;
use datafusion::logical_expr::expr::{
    AggregateFunction, AggregateFunctionParams, WindowFunctionParams,
};
use datafusion::logical_expr::function::{
    AccumulatorArgs, AggregateFunctionSimplification, StateFieldsArgs,
};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, EmitTo, Expr, GroupsAccumulator,
    Operator, ReversedUDAF, SetMonotonicity, Signature, StatisticsArgs,
};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::{PhysicalExpr, PhysicalSortExpr};
use datafusion::physical_plan::expressions::Literal;

/// Values of a group's first chunk (small: a `GROUP BY` may have many groups of a few values);
/// each next chunk holds as many as the group has filled so far, up to [`MAX_CHUNK`].
const MIN_CHUNK: usize = 8;
const MAX_CHUNK: usize = 1 << 16;

/// A merged partial state of at least this many values is kept as it came; a shorter one is
/// copied into the group's chunks.
const MERGE_KEPT_FROM: usize = 1024;

/// DataFusion's interpolation weight is quantized to this many steps (`percentile_cont.rs`).
const INTERPOLATION_PRECISION: f64 = 1_000_000.0;

/// The function; see the module documentation.
#[derive(Debug)]
pub(crate) struct PercentileCont {
    inner: Arc<dyn AggregateUDFImpl>,
}

impl PercentileCont {
    /// The function as a session registers it (under DataFusion's names, replacing its own).
    pub(crate) fn udaf() -> AggregateUDF {
        AggregateUDF::new_from_impl(Self {
            inner: Arc::clone(percentile_cont_udaf().inner()),
        })
    }
}

// every instance wraps DataFusion's one function
impl PartialEq for PercentileCont {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl Eq for PercentileCont {}

impl Hash for PercentileCont {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.inner.name().hash(state);
    }
}

/// The percentile a call with arguments `exprs` and ordering `order_bys` asks for, as
/// DataFusion's accumulator reads it (reversed under `ORDER BY … DESC`), or `None` when it is
/// not a plain `Float64` literal in [0, 1].
fn requested_percentile(
    exprs: &[Arc<dyn PhysicalExpr>],
    order_bys: &[PhysicalSortExpr],
) -> Option<f64> {
    let literal = exprs.get(1)?.downcast_ref::<Literal>()?;
    let ScalarValue::Float64(Some(percentile)) = literal.value() else {
        return None;
    };
    if !(0.0..=1.0).contains(percentile) {
        return None;
    }
    let descending = order_bys
        .first()
        .is_some_and(|sort| sort.options.descending);
    Some(if descending {
        1.0 - percentile
    } else {
        *percentile
    })
}

impl AggregateUDFImpl for PercentileCont {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.inner.accumulator(args)
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn schema_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        self.inner.schema_name(params)
    }

    fn human_display(&self, params: &AggregateFunctionParams) -> Result<String> {
        self.inner.human_display(params)
    }

    fn window_function_schema_name(&self, params: &WindowFunctionParams) -> Result<String> {
        self.inner.window_function_schema_name(params)
    }

    fn display_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        self.inner.display_name(params)
    }

    fn window_function_display_name(&self, params: &WindowFunctionParams) -> Result<String> {
        self.inner.window_function_display_name(params)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        let ours = if args.is_distinct || args.expr_fields[0].data_type() != &DataType::Float64 {
            None
        } else {
            requested_percentile(args.exprs, args.order_bys)
        };
        match ours {
            Some(percentile) => Ok(Box::new(ChunkedPercentile::new(percentile))),
            // DataFusion's (which says what is wrong with the percentile, if anything)
            None => Ok(Box::new(ValueOnlyStates(
                self.inner.create_groups_accumulator(args)?,
            ))),
        }
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.inner.create_sliding_accumulator(args)
    }

    fn with_beneficial_ordering(
        self: Arc<Self>,
        beneficial_ordering: bool,
    ) -> Result<Option<Arc<dyn AggregateUDFImpl>>> {
        // DataFusion's function answers for itself: an ordering changes nothing of it
        Arc::clone(&self.inner)
            .with_beneficial_ordering(beneficial_ordering)
            .map(|function| {
                function.map(|inner| Arc::new(Self { inner }) as Arc<dyn AggregateUDFImpl>)
            })
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.inner.order_sensitivity()
    }

    fn simplify(&self) -> Option<AggregateFunctionSimplification> {
        self.inner.simplify()
    }

    fn simplify_expr_op_literal(
        &self,
        function: &AggregateFunction,
        arg: &Expr,
        op: Operator,
        literal: &Expr,
        arg_is_left: bool,
    ) -> Result<Option<Expr>> {
        self.inner
            .simplify_expr_op_literal(function, arg, op, literal, arg_is_left)
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        self.inner.reverse_expr()
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn return_field(&self, arg_fields: &[FieldRef]) -> Result<FieldRef> {
        self.inner.return_field(arg_fields)
    }

    fn is_nullable(&self) -> bool {
        self.inner.is_nullable()
    }

    fn is_descending(&self) -> Option<bool> {
        self.inner.is_descending()
    }

    fn value_from_stats(&self, statistics_args: &StatisticsArgs) -> Option<ScalarValue> {
        self.inner.value_from_stats(statistics_args)
    }

    fn default_value(&self, data_type: &DataType) -> Result<ScalarValue> {
        self.inner.default_value(data_type)
    }

    fn supports_null_handling_clause(&self) -> bool {
        self.inner.supports_null_handling_clause()
    }

    fn supports_within_group_clause(&self) -> bool {
        self.inner.supports_within_group_clause()
    }

    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.inner.set_monotonicity(data_type)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
}

/// A group's values (a multiset: their order does not matter): the chunk being filled, the
/// full ones, and long partial states merged as they came.
#[derive(Debug, Default)]
struct GroupValues {
    filling: Vec<f64>,
    chunks: Vec<Chunk>,
    len: usize,
    /// Values filled in place (their chunks' growth follows these alone).
    filled: usize,
    /// Bytes the group alone holds: its filled chunks and its list of chunks (merged buffers
    /// are counted once by the accumulator, see [`MergedBuffers`]).
    bytes: usize,
}

#[derive(Debug)]
enum Chunk {
    Filled(Vec<f64>),
    /// The values of a merged partial state: a slice of its list's buffer, kept alive.
    Merged(ScalarBuffer<f64>),
}

impl GroupValues {
    /// The chunk being filled, with room for a value: a full one is set aside for a new one as
    /// large as the values filled so far (within [`MIN_CHUNK`], [`MAX_CHUNK`]). Bytes it
    /// allocates are added to the group's and to `held`.
    fn room(&mut self, held: &mut usize) -> &mut Vec<f64> {
        if self.filling.len() == self.filling.capacity() {
            let chunks_before = self.chunks.capacity();
            let next = Vec::with_capacity(self.filled.clamp(MIN_CHUNK, MAX_CHUNK));
            let mut grown = next.capacity() * std::mem::size_of::<f64>();
            let full = std::mem::replace(&mut self.filling, next);
            // empty only before the group's first value (nothing allocated yet)
            if !full.is_empty() {
                self.chunks.push(Chunk::Filled(full));
            }
            grown += (self.chunks.capacity() - chunks_before) * std::mem::size_of::<Chunk>();
            self.bytes += grown;
            *held += grown;
        }
        &mut self.filling
    }

    fn push(&mut self, value: f64, held: &mut usize) {
        self.room(held).push(value);
        self.len += 1;
        self.filled += 1;
    }

    fn extend(&mut self, mut values: &[f64], held: &mut usize) {
        while !values.is_empty() {
            let chunk = self.room(held);
            let taken = (chunk.capacity() - chunk.len()).min(values.len());
            chunk.extend_from_slice(&values[..taken]);
            values = &values[taken..];
            self.len += taken;
            self.filled += taken;
        }
    }

    /// Adds a partial state's values: a short one copied (a partial aggregate that skipped
    /// grouping hands on one value per row), a long one kept where it is (and noted in
    /// `merged`).
    fn merge(&mut self, values: &Float64Array, held: &mut usize, merged: &mut MergedBuffers) {
        if values.null_count() > 0 {
            values
                .iter()
                .flatten()
                .for_each(|value| self.push(value, held));
        } else if values.len() < MERGE_KEPT_FROM {
            self.extend(values.values(), held);
        } else {
            let chunks_before = self.chunks.capacity();
            // most groups hold no merged state, or one per partition
            self.chunks.reserve_exact(1);
            let grown = (self.chunks.capacity() - chunks_before) * std::mem::size_of::<Chunk>();
            self.bytes += grown;
            *held += grown + merged.keep(values.values());
            self.chunks.push(Chunk::Merged(values.values().clone()));
            self.len += values.len();
        }
    }

    /// The group's values, slice by slice.
    fn slices(&self) -> impl Iterator<Item = &[f64]> {
        std::iter::once(self.filling.as_slice()).chain(self.chunks.iter().map(
            |chunk| match chunk {
                Chunk::Filled(values) => values.as_slice(),
                Chunk::Merged(values) => &values[..],
            },
        ))
    }

    /// Appends the group's values to `out`.
    fn copy_to(&self, out: &mut Vec<f64>) {
        for slice in self.slices() {
            out.extend_from_slice(slice);
        }
    }

    /// The group's `percentile`: a large group through [`window_percentile`] where its window
    /// holds the ranks, else (and for a small group) all values copied into `scratch` and
    /// selected there.
    fn percentile(&self, percentile: f64, scratch: &mut Vec<f64>) -> Option<f64> {
        if self.len >= WINDOW_FROM
            && let Some(answer) = window_percentile(self, percentile, scratch)
        {
            return Some(answer);
        }
        scratch.clear();
        self.copy_to(scratch);
        percentile_of(scratch, percentile)
    }

    /// The bytes the accumulator holds no longer once this group is gone.
    fn release(&self, merged: &mut MergedBuffers) -> usize {
        let buffers: usize = self
            .chunks
            .iter()
            .filter_map(|chunk| match chunk {
                Chunk::Merged(values) => Some(merged.release(values)),
                Chunk::Filled(_) => None,
            })
            .sum();
        self.bytes + buffers
    }
}

/// The accumulator of `expr` when it is a call [`ChunkedPercentile`] takes (this module's
/// function, not `DISTINCT`, over `Float64` values of `input`, a plain literal percentile), for
/// an operator that hands its states on in pieces ([`ChunkedPercentile::state_in_pieces`]).
pub(crate) fn chunked_percentile(
    expr: &AggregateFunctionExpr,
    input: &Schema,
) -> Option<ChunkedPercentile> {
    expr.fun().inner().downcast_ref::<PercentileCont>()?;
    let exprs = expr.expressions();
    let float = exprs.first()?.data_type(input).ok()? == DataType::Float64;
    if expr.is_distinct() || !float {
        return None;
    }
    requested_percentile(&exprs, expr.order_bys()).map(ChunkedPercentile::new)
}

/// A list array of one row: `values`, their buffer handed on as it is.
fn one_list(values: ScalarBuffer<f64>) -> Result<ArrayRef> {
    let len = values.len();
    Ok(Arc::new(ListArray::try_new(
        Arc::new(Field::new_list_field(DataType::Float64, true)),
        OffsetBuffer::from_lengths([len]),
        Arc::new(Float64Array::new(values, None)),
        None,
    )?))
}

/// A list array of one row with no values: the state of an aggregate whose group's values
/// travel in another aggregate's piece.
pub(crate) fn empty_list() -> Result<ArrayRef> {
    one_list(ScalarBuffer::from(Vec::<f64>::new()))
}

/// The buffers merged partial states are slices of, each counted once however many groups
/// hold a slice of it: by address, its bytes and the chunks holding it.
#[derive(Debug, Default)]
struct MergedBuffers(HashMap<usize, (usize, usize)>);

impl MergedBuffers {
    fn key(values: &ScalarBuffer<f64>) -> usize {
        values.inner().data_ptr().as_ptr() as usize
    }

    /// Notes a chunk holding a slice of `values`'s buffer; the bytes newly held (the whole
    /// buffer the first time: a slice keeps all of it alive).
    fn keep(&mut self, values: &ScalarBuffer<f64>) -> usize {
        let bytes = values
            .inner()
            .capacity()
            .max(values.len() * std::mem::size_of::<f64>());
        let (held, chunks) = self.0.entry(Self::key(values)).or_insert((bytes, 0));
        *chunks += 1;
        if *chunks == 1 { *held } else { 0 }
    }

    /// Notes a chunk holding `values` gone; the bytes no longer held.
    fn release(&mut self, values: &ScalarBuffer<f64>) -> usize {
        let key = Self::key(values);
        match self.0.get_mut(&key) {
            Some((_, chunks)) if *chunks > 1 => {
                *chunks -= 1;
                0
            }
            Some(_) => self.0.remove(&key).map_or(0, |(bytes, _)| bytes),
            None => 0,
        }
    }
}

/// DataFusion's accumulator of a call [`ChunkedPercentile`] does not take (`Float32`, a
/// percentile that is not a plain `Float64` literal), handed only the value where a partial
/// aggregate turns rows into states: DataFusion's asserts one argument, is given three (the
/// value, the percentile, the `ORDER BY` column), and panics.
struct ValueOnlyStates(Box<dyn GroupsAccumulator>);

impl GroupsAccumulator for ValueOnlyStates {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.0
            .update_batch(values, group_indices, opt_filter, total_num_groups)
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        self.0.evaluate(emit_to)
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        self.0.state(emit_to)
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.0.merge_batch(values, group_indices, total_num_groups)
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        self.0
            .convert_to_state(values.get(..1).unwrap_or(values), opt_filter)
    }

    fn size(&self) -> usize {
        self.0.size()
    }
}

/// The `GROUP BY` accumulator of an exact percentile of `Float64` values.
#[derive(Debug)]
pub(crate) struct ChunkedPercentile {
    percentile: f64,
    groups: Vec<GroupValues>,
    /// Bytes of values held: every group's chunks, and each merged buffer once.
    held: usize,
    merged: MergedBuffers,
}

impl ChunkedPercentile {
    fn new(percentile: f64) -> Self {
        Self {
            percentile,
            groups: Vec::new(),
            held: 0,
            merged: MergedBuffers::default(),
        }
    }

    /// The groups `emit_to` hands on, no longer counted as held.
    fn take(&mut self, emit_to: EmitTo) -> Vec<GroupValues> {
        let groups = emit_to.take_needed(&mut self.groups);
        for group in &groups {
            self.held = self.held.saturating_sub(group.release(&mut self.merged));
        }
        groups
    }
}

impl ChunkedPercentile {
    /// Every group's state, in pieces a final aggregate merges without copying: each chunk of
    /// at least [`MERGE_KEPT_FROM`] values (which the final keeps as it comes) alone, as a
    /// list of one row over the chunk's own buffer, with its group's index; and the rest of
    /// every group (short chunks, the one being filled when short) copied into one list per
    /// group, a row for each group. [`GroupsAccumulator::state`] copies every value into one
    /// list per group instead: a partial aggregate that hands on a whole group in one row.
    pub(crate) fn state_in_pieces(&mut self) -> Result<(ArrayRef, Vec<(usize, ArrayRef)>)> {
        let groups = self.take(EmitTo::All);
        let long = |slice: &[f64]| slice.len() >= MERGE_KEPT_FROM;
        let rest = lists_of(&groups, |slice| !long(slice))?;
        let mut pieces = Vec::new();
        for (index, group) in groups.into_iter().enumerate() {
            let chunks = group.chunks.into_iter().map(|chunk| match chunk {
                Chunk::Filled(values) => ScalarBuffer::from(values),
                Chunk::Merged(values) => values,
            });
            for values in std::iter::once(ScalarBuffer::from(group.filling)).chain(chunks) {
                if long(&values) {
                    pieces.push((index, one_list(values)?));
                }
            }
        }
        Ok((rest, pieces))
    }
}

/// One list per group of `groups`: the values of each group's slices that `kept` keeps.
fn lists_of(groups: &[GroupValues], kept: impl Fn(&[f64]) -> bool) -> Result<ArrayRef> {
    let total: usize = groups
        .iter()
        .flat_map(GroupValues::slices)
        .filter(|slice| kept(slice))
        .map(<[f64]>::len)
        .sum();
    let mut values = Vec::with_capacity(total);
    let mut offsets = Vec::with_capacity(groups.len() + 1);
    offsets.push(0_i32);
    for group in groups {
        for slice in group.slices().filter(|slice| kept(slice)) {
            values.extend_from_slice(slice);
        }
        offsets.push(i32::try_from(values.len()).map_err(|_| {
            exec_datafusion_err!(
                "percentile_cont: more than {} values to hand on from one partition",
                i32::MAX
            )
        })?);
    }
    Ok(Arc::new(ListArray::try_new(
        Arc::new(Field::new_list_field(DataType::Float64, true)),
        OffsetBuffer::new(offsets.into()),
        Arc::new(Float64Array::from(values)),
        None,
    )?))
}

/// The values a partial aggregate reads (the value, then the percentile and the `ORDER BY`
/// column, which repeat it), as `Float64`.
fn first_values(values: &[ArrayRef]) -> Result<&Float64Array> {
    values
        .first()
        .and_then(|values| values.as_primitive_opt::<Float64Type>())
        .ok_or_else(|| internal_datafusion_err!("percentile_cont: not Float64 values"))
}

impl GroupsAccumulator for ChunkedPercentile {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        let values = first_values(values)?;
        self.groups
            .resize_with(total_num_groups, GroupValues::default);
        let held = &mut self.held;
        if values.null_count() == 0 && opt_filter.is_none() {
            for (group, value) in group_indices.iter().zip(values.values()) {
                self.groups[*group].push(*value, held);
            }
            return Ok(());
        }
        for (row, group) in group_indices.iter().enumerate() {
            let kept = values.is_valid(row)
                && opt_filter.is_none_or(|filter| filter.is_valid(row) && filter.value(row));
            if kept {
                self.groups[*group].push(values.value(row), held);
            }
        }
        Ok(())
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        let lists = values
            .first()
            .and_then(|values| values.as_list_opt::<i32>())
            .ok_or_else(|| internal_datafusion_err!("percentile_cont: state is not a list"))?;
        self.groups
            .resize_with(total_num_groups, GroupValues::default);
        for (row, group) in group_indices.iter().enumerate() {
            if lists.is_null(row) {
                continue;
            }
            let list = lists.value(row);
            let list = list.as_primitive_opt::<Float64Type>().ok_or_else(|| {
                internal_datafusion_err!("percentile_cont: state of {}", list.data_type())
            })?;
            self.groups[*group].merge(list, &mut self.held, &mut self.merged);
        }
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let groups = self.take(emit_to);
        let mut answers = Float64Builder::with_capacity(groups.len());
        let mut scratch = Vec::new();
        for group in groups {
            answers.append_option(group.percentile(self.percentile, &mut scratch));
        }
        Ok(Arc::new(answers.finish()))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let groups = self.take(emit_to);
        Ok(vec![lists_of(&groups, |_| true)?])
    }

    /// Each row as a group of its own (a partial aggregate that reduces little skips grouping):
    /// a list of its value, null where the value is null or filtered out. DataFusion's own
    /// accumulator asserts it is given one argument, is given three (the value, the percentile
    /// and the `ORDER BY` column), and panics.
    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let values = first_values(values)?;
        let rows = i32::try_from(values.len()).map_err(|_| {
            exec_datafusion_err!("percentile_cont: a batch of {} rows", values.len())
        })?;
        let kept: BooleanBuffer = (0..values.len())
            .map(|row| {
                values.is_valid(row)
                    && opt_filter.is_none_or(|filter| filter.is_valid(row) && filter.value(row))
            })
            .collect();
        let list = ListArray::try_new(
            Arc::new(Field::new_list_field(DataType::Float64, true)),
            OffsetBuffer::new((0..=rows).collect::<Vec<i32>>().into()),
            Arc::new(Float64Array::new(values.values().clone(), None)),
            Some(NullBuffer::new(kept)),
        )?;
        Ok(vec![Arc::new(list)])
    }

    fn size(&self) -> usize {
        self.held
            + self.groups.capacity() * std::mem::size_of::<GroupValues>()
            + self.merged.0.capacity() * std::mem::size_of::<(usize, (usize, usize))>()
    }
}

/// The ranks a percentile of `len` values interpolates between (`percentile × (len − 1)`, as
/// DataFusion computes it): the index, the rank below or at it and the rank above or at it.
fn ranks(len: usize, percentile: f64) -> (f64, usize, usize) {
    let index = percentile * ((len - 1) as f64);
    (index, index.floor() as usize, index.ceil() as usize)
}

/// The `percentile` of `values` (reordered), by DataFusion's arithmetic: the value at rank
/// `percentile × (n − 1)` in IEEE total order, interpolated between the two around it with a
/// weight quantized to [`INTERPOLATION_PRECISION`] steps; `None` for no values.
fn percentile_of(values: &mut [f64], percentile: f64) -> Option<f64> {
    let len = values.len();
    if len <= 1 {
        return values.first().copied();
    }
    let (index, lower_index, upper_index) = ranks(len, percentile);
    interpolated(values, index, lower_index, lower_index, upper_index)
}

/// The value at rank `rank` of `values` (reordered) in total order, interpolated towards the
/// next rank's value where `upper_index` is past `lower_index` (`index`, `lower_index` and
/// `upper_index` are ranks among all of the group's values, `rank` is `lower_index` among
/// `values`; the caller sees that `values` holds `rank` and the rank after it).
fn interpolated(
    values: &mut [f64],
    index: f64,
    rank: usize,
    lower_index: usize,
    upper_index: usize,
) -> Option<f64> {
    let (_, lower, above) = values.select_nth_unstable_by(rank, f64::total_cmp);
    let lower = *lower;
    if lower_index == upper_index {
        return Some(lower);
    }
    // the value at the next rank: the least of those above
    let upper = above.iter().copied().min_by(f64::total_cmp)?;
    let fraction = index - (lower_index as f64);
    let weight = ((fraction * INTERPOLATION_PRECISION) as usize) as f64 / INTERPOLATION_PRECISION;
    Some(lower + (upper - lower) * weight)
}

/// A group of at least this many values is answered through a window ([`window_percentile`]).
const WINDOW_FROM: usize = 1 << 14;

/// Values the window's bounds are estimated from (every `len / WINDOW_SAMPLE`-th: up to a
/// quarter more).
const WINDOW_SAMPLE: usize = 4096;

/// A value's place in IEEE total order as an integer (`f64::total_cmp`'s own mapping): the
/// window's scan compares these integers instead of calling `total_cmp` per value.
fn total_order_key(value: f64) -> i64 {
    let bits = value.to_bits() as i64;
    bits ^ ((((bits >> 63) as u64) >> 1) as i64)
}

/// The `percentile` of a large group without copying or reordering all of its values: bounds
/// around the percentile's rank estimated from an evenly strided sample of
/// [`WINDOW_SAMPLE`] values (four standard deviations of a sample rank and more either side),
/// then one pass counting the values below the window and copying those in it into `window`,
/// where the ranks are selected. The answer is exact whatever the sample: every value below
/// the window sorts before every value in it, so a rank among all values is a rank in the
/// window shifted by the count below. `None` where the window misses the ranks (a sample the
/// values' order fooled); the caller then selects among all values.
fn window_percentile(group: &GroupValues, percentile: f64, window: &mut Vec<f64>) -> Option<f64> {
    let len = group.len;
    let (index, lower_index, upper_index) = ranks(len, percentile);
    let stride = (len / WINDOW_SAMPLE).max(1);
    let mut sample = Vec::with_capacity(len / stride + 1);
    // every `stride`-th value of the group, counted across its slices
    let mut start = 0;
    for slice in group.slices() {
        let first = (stride - start % stride) % stride;
        let sampled = slice.iter().skip(first).step_by(stride);
        sample.extend(sampled.map(|value| total_order_key(*value)));
        start += slice.len();
    }
    sample.sort_unstable();
    let last = sample.len().checked_sub(1)?;
    let fraction = index / ((len - 1) as f64);
    let center = fraction * last as f64;
    let margin = 4.0 * (sample.len() as f64 * fraction * (1.0 - fraction)).sqrt() + 8.0;
    let low = (center - margin).floor();
    let high = (center + margin).ceil();
    // a bound past the sample's ends leaves that side open
    let low = if low < 0.0 {
        i64::MIN
    } else {
        sample[low as usize]
    };
    let high = if high > last as f64 {
        i64::MAX
    } else {
        sample[high as usize]
    };
    let mut below = 0_usize;
    window.clear();
    for slice in group.slices() {
        for value in slice {
            let key = total_order_key(*value);
            below += usize::from(key < low);
            if key >= low && key <= high {
                window.push(*value);
            }
        }
    }
    if lower_index < below || upper_index >= below + window.len() {
        return None;
    }
    interpolated(window, index, lower_index - below, lower_index, upper_index)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use datafusion::arrow::array::{Float32Array, Int64Array, StringArray};
    use datafusion::arrow::datatypes::Schema;
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::datasource::MemTable;
    use datafusion::physical_expr::PhysicalSortExpr;
    use datafusion::physical_plan::PhysicalExpr;
    use datafusion::physical_plan::expressions::col;
    use datafusion::prelude::{SessionConfig, SessionContext};

    use infersight_model::rng::SplitMix64;

    use super::*;

    /// Groups of very different sizes (one value, only nulls, a group over several chunks),
    /// values with nulls, ties, a negative zero and a NaN, in three partitions.
    fn context(ours: bool, seed: u64) -> SessionContext {
        let schema = Arc::new(Schema::new(vec![
            Field::new("g", DataType::Utf8, true),
            Field::new("n", DataType::Int64, false),
            Field::new("v", DataType::Float64, true),
            Field::new("id", DataType::Int64, false),
            Field::new("w", DataType::Float32, true),
        ]));
        let mut random = SplitMix64::new(seed);
        let mut id = 0_i64;
        let mut partitions = vec![Vec::new(), Vec::new(), Vec::new()];
        for batch in 0..12 {
            let rows = if batch == 5 { 90_000 } else { 3_000 };
            let (mut groups, mut ns, mut values, mut ids, mut narrow) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for row in 0..rows {
                let draw = random.uniform();
                let group = match (batch, row) {
                    (5, _) => Some("big".to_string()),
                    (0, 0) => Some("single".to_string()),
                    _ if draw < 0.02 => Some("nulls only".to_string()),
                    _ if draw < 0.05 => None,
                    _ => Some(format!("g{}", (draw * 40.0) as u32)),
                };
                let value = match group.as_deref() {
                    Some("nulls only") => None,
                    _ if row % 17 == 3 => None,
                    _ if row % 1001 == 7 => Some(-0.0),
                    _ if batch == 7 && row == 11 => Some(f64::NAN),
                    // ties: values on a grid of 1/8
                    _ if row % 5 == 0 => Some((random.uniform() * 800.0).round() / 8.0),
                    _ => Some(random.uniform() * 1_000.0 - 100.0),
                };
                groups.push(group);
                ns.push(i64::from(row % 7));
                narrow.push(value.map(|value| value as f32));
                values.push(value);
                ids.push(id);
                id += 1;
            }
            partitions[batch % 3].push(
                RecordBatch::try_new(
                    Arc::clone(&schema),
                    vec![
                        Arc::new(StringArray::from(groups)),
                        Arc::new(Int64Array::from(ns)),
                        Arc::new(Float64Array::from(values)),
                        Arc::new(Int64Array::from(ids)),
                        Arc::new(Float32Array::from(narrow)),
                    ],
                )
                .unwrap(),
            );
        }
        let mut config = SessionConfig::new().with_target_partitions(3);
        if ours {
            // a partial aggregate that reduces little hands its rows on as states
            // (`convert_to_state`) from its 1,000th row on; DataFusion's own accumulator panics
            // there, so its answers are taken with the default (no partition has 100,000 rows)
            let execution = &mut config.options_mut().execution;
            execution.skip_partial_aggregation_probe_rows_threshold = 1_000;
            execution.skip_partial_aggregation_probe_ratio_threshold = 0.5;
        }
        let context = SessionContext::new_with_config(config);
        if ours {
            context.register_udaf(PercentileCont::udaf());
        }
        let table = MemTable::try_new(schema, partitions).unwrap();
        context.register_table("t", Arc::new(table)).unwrap();
        context
    }

    async fn answer(context: &SessionContext, sql: &str) -> String {
        let batches = context.sql(sql).await.unwrap().collect().await.unwrap();
        pretty_format_batches(&batches).unwrap().to_string()
    }

    #[tokio::test]
    async fn exact_percentiles_answer_as_datafusions_own() {
        let statements = [
            "SELECT g, percentile_cont(0.99) WITHIN GROUP (ORDER BY v) AS p99, percentile_cont(0.5) WITHIN GROUP (ORDER BY v) AS p50, count(v) AS n FROM t GROUP BY g ORDER BY g NULLS FIRST",
            "SELECT g, percentile_cont(0.0) WITHIN GROUP (ORDER BY v) AS lo, percentile_cont(1.0) WITHIN GROUP (ORDER BY v) AS hi, percentile_cont(0.3333) WITHIN GROUP (ORDER BY v DESC) AS desc_third FROM t GROUP BY g ORDER BY g NULLS FIRST",
            "SELECT g, n, quantile_cont(v, 0.9) AS p90, percentile_cont(0.25) WITHIN GROUP (ORDER BY v) FILTER (WHERE n > 2) AS filtered FROM t GROUP BY g, n ORDER BY g NULLS FIRST, n",
            "SELECT percentile_cont(0.75) WITHIN GROUP (ORDER BY v) AS all_rows FROM t",
            // 20,000 groups of a few values: partial aggregates that skip grouping
            "SELECT id % 20000 AS k, percentile_cont(0.5) WITHIN GROUP (ORDER BY v) AS p50, percentile_cont(0.001) WITHIN GROUP (ORDER BY v) FILTER (WHERE n > 1) AS low FROM t GROUP BY id % 20000 ORDER BY k LIMIT 400",
            // Float32: DataFusion's accumulator, handed only the value when rows become states
            "SELECT id % 20000 AS k, percentile_cont(0.5) WITHIN GROUP (ORDER BY w) AS p50, quantile_cont(w, 0.9) AS p90 FROM t GROUP BY id % 20000 ORDER BY k LIMIT 400",
            "SELECT g, percentile_cont(0.99) WITHIN GROUP (ORDER BY w DESC) AS p FROM t GROUP BY g ORDER BY g NULLS FIRST",
        ];
        for seed in [1, 2] {
            let (theirs, ours) = (context(false, seed), context(true, seed));
            for sql in statements {
                let expected = answer(&theirs, sql).await;
                assert!(
                    expected.lines().count() > 5 || sql.contains("all_rows"),
                    "{expected}"
                );
                assert_eq!(answer(&ours, sql).await, expected, "seed {seed}: {sql}");
            }
        }
    }

    /// DataFusion's accumulator and ours for `percentile_cont(p) WITHIN GROUP (ORDER BY v)`.
    fn accumulators(p: f64) -> (Box<dyn GroupsAccumulator>, Box<dyn GroupsAccumulator>) {
        let schema = Schema::new(vec![Field::new("v", DataType::Float64, true)]);
        let value = col("v", &schema).unwrap();
        let exprs: Vec<Arc<dyn PhysicalExpr>> = vec![
            Arc::clone(&value),
            Arc::new(Literal::new(ScalarValue::Float64(Some(p)))),
        ];
        let order_bys = [PhysicalSortExpr::new_default(value)];
        let fields: Vec<FieldRef> = vec![
            Arc::new(Field::new("v", DataType::Float64, true)),
            Arc::new(Field::new("p", DataType::Float64, false)),
        ];
        let args = || AccumulatorArgs {
            return_field: Arc::new(Field::new("p", DataType::Float64, true)),
            schema: &schema,
            ignore_nulls: false,
            order_bys: &order_bys,
            is_reversed: false,
            name: "p",
            is_distinct: false,
            exprs: &exprs,
            expr_fields: &fields,
        };
        let ours = PercentileCont::udaf();
        (
            percentile_cont_udaf()
                .inner()
                .create_groups_accumulator(args())
                .unwrap(),
            ours.inner().create_groups_accumulator(args()).unwrap(),
        )
    }

    #[test]
    fn a_merged_buffer_is_held_once_and_let_go_with_its_last_group() {
        let (_, mut ours) = accumulators(0.5);
        // one state of four groups of 2,000 values each: kept as slices of one buffer
        let values = Float64Array::from((0..8_000).map(f64::from).collect::<Vec<_>>());
        let list = ListArray::try_new(
            Arc::new(Field::new_list_field(DataType::Float64, true)),
            OffsetBuffer::new(vec![0, 2_000, 4_000, 6_000, 8_000].into()),
            Arc::new(values),
            None,
        )
        .unwrap();
        let empty = ours.size();
        ours.merge_batch(&[Arc::new(list)], &[0, 1, 2, 3], 4)
            .unwrap();
        let buffer = 8_000 * std::mem::size_of::<f64>();
        let held = ours.size() - empty;
        assert!((buffer..buffer + 4_096).contains(&held), "{held}");
        // two groups handed on: the other two still hold the buffer
        ours.state(EmitTo::First(2)).unwrap();
        assert!(ours.size() - empty >= buffer, "{}", ours.size());
        let answers = ours.evaluate(EmitTo::All).unwrap();
        assert_eq!(
            answers.as_primitive::<Float64Type>().values(),
            &[4_999.5, 6_999.5]
        );
        assert!(ours.size() < buffer / 4, "{}", ours.size());
        // values filled in place: at most twice what they need, and nothing once handed on
        let (_, mut ours) = accumulators(0.5);
        let values: ArrayRef = Arc::new(Float64Array::from(vec![1.5; 100_000]));
        ours.update_batch(&[values], &vec![0; 100_000], None, 1)
            .unwrap();
        let held = ours.size();
        assert!((800_000..1_700_000).contains(&held), "{held}");
        ours.evaluate(EmitTo::All).unwrap();
        assert!(ours.size() < 1_000, "{}", ours.size());
    }

    #[test]
    fn pieces_of_a_state_hold_the_values_of_the_whole_state() {
        let mut all = ChunkedPercentile::new(0.9);
        let mut pieces = ChunkedPercentile::new(0.9);
        // group 0 long (filled chunks of 1,024 and more, the last partly), group 1 short,
        // group 2 a long merged state beside filled values, group 3 none
        let rows = 9_000_usize;
        let values: ArrayRef = Arc::new(Float64Array::from(
            (0..rows)
                .map(|row| (row * 37 % 1_000) as f64 * 0.25)
                .collect::<Vec<_>>(),
        ));
        let groups: Vec<usize> = (0..rows)
            .map(|row| if row % 100 == 0 { 1 } else { [0, 2][row % 2] })
            .collect();
        let merged: ArrayRef = Arc::new(
            ListArray::try_new(
                Arc::new(Field::new_list_field(DataType::Float64, true)),
                OffsetBuffer::new(vec![0, 1_500].into()),
                Arc::new(Float64Array::from(
                    (0..1_500).map(f64::from).collect::<Vec<_>>(),
                )),
                None,
            )
            .unwrap(),
        );
        for accumulator in [&mut all, &mut pieces] {
            accumulator
                .update_batch(&[Arc::clone(&values)], &groups, None, 4)
                .unwrap();
            accumulator
                .merge_batch(&[Arc::clone(&merged)], &[2], 4)
                .unwrap();
        }
        let whole = all.state(EmitTo::All).unwrap();
        let whole = whole[0].as_list::<i32>();
        let (rest, long) = pieces.state_in_pieces().unwrap();
        let rest = rest.as_list::<i32>();
        assert_eq!(rest.len(), 4);
        let sorted = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v
        };
        let list_values = |list: ArrayRef| list.as_primitive::<Float64Type>().values().to_vec();
        for group in 0..4 {
            let mut held = list_values(rest.value(group));
            assert!(
                held.len() < MERGE_KEPT_FROM * 4,
                "group {group}: {}",
                held.len()
            );
            for (_, piece) in long.iter().filter(|(g, _)| *g == group) {
                let piece = piece.as_list::<i32>();
                assert_eq!(piece.len(), 1);
                let values = list_values(piece.value(0));
                assert!(values.len() >= MERGE_KEPT_FROM, "{}", values.len());
                held.extend(values);
            }
            assert_eq!(
                sorted(held),
                sorted(list_values(whole.value(group))),
                "group {group}"
            );
        }
        // the long groups came in pieces, the merged state among them as it came
        let pieces_of = |group| long.iter().filter(|(g, _)| *g == group).count();
        assert!(pieces_of(0) >= 2 && pieces_of(2) >= 2, "{long:?}");
        assert_eq!(pieces_of(1) + pieces_of(3), 0);
        let merged_values = merged.as_list::<i32>().value(0);
        let merged_ptr = merged_values
            .as_primitive::<Float64Type>()
            .values()
            .as_ptr();
        assert!(long.iter().any(|(group, piece)| {
            *group == 2
                && piece
                    .as_list::<i32>()
                    .value(0)
                    .as_primitive::<Float64Type>()
                    .values()
                    .as_ptr()
                    == merged_ptr
        }));
        // nothing held once handed on
        assert!(pieces.size() < 1_000, "{}", pieces.size());
    }

    #[test]
    fn sliced_rows_become_the_states_datafusion_makes_of_them() {
        let (mut theirs, mut ours) = accumulators(0.25);
        let values = Float64Array::from(
            (0..300)
                .map(|row| (row % 7 != 0).then_some(f64::from(row) * 0.5))
                .collect::<Vec<_>>(),
        );
        let filter = BooleanArray::from(
            (0..300)
                .map(|row| (row % 11 != 0).then_some(row % 3 != 0))
                .collect::<Vec<_>>(),
        );
        let (values, filter) = (values.slice(5, 200), filter.slice(5, 200));
        let values: ArrayRef = Arc::new(values);
        let percentile: ArrayRef = Arc::new(Float64Array::from(vec![0.25; 200]));
        // a partial aggregate hands on the value, the percentile and the ORDER BY column
        let ours_states = ours
            .convert_to_state(
                &[Arc::clone(&values), percentile, Arc::clone(&values)],
                Some(&filter),
            )
            .unwrap();
        let their_states = theirs
            .convert_to_state(&[Arc::clone(&values)], Some(&filter))
            .unwrap();
        assert_eq!(ours_states[0].as_ref(), their_states[0].as_ref());
        // merged from a slice of those states, ten rows to a group
        let states = ours_states[0].slice(30, 150);
        let groups: Vec<usize> = (0..150).map(|row| row / 10).collect();
        ours.merge_batch(&[Arc::clone(&states)], &groups, 15)
            .unwrap();
        theirs.merge_batch(&[states], &groups, 15).unwrap();
        assert_eq!(
            ours.evaluate(EmitTo::All).unwrap().as_ref(),
            theirs.evaluate(EmitTo::All).unwrap().as_ref()
        );
    }

    #[test]
    fn emitting_the_first_groups_leaves_the_others_whole() {
        let mut random = SplitMix64::new(7);
        let (mut theirs, mut ours) = accumulators(0.9);
        for round in 0..4 {
            let rows = 5_000;
            let values: ArrayRef = Arc::new(Float64Array::from(
                (0..rows)
                    .map(|row| (row % 11 != 0).then(|| random.uniform() * 50.0))
                    .collect::<Vec<_>>(),
            ));
            let groups: Vec<usize> = (0..rows)
                .map(|_| (random.uniform() * 9.0) as usize)
                .collect();
            let filter = BooleanArray::from(
                (0..rows)
                    .map(|row| (row % 13 != 0).then_some(row % 3 != 0))
                    .collect::<Vec<_>>(),
            );
            let filter = (round % 2 == 1).then_some(&filter);
            for accumulator in [&mut theirs, &mut ours] {
                accumulator
                    .update_batch(&[Arc::clone(&values)], &groups, filter, 9)
                    .unwrap();
            }
        }
        // the partial states of the first four groups, merged into a final accumulator, and
        // the rest evaluated where they are
        let (mut their_final, mut our_final) = accumulators(0.9);
        let their_state = theirs.state(EmitTo::First(4)).unwrap();
        let our_state = ours.state(EmitTo::First(4)).unwrap();
        assert_eq!(our_state[0].len(), 4);
        their_final
            .merge_batch(&their_state, &[1, 0, 1, 0], 2)
            .unwrap();
        our_final.merge_batch(&our_state, &[1, 0, 1, 0], 2).unwrap();
        assert_eq!(
            our_final.evaluate(EmitTo::First(1)).unwrap().as_ref(),
            their_final.evaluate(EmitTo::First(1)).unwrap().as_ref()
        );
        assert_eq!(
            our_final.evaluate(EmitTo::All).unwrap().as_ref(),
            their_final.evaluate(EmitTo::All).unwrap().as_ref()
        );
        let rest = ours.evaluate(EmitTo::All).unwrap();
        assert_eq!(rest.len(), 5);
        assert_eq!(
            rest.as_ref(),
            theirs.evaluate(EmitTo::All).unwrap().as_ref()
        );
    }

    /// A group of `values`: the first `filled` filled in place, the rest merged as partial
    /// states of `state` values each (kept as slices of their buffers from 1,024 on).
    fn group_of(values: &[f64], filled: usize, state: usize) -> GroupValues {
        let (mut held, mut merged) = (0, MergedBuffers::default());
        let mut group = GroupValues::default();
        values[..filled]
            .iter()
            .for_each(|value| group.push(*value, &mut held));
        for state in values[filled..].chunks(state) {
            group.merge(&Float64Array::from(state.to_vec()), &mut held, &mut merged);
        }
        group
    }

    fn same(a: Option<f64>, b: Option<f64>) -> bool {
        a.map(f64::to_bits) == b.map(f64::to_bits)
    }

    const PERCENTILES: [f64; 8] = [0.0, 0.001, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0];

    #[test]
    fn a_window_answers_as_selecting_among_all_values_does() {
        let mut random = SplitMix64::new(11);
        // negative and positive values: the total-order key flips the bits of negative ones
        let uniform: Vec<f64> = (0..50_000).map(|_| random.uniform() * 2e4 - 1e4).collect();
        let mut ascending = uniform.clone();
        ascending.sort_by(f64::total_cmp);
        let descending: Vec<f64> = ascending.iter().rev().copied().collect();
        // a long tail, ties on a coarse grid, and the values total order sets apart
        let mut odd: Vec<f64> = (0..40_000)
            .map(|_| (1.0 / (1.0 - random.uniform()) * 4.0).round() / 4.0)
            .collect();
        odd.extend([
            f64::NAN,
            -f64::NAN,
            -0.0,
            0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ]);
        let equal = vec![3.25; 20_000];
        let mut windowed = 0;
        for values in [&uniform, &ascending, &descending, &odd, &equal] {
            let group = group_of(values, values.len() / 2, 3_001);
            assert_eq!(group.len, values.len());
            for percentile in PERCENTILES {
                let expected = percentile_of(&mut values.clone(), percentile);
                let window = window_percentile(&group, percentile, &mut Vec::new());
                windowed += usize::from(window.is_some());
                assert!(
                    window.is_none_or(|answer| same(Some(answer), expected)),
                    "{percentile}: {window:?} against {expected:?}"
                );
                let answer = group.percentile(percentile, &mut Vec::new());
                assert!(same(answer, expected), "{answer:?} against {expected:?}");
            }
        }
        // a sample of shuffled, sorted or equal values does not miss
        assert_eq!(windowed, 5 * PERCENTILES.len());
    }

    #[test]
    fn a_sample_the_order_fooled_falls_back_to_all_values() {
        let mut random = SplitMix64::new(5);
        // every sampled place (each 16th of 65,536 values, all in partial states of a multiple
        // of 16 values, so the places stay where they were) holds one of the smallest values
        let values: Vec<f64> = (0..65_536)
            .map(|place| {
                if place % 16 == 0 {
                    -1.0 - random.uniform()
                } else {
                    random.uniform() * 100.0
                }
            })
            .collect();
        let group = group_of(&values, 0, 4_096);
        let mut window = Vec::new();
        assert_eq!(window_percentile(&group, 0.99, &mut window), None);
        let expected = percentile_of(&mut values.clone(), 0.99);
        assert!(expected.is_some_and(|p99| p99 > 90.0));
        assert!(same(group.percentile(0.99, &mut window), expected));
    }
}
