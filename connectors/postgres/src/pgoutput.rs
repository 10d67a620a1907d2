//! Decoder for the `pgoutput` logical replication protocol (versions 1-4), the payload of each
//! XLogData message a walsender sends for a `pgoutput` slot.
//!
//! Invariants:
//! - decoding never panics: every read is bounds-checked and garbage yields a [`DecodeError`];
//!   counts read from the wire never drive allocations larger than the message itself;
//! - tuple column values are zero-copy slices ([`Bytes`]) of the input message;
//! - the decoder is stateful only in one respect: between StreamStart and StreamStop, the
//!   messages that may appear inside a stream (Relation, Type, Insert, Update, Delete, Truncate,
//!   Message) carry a leading transaction id, which is read into their `xid` field.

use bytes::Bytes;

use crate::lsn::Lsn;

/// Why a message could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("pgoutput message truncated: needed {needed} more byte(s) at offset {offset} of a {kind} message")]
    Truncated {
        kind: &'static str,
        offset: usize,
        needed: usize,
    },
    #[error("empty pgoutput message")]
    Empty,
    #[error("unknown pgoutput message type {0:?}")]
    UnknownMessage(char),
    #[error("pgoutput {kind} message: {detail}")]
    Malformed { kind: &'static str, detail: String },
}

/// One column value of a tuple.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TupleValue {
    /// SQL NULL.
    Null,
    /// An unchanged TOASTed value the server did not send.
    Unchanged,
    /// The value in the type's text output format.
    Text(Bytes),
    /// The value in the type's binary send format (`binary 'true'`).
    Binary(Bytes),
}

/// A row image: one value per column of the relation.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TupleData(pub Vec<TupleValue>);

/// `pg_class.relreplident`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaIdentity {
    Default,
    Nothing,
    Full,
    Index,
}

/// A column of a Relation message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelationColumn {
    /// Part of the replica identity (the key flag).
    pub is_key: bool,
    pub name: String,
    pub type_oid: u32,
    pub type_modifier: i32,
}

/// A Relation message: the shape of a table as the following change messages encode it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relation {
    pub xid: Option<u32>,
    pub id: u32,
    pub namespace: String,
    pub name: String,
    pub replica_identity: ReplicaIdentity,
    pub columns: Vec<RelationColumn>,
}

/// A decoded pgoutput message. Times are microseconds since 2000-01-01 UTC (PostgreSQL's
/// epoch), as on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PgOutputMessage {
    Begin {
        final_lsn: Lsn,
        commit_time: i64,
        xid: u32,
    },
    Commit {
        flags: u8,
        commit_lsn: Lsn,
        end_lsn: Lsn,
        commit_time: i64,
    },
    Origin {
        commit_lsn: Lsn,
        name: String,
    },
    Relation(Relation),
    Type {
        xid: Option<u32>,
        oid: u32,
        namespace: String,
        name: String,
    },
    Insert {
        xid: Option<u32>,
        relation_id: u32,
        new: TupleData,
    },
    Update {
        xid: Option<u32>,
        relation_id: u32,
        /// The old replica-identity columns ('K'), sent when they changed.
        key: Option<TupleData>,
        /// The whole old row ('O'), under REPLICA IDENTITY FULL.
        old: Option<TupleData>,
        new: TupleData,
    },
    Delete {
        xid: Option<u32>,
        relation_id: u32,
        key: Option<TupleData>,
        old: Option<TupleData>,
    },
    Truncate {
        xid: Option<u32>,
        /// Bit 1: CASCADE, bit 2: RESTART IDENTITY.
        options: u8,
        relation_ids: Vec<u32>,
    },
    Message {
        xid: Option<u32>,
        transactional: bool,
        lsn: Lsn,
        prefix: String,
        content: Bytes,
    },
    StreamStart {
        xid: u32,
        first_segment: bool,
    },
    StreamStop,
    StreamCommit {
        xid: u32,
        flags: u8,
        commit_lsn: Lsn,
        end_lsn: Lsn,
        commit_time: i64,
    },
    StreamAbort {
        xid: u32,
        subxid: u32,
        /// Only with `streaming 'parallel'` (protocol 4).
        abort_lsn: Option<Lsn>,
        abort_time: Option<i64>,
    },
}

/// Decodes a sequence of pgoutput messages from one replication stream.
#[derive(Clone, Debug, Default)]
pub struct Decoder {
    in_stream: bool,
}

impl Decoder {
    pub fn new() -> Self {
        Decoder::default()
    }

    /// True between StreamStart and StreamStop.
    pub fn in_stream(&self) -> bool {
        self.in_stream
    }

