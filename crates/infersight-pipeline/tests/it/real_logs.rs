//! False-positive check on real logs from `../shared/data` (skipped when the folder is absent):
//! real vLLM server output must come through untouched, and on Loghub-2k the only findings may be
//! the IP addresses and `user@host` addresses those systems really log.

use std::path::{Path, PathBuf};

use infersight_pipeline::{RedactConfig, Redactor};

fn shared_data(sub: &str) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data")
        .join(sub);
    if path.is_dir() {
        Some(path)
    } else {
        eprintln!("skipping: {} is absent", path.display());
        None
    }
}

fn text_files(root: &Path, extensions: &[&str]) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                pending.push(entry.unwrap().path());
            }
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| extensions.contains(&e))
        {
            files.push(path);
        }
    }
    files.sort();
    files
}

#[test]
fn real_vllm_output_is_left_intact() {
    let Some(root) = shared_data("vllm") else {
        return;
    };
    let redactor = Redactor::new(&RedactConfig::default()).unwrap();
    let mut lines = 0;
    for file in text_files(&root, &["log", "out", "err", "txt", "prom"]) {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for line in text.lines() {
            lines += 1;
            let redacted = redactor.redact(line);
            assert_eq!(redacted, line, "{}", file.display());
        }
    }
    assert!(lines > 0);
}

#[test]
fn loghub_findings_are_only_addresses() {
    let Some(root) = shared_data("loghub_2k") else {
        return;
    };
    let redactor = Redactor::new(&RedactConfig::default()).unwrap();
    let mut changed = 0;
    for file in text_files(&root, &["log"]) {
        let text = std::fs::read_to_string(&file).unwrap();
        for line in text.lines() {
            if redactor.redact(line) != line {
                changed += 1;
            }
        }
    }
    let hits = redactor.hits();
    assert!(hits["ip"] > 1000, "{hits:?}");
    for detector in [
        "card", "cn_id", "phone", "api_key", "bearer", "jwt", "custom",
    ] {
        assert_eq!(
            hits[detector], 0,
            "false positives of `{detector}` on Loghub: {hits:?}"
        );
    }
    assert!(hits["email"] <= 2, "{hits:?}");
    assert!(changed > 0);
}
