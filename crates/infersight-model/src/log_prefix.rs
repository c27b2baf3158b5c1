//! What the start of a raw log line says: its time and level. Raw engine output (vLLM, SGLang,
//! TGI, Triton glog, uvicorn, Python logging) has no fields, only text; the file receiver reads
//! each line's prefix with [`parse_log_prefix`] to stamp the log row before the pipeline runs,
//! and JSON-line readers use [`parse_iso_timestamp`] and [`normalize_severity`] for the time and
//! level values they find. Pure functions over text, no state: the caller supplies a
//! [`YearAnchor`] for year-less times (vLLM, glog), and decides what a line without a time gets.

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc};

/// What the start of a text log line says about the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinePrefix {
    pub ts_ns: Option<i64>,
    pub severity: Option<&'static str>,
    /// The time had no year (vLLM `11-29 02:17:03`, glog `I1129 …`): its year came from the
    /// [`YearAnchor`].
    pub year_inferred: bool,
}

/// Where a time without a year is placed: the line says month, day and time, the caller says
/// which year from what it knows around the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YearAnchor {
    /// In this year (given by the user).
    Year(i32),
    /// The year that puts the time nearest to this range (ns, `from_ns <= to_ns`): the time of
    /// the line before in the same file, or the data around the line. Within six months either
    /// way, so a log that runs past New Year moves on to the next year.
    Near { from_ns: i64, to_ns: i64 },
    /// The latest year that puts the time at most a day after this instant (ns): now, or a
    /// file's modification time (a line is written before its file last changes).
    Before(i64),
}

impl YearAnchor {
    /// [`YearAnchor::Near`] one instant.
    pub fn near(ts_ns: i64) -> Self {
        YearAnchor::Near {
            from_ns: ts_ns,
            to_ns: ts_ns,
        }
    }
}

/// The process tag vLLM (0.10 and later) writes before a line: `(APIServer pid=123)`,
/// `(EngineCore_0 pid=456)`, `(VllmWorker rank=0 pid=789)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessTag<'a> {
    /// The process's title: `APIServer`, `EngineCore_0`, `VllmWorker`.
    pub title: &'a str,
    pub pid: Option<u32>,
    /// The worker's rank among the engine's workers (tensor/pipeline parallel).
    pub rank: Option<u32>,
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
///   also behind vLLM's process tag (`(APIServer pid=1) `, see [`process_tag`]);
/// * glog (Triton): `I1129 02:17:03.123456 …`.
///
/// The level is the first of the first six words that is an upper-case level name (`INFO`,
/// `WARNING`, `ERROR:`, `[debug]`, `level=warn`).
pub fn parse_log_prefix(line: &str, now: DateTime<Utc>) -> LinePrefix {
    let now_ns = now.timestamp_nanos_opt().unwrap_or(i64::MAX);
    parse_log_prefix_near(line, YearAnchor::Before(now_ns))
}

/// [`parse_log_prefix`] with the year of a year-less time taken from `anchor`.
pub fn parse_log_prefix_near(line: &str, anchor: YearAnchor) -> LinePrefix {
    let line = strip_process_prefix(line.trim_start());
    let tokens: Vec<&str> = line.split_whitespace().take(8).collect();
    if tokens.is_empty() {
        return LinePrefix::default();
    }
    if let Some(prefix) = parse_vllm(&tokens, anchor).or_else(|| parse_glog(&tokens, anchor)) {
        return prefix;
    }
    // The time leads, or follows a level word (`INFO 2024-11-29 02:17:03 …`).
    let ts_ns = parse_iso_tokens(&tokens)
        .or_else(|| level_word(tokens[0]).and_then(|_| parse_iso_tokens(&tokens[1..])));
    let severity = tokens.iter().take(6).find_map(|token| level_word(token));
    LinePrefix {
        ts_ns,
        severity,
        year_inferred: false,
    }
}

/// The process tag at the start of a vLLM line, `(TITLE key=value …) `, when it names a pid or
/// a rank; the line's time and level follow it.
pub fn process_tag(line: &str) -> Option<ProcessTag<'_>> {
    let (inner, _) = tag_and_rest(line.trim_start())?;
    let mut words = inner.split_whitespace();
    let title = words.next()?;
    let mut tag = ProcessTag {
        title,
        pid: None,
        rank: None,
    };
    for word in words {
        match word.split_once('=') {
            Some(("pid", value)) => tag.pid = Some(value.parse().ok()?),
            Some(("rank", value)) => tag.rank = Some(value.parse().ok()?),
            _ => return None,
        }
    }
    (tag.pid.is_some() || tag.rank.is_some()).then_some(tag)
}

/// `(…) rest` at the start of a line: what is inside the parentheses, and the rest.
fn tag_and_rest(line: &str) -> Option<(&str, &str)> {
    let rest = line.strip_prefix('(')?;
    let close = rest.find(") ")?;
    (close < 64).then(|| (&rest[..close], rest[close + 2..].trim_start()))
}

