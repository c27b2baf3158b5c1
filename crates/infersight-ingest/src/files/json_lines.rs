//! Generic JSON lines of a file: one object per line, flattened to dotted keys; a request row
//! when it carries GenAI / LLM fields or canonical column names (see `json_request`), a log row
//! otherwise (body, time, level, service, worker and request id taken from their usual keys, every
//! other key kept in `attrs`).

use infersight_model::log_prefix::{normalize_severity, parse_iso_timestamp};
use infersight_model::mapping::RequestColumn;
use infersight_model::normalize::{SpanFacts, attrs_json};
use infersight_model::{AttrValue, LogRecord};
use serde_json::{Map, Value as Json};

use super::FILE_PATH_ATTR;
use super::json_request::{JsonRequest, json_request, looks_like_request};
use super::reader::FileReader;

impl FileReader<'_> {
    pub(super) fn json_line(&mut self, raw: &[u8]) {
        self.summary.records_read += 1;
        let value: Json = match serde_json::from_slice(raw) {
            Ok(value) => value,
            Err(e) => return self.reject(format!("invalid json: {e}")),
        };
        let Json::Object(object) = value else {
            return self.reject(format!(
                "expected a JSON object, found {}",
                json_type(&value)
            ));
        };
        let mut pairs = Vec::with_capacity(object.len());
        flatten("", object, &mut pairs);
        match self.json_record(pairs, raw) {
            Ok(()) => self.pending.records += 1,
            Err(reason) => self.reject(reason),
        }
    }

    /// One flattened JSON object → a request row, or a log row when it is not a request.
    fn json_record(&mut self, mut pairs: Vec<(String, Json)>, raw: &[u8]) -> Result<(), String> {
        let ts = take_first(&mut pairs, TIME_KEYS, json_time_ns);
        let trace_id = take_first(&mut pairs, &["trace_id", "traceId", "trace.id"], json_label);
        let span_id = take_first(&mut pairs, &["span_id", "spanId", "span.id"], json_label);
        let ts_ns = ts.unwrap_or(self.mtime_ns);
        if looks_like_request(&pairs) {
            let facts = SpanFacts {
                ts_ns,
                end_ts_ns: None,
                trace_id,
                span_id,
                status: None,
            };
            let resource = self.option_resource();
            match json_request(self.mapper, &resource, pairs, facts)? {
                JsonRequest::Request(record) => {
                    self.pending.requests.push(*record);
                    return Ok(());
                }
                JsonRequest::NotARequest(back, facts) => {
                    return self.json_log(back, raw, ts_ns, facts.trace_id, facts.span_id);
                }
            }
        }
        self.json_log(pairs, raw, ts_ns, trace_id, span_id)
    }

    fn json_log(
        &mut self,
        mut pairs: Vec<(String, Json)>,
        raw: &[u8],
        ts_ns: i64,
        trace_id: Option<String>,
        span_id: Option<String>,
    ) -> Result<(), String> {
        let body = take_first(&mut pairs, BODY_KEYS, |v| match v {
            Json::Null => None,
            Json::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        })
        .unwrap_or_else(|| String::from_utf8_lossy(raw).into_owned());
        let severity = take_first(
            &mut pairs,
            &[
                "level",
                "severity",
                "levelname",
                "lvl",
                "severity_text",
                "log.level",
            ],
            json_severity,
        );
        let service = take_first(
            &mut pairs,
            &["service.name", "service", "service_name"],
            json_label,
        )
        .or_else(|| self.options.service.clone());
        let attrs: Vec<(String, AttrValue)> = pairs
            .iter()
            .map(|(k, v)| (k.clone(), AttrValue::from_json(v)))
            .collect();
        let mapped = |column: RequestColumn| {
            let mut best: Option<(usize, String)> = None;
            for (key, value) in &attrs {
                let Some((c, _, priority)) = self.mapper.lookup(key) else {
                    continue;
                };
                if c != column || best.as_ref().is_some_and(|(p, _)| *p <= priority) {
                    continue;
                }
                if let Some(label) = value.as_label().filter(|l| !l.is_empty()) {
                    best = Some((priority, label));
                }
            }
            best.map(|(_, label)| label)
        };
        let worker = mapped(RequestColumn::Worker).or_else(|| self.options.worker.clone());
        let request_id = mapped(RequestColumn::RequestId).or_else(|| {
            attrs
                .iter()
                .find(|(k, _)| matches!(k.as_str(), "request_id" | "requestId" | "req_id"))
                .and_then(|(_, v)| v.as_label())
        });
        let file_attr = [(
            FILE_PATH_ATTR.to_string(),
            AttrValue::Str(self.path_display.clone()),
        )];
        let record = LogRecord {
            ts: ts_ns,
            severity,
            service,
            worker,
            trace_id,
            span_id,
            request_id,
            body: Some(body),
            attrs: attrs_json(&file_attr, &attrs),
            ..Default::default()
        };
        self.pending.logs.push(record);
        Ok(())
    }

    fn option_resource(&self) -> Vec<(String, AttrValue)> {
        let mut resource = Vec::new();
        if let Some(service) = &self.options.service {
            resource.push(("service.name".to_string(), AttrValue::Str(service.clone())));
        }
        if let Some(worker) = &self.options.worker {
            resource.push(("worker".to_string(), AttrValue::Str(worker.clone())));
        }
        resource
    }
}

