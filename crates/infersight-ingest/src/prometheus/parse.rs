//! First step of a Prometheus scrape: the body of a `/metrics` answer (text exposition format
//! 0.0.4, or the OpenMetrics text subset engines emit: `# EOF`, `# UNIT`, `_created`, float
//! timestamps, exemplars) → metric families of samples, before `convert` makes OTLP of them.
//!
//! A malformed line fails the whole body with its line number and the reason, as Prometheus does.
//! A body cut short is not malformed: the last line without its newline is dropped, and a
//! histogram or summary that lost its `+Inf` bucket / `_count` is reported, each as a warning,
//! while every complete sample is kept. No input makes this module panic.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

/// The type a `# TYPE` line declares; samples without one are [`MetricType::Untyped`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    Counter,
    Gauge,
    Histogram,
    /// OpenMetrics `gaugehistogram` (`_bucket`, `_gsum`, `_gcount`).
    GaugeHistogram,
    Summary,
    /// OpenMetrics `info` (`name_info` samples of value 1).
    Info,
    /// OpenMetrics `stateset`.
    StateSet,
    /// `untyped` (0.0.4) or `unknown` (OpenMetrics), or no `# TYPE` line at all.
    Untyped,
}

impl MetricType {
    fn from_name(name: &str) -> Option<MetricType> {
        Some(match name {
            "counter" => MetricType::Counter,
            "gauge" => MetricType::Gauge,
            "histogram" => MetricType::Histogram,
            "gaugehistogram" => MetricType::GaugeHistogram,
            "summary" => MetricType::Summary,
            "info" => MetricType::Info,
            "stateset" => MetricType::StateSet,
            "untyped" | "unknown" => MetricType::Untyped,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
            MetricType::GaugeHistogram => "gaugehistogram",
            MetricType::Summary => "summary",
            MetricType::Info => "info",
            MetricType::StateSet => "stateset",
            MetricType::Untyped => "untyped",
        }
    }

    /// Suffixes a sample name may add to its family's name. Counters take both the 0.0.4 form
    /// (the family is named `x_total`) and the OpenMetrics one (family `x`, samples `x_total`).
    fn suffixes(self) -> &'static [&'static str] {
        match self {
            MetricType::Counter => &["", "_total", "_created"],
            MetricType::Histogram => &["_bucket", "_sum", "_count", "_created"],
            MetricType::GaugeHistogram => &["_bucket", "_gsum", "_gcount"],
            MetricType::Summary => &["", "_sum", "_count", "_created"],
            MetricType::Info => &["", "_info"],
            MetricType::Gauge | MetricType::StateSet | MetricType::Untyped => &[""],
        }
    }
}

/// One sample line: `name{label="value",…} value [timestamp]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    /// In the order of the line; label values are unescaped.
    pub labels: Vec<(String, String)>,
    pub value: f64,
    /// The sample's own timestamp in milliseconds since the epoch (OpenMetrics' float seconds
    /// are converted); `None` means "the scrape time".
    pub timestamp_ms: Option<i64>,
    /// 1-based line number in the body.
    pub line: usize,
}

impl Sample {
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The labels minus `except`, sorted: the identity of a histogram or summary series.
    fn series_key(&self, except: &str) -> Vec<(String, String)> {
        let mut key: Vec<(String, String)> = self
            .labels
            .iter()
            .filter(|(k, _)| k != except)
            .cloned()
            .collect();
        key.sort();
        key
    }
}

/// A metric family: the samples sharing one `# TYPE` (or one name, when untyped).
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    pub name: String,
    pub kind: MetricType,
    pub help: Option<String>,
    /// OpenMetrics `# UNIT`.
    pub unit: Option<String>,
    pub samples: Vec<Sample>,
}

/// One series of a histogram family, assembled from its `_bucket`, `_sum`, `_count` and
/// `_created` samples.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSeries {
    /// The labels without `le`, sorted.
    pub labels: Vec<(String, String)>,
    /// Finite upper bounds, ascending.
    pub bounds: Vec<f64>,
    /// Observations per bucket (not cumulative): `bounds.len() + 1` counts, the last one for the
    /// `+Inf` overflow bucket.
    pub bucket_counts: Vec<u64>,
    /// Total number of observations (`+Inf` bucket, else `_count`).
    pub count: u64,
    pub sum: Option<f64>,
    /// `_created` (seconds since the epoch), the start of the cumulative window.
    pub created_s: Option<f64>,
    pub timestamp_ms: Option<i64>,
}

