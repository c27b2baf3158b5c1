//! The web UI's login in headless Chromium, against `infersight serve` with authentication on:
//! a browser without a token gets the login form (not a page of refusals); a wrong token is
//! refused on the form; a viewer token opens the overview and the header says who is logged in;
//! the session cookie is out of the page's scripts' reach (HttpOnly) yet authenticates plain
//! same-origin requests (a report link works); logging out brings the form back and the cookie
//! no longer works. With `[auth.oidc] redirect_url`, the login page offers the identity
//! provider (a test provider on 127.0.0.1): one click goes there and back, and the header names
//! the provider's user with the role its ID token gives. Without Chromium it skips (fails with
//! `INFERSIGHT_TEST_CHROMIUM=1`).

use std::time::Duration;

use infersight_testkit::chromium::{self, Driver};
use serde_json::json;

use crate::support::Server;
use crate::ui::{check_page, click, wait_for_page};

/// The status of a same-origin `GET path` from the page (cookies go along, as for a link).
fn status_from_page(driver: &Driver, path: &str) -> u64 {
    driver
        .execute_async(
            "const done = arguments[arguments.length - 1];
             fetch(arguments[0]).then(r => done(r.status), e => done(String(e)));",
            json!([path]),
        )
        .as_u64()
        .unwrap_or(0)
}

/// Types `token` into the login form and submits it.
fn log_in(driver: &Driver, token: &str) {
    let submitted = driver.execute(
        "const input = document.getElementById('login-token');
         if (!input) return false;
         input.value = arguments[0];
         input.form.requestSubmit();
         return true;",
        json!([token]),
    );
    assert_eq!(submitted, json!(true), "no login form");
}

fn wait_for_login_form(driver: &Driver, what: &str) -> serde_json::Value {
    driver.wait_for(
        what,
        "const m = document.getElementById('view');
         return m && m.dataset.state === 'login' && document.getElementById('login-token')
           ? { text: m.innerText, who: document.getElementById('who').hidden } : null;",
        Duration::from_secs(30),
    )
}

#[test]
fn the_ui_logs_in_with_a_token_and_says_who_is_logged_in() {
    if !chromium::available("the_ui_logs_in_with_a_token_and_says_who_is_logged_in") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = format!(
        "[store]\nfsync = \"never\"\n[auth]\ntokens_file = \"{}\"\n",
        dir.path().join("tokens.json").display()
    );
    std::fs::write(data.with_extension("toml"), &config).unwrap();
    let token = crate::support::create_token(&data.with_extension("toml"), "ui-viewer", "viewer");
    let server = Server::start(&data, &config);
    let base = format!("http://{}", server.api);
    let out = chromium::screenshot_dir(env!("CARGO_MANIFEST_DIR"), "ui-screenshots");
    let profile = tempfile::tempdir().unwrap();
    let mut driver = Driver::start();
    driver.open_session(profile.path());
    driver.set_window_size(1280, 800);

    // no token: the login form, and no one in the header
    driver.navigate(&format!("{base}/?page=overview"));
    let form = wait_for_login_form(&driver, "the login form");
    assert_eq!(form["who"], json!(true), "{form}");
    assert_eq!(status_from_page(&driver, "/api/v1/incidents"), 401);

    // a wrong token is refused on the form
    log_in(&driver, "ist_0000");
    let refused = driver.wait_for(
        "the refusal",
        "const s = document.querySelector('[data-login-status]');
         return s && s.textContent.includes('unknown') ? s.textContent : null;",
        Duration::from_secs(30),
    );
    assert!(
        refused.as_str().unwrap_or_default().contains("unknown"),
        "{refused}"
    );

    // the viewer's token: the overview, and the header names the token and its role
    log_in(&driver, &token);
    wait_for_page(&driver, "overview");
    let who = driver.execute(
        "const w = document.getElementById('who'); return w.hidden ? null : w.innerText",
        json!([]),
    );
    let who = who.as_str().unwrap_or_default();
    assert!(who.contains("ui-viewer (viewer)"), "{who}");
    let cookies = driver.execute("return document.cookie", json!([]));
    assert!(
        !cookies.as_str().unwrap_or_default().contains("ist_"),
        "the token is readable by scripts: {cookies}"
    );
    assert_eq!(status_from_page(&driver, "/api/v1/incidents"), 200);
    // the console so far holds only the browser's lines of the refusals before the login
    let before = driver.console_errors();
    assert!(
        before.iter().all(|e| e["message"]
            .as_str()
            .is_some_and(|m| m.contains("status of 401"))),
        "{before:#?}"
    );
    // a reload keeps the session
    driver.navigate(&format!("{base}/?page=incidents"));
    wait_for_page(&driver, "incidents");
    check_page(&driver, &out, "login-incidents", 0);

    // logging out: the form again, and the cookie no longer opens anything
    click(&driver, "[data-action=\"log-out\"]");
    wait_for_login_form(&driver, "the login form after logging out");
    assert_eq!(status_from_page(&driver, "/api/v1/incidents"), 401);
}