    /// Decodes one message (the payload of one XLogData).
    pub fn decode(&mut self, data: Bytes) -> Result<PgOutputMessage, DecodeError> {
        let tag = *data.first().ok_or(DecodeError::Empty)?;
        let kind = kind_name(tag);
        let mut r = Reader { data, pos: 1, kind };
        let in_stream = self.in_stream;
        let stream_xid = |r: &mut Reader| -> Result<Option<u32>, DecodeError> {
            if in_stream {
                Ok(Some(r.u32()?))
            } else {
                Ok(None)
            }
        };
        let msg = match tag {
            b'B' => PgOutputMessage::Begin {
                final_lsn: r.lsn()?,
                commit_time: r.i64()?,
                xid: r.u32()?,
            },
            b'C' => PgOutputMessage::Commit {
                flags: r.u8()?,
                commit_lsn: r.lsn()?,
                end_lsn: r.lsn()?,
                commit_time: r.i64()?,
            },
            b'O' => PgOutputMessage::Origin {
                commit_lsn: r.lsn()?,
                name: r.cstring()?,
            },
            b'R' => {
                let xid = stream_xid(&mut r)?;
                let id = r.u32()?;
                let namespace = r.cstring()?;
                let name = r.cstring()?;
                let replica_identity = match r.u8()? {
                    b'd' => ReplicaIdentity::Default,
                    b'n' => ReplicaIdentity::Nothing,
                    b'f' => ReplicaIdentity::Full,
                    b'i' => ReplicaIdentity::Index,
                    other => {
                        return Err(r.malformed(format!(
                            "unknown replica identity {:?}",
                            char::from(other)
                        )))
                    }
                };
                let ncols = r.count16()?;
                // Each column takes at least 10 bytes; never pre-allocate beyond what is there.
                let mut columns = Vec::with_capacity(ncols.min(r.remaining() / 10));
                for _ in 0..ncols {
                    let flags = r.u8()?;
                    let name = r.cstring()?;
                    let type_oid = r.u32()?;
                    let type_modifier = r.i32()?;
                    columns.push(RelationColumn {
                        is_key: flags & 1 != 0,
                        name,
                        type_oid,
                        type_modifier,
                    });
                }
                PgOutputMessage::Relation(Relation {
                    xid,
                    id,
                    namespace,
                    name,
                    replica_identity,
                    columns,
                })
            }
            b'Y' => PgOutputMessage::Type {
                xid: stream_xid(&mut r)?,
                oid: r.u32()?,
                namespace: r.cstring()?,
                name: r.cstring()?,
            },
            b'I' => {
                let xid = stream_xid(&mut r)?;
                let relation_id = r.u32()?;
                match r.u8()? {
                    b'N' => {}
                    other => {
                        return Err(r.malformed(format!(
                            "expected 'N' before the new tuple, found {:?}",
                            char::from(other)
                        )))
                    }
                }
                PgOutputMessage::Insert {
                    xid,
                    relation_id,
                    new: r.tuple()?,
                }
            }
            b'U' => {
                let xid = stream_xid(&mut r)?;
                let relation_id = r.u32()?;
                let mut key = None;
                let mut old = None;
                let mut marker = r.u8()?;
                if marker == b'K' || marker == b'O' {
                    let t = r.tuple()?;
                    if marker == b'K' {
                        key = Some(t);
                    } else {
                        old = Some(t);
                    }
                    marker = r.u8()?;
                }
                if marker != b'N' {
                    return Err(r.malformed(format!(
                        "expected 'N' before the new tuple, found {:?}",
                        char::from(marker)
                    )));
                }
                PgOutputMessage::Update {
                    xid,
                    relation_id,
                    key,
                    old,
                    new: r.tuple()?,
                }
            }
            b'D' => {
                let xid = stream_xid(&mut r)?;
                let relation_id = r.u32()?;
                let (key, old) = match r.u8()? {
                    b'K' => (Some(r.tuple()?), None),
                    b'O' => (None, Some(r.tuple()?)),
                    other => {
                        return Err(r.malformed(format!(
                            "expected 'K' or 'O' before the old tuple, found {:?}",
                            char::from(other)
                        )))
                    }
                };
                PgOutputMessage::Delete {
                    xid,
                    relation_id,
                    key,
                    old,
                }
            }
            b'T' => {
                let xid = stream_xid(&mut r)?;
                let n = r.u32()? as usize;
                let options = r.u8()?;
                if n > r.remaining() / 4 {
                    return Err(r.malformed(format!(
                        "{n} relations announced but only {} bytes left",
                        r.remaining()
                    )));
                }
                let mut relation_ids = Vec::with_capacity(n);
                for _ in 0..n {
                    relation_ids.push(r.u32()?);
                }
                PgOutputMessage::Truncate {
                    xid,
                    options,
                    relation_ids,
                }
            }
            b'M' => {
                let xid = stream_xid(&mut r)?;
                let flags = r.u8()?;
                let lsn = r.lsn()?;
                let prefix = r.cstring()?;
                let len = r.len32()?;
                let content = r.bytes(len)?;
                PgOutputMessage::Message {
                    xid,
                    transactional: flags & 1 != 0,
                    lsn,
                    prefix,
                    content,
                }
            }
            b'S' => {
                let xid = r.u32()?;
                let first_segment = r.u8()? == 1;
                self.in_stream = true;
                PgOutputMessage::StreamStart { xid, first_segment }
            }
            b'E' => {
                self.in_stream = false;
                PgOutputMessage::StreamStop
            }
            b'c' => PgOutputMessage::StreamCommit {
                xid: r.u32()?,
                flags: r.u8()?,
                commit_lsn: r.lsn()?,
                end_lsn: r.lsn()?,
                commit_time: r.i64()?,
            },
            b'A' => {
                let xid = r.u32()?;
                let subxid = r.u32()?;
                let (abort_lsn, abort_time) = if r.remaining() >= 16 {
                    (Some(r.lsn()?), Some(r.i64()?))
                } else {
                    (None, None)
                };
                PgOutputMessage::StreamAbort {
                    xid,
                    subxid,
                    abort_lsn,
                    abort_time,
                }
            }
            other => return Err(DecodeError::UnknownMessage(char::from(other))),
        };
        Ok(msg)
    }
}