/// One series of a summary family (`{quantile}` samples, `_sum`, `_count`, `_created`).
#[derive(Debug, Clone, PartialEq)]
pub struct SummarySeries {
    /// The labels without `quantile`, sorted.
    pub labels: Vec<(String, String)>,
    /// (quantile, value), in the order of the body.
    pub quantiles: Vec<(f64, f64)>,
    pub sum: f64,
    pub count: u64,
    pub created_s: Option<f64>,
    pub timestamp_ms: Option<i64>,
}

impl Family {
    /// The series of a histogram family. A series without a `+Inf` bucket and without `_count`
    /// (a truncated body), with cumulative counts that decrease, or with a bucket that is not a
    /// count, is an `Err` naming the problem; it cannot be represented faithfully.
    pub fn histogram_series(&self) -> Vec<Result<HistogramSeries, String>> {
        #[derive(Default)]
        struct Parts {
            buckets: Vec<(f64, f64)>,
            sum: Option<f64>,
            count: Option<f64>,
            created: Option<f64>,
            timestamp_ms: Option<i64>,
        }
        let mut series: BTreeMap<Vec<(String, String)>, Parts> = BTreeMap::new();
        let mut order: Vec<Vec<(String, String)>> = Vec::new();
        for sample in &self.samples {
            let Some(suffix) = sample.name.strip_prefix(self.name.as_str()) else {
                continue;
            };
            let key = sample.series_key("le");
            let parts = series.entry(key.clone()).or_insert_with(|| {
                order.push(key);
                Parts::default()
            });
            parts.timestamp_ms = parts.timestamp_ms.or(sample.timestamp_ms);
            match suffix {
                "_bucket" => {
                    // The parser guarantees a parseable `le` on every bucket.
                    if let Some(le) = sample.label("le").and_then(parse_float) {
                        parts.buckets.push((le, sample.value));
                    }
                }
                "_sum" => parts.sum = Some(sample.value),
                "_count" => parts.count = Some(sample.value),
                "_created" => parts.created = Some(sample.value),
                _ => {}
            }
        }
        order
            .into_iter()
            .filter_map(|key| {
                let parts = series.remove(&key)?;
                Some(
                    assemble_histogram(&self.name, key, parts.buckets, parts.count).map(
                        |(bounds, bucket_counts, count, labels)| HistogramSeries {
                            labels,
                            bounds,
                            bucket_counts,
                            count,
                            sum: parts.sum,
                            created_s: parts.created,
                            timestamp_ms: parts.timestamp_ms,
                        },
                    ),
                )
            })
            .collect()
    }

    /// The series of a summary family; one without `_sum` or `_count` (a truncated body) is an
    /// `Err` naming the problem.
    pub fn summary_series(&self) -> Vec<Result<SummarySeries, String>> {
        #[derive(Default)]
        struct Parts {
            quantiles: Vec<(f64, f64)>,
            sum: Option<f64>,
            count: Option<f64>,
            created: Option<f64>,
            timestamp_ms: Option<i64>,
        }
        let mut series: BTreeMap<Vec<(String, String)>, Parts> = BTreeMap::new();
        let mut order: Vec<Vec<(String, String)>> = Vec::new();
        for sample in &self.samples {
            let Some(suffix) = sample.name.strip_prefix(self.name.as_str()) else {
                continue;
            };
            let key = sample.series_key("quantile");
            let parts = series.entry(key.clone()).or_insert_with(|| {
                order.push(key);
                Parts::default()
            });
            parts.timestamp_ms = parts.timestamp_ms.or(sample.timestamp_ms);
            match suffix {
                "" => {
                    if let Some(q) = sample.label("quantile").and_then(parse_float) {
                        parts.quantiles.push((q, sample.value));
                    }
                }
                "_sum" => parts.sum = Some(sample.value),
                "_count" => parts.count = Some(sample.value),
                "_created" => parts.created = Some(sample.value),
                _ => {}
            }
        }
        order
            .into_iter()
            .filter_map(|key| {
                let parts = series.remove(&key)?;
                let what = || format!("summary `{}`{}", self.name, labels_text(&key));
                Some(match (parts.sum, parts.count) {
                    (Some(sum), Some(count)) => match as_count(count) {
                        Some(count) => Ok(SummarySeries {
                            labels: key,
                            quantiles: parts.quantiles,
                            sum,
                            count,
                            created_s: parts.created,
                            timestamp_ms: parts.timestamp_ms,
                        }),
                        None => Err(format!("{}: `_count` {count} is not a count", what())),
                    },
                    (None, _) => Err(format!(
                        "{}: no `_sum` sample (body truncated?); series not converted",
                        what()
                    )),
                    (_, None) => Err(format!(
                        "{}: no `_count` sample (body truncated?); series not converted",
                        what()
                    )),
                })
            })
            .collect()
    }
}

