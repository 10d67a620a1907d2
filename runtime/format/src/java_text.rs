//! Byte-exact text forms that Kafka Connect's JSON converter gets from Java and Jackson:
//! `Double.toString` / `Float.toString` for floats, `BigDecimal.toString` for numeric decimals,
//! and Jackson's string escaping.
//!
//! Invariants: every function appends valid JSON text to the output buffer and allocates nothing
//! beyond it except a small stack-sized scratch for float digits.

/// Appends `text` as a JSON string literal, escaped exactly as Jackson does by default:
/// `"` and `\` backslash-escaped, `\b \t \n \f \r` short forms, other control characters as
/// `\u00XX` with upper-case hex, characters outside the Basic Multilingual Plane as their
/// UTF-16 surrogate pair `\uD83D\uDE00` (Jackson writes Java's UTF-16 chars one by one;
/// `COMBINE_UNICODE_SURROGATES_IN_UTF8` is off by default), everything else as UTF-8.
pub fn write_json_string(out: &mut Vec<u8>, text: &str) {
    // (A string shorter than sixteen bytes has no chunk to expand: it skips the CPU check and
    // the call.)
    #[cfg(target_arch = "x86_64")]
    if text.len() >= 16
        && std::arch::is_x86_feature_detected!("ssse3")
        && std::arch::is_x86_feature_detected!("popcnt")
    {
        // SAFETY: this CPU has SSSE3 and POPCNT (checked just now).
        return unsafe { quote_expansion::write_json_string_ssse3(out, text) };
    }
    write_json_string_with::<false>(out, text)
}

/// [`write_json_string`]'s body. With `EXPAND` (only instantiated for CPUs with SSSE3 and
/// POPCNT), a
/// sixteen-byte chunk whose only flagged bytes are quotes and backslashes (JSON text held in
/// a string is full of them) is escaped in two shuffles instead of byte by byte.
#[inline(always)]
fn write_json_string_with<const EXPAND: bool>(out: &mut Vec<u8>, text: &str) {
    use headwater_api::scan::flagged_mask16;
    const HIGH: u8 = 0xF0;
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    // `bytes[..written]` is in `out`. Sixteen bytes are tested at a time and every flagged one
    // of them is handled before the next sixteen; runs between flagged bytes are copied when
    // the next flagged byte (or the end) is reached.
    let mut written = 0;
    let mut chunk = 0;
    while chunk + 16 <= bytes.len() {
        let mask = flagged_mask16::<HIGH>(bytes, chunk);
        #[cfg(target_arch = "x86_64")]
        if EXPAND && mask != 0 && written <= chunk {
            // SAFETY: only the SSSE3 instantiation passes `EXPAND`; sixteen bytes follow
            // `chunk`.
            let quotes = unsafe { quote_expansion::simple_escapes_mask16(bytes, chunk) };
            if quotes == mask {
                if written < chunk {
                    copy_run(out, bytes, written, chunk);
                }
                // SAFETY: as above.
                unsafe { quote_expansion::expand16(out, bytes, chunk, quotes) };
                written = chunk + 16;
                chunk += 16;
                continue;
            }
        }
        written = escape_flagged(out, text, chunk, mask, written);
        chunk += 16;
    }
    // The last (up to fifteen) bytes in one step too: the final sixteen bytes of a long string,
    // or a short string copied into a padded buffer, with the bits of bytes outside the tail
    // dropped.
    let tail = bytes.len() - chunk;
    if tail > 0 {
        let mask = if bytes.len() >= 16 {
            flagged_mask16::<HIGH>(bytes, bytes.len() - 16) >> (16 - tail)
        } else {
            let mut padded = [b'a'; 16];
            padded[..tail].copy_from_slice(&bytes[chunk..]);
            flagged_mask16::<HIGH>(&padded, 0) & ((1 << tail) - 1)
        };
        written = escape_flagged(out, text, chunk, mask, written);
    }
    out.extend_from_slice(&bytes[written..]);
    out.push(b'"');
}

