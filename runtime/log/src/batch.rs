//! Kafka's RecordBatch v2 ("magic 2") format: building batches, checking them, reading records.
//!
//! The log stores batches exactly in this format so a Kafka Fetch can be answered with the
//! segment bytes as they are. Layout (big-endian, offsets in bytes):
//!
//! ```text
//!  0 baseOffset i64        | 8 batchLength i32 (bytes after this field) | 12 partitionLeaderEpoch i32
//! 16 magic i8 (=2)         | 17 crc u32 (CRC-32C of bytes 21..end)       | 21 attributes i16
//! 23 lastOffsetDelta i32   | 27 baseTimestamp i64 | 35 maxTimestamp i64 | 43 producerId i64
//! 51 producerEpoch i16     | 53 baseSequence i32  | 57 recordCount i32  | 61 records...
//! ```
//!
//! Invariants: a batch built here always verifies (magic 2, consistent length, correct CRC);
//! the base offset is outside the CRC so the log assigns it at append time with
//! [`set_base_offset`] without re-checksumming; [`verify`] is the single gate every byte read
//! back from disk passes before it is trusted.

use std::borrow::Cow;
use std::io::{Read, Write};
use std::sync::Arc;

use crate::lz4_repeats::{Repeat, RepeatEncoder};

use crate::varint::{
    read_varint, read_varlong, varint_len, varlong_len, write_varint, write_varlong,
};

/// Size of the fixed batch header.
pub const HEADER_SIZE: usize = 61;
/// Bytes before the `batchLength`-counted part (baseOffset + batchLength).
pub const LOG_OVERHEAD: usize = 12;
const CRC_START: usize = 21;
const MAGIC: i8 = 2;

const COMPRESSION_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_FLAG: i16 = 0x08;
const TRANSACTIONAL_FLAG: i16 = 0x10;
const CONTROL_FLAG: i16 = 0x20;
const DELETE_HORIZON_FLAG: i16 = 0x40;

/// Producer id meaning "no producer" (non-transactional, non-idempotent batches).
pub const NO_PRODUCER_ID: i64 = -1;

/// Batch compression codecs (attribute bits 0-2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Compression {
    pub fn from_attributes(attributes: i16) -> Result<Self, BatchError> {
        Ok(match attributes & COMPRESSION_MASK {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            other => {
                return Err(BatchError::Corrupt(format!(
                    "unknown compression codec {other}"
                )))
            }
        })
    }
    fn attribute_bits(self) -> i16 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }
    /// Kafka's `compression.type` name.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
    /// Parses a codec name (`none|gzip|snappy|lz4|zstd`); `uncompressed` is accepted for `none`.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "none" | "uncompressed" => Compression::None,
            "gzip" => Compression::Gzip,
            "snappy" => Compression::Snappy,
            "lz4" => Compression::Lz4,
            "zstd" => Compression::Zstd,
            _ => return None,
        })
    }
}

/// Why bytes are not a valid batch.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BatchError {
    /// Fewer bytes than the header or the declared length needs (a torn tail when on disk).
    #[error("incomplete batch: need {needed} bytes, have {available}")]
    Incomplete { needed: usize, available: usize },
    #[error("corrupt batch: {0}")]
    Corrupt(String),
    #[error("compression error: {0}")]
    Compression(String),
}

/// The fixed header of a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

impl BatchHeader {
    /// Parses the header without checking the CRC (see [`verify`]).
    pub fn parse(buf: &[u8]) -> Result<Self, BatchError> {
        if buf.len() < HEADER_SIZE {
            return Err(BatchError::Incomplete {
                needed: HEADER_SIZE,
                available: buf.len(),
            });
        }
        let header = BatchHeader {
            base_offset: i64::from_be_bytes(buf[0..8].try_into().unwrap_or_default()),
            batch_length: i32::from_be_bytes(buf[8..12].try_into().unwrap_or_default()),
            partition_leader_epoch: i32::from_be_bytes(buf[12..16].try_into().unwrap_or_default()),
            magic: buf[16] as i8,
            crc: u32::from_be_bytes(buf[17..21].try_into().unwrap_or_default()),
            attributes: i16::from_be_bytes(buf[21..23].try_into().unwrap_or_default()),
            last_offset_delta: i32::from_be_bytes(buf[23..27].try_into().unwrap_or_default()),
            base_timestamp: i64::from_be_bytes(buf[27..35].try_into().unwrap_or_default()),
            max_timestamp: i64::from_be_bytes(buf[35..43].try_into().unwrap_or_default()),
            producer_id: i64::from_be_bytes(buf[43..51].try_into().unwrap_or_default()),
            producer_epoch: i16::from_be_bytes(buf[51..53].try_into().unwrap_or_default()),
            base_sequence: i32::from_be_bytes(buf[53..57].try_into().unwrap_or_default()),
            record_count: i32::from_be_bytes(buf[57..61].try_into().unwrap_or_default()),
        };
        if header.magic != MAGIC {
            return Err(BatchError::Corrupt(format!(
                "unsupported magic {}",
                header.magic
            )));
        }
        if (header.batch_length as i64) < (HEADER_SIZE - LOG_OVERHEAD) as i64 {
            return Err(BatchError::Corrupt(format!(
                "batch length {} too small",
                header.batch_length
            )));
        }
        if header.last_offset_delta < 0 || header.record_count < 0 {
            return Err(BatchError::Corrupt(
                "negative offset delta or record count".into(),
            ));
        }
        Ok(header)
    }
    /// Bytes the whole batch occupies.
    pub fn total_size(&self) -> usize {
        LOG_OVERHEAD + self.batch_length as usize
    }
    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }
    /// The offset following this batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset() + 1
    }
    pub fn compression(&self) -> Result<Compression, BatchError> {
        Compression::from_attributes(self.attributes)
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_FLAG != 0
    }
    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_FLAG != 0
    }
    pub fn has_log_append_time(&self) -> bool {
        self.attributes & TIMESTAMP_TYPE_FLAG != 0
    }
    pub fn has_delete_horizon(&self) -> bool {
        self.attributes & DELETE_HORIZON_FLAG != 0
    }
    /// The delete horizon compaction stored in the batch (KIP-534): when set, the base
    /// timestamp field holds it and record timestamp deltas are relative to it.
    pub fn delete_horizon(&self) -> Option<i64> {
        self.has_delete_horizon().then_some(self.base_timestamp)
    }
}

/// Checks a complete batch at the start of `buf`: header sanity, length and CRC-32C.
/// Returns the header; `buf` may extend past the batch.
pub fn verify(buf: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = BatchHeader::parse(buf)?;
    let total = header.total_size();
    if buf.len() < total {
        return Err(BatchError::Incomplete {
            needed: total,
            available: buf.len(),
        });
    }
    let actual = crc32c::crc32c(&buf[CRC_START..total]);
    if actual != header.crc {
        return Err(BatchError::Corrupt(format!(
            "CRC mismatch at base offset {}: stored {:08x}, computed {actual:08x}",
            header.base_offset, header.crc
        )));
    }
    Ok(header)
}

/// Overwrites the base offset of a built batch (not covered by the CRC).
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) {
    batch[0..8].copy_from_slice(&base_offset.to_be_bytes());
}

/// A record header (key and optional value bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader<'a> {
    pub key: &'a str,
    pub value: Option<&'a [u8]>,
}

/// A key or value (`None`: null) and the shared spans to insert into it (see
/// [`BatchBuilder::append_with_spans`]).
type BytesWithSpans<'a> = (Option<&'a [u8]>, &'a [(usize, Arc<[u8]>)]);

/// A record's headers in pieces: single headers, and runs already in Kafka's record-header
/// encoding (each header's key length, key, value length and value; see
/// [`encode_record_headers`]), which a caller keeps for headers every record carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderPart<'a> {
    One(RecordHeader<'a>),
    /// `count` headers encoded as `bytes`.
    Encoded {
        count: usize,
        bytes: &'a [u8],
    },
}

/// Appends `headers` in Kafka's record-header encoding (without their count) to `out`: what
/// a [`HeaderPart::Encoded`] holds.
pub fn encode_record_headers<'h>(
    out: &mut Vec<u8>,
    headers: impl Iterator<Item = RecordHeader<'h>>,
) {
    for h in headers {
        write_record_header(out, h);
    }
}

fn write_record_header(out: &mut Vec<u8>, h: RecordHeader<'_>) {
    write_varint(out, h.key.len() as i32);
    out.extend_from_slice(h.key.as_bytes());
    write_bytes(out, h.value);
}

/// The encoded length of one header.
fn header_len(h: RecordHeader<'_>) -> usize {
    let value = match h.value {
        Some(v) => varint_len(v.len() as i32) + v.len(),
        None => varint_len(-1),
    };
    varint_len(h.key.len() as i32) + h.key.len() + value
}

/// The producer fields of a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerFields {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub transactional: bool,
}

impl Default for ProducerFields {
    fn default() -> Self {
        ProducerFields {
            producer_id: NO_PRODUCER_ID,
            producer_epoch: -1,
            base_sequence: -1,
            transactional: false,
        }
    }
}

