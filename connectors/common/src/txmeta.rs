//! Debezium's transaction metadata (`provide.transaction.metadata`).
//!
//! For every source transaction with at least one data change event, a `BEGIN` record goes
//! before its first event and an `END` record after its last one, on
//! `<topic.prefix>.<topic.transaction>` (default `<prefix>.transaction`), with key `{id}`
//! (`io.debezium.connector.common.TransactionMetadataKey`) and value `{status, id,
//! event_count, data_collections, ts_ms}` (`io.debezium.connector.common.TransactionMetadataValue`;
//! `data_collections` lists `{data_collection, event_count}` in first-appearance order). Every
//! data change event of the transaction carries the envelope's `transaction` block `{id,
//! total_order, data_collection_order}` (`event.block`), both orders counting from 1.
//!
//! Invariants: a transaction's `BEGIN` precedes all its events and its `END` follows them, so
//! both land in the same engine transaction as the events; events without a `transaction`
//! field (tombstones, schema changes, heartbeats) are neither annotated nor counted.

use headwater_api::{OffsetMap, Schema, SchemaBuilder, SchemaRef, SourceRecord, Struct, Value};

/// Debezium's default `topic.transaction`.
pub const DEFAULT_TOPIC_SUFFIX: &str = "transaction";

/// The schema of the envelope's `transaction` block.
pub fn block_schema() -> SchemaRef {
    SchemaBuilder::struct_()
        .optional()
        .name("event.block")
        .version(1)
        .field("id", Schema::string())
        .field("total_order", Schema::int64())
        .field("data_collection_order", Schema::int64())
        .build_ref()
}

/// The open transaction being annotated.
struct Open {
    id: String,
    ts_ms: i64,
    total: i64,
    /// Per data collection, in first-appearance order, its events so far.
    collections: Vec<(String, i64)>,
}

/// Tracks one source's transactions and builds their metadata records.
pub struct TransactionMetadata {
    topic: String,
    key_schema: SchemaRef,
    value_schema: SchemaRef,
    collection_schema: SchemaRef,
    block_schema: SchemaRef,
    open: Option<Open>,
}

