//! The baseline comparison of Dimensions, Breakdown and Requests beyond `lora_kv_regression`,
//! and its window picker, in headless Chromium (issue 24 item 1).
//!
//! `slow_worker` (one pod's prefill and decode ×2.2) and `batching_misconfig` (one deployment's
//! queue grows: a two-dimension slice) are simulated and ingested one after the other. On each,
//! the incident and the baseline of the ground truth are picked on the page, not brushed: typed
//! into the Dimensions page's picker for the first, and for the second offered by a stored
//! incident that carries them (the picker's default and its list). Each time the injected
//! slice's value is the top change among the slow requests on Dimensions, the first row of the
//! breakdown by its dimension (its p99 risen), and the request that Requests ranks most unusual
//! belongs to it (the Requests picker switches to that order). `ui_fresh.rs` checks the same on
//! `lora_kv_regression` with the windows in the URL. Screenshots go to
//! `target/ui-screenshots/compare-*.png`; without Chromium it skips as `ui.rs` does.

use std::path::Path;

use infersight_rca::RcaReport;
use infersight_rca::incidents::IncidentStore;
use infersight_testkit::chromium::{self, Driver};
use serde_json::{Value, json};

use crate::support::{Server, rows, simulate_and_ingest};
use crate::ui::{CONFIG, check_page, click, wait_for_page};

/// How the windows reach the page: typed into the picker, or offered by a stored incident.
#[derive(Clone, Copy, Debug)]
enum Picked {
    Typed,
    StoredIncident,
}

/// The scenarios, besides `ui_fresh.rs`'s `lora_kv_regression`, and how each is picked.
const SCENARIOS: [(&str, Picked); 2] = [
    ("slow_worker", Picked::Typed),
    ("batching_misconfig", Picked::StoredIncident),
];

/// The ground truth's first cause as `(key, value)` pairs.
fn truth_pairs(truth: &Value) -> Vec<(String, String)> {
    truth["root_causes"][0]["dimensions"]
        .as_object()
        .expect("the truth names a slice")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect()
}

/// Stores an incident whose RCA compared the ground truth's windows (as `POST /api/v1/rca`
/// over them would, without running one).
fn store_incident_with_windows(data: &Path, truth: &Value) -> String {
    let window = |w: &Value| json!({"since": w["start"], "until": w["end"]});
    let verdict: RcaReport = serde_json::from_value(json!({
        "symptom": null,
        "root_causes": [{"rank": 1, "dimensions": truth["root_causes"][0]["dimensions"],
                         "explained_fraction": 0.9, "score": 3.0, "evidence": []}],
        "signals": [], "log_evidence": [], "suggestions": [], "checklist": [],
        "fleet_wide": false,
        "incident_window": window(&truth["incident_window"]),
        "baseline_window": window(&truth["baseline_window"]),
        "window_source": "brushed", "verdict": "ttft rose on the injected slice",
        "elapsed_ms": 1.0, "timings_ms": {}
    }))
    .unwrap();
    IncidentStore::open(data).create(&verdict).unwrap().id
}

/// `[data-x]` attribute of the first row of a table, and its text.
fn first_row(driver: &Driver, table: &str) -> Value {
    driver.execute(
        "const tr = document.querySelector(`[data-table=${arguments[0]}] tbody tr`);
         return tr ? { change: tr.dataset.change || null, value: tr.dataset.value || null,
                       delta: tr.querySelector('[data-change]') ? tr.querySelector('[data-change]').dataset.change : null,
                       unusual: tr.querySelector('[data-unusual]') ? Number(tr.querySelector('[data-unusual]').dataset.unusual) : null,
                       request: tr.querySelector('[data-request-link]') ? tr.querySelector('[data-request-link]').innerText : null } : null",
        json!([table]),
    )
}

/// The URL's comparison keys, in ms.
fn url_windows(driver: &Driver) -> [f64; 4] {
    let keys = driver.execute(
        "const p = new URLSearchParams(location.search);
         return ['sel_since', 'sel_until', 'base_since', 'base_until'].map(k => Number(p.get(k)))",
        json!([]),
    );
    let keys: Vec<f64> = keys
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap_or(f64::NAN))
        .collect();
    [keys[0], keys[1], keys[2], keys[3]]
}

/// The ground truth's windows in ms: incident since/until, baseline since/until.
fn truth_windows(driver: &Driver, truth: &Value) -> [f64; 4] {
    let ms = |v: &Value| {
        driver
            .execute("return Date.parse(arguments[0])", json!([v]))
            .as_f64()
            .unwrap()
    };
    let (w, b) = (&truth["incident_window"], &truth["baseline_window"]);
    [
        ms(&w["start"]),
        ms(&w["end"]),
        ms(&b["start"]),
        ms(&b["end"]),
    ]
}

