//! Prints GA/PA per Loghub-2k system (the same scoring as the integration test), and with
//! `--errors SYSTEM` the mis-grouped lines of that system: the tool used to tune the one miner
//! configuration. With `--loso` it runs the leave-one-system-out protocol instead: for each
//! system, every tunable setting is chosen on the other systems only (a grid, best average GA,
//! then PA), and the held-out system is measured with that choice.
//!
//! `cargo run --release -p infersight-pipeline --example loghub_eval -- [--headers spec|detect]
//! [--loso] [--errors SYSTEM]`. Systems are every `S/S_2k.log` with its corrected ground truth
//! under `$INFERSIGHT_DATA_DIR/loghub_2k`; a system without a known format spec is mined from the
//! ground truth's `Content` column in the spec mode.

// A measuring tool over the test scorer: a failed step should stop it loudly.
#![allow(clippy::unwrap_used)]

#[path = "../tests/it/loghub_score.rs"]
mod loghub_score;

use std::collections::{BTreeMap, BTreeSet};

use infersight_pipeline::stages::template::MinerConfig;
use loghub_score::{Headers, SystemData, SystemScore};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value_of = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let errors_for = value_of("--errors");
    let headers = match value_of("--headers").as_deref() {
        None | Some("spec") => Headers::Spec,
        Some("detect") => Headers::Detect,
        Some(other) => {
            eprintln!("--headers {other}: expected spec or detect");
            std::process::exit(2);
        }
    };
    let Some(dir) = loghub_score::loghub_dir() else {
        return;
    };
    let data: Vec<SystemData> = loghub_score::systems(&dir)
        .iter()
        .map(|system| SystemData::read(&dir, system))
        .collect();
    if args.iter().any(|a| a == "--loso") {
        leave_one_system_out(&data, headers);
        return;
    }
    let config = config_from_env();
    let scores: Vec<SystemScore> = data.iter().map(|d| d.score(&config, headers)).collect();
    print_table(&scores, headers);
    if let Some(system) = errors_for
        && let Some(score) = scores.iter().find(|s| s.system == system)
    {
        print_errors(score);
    }
}

/// The default configuration with the environment's overrides (`ST`, `DEPTH`, `SPLIT_VALUES`,
/// `SPLIT_LINES`, `SPLIT_SHARE`).
fn config_from_env() -> MinerConfig {
    let mut config = MinerConfig::default();
    let var = |name: &str| std::env::var(name).ok();
    if let Some(st) = var("ST").and_then(|v| v.parse().ok()) {
        config.similarity_threshold = st;
    }
    if let Some(depth) = var("DEPTH").and_then(|v| v.parse().ok()) {
        config.tree_depth = depth;
    }
    if let Some(values) = var("SPLIT_VALUES").and_then(|v| v.parse().ok()) {
        config.split_max_values = values;
    }
    if let Some(lines) = var("SPLIT_LINES").and_then(|v| v.parse().ok()) {
        config.split_min_lines = lines;
    }
    if let Some(share) = var("SPLIT_SHARE").and_then(|v| v.parse().ok()) {
        config.split_min_share = share;
    }
    config
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, count) = values.fold((0.0, 0usize), |(sum, count), v| (sum + v, count + 1));
    if count == 0 { 0.0 } else { sum / count as f64 }
}

