//! A ConfigDef-style facility: typed configuration keys with defaults, documentation, importance
//! and validators, and a validation result in Kafka Connect's `ConfigInfos` shape.
//!
//! Invariants:
//! - [`ConfigDef::validate`] never stops at the first problem: it reports every error of every
//!   key, so a user sees all mistakes in one response;
//! - [`ConfigDef::parse`] succeeds only when validation found no error, and then every defined
//!   key has a typed value (its default when absent);
//! - keys nobody defined are accepted and left alone (connectors pass through unknown keys, as
//!   Kafka Connect does);
//! - password values never appear in validation output (`[hidden]`).
//!
//! Messages follow Kafka's wording (`Invalid value X for configuration Y: reason`,
//! `Missing required configuration "Y" which has no default value.`) so users recognise them.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde_json::{json, Value as Json};

use crate::plugin::Properties;

/// The type of a configuration key (Kafka's `ConfigDef.Type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigType {
    Boolean,
    String,
    Int,
    Short,
    Long,
    Double,
    List,
    Class,
    Password,
}

impl ConfigType {
    /// Upper-case name used in REST output (`STRING`, `INT`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ConfigType::Boolean => "BOOLEAN",
            ConfigType::String => "STRING",
            ConfigType::Int => "INT",
            ConfigType::Short => "SHORT",
            ConfigType::Long => "LONG",
            ConfigType::Double => "DOUBLE",
            ConfigType::List => "LIST",
            ConfigType::Class => "CLASS",
            ConfigType::Password => "PASSWORD",
        }
    }
}

/// How important a key is for users (Kafka's `ConfigDef.Importance`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Importance {
    High,
    Medium,
    Low,
}

impl Importance {
    pub fn name(self) -> &'static str {
        match self {
            Importance::High => "HIGH",
            Importance::Medium => "MEDIUM",
            Importance::Low => "LOW",
        }
    }
}

/// Display width hint (Kafka's `ConfigDef.Width`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Width {
    None,
    Short,
    Medium,
    Long,
}

impl Width {
    pub fn name(self) -> &'static str {
        match self {
            Width::None => "NONE",
            Width::Short => "SHORT",
            Width::Medium => "MEDIUM",
            Width::Long => "LONG",
        }
    }
}

/// A parsed, typed configuration value.
#[derive(Clone, PartialEq)]
pub enum ConfigValue {
    Boolean(bool),
    String(String),
    Int(i32),
    Short(i16),
    Long(i64),
    Double(f64),
    List(Vec<String>),
    Class(String),
    Password(String),
}

impl fmt::Debug for ConfigValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigValue::Password(_) => f.write_str("Password([hidden])"),
            other => f.write_str(&other.to_config_string()),
        }
    }
}

impl ConfigValue {
    /// The value written back as a config string (lists comma-joined), as Kafka's
    /// `ConfigDef.convertToString`.
    pub fn to_config_string(&self) -> String {
        match self {
            ConfigValue::Boolean(b) => b.to_string(),
            ConfigValue::String(s) | ConfigValue::Class(s) | ConfigValue::Password(s) => s.clone(),
            ConfigValue::Int(v) => v.to_string(),
            ConfigValue::Short(v) => v.to_string(),
            ConfigValue::Long(v) => v.to_string(),
            ConfigValue::Double(v) => v.to_string(),
            ConfigValue::List(items) => items.join(","),
        }
    }

    fn as_f64(&self) -> Option<f64> {
        match *self {
            ConfigValue::Int(v) => Some(v.into()),
            ConfigValue::Short(v) => Some(v.into()),
            ConfigValue::Long(v) => Some(v as f64),
            ConfigValue::Double(v) => Some(v),
            _ => None,
        }
    }
}

/// A custom validation function: `Err(reason)` rejects the value.
pub type ValidatorFn = Arc<dyn Fn(&ConfigValue) -> Result<(), String> + Send + Sync>;

/// Checks a parsed value (Kafka's `ConfigDef.Validator` implementations).
#[derive(Clone)]
pub enum Validator {
    /// Numeric range, inclusive; either bound may be open.
    Range { min: Option<f64>, max: Option<f64> },
    /// One of the given strings (`ValidString` / `CaseInsensitiveValidString`).
    OneOf {
        allowed: Vec<String>,
        case_sensitive: bool,
    },
    /// Every list item is one of the given strings (`ValidList`).
    ListOf { allowed: Vec<String> },
    /// A non-empty string (`NonEmptyString`).
    NonEmptyString,
    /// Any other rule.
    Custom(ValidatorFn),
}

