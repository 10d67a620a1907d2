//! Committed consumer-group offsets, kept in the log's compacted `__consumer_offsets` topic.
//!
//! Every commit appends one batch to partition 0 of the topic and is acknowledged only after
//! that batch is durable (a log commit round), so an acknowledged commit survives a crash.
//! Records are keyed by `(group, topic, partition)` (JSON key) with a JSON value; deleting a
//! topic writes tombstones (null values). On start the whole topic is replayed into memory,
//! the newest record per key winning, exactly as compaction would leave it.
//!
//! The format is Headwater's own (JSON), not Kafka's binary offset-commit schema: tools that
//! parse Kafka's `__consumer_offsets` records do not understand it (docs/kafka-protocol.md).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use headwater_log::{
    BatchBuilder, Compression, Isolation, Log, LogError, ProducerFields, TopicConfig,
};
use serde::{Deserialize, Serialize};

/// The internal topic holding committed offsets.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// One committed offset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Committed {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    pub commit_timestamp: i64,
}

#[derive(Serialize, Deserialize)]
struct Key {
    group: String,
    topic: String,
    partition: i32,
}

type GroupOffsets = BTreeMap<(String, i32), Committed>;

/// The offsets of every group, in memory and in the log.
#[derive(Clone)]
pub struct OffsetStore {
    log: Log,
    groups: Arc<Mutex<BTreeMap<String, GroupOffsets>>>,
}

impl OffsetStore {
    /// Creates the topic if needed and replays it.
    pub fn open(log: &Log) -> Result<OffsetStore, LogError> {
        log.ensure_topic(OFFSETS_TOPIC, 1, TopicConfig::compacted())?;
        let mut groups: BTreeMap<String, GroupOffsets> = BTreeMap::new();
        let mut offset = log.earliest_offset(OFFSETS_TOPIC, 0)?;
        let end = log.latest_offset(OFFSETS_TOPIC, 0)?;
        while offset < end {
            let read = log.read_with(
                OFFSETS_TOPIC,
                0,
                offset,
                1 << 20,
                Isolation::ReadUncommitted,
            )?;
            let Some(next) = read.next_offset()? else {
                break;
            };
            for record in read.records(offset)? {
                let Some(key) = record
                    .key
                    .as_deref()
                    .and_then(|k| serde_json::from_slice::<Key>(k).ok())
                else {
                    tracing::warn!(
                        offset = record.offset,
                        "skipping an unreadable key in {OFFSETS_TOPIC}"
                    );
                    continue;
                };
                let value = record
                    .value
                    .as_deref()
                    .and_then(|v| serde_json::from_slice::<Committed>(v).ok());
                let group = groups.entry(key.group).or_default();
                match value {
                    Some(v) => {
                        group.insert((key.topic, key.partition), v);
                    }
                    None => {
                        group.remove(&(key.topic, key.partition));
                    }
                }
            }
            offset = next.max(offset + 1);
        }
        groups.retain(|_, g| !g.is_empty());
        Ok(OffsetStore {
            log: log.clone(),
            groups: Arc::new(Mutex::new(groups)),
        })
    }

    /// Stores commits of `group` durably. `None` removes an offset.
    pub async fn commit(
        &self,
        group: &str,
        entries: Vec<((String, i32), Option<Committed>)>,
    ) -> Result<(), LogError> {
        if entries.is_empty() {
            return Ok(());
        }
        {
            let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
            self.append_locked(&mut groups, group, entries)?;
        }
        self.log.commit().durable().await
    }

    /// Appends `entries` of `group` to the log and applies them to `groups` (the locked
    /// memory), so memory follows the log's order.
    fn append_locked(
        &self,
        groups: &mut BTreeMap<String, GroupOffsets>,
        group: &str,
        entries: Vec<((String, i32), Option<Committed>)>,
    ) -> Result<(), LogError> {
        let mut builder = BatchBuilder::new(Compression::None, ProducerFields::default());
        let now = headwater_log::log::now_ms();
        for ((topic, partition), value) in &entries {
            let key = serde_json::to_vec(&Key {
                group: group.to_owned(),
                topic: topic.clone(),
                partition: *partition,
            })
            .unwrap_or_default();
            let value = value
                .as_ref()
                .map(|v| serde_json::to_vec(v).unwrap_or_default());
            builder.append(now, Some(&key), value.as_deref(), &[]);
        }
        self.log.append_builder(OFFSETS_TOPIC, 0, builder)?;
        let g = groups.entry(group.to_owned()).or_default();
        for (key, value) in entries {
            match value {
                Some(v) => {
                    g.insert(key, v);
                }
                None => {
                    g.remove(&key);
                }
            }
        }
        if g.is_empty() {
            groups.remove(group);
        }
        Ok(())
    }

