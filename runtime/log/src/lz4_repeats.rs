//! LZ4 block compression of input in which some spans are known repeats of earlier input.
//!
//! The JSON converter with schemas starts every value of a table with the same ~3 KB
//! `{"schema":…,"payload":` bytes. A batch builder that knows a value starts with bytes it
//! stored one record earlier does not copy them into its block at all: it notes a [`Repeat`]
//! (length, and distance back to the earlier copy) where they belong, and this encoder writes
//! the span as one LZ4 match without reading it. The bytes that are present (the *physical*
//! input) are compressed as usual, greedily on 4-byte hashes.
//!
//! Invariants:
//! - the output is one standard LZ4 block that decodes to the *logical* input: the physical
//!   bytes with every repeat's span inserted before the physical byte it names;
//! - a match found by hashing lies inside one stretch of physical bytes between repeats, on
//!   the side it copies from as on the side it writes, so the bytes it was checked against are
//!   the bytes the decoder copies;
//! - the block ends as the format requires (the last 5 bytes are literals, no match starts in
//!   the last 12), and no match reaches back further than 65,535 bytes or before the block;
//! - a repeat list that breaks any of this is refused ([`InvalidRepeats`]), never encoded.

use std::mem::MaybeUninit;

const MIN_MATCH: usize = 4;
const LAST_LITERALS: usize = 5;
const MF_LIMIT: usize = 12;
/// The farthest an LZ4 match reaches back.
pub const MAX_DISTANCE: usize = 65_535;
const HASH_LOG: u32 = 12;

/// A span of the logical input that repeats earlier logical input of the same block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repeat {
    /// The physical position the span is inserted before.
    pub at: usize,
    /// The span's length.
    pub len: usize,
    /// How far back (in logical bytes) the earlier copy starts.
    pub distance: usize,
}

/// A repeat list that cannot be encoded as given (see the module invariants).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidRepeats(pub String);

/// Reused encoder state: the hash table and the stretches of physical bytes between repeats.
///
/// The table is not cleared per block: each block numbers its positions from `base` up, and
/// entries at or below the current block's `base` belong to earlier blocks and are ignored.
/// It is cleared only when the numbering would overflow.
pub struct RepeatEncoder {
    /// Hash of 4 bytes -> the stretch (high 32 bits) and `base` + physical position + 1 (low
    /// 32 bits) where they were last seen.
    table: Vec<u64>,
    /// The numbering offset of the block being encoded.
    base: u32,
    /// `shift[k]`: logical bytes inserted before stretch `k` (the sum of earlier repeats).
    shift: Vec<usize>,
    /// `start[k]`: the physical position stretch `k` starts at; `start[k + 1]` is where it
    /// ends (the last entry is the physical length).
    start: Vec<usize>,
}

impl Default for RepeatEncoder {
    fn default() -> Self {
        RepeatEncoder {
            table: vec![0; 1 << HASH_LOG],
            base: 0,
            shift: Vec::new(),
            start: Vec::new(),
        }
    }
}

#[inline]
fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or([0; 4]))
}

#[inline]
fn hash(sequence: u32) -> usize {
    (sequence.wrapping_mul(2_654_435_761) >> (32 - HASH_LOG)) as usize
}

