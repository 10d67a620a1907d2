//! Fuzz-style test of the request decoder: random frames, and valid frames of every supported
//! API with random mutations (bit flips, truncations, splices, huge lengths), for a bounded
//! time. The decoder must never panic, never hang and never reserve memory for lengths the
//! frame cannot hold (a huge array length once made the allocator abort the process).
//!
//! Time budget: `HEADWATER_FUZZ_SECS` (default 3 s); the seed is printed so a failure can be
//! replayed with `HEADWATER_FUZZ_SEED`. Run longer with e.g.
//! `HEADWATER_FUZZ_SECS=600 cargo test -p headwater-kafka --test fuzz_decoder`.

use std::time::{Duration, Instant};

use bytes::Bytes;
use headwater_kafka::codec::{decode_request, encode_request, Body, SUPPORTED};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, StrBytes};

/// xorshift64*: deterministic, dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn frame_body<R: Encodable>(key: ApiKey, version: i16, req: &R) -> Option<Vec<u8>> {
    // Strip the 4-byte size: the decoder takes the frame after it.
    encode_request(key, version, 1, "fuzz", req)
        .ok()
        .map(|b| b[4..].to_vec())
}

/// Valid frames of every supported API and version, as mutation seeds.
fn seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let topic = || TopicName(StrBytes::from_static_str("orders"));
    for (key, min, max) in SUPPORTED {
        for v in *min..=*max {
            let frame = match key {
                ApiKey::Fetch => {
                    let mut p = fetch_request::FetchPartition::default();
                    p.fetch_offset = 5;
                    p.partition_max_bytes = 1 << 20;
                    let mut t = fetch_request::FetchTopic::default();
                    t.topic = topic();
                    t.partitions = vec![p];
                    let mut r = FetchRequest::default();
                    r.topics = vec![t];
                    frame_body(*key, v, &r)
                }
                ApiKey::Produce => {
                    let mut p = produce_request::PartitionProduceData::default();
                    p.records = Some(Bytes::from_static(&[0u8; 70]));
                    let mut t = produce_request::TopicProduceData::default();
                    t.name = topic();
                    t.partition_data = vec![p];
                    let mut r = ProduceRequest::default();
                    r.topic_data = vec![t];
                    frame_body(*key, v, &r)
                }
                ApiKey::Metadata => {
                    let mut t = metadata_request::MetadataRequestTopic::default();
                    t.name = Some(topic());
                    let mut r = MetadataRequest::default();
                    r.topics = Some(vec![t]);
                    frame_body(*key, v, &r)
                }
                ApiKey::JoinGroup => {
                    let mut p = join_group_request::JoinGroupRequestProtocol::default();
                    p.name = StrBytes::from_static_str("range");
                    p.metadata = Bytes::from_static(b"\x00\x01meta");
                    let mut r = JoinGroupRequest::default();
                    r.group_id = GroupId(StrBytes::from_static_str("g"));
                    r.protocol_type = StrBytes::from_static_str("consumer");
                    r.protocols = vec![p];
                    frame_body(*key, v, &r)
                }
                ApiKey::OffsetCommit => {
                    let mut p = offset_commit_request::OffsetCommitRequestPartition::default();
                    p.committed_offset = 9;
                    let mut t = offset_commit_request::OffsetCommitRequestTopic::default();
                    t.name = topic();
                    t.partitions = vec![p];
                    let mut r = OffsetCommitRequest::default();
                    r.group_id = GroupId(StrBytes::from_static_str("g"));
                    r.topics = vec![t];
                    frame_body(*key, v, &r)
                }
                ApiKey::ListOffsets => frame_body(*key, v, &ListOffsetsRequest::default()),
                ApiKey::OffsetFetch => frame_body(*key, v, &OffsetFetchRequest::default()),
                ApiKey::FindCoordinator => frame_body(*key, v, &FindCoordinatorRequest::default()),
                ApiKey::Heartbeat => frame_body(*key, v, &HeartbeatRequest::default()),
                ApiKey::LeaveGroup => frame_body(*key, v, &LeaveGroupRequest::default()),
                ApiKey::SyncGroup => frame_body(*key, v, &SyncGroupRequest::default()),
                ApiKey::DescribeGroups => frame_body(*key, v, &DescribeGroupsRequest::default()),
                ApiKey::ListGroups => frame_body(*key, v, &ListGroupsRequest::default()),
                ApiKey::SaslHandshake => frame_body(*key, v, &SaslHandshakeRequest::default()),
                ApiKey::ApiVersions => frame_body(*key, v, &ApiVersionsRequest::default()),
                ApiKey::CreateTopics => frame_body(*key, v, &CreateTopicsRequest::default()),
                ApiKey::DeleteTopics => frame_body(*key, v, &DeleteTopicsRequest::default()),
                ApiKey::InitProducerId => frame_body(*key, v, &InitProducerIdRequest::default()),
                ApiKey::OffsetForLeaderEpoch => {
                    frame_body(*key, v, &OffsetForLeaderEpochRequest::default())
                }
                ApiKey::DescribeConfigs => frame_body(*key, v, &DescribeConfigsRequest::default()),
                ApiKey::DeleteGroups => frame_body(*key, v, &DeleteGroupsRequest::default()),
                _ => None,
            };
            if let Some(f) = frame {
                out.push(f);
            }
        }
    }
    out
}

