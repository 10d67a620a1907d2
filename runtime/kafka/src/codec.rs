//! Request frames in, response frames out.
//!
//! A Kafka request frame is a 4-byte big-endian size followed by that many bytes: the request
//! header (api key, api version, correlation id, client id, and tagged fields in flexible
//! versions) and the body. [`decode_request`] turns one frame (without its size) into a
//! [`Decoded`] request. Invariants:
//! - it never panics and never allocates more than a small multiple of the frame's size,
//!   whatever the bytes (the fuzz test checks this); a frame that cannot be decoded is a
//!   [`DecodeError`] and the caller closes that one connection;
//! - a request for an API this server does not implement, or a version outside
//!   [`SUPPORTED`], is not an error here: it is reported as [`Body::UnsupportedVersion`] or
//!   [`Body::UnknownApi`] so the server can answer with the proper error code where the
//!   protocol allows it;
//! - [`SUPPORTED`] is the single source of the ranges advertised in ApiVersions.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, CreateTopicsRequest, DeleteGroupsRequest, DeleteTopicsRequest,
    DescribeConfigsRequest, DescribeGroupsRequest, FetchRequest, FetchResponse,
    FindCoordinatorRequest, HeartbeatRequest, InitProducerIdRequest, JoinGroupRequest,
    LeaveGroupRequest, ListGroupsRequest, ListOffsetsRequest, MetadataRequest, OffsetCommitRequest,
    OffsetFetchRequest, OffsetForLeaderEpochRequest, ProduceRequest, RequestHeader, ResponseHeader,
    SaslAuthenticateRequest, SaslHandshakeRequest, SyncGroupRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable};

/// The largest request accepted (Kafka's `socket.request.max.bytes` default).
pub const MAX_REQUEST_BYTES: usize = 100 * 1024 * 1024;

/// APIs and versions this server implements (each within what the protocol crate encodes).
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 13),
    (ApiKey::Fetch, 4, 18),
    (ApiKey::ListOffsets, 1, 10),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::DeleteGroups, 0, 2),
];

/// The supported version range of `key`, if it is implemented.
pub fn supported_range(key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|(_, min, max)| (*min, *max))
}

/// A decoded request body.
#[derive(Debug, Clone)]
pub enum Request {
    Produce(ProduceRequest),
    Fetch(FetchRequest),
    ListOffsets(ListOffsetsRequest),
    Metadata(MetadataRequest),
    OffsetCommit(OffsetCommitRequest),
    OffsetFetch(OffsetFetchRequest),
    FindCoordinator(FindCoordinatorRequest),
    JoinGroup(JoinGroupRequest),
    Heartbeat(HeartbeatRequest),
    LeaveGroup(LeaveGroupRequest),
    SyncGroup(SyncGroupRequest),
    DescribeGroups(DescribeGroupsRequest),
    ListGroups(ListGroupsRequest),
    SaslHandshake(SaslHandshakeRequest),
    SaslAuthenticate(SaslAuthenticateRequest),
    ApiVersions(ApiVersionsRequest),
    CreateTopics(CreateTopicsRequest),
    DeleteTopics(DeleteTopicsRequest),
    InitProducerId(InitProducerIdRequest),
    OffsetForLeaderEpoch(OffsetForLeaderEpochRequest),
    DescribeConfigs(DescribeConfigsRequest),
    DeleteGroups(DeleteGroupsRequest),
}

/// What a frame asked for.
#[derive(Debug, Clone)]
pub enum Body {
    Request(Box<Request>),
    /// A known API at a version (or an API) this server does not implement.
    UnsupportedVersion(ApiKey),
    /// An API key the protocol does not define.
    UnknownApi,
}

/// One decoded frame.
#[derive(Debug, Clone)]
pub struct Decoded {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
    pub body: Body,
}

/// Why a frame could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("frame of {0} bytes is shorter than a request header")]
    TooShort(usize),
    #[error("bad request header for api key {api_key} v{api_version}: {message}")]
    Header {
        api_key: i16,
        api_version: i16,
        message: String,
    },
    #[error("bad {api:?} v{api_version} request body: {message}")]
    Body {
        api: ApiKey,
        api_version: i16,
        message: String,
    },
}

