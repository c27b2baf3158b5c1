//! The web UI on data that stopped, in headless Chromium (issue 24 items 2, 5 and 6).
//!
//! A simulated `lora_kv_regression` ends ten minutes before the test starts, and one engine's
//! raw log is cut half way, so that source stops while the others go on. The header says when
//! the data last arrived and that it is stale; "last hour" ends at the last data (said on
//! screen) and, shown up to now, draws the missing minutes as missing; a range without data
//! offers to jump to the last data; the stopped source is named. The request page lists the
//! engine's raw lines of the request (their request id is only in `attrs`) and draws TTFT at
//! TTFT; the heatmap has a colour legend, round ticks and the stored incident marked; the logs
//! page measures growth against the data, not against minutes after it, counts every line and
//! collapses the prompt templates; the requests table leads with latencies and sorts by a
//! header; constant and continuous attributes leave the dimensions list. The pure helpers
//! (ticks, growth, windows) are checked in the same browser. Screenshots go to
//! `target/ui-screenshots/fresh-*.png`; without Chromium it skips as `ui.rs` does.

use std::time::{SystemTime, UNIX_EPOCH};

use infersight_rca::RcaReport;
use infersight_rca::incidents::{IncidentState, IncidentStore, WatchRecord};
use infersight_testkit::chromium::{self, Driver};
use serde_json::{Value, json};

use crate::support::{Server, agent, first_value, ok, run, simulate_and_ingest};
use crate::ui::{CONFIG, check_page, click, wait_for_page};

/// The engine whose raw log is ingested whole, and the one cut half way.
const RAW_WHOLE: &str = "worker-00";
const RAW_CUT: &str = "worker-01";

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64
}

/// Ingests the engines' raw logs: `RAW_WHOLE` whole, `RAW_CUT` only its first half.
fn ingest_raw(dir: &std::path::Path, data: &std::path::Path) {
    for (worker, cut) in [(RAW_WHOLE, false), (RAW_CUT, true)] {
        let mut file = dir.join("sim/raw").join(format!("{worker}.log"));
        if cut {
            let text = std::fs::read_to_string(&file).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            let half = dir.join(format!("{worker}-half.log"));
            std::fs::write(&half, lines[..lines.len() / 2].join("\n") + "\n").unwrap();
            file = half;
        }
        let args = [
            "ingest",
            "--quiet",
            "--data",
            data.to_str().unwrap(),
            "--worker",
            worker,
            "--service",
            "vllm",
            file.to_str().unwrap(),
        ];
        ok(&run(&args), "ingest raw logs");
    }
}

/// Stores a resolved incident spanning `window` (`{start, end}`, RFC 3339) in the data directory.
fn store_incident(data: &std::path::Path, window: &Value) {
    let verdict: RcaReport = serde_json::from_value(json!({
        "symptom": null,
        "root_causes": [{"rank": 1, "dimensions": {"model_version": "r2"},
                         "explained_fraction": 0.9, "score": 3.0, "evidence": []}],
        "signals": [], "log_evidence": [], "suggestions": [], "checklist": [],
        "fleet_wide": false, "incident_window": null, "baseline_window": null,
        "window_source": "watch", "verdict": "ttft rose on model_version=r2",
        "elapsed_ms": 1.0, "timings_ms": {}
    }))
    .unwrap();
    let text = |key: &str| window[key].as_str().unwrap().to_string();
    let record = WatchRecord {
        state: IncidentState::Resolved,
        onset: text("start"),
        detected_at: text("start"),
        resolved_at: Some(text("end")),
        detections: vec!["sli_change (fleet): ttft p99 rose".into()],
        timeline: Vec::new(),
        notice: None,
    };
    IncidentStore::open(data)
        .create_watched(&verdict, record)
        .unwrap();
}

fn text_of(driver: &Driver, selector: &str) -> String {
    driver
        .execute(
            "const el = document.querySelector(arguments[0]); return el ? el.innerText : null",
            json!([selector]),
        )
        .as_str()
        .unwrap_or_else(|| panic!("nothing at {selector}"))
        .to_string()
}

