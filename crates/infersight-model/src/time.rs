//! Timestamps: every `ts` column is nanoseconds since the Unix epoch, UTC. Helpers to parse the
//! forms users type (`RFC3339`, Unix seconds, relative `-15m`) and to print them back.

use chrono::{DateTime, SecondsFormat, Utc};

pub const NANOS_PER_SECOND: i64 = 1_000_000_000;
pub const NANOS_PER_HOUR: i64 = 3_600 * NANOS_PER_SECOND;

/// Half-open time range `[since_ns, until_ns)` on the `ts` column; `None` is unbounded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimeRange {
    pub since_ns: Option<i64>,
    pub until_ns: Option<i64>,
}

impl TimeRange {
    pub const ALL: TimeRange = TimeRange {
        since_ns: None,
        until_ns: None,
    };

    /// Whether a closed interval `[min_ns, max_ns]` of timestamps can hold rows in this range.
    pub fn overlaps(&self, min_ns: i64, max_ns: i64) -> bool {
        self.since_ns.is_none_or(|s| max_ns >= s) && self.until_ns.is_none_or(|u| min_ns < u)
    }
}

/// The range between `since` and `until` as users type them (see [`parse_time`]; relative times
/// count back from `now_ns`); a missing end is unbounded, and `since` must come before `until`.
pub fn parse_range(
    since: Option<&str>,
    until: Option<&str>,
    now_ns: i64,
) -> Result<TimeRange, String> {
    let since_ns = since.map(|s| parse_time(s, now_ns)).transpose()?;
    let until_ns = until.map(|s| parse_time(s, now_ns)).transpose()?;
    if let (Some(s), Some(u)) = (since_ns, until_ns)
        && s >= u
    {
        return Err("`since` must be before `until`".into());
    }
    Ok(TimeRange { since_ns, until_ns })
}

pub fn now_ns() -> i64 {
    Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX)
}

/// Start of the UTC hour containing `ts_ns` (the store partitions segments by it).
pub fn hour_floor_ns(ts_ns: i64) -> i64 {
    // The first hour of the representable range has no representable start: clamp to it.
    ts_ns
        .div_euclid(NANOS_PER_HOUR)
        .checked_mul(NANOS_PER_HOUR)
        .unwrap_or(i64::MIN)
}

pub fn format_rfc3339(ts_ns: i64) -> String {
    DateTime::<Utc>::from_timestamp_nanos(ts_ns).to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Parses an RFC 3339 time, a Unix time in seconds (integer or fractional), or a time relative to
/// `now_ns` such as `-15m`, `-2h`, `-1d`, `-30s` or `now`.
pub fn parse_time(text: &str, now_ns: i64) -> Result<i64, String> {
    let text = text.trim();
    if text == "now" {
        return Ok(now_ns);
    }
    let out_of_range = || format!("`{text}` is out of the representable range");
    if let Some(rel) = text.strip_prefix('-')
        && let Some(d) = parse_duration_ns(rel)
    {
        return now_ns.checked_sub(d).ok_or_else(out_of_range);
    }
    if let Ok(secs) = text.parse::<f64>() {
        // `NaN`, `inf` and `1e300` parse as floats; none is a time (a cast would make them 0 or
        // the end of time without a word)
        if !secs.is_finite() {
            return Err(format!("`{text}` is not a time"));
        }
        let ns = secs * NANOS_PER_SECOND as f64;
        return within_i64(ns).ok_or_else(out_of_range);
    }
    DateTime::parse_from_rfc3339(text)
        .map_err(|e| {
            format!("`{text}` is not RFC3339, Unix seconds or a relative time like -15m: {e}")
        })
        .and_then(|t| {
            t.timestamp_nanos_opt()
                .ok_or_else(|| format!("`{text}` is out of the representable range"))
        })
}

/// Parses durations such as `500ms`, `30s`, `15m`, `2h`, `7d` into nanoseconds.
pub fn parse_duration_ns(text: &str) -> Option<i64> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit() && c != '.')?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let unit_ns = match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" => 60e9,
        "h" => 3_600e9,
        "d" => 86_400e9,
        _ => return None,
    };
    within_i64(number * unit_ns)
}

/// `value` as an `i64` when it is one (truncated toward zero), `None` beyond.
fn within_i64(value: f64) -> Option<i64> {
    // 2^63 is exact as an f64; `i64::MIN as f64` is -2^63 exactly
    (value.is_finite() && value >= i64::MIN as f64 && value < 9_223_372_036_854_775_808.0)
        .then_some(value as i64)
}

