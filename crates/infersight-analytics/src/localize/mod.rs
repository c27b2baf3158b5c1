//! Root-cause localization: which attribute combinations explain a deviation. Sits after the
//! detectors in the data flow: a detector flags an anomalous window, the caller aggregates that
//! window and a baseline into one row per leaf (one full combination of dimension values), and
//! this module returns the smallest set of combinations ("elements", `attr=v&attr=v`) that
//! explains the deviation, or says that the change is fleet-wide.
//!
//! # Algorithm: expectation-based subset scan over the attribute lattice
//!
//! Every candidate element `e` (a combination of 1..=`max_layer` dimension values, over *all*
//! dimensions of the table — none is hard-coded) is scored by the likelihood ratio of "the
//! leaves under `e` changed by a common factor, everything else is as forecast" against "nothing
//! changed" (the expectation-based Poisson scan statistic of Neill, Moore, Sabhnani & Daniel,
//! "Detection of emerging space-time clusters", KDD 2005; the multidimensional form is Neill's
//! "Fast subset scan for multivariate event detection", Stat. Med. 2013):
//!
//! ```text
//! LLR(e) = V'_e ln(V'_e / F'_e) − (V'_e − F'_e)        V'_e = Σ v_i / κ_i,  F'_e = Σ f_i / κ_i
//! ```
//!
//! where `v_i`/`f_i` are a leaf's actual and forecast values and `κ_i = Var(v_i) / f_i` rescales
//! each leaf into "effective counts" so that the statistic is calibrated whatever the unit
//! (quasi-Poisson). `κ_i` comes from a noise model fitted robustly (median of squared residuals
//! around the forecast-weighted median leaf ratio, so a minority of anomalous leaves inflates
//! neither the fleet factor nor the noise):
//! * [`NoiseModel::Counts`]: `Var = φ f` (Poisson with over-dispersion `φ ≥ 1`): event counts,
//!   errors, requests over an SLO threshold. Leaves expecting fewer than 100 events are fitted
//!   on quantile residuals (exactly normal under Poisson, however small the count),
//!   so the discreteness of small counts — sampled traces, many small leaves — is not taken for
//!   over-dispersion.
//! * [`NoiseModel::Relative`]: `Var = c² f (f + f_ref)`, relative error `c` for large leaves that
//!   fades into Poisson-like noise below the median forecast `f_ref`: sums such as traffic volume
//!   or summed latency.
//! * [`NoiseModel::Auto`] (default): `Counts` when every actual value is an integer, else
//!   `Relative`.
//! * [`NoiseModel::Poisson`]: `Var = f`, nothing fitted (a few leaves inside a slice whose
//!   change is established elsewhere).
//!
//! For a derived measure (events among units: requests over a threshold among requests) the
//! element's units `N'_e = Σ n_i / κ_i` bound its events, and the statistic is Kulldorff's
//! Bernoulli form ("A spatial scan statistic", Commun. Stat. Theory Methods 1997):
//! `V' ln(V'/F') + (N'−V') ln((N'−V')/(N'−F'))`. It equals the Poisson form for rare events and
//! is never below it; it sees how unlikely a slice whose every request turned slow is (25 of 25
//! where 2 were expected: 63.1 where the Poisson form says 40.1). Where the units do not hold
//! the events and their forecast, the Poisson form is used.
//!
//! The search is greedy: take the element with the highest LLR (the whole fleet, the empty
//! combination, competes too); optionally (`coarsen_tolerance > 0`) prefer a coarser ancestor
//! scoring nearly as well (an exact tie always goes to the coarser). When the element's best
//! proper part and the best part of what is left outscore it by twice the significance
//! threshold while the rest of it did not move (two causes one coarser combination happens to
//! cover together, normal leaves and all), the part is taken instead and the other found next (see `Scan::split`). Causes known from elsewhere
//! ([`localize_derived_around`]) are taken before the search. Remove its leaves and repeat — several independent causes are found
//! one after another; a later cause that is an ancestor of earlier ones replaces them (they were
//! its most deviating part). Stop when the best LLR is not significant (`LLR < ln(M / alpha)`, a
//! union bound over the `M` candidate elements, since `P(LLR > x) ≲ e^{−x}` under the null;
//! real residuals are heavier-tailed than the model, so `alpha` is set far below a nominal
//! level: 1e-10 puts the threshold at `ln M + 23`), when the element's deviation is below
//! `min_explained` of the largest cause's, or after `max_root_causes`. When the whole fleet (the
//! empty combination) is the chosen explanation, the result is `fleet_wide = true` with no
//! specific cause.
//!
//! Why this statistic and not a leaf-classification method:
//! * It is *additive* over leaves with a known null distribution, so significance is a
//!   threshold, not a tuned score; it trades explanatory power (how much deviation the element
//!   holds) against succinctness (how much normal mass it drags along) in one number, which is
//!   what Adtributor's EP + surprise and RiskLoc's high-risk/low-risk pair approximate with
//!   separate, hand-set thresholds.
//! * A superset of the true element adds normal leaves (the common factor moves towards 1 and
//!   the LLR drops); a subset drops deviating leaves (LLR drops too) — so the maximum sits on the
//!   true element without a ripple-effect assumption per leaf. RiskLoc (Kalander, arXiv
//!   2205.10004) is strongest on additive data but its low-risk term assumes every leaf of a
//!   cause moves proportionally, which Poisson noise in small leaves of a ratio KPI breaks — it
//!   then returns too-fine combinations (F1 0.03 on RS). HotSpot (Sun et al., IEEE Access 2018)
//!   and Squeeze (Li et al., ISSRE 2019) rely on the same ripple assumption and are seconds per
//!   case; Adtributor (Bhagwan et al., NSDI 2014) only finds single-dimension causes.
//! * Derived measures (ratios `num/den`: error rate, mean latency = sum/count) are turned into an
//!   additive one before the scan: the expected numerator of a leaf is its *actual* denominator
//!   times its baseline ratio (`f_i = den_real_i · r_i`, the baseline ratio shrunk towards the
//!   fleet's with `ratio_prior_count` pseudo-events so tiny leaves do not carry noisy rates).
//!   The scan then localizes "excess events given the traffic", so traffic shifts alone are not
//!   blamed and a ratio change localizes where the ratio changed (RobustSpot's and the iDice/MID
//!   view of ratio KPIs). Latency is localized the same way: over-SLO request counts (additive)
//!   and mean latency as `sum/count` (derived), never a quantile directly.
//! * Sampled leaves ([`DerivedMeasure::sample_weight`]): when a leaf's counts are estimates from
//!   rows kept with probability `1/w` and counted `w` times each, its values are divided by `w`
//!   before the noise is fitted and the statistic computed, so a leaf is as significant as the
//!   rows it holds (a sampled half of the fleet does not make the other half look exact, nor
//!   its own noise look like a cause); shares of the excess stay in the weighted units.
//!
//! Cost: one pass over the leaves per cuboid per found cause (`O(leaves × cuboids × causes)`),
//! 5–10 ms for the 21,600-leaf Squeeze tables in a release build on 2 vCPU.
//!
//! Parameters ([`Params`], defaults in brackets, one set for every data set — chosen on the
//! public benchmarks, see `bench/README.md`): `alpha` [1e-10] nominal family-wise false-alarm
//! probability of one scan; `max_layer` [4] most attributes in one element; `coarsen_tolerance`
//! [0.0] (0.1 cost about 0.2 F1 on RS: real causes are often one attribute finer than their
//! parent);
//! `min_explained` [0.05]; `max_root_causes` [10]; `ratio_prior_count` [1.0];
//! `max_cardinality` [10,000] dimensions with more distinct values are identifiers, not
//! dimensions, and are skipped (listed in [`Localization::skipped_dimensions`]); `noise` [Auto].

