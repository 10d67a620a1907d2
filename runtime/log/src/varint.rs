//! Kafka's zig-zag variable-length integers (protobuf style), used inside RecordBatch v2 records.
//!
//! Invariant: `read_*` never reads past the slice and rejects encodings longer than the type
//! allows (5 bytes for 32-bit, 10 for 64-bit), so corrupt input cannot loop or overflow.

/// Appends a zig-zag varint (Kafka `varint`, 32-bit).
pub fn write_varint(out: &mut Vec<u8>, value: i32) {
    write_unsigned(out, u64::from(((value << 1) ^ (value >> 31)) as u32));
}

/// Appends a zig-zag varlong (Kafka `varlong`, 64-bit).
pub fn write_varlong(out: &mut Vec<u8>, value: i64) {
    write_unsigned(out, ((value << 1) ^ (value >> 63)) as u64);
}

fn write_unsigned(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Encoded size of a zig-zag varint.
pub fn varint_len(value: i32) -> usize {
    unsigned_len(u64::from(((value << 1) ^ (value >> 31)) as u32))
}

/// Encoded size of a zig-zag varlong.
pub fn varlong_len(value: i64) -> usize {
    unsigned_len(((value << 1) ^ (value >> 63)) as u64)
}

fn unsigned_len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Reads a zig-zag varint at `*pos`, advancing it. `None` on truncated or over-long input.
pub fn read_varint(buf: &[u8], pos: &mut usize) -> Option<i32> {
    let raw = read_unsigned(buf, pos, 5)?;
    let raw = u32::try_from(raw).ok()?;
    Some(((raw >> 1) as i32) ^ -((raw & 1) as i32))
}

/// Reads a zig-zag varlong at `*pos`, advancing it. `None` on truncated or over-long input.
pub fn read_varlong(buf: &[u8], pos: &mut usize) -> Option<i64> {
    let raw = read_unsigned(buf, pos, 10)?;
    Some(((raw >> 1) as i64) ^ -((raw & 1) as i64))
}

fn read_unsigned(buf: &[u8], pos: &mut usize, max_bytes: usize) -> Option<u64> {
    let mut result = 0u64;
    for i in 0..max_bytes {
        let b = *buf.get(*pos)?;
        *pos += 1;
        result |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some(result);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zigzag_roundtrip_and_lengths() {
        for v in [0i32, -1, 1, 63, -64, 64, 300, -300, i32::MAX, i32::MIN] {
            let mut out = Vec::new();
            write_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v));
            let mut pos = 0;
            assert_eq!(read_varint(&out, &mut pos), Some(v));
            assert_eq!(pos, out.len());
        }
        for v in [0i64, -1, 1, 1 << 40, -(1 << 40), i64::MAX, i64::MIN] {
            let mut out = Vec::new();
            write_varlong(&mut out, v);
            assert_eq!(out.len(), varlong_len(v));
            let mut pos = 0;
            assert_eq!(read_varlong(&out, &mut pos), Some(v));
        }
        // Known encodings: -1 -> 0x01, 1 -> 0x02, 64 -> 0x80 0x01.
        let mut out = Vec::new();
        write_varint(&mut out, -1);
        write_varint(&mut out, 1);
        write_varint(&mut out, 64);
        assert_eq!(out, [0x01, 0x02, 0x80, 0x01]);
        assert_eq!(read_varint(&[0x80], &mut 0), None);
        assert_eq!(
            read_varint(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01], &mut 0),
            None
        );
    }
}