fn kind_name(tag: u8) -> &'static str {
    match tag {
        b'B' => "Begin",
        b'C' => "Commit",
        b'O' => "Origin",
        b'R' => "Relation",
        b'Y' => "Type",
        b'I' => "Insert",
        b'U' => "Update",
        b'D' => "Delete",
        b'T' => "Truncate",
        b'M' => "Message",
        b'S' => "StreamStart",
        b'E' => "StreamStop",
        b'c' => "StreamCommit",
        b'A' => "StreamAbort",
        _ => "unknown",
    }
}

/// A bounds-checked cursor over one message.
struct Reader {
    data: Bytes,
    pos: usize,
    kind: &'static str,
}

impl Reader {
    fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }
    fn take(&mut self, n: usize) -> Result<&[u8], DecodeError> {
        if self.remaining() < n {
            return Err(DecodeError::Truncated {
                kind: self.kind,
                offset: self.pos,
                needed: n - self.remaining(),
            });
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn malformed(&self, detail: String) -> DecodeError {
        DecodeError::Malformed {
            kind: self.kind,
            detail,
        }
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(self.u32()? as i32)
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }
    fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(self.u64()? as i64)
    }
    fn lsn(&mut self) -> Result<Lsn, DecodeError> {
        Ok(Lsn(self.u64()?))
    }
    /// A 16-bit count (never negative on the wire).
    fn count16(&mut self) -> Result<usize, DecodeError> {
        Ok(usize::from(self.u16()?))
    }
    /// A 32-bit length that must be non-negative.
    fn len32(&mut self) -> Result<usize, DecodeError> {
        let v = self.i32()?;
        usize::try_from(v).map_err(|_| self.malformed(format!("negative length {v}")))
    }
    fn bytes(&mut self, n: usize) -> Result<Bytes, DecodeError> {
        if self.remaining() < n {
            return Err(DecodeError::Truncated {
                kind: self.kind,
                offset: self.pos,
                needed: n - self.remaining(),
            });
        }
        let b = self.data.slice(self.pos..self.pos + n);
        self.pos += n;
        Ok(b)
    }
    fn cstring(&mut self) -> Result<String, DecodeError> {
        let rest = &self.data[self.pos..];
        let end = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or(DecodeError::Truncated {
                kind: self.kind,
                offset: self.data.len(),
                needed: 1,
            })?;
        let s = String::from_utf8_lossy(&rest[..end]).into_owned();
        self.pos += end + 1;
        Ok(s)
    }
    fn tuple(&mut self) -> Result<TupleData, DecodeError> {
        let n = self.count16()?;
        let mut values = Vec::with_capacity(n.min(self.remaining()));
        for _ in 0..n {
            let v = match self.u8()? {
                b'n' => TupleValue::Null,
                b'u' => TupleValue::Unchanged,
                b't' => {
                    let len = self.len32()?;
                    TupleValue::Text(self.bytes(len)?)
                }
                b'b' => {
                    let len = self.len32()?;
                    TupleValue::Binary(self.bytes(len)?)
                }
                other => {
                    return Err(self
                        .malformed(format!("unknown tuple column kind {:?}", char::from(other))))
                }
            };
            values.push(v);
        }
        Ok(TupleData(values))
    }
}

/// Microseconds between 1970-01-01 and 2000-01-01 (PostgreSQL's epoch).
pub const PG_EPOCH_OFFSET_MICROS: i64 = 946_684_800_000_000;

