//! [`PostgresSourceTask`]: snapshot then stream, with Debezium's events and offsets.
//!
//! Lifecycle: `start` validates the configuration, checks the server (`wal_level`), manages the
//! publication and the slot, and decides from the committed offsets whether to snapshot.
//! A snapshot reads every captured table with `COPY ... TO STDOUT (FORMAT binary)` inside a
//! transaction that imported the slot's exported snapshot (or, when the slot already exists, the
//! snapshot of a temporary slot whose consistent point becomes the streaming start). Streaming
//! reads the slot through the replication client; a reader task pushes messages into a bounded
//! channel and answers keepalives, a ticker sends standby status updates even while the engine
//! applies backpressure. An `execute-snapshot` signal (a row inserted into
//! `signal.data.collection`) stops the stream at its transaction's commit, copies the tables it
//! names like a resumed snapshot (a temporary slot's snapshot, skip regions for the stream) and
//! streams on from the end of the signal's transaction.
//!
//! Durability invariants:
//! - the flush position sent to the server (`Shared::durable`) only moves forward, and only to
//!   (a) the `lsn_proc` of offsets passed to [`SourceTask::commit`], (b) the end of a
//!   transaction that produced no records when nothing handed out is still uncommitted, or
//!   (c) a keepalive position when every message received so far is in such a durable state
//!   and no transaction is open; with `lsn.flush.mode=manual` nothing is ever confirmed;
//! - the last record of each source transaction is held back until its Commit arrives, so the
//!   record that closes a `Boundary::Commit` batch carries the transaction's end LSN as
//!   `lsn_proc` (the position streaming resumes from); the other records of a transaction
//!   carry no offset (the engine commits only at boundaries, so only that one is ever stored);
//! - every record of a source transaction is returned before a batch with `Boundary::Commit`;
//! - a signal's request is in the offsets from its transaction's commit until its copy ends,
//!   and the slot is not confirmed past the signal before the request is in an offset.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use headwater_api::plugin::{BoxFuture, SourceBatch, SourceTask, SourceTaskContext};
use headwater_api::{
    ConnectError, OffsetMap, OffsetValue, Properties, Schema, SchemaBuilder, SchemaRef,
    SourceRecord, Struct, Value,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_postgres::Client;

use headwater_connector_common::context_headers::ContextHeaders;
use headwater_connector_common::heartbeat::Heartbeats;
use headwater_connector_common::signal::{self as signals, SnapshotRequest};
use headwater_connector_common::signal_file::{self, FileSignals};
use headwater_connector_common::txmeta::TransactionMetadata;

use crate::catalog::{self, quote_ident, quote_literal, TypeRegistry};
use crate::config::{LsnFlushMode, PostgresConfig, PublicationAutocreate};
use crate::event::{ColumnDef, EventBuilder, RawColumn, SourceInfo, TableId, TableSchema};
use crate::incremental::{self, Progress, TableRequest, Window};
use crate::lsn::Lsn;
use crate::pgoutput::{self, Decoder, PgOutputMessage, Relation, TupleData, TupleValue};
use crate::replication::{
    ConnectOptions, PgError, ReplicationClient, ReplicationMessage, SnapshotAction, StatusWriter,
};
use crate::snapshot::{self as snapshots, Chunk, ChunkMsg, Readers, SkipRegion};
use crate::streamed::{Replay, StreamedTransactions};
use crate::types::ColumnType;
use headwater_connector_common::notification::{Notifier, TableScanStatus};
use headwater_connector_common::snapshot_policy::{
    hold_streaming, streaming_due, wait_snapshot_delay, LostPosition,
};

/// Header Debezium puts on the delete half of a primary-key change.
pub const NEWKEY_HEADER: &str = "__debezium.newkey";
/// Header Debezium puts on the create half of a primary-key change.
pub const OLDKEY_HEADER: &str = "__debezium.oldkey";

fn pg_err(context: &str, e: PgError) -> ConnectError {
    let transient = e.is_transient();
    let msg = format!("{context}: {e}");
    let err = match &e {
        PgError::NotSupported(_) => ConnectError::not_supported(msg),
        PgError::Auth(_) | PgError::Tls(_) => ConnectError::config(msg),
        _ if transient => ConnectError::retriable(msg),
        _ => ConnectError::fatal(msg),
    };
    err.with_cause(e)
}

fn streamed_err(at: Lsn, e: crate::streamed::StreamedError) -> ConnectError {
    use crate::streamed::StreamedError as E;
    let msg = format!("streamed transaction at {at}: {e}");
    match e {
        // A restart makes the server stream every open transaction again from its start.
        E::MissingStart { .. } | E::UnknownCommit { .. } | E::OutsideStream => {
            ConnectError::retriable(msg)
        }
        E::Io { .. } => ConnectError::retriable(msg),
        E::Truncated { .. } => ConnectError::fatal(msg),
    }
}

fn sql_err(context: &str, e: tokio_postgres::Error) -> ConnectError {
    let transient = e.is_closed()
        || e.as_db_error().is_none()
        || e.code().is_some_and(|c| {
            let c = c.code();
            c.starts_with("08") || c.starts_with("57P") || c == "53300"
        });
    let detail = match e.as_db_error() {
        Some(db) => format!(
            "{}: {} (SQLSTATE {})",
            db.severity(),
            db.message(),
            db.code().code()
        ),
        None => crate::sql_error_text(&e),
    };
    let msg = format!("{context}: {detail}");
    let err = if detail.contains("invalid peer certificate")
        || detail.contains("server does not support TLS")
    {
        // The certificate check database.sslmode asks for failed: retrying will not help.
        ConnectError::config(msg)
    } else if transient {
        ConnectError::retriable(msg)
    } else {
        ConnectError::fatal(msg)
    };
    err.with_cause(e)
}

/// State shared with the reader and ticker tasks.
struct Shared {
    /// The position confirmed to the server as flushed.
    durable: AtomicU64,
    /// The last WAL end the server reported.
    received: AtomicU64,
    /// The position of the last complete item (transaction or message) the reader pushed.
    pushed: AtomicU64,
    manual: bool,
}

impl Shared {
    fn flush_lsn(&self) -> Lsn {
        if self.manual {
            Lsn::INVALID
        } else {
            Lsn(self.durable.load(Ordering::SeqCst))
        }
    }
    async fn send_status(&self, w: &StatusWriter) -> Result<(), PgError> {
        let flush = self.flush_lsn();
        let received = Lsn(self.received.load(Ordering::SeqCst)).max(flush);
        w.send_status(received, flush, flush).await
    }
}

enum StreamItem {
    /// Consecutive XLogData messages (start position, pgoutput message).
    Data(Vec<(Lsn, Bytes)>),
    Failed(PgError),
    Ended,
}

struct Stream {
    rx: mpsc::Receiver<StreamItem>,
    /// The rest of the last chunk taken from `rx`, in order.
    received: std::collections::VecDeque<(Lsn, Bytes)>,
    status: StatusWriter,
    reader: JoinHandle<()>,
    ticker: JoinHandle<()>,
    decoder: Decoder,
    /// Streamed in-progress transactions buffered until they end.
    streamed: StreamedTransactions,
    /// A committed streamed transaction being handed out.
    replay: Option<StreamReplay>,
}

/// A committed streamed transaction whose messages are handed out over several polls.
struct StreamReplay {
    messages: Replay,
    /// Decodes the replayed messages (stored without their xid, as outside a stream).
    decoder: Decoder,
    /// The StreamCommit that ends it and where it was received.
    commit: PgOutputMessage,
    commit_at: Lsn,
}

/// A snapshot in progress (see [`crate::snapshot`]).
struct Snapshot {
    tables: Arc<Vec<Arc<TableSchema>>>,
    chunks: Arc<Vec<Chunk>>,
    readers: Readers,
    /// The chunk being drained.
    current: Option<(usize, mpsc::Receiver<ChunkMsg>)>,
    /// Rows of the current batch not handed out yet, and their table.
    rows: std::vec::IntoIter<Struct>,
    row_table: usize,
    /// The envelope time of the current batch's events (µs, ns), read when it arrived.
    batch_now: (i64, i64),
    /// One record of look-ahead, to mark the last one of a table and of the snapshot.
    pending: Option<(usize, bool, Struct)>,
    /// Per table: whether its first row was seen, rows handed out, rows estimated.
    seen: Vec<bool>,
    rows_done: Vec<u64>,
    estimated: Vec<u64>,
    /// The same progress, for the engine's status and metrics.
    progress: headwater_api::SnapshotProgress,
    /// The table whose copy was last notified as in progress.
    announced: Option<usize>,
    /// Tables every row of which was handed out (`schema.table`), and as JSON.
    done: Vec<String>,
    done_json: String,
    /// Per table, the `source` block of its records marked `snapshot: true` (built once).
    source_blocks: Vec<Option<Struct>>,
    /// Regions re-read by resumed snapshots, as JSON (kept until streaming passes them).
    skips: Vec<SkipRegion>,
    skips_json: Option<String>,
    /// Where streaming starts (the slot's position when this snapshot was first started).
    lsn: Lsn,
    tx_id: Option<i64>,
    ts_us: i64,
    /// A signalled snapshot's request as JSON (`snapshot_signal` in its offsets).
    signal: Option<String>,
    /// An incremental snapshot's progress when this one started (`incremental_snapshot`).
    incremental: Option<String>,
    then_stream: bool,
    started: Instant,
}

/// What [`Inner::begin_snapshot`] starts.
struct SnapshotStart<'a> {
    /// The offset of an unfinished snapshot of the same kind, to resume after its last row.
    resume: Option<&'a OffsetMap>,
    /// A signal's request: only the tables it names, through its conditions.
    signal: Option<SnapshotRequest>,
    /// Where streaming starts after a signalled snapshot: the end of the signal's transaction.
    stream_from: Option<Lsn>,
    /// Regions of earlier snapshots the stream has not passed yet.
    skips: Vec<SkipRegion>,
    /// Whether the connector's slot exists (else the snapshot creates it and reads its
    /// exported snapshot; if it exists, a temporary slot's).
    slot_exists: bool,
    then_stream: bool,
}

/// How long a signal's condition is tried before its snapshot starts.
const SIGNAL_CONDITION_PROBE: Duration = Duration::from_secs(5);

/// What the offset after a snapshot record says (computed for the last record of a batch).
struct SnapshotTail {
    table: usize,
    /// The record's integer key, when its table is read in key order.
    key: Option<i64>,
    /// Whether it is the last record of the snapshot.
    last: bool,
    /// How many tables (of `Snapshot::done`) were completely handed out before it.
    tables_done: usize,
}

/// An open source transaction.
struct Txn {
    xid: u32,
    commit_lsn: Lsn,
    begin_lsn: Lsn,
    ts_us: i64,
    records: usize,
    /// The execute-snapshot signals inserted in this transaction, merged into one request.
    signal: Option<SnapshotRequest>,
}

/// A captured relation: its schema and, per captured column, its tuple index.
type CapturedRelation = (Arc<TableSchema>, Arc<[usize]>);

/// What the stream knows about one relation id.
struct RelState {
    table: Option<Arc<TableSchema>>,
    /// For each captured column, its index in the relation's tuples (shared with every
    /// change being decoded, so looking a relation up per change allocates nothing).
    col_map: Arc<[usize]>,
}

enum Phase {
    Snapshot(Box<Snapshot>),
    Streaming,
    /// The snapshot taken at start has finished; streaming begins at this instant
    /// (`streaming.delay.ms`).
    StreamingAt(Instant),
    /// Snapshot-only mode finished: nothing more to do.
    Done,
}

struct Inner {
    /// Where the snapshot's progress is reported (the engine's status and metrics).
    progress: headwater_api::SnapshotProgress,
    /// Debezium's notifications (`notification.enabled.channels`).
    notes: Notifier,
    /// Where the task says what it waits for (slot creation blocked by open transactions).
    waiting: headwater_api::TaskWaiting,
    /// Set when the task is asked to stop while it starts (ends `snapshot.delay.ms`).
    stop: headwater_api::StopRequest,
    cfg: PostgresConfig,
    sql: Client,
    sql_conn: JoinHandle<()>,
    types: TypeRegistry,
    events: EventBuilder,
    message_schemas: (SchemaRef, SchemaRef, SchemaRef),
    schemas: HashMap<TableId, Arc<TableSchema>>,
    /// What each relation OID of this replication session decodes to. Entries of relations
    /// dropped from the catalog are removed (see [`DroppedRelations`]), so tables created and
    /// dropped over months do not pile up.
    relations: HashMap<u32, RelState>,
    dropped: DroppedRelations,
    phase: Phase,
    shared: Arc<Shared>,
    stream: Option<Stream>,
    /// A replication connection kept from slot creation for START_REPLICATION.
    repl: Option<ReplicationClient>,
    start_lsn: Lsn,
    /// The last record of the open transaction and its LSN (its offset is built at Commit).
    held: Option<(SourceRecord, Lsn)>,
    txn: Option<Txn>,
    last_end: Lsn,
    processed_pos: Lsn,
    last_handed_proc: Lsn,
    committed_proc: Lsn,
    next_heartbeat: Option<Instant>,
    /// `heartbeat.interval.ms` > 0: heartbeat records between transactions.
    heartbeats: Option<Heartbeats>,
    /// `provide.transaction.metadata`: BEGIN/END records and transaction blocks.
    txmeta: Option<TransactionMetadata>,
    /// Regions re-read by a resumed snapshot whose older changes the stream skips.
    skips: Vec<SkipRegion>,
    /// The source block of the last event: ((its transaction's begin LSN, xid, commit time),
    /// table, block). Events of one transaction and table differ only in `sequence` and `lsn`.
    source_cache: Option<((Lsn, u32, i64), TableId, Struct)>,
    /// An execute-snapshot request whose transaction has ended: the stream stops there and
    /// the snapshot runs at the next poll. While it is set, stream offsets carry it
    /// (`snapshot_signal`), so a restart runs it.
    pending_signal: Option<SnapshotRequest>,
    /// An incremental snapshot under way (see [`crate::incremental`]); stream offsets carry it.
    incremental: Option<Progress>,
    /// Its chunk read between watermarks, until the stream reaches the close watermark.
    window: Option<Window>,
    /// The incremental snapshot changed since an offset handed out last carried it: until one
    /// does, no position past the change is confirmed to the server.
    incremental_dirty: bool,
    /// Chunks read by this task (part of each chunk id).
    chunks_read: u64,
    /// The file signal channel, when enabled.
    file_signals: Option<FileSignals>,
    /// The transactions the stream handed out last: a chunk whose read did not see one of
    /// them is read again later.
    recent_xids: incremental::RecentXids,
    /// No chunk is read before then (the last one was read too early, see `recent_xids`).
    chunk_retry_at: Option<Instant>,
}

/// What reading an incremental snapshot's chunk came to.
enum ChunkOutcome {
    /// A chunk waits in the window for its close watermark.
    Held,
    /// The table has no rows left (or is skipped, the status says why): the next one starts.
    TableDone(TableScanStatus),
    /// The incremental snapshot cannot go on (see the log).
    Abandoned,
    /// The chunk was read too early and is read again at a later poll.
    Later,
}

/// The offset key of an incremental snapshot's progress ([`Progress::to_json`]).
const INCREMENTAL_OFFSET: &str = "incremental_snapshot";

/// How often the stream looks for relations dropped from the catalog, and after how many new
/// relations it looks sooner.
const DROPPED_RELATIONS_INTERVAL: Duration = Duration::from_secs(600);
const DROPPED_RELATIONS_GROWTH: usize = 1_000;

/// When to look for dropped relations, and the ones found, waiting for the stream to pass the
/// WAL position read with them: changes of a dropped relation all committed before its DROP,
/// which committed before that position, so once a commit at or after it is decoded none can
/// follow in this session. (A relation re-created with the same OID gets a new Relation
/// message first, as pgoutput announces a relation again after its invalidation.)
struct DroppedRelations {
    last_check: Instant,
    /// The number of relations known at the last check.
    known_then: usize,
    pending: Option<(Vec<u32>, Lsn)>,
}

impl DroppedRelations {
    fn new() -> DroppedRelations {
        DroppedRelations {
            last_check: Instant::now(),
            known_then: 0,
            pending: None,
        }
    }

    /// Whether to look now, with `known` relations: none pending, and the interval passed or
    /// [`DROPPED_RELATIONS_GROWTH`] relations came since the last look.
    fn due(&self, known: usize) -> bool {
        self.pending.is_none()
            && known > 0
            && (self.last_check.elapsed() >= DROPPED_RELATIONS_INTERVAL
                || known >= self.known_then + DROPPED_RELATIONS_GROWTH)
    }

    /// Records a look: `gone` relations were missing from the catalog at WAL position `at`
    /// (invalid: unknown, and nothing is forgotten).
    fn checked(&mut self, gone: Vec<u32>, at: Lsn, known: usize) {
        self.last_check = Instant::now();
        self.known_then = known;
        if !gone.is_empty() && at.is_valid() {
            self.pending = Some((gone, at));
        }
    }

