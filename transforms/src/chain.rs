//! The transform chain of a connector, configured exactly as Kafka Connect configures it:
//! `transforms=a,b`, `transforms.a.type=<class>`, `transforms.a.<key>=...`, `predicates=p`,
//! `predicates.p.type=<class>`, `predicates.p.<key>=...`, `transforms.a.predicate=p` and
//! `transforms.a.negate=true`.
//!
//! Invariants:
//! - [`validate`] never stops at the first problem and reports errors per key, with the keys
//!   of each plugin prefixed (`transforms.a.regex`), as Kafka Connect's enriched ConfigDef does;
//! - [`build`] succeeds only for properties that [`validate`] accepts;
//! - [`TransformChain::apply`] runs the stages in order; a stage runs iff it has no predicate
//!   or `negate XOR predicate(record)`; a stage returning `None` drops the record and ends the
//!   chain.

use std::sync::Arc;

use headwater_api::config::{ConfigKey, ConfigType, Importance, Width};
use headwater_api::{
    ConfigDef, ConfigValidation, ConnectError, ConnectRecord, Predicate, Properties, Transform,
};

use crate::registry::{self, PredicatePlugin, TransformPlugin};

struct Stage<R> {
    alias: String,
    transform: Box<dyn Transform<R>>,
    predicate: Option<Arc<dyn Predicate<R>>>,
    negate: bool,
}

/// A connector's configured transforms, ready to run.
pub struct TransformChain<R> {
    stages: Vec<Stage<R>>,
}

impl<R: ConnectRecord> TransformChain<R> {
    /// A chain without transforms (records pass unchanged).
    pub fn empty() -> Self {
        TransformChain { stages: Vec::new() }
    }

    /// Stage aliases in order.
    pub fn aliases(&self) -> Vec<&str> {
        self.stages.iter().map(|s| s.alias.as_str()).collect()
    }

    pub fn len(&self) -> usize {
        self.stages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// Runs the chain; `Ok(None)` means a transform dropped the record.
    pub fn apply(&self, mut record: R) -> Result<Option<R>, ConnectError> {
        for stage in &self.stages {
            let run = match &stage.predicate {
                None => true,
                Some(p) => stage.negate ^ p.test(&record),
            };
            if !run {
                continue;
            }
            match stage.transform.apply(record)? {
                Some(r) => record = r,
                None => return Ok(None),
            }
        }
        Ok(Some(record))
    }
}

/// Parses a list value as Kafka's ConfigDef does (comma separated, trimmed, empty = none).
fn aliases(props: &Properties, key: &str) -> Vec<String> {
    match props.get(key).map(|s| s.trim()) {
        None | Some("") => Vec::new(),
        Some(s) => s.split(',').map(|a| a.trim().to_owned()).collect(),
    }
}

fn unique(list: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in list {
        if !out.contains(a) {
            out.push(a.clone());
        }
    }
    out
}

/// A plugin's keys, renamed with `prefix` and grouped as Kafka groups them.
fn embed(def: &ConfigDef, prefix: &str, group: &str, skip: &[&str], into: ConfigDef) -> ConfigDef {
    let mut into = into;
    for (i, key) in def.keys().iter().enumerate() {
        if skip.contains(&key.name.as_str()) {
            continue;
        }
        let mut k = key.clone();
        k.name = format!("{prefix}{}", key.name);
        k.display_name = k.name.clone();
        k.group = Some(group.to_owned());
        k.order_in_group = i as i32 + 1;
        into = into.define(k);
    }
    into
}

fn list_key(name: &str, doc: &str, group: &str) -> ConfigKey {
    ConfigKey::new(name, ConfigType::List)
        .default_str("")
        .importance(Importance::Low)
        .doc(doc)
        .group(group, 1)
        .width(Width::Long)
}

/// Names of every known transform class (for "unknown class" messages).
pub fn known_transforms<R: ConnectRecord>() -> Vec<&'static str> {
    registry::transforms::<R>()
        .iter()
        .map(|p| p.class)
        .collect()
}

/// Names of every known predicate class.
pub fn known_predicates<R: ConnectRecord>() -> Vec<&'static str> {
    registry::predicates::<R>()
        .iter()
        .map(|p| p.class)
        .collect()
}

struct Resolved<R> {
    transforms: Vec<(String, Option<TransformPlugin<R>>)>,
    predicates: Vec<(String, Option<PredicatePlugin<R>>)>,
}

/// Validates the transform and predicate settings of a connector configuration.
pub fn validate<R: ConnectRecord>(props: &Properties) -> ConfigValidation {
    validate_inner::<R>(props).0
}

