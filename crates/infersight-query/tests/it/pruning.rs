//! `ts` filters reach the store as a time range and prune whole segments.

use infersight_model::Table;
use infersight_store::StorageBackend;

use crate::support::{
    EngineOf, HOUR_NS, MINUTE_NS, TestStore, base_ns, request, requests, rfc3339, scalar,
};

/// Three hourly segments holding 5, 6 and 7 rows, starting at 10:00, 11:00 and 12:00 UTC.
fn three_hours() -> std::sync::Arc<TestStore> {
    let store = TestStore::new();
    for (hour, rows) in [(0, 5), (1, 6), (2, 7)] {
        store.append_requests(&requests(base_ns() + hour * HOUR_NS, rows, "m"));
        store.flush().unwrap();
    }
    assert_eq!(store.segment_count(Table::Requests), 3);
    store
}

#[tokio::test]
async fn a_filter_on_the_third_hour_scans_one_segment() {
    let store = three_hours();
    let engine = store.engine();
    let third_hour = base_ns() + 2 * HOUR_NS;
    let sql = format!(
        "SELECT count(*) FROM requests WHERE ts >= '{}'",
        rfc3339(third_hour)
    );
    assert_eq!(scalar(&engine, &sql).await, "7");
    let stats = engine.last_scan_stats(Table::Requests).unwrap();
    assert_eq!(
        (stats.segments_scanned, stats.segments_pruned),
        (1, 2),
        "{stats:?}"
    );
    assert_eq!(stats.range.since_ns, Some(third_hour));
    assert_eq!(stats.range.until_ns, None);

    assert_eq!(scalar(&engine, "SELECT count(*) FROM requests").await, "18");
    let stats = engine.last_scan_stats(Table::Requests).unwrap();
    assert_eq!((stats.segments_scanned, stats.segments_pruned), (3, 0));
}

#[tokio::test]
async fn upper_bounds_between_and_equality_prune_too() {
    let store = three_hours();
    let engine = store.engine();
    let second_hour = base_ns() + HOUR_NS;

    let sql = format!(
        "SELECT count(*) FROM requests WHERE ts < '{}'",
        rfc3339(second_hour)
    );
    assert_eq!(scalar(&engine, &sql).await, "5");
    let stats = engine.last_scan_stats(Table::Requests).unwrap();
    assert_eq!((stats.segments_scanned, stats.segments_pruned), (1, 2));

    let sql = format!(
        "SELECT count(*) FROM requests WHERE ts BETWEEN '{}' AND '{}' AND model = 'm'",
        rfc3339(second_hour),
        rfc3339(second_hour + 2_000_000_000)
    );
    assert_eq!(scalar(&engine, &sql).await, "3");
    let stats = engine.last_scan_stats(Table::Requests).unwrap();
    assert_eq!((stats.segments_scanned, stats.segments_pruned), (1, 2));

    let sql = format!(
        "SELECT count(*) FROM requests WHERE ts = TIMESTAMP '{}'",
        rfc3339(second_hour + 1_000_000_000)
    );
    assert_eq!(scalar(&engine, &sql).await, "1");
    let stats = engine.last_scan_stats(Table::Requests).unwrap();
    assert_eq!((stats.segments_scanned, stats.segments_pruned), (1, 2));

    // Seconds since the epoch through a function of another unit, folded to a constant.
    let sql = format!(
        "SELECT count(*) FROM requests WHERE ts > to_timestamp_seconds({})",
        (base_ns() + HOUR_NS) / 1_000_000_000 + 2
    );
    assert_eq!(scalar(&engine, &sql).await, "10");
    let stats = engine.last_scan_stats(Table::Requests).unwrap();
    assert_eq!((stats.segments_scanned, stats.segments_pruned), (2, 1));

    // An OR cannot be turned into one range: everything is scanned, results stay right.
    let sql = format!(
        "SELECT count(*) FROM requests WHERE ts < '{}' OR model = 'none'",
        rfc3339(second_hour)
    );
    assert_eq!(scalar(&engine, &sql).await, "5");
    let stats = engine.last_scan_stats(Table::Requests).unwrap();
    assert_eq!((stats.segments_scanned, stats.segments_pruned), (3, 0));
}

#[tokio::test]
async fn now_minus_an_interval_is_folded_and_prunes() {
    let store = TestStore::new();
    let now = chrono::Utc::now().timestamp_nanos_opt().unwrap();
    // Rows 60 minutes or more apart always land in different hourly segments.
    for minutes_ago in [150, 90, 10] {
        store.append_requests(&[request(now - minutes_ago * MINUTE_NS, "m", 1.0, "{}")]);
        store.flush().unwrap();
    }
    assert_eq!(store.segment_count(Table::Requests), 3);
    let engine = store.engine();
    let sql = "SELECT count(*) FROM requests WHERE ts > now() - interval '1 hour'";
    assert_eq!(scalar(&engine, sql).await, "1");
    let stats = engine.last_scan_stats(Table::Requests).unwrap();
    assert_eq!(
        (stats.segments_scanned, stats.segments_pruned),
        (1, 2),
        "{stats:?}"
    );
}

#[tokio::test]
async fn the_plan_unions_pruned_segments_with_the_memtable_and_pushes_the_predicate() {
    let store = three_hours();
    store.append_requests(&requests(base_ns() + 3 * HOUR_NS, 2, "m"));
    let engine = store.engine();
    let sql = format!(
        "EXPLAIN SELECT model, e2e_ms FROM requests WHERE ts >= '{}' AND e2e_ms > 101",
        rfc3339(base_ns() + HOUR_NS)
    );
    let plan = engine
        .sql(&sql)
        .await
        .unwrap()
        .render(infersight_query::OutputFormat::Csv);
    assert!(plan.contains("UnionExec"), "{plan}");
    let parquet_line = plan
        .lines()
        .find(|line| line.contains("file_type=parquet"))
        .expect(&plan);
    // two of three segments, read with the filters as a row-group pruning predicate
    assert_eq!(
        parquet_line.matches(".parquet").count(),
        2,
        "{parquet_line}"
    );
    assert!(
        parquet_line.contains("pruning_predicate="),
        "{parquet_line}"
    );
    assert!(parquet_line.contains("ts_max@"), "{parquet_line}");
    assert!(
        parquet_line.contains("projection=[ts, model, e2e_ms]"),
        "{parquet_line}"
    );
    assert!(
        plan.contains("partition_sizes=[1]"),
        "memtable scan missing: {plan}"
    );
    assert_eq!(
        scalar(
            &engine,
            &sql.replace("EXPLAIN SELECT model, e2e_ms", "SELECT count(*)")
        )
        .await,
        "9" // rows with e2e_ms 102..=105 and 102..=106; the memtable rows are 100 and 101
    );
}
