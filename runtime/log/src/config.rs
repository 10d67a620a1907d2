//! Per-topic configuration with Kafka's names and defaults, and the log-wide options.
//!
//! Invariant: a [`TopicConfig`] only exists in a validated state; parsing reports every bad key
//! at once, each with its own message.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::batch::Compression;
use crate::clock::{Clock, SystemClock};

/// `cleanup.policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CleanupPolicy {
    Delete,
    Compact,
    CompactDelete,
}

impl CleanupPolicy {
    pub fn name(self) -> &'static str {
        match self {
            CleanupPolicy::Delete => "delete",
            CleanupPolicy::Compact => "compact",
            CleanupPolicy::CompactDelete => "compact,delete",
        }
    }
    pub fn compacts(self) -> bool {
        matches!(self, CleanupPolicy::Compact | CleanupPolicy::CompactDelete)
    }
    pub fn deletes(self) -> bool {
        matches!(self, CleanupPolicy::Delete | CleanupPolicy::CompactDelete)
    }
}

/// `compression.type`: a codec, or `producer` (keep what the writer produced).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TopicCompression {
    Producer,
    Codec(#[serde(with = "codec_name")] Compression),
}

mod codec_name {
    use super::Compression;
    use serde::{Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(c: &Compression, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(c.name())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Compression, D::Error> {
        let name = String::deserialize(d)?;
        Compression::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown codec {name}")))
    }
}

/// A topic's settings (Kafka topic-level configs of the same names).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicConfig {
    pub cleanup_policy: CleanupPolicy,
    /// -1 = keep forever.
    pub retention_ms: i64,
    /// -1 = no size limit.
    pub retention_bytes: i64,
    pub segment_bytes: u64,
    pub segment_ms: i64,
    pub min_compaction_lag_ms: i64,
    pub delete_retention_ms: i64,
    pub compression: TopicCompression,
}

impl Default for TopicConfig {
    fn default() -> Self {
        TopicConfig {
            cleanup_policy: CleanupPolicy::Delete,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            segment_bytes: 1024 * 1024 * 1024,
            segment_ms: 7 * 24 * 3600 * 1000,
            min_compaction_lag_ms: 0,
            delete_retention_ms: 24 * 3600 * 1000,
            compression: TopicCompression::Producer,
        }
    }
}

/// The config keys a topic accepts.
pub const TOPIC_CONFIG_KEYS: &[&str] = &[
    "cleanup.policy",
    "retention.ms",
    "retention.bytes",
    "segment.bytes",
    "segment.ms",
    "min.compaction.lag.ms",
    "delete.retention.ms",
    "compression.type",
];

impl TopicConfig {
    /// A compacted topic (the runtime's internal topics).
    pub fn compacted() -> Self {
        TopicConfig {
            cleanup_policy: CleanupPolicy::Compact,
            ..TopicConfig::default()
        }
    }

    /// Parses Kafka-named settings over the defaults. Errors are `(key, message)` for every
    /// bad or unknown key.
    pub fn from_kafka_configs(
        configs: &BTreeMap<String, String>,
    ) -> Result<Self, Vec<(String, String)>> {
        let mut cfg = TopicConfig::default();
        let mut errors = Vec::new();
        for (key, raw) in configs {
            let value = raw.trim();
            let long = |min: i64| -> Result<i64, String> {
                let v: i64 = value.parse().map_err(|_| {
                    format!(
                        "Invalid value {raw} for configuration {key}: Not a number of type LONG"
                    )
                })?;
                if v < min {
                    return Err(format!(
                        "Invalid value {raw} for configuration {key}: Value must be at least {min}"
                    ));
                }
                Ok(v)
            };
            let result: Result<(), String> = match key.as_str() {
                "cleanup.policy" => {
                    let mut parts: Vec<&str> = value.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
                    parts.sort_unstable();
                    parts.dedup();
                    match parts.as_slice() {
                        ["delete"] => {
                            cfg.cleanup_policy = CleanupPolicy::Delete;
                            Ok(())
                        }
                        ["compact"] => {
                            cfg.cleanup_policy = CleanupPolicy::Compact;
                            Ok(())
                        }
                        ["compact", "delete"] => {
                            cfg.cleanup_policy = CleanupPolicy::CompactDelete;
                            Ok(())
                        }
                        _ => Err(format!(
                            "Invalid value {raw} for configuration cleanup.policy: must be delete, compact or compact,delete"
                        )),
                    }
                }
                "retention.ms" => long(-1).map(|v| cfg.retention_ms = v),
                "retention.bytes" => long(-1).map(|v| cfg.retention_bytes = v),
                "segment.bytes" => long(14).map(|v| cfg.segment_bytes = v as u64),
                "segment.ms" => long(1).map(|v| cfg.segment_ms = v),
                "min.compaction.lag.ms" => long(0).map(|v| cfg.min_compaction_lag_ms = v),
                "delete.retention.ms" => long(0).map(|v| cfg.delete_retention_ms = v),
                "compression.type" => match value {
                    "producer" => {
                            cfg.compression = TopicCompression::Producer;
                            Ok(())
                        }
                    other => match Compression::from_name(other) {
                        Some(c) => {
                            cfg.compression = TopicCompression::Codec(c);
                            Ok(())
                        }
                        None => Err(format!(
                            "Invalid value {raw} for configuration compression.type: String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"
                        )),
                    },
                },
                _ => Err(format!("Unknown topic config name: {key}")),
            };
            if let Err(message) = result {
                errors.push((key.clone(), message));
            }
        }
        if errors.is_empty() {
            Ok(cfg)
        } else {
            Err(errors)
        }
    }

