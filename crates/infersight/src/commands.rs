//! The commands: each resolves its configuration, builds what it needs through `wiring`, runs,
//! and returns an exit code or a `CliError`.

use std::io::IsTerminal;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use infersight_ingest::{FileFormat, FileOptions, FileSummary};
use infersight_model::TableBatch;
use infersight_query::QueryEngine;
use infersight_server::{Counters, ServeSettings};
use infersight_store::StorageBackend;
use serde_json::json;

use crate::cli::{
    BenchGen, Cli, Command, Common, InputFormat, OutputFormat, StoreAction, TemplatesAction,
};
use crate::config::{self, Config};
use crate::exit::CliError;
use crate::wiring;

fn environment() -> Vec<(String, String)> {
    std::env::vars()
        .filter(|(k, _)| k.starts_with(config::ENV_PREFIX))
        .collect()
}

/// Defaults < file < environment < flags.
pub(crate) fn resolve(common: &Common) -> Result<Config, CliError> {
    let mut config = config::load(common.config.as_deref(), &environment())?;
    if let Some(data) = &common.data {
        config.store.data_dir = data.clone();
    }
    Ok(config)
}

fn query_format(format: OutputFormat) -> infersight_query::OutputFormat {
    match format {
        OutputFormat::Table => infersight_query::OutputFormat::Table,
        OutputFormat::Csv => infersight_query::OutputFormat::Csv,
        OutputFormat::Json => infersight_query::OutputFormat::Json,
    }
}

