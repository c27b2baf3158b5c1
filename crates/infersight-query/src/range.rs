//! Turns the filters DataFusion pushes into a table scan into the [`TimeRange`] the store prunes
//! segments with. Only conjuncts of the form `ts <op> constant` narrow the range; everything else
//! leaves it unbounded. Pruning is therefore conservative: the range always covers every row the
//! filters accept, and DataFusion still applies the filters exactly afterwards (`Inexact`).

use datafusion::arrow::compute::kernels::cast_utils::string_to_timestamp_nanos;
use datafusion::arrow::datatypes::DataType;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};
use datafusion::scalar::ScalarValue;
use infersight_store::TimeRange;

/// Name of the time column every canonical table starts with.
pub const TS_COLUMN: &str = "ts";

/// The tightest half-open `[since, until)` range on `ts` implied by the conjunction of `filters`.
pub fn time_range_from_filters(filters: &[Expr]) -> TimeRange {
    let mut range = TimeRange::ALL;
    for filter in filters {
        narrow(&mut range, filter);
    }
    range
}

fn narrow(range: &mut TimeRange, filter: &Expr) {
    match filter {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::And,
            right,
        }) => {
            narrow(range, left);
            narrow(range, right);
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            if is_ts_column(left) {
                if let Some(value) = constant_ns(right) {
                    apply(range, *op, value);
                }
            } else if is_ts_column(right)
                && let (Some(value), Some(swapped)) = (constant_ns(left), op.swap())
            {
                apply(range, swapped, value);
            }
        }
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) if is_ts_column(expr) => {
            if let Some(low) = constant_ns(low) {
                apply(range, Operator::GtEq, low);
            }
            if let Some(high) = constant_ns(high) {
                apply(range, Operator::LtEq, high);
            }
        }
        _ => {}
    }
}

/// Narrows `range` by `ts <op> value_ns`.
fn apply(range: &mut TimeRange, op: Operator, value_ns: i64) {
    let raise_since = |range: &mut TimeRange, since: i64| {
        range.since_ns = Some(range.since_ns.map_or(since, |current| current.max(since)));
    };
    let lower_until = |range: &mut TimeRange, until: i64| {
        range.until_ns = Some(range.until_ns.map_or(until, |current| current.min(until)));
    };
    match op {
        Operator::GtEq => raise_since(range, value_ns),
        Operator::Gt => raise_since(range, value_ns.saturating_add(1)),
        Operator::Lt => lower_until(range, value_ns),
        Operator::LtEq => lower_until(range, value_ns.saturating_add(1)),
        Operator::Eq => {
            raise_since(range, value_ns);
            lower_until(range, value_ns.saturating_add(1));
        }
        _ => {}
    }
}

fn is_ts_column(expr: &Expr) -> bool {
    matches!(expr, Expr::Column(column) if column.name == TS_COLUMN)
}

/// Nanoseconds since the epoch of a constant expression: a literal of any timestamp unit, an
/// Int64 (taken as nanoseconds), a string, or a cast of one of those to a timestamp.
fn constant_ns(expr: &Expr) -> Option<i64> {
    match expr {
        Expr::Literal(value, _) => scalar_ns(value),
        Expr::Cast(cast) => cast_literal_ns(&cast.expr, cast.field.data_type()),
        Expr::TryCast(cast) => cast_literal_ns(&cast.expr, cast.field.data_type()),
        _ => None,
    }
}

fn cast_literal_ns(inner: &Expr, target: &DataType) -> Option<i64> {
    let Expr::Literal(value, _) = inner else {
        return None;
    };
    match target {
        // Let DataFusion's own cast decide what the string or number means for this type.
        DataType::Timestamp(..) | DataType::Date32 | DataType::Date64 => {
            scalar_ns(&value.cast_to(target).ok()?)
        }
        DataType::Int64 => scalar_ns(value),
        _ => None,
    }
}

