//! Detectors on synthetic series with known onsets.

use crate::support::Rng;
use infersight_analytics::detect::{
    CacheMinute, CachePollutionParams, ChangeKind, CountSample, DetectError, DetectParams,
    Direction, ErrorBurstParams, KvCacheInput, KvCacheParams, LeakParams, MINUTE_NS, MemoryInput,
    MemoryUnit, PromptDriftParams, PromptSample, ProportionParams, QueueInput, QueueParams,
    ResonanceInput, ResonanceParams, SignalKind, SpanRef, TenantCacheSeries, ThresholdMethod,
    access_entropy, cache_pollution, count_orphans, detect_change, error_burst, fit_gpd,
    gpu_memory_leak, kv_cache_pressure, orphan_spans, prompt_drift, prompt_features, queue_buildup,
    resonance, spot_threshold, truncation_surge,
};

const T0: i64 = 1_700_000_000_000_000_000;

fn minute(i: usize) -> i64 {
    T0 + i as i64 * MINUTE_NS
}

fn series(len: usize, mut f: impl FnMut(usize) -> f64) -> Vec<(i64, f64)> {
    (0..len).map(|i| (minute(i), f(i))).collect()
}

fn params_with_baseline(end_minute: usize) -> DetectParams {
    DetectParams {
        baseline_end_ns: Some(minute(end_minute)),
        ..DetectParams::default()
    }
}

// ------------------------------------------------------------------------ detect_change

#[test]
fn level_shift_is_found_with_onset_within_two_minutes() {
    for seed in 1..=5 {
        let mut rng = Rng(seed);
        let data = series(1500, |i| {
            100.0 + 5.0 * rng.normal() + if i >= 1350 { 30.0 } else { 0.0 }
        });
        let change = detect_change(&data, &params_with_baseline(1200))
            .unwrap()
            .expect("a 6σ shift is found");
        assert_eq!(change.kind, ChangeKind::LevelShift, "seed {seed}");
        assert_eq!(change.direction, Direction::Up);
        let off_minutes = (change.onset_ns - minute(1350)).abs() / MINUTE_NS;
        assert!(
            off_minutes <= 2,
            "seed {seed}: onset off by {off_minutes} min"
        );
        assert!((change.shift - 30.0).abs() < 6.0, "shift {}", change.shift);
        assert!(matches!(
            change.threshold_method,
            ThresholdMethod::Spot { .. }
        ));
    }
}

#[test]
fn small_sustained_shift_is_caught_by_cusum() {
    let mut rng = Rng(7);
    let data = series(600, |i| {
        100.0 + 5.0 * rng.normal() - if i >= 450 { 10.0 } else { 0.0 }
    });
    let change = detect_change(&data, &params_with_baseline(300))
        .unwrap()
        .expect("a 2σ shift is found");
    assert_eq!(change.direction, Direction::Down);
    assert_eq!(change.kind, ChangeKind::LevelShift);
    let off_minutes = (change.onset_ns - minute(450)).abs() / MINUTE_NS;
    assert!(off_minutes <= 5, "onset off by {off_minutes} min");
}

#[test]
fn spike_and_level_shift_are_told_apart() {
    let mut rng = Rng(11);
    let spike = series(600, |i| {
        100.0 + 5.0 * rng.normal() + if (450..452).contains(&i) { 40.0 } else { 0.0 }
    });
    let change = detect_change(&spike, &params_with_baseline(300))
        .unwrap()
        .expect("spike found");
    assert_eq!(change.kind, ChangeKind::Spike);
    assert!((change.onset_ns - minute(450)).abs() <= 2 * MINUTE_NS);
    let end = change.end_ns.expect("a spike has an end");
    assert!(end <= minute(454), "spike ends soon after");

    let mut rng = Rng(11);
    let shift = series(600, |i| {
        100.0 + 5.0 * rng.normal() + if i >= 450 { 40.0 } else { 0.0 }
    });
    let change = detect_change(&shift, &params_with_baseline(300))
        .unwrap()
        .unwrap();
    assert_eq!(change.kind, ChangeKind::LevelShift);
    assert_eq!(change.end_ns, None);
    let finding = change.to_finding(SignalKind::LatencySpike, &[("model", "m")]);
    assert_eq!(finding.kind.name(), "latency_spike");
    assert_eq!(finding.evidence_value("level_shift"), Some(1.0));
}

fn diurnal(seed: u64, days: usize, shift_from: Option<usize>) -> Vec<(i64, f64)> {
    let mut rng = Rng(seed);
    series(days * 1440, |i| {
        let phase = 2.0 * std::f64::consts::PI * i as f64 / 1440.0;
        let bump = match shift_from {
            Some(start) if i >= start => 20.0,
            _ => 0.0,
        };
        100.0 + 30.0 * phase.sin() + 3.0 * rng.normal() + bump
    })
}

