//! The initial snapshot: captured collections copied in chunks, by up to
//! `snapshot.max.threads` readers, handed out strictly in chunk order.
//!
//! A collection whose `_id`s are all ObjectIds and that holds more than
//! `snapshot.chunk.documents` documents is split into `_id` ranges (by the ObjectIds'
//! timestamps) read in `_id` order; any other collection is one chunk read in natural order (as
//! Debezium reads it). Readers render each document (its key and its strict extended JSON) on
//! their own task, so the task only wraps them into records.
//!
//! Invariants:
//! - records leave in chunk order, and within a ranged collection in `_id` order, so a committed
//!   offset (`snapshot_done` collections, `snapshot_collection`, `snapshot_after` `_id`) says
//!   exactly which documents are in the log; documents of a collection read whole are committed
//!   only with its last document, so a crash never leaves half of one;
//! - memory is bounded: at most `threads` chunks are read ahead, each by at most
//!   [`CHANNEL_BATCHES`] batches of [`BATCH_DOCS`] documents;
//! - the lowest unfinished chunk always has a running reader (chunks are taken in order).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use futures_util::StreamExt;
use headwater_api::ConnectError;
use mongodb::bson::oid::ObjectId;
use mongodb::bson::{doc, Bson, Document, RawDocument, RawDocumentBuf};
use mongodb::Client;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::extjson::{self, Dialect};
use crate::fields::FieldRules;
use crate::rawbson;

/// Documents per batch a reader sends.
pub const BATCH_DOCS: usize = 512;
/// Batches buffered per chunk.
pub const CHANNEL_BATCHES: usize = 4;
/// Documents per server batch when `snapshot.fetch.size` is not set.
pub const DEFAULT_FETCH: u32 = 256;

/// One collection to snapshot.
#[derive(Clone, Debug)]
pub struct SnapshotCollection {
    pub db: String,
    pub collection: String,
    /// Read in `_id` ranges (all `_id`s are ObjectIds), so resumable after any document.
    pub ranged: bool,
    pub estimated: u64,
    pub rules: Arc<FieldRules>,
    /// `snapshot.collection.filter.overrides`: only documents matching this query are copied.
    pub filter: Option<Arc<Document>>,
}

impl SnapshotCollection {
    pub fn ns(&self) -> String {
        format!("{}.{}", self.db, self.collection)
    }
}

/// Which documents of a collection a chunk reads.
#[derive(Clone, Debug)]
pub struct Chunk {
    pub collection: usize,
    pub index: usize,
    pub of: usize,
    /// `_id >= lo` and `_id < hi` (ranged collections; open ends when `None`).
    pub lo: Option<ObjectId>,
    pub hi: Option<ObjectId>,
    /// Only `_id`s above this one (a resumed collection).
    pub after: Option<Bson>,
}

impl Chunk {
    /// The query of this chunk's documents: its `_id` range, within the collection's
    /// snapshot filter if it has one.
    fn filter(&self, collection_filter: Option<&Document>) -> Document {
        let mut conds = Vec::new();
        if let Some(query) = collection_filter.filter(|q| !q.is_empty()) {
            conds.push(query.clone());
        }
        if let Some(lo) = self.lo {
            conds.push(doc! {"_id": {"$gte": lo}});
        }
        if let Some(hi) = self.hi {
            conds.push(doc! {"_id": {"$lt": hi}});
        }
        if let Some(after) = &self.after {
            conds.push(doc! {"_id": {"$gt": after.clone()}});
        }
        match conds.len() {
            0 => Document::new(),
            1 => conds.remove(0),
            _ => doc! {"$and": conds},
        }
    }
}

/// `_id` as stored in offsets: base64 of the BSON document `{_id: …}`.
pub fn encode_id(id: &Bson) -> String {
    let mut d = Document::new();
    d.insert("_id", id.clone());
    base64::engine::general_purpose::STANDARD.encode(d.to_vec().unwrap_or_default())
}

pub fn decode_id(text: &str) -> Option<Bson> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    let d = Document::from_reader(&mut bytes.as_slice()).ok()?;
    d.get("_id").cloned()
}

fn mongo_err(context: String, e: mongodb::error::Error) -> ConnectError {
    crate::task::classify(context, e)
}

