//! Topic routers: `org.apache.kafka.connect.transforms.RegexRouter` and `TimestampRouter`.
//!
//! RegexRouter: the pattern must match the whole topic (`Matcher.matches()`), then the topic
//! becomes `Matcher.replaceFirst(replacement)` with Java's replacement grammar (see
//! [`crate::java_regex`]); a non-matching topic is left alone. The regex is validated at
//! configuration; a malformed replacement fails matching records only, as in Kafka.
//!
//! TimestampRouter: `${topic}` and `${timestamp}` in `topic.format` are replaced literally, the
//! timestamp being the record timestamp formatted with `timestamp.format` (SimpleDateFormat) in
//! UTC; a record without a timestamp is an error.

use headwater_api::config::{ConfigKey, ConfigType, Importance, Validator};
use headwater_api::{
    ConfigDef, ConfigValidation, ConfigValue, ConnectError, ConnectRecord, Properties, Transform,
};

use crate::java_regex::{JavaRegex, JavaReplacement};
use crate::java_time::SimpleDateFormat;
use crate::util::{configure, get_string};

/// Kafka's `RegexValidator` ("Invalid regex: ...").
pub(crate) fn regex_validator() -> Validator {
    Validator::custom(|v| match v {
        ConfigValue::String(s) => JavaRegex::compile(s)
            .map(|_| ())
            .map_err(|e| format!("Invalid regex: {e}")),
        _ => Ok(()),
    })
}

/// `org.apache.kafka.connect.transforms.RegexRouter`.
#[derive(Debug)]
pub struct RegexRouter {
    regex: JavaRegex,
    replacement: JavaReplacement,
}

impl RegexRouter {
    pub fn config_def() -> ConfigDef {
        ConfigDef::new()
            .define(
                ConfigKey::new("regex", ConfigType::String)
                    .validator(regex_validator())
                    .importance(Importance::High)
                    .doc("Regular expression to use for matching."),
            )
            .define(
                ConfigKey::new("replacement", ConfigType::String)
                    .importance(Importance::High)
                    .doc("Replacement string."),
            )
    }

    pub fn configure(props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(), props, |c, _| {
            // The ConfigDef trims values; Kafka does too (SimpleConfig getString on a trimmed parse).
            let regex = JavaRegex::compile(c.get_string("regex")?).ok()?;
            let replacement = regex.replacement(&get_string(c, "replacement")?);
            Some(RegexRouter { regex, replacement })
        })
    }

    /// A router from already-compiled parts (used by Debezium's routers).
    pub fn new(regex: JavaRegex, replacement: &str) -> Self {
        let replacement = regex.replacement(replacement);
        RegexRouter { regex, replacement }
    }

    /// The new topic, or `None` when the topic does not match.
    pub fn route(&self, topic: &str) -> Result<Option<String>, ConnectError> {
        self.regex
            .route(topic, &self.replacement)
            .map_err(ConnectError::data)
    }
}

impl<R: ConnectRecord> Transform<R> for RegexRouter {
    fn apply(&self, mut record: R) -> Result<Option<R>, ConnectError> {
        if let Some(topic) = self.route(record.topic())? {
            record.set_topic(topic);
        }
        Ok(Some(record))
    }
}

/// `org.apache.kafka.connect.transforms.TimestampRouter`.
#[derive(Debug)]
pub struct TimestampRouter {
    topic_format: String,
    timestamp_format: SimpleDateFormat,
}

fn date_format_validator() -> Validator {
    Validator::custom(|v| match v {
        ConfigValue::String(s) => SimpleDateFormat::new(s).map(|_| ()),
        _ => Ok(()),
    })
}

impl TimestampRouter {
    pub fn config_def() -> ConfigDef {
        ConfigDef::new()
            .define(
                ConfigKey::new("topic.format", ConfigType::String)
                    .default_str("${topic}-${timestamp}")
                    .importance(Importance::High)
                    .doc("Format string which can contain <code>${topic}</code> and <code>${timestamp}</code> as placeholders for the topic and timestamp, respectively."),
            )
            .define(
                ConfigKey::new("timestamp.format", ConfigType::String)
                    .default_str("yyyyMMdd")
                    .validator(date_format_validator())
                    .importance(Importance::High)
                    .doc("Format string for the timestamp that is compatible with <code>java.text.SimpleDateFormat</code>."),
            )
    }

    pub fn configure(props: &Properties) -> Result<Self, ConfigValidation> {
        configure(&Self::config_def(), props, |c, _| {
            Some(TimestampRouter {
                topic_format: get_string(c, "topic.format")?,
                timestamp_format: SimpleDateFormat::new(c.get_string("timestamp.format")?).ok()?,
            })
        })
    }
}

impl<R: ConnectRecord> Transform<R> for TimestampRouter {
    fn apply(&self, mut record: R) -> Result<Option<R>, ConnectError> {
        let Some(ts) = record.timestamp() else {
            return Err(ConnectError::data(format!(
                "Timestamp missing on record: topic={}",
                record.topic()
            )));
        };
        let formatted = self.timestamp_format.format(ts);
        let topic = self
            .topic_format
            .replace("${topic}", record.topic())
            .replace("${timestamp}", &formatted);
        record.set_topic(topic);
        Ok(Some(record))
    }
}