type Assembled = (Vec<f64>, Vec<u64>, u64, Vec<(String, String)>);

/// Cumulative `le` buckets → explicit bounds and per-bucket counts.
fn assemble_histogram(
    family: &str,
    labels: Vec<(String, String)>,
    mut buckets: Vec<(f64, f64)>,
    count: Option<f64>,
) -> Result<Assembled, String> {
    let what = || format!("histogram `{family}`{}", labels_text(&labels));
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    if buckets.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err(format!("{}: two buckets with the same `le`", what()));
    }
    let has_inf = buckets.last().is_some_and(|(le, _)| *le == f64::INFINITY);
    let total = match (has_inf, count) {
        (true, _) => buckets.last().map(|(_, c)| *c).unwrap_or(0.0),
        (false, Some(count)) => count,
        (false, None) => {
            return Err(format!(
                "{}: no `+Inf` bucket and no `_count` (body truncated?); series not converted",
                what()
            ));
        }
    };
    let Some(total) = as_count(total) else {
        return Err(format!("{}: total {total} is not a count", what()));
    };
    let mut bounds = Vec::with_capacity(buckets.len());
    let mut bucket_counts = Vec::with_capacity(buckets.len() + 1);
    let mut previous = 0u64;
    for (le, cumulative) in &buckets {
        let Some(cumulative) = as_count(*cumulative) else {
            return Err(format!(
                "{}: bucket le=\"{le}\" holds {cumulative}, not a count",
                what()
            ));
        };
        if cumulative < previous {
            return Err(format!(
                "{}: cumulative bucket counts decrease at le=\"{le}\"",
                what()
            ));
        }
        if *le == f64::INFINITY {
            break;
        }
        if le.is_nan() {
            return Err(format!("{}: a bucket has le=\"NaN\"", what()));
        }
        bounds.push(*le);
        bucket_counts.push(cumulative - previous);
        previous = cumulative;
    }
    if total < previous {
        return Err(format!(
            "{}: the total {total} is below the last bucket's {previous}",
            what()
        ));
    }
    bucket_counts.push(total - previous);
    Ok((bounds, bucket_counts, total, labels))
}

/// A non-negative, finite, whole number of observations.
fn as_count(value: f64) -> Option<u64> {
    (value.is_finite() && value >= 0.0 && value.fract() == 0.0 && value < 1.8e19)
        .then_some(value as u64)
}

fn labels_text(labels: &[(String, String)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{{{}}}", inner.join(","))
}

/// Something incomplete but not malformed (a truncated body), reported and skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseWarning {
    /// 1-based line number, when the warning is about one line.
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for ParseWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// A malformed line: the body is rejected, as Prometheus rejects the scrape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid exposition at line {line}: {reason}")]
pub struct ExpositionError {
    /// 1-based line number.
    pub line: usize,
    pub reason: String,
}

/// A parsed body: families in the order they first appear, and what was incomplete.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exposition {
    pub families: Vec<Family>,
    pub warnings: Vec<ParseWarning>,
}

impl Exposition {
    pub fn sample_count(&self) -> usize {
        self.families.iter().map(|f| f.samples.len()).sum()
    }

