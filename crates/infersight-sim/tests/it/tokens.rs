//! Per-token span events: about the configured share of engine spans carries them, their times
//! agree with the span's own latency attributes (TTFT, TPOT, decode, the preemption stall as the
//! max inter-token gap), and turning them on or off changes nothing else the simulator writes.

use infersight_model::AttrValue;
use infersight_sim::{MAX_TOKEN_EVENTS_PER_REQUEST, Scenario, SimConfig};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;

use crate::support::{pairs, run_memory};

fn small(scenario: Scenario, token_events: f64) -> SimConfig {
    let mut config = SimConfig::new(scenario);
    config.seed = 17;
    config.duration_s = 180.0;
    config.workers = 8;
    config.rate_per_s = 12.0;
    config.token_events = token_events;
    config
}

fn engine_spans(traces: &[ExportTraceServiceRequest]) -> Vec<(&Span, Vec<(String, AttrValue)>)> {
    traces
        .iter()
        .flat_map(|t| &t.resource_spans)
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
        .filter(|s| s.name == "llm_request")
        .map(|s| (s, pairs(&s.attributes)))
        .collect()
}

fn number(attrs: &[(String, AttrValue)], key: &str) -> Option<f64> {
    attrs
        .iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| match v {
            AttrValue::Int(i) => Some(*i as f64),
            AttrValue::Double(d) => Some(*d),
            _ => None,
        })
}

fn has(attrs: &[(String, AttrValue)], key: &str) -> bool {
    attrs.iter().any(|(k, _)| k == key)
}

#[test]
fn about_the_requested_share_of_requests_carries_token_events() {
    for (fraction, seed) in [(0.05, 3), (0.2, 4)] {
        let mut config = small(Scenario::Healthy, fraction);
        config.seed = seed;
        let emitted = run_memory(config);
        let spans = engine_spans(&emitted.traces);
        let with_events = spans.iter().filter(|(s, _)| !s.events.is_empty()).count();
        let aborted = spans
            .iter()
            .filter(|(_, a)| {
                number(a, "gen_ai.usage.output_tokens").unwrap_or(0.0) == 0.0
                    && number(a, "gen_ai.usage.completion_tokens").unwrap_or(0.0) == 0.0
            })
            .count();
        let share = with_events as f64 / (spans.len() - aborted) as f64;
        assert!(
            (share - fraction).abs() < 0.3 * fraction,
            "{share} of {} requests for {fraction}",
            spans.len()
        );
        let events: u64 = spans.iter().map(|(s, _)| s.events.len() as u64).sum();
        assert_eq!(emitted.summary.token_events, events);
    }
    let emitted = run_memory(small(Scenario::Healthy, 0.0));
    assert_eq!(emitted.summary.token_events, 0);
    assert!(
        engine_spans(&emitted.traces)
            .iter()
            .all(|(s, _)| s.events.is_empty())
    );
}

