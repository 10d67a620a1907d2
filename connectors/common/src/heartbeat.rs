//! Debezium's heartbeat records (`heartbeat.interval.ms`).
//!
//! A heartbeat is a record on `<topic.heartbeat.prefix>.<topic.prefix>` (default
//! `__debezium-heartbeat.<prefix>`) with key `{serverName}` (schema
//! `io.debezium.connector.common.ServerNameKey`) and value `{ts_ms}` (schema
//! `io.debezium.connector.common.Heartbeat`), carrying the connector's current source offset.
//! Committing it moves the stored offset (and, for PostgreSQL, the slot) forward while the
//! captured tables are quiet but the database is not, so a restart does not re-read, and a
//! server does not have to keep, everything since the last captured change.
//!
//! Invariant: a connector asks for a heartbeat only at a source-transaction boundary, with the
//! offset that boundary would carry, so a heartbeat never commits a position inside a
//! transaction.

use std::time::{Duration, Instant};

use headwater_api::{OffsetMap, Schema, SchemaBuilder, SchemaRef, SourceRecord, Struct, Value};

/// Debezium's default `topic.heartbeat.prefix`.
pub const DEFAULT_TOPIC_PREFIX: &str = "__debezium-heartbeat";

/// Emits heartbeats every `interval`.
pub struct Heartbeats {
    interval: Duration,
    next: Instant,
    topic: String,
    key_schema: SchemaRef,
    value_schema: SchemaRef,
    key: Value,
}

impl Heartbeats {
    /// Heartbeats for the connector with `topic.prefix` `server_name`, on
    /// `<heartbeat_prefix>.<server_name>`; `None` when `interval` is zero (off).
    pub fn new(interval: Duration, heartbeat_prefix: &str, server_name: &str) -> Option<Self> {
        if interval.is_zero() {
            return None;
        }
        let key_schema = SchemaBuilder::struct_()
            .name("io.debezium.connector.common.ServerNameKey")
            .version(1)
            .field("serverName", Schema::string())
            .build_ref();
        let value_schema = SchemaBuilder::struct_()
            .name("io.debezium.connector.common.Heartbeat")
            .version(1)
            .field("ts_ms", Schema::int64())
            .build_ref();
        let key = Value::Struct(Struct::from_trusted_values(
            key_schema.clone(),
            vec![Value::from(server_name)],
        ));
        Some(Heartbeats {
            interval,
            next: Instant::now() + interval,
            topic: format!("{heartbeat_prefix}.{server_name}"),
            key_schema,
            value_schema,
            key,
        })
    }

    /// The heartbeat topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Whether the interval since the last heartbeat has passed.
    pub fn due(&self) -> bool {
        Instant::now() >= self.next
    }

    /// A heartbeat record carrying `offset` of source `partition`; the next one is due an
    /// interval from now.
    pub fn record(&mut self, partition: OffsetMap, offset: OffsetMap) -> SourceRecord {
        self.next = Instant::now() + self.interval;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let value = Value::Struct(Struct::from_trusted_values(
            self.value_schema.clone(),
            vec![Value::Int64(now_ms)],
        ));
        SourceRecord::new(
            partition,
            offset,
            self.topic.clone(),
            Some(self.key_schema.clone()),
            self.key.clone(),
            Some(self.value_schema.clone()),
            value,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeats_are_off_at_zero_and_carry_the_offset() {
        assert!(Heartbeats::new(Duration::ZERO, DEFAULT_TOPIC_PREFIX, "cdc").is_none());
        let mut h =
            Heartbeats::new(Duration::from_millis(1), DEFAULT_TOPIC_PREFIX, "cdc").expect("on");
        assert_eq!(h.topic(), "__debezium-heartbeat.cdc");
        std::thread::sleep(Duration::from_millis(2));
        assert!(h.due());
        let mut offset = OffsetMap::new();
        offset.insert("lsn".into(), 42i64.into());
        let rec = h.record(OffsetMap::new(), offset.clone());
        let hourly = Heartbeats::new(Duration::from_secs(3600), "hb", "cdc").expect("on");
        assert!(!hourly.due());
        assert_eq!(hourly.topic(), "hb.cdc");
        assert_eq!(rec.topic, "__debezium-heartbeat.cdc");
        assert_eq!(rec.source_offset, offset);
        let key = rec.key.as_struct().expect("struct key");
        assert_eq!(key.get("serverName"), Some(&Value::from("cdc")));
        let value = rec.value.as_struct().expect("struct value");
        assert!(matches!(value.get("ts_ms"), Some(Value::Int64(ms)) if *ms > 0));
        assert_eq!(
            value.schema().name(),
            Some("io.debezium.connector.common.Heartbeat")
        );
    }
}