#[cfg(test)]
mod hierarchy_tests;
#[cfg(test)]
mod sampling_tests;
mod scan;
pub mod table;

pub use table::{CliMeasure, CliSpec, localize_csv, run_cli_request};

/// Errors of localization and of reading its input tables.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LocalizeError {
    #[error("column `{0}` not found in the table header")]
    MissingColumn(String),
    #[error("line {line}: column `{column}`: `{value}` is not a finite number")]
    BadNumber {
        line: u64,
        column: String,
        value: String,
    },
    #[error("line {line}: malformed csv: {message}")]
    Csv { line: u64, message: String },
    #[error("the table has no dimension columns")]
    NoDimensions,
    #[error("the table has no leaves")]
    Empty,
    #[error("{measure} has {got} values but the table has {expected} leaves")]
    LengthMismatch {
        measure: &'static str,
        expected: usize,
        got: usize,
    },
    #[error(
        "leaf {leaf}: dimension {dimension} has value id {id}, but only {cardinality} values are interned"
    )]
    BadValueId {
        leaf: usize,
        dimension: usize,
        id: u32,
        cardinality: usize,
    },
    #[error("{measure} of leaf {leaf} is not a finite number")]
    NonFinite { measure: &'static str, leaf: usize },
    #[error("no rows at time {at} in column `{column}`")]
    NoRowsAtTime { column: String, at: i64 },
    #[error("{0}")]
    BadParams(String),
}

