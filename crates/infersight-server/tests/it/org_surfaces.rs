//! Org isolation on the read surfaces beyond SQL (issue 22, tenants): SLIs from rollups,
//! derived SLIs, dimensions, freshness, RCA, the SLIs on `/metrics`, and incidents. `acme`
//! exports a healthy fleet, `globex-inc` a fleet with a slow worker whose models, pods and nodes
//! are all named `globex-…`; each org's analyst asks every surface. Acme's answers never name anything of globex (they would: the
//! slow worker is what an RCA over both fleets finds), and globex's do, so each surface shows
//! names at all.

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use infersight_model::notice::IncidentNotifier;
use infersight_model::time::now_ns;
use infersight_sim::{Scenario, SimConfig};
use infersight_store::StorageBackend;
use tower::ServiceExt;

use super::orgs::{ACME, GLOBEX, Server, export, exports_of, server};

const FOREIGN: &str = "globex-";

/// The surfaces asked, as (method, uri, body).
const SURFACES: &[(&str, &str, &str)] = &[
    (
        "GET",
        "/api/v1/sli?sli=ttft&by=worker,model&since=-1h&step=1m",
        "",
    ),
    ("GET", "/api/v1/sli/derived?since=-1h", ""),
    ("GET", "/api/v1/dimensions?since=-1h", ""),
    ("GET", "/api/v1/freshness", ""),
    ("POST", "/api/v1/rca", "{}"),
    ("GET", "/metrics", ""),
];

/// Ten minutes of `scenario` at 4 workers and 4 requests/s, ending now. (Ending a minute ago,
/// a run that started in a minute's last seconds had its SLOs evaluated a minute later on data
/// that no longer reached the last complete minute: no alert fired, no incident opened.)
fn fleet(scenario: Scenario) -> SimConfig {
    let mut config = SimConfig::new(scenario);
    config.seed = 11;
    config.workers = 4;
    config.rate_per_s = 4.0;
    config.duration_s = 600.0;
    config.start_ns = now_ns() - 600_000_000_000;
    config
}

fn fleets() -> &'static (Server, tokio::runtime::Runtime) {
    static SHARED: OnceLock<(Server, tokio::runtime::Runtime)> = OnceLock::new();
    SHARED.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let server = server();
        runtime.block_on(async {
            for (org, ingest, _) in &server.tokens {
                let bodies = if *org == GLOBEX {
                    exports_of(fleet(Scenario::SlowWorker), FOREIGN)
                } else {
                    exports_of(fleet(Scenario::Healthy), "")
                };
                let half = bodies.len() / 2;
                for (index, body) in bodies.into_iter().enumerate() {
                    assert_eq!(
                        export(&server.otlp, ingest, None, body).await,
                        StatusCode::OK
                    );
                    if index == half {
                        server.store.flush().unwrap();
                    }
                }
            }
        });
        (server, runtime)
    })
}

async fn ask(
    api: &axum::Router,
    token: &str,
    (method, uri, body): (&str, &str, &str),
) -> (StatusCode, String) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = api.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

#[test]
fn each_org_sees_only_its_own_fleet_on_every_read_surface() {
    let (server, runtime) = fleets();
    runtime.block_on(async {
        let mut leaks = Vec::new();
        let mut blind = Vec::new();
        for (org, _, analyst) in &server.tokens {
            for &surface in SURFACES {
                let (status, text) = ask(&server.api, analyst, surface).await;
                assert_eq!(status, StatusCode::OK, "{org}: {surface:?}: {text}");
                let names_globex = text.contains(FOREIGN);
                if *org == ACME && names_globex {
                    let at = text.find(FOREIGN).unwrap_or(0);
                    let around = text
                        .get(at.saturating_sub(80)..(at + 80).min(text.len()))
                        .unwrap_or(&text);
                    leaks.push(format!("{}: …{around}…", surface.1));
                }
                if *org == GLOBEX && !names_globex {
                    blind.push(surface.1);
                }
            }
        }
        assert!(leaks.is_empty(), "acme saw globex's fleet: {leaks:#?}");
        assert!(
            blind.is_empty(),
            "globex's own names missing from {blind:?}"
        );
    });
}

/// The id of the incident an RCA by `token`'s caller stores.
async fn incident_of(api: &axum::Router, token: &str) -> String {
    let (status, text) = ask(api, token, ("POST", "/api/v1/rca", "{}")).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let rca: serde_json::Value = serde_json::from_str(&text).unwrap();
    let id = rca["incident_id"].as_str();
    id.expect("the RCA stored an incident").to_string()
}

