//! `io.debezium.transforms.SchemaChangeEventFilter`: drops schema change events (value schema
//! named `*.SchemaChangeValue` / `*.SchemaChangeKey`) whose type is in
//! `schema.change.event.exclude.list` (`CREATE, ALTER, DROP, TRUNCATE, DATABASE`). The type is
//! the first `tableChanges` entry's `type`, or `DATABASE` when `tableChanges` is empty; an event
//! without `tableChanges` is dropped. Other records pass unchanged.

use headwater_api::config::{ConfigKey, ConfigType, Importance, Validator};
use headwater_api::{
    ConfigDef, ConfigValidation, ConfigValue, ConnectError, ConnectRecord, Properties, Transform,
    Value,
};

use crate::util::configure;

const TYPES: [&str; 5] = ["CREATE", "ALTER", "DROP", "TRUNCATE", "DATABASE"];

fn parse_types(s: &str) -> Result<Vec<String>, String> {
    s.split(',')
        .map(|t| {
            let t = t.trim();
            if TYPES.contains(&t) {
                Ok(t.to_owned())
            } else {
                Err(format!(
                    "No enum constant io.debezium.schema.SchemaChangeEvent.SchemaChangeEventType.{t}"
                ))
            }
        })
        .collect()
}

/// `io.debezium.transforms.SchemaChangeEventFilter`.
#[derive(Debug)]
pub struct SchemaChangeEventFilter {
    excluded: Vec<String>,
}

impl SchemaChangeEventFilter {
    pub fn config_def() -> ConfigDef {
        ConfigDef::new().define(
            ConfigKey::new("schema.change.event.exclude.list", ConfigType::String)
                .validator(Validator::custom(|v| match v {
                    ConfigValue::String(s) => parse_types(s).map(|_| ()),
                    _ => Ok(()),
                }))
                .importance(Importance::High)
                .doc("Support filtering during DDL synchronization: CREATE, ALTER, DROP, TRUNCATE, DATABASE"),
        )
    }

    pub fn configure(props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(), props, |c, _| {
            Some(SchemaChangeEventFilter {
                excluded: parse_types(c.get_string("schema.change.event.exclude.list")?).ok()?,
            })
        })
    }
}

impl<R: ConnectRecord> Transform<R> for SchemaChangeEventFilter {
    fn apply(&self, record: R) -> Result<Option<R>, ConnectError> {
        let is_schema_change = record
            .value_schema()
            .and_then(|s| s.name())
            .is_some_and(|n| n.ends_with(".SchemaChangeValue") || n.ends_with(".SchemaChangeKey"));
        if record.value().is_null() || !is_schema_change {
            return Ok(Some(record));
        }
        let Value::Struct(v) = record.value() else {
            return Err(ConnectError::data(
                "Only Struct objects supported for [Read schema change event to filter]",
            ));
        };
        let kind = match v.get("tableChanges") {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Array(items)) if items.is_empty() => "DATABASE".to_owned(),
            Some(Value::Array(items)) => match &items[0] {
                Value::Struct(change) => change
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                _ => String::new(),
            },
            Some(_) => return Ok(Some(record)),
        };
        Ok(if self.excluded.contains(&kind) {
            None
        } else {
            Some(record)
        })
    }
}
