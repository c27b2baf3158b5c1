//! A physical-plan rewrite between DataFusion's optimizer and execution: string `GROUP BY` keys
//! read straight from the store's Parquet segments are read as string views.
//!
//! The canonical tables declare their strings `Utf8`, which every consumer of query results
//! reads. Read as `Utf8`, a dictionary-encoded column (`model`, `worker`, `tenant`: a handful of
//! values per row group) is expanded into a fresh copy of every row's bytes, and the hash
//! aggregate then hashes and compares those bytes row by row. Read as `Utf8View`, the Parquet
//! reader hands out 16-byte views of the dictionary instead, and the aggregate compares views:
//! over 10M rows `GROUP BY model` with a count and a mean took 0.75× the time, `GROUP BY worker`
//! with a sum 0.52× (bench/README.md, "Query", 2026-12-05).
//!
//! The rule retypes only what the aggregate alone sees: a group key that is a plain column of a
//! Parquet scan (through filters, projections, repartitions and unions), used
//! by no aggregate argument, aggregate filter, scan predicate or other expression on the way. The
//! aggregate's few output rows are cast back to `Utf8` right above it, so every operator above
//! sees the schema it was planned with. A plan of any other shape is left as it was. A partial
//! aggregate by one such key is run by [`crate::view_aggregate`], which groups by the views
//! themselves; when the key is a label the store writes with a dictionary
//! ([`infersight_store::string_column_has_dictionary`]), it is read as that dictionary instead
//! ([`crate::dictionary_keys`]), and a row's group is found by its index into it.
//!
//! When that partial aggregate hands its states on in pieces (every aggregate an exact
//! percentile), the final aggregate above its hash exchange becomes a final aggregate of one
//! partition over the partitions' streams merged ([`final_in_one_partition`]): the exchange
//! would copy every value once more. Only where the operators above merely sort, merge,
//! project, filter or limit rows: a join of partitions needs the partitions it was planned
//! with.

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{Result, Statistics};
use datafusion::datasource::physical_plan::{
    FileGroup, FileScanConfig, FileScanConfigBuilder, FileSource, ParquetSource,
};
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::table_schema::TableSchema;
use datafusion::physical_expr::expressions::DynamicFilterPhysicalExpr;
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_expr::{conjunction_opt, split_conjunction};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateInputMode, AggregateMode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::expressions::{CastExpr, Column};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::limit::{GlobalLimitExec, LocalLimitExec};
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::{ExecutionPlan, InputOrderMode, Partitioning, PhysicalExpr};

use infersight_store::string_column_has_dictionary;

use crate::dictionary_keys::{self, dictionary_type};
use crate::view_aggregate::ViewKeyAggregateExec;

/// The rule; see the module documentation. Added after DataFusion's own rules (a session with
/// limits adds `JoinsYield` after it, which reads no property it changes); plans that leave
/// the node (a cluster's executors know no such rewrite) are planned without it. A plan it cannot
/// rewrite (or fails to) is left as it was: the rule never fails a statement.
#[derive(Debug, Default)]
pub(crate) struct GroupKeysAsViews;

impl GroupKeysAsViews {
    /// The rule's name in DataFusion's optimizer (and in `EXPLAIN VERBOSE`).
    pub(crate) const NAME: &'static str = "infersight_group_keys_as_views";
}