impl fmt::Debug for Validator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Validator::Range { min, max } => write!(f, "Range({min:?}, {max:?})"),
            Validator::OneOf { allowed, .. } => write!(f, "OneOf({allowed:?})"),
            Validator::ListOf { allowed } => write!(f, "ListOf({allowed:?})"),
            Validator::NonEmptyString => f.write_str("NonEmptyString"),
            Validator::Custom(_) => f.write_str("Custom"),
        }
    }
}

impl Validator {
    pub fn at_least(min: f64) -> Self {
        Validator::Range {
            min: Some(min),
            max: None,
        }
    }
    pub fn between(min: f64, max: f64) -> Self {
        Validator::Range {
            min: Some(min),
            max: Some(max),
        }
    }
    pub fn one_of(allowed: &[&str]) -> Self {
        Validator::OneOf {
            allowed: allowed.iter().map(|s| (*s).to_owned()).collect(),
            case_sensitive: true,
        }
    }
    pub fn one_of_case_insensitive(allowed: &[&str]) -> Self {
        Validator::OneOf {
            allowed: allowed.iter().map(|s| (*s).to_owned()).collect(),
            case_sensitive: false,
        }
    }
    pub fn custom(f: impl Fn(&ConfigValue) -> Result<(), String> + Send + Sync + 'static) -> Self {
        Validator::Custom(Arc::new(f))
    }

    /// Checks `value`; `Err` carries the reason (without the key name).
    pub fn check(&self, value: &ConfigValue) -> Result<(), String> {
        match self {
            Validator::Range { min, max } => {
                let Some(v) = value.as_f64() else {
                    return Ok(());
                };
                if let Some(min) = min {
                    if v < *min {
                        return Err(format!("Value must be at least {}", fmt_bound(*min)));
                    }
                }
                if let Some(max) = max {
                    if v > *max {
                        return Err(format!("Value must be no more than {}", fmt_bound(*max)));
                    }
                }
                Ok(())
            }
            Validator::OneOf {
                allowed,
                case_sensitive,
            } => {
                let s = value.to_config_string();
                let ok = allowed.iter().any(|a| {
                    if *case_sensitive {
                        *a == s
                    } else {
                        a.eq_ignore_ascii_case(&s)
                    }
                });
                if ok {
                    Ok(())
                } else if *case_sensitive {
                    Err(format!("String must be one of: {}", allowed.join(", ")))
                } else {
                    Err(format!(
                        "String must be one of (case insensitive): {}",
                        allowed.join(", ")
                    ))
                }
            }
            Validator::ListOf { allowed } => {
                if let ConfigValue::List(items) = value {
                    if let Some(bad) = items.iter().find(|i| !allowed.contains(i)) {
                        return Err(format!(
                            "Invalid value {bad}: must be one of: {}",
                            allowed.join(", ")
                        ));
                    }
                }
                Ok(())
            }
            Validator::NonEmptyString => match value {
                ConfigValue::String(s) if s.is_empty() => Err("String must be non-empty".into()),
                _ => Ok(()),
            },
            Validator::Custom(f) => f(value),
        }
    }
}

fn fmt_bound(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e18 {
        format!("{}", v as i64)
    } else {
        v.to_string()
    }
}

/// A key's default: none (the key is required), an explicit null, or a value.
#[derive(Clone, Debug, PartialEq)]
pub enum ConfigDefault {
    Required,
    Null,
    Value(ConfigValue),
}

/// One configuration key definition.
#[derive(Clone, Debug)]
pub struct ConfigKey {
    pub name: String,
    pub config_type: ConfigType,
    pub default: ConfigDefault,
    pub documentation: String,
    pub importance: Importance,
    pub group: Option<String>,
    pub order_in_group: i32,
    pub width: Width,
    pub display_name: String,
    pub dependents: Vec<String>,
    pub validator: Option<Validator>,
    pub recommended_values: Vec<String>,
}