/// Types the four windows into the picker on the page and submits it.
fn type_windows(driver: &Driver, windows: [f64; 4]) {
    let typed = driver.execute(
        "const [picker, ms] = [document.querySelector('[data-compare-picker]'), arguments[0]];
         if (!picker) return false;
         const iso = (t) => new Date(t).toISOString().slice(0, 19).replace('T', ' ');
         ['sel-from', 'sel-to', 'base-from', 'base-to'].forEach((name, i) => {
           picker.querySelector(`[data-compare-input=${name}]`).value = iso(ms[i]);
         });
         return true",
        json!([windows]),
    );
    assert_eq!(typed, json!(true), "no window picker on the page");
    click(driver, "[data-compare-picker] [data-action=compare]");
}

/// Jaccard similarity, over the incident window's requests, of those with `key=value` (a column
/// or `attrs.<key>`, as the page names it) and those of the injected slice: a value that selects
/// the same requests is the same answer (the variation matrix's judge accepts it too), such as
/// the misconfigured deployment's own `serving.batch.wait_ms`.
fn same_requests(
    server: &Server,
    truth: &Value,
    (key, value): (&str, &str),
    pairs: &[(String, String)],
) -> f64 {
    let text = |key: &str| match key.strip_prefix("attrs.") {
        Some(attr) => format!("json_get(attrs, '{attr}')"),
        None => format!("CAST({key} AS VARCHAR)"),
    };
    let slice: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{} = '{v}'", text(k)))
        .collect();
    let window = &truth["incident_window"];
    let (since, until) = (
        window["start"].as_str().unwrap(),
        window["end"].as_str().unwrap(),
    );
    let answer = server.sql(&format!(
        "SELECT sum(CASE WHEN a AND b THEN 1 ELSE 0 END) AS in_both, sum(CASE WHEN a OR b THEN 1 ELSE 0 END) AS in_either
         FROM (SELECT COALESCE({} = '{value}', false) AS a, COALESCE({}, false) AS b FROM requests
               WHERE ts >= CAST('{since}' AS TIMESTAMP) AND ts < CAST('{until}' AS TIMESTAMP)) x",
        text(key),
        slice.join(" AND ")
    ));
    let row = rows(&answer).into_iter().next().expect("one row");
    let number = |name: &str| {
        row.iter()
            .find(|(c, _)| c == name)
            .and_then(|(_, v)| v.as_f64())
            .unwrap_or(0.0)
    };
    number("in_both") / number("in_either").max(1.0)
}

/// The injected slice's value leads Dimensions, the breakdown by its key and Requests.
fn check_the_slice_leads(
    driver: &Driver,
    server: &Server,
    out: &Path,
    name: &str,
    truth: &Value,
    query: &str,
) {
    let base = format!("http://{}", server.api);
    let pairs = truth_pairs(truth);
    let top = first_row(driver, "dimension-changes");
    let top = top["change"].as_str().expect("a ranked change").to_string();
    let (top_key, top_value) = top.split_once('=').unwrap();
    let same = pairs.iter().any(|(k, v)| top == format!("{k}={v}"))
        || same_requests(server, truth, (top_key, top_value), &pairs) >= 0.95;
    assert!(
        same,
        "{name}: the top change {top} is not the injected slice {pairs:?}"
    );
    check_page(driver, out, &format!("compare-{name}-dimensions"), 0);

    // the breakdown by the top change's dimension (a column; else the slice's first): that
    // value first, its p99 risen
    let (key, value) = if top_key.starts_with("attrs.") {
        (pairs[0].0.as_str(), pairs[0].1.as_str())
    } else {
        (top_key, top_value)
    };
    driver.navigate(&format!("{base}/?page=breakdown&range=1h&by={key}{query}"));
    wait_for_page(driver, "breakdown");
    let first = first_row(driver, "breakdown");
    assert_eq!(first["value"], json!(value), "{name}: {first}");
    let rise: f64 = first["delta"].as_str().unwrap().parse().unwrap();
    assert!(rise > 0.2, "{name}: p99 rose only {rise}: {first}");
    assert!(
        driver.execute("return !!document.querySelector('[data-compare-picker] [data-compare-input=sel-from]').value", json!([])) == json!(true),
        "{name}: the breakdown's picker shows the windows compared"
    );
    check_page(driver, out, &format!("compare-{name}-breakdown"), 3);

    // Requests: the picker applies the windows and orders by how unusual each request is
    driver.navigate(&format!("{base}/?page=requests&range=1h{query}"));
    wait_for_page(driver, "requests");
    click(driver, "[data-compare-picker] [data-action=compare]");
    driver.wait_for(
        "the most unusual order",
        "return new URLSearchParams(location.search).get('order') === 'most_unusual'
           && document.getElementById('view').dataset.state === 'ready' ? true : null",
        std::time::Duration::from_secs(60),
    );
    let first = first_row(driver, "requests");
    assert!(first["unusual"].as_f64().unwrap() > 2.0, "{name}: {first}");
    let id = first["request"].as_str().unwrap();
    let columns: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
    let answer = server.sql(&format!(
        "SELECT {} FROM requests WHERE request_id = '{id}'",
        columns.join(", ")
    ));
    let row = rows(&answer)
        .into_iter()
        .next()
        .expect("the request is stored");
    for (k, v) in &pairs {
        let stored = row.iter().find(|(c, _)| c == k).map(|(_, v)| v.clone());
        assert_eq!(
            stored,
            Some(json!(v)),
            "{name}: request {id} is not of {k}={v}"
        );
    }
    check_page(driver, out, &format!("compare-{name}-requests"), 0);
}

