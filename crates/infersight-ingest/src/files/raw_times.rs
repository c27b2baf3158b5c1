//! What a file's raw text lines carry from one to the next ([`RawState`]: the anchor of the next
//! year-less time, the process tags' attributes) and what the file summary says of their times
//! ([`RawTimes`], [`YearSource`]). The file reader holds the state; `raw` reads the lines.

use std::collections::HashMap;

use infersight_model::log_prefix::YearAnchor;

/// Raw lines this far outside the data around them are counted as outside (an engine starts a
/// little before its traffic, and its last lines come a little after).
pub const CONTEXT_SLACK_NS: i64 = 3_600_000_000_000;
/// Distinct process tags whose attributes are kept ready (a vLLM log has a handful).
pub(super) const MAX_CACHED_TAGS: usize = 256;

/// Where the year of a file's year-less raw lines came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YearSource {
    /// `FileOptions::year` (`infersight ingest --year`).
    Given,
    /// A line of the same file with a full date.
    FileDates,
    /// The data around the file (`FileOptions::time_context_ns`).
    Context,
    /// The file's modification time (the latest year not after it).
    FileModified,
}

impl YearSource {
    pub fn as_str(self) -> &'static str {
        match self {
            YearSource::Given => "given",
            YearSource::FileDates => "from the file's dated lines",
            YearSource::Context => "from the data around the file",
            YearSource::FileModified => "from the file's modification time",
        }
    }
}

/// The times of a file's raw text lines: how their year was found, and how many fall outside the
/// data around them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawTimes {
    /// Raw lines with a time of their own.
    pub timed_lines: u64,
    /// Of those, lines whose time had no year.
    pub year_inferred_lines: u64,
    /// Where the first year-less line's year came from (later ones follow the line before).
    pub year_source: Option<YearSource>,
    /// Earliest and latest time of the timed lines (ns).
    pub range_ns: Option<(i64, i64)>,
    /// Timed lines more than [`CONTEXT_SLACK_NS`] outside `FileOptions::time_context_ns`.
    pub outside_context: u64,
}

/// What the raw lines read so far carry to the next: where a year-less time is placed, and the
/// attributes of the process tags seen.
#[derive(Debug, Default)]
pub(super) struct RawState {
    /// The anchor of the next year-less time and where it came from; `None` before any time.
    pub(super) anchor: Option<(YearAnchor, YearSource)>,
    /// Attributes (JSON) per process tag text.
    pub(super) tag_attrs: HashMap<String, String>,
}
