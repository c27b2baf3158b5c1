//! Arrivals: when requests reach the gateway and how long their prompts and outputs are. Either
//! replayed from the real Mooncake / Azure traces in `shared/data/llm_traces` (time-scaled to the
//! requested rate, looped when the simulation outlasts the trace, Mooncake's prefix hash blocks
//! kept) or Poisson with lognormal lengths. A rate profile (slow load variation, surges) bends
//! time without dropping or duplicating any source arrival, so length distributions are exactly
//! the source's.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::config::{ArrivalKind, SimConfig};
use crate::error::SimError;
use crate::rng::Rng;

/// One request of a source trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceRecord {
    /// Seconds since the trace's first request.
    pub offset_s: f64,
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// Prefix-block hashes (512 tokens each); empty when the trace has none.
    pub hash_ids: Vec<u64>,
}

/// A loaded trace, sorted by time.
#[derive(Debug, Clone)]
pub struct Trace {
    pub kind: ArrivalKind,
    pub path: PathBuf,
    pub records: Vec<TraceRecord>,
}

impl Trace {
    /// Seconds from the first to the last arrival (at least one second).
    pub fn span_s(&self) -> f64 {
        self.records
            .last()
            .map(|r| r.offset_s)
            .unwrap_or(0.0)
            .max(1.0)
    }

    pub fn mean_rate_per_s(&self) -> f64 {
        self.records.len() as f64 / self.span_s()
    }
}

/// The file of a trace kind under the data folder.
pub fn trace_path(kind: ArrivalKind, data_dir: &Path) -> Option<PathBuf> {
    let rel = match kind {
        ArrivalKind::Mooncake => "llm_traces/mooncake/conversation_trace.jsonl",
        ArrivalKind::AzureCode => "llm_traces/azure_2023/AzureLLMInferenceTrace_code.csv",
        ArrivalKind::AzureConv => "llm_traces/azure_2023/AzureLLMInferenceTrace_conv.csv",
        ArrivalKind::Poisson => return None,
    };
    Some(data_dir.join(rel))
}

#[derive(Deserialize)]
struct MooncakeLine {
    timestamp: u64,
    input_length: u32,
    output_length: u32,
    #[serde(default)]
    hash_ids: Vec<u64>,
}

/// Loads a replay trace; `DataMissing` when the file is absent.
pub fn load_trace(kind: ArrivalKind, data_dir: &Path) -> Result<Trace, SimError> {
    let path = trace_path(kind, data_dir)
        .ok_or_else(|| SimError::Config("poisson arrivals have no trace file".into()))?;
    if !path.is_file() {
        return Err(SimError::DataMissing { path });
    }
    let bad = |message: String| SimError::Data {
        path: path.clone(),
        message,
    };
    let file = std::fs::File::open(&path).map_err(|e| bad(e.to_string()))?;
    let reader = std::io::BufReader::new(file);
    let mut records = Vec::new();
    let mut first_s: Option<f64> = None;
    for (no, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| bad(e.to_string()))?;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let (at_s, input, output, hash_ids) = if kind == ArrivalKind::Mooncake {
            let parsed: MooncakeLine =
                serde_json::from_str(line).map_err(|e| bad(format!("line {}: {e}", no + 1)))?;
            (
                parsed.timestamp as f64 / 1_000.0,
                parsed.input_length,
                parsed.output_length,
                parsed.hash_ids,
            )
        } else {
            if no == 0 && line.starts_with("TIMESTAMP") {
                continue;
            }
            let mut fields = line.split(',');
            let (Some(ts), Some(input), Some(output)) =
                (fields.next(), fields.next(), fields.next())
            else {
                return Err(bad(format!("line {}: expected 3 fields", no + 1)));
            };
            let at_s = parse_azure_time(ts)
                .ok_or_else(|| bad(format!("line {}: bad timestamp `{ts}`", no + 1)))?;
            let parse = |v: &str| {
                v.trim()
                    .parse::<u32>()
                    .map_err(|_| bad(format!("line {}: bad token count `{v}`", no + 1)))
            };
            (at_s, parse(input)?, parse(output)?, Vec::new())
        };
        let first = *first_s.get_or_insert(at_s);
        records.push(TraceRecord {
            offset_s: at_s - first,
            input_tokens: input.max(1),
            output_tokens: output.max(1),
            hash_ids,
        });
    }
    if records.is_empty() {
        return Err(bad("no records".into()));
    }
    records.sort_by(|a, b| a.offset_s.total_cmp(&b.offset_s));
    let first = records[0].offset_s;
    for r in &mut records {
        r.offset_s -= first;
    }
    Ok(Trace {
        kind,
        path,
        records,
    })
}

/// `2023-11-16 18:17:03.9799600` → seconds since the Unix epoch.
fn parse_azure_time(text: &str) -> Option<f64> {
    let (date, time) = text.trim().split_once(' ')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut t = time.split(':');
    let (h, mi, s) = (
        t.next()?.parse::<f64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
    );
    Some(crate::timefmt::days_from_civil(y, m, day) as f64 * 86_400.0 + h * 3_600.0 + mi * 60.0 + s)
}