/// Builds one batch, appending records with offset deltas 0, 1, 2, ...
///
/// With LZ4 the records are compressed as they come: `records` holds the LZ4 frame so far
/// (frame descriptor, finished blocks) followed, from `staged_from`, by the records not yet
/// compressed, and each time a block's worth is staged it is compressed in place. A batch's
/// uncompressed bytes are so never more than one LZ4 block at a time and are compressed while
/// still in the cache of the thread that wrote them, instead of being written out to a
/// batch-sized buffer that another thread reads back. Other codecs compress the whole section
/// when the batch is built.
pub struct BatchBuilder {
    records: Vec<u8>,
    /// Where the uncompressed staged records start in `records` (0 unless incremental LZ4).
    staged_from: usize,
    /// With LZ4: shared value spans of the staged block stored by reference, as repeats of
    /// an earlier copy (positions relative to `staged_from`; see [`crate::lz4_repeats`]).
    repeats: Vec<Repeat>,
    /// The bytes `repeats` stand for.
    repeated_len: usize,
    /// Shared spans staged in this block and where each was last staged (logical position in
    /// the staged block), at most [`KNOWN_SPANS`].
    known_spans: Vec<(Arc<[u8]>, usize)>,
    /// Uncompressed bytes already compressed into finished blocks.
    compressed_input: usize,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    producer: ProducerFields,
    compression: Compression,
    control: bool,
}

impl BatchBuilder {
    pub fn new(compression: Compression, producer: ProducerFields) -> Self {
        Self::with_buffer(compression, producer, Vec::with_capacity(16 * 1024))
    }

    /// A builder that writes its records into `buffer` (emptied first), so a caller can reuse
    /// the allocation of an earlier builder (see [`BatchBuilder::build_into`]).
    pub fn with_buffer(
        compression: Compression,
        producer: ProducerFields,
        mut buffer: Vec<u8>,
    ) -> Self {
        buffer.clear();
        let staged_from = if compression == Compression::Lz4 {
            buffer.extend_from_slice(&LZ4_FRAME_HEADER);
            LZ4_FRAME_HEADER.len()
        } else {
            0
        };
        BatchBuilder {
            records: buffer,
            staged_from,
            repeats: Vec::new(),
            repeated_len: 0,
            known_spans: Vec::new(),
            compressed_input: 0,
            count: 0,
            base_timestamp: -1,
            max_timestamp: -1,
            producer,
            compression,
            control: false,
        }
    }

    pub fn record_count(&self) -> usize {
        self.count as usize
    }
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// Uncompressed size of the batch so far (header included).
    pub fn size_bytes(&self) -> usize {
        HEADER_SIZE + self.compressed_input + self.staged_len()
    }

    /// Uncompressed bytes staged (repeats included).
    fn staged_len(&self) -> usize {
        self.records.len() - self.staged_from + self.repeated_len
    }

