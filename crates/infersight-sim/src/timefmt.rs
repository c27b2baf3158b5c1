//! Calendar arithmetic and the timestamp formats the emitted logs use (vLLM's `MM-DD HH:MM:SS`,
//! SGLang's `[YYYY-MM-DD HH:MM:SS]`, RFC 3339 for TGI and the ground truth). Self-contained so
//! formatting hundreds of thousands of lines stays cheap and identical everywhere.

/// Days since 1970-01-01 for a proleptic Gregorian date (Howard Hinnant's algorithm).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// (year, month, day) of a day count since 1970-01-01.
pub fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Broken-down UTC time of `ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    pub month: i64,
    pub day: i64,
    pub hour: i64,
    pub minute: i64,
    pub second: i64,
    pub micros: i64,
}

pub fn civil(ns: i64) -> Civil {
    let secs = ns.div_euclid(1_000_000_000);
    let micros = ns.rem_euclid(1_000_000_000) / 1_000;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    Civil {
        year,
        month,
        day,
        hour: sod / 3_600,
        minute: sod % 3_600 / 60,
        second: sod % 60,
        micros,
    }
}

/// vLLM's logger prefix time: `11-29 02:00:10`.
pub fn vllm(ns: i64) -> String {
    let c = civil(ns);
    format!(
        "{:02}-{:02} {:02}:{:02}:{:02}",
        c.month, c.day, c.hour, c.minute, c.second
    )
}

/// `2025-11-29 02:00:10` (SGLang).
pub fn date_time(ns: i64) -> String {
    let c = civil(ns);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    )
}

/// `2025-11-29T02:00:10.123456Z` (TGI's tracing output).
pub fn rfc3339_micros(ns: i64) -> String {
    let c = civil(ns);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        c.year, c.month, c.day, c.hour, c.minute, c.second, c.micros
    )
}

/// `2025-11-29T02:00:10.123Z` (ground truth).
pub fn rfc3339_millis(ns: i64) -> String {
    let c = civil(ns);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        c.year,
        c.month,
        c.day,
        c.hour,
        c.minute,
        c.second,
        c.micros / 1_000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_formats() {
        for days in [-1_000_000, -1, 0, 1, 19_000, 20_421, 2_000_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        let ns = crate::config::DEFAULT_START_NS + 10_123_456_789;
        assert_eq!(vllm(ns), "11-29 02:00:10");
        assert_eq!(date_time(ns), "2025-11-29 02:00:10");
        assert_eq!(rfc3339_micros(ns), "2025-11-29T02:00:10.123456Z");
        assert_eq!(rfc3339_millis(ns), "2025-11-29T02:00:10.123Z");
    }
}
