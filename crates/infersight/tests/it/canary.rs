//! End-to-end tests of `infersight canary`: a simulated fleet where model version r2 regresses
//! (`lora_kv_regression`, the version sent as `deploy.model_revision`) blocks the gate during the
//! incident and passes before it; quality attributes from JSON lines compare with
//! `--higher-is-better`; bad input exits 2. Small data so the module takes seconds in debug.

use std::path::Path;

use serde_json::Value;

use crate::support::run;

fn code_and_output(args: &[&str]) -> (i32, String, String) {
    let out = run(args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `infersight canary --data DATA --dimension D --baseline B --candidate C --sli S EXTRA...`.
fn canary(
    data: &str,
    (dimension, baseline, candidate): (&str, &str, &str),
    sli: &str,
    extra: &[&str],
) -> (i32, String, String) {
    let mut args = vec![
        "canary",
        "--data",
        data,
        "--dimension",
        dimension,
        "--baseline",
        baseline,
        "--candidate",
        candidate,
        "--sli",
        sli,
    ];
    args.extend_from_slice(extra);
    code_and_output(&args)
}

fn ok(args: &[&str]) {
    let (code, _, stderr) = code_and_output(args);
    assert_eq!(code, 0, "{args:?} failed: {stderr}");
}

/// Simulates 12 minutes of `lora_kv_regression` (8 workers, 10 req/s), ingests the traces and
/// returns the incident's start (RFC 3339).
fn simulate_regression(dir: &Path) -> String {
    let sim = dir.join("sim");
    let data = dir.join("data");
    ok(&[
        "simulate",
        "--scenario",
        "lora_kv_regression",
        "--seed",
        "1",
        "--duration",
        "12m",
        "--workers",
        "8",
        "--rate",
        "10",
        "--arrivals",
        "poisson",
        "--dimension",
        "model_version=deploy.model_revision",
        "--quiet",
        "--format",
        "json",
        "--out",
        sim.to_str().unwrap(),
    ]);
    ok(&[
        "ingest",
        "--quiet",
        "--data",
        data.to_str().unwrap(),
        sim.join("traces.jsonl").to_str().unwrap(),
    ]);
    let truth: Value =
        serde_json::from_str(&std::fs::read_to_string(sim.join("ground_truth.json")).unwrap())
            .unwrap();
    truth["incident_window"]["start"]
        .as_str()
        .expect("ground truth has an incident window")
        .to_string()
}

#[test]
fn gate_blocks_a_regressed_version_and_passes_an_unchanged_one() {
    let dir = tempfile::tempdir().unwrap();
    let incident_start = simulate_regression(dir.path());
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let versions = ("deploy.model_revision", "r1", "r2");
    let gate = |extra: &[&str]| {
        let mut args = vec!["--q", "0.95"];
        args.extend_from_slice(extra);
        canary(data, versions, "ttft", &args)
    };

    // During the incident, r2 serves +900 ms on a sixth of its requests: its p95 regresses.
    let (code, stdout, stderr) = gate(&["--since", &incident_start]);
    assert_eq!(code, 1, "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stdout.starts_with("BLOCK ttft p95 (deploy.model_revision r2 vs r1): baseline "),
        "{stdout}"
    );
    assert!(
        stdout.contains(" ms (n=") && stdout.contains("[95 % CI +"),
        "{stdout}"
    );
    assert!(stdout.contains("> max regression 5 %"), "{stdout}");

    // Before the incident the two versions serve alike.
    let (code, stdout, stderr) = gate(&["--until", &incident_start]);
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.starts_with("PASS ttft p95"), "{stdout}");
    // A random A/B split (temperature is drawn per request) passes even during the incident;
    // numeric settings compare as numbers (`1` matches a stored 1.0).
    let (code, stdout, stderr) = canary(data, ("temperature", "0.2", "1"), "ttft", &[]);
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stdout.starts_with("PASS ttft p95 (temperature 1 vs 0.2)"),
        "{stdout}"
    );

    // JSON carries the same fields.
    let (code, stdout, stderr) = gate(&["--since", &incident_start, "--format", "json"]);
    assert_eq!(code, 1, "{stderr}");
    let verdict: Value = serde_json::from_str(&stdout).expect("canary prints JSON");
    assert_eq!(verdict["decision"], "block");
    assert_eq!(verdict["sli"], "ttft");
    assert_eq!(verdict["statistic"], "p95");
    assert_eq!(verdict["unit"], "ms");
    assert_eq!(verdict["baseline"]["value"], "r1");
    assert_eq!(verdict["candidate"]["value"], "r2");
    let (low, change, high) = (
        verdict["ci_low"].as_f64().unwrap(),
        verdict["relative_change"].as_f64().unwrap(),
        verdict["ci_high"].as_f64().unwrap(),
    );
    assert!(0.0 < low && low <= change && change <= high, "{verdict}");
    assert!(
        verdict["candidate"]["statistic"].as_f64().unwrap()
            > verdict["baseline"]["statistic"].as_f64().unwrap() + 300.0,
        "{verdict}"
    );
    assert!(
        verdict["baseline"]["n"].as_u64().unwrap() >= 500,
        "{verdict}"
    );
    assert_eq!(verdict["seed"].as_u64(), Some(0x00C0_FFEE));

    // The error rate: a mean of 0/1 per request; nothing failed on either side.
    let (code, stdout, stderr) = canary(data, versions, "error", &["--q", "0.5"]);
    assert_eq!(code, 2, "--q with a rate is bad usage: {stdout} {stderr}");
    assert!(
        stderr.contains("--q applies to --stat quantile only"),
        "{stderr}"
    );
    let (code, stdout, stderr) = canary(data, ("model_version", "r1", "r2"), "error", &[]);
    assert_eq!(code, 0, "{stdout} {stderr}");
    assert!(stdout.starts_with("PASS error mean"), "{stdout}");

    // Bad input: an unknown SLI lists the valid ones; a value with no requests is too few; a
    // dimension name that is not a plain identifier never reaches SQL.
    let (code, _, stderr) = canary(data, versions, "latency", &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("unknown SLI `latency`") && stderr.contains("ttft"),
        "{stderr}"
    );
    let (code, _, stderr) = canary(
        data,
        ("deploy.model_revision", "r1", "r9"),
        "ttft",
        &["--since", &incident_start],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("the candidate has 0 values; the gate needs at least 30"),
        "{stderr}"
    );
    let (code, _, stderr) = canary(data, ("x' OR '1'='1", "r1", "r2"), "ttft", &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("dimension name"), "{stderr}");
}
/// SplitMix64-based normal draws for the JSON-lines fixture.
fn normal(state: &mut u64) -> f64 {
    let mut next = || {
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1_u64 << 53) as f64
    };
    let (u1, u2) = (next().max(1e-12), next());
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