    /// Appends a record with the next offset delta; `timestamp` is milliseconds since the epoch.
    pub fn append(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[RecordHeader<'_>],
    ) {
        self.append_with_prefix(timestamp, key, None, value, headers);
    }

    /// [`BatchBuilder::append`] of a record whose value is `value_prefix ++ value` (`value`
    /// must then be given): [`BatchBuilder::append_with_spans`] with one span at the start.
    pub fn append_with_prefix(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value_prefix: Option<&Arc<[u8]>>,
        value: Option<&[u8]>,
        headers: &[RecordHeader<'_>],
    ) {
        match value_prefix {
            Some(p) => {
                self.append_with_spans(timestamp, key, &[], value, &[(0, p.clone())], headers)
            }
            None => self.append_with_spans(timestamp, key, &[], value, &[], headers),
        }
    }

    /// [`BatchBuilder::append`] of a record whose key and value are `key` and `value` with
    /// shared byte strings inserted: each `(at, bytes)` of `key_spans` (in increasing `at`
    /// order, `at <= key.len()`) goes before byte `at` of `key`, and likewise `value_spans`
    /// into `value` (spans of an absent key or value are ignored). With LZ4, a span (of at least [`MIN_REPEATED_SPAN`]
    /// bytes) that is the same `Arc` as one staged earlier in the same block, at most 64 KiB
    /// back, is not copied: the block stores it as a match reaching back to that copy (see
    /// [`crate::lz4_repeats`]), which costs neither the copy nor the compressor's pass over
    /// it. Such blocks end at record boundaries and hold up to [`LZ4_REPEAT_BLOCK`] bytes;
    /// either way the batch holds the same records.
    pub fn append_with_spans(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        key_spans: &[(usize, Arc<[u8]>)],
        value: Option<&[u8]>,
        value_spans: &[(usize, Arc<[u8]>)],
        headers: &[RecordHeader<'_>],
    ) {
        let header_count = headers.len();
        let header_bytes = headers.iter().map(|h| header_len(*h)).sum();
        self.append_parts(
            timestamp,
            (key, key_spans),
            (value, value_spans),
            (header_count, header_bytes),
            |out| {
                for h in headers {
                    write_record_header(out, *h);
                }
            },
        );
    }

    /// [`BatchBuilder::append_with_spans`] with headers in [`HeaderPart`]s.
    pub fn append_with_header_parts(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        key_spans: &[(usize, Arc<[u8]>)],
        value: Option<&[u8]>,
        value_spans: &[(usize, Arc<[u8]>)],
        headers: &[HeaderPart<'_>],
    ) {
        let (mut header_count, mut header_bytes) = (0, 0);
        for part in headers {
            match part {
                HeaderPart::One(h) => {
                    header_count += 1;
                    header_bytes += header_len(*h);
                }
                HeaderPart::Encoded { count, bytes } => {
                    header_count += count;
                    header_bytes += bytes.len();
                }
            }
        }
        self.append_parts(
            timestamp,
            (key, key_spans),
            (value, value_spans),
            (header_count, header_bytes),
            |out| {
                for part in headers {
                    match part {
                        HeaderPart::One(h) => write_record_header(out, *h),
                        HeaderPart::Encoded { bytes, .. } => out.extend_from_slice(bytes),
                    }
                }
            },
        );
    }

    /// Appends a record whose `header_count` headers are `header_bytes` long once `headers`
    /// wrote them (without their count).
    fn append_parts(
        &mut self,
        timestamp: i64,
        (key, key_spans): BytesWithSpans<'_>,
        (value, value_spans): BytesWithSpans<'_>,
        (header_count, header_bytes): (usize, usize),
        headers: impl FnOnce(&mut Vec<u8>),
    ) {
        if self.count == 0 {
            self.base_timestamp = timestamp;
        }
        self.max_timestamp = self.max_timestamp.max(timestamp);
        let ts_delta = timestamp - self.base_timestamp;
        let offset_delta = self.count;
        let key_spans = if key.is_some() { key_spans } else { &[] };
        let value_spans = if value.is_some() { value_spans } else { &[] };
        let spans_len =
            |spans: &[(usize, Arc<[u8]>)]| -> usize { spans.iter().map(|(_, b)| b.len()).sum() };
        let key_len = key.map(|k| k.len() + spans_len(key_spans));
        let value_len = value.map(|v| v.len() + spans_len(value_spans));
        let body_len = record_body_len(
            ts_delta,
            offset_delta,
            key_len,
            value_len,
            (header_count, header_bytes),
        );
        let lz4 = self.compression == Compression::Lz4;
        // A record too large for one repeat block is staged as plain bytes (64 KiB blocks).
        let repeatable = lz4
            && body_len + 5 <= LZ4_REPEAT_BLOCK
            && key_spans
                .iter()
                .chain(value_spans)
                .any(|(_, b)| b.len() >= MIN_REPEATED_SPAN);
        if lz4 && (repeatable || !self.repeats.is_empty()) {
            // A block with repeats ends at a record boundary (a repeat cannot straddle blocks).
            let staged = self.staged_len();
            if staged > 0 && staged + varint_len(body_len as i32) + body_len > LZ4_REPEAT_BLOCK {
                self.compress_staged();
            }
        }
        self.records.reserve(body_len + 5);
        write_record_head(&mut self.records, body_len, ts_delta, offset_delta, key_len);
        if let Some(k) = key {
            self.stage_with_spans(k, key_spans, repeatable);
        }
        match value {
            Some(v) => {
                write_varint(&mut self.records, (v.len() + spans_len(value_spans)) as i32);
                self.stage_with_spans(v, value_spans, repeatable);
            }
            None => write_varint(&mut self.records, -1),
        }
        write_varint(&mut self.records, header_count as i32);
        let before = self.records.len();
        headers(&mut self.records);
        debug_assert_eq!(self.records.len() - before, header_bytes);
        self.count += 1;
        if lz4 {
            if self.repeats.is_empty() {
                while self.staged_len() >= LZ4_BLOCK {
                    self.compress_staged_block(LZ4_BLOCK);
                    // The staged bytes moved: spans left among them are not tracked.
                    self.known_spans.clear();
                }
            } else if self.staged_len() >= LZ4_REPEAT_BLOCK {
                self.compress_staged();
            }
        }
    }

    /// Stages `bytes` with `spans` inserted (see [`BatchBuilder::append_with_spans`]), the
    /// spans as repeats where they can be when `repeatable`.
    fn stage_with_spans(&mut self, bytes: &[u8], spans: &[(usize, Arc<[u8]>)], repeatable: bool) {
        let mut from = 0;
        for (at, span) in spans {
            self.records.extend_from_slice(&bytes[from..*at]);
            from = *at;
            if repeatable {
                self.stage_span(span);
            } else {
                self.records.extend_from_slice(span);
            }
        }
        self.records.extend_from_slice(&bytes[from..]);
    }

    /// Stages shared `bytes` (LZ4): as a repeat of the copy staged last in this block when
    /// there is one within reach, else as a copy that later ones can repeat.
    fn stage_span(&mut self, bytes: &Arc<[u8]>) {
        let at = self.staged_len();
        if bytes.len() < MIN_REPEATED_SPAN {
            self.records.extend_from_slice(bytes);
            return;
        }
        let full = self.known_spans.len() >= KNOWN_SPANS;
        match self
            .known_spans
            .iter_mut()
            .find(|(known, _)| Arc::ptr_eq(known, bytes))
        {
            Some((_, last_at)) if at - *last_at <= crate::lz4_repeats::MAX_DISTANCE => {
                self.repeats.push(Repeat {
                    at: self.records.len() - self.staged_from,
                    len: bytes.len(),
                    distance: at - *last_at,
                });
                self.repeated_len += bytes.len();
                *last_at = at;
                return;
            }
            // Too far back: copied again, and repeated from this copy on.
            Some((_, last_at)) => *last_at = at,
            None if !full => {
                self.known_spans.push((bytes.clone(), at));
            }
            None => {
                // Forget the span staged longest ago.
                if let Some(oldest) = self.known_spans.iter_mut().min_by_key(|(_, at)| *at) {
                    *oldest = (bytes.clone(), at);
                }
            }
        }
        self.records.extend_from_slice(bytes);
    }

    /// Compresses every staged byte into one block (or, without repeats and longer than a
    /// block, into several).
    fn compress_staged(&mut self) {
        self.known_spans.clear();
        if self.repeats.is_empty() {
            loop {
                let staged = self.records.len() - self.staged_from;
                if staged == 0 {
                    return;
                }
                self.compress_staged_block(staged.min(LZ4_BLOCK));
            }
        }
        let start = self.staged_from;
        let logical = self.staged_len();
        let compressed = LZ4_SCRATCH.with(|scratch| {
            let scratch = &mut *scratch.borrow_mut();
            let Lz4Scratch {
                repeat_encoder,
                repeat_block,
                ..
            } = scratch;
            repeat_block.clear();
            match repeat_encoder.compress(&self.records[start..], &self.repeats, repeat_block) {
                Ok(()) if repeat_block.len() + 4 < logical => {
                    self.records.truncate(start);
                    self.records
                        .extend_from_slice(&(repeat_block.len() as u32).to_le_bytes());
                    self.records.extend_from_slice(repeat_block);
                    true
                }
                _ => false,
            }
        });
        if compressed {
            if logical > LZ4_BLOCK {
                // The frame's blocks may now exceed 64 KiB: say so in its descriptor.
                self.records[..LZ4_FRAME_HEADER_LARGE.len()]
                    .copy_from_slice(&LZ4_FRAME_HEADER_LARGE);
            }
            self.staged_from = self.records.len();
            self.compressed_input += logical;
        } else {
            // Not expected (a repeat saves more than it costs): write the repeats out and
            // compress the bytes as they are.
            let bytes = crate::lz4_repeats::materialize(&self.records[start..], &self.repeats);
            self.records.truncate(start);
            self.records.extend_from_slice(&bytes);
        }
        self.repeats.clear();
        self.repeated_len = 0;
        if !compressed {
            self.compress_staged();
        }
    }

    /// Replaces the first `len` staged bytes by one LZ4 block (size word and data), moving the
    /// rest of the staged bytes up behind it.
    fn compress_staged_block(&mut self, len: usize) {
        let start = self.staged_from;
        let end = start + len;
        let written = LZ4_SCRATCH.with(|scratch| {
            let scratch = &mut *scratch.borrow_mut();
            // The scratch block has room for the largest compressed size of a block, so
            // compressing cannot fail; if it ever did, the block is stored uncompressed.
            let n = lz4_flex::block::compress_into_with_table(
                &self.records[start..end],
                &mut scratch.block,
                &mut scratch.table,
            )
            .unwrap_or(usize::MAX);
            if n < len.saturating_sub(4) {
                self.records[start..start + 4].copy_from_slice(&(n as u32).to_le_bytes());
                self.records[start + 4..start + 4 + n].copy_from_slice(&scratch.block[..n]);
                Some(4 + n)
            } else {
                None
            }
        });
        let block_end = match written {
            Some(w) => {
                // The block is shorter than its input: close the gap.
                self.records.copy_within(end.., start + w);
                self.records.truncate(self.records.len() - (len - w));
                start + w
            }
            None => {
                // Stored uncompressed: the data stays, behind a size word.
                let word = (len as u32 | LZ4_UNCOMPRESSED).to_le_bytes();
                self.records.splice(start..start, word);
                end + 4
            }
        };
        self.staged_from = block_end;
        self.compressed_input += len;
    }

    /// Finishes the batch with base offset 0 (assign the real one with [`set_base_offset`]).
    pub fn build(self) -> Result<Vec<u8>, BatchError> {
        let mut out = Vec::with_capacity(HEADER_SIZE + self.records.len());
        self.build_into(&mut out)?;
        Ok(out)
    }

    /// Finishes the batch into `out` (its contents replaced; base offset 0), compressing the
    /// records straight into it, and hands back the emptied records buffer for reuse. With
    /// reused buffers, building a batch allocates nothing.
    pub fn build_into(mut self, out: &mut Vec<u8>) -> Result<Vec<u8>, BatchError> {
        out.clear();
        match self.compression {
            Compression::Lz4 => {
                self.compress_staged();
                self.records.extend_from_slice(&0u32.to_le_bytes()); // end mark
                out.reserve(HEADER_SIZE + self.records.len());
                out.resize(HEADER_SIZE, 0);
                out.extend_from_slice(&self.records);
            }
            Compression::None => {
                out.resize(HEADER_SIZE, 0);
                out.extend_from_slice(&self.records);
            }
            codec => {
                out.resize(HEADER_SIZE, 0);
                compress_into(codec, &self.records, out)?;
            }
        }
        let mut attributes = self.compression.attribute_bits();
        if self.producer.transactional {
            attributes |= TRANSACTIONAL_FLAG;
        }
        if self.control {
            attributes |= CONTROL_FLAG;
        }
        write_header(
            out,
            &HeaderFields {
                base_offset: 0,
                partition_leader_epoch: 0,
                attributes,
                last_offset_delta: (self.count - 1).max(0),
                base_timestamp: self.base_timestamp,
                max_timestamp: self.max_timestamp,
                producer_id: self.producer.producer_id,
                producer_epoch: self.producer.producer_epoch,
                base_sequence: self.producer.base_sequence,
                record_count: self.count,
            },
        );
        let mut records = self.records;
        records.clear();
        Ok(records)
    }
}

/// Header fields of a batch to lay out.
struct HeaderFields {
    base_offset: i64,
    partition_leader_epoch: i32,
    attributes: i16,
    last_offset_delta: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    record_count: i32,
}

/// Lays out a batch around `payload` (the records section) and computes its CRC.
fn assemble(h: &HeaderFields, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_SIZE + payload.len());
    out.resize(HEADER_SIZE, 0);
    out.extend_from_slice(payload);
    write_header(&mut out, h);
    out
}

/// Fills the first [`HEADER_SIZE`] bytes of `batch` (whose records section follows them) and
/// its CRC.
fn write_header(batch: &mut [u8], h: &HeaderFields) {
    let total = batch.len();
    let mut put = |at: usize, bytes: &[u8]| batch[at..at + bytes.len()].copy_from_slice(bytes);
    put(0, &h.base_offset.to_be_bytes());
    put(8, &((total - LOG_OVERHEAD) as i32).to_be_bytes());
    put(12, &h.partition_leader_epoch.to_be_bytes());
    put(16, &[MAGIC as u8]);
    put(21, &h.attributes.to_be_bytes());
    put(23, &h.last_offset_delta.to_be_bytes());
    put(27, &h.base_timestamp.to_be_bytes());
    put(35, &h.max_timestamp.to_be_bytes());
    put(43, &h.producer_id.to_be_bytes());
    put(51, &h.producer_epoch.to_be_bytes());
    put(53, &h.base_sequence.to_be_bytes());
    put(57, &h.record_count.to_be_bytes());
    let crc = crc32c::crc32c(&batch[CRC_START..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// Appends one record (varint-framed) to a records section.
fn encode_record<'h>(
    out: &mut Vec<u8>,
    ts_delta: i64,
    offset_delta: i32,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: impl Iterator<Item = (&'h str, Option<&'h [u8]>)> + Clone,
) {
    let key_len = key.map(<[u8]>::len);
    let value_len = value.map(<[u8]>::len);
    let as_header = |(key, value)| RecordHeader { key, value };
    let header_count = headers.clone().count();
    let header_bytes = headers.clone().map(|h| header_len(as_header(h))).sum();
    let body_len = record_body_len(
        ts_delta,
        offset_delta,
        key_len,
        value_len,
        (header_count, header_bytes),
    );
    out.reserve(body_len + 5);
    write_record_head(out, body_len, ts_delta, offset_delta, key_len);
    if let Some(k) = key {
        out.extend_from_slice(k);
    }
    write_bytes(out, value);
    write_varint(out, header_count as i32);
    encode_record_headers(out, headers.map(as_header));
}

/// The length of a record's body (everything after its length varint), its key and value
/// `key_len` and `value_len` bytes long (`None`: null).
fn record_body_len(
    ts_delta: i64,
    offset_delta: i32,
    key_len: Option<usize>,
    value_len: Option<usize>,
    (header_count, header_bytes): (usize, usize),
) -> usize {
    let len_of = |len: Option<usize>| match len {
        Some(n) => varint_len(n as i32) + n,
        None => varint_len(-1),
    };
    1 + varlong_len(ts_delta)
        + varint_len(offset_delta)
        + len_of(key_len)
        + len_of(value_len)
        + varint_len(header_count as i32)
        + header_bytes
}

/// Appends a record's length, attributes, deltas and key length: what precedes the key
/// bytes.
fn write_record_head(
    out: &mut Vec<u8>,
    body_len: usize,
    ts_delta: i64,
    offset_delta: i32,
    key_len: Option<usize>,
) {
    write_varint(out, body_len as i32);
    out.push(0); // record attributes, unused
    write_varlong(out, ts_delta);
    write_varint(out, offset_delta);
    write_varint(out, key_len.map_or(-1, |n| n as i32));
}

/// A batch without records covering offsets `base_offset..=last_offset`: what compaction
/// leaves where every record of a segment's last batch was removed, so the segment still ends
/// at the same offset. No producer, no compression, both timestamps `timestamp`. Kafka clients
/// accept empty batches (its own cleaner writes them).
pub fn empty_batch(base_offset: i64, last_offset: i64, timestamp: i64) -> Vec<u8> {
    assemble(
        &HeaderFields {
            base_offset,
            partition_leader_epoch: 0,
            attributes: 0,
            last_offset_delta: i32::try_from(last_offset - base_offset).unwrap_or(i32::MAX),
            base_timestamp: timestamp,
            max_timestamp: timestamp,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: -1,
            base_sequence: -1,
            record_count: 0,
        },
        &[],
    )
}

fn write_bytes(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        Some(b) => {
            write_varint(out, b.len() as i32);
            out.extend_from_slice(b);
        }
        None => write_varint(out, -1),
    }
}

/// The kind of a transaction marker (control record type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlType {
    Abort,
    Commit,
}

/// A control batch ending a transaction of `producer_id` (Kafka's end-transaction marker):
/// one record, key `version:i16=0, type:i16`, value `version:i16=0, coordinatorEpoch:i32`.
pub fn control_batch(
    producer_id: i64,
    producer_epoch: i16,
    kind: ControlType,
    timestamp: i64,
) -> Vec<u8> {
    let mut builder = BatchBuilder::new(
        Compression::None,
        ProducerFields {
            producer_id,
            producer_epoch,
            base_sequence: -1,
            transactional: true,
        },
    );
    builder.control = true;
    let type_code: i16 = match kind {
        ControlType::Abort => 0,
        ControlType::Commit => 1,
    };
    let mut key = [0u8; 4];
    key[2..4].copy_from_slice(&type_code.to_be_bytes());
    let value = [0u8; 6];
    builder.append(timestamp, Some(&key), Some(&value), &[]);
    // An uncompressed control batch cannot fail to build.
    builder.build().unwrap_or_default()
}

/// The control type of a control batch's record key.
pub fn control_type(key: &[u8]) -> Option<ControlType> {
    if key.len() < 4 {
        return None;
    }
    match i16::from_be_bytes([key[2], key[3]]) {
        0 => Some(ControlType::Abort),
        1 => Some(ControlType::Commit),
        _ => None,
    }
}

/// A record read from a batch, borrowing from the batch's (decompressed) bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: Vec<(&'a str, Option<&'a [u8]>)>,
}

/// A verified batch with its records section decompressed, ready to iterate.
///
/// A decompressed section's buffer goes back to a per-thread spare when the batch is dropped,
/// and the next batch decompressed on that thread writes into it: reading a partition batch
/// after batch reuses one buffer instead of mapping (and faulting in) fresh memory each time.
pub struct DecodedBatch<'a> {
    pub header: BatchHeader,
    records: Cow<'a, [u8]>,
}

impl Drop for DecodedBatch<'_> {
    fn drop(&mut self) {
        if let Cow::Owned(buffer) = std::mem::take(&mut self.records) {
            give_back_records_buffer(buffer);
        }
    }
}

