//! `headwater`: the Headwater worker binary.
//!
//! `main` parses the command line, resolves settings, installs logging and runs
//! the chosen subcommand: `worker`, or one of the REST client subcommands
//! (`connectors`, `topics`, `consume`; see [`client`]), which install no logging. It is the only place that prints fatal errors and
//! picks the exit code.
//!
//! Invariants:
//! * A fatal error prints exactly one line, `error: <message>`, to stderr (in
//!   both log formats) and exits 2 for usage/configuration problems or 1 for
//!   runtime failures (see [`failure::Failure`]).
//! * `--help`/`--version` print to stdout and exit 0.
//! * Logging is installed only after settings are valid, so configuration
//!   errors never depend on the log format.

mod cli;
mod client;
mod connector_files;
mod datadir;
mod failure;
mod http;
mod logging;
mod plugins;
mod settings;
mod worker;

use std::process::ExitCode;

use crate::cli::{Command, Parsed, WorkerArgs};
use crate::failure::Failure;
use crate::settings::Settings;

/// mimalloc instead of the system allocator: the per-record path allocates small values at a
/// high rate, and glibc's malloc returned and re-faulted large batch buffers (see
/// docs/decisions.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    match real_main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("error: {}", failure.message());
            ExitCode::from(failure.code())
        }
    }
}

fn real_main() -> Result<(), Failure> {
    let cli = match cli::parse(std::env::args_os())? {
        Parsed::Run(cli) => *cli,
        Parsed::Exit(text) => {
            print!("{text}");
            return Ok(());
        }
    };
    match cli.command {
        Command::Worker(args) => run_worker(&args),
        client => client::run(client),
    }
}

fn run_worker(args: &WorkerArgs) -> Result<(), Failure> {
    let rust_log = std::env::var("RUST_LOG").ok();
    let settings = Settings::resolve(args, rust_log.as_deref())?;
    let connectors = args
        .connector_files
        .iter()
        .map(|path| connector_files::read(path))
        .collect::<Result<Vec<_>, _>>()?;
    logging::init(settings.log_format, &settings.log_level)?;
    worker::run(settings, connectors)
}