impl ConfigKey {
    /// A required key of `config_type` with medium importance.
    pub fn new(name: impl Into<String>, config_type: ConfigType) -> Self {
        let name = name.into();
        ConfigKey {
            display_name: name.clone(),
            name,
            config_type,
            default: ConfigDefault::Required,
            documentation: String::new(),
            importance: Importance::Medium,
            group: None,
            order_in_group: -1,
            width: Width::None,
            dependents: Vec::new(),
            validator: None,
            recommended_values: Vec::new(),
        }
    }
    pub fn default_value(mut self, value: ConfigValue) -> Self {
        self.default = ConfigDefault::Value(value);
        self
    }
    /// Shorthand: a default given as its config string, parsed by the key's type.
    /// Panics if the string does not parse (a programming error in the definition).
    pub fn default_str(mut self, text: &str) -> Self {
        match parse_typed(&self.name, self.config_type, text) {
            Ok(v) => self.default = ConfigDefault::Value(v),
            Err(e) => panic!("bad default for {}: {e}", self.name),
        }
        self
    }
    pub fn default_null(mut self) -> Self {
        self.default = ConfigDefault::Null;
        self
    }
    pub fn doc(mut self, documentation: impl Into<String>) -> Self {
        self.documentation = documentation.into();
        self
    }
    pub fn importance(mut self, importance: Importance) -> Self {
        self.importance = importance;
        self
    }
    pub fn group(mut self, group: impl Into<String>, order_in_group: i32) -> Self {
        self.group = Some(group.into());
        self.order_in_group = order_in_group;
        self
    }
    pub fn width(mut self, width: Width) -> Self {
        self.width = width;
        self
    }
    pub fn display_name(mut self, display_name: impl Into<String>) -> Self {
        self.display_name = display_name.into();
        self
    }
    pub fn dependents(mut self, dependents: &[&str]) -> Self {
        self.dependents = dependents.iter().map(|s| (*s).to_owned()).collect();
        self
    }
    /// Sets the validator; a `OneOf` validator also becomes the recommended values.
    pub fn validator(mut self, validator: Validator) -> Self {
        if let Validator::OneOf { allowed, .. } | Validator::ListOf { allowed } = &validator {
            self.recommended_values = allowed.clone();
        }
        self.validator = Some(validator);
        self
    }
    pub fn is_required(&self) -> bool {
        self.default == ConfigDefault::Required
    }

    /// This definition as Kafka Connect's `ConfigKeyInfo` JSON.
    pub fn to_key_info(&self) -> Json {
        let default_value = match &self.default {
            ConfigDefault::Value(v) => Json::String(v.to_config_string()),
            _ => Json::Null,
        };
        json!({
            "name": self.name,
            "type": self.config_type.name(),
            "required": self.is_required(),
            "default_value": default_value,
            "importance": self.importance.name(),
            "documentation": self.documentation,
            "group": self.group,
            "order": self.order_in_group,
            "width": self.width.name(),
            "display_name": self.display_name,
            "dependents": self.dependents,
        })
    }
}

/// Parses one raw string as `config_type`, with Kafka's trimming and messages.
pub fn parse_typed(name: &str, config_type: ConfigType, raw: &str) -> Result<ConfigValue, String> {
    let trimmed = raw.trim();
    let invalid = |reason: &str| format!("Invalid value {raw} for configuration {name}: {reason}");
    Ok(match config_type {
        ConfigType::Boolean => {
            if trimmed.eq_ignore_ascii_case("true") {
                ConfigValue::Boolean(true)
            } else if trimmed.eq_ignore_ascii_case("false") {
                ConfigValue::Boolean(false)
            } else {
                return Err(invalid("Expected value to be either true or false"));
            }
        }
        ConfigType::String => ConfigValue::String(trimmed.to_owned()),
        ConfigType::Password => ConfigValue::Password(raw.to_owned()),
        ConfigType::Class => ConfigValue::Class(trimmed.to_owned()),
        ConfigType::Int => ConfigValue::Int(
            trimmed
                .parse()
                .map_err(|_| invalid("Not a number of type INT"))?,
        ),
        ConfigType::Short => ConfigValue::Short(
            trimmed
                .parse()
                .map_err(|_| invalid("Not a number of type SHORT"))?,
        ),
        ConfigType::Long => ConfigValue::Long(
            trimmed
                .parse()
                .map_err(|_| invalid("Not a number of type LONG"))?,
        ),
        ConfigType::Double => ConfigValue::Double(
            trimmed
                .parse()
                .map_err(|_| invalid("Not a number of type DOUBLE"))?,
        ),
        ConfigType::List => {
            if trimmed.is_empty() {
                ConfigValue::List(Vec::new())
            } else {
                ConfigValue::List(trimmed.split(',').map(|s| s.trim().to_owned()).collect())
            }
        }
    })
}