#[test]
fn stationary_diurnal_noise_gives_no_finding() {
    let params = DetectParams {
        period_ns: Some(1440 * MINUTE_NS),
        ..params_with_baseline(3 * 1440)
    };
    for seed in 1..=5 {
        let data = diurnal(seed, 4, None);
        let found = detect_change(&data, &params).unwrap();
        assert!(found.is_none(), "seed {seed}: false positive {found:?}");
    }
    // The same data with a shift on day 4 is caught, and the seasonal profile was used.
    let data = diurnal(1, 4, Some(3 * 1440 + 600));
    let change = detect_change(&data, &params).unwrap().expect("shift found");
    assert!(change.seasonal);
    assert!((change.onset_ns - minute(3 * 1440 + 600)).abs() <= 2 * MINUTE_NS);
    // Without the period the daily swing itself looks anomalous.
    let flat = detect_change(&diurnal(1, 4, None), &params_with_baseline(3 * 1440)).unwrap();
    assert!(flat.is_none_or(|c| !c.seasonal));
}

#[test]
fn constant_series_gaps_and_nan_are_handled() {
    let constant = series(200, |_| 5.0);
    assert_eq!(
        detect_change(&constant, &params_with_baseline(100)),
        Ok(None)
    );

    let step = series(200, |i| if i >= 150 { 6.0 } else { 5.0 });
    let change = detect_change(&step, &params_with_baseline(100))
        .unwrap()
        .unwrap();
    assert_eq!(change.onset_ns, minute(150));
    assert_eq!(change.kind, ChangeKind::LevelShift);

    // NaNs and missing minutes are gaps; the onset is still the first point of the shift.
    let mut rng = Rng(3);
    let gappy: Vec<(i64, f64)> = series(400, |i| {
        let value = 50.0 + rng.normal() + if i >= 300 { 10.0 } else { 0.0 };
        if i % 7 == 3 { f64::NAN } else { value }
    })
    .into_iter()
    .filter(|(t, _)| (*t - T0) / MINUTE_NS % 11 != 5)
    .collect();
    let change = detect_change(&gappy, &params_with_baseline(200))
        .unwrap()
        .unwrap();
    assert!((change.onset_ns - minute(300)).abs() <= 2 * MINUTE_NS);

    let unsorted = vec![(minute(2), 1.0), (minute(1), 1.0)];
    assert!(matches!(
        detect_change(&unsorted, &DetectParams::default()),
        Err(DetectError::Unsorted { index: 1, .. })
    ));
    assert!(matches!(
        detect_change(&series(10, |_| 1.0), &DetectParams::default()),
        Err(DetectError::TooShort { .. })
    ));
    assert!(matches!(
        detect_change(&[], &DetectParams::default()),
        Err(DetectError::TooShort { .. })
    ));
    let bad = DetectParams {
        risk_q: 0.5,
        ..params_with_baseline(100)
    };
    assert!(matches!(
        detect_change(&series(200, |i| i as f64), &bad),
        Err(DetectError::BadParam { name: "risk_q", .. })
    ));
}

#[test]
fn spot_threshold_is_close_to_the_analytic_quantile() {
    // Exponential(1): P(X > x) = e^{-x}, so z_q = ln(1/q).
    let mut rng = Rng(42);
    let exponential: Vec<f64> = (0..20_000).map(|_| -(1.0 - rng.uniform()).ln()).collect();
    let q = 1e-4;
    let spot = spot_threshold(&exponential, q, 0.98, 10).unwrap().unwrap();
    let analytic = (1.0 / q).ln();
    assert!(
        (spot.threshold - analytic).abs() / analytic < 0.15,
        "spot {} vs analytic {analytic}",
        spot.threshold
    );
    assert!(spot.fit.shape.abs() < 0.15, "shape {}", spot.fit.shape);

    // GPD(γ = 0.25, σ = 1) itself: quantile at q is σ/γ (q^{-γ} − 1).
    let (shape, scale) = (0.25, 1.0);
    let gpd: Vec<f64> = (0..20_000)
        .map(|_| scale / shape * ((1.0 - rng.uniform()).powf(-shape) - 1.0))
        .collect();
    let q = 1e-3;
    let spot = spot_threshold(&gpd, q, 0.98, 10).unwrap().unwrap();
    let analytic = scale / shape * (q.powf(-shape) - 1.0);
    assert!(
        (spot.threshold - analytic).abs() / analytic < 0.25,
        "spot {} vs analytic {analytic}",
        spot.threshold
    );
    let fit = fit_gpd(&gpd[..5000]).unwrap();
    assert!((fit.shape - shape).abs() < 0.1, "shape {}", fit.shape);
    assert!((fit.scale - scale).abs() < 0.15, "scale {}", fit.scale);

    // Too few peaks: no SPOT threshold (the detector then falls back to a robust z).
    assert_eq!(spot_threshold(&[1.0; 50], q, 0.98, 10), Ok(None));
}

