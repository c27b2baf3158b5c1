//! Tests of the `template` stage: the masking classifier, the miner (grouping, generalization,
//! compaction), stable ids through the persisted store, format specs and header detection, and
//! the stage over canonical batches.

use infersight_model::{LogRecord, Table, TableBatch, TemplateRecord};

use super::*;
use crate::stage::Stage;

fn masked(token: &str) -> String {
    let mut out = String::new();
    mask_token(token, &mut out);
    out
}

#[test]
fn typed_masking_keeps_keys_and_brackets() {
    assert_eq!(masked("42"), "<*>");
    assert_eq!(masked("-3.5"), "<*>");
    assert_eq!(masked("uid=0"), "uid=<*>");
    assert_eq!(masked("[173.234.31.186]"), "[<*>]");
    assert_eq!(masked("10.0.0.1:8080"), "<*>");
    assert_eq!(masked("0x1f"), "<*>");
    assert_eq!(masked("123e4567-e89b-12d3-a456-426614174000"), "<*>");
    assert_eq!(masked("/var/log/messages"), "<*>");
    assert_eq!(masked("blk_-6952295868487656571"), "<*>");
    assert_eq!(masked("12ms"), "<*>");
    assert_eq!(masked("64KB,"), "<*>,");
    assert_eq!(masked("04:01:23"), "<*>");
    assert_eq!(masked("ret:false"), "ret:<*>");
    assert_eq!(masked("instruction......0"), "instruction......<*>");
    // Identifiers that merely contain a digit stay constant.
    assert_eq!(masked("ssh2"), "ssh2");
    assert_eq!(masked("jk2_init()"), "jk2_init()");
    assert_eq!(masked("plain"), "plain");
    assert_eq!(param_type("blk_1"), ParamType::BlockId);
    assert_eq!(param_type("1.5"), ParamType::Float);
    assert_eq!(param_type("10.0.0.1"), ParamType::Ip);
    assert_eq!(param_type("root"), ParamType::Word);
}

fn mine(lines: &[&str]) -> Vec<MinedLine> {
    mine_lines(lines.iter().copied(), &MinerConfig::default(), None)
}

#[test]
fn lines_of_one_event_share_a_template_and_others_do_not() {
    let mined = mine(&[
        "Received block blk_1 of size 67108864 from /10.0.0.1",
        "Received block blk_-2 of size 512 from /10.0.0.2",
        "Deleting block blk_3 file /data/blk_3",
        "Received block blk_4 of size 7 from /10.0.0.3",
    ]);
    assert_eq!(mined[0].template, "Received block <*> of size <*> from <*>");
    assert_eq!(mined[0].template_id, mined[1].template_id);
    assert_eq!(mined[0].template_id, mined[3].template_id);
    assert_ne!(mined[0].template_id, mined[2].template_id);
    assert_eq!(mined[2].template, "Deleting block <*> file <*>");
    assert_eq!(
        mined.iter().map(|m| m.line_no).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
}

#[test]
fn differing_words_generalize_with_their_key_kept() {
    let mined = mine(&[
        "session opened for user root by uid=0 tty=pts1",
        "session opened for user guest by uid=500 tty=console",
    ]);
    assert_eq!(mined[0].template_id, mined[1].template_id);
    assert_eq!(
        mined[1].template,
        "session opened for user <*> by uid=<*> tty=<*>"
    );
}

#[test]
fn dates_are_one_variable_and_glued_variables_collapse() {
    let mined = mine(&[
        "connection from 1.2.3.4 at Sun Jul 10 04:01:23 2005",
        "connection from 5.6.7.8 at Mon Jul 11 14:01:23 2005",
    ]);
    assert_eq!(mined[0].template, "connection from <*> at <*>");
    assert_eq!(mined[0].template_id, mined[1].template_id);
}

#[test]
fn template_ids_survive_generalization_and_restart() {
    let directory = tempfile::tempdir().unwrap();
    let config = MinerConfig::default();
    let first_id;
    {
        let mut store = TemplateStore::open(directory.path(), config.clone()).unwrap();
        let a = store.mine("worker w1 started in 5 ms", Some(10));
        first_id = store.miner().template_id(a).to_string();
        let b = store.mine("worker w2 started in 7 ms", Some(20));
        assert_eq!(store.miner().template_id(b), first_id);
        assert_eq!(
            store.miner().template_text(b),
            "worker <*> started in <*> ms"
        );
        store.save().unwrap();
    }
    let mut reopened = TemplateStore::open(directory.path(), config).unwrap();
    let listed = reopened.list();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].template_id, first_id);
    assert_eq!(listed[0].count, 2);
    assert_eq!(listed[0].first_seen, Some(10));
    assert_eq!(listed[0].last_seen, Some(20));
    assert_eq!(listed[0].param_types, vec![ParamType::Id, ParamType::Int]);
    let again = reopened.mine("worker w9 started in 1 ms", None);
    assert_eq!(reopened.miner().template_id(again), first_id);
    assert_eq!(reopened.list()[0].count, 3);
}

