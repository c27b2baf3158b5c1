use infersight_pipeline::{DetectorName, RedactConfig, Redactor};
#[test]
fn perf() {
    let text = std::fs::read_to_string("/work/shared/data/loghub_2k/HDFS/HDFS_2k.log").unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for d in DetectorName::ALL {
        let r = Redactor::new(&RedactConfig {
            detectors: vec![d],
            ..Default::default()
        })
        .unwrap();
        let t = std::time::Instant::now();
        let mut n = 0usize;
        for l in &lines {
            n += r.redact(l).len();
        }
        println!(
            "{d}: {:.2} us/line ({n})",
            t.elapsed().as_secs_f64() * 1e6 / lines.len() as f64
        );
    }
    println!("{}", lines[0]);
}
#[test]
fn perf_all() {
    let r = Redactor::new(&RedactConfig::default()).unwrap();
    for f in [
        "/work/shared/data/vllm/vLLMBatchingMemoryGap/runs/_130__llama-2-13b___1__2000/server_out.log",
        "/work/shared/data/loghub_2k/HDFS/HDFS_2k.log",
        "/work/shared/data/loghub_2k/Zookeeper/Zookeeper_2k.log",
        "/work/shared/data/loghub_2k/BGL/BGL_2k.log",
    ] {
        let text = std::fs::read_to_string(f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let t = std::time::Instant::now();
        let mut n = 0usize;
        for _ in 0..5 {
            for l in &lines {
                n += r.redact(l).len();
            }
        }
        let el = t.elapsed();
        println!(
            "{f}: {:.2} us/line, {:.1} MB/s ({n})",
            el.as_secs_f64() * 1e6 / (5 * lines.len()) as f64,
            (5 * text.len()) as f64 / el.as_secs_f64() / 1e6
        );
    }
}
#[test]
fn perf_card_regex() {
    let text = std::fs::read_to_string("/work/shared/data/loghub_2k/HDFS/HDFS_2k.log").unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for pat in [
        r"[2-6][0-9]{12,18}",
        r"[2-6][0-9]{12,18}|[2-6][0-9]{3}(?:[ \-][0-9]{4}){2}[ \-][0-9]{1,4}(?:[ \-][0-9]{1,3})?|3[0-9]{3}[ \-][0-9]{6}[ \-][0-9]{4,5}",
        r"[0-9]{13}",
        r"[1-9][0-9]{16}[0-9Xx]",
    ] {
        let re = regex::Regex::new(pat).unwrap();
        let t = std::time::Instant::now();
        let mut n = 0;
        for l in &lines {
            let mut p = 0;
            while let Some(m) = re.find_at(l, p) {
                n += 1;
                p = m.start() + 1;
            }
        }
        let t1 = t.elapsed();
        let set = regex::RegexSet::new([pat]).unwrap();
        let t = std::time::Instant::now();
        let mut k = 0;
        for l in &lines {
            if set.is_match(l) {
                k += 1;
            }
        }
        println!(
            "{pat:.30}: find_at loop {:.2} us/line ({n} finds), set {:.2} us/line ({k})",
            t1.as_secs_f64() * 1e6 / lines.len() as f64,
            t.elapsed().as_secs_f64() * 1e6 / lines.len() as f64
        );
    }
}
