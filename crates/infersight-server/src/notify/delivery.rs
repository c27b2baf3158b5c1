//! Delivery, between [`super::Notifier`] and a sink's HTTP endpoint: an [`Outbox`] per sink
//! target, a bounded queue drained by its own thread, so a caller (the watcher, SLO alerting)
//! only enqueues and a dead or slow sink never blocks it nor the other sinks. The thread turns
//! each event into messages ([`Channel`]), POSTs each with retries (exponential backoff with
//! jitter, a give-up limit), logs one line per failed attempt and counts every outcome on
//! `/metrics` (`infersight_notifications_*{sink,target}`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant};

use infersight_model::notice::{IncidentNotice, Transition};
use infersight_model::rng::SplitMix64;
use infersight_model::telemetry::{Counters, catalog};
use parking_lot::Mutex;

use super::config::RetryPolicy;

/// One transition to deliver, as the notifier saw it.
#[derive(Debug, Clone)]
pub struct Event {
    pub transition: Transition,
    pub notice: IncidentNotice,
    /// The absolute report link, if the incident has a report.
    pub report_url: Option<String>,
    /// When the notifier received it, Unix ns.
    pub at_ns: i64,
}

/// One HTTP request body and its headers.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub body: Vec<u8>,
    pub headers: Vec<(&'static str, String)>,
}

/// One message to a sink, rendered again at each attempt (its timestamps and signature are of
/// the attempt, not of the first try).
pub struct Message {
    /// What it is, for log lines (`incident 42 opened`).
    pub what: String,
    pub render: Box<dyn Fn(i64) -> Request + Send>,
    /// Attempts it gets; re-sends of firing alerts get one (the next re-send is their retry).
    pub attempts: Option<u32>,
}

/// What a sink makes of events: the protocol half of delivery (Alertmanager, signed webhook).
pub trait Channel: Send + 'static {
    /// `alertmanager` or `webhook`: the `sink` label.
    fn sink(&self) -> &'static str;
    /// Where messages are POSTed.
    fn url(&self) -> &str;
    /// The messages `event` becomes.
    fn on_event(&mut self, event: &Event) -> Vec<Message>;
    /// When something is due for re-sending, if ever.
    fn next_resend(&self) -> Option<Instant> {
        None
    }
    /// What is due for re-sending at `now`.
    fn resend(&mut self, _now: Instant) -> Vec<Message> {
        Vec::new()
    }
}

/// Where the outcome of each incident transition's delivery is recorded (the incident's
/// timeline: `crate::timeline`). Called on the sink's thread, once per event (re-sends of a
/// firing alert are not reported); must not block for long.
pub trait DeliveryLog: Send + Sync + std::fmt::Debug {
    /// `outcome`: `Ok` when the sink took it, else why delivery gave up.
    fn delivered(&self, event: &Event, sink: &str, target: &str, outcome: Result<(), String>);
}

/// How delivery behaves, whatever the sink.
#[derive(Debug, Clone)]
pub struct DeliveryPolicy {
    pub retry: RetryPolicy,
    /// Deadline of one attempt.
    pub timeout: Duration,
    pub queue_capacity: usize,
    /// Roots for `https://` sinks; `None`: the web's (compiled in).
    pub ca_certs: Option<super::config::CaCerts>,
}

/// What the queue's owner and its thread share.
struct Shared {
    sink: &'static str,
    target: String,
    counters: Arc<Counters>,
    /// Set by [`Outbox::close`]: the thread stops between attempts.
    stop: AtomicBool,
    depth: AtomicU64,
    dropped_full: AtomicU64,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("sink", &self.sink)
            .field("target", &self.target)
            .field("depth", &self.depth)
            .finish_non_exhaustive()
    }
}

