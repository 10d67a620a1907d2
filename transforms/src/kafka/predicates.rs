//! Kafka Connect's predicates (`org.apache.kafka.connect.transforms.predicates.*`):
//! TopicNameMatches (whole-topic, case-sensitive Java regex match), HasHeaderKey (at least one
//! header with the name) and RecordIsTombstone (the value is null, whatever the value schema).

use headwater_api::config::{ConfigKey, ConfigType, Importance, Validator};
use headwater_api::{
    ConfigDef, ConfigValidation, ConfigValue, ConnectRecord, Predicate, Properties,
};

use crate::java_regex::JavaRegex;
use crate::util::{configure, get_string};

/// `org.apache.kafka.connect.transforms.predicates.TopicNameMatches`.
#[derive(Debug)]
pub struct TopicNameMatches {
    pattern: JavaRegex,
}

impl TopicNameMatches {
    pub fn config_def() -> ConfigDef {
        ConfigDef::new().define(
            ConfigKey::new("pattern", ConfigType::String)
                .validator(Validator::custom(|v| match v {
                    ConfigValue::String(s) if s.is_empty() => {
                        Err("String must be non-empty".to_owned())
                    }
                    ConfigValue::String(s) => JavaRegex::compile(s)
                        .map(|_| ())
                        .map_err(|e| format!("Invalid regex: {e}")),
                    _ => Ok(()),
                }))
                .importance(Importance::Medium)
                .doc(
                    "A Java regular expression for matching against the name of a record's topic.",
                ),
        )
    }

    pub fn configure(props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(), props, |c, _| {
            Some(TopicNameMatches {
                pattern: JavaRegex::compile(c.get_string("pattern")?).ok()?,
            })
        })
    }
}

impl<R: ConnectRecord> Predicate<R> for TopicNameMatches {
    fn test(&self, record: &R) -> bool {
        // A regex that fails at run time (backtrack limit) counts as "no match".
        self.pattern.matches(record.topic()).unwrap_or(false)
    }
}

/// `org.apache.kafka.connect.transforms.predicates.HasHeaderKey`.
#[derive(Debug)]
pub struct HasHeaderKey {
    name: String,
}

impl HasHeaderKey {
    pub fn config_def() -> ConfigDef {
        ConfigDef::new().define(
            ConfigKey::new("name", ConfigType::String)
                .validator(Validator::NonEmptyString)
                .importance(Importance::Medium)
                .doc("The header name."),
        )
    }

    pub fn configure(props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(), props, |c, _| {
            Some(HasHeaderKey {
                name: get_string(c, "name")?,
            })
        })
    }
}

impl<R: ConnectRecord> Predicate<R> for HasHeaderKey {
    fn test(&self, record: &R) -> bool {
        record.headers().iter().any(|h| h.key == self.name)
    }
}

/// `org.apache.kafka.connect.transforms.predicates.RecordIsTombstone`.
#[derive(Debug, Default)]
pub struct RecordIsTombstone;

impl RecordIsTombstone {
    pub fn config_def() -> ConfigDef {
        ConfigDef::new()
    }
    pub fn configure(props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(), props, |_, _| Some(RecordIsTombstone))
    }
}

impl<R: ConnectRecord> Predicate<R> for RecordIsTombstone {
    fn test(&self, record: &R) -> bool {
        record.value().is_null()
    }
}
