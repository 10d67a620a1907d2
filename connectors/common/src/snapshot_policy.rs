//! What `snapshot.mode` asks of a source task at its start, in the one form every source's
//! modes reduce to (Debezium's `Snapshotter`: whether to snapshot data, whether to stream,
//! what to do when the committed position is gone), and `snapshot.mode=configuration_based`
//! with its five `snapshot.mode.configuration.based.*` keys; `snapshot.delay.ms` and
//! `streaming.delay.ms`.
//!
//! Invariants: a mode that snapshots without an offset also resumes an unfinished snapshot;
//! a policy that neither snapshots nor streams is refused at validation (it would capture
//! nothing); a lost position never silently skips changes unless the configuration says so
//! (`snapshot.on.data.error=true` without `snapshot.data`), and then a warning names the gap.

use std::time::Duration;

use headwater_api::config::{ConfigDef, ConfigKey, ConfigType, Validator};
use headwater_api::{ConfigValidation, Properties, StopRequest, TaskWaiting};

/// What a committed position the server no longer has (a dropped or invalidated slot, a
/// purged binlog, a resume token off the oplog) leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LostPosition {
    /// The task fails saying so (`initial`, `no_data`, ...).
    Fail,
    /// A new snapshot, then streaming from its start (`when_needed`, `always`).
    Snapshot,
    /// Streaming from the server's current position: the changes in between are skipped,
    /// with a warning (`configuration_based` with `snapshot.on.data.error` and no data
    /// snapshot, as Debezium resets the offsets there).
    StreamFromNow,
}

/// `snapshot.mode`'s effect at a task's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotPolicy {
    /// Snapshot when no snapshot has completed yet (no offset, or an unfinished snapshot,
    /// which resumes).
    pub without_offset: bool,
    /// Snapshot at every start, whatever the offsets say.
    pub every_start: bool,
    /// Stream changes after the snapshot (or without one); otherwise the task finishes once
    /// its snapshot has.
    pub streams: bool,
    /// What a committed position the server no longer has leads to.
    pub lost_position: LostPosition,
}

impl SnapshotPolicy {
    /// `initial`.
    pub const INITIAL: SnapshotPolicy = SnapshotPolicy {
        without_offset: true,
        every_start: false,
        streams: true,
        lost_position: LostPosition::Fail,
    };
    /// `always`.
    pub const ALWAYS: SnapshotPolicy = SnapshotPolicy {
        without_offset: true,
        every_start: true,
        streams: true,
        lost_position: LostPosition::Snapshot,
    };
    /// `initial_only`.
    pub const INITIAL_ONLY: SnapshotPolicy = SnapshotPolicy {
        without_offset: true,
        every_start: false,
        streams: false,
        lost_position: LostPosition::Fail,
    };
    /// `no_data` (and MySQL's `recovery`, which has no schema history to rebuild here).
    pub const NO_DATA: SnapshotPolicy = SnapshotPolicy {
        without_offset: false,
        every_start: false,
        streams: true,
        lost_position: LostPosition::Fail,
    };
    /// `when_needed`.
    pub const WHEN_NEEDED: SnapshotPolicy = SnapshotPolicy {
        without_offset: true,
        every_start: false,
        streams: true,
        lost_position: LostPosition::Snapshot,
    };

    /// Whether a task that has completed its snapshot (or never takes one) and does not
    /// stream has nothing left to do at its start.
    pub fn done_after_snapshot(self) -> bool {
        !self.streams && !self.every_start
    }
}

/// `snapshot.mode`, as the three sources read it (each accepts its own subset: `recovery` is
/// MySQL's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotMode {
    Initial,
    /// A new snapshot at every start of the task (an interrupted one resumes instead).
    Always,
    InitialOnly,
    NoData,
    WhenNeeded,
    /// MySQL's `recovery`: rebuilds a schema history Headwater does not keep, so `no_data`.
    Recovery,
    ConfigurationBased(ConfigurationBased),
}

