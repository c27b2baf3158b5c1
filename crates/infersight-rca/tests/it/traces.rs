//! The `trace_context_loss` signal over hand-made `spans`: a build of the proxy in front of the
//! engines stops propagating trace context, and the signal names the attribute that sets its
//! spans apart (whatever it is called), whether the proxy's spans are roots or orphans of an
//! unexported client, whether the proxy has spans of its own below its entry span, and whether
//! the engine then starts traces of its own or keeps the trace id under a parent that does not
//! exist. A fleet whose context is intact raises nothing.

use infersight_model::rng::SplitMix64;
use infersight_model::{SpanRecord, Table, TableBatch};
use infersight_rca::{Signal, SignalKind, collect_signals};
use infersight_store::StorageBackend;

use crate::support::{EngineOf, MINUTE_NS, TestStore, base_ns, rca_context};

const PROXY: &str = "edge-router";
const ENGINE: &str = "llm-backend";

/// How the broken build loses the context, and how the fleet's spans are laid out.
#[derive(Debug, Clone, Copy)]
struct Layout {
    /// The proxy's entry span has a parent from a client that does not export spans.
    client_parent: bool,
    /// The proxy has an outgoing (client) span of its own below its entry span.
    proxy_child: bool,
    /// The broken build sends the right trace id with a parent span id that does not exist
    /// (the engine's spans are orphans); otherwise no context at all (the engine starts a trace).
    bogus_parent: bool,
}

/// A proxy pod: its name, the attribute its build is told by, and whether the build is broken.
struct Pod {
    name: &'static str,
    build_key: &'static str,
    build: &'static str,
    from_incident: bool,
    broken: bool,
}

struct Ids(SplitMix64);

impl Ids {
    fn hex(&mut self, bytes: usize) -> String {
        (0..bytes)
            .map(|_| format!("{:02x}", self.0.next_u64() as u8))
            .collect()
    }
}

fn span(
    ts: i64,
    trace: &str,
    id: &str,
    parent: Option<&str>,
    service: &str,
    attrs: String,
) -> SpanRecord {
    SpanRecord {
        ts,
        end_ts: Some(ts + 900_000_000),
        duration_ms: Some(900.0),
        trace_id: Some(trace.to_string()),
        span_id: Some(id.to_string()),
        parent_span_id: parent.map(str::to_string),
        name: Some("POST /v1/chat/completions".into()),
        kind: Some("server".into()),
        service: Some(service.to_string()),
        status: Some("ok".into()),
        attrs,
        ..Default::default()
    }
}

/// One request's spans through `pod` at `ts`.
fn request_spans(
    ids: &mut Ids,
    ts: i64,
    pod: &Pod,
    layout: Layout,
    engine_pod: usize,
) -> Vec<SpanRecord> {
    let trace = ids.hex(16);
    let client = ids.hex(8);
    let entry = ids.hex(8);
    let proxy_attrs = format!(
        r#"{{"http.route":"/v1/chat/completions","k8s.pod.name":"{}","{}":"{}","service.name":"{PROXY}","tenant.id":"org-{}"}}"#,
        pod.name,
        pod.build_key,
        pod.build,
        ts % 3
    );
    let mut spans = vec![span(
        ts,
        &trace,
        &entry,
        layout.client_parent.then_some(client.as_str()),
        PROXY,
        proxy_attrs.clone(),
    )];
    let mut upstream = entry.clone();
    if layout.proxy_child {
        let outgoing = ids.hex(8);
        spans.push(span(
            ts + 1_000_000,
            &trace,
            &outgoing,
            Some(&entry),
            PROXY,
            proxy_attrs,
        ));
        upstream = outgoing;
    }
    let engine_attrs = format!(
        r#"{{"gen_ai.request.model":"mistral-7b","k8s.pod.name":"backend-{engine_pod}","service.name":"{ENGINE}","service.version":"0.10.1.1"}}"#
    );
    let lost = pod.broken && pod.from_incident;
    let (engine_trace, parent) = match (lost, layout.bogus_parent) {
        (false, _) => (trace.clone(), Some(upstream)),
        (true, true) => (trace.clone(), Some(ids.hex(8))),
        (true, false) => (ids.hex(16), None),
    };
    let engine_span = ids.hex(8);
    spans.push(span(
        ts + 2_000_000,
        &engine_trace,
        &engine_span,
        parent.as_deref(),
        ENGINE,
        engine_attrs.clone(),
    ));
    let step = ids.hex(8);
    spans.push(span(
        ts + 3_000_000,
        &engine_trace,
        &step,
        Some(&engine_span),
        ENGINE,
        engine_attrs,
    ));
    spans
}

