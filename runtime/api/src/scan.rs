//! Finding the bytes a JSON string writer must look at: a control character (below 0x20),
//! `"`, `\`, or a byte at or above a writer-chosen threshold (0xF0 for writers that only care
//! about supplementary characters, 0x7F for writers that check every non-ASCII character).
//!
//! Both escaping writers (Kafka Connect's JSON converter text and MongoDB extended JSON) spend
//! most of their time here on escape-dense text, so the scan looks at sixteen bytes per step
//! and gives a bit mask of the flagged ones, so that a writer handles every hit of a step
//! without scanning again: SSE2 on x86_64 (part of that architecture's baseline, so always
//! present), two exact eight-byte word tests elsewhere.
//!
//! Invariant: [`flagged_mask16`] and [`find_flagged`] give exactly what the byte-by-byte
//! definition [`is_flagged`] gives (the tests compare them at every position of random text).

/// Whether a string writer must look at byte `b`, for a threshold of `HIGH`.
#[inline]
pub const fn is_flagged<const HIGH: u8>(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\' || b >= HIGH
}

/// Bit `k` is set where `bytes[at + k]` is flagged, for the sixteen bytes from `at`.
///
/// # Panics
/// When fewer than sixteen bytes follow `at`.
#[inline]
pub fn flagged_mask16<const HIGH: u8>(bytes: &[u8], at: usize) -> u32 {
    let chunk: &[u8; 16] = bytes[at..at + 16].try_into().expect("sixteen bytes");
    mask16::<HIGH>(chunk)
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn mask16<const HIGH: u8>(chunk: &[u8; 16]) -> u32 {
    use std::arch::x86_64::{
        _mm_cmpeq_epi8, _mm_loadu_si128, _mm_max_epu8, _mm_min_epu8, _mm_movemask_epi8,
        _mm_or_si128, _mm_set1_epi8,
    };
    // SAFETY: SSE2 is part of the x86_64 baseline, so the intrinsics are always available;
    // the load reads the sixteen bytes of `chunk` and has no alignment requirement.
    unsafe {
        let v = _mm_loadu_si128(chunk.as_ptr().cast());
        // Unsigned `v <= 0x1f` is `min(v, 0x1f) == v`; `v >= HIGH` is `max(v, HIGH) == v`.
        let control = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v);
        let upper = _mm_cmpeq_epi8(_mm_max_epu8(v, _mm_set1_epi8(HIGH as i8)), v);
        let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
        let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
        let flagged = _mm_or_si128(_mm_or_si128(control, upper), _mm_or_si128(quote, backslash));
        _mm_movemask_epi8(flagged) as u32 & 0xffff
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn mask16<const HIGH: u8>(chunk: &[u8; 16]) -> u32 {
    portable_mask16::<HIGH>(chunk)
}

/// [`mask16`] without SIMD (also built for the tests, which compare it with the definition).
#[cfg(any(not(target_arch = "x86_64"), test))]
#[inline]
fn portable_mask16<const HIGH: u8>(chunk: &[u8; 16]) -> u32 {
    let (low, high) = chunk.split_at(8);
    let word = |half: &[u8]| u64::from_le_bytes(half.try_into().expect("eight bytes"));
    mask8::<HIGH>(word(low)) | (mask8::<HIGH>(word(high)) << 8)
}

/// The flagged bytes of a little-endian word as eight bits. Every test is exact per byte:
/// the sums below never carry from one byte into the next.
#[cfg(any(not(target_arch = "x86_64"), test))]
#[inline]
fn mask8<const HIGH: u8>(w: u64) -> u32 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let low7 = w & !HIGHS;
    // The high bit of each byte of `low7 + ONES * k` says `(b & 0x7f) >= 0x80 - k`.
    let at_least = |k: u64| low7 + ONES * k;
    let equal = |c: u8| {
        let x = w ^ (ONES * u64::from(c));
        !(((x & !HIGHS) + ONES * 0x7f) | x) & HIGHS
    };
    let control = !(at_least(0x80 - 0x20) | w) & HIGHS;
    let upper = if HIGH >= 0x80 {
        w & at_least(0x100 - u64::from(HIGH)) & HIGHS
    } else {
        (at_least(0x80 - u64::from(HIGH)) | w) & HIGHS
    };
    let hits = control | upper | equal(b'"') | equal(b'\\');
    // Gather the eight high bits into one byte.
    ((hits >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56) as u32
}

/// For the sixteen bytes from `at`: bit `k` of the first mask is set where `bytes[at + k]` is
/// zero, of the second where it is not ASCII (its high bit is set). For NUL-terminated keys.
///
/// # Panics
/// When fewer than sixteen bytes follow `at`.
#[inline]
pub fn zero_and_non_ascii_mask16(bytes: &[u8], at: usize) -> (u32, u32) {
    let chunk: &[u8; 16] = bytes[at..at + 16].try_into().expect("sixteen bytes");
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_setzero_si128,
        };
        // SAFETY: SSE2 is part of the x86_64 baseline; the load reads the sixteen bytes of
        // `chunk` and has no alignment requirement.
        unsafe {
            let v = _mm_loadu_si128(chunk.as_ptr().cast());
            let zeros = _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_setzero_si128())) as u32;
            let high = _mm_movemask_epi8(v) as u32;
            (zeros & 0xffff, high & 0xffff)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        chunk
            .iter()
            .enumerate()
            .fold((0, 0), |(zeros, high), (k, &b)| {
                (
                    zeros | u32::from(b == 0) << k,
                    high | u32::from(b >= 0x80) << k,
                )
            })
    }
}

