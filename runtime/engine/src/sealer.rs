//! The log side of a source task, on a thread of its own: it seals staged batches (compression
//! and CRC), appends them to the task's open log transaction and commits transactions, while
//! the task's runner goes on transforming and converting the next records.
//!
//! Invariants:
//! - commands are carried out in the order they were sent: a transaction's batches are
//!   appended in that order, and its commit runs after all of them;
//! - a commit's outcome is reported only once the transaction is durable (or failed), and
//!   outcomes arrive in commit order; a commit's `on_durable` runs only after it is durable;
//! - after a failed append, the rest of that transaction is discarded (aborted) and its commit
//!   reports the failure, so a transaction is never committed with a batch missing;
//! - when the runner goes away (its sender dropped), an open transaction is aborted and the
//!   thread ends; [`Sealer::close`] waits for that, so a restarted task never races the old
//!   transaction's abort markers.

use std::sync::mpsc as std_mpsc;
use std::sync::Mutex;
use std::thread::JoinHandle;

use headwater_log::batch::BatchBuilder;
use headwater_log::{LogError, Transaction};
use tokio::sync::{mpsc, oneshot};

/// Commands buffered between the runner and the sealer (a batch is up to ~256 KiB): the runner
/// waits when the sealer is this far behind.
pub const QUEUE_DEPTH: usize = 8;

/// What the runner asks of the sealer.
pub enum Command {
    /// The transaction the following batches belong to.
    Begin(Transaction),
    /// Seal `builder` and append it to the open transaction.
    Append {
        topic: String,
        partition: u32,
        builder: BatchBuilder,
    },
    /// Commit the open transaction; once it is durable `on_durable` runs (on the sealer
    /// thread, so what it records is current even while the runner waits in a poll), then the
    /// outcome goes to `done`.
    Commit {
        on_durable: Box<dyn FnOnce() + Send>,
        done: oneshot::Sender<Result<(), LogError>>,
    },
}

/// The runner's handle on its sealer thread.
pub struct Sealer {
    commands: Option<mpsc::Sender<Command>>,
    /// Emptied record buffers of sealed builders, for reuse (behind a lock only to be `Sync`;
    /// the runner is its one user).
    recycled: Mutex<std_mpsc::Receiver<Vec<u8>>>,
    thread: Option<JoinHandle<()>>,
}

impl Sealer {
    /// Starts the sealer thread of one task.
    pub fn start(name: String) -> std::io::Result<Sealer> {
        let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
        let (recycle_tx, recycled) = std_mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || run(rx, recycle_tx))?;
        Ok(Sealer {
            commands: Some(tx),
            recycled: Mutex::new(recycled),
            thread: Some(thread),
        })
    }

    /// Sends a command, waiting while the sealer is [`QUEUE_DEPTH`] batches behind. Fails only
    /// when the sealer thread is gone.
    pub async fn send(&self, command: Command) -> Result<(), SealerGone> {
        match &self.commands {
            Some(tx) => tx.send(command).await.map_err(|_| SealerGone),
            None => Err(SealerGone),
        }
    }

    /// A record buffer of an earlier sealed batch, when one came back.
    pub fn recycled_buffer(&self) -> Option<Vec<u8>> {
        self.recycled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .try_recv()
            .ok()
    }

    /// Ends the sealer: an open transaction is aborted. Returns once the thread is gone.
    pub async fn close(mut self) {
        self.commands = None;
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

/// The sealer thread is gone (it panicked); the task must restart.
#[derive(Debug)]
pub struct SealerGone;

fn run(mut commands: mpsc::Receiver<Command>, recycle: std_mpsc::Sender<Vec<u8>>) {
    let mut open: Option<Transaction> = None;
    let mut failure: Option<LogError> = None;
    let mut scratch = Vec::new();
    while let Some(command) = commands.blocking_recv() {
        match command {
            Command::Begin(txn) => {
                // An unfinished earlier transaction is aborted when dropped.
                open = Some(txn);
                failure = None;
            }
            Command::Append {
                topic,
                partition,
                builder,
            } => match (&mut open, &failure) {
                (Some(txn), None) => {
                    match txn.append_builder_reusing(&topic, partition, builder, &mut scratch) {
                        Ok((_, records)) => {
                            let _ = recycle.send(records);
                        }
                        Err(e) => failure = Some(e),
                    }
                }
                (None, None) => {
                    failure = Some(LogError::InvalidBatch(
                        headwater_log::batch::BatchError::Corrupt(
                            "internal: a batch without a transaction".into(),
                        ),
                    ))
                }
                (_, Some(_)) => {}
            },
            Command::Commit { on_durable, done } => {
                let outcome = match (open.take(), failure.take()) {
                    (_, Some(e)) => Err(e),
                    (Some(txn), None) => txn.commit(),
                    (None, None) => Ok(()),
                };
                if outcome.is_ok() {
                    on_durable();
                }
                let _ = done.send(outcome);
            }
        }
    }
    // The runner is gone: an open transaction is aborted by its drop.
    drop(open);
}
