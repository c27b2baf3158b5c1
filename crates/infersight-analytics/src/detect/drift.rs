//! Prompt drift: the prompts of the current window look less like the baseline's than the
//! baseline's look like each other, with output-length 3σ outliers as corroboration.
//!
//! Features are MinHash signatures (Broder 1997) of a prompt's lower-cased word 1- and 2-gram
//! shingles (FNV-1a hashed, then re-hashed by SplitMix64 with one seed per signature slot); the
//! share of equal slots estimates the Jaccard similarity of the shingle sets. No embeddings
//! model is needed; a caller with embeddings can still use [`prompt_drift`]'s logic by
//! clustering upstream.

use super::stats::{binomial_sf_approx, mean, quantile, squash, std_dev};
use super::{DetectError, Finding, SignalKind, bad_param, check_sorted, ev, subject};

/// MinHash signature of one prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptFeatures {
    pub minhash: Vec<u64>,
}

impl PromptFeatures {
    /// Estimated Jaccard similarity of the shingle sets (0 when either prompt had no words).
    pub fn jaccard(&self, other: &PromptFeatures) -> f64 {
        let len = self.minhash.len().min(other.minhash.len());
        if len == 0 {
            return 0.0;
        }
        let equal = self.minhash[..len]
            .iter()
            .zip(&other.minhash[..len])
            .filter(|(a, b)| a == b && **a != u64::MAX)
            .count();
        equal as f64 / len as f64
    }
}

fn fnv1a(bytes: &[u8], seed: u64) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325_u64 ^ seed;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// MinHash features of `text` with `num_hashes` slots (64 is a good default: ±0.06 standard
/// error on the Jaccard estimate).
pub fn prompt_features(text: &str, num_hashes: usize) -> PromptFeatures {
    let lowered = text.to_lowercase();
    let words: Vec<&str> = lowered
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let mut shingles: Vec<u64> = words.iter().map(|w| fnv1a(w.as_bytes(), 1)).collect();
    for pair in words.windows(2) {
        let first = fnv1a(pair[0].as_bytes(), 2);
        shingles.push(mix(first ^ fnv1a(pair[1].as_bytes(), 3)));
    }
    let minhash = (0..num_hashes as u64)
        .map(|slot| {
            let seed = mix(slot.wrapping_mul(0x2545_F491_4F6C_DD1D));
            shingles
                .iter()
                .map(|s| mix(s ^ seed))
                .min()
                .unwrap_or(u64::MAX)
        })
        .collect();
    PromptFeatures { minhash }
}

/// One prompt: when, its features and the output length of its response (if known).
#[derive(Debug, Clone, PartialEq)]
pub struct PromptSample {
    pub ts_ns: i64,
    pub features: PromptFeatures,
    pub output_tokens: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PromptDriftParams {
    /// Drift when the current mean similarity < (1 − this) × the baseline's own.
    pub min_relative_drop: f64,
    /// Prompts compared per side (evenly spaced sample), bounding the O(n·m) comparison.
    pub max_sample: usize,
    pub min_prompts: usize,
    /// Output-length outlier: |x − μ| > `sigma` · σ of the baseline.
    pub sigma: f64,
    /// Binomial tail p-value below which the outlier share counts as corroboration.
    pub alpha: f64,
}

impl Default for PromptDriftParams {
    fn default() -> Self {
        PromptDriftParams {
            min_relative_drop: 0.3,
            max_sample: 200,
            min_prompts: 20,
            sigma: 3.0,
            alpha: 1e-3,
        }
    }
}

fn even_sample<T>(items: &[T], max: usize) -> Vec<&T> {
    if items.len() <= max {
        return items.iter().collect();
    }
    (0..max).map(|i| &items[i * items.len() / max]).collect()
}

/// Prompt drift between `baseline` and `current` prompts (each in time order). Per prompt, the
/// similarity to the baseline is the max Jaccard estimate over a baseline sample (leave-one-out
/// for baseline prompts themselves). Magnitude: current − baseline mean similarity (negative).
/// Evidence includes the output-length outlier share and its binomial p-value against the
/// baseline's own outlier share (at least the Gaussian 0.27 %).
pub fn prompt_drift(
    subject_pairs: &[(&str, &str)],
    baseline: &[PromptSample],
    current: &[PromptSample],
    params: &PromptDriftParams,
) -> Result<Option<Finding>, DetectError> {
    if !(params.min_relative_drop > 0.0 && params.min_relative_drop < 1.0) {
        return Err(bad_param("min_relative_drop", "must lie in (0, 1)"));
    }
    if params.max_sample < 2 || params.sigma.is_nan() || params.sigma <= 0.0 {
        return Err(bad_param(
            "max_sample",
            "max_sample ≥ 2 and sigma > 0 required",
        ));
    }
    check_sorted("baseline prompts", baseline.iter().map(|p| p.ts_ns))?;
    check_sorted("current prompts", current.iter().map(|p| p.ts_ns))?;
    if baseline.len() < params.min_prompts.max(2) {
        return Err(DetectError::TooShort {
            series: "baseline prompts",
            needed: params.min_prompts.max(2),
            got: baseline.len(),
        });
    }
    if current.len() < params.min_prompts.max(1) {
        return Ok(None);
    }
    let reference = even_sample(baseline, params.max_sample);
    let similarity_to_reference = |features: &PromptFeatures, skip: Option<usize>| {
        reference
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != skip)
            .map(|(_, r)| features.jaccard(&r.features))
            .fold(0.0, f64::max)
    };
    let baseline_similarity: Vec<f64> = (0..reference.len())
        .map(|i| similarity_to_reference(&reference[i].features, Some(i)))
        .collect();
    let current_sample = even_sample(current, params.max_sample);
    let current_similarity: Vec<f64> = current_sample
        .iter()
        .map(|p| similarity_to_reference(&p.features, None))
        .collect();
    let baseline_mean = mean(&baseline_similarity).unwrap_or(0.0);
    let current_mean = mean(&current_similarity).unwrap_or(0.0);
    if current_mean >= (1.0 - params.min_relative_drop) * baseline_mean {
        return Ok(None);
    }
    let low = quantile(&baseline_similarity, 0.05).unwrap_or(0.0);
    let onset = (0..current_sample.len())
        .find(|&i| {
            let next = &current_similarity[i..(i + 5).min(current_similarity.len())];
            current_similarity[i] < low
                && next.iter().filter(|s| **s < low).count() * 2 >= next.len()
        })
        .map_or(current[0].ts_ns, |i| current_sample[i].ts_ns);

