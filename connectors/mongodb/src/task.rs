//! [`MongoSourceTask`]: snapshot then stream change events, with Debezium's MongoDB events
//! and offsets.
//!
//! Lifecycle: `start` parses the configuration, connects, and decides from the committed
//! offset whether to snapshot. Before a snapshot the task opens a change stream and keeps the
//! resume token it starts at (`T0`); the snapshot copies the captured collections
//! ([`crate::snapshot`]); streaming then resumes at `T0`, so a change made during the snapshot
//! is never lost (it may also be in the snapshot: Debezium's semantics, marked by `op=r`
//! against `c`/`u`/`d`). Offsets are `{sec, ord, resume_token}` as Debezium stores them
//! (`resume_token` is base64 of the BSON token document, kept opaque).
//!
//! Durability invariants:
//! - a committed offset always names a resume point whose events are all in the log: every
//!   event's own token, given to the last record of its transaction (a multi-document
//!   transaction's events share `lsid`/`txnNumber` and are handed out as one engine
//!   transaction; an idle stream closes the one in progress);
//! - the resume token is only ever advanced to what the stream returned; a token the server no
//!   longer has (`ChangeStreamHistoryLost`) fails the task with a message, or re-snapshots
//!   under `snapshot.mode=when_needed`;
//! - a lost connection or server restart is a retriable error: the engine restarts the task,
//!   which resumes from the last committed offset.
//!
//! The stream is the `$changeStream` aggregation the driver's `watch` would run, read as whole
//! server replies (the driver's raw batch cursor): each event is handled where it lies in its
//! reply, with nothing copied out per event. The driver's change-stream type would resume
//! by itself after an error the change-streams specification calls resumable (not a server
//! answer, `CursorNotFound`, or labelled `ResumableChangeStreamError`); here such an error ends
//! the reader as a retriable error and the engine's restart resumes from the committed offset,
//! which loses and repeats nothing either way. Other server errors fail the task.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use futures_util::StreamExt;
use headwater_api::plugin::{BoxFuture, SourceBatch, SourceTask, SourceTaskContext};
use headwater_api::{Boundary, ConnectError, OffsetMap, OffsetValue, Properties, SourceRecord};
use headwater_connector_common::context_headers::ContextHeaders;
use headwater_connector_common::heartbeat::Heartbeats;
use headwater_connector_common::txmeta::TransactionMetadata;
use mongodb::bson::{doc, Bson, DateTime, Document, RawBsonRef, RawDocument, Timestamp};
use mongodb::change_stream::event::ResumeToken;
use mongodb::options::ClientOptions;
use mongodb::raw_batch_cursor::{RawBatch, RawBatchCursor};
use mongodb::Client;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::config::{MongoConfig, OversizeHandling, PipelineOrder, SnapshotMode};
use crate::event::{now, CollectionSchemas, EventBuilder, NamespaceMap, SourceInfo};
use crate::extjson::{self, Dialect};
use crate::fields::FieldRules;
use crate::rawbson;
use crate::signal::{Signal, SnapshotRequest};
use crate::snapshot::{self as snapshots, ChunkMsg, Readers, Rendered, SnapshotCollection};
use crate::split::{Fragments, Piece};
use headwater_connector_common::incremental::{self as incremental, Progress, TableRequest};
use headwater_connector_common::notification::{Notifier, TableScanStatus};
use headwater_connector_common::signal::IncrementalSignal;
use headwater_connector_common::signal_file::FileSignals;
use headwater_connector_common::snapshot_policy::{
    hold_streaming, streaming_due, wait_snapshot_delay, LostPosition,
};

/// Server error codes that mean the resume point is gone from the oplog.
const HISTORY_LOST_CODES: [i32; 2] = [286, 280];

/// Classifies a driver error: connection problems are retriable, the rest fatal.
pub fn classify(context: String, e: mongodb::error::Error) -> ConnectError {
    use mongodb::error::ErrorKind;
    let msg = format!("{context}: {e}");
    let retriable = matches!(
        *e.kind,
        ErrorKind::Io(_)
            | ErrorKind::ConnectionPoolCleared { .. }
            | ErrorKind::ServerSelection { .. }
            | ErrorKind::DnsResolve { .. }
    ) || e.contains_label("RetryableWriteError")
        || e.contains_label("ResumableChangeStreamError");
    if retriable {
        ConnectError::retriable(msg)
    } else {
        ConnectError::fatal(msg)
    }
}

/// Whether an error reading the change stream is one the change-streams specification resumes
/// after (as the driver's own change stream would): anything that is not a server's answer,
/// `CursorNotFound` (43), or an error the server labels `ResumableChangeStreamError`. The task
/// reopens the stream after the last change it handed out (see `poll_stream`); the engine's
/// restart at the committed offset is the fallback.
fn stream_error_resumable(e: &mongodb::error::Error) -> bool {
    use mongodb::error::ErrorKind;
    match &*e.kind {
        ErrorKind::Command(c) => c.code == 43 || e.contains_label("ResumableChangeStreamError"),
        ErrorKind::Authentication { .. } | ErrorKind::InsertMany(_) | ErrorKind::Write(_) => {
            e.contains_label("ResumableChangeStreamError")
        }
        _ => true,
    }
}

fn history_lost(e: &mongodb::error::Error) -> bool {
    match &*e.kind {
        mongodb::error::ErrorKind::Command(c) => {
            HISTORY_LOST_CODES.contains(&c.code) || c.code_name == "ChangeStreamHistoryLost"
        }
        _ => e.to_string().contains("ChangeStreamHistoryLost"),
    }
}

/// A resume token. Change events carry theirs as BSON, which stays shared with the event it
/// came in (no copy) and is written as base64 text only when an offset is built, once per
/// batch rather than once per event; a token read back from a stored offset stays text.
#[derive(Clone, Debug)]
enum Token {
    /// The base64 text of the token's BSON, as stored in offsets.
    Text(String),
    /// The token document's BSON bytes.
    Bson(Bytes),
}

impl Token {
    #[cfg(test)]
    fn of(token: &ResumeToken) -> Token {
        Token::Bson(Bytes::from(
            mongodb::bson::serialize_to_vec(token).unwrap_or_default(),
        ))
    }

    /// The token as stored in offsets: base64 of its BSON.
    fn text(&self) -> String {
        match self {
            Token::Text(t) => t.clone(),
            Token::Bson(b) => base64::engine::general_purpose::STANDARD.encode(b),
        }
    }

    fn resume_token(&self) -> Result<ResumeToken, ConnectError> {
        let decoded;
        let bytes = match self {
            Token::Bson(b) => &b[..],
            Token::Text(text) => {
                decoded = base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_err(|e| {
                        ConnectError::config(format!("the stored resume_token is not base64: {e}"))
                    })?;
                &decoded[..]
            }
        };
        mongodb::bson::deserialize_from_slice(bytes).map_err(|e| {
            ConnectError::config(format!(
                "the stored resume_token is not a resume token: {e}"
            ))
        })
    }
}

fn offset_str<'a>(o: &'a OffsetMap, k: &str) -> Option<&'a str> {
    match o.get(k) {
        Some(OffsetValue::String(s)) => Some(s),
        _ => None,
    }
}

fn offset_bool(o: &OffsetMap, k: &str) -> Option<bool> {
    match o.get(k) {
        Some(OffsetValue::Bool(b)) => Some(*b),
        Some(OffsetValue::String(s)) => Some(s == "true"),
        _ => None,
    }
}

/// A multi-document transaction's identity: its session id (strict extended JSON) and number.
type TxnId = (String, i64);

/// A change event's transaction (its `lsid` as extended JSON and its `txnNumber`), if any;
/// `get` reads a top-level field of the event.
fn event_txn<'a>(
    get: &impl Fn(&str) -> Result<Option<RawBsonRef<'a>>, ConnectError>,
) -> Result<Option<TxnId>, ConnectError> {
    Ok(match (get("lsid")?, get("txnNumber")?) {
        (Some(RawBsonRef::Document(l)), Some(RawBsonRef::Int64(n))) => {
            let mut lsid = String::with_capacity(64);
            extjson::write_document(&mut lsid, l, Dialect::Strict)
                .map_err(|e| ConnectError::data(format!("a change event's lsid: {e}")))?;
            Some((lsid, n))
        }
        _ => None,
    })
}

/// Where the stream is: the last resume point handed out and its cluster time.
#[derive(Clone, Debug, Default)]
struct Position {
    token: Option<Token>,
    sec: i64,
    ord: i64,
}

impl Position {
    fn offset(&self) -> OffsetMap {
        let mut o = OffsetMap::new();
        o.insert("sec".into(), self.sec.into());
        o.insert("ord".into(), self.ord.into());
        if let Some(t) = &self.token {
            o.insert("resume_token".into(), t.text().into());
        }
        o
    }
}

/// Reopens of a failing change stream without a change event in between before the task
/// fails over to the engine's restart.
const MAX_REOPENS: u32 = 3;

/// What the stream reader sends: one server reply at a time.
enum StreamMsg {
    /// A reply holding change events.
    Events(Reply),
    /// An empty reply: nothing new right now; the stream's resume point after it.
    Idle(Option<Token>),
    Failed(mongodb::error::Error),
    /// The server ended the cursor without an invalidate event.
    Closed,
}

/// A change-stream reply whose events are read where they lie (nothing is copied out of it).
struct Reply {
    batch: RawBatch,
    /// Where the reply's event array lies in its bytes.
    array: std::ops::Range<usize>,
    /// Where the next event's element starts in the array.
    next: usize,
}

impl Reply {
    /// `None` for a reply without events.
    fn new(batch: RawBatch) -> Result<Option<Reply>, mongodb::error::Error> {
        let reply = batch.as_raw_document().as_bytes();
        let array = batch.doc_slices()?;
        if array.is_empty() {
            return Ok(None);
        }
        let bytes = array.as_bytes();
        let start = bytes.as_ptr() as usize - reply.as_ptr() as usize;
        let array = start..start + bytes.len();
        Ok(Some(Reply {
            batch,
            array,
            next: 4,
        }))
    }

    /// The next event's BSON, or `None` after the last.
    fn next_event(&mut self) -> Result<Option<&[u8]>, ConnectError> {
        let array = &self.batch.as_raw_document().as_bytes()[self.array.clone()];
        let mut elements = rawbson::elements_from(array, self.next)
            .map_err(|e| ConnectError::data(format!("a change-stream reply: {e}")))?;
        let Some(element) = elements.next() else {
            return Ok(None);
        };
        let element =
            element.map_err(|e| ConnectError::data(format!("a change-stream reply: {e}")))?;
        if element.kind != rawbson::DOCUMENT {
            return Err(ConnectError::data(
                "a change-stream reply holds something other than a document",
            ));
        }
        self.next = elements.offset();
        Ok(Some(element.value))
    }
}

/// The resume point a reply names after its events (`postBatchResumeToken`), if any.
fn post_batch_token(batch: &RawBatch) -> Option<Token> {
    let cursor = batch.as_raw_document().get_document("cursor").ok()?;
    match cursor.get("postBatchResumeToken").ok()?? {
        RawBsonRef::Document(d) => Some(Token::Bson(Bytes::copy_from_slice(d.as_bytes()))),
        _ => None,
    }
}

/// A change stream opened: its cursor and its first reply.
struct OpenedStream {
    cursor: RawBatchCursor,
    first: Option<RawBatch>,
}

impl OpenedStream {
    /// The resume point the server named after the first reply (`postBatchResumeToken`). A
    /// fresh stream's first reply is empty, so this is where it starts; events in a first reply
    /// carry their own tokens, which the task takes as it hands them out.
    fn resume_point(&self) -> Option<Token> {
        self.first.as_ref().and_then(post_batch_token)
    }
}