/// Decodes one request frame (the bytes after the 4-byte size).
pub fn decode_request(frame: Bytes) -> Result<Decoded, DecodeError> {
    if frame.len() < 8 {
        return Err(DecodeError::TooShort(frame.len()));
    }
    let api_key = i16::from_be_bytes([frame[0], frame[1]]);
    let api_version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let Ok(key) = ApiKey::try_from(api_key) else {
        return Ok(Decoded {
            api_key,
            api_version,
            correlation_id,
            client_id: None,
            body: Body::UnknownApi,
        });
    };
    let unsupported = || Decoded {
        api_key,
        api_version,
        correlation_id,
        client_id: None,
        body: Body::UnsupportedVersion(key),
    };
    match supported_range(key) {
        Some((min, max)) if (min..=max).contains(&api_version) => {}
        _ => return Ok(unsupported()),
    }
    let mut buf = frame;
    let header_version = key.request_header_version(api_version);
    let header =
        RequestHeader::decode(&mut buf, header_version).map_err(|e| DecodeError::Header {
            api_key,
            api_version,
            message: e.to_string(),
        })?;
    let body = decode_body(key, api_version, &mut buf).map_err(|e| DecodeError::Body {
        api: key,
        api_version,
        message: e.to_string(),
    })?;
    Ok(Decoded {
        api_key,
        api_version,
        correlation_id,
        client_id: header.client_id.map(|c| c.to_string()),
        body: Body::Request(Box::new(body)),
    })
}

fn decode_body(key: ApiKey, v: i16, buf: &mut Bytes) -> anyhow::Result<Request> {
    Ok(match key {
        ApiKey::Produce => Request::Produce(ProduceRequest::decode(buf, v)?),
        ApiKey::Fetch => Request::Fetch(FetchRequest::decode(buf, v)?),
        ApiKey::ListOffsets => Request::ListOffsets(ListOffsetsRequest::decode(buf, v)?),
        ApiKey::Metadata => Request::Metadata(MetadataRequest::decode(buf, v)?),
        ApiKey::OffsetCommit => Request::OffsetCommit(OffsetCommitRequest::decode(buf, v)?),
        ApiKey::OffsetFetch => Request::OffsetFetch(OffsetFetchRequest::decode(buf, v)?),
        ApiKey::FindCoordinator => {
            Request::FindCoordinator(FindCoordinatorRequest::decode(buf, v)?)
        }
        ApiKey::JoinGroup => Request::JoinGroup(JoinGroupRequest::decode(buf, v)?),
        ApiKey::Heartbeat => Request::Heartbeat(HeartbeatRequest::decode(buf, v)?),
        ApiKey::LeaveGroup => Request::LeaveGroup(LeaveGroupRequest::decode(buf, v)?),
        ApiKey::SyncGroup => Request::SyncGroup(SyncGroupRequest::decode(buf, v)?),
        ApiKey::DescribeGroups => Request::DescribeGroups(DescribeGroupsRequest::decode(buf, v)?),
        ApiKey::ListGroups => Request::ListGroups(ListGroupsRequest::decode(buf, v)?),
        ApiKey::SaslHandshake => Request::SaslHandshake(SaslHandshakeRequest::decode(buf, v)?),
        ApiKey::SaslAuthenticate => {
            Request::SaslAuthenticate(SaslAuthenticateRequest::decode(buf, v)?)
        }
        ApiKey::ApiVersions => Request::ApiVersions(ApiVersionsRequest::decode(buf, v)?),
        ApiKey::CreateTopics => Request::CreateTopics(CreateTopicsRequest::decode(buf, v)?),
        ApiKey::DeleteTopics => Request::DeleteTopics(DeleteTopicsRequest::decode(buf, v)?),
        ApiKey::InitProducerId => Request::InitProducerId(InitProducerIdRequest::decode(buf, v)?),
        ApiKey::OffsetForLeaderEpoch => {
            Request::OffsetForLeaderEpoch(OffsetForLeaderEpochRequest::decode(buf, v)?)
        }
        ApiKey::DescribeConfigs => {
            Request::DescribeConfigs(DescribeConfigsRequest::decode(buf, v)?)
        }
        ApiKey::DeleteGroups => Request::DeleteGroups(DeleteGroupsRequest::decode(buf, v)?),
        other => anyhow::bail!("{other:?} is not implemented"),
    })
}

