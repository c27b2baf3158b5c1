//! Log templates across orgs (issue 22, tenants): the template miner is one for the whole
//! process, so a template can gather lines of several orgs. A template row is stored for the
//! org whose lines touched it; one that only another org's lines made (here: split off at a
//! compaction that an acme line happened to trigger) must not be stored for acme.

use std::sync::Arc;

use infersight_model::append::Durability;
use infersight_model::telemetry::Counters;
use infersight_model::{LogRecord, Table, TableBatch};
use infersight_pipeline::{BatchWriter, Pipeline, TemplateConfig, TemplateStage};
use infersight_query::{OrgScope, QueryEngine};
use infersight_store::{StorageBackend, Store, StoreOptions};

use super::orgs::{ACME, GLOBEX};

fn logs(bodies: &[String], start: i64) -> Vec<TableBatch> {
    let records: Vec<LogRecord> = bodies
        .iter()
        .enumerate()
        .map(|(i, body)| LogRecord {
            ts: start + i as i64,
            body: Some(body.clone()),
            ..Default::default()
        })
        .collect();
    vec![TableBatch {
        table: Table::Logs,
        batch: LogRecord::to_batch(&records),
    }]
}

async fn templates(store: &Arc<dyn StorageBackend>, org: &str) -> Vec<String> {
    let engine = QueryEngine::new(store.clone()).scoped(OrgScope::org(org));
    let output = engine
        .sql("SELECT template FROM templates ORDER BY template")
        .await
        .unwrap();
    let value = output.to_json_value().unwrap();
    value["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["template"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_template_made_of_another_orgs_lines_is_not_stored_for_an_org() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(StoreOptions::new(dir.path().join("data"))).unwrap());
    let backend: Arc<dyn StorageBackend> = store.clone();
    let mut config = TemplateConfig::default();
    config.miner.compact_every_lines = 40;
    let stage = TemplateStage::new(&config).unwrap();
    let mut writer = BatchWriter::new(
        Pipeline::new(vec![Box::new(stage)]),
        store.clone(),
        Arc::new(Counters::new()),
    );
    // globex: one over-general template of two words, 39 lines (one short of a compaction)
    let globex: Vec<String> = (0..39)
        .map(|n| {
            let word = ["opened", "closed"][n % 2];
            format!("globex pool worker connection {word} on node {n}")
        })
        .collect();
    writer
        .write(GLOBEX, logs(&globex, 1_000), Durability::Logged)
        .unwrap();
    // acme's one line is the 40th: the compaction it triggers splits globex's template
    let acme = vec!["cache warmed for tenant acme in 3 ms".to_string()];
    writer
        .write(ACME, logs(&acme, 2_000), Durability::Logged)
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let theirs = templates(&backend, GLOBEX).await;
        assert!(theirs.iter().any(|t| t.contains("globex")), "{theirs:?}");
        let ours = templates(&backend, ACME).await;
        assert!(!ours.is_empty(), "acme's own template is listed");
        assert!(
            ours.iter().all(|t| !t.contains("globex")),
            "acme lists globex's templates: {ours:?}"
        );
    });
}
