//! The SLIs a rollup answers: latency SLIs kept as sketches (one per `requests` column) and
//! counter SLIs computed from a cell's additive counters; names as the API and CLI spell them.

use crate::Cell;

/// Latency SLIs kept as sketches, one per `requests` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LatencySli {
    Queue,
    Prefill,
    Ttft,
    Decode,
    Tpot,
    ItlMax,
    E2e,
}

impl LatencySli {
    pub const ALL: [LatencySli; 7] = [
        LatencySli::Queue,
        LatencySli::Prefill,
        LatencySli::Ttft,
        LatencySli::Decode,
        LatencySli::Tpot,
        LatencySli::ItlMax,
        LatencySli::E2e,
    ];

    /// The name used in the API and CLI (`ttft`).
    pub fn name(self) -> &'static str {
        match self {
            LatencySli::Queue => "queue",
            LatencySli::Prefill => "prefill",
            LatencySli::Ttft => "ttft",
            LatencySli::Decode => "decode",
            LatencySli::Tpot => "tpot",
            LatencySli::ItlMax => "itl_max",
            LatencySli::E2e => "e2e",
        }
    }

    /// The `requests` column it summarizes (milliseconds).
    pub fn column(self) -> &'static str {
        match self {
            LatencySli::Queue => "queue_ms",
            LatencySli::Prefill => "prefill_ms",
            LatencySli::Ttft => "ttft_ms",
            LatencySli::Decode => "decode_ms",
            LatencySli::Tpot => "tpot_ms",
            LatencySli::ItlMax => "itl_max_ms",
            LatencySli::E2e => "e2e_ms",
        }
    }

    pub(crate) fn slot(self) -> usize {
        self as usize
    }
}

/// SLIs computed from the additive counters of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterSli {
    /// Requests per second.
    RequestRate,
    /// Requests with status `error` / requests.
    ErrorRate,
    /// Requests that stopped at the token limit (`finish_reason = length`) / requests.
    AbortRate,
    /// Output tokens / input tokens.
    TokenEfficiency,
    /// Cached (prefix-hit) input tokens / input tokens.
    PrefixCacheHitRate,
    /// Output tokens per second.
    OutputTokensPerSecond,
}

impl CounterSli {
    pub const ALL: [CounterSli; 6] = [
        CounterSli::RequestRate,
        CounterSli::ErrorRate,
        CounterSli::AbortRate,
        CounterSli::TokenEfficiency,
        CounterSli::PrefixCacheHitRate,
        CounterSli::OutputTokensPerSecond,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CounterSli::RequestRate => "request_rate",
            CounterSli::ErrorRate => "error_rate",
            CounterSli::AbortRate => "abort_rate",
            CounterSli::TokenEfficiency => "token_efficiency",
            CounterSli::PrefixCacheHitRate => "prefix_cache_hit_rate",
            CounterSli::OutputTokensPerSecond => "output_tokens_per_s",
        }
    }

    /// `(numerator, denominator)` of the SLI over a merged cell covering `seconds` seconds.
    pub(crate) fn ratio(self, cell: &Cell, seconds: f64) -> (f64, f64) {
        match self {
            CounterSli::RequestRate => (cell.requests as f64, seconds),
            CounterSli::ErrorRate => (cell.errors as f64, cell.requests as f64),
            CounterSli::AbortRate => (cell.truncated as f64, cell.requests as f64),
            CounterSli::TokenEfficiency => (cell.output_tokens as f64, cell.input_tokens as f64),
            CounterSli::PrefixCacheHitRate => (cell.cached_tokens as f64, cell.input_tokens as f64),
            CounterSli::OutputTokensPerSecond => (cell.output_tokens as f64, seconds),
        }
    }
}

/// Any SLI a rollup answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sli {
    Latency(LatencySli),
    Counter(CounterSli),
}

impl Sli {
    /// Parses an API/CLI name; accepts the column form too (`ttft_ms`).
    pub fn parse(name: &str) -> Option<Sli> {
        let bare = name.strip_suffix("_ms").unwrap_or(name);
        LatencySli::ALL
            .into_iter()
            .find(|s| s.name() == bare)
            .map(Sli::Latency)
            .or_else(|| {
                CounterSli::ALL
                    .into_iter()
                    .find(|s| s.name() == name)
                    .map(Sli::Counter)
            })
    }

    pub fn name(self) -> &'static str {
        match self {
            Sli::Latency(s) => s.name(),
            Sli::Counter(s) => s.name(),
        }
    }

    /// Every SLI name, for error messages and docs.
    pub fn all_names() -> Vec<&'static str> {
        LatencySli::ALL
            .iter()
            .map(|s| s.name())
            .chain(CounterSli::ALL.iter().map(|s| s.name()))
            .collect()
    }
}
