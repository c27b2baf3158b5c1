//! The per-request latency breakdown, completed and checked once at normalization: phases the
//! telemetry left out are derived from the ones it carries (prefill = TTFT − queue, decode =
//! e2e − TTFT, TPOT = decode / (output tokens − 1)), and phases that do not add up are flagged
//! (`infersight.breakdown_mismatch` in `attrs`, counted by the receivers), never silently fixed.
//!
//! Model: `ttft = queue + prefill` and `e2e = ttft + decode + overhead` with `overhead >= 0`
//! (tokenization, detokenization, network). Tolerance: 5 % of the larger side plus 1 ms, because
//! engines stamp phases from different clocks and round them.
//!
//! A request span that carries per-token events (see `infersight-ingest`'s `otlp::tokens`) gives
//! its phases a second source: [`fill_from_tokens`] fills the columns its attributes left NULL
//! from the token times, before the check, so token-derived phases are checked like the others.
//!
//! A third source is the span tree: engines and gateways that trace each phase as a child span
//! (`queue`/`queued`, `prefill`, `decode`) give [`SpanPhases`] (gathered by `infersight-ingest`'s
//! `otlp::tree`), and [`fill_from_phases`] turns them into the same columns, again only where the
//! attributes and token events left them NULL.

use crate::tables::RequestRecord;

const RELATIVE_TOLERANCE: f64 = 0.05;
const ABSOLUTE_TOLERANCE_MS: f64 = 1.0;

/// What [`complete_breakdown`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BreakdownCheck {
    /// Every check that the present phases allow passed.
    Consistent,
    /// The phases contradict each other; the reason names them.
    Mismatch(String),
}

fn close_enough(a: f64, b: f64) -> bool {
    (a - b).abs() <= RELATIVE_TOLERANCE * a.abs().max(b.abs()) + ABSOLUTE_TOLERANCE_MS
}

fn non_negative(v: f64) -> Option<f64> {
    (v >= 0.0).then_some(v)
}

/// The token events of one request span, reduced to what the breakdown needs.
#[derive(Debug, Clone, Copy)]
pub struct TokenTimeline<'a> {
    /// Event times, ns, ascending.
    pub ts_ns: &'a [i64],
    /// The first event is the request's first output token (its prefill token), so TTFT can be
    /// read from it.
    pub starts_at_first_token: bool,
    /// No token between the first and the last event is missing (none skipped, none over the
    /// per-span cap, steps consecutive), so gaps between events are inter-token latencies.
    pub complete: bool,
}

/// Fills the latency columns the attributes left NULL from token times; never overrides a value.
///
/// The request starts at `start_ns`, the span's start: in the model above TTFT includes the queue
/// (`ttft = queue + prefill`), and engines (vLLM's `llm_request` span) start the span at arrival,
/// before queueing. Then `ttft = first − start`; when `tokens` is complete and has at least two
/// events, `decode = last − first`, `tpot = decode / (n − 1)` (the mean gap between consecutive
/// tokens) and `itl_max` = the largest gap.
pub fn fill_from_tokens(record: &mut RequestRecord, start_ns: i64, tokens: TokenTimeline<'_>) {
    debug_assert!(tokens.ts_ns.windows(2).all(|w| w[0] <= w[1]), "sorted");
    let ms = |ns: i64| ns as f64 / 1e6;
    let (Some(&first), Some(&last)) = (tokens.ts_ns.first(), tokens.ts_ns.last()) else {
        return;
    };
    if record.ttft_ms.is_none() && tokens.starts_at_first_token && first >= start_ns {
        record.ttft_ms = Some(ms(first - start_ns));
    }
    let gaps = tokens.ts_ns.len() - 1;
    if !tokens.complete || gaps == 0 {
        return;
    }
    let decode_ms = ms(last - first);
    if record.decode_ms.is_none() {
        record.decode_ms = Some(decode_ms);
    }
    if record.tpot_ms.is_none() {
        record.tpot_ms = Some(decode_ms / gaps as f64);
    }
    if record.itl_max_ms.is_none() {
        let max_gap = tokens.ts_ns.windows(2).map(|w| w[1] - w[0]).max();
        record.itl_max_ms = max_gap.map(ms);
    }
}

