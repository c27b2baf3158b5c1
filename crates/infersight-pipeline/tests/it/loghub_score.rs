//! Loghub-2k scoring shared by the accuracy test and `examples/loghub_eval.rs`: reads the raw
//! logs and the corrected ground truth from `../shared/data/loghub_2k` (every system found there,
//! not only the ten shared ones), mines with ONE miner configuration, with the format spec or with
//! header detection, and computes GA and PA as defined in `shared/data/README.md`.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use infersight_pipeline::stages::template::{LogFormat, MinedLine, MinerConfig, mine_lines};

/// The Loghub benchmark format specs, the only per-system input.
pub use infersight_pipeline::stages::template::LOGHUB_FORMATS as SYSTEMS;

/// `$INFERSIGHT_DATA_DIR/loghub_2k`, default `../../../shared/data` from the crate directory.
pub fn loghub_dir() -> Option<PathBuf> {
    let base = std::env::var_os("INFERSIGHT_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data"));
    let dir = base.join("loghub_2k");
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "skipping Loghub-2k accuracy: {} is absent (set INFERSIGHT_DATA_DIR to the shared data \
             folder)",
            dir.display()
        );
        None
    }
}

/// RFC 4180 records (quoted fields, doubled quotes, newlines inside quotes).
pub fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let mut records = Vec::new();
    let mut record = Vec::new();
    let mut field = String::new();
    let mut in_quotes = false;
    let mut chars = text.chars().peekable();
    while let Some(ch) = chars.next() {
        if in_quotes {
            if ch == '"' {
                if chars.peek() == Some(&'"') {
                    field.push('"');
                    chars.next();
                } else {
                    in_quotes = false;
                }
            } else {
                field.push(ch);
            }
            continue;
        }
        match ch {
            '"' => in_quotes = true,
            ',' => record.push(std::mem::take(&mut field)),
            '\r' => {}
            '\n' => {
                record.push(std::mem::take(&mut field));
                records.push(std::mem::take(&mut record));
            }
            _ => field.push(ch),
        }
    }
    if !field.is_empty() || !record.is_empty() {
        record.push(field);
        records.push(record);
    }
    records
}

pub struct Truth {
    pub contents: Vec<String>,
    pub templates: Vec<String>,
}

pub fn read_truth(dir: &Path, system: &str) -> Truth {
    let path = dir
        .join(system)
        .join(format!("{system}_2k.log_structured_corrected.csv"));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut rows = parse_csv(&text).into_iter();
    let header = rows.next().unwrap();
    let content = header.iter().position(|h| h == "Content").unwrap();
    let template = header.iter().position(|h| h == "EventTemplate").unwrap();
    let mut truth = Truth {
        contents: Vec::new(),
        templates: Vec::new(),
    };
    for row in rows {
        truth.contents.push(row[content].clone());
        truth.templates.push(row[template].clone());
    }
    truth
}

pub fn normalize(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Grouping accuracy: a line counts when the set of lines sharing its predicted group equals the
/// set sharing its true group.
pub fn grouping_accuracy(predicted: &[&str], truth: &[&str]) -> f64 {
    assert_eq!(predicted.len(), truth.len());
    let mut predicted_groups: HashMap<&str, Vec<usize>> = HashMap::new();
    for (line, group) in predicted.iter().enumerate() {
        predicted_groups.entry(group).or_default().push(line);
    }
    let mut truth_sizes: HashMap<&str, usize> = HashMap::new();
    for group in truth {
        *truth_sizes.entry(group).or_default() += 1;
    }
    let mut correct = 0;
    for lines in predicted_groups.values() {
        let first = truth[lines[0]];
        if lines.iter().all(|&line| truth[line] == first) && truth_sizes[first] == lines.len() {
            correct += lines.len();
        }
    }
    correct as f64 / truth.len() as f64
}

/// How the content of a raw line is found before mining.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Headers {
    /// The system's Loghub format spec (`LOGHUB_FORMATS`); for a system without one, the ground
    /// truth's `Content` column (what a perfect spec yields).
    Spec,
    /// Automatic header detection, no per-system input at all.
    Detect,
}

