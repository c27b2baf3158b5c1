//! `infersight localize --table FILE.csv …`: root-cause localization of a benchmark-style leaf
//! table, without a store: which attribute combinations explain the deviation (additive
//! `--real/--forecast`, or a derived ratio over a time column). Prints
//! `{"root_causes": [...], "fleet_wide": ..}`.

use std::io::{BufReader, Read};
use std::path::PathBuf;

use infersight_analytics::localize::{CliMeasure, CliSpec, Params, localize_csv};
use serde_json::json;

use crate::exit::CliError;
use crate::output;

#[derive(Debug, Default, clap::Args)]
pub struct LocalizeArgs {
    #[arg(long)]
    pub table: PathBuf,
    #[arg(long)]
    pub real: Option<String>,
    #[arg(long)]
    pub forecast: Option<String>,
    #[arg(long = "time-col")]
    pub time_col: Option<String>,
    /// The anomalous interval (value of the time column, e.g. a Unix second).
    #[arg(long)]
    pub at: Option<i64>,
    #[arg(long)]
    pub numerator: Option<String>,
    #[arg(long)]
    pub denominator: Option<String>,
    /// Intervals before --at whose mean is the forecast [default: 10].
    #[arg(long)]
    pub history: Option<usize>,
    /// Comma-separated dimension columns.
    #[arg(long)]
    pub dims: Option<String>,
}

pub fn run(args: LocalizeArgs) -> Result<i32, CliError> {
    let spec = CliSpec {
        measure: measure(&args)?,
        dims: args.dims.as_deref().map(|d| {
            d.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        }),
    };
    let file = std::fs::File::open(&args.table)
        .map_err(|e| CliError::usage(format!("cannot open {}: {e}", args.table.display())))?;
    let reader: Box<dyn Read> = Box::new(BufReader::new(file));
    let result = localize_csv(reader, &spec, &Params::default())
        .map_err(|e| CliError::usage(format!("{}: {e}", args.table.display())))?;
    let causes: Vec<String> = result.root_causes.iter().map(|c| c.key()).collect();
    let value = json!({ "root_causes": causes, "fleet_wide": result.fleet_wide });
    println!("{}", output::json_line(&value)?);
    Ok(0)
}

/// Additive (`--real`, `--forecast`) or derived ratio (`--time-col`, `--at`, `--numerator`,
/// `--denominator`), never a mix.
fn measure(args: &LocalizeArgs) -> Result<CliMeasure, CliError> {
    match args {
        LocalizeArgs {
            real: Some(real),
            forecast: Some(forecast),
            time_col: None,
            numerator: None,
            denominator: None,
            ..
        } => Ok(CliMeasure::Additive {
            real: real.clone(),
            forecast: forecast.clone(),
        }),
        LocalizeArgs {
            real: None,
            forecast: None,
            time_col: Some(time),
            at: Some(at),
            numerator: Some(numerator),
            denominator: Some(denominator),
            ..
        } => Ok(CliMeasure::Derived {
            time: time.clone(),
            at: *at,
            numerator: numerator.clone(),
            denominator: denominator.clone(),
            history: args.history.unwrap_or(10),
        }),
        _ => Err(CliError::usage(
            "give either --real and --forecast (additive), or --time-col, --at, --numerator and --denominator (derived ratio)",
        )),
    }
}
