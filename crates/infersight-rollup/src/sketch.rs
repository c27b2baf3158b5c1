//! Relative-error quantile sketches (DDSketch-type) used by SLI rollups: built per minute per
//! dimension combination at ingest, merged at query time, persisted in a compact binary form.
//!
//! Masson, Rim & Lee, "DDSketch: a fast and fully-mergeable quantile sketch with relative-error
//! guarantees" (VLDB 2019). A value `x > 0` falls in bucket `i = ceil(log_gamma(x))` with
//! `gamma = (1 + a) / (1 - a)`; the bucket is represented by `2 gamma^i / (gamma + 1)`, which is
//! within relative error `a` of every value in `(gamma^(i-1), gamma^i]`. Quantiles therefore carry
//! at most `a` relative error (the DDSketch guarantee is on the *rank-exact* value, i.e. the
//! lower-median definition used by [`DdSketch::quantile`]). Merging adds bucket counts, so it is
//! exact: merge-then-query equals query-of-union.
//!
//! Buckets are kept sparse (sorted `(index, count)` pairs): a sketch of one minute of one slice
//! usually holds a few dozen values, and the dense form would waste most of its memory.

/// Relative accuracy of every sketch in infersight (1 %).
pub const RELATIVE_ACCURACY: f64 = 0.01;

/// Values at or below this (in the measured unit, milliseconds for latencies) count as zero.
/// Latency below a microsecond is noise, and `ln` of it would waste buckets.
pub const MIN_POSITIVE: f64 = 1e-3;

#[derive(Debug, Clone, Copy)]
struct Mapping {
    gamma_ln: f64,
}

impl Mapping {
    fn new(relative_accuracy: f64) -> Mapping {
        let gamma = (1.0 + relative_accuracy) / (1.0 - relative_accuracy);
        Mapping {
            gamma_ln: gamma.ln(),
        }
    }

    #[inline]
    fn index(&self, value: f64) -> i32 {
        ceil_to_i32(value.ln() / self.gamma_ln)
    }

    #[inline]
    fn value(&self, index: i32) -> f64 {
        // midpoint in relative terms: 2 gamma^i / (gamma + 1)
        let gamma = self.gamma_ln.exp();
        2.0 * (index as f64 * self.gamma_ln).exp() / (gamma + 1.0)
    }
}

/// `x.ceil() as i32` without the `ceil` call the baseline x86-64 target makes (no SSE4.1): the
/// truncation, one up when it lies below `x`. The same for every finite `x` in `i32` range (a
/// bucket index), and for `-0.0`, NaN and saturation as well.
#[inline]
fn ceil_to_i32(x: f64) -> i32 {
    let truncated = x as i32;
    if f64::from(truncated) < x {
        truncated.saturating_add(1)
    } else {
        truncated
    }
}

fn mapping() -> Mapping {
    Mapping::new(RELATIVE_ACCURACY)
}

/// A mergeable quantile sketch of non-negative values with 1 % relative error.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DdSketch {
    /// Sorted by index, counts > 0.
    bins: Vec<(i32, u64)>,
    zero_count: u64,
    count: u64,
    sum: f64,
    min: f64,
    max: f64,
}

/// Why a persisted sketch could not be read back.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SketchDecodeError {
    #[error("sketch encoding is truncated")]
    Truncated,
    #[error("sketch bins are not sorted or have zero counts")]
    Unsorted,
    #[error("sketch counts do not add up")]
    CountMismatch,
}

impl DdSketch {
    pub fn new() -> DdSketch {
        DdSketch::default()
    }

    /// Adds one value. Negative, NaN and infinite values are ignored and reported as `false`
    /// (a latency cannot be negative; the caller counts what it skipped).
    pub fn add(&mut self, value: f64) -> bool {
        self.add_n(value, 1)
    }

