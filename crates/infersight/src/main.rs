//! The `infersight` binary: parses the command line, loads the configuration, wires the crates
//! together and maps every outcome onto an exit code (0 ok, 1 failed, 2 bad usage or input).

mod args;
mod benchgen;
mod commands;
mod config;
mod exit;
mod loadgen;
mod output;
mod redaction_reload;
mod rng;
mod sim_sink;
mod wiring;

use clap::Parser;

/// mimalloc: ingest allocates and frees many small strings on several threads at once, where it
/// costs about half of what the system allocator does.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cli = commands::Cli::parse();
    let default_level = cli.command.default_log_level();
    let filter = tracing_subscriber::EnvFilter::try_from_env("INFERSIGHT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // colours for a person at a terminal; plain text for a pipe, a file or journald
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("infersight: error: starting the async runtime: {e}");
            std::process::exit(1);
        }
    };
    let result = runtime.block_on(commands::run(cli));
    // Dropping the runtime waits for blocking tasks; shut down promptly instead.
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("infersight: error: {}", e.message.replace('\n', " "));
            std::process::exit(e.code);
        }
    }
}
