//! Debezium's MongoDB change events: key and envelope schemas per collection, the `source`
//! block, and records (`../shared/golden/debezium/mongodb/FORMAT_NOTES.md` §1-2).
//!
//! - Topic `<topic.prefix>.<db>.<collection>`; key `{id}` with `id` the document's `_id` as
//!   compact relaxed extended JSON (a string: `"\"cust-a\""`, `{"$oid": "…"}`).
//! - Envelope `<topic>.Envelope` (no version): `before`/`after` as strict extended JSON strings
//!   (`io.debezium.data.Json`), `updateDescription`, `source`
//!   (`io.debezium.connector.mongo.Source`), `op`, `ts_ms`, `transaction`; no `ts_us`/`ts_ns`.
//!
//! Invariants: every record of a collection shares its two schemas (built once); values are
//! built for those schemas (trusted structs).

use std::collections::HashMap;
use std::sync::Arc;

use headwater_connector_common::context_headers::ContextHeaders;
use headwater_connector_common::name_adjust::NameAdjustment;

use headwater_api::logical::debezium;
use headwater_api::{
    OffsetMap, Schema, SchemaBuilder, SchemaRef, SchemaType, SourceRecord, Struct, Value,
};

/// Indexes of the `source` fields [`EventBuilder::stream_source`] replaces (the order of
/// [`source_schema`]).
const SOURCE_TS_MS: usize = 3;
const SOURCE_TS_US: usize = 7;
const SOURCE_TS_NS: usize = 8;
const SOURCE_ORD: usize = 10;
const SOURCE_WALL_TIME: usize = 13;

/// The version string in `source.version`.
pub use crate::CONNECTOR_VERSION;

/// The `source` block's schema.
pub fn source_schema() -> SchemaRef {
    let opt_i64 = Schema::optional_int64;
    SchemaBuilder::struct_()
        .name("io.debezium.connector.mongo.Source")
        .version(1)
        .field("version", Schema::string())
        .field("connector", Schema::string())
        .field("name", Schema::string())
        .field("ts_ms", Schema::int64())
        .field(
            "snapshot",
            debezium::enum_builder(&[
                "true",
                "first",
                "first_in_data_collection",
                "last_in_data_collection",
                "last",
                "false",
                "incremental",
            ])
            .optional()
            .default_value(Value::String("false".into()))
            .build_ref(),
        )
        .field("db", Schema::string())
        .field("sequence", Schema::optional_string())
        .field("ts_us", opt_i64())
        .field("ts_ns", opt_i64())
        .field("collection", Schema::string())
        .field("ord", Schema::int32())
        .field("lsid", Schema::optional_string())
        .field("txnNumber", opt_i64())
        .field("wallTime", opt_i64())
        .build_ref()
}

fn json_schema() -> SchemaRef {
    debezium::builder(debezium::JSON, SchemaType::String)
        .optional()
        .build_ref()
}

fn truncated_array_schema() -> SchemaRef {
    SchemaBuilder::struct_()
        .name("io.debezium.connector.mongodb.changestream.truncatedarray")
        .version(1)
        .field("field", Schema::string())
        .field("size", Schema::int32())
        .build_ref()
}

/// `updateDescription`'s schema.
pub fn update_description_schema() -> SchemaRef {
    SchemaBuilder::struct_()
        .optional()
        .name("io.debezium.connector.mongodb.changestream.updatedescription")
        .version(1)
        .field(
            "removedFields",
            SchemaBuilder::array(Schema::string())
                .optional()
                .build_ref(),
        )
        .field("updatedFields", json_schema())
        .field(
            "truncatedArrays",
            SchemaBuilder::array(truncated_array_schema())
                .optional()
                .build_ref(),
        )
        .build_ref()
}

/// The key and envelope schemas of one collection.
#[derive(Debug)]
pub struct CollectionSchemas {
    pub db: String,
    pub collection: String,
    pub topic: String,
    pub key_schema: SchemaRef,
    pub envelope_schema: SchemaRef,
    /// The `source` block of this collection's streamed events outside transactions, shared:
    /// events hold it with their times and `ord` replaced ([`EventBuilder::stream_source`]).
    stream_source: Struct,
}