/// An incident its RCA stored for globex is globex's alone: acme neither lists it nor reads it
/// or its report (404, as if it did not exist).
#[test]
fn an_orgs_incidents_are_its_own() {
    let (server, runtime) = fleets();
    runtime.block_on(async {
        let (_, _, acme) = &server.tokens[0];
        let (_, _, globex) = &server.tokens[1];
        let id = &incident_of(&server.api, globex).await;
        let list = ("GET", "/api/v1/incidents", "");
        let (_, theirs) = ask(&server.api, globex, list).await;
        assert!(theirs.contains(id), "{theirs}");
        let (status, ours) = ask(&server.api, acme, list).await;
        assert_eq!(status, StatusCode::OK);
        assert!(!ours.contains(id) && !ours.contains(FOREIGN), "{ours}");
        for uri in [
            format!("/api/v1/incidents/{id}"),
            format!("/api/v1/incidents/{id}/report?format=json&llm=false"),
        ] {
            let (status, text) = ask(&server.api, globex, ("GET", &uri, "")).await;
            assert_eq!(status, StatusCode::OK, "globex: {uri}: {text}");
            let (status, text) = ask(&server.api, acme, ("GET", &uri, "")).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "acme: {uri}: {text}");
        }
    });
}

/// The process's whole-fleet state (SLO, alert and action state evaluated over every org's
/// rows, the store's statistics and gauges) is shown to an admin; another org's analyst sees
/// none of it (here all named after globex), and its statistics count its own rows only.
#[test]
fn process_state_is_an_admins_and_other_orgs_see_only_their_own_rows() {
    let (server, runtime) = fleets();
    server
        .alerts
        .evaluate(server.store.as_ref(), now_ns())
        .unwrap();
    runtime.block_on(async {
        let (_, _, acme) = &server.tokens[0];
        for uri in [
            "/api/v1/slo",
            "/api/v1/alerts",
            "/api/v1/actions",
            "/metrics",
        ] {
            let (status, text) = ask(&server.api, acme, ("GET", uri, "")).await;
            assert_eq!(status, StatusCode::OK, "acme: {uri}: {text}");
            assert!(!text.contains(FOREIGN), "acme: {uri}: {text}");
            let (status, whole) = ask(&server.api, &server.admin, ("GET", uri, "")).await;
            assert_eq!(status, StatusCode::OK, "admin: {uri}: {whole}");
            assert!(whole.contains("globex-ttft"), "admin: {uri}: {whole}");
        }
        // an org's caller gets its SLIs and nothing that counts every org's data: no store
        // gauge, no receiver or pipeline counter
        let (_, text) = ask(&server.api, acme, ("GET", "/metrics", "")).await;
        let foreign: Vec<&str> = text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .filter(|l| !l.starts_with("infersight_sli_"))
            .collect();
        assert!(foreign.is_empty(), "{foreign:?}");
        assert!(text.contains("infersight_sli_"), "{text}");
        let (_, whole) = ask(&server.api, &server.admin, ("GET", "/metrics", "")).await;
        assert!(whole.contains("infersight_store_segment_rows"), "{whole}");
        assert!(
            whole.contains("infersight_receiver_records_total"),
            "{whole}"
        );

        let (status, text) = ask(&server.api, acme, ("GET", "/api/v1/stats", "")).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let stats: serde_json::Value = serde_json::from_str(&text).unwrap();
        let sql = r#"{"sql": "SELECT count(*) AS n FROM requests"}"#;
        let (_, counted) = ask(&server.api, acme, ("POST", "/api/v1/query", sql)).await;
        let counted: serde_json::Value = serde_json::from_str(&counted).unwrap();
        let own = counted["rows"][0]["n"].as_u64().unwrap();
        assert!(own > 0);
        assert_eq!(
            stats["tables"]["requests"]["rows"].as_u64(),
            Some(own),
            "{text}"
        );
        assert!(!text.contains("wal_bytes"), "{text}");
        let (_, whole) = ask(&server.api, &server.admin, ("GET", "/api/v1/stats", "")).await;
        assert!(whole.contains("wal_bytes"), "{whole}");
    });
}

