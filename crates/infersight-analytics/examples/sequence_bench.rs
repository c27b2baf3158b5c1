//! Benchmark of the log-sequence anomaly model on the HDFS sessions in
//! `../shared/data/hdfs_sequences`: F1 / precision / recall under the evaluation protocol of
//! `infersight_analytics::sequence` (seeded 50/50 split of `robust_log_train.csv`, train on
//! `hdfs_train` + normal training-half rows, score the held-out half), the transparency views,
//! and train / score times. Used by `bench/sequence.sh`.
//!
//! `--select` also prints the parameter grid scored on the **training half only** (model trained
//! on `hdfs_train`), which is how the defaults of `SequenceParams` were chosen.
//!
//! Usage: `cargo run --release -p infersight-analytics --example sequence_bench [DATA_DIR]
//! [--select] [--repeat N]`

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use infersight_analytics::sequence::{
    BinaryConfusion, EventId, HDFS_SPLIT_SEED, NextEventModel, SequenceParams,
    evaluate_split_protocol, parse_event_ids, parse_labelled_csv, seeded_split,
};

fn line(name: &str, confusion: &BinaryConfusion) {
    println!(
        "{name:<58} f1 {:.4}  precision {:.4}  recall {:.4}  (tp {} fp {} tn {} fn {})",
        confusion.f1(),
        confusion.precision().unwrap_or(0.0),
        confusion.recall().unwrap_or(0.0),
        confusion.true_positives,
        confusion.false_positives,
        confusion.true_negatives,
        confusion.false_negatives,
    );
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort_unstable();
    times[times.len() / 2]
}

fn main() -> ExitCode {
    let mut data = PathBuf::from("../shared/data");
    let mut select = false;
    let mut repeat = 5usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--select" => select = true,
            "--repeat" => match args.next().and_then(|n| n.parse().ok()) {
                Some(n) if n > 0 => repeat = n,
                _ => {
                    eprintln!("--repeat needs a positive integer");
                    return ExitCode::from(2);
                }
            },
            _ => data = PathBuf::from(arg),
        }
    }
    let dir = data.join("hdfs_sequences");
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name))
            .map_err(|error| eprintln!("cannot read {}: {error}", dir.join(name).display()))
    };
    let (Ok(train_text), Ok(csv_text)) = (read("hdfs_train"), read("robust_log_train.csv")) else {
        return ExitCode::FAILURE;
    };
    let normal_train: Result<Vec<Vec<EventId>>, _> = train_text
        .lines()
        .enumerate()
        .filter(|(_, text)| !text.trim().is_empty())
        .map(|(index, text)| parse_event_ids(text, index + 1))
        .collect();
    let (normal_train, labelled) = match (normal_train, parse_labelled_csv(&csv_text)) {
        (Ok(train), Ok(labelled)) => (train, labelled),
        (Err(error), _) | (_, Err(error)) => {
            eprintln!("bad input: {error}");
            return ExitCode::FAILURE;
        }
    };
    let params = SequenceParams::default();
    println!(
        "data: hdfs_train {} normal sessions; robust_log_train.csv {} sessions ({} anomalous); split seed {HDFS_SPLIT_SEED}",
        normal_train.len(),
        labelled.len(),
        labelled.iter().filter(|(_, anomalous)| *anomalous).count()
    );
    println!("params: {params:?}");

    if select {
        let (train_half, _) = seeded_split(labelled.len(), HDFS_SPLIT_SEED);
        println!("\nselection on the training half only (model trained on hdfs_train):");
        let mut grid = Vec::new();
        for context_len in 1..=10 {
            for min_context_support in [1, 2, 3, 5, 10, 20] {
                for top_k in [None, Some(9)] {
                    let candidate = SequenceParams {
                        context_len,
                        min_context_support,
                        top_k,
                    };
                    let model = NextEventModel::train(&normal_train, candidate.clone())
                        .expect("valid grid parameters");
                    let mut confusion = BinaryConfusion::default();
                    for &row in &train_half {
                        let (session, anomalous) = &labelled[row];
                        confusion.add(model.is_anomalous(session), *anomalous);
                    }
                    grid.push((confusion, candidate));
                }
            }
        }
        // Best F1 first; ties go to the simpler model (shorter context, then lower support).
        grid.sort_by(|a, b| {
            b.0.f1()
                .total_cmp(&a.0.f1())
                .then(a.1.context_len.cmp(&b.1.context_len))
                .then(a.1.min_context_support.cmp(&b.1.min_context_support))
        });
        for (confusion, candidate) in grid.iter().take(8) {
            line(
                &format!(
                    "  h={} support={} top_k={:?}",
                    candidate.context_len, candidate.min_context_support, candidate.top_k
                ),
                confusion,
            );
        }
        println!(
            "  selected: {:?} (defaults {})",
            grid[0].1,
            if grid[0].1 == params {
                "match"
            } else {
                "DIFFER"
            }
        );
        println!();
    }

    let evaluation =
        match evaluate_split_protocol(&normal_train, &labelled, &params, HDFS_SPLIT_SEED) {
            Ok(evaluation) => evaluation,
            Err(error) => {
                eprintln!("evaluation failed: {error}");
                return ExitCode::FAILURE;
            }
        };
    println!(
        "trained on {} normal sessions (hdfs_train + normal training-half rows)",
        evaluation.training_sessions
    );
    line(
        "held-out half (6,000 sessions) [headline]",
        &evaluation.held_out,
    );
    line(
        &format!(
            "held-out half, unique and not in training ({})",
            evaluation.held_out_novel_unique.total()
        ),
        &evaluation.held_out_novel_unique,
    );
    line(
        "whole file, trained on hdfs_train only",
        &evaluation.whole_file_hdfs_train_only,
    );

    // Timing: train on hdfs_train, score all 12,000 labelled sessions.
    let mut train_times = Vec::new();
    let mut score_times = Vec::new();
    let mut flagged = 0usize;
    for _ in 0..repeat {
        let start = Instant::now();
        let model = NextEventModel::train(&normal_train, params.clone()).expect("valid params");
        train_times.push(start.elapsed());
        let start = Instant::now();
        flagged = labelled
            .iter()
            .filter(|(session, _)| model.score(session).is_anomalous())
            .count();
        score_times.push(start.elapsed());
    }
    let (train_time, score_time) = (median(train_times), median(score_times));
    println!(
        "\ntime (median of {repeat}): train {} sessions {:.1} ms; score {} sessions {:.1} ms ({:.2} µs/session, {flagged} flagged); total {:.1} ms",
        normal_train.len(),
        train_time.as_secs_f64() * 1e3,
        labelled.len(),
        score_time.as_secs_f64() * 1e3,
        score_time.as_secs_f64() * 1e6 / labelled.len() as f64,
        (train_time + score_time).as_secs_f64() * 1e3,
    );
    ExitCode::SUCCESS
}