/// Encodes a response frame: size, response header (version from the api key and version),
/// body.
pub fn encode_response<R: Encodable>(
    key: ApiKey,
    api_version: i16,
    correlation_id: i32,
    body: &R,
) -> anyhow::Result<Bytes> {
    let header_version = key.response_header_version(api_version);
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    let size = header.compute_size(header_version)? + body.compute_size(api_version)?;
    let mut out = BytesMut::with_capacity(4 + size);
    out.put_i32(size as i32);
    header.encode(&mut out, header_version)?;
    body.encode(&mut out, api_version)?;
    Ok(out.freeze())
}

/// Record sets smaller than this are copied into the encoded response; larger ones are
/// written from their own buffers.
const SPLICE_MIN_BYTES: usize = 16 * 1024;

/// Encodes a Fetch response frame as pieces to write back to back: the encoded metadata, with
/// each large record set spliced in as its own piece instead of being copied into the encode
/// buffer (a 50 MB response would otherwise be copied once more, into freshly faulted pages).
///
/// Each large record set is first replaced by a unique 16-byte sentinel; the encoded frame is
/// then cut at each sentinel (found in order, right after its length prefix), the length prefix
/// is rewritten for the real size, and the frame size is recomputed. If anything does not match,
/// the response is encoded the plain way.
pub fn encode_fetch_response(
    api_version: i16,
    correlation_id: i32,
    mut resp: FetchResponse,
) -> anyhow::Result<Vec<Bytes>> {
    static NONCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nonce = NONCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ^ (std::process::id() as u64).rotate_left(32)
        ^ 0x9e37_79b9_7f4a_7c15;
    let sentinel = |i: usize| {
        let mut s = [0u8; 16];
        s[..8].copy_from_slice(b"\xffHWSPLCE");
        s[8..].copy_from_slice(
            &(nonce ^ (i as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9)).to_be_bytes(),
        );
        Bytes::copy_from_slice(&s)
    };
    let mut spliced: Vec<Bytes> = Vec::new();
    for t in resp.responses.iter_mut() {
        for p in t.partitions.iter_mut() {
            if p.records
                .as_ref()
                .is_some_and(|r| r.len() >= SPLICE_MIN_BYTES)
            {
                let records = p.records.replace(sentinel(spliced.len()));
                spliced.extend(records);
            }
        }
    }
    if spliced.is_empty() {
        return Ok(vec![encode_response(
            ApiKey::Fetch,
            api_version,
            correlation_id,
            &resp,
        )?]);
    }
    let frame = encode_response(ApiKey::Fetch, api_version, correlation_id, &resp)?;
    let flexible = api_version >= 12;
    let mut parts = Vec::with_capacity(2 + 3 * spliced.len());
    parts.push(Bytes::new()); // the frame size, filled in below
    let mut pos = 4;
    let mut cut_ok = true;
    for (i, records) in spliced.iter().enumerate() {
        let marker = sentinel(i);
        let Some(at) = frame[pos..]
            .windows(16)
            .position(|w| w == marker.as_ref())
            .map(|a| a + pos)
        else {
            cut_ok = false;
            break;
        };
        // The length prefix of a 16-byte record set: INT32 16, or UNSIGNED_VARINT 17.
        let (prefix_len, expected): (usize, &[u8]) = if flexible {
            (1, &[17])
        } else {
            (4, &[0, 0, 0, 16])
        };
        if at < pos + prefix_len || &frame[at - prefix_len..at] != expected {
            cut_ok = false;
            break;
        }
        parts.push(frame.slice(pos..at - prefix_len));
        let mut prefix = BytesMut::with_capacity(5);
        if flexible {
            let mut n = records.len() as u64 + 1;
            while n >= 0x80 {
                prefix.put_u8((n as u8 & 0x7f) | 0x80);
                n >>= 7;
            }
            prefix.put_u8(n as u8);
        } else {
            prefix.put_i32(records.len() as i32);
        }
        parts.push(prefix.freeze());
        parts.push(records.clone());
        pos = at + 16;
    }
    if !cut_ok {
        // Put the records back and encode the plain way.
        let mut it = spliced.into_iter();
        for t in resp.responses.iter_mut() {
            for p in t.partitions.iter_mut() {
                if p.records
                    .as_ref()
                    .is_some_and(|r| r.len() == 16 && r.starts_with(b"\xffHWSPLCE"))
                {
                    p.records = it.next();
                }
            }
        }
        return Ok(vec![encode_response(
            ApiKey::Fetch,
            api_version,
            correlation_id,
            &resp,
        )?]);
    }
    parts.push(frame.slice(pos..));
    let size: usize = parts[1..].iter().map(Bytes::len).sum();
    parts[0] = Bytes::copy_from_slice(&(size as i32).to_be_bytes());
    Ok(parts)
}

