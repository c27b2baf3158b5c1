//! Query results and how they are printed: `--format table|csv|json` on the CLI and the JSON
//! object the HTTP API returns. Timestamps render as RFC 3339 in every format.

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::util::pretty::pretty_format_batches;
use serde::{Deserialize, Serialize};

use crate::error::QueryError;

/// How to print a [`QueryOutput`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputFormat {
    /// An ASCII table for people.
    #[default]
    Table,
    /// RFC 4180 CSV with a header row.
    Csv,
    /// A JSON array of row objects (null columns included as `null`).
    Json,
}

impl std::str::FromStr for OutputFormat {
    type Err = QueryError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "table" => Ok(OutputFormat::Table),
            "csv" => Ok(OutputFormat::Csv),
            "json" => Ok(OutputFormat::Json),
            other => Err(QueryError::BadRequest(format!(
                "unknown output format `{other}` (expected table, csv or json)"
            ))),
        }
    }
}

/// The complete result of one query.
#[derive(Debug, Clone)]
pub struct QueryOutput {
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
    /// Wall time from receiving the SQL text to the last batch, in milliseconds.
    pub elapsed_ms: f64,
}

impl QueryOutput {
    pub fn row_count(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }

    /// The result in `format`; see [`QueryOutput::try_render`] for the fallible version.
    pub fn render(&self, format: OutputFormat) -> String {
        self.try_render(format)
            .unwrap_or_else(|error| format!("error: {error}"))
    }

    pub fn try_render(&self, format: OutputFormat) -> Result<String, QueryError> {
        let rendered = match format {
            OutputFormat::Table => self.render_table(),
            OutputFormat::Csv => self.render_csv(),
            OutputFormat::Json => self.render_json(),
        };
        rendered.map_err(|error| QueryError::Internal(format!("rendering results: {error}")))
    }

    /// `{"columns":[{"name","type"}],"rows":[{..}],"row_count":n,"elapsed_ms":x}` for the HTTP API.
    pub fn to_json_value(&self) -> Result<serde_json::Value, QueryError> {
        let rows: serde_json::Value =
            serde_json::from_str(&self.try_render(OutputFormat::Json)?)
                .map_err(|error| QueryError::Internal(format!("re-reading json rows: {error}")))?;
        let columns: Vec<serde_json::Value> = self
            .schema
            .fields()
            .iter()
            .map(|field| {
                serde_json::json!({ "name": field.name(), "type": field.data_type().to_string() })
            })
            .collect();
        Ok(serde_json::json!({
            "columns": columns,
            "rows": rows,
            "row_count": self.row_count(),
            "elapsed_ms": self.elapsed_ms,
        }))
    }

    /// [`QueryOutput::to_json_value`] as text, the rows written straight from the batches: a
    /// JSON tree of a large result takes several times its text in memory, this takes the text.
    pub fn to_json_text(&self) -> Result<String, QueryError> {
        let rows = self.try_render(OutputFormat::Json)?;
        let columns: Vec<serde_json::Value> = self
            .schema
            .fields()
            .iter()
            .map(|field| {
                serde_json::json!({ "name": field.name(), "type": field.data_type().to_string() })
            })
            .collect();
        Ok(format!(
            "{{\"columns\":{},\"rows\":{rows},\"row_count\":{},\"elapsed_ms\":{}}}",
            json_text(&columns)?,
            self.row_count(),
            json_text(&self.elapsed_ms)?,
        ))
    }

    /// The batches, or one empty batch so headers still print for an empty result.
    fn batches_or_empty(&self) -> Vec<RecordBatch> {
        if self.batches.is_empty() {
            vec![RecordBatch::new_empty(self.schema.clone())]
        } else {
            self.batches.clone()
        }
    }

    fn render_table(&self) -> Result<String, ArrowError> {
        Ok(pretty_format_batches(&self.batches_or_empty())?.to_string())
    }

    fn render_csv(&self) -> Result<String, ArrowError> {
        let mut buffer = Vec::new();
        {
            let mut writer = datafusion::arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(&mut buffer);
            for batch in self.batches_or_empty() {
                writer.write(&batch)?;
            }
        }
        String::from_utf8(buffer).map_err(|error| ArrowError::CsvError(error.to_string()))
    }

    fn render_json(&self) -> Result<String, ArrowError> {
        let mut buffer = Vec::new();
        {
            let mut writer = datafusion::arrow::json::WriterBuilder::new()
                .with_explicit_nulls(true)
                .build::<_, datafusion::arrow::json::writer::JsonArray>(&mut buffer);
            for batch in &self.batches {
                writer.write(batch)?;
            }
            writer.finish()?;
        }
        String::from_utf8(buffer).map_err(|error| ArrowError::JsonError(error.to_string()))
    }
}

fn json_text<T: Serialize>(value: &T) -> Result<String, QueryError> {
    serde_json::to_string(value)
        .map_err(|error| QueryError::Internal(format!("encoding json: {error}")))
}