// ------------------------------------------------------------------------ resources

fn leak_input<'a>(
    memory: &'a [(i64, f64)],
    unit: MemoryUnit,
    utilization: &'a [(i64, f64)],
    latency_ms: &'a [(i64, f64)],
) -> MemoryInput<'a> {
    MemoryInput {
        worker: "w-3",
        memory,
        unit,
        utilization,
        latency_ms,
    }
}

#[test]
fn gpu_memory_leak_needs_growth_that_load_does_not_explain() {
    let mut rng = Rng(5);
    let memory = series(240, |i| {
        if i < 60 {
            40e9 + 5e7 * rng.normal()
        } else {
            40e9 + 2e7 * (i - 60) as f64 + 5e7 * rng.normal()
        }
    });
    let latency = series(240, |i| {
        300.0 + if i < 60 { 0.0 } else { (i - 60) as f64 } + 10.0 * rng.normal()
    });
    let low = series(240, |_| 0.2 + 0.05 * rng.uniform());
    // a busy worker whose load is steady: its memory growth is still a leak
    let busy_steady = series(240, |_| 0.85 + 0.05 * rng.uniform());
    // a worker whose load rises with its memory: growth explained by load
    let busy_rising = series(240, |i| {
        (0.55 + 0.4 * (i.saturating_sub(60)) as f64 / 180.0 + 0.01 * rng.normal()).clamp(0.0, 1.0)
    });
    let params = LeakParams::default();
    let bytes = MemoryUnit::Bytes;
    let finding = gpu_memory_leak(&leak_input(&memory, bytes, &low, &latency), &params)
        .unwrap()
        .expect("leak found");
    assert_eq!(finding.kind, SignalKind::GpuMemoryLeak);
    assert_eq!(finding.subject, vec![("worker".into(), "w-3".into())]);
    assert!(finding.evidence_value("latency_spearman").unwrap() > 0.5);
    assert!(finding.evidence_value("growth_bytes").unwrap() > 1e9);
    assert!((finding.onset_ns - minute(60)).abs() <= 15 * MINUTE_NS);

    let steady = gpu_memory_leak(&leak_input(&memory, bytes, &busy_steady, &latency), &params)
        .unwrap()
        .expect("growth at a steady high load is a leak");
    assert!(steady.evidence_value("median_utilization").unwrap() > 0.8);
    let rising =
        gpu_memory_leak(&leak_input(&memory, bytes, &busy_rising, &latency), &params).unwrap();
    assert!(rising.is_none(), "growth with rising load is not a leak");
    // no utilization series: load is not ruled out, the trend alone decides
    assert!(
        gpu_memory_leak(&leak_input(&memory, bytes, &[], &[]), &params)
            .unwrap()
            .is_some()
    );

    let flat = series(240, |_| 40e9 + 5e7 * rng.normal());
    let none = gpu_memory_leak(&leak_input(&flat, bytes, &low, &[]), &params).unwrap();
    assert!(none.is_none());

    let percent = series(240, |_| 20.0);
    assert!(matches!(
        gpu_memory_leak(&leak_input(&memory, bytes, &percent, &[]), &params),
        Err(DetectError::OutOfRange { .. })
    ));
}

#[test]
fn gpu_memory_leak_judges_a_fraction_of_capacity() {
    // 80 GB devices: used / limit from 50 % climbing to ≈ 80 %
    let mut rng = Rng(11);
    let fraction = series(240, |i| {
        let grow = if i < 60 {
            0.0
        } else {
            0.3 * (i - 60) as f64 / 180.0
        };
        (0.5 + grow + 0.002 * rng.normal()).clamp(0.0, 1.0)
    });
    let low = series(240, |_| 0.1 + 0.05 * rng.uniform());
    let finding = gpu_memory_leak(
        &leak_input(&fraction, MemoryUnit::FractionOfCapacity, &low, &[]),
        &LeakParams::default(),
    )
    .unwrap()
    .expect("leak found");
    let end = finding.evidence_value("end_fraction").unwrap();
    assert!((end - 0.8).abs() < 0.03, "{end}");
    let hours = finding.evidence_value("hours_to_full").unwrap();
    // ≈ 0.1 of capacity per hour in the last three hours, 0.2 left
    assert!((1.0..4.0).contains(&hours), "{hours}");
    assert!(
        finding.detail.contains("% of capacity"),
        "{}",
        finding.detail
    );
    // a fraction above 1 is a unit error, not a leak
    let bytes_as_fraction = series(240, |i| 40e9 + 1e7 * i as f64);
    assert!(matches!(
        gpu_memory_leak(
            &leak_input(
                &bytes_as_fraction,
                MemoryUnit::FractionOfCapacity,
                &low,
                &[]
            ),
            &LeakParams::default()
        ),
        Err(DetectError::OutOfRange { .. })
    ));
}

