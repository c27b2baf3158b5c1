//! A protocol-independent attribute value. Receivers convert OTLP `AnyValue`, JSON values and
//! Prometheus labels into it before normalization, so the mapping code knows no wire format.

use serde_json::Value as Json;

#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Str(String),
    Bool(bool),
    Int(i64),
    Double(f64),
    Bytes(Vec<u8>),
    Array(Vec<AttrValue>),
    Map(Vec<(String, AttrValue)>),
    Empty,
}

impl AttrValue {
    pub fn type_name(&self) -> &'static str {
        match self {
            AttrValue::Str(_) => "string",
            AttrValue::Bool(_) => "bool",
            AttrValue::Int(_) => "int",
            AttrValue::Double(_) => "double",
            AttrValue::Bytes(_) => "bytes",
            AttrValue::Array(_) => "array",
            AttrValue::Map(_) => "map",
            AttrValue::Empty => "empty",
        }
    }

    /// JSON form kept in the `attrs` column: scalars as themselves, bytes as lowercase hex.
    pub fn to_json(&self) -> Json {
        match self {
            AttrValue::Str(s) => Json::String(s.clone()),
            AttrValue::Bool(b) => Json::Bool(*b),
            AttrValue::Int(i) => Json::from(*i),
            AttrValue::Double(d) => serde_json::Number::from_f64(*d)
                .map(Json::Number)
                .unwrap_or(Json::Null),
            AttrValue::Bytes(b) => Json::String(b.iter().map(|x| format!("{x:02x}")).collect()),
            AttrValue::Array(items) => Json::Array(items.iter().map(AttrValue::to_json).collect()),
            AttrValue::Map(entries) => Json::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_json()))
                    .collect(),
            ),
            AttrValue::Empty => Json::Null,
        }
    }

    /// Converts a plain JSON value (JSON-lines input) into an attribute value.
    pub fn from_json(value: &Json) -> AttrValue {
        match value {
            Json::Null => AttrValue::Empty,
            Json::Bool(b) => AttrValue::Bool(*b),
            Json::Number(n) => match n.as_i64() {
                Some(i) => AttrValue::Int(i),
                None => AttrValue::Double(n.as_f64().unwrap_or(f64::NAN)),
            },
            Json::String(s) => AttrValue::Str(s.clone()),
            Json::Array(items) => {
                AttrValue::Array(items.iter().map(AttrValue::from_json).collect())
            }
            Json::Object(map) => AttrValue::Map(
                map.iter()
                    .map(|(k, v)| (k.clone(), AttrValue::from_json(v)))
                    .collect(),
            ),
        }
    }

    /// Short string form used for string columns (`model`, `worker`, …) when an attribute that is
    /// not a string carries a label, e.g. an integer worker index.
    pub fn as_label(&self) -> Option<String> {
        match self {
            AttrValue::Str(s) => Some(s.clone()),
            AttrValue::Int(i) => Some(i.to_string()),
            AttrValue::Bool(b) => Some(b.to_string()),
            AttrValue::Double(d) => Some(d.to_string()),
            AttrValue::Array(items) => {
                let labels: Option<Vec<String>> = items.iter().map(AttrValue::as_label).collect();
                labels.map(|mut l| {
                    l.sort();
                    l.join(",")
                })
            }
            AttrValue::Bytes(_) | AttrValue::Map(_) | AttrValue::Empty => None,
        }
    }
}