/// What the `source` block says about one event.
#[derive(Clone, Debug)]
pub struct SourceInfo {
    /// `source.ts_ms`: the event's wall time (streaming) or the read time (snapshot).
    pub ts_ms: i64,
    pub ts_us: i64,
    pub ts_ns: i64,
    /// `"true"`, `"last"` (snapshot) or `"false"`.
    pub snapshot: &'static str,
    /// The increment of the event's cluster time (-1 in the snapshot).
    pub ord: i32,
    /// The transaction's session id (strict extended JSON) and number.
    pub lsid: Option<String>,
    pub txn_number: Option<i64>,
    pub wall_time: Option<i64>,
}

/// Builds records for one connector (`topic.prefix` = `server_name`).
#[derive(Debug)]
pub struct EventBuilder {
    pub server_name: String,
    /// `schema.name.adjustment.mode`.
    names: NameAdjustment,
    pub partition: OffsetMap,
    source_schema: SchemaRef,
    update_description_schema: SchemaRef,
    truncated_array_schema: SchemaRef,
    collections: NamespaceMap<Arc<CollectionSchemas>>,
    /// Debezium's context headers, on every change event and tombstone made here.
    pub context: ContextHeaders,
}

/// Replaces characters Kafka does not allow in topic names with `_` (as Debezium does).
fn sanitize_topic(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

impl EventBuilder {
    /// Events of the connector whose `topic.prefix` is `server_name`; `names` adjusts the key
    /// and envelope schema names (`schema.name.adjustment.mode`).
    pub fn new(server_name: &str, names: NameAdjustment) -> Self {
        let mut partition = OffsetMap::new();
        partition.insert("server_id".into(), server_name.into());
        EventBuilder {
            server_name: server_name.to_owned(),
            names,
            partition,
            source_schema: source_schema(),
            update_description_schema: update_description_schema(),
            truncated_array_schema: truncated_array_schema(),
            collections: NamespaceMap::default(),
            context: ContextHeaders::disabled(),
        }
    }

    /// The schemas of `db.collection` (built on first use).
    pub fn collection(&mut self, db: &str, collection: &str) -> Arc<CollectionSchemas> {
        if let Some(c) = self.collections.get(db, collection) {
            return c.clone();
        }
        let topic = sanitize_topic(&format!("{}.{db}.{collection}", self.server_name));
        let key_schema = SchemaBuilder::struct_()
            .name(self.names.schema_name(&format!("{topic}.Key")).into_owned())
            .field("id", Schema::string())
            .build_ref();
        let envelope_schema = SchemaBuilder::struct_()
            .name(
                self.names
                    .schema_name(&format!("{topic}.Envelope"))
                    .into_owned(),
            )
            .field("before", json_schema())
            .field("after", json_schema())
            .field("updateDescription", self.update_description_schema.clone())
            .field("source", self.source_schema.clone())
            .field("op", Schema::optional_string())
            .field("ts_ms", Schema::optional_int64())
            .field(
                "transaction",
                headwater_connector_common::txmeta::block_schema(),
            )
            .build_ref();
        let base = SourceInfo {
            ts_ms: 0,
            ts_us: 0,
            ts_ns: 0,
            snapshot: "false",
            ord: 0,
            lsid: None,
            txn_number: None,
            wall_time: None,
        };
        let c = Arc::new(CollectionSchemas {
            db: db.to_owned(),
            collection: collection.to_owned(),
            topic,
            key_schema,
            envelope_schema,
            stream_source: self.source_block(db, collection, &base).into_shared(),
        });
        self.collections.insert(db, collection, c.clone());
        c
    }

    /// The `source` block of an event of collection `c`.
    pub fn source(&self, c: &CollectionSchemas, info: &SourceInfo) -> Struct {
        self.source_block(&c.db, &c.collection, info)
    }

    fn source_block(&self, db: &str, collection: &str, info: &SourceInfo) -> Struct {
        Struct::from_trusted_values(
            self.source_schema.clone(),
            vec![
                Value::String(crate::CONNECTOR_VERSION.into()),
                Value::String("mongodb".into()),
                Value::from(self.server_name.as_str()),
                Value::Int64(info.ts_ms),
                Value::String(info.snapshot.into()),
                Value::from(db),
                Value::Null,
                Value::Int64(info.ts_us),
                Value::Int64(info.ts_ns),
                Value::from(collection),
                Value::Int32(info.ord),
                info.lsid.clone().map_or(Value::Null, Value::from),
                info.txn_number.map_or(Value::Null, Value::Int64),
                info.wall_time.map_or(Value::Null, Value::Int64),
            ],
        )
    }

    /// The `source` block of a streamed event of `c`: outside a transaction, the collection's
    /// shared block with the five fields that vary per event replaced ([`Struct::replacing`]),
    /// so nothing else is built or copied; in a transaction, a block of its own.
    pub fn stream_source(&self, c: &CollectionSchemas, info: &SourceInfo) -> Struct {
        if info.lsid.is_some() || info.txn_number.is_some() || info.snapshot != "false" {
            return self.source(c, info);
        }
        c.stream_source
            .replacing([
                (SOURCE_TS_MS, Value::Int64(info.ts_ms)),
                (SOURCE_TS_US, Value::Int64(info.ts_us)),
                (SOURCE_TS_NS, Value::Int64(info.ts_ns)),
                (SOURCE_ORD, Value::Int32(info.ord)),
                (
                    SOURCE_WALL_TIME,
                    info.wall_time.map_or(Value::Null, Value::Int64),
                ),
            ])
            // The values match their fields by construction.
            .unwrap_or_else(|_| self.source(c, info))
    }

    /// `updateDescription` from its parts (`updatedFields` already as relaxed JSON).
    pub fn update_description(
        &self,
        removed: Vec<String>,
        updated: String,
        truncated: Vec<(String, i32)>,
    ) -> Struct {
        let removed = if removed.is_empty() {
            Value::Null
        } else {
            Value::Array(removed.into_iter().map(Value::from).collect())
        };
        let truncated = if truncated.is_empty() {
            Value::Null
        } else {
            Value::Array(
                truncated
                    .into_iter()
                    .map(|(field, size)| {
                        Value::Struct(Struct::from_trusted_values(
                            self.truncated_array_schema.clone(),
                            vec![Value::from(field), Value::Int32(size)],
                        ))
                    })
                    .collect(),
            )
        };
        Struct::from_trusted_values(
            self.update_description_schema.clone(),
            vec![removed, Value::from(updated), truncated],
        )
    }

    /// A change event record (no offset: the caller sets the one that covers it).
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &self,
        c: &CollectionSchemas,
        key_id: String,
        before: Option<String>,
        after: Option<String>,
        update_description: Option<Struct>,
        source: Struct,
        op: &str,
        now_ms: i64,
    ) -> SourceRecord {
        let key = Struct::from_trusted_values(c.key_schema.clone(), vec![Value::from(key_id)]);
        let envelope = Struct::from_trusted_values(
            c.envelope_schema.clone(),
            vec![
                before.map_or(Value::Null, Value::from),
                after.map_or(Value::Null, Value::from),
                update_description.map_or(Value::Null, Value::Struct),
                Value::Struct(source),
                Value::String(op.into()),
                Value::Int64(now_ms),
                Value::Null,
            ],
        );
        let mut record = SourceRecord::new(
            OffsetMap::new(),
            OffsetMap::new(),
            c.topic.clone(),
            Some(c.key_schema.clone()),
            Value::Struct(key),
            Some(c.envelope_schema.clone()),
            Value::Struct(envelope),
        );
        self.context.add_to(&mut record.headers);
        record
    }

    /// The tombstone after a delete of `key_id`.
    pub fn tombstone(&self, c: &CollectionSchemas, key_id: String) -> SourceRecord {
        let key = Struct::from_trusted_values(c.key_schema.clone(), vec![Value::from(key_id)]);
        let mut record = SourceRecord::new(
            OffsetMap::new(),
            OffsetMap::new(),
            c.topic.clone(),
            Some(c.key_schema.clone()),
            Value::Struct(key),
            None,
            Value::Null,
        );
        self.context.add_to(&mut record.headers);
        record
    }
}

