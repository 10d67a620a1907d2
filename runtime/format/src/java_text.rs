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
    use headwater_api::scan::{flagged_mask16, is_flagged};
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
        let mut mask = flagged_mask16::<HIGH>(bytes, chunk);
        while mask != 0 {
            let at = chunk + mask.trailing_zeros() as usize;
            mask &= mask - 1;
            // (Only lead bytes are flagged, so `at` is never inside a character written.)
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
        chunk += 16;
    }
    for at in chunk.max(written)..bytes.len() {
        if at >= written && is_flagged::<HIGH>(bytes[at]) {
            copy_run(out, bytes, written, at);
            written = at + write_escape(out, text, at);
        }
    }
    out.extend_from_slice(&bytes[written..]);
    out.push(b'"');
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
        let mut seed = 12345u32;
        for len in 0..40 {
            for _ in 0..50 {
                let mut text = String::new();
                for _ in 0..len {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    text.push_str(pieces[(seed >> 16) as usize % pieces.len()]);
                }
                let mut out = Vec::new();
                write_json_string(&mut out, &text);
                assert_eq!(out, escape_reference(&text), "{text:?}");
            }
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
