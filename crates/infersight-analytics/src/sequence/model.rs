//! The count-based variable-order next-event model: training on normal sessions and scoring.

use std::collections::HashMap;

use super::{EventId, SequenceError, SequenceParams};

/// Dense internal symbol. `START` pads the front of a session, `END` closes it, `UNKNOWN` stands
/// for any event not seen in training (never a candidate), events seen in training are `FIRST..`.
type Symbol = u32;
const START: Symbol = 0;
const END: Symbol = 1;
const UNKNOWN: Symbol = 2;
const FIRST_EVENT: Symbol = 3;

/// What a session did (or could have done) at one position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NextEvent {
    Event(EventId),
    /// The session ended here.
    EndOfSession,
}

/// Why an event was judged unexpected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnexpectedReason {
    /// The event id never occurred in any training session.
    UnseenEvent,
    /// The session ended where normal sessions never ended (e.g. truncated).
    PrematureEnd,
    /// The event never followed this context in training.
    UnseenTransition,
    /// The event followed this context in training, but is not among the `top_k` most frequent.
    NotInTopK,
}

/// Evidence for one unexpected event.
#[derive(Debug, Clone, PartialEq)]
pub struct UnexpectedEvent {
    /// Index into the session; `session.len()` when the unexpected thing is the end of session.
    pub position: usize,
    pub observed: NextEvent,
    pub reason: UnexpectedReason,
    /// How many preceding events the decision conditioned on (after back-off); start-of-session
    /// padding counts.
    pub context_len_used: usize,
    /// The candidates at this position, most frequent first (at most 5), with their training
    /// counts.
    pub expected: Vec<(NextEvent, u32)>,
}

/// The verdict on one session.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionScore {
    /// Largest per-event surprise, `-log2 p` with `p = (count + 1) / (total + symbols)` at the
    /// context used (add-one smoothing over the training alphabet plus end-of-session). Higher is
    /// more anomalous; for ranking and reports, not for the decision.
    pub anomaly_score_bits: f64,
    /// Number of events (end of session included) outside the candidate set.
    pub unexpected_events: usize,
    /// The first of them, as evidence; `None` when the session is normal.
    pub first_unexpected: Option<UnexpectedEvent>,
}

impl SessionScore {
    /// DeepLog's rule: anomalous iff at least one event was unexpected.
    pub fn is_anomalous(&self) -> bool {
        self.unexpected_events > 0
    }
}

/// Successor counts of one context, most frequent first (ties: smaller symbol first).
#[derive(Debug, Clone, Default)]
struct Successors {
    total: u32,
    counts: Vec<(Symbol, u32)>,
}

impl Successors {
    fn add(&mut self, symbol: Symbol) {
        self.total = self.total.saturating_add(1);
        match self.counts.iter_mut().find(|(s, _)| *s == symbol) {
            Some((_, count)) => *count = count.saturating_add(1),
            None => self.counts.push((symbol, 1)),
        }
    }

    fn count_of(&self, symbol: Symbol) -> u32 {
        self.counts
            .iter()
            .find(|(s, _)| *s == symbol)
            .map_or(0, |(_, count)| *count)
    }
}

/// Next-event model over template-id sessions, trained on normal sessions only.
#[derive(Debug, Clone)]
pub struct NextEventModel {
    params: SequenceParams,
    /// Event id → dense symbol (`FIRST_EVENT..`).
    symbol_of: HashMap<EventId, Symbol>,
    /// Dense symbol − `FIRST_EVENT` → event id.
    event_of: Vec<EventId>,
    /// Context (0..=context_len preceding symbols, oldest first) → successors. The empty context
    /// is always present after training.
    contexts: HashMap<Box<[Symbol]>, Successors>,
}

impl NextEventModel {
    /// Trains on normal sessions. Errors on invalid parameters, on no sessions and on an empty
    /// session (an empty normal session is almost certainly a caller bug).
    pub fn train<I>(normal_sessions: I, params: SequenceParams) -> Result<Self, SequenceError>
    where
        I: IntoIterator,
        I::Item: AsRef<[EventId]>,
    {
        params.validate()?;
        let context_len = params.context_len;
        let mut model = Self {
            params,
            symbol_of: HashMap::new(),
            event_of: Vec::new(),
            contexts: HashMap::new(),
        };
        let mut padded: Vec<Symbol> = Vec::new();
        let mut sessions = 0usize;
        for (index, session) in normal_sessions.into_iter().enumerate() {
            let session = session.as_ref();
            if session.is_empty() {
                return Err(SequenceError::EmptySession { index });
            }
            sessions += 1;
            padded.clear();
            padded.resize(context_len, START);
            for &event in session {
                let symbol = model.intern(event);
                padded.push(symbol);
            }
            padded.push(END);
            for position in context_len..padded.len() {
                let next = padded[position];
                for order in 0..=context_len {
                    let context = &padded[position - order..position];
                    match model.contexts.get_mut(context) {
                        Some(successors) => successors.add(next),
                        None => {
                            let mut successors = Successors::default();
                            successors.add(next);
                            model.contexts.insert(context.into(), successors);
                        }
                    }
                }
            }
        }
        if sessions == 0 {
            return Err(SequenceError::NoSessions);
        }
        for successors in model.contexts.values_mut() {
            successors
                .counts
                .sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        }
        debug_assert!(model.contexts.contains_key(&[][..]));
        Ok(model)
    }