/// Decompressed sections larger than this are not kept as the spare.
const SPARE_RECORDS_MAX: usize = 8 * 1024 * 1024;

thread_local! {
    static SPARE_RECORDS: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn take_records_buffer() -> Vec<u8> {
    SPARE_RECORDS.with(|s| std::mem::take(&mut *s.borrow_mut()))
}

fn give_back_records_buffer(buffer: Vec<u8>) {
    if buffer.capacity() > SPARE_RECORDS_MAX {
        return;
    }
    // The length is kept: those bytes are initialised, so the LZ4 path reuses them without
    // zeroing; every other user clears the buffer first.
    SPARE_RECORDS.with(|s| {
        let mut spare = s.borrow_mut();
        if buffer.capacity() > spare.capacity() {
            *spare = buffer;
        }
    });
}

impl<'a> DecodedBatch<'a> {
    /// Verifies `batch` and decompresses its records when needed.
    pub fn decode(batch: &'a [u8]) -> Result<Self, BatchError> {
        let header = verify(batch)?;
        let raw = &batch[HEADER_SIZE..header.total_size()];
        let records = match header.compression()? {
            Compression::None => Cow::Borrowed(raw),
            codec => Cow::Owned(decompress(codec, raw)?),
        };
        Ok(DecodedBatch { header, records })
    }

    /// The records in order.
    pub fn records(&self) -> Result<Vec<RecordView<'_>>, BatchError> {
        self.parse_records(true)
    }

    /// Re-encodes the batch with only the records whose `keep` entry is true (compaction).
    /// Every kept record keeps its offset, timestamp, key, value and headers; the new batch
    /// starts at the first kept record's offset and keeps the original last offset (so offsets
    /// after it are never reused), codec, timestamp type, producer id/epoch/sequence and the
    /// transactional and control flags. With `delete_horizon` the batch carries it (KIP-534:
    /// flag 0x40, base timestamp = horizon, record timestamps relative to it); without, an
    /// existing horizon is dropped. Returns `None` when no record is kept.
    pub fn rebuild(
        &self,
        keep: &[bool],
        delete_horizon: Option<i64>,
    ) -> Result<Option<Vec<u8>>, BatchError> {
        let records = self.parse_records(false)?;
        let kept: Vec<&RecordView<'_>> = records
            .iter()
            .zip(keep.iter().chain(std::iter::repeat(&false)))
            .filter(|(_, k)| **k)
            .map(|(r, _)| r)
            .collect();
        let Some(first) = kept.first() else {
            return Ok(None);
        };
        let h = &self.header;
        let base_offset = first.offset;
        let base_timestamp = delete_horizon.unwrap_or(first.timestamp);
        let max_timestamp = if h.has_log_append_time() {
            h.max_timestamp
        } else {
            kept.iter()
                .map(|r| r.timestamp)
                .max()
                .unwrap_or(first.timestamp)
        };
        let mut body = Vec::with_capacity(self.records.len());
        for r in &kept {
            encode_record(
                &mut body,
                r.timestamp - base_timestamp,
                i32::try_from(r.offset - base_offset)
                    .map_err(|_| BatchError::Corrupt("offset delta out of range".into()))?,
                r.key,
                r.value,
                r.headers.iter().copied(),
            );
        }
        let codec = h.compression()?;
        let payload: Cow<'_, [u8]> = match codec {
            Compression::None => Cow::Borrowed(&body),
            codec => Cow::Owned(compress(codec, &body)?),
        };
        let mut attributes = h.attributes & !DELETE_HORIZON_FLAG;
        if delete_horizon.is_some() {
            attributes |= DELETE_HORIZON_FLAG;
        }
        Ok(Some(assemble(
            &HeaderFields {
                base_offset,
                partition_leader_epoch: h.partition_leader_epoch,
                attributes,
                last_offset_delta: i32::try_from(h.last_offset() - base_offset)
                    .map_err(|_| BatchError::Corrupt("offset delta out of range".into()))?,
                base_timestamp,
                max_timestamp,
                producer_id: h.producer_id,
                producer_epoch: h.producer_epoch,
                base_sequence: h.base_sequence,
                record_count: kept.len() as i32,
            },
            &payload,
        )))
    }

    /// The records; with `apply_log_append_time`, batches stamped with log-append time report
    /// that time for every record (what readers see), else each record's own create time.
    fn parse_records(
        &self,
        apply_log_append_time: bool,
    ) -> Result<Vec<RecordView<'_>>, BatchError> {
        let buf: &[u8] = &self.records;
        let mut out = Vec::with_capacity(self.header.record_count as usize);
        let mut pos = 0;
        let corrupt = |what: &str| {
            BatchError::Corrupt(format!(
                "bad record {what} in batch at {}",
                self.header.base_offset
            ))
        };
        for _ in 0..self.header.record_count {
            let len = read_varint(buf, &mut pos).ok_or_else(|| corrupt("length"))?;
            let end = pos
                .checked_add(usize::try_from(len).map_err(|_| corrupt("length"))?)
                .filter(|e| *e <= buf.len())
                .ok_or_else(|| corrupt("length"))?;
            let rec = &buf[..end];
            pos += 1; // attributes
            let ts_delta = read_varlong(rec, &mut pos).ok_or_else(|| corrupt("timestamp"))?;
            let offset_delta = read_varint(rec, &mut pos).ok_or_else(|| corrupt("offset"))?;
            let key = read_bytes(rec, &mut pos).ok_or_else(|| corrupt("key"))?;
            let value = read_bytes(rec, &mut pos).ok_or_else(|| corrupt("value"))?;
            let header_count = read_varint(rec, &mut pos).ok_or_else(|| corrupt("header count"))?;
            let mut headers = Vec::with_capacity(header_count.clamp(0, 64) as usize);
            for _ in 0..header_count.max(0) {
                let k = read_bytes(rec, &mut pos)
                    .flatten()
                    .ok_or_else(|| corrupt("header key"))?;
                let k = std::str::from_utf8(k).map_err(|_| corrupt("header key"))?;
                let v = read_bytes(rec, &mut pos).ok_or_else(|| corrupt("header value"))?;
                headers.push((k, v));
            }
            if pos != end {
                return Err(corrupt("size"));
            }
            out.push(RecordView {
                offset: self.header.base_offset + i64::from(offset_delta),
                timestamp: if apply_log_append_time && self.header.has_log_append_time() {
                    self.header.max_timestamp
                } else {
                    self.header.base_timestamp + ts_delta
                },
                key,
                value,
                headers,
            });
        }
        Ok(out)
    }
}