impl SnapshotMode {
    /// What the mode asks of the task at its start.
    pub fn policy(self) -> SnapshotPolicy {
        match self {
            SnapshotMode::Initial => SnapshotPolicy::INITIAL,
            SnapshotMode::Always => SnapshotPolicy::ALWAYS,
            SnapshotMode::InitialOnly => SnapshotPolicy::INITIAL_ONLY,
            SnapshotMode::NoData | SnapshotMode::Recovery => SnapshotPolicy::NO_DATA,
            SnapshotMode::WhenNeeded => SnapshotPolicy::WHEN_NEEDED,
            SnapshotMode::ConfigurationBased(c) => c.policy(),
        }
    }
}

/// `snapshot.mode.configuration.based.snapshot.data`.
pub const CB_SNAPSHOT_DATA: &str = "snapshot.mode.configuration.based.snapshot.data";
/// `snapshot.mode.configuration.based.snapshot.schema`.
pub const CB_SNAPSHOT_SCHEMA: &str = "snapshot.mode.configuration.based.snapshot.schema";
/// `snapshot.mode.configuration.based.start.stream`.
pub const CB_START_STREAM: &str = "snapshot.mode.configuration.based.start.stream";
/// `snapshot.mode.configuration.based.snapshot.on.schema.error`.
pub const CB_ON_SCHEMA_ERROR: &str = "snapshot.mode.configuration.based.snapshot.on.schema.error";
/// `snapshot.mode.configuration.based.snapshot.on.data.error`.
pub const CB_ON_DATA_ERROR: &str = "snapshot.mode.configuration.based.snapshot.on.data.error";

/// `snapshot.mode=configuration_based`: Debezium's `ConfigurationBasedSnapshotter`, whose
/// answers are the keys' values whatever the offsets say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConfigurationBased {
    /// `snapshot.data`: snapshot the data at every start.
    pub data: bool,
    /// `start.stream`: stream after the snapshot.
    pub stream: bool,
    /// `snapshot.on.data.error`: a lost position is not an error.
    pub on_data_error: bool,
}

impl ConfigurationBased {
    /// The keys' values in `props` (each `false` when unset, as in Debezium).
    pub fn from_props(props: &Properties) -> ConfigurationBased {
        let flag = |k: &str| {
            props
                .get(k)
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
        };
        ConfigurationBased {
            data: flag(CB_SNAPSHOT_DATA),
            stream: flag(CB_START_STREAM),
            on_data_error: flag(CB_ON_DATA_ERROR),
        }
    }

    /// The policy the keys describe. With `snapshot.data` every start snapshots, so a lost
    /// position is simply replaced by the new snapshot's; without it, `snapshot.on.data.error`
    /// streams on from the server's current position (Debezium resets the offsets and, not
    /// snapshotting, starts from the current position).
    pub fn policy(self) -> SnapshotPolicy {
        SnapshotPolicy {
            without_offset: self.data,
            every_start: self.data,
            streams: self.stream,
            lost_position: match (self.data, self.on_data_error) {
                (true, _) => LostPosition::Snapshot,
                (false, true) => LostPosition::StreamFromNow,
                (false, false) => LostPosition::Fail,
            },
        }
    }
}

/// `snapshot.delay.ms`.
pub const SNAPSHOT_DELAY: &str = "snapshot.delay.ms";
/// `streaming.delay.ms`.
pub const STREAMING_DELAY: &str = "streaming.delay.ms";

/// Debezium's `snapshot.delay.ms` and `streaming.delay.ms`: how long a task waits before its
/// snapshot (when it takes one at start) and before streaming after that snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StartDelays {
    pub snapshot: Duration,
    pub streaming: Duration,
}

impl StartDelays {
    /// The two keys' values in `props` (0 when unset or not a number; validation has
    /// refused negative and malformed values already).
    pub fn from_props(props: &Properties) -> StartDelays {
        let ms = |k: &str| {
            props
                .get(k)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map_or(Duration::ZERO, Duration::from_millis)
        };
        StartDelays {
            snapshot: ms(SNAPSHOT_DELAY),
            streaming: ms(STREAMING_DELAY),
        }
    }
}