    /// A Relation message for `id`: it is not to be forgotten (its OID was reused).
    fn announced(&mut self, id: u32) {
        if let Some((ids, _)) = self.pending.as_mut() {
            ids.retain(|pending| *pending != id);
        }
    }

    /// The relations to forget at a commit ending at `end_lsn`, when it is past their mark.
    fn ready(&mut self, end_lsn: Lsn) -> Option<Vec<u32>> {
        match &self.pending {
            Some((_, at)) if end_lsn >= *at => self
                .pending
                .take()
                .map(|(ids, _)| ids)
                .filter(|ids| !ids.is_empty()),
            _ => None,
        }
    }
}

/// The PostgreSQL source task.
#[derive(Default)]
pub struct PostgresSourceTask {
    inner: Option<Box<Inner>>,
}

impl PostgresSourceTask {
    pub fn new() -> Self {
        PostgresSourceTask::default()
    }
}

fn connect_options(cfg: &PostgresConfig, suffix: &str) -> ConnectOptions {
    ConnectOptions {
        host: cfg.hostname.clone(),
        port: cfg.port,
        user: cfg.user.clone(),
        password: cfg.password.clone(),
        dbname: cfg.dbname.clone(),
        application_name: format!("headwater-{}{suffix}", cfg.topic_prefix),
        tls: cfg.tls.clone(),
        connect_timeout: cfg.connect_timeout,
    }
}

async fn connect_sql(cfg: &PostgresConfig) -> Result<(Client, JoinHandle<()>), ConnectError> {
    let mut pc = tokio_postgres::Config::new();
    pc.host(&cfg.hostname)
        .port(cfg.port)
        .user(&cfg.user)
        .dbname(&cfg.dbname)
        .application_name(format!("headwater-{}", cfg.topic_prefix))
        .connect_timeout(cfg.connect_timeout);
    if let Some(pw) = &cfg.password {
        pc.password(pw);
    }
    let (client, handle) = crate::tls::connect_sql(&pc, &cfg.tls)
        .await
        .map_err(|e| match e {
            crate::tls::SqlConnectError::Settings(m) => ConnectError::config(m),
            crate::tls::SqlConnectError::Sql(e) => sql_err(
                &format!(
                    "connecting to PostgreSQL at {}:{} (database.sslmode={})",
                    cfg.hostname,
                    cfg.port,
                    cfg.tls.mode.name()
                ),
                e,
            ),
        })?;
    for stmt in &cfg.initial_statements {
        client
            .batch_execute(stmt)
            .await
            .map_err(|e| sql_err(&format!("database.initial.statements {stmt:?}"), e))?;
    }
    Ok((client, handle))
}

/// `pg_replication_slots` row of our slot.
struct SlotRow {
    plugin: Option<String>,
    database: Option<String>,
    active_pid: Option<i32>,
    confirmed_flush: Option<Lsn>,
    lost: bool,
}

async fn read_slot(sql: &Client, name: &str) -> Result<Option<SlotRow>, ConnectError> {
    let row = sql
        .query_opt(
            "SELECT plugin::text, database::text, active_pid, confirmed_flush_lsn::text, \
             COALESCE(wal_status, '') = 'lost' FROM pg_replication_slots WHERE slot_name = $1",
            &[&name],
        )
        .await
        .map_err(|e| sql_err("reading pg_replication_slots", e))?;
    Ok(row.map(|r| SlotRow {
        plugin: r.get(0),
        database: r.get(1),
        active_pid: r.get(2),
        confirmed_flush: r.get::<_, Option<String>>(3).and_then(|s| s.parse().ok()),
        lost: r.get(4),
    }))
}

async fn slot_holder(sql: &Client, pid: i32) -> String {
    match sql
        .query_opt(
            "SELECT COALESCE(application_name, ''), COALESCE(client_addr::text, 'local') \
             FROM pg_stat_activity WHERE pid = $1",
            &[&pid],
        )
        .await
    {
        Ok(Some(r)) => {
            let app: String = r.get(0);
            let addr: String = r.get(1);
            format!("process {pid} (application_name {app:?}, client {addr})")
        }
        _ => format!("process {pid}"),
    }
}

fn offset_i64(o: &OffsetMap, k: &str) -> Option<i64> {
    match o.get(k)? {
        OffsetValue::Int(v) => Some(*v),
        OffsetValue::String(s) => s.parse().ok(),
        OffsetValue::Float(f) => Some(*f as i64),
        _ => None,
    }
}

fn offset_str<'a>(o: &'a OffsetMap, k: &str) -> Option<&'a str> {
    match o.get(k)? {
        OffsetValue::String(s) => Some(s),
        _ => None,
    }
}

