//! The request handlers: one function per API, each turning a decoded request into its
//! response over the log, the group coordinator and the offset store.
//!
//! Invariants:
//! - this worker is the only broker: node [`ServerConfig::node_id`] leads every partition at
//!   leader epoch 0, with itself as the only replica and ISR member; it is advertised at the
//!   address the client connected to, so clients reach it however the listener is bound;
//! - Fetch returns the stored RecordBatch bytes as they are (no decoding, no re-encoding),
//!   never past the high watermark (read_uncommitted) or the last stable offset
//!   (read_committed), with the aborted transactions overlapping the range;
//! - Produce appends the client's batches as they are (only the base offset and the
//!   partition leader epoch, neither covered by the CRC, are set) and, for acks 1 and all,
//!   answers after they are durable (fsynced), which is stronger than a broker's acks=1;
//! - writes to internal topics and to topics a connector writes are refused, with
//!   `INVALID_TOPIC_EXCEPTION` and `TOPIC_AUTHORIZATION_FAILED` respectively and a message;
//! - topic ids are derived from the topic name (stable across restarts).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::FutureExt;
use headwater_log::{Isolation, Log, LogError, TopicConfig};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::find_coordinator_response::Coordinator as CoordinatorEntry;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, CreateTopicsRequest, CreateTopicsResponse,
    DeleteGroupsRequest, DeleteGroupsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    DescribeConfigsRequest, DescribeConfigsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    FetchRequest, FetchResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId,
    HeartbeatResponse, InitProducerIdRequest, InitProducerIdResponse, LeaveGroupRequest,
    LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse, ListOffsetsRequest,
    ListOffsetsResponse, MetadataRequest, MetadataResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse, ProduceRequest, ProduceResponse, ProducerId,
    SaslHandshakeResponse, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use kafka_protocol::ResponseError;
use uuid::Uuid;

use crate::codec::{encode_fetch_response, encode_response, Decoded, Request, SUPPORTED};
use crate::groups::{CommitCheck, Coordinator, JoinRequest};
use crate::offsets::{Committed, OffsetStore, OFFSETS_TOPIC};
use crate::server::{ServerConfig, TopicOwner};

/// What a handler knows about the connection.
pub struct ConnInfo {
    /// The local address the client connected to (advertised as the broker's address).
    pub host: String,
    pub port: i32,
    pub peer: SocketAddr,
}

/// Idempotent-producer state of one partition.
struct SequenceState {
    epoch: i16,
    last_sequence: i32,
    /// (first sequence, last sequence, base offset) of the latest batches, for duplicates.
    recent: VecDeque<(i32, i32, i64)>,
    /// The last produce request that used this state.
    last_used: Instant,
}

/// How long an idempotent producer's sequence state outlives its last produce request:
/// Kafka's `producer.id.expiration.ms` default. Every producer instance gets a new id
/// (InitProducerId), so without expiry each short-lived producer would leave its state behind
/// for good. A producer that comes back later is taken as a new one: its next sequence is
/// accepted as it comes, and retries of batches sent before the expiry are not recognised.
const PRODUCER_ID_EXPIRATION: Duration = Duration::from_secs(24 * 60 * 60);

/// How often produce requests look for expired producer state.
const SEQUENCE_SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// Idempotent producers' state per (producer id, topic, partition).
struct ProducerSequences {
    states: HashMap<(i64, String, i32), SequenceState>,
    swept_at: Instant,
}

impl ProducerSequences {
    fn new(now: Instant) -> Self {
        ProducerSequences {
            states: HashMap::new(),
            swept_at: now,
        }
    }

    /// Forgets the state of producers idle for `expiration` or longer; looks at most once per
    /// [`SEQUENCE_SWEEP_INTERVAL`].
    fn sweep(&mut self, now: Instant, expiration: Duration) {
        if now.saturating_duration_since(self.swept_at) < SEQUENCE_SWEEP_INTERVAL {
            return;
        }
        self.swept_at = now;
        self.states
            .retain(|_, s| now.saturating_duration_since(s.last_used) < expiration);
    }
}

/// Everything the handlers share.
pub struct Broker {
    pub(crate) log: Log,
    pub(crate) config: ServerConfig,
    pub(crate) groups: Coordinator,
    offsets: OffsetStore,
    owner: Option<TopicOwner>,
    sequences: Mutex<ProducerSequences>,
    /// Per group with committed offsets, when it was last seen with active members (ms).
    groups_last_active: Mutex<HashMap<String, i64>>,
    /// When this broker started (ms): group activity before it is not known, so no group is
    /// taken as inactive for longer than since then.
    pub(crate) started_ms: i64,
}

/// An error code and message for one topic or partition.
type Refusal = (ResponseError, String);