/// Waits `delay` (`snapshot.delay.ms`) before a snapshot taken at start, unless the task is
/// asked to stop meanwhile (checked every 100 ms); the task's status says what it waits for
/// meanwhile (`waiting`). False when a stop cut the wait short: the task then takes no
/// snapshot.
pub async fn wait_snapshot_delay(
    delay: Duration,
    stop: &StopRequest,
    waiting: &TaskWaiting,
) -> bool {
    if delay.is_zero() {
        return true;
    }
    tracing::info!(
        delay_ms = delay.as_millis() as u64,
        "waiting snapshot.delay.ms before the snapshot"
    );
    waiting.set(format!(
        "snapshot.delay.ms: the snapshot begins {} ms after the task started",
        delay.as_millis()
    ));
    let until = tokio::time::Instant::now() + delay;
    let waited = loop {
        if stop.is_requested() {
            tracing::info!("stopped while waiting snapshot.delay.ms: no snapshot");
            break false;
        }
        let now = tokio::time::Instant::now();
        if now >= until {
            break true;
        }
        tokio::time::sleep((until - now).min(Duration::from_millis(100))).await;
    };
    waiting.clear();
    waited
}

/// Starts `streaming.delay.ms` after the snapshot taken at start: says so in the log and the
/// task's status (`waiting`) and returns the instant streaming begins.
pub fn hold_streaming(delay: Duration, waiting: &TaskWaiting) -> std::time::Instant {
    tracing::info!(
        delay_ms = delay.as_millis() as u64,
        "snapshot finished; streaming begins after streaming.delay.ms"
    );
    waiting.set(format!(
        "streaming.delay.ms: streaming begins {} ms after the snapshot finished",
        delay.as_millis()
    ));
    std::time::Instant::now() + delay
}

/// One poll of a task held back by `streaming.delay.ms` until `at`: sleeps up to
/// `poll_interval` and returns false, or, once `at` has passed, clears `waiting` and returns
/// true (the task opens its stream now).
pub async fn streaming_due(
    at: std::time::Instant,
    poll_interval: Duration,
    waiting: &TaskWaiting,
) -> bool {
    let now = std::time::Instant::now();
    if now < at {
        tokio::time::sleep((at - now).min(poll_interval)).await;
        return false;
    }
    waiting.clear();
    true
}

/// Defines `snapshot.delay.ms`, `streaming.delay.ms` and the five
/// `snapshot.mode.configuration.based.*` keys (booleans, `false` by default).
/// `snapshot.schema` and `snapshot.on.schema.error` are accepted and have no effect:
/// Headwater reads table structure from the database's catalog at every start and keeps no
/// schema history that could be missing.
pub fn define_snapshot_mode_keys(def: ConfigDef) -> ConfigDef {
    let def = def
        .define(
            ConfigKey::new(SNAPSHOT_DELAY, ConfigType::Long)
                .default_str("0")
                .validator(Validator::at_least(0.0))
                .doc("Milliseconds to wait before the snapshot a task takes at its start (none is taken without need)."),
        )
        .define(
            ConfigKey::new(STREAMING_DELAY, ConfigType::Long)
                .default_str("0")
                .validator(Validator::at_least(0.0))
                .doc("Milliseconds to wait after the snapshot a task took at its start before streaming begins (the snapshot's end is committed before the wait)."),
        );
    let key = |name: &'static str, doc: &'static str| {
        ConfigKey::new(name, ConfigType::Boolean)
            .default_str("false")
            .doc(doc)
    };
    def.define(key(
        CB_SNAPSHOT_DATA,
        "With snapshot.mode=configuration_based: snapshot the data at every start of the task.",
    ))
    .define(key(
        CB_SNAPSHOT_SCHEMA,
        "With snapshot.mode=configuration_based: accepted; table structure is always read from the catalog (no schema history).",
    ))
    .define(key(
        CB_START_STREAM,
        "With snapshot.mode=configuration_based: stream changes after the snapshot (or without one).",
    ))
    .define(key(
        CB_ON_SCHEMA_ERROR,
        "With snapshot.mode=configuration_based: accepted; there is no schema history that could be missing.",
    ))
    .define(key(
        CB_ON_DATA_ERROR,
        "With snapshot.mode=configuration_based: when the committed position is gone from the server, stream on from its current position (skipping the changes in between) instead of failing; with snapshot.data the new snapshot covers them.",
    ))
}

