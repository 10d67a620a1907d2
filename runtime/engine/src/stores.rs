//! The runtime's internal topics in the embedded log, with Kafka Connect's record formats
//! (JSON without schemas), so a restarted worker finds every connector, its target state and
//! its committed source offsets where it left them.
//!
//! - `connect-configs` (1 partition): `connector-<name>` -> `{"properties":{...}}` (tombstone
//!   on delete), `target-state-<name>` -> `{"state":..,"state.v2":..}`;
//! - `connect-offsets` (5 partitions, key-hashed): `["<name>",{<source partition>}]` ->
//!   `{<source offset>}` (null = reset); written only inside a source task's log transaction,
//!   together with the records the offset covers;
//! - `connect-status` (5 partitions): `status-connector-<name>` / `status-task-<name>-<id>`.
//!
//! All three are compacted. Readers use read_committed, so an offset is only ever loaded if the
//! records it covers were committed with it.

use std::collections::BTreeMap;

use headwater_api::{OffsetMap, Properties};
use headwater_log::batch::{BatchBuilder, Compression, ProducerFields};
use headwater_log::{partition_for_key, Isolation, Log, TopicConfig};
use serde_json::{json, Value as Json};

use crate::error::EngineError;
use crate::model::TargetState;

pub const CONFIG_TOPIC: &str = "connect-configs";
pub const OFFSETS_TOPIC: &str = "connect-offsets";
pub const STATUS_TOPIC: &str = "connect-status";
pub const OFFSETS_PARTITIONS: u32 = 5;
pub const STATUS_PARTITIONS: u32 = 5;

/// A connector as stored in the config topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredConnector {
    pub config: Properties,
    pub target: TargetState,
}

/// `(connector name, source partition)` -> committed source offset.
pub type OffsetsByConnector = BTreeMap<String, Vec<(OffsetMap, OffsetMap)>>;

/// A record's key and (absent for a tombstone) value.
type KeyValue = (Vec<u8>, Option<Vec<u8>>);

/// Access to the three internal topics.
#[derive(Clone)]
pub struct InternalTopics {
    log: Log,
}

impl InternalTopics {
    /// Creates the topics if they are missing.
    pub fn open(log: Log) -> Result<Self, EngineError> {
        log.ensure_topic(CONFIG_TOPIC, 1, TopicConfig::compacted())?;
        log.ensure_topic(OFFSETS_TOPIC, OFFSETS_PARTITIONS, TopicConfig::compacted())?;
        log.ensure_topic(STATUS_TOPIC, STATUS_PARTITIONS, TopicConfig::compacted())?;
        Ok(InternalTopics { log })
    }

    pub fn log(&self) -> &Log {
        &self.log
    }

    /// Every committed `(key, value)` of a topic, partition by partition, in offset order.
    fn read_all(&self, topic: &str) -> Result<Vec<KeyValue>, EngineError> {
        let mut out = Vec::new();
        let partitions = self.log.partition_count(topic).unwrap_or(0);
        for p in 0..partitions {
            let mut offset = self.log.earliest_offset(topic, p)?;
            loop {
                let r = self
                    .log
                    .read_with(topic, p, offset, 1 << 20, Isolation::ReadCommitted)?;
                let Some(next) = r.next_offset()? else {
                    break;
                };
                for rec in r.records(offset)? {
                    if let Some(key) = rec.key {
                        out.push((key, rec.value));
                    }
                }
                offset = next;
            }
        }
        Ok(out)
    }

    /// Connectors with their configs and target states.
    pub fn load_connectors(&self) -> Result<BTreeMap<String, StoredConnector>, EngineError> {
        let mut configs: BTreeMap<String, Properties> = BTreeMap::new();
        let mut targets: BTreeMap<String, TargetState> = BTreeMap::new();
        for (key, value) in self.read_all(CONFIG_TOPIC)? {
            let key = String::from_utf8_lossy(&key).into_owned();
            let value: Option<Json> = value.and_then(|v| serde_json::from_slice(&v).ok());
            if let Some(name) = key.strip_prefix("connector-") {
                match value
                    .as_ref()
                    .and_then(|v| v.get("properties"))
                    .and_then(Json::as_object)
                {
                    Some(props) => {
                        let props = props
                            .iter()
                            .map(|(k, v)| {
                                (
                                    k.clone(),
                                    v.as_str().map_or_else(|| v.to_string(), str::to_owned),
                                )
                            })
                            .collect();
                        configs.insert(name.to_owned(), props);
                    }
                    None => {
                        configs.remove(name);
                        targets.remove(name);
                    }
                }
            } else if let Some(name) = key.strip_prefix("target-state-") {
                let state = value
                    .as_ref()
                    .and_then(|v| v.get("state.v2").or_else(|| v.get("state")))
                    .and_then(Json::as_str)
                    .and_then(|s| match s {
                        "STARTED" => Some(TargetState::Started),
                        "PAUSED" => Some(TargetState::Paused),
                        "STOPPED" => Some(TargetState::Stopped),
                        _ => None,
                    });
                match state {
                    Some(s) => {
                        targets.insert(name.to_owned(), s);
                    }
                    None => {
                        targets.remove(name);
                    }
                }
            }
        }
        Ok(configs
            .into_iter()
            .map(|(name, config)| {
                let target = targets.get(&name).copied().unwrap_or(TargetState::Started);
                (name, StoredConnector { config, target })
            })
            .collect())
    }

