//! Protocol-level tests of the Kafka listener with a raw client: each API's answers, error
//! codes for unsupported and refused requests, long polling, read_committed bounds, committed
//! offsets surviving a restart, and malformed frames closing only their own connection.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use headwater_kafka::TopicOwner;
use headwater_log::{BatchBuilder, Compression, ProducerFields, TopicConfig};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use support::{RawClient, TestServer};

fn batch(values: &[&str]) -> Vec<u8> {
    let mut b = BatchBuilder::new(Compression::None, ProducerFields::default());
    for v in values {
        b.append(1_700_000_000_000, None, Some(v.as_bytes()), &[]);
    }
    b.build().expect("build")
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

fn fetch_req(topic: &str, offset: i64, max_wait_ms: i32, isolation: i8) -> FetchRequest {
    let mut p = FetchPartition::default();
    p.partition = 0;
    p.fetch_offset = offset;
    p.partition_max_bytes = 1 << 20;
    let mut t = FetchTopic::default();
    t.topic = name(topic);
    t.partitions = vec![p];
    let mut r = FetchRequest::default();
    r.max_wait_ms = max_wait_ms;
    r.min_bytes = 1;
    r.max_bytes = 50 << 20;
    r.isolation_level = isolation;
    r.topics = vec![t];
    r
}

fn produce_req(topic: &str, records: Vec<u8>, acks: i16) -> ProduceRequest {
    let mut p = PartitionProduceData::default();
    p.index = 0;
    p.records = Some(Bytes::from(records));
    let mut t = TopicProduceData::default();
    t.name = name(topic);
    t.partition_data = vec![p];
    let mut r = ProduceRequest::default();
    r.acks = acks;
    r.timeout_ms = 5000;
    r.topic_data = vec![t];
    r
}

fn record_values(records: &Bytes) -> Vec<String> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < records.len() {
        let d = headwater_log::DecodedBatch::decode(&records[pos..]).expect("batch");
        pos += d.header.total_size();
        if d.header.is_control() {
            continue;
        }
        for r in d.records().expect("records") {
            out.push(String::from_utf8_lossy(r.value.unwrap_or_default()).into_owned());
        }
    }
    out
}

#[test]
fn api_versions_lists_supported_apis_and_answers_unsupported_versions_with_v0() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), None);
    let mut c = RawClient::connect(server.addr);
    let resp: ApiVersionsResponse = c.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    assert_eq!(resp.error_code, 0);
    let fetch = resp
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::Fetch as i16)
        .expect("Fetch offered");
    assert_eq!((fetch.min_version, fetch.max_version), (4, 18));
    assert!(resp
        .api_keys
        .iter()
        .any(|k| k.api_key == ApiKey::JoinGroup as i16));

    // A future ApiVersions version: a v0 answer with UNSUPPORTED_VERSION and the ranges.
    let mut frame = Vec::new();
    frame.extend_from_slice(&10i32.to_be_bytes());
    frame.extend_from_slice(&(ApiKey::ApiVersions as i16).to_be_bytes());
    frame.extend_from_slice(&99i16.to_be_bytes());
    frame.extend_from_slice(&77i32.to_be_bytes());
    frame.extend_from_slice(&(-1i16).to_be_bytes());
    c.send_raw(&frame);
    let body = c.read_frame().expect("answer");
    let (corr, resp): (i32, ApiVersionsResponse) =
        headwater_kafka::codec::decode_response(ApiKey::ApiVersions, 0, body).unwrap();
    assert_eq!(corr, 77);
    assert_eq!(resp.error_code, ResponseError::UnsupportedVersion.code());
    assert!(!resp.api_keys.is_empty());
    server.stop();
}