fn json_type(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

/// Keys that carry a log record's body, in order of preference.
const BODY_KEYS: &[&str] = &["message", "msg", "body", "log"];

/// Keys that carry a record's time, in order of preference.
const TIME_KEYS: &[&str] = &[
    "ts",
    "timestamp",
    "time",
    "@timestamp",
    "start_time",
    "created",
];

/// Flattens nested objects into dotted keys (`{"gen_ai":{"request":{"model":…}}}` →
/// `gen_ai.request.model`); arrays stay values.
/// A top-level body (`"message": {…}`) stays one value: it is the log body.
fn flatten(prefix: &str, object: Map<String, Json>, out: &mut Vec<(String, Json)>) {
    for (key, value) in object {
        let is_body = prefix.is_empty() && BODY_KEYS.contains(&key.as_str());
        let key = if prefix.is_empty() {
            key
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            Json::Object(inner) if !inner.is_empty() && !is_body => flatten(&key, inner, out),
            other => out.push((key, other)),
        }
    }
}

/// Removes and converts the first of `keys` present whose value converts.
fn take_first<T>(
    pairs: &mut Vec<(String, Json)>,
    keys: &[&str],
    convert: impl Fn(&Json) -> Option<T>,
) -> Option<T> {
    for key in keys {
        if let Some(index) = pairs.iter().position(|(k, _)| k == key)
            && let Some(converted) = convert(&pairs[index].1)
        {
            pairs.remove(index);
            return Some(converted);
        }
    }
    None
}

fn json_label(value: &Json) -> Option<String> {
    AttrValue::from_json(value)
        .as_label()
        .filter(|s| !s.is_empty())
}

/// A JSON time: RFC 3339 / ISO 8601 text, or a Unix time in s, ms, µs or ns (by magnitude), as
/// a number or a numeric string.
pub fn json_time_ns(value: &Json) -> Option<i64> {
    match value {
        Json::Number(n) => match n.as_i64() {
            Some(integer) => epoch_int_to_ns(integer),
            None => epoch_float_to_ns(n.as_f64()?),
        },
        Json::String(s) => {
            let s = s.trim();
            if let Ok(integer) = s.parse::<i64>() {
                return epoch_int_to_ns(integer);
            }
            if let Ok(number) = s.parse::<f64>() {
                return epoch_float_to_ns(number);
            }
            parse_iso_timestamp(s)
        }
        _ => None,
    }
}

/// Nanoseconds per unit of a Unix time of unknown unit: below 1e11 it is seconds (until the year
/// 5138), below 1e14 milliseconds, below 1e17 microseconds, else nanoseconds.
fn epoch_unit_ns(magnitude: f64) -> i64 {
    if magnitude < 1e11 {
        1_000_000_000
    } else if magnitude < 1e14 {
        1_000_000
    } else if magnitude < 1e17 {
        1_000
    } else {
        1
    }
}

/// Integer Unix times are converted exactly (f64 would round nanoseconds).
fn epoch_int_to_ns(value: i64) -> Option<i64> {
    if value <= 0 {
        return None;
    }
    value.checked_mul(epoch_unit_ns(value as f64))
}

/// Fractional Unix times: the whole part exactly, the fraction rounded to the nanosecond.
fn epoch_float_to_ns(value: f64) -> Option<i64> {
    if !value.is_finite() || value <= 0.0 || value >= i64::MAX as f64 {
        return None;
    }
    let unit = epoch_unit_ns(value);
    let whole = value.trunc() as i64;
    let fraction = ((value - value.trunc()) * unit as f64).round() as i64;
    whole.checked_mul(unit)?.checked_add(fraction)
}

fn json_severity(value: &Json) -> Option<String> {
    match value {
        Json::String(s) if !s.trim().is_empty() => Some(
            normalize_severity(s.trim())
                .map(str::to_string)
                .unwrap_or_else(|| s.trim().to_ascii_uppercase()),
        ),
        // pino / bunyan numeric levels.
        Json::Number(n) => match n.as_i64()? {
            10 => Some("TRACE".into()),
            20 => Some("DEBUG".into()),
            30 => Some("INFO".into()),
            40 => Some("WARN".into()),
            50 => Some("ERROR".into()),
            60 => Some("FATAL".into()),
            _ => None,
        },
        _ => None,
    }
}
