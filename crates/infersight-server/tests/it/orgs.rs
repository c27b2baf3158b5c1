//! Org isolation through the server (issue 22, tenants): two orgs export the same simulated
//! scenario over OTLP/HTTP with their own ingest tokens (the second with its models renamed,
//! one export claiming the other org in X-Scope-OrgID, which is refused), then each org's
//! analyst token asks `POST /api/v1/query` statements of every shape (joins, CTEs, UNION,
//! subqueries, `json_get`, `information_schema`, counts a segment's statistics could answer) and
//! generated SELECTs: only the caller's rows come back. Without authentication the rows are the
//! default org's and every row is visible, as before orgs.

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use infersight_model::telemetry::Counters;
use infersight_model::time::now_ns;
use infersight_pipeline::{BatchWriter, Pipeline};
use infersight_query::QueryEngine;
use infersight_server::api::ApiState;
use infersight_server::auth::{Auth, AuthSettings, Role, TokenFile};
use infersight_server::queue::IngestQueue;
use infersight_sim::{MemorySink, Scenario, SimConfig, Simulator};
use infersight_store::{StorageBackend, Store, StoreOptions};
use proptest::prelude::*;
use tower::ServiceExt;

pub(crate) const ACME: &str = "acme";
pub(crate) const GLOBEX: &str = "globex-inc";

pub(crate) struct Server {
    _dir: tempfile::TempDir,
    pub(crate) auth: Arc<Auth>,
    pub(crate) otlp: axum::Router,
    pub(crate) api: axum::Router,
    /// org → (ingest token, analyst token)
    pub(crate) tokens: Vec<(&'static str, String, String)>,
    /// An admin token (bound to no org: the default org's rows, every org's process state).
    pub(crate) admin: String,
    pub(crate) store: Arc<Store>,
    /// One SLO over every org's requests, named after globex (`org_surfaces` evaluates it).
    pub(crate) alerts: Arc<infersight_server::alerts::AlertManager>,
    /// The incidents and reports behind the API.
    pub(crate) reports: Arc<infersight_server::reports::ReportService>,
}

fn token(file: &mut TokenFile, name: &str, role: Role, orgs: &[&str]) -> String {
    let now = now_ns();
    file.create(
        name,
        role,
        orgs.iter().map(|o| o.to_string()).collect(),
        Some(now + 3_600_000_000_000),
        now,
    )
    .unwrap()
}

/// The OTLP/HTTP receiver and the API as `serve` builds them, behind authentication, over one
/// store with an ingest queue.
pub(crate) fn server() -> Server {
    server_with(&std::collections::BTreeMap::new())
}

/// [`server`] with each org limited as `orgs` say (`[auth.orgs]`).
pub(crate) fn server_with(
    orgs: &std::collections::BTreeMap<String, infersight_server::auth::OrgLimitConfig>,
) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut options = StoreOptions::new(&data);
    // each org's own retention, as `serve` sets it
    options.retention_by_org = (orgs.iter())
        .filter_map(|(org, limits)| Some((org.clone(), limits.retention_duration()?)))
        .collect();
    let store = Arc::new(Store::open(options).unwrap());
    let backend: Arc<dyn StorageBackend> = store.clone();
    let counters = Arc::new(Counters::new());
    let writer = BatchWriter::new(Pipeline::new(Vec::new()), store.clone(), counters.clone());
    let (queue, _worker) = IngestQueue::start(writer, 64, counters.clone());
    let receivers = infersight_ingest::receivers::ReceiverState {
        sink: Arc::new(queue),
        mapper: Arc::default(),
        span_tree: Arc::default(),
        counters: counters.clone(),
        max_body_bytes: 64 << 20,
        in_flight: Arc::new(tokio::sync::Semaphore::new(8)),
        decoders: infersight_ingest::receivers::decoder_permits(0),
    };
    let mut file = TokenFile::default();
    let mut tokens = Vec::new();
    for org in [ACME, GLOBEX] {
        let ingest = token(&mut file, &format!("{org}-exporter"), Role::Ingest, &[org]);
        let analyst = token(&mut file, &format!("{org}-analyst"), Role::Analyst, &[org]);
        tokens.push((org, ingest, analyst));
    }
    let admin = token(&mut file, "admin", Role::Admin, &[]);
    let tokens_file = dir.path().join("tokens.json");
    file.write(&tokens_file).unwrap();
    let auth = Arc::new(
        Auth::open(AuthSettings {
            tokens_file: Some(tokens_file),
            trusted_proxies: Vec::new(),
            proxy_role: Role::Viewer,
        })
        .unwrap()
        .with_ingest_limits(infersight_server::auth::IngestLimiter::new(orgs))
        .with_query_limits(infersight_server::auth::OrgQuerySlots::new(orgs))
        .with_storage_limits(infersight_server::auth::StorageQuota::new(orgs)),
    );
    let otlp = infersight_server::auth::middleware::guard_otlp_http(
        infersight_ingest::receivers::otlp_http::router(receivers),
        Some(auth.clone()),
    );
    let alerts = Arc::new(slo_alerts());
    let reports = Arc::new(infersight_server::reports::ReportService::new(
        &data,
        infersight_report::ReportConfig::default(),
    ));
    let state = ApiState {
        engine: Arc::new(QueryEngine::new(backend.clone())),
        store: backend,
        counters,
        max_query_rows: 1_000_000,
        max_dimension_cardinality: 100,
        alerts: Some(alerts.clone()),
        actions: Some(Arc::new(actions(&data))),
        // every RCA verdict stored as an incident (org_surfaces reads them back)
        reports: Some(reports.clone()),
    };
    let api = infersight_server::api::router_with_auth(state, auth.clone());
    Server {
        _dir: dir,
        auth,
        otlp,
        api,
        tokens,
        admin,
        store,
        alerts,
        reports,
    }
}