impl Headers {
    pub fn name(self) -> &'static str {
        match self {
            Headers::Spec => "format spec",
            Headers::Detect => "header detection",
        }
    }
}

/// The systems of `dir`: every `S/S_2k.log` with its corrected ground truth, in name order (the
/// ten shared ones, or any other Loghub-2k system put beside them).
pub fn systems(dir: &Path) -> Vec<String> {
    let mut systems: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|entry| entry.file_name().into_string().ok())
                .filter(|name| {
                    dir.join(name).join(format!("{name}_2k.log")).is_file()
                        && dir
                            .join(name)
                            .join(format!("{name}_2k.log_structured_corrected.csv"))
                            .is_file()
                })
                .collect()
        })
        .unwrap_or_default();
    systems.sort();
    systems
}

pub struct SystemScore {
    pub system: String,
    pub lines: usize,
    pub ga: f64,
    pub pa: f64,
    pub predicted_groups: usize,
    pub true_groups: usize,
    pub content_mismatches: usize,
    pub mined: Vec<MinedLine>,
    pub truth: Truth,
}

/// Raw lines and ground truth of one system, read once and scored under many configurations.
pub struct SystemData {
    pub system: String,
    pub raw: String,
    pub format: Option<LogFormat>,
    pub truth: Truth,
}

impl SystemData {
    pub fn read(dir: &Path, system: &str) -> SystemData {
        let raw =
            std::fs::read_to_string(dir.join(system).join(format!("{system}_2k.log"))).unwrap();
        let format = SYSTEMS
            .iter()
            .find(|(name, _)| *name == system)
            .map(|(_, spec)| LogFormat::parse(spec).unwrap());
        SystemData {
            system: system.to_string(),
            raw,
            format,
            truth: read_truth(dir, system),
        }
    }

    pub fn score(&self, config: &MinerConfig, headers: Headers) -> SystemScore {
        let lines: Vec<&str> = self.raw.lines().collect();
        let truth = &self.truth;
        assert_eq!(
            lines.len(),
            truth.templates.len(),
            "{}: line count",
            self.system
        );
        let content_mismatches = match &self.format {
            Some(format) => lines
                .iter()
                .zip(&truth.contents)
                .filter(|(line, content)| {
                    format.content(line).map(normalize) != Some(normalize(content))
                })
                .count(),
            None => 0,
        };
        let mined = match (headers, &self.format) {
            (Headers::Spec, Some(format)) => {
                mine_lines(lines.iter().copied(), config, Some(format))
            }
            (Headers::Spec, None) => {
                mine_lines(truth.contents.iter().map(String::as_str), config, None)
            }
            (Headers::Detect, _) => mine_lines(lines.iter().copied(), config, None),
        };
        let predicted: Vec<&str> = mined.iter().map(|m| m.template_id.as_str()).collect();
        let true_groups: Vec<&str> = truth.templates.iter().map(String::as_str).collect();
        let ga = grouping_accuracy(&predicted, &true_groups);
        let pa = mined
            .iter()
            .zip(&truth.templates)
            .filter(|(mined, truth)| normalize(&mined.template) == normalize(truth))
            .count() as f64
            / lines.len() as f64;
        let distinct = |groups: &[&str]| {
            let mut groups = groups.to_vec();
            groups.sort_unstable();
            groups.dedup();
            groups.len()
        };
        SystemScore {
            system: self.system.clone(),
            lines: lines.len(),
            ga,
            pa,
            predicted_groups: distinct(&predicted),
            true_groups: distinct(&true_groups),
            content_mismatches,
            mined,
            truth: Truth {
                contents: truth.contents.clone(),
                templates: truth.templates.clone(),
            },
        }
    }
}

/// Every system of `dir` with one configuration.
pub fn score_all(dir: &Path, config: &MinerConfig, headers: Headers) -> Vec<SystemScore> {
    systems(dir)
        .iter()
        .map(|system| SystemData::read(dir, system).score(config, headers))
        .collect()
}