    let mut evidence = vec![
        ev("baseline_mean_similarity", baseline_mean),
        ev("current_mean_similarity", current_mean),
        ev("baseline_similarity_p05", low),
        ev("baseline_prompts", baseline.len() as f64),
        ev("current_prompts", current.len() as f64),
    ];
    // Output-length 3σ outliers.
    let base_lengths: Vec<f64> = baseline.iter().filter_map(|p| p.output_tokens).collect();
    let cur_lengths: Vec<f64> = current.iter().filter_map(|p| p.output_tokens).collect();
    let mut outlier_confidence = 0.0;
    let mut outlier_note = String::new();
    if let (Some(mu), Some(sd)) = (mean(&base_lengths), std_dev(&base_lengths))
        && sd > 0.0
        && !cur_lengths.is_empty()
    {
        let is_outlier = |x: &&f64| (**x - mu).abs() > params.sigma * sd;
        let base_outliers = base_lengths.iter().filter(is_outlier).count() as f64;
        let cur_outliers = cur_lengths.iter().filter(is_outlier).count() as f64;
        let p0 = ((base_outliers + 0.5) / (base_lengths.len() as f64 + 1.0)).max(0.0027);
        let p_value = binomial_sf_approx(cur_outliers, cur_lengths.len() as f64, p0);
        let share = cur_outliers / cur_lengths.len() as f64;
        evidence.push(ev("output_length_mean", mu));
        evidence.push(ev("output_length_sd", sd));
        evidence.push(ev("output_length_outlier_share", share));
        evidence.push(ev("output_length_outlier_p_value", p_value));
        if p_value < params.alpha {
            outlier_confidence = 1.0 - p_value;
            outlier_note = format!(
                "; {:.0} % of outputs are {}σ length outliers",
                100.0 * share,
                params.sigma
            );
        }
    }
    let drop = baseline_mean - current_mean;
    let relative = drop / baseline_mean.max(f64::MIN_POSITIVE);
    let similarity_confidence = squash(relative / params.min_relative_drop, 1.0);
    Ok(Some(Finding {
        kind: SignalKind::PromptDrift,
        subject: subject(subject_pairs),
        onset_ns: onset,
        window_start_ns: current[0].ts_ns,
        window_end_ns: current[current.len() - 1].ts_ns,
        magnitude: -drop,
        relative_change: Some(-relative),
        score: relative / params.min_relative_drop,
        confidence: 1.0 - (1.0 - similarity_confidence) * (1.0 - outlier_confidence),
        evidence,
        detail: format!(
            "prompts' similarity to the baseline fell from {baseline_mean:.2} to {current_mean:.2}{outlier_note}"
        ),
    }))
}