/// The process-wide state `serve` keeps over every org's rows, each named after globex: an SLO
/// no request meets (TTFT under 1 ms), so it fires once evaluated.
fn slo_alerts() -> infersight_server::alerts::AlertManager {
    let slo = infersight_analytics::slo::Slo::new(
        "globex-ttft",
        "ttft",
        Some(1.0),
        0.99,
        3_600_000_000_000,
        Vec::new(),
    )
    .unwrap();
    infersight_server::alerts::AlertManager::new(vec![slo], None)
}

/// An automatic-action policy named after globex, in dry run.
fn actions(data: &std::path::Path) -> infersight_server::actions::ActionRunner {
    use infersight_rollup::{LatencySli, Sli};
    use infersight_server::actions::{ActionKind, ActionsSettings, Policy, audit_path};
    let policy = Policy::new(
        "globex-ttft-guard",
        Sli::Latency(LatencySli::Ttft),
        500.0,
        ActionKind::ShrinkBatch { max_batch: 8 },
    );
    infersight_server::actions::ActionRunner::open(
        ActionsSettings {
            policies: vec![policy],
            dry_run: true,
            webhook: None,
            audit_path: audit_path(data),
            eval_interval: std::time::Duration::from_secs(1),
        },
        now_ns(),
    )
    .unwrap()
}

/// `lora_kv_regression` at 2 workers, 2 requests/s for 4 minutes: its trace exports as OTLP
/// JSON, with every model renamed `<prefix><model>`.
pub(crate) fn exports(prefix: &str) -> Vec<String> {
    let mut config = SimConfig::new(Scenario::LoraKvRegression);
    config.seed = 5;
    config.workers = 2;
    config.rate_per_s = 2.0;
    config.duration_s = 240.0;
    exports_of(config, prefix)
}

/// `config`'s trace exports as OTLP JSON, every model, pod and node renamed `<prefix><name>`.
pub(crate) fn exports_of(config: SimConfig, prefix: &str) -> Vec<String> {
    let mut sink = MemorySink::default();
    Simulator::new(config).unwrap().run(&mut sink).unwrap();
    sink.traces
        .into_iter()
        .map(|mut export| {
            for resource in &mut export.resource_spans {
                for attribute in resource
                    .resource
                    .iter_mut()
                    .flat_map(|r| r.attributes.iter_mut())
                {
                    if attribute.key == "k8s.pod.name" || attribute.key == "host.name" {
                        rename(attribute, prefix);
                    }
                }
                for scope in &mut resource.scope_spans {
                    for span in &mut scope.spans {
                        for attribute in &mut span.attributes {
                            rename_model(attribute, prefix);
                        }
                    }
                }
            }
            serde_json::to_string(&export).unwrap()
        })
        .collect()
}