fn exists(driver: &Driver, selector: &str) -> bool {
    driver.execute(
        "return !!document.querySelector(arguments[0])",
        json!([selector]),
    ) == json!(true)
}

#[test]
fn ui_shows_stale_data_stopped_sources_and_the_fixed_pages() {
    if !chromium::available("ui_shows_stale_data_stopped_sources_and_the_fixed_pages") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // 20 minutes ending ten minutes ago: "last hour" holds them, and the data is stale
    let truth = simulate_and_ingest(
        dir.path(),
        &data,
        ("lora_kv_regression", 3, "20m"),
        &["--start=-30m"],
        &["traces.jsonl", "logs.jsonl", "metrics.jsonl"],
    );
    ingest_raw(dir.path(), &data);
    let server = Server::start(&data, CONFIG);
    let base = format!("http://{}", server.api);
    let last_data =
        first_value(&server.sql("SELECT CAST(max(ts) AS BIGINT) / 1000000 AS n FROM requests"))
            .as_f64()
            .unwrap();
    // a stored incident over the fault, for the heatmap's marks (as the watcher stores one)
    store_incident(&data, &truth["incident_window"]);

    let out = chromium::screenshot_dir(env!("CARGO_MANIFEST_DIR"), "ui-screenshots");
    let profile = tempfile::tempdir().unwrap();
    let mut driver = Driver::start();
    driver.open_session(profile.path());
    driver.set_window_size(1440, 900);

    // (1) freshness: the header, the anchored range, the stopped source
    driver.navigate(&format!("{base}/?page=overview&range=1h"));
    wait_for_page(&driver, "overview");
    let header = driver.execute(
        "const el = document.getElementById('last-data');
         return { text: el.innerText, at: Number(el.dataset.lastData), stale: el.dataset.stale }",
        json!([]),
    );
    assert!(
        header["text"].as_str().unwrap().starts_with("last data ")
            && header["text"].as_str().unwrap().contains("min ago"),
        "{header}"
    );
    assert_eq!(header["stale"], json!("true"), "{header}");
    assert!((header["at"].as_f64().unwrap() - last_data).abs() < 60_000.0);
    assert!(
        exists(&driver, "[data-notice=anchored]"),
        "the range ends at the last data, said on screen"
    );
    let window_end = driver
        .execute(
            "return [...document.querySelectorAll('svg[data-chart^=spark-]')].length",
            json!([]),
        )
        .as_u64()
        .unwrap();
    assert_eq!(window_end, 7, "every tile has its sparkline");
    let stopped = text_of(&driver, "[data-freshness-warning=stopped]");
    assert!(stopped.contains(RAW_CUT), "{stopped}");
    assert!(
        !stopped.contains(RAW_WHOLE),
        "only the cut source stopped: {stopped}"
    );
    check_page(&driver, &out, "fresh-overview-anchored", 7);

    // shown up to now: the store is stale, and the sparklines end where the data ends
    click(&driver, "[data-notice=anchored] a");
    wait_for_page(&driver, "overview");
    assert!(driver.current_url().contains("anchor=now"));
    assert!(exists(&driver, "[data-freshness-warning=all]"));
    let gaps = driver.execute(
        "return [...document.querySelectorAll('svg[data-chart=spark-ttft] path[data-series]')].map(p => {
           const xs = [...p.getAttribute('d').matchAll(/[ML]([\\d.]+),/g)].map(m => Number(m[1]));
           return Math.max(...xs);
         })",
        json!([]),
    );
    for right in gaps.as_array().unwrap() {
        // the last ten of sixty minutes are empty: the line stops well before the right edge
        assert!(
            right.as_f64().unwrap() < 230.0,
            "a sparkline stretched over the gap: {gaps}"
        );
    }
    check_page(&driver, &out, "fresh-overview-now", 7);

    // a range without data offers to jump to the last data
    let (since, until) = (last_data - 5.0 * 3600e3, last_data - 4.0 * 3600e3);
    driver.navigate(&format!(
        "{base}/?page=overview&range=custom&since={since}&until={until}"
    ));
    wait_for_page(&driver, "overview");
    click(&driver, "[data-action=jump-to-last-data]");
    wait_for_page(&driver, "overview");
    let value = text_of(&driver, "[data-value=ttft]");
    assert!(
        value.chars().any(|c| c.is_ascii_digit()),
        "after the jump the tiles have data: {value}"
    );
    // the custom range's inputs are ISO UTC text
    let from = driver.execute(
        "const i = document.getElementById('range-from'); return [i.type, i.value]",
        json!([]),
    );
    assert_eq!(from[0], json!("text"));
    let from_text = from[1].as_str().unwrap();
    assert!(
        from_text.len() == 16 && &from_text[4..5] == "-" && &from_text[10..11] == " ",
        "not YYYY-MM-DD HH:MM: {from_text}"
    );

    // (2) the request page: the engine's raw lines of a request (id only in attrs) and TTFT
    let pick = server.sql(&format!(
        "SELECT r.request_id AS id, CAST(r.ts AS BIGINT) / 1000000 AS at_ms, r.ttft_ms AS ttft FROM requests r
         WHERE r.request_id IN (SELECT json_get(attrs, 'request_id') FROM logs WHERE worker = '{RAW_WHOLE}' AND service = 'vllm')
           AND r.request_id IN (SELECT DISTINCT request_id FROM tokens)
         ORDER BY r.ts LIMIT 1"
    ));
    let row = &pick["rows"][0];
    let id = row["id"]
        .as_str()
        .expect("a request with raw lines and tokens");
    driver.navigate(&format!(
        "{base}/?page=request&request={id}&at={}",
        row["at_ms"]
    ));
    wait_for_page(&driver, "request");
    let engine_lines = driver.execute(
        "return [...document.querySelectorAll('[data-table=request-logs] tbody tr')]
           .filter(tr => tr.children[2].innerText === 'vllm').map(tr => tr.children[4].innerText)",
        json!([]),
    );
    let engine_lines = engine_lines.as_array().unwrap();
    assert!(
        !engine_lines.is_empty(),
        "the request page lists none of the engine's raw lines of {id}"
    );
    assert!(
        engine_lines
            .iter()
            .all(|l| l.as_str().unwrap().contains(id)),
        "{engine_lines:?}"
    );
    let ttft_at = driver.execute(
        "const m = document.querySelector('svg[data-chart=token-timeline] [data-marker=TTFT]'); return m ? Number(m.dataset.at) : null",
        json!([]),
    );
    assert!(
        (ttft_at.as_f64().unwrap() - row["ttft"].as_f64().unwrap()).abs() < 1e-6,
        "TTFT drawn at {ttft_at}, not at {}",
        row["ttft"]
    );
    check_page(&driver, &out, "fresh-request", 3);

    // (3) the heatmap: a colour legend, round ticks, the incident and its onset marked
    driver.navigate(&format!("{base}/?page=heatmap&range=1h"));
    wait_for_page(&driver, "heatmap");
    let heatmap = driver.execute(
        "const svg = document.querySelector('svg[data-chart=latency-heatmap]');
         return { legend: document.querySelectorAll('[data-legend=colour] [data-count]').length,
                  y: [...svg.querySelectorAll('.axis text[data-tick]')].map(t => Number(t.dataset.tick)),
                  incident: svg.querySelectorAll('[data-marker=incident]').length,
                  onset: svg.querySelectorAll('[data-marker=onset]').length,
                  height: svg.getBoundingClientRect().height }",
        json!([]),
    );
    assert!(heatmap["legend"].as_u64().unwrap() >= 2, "{heatmap}");
    assert!(heatmap["incident"].as_u64().unwrap() >= 1, "{heatmap}");
    assert!(heatmap["onset"].as_u64().unwrap() >= 1, "{heatmap}");
    assert!(heatmap["height"].as_f64().unwrap() > 450.0, "{heatmap}");
    for tick in heatmap["y"].as_array().unwrap() {
        let v = tick.as_f64().unwrap();
        // latencies on 1-2-5 steps, times on whole minutes
        let mantissa = v / 10f64.powf(v.log10().floor());
        let round_latency = [1.0, 2.0, 5.0].iter().any(|m| (mantissa - m).abs() < 1e-6);
        assert!(round_latency || v % 60_000.0 == 0.0, "odd tick {v}");
    }
    check_page(&driver, &out, "fresh-heatmap", 1);

    // (4) logs: growth of a steady template is about ×1 against the data (the range runs ten
    // minutes past it), totals count every line, prompt templates are one row
    driver.navigate(&format!("{base}/?page=logs&range=1h&anchor=now&q=POST"));
    wait_for_page(&driver, "logs");
    let summary = driver.execute(
        "const p = document.querySelector('[data-count=matching]'); return [Number(p.dataset.inRange), Number(p.dataset.since), Number(p.dataset.until)]",
        json!([]),
    );
    let in_range = server.sql(&format!(
        "SELECT count(*) AS n FROM logs WHERE ts >= to_timestamp_millis({}) AND ts < to_timestamp_millis({})",
        summary[1], summary[2]
    ));
    assert_eq!(
        summary[0],
        first_value(&in_range),
        "the range's total counts every line"
    );
    // growth does not depend on empty minutes after the data: the hour shown up to now (ten
    // minutes past the data) and the same start up to the last data read the same growth
    let busiest = |driver: &Driver| {
        let top = driver.execute(
            "const tr = document.querySelector('[data-table=templates] tbody tr:not([data-family])');
             const cell = tr.querySelector('[data-growth]');
             const p = document.querySelector('[data-count=matching]');
             return [Number(cell.dataset.growth), tr.dataset.template, Number(p.dataset.since), cell.title]",
            json!([]),
        );
        (
            top[0].as_f64().unwrap(),
            top[1].clone(),
            top[2].as_f64().unwrap(),
            top,
        )
    };
    driver.navigate(&format!("{base}/?page=logs&range=1h&anchor=now"));
    wait_for_page(&driver, "logs");
    let (past_data, template, since, top) = busiest(&driver);
    // the logs' last line, not the requests': a request's log lines come after its start, and
    // growth's windows end on the step after the last line
    let last_line =
        first_value(&server.sql("SELECT CAST(max(ts) AS BIGINT) / 1000000 AS n FROM logs"))
            .as_f64()
            .unwrap();
    let until = ((last_line + 1.0) / 60_000.0).ceil() * 60_000.0;
    driver.navigate(&format!(
        "{base}/?page=logs&range=custom&since={since}&until={until}"
    ));
    wait_for_page(&driver, "logs");
    let (to_data, same, ..) = busiest(&driver);
    assert_eq!(template, same);
    assert!(
        (past_data - to_data).abs() < 1e-3 && past_data > 0.4,
        "growth {past_data} up to now, {to_data} up to the data: {top}"
    );
    let families = driver.execute(
        "return { family: [...document.querySelectorAll('[data-table=templates] tr[data-family]')].map(tr => Number(tr.dataset.family)),
                  prompts: [...document.querySelectorAll('[data-table=templates] tr:not([data-family])')].filter(tr => tr.innerText.includes('[PROMPT]')).length }",
        json!([]),
    );
    assert!(
        families["family"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_u64().unwrap() >= 3),
        "{families}"
    );
    assert_eq!(families["prompts"], json!(0), "{families}");
    check_page(&driver, &out, "fresh-logs", 5);

    // (5) requests: latencies first, a header sorts; dimensions without constant/continuous
    driver.navigate(&format!("{base}/?page=requests&range=1h"));
    wait_for_page(&driver, "requests");
    let headers = driver.execute(
        "return [...document.querySelectorAll('[data-table=requests] thead th')].map(th => th.innerText.replace(/[▲▼]/g, '').trim())",
        json!([]),
    );
    let headers: Vec<&str> = headers
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap())
        .collect();
    assert_eq!(&headers[2..5], ["ttft", "tpot", "e2e"]);
    assert!(
        !headers.contains(&"status"),
        "status=unset on every row: {headers:?}"
    );
    click(&driver, "[data-table=requests] button[data-sort=e2e_ms]");
    wait_for_page(&driver, "requests");
    assert!(driver.current_url().contains("order=e2e_ms.desc"));
    check_page(&driver, &out, "fresh-requests", 0);
    driver.navigate(&format!("{base}/?page=dimensions&range=1h"));
    wait_for_page(&driver, "dimensions");
    let answer: Value = agent()
        .get(&format!(
            "{base}/api/v1/dimensions?since={}&until={}",
            (now_ms() - 3600e3) / 1000.0,
            now_ms() / 1000.0
        ))
        .call()
        .unwrap()
        .body_mut()
        .read_json()
        .unwrap();
    let listed = driver.execute(
        "return [...document.querySelectorAll('[data-table=dimensions] > tbody > tr > td:first-child')].map(td => td.firstChild.textContent)",
        json!([]),
    );
    for d in answer["dimensions"].as_array().unwrap() {
        let kind = d["kind"].as_str().unwrap();
        let shown = listed.as_array().unwrap().contains(&d["name"]);
        assert_eq!(shown, kind == "categorical", "{} ({kind})", d["name"]);
    }

    // the incident against its baseline (the ground truth's windows, as the heatmap's brushing
    // puts them in the URL): the injected slice's value rises most among the slow requests
    let ms = |v: &Value| {
        driver
            .execute("return Date.parse(arguments[0])", json!([v]))
            .as_f64()
            .unwrap()
    };
    let (window, baseline) = (&truth["incident_window"], &truth["baseline_window"]);
    driver.navigate(&format!(
        "{base}/?page=dimensions&range=1h&sel_since={}&sel_until={}&base_since={}&base_until={}",
        ms(&window["start"]),
        ms(&window["end"]),
        ms(&baseline["start"]),
        ms(&baseline["end"])
    ));
    wait_for_page(&driver, "dimensions");
    let top = driver.execute(
        "const tr = document.querySelector('[data-table=dimension-changes] tbody tr'); return tr ? tr.dataset.change : null",
        json!([]),
    );
    let top = top.as_str().expect("a ranked change").to_string();
    let truth_pairs: Vec<(String, String)> = truth["root_causes"][0]["dimensions"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect();
    assert!(
        truth_pairs
            .iter()
            .any(|(k, v)| top == format!("{k}={v}") || top.ends_with(&format!("={v}"))),
        "the top change {top} is not the injected slice {truth_pairs:?}"
    );
    check_page(&driver, &out, "fresh-dimensions-compare", 0);
    // the breakdown by the injected slice's dimension: p99 before and after, the slice first
    let (key, value) = &truth_pairs[0];
    let compare_keys = driver
        .current_url()
        .split_once("&sel_since")
        .map(|(_, rest)| format!("&sel_since{rest}"))
        .unwrap();
    driver.navigate(&format!(
        "{base}/?page=breakdown&range=1h&by={key}{compare_keys}"
    ));
    wait_for_page(&driver, "breakdown");
    let first = driver.execute(
        "const tr = document.querySelector('[data-table=breakdown] tbody tr');
         return [tr.dataset.value, tr.querySelector('[data-change]').dataset.change]",
        json!([]),
    );
    assert_eq!(first[0], json!(value), "{first}");
    assert!(
        first[1].as_str().unwrap().parse::<f64>().unwrap() > 0.2,
        "{first}"
    );
    check_page(&driver, &out, "fresh-breakdown-compare", 3);
    // requests most unusual for their model against the baseline: the injected slice's first
    driver.navigate(&format!(
        "{base}/?page=requests&range=1h&order=most_unusual{compare_keys}"
    ));
    wait_for_page(&driver, "requests");
    let first = driver.execute(
        "const tr = document.querySelector('[data-table=requests] tbody tr');
         return [tr.innerText, Number(tr.querySelector('[data-unusual]').dataset.unusual)]",
        json!([]),
    );
    assert!(
        first[0].as_str().unwrap().contains(value.as_str()) && first[1].as_f64().unwrap() > 2.0,
        "{first}"
    );
    check_page(&driver, &out, "fresh-requests-unusual", 0);

    // (6) the pure helpers, in the same browser
    let helpers = driver.execute_async(
        "const done = arguments[arguments.length - 1];
         Promise.all([import('/ui/api.js'), import('/ui/logs.js'), import('/ui/app.js')]).then(([api, logs, app]) => {
           const win = { since: 0, until: 3600e3 };
           const steady = logs.growthWindows(win, 60e3, [0, 2400e3 - 1], {});
           done({
             nice: api.niceTicks(0, 4870, 5),
             log: api.logTicks(3, 900, 12),
             minutes: api.timeTicks(Date.parse('2026-12-02T19:39:17Z'), Date.parse('2026-12-02T20:39:17Z'), 10).ticks
               .map(t => new Date(t).toISOString().slice(11, 16)),
             steady,
             grown: logs.growthOf(30, 60, steady),
             fresh: logs.growthOf(12, 0, steady),
             gone: logs.growthOf(0, 40, steady),
             late: logs.growthWindows(win, 60e3, [1200e3 + 5, 3000e3 - 1], {}),
             baseline: logs.growthWindows(win, 60e3, [0, 3000e3], { base_since: '600000', base_until: '1200000', sel_since: '1800000', sel_until: '2400000' }),
             anchored: app.relativeWindow(3600e3, 10 * 3600e3, 10 * 3600e3 - 10 * 60e3, undefined),
             live: app.relativeWindow(3600e3, 10 * 3600e3, 10 * 3600e3 - 60e3, undefined),
             iso: app.fromIsoText('2026-12-02 20:15'),
           });
         });",
        json!([]),
    );
    assert_eq!(helpers["nice"], json!([0, 1000, 2000, 3000, 4000]));
    assert_eq!(helpers["log"], json!([5, 10, 20, 50, 100, 200, 500]));
    assert_eq!(
        helpers["minutes"],
        json!(["19:40", "19:50", "20:00", "20:10", "20:20", "20:30"])
    );
    // the data ends at 40 min: the recent window is its last quarter, not the empty tail
    assert_eq!(helpers["steady"]["recent"], json!([1_800_000, 2_400_000]));
    assert_eq!(helpers["steady"]["base"][0], json!(0));
    // 30 lines in 10 min against 60 in 30 min: ×1.5; no baseline line: new; none now: ×0
    assert!(
        (helpers["grown"]["growth"].as_f64().unwrap() - 1.5).abs() < 1e-9,
        "{helpers}"
    );
    assert_eq!(helpers["fresh"]["isNew"], json!(true));
    assert_eq!(helpers["gone"]["growth"].as_f64(), Some(0.0));
    // data from 20 min on: the baseline starts with it, not at the range's start
    assert_eq!(helpers["late"]["base"][0], json!(1_200_000));
    assert_eq!(helpers["baseline"]["base"], json!([600000, 1200000]));
    assert_eq!(helpers["baseline"]["recent"], json!([1800000, 2400000]));
    assert_eq!(helpers["anchored"]["anchored"], json!(true));
    // ten minutes without data: the hour ends at the minute after the last data
    assert_eq!(
        helpers["anchored"]["until"].as_f64(),
        Some(10.0 * 3600e3 - 9.0 * 60e3)
    );
    assert_eq!(helpers["live"]["anchored"], json!(false));
    assert_eq!(helpers["iso"], json!(1_796_242_500_000_i64));
    driver.assert_console_channel_works();
}