    pub fn family(&self, name: &str) -> Option<&Family> {
        self.families.iter().find(|f| f.name == name)
    }

    /// Every sample, in family order.
    pub fn samples(&self) -> impl Iterator<Item = &Sample> {
        self.families.iter().flat_map(|f| f.samples.iter())
    }
}

/// Parses a whole exposition body.
pub fn parse(body: &[u8]) -> Result<Exposition, ExpositionError> {
    let mut parser = Parser::default();
    let mut lines: Vec<&[u8]> = body.split(|b| *b == b'\n').collect();
    // `split` yields an empty last piece when the body ends with a newline (or is empty); any
    // other last piece is a line whose newline never arrived.
    let unterminated = lines.pop().filter(|last| !last.is_empty());
    for (index, raw) in lines.iter().enumerate() {
        let line_no = index + 1;
        if parser.after_eof {
            if !raw.iter().all(u8::is_ascii_whitespace) {
                parser.warn(Some(line_no), "content after `# EOF` ignored".into());
                break;
            }
            continue;
        }
        let text = line_text(raw).map_err(|reason| ExpositionError {
            line: line_no,
            reason,
        })?;
        parser
            .line(text, line_no)
            .map_err(|reason| ExpositionError {
                line: line_no,
                reason,
            })?;
    }
    if let Some(raw) = unterminated
        && !parser.after_eof
    {
        let line_no = lines.len() + 1;
        let is_eof = line_text(raw).is_ok_and(|t| t.trim() == "# EOF");
        if !is_eof {
            parser.warn(
                Some(line_no),
                "the body does not end with a newline, so the last line may be cut off; it was ignored"
                    .into(),
            );
        }
    }
    Ok(parser.finish())
}

fn line_text(raw: &[u8]) -> Result<&str, String> {
    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
    std::str::from_utf8(raw).map_err(|e| {
        format!(
            "not valid UTF-8 (invalid byte at column {})",
            e.valid_up_to() + 1
        )
    })
}

#[derive(Default)]
struct Parser {
    families: Vec<Family>,
    by_name: HashMap<String, usize>,
    /// Families that got a `# TYPE` line, to refuse a second one.
    typed: HashSet<usize>,
    /// Families that got a `# HELP` line.
    helped: HashSet<usize>,
    /// The family of the last `# TYPE`/`# HELP` line or sample: where samples go first.
    current: Option<usize>,
    /// Series seen (sample name + sorted labels), to report duplicates.
    seen: HashSet<(String, Vec<(String, String)>)>,
    warnings: Vec<ParseWarning>,
    after_eof: bool,
}

impl Parser {
    fn warn(&mut self, line: Option<usize>, message: String) {
        self.warnings.push(ParseWarning { line, message });
    }

    fn line(&mut self, text: &str, line_no: usize) -> Result<(), String> {
        let trimmed = text.trim_start_matches([' ', '\t']);
        if trimmed.trim_end().is_empty() {
            return Ok(());
        }
        if let Some(comment) = trimmed.strip_prefix('#') {
            return self.comment(comment);
        }
        let sample = parse_sample(trimmed, line_no)?;
        self.add_sample(sample, line_no)
    }

    fn family_index(&mut self, name: &str) -> usize {
        if let Some(index) = self.by_name.get(name) {
            return *index;
        }
        self.families.push(Family {
            name: name.to_string(),
            kind: MetricType::Untyped,
            help: None,
            unit: None,
            samples: Vec::new(),
        });
        let index = self.families.len() - 1;
        self.by_name.insert(name.to_string(), index);
        index
    }