fn rename_model(attribute: &mut opentelemetry_proto::tonic::common::v1::KeyValue, prefix: &str) {
    if attribute.key.contains("model") {
        rename(attribute, prefix);
    }
}

fn rename(attribute: &mut opentelemetry_proto::tonic::common::v1::KeyValue, prefix: &str) {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    if let Some(Value::StringValue(text)) = attribute.value.as_mut().and_then(|v| v.value.as_mut())
    {
        *text = format!("{prefix}{text}");
    }
}

pub(crate) async fn export(
    router: &axum::Router,
    token: &str,
    org_header: Option<&str>,
    body: String,
) -> StatusCode {
    let mut request = Request::builder()
        .method("POST")
        .uri("/v1/traces")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, format!("Bearer {token}"));
    if let Some(org) = org_header {
        request = request.header("X-Scope-OrgID", org);
    }
    let response = router
        .clone()
        .oneshot(request.body(Body::from(body)).unwrap())
        .await
        .unwrap();
    response.status()
}

/// `POST /api/v1/query` as `token`: the status and the values of the answer's first column.
async fn query(api: &axum::Router, token: &str, sql: &str) -> (StatusCode, Vec<String>) {
    let body = serde_json::json!({ "sql": sql }).to_string();
    let request = Request::builder()
        .method("POST")
        .uri("/api/v1/query")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::from(body))
        .unwrap();
    let response = api.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let answer: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let first = answer["columns"][0]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let values = answer["rows"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .map(|row| match &row[first.as_str()] {
                    serde_json::Value::String(text) => text.clone(),
                    other => other.to_string(),
                })
                .collect()
        })
        .unwrap_or_default();
    (status, values)
}

/// One server both orgs exported to, half of it flushed to segments.
fn shared() -> &'static (Server, tokio::runtime::Runtime) {
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
                let prefix = if *org == GLOBEX { "globex-" } else { "" };
                let bodies = exports(prefix);
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

/// Statements of every shape, each answering the `org` of the rows it read.
const SHAPES: &[&str] = &[
    "SELECT org FROM requests",
    "SELECT DISTINCT org FROM spans",
    "SELECT r.org FROM requests r JOIN spans s ON r.trace_id = s.trace_id",
    "WITH slow AS (SELECT * FROM requests WHERE e2e_ms > 0) SELECT org FROM slow",
    "SELECT org FROM requests UNION ALL SELECT org FROM tokens UNION ALL SELECT org FROM spans",
    "SELECT org FROM spans WHERE trace_id IN (SELECT trace_id FROM requests)",
    // empty when a foreign span is visible
    "SELECT org FROM requests WHERE NOT EXISTS (SELECT 1 FROM spans WHERE spans.org <> requests.org OR spans.org IS NULL)",
    "SELECT org FROM requests WHERE json_get(attrs, 'gen_ai.request.model') IS NOT NULL OR org IS NOT NULL",
    "SELECT (SELECT max(org) FROM requests) AS org",
    "SELECT org FROM (SELECT org, count(*) OVER (PARTITION BY org) AS n FROM requests) WHERE n > 0",
];