fn offset_bool(o: &OffsetMap, k: &str) -> Option<bool> {
    match o.get(k)? {
        OffsetValue::Bool(b) => Some(*b),
        OffsetValue::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// Whether a committed offset says the snapshot is complete.
/// Whether a snapshot reader's error is the server refusing the statement or a value (SQLSTATE
/// class 42 or 22), not a failure a retry could mend.
fn refused_by_server(e: &ConnectError) -> bool {
    e.kind() == headwater_api::ErrorKind::Fatal
        && (e.message().contains("(SQLSTATE 22") || e.message().contains("(SQLSTATE 42"))
}

fn snapshot_completed(o: &OffsetMap) -> bool {
    if !o.contains_key("snapshot") {
        return true;
    }
    offset_bool(o, "snapshot_completed") == Some(true)
        || offset_bool(o, "last_snapshot_record") == Some(true)
}

fn message_schemas(
    binary: crate::types::BinaryMode,
    source: &SchemaRef,
) -> (SchemaRef, SchemaRef, SchemaRef) {
    let key = SchemaBuilder::struct_()
        .name("io.debezium.connector.postgresql.MessageKey")
        .version(1)
        .field("prefix", Schema::optional_string())
        .build_ref();
    let content = match binary {
        crate::types::BinaryMode::Bytes => SchemaBuilder::bytes().optional().build_ref(),
        _ => Schema::optional_string(),
    };
    let block = SchemaBuilder::struct_()
        .name("io.debezium.connector.postgresql.Message")
        .version(1)
        .field("prefix", Schema::optional_string())
        .field("content", content)
        .build_ref();
    let value = SchemaBuilder::struct_()
        .name("io.debezium.connector.postgresql.MessageValue")
        .version(1)
        .field("op", Schema::string())
        .field("ts_ms", Schema::optional_int64())
        .field("source", source.clone())
        .field("transaction", crate::event::transaction_schema())
        .field("message", block.clone())
        .build_ref();
    (key, block, value)
}

impl Inner {
    async fn start(context: SourceTaskContext, props: Properties) -> Result<Inner, ConnectError> {
        let cfg =
            PostgresConfig::parse(&props).map_err(|v| ConnectError::config(v.error_message()))?;
        if cfg.snapshot_fetch_size == 0 {
            return Err(ConnectError::config("snapshot.fetch.size must be positive"));
        }
        let (sql, sql_conn) = connect_sql(&cfg).await?;
        let wal_level: String = sql
            .query_one("SHOW wal_level", &[])
            .await
            .map_err(|e| sql_err("reading wal_level", e))?
            .get(0);
        if wal_level != "logical" {
            return Err(ConnectError::fatal(format!(
                "PostgreSQL runs with wal_level={wal_level}, but logical replication needs wal_level=logical: run ALTER SYSTEM SET wal_level = logical (or set it in postgresql.conf) and restart the server"
            )));
        }
        let mut events = EventBuilder::new(&cfg.topic_prefix, &cfg.dbname);
        events.context =
            ContextHeaders::from_props(&props, &cfg.topic_prefix, context.task_id, "postgresql");
        let msg_schemas = message_schemas(cfg.mapping.binary, &events.source_schema);
        let shared = Arc::new(Shared {
            durable: AtomicU64::new(0),
            received: AtomicU64::new(0),
            pushed: AtomicU64::new(0),
            manual: cfg.lsn_flush_mode == LsnFlushMode::Manual,
        });
        let mut inner = Inner {
            progress: context.snapshot_progress.clone(),
            notes: Notifier::from_props(&props, &cfg.topic_prefix),
            waiting: context.waiting.clone(),
            stop: context.stop.clone(),
            sql,
            sql_conn,
            types: TypeRegistry::new(),
            message_schemas: msg_schemas,
            schemas: HashMap::new(),
            relations: HashMap::new(),
            dropped: DroppedRelations::new(),
            phase: Phase::Streaming,
            shared,
            stream: None,
            repl: None,
            start_lsn: Lsn::INVALID,
            held: None,
            txn: None,
            last_end: Lsn::INVALID,
            processed_pos: Lsn::INVALID,
            last_handed_proc: Lsn::INVALID,
            committed_proc: Lsn::INVALID,
            next_heartbeat: None,
            heartbeats: Heartbeats::new(
                cfg.heartbeat_interval,
                &cfg.heartbeat_topic_prefix,
                &cfg.topic_prefix,
            ),
            txmeta: cfg
                .transaction_topic
                .as_deref()
                .map(|t| TransactionMetadata::new(&cfg.topic_prefix, t)),
            skips: Vec::new(),
            source_cache: None,
            pending_signal: None,
            incremental: None,
            window: None,
            incremental_dirty: false,
            chunks_read: 0,
            file_signals: FileSignals::from_props(&props),
            recent_xids: incremental::RecentXids::default(),
            chunk_retry_at: None,
            events,
            cfg,
        };
        inner.ensure_publication().await?;
        inner.check_signal_table().await?;
        let offset = context.offset(&inner.events.partition).cloned();
        inner.prepare(offset).await?;
        if inner.cfg.heartbeat_interval > Duration::ZERO
            && inner.cfg.heartbeat_action_query.is_some()
        {
            inner.next_heartbeat = Some(Instant::now() + inner.cfg.heartbeat_interval);
        }
        Ok(inner)
    }

    /// Tables the filters capture, in snapshot order.
    async fn captured_tables(&self) -> Result<Vec<(String, String)>, ConnectError> {
        let mut tables: Vec<(String, String)> =
            catalog::list_tables(&self.sql, self.cfg.publish_via_root)
                .await
                .map_err(|e| sql_err("listing tables", e))?
                .into_iter()
                .filter(|(s, t)| self.cfg.filters.table_included(s, t))
                .collect();
        tables.sort_by_key(|(s, t)| self.cfg.filters.snapshot_rank(s, t));
        Ok(tables)
    }

    async fn ensure_publication(&mut self) -> Result<(), ConnectError> {
        let name = &self.cfg.publication_name;
        let exists = self
            .sql
            .query_opt(
                "SELECT pubviaroot FROM pg_publication WHERE pubname = $1",
                &[name],
            )
            .await
            .map_err(|e| sql_err("reading pg_publication", e))?;
        let ident = quote_ident(name);
        let via_root = self.cfg.publish_via_root;
        let with = if via_root {
            " WITH (publish_via_partition_root = true)"
        } else {
            ""
        };
        if let Some(row) = &exists {
            let has: bool = row.get(0);
            if has != via_root {
                // Snapshot and stream must name partitions alike: a publication that
                // disagrees would stream under the names the snapshot did not use.
                let stmt = format!(
                    "ALTER PUBLICATION {ident} SET (publish_via_partition_root = {via_root})"
                );
                if self.cfg.publication_autocreate == PublicationAutocreate::Disabled {
                    return Err(ConnectError::config(format!(
                        "publication {name:?} has publish_via_partition_root = {has}, but publish.via.partition.root={via_root}: run {stmt} (publication.autocreate.mode=disabled leaves the publication to you)"
                    )));
                }
                tracing::info!(publication = %name, statement = %stmt, "managing publication");
                self.sql
                    .batch_execute(&stmt)
                    .await
                    .map_err(|e| sql_err(&format!("altering publication {name:?}"), e))?;
            }
        }
        let statement = match (self.cfg.publication_autocreate, exists.is_some()) {
            (PublicationAutocreate::Disabled, false) => {
                return Err(ConnectError::fatal(format!(
                    "publication {name:?} does not exist and publication.autocreate.mode=disabled: create it (CREATE PUBLICATION {ident} FOR ALL TABLES, or FOR TABLE ...) or change publication.autocreate.mode"
                )))
            }
            (PublicationAutocreate::Disabled, true) => None,
            (PublicationAutocreate::AllTables, false) => {
                Some(format!("CREATE PUBLICATION {ident} FOR ALL TABLES{with}"))
            }
            (PublicationAutocreate::NoTables, false) => {
                Some(format!("CREATE PUBLICATION {ident}{with}"))
            }
            (PublicationAutocreate::AllTables | PublicationAutocreate::NoTables, true) => None,
            (PublicationAutocreate::Filtered, exists) => {
                let tables = self.captured_tables().await?;
                if tables.is_empty() {
                    return Err(ConnectError::config(format!(
                        "publication.autocreate.mode=filtered, but no table matches the include/exclude lists, so publication {name:?} would be empty"
                    )));
                }
                let list: Vec<String> = tables
                    .iter()
                    .map(|(s, t)| format!("{}.{}", quote_ident(s), quote_ident(t)))
                    .collect();
                Some(if exists {
                    format!("ALTER PUBLICATION {ident} SET TABLE {}", list.join(", "))
                } else {
                    format!(
                        "CREATE PUBLICATION {ident} FOR TABLE {}{with}",
                        list.join(", ")
                    )
                })
            }
        };
        if let Some(stmt) = statement {
            tracing::info!(publication = %name, statement = %stmt, "managing publication");
            self.sql.batch_execute(&stmt).await.map_err(|e| {
                let hint = if e.code().is_some_and(|c| c.code() == "42501") {
                    " (the user needs to own the tables or be a superuser to create a publication; create it yourself and set publication.autocreate.mode=disabled)"
                } else {
                    ""
                };
                sql_err(&format!("creating publication {name:?}{hint}"), e)
            })?;
        }
        Ok(())
    }

    /// Gives up a signalled snapshot whose copy the server refused part-way (a condition that
    /// fails on some rows only, say: the trial before the copy saw none of them), so a bad
    /// signal cannot fail the task on every restart. The records handed out stay; streaming
    /// goes on after the signal, skipping changes only for the tables copied completely. A
    /// restart before a streamed offset is committed resumes the copy and gives it up again.
    async fn abandon_signalled_snapshot(
        &mut self,
        mut snap: Box<Snapshot>,
        error: ConnectError,
    ) -> Result<SourceBatch, ConnectError> {
        tracing::error!(error = %error.message(), request = snap.signal.as_deref().unwrap_or_default(), "execute-snapshot signal abandoned: the server refused part of its copy; streaming goes on after the signal");
        snap.progress.finish();
        self.notify_snapshot_failed(&snap);
        // The snapshot's transaction ends here too (catalog reads while streaming must not see
        // its old snapshot, and no lock or xmin stays held).
        self.sql
            .batch_execute("ROLLBACK")
            .await
            .map_err(|e| sql_err("ending the abandoned snapshot's transaction", e))?;
        let unfinished: Vec<String> = snap
            .tables
            .iter()
            .map(|t| t.id.to_string())
            .filter(|name| !snap.done.contains(name))
            .collect();
        let mut skips = std::mem::take(&mut snap.skips);
        skips.retain(|r| !unfinished.contains(&r.table));
        self.skips = skips;
        let from = snap.lsn;
        drop(snap);
        self.phase = Phase::Streaming;
        self.start_lsn = from;
        self.wait_for_slot_release().await?;
        self.start_streaming(false).await?;
        Ok(SourceBatch::empty())
    }

    /// Waits until no walsender holds the slot: the one this task closed for a signalled
    /// snapshot may still be exiting (START_REPLICATION would fail with 55006).
    async fn wait_for_slot_release(&self) -> Result<(), ConnectError> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match read_slot(&self.sql, &self.cfg.slot_name).await? {
                Some(s) if s.active_pid.is_some() && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Some(s) if s.active_pid.is_some() => {
                    return Err(ConnectError::retriable(format!(
                        "replication slot {:?} is still held by pid {:?} 30 s after the stream stopped",
                        self.cfg.slot_name, s.active_pid
                    )));
                }
                _ => return Ok(()),
            }
        }
    }

    /// With `signal.data.collection`: the table exists and the publication publishes it, or
    /// no signal could ever arrive.
    async fn check_signal_table(&self) -> Result<(), ConnectError> {
        let Some((schema, table)) = &self.cfg.filters.signal_table else {
            return Ok(());
        };
        let qualified = format!("{}.{}", quote_ident(schema), quote_ident(table));
        let row = self
            .sql
            .query_one(
                "SELECT to_regclass($1) IS NOT NULL, EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = $2 AND schemaname = $3 AND tablename = $4)",
                &[&qualified, &self.cfg.publication_name, schema, table],
            )
            .await
            .map_err(|e| sql_err("looking up the signal table", e))?;
        let (exists, published): (bool, bool) = (row.get(0), row.get(1));
        if !exists {
            return Err(ConnectError::config(format!(
                "signal.data.collection names {schema}.{table}, which does not exist: create it (CREATE TABLE {qualified} (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048))) or remove the key"
            )));
        }
        if !published {
            return Err(ConnectError::config(format!(
                "publication {:?} does not publish the signal table {schema}.{table}, so no signal would be read: ALTER PUBLICATION {} ADD TABLE {qualified}, or let the connector manage the publication (publication.autocreate.mode=filtered or all_tables)",
                self.cfg.publication_name,
                quote_ident(&self.cfg.publication_name)
            )));
        }
        if self.cfg.watermarks_deleted {
            let publishes_deletes: bool = self
                .sql
                .query_one(
                    "SELECT coalesce((SELECT pubdelete FROM pg_publication WHERE pubname = $1), true)",
                    &[&self.cfg.publication_name],
                )
                .await
                .map_err(|e| sql_err("reading the publication's operations", e))?
                .get(0);
            if !publishes_deletes {
                return Err(ConnectError::config(format!(
                    "incremental.snapshot.watermarking.strategy=INSERT_DELETE closes windows by deleting rows of the signal table, but publication {:?} does not publish deletes: ALTER PUBLICATION {} SET (publish = 'insert, update, delete, truncate'), or use INSERT_INSERT",
                    self.cfg.publication_name,
                    quote_ident(&self.cfg.publication_name)
                )));
            }
            // A table in a publication that publishes deletes refuses DELETE without a replica
            // identity (a primary key, by default).
            let identity = self
                .sql
                .query_one(
                    "SELECT c.relreplident::text, EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary) FROM pg_class c WHERE c.oid = to_regclass($1)",
                    &[&qualified],
                )
                .await
                .map_err(|e| sql_err("reading the signal table's replica identity", e))?;
            let (replident, has_key): (String, bool) = (identity.get(0), identity.get(1));
            if replident == "n" || (replident == "d" && !has_key) {
                return Err(ConnectError::config(format!(
                    "incremental.snapshot.watermarking.strategy=INSERT_DELETE deletes rows of the signal table {schema}.{table}, which has no replica identity, so PostgreSQL refuses deletes from it: give it a primary key on id (ALTER TABLE {qualified} ADD PRIMARY KEY (id)) or REPLICA IDENTITY FULL, or use INSERT_INSERT"
                )));
            }
        }
        Ok(())
    }

    async fn replication_client(&self, suffix: &str) -> Result<ReplicationClient, ConnectError> {
        let client = ReplicationClient::connect(&connect_options(&self.cfg, suffix))
            .await
            .map_err(|e| pg_err("opening a replication connection", e))?;
        if client.server_major_version().unwrap_or(0) < 14 {
            return Err(ConnectError::not_supported(format!(
                "PostgreSQL {} is not supported yet: Headwater reads pgoutput in binary mode, which needs PostgreSQL 14 or newer",
                client.parameter("server_version").unwrap_or("?")
            )));
        }
        Ok(client)
    }

    /// Decides between snapshot and streaming and sets everything up for the first poll.
    async fn prepare(&mut self, offset: Option<OffsetMap>) -> Result<(), ConnectError> {
        let slot_name = self.cfg.slot_name.clone();
        let mut slot = read_slot(&self.sql, &slot_name).await?;
        if let Some(s) = &slot {
            if s.plugin.as_deref() != Some("pgoutput")
                || s.database.as_deref() != Some(self.cfg.dbname.as_str())
            {
                return Err(ConnectError::fatal(format!(
                    "replication slot {slot_name:?} exists but belongs to plugin {:?} on database {:?}; slot names are cluster-wide: choose another slot.name or drop that slot",
                    s.plugin, s.database
                )));
            }
            let mut tries = 0;
            while let Some(pid) = slot.as_ref().and_then(|s| s.active_pid) {
                if self.stop.is_requested() {
                    // Stopped while waiting for the slot: nothing was taken.
                    self.phase = Phase::Done;
                    return Ok(());
                }
                if tries >= self.cfg.slot_max_retries {
                    let holder = slot_holder(&self.sql, pid).await;
                    return Err(ConnectError::fatal(format!(
                        "replication slot {slot_name:?} is in use by {holder}; a slot can only be read by one client: stop the other connector or choose another slot.name"
                    )));
                }
                tries += 1;
                tracing::warn!(slot = %slot_name, pid, "slot is active, retrying");
                tokio::time::sleep(self.cfg.slot_retry_delay).await;
                slot = read_slot(&self.sql, &slot_name).await?;
            }
        }
        // A signalled snapshot due or under way: its request is in the offset (the initial
        // snapshot was complete before any signal was read).
        let signal = offset.as_ref().and_then(|o| {
            let text = offset_str(o, "snapshot_signal")?;
            if o.contains_key("snapshot") && snapshot_completed(o) {
                return None;
            }
            match SnapshotRequest::from_json(text) {
                Ok(r) => Some((o, r)),
                Err(e) => {
                    tracing::warn!(error = %e, request = text, "the offset's execute-snapshot request is unreadable; streaming on without it");
                    None
                }
            }
        });
        // An incremental request read before the stop is started again while streaming; a
        // blocking one runs (or resumes) as a snapshot below.
        let (mut signal, mut incremental_request) = match signal {
            Some((o, r)) if r.incremental && !o.contains_key("snapshot_done") => {
                (None, Some((o, r)))
            }
            other => (other, None),
        };
        self.incremental = offset
            .as_ref()
            .and_then(|o| offset_str(o, INCREMENTAL_OFFSET))
            .and_then(|text| match Progress::from_json(text) {
                Ok(p) => Some(p),
                Err(e) => {
                    tracing::warn!(error = %e, progress = text, "the offset's incremental snapshot is unreadable; it is not resumed");
                    None
                }
            });
        if let Some(p) = &self.incremental {
            incremental::common::report(&self.progress, true, p.tables.len());
        }
        let completed = offset
            .as_ref()
            .is_some_and(|o| snapshot_completed(o) || o.contains_key("snapshot_signal"));
        let slot_usable = slot.as_ref().is_some_and(|s| !s.lost);
        let policy = self.cfg.snapshot_mode.policy();
        if completed && policy.done_after_snapshot() {
            // initial_only (or configuration_based without streaming) after its snapshot.
            self.notes.initial_skipped();
            self.phase = Phase::Done;
            return Ok(());
        }
        if completed && !slot_usable {
            let what = if slot.is_some() {
                "was invalidated (its WAL was removed)"
            } else {
                "does not exist"
            };
            match policy.lost_position {
                LostPosition::Fail => {
                    return Err(ConnectError::fatal(format!(
                        "replication slot {slot_name:?} {what}, but the connector has committed offsets: changes made since then cannot be read. Set snapshot.mode=when_needed to take a new snapshot, or delete the connector's offsets"
                    )));
                }
                LostPosition::Snapshot => {}
                LostPosition::StreamFromNow => {
                    tracing::warn!(
                        slot = %slot_name,
                        "replication slot {what}: the changes since the committed offset are lost; snapshot.on.data.error=true: streaming on from the server's current position"
                    );
                    // A signal pending in the offsets belonged to the lost stream; streaming
                    // starts afresh (a new slot) without it.
                    let dropped_signal = signal.take().is_some();
                    let dropped_incremental = incremental_request.take().is_some();
                    if dropped_signal || dropped_incremental {
                        tracing::warn!("an execute-snapshot signal pending in the offsets is dropped with the lost slot; send it again");
                    }
                }
            }
        }
        if let Some(s) = &slot {
            if s.lost {
                tracing::warn!(slot = %slot_name, "slot was invalidated; dropping it to take a new snapshot");
                self.sql
                    .execute("SELECT pg_drop_replication_slot($1)", &[&slot_name])
                    .await
                    .map_err(|e| sql_err("dropping the invalidated slot", e))?;
                slot = None;
            }
        }
        let need_snapshot = if completed {
            policy.every_start || (policy.lost_position == LostPosition::Snapshot && slot.is_none())
        } else {
            policy.without_offset
        };
        if need_snapshot {
            // An unfinished snapshot of ours resumes at its next unfinished row when the slot
            // (still at the position the snapshot started from) survived, or when no stream
            // follows (a task that does not stream reads through a temporary slot).
            let resume = offset
                .as_ref()
                .filter(|o| !snapshot_completed(o) && o.contains_key("snapshot_done"))
                .filter(|o| !o.contains_key("snapshot_signal"))
                .filter(|_| slot.is_some() || !policy.streams);
            let skips = resume
                .and_then(|o| offset_str(o, "snapshot_skip"))
                .map(snapshots::decode_skips)
                .unwrap_or_default();
            self.begin_snapshot(SnapshotStart {
                resume,
                signal: None,
                stream_from: None,
                skips,
                slot_exists: slot.is_some(),
                then_stream: policy.streams,
            })
            .await?;
        } else if let Some((o, request)) = incremental_request {
            // Streaming goes on from the signal's transaction; the request starts at once.
            self.skips = offset_str(o, "snapshot_skip")
                .map(snapshots::decode_skips)
                .unwrap_or_default();
            self.start_lsn = Lsn::from_i64(
                offset_i64(o, "lsn_proc")
                    .or_else(|| offset_i64(o, "lsn"))
                    .unwrap_or(0),
            )
            .max(
                slot.as_ref()
                    .and_then(|s| s.confirmed_flush)
                    .unwrap_or(Lsn::INVALID),
            );
            self.pending_signal = Some(request);
            self.phase = Phase::Streaming;
            self.start_streaming(true).await?;
        } else if let Some((o, request)) = signal {
            // A signalled snapshot was due or under way when the task stopped: it starts again
            // (or resumes at its next unfinished row), then streaming goes on after the signal.
            let resume = Some(o).filter(|o| o.contains_key("snapshot_done"));
            let stream_from = match resume {
                Some(_) => None,
                None => Some(Lsn::from_i64(
                    offset_i64(o, "lsn_proc")
                        .or_else(|| offset_i64(o, "lsn"))
                        .unwrap_or(0),
                )),
            };
            let skips = offset_str(o, "snapshot_skip")
                .map(snapshots::decode_skips)
                .unwrap_or_default();
            let start = SnapshotStart {
                resume,
                signal: Some(request),
                stream_from,
                skips,
                slot_exists: true,
                then_stream: true,
            };
            if resume.is_some()
                || self
                    .check_signal(start.signal.as_ref().expect("set"))
                    .await?
            {
                self.begin_snapshot(start).await?;
            } else {
                self.skips = start.skips;
                self.start_lsn = stream_from.unwrap_or(Lsn::INVALID).max(
                    slot.as_ref()
                        .and_then(|s| s.confirmed_flush)
                        .unwrap_or(Lsn::INVALID),
                );
                self.phase = Phase::Streaming;
                self.start_streaming(true).await?;
            }
        } else {
            let from_offset = offset
                .as_ref()
                .filter(|o| snapshot_completed(o))
                .and_then(|o| offset_i64(o, "lsn_proc").or_else(|| offset_i64(o, "lsn")))
                .map(Lsn::from_i64);
            self.start_lsn = match (&slot, from_offset) {
                (None, _) => {
                    let mut repl = self.replication_client("").await?;
                    tracing::info!(slot = %slot_name, "creating replication slot (waits for open transactions in the cluster)");
                    let created = self
                        .watching_slot_creation(
                            &slot_name,
                            repl.backend_pid(),
                            repl.create_slot(&slot_name, false, SnapshotAction::NoExport),
                        )
                        .await
                        .map_err(|e| slot_create_err(&slot_name, e))?;
                    self.repl = Some(repl);
                    created.consistent_point
                }
                (Some(s), off) => off
                    .unwrap_or(Lsn::INVALID)
                    .max(s.confirmed_flush.unwrap_or(Lsn::INVALID)),
            };
            self.skips = offset
                .as_ref()
                .and_then(|o| offset_str(o, "snapshot_skip"))
                .map(snapshots::decode_skips)
                .unwrap_or_default();
            self.phase = Phase::Streaming;
            self.start_streaming(true).await?;
        }
        // A resumed blocking (signalled) snapshot is not the initial one, which was skipped.
        if !need_snapshot && !matches!(self.phase, Phase::Snapshot(_)) {
            self.notes.initial_skipped();
        }
        Ok(())
    }

    /// Starts a snapshot: the initial one (every captured table), or a signal's (the tables it
    /// names, read on a temporary slot's exported snapshot while streaming goes on from before
    /// it, skipping the changes the copy already holds).
    async fn begin_snapshot(&mut self, start: SnapshotStart<'_>) -> Result<(), ConnectError> {
        // Before any slot or snapshot transaction is taken, so nothing is held meanwhile; a
        // stop meanwhile ends the wait and the task does nothing more.
        if start.signal.is_none()
            && !wait_snapshot_delay(self.cfg.start_delays.snapshot, &self.stop, &self.waiting).await
        {
            self.phase = Phase::Done;
            return Ok(());
        }
        let slot_name = self.cfg.slot_name.clone();
        let resume = start.resume.and_then(|o| Some((o, offset_i64(o, "lsn")?)));
        // A task that will not stream (initial_only, configuration_based without start.stream)
        // takes a temporary slot, as Debezium creates the slot only to stream: a permanent one
        // nobody reads would hold WAL for ever.
        let (lsn, snap_name, repl, temp) = if !start.slot_exists && start.then_stream {
            let mut repl = self.replication_client("").await?;
            let (lsn, name) = self.create_slot(&mut repl, &slot_name, false).await?;
            (lsn, name, repl, false)
        } else {
            let tmp = format!(
                "hw_snap_{}_{}",
                std::process::id(),
                Lsn(crate::replication::pg_now_micros() as u64).0 % 1_000_000_000
            );
            let mut repl = self.replication_client("-snapshot").await?;
            let (lsn, name) = self.create_slot(&mut repl, &tmp, true).await?;
            (lsn, name, repl, true)
        };
        let tx_id: Option<i64> = self
            .sql
            .query_one(
                "SELECT txid_snapshot_xmin(txid_current_snapshot())::bigint",
                &[],
            )
            .await
            .map_err(|e| sql_err("reading the snapshot transaction id", e))?
            .get(0);
        let mut done: Vec<String> = Vec::new();
        let mut skips = start.skips;
        let mut resume_at: Option<(String, Option<i64>)> = None;
        let mut stream_from = start.stream_from.unwrap_or(lsn);
        if let Some((o, from)) = resume {
            done = offset_str(o, "snapshot_done")
                .map(snapshots::decode_tables)
                .unwrap_or_default();
            resume_at = offset_str(o, "snapshot_table")
                .map(|t| (t.to_owned(), offset_i64(o, "snapshot_after")));
            stream_from = Lsn::from_i64(from);
        }
        let request = start.signal;
        let names = self.snapshot_tables(request.as_ref()).await?;
        if self.cfg.snapshot_lock_shared {
            self.lock_tables_shared(&names).await?;
        }
        let mut schemas = Vec::new();
        for (s, t) in names {
            if done.iter().any(|d| *d == format!("{s}.{t}")) {
                continue;
            }
            if let Some(ts) = self.table_schema_from_catalog(&s, &t).await? {
                if !ts.columns.is_empty() {
                    schemas.push(ts);
                }
            }
        }
        // Estimates first: snapshot.tables.order.by.row.count orders the tables by them.
        let mut sized = Vec::with_capacity(schemas.len());
        for ts in schemas {
            let size = snapshots::estimate_rows(&self.sql, &ts).await?;
            sized.push((ts, size));
        }
        let in_progress = |ts: &TableSchema| {
            resume_at
                .as_ref()
                .is_some_and(|(t, _)| *t == ts.id.to_string())
        };
        self.cfg.table_order.sort(
            &mut sized,
            |(_, (rows, _))| *rows,
            |(ts, _)| in_progress(ts),
        );
        let (schemas, sizes): (Vec<_>, Vec<_>) = sized.into_iter().unzip();
        // Streaming starts before the copy's position when the snapshot resumes or was
        // signalled: the changes the copy already holds are skipped then.
        let regions = resume.is_some() || request.is_some();
        let mut chunks = Vec::new();
        let mut estimated = Vec::with_capacity(schemas.len());
        for (i, ts) in schemas.iter().enumerate() {
            let name = ts.id.to_string();
            let after = resume_at
                .as_ref()
                .filter(|(t, _)| *t == name)
                .and_then(|(_, a)| *a)
                .filter(|_| snapshots::int_key(ts).is_some());
            let condition: Option<Arc<str>> = request
                .as_ref()
                .and_then(|r| r.condition(&name))
                .map(Arc::from);
            // The initial snapshot reads snapshot.select.statement.overrides where given.
            let source: Option<Arc<str>> = match &request {
                Some(_) => None,
                None => self
                    .cfg
                    .snapshot_overrides
                    .iter()
                    .find(|(t, _)| *t == name)
                    .map(|(_, sql)| Arc::from(sql.as_str())),
            };
            // A filtered copy holds only some rows: the stream cannot tell which of the
            // table's changes it already holds, so it skips none of them (changes to copied
            // rows made during the copy come out twice, as in Debezium).
            if regions && condition.is_none() && source.is_none() {
                skips.push(SkipRegion {
                    table: name.clone(),
                    after,
                    lsn,
                });
            }
            let (rows, pages) = sizes[i];
            estimated.push(rows);
            let mut planned = snapshots::plan_table(
                &self.sql,
                i,
                ts,
                after,
                rows,
                pages,
                self.cfg.snapshot_chunk_rows,
            )
            .await?;
            if source.is_some() && snapshots::int_key(ts).is_none() {
                // Page chunks filter on ctid, which an override's rows do not have.
                planned = vec![snapshots::Chunk {
                    table: i,
                    index: 0,
                    of: 1,
                    kind: snapshots::ChunkKind::Whole,
                    after: None,
                    condition: None,
                    source: None,
                }];
            }
            for chunk in &mut planned {
                chunk.condition = condition.clone();
                chunk.source = source.clone();
            }
            chunks.extend(planned);
        }
        let threads = self.cfg.snapshot_max_threads.clamp(1, chunks.len().max(1));
        let mut clients = Vec::with_capacity(threads);
        for _ in 0..threads {
            let (client, _conn) = connect_sql(&self.cfg).await?;
            client
                .batch_execute(&format!(
                    "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT {}",
                    quote_literal(&snap_name)
                ))
                .await
                .map_err(|e| sql_err("importing the snapshot into a reader", e))?;
            clients.push(client);
        }
        if temp {
            repl.close().await;
        } else {
            self.repl = Some(repl);
        }
        self.start_lsn = stream_from;
        let kind = if request.is_some() {
            "signalled"
        } else {
            "initial"
        };
        match &resume_at {
            Some((t, after)) => {
                tracing::info!(kind, tables = schemas.len(), chunks = chunks.len(), threads, lsn = %stream_from, snapshot_lsn = %lsn, resume_table = %t, resume_after = ?after, done = done.len(), "resuming snapshot")
            }
            None => {
                tracing::info!(kind, tables = schemas.len(), chunks = chunks.len(), threads, lsn = %stream_from, snapshot_lsn = %lsn, "starting snapshot")
            }
        }
        let tables = Arc::new(schemas);
        let chunks = Arc::new(chunks);
        let readers = Readers::start(
            clients,
            tables.clone(),
            chunks.clone(),
            self.cfg.mapping.clone(),
            self.cfg.unavailable_placeholder.clone(),
        );
        let n = tables.len();
        // `tables` are those still to copy; `done` were completed by an earlier run.
        self.progress.start(
            (n + done.len()) as u64,
            estimated.iter().sum(),
            done.len() as u64,
            0,
        );
        self.notes.initial_started();
        self.phase = Phase::Snapshot(Box::new(Snapshot {
            tables,
            chunks,
            readers,
            current: None,
            announced: None,
            rows: Vec::new().into_iter(),
            row_table: 0,
            batch_now: crate::event::now_micros_nanos(),
            pending: None,
            seen: vec![false; n],
            rows_done: vec![0; n],
            estimated,
            progress: self.progress.clone(),
            done_json: snapshots::encode_tables(&done),
            done,
            source_blocks: vec![None; n],
            skips_json: (!skips.is_empty()).then(|| snapshots::encode_skips(&skips)),
            skips,
            lsn: stream_from,
            tx_id,
            ts_us: crate::event::now_micros_nanos().0,
            signal: request.map(|r| r.to_json()),
            incremental: self.incremental.as_ref().map(Progress::to_json),
            then_stream: start.then_stream,
            started: Instant::now(),
        }));
        Ok(())
    }

    /// `snapshot.locking.mode=shared`: in the snapshot's transaction, before their definitions
    /// are read, takes ACCESS SHARE locks on the tables to copy (Debezium's statement), held
    /// until the snapshot ends: no ALTER or DROP of them runs meanwhile; reads and writes do.
    /// A lock not granted within `snapshot.lock.timeout.ms` is a retriable error.
    async fn lock_tables_shared(&self, tables: &[(String, String)]) -> Result<(), ConnectError> {
        if tables.is_empty() {
            return Ok(());
        }
        let list = tables
            .iter()
            .map(|(s, t)| format!("{}.{}", quote_ident(s), quote_ident(t)))
            .collect::<Vec<_>>()
            .join(", ");
        let statement = format!(
            "SET LOCAL lock_timeout = {}; LOCK TABLE {list} IN ACCESS SHARE MODE",
            self.cfg.snapshot_lock_timeout.as_millis()
        );
        tracing::info!(tables = tables.len(), timeout_ms = self.cfg.snapshot_lock_timeout.as_millis() as u64, "snapshot.locking.mode=shared: locking the tables against schema changes for the snapshot");
        match self.sql.batch_execute(&statement).await {
            Ok(()) => Ok(()),
            Err(e) if e.code().is_some_and(|c| c.code() == "55P03") => Err(ConnectError::retriable(format!(
                "snapshot.locking.mode=shared: the tables to snapshot could not be locked within snapshot.lock.timeout.ms ({} ms): a session holds an exclusive lock on one of them (a schema change?); retrying ({e})",
                self.cfg.snapshot_lock_timeout.as_millis()
            ))),
            Err(e) => Err(sql_err("locking the tables to snapshot (snapshot.locking.mode=shared)", e)),
        }
    }

    /// The tables a snapshot copies, in snapshot order: the captured tables
    /// `snapshot.include.collection.list` names (all by default), or those a signal names.
    /// The signal table itself is never copied (as in Debezium).
    async fn snapshot_tables(
        &self,
        request: Option<&SnapshotRequest>,
    ) -> Result<Vec<(String, String)>, ConnectError> {
        let mut tables = self.captured_tables().await?;
        tables.retain(|(s, t)| {
            let name = format!("{s}.{t}");
            !self.cfg.filters.is_signal_table(s, t)
                && match request {
                    Some(r) => r.names(&name),
                    None => self
                        .cfg
                        .snapshot_tables
                        .as_ref()
                        .is_none_or(|l| l.matches(&name)),
                }
        });
        Ok(tables)
    }

    /// Whether a signal's snapshot has anything to copy, and its conditions are SQL the server
    /// accepts for their tables (each tried with `LIMIT 1`, for at most 5 s). A refused
    /// request is logged and not acted on, so a bad signal cannot fail the task on every
    /// restart; other errors (a lost connection, say) are returned.
    async fn check_signal(&self, request: &SnapshotRequest) -> Result<bool, ConnectError> {
        let tables = self.snapshot_tables(Some(request)).await?;
        if tables.is_empty() {
            tracing::warn!(collections = ?request.collections, "execute-snapshot signal: no captured table matches the request; nothing to copy");
            return Ok(false);
        }
        for (s, t) in &tables {
            let name = format!("{s}.{t}");
            let Some(condition) = request.condition(&name) else {
                continue;
            };
            // (A partitioned root, captured with publish.via.partition.root, holds no rows of
            // its own: its partitions' are tried.)
            let only = if self.cfg.publish_via_root {
                ""
            } else {
                "ONLY "
            };
            let probe = format!(
                "SELECT 1 FROM {only}{}.{} WHERE ({condition}) LIMIT 1",
                quote_ident(s),
                quote_ident(t)
            );
            // One statement through the extended protocol (a condition holding a second
            // statement is a syntax error there), in a read-only transaction whose statement
            // timeout bounds the trial.
            self.sql
                .batch_execute(&format!(
                    "BEGIN READ ONLY; SET LOCAL statement_timeout = {}",
                    SIGNAL_CONDITION_PROBE.as_millis()
                ))
                .await
                .map_err(|e| sql_err("trying an execute-snapshot signal's condition", e))?;
            let tried = self.sql.query(probe.as_str(), &[]).await;
            self.sql
                .batch_execute("ROLLBACK")
                .await
                .map_err(|e| sql_err("trying an execute-snapshot signal's condition", e))?;
            let Err(e) = tried else {
                continue;
            };
            let code = e.code().map(|c| c.code().to_owned()).unwrap_or_default();
            if code == "57014" {
                // The statement timeout: the condition is valid SQL for the table.
                tracing::info!(table = %name, "execute-snapshot signal: the condition's trial did not end within 5 s; copying anyway");
            } else if code.starts_with("42") || code.starts_with("22") {
                // Syntax errors, unknown columns, permissions (42), bad values (22).
                tracing::warn!(table = %name, condition, error = %sql_err("", e), "execute-snapshot signal not acted on: its condition is refused by the server");
                return Ok(false);
            } else {
                return Err(sql_err("trying an execute-snapshot signal's condition", e));
            }
        }
        Ok(true)
    }

    /// Runs `create` (a CREATE_REPLICATION_SLOT on the walsender `pid`) while reporting what it
    /// waits for: the server builds the slot's starting snapshot only once every transaction
    /// that holds an xid has ended, so one forgotten `idle in transaction` session anywhere in the
    /// cluster stalls it. After [`SLOT_WAIT_REPORT_AFTER`] the blocking backends are logged and
    /// shown in the task status (`waiting`), refreshed while the wait lasts.
    async fn watching_slot_creation<T>(
        &self,
        name: &str,
        pid: Option<i32>,
        create: impl std::future::Future<Output = Result<T, PgError>>,
    ) -> Result<T, PgError> {
        let watch = async {
            let started = Instant::now();
            let mut last_logged: Option<(Instant, String)> = None;
            tokio::time::sleep(SLOT_WAIT_REPORT_AFTER).await;
            loop {
                if self.stop.is_requested() {
                    // A stop while the slot waits for old transactions: ending the replication
                    // session cancels the creation (a slot is kept only once created), and
                    // the creation then fails, which ends the start.
                    tracing::info!(slot = %name, "stop requested: cancelling the slot creation");
                    if let Some(pid) = pid {
                        let _ = self
                            .sql
                            .execute("SELECT pg_terminate_backend($1)", &[&pid])
                            .await;
                    }
                    std::future::pending::<()>().await;
                }
                let blockers = slot_blockers(&self.sql, pid).await;
                let reason = match &blockers {
                    Ok(b) if b.is_empty() => format!(
                        "creating replication slot {name:?}: the server is still building the slot's starting snapshot"
                    ),
                    Ok(b) => format!(
                        "creating replication slot {name:?} waits for {} open transaction(s) to end: {}",
                        b.len(),
                        b.join("; ")
                    ),
                    Err(e) => format!(
                        "creating replication slot {name:?} waits for open transactions to end (the blocking sessions could not be listed: {e})"
                    ),
                };
                self.waiting.set(reason.clone());
                let log_again = match &last_logged {
                    None => true,
                    Some((at, r)) => *r != reason || at.elapsed() >= Duration::from_secs(30),
                };
                if log_again {
                    tracing::warn!(
                        slot = %name,
                        waited_ms = started.elapsed().as_millis() as u64,
                        "{reason}"
                    );
                    last_logged = Some((Instant::now(), reason));
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        };
        let result = tokio::select! {
            r = create => r,
            _ = watch => unreachable!("the watch loop never ends"),
        };
        self.waiting.clear();
        result
    }

    /// Creates a slot exporting its snapshot and imports that snapshot into the SQL session.
    async fn create_slot(
        &mut self,
        repl: &mut ReplicationClient,
        name: &str,
        temporary: bool,
    ) -> Result<(Lsn, String), ConnectError> {
        tracing::info!(slot = %name, temporary, "creating replication slot (waits for open transactions in the cluster)");
        let pid = repl.backend_pid();
        let created = self
            .watching_slot_creation(
                name,
                pid,
                repl.create_slot(name, temporary, SnapshotAction::Export),
            )
            .await
            .map_err(|e| slot_create_err(name, e))?;
        let snap = created
            .snapshot_name
            .ok_or_else(|| ConnectError::fatal("the server did not export a snapshot"))?;
        self.sql
            .batch_execute(&format!(
                "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT {}",
                quote_literal(&snap)
            ))
            .await
            .map_err(|e| sql_err("importing the slot's snapshot", e))?;
        Ok((created.consistent_point, snap))
    }

    async fn table_schema_from_catalog(
        &mut self,
        schema: &str,
        table: &str,
    ) -> Result<Option<Arc<TableSchema>>, ConnectError> {
        let Some(meta) = catalog::load_table(&self.sql, &mut self.types, schema, table)
            .await
            .map_err(|e| sql_err(&format!("reading the definition of {schema}.{table}"), e))?
        else {
            return Ok(None);
        };
        let defs: Vec<ColumnDef> = meta
            .columns
            .iter()
            .filter(|c| !c.generated && self.cfg.filters.column_included(schema, table, &c.name))
            .map(|c| ColumnDef {
                name: c.name.clone(),
                ct: c.ct.clone(),
                optional: !c.not_null,
                default_raw: c.default_raw.clone(),
                serial: c.serial,
            })
            .collect();
        let id = TableId {
            schema: schema.to_owned(),
            table: table.to_owned(),
        };
        let key = self.key_columns(&id, &meta.primary_key, &defs);
        self.install_schema(id, defs, &key, meta.partitioned)
            .map(Some)
    }

    fn key_columns(&self, id: &TableId, pk: &[String], defs: &[ColumnDef]) -> Vec<String> {
        let name = id.to_string();
        for (pattern, cols) in &self.cfg.message_key_columns {
            if pattern.matches(&name) {
                return cols.clone();
            }
        }
        pk.iter()
            .filter(|k| defs.iter().any(|d| &d.name == *k))
            .cloned()
            .collect()
    }

    /// Builds a table schema, keeping the previous version's objects when nothing changed.
    fn install_schema(
        &mut self,
        id: TableId,
        defs: Vec<ColumnDef>,
        key: &[String],
        partitioned: bool,
    ) -> Result<Arc<TableSchema>, ConnectError> {
        let mut ts = TableSchema::build(
            id.clone(),
            &self.cfg.topic_prefix,
            defs,
            key,
            &self.cfg.mapping,
            &self.events.source_schema,
            &self.cfg.column_mappers,
            self.cfg.names,
        )
        .map_err(|e| ConnectError::fatal(e.to_string()))?;
        ts.partitioned = partitioned;
        if let Some(old) = self.schemas.get(&id) {
            if old.same_shape(&ts) {
                return Ok(old.clone());
            }
        }
        let ts = Arc::new(ts);
        self.schemas.insert(id, ts.clone());
        Ok(ts)
    }

    /// Starts the replication stream at `start_lsn`; `confirm_start` confirms that position
    /// to the server at once (it holds nothing the connector still has to hand out).
    async fn start_streaming(&mut self, confirm_start: bool) -> Result<(), ConnectError> {
        let repl = match self.repl.take() {
            Some(r) => r,
            None => self.replication_client("").await?,
        };
        // Protocol 2 with streaming on (PostgreSQL 14+) hands large in-progress transactions to
        // us instead of spilling them on the primary; see crate::streamed.
        let streaming =
            self.cfg.transaction_streaming && repl.server_major_version().unwrap_or(0) >= 14;
        let mut options: Vec<(&str, String)> = vec![
            ("proto_version", if streaming { "2" } else { "1" }.into()),
            (
                "publication_names",
                format!("\"{}\"", self.cfg.publication_name),
            ),
            ("messages", "true".into()),
            ("binary", "true".into()),
        ];
        if streaming {
            options.push(("streaming", "on".into()));
        }
        for (k, v) in &self.cfg.slot_stream_params {
            options.retain(|(ok, _)| ok != k);
            options.push((k.as_str(), v.clone()));
        }
        let slot = self.cfg.slot_name.clone();
        let (mut reader, status) = repl
            .start_replication(&slot, self.start_lsn, &options)
            .await
            .map_err(|e| {
                if e.code() == Some("55006") {
                    ConnectError::fatal(format!(
                        "replication slot {slot:?} is in use by another client: {e}"
                    ))
                } else if e.code() == Some("42704") {
                    ConnectError::fatal(format!(
                        "cannot stream from slot {slot:?}: {e}. Does publication {:?} exist?",
                        self.cfg.publication_name
                    ))
                } else {
                    pg_err(&format!("START_REPLICATION on slot {slot:?}"), e)
                }
            })?;
        tracing::info!(slot = %slot, start = %self.start_lsn, "streaming started");
        let start = self.start_lsn;
        self.skips.retain(|s| s.lsn > start);
        self.last_end = self.start_lsn;
        if confirm_start {
            self.processed_pos = self.start_lsn;
            self.shared
                .durable
                .fetch_max(self.start_lsn.0, Ordering::SeqCst);
        }
        // The reader hands over chunks: every message one socket read delivered (at most a
        // third of `max.queue.size`), through a channel holding one chunk, while the task
        // holds at most one more. The reader so reads the socket again only once the task took
        // the previous chunk; what the server sent meanwhile arrives in one large read instead
        // of one read (and one wake-up) per few messages.
        //
        // Under sustained load (at least COALESCE_MESSAGES handed over within COALESCE) the
        // reader pauses COALESCE after each hand-over before reading on: the server's
        // messages then pile up in the socket and arrive in a few large reads, so the reads,
        // wake-ups and log commits per event fall by an order of magnitude, for at most a
        // millisecond or two of latency while the load lasts. A trickle of changes never
        // pauses.
        const COALESCE: std::time::Duration = std::time::Duration::from_millis(1);
        const COALESCE_MESSAGES: usize = 64;
        let chunk_cap = (self.cfg.max_queue_size / 3).max(1);
        let (tx, rx) = mpsc::channel::<StreamItem>(1);
        let shared = self.shared.clone();
        let st = status.clone();
        let reader_task = tokio::spawn(async move {
            let mut in_txn = false;
            // Between StreamStart and StreamStop, and the streamed transactions not ended yet:
            // while any is open, a keepalive position may lie inside one of them.
            let mut in_chunk = false;
            let mut open_streamed: std::collections::HashSet<u32> = Default::default();
            let xid_at = |data: &[u8], at: usize| {
                data.get(at..at + 4)
                    .map(|b| u32::from_be_bytes(b.try_into().unwrap_or([0; 4])))
            };
            let mut chunk: Vec<(Lsn, Bytes)> = Vec::new();
            // The end of the last complete item (transaction or message) in `chunk`.
            let mut chunk_completes: Option<u64> = None;
            // Messages handed over since `window_start` (a window of COALESCE).
            let mut window_start = std::time::Instant::now();
            let mut window_messages = 0usize;
            // Hands `chunk` to the task, then records its complete items as pushed.
            macro_rules! hand_over {
                () => {
                    if !chunk.is_empty() {
                        let items = std::mem::replace(&mut chunk, Vec::with_capacity(64));
                        if tx.send(StreamItem::Data(items)).await.is_err() {
                            return;
                        }
                        if let Some(pos) = chunk_completes.take() {
                            shared.pushed.fetch_max(pos, Ordering::SeqCst);
                        }
                    }
                };
            }
            loop {
                if !chunk.is_empty() && (chunk.len() >= chunk_cap || !reader.has_buffered()) {
                    if window_start.elapsed() > COALESCE {
                        window_start = std::time::Instant::now();
                        window_messages = 0;
                    }
                    window_messages += chunk.len();
                    hand_over!();
                    if window_messages >= COALESCE_MESSAGES && !reader.has_buffered() {
                        tokio::time::sleep(COALESCE).await;
                    }
                }
                match reader.next().await {
                    Ok(Some(ReplicationMessage::XLogData {
                        wal_start,
                        wal_end,
                        data,
                        ..
                    })) => {
                        shared.received.fetch_max(wal_end.0, Ordering::Relaxed);
                        let tag = data.first().copied();
                        let mut completes = None;
                        match tag {
                            Some(b'B') => in_txn = true,
                            Some(b'C') => {
                                in_txn = false;
                                completes = data
                                    .get(10..18)
                                    .map(|b| u64::from_be_bytes(b.try_into().unwrap_or([0; 8])));
                            }
                            Some(b'S') => {
                                in_chunk = true;
                                open_streamed.extend(xid_at(&data, 1));
                            }
                            Some(b'E') => in_chunk = false,
                            Some(b'c') => {
                                if let Some(x) = xid_at(&data, 1) {
                                    open_streamed.remove(&x);
                                }
                                completes = data
                                    .get(14..22)
                                    .map(|b| u64::from_be_bytes(b.try_into().unwrap_or([0; 8])));
                            }
                            Some(b'A') => {
                                if let (Some(x), Some(sub)) = (xid_at(&data, 1), xid_at(&data, 5)) {
                                    if x == sub {
                                        open_streamed.remove(&x);
                                    }
                                }
                            }
                            Some(b'M') if !in_txn && !in_chunk => completes = Some(wal_start.0),
                            _ => {}
                        }
                        chunk.push((wal_start, data));
                        if completes.is_some() {
                            chunk_completes = chunk_completes.max(completes);
                        }
                    }
                    Ok(Some(ReplicationMessage::Keepalive {
                        wal_end,
                        reply_requested,
                        ..
                    })) => {
                        // Everything received before the keepalive is handed over first, so
                        // `pushed` covers it when the position is judged below.
                        hand_over!();
                        shared.received.fetch_max(wal_end.0, Ordering::SeqCst);
                        let durable = shared.durable.load(Ordering::SeqCst);
                        if !in_txn
                            && !in_chunk
                            && open_streamed.is_empty()
                            && durable >= shared.pushed.load(Ordering::SeqCst)
                        {
                            // Everything received is durable and no transaction is open:
                            // the keepalive position carries no captured change.
                            shared.durable.fetch_max(wal_end.0, Ordering::SeqCst);
                        }
                        if reply_requested {
                            if let Err(e) = shared.send_status(&st).await {
                                let _ = tx.send(StreamItem::Failed(e)).await;
                                return;
                            }
                        }
                    }
                    Ok(None) => {
                        hand_over!();
                        let _ = tx.send(StreamItem::Ended).await;
                        return;
                    }
                    Err(e) => {
                        hand_over!();
                        let _ = tx.send(StreamItem::Failed(e)).await;
                        return;
                    }
                }
            }
        });
        let shared = self.shared.clone();
        let st = status.clone();
        let interval = self.cfg.status_update_interval;
        let ticker = tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if shared.send_status(&st).await.is_err() {
                    return;
                }
            }
        });
        self.stream = Some(Stream {
            rx,
            received: Default::default(),
            status,
            reader: reader_task,
            ticker,
            decoder: Decoder::new(),
            streamed: StreamedTransactions::new(self.cfg.transaction_spill_dir.clone()),
            replay: None,
        });
        Ok(())
    }

    async fn poll(&mut self) -> Result<SourceBatch, ConnectError> {
        self.maybe_heartbeat().await?;
        self.read_file_signals();
        match &self.phase {
            Phase::Snapshot(_) => self.poll_snapshot().await,
            Phase::Streaming if self.pending_signal.is_some() => {
                self.run_signal().await?;
                match self.phase {
                    Phase::Snapshot(_) => self.poll_snapshot().await,
                    _ => {
                        self.advance_incremental().await?;
                        self.poll_stream().await
                    }
                }
            }
            Phase::Streaming => {
                self.advance_incremental().await?;
                self.poll_stream().await
            }
            Phase::StreamingAt(at) => {
                if streaming_due(*at, self.cfg.poll_interval, &self.waiting).await {
                    self.phase = Phase::Streaming;
                    self.start_streaming(true).await?;
                }
                Ok(SourceBatch::empty())
            }
            Phase::Done => {
                tokio::time::sleep(self.cfg.poll_interval).await;
                Ok(SourceBatch::empty())
            }
        }
    }

    async fn maybe_heartbeat(&mut self) -> Result<(), ConnectError> {
        let Some(due) = self.next_heartbeat else {
            return Ok(());
        };
        if Instant::now() < due || matches!(self.phase, Phase::Snapshot(_) | Phase::StreamingAt(_))
        {
            return Ok(());
        }
        self.next_heartbeat = Some(Instant::now() + self.cfg.heartbeat_interval);
        if let Some(q) = &self.cfg.heartbeat_action_query {
            self.sql
                .batch_execute(q)
                .await
                .map_err(|e| sql_err("heartbeat.action.query", e))?;
        }
        Ok(())
    }

    /// The offset after a snapshot record (see [`SnapshotTail`]).
    fn snapshot_offset(s: &Snapshot, tail: &SnapshotTail) -> OffsetMap {
        let mut o = OffsetMap::new();
        o.insert("last_snapshot_record".into(), tail.last.into());
        o.insert("lsn".into(), s.lsn.as_i64().into());
        let kind = if s.signal.is_some() {
            "BLOCKING"
        } else {
            "INITIAL"
        };
        o.insert("snapshot".into(), kind.into());
        if let Some(request) = &s.signal {
            o.insert("snapshot_signal".into(), request.as_str().into());
        }
        o.insert("snapshot_completed".into(), tail.last.into());
        o.insert("ts_usec".into(), s.ts_us.into());
        if let Some(x) = s.tx_id {
            o.insert("txId".into(), x.into());
        }
        // Progress: every row of the tables in `snapshot_done`, and of `snapshot_table` up to
        // key `snapshot_after`, is handed out up to this record.
        let done = if tail.tables_done == s.done.len() {
            s.done_json.clone()
        } else {
            snapshots::encode_tables(&s.done[..tail.tables_done])
        };
        o.insert("snapshot_done".into(), OffsetValue::String(done));
        o.insert(
            "snapshot_table".into(),
            OffsetValue::String(s.tables[tail.table].id.to_string()),
        );
        if let Some(k) = tail.key {
            o.insert("snapshot_after".into(), k.into());
        }
        if let Some(j) = &s.skips_json {
            o.insert("snapshot_skip".into(), OffsetValue::String(j.clone()));
        }
        if let Some(j) = &s.incremental {
            o.insert(INCREMENTAL_OFFSET.into(), OffsetValue::String(j.clone()));
        }
        o
    }

    /// A snapshot record without its offset: only the last record of a batch carries one
    /// (set by [`Inner::fill_snapshot`]), as the engine keeps only that one. Returns what that
    /// offset needs to know about this record.
    fn snapshot_record(
        &self,
        s: &mut Snapshot,
        table_idx: usize,
        marker: &'static str,
        row: Struct,
        last: bool,
    ) -> (SourceRecord, SnapshotTail) {
        let ts = &s.tables[table_idx];
        let tail = SnapshotTail {
            table: table_idx,
            key: snapshots::int_key(ts).and_then(|ki| snapshots::key_value(&row, ki)),
            last,
            tables_done: s.done.len(),
        };
        // Every row of a table shares its source block but for the first/last markers.
        let source = match (marker, &s.source_blocks[table_idx]) {
            ("true", Some(block)) => block.clone(),
            _ => {
                let block = self.events.source(
                    &ts.id,
                    &SourceInfo {
                        ts_us: s.ts_us,
                        snapshot: Some(marker),
                        last_commit_lsn: None,
                        lsn: Some(s.lsn.as_i64()),
                        tx_id: s.tx_id,
                    },
                );
                if marker == "true" {
                    let block = block.into_shared();
                    s.source_blocks[table_idx] = Some(block.clone());
                    block
                } else {
                    block
                }
            }
        };
        let ts = &s.tables[table_idx];
        let key = ts.key_of(&row);
        let value = self
            .events
            .envelope_at(ts, None, Some(row), source, "r", s.batch_now);
        (
            self.events.record(ts, OffsetMap::new(), key, Some(value)),
            tail,
        )
    }

    /// Notifies the table being copied as failed and the snapshot as aborted.
    fn notify_snapshot_failed(&self, snap: &Snapshot) {
        if let Some((ci, _)) = &snap.current {
            let table = snap.tables[snap.chunks[*ci].table].id.to_string();
            self.notes.initial_table_failed(&table);
        }
        self.notes.initial_aborted();
    }

    async fn poll_snapshot(&mut self) -> Result<SourceBatch, ConnectError> {
        let Phase::Snapshot(mut snap) = std::mem::replace(&mut self.phase, Phase::Streaming) else {
            return Ok(SourceBatch::empty());
        };
        let limit = self
            .cfg
            .max_batch_size
            .min(self.cfg.snapshot_fetch_size)
            .max(1);
        let mut out = Vec::with_capacity(limit);
        let result = self.fill_snapshot(&mut snap, &mut out, limit).await;
        let finished = match result {
            Ok(f) => f,
            Err(e) if snap.signal.is_some() && refused_by_server(&e) => {
                return self.abandon_signalled_snapshot(snap, e).await;
            }
            Err(e) => {
                self.notify_snapshot_failed(&snap);
                self.phase = Phase::Snapshot(snap);
                return Err(e);
            }
        };
        if !finished {
            self.phase = Phase::Snapshot(snap);
            return Ok(SourceBatch::committed(out));
        }
        tracing::info!(
            rows = snap.rows_done.iter().sum::<u64>(),
            tables = snap.tables.len(),
            elapsed_ms = snap.started.elapsed().as_millis() as u64,
            "snapshot finished"
        );
        snap.progress.finish();
        self.notes.initial_completed();
        self.sql
            .batch_execute("COMMIT")
            .await
            .map_err(|e| sql_err("ending the snapshot transaction", e))?;
        self.skips = std::mem::take(&mut snap.skips);
        let streaming_delay = self.cfg.start_delays.streaming;
        if snap.then_stream && snap.signal.is_none() && !streaming_delay.is_zero() {
            self.start_lsn = snap.lsn;
            self.phase = Phase::StreamingAt(hold_streaming(streaming_delay, &self.waiting));
        } else if snap.then_stream {
            self.phase = Phase::Streaming;
            self.start_lsn = snap.lsn;
            // After a signalled snapshot the stream goes on from the signal's transaction,
            // whose records may not be committed yet: only commits confirm that position.
            if snap.signal.is_some() {
                self.wait_for_slot_release().await?;
            }
            self.start_streaming(snap.signal.is_none()).await?;
        } else {
            self.phase = Phase::Done;
        }
        // The snapshot's end is committed now, not after the stream's first (waiting) poll.
        Ok(SourceBatch::caught_up(out))
    }

    /// Hands out rows into `out`; true when the snapshot is complete (all records emitted).
    /// The last record handed out carries the offset that covers all of them.
    async fn fill_snapshot(
        &mut self,
        snap: &mut Snapshot,
        out: &mut Vec<SourceRecord>,
        limit: usize,
    ) -> Result<bool, ConnectError> {
        let mut tail = None;
        let finished = self
            .fill_snapshot_records(snap, out, limit, &mut tail)
            .await?;
        if let (Some(last), Some(tail)) = (out.last_mut(), tail) {
            last.source_partition = self.events.partition.clone();
            last.source_offset = Self::snapshot_offset(snap, &tail);
        }
        Ok(finished)
    }

    async fn fill_snapshot_records(
        &mut self,
        snap: &mut Snapshot,
        out: &mut Vec<SourceRecord>,
        limit: usize,
        tail: &mut Option<SnapshotTail>,
    ) -> Result<bool, ConnectError> {
        loop {
            if out.len() >= limit {
                return Ok(false);
            }
            if let Some(row) = snap.rows.next() {
                let ti = snap.row_table;
                let first_in_table = !std::mem::replace(&mut snap.seen[ti], true);
                snap.rows_done[ti] += 1;
                snap.progress.add_rows(1);
                if let Some((pti, pfirst, prow)) = snap.pending.take() {
                    // The pending row is the last of its table if this row starts a new one.
                    let last_in_table = pti != ti;
                    let marker = Self::marker(pti, pfirst, last_in_table);
                    let (rec, t) = self.snapshot_record(snap, pti, marker, prow, false);
                    out.push(rec);
                    *tail = Some(t);
                }
                snap.pending = Some((ti, first_in_table, row));
                continue;
            }
            if snap.current.is_none() {
                match snap.readers.receivers.pop_front() {
                    Some(c) => {
                        let ti = snap.chunks[c.0].table;
                        if snap.announced != Some(ti) && self.notes.is_on() {
                            snap.announced = Some(ti);
                            let names = table_names(&snap.tables);
                            self.notes.initial_table_started(&names[ti], Some(&names));
                        }
                        snap.current = Some(c);
                    }
                    None => {
                        if let Some((ti, _, row)) = snap.pending.take() {
                            let (rec, t) = self.snapshot_record(snap, ti, "last", row, true);
                            out.push(rec);
                            *tail = Some(t);
                        }
                        return Ok(true);
                    }
                }
            }
            let Some((ci, rx)) = snap.current.as_mut() else {
                continue;
            };
            let ci = *ci;
            match rx.recv().await {
                Some(ChunkMsg::Rows(rows)) => {
                    snap.batch_now = crate::event::now_micros_nanos();
                    snap.rows = rows.into_iter();
                    snap.row_table = snap.chunks[ci].table;
                }
                Some(ChunkMsg::Failed(e)) => return Err(e),
                None => {
                    return Err(ConnectError::retriable(
                        "a snapshot reader ended unexpectedly",
                    ))
                }
                Some(ChunkMsg::Done) => {
                    snap.current = None;
                    let chunk = &snap.chunks[ci];
                    let ti = chunk.table;
                    let table = snap.tables[ti].id.to_string();
                    tracing::info!(
                        table = %table,
                        chunk = chunk.index + 1,
                        chunks = chunk.of,
                        rows_done = snap.rows_done[ti],
                        rows_estimated = snap.estimated[ti],
                        "snapshot chunk done"
                    );
                    if chunk.index + 1 == chunk.of {
                        tracing::info!(table = %table, rows = snap.rows_done[ti], "snapshot of table done");
                        snap.progress.table_done();
                        if self.notes.is_on() {
                            let names = table_names(&snap.tables);
                            self.notes
                                .initial_table_done(&table, Some((snap.rows_done[ti], &names)));
                        }
                        snap.done.push(table);
                        snap.done_json = snapshots::encode_tables(&snap.done);
                    }
                }
            }
        }
    }

    /// Debezium's snapshot marker precedence: last > first > last_in_data_collection >
    /// first_in_data_collection > true ("last" is decided by the caller).
    fn marker(table_idx: usize, first_in_table: bool, last_in_table: bool) -> &'static str {
        if first_in_table && table_idx == 0 {
            "first"
        } else if last_in_table {
            "last_in_data_collection"
        } else if first_in_table {
            "first_in_data_collection"
        } else {
            "true"
        }
    }

    async fn poll_stream(&mut self) -> Result<SourceBatch, ConnectError> {
        let deadline = tokio::time::Instant::now() + self.cfg.poll_interval;
        let mut out: Vec<SourceRecord> = Vec::new();
        let mut caught_up = true;
        loop {
            if out.len() >= self.cfg.max_batch_size || self.pending_signal.is_some() {
                caught_up = false;
                break;
            }
            let Some(stream) = self.stream.as_mut() else {
                return Err(ConnectError::retriable(
                    "the replication stream is not running",
                ));
            };
            if stream.replay.is_some() {
                self.replay_step(&mut out).await?;
                continue;
            }
            let (wal_start, data) = match stream.received.pop_front() {
                Some(message) => message,
                None => {
                    let item = if out.is_empty() {
                        match tokio::time::timeout_at(deadline, stream.rx.recv()).await {
                            Ok(Some(item)) => item,
                            Ok(None) => StreamItem::Ended,
                            Err(_) => break,
                        }
                    } else {
                        match stream.rx.try_recv() {
                            Ok(item) => item,
                            Err(mpsc::error::TryRecvError::Empty) => break,
                            Err(mpsc::error::TryRecvError::Disconnected) => StreamItem::Ended,
                        }
                    };
                    match item {
                        StreamItem::Data(messages) => {
                            stream.received = messages.into();
                            continue;
                        }
                        StreamItem::Failed(e) => {
                            return Err(pg_err("replication stream", e));
                        }
                        StreamItem::Ended => {
                            return Err(ConnectError::retriable(
                                "the server ended the replication stream",
                            ));
                        }
                    }
                }
            };
            if stream.streamed.in_chunk() && !matches!(data.first(), Some(b'E' | b'S')) {
                // A change of a streamed transaction: buffered until it ends.
                stream
                    .streamed
                    .append(wal_start, &data)
                    .map_err(|e| streamed_err(wal_start, e))?;
                continue;
            }
            let msg = stream.decoder.decode(data).map_err(|e| {
                ConnectError::fatal(format!("decoding pgoutput at {wal_start}: {e}"))
            })?;
            match msg {
                PgOutputMessage::StreamStart { xid, first_segment } => stream
                    .streamed
                    .start(xid, first_segment)
                    .map_err(|e| streamed_err(wal_start, e))?,
                PgOutputMessage::StreamStop => stream.streamed.stop(),
                PgOutputMessage::StreamAbort { xid, subxid, .. } => {
                    stream.streamed.abort(xid, subxid);
                    if xid == subxid {
                        tracing::debug!(xid, "streamed transaction aborted");
                    }
                }
                PgOutputMessage::StreamCommit {
                    xid,
                    commit_lsn,
                    commit_time,
                    ..
                } => {
                    let messages = stream
                        .streamed
                        .commit(xid)
                        .map_err(|e| streamed_err(wal_start, e))?;
                    tracing::debug!(xid, commit = %commit_lsn, "replaying a streamed transaction");
                    stream.replay = Some(StreamReplay {
                        messages,
                        decoder: Decoder::new(),
                        commit: msg,
                        commit_at: wal_start,
                    });
                    let begin = PgOutputMessage::Begin {
                        final_lsn: commit_lsn,
                        commit_time,
                        xid,
                    };
                    self.handle(wal_start, begin, &mut out).await?;
                }
                msg => self.handle(wal_start, msg, &mut out).await?,
            }
        }
        // A heartbeat between transactions carries the end of the last one, or the position
        // the server was already confirmed at when everything handed out is committed (a
        // keepalive past only uncaptured WAL).
        if self.txn.is_none()
            && self.held.is_none()
            && self.pending_signal.is_none()
            && self.heartbeats.as_ref().is_some_and(Heartbeats::due)
        {
            let durable = Lsn(self.shared.durable.load(Ordering::SeqCst));
            let pos = if self.committed_proc >= self.last_handed_proc {
                self.last_end.max(durable)
            } else {
                self.last_end
            };
            if pos != Lsn::INVALID {
                let mut offset = self.stream_offset(pos);
                offset.insert("lsn_proc".into(), pos.as_i64().into());
                let partition = self.events.partition.clone();
                if let Some(h) = self.heartbeats.as_mut() {
                    out.push(h.record(partition, offset));
                    self.incremental_dirty = false;
                }
            }
        }
        if !out.is_empty() {
            if let Some(last) = out.last() {
                self.last_handed_proc = offset_i64(&last.source_offset, "lsn_proc")
                    .map(Lsn::from_i64)
                    .unwrap_or(self.last_handed_proc);
            }
        }
        let boundary = if self.txn.is_some() {
            headwater_api::plugin::Boundary::Open
        } else {
            headwater_api::plugin::Boundary::Commit
        };
        Ok(SourceBatch {
            records: out,
            boundary,
            caught_up,
        })
    }

    /// Hands out the held record and holds `rec` (a change at `lsn` without offset) instead.
    fn push_record(&mut self, mut rec: SourceRecord, lsn: Lsn, out: &mut Vec<SourceRecord>) {
        if let Some(t) = self.txmeta.as_mut() {
            if let Some(collection) = source_collection(&rec, "schema") {
                if let Some(begin) = t.annotate(&mut rec, &collection) {
                    // Nothing of this transaction is held yet: BEGIN goes first.
                    if let Some((h, _)) = self.held.take() {
                        out.push(h);
                    }
                    out.push(begin);
                }
            }
        }
        if let Some((h, _)) = self.held.replace((rec, lsn)) {
            out.push(h);
        }
        if let Some(t) = self.txn.as_mut() {
            t.records += 1;
        }
    }

    /// Reads a row inserted into the signal table: its columns by position (id, type, data),
    /// as Debezium reads them. An execute-snapshot request is kept on the open transaction
    /// and acted on once it commits; the incremental snapshot's watermarks and its stop, pause
    /// and resume signals act at once; `log` is written to the worker's log.
    fn read_signal(&mut self, row: &TupleData, wal_start: Lsn, out: &mut Vec<SourceRecord>) {
        let text = |i: usize| match row.0.get(i) {
            Some(TupleValue::Text(b) | TupleValue::Binary(b)) => {
                // jsonb's binary form is a version byte (1) before the JSON text.
                let b = if i == 2 {
                    b.strip_prefix(&[1u8]).unwrap_or(b)
                } else {
                    b
                };
                Some(String::from_utf8_lossy(b).into_owned())
            }
            _ => None,
        };
        let kind = text(1);
        if !self.cfg.filters.source_signals && !signals::is_watermark(kind.as_deref()) {
            // The source channel is off: the table holds the watermarks only.
            return;
        }
        let pending = self.txn.as_mut().map(|t| &mut t.signal);
        let Some(signal) = signals::read_row(text(0), kind, text(2), pending) else {
            return;
        };
        self.act_on_incremental(signal, wal_start, out);
    }

    /// Acts on a signal steering the incremental snapshot (a watermark, stop, pause, resume).
    fn act_on_incremental(
        &mut self,
        signal: signals::IncrementalSignal,
        wal_start: Lsn,
        out: &mut Vec<SourceRecord>,
    ) {
        let closed = incremental::common::on_signal(
            signal,
            &mut self.window,
            &mut self.incremental,
            &self.progress,
            &self.notes,
        );
        // Every signal but a window's opening changes the progress (or may).
        self.incremental_dirty = true;
        if let Some(window) = closed {
            self.close_window(window, wal_start, out);
        }
    }

    /// Reads a row deleted from the signal table: with `INSERT_DELETE` watermarks, the
    /// deletion of a window's open row is its close watermark.
    fn read_deleted_signal(
        &mut self,
        row: &TupleData,
        wal_start: Lsn,
        out: &mut Vec<SourceRecord>,
    ) {
        let id = match row.0.first() {
            Some(TupleValue::Text(b) | TupleValue::Binary(b)) => String::from_utf8_lossy(b),
            _ => return,
        };
        if let Some(signal) = signals::deleted_watermark(Some(&id)) {
            self.act_on_incremental(signal, wal_start, out);
        }
    }

    /// Between source transactions while streaming: acts on the signals written to the file
    /// channel since it was read last, as on rows of the signal table (an `execute-snapshot`
    /// runs from this poll on; watermarks are the signal table's only).
    fn read_file_signals(&mut self) {
        if !matches!(self.phase, Phase::Streaming) || self.txn.is_some() || self.held.is_some() {
            return;
        }
        let Some(signals) = self.file_signals.as_mut().map(FileSignals::due) else {
            return;
        };
        let changed = signal_file::act_on(
            signals,
            &mut self.pending_signal,
            &mut self.window,
            &mut self.incremental,
            &self.progress,
            &self.notes,
        );
        self.incremental_dirty |= changed;
    }

    /// The stream reached the close watermark of the held chunk: its rows left are handed out
    /// as `r` events of the watermark's transaction, and the progress moves past the chunk.
    fn close_window(&mut self, window: Window, wal_start: Lsn, out: &mut Vec<SourceRecord>) {
        let ts = window.table.schema.clone();
        let (ts_us, begin, tx_id) = match &self.txn {
            Some(t) => (t.ts_us, Some(t.begin_lsn.as_i64()), Some(i64::from(t.xid))),
            None => (crate::event::now_micros_nanos().0, None, None),
        };
        let source = self
            .events
            .source(
                &ts.id,
                &SourceInfo {
                    ts_us,
                    snapshot: Some("incremental"),
                    last_commit_lsn: begin,
                    lsn: Some(wal_start.as_i64()),
                    tx_id,
                },
            )
            .into_shared();
        let now = crate::event::now_micros_nanos();
        for row in window.into_rows() {
            let key = ts.key_of(&row);
            let value = self
                .events
                .envelope_at(&ts, None, Some(row), source.clone(), "r", now);
            let rec = self.events.record(&ts, OffsetMap::new(), key, Some(value));
            if let Some((held, _)) = self.held.replace((rec, wal_start)) {
                out.push(held);
            }
            if let Some(t) = self.txn.as_mut() {
                t.records += 1;
            }
        }
    }

    /// Starts copying the tables an incremental `execute-snapshot` request names (added to the
    /// incremental snapshot under way, if any) while streaming goes on.
    async fn start_incremental(&mut self, request: SnapshotRequest) -> Result<(), ConnectError> {
        if !self.check_signal(&request).await? {
            return Ok(());
        }
        if self.cfg.filters.signal_table.is_none() {
            tracing::error!(tables = ?request.collections, "incremental execute-snapshot not acted on: it writes its watermarks into signal.data.collection, which is not set; set it (or send the signal with \"type\": \"blocking\")");
            return Ok(());
        }
        let tables = self.snapshot_tables(Some(&request)).await?;
        let chunk_size = self.cfg.incremental_chunk_size;
        incremental::common::queue(
            &mut self.incremental,
            &request,
            tables,
            chunk_size,
            &self.progress,
            &self.notes,
        );
        self.incremental_dirty = true;
        Ok(())
    }

    /// Between source transactions: reads the incremental snapshot's next chunk between two
    /// watermarks, unless one is held already, the snapshot is paused or there is none.
    async fn advance_incremental(&mut self) -> Result<(), ConnectError> {
        loop {
            if self.window.is_some() || self.txn.is_some() || self.held.is_some() {
                return Ok(());
            }
            if self.chunk_retry_at.is_some_and(|at| Instant::now() < at) {
                return Ok(());
            }
            let was_running = self.incremental.is_some();
            let Some(table) = incremental::common::table_to_read(
                &mut self.incremental,
                &self.progress,
                &self.notes,
            ) else {
                // The end of the snapshot changes the progress too.
                self.incremental_dirty |= was_running && self.incremental.is_none();
                return Ok(());
            };
            let name = table.name();
            let ts = self
                .table_schema_from_catalog(&table.schema, &table.table)
                .await?;
            let outcome = match ts {
                None => {
                    tracing::warn!(table = %name, "incremental snapshot: the table no longer exists; skipped");
                    ChunkOutcome::TableDone(TableScanStatus::UnknownSchema)
                }
                Some(ts) if ts.key_fields.is_empty() => {
                    tracing::warn!(table = %name, "incremental snapshot: the table has no primary key (nor message.key.columns), so it cannot be read in chunks; skipped (a blocking snapshot, \"type\": \"blocking\", copies it)");
                    ChunkOutcome::TableDone(TableScanStatus::NoPrimaryKey)
                }
                Some(ts) => self.read_incremental_chunk(&table, ts).await?,
            };
            match outcome {
                ChunkOutcome::Held => {
                    if let Some(w) = &self.window {
                        incremental::common::chunk_read(
                            &self.incremental,
                            &self.notes,
                            &w.last_key,
                            str::to_owned,
                        );
                    }
                    return Ok(());
                }
                ChunkOutcome::Later => return Ok(()),
                ChunkOutcome::TableDone(scan) => {
                    incremental::common::table_done(
                        &mut self.incremental,
                        &self.progress,
                        &self.notes,
                        scan,
                    );
                    self.incremental_dirty = true;
                }
                ChunkOutcome::Abandoned => {
                    incremental::common::abandon(
                        &mut self.incremental,
                        &self.progress,
                        &self.notes,
                    );
                    self.incremental_dirty = true;
                    return Ok(());
                }
            }
        }
    }

    /// Reads the next chunk of `table` between an open and a close watermark into
    /// [`Inner::window`]. The server refusing the statements (a condition it rejects, no
    /// privilege to insert watermarks) ends the table or the whole snapshot with an error in the
    /// log, not the task: a restart would only meet the same refusal.
    async fn read_incremental_chunk(
        &mut self,
        table: &TableRequest,
        ts: Arc<TableSchema>,
    ) -> Result<ChunkOutcome, ConnectError> {
        let name = table.name();
        let Some((signal_schema, signal_table)) = self.cfg.filters.signal_table.clone() else {
            tracing::error!("incremental snapshot abandoned: signal.data.collection is not set, so there is no table to write its watermarks into");
            return Ok(ChunkOutcome::Abandoned);
        };
        let condition = table.condition.as_deref();
        let max = match self.incremental.as_ref().and_then(|p| p.max.clone()) {
            Some(max) => max,
            None => {
                let statement = incremental::max_key_statement(&ts, condition);
                match self.sql.query_opt(statement.as_str(), &[]).await {
                    Ok(None) => return Ok(ChunkOutcome::TableDone(TableScanStatus::Empty)),
                    Ok(Some(row)) => {
                        let max: Vec<String> = (0..ts.key_fields.len())
                            .map(|i| row.get::<_, Option<String>>(i).unwrap_or_default())
                            .collect();
                        if let Some(p) = self.incremental.as_mut() {
                            p.max = Some(max.clone());
                        }
                        max
                    }
                    Err(e) if incremental::refused(&e) => {
                        let e =
                            incremental::refusal(&format!("reading the largest key of {name}"), &e);
                        tracing::error!(table = %name, error = %e, "incremental snapshot: the table is skipped");
                        return Ok(ChunkOutcome::TableDone(TableScanStatus::SqlException));
                    }
                    Err(e) => {
                        return Err(sql_err(
                            &format!(
                                "reading the largest key of {name} for an incremental snapshot"
                            ),
                            e,
                        ))
                    }
                }
            }
        };
        let after = self.incremental.as_ref().and_then(|p| p.after.clone());
        self.chunks_read += 1;
        let id = incremental::chunk_id(self.chunks_read);
        let signal = (signal_schema.as_str(), signal_table.as_str());
        let open = incremental::watermark_statement(signal, &id, true);
        match self.sql.batch_execute(&open).await {
            Ok(()) => {}
            Err(e) if incremental::refused(&e) => {
                let e = incremental::refusal("inserting a watermark into the signal table", &e);
                tracing::error!(error = %e, "incremental snapshot abandoned: it needs to insert rows into the signal table");
                return Ok(ChunkOutcome::Abandoned);
            }
            Err(e) => return Err(sql_err("inserting an incremental snapshot watermark", e)),
        }
        let statement = incremental::chunk_statement(
            &ts,
            after.as_deref(),
            &max,
            condition,
            self.cfg.incremental_chunk_size,
        );
        let read = incremental::read_chunk(
            &self.sql,
            &ts,
            &statement,
            &self.cfg.mapping,
            &self.cfg.unavailable_placeholder,
        )
        .await;
        let ((rows, last_key), unseen) = match read {
            Ok(read) => read,
            Err(incremental::ChunkError::Sql(e)) if incremental::refused(&e) => {
                let e = incremental::refusal(&format!("reading a chunk of {name}"), &e);
                tracing::error!(table = %name, error = %e, "incremental snapshot: the table is skipped");
                return Ok(ChunkOutcome::TableDone(TableScanStatus::SqlException));
            }
            Err(incremental::ChunkError::Sql(e)) => {
                return Err(sql_err(&format!("reading a chunk of {name}"), e))
            }
            Err(incremental::ChunkError::Data(why)) => {
                tracing::error!(table = %name, error = %why, "incremental snapshot: a chunk of the table does not decode; the table is skipped");
                return Ok(ChunkOutcome::TableDone(TableScanStatus::SqlException));
            }
        };
        let Some(last_key) = last_key else {
            self.discard_open_watermark(signal, &id).await?;
            return Ok(ChunkOutcome::TableDone(TableScanStatus::Succeeded));
        };
        if let Some(xid) = self.recent_xids.handed_out(&unseen, &ts.id) {
            self.discard_open_watermark(signal, &id).await?;
            // Its changes went out before this read, which saw the rows as they were: the
            // chunk is dropped (its open watermark alone is ignored) and read again later.
            tracing::warn!(table = %name, xid, "incremental snapshot: a transaction the stream handed out is not visible to the chunk's read yet (waiting for a synchronous standby?); the chunk is read again in a second");
            self.chunk_retry_at = Some(Instant::now() + Duration::from_secs(1));
            return Ok(ChunkOutcome::Later);
        }
        // INSERT_DELETE: deleting the open row closes the window; if it is gone already (a
        // cleanup of the signal table, say) a close row is inserted instead, which the stream
        // reads under either strategy.
        let deleted = self.cfg.watermarks_deleted
            && self
                .sql
                .execute(
                    incremental::watermark_delete_statement(signal, &id).as_str(),
                    &[],
                )
                .await
                .map_err(|e| sql_err("deleting an incremental snapshot's open watermark", e))?
                > 0;
        if !deleted {
            self.sql
                .batch_execute(&incremental::watermark_statement(signal, &id, false))
                .await
                .map_err(|e| sql_err("inserting an incremental snapshot watermark", e))?;
        }
        tracing::debug!(table = %name, chunk = %id, rows = rows.len(), "incremental snapshot chunk read");
        let rows = rows
            .into_iter()
            .map(|row| (incremental::key_text(&ts, &row), row))
            .collect();
        let table = incremental::ChunkTable { schema: ts, unseen };
        self.window = Some(Window::new(id, Arc::new(table), rows, last_key));
        Ok(ChunkOutcome::Held)
    }

    /// With `INSERT_DELETE` watermarks, deletes the open watermark of a chunk that will not
    /// be handed out, so the signal table stays empty (the stream ignores the deletion: no
    /// window of that chunk is held).
    async fn discard_open_watermark(
        &self,
        signal: (&str, &str),
        id: &str,
    ) -> Result<(), ConnectError> {
        if !self.cfg.watermarks_deleted {
            return Ok(());
        }
        self.sql
            .batch_execute(&incremental::watermark_delete_statement(signal, id))
            .await
            .map_err(|e| sql_err("deleting an incremental snapshot's open watermark", e))
    }

    /// Acts on the pending execute-snapshot request at a transaction boundary: stops the
    /// stream and starts the snapshot of the tables it names (streaming starts again after
    /// the signal's transaction once it is copied), or streams on if the request names no
    /// captured table or the server refuses its conditions.
    async fn run_signal(&mut self) -> Result<(), ConnectError> {
        let Some(request) = self.pending_signal.take() else {
            return Ok(());
        };
        if request.incremental {
            return self.start_incremental(request).await;
        }
        if !self.check_signal(&request).await? {
            return Ok(());
        }
        // The stream restarts after the signal: an incremental snapshot's chunk waiting for
        // its close watermark is read again later.
        self.window = None;
        if let Some(s) = self.stream.take() {
            s.reader.abort();
            s.ticker.abort();
            let _ = self.shared.send_status(&s.status).await;
            s.status.close().await;
        }
        // A new replication session announces its relations again.
        self.relations.clear();
        self.source_cache = None;
        let start = SnapshotStart {
            resume: None,
            signal: Some(request),
            stream_from: Some(self.last_end),
            skips: std::mem::take(&mut self.skips),
            slot_exists: true,
            then_stream: true,
        };
        self.begin_snapshot(start).await
    }

    fn stream_offset(&self, lsn: Lsn) -> OffsetMap {
        let mut o = OffsetMap::new();
        o.insert("lsn".into(), lsn.as_i64().into());
        o.insert("lsn_proc".into(), self.last_end.as_i64().into());
        if let Some(t) = &self.txn {
            o.insert("lsn_commit".into(), t.commit_lsn.as_i64().into());
            o.insert("txId".into(), i64::from(t.xid).into());
            o.insert("ts_usec".into(), t.ts_us.into());
        }
        if !self.skips.is_empty() {
            o.insert(
                "snapshot_skip".into(),
                OffsetValue::String(snapshots::encode_skips(&self.skips)),
            );
        }
        if let Some(request) = &self.pending_signal {
            o.insert(
                "snapshot_signal".into(),
                OffsetValue::String(request.to_json()),
            );
        }
        if let Some(p) = &self.incremental {
            o.insert(INCREMENTAL_OFFSET.into(), OffsetValue::String(p.to_json()));
        }
        o
    }

    /// Whether a change of `row` (in the open transaction) is already in a resumed
    /// snapshot's re-read region.
    fn in_snapshot(&self, ts: &TableSchema, row: Option<&Struct>) -> bool {
        if self.skips.is_empty() {
            return false;
        }
        let Some(t) = &self.txn else {
            return false;
        };
        let key =
            snapshots::int_key(ts).and_then(|ki| row.and_then(|r| snapshots::key_value(r, ki)));
        let name = ts.id.to_string();
        self.skips
            .iter()
            .any(|s| s.covers(&name, key, t.commit_lsn))
    }

    fn stream_source(&mut self, id: &TableId, lsn: Lsn) -> Struct {
        let (ts_us, tx, begin) = match &self.txn {
            Some(t) => {
                if let Some((key, table, block)) = &self.source_cache {
                    if *key == (t.begin_lsn, t.xid, t.ts_us) && table == id {
                        return EventBuilder::source_for_lsn(
                            block,
                            Some(t.begin_lsn.as_i64()),
                            lsn.as_i64(),
                        );
                    }
                }
                (t.ts_us, Some(i64::from(t.xid)), Some(t.begin_lsn.as_i64()))
            }
            None => (crate::event::now_micros_nanos().0, None, None),
        };
        let block = self.events.source(
            id,
            &SourceInfo {
                ts_us,
                snapshot: None,
                last_commit_lsn: begin,
                lsn: Some(lsn.as_i64()),
                tx_id: tx,
            },
        );
        if let Some(t) = &self.txn {
            let block = block.into_shared();
            self.source_cache = Some(((t.begin_lsn, t.xid, t.ts_us), id.clone(), block.clone()));
            return block;
        }
        block
    }

    fn raw<'a>(tuple: &'a TupleData, idx: usize) -> RawColumn<'a> {
        match tuple.0.get(idx) {
            None | Some(TupleValue::Null) => RawColumn::Null,
            Some(TupleValue::Unchanged) => RawColumn::Unchanged,
            Some(TupleValue::Binary(b)) => RawColumn::Binary(b),
            Some(TupleValue::Text(b)) => RawColumn::Text(b),
        }
    }

    /// A change of `ts` while a chunk of the same table is held, inside its open window or by
    /// a transaction the chunk's read did not see ([`incremental::covers`]): the chunk's rows
    /// with the keys of the change's images are dropped (the change is newer).
    fn window_replaced<const N: usize>(
        &mut self,
        ts: &TableSchema,
        map: &[usize],
        images: [Option<&TupleData>; N],
    ) -> Result<(), ConnectError> {
        let xid = self.txn.as_ref().map(|t| t.xid);
        if let (Some(x), Some(_)) = (xid, &self.incremental) {
            self.recent_xids.changed(x, &ts.id);
        }
        if !self
            .window
            .as_ref()
            .is_some_and(|w| incremental::covers(w, &ts.id, xid))
        {
            return Ok(());
        }
        for image in images.into_iter().flatten() {
            let row = self.row_of(ts, map, image, None)?;
            if let Some(w) = self.window.as_mut() {
                w.replaced(&incremental::key_text(ts, &row));
            }
        }
        Ok(())
    }

    fn row_of(
        &self,
        ts: &TableSchema,
        map: &[usize],
        tuple: &TupleData,
        fill: Option<&Struct>,
    ) -> Result<Struct, ConnectError> {
        ts.row(&self.cfg.mapping, &self.cfg.unavailable_placeholder, |i| {
            let r = Self::raw(tuple, map[i]);
            match (r, fill) {
                (RawColumn::Unchanged, Some(old)) if !old.values()[i].is_null() => {
                    RawColumn::Given(old.values()[i].clone())
                }
                (r, _) => r,
            }
        })
        .map_err(|e| ConnectError::data(e.to_string()))
    }

    async fn handle(
        &mut self,
        wal_start: Lsn,
        msg: PgOutputMessage,
        out: &mut Vec<SourceRecord>,
    ) -> Result<(), ConnectError> {
        match msg {
            PgOutputMessage::Begin {
                final_lsn,
                commit_time,
                xid,
            } => {
                let ts_us = pgoutput::pg_time_to_unix_micros(commit_time);
                if let Some(t) = self.txmeta.as_mut() {
                    // Debezium's PostgreSQL transaction id: `txId:LSN` (here the commit LSN,
                    // constant across the transaction).
                    t.begin(
                        format!("{xid}:{}", final_lsn.as_i64()),
                        ts_us.div_euclid(1000),
                    );
                }
                self.recent_xids.began(xid, self.incremental.is_some());
                self.txn = Some(Txn {
                    xid,
                    commit_lsn: final_lsn,
                    begin_lsn: wal_start,
                    ts_us,
                    records: 0,
                    signal: None,
                });
            }
            PgOutputMessage::Commit { end_lsn, .. } => {
                let produced = self.txn.as_ref().map_or(0, |t| t.records);
                let signal = self.txn.as_mut().and_then(|t| t.signal.take());
                let signalled = signal.is_some();
                if let Some(request) = signal {
                    self.pending_signal = Some(request);
                }
                let carried = self.held.is_some();
                if let Some((mut h, lsn)) = self.held.take() {
                    let mut offset = self.stream_offset(lsn);
                    offset.insert("lsn_proc".into(), end_lsn.as_i64().into());
                    let partition = self.events.partition.clone();
                    // With transaction metadata the END record closes the transaction and
                    // carries its offset.
                    let end = self
                        .txmeta
                        .as_mut()
                        .and_then(|t| t.end(&partition, offset.clone()));
                    match end {
                        Some(end) => {
                            out.push(h);
                            out.push(end);
                        }
                        None => {
                            h.source_partition = partition;
                            h.source_offset = offset;
                            out.push(h);
                        }
                    }
                } else if let Some(t) = self.txmeta.as_mut() {
                    t.abandon();
                }
                self.txn = None;
                self.last_end = end_lsn;
                if signalled || (self.incremental_dirty && !carried) {
                    // Not confirmed before the signal's snapshot (or the incremental
                    // snapshot's progress) is in the offsets: a restart must read the signal
                    // (or the watermark) again if nothing of it was committed.
                    return Ok(());
                }
                if carried {
                    self.incremental_dirty = false;
                }
                self.processed_pos = end_lsn;
                self.forget_dropped_relations(end_lsn).await;
                if !self.skips.is_empty() {
                    self.skips.retain(|s| s.lsn > end_lsn);
                }
                if produced == 0 && out.is_empty() && self.committed_proc >= self.last_handed_proc {
                    self.shared.durable.fetch_max(end_lsn.0, Ordering::SeqCst);
                }
            }
            PgOutputMessage::Relation(rel) => self.on_relation(rel).await?,
            PgOutputMessage::Type { oid, .. } => self.types.forget(oid),
            PgOutputMessage::Origin { .. } => {}
            PgOutputMessage::Insert {
                relation_id, new, ..
            } => {
                let (ts, map) = match self.rel(relation_id)? {
                    Some(x) => x,
                    None => return Ok(()),
                };
                if self
                    .cfg
                    .filters
                    .is_signal_table(&ts.id.schema, &ts.id.table)
                {
                    self.read_signal(&new, wal_start, out);
                }
                self.window_replaced(&ts, &map, [Some(&new)])?;
                if self.cfg.skipped.create {
                    return Ok(());
                }
                let after = self.row_of(&ts, &map, &new, None)?;
                if self.in_snapshot(&ts, Some(&after)) {
                    return Ok(());
                }
                let key = ts.key_of(&after);
                let source = self.stream_source(&ts.id, wal_start);
                let value = self.events.envelope(&ts, None, Some(after), source, "c");
                let rec = self.events.record(&ts, OffsetMap::new(), key, Some(value));
                self.push_record(rec, wal_start, out);
            }
            PgOutputMessage::Update {
                relation_id,
                key,
                old,
                new,
                ..
            } => {
                let (ts, map) = match self.rel(relation_id)? {
                    Some(x) => x,
                    None => return Ok(()),
                };
                self.window_replaced(&ts, &map, [old.as_ref().or(key.as_ref()), Some(&new)])?;
                if self.cfg.skipped.update {
                    return Ok(());
                }
                let before = match (&old, &key) {
                    (Some(o), _) => Some(self.row_of(&ts, &map, o, None)?),
                    (None, Some(k)) => Some(self.row_of(&ts, &map, k, None)?),
                    (None, None) => None,
                };
                let after =
                    self.row_of(&ts, &map, &new, before.as_ref().filter(|_| old.is_some()))?;
                if self.cfg.skip_unchanged
                    && old.is_some()
                    && before
                        .as_ref()
                        .is_some_and(|b| b.values() == after.values())
                {
                    // skip.messages.without.change: no captured column changed.
                    return Ok(());
                }
                let new_key = ts.key_of(&after);
                let old_key = before.as_ref().and_then(|b| ts.key_of(b));
                let (skip_old, skip_new) = (
                    self.in_snapshot(&ts, before.as_ref()),
                    self.in_snapshot(&ts, Some(&after)),
                );
                if old_key.is_some() && old_key != new_key {
                    // Primary key change: delete (+ tombstone) under the old key, create under the new.
                    let offset = OffsetMap::new();
                    let source = self.stream_source(&ts.id, wal_start);
                    let value = self.events.envelope(&ts, before, None, source.clone(), "d");
                    let mut del =
                        self.events
                            .record(&ts, offset.clone(), old_key.clone(), Some(value));
                    if let Some(nk) = &new_key {
                        del.headers
                            .prepend(NEWKEY_HEADER, ts.key_schema.clone(), nk.clone());
                    }
                    let tomb = self.cfg.tombstones_on_delete.then(|| {
                        let mut t = self
                            .events
                            .record(&ts, offset.clone(), old_key.clone(), None);
                        t.headers = del.headers.clone();
                        t
                    });
                    let value = self.events.envelope(&ts, None, Some(after), source, "c");
                    let mut cre = self.events.record(&ts, offset, new_key, Some(value));
                    if let Some(ok) = &old_key {
                        cre.headers
                            .prepend(OLDKEY_HEADER, ts.key_schema.clone(), ok.clone());
                    }
                    if !skip_old {
                        self.push_record(del, wal_start, out);
                        if let Some(t) = tomb {
                            self.push_record(t, wal_start, out);
                        }
                    }
                    if !skip_new {
                        self.push_record(cre, wal_start, out);
                    }
                } else if skip_new {
                    return Ok(());
                } else {
                    let source = self.stream_source(&ts.id, wal_start);
                    let value = self.events.envelope(&ts, before, Some(after), source, "u");
                    let rec = self
                        .events
                        .record(&ts, OffsetMap::new(), new_key, Some(value));
                    self.push_record(rec, wal_start, out);
                }
            }
            PgOutputMessage::Delete {
                relation_id,
                key,
                old,
                ..
            } => {
                let (ts, map) = match self.rel(relation_id)? {
                    Some(x) => x,
                    None => return Ok(()),
                };
                if self.cfg.watermarks_deleted
                    && self
                        .cfg
                        .filters
                        .is_signal_table(&ts.id.schema, &ts.id.table)
                {
                    if let Some(row) = old.as_ref().or(key.as_ref()) {
                        self.read_deleted_signal(row, wal_start, out);
                    }
                }
                self.window_replaced(&ts, &map, [old.as_ref().or(key.as_ref())])?;
                if self.cfg.skipped.delete {
                    return Ok(());
                }
                let image = old.as_ref().or(key.as_ref());
                let before = match image {
                    Some(t) => Some(self.row_of(&ts, &map, t, None)?),
                    None => None,
                };
                if self.in_snapshot(&ts, before.as_ref()) {
                    return Ok(());
                }
                let k = before.as_ref().and_then(|b| ts.key_of(b));
                let source = self.stream_source(&ts.id, wal_start);
                let value = self.events.envelope(&ts, before, None, source, "d");
                let rec = self
                    .events
                    .record(&ts, OffsetMap::new(), k.clone(), Some(value));
                self.push_record(rec, wal_start, out);
                if self.cfg.tombstones_on_delete {
                    let t = self.events.record(&ts, OffsetMap::new(), k, None);
                    self.push_record(t, wal_start, out);
                }
            }
            PgOutputMessage::Truncate { relation_ids, .. } => {
                for rid in relation_ids {
                    let Some((ts, _)) = self.rel(rid)? else {
                        continue;
                    };
                    let xid = self.txn.as_ref().map(|t| t.xid);
                    if let (Some(x), Some(_)) = (xid, &self.incremental) {
                        self.recent_xids.changed(x, &ts.id);
                    }
                    if let Some(w) = self
                        .window
                        .as_mut()
                        .filter(|w| incremental::covers(w, &ts.id, xid))
                    {
                        w.truncated();
                    }
                    if self.cfg.skipped.truncate {
                        continue;
                    }
                    let source = self.stream_source(&ts.id, wal_start);
                    let value = self.events.envelope(&ts, None, None, source, "t");
                    let rec = self.events.record(&ts, OffsetMap::new(), None, Some(value));
                    self.push_record(rec, wal_start, out);
                }
            }
            PgOutputMessage::Message {
                transactional,
                prefix,
                content,
                lsn,
                ..
            } => {
                if !self.cfg.message_prefixes.accepts(&prefix) {
                    if !transactional
                        && self.txn.is_none()
                        && out.is_empty()
                        && self.held.is_none()
                        && self.committed_proc >= self.last_handed_proc
                    {
                        self.shared.durable.fetch_max(wal_start.0, Ordering::SeqCst);
                    }
                    return Ok(());
                }
                let rec = self.message_record(wal_start.max(lsn), &prefix, &content);
                if transactional && self.txn.is_some() {
                    self.push_record(rec, wal_start.max(lsn), out);
                } else {
                    // A non-transactional message is a unit of its own.
                    if let Some((h, _)) = self.held.take() {
                        out.push(h);
                    }
                    out.push(rec);
                }
            }
            PgOutputMessage::StreamStart { .. }
            | PgOutputMessage::StreamStop
            | PgOutputMessage::StreamCommit { .. }
            | PgOutputMessage::StreamAbort { .. } => {
                return Err(ConnectError::fatal(format!(
                    "stream control message at {wal_start} inside a replayed streamed transaction"
                )));
            }
        }
        Ok(())
    }

    /// Hands out the next message of the streamed transaction being replayed, or ends it with
    /// its commit.
    async fn replay_step(&mut self, out: &mut Vec<SourceRecord>) -> Result<(), ConnectError> {
        let Some(replay) = self.stream.as_mut().and_then(|s| s.replay.as_mut()) else {
            return Ok(());
        };
        let at = replay.commit_at;
        match replay
            .messages
            .next_message()
            .map_err(|e| streamed_err(at, e))?
        {
            Some((wal_start, data)) => {
                let msg = replay.decoder.decode(data).map_err(|e| {
                    ConnectError::fatal(format!(
                        "decoding a streamed transaction's message at {wal_start}: {e}"
                    ))
                })?;
                self.handle(wal_start, msg, out).await
            }
            None => {
                let Some(StreamReplay { commit, .. }) =
                    self.stream.as_mut().and_then(|s| s.replay.take())
                else {
                    return Ok(());
                };
                let PgOutputMessage::StreamCommit {
                    flags,
                    commit_lsn,
                    end_lsn,
                    commit_time,
                    ..
                } = commit
                else {
                    return Ok(());
                };
                let commit = PgOutputMessage::Commit {
                    flags,
                    commit_lsn,
                    end_lsn,
                    commit_time,
                };
                self.handle(at, commit, out).await
            }
        }
    }

    fn message_record(&mut self, lsn: Lsn, prefix: &str, content: &[u8]) -> SourceRecord {
        let (key_schema, block_schema, value_schema) = self.message_schemas.clone();
        let mut key = Struct::new(key_schema.clone()).expect("struct schema");
        let _ = key.put_at(0, Value::String(prefix.to_owned()));
        let mut block = Struct::new(block_schema.clone()).expect("struct schema");
        let _ = block.put_at(0, Value::String(prefix.to_owned()));
        let content_value = match crate::types::decode_binary(
            &ColumnType {
                info: crate::types::TypeInfo::new(17, "bytea", crate::types::PgType::Bytea),
                typmod: -1,
            },
            content,
            &self.cfg.mapping,
            &Schema::bytes(),
        ) {
            Ok(v) => v,
            Err(_) => Value::Bytes(content.to_vec()),
        };
        let _ = block.put_at(1, content_value);
        let id = TableId {
            schema: String::new(),
            table: String::new(),
        };
        let source = self.stream_source(&id, lsn);
        let mut value = Struct::new(value_schema.clone()).expect("struct schema");
        let (us, _) = crate::event::now_micros_nanos();
        let _ = value.put_at(0, Value::String("m".into()));
        let _ = value.put_at(1, Value::Int64(us / 1000));
        let _ = value.put_at(2, Value::Struct(source));
        let _ = value.put_at(4, Value::Struct(block));
        let mut offset = self.stream_offset(lsn);
        if self.txn.is_none() {
            offset.insert("lsn_proc".into(), lsn.as_i64().into());
        }
        let mut record = SourceRecord::new(
            self.events.partition.clone(),
            offset,
            format!("{}.message", self.cfg.topic_prefix),
            Some(key_schema.clone()),
            Value::Struct(key),
            Some(value_schema.clone()),
            Value::Struct(value),
        );
        self.events.context.add_to(&mut record.headers);
        record
    }

    /// At a commit ending at `end_lsn`: removes the relations found dropped once the stream
    /// is past the point that proves it, and looks for dropped ones when due.
    async fn forget_dropped_relations(&mut self, end_lsn: Lsn) {
        if let Some(ids) = self.dropped.ready(end_lsn) {
            for id in &ids {
                self.relations.remove(id);
            }
            // A schema is kept while a relation still decodes to it (a table re-created under
            // the same name has a new OID and may share its schema).
            let in_use: std::collections::HashSet<&TableId> = self
                .relations
                .values()
                .filter_map(|r| r.table.as_ref().map(|t| &t.id))
                .collect();
            let before = self.schemas.len();
            self.schemas.retain(|id, _| in_use.contains(id));
            tracing::info!(
                relations = ids.len(),
                schemas = before - self.schemas.len(),
                "forgot relations dropped from the catalog"
            );
        }
        if !self.dropped.due(self.relations.len()) {
            return;
        }
        let ids: Vec<u32> = self.relations.keys().copied().collect();
        // Every change of a relation the catalog no longer has committed before its DROP
        // (which waited for the relation's lock), so before the WAL position read here.
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&ids];
        let look = self.sql.query_one(
            concat!(
                "SELECT coalesce(array_agg(r.id), '{}'::oid[]), ",
                "(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ",
                "ELSE pg_current_wal_insert_lsn() END - '0/0'::pg_lsn)::bigint ",
                "FROM unnest($1::oid[]) AS r(id) ",
                "WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = r.id)"
            ),
            &params,
        );
        // A connection that went quiet must not hold up the stream for TCP's time-outs.
        let checked = match tokio::time::timeout(Duration::from_secs(30), look).await {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(_) => Err("no answer within 30 s".to_owned()),
        };
        match checked {
            Ok(row) => {
                let gone: Vec<u32> = row.get(0);
                let position: Option<i64> = row.get(1);
                self.dropped.checked(
                    gone,
                    position.map_or(Lsn::INVALID, Lsn::from_i64),
                    self.relations.len(),
                );
            }
            Err(e) => {
                // Not worth failing the stream over: the next check tries again.
                tracing::debug!(error = %e, "looking for dropped relations failed");
                self.dropped
                    .checked(Vec::new(), Lsn::INVALID, self.relations.len());
            }
        }
    }

    fn rel(&self, relation_id: u32) -> Result<Option<CapturedRelation>, ConnectError> {
        match self.relations.get(&relation_id) {
            None => Err(ConnectError::fatal(format!(
                "change for relation {relation_id} arrived before its Relation message"
            ))),
            Some(r) => Ok(r.table.clone().map(|t| (t, r.col_map.clone()))),
        }
    }

    async fn on_relation(&mut self, rel: Relation) -> Result<(), ConnectError> {
        // An OID announced again is in use again, whatever the catalog said before.
        self.dropped.announced(rel.id);
        let id = TableId {
            schema: rel.namespace.clone(),
            table: rel.name.clone(),
        };
        if !self.cfg.filters.table_included(&id.schema, &id.table) {
            self.relations.insert(
                rel.id,
                RelState {
                    table: None,
                    col_map: Arc::from([]),
                },
            );
            return Ok(());
        }
        let meta = catalog::load_table(&self.sql, &mut self.types, &id.schema, &id.table)
            .await
            .map_err(|e| sql_err(&format!("reading the definition of {id}"), e))?;
        let mut defs = Vec::with_capacity(rel.columns.len());
        for c in &rel.columns {
            if !self
                .cfg
                .filters
                .column_included(&id.schema, &id.table, &c.name)
            {
                continue;
            }
            let info = self
                .types
                .resolve(&self.sql, c.type_oid)
                .await
                .map_err(|e| sql_err("resolving a column type", e))?;
            let cm = meta
                .as_ref()
                .and_then(|m| m.columns.iter().find(|m| m.name == c.name));
            defs.push(ColumnDef {
                name: c.name.clone(),
                ct: ColumnType {
                    info,
                    typmod: c.type_modifier,
                },
                optional: cm.is_none_or(|m| !m.not_null),
                default_raw: cm.and_then(|m| m.default_raw.clone()),
                serial: cm.is_some_and(|m| m.serial),
            });
        }
        let pk = meta
            .as_ref()
            .map(|m| m.primary_key.clone())
            .unwrap_or_default();
        let key = self.key_columns(&id, &pk, &defs);
        let partitioned = meta.as_ref().is_some_and(|m| m.partitioned);
        let ts = self.install_schema(id, defs, &key, partitioned)?;
        let col_map = ts
            .columns
            .iter()
            .map(|c| {
                rel.columns
                    .iter()
                    .position(|rc| rc.name == c.def.name)
                    .unwrap_or(usize::MAX)
            })
            .collect();
        self.relations.insert(
            rel.id,
            RelState {
                table: Some(ts),
                col_map,
            },
        );
        Ok(())
    }

    async fn commit(&mut self, committed: &[(OffsetMap, OffsetMap)]) -> Result<(), ConnectError> {
        let Some((_, offset)) = committed
            .iter()
            .rev()
            .find(|(p, _)| *p == self.events.partition)
        else {
            return Ok(());
        };
        if offset.contains_key("snapshot") {
            return Ok(());
        }
        let Some(proc_lsn) = offset_i64(offset, "lsn_proc").map(Lsn::from_i64) else {
            return Ok(());
        };
        self.committed_proc = self.committed_proc.max(proc_lsn);
        self.shared.durable.fetch_max(proc_lsn.0, Ordering::SeqCst);
        if self.committed_proc >= self.last_handed_proc && self.held.is_none() && self.txn.is_none()
        {
            self.shared
                .durable
                .fetch_max(self.processed_pos.0, Ordering::SeqCst);
        }
        if let Some(s) = &self.stream {
            if let Err(e) = self.shared.send_status(&s.status).await {
                return Err(pg_err("confirming the flushed position", e));
            }
        }
        Ok(())
    }

    async fn stop(mut self) {
        if let Some(s) = self.stream.take() {
            s.reader.abort();
            s.ticker.abort();
            let _ = self.shared.send_status(&s.status).await;
            s.status.close().await;
        }
        if let Some(r) = self.repl.take() {
            r.close().await;
        }
        if self.cfg.slot_drop_on_stop {
            for _ in 0..50 {
                match self
                    .sql
                    .execute(
                        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active",
                        &[&self.cfg.slot_name],
                    )
                    .await
                {
                    Ok(_) => match read_slot(&self.sql, &self.cfg.slot_name).await {
                        Ok(None) => break,
                        _ => tokio::time::sleep(Duration::from_millis(100)).await,
                    },
                    Err(e) => {
                        tracing::warn!(error = %e, "could not drop the slot");
                        break;
                    }
                }
            }
        }
        self.sql_conn.abort();
    }
}

