//! The web UI of `infersight serve` in headless Chromium, end to end: a simulated
//! `lora_kv_regression` is ingested, the overview shows numbers and sparklines, the spike and a
//! baseline are brushed on the heatmap, RCA runs on them, and the incident page names the ground
//! truth's root cause; the breakdown's phase bars and flame chart show the slow slice's prefill;
//! the requests explorer pages and opens a request with its trace waterfall, token timeline and
//! engine metrics; every other page loads with data. No page logs a console error or warning;
//! screenshots go to `target/ui-screenshots/`. Without Chromium the browser test skips (fails
//! with `INFERSIGHT_TEST_CHROMIUM=1`); the asset and CSP checks run everywhere.

use std::path::Path;
use std::time::Duration;

use infersight_testkit::chromium::{self, Driver};
use serde_json::{Value, json};

use crate::support::{Server, agent, simulate_and_ingest};

pub(crate) const CONFIG: &str = r#"
[alerts]
eval_interval = "1s"
slos = [{ name = "ttft-1s", sli = "ttft", threshold_ms = 1000, objective = 0.99, window = "30d" }]
"#;

/// Waits until the shell has rendered `page`; panics with the page's error otherwise.
pub(crate) fn wait_for_page(driver: &Driver, page: &str) {
    let script = format!(
        "const m = document.getElementById('view');
         return m && m.dataset.page === '{page}' && m.dataset.state !== 'loading'
           ? {{ state: m.dataset.state, text: m.innerText.slice(0, 400) }} : null;"
    );
    let answer = driver.wait_for(&format!("page {page}"), &script, Duration::from_secs(60));
    assert_eq!(answer["state"], json!("ready"), "page {page}: {answer}");
}

/// Every `svg[data-chart]` on the page: id, laid-out size, emptiness, visible marks.
pub(crate) const INSPECT_CHARTS: &str = r#"
return [...document.querySelectorAll('svg[data-chart]')].map(svg => {
  const box = svg.getBoundingClientRect();
  const marks = [...svg.querySelectorAll('[data-series]')];
  const visible = marks.filter(m => { const b = m.getBoundingClientRect(); return b.width > 0 || b.height > 0; }).length;
  return { id: svg.getAttribute('data-chart'), width: box.width, height: box.height,
           empty: svg.getAttribute('data-empty') === 'true', marks: marks.length, visible };
});
"#;

/// Checks the page in view: no console errors, every chart laid out with data, no sideways
/// scrolling at 1280 px; saves a screenshot. Answers the charts.
pub(crate) fn check_page(driver: &Driver, out: &Path, name: &str, min_charts: usize) -> Vec<Value> {
    let errors = driver.console_errors();
    assert!(errors.is_empty(), "{name}: console errors: {errors:#?}");
    let charts = driver.execute(INSPECT_CHARTS, json!([]));
    let charts = charts.as_array().cloned().unwrap_or_default();
    assert!(
        charts.len() >= min_charts,
        "{name}: {} charts, expected at least {min_charts}",
        charts.len()
    );
    for chart in &charts {
        assert_eq!(chart["empty"], json!(false), "{name}: empty chart {chart}");
        assert!(
            chart["width"].as_f64().unwrap() > 50.0 && chart["height"].as_f64().unwrap() > 20.0,
            "{name}: chart laid out small: {chart}"
        );
        assert!(
            chart["visible"].as_u64().unwrap() > 0,
            "{name}: chart without visible marks: {chart}"
        );
    }
    let widths = driver.execute(
        "return [document.documentElement.scrollWidth, window.innerWidth]",
        json!([]),
    );
    assert!(
        widths[0].as_f64() <= widths[1].as_f64(),
        "{name}: scrolls sideways at 1280 px: {widths}"
    );
    driver.check_and_save_screenshot(&driver.screenshot(), out, &format!("{name}.png"));
    charts
}

pub(crate) fn click(driver: &Driver, selector: &str) {
    let found = driver.execute(
        "const el = document.querySelector(arguments[0]); if (!el) return false; el.click(); return true;",
        json!([selector]),
    );
    assert_eq!(found, json!(true), "nothing to click at {selector}");
}