#[test]
fn queue_buildup_needs_growth_beyond_arrivals() {
    let mut rng = Rng(9);
    let arrivals = series(120, |_| 50.0 + 3.0 * rng.normal());
    let waiting = series(120, |i| 2.0 + 0.5 * i as f64 + rng.normal());
    let finding = queue_buildup(
        &QueueInput {
            worker: "w-1",
            waiting: &waiting,
            arrivals: &arrivals,
        },
        &QueueParams::default(),
    )
    .unwrap()
    .expect("build-up found");
    assert_eq!(finding.kind, SignalKind::QueueBuildup);
    assert!(finding.magnitude > 40.0);

    // Load ramp: the queue follows arrivals; capacity kept up.
    let ramp = series(120, |i| 20.0 + 0.5 * i as f64);
    let following: Vec<(i64, f64)> = ramp
        .iter()
        .map(|&(t, a)| (t, 0.2 * a * (1.0 + 0.1 * rng.normal())))
        .collect();
    let none = queue_buildup(
        &QueueInput {
            worker: "w-1",
            waiting: &following,
            arrivals: &ramp,
        },
        &QueueParams::default(),
    )
    .unwrap();
    assert!(
        none.is_none(),
        "a queue proportional to arrivals is load, not build-up"
    );

    let steady = series(120, |_| 5.0 + rng.normal());
    let none = queue_buildup(
        &QueueInput {
            worker: "w-1",
            waiting: &steady,
            arrivals: &arrivals,
        },
        &QueueParams::default(),
    )
    .unwrap();
    assert!(none.is_none());
}

#[test]
fn kv_cache_pressure_and_preemption_storm() {
    let mut rng = Rng(13);
    let usage = series(90, |i| {
        if i < 60 {
            0.6 + 0.05 * rng.normal()
        } else {
            (0.98 + 0.01 * rng.normal()).min(1.0)
        }
    });
    let storm = series(90, |i| rng.poisson(if i < 60 { 0.2 } else { 5.0 }));
    let calm = series(90, |_| rng.poisson(0.2));
    let params = KvCacheParams::default();
    let findings = kv_cache_pressure(
        &KvCacheInput {
            worker: "w-2",
            kv_usage: &usage,
            preemptions: &storm,
            current_from_ns: minute(60),
        },
        &params,
    )
    .unwrap();
    let kinds: Vec<SignalKind> = findings.iter().map(|f| f.kind).collect();
    assert_eq!(
        kinds,
        vec![SignalKind::KvCachePressure, SignalKind::PreemptionStorm]
    );
    assert!(findings[1].onset_ns <= minute(62));

    let findings = kv_cache_pressure(
        &KvCacheInput {
            worker: "w-2",
            kv_usage: &usage,
            preemptions: &calm,
            current_from_ns: minute(60),
        },
        &params,
    )
    .unwrap();
    let kinds: Vec<SignalKind> = findings.iter().map(|f| f.kind).collect();
    assert_eq!(
        kinds,
        vec![SignalKind::KvCachePressure],
        "no storm without preemptions"
    );

    let relaxed = series(90, |_| 0.7 + 0.05 * rng.normal());
    let findings = kv_cache_pressure(
        &KvCacheInput {
            worker: "w-2",
            kv_usage: &relaxed,
            preemptions: &storm,
            current_from_ns: minute(60),
        },
        &params,
    )
    .unwrap();
    assert!(
        findings.is_empty(),
        "preemptions without kv pressure are not a kv storm"
    );
}

#[test]
fn cache_pollution_needs_another_tenants_entropy_rise() {
    let mut rng = Rng(17);
    let victim_hits = series(90, |i| {
        (if i < 60 { 0.8 } else { 0.4 } + 0.03 * rng.normal()).clamp(0.0, 1.0)
    });
    let victim_entropy = series(90, |_| 3.0 + 0.2 * rng.normal());
    let polluter_hits = series(90, |_| 0.1 + 0.02 * rng.uniform());
    let scanning = series(90, |i| {
        (if i < 59 { 3.0 } else { 9.0 }) + 0.2 * rng.normal()
    });
    let quiet = series(90, |_| 3.0 + 0.2 * rng.normal());
    let other_hits = series(90, |_| 0.7 + 0.03 * rng.normal());
    let params = CachePollutionParams::default();
    let tenants = [
        TenantCacheSeries {
            tenant: "a",
            hit_rate: &victim_hits,
            access_entropy_bits: &victim_entropy,
            sparse_minutes: &[],
        },
        TenantCacheSeries {
            tenant: "b",
            hit_rate: &polluter_hits,
            access_entropy_bits: &scanning,
            sparse_minutes: &[],
        },
        TenantCacheSeries {
            tenant: "c",
            hit_rate: &other_hits,
            access_entropy_bits: &quiet,
            sparse_minutes: &[],
        },
    ];
    let findings = cache_pollution(&tenants, minute(60), &params).unwrap();
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert_eq!(findings[0].kind, SignalKind::CachePollution);
    assert_eq!(
        findings[0].subject,
        vec![
            ("tenant".into(), "a".into()),
            ("polluter".into(), "b".into())
        ]
    );
    assert!(findings[0].magnitude < -0.3);
    assert!(
        findings[0]
            .evidence_value("hit_rate_entropy_spearman")
            .unwrap()
            < -0.3
    );

    let no_scan = [
        tenants[0],
        TenantCacheSeries {
            tenant: "b",
            hit_rate: &polluter_hits,
            access_entropy_bits: &quiet,
            sparse_minutes: &[],
        },
        tenants[2],
    ];
    assert!(
        cache_pollution(&no_scan, minute(60), &params)
            .unwrap()
            .is_empty()
    );

    // Entropy helper: uniform over 8 keys is 3 bits; one key is 0.
    let keys: Vec<u64> = (0..64).map(|i| i % 8).collect();
    assert!((access_entropy(&keys) - 3.0).abs() < 1e-12);
    assert_eq!(access_entropy(&[7; 10]), 0.0);
}