fn scalar_ns(value: &ScalarValue) -> Option<i64> {
    const NANOS_PER_DAY: i64 = 86_400 * 1_000_000_000;
    match value {
        ScalarValue::TimestampNanosecond(Some(v), _) | ScalarValue::Int64(Some(v)) => Some(*v),
        ScalarValue::TimestampMicrosecond(Some(v), _) => v.checked_mul(1_000),
        ScalarValue::TimestampMillisecond(Some(v), _) | ScalarValue::Date64(Some(v)) => {
            v.checked_mul(1_000_000)
        }
        ScalarValue::TimestampSecond(Some(v), _) => v.checked_mul(1_000_000_000),
        ScalarValue::Date32(Some(days)) => i64::from(*days).checked_mul(NANOS_PER_DAY),
        ScalarValue::Utf8(Some(text))
        | ScalarValue::LargeUtf8(Some(text))
        | ScalarValue::Utf8View(Some(text)) => string_to_timestamp_nanos(text.trim()).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::{col, lit};

    use super::*;

    const HOUR_NS: i64 = 3_600_000_000_000;

    fn ts_data_type() -> DataType {
        DataType::Timestamp(
            datafusion::arrow::datatypes::TimeUnit::Nanosecond,
            Some("UTC".into()),
        )
    }

    fn ts_lit(ns: i64) -> Expr {
        lit(ScalarValue::TimestampNanosecond(
            Some(ns),
            Some("UTC".into()),
        ))
    }

    #[test]
    fn comparisons_narrow_a_half_open_range() {
        let range =
            time_range_from_filters(&[col("ts").gt_eq(ts_lit(10)), col("ts").lt(ts_lit(20))]);
        assert_eq!(
            range,
            TimeRange {
                since_ns: Some(10),
                until_ns: Some(20)
            }
        );
        let range =
            time_range_from_filters(&[col("ts").gt(ts_lit(10)).and(col("ts").lt_eq(ts_lit(20)))]);
        assert_eq!(
            range,
            TimeRange {
                since_ns: Some(11),
                until_ns: Some(21)
            }
        );
        let range = time_range_from_filters(&[col("ts").eq(ts_lit(7))]);
        assert_eq!(
            range,
            TimeRange {
                since_ns: Some(7),
                until_ns: Some(8)
            }
        );
        // literal on the left
        let range = time_range_from_filters(&[ts_lit(30).gt(col("ts"))]);
        assert_eq!(
            range,
            TimeRange {
                since_ns: None,
                until_ns: Some(30)
            }
        );
    }

    #[test]
    fn units_strings_and_casts_are_understood() {
        let seconds = lit(ScalarValue::TimestampSecond(Some(3600), None));
        assert_eq!(
            time_range_from_filters(&[col("ts").gt_eq(seconds)]).since_ns,
            Some(HOUR_NS)
        );
        let millis = lit(ScalarValue::TimestampMillisecond(Some(3_600_000), None));
        assert_eq!(
            time_range_from_filters(&[col("ts").gt_eq(millis)]).since_ns,
            Some(HOUR_NS)
        );
        assert_eq!(
            time_range_from_filters(&[col("ts").gt_eq(lit(HOUR_NS))]).since_ns,
            Some(HOUR_NS)
        );
        let text = lit("1970-01-01T01:00:00Z");
        assert_eq!(
            time_range_from_filters(&[col("ts").gt_eq(text.clone())]).since_ns,
            Some(HOUR_NS)
        );
        let cast = Expr::Cast(datafusion::logical_expr::Cast::new(
            Box::new(text),
            ts_data_type(),
        ));
        assert_eq!(
            time_range_from_filters(&[col("ts").gt_eq(cast)]).since_ns,
            Some(HOUR_NS)
        );
    }

    #[test]
    fn between_and_unrelated_filters() {
        let between = col("ts").between(ts_lit(5), ts_lit(9));
        assert_eq!(
            time_range_from_filters(&[between, col("model").eq(lit("m"))]),
            TimeRange {
                since_ns: Some(5),
                until_ns: Some(10)
            }
        );
        // a disjunction cannot narrow the range; neither can another column
        let or = col("ts").gt(ts_lit(5)).or(col("ts").lt(ts_lit(1)));
        assert_eq!(time_range_from_filters(&[or]), TimeRange::ALL);
        assert_eq!(
            time_range_from_filters(&[col("other").gt(ts_lit(5))]),
            TimeRange::ALL
        );
        assert_eq!(
            time_range_from_filters(&[col("ts").not_eq(ts_lit(5))]),
            TimeRange::ALL
        );
    }
}