struct Stream {
    rx: mpsc::Receiver<StreamMsg>,
    reader: JoinHandle<()>,
    /// The reply whose events are being handed out.
    reply: Option<Reply>,
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// A running snapshot.
struct Snapshot {
    collections: Arc<Vec<SnapshotCollection>>,
    schemas: Vec<Arc<CollectionSchemas>>,
    chunks: Arc<Vec<snapshots::Chunk>>,
    readers: Readers,
    current: Option<(usize, mpsc::Receiver<ChunkMsg>)>,
    /// The collection whose copy was last notified as in progress.
    announced: Option<usize>,
    docs: std::vec::IntoIter<Rendered>,
    doc_collection: usize,
    /// The document held back until the next tells whether it is the snapshot's last.
    pending: Option<(usize, Rendered)>,
    done: Vec<String>,
    done_json: String,
    /// Where streaming starts: the resume point taken before the (first) snapshot.
    start: Position,
    /// Per collection, its shared `source` block.
    source_blocks: Vec<Option<headwater_api::Struct>>,
    open: bool,
    rows: u64,
    started: Instant,
    then_stream: bool,
    /// The request of the signal that asked for this snapshot (as JSON), kept in its offsets.
    signal: Option<String>,
}

/// What the offset after a snapshot record needs.
struct SnapshotTail {
    collection: usize,
    id: Option<Bson>,
    done: usize,
    last: bool,
}

enum Phase {
    Snapshot(Box<Snapshot>),
    Stream,
    /// The snapshot taken at start has finished; streaming begins at this instant
    /// (`streaming.delay.ms`).
    StreamAt(Instant),
    Done,
}

struct Inner {
    /// Where the snapshot's progress is reported (the engine's status and metrics).
    progress: headwater_api::SnapshotProgress,
    /// Debezium's notifications (`notification.enabled.channels`).
    notes: Notifier,
    /// Why the incremental snapshot's current collection ended, when it ends unread.
    scan_status: TableScanStatus,
    cfg: MongoConfig,
    client: Client,
    events: EventBuilder,
    phase: Phase,
    /// Until the task's start has decided: a snapshot begun now waits `snapshot.delay.ms`.
    starting: bool,
    /// Set when the task is asked to stop while it starts (ends `snapshot.delay.ms`).
    stop: headwater_api::StopRequest,
    /// Where the task says what it waits for (`snapshot.delay.ms`, `streaming.delay.ms`).
    waiting: headwater_api::TaskWaiting,
    stream: Option<Stream>,
    position: Position,
    /// The last record handed out of the transaction in progress, with that transaction's
    /// identity and the offset after it.
    held: Option<(SourceRecord, Option<TxnId>, Position)>,
    /// Set by [`Inner::push`] when a transaction ended with its last record handed out carrying
    /// its offset, and the record now held starts another transaction: the poll ends there, so
    /// the batch ends at a commit point (see `poll_stream`).
    ended_transaction: bool,
    /// `cursor.oversize.handling.mode=split`: the fragments of a split event read so far.
    split: Option<Fragments>,
    /// Reopens of the change stream since the last change event: past [`MAX_REOPENS`] the
    /// task fails over to the engine's restart (which backs off).
    reopens: u32,
    /// The stream failed with records in hand: the next poll reopens it first.
    reopen_pending: bool,
    /// `signal.data.collection` as (database, collection).
    signal_ns: Option<(String, String)>,
    /// An `execute-snapshot` signal just read, with the signal's own position (where streaming
    /// goes on after the snapshot). The position is not taken before the snapshot starts.
    signal: Option<(SnapshotRequest, Position)>,
    heartbeats: Option<Heartbeats>,
    txmeta: Option<TransactionMetadata>,
    rules: NamespaceMap<Arc<FieldRules>>,
    /// The namespace of the last change event and what [`Inner::namespace`] found for it.
    last_namespace: Option<LastNamespace>,
    /// An incremental snapshot under way; the offsets of the batches carry it.
    incremental: Option<Progress>,
    /// An incremental `execute-snapshot` request read in this poll, started at its end.
    incremental_request: Option<SnapshotRequest>,
    /// The incremental snapshot's chunk read between watermarks (its records, keyed by their
    /// `_id` as the record keys write it), until the stream reaches the close watermark.
    window: Option<ChunkWindow>,
    /// A chunk whose open watermark is written and not read yet: it is read once the stream
    /// has passed that watermark, so that every change before the watermark is visible to the
    /// read (a write the server orders before the watermark can become visible after it).
    pending_chunk: Option<PendingChunk>,
    /// The stream just passed the pending chunk's open watermark: the poll ends there so the
    /// chunk is read before the changes after it are handled.
    chunk_to_read: bool,
    /// Chunks read by this task (part of each chunk id).
    chunks_read: u64,
    /// The file signal channel, when enabled.
    file_signals: Option<FileSignals>,
}

/// An incremental snapshot chunk between its two steps: the open watermark written, the
/// documents not read yet.
struct PendingChunk {
    id: String,
    table: TableRequest,
    /// The chunk's query: `_id` above the last chunk's, up to the largest, and the condition.
    filter: Document,
    /// Whether the stream has passed the open watermark.
    opened: bool,
}

/// A chunk of an incremental snapshot: (database, collection), and the chunk's records.
type ChunkWindow = incremental::Window<(String, String), SourceRecord>;

/// The offset key of an incremental snapshot's progress ([`Progress::to_json`]).
const INCREMENTAL_OFFSET: &str = "incremental_snapshot";

/// A captured namespace's field rules and schemas.
type CapturedNamespace = (Arc<FieldRules>, Arc<CollectionSchemas>);

/// The last namespace [`Inner::namespace`] was asked for, and its answer.
struct LastNamespace {
    db: String,
    collection: String,
    captured: Option<CapturedNamespace>,
}

/// The MongoDB source task.
#[derive(Default)]
pub struct MongoSourceTask {
    inner: Option<Box<Inner>>,
}

impl MongoSourceTask {
    pub fn new() -> Self {
        Self::default()
    }
}

/// The driver's options: the connection string's, then the connector's keys on top
/// (`mongodb.ssl.enabled` turns TLS on as Debezium does; it never turns off a `tls=true` of the
/// connection string).
async fn client_options(cfg: &MongoConfig) -> Result<ClientOptions, ConnectError> {
    let mut opts = ClientOptions::parse(&cfg.connection_string)
        .await
        .map_err(|e| ConnectError::config(format!("mongodb.connection.string: {e}")))?;
    if cfg.tls && !matches!(opts.tls, Some(mongodb::options::Tls::Enabled(_))) {
        // No TLS in the string (or `tls=false`): the connector's key turns it on.
        opts.tls = Some(mongodb::options::Tls::Enabled(Default::default()));
    }
    Ok(finish_options(opts, cfg))
}

fn finish_options(mut opts: ClientOptions, cfg: &MongoConfig) -> ClientOptions {
    opts.app_name = Some("headwater".into());
    opts.connect_timeout = Some(cfg.connect_timeout);
    opts.server_selection_timeout = Some(cfg.server_selection_timeout);
    if let (Some(user), None) = (&cfg.user, &opts.credential) {
        opts.credential = Some(
            mongodb::options::Credential::builder()
                .username(user.clone())
                .password(cfg.password.clone())
                .source(cfg.auth_source.clone())
                .build(),
        );
    }
    opts
}

async fn connect(cfg: &MongoConfig) -> Result<Client, ConnectError> {
    let opts = client_options(cfg).await?;
    let client = Client::with_options(opts)
        .map_err(|e| ConnectError::config(format!("mongodb.connection.string: {e}")))?;
    let hello = client
        .database("admin")
        .run_command(doc! {"hello": 1})
        .await
        .map_err(|e| classify("connecting to MongoDB".into(), e))?;
    if hello.get_str("setName").is_err() && hello.get_str("msg").ok() != Some("isdbgrid") {
        return Err(ConnectError::config(
            "the MongoDB server is a standalone: change streams need a replica set or a sharded cluster (connect with ?replicaSet=...)",
        ));
    }
    Ok(client)
}

impl Inner {
    async fn start(context: SourceTaskContext, props: Properties) -> Result<Inner, ConnectError> {
        let cfg =
            MongoConfig::parse(&props).map_err(|v| ConnectError::config(v.error_message()))?;
        let client = connect(&cfg).await?;
        let names = headwater_connector_common::name_adjust::NameAdjustments::from_props(&props);
        let mut events = EventBuilder::new(&cfg.topic_prefix, names.schema);
        events.context =
            ContextHeaders::from_props(&props, &cfg.topic_prefix, context.task_id, "mongodb");
        let committed = context.offset(&events.partition).cloned();
        let mut inner = Inner {
            progress: context.snapshot_progress.clone(),
            notes: Notifier::from_props(&props, &cfg.topic_prefix),
            scan_status: TableScanStatus::Succeeded,
            stop: context.stop.clone(),
            waiting: context.waiting.clone(),
            heartbeats: Heartbeats::new(
                cfg.heartbeat_interval,
                &cfg.heartbeat_topic_prefix,
                &cfg.topic_prefix,
            ),
            txmeta: cfg
                .transaction_topic
                .as_deref()
                .map(|t| TransactionMetadata::new(&cfg.topic_prefix, t)),
            client,
            events,
            phase: Phase::Done,
            starting: true,
            stream: None,
            position: Position::default(),
            held: None,
            ended_transaction: false,
            split: (cfg.oversize == OversizeHandling::Split).then(Fragments::default),
            signal_ns: cfg.signal_collection.as_ref().and_then(|s| {
                let (db, coll) = s.split_once('.')?;
                Some((db.to_owned(), coll.to_owned()))
            }),
            signal: None,
            incremental: None,
            incremental_request: None,
            window: None,
            pending_chunk: None,
            chunk_to_read: false,
            chunks_read: 0,
            file_signals: FileSignals::from_props(&props),
            reopens: 0,
            reopen_pending: false,
            rules: NamespaceMap::default(),
            last_namespace: None,
            cfg,
        };
        inner.prepare(committed).await?;
        inner.starting = false;
        Ok(inner)
    }

    fn rules(&mut self, db: &str, collection: &str) -> Arc<FieldRules> {
        if let Some(r) = self.rules.get(db, collection) {
            return r.clone();
        }
        let r = Arc::new(FieldRules::for_collection(
            db,
            collection,
            &self.cfg.field_excludes,
            &self.cfg.field_renames,
        ));
        self.rules.insert(db, collection, r.clone());
        r
    }

    /// The field rules and schemas of `db.collection`, `None` when it is not captured. The
    /// last namespace asked for is kept: a stream mostly repeats it.
    fn namespace(&mut self, db: &str, collection: &str) -> Option<CapturedNamespace> {
        if let Some(last) = &self.last_namespace {
            if last.db == db && last.collection == collection {
                return last.captured.clone();
            }
        }
        let captured = self.cfg.captures(db, collection).then(|| {
            (
                self.rules(db, collection),
                self.events.collection(db, collection),
            )
        });
        self.last_namespace = Some(LastNamespace {
            db: db.to_owned(),
            collection: collection.to_owned(),
            captured: captured.clone(),
        });
        captured
    }