fn sb(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

fn tn(s: &str) -> TopicName {
    TopicName(sb(s))
}

/// The id of a topic: a version-4-shaped UUID derived from the name (FNV-1a, two seeds).
pub fn topic_id(name: &str) -> Uuid {
    let hash = |seed: u64| {
        let mut h = seed;
        for b in name.as_bytes() {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    };
    let hi = hash(0xcbf2_9ce4_8422_2325);
    let lo = hash(0x6c62_272e_07bb_0142);
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&hi.to_be_bytes());
    bytes[8..].copy_from_slice(&lo.to_be_bytes());
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    Uuid::from_bytes(bytes)
}

fn storage_error(topic: &str, partition: i32, err: &LogError) -> ResponseError {
    match err {
        LogError::UnknownTopic(_) | LogError::UnknownPartition { .. } => {
            ResponseError::UnknownTopicOrPartition
        }
        LogError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        other => {
            tracing::warn!(topic, partition, error = %other, "Kafka listener: log error");
            ResponseError::KafkaStorageError
        }
    }
}

impl Broker {
    pub fn new(
        log: Log,
        config: ServerConfig,
        owner: Option<TopicOwner>,
    ) -> Result<Broker, LogError> {
        let offsets = OffsetStore::open(&log)?;
        Ok(Broker {
            groups: Coordinator::new(config.initial_rebalance_delay),
            log,
            config,
            offsets,
            owner,
            sequences: Mutex::new(ProducerSequences::new(Instant::now())),
            groups_last_active: Mutex::new(HashMap::new()),
            started_ms: headwater_log::log::now_ms(),
        })
    }

    /// Notes, at `now_ms`, which groups with committed offsets have active members.
    pub(crate) fn note_active_groups(&self, now_ms: i64) {
        let with_offsets = self.offsets.groups();
        let mut last_active = self
            .groups_last_active
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        last_active.retain(|g, _| with_offsets.contains(g));
        for g in with_offsets {
            if self.groups.has_members(&g) {
                last_active.insert(g, now_ms);
            }
        }
    }

    /// Removes the committed offsets that expired at `now_ms` (Kafka's
    /// `offsets.retention.minutes`, [`ServerConfig::offsets_retention`]): an offset expires
    /// that long after the later of its commit and the last time its group was seen with
    /// active members, so a group in use keeps its offsets however long ago it committed them.
    /// Membership is not kept across restarts, so a group not seen since this broker started
    /// counts as active at the start: no offset goes sooner than Kafka, which keeps the time a
    /// group became empty, would remove it. Returns how many were removed.
    pub(crate) async fn expire_offsets(&self, now_ms: i64) -> usize {
        self.note_active_groups(now_ms);
        let retention_ms =
            i64::try_from(self.config.offsets_retention.as_millis()).unwrap_or(i64::MAX);
        let expiring = {
            let last_active = self
                .groups_last_active
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.offsets.expired(now_ms, retention_ms, |g| {
                Some(last_active.get(g).copied().unwrap_or(self.started_ms))
            })
        };
        let mut removed = 0;
        for (group, keys) in expiring {
            match self
                .offsets
                .expire(&group, keys, now_ms.saturating_sub(retention_ms))
                .await
            {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(group = %group, offsets = n, "committed offsets expired (offsets.retention.minutes)");
                    removed += n;
                }
                Err(err) => {
                    tracing::warn!(group = %group, error = %err, "Kafka listener: expiring committed offsets failed");
                }
            }
        }
        removed
    }

    fn is_internal(&self, topic: &str) -> bool {
        topic == OFFSETS_TOPIC || self.config.internal_topics.iter().any(|t| t == topic)
    }

    async fn owner_of(&self, topic: &str) -> Option<String> {
        match &self.owner {
            Some(f) => f(topic.to_owned()).await,
            None => None,
        }
    }

    fn topic_by_id(&self, id: Uuid) -> Option<String> {
        self.log.topics().into_iter().find(|t| topic_id(t) == id)
    }

    /// The answer to an unsupported version, where the protocol has one.
    pub fn unsupported(&self, d: &Decoded, key: ApiKey) -> Option<Bytes> {
        if key == ApiKey::ApiVersions {
            // Kafka answers an ApiVersions it cannot parse with a v0 response carrying
            // UNSUPPORTED_VERSION and the supported ranges, so the client can retry lower.
            let mut resp = self.api_versions();
            resp.error_code = ResponseError::UnsupportedVersion.code();
            return encode_response(ApiKey::ApiVersions, 0, d.correlation_id, &resp).ok();
        }
        None
    }

    /// Handles one decoded request: the response frame in pieces (written back to back), or
    /// `None` for requests without a response (acks=0).
    pub async fn handle(&self, d: Decoded, conn: &ConnInfo) -> anyhow::Result<Option<Vec<Bytes>>> {
        let crate::codec::Body::Request(request) = d.body else {
            anyhow::bail!("not a request");
        };
        let v = d.api_version;
        let c = d.correlation_id;
        let client_id = d.client_id.unwrap_or_default();
        fn enc<R: Encodable>(
            k: ApiKey,
            v: i16,
            c: i32,
            r: &R,
        ) -> anyhow::Result<Option<Vec<Bytes>>> {
            encode_response(k, v, c, r).map(|b| Some(vec![b]))
        }
        match *request {
            Request::ApiVersions(_) => enc(ApiKey::ApiVersions, v, c, &self.api_versions()),
            Request::Metadata(r) => enc(ApiKey::Metadata, v, c, &self.metadata(r, v, conn)),
            Request::Produce(r) => match self.produce(r, v).await {
                Some(resp) => enc(ApiKey::Produce, v, c, &resp),
                None => Ok(None),
            },
            Request::Fetch(r) => encode_fetch_response(v, c, self.fetch(r, v).await).map(Some),
            Request::ListOffsets(r) => enc(ApiKey::ListOffsets, v, c, &self.list_offsets(r, v)),
            Request::FindCoordinator(r) => enc(
                ApiKey::FindCoordinator,
                v,
                c,
                &self.find_coordinator(r, v, conn),
            ),
            Request::JoinGroup(r) => {
                let resp = self
                    .groups
                    .join(JoinRequest {
                        group_id: r.group_id.0.to_string(),
                        member_id: r.member_id.to_string(),
                        instance_id: r.group_instance_id.map(|s| s.to_string()),
                        client_id: client_id.clone(),
                        client_host: format!("/{}", conn.peer.ip()),
                        session_timeout_ms: r.session_timeout_ms,
                        rebalance_timeout_ms: if v == 0 {
                            r.session_timeout_ms
                        } else {
                            r.rebalance_timeout_ms
                        },
                        protocol_type: r.protocol_type.to_string(),
                        protocols: r
                            .protocols
                            .into_iter()
                            .map(|p| (p.name.to_string(), p.metadata))
                            .collect(),
                    })
                    .await;
                enc(ApiKey::JoinGroup, v, c, &resp)
            }
            Request::SyncGroup(r) => {
                let resp: SyncGroupResponse = self
                    .groups
                    .sync(
                        &r.group_id.0,
                        &r.member_id,
                        r.generation_id,
                        r.assignments
                            .into_iter()
                            .map(|a| (a.member_id.to_string(), a.assignment))
                            .collect(),
                    )
                    .await;
                enc(ApiKey::SyncGroup, v, c, &resp)
            }
            Request::Heartbeat(r) => {
                let mut resp = HeartbeatResponse::default();
                resp.error_code =
                    self.groups
                        .heartbeat(&r.group_id.0, &r.member_id, r.generation_id);
                enc(ApiKey::Heartbeat, v, c, &resp)
            }
            Request::LeaveGroup(r) => enc(ApiKey::LeaveGroup, v, c, &self.leave_group(r, v)),
            Request::OffsetCommit(r) => {
                enc(ApiKey::OffsetCommit, v, c, &self.offset_commit(r).await)
            }
            Request::OffsetFetch(r) => enc(ApiKey::OffsetFetch, v, c, &self.offset_fetch(r, v)),
            Request::DescribeGroups(r) => {
                enc(ApiKey::DescribeGroups, v, c, &self.describe_groups(r))
            }
            Request::ListGroups(r) => enc(ApiKey::ListGroups, v, c, &self.list_groups(r)),
            Request::DeleteGroups(r) => {
                enc(ApiKey::DeleteGroups, v, c, &self.delete_groups(r).await)
            }
            // With SASL users configured the connection loop answers these (see `sasl`);
            // here the listener has none.
            Request::SaslHandshake(_) => {
                let mut resp = SaslHandshakeResponse::default();
                resp.error_code = ResponseError::UnsupportedSaslMechanism.code();
                tracing::warn!(peer = %conn.peer, "Kafka listener: a client asked for SASL, but the listener has no SASL users (kafka_sasl_users)");
                enc(ApiKey::SaslHandshake, v, c, &resp)
            }
            Request::SaslAuthenticate(_) => {
                let mut resp = kafka_protocol::messages::SaslAuthenticateResponse::default();
                resp.error_code = ResponseError::IllegalSaslState.code();
                enc(ApiKey::SaslAuthenticate, v, c, &resp)
            }
            Request::CreateTopics(r) => enc(ApiKey::CreateTopics, v, c, &self.create_topics(r)),
            Request::DeleteTopics(r) => {
                enc(ApiKey::DeleteTopics, v, c, &self.delete_topics(r, v).await)
            }
            Request::InitProducerId(r) => {
                enc(ApiKey::InitProducerId, v, c, &self.init_producer_id(r))
            }
            Request::OffsetForLeaderEpoch(r) => enc(
                ApiKey::OffsetForLeaderEpoch,
                v,
                c,
                &self.offset_for_leader_epoch(r),
            ),
            Request::DescribeConfigs(r) => {
                enc(ApiKey::DescribeConfigs, v, c, &self.describe_configs(r))
            }
        }
    }

    pub fn api_versions(&self) -> ApiVersionsResponse {
        let mut resp = ApiVersionsResponse::default();
        resp.api_keys = SUPPORTED
            .iter()
            .map(|(k, min, max)| {
                let mut a = ApiVersion::default();
                a.api_key = *k as i16;
                a.min_version = *min;
                a.max_version = *max;
                a
            })
            .collect();
        resp
    }

    fn broker_entry(&self, conn: &ConnInfo) -> MetadataResponseBroker {
        let mut b = MetadataResponseBroker::default();
        b.node_id = BrokerId(self.config.node_id);
        b.host = sb(conn.host.clone());
        b.port = conn.port;
        b
    }

    fn describe_topic(&self, name: &str) -> MetadataResponseTopic {
        let mut t = MetadataResponseTopic::default();
        t.name = Some(tn(name));
        t.topic_id = topic_id(name);
        t.is_internal = name == OFFSETS_TOPIC;
        let count = self.log.partition_count(name).unwrap_or(0);
        t.partitions = (0..count as i32)
            .map(|i| {
                let mut p = MetadataResponsePartition::default();
                p.partition_index = i;
                p.leader_id = BrokerId(self.config.node_id);
                p.leader_epoch = 0;
                p.replica_nodes = vec![BrokerId(self.config.node_id)];
                p.isr_nodes = vec![BrokerId(self.config.node_id)];
                p
            })
            .collect();
        t
    }

    fn metadata(&self, req: MetadataRequest, v: i16, conn: &ConnInfo) -> MetadataResponse {
        let mut resp = MetadataResponse::default();
        resp.brokers = vec![self.broker_entry(conn)];
        resp.cluster_id = Some(sb(self.config.cluster_id.clone()));
        resp.controller_id = BrokerId(self.config.node_id);
        let wanted: Option<Vec<(Option<String>, Uuid)>> = match req.topics {
            None => None,
            Some(list) if v == 0 && list.is_empty() => None,
            Some(list) => Some(
                list.into_iter()
                    .map(|t| (t.name.map(|n| n.0.to_string()), t.topic_id))
                    .collect(),
            ),
        };
        let allow_create = v < 4 || req.allow_auto_topic_creation;
        resp.topics = match wanted {
            None => self
                .log
                .topics()
                .iter()
                .map(|t| self.describe_topic(t))
                .collect(),
            Some(list) => list
                .into_iter()
                .map(|(name, id)| {
                    let name = match name {
                        Some(n) => n,
                        None => match self.topic_by_id(id) {
                            Some(n) => n,
                            None => {
                                let mut t = MetadataResponseTopic::default();
                                t.topic_id = id;
                                t.error_code = ResponseError::UnknownTopicId.code();
                                return t;
                            }
                        },
                    };
                    if self.log.partition_count(&name).is_none() {
                        let created = allow_create
                            && self.config.auto_create_topics
                            && !self.is_internal(&name)
                            && match self.log.create_topic(
                                &name,
                                self.config.default_partitions.max(1),
                                TopicConfig::default(),
                            ) {
                                Ok(()) => {
                                    tracing::info!(topic = %name, partitions = self.config.default_partitions, "Kafka listener: auto-created a topic");
                                    true
                                }
                                Err(LogError::TopicExists(_)) => true,
                                Err(_) => false,
                            };
                        if !created {
                            let mut t = MetadataResponseTopic::default();
                            t.name = Some(tn(&name));
                            t.error_code = if headwater_log::log::validate_topic_name(&name)
                                .is_err()
                            {
                                ResponseError::InvalidTopicException.code()
                            } else {
                                ResponseError::UnknownTopicOrPartition.code()
                            };
                            return t;
                        }
                    }
                    self.describe_topic(&name)
                })
                .collect(),
        };
        resp
    }

    fn find_coordinator(
        &self,
        req: FindCoordinatorRequest,
        v: i16,
        conn: &ConnInfo,
    ) -> FindCoordinatorResponse {
        let mut resp = FindCoordinatorResponse::default();
        let (code, message) = if req.key_type == 0 {
            (0, None)
        } else {
            (
                ResponseError::InvalidRequest.code(),
                Some(sb(
                    "transactions are not supported by Headwater's Kafka listener",
                )),
            )
        };
        if v >= 4 {
            resp.coordinators = req
                .coordinator_keys
                .into_iter()
                .map(|key| {
                    let mut e = CoordinatorEntry::default();
                    e.key = key;
                    e.node_id = BrokerId(if code == 0 { self.config.node_id } else { -1 });
                    e.host = sb(if code == 0 {
                        conn.host.clone()
                    } else {
                        String::new()
                    });
                    e.port = if code == 0 { conn.port } else { -1 };
                    e.error_code = code;
                    e.error_message = message.clone();
                    e
                })
                .collect();
        } else {
            resp.error_code = code;
            resp.error_message = message;
            resp.node_id = BrokerId(if code == 0 { self.config.node_id } else { -1 });
            resp.host = sb(if code == 0 {
                conn.host.clone()
            } else {
                String::new()
            });
            resp.port = if code == 0 { conn.port } else { -1 };
        }
        resp
    }

    // ---- Produce -------------------------------------------------------------------------

    async fn produce(&self, req: ProduceRequest, _v: i16) -> Option<ProduceResponse> {
        let mut resp = ProduceResponse::default();
        let mut appended = false;
        let transactional = req.transactional_id.as_ref().is_some_and(|t| !t.is_empty());
        let mut pending: Vec<(usize, usize)> = Vec::new();
        for topic in req.topic_data {
            let name = if topic.name.0.is_empty() && !topic.topic_id.is_nil() {
                self.topic_by_id(topic.topic_id).unwrap_or_default()
            } else {
                topic.name.0.to_string()
            };
            let refusal: Option<(ResponseError, String)> = if transactional {
                Some((
                    ResponseError::TransactionalIdAuthorizationFailed,
                    "transactional producers are not supported by Headwater's Kafka listener"
                        .into(),
                ))
            } else if self.is_internal(&name) {
                Some((
                    ResponseError::InvalidTopicException,
                    format!(
                        "{name} is an internal topic of Headwater; it cannot be written by clients"
                    ),
                ))
            } else if let Some(connector) = self.owner_of(&name).await {
                Some((
                    ResponseError::TopicAuthorizationFailed,
                    format!("topic {name} is written by connector {connector}; Headwater accepts produce requests only for topics no connector writes"),
                ))
            } else if self.log.partition_count(&name).is_none() {
                Some((
                    if topic.name.0.is_empty() {
                        ResponseError::UnknownTopicId
                    } else {
                        ResponseError::UnknownTopicOrPartition
                    },
                    format!("unknown topic {name}"),
                ))
            } else {
                None
            };
            let mut t = TopicProduceResponse::default();
            t.name = topic.name.clone();
            t.topic_id = topic.topic_id;
            for p in topic.partition_data {
                let mut pr = PartitionProduceResponse::default();
                pr.index = p.index;
                pr.base_offset = -1;
                pr.log_append_time_ms = -1;
                pr.log_start_offset = -1;
                match &refusal {
                    Some((code, message)) => {
                        pr.error_code = code.code();
                        pr.error_message = Some(sb(message.clone()));
                    }
                    None => match self.append_records(&name, p.index, p.records) {
                        Ok(base) => {
                            pr.base_offset = base;
                            pr.log_start_offset = self
                                .log
                                .earliest_offset(&name, p.index as u32)
                                .unwrap_or(-1);
                            appended = true;
                            pending.push((resp.responses.len(), t.partition_responses.len()));
                        }
                        Err((code, message)) => {
                            pr.error_code = code.code();
                            pr.error_message = Some(sb(message));
                        }
                    },
                }
                t.partition_responses.push(pr);
            }
            resp.responses.push(t);
        }
        if req.acks == 0 {
            if appended {
                // Flushed in the next round; nobody waits for it.
                drop(self.log.commit());
            }
            return None;
        }
        if appended {
            if let Err(err) = self.log.commit().durable().await {
                tracing::warn!(error = %err, "Kafka listener: produce could not be made durable");
                for (ti, pi) in pending {
                    let pr = &mut resp.responses[ti].partition_responses[pi];
                    pr.error_code = ResponseError::KafkaStorageError.code();
                    pr.error_message = Some(sb(err.to_string()));
                    pr.base_offset = -1;
                }
            }
        }
        Some(resp)
    }

    /// Validates and appends the batches of one partition; returns the first base offset.
    fn append_records(
        &self,
        topic: &str,
        partition: i32,
        records: Option<Bytes>,
    ) -> Result<i64, (ResponseError, String)> {
        let Some(records) = records.filter(|r| !r.is_empty()) else {
            return Err((ResponseError::InvalidRecord, "no records".into()));
        };
        let count = self.log.partition_count(topic).unwrap_or(0);
        if partition < 0 || partition as u32 >= count {
            return Err((
                ResponseError::UnknownTopicOrPartition,
                format!("topic {topic} has no partition {partition}"),
            ));
        }
        let mut batches = Vec::new();
        let mut pos = 0;
        while pos < records.len() {
            let rest = &records[pos..];
            if rest.len() > 16 && rest[16] != 2 {
                return Err((
                    ResponseError::UnsupportedForMessageFormat,
                    format!(
                        "record batch magic {} (only v2 batches are accepted)",
                        rest[16]
                    ),
                ));
            }
            let header = headwater_log::batch::verify(rest)
                .map_err(|e| (ResponseError::CorruptMessage, e.to_string()))?;
            if header.is_control() {
                return Err((
                    ResponseError::InvalidRecord,
                    "control batches cannot be produced".into(),
                ));
            }
            if header.is_transactional() {
                return Err((
                    ResponseError::TransactionalIdAuthorizationFailed,
                    "transactional batches are not supported by Headwater's Kafka listener".into(),
                ));
            }
            batches.push((pos, header));
            pos += header.total_size();
        }
        let mut sequences = self.sequences.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        sequences.sweep(now, PRODUCER_ID_EXPIRATION);
        let sequences = &mut sequences.states;
        let mut first_base = None;
        for (pos, header) in batches {
            let last_sequence = header.base_sequence.wrapping_add(header.last_offset_delta);
            let key = (header.producer_id, topic.to_owned(), partition);
            let idempotent = header.producer_id >= 0 && header.base_sequence >= 0;
            if idempotent {
                if let Some(state) = sequences.get(&key) {
                    if header.producer_epoch < state.epoch {
                        return Err((
                            ResponseError::InvalidProducerEpoch,
                            format!(
                                "producer epoch {} is older than {}",
                                header.producer_epoch, state.epoch
                            ),
                        ));
                    }
                    if header.producer_epoch == state.epoch {
                        if let Some(&(_, _, base)) = state
                            .recent
                            .iter()
                            .find(|(f, l, _)| *f == header.base_sequence && *l == last_sequence)
                        {
                            // A retry of a batch already stored: acknowledge it again.
                            first_base.get_or_insert(base);
                            continue;
                        }
                        let expected = if state.last_sequence == i32::MAX {
                            0
                        } else {
                            state.last_sequence + 1
                        };
                        if header.base_sequence != expected {
                            return Err((
                                ResponseError::OutOfOrderSequenceNumber,
                                format!(
                                    "sequence {} but {} expected",
                                    header.base_sequence, expected
                                ),
                            ));
                        }
                    } else if header.base_sequence != 0 {
                        return Err((
                            ResponseError::OutOfOrderSequenceNumber,
                            format!(
                                "a new producer epoch must start at sequence 0, not {}",
                                header.base_sequence
                            ),
                        ));
                    }
                }
            }
            let mut bytes = records[pos..pos + header.total_size()].to_vec();
            bytes[12..16].copy_from_slice(&0i32.to_be_bytes());
            let result = self
                .log
                .append(topic, partition as u32, bytes)
                .map_err(|e| (storage_error(topic, partition, &e), e.to_string()))?;
            first_base.get_or_insert(result.base_offset);
            if idempotent {
                let state = sequences.entry(key).or_insert(SequenceState {
                    epoch: header.producer_epoch,
                    last_sequence: -1,
                    recent: VecDeque::new(),
                    last_used: now,
                });
                state.last_used = now;
                if state.epoch != header.producer_epoch {
                    state.epoch = header.producer_epoch;
                    state.recent.clear();
                }
                state.last_sequence = last_sequence;
                state
                    .recent
                    .push_back((header.base_sequence, last_sequence, result.base_offset));
                if state.recent.len() > 5 {
                    state.recent.pop_front();
                }
            }
        }
        first_base.ok_or((ResponseError::InvalidRecord, "no records".into()))
    }

    fn init_producer_id(&self, req: InitProducerIdRequest) -> InitProducerIdResponse {
        let mut resp = InitProducerIdResponse::default();
        resp.producer_id = ProducerId(-1);
        resp.producer_epoch = -1;
        if req.transactional_id.as_ref().is_some_and(|t| !t.is_empty()) {
            resp.error_code = ResponseError::TransactionalIdAuthorizationFailed.code();
            return resp;
        }
        match self.log.begin_transaction() {
            // An id from the log's allocator (unique for the life of the log); the empty
            // transaction itself is dropped without writing anything.
            Ok(txn) => {
                resp.producer_id = ProducerId(txn.producer_id());
                resp.producer_epoch = 0;
            }
            Err(err) => {
                tracing::warn!(error = %err, "Kafka listener: cannot allocate a producer id");
                resp.error_code = ResponseError::KafkaStorageError.code();
            }
        }
        resp
    }

    // ---- Fetch ---------------------------------------------------------------------------

    async fn fetch(&self, req: FetchRequest, v: i16) -> FetchResponse {
        let isolation = if req.isolation_level == 1 {
            Isolation::ReadCommitted
        } else {
            Isolation::ReadUncommitted
        };
        let max_wait = Duration::from_millis(req.max_wait_ms.max(0) as u64);
        let deadline = Instant::now() + max_wait;
        let min_bytes = req.min_bytes.max(0) as usize;
        let names: Vec<Option<String>> = req
            .topics
            .iter()
            .map(|t| {
                if v >= 13 {
                    self.topic_by_id(t.topic_id)
                } else {
                    Some(t.topic.0.to_string())
                }
            })
            .collect();
        loop {
            let (resp, bytes, bounds, errors) = self.fetch_once(&req, &names, isolation);
            let now = Instant::now();
            if req.max_wait_ms <= 0
                || bytes >= min_bytes
                || errors
                || now >= deadline
                || bounds.is_empty()
            {
                return resp;
            }
            let remaining = deadline - now;
            let waits = bounds.into_iter().map(|(topic, partition, bound)| {
                let log = self.log.clone();
                async move {
                    let _ = log
                        .wait_for(&topic, partition, bound, remaining, isolation)
                        .await;
                }
                .boxed()
            });
            let _ = tokio::time::timeout(remaining, futures_util::future::select_all(waits)).await;
        }
    }

    /// One pass over the requested partitions: the response, its record bytes, the
    /// (topic, partition, visible end) to wait on, and whether any partition had an error.
    #[allow(clippy::type_complexity)]
    fn fetch_once(
        &self,
        req: &FetchRequest,
        names: &[Option<String>],
        isolation: Isolation,
    ) -> (FetchResponse, usize, Vec<(String, u32, i64)>, bool) {
        let mut resp = FetchResponse::default();
        let mut total = 0usize;
        let mut budget = if req.max_bytes > 0 {
            req.max_bytes as usize
        } else {
            usize::MAX
        };
        let mut bounds = Vec::new();
        let mut errors = false;
        for (topic, name) in req.topics.iter().zip(names) {
            let mut t = FetchableTopicResponse::default();
            t.topic = topic.topic.clone();
            t.topic_id = topic.topic_id;
            for p in &topic.partitions {
                let mut pd = PartitionData::default();
                pd.partition_index = p.partition;
                pd.high_watermark = -1;
                pd.last_stable_offset = -1;
                pd.log_start_offset = -1;
                pd.preferred_read_replica = BrokerId(-1);
                let Some(name) = name else {
                    pd.error_code = ResponseError::UnknownTopicId.code();
                    errors = true;
                    t.partitions.push(pd);
                    continue;
                };
                let partition = p.partition.max(0) as u32;
                if p.partition < 0 {
                    pd.error_code = ResponseError::UnknownTopicOrPartition.code();
                    errors = true;
                    t.partitions.push(pd);
                    continue;
                }
                let limit = (p.partition_max_bytes.max(0) as usize).min(budget);
                if limit == 0 && total > 0 {
                    // Out of response budget: report the partition's offsets without data.
                    match self.log.latest_offset(name, partition) {
                        Ok(hw) => {
                            pd.high_watermark = hw;
                            pd.last_stable_offset =
                                self.log.last_stable_offset(name, partition).unwrap_or(hw);
                            pd.log_start_offset =
                                self.log.earliest_offset(name, partition).unwrap_or(0);
                            pd.records = Some(Bytes::new());
                        }
                        Err(e) => {
                            pd.error_code = storage_error(name, p.partition, &e).code();
                            errors = true;
                        }
                    }
                    t.partitions.push(pd);
                    continue;
                }
                match self
                    .log
                    .read_with(name, partition, p.fetch_offset, limit.max(1), isolation)
                {
                    Ok(r) => {
                        pd.high_watermark = r.high_watermark;
                        pd.last_stable_offset = r.last_stable_offset;
                        pd.log_start_offset = r.log_start_offset;
                        if isolation == Isolation::ReadCommitted {
                            pd.aborted_transactions = Some(
                                r.aborted
                                    .iter()
                                    .map(|a| {
                                        let mut at = AbortedTransaction::default();
                                        at.producer_id = ProducerId(a.producer_id);
                                        at.first_offset = a.first_offset;
                                        at
                                    })
                                    .collect(),
                            );
                        }
                        let visible_end = match isolation {
                            Isolation::ReadCommitted => r.last_stable_offset,
                            Isolation::ReadUncommitted => r.high_watermark,
                        };
                        bounds.push((name.clone(), partition, visible_end.max(p.fetch_offset)));
                        total += r.bytes.len();
                        budget = budget.saturating_sub(r.bytes.len());
                        pd.records = Some(Bytes::from(r.bytes));
                    }
                    Err(LogError::OffsetOutOfRange {
                        log_start, log_end, ..
                    }) => {
                        pd.error_code = ResponseError::OffsetOutOfRange.code();
                        pd.high_watermark = log_end;
                        pd.last_stable_offset = self
                            .log
                            .last_stable_offset(name, partition)
                            .unwrap_or(log_end);
                        pd.log_start_offset = log_start;
                        errors = true;
                    }
                    Err(e) => {
                        pd.error_code = storage_error(name, p.partition, &e).code();
                        errors = true;
                    }
                }
                t.partitions.push(pd);
            }
            resp.responses.push(t);
        }
        (resp, total, bounds, errors)
    }

    fn list_offsets(&self, req: ListOffsetsRequest, v: i16) -> ListOffsetsResponse {
        let committed = req.isolation_level == 1;
        let mut resp = ListOffsetsResponse::default();
        for topic in req.topics {
            let name = topic.name.0.to_string();
            let mut t = ListOffsetsTopicResponse::default();
            t.name = topic.name.clone();
            for p in topic.partitions {
                let mut pr = ListOffsetsPartitionResponse::default();
                pr.partition_index = p.partition_index;
                pr.timestamp = -1;
                pr.offset = -1;
                if v >= 4 {
                    pr.leader_epoch = 0;
                }
                let partition = p.partition_index.max(0) as u32;
                let result: Result<Option<(i64, i64)>, LogError> = if p.partition_index < 0 {
                    Err(LogError::UnknownTopic(name.clone()))
                } else {
                    match p.timestamp {
                        // Earliest (-2), earliest local (-4), earliest tiered (-5).
                        -2 | -4 | -5 => self
                            .log
                            .earliest_offset(&name, partition)
                            .map(|o| Some((o, -1))),
                        -1 if committed => self
                            .log
                            .last_stable_offset(&name, partition)
                            .map(|o| Some((o, -1))),
                        -1 => self
                            .log
                            .latest_offset(&name, partition)
                            .map(|o| Some((o, -1))),
                        ts if ts >= 0 => {
                            let limit = if committed {
                                self.log.last_stable_offset(&name, partition)
                            } else {
                                self.log.latest_offset(&name, partition)
                            };
                            limit.and_then(|limit| {
                                self.log
                                    .offset_for_timestamp(&name, partition, ts)
                                    .map(|found| found.filter(|(o, _)| *o < limit))
                            })
                        }
                        _ => {
                            pr.error_code = ResponseError::InvalidRequest.code();
                            Ok(None)
                        }
                    }
                };
                match result {
                    Ok(Some((offset, ts))) => {
                        pr.offset = offset;
                        pr.timestamp = ts;
                    }
                    Ok(None) => {}
                    Err(e) => pr.error_code = storage_error(&name, p.partition_index, &e).code(),
                }
                t.partitions.push(pr);
            }
            resp.topics.push(t);
        }
        resp
    }

    fn offset_for_leader_epoch(
        &self,
        req: OffsetForLeaderEpochRequest,
    ) -> OffsetForLeaderEpochResponse {
        let mut resp = OffsetForLeaderEpochResponse::default();
        for topic in req.topics {
            let mut t = OffsetForLeaderTopicResult::default();
            t.topic = topic.topic.clone();
            for p in topic.partitions {
                let mut e = EpochEndOffset::default();
                e.partition = p.partition;
                match self
                    .log
                    .latest_offset(&topic.topic.0, p.partition.max(0) as u32)
                {
                    Ok(hw) if p.partition >= 0 => {
                        // Every batch is written at leader epoch 0.
                        e.leader_epoch = 0;
                        e.end_offset = hw;
                    }
                    _ => {
                        e.error_code = ResponseError::UnknownTopicOrPartition.code();
                        e.leader_epoch = -1;
                        e.end_offset = -1;
                    }
                }
                t.partitions.push(e);
            }
            resp.topics.push(t);
        }
        resp
    }

    // ---- Groups --------------------------------------------------------------------------

    fn leave_group(&self, req: LeaveGroupRequest, v: i16) -> LeaveGroupResponse {
        let mut resp = LeaveGroupResponse::default();
        if v < 3 {
            let codes = self
                .groups
                .leave(&req.group_id.0, &[(req.member_id.to_string(), None)]);
            resp.error_code = codes.first().copied().unwrap_or(0);
            return resp;
        }
        let members: Vec<(String, Option<String>)> = req
            .members
            .iter()
            .map(|m| {
                (
                    m.member_id.to_string(),
                    m.group_instance_id.as_ref().map(|s| s.to_string()),
                )
            })
            .collect();
        let codes = self.groups.leave(&req.group_id.0, &members);
        resp.members = req
            .members
            .into_iter()
            .zip(codes)
            .map(|(m, code)| {
                let mut r = MemberResponse::default();
                r.member_id = m.member_id;
                r.group_instance_id = m.group_instance_id;
                r.error_code = code;
                r
            })
            .collect();
        resp
    }

    async fn offset_commit(&self, req: OffsetCommitRequest) -> OffsetCommitResponse {
        let group = req.group_id.0.to_string();
        let check =
            self.groups
                .check_commit(&group, &req.member_id, req.generation_id_or_member_epoch);
        let group_error = match check {
            CommitCheck::Ok if group.is_empty() => Some(ResponseError::InvalidGroupId),
            CommitCheck::Ok => None,
            CommitCheck::Error(e) => Some(e),
        };
        let now = headwater_log::log::now_ms();
        let mut entries = Vec::new();
        let mut resp = OffsetCommitResponse::default();
        for topic in &req.topics {
            let name = topic.name.0.to_string();
            let count = self.log.partition_count(&name);
            let mut t = OffsetCommitResponseTopic::default();
            t.name = topic.name.clone();
            for p in &topic.partitions {
                let mut pr = OffsetCommitResponsePartition::default();
                pr.partition_index = p.partition_index;
                pr.error_code = if let Some(e) = group_error {
                    e.code()
                } else if count
                    .is_none_or(|c| p.partition_index < 0 || p.partition_index as u32 >= c)
                {
                    ResponseError::UnknownTopicOrPartition.code()
                } else if p
                    .committed_metadata
                    .as_ref()
                    .is_some_and(|m| m.len() > 4096)
                {
                    ResponseError::OffsetMetadataTooLarge.code()
                } else {
                    entries.push((
                        (name.clone(), p.partition_index),
                        Some(Committed {
                            offset: p.committed_offset,
                            leader_epoch: p.committed_leader_epoch,
                            metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                            commit_timestamp: now,
                        }),
                    ));
                    0
                };
                t.partitions.push(pr);
            }
            resp.topics.push(t);
        }
        if let Err(err) = self.offsets.commit(&group, entries).await {
            tracing::warn!(group = %group, error = %err, "Kafka listener: offset commit failed");
            for t in &mut resp.topics {
                for p in &mut t.partitions {
                    if p.error_code == 0 {
                        p.error_code = ResponseError::UnknownServerError.code();
                    }
                }
            }
        }
        resp
    }

    fn committed_partition(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
    ) -> (i64, i32, Option<String>) {
        match self.offsets.get(group, topic, partition) {
            Some(c) => (c.offset, c.leader_epoch, c.metadata),
            None => (-1, -1, Some(String::new())),
        }
    }

    fn offset_fetch(&self, req: OffsetFetchRequest, v: i16) -> OffsetFetchResponse {
        let mut resp = OffsetFetchResponse::default();
        if v < 8 {
            let group = req.group_id.0.to_string();
            resp.topics = self
                .fetch_group_offsets(
                    &group,
                    req.topics.map(|ts| {
                        ts.into_iter()
                            .map(|t| (t.name.0.to_string(), t.partition_indexes))
                            .collect()
                    }),
                )
                .into_iter()
                .map(|(topic, parts)| {
                    let mut t = OffsetFetchResponseTopic::default();
                    t.name = tn(&topic);
                    t.partitions = parts
                        .into_iter()
                        .map(|(p, (offset, epoch, metadata))| {
                            let mut e = OffsetFetchResponsePartition::default();
                            e.partition_index = p;
                            e.committed_offset = offset;
                            e.committed_leader_epoch = epoch;
                            e.metadata = metadata.map(sb);
                            e
                        })
                        .collect();
                    t
                })
                .collect();
            return resp;
        }
        resp.groups = req
            .groups
            .into_iter()
            .map(|g| {
                let group = g.group_id.0.to_string();
                let mut rg = OffsetFetchResponseGroup::default();
                rg.group_id = g.group_id.clone();
                rg.topics = self
                    .fetch_group_offsets(
                        &group,
                        g.topics.map(|ts| {
                            ts.into_iter()
                                .map(|t| (t.name.0.to_string(), t.partition_indexes))
                                .collect()
                        }),
                    )
                    .into_iter()
                    .map(|(topic, parts)| {
                        let mut t = OffsetFetchResponseTopics::default();
                        t.name = tn(&topic);
                        t.partitions = parts
                            .into_iter()
                            .map(|(p, (offset, epoch, metadata))| {
                                let mut e = OffsetFetchResponsePartitions::default();
                                e.partition_index = p;
                                e.committed_offset = offset;
                                e.committed_leader_epoch = epoch;
                                e.metadata = metadata.map(sb);
                                e
                            })
                            .collect();
                        t
                    })
                    .collect();
                rg
            })
            .collect();
        resp
    }

    #[allow(clippy::type_complexity)]
    fn fetch_group_offsets(
        &self,
        group: &str,
        topics: Option<Vec<(String, Vec<i32>)>>,
    ) -> Vec<(String, Vec<(i32, (i64, i32, Option<String>))>)> {
        match topics {
            Some(list) => list
                .into_iter()
                .map(|(topic, parts)| {
                    let entries = parts
                        .into_iter()
                        .map(|p| (p, self.committed_partition(group, &topic, p)))
                        .collect();
                    (topic, entries)
                })
                .collect(),
            None => {
                let mut by_topic: Vec<(String, Vec<(i32, (i64, i32, Option<String>))>)> =
                    Vec::new();
                for ((topic, p), c) in self.offsets.all(group) {
                    let entry = (p, (c.offset, c.leader_epoch, c.metadata));
                    match by_topic.last_mut() {
                        Some((t, list)) if *t == topic => list.push(entry),
                        _ => by_topic.push((topic, vec![entry])),
                    }
                }
                by_topic
            }
        }
    }

    fn describe_groups(&self, req: DescribeGroupsRequest) -> DescribeGroupsResponse {
        let mut resp = DescribeGroupsResponse::default();
        resp.groups = req
            .groups
            .into_iter()
            .map(|id| {
                let mut g = DescribedGroup::default();
                g.group_id = id.clone();
                match self.groups.describe(&id.0) {
                    Some(d) => {
                        g.group_state = sb(d.state);
                        g.protocol_type = sb(d.protocol_type);
                        g.protocol_data = sb(d.protocol);
                        g.members = d
                            .members
                            .into_iter()
                            .map(|m| {
                                let mut e = DescribedGroupMember::default();
                                e.member_id = sb(m.member_id);
                                e.group_instance_id = m.instance_id.map(sb);
                                e.client_id = sb(m.client_id);
                                e.client_host = sb(m.client_host);
                                e.member_metadata = m.metadata;
                                e.member_assignment = m.assignment;
                                e
                            })
                            .collect();
                    }
                    None if self.offsets.groups().iter().any(|g| *g == *id.0) => {
                        g.group_state = sb("Empty");
                        g.protocol_type = sb("consumer");
                    }
                    None => g.group_state = sb("Dead"),
                }
                g
            })
            .collect();
        resp
    }

    fn list_groups(&self, req: ListGroupsRequest) -> ListGroupsResponse {
        let mut all: Vec<(String, String, &'static str)> = self.groups.list();
        for g in self.offsets.groups() {
            if !all.iter().any(|(id, _, _)| *id == g) {
                all.push((g, "consumer".into(), "Empty"));
            }
        }
        all.sort();
        let mut resp = ListGroupsResponse::default();
        resp.groups = all
            .into_iter()
            .filter(|(_, _, state)| {
                req.states_filter.is_empty()
                    || req
                        .states_filter
                        .iter()
                        .any(|s| s.eq_ignore_ascii_case(state))
            })
            .filter(|_| {
                req.types_filter.is_empty()
                    || req
                        .types_filter
                        .iter()
                        .any(|t| t.eq_ignore_ascii_case("classic"))
            })
            .map(|(id, protocol_type, state)| {
                let mut l = ListedGroup::default();
                l.group_id = GroupId(sb(id));
                l.protocol_type = sb(protocol_type);
                l.group_state = sb(state);
                l.group_type = sb("classic");
                l
            })
            .collect();
        resp
    }

    async fn delete_groups(&self, req: DeleteGroupsRequest) -> DeleteGroupsResponse {
        let mut resp = DeleteGroupsResponse::default();
        for id in req.groups_names {
            let mut r = DeletableGroupResult::default();
            r.group_id = id.clone();
            let known = self.offsets.groups().iter().any(|g| *g == *id.0)
                || self.groups.describe(&id.0).is_some();
            r.error_code = if self.groups.has_members(&id.0) {
                ResponseError::NonEmptyGroup.code()
            } else if !known {
                ResponseError::GroupIdNotFound.code()
            } else {
                match self.offsets.forget_group(&id.0).await {
                    Ok(()) => 0,
                    Err(err) => {
                        tracing::warn!(group = %id.0, error = %err, "Kafka listener: deleting a group failed");
                        ResponseError::UnknownServerError.code()
                    }
                }
            };
            resp.results.push(r);
        }
        resp
    }

    // ---- Admin ---------------------------------------------------------------------------

    fn create_topics(&self, req: CreateTopicsRequest) -> CreateTopicsResponse {
        let mut resp = CreateTopicsResponse::default();
        for topic in req.topics {
            let name = topic.name.0.to_string();
            let mut r = CreatableTopicResult::default();
            r.name = topic.name.clone();
            r.topic_id = topic_id(&name);
            r.num_partitions = -1;
            r.replication_factor = -1;
            let partitions = if topic.num_partitions == -1 {
                self.config.default_partitions.max(1) as i32
            } else {
                topic.num_partitions
            };
            let settings: Vec<(String, String)> = topic
                .configs
                .iter()
                .filter_map(|c| {
                    c.value
                        .as_ref()
                        .map(|v| (c.name.to_string(), v.to_string()))
                })
                .collect();
            let outcome: Result<TopicConfig, (ResponseError, String)> = (|| {
                headwater_log::log::validate_topic_name(&name)
                    .map_err(|e| (ResponseError::InvalidTopicException, e.to_string()))?;
                if self.is_internal(&name) || self.log.partition_count(&name).is_some() {
                    return Err((
                        ResponseError::TopicAlreadyExists,
                        format!("topic {name} already exists"),
                    ));
                }
                if !topic.assignments.is_empty() {
                    return Err((
                        ResponseError::InvalidReplicaAssignment,
                        "manual replica assignments are not supported: Headwater is a single broker".into(),
                    ));
                }
                if partitions <= 0 {
                    return Err((
                        ResponseError::InvalidPartitions,
                        format!("number of partitions must be at least 1, not {partitions}"),
                    ));
                }
                if topic.replication_factor != -1 && topic.replication_factor != 1 {
                    return Err((
                        ResponseError::InvalidReplicationFactor,
                        format!(
                            "replication factor {} is not possible: Headwater is a single broker (use 1 or -1)",
                            topic.replication_factor
                        ),
                    ));
                }
                let settings: std::collections::BTreeMap<String, String> =
                    settings.into_iter().collect();
                let config = TopicConfig::from_kafka_configs(&settings).map_err(|errors| {
                    (
                        ResponseError::InvalidConfig,
                        errors
                            .iter()
                            .map(|(k, m)| format!("{k}: {m}"))
                            .collect::<Vec<_>>()
                            .join("; "),
                    )
                })?;
                if !req.validate_only {
                    self.log
                        .create_topic(&name, partitions as u32, config.clone())
                        .map_err(|e| match e {
                            LogError::TopicExists(_) => {
                                (ResponseError::TopicAlreadyExists, e.to_string())
                            }
                            LogError::InvalidTopicName { .. } => {
                                (ResponseError::InvalidTopicException, e.to_string())
                            }
                            other => (ResponseError::KafkaStorageError, other.to_string()),
                        })?;
                    tracing::info!(topic = %name, partitions, "Kafka listener: created a topic");
                }
                Ok(config)
            })();
            match outcome {
                Ok(config) => {
                    r.num_partitions = partitions;
                    r.replication_factor = 1;
                    r.configs = Some(
                        config
                            .to_kafka_configs()
                            .into_iter()
                            .map(|(k, v)| {
                                let mut c = CreatableTopicConfigs::default();
                                c.config_source = config_source(&k, &v);
                                c.name = sb(k);
                                c.value = Some(sb(v));
                                c
                            })
                            .collect(),
                    );
                }
                Err((code, message)) => {
                    r.error_code = code.code();
                    r.error_message = Some(sb(message));
                }
            }
            resp.topics.push(r);
        }
        resp
    }

    async fn delete_topics(&self, req: DeleteTopicsRequest, v: i16) -> DeleteTopicsResponse {
        let targets: Vec<(Option<String>, Uuid)> = if v >= 6 {
            req.topics
                .into_iter()
                .map(|t| match t.name {
                    Some(n) => (Some(n.0.to_string()), t.topic_id),
                    None => (self.topic_by_id(t.topic_id), t.topic_id),
                })
                .collect()
        } else {
            req.topic_names
                .into_iter()
                .map(|n| (Some(n.0.to_string()), Uuid::nil()))
                .collect()
        };
        let mut resp = DeleteTopicsResponse::default();
        for (name, id) in targets {
            let mut r = DeletableTopicResult::default();
            r.topic_id = id;
            let Some(name) = name else {
                r.error_code = ResponseError::UnknownTopicId.code();
                resp.responses.push(r);
                continue;
            };
            r.name = Some(tn(&name));
            let outcome: Result<(), (ResponseError, String)> = if self.is_internal(&name) {
                Err((
                    ResponseError::InvalidTopicException,
                    format!("{name} is an internal topic of Headwater and cannot be deleted"),
                ))
            } else if let Some(connector) = self.owner_of(&name).await {
                Err((
                    ResponseError::TopicAuthorizationFailed,
                    format!("topic {name} is written by connector {connector}; delete or reset the connector first"),
                ))
            } else {
                self.log.delete_topic(&name).map_err(|e| match e {
                    LogError::UnknownTopic(_) => {
                        (ResponseError::UnknownTopicOrPartition, e.to_string())
                    }
                    other => (ResponseError::KafkaStorageError, other.to_string()),
                })
            };
            match outcome {
                Ok(()) => {
                    r.topic_id = topic_id(&name);
                    tracing::info!(topic = %name, "Kafka listener: deleted a topic");
                    self.sequences
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .states
                        .retain(|(_, t, _), _| *t != name);
                    if let Err(err) = self.offsets.forget_topic(&name).await {
                        tracing::warn!(topic = %name, error = %err, "Kafka listener: could not remove the deleted topic's committed offsets");
                    }
                }
                Err((code, message)) => {
                    r.error_code = code.code();
                    r.error_message = Some(sb(message));
                }
            }
            resp.responses.push(r);
        }
        resp
    }

    fn describe_configs(&self, req: DescribeConfigsRequest) -> DescribeConfigsResponse {
        let mut resp = DescribeConfigsResponse::default();
        for res in req.resources {
            let mut r = DescribeConfigsResult::default();
            r.resource_type = res.resource_type;
            r.resource_name = res.resource_name.clone();
            let entries: Result<Vec<(String, String, bool)>, Refusal> = match res.resource_type {
                // TOPIC
                2 => match self.log.topic_config(&res.resource_name) {
                    Some(config) => Ok(config
                        .to_kafka_configs()
                        .into_iter()
                        .map(|(k, v)| (k, v, false))
                        .collect()),
                    None => Err((
                        ResponseError::UnknownTopicOrPartition,
                        format!("unknown topic {}", &*res.resource_name),
                    )),
                },
                // BROKER
                4 if res.resource_name.is_empty()
                    || *res.resource_name == *self.config.node_id.to_string() =>
                {
                    Ok(vec![
                        (
                            "auto.create.topics.enable".into(),
                            self.config.auto_create_topics.to_string(),
                            true,
                        ),
                        (
                            "num.partitions".into(),
                            self.config.default_partitions.to_string(),
                            true,
                        ),
                        (
                            "group.initial.rebalance.delay.ms".into(),
                            self.config.initial_rebalance_delay.as_millis().to_string(),
                            true,
                        ),
                        ("offsets.topic.num.partitions".into(), "1".into(), true),
                        (
                            "offsets.retention.minutes".into(),
                            (self.config.offsets_retention.as_secs() / 60).to_string(),
                            true,
                        ),
                        ("default.replication.factor".into(), "1".into(), true),
                        ("min.insync.replicas".into(), "1".into(), true),
                    ])
                }
                4 => Err((
                    ResponseError::InvalidRequest,
                    format!("unknown broker {}", &*res.resource_name),
                )),
                other => Err((
                    ResponseError::InvalidRequest,
                    format!("resource type {other} is not supported by Headwater"),
                )),
            };
            match entries {
                Ok(list) => {
                    r.configs = list
                        .into_iter()
                        .filter(|(k, _, _)| {
                            res.configuration_keys.as_ref().is_none_or(|keys| {
                                keys.is_empty() || keys.iter().any(|w| **w == **k)
                            })
                        })
                        .map(|(k, v, read_only)| {
                            let mut c = DescribeConfigsResourceResult::default();
                            c.config_source = if read_only {
                                4 // STATIC_BROKER_CONFIG
                            } else {
                                config_source(&k, &v)
                            };
                            c.config_type = config_type(&k);
                            c.read_only = read_only;
                            c.name = sb(k);
                            c.value = Some(sb(v));
                            c
                        })
                        .collect();
                }
                Err((code, message)) => {
                    r.error_code = code.code();
                    r.error_message = Some(sb(message));
                }
            }
            resp.results.push(r);
        }
        resp
    }
}

/// DYNAMIC_TOPIC_CONFIG (1) when `value` differs from the default, else DEFAULT_CONFIG (5).
fn config_source(key: &str, value: &str) -> i8 {
    let defaults = TopicConfig::default().to_kafka_configs();
    if defaults.get(key).map(String::as_str) == Some(value) {
        5
    } else {
        1
    }
}

/// Kafka's ConfigType of a topic setting (DescribeConfigs v3+).
fn config_type(key: &str) -> i8 {
    match key {
        "cleanup.policy" => 7, // LIST
        "compression.type" => 2,
        "segment.bytes"
        | "num.partitions"
        | "offsets.topic.num.partitions"
        | "offsets.retention.minutes"
        | "min.insync.replicas" => 3, // INT
        "default.replication.factor" => 4, // SHORT
        "auto.create.topics.enable" => 1,  // BOOLEAN
        _ => 5,                            // LONG
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(last_used: Instant) -> SequenceState {
        SequenceState {
            epoch: 0,
            last_sequence: 0,
            recent: VecDeque::new(),
            last_used,
        }
    }

    #[test]
    fn idle_producers_are_forgotten_and_active_ones_kept() {
        let start = Instant::now();
        let hour = Duration::from_secs(3600);
        let mut sequences = ProducerSequences::new(start);
        sequences.states.insert((1, "t".into(), 0), state(start));
        sequences
            .states
            .insert((2, "t".into(), 0), state(start + 20 * hour));
        // Within a sweep interval of the last sweep nothing is looked at.
        sequences.sweep(start + Duration::from_secs(30), Duration::ZERO);
        assert_eq!(sequences.states.len(), 2);
        // A day after producer 1's last request: it goes, producer 2 (4 hours idle) stays.
        sequences.sweep(start + 24 * hour, PRODUCER_ID_EXPIRATION);
        assert_eq!(
            sequences.states.keys().map(|k| k.0).collect::<Vec<_>>(),
            [2]
        );
        sequences.sweep(start + 45 * hour, PRODUCER_ID_EXPIRATION);
        assert!(sequences.states.is_empty());
    }

    fn committed_at(offset: i64, commit_timestamp: i64) -> Option<Committed> {
        Some(Committed {
            offset,
            leader_epoch: -1,
            metadata: None,
            commit_timestamp,
        })
    }

    #[tokio::test]
    async fn offsets_expire_after_retention_unless_their_group_is_active() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), headwater_log::LogOptions::default()).unwrap();
        let day = 24 * 60 * 60 * 1000_i64;
        let config = ServerConfig {
            initial_rebalance_delay: Duration::ZERO,
            ..ServerConfig::default()
        };
        assert_eq!(config.offsets_retention.as_millis() as i64, 7 * day);
        let mut broker = Broker::new(log.clone(), config.clone(), None).unwrap();
        let t0 = 1_000_000_000_000_i64;
        broker.started_ms = t0;
        // A standalone consumer's offsets expire one by one from their commits.
        broker
            .offsets
            .commit(
                "standalone",
                vec![
                    (("t".into(), 0), committed_at(10, t0)),
                    (("t".into(), 1), committed_at(20, t0 + 3 * day)),
                ],
            )
            .await
            .unwrap();
        // A group with a member keeps offsets committed long ago.
        broker
            .offsets
            .commit("busy", vec![(("t".into(), 0), committed_at(30, t0))])
            .await
            .unwrap();
        let coordinator = broker.groups.clone();
        let request = crate::groups::JoinRequest {
            group_id: "busy".into(),
            member_id: String::new(),
            instance_id: None,
            client_id: "c".into(),
            client_host: "h".into(),
            session_timeout_ms: 30_000,
            rebalance_timeout_ms: 30_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::new())],
        };
        let join = tokio::spawn(async move { coordinator.join(request).await });
        // The coordinator's ticker completes the rebalance; it is not running here.
        while !join.is_finished() {
            broker.groups.tick();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let joined = join.await.unwrap();
        assert_eq!(joined.error_code, 0);
        assert!(broker.groups.has_members("busy"));

        assert_eq!(broker.expire_offsets(t0 + 7 * day - 1).await, 0);
        assert_eq!(broker.expire_offsets(t0 + 7 * day).await, 1);
        assert_eq!(broker.offsets.get("standalone", "t", 0), None);
        assert_eq!(broker.offsets.get("standalone", "t", 1).unwrap().offset, 20);
        assert_eq!(broker.offsets.get("busy", "t", 0).unwrap().offset, 30);

        // The member leaves at t0 + 8 days (noted active then); its group's offsets go a
        // retention period later, with the standalone consumer's second offset.
        broker.note_active_groups(t0 + 8 * day);
        broker
            .groups
            .leave("busy", &[(joined.member_id.to_string(), None)]);
        assert!(!broker.groups.has_members("busy"));
        assert_eq!(broker.expire_offsets(t0 + 15 * day - 1).await, 1);
        assert_eq!(broker.offsets.get("busy", "t", 0).unwrap().offset, 30);
        assert_eq!(broker.expire_offsets(t0 + 15 * day).await, 1);
        assert!(broker.offsets.groups().is_empty());

        // The removals are in the log: a restarted broker has no offsets either.
        drop(broker);
        let reopened = Broker::new(log.clone(), config.clone(), None).unwrap();
        assert!(reopened.offsets.groups().is_empty());
        drop(reopened);

        // After a restart, a group not seen since counts as active at the start: its offsets
        // outlive the retention from their commit until a retention after the start.
        let mut restarted = Broker::new(log, config, None).unwrap();
        restarted.started_ms = t0 + 20 * day;
        restarted
            .offsets
            .commit(
                "idle",
                vec![(("t".into(), 0), committed_at(40, t0 + 10 * day))],
            )
            .await
            .unwrap();
        assert_eq!(restarted.expire_offsets(t0 + 27 * day - 1).await, 0);
        assert_eq!(restarted.expire_offsets(t0 + 27 * day).await, 1);
    }

    #[tokio::test]
    async fn a_commit_racing_the_expiry_keeps_its_offset() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), headwater_log::LogOptions::default()).unwrap();
        let broker = Broker::new(log, ServerConfig::default(), None).unwrap();
        let retention = broker.config.offsets_retention.as_millis() as i64;
        let t0 = 1_000_000_000_000_i64;
        let key = ("t".to_string(), 0);
        broker
            .offsets
            .commit("g", vec![(key.clone(), committed_at(1, t0))])
            .await
            .unwrap();
        let now = t0 + retention;
        let expiring = broker.offsets.expired(now, retention, |_| None);
        assert_eq!(expiring, [("g".to_string(), vec![key.clone()])]);
        // A new commit lands between finding the offset expired and removing it.
        broker
            .offsets
            .commit("g", vec![(key.clone(), committed_at(2, now))])
            .await
            .unwrap();
        let removed = broker
            .offsets
            .expire("g", vec![key], now - retention)
            .await
            .unwrap();
        assert_eq!(removed, 0);
        assert_eq!(broker.offsets.get("g", "t", 0).unwrap().offset, 2);
    }
}