/// A set of configuration key definitions.
#[derive(Clone, Debug, Default)]
pub struct ConfigDef {
    keys: Vec<ConfigKey>,
}

impl ConfigDef {
    pub fn new() -> Self {
        ConfigDef::default()
    }
    /// Adds a key. Panics on a duplicate name (a programming error in the definition).
    pub fn define(mut self, key: ConfigKey) -> Self {
        assert!(
            self.key(&key.name).is_none(),
            "Configuration {} is defined twice.",
            key.name
        );
        self.keys.push(key);
        self
    }
    /// Adds every key of `other` (e.g. the framework's common keys before a connector's own).
    pub fn merge(mut self, other: ConfigDef) -> Self {
        for key in other.keys {
            self = self.define(key);
        }
        self
    }
    pub fn keys(&self) -> &[ConfigKey] {
        &self.keys
    }
    pub fn key(&self, name: &str) -> Option<&ConfigKey> {
        self.keys.iter().find(|k| k.name == name)
    }

    /// Validates `props` against every defined key and reports all errors per key.
    pub fn validate(&self, props: &Properties) -> ConfigValidation {
        let mut entries = Vec::with_capacity(self.keys.len());
        for key in &self.keys {
            let raw = props.get(&key.name);
            let mut errors = Vec::new();
            let mut parsed = None;
            match raw {
                Some(raw) => match parse_typed(&key.name, key.config_type, raw) {
                    Ok(v) => parsed = Some(v),
                    Err(e) => errors.push(e),
                },
                None => match &key.default {
                    ConfigDefault::Required => errors.push(format!(
                        "Missing required configuration \"{}\" which has no default value.",
                        key.name
                    )),
                    ConfigDefault::Null => {}
                    ConfigDefault::Value(v) => parsed = Some(v.clone()),
                },
            }
            if let (Some(v), Some(validator)) = (&parsed, &key.validator) {
                if let Err(reason) = validator.check(v) {
                    let shown = raw.cloned().unwrap_or_else(|| v.to_config_string());
                    errors.push(format!(
                        "Invalid value {shown} for configuration {}: {reason}",
                        key.name
                    ));
                }
            }
            let shown = match (key.config_type, raw) {
                (ConfigType::Password, Some(_)) => Some("[hidden]".to_owned()),
                (_, Some(raw)) => Some(raw.clone()),
                (_, None) => parsed.as_ref().map(ConfigValue::to_config_string),
            };
            entries.push(ValidatedKey {
                name: key.name.clone(),
                value: shown,
                parsed,
                recommended_values: key.recommended_values.clone(),
                errors,
                visible: true,
            });
        }
        ConfigValidation {
            definitions: self.keys.clone(),
            entries,
        }
    }

    /// Parses `props` into typed values, or returns the validation with its errors.
    pub fn parse(&self, props: &Properties) -> Result<ParsedConfig, ConfigValidation> {
        let validation = self.validate(props);
        if validation.error_count() > 0 {
            return Err(validation);
        }
        let values = validation
            .entries
            .into_iter()
            .map(|e| (e.name, e.parsed))
            .collect();
        Ok(ParsedConfig { values })
    }
}

/// One key's validation outcome (Kafka's `ConfigValue`).
#[derive(Clone, Debug)]
pub struct ValidatedKey {
    pub name: String,
    /// The value as given (or the default), `[hidden]` for passwords.
    pub value: Option<String>,
    pub parsed: Option<ConfigValue>,
    pub recommended_values: Vec<String>,
    pub errors: Vec<String>,
    pub visible: bool,
}

/// The result of validating a configuration: every key with its errors.
#[derive(Clone, Debug, Default)]
pub struct ConfigValidation {
    definitions: Vec<ConfigKey>,
    entries: Vec<ValidatedKey>,
}