#[test]
fn the_baseline_comparison_finds_the_injected_slice_in_two_more_scenarios() {
    if !chromium::available(
        "the_baseline_comparison_finds_the_injected_slice_in_two_more_scenarios",
    ) {
        return;
    }
    let out = chromium::screenshot_dir(env!("CARGO_MANIFEST_DIR"), "ui-screenshots");
    let profile = tempfile::tempdir().unwrap();
    let mut driver = Driver::start();
    driver.open_session(profile.path());
    driver.set_window_size(1440, 900);
    for (scenario, picked) in SCENARIOS {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        // 30 minutes ending two minutes ago: "last hour" holds them
        let truth = simulate_and_ingest(
            dir.path(),
            &data,
            (scenario, 1, "30m"),
            &["--start=-32m"],
            &["traces.jsonl"],
        );
        let stored = matches!(picked, Picked::StoredIncident)
            .then(|| store_incident_with_windows(&data, &truth));
        let server = Server::start(&data, CONFIG);
        let base = format!("http://{}", server.api);
        driver.navigate(&format!("{base}/?page=dimensions&range=1h"));
        wait_for_page(&driver, "dimensions");
        let truth_ms = truth_windows(&driver, &truth);
        match (picked, &stored) {
            (Picked::Typed, _) => {
                // nothing stored: nothing compared until the windows are picked
                assert!(
                    driver.execute("return !!document.querySelector('[data-compare=none] [data-compare-picker=none]')", json!([])) == json!(true),
                    "{scenario}: the page offers the picker without windows"
                );
                type_windows(&driver, truth_ms);
                wait_for_page(&driver, "dimensions");
                let url = url_windows(&driver);
                for (got, want) in url.iter().zip(truth_ms) {
                    assert!(
                        (got - want).abs() < 1000.0,
                        "{scenario}: {url:?} vs {truth_ms:?}"
                    );
                }
            }
            (Picked::StoredIncident, Some(id)) => {
                // the stored incident is the default, and the picker lists it as chosen
                let chosen = driver.execute(
                    "const s = document.querySelector('[data-compare-incident]');
                     return { value: s && s.value, from: document.querySelector('[data-compare-picker]').dataset.comparePicker,
                              filled: document.querySelector('[data-compare-input=base-to]').value }",
                    json!([]),
                );
                assert_eq!(chosen["value"], json!(id), "{scenario}: {chosen}");
                assert_eq!(
                    chosen["from"],
                    json!(format!("incident {id}")),
                    "{scenario}: {chosen}"
                );
                // picking it puts its windows in the URL (shareable), same answer
                click(&driver, "[data-compare-picker] [data-action=compare]");
                wait_for_page(&driver, "dimensions");
                let url = url_windows(&driver);
                for (got, want) in url.iter().zip(truth_ms) {
                    assert!(
                        (got - want).abs() < 1000.0,
                        "{scenario}: {url:?} vs {truth_ms:?}"
                    );
                }
            }
            (Picked::StoredIncident, None) => unreachable!("stored above"),
        }
        let url = url_windows(&driver);
        let query = format!(
            "&sel_since={}&sel_until={}&base_since={}&base_until={}",
            url[0], url[1], url[2], url[3]
        );
        check_the_slice_leads(&driver, &server, &out, scenario, &truth, &query);
    }
    driver.assert_console_channel_works();
}