/// What a request span's descendant spans say about its phases.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SpanPhases {
    /// Summed duration of the queue spans, ms (a preempted request may queue more than once).
    pub queue_ms: Option<f64>,
    /// Earliest start and latest end of the prefill spans, ns (chunked prefill gives several).
    pub prefill_ns: Option<(i64, i64)>,
    /// Earliest start and latest end of the decode spans, ns.
    pub decode_ns: Option<(i64, i64)>,
}

/// Fills the latency columns still NULL from phase spans; never overrides a value.
///
/// With the request starting at `start_ns` (its span's start): the first token is out when the
/// last prefill span ends, so `ttft = prefill end − start`. `queue` is the queue spans' summed
/// duration or, without queue spans, the wait before the first prefill span. `prefill = ttft −
/// queue` (with the record's own TTFT and queue where its attributes gave them), so that `ttft =
/// queue + prefill` holds by construction and scheduling gaps between the phase spans are counted
/// in prefill rather than lost. `decode` is the decode spans' extent.
pub fn fill_from_phases(record: &mut RequestRecord, start_ns: i64, phases: &SpanPhases) {
    let ms = |ns: i64| ns as f64 / 1e6;
    let ttft = phases
        .prefill_ns
        .and_then(|(_, end)| (end >= start_ns).then(|| ms(end - start_ns)));
    let queue = phases.queue_ms.and_then(non_negative).or_else(|| {
        phases
            .prefill_ns
            .and_then(|(first, _)| (first >= start_ns).then(|| ms(first - start_ns)))
    });
    // Against the values the record will hold, so that what attributes said is respected.
    let prefill = match (record.ttft_ms.or(ttft), record.queue_ms.or(queue)) {
        (Some(t), Some(q)) => non_negative(t - q),
        _ => phases
            .prefill_ns
            .and_then(|(first, end)| (end >= first).then(|| ms(end - first))),
    };
    let decode = phases
        .decode_ns
        .and_then(|(first, end)| (end >= first).then(|| ms(end - first)));
    for (slot, value) in [
        (&mut record.ttft_ms, ttft),
        (&mut record.queue_ms, queue),
        (&mut record.prefill_ms, prefill),
        (&mut record.decode_ms, decode),
    ] {
        if slot.is_none() {
            *slot = value;
        }
    }
}