#[test]
fn a_corrupt_store_is_an_error_not_a_reset() {
    let directory = tempfile::tempdir().unwrap();
    std::fs::write(directory.path().join(TemplateStore::FILE_NAME), "{not json").unwrap();
    let error = TemplateStore::open(directory.path(), MinerConfig::default()).unwrap_err();
    assert!(error.to_string().contains("corrupt store"), "{error}");
}

#[test]
fn rates_come_from_first_and_last_sighting() {
    let info = TemplateInfo {
        template_id: "x".into(),
        template: "t".into(),
        count: 10,
        first_seen: Some(0),
        last_seen: Some(5_000_000_000),
        param_types: vec![],
        aliases: vec![],
        split_from: None,
    };
    assert_eq!(info.rate_per_second(), Some(2.0));
}

#[test]
fn format_specs_split_lines_like_logparser() {
    let format =
        LogFormat::parse(r"<Month> <Date> <Time> <Level> <Component>(\[<PID>\])?: <Content>")
            .unwrap();
    let split = format
        .split("Jun 14 15:16:02 combo sshd(pam_unix)[19937]: check pass; user unknown")
        .unwrap();
    assert_eq!(split.content, "check pass; user unknown");
    assert_eq!(split.field("Component"), Some("sshd(pam_unix)"));
    assert_eq!(split.field("PID"), Some("19937"));
    let split = format
        .split("Jun 15 04:06:18 combo su: session opened")
        .unwrap();
    assert_eq!(split.content, "session opened");
    assert!(LogFormat::parse("<Date> <Time>").is_err());
    assert!(LogFormat::parse("<Date> <1x> <Content>").is_err());
    assert!(LogFormat::parse("<Date> <Content").is_err());
}

#[test]
fn headers_are_detected_without_a_spec() {
    let header =
        detect_header("INFO 02-21 20:06:59 metrics.py:360] Avg prompt throughput: 50.0 tokens/s");
    assert_eq!(header.level, Some("INFO"), "{header:?}");
    assert_eq!(header.component, Some("metrics.py:360"), "{header:?}");
    assert_eq!(header.content, "Avg prompt throughput: 50.0 tokens/s");
    let header = detect_header(
        "081109 203615 148 INFO dfs.DataNode$PacketResponder: PacketResponder 1 terminating",
    );
    assert_eq!(header.level, Some("INFO"));
    assert_eq!(header.component, Some("dfs.DataNode$PacketResponder"));
    assert_eq!(header.content, "PacketResponder 1 terminating");
    let header = detect_header("[Sun Dec 04 04:47:44 2005] [notice] workerEnv.init() ok");
    assert_eq!(header.timestamp, Some("[Sun Dec 04 04:47:44 2005]"));
    assert_eq!(header.level, Some("notice"));
    assert_eq!(header.content, "workerEnv.init() ok");
    let header = detect_header("just a message: with a colon");
    assert_eq!(header.content, "just a message: with a colon");
    assert_eq!(header.level, None);
}

