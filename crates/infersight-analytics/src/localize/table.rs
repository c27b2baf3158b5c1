//! CSV leaf tables for `infersight localize --table FILE.csv …`: the binary opens the file and
//! passes a reader; this module parses the two benchmark layouts into a [`LeafTable`] plus a
//! measure and runs the localization. No file IO here.
//!
//! * Additive (Squeeze layout): one row per leaf, a `real` and a `forecast` column; every other
//!   column is a dimension unless `dims` names them.
//! * Derived (RobustSpot layout): one row per leaf per time interval with a time column, a
//!   numerator and a denominator column. The leaf table is the rows at `at`; the forecast of a
//!   leaf is the mean over the `history` distinct times just before `at` (a leaf absent from an
//!   interval counts 0 there). Rows of the same leaf and time are summed.

use std::collections::{BTreeSet, HashMap};
use std::io::Read;

use super::{
    AdditiveMeasure, DerivedMeasure, LeafTable, Localization, LocalizeError, Params,
    localize_additive, localize_derived,
};

/// Which measure columns a CLI request names.
#[derive(Debug, Clone, PartialEq)]
pub enum CliMeasure {
    Additive {
        real: String,
        forecast: String,
    },
    Derived {
        time: String,
        at: i64,
        numerator: String,
        denominator: String,
        history: usize,
    },
}

/// One `infersight localize --table …` request.
#[derive(Debug, Clone, PartialEq)]
pub struct CliSpec {
    pub measure: CliMeasure,
    /// Dimension columns; `None` = every column that is not a measure (or the time column).
    pub dims: Option<Vec<String>>,
}

/// Parses the table, localizes with `params`, and returns the root causes as `attr=v&attr=v`
/// strings (empty when nothing specific is found or the change is fleet-wide).
pub fn run_cli_request<R: Read>(
    reader: R,
    spec: &CliSpec,
    params: &Params,
) -> Result<Vec<String>, LocalizeError> {
    Ok(localize_csv(reader, spec, params)?
        .root_causes
        .iter()
        .map(|cause| cause.key())
        .collect())
}

/// Parses the table and localizes with `params`, returning the full result.
pub fn localize_csv<R: Read>(
    reader: R,
    spec: &CliSpec,
    params: &Params,
) -> Result<Localization, LocalizeError> {
    match &spec.measure {
        CliMeasure::Additive { real, forecast } => {
            let (table, measure) = read_additive(reader, real, forecast, spec.dims.as_deref())?;
            localize_additive(&table, &measure, params)
        }
        CliMeasure::Derived {
            time,
            at,
            numerator,
            denominator,
            history,
        } => {
            let (table, measure) = read_derived(
                reader,
                time,
                *at,
                numerator,
                denominator,
                *history,
                spec.dims.as_deref(),
            )?;
            localize_derived(&table, &measure, params)
        }
    }
}

/// Reads the additive layout: one row per leaf (duplicate leaves are summed).
pub fn read_additive<R: Read>(
    reader: R,
    real_column: &str,
    forecast_column: &str,
    dims: Option<&[String]>,
) -> Result<(LeafTable, AdditiveMeasure), LocalizeError> {
    let mut csv = Csv::new(reader, &[real_column, forecast_column], dims)?;
    let (real_index, forecast_index) = (csv.column(real_column)?, csv.column(forecast_column)?);
    let mut measure = AdditiveMeasure::default();
    while csv.next_row()? {
        let real = csv.number(real_index, real_column)?;
        let forecast = csv.number(forecast_index, forecast_column)?;
        let leaf = csv.leaf();
        if leaf == measure.real.len() {
            measure.real.push(0.0);
            measure.forecast.push(0.0);
        }
        measure.real[leaf] += real;
        measure.forecast[leaf] += forecast;
    }
    let table = csv.finish()?;
    Ok((table, measure))
}

/// Reads the derived layout (see the module documentation).
pub fn read_derived<R: Read>(
    reader: R,
    time_column: &str,
    at: i64,
    numerator_column: &str,
    denominator_column: &str,
    history: usize,
    dims: Option<&[String]>,
) -> Result<(LeafTable, DerivedMeasure), LocalizeError> {
    let mut csv = Csv::new(
        reader,
        &[time_column, numerator_column, denominator_column],
        dims,
    )?;
    let time_index = csv.column(time_column)?;
    let numerator_index = csv.column(numerator_column)?;
    let denominator_index = csv.column(denominator_column)?;
    // (leaf, time) → (numerator, denominator), only for times ≤ at.
    let mut cells: HashMap<(usize, i64), (f64, f64)> = HashMap::new();
    let mut times = BTreeSet::new();
    while csv.next_row()? {
        let time = csv.number(time_index, time_column)?.round() as i64;
        if time > at {
            continue;
        }
        let numerator = csv.number(numerator_index, numerator_column)?;
        let denominator = csv.number(denominator_index, denominator_column)?;
        let leaf = csv.leaf();
        times.insert(time);
        let cell = cells.entry((leaf, time)).or_insert((0.0, 0.0));
        cell.0 += numerator;
        cell.1 += denominator;
    }
    if !times.contains(&at) {
        return Err(LocalizeError::NoRowsAtTime {
            column: time_column.to_string(),
            at,
        });
    }
    let history_times: Vec<i64> = times.range(..at).rev().take(history).copied().collect();
    let table = csv.finish()?;
    let n = table.len();
    let mut measure = DerivedMeasure {
        numerator_real: vec![0.0; n],
        numerator_forecast: vec![0.0; n],
        denominator_real: vec![0.0; n],
        denominator_forecast: vec![0.0; n],
        sample_weight: Vec::new(),
    };
    let periods = history_times.len().max(1) as f64;
    for (&(leaf, time), &(numerator, denominator)) in &cells {
        if time == at {
            measure.numerator_real[leaf] += numerator;
            measure.denominator_real[leaf] += denominator;
        } else if history_times.contains(&time) {
            measure.numerator_forecast[leaf] += numerator / periods;
            measure.denominator_forecast[leaf] += denominator / periods;
        }
    }
    Ok((table, measure))
}

