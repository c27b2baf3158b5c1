//! The load generator's batches: the fleet simulator's trace exports regrouped per service into
//! OTLP export requests of a fixed span count (as an SDK's batch span processor fills them), or
//! bench/ingest.sh's synthetic request spans, protobuf-encoded once. A send copies a batch and rewrites its trace ids and request ids for
//! the pool's round (how many times the pool went by), so a batch sent again is new traffic to
//! the server — no span, trace or request it has seen — at the cost of a copy, not an encode.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::Path;

use infersight_sim::{SimConfig, SimError, Simulator, TelemetrySink};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::AnyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;

use crate::exit::CliError;

/// Request ids the simulator writes: this prefix and 32 lowercase hex digits.
const REQUEST_ID_PREFIX: &[u8] = b"cmpl-";
const REQUEST_ID_HEX: usize = 32;
/// Simulated spans per request (gateway, engine, tokenizer, detokenizer), to size the run.
const SPANS_PER_REQUEST: f64 = 4.0;

/// One encoded export request and where its ids are.
#[derive(Debug)]
pub struct Batch {
    bytes: Vec<u8>,
    pub spans: u64,
    /// Offsets of every 16-byte trace id in `bytes`.
    trace_ids: Vec<usize>,
    /// Offsets of the first 8 hex digits of every request id in `bytes`.
    request_ids: Vec<usize>,
}

/// The batches every exporter cycles through.
#[derive(Debug)]
pub struct Pool {
    batches: Vec<Batch>,
    pub spans: u64,
    /// Distinct trace ids in the pool (each round stores this many new ones).
    pub traces: u64,
}

/// What the pool is made of.
#[derive(Debug, Clone)]
pub struct PoolSpec {
    /// At least this many spans (whole batches; the last simulated chunk may add some).
    pub spans: u64,
    pub batch_spans: usize,
    pub seed: u64,
    pub source: SpanSource,
    /// Simulated spans end at the time the pool is built (else the simulator's fixed start).
    pub ending_now: bool,
}

/// Which spans the pool holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SpanSource {
    /// The fleet simulator's traces: gateway, engine, tokenizer and detokenizer spans per
    /// request, token events on some.
    Simulated,
    /// bench/ingest.sh's spans (`bench-gen otlp-jsonl`): one span per request with the GenAI
    /// latency attributes.
    Synthetic,
}

/// Keeps the simulator's traces, drops its logs, metrics and raw lines.
#[derive(Default)]
struct TracesOnly {
    exports: Vec<ExportTraceServiceRequest>,
}

impl TelemetrySink for TracesOnly {
    fn traces(&mut self, request: ExportTraceServiceRequest) -> Result<(), SimError> {
        self.exports.push(request);
        Ok(())
    }
    fn logs(&mut self, _: ExportLogsServiceRequest) -> Result<(), SimError> {
        Ok(())
    }
    fn metrics(&mut self, _: ExportMetricsServiceRequest) -> Result<(), SimError> {
        Ok(())
    }
    fn raw_log_line(&mut self, _: &str, _: &str, _: i64, _: &str) -> Result<(), SimError> {
        Ok(())
    }
}

impl Pool {
    /// At least `spec.spans` spans of `spec.source`, encoded as batches of `spec.batch_spans`.
    pub fn build(spec: &PoolSpec) -> Result<Pool, CliError> {
        if spec.batch_spans == 0 || spec.spans == 0 {
            return Err(CliError::usage(
                "--batch-spans and --pool-spans must be positive",
            ));
        }
        let exports = match spec.source {
            SpanSource::Simulated => simulate(spec)?,
            SpanSource::Synthetic => synthetic(spec),
        };
        let mut batches = Vec::new();
        let mut spans = 0;
        let mut traces = std::collections::HashSet::new();
        for export in exports {
            if spans >= spec.spans {
                break;
            }
            for span in export.resource_spans.iter().flat_map(spans_of) {
                traces.insert(span.trace_id.clone());
            }
            let batch = Batch::encode(&export);
            spans += batch.spans;
            batches.push(batch);
        }
        Ok(Pool {
            batches,
            spans,
            traces: traces.len() as u64,
        })
    }

