//! Derived serving indices: the composite SLIs the API reports next to latency quantiles. Each is
//! a pure function of numbers the query layer reads from `requests` and `metrics`; the formula is
//! in the doc comment and in the README's SLI table, and the tests check it on hand-computed
//! fixtures.

/// Throughput health index: `THI = actual_tps / theoretical_tps × (1 − retry_rate)²`.
///
/// 1 means the fleet delivers its theoretical token throughput without retries; retries are
/// penalized quadratically because each one costs capacity twice (the failed and the repeated
/// attempt). `None` when the theoretical throughput is not positive or the retry rate is outside
/// `[0, 1]`.
pub fn throughput_health_index(
    actual_tps: f64,
    theoretical_tps: f64,
    retry_rate: f64,
) -> Option<f64> {
    if theoretical_tps <= 0.0 || !(0.0..=1.0).contains(&retry_rate) || actual_tps < 0.0 {
        return None;
    }
    Some(actual_tps / theoretical_tps * (1.0 - retry_rate).powi(2))
}

/// One prompt of a session, for the context pollution index.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SessionPrompt {
    pub prompt_tokens: u64,
    /// The request was rejected (error, refusal, truncation) — its context is wasted.
    pub rejected: bool,
}

/// Context pollution index of one session: `rejected prompt tokens / total prompt tokens`.
/// `None` for a session without prompt tokens.
pub fn context_pollution_index(prompts: &[SessionPrompt]) -> Option<f64> {
    let total: u64 = prompts.iter().map(|p| p.prompt_tokens).sum();
    let rejected: u64 = prompts
        .iter()
        .filter(|p| p.rejected)
        .map(|p| p.prompt_tokens)
        .sum();
    (total > 0).then(|| rejected as f64 / total as f64)
}

/// Memory efficiency: `effective generation time / occupied time × (1 − fragmentation)`.
///
/// Occupied time is how long requests held KV-cache memory (admission to release), effective
/// generation time the part spent producing tokens (prefill + decode, without queueing or
/// preemption stalls); fragmentation is the unusable fraction of allocated KV memory
/// (`1 − used / allocated` blocks). `None` when nothing was occupied or fragmentation is outside
/// `[0, 1]`.
pub fn memory_efficiency(effective_ms: f64, occupied_ms: f64, fragmentation: f64) -> Option<f64> {
    if occupied_ms <= 0.0 || !(0.0..=1.0).contains(&fragmentation) || effective_ms < 0.0 {
        return None;
    }
    Some((effective_ms / occupied_ms).min(1.0) * (1.0 - fragmentation))
}

/// Pearson correlation; `None` for fewer than two points or a constant series.
pub fn pearson(xs: &[f64], ys: &[f64]) -> Option<f64> {
    let n = xs.len().min(ys.len());
    if n < 2 {
        return None;
    }
    let mean = |v: &[f64]| v[..n].iter().sum::<f64>() / n as f64;
    let (mx, my) = (mean(xs), mean(ys));
    let mut sxy = 0.0;
    let mut sxx = 0.0;
    let mut syy = 0.0;
    for i in 0..n {
        let (dx, dy) = (xs[i] - mx, ys[i] - my);
        sxy += dx * dy;
        sxx += dx * dx;
        syy += dy * dy;
    }
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx * syy).sqrt())
}

/// Batching jitter: `(std / mean of latency) × (1 − corr(batch size, latency))²`.
///
/// The coefficient of variation of latency, discounted by how much of the variation batch size
/// explains: latency that grows with batch size is expected; latency that varies for no batch
/// reason is jitter. A constant batch size (no correlation defined) counts as correlation 0.
/// `None` for fewer than two requests or a zero mean.
pub fn batching_jitter(latency_ms: &[f64], batch_sizes: &[f64]) -> Option<f64> {
    let n = latency_ms.len().min(batch_sizes.len());
    if n < 2 {
        return None;
    }
    let mean = latency_ms[..n].iter().sum::<f64>() / n as f64;
    if mean <= 0.0 {
        return None;
    }
    let var = latency_ms[..n]
        .iter()
        .map(|l| (l - mean).powi(2))
        .sum::<f64>()
        / n as f64;
    let corr = pearson(&batch_sizes[..n], &latency_ms[..n]).unwrap_or(0.0);
    Some(var.sqrt() / mean * (1.0 - corr).powi(2))
}

/// Length bins for length-binned SLIs (tokens): `[0,256)`, `[256,1k)`, `[1k,4k)`, `[4k,16k)`,
/// `[16k,∞)`.
pub const LENGTH_BIN_EDGES: [u64; 4] = [256, 1024, 4096, 16384];

/// The label of the length bin of `tokens` (`"256-1023"`, `"16384+"`).
pub fn length_bin(tokens: u64) -> &'static str {
    match tokens {
        0..256 => "0-255",
        256..1024 => "256-1023",
        1024..4096 => "1024-4095",
        4096..16384 => "4096-16383",
        _ => "16384+",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throughput_health_index_matches_the_formula() {
        // 800 of 1000 tok/s with 10 % retries: 0.8 × 0.81
        let thi = throughput_health_index(800.0, 1000.0, 0.1).unwrap();
        assert!((thi - 0.648).abs() < 1e-12);
        assert_eq!(throughput_health_index(800.0, 0.0, 0.1), None);
        assert_eq!(throughput_health_index(800.0, 1000.0, 1.5), None);
    }

    #[test]
    fn context_pollution_counts_rejected_prompt_tokens() {
        let session = [
            SessionPrompt {
                prompt_tokens: 1000,
                rejected: false,
            },
            SessionPrompt {
                prompt_tokens: 3000,
                rejected: true,
            },
        ];
        assert_eq!(context_pollution_index(&session), Some(0.75));
        assert_eq!(context_pollution_index(&[]), None);
    }

    #[test]
    fn memory_efficiency_matches_the_formula() {
        // 600 of 1000 ms generating, 20 % of blocks unusable: 0.6 × 0.8
        let e = memory_efficiency(600.0, 1000.0, 0.2).unwrap();
        assert!((e - 0.48).abs() < 1e-12);
        assert_eq!(memory_efficiency(1.0, 0.0, 0.0), None);
    }

    #[test]
    fn batching_jitter_discounts_batch_explained_variation() {
        // latency perfectly explained by batch size: no jitter
        let batch = [1.0, 2.0, 3.0, 4.0];
        let explained = [100.0, 200.0, 300.0, 400.0];
        assert!(batching_jitter(&explained, &batch).unwrap().abs() < 1e-12);
        // same latencies, batch size constant: jitter = CV = std/mean
        let constant = [8.0; 4];
        let cv = (12_500.0f64).sqrt() / 250.0;
        assert!((batching_jitter(&explained, &constant).unwrap() - cv).abs() < 1e-12);
        // anti-correlated: (1 - (-1))² = 4 × CV
        let reversed = [4.0, 3.0, 2.0, 1.0];
        assert!((batching_jitter(&explained, &reversed).unwrap() - 4.0 * cv).abs() < 1e-9);
        assert_eq!(batching_jitter(&[1.0], &[1.0]), None);
    }

    #[test]
    fn length_bins_have_the_documented_edges() {
        assert_eq!(length_bin(0), "0-255");
        assert_eq!(length_bin(255), "0-255");
        assert_eq!(length_bin(256), "256-1023");
        assert_eq!(length_bin(4096), "4096-16383");
        assert_eq!(length_bin(1 << 20), "16384+");
        assert_eq!(LENGTH_BIN_EDGES.len() + 1, 5);
    }
}
