//! Real database servers for tests: [`PostgresServer`], [`MariaDbServer`] and [`MongoServer`]
//! (SecantusDB, a MongoDB-wire-compatible server), an S3-compatible object store
//! ([`S3Server`], s3s-fs), plus the
//! [`HarnessError`] they report.
//!
//! Invariants:
//!
//! * a server handle exists only for a server that has accepted a connection on its port;
//!   every failure to get there is a [`HarnessError`] whose message is enough to act on (what
//!   to install, which command failed, the tail of the server log);
//! * a server handle owns its process and its temporary directory: dropping it stops the
//!   process, then removes the directory;
//! * servers never share ports, directories, sockets or (MariaDB) server ids with another live
//!   server of the same process.

mod mariadb;
mod mongo;
mod postgres;
mod s3;
mod support;

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

pub use mariadb::MariaDbServer;
pub use mongo::{MongoOptions, MongoServer};
pub use postgres::PostgresServer;
pub use s3::{S3Server, S3_ACCESS_KEY, S3_SECRET_KEY};

/// Everything that can go wrong while starting or using a test server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// A server binary is not installed (or not where we look).
    #[error(
        "{what} not found (looked for {names} in: {searched}); install it with `{install_hint}`"
    )]
    BinaryNotFound {
        /// What was looked for, e.g. "PostgreSQL server binaries".
        what: &'static str,
        /// The executable names tried.
        names: String,
        /// The directories searched, in order.
        searched: String,
        /// The command that installs the missing binaries (Debian).
        install_hint: &'static str,
    },

    /// The server refuses to run as root and no unprivileged account exists to run it as.
    #[error(
        "{server} cannot run as root and none of the users {tried} exists to run it as; \
         create one (e.g. `apt-get install -y postgresql` creates `postgres`)"
    )]
    NoUnprivilegedUser {
        /// The server that needs an unprivileged account.
        server: &'static str,
        /// The account names tried.
        tried: String,
    },

    /// A filesystem or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A helper command (e.g. `initdb`) exited unsuccessfully.
    #[error("`{command}` failed ({status}); its output:\n{output}")]
    CommandFailed {
        /// The command line.
        command: String,
        /// How it exited.
        status: ExitStatus,
        /// Its stdout and stderr.
        output: String,
    },

    /// The server process exited before it accepted connections.
    #[error("{server} exited during startup ({status}); last lines of {}:\n{log_tail}", log.display())]
    ServerExited {
        /// Which server.
        server: &'static str,
        /// How it exited.
        status: ExitStatus,
        /// Its log file.
        log: PathBuf,
        /// The last lines of its log file.
        log_tail: String,
    },

    /// The server did not accept connections in time.
    #[error(
        "{server} did not accept connections on 127.0.0.1:{port} within {timeout:?}; \
         last lines of {}:\n{log_tail}",
        log.display()
    )]
    StartupTimeout {
        /// Which server.
        server: &'static str,
        /// The port it was asked to listen on.
        port: u16,
        /// How long we waited.
        timeout: Duration,
        /// Its log file.
        log: PathBuf,
        /// The last lines of its log file.
        log_tail: String,
    },

    /// Every port tried was taken by someone else by the time the server bound it.
    #[error(
        "{server} could not listen on a free port after {attempts} attempts \
         (ports were taken between choosing and binding them); last lines of {}:\n{log_tail}",
        log.display()
    )]
    NoFreePort {
        /// Which server.
        server: &'static str,
        /// How many ports were tried.
        attempts: u32,
        /// Its log file.
        log: PathBuf,
        /// The last lines of its log file.
        log_tail: String,
    },

    /// A database name a helper was given is not a plain identifier.
    #[error("invalid database name {name:?}: use 1 to 63 ASCII letters, digits or `_`")]
    InvalidDatabaseName {
        /// The rejected name.
        name: String,
    },

    /// A PostgreSQL client operation failed.
    #[error("PostgreSQL client error: {0}")]
    Postgres(#[from] tokio_postgres::Error),

    /// A MariaDB client operation failed.
    #[error("MariaDB client error: {0}")]
    MariaDb(#[from] mysql_async::Error),
}

impl HarnessError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        HarnessError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Checks that `name` is a plain identifier (so it can be quoted trivially and used unquoted
/// in connection strings and URLs).
pub(crate) fn check_database_name(name: &str) -> Result<(), HarnessError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(HarnessError::InvalidDatabaseName {
            name: name.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binaries_say_how_to_install_them() {
        let err = HarnessError::BinaryNotFound {
            what: "PostgreSQL server binaries",
            names: "initdb and postgres".to_owned(),
            searched: "/usr/bin".to_owned(),
            install_hint: "apt-get install -y postgresql",
        };
        let message = err.to_string();
        assert!(
            message.contains("`apt-get install -y postgresql`"),
            "{message}"
        );
        assert!(message.contains("/usr/bin"), "{message}");
    }

    #[test]
    fn database_names_are_plain_identifiers() {
        assert!(check_database_name("app_1").is_ok());
        for bad in ["", "a b", "a\"b", "a`b", "ä", &"x".repeat(64)] {
            assert!(check_database_name(bad).is_err(), "{bad:?} accepted");
        }
    }
}