impl ConfigValidation {
    pub fn entries(&self) -> &[ValidatedKey] {
        &self.entries
    }
    /// Total number of error messages over all keys.
    pub fn error_count(&self) -> usize {
        self.entries.iter().map(|e| e.errors.len()).sum()
    }
    /// Error messages by key, only for keys that have errors.
    pub fn errors_by_field(&self) -> BTreeMap<&str, &[String]> {
        self.entries
            .iter()
            .filter(|e| !e.errors.is_empty())
            .map(|e| (e.name.as_str(), e.errors.as_slice()))
            .collect()
    }
    /// Adds an error to a key (for cross-field checks), creating an entry without a definition
    /// if the key is not defined.
    pub fn add_error(&mut self, name: &str, message: impl Into<String>) {
        let message = message.into();
        if let Some(e) = self.entries.iter_mut().find(|e| e.name == name) {
            e.errors.push(message);
            return;
        }
        self.entries.push(ValidatedKey {
            name: name.to_owned(),
            value: None,
            parsed: None,
            recommended_values: Vec::new(),
            errors: vec![message],
            visible: true,
        });
    }
    /// Appends another validation's keys (e.g. a transform's, already prefixed).
    pub fn extend(&mut self, other: ConfigValidation) {
        self.definitions.extend(other.definitions);
        self.entries.extend(other.entries);
    }
    /// Kafka Connect's `ConfigInfos` JSON (`PUT /connector-plugins/{p}/config/validate`).
    pub fn to_config_infos(&self, name: &str) -> Json {
        let mut groups: Vec<&str> = Vec::new();
        for d in &self.definitions {
            if let Some(g) = &d.group {
                if !groups.contains(&g.as_str()) {
                    groups.push(g);
                }
            }
        }
        let configs: Vec<Json> = self
            .entries
            .iter()
            .map(|e| {
                let definition = self
                    .definitions
                    .iter()
                    .find(|d| d.name == e.name)
                    .map_or(Json::Null, ConfigKey::to_key_info);
                json!({
                    "definition": definition,
                    "value": {
                        "name": e.name,
                        "value": e.value,
                        "recommended_values": e.recommended_values,
                        "errors": e.errors,
                        "visible": e.visible,
                    }
                })
            })
            .collect();
        json!({
            "name": name,
            "error_count": self.error_count(),
            "groups": groups,
            "configs": configs,
        })
    }
    /// One message listing every error, Kafka Connect's 400 text on create/update.
    pub fn error_message(&self) -> String {
        let errors: Vec<String> = self
            .entries
            .iter()
            .flat_map(|e| e.errors.iter().cloned())
            .collect();
        format!(
            "Connector configuration is invalid and contains the following {} error(s):\n{}\nYou can also find the above list of errors at the endpoint `/connector-plugins/{{connectorType}}/config/validate`",
            errors.len(),
            errors.join("\n")
        )
    }
}

/// Typed values of a configuration that validated cleanly.
#[derive(Clone, Debug)]
pub struct ParsedConfig {
    values: BTreeMap<String, Option<ConfigValue>>,
}

