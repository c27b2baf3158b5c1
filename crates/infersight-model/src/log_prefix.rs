//! What the start of a raw log line says: its time and level. Raw engine output (vLLM, SGLang,
//! TGI, Triton glog, uvicorn, Python logging) has no fields, only text; the file receiver reads
//! each line's prefix with [`parse_log_prefix`] to stamp the log row before the pipeline runs,
//! and JSON-line readers use [`parse_iso_timestamp`] and [`normalize_severity`] for the time and
//! level values they find. Pure functions over text, no state: the caller supplies `now` (for
//! year-less times) and decides what a line without a time gets.

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc};

/// What the start of a text log line says about the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinePrefix {
    pub ts_ns: Option<i64>,
    pub severity: Option<&'static str>,
}

/// The canonical severity for a level word (`WARNING` → `WARN`, `CRITICAL` → `FATAL`).
pub fn normalize_severity(word: &str) -> Option<&'static str> {
    Some(match word.to_ascii_uppercase().as_str() {
        "TRACE" => "TRACE",
        "DEBUG" | "DBG" => "DEBUG",
        "INFO" | "INFORMATION" | "NOTICE" => "INFO",
        "WARN" | "WARNING" => "WARN",
        "ERROR" | "ERR" => "ERROR",
        "FATAL" | "CRITICAL" | "CRIT" | "PANIC" | "EMERG" | "ALERT" => "FATAL",
        _ => return None,
    })
}

/// Parses the time and level at the start of a log line. Recognized times (without a zone they
/// are taken as UTC):
/// * RFC 3339 / ISO 8601, `T` or space separated, optionally in brackets
///   (`2024-11-29T02:17:03.123Z`, `[2024-11-29 02:17:03]`, Python's `2024-11-29 02:17:03,123`);
/// * vLLM's `INFO 11-29 02:17:03 file.py:123]`, with the year that puts it closest before `now`,
///   also behind vLLM V1's `(APIServer pid=1) ` prefix;
/// * glog (Triton): `I1129 02:17:03.123456 …`.
///
/// The level is the first of the first six words that is an upper-case level name (`INFO`,
/// `WARNING`, `ERROR:`, `[debug]`, `level=warn`).
pub fn parse_log_prefix(line: &str, now: DateTime<Utc>) -> LinePrefix {
    let line = strip_process_prefix(line.trim_start());
    let tokens: Vec<&str> = line.split_whitespace().take(8).collect();
    if tokens.is_empty() {
        return LinePrefix::default();
    }
    if let Some(prefix) = parse_vllm(&tokens, now).or_else(|| parse_glog(&tokens, now)) {
        return prefix;
    }
    // The time leads, or follows a level word (`INFO 2024-11-29 02:17:03 …`).
    let ts_ns = parse_iso_tokens(&tokens)
        .or_else(|| level_word(tokens[0]).and_then(|_| parse_iso_tokens(&tokens[1..])));
    let severity = tokens.iter().take(6).find_map(|token| level_word(token));
    LinePrefix { ts_ns, severity }
}

/// vLLM V1 prefixes lines with the process: `(APIServer pid=123) INFO 11-29 …`.
fn strip_process_prefix(line: &str) -> &str {
    if let Some(rest) = line.strip_prefix('(')
        && let Some(close) = rest.find(") ")
        && close < 64
    {
        return rest[close + 2..].trim_start();
    }
    line
}

/// A level word as a token: upper case, or marked as one by brackets or `level=`.
fn level_word(token: &str) -> Option<&'static str> {
    let lowered = token.to_ascii_lowercase();
    let (marked, rest) = match lowered.strip_prefix("level=") {
        Some(_) => (true, &token[6..]),
        None => (token.starts_with('[') || token.starts_with('<'), token),
    };
    let word = rest.trim_matches(|c: char| "[]()<>:,|\"'".contains(c));
    if word.is_empty() {
        return None;
    }
    let upper = word.chars().all(|c| c.is_ascii_uppercase());
    if !(upper || marked) {
        return None;
    }
    normalize_severity(word)
}

fn parse_vllm(tokens: &[&str], now: DateTime<Utc>) -> Option<LinePrefix> {
    let [level, date, time, ..] = tokens else {
        return None;
    };
    let severity = level_word(level)?;
    let (month, day) = date.split_once('-')?;
    if month.len() != 2 || day.len() != 2 {
        return None;
    }
    let month: u32 = month.parse().ok()?;
    let day: u32 = day.parse().ok()?;
    let time = NaiveTime::parse_from_str(time.trim_end_matches(']'), "%H:%M:%S%.f").ok()?;
    let ts_ns = ts_with_recent_year(month, day, time, now)?;
    Some(LinePrefix {
        ts_ns: Some(ts_ns),
        severity: Some(severity),
    })
}

fn parse_glog(tokens: &[&str], now: DateTime<Utc>) -> Option<LinePrefix> {
    let [head, time, ..] = tokens else {
        return None;
    };
    let bytes = head.as_bytes();
    if bytes.len() != 5 || !bytes[1..].iter().all(u8::is_ascii_digit) {
        return None;
    }
    let severity = match bytes[0] {
        b'I' => "INFO",
        b'W' => "WARN",
        b'E' => "ERROR",
        b'F' => "FATAL",
        _ => return None,
    };
    let month: u32 = head[1..3].parse().ok()?;
    let day: u32 = head[3..5].parse().ok()?;
    let time = NaiveTime::parse_from_str(time, "%H:%M:%S%.f").ok()?;
    let ts_ns = ts_with_recent_year(month, day, time, now)?;
    Some(LinePrefix {
        ts_ns: Some(ts_ns),
        severity: Some(severity),
    })
}

