//! Java's text forms of numbers, for formats whose bytes come from Java code (Kafka Connect's
//! Jackson-based JSON converter, the MongoDB driver's JSON writer): `Double.toString` and
//! `Float.toString`.
//!
//! Invariant: for finite values the digits are the shortest that round-trip (Rust's), laid out
//! as Java lays them out; JDK 17's `Double.toString` (the pre-JDK-19 algorithm) agrees except in
//! rare cases, of which the one seen in practice, `Double.MIN_VALUE` (`4.9E-324`), is special-cased.

use std::fmt::Write as _;

/// Appends `Double.toString(value)`: `NaN`, `Infinity`, `-Infinity` for the non-finite values.
pub fn write_double(out: &mut Vec<u8>, value: f64) {
    out.extend_from_slice(JavaNumber::double(value).as_bytes());
}

/// Appends `Float.toString(value)` (finite values; non-finite as `NaN`/`Infinity`).
pub fn write_float(out: &mut Vec<u8>, value: f32) {
    out.extend_from_slice(JavaNumber::float(value).as_bytes());
}

/// A number's Java text, laid out in a stack buffer (no allocation).
pub struct JavaNumber {
    buf: [u8; 32],
    len: usize,
}

impl JavaNumber {
    /// `Double.toString(value)`.
    pub fn double(value: f64) -> JavaNumber {
        let mut n = JavaNumber {
            buf: [0; 32],
            len: 0,
        };
        if value.is_nan() {
            n.push(b"NaN");
        } else if value.is_infinite() {
            n.push(if value < 0.0 {
                b"-Infinity"
            } else {
                b"Infinity"
            });
        } else if value.abs() == f64::from_bits(1) {
            // JDK < 19 prints the smallest subnormal with two digits.
            n.push(if value < 0.0 {
                b"-4.9E-324"
            } else {
                b"4.9E-324"
            });
        } else if let Some(plain) = JavaNumber::plain_decimal(value) {
            return plain;
        } else if let Some((digits, exp)) = short_decimal(value) {
            if value < 0.0 {
                n.push_byte(b'-');
            }
            n.layout_digits(&digits.0[..digits.1], exp, value.abs());
        } else {
            let mut text = StackText {
                buf: [0; 48],
                len: 0,
            };
            let _ = write!(text, "{value:e}");
            let shortest = std::str::from_utf8(&text.buf[..text.len]).unwrap_or("0");
            n.layout(shortest, value == 0.0, value.abs());
        }
        n
    }

    /// `Float.toString(value)`.
    pub fn float(value: f32) -> JavaNumber {
        if !value.is_finite() {
            return JavaNumber::double(f64::from(value));
        }
        let mut n = JavaNumber {
            buf: [0; 32],
            len: 0,
        };
        let mut text = StackText {
            buf: [0; 48],
            len: 0,
        };
        let _ = write!(text, "{value:e}");
        let shortest = std::str::from_utf8(&text.buf[..text.len]).unwrap_or("0");
        n.layout(shortest, value == 0.0, f64::from(value.abs()));
        n
    }