impl ParsedConfig {
    /// The typed value of a defined key (`None` for a null default).
    pub fn get(&self, name: &str) -> Option<&ConfigValue> {
        self.values.get(name).and_then(Option::as_ref)
    }
    pub fn get_string(&self, name: &str) -> Option<&str> {
        match self.get(name)? {
            ConfigValue::String(s) | ConfigValue::Class(s) | ConfigValue::Password(s) => Some(s),
            _ => None,
        }
    }
    pub fn get_bool(&self, name: &str) -> Option<bool> {
        match self.get(name)? {
            ConfigValue::Boolean(b) => Some(*b),
            _ => None,
        }
    }
    /// Any integer type widened to `i64`.
    pub fn get_long(&self, name: &str) -> Option<i64> {
        match *self.get(name)? {
            ConfigValue::Int(v) => Some(v.into()),
            ConfigValue::Short(v) => Some(v.into()),
            ConfigValue::Long(v) => Some(v),
            _ => None,
        }
    }
    pub fn get_double(&self, name: &str) -> Option<f64> {
        match *self.get(name)? {
            ConfigValue::Double(v) => Some(v),
            _ => None,
        }
    }
    pub fn get_list(&self, name: &str) -> Option<&[String]> {
        match self.get(name)? {
            ConfigValue::List(items) => Some(items),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def() -> ConfigDef {
        ConfigDef::new()
            .define(
                ConfigKey::new("topic.prefix", ConfigType::String)
                    .importance(Importance::High)
                    .validator(Validator::NonEmptyString)
                    .doc("Prefix of every topic name")
                    .group("Connector", 1),
            )
            .define(
                ConfigKey::new("tasks.max", ConfigType::Int)
                    .default_str("1")
                    .validator(Validator::at_least(1.0)),
            )
            .define(
                ConfigKey::new("snapshot.mode", ConfigType::String)
                    .default_str("initial")
                    .validator(Validator::one_of_case_insensitive(&[
                        "initial", "never", "no_data",
                    ])),
            )
            .define(ConfigKey::new("database.password", ConfigType::Password).default_null())
            .define(ConfigKey::new("table.include.list", ConfigType::List).default_null())
            .define(ConfigKey::new("tombstones.on.delete", ConfigType::Boolean).default_str("true"))
    }

    use crate::plugin::properties as props;

    #[test]
    fn reports_every_error_per_field() {
        let v = def().validate(&props(&[
            ("tasks.max", "0"),
            ("snapshot.mode", "sometimes"),
            ("tombstones.on.delete", "yes"),
        ]));
        assert_eq!(v.error_count(), 4);
        let by_field = v.errors_by_field();
        assert_eq!(
            by_field["topic.prefix"],
            ["Missing required configuration \"topic.prefix\" which has no default value."]
        );
        assert_eq!(
            by_field["tasks.max"],
            ["Invalid value 0 for configuration tasks.max: Value must be at least 1"]
        );
        assert_eq!(
            by_field["snapshot.mode"],
            ["Invalid value sometimes for configuration snapshot.mode: String must be one of (case insensitive): initial, never, no_data"]
        );
        assert_eq!(
            by_field["tombstones.on.delete"],
            ["Invalid value yes for configuration tombstones.on.delete: Expected value to be either true or false"]
        );
        assert!(v.error_message().starts_with(
            "Connector configuration is invalid and contains the following 4 error(s):\n"
        ));
    }

    #[test]
    fn parses_typed_values_and_defaults() {
        let parsed = def()
            .parse(&props(&[
                ("topic.prefix", "cdc"),
                ("table.include.list", " public.orders , public.customers "),
                ("database.password", "s3cret"),
                ("unknown.key", "kept"),
            ]))
            .unwrap();
        assert_eq!(parsed.get_string("topic.prefix"), Some("cdc"));
        assert_eq!(parsed.get_long("tasks.max"), Some(1));
        assert_eq!(parsed.get_bool("tombstones.on.delete"), Some(true));
        assert_eq!(
            parsed.get_list("table.include.list").unwrap(),
            ["public.orders", "public.customers"]
        );
        assert_eq!(parsed.get_string("database.password"), Some("s3cret"));
        assert!(parsed.get("unknown.key").is_none());
    }

    #[test]
    fn config_infos_shape_hides_passwords() {
        let v = def().validate(&props(&[
            ("topic.prefix", "cdc"),
            ("database.password", "s3cret"),
        ]));
        let infos = v.to_config_infos("io.debezium.connector.postgresql.PostgresConnector");
        assert_eq!(infos["error_count"], 0);
        assert_eq!(infos["groups"], json!(["Connector"]));
        let configs = infos["configs"].as_array().unwrap();
        let pw = configs
            .iter()
            .find(|c| c["value"]["name"] == "database.password")
            .unwrap();
        assert_eq!(pw["value"]["value"], "[hidden]");
        assert_eq!(pw["definition"]["type"], "PASSWORD");
        let prefix = &configs[0];
        assert_eq!(prefix["definition"]["required"], true);
        assert_eq!(prefix["definition"]["default_value"], Json::Null);
        assert_eq!(prefix["definition"]["importance"], "HIGH");
        assert_eq!(prefix["definition"]["order"], 1);
        let tasks = configs
            .iter()
            .find(|c| c["value"]["name"] == "tasks.max")
            .unwrap();
        assert_eq!(tasks["definition"]["default_value"], "1");
        assert_eq!(tasks["value"]["value"], "1");
    }

    #[test]
    fn cross_field_errors_can_be_added() {
        let mut v = def().validate(&props(&[("topic.prefix", "cdc")]));
        v.add_error(
            "table.exclude.list",
            "cannot be used with table.include.list",
        );
        assert_eq!(v.error_count(), 1);
        let infos = v.to_config_infos("x");
        let last = infos["configs"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["definition"], Json::Null);
    }
}