/// A PostgreSQL timestamp (µs since 2000-01-01) as µs since the Unix epoch.
pub fn pg_time_to_unix_micros(pg_micros: i64) -> i64 {
    pg_micros.saturating_add(PG_EPOCH_OFFSET_MICROS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(parts: &[&[u8]]) -> Bytes {
        Bytes::from(parts.concat())
    }

    #[test]
    fn begin_commit_and_insert() {
        let mut d = Decoder::new();
        let begin = msg(&[
            b"B",
            &0x1234u64.to_be_bytes(),
            &5i64.to_be_bytes(),
            &77u32.to_be_bytes(),
        ]);
        assert_eq!(
            d.decode(begin).unwrap(),
            PgOutputMessage::Begin {
                final_lsn: Lsn(0x1234),
                commit_time: 5,
                xid: 77
            }
        );
        let insert = msg(&[
            b"I",
            &16384u32.to_be_bytes(),
            b"N",
            &3u16.to_be_bytes(),
            b"b",
            &4i32.to_be_bytes(),
            &7i32.to_be_bytes(),
            b"n",
            b"t",
            &2i32.to_be_bytes(),
            b"hi",
        ]);
        match d.decode(insert).unwrap() {
            PgOutputMessage::Insert {
                xid: None,
                relation_id: 16384,
                new,
            } => {
                assert_eq!(
                    new.0,
                    vec![
                        TupleValue::Binary(Bytes::from_static(&[0, 0, 0, 7])),
                        TupleValue::Null,
                        TupleValue::Text(Bytes::from_static(b"hi")),
                    ]
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn stream_messages_carry_a_leading_xid() {
        let mut d = Decoder::new();
        d.decode(msg(&[b"S", &900u32.to_be_bytes(), &[1]])).unwrap();
        assert!(d.in_stream());
        let ins = msg(&[
            b"I",
            &900u32.to_be_bytes(),
            &1u32.to_be_bytes(),
            b"N",
            &0u16.to_be_bytes(),
        ]);
        assert!(matches!(
            d.decode(ins.clone()).unwrap(),
            PgOutputMessage::Insert {
                xid: Some(900),
                relation_id: 1,
                ..
            }
        ));
        d.decode(msg(&[b"E"])).unwrap();
        assert!(!d.in_stream());
        // Outside a stream the same bytes mean relation 900 and then garbage.
        assert!(d.decode(ins).is_err());
    }

    #[test]
    fn garbage_never_panics() {
        // Every prefix of valid messages and a deterministic pseudo-random byte soup.
        let samples: Vec<Bytes> = vec![
            msg(&[
                b"R",
                &1u32.to_be_bytes(),
                b"public\0t\0d",
                &1u16.to_be_bytes(),
                &[1],
                b"id\0",
                &23u32.to_be_bytes(),
                &(-1i32).to_be_bytes(),
            ]),
            msg(&[
                b"U",
                &1u32.to_be_bytes(),
                b"K",
                &1u16.to_be_bytes(),
                b"n",
                b"N",
                &1u16.to_be_bytes(),
                b"u",
            ]),
            msg(&[
                b"T",
                &2u32.to_be_bytes(),
                &[0],
                &1u32.to_be_bytes(),
                &2u32.to_be_bytes(),
            ]),
            msg(&[
                b"M",
                &[1],
                &9u64.to_be_bytes(),
                b"p\0",
                &3i32.to_be_bytes(),
                b"abc",
            ]),
        ];
        for s in &samples {
            Decoder::new().decode(s.clone()).unwrap();
            for cut in 0..s.len() {
                let _ = Decoder::new().decode(s.slice(..cut));
            }
        }
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..20_000 {
            let mut buf = Vec::new();
            let len = (x % 64) as usize;
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                buf.push((x & 0xff) as u8);
            }
            let tags = b"BCORYIUDTMSEcA";
            if let Some(first) = buf.first_mut() {
                *first = tags[(x % tags.len() as u64) as usize];
            }
            let mut d = Decoder::new();
            let _ = d.decode(Bytes::from(buf.clone()));
            let _ = d.decode(Bytes::from(buf));
        }
        // Announced counts larger than the message are errors, not huge allocations.
        let huge = msg(&[b"T", &u32::MAX.to_be_bytes(), &[0]]);
        assert!(Decoder::new().decode(huge).is_err());
        let neg = msg(&[
            b"I",
            &1u32.to_be_bytes(),
            b"N",
            &1u16.to_be_bytes(),
            b"t",
            &(-5i32).to_be_bytes(),
        ]);
        assert!(Decoder::new().decode(neg).is_err());
        assert_eq!(Decoder::new().decode(Bytes::new()), Err(DecodeError::Empty));
        assert_eq!(
            Decoder::new().decode(msg(&[b"z"])),
            Err(DecodeError::UnknownMessage('z'))
        );
    }
}
