//! `json_get(json, key) -> Utf8`: the value of a top-level key of a JSON object string, so users
//! can group and filter by any attribute kept in an `attrs` column without a schema change:
//! `SELECT json_get(attrs, 'llm.lora.adapters') AS adapters, count(*) FROM requests GROUP BY 1`.
//!
//! Strings come back unquoted, numbers and booleans as their JSON text, arrays and objects as
//! compact JSON. NULL when the input is NULL or not a JSON object, or the key is absent or null.
//! That is `serde_json::from_str::<Map<String, Value>>` and the key's (last) value; rows are read
//! with [`infersight_model::attrs`], which gives the same answer without building the map (the
//! map is built only when the value asked for is an array or object).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, StringArray, StringBuilder};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use infersight_model::attrs::{AttrsEntry, AttrsValue, ValueTexts, read_attrs};

pub const JSON_GET: &str = "json_get";

/// The `json_get` scalar UDF, ready for `SessionContext::register_udf`.
pub fn json_get_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(JsonGet::new())
}

/// The value of `key` in the JSON object `json`, rendered as text (see the module docs).
pub fn json_get_value(json: &str, key: &str) -> Option<String> {
    JsonGetter::default().get(json, key).map(str::to_owned)
}

/// The value of `key` in the JSON object `json` through a `serde_json::Map`: the definition of
/// `json_get`, used for arrays and objects, whose text the `attrs` reader does not keep.
fn json_get_from_map(json: &str, key: &str) -> Option<String> {
    let object: serde_json::Map<String, serde_json::Value> = serde_json::from_str(json).ok()?;
    value_text(object.get(key)?)
}

/// Reads `json_get` values row after row, reusing its buffers across the rows of one array.
#[derive(Default)]
struct JsonGetter<'a> {
    entries: Vec<AttrsEntry<'a>>,
    texts: ValueTexts,
    /// The text of the last array or object asked for.
    nested: String,
}

impl<'a> JsonGetter<'a> {
    fn get(&mut self, json: &'a str, key: &str) -> Option<&str> {
        if !read_attrs(json, &mut self.entries) {
            return None;
        }
        // of a repeated key the map keeps the last value
        let (_, value) = self.entries.iter().rev().find(|(name, _)| name == key)?;
        if let AttrsValue::NotScalar = value {
            self.nested = json_get_from_map(json, key)?;
            return Some(&self.nested);
        }
        self.texts.text(value)
    }
}

/// Text of a JSON value as `json_get` returns it; `None` for JSON null.
pub fn value_text(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::Null => None,
        serde_json::Value::String(text) => Some(text.clone()),
        other => Some(other.to_string()),
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonGet {
    signature: Signature,
}

impl JsonGet {
    fn new() -> Self {
        Self {
            signature: Signature::string(2, Volatility::Immutable),
        }
    }
}

fn to_utf8(array: &ArrayRef) -> Result<ArrayRef> {
    if array.data_type() == &DataType::Utf8 {
        Ok(Arc::clone(array))
    } else {
        Ok(cast(array, &DataType::Utf8)?)
    }
}

fn scalar_text(value: &ScalarValue) -> Option<&str> {
    match value {
        ScalarValue::Utf8(text) | ScalarValue::LargeUtf8(text) | ScalarValue::Utf8View(text) => {
            text.as_deref()
        }
        _ => None,
    }
}

impl ScalarUDFImpl for JsonGet {
    fn name(&self) -> &str {
        JSON_GET
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [json, key] = args.args.as_slice() else {
            return exec_err!(
                "json_get expects 2 arguments (json, key), got {}",
                args.args.len()
            );
        };
        match (json, key) {
            (ColumnarValue::Scalar(json), ColumnarValue::Scalar(key)) => {
                let value = scalar_text(json)
                    .zip(scalar_text(key))
                    .and_then(|(json, key)| json_get_value(json, key));
                Ok(ColumnarValue::Scalar(ScalarValue::Utf8(value)))
            }
            (ColumnarValue::Array(json), ColumnarValue::Scalar(key)) => {
                let json = to_utf8(json)?;
                let json = json
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .expect("cast to utf8");
                let mut out = StringBuilder::with_capacity(json.len(), json.len() * 8);
                match scalar_text(key) {
                    Some(key) => {
                        let mut getter = JsonGetter::default();
                        for text in json.iter() {
                            out.append_option(text.and_then(|text| getter.get(text, key)));
                        }
                    }
                    None => (0..json.len()).for_each(|_| out.append_null()),
                }
                Ok(ColumnarValue::Array(Arc::new(out.finish())))
            }
            _ => {
                let arrays = ColumnarValue::values_to_arrays(&args.args)?;
                let json = to_utf8(&arrays[0])?;
                let key = to_utf8(&arrays[1])?;
                let json = json
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .expect("cast to utf8");
                let key = key
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .expect("cast to utf8");
                let mut out = StringBuilder::with_capacity(json.len(), json.len() * 8);
                let mut getter = JsonGetter::default();
                for (text, key) in json.iter().zip(key.iter()) {
                    out.append_option(text.zip(key).and_then(|(t, k)| getter.get(t, k)));
                }
                Ok(ColumnarValue::Array(Arc::new(out.finish())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_render_as_text() {
        let json = r#"{"s":"a","n":3,"f":1.5,"b":true,"z":null,"o":{"k":1},"a":[1,2]}"#;
        assert_eq!(json_get_value(json, "s").as_deref(), Some("a"));
        assert_eq!(json_get_value(json, "n").as_deref(), Some("3"));
        assert_eq!(json_get_value(json, "f").as_deref(), Some("1.5"));
        assert_eq!(json_get_value(json, "b").as_deref(), Some("true"));
        assert_eq!(json_get_value(json, "z"), None);
        assert_eq!(json_get_value(json, "o").as_deref(), Some(r#"{"k":1}"#));
        assert_eq!(json_get_value(json, "a").as_deref(), Some("[1,2]"));
        assert_eq!(json_get_value(json, "missing"), None);
        assert_eq!(json_get_value("not json", "s"), None);
        assert_eq!(json_get_value("[1]", "s"), None);
    }

    /// `json_get` through the `attrs` reader equals its definition through a `serde_json::Map`,
    /// on flat, escaped, repeated, nested and invalid objects, for every key and a missing one.
    #[test]
    fn values_equal_the_map_definition() {
        let texts = [
            r#"{"s":"a","n":3,"f":1.5,"b":true,"z":null,"o":{"k":1},"a":[1,2]}"#,
            r#"{"dup":1,"dup":"two","o":{"b":1,"a":[2.50,-0]},"dup":{"x":null}}"#,
            r#"{"e":"x\ny\u00e9","k\"q":1e3,"big":12345678901234567890,"neg":-0}"#,
            r#"{"raw":{"$serde_json::private::RawValue":"5"},"v":"w"}"#,
            r#" { "ws" : [ 1 , { "a" : { } } ] , "t" : false } "#,
            r#"{"a":1,}"#,
            r#"{"a":"\ud800"}"#,
            "[1]",
            "",
        ];
        let keys = [
            "s", "n", "f", "b", "z", "o", "a", "dup", "e", "k\"q", "big", "neg",
        ];
        let keys = keys.into_iter().chain(["raw", "v", "ws", "t", "missing"]);
        for key in keys {
            let mut getter = JsonGetter::default();
            for text in texts {
                let expected = json_get_from_map(text, key);
                assert_eq!(
                    getter.get(text, key),
                    expected.as_deref(),
                    "{key} in {text}"
                );
                assert_eq!(json_get_value(text, key), expected, "{key} in {text}");
            }
        }
    }
}
