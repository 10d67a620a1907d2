//! `headwater-log`: the embedded partitioned log. It knows bytes, not events.
//!
//! - [`batch`]: Kafka's RecordBatch v2 format (what is stored on disk and served to Kafka
//!   clients), with CRC-32C and all Kafka compression codecs;
//! - [`partitioner`]: Kafka's default partitioner (murmur2), so keys land where Kafka puts them;
//! - [`segment`] and [`index`]: segment files with sparse offset and time indexes;
//! - [`partition`]: a partition's segments, appends, rolls, reads and tail recovery;
//! - [`txn`]: transaction state, aborted ranges and the last stable offset;
//! - [`cleaner`]: retention by time and size, and compaction with a crash-safe segment swap;
//! - [`clock`]: the time source (a fake one for tests);
//! - [`log`]: topics, group commit with one flusher thread, high watermarks, readers, lock
//!   file, the cleaner thread.
//!
//! See `docs/log.md` for the format and the guarantees.

pub mod batch;
pub mod cleaner;
pub mod clock;
pub mod config;
pub mod index;
pub mod log;
pub mod lz4_repeats;
pub mod partition;
pub mod partitioner;
pub mod segment;
pub mod txn;
pub mod varint;

pub use batch::{
    encode_record_headers, BatchBuilder, Compression, DecodedBatch, HeaderPart, ProducerFields,
    RecordHeader, RecordView,
};
pub use cleaner::CleanerStats;
pub use clock::{Clock, FakeClock, SystemClock};
pub use config::{CleanupPolicy, FlushPolicy, LogOptions, TopicCompression, TopicConfig};
pub use log::{
    AppendResult, CommitTicket, Isolation, Log, LogError, OwnedRecord, ReadResult, Transaction,
};
pub use partitioner::{murmur2, partition_for_key, Partitioner};
pub use txn::AbortedTxn;