/// Reads a length-prefixed byte string; `Some(None)` for length -1.
fn read_bytes<'a>(buf: &'a [u8], pos: &mut usize) -> Option<Option<&'a [u8]>> {
    let len = read_varint(buf, pos)?;
    if len < 0 {
        return Some(None);
    }
    let end = pos.checked_add(len as usize).filter(|e| *e <= buf.len())?;
    let out = &buf[*pos..end];
    *pos = end;
    Some(Some(out))
}

const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
const XERIAL_BLOCK: usize = 32 * 1024;

/// Compresses a records section as Kafka's producers do for `codec`.
pub fn compress(codec: Compression, data: &[u8]) -> Result<Vec<u8>, BatchError> {
    let mut out = Vec::new();
    compress_into(codec, data, &mut out)?;
    Ok(out)
}

/// The LZ4 frame descriptor we write: version 01, independent blocks, no block or content
/// checksums, no content size (FLG); 64 KiB maximum block size (BD); the header checksum
/// (HC, second byte of xxHash32 of FLG and BD). Kafka's producers use 64 KiB blocks too.
const LZ4_FRAME_HEADER: [u8; 7] = [0x04, 0x22, 0x4D, 0x18, 0x60, 0x40, 0x82];
/// [`LZ4_FRAME_HEADER`] with a 1 MiB maximum block size (BD 0x60) and its header checksum.
const LZ4_FRAME_HEADER_LARGE: [u8; 7] = [0x04, 0x22, 0x4D, 0x18, 0x60, 0x60, 0x51];
/// Our LZ4 blocks hold at most this much input: just under 64 KiB, so that the compressor's
/// hash table holds 16-bit positions (lz4_flex's small table: half the cache footprint of the
/// large one). Readers accept any block up to the frame's 64 KiB maximum.
const LZ4_BLOCK: usize = u16::MAX as usize - 1;

/// Per-thread LZ4 compressor state, reused from block to block: the hash table (cleared, not
/// reallocated, per block) and an output block of the largest compressed size, initialised
/// once, so compressing a batch neither allocates nor zero-fills.
struct Lz4Scratch {
    table: lz4_flex::block::CompressTable,
    block: Vec<u8>,
    /// The encoder of blocks with repeated value prefixes, and its output block.
    repeat_encoder: RepeatEncoder,
    repeat_block: Vec<u8>,
}

thread_local! {
    static LZ4_SCRATCH: std::cell::RefCell<Lz4Scratch> = std::cell::RefCell::new(Lz4Scratch {
        table: lz4_flex::block::CompressTable::small(),
        block: vec![0; lz4_flex::block::get_maximum_output_size(LZ4_BLOCK)],
        repeat_encoder: RepeatEncoder::default(),
        repeat_block: Vec::with_capacity(LZ4_BLOCK),
    });
}

/// Shared value spans shorter than this are copied even when repeated: a repeat is worth its
/// bookkeeping only for long ones (the JSON converter's schema prefix is kilobytes, a cached
/// `source` block a few hundred bytes).
pub const MIN_REPEATED_SPAN: usize = 64;
/// How many distinct shared spans a batch builder tracks per block.
const KNOWN_SPANS: usize = 8;
/// The largest uncompressed LZ4 block with repeats: 1 MiB, so a block holds a whole batch of
/// records and stores each shared span once instead of once per 64 KiB. The frame's
/// descriptor then says 1 MiB blocks ([`LZ4_FRAME_HEADER_LARGE`]), which Kafka's clients
/// (Java's `Lz4BlockInputStream`, librdkafka's LZ4F) read like any frame.
pub const LZ4_REPEAT_BLOCK: usize = 1 << 20;
/// Block size word flag: the block is stored uncompressed.
const LZ4_UNCOMPRESSED: u32 = 0x8000_0000;

/// Appends `data` compressed as Kafka's producers do for `codec` to `out`.
///
/// LZ4 is written as a standard LZ4 frame block by block, straight from `data` into `out`
/// (no intermediate copies; a reused `out` allocates nothing).
pub fn compress_into(codec: Compression, data: &[u8], out: &mut Vec<u8>) -> Result<(), BatchError> {
    let err = |e: std::io::Error| BatchError::Compression(e.to_string());
    match codec {
        Compression::None => out.extend_from_slice(data),
        Compression::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(out, flate2::Compression::default());
            enc.write_all(data).map_err(err)?;
            enc.finish().map_err(err)?;
        }
        Compression::Snappy => {
            // Kafka (Java) writes snappy in xerial's block framing.
            out.extend_from_slice(&XERIAL_MAGIC);
            out.extend_from_slice(&1i32.to_be_bytes());
            out.extend_from_slice(&1i32.to_be_bytes());
            let mut enc = snap::raw::Encoder::new();
            for chunk in data.chunks(XERIAL_BLOCK) {
                let at = out.len();
                out.resize(at + 4 + snap::raw::max_compress_len(chunk.len()), 0);
                let n = enc
                    .compress(chunk, &mut out[at + 4..])
                    .map_err(|e| BatchError::Compression(e.to_string()))?;
                out.truncate(at + 4 + n);
                out[at..at + 4].copy_from_slice(&(n as i32).to_be_bytes());
            }
        }
        Compression::Lz4 => {
            out.extend_from_slice(&LZ4_FRAME_HEADER);
            LZ4_SCRATCH.with(|scratch| {
                let scratch = &mut *scratch.borrow_mut();
                for chunk in data.chunks(LZ4_BLOCK) {
                    let n = lz4_flex::block::compress_into_with_table(
                        chunk,
                        &mut scratch.block,
                        &mut scratch.table,
                    )
                    .map_err(|e| BatchError::Compression(e.to_string()))?;
                    if n < chunk.len() {
                        out.extend_from_slice(&(n as u32).to_le_bytes());
                        out.extend_from_slice(&scratch.block[..n]);
                    } else {
                        out.extend_from_slice(
                            &(chunk.len() as u32 | LZ4_UNCOMPRESSED).to_le_bytes(),
                        );
                        out.extend_from_slice(chunk);
                    }
                }
                Ok::<(), BatchError>(())
            })?;
            out.extend_from_slice(&0u32.to_le_bytes()); // end mark
        }
        Compression::Zstd => {
            let at = out.len();
            out.resize(at + zstd::zstd_safe::compress_bound(data.len()), 0);
            let n = zstd::bulk::compress_to_buffer(data, &mut out[at..], 3).map_err(err)?;
            out.truncate(at + n);
        }
    }
    Ok(())
}

/// Decompresses a records section written by any Kafka producer for `codec`.
pub fn decompress(codec: Compression, data: &[u8]) -> Result<Vec<u8>, BatchError> {
    let err = |e: std::io::Error| BatchError::Compression(e.to_string());
    let mut out = take_records_buffer();
    if codec == Compression::Lz4 {
        if let Some(done) = decompress_lz4_blocks(data, &mut out) {
            return done.map(|()| out);
        }
    }
    out.clear();
    out.reserve(data.len() * 3);
    match codec {
        Compression::None => out.extend_from_slice(data),
        Compression::Gzip => {
            flate2::read::GzDecoder::new(data)
                .read_to_end(&mut out)
                .map_err(err)?;
        }
        Compression::Snappy => {
            let mut dec = snap::raw::Decoder::new();
            if data.starts_with(&XERIAL_MAGIC) {
                let mut pos = 16;
                while pos < data.len() {
                    let len_bytes: [u8; 4] = data
                        .get(pos..pos + 4)
                        .and_then(|b| b.try_into().ok())
                        .ok_or_else(|| BatchError::Compression("truncated snappy block".into()))?;
                    let len = i32::from_be_bytes(len_bytes) as usize;
                    pos += 4;
                    let block = data
                        .get(pos..pos + len)
                        .ok_or_else(|| BatchError::Compression("truncated snappy block".into()))?;
                    out.extend_from_slice(
                        &dec.decompress_vec(block)
                            .map_err(|e| BatchError::Compression(e.to_string()))?,
                    );
                    pos += len;
                }
            } else {
                out = dec
                    .decompress_vec(data)
                    .map_err(|e| BatchError::Compression(e.to_string()))?;
            }
        }
        Compression::Lz4 => {
            lz4_flex::frame::FrameDecoder::new(data)
                .read_to_end(&mut out)
                .map_err(err)?;
        }
        Compression::Zstd => {
            zstd::stream::read::Decoder::new(data)
                .and_then(|mut d| d.read_to_end(&mut out))
                .map_err(err)?;
        }
    }
    Ok(out)
}