/// Encodes a request frame (used by tests and the benchmark's client side).
pub fn encode_request<R: Encodable>(
    key: ApiKey,
    api_version: i16,
    correlation_id: i32,
    client_id: &str,
    body: &R,
) -> anyhow::Result<Bytes> {
    let header_version = key.request_header_version(api_version);
    let mut header = RequestHeader::default();
    header.request_api_key = key as i16;
    header.request_api_version = api_version;
    header.correlation_id = correlation_id;
    header.client_id = Some(client_id.to_owned().into());
    let size = header.compute_size(header_version)? + body.compute_size(api_version)?;
    let mut out = BytesMut::with_capacity(4 + size);
    out.put_i32(size as i32);
    header.encode(&mut out, header_version)?;
    body.encode(&mut out, api_version)?;
    Ok(out.freeze())
}

/// Decodes a response frame body (after the 4-byte size) of `key` at `api_version`, returning
/// the correlation id and the body (tests' client side).
pub fn decode_response<R: Decodable>(
    key: ApiKey,
    api_version: i16,
    mut frame: Bytes,
) -> anyhow::Result<(i32, R)> {
    let header = ResponseHeader::decode(&mut frame, key.response_header_version(api_version))?;
    let body = R::decode(&mut frame, api_version)?;
    Ok((header.correlation_id, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::StrBytes;

    fn response(sizes: &[usize]) -> FetchResponse {
        let mut t = FetchableTopicResponse::default();
        t.topic = TopicName(StrBytes::from_static_str("orders"));
        t.partitions = sizes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mut p = PartitionData::default();
                p.partition_index = i as i32;
                p.high_watermark = 1000;
                p.records = Some(Bytes::from((0..*n).map(|b| b as u8).collect::<Vec<_>>()));
                p
            })
            .collect();
        let mut r = FetchResponse::default();
        r.responses = vec![t];
        r
    }

    #[test]
    fn spliced_fetch_responses_are_byte_identical_to_plain_encoding() {
        for version in [4i16, 7, 11, 12, 13, 16, 18] {
            for sizes in [
                vec![10usize],
                vec![100_000],
                vec![0, 20_000, 5, 300_000],
                vec![16_384; 3],
            ] {
                let plain = encode_response(ApiKey::Fetch, version, 9, &response(&sizes)).unwrap();
                let parts = encode_fetch_response(version, 9, response(&sizes)).unwrap();
                let joined: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
                assert_eq!(joined, plain.as_ref(), "v{version} {sizes:?}");
                let large = sizes.iter().filter(|n| **n >= SPLICE_MIN_BYTES).count();
                assert!(parts.len() > 3 * large, "v{version} {sizes:?} spliced");
            }
        }
    }
}
