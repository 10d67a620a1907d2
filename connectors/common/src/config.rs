//! Configuration pieces every Debezium-compatible source shares: `skipped.operations`, the
//! include/exclude pair rule, and Debezium's signalling keys (channels other than `source` are
//! refused, so no signal is ever silently ignored).
//!
//! Invariant: parsing accepts exactly Debezium's vocabulary and says what is wrong otherwise.

use headwater_api::config::{ConfigDef, ConfigKey, ConfigType, Validator};
use headwater_api::{ConfigValidation, Properties};

/// Debezium's signalling keys beside `signal.data.collection` (which each connector defines
/// with its own name form). Channels other than `source` are refused, so no signal is ever
/// silently ignored. The poll interval and the incremental snapshot's chunk size are accepted
/// and unused: source signals arrive with the stream, and incremental requests run as
/// blocking snapshots.
pub fn define_signal_keys(def: ConfigDef) -> ConfigDef {
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
                        "signal channel {channel:?} is not supported: only source (signal.data.collection) is"
                    )),
                    None => Ok(()),
                }
            }))
            .doc("Only source: signals are read from signal.data.collection."),
    )
    .define(
        ConfigKey::new("signal.poll.interval.ms", ConfigType::Long)
            .default_str("5000")
            .validator(Validator::at_least(0.0))
            .doc("Accepted; unused (source signals arrive with the change stream)."),
    )
    .define(
        ConfigKey::new("incremental.snapshot.chunk.size", ConfigType::Int)
            .default_str("1024")
            .validator(Validator::at_least(1.0))
            .doc("Accepted; unused (incremental snapshot requests run as blocking snapshots)."),
    )
}

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
    fn signal_channels_other_than_source_are_refused() {
        let def = define_signal_keys(ConfigDef::new());
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
        ])
        .is_empty());
        let refused = check(&[("signal.enabled.channels", "source,kafka")]);
        assert_eq!(refused[0].0, "signal.enabled.channels");
        assert!(refused[0].1.contains("\"kafka\""), "{refused:?}");
        assert!(def.key("signal.data.collection").is_none());
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