/// A duration as engines print it — Rust's `Duration` debug format (`2.046046581s`, `311.13µs`,
/// `20.253182ms`, `90ns`) and Go's (`1.5m`, `2h`) — in seconds. A bare number is seconds.
pub fn duration_text_seconds(text: &str) -> Option<f64> {
    let text = text.trim();
    let end = text
        .char_indices()
        .find(|&(index, ch)| {
            !(ch.is_ascii_digit() || ch == '.' || (ch == '-' || ch == '+') && index == 0)
        })
        .map_or(text.len(), |(index, _)| index);
    let number: f64 = text[..end].parse().ok()?;
    let scale = match text[end..].trim() {
        "ns" => 1e-9,
        "µs" | "us" | "μs" => 1e-6,
        "ms" => 1e-3,
        "s" | "" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => return None,
    };
    Some(number * scale).filter(|s| s.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_all_time_forms() {
        let now = 10 * NANOS_PER_HOUR;
        assert_eq!(parse_time("now", now).unwrap(), now);
        assert_eq!(
            parse_time("-15m", now).unwrap(),
            now - 15 * 60 * NANOS_PER_SECOND
        );
        assert_eq!(
            parse_time("1700000000", now).unwrap(),
            1_700_000_000 * NANOS_PER_SECOND
        );
        assert_eq!(
            parse_time("2023-11-14T22:13:20Z", now).unwrap(),
            1_700_000_000 * NANOS_PER_SECOND
        );
        assert!(parse_time("yesterday", now).is_err());
        let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-12);
        assert!(close(duration_text_seconds("2.046046581s"), 2.046046581));
        assert!(close(duration_text_seconds("311.13µs"), 311.13e-6));
        assert!(close(duration_text_seconds("20.2ms"), 0.0202));
        assert!(close(duration_text_seconds("1.5m"), 90.0));
        assert_eq!(duration_text_seconds("fast"), None);
        assert_eq!(duration_text_seconds("3 parsecs"), None);
        assert_eq!(parse_duration_ns("1.5s"), Some(1_500_000_000));
        assert_eq!(parse_duration_ns("7x"), None);
    }

    /// Found by the fuzz harness (`tests/it/fuzz.rs`): `-10000000000s` before a `now` below
    /// zero overflowed the subtraction (a panic in debug builds); floats out of range became 0
    /// or the end of time.
    #[test]
    fn times_out_of_range_are_errors() {
        assert!(parse_time("-10000000000s", -2).is_err());
        assert!(parse_time("-99999999999999999999d", 10).is_err());
        for text in ["NaN", "inf", "-inf", "1e300", "-1e300", "9223372037"] {
            assert!(parse_time(text, 0).is_err(), "{text}");
        }
        assert_eq!(parse_time("-9223372036", 0), Ok(-9_223_372_036_000_000_000));
        assert_eq!(parse_duration_ns("99999999999999999999d"), None);
        assert_eq!(
            parse_duration_ns("9223372036s"),
            Some(9_223_372_036_000_000_000)
        );
    }

    #[test]
    fn ranges_are_ordered_and_may_be_open() {
        let now = 10 * NANOS_PER_HOUR;
        assert_eq!(parse_range(None, None, now), Ok(TimeRange::ALL));
        assert_eq!(
            parse_range(Some("-1h"), None, now),
            Ok(TimeRange {
                since_ns: Some(9 * NANOS_PER_HOUR),
                until_ns: None,
            })
        );
        assert_eq!(
            parse_range(Some("now"), Some("-1h"), now),
            Err("`since` must be before `until`".to_string())
        );
        assert!(parse_range(None, Some("soon"), now).is_err());
        let range = parse_range(Some("100"), Some("200"), now).unwrap();
        assert!(range.overlaps(150 * NANOS_PER_SECOND, 300 * NANOS_PER_SECOND));
        assert!(!range.overlaps(200 * NANOS_PER_SECOND, 300 * NANOS_PER_SECOND));
    }

    #[test]
    fn hour_floor_handles_negative_times() {
        assert_eq!(hour_floor_ns(NANOS_PER_HOUR + 5), NANOS_PER_HOUR);
        assert_eq!(hour_floor_ns(-1), -NANOS_PER_HOUR);
    }
}
