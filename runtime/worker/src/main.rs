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
mod quickstart;
#[cfg(test)]
mod reference;
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

/// mimalloc's `mi_option_purge_delay` (its place in `mi_option_e` of mimalloc 3's header; the
/// bindings name no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Memory freed and no longer used is returned to the OS after this many milliseconds
/// (mimalloc 3's default, set here so a future default cannot change it unseen). At 100 ms
/// the MongoDB connector's ~240 KB reply buffers were returned and faulted in again at every
/// change-stream batch (~1 µs of system time per event); since rows stopped piling up between
/// purges, the MySQL and PostgreSQL benchmarks peak at 47 and 39 MB with 1,000 ms
/// (docs/benchmarks.md, thirteenth session). `MIMALLOC_PURGE_DELAY` in the environment still
/// wins.
const PURGE_DELAY_MS: std::ffi::c_long = 1000;

fn main() -> ExitCode {
    // No transparent huge pages for this process: mimalloc asks for them on its arenas, and
    // then every fresh allocator page after a purge faults in (and zeroes) a whole 2 MiB page.
    // Without them the benchmarks' peak RSS halves (pg-bench 62-66 -> 33 MB, mongo-bench
    // 62 -> 31 MB) at the same or lower CPU per event (docs/benchmarks.md).
    // SAFETY: prctl with PR_SET_THP_DISABLE only sets a flag of this process.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: setting an allocator option is allowed at any time; it only changes when
        // freed memory is returned to the OS.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
    }
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
        Command::Quickstart(args) => quickstart::run(&args),
        Command::Completions { shell } => {
            cli::write_completions(shell, &mut std::io::stdout());
            Ok(())
        }
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
