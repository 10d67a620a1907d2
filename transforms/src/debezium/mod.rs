//! Debezium's transforms (`io.debezium.transforms.*`): ExtractNewRecordState, MongoDB's
//! ExtractNewDocumentState (with the extended-JSON reader it needs),
//! ByLogicalTableRouter / ToLogicalTopicRouter, the outbox EventRouter, HeaderToValue,
//! SchemaChangeEventFilter and TimezoneConverter, with Debezium 3.x semantics.
//!
//! A record is a change event *envelope* when its value schema's name ends with `.Envelope`
//! (Debezium's `Envelope.isEnvelopeSchema`); the transforms leave other records (heartbeats,
//! schema changes, transaction metadata) alone unless documented otherwise.

pub mod bson_json;
pub mod extract_new_document_state;
pub mod extract_new_record_state;
pub mod header_to_value;
pub mod logical_router;
pub mod outbox;
pub mod schema_change_filter;
pub mod timezone_converter;

pub use extract_new_document_state::ExtractNewDocumentState;
pub use extract_new_record_state::ExtractNewRecordState;
pub use header_to_value::HeaderToValue;
pub use logical_router::LogicalTopicRouter;
pub use outbox::EventRouter;
pub use schema_change_filter::SchemaChangeEventFilter;
pub use timezone_converter::TimezoneConverter;

use headwater_api::{ConnectRecord, Schema};

use crate::registry::{boxed, TransformPlugin};

/// Debezium's `Envelope.isEnvelopeSchema`.
pub fn is_envelope(schema: &Schema) -> bool {
    schema.name().is_some_and(|n| n.ends_with(".Envelope"))
}

/// Debezium's part of the transform registry.
pub(crate) fn plugins<R: ConnectRecord>() -> Vec<TransformPlugin<R>> {
    vec![
        TransformPlugin {
            class: "io.debezium.transforms.ExtractNewRecordState",
            aliases: &["ExtractNewRecordState"],
            config_def: ExtractNewRecordState::config_def,
            configure: |p| ExtractNewRecordState::configure(p).map(boxed),
        },
        TransformPlugin {
            class: "io.debezium.connector.mongodb.transforms.ExtractNewDocumentState",
            aliases: &["ExtractNewDocumentState"],
            config_def: ExtractNewDocumentState::config_def,
            configure: |p| ExtractNewDocumentState::configure(p).map(boxed),
        },
        TransformPlugin {
            class: "io.debezium.transforms.ByLogicalTableRouter",
            aliases: &["ByLogicalTableRouter"],
            config_def: || LogicalTopicRouter::config_def(true),
            configure: |p| LogicalTopicRouter::configure(true, p).map(boxed),
        },
        TransformPlugin {
            class: "io.debezium.transforms.ToLogicalTopicRouter",
            aliases: &["ToLogicalTopicRouter"],
            config_def: || LogicalTopicRouter::config_def(false),
            configure: |p| LogicalTopicRouter::configure(false, p).map(boxed),
        },
        TransformPlugin {
            class: "io.debezium.transforms.outbox.EventRouter",
            aliases: &["EventRouter"],
            config_def: EventRouter::config_def,
            configure: |p| EventRouter::configure(p).map(boxed),
        },
        TransformPlugin {
            class: "io.debezium.transforms.HeaderToValue",
            aliases: &["HeaderToValue"],
            config_def: HeaderToValue::config_def,
            configure: |p| HeaderToValue::configure(p).map(boxed),
        },
        TransformPlugin {
            class: "io.debezium.transforms.SchemaChangeEventFilter",
            aliases: &["SchemaChangeEventFilter"],
            config_def: SchemaChangeEventFilter::config_def,
            configure: |p| SchemaChangeEventFilter::configure(p).map(boxed),
        },
        TransformPlugin {
            class: "io.debezium.transforms.TimezoneConverter",
            aliases: &["TimezoneConverter"],
            config_def: TimezoneConverter::config_def,
            configure: |p| TimezoneConverter::configure(p).map(boxed),
        },
    ]
}

#[cfg(test)]
mod tests;