/// vLLM prefixes lines with the process: `(APIServer pid=123) INFO 11-29 …`.
fn strip_process_prefix(line: &str) -> &str {
    tag_and_rest(line).map_or(line, |(_, rest)| rest)
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

fn parse_vllm(tokens: &[&str], anchor: YearAnchor) -> Option<LinePrefix> {
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
    let ts_ns = ts_in_anchored_year(month, day, time, anchor)?;
    Some(LinePrefix {
        ts_ns: Some(ts_ns),
        severity: Some(severity),
        year_inferred: true,
    })
}

fn parse_glog(tokens: &[&str], anchor: YearAnchor) -> Option<LinePrefix> {
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
    let ts_ns = ts_in_anchored_year(month, day, time, anchor)?;
    Some(LinePrefix {
        ts_ns: Some(ts_ns),
        severity: Some(severity),
        year_inferred: true,
    })
}

const DAY_NS: i64 = 86_400_000_000_000;

/// A year-less time in the year `anchor` points to (see [`YearAnchor`]). February 29 is looked
/// for in the nearest leap years.
fn ts_in_anchored_year(month: u32, day: u32, time: NaiveTime, anchor: YearAnchor) -> Option<i64> {
    let at_year = |year: i32| {
        NaiveDate::from_ymd_opt(year, month, day).and_then(|date| {
            Utc.from_utc_datetime(&date.and_time(time))
                .timestamp_nanos_opt()
        })
    };
    let year_of = |ns: i64| DateTime::<Utc>::from_timestamp_nanos(ns).year();
    match anchor {
        YearAnchor::Year(year) => at_year(year),
        YearAnchor::Near { from_ns, to_ns } => {
            let distance = |ts: i64| {
                if ts < from_ns {
                    from_ns.saturating_sub(ts)
                } else {
                    ts.saturating_sub(to_ns).max(0)
                }
            };
            // ties (a range over a year long) go to the later year
            (year_of(from_ns) - 4..=year_of(to_ns) + 4)
                .filter_map(at_year)
                .min_by_key(|&ts| (distance(ts), std::cmp::Reverse(ts)))
        }
        YearAnchor::Before(limit_ns) => {
            let latest = limit_ns.saturating_add(DAY_NS);
            (year_of(limit_ns) - 4..=year_of(limit_ns) + 1)
                .rev()
                .filter_map(at_year)
                .find(|&ts| ts <= latest)
        }
    }
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
    fn year_less_times_take_the_year_of_their_anchor() {
        let line = "INFO 11-29 02:17:03 [api_server.py:1] x";
        let at = |anchor| parse_log_prefix_near(line, anchor);
        let p = at(YearAnchor::Year(2023));
        assert_eq!(p.ts_ns, Some(ns(2023, 11, 29, 2, 17, 3)));
        assert!(p.year_inferred);
        // near the data around it, before or after: months later is not "closest before now"
        let february_2024 = ns(2024, 2, 1, 0, 0, 0);
        assert_eq!(
            at(YearAnchor::near(february_2024)).ts_ns,
            Some(ns(2023, 11, 29, 2, 17, 3)),
            "2 months before, not 10 after"
        );
        let october_2024 = ns(2024, 10, 1, 0, 0, 0);
        assert_eq!(
            at(YearAnchor::near(october_2024)).ts_ns,
            Some(ns(2024, 11, 29, 2, 17, 3)),
            "2 months after, not 10 before"
        );
        let range = YearAnchor::Near {
            from_ns: ns(2022, 11, 1, 0, 0, 0),
            to_ns: ns(2022, 12, 1, 0, 0, 0),
        };
        assert_eq!(at(range).ts_ns, Some(ns(2022, 11, 29, 2, 17, 3)));
        // a file's modification time bounds it from above
        assert_eq!(
            at(YearAnchor::Before(ns(2025, 11, 28, 3, 0, 0))).ts_ns,
            Some(ns(2025, 11, 29, 2, 17, 3)),
            "a day of slack for zones"
        );
        assert_eq!(
            at(YearAnchor::Before(ns(2025, 11, 20, 0, 0, 0))).ts_ns,
            Some(ns(2024, 11, 29, 2, 17, 3))
        );
        // a log that runs past New Year follows its previous line into the next year
        let new_year = parse_log_prefix_near(
            "WARNING 01-01 00:00:02 [scheduler.py:1] y",
            YearAnchor::near(ns(2024, 12, 31, 23, 59, 58)),
        );
        assert_eq!(new_year.ts_ns, Some(ns(2025, 1, 1, 0, 0, 2)));
        // February 29 exists only in leap years
        let leap = parse_log_prefix_near(
            "I0229 10:00:00.000000 1 grpc.cc:1] z",
            YearAnchor::near(ns(2025, 3, 1, 0, 0, 0)),
        );
        assert_eq!(leap.ts_ns, Some(ns(2024, 2, 29, 10, 0, 0)));
        assert_eq!(
            parse_log_prefix_near(line, YearAnchor::Year(2023)).severity,
            Some("INFO")
        );
        // times with a year are not inferred
        let dated = parse_log_prefix_near("2024-11-29 02:17:03,250 - x - INFO - y", range);
        assert!(!dated.year_inferred);
        assert_eq!(dated.ts_ns, Some(ns(2024, 11, 29, 2, 17, 3) + 250_000_000));
    }

    #[test]
    fn vllm_process_tags_parse_like_bare_lines() {
        let bare = "INFO 11-29 02:17:03 [core.py:1] Engine started";
        let anchor = YearAnchor::Year(2025);
        let expected = parse_log_prefix_near(bare, anchor);
        assert!(expected.ts_ns.is_some());
        for (tag, title, pid, rank) in [
            ("(APIServer pid=123)", "APIServer", Some(123), None),
            ("(EngineCore_0 pid=456)", "EngineCore_0", Some(456), None),
            (
                "(VllmWorker rank=0 pid=789)",
                "VllmWorker",
                Some(789),
                Some(0),
            ),
            ("(VllmWorker TP1 pid=7)", "", None, None),
        ] {
            let line = format!("{tag} {bare}");
            assert_eq!(parse_log_prefix_near(&line, anchor), expected, "{line}");
            let found = process_tag(&line);
            if title.is_empty() {
                assert_eq!(found, None, "{line}");
            } else {
                assert_eq!(found, Some(ProcessTag { title, pid, rank }), "{line}");
            }
        }
        assert_eq!(process_tag(bare), None);
        assert_eq!(process_tag("(see below) pid=3"), None);
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