/// A victim served a few requests a minute: its per-minute hit rate is noisy (σ ≈ 0.15), so a
/// drop of 0.4 is within 3σ of single points, yet twelve minutes at the new level are a plain
/// shift. The same noise without a drop, or a drop for two minutes only, is no finding.
#[test]
fn cache_pollution_blames_the_tenant_that_added_most_blocks_not_a_victim() {
    // the victims miss more as well, so their entropy (of the blocks they miss) rises more in
    // bits than the polluter's, which scanned a lot already; the polluter added the most
    // distinct blocks, and no victim is named a polluter of another victim
    for seed in 1..=4 {
        let mut rng = Rng(seed);
        let step = |rng: &mut Rng, before: f64, after: f64, noise: f64| {
            series(90, |i| {
                (if i < 60 { before } else { after }) + noise * rng.normal()
            })
        };
        let victim_hits: Vec<_> = (0..3)
            .map(|_| {
                step(&mut rng, 0.8, 0.15, 0.02)
                    .into_iter()
                    .map(|(t, v)| (t, v.clamp(0.0, 1.0)))
                    .collect::<Vec<_>>()
            })
            .collect();
        // victims: 3.7 → 5.9 bits (13 → 60 blocks); polluter: 6.9 → 8.2 bits (120 → 300 blocks)
        let victim_entropy: Vec<_> = (0..3).map(|_| step(&mut rng, 3.7, 5.9, 0.1)).collect();
        let polluter_hits: Vec<_> = step(&mut rng, 0.1, 0.02, 0.01)
            .into_iter()
            .map(|(t, v)| (t, v.clamp(0.0, 1.0)))
            .collect();
        let polluter_entropy = step(&mut rng, 6.9, 8.2, 0.1);
        let mut tenants: Vec<TenantCacheSeries<'_>> = ["v1", "v2", "v3"]
            .iter()
            .enumerate()
            .map(|(i, name)| TenantCacheSeries {
                tenant: name,
                hit_rate: &victim_hits[i],
                access_entropy_bits: &victim_entropy[i],
                sparse_minutes: &[],
            })
            .collect();
        tenants.push(TenantCacheSeries {
            tenant: "scanner",
            hit_rate: &polluter_hits,
            access_entropy_bits: &polluter_entropy,
            sparse_minutes: &[],
        });
        let findings =
            cache_pollution(&tenants, minute(60), &CachePollutionParams::default()).unwrap();
        let pairs: Vec<(String, String)> = findings
            .iter()
            .map(|f| (f.subject[0].1.clone(), f.subject[1].1.clone()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("v1".to_string(), "scanner".to_string()),
                ("v2".into(), "scanner".into()),
                ("v3".into(), "scanner".into())
            ],
            "seed {seed}"
        );
    }
}