fn mutate(rng: &mut Rng, seed: &[u8], seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut f = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            0 if !f.is_empty() => {
                let i = rng.below(f.len());
                f[i] ^= 1 << rng.below(8);
            }
            1 if !f.is_empty() => {
                let i = rng.below(f.len());
                f[i] = rng.next() as u8;
            }
            2 => f.truncate(rng.below(f.len() + 1)),
            3 if f.len() > 12 => {
                // A huge (or negative) length somewhere past the header.
                let i = 8 + rng.below(f.len() - 11);
                let big = [0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f];
                let n = (f.len() - i).min(4 + rng.below(4));
                f[i..i + n].copy_from_slice(&big[..n]);
            }
            4 => {
                let other = &seeds[rng.below(seeds.len())];
                let cut = rng.below(other.len() + 1);
                let at = rng.below(f.len() + 1);
                f.truncate(at);
                f.extend_from_slice(&other[cut..]);
            }
            _ => {
                let n = rng.below(16);
                for _ in 0..n {
                    f.push(rng.next() as u8);
                }
            }
        }
    }
    f
}

#[test]
fn random_and_mutated_frames_never_panic() {
    let secs: u64 = std::env::var("HEADWATER_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let seed: u64 = std::env::var("HEADWATER_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        });
    println!("fuzz seed {seed} for {secs}s");
    let mut rng = Rng(seed);
    let seeds = seeds();
    assert!(seeds.len() > 100, "seeds for every API version");
    // Every seed decodes as the request it is.
    for s in &seeds {
        let d = decode_request(Bytes::from(s.clone())).expect("valid seed decodes");
        assert!(matches!(d.body, Body::Request(_)));
    }
    let deadline = Instant::now() + Duration::from_secs(secs);
    let (mut total, mut decoded, mut slowest) = (0u64, 0u64, Duration::ZERO);
    while Instant::now() < deadline {
        let frame = if rng.below(4) == 0 {
            let n = rng.below(64);
            let mut f: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            if f.len() >= 4 && rng.below(2) == 0 {
                // A real API key and version keep random bodies reaching the body decoders.
                let (k, _, max) = SUPPORTED[rng.below(SUPPORTED.len())];
                f[0..2].copy_from_slice(&(k as i16).to_be_bytes());
                f[2..4].copy_from_slice(&(rng.below(max as usize + 1) as i16).to_be_bytes());
            }
            f
        } else {
            let s = &seeds[rng.below(seeds.len())];
            mutate(&mut rng, s, &seeds)
        };
        let started = Instant::now();
        let result = std::panic::catch_unwind(|| decode_request(Bytes::from(frame.clone())));
        let took = started.elapsed();
        slowest = slowest.max(took);
        match result {
            Ok(Ok(_)) => decoded += 1,
            Ok(Err(_)) => {}
            Err(_) => panic!("decoder panicked on {frame:02x?} (seed {seed})"),
        }
        assert!(
            took < Duration::from_secs(1),
            "decoding {} bytes took {took:?}: {frame:02x?} (seed {seed})",
            frame.len()
        );
        total += 1;
    }
    println!("{total} frames, {decoded} decoded, slowest {slowest:?}");
    assert!(total > 1000, "the fuzz loop ran ({total} frames)");
}

#[test]
fn a_huge_array_length_is_a_decode_error_not_an_abort() {
    // Fetch v4: replica id, max wait, min bytes, max bytes, isolation, then the topics array
    // with length 2^31-1 and nothing after it.
    let mut f = Vec::new();
    f.extend_from_slice(&(ApiKey::Fetch as i16).to_be_bytes());
    f.extend_from_slice(&4i16.to_be_bytes());
    f.extend_from_slice(&1i32.to_be_bytes());
    f.extend_from_slice(&(-1i16).to_be_bytes()); // client id: null
    f.extend_from_slice(&(-1i32).to_be_bytes());
    f.extend_from_slice(&500i32.to_be_bytes());
    f.extend_from_slice(&1i32.to_be_bytes());
    f.extend_from_slice(&(1i32 << 20).to_be_bytes());
    f.push(0);
    f.extend_from_slice(&i32::MAX.to_be_bytes());
    assert!(decode_request(Bytes::from(f)).is_err());

    // The same in a flexible version (compact array, unsigned varint length ~2^32).
    let mut f = Vec::new();
    f.extend_from_slice(&(ApiKey::Metadata as i16).to_be_bytes());
    f.extend_from_slice(&12i16.to_be_bytes());
    f.extend_from_slice(&1i32.to_be_bytes());
    f.extend_from_slice(&(-1i16).to_be_bytes()); // client id
    f.push(0); // header tagged fields
    f.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    assert!(decode_request(Bytes::from(f)).is_err());
}
