//! Configuration pieces every Debezium-compatible source shares: `skipped.operations`, the
//! include/exclude pair rule, and Debezium's signalling keys (channels a connector does not
//! read are refused, so no signal is ever silently ignored).
//!
//! Invariant: parsing accepts exactly Debezium's vocabulary and says what is wrong otherwise.

use headwater_api::config::{ConfigDef, ConfigKey, ConfigType, Validator};
use headwater_api::{ConfigValidation, Properties};

/// Debezium's signalling keys beside `signal.data.collection` (which each connector defines
/// with its own name form). `signal.enabled.channels` takes `source` and `file`
/// ([`crate::signal_file`]); other channels are refused, so no signal is ever silently
/// ignored. `signal.poll.interval.ms` is how often the file is read (source signals arrive
/// with the stream). The incremental snapshot's chunk size is each connector's to read.
pub fn define_signal_keys(def: ConfigDef) -> ConfigDef {
    def.define(
        ConfigKey::new("signal.enabled.channels", ConfigType::String)
            .default_str("source")
            .validator(Validator::custom(|v| {
                let text = v.to_config_string();
                let read = |c: &str| {
                    c.is_empty() || c.eq_ignore_ascii_case("source") || c.eq_ignore_ascii_case("file")
                };
                match text.split(',').map(str::trim).find(|c| !read(c)) {
                    Some(channel) => Err(format!(
                        "signal channel {channel:?} is not supported: source (signal.data.collection) and file (signal.file) are"
                    )),
                    None => Ok(()),
                }
            }))
            .doc("source (rows of signal.data.collection) and/or file (lines of signal.file)."),
    )
    .define(
        ConfigKey::new("signal.file", ConfigType::String)
            .default_str("file-signals.txt")
            .doc("The file channel's file: one JSON signal per line ({\"id\", \"type\", \"data\"}), taken (renamed aside, read, removed) every signal.poll.interval.ms; a relative path is relative to the worker's working directory."),
    )
    .define(
        ConfigKey::new("signal.poll.interval.ms", ConfigType::Long)
            .default_str("5000")
            .validator(Validator::at_least(0.0))
            .doc("How often the file channel reads signal.file (source signals arrive with the change stream)."),
    )
    .define(
        ConfigKey::new(WATERMARKING_STRATEGY, ConfigType::String)
            .default_str("INSERT_INSERT")
            .validator(Validator::one_of_case_insensitive(&["INSERT_INSERT", "INSERT_DELETE"]))
            .doc("How an incremental snapshot's chunk window closes: INSERT_INSERT inserts a close row into the signal table (two rows per chunk stay there), INSERT_DELETE deletes the window's open row (the table stays empty)."),
    )
    .define(
        ConfigKey::new("incremental.snapshot.chunk.size", ConfigType::Int)
            .default_str("1024")
            .validator(Validator::at_least(1.0))
            .doc("Rows (documents) per chunk of an incremental snapshot."),
    )
}

/// Debezium's `errors.max.retries`: how many restarts in a row after retriable errors (a lost
/// connection, say) a task gets before it fails; -1 (the default) is without limit. The
/// engine applies it; a run that hands out records ends the row.
pub fn define_errors_max_retries(def: ConfigDef) -> ConfigDef {
    def.define(
        ConfigKey::new("errors.max.retries", ConfigType::Int)
            .default_str("-1")
            .validator(Validator::at_least(-1.0))
            .doc("Restarts in a row after retriable errors (a lost connection, say) before the task fails: -1 without limit, 0 none; a restart that hands out records ends the row."),
    )
}

/// `incremental.snapshot.watermarking.strategy`.
pub const WATERMARKING_STRATEGY: &str = "incremental.snapshot.watermarking.strategy";

/// Whether `incremental.snapshot.watermarking.strategy` is `INSERT_DELETE`: a chunk's window
/// closes by deleting its open watermark row instead of inserting a close row.
pub fn watermarks_deleted(props: &Properties) -> bool {
    props
        .get(WATERMARKING_STRATEGY)
        .is_some_and(|s| s.trim().eq_ignore_ascii_case("insert_delete"))
}

/// Whether `signal.enabled.channels` (its value in `props`, Debezium's default `source` when
/// unset) names `channel`.
pub fn channel_enabled(props: &Properties, channel: &str) -> bool {
    props
        .get("signal.enabled.channels")
        .map_or("source", String::as_str)
        .split(',')
        .any(|c| c.trim().eq_ignore_ascii_case(channel))
}

/// A Debezium key whose non-default values Headwater does not build: set to anything but one
/// of `accepted` (compared case-insensitively; empty always passes), it is refused with
/// `why`, because ignoring it would silently change what is emitted.
pub struct Unbuilt {
    pub key: &'static str,
    pub accepted: &'static [&'static str],
    pub why: &'static str,
}

