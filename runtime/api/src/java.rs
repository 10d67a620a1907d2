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
    if value.is_nan() {
        out.extend_from_slice(b"NaN");
        return;
    }
    if value.is_infinite() {
        out.extend_from_slice(if value < 0.0 {
            b"-Infinity"
        } else {
            b"Infinity"
        });
        return;
    }
    if value.abs() == f64::from_bits(1) {
        // JDK < 19 prints the smallest subnormal with two digits.
        out.extend_from_slice(if value < 0.0 {
            b"-4.9E-324"
        } else {
            b"4.9E-324"
        });
        return;
    }
    let mut scratch = String::with_capacity(32);
    let _ = write!(scratch, "{value:e}");
    java_format(out, &scratch, value == 0.0, f64::abs(value));
}

/// Appends `Float.toString(value)` (finite values; non-finite as `NaN`/`Infinity`).
pub fn write_float(out: &mut Vec<u8>, value: f32) {
    if !value.is_finite() {
        write_double(out, f64::from(value));
        return;
    }
    let mut scratch = String::with_capacity(24);
    let _ = write!(scratch, "{value:e}");
    java_format(out, &scratch, value == 0.0, f64::from(value.abs()));
}

/// Rewrites Rust's shortest scientific form (`-3.4e38`, `1e-300`, `2.5e0`) into Java's
/// `Double.toString` layout: plain decimal with at least one fraction digit for magnitudes in
/// [1e-3, 1e7), otherwise `d.dddE±n` with at least one fraction digit.
fn java_format(out: &mut Vec<u8>, sci: &str, is_zero: bool, magnitude: f64) {
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (negative, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    if negative {
        out.push(b'-');
    }
    if is_zero {
        out.extend_from_slice(b"0.0");
        return;
    }
    // Significant digits without the point.
    let digits: Vec<u8> = mantissa.bytes().filter(|b| *b != b'.').collect();
    if (1e-3..1e7).contains(&magnitude) {
        if exp >= 0 {
            let int_len = usize::try_from(exp).unwrap_or(0) + 1;
            for i in 0..int_len {
                out.push(*digits.get(i).unwrap_or(&b'0'));
            }
            out.push(b'.');
            if digits.len() > int_len {
                out.extend_from_slice(&digits[int_len..]);
            } else {
                out.push(b'0');
            }
        } else {
            out.extend_from_slice(b"0.");
            for _ in 0..(-exp - 1) {
                out.push(b'0');
            }
            out.extend_from_slice(&digits);
        }
    } else {
        out.push(digits[0]);
        out.push(b'.');
        if digits.len() > 1 {
            out.extend_from_slice(&digits[1..]);
        } else {
            out.push(b'0');
        }
        out.push(b'E');
        out.extend_from_slice(exp.to_string().as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(v: f64) -> String {
        let mut out = Vec::new();
        write_double(&mut out, v);
        String::from_utf8(out).unwrap()
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