/// One dimension of a leaf table: its name and its interned values (id = index).
#[derive(Debug, Clone, PartialEq)]
pub struct Dimension {
    pub name: String,
    pub values: Vec<String>,
}

/// Leaves of the cube: one row per full combination of dimension values, values interned.
/// Measures are kept apart ([`AdditiveMeasure`], [`DerivedMeasure`]) so one table can be
/// localized for several KPIs.
#[derive(Debug, Clone, PartialEq)]
pub struct LeafTable {
    pub dimensions: Vec<Dimension>,
    /// Row-major value ids: leaf `i`, dimension `j` at `i * dimensions.len() + j`.
    pub codes: Vec<u32>,
}

impl LeafTable {
    /// An empty table over the named dimensions; fill it with [`LeafTable::push_leaf`].
    pub fn new<S: Into<String>>(dimension_names: impl IntoIterator<Item = S>) -> Self {
        LeafTable {
            dimensions: dimension_names
                .into_iter()
                .map(|name| Dimension {
                    name: name.into(),
                    values: Vec::new(),
                })
                .collect(),
            codes: Vec::new(),
        }
    }

    /// Number of leaves.
    pub fn len(&self) -> usize {
        self.codes
            .len()
            .checked_div(self.dimensions.len())
            .unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Id of `value` in dimension `dimension`, interning it when new.
    pub fn intern(&mut self, dimension: usize, value: &str) -> u32 {
        let values = &mut self.dimensions[dimension].values;
        match values.iter().position(|known| known == value) {
            Some(id) => id as u32,
            None => {
                values.push(value.to_string());
                (values.len() - 1) as u32
            }
        }
    }

    /// Appends one leaf given its value of every dimension (in dimension order); returns its index.
    /// Panics when the number of values differs from the number of dimensions (a caller bug).
    pub fn push_leaf<S: AsRef<str>>(&mut self, values: &[S]) -> usize {
        assert_eq!(
            values.len(),
            self.dimensions.len(),
            "one value per dimension"
        );
        for (dimension, value) in values.iter().enumerate() {
            let id = self.intern(dimension, value.as_ref());
            self.codes.push(id);
        }
        self.len() - 1
    }

    /// Value id of leaf `leaf` in dimension `dimension`.
    pub fn code(&self, leaf: usize, dimension: usize) -> u32 {
        self.codes[leaf * self.dimensions.len() + dimension]
    }

    fn validate(&self) -> Result<(), LocalizeError> {
        if self.dimensions.is_empty() {
            return Err(LocalizeError::NoDimensions);
        }
        let n_dims = self.dimensions.len();
        if !self.codes.len().is_multiple_of(n_dims) {
            return Err(LocalizeError::LengthMismatch {
                measure: "codes",
                expected: self.len() * n_dims,
                got: self.codes.len(),
            });
        }
        for (index, &id) in self.codes.iter().enumerate() {
            let dimension = index % n_dims;
            let cardinality = self.dimensions[dimension].values.len();
            if id as usize >= cardinality {
                return Err(LocalizeError::BadValueId {
                    leaf: index / n_dims,
                    dimension,
                    id,
                    cardinality,
                });
            }
        }
        Ok(())
    }
}

/// An additive measure per leaf (counts, errors, requests over an SLO threshold, summed latency).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AdditiveMeasure {
    pub real: Vec<f64>,
    pub forecast: Vec<f64>,
}

