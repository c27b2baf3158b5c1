//! The periodic evaluation loop of `serve`: SLO alerting ([`crate::alerts::run_alert_loop`]) and
//! automatic actions ([`crate::actions::run_action_loop`]) each run one, every evaluation on a
//! blocking thread (they read rollups, POST webhooks, fsync), until shutdown; the watcher steps on
//! the same [`Ticks`]; [`spawn_reloader`] re-reads the tokens file and the TLS certificate.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use infersight_model::ErrorKind;
use infersight_query::AccessAudit;

/// The ticks of a periodic loop: the first at once, then every `interval` (a late tick delays
/// the next rather than bursting), until `shutdown` resolves. The one tick loop of `serve`:
/// [`run_every`] and the watcher's task both step on it.
pub struct Ticks<S> {
    ticker: tokio::time::Interval,
    shutdown: Pin<Box<S>>,
}

impl<S: Future<Output = ()>> Ticks<S> {
    pub fn new(interval: Duration, shutdown: S) -> Ticks<S> {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Ticks {
            ticker,
            shutdown: Box::pin(shutdown),
        }
    }

    /// Waits for the next tick: `true`, or `false` once shutdown has come (then stop calling).
    pub async fn next(&mut self) -> bool {
        tokio::select! {
            _ = &mut self.shutdown => false,
            _ = self.ticker.tick() => true,
        }
    }
}

/// Runs `evaluate` on a blocking thread at every tick of [`Ticks`] until `shutdown` resolves. An
/// evaluation that panics is logged as `"{what} task failed"` and the loop carries on.
pub async fn run_every(
    interval: Duration,
    what: &'static str,
    shutdown: impl Future<Output = ()>,
    evaluate: impl Fn() + Send + Sync + 'static,
) {
    let evaluate = Arc::new(evaluate);
    let mut ticks = Ticks::new(interval, shutdown);
    while ticks.next().await {
        let evaluate = Arc::clone(&evaluate);
        if let Err(err) = tokio::task::spawn_blocking(move || evaluate()).await {
            tracing::error!(%err, "{what} task failed");
        }
    }
}

/// Re-reads a configuration file of `serve` (the tokens file, the TLS certificate) on SIGHUP
/// and when it changes, until `stop`: `reload(forced)` runs on a blocking thread, forced on
/// SIGHUP, else every `poll` to reload only what changed; it answers `Some(detail)` when it
/// reloaded, `None` when nothing changed, or why it failed (what was read before stays). With
/// `audit`, each reload is a line of the access audit (`surface: config`), and so is each
/// refusal, once until the reason changes or a reload succeeds.
pub fn spawn_reloader(
    what: &'static str,
    poll: Duration,
    stop: impl Future<Output = ()> + Send + 'static,
    audit: Option<Arc<AccessAudit>>,
    reload: impl Fn(bool) -> Result<Option<String>, String> + Send + Sync + 'static,
) -> tokio::task::JoinHandle<()> {
    let reload = Arc::new(reload);
    tokio::spawn(async move {
        #[cfg(unix)]
        let mut hangup =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        let mut ticks = tokio::time::interval(poll);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(stop);
        let mut refused: Option<String> = None;
        loop {
            #[cfg(unix)]
            let hangup_received = async {
                match hangup.as_mut() {
                    Some(signal) => signal.recv().await,
                    None => std::future::pending().await,
                }
            };
            #[cfg(not(unix))]
            let hangup_received = std::future::pending::<Option<()>>();
            let forced = tokio::select! {
                _ = &mut stop => return,
                _ = ticks.tick() => false,
                _ = hangup_received => true,
            };
            let reload = Arc::clone(&reload);
            let outcome = tokio::task::spawn_blocking(move || reload(forced)).await;
            let line = match outcome {
                Ok(Ok(Some(detail))) => {
                    tracing::info!("{what} reloaded{detail}");
                    refused = None;
                    Some((format!("{what} reloaded{detail}"), Ok(())))
                }
                Ok(Ok(None)) => None,
                Ok(Err(error)) => {
                    tracing::error!(%error, "{what} not reloaded; what was read before stays");
                    let new = refused.as_ref() != Some(&error);
                    let line = format!("{what} not reloaded: {error}");
                    refused = Some(error);
                    new.then_some((line, Err(ErrorKind::BadRequest)))
                }
                Err(error) => {
                    tracing::error!(%error, "reloading {what} failed");
                    None
                }
            };
            if let (Some(audit), Some((line, outcome))) = (audit.clone(), line) {
                // one appended line, off the async threads
                let _ =
                    tokio::task::spawn_blocking(move || audit.record_change(line, outcome)).await;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn evaluates_at_once_then_every_interval_survives_a_panic_and_stops_at_shutdown() {
        let runs = Arc::new(AtomicUsize::new(0));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let counted = Arc::clone(&runs);
        let task = tokio::spawn(run_every(
            Duration::from_millis(20),
            "test evaluation",
            async move {
                let _ = stopped.await;
            },
            move || {
                // the first evaluation panics; the loop carries on
                assert!(counted.fetch_add(1, Ordering::SeqCst) > 0, "first run");
            },
        ));
        tokio::time::timeout(Duration::from_secs(10), async {
            while runs.load(Ordering::SeqCst) < 3 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap();
        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .unwrap()
            .unwrap();
        let after = runs.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(runs.load(Ordering::SeqCst), after, "no run after shutdown");
    }

    #[tokio::test]
    async fn every_reload_and_each_new_refusal_is_one_line_of_the_audit() {
        let dir = tempfile::tempdir().unwrap();
        let audit = Arc::new(AccessAudit::at(dir.path().join("access.jsonl")));
        let script: Vec<Result<Option<String>, String>> = vec![
            Ok(Some(" (2 tokens)".into())),
            Ok(None),
            Err("bad line 3".into()),
            Err("bad line 3".into()),
            Err("bad line 4".into()),
            Ok(None),
            Ok(Some(" (1 tokens)".into())),
            Err("bad line 3".into()),
        ];
        let steps = Arc::new(std::sync::Mutex::new(script.into_iter()));
        let left = Arc::clone(&steps);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = spawn_reloader(
            "the tokens file",
            Duration::from_millis(5),
            async move {
                let _ = stopped.await;
            },
            Some(Arc::clone(&audit)),
            move |_| left.lock().unwrap().next().unwrap_or(Ok(None)),
        );
        tokio::time::timeout(Duration::from_secs(10), async {
            while steps.lock().unwrap().len() > 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap();
        // the last step's line is written after it was taken
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop.send(()).unwrap();
        task.await.unwrap();
        let text = std::fs::read_to_string(audit.path()).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        let said: Vec<(&str, &str)> = lines
            .iter()
            .map(|l| (l["what"].as_str().unwrap(), l["outcome"].as_str().unwrap()))
            .collect();
        assert_eq!(
            said,
            [
                ("the tokens file reloaded (2 tokens)", "ok"),
                ("the tokens file not reloaded: bad line 3", "bad_request"),
                ("the tokens file not reloaded: bad line 4", "bad_request"),
                ("the tokens file reloaded (1 tokens)", "ok"),
                ("the tokens file not reloaded: bad line 3", "bad_request"),
            ],
            "{text}"
        );
        assert!(lines.iter().all(|l| l["surface"] == "config"), "{text}");
    }
}