/// The smallest and largest `_id` of a collection when both are ObjectIds. Then every `_id`
/// is one: ObjectIds sort after numbers, strings, documents and binary data and before
/// booleans, dates, timestamps and the rest, so no other type fits between them.
pub async fn object_id_bounds(
    client: &Client,
    db: &str,
    collection: &str,
) -> Result<Option<(ObjectId, ObjectId)>, ConnectError> {
    let coll = client.database(db).collection::<Document>(collection);
    let ns = format!("{db}.{collection}");
    let mut ends = Vec::with_capacity(2);
    for dir in [1, -1] {
        let end = coll
            .find_one(Document::new())
            .sort(doc! {"_id": dir})
            .projection(doc! {"_id": 1})
            .await
            .map_err(|e| mongo_err(format!("reading the _id range of {ns}"), e))?;
        match end.map(|d| d.get_object_id("_id")) {
            Some(Ok(id)) => ends.push(id),
            _ => return Ok(None),
        }
    }
    Ok(Some((ends[0], ends[1])))
}

/// Plans the chunks of one collection (`after`: resume after this `_id`); a ranged collection
/// comes with its ObjectId bounds.
pub fn plan(
    index: usize,
    c: &SnapshotCollection,
    bounds: Option<(ObjectId, ObjectId)>,
    after: Option<Bson>,
    chunk_docs: u64,
) -> Vec<Chunk> {
    let single = |after| {
        vec![Chunk {
            collection: index,
            index: 0,
            of: 1,
            lo: None,
            hi: None,
            after,
        }]
    };
    let (true, Some((lo, hi))) = (c.ranged, bounds) else {
        return single(after.filter(|_| c.ranged));
    };
    let (t0, t1) = (
        lo.timestamp().timestamp_millis() / 1000,
        hi.timestamp().timestamp_millis() / 1000 + 1,
    );
    let n = c.estimated.div_ceil(chunk_docs.max(1)).max(1) as i64;
    let n = n.min((t1 - t0).max(1));
    let bound = |i: i64| {
        let secs = (t0 + (t1 - t0) * i / n) as u32;
        let mut bytes = [0u8; 12];
        bytes[..4].copy_from_slice(&secs.to_be_bytes());
        ObjectId::from_bytes(bytes)
    };
    (0..n)
        .map(|i| Chunk {
            collection: index,
            index: i as usize,
            of: n as usize,
            lo: (i > 0).then(|| bound(i)),
            hi: (i + 1 < n).then(|| bound(i + 1)),
            after: after.clone(),
        })
        .collect()
}

/// A rendered document: its `_id` (ranged collections, for the offset), its key id and its
/// strict extended JSON.
pub struct Rendered {
    pub id: Option<Bson>,
    pub key: String,
    pub json: String,
}

/// What a reader sends for a chunk.
pub enum ChunkMsg {
    Docs(Vec<Rendered>),
    Done,
    Failed(ConnectError),
}

/// The reader side of a running snapshot.
pub struct Readers {
    pub receivers: VecDeque<(usize, mpsc::Receiver<ChunkMsg>)>,
    handles: Vec<JoinHandle<()>>,
}

impl Readers {
    pub fn start(
        client: Client,
        threads: usize,
        collections: Arc<Vec<SnapshotCollection>>,
        chunks: Arc<Vec<Chunk>>,
        fetch_size: Option<u32>,
    ) -> Readers {
        let mut senders = Vec::with_capacity(chunks.len());
        let mut receivers = VecDeque::with_capacity(chunks.len());
        for i in 0..chunks.len() {
            let (tx, rx) = mpsc::channel(CHANNEL_BATCHES);
            senders.push(Some(tx));
            receivers.push_back((i, rx));
        }
        let senders = Arc::new(Mutex::new(senders));
        let cursor = Arc::new(AtomicUsize::new(0));
        let handles = (0..threads.max(1))
            .map(|_| {
                let (client, collections, chunks, senders, cursor) = (
                    client.clone(),
                    collections.clone(),
                    chunks.clone(),
                    senders.clone(),
                    cursor.clone(),
                );
                tokio::spawn(async move {
                    loop {
                        let i = cursor.fetch_add(1, Ordering::SeqCst);
                        let Some(chunk) = chunks.get(i) else {
                            break;
                        };
                        let Some(tx) = senders.lock().unwrap_or_else(|e| e.into_inner())[i].take()
                        else {
                            break;
                        };
                        let c = &collections[chunk.collection];
                        match read_chunk(&client, c, chunk, fetch_size, &tx).await {
                            Ok(()) => {
                                let _ = tx.send(ChunkMsg::Done).await;
                            }
                            Err(e) => {
                                let _ = tx.send(ChunkMsg::Failed(e)).await;
                                break;
                            }
                        }
                    }
                })
            })
            .collect();
        Readers { receivers, handles }
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        for h in &self.handles {
            h.abort();
        }
    }
}