impl Shared {
    fn labels(&self) -> [(&'static str, &str); 2] {
        [("sink", self.sink), ("target", &self.target)]
    }

    fn count(&self, metric: &infersight_model::telemetry::Metric) {
        self.counters.add(metric, &self.labels(), 1);
    }

    fn dropped(&self, reason: &str, by: u64) {
        let [sink, target] = self.labels();
        self.counters.add(
            &catalog::NOTIFICATIONS_DROPPED,
            &[sink, target, ("reason", reason)],
            by,
        );
    }

    fn set_depth(&self, depth: u64) {
        self.counters.set_gauge(
            &catalog::NOTIFICATION_QUEUE_DEPTH,
            &self.labels(),
            depth as f64,
        );
    }
}

/// A sink target's bounded queue and the thread that drains it.
#[derive(Debug)]
pub struct Outbox {
    sender: Mutex<Option<SyncSender<Event>>>,
    shared: Arc<Shared>,
}

impl Outbox {
    /// Starts the thread delivering `channel`'s messages. Every counter of the target starts
    /// at 0, so `/metrics` shows the sink before its first notification.
    pub fn start(
        channel: impl Channel,
        policy: DeliveryPolicy,
        counters: Arc<Counters>,
        log: Option<Arc<dyn DeliveryLog>>,
    ) -> std::io::Result<Outbox> {
        let shared = Arc::new(Shared {
            sink: channel.sink(),
            target: target_of(channel.url()),
            counters,
            stop: AtomicBool::new(false),
            depth: AtomicU64::new(0),
            dropped_full: AtomicU64::new(0),
        });
        for metric in [
            &catalog::NOTIFICATIONS_SENT,
            &catalog::NOTIFICATIONS_FAILED,
            &catalog::NOTIFICATION_RETRIES,
        ] {
            shared.counters.add(metric, &shared.labels(), 0);
        }
        for reason in ["queue_full", "shutdown"] {
            shared.dropped(reason, 0);
        }
        shared.set_depth(0);
        let (sender, receiver) = std::sync::mpsc::sync_channel(policy.queue_capacity.max(1));
        let agent = agent(policy.timeout, policy.ca_certs.as_ref());
        let worker = Worker {
            channel,
            policy,
            shared: Arc::clone(&shared),
            agent,
            rng: SplitMix64::new(jitter_seed()),
            log,
        };
        std::thread::Builder::new()
            .name(format!("notify-{}", shared.sink))
            .spawn(move || worker.run(receiver))?;
        Ok(Outbox {
            sender: Mutex::new(Some(sender)),
            shared,
        })
    }

    /// Enqueues `event` without waiting; a full queue drops it (counted, logged).
    pub fn offer(&self, event: Event) {
        let sender = self.sender.lock();
        let Some(sender) = sender.as_ref() else {
            self.shared.dropped("shutdown", 1);
            return;
        };
        // counted before the send so the thread never decrements below zero
        let depth = self.shared.depth.fetch_add(1, Ordering::SeqCst) + 1;
        match sender.try_send(event) {
            Ok(()) => self.shared.set_depth(depth),
            Err(TrySendError::Full(event)) => {
                self.shared.depth.fetch_sub(1, Ordering::SeqCst);
                self.shared.dropped("queue_full", 1);
                let dropped = self.shared.dropped_full.fetch_add(1, Ordering::Relaxed) + 1;
                // the first drop and then every power of two: loud, never a flood
                if dropped.is_power_of_two() {
                    tracing::warn!(
                        sink = self.shared.sink,
                        target = %self.shared.target,
                        incident = %event.notice.incident_id,
                        transition = event.transition.as_str(),
                        dropped_so_far = dropped,
                        "notification dropped: the sink's queue is full (is it down?)"
                    );
                }
            }
            Err(TrySendError::Disconnected(_)) => {
                self.shared.depth.fetch_sub(1, Ordering::SeqCst);
                self.shared.dropped("shutdown", 1);
            }
        }
    }

    /// Stops delivery: nothing more is accepted, the thread gives up waiting between attempts
    /// and what is still queued is counted as dropped (`reason="shutdown"`).
    pub fn close(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.sender.lock().take();
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        self.close();
    }
}

/// `host:port` of a URL: the `target` label (a few per process).
fn target_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest).to_string()
}

/// The sink's HTTP client: `timeout` per attempt; `https://` verified by rustls against
/// `ca_certs`, else the web's roots.
fn agent(timeout: Duration, ca_certs: Option<&super::config::CaCerts>) -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false);
    infersight_report::tls::with_roots(config, ca_certs)
        .build()
        .into()
}

fn jitter_seed() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    now ^ u64::from(std::process::id()).rotate_left(32)
}

/// The wait before retry `retry` (1 = the first retry): `initial × 2^(retry-1)`, capped at
/// `max`, then "equal jitter": half of it fixed, half uniform, so retries of many instances
/// spread out yet never come sooner than half the schedule.
pub fn backoff(policy: &RetryPolicy, retry: u32, uniform: f64) -> Duration {
    let doubling = 2f64.powi(
        i32::try_from(retry.saturating_sub(1))
            .unwrap_or(i32::MAX)
            .min(62),
    );
    let base = (policy.backoff_initial.as_secs_f64() * doubling)
        .min(policy.backoff_max.as_secs_f64())
        .max(0.0);
    Duration::from_secs_f64(base / 2.0 + base / 2.0 * uniform.clamp(0.0, 1.0))
}

/// Why an attempt failed, and whether another attempt may succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptError {
    /// Unreachable, timed out, 5xx, 408 or 429: worth retrying.
    Transient(String),
    /// Another 4xx: the sink refuses this message; retrying sends the same refusal.
    Refused(String),
}

