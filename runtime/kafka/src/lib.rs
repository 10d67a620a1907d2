//! Headwater's Kafka wire protocol server over the embedded log.
//!
//! Kafka clients (librdkafka, the Java client, franz-go, kafka-python) point
//! `bootstrap.servers` at the worker and consume, produce and manage consumer groups as
//! against a single-broker Kafka cluster. See `docs/kafka-protocol.md` for the APIs and
//! versions served and what differs from a broker.
//!
//! Layout: [`codec`] decodes request frames and encodes responses (with the `kafka-protocol`
//! crate, vendored with a fix, see `vendor/kafka-protocol/VENDORED.md`); [`api`] answers each
//! request over the log; [`groups`] is the classic group coordinator; [`offsets`] keeps
//! committed offsets in the compacted `__consumer_offsets` topic; [`server`] is the listener.

pub mod api;
pub mod codec;
pub mod groups;
pub mod offsets;
pub mod sasl;
pub mod server;

pub use api::topic_id;
pub use offsets::OFFSETS_TOPIC;
pub use server::{KafkaServer, ServerConfig, TopicOwner};