/// Renders one snapshot document: key id (compact relaxed) and body (strict), with the
/// collection's field rules applied; with `typed_id`, also its `_id` as a value (what a ranged
/// chunk's offset records).
pub fn render(
    doc: &RawDocument,
    rules: &FieldRules,
    typed_id: bool,
) -> Result<(Option<Bson>, String, String), String> {
    // The `_id` is found once, in the bytes; the key is written from them, as the stream
    // writes a change event's key (the typed writer gives the same text at several times the
    // cost).
    let id = rawbson::find(doc.as_bytes(), "_id")
        .map_err(|e| format!("malformed document: {e}"))?
        .ok_or_else(|| "a document without _id".to_owned())?;
    let mut key = String::with_capacity(32);
    extjson::write_element(
        &mut key,
        id.kind,
        id.value,
        doc.as_bytes(),
        Dialect::RelaxedCompact,
    )
    .map_err(|e| format!("malformed document: {e}"))?;
    let id = if typed_id {
        doc.get("_id")
            .ok()
            .flatten()
            .and_then(|v| Bson::try_from(v).ok())
    } else {
        None
    };
    let mut json = String::with_capacity(doc.as_bytes().len() * 2);
    if rules.is_empty() {
        extjson::write_document(&mut json, doc, Dialect::Strict).map_err(|e| e.to_string())?;
    } else {
        let mut typed = Document::try_from(doc).map_err(|e| e.to_string())?;
        rules.apply(&mut typed);
        json = extjson::document(&typed, Dialect::Strict);
    }
    Ok((id, key, json))
}

async fn read_chunk(
    client: &Client,
    c: &SnapshotCollection,
    chunk: &Chunk,
    fetch_size: Option<u32>,
    tx: &mpsc::Sender<ChunkMsg>,
) -> Result<(), ConnectError> {
    let coll = client
        .database(&c.db)
        .collection::<RawDocumentBuf>(&c.collection);
    let mut find = coll.find(chunk.filter(c.filter.as_deref()));
    if c.ranged {
        find = find.sort(doc! {"_id": 1});
    }
    // Responses of a few hundred KB: larger ones are allocated (and faulted in) afresh by
    // the driver for every batch.
    find = find.batch_size(fetch_size.unwrap_or(DEFAULT_FETCH));
    let ns = c.ns();
    // Whole server replies: the documents are rendered where they lie in the reply, not
    // copied out one by one first.
    let mut cursor = find
        .batch()
        .await
        .map_err(|e| mongo_err(format!("snapshot of {ns}"), e))?;
    let mut batch = Vec::with_capacity(BATCH_DOCS);
    while let Some(reply) = cursor.next().await {
        let reply = reply.map_err(|e| mongo_err(format!("reading the snapshot of {ns}"), e))?;
        let docs = reply
            .doc_slices()
            .map_err(|e| mongo_err(format!("reading the snapshot of {ns}"), e))?;
        for doc in docs {
            let doc = doc
                .map_err(|e| ConnectError::data(format!("{ns}: a malformed reply: {e}")))?
                .as_document()
                .ok_or_else(|| {
                    ConnectError::data(format!("{ns}: a query result that is not a document"))
                })?;
            let (id, key, json) = render(doc, &c.rules, c.ranged)
                .map_err(|e| ConnectError::data(format!("{ns}: {e}")))?;
            batch.push(Rendered { id, key, json });
            if batch.len() >= BATCH_DOCS {
                let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH_DOCS));
                if tx.send(ChunkMsg::Docs(full)).await.is_err() {
                    return Ok(());
                }
            }
        }
    }
    if !batch.is_empty() {
        let _ = tx.send(ChunkMsg::Docs(batch)).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_filters() {
        let oid = ObjectId::parse_str("65f0a1b2c3d4e5f601234567").unwrap();
        for id in [
            Bson::ObjectId(oid),
            Bson::String("a".into()),
            Bson::Int32(7),
        ] {
            assert_eq!(decode_id(&encode_id(&id)), Some(id));
        }
        assert_eq!(decode_id("not base64!"), None);
        let c = Chunk {
            collection: 0,
            index: 1,
            of: 3,
            lo: Some(oid),
            hi: None,
            after: Some(Bson::ObjectId(oid)),
        };
        assert_eq!(
            c.filter(None),
            doc! {"$and": [{"_id": {"$gte": oid}}, {"_id": {"$gt": oid}}]}
        );
        let open = doc! {"status": "open"};
        assert_eq!(
            c.filter(Some(&open)),
            doc! {"$and": [{"status": "open"}, {"_id": {"$gte": oid}}, {"_id": {"$gt": oid}}]}
        );
        let whole = Chunk {
            collection: 0,
            index: 0,
            of: 1,
            lo: None,
            hi: None,
            after: None,
        };
        assert_eq!(whole.filter(Some(&open)), open);
        assert_eq!(whole.filter(Some(&Document::new())), Document::new());
    }
}