impl TransactionMetadata {
    /// Metadata on `<server_name>.<topic_suffix>`.
    pub fn new(server_name: &str, topic_suffix: &str) -> Self {
        let key_schema = SchemaBuilder::struct_()
            .name("io.debezium.connector.common.TransactionMetadataKey")
            .version(1)
            .field("id", Schema::string())
            .build_ref();
        let collection_schema = SchemaBuilder::struct_()
            .optional()
            .name("event.collection")
            .version(1)
            .field("data_collection", Schema::string())
            .field("event_count", Schema::int64())
            .build_ref();
        let value_schema = SchemaBuilder::struct_()
            .name("io.debezium.connector.common.TransactionMetadataValue")
            .version(1)
            .field("status", Schema::string())
            .field("id", Schema::string())
            .field("event_count", Schema::optional_int64())
            .field(
                "data_collections",
                SchemaBuilder::array(collection_schema.clone())
                    .optional()
                    .build_ref(),
            )
            .field("ts_ms", Schema::int64())
            .build_ref();
        TransactionMetadata {
            topic: format!("{server_name}.{topic_suffix}"),
            key_schema,
            value_schema,
            collection_schema,
            block_schema: block_schema(),
            open: None,
        }
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Starts tracking a source transaction (its `BEGIN` is written with its first event).
    pub fn begin(&mut self, id: String, ts_ms: i64) {
        self.open = Some(Open {
            id,
            ts_ms,
            total: 0,
            collections: Vec::new(),
        });
    }

    /// Annotates a data change event of the open transaction from `collection` with its
    /// `transaction` block; returns the transaction's `BEGIN` record when this is its first
    /// event (to be handed out before it). Records without a `transaction` field, or outside
    /// a transaction, are left alone.
    pub fn annotate(
        &mut self,
        record: &mut SourceRecord,
        collection: &str,
    ) -> Option<SourceRecord> {
        let Value::Struct(envelope) = &mut record.value else {
            return None;
        };
        let field = envelope.schema().field("transaction")?.index();
        let first = self.open.as_ref()?;
        let begin = (first.total == 0).then(|| {
            let value = Struct::from_trusted_values(
                self.value_schema.clone(),
                vec![
                    Value::from("BEGIN"),
                    Value::from(first.id.as_str()),
                    Value::Null,
                    Value::Null,
                    Value::Int64(first.ts_ms),
                ],
            );
            // Without an offset (a later record of the transaction carries one), so without
            // a source partition either.
            self.metadata_record(&first.id, value, OffsetMap::new(), OffsetMap::new())
        });
        let open = self.open.as_mut()?;
        open.total += 1;
        let order = match open.collections.iter_mut().find(|(c, _)| c == collection) {
            Some((_, n)) => {
                *n += 1;
                *n
            }
            None => {
                open.collections.push((collection.to_owned(), 1));
                1
            }
        };
        let block = Struct::from_trusted_values(
            self.block_schema.clone(),
            vec![
                Value::from(open.id.as_str()),
                Value::Int64(open.total),
                Value::Int64(order),
            ],
        );
        // The envelope's `transaction` field has this schema (built by `block_schema`).
        let _ = envelope.put_at(field, Value::Struct(block));
        begin
    }

    /// Ends the open transaction: its `END` record, when it had events (carrying `offset`,
    /// the offset that closes the transaction).
    pub fn end(&mut self, partition: &OffsetMap, offset: OffsetMap) -> Option<SourceRecord> {
        let open = self.open.take()?;
        if open.total == 0 {
            return None;
        }
        let collections = open
            .collections
            .iter()
            .map(|(c, n)| {
                Value::Struct(Struct::from_trusted_values(
                    self.collection_schema.clone(),
                    vec![Value::from(c.as_str()), Value::Int64(*n)],
                ))
            })
            .collect();
        let value = Struct::from_trusted_values(
            self.value_schema.clone(),
            vec![
                Value::from("END"),
                Value::from(open.id.as_str()),
                Value::Int64(open.total),
                Value::Array(collections),
                Value::Int64(open.ts_ms),
            ],
        );
        Some(self.metadata_record(&open.id, value, partition.clone(), offset))
    }

    /// Forgets the open transaction without an `END` (a rolled-back one).
    pub fn abandon(&mut self) {
        self.open = None;
    }

    /// Whether a transaction is being tracked.
    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// Whether the open transaction has emitted events (so its `END` is owed).
    pub fn has_events(&self) -> bool {
        self.open.as_ref().is_some_and(|o| o.total > 0)
    }

    fn metadata_record(
        &self,
        id: &str,
        value: Struct,
        partition: OffsetMap,
        offset: OffsetMap,
    ) -> SourceRecord {
        let key = Struct::from_trusted_values(self.key_schema.clone(), vec![Value::from(id)]);
        SourceRecord::new(
            partition,
            offset,
            self.topic.clone(),
            Some(self.key_schema.clone()),
            Value::Struct(key),
            Some(self.value_schema.clone()),
            Value::Struct(value),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(topic: &str) -> SourceRecord {
        let schema = SchemaBuilder::struct_()
            .name(format!("{topic}.Envelope"))
            .field("op", Schema::string())
            .field("transaction", block_schema())
            .build_ref();
        let value =
            Struct::from_trusted_values(schema.clone(), vec![Value::from("c"), Value::Null]);
        SourceRecord::new(
            OffsetMap::new(),
            OffsetMap::new(),
            topic.to_owned(),
            None,
            Value::Null,
            Some(schema),
            Value::Struct(value),
        )
    }

    fn block(rec: &SourceRecord) -> (String, i64, i64) {
        let b = rec.value.as_struct().unwrap().get("transaction").unwrap();
        let b = b.as_struct().unwrap();
        (
            b.get("id").unwrap().as_str().unwrap().to_owned(),
            b.get("total_order").unwrap().as_i64().unwrap(),
            b.get("data_collection_order").unwrap().as_i64().unwrap(),
        )
    }

    #[test]
    fn begin_blocks_and_end_as_debezium_writes_them() {
        let p = OffsetMap::new();
        let mut t = TransactionMetadata::new("cdc", DEFAULT_TOPIC_SUFFIX);
        assert_eq!(t.topic(), "cdc.transaction");
        let mut outside = event("cdc.public.a");
        assert!(
            t.annotate(&mut outside, "public.a").is_none(),
            "no open transaction"
        );
        t.begin("571:53195829".into(), 1_700_000_000_000);
        let (mut a1, mut b1, mut a2) = (event("a"), event("b"), event("a"));
        let begin = t
            .annotate(&mut a1, "public.a")
            .expect("BEGIN with the first event");
        assert!(t.annotate(&mut b1, "public.b").is_none());
        assert!(t.annotate(&mut a2, "public.a").is_none());
        assert_eq!(begin.topic, "cdc.transaction");
        let v = begin.value.as_struct().unwrap();
        assert_eq!(v.get("status"), Some(&Value::from("BEGIN")));
        assert_eq!(v.get("event_count"), Some(&Value::Null));
        assert_eq!(block(&a1), ("571:53195829".into(), 1, 1));
        assert_eq!(block(&b1), ("571:53195829".into(), 2, 1));
        assert_eq!(block(&a2), ("571:53195829".into(), 3, 2));
        let mut o = OffsetMap::new();
        o.insert("lsn".into(), 9i64.into());
        let end = t.end(&p, o.clone()).expect("END");
        assert_eq!(end.source_offset, o);
        let v = end.value.as_struct().unwrap();
        assert_eq!(v.get("status"), Some(&Value::from("END")));
        assert_eq!(v.get("event_count"), Some(&Value::Int64(3)));
        let Some(Value::Array(cols)) = v.get("data_collections") else {
            panic!("collections")
        };
        let cols: Vec<(String, i64)> = cols
            .iter()
            .map(|c| {
                let c = c.as_struct().unwrap();
                (
                    c.get("data_collection")
                        .unwrap()
                        .as_str()
                        .unwrap()
                        .to_owned(),
                    c.get("event_count").unwrap().as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(cols, [("public.a".into(), 2), ("public.b".into(), 1)]);
        assert_eq!(
            end.key.as_struct().unwrap().get("id"),
            Some(&Value::from("571:53195829"))
        );
        // A transaction without events writes neither BEGIN nor END.
        t.begin("1:2".into(), 0);
        assert!(t.end(&p, OffsetMap::new()).is_none());
    }
}
