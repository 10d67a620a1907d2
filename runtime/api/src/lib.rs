//! `headwater-api`: everything a Headwater plugin (source, transform, predicate, converter)
//! sees, and nothing else.
//!
//! - [`schema`] and [`value`]: Kafka Connect's data model (schemas, values, structs), with
//!   values validated against their schema;
//! - [`logical`]: Connect logical types and Debezium semantic types;
//! - [`record`]: [`SourceRecord`], headers and the source partition/offset maps;
//! - [`plugin`]: the Source / Transform / Predicate contracts;
//! - [`sink`]: the Sink connector and task contracts and [`SinkRecord`];
//! - [`config`]: typed configuration definitions and per-field validation;
//! - [`error`]: the error classes that decide retry versus fail;
//! - [`java`]: Java's number text (`Double.toString`), for formats written by Java code.
//!
//! This crate depends on no other Headwater crate; plugins depend on it only.

pub mod civil;
pub mod config;
pub mod error;
pub mod java;
pub mod logical;
pub mod plugin;
pub mod record;
pub mod scan;
pub mod schema;
pub mod sink;
pub mod value;

pub use config::{
    ConfigDef, ConfigKey, ConfigType, ConfigValidation, ConfigValue, Importance, Validator,
};
pub use error::{ConnectError, DataError, ErrorKind};
pub use plugin::{
    properties, Boundary, PluginFactory, Predicate, Properties, SnapshotProgress, SnapshotStatus,
    SourceBatch, SourceConnector, SourceTask, SourceTaskContext, StopRequest, TaskWaiting,
    Transform, WaitingStatus,
};
pub use record::{
    ConnectRecord, Header, HeaderRunRef, Headers, OffsetMap, OffsetValue, SourceRecord,
};
pub use schema::{Field, Schema, SchemaBuilder, SchemaRef, SchemaType};
pub use sink::{
    FieldsRead, SinkBatch, SinkConnector, SinkRecord, SinkTask, SinkTaskContext, TopicPartition,
};
pub use value::{Struct, Value};