#[test]
fn metadata_describes_one_broker_leading_every_partition() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), None);
    server
        .log
        .create_topic("orders", 3, TopicConfig::default())
        .unwrap();
    let mut c = RawClient::connect(server.addr);
    for version in [1i16, 9, 12] {
        let mut req = MetadataRequest::default();
        req.topics = None; // every topic
        let resp: MetadataResponse = c.call(ApiKey::Metadata, version, &req);
        assert_eq!(resp.brokers.len(), 1);
        assert_eq!(resp.brokers[0].port, i32::from(server.addr.port()));
        assert_eq!(resp.brokers[0].host.as_str(), "127.0.0.1");
        assert_eq!(resp.controller_id.0, 0);
        let orders = resp
            .topics
            .iter()
            .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some("orders"))
            .expect("orders listed");
        assert_eq!(orders.partitions.len(), 3);
        assert!(orders
            .partitions
            .iter()
            .all(|p| p.leader_id.0 == 0 && p.isr_nodes.len() == 1));
        if version >= 2 {
            assert_eq!(resp.cluster_id.as_deref(), Some("test-cluster"));
        }
    }
    // An unknown topic without auto-creation.
    let mut req = MetadataRequest::default();
    let mut t = metadata_request::MetadataRequestTopic::default();
    t.name = Some(name("nope"));
    req.topics = Some(vec![t]);
    req.allow_auto_topic_creation = false;
    let resp: MetadataResponse = c.call(ApiKey::Metadata, 9, &req);
    assert_eq!(
        resp.topics[0].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );
    assert!(server.log.partition_count("nope").is_none());
    server.stop();
}

#[test]
fn produce_then_fetch_returns_the_stored_batches_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), None);
    server
        .log
        .create_topic("user.events", 1, TopicConfig::default())
        .unwrap();
    let mut c = RawClient::connect(server.addr);
    for (i, acks) in [1i16, -1].into_iter().enumerate() {
        let resp: ProduceResponse = c.call(
            ApiKey::Produce,
            9,
            &produce_req("user.events", batch(&["a", "b"]), acks),
        );
        let p = &resp.responses[0].partition_responses[0];
        assert_eq!(p.error_code, 0, "{:?}", p.error_message);
        assert_eq!(p.base_offset, 2 * i as i64);
    }
    let resp: FetchResponse = c.call(ApiKey::Fetch, 11, &fetch_req("user.events", 0, 0, 0));
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    assert_eq!(p.high_watermark, 4);
    let records = p.records.clone().unwrap();
    assert_eq!(record_values(&records), ["a", "b", "a", "b"]);
    // Exactly the log's bytes.
    let stored = server
        .log
        .read_with(
            "user.events",
            0,
            0,
            1 << 20,
            headwater_log::Isolation::ReadUncommitted,
        )
        .unwrap();
    assert_eq!(records.as_ref(), stored.bytes.as_slice());

    // Offsets past the end.
    let resp: FetchResponse = c.call(ApiKey::Fetch, 11, &fetch_req("user.events", 99, 0, 0));
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, ResponseError::OffsetOutOfRange.code());
    assert_eq!(p.high_watermark, 4);

    // acks=0: no response; the next request's answer is the next frame.
    c.send_raw(
        &headwater_kafka::codec::encode_request(
            ApiKey::Produce,
            9,
            1000,
            "raw",
            &produce_req("user.events", batch(&["c"]), 0),
        )
        .unwrap(),
    );
    let resp: ApiVersionsResponse = c.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    assert_eq!(resp.error_code, 0);
    support::wait_until("acks=0 record visible", Duration::from_secs(5), || {
        server.log.latest_offset("user.events", 0).unwrap() == 5
    });
    server.stop();
}

#[test]
fn produce_refuses_internal_and_connector_topics_with_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let owner: TopicOwner = Arc::new(|topic: String| {
        Box::pin(async move { (topic == "pg.public.orders").then(|| "pg-source".to_owned()) })
    });
    let server = TestServer::start(dir.path(), Some(owner));
    server
        .log
        .create_topic("pg.public.orders", 1, TopicConfig::default())
        .unwrap();
    server
        .log
        .create_topic("connect-offsets", 1, TopicConfig::compacted())
        .unwrap();
    let mut c = RawClient::connect(server.addr);
    let resp: ProduceResponse = c.call(
        ApiKey::Produce,
        9,
        &produce_req("pg.public.orders", batch(&["x"]), 1),
    );
    let p = &resp.responses[0].partition_responses[0];
    assert_eq!(p.error_code, ResponseError::TopicAuthorizationFailed.code());
    let message = p.error_message.as_deref().unwrap_or_default();
    assert!(message.contains("connector pg-source"), "{message}");
    for internal in ["connect-offsets", "__consumer_offsets"] {
        let resp: ProduceResponse =
            c.call(ApiKey::Produce, 9, &produce_req(internal, batch(&["x"]), 1));
        let p = &resp.responses[0].partition_responses[0];
        assert_eq!(p.error_code, ResponseError::InvalidTopicException.code());
    }
    assert_eq!(server.log.latest_offset("pg.public.orders", 0).unwrap(), 0);

    // DeleteTopics refuses them too.
    let mut req = DeleteTopicsRequest::default();
    req.topic_names = vec![name("pg.public.orders"), name("__consumer_offsets")];
    let resp: DeleteTopicsResponse = c.call(ApiKey::DeleteTopics, 5, &req);
    assert_eq!(
        resp.responses[0].error_code,
        ResponseError::TopicAuthorizationFailed.code()
    );
    assert_eq!(
        resp.responses[1].error_code,
        ResponseError::InvalidTopicException.code()
    );
    server.stop();
}