    fn intern(&mut self, event: EventId) -> Symbol {
        if let Some(&symbol) = self.symbol_of.get(&event) {
            return symbol;
        }
        // The alphabet of a log-template model is far below u32::MAX - FIRST_EVENT symbols.
        let symbol = FIRST_EVENT + self.event_of.len() as Symbol;
        self.symbol_of.insert(event, symbol);
        self.event_of.push(event);
        symbol
    }

    fn next_event(&self, symbol: Symbol) -> NextEvent {
        match symbol {
            END => NextEvent::EndOfSession,
            _ => NextEvent::Event(self.event_of[(symbol - FIRST_EVENT) as usize]),
        }
    }

    /// The parameters the model was trained with.
    pub fn params(&self) -> &SequenceParams {
        &self.params
    }

    /// Number of distinct event ids seen in training.
    pub fn vocabulary_len(&self) -> usize {
        self.event_of.len()
    }

    /// Whether `event` occurred in some training session.
    pub fn knows_event(&self, event: EventId) -> bool {
        self.symbol_of.contains_key(&event)
    }

    /// The longest context ending at `position` of `padded` with enough support, and its order.
    fn context_at(&self, padded: &[Symbol], position: usize) -> (usize, &Successors) {
        let min_support = self.params.min_context_support;
        for order in (1..=self.params.context_len).rev() {
            if let Some(successors) = self.contexts.get(&padded[position - order..position])
                && successors.total >= min_support
            {
                return (order, successors);
            }
        }
        // Present after any successful training (every session contributes its end symbol).
        (0, &self.contexts[&[][..]])
    }

    /// Scores a session (any length, empty included). Deterministic.
    pub fn score(&self, session: &[EventId]) -> SessionScore {
        let context_len = self.params.context_len;
        let mut padded: Vec<Symbol> = Vec::with_capacity(context_len + session.len() + 1);
        padded.resize(context_len, START);
        padded.extend(
            session
                .iter()
                .map(|event| self.symbol_of.get(event).copied().unwrap_or(UNKNOWN)),
        );
        padded.push(END);
        // Alphabet the smoothed probability spreads over: seen events, end, one unknown slot.
        let alphabet = self.event_of.len() as f64 + 2.0;
        let mut score = SessionScore {
            anomaly_score_bits: 0.0,
            unexpected_events: 0,
            first_unexpected: None,
        };
        for position in context_len..padded.len() {
            let observed = padded[position];
            let (order, successors) = self.context_at(&padded, position);
            let count = successors.count_of(observed);
            let probability = (f64::from(count) + 1.0) / (f64::from(successors.total) + alphabet);
            score.anomaly_score_bits = score.anomaly_score_bits.max(-probability.log2());
            let candidates = match self.params.top_k {
                Some(k) => &successors.counts[..k.min(successors.counts.len())],
                None => &successors.counts[..],
            };
            if candidates.iter().any(|(symbol, _)| *symbol == observed) {
                continue;
            }
            score.unexpected_events += 1;
            if score.first_unexpected.is_some() {
                continue;
            }
            let reason = if observed == UNKNOWN {
                UnexpectedReason::UnseenEvent
            } else if count > 0 {
                UnexpectedReason::NotInTopK
            } else if observed == END {
                UnexpectedReason::PrematureEnd
            } else {
                UnexpectedReason::UnseenTransition
            };
            let session_position = position - context_len;
            score.first_unexpected = Some(UnexpectedEvent {
                position: session_position,
                observed: match session.get(session_position) {
                    Some(&event) => NextEvent::Event(event),
                    None => NextEvent::EndOfSession,
                },
                reason,
                context_len_used: order,
                expected: candidates
                    .iter()
                    .take(5)
                    .map(|&(symbol, count)| (self.next_event(symbol), count))
                    .collect(),
            });
        }
        score
    }

    /// Shorthand for `self.score(session).is_anomalous()`.
    pub fn is_anomalous(&self, session: &[EventId]) -> bool {
        self.score(session).is_anomalous()
    }
}