    fn comment(&mut self, comment: &str) -> Result<(), String> {
        // `#HELP` without a space is an ordinary comment, as in Prometheus.
        let Some(rest) = comment.strip_prefix([' ', '\t']) else {
            return Ok(());
        };
        let rest = rest.trim_start_matches([' ', '\t']);
        let (keyword, rest) = split_token(rest);
        match keyword {
            "HELP" | "TYPE" | "UNIT" => {}
            "EOF" => {
                self.after_eof = true;
                return Ok(());
            }
            _ => return Ok(()),
        }
        let (name, rest) = split_token(rest);
        if name.is_empty() {
            return Err(format!("`# {keyword}` line without a metric name"));
        }
        check_metric_name(name)?;
        let index = self.family_index(name);
        self.current = Some(index);
        match keyword {
            "HELP" => {
                if !self.helped.insert(index) {
                    return Err(format!("second `# HELP` line for `{name}`"));
                }
                if let Some(family) = self.families.get_mut(index) {
                    family.help = Some(unescape_help(rest));
                }
            }
            "TYPE" => {
                let type_name = rest.trim();
                if type_name.is_empty() {
                    return Err(format!("`# TYPE {name}` without a type"));
                }
                let Some(kind) = MetricType::from_name(type_name) else {
                    return Err(format!(
                        "unknown metric type `{type_name}` for `{name}` (expected counter, gauge, histogram, summary or untyped)"
                    ));
                };
                if !self.typed.insert(index) {
                    return Err(format!("second `# TYPE` line for `{name}`"));
                }
                if let Some(family) = self.families.get_mut(index) {
                    if !family.samples.is_empty() {
                        return Err(format!("`# TYPE` line for `{name}` after its samples"));
                    }
                    family.kind = kind;
                }
            }
            _ => {
                if let Some(family) = self.families.get_mut(index) {
                    family.unit = Some(rest.trim().to_string());
                }
            }
        }
        Ok(())
    }

    /// The family a sample belongs to: the current one when its name fits, else a declared
    /// family whose name plus a suffix of its type gives the sample name, else an untyped family
    /// of its own. A sample named like a declared family it cannot belong to (`foo` in a
    /// histogram `foo`) is an error.
    fn family_for(&mut self, sample_name: &str) -> Result<usize, String> {
        let fits = |family: &Family| {
            sample_name
                .strip_prefix(family.name.as_str())
                .is_some_and(|suffix| family.kind.suffixes().contains(&suffix))
        };
        if let Some(current) = self.current
            && self.families.get(current).is_some_and(fits)
        {
            return Ok(current);
        }
        let candidates = std::iter::once(sample_name).chain(
            [
                "_bucket", "_sum", "_count", "_created", "_total", "_gsum", "_gcount", "_info",
            ]
            .iter()
            .filter_map(|suffix| sample_name.strip_suffix(suffix)),
        );
        for stem in candidates {
            if let Some(index) = self.by_name.get(stem).copied()
                && self.families.get(index).is_some_and(fits)
            {
                return Ok(index);
            }
        }
        if let Some(family) = self
            .by_name
            .get(sample_name)
            .and_then(|i| self.families.get(*i))
        {
            return Err(format!(
                "sample `{sample_name}` does not fit the {} family of the same name",
                family.kind.name()
            ));
        }
        Ok(self.family_index(sample_name))
    }

    fn add_sample(&mut self, sample: Sample, line_no: usize) -> Result<(), String> {
        let index = self.family_for(&sample.name)?;
        self.current = Some(index);
        let Some(family) = self.families.get(index) else {
            return Ok(());
        };
        let suffix = sample
            .name
            .strip_prefix(family.name.as_str())
            .unwrap_or_default();
        match (family.kind, suffix) {
            (MetricType::Histogram | MetricType::GaugeHistogram, "_bucket") => {
                let Some(le) = sample.label("le") else {
                    return Err(format!(
                        "histogram bucket `{}` has no `le` label",
                        sample.name
                    ));
                };
                if parse_float(le).is_none() {
                    return Err(format!(
                        "histogram bucket `{}` has le=\"{le}\", not a number",
                        sample.name
                    ));
                }
            }
            (MetricType::Summary, "") => {
                let Some(quantile) = sample.label("quantile") else {
                    return Err(format!(
                        "summary sample `{}` has no `quantile` label",
                        sample.name
                    ));
                };
                if parse_float(quantile).is_none() {
                    return Err(format!(
                        "summary sample `{}` has quantile=\"{quantile}\", not a number",
                        sample.name
                    ));
                }
            }
            _ => {}
        }
        let mut key_labels = sample.labels.clone();
        key_labels.sort();
        if !self.seen.insert((sample.name.clone(), key_labels)) {
            self.warn(
                Some(line_no),
                format!(
                    "duplicate sample `{}`{}; the first one is kept",
                    sample.name,
                    labels_text(&sample.labels)
                ),
            );
            return Ok(());
        }
        if let Some(family) = self.families.get_mut(index) {
            family.samples.push(sample);
        }
        Ok(())
    }