fn print_table(scores: &[SystemScore], headers: Headers) {
    println!("{} mode", headers.name());
    println!("| system | GA | PA | groups (pred/true) | content mismatches |");
    println!("|---|---|---|---|---|");
    for score in scores {
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
    println!(
        "| **average** | **{:.4}** | **{:.4}** | | |",
        mean(scores.iter().map(|s| s.ga)),
        mean(scores.iter().map(|s| s.pa))
    );
}

/// The grid of tunable settings searched by the protocol: similarity threshold, tree depth and
/// the three split settings (off, or on with a minimum of lines and a minimum share per word).
/// The first entry is the default configuration.
fn grid() -> Vec<MinerConfig> {
    let mut grid = vec![MinerConfig::default()];
    for similarity_threshold in [0.5, 0.6, 0.7, 0.8] {
        for tree_depth in [2, 3, 4] {
            let base = MinerConfig {
                similarity_threshold,
                tree_depth,
                ..MinerConfig::default()
            };
            grid.push(MinerConfig {
                split_max_values: 0,
                ..base.clone()
            });
            for split_min_lines in [10, 20, 40] {
                for split_min_share in [0.05, 0.1, 0.2] {
                    grid.push(MinerConfig {
                        split_min_lines,
                        split_min_share,
                        ..base.clone()
                    });
                }
            }
        }
    }
    grid
}

fn describe(config: &MinerConfig) -> String {
    let split = if config.split_max_values < 2 {
        "split off".to_string()
    } else {
        format!(
            "split ≥{} lines ≥{} share",
            config.split_min_lines, config.split_min_share
        )
    };
    format!(
        "st {} depth {} {split}",
        config.similarity_threshold, config.tree_depth
    )
}

/// Leave-one-system-out: scores every system under every grid configuration once, then for each
/// held-out system picks the configuration with the best average GA (then PA, then grid order) on
/// the others and reports the held-out system's scores under it, beside the default
/// configuration's all-systems figures.
fn leave_one_system_out(data: &[SystemData], headers: Headers) {
    let grid = grid();
    // scores[config][system] = (GA, PA)
    let scores: Vec<Vec<(f64, f64)>> = grid
        .iter()
        .map(|config| {
            data.iter()
                .map(|system| {
                    let score = system.score(config, headers);
                    (score.ga, score.pa)
                })
                .collect()
        })
        .collect();
    let average_without = |config: usize, held_out: Option<usize>| {
        let kept = || {
            scores[config]
                .iter()
                .enumerate()
                .filter(move |(system, _)| Some(*system) != held_out)
        };
        (
            mean(kept().map(|(_, s)| s.0)),
            mean(kept().map(|(_, s)| s.1)),
        )
    };
    let best_without = |held_out: Option<usize>| {
        let mut best = 0;
        for config in 1..grid.len() {
            let (ga, pa) = average_without(config, held_out);
            let (best_ga, best_pa) = average_without(best, held_out);
            if ga > best_ga + 1e-12 || ((ga - best_ga).abs() <= 1e-12 && pa > best_pa + 1e-12) {
                best = config;
            }
        }
        best
    };
    println!(
        "leave-one-system-out, {} mode, {} configurations",
        headers.name(),
        grid.len()
    );
    println!(
        "| held-out system | chosen on the others | held-out GA | held-out PA | default GA | default PA |"
    );
    println!("|---|---|---|---|---|---|");
    let mut held_out_scores = Vec::new();
    for (index, system) in data.iter().enumerate() {
        let chosen = best_without(Some(index));
        let (ga, pa) = scores[chosen][index];
        let (default_ga, default_pa) = scores[0][index];
        held_out_scores.push((ga, pa));
        println!(
            "| {} | {} | {ga:.4} | {pa:.4} | {default_ga:.4} | {default_pa:.4} |",
            system.system,
            describe(&grid[chosen])
        );
    }
    let (default_ga, default_pa) = average_without(0, None);
    println!(
        "| **LOSO average** | | **{:.4}** | **{:.4}** | **{default_ga:.4}** | **{default_pa:.4}** |",
        mean(held_out_scores.iter().map(|s| s.0)),
        mean(held_out_scores.iter().map(|s| s.1)),
    );
    let best_all = best_without(None);
    let (ga, pa) = average_without(best_all, None);
    println!(
        "best single configuration on all systems (tuned and measured on the same data): {} → GA \
         {ga:.4} PA {pa:.4}",
        describe(&grid[best_all])
    );
}

/// For each true template: the predicted templates it was spread over (and vice versa), and the
/// distinct PA misses.
fn print_errors(score: &SystemScore) {
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
