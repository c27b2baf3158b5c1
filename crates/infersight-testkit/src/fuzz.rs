//! The fuzz harnesses' runner (test-only), shared by the model, ingest and pipeline `it`
//! binaries: proptest with a fixed seed and no files written, sized by `INFERSIGHT_FUZZ_CASES`
//! (cases per harness), `INFERSIGHT_FUZZ_SEED` and `INFERSIGHT_FUZZ_SECONDS` (`bench/fuzz.sh`
//! runs them long).

use std::time::Instant;

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Runs `test` on `INFERSIGHT_FUZZ_CASES` (else `default_cases`, a CI size that keeps the module
/// fast) values of `strategy` (fixed seed, shrinking on failure, no files written) and prints
/// `fuzz NAME: N cases in S s, ok|FAILED` for `bench/fuzz.sh`. With `INFERSIGHT_FUZZ_SECONDS`,
/// rounds of that many cases (seed, seed + 1, …) run until that much time has passed. Panics
/// with the minimized input on failure.
pub fn run<S: Strategy>(
    name: &str,
    default_cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    let cases = env("INFERSIGHT_FUZZ_CASES").unwrap_or(default_cases);
    let seed: u64 = env("INFERSIGHT_FUZZ_SEED").unwrap_or(0x1f5e_2023);
    let budget_s: Option<f64> = env("INFERSIGHT_FUZZ_SECONDS");
    let started = Instant::now();
    let mut total = 0u64;
    let mut round = 0u64;
    let result = loop {
        let config = Config {
            cases,
            rng_seed: RngSeed::Fixed(seed.wrapping_add(round)),
            failure_persistence: None,
            max_shrink_iters: 4096,
            ..Config::default()
        };
        let result = TestRunner::new(config).run(&strategy, &test);
        total += u64::from(cases);
        round += 1;
        let more = budget_s.is_some_and(|s| started.elapsed().as_secs_f64() < s);
        if result.is_err() || !more {
            break result;
        }
    };
    eprintln!(
        "fuzz {name}: {total} cases in {:.2} s, {}",
        started.elapsed().as_secs_f64(),
        if result.is_ok() { "ok" } else { "FAILED" }
    );
    if let Err(error) = result {
        panic!("fuzz {name}: {error}");
    }
}