    async fn prepare(&mut self, committed: Option<OffsetMap>) -> Result<(), ConnectError> {
        let policy = self.cfg.snapshot_mode.policy();
        let Some(o) = committed else {
            return if policy.without_offset {
                self.start_snapshot(None, None).await
            } else {
                self.notes.initial_skipped();
                self.start_streaming(None).await
            };
        };
        self.incremental = offset_str(&o, INCREMENTAL_OFFSET).and_then(|text| {
            Progress::from_json(text)
                .map_err(|e| tracing::warn!(error = %e, progress = text, "the offset's incremental snapshot is unreadable; it is not resumed"))
                .ok()
        });
        if let Some(p) = &self.incremental {
            incremental::report(&self.progress, true, p.tables.len());
        }
        let token = offset_str(&o, "resume_token").map(|t| Token::Text(t.to_owned()));
        let position = Position {
            token: token.clone(),
            sec: match o.get("sec") {
                Some(OffsetValue::Int(i)) => *i,
                _ => -1,
            },
            ord: match o.get("ord") {
                Some(OffsetValue::Int(i)) => *i,
                _ => -1,
            },
        };
        let in_snapshot = offset_bool(&o, "snapshot") == Some(true)
            && offset_bool(&o, "snapshot_completed") != Some(true);
        // A snapshot a signal asked for resumes whatever the snapshot mode.
        let signalled = match offset_str(&o, "snapshot_signal") {
            Some(text) if in_snapshot => Some(SnapshotRequest::from_json(text).map_err(|e| {
                ConnectError::fatal(format!(
                    "the offset of an interrupted signalled snapshot holds a request that does not parse ({e}); reset the connector's offsets"
                ))
            })?),
            _ => None,
        };
        if in_snapshot && (policy.without_offset || signalled.is_some()) {
            // The snapshot resumes and then streams from where it started: make sure that point
            // is still in the oplog before copying the rest, not after.
            if let Some(t) = &token {
                match self.open_stream(Some(t.resume_token()?)).await {
                    Ok(_probe) => {}
                    Err(e)
                        if history_lost(&e) && policy.lost_position == LostPosition::Snapshot =>
                    {
                        tracing::warn!(error = %e, mode = ?self.cfg.snapshot_mode, "the interrupted snapshot's starting point is no longer in the oplog: snapshotting again from the start");
                        return self.start_snapshot(None, None).await;
                    }
                    Err(e)
                        if history_lost(&e)
                            && policy.lost_position == LostPosition::StreamFromNow =>
                    {
                        // The interrupted (signalled) snapshot belonged to the lost stream.
                        tracing::warn!("the interrupted signalled snapshot is dropped with the lost resume point; send the signal again");
                        return self.after_lost_history(&e.to_string()).await;
                    }
                    Err(e) if history_lost(&e) => {
                        return Err(ConnectError::fatal(format!(
                            "ChangeStreamHistoryLost: the interrupted snapshot's starting point is no longer in the server's oplog ({e}); the changes made since it began are gone. Snapshot again (snapshot.mode=when_needed does so automatically) or enlarge the oplog"
                        )));
                    }
                    Err(e) => {
                        return Err(classify(
                            "checking the interrupted snapshot's starting point".into(),
                            e,
                        ))
                    }
                }
            }
            let signalled = signalled.map(|request| (request, position));
            return self.start_snapshot(Some(o), signalled).await;
        }
        if policy.done_after_snapshot() {
            // initial_only (or configuration_based without streaming) after its snapshot.
            self.notes.initial_skipped();
            self.phase = Phase::Done;
            return Ok(());
        }
        if policy.every_start {
            // Streaming goes on from the new snapshot's starting point; what changed since
            // the stored one is in the snapshot.
            let mode = match self.cfg.snapshot_mode {
                SnapshotMode::Always => "snapshot.mode=always",
                _ => "snapshot.mode=configuration_based with snapshot.data",
            };
            tracing::info!("{mode}: taking a new snapshot before streaming");
            return self.start_snapshot(None, None).await;
        }
        self.position = position;
        let started = match self.start_streaming(token.as_ref()).await {
            Err(e)
                if e.message().contains("ChangeStreamHistoryLost")
                    && policy.lost_position != LostPosition::Fail =>
            {
                self.after_lost_history(e.message()).await
            }
            other => other,
        };
        // A lost resume point may have started a snapshot instead.
        if started.is_ok() && !matches!(self.phase, Phase::Snapshot(_)) {
            self.notes.initial_skipped();
        }
        started
    }

    /// The stored resume point is gone from the oplog (`history`, the server's error):
    /// snapshot again, stream on from now, or fail, as `snapshot.mode` says.
    async fn after_lost_history(&mut self, history: &str) -> Result<(), ConnectError> {
        match self.cfg.snapshot_mode.policy().lost_position {
            LostPosition::Snapshot => {
                tracing::warn!(error = %history, mode = ?self.cfg.snapshot_mode, "the resume point is no longer in the oplog: snapshotting again");
                self.start_snapshot(None, None).await
            }
            LostPosition::StreamFromNow => {
                tracing::warn!(error = %history, "the resume point is no longer in the oplog: the changes since then are lost; snapshot.on.data.error=true: streaming on from the server's current position");
                self.position = Position {
                    token: None,
                    sec: -1,
                    ord: -1,
                };
                self.start_streaming(None).await
            }
            LostPosition::Fail => Err(ConnectError::fatal(format!(
                "ChangeStreamHistoryLost: the stored resume point is no longer in the server's oplog ({history}); changes after it are gone. Snapshot again (snapshot.mode=when_needed does so automatically) or enlarge the oplog"
            ))),
        }
    }

    /// The stages after `$changeStream`, in Debezium's order: the oversize filter
    /// (`cursor.oversize.handling.mode=skip`) first, then the connector's own stage (the
    /// operation types it captures) and the user's `cursor.pipeline` as
    /// `cursor.pipeline.order` says. Databases and collections are filtered here, not by the
    /// server, so the include/exclude lists' regexes need no translation.
    fn pipeline(&self) -> Vec<Document> {
        let mut stages = Vec::new();
        if let OversizeHandling::Skip(threshold) = self.cfg.oversize {
            // A missing document (an insert's pre-image, a delete's post-image) has no size:
            // `$bsonSize` gives null, which sorts below every number.
            stages.push(doc! {"$match": {"$and": [
                {"$expr": {"$lte": [{"$bsonSize": "$fullDocument"}, threshold]}},
                {"$expr": {"$lte": [{"$bsonSize": "$fullDocumentBeforeChange"}, threshold]}},
            ]}});
        }
        let internal = doc! {"$match": {"operationType": {"$in": ["insert", "update", "replace", "delete", "invalidate"]}}};
        let user = self.cfg.user_pipeline.iter().cloned();
        match self.cfg.pipeline_order {
            PipelineOrder::InternalFirst => {
                stages.push(internal);
                stages.extend(user);
            }
            PipelineOrder::UserFirst => {
                stages.extend(user);
                stages.push(internal);
            }
            PipelineOrder::UserOnly => stages.extend(user),
        }
        if self.cfg.oversize == OversizeHandling::Split {
            // The server requires it last.
            stages.push(doc! {"$changeStreamSplitLargeEvent": {}});
        }
        stages
    }

    /// Opens a change stream (the `$changeStream` aggregation the driver's `watch` runs, read
    /// as whole replies) after `resume`, and reads its first reply.
    ///
    /// The token is passed as `startAfter`, never `resumeAfter`: the two start at the same
    /// place for an ordinary event's token, but only `startAfter` accepts the token of an
    /// `invalidate` event, which is what a stored offset holds when the records before a
    /// dropped database were the last ones committed (MongoDB 4.2 and later have it).
    async fn open_stream(
        &self,
        resume: Option<ResumeToken>,
    ) -> Result<OpenedStream, mongodb::error::Error> {
        self.open_stream_at(resume, None).await
    }

    /// [`Inner::open_stream`]; without a token, `at` (a cluster time) starts the stream there
    /// (`startAtOperationTime`) instead of at the end of the oplog.
    async fn open_stream_at(
        &self,
        resume: Option<ResumeToken>,
        at: Option<Timestamp>,
    ) -> Result<OpenedStream, mongodb::error::Error> {
        let mut stage = Document::new();
        if self.cfg.capture_mode.update_full() {
            // Debezium's two `capture.mode.full.update.type`s.
            let full = if self.cfg.post_image {
                "whenAvailable"
            } else {
                "updateLookup"
            };
            stage.insert("fullDocument", full);
        }
        if self.cfg.capture_mode.pre_image() {
            stage.insert("fullDocumentBeforeChange", "whenAvailable");
        }
        if let Some(t) = resume {
            let t = mongodb::bson::serialize_to_bson(&t)?;
            stage.insert("startAfter", t);
        } else if let Some(at) = at {
            stage.insert("startAtOperationTime", at);
        }
        let database = match &self.cfg.capture_database {
            Some(db) => self.client.database(db),
            None => {
                stage.insert("allChangesForCluster", true);
                self.client.database("admin")
            }
        };
        let mut pipeline = vec![doc! {"$changeStream": stage}];
        pipeline.extend(self.pipeline());
        let max_await = self
            .cfg
            .cursor_max_await
            .unwrap_or(self.cfg.poll_interval.max(Duration::from_millis(100)));
        let mut cursor = database
            .aggregate(pipeline)
            .max_await_time(max_await)
            // Responses of a few hundred KB (see snapshot::DEFAULT_FETCH).
            .batch_size(
                u32::try_from(self.cfg.max_batch_size)
                    .unwrap_or(u32::MAX)
                    .min(snapshots::DEFAULT_FETCH),
            )
            .batch()
            .await?;
        let first = cursor.next().await.transpose()?;
        Ok(OpenedStream { cursor, first })
    }

    /// How many change-stream replies wait for the task at most: `max.queue.size` events'
    /// worth, within 1 to 8 replies (a reply holds up to a fetch's worth of events).
    fn replies_queued(&self) -> usize {
        let per_reply = self
            .cfg
            .max_batch_size
            .clamp(1, snapshots::DEFAULT_FETCH as usize);
        (self.cfg.max_queue_size / per_reply).clamp(1, 8)
    }

    /// Starts the stream reader at `token`, or at the current end of the oplog.
    async fn start_streaming(&mut self, token: Option<&Token>) -> Result<(), ConnectError> {
        let resume = token.map(Token::resume_token).transpose()?;
        // An offset with a cluster time but no token (set through the offsets API, say) resumes
        // just after that time, as Debezium does with `startAtOperationTime`. The stored time is
        // that of the last change handed out, a whole transaction's, so the next one is after.
        let at = match (&resume, u32::try_from(self.position.sec)) {
            (None, Ok(time)) if time > 0 => Some(Timestamp {
                time,
                increment: u32::try_from(self.position.ord.max(0) + 1).unwrap_or(u32::MAX),
            }),
            _ => None,
        };
        if let Some(at) = at {
            tracing::info!(
                sec = at.time,
                ord = at.increment,
                "the stored offset has no resume token: starting at its cluster time"
            );
        }
        let stream = self.open_stream_at(resume, at).await.map_err(|e| {
            if history_lost(&e) {
                ConnectError::fatal(format!(
                    "ChangeStreamHistoryLost: the stored resume point is no longer in the server's oplog ({e}); changes after it are gone. Snapshot again (snapshot.mode=when_needed does so automatically) or enlarge the oplog"
                ))
            } else {
                classify("opening the change stream".into(), e)
            }
        })?;
        if self.position.token.is_none() {
            self.position.token = stream.resume_point();
        }
        let stages: Vec<String> = self.pipeline().iter().map(Document::to_string).collect();
        tracing::info!(resume = token.is_some(), scope = ?self.cfg.capture_database, pipeline = %stages.join(", "), "streaming changes");
        // A split event cut short by the old stream is read whole again from the new one.
        if self.split.is_some() {
            self.split = Some(Fragments::default());
        }
        let (tx, rx) = mpsc::channel(self.replies_queued());
        let reader = tokio::spawn(read_stream(stream, tx));
        self.stream = Some(Stream {
            rx,
            reader,
            reply: None,
        });
        self.phase = Phase::Stream;
        Ok(())
    }