#[test]
fn cache_pollution_finds_a_noisy_victims_sustained_drop() {
    for seed in 1..=8 {
        let mut rng = Rng(seed);
        let noisy = |rng: &mut Rng, level: f64| (level + 0.15 * rng.normal()).clamp(0.0, 1.0);
        let victim_hits = series(32, |i| noisy(&mut rng, if i < 20 { 0.8 } else { 0.4 }));
        let flat_hits = series(32, |_| noisy(&mut rng, 0.8));
        let blip_hits = series(32, |i| {
            noisy(&mut rng, if (20..22).contains(&i) { 0.4 } else { 0.8 })
        });
        let entropy = series(32, |_| 10.0 + 0.3 * rng.normal());
        let scanning = series(32, |i| {
            (if i < 20 { 10.0 } else { 14.5 }) + 0.3 * rng.normal()
        });
        let params = CachePollutionParams::default();
        let run = |victim: &[(i64, f64)]| {
            let tenants = [
                TenantCacheSeries {
                    tenant: "victim",
                    hit_rate: victim,
                    access_entropy_bits: &entropy,
                    sparse_minutes: &[],
                },
                TenantCacheSeries {
                    tenant: "scanner",
                    hit_rate: &flat_hits,
                    access_entropy_bits: &scanning,
                    sparse_minutes: &[],
                },
            ];
            cache_pollution(&tenants, minute(20), &params).unwrap()
        };
        let found = run(&victim_hits);
        assert_eq!(found.len(), 1, "seed {seed}: {found:?}");
        assert!(
            (found[0].onset_ns - minute(20)).abs() <= 2 * MINUTE_NS,
            "seed {seed}: onset {} vs {}",
            found[0].onset_ns,
            minute(20)
        );
        assert!(found[0].magnitude < -0.2, "seed {seed}: {found:?}");
        assert!(run(&flat_hits).is_empty(), "seed {seed}");
        assert!(run(&blip_hits).is_empty(), "seed {seed}");
    }
}

/// A sparse tenant (1.8 requests a minute, 12–14k-token prompts) whose prefix-cache hits end at
/// in the minutes of `evicted` (most requests then miss everything, some half): its minutes, and
/// its hit rate pooled over four minutes (what the median test reads).
fn sparse_tenant(
    rng: &mut Rng,
    evicted: std::ops::Range<usize>,
) -> (Vec<CacheMinute>, Vec<(i64, f64)>) {
    let mut minutes = Vec::new();
    for i in 0..30 {
        let evicted = evicted.contains(&i);
        let (mut tokens, mut cached) = (0.0, 0.0);
        for _ in 0..rng.poisson(1.8) as usize {
            let prompt = 12_000.0 + 2_000.0 * rng.uniform();
            let partial = rng.uniform() < if evicted { 0.2 } else { 0.15 };
            let hit = match (evicted, partial) {
                (_, true) => 0.5 + 0.1 * rng.normal(),
                (false, false) => 0.95 + 0.02 * rng.normal(),
                (true, false) => 0.0,
            };
            tokens += prompt;
            cached += prompt * hit.clamp(0.0, 1.0);
        }
        if tokens > 0.0 {
            minutes.push(CacheMinute {
                ts_ns: minute(i),
                hit_rate: cached / tokens,
                input_tokens: tokens,
            });
        }
    }
    let pooled = (0..30_usize)
        .filter_map(|i| {
            let window: Vec<&CacheMinute> = minutes
                .iter()
                .filter(|m| (minute(i.saturating_sub(3))..=minute(i)).contains(&m.ts_ns))
                .collect();
            let tokens: f64 = window.iter().map(|m| m.input_tokens).sum();
            (tokens > 0.0).then(|| {
                let cached: f64 = window.iter().map(|m| m.input_tokens * m.hit_rate).sum();
                (minute(i), cached / tokens)
            })
        })
        .collect();
    (minutes, pooled)
}

