//! What the trace, log and metric conversions share: OTLP attribute values turned into the
//! protocol-neutral [`AttrValue`], and the tally of rejected records and skipped parts that
//! becomes an export's `partial_success` message.

use infersight_model::AttrValue;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};

/// Counts rejections and keeps the first reason; also counts skipped parts of accepted records
/// (token events), which are warnings, not rejections.
#[derive(Debug, Default)]
pub(crate) struct Rejections {
    pub(crate) count: u64,
    first: Option<String>,
    skipped: u64,
    first_skipped: Option<String>,
}

impl Rejections {
    pub(crate) fn reject(&mut self, reason: impl FnOnce() -> String) {
        if self.first.is_none() {
            self.first = Some(reason());
        }
        self.count += 1;
    }

    /// A part of an accepted record was dropped (its record stays accepted).
    pub(crate) fn skip(&mut self, reason: impl FnOnce() -> String) {
        if self.first_skipped.is_none() {
            self.first_skipped = Some(reason());
        }
        self.skipped += 1;
    }

    pub(crate) fn message(&self) -> Option<String> {
        let rejected = self.first.as_ref().map(|first| match self.count {
            0 | 1 => first.clone(),
            n => format!("{first} (and {} more rejected)", n - 1),
        });
        let skipped = self.first_skipped.as_ref().map(|first| match self.skipped {
            0 | 1 => first.clone(),
            n => format!("{first} (and {} more skipped)", n - 1),
        });
        match (rejected, skipped) {
            (Some(a), Some(b)) => Some(format!("{a}; {b}")),
            (a, b) => a.or(b),
        }
    }
}

/// Converts an OTLP `AnyValue` into the protocol-neutral attribute value.
pub fn any_value_to_attr(value: &AnyValue) -> AttrValue {
    match &value.value {
        None => AttrValue::Empty,
        Some(any_value::Value::StringValue(s)) => AttrValue::Str(s.clone()),
        Some(any_value::Value::BoolValue(b)) => AttrValue::Bool(*b),
        Some(any_value::Value::IntValue(i)) => AttrValue::Int(*i),
        Some(any_value::Value::DoubleValue(d)) => AttrValue::Double(*d),
        Some(any_value::Value::BytesValue(b)) => AttrValue::Bytes(b.clone()),
        Some(any_value::Value::ArrayValue(a)) => {
            AttrValue::Array(a.values.iter().map(any_value_to_attr).collect())
        }
        Some(any_value::Value::KvlistValue(kv)) => AttrValue::Map(key_values(&kv.values)),
        // An index into a profiles string table, meaningless without that table.
        Some(any_value::Value::StringValueStrindex(_)) => AttrValue::Empty,
    }
}

/// Converts OTLP key/values into attribute pairs, in order.
pub fn key_values(pairs: &[KeyValue]) -> Vec<(String, AttrValue)> {
    pairs
        .iter()
        .map(|kv| {
            let value = kv
                .value
                .as_ref()
                .map(any_value_to_attr)
                .unwrap_or(AttrValue::Empty);
            (kv.key.clone(), value)
        })
        .collect()
}

/// [`any_value_to_attr`] of a value that is not needed afterwards: its strings are moved.
pub(crate) fn any_value_into_attr(value: AnyValue) -> AttrValue {
    match value.value {
        Some(any_value::Value::StringValue(s)) => AttrValue::Str(s),
        Some(any_value::Value::BytesValue(b)) => AttrValue::Bytes(b),
        Some(any_value::Value::ArrayValue(a)) => {
            AttrValue::Array(a.values.into_iter().map(any_value_into_attr).collect())
        }
        Some(any_value::Value::KvlistValue(kv)) => AttrValue::Map(key_values_into(kv.values)),
        other => any_value_to_attr(&AnyValue { value: other }),
    }
}

/// [`key_values`] of pairs that are not needed afterwards: their strings are moved.
pub(crate) fn key_values_into(pairs: Vec<KeyValue>) -> Vec<(String, AttrValue)> {
    pairs
        .into_iter()
        .map(|kv| {
            let value = kv.value.map_or(AttrValue::Empty, any_value_into_attr);
            (kv.key, value)
        })
        .collect()
}