/// Header shapes of common runtimes, detected with no spec (invented lines in each shape).
#[test]
fn common_header_shapes_are_detected_without_a_spec() {
    fn content(line: &str) -> &str {
        detect_header(line).content
    }
    // syslog: a host between the timestamp and `process[pid]:`.
    assert_eq!(
        content("Mar 3 10:01:02 gw-7 dhcpd[881]: DHCPACK on 10.0.0.9 via eth0"),
        "DHCPACK on 10.0.0.9 via eth0"
    );
    assert_eq!(
        content("Mar 3 10:01:02 build kernel: usb 1-1: reset"),
        "usb 1-1: reset"
    );
    // An alert label, epoch and date, a host between timestamp parts, then syslog.
    assert_eq!(
        content("- 1201010101 2008.01.22 nd17 Jan 22 10:01:01 nd17/nd17 crond[31]: job done"),
        "job done"
    );
    // Facility words before the level; a number after the level belongs to the message.
    assert_eq!(
        content(
            "- 1117838570 2005.06.03 R1-M0 2005-06-03-15.42.50.675872 R1-M0 APP CORE INFO 12 retries"
        ),
        "12 retries"
    );
    // logcat: pids and a one-letter level after the timestamp.
    let header = detect_header("04-02 10:00:01.123  17  42 W AudioFlinger: buffer underrun");
    assert_eq!(header.level, Some("W"));
    assert_eq!(header.content, "buffer underrun");
    // A bracketed thread, then the logger; a nested bracket; a `-` separator.
    let header = detect_header(
        "2024-01-02 03:04:05,678 WARN [pool-1 thread-2] com.example.Cache: evicted 3",
    );
    assert_eq!(header.component, Some("com.example.Cache"));
    assert_eq!(header.content, "evicted 3");
    assert_eq!(
        content("2024-01-02 03:04:05,678 - INFO  [Peer[id=1]/0.0.0.0:2181:Election@77] - vote 4"),
        "vote 4"
    );
    // A pipe-delimited header: time|component|pid|message.
    let header = detect_header("20240102-03:04:05:678|StepCounter|4242|onChange 12|34");
    assert_eq!(header.component, Some("StepCounter"));
    assert_eq!(header.content, "onChange 12|34");
    // Plain messages stay whole.
    assert_eq!(content("user alice logged in"), "user alice logged in");
}

#[test]
fn the_stage_fills_template_ids_and_typed_params_and_emits_templates() {
    let records: Vec<LogRecord> = [
        "Received block blk_1 of size 10 from /10.0.0.1",
        "Received block blk_2 of size 20 from /10.0.0.2",
    ]
    .iter()
    .enumerate()
    .map(|(i, body)| LogRecord {
        ts: 1_000 + i as i64,
        body: Some(body.to_string()),
        ..Default::default()
    })
    .chain(std::iter::once(LogRecord {
        ts: 5,
        ..Default::default()
    }))
    .collect();
    let mut stage = TemplateStage::new(&TemplateConfig::default()).unwrap();
    let mut out = Vec::new();
    stage
        .process(
            TableBatch {
                table: Table::Logs,
                batch: LogRecord::to_batch(&records),
            },
            &mut out,
        )
        .unwrap();
    assert_eq!(out.len(), 2);
    let rows = LogRecord::from_batch(&out[0].batch).unwrap();
    assert_eq!(rows[0].template_id, rows[1].template_id);
    assert!(rows[0].template_id.is_some());
    assert_eq!(rows[2].template_id, None, "a null body has no template");
    let params: serde_json::Value =
        serde_json::from_str(rows[1].params.as_deref().unwrap()).unwrap();
    assert_eq!(params[0]["value"], "blk_2");
    assert_eq!(params[0]["type"], "block_id");
    assert_eq!(params[1]["value"], "20");
    assert_eq!(params[1]["type"], "int");
    assert_eq!(out[1].table, Table::Templates);
    let templates = TemplateRecord::from_batch(&out[1].batch).unwrap();
    assert_eq!(templates.len(), 1);
    assert_eq!(templates[0].count, Some(2));
    assert_eq!(
        templates[0].template.as_deref(),
        Some("Received block <*> of size <*> from <*>")
    );
    assert_eq!(stage.stats()["rows_mined"], 2);
}

#[test]
fn the_stage_persists_its_store() {
    let directory = tempfile::tempdir().unwrap();
    let config = TemplateConfig {
        store_dir: Some(directory.path().to_path_buf()),
        ..TemplateConfig::default()
    };
    let batch = || TableBatch {
        table: Table::Logs,
        batch: LogRecord::to_batch(&[LogRecord {
            ts: 1,
            body: Some("cache flushed in 12 ms".into()),
            ..Default::default()
        }]),
    };
    let mut first = TemplateStage::new(&config).unwrap();
    let mut out = Vec::new();
    first.process(batch(), &mut out).unwrap();
    let id = LogRecord::from_batch(&out[0].batch).unwrap()[0]
        .template_id
        .clone();
    let mut second = TemplateStage::new(&config).unwrap();
    let mut out = Vec::new();
    second.process(batch(), &mut out).unwrap();
    assert_eq!(
        LogRecord::from_batch(&out[0].batch).unwrap()[0].template_id,
        id
    );
}