/// How long slot creation may wait before the task reports what it waits for.
const SLOT_WAIT_REPORT_AFTER: Duration = Duration::from_secs(2);

/// The sessions a slot-creating walsender waits for, one line each: pid, user, database,
/// application, client, state, transaction age and query.
async fn slot_blockers(
    sql: &Client,
    walsender_pid: Option<i32>,
) -> Result<Vec<String>, tokio_postgres::Error> {
    // The walsender waits on the transaction locks of each running transaction with an xid;
    // pg_blocking_pids names their holders. Without its pid, list every such transaction.
    let rows = sql
        .query(
            r"SELECT a.pid, coalesce(a.usename, ''), coalesce(a.datname, ''),
                    coalesce(a.application_name, ''), coalesce(host(a.client_addr), 'local'),
                    coalesce(a.state, ''),
                    coalesce(extract(epoch FROM now() - a.xact_start)::bigint, 0),
                    coalesce(left(regexp_replace(a.query, '\s+', ' ', 'g'), 120), '')
               FROM pg_stat_activity a
              WHERE ($1::int IS NOT NULL AND a.pid = ANY (pg_blocking_pids($1::int)))
                 OR ($1::int IS NULL AND a.backend_xid IS NOT NULL AND a.pid <> pg_backend_pid())
              ORDER BY a.xact_start",
            &[&walsender_pid],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            let (pid, user, db, app, client, state, age, query): (
                i32,
                String,
                String,
                String,
                String,
                String,
                i64,
                String,
            ) = (
                r.get(0),
                r.get(1),
                r.get(2),
                r.get(3),
                r.get(4),
                r.get(5),
                r.get(6),
                r.get(7),
            );
            format!(
                "pid {pid} (user {user}, database {db}, application {app:?}, client {client}, {state}, transaction open {age} s, last query: {query})"
            )
        })
        .collect())
}