#[test]
fn corrupt_and_old_format_batches_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), None);
    server
        .log
        .create_topic("t", 1, TopicConfig::default())
        .unwrap();
    let mut c = RawClient::connect(server.addr);
    let mut bad = batch(&["x"]);
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    let resp: ProduceResponse = c.call(ApiKey::Produce, 9, &produce_req("t", bad, 1));
    assert_eq!(
        resp.responses[0].partition_responses[0].error_code,
        ResponseError::CorruptMessage.code()
    );
    let mut old = batch(&["x"]);
    old[16] = 1;
    let resp: ProduceResponse = c.call(ApiKey::Produce, 9, &produce_req("t", old, 1));
    assert_eq!(
        resp.responses[0].partition_responses[0].error_code,
        ResponseError::UnsupportedForMessageFormat.code()
    );
    assert_eq!(server.log.latest_offset("t", 0).unwrap(), 0);
    server.stop();
}

#[test]
fn idempotent_producer_sequences_are_checked_and_retries_deduplicated() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), None);
    server
        .log
        .create_topic("t", 1, TopicConfig::default())
        .unwrap();
    let mut c = RawClient::connect(server.addr);
    let init: InitProducerIdResponse =
        c.call(ApiKey::InitProducerId, 4, &InitProducerIdRequest::default());
    assert_eq!(init.error_code, 0);
    let pid = init.producer_id.0;
    assert!(pid >= 0);
    let idem = |seq: i32, values: &[&str]| {
        let mut b = BatchBuilder::new(
            Compression::None,
            ProducerFields {
                producer_id: pid,
                producer_epoch: 0,
                base_sequence: seq,
                transactional: false,
            },
        );
        for v in values {
            b.append(1, None, Some(v.as_bytes()), &[]);
        }
        b.build().unwrap()
    };
    let send = |c: &mut RawClient, records: Vec<u8>| -> (i16, i64) {
        let resp: ProduceResponse = c.call(ApiKey::Produce, 9, &produce_req("t", records, -1));
        let p = &resp.responses[0].partition_responses[0];
        (p.error_code, p.base_offset)
    };
    assert_eq!(send(&mut c, idem(0, &["a", "b"])), (0, 0));
    assert_eq!(send(&mut c, idem(2, &["c"])), (0, 2));
    // A retry of the batch already stored: acknowledged with its offset, not stored again.
    assert_eq!(send(&mut c, idem(2, &["c"])), (0, 2));
    // A gap.
    assert_eq!(
        send(&mut c, idem(7, &["z"])).0,
        ResponseError::OutOfOrderSequenceNumber.code()
    );
    assert_eq!(server.log.latest_offset("t", 0).unwrap(), 3);

    // Transactional producers are refused clearly.
    let mut req = InitProducerIdRequest::default();
    req.transactional_id = Some(TransactionalId(StrBytes::from_static_str("tx")));
    let resp: InitProducerIdResponse = c.call(ApiKey::InitProducerId, 4, &req);
    assert_ne!(resp.error_code, 0);
    server.stop();
}

#[test]
fn fetch_long_polls_until_data_arrives_or_max_wait() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), None);
    server
        .log
        .create_topic("t", 1, TopicConfig::default())
        .unwrap();
    let mut c = RawClient::connect(server.addr);
    let started = Instant::now();
    let resp: FetchResponse = c.call(ApiKey::Fetch, 11, &fetch_req("t", 0, 400, 0));
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(380), "{waited:?}");
    assert!(resp.responses[0].partitions[0]
        .records
        .as_ref()
        .is_none_or(|r| r.is_empty()));

    // Data appended during the wait answers the fetch early.
    let log = server.log.clone();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        log.append("t", 0, batch(&["late"])).unwrap();
        log.commit().wait().unwrap();
    });
    let started = Instant::now();
    let resp: FetchResponse = c.call(ApiKey::Fetch, 11, &fetch_req("t", 0, 10_000, 0));
    let waited = started.elapsed();
    writer.join().unwrap();
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    let records = resp.responses[0].partitions[0].records.clone().unwrap();
    assert_eq!(record_values(&records), ["late"]);
    server.stop();
}