/// The sink's thread.
struct Worker<C> {
    channel: C,
    policy: DeliveryPolicy,
    shared: Arc<Shared>,
    agent: ureq::Agent,
    rng: SplitMix64,
    log: Option<Arc<dyn DeliveryLog>>,
}

impl<C: Channel> Worker<C> {
    fn run(mut self, receiver: Receiver<Event>) {
        loop {
            let received = match self.channel.next_resend() {
                Some(due) => receiver.recv_timeout(due.saturating_duration_since(Instant::now())),
                None => receiver.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            let (messages, event) = match received {
                Ok(event) => {
                    let depth = self
                        .shared
                        .depth
                        .fetch_sub(1, Ordering::SeqCst)
                        .saturating_sub(1);
                    self.shared.set_depth(depth);
                    (self.channel.on_event(&event), Some(event))
                }
                Err(RecvTimeoutError::Timeout) => (self.channel.resend(Instant::now()), None),
                Err(RecvTimeoutError::Disconnected) => return,
            };
            let mut outcome = Ok(());
            for message in messages {
                if let Err(error) = self.deliver(&message) {
                    outcome = Err(error);
                }
            }
            if let (Some(log), Some(event)) = (&self.log, &event) {
                log.delivered(event, self.shared.sink, &self.shared.target, outcome);
            }
            if self.shared.stop.load(Ordering::SeqCst) {
                let left = receiver.try_iter().count() as u64;
                self.shared.depth.fetch_sub(left, Ordering::SeqCst);
                self.shared.set_depth(0);
                self.shared.dropped("shutdown", left);
                return;
            }
        }
    }

    /// POSTs `message` until it is accepted, refused, or out of attempts; counts the outcome
    /// and answers it (`Err`: why it gave up).
    fn deliver(&mut self, message: &Message) -> Result<(), String> {
        let attempts = message
            .attempts
            .unwrap_or(self.policy.retry.max_attempts)
            .max(1);
        for attempt in 1..=attempts {
            let request = (message.render)(infersight_model::time::now_ns());
            let error = match self.post(&request) {
                Ok(()) => {
                    self.shared.count(&catalog::NOTIFICATIONS_SENT);
                    return Ok(());
                }
                Err(error) => error,
            };
            let (last, reason) = match &error {
                AttemptError::Refused(reason) => (true, reason),
                AttemptError::Transient(reason) => (attempt == attempts, reason),
            };
            if last || self.shared.stop.load(Ordering::SeqCst) {
                tracing::warn!(
                    sink = self.shared.sink,
                    target = %self.shared.target,
                    attempt,
                    attempts,
                    error = %reason,
                    "notification failed: {}; giving up",
                    message.what
                );
                self.shared.count(&catalog::NOTIFICATIONS_FAILED);
                return Err(reason.clone());
            }
            let wait = backoff(&self.policy.retry, attempt, self.rng.uniform());
            tracing::warn!(
                sink = self.shared.sink,
                target = %self.shared.target,
                attempt,
                attempts,
                error = %reason,
                retry_in_ms = wait.as_millis() as u64,
                "notification failed: {}; retrying",
                message.what
            );
            self.shared.count(&catalog::NOTIFICATION_RETRIES);
            self.sleep(wait);
        }
        Err("no attempt left".into())
    }

    /// One POST of `request`.
    fn post(&self, request: &Request) -> Result<(), AttemptError> {
        let mut call = self.agent.post(self.channel.url());
        for (name, value) in &request.headers {
            call = call.header(*name, value);
        }
        let mut response = call.send(&request.body[..]).map_err(|err| match err {
            ureq::Error::Timeout(_) => AttemptError::Transient(format!(
                "no answer within {} ms",
                self.policy.timeout.as_millis()
            )),
            other => AttemptError::Transient(format!("unreachable: {other}")),
        })?;
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(());
        }
        // the sink's own words help most (Alertmanager names the bad label)
        let said = response
            .body_mut()
            .with_config()
            .limit(512)
            .read_to_string()
            .unwrap_or_default();
        let said = said.trim();
        let reason = if said.is_empty() {
            format!("http {status}")
        } else {
            format!("http {status}: {said}")
        };
        if status == 408 || status == 429 || status >= 500 {
            Err(AttemptError::Transient(reason))
        } else {
            Err(AttemptError::Refused(reason))
        }
    }

    /// Sleeps `wait`, waking early when the outbox closes.
    fn sleep(&self, wait: Duration) {
        let until = Instant::now() + wait;
        while !self.shared.stop.load(Ordering::SeqCst) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
    }
}
