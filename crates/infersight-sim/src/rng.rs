//! Seeded randomness for the simulator (and the binary's demo and benchmark generators): a small
//! xorshift64* generator, so the same seed gives byte-identical telemetry on every machine, plus
//! SplitMix64 to derive independent streams from one seed.

/// xorshift64* — fast, tiny, reproducible; statistical quality is ample for workload synthesis.
#[derive(Debug, Clone)]
pub struct Rng(u64);

/// SplitMix64 finalizer: spreads a seed (or seed ⊕ stream id) over all 64 bits.
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    /// An independent stream for `stream` under `seed` (different streams never share a state).
    pub fn stream(seed: u64, stream: u64) -> Self {
        Self::new(mix64(seed ^ mix64(stream.wrapping_add(0x5151))))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in (0, 1), never exactly 0 (safe for `ln`).
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        (-2.0 * self.unit().ln()).sqrt() * (std::f64::consts::TAU * self.unit()).cos()
    }

    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * self.unit().ln()
    }

    /// Lognormal with the given median and log-space sigma.
    pub fn lognormal(&mut self, median: f64, sigma: f64) -> f64 {
        median * (sigma * self.normal()).exp()
    }

    /// Index drawn with the given (unnormalized) weights.
    pub fn weighted(&mut self, weights: &[f64]) -> usize {
        let total: f64 = weights.iter().sum();
        let mut x = self.unit() * total;
        for (i, w) in weights.iter().enumerate() {
            if x < *w {
                return i;
            }
            x -= w;
        }
        weights.len().saturating_sub(1)
    }

    /// 128 random bits as lowercase hex (request ids).
    pub fn hex128(&mut self) -> String {
        format!("{:016x}{:016x}", self.next_u64(), self.next_u64())
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn same_seed_same_sequence_and_sane_moments() {
        let a: Vec<u64> = (0..5)
            .scan(Rng::new(3), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..5)
            .scan(Rng::new(3), |r, _| Some(r.next_u64()))
            .collect();
        assert_eq!(a, b);
        let mut rng = Rng::new(9);
        let n = 20_000;
        let mean: f64 = (0..n).map(|_| rng.normal()).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.05, "{mean}");
        let mean_exp: f64 = (0..n).map(|_| rng.exp(2.0)).sum::<f64>() / n as f64;
        assert!((mean_exp - 2.0).abs() < 0.1, "{mean_exp}");
        let mut med: Vec<f64> = (0..n).map(|_| rng.lognormal(300.0, 0.8)).collect();
        med.sort_by(f64::total_cmp);
        assert!((med[n / 2] / 300.0 - 1.0).abs() < 0.05, "{}", med[n / 2]);
    }

    #[test]
    fn streams_differ() {
        assert_ne!(Rng::stream(1, 1).next_u64(), Rng::stream(1, 2).next_u64());
        assert_ne!(Rng::stream(1, 1).next_u64(), Rng::stream(2, 1).next_u64());
    }
}