/// Checks the phases `record` carries, then derives the missing ones from consistent ones.
pub fn complete_breakdown(record: &mut RequestRecord) -> BreakdownCheck {
    let mut problems: Vec<String> = Vec::new();
    for (name, value) in [
        ("queue_ms", record.queue_ms),
        ("prefill_ms", record.prefill_ms),
        ("ttft_ms", record.ttft_ms),
        ("decode_ms", record.decode_ms),
        ("tpot_ms", record.tpot_ms),
        ("itl_max_ms", record.itl_max_ms),
        ("e2e_ms", record.e2e_ms),
    ] {
        if value.is_some_and(|v| v < 0.0 || !v.is_finite()) {
            problems.push(format!("{name} is negative or not finite"));
        }
    }
    if let (Some(q), Some(p), Some(t)) = (record.queue_ms, record.prefill_ms, record.ttft_ms)
        && !close_enough(q + p, t)
    {
        problems.push(format!("queue {q:.1} + prefill {p:.1} != ttft {t:.1} ms"));
    }
    if let (Some(t), Some(e)) = (record.ttft_ms, record.e2e_ms) {
        let decode = record.decode_ms.unwrap_or(0.0);
        if t + decode > e && !close_enough(t + decode, e) {
            problems.push(format!(
                "ttft {t:.1} + decode {decode:.1} exceeds e2e {e:.1} ms"
            ));
        }
    }
    if let (Some(q), Some(t)) = (record.queue_ms, record.ttft_ms)
        && q > t
        && !close_enough(q, t)
    {
        problems.push(format!("queue {q:.1} exceeds ttft {t:.1} ms"));
    }
    if !problems.is_empty() {
        return BreakdownCheck::Mismatch(problems.join("; "));
    }
    if record.prefill_ms.is_none()
        && let (Some(q), Some(t)) = (record.queue_ms, record.ttft_ms)
    {
        record.prefill_ms = non_negative(t - q);
    }
    if record.ttft_ms.is_none()
        && let (Some(q), Some(p)) = (record.queue_ms, record.prefill_ms)
    {
        record.ttft_ms = Some(q + p);
    }
    if record.decode_ms.is_none()
        && let (Some(t), Some(e)) = (record.ttft_ms, record.e2e_ms)
    {
        record.decode_ms = non_negative(e - t);
    }
    if record.tpot_ms.is_none()
        && let (Some(d), Some(n)) = (record.decode_ms, record.output_tokens)
        && n > 1
    {
        record.tpot_ms = Some(d / (n - 1) as f64);
    }
    BreakdownCheck::Consistent
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(
        queue: Option<f64>,
        prefill: Option<f64>,
        ttft: Option<f64>,
        e2e: Option<f64>,
    ) -> RequestRecord {
        RequestRecord {
            queue_ms: queue,
            prefill_ms: prefill,
            ttft_ms: ttft,
            e2e_ms: e2e,
            output_tokens: Some(21),
            ..RequestRecord::default()
        }
    }

    #[test]
    fn missing_phases_are_derived() {
        let mut r = record(Some(125.0), None, Some(500.0), Some(2000.0));
        assert_eq!(complete_breakdown(&mut r), BreakdownCheck::Consistent);
        assert_eq!(r.prefill_ms, Some(375.0));
        assert_eq!(r.decode_ms, Some(1500.0));
        assert_eq!(r.tpot_ms, Some(75.0));
        let mut r = record(Some(100.0), Some(50.0), None, None);
        assert_eq!(complete_breakdown(&mut r), BreakdownCheck::Consistent);
        assert_eq!(r.ttft_ms, Some(150.0));
        assert_eq!(r.decode_ms, None);
    }

    fn timeline(ts_ns: &[i64], complete: bool) -> TokenTimeline<'_> {
        TokenTimeline {
            ts_ns,
            starts_at_first_token: true,
            complete,
        }
    }

    #[test]
    fn token_times_fill_only_null_phases() {
        const MS: i64 = 1_000_000;
        let start = 10 * MS;
        // first token 300 ms after the start, then gaps of 20, 50, 20 ms
        let ts = [310 * MS, 330 * MS, 380 * MS, 400 * MS];
        let mut r = RequestRecord::default();
        fill_from_tokens(&mut r, start, timeline(&ts, true));
        assert_eq!(r.ttft_ms, Some(300.0));
        assert_eq!(r.decode_ms, Some(90.0));
        assert_eq!(r.tpot_ms, Some(30.0));
        assert_eq!(r.itl_max_ms, Some(50.0));

        // attributes win: only the NULL columns are filled
        let mut r = RequestRecord {
            ttft_ms: Some(250.0),
            tpot_ms: Some(31.5),
            ..RequestRecord::default()
        };
        fill_from_tokens(&mut r, start, timeline(&ts, true));
        assert_eq!(r.ttft_ms, Some(250.0));
        assert_eq!(r.tpot_ms, Some(31.5));
        assert_eq!(r.decode_ms, Some(90.0));
        assert_eq!(r.itl_max_ms, Some(50.0));
    }

    #[test]
    fn incomplete_or_short_timelines_give_only_what_they_can() {
        const MS: i64 = 1_000_000;
        let ts = [310 * MS, 330 * MS, 380 * MS];
        // sampled or capped: gaps are not inter-token latencies, TTFT still is
        let mut r = RequestRecord::default();
        fill_from_tokens(&mut r, 10 * MS, timeline(&ts, false));
        assert_eq!(r.ttft_ms, Some(300.0));
        assert_eq!((r.decode_ms, r.tpot_ms, r.itl_max_ms), (None, None, None));
        // one token: no gap
        let mut r = RequestRecord::default();
        fill_from_tokens(&mut r, 10 * MS, timeline(&ts[..1], true));
        assert_eq!(r.ttft_ms, Some(300.0));
        assert_eq!((r.decode_ms, r.tpot_ms, r.itl_max_ms), (None, None, None));
        // the first event is not the first token: no TTFT
        let mut r = RequestRecord::default();
        let tokens = TokenTimeline {
            starts_at_first_token: false,
            ..timeline(&ts, true)
        };
        fill_from_tokens(&mut r, 10 * MS, tokens);
        assert_eq!(r.ttft_ms, None);
        assert_eq!(r.decode_ms, Some(70.0));
        // nothing at all
        let mut r = RequestRecord::default();
        fill_from_tokens(&mut r, 10 * MS, timeline(&[], true));
        assert_eq!(r, RequestRecord::default());
    }

    #[test]
    fn phase_spans_fill_only_null_phases() {
        const MS: i64 = 1_000_000;
        let start = 1_000 * MS;
        // queued 120 ms, a 10 ms scheduling gap, two prefill chunks up to +400 ms, decode to +1400
        let phases = SpanPhases {
            queue_ms: Some(120.0),
            prefill_ns: Some((start + 130 * MS, start + 400 * MS)),
            decode_ns: Some((start + 401 * MS, start + 1_400 * MS)),
        };
        let mut r = RequestRecord {
            e2e_ms: Some(1_450.0),
            output_tokens: Some(51),
            ..RequestRecord::default()
        };
        fill_from_phases(&mut r, start, &phases);
        assert_eq!(r.ttft_ms, Some(400.0));
        assert_eq!(r.queue_ms, Some(120.0));
        assert_eq!(r.prefill_ms, Some(280.0), "the gap counts in prefill");
        assert_eq!(r.decode_ms, Some(999.0));
        assert_eq!(complete_breakdown(&mut r), BreakdownCheck::Consistent);
        assert_eq!(r.tpot_ms, Some(999.0 / 50.0));

        // no queue span: the wait before prefill is the queue; attributes still win
        let phases = SpanPhases {
            prefill_ns: Some((start + 50 * MS, start + 300 * MS)),
            ..SpanPhases::default()
        };
        let mut r = RequestRecord {
            ttft_ms: Some(310.0),
            ..RequestRecord::default()
        };
        fill_from_phases(&mut r, start, &phases);
        assert_eq!(r.ttft_ms, Some(310.0));
        assert_eq!(r.queue_ms, Some(50.0));
        assert_eq!(r.prefill_ms, Some(260.0), "the attribute's ttft − queue");
        assert_eq!(r.decode_ms, None);

        // phase spans before the request's start (clock skew) give nothing negative
        let phases = SpanPhases {
            prefill_ns: Some((start - 20 * MS, start - 10 * MS)),
            ..SpanPhases::default()
        };
        let mut r = RequestRecord::default();
        fill_from_phases(&mut r, start, &phases);
        assert_eq!((r.ttft_ms, r.queue_ms), (None, None));
        assert_eq!(r.prefill_ms, Some(10.0));
    }

    #[test]
    fn contradictions_are_flagged_not_fixed() {
        let mut r = record(Some(100.0), Some(50.0), Some(400.0), Some(2000.0));
        let BreakdownCheck::Mismatch(why) = complete_breakdown(&mut r) else {
            panic!("not flagged");
        };
        assert!(why.contains("prefill"), "{why}");
        assert_eq!(r.decode_ms, None, "a mismatched record is left as it came");
        let mut r = record(None, None, Some(3000.0), Some(2000.0));
        assert!(matches!(
            complete_breakdown(&mut r),
            BreakdownCheck::Mismatch(_)
        ));
        // rounding within tolerance is fine
        let mut r = record(Some(100.0), Some(50.0), Some(151.0), Some(151.5));
        assert_eq!(complete_breakdown(&mut r), BreakdownCheck::Consistent);
        let mut r = record(Some(-1.0), None, None, None);
        assert!(matches!(
            complete_breakdown(&mut r),
            BreakdownCheck::Mismatch(_)
        ));
    }
}