/// Writes the flagged bytes of `text` that `mask` marks (bit `i` for `text[base + i]`), each
/// after the unwritten run before it; returns how far `text` is written now (`written` before).
#[inline(always)]
fn escape_flagged(
    out: &mut Vec<u8>,
    text: &str,
    base: usize,
    mut mask: u32,
    mut written: usize,
) -> usize {
    let bytes = text.as_bytes();
    while mask != 0 {
        let at = base + mask.trailing_zeros() as usize;
        mask &= mask - 1;
        if at < written {
            // Inside a supplementary character written whole already (only lead bytes are
            // flagged, so this does not happen; kept for safety).
            continue;
        }
        copy_run(out, bytes, written, at);
        let b = bytes[at];
        written = if b == b'"' || b == b'\\' {
            // The common escapes (JSON text held in a string is full of quotes).
            out.extend_from_slice(&[b'\\', b]);
            at + 1
        } else {
            at + write_escape(out, text, at)
        };
    }
    written
}

/// Writes the escape of the flagged byte at `text[at]` and returns how many bytes of `text` it
/// stands for (four for a supplementary character, else one).
#[inline(never)]
fn write_escape(out: &mut Vec<u8>, text: &str, at: usize) -> usize {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let b = text.as_bytes()[at];
    match b {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        0x08 => out.extend_from_slice(b"\\b"),
        0x09 => out.extend_from_slice(b"\\t"),
        0x0a => out.extend_from_slice(b"\\n"),
        0x0c => out.extend_from_slice(b"\\f"),
        0x0d => out.extend_from_slice(b"\\r"),
        0xF0..=0xF4 => {
            // A four-byte UTF-8 sequence (the input is a valid `str`): one supplementary
            // character, written as its surrogate pair.
            let c = text[at..].chars().next().unwrap_or('\u{FFFD}');
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.extend_from_slice(b"\\u");
                for shift in [12, 8, 4, 0] {
                    out.push(HEX[usize::from((*unit >> shift) as u8 & 0x0f)]);
                }
            }
            return c.len_utf8();
        }
        _ => {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0x0f)]);
        }
    }
    1
}