    /// The settings under their Kafka names (as `DescribeConfigs` shows them).
    pub fn to_kafka_configs(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        m.insert("cleanup.policy".into(), self.cleanup_policy.name().into());
        m.insert("retention.ms".into(), self.retention_ms.to_string());
        m.insert("retention.bytes".into(), self.retention_bytes.to_string());
        m.insert("segment.bytes".into(), self.segment_bytes.to_string());
        m.insert("segment.ms".into(), self.segment_ms.to_string());
        m.insert(
            "min.compaction.lag.ms".into(),
            self.min_compaction_lag_ms.to_string(),
        );
        m.insert(
            "delete.retention.ms".into(),
            self.delete_retention_ms.to_string(),
        );
        m.insert(
            "compression.type".into(),
            match self.compression {
                TopicCompression::Producer => "producer".into(),
                TopicCompression::Codec(c) => c.name().into(),
            },
        );
        m
    }
}

/// When appended data is made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushPolicy {
    /// Every commit waits for its own (group) fsync. The default.
    EveryCommit,
    /// fsync every N milliseconds; a commit resolves at the next flush.
    IntervalMs(u64),
}

/// Log-wide options.
#[derive(Clone, Debug)]
pub struct LogOptions {
    pub flush_policy: FlushPolicy,
    /// How often the recovery-point checkpoint is written (it bounds the work of crash recovery).
    pub checkpoint_interval_ms: u64,
    /// The time source of every time-based decision (rolls, retention, compaction lags and
    /// delete horizons, marker timestamps). Tests use [`crate::clock::FakeClock`].
    pub clock: Arc<dyn Clock>,
    /// Run retention and compaction in a background thread (the default). Off, they only
    /// run through [`crate::Log::run_cleaner_once`].
    pub background_cleaner: bool,
    /// Pause between two background cleaner passes (Kafka's `log.cleaner.backoff.ms` is 15 s;
    /// the first pass runs one interval after open).
    pub cleaner_interval_ms: u64,
    /// A compacted partition is cleaned when the bytes not yet cleaned are at least this share
    /// of its cleanable bytes (Kafka's `min.cleanable.dirty.ratio`, 0.5), or when a delete
    /// horizon has passed. 0 cleans whenever a new segment became cleanable.
    pub min_cleanable_dirty_ratio: f64,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            flush_policy: FlushPolicy::EveryCommit,
            checkpoint_interval_ms: 10_000,
            clock: Arc::new(SystemClock),
            background_cleaner: true,
            cleaner_interval_ms: 15_000,
            min_cleanable_dirty_ratio: 0.5,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kafka_names_and_reports_each_error() {
        let mut m = BTreeMap::new();
        m.insert("cleanup.policy".to_string(), "delete, compact".to_string());
        m.insert("retention.ms".to_string(), "-1".to_string());
        m.insert("compression.type".to_string(), "zstd".to_string());
        let cfg = TopicConfig::from_kafka_configs(&m).unwrap();
        assert_eq!(cfg.cleanup_policy, CleanupPolicy::CompactDelete);
        assert_eq!(cfg.retention_ms, -1);
        assert_eq!(cfg.compression, TopicCompression::Codec(Compression::Zstd));
        assert_eq!(
            TopicConfig::from_kafka_configs(&cfg.to_kafka_configs()).unwrap(),
            cfg
        );

        let mut bad = BTreeMap::new();
        bad.insert("segment.bytes".to_string(), "x".to_string());
        bad.insert("cleanup.policy".to_string(), "keep".to_string());
        bad.insert("flavour".to_string(), "sweet".to_string());
        let errors = TopicConfig::from_kafka_configs(&bad).unwrap_err();
        assert_eq!(errors.len(), 3);
        assert!(errors
            .iter()
            .any(|(k, m)| k == "flavour" && m.contains("Unknown topic config")));
    }
}