/// The index of the first byte at or after `from` for which [`is_flagged`] holds.
#[inline]
pub fn find_flagged<const HIGH: u8>(bytes: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i + 16 <= bytes.len() {
        let mask = flagged_mask16::<HIGH>(bytes, i);
        if mask != 0 {
            return Some(i + mask.trailing_zeros() as usize);
        }
        i += 16;
    }
    (i..bytes.len()).find(|&j| is_flagged::<HIGH>(bytes[j]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference<const HIGH: u8>(bytes: &[u8], from: usize) -> Option<usize> {
        (from..bytes.len()).find(|&i| is_flagged::<HIGH>(bytes[i]))
    }

    fn check<const HIGH: u8>(bytes: &[u8]) {
        for from in 0..=bytes.len() {
            assert_eq!(
                find_flagged::<HIGH>(bytes, from),
                reference::<HIGH>(bytes, from),
                "HIGH {HIGH:#x} from {from} in {bytes:?}"
            );
        }
    }

    fn check_masks<const HIGH: u8>(bytes: &[u8]) {
        for at in 0..bytes.len().saturating_sub(15) {
            let expected = (0..16)
                .filter(|k| is_flagged::<HIGH>(bytes[at + k]))
                .fold(0u32, |m, k| m | 1 << k);
            assert_eq!(
                flagged_mask16::<HIGH>(bytes, at),
                expected,
                "HIGH {HIGH:#x} at {at}"
            );
            let chunk: &[u8; 16] = bytes[at..at + 16].try_into().unwrap();
            assert_eq!(
                portable_mask16::<HIGH>(chunk),
                expected,
                "portable, HIGH {HIGH:#x}"
            );
        }
    }

    #[test]
    fn every_byte_value_at_every_lane_matches_the_definition() {
        // Each byte value at each position of a 40-byte run of plain text (two sixteen-byte
        // steps and a byte tail for `find_flagged`, every offset for the masks), with a
        // flagged byte after it or not.
        for value in 0..=255u8 {
            for at in 0..40 {
                let mut text = vec![b'a'; 40];
                text[at] = value;
                check::<0xF0>(&text);
                check::<0x7F>(&text);
                check::<0x80>(&text);
                check_masks::<0xF0>(&text);
                check_masks::<0x7F>(&text);
                text.push(b'"');
                check::<0xF0>(&text);
                check::<0x7F>(&text);
            }
        }
    }

    #[test]
    fn zero_and_non_ascii_masks_match_the_bytes() {
        for value in 0..=255u8 {
            for at in 0..16 {
                let mut text = [b'k'; 20];
                text[at] = value;
                text[(at + 5) % 16] = 0;
                let (zeros, high) = zero_and_non_ascii_mask16(&text, 0);
                for k in 0..16 {
                    assert_eq!(zeros >> k & 1 == 1, text[k] == 0, "{text:?} at {k}");
                    assert_eq!(high >> k & 1 == 1, text[k] >= 0x80, "{text:?} at {k}");
                }
            }
        }
    }

    #[test]
    fn random_text_matches_the_definition() {
        // A small linear congruential generator: dense text of printable bytes with every
        // kind of flagged byte sprinkled in (neighbours of the thresholds in particular).
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            (state >> 33) as u32
        };
        const SPICE: [u8; 12] = [
            0, 0x1f, 0x20, b'"', b'\\', 0x7e, 0x7f, 0x80, 0xc3, 0xef, 0xf0, 0xff,
        ];
        for _ in 0..300 {
            let len = next() as usize % 70;
            let text: Vec<u8> = (0..len)
                .map(|_| match next() % 8 {
                    0 => SPICE[next() as usize % SPICE.len()],
                    _ => b' ' + (next() % 95) as u8,
                })
                .collect();
            check::<0xF0>(&text);
            check::<0x7F>(&text);
            check_masks::<0xF0>(&text);
            check_masks::<0x7F>(&text);
        }
    }
}