/// When the incident's pods take over and how busy each pod is.
#[derive(Debug, Clone, Copy)]
struct Rollout {
    /// The minute `incident_pods` take over; the incident (the split) starts at minute 60.
    minute: i64,
    /// Requests per pod and minute.
    per_minute: i64,
}

/// The incident's pods take over when the incident starts, four requests a minute each.
const AT_THE_SPLIT: Rollout = Rollout {
    minute: 60,
    per_minute: 4,
};

/// 90 minutes: the baseline's pods until `rollout.minute`, then `incident_pods` take over, some
/// on the broken build (which loses the context from then on).
fn fleet(
    layout: Layout,
    seed: u64,
    incident_pods: &[Pod],
    baseline_pods: &[Pod],
    rollout: Rollout,
) -> Vec<SpanRecord> {
    let mut ids = Ids(SplitMix64::new(seed));
    let mut spans = Vec::new();
    let pods_at_once = incident_pods.len().max(baseline_pods.len()) as i64;
    let spacing = MINUTE_NS / (pods_at_once * rollout.per_minute);
    for minute in 0..90 {
        let pods = if minute < rollout.minute {
            baseline_pods
        } else {
            incident_pods
        };
        for (p, pod) in pods.iter().enumerate() {
            for k in 0..rollout.per_minute {
                let ts =
                    base_ns() + minute * MINUTE_NS + (p as i64 * rollout.per_minute + k) * spacing;
                let engine_pod = (ids.0.next_u64() % 4) as usize;
                spans.extend(request_spans(&mut ids, ts, pod, layout, engine_pod));
            }
        }
    }
    spans
}

fn pod(
    name: &'static str,
    build_key: &'static str,
    build: &'static str,
    incident: bool,
    broken: bool,
) -> Pod {
    Pod {
        name,
        build_key,
        build,
        from_incident: incident,
        broken,
    }
}

/// A pod of `build` that keeps the trace context throughout.
fn intact(name: &'static str, build_key: &'static str, build: &'static str) -> Pod {
    pod(name, build_key, build, false, false)
}

async fn losses(spans: &[SpanRecord]) -> Vec<Signal> {
    let store = TestStore::new();
    store
        .append(&[TableBatch {
            table: Table::Spans,
            batch: SpanRecord::to_batch(spans),
        }])
        .unwrap();
    collect_signals(&store.engine(), &rca_context("errors", Vec::new()))
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.kind == SignalKind::TraceContextLoss)
        .collect()
}

/// The first signal names the proxy and `key=value`, nothing else.
fn assert_top_is_the_proxy_by(signals: &[Signal], key: &str, value: &str, context: &str) {
    let top = signals.first().expect(context);
    assert_eq!(
        top.subject.get("service").map(String::as_str),
        Some(PROXY),
        "{context}"
    );
    assert_eq!(
        top.subject.get(key).map(String::as_str),
        Some(value),
        "{context}"
    );
    assert_eq!(top.subject.len(), 2, "{context}");
}

const LAYOUTS: [Layout; 4] = [
    Layout {
        client_parent: false,
        proxy_child: false,
        bogus_parent: false,
    },
    Layout {
        client_parent: true,
        proxy_child: true,
        bogus_parent: false,
    },
    Layout {
        client_parent: false,
        proxy_child: true,
        bogus_parent: true,
    },
    Layout {
        client_parent: true,
        proxy_child: false,
        bogus_parent: true,
    },
];