    /// The captured collections a snapshot may copy, sorted by database then name: for the
    /// initial snapshot those `snapshot.include.collection.list` names (default all), for a
    /// `signalled` one all of them (its request picks).
    async fn captured_collections(
        &mut self,
        signalled: bool,
    ) -> Result<Vec<(String, String)>, ConnectError> {
        let dbs = match &self.cfg.capture_database {
            Some(db) => vec![db.clone()],
            None => self
                .client
                .list_database_names()
                .await
                .map_err(|e| classify("listing databases".into(), e))?,
        };
        let mut out = Vec::new();
        for db in dbs {
            if matches!(db.as_str(), "admin" | "config" | "local") {
                continue;
            }
            let names = self
                .client
                .database(&db)
                .list_collection_names()
                .filter(doc! {"type": "collection"})
                .await
                .map_err(|e| classify(format!("listing the collections of {db}"), e))?;
            for c in names {
                // A signal's request names its collections itself (as Debezium's blocking
                // snapshot does): snapshot.include.collection.list is for the initial one.
                if !c.starts_with("system.")
                    && self.cfg.captures(&db, &c)
                    && (signalled || self.cfg.snapshot_collections.accepts(&format!("{db}.{c}")))
                {
                    out.push((db.clone(), c));
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Starts (or, with `resume`, goes on with) a snapshot: of every captured collection, or of
    /// those a signal names (`signalled`, with the signal's position, where streaming goes on
    /// afterwards).
    async fn start_snapshot(
        &mut self,
        resume: Option<OffsetMap>,
        signalled: Option<(SnapshotRequest, Position)>,
    ) -> Result<(), ConnectError> {
        // Only the snapshot taken at start waits (not a signalled one); a stop meanwhile ends
        // the wait and the task does nothing more.
        if self.starting
            && signalled.is_none()
            && !wait_snapshot_delay(self.cfg.start_delays.snapshot, &self.stop, &self.waiting).await
        {
            self.phase = Phase::Done;
            return Ok(());
        }
        let (request, signal_position) = match signalled {
            Some((r, p)) => (Some(r), Some(p)),
            None => (None, None),
        };
        // The resume point streaming starts at: the signal's, or before the (first) snapshot.
        let stored = resume.as_ref().and_then(|o| offset_str(o, "resume_token"));
        let start = match (signal_position, stored) {
            (Some(p), _) => p,
            (None, Some(t)) => Position {
                token: Some(Token::Text(t.to_owned())),
                sec: -1,
                ord: -1,
            },
            (None, None) => {
                let probe = self.open_stream(None).await.map_err(|e| {
                    classify("opening the change stream before the snapshot".into(), e)
                })?;
                let token = probe.resume_point();
                drop(probe);
                Position {
                    token,
                    sec: -1,
                    ord: -1,
                }
            }
        };
        let done: Vec<String> = resume
            .as_ref()
            .and_then(|o| offset_str(o, "snapshot_done"))
            .and_then(|t| serde_json::from_str(t).ok())
            .unwrap_or_default();
        let resume_at: Option<(String, Option<Bson>)> = resume.as_ref().and_then(|o| {
            let c = offset_str(o, "snapshot_collection")?.to_owned();
            Some((
                c,
                offset_str(o, "snapshot_after").and_then(snapshots::decode_id),
            ))
        });
        let names = self.captured_collections(request.is_some()).await?;
        if let Some(r) = &request {
            if !names.iter().any(|(db, c)| r.names(&format!("{db}.{c}"))) {
                tracing::warn!(collections = ?r.collections, "execute-snapshot signal: no captured collection matches the request; nothing to copy");
            }
        }
        let mut collections = Vec::new();
        for (db, c) in names {
            let ns = format!("{db}.{c}");
            if done.contains(&ns) || request.as_ref().is_some_and(|r| !r.names(&ns)) {
                continue;
            }
            let estimated = self
                .client
                .database(&db)
                .collection::<Document>(&c)
                .estimated_document_count()
                .await
                .map_err(|e| classify(format!("counting {ns}"), e))?;
            let bounds = if estimated > self.cfg.snapshot_chunk_documents {
                snapshots::object_id_bounds(&self.client, &db, &c).await?
            } else {
                None
            };
            let rules = self.rules(&db, &c);
            let filter = match &request {
                Some(r) => r.condition(&ns).cloned(),
                None => self
                    .cfg
                    .snapshot_filters
                    .iter()
                    .find(|(name, _)| *name == ns)
                    .map(|(_, query)| query.clone()),
            }
            .map(Arc::new);
            if let Some(query) = &filter {
                tracing::info!(collection = %ns, %query, "copying only the documents matching the snapshot query");
            }
            collections.push((
                SnapshotCollection {
                    db,
                    collection: c,
                    ranged: bounds.is_some(),
                    estimated,
                    rules,
                    filter,
                },
                bounds,
            ));
        }
        let mut chunks = Vec::new();
        for (i, (c, bounds)) in collections.iter().enumerate() {
            let after = resume_at
                .as_ref()
                .filter(|(ns, _)| *ns == c.ns())
                .and_then(|(_, a)| a.clone());
            chunks.extend(snapshots::plan(
                i,
                c,
                *bounds,
                after,
                self.cfg.snapshot_chunk_documents,
            ));
        }
        let collections: Vec<SnapshotCollection> =
            collections.into_iter().map(|(c, _)| c).collect();
        let schemas: Vec<Arc<CollectionSchemas>> = collections
            .iter()
            .map(|c| self.events.collection(&c.db, &c.collection))
            .collect();
        let threads = self.cfg.snapshot_max_threads.clamp(1, chunks.len().max(1));
        tracing::info!(
            collections = collections.len(),
            chunks = chunks.len(),
            threads,
            resumed = resume.is_some(),
            done = done.len(),
            signalled = request.is_some(),
            "snapshot started"
        );
        // `collections` are those still to copy; `done` were completed by an earlier run.
        self.progress.start(
            (collections.len() + done.len()) as u64,
            collections.iter().map(|c| c.estimated).sum(),
            done.len() as u64,
            0,
        );
        self.notes.initial_started();
        let collections = Arc::new(collections);
        let chunks = Arc::new(chunks);
        let readers = Readers::start(
            self.client.clone(),
            threads,
            collections.clone(),
            chunks.clone(),
            self.cfg.snapshot_fetch_size,
        );
        let n = collections.len();
        self.phase = Phase::Snapshot(Box::new(Snapshot {
            collections,
            schemas,
            chunks,
            readers,
            current: None,
            announced: None,
            docs: Vec::new().into_iter(),
            doc_collection: 0,
            pending: None,
            done_json: serde_json::to_string(&done).unwrap_or_else(|_| "[]".into()),
            done,
            start,
            source_blocks: vec![None; n],
            open: false,
            rows: 0,
            started: Instant::now(),
            then_stream: request.is_some() || self.cfg.snapshot_mode.policy().streams,
            signal: request.map(|r| r.to_json()),
        }));
        Ok(())
    }

    fn snapshot_offset(s: &Snapshot, tail: &SnapshotTail) -> OffsetMap {
        let mut o = s.start.offset();
        o.insert("snapshot".into(), true.into());
        if let Some(request) = &s.signal {
            o.insert("snapshot_signal".into(), request.clone().into());
        }
        if tail.last {
            o.insert("snapshot_completed".into(), true.into());
        }
        let done = if tail.done == s.done.len() {
            s.done_json.clone()
        } else {
            serde_json::to_string(&s.done[..tail.done]).unwrap_or_else(|_| "[]".into())
        };
        o.insert("snapshot_done".into(), done.into());
        o.insert(
            "snapshot_collection".into(),
            s.collections[tail.collection].ns().into(),
        );
        if let Some(id) = &tail.id {
            o.insert("snapshot_after".into(), snapshots::encode_id(id).into());
        }
        o
    }

    fn snapshot_record(
        &self,
        s: &mut Snapshot,
        ci: usize,
        doc: Rendered,
        last: bool,
    ) -> (SourceRecord, SnapshotTail) {
        let tail = SnapshotTail {
            collection: ci,
            id: doc.id,
            done: s.done.len(),
            last,
        };
        let (ms, us, ns) = now();
        let c = s.schemas[ci].clone();
        let info = |marker| SourceInfo {
            ts_ms: ms,
            ts_us: us,
            ts_ns: ns,
            snapshot: marker,
            ord: -1,
            lsid: None,
            txn_number: None,
            wall_time: None,
        };
        // The block is shared per collection and refreshed with each batch (its times are the
        // read time of the batch).
        let source = if last {
            self.events.source(&c, &info("last"))
        } else {
            match &s.source_blocks[ci] {
                Some(b) => b.clone(),
                None => {
                    let b = self.events.source(&c, &info("true")).into_shared();
                    s.source_blocks[ci] = Some(b.clone());
                    b
                }
            }
        };
        let rec = self
            .events
            .record(&c, doc.key, None, Some(doc.json), None, source, "r", ms);
        (rec, tail)
    }

    async fn poll_snapshot(&mut self) -> Result<SourceBatch, ConnectError> {
        let Phase::Snapshot(mut s) = std::mem::replace(&mut self.phase, Phase::Done) else {
            return Ok(SourceBatch::empty());
        };
        let mut out = Vec::new();
        let mut tail = None;
        let finished = match self.fill_snapshot(&mut s, &mut out, &mut tail).await {
            Ok(f) => f,
            Err(e) => {
                if let Some((ci, _)) = &s.current {
                    let c = &s.collections[s.chunks[*ci].collection];
                    self.notes.initial_table_failed(&c.ns());
                }
                self.notes.initial_aborted();
                self.phase = Phase::Snapshot(s);
                return Err(e);
            }
        };
        if let (Some(last), Some(tail)) = (out.last_mut(), &tail) {
            last.source_partition = self.events.partition.clone();
            last.source_offset = Self::snapshot_offset(&s, tail);
            let ns = s.collections[tail.collection].ns();
            s.open = !tail.last
                && !s.collections[tail.collection].ranged
                && !s.done[..tail.done].contains(&ns);
        }
        if !finished {
            let boundary = if s.open {
                Boundary::Open
            } else {
                Boundary::Commit
            };
            self.phase = Phase::Snapshot(s);
            return Ok(SourceBatch {
                records: out,
                boundary,
                caught_up: false,
            });
        }
        tracing::info!(
            documents = s.rows,
            collections = s.collections.len(),
            elapsed_ms = s.started.elapsed().as_millis() as u64,
            "snapshot finished"
        );
        self.progress.finish();
        self.notes.initial_completed();
        let start = s.start.clone();
        let then_stream = s.then_stream;
        let signalled = s.signal.is_some();
        drop(s);
        let streaming_delay = self.cfg.start_delays.streaming;
        if then_stream {
            self.position = start;
            if !signalled && !streaming_delay.is_zero() {
                self.phase = Phase::StreamAt(hold_streaming(streaming_delay, &self.waiting));
            } else {
                self.stream_after_snapshot().await?;
            }
        } else {
            self.phase = Phase::Done;
        }
        // The snapshot's end is committed now, not after the stream's first (waiting) poll.
        Ok(SourceBatch::caught_up(out))
    }

    /// Opens the change stream at the finished snapshot's starting point (`self.position`).
    async fn stream_after_snapshot(&mut self) -> Result<(), ConnectError> {
        let token = self.position.token.clone();
        match self.start_streaming(token.as_ref()).await {
            Err(e)
                if e.message().contains("ChangeStreamHistoryLost")
                    && self.cfg.snapshot_mode.policy().lost_position != LostPosition::Fail =>
            {
                tracing::warn!(error = %e, "the snapshot's starting point left the oplog while it ran or waited");
                self.after_lost_history(e.message()).await
            }
            other => other,
        }
    }

    async fn fill_snapshot(
        &mut self,
        s: &mut Snapshot,
        out: &mut Vec<SourceRecord>,
        tail: &mut Option<SnapshotTail>,
    ) -> Result<bool, ConnectError> {
        let limit = self.cfg.max_batch_size.max(1);
        loop {
            if out.len() >= limit {
                return Ok(false);
            }
            if let Some(doc) = s.docs.next() {
                let ci = s.doc_collection;
                s.rows += 1;
                self.progress.add_rows(1);
                if let Some((pci, prev)) = s.pending.replace((ci, doc)) {
                    let (rec, t) = self.snapshot_record(s, pci, prev, false);
                    out.push(rec);
                    *tail = Some(t);
                }
                continue;
            }
            if s.current.is_none() {
                match s.readers.receivers.pop_front() {
                    Some(c) => {
                        let ci = s.chunks[c.0].collection;
                        if s.announced != Some(ci) {
                            s.announced = Some(ci);
                            // Debezium's MongoDB connector names the collection only.
                            self.notes
                                .initial_table_started(&s.collections[ci].ns(), None);
                        }
                        s.current = Some(c);
                    }
                    None => {
                        if let Some((ci, doc)) = s.pending.take() {
                            let (rec, t) = self.snapshot_record(s, ci, doc, true);
                            out.push(rec);
                            *tail = Some(t);
                        }
                        return Ok(true);
                    }
                }
            }
            let Some((ci, rx)) = s.current.as_mut() else {
                continue;
            };
            let ci = *ci;
            let msg = if out.is_empty() {
                rx.recv().await
            } else {
                match rx.try_recv() {
                    Ok(m) => Some(m),
                    Err(mpsc::error::TryRecvError::Empty) => return Ok(false),
                    Err(mpsc::error::TryRecvError::Disconnected) => None,
                }
            };
            match msg {
                Some(ChunkMsg::Docs(docs)) => {
                    s.docs = docs.into_iter();
                    s.doc_collection = s.chunks[ci].collection;
                    // Fresh read times for this batch's shared source blocks.
                    s.source_blocks[s.doc_collection] = None;
                }
                Some(ChunkMsg::Failed(e)) => return Err(e),
                None => {
                    return Err(ConnectError::retriable(
                        "a snapshot reader ended unexpectedly",
                    ))
                }
                Some(ChunkMsg::Done) => {
                    s.current = None;
                    let chunk = &s.chunks[ci];
                    let c = &s.collections[chunk.collection];
                    tracing::info!(collection = %c.ns(), chunk = chunk.index + 1, chunks = chunk.of, documents = s.rows, estimated = c.estimated, "snapshot chunk done");
                    if chunk.index + 1 == chunk.of {
                        self.progress.table_done();
                        self.notes.initial_table_done(&c.ns(), None);
                        s.done.push(c.ns());
                        s.done_json =
                            serde_json::to_string(&s.done).unwrap_or_else(|_| "[]".into());
                    }
                }
            }
        }
    }

    /// Hands out the held record (the end of the transaction in progress); with `with_offset`
    /// it carries the offset after it (a later record of the same batch covers it otherwise).
    fn release_held(&mut self, out: &mut Vec<SourceRecord>, with_offset: bool) {
        let Some((mut rec, _, position)) = self.held.take() else {
            return;
        };
        // Only a record that carries the offset needs the partition (cloned per call).
        let (partition, offset) = if with_offset {
            (self.events.partition.clone(), position.offset())
        } else {
            (OffsetMap::new(), OffsetMap::new())
        };
        match self
            .txmeta
            .as_mut()
            .and_then(|t| t.end(&partition, offset.clone()))
        {
            Some(end) => {
                out.push(rec);
                out.push(end);
            }
            None => {
                if with_offset {
                    rec.source_partition = partition;
                    rec.source_offset = offset;
                }
                out.push(rec);
            }
        }
    }

    /// Hands out `rec` (part of transaction `txn`; `position` is the resume point after it),
    /// holding the last record of the transaction in progress.
    fn push(
        &mut self,
        mut rec: SourceRecord,
        txn: Option<TxnId>,
        position: &Position,
        out: &mut Vec<SourceRecord>,
    ) {
        let same_txn = txn.is_some() && self.held.as_ref().is_some_and(|(_, t, _)| *t == txn);
        if !same_txn {
            if txn.is_some() && self.held.is_some() {
                // The held record ends its transaction and another one starts: the batch can
                // end after it (with its offset), the new one's records go to the next poll.
                // Without this, back-to-back transactions never reach a commit point.
                self.release_held(out, true);
                self.ended_transaction = true;
            } else {
                // The held record ends its transaction; the batch's last record carries the
                // offset.
                self.release_held(out, false);
            }
        }
        // Transaction metadata for multi-document transactions only: a change outside one
        // gets no BEGIN/END and a null `transaction` block, as Debezium's TransactionMonitor
        // does for an event without a transaction id.
        if let (Some(t), Some((lsid, n))) = (self.txmeta.as_mut(), txn.as_ref()) {
            let source = rec
                .value
                .as_struct()
                .and_then(|v| v.get("source"))
                .and_then(|s| s.as_struct());
            if !t.is_open() {
                let id = format!("{lsid}:{n}");
                let ts = match source.and_then(|s| s.get("ts_ms")) {
                    Some(headwater_api::Value::Int64(ms)) => *ms,
                    _ => 0,
                };
                t.begin(id, ts);
            }
            let collection = source.and_then(|s| {
                Some(format!(
                    "{}.{}",
                    s.get("db")?.as_str()?,
                    s.get("collection")?.as_str()?
                ))
            });
            if let Some(c) = collection {
                if let Some(begin) = t.annotate(&mut rec, &c) {
                    out.push(begin);
                }
            }
        }
        if let Some((prev, _, _)) = self.held.replace((rec, txn, position.clone())) {
            out.push(prev);
        }
    }

    /// Moves the resume point past a change that gives no record (an uncaptured collection's, a
    /// signal's). Inside the transaction in progress (`txn` is the held record's) it does not
    /// end that transaction; otherwise the held record goes out.
    fn pass_over(&mut self, position: Position, txn: Option<&TxnId>, out: &mut Vec<SourceRecord>) {
        let held_txn = self.held.as_ref().and_then(|(_, t, _)| t.as_ref());
        if held_txn.is_none() || held_txn != txn {
            self.release_held(out, false);
        }
        self.position = position;
    }

    /// Acts on a change of the signal collection (`inserted`: the document of an insert; other
    /// changes there are no signals). An `execute-snapshot` is kept for `poll_stream`, which
    /// ends its batch before it and starts the snapshot; its position is taken only by the
    /// snapshot, so a crash before the snapshot's first commit reads the signal again.
    fn take_signal(
        &mut self,
        inserted: Option<Document>,
        position: Position,
        txn: Option<TxnId>,
        out: &mut Vec<SourceRecord>,
    ) {
        let in_transaction = txn.is_some();
        let skip = |this: &mut Self, out: &mut Vec<SourceRecord>| {
            this.pass_over(position.clone(), txn.as_ref(), out);
        };
        let Some(doc) = inserted else {
            return skip(self, out);
        };
        let signal = crate::signal::parse(&doc);
        let watermark = matches!(
            signal,
            Signal::Incremental(
                IncrementalSignal::WindowOpen(_) | IncrementalSignal::WindowClose(_)
            )
        );
        if !self.cfg.source_signals && !watermark {
            // The source channel is off: the collection holds the watermarks only.
            return skip(self, out);
        }
        match signal {
            // Acting on it mid-transaction would cut the transaction in two around the copy.
            Signal::ExecuteSnapshot(_) if in_transaction => {
                tracing::warn!(document = %doc, "execute-snapshot signal inserted inside a multi-document transaction: not acted on; insert signals on their own");
                skip(self, out);
            }
            Signal::ExecuteSnapshot(request) if request.incremental => {
                tracing::info!(collections = ?request.collections, conditions = ?request.conditions, "execute-snapshot signal of type incremental: copying the collections in chunks while streaming goes on");
                match &mut self.incremental_request {
                    // Several in one poll: the later ones are started after it.
                    Some(_) => {
                        tracing::warn!(collections = ?request.collections, "a second incremental execute-snapshot signal in one batch: not acted on; send it again")
                    }
                    None => self.incremental_request = Some(request),
                }
                skip(self, out);
            }
            Signal::Incremental(signal) => {
                self.on_incremental_signal(signal, position, out);
            }
            Signal::ExecuteSnapshot(request) => {
                // The record held back stays held: poll_stream hands it out with the offset
                // before the signal when it ends the batch there.
                tracing::info!(collections = ?request.collections, conditions = ?request.conditions, "execute-snapshot signal: snapshotting the collections it names, then streaming on after the signal");
                self.signal = Some((request, position));
            }
            Signal::Log(message) => {
                tracing::info!(%message, "log signal");
                skip(self, out);
            }
            Signal::Unsupported(kind, why) => {
                tracing::warn!(signal = %kind, %why, document = %doc, "signal not acted on");
                skip(self, out);
            }
        }
    }

    /// Between transactions while streaming: acts on the signals written to the file channel
    /// since it was read last, as on inserts into the signal collection at the position the
    /// stream has reached (a blocking `execute-snapshot` ends the poll there; watermarks
    /// belong in the signal collection and are ignored here).
    fn read_file_signals(&mut self) {
        let in_transaction = self.held.as_ref().is_some_and(|(_, t, _)| t.is_some());
        if !matches!(self.phase, Phase::Stream) || in_transaction || self.signal.is_some() {
            return;
        }
        let Some(signals) = self.file_signals.as_mut().map(FileSignals::due) else {
            return;
        };
        for s in signals {
            let mut doc = Document::new();
            doc.insert("id", s.id.map_or(Bson::Null, Bson::String));
            doc.insert("type", s.kind.map_or(Bson::Null, Bson::String));
            doc.insert("data", s.data.map_or(Bson::Null, Bson::String));
            match crate::signal::parse(&doc) {
                Signal::ExecuteSnapshot(request) if request.incremental => {
                    tracing::info!(collections = ?request.collections, "execute-snapshot signal of type incremental from the signal file");
                    match &self.incremental_request {
                        Some(_) => {
                            tracing::warn!(collections = ?request.collections, "a second incremental execute-snapshot signal in one read of the signal file: not acted on; send it again")
                        }
                        None => self.incremental_request = Some(request),
                    }
                }
                Signal::ExecuteSnapshot(request) => match &self.signal {
                    Some(_) => {
                        tracing::warn!(collections = ?request.collections, "a second blocking execute-snapshot signal in one read of the signal file: not acted on; send it again")
                    }
                    None => {
                        tracing::info!(collections = ?request.collections, "execute-snapshot signal from the signal file: snapshotting the collections it names, then streaming on");
                        self.signal = Some((request, self.position.clone()));
                    }
                },
                Signal::Incremental(
                    IncrementalSignal::WindowOpen(_) | IncrementalSignal::WindowClose(_),
                ) => {
                    tracing::warn!("a watermark in the signal file is ignored (incremental snapshots write theirs into the signal collection)");
                }
                Signal::Incremental(steering) => {
                    // Stop, pause or resume: no window closes here.
                    let _ = incremental::on_signal(
                        steering,
                        &mut self.window,
                        &mut self.incremental,
                        &self.progress,
                        &self.notes,
                    );
                }
                Signal::Log(message) => tracing::info!(%message, "log signal"),
                Signal::Unsupported(kind, why) => {
                    tracing::warn!(signal = %kind, %why, "signal from the signal file not acted on")
                }
            }
        }
    }

    /// Acts on a watermark or a stop, pause or resume signal of the incremental snapshot (a
    /// change of the signal collection at `position`, giving no record of its own).
    fn on_incremental_signal(
        &mut self,
        signal: IncrementalSignal,
        position: Position,
        out: &mut Vec<SourceRecord>,
    ) {
        if let IncrementalSignal::WindowOpen(id) = &signal {
            if let Some(p) = self.pending_chunk.as_mut().filter(|p| &p.id == id) {
                p.opened = true;
                self.chunk_to_read = true;
            }
        }
        let closed = incremental::on_signal(
            signal,
            &mut self.window,
            &mut self.incremental,
            &self.progress,
            &self.notes,
        );
        // The watermark itself gives no record; a closed chunk's records go out at its
        // position.
        self.pass_over(position.clone(), None, out);
        for rec in closed.into_iter().flat_map(|w| w.into_rows()) {
            self.push(rec, None, &position, out);
        }
    }

    /// Starts copying the collections an incremental request names (added to the incremental
    /// snapshot under way, if any), unless the server would refuse its conditions.
    async fn start_incremental(&mut self, request: SnapshotRequest) -> Result<(), ConnectError> {
        if let Some(why) = self.signal_refused(&request).await? {
            tracing::warn!(collections = ?request.collections, %why, "execute-snapshot signal not acted on");
            return Ok(());
        }
        let collections = self
            .captured_collections(true)
            .await?
            .into_iter()
            .filter(|(db, c)| request.names(&format!("{db}.{c}")));
        let chunk_size = self.cfg.incremental_chunk_size;
        incremental::queue(
            &mut self.incremental,
            &request,
            collections,
            chunk_size,
            &self.progress,
            &self.notes,
        );
        Ok(())
    }

    /// Reads the incremental snapshot's next chunk between two watermarks, unless one is held
    /// already, the snapshot is paused or there is none.
    async fn advance_incremental(&mut self) -> Result<(), ConnectError> {
        self.chunk_to_read = false;
        loop {
            if self.window.is_some() {
                return Ok(());
            }
            let Some(table) =
                incremental::table_to_read(&mut self.incremental, &self.progress, &self.notes)
            else {
                return Ok(());
            };
            // A pending chunk of a table the snapshot no longer copies first (stopped) is
            // dropped; one whose open watermark the stream has not passed yet waits.
            if let Some(p) = &self.pending_chunk {
                if p.table != table {
                    self.pending_chunk = None;
                } else if !p.opened {
                    return Ok(());
                }
            }
            let held = match self.pending_chunk.take() {
                Some(pending) => self.read_incremental_chunk(pending).await?,
                None => self.open_incremental_chunk(&table).await?,
            };
            if held {
                if let Some(w) = &self.window {
                    incremental::chunk_read(
                        &self.incremental,
                        &self.notes,
                        &w.last_key,
                        str::to_owned,
                    );
                }
                return Ok(());
            }
            let scan = std::mem::replace(&mut self.scan_status, TableScanStatus::Succeeded);
            incremental::table_done(&mut self.incremental, &self.progress, &self.notes, scan);
        }
    }

    /// How a failed read of an incremental snapshot's collection ends: a query the server
    /// refuses skips the collection (`Ok(false)`: logged, notified, not retried forever); any
    /// other failure is the task's error.
    fn chunk_read_failed(
        &mut self,
        name: &str,
        what: &str,
        e: mongodb::error::Error,
    ) -> Result<bool, ConnectError> {
        if matches!(*e.kind, mongodb::error::ErrorKind::Command(_)) {
            tracing::error!(collection = %name, error = %e, "incremental snapshot: {what} failed; the collection is skipped");
            self.scan_status = TableScanStatus::SqlException;
            return Ok(false);
        }
        Err(classify(format!("{what} of {name}"), e))
    }

    /// Starts the next chunk of a collection: writes its open watermark document and keeps
    /// the chunk's query in [`Inner::pending_chunk`] (read by [`Self::read_incremental_chunk`]
    /// once the stream has passed the watermark); false when the collection has nothing left
    /// (or is skipped: a query the server refuses is logged, not retried forever).
    async fn open_incremental_chunk(&mut self, table: &TableRequest) -> Result<bool, ConnectError> {
        let name = table.name();
        let Some((signal_db, signal_coll)) = self.signal_ns.clone() else {
            tracing::error!("incremental snapshot abandoned: signal.data.collection is not set, so there is no collection to write its watermarks into");
            incremental::abandon(&mut self.incremental, &self.progress, &self.notes);
            return Ok(true);
        };
        if self.namespace(&table.schema, &table.table).is_none() {
            tracing::warn!(collection = %name, "incremental snapshot: the collection is no longer captured; skipped");
            self.scan_status = TableScanStatus::UnknownSchema;
            return Ok(false);
        }
        let condition = match table
            .condition
            .as_deref()
            .map(|f| crate::signal::query_of(&name, f))
        {
            None => None,
            Some(Ok(q)) => Some(q),
            Some(Err(why)) => {
                tracing::error!(collection = %name, %why, "incremental snapshot: the condition is not a query; skipped");
                self.scan_status = TableScanStatus::SqlException;
                return Ok(false);
            }
        };
        let coll = self
            .client
            .database(&table.schema)
            .collection::<mongodb::bson::RawDocumentBuf>(&table.table);
        let id_of = |text: &str| -> Option<Bson> {
            serde_json::from_str::<serde_json::Value>(text)
                .ok()
                .and_then(|v| Bson::try_from(v).ok())
        };
        let max = match self
            .incremental
            .as_ref()
            .and_then(|p| p.max.as_ref()?.first().cloned())
        {
            Some(max) => max,
            None => {
                let found = coll
                    .find_one(condition.clone().unwrap_or_default())
                    .sort(doc! {"_id": -1})
                    .projection(doc! {"_id": 1})
                    .await;
                match found {
                    Ok(None) => {
                        self.scan_status = TableScanStatus::Empty;
                        return Ok(false);
                    }
                    Ok(Some(d)) => {
                        let Some(id) = d
                            .get("_id")
                            .ok()
                            .flatten()
                            .and_then(|v| Bson::try_from(v).ok())
                        else {
                            return Ok(false);
                        };
                        let max = id.into_canonical_extjson().to_string();
                        if let Some(p) = self.incremental.as_mut() {
                            p.max = Some(vec![max.clone()]);
                        }
                        max
                    }
                    Err(e) => return self.chunk_read_failed(&name, "reading the largest _id", e),
                }
            }
        };
        let Some(max_id) = id_of(&max) else {
            tracing::error!(collection = %name, "incremental snapshot: the largest _id in the offsets does not parse; skipped");
            self.scan_status = TableScanStatus::SqlException;
            return Ok(false);
        };
        let after = self
            .incremental
            .as_ref()
            .and_then(|p| p.after.as_ref()?.first().cloned())
            .and_then(|a| id_of(&a));
        let mut parts = vec![doc! {"_id": {"$lte": max_id}}];
        if let Some(a) = after {
            parts.push(doc! {"_id": {"$gt": a}});
        }
        if let Some(c) = condition {
            parts.push(c);
        }
        self.chunks_read += 1;
        let chunk = incremental::chunk_id(self.chunks_read);
        let signals = self
            .client
            .database(&signal_db)
            .collection::<Document>(&signal_coll);
        if let Err(e) = signals.insert_one(watermark_document(&chunk, true)).await {
            if matches!(
                *e.kind,
                mongodb::error::ErrorKind::Command(_) | mongodb::error::ErrorKind::Write(_)
            ) {
                tracing::error!(error = %e, "incremental snapshot abandoned: it needs to insert documents into the signal collection");
                incremental::abandon(&mut self.incremental, &self.progress, &self.notes);
                return Ok(true);
            }
            return Err(classify(
                "inserting an incremental snapshot watermark".into(),
                e,
            ));
        }
        self.pending_chunk = Some(PendingChunk {
            id: chunk,
            table: table.clone(),
            filter: doc! {"$and": parts},
            opened: false,
        });
        Ok(true)
    }

    /// Reads a chunk whose open watermark the stream has passed into [`Inner::window`] (open)
    /// and writes its close watermark; false when the collection has nothing left (or is
    /// skipped, as in [`Self::open_incremental_chunk`]).
    async fn read_incremental_chunk(
        &mut self,
        pending: PendingChunk,
    ) -> Result<bool, ConnectError> {
        let PendingChunk {
            id: chunk,
            table,
            filter,
            ..
        } = pending;
        let name = table.name();
        let Some((signal_db, signal_coll)) = self.signal_ns.clone() else {
            return Ok(false);
        };
        let Some((rules, schemas)) = self.namespace(&table.schema, &table.table) else {
            tracing::warn!(collection = %name, "incremental snapshot: the collection is no longer captured; skipped");
            self.scan_status = TableScanStatus::UnknownSchema;
            return Ok(false);
        };
        let coll = self
            .client
            .database(&table.schema)
            .collection::<mongodb::bson::RawDocumentBuf>(&table.table);
        let found = coll
            .find(filter)
            .sort(doc! {"_id": 1})
            .limit(self.cfg.incremental_chunk_size as i64)
            .await;
        let mut cursor = match found {
            Ok(c) => c,
            Err(e) => return self.chunk_read_failed(&name, "reading a chunk", e),
        };
        let (ms, us, ns) = now();
        let info = SourceInfo {
            ts_ms: ms,
            ts_us: us,
            ts_ns: ns,
            snapshot: "incremental",
            ord: -1,
            lsid: None,
            txn_number: None,
            wall_time: None,
        };
        let source = self.events.source(&schemas, &info).into_shared();
        let mut rows = Vec::new();
        let mut last = None;
        while let Some(doc) = cursor.next().await {
            let doc = match doc {
                Ok(d) => d,
                Err(e) => return self.chunk_read_failed(&name, "reading a chunk", e),
            };
            let (id, key, json) = snapshots::render(&doc, &rules, true)
                .map_err(|e| ConnectError::data(format!("a document of {name}: {e}")))?;
            last = id;
            let rec = self.events.record(
                &schemas,
                key.clone(),
                None,
                Some(json),
                None,
                source.clone(),
                "r",
                ms,
            );
            rows.push((key, rec));
        }
        let signals = self
            .client
            .database(&signal_db)
            .collection::<Document>(&signal_coll);
        let open_id = format!("{chunk}-open");
        let Some(last) = last else {
            if self.cfg.watermarks_deleted {
                // The collection stays empty; the stream ignores the deletion (no window of
                // this chunk is held).
                signals
                    .delete_one(doc! {"_id": &open_id})
                    .await
                    .map_err(|e| {
                        classify(
                            "deleting an incremental snapshot's open watermark".into(),
                            e,
                        )
                    })?;
            }
            return Ok(false);
        };
        // INSERT_DELETE: deleting the open document closes the window; if it is gone already
        // (a cleanup of the collection, say) a close document is inserted instead, which the
        // stream reads under either strategy.
        let mut deleted = false;
        if self.cfg.watermarks_deleted {
            deleted = signals
                .delete_one(doc! {"_id": &open_id})
                .await
                .map_err(|e| {
                    classify(
                        "deleting an incremental snapshot's open watermark".into(),
                        e,
                    )
                })?
                .deleted_count
                > 0;
        }
        if !deleted {
            signals
                .insert_one(watermark_document(&chunk, false))
                .await
                .map_err(|e| classify("inserting an incremental snapshot watermark".into(), e))?;
        }
        tracing::debug!(collection = %name, chunk = %chunk, documents = rows.len(), "incremental snapshot chunk read");
        let ns = Arc::new((table.schema.clone(), table.table.clone()));
        let last = vec![last.into_canonical_extjson().to_string()];
        let mut window = incremental::Window::new(chunk, ns, rows, last);
        // The stream passed the open watermark before the read.
        window.open = true;
        self.window = Some(window);
        Ok(true)
    }

    /// After a resumable stream failure: reopens the stream now when the poll holds no records
    /// (`true`: read on), else leaves that to the next poll so the records in hand go out
    /// first (`false`: end the poll).
    async fn reopen_now_or_next_poll(
        &mut self,
        nothing_in_hand: bool,
    ) -> Result<bool, ConnectError> {
        if nothing_in_hand {
            self.reopen_stream().await?;
            return Ok(true);
        }
        self.stream = None;
        self.reopen_pending = true;
        Ok(false)
    }

    /// Opens the change stream again after the last change handed out (`self.position`),
    /// replacing the one that failed. Any failure is retriable: the engine's restart then
    /// decides from the committed offset (history lost, `when_needed`, ...).
    async fn reopen_stream(&mut self) -> Result<(), ConnectError> {
        self.stream = None;
        self.reopens += 1;
        let token = self.position.token.clone();
        self.start_streaming(token.as_ref()).await.map_err(|e| {
            ConnectError::retriable(format!(
                "reopening the change stream: {}; resuming at the last committed offset",
                e.message()
            ))
        })
    }

    /// Why the server would refuse a signal's request, if it would: each additional condition
    /// is tried on a captured collection it applies to (`find(...).limit(1)`), so a query the
    /// server rejects is reported once instead of failing every restart of the copy. A
    /// connection error is returned as an error (the signal is then read again).
    async fn signal_refused(
        &mut self,
        request: &SnapshotRequest,
    ) -> Result<Option<String>, ConnectError> {
        if request.conditions.is_empty() {
            return Ok(None);
        }
        for (db, c) in self.captured_collections(true).await? {
            let ns = format!("{db}.{c}");
            let Some(query) = request.condition(&ns).filter(|_| request.names(&ns)) else {
                continue;
            };
            let coll = self.client.database(&db).collection::<Document>(&c);
            let tried = async {
                let mut cursor = coll
                    .find(query.clone())
                    .limit(1)
                    .max_time(Duration::from_secs(5))
                    .await?;
                cursor.advance().await.map(|_| ())
            }
            .await;
            match tried {
                Ok(()) => {}
                Err(e) => match &*e.kind {
                    // The query took long to find nothing: it parses.
                    mongodb::error::ErrorKind::Command(c) if c.code == 50 => {}
                    // The server's verdict on the query itself: BadValue (unknown operators),
                    // FailedToParse, TypeMismatch, IndexNotFound ($text without an index).
                    mongodb::error::ErrorKind::Command(c) if matches!(c.code, 2 | 9 | 14 | 27) => {
                        return Ok(Some(format!("the server refuses the query for {ns}: {e}")));
                    }
                    // Anything else (a failover, a shutdown, the network) may pass: the
                    // signal is read again after the engine's restart.
                    _ => {
                        return Err(ConnectError::retriable(format!(
                            "trying the signal's query on {ns}: {e}"
                        )))
                    }
                },
            }
        }
        Ok(None)
    }

    /// Handles one change event (its raw BSON); returns whether it invalidated the stream.
    fn handle_event(
        &mut self,
        ev: &[u8],
        out: &mut Vec<SourceRecord>,
    ) -> Result<bool, ConnectError> {
        let bad =
            |what: &str, e: String| ConnectError::data(format!("a change event's {what}: {e}"));
        let fields = EventFields::read(ev).map_err(|e| bad("fields", e.0))?;
        // The stream delivers again.
        self.reopens = 0;
        let get = |k: &str| fields.get(k).map_err(|e| bad(k, e.0));
        let token = match get("_id")? {
            Some(RawBsonRef::Document(d)) => Token::Bson(Bytes::copy_from_slice(d.as_bytes())),
            _ => {
                return Err(ConnectError::data(
                    "a change event without its resume token (_id)",
                ))
            }
        };
        let (sec, ord) = match get("clusterTime")? {
            Some(RawBsonRef::Timestamp(t)) => (i64::from(t.time), i64::from(t.increment)),
            _ => (-1, -1),
        };
        let position = Position {
            token: Some(token),
            sec,
            ord,
        };
        let op_type = match get("operationType")? {
            Some(RawBsonRef::String(s)) => s,
            _ => "",
        };
        let op = match op_type {
            "insert" => "c",
            "update" | "replace" => "u",
            "delete" => "d",
            "invalidate" => {
                self.release_held(out, false);
                self.position = position;
                return Ok(true);
            }
            _ => {
                // Not captured (DDL): the resume point moves past it.
                self.release_held(out, false);
                self.position = position;
                return Ok(false);
            }
        };
        let ns = match get("ns")? {
            Some(RawBsonRef::Document(d)) => d,
            _ => {
                self.position = position;
                return Ok(false);
            }
        };
        let (Ok(Some(db)), Ok(Some(coll))) =
            (ns.get_str("db").map(Some), ns.get_str("coll").map(Some))
        else {
            self.position = position;
            return Ok(false);
        };
        if self
            .signal_ns
            .as_ref()
            .is_some_and(|(sdb, scoll)| sdb == db && scoll == coll)
        {
            let inserted = match (op, get("fullDocument")?) {
                ("c", Some(RawBsonRef::Document(d))) => Some(
                    Document::try_from(d)
                        .map_err(|e| ConnectError::data(format!("a signal document: {e}")))?,
                ),
                _ => None,
            };
            if op == "d" && self.cfg.watermarks_deleted {
                // INSERT_DELETE watermarks: the deletion of a window's open document is its
                // close watermark.
                let id = match get("documentKey")? {
                    Some(RawBsonRef::Document(k)) => k.get_str("_id").ok(),
                    _ => None,
                };
                if let Some(signal) = headwater_connector_common::signal::deleted_watermark(id) {
                    self.on_incremental_signal(signal, position, out);
                    return Ok(false);
                }
            }
            let txn = event_txn(&get)?;
            self.take_signal(inserted, position, txn, out);
            return Ok(false);
        }
        let Some((rules, c)) = self.namespace(db, coll) else {
            let txn = event_txn(&get)?;
            self.pass_over(position, txn.as_ref(), out);
            return Ok(false);
        };
        if self
            .window
            .as_ref()
            .is_some_and(|w| w.covers(|(d, c)| d == db && c == coll))
        {
            // A change inside the incremental snapshot's window is newer than the chunk's
            // copy of the document: that copy is dropped.
            let mut id = String::with_capacity(48);
            if let Some(RawBsonRef::Document(k)) = get("documentKey")? {
                if let Ok(Some(found)) = rawbson::find(k.as_bytes(), "_id") {
                    extjson::write_element(
                        &mut id,
                        found.kind,
                        found.value,
                        k.as_bytes(),
                        Dialect::RelaxedCompact,
                    )
                    .map_err(|e| bad("documentKey", e.to_string()))?;
                }
            }
            if let Some(w) = self.window.as_mut() {
                w.replaced(&id);
            }
        }
        let skipped = self.cfg.skipped;
        let skip = match op {
            "c" => skipped.create,
            "u" => skipped.update,
            _ => skipped.delete,
        };
        self.position = position;
        if skip {
            return Ok(false);
        }
        // Room for an ObjectId key, `{"$oid": "<24 hex digits>"}` (36 bytes).
        let mut key = String::with_capacity(48);
        match get("documentKey")? {
            Some(RawBsonRef::Document(k)) => match rawbson::find(k.as_bytes(), "_id") {
                Ok(Some(id)) => extjson::write_element(
                    &mut key,
                    id.kind,
                    id.value,
                    k.as_bytes(),
                    Dialect::RelaxedCompact,
                )
                .map_err(|e| bad("documentKey", e.to_string()))?,
                _ => key.push_str("null"),
            },
            _ => key.push_str("null"),
        }
        let render = |field: &str| -> Result<Option<String>, ConnectError> {
            let Some(RawBsonRef::Document(d)) = get(field)? else {
                return Ok(None);
            };
            let mut json = String::with_capacity(d.as_bytes().len() * 2);
            if rules.is_empty() {
                extjson::write_document(&mut json, d, Dialect::Strict)
                    .map_err(|e| bad(field, e.to_string()))?;
            } else {
                let mut typed = Document::try_from(d).map_err(|e| bad(field, e.to_string()))?;
                rules.apply(&mut typed);
                json = extjson::document(&typed, Dialect::Strict);
            }
            Ok(Some(json))
        };
        let after = match op {
            "c" => render("fullDocument")?,
            "u" if op_type == "replace" || self.cfg.capture_mode.update_full() => {
                render("fullDocument")?
            }
            _ => None,
        };
        let before = if self.cfg.capture_mode.pre_image() && op != "c" {
            render("fullDocumentBeforeChange")?
        } else {
            None
        };
        let update = match (get("updateDescription")?, op_type == "update") {
            (Some(RawBsonRef::Document(u)), true) => {
                let mut updated = String::with_capacity(128);
                match u.get("updatedFields") {
                    Ok(Some(RawBsonRef::Document(f))) => {
                        extjson::write_document_with(&mut updated, f, Dialect::Relaxed, &rules)
                            .map_err(|e| bad("updatedFields", e.to_string()))?
                    }
                    _ => updated.push_str("{}"),
                }
                let mut removed = Vec::new();
                if let Ok(Some(RawBsonRef::Array(a))) = u.get("removedFields") {
                    for f in a.into_iter().flatten() {
                        if let Some(p) = f.as_str().and_then(|f| rules.apply_path(f)) {
                            removed.push(p);
                        }
                    }
                }
                let mut truncated = Vec::new();
                if let Ok(Some(RawBsonRef::Array(a))) = u.get("truncatedArrays") {
                    for t in a.into_iter().flatten() {
                        let Some(t) = t.as_document() else { continue };
                        if let (Ok(f), Ok(n)) = (t.get_str("field"), t.get_i32("newSize")) {
                            if let Some(f) = rules.apply_path(f) {
                                truncated.push((f, n));
                            }
                        }
                    }
                }
                Some(self.events.update_description(removed, updated, truncated))
            }
            _ => None,
        };
        let wall = match get("wallTime")? {
            Some(RawBsonRef::DateTime(w)) => Some(w.timestamp_millis()),
            _ => None,
        };
        let ts_ms = wall.unwrap_or(sec.max(0) * 1000);
        let txn = event_txn(&get)?;
        let info = SourceInfo {
            ts_ms,
            ts_us: ts_ms.saturating_mul(1000),
            ts_ns: ts_ms.saturating_mul(1_000_000),
            snapshot: "false",
            ord: i32::try_from(ord).unwrap_or(-1),
            lsid: txn.as_ref().map(|(l, _)| l.clone()),
            txn_number: txn.as_ref().map(|(_, n)| *n),
            wall_time: wall,
        };
        let source = self.events.stream_source(&c, &info);
        let (now_ms, _, _) = now();
        let tombstone_key = (op == "d" && self.cfg.tombstones_on_delete).then(|| key.clone());
        let rec = self
            .events
            .record(&c, key, before, after, update, source, op, now_ms);
        let position = self.position.clone();
        match tombstone_key {
            Some(key) => {
                self.push(rec, txn.clone(), &position, out);
                let t = self.events.tombstone(&c, key);
                self.push(t, txn, &position, out);
            }
            None => self.push(rec, txn, &position, out),
        }
        Ok(false)
    }

    async fn poll_stream(&mut self) -> Result<SourceBatch, ConnectError> {
        // Room for a typical change-stream batch without regrowing.
        let mut out = Vec::with_capacity(self.cfg.max_batch_size.min(256));
        let deadline =
            tokio::time::Instant::now() + self.cfg.poll_interval.max(Duration::from_millis(10));
        let mut caught_up = false;
        let mut invalidated = false;
        let mut ended_transaction = false;
        if std::mem::take(&mut self.reopen_pending) {
            self.reopen_stream().await?;
        }
        loop {
            // A blocking request from the signal file ends the poll before any change.
            if out.len() >= self.cfg.max_batch_size || self.signal.is_some() {
                break;
            }
            // The events of the reply in hand first.
            if let Some(mut reply) = self.stream.as_mut().and_then(|s| s.reply.take()) {
                if let Some(event) = reply.next_event()? {
                    let invalid = if let Some(mut fragments) = self.split.take() {
                        let piece = fragments.add(event);
                        self.split = Some(fragments);
                        match piece.map_err(|e| {
                            ConnectError::data(format!("a split change event: {}", e.0))
                        })? {
                            Piece::Whole(event) => self.handle_event(event, &mut out)?,
                            Piece::Pending => false,
                            Piece::Complete(event) => self.handle_event(&event, &mut out)?,
                        }
                    } else {
                        self.handle_event(event, &mut out)?
                    };
                    if let Some(stream) = self.stream.as_mut() {
                        stream.reply = Some(reply);
                    }
                    if invalid {
                        invalidated = true;
                        break;
                    }
                    if self.signal.is_some() || self.chunk_to_read {
                        break;
                    }
                    if std::mem::take(&mut self.ended_transaction) {
                        ended_transaction = true;
                        break;
                    }
                }
                continue;
            }
            let Some(stream) = self.stream.as_mut() else {
                return Err(ConnectError::retriable("the change stream is not running"));
            };
            let msg = if out.is_empty() {
                match tokio::time::timeout_at(deadline, stream.rx.recv()).await {
                    Ok(m) => m,
                    Err(_) => {
                        caught_up = true;
                        break;
                    }
                }
            } else {
                match stream.rx.try_recv() {
                    Ok(m) => Some(m),
                    Err(mpsc::error::TryRecvError::Empty) => {
                        caught_up = true;
                        break;
                    }
                    Err(mpsc::error::TryRecvError::Disconnected) => None,
                }
            };
            match msg {
                Some(StreamMsg::Events(reply)) => stream.reply = Some(reply),
                Some(StreamMsg::Idle(token)) => {
                    // Nothing more right now: the transaction in progress is complete.
                    self.release_held(&mut out, true);
                    // Never a resume point inside a split event: its fragments so far would be
                    // skipped on a restart.
                    let inside_split = self.split.as_ref().is_some_and(Fragments::pending);
                    if let Some(t) = token.filter(|_| !inside_split) {
                        self.position.token = Some(t);
                    }
                    caught_up = true;
                    break;
                }
                Some(StreamMsg::Failed(e)) => {
                    if history_lost(&e)
                        && self.cfg.snapshot_mode.policy().lost_position != LostPosition::Fail
                    {
                        self.stream = None;
                        if self.cfg.snapshot_mode.policy().lost_position
                            == LostPosition::StreamFromNow
                        {
                            // The change held back was read whole: it goes out.
                            self.release_held(&mut out, true);
                        } else {
                            // The new snapshot covers it.
                            self.held = None;
                        }
                        self.after_lost_history(&e.to_string()).await?;
                        return Ok(SourceBatch::committed(out));
                    }
                    if !history_lost(&e)
                        && stream_error_resumable(&e)
                        && self.reopens < MAX_REOPENS
                    {
                        // As the driver's own change stream does: open it again after the last
                        // change handed out, within the task. A task restart would cost a
                        // reconnect more, and under snapshot.mode=always a whole snapshot.
                        tracing::warn!(error = %e, "the change stream failed with a resumable error; reopening it after the last change handed out");
                        if self.reopen_now_or_next_poll(out.is_empty()).await? {
                            continue;
                        }
                        break;
                    }
                    return Err(if history_lost(&e) {
                        ConnectError::fatal(format!("ChangeStreamHistoryLost: the change stream's resume point fell off the oplog ({e}); changes after it are gone. Snapshot again (snapshot.mode=when_needed does so automatically) or enlarge the oplog"))
                    } else if stream_error_resumable(&e) {
                        ConnectError::retriable(format!(
                            "reading the change stream: {e}; resuming at the last committed offset"
                        ))
                    } else {
                        classify("reading the change stream".into(), e)
                    });
                }
                Some(StreamMsg::Closed) if self.reopens < MAX_REOPENS => {
                    tracing::warn!("the server closed the change stream's cursor; reopening it after the last change handed out");
                    if self.reopen_now_or_next_poll(out.is_empty()).await? {
                        continue;
                    }
                    break;
                }
                Some(StreamMsg::Closed) => {
                    return Err(ConnectError::retriable(
                        "the server closed the change stream's cursor; reopening it at the last committed offset",
                    ))
                }
                None => {
                    return Err(ConnectError::retriable(
                        "the change stream reader stopped unexpectedly",
                    ))
                }
            }
        }
        if let Some((request, at)) = self.signal.take() {
            // The batch ends before the signal, its last record with the position before it;
            // the snapshot's records carry the signal's.
            self.release_held(&mut out, true);
            if let Some(last) = out.last_mut() {
                if last.source_offset.is_empty() {
                    last.source_partition = self.events.partition.clone();
                    last.source_offset = self.position.offset();
                }
            }
            if let Some(why) = self.signal_refused(&request).await? {
                // Nothing to copy the way it asks: the stream goes on past the signal (which
                // is never read again once a later offset is committed).
                tracing::warn!(collections = ?request.collections, %why, "execute-snapshot signal not acted on");
                self.position = at;
                return Ok(SourceBatch::committed(out));
            }
            self.stream = None;
            // Streaming starts again after the signal: a chunk waiting for its close
            // watermark is read again later.
            self.window = None;
            self.pending_chunk = None;
            self.start_snapshot(None, Some((request, at))).await?;
            return Ok(SourceBatch::committed(out));
        }
        if invalidated {
            // The watched namespace is gone (dropped or renamed): start again after it.
            tracing::warn!("the change stream was invalidated (the watched database was dropped or renamed); reopening it after the invalidate event");
            let token = self
                .position
                .token
                .as_ref()
                .map(Token::resume_token)
                .transpose()?;
            let stream = self.open_stream(token).await.map_err(|e| {
                classify("reopening the change stream after an invalidate".into(), e)
            })?;
            let (tx, rx) = mpsc::channel(self.replies_queued());
            let reader = tokio::spawn(read_stream(stream, tx));
            self.stream = Some(Stream {
                rx,
                reader,
                reply: None,
            });
        }
        if self.held.is_none() && self.heartbeats.as_ref().is_some_and(Heartbeats::due) {
            let offset = self.position.offset();
            let partition = self.events.partition.clone();
            if let Some(h) = self.heartbeats.as_mut() {
                out.push(h.record(partition, offset));
            }
        }
        let boundary = if ended_transaction {
            // `out` ends with a finished transaction's last record, which carries its offset;
            // the next transaction's first record stays held.
            Boundary::Commit
        } else if self.held.is_some() && self.held.as_ref().is_some_and(|(_, t, _)| t.is_some()) {
            Boundary::Open
        } else {
            // A held record outside a transaction is complete by itself.
            self.release_held(&mut out, true);
            // The batch ends at the stream's position: its last record carries it (the
            // records before it carry no offset, see `push`).
            if let Some(last) = out.last_mut() {
                if last.source_offset.is_empty() {
                    last.source_partition = self.events.partition.clone();
                    last.source_offset = self.position.offset();
                }
            }
            Boundary::Commit
        };
        Ok(SourceBatch {
            records: out,
            boundary,
            caught_up,
        })
    }

    async fn poll(&mut self) -> Result<SourceBatch, ConnectError> {
        let mut batch = match self.phase {
            Phase::Snapshot(_) => self.poll_snapshot().await?,
            Phase::Stream => {
                self.read_file_signals();
                self.advance_incremental().await?;
                self.poll_stream().await?
            }
            Phase::StreamAt(at) => {
                if streaming_due(at, self.cfg.poll_interval, &self.waiting).await {
                    self.stream_after_snapshot().await?;
                }
                SourceBatch::empty()
            }
            Phase::Done => {
                tokio::time::sleep(self.cfg.poll_interval).await;
                SourceBatch::empty()
            }
        };
        if let Some(request) = self.incremental_request.take() {
            self.start_incremental(request).await?;
        }
        // The offset the batch ends with carries the incremental snapshot's progress.
        if let (Some(p), Some(last)) = (&self.incremental, batch.records.last_mut()) {
            if !last.source_offset.is_empty() {
                last.source_offset
                    .insert(INCREMENTAL_OFFSET.into(), OffsetValue::String(p.to_json()));
            }
        }
        Ok(batch)
    }
}

/// The top-level fields of a change event that [`Inner::handle_event`] reads, found in one
/// pass over its bytes (looking each up by name would walk the event once per field).
struct EventFields<'a> {
    found: [Option<rawbson::Element<'a>>; EventFields::NAMES.len()],
}

impl<'a> EventFields<'a> {
    const NAMES: [&'static str; 11] = [
        "_id",
        "operationType",
        "clusterTime",
        "ns",
        "documentKey",
        "fullDocument",
        "fullDocumentBeforeChange",
        "updateDescription",
        "wallTime",
        "lsid",
        "txnNumber",
    ];

    fn read(event: &'a [u8]) -> Result<Self, extjson::BadBson> {
        let mut found = [None; Self::NAMES.len()];
        for element in rawbson::elements(event)? {
            let element = element?;
            if let Some(i) = Self::NAMES.iter().position(|n| *n == element.key) {
                // The first of duplicate names, as a lookup by name finds.
                found[i].get_or_insert(element);
            }
        }
        Ok(EventFields { found })
    }

    /// The field `name` (one of [`Self::NAMES`]) as a typed value. Only the types change
    /// events carry in these fields are typed (documents, strings, timestamps, dates,
    /// integers); a field of any other type reads as `Null`, which no caller accepts.
    fn get(&self, name: &str) -> Result<Option<RawBsonRef<'a>>, extjson::BadBson> {
        let Some(element) = Self::NAMES
            .iter()
            .position(|n| *n == name)
            .and_then(|i| self.found[i])
        else {
            return Ok(None);
        };
        let v = element.value;
        Ok(Some(match element.kind {
            rawbson::DOCUMENT => RawBsonRef::Document(
                RawDocument::from_bytes(v).map_err(|e| extjson::BadBson(e.to_string()))?,
            ),
            rawbson::STRING => RawBsonRef::String(rawbson::string(v)?),
            rawbson::TIMESTAMP => {
                let (time, increment) = rawbson::timestamp(v);
                RawBsonRef::Timestamp(Timestamp { time, increment })
            }
            rawbson::DATETIME => RawBsonRef::DateTime(DateTime::from_millis(rawbson::int64(v))),
            rawbson::INT64 => RawBsonRef::Int64(rawbson::int64(v)),
            rawbson::INT32 => RawBsonRef::Int32(rawbson::int32(v)),
            _ => RawBsonRef::Null,
        }))
    }
}

/// The document of an incremental snapshot chunk's open or close watermark.
fn watermark_document(chunk: &str, open: bool) -> Document {
    let (id, kind, data) = incremental::watermark_row(chunk, open, &incremental::now_iso());
    doc! {"_id": id, "type": kind, "data": data}
}

/// Reads the change stream into the task's queue, a reply at a time.
async fn read_stream(stream: OpenedStream, tx: mpsc::Sender<StreamMsg>) {
    let OpenedStream { mut cursor, first } = stream;
    let mut next = first.map(Ok);
    loop {
        let reply = match next.take() {
            Some(reply) => Some(reply),
            None => cursor.next().await,
        };
        let msg = match reply {
            Some(Ok(batch)) => {
                let token = post_batch_token(&batch);
                match Reply::new(batch) {
                    Ok(Some(reply)) => StreamMsg::Events(reply),
                    Ok(None) => StreamMsg::Idle(token),
                    Err(e) => StreamMsg::Failed(e),
                }
            }
            Some(Err(e)) => StreamMsg::Failed(e),
            None => StreamMsg::Closed,
        };
        let failed = matches!(msg, StreamMsg::Failed(_) | StreamMsg::Closed);
        if tx.send(msg).await.is_err() || failed {
            return;
        }
    }
}

impl SourceTask for MongoSourceTask {
    fn start(
        &mut self,
        context: SourceTaskContext,
        props: Properties,
    ) -> BoxFuture<'_, Result<(), ConnectError>> {
        Box::pin(async move {
            self.inner = Some(Box::new(Inner::start(context, props).await?));
            Ok(())
        })
    }

    fn poll(&mut self) -> BoxFuture<'_, Result<SourceBatch, ConnectError>> {
        Box::pin(async move {
            match self.inner.as_mut() {
                Some(inner) => {
                    let mut batch = inner.poll().await?;
                    inner.notes.drain_into(&mut batch.records);
                    Ok(batch)
                }
                None => Err(ConnectError::fatal("poll before start")),
            }
        })
    }

    fn commit<'a>(
        &'a mut self,
        _committed: &'a [(OffsetMap, OffsetMap)],
    ) -> BoxFuture<'a, Result<(), ConnectError>> {
        // Change streams have no acknowledgement: the committed offset is the resume point.
        Box::pin(async { Ok(()) })
    }