    /// Adds `n` copies of `value`.
    pub fn add_n(&mut self, value: f64, n: u64) -> bool {
        if !value.is_finite() || value < 0.0 || n == 0 {
            return false;
        }
        if self.count == 0 {
            self.min = value;
            self.max = value;
        } else {
            self.min = self.min.min(value);
            self.max = self.max.max(value);
        }
        self.count += n;
        self.sum += value * n as f64;
        if value <= MIN_POSITIVE {
            self.zero_count += n;
            return true;
        }
        let index = mapping().index(value);
        match self.bins.binary_search_by_key(&index, |(i, _)| *i) {
            Ok(pos) => self.bins[pos].1 += n,
            Err(pos) => self.bins.insert(pos, (index, n)),
        }
        true
    }

    /// Adds every bucket of `other` (exact: the result equals the sketch of both inputs).
    pub fn merge(&mut self, other: &DdSketch) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 {
            *self = other.clone();
            return;
        }
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.count += other.count;
        self.sum += other.sum;
        self.zero_count += other.zero_count;
        if other.bins.len() <= 4 {
            for &(index, n) in &other.bins {
                match self.bins.binary_search_by_key(&index, |(i, _)| *i) {
                    Ok(pos) => self.bins[pos].1 += n,
                    Err(pos) => self.bins.insert(pos, (index, n)),
                }
            }
            return;
        }
        // in place: count the indices `self` lacks, grow by that, merge from the back (no
        // allocation once `self` has room; hour cells absorb 60 minute sketches each)
        let mut missing = 0;
        let mut mine = self.bins.iter().peekable();
        for &(index, _) in &other.bins {
            while mine.next_if(|&&(i, _)| i < index).is_some() {}
            if mine.next_if(|&&(i, _)| i == index).is_none() {
                missing += 1;
            }
        }
        let mut read = self.bins.len();
        self.bins.resize(read + missing, (0, 0));
        let mut write = self.bins.len();
        for &(index, n) in other.bins.iter().rev() {
            while read > 0 && self.bins[read - 1].0 > index {
                read -= 1;
                write -= 1;
                self.bins[write] = self.bins[read];
            }
            write -= 1;
            if read > 0 && self.bins[read - 1].0 == index {
                read -= 1;
                self.bins[write] = (index, self.bins[read].1 + n);
            } else {
                self.bins[write] = (index, n);
            }
        }
        debug_assert_eq!(
            read, write,
            "the bins below the lowest merged index stay in place"
        );
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn sum(&self) -> f64 {
        self.sum
    }

    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }

    pub fn min(&self) -> Option<f64> {
        (self.count > 0).then_some(self.min)
    }

    pub fn max(&self) -> Option<f64> {
        (self.count > 0).then_some(self.max)
    }

    /// Number of non-empty buckets (memory is proportional to it).
    pub fn bucket_count(&self) -> usize {
        self.bins.len()
    }

    /// The `q`-quantile (`0 <= q <= 1`) of the values added, within 1 % relative error of the
    /// value of rank `floor(q * (count - 1))` (0-based) in sorted order. `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 || !(0.0..=1.0).contains(&q) {
            return None;
        }
        let rank = (q * (self.count - 1) as f64).floor() as u64;
        if rank < self.zero_count {
            return Some(self.min.clamp(0.0, MIN_POSITIVE));
        }
        let mut seen = self.zero_count;
        let map = mapping();
        for &(index, n) in &self.bins {
            seen += n;
            if seen > rank {
                // the exact extremes are known: never answer outside them
                return Some(map.value(index).clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }

    /// Estimated number of values `<= threshold`: exact except for the values in the bucket
    /// holding `threshold` (those within 1 % of it), which count as below when the bucket's
    /// representative value is. This is how latency SLOs count good events from sketches.
    pub fn count_at_most(&self, threshold: f64) -> u64 {
        if self.count == 0 || threshold < 0.0 || threshold.is_nan() {
            return 0;
        }
        if threshold >= self.max {
            return self.count;
        }
        if threshold < self.min {
            return 0;
        }
        let map = mapping();
        let mut below = self.zero_count;
        if threshold <= MIN_POSITIVE {
            return below;
        }
        for &(index, n) in &self.bins {
            if map.value(index) <= threshold {
                below += n;
            } else {
                break;
            }
        }
        below
    }

    /// Compact binary form: the count (an empty sketch is that one byte), then the zero count,
    /// sum, min, max and the delta-encoded bins as varints. The container carries the version.
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.count);
        if self.count == 0 {
            return;
        }
        put_varint(out, self.zero_count);
        out.extend_from_slice(&self.sum.to_le_bytes());
        out.extend_from_slice(&self.min.to_le_bytes());
        out.extend_from_slice(&self.max.to_le_bytes());
        put_varint(out, self.bins.len() as u64);
        let mut previous: i64 = 0;
        for (i, &(index, n)) in self.bins.iter().enumerate() {
            let index = i64::from(index);
            if i == 0 {
                put_varint(out, zigzag(index));
            } else {
                put_varint(out, (index - previous) as u64);
            }
            previous = index;
            put_varint(out, n);
        }
    }

    /// Reads one sketch written by [`DdSketch::encode`] from the front of `input`, advancing it.
    pub fn decode(input: &mut &[u8]) -> Result<DdSketch, SketchDecodeError> {
        let count = take_varint(input)?;
        if count == 0 {
            return Ok(DdSketch::default());
        }
        let zero_count = take_varint(input)?;
        let sum = take_f64(input)?;
        let min = take_f64(input)?;
        let max = take_f64(input)?;
        let len = take_varint(input)?;
        if len > input.len() as u64 {
            return Err(SketchDecodeError::Truncated);
        }
        let mut bins = Vec::with_capacity(len as usize);
        let mut previous: i64 = 0;
        let mut total = zero_count;
        for i in 0..len {
            let index = if i == 0 {
                unzigzag(take_varint(input)?)
            } else {
                let delta = take_varint(input)?;
                if delta == 0 {
                    return Err(SketchDecodeError::Unsorted);
                }
                previous
                    .checked_add(delta as i64)
                    .ok_or(SketchDecodeError::Unsorted)?
            };
            let index32 = i32::try_from(index).map_err(|_| SketchDecodeError::Unsorted)?;
            let n = take_varint(input)?;
            if n == 0 {
                return Err(SketchDecodeError::Unsorted);
            }
            total = total
                .checked_add(n)
                .ok_or(SketchDecodeError::CountMismatch)?;
            bins.push((index32, n));
            previous = index;
        }
        if total != count {
            return Err(SketchDecodeError::CountMismatch);
        }
        Ok(DdSketch {
            bins,
            zero_count,
            count,
            sum,
            min,
            max,
        })
    }
}