/// The load multiplier over simulated time, and its integral, so source arrivals spaced in
/// "virtual" time at the base rate can be mapped onto real simulated time.
#[derive(Debug, Clone)]
pub struct RateProfile {
    /// Cumulative virtual seconds at the start of each real second.
    cumulative: Vec<f64>,
    multiplier: Vec<f64>,
}

impl RateProfile {
    pub fn new(config: &SimConfig) -> Self {
        let seconds = config.duration_s.ceil() as usize + 1;
        let mut cumulative = Vec::with_capacity(seconds + 1);
        let mut multiplier = Vec::with_capacity(seconds);
        let mut total = 0.0;
        // The short cycle keeps its phase from the start of the run (as it always had); the
        // daily one follows the time of day.
        let origin_s = match config.load_cycle {
            crate::config::LoadCycle::Daily => config.start_ns as f64 / 1e9,
            _ => 0.0,
        };
        for s in 0..seconds {
            let t = s as f64 + 0.5;
            let mut m = config.load_cycle.multiplier(origin_s + t);
            for surge in &config.surges {
                if t >= surge.start_s && t < surge.end_s {
                    m *= surge.factor;
                }
            }
            cumulative.push(total);
            multiplier.push(m);
            total += m;
        }
        cumulative.push(total);
        Self {
            cumulative,
            multiplier,
        }
    }

    /// Multiplier at simulated second `t_s`.
    pub fn at(&self, t_s: f64) -> f64 {
        let i = (t_s.max(0.0) as usize).min(self.multiplier.len() - 1);
        self.multiplier[i]
    }

    /// Real seconds at which virtual time `u` is reached; `None` past the end.
    pub fn real_time(&self, u: f64) -> Option<f64> {
        let last = *self.cumulative.last()?;
        if u >= last {
            return None;
        }
        // Largest k with cumulative[k] <= u.
        let k = self
            .cumulative
            .partition_point(|c| *c <= u)
            .saturating_sub(1);
        Some(k as f64 + (u - self.cumulative[k]) / self.multiplier[k])
    }
}

/// An arrival before routing: time offset from the simulation start and lengths.
#[derive(Debug, Clone)]
pub struct Arrival {
    pub offset_s: f64,
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// Prefix blocks from the trace (Mooncake); empty → synthesized from tenant and session.
    pub hash_ids: Vec<u64>,
}

/// Produces arrivals in time order.
pub struct ArrivalStream {
    profile: RateProfile,
    rate: f64,
    trace: Option<Trace>,
    next_index: usize,
    loop_no: u64,
    hash_stride: u64,
    virtual_s: f64,
    rng: Rng,
}

impl ArrivalStream {
    pub fn new(config: &SimConfig, trace: Option<Trace>) -> Self {
        let hash_stride = trace
            .as_ref()
            .and_then(|t| t.records.iter().flat_map(|r| r.hash_ids.iter()).max())
            .map_or(0, |m| m + 1);
        Self {
            profile: RateProfile::new(config),
            rate: config.rate_per_s,
            trace,
            next_index: 0,
            loop_no: 0,
            hash_stride,
            virtual_s: 0.0,
            rng: Rng::stream(config.seed, 1),
        }
    }

    pub fn profile(&self) -> &RateProfile {
        &self.profile
    }
}

impl Iterator for ArrivalStream {
    type Item = Arrival;

    fn next(&mut self) -> Option<Arrival> {
        match &self.trace {
            None => {
                self.virtual_s += self.rng.exp(1.0 / self.rate);
                let offset_s = self.profile.real_time(self.virtual_s)?;
                // Lognormal lengths: medians and spreads of chat traffic (Azure conversation-like).
                let input = self.rng.lognormal(900.0, 0.9).clamp(16.0, 32_000.0) as u32;
                let output = self.rng.lognormal(180.0, 0.7).clamp(1.0, 4_000.0) as u32;
                Some(Arrival {
                    offset_s,
                    input_tokens: input,
                    output_tokens: output,
                    hash_ids: Vec::new(),
                })
            }
            Some(trace) => {
                let n = trace.records.len();
                if self.next_index == n {
                    self.next_index = 0;
                    self.loop_no += 1;
                }
                let record = &trace.records[self.next_index];
                self.next_index += 1;
                // Virtual time: the trace's own spacing scaled to the requested mean rate; each
                // loop starts one trace-length later.
                let scale = trace.mean_rate_per_s() / self.rate;
                let loop_len = n as f64 / self.rate;
                let u = self.loop_no as f64 * loop_len + record.offset_s * scale;
                let offset_s = self.profile.real_time(u)?;
                let shift = self.loop_no * self.hash_stride;
                Some(Arrival {
                    offset_s,
                    input_tokens: record.input_tokens,
                    output_tokens: record.output_tokens,
                    hash_ids: record.hash_ids.iter().map(|h| h + shift).collect(),
                })
            }
        }
    }
}