#[test]
fn quality_attributes_compare_like_latency() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("requests.jsonl");
    let mut lines = String::new();
    let mut state = 42_u64;
    // r1: BLEU ≈ 30, toxicity ≈ 0.10; r2: BLEU ≈ 26 (worse), toxicity ≈ 0.05 (better).
    for i in 0..600 {
        let (revision, bleu, toxicity) = if i % 2 == 0 {
            ("r1", 30.0, 0.10)
        } else {
            ("r2", 26.0, 0.05)
        };
        let bleu = bleu + 6.0 * normal(&mut state);
        let toxicity = (toxicity + 0.02 * normal(&mut state)).max(0.0);
        lines.push_str(&format!(
            "{{\"ts\":{},\"model\":\"m\",\"ttft_ms\":{:.1},\"e2e_ms\":900,\"deploy\":{{\"model_revision\":\"{revision}\"}},\"eval\":{{\"bleu\":{bleu:.2},\"toxicity\":{toxicity:.4}}}}}\n",
            1_764_381_600 + i,
            200.0 + 40.0 * normal(&mut state).abs(),
        ));
    }
    std::fs::write(&file, lines).unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    ok(&["ingest", "--quiet", "--data", data, file.to_str().unwrap()]);
    let revisions = ("deploy.model_revision", "r1", "r2");
    let gate = |sli: &str, extra: &[&str]| {
        let mut args = vec!["--stat", "mean"];
        args.extend_from_slice(extra);
        canary(data, revisions, sli, &args)
    };
    // BLEU is higher-is-better: a 13 % drop blocks.
    let (code, stdout, stderr) = gate("attr:eval.bleu", &["--higher-is-better"]);
    assert_eq!(code, 1, "{stdout} {stderr}");
    assert!(stdout.starts_with("BLOCK attr:eval.bleu mean"), "{stdout}");
    // Read the other way round (r2 as the baseline) the change is a rise, which passes.
    let (code, stdout, stderr) = canary(
        data,
        ("deploy.model_revision", "r2", "r1"),
        "attr:eval.bleu",
        &["--stat", "mean", "--higher-is-better"],
    );
    assert_eq!(code, 0, "{stdout} {stderr}");
    assert!(stdout.contains("the candidate is better"), "{stdout}");
    // Toxicity is lower-is-better: halving it passes.
    let (code, stdout, stderr) = gate("attr:eval.toxicity", &[]);
    assert_eq!(code, 0, "{stdout} {stderr}");
    // Too few samples for the configured minimum is bad input, not a pass.
    let (code, _, stderr) = gate("attr:eval.toxicity", &["--min-samples", "1000"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("the gate needs at least 1000"), "{stderr}");
}