/// Current time in ms, µs and ns since 1970.
pub fn now() -> (i64, i64, i64) {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (
        d.as_millis() as i64,
        d.as_micros() as i64,
        d.as_nanos() as i64,
    )
}

/// Values by database and collection name, looked up with borrowed names (a change event's
/// namespace is read from its bytes; a lookup allocates nothing).
///
/// A cache of values rebuilt on use: it holds at most [`MAX_CACHED_NAMESPACES`] entries and
/// starts over when full, so collections that come and go (one per tenant or per day, dropped
/// later; the stream reports no drops) do not grow it for the life of the task.
#[derive(Debug)]
pub(crate) struct NamespaceMap<T> {
    by_db: HashMap<String, HashMap<String, T>>,
    len: usize,
}

/// The most namespaces a [`NamespaceMap`] holds.
pub(crate) const MAX_CACHED_NAMESPACES: usize = 10_000;

impl<T> Default for NamespaceMap<T> {
    fn default() -> Self {
        NamespaceMap {
            by_db: HashMap::new(),
            len: 0,
        }
    }
}

impl<T> NamespaceMap<T> {
    pub(crate) fn get(&self, db: &str, collection: &str) -> Option<&T> {
        self.by_db.get(db)?.get(collection)
    }

    pub(crate) fn insert(&mut self, db: &str, collection: &str, value: T) {
        if self.len >= MAX_CACHED_NAMESPACES && self.get(db, collection).is_none() {
            self.by_db.clear();
            self.len = 0;
        }
        let previous = self
            .by_db
            .entry(db.to_owned())
            .or_default()
            .insert(collection.to_owned(), value);
        if previous.is_none() {
            self.len += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_caches_stay_bounded() {
        let mut map = NamespaceMap::default();
        for i in 0..MAX_CACHED_NAMESPACES + 5 {
            map.insert(&format!("db{}", i % 7), &format!("c{i}"), i);
            // Replacing an entry does not count twice.
            map.insert(&format!("db{}", i % 7), &format!("c{i}"), i);
            assert!(map.len <= MAX_CACHED_NAMESPACES);
            assert_eq!(map.get(&format!("db{}", i % 7), &format!("c{i}")), Some(&i));
        }
        assert_eq!(map.len, 5);
        assert_eq!(map.get("db0", "c0"), None);
    }

    #[test]
    fn schema_names_follow_the_adjustment_mode() {
        let name = |mode| {
            let mut events = EventBuilder::new("my-server", mode);
            let c = events.collection("shop", "orders");
            (
                c.topic.clone(),
                c.key_schema.name().unwrap_or_default().to_owned(),
                c.envelope_schema.name().unwrap_or_default().to_owned(),
            )
        };
        assert_eq!(
            name(NameAdjustment::None),
            (
                "my-server.shop.orders".into(),
                "my-server.shop.orders.Key".into(),
                "my-server.shop.orders.Envelope".into()
            )
        );
        let (topic, key, envelope) = name(NameAdjustment::Avro);
        assert_eq!(topic, "my-server.shop.orders", "topics keep their names");
        assert_eq!(key, "my_server.shop.orders.Key");
        assert_eq!(envelope, "my_server.shop.orders.Envelope");
        assert_eq!(
            name(NameAdjustment::AvroUnicode).2,
            "my_u002dserver.shop.orders.Envelope"
        );
    }

    #[test]
    fn stream_source_blocks_equal_built_ones() {
        let mut events = EventBuilder::new("dbserver1", NameAdjustment::None);
        let c = events.collection("inventory", "customers");
        let schema = source_schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name()).collect();
        assert_eq!(names[SOURCE_TS_MS], "ts_ms");
        assert_eq!(names[SOURCE_TS_US], "ts_us");
        assert_eq!(names[SOURCE_TS_NS], "ts_ns");
        assert_eq!(names[SOURCE_ORD], "ord");
        assert_eq!(names[SOURCE_WALL_TIME], "wallTime");
        for (wall, lsid, txn) in [
            (Some(1_700_000_000_123), None, None),
            (None, None, None),
            (Some(5), Some("{\"id\": 1}".to_owned()), Some(7)),
        ] {
            let info = SourceInfo {
                ts_ms: 1_700_000_000_123,
                ts_us: 1_700_000_000_123_000,
                ts_ns: 1_700_000_000_123_000_000,
                snapshot: "false",
                ord: 3,
                lsid,
                txn_number: txn,
                wall_time: wall,
            };
            let shared = events.stream_source(&c, &info);
            let built = events.source(&c, &info);
            assert_eq!(shared, built);
            assert_eq!(
                shared.replaced_parts().is_some(),
                info.lsid.is_none(),
                "events outside transactions share the collection's block"
            );
        }
    }
}