pub async fn run(cli: Cli) -> Result<i32, CliError> {
    match cli.command {
        Command::Demo { common, out, seed } => crate::demo::run(resolve(&common)?, out, seed).await,
        Command::Simulate {
            scenario,
            seed,
            duration,
            start,
            workers,
            rate,
            arrivals,
            dimensions,
            out,
            otlp,
            ground_truth,
            token_events,
            phase_spans,
            format,
            quiet,
        } => {
            let args = crate::simulate::SimulateArgs {
                scenario,
                seed,
                duration,
                start,
                workers,
                rate,
                arrivals,
                dimensions,
                out,
                otlp,
                ground_truth,
                token_events,
                phase_spans,
                format,
                quiet,
            };
            tokio::task::spawn_blocking(move || crate::simulate::simulate(args))
                .await
                .map_err(|e| CliError::failed(format!("simulate task: {e}")))?
        }
        Command::Report(args) => crate::report_cmd::run(args).await,
        Command::Incidents(args) => crate::incidents_cmd::run(args).await,
        Command::Actions(args) => crate::actions_cmd::run(args).await,
        Command::Audit(args) => crate::audit_cmd::run(args).await,
        Command::Canary(args) => crate::canary_cmd::run(args).await,
        Command::Scenarios { format } => crate::simulate::scenarios(format),
        Command::Serve {
            common,
            listen,
            otlp_grpc_port,
            otlp_http_port,
            api_port,
        } => serve(common, listen, otlp_grpc_port, otlp_http_port, api_port).await,
        Command::Ingest {
            common,
            paths,
            input_format,
            service,
            worker,
            format,
            quiet,
            wal,
        } => {
            let config = resolve(&common)?;
            let options = IngestOptions {
                input_format,
                service,
                worker,
                format,
                quiet,
                wal,
            };
            tokio::task::spawn_blocking(move || ingest(config, paths, options))
                .await
                .map_err(|e| CliError::failed(format!("ingest task: {e}")))?
        }
        Command::Query {
            common,
            sql,
            format,
            server,
        } => query(common, sql, format, server).await,
        Command::Dimensions {
            common,
            since,
            until,
            max_cardinality,
            format,
        } => dimensions(common, since, until, max_cardinality, format).await,
        Command::Sli {
            common,
            sli,
            q,
            by,
            filter,
            since,
            until,
            step,
            format,
        } => {
            let request = infersight_server::api::sli_request(
                &sli,
                q.as_deref(),
                by.as_deref(),
                filter.as_deref(),
                since.as_deref(),
                until.as_deref(),
                step.as_deref(),
            )
            .map_err(CliError::usage)?;
            sli_command(common, request, format).await
        }
        Command::Rca {
            common,
            since,
            until,
            baseline_since,
            baseline_until,
            format,
        } => {
            let request = rca_request(since, until, baseline_since, baseline_until)?;
            let config = resolve(&common)?;
            let store = tokio::task::block_in_place(|| wiring::open_existing_store(&config))?;
            let engine = QueryEngine::new(store.clone() as Arc<dyn StorageBackend>);
            let report = engine
                .rca(request)
                .await
                .map_err(|e| CliError::from_kind(e.kind(), e.to_string()))?;
            // Every verdict is stored, so it can be confirmed (becoming a retrievable past
            // incident) and reported on later.
            let incident =
                infersight_report::incidents::IncidentStore::open(&config.store.data_dir)
                    .create(&report)
                    .map_err(crate::report_cmd::report_error)?;
            match format {
                OutputFormat::Json => {
                    let mut value = serde_json::to_value(&report)
                        .map_err(|e| CliError::failed(e.to_string()))?;
                    if let Some(object) = value.as_object_mut() {
                        object.insert("incident_id".into(), json!(incident.id));
                    }
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&value)
                            .map_err(|e| CliError::failed(e.to_string()))?
                    )
                }
                OutputFormat::Table | OutputFormat::Csv => {
                    print!("{}", crate::analyze::render_rca(&report));
                    println!(
                        "incident: {} (infersight report --incident {})",
                        incident.id, incident.id
                    );
                }
            }
            Ok(0)
        }
        Command::Templates { common, action } => {
            let config = resolve(&common)?;
            match action {
                TemplatesAction::Mine {
                    file,
                    log_format,
                    format,
                } => crate::analyze::templates_mine(&config, &file, log_format.as_deref(), format),
                TemplatesAction::List { format } => crate::analyze::templates_list(&config, format),
            }
        }
        Command::Localize {
            table,
            real,
            forecast,
            time_col,
            at,
            numerator,
            denominator,
            history,
            dims,
        } => crate::analyze::localize(crate::analyze::LocalizeArgs {
            table,
            real,
            forecast,
            time_col,
            at,
            numerator,
            denominator,
            history,
            dims,
        }),
        Command::Validate { config: path } => match config::load(Some(&path), &environment()) {
            Ok(_) => {
                println!("{}: ok", path.display());
                Ok(0)
            }
            Err(errors) => {
                for e in &errors.0 {
                    eprintln!("{}: {e}", path.display());
                }
                Err(CliError::usage(format!(
                    "{} has {} error(s)",
                    path.display(),
                    errors.0.len()
                )))
            }
        },
        Command::Mapping => {
            print!("{}", infersight_model::mapping::mapping_markdown());
            Ok(0)
        }
        Command::BenchGen { common, what } => {
            let config = resolve(&common)?;
            tokio::task::spawn_blocking(move || bench_gen(config, what))
                .await
                .map_err(|e| CliError::failed(format!("bench-gen task: {e}")))?
        }
        Command::Store { common, action } => {
            let config = resolve(&common)?;
            tokio::task::spawn_blocking(move || store_action(config, action))
                .await
                .map_err(|e| CliError::failed(format!("store task: {e}")))?
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

async fn serve(
    common: Common,
    listen: Option<IpAddr>,
    otlp_grpc_port: Option<u16>,
    otlp_http_port: Option<u16>,
    api_port: Option<u16>,
) -> Result<i32, CliError> {
    let config = resolve(&common)?;
    let settings = ServeSettings {
        listen: listen.unwrap_or_else(|| {
            config
                .server
                .listen
                .parse()
                .unwrap_or(IpAddr::from([127, 0, 0, 1]))
        }),
        otlp_grpc_port: otlp_grpc_port.unwrap_or(config.server.otlp_grpc_port),
        otlp_http_port: otlp_http_port.unwrap_or(config.server.otlp_http_port),
        api_port: api_port.unwrap_or(config.server.api_port),
        max_body_bytes: config.server.max_body_bytes,
        queue_capacity: config.server.queue_capacity,
        max_query_rows: config.query.max_rows,
        max_dimension_cardinality: config.query.max_dimension_cardinality,
    };
    let store = tokio::task::block_in_place(|| wiring::open_store(&config))?;
    let tick =
        config::duration(&config.server.maintenance_interval).unwrap_or(Duration::from_secs(5));
    let maintenance = store.spawn_maintenance(tick);
    let counters = Arc::new(Counters::new());
    let transform = wiring::build_transform(&config, counters.clone())?;
    let data_dir = config.store.data_dir.display().to_string();
    let result = infersight_server::serve::serve_with(
        settings,
        wiring::serve_extras(&config)?,
        store.clone() as Arc<dyn StorageBackend>,
        transform,
        wiring::mapper(&config),
        counters,
        |addrs| {
            eprintln!(
                "infersight: listening otlp_grpc={} otlp_http={} api={} data={}",
                addrs.otlp_grpc, addrs.otlp_http, addrs.api, data_dir
            );
        },
        shutdown_signal(),
    )
    .await;
    maintenance.stop();
    result.map_err(|e| CliError::failed(e.to_string()))?;
    eprintln!(
        "infersight: stopped; everything acknowledged is flushed to {}",
        config.store.data_dir.display()
    );
    Ok(0)
}

/// The command-line options of `infersight ingest`.
struct IngestOptions {
    input_format: InputFormat,
    service: Option<String>,
    worker: Option<String>,
    format: OutputFormat,
    quiet: bool,
    wal: bool,
}

fn ingest(config: Config, paths: Vec<PathBuf>, options: IngestOptions) -> Result<i32, CliError> {
    let IngestOptions {
        input_format,
        service,
        worker,
        format,
        quiet,
        wal,
    } = options;
    for path in &paths {
        if !path.is_file() {
            return Err(CliError::usage(format!(
                "{}: not a readable file",
                path.display()
            )));
        }
    }
    let store = wiring::open_store(&config)?;
    let mut transform = wiring::build_transform(&config, Arc::new(Counters::new()))?;
    let mapper = wiring::mapper(&config);
    let options = FileOptions {
        format: match input_format {
            InputFormat::Auto => FileFormat::Auto,
            InputFormat::OtlpJsonl => FileFormat::OtlpJsonl,
            InputFormat::Jsonl => FileFormat::JsonLines,
            InputFormat::Raw => FileFormat::Raw,
        },
        service,
        worker,
        ..FileOptions::default()
    };
    let total_bytes: u64 = paths
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    let show_progress = !quiet && std::io::stderr().is_terminal();
    let bar = if show_progress {
        let bar = indicatif::ProgressBar::new(total_bytes);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {bytes}/{total_bytes} {wide_bar} {bytes_per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    // Two threads: this one reads, decodes and converts; the writer redacts and appends, so the
    // two halves of the work overlap. The bounded channel keeps memory flat.
    let (to_writer, from_reader) = std::sync::mpsc::sync_channel::<Vec<TableBatch>>(2);
    let writer_store = store.clone();
    let writer = std::thread::Builder::new()
        .name("infersight-ingest-writer".into())
        .spawn(move || -> Result<(), String> {
            for batches in from_reader {
                let out = transform(batches).map_err(|e| e.message)?;
                let appended = if wal {
                    writer_store.append(&out)
                } else {
                    writer_store.append_unlogged(&out)
                };
                // Flush when the memtable is over its limits, so memory stays bounded on big inputs.
                appended
                    .and_then(|_| writer_store.maybe_flush())
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        })
        .map_err(|e| CliError::failed(format!("starting the writer thread: {e}")))?;
    let mut summaries: Vec<(PathBuf, FileSummary)> = Vec::new();
    let mut done_bytes = 0u64;
    let mut read_error = None;
    for path in &paths {
        let base = done_bytes;
        let result = infersight_ingest::read_file(
            path,
            &options,
            &mapper,
            &mut |batches| {
                to_writer
                    .send(batches)
                    .map_err(|_| "the store writer stopped".to_string())
            },
            &mut |read| bar.set_position(base + read),
        );
        match result {
            Ok(summary) => summaries.push((path.clone(), summary)),
            Err(e) => {
                read_error = Some(CliError::from_kind(
                    e.kind(),
                    format!("{}: {e}", path.display()),
                ));
                break;
            }
        }
        done_bytes += std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    }
    drop(to_writer);
    let written = writer
        .join()
        .unwrap_or_else(|_| Err("the store writer panicked".to_string()));
    if written.is_err() || read_error.is_some() {
        // What reached the store before the failure is kept: bulk loads skip the WAL, so it is
        // flushed now. Then say what got in, so a rerun can be planned (completed files are stored).
        let closed = store.close();
        bar.finish_and_clear();
        print_ingest_summary(&summaries, format);
        let closing = closed
            .err()
            .map(|e| format!("; closing the store: {e}"))
            .unwrap_or_default();
        if let Err(e) = written {
            return Err(CliError::failed(format!("storing: {e}{closing}")));
        }
        if let Some(mut e) = read_error {
            e.message.push_str(&closing);
            return Err(e);
        }
    }
    bar.finish_and_clear();
    store
        .close()
        .map_err(|e| CliError::failed(format!("closing the store: {e}")))?;
    print_ingest_summary(&summaries, format);
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

fn print_ingest_summary(summaries: &[(PathBuf, FileSummary)], format: OutputFormat) {
    match format {
        OutputFormat::Json => {
            let files: Vec<_> = summaries
                .iter()
                .map(|(p, s)| {
                    json!({"path": p.display().to_string(), "lines": s.lines, "records_read": s.records_read,
                           "records_stored": s.records_stored, "rejected": s.rejected, "errors": s.first_errors})
                })
                .collect();
            println!("{}", json!({ "files": files }));
        }
        OutputFormat::Csv => {
            println!("path,lines,records_read,records_stored,rejected");
            for (p, s) in summaries {
                println!(
                    "{},{},{},{},{}",
                    p.display(),
                    s.lines,
                    s.records_read,
                    s.records_stored,
                    s.rejected
                );
            }
        }
        OutputFormat::Table => {
            println!(
                "{:<50} {:>10} {:>12} {:>14} {:>9}",
                "path", "lines", "read", "stored", "rejected"
            );
            for (p, s) in summaries {
                println!(
                    "{:<50} {:>10} {:>12} {:>14} {:>9}",
                    p.display(),
                    s.lines,
                    s.records_read,
                    s.records_stored,
                    s.rejected
                );
                for e in &s.first_errors {
                    eprintln!("  {e}");
                }
            }
        }
    }
}

async fn query(
    common: Common,
    sql: String,
    format: OutputFormat,
    server: Option<String>,
) -> Result<i32, CliError> {
    if let Some(server) = server {
        let format_name = match format {
            OutputFormat::Table => "table",
            OutputFormat::Csv => "csv",
            OutputFormat::Json => "json",
        };
        let url = format!("{}/api/v1/query", server.trim_end_matches('/'));
        let body = json!({ "sql": sql, "format": format_name }).to_string();
        let response = tokio::task::spawn_blocking(move || {
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .build()
                .into();
            agent
                .post(&url)
                .header("content-type", "application/json")
                // who asks, for the server's access audit (a proxy's own header wins there)
                .header("x-infersight-user", infersight_query::audit::cli_actor())
                .send(body.as_str())
                .map_err(|e| CliError::failed(format!("{url}: {e}")))
                .and_then(|mut r| {
                    let status = r.status().as_u16();
                    let text = r
                        .body_mut()
                        .read_to_string()
                        .map_err(|e| CliError::failed(format!("{url}: {e}")))?;
                    Ok((status, text))
                })
        })
        .await
        .map_err(|e| CliError::failed(e.to_string()))??;
        return match response {
            (200, text) => {
                println!("{}", text.trim_end());
                Ok(0)
            }
            (status, text) => {
                let message = serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
                    .unwrap_or(text);
                Err(if status < 500 {
                    CliError::usage(message)
                } else {
                    CliError::failed(message)
                })
            }
        };
    }
    let config = resolve(&common)?;
    let store = tokio::task::block_in_place(|| wiring::open_existing_store(&config))?;
    let engine = QueryEngine::new(store.clone() as Arc<dyn StorageBackend>)
        .with_access_audit(wiring::access_audit(&config));
    let context = infersight_query::AccessContext::cli(infersight_query::Surface::CliQuery);
    let audited = engine.sql_audited(&sql, None, &context).await;
    warn_unaudited(&audited.audit);
    let output = audited
        .result
        .map_err(|e| CliError::from_kind(e.kind(), e.to_string()))?;
    let text = output
        .try_render(query_format(format))
        .map_err(|e| CliError::failed(e.to_string()))?;
    println!("{}", text.trim_end());
    Ok(0)
}

/// A command's access that could not be audited is a warning, never a lost answer.
pub(crate) fn warn_unaudited(status: &infersight_query::AuditStatus) {
    if let infersight_query::AuditStatus::Failed(error) = status {
        tracing::warn!(%error, "access audit not written; the answer is printed anyway");
    }
}

/// Windows of `infersight rca` from the flags: both ends of a window or neither.
pub(crate) fn rca_request(
    since: Option<String>,
    until: Option<String>,
    baseline_since: Option<String>,
    baseline_until: Option<String>,
) -> Result<infersight_query::RcaRequest, CliError> {
    let range = |a: Option<String>, b: Option<String>, what: &str| match (a, b) {
        (None, None) => Ok(None),
        (Some(a), Some(b)) => infersight_server::api::parse_range(Some(&a), Some(&b))
            .map(Some)
            .map_err(CliError::usage),
        _ => Err(CliError::usage(format!(
            "give both ends of the {what} window or neither"
        ))),
    };
    Ok(infersight_query::RcaRequest {
        incident: range(since, until, "incident")?,
        baseline: range(baseline_since, baseline_until, "baseline")?,
    })
}

async fn sli_command(
    common: Common,
    request: infersight_query::SliRequest,
    format: OutputFormat,
) -> Result<i32, CliError> {
    let config = resolve(&common)?;
    let store = tokio::task::block_in_place(|| wiring::open_existing_store(&config))?;
    let engine = QueryEngine::new(store.clone() as Arc<dyn StorageBackend>);
    let answer = engine
        .sli(request)
        .await
        .map_err(|e| CliError::from_kind(e.kind(), e.to_string()))?;
    match format {
        OutputFormat::Json => println!("{}", answer.to_json()),
        OutputFormat::Csv => {
            let (header, rows) = answer.table();
            println!("{}", header.join(","));
            for row in rows {
                let cells: Vec<String> = row.iter().map(|c| c.replace(',', ";")).collect();
                println!("{}", cells.join(","));
            }
        }
        OutputFormat::Table => print!("{}", answer.render_table()),
    }
    Ok(0)
}

async fn dimensions(
    common: Common,
    since: Option<String>,
    until: Option<String>,
    max_cardinality: Option<usize>,
    format: OutputFormat,
) -> Result<i32, CliError> {
    let config = resolve(&common)?;
    let range = infersight_server::api::parse_range(since.as_deref(), until.as_deref())
        .map_err(CliError::usage)?;
    let store = tokio::task::block_in_place(|| wiring::open_existing_store(&config))?;
    let engine = QueryEngine::new(store.clone() as Arc<dyn StorageBackend>);
    let dims = engine
        .dimensions(
            range,
            max_cardinality.unwrap_or(config.query.max_dimension_cardinality),
            10,
        )
        .await
        .map_err(|e| CliError::from_kind(e.kind(), e.to_string()))?;
    match format {
        OutputFormat::Json => {
            let list: Vec<_> = dims
                .iter()
                .map(|d| {
                    json!({"name": d.name, "source": d.source, "distinct_values": d.distinct_values,
                                "total_rows": d.total_rows, "values": d.values})
                })
                .collect();
            println!("{}", json!({ "dimensions": list }));
        }
        OutputFormat::Csv => {
            println!("name,source,distinct_values,value,count");
            for d in &dims {
                for (v, n) in &d.values {
                    println!(
                        "{},{},{},{},{}",
                        d.name,
                        d.source,
                        d.distinct_values,
                        v.replace(',', ";"),
                        n
                    );
                }
            }
        }
        OutputFormat::Table => {
            println!(
                "{:<32} {:<7} {:>9}  top values",
                "dimension", "source", "distinct"
            );
            for d in &dims {
                let top: Vec<String> = d
                    .values
                    .iter()
                    .take(5)
                    .map(|(v, n)| format!("{v} ({n})"))
                    .collect();
                println!(
                    "{:<32} {:<7} {:>9}  {}",
                    d.name,
                    d.source,
                    d.distinct_values,
                    top.join(", ")
                );
            }
        }
    }
    Ok(0)
}

fn store_action(config: Config, action: StoreAction) -> Result<i32, CliError> {
    let store = wiring::open_existing_store(&config)?;
    let fail = |e: infersight_store::StoreError| CliError::failed(e.to_string());
    let report = match action {
        StoreAction::Stats => serde_json::to_value(store.stats()).unwrap_or_default(),
        StoreAction::Flush => {
            serde_json::to_value(store.flush().map_err(fail)?).unwrap_or_default()
        }
        StoreAction::Compact => {
            let compaction = store.compact().map_err(fail)?;
            let retention = store
                .apply_retention(infersight_model::time::now_ns())
                .map_err(fail)?;
            json!({ "compaction": compaction, "retention": retention })
        }
    };
    store.close().map_err(fail)?;
    println!("{report}");
    Ok(0)
}

fn bench_gen(mut config: Config, what: BenchGen) -> Result<i32, CliError> {
    match what {
        BenchGen::OtlpJsonl {
            out,
            spans,
            per_line,
            seed,
        } => crate::benchgen::otlp_jsonl(&out, spans, per_line, seed)?,
        BenchGen::Requests { rows, hours, seed } => {
            config.store.fsync = "never".into();
            config.store.memtable_max_rows = usize::MAX / 2;
            let store = wiring::open_store(&config)?;
            crate::benchgen::requests(&*store, rows, hours, seed)?;
            store.close().map_err(|e| CliError::failed(e.to_string()))?;
        }
        BenchGen::SliCompare { runs } => {
            let store = wiring::open_existing_store(&config)?;
            let report = crate::benchgen::sli_compare(store, runs)?;
            println!("{report}");
        }
    }
    Ok(0)
}
