//! What the load generator counts while it sends (per protocol, shared by every sender) and the
//! report it prints at the end: acknowledged spans per second, ack latency percentiles, and the
//! throttled, unavailable and failed answers.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::client::{Outcome, Protocol};

/// Counters of one protocol's exporters.
#[derive(Debug, Default)]
pub struct Counts {
    pub sent_batches: AtomicU64,
    pub sent_spans: AtomicU64,
    pub acked_batches: AtomicU64,
    pub acked_spans: AtomicU64,
    pub rejected_spans: AtomicU64,
    pub throttled: AtomicU64,
    pub unavailable: AtomicU64,
    pub failed: AtomicU64,
}

/// Every sender's counters, by protocol, and the first failure's text.
#[derive(Debug, Default)]
pub struct Tally {
    pub by_protocol: [Counts; 2],
    pub first_error: Mutex<Option<String>>,
}

fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Tally {
    pub fn sent(&self, protocol: Protocol, spans: u64) {
        let counts = &self.by_protocol[protocol as usize];
        add(&counts.sent_batches, 1);
        add(&counts.sent_spans, spans);
    }

    /// Counts an answer to a batch of `spans` spans.
    pub fn answered(&self, protocol: Protocol, spans: u64, outcome: &Outcome) {
        let counts = &self.by_protocol[protocol as usize];
        match outcome {
            Outcome::Acked { rejected_spans } => {
                add(&counts.acked_batches, 1);
                add(&counts.acked_spans, spans.saturating_sub(*rejected_spans));
                add(&counts.rejected_spans, *rejected_spans);
            }
            Outcome::Throttled(_) => add(&counts.throttled, 1),
            Outcome::Unavailable(_) => add(&counts.unavailable, 1),
            Outcome::Failed(text) => {
                add(&counts.failed, 1);
                if let Ok(mut first) = self.first_error.lock() {
                    first.get_or_insert_with(|| text.clone());
                }
            }
        }
    }

    /// (acked spans, throttled, unavailable, failed) over both protocols, for progress lines.
    pub fn totals(&self) -> [u64; 4] {
        let mut totals = [0; 4];
        for counts in &self.by_protocol {
            totals[0] += get(&counts.acked_spans);
            totals[1] += get(&counts.throttled);
            totals[2] += get(&counts.unavailable);
            totals[3] += get(&counts.failed);
        }
        totals
    }
}

/// The value at quantile `q` of sorted microseconds, in milliseconds.
fn quantile_ms(sorted_us: &[u32], q: f64) -> Value {
    if sorted_us.is_empty() {
        return Value::Null;
    }
    let rank = ((sorted_us.len() as f64 * q).ceil() as usize).clamp(1, sorted_us.len());
    json!(f64::from(sorted_us[rank - 1]) / 1e3)
}

fn latency(mut us: Vec<u32>) -> Value {
    us.sort_unstable();
    json!({
        "p50": quantile_ms(&us, 0.50),
        "p99": quantile_ms(&us, 0.99),
        "max": quantile_ms(&us, 1.0),
    })
}

fn rate(n: u64, elapsed: Duration) -> f64 {
    let seconds = elapsed.as_secs_f64();
    if seconds > 0.0 {
        (n as f64 / seconds).round()
    } else {
        0.0
    }
}

/// One protocol's figures (`None` when it had no exporter).
fn protocol_report(counts: &Counts, latencies_us: Vec<u32>, elapsed: Duration) -> Value {
    json!({
        "sent_batches": get(&counts.sent_batches),
        "sent_spans": get(&counts.sent_spans),
        "acked_batches": get(&counts.acked_batches),
        "acked_spans": get(&counts.acked_spans),
        "rejected_spans": get(&counts.rejected_spans),
        "acked_spans_per_s": rate(get(&counts.acked_spans), elapsed),
        "throttled": get(&counts.throttled),
        "unavailable": get(&counts.unavailable),
        "failed": get(&counts.failed),
        "ack_latency_ms": latency(latencies_us),
    })
}

/// The whole run: both protocols together at the top level, each under `by_protocol`.
pub fn report(tally: &Tally, latencies_us: [Vec<u32>; 2], elapsed: Duration) -> Value {
    let total = Counts::default();
    for counts in &tally.by_protocol {
        for (sum, part) in [
            (&total.sent_batches, &counts.sent_batches),
            (&total.sent_spans, &counts.sent_spans),
            (&total.acked_batches, &counts.acked_batches),
            (&total.acked_spans, &counts.acked_spans),
            (&total.rejected_spans, &counts.rejected_spans),
            (&total.throttled, &counts.throttled),
            (&total.unavailable, &counts.unavailable),
            (&total.failed, &counts.failed),
        ] {
            add(sum, get(part));
        }
    }
    let all: Vec<u32> = latencies_us.iter().flatten().copied().collect();
    let mut value = protocol_report(&total, all, elapsed);
    let [grpc, http] = latencies_us;
    value["duration_s"] = json!(elapsed.as_secs_f64());
    value["sent_spans_per_s"] = json!(rate(get(&total.sent_spans), elapsed));
    value["first_error"] = json!(tally.first_error.lock().ok().and_then(|e| e.clone()));
    value["by_protocol"] = json!({
        "grpc": protocol_report(&tally.by_protocol[0], grpc, elapsed),
        "http": protocol_report(&tally.by_protocol[1], http, elapsed),
    });
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let us: Vec<u32> = (1..=100).map(|i| i * 1000).collect();
        assert_eq!(quantile_ms(&us, 0.5), json!(50.0));
        assert_eq!(quantile_ms(&us, 0.99), json!(99.0));
        assert_eq!(quantile_ms(&us, 1.0), json!(100.0));
        assert_eq!(quantile_ms(&[], 0.5), Value::Null);
    }

    #[test]
    fn acked_spans_leave_out_the_rejected_ones() {
        let tally = Tally::default();
        tally.sent(Protocol::Http, 10);
        tally.answered(Protocol::Http, 10, &Outcome::Acked { rejected_spans: 3 });
        tally.answered(Protocol::Grpc, 10, &Outcome::Throttled(Duration::ZERO));
        tally.answered(Protocol::Grpc, 10, &Outcome::Failed("x".into()));
        let value = report(&tally, [vec![], vec![2000]], Duration::from_secs(1));
        assert_eq!(value["acked_spans"], 7);
        assert_eq!(value["rejected_spans"], 3);
        assert_eq!(value["throttled"], 1);
        assert_eq!(value["failed"], 1);
        assert_eq!(value["first_error"], "x");
        assert_eq!(value["by_protocol"]["http"]["ack_latency_ms"]["p99"], 2.0);
    }
}