    fn finish(mut self) -> Exposition {
        // Families declared by `# HELP`/`# TYPE` alone (no sample) carry nothing: leave them out.
        let families: Vec<Family> = self
            .families
            .into_iter()
            .filter(|f| !f.samples.is_empty())
            .collect();
        for family in &families {
            let problems: Vec<String> = match family.kind {
                MetricType::Histogram => family
                    .histogram_series()
                    .into_iter()
                    .filter_map(Result::err)
                    .collect(),
                MetricType::Summary => family
                    .summary_series()
                    .into_iter()
                    .filter_map(Result::err)
                    .collect(),
                _ => Vec::new(),
            };
            let line = family.samples.first().map(|s| s.line);
            for message in problems {
                self.warnings.push(ParseWarning { line, message });
            }
        }
        Exposition {
            families,
            warnings: self.warnings,
        }
    }
}

/// First whitespace-separated token and the rest (leading blanks of the rest removed).
fn split_token(text: &str) -> (&str, &str) {
    let text = text.trim_start_matches([' ', '\t']);
    match text.find([' ', '\t']) {
        Some(at) => (&text[..at], text[at..].trim_start_matches([' ', '\t'])),
        None => (text, ""),
    }
}

fn unescape_help(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('\\') => out.push('\\'),
                Some(other) => {
                    out.push('\\');
                    out.push(other);
                }
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

fn check_metric_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let valid = chars.next().is_some_and(is_name_start) && chars.all(is_name_char);
    if valid {
        Ok(())
    } else {
        Err(format!("`{name}` is not a valid metric name"))
    }
}

/// A Prometheus float: decimal, `NaN`, `+Inf`, `-Inf` (any case, as Go's `ParseFloat`).
fn parse_float(text: &str) -> Option<f64> {
    if text.is_empty() || text.contains('_') {
        return None;
    }
    text.parse::<f64>().ok()
}

/// Position-tracking reader over one line. Structural characters are ASCII, so byte offsets
/// always fall on character boundaries.
struct Cursor<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<char> {
        self.text.get(self.pos..).and_then(|s| s.chars().next())
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn skip_blanks(&mut self) -> bool {
        let start = self.pos;
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.pos += 1;
        }
        self.pos > start
    }

    fn take_while(&mut self, keep: impl Fn(char) -> bool) -> &'a str {
        let start = self.pos;
        while let Some(c) = self.peek() {
            if !keep(c) {
                break;
            }
            self.pos += c.len_utf8();
        }
        self.text.get(start..self.pos).unwrap_or_default()
    }

    fn rest(&self) -> &'a str {
        self.text.get(self.pos..).unwrap_or_default()
    }
}

fn parse_sample(text: &str, line_no: usize) -> Result<Sample, String> {
    let mut cursor = Cursor { text, pos: 0 };
    match cursor.peek() {
        Some('{') => {
            return Err(
                "quoted (UTF-8) metric names inside braces are not supported; expected a metric name"
                    .into(),
            );
        }
        Some(c) if !is_name_start(c) => {
            return Err(format!("`{c}` cannot start a metric name"));
        }
        _ => {}
    }
    let name = cursor.take_while(is_name_char).to_string();
    let mut labels = Vec::new();
    if cursor.peek() == Some('{') {
        cursor.bump();
        labels = parse_labels(&mut cursor, &name)?;
    }
    if !cursor.skip_blanks() {
        return Err(match cursor.peek() {
            None => format!("sample `{name}` has no value"),
            Some(c) => format!("unexpected `{c}` after the metric name `{name}`"),
        });
    }
    let value_text = cursor.take_while(|c| c != ' ' && c != '\t');
    if value_text.is_empty() {
        return Err(format!("sample `{name}` has no value"));
    }
    let Some(value) = parse_float(value_text) else {
        return Err(format!(
            "`{value_text}` is not a valid value for `{name}` (expected a number, NaN, +Inf or -Inf)"
        ));
    };
    cursor.skip_blanks();
    let mut timestamp_ms = None;
    if cursor.peek().is_some_and(|c| c != '#') {
        let token = cursor.take_while(|c| c != ' ' && c != '\t');
        timestamp_ms = Some(parse_timestamp(token).ok_or_else(|| {
            format!("`{token}` is not a valid timestamp for `{name}` (expected milliseconds since the epoch)")
        })?);
        cursor.skip_blanks();
    }
    let rest = cursor.rest().trim_end();
    // An OpenMetrics exemplar (`# {trace_id="…"} 1.0`) may follow; it is not kept.
    if !rest.is_empty() && !rest.starts_with('#') {
        return Err(format!("unexpected `{rest}` after the sample of `{name}`"));
    }
    Ok(Sample {
        name,
        labels,
        value,
        timestamp_ms,
        line: line_no,
    })
}