#[test]
fn invalid_miner_settings_are_reported() {
    let config = TemplateConfig {
        miner: MinerConfig {
            similarity_threshold: 0.0,
            max_children: 1,
            ..MinerConfig::default()
        },
        ..TemplateConfig::default()
    };
    let problems = config.validate();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].starts_with("miner.similarity_threshold"));
}

#[test]
fn compaction_merges_templates_split_across_leaves() {
    let mut miner = Miner::new(MinerConfig::default());
    // Leading words differ, so Drain's tree puts them in different leaves.
    let a = miner.add("alpha job <*> finished", None);
    let b = miner.add("beta job 7 finished", None);
    let c = miner.add("gamma job 9 finished", None);
    assert_ne!(miner.resolve(a), miner.resolve(b));
    let _ = c;
    // A template that covers the others appears (e.g. restored or generalized).
    let general = miner.add("<*> job <*> finished", None);
    assert!(miner.compact().merged >= 1);
    assert_eq!(miner.resolve(b), miner.resolve(general));
}

/// Everything the miner tells about `lines` (automatic header detection, as `infersight templates
/// mine` without `--log-format`): per line its final template id and text and its parameters, then
/// the listed templates with counts, parameter types and aliases. One text, so a golden file can
/// hold it and a diff shows what moved.
fn describe_mining(lines: &[&str]) -> String {
    use std::fmt::Write as _;
    // The `mine_lines` path: every line mined, then one compaction, then final templates.
    let mined = mine_lines(lines.iter().copied(), &MinerConfig::default(), None);
    // The same steps by hand, keeping each line's cluster to ask for its parameters.
    let mut store = TemplateStore::new(MinerConfig::default());
    let contents: Vec<&str> = lines.iter().map(|line| line_content(line, None)).collect();
    let clusters: Vec<ClusterRef> = contents
        .iter()
        .map(|content| store.mine(content, None))
        .collect();
    store.miner_mut().compact();
    let mut text = String::new();
    for ((mined, &cluster), content) in mined.iter().zip(&clusters).zip(&contents) {
        assert_eq!(mined.template_id, store.miner().template_id(cluster));
        assert_eq!(mined.template, store.miner().template_text(cluster));
        let params: Vec<String> = store
            .miner()
            .params(cluster, content)
            .into_iter()
            .map(|(value, kind)| format!("{value}:{}", kind.as_str()))
            .collect();
        writeln!(
            text,
            "{}\t{}\t{}\t{}",
            mined.line_no,
            mined.template_id,
            mined.template,
            params.join(" ")
        )
        .unwrap();
    }
    for info in store.list() {
        let kinds: Vec<&str> = info.param_types.iter().map(|kind| kind.as_str()).collect();
        writeln!(
            text,
            "template\t{}\t{}\t{}\t{}\t{}",
            info.template_id,
            info.count,
            info.template,
            kinds.join(","),
            info.aliases.join(",")
        )
        .unwrap();
    }
    text
}

/// Golden test of the miner's output: lines in the style of the ten Loghub systems plus an engine
/// log (`testdata/golden_sample.log`) must give exactly `testdata/golden_sample.expected`. Any
/// change of masking, routing, generalization, compaction, ids or rendering shows up here; when a
/// change is intended, rerun with `INFERSIGHT_BLESS=1` and review the diff of the expected file.
#[test]
fn mining_output_matches_the_golden_file() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/stages/template/testdata");
    let input = std::fs::read_to_string(dir.join("golden_sample.log")).unwrap();
    let lines: Vec<&str> = input.lines().collect();
    let actual = describe_mining(&lines);
    let expected_path = dir.join("golden_sample.expected");
    if std::env::var_os("INFERSIGHT_BLESS").is_some() {
        std::fs::write(&expected_path, &actual).unwrap();
    }
    let expected = std::fs::read_to_string(&expected_path).unwrap();
    for (number, (actual, expected)) in actual.lines().zip(expected.lines()).enumerate() {
        assert_eq!(actual, expected, "golden line {}", number + 1);
    }
    assert_eq!(actual.lines().count(), expected.lines().count());
}