    pub fn len(&self) -> u64 {
        self.batches.len() as u64
    }

    /// The `index`-th batch sent: the pool's batch `index mod len`, its ids rewritten for round
    /// `index / len` (round 0 is the batch as simulated). Answers the body and its span count.
    pub fn body(&self, index: u64) -> (Vec<u8>, u64) {
        let len = self.len().max(1);
        let batch = &self.batches[(index % len) as usize];
        let round = (index / len) as u32;
        let mut bytes = batch.bytes.clone();
        if round > 0 {
            batch.rewrite(&mut bytes, round);
        }
        (bytes, batch.spans)
    }

    /// Writes `rounds` passes over the pool as OTLP JSON Lines (the Collector file exporter's
    /// encoding), ids rewritten per round as a send would: the same spans as a file.
    pub fn write_jsonl(&self, path: &Path, rounds: u64) -> Result<u64, CliError> {
        let failed =
            |e: &dyn std::fmt::Display| CliError::failed(format!("{}: {e}", path.display()));
        let file = std::fs::File::create(path).map_err(|e| failed(&e))?;
        let mut writer = BufWriter::new(file);
        let mut spans = 0;
        for index in 0..rounds.saturating_mul(self.len()) {
            let (bytes, batch_spans) = self.body(index);
            let export =
                ExportTraceServiceRequest::decode(bytes.as_slice()).map_err(|e| failed(&e))?;
            serde_json::to_writer(&mut writer, &export).map_err(|e| failed(&e))?;
            writer.write_all(b"\n").map_err(|e| failed(&e))?;
            spans += batch_spans;
        }
        writer.flush().map_err(|e| failed(&e))?;
        Ok(spans)
    }
}

/// Simulates a healthy 16-worker fleet at 50 requests/s long enough for `spec.spans` spans,
/// regrouped per service into exports of `spec.batch_spans`.
fn simulate(spec: &PoolSpec) -> Result<Vec<ExportTraceServiceRequest>, CliError> {
    let mut config = SimConfig::new(infersight_sim::Scenario::Healthy);
    config.seed = spec.seed;
    config.duration_s = (spec.spans as f64 / (SPANS_PER_REQUEST * config.rate_per_s) * 1.1)
        .ceil()
        .max(60.0);
    if spec.ending_now {
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        config.start_ns = now_ns - (config.duration_s * 1e9) as i64;
    }
    let simulator = Simulator::new(config).map_err(crate::sim_sink::sim_error)?;
    let mut sink = TracesOnly::default();
    simulator
        .run(&mut sink)
        .map_err(crate::sim_sink::sim_error)?;
    Ok(regroup(sink.exports, spec.batch_spans))
}

/// bench/ingest.sh's request spans in exports of `spec.batch_spans`, their request ids written
/// as the simulator's (`cmpl-` and 32 hex digits) so that a round rewrites them too.
fn synthetic(spec: &PoolSpec) -> Vec<ExportTraceServiceRequest> {
    let mut rng = crate::rng::Rng::new(spec.seed);
    let per_batch = spec.batch_spans as u64;
    let mut exports = Vec::new();
    let mut first = 0;
    while first < spec.spans {
        let mut export = crate::benchgen::request_export(&mut rng, first, per_batch);
        let spans = export
            .resource_spans
            .iter_mut()
            .flat_map(|r| r.scope_spans.iter_mut())
            .flat_map(|s| s.spans.iter_mut());
        for attribute in spans.flat_map(|s| s.attributes.iter_mut()) {
            if attribute.key == "gen_ai.request.id"
                && let Some(AnyValue {
                    value: Some(Value::StringValue(id)),
                }) = attribute.value.as_mut()
            {
                let number = id.trim_start_matches("req-").parse::<u128>().unwrap_or(0);
                *id = format!("cmpl-{number:032x}");
            }
        }
        exports.push(export);
        first += per_batch;
    }
    exports
}

fn spans_of(resource: &ResourceSpans) -> impl Iterator<Item = &Span> {
    resource.scope_spans.iter().flat_map(|s| s.spans.iter())
}

