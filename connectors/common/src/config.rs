//! Configuration pieces every Debezium-compatible source shares: `skipped.operations`, the
//! include/exclude pair rule, and Debezium's signalling keys (refused by connectors without
//! signals, so no signal is ever silently ignored).
//!
//! Invariant: parsing accepts exactly Debezium's vocabulary and says what is wrong otherwise.

use headwater_api::config::{ConfigDef, ConfigKey, ConfigType, ConfigValue, Validator};
use headwater_api::{ConfigValidation, Properties};

/// Debezium's signalling keys, common to its source connectors. A connector without signals
/// (`source_signals` false) refuses a signal collection, because a signal sent there would be
/// ignored. A connector that reads signals from its source defines `signal.data.collection`
/// itself and gets the other keys from here. Every connector refuses channels other than
/// `source`. The incremental snapshot's chunk size is accepted and unused (no connector runs
/// incremental snapshots).
pub fn define_signal_keys(def: ConfigDef, source_signals: bool) -> ConfigDef {
    let def = if source_signals {
        def
    } else {
        def.define(
            ConfigKey::new("signal.data.collection", ConfigType::String)
                .default_null()
                .validator(Validator::custom(|v| match v {
                    ConfigValue::String(s) if !s.trim().is_empty() => Err(SIGNALS_REFUSED.into()),
                    _ => Ok(()),
                }))
                .doc("Refused when set: signals are not supported yet."),
        )
    };
    def.define(
        ConfigKey::new("signal.enabled.channels", ConfigType::String)
            .default_str("source")
            .validator(Validator::custom(|v| {
                let text = v.to_config_string();
                match text
                    .split(',')
                    .map(str::trim)
                    .find(|c| !c.is_empty() && !c.eq_ignore_ascii_case("source"))
                {
                    Some(channel) => Err(format!(
                        "signal channel {channel:?} is not supported: only source (signal.data.collection) is, where the connector has it"
                    )),
                    None => Ok(()),
                }
            }))
            .doc("Only source: signals are read from signal.data.collection where the connector supports it."),
    )
    .define(
        ConfigKey::new("signal.poll.interval.ms", ConfigType::Long)
            .default_str("5000")
            .validator(Validator::at_least(0.0))
            .doc("Accepted; unused (signals are not supported yet)."),
    )
    .define(
        ConfigKey::new("incremental.snapshot.chunk.size", ConfigType::Int)
            .default_str("1024")
            .validator(Validator::at_least(1.0))
            .doc("Accepted; unused (incremental snapshots need signals, which are not supported yet)."),
    )
}

const SIGNALS_REFUSED: &str = "signals (execute-snapshot for ad-hoc and incremental snapshots, stop-snapshot, pause, resume, log) are not supported by this connector yet (the MongoDB connector has them), and a signal sent would be ignored. Remove the key; to snapshot some tables again, run a second connector limited to them with snapshot.mode=initial_only and the same topic.prefix (see docs/migrating-from-debezium.md)";

/// Operations that can be skipped (`skipped.operations`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SkippedOps {
    pub create: bool,
    pub update: bool,
    pub delete: bool,
    pub truncate: bool,
}

/// Parses `skipped.operations`: a comma list of `c`, `u`, `d`, `t`, or `none`.
pub fn parse_skipped(s: &str) -> Result<SkippedOps, String> {
    let mut ops = SkippedOps::default();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        match item.to_ascii_lowercase().as_str() {
            "c" => ops.create = true,
            "u" => ops.update = true,
            "d" => ops.delete = true,
            "t" => ops.truncate = true,
            "none" => {}
            other => {
                return Err(format!(
                    "Invalid operation {other}: must be a comma list of c, u, d, t or none"
                ))
            }
        }
    }
    Ok(ops)
}

/// Debezium's rule that an include list and its exclude list are not both set: reported on the
/// exclude key.
pub fn pair_check(v: &mut ConfigValidation, props: &Properties, include: &str, exclude: &str) {
    let set = |k: &str| props.get(k).is_some_and(|v| !v.trim().is_empty());
    if set(include) && set(exclude) {
        v.add_error(exclude, format!("\"{include}\" is already specified"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_keys_are_refused_unless_inert() {
        let def = define_signal_keys(ConfigDef::new(), false);
        let check = |kv: &[(&str, &str)]| {
            let mut p = Properties::new();
            for (k, v) in kv {
                p.insert((*k).into(), (*v).into());
            }
            let v = def.validate(&p);
            v.errors_by_field()
                .into_iter()
                .map(|(k, e)| (k.to_owned(), e.join(" ")))
                .collect::<Vec<_>>()
        };
        assert!(check(&[]).is_empty());
        assert!(check(&[
            ("signal.enabled.channels", "source"),
            ("incremental.snapshot.chunk.size", "4096"),
            ("signal.data.collection", " "),
        ])
        .is_empty());
        let refused = check(&[("signal.data.collection", "public.debezium_signal")]);
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].0, "signal.data.collection");
        assert!(refused[0].1.contains("not supported") && refused[0].1.contains("initial_only"));
        let refused = check(&[("signal.enabled.channels", "source,kafka")]);
        assert!(refused[0].1.contains("\"kafka\""), "{refused:?}");
        let own = define_signal_keys(ConfigDef::new(), true);
        assert!(own.key("signal.data.collection").is_none());
    }

    #[test]
    fn skipped_operations() {
        assert_eq!(
            parse_skipped("c, T").unwrap(),
            SkippedOps {
                create: true,
                truncate: true,
                ..SkippedOps::default()
            }
        );
        assert_eq!(parse_skipped("none").unwrap(), SkippedOps::default());
        assert!(parse_skipped("x")
            .unwrap_err()
            .contains("Invalid operation x"));
    }
}
