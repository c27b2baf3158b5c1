//! Head sampling, read during the trace conversion ([`super::convert`]): how many requests a
//! sampled span stands for. OpenTelemetry's consistent probability sampling writes the rejection
//! threshold in the W3C `tracestate` (`ot=th:<hex>`, 56 bits, right-padded: the span was kept with
//! probability `1 - th / 2^56`); its older draft wrote `ot=p:<n>` (probability `2^-n`); Honeycomb
//! style samplers put the weight itself in a `SampleRate` attribute. The weight, `1/probability`,
//! is written into the span's attributes as
//! [`SAMPLE_WEIGHT_KEY`](infersight_model::normalize::SAMPLE_WEIGHT_KEY) when it is above 1, so
//! the request row made from the span carries it and the rollups count the row that many times.

use infersight_model::AttrValue;

/// Hex digits of an `ot=th` threshold (56 bits).
const THRESHOLD_DIGITS: usize = 14;

/// `2^56`: thresholds are fractions of it.
const THRESHOLD_SCALE: f64 = 72_057_594_037_927_936.0;

/// The `ot` member's value in a W3C `tracestate` list (`vendor=…,ot=th:c;rv:…`).
fn ot_value(trace_state: &str) -> Option<&str> {
    trace_state
        .split(',')
        .filter_map(|member| member.trim().split_once('='))
        .find(|(key, _)| *key == "ot")
        .map(|(_, value)| value)
}

/// The value of sub-key `key` of the `ot` member (`th` in `th:c;rv:…`).
fn ot_field<'a>(ot: &'a str, key: &str) -> Option<&'a str> {
    ot.split(';')
        .filter_map(|field| field.split_once(':'))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// The sampling probability an `ot=th:<hex>` threshold stands for: 1 to 14 hex digits,
/// right-padded with zeros to 56 bits. `None` for a malformed threshold (ignored, as the spec says).
pub fn threshold_probability(hex: &str) -> Option<f64> {
    if hex.is_empty() || hex.len() > THRESHOLD_DIGITS || !hex.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return None;
    }
    let threshold = u64::from_str_radix(hex, 16).ok()? << (4 * (THRESHOLD_DIGITS - hex.len()));
    Some(1.0 - threshold as f64 / THRESHOLD_SCALE)
}

/// The probability of the older `ot=p:<n>` form: `2^-n` for `n` in 0..=62 (63 means never
/// sampled, which a recorded span cannot be).
fn p_value_probability(text: &str) -> Option<f64> {
    let n: i32 = text.parse().ok()?;
    (0..=62).contains(&n).then(|| (-f64::from(n)).exp2())
}

/// How many requests one sampled span stands for, from its `tracestate` and attributes; `None`
/// when nothing says it was sampled below probability 1.
pub fn sample_weight(trace_state: &str, attrs: &[(String, AttrValue)]) -> Option<f64> {
    let from_state = ot_value(trace_state).and_then(|ot| {
        ot_field(ot, "th")
            .and_then(threshold_probability)
            .or_else(|| ot_field(ot, "p").and_then(p_value_probability))
    });
    let weight = match from_state {
        Some(probability) if probability > 0.0 => Some(1.0 / probability),
        _ => attrs
            .iter()
            .find(|(key, _)| key == "SampleRate")
            .and_then(|(_, value)| match value {
                AttrValue::Int(n) => Some(*n as f64),
                AttrValue::Double(d) => Some(*d),
                AttrValue::Str(s) => s.trim().parse().ok(),
                _ => None,
            }),
    };
    weight.filter(|w| w.is_finite() && *w > 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_are_right_padded_56_bit_fractions() {
        assert_eq!(threshold_probability("0"), Some(1.0));
        assert_eq!(threshold_probability("8"), Some(0.5));
        assert_eq!(threshold_probability("c"), Some(0.25));
        assert_eq!(threshold_probability("f"), Some(0.0625));
        assert_eq!(threshold_probability("fd"), Some(1.0 - 253.0 / 256.0));
        // 10%: the spec's example `e666666666666666` is cut to 14 digits
        let p = threshold_probability("e6666666666666").unwrap();
        assert!((p - 0.1).abs() < 1e-12, "{p}");
        for bad in ["", "G", "8x", "0123456789abcde", "+8"] {
            assert_eq!(threshold_probability(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_weight_comes_from_tracestate_or_sample_rate() {
        assert_eq!(sample_weight("ot=th:c", &[]), Some(4.0));
        assert_eq!(
            sample_weight("vendor=x, ot=rv:abc;th:8 ,z=1", &[]),
            Some(2.0)
        );
        assert_eq!(sample_weight("ot=p:3", &[]), Some(8.0));
        assert_eq!(sample_weight("ot=th:0", &[]), None);
        assert_eq!(sample_weight("", &[]), None);
        assert_eq!(sample_weight("other=th:c", &[]), None);
        let rate = [("SampleRate".to_string(), AttrValue::Int(20))];
        assert_eq!(sample_weight("", &rate), Some(20.0));
        assert_eq!(sample_weight("ot=th:8", &rate), Some(2.0));
    }
}