/// With authentication on the watcher runs per org (`org_watch`): an SLO no request meets
/// (TTFT under 1 ms) fires on both fleets, each org's watcher opens its own incident, and only
/// that org reads it (the other answers 404; neither lists the other's).
#[test]
fn the_watcher_opens_each_orgs_incidents_for_that_org_alone() {
    let (server, runtime) = fleets();
    runtime.block_on(async {
        let mut settings = infersight_rca::watch::WatchSettings::default();
        let slo = infersight_analytics::slo::Slo::new(
            "ttft-1ms",
            "ttft",
            Some(1.0),
            0.99,
            3_600_000_000_000,
            Vec::new(),
        )
        .unwrap();
        settings.slos = vec![slo];
        let incidents = server.reports.incidents().clone();
        let notices = Arc::new(Notices::default());
        let notifier: Arc<dyn IncidentNotifier> = notices.clone();
        let mut watchers = infersight_server::org_watch::OrgWatchers::new(
            settings,
            Some(incidents),
            Some(notifier),
        )
        .unwrap();
        let engine = infersight_query::QueryEngine::new(server.store.clone());
        let mut opened: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for (org, outcome) in watchers.step(&engine, now_ns()).await.unwrap() {
            for transition in outcome.unwrap().transitions {
                let ids = opened.entry(org.clone()).or_default();
                ids.extend(transition.report.incident_id);
            }
        }
        assert_eq!(watchers.orgs().collect::<Vec<_>>(), [ACME, GLOBEX]);
        for (org, _, _) in &server.tokens {
            let ids = opened.get(*org).cloned().unwrap_or_default();
            assert!(
                !ids.is_empty(),
                "{org}'s watcher opened nothing: {opened:?}"
            );
            for (reader, _, analyst) in &server.tokens {
                let (_, list) = ask(&server.api, analyst, ("GET", "/api/v1/incidents", "")).await;
                for id in &ids {
                    let uri = format!("/api/v1/incidents/{id}");
                    let (status, text) = ask(&server.api, analyst, ("GET", &uri, "")).await;
                    if reader == org {
                        assert_eq!(status, StatusCode::OK, "{reader}: {uri}: {text}");
                        assert!(list.contains(id.as_str()), "{reader}: {list}");
                    } else {
                        assert_eq!(status, StatusCode::NOT_FOUND, "{reader}: {uri}: {text}");
                        assert!(!list.contains(id.as_str()), "{reader}: {list}");
                    }
                }
            }
        }
        let (_, _, acme) = &server.tokens[0];
        let (_, list) = ask(&server.api, acme, ("GET", "/api/v1/incidents", "")).await;
        assert!(!list.contains(FOREIGN), "{list}");
        // each org's notices name it, for Alertmanager's routes
        let sent = notices.0.lock().unwrap().clone();
        for (org, ids) in &opened {
            for id in ids {
                let notice = (sent.iter())
                    .find(|n| &n.incident_id == id)
                    .unwrap_or_else(|| panic!("no notice of {id}"));
                let labels = infersight_server::notify::alertmanager::labels(notice);
                assert_eq!(labels.get("org"), Some(org), "{labels:?}");
            }
        }
    });
}

/// Every notice a watcher hands on.
#[derive(Debug, Default)]
struct Notices(std::sync::Mutex<Vec<infersight_model::notice::IncidentNotice>>);

impl IncidentNotifier for Notices {
    fn notify(
        &self,
        _: infersight_model::notice::Transition,
        notice: &infersight_model::notice::IncidentNotice,
    ) {
        self.0.lock().unwrap().push(notice.clone());
    }
}

/// The authorization matrix's "token of another org" caller, generated from the route table
/// (`auth::routes::ROUTES`), so a new route is asked too: every route an analyst may call,
/// called by acme's analyst with globex's incident as `{id}` and a statement over every
/// table, answers without a refusal and names nothing of globex (globex's incident is not
/// found); globex's analyst, on the same calls, does see its own names, so the calls reach data.
#[test]
fn every_route_called_with_a_token_of_another_org_names_nothing_of_it() {
    use infersight_server::auth::Role;
    use infersight_server::auth::role::Access;
    use infersight_server::auth::routes::ROUTES;
    let (server, runtime) = fleets();
    runtime.block_on(async {
        let (_, _, acme) = &server.tokens[0];
        let (_, _, globex) = &server.tokens[1];
        let id = &incident_of(&server.api, globex).await;
        let sql = serde_json::json!({
            "sql": "SELECT r.model, r.worker, s.service, l.body FROM requests r \
                    FULL JOIN spans s ON r.trace_id = s.trace_id \
                    FULL JOIN logs l ON l.trace_id = r.trace_id LIMIT 200"
        })
        .to_string();
        let mut asked = 0;
        let mut wrong = Vec::new();
        let mut globex_named = 0;
        for rule in ROUTES {
            let Access::Role(required) = rule.access else {
                continue;
            };
            if !Role::Analyst.grants(required) {
                continue;
            }
            let uri = match rule.path {
                "/api/v1/sli" => "/api/v1/sli?sli=ttft&by=worker,model&since=-1h".to_string(),
                "/api/v1/dimensions" => "/api/v1/dimensions?since=-1h".to_string(),
                "/api/v1/incidents/{id}/report" => {
                    format!("/api/v1/incidents/{id}/report?format=json&llm=false")
                }
                path => path.replace("{id}", id),
            };
            let body = match rule.path {
                "/api/v1/query" => sql.as_str(),
                _ if rule.method == "POST" => "{}",
                _ => "",
            };
            asked += 1;
            let (status, text) = ask(&server.api, acme, (rule.method, &uri, body)).await;
            let refused = matches!(status.as_u16(), 401 | 403 | 405);
            let foreign_id = rule.path.contains("{id}");
            if refused || text.contains(FOREIGN) || (foreign_id && status != StatusCode::NOT_FOUND)
            {
                let cut = text.get(..300).unwrap_or(&text);
                wrong.push(format!("{} {uri}: {status} {cut}", rule.method));
            }
            let (_, theirs) = ask(&server.api, globex, (rule.method, &uri, body)).await;
            globex_named += usize::from(theirs.contains(FOREIGN));
        }
        assert!(asked >= 10, "only {asked} routes asked");
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        assert!(
            globex_named >= 5,
            "globex's own calls named globex on only {globex_named} routes"
        );
    });
}