fn slot_create_err(name: &str, e: PgError) -> ConnectError {
    match e.code() {
        Some("42710") => ConnectError::fatal(format!("replication slot {name:?} already exists (slot names are cluster-wide): {e}")),
        Some("53400") => ConnectError::fatal(format!(
            "cannot create replication slot {name:?}: all replication slots are in use; raise max_replication_slots or drop unused slots ({e})"
        )),
        Some("42501") => ConnectError::fatal(format!(
            "cannot create replication slot {name:?}: the user needs the REPLICATION attribute (ALTER ROLE ... REPLICATION) ({e})"
        )),
        Some("55000") => ConnectError::fatal(format!(
            "cannot create replication slot {name:?}: {e}; logical decoding needs wal_level=logical"
        )),
        _ => pg_err(&format!("creating replication slot {name:?}"), e),
    }
}

impl SourceTask for PostgresSourceTask {
    fn start(
        &mut self,
        context: SourceTaskContext,
        props: Properties,
    ) -> BoxFuture<'_, Result<(), ConnectError>> {
        Box::pin(async move {
            let inner = Inner::start(context, props).await?;
            self.inner = Some(Box::new(inner));
            Ok(())
        })
    }

    fn poll(&mut self) -> BoxFuture<'_, Result<SourceBatch, ConnectError>> {
        Box::pin(async move {
            match self.inner.as_mut() {
                Some(i) => {
                    let mut batch = i.poll().await?;
                    i.notes.drain_into(&mut batch.records);
                    Ok(batch)
                }
                None => Err(ConnectError::fatal("poll called before start")),
            }
        })
    }

    fn commit<'a>(
        &'a mut self,
        committed: &'a [(OffsetMap, OffsetMap)],
    ) -> BoxFuture<'a, Result<(), ConnectError>> {
        Box::pin(async move {
            match self.inner.as_mut() {
                Some(i) => i.commit(committed).await,
                None => Ok(()),
            }
        })
    }

    fn stop(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some(i) = self.inner.take() {
                i.stop().await;
            }
        })
    }
}