/// FNV-1a digest of the template id and text of every line of the ten Loghub-2k systems, mined
/// with the system's format spec and with automatic header detection. The accuracy test only
/// bounds GA/PA; this pins the exact output (speed work must not change it). Skipped when the
/// shared data is absent; when a change is intended, put the printed digest here.
/// Last change: generalization to unseen systems (issue 19: host names, `host:port`, MAC and
/// IPv6 addresses, Windows paths and `key=value` values masked whole; variable phrases folded;
/// parameter-like words neither split nor tree keys; header detection of syslog hosts, logcat
/// levels, facility words, thread + logger, nested brackets and pipe-delimited headers); before
/// it `c5d6fff935c6e366` (template splitting).
const LOGHUB_2K_OUTPUT_DIGEST: &str = "717d8ed056ad87ac";

#[test]
fn loghub_2k_output_is_unchanged() {
    let base = std::env::var_os("INFERSIGHT_DATA_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data")
        });
    let dir = base.join("loghub_2k");
    if !dir.is_dir() {
        eprintln!("skipping: {} is absent", dir.display());
        return;
    }
    let mut digest: u64 = 0xcbf2_9ce4_8422_2325;
    for &(system, spec) in super::format::LOGHUB_FORMATS {
        let raw =
            std::fs::read_to_string(dir.join(system).join(format!("{system}_2k.log"))).unwrap();
        let format = LogFormat::parse(spec).unwrap();
        for format in [Some(&format), None] {
            let mined = mine_lines(raw.lines(), &MinerConfig::default(), format);
            for line in mined {
                for part in [
                    line.template_id.as_str(),
                    "\t",
                    line.template.as_str(),
                    "\n",
                ] {
                    for &byte in part.as_bytes() {
                        digest ^= u64::from(byte);
                        digest = digest.wrapping_mul(0x0000_0100_0000_01b3);
                    }
                }
            }
        }
    }
    assert_eq!(format!("{digest:016x}"), LOGHUB_2K_OUTPUT_DIGEST);
}

#[test]
fn the_interner_keeps_symbols_through_table_growth() {
    let mut miner = Miner::new(MinerConfig::default());
    let texts: Vec<String> = (0..5000)
        .map(|n| "k".repeat(n % 37) + &n.to_string())
        .collect();
    let first = miner.symbols.len() as u32;
    let symbols: Vec<u32> = texts
        .iter()
        .map(|text| miner.symbols.intern(text))
        .collect();
    // Numbered in order of first sight, whatever the hash table did meanwhile.
    assert_eq!(symbols, (first..first + 5000).collect::<Vec<_>>());
    for (text, &symbol) in texts.iter().zip(&symbols) {
        assert_eq!(miner.symbols.intern(text), symbol);
        assert_eq!(miner.symbols.text(symbol), text);
    }
    assert_eq!(miner.symbols.intern(WILDCARD), 0);
    assert_eq!(miner.symbols.intern(""), first + 5000);
}

/// The hand-written fast paths against their plain definitions.
mod fast_paths {
    use proptest::prelude::*;
    use proptest::test_runner::{Config as ProptestConfig, RngSeed};

    use super::super::mask::{needs_mask_shaped, shape_of};
    use super::super::miner::{ShortKey, same_bytes};