/// A derived measure `numerator / denominator` per leaf (error rate, mean latency = sum/count).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DerivedMeasure {
    pub numerator_real: Vec<f64>,
    pub numerator_forecast: Vec<f64>,
    pub denominator_real: Vec<f64>,
    pub denominator_forecast: Vec<f64>,
    /// Per leaf, what one counted event weighs in variance when the leaf was observed through a
    /// sample (head-sampled traces counted by their weights): `Σw² / Σw` over its sampled rows,
    /// the sampling weight itself when uniform. A leaf of `N` weighted events is then worth
    /// `N / w` observed ones, and its noise, its share of the prior and its significance are
    /// judged on those. Empty, or 1 for a leaf, when every request was observed.
    pub sample_weight: Vec<f64>,
}

/// How the leaf-level noise scales with the forecast (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NoiseModel {
    /// `Counts` when every actual value is an integer, `Relative` otherwise.
    #[default]
    Auto,
    /// Poisson with over-dispersion: `Var = φ f`.
    Counts,
    /// Relative error, Poisson-like below the median forecast: `Var = c² f (f + f_ref)`.
    Relative,
    /// Poisson, nothing fitted (`Var = f`): for a scan over a few leaves whose change is known
    /// from elsewhere, where a fitted dispersion would be that change itself (two leaves, one
    /// of them the anomaly, put `φ` at 4).
    Poisson,
}

/// Tuning of the scan; the defaults serve every data set (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// Family-wise probability that one scan reports a cause in pure noise.
    pub alpha: f64,
    /// Most `attr=v` pairs in one root-cause element.
    pub max_layer: usize,
    /// A coarser ancestor wins when its score is at least `1 − coarsen_tolerance` of the best.
    pub coarsen_tolerance: f64,
    /// Stop when a cause's deviation is below this fraction of the largest cause's.
    pub min_explained: f64,
    pub max_root_causes: usize,
    /// Pseudo-events (at the fleet's baseline ratio) added to each leaf's baseline ratio.
    pub ratio_prior_count: f64,
    /// Dimensions with more distinct values than this are skipped.
    pub max_cardinality: usize,
    pub noise: NoiseModel,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            alpha: 1e-10,
            max_layer: 4,
            coarsen_tolerance: 0.0,
            min_explained: 0.05,
            max_root_causes: 10,
            ratio_prior_count: 1.0,
            max_cardinality: 10_000,
            noise: NoiseModel::Auto,
        }
    }
}

impl Params {
    fn validate(&self) -> Result<(), LocalizeError> {
        let bad = |what: &str| Err(LocalizeError::BadParams(what.to_string()));
        if !(self.alpha > 0.0 && self.alpha < 1.0) {
            return bad("alpha must be in (0, 1)");
        }
        if self.max_layer == 0 {
            return bad("max_layer must be at least 1");
        }
        if !(0.0..1.0).contains(&self.coarsen_tolerance) {
            return bad("coarsen_tolerance must be in [0, 1)");
        }
        if !(0.0..=1.0).contains(&self.min_explained) {
            return bad("min_explained must be in [0, 1]");
        }
        if !(self.ratio_prior_count >= 0.0 && self.ratio_prior_count.is_finite()) {
            return bad("ratio_prior_count must be a finite number >= 0");
        }
        Ok(())
    }
}