    /// Committed source offsets of every connector.
    pub fn load_offsets(&self) -> Result<OffsetsByConnector, EngineError> {
        let mut latest: BTreeMap<(String, String), (OffsetMap, Option<OffsetMap>)> =
            BTreeMap::new();
        for (key, value) in self.read_all(OFFSETS_TOPIC)? {
            let Ok(Json::Array(parts)) = serde_json::from_slice::<Json>(&key) else {
                continue;
            };
            let (Some(Json::String(name)), Some(partition)) = (parts.first(), parts.get(1)) else {
                continue;
            };
            let Ok(partition_map) = serde_json::from_value::<OffsetMap>(partition.clone()) else {
                continue;
            };
            let offset = value
                .and_then(|v| serde_json::from_slice::<Option<OffsetMap>>(&v).ok())
                .flatten();
            let pkey = serde_json::to_string(&partition_map).unwrap_or_default();
            latest.insert((name.clone(), pkey), (partition_map, offset));
        }
        let mut out: OffsetsByConnector = BTreeMap::new();
        for ((name, _), (partition, offset)) in latest {
            if let Some(offset) = offset {
                out.entry(name).or_default().push((partition, offset));
            }
        }
        Ok(out)
    }

    /// Writes one record to a topic and waits until it is durable.
    async fn write(
        &self,
        topic: &str,
        partitions: u32,
        key: &str,
        value: Option<Json>,
    ) -> Result<(), EngineError> {
        let partition = partition_for_key(key.as_bytes(), partitions);
        let mut b = BatchBuilder::new(Compression::None, ProducerFields::default());
        let value_bytes = value.map(|v| v.to_string().into_bytes());
        b.append(
            headwater_log::log::now_ms(),
            Some(key.as_bytes()),
            value_bytes.as_deref(),
            &[],
        );
        self.log.append_builder(topic, partition, b)?;
        self.log.commit().durable().await?;
        Ok(())
    }

    pub async fn put_connector(&self, name: &str, config: &Properties) -> Result<(), EngineError> {
        self.write(
            CONFIG_TOPIC,
            1,
            &format!("connector-{name}"),
            Some(json!({ "properties": config })),
        )
        .await
    }

    pub async fn delete_connector(&self, name: &str) -> Result<(), EngineError> {
        self.write(CONFIG_TOPIC, 1, &format!("target-state-{name}"), None)
            .await?;
        self.write(CONFIG_TOPIC, 1, &format!("connector-{name}"), None)
            .await
    }

    pub async fn put_target_state(
        &self,
        name: &str,
        target: TargetState,
    ) -> Result<(), EngineError> {
        let v1 = if target == TargetState::Stopped {
            "PAUSED"
        } else {
            target.name()
        };
        self.write(
            CONFIG_TOPIC,
            1,
            &format!("target-state-{name}"),
            Some(json!({ "state": v1, "state.v2": target.name() })),
        )
        .await
    }

    /// Records a status (best effort for observers; the engine's memory is authoritative).
    pub async fn put_status(
        &self,
        key: &str,
        state: &str,
        trace: Option<&str>,
        worker_id: &str,
    ) -> Result<(), EngineError> {
        self.write(
            STATUS_TOPIC,
            STATUS_PARTITIONS,
            key,
            Some(
                json!({ "state": state, "trace": trace, "worker_id": worker_id, "generation": 0 }),
            ),
        )
        .await
    }

    /// Writes offsets outside a task (REST alter/reset; the connector must be stopped).
    /// `None` resets a partition.
    pub async fn put_offsets(
        &self,
        name: &str,
        entries: &[(OffsetMap, Option<OffsetMap>)],
    ) -> Result<(), EngineError> {
        let mut txn = self.log.begin_transaction()?;
        for (partition, offset) in entries {
            let (p, b) = offsets_batch(name, partition, offset.as_ref(), txn.producer_fields());
            txn.append_builder(OFFSETS_TOPIC, p, b)?;
        }
        txn.commit_async().await?;
        Ok(())
    }
}

/// The offsets-topic key of a connector's source partition: `["name",{...}]`.
pub fn offset_key(name: &str, partition: &OffsetMap) -> String {
    json!([name, partition]).to_string()
}

/// A one-record batch for the offsets topic and the partition it goes to.
pub fn offsets_batch(
    name: &str,
    partition: &OffsetMap,
    offset: Option<&OffsetMap>,
    producer: ProducerFields,
) -> (u32, BatchBuilder) {
    let key = offset_key(name, partition);
    let p = partition_for_key(key.as_bytes(), OFFSETS_PARTITIONS);
    let value = offset.map(|o| serde_json::to_vec(o).unwrap_or_default());
    let mut b = BatchBuilder::new(Compression::None, producer);
    b.append(
        headwater_log::log::now_ms(),
        Some(key.as_bytes()),
        value.as_deref(),
        &[],
    );
    (p, b)
}
