//! Kafka Connect's built-in transforms (`org.apache.kafka.connect.transforms.*`) and
//! predicates (`...transforms.predicates.*`), with the same semantics and the same kind of error
//! messages. Each transform has `config_def()` (its keys, defaults and docs) and
//! `configure(...)` (validation including cross-field checks, then a ready instance).

pub mod cast;
pub mod fields;
pub mod flatten;
pub mod headers;
pub mod predicates;
pub mod routers;
pub mod timestamp_converter;

pub use cast::Cast;
pub use fields::{
    ExtractField, FieldPath, HoistField, InsertField, MaskField, ReplaceField, SetSchemaMetadata,
    ValueToKey,
};
pub use flatten::Flatten;
pub use headers::{DropHeaders, Filter, HeaderFrom, InsertHeader};
pub use predicates::{HasHeaderKey, RecordIsTombstone, TopicNameMatches};
pub use routers::{RegexRouter, TimestampRouter};
pub use timestamp_converter::TimestampConverter;

#[cfg(test)]
pub(crate) mod tests;
