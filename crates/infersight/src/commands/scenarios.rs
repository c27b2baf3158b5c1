//! `infersight scenarios`: name and description of every fault scenario of the fleet simulator
//! (what `infersight simulate --scenario` accepts); a description names its worker as in the
//! default 16-worker fleet (a run's `ground_truth.json` names the worker of its own fleet).

use infersight_sim::Scenario;
use serde_json::json;

use crate::args::FormatArgs;
use crate::exit::CliError;
use crate::output::{self, OutputFormat};

#[derive(Debug, clap::Args)]
pub struct ScenariosArgs {
    #[command(flatten)]
    pub format: FormatArgs,
}

pub fn run(args: ScenariosArgs) -> Result<i32, CliError> {
    let text = match args.format.format {
        OutputFormat::Json => {
            let list: Vec<_> = Scenario::ALL
                .iter()
                .map(|s| json!({"name": s.name(), "description": s.description()}))
                .collect();
            output::json_line(&list)? + "\n"
        }
        OutputFormat::Csv => output::csv(
            &["name", "description"],
            Scenario::ALL.iter().map(|s| [s.name(), s.description()]),
        )?,
        OutputFormat::Table => {
            let rows: Vec<Vec<&str>> = Scenario::ALL
                .iter()
                .map(|s| vec![s.name(), s.description()])
                .collect();
            output::fit_table::<&str, _>(None, &rows)
        }
    };
    // A closed pipe (`| head`) is not an error worth a panic.
    output::emit(&text);
    Ok(0)
}