    fn config() -> ProptestConfig {
        ProptestConfig {
            cases: 512,
            rng_seed: RngSeed::Fixed(0x7e3a_11a7),
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    /// A token and a copy with at most one byte changed (equal in about half of the cases).
    fn token_pair(max_length: usize) -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
        (
            proptest::collection::vec(any::<u8>(), 0..=max_length),
            any::<usize>(),
            any::<u8>(),
            any::<bool>(),
        )
            .prop_map(|(token, at, byte, change)| {
                let mut other = token.clone();
                if change && !other.is_empty() {
                    let at = at % other.len();
                    other[at] = byte;
                }
                (token, other)
            })
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn short_keys_are_equal_exactly_for_equal_tokens(
            (a, b) in token_pair(16),
            cut in 0usize..=16,
        ) {
            prop_assert_eq!(ShortKey::of(&a) == ShortKey::of(&b), a == b);
            let shorter = &b[..cut.min(b.len())];
            prop_assert_eq!(ShortKey::of(&a) == ShortKey::of(shorter), a == shorter);
            prop_assert!(ShortKey::of(&[0u8; 17]).is_none());
        }

        #[test]
        fn same_bytes_is_slice_equality((a, b) in token_pair(40), cut in 0usize..=40) {
            prop_assert_eq!(same_bytes(&a, &b), a == b);
            let shorter = &b[..cut.min(b.len())];
            prop_assert_eq!(same_bytes(&a, shorter), a == shorter);
        }

        #[test]
        fn the_mask_pre_check_follows_its_definition(token in "[tTfFnNrRuUeEaAlLsS0-9/=x ]{0,12}") {
            let bytes = token.as_bytes();
            let defined = bytes.first() == Some(&b'/')
                || bytes.iter().any(u8::is_ascii_digit)
                || bytes.windows(4).any(|window| {
                    window.eq_ignore_ascii_case(b"true")
                        || window.eq_ignore_ascii_case(b"fals")
                        || window.eq_ignore_ascii_case(b"null")
                });
            prop_assert_eq!(needs_mask_shaped(bytes, shape_of(bytes)), defined);
        }
    }
}

/// `count` lines of an event whose fifth word is one of `words` (in turn) and whose last token is
/// a number: Drain's threshold puts them all in one cluster, `… <*> …` over the words.
fn event_lines(words: &[&str], count: usize) -> Vec<String> {
    (0..count)
        .map(|n| {
            format!(
                "pool main worker connection {} on node {n}",
                words[n % words.len()]
            )
        })
        .collect()
}

fn mine_strings(lines: &[String]) -> Vec<MinedLine> {
    mine_lines(
        lines.iter().map(String::as_str),
        &MinerConfig::default(),
        None,
    )
}

#[test]
fn an_over_general_template_is_split_per_word() {
    let lines = event_lines(&["opened", "closed"], 40);
    let mined = mine_strings(&lines);
    // Every line, the early ones too, reports the template of its word.
    for (line, mined) in lines.iter().zip(&mined) {
        let word = if line.contains("opened") {
            "opened"
        } else {
            "closed"
        };
        assert_eq!(
            mined.template,
            format!("pool main worker connection {word} on node <*>")
        );
    }
    assert_ne!(mined[0].template_id, mined[1].template_id);
    assert_eq!(mined[0].template_id, mined[2].template_id);
    // Without splitting, one over-general template.
    let config = MinerConfig {
        split_max_values: 0,
        ..MinerConfig::default()
    };
    let unsplit = mine_lines(lines.iter().map(String::as_str), &config, None);
    assert_eq!(
        unsplit[0].template,
        "pool main worker connection <*> on node <*>"
    );
    assert_eq!(unsplit[0].template_id, unsplit[1].template_id);
}

#[test]
fn variables_open_sets_rare_words_keys_and_units_are_not_split() {
    let one_template = |lines: &[String], why: &str| {
        let mined = mine_strings(lines);
        assert!(
            mined.iter().all(|m| m.template_id == mined[0].template_id),
            "{why}: {:?}",
            mined.iter().map(|m| &m.template).collect::<Vec<_>>()
        );
    };
    // A word first, then numbers: the position is a typed variable.
    let mut numeric = event_lines(&["opened"], 1);
    numeric.extend((0..40).map(|n| format!("pool main worker connection {n} on node {n}")));
    one_template(&numeric, "numbers");
    // More distinct words than tracked: an open set (user names, hosts).
    let words: Vec<String> = (0..12).map(|n| format!("user{}", "x".repeat(n))).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    one_template(&event_lines(&words, 60), "many words");
    // Two words, one of them rare (under the minimum share).
    let mut rare = event_lines(&["opened"], 60);
    rare.push("pool main worker connection closed on node 61".into());
    one_template(&rare, "a rare word");
    // Too few lines to trust the sample.
    one_template(&event_lines(&["opened", "closed"], 10), "few lines");
    // The value of a key is a named parameter.
    let keyed: Vec<String> = (0..40)
        .map(|n| {
            let name = ["alpha", "beta"][n % 2];
            format!("pool main worker connection name={name} on node {n}")
        })
        .collect();
    one_template(&keyed, "key=value");
    // A unit written apart from its number belongs to the quantity.
    let units: Vec<String> = (0..40)
        .map(|n| {
            format!(
                "stored block {n} in memory size {n}.5 {}",
                ["B", "KB"][n % 2]
            )
        })
        .collect();
    one_template(&units, "units");
}

#[test]
fn split_templates_keep_their_ids_through_a_restart_and_later_lines_follow_them() {
    let directory = tempfile::tempdir().unwrap();
    let config = MinerConfig::default();
    let lines = event_lines(&["opened", "closed"], 40);
    let (parent_id, opened_id, closed_id);
    {
        let mut store = TemplateStore::open(directory.path(), config.clone()).unwrap();
        let first = store.mine(&lines[0], Some(1));
        for line in &lines[1..] {
            store.mine(line, Some(2));
        }
        parent_id = store.miner().template_id(first).to_string();
        let compaction = store.miner_mut().compact();
        assert_eq!(compaction.split.len(), 2, "{compaction:?}");
        // The over-general template keeps its id (rows already stored carry it).
        assert_eq!(store.miner().template_id(first), parent_id);
        assert_eq!(
            store.miner().template_text(first),
            "pool main worker connection <*> on node <*>"
        );
        let opened = store.mine("pool main worker connection opened on node 99", Some(3));
        let closed = store.mine("pool main worker connection closed on node 98", Some(4));
        opened_id = store.miner().template_id(opened).to_string();
        closed_id = store.miner().template_id(closed).to_string();
        assert_ne!(opened_id, parent_id);
        assert_ne!(closed_id, parent_id);
        assert_ne!(opened_id, closed_id);
        store.save().unwrap();
    }
    let text = std::fs::read_to_string(directory.path().join(TemplateStore::FILE_NAME)).unwrap();
    assert!(text.contains("\"split_from\""), "{text}");
    let mut reopened = TemplateStore::open(directory.path(), config).unwrap();
    let listed = reopened.list();
    let by_id = |id: &str| listed.iter().find(|t| t.template_id == id).unwrap().clone();
    assert_eq!(by_id(&opened_id).split_from.as_deref(), Some(&*parent_id));
    assert_eq!(by_id(&closed_id).split_from.as_deref(), Some(&*parent_id));
    assert_eq!(by_id(&parent_id).split_from, None);
    assert_eq!(
        by_id(&opened_id).count + by_id(&closed_id).count + by_id(&parent_id).count,
        42
    );
    // After the restart, lines still go to the split templates, a new word to the parent.
    let opened = reopened.mine("pool main worker connection opened on node 7", None);
    assert_eq!(reopened.miner().template_id(opened), opened_id);
    let reset = reopened.mine("pool main worker connection reset on node 7", None);
    assert_eq!(reopened.miner().template_id(reset), parent_id);
    // Compaction (now and after the restart) does not merge the children back.
    let compaction = reopened.miner_mut().compact();
    assert_eq!(compaction.merged, 0, "{compaction:?}");
    assert_eq!(reopened.miner().live_clusters(), 3);
    let opened = reopened.mine("pool main worker connection opened on node 8", None);
    assert_eq!(reopened.miner().template_id(opened), opened_id);
}

#[test]
fn compaction_routes_covered_templates_to_the_split_child() {
    let mut miner = Miner::new(MinerConfig::default());
    // The leading token is a number: the template starts with `<*>` (tree key `<*>`).
    for n in 0..40 {
        let word = ["opened", "closed"][n % 2];
        miner.add(
            &format!("{n} main worker connection {word} on node {n}"),
            None,
        );
    }
    let compaction = miner.compact();
    assert_eq!(compaction.split.len(), 2, "{compaction:?}");
    let (parent, opened) = compaction.split[0];
    assert_eq!(
        miner.template_text(opened),
        "<*> main worker connection opened on node <*>"
    );
    // A template in another leaf (a word leads) that both the parent and the child cover: the
    // compaction gives it to the child of its word, not to the over-general parent. (The unrelated
    // line makes `pool` a tree key, so the next line has a leaf of its own.)
    miner.add("pool alpha beta gamma delta epsilon zeta eta", None);
    let elsewhere = miner.add("pool main worker connection opened on node 6", None);
    assert_ne!(miner.resolve(elsewhere), opened);
    let compaction = miner.compact();
    assert_eq!(compaction.merged, 1, "{compaction:?}");
    assert_eq!(miner.resolve(elsewhere), opened);
    assert_ne!(miner.resolve(opened), parent);
}

#[test]
fn split_evidence_stays_bounded() {
    let mut miner = Miner::new(MinerConfig::default());
    // One position, ever more words: the sample is dropped once they overflow.
    for n in 0..200 {
        miner.add(
            &format!(
                "pool main worker connection word{} on node 1",
                "x".repeat(n % 50)
            ),
            None,
        );
    }
    assert_eq!(miner.live_clusters(), 1);
    assert!(miner.clusters[0].samples.is_empty());
    // Many positions generalizing: at most MAX_TRACKED_POSITIONS samples, each at most
    // MAX_SPLIT_VALUES words.
    let words = ["a", "b", "c"];
    for n in 0..30 {
        let line: Vec<String> = (0..24)
            .map(|position| format!("w{}{}", words[(n + position) % 3], "q".repeat(position)))
            .collect();
        miner.add(&format!("fixed prefix {}", line.join(" ")), None);
    }
    for cluster in &miner.clusters {
        assert!(cluster.samples.len() <= super::miner::MAX_TRACKED_POSITIONS);
        for sample in &cluster.samples {
            assert!(sample.values().len() <= MinerConfig::MAX_SPLIT_VALUES);
        }
    }
}

#[test]
fn stores_of_version_1_are_read_and_bad_split_references_are_corrupt() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join(TemplateStore::FILE_NAME);
    std::fs::write(
        &path,
        r#"{"version":1,"templates":[{"template_id":"00000000000000aa","template":"job <*> done",
            "count":3,"first_seen":null,"last_seen":null,"param_types":[null,"int",null],
            "merged_into":null}]}"#,
    )
    .unwrap();
    let store = TemplateStore::open(directory.path(), MinerConfig::default()).unwrap();
    assert_eq!(store.list()[0].template_id, "00000000000000aa");
    std::fs::write(
        &path,
        r#"{"version":2,"templates":[{"template_id":"00000000000000aa","template":"job done",
            "count":3,"first_seen":null,"last_seen":null,"param_types":[null,null],
            "merged_into":null,"split_from":{"template_id":"00000000000000bb","position":1}}]}"#,
    )
    .unwrap();
    let error = TemplateStore::open(directory.path(), MinerConfig::default()).unwrap_err();
    assert!(
        error.to_string().contains("unknown split parent"),
        "{error}"
    );
}