/// Milliseconds (0.0.4: an integer), or OpenMetrics' float seconds.
fn parse_timestamp(token: &str) -> Option<i64> {
    if let Ok(ms) = token.parse::<i64>() {
        return Some(ms);
    }
    if token.contains(['.', 'e', 'E']) {
        let seconds = parse_float(token)?;
        let ms = (seconds * 1000.0).round();
        if ms.is_finite() && ms.abs() < 9.0e15 {
            return Some(ms as i64);
        }
    }
    None
}

fn parse_labels(cursor: &mut Cursor<'_>, metric: &str) -> Result<Vec<(String, String)>, String> {
    let mut labels: Vec<(String, String)> = Vec::new();
    loop {
        cursor.skip_blanks();
        match cursor.peek() {
            Some('}') => {
                cursor.bump();
                return Ok(labels);
            }
            None => return Err(format!("label set of `{metric}` is not closed by `}}`")),
            Some('"') => {
                return Err(format!(
                    "quoted label names are not supported (in the labels of `{metric}`)"
                ));
            }
            Some(c) if !(c.is_ascii_alphabetic() || c == '_') => {
                return Err(format!(
                    "`{c}` cannot start a label name (in the labels of `{metric}`)"
                ));
            }
            Some(_) => {}
        }
        let name = cursor
            .take_while(|c| c.is_ascii_alphanumeric() || c == '_')
            .to_string();
        cursor.skip_blanks();
        if cursor.bump() != Some('=') {
            return Err(format!(
                "expected `=` after the label name `{name}` of `{metric}`"
            ));
        }
        cursor.skip_blanks();
        if cursor.bump() != Some('"') {
            return Err(format!(
                "the value of label `{name}` of `{metric}` must be in double quotes"
            ));
        }
        let mut value = String::new();
        loop {
            match cursor.bump() {
                None => {
                    return Err(format!(
                        "the value of label `{name}` of `{metric}` is not closed by `\"`"
                    ));
                }
                Some('"') => break,
                Some('\\') => match cursor.bump() {
                    Some('\\') => value.push('\\'),
                    Some('"') => value.push('"'),
                    Some('n') => value.push('\n'),
                    Some(other) => {
                        return Err(format!(
                            "invalid escape `\\{other}` in the value of label `{name}` of `{metric}` (only \\\\, \\\" and \\n are allowed)"
                        ));
                    }
                    None => {
                        return Err(format!(
                            "the value of label `{name}` of `{metric}` is not closed by `\"`"
                        ));
                    }
                },
                Some(c) => value.push(c),
            }
        }
        if labels.iter().any(|(k, _)| *k == name) {
            return Err(format!("label `{name}` appears twice in `{metric}`"));
        }
        labels.push((name, value));
        cursor.skip_blanks();
        match cursor.peek() {
            Some(',') => {
                cursor.bump();
            }
            Some('}') => {}
            None => return Err(format!("label set of `{metric}` is not closed by `}}`")),
            Some(c) => {
                return Err(format!(
                    "expected `,` or `}}` after a label value of `{metric}`, found `{c}`"
                ));
            }
        }
    }
}
