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
    assert!(miner.compact() >= 1);
    assert_eq!(miner.resolve(b), miner.resolve(general));
}
