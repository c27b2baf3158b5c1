//! Benchmark of root-cause localization on the public tables in `../shared/data/rca`: Squeeze B0
//! (additive) and RiskLoc's RS cases (derived ratio). Prints F1, precision and recall per setting
//! (TP/FP/FN summed over the setting's cases, elements compared as sets of `attr=v` pairs) and
//! the time per case (parse excluded and included). Used by `bench/localize.sh`.
//!
//! Usage: `cargo run --release -p infersight-analytics --example localize_bench [DATA_DIR] [--repeat N]`

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use infersight_analytics::localize::{
    Params, localize_additive, localize_derived, table::read_additive, table::read_derived,
};

type Element = BTreeSet<(String, String)>;

fn parse_set(text: &str) -> BTreeSet<Element> {
    text.split(';')
        .filter(|element| !element.trim().is_empty())
        .map(|element| {
            element
                .split('&')
                .filter_map(|pair| {
                    let (attr, value) = pair.split_once('=')?;
                    Some((attr.trim().to_string(), value.trim().to_string()))
                })
                .collect()
        })
        .collect()
}

#[derive(Default, Clone, Copy)]
struct Score {
    tp: usize,
    fp: usize,
    fn_: usize,
    cases: usize,
    localize: Duration,
    total: Duration,
}

impl Score {
    fn add(&mut self, truth: &BTreeSet<Element>, predicted: &BTreeSet<Element>) {
        let tp = truth.intersection(predicted).count();
        self.tp += tp;
        self.fp += predicted.len() - tp;
        self.fn_ += truth.len() - tp;
        self.cases += 1;
    }
    fn prf(&self) -> (f64, f64, f64) {
        let p = self.tp as f64 / (self.tp + self.fp).max(1) as f64;
        let r = self.tp as f64 / (self.tp + self.fn_).max(1) as f64;
        let f = if p + r > 0.0 {
            2.0 * p * r / (p + r)
        } else {
            0.0
        };
        (f, p, r)
    }
    fn ms_per_case(&self, d: Duration) -> f64 {
        d.as_secs_f64() * 1000.0 / self.cases.max(1) as f64
    }
}

fn read_csv_rows(path: &Path) -> Vec<Vec<String>> {
    let mut reader = csv::Reader::from_path(path).expect("readable csv");
    let header: Vec<String> = reader
        .headers()
        .expect("header")
        .iter()
        .map(String::from)
        .collect();
    let mut rows = vec![header];
    for record in reader.records() {
        rows.push(
            record
                .expect("csv record")
                .iter()
                .map(String::from)
                .collect(),
        );
    }
    rows
}

fn column(rows: &[Vec<String>], name: &str) -> usize {
    rows[0]
        .iter()
        .position(|c| c == name)
        .unwrap_or_else(|| panic!("column {name}"))
}