impl PhysicalOptimizerRule for GroupKeysAsViews {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let plan = plan
            .transform_up(|node| {
                Ok(match rewrite_aggregate(&node) {
                    Ok(Some(rewritten)) => Transformed::yes(rewritten),
                    Ok(None) => Transformed::no(node),
                    // a shape the rewrite did not foresee costs speed, never the statement
                    Err(error) => {
                        tracing::debug!(%error, "group keys left as they were");
                        Transformed::no(node)
                    }
                })
            })
            .data()?;
        finals_in_one_partition(plan, true)
    }

    fn name(&self) -> &str {
        Self::NAME
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `node` with its `Utf8` group keys read as views and cast back above it, or `None` when it is
/// not an aggregate over raw rows or no key qualifies.
fn rewrite_aggregate(node: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(aggregate) = node.downcast_ref::<AggregateExec>() else {
        return Ok(None);
    };
    if aggregate.mode().input_mode() != AggregateInputMode::Raw
        || !aggregate.group_expr().is_single()
        || aggregate.limit_options().is_some()
        || !matches!(aggregate.input_order_mode(), InputOrderMode::Linear)
        || !node.dynamic_expressions_produced().is_empty()
    {
        return Ok(None);
    }
    let input = aggregate.input();
    let input_schema = input.schema();
    let mut keys: BTreeSet<String> = aggregate
        .group_expr()
        .expr()
        .iter()
        .filter_map(|(expr, _)| expr.downcast_ref::<Column>())
        .filter(|column| input_schema.field(column.index()).data_type() == &DataType::Utf8)
        .map(|column| column.name().to_string())
        .collect();
    // a key an aggregate reads (count(DISTINCT model), min(model)) keeps its type
    for aggregate_expr in aggregate.aggr_expr() {
        let read = aggregate_expr.expressions().into_iter().chain(
            aggregate_expr
                .order_bys()
                .iter()
                .map(|sort| Arc::clone(&sort.expr)),
        );
        for expr in read {
            forget_read(&mut keys, &expr);
        }
    }
    for filter in aggregate.filter_expr().iter().flatten() {
        forget_read(&mut keys, filter);
    }
    if keys.is_empty() {
        return Ok(None);
    }
    // one key the store writes with a dictionary is read as one when the engine's own partial
    // aggregate groups by it (`dictionary_keys`); DataFusion's aggregates group views faster
    let dictionary = keys.len() == 1 && keys.iter().all(|key| string_column_has_dictionary(key));
    let mut viewed = None;
    if dictionary {
        viewed = retyped_aggregate(aggregate, &keys, &dictionary_type())?
            .filter(|plan| plan.downcast_ref::<ViewKeyAggregateExec>().is_some());
    }
    let viewed = match viewed {
        Some(viewed) => viewed,
        None => match retyped_aggregate(aggregate, &keys, &DataType::Utf8View)? {
            Some(viewed) => viewed,
            None => return Ok(None),
        },
    };
    let group_names: BTreeSet<&str> = aggregate
        .group_expr()
        .expr()
        .iter()
        .filter(|(expr, _)| {
            expr.downcast_ref::<Column>()
                .is_some_and(|column| keys.contains(column.name()))
        })
        .map(|(_, name)| name.as_str())
        .collect();
    let back = cast_back(&viewed, &group_names)?;
    // the operators above were planned against the aggregate's schema: keep it exactly
    if !same_fields(&back.schema(), &node.schema()) {
        return Ok(None);
    }
    Ok(Some(back))
}

/// `aggregate` over its input with `keys` read as `to`, run by [`ViewKeyAggregateExec`] where it
/// can; `None` when the input cannot be retyped.
fn retyped_aggregate(
    aggregate: &AggregateExec,
    keys: &BTreeSet<String>,
    to: &DataType,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let input = aggregate.input();
    let Some(retyped) = retype(input, keys, to)? else {
        return Ok(None);
    };
    if !only_keys_changed(&input.schema(), &retyped.schema(), keys, to) {
        return Ok(None);
    }
    let retyped: Arc<dyn ExecutionPlan> = Arc::new(AggregateExec::try_new(
        *aggregate.mode(),
        aggregate.group_expr().clone(),
        aggregate.aggr_expr().to_vec(),
        aggregate.filter_expr().to_vec(),
        Arc::clone(&retyped),
        retyped.schema(),
    )?);
    // a partial aggregate by the one key groups by its views or dictionary indices
    // (`view_aggregate`)
    Ok(Some(
        match ViewKeyAggregateExec::try_new(Arc::clone(&retyped)) {
            Some(by_key) => Arc::new(by_key),
            None => retyped,
        },
    ))
}

/// `plan` with each final aggregate over pieces of exact percentiles ([`final_in_one_partition`])
/// merging them in one partition, where nothing above it needs its partitions (`free`: the
/// operators above `plan` only sort, merge, project, filter or limit rows, whatever their
/// partitions: a join of partitions by key would not be).
fn finals_in_one_partition(
    plan: Arc<dyn ExecutionPlan>,
    free: bool,
) -> Result<Arc<dyn ExecutionPlan>> {
    if free && let Some(merged) = final_in_one_partition(&plan)? {
        return Ok(merged);
    }
    let free = free
        && (plan.is::<SortPreservingMergeExec>()
            || plan.is::<SortExec>()
            || plan.is::<ProjectionExec>()
            || plan.is::<FilterExec>()
            || plan.is::<CoalescePartitionsExec>()
            || plan.is::<GlobalLimitExec>()
            || plan.is::<LocalLimitExec>());
    let children: Vec<Arc<dyn ExecutionPlan>> = plan.children().into_iter().cloned().collect();
    if children.is_empty() {
        return Ok(plan);
    }
    let mut changed = false;
    let mut rewritten = Vec::with_capacity(children.len());
    for child in children {
        let new = finals_in_one_partition(Arc::clone(&child), free)?;
        changed |= !Arc::ptr_eq(&new, &child);
        rewritten.push(new);
    }
    if changed {
        replace_children(&plan, rewritten)
    } else {
        Ok(plan)
    }
}

/// A final aggregate over a hash exchange of the partial states of a
/// [`ViewKeyAggregateExec`] that hands them on in pieces (every aggregate an exact percentile),
/// as a final aggregate of one partition over the partitions' streams merged: the exchange
/// copies every value of the list rows it routes, the merge hands the pieces on where they lie
/// and the final aggregate keeps the long ones as they come (`percentile`). What it gives up
/// is splitting the final merge across partitions, for these states a walk over each group's
/// pieces and a selection near its rank. `None` for any other node.
fn final_in_one_partition(node: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(last) = node.downcast_ref::<AggregateExec>() else {
        return Ok(None);
    };
    if *last.mode() != AggregateMode::FinalPartitioned
        || last.limit_options().is_some()
        || !node.dynamic_expressions_produced().is_empty()
    {
        return Ok(None);
    }
    let Some(exchange) = last.input().downcast_ref::<RepartitionExec>() else {
        return Ok(None);
    };
    if !matches!(exchange.partitioning(), Partitioning::Hash(..)) || exchange.preserve_order() {
        return Ok(None);
    }
    let below = match exchange.input().downcast_ref::<ProjectionExec>() {
        Some(projection) => projection.input(),
        None => exchange.input(),
    };
    let in_pieces = below
        .downcast_ref::<ViewKeyAggregateExec>()
        .is_some_and(ViewKeyAggregateExec::hands_on_in_pieces);
    if !in_pieces {
        return Ok(None);
    }
    let merged = Arc::new(CoalescePartitionsExec::new(Arc::clone(exchange.input())));
    Ok(Some(Arc::new(AggregateExec::try_new(
        AggregateMode::Final,
        last.group_expr().clone(),
        last.aggr_expr().to_vec(),
        last.filter_expr().to_vec(),
        merged,
        last.input_schema(),
    )?)))
}

/// Drops from `keys` the columns `expr` reads.
fn forget_read(keys: &mut BTreeSet<String>, expr: &Arc<dyn PhysicalExpr>) {
    for column in collect_columns(expr) {
        keys.remove(column.name());
    }
}

/// Whether `expr` reads any of `keys`.
fn reads_any(expr: &Arc<dyn PhysicalExpr>, keys: &BTreeSet<String>) -> bool {
    collect_columns(expr)
        .iter()
        .any(|column| keys.contains(column.name()))
}

/// A scan's `predicate` without its dynamic filters on `keys`, `None` when nothing else is left.
/// A `LIMIT` over a `GROUP BY … ORDER BY key` (the HTTP API limits every statement's rows) plans
/// a top-k sort above the aggregate, and DataFusion pushes the sort's dynamic filter on the key
/// down into the scan: it would keep the key's type (the rewrite refused such scans, and the
/// statement ran 2× slower through the API than on the command line). The filter cannot prune
/// there: the sort learns its bound only from the aggregate's output, after the scan has ended.
/// Dynamic filters are hints (the operator that sets one still does its own work), so leaving
/// one out never changes an answer.
fn without_dynamic_key_filters(
    predicate: &Arc<dyn PhysicalExpr>,
    keys: &BTreeSet<String>,
) -> Option<Arc<dyn PhysicalExpr>> {
    conjunction_opt(
        split_conjunction(predicate)
            .into_iter()
            .filter(|part| {
                part.downcast_ref::<DynamicFilterPhysicalExpr>().is_none() || !reads_any(part, keys)
            })
            .cloned(),
    )
}

/// `plan` producing `keys` as `to` (`Utf8View` or [`dictionary_type`]), or `None` when a node on
/// the way does something with them other than pass them on, or no Parquet scan produces them.
fn retype(
    plan: &Arc<dyn ExecutionPlan>,
    keys: &BTreeSet<String>,
    to: &DataType,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if let Some(source) = plan.downcast_ref::<DataSourceExec>() {
        return retype_parquet(source, keys, to);
    }
    if let Some(filter) = plan.downcast_ref::<FilterExec>() {
        // its projection, if any, picks columns by index: their types pass through
        if reads_any(filter.predicate(), keys) {
            return Ok(None);
        }
        return retype_child(plan, filter.input(), keys, to);
    }
    if let Some(projection) = plan.downcast_ref::<ProjectionExec>() {
        if !passes_keys_on(projection.expr(), keys) {
            return Ok(None);
        }
        // built anew: a projection keeps the output schema it was made with when only its
        // input is replaced
        return match retype(projection.input(), keys, to)? {
            Some(child) => Ok(Some(Arc::new(ProjectionExec::try_new(
                projection.expr().to_vec(),
                child,
            )?))),
            None => Ok(None),
        };
    }
    if let Some(repartition) = plan.downcast_ref::<RepartitionExec>() {
        if let Partitioning::Hash(exprs, _) = repartition.partitioning()
            && exprs.iter().any(|expr| reads_any(expr, keys))
        {
            return Ok(None);
        }
        return retype_child(plan, repartition.input(), keys, to);
    }
    if let Some(union) = plan.downcast_ref::<UnionExec>() {
        return retype_union(plan, union, keys, to);
    }
    Ok(None)
}

/// Whether a projection passes each key on as the column of its own name, and computes every
/// other output without reading one.
fn passes_keys_on(exprs: &[ProjectionExpr], keys: &BTreeSet<String>) -> bool {
    exprs.iter().all(|projected| {
        if keys.contains(&projected.alias) {
            projected
                .expr
                .downcast_ref::<Column>()
                .is_some_and(|column| column.name() == projected.alias)
        } else {
            !reads_any(&projected.expr, keys)
        }
    })
}

/// `plan` (a node that passes its one input's columns on) over its input retyped.
fn retype_child(
    plan: &Arc<dyn ExecutionPlan>,
    input: &Arc<dyn ExecutionPlan>,
    keys: &BTreeSet<String>,
    to: &DataType,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    match retype(input, keys, to)? {
        Some(child) => Ok(Some(replace_children(plan, vec![child])?)),
        None => Ok(None),
    }
}

/// A union whose Parquet inputs read `keys` as `to` and whose other inputs (the memtable's
/// batches) cast them; `None` when no input reads them so itself.
fn retype_union(
    plan: &Arc<dyn ExecutionPlan>,
    union: &UnionExec,
    keys: &BTreeSet<String>,
    to: &DataType,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let mut any_native = false;
    let mut children = Vec::with_capacity(union.inputs().len());
    for input in union.inputs() {
        match retype(input, keys, to)? {
            Some(child) => {
                any_native = true;
                children.push(child);
            }
            None => children.push(cast_keys(input, keys, to)?),
        }
    }
    if !any_native {
        return Ok(None);
    }
    Ok(Some(replace_children(plan, children)?))
}

/// A Parquet scan whose table schema declares `keys` `to`, so the reader produces views
/// (DataFusion coerces a file's strings to the table's view type as it reads) or dictionaries
/// (its files marked for the reader, [`dictionary_keys`]), or `None` for any other source,
/// partition columns, a projection or predicate that computes with a key, or a scan that does
/// not produce all of them.
fn retype_parquet(
    source: &DataSourceExec,
    keys: &BTreeSet<String>,
    to: &DataType,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(config) = source.data_source().downcast_ref::<FileScanConfig>() else {
        return Ok(None);
    };
    let Some(parquet) = config.file_source().downcast_ref::<ParquetSource>() else {
        return Ok(None);
    };
    let table = parquet.table_schema();
    let predicate = parquet
        .filter()
        .and_then(|predicate| without_dynamic_key_filters(&predicate, keys));
    if !table.table_partition_cols().is_empty()
        || !table.virtual_columns().is_empty()
        || predicate
            .as_ref()
            .is_some_and(|predicate| reads_any(predicate, keys))
    {
        return Ok(None);
    }
    let produced = source.schema();
    if keys.iter().any(|key| {
        !produced
            .field_with_name(key)
            .is_ok_and(|field| field.data_type() == &DataType::Utf8)
    }) {
        return Ok(None);
    }
    // the scan's own projection: columns, and expressions DataFusion pushed into it
    let projection = parquet.projection().cloned();
    if let Some(projection) = &projection {
        let exprs: Vec<ProjectionExpr> = projection.iter().cloned().collect();
        if !passes_keys_on(&exprs, keys) {
            return Ok(None);
        }
    }
    // Rebuilt from the table options, predicate, reader factory and projection, which is all
    // the provider and DataFusion's rules set (`provider.rs`, `parquet_plan`): a metadata size
    // hint set there later must be carried over here too.
    let file_schema = with_keys_as(table.file_schema(), keys, to);
    let mut retyped = ParquetSource::new(TableSchema::from(Arc::clone(&file_schema)))
        .with_table_parquet_options(parquet.table_parquet_options().clone());
    if let Some(predicate) = predicate {
        retyped = retyped.with_predicate(predicate);
    }
    if let Some(readers) = parquet.parquet_file_reader_factory() {
        retyped = retyped.with_parquet_file_reader_factory(Arc::clone(readers));
    }
    let mut retyped: Arc<dyn FileSource> = Arc::new(retyped);
    if let Some(projection) = &projection {
        match retyped.try_pushdown_projection(projection)? {
            Some(projected) => retyped = projected,
            None => return Ok(None),
        }
    }
    let mut builder = FileScanConfigBuilder::from(config.clone());
    if to == &dictionary_type() {
        let marked = Arc::new(keys.clone());
        let groups = config.file_groups.iter().map(|group| {
            FileGroup::new(
                group
                    .iter()
                    .map(|file| {
                        let mut file = file.clone();
                        dictionary_keys::mark(&mut file, &marked);
                        file
                    })
                    .collect(),
            )
        });
        builder = builder.with_file_groups(groups.collect());
    }
    let viewed = builder
        .with_source(retyped)
        .with_statistics(Statistics::new_unknown(&file_schema))
        .build();
    Ok(Some(DataSourceExec::from_data_source(viewed)))
}

/// `plan` over `children`, its properties recomputed from them.
fn replace_children(
    plan: &Arc<dyn ExecutionPlan>,
    children: Vec<Arc<dyn ExecutionPlan>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    Arc::clone(plan).replace_children(
        children,
        ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
    )
}

/// `schema` with the `Utf8` fields named in `keys` typed `to`.
fn with_keys_as(schema: &SchemaRef, keys: &BTreeSet<String>, to: &DataType) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|field| {
            if keys.contains(field.name()) && field.data_type() == &DataType::Utf8 {
                field.as_ref().clone().with_data_type(to.clone())
            } else {
                field.as_ref().clone()
            }
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// Whether `after` is `before` with some of `keys` turned from `Utf8` into `to` (and all of them,
/// where `before` has them as `Utf8`), and nothing else changed.
fn only_keys_changed(
    before: &SchemaRef,
    after: &SchemaRef,
    keys: &BTreeSet<String>,
    to: &DataType,
) -> bool {
    before.fields().len() == after.fields().len()
        && before
            .fields()
            .iter()
            .zip(after.fields().iter())
            .all(|(old, new)| {
                old.name() == new.name()
                    && old.is_nullable() == new.is_nullable()
                    && if keys.contains(old.name()) {
                        new.data_type() == to
                    } else {
                        old.data_type() == new.data_type()
                    }
            })
}

/// Whether two schemas have the same field names, types and nullability.
fn same_fields(left: &SchemaRef, right: &SchemaRef) -> bool {
    only_keys_changed(left, right, &BTreeSet::new(), &DataType::Utf8)
}

/// `plan` with the columns named in `names` cast to `to`.
fn cast_columns(
    plan: &Arc<dyn ExecutionPlan>,
    names: &BTreeSet<&str>,
    to: &DataType,
) -> Result<Arc<dyn ExecutionPlan>> {
    let schema = plan.schema();
    let exprs = schema.fields().iter().enumerate().map(|(index, field)| {
        let column: Arc<dyn PhysicalExpr> = Arc::new(Column::new(field.name(), index));
        let expr: Arc<dyn PhysicalExpr> = if names.contains(field.name().as_str()) {
            Arc::new(CastExpr::new(column, to.clone(), None))
        } else {
            column
        };
        ProjectionExpr::new(expr, field.name().clone())
    });
    Ok(Arc::new(ProjectionExec::try_new(exprs, Arc::clone(plan))?))
}

/// The aggregate's output with its viewed keys back to `Utf8`.
fn cast_back(
    plan: &Arc<dyn ExecutionPlan>,
    names: &BTreeSet<&str>,
) -> Result<Arc<dyn ExecutionPlan>> {
    cast_columns(plan, names, &DataType::Utf8)
}

/// A union input that cannot read `keys` as `to` itself, casting them.
fn cast_keys(
    plan: &Arc<dyn ExecutionPlan>,
    keys: &BTreeSet<String>,
    to: &DataType,
) -> Result<Arc<dyn ExecutionPlan>> {
    let names: BTreeSet<&str> = keys.iter().map(String::as_str).collect();
    cast_columns(plan, &names, to)
}