/// A merge target for many sketches: bins in one dense array, so merging a sparse sketch is a
/// tight loop without allocation. Query-time only; convert back with [`DenseSketch::finish`].
#[derive(Debug, Clone, Default)]
pub struct DenseSketch {
    offset: i32,
    counts: Vec<u64>,
    zero_count: u64,
    count: u64,
    sum: f64,
    min: f64,
    max: f64,
}

impl DenseSketch {
    pub fn merge(&mut self, other: &DdSketch) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 {
            self.min = other.min;
            self.max = other.max;
        } else {
            self.min = self.min.min(other.min);
            self.max = self.max.max(other.max);
        }
        self.count += other.count;
        self.sum += other.sum;
        self.zero_count += other.zero_count;
        let (Some(&(lo, _)), Some(&(hi, _))) = (other.bins.first(), other.bins.last()) else {
            return;
        };
        if self.counts.is_empty() {
            self.offset = lo;
        }
        if lo < self.offset {
            let grow = (self.offset - lo) as usize;
            self.counts.splice(0..0, std::iter::repeat_n(0, grow));
            self.offset = lo;
        }
        let needed = (hi - self.offset) as usize + 1;
        if needed > self.counts.len() {
            self.counts.resize(needed, 0);
        }
        for &(index, n) in &other.bins {
            self.counts[(index - self.offset) as usize] += n;
        }
    }

    pub fn finish(self) -> DdSketch {
        let offset = self.offset;
        DdSketch {
            bins: self
                .counts
                .into_iter()
                .enumerate()
                .filter(|(_, n)| *n > 0)
                .map(|(i, n)| (offset + i as i32, n))
                .collect(),
            zero_count: self.zero_count,
            count: self.count,
            sum: self.sum,
            min: self.min,
            max: self.max,
        }
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// LEB128 unsigned varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads one LEB128 varint from the front of `input`.
pub fn take_varint(input: &mut &[u8]) -> Result<u64, SketchDecodeError> {
    let mut value: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = take_byte(input)?;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(SketchDecodeError::Truncated)
}

fn take_byte(input: &mut &[u8]) -> Result<u8, SketchDecodeError> {
    let (&first, rest) = input.split_first().ok_or(SketchDecodeError::Truncated)?;
    *input = rest;
    Ok(first)
}

fn take_f64(input: &mut &[u8]) -> Result<f64, SketchDecodeError> {
    if input.len() < 8 {
        return Err(SketchDecodeError::Truncated);
    }
    let (bytes, rest) = input.split_at(8);
    *input = rest;
    Ok(f64::from_le_bytes(
        bytes.try_into().map_err(|_| SketchDecodeError::Truncated)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SplitMix64: a seeded generator so the accuracy checks are reproducible.
    struct Rng(u64);

    impl Rng {
        fn next_f64(&mut self) -> f64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        }

        /// Lognormal with the given median and sigma (Box–Muller).
        fn lognormal(&mut self, median: f64, sigma: f64) -> f64 {
            let u1 = self.next_f64().max(1e-12);
            let u2 = self.next_f64();
            let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            median * (sigma * z).exp()
        }
    }

    fn exact(values: &mut [f64], q: f64) -> f64 {
        values.sort_by(|a, b| a.total_cmp(b));
        values[(q * (values.len() - 1) as f64).floor() as usize]
    }

    #[test]
    fn quantiles_are_within_relative_accuracy() {
        let mut rng = Rng(7);
        let mut values: Vec<f64> = (0..50_000).map(|_| rng.lognormal(300.0, 1.2)).collect();
        let mut sketch = DdSketch::new();
        for &v in &values {
            assert!(sketch.add(v));
        }
        for q in [0.0, 0.01, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0] {
            let want = exact(&mut values, q);
            let got = sketch.quantile(q).unwrap();
            let err = (got - want).abs() / want;
            assert!(
                err <= RELATIVE_ACCURACY + 1e-9,
                "q={q} want={want} got={got}"
            );
        }
        assert_eq!(sketch.count(), 50_000);
    }

    #[test]
    fn merge_equals_sketch_of_union() {
        let mut rng = Rng(11);
        let mut whole = DdSketch::new();
        let mut parts = vec![DdSketch::new(); 7];
        for i in 0..10_000 {
            let v = rng.lognormal(50.0, 2.0);
            whole.add(v);
            parts[i % 7].add(v);
        }
        let mut merged = DdSketch::new();
        for part in &parts {
            merged.merge(part);
        }
        assert_eq!(merged.bins, whole.bins);
        let mut dense = DenseSketch::default();
        for part in parts.iter().rev() {
            dense.merge(part);
        }
        assert_eq!(dense.finish(), merged);
        assert_eq!(merged.count(), whole.count());
        for q in [0.5, 0.99] {
            assert_eq!(merged.quantile(q), whole.quantile(q));
        }
    }

    #[test]
    fn random_merges_equal_the_sketch_of_all_values() {
        let mut rng = Rng(17);
        for round in 0..200 {
            let mut whole = DdSketch::new();
            let mut merged = DdSketch::new();
            for _ in 0..1 + round % 9 {
                let mut part = DdSketch::new();
                let n = [0, 1, 3, 5, 40, 400][(rng.next_f64() * 6.0) as usize];
                let median = [0.5, 20.0, 3000.0][(rng.next_f64() * 3.0) as usize];
                for _ in 0..n {
                    let v = rng.lognormal(median, 1.5);
                    whole.add(v);
                    part.add(v);
                }
                merged.merge(&part);
            }
            assert_eq!(merged.bins, whole.bins, "round {round}");
            assert_eq!(merged.count, whole.count, "round {round}");
        }
    }

    #[test]
    fn ceil_to_i32_is_ceil_then_cast() {
        let mut rng = Rng(23);
        let mut probes = vec![
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.0,
            -1.0,
            1e-300,
            -1e-300,
            2_147_483_646.5,
            2_147_483_647.0,
            2_147_483_647.5,
            -2_147_483_648.0,
            -2_147_483_648.5,
            3e9,
            -3e9,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        for _ in 0..100_000 {
            let x = (rng.next_f64() - 0.5) * 80_000.0;
            probes.extend([x, x.floor(), x.ceil(), x.ceil() - 1e-12]);
        }
        for x in probes {
            assert_eq!(ceil_to_i32(x), x.ceil() as i32, "{x}");
        }
    }

    #[test]
    fn counts_below_a_threshold_within_the_bucket_width() {
        let mut rng = Rng(5);
        let values: Vec<f64> = (0..20_000).map(|_| rng.lognormal(400.0, 0.8)).collect();
        let mut sketch = DdSketch::new();
        for &v in &values {
            sketch.add(v);
        }
        for threshold in [50.0, 300.0, 400.0, 1000.0, 5000.0] {
            let got = sketch.count_at_most(threshold);
            // every value within 1 % of the threshold may land on either side
            let lo = values.iter().filter(|&&v| v <= threshold * 0.98).count() as u64;
            let hi = values.iter().filter(|&&v| v <= threshold * 1.02).count() as u64;
            assert!(
                (lo..=hi).contains(&got),
                "{threshold}: {got} not in {lo}..={hi}"
            );
        }
        assert_eq!(sketch.count_at_most(1e12), 20_000);
        assert_eq!(sketch.count_at_most(-1.0), 0);
    }

    #[test]
    fn zeros_and_invalid_values() {
        let mut sketch = DdSketch::new();
        assert!(!sketch.add(-1.0));
        assert!(!sketch.add(f64::NAN));
        assert!(sketch.quantile(0.5).is_none());
        sketch.add(0.0);
        sketch.add(0.0);
        sketch.add(10.0);
        assert_eq!(sketch.quantile(0.0), Some(0.0));
        let top = sketch.quantile(1.0).unwrap();
        assert!((top - 10.0).abs() <= 0.1, "{top}");
        assert_eq!(sketch.count(), 3);
        assert!(sketch.quantile(1.5).is_none());
    }

    #[test]
    fn encoding_round_trips_and_rejects_damage() {
        let mut rng = Rng(3);
        let mut sketch = DdSketch::new();
        for _ in 0..500 {
            sketch.add(rng.lognormal(1.0, 3.0));
        }
        sketch.add(0.0);
        let mut bytes = Vec::new();
        sketch.encode(&mut bytes);
        let mut input = bytes.as_slice();
        assert_eq!(DdSketch::decode(&mut input).unwrap(), sketch);
        assert!(input.is_empty());
        for cut in [0, 1, 5, bytes.len() / 2, bytes.len() - 1] {
            let mut short = &bytes[..cut];
            assert!(DdSketch::decode(&mut short).is_err(), "cut at {cut}");
        }
        let mut empty = Vec::new();
        DdSketch::new().encode(&mut empty);
        assert_eq!(empty, vec![0]);
        assert_eq!(
            DdSketch::decode(&mut empty.as_slice()).unwrap(),
            DdSketch::new()
        );
        let mut miscounted = bytes.clone();
        miscounted[0] ^= 1;
        assert!(DdSketch::decode(&mut miscounted.as_slice()).is_err());
    }
}