    fn stop(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some(mut inner) = self.inner.take() {
                inner.phase = Phase::Done;
                inner.stream = None;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(extra: &[(&str, &str)], uri: &str) -> ClientOptions {
        let mut props = Properties::new();
        props.insert("mongodb.connection.string".into(), uri.into());
        props.insert("topic.prefix".into(), "p".into());
        for (k, v) in extra {
            props.insert((*k).into(), (*v).into());
        }
        let cfg = MongoConfig::parse(&props).expect("a valid config");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(client_options(&cfg)).expect("options")
    }

    fn tls_on(o: &ClientOptions) -> bool {
        matches!(&o.tls, Some(mongodb::options::Tls::Enabled(_)))
    }

    #[test]
    fn ssl_enabled_turns_tls_on_and_the_connection_string_keeps_its_own() {
        let plain = "mongodb://127.0.0.1:27017/?replicaSet=rs0";
        assert!(!tls_on(&options(&[], plain)), "off by default");
        assert!(tls_on(&options(&[("mongodb.ssl.enabled", "true")], plain)));
        let with_tls = "mongodb://127.0.0.1:27017/?replicaSet=rs0&tls=true";
        assert!(tls_on(&options(&[], with_tls)));
        assert!(tls_on(&options(
            &[("mongodb.ssl.enabled", "false")],
            with_tls
        )));
        let tls_off = "mongodb://127.0.0.1:27017/?replicaSet=rs0&tls=false";
        assert!(tls_on(&options(
            &[("mongodb.ssl.enabled", "true")],
            tls_off
        )));
    }

    #[test]
    fn an_unsupported_tls_relaxation_is_refused_by_name() {
        let mut props = Properties::new();
        props.insert(
            "mongodb.connection.string".into(),
            "mongodb://h/?replicaSet=rs0".into(),
        );
        props.insert("topic.prefix".into(), "p".into());
        props.insert("mongodb.ssl.invalid.hostname.allowed".into(), "true".into());
        let Err(refused) = MongoConfig::parse(&props) else {
            panic!("accepted");
        };
        let e = refused.error_message();
        assert!(e.contains("mongodb.ssl.invalid.hostname.allowed"), "{e}");
        assert!(e.contains("not supported"), "{e}");
    }

    #[test]
    fn stream_errors_resume_where_the_change_streams_specification_says() {
        let command = |code: i32| -> mongodb::error::Error {
            let c: mongodb::error::CommandError = mongodb::bson::deserialize_from_document(
                doc! {"code": code, "codeName": "X", "errmsg": "m"},
            )
            .unwrap();
            mongodb::error::ErrorKind::Command(c).into()
        };
        assert!(stream_error_resumable(&command(43)), "CursorNotFound");
        assert!(!stream_error_resumable(&command(13)), "Unauthorized");
        let io: mongodb::error::Error = std::io::Error::other("connection reset").into();
        assert!(stream_error_resumable(&io));
        let custom = mongodb::error::Error::custom("a reply the task could not read");
        assert!(stream_error_resumable(&custom));
    }

    #[test]
    fn a_token_read_from_an_event_is_stored_and_read_back_unchanged() {
        let id = doc! {"_data": "8267A1B2C3000000012B0429296E1404"};
        let event =
            mongodb::bson::serialize_to_vec(&doc! {"_id": id.clone(), "operationType": "insert"})
                .unwrap();
        let event = Bytes::from(event);
        let fields = EventFields::read(&event).unwrap();
        let Some(RawBsonRef::Document(d)) = fields.get("_id").unwrap() else {
            panic!("no _id");
        };
        let from_event = Token::Bson(event.slice_ref(d.as_bytes()));
        let text = from_event.text();
        assert_eq!(
            text,
            base64::engine::general_purpose::STANDARD
                .encode(mongodb::bson::serialize_to_vec(&id).unwrap())
        );
        let stored = Token::Text(text.clone());
        assert_eq!(stored.text(), text);
        let resume = stored.resume_token().unwrap();
        assert_eq!(Token::of(&resume).text(), text);
        assert_eq!(
            from_event.resume_token().unwrap(),
            resume,
            "both forms name the same resume point"
        );
        let broken = Token::Text("not base64!".into())
            .resume_token()
            .unwrap_err();
        assert!(
            broken.message().contains("not base64"),
            "{}",
            broken.message()
        );
    }
}