/// A victim with two requests a minute whose cache is evicted five minutes after the polluter
/// starts scanning: half the incident's pooled points still hit, so the medians do not move,
/// while its token-weighted hit rate from the eviction on has plainly fallen. The same tenant
/// without an eviction or without a scanner is no finding, and one evicted for two minutes and
/// then hitting again is no token-weighted drop.
#[test]
fn cache_pollution_finds_a_sparse_victim_evicted_late() {
    let params = CachePollutionParams::default();
    let (mut weighted, mut medians) = (0, 0);
    for seed in 1..=12 {
        let mut rng = Rng(100 + seed);
        let entropy = series(30, |_| 3.0 + 0.2 * rng.normal());
        let scanning = series(30, |i| {
            (if i < 20 { 7.0 } else { 10.0 }) + 0.3 * rng.normal()
        });
        let scanner_hits = series(30, |_| 0.05 + 0.02 * rng.uniform());
        let run =
            |victim: &(Vec<CacheMinute>, Vec<(i64, f64)>), sparse: bool, scan: &[(i64, f64)]| {
                let tenants = [
                    TenantCacheSeries {
                        tenant: "victim",
                        hit_rate: &victim.1,
                        access_entropy_bits: &entropy,
                        sparse_minutes: if sparse { &victim.0 } else { &[] },
                    },
                    TenantCacheSeries {
                        tenant: "scanner",
                        hit_rate: &scanner_hits,
                        access_entropy_bits: scan,
                        sparse_minutes: &[],
                    },
                ];
                cache_pollution(&tenants, minute(20), &params).unwrap()
            };
        let victim = sparse_tenant(&mut rng, 25..30);
        let by_medians = !run(&victim, false, &scanning).is_empty();
        medians += usize::from(by_medians);
        let found = run(&victim, true, &scanning);
        if let [finding] = found.as_slice() {
            weighted += 1;
            assert_eq!(
                finding.subject,
                vec![
                    ("tenant".into(), "victim".into()),
                    ("polluter".into(), "scanner".into())
                ],
                "seed {seed}"
            );
            // from the eviction on, most prompts missed entirely
            assert!(
                by_medians || finding.evidence_value("victim_hit_rate_after").unwrap() < 0.4,
                "seed {seed}: {finding:?}"
            );
        }
        assert!(
            run(&victim, true, &entropy).is_empty(),
            "seed {seed}: no scanner"
        );
        let steady = sparse_tenant(&mut rng, 0..0);
        let found = run(&steady, true, &scanning);
        assert!(found.is_empty(), "seed {seed}, no eviction: {found:?}");
        // two minutes evicted, then hitting again: the pooled medians may see it (four-minute
        // pools spread it over five points), the token-weighted drop adds nothing
        let blip = sparse_tenant(&mut rng, 23..25);
        assert_eq!(
            run(&blip, true, &scanning),
            run(&blip, false, &scanning),
            "seed {seed}, evicted for two minutes"
        );
    }
    assert!(weighted >= 11, "found on {weighted} of 12 seeds");
    assert!(
        medians <= 6,
        "the medians alone found it on {medians} of 12 seeds"
    );
    // a sparse minute out of range is an error naming the series, as for the other series
    let flat = series(30, |_| 0.9);
    for (hit_rate, input_tokens) in [(1.5, 12_000.0), (0.9, f64::NAN), (0.9, -1.0)] {
        let bad = [CacheMinute {
            ts_ns: minute(3),
            hit_rate,
            input_tokens,
        }];
        let tenants = [TenantCacheSeries {
            tenant: "victim",
            hit_rate: &flat,
            access_entropy_bits: &flat,
            sparse_minutes: &bad,
        }];
        assert!(
            matches!(
                cache_pollution(&tenants, minute(20), &params),
                Err(DetectError::OutOfRange {
                    series: "sparse_minutes",
                    ..
                })
            ),
            "hit rate {hit_rate}, input tokens {input_tokens}"
        );
    }
}

fn proportion_counts(rng: &mut Rng, before: f64, after: f64) -> Vec<CountSample> {
    (0..90)
        .map(|i| CountSample {
            ts_ns: minute(i),
            hits: rng.binomial(100, if i < 60 { before } else { after }),
            total: 100,
        })
        .collect()
}

#[test]
fn truncation_surge_per_model() {
    let mut rng = Rng(19);
    let params = ProportionParams::default();
    let surge = proportion_counts(&mut rng, 0.02, 0.10);
    let finding = truncation_surge("llama-70b", &surge, minute(60), &params)
        .unwrap()
        .expect("surge found");
    assert_eq!(finding.kind, SignalKind::TruncationSurge);
    assert_eq!(finding.subject, vec![("model".into(), "llama-70b".into())]);
    assert!((finding.evidence_value("current_rate").unwrap() - 0.10).abs() < 0.03);
    assert!(finding.onset_ns <= minute(65));

    let steady = proportion_counts(&mut rng, 0.02, 0.02);
    assert_eq!(
        truncation_surge("llama-70b", &steady, minute(60), &params),
        Ok(None)
    );
    let broken = vec![CountSample {
        ts_ns: T0,
        hits: 5,
        total: 3,
    }];
    assert!(matches!(
        truncation_surge("m", &broken, minute(60), &params),
        Err(DetectError::OutOfRange { .. })
    ));
}

#[test]
fn orphan_spans_signal_trace_context_loss() {
    let spans = [
        SpanRef {
            trace_id: "t1",
            span_id: "a",
            parent_span_id: None,
        },
        SpanRef {
            trace_id: "t1",
            span_id: "b",
            parent_span_id: Some("a"),
        },
        SpanRef {
            trace_id: "t1",
            span_id: "c",
            parent_span_id: Some("zz"),
        },
        // Parent id exists, but in another trace: still an orphan.
        SpanRef {
            trace_id: "t2",
            span_id: "d",
            parent_span_id: Some("a"),
        },
        SpanRef {
            trace_id: "t2",
            span_id: "e",
            parent_span_id: Some(""),
        },
    ];
    assert_eq!(count_orphans(&spans), (2, 5));

    let mut rng = Rng(23);
    let params = ProportionParams::default();
    let loss = proportion_counts(&mut rng, 0.01, 0.2);
    let finding = orphan_spans("gateway", "v2", &loss, minute(60), &params)
        .unwrap()
        .expect("loss found");
    assert_eq!(finding.kind.name(), "trace_context_loss");
    assert_eq!(
        finding.subject,
        vec![
            ("service".into(), "gateway".into()),
            ("version".into(), "v2".into())
        ]
    );
    let fine = proportion_counts(&mut rng, 0.01, 0.01);
    assert_eq!(
        orphan_spans("gateway", "v1", &fine, minute(60), &params),
        Ok(None)
    );
}