#[test]
fn read_committed_stops_at_an_open_transaction_and_lists_aborted_ones() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), None);
    let log = server.log.clone();
    log.create_topic("t", 1, TopicConfig::default()).unwrap();
    log.append("t", 0, batch(&["plain"])).unwrap();
    log.commit().wait().unwrap();
    let txn_batch = |txn: &headwater_log::Transaction, v: &str| {
        let mut b = BatchBuilder::new(Compression::None, txn.producer_fields());
        b.append(1, None, Some(v.as_bytes()), &[]);
        b
    };
    let mut aborted = log.begin_transaction().unwrap();
    let b = txn_batch(&aborted, "aborted");
    aborted.append_builder("t", 0, b).unwrap();
    aborted.abort().unwrap();
    let mut open = log.begin_transaction().unwrap();
    let b = txn_batch(&open, "open");
    open.append_builder("t", 0, b).unwrap();
    log.commit().wait().unwrap();

    let mut c = RawClient::connect(server.addr);
    let resp: FetchResponse = c.call(ApiKey::Fetch, 11, &fetch_req("t", 0, 0, 1));
    let p = &resp.responses[0].partitions[0];
    let lso = p.last_stable_offset;
    assert!(
        lso < p.high_watermark,
        "LSO {lso} below HW {}",
        p.high_watermark
    );
    let aborted_list = p.aborted_transactions.clone().unwrap_or_default();
    assert_eq!(aborted_list.len(), 1);
    let values = record_values(p.records.as_ref().unwrap());
    assert!(!values.contains(&"open".to_owned()), "{values:?}");

    // ListOffsets latest: the LSO for read_committed, the HW for read_uncommitted.
    let list = |c: &mut RawClient, isolation: i8| -> i64 {
        let mut p = ListOffsetsPartition::default();
        p.partition_index = 0;
        p.timestamp = -1;
        let mut t = ListOffsetsTopic::default();
        t.name = name("t");
        t.partitions = vec![p];
        let mut r = ListOffsetsRequest::default();
        r.isolation_level = isolation;
        r.topics = vec![t];
        let resp: ListOffsetsResponse = c.call(ApiKey::ListOffsets, 5, &r);
        resp.topics[0].partitions[0].offset
    };
    assert_eq!(list(&mut c, 1), lso);
    assert_eq!(list(&mut c, 0), p.high_watermark);

    open.commit().unwrap();
    let resp: FetchResponse = c.call(ApiKey::Fetch, 11, &fetch_req("t", 0, 0, 1));
    let values = record_values(resp.responses[0].partitions[0].records.as_ref().unwrap());
    assert!(values.contains(&"open".to_owned()), "{values:?}");
    server.stop();
}

#[test]
fn committed_offsets_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), None);
    server
        .log
        .create_topic("t", 2, TopicConfig::default())
        .unwrap();
    let mut c = RawClient::connect(server.addr);
    let mut req = OffsetCommitRequest::default();
    req.group_id = GroupId(StrBytes::from_static_str("loader"));
    req.generation_id_or_member_epoch = -1;
    let mut t = OffsetCommitRequestTopic::default();
    t.name = name("t");
    for (p, o) in [(0, 42i64), (1, 7)] {
        let mut e = OffsetCommitRequestPartition::default();
        e.partition_index = p;
        e.committed_offset = o;
        t.partitions.push(e);
    }
    req.topics = vec![t];
    let resp: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, 8, &req);
    assert!(resp.topics[0].partitions.iter().all(|p| p.error_code == 0));
    drop(c);
    server.stop();

    let server = TestServer::start(dir.path(), None);
    let mut c = RawClient::connect(server.addr);
    let mut req = OffsetFetchRequest::default();
    req.group_id = GroupId(StrBytes::from_static_str("loader"));
    let mut t = OffsetFetchRequestTopic::default();
    t.name = name("t");
    t.partition_indexes = vec![0, 1];
    req.topics = Some(vec![t]);
    let resp: OffsetFetchResponse = c.call(ApiKey::OffsetFetch, 7, &req);
    let offsets: Vec<i64> = resp.topics[0]
        .partitions
        .iter()
        .map(|p| p.committed_offset)
        .collect();
    assert_eq!(offsets, [42, 7]);
    let resp: ListGroupsResponse = c.call(ApiKey::ListGroups, 4, &ListGroupsRequest::default());
    assert!(resp
        .groups
        .iter()
        .any(|g| g.group_id.0.as_str() == "loader"));
    server.stop();
}

