//! The real vLLM server logs in `../shared/data/vllm` parse completely: every periodic stats line
//! becomes metric samples whose values equal the numbers printed in the line (percentages as
//! ratios), and every access line is classed `access`. Skipped when the data folder is absent.

use std::path::{Path, PathBuf};

use infersight_pipeline::{LogClass, parse_line};

fn vllm_dir() -> Option<PathBuf> {
    let base = std::env::var_os("INFERSIGHT_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data"));
    let dir = base.join("vllm");
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("skipping real vLLM parse test: {} is absent", dir.display());
        None
    }
}

fn server_logs(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                pending.push(entry.unwrap().path());
            }
        } else if path.file_name().is_some_and(|n| n == "server_out.log") {
            files.push(path);
        }
    }
    files.sort();
    files
}

#[test]
fn every_real_vllm_stats_line_becomes_exact_metric_samples() {
    let Some(root) = vllm_dir() else { return };
    let number = regex::Regex::new(r"(\d+(?:\.\d+)?)(%?)").unwrap();
    let (mut stats_lines, mut access_lines, mut samples) = (0, 0, 0);
    for file in server_logs(&root) {
        let text = std::fs::read_to_string(&file).unwrap();
        for line in text.lines() {
            let parsed = parse_line(line);
            if let Some(at) = line.find("Avg prompt throughput:") {
                stats_lines += 1;
                assert_eq!(parsed.class, LogClass::EngineStats, "{line}");
                let expected: Vec<f64> = number
                    .captures_iter(&line[at..])
                    .map(|c| {
                        let value: f64 = c[1].parse().unwrap();
                        if &c[2] == "%" { value / 100.0 } else { value }
                    })
                    .collect();
                let actual: Vec<f64> = parsed.metrics.iter().map(|m| m.value).collect();
                assert_eq!(actual.len(), 7, "{line}");
                assert_eq!(actual.len(), expected.len(), "{line}");
                for (a, e) in actual.iter().zip(&expected) {
                    assert!((a - e).abs() < 1e-12, "{a} != {e} in {line}");
                }
                samples += actual.len();
            } else if line.contains("\" 200 OK") || line.contains("HTTP/1.1\"") {
                access_lines += 1;
                assert_eq!(parsed.class, LogClass::Access, "{line}");
            }
        }
    }
    eprintln!("{stats_lines} stats lines -> {samples} samples; {access_lines} access lines");
    assert!(
        stats_lines >= 1000,
        "expected the two runs' stats lines, found {stats_lines}"
    );
    assert!(access_lines >= 1000);
}