    /// The text.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        debug_assert!(self.as_bytes().is_ascii());
        // SAFETY: the text is ASCII (digits, `-`, `.`, `E` and the letters of `NaN` and
        // `Infinity` are all this type ever writes), and ASCII is valid UTF-8.
        unsafe { std::str::from_utf8_unchecked(self.as_bytes()) }
    }

    /// `Double.toString` of the most common doubles in data, those in Java's plain range
    /// [1e-3, 1e7) that are exactly decimals with at most four fraction digits (prices,
    /// amounts, measurements): integer digits, `.`, the fraction digits (`0` when none). The
    /// fewest fraction digits that give back the value are the shortest round-trip digits, so
    /// this is what the general path writes, with less work.
    fn plain_decimal(value: f64) -> Option<JavaNumber> {
        let magnitude = value.abs();
        if !(1e-3..1e7).contains(&magnitude) {
            return None;
        }
        // In ten-thousandths: below 1e11, so the u64 holds it. An exact decimal's product lies
        // within a few ulps of its integer, so rounding by adding a half finds it (ties cannot
        // round-trip). When the value is the double nearest that many ten-thousandths, it is
        // also the double nearest the same decimal with its trailing zeros dropped, and no
        // shorter decimal gives it (two decimals of at most 11 significant digits are never
        // the same double), so those digits are the shortest round-trip digits.
        let scaled = (magnitude * 10_000.0 + 0.5) as u64;
        if scaled as f64 / 10_000.0 != magnitude {
            return None;
        }
        // Laid out from the right: the fraction's digits without its trailing zeros (`0` when
        // there are none), `.`, the integer digits, the sign.
        let mut text = [0u8; 24];
        let mut start = text.len();
        let mut fraction = scaled % 10_000;
        if fraction == 0 {
            start -= 1;
            text[start] = b'0';
        } else {
            let mut digits = 4;
            while fraction.is_multiple_of(10) {
                fraction /= 10;
                digits -= 1;
            }
            for _ in 0..digits {
                start -= 1;
                text[start] = b'0' + (fraction % 10) as u8;
                fraction /= 10;
            }
        }
        start -= 1;
        text[start] = b'.';
        let mut integer = scaled / 10_000;
        loop {
            start -= 1;
            text[start] = b'0' + (integer % 10) as u8;
            integer /= 10;
            if integer == 0 {
                break;
            }
        }
        if value < 0.0 {
            start -= 1;
            text[start] = b'-';
        }
        let mut n = JavaNumber {
            buf: [0; 32],
            len: 0,
        };
        n.push(&text[start..]);
        Some(n)
    }

    fn push(&mut self, bytes: &[u8]) {
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }

    fn push_byte(&mut self, b: u8) {
        self.buf[self.len] = b;
        self.len += 1;
    }

    /// Lays out the shortest round-trip text `shortest` (Rust's `{:e}`: `-9.99e0`, `1e21`,
    /// `1.5e-7`; plain forms such as `0.001` are read too) as Java's `Double.toString` does: plain decimal with at least one fraction
    /// digit for magnitudes in [1e-3, 1e7), otherwise `d.dddE±n` with at least one fraction
    /// digit.
    fn layout(&mut self, shortest: &str, is_zero: bool, magnitude: f64) {
        let (negative, unsigned) = match shortest.strip_prefix('-') {
            Some(u) => (true, u),
            None => (false, shortest),
        };
        if negative {
            self.push_byte(b'-');
        }
        if is_zero {
            self.push(b"0.0");
            return;
        }
        let (digits, exp) = scientific(unsigned);
        self.layout_digits(&digits.0[..digits.1], exp, magnitude);
    }

    /// Lays out a non-zero magnitude given as its significant digits `d.ddd` and decimal
    /// exponent (the sign is written already).
    fn layout_digits(&mut self, digits: &[u8], exp: i32, magnitude: f64) {
        if (1e-3..1e7).contains(&magnitude) {
            if exp >= 0 {
                let int_len = usize::try_from(exp).unwrap_or(0) + 1;
                for i in 0..int_len {
                    self.push_byte(*digits.get(i).unwrap_or(&b'0'));
                }
                self.push_byte(b'.');
                if digits.len() > int_len {
                    self.push(&digits[int_len..]);
                } else {
                    self.push_byte(b'0');
                }
            } else {
                self.push(b"0.");
                for _ in 0..(-exp - 1) {
                    self.push_byte(b'0');
                }
                self.push(digits);
            }
        } else {
            self.push_byte(digits[0]);
            self.push_byte(b'.');
            if digits.len() > 1 {
                self.push(&digits[1..]);
            } else {
                self.push_byte(b'0');
            }
            self.push_byte(b'E');
            if exp < 0 {
                self.push_byte(b'-');
            }
            // Exponents of doubles have at most three digits.
            let e = exp.unsigned_abs();
            if e >= 100 {
                self.push_byte(b'0' + (e / 100) as u8);
            }
            if e >= 10 {
                self.push_byte(b'0' + (e / 10 % 10) as u8);
            }
            self.push_byte(b'0' + (e % 10) as u8);
        }
    }
}