#[tokio::test]
async fn a_build_that_drops_trace_context_is_named_by_its_attribute() {
    // a canary pod on a new `service.version` (its pod name is new as well: the build key wins
    // the tie), and two pods of a new build told by a key of the team's own
    let canary = (
        vec![
            intact("edge-router-6f9-a", "service.version", "3.1.0"),
            intact("edge-router-6f9-b", "service.version", "3.1.0"),
            pod("edge-router-7c2-x", "service.version", "3.2.0", true, true),
        ],
        "service.version",
        "3.2.0",
    );
    let fleet_sha = (
        vec![
            intact("edge-router-6f9-a", "deploy.git_sha", "4be1d0c"),
            pod("edge-router-81d-p", "deploy.git_sha", "9a7f3e2", true, true),
            pod("edge-router-81d-q", "deploy.git_sha", "9a7f3e2", true, true),
        ],
        "deploy.git_sha",
        "9a7f3e2",
    );
    for (incident_pods, key, value) in [canary, fleet_sha] {
        let baseline_pods = [
            intact("edge-router-6f9-a", key, incident_pods[0].build),
            intact("edge-router-6f9-b", key, incident_pods[0].build),
            intact("edge-router-6f9-c", key, incident_pods[0].build),
        ];
        for layout in LAYOUTS {
            for seed in [3, 4] {
                let signals = losses(&fleet(
                    layout,
                    seed,
                    &incident_pods,
                    &baseline_pods,
                    AT_THE_SPLIT,
                ))
                .await;
                let context = format!("{key} {layout:?} seed {seed}: {signals:#?}");
                assert_top_is_the_proxy_by(&signals, key, value, &context);
                assert!(
                    signals
                        .iter()
                        .all(|s| s.subject.get("service").map(String::as_str) != Some(ENGINE)),
                    "the engine only receives the lost context: {context}"
                );
            }
        }
    }
}

#[tokio::test]
async fn intact_trace_context_raises_no_loss() {
    let pods = [
        intact("edge-router-6f9-a", "service.version", "3.1.0"),
        pod("edge-router-7c2-x", "service.version", "3.2.0", true, false),
    ];
    for layout in LAYOUTS {
        let signals = losses(&fleet(layout, 5, &pods, &pods[..1], AT_THE_SPLIT)).await;
        assert!(signals.is_empty(), "{layout:?}: {signals:#?}");
    }
}

#[tokio::test]
async fn a_build_rolled_out_just_before_the_split_is_new_in_the_incident() {
    // the broken build reaches pod c six minutes before the incident starts: its own baseline
    // is those six broken minutes, and the pod has 54 intact minutes behind it; the build is
    // what lost the context, judged against the service before it appeared, whether its six
    // minutes hold enough entries to be a baseline of their own (120) or too few (42), and
    // whether its key names a build or is a team's own (the pod's key, a convention, does not
    // win the tie then)
    let pods = |key: &'static str, build: &'static str, broken: bool| {
        [
            intact("edge-router-6f9-a", key, "3.1.0"),
            intact("edge-router-6f9-b", key, "3.1.0"),
            pod("edge-router-6f9-c", key, build, true, broken),
        ]
    };
    for key in ["service.version", "deploy.git_sha"] {
        for per_minute in [20, 7] {
            let rollout = Rollout {
                minute: 54,
                per_minute,
            };
            for layout in LAYOUTS {
                for seed in [6, 7] {
                    let spans = fleet(
                        layout,
                        seed,
                        &pods(key, "3.2.0", true),
                        &pods(key, "3.1.0", false),
                        rollout,
                    );
                    let signals = losses(&spans).await;
                    let context =
                        format!("{key} {per_minute}/min {layout:?} seed {seed}: {signals:#?}");
                    assert_top_is_the_proxy_by(&signals, key, "3.2.0", &context);
                }
            }
        }
    }
}