/// One root cause: a combination of dimension values and how much it explains.
#[derive(Debug, Clone, PartialEq)]
pub struct RootCause {
    /// `(dimension name, value)` pairs, in the table's dimension order.
    pub elements: Vec<(String, String)>,
    /// Share of the total deviation (actual − forecast, summed; for derived measures the excess
    /// numerator given the actual denominator) that falls in this element. May exceed 1 or be
    /// negative when other parts of the fleet moved the other way.
    pub explained_fraction: f64,
    /// Scan statistic (log-likelihood ratio in effective counts); higher is more certain.
    pub score: f64,
    /// The element's actual value: the sum for additive measures, the ratio for derived ones.
    pub real: f64,
    /// The element's forecast value, same convention as `real`.
    pub forecast: f64,
    /// Number of leaves under the element.
    pub leaves: usize,
}

impl RootCause {
    /// `attr=v&attr=v`, the benchmark and CLI form.
    pub fn key(&self) -> String {
        self.elements
            .iter()
            .map(|(dimension, value)| format!("{dimension}={value}"))
            .collect::<Vec<_>>()
            .join("&")
    }
}

/// Result of one localization.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Localization {
    /// Causes in the order found (largest scan statistic first).
    pub root_causes: Vec<RootCause>,
    /// The change is best explained by the whole fleet moving together: no specific cause
    /// (any causes listed were found before the remainder turned out fleet-wide).
    pub fleet_wide: bool,
    /// Total actual and forecast (sums; ratios for derived measures).
    pub total_real: f64,
    pub total_forecast: f64,
    /// The noise model used after `Auto` was resolved.
    pub noise: NoiseModel,
    /// Dimensions left out because they have more than `max_cardinality` values.
    pub skipped_dimensions: Vec<String>,
    /// The scan statistic a cause must reach: `ln(candidates / alpha)` over the lattice (a
    /// significant parent's refinements are held to their own, lower bar: see [`Around`]).
    pub bar: f64,
    /// The strongest element left when the search stopped for want of significance, with its
    /// scan statistic as `score`: what came closest (for diagnostics; not a cause).
    pub strongest_below_bar: Option<RootCause>,
}

/// Localizes a deviation of an additive measure (see the module documentation).
pub fn localize_additive(
    table: &LeafTable,
    measure: &AdditiveMeasure,
    params: &Params,
) -> Result<Localization, LocalizeError> {
    table.validate()?;
    params.validate()?;
    let n = table.len();
    check_len("real", n, measure.real.len())?;
    check_len("forecast", n, measure.forecast.len())?;
    check_finite("real", &measure.real)?;
    check_finite("forecast", &measure.forecast)?;
    let mut result = scan::localize(
        table,
        &measure.real,
        &measure.forecast,
        &[],
        &[],
        params,
        Around::default(),
    );
    result.total_real = measure.real.iter().sum();
    result.total_forecast = measure.forecast.iter().sum();
    Ok(result)
}

/// Localizes a deviation of a derived (ratio) measure: each leaf's expected numerator is its
/// actual denominator times its baseline ratio, and the excess is localized as an additive
/// measure (see the module documentation).
pub fn localize_derived(
    table: &LeafTable,
    measure: &DerivedMeasure,
    params: &Params,
) -> Result<Localization, LocalizeError> {
    localize_derived_around(table, measure, params, Around::default())
}

/// What a scan knows before it starts: combinations `known` from elsewhere (taken first, see
/// [`localize_derived_around`]), and combinations a coarser scan of the same measure and window
/// (fewer dimensions, or fewer rows) found `significant`: their refinements are tested at the
/// multiplicity of the parent's own descendants once nothing passes the whole lattice's bar
/// (hierarchical testing, Meinshausen, "Hierarchical testing of variable importance",
/// Biometrika 2008: a rejected parent's subtree is tested at a level in proportion to its
/// size). A parent naming a dimension or value the table lacks gates nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct Around<'a> {
    pub known: &'a [Vec<(String, String)>],
    pub significant: &'a [Vec<(String, String)>],
}