#[test]
fn group_of_two_members_rebalances_on_join_and_leave() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), None);
    let join = |member: &str| {
        let mut r = JoinGroupRequest::default();
        r.group_id = GroupId(StrBytes::from_static_str("g"));
        r.session_timeout_ms = 10_000;
        r.rebalance_timeout_ms = 10_000;
        r.member_id = StrBytes::from_string(member.to_owned());
        r.protocol_type = StrBytes::from_static_str("consumer");
        let mut p = join_group_request::JoinGroupRequestProtocol::default();
        p.name = StrBytes::from_static_str("range");
        p.metadata = Bytes::from_static(b"meta");
        r.protocols = vec![p];
        r
    };
    let addr = server.addr;
    // Both join at once; the first rebalance waits for the initial delay and takes both.
    let first = std::thread::spawn(move || {
        let mut c = RawClient::connect(addr);
        let resp: JoinGroupResponse = c.call(ApiKey::JoinGroup, 5, &join(""));
        (c, resp)
    });
    let second = std::thread::spawn(move || {
        let mut c = RawClient::connect(addr);
        let resp: JoinGroupResponse = c.call(ApiKey::JoinGroup, 5, &join(""));
        (c, resp)
    });
    let (c1, j1) = first.join().unwrap();
    let (c2, j2) = second.join().unwrap();
    assert_eq!(j1.error_code, 0);
    assert_eq!(j2.error_code, 0);
    assert_eq!(j1.generation_id, j2.generation_id);
    assert_eq!(j1.leader, j2.leader);
    let (mut leader, leader_join, mut follower, follower_join) = if j1.leader == j1.member_id {
        (c1, j1, c2, j2)
    } else {
        (c2, j2, c1, j1)
    };
    assert_eq!(leader_join.members.len(), 2, "the leader sees every member");
    assert!(follower_join.members.is_empty());
    assert!(leader_join
        .members
        .iter()
        .all(|m| m.metadata.as_ref() == b"meta"));
    let generation = leader_join.generation_id;
    let follower_id = follower_join.member_id.clone();
    let leader_id = leader_join.member_id.clone();
    // The follower's SyncGroup waits for the leader's assignments.
    let follower_sync = std::thread::spawn(move || {
        let mut r = SyncGroupRequest::default();
        r.group_id = GroupId(StrBytes::from_static_str("g"));
        r.generation_id = generation;
        r.member_id = follower_id;
        let resp: SyncGroupResponse = follower.call(ApiKey::SyncGroup, 3, &r);
        (follower, resp)
    });
    std::thread::sleep(Duration::from_millis(100));
    let mut r = SyncGroupRequest::default();
    r.group_id = GroupId(StrBytes::from_static_str("g"));
    r.generation_id = generation;
    r.member_id = leader_id.clone();
    r.assignments = [
        (leader_id.clone(), "for-leader"),
        (follower_join.member_id.clone(), "for-follower"),
    ]
    .into_iter()
    .map(|(m, a)| {
        let mut e = sync_group_request::SyncGroupRequestAssignment::default();
        e.member_id = m;
        e.assignment = Bytes::from_static(a.as_bytes());
        e
    })
    .collect();
    let resp: SyncGroupResponse = leader.call(ApiKey::SyncGroup, 3, &r);
    assert_eq!(resp.assignment.as_ref(), b"for-leader");
    let (mut follower, resp) = follower_sync.join().unwrap();
    assert_eq!(resp.assignment.as_ref(), b"for-follower");

    let heartbeat = |c: &mut RawClient, member: &StrBytes, generation: i32| -> i16 {
        let mut r = HeartbeatRequest::default();
        r.group_id = GroupId(StrBytes::from_static_str("g"));
        r.generation_id = generation;
        r.member_id = member.clone();
        let resp: HeartbeatResponse = c.call(ApiKey::Heartbeat, 3, &r);
        resp.error_code
    };
    assert_eq!(heartbeat(&mut leader, &leader_id, generation), 0);
    let describe: DescribeGroupsResponse = leader.call(ApiKey::DescribeGroups, 3, &{
        let mut r = DescribeGroupsRequest::default();
        r.groups = vec![GroupId(StrBytes::from_static_str("g"))];
        r
    });
    assert_eq!(describe.groups[0].group_state.as_str(), "Stable");
    assert_eq!(describe.groups[0].members.len(), 2);

    // The follower leaves: the leader's next heartbeat says a rebalance is in progress, and
    // its rejoin completes alone with a new generation.
    let mut r = LeaveGroupRequest::default();
    r.group_id = GroupId(StrBytes::from_static_str("g"));
    r.member_id = follower_join.member_id.clone();
    let resp: LeaveGroupResponse = follower.call(ApiKey::LeaveGroup, 1, &r);
    assert_eq!(resp.error_code, 0);
    assert_eq!(
        heartbeat(&mut leader, &leader_id, generation),
        ResponseError::RebalanceInProgress.code()
    );
    let rejoin: JoinGroupResponse = leader.call(ApiKey::JoinGroup, 5, &join(&leader_id));
    assert_eq!(rejoin.error_code, 0);
    assert_eq!(rejoin.generation_id, generation + 1);
    assert_eq!(rejoin.members.len(), 1);
    // A stale generation is refused.
    assert_eq!(
        heartbeat(&mut leader, &leader_id, generation),
        ResponseError::IllegalGeneration.code()
    );
    server.stop();
}