/// Formatted text in a stack buffer.
struct StackText {
    buf: [u8; 48],
    len: usize,
}

impl std::fmt::Write for StackText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        self.buf
            .get_mut(self.len..end)
            .ok_or(std::fmt::Error)?
            .copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// The powers of ten [`short_decimal`] tries.
const POWERS_OF_TEN: [f64; 5] = [1.0, 10.0, 100.0, 1_000.0, 10_000.0];

/// The shortest digits and exponent of a non-zero `value` that is exactly a decimal with at
/// most 4 fraction digits and 15 significant digits (prices, amounts, counts), found without
/// the general shortest-digits search; `None` for other values.
///
/// Why the result is the shortest: `n / 10^k` with `|n| < 10^15` is computed exactly rounded
/// (both operands are exact doubles), so equality with `value` means the decimal text `n·10^-k`
/// reads back as `value`; and two different decimals of at most 15 significant digits never
/// read back as the same double, so this decimal, without trailing zeros, is the shortest one.
fn short_decimal(value: f64) -> Option<(([u8; 32], usize), i32)> {
    let magnitude = value.abs();
    if !(1e-4..1e15).contains(&magnitude) {
        return None;
    }
    for (k, power) in POWERS_OF_TEN.iter().enumerate() {
        let scaled = (magnitude * power).round();
        if scaled >= 1e15 {
            return None;
        }
        if scaled / power != magnitude {
            continue;
        }
        let mut n = scaled as u64;
        if n == 0 {
            return None;
        }
        // Digits of n, most significant first.
        let mut digits = [0u8; 32];
        let mut len = 0;
        let mut reversed = [0u8; 20];
        while n > 0 {
            reversed[len] = b'0' + (n % 10) as u8;
            n /= 10;
            len += 1;
        }
        for i in 0..len {
            digits[i] = reversed[len - 1 - i];
        }
        let exp = len as i32 - 1 - k as i32;
        while len > 1 && digits[len - 1] == b'0' {
            len -= 1;
        }
        return Some(((digits, len), exp));
    }
    None
}