/// With `snapshot.mode=configuration_based`, a combination that would capture nothing
/// (neither `snapshot.data` nor `start.stream`) is an error on `start.stream`.
pub fn validate_configuration_based(v: &mut ConfigValidation, props: &Properties) {
    let configuration_based = props
        .get("snapshot.mode")
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("configuration_based"));
    if !configuration_based {
        return;
    }
    let cb = ConfigurationBased::from_props(props);
    if !cb.data && !cb.stream {
        v.add_error(
            CB_START_STREAM,
            format!("snapshot.mode=configuration_based with neither {CB_SNAPSHOT_DATA}=true nor {CB_START_STREAM}=true would capture nothing; set one of them (or both)"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> Properties {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn configuration_based_keys_become_a_policy() {
        let cb = |pairs: &[(&str, &str)]| ConfigurationBased::from_props(&props(pairs)).policy();
        // snapshot.data and start.stream: `always`.
        assert_eq!(
            cb(&[(CB_SNAPSHOT_DATA, "true"), (CB_START_STREAM, "TRUE")]),
            SnapshotPolicy::ALWAYS
        );
        // snapshot.data alone: a snapshot at every start and no streaming.
        let only = cb(&[(CB_SNAPSHOT_DATA, "true")]);
        assert!(only.every_start && only.without_offset && !only.streams);
        assert!(!only.done_after_snapshot(), "it snapshots at every start");
        // start.stream alone: `no_data`.
        assert_eq!(cb(&[(CB_START_STREAM, "true")]), SnapshotPolicy::NO_DATA);
        // ... with on.data.error: a lost position streams on from now.
        let skip = cb(&[(CB_START_STREAM, "true"), (CB_ON_DATA_ERROR, "true")]);
        assert_eq!(skip.lost_position, LostPosition::StreamFromNow);
        assert!(!skip.without_offset && !skip.every_start && skip.streams);
        assert!(SnapshotPolicy::INITIAL_ONLY.done_after_snapshot());
        assert!(!SnapshotPolicy::INITIAL.done_after_snapshot());
    }

    #[test]
    fn a_configuration_that_captures_nothing_is_refused_on_start_stream() {
        let check = |pairs: &[(&str, &str)]| {
            let mut v = ConfigValidation::default();
            validate_configuration_based(&mut v, &props(pairs));
            v.error_count()
        };
        assert_eq!(check(&[("snapshot.mode", "configuration_based")]), 1);
        assert_eq!(
            check(&[
                ("snapshot.mode", "configuration_based"),
                (CB_ON_DATA_ERROR, "true"),
                (CB_SNAPSHOT_SCHEMA, "true"),
            ]),
            1
        );
        assert_eq!(
            check(&[
                ("snapshot.mode", "configuration_based"),
                (CB_START_STREAM, "true")
            ]),
            0
        );
        assert_eq!(
            check(&[
                ("snapshot.mode", "CONFIGURATION_BASED"),
                (CB_SNAPSHOT_DATA, "true")
            ]),
            0
        );
        assert_eq!(
            check(&[("snapshot.mode", "initial")]),
            0,
            "other modes ignore the keys"
        );
        let mut v = ConfigValidation::default();
        validate_configuration_based(&mut v, &props(&[("snapshot.mode", "configuration_based")]));
        let errors = v.errors_by_field();
        assert!(
            errors[CB_START_STREAM][0].contains("capture nothing"),
            "{errors:?}"
        );
    }
}