/// Keys every Debezium source shares that change what is emitted and that Headwater only has
/// in their default form.
pub const COMMON_UNBUILT: &[Unbuilt] = &[
    Unbuilt {
        key: "converters",
        accepted: &[],
        why: "custom converters are Java classes; Headwater's type mapping is Debezium's default one (see the connector's page)",
    },
    Unbuilt {
        key: "post.processors",
        accepted: &[],
        why: "post processors are Java classes",
    },
    Unbuilt {
        key: "topic.delimiter",
        accepted: &["."],
        why: "topic names use Debezium's default delimiter; rename topics with the RegexRouter transform instead",
    },
    Unbuilt {
        key: "topic.heartbeat.name",
        accepted: &[],
        why: "heartbeat topics are <topic.heartbeat.prefix>.<topic.prefix>; rename them with the RegexRouter transform instead",
    },
    Unbuilt {
        key: "transaction.metadata.factory",
        accepted: &["io.debezium.pipeline.txmetadata.DefaultTransactionMetadataFactory"],
        why: "transaction metadata is Debezium's default form",
    },
    Unbuilt {
        key: "event.processing.failure.handling.mode",
        accepted: &["fail"],
        why: "warn and skip would drop events; an event that cannot be processed fails the task",
    },
];

/// `schema.name.adjustment.mode` and `field.name.adjustment.mode` as a connector that
/// adjusts names has them (`none`, `avro`, `avro_unicode`).
pub const NAME_ADJUSTMENT_AVRO: &[Unbuilt] = &[
    Unbuilt {
        key: "schema.name.adjustment.mode",
        accepted: &["none", "avro", "avro_unicode"],
        why: "the modes are none, avro and avro_unicode",
    },
    Unbuilt {
        key: "field.name.adjustment.mode",
        accepted: &["none", "avro", "avro_unicode"],
        why: "the modes are none, avro and avro_unicode",
    },
];

/// The two adjustment keys of a connector that adjusts schema names only (its field names
/// are fixed and valid; MongoDB's documents travel as JSON text).
pub const NAME_ADJUSTMENT_SCHEMA_ONLY: &[Unbuilt] = &[
    Unbuilt {
        key: "schema.name.adjustment.mode",
        accepted: &["none", "avro", "avro_unicode"],
        why: "the modes are none, avro and avro_unicode",
    },
    Unbuilt {
        key: "field.name.adjustment.mode",
        accepted: &["none"],
        why: "this connector does not adjust field names; set scrub.invalid.names=true on the AvroConverter instead",
    },
];

/// Defines each of `keys` with a validator refusing what Headwater does not build (see
/// [`Unbuilt`]).
pub fn define_unbuilt_keys(mut def: ConfigDef, keys: &'static [Unbuilt]) -> ConfigDef {
    for k in keys {
        let accepted = k.accepted;
        let (key, why) = (k.key, k.why);
        let doc = if accepted.is_empty() {
            format!("Refused when set: {why}.")
        } else {
            format!("Only {} is supported: {why}.", accepted.join(" or "))
        };
        def = def.define(
            ConfigKey::new(key, ConfigType::String)
                .default_null()
                .validator(Validator::custom(move |v| {
                    let text = v.to_config_string();
                    let text = text.trim();
                    if text.is_empty() || accepted.iter().any(|a| a.eq_ignore_ascii_case(text)) {
                        Ok(())
                    } else {
                        Err(format!("{key}={text} is not supported: {why}"))
                    }
                }))
                .doc(doc),
        );
    }
    def
}

/// `snapshot.select.statement.overrides`: the tables it lists (qualified names, compared
/// exactly) and, for each, the statement of its `snapshot.select.statement.overrides.<table>`
/// key. The error names a listed table without a statement.
pub fn parse_snapshot_overrides(props: &Properties) -> Result<Vec<(String, String)>, String> {
    const KEY: &str = "snapshot.select.statement.overrides";
    let Some(list) = props.get(KEY) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for table in crate::name_filter::split_list(list) {
        // Debezium parses entries as table ids: quoted parts lose their quotes.
        let table = table
            .split('.')
            .map(|p| p.trim().trim_matches(|c| c == '"' || c == '`'))
            .collect::<Vec<_>>()
            .join(".");
        let statement = props
            .get(&format!("{KEY}.{table}"))
            .map(|s| s.trim().trim_end_matches(';').trim())
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                format!("{table} is listed, but {KEY}.{table} (its SELECT statement) is not set")
            })?;
        out.push((table, statement.to_owned()));
    }
    Ok(out)
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

/// `snapshot.tables.order.by.row.count`: the order in which a snapshot copies its tables.
pub const TABLE_ORDER: &str = "snapshot.tables.order.by.row.count";

/// Debezium's `snapshot.tables.order.by.row.count` (relational connectors).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TableOrder {
    /// The captured order (Debezium's default).
    #[default]
    Disabled,
    /// Smallest table first, by the server's row estimate.
    Ascending,
    /// Largest table first.
    Descending,
}