fn slurp(path: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    BufReader::new(File::open(path).expect("open table"))
        .read_to_end(&mut bytes)
        .expect("read");
    bytes
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut data = PathBuf::from(
        std::env::var("INFERSIGHT_DATA_DIR").unwrap_or_else(|_| "../shared/data".to_string()),
    );
    let mut repeat = 1_usize;
    while let Some(arg) = args.next() {
        if arg == "--repeat" {
            repeat = args.next().and_then(|n| n.parse().ok()).unwrap_or(1);
        } else {
            data = PathBuf::from(arg);
        }
    }
    let mut params = Params::default();
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<f64>().ok());
    if let Some(v) = env("LOCALIZE_TAU") {
        params.coarsen_tolerance = v;
    }
    if let Some(v) = env("LOCALIZE_MIN_EXPLAINED") {
        params.min_explained = v;
    }
    if let Some(v) = env("LOCALIZE_ALPHA") {
        params.alpha = v;
    }
    if let Some(v) = env("LOCALIZE_PRIOR") {
        params.ratio_prior_count = v;
    }
    let verbose = std::env::var("LOCALIZE_VERBOSE").is_ok();

    // Squeeze B0.
    let b0 = data.join("rca/squeeze_b0/B0");
    let mut settings: Vec<PathBuf> = std::fs::read_dir(&b0)
        .unwrap_or_else(|e| panic!("{}: {e}", b0.display()))
        .map(|entry| entry.expect("dir entry").path())
        .filter(|path| path.is_dir())
        .collect();
    settings.sort();
    println!("Squeeze B0 (additive)");
    println!(
        "{:<28} {:>6} {:>6} {:>6} {:>6} {:>10} {:>12}",
        "setting", "F1", "P", "R", "cases", "ms/case", "ms/case+csv"
    );
    let mut all = Score::default();
    let mut f1_sum = 0.0;
    for setting in &settings {
        let info = read_csv_rows(&setting.join("injection_info.csv"));
        let (set_col, ts_col) = (column(&info, "set"), column(&info, "timestamp"));
        let mut score = Score::default();
        for row in &info[1..] {
            let path = setting.join(format!("{}.csv", row[ts_col]));
            if !path.exists() {
                continue;
            }
            let bytes = slurp(&path);
            let start = Instant::now();
            let (table, measure) =
                read_additive(bytes.as_slice(), "real", "predict", None).expect("table");
            let parsed = Instant::now();
            let mut result = None;
            for _ in 0..repeat {
                result = Some(localize_additive(&table, &measure, &params).expect("localize"));
            }
            let result = result.expect("repeat >= 1");
            let done = Instant::now();
            score.localize += (done - parsed) / repeat as u32;
            score.total += (parsed - start) + (done - parsed) / repeat as u32;
            let predicted: BTreeSet<Element> = result
                .root_causes
                .iter()
                .map(|c| c.elements.iter().cloned().collect())
                .collect();
            let truth = parse_set(&row[set_col]);
            if verbose && truth != predicted {
                println!(
                    "  miss {} truth {} got {:?} fleet {}",
                    row[ts_col],
                    row[set_col],
                    result
                        .root_causes
                        .iter()
                        .map(|c| format!("{} ({:.0})", c.key(), c.score))
                        .collect::<Vec<_>>(),
                    result.fleet_wide
                );
            }
            score.add(&truth, &predicted);
        }
        let (f, p, r) = score.prf();
        f1_sum += f;
        let name = setting
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        println!(
            "{:<28} {:>6.3} {:>6.3} {:>6.3} {:>6} {:>10.2} {:>12.2}",
            name,
            f,
            p,
            r,
            score.cases,
            score.ms_per_case(score.localize),
            score.ms_per_case(score.total)
        );
        all.tp += score.tp;
        all.fp += score.fp;
        all.fn_ += score.fn_;
        all.cases += score.cases;
        all.localize += score.localize;
        all.total += score.total;
    }
    println!(
        "{:<28} {:>6.3} {:>6} {:>6} {:>6} {:>10.2} {:>12.2}",
        "average (of setting F1)",
        f1_sum / settings.len().max(1) as f64,
        "",
        "",
        all.cases,
        all.ms_per_case(all.localize),
        all.ms_per_case(all.total)
    );

    // RS.
    let rs = data.join("rca/riskloc_rs");
    let truth_rows = read_csv_rows(&rs.join("ground_truth.csv"));
    let (file_col, ts_col, set_col) = (
        column(&truth_rows, "file"),
        column(&truth_rows, "anomaly_timestamp"),
        column(&truth_rows, "root_cause_set"),
    );
    let mut score = Score::default();
    for row in &truth_rows[1..] {
        let path = rs.join("RS").join(&row[file_col]);
        if !path.exists() {
            continue;
        }
        let at: i64 = row[ts_col].parse().expect("timestamp");
        let bytes = slurp(&path);
        let start = Instant::now();
        let (table, measure) =
            read_derived(bytes.as_slice(), "min", at, "value", "cnt", 4, None).expect("table");
        let parsed = Instant::now();
        let mut result = None;
        for _ in 0..repeat {
            result = Some(localize_derived(&table, &measure, &params).expect("localize"));
        }
        let result = result.expect("repeat >= 1");
        let done = Instant::now();
        score.localize += (done - parsed) / repeat as u32;
        score.total += (parsed - start) + (done - parsed) / repeat as u32;
        let predicted: BTreeSet<Element> = result
            .root_causes
            .iter()
            .map(|c| c.elements.iter().cloned().collect())
            .collect();
        let truth = parse_set(&row[set_col]);
        if verbose && truth != predicted {
            println!(
                "  miss {} truth {} got {:?} fleet {} noise {:?}",
                row[file_col],
                row[set_col],
                result
                    .root_causes
                    .iter()
                    .map(|c| format!("{} ({:.0}, {:.2})", c.key(), c.score, c.explained_fraction))
                    .collect::<Vec<_>>(),
                result.fleet_wide,
                result.noise
            );
        }
        score.add(&truth, &predicted);
    }
    let (f, p, r) = score.prf();
    println!("\nRS (derived ratio value/cnt, forecast = mean of 4 preceding minutes)");
    println!(
        "{:<28} {:>6.3} {:>6.3} {:>6.3} {:>6} {:>10.2} {:>12.2}",
        "RS",
        f,
        p,
        r,
        score.cases,
        score.ms_per_case(score.localize),
        score.ms_per_case(score.total)
    );
}
