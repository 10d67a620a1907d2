//! `headwater-format`: converters between Headwater's data model and the bytes stored in the log.
//!
//! [`json::JsonConverter`] reproduces Kafka Connect's `JsonConverter` byte for byte (proved
//! against records captured from Debezium in the golden tests). Converters depend on
//! `headwater-api` only.

pub mod java_text;
pub mod json;

pub use json::{DecimalFormat, JsonConverter, JsonConverterConfig, SchemaAndValue};
