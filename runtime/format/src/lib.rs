//! `headwater-format`: converters between Headwater's data model and the bytes stored in the log.
//!
//! [`converters`] has the `Converter` contract, StringConverter, ByteArrayConverter and the
//! converter registry by class name.
//!
//! [`json::JsonConverter`] reproduces Kafka Connect's `JsonConverter` byte for byte (proved
//! against records captured from Debezium in the golden tests). [`avro::AvroConverter`] is
//! Confluent's AvroConverter with a schema registry client. Converters depend on
//! `headwater-api` (and `ureq` to reach an external registry).

pub mod avro;
pub mod converters;
pub mod java_text;
pub mod json;

pub use converters::{
    create_converter, find_converter, ByteArrayConverter, Converter, StringConverter,
};
pub use json::{DecimalFormat, JsonConverter, JsonConverterConfig, SchemaAndValue, SharedSpan};