/// [`localize_derived`] around causes known from elsewhere (a pod whose own device metrics show
/// a fault, say): each known combination whose leaves deviate significantly in this measure is
/// taken as a cause first, with its score and share of the excess, and the rest of the
/// deviation is localized around it (so two causes that one coarser combination happens to
/// cover together come out apart). A known combination that does not deviate here, or names a
/// dimension the table lacks, is left out. Refinements of `around.significant` are then
/// tested as [`Around`] says.
pub fn localize_derived_around(
    table: &LeafTable,
    measure: &DerivedMeasure,
    params: &Params,
    around: Around<'_>,
) -> Result<Localization, LocalizeError> {
    table.validate()?;
    params.validate()?;
    let n = table.len();
    check_len("numerator_real", n, measure.numerator_real.len())?;
    check_len("numerator_forecast", n, measure.numerator_forecast.len())?;
    check_len("denominator_real", n, measure.denominator_real.len())?;
    check_len(
        "denominator_forecast",
        n,
        measure.denominator_forecast.len(),
    )?;
    check_finite("numerator_real", &measure.numerator_real)?;
    check_finite("numerator_forecast", &measure.numerator_forecast)?;
    check_finite("denominator_real", &measure.denominator_real)?;
    check_finite("denominator_forecast", &measure.denominator_forecast)?;
    if !measure.sample_weight.is_empty() {
        check_len("sample_weight", n, measure.sample_weight.len())?;
        check_finite("sample_weight", &measure.sample_weight)?;
    }
    let sample_weight = |leaf: usize| scan::sample_weight_of(&measure.sample_weight, leaf);

    let num_forecast_total: f64 = measure.numerator_forecast.iter().sum();
    let den_forecast_total: f64 = measure.denominator_forecast.iter().sum();
    let fleet_ratio = if den_forecast_total > 0.0 {
        num_forecast_total / den_forecast_total
    } else {
        0.0
    };
    // Prior weight in denominator units worth `ratio_prior_count` numerator events (observed
    // ones: a sampled leaf's events weigh their sampling weight each).
    let prior_per_weight = if fleet_ratio > 0.0 {
        params.ratio_prior_count / fleet_ratio
    } else {
        0.0
    };
    let expected: Vec<f64> = (0..n)
        .map(|i| {
            let prior_weight = prior_per_weight * sample_weight(i);
            let num = measure.numerator_forecast[i];
            let den = measure.denominator_forecast[i];
            let ratio = if den + prior_weight > 0.0 {
                (num + prior_weight * fleet_ratio) / (den + prior_weight)
            } else {
                fleet_ratio
            };
            measure.denominator_real[i] * ratio
        })
        .collect();
    let mut result = scan::localize(
        table,
        &measure.numerator_real,
        &expected,
        &measure.denominator_real,
        &measure.sample_weight,
        params,
        around,
    );

    // Report ratios rather than sums for derived measures.
    let ratio = |num: f64, den: f64| if den != 0.0 { num / den } else { 0.0 };
    let num_real_total: f64 = measure.numerator_real.iter().sum();
    let den_real_total: f64 = measure.denominator_real.iter().sum();
    result.total_real = ratio(num_real_total, den_real_total);
    result.total_forecast = fleet_ratio;
    for cause in &mut result.root_causes {
        let (mut nr, mut dr, mut nf, mut df) = (0.0, 0.0, 0.0, 0.0);
        for leaf in scan::leaves_of(table, &cause.elements) {
            nr += measure.numerator_real[leaf];
            dr += measure.denominator_real[leaf];
            nf += measure.numerator_forecast[leaf];
            df += measure.denominator_forecast[leaf];
        }
        cause.real = ratio(nr, dr);
        cause.forecast = ratio(nf, df);
    }
    Ok(result)
}

fn check_len(measure: &'static str, expected: usize, got: usize) -> Result<(), LocalizeError> {
    if expected == got {
        Ok(())
    } else {
        Err(LocalizeError::LengthMismatch {
            measure,
            expected,
            got,
        })
    }
}

fn check_finite(measure: &'static str, values: &[f64]) -> Result<(), LocalizeError> {
    match values.iter().position(|value| !value.is_finite()) {
        Some(leaf) => Err(LocalizeError::NonFinite { measure, leaf }),
        None => Ok(()),
    }
}
