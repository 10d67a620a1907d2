//! Compatibility levels and checks, with Avro's schema resolution rules (the `apache-avro`
//! crate's `SchemaCompatibility`, which follows the Avro specification as Java's does).
//!
//! - BACKWARD: the new schema can read data written with the previous one (new reader, old
//!   writer): fields may be removed, or added with a default;
//! - FORWARD: the previous schema can read data written with the new one;
//! - FULL: both;
//! - the `_TRANSITIVE` forms check against every live version, the others against the latest;
//! - NONE: no check.
//!
//! A resolution the checker calls only partial (an enum or union that may fail for some data)
//! counts as incompatible: a registry that promises compatibility must not let a reader fail.

use apache_avro::schema_compatibility::{Compatibility, SchemaCompatibility};
use apache_avro::Schema;

/// A subject's (or the registry's) compatibility level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CompatibilityLevel {
    None,
    #[default]
    Backward,
    BackwardTransitive,
    Forward,
    ForwardTransitive,
    Full,
    FullTransitive,
}

impl CompatibilityLevel {
    pub const ALL: [CompatibilityLevel; 7] = [
        CompatibilityLevel::None,
        CompatibilityLevel::Backward,
        CompatibilityLevel::BackwardTransitive,
        CompatibilityLevel::Forward,
        CompatibilityLevel::ForwardTransitive,
        CompatibilityLevel::Full,
        CompatibilityLevel::FullTransitive,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CompatibilityLevel::None => "NONE",
            CompatibilityLevel::Backward => "BACKWARD",
            CompatibilityLevel::BackwardTransitive => "BACKWARD_TRANSITIVE",
            CompatibilityLevel::Forward => "FORWARD",
            CompatibilityLevel::ForwardTransitive => "FORWARD_TRANSITIVE",
            CompatibilityLevel::Full => "FULL",
            CompatibilityLevel::FullTransitive => "FULL_TRANSITIVE",
        }
    }

    /// Case-insensitive, as the registry accepts it.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|l| l.name().eq_ignore_ascii_case(text.trim()))
    }

    fn transitive(self) -> bool {
        matches!(
            self,
            CompatibilityLevel::BackwardTransitive
                | CompatibilityLevel::ForwardTransitive
                | CompatibilityLevel::FullTransitive
        )
    }

    /// The same direction against a single version.
    pub fn non_transitive(self) -> Self {
        match self {
            CompatibilityLevel::BackwardTransitive => CompatibilityLevel::Backward,
            CompatibilityLevel::ForwardTransitive => CompatibilityLevel::Forward,
            CompatibilityLevel::FullTransitive => CompatibilityLevel::Full,
            other => other,
        }
    }

    fn backward(self) -> bool {
        matches!(
            self,
            CompatibilityLevel::Backward
                | CompatibilityLevel::BackwardTransitive
                | CompatibilityLevel::Full
                | CompatibilityLevel::FullTransitive
        )
    }

    fn forward(self) -> bool {
        matches!(
            self,
            CompatibilityLevel::Forward
                | CompatibilityLevel::ForwardTransitive
                | CompatibilityLevel::Full
                | CompatibilityLevel::FullTransitive
        )
    }
}

/// Why `reader` cannot read `writer`'s data, if it cannot.
fn read_problem(writer: &Schema, reader: &Schema) -> Option<String> {
    match SchemaCompatibility::can_read(writer, reader) {
        Ok(Compatibility::Full) => None,
        Ok(Compatibility::Partial) => {
            Some("the reader can read only some of the writer's data (an enum or union lacks symbols or branches)".to_owned())
        }
        Err(e) => Some(e.to_string()),
    }
}