fn validate_inner<R: ConnectRecord>(props: &Properties) -> (ConfigValidation, Resolved<R>) {
    let transform_aliases = aliases(props, "transforms");
    let predicate_aliases = aliases(props, "predicates");
    let mut def = ConfigDef::new()
        .define(list_key(
            "transforms",
            "Aliases for the transformations to be applied to records.",
            "Transforms",
        ))
        .define(list_key(
            "predicates",
            "Aliases for the predicates used by transformations.",
            "Predicates",
        ));
    let mut resolved = Resolved {
        transforms: Vec::new(),
        predicates: Vec::new(),
    };
    let mut later: Vec<(String, String)> = Vec::new();

    for alias in unique(&transform_aliases) {
        let prefix = format!("transforms.{alias}.");
        let group = format!("Transforms: {alias}");
        let type_key = format!("{prefix}type");
        def = def
            .define(
                ConfigKey::new(type_key.clone(), ConfigType::Class)
                    .importance(Importance::High)
                    .doc(format!("Class for the '{alias}' transformation."))
                    .group(group.clone(), 0)
                    .width(Width::Long)
                    .display_name(format!("Transformation type for {alias}")),
            )
            .define(
                ConfigKey::new(format!("{prefix}predicate"), ConfigType::String)
                    .default_null()
                    .importance(Importance::Medium)
                    .doc("The alias of a predicate used to determine whether to apply this transformation.")
                    .group(group.clone(), 1),
            )
            .define(
                ConfigKey::new(format!("{prefix}negate"), ConfigType::Boolean)
                    .default_str("false")
                    .importance(Importance::Medium)
                    .doc("Whether the configured predicate should be negated.")
                    .group(group.clone(), 2),
            );
        let plugin = props
            .get(&type_key)
            .and_then(|class| registry::find_transform::<R>(class.trim()));
        if let Some(p) = &plugin {
            def = embed(
                &(p.config_def)(),
                &prefix,
                &group,
                &["type", "predicate", "negate"],
                def,
            );
        } else if let Some(class) = props.get(&type_key) {
            later.push((
                type_key.clone(),
                format!(
                    "Invalid value {class} for configuration {type_key}: Class {class} could not be found. Known transformations: {}",
                    known_transforms::<R>().join(", ")
                ),
            ));
        }
        let negate_key = format!("{prefix}negate");
        let predicate_key = format!("{prefix}predicate");
        if props.contains_key(&negate_key) && !props.contains_key(&predicate_key) {
            later.push((
                negate_key.clone(),
                format!(
                    "Config '{negate_key}' was provided but there is no config '{predicate_key}' defining a predicate to be negated."
                ),
            ));
        }
        if let Some(p) = props.get(&predicate_key).map(|p| p.trim()) {
            if !predicate_aliases.iter().any(|a| a == p) {
                later.push((
                    predicate_key.clone(),
                    format!(
                        "Invalid value {p} for configuration {predicate_key}: Predicate '{p}' is not listed in 'predicates'"
                    ),
                ));
            }
        }
        resolved.transforms.push((alias, plugin));
    }

    for alias in unique(&predicate_aliases) {
        let prefix = format!("predicates.{alias}.");
        let group = format!("Predicates: {alias}");
        let type_key = format!("{prefix}type");
        def = def.define(
            ConfigKey::new(type_key.clone(), ConfigType::Class)
                .importance(Importance::High)
                .doc(format!("Class for the '{alias}' predicate."))
                .group(group.clone(), 0)
                .width(Width::Long)
                .display_name(format!("Predicate type for {alias}")),
        );
        let plugin = props
            .get(&type_key)
            .and_then(|class| registry::find_predicate::<R>(class.trim()));
        if let Some(p) = &plugin {
            def = embed(&(p.config_def)(), &prefix, &group, &["type"], def);
        } else if let Some(class) = props.get(&type_key) {
            later.push((
                type_key.clone(),
                format!(
                    "Invalid value {class} for configuration {type_key}: Class {class} could not be found. Known predicates: {}",
                    known_predicates::<R>().join(", ")
                ),
            ));
        }
        resolved.predicates.push((alias, plugin));
    }

    let mut validation = def.validate(props);
    for (key, list) in [
        ("transforms", &transform_aliases),
        ("predicates", &predicate_aliases),
    ] {
        if unique(list).len() != list.len() {
            validation.add_error(
                key,
                format!(
                    "Invalid value {} for configuration {key}: Duplicate alias provided.",
                    props.get(key).map(|s| s.as_str()).unwrap_or("")
                ),
            );
        }
    }
    for (key, msg) in later {
        validation.add_error(&key, msg);
    }

    // Cross-field checks of each plugin, once its own keys are valid.
    let clean = |validation: &ConfigValidation, prefix: &str| {
        validation
            .entries()
            .iter()
            .filter(|e| e.name.starts_with(prefix))
            .filter(|e| !matches!(&e.name[prefix.len()..], "predicate" | "negate"))
            .all(|e| e.errors.is_empty())
    };
    let mut extra = Vec::new();
    for (alias, plugin) in &resolved.transforms {
        let prefix = format!("transforms.{alias}.");
        if let (Some(p), true) = (plugin, clean(&validation, &prefix)) {
            if let Err(v) = (p.configure)(&strip_prefix(props, &prefix)) {
                collect_errors(&v, &prefix, &mut extra);
            }
        }
    }
    for (alias, plugin) in &resolved.predicates {
        let prefix = format!("predicates.{alias}.");
        if let (Some(p), true) = (plugin, clean(&validation, &prefix)) {
            if let Err(v) = (p.configure)(&strip_prefix(props, &prefix)) {
                collect_errors(&v, &prefix, &mut extra);
            }
        }
    }
    for (key, msg) in extra {
        validation.add_error(&key, msg);
    }
    (validation, resolved)
}