#[test]
fn malformed_frames_close_only_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), None);
    let mut good = RawClient::connect(server.addr);
    let _: ApiVersionsResponse = good.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());

    // A negative size.
    let mut bad = RawClient::connect(server.addr);
    bad.send_raw(&(-5i32).to_be_bytes());
    assert!(bad.closed_by_server());
    // A TLS ClientHello.
    let mut tls = RawClient::connect(server.addr);
    tls.send_raw(&[
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ]);
    assert!(tls.closed_by_server());
    // A Metadata request whose body is garbage.
    let mut garbage = RawClient::connect(server.addr);
    let mut frame = Vec::new();
    frame.extend_from_slice(&14i32.to_be_bytes());
    frame.extend_from_slice(&(ApiKey::Metadata as i16).to_be_bytes());
    frame.extend_from_slice(&12i16.to_be_bytes());
    frame.extend_from_slice(&1i32.to_be_bytes());
    frame.extend_from_slice(&[0xff; 6]);
    garbage.send_raw(&frame);
    assert!(garbage.closed_by_server());
    // An unknown API key.
    let mut unknown = RawClient::connect(server.addr);
    let mut frame = Vec::new();
    frame.extend_from_slice(&10i32.to_be_bytes());
    frame.extend_from_slice(&9999i16.to_be_bytes());
    frame.extend_from_slice(&0i16.to_be_bytes());
    frame.extend_from_slice(&1i32.to_be_bytes());
    frame.extend_from_slice(&(-1i16).to_be_bytes());
    unknown.send_raw(&frame);
    assert!(unknown.closed_by_server());

    // The first connection still works.
    let resp: ApiVersionsResponse =
        good.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    assert_eq!(resp.error_code, 0);
    server.stop();
}

#[test]
fn sasl_is_refused_as_unsupported() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), None);
    let mut c = RawClient::connect(server.addr);
    let mut req = SaslHandshakeRequest::default();
    req.mechanism = StrBytes::from_static_str("PLAIN");
    let resp: SaslHandshakeResponse = c.call(ApiKey::SaslHandshake, 1, &req);
    assert_eq!(
        resp.error_code,
        ResponseError::UnsupportedSaslMechanism.code()
    );
    server.stop();
}