/// Escaping of quotes and backslashes sixteen bytes at a time with SSSE3 shuffles: each half
/// of a chunk is spread out by a shuffle chosen by its 8-bit mask of bytes to escape, and the
/// backslashes are ORed into the gaps it leaves. Jackson's output is unchanged (the other
/// escapes still go byte by byte).
#[cfg(target_arch = "x86_64")]
mod quote_expansion {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
        _mm_shuffle_epi8, _mm_srli_si128, _mm_storeu_si128,
    };

    /// Per 8-bit mask: the shuffle that spreads eight bytes out (0x80, which zeroes, where a
    /// backslash goes and past the end) and the backslashes to OR into the gaps.
    struct Tables {
        shuffle: [[u8; 16]; 256],
        backslash: [[u8; 16]; 256],
    }

    const fn tables() -> Tables {
        let mut t = Tables {
            shuffle: [[0x80; 16]; 256],
            backslash: [[0; 16]; 256],
        };
        let mut mask = 0;
        while mask < 256 {
            let mut k = 0;
            let mut i = 0;
            while i < 8 {
                if (mask >> i) & 1 == 1 {
                    t.backslash[mask][k] = b'\\';
                    k += 1;
                }
                t.shuffle[mask][k] = i as u8;
                k += 1;
                i += 1;
            }
            mask += 1;
        }
        t
    }

    static TABLES: Tables = tables();

    /// The quotes and backslashes of `bytes[at..at + 16]`, one bit per byte.
    ///
    /// # Safety
    /// The CPU must have SSSE3 and POPCNT (SSE2 suffices, but callers are compiled for those),
    /// and sixteen bytes must follow `at`.
    #[target_feature(enable = "ssse3,popcnt")]
    #[inline]
    pub unsafe fn simple_escapes_mask16(bytes: &[u8], at: usize) -> u32 {
        debug_assert!(at + 16 <= bytes.len());
        let v = _mm_loadu_si128(bytes.as_ptr().add(at).cast());
        let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
        let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
        _mm_movemask_epi8(_mm_or_si128(quote, backslash)) as u32 & 0xffff
    }

    /// Appends `bytes[at..at + 16]` with a backslash before each byte whose bit is set in
    /// `mask` (which must mark only quotes and backslashes for the output to be Jackson's).
    ///
    /// # Safety
    /// The CPU must have SSSE3 and POPCNT, and sixteen bytes must follow `at`.
    #[target_feature(enable = "ssse3,popcnt")]
    #[inline]
    pub unsafe fn expand16(out: &mut Vec<u8>, bytes: &[u8], at: usize, mask: u32) {
        debug_assert!(at + 16 <= bytes.len());
        // Each half writes sixteen bytes (of which 8 + its escapes count).
        out.reserve(32);
        let v = _mm_loadu_si128(bytes.as_ptr().add(at).cast());
        let low = (mask & 0xff) as usize;
        let high = (mask >> 8) as usize;
        let len = out.len();
        let dst = out.as_mut_ptr().add(len);
        store_half(dst, v, low);
        let low_len = 8 + low.count_ones() as usize;
        store_half(dst.add(low_len), _mm_srli_si128::<8>(v), high);
        // SAFETY: the bytes up to here were written by the two stores, within the 32 reserved.
        out.set_len(len + low_len + 8 + high.count_ones() as usize);
    }

    /// Writes the first eight bytes of `v` spread out by `mask`'s shuffle, with backslashes in
    /// the gaps, as sixteen bytes at `dst`.
    #[target_feature(enable = "ssse3,popcnt")]
    #[inline]
    unsafe fn store_half(dst: *mut u8, v: __m128i, mask: usize) {
        let shuffle = _mm_loadu_si128(TABLES.shuffle[mask].as_ptr().cast());
        let backslash = _mm_loadu_si128(TABLES.backslash[mask].as_ptr().cast());
        let spread = _mm_or_si128(_mm_shuffle_epi8(v, shuffle), backslash);
        _mm_storeu_si128(dst.cast(), spread);
    }

    /// [`super::write_json_string`] compiled for SSSE3 and POPCNT.
    ///
    /// # Safety
    /// The CPU must have SSSE3 and POPCNT.
    #[target_feature(enable = "ssse3,popcnt")]
    pub unsafe fn write_json_string_ssse3(out: &mut Vec<u8>, text: &str) {
        super::write_json_string_with::<true>(out, text)
    }
}

/// Appends `bytes[from..to]`. Runs between escapes are short in escape-dense text (JSON held
/// in a string); up to 16 bytes are copied as a fixed 16 (an inline copy instead of a call)
/// when the input has them, and the surplus is cut off again.
#[inline]
fn copy_run(out: &mut Vec<u8>, bytes: &[u8], from: usize, to: usize) {
    const FIXED: usize = 16;
    let len = to - from;
    match bytes.get(from..from + FIXED) {
        Some(chunk) if len <= FIXED => {
            let end = out.len() + len;
            let mut fixed = [0u8; FIXED];
            fixed.copy_from_slice(chunk);
            out.extend_from_slice(&fixed);
            out.truncate(end);
        }
        _ => out.extend_from_slice(&bytes[from..to]),
    }
}

/// Appends a `double` as Jackson writes it: `Double.toString` text, and the non-finite values as
/// the quoted strings `"NaN"`, `"Infinity"`, `"-Infinity"` (Jackson's default
/// `WRITE_NAN_AS_STRINGS`).
pub fn write_java_double(out: &mut Vec<u8>, value: f64) {
    if !value.is_finite() {
        out.extend_from_slice(non_finite(value.is_nan(), value.is_sign_negative()).as_bytes());
        return;
    }
    headwater_api::java::write_double(out, value);
}

/// Appends a `float` as Jackson writes it (`Float.toString`, non-finite values quoted).
pub fn write_java_float(out: &mut Vec<u8>, value: f32) {
    if !value.is_finite() {
        out.extend_from_slice(non_finite(value.is_nan(), value.is_sign_negative()).as_bytes());
        return;
    }
    headwater_api::java::write_float(out, value);
}