/// The reasons `new` is incompatible with `previous` (`(version, schema text)` in version
/// order) under `level`; empty when it is compatible.
pub fn check(level: CompatibilityLevel, new: &Schema, previous: &[(i32, String)]) -> Vec<String> {
    if level == CompatibilityLevel::None || previous.is_empty() {
        return Vec::new();
    }
    let against: &[(i32, String)] = if level.transitive() {
        previous
    } else {
        &previous[previous.len() - 1..]
    };
    let mut problems = Vec::new();
    for (version, text) in against.iter().rev() {
        let old = match Schema::parse_str(text) {
            Ok(s) => s,
            Err(e) => {
                problems.push(format!("version {version} does not parse any more: {e}"));
                continue;
            }
        };
        if level.backward() {
            if let Some(p) = read_problem(&old, new) {
                problems.push(format!(
                    "{{rule: {}, oldSchemaVersion: {version}, problem: the new schema cannot read data written with version {version}: {p}, oldSchema: {text}}}",
                    level.name()
                ));
            }
        }
        if level.forward() {
            if let Some(p) = read_problem(new, &old) {
                problems.push(format!(
                    "{{rule: {}, oldSchemaVersion: {version}, problem: version {version} cannot read data written with the new schema: {p}, oldSchema: {text}}}",
                    level.name()
                ));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(fields: &str) -> String {
        format!(r#"{{"type":"record","name":"V","namespace":"t","fields":[{fields}]}}"#)
    }

    fn verdict(level: CompatibilityLevel, new: &str, old: &[&str]) -> bool {
        let new = Schema::parse_str(new).unwrap();
        let previous: Vec<(i32, String)> = old
            .iter()
            .enumerate()
            .map(|(i, s)| (i as i32 + 1, (*s).to_owned()))
            .collect();
        check(level, &new, &previous).is_empty()
    }

    #[test]
    fn each_level_accepts_and_rejects_as_avro_resolution_says() {
        use CompatibilityLevel::*;
        let v1 = record(r#"{"name":"id","type":"int"}"#);
        let added_optional = record(
            r#"{"name":"id","type":"int"},{"name":"n","type":["null","string"],"default":null}"#,
        );
        let added_required = record(r#"{"name":"id","type":"int"},{"name":"n","type":"string"}"#);
        let widened = record(r#"{"name":"id","type":"long"}"#);
        let changed = record(r#"{"name":"id","type":"string"}"#);
        let removed = record(r#"{"name":"other","type":["null","int"],"default":null}"#);

        // BACKWARD: new reads old.
        assert!(verdict(Backward, &added_optional, &[&v1]));
        assert!(!verdict(Backward, &added_required, &[&v1]));
        assert!(verdict(Backward, &widened, &[&v1]), "int promotes to long");
        assert!(!verdict(Backward, &changed, &[&v1]));
        // FORWARD: old reads new.
        assert!(
            verdict(Forward, &added_required, &[&v1]),
            "old ignores the new field"
        );
        assert!(
            !verdict(Forward, &widened, &[&v1]),
            "long does not narrow to int"
        );
        assert!(verdict(Forward, &added_optional, &[&v1]));
        // FULL: both.
        assert!(verdict(Full, &added_optional, &[&v1]));
        assert!(!verdict(Full, &added_required, &[&v1]));
        assert!(!verdict(Full, &widened, &[&v1]));
        // NONE accepts anything.
        assert!(verdict(None, &changed, &[&v1]));
        // Transitive forms look at every version, the others at the latest only.
        assert!(!verdict(Backward, &added_required, &[&v1, &added_optional]));
        assert!(verdict(Backward, &removed, &[&changed, &v1]), "latest only");
        assert!(!verdict(BackwardTransitive, &v1, &[&changed, &v1]));
        assert!(verdict(ForwardTransitive, &added_optional, &[&v1, &v1]));
        assert!(!verdict(FullTransitive, &widened, &[&widened, &v1]));
    }

    #[test]
    fn problems_name_the_rule_and_version() {
        let v1 = Schema::parse_str(&record(r#"{"name":"id","type":"int"}"#)).unwrap();
        let p = check(
            CompatibilityLevel::Backward,
            &v1,
            &[(4, record(r#"{"name":"id","type":"string"}"#))],
        );
        assert_eq!(p.len(), 1);
        assert!(p[0].contains("rule: BACKWARD"), "{}", p[0]);
        assert!(p[0].contains("oldSchemaVersion: 4"), "{}", p[0]);
        assert_eq!(
            CompatibilityLevel::parse("full_transitive"),
            Some(CompatibilityLevel::FullTransitive)
        );
        assert_eq!(CompatibilityLevel::parse("sideways"), Option::None);
    }
}