#[test]
fn each_org_reads_only_its_own_rows_through_every_sql_shape() {
    let (server, runtime) = shared();
    runtime.block_on(async {
        // an exporter cannot write for another org, whatever header it sends
        let (_, acme_ingest, _) = &server.tokens[0];
        let claimed = export(
            &server.otlp,
            acme_ingest,
            Some(GLOBEX),
            exports("")[0].clone(),
        )
        .await;
        assert_eq!(claimed, StatusCode::FORBIDDEN);
        let mut counts = Vec::new();
        for (org, _, analyst) in &server.tokens {
            for sql in SHAPES {
                let (status, seen) = query(&server.api, analyst, sql).await;
                assert_eq!(status, StatusCode::OK, "{org}: {sql}");
                assert!(!seen.is_empty(), "{org}: {sql} saw nothing");
                let foreign: Vec<_> = seen.iter().filter(|v| v != org).take(3).collect();
                assert!(foreign.is_empty(), "{org}: {sql} saw {foreign:?}");
            }
            let (_, n) = query(&server.api, analyst, "SELECT count(*) AS n FROM requests").await;
            counts.push(n[0].parse::<i64>().unwrap());
            let (_, models) =
                query(&server.api, analyst, "SELECT DISTINCT model FROM requests").await;
            assert!(
                models
                    .iter()
                    .all(|m| m.starts_with("globex-") == (*org == GLOBEX)),
                "{org}: {models:?}"
            );
            let other = if *org == ACME { GLOBEX } else { ACME };
            let sql = format!("SELECT count(*) AS n FROM spans WHERE org = '{other}'");
            assert_eq!(query(&server.api, analyst, &sql).await.1, ["0"]);
            let (_, columns) = query(
                &server.api,
                analyst,
                "SELECT table_name FROM information_schema.columns WHERE column_name = 'org'",
            )
            .await;
            assert_eq!(
                columns.len(),
                infersight_model::Table::ALL.len(),
                "{columns:?}"
            );
        }
        assert!(counts[0] > 100 && counts[0] == counts[1], "{counts:?}");
        // naming an org the token lacks is refused
        let (_, _, acme_analyst) = &server.tokens[0];
        let request = Request::builder()
            .method("POST")
            .uri("/api/v1/query")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::AUTHORIZATION, format!("Bearer {acme_analyst}"))
            .header("X-Scope-OrgID", GLOBEX)
            .body(Body::from(r#"{"sql": "SELECT 1"}"#))
            .unwrap();
        let status = server.api.clone().oneshot(request).await.unwrap().status();
        assert_eq!(status, StatusCode::FORBIDDEN);
    });
}

/// A generated SELECT: a table, a filter, a shape around it and a limit.
fn statement() -> impl Strategy<Value = String> {
    let names = infersight_model::Table::ALL
        .map(infersight_model::Table::name)
        .to_vec();
    let filter = prop::sample::select(vec![
        "true",
        "org IS NULL",
        "org = 'acme'",
        "org = 'globex-inc'",
        "org <> 'acme'",
        "ts >= to_timestamp(0)",
        "coalesce(org, 'default') IN ('acme', 'globex-inc', 'default')",
    ]);
    (
        prop::sample::select(names.clone()),
        prop::sample::select(names),
        filter,
        0..6usize,
        prop::option::of(1..300usize),
    )
        .prop_map(|(t, o, f, shape, limit)| {
            let body = match shape {
                0 => format!("SELECT org FROM {t} WHERE {f}"),
                1 => format!("WITH c AS (SELECT * FROM {t} WHERE {f}) SELECT org FROM c"),
                2 => format!("SELECT org FROM {t} WHERE {f} UNION ALL SELECT org FROM {o}"),
                3 => format!("SELECT org FROM {t} WHERE {f} AND org IN (SELECT org FROM {o})"),
                4 => format!(
                    "SELECT a.org FROM (SELECT org FROM {t} WHERE {f} LIMIT 100) a \
                     JOIN (SELECT org FROM {o} LIMIT 100) b ON a.org = b.org OR a.org IS NULL"
                ),
                _ => format!("SELECT org FROM {t} WHERE {f} GROUP BY org"),
            };
            match limit {
                Some(n) => format!("SELECT org FROM ({body}) LIMIT {n}"),
                None => body,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn no_generated_select_sees_a_foreign_row(sql in statement(), which in 0..2usize) {
        let (server, runtime) = shared();
        let (org, _, analyst) = &server.tokens[which];
        let (status, seen) = runtime.block_on(query(&server.api, analyst, &sql));
        prop_assert_eq!(status, StatusCode::OK, "{}", sql);
        let foreign: Vec<_> = seen.iter().filter(|v| v != org).take(3).collect();
        prop_assert!(foreign.is_empty(), "{}: {} saw {:?}", org, sql, foreign);
    }
}