#[test]
fn ui_finds_the_root_cause_of_a_brushed_spike() {
    if !chromium::available("ui_finds_the_root_cause_of_a_brushed_spike") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // 30 minutes ending two minutes ago, so the UI's default "last hour" shows them
    let truth = simulate_and_ingest(
        dir.path(),
        &data,
        ("lora_kv_regression", 3, "30m"),
        &["--start=-32m"],
        &["traces.jsonl", "logs.jsonl", "metrics.jsonl"],
    );
    let server = Server::start(&data, CONFIG);
    let base = format!("http://{}", server.api);
    let out = chromium::screenshot_dir(env!("CARGO_MANIFEST_DIR"), "ui-screenshots");
    let profile = tempfile::tempdir().unwrap();
    let mut driver = Driver::start();
    driver.open_session(profile.path());
    driver.set_window_size(1280, 800);

    // (1) the overview: every tile has a number and a sparkline with data
    driver.navigate(&format!("{base}/"));
    wait_for_page(&driver, "overview");
    let tiles = driver.execute(
        "return [...document.querySelectorAll('[data-tile]')].map(t => ({
           key: t.dataset.tile, value: t.querySelector('[data-value]').textContent,
           spark: !!t.querySelector('svg[data-chart]:not([data-empty])') }))",
        json!([]),
    );
    let tiles = tiles.as_array().unwrap();
    assert_eq!(tiles.len(), 7, "tiles: {tiles:?}");
    for tile in tiles {
        assert!(
            tile["value"]
                .as_str()
                .is_some_and(|v| v.chars().any(|c| c.is_ascii_digit())),
            "tile without a number: {tile}"
        );
        assert_eq!(
            tile["spark"],
            json!(true),
            "tile without a sparkline: {tile}"
        );
    }
    check_page(&driver, &out, "overview", 7);

    // (2) the heatmap of TTFT (the tile links to it); brush the incident window
    click(&driver, "[data-tile=ttft]");
    wait_for_page(&driver, "heatmap");
    check_page(&driver, &out, "heatmap", 1);
    let geometry = driver.execute(
        "const svg = document.querySelector('svg[data-chart=latency-heatmap]');
         svg.scrollIntoView({ block: 'center' });
         const box = svg.getBoundingClientRect();
         const scale = box.width / 1200;
         return { left: box.left + 64 * scale, width: (1200 - 76) * scale, top: box.top,
                  height: box.height, since: Number(svg.dataset.sinceMs), until: Number(svg.dataset.untilMs) };",
        json!([]),
    );
    let incident = &truth["incident_window"];
    let parse_ms = |s: &Value| -> f64 {
        driver
            .execute("return Date.parse(arguments[0])", json!([s]))
            .as_f64()
            .unwrap()
    };
    let (start_ms, end_ms) = (parse_ms(&incident["start"]), parse_ms(&incident["end"]));
    let g = |k: &str| geometry[k].as_f64().unwrap();
    let x_of = |t: f64| g("left") + (t - g("since")) / (g("until") - g("since")) * g("width");
    let y = g("top") + g("height") / 2.0;
    driver.drag((x_of(start_ms + 30_000.0), y), (x_of(end_ms), y));
    let selection = driver.wait_for(
        "a brushed selection",
        "return document.querySelector('[data-selection]').dataset.selection",
        Duration::from_secs(5),
    );
    let (sel_since, sel_until) = selection
        .as_str()
        .and_then(|s| s.split_once('-'))
        .map(|(a, b)| (a.parse::<f64>().unwrap(), b.parse::<f64>().unwrap()))
        .unwrap();
    assert!(
        (sel_since - start_ms).abs() <= 120_000.0 && (sel_until - end_ms).abs() <= 120_000.0,
        "selection {sel_since}..{sel_until} is not the incident {start_ms}..{end_ms}"
    );
    assert!(
        driver.current_url().contains("sel_since="),
        "the selection is in the URL"
    );
    // a baseline: the ground truth's, brushed in the baseline mode; the selection stays
    let baseline = &truth["baseline_window"];
    let (base_start, base_end) = (parse_ms(&baseline["start"]), parse_ms(&baseline["end"]));
    click(&driver, "[data-brush-mode=baseline]");
    driver.drag(
        (x_of(base_start + 60_000.0), y),
        (x_of(base_end - 30_000.0), y),
    );
    let windows = driver.wait_for(
        "a brushed baseline",
        "const s = document.querySelector('[data-selection]');
         return s.dataset.baseline ? [s.dataset.selection, s.dataset.baseline] : null",
        Duration::from_secs(5),
    );
    assert_eq!(
        windows[0], selection,
        "brushing a baseline keeps the selection"
    );
    let (base_since, base_until) = windows[1]
        .as_str()
        .and_then(|s| s.split_once('-'))
        .map(|(a, b)| (a.parse::<f64>().unwrap(), b.parse::<f64>().unwrap()))
        .unwrap();
    assert!(
        base_since >= base_start && base_until <= base_end + 60_000.0 && base_until <= sel_since,
        "baseline {base_since}..{base_until} is not inside {base_start}..{base_end}"
    );
    assert!(driver.current_url().contains("base_since="));
    // the p50 and p99 lines are drawn over the cells
    let lines = driver.execute(
        "return [...document.querySelectorAll('svg[data-chart=latency-heatmap] path.quantile-line')].map(l => l.dataset.series)",
        json!([]),
    );
    assert_eq!(lines, json!(["p99", "p50"]));
    driver.check_and_save_screenshot(&driver.screenshot(), &out, "heatmap-brushed.png");

    // (3) RCA on the selection opens the incident page, which names the root cause
    click(&driver, "[data-action=run-rca]");
    wait_for_page(&driver, "incident");
    driver.wait_for(
        "the report frame",
        "const f = document.querySelector('iframe.report'); return f && f.dataset.loaded === 'true'",
        Duration::from_secs(60),
    );
    let causes = driver.execute(
        "const el = document.querySelector('[data-root-causes]'); return el ? el.innerText : ''",
        json!([]),
    );
    let causes = causes.as_str().unwrap_or_default().to_string();
    let expected = &truth["root_causes"][0]["dimensions"];
    for (key, value) in expected.as_object().unwrap() {
        let pair = format!("{key}={}", value.as_str().unwrap());
        assert!(
            causes.contains(&pair),
            "the incident page does not name {pair}: {causes}"
        );
    }
    let report_text = driver.execute(
        "return document.querySelector('iframe.report').contentDocument.body.innerText",
        json!([]),
    );
    assert!(
        report_text
            .as_str()
            .is_some_and(|t| t.contains("model_version")),
        "the embedded report names the root cause"
    );
    check_page(&driver, &out, "incident", 0);

    // confirm it with a note: the page shows the new status, the API has it
    driver.execute(
        "document.getElementById('note').value = 'rolled back the LoRA pair'",
        json!([]),
    );
    click(&driver, "[data-action=confirm]");
    driver.wait_for(
        "the confirmed status",
        "const s = document.querySelector('[data-status]'); return s && s.dataset.status === 'confirmed'",
        Duration::from_secs(30),
    );
    let id = driver
        .execute(
            "return document.querySelector('[data-incident]').dataset.incident",
            json!([]),
        )
        .as_str()
        .unwrap()
        .to_string();
    let stored: Value = agent()
        .get(&format!("{base}/api/v1/incidents/{id}"))
        .call()
        .unwrap()
        .body_mut()
        .read_json()
        .unwrap();
    assert_eq!(stored["status"], json!("confirmed"));

    // (4) every other page loads with data, without console errors
    for (page, query, min_charts, probe) in [
        ("incidents", "", 0, "[data-table=incidents] tbody tr"),
        ("dimensions", "", 0, "[data-table=dimensions] tbody tr"),
        (
            "breakdown",
            "&by=model_version",
            3,
            "[data-table=breakdown] tbody tr",
        ),
        ("requests", "", 0, "[data-table=requests] tbody tr"),
        ("logs", "", 0, "[data-table=templates] tbody tr"),
    ] {
        driver.navigate(&format!("{base}/?page={page}&range=1h{query}"));
        wait_for_page(&driver, page);
        let rows = driver.execute(
            "return document.querySelectorAll(arguments[0]).length",
            json!([probe]),
        );
        assert!(rows.as_u64().unwrap() > 0, "{page}: no rows at {probe}");
        check_page(&driver, &out, page, min_charts);
    }
    // the breakdown by model_version stacks both versions
    driver.navigate(&format!("{base}/?page=breakdown&range=1h&by=model_version"));
    wait_for_page(&driver, "breakdown");
    let series = driver.execute(
        "return [...new Set([...document.querySelectorAll('svg[data-chart=breakdown] [data-series]')].map(m => m.dataset.series))].sort()",
        json!([]),
    );
    assert_eq!(series, json!(["r1", "r2"]));
    // where the time goes: phase bars per version, and the flame chart version → worker → phase
    driver.navigate(&format!(
        "{base}/?page=breakdown&range=1h&by=model_version&by2=worker"
    ));
    wait_for_page(&driver, "breakdown");
    let charts = check_page(&driver, &out, "breakdown-nested", 3);
    let ids: Vec<&str> = charts.iter().filter_map(|c| c["id"].as_str()).collect();
    assert!(
        ids.contains(&"breakdown-phases") && ids.contains(&"breakdown-flame"),
        "{ids:?}"
    );
    let flame = driver.execute(
        "return [...new Set([...document.querySelectorAll('svg[data-chart=breakdown-flame] [data-series]')].map(m => m.dataset.series))]",
        json!([]),
    );
    for name in ["all requests", "r1", "r2", "prefill", "decode"] {
        assert!(
            flame.as_array().unwrap().contains(&json!(name)),
            "the flame chart lacks {name}: {flame}"
        );
    }
    // the slow slice's mean prefill is the longer one in the phase bars
    let prefill = driver.execute(
        "return Object.fromEntries([...document.querySelectorAll('svg[data-chart=breakdown-phases] rect[data-series=prefill]')]
           .map(r => [r.querySelector('title').textContent.split(' ')[0], Number(r.getAttribute('width'))]))",
        json!([]),
    );
    assert!(
        prefill["r2"].as_f64().unwrap() > 1.3 * prefill["r1"].as_f64().unwrap(),
        "r2's prefill is not the longer: {prefill}"
    );

    // requests: paging, then a request with token events opens its detail page
    driver.navigate(&format!("{base}/?page=requests&range=1h"));
    wait_for_page(&driver, "requests");
    let first = |driver: &Driver| {
        driver.execute(
            "return document.querySelector('[data-request-link]').textContent",
            json!([]),
        )
    };
    let page_one = first(&driver);
    click(&driver, "a[rel=next]");
    wait_for_page(&driver, "requests");
    assert!(driver.current_url().contains("offset=100"));
    assert_ne!(
        first(&driver),
        page_one,
        "the next page shows other requests"
    );
    driver.navigate(&format!("{base}/?page=requests&range=1h&tokens=1"));
    wait_for_page(&driver, "requests");
    click(&driver, "[data-request-link]");
    wait_for_page(&driver, "request");
    let charts = check_page(&driver, &out, "request", 4);
    let ids: Vec<&str> = charts.iter().filter_map(|c| c["id"].as_str()).collect();
    for id in ["request-phases", "trace-waterfall", "token-timeline"] {
        assert!(ids.contains(&id), "the request page lacks {id}: {ids:?}");
    }
    assert!(
        ids.iter().filter(|id| id.starts_with("metric-")).count() >= 3,
        "engine metrics at that moment: {ids:?}"
    );
    let detail = driver.execute(
        "return { spans: document.querySelectorAll('svg[data-chart=trace-waterfall] g[data-series]').length,
                  phases: [...document.querySelectorAll('svg[data-chart=trace-waterfall] [data-phase]')].map(p => p.dataset.phase),
                  tokens: Number(document.querySelector('[data-tokens]').dataset.tokens),
                  dots: document.querySelectorAll('svg[data-chart=token-timeline] circle').length }",
        json!([]),
    );
    assert!(
        detail["spans"].as_u64().unwrap() >= 2,
        "gateway and engine spans: {detail}"
    );
    assert!(
        detail["phases"]
            .as_array()
            .unwrap()
            .contains(&json!("decode")),
        "{detail}"
    );
    assert!(detail["tokens"].as_u64().unwrap() > 0, "{detail}");
    assert_eq!(detail["tokens"], detail["dots"], "one dot per token event");
    // a log line of the request opens its lineage on the logs page, which finds the request
    let request_id = driver
        .execute(
            "return document.querySelector('[data-request]').dataset.request",
            json!([]),
        )
        .as_str()
        .unwrap()
        .to_string();
    click(&driver, "[data-lineage-link]");
    wait_for_page(&driver, "logs");
    let lineage = driver.wait_for(
        "the lineage panel",
        "const el = document.querySelector('[data-lineage-request]'); return el ? el.dataset.lineageRequest : null",
        Duration::from_secs(30),
    );
    assert_eq!(lineage, json!(request_id), "the lineage names the request");

    // an attrs value on the dimensions page opens its slice's heatmap
    driver.navigate(&format!("{base}/?page=dimensions&range=1h"));
    wait_for_page(&driver, "dimensions");
    click(&driver, "[data-table=dimensions] a[href*='filter=attrs.']");
    wait_for_page(&driver, "heatmap");
    assert!(driver.current_url().contains("filter=attrs."));
    check_page(&driver, &out, "heatmap-attrs-slice", 1);

    // the console channel works: a deliberate error is seen
    driver.assert_console_channel_works();
}