#[test]
fn resonance_needs_all_three_to_rise_together() {
    let mut rng = Rng(29);
    let mut rising = |base: f64, jump: f64| {
        series(240, |i| {
            base + rng.normal() + if i >= 180 { jump } else { 0.0 }
        })
    };
    let injection = rising(10.0, 8.0);
    let rejections = rising(20.0, 10.0);
    let rollbacks = rising(5.0, 6.0);
    let flat_rejections = rising(20.0, 0.0);
    let flat_rollbacks = rising(5.0, 0.0);
    let subject = [("model", "m-spec")];
    let params = ResonanceParams::default();
    let finding = resonance(
        &ResonanceInput {
            subject: &subject,
            injection_score: &injection,
            rejection_failures: &rejections,
            spec_rollbacks: &rollbacks,
            current_from_ns: minute(120),
        },
        &params,
    )
    .unwrap()
    .expect("resonance found");
    assert_eq!(finding.kind, SignalKind::Resonance);
    assert!((finding.onset_ns - minute(180)).abs() <= 2 * MINUTE_NS);
    assert!(
        finding
            .evidence_value("spearman_injection_rollback")
            .unwrap()
            >= 0.5
    );

    let alone = resonance(
        &ResonanceInput {
            subject: &subject,
            injection_score: &injection,
            rejection_failures: &flat_rejections,
            spec_rollbacks: &flat_rollbacks,
            current_from_ns: minute(120),
        },
        &params,
    )
    .unwrap();
    assert!(alone.is_none(), "one rising series is not resonance");
}

fn prompt(rng: &mut Rng, template: &str, vocabulary: &[&str]) -> String {
    let mut text = template.to_string();
    for _ in 0..12 {
        text.push(' ');
        text.push_str(vocabulary[(rng.next_u64() % vocabulary.len() as u64) as usize]);
    }
    text
}

#[test]
fn prompt_drift_with_output_length_outliers() {
    let support = [
        "refund", "invoice", "billing", "account", "password", "login", "charge", "card", "plan",
        "upgrade", "cancel", "renewal", "receipt", "tax", "address",
    ];
    let code = [
        "rust", "borrow", "checker", "lifetime", "trait", "generic", "async", "tokio", "panic",
        "unwrap", "cargo", "macro", "closure", "iterator", "vector",
    ];
    let mut rng = Rng(31);
    let mut make = |start: usize, count: usize, template: &str, words: &[&str], long: bool| {
        (0..count)
            .map(|i| PromptSample {
                ts_ns: minute(start + i),
                features: prompt_features(&prompt(&mut rng, template, words), 64),
                output_tokens: Some(if long && i % 4 == 0 {
                    600.0
                } else {
                    200.0 + 20.0 * rng.normal()
                }),
            })
            .collect::<Vec<_>>()
    };
    let baseline = make(
        0,
        120,
        "summarize this support ticket about",
        &support,
        false,
    );
    let drifted = make(
        120,
        60,
        "explain why this code fails to compile with",
        &code,
        true,
    );
    let same = make(
        120,
        60,
        "summarize this support ticket about",
        &support,
        false,
    );
    let params = PromptDriftParams::default();
    let finding = prompt_drift(&[("tenant", "t")], &baseline, &drifted, &params)
        .unwrap()
        .expect("drift found");
    assert_eq!(finding.kind, SignalKind::PromptDrift);
    assert!(finding.magnitude < 0.0);
    assert!(
        finding
            .evidence_value("output_length_outlier_share")
            .unwrap()
            > 0.2
    );
    assert!(
        finding
            .evidence_value("output_length_outlier_p_value")
            .unwrap()
            < 1e-3
    );
    assert!(finding.onset_ns <= minute(122));
    assert_eq!(
        prompt_drift(&[("tenant", "t")], &baseline, &same, &params),
        Ok(None)
    );
}

#[test]
fn error_burst_is_a_poisson_tail() {
    let mut rng = Rng(37);
    let burst = series(180, |i| {
        if (130..134).contains(&i) {
            15.0 + rng.poisson(1.0)
        } else {
            rng.poisson(1.0)
        }
    });
    let params = ErrorBurstParams::default();
    let finding = error_burst(&[("service", "api")], &burst, minute(120), &params)
        .unwrap()
        .expect("burst found");
    assert_eq!(finding.kind, SignalKind::ErrorBurst);
    assert!((finding.onset_ns - minute(130)).abs() <= MINUTE_NS);
    assert!(finding.window_end_ns <= minute(135));

    let calm = series(180, |_| rng.poisson(1.0));
    assert_eq!(
        error_burst(&[("service", "api")], &calm, minute(120), &params),
        Ok(None)
    );
    assert!(matches!(
        error_burst(&[], &series(30, |_| -1.0), minute(20), &params),
        Err(DetectError::OutOfRange { .. })
    ));
}