    /// The committed offset of one partition.
    pub fn get(&self, group: &str, topic: &str, partition: i32) -> Option<Committed> {
        let groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        groups
            .get(group)
            .and_then(|g| g.get(&(topic.to_owned(), partition)))
            .cloned()
    }

    /// Every committed offset of a group.
    pub fn all(&self, group: &str) -> Vec<((String, i32), Committed)> {
        let groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        groups
            .get(group)
            .map(|g| g.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }

    /// Groups that have committed offsets.
    pub fn groups(&self) -> Vec<String> {
        let groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        groups.keys().cloned().collect()
    }

    /// The offsets that have expired at `now_ms` (Kafka's `offsets.retention.minutes`), by
    /// group: an offset expires `retention_ms` after the later of its commit and the last time
    /// its group had active members (`last_active_ms`; `None` for a group not seen active, such
    /// as one committing outside group management, whose offsets then expire one by one from
    /// their commits, as Kafka's do).
    pub fn expired(
        &self,
        now_ms: i64,
        retention_ms: i64,
        last_active_ms: impl Fn(&str) -> Option<i64>,
    ) -> Vec<(String, Vec<(String, i32)>)> {
        let groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for (group, offsets) in groups.iter() {
            let active = last_active_ms(group).unwrap_or(i64::MIN);
            let keys: Vec<(String, i32)> = offsets
                .iter()
                .filter(|(_, c)| {
                    now_ms.saturating_sub(c.commit_timestamp.max(active)) >= retention_ms
                })
                .map(|(k, _)| k.clone())
                .collect();
            if !keys.is_empty() {
                out.push((group.clone(), keys));
            }
        }
        out
    }

    /// Removes `keys` of `group` (expired offsets), except those committed after
    /// `expired_before_ms` (a commit racing the expiry keeps its offset). Returns how many
    /// were removed.
    pub async fn expire(
        &self,
        group: &str,
        keys: Vec<(String, i32)>,
        expired_before_ms: i64,
    ) -> Result<usize, LogError> {
        let removed = {
            let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
            let still_expired: Vec<((String, i32), Option<Committed>)> = match groups.get(group) {
                Some(offsets) => keys
                    .into_iter()
                    .filter(|k| {
                        offsets
                            .get(k)
                            .is_some_and(|c| c.commit_timestamp <= expired_before_ms)
                    })
                    .map(|k| (k, None))
                    .collect(),
                None => Vec::new(),
            };
            let removed = still_expired.len();
            if removed > 0 {
                self.append_locked(&mut groups, group, still_expired)?;
            }
            removed
        };
        if removed > 0 {
            self.log.commit().durable().await?;
        }
        Ok(removed)
    }

    /// Removes every offset of `topic` (after the topic was deleted).
    pub async fn forget_topic(&self, topic: &str) -> Result<(), LogError> {
        let per_group: Vec<(String, Vec<(String, i32)>)> = {
            let groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
            groups
                .iter()
                .map(|(g, offsets)| {
                    (
                        g.clone(),
                        offsets
                            .keys()
                            .filter(|(t, _)| t == topic)
                            .cloned()
                            .collect(),
                    )
                })
                .filter(|(_, keys): &(String, Vec<_>)| !keys.is_empty())
                .collect()
        };
        for (group, keys) in per_group {
            self.commit(&group, keys.into_iter().map(|k| (k, None)).collect())
                .await?;
        }
        Ok(())
    }

    /// Removes every offset of `group`.
    pub async fn forget_group(&self, group: &str) -> Result<(), LogError> {
        let keys: Vec<(String, i32)> = self.all(group).into_iter().map(|(k, _)| k).collect();
        self.commit(group, keys.into_iter().map(|k| (k, None)).collect())
            .await
    }
}