impl Batch {
    fn encode(export: &ExportTraceServiceRequest) -> Batch {
        let bytes = export.encode_to_vec();
        let mut trace_ids: Vec<&[u8]> = export
            .resource_spans
            .iter()
            .flat_map(spans_of)
            .map(|s| s.trace_id.as_slice())
            .filter(|id| id.len() == 16)
            .collect();
        trace_ids.sort_unstable();
        trace_ids.dedup();
        let mut trace_offsets: Vec<usize> = trace_ids
            .iter()
            .flat_map(|id| memchr::memmem::find_iter(&bytes, id))
            .collect();
        trace_offsets.sort_unstable();
        let request_offsets = memchr::memmem::find_iter(&bytes, REQUEST_ID_PREFIX)
            .map(|at| at + REQUEST_ID_PREFIX.len())
            .filter(|&hex| {
                bytes
                    .get(hex..hex + REQUEST_ID_HEX)
                    .is_some_and(|digits| digits.iter().all(u8::is_ascii_hexdigit))
            })
            .collect();
        let spans = export.resource_spans.iter().flat_map(spans_of).count() as u64;
        Batch {
            bytes,
            spans,
            trace_ids: trace_offsets,
            request_ids: request_offsets,
        }
    }

    /// Rewrites the ids in `bytes` (a copy of this batch's) for `round`: the first four bytes of
    /// each trace id and the first eight hex digits of each request id are XORed with it, so
    /// spans of one trace (or one request) in different batches of a round still match. The
    /// leading digits: synthetic ids count up in their last ones, where a XOR would give another
    /// id of the pool.
    fn rewrite(&self, bytes: &mut [u8], round: u32) {
        let mask = round.to_be_bytes();
        for &at in &self.trace_ids {
            for (byte, m) in bytes[at..at + 4].iter_mut().zip(mask) {
                *byte ^= m;
            }
        }
        for &at in &self.request_ids {
            let digits = &mut bytes[at..at + 8];
            let old = std::str::from_utf8(digits)
                .ok()
                .and_then(|text| u32::from_str_radix(text, 16).ok())
                .unwrap_or(0);
            let new = format!("{:08x}", old ^ round);
            digits.copy_from_slice(new.as_bytes());
        }
    }
}

/// A service's spans waiting for a full batch.
struct Pending {
    resource: Option<Resource>,
    schema_url: String,
    scopes: Vec<ScopeSpans>,
    spans: usize,
}

impl Pending {
    fn take(&mut self) -> ExportTraceServiceRequest {
        self.spans = 0;
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: self.resource.clone(),
                scope_spans: std::mem::take(&mut self.scopes),
                schema_url: self.schema_url.clone(),
            }],
        }
    }

    fn push(&mut self, scope: &ScopeSpans, span: Span) {
        match self.scopes.last_mut() {
            Some(last) if last.scope == scope.scope && last.schema_url == scope.schema_url => {
                last.spans.push(span);
            }
            _ => self.scopes.push(ScopeSpans {
                scope: scope.scope.clone(),
                spans: vec![span],
                schema_url: scope.schema_url.clone(),
            }),
        }
        self.spans += 1;
    }
}

/// Each service's spans in simulated order, cut into exports of `batch_spans` as each fills;
/// what is left at the end goes out last, service by service.
fn regroup(
    exports: Vec<ExportTraceServiceRequest>,
    batch_spans: usize,
) -> Vec<ExportTraceServiceRequest> {
    let mut pending: BTreeMap<Vec<u8>, Pending> = BTreeMap::new();
    let mut out = Vec::new();
    for resource_spans in exports.into_iter().flat_map(|e| e.resource_spans) {
        let key = resource_spans
            .resource
            .as_ref()
            .map(Message::encode_to_vec)
            .unwrap_or_default();
        let service = pending.entry(key).or_insert_with(|| Pending {
            resource: resource_spans.resource.clone(),
            schema_url: resource_spans.schema_url.clone(),
            scopes: Vec::new(),
            spans: 0,
        });
        for mut scope in resource_spans.scope_spans {
            for span in std::mem::take(&mut scope.spans) {
                service.push(&scope, span);
                if service.spans == batch_spans {
                    out.push(service.take());
                }
            }
        }
    }
    out.extend(
        pending
            .values_mut()
            .filter(|p| p.spans > 0)
            .map(Pending::take),
    );
    out
}