/// The significant digits (no leading or trailing zeros, at least one) and the decimal
/// exponent `e` of an unsigned non-zero decimal text such as `9.99`, `1e21`, `1.5e-7` or
/// `0.001`: the value is `d.ddd × 10^e`.
fn scientific(text: &str) -> (([u8; 32], usize), i32) {
    let (mantissa, suffix) = text.split_once(['e', 'E']).unwrap_or((text, "0"));
    let suffix: i32 = suffix.parse().unwrap_or(0);
    let mut all = [0u8; 32];
    let mut count = 0;
    let mut before_point = None;
    for b in mantissa.bytes() {
        if b == b'.' {
            before_point = Some(count);
        } else if count < all.len() {
            all[count] = b;
            count += 1;
        }
    }
    let before_point = before_point.unwrap_or(count) as i32;
    let leading = all[..count].iter().take_while(|d| **d == b'0').count();
    let mut end = count;
    while end > leading + 1 && all[end - 1] == b'0' {
        end -= 1;
    }
    let mut digits = [0u8; 32];
    let len = end - leading;
    digits[..len].copy_from_slice(&all[leading..end]);
    // value = 0.(all) × 10^(before_point + suffix) = 0.(digits) × 10^(… - leading).
    let exp = before_point + suffix - leading as i32 - 1;
    ((digits, len), exp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(v: f64) -> String {
        let mut out = Vec::new();
        write_double(&mut out, v);
        String::from_utf8(out).unwrap()
    }

    /// The former implementation (Rust's `{:e}` shortest form, re-laid out), kept as the
    /// reference the stack-buffer one is checked against.
    fn reference(sci: &str, is_zero: bool, magnitude: f64) -> String {
        let (mantissa, exp) = sci.split_once('e').unwrap_or((sci, "0"));
        let exp: i32 = exp.parse().unwrap();
        let (negative, mantissa) = match mantissa.strip_prefix('-') {
            Some(m) => (true, m),
            None => (false, mantissa),
        };
        let mut out = String::new();
        if negative {
            out.push('-');
        }
        if is_zero {
            out.push_str("0.0");
            return out;
        }
        let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
        if (1e-3..1e7).contains(&magnitude) {
            if exp >= 0 {
                let int_len = exp as usize + 1;
                for i in 0..int_len {
                    out.push(digits.as_bytes().get(i).map_or('0', |b| char::from(*b)));
                }
                out.push('.');
                if digits.len() > int_len {
                    out.push_str(&digits[int_len..]);
                } else {
                    out.push('0');
                }
            } else {
                out.push_str("0.");
                for _ in 0..(-exp - 1) {
                    out.push('0');
                }
                out.push_str(&digits);
            }
        } else {
            out.push_str(&digits[..1]);
            out.push('.');
            if digits.len() > 1 {
                out.push_str(&digits[1..]);
            } else {
                out.push('0');
            }
            out.push('E');
            out.push_str(&exp.to_string());
        }
        out
    }

    #[test]
    fn shortest_digits_match_the_former_formatting_on_random_values() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut checked = 0;
        for i in 0..400_000u32 {
            let bits = next();
            // Random bit patterns, and values near the plain/scientific boundaries.
            let v = match i % 4 {
                0 | 1 => f64::from_bits(bits),
                2 => {
                    (bits % 100_000_000) as f64 / [1.0, 100.0, 1e4, 1e9][(bits >> 60) as usize % 4]
                }
                _ => f64::from_bits(bits) % 1e8,
            };
            if !v.is_finite() || v.abs() == f64::from_bits(1) {
                continue;
            }
            let want = reference(&format!("{v:e}"), v == 0.0, v.abs());
            assert_eq!(d(v), want, "{v:e}");
            let f = f32::from_bits(bits as u32);
            if f.is_finite() {
                let mut out = Vec::new();
                write_float(&mut out, f);
                let want = reference(&format!("{f:e}"), f == 0.0, f64::from(f.abs()));
                assert_eq!(String::from_utf8(out).unwrap(), want, "{f:e}");
            }
            checked += 1;
        }
        assert!(checked > 300_000);
        // Decimals with few fraction digits, computed two ways (the product is often not the
        // decimal itself), through the short-decimal path and around it.
        let mut short = 0;
        let mut plain = 0;
        for n in (1..3_000_000u64).step_by(7) {
            for v in [
                n as f64 / 100.0,
                n as f64 * 0.01,
                n as f64 / 10_000.0,
                n as f64 * 1e-3,
                -(n as f64) / 10.0,
                n as f64 * 1e8,
            ] {
                let want = reference(&format!("{v:e}"), v == 0.0, v.abs());
                assert_eq!(d(v), want, "{v:e}");
                short += usize::from(short_decimal(v).is_some());
                plain += usize::from(JavaNumber::plain_decimal(v).is_some());
            }
        }
        assert!(
            short > 1_000_000,
            "{short} values took the short-decimal path"
        );
        assert!(plain > 1_000_000, "{plain} values took the plain path");
    }

    #[test]
    fn doubles_as_java_prints_them() {
        for (v, want) in [
            (0.1, "0.1"),
            (1.0, "1.0"),
            (-1.0, "-1.0"),
            (100.0, "100.0"),
            (1e7, "1.0E7"),
            (0.001, "0.001"),
            (1e-4, "1.0E-4"),
            (1.23456789125e8, "1.23456789125E8"),
            (0.30000000000000004, "0.30000000000000004"),
            (-0.0, "-0.0"),
            (5e-324, "4.9E-324"),
            (1.7976931348623157e308, "1.7976931348623157E308"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
        ] {
            assert_eq!(d(v), want, "{v}");
        }
    }
}