#[test]
fn the_ui_logs_in_through_the_identity_provider() {
    if !chromium::available("the_ui_logs_in_through_the_identity_provider") {
        return;
    }
    use infersight_testkit::oidc_provider::{Behaviour, OidcProvider};
    let provider = OidcProvider::start(Behaviour {
        role: "viewer".into(),
        orgs: Vec::new(),
        ..Behaviour::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = crate::support::free_port();
    let config = format!(
        "[store]\nfsync = \"never\"\n[auth]\ntokens_file = \"{}\"\n[auth.oidc]\n\
         issuer = \"{url}\"\naudience = \"infersight\"\njwks_url = \"{url}/jwks\"\n\
         redirect_url = \"http://127.0.0.1:{port}/api/v1/session/oidc/callback\"\n",
        dir.path().join("tokens.json").display(),
        url = provider.url,
    );
    let server = crate::support::Server::start_on_api_port(&data, &config, port);
    let base = format!("http://{}", server.api);
    let profile = tempfile::tempdir().unwrap();
    let mut driver = Driver::start();
    driver.open_session(profile.path());
    driver.set_window_size(1280, 800);

    driver.navigate(&format!("{base}/?page=overview"));
    wait_for_login_form(&driver, "the login form");
    let offered = driver.wait_for(
        "the identity provider's button",
        "const a = document.querySelector('[data-login-oidc]');
         return a && !a.closest('[hidden]') ? a.getAttribute('href') : null;",
        Duration::from_secs(30),
    );
    assert_eq!(offered, json!("/api/v1/session/oidc/login"));
    click(&driver, "[data-login-oidc]");
    // to the provider and back, then on to the UI: the overview, the provider's user in the header
    wait_for_page(&driver, "overview");
    let who = driver.wait_for(
        "who is logged in",
        "const w = document.getElementById('who'); return w.hidden ? null : w.innerText",
        Duration::from_secs(30),
    );
    assert!(
        who.as_str()
            .unwrap_or_default()
            .contains("oidc:alice (viewer)"),
        "{who}"
    );
    assert_eq!(provider.issued(), 1);
    assert_eq!(status_from_page(&driver, "/api/v1/incidents"), 200);
    let cookies = driver.execute("return document.cookie", json!([]));
    assert!(
        !cookies.as_str().unwrap_or_default().contains("eyJ"),
        "the ID token is readable by scripts: {cookies}"
    );
}

/// Org isolation in the browser: `globex` stores a LoRA × KV regression whose dimension
/// attributes carry its own names (`globex_kv_policy`, `globex_lora`), `acme` a healthy fleet,
/// each ingested for its org. Logged in with acme's analyst token, no page (overview, heatmap,
/// breakdown, dimensions, requests, logs, incidents) shows anything of globex; logged in with
/// globex's, the dimensions page does show its names, so the pages show such names at all.
#[test]
fn each_orgs_analyst_sees_only_its_own_fleet_on_every_page() {
    if !chromium::available("each_orgs_analyst_sees_only_its_own_fleet_on_every_page") {
        return;
    }
    use crate::support::{ok, run};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let fleets = [
        (
            "globex",
            "lora_kv_regression",
            &[
                "--dimension",
                "kv_cache_policy=globex_kv_policy",
                "--dimension",
                "lora_adapters=globex_lora",
            ][..],
        ),
        ("acme", "healthy", &[][..]),
    ];
    for (org, scenario, extra) in fleets {
        let sim = dir.path().join(org);
        let mut args = vec![
            "simulate",
            "--scenario",
            scenario,
            "--seed",
            "3",
            "--duration",
            "20m",
            "--start=-22m",
            "--workers",
            "4",
            "--rate",
            "6",
            "--quiet",
            "--out",
            sim.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        ok(&run(&args), "simulate");
        let files: Vec<String> = ["traces.jsonl", "logs.jsonl", "metrics.jsonl"]
            .iter()
            .map(|f| sim.join(f).to_string_lossy().into_owned())
            .collect();
        let mut args = vec!["ingest", "--quiet", "--org", org];
        args.extend(["--data", data.to_str().unwrap()]);
        args.extend(files.iter().map(String::as_str));
        ok(&run(&args), "ingest");
    }
    let config = format!(
        "[store]\nfsync = \"never\"\n[auth]\ntokens_file = \"{}\"\n",
        dir.path().join("tokens.json").display()
    );
    let config_path = data.with_extension("toml");
    std::fs::write(&config_path, &config).unwrap();
    let analyst = |org: &str| {
        let name = format!("{org}-analyst");
        let output = run(&[
            "tokens",
            "create",
            "--name",
            &name,
            "--role",
            "analyst",
            "--tenant",
            org,
            "--config",
            config_path.to_str().unwrap(),
        ]);
        ok(&output, "infersight tokens create").trim().to_string()
    };
    let (acme, globex) = (analyst("acme"), analyst("globex"));
    let server = Server::start(&data, &config);
    let base = format!("http://{}", server.api);
    let pages = [
        ("overview", ""),
        ("heatmap", ""),
        ("breakdown", "&by=model_version"),
        ("dimensions", ""),
        ("requests", ""),
        ("logs", ""),
        ("incidents", ""),
    ];
    for (token, own) in [(&acme, "acme"), (&globex, "globex")] {
        // a browser of its own for each login
        let profile = tempfile::tempdir().unwrap();
        let mut driver = Driver::start();
        driver.open_session(profile.path());
        driver.set_window_size(1280, 800);
        driver.navigate(&format!("{base}/?page=overview"));
        wait_for_login_form(&driver, "the login form");
        log_in(&driver, token);
        wait_for_page(&driver, "overview");
        let mut named = Vec::new();
        for (page, query) in pages {
            driver.navigate(&format!("{base}/?page={page}&range=1h{query}"));
            wait_for_page(&driver, page);
            // the page's requests have all answered once it is ready; the text is what it shows
            let text = driver.execute("return document.body.innerText", json!([]));
            let text = text.as_str().unwrap_or_default();
            if text.contains("globex_") {
                named.push(page);
            }
            assert!(
                own == "globex" || !text.contains("globex_"),
                "acme's analyst sees globex on {page}: {}",
                text.get(..600).unwrap_or(text)
            );
        }
        if own == "globex" {
            assert!(
                named.contains(&"dimensions"),
                "globex's own names are on no page but {named:?}"
            );
        }
    }
}
