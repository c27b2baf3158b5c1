//! The pipeline's own counters (received / dropped{reason} / failed per stage and receiver) and
//! their Prometheus text exposition on `/metrics`: an observability engine must be observable.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use parking_lot::Mutex;

type Labels = Vec<(&'static str, String)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    Counter,
    Gauge,
}

/// One metric family: its type, help text and the value of each label set.
type Family = (MetricType, &'static str, BTreeMap<Labels, f64>);

#[derive(Default)]
pub struct Counters {
    series: Mutex<BTreeMap<&'static str, Family>>,
}

impl Counters {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `by` to a counter. Labels must be low-cardinality (protocol, signal, stage, reason).
    pub fn add(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
        by: u64,
    ) {
        self.update(name, help, MetricType::Counter, labels, |v| *v += by as f64);
    }

    /// Sets a counter to a cumulative value kept elsewhere (e.g. a pipeline stage's own counts).
    pub fn set_counter(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
        value: u64,
    ) {
        self.update(name, help, MetricType::Counter, labels, |v| {
            *v = value as f64
        });
    }

    pub fn set_gauge(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
        value: f64,
    ) {
        self.update(name, help, MetricType::Gauge, labels, |v| *v = value);
    }

    fn update(
        &self,
        name: &'static str,
        help: &'static str,
        kind: MetricType,
        labels: &[(&'static str, &str)],
        apply: impl FnOnce(&mut f64),
    ) {
        let key: Labels = labels.iter().map(|(k, v)| (*k, v.to_string())).collect();
        let mut series = self.series.lock();
        let entry = series
            .entry(name)
            .or_insert_with(|| (kind, help, BTreeMap::new()));
        apply(entry.2.entry(key).or_insert(0.0));
    }

    /// Current value of one series (tests and the CLI summary).
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let series = self.series.lock();
        series
            .get(name)
            .and_then(|(_, _, values)| {
                values.iter().find_map(|(l, v)| {
                    let matches = labels
                        .iter()
                        .all(|(k, want)| l.iter().any(|(lk, lv)| lk == k && lv == want));
                    matches.then_some(*v)
                })
            })
            .unwrap_or(0.0)
    }

    /// Sum of every series of a metric whose labels include `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let series = self.series.lock();
        series
            .get(name)
            .map(|(_, _, values)| {
                values
                    .iter()
                    .filter(|(l, _)| {
                        labels
                            .iter()
                            .all(|(k, want)| l.iter().any(|(lk, lv)| lk == k && lv == want))
                    })
                    .map(|(_, v)| *v)
                    .sum()
            })
            .unwrap_or(0.0)
    }

    pub fn render(&self) -> String {
        let series = self.series.lock();
        let mut out = String::new();
        for (name, (kind, help, values)) in series.iter() {
            let _ = writeln!(out, "# HELP {name} {help}");
            let type_name = match kind {
                MetricType::Counter => "counter",
                MetricType::Gauge => "gauge",
            };
            let _ = writeln!(out, "# TYPE {name} {type_name}");
            for (labels, value) in values {
                out.push_str(name);
                if !labels.is_empty() {
                    out.push('{');
                    for (i, (k, v)) in labels.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        let escaped = v
                            .replace('\\', "\\\\")
                            .replace('"', "\\\"")
                            .replace('\n', "\\n");
                        let _ = write!(out, "{k}=\"{escaped}\"");
                    }
                    out.push('}');
                }
                let _ = writeln!(out, " {value}");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text_with_escaped_labels() {
        let c = Counters::new();
        c.add("infersight_x_total", "things", &[("reason", "a\"b")], 2);
        c.add("infersight_x_total", "things", &[("reason", "a\"b")], 3);
        c.set_gauge("infersight_depth", "depth", &[], 7.0);
        let text = c.render();
        assert!(text.contains("# TYPE infersight_x_total counter"), "{text}");
        assert!(
            text.contains("infersight_x_total{reason=\"a\\\"b\"} 5"),
            "{text}"
        );
        assert!(text.contains("infersight_depth 7"), "{text}");
        assert_eq!(c.get("infersight_x_total", &[("reason", "a\"b")]), 5.0);
    }
}
