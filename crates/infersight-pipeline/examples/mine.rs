//! Throughput driver for `bench/templates.sh`: reads a file of raw log lines into memory, mines
//! every line (automatic header detection, or `--log-format SPEC`), and prints one JSON summary
//! line (lines, seconds, lines/s, templates). Only the mining loop is timed, as in the peer script.
//! `cargo run --release -p infersight-pipeline --example mine -- FILE [--log-format SPEC]`

use std::time::Instant;

use infersight_pipeline::stages::template::{LogFormat, MinerConfig, TemplateStore, line_content};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: mine FILE [--log-format SPEC]");
        std::process::exit(2);
    };
    let format = args
        .iter()
        .position(|a| a == "--log-format")
        .and_then(|i| args.get(i + 1))
        .map(|spec| {
            LogFormat::parse(spec).unwrap_or_else(|error| {
                eprintln!("{error}");
                std::process::exit(2);
            })
        });
    let text = std::fs::read_to_string(path).unwrap_or_else(|error| {
        eprintln!("cannot read {path}: {error}");
        std::process::exit(2);
    });
    let lines: Vec<&str> = text.lines().collect();
    // The stage's path: split the header, mine, keep the cluster of every line (as Drain3's loop
    // keeps its result); `mine_lines` additionally renders a template string per line.
    let start = Instant::now();
    let mut store = TemplateStore::new(MinerConfig::default());
    let clusters: Vec<_> = lines
        .iter()
        .map(|line| store.mine(line_content(line, format.as_ref()), None))
        .collect();
    store.miner_mut().compact();
    let seconds = start.elapsed().as_secs_f64();
    let mut ids: Vec<&str> = clusters
        .iter()
        .map(|&cluster| store.miner().template_id(cluster))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    println!(
        "{{\"miner\":\"infersight\",\"lines\":{},\"seconds\":{:.3},\"lines_per_second\":{:.0},\"templates\":{}}}",
        lines.len(),
        seconds,
        lines.len() as f64 / seconds,
        ids.len()
    );
}