/// How many leading bytes `a` and `b` (of equal length) have in common.
#[inline]
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    // Repeats are long (a record's schema text matches the one before it for kilobytes):
    // sixteen bytes per step with SSE2 on x86_64 (part of its baseline).
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8};
        while i + 16 <= n {
            // SAFETY: SSE2 is always available on x86_64; both loads read sixteen bytes inside
            // their slices (`i + 16 <= n <= len`) and have no alignment requirement.
            let equal = unsafe {
                let x = _mm_loadu_si128(a.as_ptr().add(i).cast());
                let y = _mm_loadu_si128(b.as_ptr().add(i).cast());
                _mm_movemask_epi8(_mm_cmpeq_epi8(x, y)) as u32 & 0xffff
            };
            if equal != 0xffff {
                return i + (!equal).trailing_zeros() as usize;
            }
            i += 16;
        }
    }
    while i + 8 <= n {
        let x = u64::from_le_bytes(a[i..i + 8].try_into().unwrap_or([0; 8]));
        let y = u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        let diff = x ^ y;
        if diff != 0 {
            return i + (diff.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

/// Writes one block's sequences into the spare capacity of its output vector.
///
/// Invariant: every byte of `spare[..written]` has been written. `compress` reserves the
/// block's worst-case size first, so the writes never run out of room (the slice indexing
/// would panic rather than write out of bounds if that bound were wrong).
struct BlockWriter<'a> {
    spare: &'a mut [MaybeUninit<u8>],
    written: usize,
}

/// How many bytes a short literal run is copied as (a fixed-size copy, cheaper than an exact
/// one; the bytes past the run are overwritten by what follows or cut off at the end).
const LITERAL_COPY: usize = 16;

impl BlockWriter<'_> {
    #[inline]
    fn byte(&mut self, b: u8) {
        self.spare[self.written].write(b);
        self.written += 1;
    }

    /// An LZ4 length continuation (`n` beyond the token's 15).
    #[inline]
    fn length(&mut self, n: usize) {
        let mut rest = n;
        while rest >= 255 {
            self.byte(255);
            rest -= 255;
        }
        self.byte(rest as u8);
    }

    /// `physical[from..to]` as literals.
    #[inline]
    fn literals(&mut self, physical: &[u8], from: usize, to: usize) {
        let len = to - from;
        let w = self.written;
        if len <= LITERAL_COPY
            && from + LITERAL_COPY <= physical.len()
            && w + LITERAL_COPY <= self.spare.len()
        {
            self.spare[w..w + LITERAL_COPY]
                .write_copy_of_slice(&physical[from..from + LITERAL_COPY]);
        } else {
            self.spare[w..w + len].write_copy_of_slice(&physical[from..to]);
        }
        self.written = w + len;
    }

    /// One sequence: literals `physical[from..to]`, then a match of `match_len` bytes
    /// `distance` back.
    #[inline(always)]
    fn sequence(
        &mut self,
        physical: &[u8],
        (from, to): (usize, usize),
        distance: usize,
        match_len: usize,
    ) {
        let lit = to - from;
        let extra = match_len - MIN_MATCH;
        self.byte(((lit.min(15) as u8) << 4) | extra.min(15) as u8);
        if lit >= 15 {
            self.length(lit - 15);
        }
        self.literals(physical, from, to);
        let w = self.written;
        self.spare[w..w + 2].write_copy_of_slice(&(distance as u16).to_le_bytes());
        self.written = w + 2;
        if extra >= 15 {
            self.length(extra - 15);
        }
    }

    /// The block's closing literals, `physical[from..]`.
    fn last_literals(&mut self, physical: &[u8], from: usize) {
        let lit = physical.len() - from;
        self.byte((lit.min(15) as u8) << 4);
        if lit >= 15 {
            self.length(lit - 15);
        }
        self.literals(physical, from, physical.len());
    }
}

/// The most bytes one block of `n` physical bytes and `repeats` can take (every physical
/// byte a literal; every sequence with its token, offset and length bytes; at most one match
/// per 4 physical bytes), plus room for one short-literal copy.
fn block_bound(n: usize, repeats: &[Repeat]) -> usize {
    let sequences = n / MIN_MATCH + repeats.len() + 1;
    let repeat_lengths: usize = repeats.iter().map(|r| r.len / 255).sum();
    n + 2 * (n / 255) + 5 * sequences + repeat_lengths + LITERAL_COPY
}

impl RepeatEncoder {
    /// Appends to `out` one LZ4 block holding the logical input of `physical` and `repeats`
    /// (sorted by `at`).
    pub fn compress(
        &mut self,
        physical: &[u8],
        repeats: &[Repeat],
        out: &mut Vec<u8>,
    ) -> Result<(), InvalidRepeats> {
        let n = physical.len();
        self.shift.clear();
        self.start.clear();
        self.start.push(0);
        let mut inserted = 0usize;
        for r in repeats {
            self.shift.push(inserted);
            self.start.push(r.at);
            inserted += r.len;
        }
        self.shift.push(inserted);
        self.start.push(n);
        let logical_len = n + inserted;
        if n as u64 + 2 > u64::from(u32::MAX) {
            return Err(InvalidRepeats(format!(
                "a block of {n} physical bytes is larger than the encoder numbers"
            )));
        }
        let mut last_at = 0;
        for (k, r) in repeats.iter().enumerate() {
            let start = r.at + self.shift[k];
            if r.at < last_at
                || r.at > n
                || r.len < MIN_MATCH
                || r.distance == 0
                || r.distance > MAX_DISTANCE.min(start)
                || start + MF_LIMIT > logical_len
                || start + r.len + LAST_LITERALS > logical_len
            {
                return Err(InvalidRepeats(format!(
                    "repeat {k} ({r:?}, logical start {start}) does not fit a block of \
                     {logical_len} bytes"
                )));
            }
            last_at = r.at;
        }
        if u64::from(self.base) + n as u64 + 2 > u64::from(u32::MAX) {
            self.table.fill(0);
            self.base = 0;
        }
        let base = self.base;
        // The next block numbers its positions above every position of this one.
        self.base += n as u32 + 1;
        let bound = block_bound(n, repeats);
        out.reserve(bound);
        let origin = out.len();
        let mut sink = BlockWriter {
            spare: &mut out.spare_capacity_mut()[..bound],
            written: 0,
        };
        let mut anchor = 0usize;
        for k in 0..=repeats.len() {
            let start = self.start[k];
            let end = self.start[k + 1];
            let last = k == repeats.len();
            // A match found here ends by `match_limit` and starts at or before `search_last`.
            let (match_limit, search_last) = if last {
                (n.saturating_sub(LAST_LITERALS), n.checked_sub(MF_LIMIT))
            } else {
                (end, end.checked_sub(MIN_MATCH))
            };
            let mut p = start;
            let mut misses = 0u32;
            while search_last.is_some_and(|s| p <= s) {
                let sequence = read_u32(physical, p);
                let h = hash(sequence);
                let entry = self.table[h];
                self.table[h] = ((k as u64) << 32) | u64::from(base + p as u32 + 1);
                let numbered = entry as u32;
                if let Some((c, ck, len)) = (numbered > base)
                    .then(|| ((numbered - base - 1) as usize, (entry >> 32) as usize))
                    .and_then(|c| self.try_match(physical, k, p, c, sequence, match_limit))
                {
                    // Extend backwards over pending literals of this stretch.
                    let c_start = self.start[ck];
                    let (mut p0, mut c0, mut len) = (p, c, len);
                    while p0 > anchor && c0 > c_start && physical[p0 - 1] == physical[c0 - 1] {
                        p0 -= 1;
                        c0 -= 1;
                        len += 1;
                    }
                    let distance = (p + self.shift[k]) - (c + self.shift[ck]);
                    sink.sequence(physical, (anchor, p0), distance, len);
                    p = p0 + len;
                    anchor = p;
                    misses = 0;
                    continue;
                }
                misses += 1;
                p += 1 + (misses >> 6) as usize;
            }
            if last {
                sink.last_literals(physical, anchor);
            } else {
                let r = repeats[k];
                sink.sequence(physical, (anchor, r.at), r.distance, r.len);
                anchor = r.at;
            }
        }
        let written = sink.written;
        // SAFETY: `BlockWriter` wrote every byte of the first `written` bytes of the spare
        // capacity (its invariant), and `written <= bound <= capacity - origin`.
        unsafe { out.set_len(origin + written) };
        Ok(())
    }

    /// The match of physical position `p` (in stretch `k`) against candidate `c` (in stretch
    /// `ck`): the candidate, its stretch and the match length, when the bytes agree and the
    /// distance and stretches allow it.
    #[inline]
    fn try_match(
        &self,
        physical: &[u8],
        k: usize,
        p: usize,
        (c, ck): (usize, usize),
        sequence: u32,
        match_limit: usize,
    ) -> Option<(usize, usize, usize)> {
        if c >= p || ck > k || read_u32(physical, c) != sequence {
            return None;
        }
        let c_end = self.start[ck + 1];
        if c + MIN_MATCH > c_end {
            return None;
        }
        let distance = (p + self.shift[k]) - (c + self.shift[ck]);
        if distance > MAX_DISTANCE {
            return None;
        }
        let max_len = (match_limit - p).min(c_end - c);
        if max_len < MIN_MATCH {
            return None;
        }
        let len = MIN_MATCH
            + common_prefix(
                &physical[p + MIN_MATCH..p + max_len],
                &physical[c + MIN_MATCH..c + max_len],
            );
        Some((c, ck, len))
    }
}

/// The logical input of `physical` and `repeats` written out (what the block decodes to).
pub fn materialize(physical: &[u8], repeats: &[Repeat]) -> Vec<u8> {
    let inserted: usize = repeats.iter().map(|r| r.len).sum();
    let mut out = Vec::with_capacity(physical.len() + inserted);
    let mut from = 0;
    for r in repeats {
        out.extend_from_slice(&physical[from..r.at]);
        let src = out.len() - r.distance;
        for i in 0..r.len {
            out.push(out[src + i]);
        }
        from = r.at;
    }
    out.extend_from_slice(&physical[from..]);
    out
}

#[cfg(test)]
mod tests {

    #[test]
    fn common_prefix_finds_the_first_difference_at_every_position() {
        let a: Vec<u8> = (0..70u8).collect();
        for len_b in [0, 1, 15, 16, 17, 40, 70] {
            for differ_at in 0..=len_b {
                let mut b = a[..len_b].to_vec();
                if differ_at < len_b {
                    b[differ_at] ^= 0x80;
                }
                assert_eq!(
                    common_prefix(&a, &b),
                    differ_at,
                    "len {len_b}, at {differ_at}"
                );
                assert_eq!(
                    common_prefix(&b, &a),
                    differ_at,
                    "len {len_b}, at {differ_at}"
                );
            }
        }
    }

    use super::*;

    /// A deterministic generator (xorshift), so failures reproduce.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    fn round_trip(physical: &[u8], repeats: &[Repeat]) -> usize {
        let mut enc = RepeatEncoder::default();
        let mut block = Vec::new();
        enc.compress(physical, repeats, &mut block)
            .expect("valid repeats");
        let logical = materialize(physical, repeats);
        let decoded =
            lz4_flex::block::decompress(&block, logical.len()).expect("a valid LZ4 block");
        assert_eq!(
            decoded, logical,
            "decoded bytes differ from the logical input"
        );
        block.len()
    }

    /// Records shaped like the JSON converter's: a header, a long shared prefix (the first
    /// written out, later ones as repeats of the previous), a varying payload.
    fn records(rng: &mut Rng, prefix: &[u8], count: usize) -> (Vec<u8>, Vec<Repeat>) {
        let mut physical = Vec::new();
        let mut repeats = Vec::new();
        let mut logical_len = 0usize;
        let mut last_prefix_at: Option<usize> = None;
        for i in 0..count {
            let header = [0x80 | (i as u8 & 0x7f), 0x1c, 0, 2, (i % 7) as u8];
            physical.extend_from_slice(&header);
            logical_len += header.len();
            match last_prefix_at {
                Some(at) if logical_len - at <= MAX_DISTANCE => repeats.push(Repeat {
                    at: physical.len(),
                    len: prefix.len(),
                    distance: logical_len - at,
                }),
                _ => physical.extend_from_slice(prefix),
            }
            last_prefix_at = Some(logical_len);
            logical_len += prefix.len();
            let payload = format!(
                "{{\"id\":{},\"note\":\"{}\",\"lsn\":{}}}}}",
                1_000_000 + i,
                "x".repeat(rng.below(40)),
                rng.next() % 100_000_000
            );
            physical.extend_from_slice(payload.as_bytes());
            logical_len += payload.len();
        }
        (physical, repeats)
    }

    #[test]
    fn record_streams_with_repeated_prefixes_round_trip() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let unit = b"{\"schema\":{\"type\":\"struct\",\"fields\":[]}";
        let prefix: Vec<u8> = (0..2900).map(|i| unit[i % unit.len()]).collect();
        for count in [1, 2, 3, 17] {
            let (physical, repeats) = records(&mut rng, &prefix, count);
            let size = round_trip(&physical, &repeats);
            if count > 1 {
                assert!(
                    size < physical.len() / 2,
                    "{size} bytes for {}",
                    physical.len()
                );
            }
        }
    }

    #[test]
    fn random_inputs_and_repeats_round_trip() {
        let mut rng = Rng(42);
        let mut encoded_with_repeats = 0;
        for case in 0..2000 {
            // Small alphabets make hash matches (and matches next to repeats) frequent.
            let alphabet = 1 + rng.below(if case % 3 == 0 { 2 } else { 20 });
            let len = rng.below(if case % 5 == 0 { 20 } else { 3000 });
            let physical: Vec<u8> = (0..len).map(|_| b'a' + rng.below(alphabet) as u8).collect();
            // Repeats at sorted physical places, each reaching back into what precedes it.
            let mut places: Vec<usize> = (0..rng.below(6)).map(|_| rng.below(len + 1)).collect();
            places.sort_unstable();
            let mut repeats = Vec::new();
            let mut logical = 0usize;
            let mut inserted = 0usize;
            for at in places {
                logical = at + inserted;
                if logical == 0 {
                    continue;
                }
                let r = Repeat {
                    at,
                    len: MIN_MATCH + rng.below(300),
                    distance: 1 + rng.below(logical.min(MAX_DISTANCE)),
                };
                inserted += r.len;
                repeats.push(r);
            }
            let _ = logical;
            let total = len + inserted;
            // Keep only repeats the block's end allows; the rest are refused (checked below).
            let fits = |r: &Repeat, shift: usize| {
                let start = r.at + shift;
                start + r.len + LAST_LITERALS <= total && start + MF_LIMIT <= total
            };
            let mut shift = 0;
            let all_fit = repeats.iter().all(|r| {
                let ok = fits(r, shift);
                shift += r.len;
                ok
            });
            if all_fit {
                round_trip(&physical, &repeats);
                if !repeats.is_empty() {
                    encoded_with_repeats += 1;
                }
            } else {
                let mut enc = RepeatEncoder::default();
                let mut block = Vec::new();
                assert!(enc.compress(&physical, &repeats, &mut block).is_err());
            }
        }
        assert!(
            encoded_with_repeats > 500,
            "{encoded_with_repeats} cases had repeats"
        );
    }

    #[test]
    fn a_reused_encoder_never_matches_against_an_earlier_block() {
        // Consecutive blocks share their text, so an entry left from an earlier block would
        // match if it were not ignored; each block must decode by itself. The numbering is
        // also pushed to its overflow, where the table is cleared.
        let mut rng = Rng(7);
        let unit = b"{\"schema\":{\"type\":\"struct\",\"fields\":[]}";
        let prefix: Vec<u8> = (0..300).map(|i| unit[i % unit.len()]).collect();
        let mut enc = RepeatEncoder::default();
        for block_no in 0..40 {
            if block_no == 20 {
                enc.base = u32::MAX - 5_000;
            }
            let (physical, repeats) = records(&mut rng, &prefix, 1 + block_no % 5);
            let mut block = Vec::new();
            enc.compress(&physical, &repeats, &mut block)
                .expect("valid repeats");
            let logical = materialize(&physical, &repeats);
            let decoded =
                lz4_flex::block::decompress(&block, logical.len()).expect("a valid LZ4 block");
            assert_eq!(decoded, logical, "block {block_no}");
        }
        assert!(enc.base < 1_000_000, "the numbering started again");
    }

    #[test]
    fn matches_never_reach_across_a_repeat() {
        // The stretch before the repeat and the one after share a pattern across the place
        // where the repeat sits; a match that ignored the repeat would copy the wrong bytes.
        let mut physical = b"0123456789abcdefABCDEFGH".to_vec();
        physical.extend_from_slice(b"0123456789abcdefZZZZZZZZZZZZZZZZZZZZ");
        let repeats = [Repeat {
            at: 16,
            len: 8,
            distance: 16,
        }];
        round_trip(&physical, &repeats);
    }

    #[test]
    fn invalid_repeats_are_refused() {
        let physical = vec![b'x'; 100];
        let mut enc = RepeatEncoder::default();
        let mut block = Vec::new();
        for bad in [
            Repeat {
                at: 0,
                len: 10,
                distance: 1,
            }, // nothing before it
            Repeat {
                at: 10,
                len: 10,
                distance: 11,
            }, // reaches before the block
            Repeat {
                at: 10,
                len: 3,
                distance: 5,
            }, // shorter than a match
            Repeat {
                at: 98,
                len: 10,
                distance: 5,
            }, // ends inside the last literals
            Repeat {
                at: 101,
                len: 10,
                distance: 5,
            }, // past the physical input
        ] {
            assert!(
                enc.compress(&physical, &[bad], &mut block).is_err(),
                "{bad:?}"
            );
        }
    }
}