/// Decompresses an LZ4 frame of independent blocks without checksums, dictionary or content
/// size (the frames this log writes, and Kafka's Java producers') block by block straight
/// into `out`, sized once from the block headers; `None` for other frames, which the
/// streaming decoder handles. The frame's header checksum is not checked here: the batch CRC
/// already covered every byte.
fn decompress_lz4_blocks(data: &[u8], out: &mut Vec<u8>) -> Option<Result<(), BatchError>> {
    const MAGIC: [u8; 4] = [0x04, 0x22, 0x4D, 0x18];
    const INDEPENDENT: u8 = 0x20;
    const CHECKSUMS_DICT_SIZE: u8 = 0x10 | 0x08 | 0x04 | 0x01;
    if data.len() < 7 || data[..4] != MAGIC {
        return None;
    }
    let (flg, bd) = (data[4], data[5]);
    if flg >> 6 != 1 || flg & INDEPENDENT == 0 || flg & CHECKSUMS_DICT_SIZE != 0 {
        return None;
    }
    let max_block = match (bd >> 4) & 0x07 {
        4 => 64 << 10,
        5 => 256 << 10,
        6 => 1 << 20,
        7 => 4 << 20,
        _ => return None,
    };
    let truncated = || Some(Err(BatchError::Compression("truncated LZ4 frame".into())));
    let word_at = |at: usize| -> Option<u32> {
        data.get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    // Upper bound of the output: raw blocks exactly, compressed ones at most a block.
    let mut bound = 0usize;
    let mut at = 7;
    loop {
        let Some(word) = word_at(at) else {
            return truncated();
        };
        if word == 0 {
            // The end mark must end the frame; anything else is left to the frame decoder.
            if at + 4 != data.len() {
                return None;
            }
            break;
        }
        let len = (word & !LZ4_UNCOMPRESSED) as usize;
        bound += if word & LZ4_UNCOMPRESSED != 0 {
            len
        } else {
            max_block
        };
        at += 4 + len;
    }
    // A recycled buffer keeps its length (see `give_back_records_buffer`): its bytes are
    // initialised already, so only the part past it is zeroed before blocks are written.
    if out.len() < bound {
        out.resize(bound, 0);
    }
    let mut at = 7;
    let mut written = 0usize;
    loop {
        let word = word_at(at).unwrap_or(0);
        if word == 0 {
            out.truncate(written);
            return Some(Ok(()));
        }
        let len = (word & !LZ4_UNCOMPRESSED) as usize;
        let Some(block) = data.get(at + 4..at + 4 + len) else {
            return truncated();
        };
        if word & LZ4_UNCOMPRESSED != 0 {
            out[written..written + len].copy_from_slice(block);
            written += len;
        } else {
            match lz4_flex::block::decompress_into(block, &mut out[written..written + max_block]) {
                Ok(n) => written += n,
                Err(e) => return Some(Err(BatchError::Compression(e.to_string()))),
            }
        }
        at += 4 + len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_parts_write_the_same_bytes_as_single_headers() {
        let shared = [
            RecordHeader {
                key: "__debezium.context.connectorLogicalName",
                value: Some(b"cdc"),
            },
            RecordHeader {
                key: "nothing",
                value: None,
            },
        ];
        let mut encoded = Vec::new();
        encode_record_headers(&mut encoded, shared.iter().copied());
        let first = RecordHeader {
            key: "__debezium.newkey",
            value: Some(b"{\"id\":2}"),
        };
        let last = RecordHeader {
            key: "added",
            value: Some(b""),
        };
        for compression in [Compression::None, Compression::Lz4] {
            let mut by_parts = BatchBuilder::new(compression, ProducerFields::default());
            let mut single = BatchBuilder::new(compression, ProducerFields::default());
            for i in 0..50i64 {
                let value = format!("value {i}");
                let parts = [
                    HeaderPart::One(first),
                    HeaderPart::Encoded {
                        count: shared.len(),
                        bytes: &encoded,
                    },
                    HeaderPart::One(last),
                ];
                let (parts, all): (&[HeaderPart], Vec<RecordHeader>) = if i % 3 == 0 {
                    (&parts[1..2], shared.to_vec())
                } else {
                    (&parts, [&[first][..], &shared, &[last]].concat())
                };
                by_parts.append_with_header_parts(i, None, &[], Some(value.as_bytes()), &[], parts);
                single.append_with_spans(i, None, &[], Some(value.as_bytes()), &[], &all);
                assert_eq!(by_parts.size_bytes(), single.size_bytes(), "record {i}");
            }
            let (by_parts, single) = (by_parts.build().unwrap(), single.build().unwrap());
            assert_eq!(by_parts, single, "{compression:?}");
            let decoded = DecodedBatch::decode(&by_parts).unwrap();
            let records = decoded.records().unwrap();
            assert_eq!(records[1].headers.len(), 4);
            assert_eq!(
                records[1].headers[1],
                ("__debezium.context.connectorLogicalName", Some(&b"cdc"[..]))
            );
            assert_eq!(records[1].headers[2], ("nothing", None));
            assert_eq!(records[0].headers.len(), 2);
        }
    }

    fn sample(compression: Compression) -> Vec<u8> {
        let mut b = BatchBuilder::new(compression, ProducerFields::default());
        b.append(1_700_000_000_000, Some(b"k1"), Some(b"v1"), &[]);
        b.append(
            1_700_000_000_005,
            None,
            Some(&[7u8; 300]),
            &[RecordHeader {
                key: "h",
                value: Some(b"x"),
            }],
        );
        b.append(
            1_699_999_999_999,
            Some(b"k3"),
            None,
            &[RecordHeader {
                key: "n",
                value: None,
            }],
        );
        b.build().unwrap()
    }

    #[test]
    fn builds_and_reads_every_codec() {
        for codec in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let mut batch = sample(codec);
            set_base_offset(&mut batch, 42);
            let decoded = DecodedBatch::decode(&batch).unwrap();
            assert_eq!(decoded.header.base_offset, 42);
            assert_eq!(decoded.header.last_offset(), 44);
            assert_eq!(decoded.header.record_count, 3);
            assert_eq!(decoded.header.compression().unwrap(), codec);
            assert_eq!(decoded.header.max_timestamp, 1_700_000_000_005);
            let recs = decoded.records().unwrap();
            assert_eq!(recs.len(), 3);
            assert_eq!(recs[0].offset, 42);
            assert_eq!(recs[0].key, Some(&b"k1"[..]));
            assert_eq!(recs[1].key, None);
            assert_eq!(recs[1].value.unwrap().len(), 300);
            assert_eq!(recs[1].headers, vec![("h", Some(&b"x"[..]))]);
            assert_eq!(recs[2].value, None, "a tombstone");
            assert_eq!(recs[2].timestamp, 1_699_999_999_999);
            assert_eq!(recs[2].headers, vec![("n", None)]);
        }
    }

    /// Bytes that compress well (repeated JSON-like text) and bytes that do not (xorshift).
    fn sample_payloads() -> Vec<Vec<u8>> {
        let text: Vec<u8> = (0..5000)
            .flat_map(|i| format!("{{\"id\":{i},\"status\":\"shipped\"}}").into_bytes())
            .collect();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let noise: Vec<u8> = (0..200_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        vec![Vec::new(), b"x".to_vec(), text, noise]
    }

    #[test]
    fn lz4_frames_are_standard() {
        // The header we write is the one lz4_flex's own encoder writes for the same settings.
        let mut reference = lz4_flex::frame::FrameEncoder::new(Vec::new());
        reference.write_all(b"abc").unwrap();
        let reference = reference.finish().unwrap();
        assert_eq!(reference[..7], LZ4_FRAME_HEADER);
        let info = lz4_flex::frame::FrameInfo::new()
            .block_size(lz4_flex::frame::BlockSize::Max1MB)
            .block_mode(lz4_flex::frame::BlockMode::Independent);
        let mut reference = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
        reference.write_all(b"abc").unwrap();
        let reference = reference.finish().unwrap();
        assert_eq!(reference[..7], LZ4_FRAME_HEADER_LARGE);
        for data in sample_payloads() {
            let framed = compress(Compression::Lz4, &data).unwrap();
            let mut back = Vec::new();
            lz4_flex::frame::FrameDecoder::new(&framed[..])
                .read_to_end(&mut back)
                .unwrap();
            assert_eq!(back, data);
            assert_eq!(decompress(Compression::Lz4, &framed).unwrap(), data);
        }
    }

    #[test]
    fn every_codec_round_trips_large_inputs() {
        for codec in [Compression::Gzip, Compression::Snappy, Compression::Zstd] {
            for data in sample_payloads() {
                let packed = compress(codec, &data).unwrap();
                assert_eq!(decompress(codec, &packed).unwrap(), data, "{codec:?}");
            }
        }
    }

    #[test]
    fn lz4_frames_decompress_block_by_block_or_through_the_frame_decoder() {
        for data in sample_payloads() {
            // Ours (independent blocks, raw blocks for the noise): the block-by-block path.
            let ours = compress(Compression::Lz4, &data).unwrap();
            let mut out = Vec::new();
            assert!(decompress_lz4_blocks(&ours, &mut out).is_some());
            assert_eq!(out, data);
            assert_eq!(decompress(Compression::Lz4, &ours).unwrap(), data);
            // Linked blocks and a content checksum, as other producers may write: the frame
            // decoder's path, same result.
            let info = lz4_flex::frame::FrameInfo::new()
                .block_mode(lz4_flex::frame::BlockMode::Linked)
                .content_checksum(true);
            let mut other = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
            other.write_all(&data).unwrap();
            let other = other.finish().unwrap();
            assert!(decompress_lz4_blocks(&other, &mut Vec::new()).is_none());
            assert_eq!(decompress(Compression::Lz4, &other).unwrap(), data);
        }
        // A frame cut short is an error, not a short result.
        let text = &sample_payloads()[2];
        let ours = compress(Compression::Lz4, text).unwrap();
        assert!(decompress(Compression::Lz4, &ours[..ours.len() / 2]).is_err());
        // The buffer of a dropped batch is reused by the next one on the thread.
        let batch = sample(Compression::Lz4);
        let first = DecodedBatch::decode(&batch).unwrap();
        let first_ptr = first.records.as_ptr();
        drop(first);
        let second = DecodedBatch::decode(&batch).unwrap();
        assert_eq!(second.records.as_ptr(), first_ptr);
        assert_eq!(second.records().unwrap().len(), 3);
        drop(second);
        // A recycled buffer keeps its old bytes: a shorter batch after a long one, and other
        // codecs after LZ4, must see exactly their own records.
        let batch_of = |codec: Compression, records: usize, fill: u8| {
            let mut b = BatchBuilder::new(codec, ProducerFields::default());
            for i in 0..records {
                b.append(1_700_000_000_000 + i as i64, None, Some(&[fill; 500]), &[]);
            }
            b.build().unwrap()
        };
        let long = batch_of(Compression::Lz4, 2_000, b'a');
        assert_eq!(
            DecodedBatch::decode(&long)
                .unwrap()
                .records()
                .unwrap()
                .len(),
            2_000
        );
        for codec in [Compression::Lz4, Compression::Gzip, Compression::Snappy] {
            let short = batch_of(codec, 3, b'b');
            let decoded = DecodedBatch::decode(&short).unwrap();
            let records = decoded.records().unwrap();
            assert_eq!(records.len(), 3, "{codec:?}");
            assert!(
                records.iter().all(|r| r.value == Some(&[b'b'; 500][..])),
                "{codec:?}"
            );
            assert_eq!(decoded.records.len(), {
                let mut plain = batch_of(Compression::None, 3, b'b');
                plain.drain(..HEADER_SIZE);
                plain.len()
            });
        }
    }

    #[test]
    fn build_into_reuses_buffers_and_matches_build() {
        let mut scratch = Vec::new();
        let mut records = Vec::new();
        for codec in [Compression::None, Compression::Lz4, Compression::Zstd] {
            for round in 0..3 {
                let mut a = BatchBuilder::with_buffer(codec, ProducerFields::default(), records);
                let mut b = BatchBuilder::new(codec, ProducerFields::default());
                for i in 0..(round * 50 + 1) {
                    let value = format!("value {i} {}", "x".repeat(i % 40));
                    a.append(1_000 + i as i64, Some(b"k"), Some(value.as_bytes()), &[]);
                    b.append(1_000 + i as i64, Some(b"k"), Some(value.as_bytes()), &[]);
                }
                records = a.build_into(&mut scratch).unwrap();
                assert!(records.is_empty());
                assert_eq!(scratch, b.build().unwrap(), "{codec:?} round {round}");
                verify(&scratch).unwrap();
            }
        }
    }

    #[test]
    fn repeated_value_prefixes_give_the_same_records() {
        // Values written as a shared prefix plus the rest: LZ4 batches store repeats of the
        // previous record's prefix by reference. Whatever the mix (prefixes changing, nulls,
        // short prefixes copied, records larger than a block, headers), the records read back
        // are those of a plain batch of the whole values, and the frame is readable by
        // lz4_flex's standard frame decoder too.
        let [_, _, text, noise] = &sample_payloads()[..] else {
            unreachable!("four samples")
        };
        let schema_a: Arc<[u8]> = text[..2_900].to_vec().into();
        let schema_b: Arc<[u8]> = text[1_000..4_000].to_vec().into();
        let short: Arc<[u8]> = b"{\"schema\":null,\"payload\":".to_vec().into();
        let huge: Arc<[u8]> = noise[..70_000].to_vec().into();
        type Case<'a> = (Option<&'a Arc<[u8]>>, Option<&'a [u8]>);
        let cases: Vec<Case<'_>> = vec![
            (Some(&schema_a), Some(b"{\"id\":1}}")),
            (Some(&schema_a), Some(&text[5_000..5_600])),
            (None, None),
            (Some(&schema_a), Some(b"x")),
            (Some(&schema_b), Some(&noise[..300])),
            (Some(&schema_a), Some(&text[..700])),
            (Some(&short), Some(b"{}}")),
            (Some(&schema_b), Some(b"{\"id\":2}}")),
            (Some(&huge), Some(b"tail")),
            (Some(&schema_b), Some(b"")),
            (None, Some(&noise[..64_000])),
            (Some(&schema_b), Some(&text[..9])),
        ];
        let header_value = b"h".as_slice();
        for (rounds, stride) in [(1, 1), (5, 1), (40, 1), (60, 0)] {
            let mut lz4 = BatchBuilder::new(Compression::Lz4, ProducerFields::default());
            let mut plain = BatchBuilder::new(Compression::None, ProducerFields::default());
            let mut expected = Vec::new();
            let mut repeated = 0;
            for i in 0..rounds * cases.len() {
                // Stride 0: the first (repeating) case only, many blocks of repeats.
                let (prefix, rest) = cases[(i * stride) % cases.len()];
                let whole: Option<Vec<u8>> = rest.map(|r| {
                    let mut v = prefix.map_or(Vec::new(), |p| p.to_vec());
                    v.extend_from_slice(r);
                    v
                });
                let key = format!("key-{i}");
                let headers = [RecordHeader {
                    key: "n",
                    value: (i % 3 == 0).then_some(header_value),
                }];
                let prefix = rest.and(prefix);
                lz4.append_with_prefix(i as i64, Some(key.as_bytes()), prefix, rest, &headers);
                plain.append(i as i64, Some(key.as_bytes()), whole.as_deref(), &headers);
                assert_eq!(lz4.size_bytes(), plain.size_bytes(), "record {i}");
                repeated = repeated.max(lz4.repeats.len());
                expected.push(whole);
            }
            assert!(repeated > 0, "no prefix was stored as a repeat");
            let built = lz4.build().unwrap();
            verify(&built).unwrap();
            let plain = plain.build().unwrap();
            if stride == 0 {
                assert!(
                    built.len() * 20 < plain.len(),
                    "{} of {}",
                    built.len(),
                    plain.len()
                );
            }
            let decoded = DecodedBatch::decode(&built).unwrap();
            let records = decoded.records().unwrap();
            let plain_decoded = DecodedBatch::decode(&plain).unwrap();
            let plain_records = plain_decoded.records().unwrap();
            assert_eq!(records.len(), expected.len());
            for (i, (r, p)) in records.iter().zip(&plain_records).enumerate() {
                assert_eq!(r.value, expected[i].as_deref(), "record {i}");
                assert_eq!((r.key, &r.headers), (p.key, &p.headers), "record {i}");
            }
            let mut framed = Vec::new();
            lz4_flex::frame::FrameDecoder::new(&built[HEADER_SIZE..])
                .read_to_end(&mut framed)
                .unwrap();
            assert_eq!(framed, plain[HEADER_SIZE..], "{rounds} rounds");
        }
    }

    #[test]
    fn shared_spans_anywhere_in_values_read_back_as_the_whole_values() {
        // Values made of literal pieces and shared spans at any position (start, middle, end,
        // back to back, short ones that are always copied, ones further back than a match can
        // reach): the batch holds the whole values, its frame is standard, and large blocks
        // say so in the frame descriptor.
        let [_, _, text, noise] = &sample_payloads()[..] else {
            unreachable!("four samples")
        };
        let pool: Vec<Arc<[u8]>> = vec![
            text[..2_900].to_vec().into(),
            text[3_000..3_300].to_vec().into(),
            text[4_000..4_150].to_vec().into(),
            b",\"xmin\":null}".to_vec().into(),
            noise[..70_000].to_vec().into(),
            noise[1_000..1_100].to_vec().into(),
        ];
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = |n: usize| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % n as u64) as usize
        };
        for (records, big_every) in [(3, 0), (400, 0), (300, 50)] {
            let mut lz4 = BatchBuilder::new(Compression::Lz4, ProducerFields::default());
            let mut plain = BatchBuilder::new(Compression::None, ProducerFields::default());
            let mut expected = Vec::new();
            let mut repeated = 0;
            for i in 0..records {
                let mut physical = Vec::new();
                let mut spans: Vec<(usize, Arc<[u8]>)> = Vec::new();
                let mut whole = Vec::new();
                for _ in 0..1 + next(5) {
                    let lit = next(3) * next(200);
                    let start = next(text.len() - 200);
                    physical.extend_from_slice(&text[start..start + lit]);
                    whole.extend_from_slice(&text[start..start + lit]);
                    let mut k = next(pool.len());
                    if k == 4 && (big_every == 0 || i % big_every != 0) {
                        k = 0;
                    }
                    spans.push((physical.len(), pool[k].clone()));
                    whole.extend_from_slice(&pool[k]);
                }
                let tail = next(40);
                physical.extend_from_slice(&text[..tail]);
                whole.extend_from_slice(&text[..tail]);
                let key = format!("key-{i}");
                // Every other key starts with a shared span too.
                let key_spans = if i % 2 == 0 {
                    vec![(0, pool[1].clone())]
                } else {
                    Vec::new()
                };
                let whole_key = [
                    key_spans.first().map_or(&[][..], |(_, s)| &s[..]),
                    key.as_bytes(),
                ]
                .concat();
                lz4.append_with_spans(
                    i as i64,
                    Some(key.as_bytes()),
                    &key_spans,
                    Some(&physical),
                    &spans,
                    &[],
                );
                plain.append(i as i64, Some(&whole_key), Some(&whole), &[]);
                assert_eq!(lz4.size_bytes(), plain.size_bytes(), "record {i}");
                repeated = repeated.max(lz4.repeats.len());
                expected.push(whole);
            }
            if records > 3 {
                assert!(repeated > 0, "no span was stored as a repeat");
            }
            let built = lz4.build().unwrap();
            verify(&built).unwrap();
            let plain = plain.build().unwrap();
            let decoded = DecodedBatch::decode(&built).unwrap();
            let got = decoded.records().unwrap();
            assert_eq!(got.len(), expected.len());
            let plain_decoded = DecodedBatch::decode(&plain).unwrap();
            let plain_records = plain_decoded.records().unwrap();
            for (i, r) in got.iter().enumerate() {
                assert_eq!(r.value, Some(&expected[i][..]), "record {i}");
                assert_eq!(r.key, plain_records[i].key, "record {i}");
            }
            let mut framed = Vec::new();
            lz4_flex::frame::FrameDecoder::new(&built[HEADER_SIZE..])
                .read_to_end(&mut framed)
                .unwrap();
            assert_eq!(framed, plain[HEADER_SIZE..], "{records} records");
            let large = built[HEADER_SIZE..HEADER_SIZE + 7] == LZ4_FRAME_HEADER_LARGE;
            assert_eq!(large, records > 3, "{records} records");
            assert!(
                built.len() * 3 < plain.len(),
                "{} of {}",
                built.len(),
                plain.len()
            );
        }
    }

    #[test]
    fn a_record_larger_than_a_repeat_block_is_stored_in_standard_blocks() {
        // One value over 1 MiB holding the same span twice, close together, after a small
        // record with spans: every block still fits the frame's declared maximum.
        let [_, _, text, noise] = &sample_payloads()[..] else {
            unreachable!("four samples")
        };
        let span: Arc<[u8]> = text[..300].to_vec().into();
        let mut physical = Vec::new();
        while physical.len() < LZ4_REPEAT_BLOCK + 10_000 {
            // Compressible, so the block is stored compressed.
            physical.extend_from_slice(&noise[..100]);
            physical.extend_from_slice(&text[..20_000]);
        }
        let spans = vec![(10, span.clone()), (20, span.clone())];
        let whole = [
            &physical[..10],
            &span,
            &physical[10..20],
            &span,
            &physical[20..],
        ]
        .concat();
        let small = [&span[..], b"x"].concat();
        let mut lz4 = BatchBuilder::new(Compression::Lz4, ProducerFields::default());
        lz4.append_with_spans(0, None, &[], Some(b"x"), &[(0, span.clone())], &[]);
        lz4.append_with_spans(1, None, &[], Some(&physical), &spans, &[]);
        lz4.append_with_spans(2, None, &[], Some(b"x"), &[(0, span.clone())], &[]);
        let built = lz4.build().unwrap();
        verify(&built).unwrap();
        let decoded = DecodedBatch::decode(&built).unwrap();
        let records = decoded.records().unwrap();
        assert_eq!(records[0].value, Some(&small[..]));
        assert_eq!(records[1].value, Some(&whole[..]));
        assert_eq!(records[2].value, Some(&small[..]));
        // lz4_flex's frame decoder enforces the declared block size.
        let mut framed = Vec::new();
        lz4_flex::frame::FrameDecoder::new(&built[HEADER_SIZE..])
            .read_to_end(&mut framed)
            .unwrap();
        assert!(framed.len() > LZ4_REPEAT_BLOCK);
    }

    #[test]
    fn incremental_lz4_equals_compressing_the_whole_section() {
        // Records compressed block by block as they are appended give the same bytes as the
        // uncompressed section compressed at once: across block boundaries, with records
        // larger than a block, and with incompressible data stored as raw blocks.
        let [_, _, text, noise] = &sample_payloads()[..] else {
            unreachable!("four samples")
        };
        let values: Vec<&[u8]> = vec![
            b"small",
            &text[..3_600],
            &noise[..100],
            &text[..],
            &noise[..],
            &text[..70_000],
            b"",
            &noise[..65_000],
        ];
        for rounds in [1, 3, 40] {
            let mut lz4 = BatchBuilder::new(Compression::Lz4, ProducerFields::default());
            let mut plain = BatchBuilder::new(Compression::None, ProducerFields::default());
            for i in 0..rounds * values.len() {
                let value = values[i % values.len()];
                let key = format!("key-{i}");
                lz4.append(5 + i as i64, Some(key.as_bytes()), Some(value), &[]);
                plain.append(5 + i as i64, Some(key.as_bytes()), Some(value), &[]);
                assert_eq!(lz4.size_bytes(), plain.size_bytes());
            }
            let built = lz4.build().unwrap();
            let plain = plain.build().unwrap();
            let whole = compress(Compression::Lz4, &plain[HEADER_SIZE..]).unwrap();
            assert_eq!(built[HEADER_SIZE..], whole[..], "{rounds} rounds");
            verify(&built).unwrap();
            let decoded = DecodedBatch::decode(&built).unwrap();
            let records = decoded.records().unwrap();
            assert_eq!(records.len(), rounds * values.len());
            for (i, r) in records.iter().enumerate() {
                assert_eq!(r.value, Some(values[i % values.len()]), "record {i}");
            }
        }
    }

    #[test]
    fn uncompressed_layout_matches_kafka() {
        // One record, key "k", value "v", timestamp 1000: bytes checked field by field.
        let mut b = BatchBuilder::new(Compression::None, ProducerFields::default());
        b.append(1000, Some(b"k"), Some(b"v"), &[]);
        let batch = b.build().unwrap();
        let h = BatchHeader::parse(&batch).unwrap();
        assert_eq!(h.batch_length as usize, batch.len() - 12);
        assert_eq!((h.magic, h.attributes, h.last_offset_delta), (2, 0, 0));
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (-1, -1, -1)
        );
        // record: len=8, attrs 0, tsDelta 0, offsetDelta 0, keyLen 1 'k', valueLen 1 'v', headers 0
        assert_eq!(&batch[61..], &[0x10, 0, 0, 0, 0x02, b'k', 0x02, b'v', 0]);
        assert_eq!(h.crc, crc32c::crc32c(&batch[21..]));
    }

    #[test]
    fn verify_rejects_torn_and_corrupt_batches() {
        let batch = sample(Compression::None);
        assert!(matches!(
            verify(&batch[..batch.len() - 1]),
            Err(BatchError::Incomplete { .. })
        ));
        assert!(matches!(
            verify(&batch[..30]),
            Err(BatchError::Incomplete { .. })
        ));
        let mut flipped = batch.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0x01;
        assert!(matches!(verify(&flipped), Err(BatchError::Corrupt(_))));
        let mut bad_magic = batch.clone();
        bad_magic[16] = 1;
        assert!(matches!(verify(&bad_magic), Err(BatchError::Corrupt(_))));
        assert!(verify(&batch).is_ok());
    }

    #[test]
    fn control_batches_mark_transactions() {
        let batch = control_batch(7, 0, ControlType::Commit, 5);
        let decoded = DecodedBatch::decode(&batch).unwrap();
        assert!(decoded.header.is_control() && decoded.header.is_transactional());
        assert_eq!(decoded.header.producer_id, 7);
        let recs = decoded.records().unwrap();
        assert_eq!(
            control_type(recs[0].key.unwrap()),
            Some(ControlType::Commit)
        );
        let abort = control_batch(7, 0, ControlType::Abort, 5);
        let decoded = DecodedBatch::decode(&abort).unwrap();
        assert_eq!(
            control_type(decoded.records().unwrap()[0].key.unwrap()),
            Some(ControlType::Abort)
        );
    }
}