/// A CSV reader that interns the dimension columns of every row into a [`LeafTable`].
struct Csv<R: Read> {
    reader: csv::Reader<R>,
    header: Vec<String>,
    dimension_columns: Vec<usize>,
    table: LeafTable,
    value_ids: Vec<HashMap<String, u32>>,
    leaf_ids: HashMap<Vec<u32>, usize>,
    record: csv::StringRecord,
}

impl<R: Read> Csv<R> {
    /// The numeric field `index` of the current row.
    fn number(&self, index: usize, column: &str) -> Result<f64, LocalizeError> {
        let text = self.record.get(index).unwrap_or("").trim();
        match text.parse::<f64>() {
            Ok(value) if value.is_finite() => Ok(value),
            _ => Err(LocalizeError::BadNumber {
                line: self.record.position().map_or(0, |position| position.line()),
                column: column.to_string(),
                value: text.to_string(),
            }),
        }
    }
}

impl<R: Read> Csv<R> {
    fn new(
        reader: R,
        measure_columns: &[&str],
        dims: Option<&[String]>,
    ) -> Result<Self, LocalizeError> {
        let mut reader = csv::ReaderBuilder::new()
            .flexible(false)
            .from_reader(reader);
        let header: Vec<String> = reader
            .headers()
            .map_err(|error| csv_error(&error, 1))?
            .iter()
            .map(|name| name.trim().to_string())
            .collect();
        for column in measure_columns {
            if !header.iter().any(|name| name == column) {
                return Err(LocalizeError::MissingColumn(column.to_string()));
            }
        }
        let dimension_columns: Vec<usize> = match dims {
            Some(names) => names
                .iter()
                .map(|name| {
                    header
                        .iter()
                        .position(|column| column == name)
                        .ok_or_else(|| LocalizeError::MissingColumn(name.clone()))
                })
                .collect::<Result<_, _>>()?,
            None => (0..header.len())
                .filter(|&index| !measure_columns.contains(&header[index].as_str()))
                .collect(),
        };
        if dimension_columns.is_empty() {
            return Err(LocalizeError::NoDimensions);
        }
        let table = LeafTable::new(dimension_columns.iter().map(|&index| header[index].clone()));
        Ok(Csv {
            reader,
            value_ids: vec![HashMap::new(); dimension_columns.len()],
            header,
            dimension_columns,
            table,
            leaf_ids: HashMap::new(),
            record: csv::StringRecord::new(),
        })
    }

    fn column(&self, name: &str) -> Result<usize, LocalizeError> {
        self.header
            .iter()
            .position(|column| column == name)
            .ok_or_else(|| LocalizeError::MissingColumn(name.to_string()))
    }

    /// Reads the next data row into `self.record`; false at the end.
    fn next_row(&mut self) -> Result<bool, LocalizeError> {
        self.reader.read_record(&mut self.record).map_err(|error| {
            let line = error.position().map_or(0, |position| position.line());
            csv_error(&error, line)
        })
    }

    /// Index of the current row's leaf, interning new values and leaves.
    fn leaf(&mut self) -> usize {
        let mut key = Vec::with_capacity(self.dimension_columns.len());
        for (dimension, &column) in self.dimension_columns.iter().enumerate() {
            let value = self.record.get(column).unwrap_or("").trim();
            let ids = &mut self.value_ids[dimension];
            let id = match ids.get(value) {
                Some(&id) => id,
                None => {
                    let values = &mut self.table.dimensions[dimension].values;
                    values.push(value.to_string());
                    let id = (values.len() - 1) as u32;
                    ids.insert(value.to_string(), id);
                    id
                }
            };
            key.push(id);
        }
        let next = self.leaf_ids.len();
        let leaf = *self.leaf_ids.entry(key.clone()).or_insert(next);
        if leaf == next {
            self.table.codes.extend_from_slice(&key);
        }
        leaf
    }

    fn finish(self) -> Result<LeafTable, LocalizeError> {
        if self.table.is_empty() {
            return Err(LocalizeError::Empty);
        }
        Ok(self.table)
    }
}

fn csv_error(error: &csv::Error, line: u64) -> LocalizeError {
    LocalizeError::Csv {
        line,
        message: error.to_string().to_lowercase(),
    }
}
