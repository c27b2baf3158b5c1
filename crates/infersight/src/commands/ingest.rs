//! `infersight ingest FILE…`: a bulk load of OTLP JSON Lines, plain JSON lines or raw text logs
//! (gzip too). This thread reads, decodes and converts (`infersight_ingest::read_file`); a
//! writer thread runs the pipeline stages and appends to the store, so the two halves overlap.
//! Prints one summary row per file; rejected records make it exit 2.
//!
//! Files with telemetry are read before raw text logs, whatever the order given: a raw line's
//! year-less time (vLLM, glog) is placed near the data around it (the store's time range and the
//! files read before it; see `infersight_ingest::files`), unless `--year` says which year. Raw
//! lines that still fall outside that data are reported in one warning.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::SyncSender;
use std::thread::JoinHandle;

use infersight_ingest::files::{CONTEXT_SLACK_NS, YearSource};
use infersight_ingest::{FileFormat, FileOptions, FileStream, FileSummary, SpanTreeCache};
use infersight_model::append::Durability;
use infersight_model::mapping::AttributeMapper;
use infersight_model::telemetry::Counters;
use infersight_model::time::format_rfc3339;
use infersight_model::{Table, TableBatch};
use infersight_pipeline::BatchWriter;
use infersight_store::{StorageBackend, Store};
use serde_json::json;

use crate::args::{Common, FormatArgs};
use crate::config::Config;
use crate::exit::CliError;
use crate::output::{self, Column, OutputFormat};
use crate::wiring;

