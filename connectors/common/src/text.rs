//! Allocation-free number text for the connectors' hot paths (timestamps, times).
//!
//! Invariant: every function writes exactly what the matching `format!` would (checked
//! against it in the tests), so callers can swap them in without changing an event byte.

/// Appends `value` as at least `width` decimal digits, zero-padded (`{:0width$}`).
pub fn push_digits(out: &mut String, value: u64, width: usize) {
    // The common case of timestamps (months, days, hours, minutes, seconds).
    if width == 2 && value < 100 {
        out.push(char::from(b'0' + (value / 10) as u8));
        out.push(char::from(b'0' + (value % 10) as u8));
        return;
    }
    let mut buf = [b'0'; 20];
    let mut v = value;
    let mut n = 0;
    loop {
        buf[19 - n] = b'0' + (v % 10) as u8;
        v /= 10;
        n += 1;
        if v == 0 {
            break;
        }
    }
    // Pad from the buffer's own zeros when the width fits it.
    let n = if width <= 20 { n.max(width) } else { n };
    out.extend(std::iter::repeat_n('0', width.saturating_sub(n)));
    for &digit in &buf[20 - n..] {
        out.push(char::from(digit));
    }
}

/// Parses up to the first six digits of a fraction of a second as microseconds (`"5"` is
/// 500,000; `"1234567"` is 123,456); `None` when a non-digit comes first.
pub fn micros_of_fraction(frac: &str) -> Option<i64> {
    let mut us: i64 = 0;
    let mut n = 0;
    for b in frac.bytes().take(6) {
        if !b.is_ascii_digit() {
            return None;
        }
        us = us * 10 + i64::from(b - b'0');
        n += 1;
    }
    Some(us * 10i64.pow(6 - n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_are_padded_like_format() {
        for v in [0u64, 5, 9, 10, 59, 99, 100, 123_456, 999_999, u64::MAX] {
            for w in [0usize, 1, 2, 4, 6, 19, 22] {
                let mut out = String::new();
                push_digits(&mut out, v, w);
                assert_eq!(out, format!("{v:0w$}"), "{v} {w}");
            }
        }
    }

    #[test]
    fn fractions_become_micros() {
        assert_eq!(micros_of_fraction(""), Some(0));
        assert_eq!(micros_of_fraction("5"), Some(500_000));
        assert_eq!(micros_of_fraction("000123"), Some(123));
        assert_eq!(micros_of_fraction("1234567"), Some(123_456));
        assert_eq!(micros_of_fraction("x"), None);
    }
}
