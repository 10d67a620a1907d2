//! The sink contracts: what a sink connector and a sink task promise to the engine, and what the
//! engine promises back (Kafka Connect's `SinkConnector` / `SinkTask`, reshaped for
//! exactly-once delivery).
//!
//! The engine reads the connector's topics from the log (read_committed), converts and
//! transforms the records, and hands them to [`SinkTask::put`] in batches, in offset order per
//! topic partition. Each batch says where consumption continues after it
//! ([`SinkBatch::next_offsets`], which also covers records dropped by transforms).
//!
//! Delivery:
//! - `put` returns only once the batch is durable in the destination; the engine then stores
//!   `next_offsets` as the connector's sink offsets (shown by the REST API and metrics) and
//!   never hands those records out again to this task instance;
//! - at-least-once: after a crash the engine resumes from its stored offsets, so records put
//!   after the last stored offsets may be put again;
//! - exactly-once: a task that commits `next_offsets` in the same destination transaction as
//!   the data returns them from [`SinkTask::stored_offsets`]; the engine resumes from those,
//!   whatever its own store says, so nothing is applied twice.

use crate::config::{ConfigDef, ConfigValidation};
use crate::error::ConnectError;
use crate::plugin::{BoxFuture, Properties};
use crate::record::Headers;
use crate::schema::SchemaRef;
use crate::value::Value;

/// A partition of a topic.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: u32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: u32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// One record read from the log, converted (and transformed) for a sink.
#[derive(Clone, Debug, PartialEq)]
pub struct SinkRecord {
    /// The topic after transforms (routers may rename it); the partition and offset are where
    /// it was read.
    pub topic: String,
    /// The topic it was read from (Kafka Connect's `originalTopic`): the one its partition
    /// and offset, and the batch's `next_offsets`, refer to.
    pub original_topic: String,
    pub partition: u32,
    pub offset: i64,
    /// Milliseconds since the epoch (the record's timestamp in the log).
    pub timestamp: i64,
    pub key_schema: Option<SchemaRef>,
    pub key: Value,
    pub value_schema: Option<SchemaRef>,
    /// `Value::Null` for a tombstone.
    pub value: Value,
    pub headers: Headers,
}

/// Records for one `put`, in offset order per topic partition.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SinkBatch {
    pub records: Vec<SinkRecord>,
    /// Per topic partition read for this batch: the offset consumption continues from after
    /// it (the offset after the last record read, kept or dropped by transforms).
    pub next_offsets: Vec<(TopicPartition, i64)>,
}

/// The top-level fields a sink task reads of the values whose schema has certain fields
/// ([`SinkTask::value_fields_read`]). When the connector has no transforms (a transform may read
/// any field), the engine may leave every other top-level field of such a value null, required
/// ones included, instead of decoding it; the value's schema stays the full one. A Debezium
/// envelope's `source` block is most of an event's decoding cost, and a sink that writes only
/// `after` need not pay for it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldsRead {
    /// The values this applies to: structs whose schema has every one of these fields (for
    /// Debezium envelopes: `op`, `after`, `source`). Others are decoded whole.
    pub when_schema_has: Vec<String>,
    /// The fields read of those values.
    pub read: Vec<String>,
}

impl FieldsRead {
    /// For a struct schema this applies to (of at most 64 fields): the bit set of the field
    /// indexes to decode; `None` when every field must be decoded.
    pub fn mask(&self, schema: &crate::schema::Schema) -> Option<u64> {
        let fields = schema.fields();
        if schema.schema_type() != crate::schema::SchemaType::Struct
            || fields.len() > 64
            || !self
                .when_schema_has
                .iter()
                .all(|w| fields.iter().any(|f| f.name() == w))
        {
            return None;
        }
        Some(
            fields
                .iter()
                .enumerate()
                .filter(|(_, f)| self.read.iter().any(|r| r == f.name()))
                .fold(0u64, |m, (i, _)| m | (1 << i)),
        )
    }
}

/// What the engine tells a sink task when it starts.
#[derive(Clone, Debug, Default)]
pub struct SinkTaskContext {
    pub connector_name: String,
    pub task_id: u32,
}

/// A sink connector: validates its configuration and splits the work into task configs
/// (the engine assigns topic partitions to tasks itself).
pub trait SinkConnector: Send + Sync {
    fn version(&self) -> String;
    fn config_def(&self) -> ConfigDef;
    fn validate(&self, props: &Properties) -> ConfigValidation {
        self.config_def().validate(props)
    }
    fn task_configs(
        &self,
        props: &Properties,
        max_tasks: usize,
    ) -> Result<Vec<Properties>, ConnectError>;
    fn create_task(&self) -> Box<dyn SinkTask>;
}

/// A sink task: writes batches of records to a destination.
///
/// Contract: `start` connects; `put` is also called with an empty batch when no records came
/// for about a second (so a sink that buffers can flush by time); `stored_offsets` answers for
/// the given partitions where the
/// destination's own offsets say to resume (an empty answer for at-least-once sinks); `put`
/// writes a whole batch durably or fails (a retriable error makes the engine restart the task
/// from the last offsets stored, so a partly applied batch must not become visible); `stop`
/// releases connections.
pub trait SinkTask: Send {
    fn start(
        &mut self,
        context: SinkTaskContext,
        props: Properties,
    ) -> BoxFuture<'_, Result<(), ConnectError>>;
    fn stored_offsets<'a>(
        &'a mut self,
        partitions: &'a [TopicPartition],
    ) -> BoxFuture<'a, Result<Vec<(TopicPartition, i64)>, ConnectError>>;
    fn put(&mut self, batch: SinkBatch) -> BoxFuture<'_, Result<(), ConnectError>>;
    fn stop(&mut self) -> BoxFuture<'_, ()>;
    /// Which top-level fields of struct values this task reads (asked once after `start`);
    /// `None`, the default, for all of them. See [`FieldsRead`].
    fn value_fields_read(&self) -> Option<FieldsRead> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Schema, SchemaBuilder};

    #[test]
    fn fields_read_masks_only_the_values_it_applies_to() {
        let read = FieldsRead {
            when_schema_has: vec!["op".into(), "after".into()],
            read: vec!["after".into(), "op".into()],
        };
        let envelope = SchemaBuilder::struct_()
            .field("before", Schema::optional_string())
            .field("after", Schema::optional_string())
            .field("source", Schema::string())
            .field("op", Schema::string())
            .build();
        assert_eq!(read.mask(&envelope), Some(0b1010));
        let row = SchemaBuilder::struct_()
            .field("after", Schema::string())
            .build();
        assert_eq!(read.mask(&row), None);
        assert_eq!(read.mask(&Schema::string()), None);
    }
}