#[derive(Debug, clap::Args)]
#[command(mut_arg("format", |arg| arg.help("Summary format")))]
pub struct IngestArgs {
    #[command(flatten)]
    pub common: Common,
    /// Files to read.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Input format [default: detected per file].
    #[arg(long, value_enum, default_value = "auto")]
    pub input_format: InputFormat,
    /// Service name for raw text logs.
    #[arg(long)]
    pub service: Option<String>,
    /// Worker label for raw text logs.
    #[arg(long)]
    pub worker: Option<String>,
    /// Year of raw log lines whose times have none (vLLM `INFO 11-29 02:17:03`, glog): the year
    /// of a file's first such line, later lines following on [default: from the data around
    /// them: dated lines of the file, the store and the other files, the file's mtime].
    #[arg(long, value_parser = clap::value_parser!(i32).range(1970..=2261))]
    pub year: Option<i32>,
    #[command(flatten)]
    pub format: FormatArgs,
    /// Hide the progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Log every batch in the write-ahead log before storing it, so rows read before a
    /// crash are recovered at the next start. By default a file's rows go straight to the
    /// memtable and are durable once flushed (at the memtable limits and at the end): the
    /// file itself is the log, and nothing is reported stored before the end.
    #[arg(long)]
    pub wal: bool,
    /// The org (tenant) every row of these files is stored for; `serve` shows it only to
    /// tokens bound to it.
    #[arg(long, default_value = infersight_model::org::DEFAULT_ORG)]
    pub org: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum InputFormat {
    Auto,
    OtlpJsonl,
    Jsonl,
    Raw,
}

pub async fn run(args: IngestArgs) -> Result<i32, CliError> {
    let config = args.common.resolve()?;
    tokio::task::spawn_blocking(move || ingest(config, args))
        .await
        .map_err(|e| CliError::failed(format!("ingest task: {e}")))?
}

/// What the reading thread hands the writer, and how the writer ends.
type WriterHandle = (SyncSender<Vec<TableBatch>>, JoinHandle<Result<(), String>>);

fn ingest(config: Config, args: IngestArgs) -> Result<i32, CliError> {
    infersight_model::org::check_org_name(&args.org)
        .map_err(|e| CliError::usage(format!("--org: {e}")))?;
    for path in &args.paths {
        if !path.is_file() {
            return Err(CliError::usage(format!(
                "{}: not a readable file",
                path.display()
            )));
        }
    }
    let store = wiring::open_store(&config)?;
    // the counters of a one-shot load are shown by its summary, not exposed
    let writer = wiring::batch_writer(&config, store.clone(), Arc::new(Counters::new()))?;
    let mapper = wiring::mapper(&config);
    let options = file_options(&args);
    let bar = progress_bar(&args);
    let (to_writer, writer) = spawn_writer(writer, args.org.clone(), args.wal)?;
    let store_range = store_time_range(&store);
    let (summaries, read_error, around) = read_files(
        &args.paths,
        &options,
        &mapper,
        ReadContext {
            to_writer,
            bar: &bar,
            store_range,
        },
    );
    let written = writer
        .join()
        .unwrap_or_else(|_| Err("the store writer panicked".to_string()));
    let format = args.format.format;
    let failure = match (written, read_error) {
        (Err(e), _) => Some(CliError::failed(format!("storing: {e}"))),
        (Ok(()), read_error) => read_error,
    };
    if let Some(error) = failure {
        return Err(fail_midway(&store, &bar, &summaries, format, error));
    }
    bar.finish_and_clear();
    warn_raw_lines_outside(&summaries, around);
    store
        .close()
        .map_err(|e| CliError::failed(format!("closing the store: {e}")))?;
    print_summary(&summaries, format)?;
    let rejected: u64 = summaries.iter().map(|(_, s)| s.rejected).sum();
    if rejected > 0 {
        let first = summaries
            .iter()
            .flat_map(|(_, s)| s.first_errors.iter())
            .next()
            .cloned()
            .unwrap_or_default();
        return Err(CliError::usage(format!(
            "{rejected} record(s) rejected; first: {first}"
        )));
    }
    Ok(0)
}

fn file_options(args: &IngestArgs) -> FileOptions {
    FileOptions {
        format: match args.input_format {
            InputFormat::Auto => FileFormat::Auto,
            InputFormat::OtlpJsonl => FileFormat::OtlpJsonl,
            InputFormat::Jsonl => FileFormat::JsonLines,
            InputFormat::Raw => FileFormat::Raw,
        },
        service: args.service.clone(),
        worker: args.worker.clone(),
        year: args.year,
        ..FileOptions::default()
    }
}

/// Bytes read of all files, on a terminal unless `--quiet`.
fn progress_bar(args: &IngestArgs) -> indicatif::ProgressBar {
    if args.quiet || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let total_bytes: u64 = args
        .paths
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    let bar = indicatif::ProgressBar::new(total_bytes);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} {bytes}/{total_bytes} {wide_bar} {bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

/// The writer thread: the ingest runtime's stages, then the store (in bulk, or through the WAL
/// with `--wal`), flushing when the memtable is over its limits. The bounded channel keeps memory
/// flat.
fn spawn_writer(mut writer: BatchWriter, org: String, wal: bool) -> Result<WriterHandle, CliError> {
    let durability = if wal {
        Durability::Logged
    } else {
        Durability::Bulk
    };
    let (to_writer, from_reader) = std::sync::mpsc::sync_channel::<Vec<TableBatch>>(2);
    let writer = std::thread::Builder::new()
        .name("infersight-ingest-writer".into())
        .spawn(move || -> Result<(), String> {
            for batches in from_reader {
                writer
                    .write(&org, batches, durability)
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        })
        .map_err(|e| CliError::failed(format!("starting the writer thread: {e}")))?;
    Ok((to_writer, writer))
}

/// Where [`read_files`] sends what it reads, and the time range of the store before it.
struct ReadContext<'a> {
    to_writer: SyncSender<Vec<TableBatch>>,
    bar: &'a indicatif::ProgressBar,
    /// Earliest and latest row time (ns) of the store's segments before this load.
    store_range: Option<(i64, i64)>,
}

/// What [`read_files`] read: a summary per file read (in the order of the paths), the error that
/// stopped it, and the time range of the store and of the telemetry files' rows.
type ReadOutcome = (
    Vec<(PathBuf, FileSummary)>,
    Option<CliError>,
    Option<(i64, i64)>,
);

/// Reads the files into the writer until one fails, those with telemetry first (see the module
/// doc), as one stream: a request whose spans are split between files (each service's export in
/// its own file) is one row. The channel closes on return.
fn read_files(
    paths: &[PathBuf],
    options: &FileOptions,
    mapper: &AttributeMapper,
    context: ReadContext<'_>,
) -> ReadOutcome {
    let ReadContext {
        to_writer,
        bar,
        store_range,
    } = context;
    let mut summaries = Vec::new();
    let mut done_bytes = 0u64;
    let mut around = store_range;
    let mut failure = None;
    let span_tree = SpanTreeCache::for_files();
    let order = reading_order(paths, options.format);
    let files = order.len();
    for (position, (index, raw)) in order.into_iter().enumerate() {
        let path = &paths[index];
        let stream = FileStream {
            span_tree: &span_tree,
            last: position + 1 == files,
        };
        let base = done_bytes;
        let file_options = FileOptions {
            time_context_ns: around,
            ..options.clone()
        };
        let result = infersight_ingest::read_file_of_stream(
            path,
            &file_options,
            mapper,
            stream,
            &mut |batches| {
                // raw lines are placed by the data around them, they are not part of it
                for batch in batches.iter().filter(|_| !raw) {
                    around = union(around, batch_time_range(&batch.batch));
                }
                to_writer
                    .send(batches)
                    .map_err(|_| "the store writer stopped".to_string())
            },
            &mut |read| bar.set_position(base + read),
        );
        match result {
            Ok(summary) => summaries.push((index, path.clone(), summary)),
            Err(e) => {
                failure = Some(CliError::from_kind(
                    e.kind(),
                    format!("{}: {e}", path.display()),
                ));
                break;
            }
        }
        done_bytes += std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    }
    summaries.sort_by_key(|(index, ..)| *index);
    let summaries = summaries
        .into_iter()
        .map(|(_, path, summary)| (path, summary))
        .collect();
    (summaries, failure, around)
}

/// Indices of `paths` in reading order, each with whether it holds raw text logs: files of
/// telemetry (OTLP, JSON lines) first, then raw text logs, each group in the given order. A file
/// that cannot be opened keeps its place among the first (reading it reports the error).
fn reading_order(paths: &[PathBuf], format: FileFormat) -> Vec<(usize, bool)> {
    let is_raw = |path: &PathBuf| match format {
        FileFormat::Auto => infersight_ingest::files::detect_file_format(path)
            .is_ok_and(|detected| detected == FileFormat::Raw),
        forced => forced == FileFormat::Raw,
    };
    let raw: Vec<bool> = paths.iter().map(is_raw).collect();
    let mut order: Vec<usize> = (0..paths.len()).collect();
    order.sort_by_key(|&index| raw[index]);
    order.into_iter().map(|index| (index, raw[index])).collect()
}

/// Earliest and latest row time of the store's tables with telemetry, from the segments'
/// metadata (rows not yet flushed are not counted).
fn store_time_range(store: &Store) -> Option<(i64, i64)> {
    [Table::Requests, Table::Spans, Table::Logs, Table::Metrics]
        .into_iter()
        .flat_map(|table| store.segments(table))
        .filter(|segment| segment.rows > 0)
        .map(|segment| Some((segment.min_ts_ns, segment.max_ts_ns)))
        .fold(None, union)
}

/// Earliest and latest `ts` of a batch.
fn batch_time_range(batch: &arrow::record_batch::RecordBatch) -> Option<(i64, i64)> {
    let ts = batch
        .column_by_name("ts")?
        .as_any()
        .downcast_ref::<arrow::array::TimestampNanosecondArray>()?;
    Some((arrow::compute::min(ts)?, arrow::compute::max(ts)?))
}

fn union(a: Option<(i64, i64)>, b: Option<(i64, i64)>) -> Option<(i64, i64)> {
    match (a, b) {
        (Some(a), Some(b)) => Some((a.0.min(b.0), a.1.max(b.1))),
        (a, None) => a,
        (None, b) => b,
    }
}

/// One warning for all files when raw lines fall outside the data around them (a wrong year, a
/// log of another day): the RCA would find no log evidence for them.
fn warn_raw_lines_outside(summaries: &[(PathBuf, FileSummary)], around: Option<(i64, i64)>) {
    let raw = summaries.iter().map(|(_, summary)| &summary.raw_times);
    let outside: u64 = raw.clone().map(|times| times.outside_context).sum();
    if outside == 0 {
        return;
    }
    let timed: u64 = raw.clone().map(|times| times.timed_lines).sum();
    let year_inferred: u64 = raw.clone().map(|times| times.year_inferred_lines).sum();
    let span = |range: Option<(i64, i64)>| {
        range.map_or_else(String::new, |(from, to)| {
            format!("{} .. {}", format_rfc3339(from), format_rfc3339(to))
        })
    };
    let raw_range = span(raw.clone().map(|times| times.range_ns).fold(None, union));
    let sources: Vec<String> = summaries
        .iter()
        .filter(|(_, summary)| summary.raw_times.outside_context > 0)
        .map(|(path, summary)| {
            let source = summary
                .raw_times
                .year_source
                .map_or("from dated lines", YearSource::as_str);
            format!("{} (year: {source})", path.display())
        })
        .collect();
    let around = span(around);
    let slack_minutes = CONTEXT_SLACK_NS / 60_000_000_000;
    tracing::warn!(
        files = %sources.join(", "),
        "{outside} of {timed} raw log lines ({year_inferred} without a year in their time) lie \
         more than {slack_minutes} min outside the data around them (the store and the other \
         files: {around}); the raw lines span {raw_range}; if their year is wrong, ingest them \
         again with --year YYYY"
    );
}

/// What reached the store before the failure is kept: bulk loads skip the WAL, so it is
/// flushed now. Then say what got in, so a rerun can be planned (completed files are stored).
fn fail_midway(
    store: &Store,
    bar: &indicatif::ProgressBar,
    summaries: &[(PathBuf, FileSummary)],
    format: OutputFormat,
    mut error: CliError,
) -> CliError {
    let closed = store.close();
    bar.finish_and_clear();
    if let Err(e) = print_summary(summaries, format) {
        return e;
    }
    if let Err(e) = closed {
        error.message.push_str(&format!("; closing the store: {e}"));
    }
    error
}

const SUMMARY_COLUMNS: [Column; 5] = [
    Column::left(50),
    Column::right(10),
    Column::right(12),
    Column::right(14),
    Column::right(9),
];

fn print_summary(
    summaries: &[(PathBuf, FileSummary)],
    format: OutputFormat,
) -> Result<(), CliError> {
    if format != OutputFormat::Json {
        // a file read by its content where its name said another format
        for note in summaries.iter().flat_map(|(_, s)| &s.notes) {
            eprintln!("note: {note}");
        }
    }
    match format {
        OutputFormat::Json => {
            let files: Vec<_> = summaries
                .iter()
                .map(|(p, s)| {
                    json!({"path": p.display().to_string(), "lines": s.lines, "records_read": s.records_read,
                           "records_stored": s.records_stored, "rejected": s.rejected, "errors": s.first_errors,
                           "notes": s.notes})
                })
                .collect();
            println!("{}", output::json_line(&json!({ "files": files }))?);
        }
        OutputFormat::Csv => {
            let header = [
                "path",
                "lines",
                "records_read",
                "records_stored",
                "rejected",
            ];
            let rows = summaries.iter().map(|(path, s)| summary_cells(path, s));
            print!("{}", output::csv(&header, rows)?);
        }
        OutputFormat::Table => {
            let header = ["path", "lines", "read", "stored", "rejected"];
            println!("{}", output::fixed_line(&SUMMARY_COLUMNS, &header));
            for (path, summary) in summaries {
                let cells = summary_cells(path, summary);
                println!("{}", output::fixed_line(&SUMMARY_COLUMNS, &cells));
                for e in &summary.first_errors {
                    eprintln!("  {e}");
                }
            }
        }
    }
    Ok(())
}

fn summary_cells(path: &Path, summary: &FileSummary) -> Vec<String> {
    vec![
        path.display().to_string(),
        summary.lines.to_string(),
        summary.records_read.to_string(),
        summary.records_stored.to_string(),
        summary.rejected.to_string(),
    ]
}
