//! Throughput driver for `bench/templates.sh`: reads a file of raw log lines into memory, mines
//! every line (automatic header detection, or `--log-format SPEC`), and prints one JSON summary
//! line (lines, seconds, lines/s, templates). Only the mining loop is timed, as in the peer script.
//! `--split-only` also times header splitting alone (its own line); `--digest` also prints an
//! FNV-1a digest of every line's template id and text after the final compaction (untimed):
//! speed work on the miner must leave it unchanged.
//! `cargo run --release -p infersight-pipeline --example mine -- FILE [--log-format SPEC]
//! [--split-only] [--digest]`

use std::time::Instant;

use infersight_pipeline::stages::template::{
    ClusterRef, LogFormat, MinerConfig, TemplateStore, line_content,
};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: mine FILE [--log-format SPEC] [--digest] [--split-only]");
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
    if args.iter().any(|a| a == "--split-only") {
        println!("{}", time_header_split(&lines, format.as_ref()));
    }
    if args.iter().any(|a| a == "--digest") {
        println!(
            "{{\"digest\":\"{:016x}\"}}",
            digest(&mut store, &lines, &clusters, format.as_ref())
        );
    }
}

/// Header splitting alone over every line, timed: how much of a line's cost is the header.
fn time_header_split(lines: &[&str], format: Option<&LogFormat>) -> String {
    let start = Instant::now();
    let content_bytes: usize = lines
        .iter()
        .map(|line| line_content(line, format).len())
        .sum();
    let seconds = start.elapsed().as_secs_f64();
    format!(
        "{{\"split_only\":true,\"seconds\":{seconds:.3},\"lines_per_second\":{:.0},\"content_bytes\":{content_bytes}}}",
        lines.len() as f64 / seconds
    )
}

/// FNV-1a over `id \t template \n` of every line, each line resolved to its template after the
/// final compaction (merges followed, split-out children taken).
fn digest(
    store: &mut TemplateStore,
    lines: &[&str],
    clusters: &[ClusterRef],
    format: Option<&LogFormat>,
) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for (line, &cluster) in lines.iter().zip(clusters) {
        let miner = store.miner_mut();
        let cluster = miner.resolve_line(cluster, line_content(line, format));
        let text = miner.template_text(cluster);
        for part in [miner.template_id(cluster), "\t", text.as_str(), "\n"] {
            for &byte in part.as_bytes() {
                hash ^= u64::from(byte);
                hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
    }
    hash
}
