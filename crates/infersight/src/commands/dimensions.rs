//! `infersight dimensions`: the low-cardinality attributes of `requests` in a time range (the
//! candidate root-cause dimensions), with their most frequent values.

use std::sync::Arc;

use infersight_model::time::{now_ns, parse_range};
use infersight_store::StorageBackend;
use serde_json::json;

use crate::args::{Common, FormatArgs};
use crate::exit::CliError;
use crate::output::{self, Column, OutputFormat};
use crate::wiring;

#[derive(Debug, clap::Args)]
pub struct DimensionsArgs {
    #[command(flatten)]
    pub common: Common,
    #[arg(long)]
    pub since: Option<String>,
    #[arg(long)]
    pub until: Option<String>,
    /// Attributes with more distinct values are not dimensions.
    #[arg(long)]
    pub max_cardinality: Option<usize>,
    #[command(flatten)]
    pub format: FormatArgs,
}

const HEADER_COLUMNS: [Column; 4] = [
    Column::left(32),
    Column::left(7),
    Column::right(9),
    Column::left(0).after_gap(2),
];

/// The rows' source was never padded (its `Display` ignored the width), so the rows keep
/// their bytes: `column` and `attrs` are not padded to the header's 7 characters.
const ROW_COLUMNS: [Column; 4] = [
    Column::left(32),
    Column::left(0),
    Column::right(9),
    Column::left(0).after_gap(2),
];

pub async fn run(args: DimensionsArgs) -> Result<i32, CliError> {
    let config = args.common.resolve()?;
    let range = parse_range(args.since.as_deref(), args.until.as_deref(), now_ns())
        .map_err(CliError::usage)?;
    let store = tokio::task::block_in_place(|| wiring::open_existing_store(&config))?;
    let engine = super::query::audited_engine(store.clone() as Arc<dyn StorageBackend>, &config);
    let dims = infersight_explore::discover_dimensions(
        &engine,
        range,
        args.max_cardinality
            .unwrap_or(config.query.max_dimension_cardinality),
        10,
    )
    .await;
    let outcome = dims.as_ref().map(|_| ()).map_err(|e| e.kind());
    super::query::audit_cli_command(
        &engine,
        "dimensions",
        &infersight_explore::dimensions::scanned_columns(),
        outcome,
    )
    .await;
    let dims = dims.map_err(|e| CliError::from_kind(e.kind(), e.to_string()))?;
    match args.format.format {
        OutputFormat::Json => {
            let list: Vec<_> = dims
                .iter()
                .map(|d| {
                    json!({"name": d.name, "source": d.source, "distinct_values": d.distinct_values,
                                "total_rows": d.total_rows, "values": d.values})
                })
                .collect();
            println!("{}", output::json_line(&json!({ "dimensions": list }))?);
        }
        OutputFormat::Csv => {
            let rows = dims.iter().flat_map(|d| {
                d.values.iter().map(move |(value, count)| {
                    [
                        d.name.clone(),
                        d.source.to_string(),
                        d.distinct_values.to_string(),
                        value.clone(),
                        count.to_string(),
                    ]
                })
            });
            let header = ["name", "source", "distinct_values", "value", "count"];
            print!("{}", output::csv(&header, rows)?);
        }
        OutputFormat::Table => {
            let header = ["dimension", "source", "distinct", "top values"];
            println!("{}", output::fixed_line(&HEADER_COLUMNS, &header));
            for d in &dims {
                let top: Vec<String> = d
                    .values
                    .iter()
                    .take(5)
                    .map(|(v, n)| format!("{v} ({n})"))
                    .collect();
                let cells = [
                    d.name.clone(),
                    d.source.to_string(),
                    d.distinct_values.to_string(),
                    top.join(", "),
                ];
                println!("{}", output::fixed_line(&ROW_COLUMNS, &cells));
            }
        }
    }
    Ok(0)
}
