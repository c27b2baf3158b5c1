//! The logs page of the web UI in headless Chromium: search, label filters, template rates and
//! the lineage of a record.
//!
//! A simulated `lora_kv_regression` is ingested (the gateway's access logs, which carry trace and
//! request ids, and two engines' raw logs, which name their request only in the text), plus two
//! scheduler records posted over OTLP: an out-of-memory error and a preemption that declares it
//! as upstream (`upstream_log_ids`). The test searches a word and checks every line against it
//! and the count against SQL, pages, filters by a classifier label, sorts the templates by growth
//! and opens one, and walks the lineage: a gateway line → its request (model_version, link to the
//! request page) and the engine line of the same request; the preemption → its declared upstream
//! → back downstream. No console errors, charts with data, no sideways scroll; screenshots go to
//! `target/ui-screenshots/logs-*.png`. Without Chromium it skips as `ui.rs` does.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use infersight_testkit::chromium::{self, Driver};
use serde_json::{Value, json};

use crate::support::{Server, first_value, ok, run, simulate_and_ingest};
use crate::ui::{CONFIG, check_page, click, wait_for_page};

/// The engines whose raw logs are ingested too (the simulation runs 8).
const RAW_WORKERS: [&str; 2] = ["worker-00", "worker-01"];

/// The text of every cell matching `selector`.
fn texts(driver: &Driver, selector: &str) -> Vec<String> {
    let value = driver.execute(
        "return [...document.querySelectorAll(arguments[0])].map(e => e.innerText)",
        json!([selector]),
    );
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

fn attribute(driver: &Driver, selector: &str, name: &str) -> String {
    let value = driver.execute(
        "const el = document.querySelector(arguments[0]); return el ? el.getAttribute(arguments[1]) : null",
        json!([selector, name]),
    );
    value
        .as_str()
        .unwrap_or_else(|| panic!("no {selector}[{name}]"))
        .to_string()
}

/// The matching count the page shows, and its window in ms.
fn shown_count(driver: &Driver) -> (i64, i64, i64) {
    let number = |name: &str| {
        attribute(driver, "[data-count=matching]", name)
            .parse::<i64>()
            .unwrap()
    };
    (
        number("data-value"),
        number("data-since"),
        number("data-until"),
    )
}

/// Fills the search form (text box and selects by name) and submits it with its button.
fn search(driver: &Driver, fields: Value) {
    let done = driver.execute(
        "const form = document.querySelector('[data-form=log-search]');
         for (const [name, value] of Object.entries(arguments[0])) {
           const field = form.elements[name];
           if (!field) return `no field ${name}`;
           field.value = value;
           if (field.value !== value) return `no option ${value} in ${name}`;
         }
         form.querySelector('button[type=submit]').click();
         return 'ok';",
        json!([fields]),
    );
    assert_eq!(done, json!("ok"), "filling the search form");
    wait_for_page(driver, "logs");
}

/// Focuses `selector`, checks that the focus is visible (an outline), and presses Enter on it
/// with real keyboard input (WebDriver actions).
fn press_enter(driver: &Driver, selector: &str) {
    let outline = driver.execute(
        "const el = document.querySelector(arguments[0]); if (!el) return null;
         el.focus(); return document.activeElement === el ? getComputedStyle(el).outlineStyle : 'not focused';",
        json!([selector]),
    );
    assert!(
        outline
            .as_str()
            .is_some_and(|o| o != "none" && o != "not focused"),
        "{selector}: focus not visible ({outline})"
    );
    let enter = "\u{E007}";
    let actions = json!({ "actions": [{ "type": "key", "id": "keyboard", "actions": [
        { "type": "keyDown", "value": enter }, { "type": "keyUp", "value": enter },
    ] }] });
    driver.call("POST", &driver.session_path("/actions"), Some(actions));
}

fn scalar(server: &Server, sql: &str) -> i64 {
    first_value(&server.sql(sql)).as_i64().unwrap()
}

fn text(server: &Server, sql: &str) -> String {
    first_value(&server.sql(sql))
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// An OTLP/JSON log record at `at_ns`.
fn record(at_ns: u128, severity: (&str, u8), body: &str, attributes: Value) -> Value {
    json!({
        "timeUnixNano": at_ns.to_string(), "severityText": severity.0, "severityNumber": severity.1,
        "body": { "stringValue": body }, "attributes": attributes,
    })
}

#[test]
fn ui_logs_search_templates_and_lineage() {
    if !chromium::available("ui_logs_search_templates_and_lineage") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // 30 minutes ending two minutes ago, so the UI's default "last hour" shows them
    simulate_and_ingest(
        dir.path(),
        &data,
        ("lora_kv_regression", 3, "30m"),
        &["--start=-32m"],
        &["traces.jsonl", "logs.jsonl"],
    );
    for worker in RAW_WORKERS {
        let file = dir.path().join("sim/raw").join(format!("{worker}.log"));
        let data = data.to_str().unwrap();
        let args = [
            "ingest",
            "--quiet",
            "--data",
            data,
            "--worker",
            worker,
            "--service",
            "vllm",
            file.to_str().unwrap(),
        ];
        ok(&run(&args), "ingest raw logs");
    }
    let server = Server::start(&data, CONFIG);
    let base = format!("http://{}", server.api);

    // two scheduler records four minutes ago: an OOM and a preemption naming it as upstream
    let now_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let at = now_ns - 240 * 1_000_000_000;
    let value = |s: &str| json!({ "stringValue": s });
    let export = json!({ "resourceLogs": [{
        "resource": { "attributes": [
            { "key": "service.name", "value": value("scheduler") },
            { "key": "service.instance.id", "value": value("worker-05") },
        ] },
        "scopeLogs": [{ "scope": { "name": "scheduler" }, "logRecords": [
            record(at, ("ERROR", 17), "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB on gpu 0",
                json!([{ "key": "log.record.uid", "value": value("evt-oom-1") }])),
            record(at + 1_500_000_000, ("WARN", 13), "request preempted after the out of memory error; recompute scheduled",
                json!([{ "key": "log.record.uid", "value": value("evt-oom-2") },
                       { "key": "upstream_log_ids", "value": { "arrayValue": { "values": [value("evt-oom-1")] } } }])),
        ] }],
    }] });
    let (status, _, body) = server.post_otlp(
        "/v1/logs",
        "application/json",
        export.to_string().as_bytes(),
        false,
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while scalar(&server, "SELECT count(*) FROM logs WHERE label = 'oom'") < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the posted records were not stored (or not labelled oom)"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let out = chromium::screenshot_dir(env!("CARGO_MANIFEST_DIR"), "ui-screenshots");
    let profile = tempfile::tempdir().unwrap();
    let mut driver = Driver::start();
    driver.open_session(profile.path());
    driver.set_window_size(1280, 800);

    // (1) the page: templates with a rate sparkline each, the latest lines, the total count
    driver.navigate(&format!("{base}/?page=logs&range=1h"));
    wait_for_page(&driver, "logs");
    let templates = texts(&driver, "[data-table=templates] tbody tr");
    assert!(templates.len() > 5, "templates: {templates:?}");
    let sparks = driver.execute(
        "return [...document.querySelectorAll('[data-table=templates] tbody tr')]
           .every(tr => tr.querySelector('svg[data-chart=template-rate] [data-series]'))",
        json!([]),
    );
    assert_eq!(sparks, json!(true), "a template without a rate sparkline");
    let (total, since, until) = shown_count(&driver);
    let in_window =
        format!("ts >= to_timestamp_millis({since}) AND ts < to_timestamp_millis({until})");
    assert_eq!(
        total,
        scalar(
            &server,
            &format!("SELECT count(*) FROM logs WHERE {in_window}")
        ),
        "the count of lines in the range"
    );
    assert_eq!(
        texts(&driver, "[data-table=logs] tbody tr").len(),
        100,
        "a page of lines"
    );
    check_page(&driver, &out, "logs", 5);

    // (2) search a word (in another case than the text): every line has it, the count is SQL's
    search(&driver, json!({ "q": "REFACTOR" }));
    assert!(
        driver.current_url().contains("q=REFACTOR"),
        "the search is in the URL"
    );
    let (matching, _, _) = shown_count(&driver);
    let expected = scalar(
        &server,
        &format!("SELECT count(*) FROM logs WHERE {in_window} AND lower(body) LIKE '%refactor%'"),
    );
    assert!(
        expected > 100,
        "the simulation has {expected} lines with the word"
    );
    assert_eq!(matching, expected, "the count of matching lines");
    let bodies = texts(&driver, "[data-table=logs] tbody td.body");
    assert_eq!(bodies.len(), 100);
    for body in &bodies {
        assert!(
            body.to_lowercase().contains("refactor"),
            "a line without the word: {body}"
        );
    }
    let marks = texts(&driver, "[data-table=logs] tbody td.body mark");
    assert!(marks.iter().all(|m| m.eq_ignore_ascii_case("refactor")) && !marks.is_empty());
    check_page(&driver, &out, "logs-search", 1);
    // the next page: other lines, still all with the word
    let first = attribute(&driver, "[data-table=logs] tbody tr", "data-ns");
    click(&driver, "[data-page=next]");
    wait_for_page(&driver, "logs");
    assert!(driver.current_url().contains("offset=100"));
    assert_ne!(
        first,
        attribute(&driver, "[data-table=logs] tbody tr", "data-ns")
    );
    let bodies = texts(&driver, "[data-table=logs] tbody td.body");
    assert_eq!(bodies.len() as i64, (expected - 100).min(100));
    assert!(bodies.iter().all(|b| b.to_lowercase().contains("refactor")));

    // (3) a label of the log classifier instead: only the two scheduler lines
    search(&driver, json!({ "q": "", "label": "oom" }));
    let url = driver.current_url();
    assert!(
        url.contains("label=oom") && !url.contains("q=") && !url.contains("offset="),
        "{url}"
    );
    assert_eq!(shown_count(&driver).0, 2);
    let labels = texts(&driver, "[data-table=logs] tbody td.cls");
    assert_eq!(labels.len(), 2);
    assert!(labels.iter().all(|l| l.contains("oom")), "{labels:?}");
    assert_eq!(
        texts(&driver, "[data-filter=label]").len(),
        1,
        "a chip removes the filter"
    );
    check_page(&driver, &out, "logs-label", 1);

    // (4) templates by growth (largest first: new ones by their recent count, then by growth),
    // then one opened: only its lines
    driver.navigate(&format!("{base}/?page=logs&range=1h&sort=growth"));
    wait_for_page(&driver, "logs");
    let growth = driver.execute(
        "return [...document.querySelectorAll('[data-table=templates] [data-rank]')].map(e => Number(e.dataset.rank))",
        json!([]),
    );
    let growth: Vec<f64> = growth
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_f64().unwrap())
        .collect();
    assert!(
        growth.len() > 5 && growth.windows(2).all(|w| w[0] >= w[1]),
        "growth order: {growth:?}"
    );
    driver.navigate(&format!("{base}/?page=logs&range=1h"));
    wait_for_page(&driver, "logs");
    // the second template row (a collapsed family of prompt lines has no single template)
    let template = driver
        .execute(
            "return [...document.querySelectorAll('[data-table=templates] tbody tr:not([data-family])')][1].dataset.template",
            json!([]),
        )
        .as_str()
        .unwrap()
        .to_string();
    click(
        &driver,
        &format!("[data-table=templates] tbody tr[data-template='{template}'] a"),
    );
    wait_for_page(&driver, "logs");
    assert!(
        driver
            .current_url()
            .contains(&format!("template={template}"))
    );
    assert_eq!(
        attribute(
            &driver,
            &format!("[data-table=templates] tr[data-template='{template}']"),
            "aria-current"
        ),
        "true"
    );
    assert_eq!(
        shown_count(&driver).0,
        scalar(
            &server,
            &format!("SELECT count(*) FROM logs WHERE {in_window} AND template_id = '{template}'")
        )
    );
    let rows = driver.execute(
        "return [...document.querySelectorAll('[data-table=logs] tbody tr')].map(tr => tr.dataset.template)",
        json!([]),
    );
    let rows = rows.as_array().unwrap();
    assert!(
        !rows.is_empty() && rows.iter().all(|t| t == &json!(template)),
        "{rows:?}"
    );
    check_page(&driver, &out, "logs-template", 1);

    // (5) the lineage of a gateway line served by worker-00: its request and the engine's line
    driver.navigate(&format!(
        "{base}/?page=logs&range=1h&service=gateway&q=upstream%3Dworker-00"
    ));
    wait_for_page(&driver, "logs");
    click(
        &driver,
        "[data-table=logs] tbody tr:nth-child(3) [data-action=lineage]",
    );
    wait_for_page(&driver, "logs");
    let ns = attribute(&driver, "[data-lineage]", "data-lineage");
    let request_id = text(
        &server,
        &format!(
            "SELECT request_id FROM logs WHERE CAST(ts AS BIGINT) = {ns} AND service = 'gateway'"
        ),
    );
    let answer = server.sql(&format!(
        "SELECT model_version, trace_id FROM requests WHERE request_id = '{request_id}'"
    ));
    let request = &answer["rows"][0];
    let model_version = request["model_version"].as_str().unwrap();
    let trace_id = request["trace_id"].as_str().unwrap();
    assert_eq!(
        attribute(&driver, "[data-lineage-request]", "data-lineage-request"),
        request_id
    );
    assert_eq!(
        texts(&driver, "[data-lineage-request] [data-model-version]"),
        [model_version]
    );
    let link = attribute(
        &driver,
        "[data-lineage-request] [data-action=open-request]",
        "href",
    );
    assert!(
        link.starts_with("/?page=request&") && link.contains(&format!("trace={trace_id}")),
        "link to the request page: {link}"
    );
    let same_request = texts(&driver, "[data-table=lineage-trace] tbody tr");
    assert!(
        same_request
            .iter()
            .any(|r| r.contains("worker-00") && r.contains(&request_id)),
        "the engine's line of the request: {same_request:?}"
    );
    assert!(
        !texts(&driver, "[data-table=lineage-serving] tbody tr").is_empty(),
        "worker-00 during the request"
    );
    let focused = driver.execute(
        "return document.activeElement && document.activeElement.id",
        json!([]),
    );
    assert_eq!(
        focused,
        json!("lineage-title"),
        "the panel's heading takes the focus"
    );
    let charts = check_page(&driver, &out, "logs-lineage", 3);
    assert!(
        charts.iter().any(|c| c["id"] == json!("lineage")),
        "the lineage timeline"
    );
    // the engine's line has its own lineage, which finds the same request from the line's text
    click(
        &driver,
        "[data-table=lineage-trace] tbody tr [data-action=lineage]",
    );
    wait_for_page(&driver, "logs");
    assert_ne!(attribute(&driver, "[data-lineage]", "data-lineage"), ns);
    assert_eq!(
        attribute(&driver, "[data-lineage-request]", "data-lineage-request"),
        request_id
    );

    // (6) declared lineage: the preemption's upstream is the OOM, whose downstream is the preemption
    driver.navigate(&format!("{base}/?page=logs&range=1h&label=oom&q=preempted"));
    wait_for_page(&driver, "logs");
    // with the keyboard this time
    press_enter(&driver, "[data-table=logs] [data-action=lineage]");
    wait_for_page(&driver, "logs");
    let upstream = texts(&driver, "[data-table=lineage-upstream] tbody tr");
    assert!(
        upstream.len() == 1 && upstream[0].contains("CUDA out of memory"),
        "{upstream:?}"
    );
    check_page(&driver, &out, "logs-upstream", 2);
    click(
        &driver,
        "[data-table=lineage-upstream] [data-action=lineage]",
    );
    wait_for_page(&driver, "logs");
    let downstream = texts(&driver, "[data-table=lineage-downstream] tbody tr");
    assert!(
        downstream.len() == 1 && downstream[0].contains("preempted"),
        "{downstream:?}"
    );
    // closing the panel keeps the filters
    click(&driver, "[data-action=close-lineage]");
    wait_for_page(&driver, "logs");
    let url = driver.current_url();
    assert!(!url.contains("rec=") && url.contains("label=oom"), "{url}");
    assert!(texts(&driver, "[data-lineage]").is_empty());

    driver.assert_console_channel_works();
}
