//! The one way numbers are written for people: the report (Markdown, HTML) and what the web UI
//! shows of an incident (the API's `lead`, written here) use these, so a value reads the same
//! everywhere: durations with a unit and three significant digits (`963 ms`, `2.28 s`),
//! changes as a percentage or a factor (`+30 %`, `×4.9`), shares as percentages.

/// A duration given in milliseconds: `0.42 ms`, `9.5 ms`, `963 ms`, `2.28 s`, `12.3 s`,
/// `4.5 min`; `—` when it is not a number.
pub fn duration_ms(ms: f64) -> String {
    if !ms.is_finite() {
        return "—".into();
    }
    let magnitude = ms.abs();
    if magnitude >= 60_000.0 {
        format!("{} min", significant(ms / 60_000.0))
    } else if magnitude >= 1_000.0 {
        format!("{} s", significant(ms / 1_000.0))
    } else {
        format!("{} ms", significant(ms))
    }
}

/// Three significant digits, without trailing zeros past the point (`2.28`, `12.3`, `963`,
/// `0.42`).
pub fn significant(v: f64) -> String {
    if !v.is_finite() {
        return "—".into();
    }
    let magnitude = v.abs();
    let decimals = if magnitude >= 100.0 || magnitude == 0.0 {
        0
    } else if magnitude >= 10.0 {
        1
    } else if magnitude >= 1.0 {
        2
    } else {
        // 0.0123 → 3 decimals after the leading zeros
        (2.0 - magnitude.log10().floor()).clamp(2.0, 9.0) as usize
    };
    let text = format!("{v:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// A fraction as a percentage: `43.7 %` below 10 % shows one decimal (`4.2 %`), above it none
/// (`44 %`); `0 %` and `100 %` exactly.
pub fn percent(fraction: f64) -> String {
    if !fraction.is_finite() {
        return "—".into();
    }
    let p = fraction * 100.0;
    if p.abs() >= 10.0 || p == 0.0 {
        format!("{p:.0} %")
    } else {
        format!("{p:.1} %")
    }
}

/// How `after` compares with `before`: `+30 %`, `−12 %`, or a factor from ×2 on (`×4.9`);
/// `new` when there was nothing before.
pub fn change(before: f64, after: f64) -> String {
    if !before.is_finite() || !after.is_finite() {
        return "—".into();
    }
    if before <= 0.0 {
        return if after > 0.0 {
            "new".into()
        } else {
            "±0 %".into()
        };
    }
    let ratio = after / before;
    if ratio >= 2.0 {
        return format!("×{}", significant(ratio));
    }
    let p = (ratio - 1.0) * 100.0;
    if p.round() == 0.0 {
        "±0 %".into()
    } else if p > 0.0 {
        format!("+{p:.0} %")
    } else {
        format!("−{:.0} %", -p)
    }
}

/// The name of an SLI as people write it: `TTFT`, `TPOT`, `E2E`, `ITL max`, `queue time`,
/// `prefill`, `decode`; a rate's name with spaces (`error rate`).
pub fn sli_name(sli: &str) -> String {
    match sli {
        "ttft" => "TTFT".into(),
        "tpot" => "TPOT".into(),
        "e2e" => "E2E latency".into(),
        "itl_max" => "ITL max".into(),
        "queue" => "queue time".into(),
        other => other.replace('_', " "),
    }
}

/// Whether an SLI is a rate (a fraction of requests) rather than a latency in milliseconds.
pub fn is_rate(sli: &str) -> bool {
    sli.ends_with("rate") || matches!(sli, "errors" | "aborts" | "truncations")
}

/// A value of `sli`: a latency with its unit, a rate as a percentage.
pub fn sli_value(sli: &str, value: f64) -> String {
    if is_rate(sli) {
        percent(value)
    } else {
        duration_ms(value)
    }
}

/// The symptom in one line: `TTFT p99 2.28 s → 2.95 s, +30 %`, `error rate 0.2 % → 4.1 %, ×21`.
pub fn symptom_line(sli: &str, before: f64, after: f64) -> String {
    let what = if is_rate(sli) {
        sli_name(sli)
    } else {
        format!("{} p99", sli_name(sli))
    };
    format!(
        "{what} {} → {}, {}",
        sli_value(sli, before),
        sli_value(sli, after),
        change(before, after)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_have_a_unit_and_three_significant_digits() {
        assert_eq!(duration_ms(2276.075), "2.28 s");
        assert_eq!(duration_ms(2951.936), "2.95 s");
        assert_eq!(duration_ms(963.12), "963 ms");
        assert_eq!(duration_ms(194.44), "194 ms");
        assert_eq!(duration_ms(9.54), "9.54 ms");
        assert_eq!(duration_ms(0.4213), "0.421 ms");
        assert_eq!(duration_ms(12_340.0), "12.3 s");
        assert_eq!(duration_ms(1_000.0), "1 s");
        assert_eq!(duration_ms(270_000.0), "4.5 min");
        assert_eq!(duration_ms(f64::NAN), "—");
    }

    #[test]
    fn changes_read_as_percentages_or_factors() {
        assert_eq!(change(2276.075, 2951.936), "+30 %");
        assert_eq!(change(100.0, 88.0), "−12 %");
        assert_eq!(change(194.44, 963.12), "×4.95");
        assert_eq!(change(100.0, 100.2), "±0 %");
        assert_eq!(change(0.0, 5.0), "new");
        assert_eq!(percent(0.437), "44 %");
        assert_eq!(percent(0.0423), "4.2 %");
        assert_eq!(percent(0.0), "0 %");
    }

    #[test]
    fn the_symptom_line_names_the_sli_with_units() {
        assert_eq!(
            symptom_line("ttft", 2276.075, 2951.936),
            "TTFT p99 2.28 s → 2.95 s, +30 %"
        );
        assert_eq!(
            symptom_line("error_rate", 0.002, 0.041),
            "error rate 0.2 % → 4.1 %, ×20.5"
        );
    }
}