fn non_finite(nan: bool, negative: bool) -> &'static str {
    if nan {
        "\"NaN\""
    } else if negative {
        "\"-Infinity\""
    } else {
        "\"Infinity\""
    }
}

/// Appends an unscaled decimal at `scale` as Java's `BigDecimal.toString()` renders it:
/// plain when `scale >= 0` and the adjusted exponent is at least -6, scientific otherwise
/// (`1E+3`, `1.23E-7`).
pub fn write_java_big_decimal(
    out: &mut Vec<u8>,
    unscaled_digits: &str,
    negative: bool,
    scale: i32,
) {
    let digits = unscaled_digits.as_bytes();
    let len = i64::try_from(digits.len()).unwrap_or(i64::MAX);
    let adjusted = -i64::from(scale) + (len - 1);
    if negative {
        out.push(b'-');
    }
    if scale >= 0 && adjusted >= -6 {
        let scale = usize::try_from(scale).unwrap_or(0);
        if scale == 0 {
            out.extend_from_slice(digits);
        } else if digits.len() > scale {
            let split = digits.len() - scale;
            out.extend_from_slice(&digits[..split]);
            out.push(b'.');
            out.extend_from_slice(&digits[split..]);
        } else {
            out.extend_from_slice(b"0.");
            out.extend(std::iter::repeat_n(b'0', scale - digits.len()));
            out.extend_from_slice(digits);
        }
        return;
    }
    out.push(digits[0]);
    if digits.len() > 1 {
        out.push(b'.');
        out.extend_from_slice(&digits[1..]);
    }
    out.push(b'E');
    if adjusted >= 0 {
        out.push(b'+');
    }
    out.extend_from_slice(adjusted.to_string().as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte-at-a-time escaping the word-at-a-time scan must agree with.
    fn escape_reference(text: &str) -> Vec<u8> {
        let mut out = vec![b'"'];
        for c in text.chars() {
            match c {
                '"' => out.extend_from_slice(b"\\\""),
                '\\' => out.extend_from_slice(b"\\\\"),
                '\u{8}' => out.extend_from_slice(b"\\b"),
                '\t' => out.extend_from_slice(b"\\t"),
                '\n' => out.extend_from_slice(b"\\n"),
                '\u{c}' => out.extend_from_slice(b"\\f"),
                '\r' => out.extend_from_slice(b"\\r"),
                '\u{0}'..='\u{1f}' => {
                    out.extend_from_slice(format!("\\u{:04X}", c as u32).as_bytes())
                }
                c if (c as u32) >= 0x10000 => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        out.extend_from_slice(format!("\\u{u:04X}").as_bytes());
                    }
                }
                c => {
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
            }
        }
        out.push(b'"');
        out
    }

    #[test]
    fn string_escaping_matches_the_reference_at_every_position() {
        let pieces = [
            "a",
            "\"",
            "\\",
            "\n",
            "\u{1}",
            "\u{1f}",
            " ",
            "~",
            "é",
            "€",
            "\u{7f}",
            "!",
            "😀",
            "\u{10ffff}",
            "\u{2028}",
        ];
        for text in random_texts(&pieces, 40, 50, 12345) {
            let mut out = Vec::new();
            write_json_string(&mut out, &text);
            assert_eq!(out, escape_reference(&text), "{text:?}");
        }
    }

    /// `per_length` texts of each length below `lengths` pieces, the pieces drawn from `pieces`
    /// by a fixed pseudo-random sequence starting at `seed`.
    fn random_texts(pieces: &[&str], lengths: usize, per_length: usize, seed: u32) -> Vec<String> {
        let mut seed = seed;
        let mut texts = Vec::new();
        for len in 0..lengths {
            for _ in 0..per_length {
                let mut text = String::new();
                for _ in 0..len {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    text.push_str(pieces[(seed >> 16) as usize % pieces.len()]);
                }
                texts.push(text);
            }
        }
        texts
    }

    #[test]
    fn every_arrangement_of_quotes_in_a_chunk_escapes_alike_on_both_paths() {
        // Each of the 65,536 ways of placing escapable bytes in a sixteen-byte chunk, after a
        // prefix that shifts the chunk and with output already in the buffer.
        for pattern in 0u32..1 << 16 {
            let body: String = (0..16)
                .map(|i| match (pattern >> i & 1, i % 3) {
                    (0, _) => 'a',
                    (_, 0) => '\\',
                    _ => '"',
                })
                .collect();
            let text = format!("{}{body}{}", "p".repeat(pattern as usize % 5), "s");
            let mut scalar = b"prior".to_vec();
            write_json_string_with::<false>(&mut scalar, &text);
            let mut fast = b"prior".to_vec();
            write_json_string(&mut fast, &text);
            assert_eq!(fast, scalar, "{text:?}");
            assert_eq!(&scalar[5..], escape_reference(&text), "{text:?}");
        }
    }

    #[test]
    fn json_held_in_a_string_escapes_alike_on_both_paths() {
        let pieces = [
            "{\"k\": ",
            "\"",
            "\\",
            "a",
            "xxxxxxxxxxx",
            "😀",
            "\n",
            "é",
            "\u{1}",
            "}, ",
        ];
        for text in random_texts(&pieces, 80, 40, 99) {
            let mut scalar = Vec::new();
            write_json_string_with::<false>(&mut scalar, &text);
            let mut fast = Vec::new();
            write_json_string(&mut fast, &text);
            assert_eq!(fast, scalar, "{text:?}");
            assert_eq!(scalar, escape_reference(&text), "{text:?}");
        }
    }

    fn d(v: f64) -> String {
        let mut out = Vec::new();
        write_java_double(&mut out, v);
        String::from_utf8(out).unwrap()
    }
    fn f(v: f32) -> String {
        let mut out = Vec::new();
        write_java_float(&mut out, v);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn doubles_match_java() {
        // Expected strings are Java's Double.toString output.
        assert_eq!(d(std::f64::consts::E), "2.718281828459045");
        assert_eq!(d(1e-300), "1.0E-300");
        assert_eq!(d(1.5), "1.5");
        assert_eq!(d(100.0), "100.0");
        assert_eq!(d(0.0), "0.0");
        assert_eq!(d(-0.0), "-0.0");
        assert_eq!(d(0.001), "0.001");
        assert_eq!(d(0.0001), "1.0E-4");
        assert_eq!(d(9999999.0), "9999999.0");
        assert_eq!(d(1e7), "1.0E7");
        assert_eq!(d(12345678.9), "1.23456789E7");
        assert_eq!(d(-1.25e-5), "-1.25E-5");
        assert_eq!(d(f64::NAN), "\"NaN\"");
        assert_eq!(d(f64::NEG_INFINITY), "\"-Infinity\"");
        assert_eq!(d(0.1 + 0.2), "0.30000000000000004");
    }

    #[test]
    fn floats_match_java() {
        assert_eq!(f(-3.4e38), "-3.4E38");
        assert_eq!(f(1.5), "1.5");
        assert_eq!(f(0.1), "0.1");
        assert_eq!(f(f32::INFINITY), "\"Infinity\"");
        assert_eq!(f(123456.78), "123456.78");
    }

    #[test]
    fn strings_escape_like_jackson() {
        let mut out = Vec::new();
        write_json_string(&mut out, "hello ü 日本 \"q\" \\ back\n\t\u{1}\u{7f}/");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\"hello ü 日本 \\\"q\\\" \\\\ back\\n\\t\\u0001\u{7f}/\""
        );
    }

    #[test]
    fn big_decimals_match_java_to_string() {
        let s = |digits: &str, neg: bool, scale: i32| {
            let mut out = Vec::new();
            write_java_big_decimal(&mut out, digits, neg, scale);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(s("1998", false, 2), "19.98");
        assert_eq!(s("1", true, 2), "-0.01");
        assert_eq!(s("0", false, 0), "0");
        assert_eq!(s("1", false, 7), "1E-7");
        assert_eq!(s("1", false, 6), "0.000001");
        assert_eq!(s("1", false, -3), "1E+3");
        assert_eq!(s("123", false, -1), "1.23E+3");
    }
}