/// `<schema>.<table>` (or `<db>.<table>`, by `namespace_field`) of a change event, from its
/// `source` block; `None` for records without one.
pub(crate) fn source_collection(rec: &SourceRecord, namespace_field: &str) -> Option<String> {
    let source = rec.value.as_struct()?.get("source")?.as_struct()?;
    let ns = source.get(namespace_field)?.as_str()?;
    let table = source.get("table")?.as_str()?;
    Some(format!("{ns}.{table}"))
}

/// The qualified names of a snapshot's tables, in snapshot order (notifications' lists).
fn table_names(tables: &[Arc<TableSchema>]) -> Vec<String> {
    tables.iter().map(|t| t.id.to_string()).collect()
}

#[cfg(test)]
mod dropped_relations_tests {
    use super::*;

    #[test]
    fn dropped_relations_wait_for_the_stream_to_pass_their_mark() {
        let mut d = DroppedRelations::new();
        assert!(!d.due(0), "nothing known, nothing to look for");
        assert!(!d.due(999), "neither the interval nor the growth reached");
        assert!(d.due(1_000));
        d.checked(vec![7, 9], Lsn(500), 1_000);
        assert!(!d.due(5_000), "one look at a time");
        assert_eq!(d.ready(Lsn(499)), None);
        d.announced(9);
        assert_eq!(d.ready(Lsn(500)), Some(vec![7]), "9 was announced again");
        assert_eq!(d.ready(Lsn(900)), None, "handed out once");
        assert!(!d.due(1_999));
        assert!(d.due(2_000));
        // A look that found nothing, or could not read the position, forgets nothing.
        d.checked(Vec::new(), Lsn(800), 2_000);
        assert_eq!(d.ready(Lsn(u64::MAX)), None);
        d.checked(vec![3], Lsn::INVALID, 2_000);
        assert_eq!(d.ready(Lsn(u64::MAX)), None);
        d.last_check = Instant::now() - DROPPED_RELATIONS_INTERVAL;
        assert!(d.due(1), "the interval passed");
    }
}