/// A year-less time in the current year, or the previous one when that would be more than a day
/// in the future (a December log read in January).
fn ts_with_recent_year(month: u32, day: u32, time: NaiveTime, now: DateTime<Utc>) -> Option<i64> {
    let at_year = |year: i32| {
        NaiveDate::from_ymd_opt(year, month, day)
            .map(|date| Utc.from_utc_datetime(&date.and_time(time)))
    };
    let mut ts = at_year(now.year())?;
    if ts > now + chrono::Duration::days(1) {
        ts = at_year(now.year() - 1)?;
    }
    ts.timestamp_nanos_opt()
}

/// An ISO time in the first one or two tokens (`2024-11-29T02:17:03Z`, `2024-11-29 02:17:03,5`).
fn parse_iso_tokens(tokens: &[&str]) -> Option<i64> {
    let first = tokens.first()?.trim_start_matches('[');
    if !looks_like_date(first) {
        return None;
    }
    if first.len() > 10 {
        return parse_iso_timestamp(first.trim_end_matches([']', ',', '|']));
    }
    let time = tokens.get(1)?.trim_end_matches([']', ',', '|']);
    parse_iso_timestamp(&format!("{first}T{time}"))
}

fn looks_like_date(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() >= 10
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5..7].iter().all(u8::is_ascii_digit)
        && b[7] == b'-'
        && b[8..10].iter().all(u8::is_ascii_digit)
}

/// RFC 3339 or ISO 8601 date-time (`T` or space, `,` or `.` before the fraction, zone optional
/// and UTC when absent) → ns.
pub fn parse_iso_timestamp(text: &str) -> Option<i64> {
    let text = text.trim().trim_end_matches(':');
    if !looks_like_date(text) {
        return None;
    }
    let mut normalized = text.replacen(' ', "T", 1);
    if let Some(comma) = normalized.find(',') {
        normalized.replace_range(comma..comma + 1, ".");
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(&normalized) {
        return t.timestamp_nanos_opt();
    }
    if let Ok(t) = DateTime::parse_from_str(&normalized, "%Y-%m-%dT%H:%M:%S%.f%z") {
        return t.timestamp_nanos_opt();
    }
    let naive = NaiveDateTime::parse_from_str(&normalized, "%Y-%m-%dT%H:%M:%S%.f")
        .or_else(|_| NaiveDateTime::parse_from_str(&normalized, "%Y-%m-%dT%H:%M"))
        .ok()?;
    Utc.from_utc_datetime(&naive).timestamp_nanos_opt()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2025, 3, 1, 0, 0, 0).unwrap()
    }

    fn ns(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> i64 {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s)
            .unwrap()
            .timestamp_nanos_opt()
            .unwrap()
    }

    #[test]
    fn vllm_lines_get_time_and_level() {
        let p = parse_log_prefix(
            "INFO 02-21 20:06:29 api_server.py:528] vLLM API server",
            now(),
        );
        assert_eq!(p.ts_ns, Some(ns(2025, 2, 21, 20, 6, 29)));
        assert_eq!(p.severity, Some("INFO"));
        let p = parse_log_prefix("WARNING 12-31 23:59:59 scheduler.py:1483] x", now());
        assert_eq!(p.ts_ns, Some(ns(2024, 12, 31, 23, 59, 59)), "previous year");
        assert_eq!(p.severity, Some("WARN"));
        let p = parse_log_prefix(
            "(APIServer pid=42) ERROR 02-28 10:00:00 [core.py:1] boom",
            now(),
        );
        assert_eq!(
            (p.ts_ns, p.severity),
            (Some(ns(2025, 2, 28, 10, 0, 0)), Some("ERROR"))
        );
    }

    #[test]
    fn iso_python_glog_and_uvicorn_lines() {
        let p = parse_log_prefix("2024-11-29 02:17:03,250 - vllm - INFO - ready", now());
        assert_eq!(p.ts_ns, Some(ns(2024, 11, 29, 2, 17, 3) + 250_000_000));
        assert_eq!(p.severity, Some("INFO"));
        let p = parse_log_prefix("2024-11-29T02:17:03.5+01:00  WARN router: slow", now());
        assert_eq!(p.ts_ns, Some(ns(2024, 11, 29, 1, 17, 3) + 500_000_000));
        assert_eq!(p.severity, Some("WARN"));
        let p = parse_log_prefix("[2024-11-29 02:17:03] Prefill batch", now());
        assert_eq!(
            (p.ts_ns, p.severity),
            (Some(ns(2024, 11, 29, 2, 17, 3)), None)
        );
        let p = parse_log_prefix("E0228 10:00:00.000001 1 grpc.cc:1] failed", now());
        assert_eq!(
            (p.ts_ns, p.severity),
            (Some(ns(2025, 2, 28, 10, 0, 0) + 1_000), Some("ERROR"))
        );
        let p = parse_log_prefix(
            "INFO:     127.0.0.1:1 - \"POST /v1/completions HTTP/1.1\" 200 OK",
            now(),
        );
        assert_eq!((p.ts_ns, p.severity), (None, Some("INFO")));
        let p = parse_log_prefix("[INFO] 2024-11-29 02:17:03.5 started", now());
        assert_eq!(p.ts_ns, Some(ns(2024, 11, 29, 2, 17, 3) + 500_000_000));
        assert_eq!(p.severity, Some("INFO"));
        let p = parse_log_prefix("an error happened in info", now());
        assert_eq!(p, LinePrefix::default());
    }
}