#[test]
fn the_stage_emits_split_templates_with_the_next_lines_they_hold() {
    let config = TemplateConfig {
        miner: MinerConfig {
            compact_every_lines: 40,
            ..MinerConfig::default()
        },
        ..TemplateConfig::default()
    };
    let records: Vec<LogRecord> = event_lines(&["opened", "closed"], 40)
        .into_iter()
        .enumerate()
        .map(|(n, body)| LogRecord {
            ts: n as i64,
            body: Some(body),
            ..Default::default()
        })
        .collect();
    let mut stage = TemplateStage::new(&config).unwrap();
    let mut out = Vec::new();
    stage
        .process(
            TableBatch {
                table: Table::Logs,
                batch: LogRecord::to_batch(&records),
            },
            &mut out,
        )
        .unwrap();
    assert_eq!(stage.stats()["templates_split"], 2);
    let texts = |batch: &TableBatch| -> Vec<String> {
        TemplateRecord::from_batch(&batch.batch)
            .unwrap()
            .into_iter()
            .filter_map(|t| t.template)
            .collect()
    };
    // the batch's lines touched the over-general template; the templates split off it are
    // not emitted with it (they may be made of other orgs' lines, issue 22) ...
    let first = texts(&out[1]);
    assert_eq!(first, ["pool main worker connection <*> on node <*>"]);
    // ... but with the next batch whose lines touch them
    let next = LogRecord {
        ts: 100,
        body: Some("pool main worker connection opened on node 77".into()),
        ..Default::default()
    };
    let mut out = Vec::new();
    stage
        .process(
            TableBatch {
                table: Table::Logs,
                batch: LogRecord::to_batch(&[next]),
            },
            &mut out,
        )
        .unwrap();
    assert_eq!(
        texts(&out[1]),
        ["pool main worker connection opened on node <*>"]
    );
}

#[test]
fn split_evidence_survives_a_restart() {
    let directory = tempfile::tempdir().unwrap();
    let config = MinerConfig::default();
    let lines = event_lines(&["opened", "closed"], 40);
    {
        let mut store = TemplateStore::open(directory.path(), config.clone()).unwrap();
        for line in &lines[..20] {
            store.mine(line, None);
        }
        store.save().unwrap();
    }
    // Half the evidence before the restart, half after: together enough to split.
    let mut store = TemplateStore::open(directory.path(), config).unwrap();
    for line in &lines[20..] {
        store.mine(line, None);
    }
    let compaction = store.miner_mut().compact();
    assert_eq!(compaction.split.len(), 2, "{compaction:?}");
    let counts: Vec<u64> = compaction
        .split
        .iter()
        .map(|&(_, child)| store.miner().clusters[child.0 as usize].count)
        .collect();
    assert_eq!(counts, vec![20, 20]);
}