#[test]
fn sasl_plain_gates_every_request_until_authenticated() {
    let dir = tempfile::tempdir().unwrap();
    let users = headwater_kafka::sasl::SaslUsers::new(
        vec![("alice".into(), "secret".into())],
        headwater_kafka::sasl::Mechanism::ALL.to_vec(),
    );
    let server = TestServer::start_with_sasl(dir.path(), users);
    let handshake = |c: &mut RawClient, mechanism: &'static str| -> SaslHandshakeResponse {
        let mut req = SaslHandshakeRequest::default();
        req.mechanism = StrBytes::from_static_str(mechanism);
        c.call(ApiKey::SaslHandshake, 1, &req)
    };
    let authenticate = |c: &mut RawClient, token: &'static [u8]| -> SaslAuthenticateResponse {
        let mut req = SaslAuthenticateRequest::default();
        req.auth_bytes = Bytes::from_static(token);
        c.call(ApiKey::SaslAuthenticate, 2, &req)
    };

    // ApiVersions is served before authentication; Metadata closes the connection.
    let mut c = RawClient::connect(server.addr);
    let versions: ApiVersionsResponse =
        c.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    assert!(versions
        .api_keys
        .iter()
        .any(|k| k.api_key == ApiKey::SaslAuthenticate as i16));
    c.send(ApiKey::Metadata, 9, &MetadataRequest::default());
    assert!(c.closed_by_server(), "Metadata before authentication");

    // A mechanism not offered, a wrong password: answered, then closed.
    let mut c = RawClient::connect(server.addr);
    let resp = handshake(&mut c, "GSSAPI");
    assert_eq!(
        resp.error_code,
        ResponseError::UnsupportedSaslMechanism.code()
    );
    assert_eq!(
        resp.mechanisms,
        ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"].map(StrBytes::from_static_str)
    );
    assert!(c.closed_by_server());
    let mut c = RawClient::connect(server.addr);
    assert_eq!(handshake(&mut c, "PLAIN").error_code, 0);
    let resp = authenticate(&mut c, b"\0alice\0wrong");
    assert_eq!(
        resp.error_code,
        ResponseError::SaslAuthenticationFailed.code()
    );
    assert!(c.closed_by_server());

    // The right password: everything is served.
    let mut c = RawClient::connect(server.addr);
    assert_eq!(handshake(&mut c, "PLAIN").error_code, 0);
    let resp = authenticate(&mut c, b"\0alice\0secret");
    assert_eq!(resp.error_code, 0);
    assert_eq!(resp.session_lifetime_ms, 0);
    let meta: MetadataResponse = c.call(ApiKey::Metadata, 9, &MetadataRequest::default());
    assert_eq!(meta.brokers.len(), 1);

    // Before authentication, frames are small and time is short.
    let mut big = RawClient::connect(server.addr);
    big.send_raw(&(1024 * 1024i32).to_be_bytes());
    assert!(
        big.closed_by_server(),
        "a 1 MiB frame before authentication"
    );
    let started = Instant::now();
    let mut idle = RawClient::connect(server.addr);
    assert!(
        idle.closed_by_server(),
        "an idle unauthenticated connection"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(9),
        "{:?}",
        started.elapsed()
    );
    server.stop();
}

#[test]
fn create_describe_and_delete_topics() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), None);
    let mut c = RawClient::connect(server.addr);
    let mut req = CreateTopicsRequest::default();
    let mut t = create_topics_request::CreatableTopic::default();
    t.name = name("four");
    t.num_partitions = 4;
    t.replication_factor = 1;
    let mut cfg = create_topics_request::CreatableTopicConfig::default();
    cfg.name = StrBytes::from_static_str("cleanup.policy");
    cfg.value = Some(StrBytes::from_static_str("compact"));
    t.configs = vec![cfg];
    let mut t3 = create_topics_request::CreatableTopic::default();
    t3.name = name("replicated");
    t3.num_partitions = 1;
    t3.replication_factor = 3;
    req.topics = vec![t, t3];
    req.timeout_ms = 5000;
    let resp: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 5, &req);
    assert_eq!(resp.topics[0].error_code, 0);
    assert_eq!(resp.topics[0].num_partitions, 4);
    assert_eq!(
        resp.topics[1].error_code,
        ResponseError::InvalidReplicationFactor.code()
    );
    assert_eq!(server.log.partition_count("four"), Some(4));

    let mut req = DescribeConfigsRequest::default();
    let mut r = describe_configs_request::DescribeConfigsResource::default();
    r.resource_type = 2;
    r.resource_name = StrBytes::from_static_str("four");
    req.resources = vec![r];
    let resp: DescribeConfigsResponse = c.call(ApiKey::DescribeConfigs, 3, &req);
    let policy = resp.results[0]
        .configs
        .iter()
        .find(|c| c.name.as_str() == "cleanup.policy")
        .expect("cleanup.policy");
    assert_eq!(policy.value.as_deref(), Some("compact"));

    let mut req = DeleteTopicsRequest::default();
    req.topic_names = vec![name("four")];
    let resp: DeleteTopicsResponse = c.call(ApiKey::DeleteTopics, 4, &req);
    assert_eq!(resp.responses[0].error_code, 0);
    assert!(server.log.partition_count("four").is_none());
    server.stop();
}

