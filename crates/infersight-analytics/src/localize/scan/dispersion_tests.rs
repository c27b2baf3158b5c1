//! The over-dispersion of count measures (`effective_count_scale`) on small expected counts:
//! sampled traces and many small leaves leave most leaves expecting a few events or less, where
//! Poisson residuals are discrete and sit above χ²(1)'s; that must not read as over-dispersion.

use infersight_model::rng::SplitMix64;

use super::{CHI2_1_NOISE_QUANTILE, NOISE_QUANTILE, NoiseModel, effective_count_scale, quantile};

fn poisson(rng: &mut SplitMix64, mean: f64) -> f64 {
    // Knuth's product of uniforms: exact, and e^-mean stays a normal f64 for the means here.
    let limit = (-mean).exp();
    let (mut k, mut product) = (0.0, rng.uniform_open());
    while product > limit {
        k += 1.0;
        product *= rng.uniform_open();
    }
    k
}

/// `n` leaves with expected counts spread over `low..high`, and their counts: Poisson, or
/// gamma-Poisson with variance `dispersion × mean` (over-dispersed) when `dispersion > 1`.
fn leaves(seed: u64, n: usize, low: f64, high: f64, dispersion: f64) -> (Vec<f64>, Vec<f64>) {
    let mut rng = SplitMix64::new(seed);
    let (mut real, mut forecast) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let mean = low + (high - low) * rng.uniform();
        let rate = if dispersion > 1.0 {
            // Gamma with mean `mean` and variance (dispersion − 1) × mean (a shape below 1
            // drawn as Gamma(shape + 1) × U^(1 / shape)).
            let shape = mean / (dispersion - 1.0);
            let draw = if shape >= 1.0 {
                rng.gamma(shape)
            } else {
                rng.gamma(shape + 1.0) * rng.uniform_open().powf(1.0 / shape)
            };
            draw * mean / shape
        } else {
            mean
        };
        real.push(poisson(&mut rng, rate));
        forecast.push(mean);
    }
    (real, forecast)
}

fn dispersion(real: &[f64], forecast: &[f64]) -> f64 {
    effective_count_scale(NoiseModel::Counts, real, forecast)[0]
}

/// The fit is a lower quartile over a few hundred leaves: it scatters by up to about 0.5 above 1
/// even for exact Poisson counts, large or small, so the means over seeds are compared.
#[test]
fn exact_poisson_counts_fit_no_over_dispersion_whatever_their_size() {
    // Expected counts spread, all near one whole number (where a quantile of discrete
    // residuals is most fragile), and large.
    for (low, high) in [
        (0.05, 1.0),
        (0.1, 3.0),
        (1.0, 1.0),
        (1.1, 1.2),
        (4.0, 4.0),
        (150.0, 400.0),
    ] {
        let fitted: Vec<f64> = (1..=8)
            .map(|seed| {
                let (real, forecast) = leaves(seed, 200, low, high, 1.0);
                dispersion(&real, &forecast)
            })
            .collect();
        let mean = fitted.iter().sum::<f64>() / fitted.len() as f64;
        assert!(mean < 1.35, "expected {low}..{high}: {fitted:.2?}");
        assert!(
            fitted.iter().all(|d| *d < 2.0),
            "expected {low}..{high}: {fitted:.2?}"
        );
    }
}

#[test]
fn small_counts_no_longer_read_as_over_dispersed() {
    // 80 leaves expecting 0.05–1 event each, as a fleet's leaves with traces kept at 10 %: every
    // leaf is in the fit. The squared Pearson residuals against χ²(1) (the fit before) saw a
    // dispersion of about 2 in exact Poisson counts.
    let (mut new, mut old) = (0.0, 0.0);
    for seed in 1..=8 {
        let (real, forecast) = leaves(seed, 80, 0.05, 1.0, 1.0);
        new += dispersion(&real, &forecast) / 8.0;
        let mut squared: Vec<f64> = real
            .iter()
            .zip(&forecast)
            .map(|(v, f)| (v - f).powi(2) / f)
            .collect();
        old += quantile(&mut squared, NOISE_QUANTILE).unwrap() / CHI2_1_NOISE_QUANTILE / 8.0;
    }
    assert!(new < 1.35, "{new}");
    assert!(
        old > 1.8,
        "the test no longer tells the fit apart from the old one: {old}"
    );
}

/// Actual and expected counts of the leaves of one seed.
type Case = dyn Fn(u64) -> (Vec<f64>, Vec<f64>);

#[test]
fn real_over_dispersion_is_still_measured() {
    // Over-dispersed by 4 (gamma-Poisson): small counts, large ones (Pearson residuals), both in
    // one fit, and mid-sized ones.
    let small = |seed| leaves(seed, 300, 1.0, 4.0, 4.0);
    let large = |seed| leaves(seed, 300, 150.0, 400.0, 4.0);
    let mid = |seed| leaves(seed, 300, 20.0, 60.0, 4.0);
    let mixed = |seed| {
        let (mut real, mut forecast) = leaves(seed, 150, 1.0, 4.0, 4.0);
        let (more_real, more_forecast) = leaves(seed + 100, 150, 150.0, 400.0, 4.0);
        real.extend(more_real);
        forecast.extend(more_forecast);
        (real, forecast)
    };
    let cases: [(&str, &Case); 4] = [
        ("small", &small),
        ("large", &large),
        ("mid", &mid),
        ("mixed", &mixed),
    ];
    for (name, case) in cases {
        let fitted: Vec<f64> = (1..=8)
            .map(|seed| {
                let (real, forecast) = case(seed);
                dispersion(&real, &forecast)
            })
            .collect();
        let mean = fitted.iter().sum::<f64>() / fitted.len() as f64;
        assert!((2.8..=5.2).contains(&mean), "{name}: {fitted:.2?}");
        assert!(
            fitted.iter().all(|d| (1.8..=7.0).contains(d)),
            "{name}: {fitted:.2?}"
        );
    }
}

/// Two leaves, one of them the anomaly (five of five where almost none were expected): the
/// fitted dispersion is the anomaly itself; `Poisson` fits nothing.
#[test]
fn a_fit_over_two_leaves_reads_the_anomaly_as_noise_and_poisson_does_not_fit() {
    let (real, forecast) = ([5.0, 0.0], [0.016, 0.026]);
    assert!(dispersion(&real, &forecast) > 3.0);
    assert_eq!(
        effective_count_scale(NoiseModel::Poisson, &real, &forecast),
        vec![1.0, 1.0]
    );
}
