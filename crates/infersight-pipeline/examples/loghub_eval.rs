//! Prints GA/PA per Loghub-2k system (the same scoring as the integration test), and with
//! `--errors SYSTEM` the mis-grouped lines of that system: the tool used to tune the one miner
//! configuration. `cargo run --release -p infersight-pipeline --example loghub_eval`.

// A measuring tool over the test scorer: a failed step should stop it loudly.
#![allow(clippy::unwrap_used)]

#[path = "../tests/it/loghub_score.rs"]
mod loghub_score;

use std::collections::{BTreeMap, BTreeSet};

use infersight_pipeline::stages::template::MinerConfig;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let errors_for = args
        .iter()
        .position(|a| a == "--errors")
        .and_then(|i| args.get(i + 1).cloned());
    let mut config = MinerConfig::default();
    if let Some(st) = std::env::var("ST").ok().and_then(|v| v.parse().ok()) {
        config.similarity_threshold = st;
    }
    if let Some(depth) = std::env::var("DEPTH").ok().and_then(|v| v.parse().ok()) {
        config.tree_depth = depth;
    }
    if let Some(values) = std::env::var("SPLIT_VALUES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config.split_max_values = values;
    }
    if let Some(lines) = std::env::var("SPLIT_LINES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config.split_min_lines = lines;
    }
    if let Some(share) = std::env::var("SPLIT_SHARE")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config.split_min_share = share;
    }
    let Some(dir) = loghub_score::loghub_dir() else {
        return;
    };
    let scores = loghub_score::score_all(&dir, &config);
    println!("| system | GA | PA | groups (pred/true) | content mismatches |");
    println!("|---|---|---|---|---|");
    for score in &scores {
        println!(
            "| {} | {:.4} | {:.4} | {}/{} | {} |",
            score.system,
            score.ga,
            score.pa,
            score.predicted_groups,
            score.true_groups,
            score.content_mismatches
        );
    }
    let n = scores.len() as f64;
    println!(
        "| **average** | **{:.4}** | **{:.4}** | | |",
        scores.iter().map(|s| s.ga).sum::<f64>() / n,
        scores.iter().map(|s| s.pa).sum::<f64>() / n
    );
    let Some(system) = errors_for else { return };
    let Some(score) = scores.iter().find(|s| s.system == system) else {
        return;
    };
    // For each true template: the predicted templates it was spread over (and vice versa).
    let mut by_truth: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
    let mut by_pred: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (mined, truth) in score.mined.iter().zip(&score.truth.templates) {
        *by_truth
            .entry(truth.as_str())
            .or_default()
            .entry(mined.template.as_str())
            .or_default() += 1;
        by_pred
            .entry(mined.template.as_str())
            .or_default()
            .insert(truth.as_str());
    }
    println!("\n## split (one true template, several predicted)");
    for (truth, predicted) in &by_truth {
        if predicted.len() > 1 {
            println!("TRUE {truth}");
            for (template, count) in predicted {
                println!("   {count:5} {template}");
            }
        }
    }
    println!("\n## merged (one predicted template, several true)");
    for (pred, truths) in &by_pred {
        if truths.len() > 1 {
            println!("PRED {pred}");
            for truth in truths {
                println!("      {truth}");
            }
        }
    }
    println!("\n## PA misses (distinct)");
    let mut misses: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (mined, truth) in score.mined.iter().zip(&score.truth.templates) {
        if loghub_score::normalize(&mined.template) != loghub_score::normalize(truth) {
            *misses
                .entry((truth.clone(), mined.template.clone()))
                .or_default() += 1;
        }
    }
    for ((truth, mined), count) in misses {
        println!("{count:5} T: {truth}\n      P: {mined}");
    }
}