fn collect_errors(v: &ConfigValidation, prefix: &str, out: &mut Vec<(String, String)>) {
    for e in v.entries() {
        for msg in &e.errors {
            out.push((format!("{prefix}{}", e.name), msg.clone()));
        }
    }
}

/// The properties under `prefix`, with the prefix removed (Kafka's `originalsWithPrefix`).
pub fn strip_prefix(props: &Properties, prefix: &str) -> Properties {
    props
        .iter()
        .filter_map(|(k, v)| k.strip_prefix(prefix).map(|k| (k.to_owned(), v.clone())))
        .collect()
}

/// Builds the chain; fails with every validation error in one message when the settings are
/// invalid.
pub fn build<R: ConnectRecord>(props: &Properties) -> Result<TransformChain<R>, ConnectError> {
    let (validation, resolved) = validate_inner::<R>(props);
    if validation.error_count() > 0 {
        let errors: Vec<String> = validation
            .entries()
            .iter()
            .flat_map(|e| e.errors.iter().cloned())
            .collect();
        return Err(ConnectError::config(format!(
            "Invalid transform configuration ({} error(s)):\n{}",
            errors.len(),
            errors.join("\n")
        )));
    }
    let mut predicates: Vec<(String, Arc<dyn Predicate<R>>)> = Vec::new();
    for (alias, plugin) in resolved.predicates {
        let Some(p) = plugin else { continue };
        let prefix = format!("predicates.{alias}.");
        let built = (p.configure)(&strip_prefix(props, &prefix))
            .map_err(|v| ConnectError::config(v.error_message()))?;
        predicates.push((alias, Arc::from(built)));
    }
    let mut stages = Vec::new();
    for (alias, plugin) in resolved.transforms {
        let Some(p) = plugin else { continue };
        let prefix = format!("transforms.{alias}.");
        let own = strip_prefix(props, &prefix);
        let transform = (p.configure)(&own).map_err(|v| ConnectError::config(v.error_message()))?;
        let predicate = match own.get("predicate").map(|s| s.trim()) {
            Some(name) => Some(
                predicates
                    .iter()
                    .find(|(a, _)| a == name)
                    .map(|(_, p)| p.clone())
                    .ok_or_else(|| {
                        ConnectError::config(format!(
                            "Predicate '{name}' is not listed in 'predicates'"
                        ))
                    })?,
            ),
            None => None,
        };
        let negate = own
            .get("negate")
            .is_some_and(|n| n.trim().eq_ignore_ascii_case("true"));
        stages.push(Stage {
            alias,
            transform,
            predicate,
            negate,
        });
    }
    Ok(TransformChain { stages })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::tests::{props, record};
    use headwater_api::{SourceRecord, Value};

    fn chain(pairs: &[(&str, &str)]) -> TransformChain<SourceRecord> {
        build::<SourceRecord>(&props(pairs)).unwrap()
    }

    #[test]
    fn seed_chain_routes_and_keeps_others() {
        let c = chain(&[
            ("transforms", "route"),
            (
                "transforms.route.type",
                "org.apache.kafka.connect.transforms.RegexRouter",
            ),
            ("transforms.route.regex", r"cdc\.public\.(.*)"),
            ("transforms.route.replacement", "warehouse.$1"),
        ]);
        assert_eq!(c.aliases(), ["route"]);
        let out = c
            .apply(record("cdc.public.orders", None, Value::Null))
            .unwrap()
            .unwrap();
        assert_eq!(out.topic, "warehouse.orders");
        let out = c
            .apply(record("cdc.transaction", None, Value::Null))
            .unwrap()
            .unwrap();
        assert_eq!(out.topic, "cdc.transaction");
        assert!(TransformChain::<SourceRecord>::empty().is_empty());
    }

    #[test]
    fn predicates_and_negate_gate_stages_in_order() {
        let base = [
            ("transforms", "drop,route"),
            ("transforms.drop.type", "Filter"),
            ("transforms.drop.predicate", "isTomb"),
            ("transforms.route.type", "RegexRouter"),
            ("transforms.route.regex", "(.*)"),
            ("transforms.route.replacement", "x.$1"),
            ("transforms.route.predicate", "onlyCdc"),
            ("transforms.route.negate", "true"),
            ("predicates", "isTomb,onlyCdc"),
            (
                "predicates.isTomb.type",
                "org.apache.kafka.connect.transforms.predicates.RecordIsTombstone",
            ),
            ("predicates.onlyCdc.type", "TopicNameMatches"),
            ("predicates.onlyCdc.pattern", "cdc\\..*"),
        ];
        let c = chain(&base);
        // Tombstones are filtered, and the chain stops there.
        assert!(c.apply(record("t", None, Value::Null)).unwrap().is_none());
        // negate: the router runs only for topics that do NOT match cdc\..*
        let out = c
            .apply(record("t", None, Value::from("v")))
            .unwrap()
            .unwrap();
        assert_eq!(out.topic, "x.t");
        let out = c
            .apply(record("cdc.a", None, Value::from("v")))
            .unwrap()
            .unwrap();
        assert_eq!(out.topic, "cdc.a");
    }

    #[test]
    fn validation_reports_per_field_errors() {
        let v = validate::<SourceRecord>(&props(&[
            ("transforms", "a,a,b,c,d"),
            ("transforms.a.type", "com.example.Nope"),
            ("transforms.b.type", "RegexRouter"),
            ("transforms.b.regex", "(unclosed"),
            ("transforms.c.type", "InsertField$Value"),
            ("transforms.c.negate", "true"),
            ("transforms.d.type", "MaskField$Value"),
            ("transforms.d.fields", "x"),
            ("transforms.d.predicate", "missing"),
            ("predicates", "p"),
            ("predicates.p.type", "TopicNameMatches"),
        ]));
        let e = v.errors_by_field();
        assert_eq!(
            e["transforms"],
            ["Invalid value a,a,b,c,d for configuration transforms: Duplicate alias provided."]
        );
        assert!(e["transforms.a.type"][0].starts_with("Invalid value com.example.Nope for configuration transforms.a.type: Class com.example.Nope could not be found. Known transformations: org.apache.kafka.connect.transforms.RegexRouter"), "{:?}", e["transforms.a.type"]);
        assert!(e["transforms.a.type"][0].contains("io.debezium.transforms.ExtractNewRecordState"));
        assert!(e["transforms.b.regex"][0].starts_with(
            "Invalid value (unclosed for configuration transforms.b.regex: Invalid regex:"
        ));
        assert!(e["transforms.b.replacement"][0]
            .contains("Missing required configuration \"transforms.b.replacement\""));
        assert_eq!(e["transforms.c.negate"], ["Config 'transforms.c.negate' was provided but there is no config 'transforms.c.predicate' defining a predicate to be negated."]);
        assert_eq!(e["transforms.c.type"], ["No field insertion configured"]);
        assert!(e["transforms.d.predicate"][0]
            .contains("Predicate 'missing' is not listed in 'predicates'"));
        assert!(e["predicates.p.pattern"][0]
            .contains("Missing required configuration \"predicates.p.pattern\""));
        assert!(!e.contains_key("transforms.d.fields"));
        // The enriched definitions are in the Kafka ConfigInfos shape.
        let infos = v.to_config_infos("io.debezium.connector.postgresql.PostgresConnector");
        let names: Vec<&str> = infos["configs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["value"]["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"transforms.b.regex") && names.contains(&"transforms.b.negate"));
        assert!(infos["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g == "Transforms: b"));
        // build refuses the same properties with every error in one message.
        let err = build::<SourceRecord>(&props(&[
            ("transforms", "a"),
            ("transforms.a.type", "Nope"),
        ]))
        .err()
        .unwrap();
        assert!(
            err.message().contains("Class Nope could not be found"),
            "{err}"
        );
    }

    #[test]
    fn empty_config_is_valid() {
        assert_eq!(validate::<SourceRecord>(&props(&[])).error_count(), 0);
        assert!(chain(&[("transforms", " ")]).is_empty());
        assert_eq!(
            strip_prefix(
                &props(&[("transforms.a.x", "1"), ("other", "2")]),
                "transforms.a."
            )
            .len(),
            1
        );
    }
}
