//! Helpers shared by the analytics integration tests: a seeded generator for test data.

/// SplitMix64: small, seeded, good enough for test data.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1_u64 << 53) as f64
    }
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(1e-12);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
    /// Knuth's method; fine for the small rates used here.
    pub fn poisson(&mut self, lambda: f64) -> f64 {
        let limit = (-lambda).exp();
        let mut product = self.uniform();
        let mut count = 0.0;
        while product > limit {
            product *= self.uniform();
            count += 1.0;
        }
        count
    }
    pub fn binomial(&mut self, n: u64, p: f64) -> u64 {
        (0..n).filter(|_| self.uniform() < p).count() as u64
    }
    /// Poisson-like integer count with mean `mean` (normal approximation, clamped at 0).
    pub fn count(&mut self, mean: f64) -> f64 {
        (mean + mean.sqrt() * self.normal()).round().max(0.0)
    }
}