#[test]
fn list_offsets_earliest_latest_and_by_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), None);
    let log = server.log.clone();
    log.create_topic("t", 1, TopicConfig::default()).unwrap();
    for ts in [1000i64, 2000, 3000] {
        let mut b = BatchBuilder::new(Compression::None, ProducerFields::default());
        b.append(ts, None, Some(b"v"), &[]);
        log.append_builder("t", 0, b).unwrap();
    }
    log.commit().wait().unwrap();
    let mut c = RawClient::connect(server.addr);
    let mut ask = |timestamp: i64| -> (i16, i64) {
        let mut p = ListOffsetsPartition::default();
        p.partition_index = 0;
        p.timestamp = timestamp;
        let mut t = ListOffsetsTopic::default();
        t.name = name("t");
        t.partitions = vec![p];
        let mut r = ListOffsetsRequest::default();
        r.topics = vec![t];
        let resp: ListOffsetsResponse = c.call(ApiKey::ListOffsets, 1, &r);
        let p = &resp.topics[0].partitions[0];
        (p.error_code, p.offset)
    };
    assert_eq!(ask(-2), (0, 0));
    assert_eq!(ask(-1), (0, 3));
    assert_eq!(ask(1500), (0, 1));
    assert_eq!(ask(9999), (0, -1));
    server.stop();
}

#[test]
fn a_member_whose_session_expires_is_removed_and_the_group_rebalances() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), None);
    let join = |member: &str| {
        let mut r = JoinGroupRequest::default();
        r.group_id = GroupId(StrBytes::from_static_str("expiring"));
        r.session_timeout_ms = 6_000; // Kafka's minimum
        r.rebalance_timeout_ms = 6_000;
        r.member_id = StrBytes::from_string(member.to_owned());
        r.protocol_type = StrBytes::from_static_str("consumer");
        let mut p = join_group_request::JoinGroupRequestProtocol::default();
        p.name = StrBytes::from_static_str("cooperative-sticky");
        p.metadata = Bytes::from_static(b"m");
        r.protocols = vec![p];
        r
    };
    let addr = server.addr;
    let joined: Vec<(RawClient, JoinGroupResponse)> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = RawClient::connect(addr);
                let resp: JoinGroupResponse = c.call(ApiKey::JoinGroup, 7, &join(""));
                (c, resp)
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    let generation = joined[0].1.generation_id;
    assert!(joined
        .iter()
        .all(|(_, j)| j.error_code == 0 && j.generation_id == generation));
    assert_eq!(
        joined[0].1.protocol_name.as_deref(),
        Some("cooperative-sticky")
    );
    let mut it = joined.into_iter();
    let (mut alive, alive_join) = it.next().unwrap();
    let (_silent, _) = it.next().unwrap();
    let member = alive_join.member_id.clone();
    // Only one member heartbeats; the other's session runs out after 6 s.
    let started = Instant::now();
    let code = loop {
        let mut r = HeartbeatRequest::default();
        r.group_id = GroupId(StrBytes::from_static_str("expiring"));
        r.generation_id = generation;
        r.member_id = member.clone();
        let resp: HeartbeatResponse = alive.call(ApiKey::Heartbeat, 4, &r);
        if resp.error_code != 0 || started.elapsed() > Duration::from_secs(20) {
            break resp.error_code;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let waited = started.elapsed();
    assert_eq!(code, ResponseError::RebalanceInProgress.code());
    assert!(
        waited >= Duration::from_millis(5_500) && waited < Duration::from_secs(15),
        "{waited:?}"
    );
    let rejoin: JoinGroupResponse = alive.call(ApiKey::JoinGroup, 7, &join(&member));
    assert_eq!(rejoin.error_code, 0);
    assert_eq!(rejoin.generation_id, generation + 1);
    assert_eq!(rejoin.members.len(), 1, "the silent member is gone");
    server.stop();
}
