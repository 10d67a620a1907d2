//! The explicit list of transform and predicate plugins, keyed by their Kafka Connect /
//! Debezium class names, with short aliases (the simple class name, and for `$Key`/`$Value`
//! variants `InsertField$Value` style names).
//!
//! Invariant: class names and aliases are unique across each list (checked by a test), so a
//! name resolves to at most one plugin.

use headwater_api::{ConfigDef, ConfigValidation, ConnectRecord, Predicate, Properties, Transform};

use crate::debezium;
use crate::kafka;
use crate::util::Target;

/// Builds a configured transform, or reports what is wrong with its properties (keys without
/// the `transforms.<alias>.` prefix).
pub type TransformConfigure<R> = fn(&Properties) -> Result<Box<dyn Transform<R>>, ConfigValidation>;
/// Builds a configured predicate.
pub type PredicateConfigure<R> = fn(&Properties) -> Result<Box<dyn Predicate<R>>, ConfigValidation>;

/// One transform class.
pub struct TransformPlugin<R> {
    pub class: &'static str,
    pub aliases: &'static [&'static str],
    pub config_def: fn() -> ConfigDef,
    pub configure: TransformConfigure<R>,
}

/// One predicate class.
pub struct PredicatePlugin<R> {
    pub class: &'static str,
    pub aliases: &'static [&'static str],
    pub config_def: fn() -> ConfigDef,
    pub configure: PredicateConfigure<R>,
}

pub(crate) fn boxed<R: ConnectRecord, T: Transform<R> + 'static>(t: T) -> Box<dyn Transform<R>> {
    Box::new(t)
}

fn boxed_predicate<R: ConnectRecord, T: Predicate<R> + 'static>(t: T) -> Box<dyn Predicate<R>> {
    Box::new(t)
}

macro_rules! transform {
    ($class:expr, [$($alias:expr),*], $def:expr, $make:expr) => {
        TransformPlugin {
            class: $class,
            aliases: &[$($alias),*],
            config_def: $def,
            configure: |p| ($make)(p).map(boxed),
        }
    };
}

macro_rules! key_value {
    ($list:ident, $simple:literal, $ty:ty) => {
        $list.push(transform!(
            concat!("org.apache.kafka.connect.transforms.", $simple, "$Key"),
            [concat!($simple, "$Key")],
            <$ty>::config_def,
            |p| <$ty>::configure(Target::Key, p)
        ));
        $list.push(transform!(
            concat!("org.apache.kafka.connect.transforms.", $simple, "$Value"),
            [concat!($simple, "$Value")],
            <$ty>::config_def,
            |p| <$ty>::configure(Target::Value, p)
        ));
    };
}

/// Every transform Headwater has.
pub fn transforms<R: ConnectRecord>() -> Vec<TransformPlugin<R>> {
    let mut list: Vec<TransformPlugin<R>> = vec![
        transform!(
            "org.apache.kafka.connect.transforms.RegexRouter",
            ["RegexRouter"],
            kafka::RegexRouter::config_def,
            kafka::RegexRouter::configure
        ),
        transform!(
            "org.apache.kafka.connect.transforms.TimestampRouter",
            ["TimestampRouter"],
            kafka::TimestampRouter::config_def,
            kafka::TimestampRouter::configure
        ),
        transform!(
            "org.apache.kafka.connect.transforms.ValueToKey",
            ["ValueToKey"],
            kafka::ValueToKey::config_def,
            kafka::ValueToKey::configure
        ),
        transform!(
            "org.apache.kafka.connect.transforms.Filter",
            ["Filter"],
            kafka::Filter::config_def,
            kafka::Filter::configure
        ),
        transform!(
            "org.apache.kafka.connect.transforms.InsertHeader",
            ["InsertHeader"],
            kafka::InsertHeader::config_def,
            kafka::InsertHeader::configure
        ),
        transform!(
            "org.apache.kafka.connect.transforms.DropHeaders",
            ["DropHeaders"],
            kafka::DropHeaders::config_def,
            kafka::DropHeaders::configure
        ),
    ];
    key_value!(list, "InsertField", kafka::InsertField);
    key_value!(list, "ReplaceField", kafka::ReplaceField);
    key_value!(list, "MaskField", kafka::MaskField);
    key_value!(list, "ExtractField", kafka::ExtractField);
    key_value!(list, "HoistField", kafka::HoistField);
    key_value!(list, "Cast", kafka::Cast);
    key_value!(list, "TimestampConverter", kafka::TimestampConverter);
    key_value!(list, "Flatten", kafka::Flatten);
    key_value!(list, "HeaderFrom", kafka::HeaderFrom);
    key_value!(list, "SetSchemaMetadata", kafka::SetSchemaMetadata);
    list.extend(debezium::plugins::<R>());
    list
}

/// Every predicate Headwater has.
pub fn predicates<R: ConnectRecord>() -> Vec<PredicatePlugin<R>> {
    vec![
        PredicatePlugin {
            class: "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
            aliases: &["TopicNameMatches"],
            config_def: kafka::TopicNameMatches::config_def,
            configure: |p| kafka::TopicNameMatches::configure(p).map(boxed_predicate),
        },
        PredicatePlugin {
            class: "org.apache.kafka.connect.transforms.predicates.HasHeaderKey",
            aliases: &["HasHeaderKey"],
            config_def: kafka::HasHeaderKey::config_def,
            configure: |p| kafka::HasHeaderKey::configure(p).map(boxed_predicate),
        },
        PredicatePlugin {
            class: "org.apache.kafka.connect.transforms.predicates.RecordIsTombstone",
            aliases: &["RecordIsTombstone"],
            config_def: kafka::RecordIsTombstone::config_def,
            configure: |p| kafka::RecordIsTombstone::configure(p).map(boxed_predicate),
        },
    ]
}

/// Finds a transform by class name or alias.
pub fn find_transform<R: ConnectRecord>(name: &str) -> Option<TransformPlugin<R>> {
    transforms::<R>()
        .into_iter()
        .find(|p| p.class == name || p.aliases.contains(&name))
}

/// Finds a predicate by class name or alias.
pub fn find_predicate<R: ConnectRecord>(name: &str) -> Option<PredicatePlugin<R>> {
    predicates::<R>()
        .into_iter()
        .find(|p| p.class == name || p.aliases.contains(&name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use headwater_api::SourceRecord;
    use std::collections::HashSet;

    #[test]
    fn names_are_unique_and_resolve() {
        let mut seen = HashSet::new();
        for p in transforms::<SourceRecord>() {
            assert!(seen.insert(p.class), "duplicate {}", p.class);
            for a in p.aliases {
                assert!(seen.insert(a), "duplicate alias {a}");
            }
            // Every definition builds (no duplicate keys).
            let _ = (p.config_def)();
        }
        for p in predicates::<SourceRecord>() {
            assert!(seen.insert(p.class));
            for a in p.aliases {
                assert!(seen.insert(a));
            }
        }
        assert!(find_transform::<SourceRecord>("RegexRouter").is_some());
        assert!(find_transform::<SourceRecord>(
            "org.apache.kafka.connect.transforms.InsertField$Value"
        )
        .is_some());
        assert!(find_transform::<SourceRecord>("InsertField$Key").is_some());
        assert!(
            find_transform::<SourceRecord>("io.debezium.transforms.ExtractNewRecordState")
                .is_some()
        );
        assert!(find_transform::<SourceRecord>("InsertField").is_none());
        assert!(find_predicate::<SourceRecord>("TopicNameMatches").is_some());
    }
}