#[test]
fn token_times_agree_with_the_request_latencies() {
    // Every request gets events; worker-06's KV pool shrinks in the incident, so some requests
    // are preempted and have one long gap.
    let emitted = run_memory(small(Scenario::PreemptionStorm, 1.0));
    let (mut checked, mut preempted, mut capped, mut kv_hits) = (0, 0, 0, 0);
    for (span, attrs) in engine_spans(&emitted.traces) {
        if has(&attrs, "error.type") {
            continue;
        }
        let output = number(&attrs, "gen_ai.usage.output_tokens")
            .or(number(&attrs, "gen_ai.usage.completion_tokens"))
            .unwrap() as usize;
        let sec = |key: &str| number(&attrs, key).unwrap() * 1e3;
        let (ttft, tpot, decode) = (
            sec("gen_ai.latency.time_to_first_token"),
            sec("gen_ai.latency.time_per_output_token"),
            sec("gen_ai.latency.time_in_model_decode"),
        );
        let events = &span.events;
        assert_eq!(
            events.len(),
            output.min(MAX_TOKEN_EVENTS_PER_REQUEST as usize)
        );
        let start = span.start_time_unix_nano;
        let ms = |ns: u64| (ns - start) as f64 / 1e6;
        let times: Vec<f64> = events.iter().map(|e| ms(e.time_unix_nano)).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "in time order");
        assert!(
            *times.last().unwrap() <= ms(span.end_time_unix_nano) + 1e-3,
            "inside the span"
        );
        // tolerance: attributes are rounded to 1 µs, times truncated to 1 ns
        let close = |a: f64, b: f64| (a - b).abs() <= 0.01 + 1e-4 * b.abs();
        assert!(
            close(times[0], ttft),
            "first token {} vs ttft {ttft}",
            times[0]
        );
        for (k, event) in events.iter().enumerate() {
            assert_eq!(event.name, "gen_ai.token");
            let attrs = pairs(&event.attributes);
            assert_eq!(number(&attrs, "gen_ai.token.index"), Some(k as f64));
            let stage = attrs
                .iter()
                .find(|(key, _)| key == "gen_ai.token.stage")
                .and_then(|(_, v)| v.as_label());
            let expected = if k == 0 { "prefill" } else { "decode" };
            assert_eq!(stage.as_deref(), Some(expected));
            if has(&attrs, "gen_ai.token.kv_hit") {
                assert_eq!(k, 0, "kv_hit only on the prefill token");
                kv_hits += 1;
            }
        }
        checked += 1;
        if times.len() < 2 {
            continue;
        }
        let gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
        let itl_max = gaps.iter().copied().fold(0.0, f64::max);
        let step = gaps[gaps.len() - 1];
        if output <= MAX_TOKEN_EVENTS_PER_REQUEST as usize {
            let mean = (times[times.len() - 1] - times[0]) / gaps.len() as f64;
            assert!(close(mean, tpot), "mean gap {mean} vs tpot {tpot}");
            assert!(close(times[times.len() - 1] - times[0], decode));
        } else {
            capped += 1;
        }
        if number(&attrs, "serving.preemptions").unwrap() > 0.0 {
            preempted += 1;
            assert!(itl_max > 2.0 * step, "the stall is one long gap: {gaps:?}");
            assert_eq!(itl_max, gaps[0], "at the first decode step");
            assert!(itl_max > tpot);
        } else {
            assert!(close(itl_max, tpot), "uniform steps: {itl_max} vs {tpot}");
        }
    }
    assert!(checked > 1_000, "{checked}");
    assert!(preempted > 10, "{preempted}");
    assert!(capped > 10, "{capped}");
    assert!(kv_hits > 10, "{kv_hits}");
}

#[test]
fn token_events_change_nothing_else() {
    let strip = |traces: &mut [ExportTraceServiceRequest]| {
        for span in traces
            .iter_mut()
            .flat_map(|t| &mut t.resource_spans)
            .flat_map(|rs| &mut rs.scope_spans)
            .flat_map(|ss| &mut ss.spans)
        {
            span.events.clear();
        }
    };
    let off = run_memory(small(Scenario::LoraKvRegression, 0.0));
    for fraction in [0.005, 0.3] {
        let config = small(Scenario::LoraKvRegression, fraction);
        let truth_on = infersight_sim::Simulator::new(config.clone())
            .unwrap()
            .ground_truth();
        let mut on = run_memory(config);
        assert!(on.summary.token_events > 0, "{fraction}");
        // (assert!, not assert_eq!: a failure would print megabytes)
        assert!(on.traces != off.traces);
        strip(&mut on.traces);
        assert!(on.traces == off.traces, "spans differ beyond their events");
        assert!(on.sink.logs == off.sink.logs, "logs differ");
        assert!(on.sink.metrics == off.sink.metrics, "metrics differ");
        assert!(on.sink.raw_lines == off.sink.raw_lines, "raw lines differ");
        let summary = infersight_sim::SimSummary {
            token_events: 0,
            ..on.summary.clone()
        };
        assert_eq!(summary, off.summary);
        let truth_off = infersight_sim::Simulator::new(small(Scenario::LoraKvRegression, 0.0))
            .unwrap()
            .ground_truth();
        assert_eq!(
            serde_json::to_string(&truth_on).unwrap(),
            serde_json::to_string(&truth_off).unwrap()
        );
    }
}