impl TableOrder {
    /// Defines the key.
    pub fn define(def: ConfigDef) -> ConfigDef {
        def.define(
            ConfigKey::new(TABLE_ORDER, ConfigType::String)
                .default_str("disabled")
                .validator(Validator::one_of_case_insensitive(&["disabled", "ascending", "descending"]))
                .doc("The order in which the initial snapshot copies its tables: disabled (the captured order), ascending or descending by the server's row estimate (a resumed snapshot finishes the table it was copying first)."),
        )
    }

    /// The order `props` ask for.
    pub fn from_props(props: &Properties) -> TableOrder {
        match props
            .get(TABLE_ORDER)
            .map(|v| v.trim().to_ascii_lowercase())
        {
            Some(v) if v == "ascending" => TableOrder::Ascending,
            Some(v) if v == "descending" => TableOrder::Descending,
            _ => TableOrder::Disabled,
        }
    }

    /// Orders a snapshot's tables by their row estimate (`rows`), keeping the captured order
    /// among equal estimates; a table `in_progress` says a resumed snapshot was copying stays
    /// first, so its progress in the offsets is not overtaken by another table's.
    pub fn sort<T>(
        self,
        tables: &mut [T],
        rows: impl Fn(&T) -> u64,
        in_progress: impl Fn(&T) -> bool,
    ) {
        let descending = match self {
            TableOrder::Disabled => return,
            TableOrder::Ascending => false,
            TableOrder::Descending => true,
        };
        tables.sort_by_key(|t| {
            let r = rows(t);
            (!in_progress(t), if descending { u64::MAX - r } else { r })
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_channels_other_than_source_and_file_are_refused() {
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
        assert!(check(&[("signal.enabled.channels", "source, FILE")]).is_empty());
        let mut p = Properties::new();
        p.insert("signal.enabled.channels".into(), "source, file".into());
        assert!(channel_enabled(&p, "file") && channel_enabled(&p, "source"));
        assert!(channel_enabled(&Properties::new(), "source"));
        assert!(!channel_enabled(&Properties::new(), "file"));
    }

    #[test]
    fn unbuilt_keys_pass_only_their_default() {
        const KEYS: &[Unbuilt] = &[
            Unbuilt {
                key: "topic.delimiter",
                accepted: &["."],
                why: "not built",
            },
            Unbuilt {
                key: "converters",
                accepted: &[],
                why: "classes",
            },
        ];
        let def = define_unbuilt_keys(ConfigDef::new(), KEYS);
        let errors = |kv: &[(&str, &str)]| {
            let p: Properties = kv
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            let v = def.validate(&p);
            v.errors_by_field()
                .into_iter()
                .map(|(k, e)| (k.to_owned(), e.join(" ")))
                .collect::<Vec<_>>()
        };
        assert!(errors(&[("topic.delimiter", "."), ("converters", "")]).is_empty());
        let e = errors(&[("topic.delimiter", "_"), ("converters", "isbn")]);
        assert_eq!(e.len(), 2);
        assert!(e[0].1.contains("converters=isbn is not supported: classes"));
        assert!(e[1].1.contains("topic.delimiter=_ is not supported"));
    }

    #[test]
    fn snapshot_overrides_need_a_statement_per_listed_table() {
        let p: Properties = [
            ("snapshot.select.statement.overrides", "public.a, public.b"),
            (
                "snapshot.select.statement.overrides.public.a",
                "SELECT * FROM public.a WHERE x > 1;",
            ),
            (
                "snapshot.select.statement.overrides.public.b",
                "SELECT * FROM public.b",
            ),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        let o = parse_snapshot_overrides(&p).unwrap();
        assert_eq!(
            o,
            vec![
                (
                    "public.a".to_owned(),
                    "SELECT * FROM public.a WHERE x > 1".to_owned()
                ),
                ("public.b".to_owned(), "SELECT * FROM public.b".to_owned()),
            ]
        );
        let mut missing = p.clone();
        missing.remove("snapshot.select.statement.overrides.public.b");
        assert!(parse_snapshot_overrides(&missing)
            .unwrap_err()
            .contains("public.b is listed"));
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

    #[test]
    fn tables_sort_by_row_count_with_the_one_in_progress_first() {
        let tables = [("a", 5u64), ("b", 50), ("c", 1), ("d", 5)];
        let sorted = |order: TableOrder, busy: &str| {
            let mut t = tables.to_vec();
            order.sort(&mut t, |t| t.1, |t| t.0 == busy);
            t.iter().map(|t| t.0).collect::<String>()
        };
        assert_eq!(sorted(TableOrder::Disabled, ""), "abcd");
        assert_eq!(sorted(TableOrder::Ascending, ""), "cadb");
        assert_eq!(sorted(TableOrder::Descending, ""), "badc");
        assert_eq!(sorted(TableOrder::Ascending, "b"), "bcad");
        let props = headwater_api::properties(&[(TABLE_ORDER, " Descending")]);
        assert_eq!(TableOrder::from_props(&props), TableOrder::Descending);
        let def = TableOrder::define(ConfigDef::new());
        let bad = headwater_api::properties(&[(TABLE_ORDER, "random")]);
        assert_eq!(def.validate(&bad).error_count(), 1);
    }
}
